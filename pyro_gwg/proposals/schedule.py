r"""Cyclical step-size schedules for the step-size samplers (NCG/DMALA, AVG, PAVG, DLMC),
after the automatic cyclical sampler (ACS) of Pynadath, Bhattacharya, Hariharan & Zhang
(2024) [Pynadath2024]_.

**The schedule.** With cycle length :math:`s`, a big step size :math:`\alpha_{\max}` and a
small one :math:`\alpha_{\min} \le \alpha_{\max}`, step :math:`t = 0, 1, \dots` runs with

.. math:: \alpha_t = \max\Big(\frac{\alpha_{\max}}{2}
          \Big(\cos\frac{\pi\, (t \bmod s)}{s} + 1\Big),\ \alpha_{\min}\Big)

(ACS's cosine schedule, floored at :math:`\alpha_{\min}` as the authors' code floors it
after tuning): each cycle
starts with one step of :math:`\alpha_{\max}`, large moves that can leave a mode, and
decays to :math:`\alpha_{\min}`, small moves that explore the mode it reached
(:func:`cyclical_step_size`).

**Exactness.** :func:`cyclical` wraps an algorithm whose state carries its step size
(``state.step_size``, as every step-size sampler's does): the state gains a step counter
``iteration`` and the two step sizes, and each step runs the wrapped, MH-corrected
transition with :math:`\alpha_t` in place of the step size. :math:`\alpha_t` depends on
the step number only, never on the chain's states, so every step is a Metropolis-Hastings
kernel :math:`K_{\alpha_t}` that leaves the target :math:`\pi` invariant, and so does the
product :math:`K_{\alpha_{t+n}} \cdots K_{\alpha_t}` of any run of them: the chain is
time-inhomogeneous (periodic with period :math:`s`) and exact at every step.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional, Tuple

import torch

from pyro_gwg.proposals.algorithm import Algorithm

__all__ = ["cyclical", "cyclical_step_size", "scheduled_state_type"]

#: the fields a schedule adds to the state of the algorithm it wraps
SCHEDULE_FIELDS = ("iteration", "big_step_size", "small_step_size")


def cyclical_step_size(
    iteration: torch.Tensor, cycle_length: int, big: torch.Tensor, small: torch.Tensor
) -> torch.Tensor:
    r"""The cyclical step size :math:`\alpha_t = \max\big(\alpha_{\max}(\cos(\pi (t \bmod
    s) / s) + 1) / 2, \alpha_{\min}\big)` (see the module docstring).

    :param torch.Tensor iteration: long ``[C]`` step numbers :math:`t` (0 starts a cycle).
    :param int cycle_length: :math:`s \ge 1`.
    :param torch.Tensor big: ``[C]`` :math:`\alpha_{\max}`.
    :param torch.Tensor small: ``[C]`` :math:`\alpha_{\min}`.
    :rtype: torch.Tensor
    """
    phase = torch.remainder(iteration, cycle_length).to(big.dtype) / cycle_length
    return torch.maximum(big * (torch.cos(math.pi * phase) + 1) / 2, small)


@functools.cache
def scheduled_state_type(base: type) -> type:
    """The state type of :func:`cyclical` around an algorithm whose state type is
    ``base``: ``base``'s fields, then ``iteration`` (long ``[C]``), ``big_step_size`` and
    ``small_step_size`` (``[C]``); ``base`` is its attribute ``base``.

    Two fields of a state are never one tensor object, even where their values are
    equal: a transition compiled by tracing (:func:`torch.jit.trace`) on a state whose
    fields alias each other reads one input for both.

    :rtype: type
    """
    fields = [(name, torch.Tensor) for name in base._fields + SCHEDULE_FIELDS]
    state_type = NamedTuple("Scheduled" + base.__name__, fields)
    state_type.base = base
    return state_type


def cyclical(algorithm: Algorithm, cycle_length: int, big_step_size: Optional[float]) -> Algorithm:
    r"""``algorithm`` with the cyclical step size :func:`cyclical_step_size` in place of
    the step size of its state.

    ``init`` starts the counter at 0 (the top of a cycle) with :math:`\alpha_{\min}` the
    algorithm's initial step size and :math:`\alpha_{\max}` = ``big_step_size`` (the
    larger of the two; ``None``: :math:`\alpha_{\min}`, a constant step until warmup
    sets it). ``step`` runs the wrapped step with :math:`\alpha_t` and counts. A warmup
    adaptation (:class:`~pyro_gwg.kernels.step_size.CyclicalAdaptation`) may write the
    three fields; after it the step sizes are a function of ``t`` alone.

    :param Algorithm algorithm: an algorithm whose state has a ``step_size`` field.
    :param int cycle_length: :math:`s`.
    :param float big_step_size: :math:`\alpha_{\max}`, or ``None``.
    :rtype: Algorithm
    """

    def init(codes: torch.Tensor) -> NamedTuple:
        base = algorithm.init(codes)
        small = base.step_size.clone()  # (fields of a state are never one tensor, see
        # scheduled_state_type)
        big = small.clamp(min=float(big_step_size) if big_step_size is not None else 0.0)
        iteration = torch.zeros(codes.shape[0], dtype=torch.long, device=codes.device)
        return scheduled_state_type(type(base))(*base, iteration, big, small)

    def step(state: NamedTuple) -> Tuple[NamedTuple, NamedTuple]:
        base_type = type(state).base
        base = base_type(*state[: len(base_type._fields)])
        size = cyclical_step_size(
            state.iteration, cycle_length, state.big_step_size, state.small_step_size
        )
        new, info = algorithm.step(base._replace(step_size=size))
        scheduled = (state.iteration + 1, state.big_step_size, state.small_step_size)
        return type(state)(*new, *scheduled), info

    return Algorithm(init, step)
