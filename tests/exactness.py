"""Statistical comparison of MCMC draws with an exact posterior.

Every probability checked is the mean of an indicator series (a coordinate taking a
value, or the chain sitting in one joint state). Its Monte Carlo standard error is
``sqrt(p (1 - p) / ESS)`` with ``ESS`` the multi-chain effective sample size of that
indicator series (:func:`pyro_gwg.diagnostics.site_diagnostics`, the estimator of Stan
and ArviZ, which stays positive on anti-correlated chains where Pyro's
``effective_sample_size`` goes negative), so the tolerance follows from the
number of effective samples. All checks of one call share a Bonferroni-corrected
two-sided level ``alpha``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List

import pyro
import torch

from pyro_gwg.diagnostics import site_diagnostics
from pyro_gwg.enumeration import ExactPosterior


@dataclass
class Check:
    label: str
    exact: float
    estimate: float
    ess: float
    z: float


def draw_codes(kernel, num_chains: int, num_samples: int, warmup_steps: int, *args, **kwargs):
    """Run ``kernel`` on ``num_chains`` batched chains as :class:`pyro.infer.MCMC` runs
    it (one :meth:`~pyro.infer.mcmc.mcmc_kernel.MCMCKernel.sample` per step, through
    the kernel's chain driver, recording its statistics); return the codes
    ``[C, T, D]`` drawn after warmup."""
    kernel.vectorized_chains = num_chains
    kernel.setup(warmup_steps, *args, **kwargs)
    params = kernel.initial_params
    draws = []
    for t in range(warmup_steps + num_samples):
        params = kernel.sample(params)
        if t >= warmup_steps:
            draws.append(kernel.state.codes.clone())
    return torch.stack(draws, dim=1)


def _z_checks(indicators: torch.Tensor, exact: torch.Tensor, labels: List[str]) -> List[Check]:
    """``indicators [C, T, K]`` (0/1 floats) against exact probabilities ``[K]``."""
    num_draws = indicators.shape[0] * indicators.shape[1]
    # NaN for a constant series only; never negative (a negative estimate clamped to 1
    # would make the check vacuous on anti-correlated chains)
    ess = site_diagnostics(indicators.double())["n_eff"].clamp(max=num_draws)
    finite = ess[torch.isfinite(ess)]
    # a constant series (a value never visited) has no ESS of its own: be conservative
    fallback = float(finite.min()) if finite.numel() else 1.0
    checks = []
    for k, label in enumerate(labels):
        p = float(exact[k])
        e = float(ess[k]) if math.isfinite(float(ess[k])) else fallback
        e = max(e, 1.0)
        estimate = float(indicators[..., k].double().mean())
        se = math.sqrt(max(p * (1 - p), 1.0 / num_draws) / e)
        checks.append(Check(label, p, estimate, e, (estimate - p) / se))
    return checks


def compare_with_exact(
    codes: torch.Tensor, posterior: ExactPosterior, min_prob: float = 0.005
) -> List[Check]:
    """z-scores of coordinate marginals and joint-state frequencies.

    Marginal values and joint states rarer than ``min_prob`` are not checked one by
    one (their counts are too small for a normal approximation); the rare joint
    states are checked together as one "other states" bin.

    :param codes: ``[C, T, D]`` draws.
    :param posterior: the exact posterior.
    :param min_prob: smallest probability checked on its own.
    """
    offsets = posterior.offset
    marginals = posterior.flat_marginals()
    onehot = torch.nn.functional.one_hot(codes - offsets, posterior.width).float()
    keep = (marginals >= min_prob) & (marginals <= 1 - min_prob)
    index = keep.nonzero().tolist()
    labels = ["coord {} = {}".format(i, int(offsets[i]) + v) for i, v in index]
    checks = _z_checks(onehot[..., keep], marginals[keep], labels)
    state = posterior.state_index(codes)
    probs = posterior.probs
    frequent = (probs >= min_prob).nonzero().squeeze(-1)
    if len(frequent) > 1 or probs[frequent].sum() < 1 - 1e-9:
        hits = (state.unsqueeze(-1) == frequent).float()
        rest = 1.0 - hits.sum(-1, keepdim=True)
        exact = torch.cat([probs[frequent], (1 - probs[frequent].sum()).reshape(1)])
        labels = ["state {}".format(int(s)) for s in frequent] + ["other states"]
        indicators = torch.cat([hits, rest], dim=-1)
        use = (exact >= min_prob) & (exact <= 1 - min_prob)
        checks += _z_checks(
            indicators[..., use], exact[use], [lab for lab, u in zip(labels, use) if u]
        )
    return checks


def critical_z(num_checks: int, alpha: float = 1e-3) -> float:
    """Two-sided Bonferroni critical value for ``num_checks`` z-scores at level alpha."""
    normal = torch.distributions.Normal(0.0, 1.0)
    return float(normal.icdf(torch.tensor(1 - alpha / (2 * num_checks), dtype=torch.float64)))


def assert_exact(codes: torch.Tensor, posterior: ExactPosterior, alpha: float = 1e-3) -> float:
    """Assert that the draws match the exact posterior; return the largest |z|."""
    checks = compare_with_exact(codes, posterior)
    limit = critical_z(len(checks), alpha)
    worst = max(checks, key=lambda c: abs(c.z))
    assert abs(worst.z) < limit, (
        "draws disagree with the exact posterior: {} exact {:.4f}, estimate {:.4f} "
        "(ESS {:.0f}, z = {:.2f}, limit {:.2f} over {} checks)".format(
            worst.label, worst.exact, worst.estimate, worst.ess, worst.z, limit, len(checks)
        )
    )
    return abs(worst.z)


def accept_probs(kernel, *args, num_chains: int = 32, num_steps: int = 20) -> torch.Tensor:
    """The ``accept_prob`` statistic ``[C, T]`` of ``num_steps`` steps of ``kernel`` on
    ``num_chains`` chains (:func:`draw_codes` without warmup, from seed 0)."""
    pyro.set_rng_seed(0)
    draw_codes(kernel, num_chains, num_steps, 0, *args)
    return kernel.diagnostics()["accept_prob"]
