r"""Warmup adaptation: host-side schemes that the chain driver calls after every warmup
step.

An adaptation has a ``static`` dict (the ``build`` arguments it sets, see
:mod:`pyro_gwg.proposals.algorithm`; a change builds and compiles the transition anew,
so the schemes here keep it constant and adapt fields of the state instead) and a
method ``update(t, state, info) -> state``, called with the 0-based warmup step ``t``
(of ``num_warmup``), the state after that step and its ``info`` (``[C]`` fields); it
returns the state to continue from (with an adapted number of flips, step size or
preconditioner written into it). Schemes:

* :class:`NumFlipsAdaptation` (GWG): dual averaging on :math:`\log N`, on the
  ``num_flips`` field of the state;
* :class:`StepSizeAdaptation` (NCG, AVG, PAVG): dual averaging on :math:`\log\epsilon`,
  one scheme per chain, on the ``step_size`` field of the state;
* :class:`PreconditionerAdaptation` (PAVG): fits the preconditioner ``M`` from warmup
  states, around a step-size adaptation.

All use Pyro's :class:`~pyro.ops.dual_averaging.DualAveraging` (the scheme of Pyro's
HMC and NUTS) with statistic ``target_accept_prob - accept_prob``.
"""

from __future__ import annotations

import math
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch
from pyro.ops.dual_averaging import DualAveraging

from pyro_gwg._warn import warn
from pyro_gwg.proposals.layout import CandidateGrid
from pyro_gwg.proposals.ncg import PreconditionerFit, fit_preconditioner, preconditioner

__all__ = [
    "ChainRecord",
    "NumFlipsAdaptation",
    "PreconditionerAdaptation",
    "StepSizeAdaptation",
    "fit_records",
    "flips_bound",
    "warmup_bound",
]


def flips_bound(num_flips: int, num_coords: int) -> int:
    """The smallest power of two at least ``num_flips``, at most ``num_coords``: the
    ``max_flips`` of GWG's sampling transition after :class:`NumFlipsAdaptation`.

    :rtype: int
    """
    return min(1 << max(int(num_flips) - 1, 0).bit_length(), int(num_coords))


#: the least warmup bound of :class:`NumFlipsAdaptation` (below it, more draws cost less
#: than the transitions built to save them)
MIN_WARMUP_BOUND = 64


def warmup_bound(num_flips: int, num_coords: int) -> int:
    """:func:`flips_bound` of ``2 * num_flips``, at least :data:`MIN_WARMUP_BOUND`: the
    ``max_flips`` of GWG's warmup transition once :class:`NumFlipsAdaptation` reaches
    ``num_flips`` (room to double before another transition is built).

    :rtype: int
    """
    return flips_bound(max(2 * int(num_flips), MIN_WARMUP_BOUND), num_coords)


