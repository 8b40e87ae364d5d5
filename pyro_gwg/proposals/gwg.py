r"""Gibbs-With-Gradients proposals (Grathwohl et al. 2021, paper 000).

Pure tensor functions, batched over a leading chain dimension ``C``, on the flat
coordinate layout of :mod:`pyro_gwg.proposals.layout`. With ``f`` the log joint and
:math:`\tilde d(x)` the gains of :meth:`CoordinateLayout.gains
<pyro_gwg.proposals.layout.CoordinateLayout.gains>`, the proposal over single-coordinate
moves is

.. math:: q(i, v \mid x) = \mathrm{Softmax}\big(\tilde d(x) / \tau\big)_{iv},

with temperature :math:`\tau = 2` the locally balanced choice (Eqs. 3-6, Algorithm 1).

Multi-flip variant (Appendix D, Eq. 27), written for every coordinate type: draw
``N`` coordinates :math:`i_1, \dots, i_N` with replacement from the coordinate marginal
:math:`q(i \mid x) = \sum_v q(i, v \mid x)`; each distinct drawn coordinate ``i`` then
moves to a candidate drawn from :math:`q(v \mid i, x)`. The index sequence is an
auxiliary variable, so the move is an involution given it and the MH ratio

.. math:: \frac{e^{f(x')} \prod_n q(i_n \mid x') \prod_{i \in S} q(v'_i \mid i, x')}
               {e^{f(x)}  \prod_n q(i_n \mid x)  \prod_{i \in S} q(v_i \mid i, x)}

is exact, ``S`` the set of distinct drawn coordinates and :math:`v'_i` the candidate
that undoes :math:`v_i`. For bits the candidate factor is one and this is Eq. 27; with
``N = 1`` it is the single-flip sampler of Algorithm 1 for every coordinate type.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Tuple

import torch

from pyro_gwg.proposals.layout import CoordinateLayout
from pyro_gwg.proposals.mh import accept_probability, metropolis_hastings, select

__all__ = [
    "GWGInfo",
    "GWGState",
    "coordinate_log_probs",
    "gwg_init",
    "gwg_step",
    "move_log_prob",
    "proposal_logits",
    "sample_move",
]

ValueAndGrad = Callable[[torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]


class GWGState(NamedTuple):
    """State of a batch of GWG chains.

    :ivar torch.Tensor codes: long ``[C, D]`` coordinates.
    :ivar torch.Tensor log_joint: ``[C]`` log joint density at ``codes``.
    :ivar torch.Tensor logits: ``[C, D, M]`` proposal logits at ``codes``.
    """

    codes: torch.Tensor
    log_joint: torch.Tensor
    logits: torch.Tensor


class GWGInfo(NamedTuple):
    """Per-chain statistics of one GWG step.

    :ivar torch.Tensor accepted: bool ``[C]``.
    :ivar torch.Tensor accept_prob: ``[C]`` MH acceptance probability.
    :ivar torch.Tensor num_changed: long ``[C]`` coordinates changed by the proposal.
    """

    accepted: torch.Tensor
    accept_prob: torch.Tensor
    num_changed: torch.Tensor


def proposal_logits(gains: torch.Tensor, temperature: float = 2.0) -> torch.Tensor:
    r"""Logits :math:`\tilde d(x) / \tau` of the GWG proposal (paper 000, Eq. 6).

    :param torch.Tensor gains: ``[C, D, M]`` estimated log-density changes.
    :param float temperature: :math:`\tau`; 2 is the locally balanced choice.
    :rtype: torch.Tensor
    """
    return gains / temperature


def coordinate_log_probs(logits: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Split the joint proposal into coordinate marginal and candidate conditional.

    :param torch.Tensor logits: ``[C, D, M]``, ``-inf`` for invalid moves.
    :returns: ``(log q(i | x) [C, D], log q(v | i, x) [C, D, M])``. Rows of a
        coordinate without any valid move are ``-inf`` / NaN and are never drawn.
    """
    per_coord = torch.logsumexp(logits, dim=-1)
    log_q_coord = per_coord - torch.logsumexp(per_coord, dim=-1, keepdim=True)
    return log_q_coord, logits - per_coord.unsqueeze(-1)


