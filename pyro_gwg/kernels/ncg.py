r"""The NCG, AVG and PAVG kernels (Rhodes & Gutmann 2022) [Rhodes2022]_: every coordinate per step.

All three propose a new value for every latent discrete coordinate at once from a
gradient-informed factorised distribution, with a Metropolis-Hastings correction (see
:mod:`pyro_gwg.proposals.ncg` for the formulas). They share the step-size adaptation of
:class:`FactorisedKernel`: with ``step_size=None`` the step size :math:`\epsilon` is
adapted during warmup by Pyro's dual averaging
(:class:`pyro.ops.dual_averaging.DualAveraging`, the scheme of Pyro's HMC and NUTS)
toward ``target_accept_prob``, separately for every chain, and frozen afterwards at
the running average of the warmup iterates.
"""

from __future__ import annotations

import math
import warnings
from typing import List, NamedTuple, Optional, Tuple, Union

import torch
from pyro.infer.autoguide.initialization import init_to_sample
from pyro.ops.dual_averaging import DualAveraging

from pyro_gwg._validation import check_integer, check_number
from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.proposals.ncg import (
    CandidateGrid,
    FactorisedInfo,
    GradientState,
    PAVGState,
    PreconditionerFit,
    avg_init,
    avg_step,
    fit_preconditioner,
    ncg_init,
    ncg_step,
    pavg_init,
    pavg_step,
    preconditioner,
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
    :param float step_size: fixed step size :math:`\epsilon`, or ``None`` to adapt it
        during warmup starting from ``initial_step_size``.
    :param float target_accept_prob: acceptance probability the adaptation aims at.
    :param int window: half-width of the candidate window of unbounded ordinal
        coordinates (``Poisson``, ``Geometric``, ...): they move to values within
        ``window`` of the current one. Coordinates with a finite support range over
        all of it.
    :param float initial_step_size: starting point of the adaptation.
    :param jit_compile: compilation of the whole transition: ``"auto"`` (default),
        ``True``, ``"inductor"`` or ``False``; see :class:`~pyro_gwg.DiscreteKernel`.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param callable init_strategy: Pyro per-site initialisation strategy.
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
        target_accept_prob: float = 0.574,
        window: int = 10,
        initial_step_size: Optional[float] = None,
        jit_compile: Union[bool, str] = "auto",
        max_plate_nesting: Optional[int] = None,
        init_strategy=init_to_sample,
    ) -> None:
        for name, value in (("step_size", step_size), ("initial_step_size", initial_step_size)):
            if value is not None:
                check_number(name, value, 0, math.inf, low_open=True, high_open=True)
        self.step_size = None if step_size is None else float(step_size)
        self.adapt_step_size = step_size is None
        self.target_accept_prob = check_number(
            "target_accept_prob", target_accept_prob, 0, 1, low_open=True, high_open=True
        )
        self.window = check_integer("window", window, 1)
        self.initial_step_size = float(
            step_size or initial_step_size or type(self).default_step_size
        )
        super().__init__(
            model,
            jit_compile=jit_compile,
            max_plate_nesting=max_plate_nesting,
            init_strategy=init_strategy,
        )

    # --------------------------------------------------------------- adaptation state
    def _reset(self) -> None:
        super()._reset()
        self._grid: Optional[CandidateGrid] = None
        self._step_size_now: Optional[torch.Tensor] = None
        self._dual: Optional[DualAveraging] = None
        self._warmup_done = 0  # warmup steps adapted so far

    def _grid_for(self) -> CandidateGrid:
        if self._grid is None:
            self._grid = CandidateGrid(self.energy.layout, self.window)
        return self._grid

    def _initial_step_sizes(self, codes: torch.Tensor) -> torch.Tensor:
        if self._step_size_now is None or self._step_size_now.shape[0] != codes.shape[0]:
            self._step_size_now = torch.full(
                (codes.shape[0],), self.initial_step_size, device=codes.device
            )
        return self._step_size_now

    def _restart_adaptation(self) -> None:
        """Start (or restart) dual averaging from the step sizes in force."""
        self._dual = DualAveraging(prox_center=(10 * self._step_size_now).log())

    def _adapt(self, info: NamedTuple) -> None:
        self._warmup_done += 1
        if not self.adapt_step_size:
            return
        if self._dual is None:
            self._restart_adaptation()
        self._dual.step(self.target_accept_prob - info.accept_prob)
        log_step, log_step_avg = self._dual.get_state()
        final = self._warmup_done >= self._warmup_steps
        log_step = log_step_avg if final else log_step
        self._set_step_size(log_step.clamp(-self.max_log_step_size, self.max_log_step_size).exp())

    def _set_step_size(self, step_size: torch.Tensor) -> None:
        self._step_size_now = step_size.to(self._state.step_size.dtype)
        self._state = self._state._replace(step_size=self._step_size_now)

    @property
    def step_sizes(self) -> Optional[torch.Tensor]:
        """``[C]`` step sizes in force (``None`` before :meth:`setup`)."""
        return self._step_size_now


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
    :param float step_size: :math:`\epsilon`; ``None`` (default) adapts it during
        warmup toward ``target_accept_prob`` and freezes it afterwards.
    :param float target_accept_prob: target of the adaptation (default 0.574).
    :param int window: half-width of the candidate window of unbounded ordinals.
    :param float initial_step_size: start of the adaptation (default 0.5, the
        reference value for binary targets).
    :param jit_compile: compilation of the whole transition: ``"auto"`` (default),
        ``True``, ``"inductor"`` or ``False``; see :class:`~pyro_gwg.DiscreteKernel`.
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

    def _init_state(self, codes: torch.Tensor, value_and_grad) -> GradientState:
        self._grid_for()
        return ncg_init(codes, value_and_grad, self._initial_step_sizes(codes))

    def _step(self, state: NamedTuple, value_and_grad) -> Tuple[GradientState, FactorisedInfo]:
        return ncg_step(state, value_and_grad, self._grid)


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

    def _init_state(self, codes: torch.Tensor, value_and_grad) -> GradientState:
        self._grid_for()
        return avg_init(codes, value_and_grad, self._initial_step_sizes(codes))

    def _step(self, state: NamedTuple, value_and_grad) -> Tuple[GradientState, FactorisedInfo]:
        return avg_step(state, value_and_grad, self._grid)


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
    :param float initial_step_size: start of the adaptation (default 0.2).

    Other arguments and statistics as in :class:`NCG`.
    """

    default_step_size = 0.2
    min_fit_warmup = 8

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
        super().__init__(model, **kwargs)

    def _reset(self) -> None:
        super()._reset()
        self._matrix: Optional[torch.Tensor] = self.preconditioner
        self._collected: List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        #: the :class:`~pyro_gwg.proposals.ncg.PreconditionerFit` of the last warmup
        self.preconditioner_fit: Optional[PreconditionerFit] = None

    def cleanup(self) -> None:
        # keep the last fit readable after pyro.infer.MCMC finishes (it calls cleanup)
        fit, matrix = self.preconditioner_fit, self._matrix
        super().cleanup()
        self.preconditioner_fit, self._matrix = fit, matrix

    @property
    def preconditioner_matrix(self) -> Optional[torch.Tensor]:
        """The ``[R, R]`` preconditioner in force (``None`` before :meth:`setup`)."""
        return self._matrix

    def _init_state(self, codes: torch.Tensor, value_and_grad) -> PAVGState:
        grid = self._grid_for()
        size = grid.relaxed_dim
        if self._matrix is None:
            self._matrix = torch.zeros(size, size, device=codes.device)
        elif self._matrix.shape != (size, size):
            raise ValueError(
                "preconditioner has shape {} but the model has {} relaxed values (one "
                "per binary or ordinal coordinate, K per categorical coordinate), so it "
                "must be [{}, {}]".format(tuple(self._matrix.shape), size, size, size)
            )
        precond = preconditioner(self._matrix.to(codes.device), codes.shape[0])
        return pavg_init(codes, value_and_grad, self._initial_step_sizes(codes), precond)

    def _step(self, state: NamedTuple, value_and_grad) -> Tuple[PAVGState, FactorisedInfo]:
        return pavg_step(state, value_and_grad, self._grid)

    def _adapt(self, info: NamedTuple) -> None:
        super()._adapt(info)
        if self.preconditioner is not None:
            return
        step, start, fit_at = self._warmup_done, self._warmup_steps // 4, self._warmup_steps // 2
        if self._warmup_steps < self.min_fit_warmup:
            if step == self._warmup_steps:
                warnings.warn(
                    "PAVG needs at least {} warmup steps to estimate its preconditioner; "
                    "running with M = 0 (AVG).".format(self.min_fit_warmup),
                    UserWarning,
                    stacklevel=2,
                )
            return
        if start < step <= fit_at:
            state, grid = self._state, self._grid
            self._collected.append(
                (grid.embed(state.codes), grid.flat_grad(state.grad), state.log_joint)
            )
        if step == fit_at:
            self._fit()

    def _fit(self) -> None:
        states, grads, log_joints = (torch.stack(x) for x in zip(*self._collected))
        self._collected = []
        fit = fit_preconditioner(states, grads, log_joints, mask=self._grid.block_mask())
        if fit is None:
            warnings.warn(
                "PAVG saw no moves while collecting warmup states; running with M = 0 (AVG).",
                UserWarning,
                stacklevel=2,
            )
            return
        self.preconditioner_fit = fit
        self._matrix = fit.matrix
        precond = preconditioner(fit.matrix, self._state.codes.shape[0])
        self._state = self._state._replace(eigvals=precond.eigvals, eigvecs=precond.eigvecs)
        if self.adapt_step_size:
            self._restart_adaptation()
