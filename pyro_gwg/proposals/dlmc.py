r"""Discrete Langevin Monte Carlo (DLMC; Sun, Dai & Schuurmans 2023 [Sun2023]_) with a
Metropolis-Hastings correction.

DLMC simulates, for a time :math:`h` (the step size), the continuous-time Markov chain
whose rates are the locally balanced weights of the first-order estimate of the log
density at the current state :math:`x` (balancing function :math:`g(t) = \sqrt t`),
one chain per coordinate, independently. With :math:`\phi_{iv}` the first-order
estimate of :math:`f` when coordinate :math:`i` takes the value :math:`v` (up to a
constant: :math:`g_{iv}` for a category, :math:`g_i v` for a bit or a bounded ordinal,
:math:`g = \nabla f(x)`), coordinate :math:`i` jumps from :math:`u` to :math:`v \ne u`
at rate

.. math:: R_i(u, v) = \exp\big((\phi_{iv} - \phi_{iu}) / 2\big),

and its proposal is the transition matrix of the chain over time :math:`h`,

.. math:: q_i(v \mid x) = \big(e^{h R_i}\big)_{x_i v}.

**Bits** (two states, rates :math:`a = e^{d/2}` away from :math:`x_i` and
:math:`b = e^{-d/2}` back, :math:`d = \tilde d_i` the estimated gain of the flip) have
the closed form

.. math:: q_i(\text{flip}) = \frac{a}{a + b}\big(1 - e^{-(a + b) h}\big)
          = \sigma(d)\,\big(1 - e^{-2h\cosh(d/2)}\big),

evaluated in log space (:func:`binary_flip_log_probs`). **Categoricals** (and bounded
ordinals) take the matrix exponential of the ``K x K`` rate matrix, in double precision
(:func:`ctmc_log_transitions`); the rate matrix has the structure
:math:`R = W^{-1}(\mathbf 1 w^\top - S I)`, :math:`w_v = e^{\phi_v/2}`,
:math:`S = \sum_v w_v`, but :math:`e^{hR}` has no closed form beyond two states.

The proposal :math:`q(y \mid x) = \prod_i q_i(y_i \mid x)` is accepted with probability
:math:`\min(1, e^{f(y) - f(x)} q(x \mid y) / q(y \mid x))`, :math:`q(x \mid y)` built on
the gradient at :math:`y`, so the chain is exact for any :math:`h`. The state is NCG's
(:class:`~pyro_gwg.proposals.ncg.GradientState`: the gradient and the step size are
carried, and the proposal at the current state is rebuilt from them, so a step size
adapted during warmup is read by the next step's forward and reverse proposals alike).
"""

from __future__ import annotations

import math
from typing import Tuple

import torch

from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.layout import CandidateGrid, CoordinateLayout
from pyro_gwg.proposals.ncg import (
    FactorisedInfo,
    GradientState,
    ValueAndGrad,
    _accept,
    _initial_step_sizes,
    factorised_log_prob,
    ncg_init,
    sample_factorised,
)

__all__ = [
    "binary_flip_log_probs",
    "build_dlmc",
    "ctmc_log_transitions",
    "dlmc_proposal",
    "dlmc_step",
    "log1mexp",
]


def log1mexp(a: torch.Tensor) -> torch.Tensor:
    r""":math:`\log(1 - e^{-a})` for :math:`a \ge 0`, accurate for small and large ``a``.

    :param torch.Tensor a: non-negative tensor.
    :rtype: torch.Tensor
    """
    return torch.where(a < math.log(2), torch.log(-torch.expm1(-a)), torch.log1p(-torch.exp(-a)))


