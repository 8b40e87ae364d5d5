"""Metropolis-Hastings acceptance, batched over chains."""

from __future__ import annotations

import torch

__all__ = ["accept_probability", "metropolis_hastings", "select"]


def accept_probability(log_ratio: torch.Tensor) -> torch.Tensor:
    r"""Metropolis-Hastings acceptance probability :math:`\min(1, e^{r})`.

    A NaN log-ratio (for example a proposed state with undefined density) counts as
    probability zero.

    :param torch.Tensor log_ratio: ``[C]`` log acceptance ratio per chain.
    :rtype: torch.Tensor
    """
    return torch.nan_to_num(log_ratio.clamp(max=0.0).exp(), nan=0.0)


def metropolis_hastings(log_ratio: torch.Tensor) -> torch.Tensor:
    r"""Draw the accept/reject decision of each chain.

    Accepts with probability :math:`\min(1, e^{r})` by comparing :math:`\log u`,
    :math:`u \sim U(0, 1)`, with ``r``; NaN ratios are rejected.

    :param torch.Tensor log_ratio: ``[C]`` log acceptance ratio per chain.
    :returns: bool ``[C]``, True where the proposal is accepted.
    """
    return torch.rand_like(log_ratio).log() < log_ratio


def select(accept: torch.Tensor, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """Per-chain choice between a proposed and the current tensor.

    :param torch.Tensor accept: bool ``[C]``.
    :param torch.Tensor new: ``[C, ...]`` proposed values.
    :param torch.Tensor old: ``[C, ...]`` current values.
    :rtype: torch.Tensor
    """
    return torch.where(accept.reshape((-1,) + (1,) * (new.dim() - 1)), new, old)
