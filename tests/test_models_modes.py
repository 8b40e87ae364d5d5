"""The multimodal binary target: density against brute force, the exact mode masses, the
pattern generator, and the cyclical-step samplers on it against enumeration."""

import pyro
import pytest
import torch
from exactness import assert_exact, draw_codes

from pyro_gwg import DLMC, NCG, ModelDensity, exact_posterior
from pyro_gwg.models import binary_modes, mode_responsibilities, random_binary_modes

#: three modes on eight bits, two flips apart: small enough to enumerate
SMALL = random_binary_modes(3, 8, 2, 0.2, seed=1)


def _brute_force(x, patterns, weights, eps):
    """log sum_k w_k prod_i eps^[x_i != m_ki] (1 - eps)^[x_i == m_ki], one state."""
    total = 0.0
    for pattern, weight in zip(patterns, weights):
        flips = int((x != pattern).sum())
        total += float(weight) * eps**flips * (1 - eps) ** (len(x) - flips)
    return torch.tensor(total).log()


def test_density_matches_brute_force():
    post = exact_posterior(binary_modes, *SMALL)
    states = post.states().double()
    brute = torch.stack([_brute_force(x, *SMALL) for x in states]).double()
    assert torch.allclose(post.log_probs.double(), brute - brute.logsumexp(0), atol=1e-5)


def test_model_broadcasts_over_chains():
    target = random_binary_modes(4, 32, 8, 0.1, seed=0)
    density = ModelDensity(binary_modes, target)
    codes = torch.randint(0, 2, (5, 32))
    log_joint, _ = density.value_and_grad(codes)
    brute = torch.stack([_brute_force(x, *target) for x in codes.double()])
    assert torch.allclose(
        log_joint.double(), brute.double() + 32 * torch.tensor(0.5).log(), atol=1e-4
    )


def test_mean_responsibility_is_the_mode_weight():
    post = exact_posterior(binary_modes, *SMALL)
    resp = mode_responsibilities(post.states(), *SMALL).double()
    masses = (post.log_probs.double().exp().unsqueeze(-1) * resp).sum(0)
    assert torch.allclose(masses, SMALL.weights.double(), atol=1e-6)
    assert torch.allclose(resp.sum(-1), torch.ones(len(resp), dtype=torch.float64), atol=1e-6)


def test_random_patterns_are_the_distance_apart():
    target = random_binary_modes(5, 50, 10, 0.1, seed=3)
    distances = (target.patterns[:, None] != target.patterns[None]).sum(-1)
    assert torch.equal(distances, 10 * (1 - torch.eye(5, dtype=torch.long)))
    assert torch.allclose(target.weights, torch.arange(1.0, 6.0) / 15)
    assert target.flip_prob == 0.1
    same = random_binary_modes(5, 50, 10, 0.1, seed=3)
    assert torch.equal(same.patterns, target.patterns)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="even distance and num_bits >= .* = 20"):
        random_binary_modes(4, 16, 10)
    with pytest.raises(ValueError, match="even distance"):
        random_binary_modes(2, 16, 5)
    with pytest.raises(ValueError, match="flip_prob"):
        random_binary_modes(2, 16, 4, flip_prob=0.5)
    with pytest.raises(ValueError, match="weights must be 2 positive numbers"):
        random_binary_modes(2, 16, 4, weights=torch.tensor([1.0, 0.0]))


@pytest.mark.slow
@pytest.mark.parametrize("kernel", [NCG, DLMC])
def test_cyclical_samplers_are_exact_on_the_modes(kernel):
    pyro.set_rng_seed(0)
    sampler = kernel(binary_modes, step_size_schedule="cyclical", jit_compile=True)
    codes = draw_codes(sampler, 64, 400, 100, *SMALL)
    assert_exact(codes, exact_posterior(binary_modes, *SMALL))
