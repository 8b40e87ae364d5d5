r"""Shared pieces of the samplers that evaluate the log joint at many nearby states.

The Gibbs, Hamming-ball and locally balanced samplers replace the gradient of GWG by
exact evaluations of the log joint :math:`f` at a batch of states that differ from the
current one in a few coordinates. This module holds what they share; every function
is a pure, batched tensor function on the flat layout of
:mod:`pyro_gwg.proposals.layout`.

**Value windows.** A bounded coordinate (bit, category, bounded ordinal) ranges over
its whole support, ``low = lower``, ``size = upper - lower + 1``. An *unbounded*
ordinal coordinate (``Poisson``, ``Geometric``) ranges over one cell of a partition of
the integers into runs of ``window`` consecutive values, shifted by an offset drawn
uniformly from ``0 .. window - 1`` afresh at every step and independently of the
state (cells are cut at the support's finite bound). Conditioned on the offset, the
cell containing the current value is a fixed set, so a Gibbs or Hamming-ball update
restricted to it leaves the target invariant; the random offset lets the chain cross
cell boundaries, so the mixture over offsets is irreducible.

**Cyclic shifts.** Inside its window a coordinate moves by a cyclic shift,
``v -> low + (v - low + k) mod size`` with ``k`` in ``1 .. size - 1``. Shifts form a
group, so "``y`` differs from ``x`` by a shift in a set closed under negation" is a
symmetric relation, which is what the Hamming-ball sampler needs.

**Cost accounting.** :class:`StepInfo` is the per-chain statistics record of these
samplers, with the number of log-joint and gradient evaluations each chain paid for.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, NamedTuple, Tuple

import torch

__all__ = [
    "StepInfo",
    "ball_shifts",
    "cost",
    "evaluate_changes",
    "shift_values",
    "step_info",
    "value_windows",
    "window_width",
]

LogJoint = Callable[[torch.Tensor], torch.Tensor]

MAX_BALL_SIZE = 1 << 16


class StepInfo(NamedTuple):
    """Per-chain statistics of one step of a sampler without accept/reject step, or of
    one Metropolis-Hastings step.

    :ivar torch.Tensor accepted: bool ``[C]``. For an MH sampler, whether the proposal
        was accepted; for a Gibbs-type sampler (which has no rejection), whether the
        state changed.
    :ivar torch.Tensor accept_prob: ``[C]`` MH acceptance probability, or for a
        Gibbs-type sampler the probability that the state changes.
    :ivar torch.Tensor num_changed: long ``[C]`` coordinates changed by the proposal
        (MH) or by the update (Gibbs-type).
    :ivar torch.Tensor energy_evals: long ``[C]`` log-joint evaluations per chain in
        this step (states the model was run at, padding included).
    :ivar torch.Tensor grad_evals: long ``[C]`` gradient evaluations per chain in this
        step.
    """

    accepted: torch.Tensor
    accept_prob: torch.Tensor
    num_changed: torch.Tensor
    energy_evals: torch.Tensor
    grad_evals: torch.Tensor


def cost(reference: torch.Tensor, count: int) -> torch.Tensor:
    """long ``[C]`` tensor filled with ``count``, ``C = reference.shape[0]``."""
    return torch.full_like(reference[:, 0], count, dtype=torch.long)


def step_info(
    changed: torch.Tensor, move_prob: torch.Tensor, num_changed: torch.Tensor, energy_evals: int
) -> StepInfo:
    """:class:`StepInfo` of a Gibbs-type (rejection-free, gradient-free) update.

    :param torch.Tensor changed: bool ``[C]``, whether the state changed.
    :param torch.Tensor move_prob: ``[C]`` probability that the state changes.
    :param torch.Tensor num_changed: long ``[C]`` coordinates changed.
    :param int energy_evals: log-joint evaluations per chain.
    """
    column = num_changed.unsqueeze(-1)
    return StepInfo(changed, move_prob, num_changed, cost(column, energy_evals), cost(column, 0))


def window_width(lower: torch.Tensor, upper: torch.Tensor, window: int) -> int:
    """Largest number of values any coordinate ranges over in one step (a Python int).

    :param torch.Tensor lower: float ``[D]`` lower bounds.
    :param torch.Tensor upper: float ``[D]`` upper bounds (``inf`` if unbounded).
    :param int window: cell width of unbounded coordinates.
    """
    sizes = upper - lower + 1
    finite = sizes[torch.isfinite(sizes)]
    widest = int(finite.max()) if finite.numel() else 1
    return widest if bool(torch.isfinite(sizes).all()) else max(widest, int(window))


def value_windows(
    values: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor, window: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The values a coordinate ranges over in this step: ``low .. low + size - 1``.

    Bounded coordinates range over their support; unbounded ones over the cell of a
    randomly shifted partition into runs of ``window`` values (see the module notes).

    :param torch.Tensor values: long ``[C, N]`` current values.
    :param torch.Tensor lower: float ``[C, N]`` (or broadcastable) lower bounds.
    :param torch.Tensor upper: float ``[C, N]`` (or broadcastable) upper bounds.
    :param int window: cell width for unbounded coordinates.
    :returns: ``(low, size)``, long ``[C, N]`` each.
    """
    offset = torch.randint(0, int(window), values.shape, device=values.device)
    start = (values - (values - offset).remainder(int(window))).to(lower.dtype)
    bounded = torch.isfinite(lower) & torch.isfinite(upper)
    low = torch.where(bounded, lower, torch.maximum(start, lower))
    high = torch.where(bounded, upper, torch.minimum(start + (int(window) - 1), upper))
    return low.long(), (high - low + 1).long()