class NumFlipsAdaptation:
    r"""The number of flips :math:`N` of GWG, adapted by dual averaging on
    :math:`\log N` toward ``target_accept_prob`` (the chains' mean acceptance
    probability as statistic), rounded to an integer in :math:`[1, D]` and frozen at the
    rounded average iterate after the last warmup step.

    :math:`N` is a run-time value: the ``num_flips`` field of the state, read by a step
    built with a bound ``max_flips`` (its ``static``) that draws ``max_flips``
    coordinates and masks all but the first :math:`N`, so that a new value of
    :math:`N` needs no new transition. A step's cost grows with its bound (GWG draws
    ``max_flips`` coordinates, PAS and PAFS make ``max_flips`` sequential moves), so
    the warmup bound is :func:`warmup_bound` of :math:`N` (at most :math:`4N`), set at
    the start and again whenever :math:`N` passes the bound or falls to an eighth of
    it (the early iterates of dual averaging range widely; between those limits the
    transition in force is kept): a warmup builds a handful of transitions, at most
    one per power of two up to ``D``, and goes back to one it built at no cost. After
    warmup the bound is :func:`flips_bound` of the frozen :math:`N` (the next power of
    two, at most ``D``), so that sampling draws at most :math:`2N` coordinates and the value
    :math:`N` is not a key of the compiled transition: runs whose warmups settle on
    nearby values share one compiled sampling transition (and its package in the disk
    cache).

    :param int num_flips: starting value.
    :param int num_coords: ``D``.
    :param float target_accept_prob: target acceptance probability.
    :param int num_warmup: warmup steps.
    """

    def __init__(
        self, num_flips: int, num_coords: int, target_accept_prob: float, num_warmup: int
    ) -> None:
        self.static: Dict[str, int] = {"max_flips": warmup_bound(num_flips, num_coords)}
        self.num_coords = num_coords
        self.target_accept_prob = target_accept_prob
        self.num_warmup = num_warmup
        self._dual = DualAveraging(prox_center=math.log(num_flips))
        #: the value in force
        self.current = int(num_flips)
        #: the value frozen at the end of warmup (``None`` before)
        self.adapted: Optional[int] = None

    def update(self, t: int, state: NamedTuple, info: NamedTuple) -> NamedTuple:
        self._dual.step(self.target_accept_prob - float(info.accept_prob.mean()))
        log_flips, log_flips_avg = self._dual.get_state()
        final = t + 1 >= self.num_warmup
        log_flips = min(max(log_flips_avg if final else log_flips, 0.0), math.log(self.num_coords))
        self.current = max(1, min(round(math.exp(log_flips)), self.num_coords))
        if final:
            self.adapted = self.current
            self.static = {"max_flips": flips_bound(self.current, self.num_coords)}
        elif not self.current <= self.static["max_flips"] < 8 * self.current:
            self.static = {"max_flips": warmup_bound(self.current, self.num_coords)}
        return state._replace(num_flips=torch.full_like(state.num_flips, self.current))


class StepSizeAdaptation:
    r"""Per-chain dual averaging of the ``step_size`` field of the state on
    :math:`\log\epsilon`, prox-centre :math:`\log(10\epsilon_0)` (as in Pyro's HMC),
    bounded by :math:`|\log\epsilon| \le` ``max_log_step_size``, frozen at the
    exponential of the averaged iterate after the last warmup step.

    :param float target_accept_prob: target acceptance probability.
    :param int num_warmup: warmup steps.
    :param float max_log_step_size: bound on :math:`|\log\epsilon|` (a target on which
        every proposal is accepted would otherwise push the step size to infinity).
    """

    static: Dict[str, object] = {}

    def __init__(
        self, target_accept_prob: float, num_warmup: int, max_log_step_size: float = 20.0
    ) -> None:
        self.target_accept_prob = target_accept_prob
        self.num_warmup = num_warmup
        self.max_log_step_size = max_log_step_size
        self._dual: Optional[DualAveraging] = None

    def restart(self, step_size: torch.Tensor) -> None:
        """Start dual averaging afresh from the step sizes ``[C]`` in force."""
        self._dual = DualAveraging(prox_center=(10 * step_size).log())

    def update(self, t: int, state: NamedTuple, info: NamedTuple) -> NamedTuple:
        if self._dual is None:
            self.restart(state.step_size)
        self._dual.step(self.target_accept_prob - info.accept_prob)
        log_step, log_step_avg = self._dual.get_state()
        log_step = log_step_avg if t + 1 >= self.num_warmup else log_step
        bound = self.max_log_step_size
        step_size = log_step.clamp(-bound, bound).exp().to(state.step_size.dtype)
        return state._replace(step_size=step_size)


