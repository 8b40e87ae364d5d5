r"""The discrete Langevin Monte Carlo kernel (Sun, Dai & Schuurmans 2023) [Sun2023]_."""

from __future__ import annotations

from pyro_gwg.kernels.step_size import StepSizeKernel
from pyro_gwg.kernels.support import check_supported_coordinates
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.dlmc import build_dlmc

__all__ = ["DLMC"]


class DLMC(StepSizeKernel):
    r"""Discrete Langevin Monte Carlo (Sun, Dai & Schuurmans 2023) [Sun2023]_ with a
    Metropolis-Hastings correction, for binary, categorical and bounded ordinal sites.

    Every coordinate runs, independently and for a time :math:`h` (the step size), the
    continuous-time Markov chain whose rate from value :math:`u` to :math:`v` is the
    square-root locally balanced weight of the first-order estimate at the current
    state, :math:`R_i(u, v) = \exp\big((\phi_{iv} - \phi_{iu}) / 2\big)`
    (:math:`\phi_{iv}` the gradient's estimate of :math:`f` with coordinate :math:`i` at
    value :math:`v`), simulated exactly: a bit flips with probability
    :math:`\sigma(d)(1 - e^{-2h\cosh(d/2)})` (:math:`d` the estimated gain of the flip),
    a categorical coordinate moves by the matrix exponential :math:`e^{hR_i}`. The
    proposal is accepted with probability
    :math:`\min\big(1, e^{f(y) - f(x)} q(x \mid y) / q(y \mid x)\big)`, so the chain is
    exact for every :math:`h` (:mod:`pyro_gwg.proposals.dlmc`). One forward and one
    backward pass of the model per step. Ordinal sites with an infinite support
    (``Poisson``, ``Geometric``) are refused.

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed``, ``step_size``
    (in force at the step), ``energy_evals``, ``grad_evals`` and ``log_joint``.

    :param float step_size: simulation time :math:`h`: where the adaptation starts
        (default 0.1), or its fixed value.
    :param settings: ``adapt_step_size``, ``target_accept_prob``, the cyclical
        step-size schedule of ACS (``step_size_schedule="cyclical"``, ``cycle_length``,
        ``big_step_size``, ``big_accept_prob``; see
        :class:`~pyro_gwg.kernels.step_size.StepSizeKernel`) and the options of every
        kernel (see :class:`~pyro_gwg.DiscreteKernel`).

    Example::

        >>> DLMC(step_size=0.5, adapt_step_size=False).step_size
        0.5
    """

    default_step_size = 0.1

    def build(self, density) -> Algorithm:
        """DLMC on ``density``: :func:`~pyro_gwg.proposals.dlmc.build_dlmc` with this
        kernel's step size.

        :rtype: Algorithm
        """
        return self._scheduled(build_dlmc(density, self.step_size))

    def _check_density(self, density) -> None:
        check_supported_coordinates(type(self).__name__, density.layout)
