r"""The exact locally balanced proposal (Zanella 2020) [Zanella2020]_, batched over chains.

The proposal GWG approximates: over the same single-coordinate moves as GWG (bits
flip, categories switch to any other category, ordinals step by :math:`\pm 1`; see
:mod:`pyro_gwg.proposals.layout`),

.. math:: q(i, v \mid x) = \mathrm{Softmax}\big((f(x_{i \leftarrow v}) - f(x)) / \tau\big),

with the *exact* log-density differences where GWG uses the first-order estimate
:math:`\tilde d`; :math:`\tau = 2` is the square-root balancing function
:math:`g(t) = \sqrt t`. Another balancing function ``g``
(:mod:`pyro_gwg.proposals.balancing`) gives
:math:`q(i, v \mid x) \propto g\big(e^{f(x_{i \leftarrow v}) - f(x)}\big)`. Moves
are accepted with probability
:math:`\min(1, e^{f(x') - f(x)} q(x \mid x') / q(x' \mid x))`.

Every step evaluates the log joint at all ``D * M`` neighbours of the proposed state
(``M`` the layout's candidate width, one for bits), in batches of ``chunk_size``
states; the neighbours of the current state are cached in the state, and so is
:math:`f(x')`, read from them.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Tuple

import torch

from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.blocks import StepInfo, cost, evaluate_changes
from pyro_gwg.proposals.gwg import (
    apply_move,
    coordinate_log_probs,
    move_log_prob,
    proposal_logits,
    sample_move,
)
from pyro_gwg.proposals.layout import CoordinateLayout
from pyro_gwg.proposals.mh import accept_probability, metropolis_hastings, select

__all__ = [
    "LocallyBalancedState",
    "locally_balanced_init",
    "locally_balanced_proposal",
    "locally_balanced_step",
    "neighbour_log_joints",
]

LogJoint = Callable[[torch.Tensor], torch.Tensor]


class LocallyBalancedState(NamedTuple):
    """State of a batch of locally balanced chains.

    :ivar torch.Tensor codes: long ``[C, D]`` coordinates.
    :ivar torch.Tensor log_joint: ``[C]`` log joint at ``codes``.
    :ivar torch.Tensor neighbours: ``[C, D, M]`` log joint of every single-coordinate
        move from ``codes`` (``-inf`` for invalid moves).
    """

    codes: torch.Tensor
    log_joint: torch.Tensor
    neighbours: torch.Tensor


def neighbour_log_joints(
    codes: torch.Tensor, log_joint: LogJoint, layout: CoordinateLayout, chunk_size: int = 4096
) -> torch.Tensor:
    """Log joint of every single-coordinate move of every chain.

    :param torch.Tensor codes: long ``[C, D]``.
    :param callable log_joint: ``codes [N, D] -> [N]``.
    :param CoordinateLayout layout: the coordinate layout.
    :param int chunk_size: most states per model run.
    :returns: ``[C, D, M]``, ``-inf`` where the move is invalid.
    """
    num_chains, num_coords = codes.shape
    zero_grad = torch.zeros(
        num_chains, num_coords, layout.grad_width, device=codes.device, dtype=layout.lower.dtype
    )
    valid = torch.isfinite(layout.gains(codes, zero_grad))  # [C, D, M]
    width = valid.shape[-1]
    coords = torch.arange(num_coords, device=codes.device).repeat_interleave(width)
    candidate = torch.arange(width, device=codes.device).repeat(num_coords)
    coords, candidate = coords.expand(num_chains, -1), candidate.expand(num_chains, -1)
    old = codes.gather(1, coords)
    moved = torch.where(valid.flatten(1), layout.move(old, candidate, coords), old)
    f = evaluate_changes(
        log_joint, codes, coords.unsqueeze(-1), moved.unsqueeze(-1), chunk_size
    )  # [C, D * M]
    return f.masked_fill(~valid.flatten(1), -float("inf")).reshape(valid.shape)


def locally_balanced_proposal(
    state: LocallyBalancedState, temperature: float = 2.0, balancing: Optional[str] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(log q(i | x) [C, D], log q(v | i, x) [C, D, M])`` of the proposal at ``state``.

    :param LocallyBalancedState state: the state with its neighbours.
    :param float temperature: :math:`\\tau`; 2 is locally balanced.
    :param str balancing: balancing function in place of the temperature (see
        :func:`~pyro_gwg.proposals.gwg.proposal_logits`), or ``None``.
    """
    gains = state.neighbours - state.log_joint.reshape(-1, 1, 1)
    return coordinate_log_probs(proposal_logits(gains, temperature, balancing))


