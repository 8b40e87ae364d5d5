r"""Importance weights as pure tensor functions, shared by the estimators.

A set of ``P`` particles with log importance weights :math:`\ell_r` (unnormalised)
estimates a normalising constant by :math:`\hat Z = \frac1P \sum_r e^{\ell_r}`; the
self-normalised weights :math:`\tilde w_r = e^{\ell_r} / \sum_s e^{\ell_s}` give the
effective sample size

.. math:: \mathrm{ESS} = \Big(\sum_r \tilde w_r^2\Big)^{-1}
          = \frac{(\sum_r e^{\ell_r})^2}{\sum_r e^{2 \ell_r}},

(Kong 1992 [Kong1992]_; the :math:`R_{\rm eff}` of Fraccaro et al. 2016 [Fraccaro2016]_), which
also gives the delta-method
standard error of :math:`\log \hat Z` (:func:`log_mean_exp_se`). Residual resampling
(:func:`residual_resample`) keeps :math:`\lfloor R \tilde w_r \rfloor` copies of each
particle and draws the remaining ones from the residual weights.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

__all__ = [
    "effective_sample_size",
    "log_mean_exp",
    "log_mean_exp_se",
    "normalize_log_weights",
    "residual_resample",
]


def _check_vector(log_weights: torch.Tensor, name: str = "log_weights") -> None:
    if log_weights.dim() != 1 or log_weights.numel() == 0:
        raise ValueError(
            "{} must be a non-empty 1-d tensor, got shape {}".format(name, tuple(log_weights.shape))
        )
    if bool(torch.isnan(log_weights).any()) or bool((log_weights == float("inf")).any()):
        raise ValueError("{} holds NaN or +inf entries".format(name))
    if not bool(torch.isfinite(log_weights).any()):
        raise ValueError("every entry of {} is -inf: no particle has positive weight".format(name))


def normalize_log_weights(log_weights: torch.Tensor) -> torch.Tensor:
    r"""Self-normalised log weights :math:`\log \tilde w_r = \ell_r - \log \sum_s e^{\ell_s}`.

    :param torch.Tensor log_weights: ``[P]`` unnormalised log weights.
    :rtype: torch.Tensor
    """
    _check_vector(log_weights)
    return log_weights - torch.logsumexp(log_weights, 0)


def log_mean_exp(log_weights: torch.Tensor) -> torch.Tensor:
    r""":math:`\log \frac1P \sum_r e^{\ell_r}`, the log of the importance-sampling
    estimate :math:`\hat Z`.

    :param torch.Tensor log_weights: ``[P]`` log weights.
    :rtype: torch.Tensor
    """
    _check_vector(log_weights)
    return torch.logsumexp(log_weights, 0) - math.log(log_weights.numel())


def effective_sample_size(log_weights: torch.Tensor) -> torch.Tensor:
    r"""Effective sample size :math:`(\sum_r e^{\ell_r})^2 / \sum_r e^{2\ell_r}` of a
    weighted particle set (between 1 and ``P``; Fraccaro et al. 2016 [Fraccaro2016]_, Section 2.2).

    :param torch.Tensor log_weights: ``[P]`` log weights (normalised or not).
    :rtype: torch.Tensor
    """
    _check_vector(log_weights)
    return (2 * torch.logsumexp(log_weights, 0) - torch.logsumexp(2 * log_weights, 0)).exp()


def log_mean_exp_se(log_weights: torch.Tensor) -> torch.Tensor:
    r"""Delta-method standard error of :math:`\log \hat Z`, :math:`\hat Z` the mean of
    ``P`` independent weights :math:`e^{\ell_r}`:

    .. math:: \mathrm{se}(\log \hat Z) \approx \frac{\mathrm{sd}(e^{\ell})}{\sqrt P\,
              \overline{e^{\ell}}} = \sqrt{\frac{P / \mathrm{ESS} - 1}{P - 1}},

    with the sample standard deviation (divisor ``P - 1``). Heavy-tailed weights make
    this estimate optimistic; it is reliable once the ESS is not tiny.

    :param torch.Tensor log_weights: ``[P]`` log weights, ``P >= 2``.
    :rtype: torch.Tensor
    """
    _check_vector(log_weights)
    num = log_weights.numel()
    if num < 2:
        raise ValueError("a standard error needs at least two weights, got one")
    ratio = num / effective_sample_size(log_weights)
    return ((ratio - 1).clamp(min=0.0) / (num - 1)).sqrt()


def residual_resample(
    log_weights: torch.Tensor, num_samples: int, generator: Optional[torch.Generator] = None
) -> torch.Tensor:
    r"""Residual resampling: indices of ``num_samples`` particles drawn from the weights.

    With normalised weights :math:`\tilde w_r`, particle ``r`` is kept
    :math:`\lfloor R \tilde w_r \rfloor` times; the remaining
    :math:`R - \sum_r \lfloor R \tilde w_r \rfloor` indices are drawn multinomially
    with probabilities proportional to the residuals
    :math:`R \tilde w_r - \lfloor R \tilde w_r \rfloor` (Liu & Chen 1998 [LiuChen1998]_; the
    resampling of Fraccaro et al. 2016 [Fraccaro2016]_, Algorithm 1). Every particle is copied
    :math:`R \tilde w_r` times in expectation.

    :param torch.Tensor log_weights: ``[P]`` log weights.
    :param int num_samples: ``R``, the number of indices returned.
    :param torch.Generator generator: random generator (default: the global one).
    :returns: long ``[R]`` indices into the particles, sorted.
    """
    if int(num_samples) != num_samples or num_samples < 1:
        raise ValueError("num_samples must be a positive integer, got {}".format(num_samples))
    weights = normalize_log_weights(log_weights.double()).exp()
    expected = num_samples * weights
    # a hair above the products, so that exact multiples survive rounding in exp/log
    copies = (expected + 1e-9).floor().long()
    remaining = num_samples - int(copies.sum())
    if remaining > 0:
        residual = (expected - copies).clamp(min=0.0)
        if float(residual.sum()) <= 0:  # rounding left no residual mass: use the weights
            residual = weights
        extra = torch.multinomial(residual, remaining, replacement=True, generator=generator)
        copies = copies + torch.bincount(extra, minlength=copies.numel())
    return torch.repeat_interleave(torch.arange(copies.numel(), device=log_weights.device), copies)
