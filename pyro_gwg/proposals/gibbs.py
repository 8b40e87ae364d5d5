r"""Single-site Gibbs sampling, batched over chains.

At each step every chain picks one coordinate ``i`` (uniformly at random, or the
next one in a fixed sweep ``0, 1, ..., D - 1, 0, ...``) and draws its new value from
the exact conditional

.. math:: p(x_i = v \mid x_{-i}) \propto e^{f(x_{i \leftarrow v})}

over the values ``v`` of the coordinate's window (:mod:`pyro_gwg.proposals.blocks`):
its whole support when bounded, a randomly shifted cell of ``window`` values when
unbounded. The log joint of every value but the current one (cached) is evaluated in
one batched run of the model for all chains together: ``width - 1`` evaluations per
chain, ``width`` the widest window of the model (two for bits: one evaluation).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Tuple

import torch

from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.blocks import (
    StepInfo,
    evaluate_changes,
    shift_values,
    step_info,
    value_windows,
    window_width,
)
from pyro_gwg.proposals.gwg import _gumbel_argmax
from pyro_gwg.proposals.layout import CoordinateLayout

__all__ = ["GibbsState", "gibbs_init", "gibbs_step"]

LogJoint = Callable[[torch.Tensor], torch.Tensor]


class GibbsState(NamedTuple):
    """State of a batch of single-site Gibbs chains.

    :ivar torch.Tensor codes: long ``[C, D]`` coordinates.
    :ivar torch.Tensor log_joint: ``[C]`` log joint at ``codes``.
    :ivar torch.Tensor position: long ``[C]`` steps taken (the sweep position of a
        systematic scan).
    """

    codes: torch.Tensor
    log_joint: torch.Tensor
    position: torch.Tensor


def gibbs_init(codes: torch.Tensor, log_joint: LogJoint) -> GibbsState:
    """Initial Gibbs state: one log-joint evaluation at ``codes``.

    :param torch.Tensor codes: long ``[C, D]``.
    :param callable log_joint: ``codes [N, D] -> [N]``.
    :rtype: GibbsState
    """
    return GibbsState(codes, log_joint(codes), torch.zeros_like(codes[:, 0]))


def gibbs_step(
    state: GibbsState,
    log_joint: LogJoint,
    layout: CoordinateLayout,
    width: int,
    window: int = 8,
    systematic: bool = False,
    chunk_size: int = 4096,
) -> Tuple[GibbsState, StepInfo]:
    """One single-site Gibbs update of every chain.

    :param GibbsState state: current state.
    :param callable log_joint: ``codes [N, D] -> [N]``.
    :param CoordinateLayout layout: the coordinate layout.
    :param int width: the widest window (:func:`~pyro_gwg.proposals.blocks.window_width`).
    :param int window: cell width of unbounded coordinates.
    :param bool systematic: sweep the coordinates in order instead of drawing one.
    :param int chunk_size: most states per model run.
    :returns: ``(new_state, info)``; ``info.accepted`` says whether the state changed.
    """
    codes, current, position = state
    num_coords = codes.shape[1]
    if systematic:
        coords = position.remainder(num_coords).unsqueeze(-1)
    else:
        coords = torch.randint(0, num_coords, (codes.shape[0], 1), device=codes.device)
    values = codes.gather(1, coords)
    low, size = value_windows(values, layout.lower[coords], layout.upper[coords], window)
    shifts = torch.arange(1, width, device=codes.device).unsqueeze(-1)  # [width - 1, 1]
    options, valid = shift_values(values, low, size, shifts)  # [C, width - 1, 1]
    f = evaluate_changes(log_joint, codes, coords.unsqueeze(1), options, chunk_size)
    logits = torch.cat([current.unsqueeze(-1), f.masked_fill(~valid, -float("inf"))], dim=1)
    pick = _gumbel_argmax(logits)
    new_values = torch.cat([values, options.squeeze(-1)], dim=1).gather(1, pick.unsqueeze(-1))
    new_state = GibbsState(
        codes.scatter(1, coords, new_values),
        logits.gather(1, pick.unsqueeze(-1)).squeeze(-1),
        position + 1,
    )
    changed = pick > 0
    move_prob = 1 - torch.softmax(logits, dim=-1)[:, 0]
    return new_state, step_info(changed, move_prob, changed.long(), width - 1)


def build_gibbs(
    density, window: int = 8, systematic: bool = False, chunk_size: int = 4096
) -> Algorithm:
    """Single-site Gibbs as an ``(init, step)`` pair on ``density`` (see
    :mod:`pyro_gwg.proposals.algorithm`): :func:`gibbs_init` and :func:`gibbs_step`, with
    the width of the value windows computed once.

    :param density: a :class:`~pyro_gwg.density.Density`.
    :param int window: cell width of unbounded coordinates.
    :param bool systematic: sweep the coordinates in order instead of at random.
    :param int chunk_size: most states per evaluation of the density.
    :rtype: Algorithm
    """
    layout = density.layout
    width = window_width(layout.lower, layout.upper, window)

    def init(codes: torch.Tensor) -> GibbsState:
        return gibbs_init(codes, density.log_joint)

    def step(state: GibbsState) -> Tuple[GibbsState, StepInfo]:
        return gibbs_step(state, density.log_joint, layout, width, window, systematic, chunk_size)

    return Algorithm(init, step)