def locally_balanced_init(
    codes: torch.Tensor, log_joint: LogJoint, layout: CoordinateLayout, chunk_size: int = 4096
) -> LocallyBalancedState:
    """Initial state: the log joint at ``codes`` and at all its neighbours.

    :param torch.Tensor codes: long ``[C, D]``.
    :param callable log_joint: ``codes [N, D] -> [N]``.
    :param CoordinateLayout layout: the coordinate layout.
    :param int chunk_size: most states per model run.
    :rtype: LocallyBalancedState
    """
    return LocallyBalancedState(
        codes, log_joint(codes), neighbour_log_joints(codes, log_joint, layout, chunk_size)
    )


def locally_balanced_step(
    state: LocallyBalancedState,
    log_joint: LogJoint,
    layout: CoordinateLayout,
    temperature: float = 2.0,
    chunk_size: int = 4096,
    balancing: Optional[str] = None,
) -> Tuple[LocallyBalancedState, StepInfo]:
    """One locally balanced Metropolis-Hastings transition of every chain.

    :param LocallyBalancedState state: current state.
    :param callable log_joint: ``codes [N, D] -> [N]``.
    :param CoordinateLayout layout: the coordinate layout.
    :param float temperature: proposal temperature.
    :param int chunk_size: most states per model run.
    :param str balancing: balancing function in place of the temperature, or ``None``.
    :returns: ``(new_state, info)``.
    """
    codes, current, neighbours = state
    log_q_coord, log_q_cand = locally_balanced_proposal(state, temperature, balancing)
    move = sample_move(log_q_coord, log_q_cand, 1)
    proposed, reverse = apply_move(codes, move, layout)
    width = neighbours.shape[-1]
    flat_move = move.draws * width + move.candidate
    log_joint_new = neighbours.flatten(1).gather(1, flat_move).squeeze(-1)
    new = LocallyBalancedState(
        proposed, log_joint_new, neighbour_log_joints(proposed, log_joint, layout, chunk_size)
    )
    log_q_coord_new, log_q_cand_new = locally_balanced_proposal(new, temperature, balancing)
    log_ratio = (
        log_joint_new
        - current
        + move_log_prob(log_q_coord_new, log_q_cand_new, reverse)
        - move_log_prob(log_q_coord, log_q_cand, move)
    )
    accepted = metropolis_hastings(log_ratio)
    new_state = LocallyBalancedState(*(select(accepted, n, o) for n, o in zip(new, state)))
    evals = cost(codes, neighbours.shape[1] * width)
    info = StepInfo(
        accepted, accept_probability(log_ratio), move.distinct.sum(-1), evals, cost(codes, 0)
    )
    return new_state, info


def build_locally_balanced(
    density,
    temperature: float = 2.0,
    chunk_size: int = 4096,
    *,
    balancing: Optional[str] = None,
) -> Algorithm:
    """The locally balanced sampler as an ``(init, step)`` pair on ``density`` (see
    :mod:`pyro_gwg.proposals.algorithm`): :func:`locally_balanced_init` and
    :func:`locally_balanced_step`.

    :param density: a :class:`~pyro_gwg.density.Density`.
    :param float temperature: proposal temperature.
    :param int chunk_size: most states per evaluation of the density.
    :param str balancing: balancing function in place of the temperature (see
        :func:`~pyro_gwg.proposals.gwg.proposal_logits`), or ``None``.
    :rtype: Algorithm
    """
    layout = density.layout

    def init(codes: torch.Tensor) -> LocallyBalancedState:
        return locally_balanced_init(codes, density.log_joint, layout, chunk_size)

    def step(state: LocallyBalancedState) -> Tuple[LocallyBalancedState, StepInfo]:
        return locally_balanced_step(
            state, density.log_joint, layout, temperature, chunk_size, balancing
        )

    return Algorithm(init, step)
