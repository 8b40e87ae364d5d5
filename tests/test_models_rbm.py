"""RBM model: density, exact log Z, block Gibbs; samplers on a tiny RBM.

The block-Gibbs kernel is tested in ``tests/contrib/test_contrib_kernels.py``, CD training in
``tests/contrib/test_train_rbm.py``."""

import itertools

import pyro
import pytest
import torch
import torch.nn.functional as F
from exactness import assert_exact, draw_codes

from pyro_gwg import GWG, Gibbs, ModelDensity, exact_posterior
from pyro_gwg.models import (
    block_gibbs,
    categorical_rbm,
    cut_value,
    erdos_renyi_couplings,
    ising,
    maxcut_couplings,
    random_categorical_rbm,
    random_rbm,
    rbm,
    rbm_log_density,
    rbm_log_partition,
)


def brute_log_z(params):
    """log sum over (v, h) of exp(h^T W v + b^T v + c^T h), by explicit enumeration."""
    weights, b, c = (p.double() for p in params)
    num_hidden, num_visible = weights.shape
    terms = []
    for v in itertools.product([0.0, 1.0], repeat=num_visible):
        for h in itertools.product([0.0, 1.0], repeat=num_hidden):
            v_, h_ = torch.tensor(v).double(), torch.tensor(h).double()
            terms.append(h_ @ weights @ v_ + b @ v_ + c @ h_)
    return torch.logsumexp(torch.stack(terms), 0)


@pytest.mark.parametrize("num_visible, num_hidden", [(5, 3), (3, 5)])
def test_log_partition_is_exact(num_visible, num_hidden):
    params = random_rbm(num_visible, num_hidden, weight_scale=0.8, seed=1)
    assert float(rbm_log_partition(params)) == pytest.approx(float(brute_log_z(params)), abs=1e-8)


def test_model_density_is_the_rbm_marginal():
    params = random_rbm(6, 4, weight_scale=0.8, seed=2)
    post = exact_posterior(rbm, *params)
    log_marginal = rbm_log_density(post.states(), params).double()
    assert torch.allclose(
        post.log_probs.double(), log_marginal - rbm_log_partition(params), atol=1e-5
    )
    # the model's normaliser: log Z less the visible Bernoulli normalisers
    shift = float(F.softplus(params.visible_bias).sum())
    assert float(post.log_normalizer) + shift == pytest.approx(
        float(rbm_log_partition(params)), abs=1e-4
    )


def test_model_broadcasts_over_chains():
    params = random_rbm(7, 3, seed=0)
    energy = ModelDensity(rbm, params)
    codes = torch.randint(0, 2, (5, 7))
    energy.check_vectorized(codes)
    expected = rbm_log_density(codes, params) - F.softplus(params.visible_bias).sum()
    assert torch.allclose(energy.log_joint(codes), expected.double(), atol=1e-5)


def test_block_gibbs_samples_exactly():
    params = random_rbm(5, 4, weight_scale=1.0, seed=3)
    torch.manual_seed(0)
    _, trace = block_gibbs(params, num_chains=256, num_steps=400, thin=1)
    codes = trace[50:].transpose(0, 1).long()  # [C, T, V]
    assert_exact(codes, exact_posterior(rbm, *params))


@pytest.mark.parametrize("make", [GWG, Gibbs])
def test_samplers_sample_a_tiny_rbm_exactly(make):
    params = random_rbm(6, 3, weight_scale=1.0, seed=4)
    pyro.set_rng_seed(0)
    codes = draw_codes(make(rbm, jit_compile=True), 64, 1500, 100, *params)
    assert_exact(codes, exact_posterior(rbm, *params))


def test_random_rbm_is_seeded_and_shaped():
    a, b = random_rbm(7, 3, seed=5), random_rbm(7, 3, seed=5)
    assert (
        a.weights.shape == (3, 7) and a.visible_bias.shape == (7,) and a.hidden_bias.shape == (3,)
    )
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    with pytest.raises(ValueError, match="annealed importance"):
        rbm_log_partition(random_rbm(40, 30))


def test_categorical_rbm_is_the_marginal_of_its_hidden_units():
    weights, visible_bias, hidden_bias = random_categorical_rbm(3, 3, 2, weight_scale=1.0, seed=1)
    posterior = exact_posterior(categorical_rbm, weights, visible_bias, hidden_bias)
    v = posterior.energy.values_from_codes(posterior.states())["v"].float()  # all states
    # log p(v) up to a constant by summing the two hidden units explicitly
    hidden = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    energy = torch.einsum("sik,jik->sj", v, weights) + hidden_bias
    joint = (hidden @ energy.T).T + (v * visible_bias).sum((-2, -1)).unsqueeze(-1)
    log_p = joint.logsumexp(-1).double()
    assert torch.allclose(posterior.log_probs, log_p - log_p.logsumexp(0), atol=1e-5)


def test_maxcut_density_is_the_boltzmann_distribution_of_the_cut():
    weights = erdos_renyi_couplings(6, 3.0, seed=2).abs()
    posterior = exact_posterior(ising, maxcut_couplings(weights, temperature=0.5))
    cut = cut_value(posterior.energy.values_from_codes(posterior.states())["x"], weights)
    log_p = (cut / 0.5).double()
    assert torch.allclose(posterior.log_probs, log_p - log_p.logsumexp(0), atol=1e-5)
    with pytest.raises(ValueError, match="temperature must be positive"):
        maxcut_couplings(weights, 0.0)
