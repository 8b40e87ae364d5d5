"""Sample-quality diagnostics: Hamming ESS, MMD, errors against the exact posterior."""

import itertools

import arviz
import numpy as np
import pytest
import torch
from small_models import SUITE

from pyro_gwg import exact_posterior
from pyro_gwg.diagnostics import (
    hamming_ess,
    hamming_statistic,
    marginal_error,
    mmd,
    pairwise_error,
    reference_state,
    tv_distance,
)


def test_reference_state_has_half_ones_and_is_seeded():
    for num_coords in (1, 7, 100):
        ref = reference_state(num_coords, seed=4)
        assert ref.shape == (num_coords,) and int(ref.sum()) == num_coords // 2
    assert torch.equal(reference_state(50, seed=1), reference_state(50, seed=1))
    assert not torch.equal(reference_state(50, seed=1), reference_state(50, seed=2))


def test_hamming_statistic_counts_differences():
    codes = torch.tensor([[[0, 1, 1, 0], [1, 1, 1, 1]]])
    reference = torch.tensor([0, 0, 1, 1])
    assert hamming_statistic(codes, reference).tolist() == [[2.0, 2.0]]
    assert hamming_statistic(codes[0, 0], reference).item() == 2.0
    default = hamming_statistic(codes, seed=3)
    assert torch.equal(default, hamming_statistic(codes, reference_state(4, seed=3)))


def test_hamming_ess_is_arviz_per_chain():
    torch.manual_seed(0)
    independent = torch.randint(0, 2, (3, 400, 20))
    ess = hamming_ess(independent)
    assert ess.shape == (3,) and ((ess > 250) & (ess < 600)).all()
    series = hamming_statistic(independent[1]).double().numpy()
    assert float(ess[1]) == pytest.approx(float(arviz.ess(series[None])))
    # a sticky chain: the same state repeated 20 times
    sticky = independent[:, :20].repeat_interleave(20, dim=1)
    assert (hamming_ess(sticky) < 60).all()
    assert hamming_ess(torch.zeros(2, 50, 6, dtype=torch.long)).tolist() == [1.0, 1.0]
    assert hamming_ess(independent[0]).shape == (1,)


def brute_mmd(x, y, unbiased):
    def k(a, b):
        return float(np.exp(-float((a != b).sum()) / a.shape[0]))

    def mean_within(a):
        pairs = [
            (i, j) for i, j in itertools.product(range(len(a)), repeat=2) if i != j or not unbiased
        ]
        return sum(k(a[i], a[j]) for i, j in pairs) / len(pairs)

    cross = sum(k(a, b) for a in x for b in y) / (len(x) * len(y))
    return mean_within(x) + mean_within(y) - 2 * cross


@pytest.mark.parametrize("unbiased", [False, True])
def test_mmd_matches_the_definition(unbiased):
    torch.manual_seed(1)
    x, y = torch.randint(0, 2, (6, 5)), torch.randint(0, 3, (4, 5))
    assert float(mmd(x, y, unbiased)) == pytest.approx(brute_mmd(x, y, unbiased), abs=1e-10)


def test_mmd_is_zero_for_equal_sets_and_grows_with_difference():
    torch.manual_seed(2)
    x = torch.randint(0, 2, (50, 30))
    assert float(mmd(x, x)) == pytest.approx(0.0, abs=1e-12)
    near = torch.where(torch.rand(50, 30) < 0.1, 1 - x, x)
    far = torch.where(torch.rand(50, 30) < 0.5, 1 - x, x)
    assert 0 < float(mmd(x, near)) < float(mmd(x, far))


@pytest.fixture(scope="module")
def posterior():
    model, args = SUITE["mixed_kinds"]
    return exact_posterior(model, *args)


def test_errors_vanish_for_the_exact_distribution(posterior):
    # every state repeated in proportion to its probability (rounded): near-exact draws
    counts = (posterior.probs * 200000).round().long()
    codes = posterior.states().repeat_interleave(counts, dim=0)
    assert marginal_error(codes, posterior) < 1e-4
    assert pairwise_error(codes, posterior) < 1e-4
    assert tv_distance(codes, posterior) < 1e-3


def test_errors_of_a_point_mass(posterior):
    state = posterior.states(posterior.probs.argmax().reshape(1))
    codes = state.repeat(10, 1)
    p_state = float(posterior.probs.max())
    assert tv_distance(codes, posterior) == pytest.approx(1 - p_state, abs=1e-6)
    # marginal error by hand: for each coordinate, |1 - p(v*)| + sum of the other p(v)
    marginals = posterior.flat_marginals()
    sizes = posterior.size
    errors = []
    for i, v in enumerate((state[0] - posterior.offset).tolist()):
        for w in range(int(sizes[i])):
            errors.append(abs(float(w == v) - float(marginals[i, w])))
    assert marginal_error(codes, posterior) == pytest.approx(np.mean(errors), abs=1e-6)
    pair = pairwise_error(codes, posterior)
    assert 0 < pair < 1


def test_errors_accept_chains_and_draws(posterior):
    draws = posterior.sample_codes(3000).reshape(3, 1000, -1)
    assert marginal_error(draws, posterior) < 0.03
    assert pairwise_error(draws, posterior) < 0.03
    assert tv_distance(draws, posterior) < 0.2