def sample_move(
    logits: torch.Tensor, num_flips: int = 1
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw a GWG move: ``num_flips`` coordinates with replacement, then a candidate each.

    :param torch.Tensor logits: ``[C, D, M]`` proposal logits.
    :param int num_flips: number ``N`` of coordinate draws (Eq. 27).
    :returns: ``(draws [C, N], changed [C, D] bool, candidate [C, D])``; ``candidate``
        is meaningful where ``changed``.
    """
    log_q_coord, _ = coordinate_log_probs(logits)
    draws = torch.multinomial(log_q_coord.exp(), num_flips, replacement=True)
    changed = torch.zeros(log_q_coord.shape, dtype=torch.bool, device=logits.device)
    changed.scatter_(1, draws, True)
    rows = logits.gather(1, draws.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
    gumbel = -torch.empty_like(rows).exponential_().log()
    picked = (rows + gumbel).argmax(-1)
    candidate = draws.new_zeros(log_q_coord.shape)
    candidate.scatter_(1, draws, picked)
    return draws, changed, candidate


def move_log_prob(
    logits: torch.Tensor,
    draws: torch.Tensor,
    changed: torch.Tensor,
    candidate: torch.Tensor,
) -> torch.Tensor:
    r"""Log probability of a move :math:`\sum_n \log q(i_n|x) + \sum_{i \in S} \log q(v_i|i,x)`.

    :param torch.Tensor logits: ``[C, D, M]`` proposal logits at the starting state.
    :param torch.Tensor draws: long ``[C, N]`` drawn coordinates.
    :param torch.Tensor changed: bool ``[C, D]`` distinct drawn coordinates.
    :param torch.Tensor candidate: long ``[C, D]`` candidate per changed coordinate.
    :rtype: torch.Tensor
    """
    log_q_coord, log_q_cand = coordinate_log_probs(logits)
    picked = log_q_cand.gather(-1, candidate.unsqueeze(-1)).squeeze(-1)
    return log_q_coord.gather(1, draws).sum(-1) + torch.where(changed, picked, 0.0).sum(-1)


def gwg_init(
    codes: torch.Tensor,
    value_and_grad: ValueAndGrad,
    layout: CoordinateLayout,
    temperature: float = 2.0,
) -> GWGState:
    """Initial GWG state: one evaluation of ``value_and_grad`` at ``codes``.

    :param torch.Tensor codes: long ``[C, D]``.
    :param callable value_and_grad: ``codes -> (log_joint [C], grad [C, D, M])``.
    :param CoordinateLayout layout: the coordinate layout.
    :param float temperature: proposal temperature.
    :rtype: GWGState
    """
    log_joint, grad = value_and_grad(codes)
    return GWGState(codes, log_joint, proposal_logits(layout.gains(codes, grad), temperature))


def gwg_step(
    state: GWGState,
    value_and_grad: ValueAndGrad,
    layout: CoordinateLayout,
    temperature: float = 2.0,
    num_flips: int = 1,
) -> Tuple[GWGState, GWGInfo]:
    """One GWG transition of every chain (Algorithm 1; Eq. 27 when ``num_flips > 1``).

    Costs one evaluation of ``value_and_grad``, at the proposed state; the current
    state's log joint and logits are carried in ``state``.

    :param GWGState state: current state.
    :param callable value_and_grad: ``codes -> (log_joint [C], grad [C, D, M])``.
    :param CoordinateLayout layout: the coordinate layout.
    :param float temperature: proposal temperature.
    :param int num_flips: coordinate draws per proposal.
    :returns: ``(new_state, info)``.
    """
    codes, log_joint, logits = state
    draws, changed, candidate = sample_move(logits, num_flips)
    proposed = torch.where(changed, layout.move(codes, candidate), codes)
    log_joint_new, grad_new = value_and_grad(proposed)
    logits_new = proposal_logits(layout.gains(proposed, grad_new), temperature)
    log_ratio = (
        log_joint_new
        - log_joint
        + move_log_prob(logits_new, draws, changed, layout.reverse(codes, candidate))
        - move_log_prob(logits, draws, changed, candidate)
    )
    accepted = metropolis_hastings(log_ratio)
    new_state = GWGState(
        select(accepted, proposed, codes),
        select(accepted, log_joint_new, log_joint),
        select(accepted, logits_new, logits),
    )
    info = GWGInfo(accepted, accept_probability(log_ratio), changed.sum(-1))
    return new_state, info