class ChainRecord:
    """The relaxed states, gradients and log joints of a batch of chains at successive
    states, the data of :func:`~pyro_gwg.proposals.ncg.fit_preconditioner` (PAVG's
    warmup, :class:`PreconditionerAdaptation`, and PCD's ``preconditioner="chains"``).

    :param CandidateGrid grid: the candidate grid of the density's layout.
    """

    def __init__(self, grid: CandidateGrid) -> None:
        self.grid = grid
        self._steps: List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def __len__(self) -> int:
        return len(self._steps)

    def add(self, state: NamedTuple) -> None:
        """Record the chains' ``state`` (a gradient sampler's: ``codes``, ``grad``,
        ``log_joint``) as the next step."""
        grid = self.grid
        self._steps.append((grid.embed(state.codes), grid.flat_grad(state.grad), state.log_joint))

    def tensors(self) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(states [T, C, R], grads [T, C, R], log_joints [T, C])`` of the ``T``
        recorded steps."""
        return tuple(torch.stack(x) for x in zip(*self._steps))


def fit_records(records: List[ChainRecord]) -> Optional[PreconditionerFit]:
    """:func:`~pyro_gwg.proposals.ncg.fit_preconditioner` on the pooled ``records`` (of
    as many steps each), each record's chains taken as chains of their own: the
    covariance pools every state, the scale is fitted on successive states within a
    record only (a record's log joints come from one density), and the entries of ``M``
    that :meth:`~pyro_gwg.proposals.layout.CandidateGrid.block_mask` drops are zero.

    :param list records: non-empty :class:`ChainRecord` s of one grid.
    :returns: the fit, or ``None`` when fewer than two moves were recorded.
    """
    states, grads, log_joints = (torch.cat(x, 1) for x in zip(*(r.tensors() for r in records)))
    return fit_preconditioner(states, grads, log_joints, mask=records[0].grid.block_mask())


class PreconditionerAdaptation:
    """The warmup of PAVG without a given preconditioner: with ``W`` warmup steps,

    1. steps ``1 .. W/4``: the state's ``M`` (0 at the start: AVG) while the step size
       adapts;
    2. steps ``W/4 + 1 .. W/2``: the states, gradients and log joints of every chain are
       collected;
    3. at step ``W/2``, :func:`~pyro_gwg.proposals.ncg.fit_preconditioner` fits ``M``,
       the state takes its eigendecomposition and the step-size adaptation restarts;
    4. the rest of warmup adapts the step size under the fitted ``M``.

    Warmup shorter than :attr:`min_warmup` steps (or without a move while collecting)
    keeps ``M`` with a warning.

    :param CandidateGrid grid: the candidate grid of the density's layout.
    :param int num_warmup: warmup steps.
    :param StepSizeAdaptation step_size: the step-size adaptation to run around the fit,
        or ``None`` for a fixed step size.
    """

    static: Dict[str, object] = {}
    min_warmup = 8

    def __init__(
        self, grid: CandidateGrid, num_warmup: int, step_size: Optional[StepSizeAdaptation]
    ) -> None:
        self.grid = grid
        self.num_warmup = num_warmup
        self.step_size = step_size
        self._collected = ChainRecord(grid)
        #: the :class:`~pyro_gwg.proposals.ncg.PreconditionerFit` (``None`` before the fit)
        self.fit: Optional[PreconditionerFit] = None

    def update(self, t: int, state: NamedTuple, info: NamedTuple) -> NamedTuple:
        if self.step_size is not None:
            state = self.step_size.update(t, state, info)
        step, start, fit_at = t + 1, self.num_warmup // 4, self.num_warmup // 2
        if self.num_warmup < self.min_warmup:
            if step == self.num_warmup:
                warn(
                    "PAVG needs at least {} warmup steps to estimate its preconditioner; "
                    "running with M = 0 (AVG).".format(self.min_warmup),
                    UserWarning,
                )
            return state
        if start < step <= fit_at:
            self._collected.add(state)
        if step == fit_at:
            state = self._fit(state)
        return state

    def _fit(self, state: NamedTuple) -> NamedTuple:
        fit = fit_records([self._collected])
        self._collected = ChainRecord(self.grid)
        if fit is None:
            warn(
                "PAVG saw no moves while collecting warmup states; running with M = 0 (AVG).",
                UserWarning,
            )
            return state
        self.fit = fit
        precond = preconditioner(fit.matrix, state.codes.shape[0])
        if self.step_size is not None:
            self.step_size.restart(state.step_size)
        return state._replace(eigvals=precond.eigvals, eigvecs=precond.eigvecs)
