"""Factorial HMM: density against the explicit formula, data generator, samplers."""

import math

import pyro
import pytest
import torch
from exactness import assert_exact, draw_codes

from pyro_gwg import GWG, Gibbs, HammingBall, ModelDensity, exact_posterior
from pyro_gwg.models import factorial_hmm, fhmm_prior_sample, fhmm_time_blocks, random_fhmm


def explicit_log_joint(x, data):
    """log p(x, y), term by term, for one path ``x [T, K]``."""
    params = data.params
    total = 0.0
    num_steps, num_factors = x.shape
    for k in range(num_factors):
        alpha, beta = float(params.init_prob[k]), float(params.switch_prob[k])
        total += math.log(alpha if x[0, k] else 1 - alpha)
        for t in range(1, num_steps):
            total += math.log(beta if x[t, k] != x[t - 1, k] else 1 - beta)
    for t in range(num_steps):
        mean = float(x[t].float() @ params.weights + params.bias)
        total += float(torch.distributions.Normal(mean, params.noise_scale).log_prob(data.y[t]))
    return total


def test_density_matches_the_explicit_formula():
    data = random_fhmm(num_steps=4, num_factors=3, seed=1)
    post = exact_posterior(factorial_hmm, data.y, *data.params)
    states = post.states().reshape(-1, 4, 3)
    log_joint = torch.tensor([explicit_log_joint(x, data) for x in states], dtype=torch.float64)
    assert torch.allclose((post.log_probs + post.log_normalizer).double(), log_joint, atol=1e-4)


def test_generator_is_seeded_and_consistent():
    data = random_fhmm(num_steps=200, num_factors=5, seed=3)
    again = random_fhmm(num_steps=200, num_factors=5, seed=3)
    assert torch.equal(data.y, again.y) and torch.equal(data.x, again.x)
    assert data.x.shape == (200, 5) and data.y.shape == (200,)
    assert set(data.x.unique().tolist()) <= {0.0, 1.0}
    switch_rate = (data.x[1:] != data.x[:-1]).float().mean()
    assert 0.02 < float(switch_rate) < 0.09  # beta = 0.05
    residual = data.y - (data.x @ data.params.weights + data.params.bias)
    assert 0.4 < float(residual.std()) < 0.6  # sigma = 0.5


def test_model_broadcasts_and_scores_the_true_path():
    data = random_fhmm(num_steps=50, num_factors=4, seed=0)
    energy = ModelDensity(factorial_hmm, (data.y, *data.params))
    truth = energy.codes_from_values({"x": data.x.unsqueeze(0)})
    codes = torch.cat([truth, torch.randint(0, 2, (3, 200))])
    energy.check_vectorized(codes)
    log_joint = energy.log_joint(codes)
    assert float(log_joint[0]) == pytest.approx(explicit_log_joint(data.x, data), abs=1e-2)
    assert (log_joint[1:] < log_joint[0]).all()


def test_prior_sample_follows_the_markov_prior():
    params = random_fhmm(num_steps=5, num_factors=3, seed=0).params
    generator = torch.Generator().manual_seed(0)
    x = fhmm_prior_sample(params, 400, (50,), generator=generator)
    assert x.shape == (50, 400, 3) and set(x.unique().tolist()) == {0.0, 1.0}
    assert abs(float(x[:, 0].mean()) - 0.1) < 0.05  # alpha
    assert abs(float((x[:, 1:] != x[:, :-1]).float().mean()) - 0.05) < 0.005  # beta


def test_time_blocks_are_the_factors_of_each_step():
    blocks = fhmm_time_blocks(3, 4)
    assert blocks.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


@pytest.mark.parametrize(
    "make",
    [
        lambda: GWG(factorial_hmm, jit_compile=True),
        lambda: Gibbs(factorial_hmm, jit_compile=True),
        lambda: HammingBall(factorial_hmm, blocks=fhmm_time_blocks(3, 2), jit_compile=True),
    ],
)
def test_samplers_sample_a_tiny_fhmm_exactly(make):
    data = random_fhmm(num_steps=3, num_factors=2, noise_scale=0.8, switch_prob=0.2, seed=2)
    pyro.set_rng_seed(0)
    codes = draw_codes(make(), 64, 1500, 100, data.y, *data.params)
    assert_exact(codes, exact_posterior(factorial_hmm, data.y, *data.params))
