r"""The base of the kernels whose step size adapts during warmup (NCG, AVG, PAVG, DLMC),
and their cyclical step-size schedule (:class:`CyclicalAdaptation`)."""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch

from pyro_gwg._validation import check_bool, check_integer, check_number
from pyro_gwg.adaptation import StepSizeAdaptation
from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.schedule import cyclical

__all__ = ["CyclicalAdaptation", "SCHEDULES", "StepSizeKernel"]

#: values of ``step_size_schedule``
SCHEDULES = (None, "cyclical")


class CyclicalAdaptation:
    r"""The warmup of a cyclical step-size schedule (:mod:`pyro_gwg.proposals.schedule`):
    it tunes :math:`\alpha_{\min}` and/or :math:`\alpha_{\max}` per chain, each by
    :class:`~pyro_gwg.adaptation.StepSizeAdaptation` (dual averaging on the log step
    size) toward an acceptance rate, with a constant step size throughout warmup:

    1. :math:`\alpha_{\min}` (when ``tune_small``): the first half of warmup (all of it
       when :math:`\alpha_{\max}` is given) adapts the step size toward
       ``target_accept_prob``, as the kernels without a schedule do;
    2. :math:`\alpha_{\max}` (when ``big_step_size`` is ``None``): the rest adapts it
       afresh, from :math:`\alpha_{\min}`, toward the lower ``big_accept_prob``: the
       largest step that is still accepted that often.

    The last warmup step writes :math:`\alpha_{\max} \ge \alpha_{\min}` (the larger of
    the two) and :math:`\alpha_{\min}` into the state and sets its counter to 0: sampling
    starts at the top of a cycle, and its step sizes are a function of the step number
    alone.

    :param float target_accept_prob: target of :math:`\alpha_{\min}`.
    :param float big_accept_prob: target of :math:`\alpha_{\max}`.
    :param int num_warmup: warmup steps (at least 2 when both are tuned).
    :param bool tune_small: tune :math:`\alpha_{\min}` (else: the initial step size).
    :param float big_step_size: the given :math:`\alpha_{\max}`, or ``None`` to tune it.
    :param float max_log_step_size: bound on :math:`|\log\alpha|`.
    """

    static: dict = {}

    def __init__(
        self,
        target_accept_prob: float,
        big_accept_prob: float,
        num_warmup: int,
        tune_small: bool,
        big_step_size: Optional[float],
        max_log_step_size: float = 20.0,
    ) -> None:
        self.num_warmup = num_warmup
        self.big_step_size = big_step_size
        #: warmup steps that tune the small step size (0 when it is fixed); the big one
        #: is tuned in the rest
        self.switch = (
            (num_warmup // 2 if big_step_size is None else num_warmup) if tune_small else 0
        )
        self._small = StepSizeAdaptation(target_accept_prob, self.switch, max_log_step_size)
        self._big = StepSizeAdaptation(big_accept_prob, num_warmup - self.switch, max_log_step_size)
        self._small_step: Optional[torch.Tensor] = None  # the tuned (or fixed) small step

    def update(self, t: int, state: NamedTuple, info: NamedTuple) -> NamedTuple:
        if t < self.switch:
            state = self._small.update(t, state, info)
            if t + 1 == self.switch:
                self._small_step = state.step_size
        else:
            if self._small_step is None:  # a fixed small step size: the initial one
                self._small_step = state.small_step_size
            state = self._big.update(t - self.switch, state, info)
        size = state.step_size
        if t + 1 < self.num_warmup:  # a constant step size, the one in force
            # (three tensors: a transition traced on aliased fields reads one for all)
            return state._replace(big_step_size=size.clone(), small_step_size=size.clone())
        small = self._small_step
        big = size if self.big_step_size is None else torch.full_like(small, self.big_step_size)
        return state._replace(
            step_size=small.clone(),
            big_step_size=torch.maximum(big, small),
            small_step_size=small.clone(),
            iteration=torch.zeros_like(state.iteration),
        )


class StepSizeKernel(DiscreteKernel):
    r"""Base of the kernels with a step size :math:`\epsilon` adapted during warmup
    (:class:`~pyro_gwg.kernels.ncg.NCG`, :class:`~pyro_gwg.kernels.ncg.AVG`,
    :class:`~pyro_gwg.kernels.ncg.PAVG`, :class:`~pyro_gwg.kernels.dlmc.DLMC`).

    The step size lives in the kernel state (``state.step_size``, one per chain), so a
    compiled transition reads the adapted value. With ``adapt_step_size=True`` each
    chain runs its own :class:`~pyro.ops.dual_averaging.DualAveraging` on
    :math:`\log \epsilon` during warmup (:class:`~pyro_gwg.adaptation.StepSizeAdaptation`,
    the scheme of Pyro's HMC) toward ``target_accept_prob``, and the last warmup step
    freezes :math:`\epsilon` at the exponential of the averaged iterate.

    With ``step_size_schedule="cyclical"`` the step size follows the cyclical schedule
    of ACS (Pynadath et al. 2024 [Pynadath2024]_, :mod:`pyro_gwg.proposals.schedule`):
    step :math:`t` of a cycle of :math:`s` = ``cycle_length`` steps runs with

    .. math:: \alpha_t = \max\Big(\frac{\alpha_{\max}}{2}
              \Big(\cos\frac{\pi\, (t \bmod s)}{s} + 1\Big),\ \alpha_{\min}\Big),

    one big step :math:`\alpha_{\max}` (``big_step_size``) that can leave a mode, then
    steps decaying to :math:`\alpha_{\min}` (``step_size``) that explore the mode
    reached. The kernel stays exact: :math:`\alpha_t` is a function of the step number
    alone (a counter in the state), so each step is the kernel's own MH-corrected
    transition at a fixed step size, which leaves the posterior invariant. Warmup
    tunes what is not given (:class:`CyclicalAdaptation`): :math:`\alpha_{\min}` toward
    ``target_accept_prob`` (with ``adapt_step_size``), then :math:`\alpha_{\max}`
    toward ``big_accept_prob``, at a constant step size; sampling starts at the top of
    a cycle. What differs from ACS: ACS also cycles a balancing parameter
    :math:`\beta_t` from about 0.95 at :math:`\alpha_{\max}` to 0.5 at
    :math:`\alpha_{\min}` (proposal logits :math:`\beta_t \nabla f` instead of
    :math:`\tfrac12 \nabla f`); here :math:`\beta = 1/2` throughout, the kernel's own
    locally balanced proposal (with the MH test either choice is exact: :math:`\beta`
    only shapes the proposal, and ACS's larger :math:`\beta` at big steps is meant to
    raise their acceptance). For DLMC, AVG and PAVG the schedule is ACS's step-size
    schedule on another proposal, which the paper does not test. ACS sets
    :math:`s = \lceil K / m \rceil` from the run length :math:`K` and a number of
    cycles :math:`m`, which a kernel does not know: here :math:`s` is given. ACS tunes
    :math:`\alpha_{\min}` and :math:`\alpha_{\max}` by a search over trial runs toward
    an acceptance rate of about 0.5 (its :math:`\alpha_{\max}` search keeps the step
    with the highest acceptance from a shrinking large one); here both are dual
    averaging, each toward its own target.

    :param float step_size: where the adaptation starts, or the fixed value with
        ``adapt_step_size=False`` (default: the class's ``default_step_size``); with a
        cyclical schedule, the small step size :math:`\alpha_{\min}`.
    :param bool adapt_step_size: adapt the step size during warmup (default ``True``,
        as in Pyro's HMC).
    :param float target_accept_prob: target of the adaptation (default 0.574).
    :param str step_size_schedule: ``None`` (default: the step size is constant after
        warmup) or ``"cyclical"``.
    :param int cycle_length: :math:`s`, steps per cycle of the cyclical schedule
        (default 10).
    :param float big_step_size: :math:`\alpha_{\max}` of the cyclical schedule, or
        ``None`` (default) to tune it during warmup (at least 2 warmup steps).
    :param float big_accept_prob: target acceptance rate of the big step size's tuning
        (default 0.2).
    :param options: ``jit_compile``, ``max_plate_nesting``, ``init_strategy``: see
        :class:`~pyro_gwg.DiscreteKernel`.
    """

    default_step_size = 1.0
    #: bound on :math:`|\log \epsilon|` during adaptation (a target on which every
    #: proposal is accepted would otherwise push the step size to infinity)
    max_log_step_size = 20.0
    #: steps per cycle of the cyclical schedule when ``cycle_length`` is not given
    default_cycle_length = 10

    def __init__(
        self,
        model=None,
        *,
        step_size: Optional[float] = None,
        adapt_step_size: bool = True,
        target_accept_prob: float = 0.574,
        step_size_schedule: Optional[str] = None,
        cycle_length: Optional[int] = None,
        big_step_size: Optional[float] = None,
        big_accept_prob: float = 0.2,
        **options,
    ) -> None:
        if step_size is not None:
            check_number("step_size", step_size, 0, math.inf, low_open=True, high_open=True)
        self.step_size = float(step_size or type(self).default_step_size)
        self.adapt_step_size = check_bool("adapt_step_size", adapt_step_size)
        self.target_accept_prob = check_number(
            "target_accept_prob", target_accept_prob, 0, 1, low_open=True, high_open=True
        )
        if step_size_schedule not in SCHEDULES:
            raise ValueError(
                "{}(step_size_schedule={!r}): the schedules are None (a constant step "
                "size) and 'cyclical'.".format(type(self).__name__, step_size_schedule)
            )
        self.step_size_schedule = step_size_schedule
        if step_size_schedule is None and (cycle_length, big_step_size) != (None, None):
            raise ValueError(
                "{}: cycle_length and big_step_size set the cyclical step-size schedule; "
                "give step_size_schedule='cyclical' with them, or leave them "
                "out.".format(type(self).__name__)
            )
        if cycle_length is None:
            cycle_length = type(self).default_cycle_length
        self.cycle_length = check_integer("cycle_length", cycle_length, 1, "steps per cycle")
        if big_step_size is not None:
            check_number("big_step_size", big_step_size, 0, math.inf, low_open=True, high_open=True)
            if not adapt_step_size and big_step_size < self.step_size:
                raise ValueError(
                    "{}: big_step_size={} is smaller than step_size={}: the cyclical "
                    "schedule decays from the big step size to the small one (step_size); "
                    "give big_step_size >= step_size.".format(
                        type(self).__name__, big_step_size, self.step_size
                    )
                )
            big_step_size = float(big_step_size)
        self.big_step_size = big_step_size
        self.big_accept_prob = check_number(
            "big_accept_prob", big_accept_prob, 0, 1, low_open=True, high_open=True
        )
        super().__init__(model, **options)

    def _scheduled(self, algorithm: Algorithm) -> Algorithm:
        """``algorithm`` with the kernel's step-size schedule (itself without one)."""
        if self.step_size_schedule is None:
            return algorithm
        return cyclical(algorithm, self.cycle_length, self.big_step_size)

    def _step_size_adaptation(self, num_warmup: int):
        if self.step_size_schedule is not None:
            if not self.adapt_step_size and self.big_step_size is not None:
                return None
            return CyclicalAdaptation(
                self.target_accept_prob,
                self.big_accept_prob,
                num_warmup,
                self.adapt_step_size,
                self.big_step_size,
                self.max_log_step_size,
            )
        if not self.adapt_step_size:
            return None
        return StepSizeAdaptation(self.target_accept_prob, num_warmup, self.max_log_step_size)

    def adaptation(self, density, num_warmup: int):
        return self._step_size_adaptation(num_warmup)

    def driver_for(self, density, num_warmup: int = 0, *args, **kwargs):
        tuned = int(self.adapt_step_size) + int(self.big_step_size is None)
        if (
            self.step_size_schedule is not None
            and self.big_step_size is None
            and num_warmup < tuned
        ):
            raise ValueError(
                "{}(step_size_schedule='cyclical') tunes its big step size during warmup, "
                "which needs at least {} warmup steps (got {}); give big_step_size, or "
                "more warmup steps.".format(type(self).__name__, tuned, num_warmup)
            )
        return super().driver_for(density, num_warmup, *args, **kwargs)

    @property
    def step_sizes(self) -> Optional[torch.Tensor]:
        """``[C]`` step sizes in force (``None`` before :meth:`setup`); with a cyclical
        schedule, the step size of the last step."""
        return self.state.step_size if self.state is not None else None
