r"""Norm-constrained gradient (NCG) and auxiliary-variable gradient (AVG, PAVG) proposals
(Rhodes & Gutmann 2022 [Rhodes2022]_, *Enhanced gradient-based MCMC in discrete spaces*).

Pure tensor functions, batched over a leading chain dimension ``C``, on the flat
coordinate layout of :mod:`pyro_gwg.proposals.layout`. All three samplers propose a
new value for *every* coordinate at once, from a distribution that factorises over
coordinates.

**Relaxed values.** Coordinate ``i`` taking value ``v`` is seen by the model as the
relaxed vector :math:`\phi_i(v)`: the number ``v`` for scalar (binary and ordinal)
coordinates, the one-hot vector :math:`e_v` for categorical ones. Stacking them gives
:math:`\phi(x) \in \mathbb R^R`, ``R`` the *relaxed dimension* (one per scalar
coordinate, ``K`` per categorical one), and :math:`g = \nabla f(\phi(x))` is the gradient
of the log joint ``f`` in these coordinates (the packed gradient of the model bridge).

**One family of proposals.** Each sampler proposes, independently for every
coordinate, from

.. math:: q_i(v) \propto \exp\Big(\langle a_i, u_i(v) \rangle
          - \tfrac{\kappa}{2} \lVert u_i(v) \rVert^2\Big),
          \qquad u_i(v) = \phi_i(v) - \phi_i(x_i),

over the candidate values ``v`` of coordinate ``i`` (centring at the current value is
exact algebra and keeps large ordinal values out of floating-point cancellation):

* **NCG** (Eq. 8, Algorithm B.1): :math:`a = g / 2`, :math:`\kappa = 1 / \epsilon`, that is
  :math:`q_i(v \mid x) \propto \exp\big(\tfrac12 g_i (v - x_i) - \tfrac{1}{2\epsilon}
  (v - x_i)^2\big)`, and for categoricals :math:`g_{iv} / 2 - [v \ne x_i] / \epsilon`.
  Standard MH with the reverse proposal built at :math:`x'`. This is also DMALA, the
  discrete Metropolis-adjusted Langevin algorithm of Zhang, Liu & Liu (2022)
  [Zhang2022]_, whose proposal
  :math:`q(x' \mid x) \propto \exp\big(\tfrac12 \nabla f(x)^T (x' - x) - \lVert x' - x
  \rVert^2 / (2\alpha)\big)` is NCG's with :math:`\epsilon = \alpha`.
* **DULA** (Zhang, Liu & Liu 2022 [Zhang2022]_, the discrete unadjusted Langevin
  algorithm): the NCG proposal without the MH test, :math:`x' \sim q(\cdot \mid x)`
  always kept (:func:`dula_step`). It is *biased*: its stationary law
  :math:`\pi_\alpha` is not the target (for a log-quadratic target the bias vanishes
  as :math:`\alpha \to 0`; see :class:`~pyro_gwg.kernels.langevin.DULA`).
* **AVG** (Eqs. 9-11, Algorithm B.2): augment the target with
  :math:`z \sim \mathcal N(\sqrt{2/\epsilon}\, \phi(x), I)`; the first-order proposal
  :math:`q(x' \mid z, x) \propto \exp\big(\langle g, \phi(x') \rangle
  + \sqrt{2/\epsilon}\, \langle z, \phi(x') \rangle - \lVert \phi(x') \rVert^2 / \epsilon\big)`
  is the family above with :math:`a = g + \sqrt{2/\epsilon}\, \xi`,
  :math:`\kappa = 2 / \epsilon`, :math:`\xi = z - \sqrt{2/\epsilon}\, \phi(x)`.
* **PAVG** (Section 3.2): preconditioner ``M`` (symmetric ``R x R``),
  :math:`d = 2/\epsilon - \min(\lambda_{\min}(M), 0)`,
  :math:`A = (M + d I)^{1/2}`, :math:`z \sim \mathcal N(A \phi(x), I)`, proposal
  :math:`\propto \exp\big(\langle g - M\phi(x) + A z, \phi(x') \rangle
  - \tfrac d2 \lVert \phi(x') \rVert^2\big)`, which is the family with
  :math:`a = g + A\xi`, :math:`\kappa = d`, :math:`\xi = z - A\phi(x)` (because
  :math:`A^2 = M + dI`). ``M = 0`` gives AVG. When ``f`` is quadratic with Hessian
  ``M`` the proposal is the exact conditional :math:`\pi(x' \mid z)` and every
  proposal is accepted: the block-Gibbs sampler of Martens & Sutskever (2010)
  [MartensSutskever2010]_.

AVG and PAVG are MH steps on ``x`` for the fixed auxiliary ``z`` in the extended
target :math:`\pi(x, z) = e^{f(x)} \mathcal N(z; A\phi(x), I)` (``z`` itself is a
Gibbs draw), with ratio

.. math:: \frac{e^{f(x')}\, \mathcal N(z; A\phi(x'), I)\, q(x \mid z, x')}
               {e^{f(x)}\, \mathcal N(z; A\phi(x), I)\, q(x' \mid z, x)}.

In terms of :math:`\xi` the reverse move sees :math:`\xi' = z - A\phi(x') = \xi -
A(\phi(x') - \phi(x))` and the Gaussian factor is
:math:`e^{(\lVert\xi\rVert^2 - \lVert\xi'\rVert^2)/2}`.

**Candidate values.** A scalar coordinate with finite support ``[lower, upper]``
ranges over its whole support; a coordinate with an infinite bound (``Poisson``,
``Geometric``, ...) over the window :math:`x_i - w, \dots, x_i + w` clipped to its
support, ``w`` the ``window`` argument. The window is symmetric, so whenever
:math:`x'_i` lies in the window around :math:`x_i`, :math:`x_i` lies in the window
around :math:`x'_i` and the reverse move exists; :func:`factorised_log_prob` gives
``-inf`` (a rejection) to any value outside the candidates regardless. A categorical
coordinate ranges over all its ``K`` categories, including the current one.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Tuple

import torch

from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.layout import CandidateGrid
from pyro_gwg.proposals.mh import accept_probability, metropolis_hastings, select

__all__ = [
    "FactorisedInfo",
    "GradientState",
    "PAVGState",
    "Preconditioner",
    "PreconditionerFit",
    "auxiliary_log_ratio",
    "auxiliary_root",
    "auxiliary_step",
    "avg_init",
    "avg_proposal",
    "avg_step",
    "build_dula",
    "dula_step",
    "factorised_log_prob",
    "fit_preconditioner",
    "ncg_init",
    "ncg_log_ratio",
    "ncg_proposal",
    "ncg_step",
    "pavg_init",
    "pavg_step",
    "preconditioner",
    "sample_factorised",
]

ValueAndGrad = Callable[[torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]


def sample_factorised(log_probs: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """Draw every coordinate from a factorised proposal table (Gumbel-max).

    :param torch.Tensor log_probs: ``[C, D, V]`` log-probabilities.
    :param torch.Tensor base: long ``[C, D]`` value of slot 0.
    :returns: long ``[C, D]`` proposed codes.
    """
    gumbel = torch.empty_like(log_probs).exponential_().log()
    return base + (log_probs - gumbel).argmax(-1)


def factorised_log_prob(
    log_probs: torch.Tensor, base: torch.Tensor, codes: torch.Tensor
) -> torch.Tensor:
    r"""Log-probability :math:`\sum_i \log q_i(x_i)` of a full state under a factorised
    table; ``-inf`` if a coordinate lies outside its candidates (for example outside
    the window around the table's centre).

    :param torch.Tensor log_probs: ``[C, D, V]`` log-probabilities.
    :param torch.Tensor base: long ``[C, D]`` value of slot 0.
    :param torch.Tensor codes: long ``[C, D]`` the state.
    :rtype: torch.Tensor
    """
    slot = codes - base
    inside = (slot >= 0) & (slot < log_probs.shape[-1])
    picked = log_probs.gather(-1, slot.clamp(0, log_probs.shape[-1] - 1).unsqueeze(-1))
    return picked.squeeze(-1).masked_fill(~inside, -float("inf")).sum(-1)


class GradientState(NamedTuple):
    """State of a batch of NCG or AVG chains.

    :ivar torch.Tensor codes: long ``[C, D]`` coordinates.
    :ivar torch.Tensor log_joint: ``[C]`` log joint density at ``codes``.
    :ivar torch.Tensor grad: ``[C, D, W]`` packed gradient at ``codes``.
    :ivar torch.Tensor step_size: ``[C]`` step size :math:`\\epsilon` in force.
    """

    codes: torch.Tensor
    log_joint: torch.Tensor
    grad: torch.Tensor
    step_size: torch.Tensor


class PAVGState(NamedTuple):
    """State of a batch of PAVG chains: a :class:`GradientState` plus the
    preconditioner :math:`M = Q \\operatorname{diag}(\\lambda) Q^T`.

    :ivar torch.Tensor codes: long ``[C, D]`` coordinates.
    :ivar torch.Tensor log_joint: ``[C]`` log joint density at ``codes``.
    :ivar torch.Tensor grad: ``[C, D, W]`` packed gradient at ``codes``.
    :ivar torch.Tensor step_size: ``[C]`` step size :math:`\\epsilon` in force.
    :ivar torch.Tensor eigvals: ``[C, R]`` eigenvalues :math:`\\lambda` of ``M``.
    :ivar torch.Tensor eigvecs: ``[C, R, R]`` orthonormal eigenvectors ``Q`` (columns).
    """

    codes: torch.Tensor
    log_joint: torch.Tensor
    grad: torch.Tensor
    step_size: torch.Tensor
    eigvals: torch.Tensor
    eigvecs: torch.Tensor


class Preconditioner(NamedTuple):
    """Eigendecomposition of a symmetric preconditioner ``M``, batched over chains.

    :ivar torch.Tensor eigvals: ``[C, R]``.
    :ivar torch.Tensor eigvecs: ``[C, R, R]`` (columns are eigenvectors).
    """

    eigvals: torch.Tensor
    eigvecs: torch.Tensor


class FactorisedInfo(NamedTuple):
    """Per-chain statistics of one NCG, AVG or PAVG step.

    :ivar torch.Tensor accepted: bool ``[C]``.
    :ivar torch.Tensor accept_prob: ``[C]`` MH acceptance probability.
    :ivar torch.Tensor num_changed: long ``[C]`` coordinates changed by the proposal.
    :ivar torch.Tensor step_size: ``[C]`` step size the step used.
    :ivar torch.Tensor energy_evals: long ``[C]`` log-joint evaluations per chain (1:
        at the proposed state; the current state's value is carried in the state).
    :ivar torch.Tensor grad_evals: long ``[C]`` gradient evaluations per chain (1).
    """

    accepted: torch.Tensor
    accept_prob: torch.Tensor
    num_changed: torch.Tensor
    step_size: torch.Tensor
    energy_evals: torch.Tensor
    grad_evals: torch.Tensor


def _accept(
    state: GradientState,
    proposed: torch.Tensor,
    log_joint_new: torch.Tensor,
    grad_new: torch.Tensor,
    log_ratio: torch.Tensor,
) -> Tuple[GradientState, FactorisedInfo]:
    """The MH decision and the state after it (shared by the three samplers)."""
    accepted = metropolis_hastings(log_ratio)
    return _transition(
        state, proposed, log_joint_new, grad_new, accepted, accept_probability(log_ratio)
    )


def _transition(
    state: GradientState,
    proposed: torch.Tensor,
    log_joint_new: torch.Tensor,
    grad_new: torch.Tensor,
    accepted: torch.Tensor,
    accept_prob: torch.Tensor,
) -> Tuple[GradientState, FactorisedInfo]:
    """The state after a decision ``accepted`` on the proposal, and the step's
    statistics (shared by the MH samplers and DULA)."""
    new_state = GradientState(
        select(accepted, proposed, state.codes),
        select(accepted, log_joint_new, state.log_joint),
        select(accepted, grad_new, state.grad),
        state.step_size,
    )
    one = torch.ones_like(proposed[:, 0])  # one forward and one backward pass
    info = FactorisedInfo(
        accepted,
        accept_prob,
        (proposed != state.codes).sum(-1),
        state.step_size,
        one,
        one,
    )
    return new_state, info


# ---------------------------------------------------------------------------- NCG
def ncg_proposal(
    codes: torch.Tensor, grad: torch.Tensor, step_size: torch.Tensor, grid: CandidateGrid
) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""The NCG proposal at ``codes`` (Rhodes & Gutmann 2022 [Rhodes2022]_, Eq. 8):

    .. math:: q_i(v \mid x) \propto \exp\Big(\tfrac12 g_i (v - x_i)
              - \tfrac{1}{2\epsilon} (v - x_i)^2\Big),

    with :math:`(v - x_i)^2` read as :math:`\lVert e_v - e_{x_i} \rVert^2 = 2[v \ne x_i]`
    for categorical coordinates.

    :param torch.Tensor codes: long ``[C, D]``.
    :param torch.Tensor grad: ``[C, D, W]`` packed gradient at ``codes``.
    :param torch.Tensor step_size: ``[C]`` :math:`\epsilon`.
    :param CandidateGrid grid: candidate values.
    :returns: ``(log_probs [C, D, V], base [C, D])``.
    """
    return grid.logits(0.5 * grid.flat_grad(grad), 1.0 / step_size, codes)


def ncg_init(
    codes: torch.Tensor, value_and_grad: ValueAndGrad, step_size: torch.Tensor
) -> GradientState:
    """Initial NCG (or AVG) state: one evaluation of ``value_and_grad``.

    :param torch.Tensor codes: long ``[C, D]``.
    :param callable value_and_grad: ``codes -> (log_joint [C], grad [C, D, W])``.
    :param torch.Tensor step_size: ``[C]`` initial step size.
    :rtype: GradientState
    """
    log_joint, grad = value_and_grad(codes)
    return GradientState(codes, log_joint, grad, step_size)


def ncg_log_ratio(
    state: GradientState,
    proposed: torch.Tensor,
    log_joint_new: torch.Tensor,
    grad_new: torch.Tensor,
    grid: CandidateGrid,
    forward: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
) -> torch.Tensor:
    r"""Log MH ratio :math:`f(x') - f(x) + \log q(x \mid x') - \log q(x' \mid x)` of NCG.

    :param GradientState state: the current state ``x``.
    :param torch.Tensor proposed: long ``[C, D]`` the proposed state :math:`x'`.
    :param torch.Tensor log_joint_new: ``[C]`` :math:`f(x')`.
    :param torch.Tensor grad_new: ``[C, D, W]`` packed gradient at :math:`x'`.
    :param CandidateGrid grid: candidate values.
    :param tuple forward: the forward proposal ``(log_probs, base)`` at ``x`` if
        already computed.
    :rtype: torch.Tensor
    """
    codes, log_joint, grad, step_size = state[:4]
    if forward is None:
        forward = ncg_proposal(codes, grad, step_size, grid)
    reverse = ncg_proposal(proposed, grad_new, step_size, grid)
    return (
        log_joint_new
        - log_joint
        + factorised_log_prob(*reverse, codes)
        - factorised_log_prob(*forward, proposed)
    )


def ncg_step(
    state: GradientState, value_and_grad: ValueAndGrad, grid: CandidateGrid
) -> Tuple[GradientState, FactorisedInfo]:
    r"""One NCG transition of every chain (Algorithm B.1): draw
    :math:`x' \sim q(\cdot \mid x)` and accept with probability
    :math:`\min\big(1, e^{f(x') - f(x)} q(x \mid x') / q(x' \mid x)\big)`.

    Costs one evaluation of ``value_and_grad``, at the proposed state.

    :param GradientState state: current state.
    :param callable value_and_grad: ``codes -> (log_joint [C], grad [C, D, W])``.
    :param CandidateGrid grid: candidate values.
    :returns: ``(new_state, info)``.
    """
    forward = ncg_proposal(state.codes, state.grad, state.step_size, grid)
    proposed = sample_factorised(*forward)
    log_joint_new, grad_new = value_and_grad(proposed)
    log_ratio = ncg_log_ratio(state, proposed, log_joint_new, grad_new, grid, forward)
    return _accept(state, proposed, log_joint_new, grad_new, log_ratio)


def dula_step(
    state: GradientState, value_and_grad: ValueAndGrad, grid: CandidateGrid
) -> Tuple[GradientState, FactorisedInfo]:
    r"""One DULA transition of every chain (Zhang, Liu & Liu 2022 [Zhang2022]_,
    Algorithm 1 without its MH test): draw :math:`x' \sim q(\cdot \mid x)` from the
    NCG proposal (:func:`ncg_proposal`, :math:`\epsilon = \alpha`) and keep it.

    Biased: the transition matrix is :math:`T(x, x') = q(x' \mid x)`, whose stationary
    law is not the target. Every proposal counts as accepted (``accepted`` True,
    ``accept_prob`` 1). Costs one evaluation of ``value_and_grad``, at the proposed
    state (its gradient builds the next proposal).

    :param GradientState state: current state.
    :param callable value_and_grad: ``codes -> (log_joint [C], grad [C, D, W])``.
    :param CandidateGrid grid: candidate values.
    :returns: ``(new_state, info)``.
    """
    proposed = sample_factorised(*ncg_proposal(state.codes, state.grad, state.step_size, grid))
    log_joint_new, grad_new = value_and_grad(proposed)
    always = torch.ones_like(log_joint_new, dtype=torch.bool)
    return _transition(
        state, proposed, log_joint_new, grad_new, always, torch.ones_like(log_joint_new)
    )


# ---------------------------------------------------------------------------- AVG / PAVG
def auxiliary_root(
    vector: torch.Tensor, step_size: torch.Tensor, precond: Optional[Preconditioner] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    r""":math:`A v` with :math:`A = (M + d I)^{1/2}`, and the shift ``d``.

    :math:`d = 2/\epsilon - \min(\lambda_{\min}(M), 0)`; without a preconditioner
    (``M = 0``, AVG) :math:`A = \sqrt{2/\epsilon}\, I` and :math:`d = 2/\epsilon`.

    :param torch.Tensor vector: ``[C, R]``.
    :param torch.Tensor step_size: ``[C]`` :math:`\epsilon`.
    :param Preconditioner precond: eigendecomposition of ``M``, or ``None``.
    :returns: ``(A v [C, R], d [C])``.
    """
    shift = 2.0 / step_size
    if precond is None:
        return shift.sqrt().unsqueeze(-1) * vector, shift
    eigvals, eigvecs = precond
    shift = shift - eigvals.min(-1).values.clamp(max=0.0)
    root = (eigvals + shift.unsqueeze(-1)).sqrt()
    rotated = torch.matmul(vector.unsqueeze(-2), eigvecs)  # (Q^T v)^T, batched matmul
    back = torch.matmul(root.unsqueeze(-2) * rotated, eigvecs.transpose(-1, -2))
    return back.squeeze(-2), shift


def avg_proposal(
    codes: torch.Tensor,
    grad: torch.Tensor,
    root_noise: torch.Tensor,
    curvature: torch.Tensor,
    grid: CandidateGrid,
) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""The (P)AVG proposal :math:`q(\cdot \mid z, x)` at ``codes`` (Eq. 11):

    .. math:: q_i(v \mid z, x) \propto \exp\Big(\langle g_i + (A\xi)_i, u_i(v) \rangle
              - \tfrac d2 \lVert u_i(v) \rVert^2\Big), \qquad \xi = z - A\phi(x).

    :param torch.Tensor codes: long ``[C, D]`` the state ``x``.
    :param torch.Tensor grad: ``[C, D, W]`` packed gradient at ``codes``.
    :param torch.Tensor root_noise: ``[C, R]`` :math:`A\xi`.
    :param torch.Tensor curvature: ``[C]`` ``d``.
    :param CandidateGrid grid: candidate values.
    :returns: ``(log_probs [C, D, V], base [C, D])``.
    """
    return grid.logits(grid.flat_grad(grad) + root_noise, curvature, codes)


def auxiliary_log_ratio(
    state: GradientState,
    proposed: torch.Tensor,
    log_joint_new: torch.Tensor,
    grad_new: torch.Tensor,
    noise: torch.Tensor,
    grid: CandidateGrid,
    precond: Optional[Preconditioner] = None,
    forward: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
) -> torch.Tensor:
    r"""Log MH ratio of (P)AVG in the space extended by :math:`z = A\phi(x) + \xi`:

    .. math:: f(x') - f(x) + \tfrac12 \lVert\xi\rVert^2 - \tfrac12 \lVert\xi'\rVert^2
              + \log q(x \mid z, x') - \log q(x' \mid z, x),
              \qquad \xi' = z - A\phi(x') = \xi - A(\phi(x') - \phi(x)).

    :param GradientState state: the current state ``x``.
    :param torch.Tensor proposed: long ``[C, D]`` the proposed state :math:`x'`.
    :param torch.Tensor log_joint_new: ``[C]`` :math:`f(x')`.
    :param torch.Tensor grad_new: ``[C, D, W]`` packed gradient at :math:`x'`.
    :param torch.Tensor noise: ``[C, R]`` :math:`\xi`.
    :param CandidateGrid grid: candidate values.
    :param Preconditioner precond: eigendecomposition of ``M`` (``None``: ``M = 0``).
    :param tuple forward: the forward proposal ``(log_probs, base)`` if already computed.
    :rtype: torch.Tensor
    """
    codes, log_joint, grad, step_size = state[:4]
    if forward is None:
        forward = avg_proposal(codes, grad, *auxiliary_root(noise, step_size, precond), grid)
    moved, _ = auxiliary_root(grid.embed(proposed) - grid.embed(codes), step_size, precond)
    noise_new = noise - moved
    reverse = avg_proposal(proposed, grad_new, *auxiliary_root(noise_new, step_size, precond), grid)
    return (
        log_joint_new
        - log_joint
        + 0.5 * (noise.pow(2).sum(-1) - noise_new.pow(2).sum(-1))
        + factorised_log_prob(*reverse, codes)
        - factorised_log_prob(*forward, proposed)
    )


def auxiliary_step(
    state: GradientState,
    value_and_grad: ValueAndGrad,
    grid: CandidateGrid,
    precond: Optional[Preconditioner] = None,
) -> Tuple[GradientState, FactorisedInfo]:
    r"""One AVG (``precond=None``) or PAVG transition of every chain (Algorithm B.2):
    draw :math:`z \sim \mathcal N(A\phi(x), I)`, :math:`x' \sim q(\cdot \mid z, x)`,
    and accept with :func:`auxiliary_log_ratio`.

    :param GradientState state: current state.
    :param callable value_and_grad: ``codes -> (log_joint [C], grad [C, D, W])``.
    :param CandidateGrid grid: candidate values.
    :param Preconditioner precond: eigendecomposition of ``M`` (``None``: ``M = 0``).
    :returns: ``(new_state, info)``.
    """
    codes, log_joint, grad, step_size = state
    noise = torch.randn(codes.shape[0], grid.relaxed_dim, dtype=grad.dtype, device=codes.device)
    forward = avg_proposal(codes, grad, *auxiliary_root(noise, step_size, precond), grid)
    proposed = sample_factorised(*forward)
    log_joint_new, grad_new = value_and_grad(proposed)
    log_ratio = auxiliary_log_ratio(
        state, proposed, log_joint_new, grad_new, noise, grid, precond, forward
    )
    return _accept(state, proposed, log_joint_new, grad_new, log_ratio)


def avg_init(
    codes: torch.Tensor, value_and_grad: ValueAndGrad, step_size: torch.Tensor
) -> GradientState:
    """Initial AVG state (the same as :func:`ncg_init`).

    :rtype: GradientState
    """
    return ncg_init(codes, value_and_grad, step_size)


def avg_step(
    state: GradientState, value_and_grad: ValueAndGrad, grid: CandidateGrid
) -> Tuple[GradientState, FactorisedInfo]:
    """One AVG transition of every chain: :func:`auxiliary_step` with ``M = 0``.

    :returns: ``(new_state, info)``.
    """
    return auxiliary_step(state, value_and_grad, grid)


def preconditioner(matrix: torch.Tensor, num_chains: int) -> Preconditioner:
    """Eigendecomposition of a symmetric ``[R, R]`` matrix, expanded over chains.

    :param torch.Tensor matrix: symmetric preconditioner ``M``.
    :param int num_chains: ``C``.
    :rtype: Preconditioner
    """
    eigvals, eigvecs = torch.linalg.eigh(matrix.double())
    eigvals, eigvecs = eigvals.to(matrix.dtype), eigvecs.to(matrix.dtype)
    return Preconditioner(eigvals.expand(num_chains, -1), eigvecs.expand(num_chains, -1, -1))


def pavg_init(
    codes: torch.Tensor,
    value_and_grad: ValueAndGrad,
    step_size: torch.Tensor,
    precond: Preconditioner,
) -> PAVGState:
    """Initial PAVG state: one evaluation of ``value_and_grad``.

    :param torch.Tensor codes: long ``[C, D]``.
    :param callable value_and_grad: ``codes -> (log_joint [C], grad [C, D, W])``.
    :param torch.Tensor step_size: ``[C]`` initial step size.
    :param Preconditioner precond: eigendecomposition of ``M`` (see :func:`preconditioner`).
    :rtype: PAVGState
    """
    return PAVGState(*ncg_init(codes, value_and_grad, step_size), *precond)


def pavg_step(
    state: PAVGState, value_and_grad: ValueAndGrad, grid: CandidateGrid
) -> Tuple[PAVGState, FactorisedInfo]:
    """One PAVG transition of every chain: :func:`auxiliary_step` with the state's
    preconditioner.

    :returns: ``(new_state, info)``.
    """
    precond = Preconditioner(state.eigvals, state.eigvecs)
    new, info = auxiliary_step(GradientState(*state[:4]), value_and_grad, grid, precond)
    return PAVGState(*new, *precond), info


# ---------------------------------------------------------------------------- M from warmup
class PreconditionerFit(NamedTuple):
    """A preconditioner fitted to warmup draws.

    :ivar torch.Tensor matrix: ``[R, R]`` the fitted ``M``.
    :ivar str kind: ``"covariance"`` or ``"precision"``: the matrix ``H`` that was scaled.
    :ivar float scale: the fitted scale ``b`` (``M = b H``).
    :ivar float loss: mean squared residual of the chosen fit.
    :ivar dict losses: mean squared residual of each candidate.
    """

    matrix: torch.Tensor
    kind: str
    scale: float
    loss: float
    losses: dict


def fit_preconditioner(
    states: torch.Tensor,
    grads: torch.Tensor,
    log_joints: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
    min_variance: float = 1e-2,
) -> Optional[PreconditionerFit]:
    r"""Fit a preconditioner to warmup draws (Rhodes & Gutmann 2022 [Rhodes2022]_, Section 3.2.2).

    ``H`` is the empirical covariance :math:`\Sigma` of the relaxed states (pooled over
    draws and chains; coordinates with variance below ``min_variance`` get
    ``min_variance`` added to their diagonal), or its (pseudo-)inverse, the precision
    (one-hot blocks of categorical coordinates make :math:`\Sigma` singular). Each
    candidate is scaled by least squares so that the second-order expansion
    :math:`f(x_{t+1}) - f(x_t) \approx \langle g_t, \Delta_t \rangle + c + \tfrac b2
    \Delta_t^T H \Delta_t`, :math:`\Delta_t = \phi(x_{t+1}) - \phi(x_t)`, fits the
    successive pairs of every chain that moved; the candidate with the smaller mean
    squared residual wins and :math:`M = b H`.

    :param torch.Tensor states: ``[T, C, R]`` relaxed states :math:`\phi(x_t)`.
    :param torch.Tensor grads: ``[T, C, R]`` gradients at them.
    :param torch.Tensor log_joints: ``[T, C]`` log joint densities at them.
    :param torch.Tensor mask: bool ``[R, R]``, entries of ``M`` kept (others are set
        to zero), e.g. :meth:`CandidateGrid.block_mask`.
    :param float min_variance: regulariser of near-constant coordinates.
    :returns: the fit, or ``None`` when fewer than two moves are available.
    """
    dtype = states.dtype
    states, grads, log_joints = states.double(), grads.double(), log_joints.double()
    delta = (states[1:] - states[:-1]).flatten(0, 1)
    target = (log_joints[1:] - log_joints[:-1]).flatten() - (grads[:-1].flatten(0, 1) * delta).sum(
        -1
    )
    moved = (delta != 0).any(-1) & torch.isfinite(target)
    if int(moved.sum()) < 2:
        return None
    delta, target = delta[moved], target[moved]
    flat = states.flatten(0, 1)
    cov = torch.cov(flat.T).reshape(flat.shape[-1], flat.shape[-1])
    small = torch.diagonal(cov) < min_variance
    cov = cov + torch.diag(small.double() * min_variance)
    candidates = {"covariance": cov, "precision": torch.linalg.pinv(cov, hermitian=True)}
    best = None
    losses = {}
    for kind, matrix in candidates.items():
        if mask is not None:
            matrix = matrix * mask.double()
        feature = 0.5 * ((delta @ matrix) * delta).sum(-1)
        design = torch.stack([torch.ones_like(feature), feature], -1)
        coef = torch.linalg.lstsq(design, target.unsqueeze(-1)).solution.squeeze(-1)
        loss = float((design @ coef - target).pow(2).mean())
        losses[kind] = loss
        if best is None or loss < best[2]:
            best = (kind, float(coef[1]), loss, matrix)
    kind, scale, loss, matrix = best
    matrix = scale * matrix
    return PreconditionerFit(((matrix + matrix.T) / 2).to(dtype), kind, scale, loss, losses)


def _initial_step_sizes(codes: torch.Tensor, step_size: float) -> torch.Tensor:
    return torch.full((codes.shape[0],), float(step_size), device=codes.device)


def _build_factorised(density, step_size: float, window: int, init_fn, step_fn) -> Algorithm:
    """``(init, step)`` of NCG or AVG: the candidate grid built once, the step size in
    the state (``[C]``, one per chain), where :mod:`pyro_gwg.adaptation` adapts it."""
    grid = CandidateGrid(density.layout, window)

    def init(codes: torch.Tensor) -> GradientState:
        return init_fn(codes, density.value_and_grad, _initial_step_sizes(codes, step_size))

    def step(state: GradientState) -> Tuple[GradientState, FactorisedInfo]:
        return step_fn(state, density.value_and_grad, grid)

    return Algorithm(init, step)


def build_ncg(density, step_size: float = 0.5, window: int = 10) -> Algorithm:
    """NCG as an ``(init, step)`` pair on ``density`` (see
    :mod:`pyro_gwg.proposals.algorithm`): :func:`ncg_init` and :func:`ncg_step`, with the
    candidate grid built once. The step size lives in the state (``[C]``, one per
    chain), where :mod:`pyro_gwg.adaptation` adapts it.

    :param density: a :class:`~pyro_gwg.density.Density`.
    :param float step_size: initial step size :math:`\\epsilon` of every chain.
    :param int window: half-width of the candidate window of unbounded coordinates.
    :rtype: Algorithm
    """
    return _build_factorised(density, step_size, window, ncg_init, ncg_step)


def build_dula(density, step_size: float = 0.1, window: int = 10) -> Algorithm:
    """DULA as an ``(init, step)`` pair on ``density``: :func:`ncg_init` and
    :func:`dula_step` (arguments as for :func:`build_ncg`; the step size is fixed).

    :rtype: Algorithm
    """
    return _build_factorised(density, step_size, window, ncg_init, dula_step)


def build_avg(density, step_size: float = 0.2, window: int = 10) -> Algorithm:
    """AVG as an ``(init, step)`` pair on ``density``: :func:`avg_init` and
    :func:`avg_step` (arguments as for :func:`build_ncg`).

    :rtype: Algorithm
    """
    return _build_factorised(density, step_size, window, avg_init, avg_step)


def build_pavg(
    density,
    step_size: float = 0.2,
    window: int = 10,
    matrix: Optional[torch.Tensor] = None,
) -> Algorithm:
    """PAVG as an ``(init, step)`` pair on ``density``: :func:`pavg_init` and
    :func:`pavg_step`. The preconditioner's eigendecomposition lives in the state, where
    :mod:`pyro_gwg.adaptation` replaces it when it fits ``M`` during warmup.

    :param density: a :class:`~pyro_gwg.density.Density`.
    :param float step_size: initial step size of every chain.
    :param int window: half-width of the candidate window of unbounded coordinates.
    :param torch.Tensor matrix: symmetric ``[R, R]`` preconditioner ``M`` (default 0:
        AVG), ``R`` the number of relaxed values.
    :rtype: Algorithm
    :raises ValueError: for a matrix of the wrong shape.
    """
    grid = CandidateGrid(density.layout, window)
    size = grid.relaxed_dim
    device = density.layout.lower.device
    if matrix is None:
        matrix = torch.zeros(size, size, device=device)
    elif matrix.shape != (size, size):
        raise ValueError(
            "preconditioner has shape {} but the model has {} relaxed values (one "
            "per binary or ordinal coordinate, K per categorical coordinate), so it "
            "must be [{}, {}]".format(tuple(matrix.shape), size, size, size)
        )

    def init(codes: torch.Tensor) -> PAVGState:
        precond = preconditioner(matrix.to(codes.device), codes.shape[0])
        steps = _initial_step_sizes(codes, step_size)
        return pavg_init(codes, density.value_and_grad, steps, precond)

    def step(state: PAVGState) -> Tuple[PAVGState, FactorisedInfo]:
        return pavg_step(state, density.value_and_grad, grid)

    return Algorithm(init, step)
