r"""The NCG, AVG and PAVG kernels (Rhodes & Gutmann 2022) [Rhodes2022]_: every coordinate per step.

All three propose a new value for every latent discrete coordinate at once from a
gradient-informed factorised distribution, with a Metropolis-Hastings correction (see
:mod:`pyro_gwg.proposals.ncg` for the formulas). They share the step-size adaptation of
:class:`FactorisedKernel` (:class:`~pyro_gwg.adaptation.StepSizeAdaptation`): with
``adapt_step_size=True`` (the default) the step size :math:`\epsilon` is adapted during
warmup, starting from ``step_size``, by Pyro's dual averaging
(:class:`pyro.ops.dual_averaging.DualAveraging`, the scheme of Pyro's HMC and NUTS)
toward ``target_accept_prob``, separately for every chain, and frozen afterwards at
the running average of the warmup iterates.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import torch
from pyro.infer.autoguide.initialization import init_to_sample

from pyro_gwg._validation import check_bool, check_integer, check_number
from pyro_gwg.adaptation import PreconditionerAdaptation, StepSizeAdaptation
from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.ncg import (
    CandidateGrid,
    PreconditionerFit,
    build_avg,
    build_ncg,
    build_pavg,
)

__all__ = ["AVG", "FactorisedKernel", "NCG", "PAVG"]


class FactorisedKernel(DiscreteKernel):
    r"""Shared plumbing of :class:`NCG`, :class:`AVG` and :class:`PAVG`: the candidate
    grid and the step-size adaptation.

    The step size lives in the kernel state (``state.step_size``, one per chain), so a
    compiled (``jit_compile=True``) transition reads the adapted value. During warmup
    each chain runs its own :class:`~pyro.ops.dual_averaging.DualAveraging` on
    :math:`\log \epsilon` with statistic ``target_accept_prob - accept_prob`` and
    prox-centre :math:`\log(10 \epsilon_0)` (as in Pyro's HMC); the last warmup step
    freezes :math:`\epsilon` at the exponential of the averaged iterate.

    :param callable model: a Pyro model whose latent sites are discrete.
    :param float step_size: step size :math:`\epsilon`: where the adaptation starts, or
        the fixed value with ``adapt_step_size=False`` (default: the class's
        ``default_step_size``).
    :param bool adapt_step_size: adapt the step size during warmup (default ``True``,
        as in Pyro's HMC).
    :param float target_accept_prob: acceptance probability the adaptation aims at.
    :param int window: half-width of the candidate window of unbounded ordinal
        coordinates (``Poisson``, ``Geometric``, ...): they move to values within
        ``window`` of the current one. Coordinates with a finite support range over
        all of it.
    :param jit_compile: compilation of the whole transition: ``"auto"`` (default),
        ``True``, ``"inductor"``, ``"make_fx"`` or ``False``; see
        :class:`~pyro_gwg.DiscreteKernel`.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param callable init_strategy: Pyro per-site initialisation strategy.
    """

    default_step_size = 1.0
    #: bound on :math:`|\log \epsilon|` during adaptation (a target on which every
    #: proposal is accepted would otherwise push the step size to infinity)
    max_log_step_size = 20.0
    _build = staticmethod(build_ncg)

    def __init__(
        self,
        model=None,
        *,
        step_size: Optional[float] = None,
        adapt_step_size: bool = True,
        target_accept_prob: float = 0.574,
        window: int = 10,
        jit_compile: Union[bool, str] = "auto",
        max_plate_nesting: Optional[int] = None,
        init_strategy=init_to_sample,
    ) -> None:
        if step_size is not None:
            check_number("step_size", step_size, 0, math.inf, low_open=True, high_open=True)
        self.step_size = float(step_size or type(self).default_step_size)
        self.adapt_step_size = check_bool("adapt_step_size", adapt_step_size)
        self.target_accept_prob = check_number(
            "target_accept_prob", target_accept_prob, 0, 1, low_open=True, high_open=True
        )
        self.window = check_integer("window", window, 1)
        super().__init__(
            model,
            jit_compile=jit_compile,
            max_plate_nesting=max_plate_nesting,
            init_strategy=init_strategy,
        )

    def build(self, density) -> Algorithm:
        """The kernel's algorithm on ``density`` with its step size and window (see
        :func:`~pyro_gwg.proposals.ncg.build_ncg`).

        :rtype: Algorithm
        """
        return type(self)._build(density, self.step_size, self.window)

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


class NCG(FactorisedKernel):
    r"""Norm-constrained gradient sampler (Rhodes & Gutmann 2022 [Rhodes2022]_, Eq. 8,
    Algorithm B.1)
    for the latent discrete sites of any Pyro model, as a
    :class:`~pyro.infer.mcmc.mcmc_kernel.MCMCKernel`.

    Every coordinate is proposed at once from the factorised distribution

    .. math:: q_i(v \mid x) \propto \exp\Big(\tfrac12 g_i (v - x_i)
              - \tfrac{1}{2\epsilon} (v - x_i)^2\Big)

    over all values ``v`` of coordinate ``i`` (bits: {0, 1}; ordinals: their finite
    support, or the window :math:`x_i \pm` ``window`` when unbounded; categoricals:
    logits :math:`g_{iv}/2 - [v \ne x_i]/\epsilon` over all ``K`` categories), with
    :math:`g = \nabla f(x)` the gradient of the log joint with respect to the relaxed
    values, and accepted with probability
    :math:`\min\big(1, e^{f(x') - f(x)} q(x \mid x') / q(x' \mid x)\big)`. Larger
    :math:`\epsilon` changes more coordinates per step. One forward and one backward
    pass of the model per step.

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed`` (coordinates
    the proposal changed), ``step_size`` (in force at the step), ``energy_evals``,
    ``grad_evals`` and ``log_joint``.

    :param callable model: a Pyro model whose latent sites are discrete.
    :param float step_size: :math:`\epsilon`: where the adaptation starts (default
        0.5, the reference value for binary targets), or its fixed value with
        ``adapt_step_size=False``.
    :param bool adapt_step_size: adapt :math:`\epsilon` during warmup toward
        ``target_accept_prob`` and freeze it afterwards (default ``True``).
    :param float target_accept_prob: target of the adaptation (default 0.574).
    :param int window: half-width of the candidate window of unbounded ordinals.
    :param jit_compile: compilation of the whole transition: ``"auto"`` (default),
        ``True``, ``"inductor"``, ``"make_fx"`` or ``False``; see
        :class:`~pyro_gwg.DiscreteKernel`.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param callable init_strategy: Pyro per-site initialisation strategy (default
        :func:`~pyro.infer.autoguide.initialization.init_to_sample`).

    Example::

        >>> import pyro, torch
        >>> import pyro.distributions as dist
        >>> from pyro.infer import MCMC
        >>> def model(y):
        ...     with pyro.plate("sites", 3):
        ...         x = pyro.sample("x", dist.Bernoulli(0.5))
        ...     pyro.sample("y", dist.Normal(x.sum(-1, keepdim=True), 1.0), obs=y)
        >>> pyro.set_rng_seed(0)
        >>> mcmc = MCMC(NCG(model), num_samples=200, warmup_steps=50, disable_progbar=True)
        >>> mcmc.run(torch.tensor(2.0))
        >>> mcmc.get_samples()["x"].shape
        torch.Size([200, 3])
    """

    default_step_size = 0.5


class AVG(FactorisedKernel):
    r"""Auxiliary-variable gradient sampler (Rhodes & Gutmann 2022 [Rhodes2022]_, Eqs. 9-11,
    Algorithm B.2), as a :class:`~pyro.infer.mcmc.mcmc_kernel.MCMCKernel`.

    Each step draws a Gaussian auxiliary :math:`z \sim \mathcal N(\sqrt{2/\epsilon}\,
    \phi(x), I)` (:math:`\phi` the relaxed values: numbers for scalar coordinates,
    one-hot vectors for categoricals), proposes every coordinate from

    .. math:: q_i(v \mid z, x) \propto \exp\Big(\big(g_i + \sqrt{2/\epsilon}\, z_i\big)^T
              \phi_i(v) - \lVert \phi_i(v) \rVert^2 / \epsilon\Big)

    and accepts with the Metropolis-Hastings ratio in the space extended by ``z``:
    :math:`\frac{e^{f(x')} \mathcal N(z; \sqrt{2/\epsilon}\phi(x'), I)\, q(x \mid z, x')}
    {e^{f(x)} \mathcal N(z; \sqrt{2/\epsilon}\phi(x), I)\, q(x' \mid z, x)}`.
    Candidate values, arguments and statistics as in :class:`NCG`; the default start
    of the step-size adaptation is 0.2 (the reference value for binary targets).

    Per-draw statistics as in :class:`NCG`: ``accepted``, ``accept_prob``,
    ``num_changed``, ``step_size``, ``energy_evals``, ``grad_evals`` and ``log_joint``.
    """

    default_step_size = 0.2
    _build = staticmethod(build_avg)


class PAVG(FactorisedKernel):
    r"""Preconditioned auxiliary-variable gradient sampler (Rhodes & Gutmann 2022 [Rhodes2022]_,
    Section 3.2), as a :class:`~pyro.infer.mcmc.mcmc_kernel.MCMCKernel`.

    With a symmetric preconditioner ``M`` on the relaxed values :math:`\phi(x)`,
    :math:`d = 2/\epsilon - \min(\lambda_{\min}(M), 0)` and :math:`A = (M + dI)^{1/2}`,
    each step draws :math:`z \sim \mathcal N(A\phi(x), I)`, proposes every coordinate
    from

    .. math:: q_i(v \mid z, x) \propto \exp\Big(\big(g - M\phi(x) + Az\big)_i^T \phi_i(v)
              - \tfrac d2 \lVert \phi_i(v) \rVert^2\Big)

    and accepts with the extended-space ratio of :class:`AVG` (with ``A`` in place of
    :math:`\sqrt{2/\epsilon} I`). ``M = 0`` is AVG. If the log joint is quadratic in
    :math:`\phi` with Hessian ``M`` (for example an Ising model written with bits
    :math:`x \in \{0,1\}`, :math:`s = 2x - 1`, :math:`f = \tfrac12 s^T J s + b^T s`:
    ``M = 4 J``), the proposal is the exact conditional and PAVG is the block-Gibbs
    sampler of Martens & Sutskever (2010) [MartensSutskever2010]_: every proposal is accepted.

    ``M`` is either given (``preconditioner``, an ``[R, R]`` tensor, ``R`` the number of
    relaxed values: one per binary or ordinal coordinate, ``K`` per categorical one, in
    site order) or estimated during warmup (``preconditioner=None``), as follows:

    1. warmup steps ``1 .. W/4``: ``M = 0`` (AVG) while the step size adapts;
    2. steps ``W/4 + 1 .. W/2``: the states, gradients and log joints of every chain
       are collected;
    3. at step ``W/2``, :func:`~pyro_gwg.proposals.ncg.fit_preconditioner` scales the
       empirical covariance and the empirical precision of the collected states to the
       log-density differences of successive states (least squares on the
       second-order remainder of the first-order expansion) and keeps the better fit;
       products of two categories of one categorical coordinate are zeroed. The
       dual-averaging adaptation of the step size restarts for the new ``M``;
    4. the rest of warmup adapts the step size under the fitted ``M``.

    Warmup shorter than 8 steps (or without any move in the collection window) keeps
    ``M = 0`` with a warning. The fit is available as :attr:`preconditioner_fit` and the
    matrix as :attr:`preconditioner_matrix`, also after the run. The
    reference implementation also tunes a multiplier of ``M`` by the jump distance;
    here the least-squares scale is used as is and the step size carries the tuning.

    Per-draw statistics as in :class:`NCG`: ``accepted``, ``accept_prob``,
    ``num_changed``, ``step_size``, ``energy_evals``, ``grad_evals`` and ``log_joint``.

    :param torch.Tensor preconditioner: ``[R, R]`` symmetric ``M``, or ``None`` to
        estimate it during warmup.
    :param float step_size: start of the adaptation (default 0.2), or its fixed value
        with ``adapt_step_size=False``.

    Other arguments and statistics as in :class:`NCG`.
    """

    default_step_size = 0.2
    min_fit_warmup = PreconditionerAdaptation.min_warmup

    def __init__(self, model=None, *, preconditioner: Optional[torch.Tensor] = None, **kwargs):
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
        super().__init__(model, **kwargs)

    def build(self, density) -> Algorithm:
        """PAVG on ``density`` (see :func:`~pyro_gwg.proposals.ncg.build_pavg`) with the
        given preconditioner, or ``M = 0`` until warmup fits one.

        :rtype: Algorithm
        """
        return build_pavg(density, self.step_size, self.window, self.preconditioner)

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
