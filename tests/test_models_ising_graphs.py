"""The general Ising model ising(J, b) and its coupling generators."""

import pyro
import pytest
import torch
from exactness import assert_exact, draw_codes

from pyro_gwg import GWG, Gibbs, ModelDensity, exact_posterior
from pyro_gwg.models import erdos_renyi_couplings, ising, lattice_couplings, lattice_ising


def test_density_matches_brute_force():
    couplings = erdos_renyi_couplings(num_nodes=6, avg_degree=3.0, seed=1)
    bias = torch.tensor([0.3, -0.5, 0.0, 0.2, 0.1, -0.1])
    post = exact_posterior(ising, couplings, bias)
    s = (2 * post.states() - 1).double()
    energy = ((s @ couplings.double()) * s).sum(-1) + s @ bias.double()
    assert torch.allclose(post.log_probs.double(), energy - energy.logsumexp(0), atol=1e-5)


@pytest.mark.parametrize("periodic", [True, False])
def test_lattice_couplings_give_the_lattice_model(periodic):
    bias = torch.full((9,), 0.2)
    general = exact_posterior(ising, lattice_couplings(3, 0.15, periodic), bias)
    lattice = exact_posterior(lattice_ising, size=3, coupling=0.3, bias=0.2, periodic=periodic)
    assert torch.allclose(general.log_probs, lattice.log_probs, atol=1e-5)


def test_lattice_couplings_are_the_adjacency_matrix():
    couplings = lattice_couplings(4, 1.0)
    assert torch.equal(couplings, couplings.T) and couplings.diagonal().eq(0).all()
    assert couplings.sum(0).eq(4).all()  # every spin has four neighbours on the torus
    free = lattice_couplings(4, 1.0, periodic=False)
    assert free.sum() == 2 * 2 * 4 * 3  # 24 bonds, each stored twice
    assert free[0].nonzero().reshape(-1).tolist() == [1, 4]


def test_erdos_renyi_couplings_are_symmetric_seeded_and_sparse():
    couplings = erdos_renyi_couplings(num_nodes=300, avg_degree=4.0, seed=2)
    assert torch.equal(couplings, couplings.T) and couplings.diagonal().eq(0).all()
    assert torch.equal(couplings, erdos_renyi_couplings(num_nodes=300, avg_degree=4.0, seed=2))
    degree = (couplings != 0).sum(0).float().mean()
    assert 3.5 < float(degree) < 4.5
    weights = couplings[couplings != 0]
    assert 0.4 < float(weights.std()) < 0.6  # N(0, 1 / 4)


def test_model_broadcasts_over_chains():
    energy = ModelDensity(ising, (erdos_renyi_couplings(10, seed=0),))
    energy.check_vectorized(torch.randint(0, 2, (4, 10)))


@pytest.mark.parametrize("make", [GWG, Gibbs])
def test_samplers_sample_a_small_graph_exactly(make):
    # halved couplings: at full strength the posterior has well separated modes that
    # single-flip chains of this length cross too rarely for a reliable ESS
    couplings = 0.5 * erdos_renyi_couplings(num_nodes=7, avg_degree=3.0, seed=3)
    bias = torch.linspace(-0.4, 0.4, 7)
    pyro.set_rng_seed(0)
    codes = draw_codes(make(ising, jit_compile=True), 64, 1500, 100, couplings, bias)
    assert_exact(codes, exact_posterior(ising, couplings, bias))
