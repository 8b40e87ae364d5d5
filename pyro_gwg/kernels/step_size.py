r"""The base of the kernels whose step size adapts during warmup (NCG, AVG, PAVG, DLMC)."""

from __future__ import annotations

import math
from typing import Optional

import torch

from pyro_gwg._validation import check_bool, check_number
from pyro_gwg.adaptation import StepSizeAdaptation
from pyro_gwg.kernels.base import DiscreteKernel

__all__ = ["StepSizeKernel"]


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

    :param float step_size: where the adaptation starts, or the fixed value with
        ``adapt_step_size=False`` (default: the class's ``default_step_size``).
    :param bool adapt_step_size: adapt the step size during warmup (default ``True``,
        as in Pyro's HMC).
    :param float target_accept_prob: target of the adaptation (default 0.574).
    :param options: ``jit_compile``, ``max_plate_nesting``, ``init_strategy``: see
        :class:`~pyro_gwg.DiscreteKernel`.
    """

    default_step_size = 1.0
    #: bound on :math:`|\log \epsilon|` during adaptation (a target on which every
    #: proposal is accepted would otherwise push the step size to infinity)
    max_log_step_size = 20.0

    def __init__(
        self,
        model=None,
        *,
        step_size: Optional[float] = None,
        adapt_step_size: bool = True,
        target_accept_prob: float = 0.574,
        **options,
    ) -> None:
        if step_size is not None:
            check_number("step_size", step_size, 0, math.inf, low_open=True, high_open=True)
        self.step_size = float(step_size or type(self).default_step_size)
        self.adapt_step_size = check_bool("adapt_step_size", adapt_step_size)
        self.target_accept_prob = check_number(
            "target_accept_prob", target_accept_prob, 0, 1, low_open=True, high_open=True
        )
        super().__init__(model, **options)

    def _step_size_adaptation(self, num_warmup: int) -> Optional[StepSizeAdaptation]:
        if not self.adapt_step_size:
            return None
        return StepSizeAdaptation(self.target_accept_prob, num_warmup, self.max_log_step_size)

    def adaptation(self, density, num_warmup: int) -> Optional[StepSizeAdaptation]:
        return self._step_size_adaptation(num_warmup)

    @property
    def step_sizes(self) -> Optional[torch.Tensor]:
        """``[C]`` step sizes in force (``None`` before :meth:`setup`)."""
        return self.state.step_size if self.state is not None else None
