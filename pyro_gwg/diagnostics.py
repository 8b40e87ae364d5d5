r"""Sample-quality measures of the papers, on batches of discrete states.

States are flat codes (long ``[..., D]``, see :mod:`pyro_gwg.proposals.layout`), for
example ``kernel.state.codes`` collected over steps, or
``energy.codes_from_values(samples)``.

* :func:`site_diagnostics`: effective sample size (Stan's and ArviZ's, never negative)
  and Pyro's split R-hat of MCMC draws, coordinate by coordinate (NaN only where the
  draws are constant).
* :func:`hamming_ess`: effective sample size, per chain, of the Hamming distance
  between the chain's state and one fixed random reference state (the test statistic
  of Zanella 2020 [Zanella2020]_ and Grathwohl et al. 2021 [Grathwohl2021]_, Appendices E-F);
  ArviZ's ESS underneath
  (:func:`chain_ess` for any scalar series).
* :func:`mmd`: maximum mean discrepancy between two sample sets with the kernel
  :math:`k(x, x') = \exp(-\mathrm{Hamming}(x, x') / D)` (Grathwohl et al. 2021
  [Grathwohl2021]_, App. E).
* :func:`marginal_error`, :func:`pairwise_error`, :func:`tv_distance`: distances of
  the empirical distribution of the draws from an exact posterior
  (:func:`pyro_gwg.exact_posterior`).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Dict, Optional

import numpy as np
import torch
from pyro.ops.stats import autocovariance, split_gelman_rubin

from pyro_gwg.enumeration import ExactPosterior

__all__ = [
    "chain_ess",
    "hamming_ess",
    "hamming_statistic",
    "marginal_error",
    "mmd",
    "pairwise_error",
    "reference_state",
    "site_diagnostics",
    "tv_distance",
]


def site_diagnostics(draws: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Effective sample size and split R-hat of every coordinate of MCMC draws.

    The effective sample size is Stan's and ArviZ's (:func:`arviz.ess` with
    ``method="mean"`` of the chains as given, not split): Geyer's initial monotone
    sequence of autocorrelations, bounded by ``C T log10(C T)`` for antithetic chains,
    so that chains that alternate (a kernel that flips the same bits back and forth)
    get a large but finite number, never the negative one of Pyro's
    :func:`~pyro.ops.stats.effective_sample_size`. R-hat is Pyro's
    :func:`~pyro.ops.stats.split_gelman_rubin`. Both are computed so that a
    coordinate whose draws are all equal (the normal case for a discrete posterior
    that is nearly certain about it) gets NaN without making every other coordinate
    NaN, as Pyro's effective sample size does for a batch holding one such
    coordinate, in memory linear in ``T`` (Pyro's takes ``T^2 / 4`` per coordinate,
    too much for long chains).

    :param torch.Tensor draws: ``[C, T, ...]``: ``C`` chains of ``T`` draws (any
        number type; integers are converted to the default float type).
    :returns: ``{"n_eff": [...], "r_hat": [...]}``, NaN where every draw of every chain
        is equal; ``n_eff`` also NaN for ``T < 2``, ``r_hat`` for ``T < 4``.
    :rtype: dict
    """
    if draws.dim() < 2:
        raise ValueError(
            "draws must be shaped [num_chains, num_draws, ...], got shape {}.".format(
                tuple(draws.shape)
            )
        )
    num_chains, num_draws = draws.shape[:2]
    shape = draws.shape[2:]
    values = draws.reshape(num_chains, num_draws, -1)
    if not values.is_floating_point():
        values = values.to(torch.get_default_dtype())
    n_eff = torch.full(values.shape[2:], float("nan"), dtype=values.dtype, device=values.device)
    r_hat = n_eff.clone()
    if num_chains * num_draws:
        moving = (values != values[:1, :1]).flatten(0, 1).any(0).nonzero().reshape(-1)
        if moving.numel() and num_draws >= 2:
            part = values[..., moving]
            n_eff[moving] = _effective_sample_size(part)
            if num_draws >= 4:
                r_hat[moving] = split_gelman_rubin(part)
    return OrderedDict([("n_eff", n_eff.reshape(shape)), ("r_hat", r_hat.reshape(shape))])


