"""Potts models: densities against brute force, generator, samplers."""

import itertools

import pyro
import pytest
import torch
from exactness import assert_exact, draw_codes

from pyro_gwg import GWG, HammingBall, ModelDensity, exact_posterior
from pyro_gwg.models import lattice_potts, potts, random_potts


def lattice_energy(z, coupling, bias, periodic):
    """theta * sum over bonds [z_i == z_j] + sum_i bias[z_i], for categories ``z [H, W]``."""
    height, width = z.shape
    total = 0.0
    for i, j in itertools.product(range(height), range(width)):
        total += float(bias[z[i, j]])
        for di, dj in ((0, 1), (1, 0)):
            k, m = i + di, j + dj
            if periodic:
                k, m = k % height, m % width
            elif k >= height or m >= width:
                continue
            total += coupling * float(z[i, j] == z[k, m])
    return total


@pytest.mark.parametrize("periodic", [True, False])
def test_lattice_potts_density_matches_brute_force(periodic):
    bias = torch.tensor([0.3, -0.2, 0.0])
    post = exact_posterior(
        lattice_potts, size=2, num_states=3, coupling=0.7, bias=bias, periodic=periodic
    )
    states = post.states().reshape(-1, 2, 2)
    energy = torch.tensor([lattice_energy(z, 0.7, bias, periodic) for z in states]).double()
    assert torch.allclose(post.log_probs.double(), energy - energy.logsumexp(0), atol=1e-5)


def test_dense_potts_density_matches_brute_force():
    params = random_potts(num_sites=3, num_states=3, coupling_scale=0.5, seed=1)
    post = exact_posterior(potts, *params)
    onehot = torch.nn.functional.one_hot(post.states(), 3).double()
    couplings, bias = (p.double() for p in params)
    energy = torch.einsum("nik,ijkl,njl->n", onehot, couplings, onehot)
    energy = energy + (onehot * bias).sum((-2, -1))
    assert torch.allclose(post.log_probs.double(), energy - energy.logsumexp(0), atol=1e-5)


def test_random_potts_is_symmetric_and_seeded():
    couplings, bias = random_potts(num_sites=5, num_states=4, seed=2)
    assert couplings.shape == (5, 5, 4, 4) and bias.shape == (5, 4)
    assert torch.equal(couplings, couplings.permute(1, 0, 3, 2))
    assert couplings[range(5), range(5)].eq(0).all()
    assert torch.equal(couplings, random_potts(num_sites=5, num_states=4, seed=2).couplings)


def test_models_broadcast_over_chains():
    for model, args in (
        (lattice_potts, (3, 4, 0.5)),
        (potts, tuple(random_potts(num_sites=4, num_states=3, seed=0))),
    ):
        energy = ModelDensity(model, args)
        high = 4 if model is lattice_potts else 3
        energy.check_vectorized(torch.randint(0, high, (3, energy.num_coords)))


@pytest.mark.parametrize(
    "make", [lambda m: GWG(m, jit_compile=True), lambda m: HammingBall(m, block_size=2)]
)
def test_samplers_sample_a_tiny_potts_model_exactly(make):
    params = random_potts(num_sites=3, num_states=3, coupling_scale=0.5, seed=1)
    pyro.set_rng_seed(0)
    codes = draw_codes(make(potts), 64, 1500, 100, *params)
    assert_exact(codes, exact_posterior(potts, *params))
