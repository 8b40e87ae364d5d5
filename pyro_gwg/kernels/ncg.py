r"""The NCG, AVG and PAVG kernels (Rhodes & Gutmann 2022) [Rhodes2022]_: every coordinate
per step, from a gradient-informed factorised proposal with a Metropolis-Hastings
correction (the formulas are in :mod:`pyro_gwg.proposals.ncg`), the step size adapted
during warmup (:class:`~pyro_gwg.kernels.step_size.StepSizeKernel`)."""

from __future__ import annotations

from typing import Optional

import torch

from pyro_gwg._validation import check_integer
from pyro_gwg.adaptation import PreconditionerAdaptation
from pyro_gwg.kernels.step_size import StepSizeKernel
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.layout import CandidateGrid
from pyro_gwg.proposals.ncg import PreconditionerFit, build_avg, build_ncg, build_pavg

__all__ = ["AVG", "FactorisedKernel", "NCG", "PAVG"]


class FactorisedKernel(StepSizeKernel):
    r"""Base of :class:`NCG`, :class:`AVG` and :class:`PAVG`: a step size adapted as in
    :class:`~pyro_gwg.kernels.step_size.StepSizeKernel` and the candidate window of
    unbounded ordinals.

    :param int window: half-width of the candidate window of unbounded ordinal
        coordinates (``Poisson``, ``Geometric``, ...): they move to values within
        ``window`` of the current one (default 10). Coordinates with a finite support
        range over all of it.
    :param settings: ``step_size``, ``adapt_step_size``, ``target_accept_prob`` and the
        cyclical step-size schedule (``step_size_schedule``, ``cycle_length``,
        ``big_step_size``, ``big_accept_prob``; see
        :class:`~pyro_gwg.kernels.step_size.StepSizeKernel`) and the options of every
        kernel (see :class:`~pyro_gwg.DiscreteKernel`).
    """

    _build = staticmethod(build_ncg)

    def __init__(self, model=None, *, window: int = 10, **settings) -> None:
        self.window = check_integer("window", window, 1)
        super().__init__(model, **settings)

    def build(self, density) -> Algorithm:
        """The kernel's algorithm on ``density`` with its step size and window (see
        :func:`~pyro_gwg.proposals.ncg.build_ncg`).

        :rtype: Algorithm
        """
        return self._scheduled(type(self)._build(density, self.step_size, self.window))


class NCG(FactorisedKernel):
    r"""Norm-constrained gradient sampler (Rhodes & Gutmann 2022 [Rhodes2022]_, Eq. 8,
    Algorithm B.1), also known as DMALA (Zhang, Liu & Liu 2022 [Zhang2022]_, the
    discrete Metropolis-adjusted Langevin algorithm): ``pyro_gwg.DMALA`` is this class.

    Every coordinate is proposed at once from the factorised distribution

    .. math:: q_i(v \mid x) \propto \exp\Big(\tfrac12 g_i (v - x_i)
              - \tfrac{1}{2\epsilon} (v - x_i)^2\Big)

    over the values ``v`` of coordinate ``i`` (bits: {0, 1}; ordinals: their finite
    support, or :math:`x_i \pm` ``window`` when unbounded; categoricals: logits
    :math:`g_{iv}/2 - [v \ne x_i]/\epsilon`), :math:`g = \nabla f(x)` the gradient of
    the log joint in the relaxed values, and accepted with probability
    :math:`\min\big(1, e^{f(x') - f(x)} q(x \mid x') / q(x' \mid x)\big)`. This is
    Zhang et al.'s discrete Langevin proposal with their step size
    :math:`\alpha = \epsilon` (for a one-hot category the terms that do not depend on
    ``v`` cancel in the softmax). Larger :math:`\epsilon` changes more coordinates per
    step. One forward and one backward pass of the model per step.

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed`` (coordinates
    the proposal changed), ``step_size`` (in force at the step), ``energy_evals``,
    ``grad_evals`` and ``log_joint``.

    :param float step_size: :math:`\epsilon`: where the adaptation starts (default
        0.5, the reference value for binary targets), or its fixed value.
    :param settings: ``window`` (see :class:`FactorisedKernel`), ``adapt_step_size``,
        ``target_accept_prob``, the cyclical step-size schedule of ACS
        (``step_size_schedule="cyclical"``, ``cycle_length``, ``big_step_size``,
        ``big_accept_prob``; see :class:`~pyro_gwg.kernels.step_size.StepSizeKernel`)
        and the options of every kernel (see :class:`~pyro_gwg.DiscreteKernel`).

    Example::

        >>> NCG(step_size=0.2, window=5).adapt_step_size
        True
    """

    default_step_size = 0.5


