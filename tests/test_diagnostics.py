"""Sample-quality diagnostics: Hamming ESS, MMD, errors against the exact posterior."""

import itertools
import math

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
    site_diagnostics,
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


# ---------------------------------------------------------------- site_diagnostics


def _split_and_arviz_ess(draws: torch.Tensor):
    """``(chains, ess)``: the chains ``[C, T, n]`` split in halves as ArviZ splits them
    (``[2C, T // 2, n]``) and ArviZ's ESS of each coordinate (``method="mean"``,
    which splits the chains itself), so that the ESS of the split chains is ArviZ's."""
    half = draws.shape[1] // 2
    split = torch.cat([draws[:, :half], draws[:, draws.shape[1] - half :]])
    array = draws.double().numpy()
    ess = np.array([arviz.ess(array[..., i], method="mean") for i in range(draws.shape[-1])])
    return split, ess


def _ar1(phi: float, shape, seed: int) -> torch.Tensor:
    """AR(1) chains x_t = phi x_{t-1} + noise, shaped [C, T, n], in double precision."""
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(shape, generator=generator, dtype=torch.float64)
    x = torch.empty_like(noise)
    x[:, 0] = noise[:, 0]
    for t in range(1, shape[1]):
        x[:, t] = phi * x[:, t - 1] + noise[:, t]
    return x


@pytest.mark.parametrize(
    "phi, num_chains, num_draws", [(0.9, 4, 300), (0.5, 1, 501), (0.0, 3, 200), (0.99, 2, 40)]
)
def test_site_diagnostics_ess_is_arviz_on_ar1_chains(phi, num_chains, num_draws):
    draws = _ar1(phi, (num_chains, num_draws, 3), seed=int(100 * phi) + num_chains)
    split, expected = _split_and_arviz_ess(draws)
    assert np.allclose(site_diagnostics(split)["n_eff"].numpy(), expected, rtol=1e-9)


def test_site_diagnostics_ess_of_antithetic_chains_is_positive_and_bounded():
    # chains that alternate +1/-1 (with noise): lag-1 autocorrelation near -1, where
    # Pyro's estimator (and this one before) gave a negative n_eff
    from pyro.ops.stats import effective_sample_size

    torch.manual_seed(0)
    num_chains, num_draws = 4, 300
    sign = (-1.0) ** torch.arange(num_draws)
    draws = sign.reshape(1, -1, 1) * (1 + 0.1 * torch.randn(num_chains, num_draws, 2))
    draws[..., 1] += 0.5 * torch.randn(num_chains, num_draws)  # less antithetic
    assert (effective_sample_size(draws) < 0).any()  # Pyro's goes negative here
    n_eff = site_diagnostics(draws)["n_eff"]
    total = num_chains * num_draws
    assert (n_eff > 0).all() and (n_eff <= total * math.log10(total) * (1 + 1e-5)).all()
    assert float(n_eff[0]) == pytest.approx(total * math.log10(total), rel=1e-5)
    split, expected = _split_and_arviz_ess(draws)
    assert np.allclose(site_diagnostics(split)["n_eff"].numpy(), expected, rtol=1e-4)
    # antithetic bits, as a kernel that flips the same bits back and forth gives them
    bits = (torch.arange(num_draws) % 2).repeat(num_chains, 1).unsqueeze(-1)
    bits[:, ::7] = 1 - bits[:, ::7]
    assert float(site_diagnostics(bits)["n_eff"]) > total


def test_site_diagnostics_r_hat_is_pyros_with_nan_only_where_constant():
    from pyro.ops.stats import split_gelman_rubin

    torch.manual_seed(3)
    draws = torch.randint(0, 3, (3, 200, 2, 3))
    draws[:, :, 1, 2] = 1  # one coordinate never moves
    diag = site_diagnostics(draws)
    assert diag["n_eff"].shape == diag["r_hat"].shape == (2, 3)
    assert diag["n_eff"].dtype == torch.get_default_dtype()
    assert torch.isnan(diag["n_eff"][1, 2]) and torch.isnan(diag["r_hat"][1, 2])
    moving = draws.float().reshape(3, 200, 6)[..., :5]
    assert torch.allclose(diag["r_hat"].reshape(6)[:5], split_gelman_rubin(moving), rtol=1e-5)
    # n_eff: ArviZ's, for several chains and for one chain with an odd number of draws
    for chains in (moving, moving[:1, :199]):
        split, expected = _split_and_arviz_ess(chains)
        assert np.allclose(site_diagnostics(split)["n_eff"].numpy(), expected, rtol=1e-4)


def test_site_diagnostics_of_chains_stuck_at_different_values():
    draws = torch.zeros(2, 50, 1)
    draws[1] = 1.0
    diag = site_diagnostics(draws)
    assert torch.isfinite(diag["n_eff"]).all() and torch.isinf(diag["r_hat"]).all()


def test_site_diagnostics_of_short_and_long_runs():
    short = site_diagnostics(torch.tensor([[[0.0], [1.0], [1.0]]]))  # one chain, 3 draws
    assert torch.isfinite(short["n_eff"]).all() and torch.isnan(short["r_hat"]).all()
    assert torch.isnan(site_diagnostics(torch.ones(2, 1, 3))["n_eff"]).all()
    # 2 x 200,000 draws: Pyro's running minimum would need 10^10 entries
    torch.manual_seed(0)
    diag = site_diagnostics(torch.randint(0, 2, (2, 200000)))
    assert 3e5 < float(diag["n_eff"]) < 5e5 and abs(float(diag["r_hat"]) - 1) < 0.01
    with pytest.raises(ValueError, match="shaped \\[num_chains, num_draws, ...\\]"):
        site_diagnostics(torch.zeros(5))