def ball_shifts(block_size: int, radius: int, width: int) -> torch.Tensor:
    """Every shift vector of a block with at most ``radius`` non-zero entries.

    Row 0 is the zero shift; entries are in ``0 .. width - 1``. A row is valid for a
    block whose coordinates range over ``size`` values when every entry is below its
    coordinate's ``size`` (the cyclic shifts of :func:`shift_values`).

    :param int block_size: coordinates per block ``B``.
    :param int radius: Hamming radius ``r``.
    :param int width: the widest coordinate's number of values.
    :returns: long ``[S, B]``, ``S = sum_k C(B, k) (width - 1)^k`` over ``k <= r``.
    :raises ValueError: when ``S`` exceeds 65536.
    """
    radius = min(radius, block_size)
    size = sum(math.comb(block_size, k) * (width - 1) ** k for k in range(radius + 1))
    if size > MAX_BALL_SIZE:
        raise ValueError(
            "A Hamming ball of radius {} in blocks of {} coordinates with {} values each "
            "holds {} states, more than {} per step; use a smaller block or "
            "radius.".format(radius, block_size, width, size, MAX_BALL_SIZE)
        )
    rows = [[0] * block_size]
    for k in range(1, radius + 1):
        for positions in itertools.combinations(range(block_size), k):
            for steps in itertools.product(range(1, width), repeat=k):
                row = [0] * block_size
                for position, step in zip(positions, steps):
                    row[position] = step
                rows.append(row)
    return torch.tensor(rows, dtype=torch.long)


def shift_values(
    values: torch.Tensor, low: torch.Tensor, size: torch.Tensor, shifts: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Cyclically shifted values of a block and the validity of each shift.

    :param torch.Tensor values: long ``[C, B]`` values of the block.
    :param torch.Tensor low: long ``[C, B]`` window start.
    :param torch.Tensor size: long ``[C, B]`` window size.
    :param torch.Tensor shifts: long ``[S, B]`` shift vectors.
    :returns: ``(shifted [C, S, B], valid [C, S])``; invalid rows (a shift beyond a
        coordinate's window) hold ``values`` unchanged, a valid state.
    """
    low, size, values = low.unsqueeze(1), size.unsqueeze(1), values.unsqueeze(1)
    valid = (shifts < size).all(-1)
    shifted = low + (values - low + shifts).remainder(size)
    return torch.where(valid.unsqueeze(-1), shifted, values), valid


def evaluate_changes(
    log_joint: LogJoint,
    codes: torch.Tensor,
    coords: torch.Tensor,
    values: torch.Tensor,
    chunk_size: int,
) -> torch.Tensor:
    """Log joint of ``S`` modified copies of every chain's state, in batches.

    Row ``s`` of chain ``c`` is ``codes[c]`` with coordinates ``coords[c, s]`` set to
    ``values[c, s]``. The ``C * S`` states are evaluated row by row, each row for all
    chains in chain order, ``chunk_size`` states at a time rounded down to whole rows
    (at least one row), each batch in one batched run of the model: state ``n`` of a
    batch belongs to chain ``n % C``, the order in which a density with values given
    per chain reads them (see :class:`~pyro_gwg.ModelDensity`'s ``given_per_chain``).

    :param callable log_joint: ``codes [N, D] -> [N]``.
    :param torch.Tensor codes: long ``[C, D]`` current states.
    :param torch.Tensor coords: long ``[C, S, B]`` coordinates changed per row.
    :param torch.Tensor values: long ``[C, S, B]`` their new values.
    :param int chunk_size: most states per model run (at least ``C``).
    :returns: ``[C, S]`` (``log_joint`` raises for a NaN log density).
    """
    num_chains, num_rows, width = values.shape
    total = num_chains * num_rows
    coords = coords.expand(num_chains, num_rows, width).transpose(0, 1).reshape(total, width)
    values = values.transpose(0, 1).reshape(total, width)
    per_run = max(1, chunk_size // num_chains) * num_chains
    out = []
    for start in range(0, total, per_run):
        stop = min(start + per_run, total)
        chains = torch.arange(start, stop, device=codes.device) % num_chains
        states = codes[chains].scatter(1, coords[start:stop], values[start:stop])
        out.append(log_joint(states))
    f = torch.cat(out) if len(out) > 1 else out[0]
    return f.reshape(num_rows, num_chains).transpose(0, 1)