class AVG(FactorisedKernel):
    r"""Auxiliary-variable gradient sampler (Rhodes & Gutmann 2022 [Rhodes2022]_, Eqs. 9-11,
    Algorithm B.2).

    Each step draws a Gaussian auxiliary :math:`z \sim \mathcal N(\sqrt{2/\epsilon}\,
    \phi(x), I)` (:math:`\phi` the relaxed values: numbers for scalar coordinates,
    one-hot vectors for categoricals), proposes every coordinate from

    .. math:: q_i(v \mid z, x) \propto \exp\Big(\big(g_i + \sqrt{2/\epsilon}\, z_i\big)^T
              \phi_i(v) - \lVert \phi_i(v) \rVert^2 / \epsilon\Big)

    and accepts with the Metropolis-Hastings ratio in the space extended by ``z``:
    :math:`\frac{e^{f(x')} \mathcal N(z; \sqrt{2/\epsilon}\phi(x'), I)\, q(x \mid z, x')}
    {e^{f(x)} \mathcal N(z; \sqrt{2/\epsilon}\phi(x), I)\, q(x' \mid z, x)}`.
    Settings as in :class:`NCG`; the step size starts at 0.2 (the reference value for
    binary targets).

    Per-draw statistics as in :class:`NCG`: ``accepted``, ``accept_prob``,
    ``num_changed``, ``step_size``, ``energy_evals``, ``grad_evals`` and ``log_joint``.

    Example::

        >>> AVG().step_size
        0.2
    """

    default_step_size = 0.2
    _build = staticmethod(build_avg)