def binary_flip_log_probs(
    gain: torch.Tensor, step_size: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Log probabilities that a two-state chain with rates :math:`e^{d/2}` (away) and
    :math:`e^{-d/2}` (back) stays, or has flipped, after time :math:`h`.

    :param torch.Tensor gain: ``[C, D]`` estimated gain :math:`d` of each flip.
    :param torch.Tensor step_size: ``[C]`` time :math:`h`.
    :returns: ``(log_stay [C, D], log_flip [C, D])``.
    """
    total = (step_size.log().unsqueeze(-1) + torch.logaddexp(gain / 2, -gain / 2)).exp()
    log_away = torch.nn.functional.logsigmoid(gain)
    log_flip = log_away + log1mexp(total)
    log_stay = torch.logaddexp(torch.nn.functional.logsigmoid(-gain), log_away - total)
    return log_stay, log_flip


def ctmc_log_transitions(value_logits: torch.Tensor, step_size: torch.Tensor) -> torch.Tensor:
    r"""Log transition matrices :math:`\log e^{h R_i}` of the chains with rates
    :math:`R_i(u, v) = e^{\psi_{iv} - \psi_{iu}}` (:math:`\psi = \phi / 2`), by
    :func:`torch.linalg.matrix_exp` in double precision.

    :param torch.Tensor value_logits: ``[C, D, V]`` :math:`\psi`, ``-inf`` for values a
        coordinate does not have (never entered; their rows are the identity's).
    :param torch.Tensor step_size: ``[C]`` time :math:`h`.
    :returns: float64 ``[C, D, V, V]``, rows normalised (rows ``u``: from value ``u``).
    """
    psi = value_logits.double()
    width = psi.shape[-1]
    valid = torch.isfinite(psi)
    pair = valid.unsqueeze(-1) & valid.unsqueeze(-2)
    pair &= ~torch.eye(width, dtype=torch.bool, device=psi.device)
    rates = (psi.unsqueeze(-2) - psi.unsqueeze(-1)).masked_fill(~pair, -math.inf).exp()
    generator = rates - torch.diag_embed(rates.sum(-1))
    transitions = torch.linalg.matrix_exp(step_size.double().reshape(-1, 1, 1, 1) * generator)
    # rounding can leave tiny negative entries: the proposal is the clamped, normalised
    # matrix, the same function forward and backward
    return torch.log_softmax(transitions.clamp(min=0).log(), dim=-1)


def dlmc_proposal(
    codes: torch.Tensor,
    grad: torch.Tensor,
    step_size: torch.Tensor,
    layout: CoordinateLayout,
    grid: CandidateGrid,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The DLMC proposal at ``codes``: a factorised table over the values of every
    coordinate (see the module docstring).

    :param torch.Tensor codes: long ``[C, D]``.
    :param torch.Tensor grad: ``[C, D, W]`` packed gradient at ``codes``.
    :param torch.Tensor step_size: ``[C]`` time :math:`h`.
    :param CoordinateLayout layout: the coordinate layout.
    :param CandidateGrid grid: the values of every coordinate (bounded).
    :returns: ``(log_probs [C, D, V], base [C, D])``, as
        :func:`~pyro_gwg.proposals.ncg.sample_factorised` reads them.
    """
    if layout.all_binary:
        log_stay, log_flip = binary_flip_log_probs(layout.gains(codes, grad)[..., 0], step_size)
        at_one = codes.bool()
        log_probs = torch.stack(
            [torch.where(at_one, log_flip, log_stay), torch.where(at_one, log_stay, log_flip)], -1
        )
        return log_probs, torch.zeros_like(codes)
    linear = grid.flat_grad(grad) / 2
    value_logits, base = grid.logits(linear, linear.new_zeros(codes.shape[0]), codes)
    transitions = ctmc_log_transitions(value_logits, step_size)
    current = (codes - base).reshape(*codes.shape, 1, 1).expand(-1, -1, 1, transitions.shape[-1])
    return transitions.gather(-2, current).squeeze(-2).to(grad.dtype), base


def dlmc_step(
    state: GradientState,
    value_and_grad: ValueAndGrad,
    layout: CoordinateLayout,
    grid: CandidateGrid,
) -> Tuple[GradientState, FactorisedInfo]:
    r"""One DLMC transition of every chain: :math:`y \sim q(\cdot \mid x)`, accepted
    with probability :math:`\min(1, e^{f(y) - f(x)} q(x \mid y) / q(y \mid x))`. One
    evaluation of ``value_and_grad``, at the proposed state.

    :param GradientState state: current state (with the step size in force).
    :param callable value_and_grad: ``codes -> (log_joint [C], grad [C, D, W])``.
    :param CoordinateLayout layout: the coordinate layout.
    :param CandidateGrid grid: the values of every coordinate (bounded).
    :returns: ``(new_state, info)``.
    """
    codes, log_joint, grad, step_size = state
    forward = dlmc_proposal(codes, grad, step_size, layout, grid)
    proposed = sample_factorised(*forward)
    log_joint_new, grad_new = value_and_grad(proposed)
    reverse = dlmc_proposal(proposed, grad_new, step_size, layout, grid)
    log_ratio = (
        log_joint_new
        - log_joint
        + factorised_log_prob(*reverse, codes)
        - factorised_log_prob(*forward, proposed)
    )
    return _accept(state, proposed, log_joint_new, grad_new, log_ratio)


def build_dlmc(density, step_size: float = 0.1) -> Algorithm:
    """DLMC as an ``(init, step)`` pair on ``density`` (see
    :mod:`pyro_gwg.proposals.algorithm`): NCG's
    :func:`~pyro_gwg.proposals.ncg.ncg_init` and :func:`dlmc_step`.

    :param density: a :class:`~pyro_gwg.density.Density` whose coordinates have finite
        supports.
    :param float step_size: initial time :math:`h` of every chain.
    :rtype: Algorithm
    """
    layout = density.layout
    grid = CandidateGrid(layout)

    def init(codes: torch.Tensor) -> GradientState:
        return ncg_init(codes, density.value_and_grad, _initial_step_sizes(codes, step_size))

    def step(state: GradientState) -> Tuple[GradientState, FactorisedInfo]:
        return dlmc_step(state, density.value_and_grad, layout, grid)

    return Algorithm(init, step)