def _effective_sample_size(values: torch.Tensor) -> torch.Tensor:
    """Effective sample size of ``values [C, T, n]`` (none of them constant), as Stan
    and ArviZ compute it (:func:`arviz.ess` of unsplit chains): autocorrelations
    from the within- and between-chain variances (lag ``k`` autocovariance divided by
    ``T``, where Pyro's :func:`~pyro.ops.stats.effective_sample_size` divides it by
    ``T - k``), summed in pairs up to the
    first pair that is not positive (Geyer's initial positive sequence, with ArviZ's
    half term after it), made non-increasing (initial monotone sequence, a
    :func:`torch.cummin`), and the autocorrelation time bounded below by
    ``1 / log10(C T)``, so that antithetic chains get at most ``C T log10(C T)``
    effective draws, never a negative number."""
    num_chains, num_draws = values.shape[:2]
    series = values.transpose(0, 1)  # [T, C, n]
    # the autocovariance of Stan and ArviZ (divided by T, not T - k as Pyro's is)
    lags = torch.arange(num_draws, 0, -1, dtype=values.dtype, device=values.device)
    gamma = autocovariance(series, dim=0) * (lags / num_draws).reshape(-1, 1, 1)
    var_within = series.var(dim=0).mean(dim=0)
    var_estimator = (num_draws - 1) / num_draws * var_within
    if num_chains > 1:
        var_estimator = var_estimator + series.mean(dim=0).var(dim=0)
    rho = 1 - (var_within - gamma.mean(dim=1)) / var_estimator
    rho[0] = 1
    # the pairs ArviZ looks at: (0, 1), then (2, 3), ... while their last index < T - 1
    num_pairs = max(1, (num_draws + 1) // 2 - 1)
    pairs = rho[: 2 * num_pairs].reshape((num_pairs, 2) + rho.shape[1:]).sum(dim=1)
    # the last pair counted whole comes before the first one that is not positive
    stops = pairs <= 0
    stops[-1] = True
    last = stops.to(torch.uint8).argmax(dim=0, keepdim=True)  # [1, n]: first stop
    counted = torch.arange(num_pairs, device=values.device).unsqueeze(-1) < last
    monotone = torch.cummin(pairs, dim=0).values
    half = rho.gather(0, 2 * last)  # the even autocorrelation of the stopping pair
    half = torch.where(pairs.gather(0, last) > 0, half, half.clamp(min=0))
    tau = -1 + 2 * torch.where(counted, monotone, 0).sum(dim=0) + half[0]
    total = num_chains * num_draws
    return total / tau.clamp(min=1 / math.log10(total))


def reference_state(num_coords: int, seed: int = 0) -> torch.Tensor:
    """A random binary state with exactly ``num_coords // 2`` ones.

    :param int num_coords: ``D``.
    :param int seed: seed of the positions of the ones.
    :returns: long ``[D]``.
    """
    generator = torch.Generator().manual_seed(seed)
    state = torch.zeros(num_coords, dtype=torch.long)
    state[torch.randperm(num_coords, generator=generator)[: num_coords // 2]] = 1
    return state


def hamming_statistic(
    codes: torch.Tensor, reference: Optional[torch.Tensor] = None, seed: int = 0
) -> torch.Tensor:
    """Hamming distance of every state to a fixed reference state.

    :param torch.Tensor codes: long ``[..., D]`` states.
    :param torch.Tensor reference: long ``[D]``; default :func:`reference_state` with
        ``seed`` (for non-binary states pass a reference of your own).
    :param int seed: seed of the default reference.
    :returns: float ``[...]`` number of coordinates that differ.
    """
    if reference is None:
        reference = reference_state(codes.shape[-1], seed)
    return (codes != reference.to(codes.device)).sum(-1).to(torch.get_default_dtype())


def hamming_ess(
    codes: torch.Tensor,
    reference: Optional[torch.Tensor] = None,
    seed: int = 0,
    method: str = "bulk",
) -> torch.Tensor:
    """Effective sample size of the Hamming statistic, chain by chain.

    The statistic is :func:`hamming_statistic`; each chain's series goes to
    :func:`arviz.ess` as a single chain. A chain whose statistic never changes counts
    one effective draw.

    :param torch.Tensor codes: long ``[C, T, D]`` (``C`` chains of ``T`` draws) or
        ``[T, D]`` (one chain).
    :param torch.Tensor reference: long ``[D]`` reference state (default: random,
        exactly ``D // 2`` ones, from ``seed``).
    :param int seed: seed of the default reference.
    :param str method: ArviZ ESS method (``"bulk"``, ``"tail"``, ``"mean"``, ...).
    :returns: float64 ``[C]`` (``[1]`` for one chain).
    """
    if codes.dim() == 2:
        codes = codes.unsqueeze(0)
    return chain_ess(hamming_statistic(codes, reference, seed), method)


def chain_ess(series: torch.Tensor, method: str = "bulk") -> torch.Tensor:
    """Effective sample size of a scalar series, chain by chain (:func:`arviz.ess` of
    each chain on its own). A constant chain counts one effective draw.

    :param torch.Tensor series: ``[C, T]``.
    :param str method: ArviZ ESS method.
    :returns: float64 ``[C]``.
    """
    import arviz  # optional at import time: loaded on first use

    out = []
    for chain in series.double().cpu().numpy():
        if np.ptp(chain) == 0:
            out.append(1.0)
        else:
            out.append(float(arviz.ess(chain[None, :], method=method)))
    return torch.tensor(out, dtype=torch.float64)


def mmd(x: torch.Tensor, y: torch.Tensor, unbiased: bool = False) -> torch.Tensor:
    r"""Squared maximum mean discrepancy with the kernel :math:`e^{-\mathrm{Hamming}/D}`.

    .. math:: \mathrm{MMD}^2 = \overline{k(x, x')} + \overline{k(y, y')}
              - 2\, \overline{k(x, y)},

    with means over all pairs (the V-statistic, always non-negative, as in the
    paper's code) or, with ``unbiased=True``, over distinct pairs within a set (the
    U-statistic, unbiased but possibly negative).

    :param torch.Tensor x: ``[N, D]`` states.
    :param torch.Tensor y: ``[M, D]`` states.
    :param bool unbiased: use the U-statistic.
    :returns: scalar tensor.
    """
    num_coords = x.shape[-1]

    def gram(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        distance = (a.unsqueeze(1) != b.unsqueeze(0)).sum(-1).double()
        return torch.exp(-distance / num_coords)

    def within(a: torch.Tensor) -> torch.Tensor:
        k = gram(a, a)
        n = a.shape[0]
        if unbiased:
            return (k.sum() - k.diagonal().sum()) / (n * (n - 1))
        return k.mean()

    return within(x) + within(y) - 2 * gram(x, y).mean()


def _flat(codes: torch.Tensor) -> torch.Tensor:
    return codes.reshape(-1, codes.shape[-1])


def _valid_values(posterior: ExactPosterior) -> torch.Tensor:
    """bool ``[D, V]``: value ``v`` exists for coordinate ``i``."""
    return torch.arange(posterior.width) < posterior.size.unsqueeze(-1)


def marginal_error(codes: torch.Tensor, posterior: ExactPosterior) -> float:
    r"""Mean absolute error of the single-coordinate marginals,
    :math:`\mathrm{mean}_{i, v} |\hat q_i(v) - p_i(v)|` over every coordinate ``i`` and
    each of its values ``v``.

    :param torch.Tensor codes: long ``[..., D]`` draws (all leading dimensions pooled).
    :param ExactPosterior posterior: the exact posterior.
    :rtype: float
    """
    empirical = posterior.empirical_marginals(codes)
    valid = _valid_values(posterior)
    return float((empirical - posterior.flat_marginals()).abs()[valid].mean())


def pairwise_error(codes: torch.Tensor, posterior: ExactPosterior) -> float:
    r"""Mean absolute error of the pairwise marginals,
    :math:`\mathrm{mean}_{i < j, v, w} |\hat q_{ij}(v, w) - p_{ij}(v, w)|`.

    :param torch.Tensor codes: long ``[..., D]`` draws (all leading dimensions pooled).
    :param ExactPosterior posterior: the exact posterior.
    :rtype: float
    """
    empirical = posterior.empirical_marginals(codes, pairwise=True)
    error = (empirical - posterior.pairwise_marginals()).abs()
    num_coords = error.shape[0]
    valid = _valid_values(posterior)
    pairs = torch.ones(num_coords, num_coords, dtype=torch.bool).triu(1)
    mask = pairs[:, :, None, None] & valid[:, None, :, None] & valid[None, :, None, :]
    return float(error[mask].mean())


def tv_distance(codes: torch.Tensor, posterior: ExactPosterior) -> float:
    r"""Total-variation distance :math:`\frac12 \sum_x |\hat q(x) - p(x)|` between the
    empirical distribution of the draws and the exact posterior.

    :param torch.Tensor codes: long ``[..., D]`` draws (all leading dimensions pooled).
    :param ExactPosterior posterior: the exact posterior.
    :rtype: float
    """
    index = posterior.state_index(_flat(codes).cpu())
    counts = torch.bincount(index, minlength=posterior.num_states).to(posterior.log_probs.dtype)
    return float(0.5 * (counts / counts.sum() - posterior.probs).abs().sum())
