r"""The pure functions of the PCD update (Grathwohl et al. 2021 [Grathwohl2021]_):
the surrogate whose gradient is minus the log-likelihood gradient
(:func:`pcd_objective`), the penalties (:func:`l1_penalty`, :func:`group_l1_penalty`),
the energy-magnitude regulariser (:func:`energy_regulariser`), the learning-rate
warm-up (:func:`warmup_factor`) and the moving average of the parameters
(:func:`ema_update`). :class:`~pyro_gwg.contrib.train.pcd.PCD` wires them in.
"""

from __future__ import annotations

import torch

__all__ = [
    "ema_update",
    "energy_regulariser",
    "group_l1_penalty",
    "l1_penalty",
    "pcd_objective",
    "warmup_factor",
]


def pcd_objective(data_log_joint: torch.Tensor, chain_log_joint: torch.Tensor) -> torch.Tensor:
    r"""The PCD surrogate :math:`\overline{f_\theta(x')} - \overline{f_\theta(x)}`: its
    gradient is minus the log-likelihood gradient of Eq. 12 (Grathwohl et al. 2021
    [Grathwohl2021]_), with the
    chains' states :math:`x'` standing in for draws from the model.

    :param torch.Tensor data_log_joint: ``[B]`` :math:`f_\theta` at the data batch.
    :param torch.Tensor chain_log_joint: ``[C]`` :math:`f_\theta` at the chains' states.
    :rtype: torch.Tensor
    """
    return chain_log_joint.mean() - data_log_joint.mean()


def l1_penalty(value: torch.Tensor) -> torch.Tensor:
    r""":math:`\lVert \theta \rVert_1 = \sum |\theta|` (Grathwohl et al. 2021 [Grathwohl2021]_,
    Appendix F.2).

    :param torch.Tensor value: any parameter.
    :rtype: torch.Tensor
    """
    return value.abs().sum()


def group_l1_penalty(value: torch.Tensor, group_dims: int = 2) -> torch.Tensor:
    r"""Group L1 norm :math:`\sum_{g} \lVert \theta_g \rVert_2` over the blocks formed by
    the last ``group_dims`` dimensions; for Potts couplings ``[D, D, K, K]`` and
    ``group_dims=2`` this is :math:`\sum_{ij} \lVert J_{ij} \rVert` (Grathwohl et al. 2021
    [Grathwohl2021]_, Eq. 34).

    :param torch.Tensor value: the parameter.
    :param int group_dims: trailing dimensions of one group.
    :rtype: torch.Tensor
    """
    if int(group_dims) != group_dims or not 1 <= group_dims <= value.dim():
        raise ValueError(
            "group_dims must be an integer in 1 .. {} for a parameter of shape {}, got {}".format(
                value.dim(), tuple(value.shape), group_dims
            )
        )
    dims = tuple(range(value.dim() - group_dims, value.dim()))
    return torch.linalg.vector_norm(value, dim=dims).sum()


def energy_regulariser(data_log_joint: torch.Tensor, chain_log_joint: torch.Tensor) -> torch.Tensor:
    r"""The energy-magnitude regulariser
    :math:`\overline{f_\theta(x)^2} + \overline{f_\theta(x')^2}` (means over the data
    batch and over the chains) of Du & Mordatch 2019 [DuMordatch2019]_ (their
    :math:`\alpha (E(x^+)^2 + E(x^-)^2)`, with :math:`E = -f_\theta`), which the
    reference code of Grathwohl et al. 2021 [Grathwohl2021]_ adds to the PCD surrogate
    of its deep EBMs (the paper itself does not state it). It keeps the unnormalised
    log densities near zero: :func:`pcd_objective` only sees their differences, so
    without it they may drift together.

    :param torch.Tensor data_log_joint: ``[B]`` :math:`f_\theta` at the data batch.
    :param torch.Tensor chain_log_joint: ``[C]`` :math:`f_\theta` at the chains' states.
    :rtype: torch.Tensor
    """
    return data_log_joint.pow(2).mean() + chain_log_joint.pow(2).mean()


def warmup_factor(iteration: int, warmup_iterations: int) -> float:
    r"""Multiplier of the base learning rate at update ``iteration`` (from 0) of a linear
    warm-up over ``warmup_iterations`` updates (Grathwohl et al. 2021 [Grathwohl2021]_,
    Appendix I.2: "we linearly warm-up the learning rate"):

    .. math:: \eta_t = \eta \min\Big(1, \frac{t + 1}{K}\Big),

    so update ``K - 1`` is the first at the base rate :math:`\eta` (``K = 0``: no
    warm-up). The reference code uses :math:`t / K`, whose first update has rate 0 and
    does nothing.

    :param int iteration: :math:`t \ge 0`.
    :param int warmup_iterations: :math:`K \ge 0`.
    :rtype: float
    """
    if warmup_iterations == 0:
        return 1.0
    return min(1.0, (iteration + 1) / warmup_iterations)


def ema_update(average: torch.Tensor, value: torch.Tensor, decay: float) -> torch.Tensor:
    r"""One step of the exponential moving average of parameters that Grathwohl et al.
    2021 [Grathwohl2021]_ (Appendix I.2) evaluate their EBMs with (decay 0.999, as the
    "fast weights" of Tieleman & Hinton 2009):

    .. math:: \bar\theta_t = \delta\, \bar\theta_{t-1} + (1 - \delta)\, \theta_t,
              \qquad \bar\theta_0 = \theta_0.

    :param torch.Tensor average: :math:`\bar\theta_{t-1}`.
    :param torch.Tensor value: :math:`\theta_t`, the parameter after update ``t``.
    :param float decay: :math:`\delta \in [0, 1)`.
    :rtype: torch.Tensor
    """
    return decay * average + (1.0 - decay) * value