class PAVG(FactorisedKernel):
    r"""Preconditioned auxiliary-variable gradient sampler (Rhodes & Gutmann 2022
    [Rhodes2022]_, Section 3.2).

    With a symmetric preconditioner ``M`` on the relaxed values :math:`\phi(x)`,
    :math:`d = 2/\epsilon - \min(\lambda_{\min}(M), 0)` and :math:`A = (M + dI)^{1/2}`,
    each step draws :math:`z \sim \mathcal N(A\phi(x), I)`, proposes every coordinate
    from

    .. math:: q_i(v \mid z, x) \propto \exp\Big(\big(g - M\phi(x) + Az\big)_i^T \phi_i(v)
              - \tfrac d2 \lVert \phi_i(v) \rVert^2\Big)

    and accepts with the extended-space ratio of :class:`AVG` (with ``A`` in place of
    :math:`\sqrt{2/\epsilon} I`). ``M = 0`` is AVG. If the log joint is quadratic in
    :math:`\phi` with Hessian ``M`` (an Ising model on bits :math:`x`, :math:`s = 2x -
    1`, :math:`f = \tfrac12 s^T J s + b^T s`: ``M = 4 J``), the proposal is the exact
    conditional and PAVG is the block-Gibbs sampler of Martens & Sutskever (2010)
    [MartensSutskever2010]_: every proposal is accepted.

    ``M`` is given (``preconditioner``) or estimated during warmup
    (:class:`~pyro_gwg.adaptation.PreconditionerAdaptation`): ``M = 0`` for the first
    quarter while the step size adapts, the states, gradients and log joints of every
    chain collected in the second, fitted at mid-warmup by
    :func:`~pyro_gwg.proposals.ncg.fit_preconditioner` (the scaled empirical covariance
    or precision, whichever fits the log-density differences better), the step size
    adapted afresh for it in the second half. A warmup shorter than 8 steps, or without
    a move in the collection window, keeps ``M = 0`` with a warning. The fit is
    :attr:`preconditioner_fit` and the matrix :attr:`preconditioner_matrix`, also after
    the run.

    Per-draw statistics as in :class:`NCG`: ``accepted``, ``accept_prob``,
    ``num_changed``, ``step_size``, ``energy_evals``, ``grad_evals`` and ``log_joint``.

    :param torch.Tensor preconditioner: ``[R, R]`` symmetric ``M`` (``R`` relaxed
        values: one per binary or ordinal coordinate, ``K`` per categorical one, in site
        order), or ``None`` to estimate it during warmup.
    :param settings: as for :class:`NCG` (the step size starts at 0.2).

    Example::

        >>> PAVG(preconditioner=torch.eye(3)).preconditioner_matrix.shape
        torch.Size([3, 3])
    """

    default_step_size = 0.2
    min_fit_warmup = PreconditionerAdaptation.min_warmup

    def __init__(
        self, model=None, *, preconditioner: Optional[torch.Tensor] = None, **settings
    ) -> None:
        if preconditioner is not None:
            preconditioner = torch.as_tensor(preconditioner, dtype=torch.get_default_dtype())
            if preconditioner.dim() != 2 or preconditioner.shape[0] != preconditioner.shape[1]:
                raise ValueError(
                    "preconditioner must be a square [R, R] matrix, got shape {}".format(
                        tuple(preconditioner.shape)
                    )
                )
            if not torch.allclose(preconditioner, preconditioner.T, rtol=1e-5, atol=1e-6):
                raise ValueError("preconditioner must be symmetric")
        self.preconditioner = preconditioner
        self._fitting: Optional[PreconditionerAdaptation] = None
        super().__init__(model, **settings)
        if self.step_size_schedule is not None and preconditioner is None:
            raise ValueError(
                "PAVG(step_size_schedule={!r}) needs a given preconditioner: the warmup "
                "that estimates one also adapts the step size, and does not tune a "
                "schedule. Give preconditioner=M, or use AVG or NCG with the "
                "schedule.".format(self.step_size_schedule)
            )

    def build(self, density) -> Algorithm:
        """PAVG on ``density`` (see :func:`~pyro_gwg.proposals.ncg.build_pavg`) with the
        given preconditioner, or ``M = 0`` until warmup fits one.

        :rtype: Algorithm
        """
        return self._scheduled(
            build_pavg(density, self.step_size, self.window, self.preconditioner)
        )

    def adaptation(self, density, num_warmup: int):
        step_size = self._step_size_adaptation(num_warmup)
        if self.preconditioner is not None:
            return step_size
        grid = CandidateGrid(density.layout, self.window)
        self._fitting = PreconditionerAdaptation(grid, num_warmup, step_size)
        return self._fitting

    @property
    def preconditioner_fit(self) -> Optional[PreconditionerFit]:
        """The :class:`~pyro_gwg.proposals.ncg.PreconditionerFit` of the last warmup
        (``None`` without one), also after the run."""
        return self._fitting.fit if self._fitting is not None else None

    @property
    def preconditioner_matrix(self) -> Optional[torch.Tensor]:
        """The ``[R, R]`` preconditioner in force (``None`` before :meth:`setup`): the
        given one, the fitted one, or zeros."""
        if self.preconditioner is not None:
            return self.preconditioner
        if self.preconditioner_fit is not None:
            return self.preconditioner_fit.matrix
        if self.energy is None:
            return None
        size = CandidateGrid(self.energy.layout, self.window).relaxed_dim
        return torch.zeros(size, size)
