r"""The Hamming ball sampler (Titsias & Yau 2017) [TitsiasYau2017]_, batched over chains.

Each step picks a block of ``B`` coordinates, independently of the state: ``B``
distinct coordinates uniformly at random, or one of a list of user blocks uniformly
at random (e.g. all factors of one time step of a factorial HMM). Within the block,
with :math:`H_r(x)` the states that differ from ``x`` in at most ``r`` block
coordinates (each changed coordinate by a cyclic shift inside its window, see
:mod:`pyro_gwg.proposals.blocks`), the sampler

1. draws an auxiliary state :math:`u` uniformly from :math:`H_r(x)`;
2. draws the new state from :math:`p(x' \mid x' \in H_r(u)) \propto e^{f(x')}`.

The ball relation is symmetric and every ball has the same size, so this is a Gibbs
sampler of the joint :math:`p(x)\, U(u \mid x)` and leaves :math:`p` invariant. With
``B = 1`` and ``r = 1`` it is single-site Gibbs with an extra auxiliary draw; HB-10-1
of the paper is ``B = 10, r = 1``. Each step evaluates the log joint at all
:math:`|H_r(u)|` states (11 per chain for HB-10-1 on bits), in batches.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Tuple

import torch

from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.blocks import (
    StepInfo,
    ball_shifts,
    evaluate_changes,
    shift_values,
    step_info,
    value_windows,
    window_width,
)
from pyro_gwg.proposals.gwg import _gumbel_argmax
from pyro_gwg.proposals.layout import CoordinateLayout

__all__ = ["HammingBallState", "draw_blocks", "hamming_ball_init", "hamming_ball_step"]

LogJoint = Callable[[torch.Tensor], torch.Tensor]


class HammingBallState(NamedTuple):
    """State of a batch of Hamming-ball chains.

    :ivar torch.Tensor codes: long ``[C, D]`` coordinates.
    :ivar torch.Tensor log_joint: ``[C]`` log joint at ``codes``.
    """

    codes: torch.Tensor
    log_joint: torch.Tensor


def hamming_ball_init(codes: torch.Tensor, log_joint: LogJoint) -> HammingBallState:
    """Initial state: one log-joint evaluation at ``codes``.

    :param torch.Tensor codes: long ``[C, D]``.
    :param callable log_joint: ``codes [N, D] -> [N]``.
    :rtype: HammingBallState
    """
    return HammingBallState(codes, log_joint(codes))


def draw_blocks(
    codes: torch.Tensor, block_size: int, blocks: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """One block per chain, drawn independently of the state.

    :param torch.Tensor codes: long ``[C, D]`` (for shapes).
    :param int block_size: ``B``, at most ``D``.
    :param torch.Tensor blocks: optional long ``[num_blocks, B]``; one row is drawn
        uniformly per chain. Without it, ``B`` distinct coordinates are drawn
        uniformly.
    :returns: long ``[C, B]`` coordinates.
    """
    num_chains, num_coords = codes.shape
    if blocks is not None:
        index = torch.randint(0, blocks.shape[0], (num_chains,), device=codes.device)
        return blocks[index]
    noise = torch.rand(num_chains, num_coords, device=codes.device)
    return noise.topk(block_size, dim=-1).indices


def hamming_ball_step(
    state: HammingBallState,
    log_joint: LogJoint,
    layout: CoordinateLayout,
    shifts: torch.Tensor,
    window: int = 8,
    blocks: Optional[torch.Tensor] = None,
    chunk_size: int = 4096,
) -> Tuple[HammingBallState, StepInfo]:
    """One Hamming-ball update of every chain.

    :param HammingBallState state: current state.
    :param callable log_joint: ``codes [N, D] -> [N]``.
    :param CoordinateLayout layout: the coordinate layout.
    :param torch.Tensor shifts: long ``[S, B]`` from
        :func:`~pyro_gwg.proposals.blocks.ball_shifts` (row 0 the zero shift).
    :param int window: cell width of unbounded coordinates.
    :param torch.Tensor blocks: optional long ``[num_blocks, B]`` fixed blocks.
    :param int chunk_size: most states per model run.
    :returns: ``(new_state, info)``; ``info.accepted`` says whether the state changed.
    """
    codes = state.codes
    coords = draw_blocks(codes, shifts.shape[1], blocks)
    values = codes.gather(1, coords)
    low, size = value_windows(values, layout.lower[coords], layout.upper[coords], window)
    valid = (shifts < size.unsqueeze(1)).all(-1)  # [C, S]
    uniform = torch.zeros_like(valid, dtype=torch.get_default_dtype())
    aux = _gumbel_argmax(uniform.masked_fill(~valid, -float("inf")))
    aux_values = low + (values - low + shifts[aux]).remainder(size)  # u, uniform in the ball
    options, valid = shift_values(aux_values, low, size, shifts)  # the ball around u
    f = evaluate_changes(log_joint, codes, coords.unsqueeze(1), options, chunk_size)
    logits = f.masked_fill(~valid, -float("inf"))
    pick = _gumbel_argmax(logits)
    index = pick.reshape(-1, 1, 1).expand(-1, 1, coords.shape[1])
    new_values = options.gather(1, index).squeeze(1)
    new_state = HammingBallState(
        codes.scatter(1, coords, new_values), logits.gather(1, pick.unsqueeze(-1)).squeeze(-1)
    )
    stay = (options == values.unsqueeze(1)).all(-1)  # the row of the current state
    move_prob = 1 - (torch.softmax(logits, dim=-1) * stay).sum(-1)
    num_changed = (new_values != values).sum(-1)
    return new_state, step_info(num_changed > 0, move_prob, num_changed, shifts.shape[0])


def build_hamming_ball(
    density,
    block_size: int = 10,
    radius: int = 1,
    blocks: Optional[torch.Tensor] = None,
    window: int = 8,
    chunk_size: int = 4096,
) -> Algorithm:
    """The Hamming ball sampler as an ``(init, step)`` pair on ``density`` (see
    :mod:`pyro_gwg.proposals.algorithm`): :func:`hamming_ball_init` and
    :func:`hamming_ball_step`, with the fixed blocks checked and the ball's shifts
    computed once.

    :param density: a :class:`~pyro_gwg.density.Density`.
    :param int block_size: coordinates per block (capped at the number of
        coordinates); ignored when ``blocks`` is given.
    :param int radius: Hamming radius of the ball.
    :param torch.Tensor blocks: optional long ``[num_blocks, B]`` fixed blocks of flat
        coordinate indices.
    :param int window: cell width of unbounded coordinates.
    :param int chunk_size: most states per evaluation of the density.
    :rtype: Algorithm
    :raises ValueError: for blocks outside the coordinates or with repeated ones.
    """
    layout = density.layout
    num_coords = layout.num_coords
    device = layout.lower.device
    if blocks is not None:
        if bool((blocks < 0).any()) or bool((blocks >= num_coords).any()):
            raise ValueError(
                "blocks hold coordinate indices outside 0 .. {}".format(num_coords - 1)
            )
        if any(len(set(row.tolist())) != len(row) for row in blocks):
            raise ValueError("every block must hold distinct coordinates")
        blocks = blocks.to(device)
        block_size = blocks.shape[1]
    width = window_width(layout.lower, layout.upper, window)
    shifts = ball_shifts(min(block_size, num_coords), radius, width).to(device)

    def init(codes: torch.Tensor) -> HammingBallState:
        return hamming_ball_init(codes, density.log_joint)

    def step(state: HammingBallState) -> Tuple[HammingBallState, StepInfo]:
        return hamming_ball_step(
            state, density.log_joint, layout, shifts, window, blocks, chunk_size
        )

    return Algorithm(init, step)
