r"""Path auxiliary proposals: PAS (Sun et al. 2022 [Sun2022]_) and PAFS, the path of
distinct coordinates of the DISCS benchmark (Goshvadi et al. 2023 [Goshvadi2023]_).

Both move along a *path* of ``L`` single-coordinate GWG moves
(:mod:`pyro_gwg.proposals.gwg`) from the current state :math:`x` to the proposed state
:math:`y`, and accept :math:`y` with probability :math:`\min(1, e^{f(y) - f(x)}
q(\text{reverse path} \mid y) / q(\text{path} \mid x))`, the reverse path running
from :math:`y` back to :math:`x` with the proposal built on the gradient at :math:`y`.
Both cost one evaluation of the model and its gradient per step, at :math:`y`.

**Names.** The authors' code has two path samplers: ``pas``, whose weights are the
exact changes of :math:`f` in the neighbourhood of each intermediate state (``D``
model evaluations per intermediate state), and ``pafs``, the "fast" one, whose weights
are first-order estimates from the gradient at the start. This module's **PAS** is
the authors' ``pafs``, the gradient version of the paper's sampler. The DISCS
benchmark's ``path_auxiliary`` sampler (class ``PAFSNoReplacement``) draws distinct
coordinates from the proposal at the start instead: that is this module's **PAFS**.

**PAS: the weights recomputed along the path.** With :math:`g = \nabla f(x)` and
:math:`z_0 = x`, move :math:`l` draws a single move :math:`(i_l, v_l)` from GWG's
proposal at the *intermediate* state :math:`z_{l-1}` built on the *start* gradient,

.. math:: q(i, v \mid z; g) = \mathrm{Softmax}\big(\tilde d(z; g) / \tau\big)_{iv}

(the first-order estimate of :math:`f(z') - f(z)` for every single move from
:math:`z`, with the kernels' defensive mixture), and applies it:
:math:`z_l = z_{l-1}` moved. A coordinate moved once has its weights recomputed at its
new value: a bit that moved up the estimated slope is unlikely to move back. The path
ends at :math:`y = z_L`. The reverse path leaves :math:`z_l` by the move back to
:math:`z_{l-1}`, for :math:`l = L, \dots, 1`, under the gradient at :math:`y`:

.. math:: \frac{q(\text{reverse path} \mid y)}{q(\text{path} \mid x)}
          = \prod_{l=1}^{L} \frac{q(i_l, v'_l \mid z_l; \nabla f(y))}
                                 {q(i_l, v_l \mid z_{l-1}; \nabla f(x))},

:math:`v'_l` the move that undoes :math:`v_l`. The path is an auxiliary variable, and
the map from :math:`(x, \text{path})` to :math:`(y, \text{reverse path})` an
involution, so the MH step is exact. Every site kind GWG samples is supported (bits
flip, categories switch, ordinals step by :math:`\pm 1`). Besides the model
evaluation at :math:`y`, a step evaluates GWG's proposal ``2 L`` times, at every state
of the path under each gradient (arithmetic on ``[C, D, M]`` tensors, no model call):
``L`` times one after the other as it draws the moves, then ``L`` times in batches
(all at once on a small model) for the reverse path.

**PAFS: coordinates drawn without replacement.** The path's ``L`` coordinates are
distinct, drawn one after the other from :math:`q(\cdot \mid x)` restricted to those not
drawn yet (the Gumbel top-``L`` of :math:`\log q(\cdot \mid x)`, in decreasing order of
the perturbed keys); each moves once, to a candidate :math:`v_l` from
:math:`q(v \mid i_l, x)`. The path has probability

.. math:: \prod_{l=1}^{L} \frac{q(i_l \mid x)}{1 - \sum_{m < l} q(i_m \mid x)}\,
          q(v_l \mid i_l, x),

and the reverse path (the same coordinates in the reverse order, each moving back by
its reverse candidate :math:`v'_l`) has probability
:math:`\prod_l q(i_l \mid y)\, q(v'_l \mid i_l, y) / (1 - \sum_{m > l} q(i_m \mid y))`;
their ratio, with :math:`e^{f(y) - f(x)}`, is the exact MH ratio. Every site kind is
supported (ordinals step by :math:`\pm 1` as in GWG). The remaining masses
:math:`1 - \sum_{m < l} q(i_m)` are computed as sums of the masses left, which loses no
precision when the drawn coordinates carry almost all the mass.

**The path length.** A path of fixed even length would never change the parity of the
number of ones of a binary state (every move flips one bit), and a chain confined to
one parity class is exact but not irreducible. Each step therefore draws its length
afresh, independently of the state: the state's ``num_flips`` ``L`` or, when
:math:`L \ge 2`, :math:`L - 1`, with probability 1/2 each. The kernel is the mixture
of the two path kernels, each reversible, and two consecutive lengths reach both parity
classes. (The authors' code draws the length uniformly from :math:`\{1, \dots, 2U -
1\}` for a radius :math:`U`. DISCS's PAFS does not randomise it: every chain takes the
rounded value of a radius that DISCS adapts after every step, by the batch's mean
acceptance minus the target 0.574, clipped to :math:`[1, D]`, for the whole run.) With
``max_flips``, ``L`` is a run-time value (adapted in warmup by
:class:`~pyro_gwg.adaptation.NumFlipsAdaptation`, as GWG's number of flips, then
fixed): ``max_flips`` moves are drawn and those past the step's length are masked.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Tuple

import torch

from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.gwg import (
    GWGInfo,
    GWGMove,
    GWGState,
    ValueAndGrad,
    _gumbel_argmax,
    apply_move,
    distinct_counts,
    distinct_draws,
    gwg_init,
    gwg_proposal,
    log_mass_left,
    move_log_prob,
    sample_move,
)
from pyro_gwg.proposals.layout import CoordinateLayout
from pyro_gwg.proposals.mh import accept_probability, metropolis_hastings, select

__all__ = [
    "PASState",
    "build_pafs",
    "build_pas",
    "pafs_step",
    "pas_init",
    "pas_step",
    "path_length_mask",
    "path_log_prob",
    "without_replacement_log_prob",
]


class PASState(NamedTuple):
    """State of a batch of PAS chains, with the gradient at the current state cached.

    :ivar torch.Tensor codes: long ``[C, D]`` coordinates.
    :ivar torch.Tensor log_joint: ``[C]`` log joint density at ``codes``.
    :ivar torch.Tensor grad: ``[C, D, W]`` packed gradient of the log joint at ``codes``
        (the forward path's proposals are all built on it).
    :ivar torch.Tensor num_flips: long ``[C]`` path length ``L`` (a step's path has
        length ``L`` or ``L - 1``; see :func:`path_length_mask`).
    """

    codes: torch.Tensor
    log_joint: torch.Tensor
    grad: torch.Tensor
    num_flips: torch.Tensor


def path_length_mask(
    num_flips: torch.Tensor, fixed: int, max_flips: Optional[int]
) -> Tuple[int, torch.Tensor]:
    """The draws a path step makes, and which of them count: the first ``L`` of each
    chain's row, ``L`` the state's path length or, when it is at least 2, one less
    with probability 1/2 (see the module docstring).

    :param torch.Tensor num_flips: long ``[C]`` the state's path length.
    :param int fixed: the path length of a step built without ``max_flips``.
    :param int max_flips: the bound of a run-time path length, or ``None``.
    :returns: ``(draws, active)``, ``active`` bool ``[C, draws]``.
    """
    size = fixed if max_flips is None else max_flips
    length = distinct_counts(num_flips)
    return size, torch.arange(size, device=num_flips.device) < length.unsqueeze(-1)


#: gradient entries of the proposals that :func:`path_log_prob` evaluates at once
_PATH_BATCH_ELEMENTS = 1 << 22


def _masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, values, 0.0).sum(-1)


# ------------------------------------------------------------------------------ PAS
def path_log_prob(
    states: torch.Tensor,
    moves: GWGMove,
    active: torch.Tensor,
    grad: torch.Tensor,
    layout: CoordinateLayout,
    temperature: float = 2.0,
    uniform_weight: float = 0.0,
) -> torch.Tensor:
    r"""Log probability of paths of single GWG moves, each move scored by the proposal
    at the state it leaves, built on one gradient per chain: :math:`\sum_l \log q(i_l,
    v_l \mid z_{l-1}; g)` (see the module docstring). The ``L`` proposals are
    evaluated in batches of moves, on ``[C B, D, M]`` tensors of about
    :math:`2^{22}` gradient entries (all ``L`` at once on a small model).

    :param torch.Tensor states: long ``[C, L, D]``, the state each move leaves.
    :param GWGMove moves: the moves, ``draws`` and ``candidate`` long ``[C, L]``.
    :param torch.Tensor active: bool ``[C, L]``, the moves that count.
    :param torch.Tensor grad: ``[C, D, W]`` the packed gradient the paths are built on.
    :param CoordinateLayout layout: the coordinate layout.
    :param float temperature: proposal temperature.
    :param float uniform_weight: weight of the uniform component of the proposal.
    :returns: ``[C]``.
    """
    chains, length, dim = states.shape
    # moves per batch: about _PATH_BATCH_ELEMENTS gradient entries at once
    batch = max(1, _PATH_BATCH_ELEMENTS // (chains * grad[0].numel()))
    parts = []
    for start in range(0, length, batch):
        part = slice(start, min(start + batch, length))
        size = part.stop - part.start
        grads = grad.unsqueeze(1).expand(chains, size, *grad.shape[1:]).flatten(0, 1)
        proposal = gwg_proposal(
            states[:, part].reshape(-1, dim), grads, layout, temperature, uniform_weight
        )
        draws, candidate = (field[:, part].reshape(-1, 1) for field in moves[:2])
        single = GWGMove(draws, candidate, torch.ones_like(draws, dtype=torch.bool))
        parts.append(move_log_prob(*proposal, single).reshape(chains, size))
    return _masked_sum(torch.cat(parts, 1), active)


def pas_init(codes: torch.Tensor, value_and_grad: ValueAndGrad, num_flips: int = 1) -> PASState:
    """Initial PAS state: one evaluation of ``value_and_grad`` at ``codes``.

    :param torch.Tensor codes: long ``[C, D]``.
    :param callable value_and_grad: ``codes -> (log_joint [C], grad [C, D, W])``.
    :param int num_flips: path length (the state's ``num_flips``).
    :rtype: PASState
    """
    log_joint, grad = value_and_grad(codes)
    return PASState(codes, log_joint, grad, torch.full_like(codes[:, 0], num_flips))


def pas_step(
    state: PASState,
    value_and_grad: ValueAndGrad,
    layout: CoordinateLayout,
    temperature: float = 2.0,
    num_flips: int = 1,
    uniform_weight: float = 0.0,
    max_flips: Optional[int] = None,
) -> Tuple[PASState, GWGInfo]:
    """One PAS transition of every chain (see the module docstring). Cost: one
    evaluation of ``value_and_grad``, at the proposed state (the start's gradient is
    carried in the state), and ``2 L`` evaluations of GWG's proposal, one at each
    state of the path under each of the two gradients (arithmetic on ``[C, D, M]``
    tensors, no model call): the ``L`` forward moves are drawn one after the other,
    the reverse path is scored in batches (:func:`path_log_prob`).

    :param PASState state: current state.
    :param callable value_and_grad: ``codes -> (log_joint [C], grad [C, D, W])``.
    :param CoordinateLayout layout: the coordinate layout.
    :param float temperature: proposal temperature.
    :param int num_flips: path length (without ``max_flips``).
    :param float uniform_weight: weight of the uniform component of the proposal.
    :param int max_flips: the largest run-time path length, or ``None``.
    :returns: ``(new_state, info)``.
    """
    codes, log_joint, grad, flips = state
    size, active = path_length_mask(flips, num_flips, max_flips)
    current, log_forward = codes, log_joint.new_zeros(codes.shape[0])
    visited, draws, back = [], [], []  # the state after each move, the move undoing it
    for k in range(size):
        log_q_coord, log_q_cand = gwg_proposal(current, grad, layout, temperature, uniform_weight)
        move = sample_move(log_q_coord, log_q_cand)
        moved, reverse = apply_move(current, move, layout)
        log_q = move_log_prob(log_q_coord, log_q_cand, move)
        log_forward = log_forward + torch.where(active[:, k], log_q, 0.0)
        current = torch.where(active[:, k : k + 1], moved, current)
        visited.append(current)
        draws.append(reverse.draws)
        back.append(reverse.candidate)
    proposed = current
    log_joint_new, grad_new = value_and_grad(proposed)
    # the reverse path leaves z_l by the move back to z_{l-1}, under the gradient at y
    reverse = GWGMove(torch.cat(draws, 1), torch.cat(back, 1), active)
    log_reverse = path_log_prob(
        torch.stack(visited, 1), reverse, active, grad_new, layout, temperature, uniform_weight
    )
    log_ratio = log_joint_new - log_joint + log_reverse - log_forward
    accepted = metropolis_hastings(log_ratio)
    new_state = PASState(
        select(accepted, proposed, codes),
        select(accepted, log_joint_new, log_joint),
        select(accepted, grad_new, grad),
        flips,
    )
    return new_state, _path_info(accepted, log_ratio, proposed, codes)


def _path_info(
    accepted: torch.Tensor, log_ratio: torch.Tensor, proposed: torch.Tensor, codes: torch.Tensor
) -> GWGInfo:
    one = torch.ones_like(codes[:, 0])  # one forward and one backward pass
    changed = (proposed != codes).sum(-1)
    return GWGInfo(accepted, accept_probability(log_ratio), changed, one, one)


def build_pas(
    density,
    temperature: float = 2.0,
    num_flips: int = 1,
    uniform_weight: float = 0.0,
    max_flips: Optional[int] = None,
) -> Algorithm:
    """PAS as an ``(init, step)`` pair on ``density`` (see
    :mod:`pyro_gwg.proposals.algorithm`): :func:`pas_init` and :func:`pas_step`.

    :param density: a :class:`~pyro_gwg.density.Density`.
    :param float temperature: proposal temperature.
    :param int num_flips: path length (the initial state's, with ``max_flips``).
    :param float uniform_weight: weight of the uniform component of the proposal.
    :param int max_flips: the largest path length when the state's ``num_flips``
        changes at run time (adapted in warmup), or ``None`` for a fixed one.
    :rtype: Algorithm
    """
    layout = density.layout

    def init(codes: torch.Tensor) -> PASState:
        return pas_init(codes, density.value_and_grad, num_flips)

    def step(state: PASState) -> Tuple[PASState, GWGInfo]:
        return pas_step(
            state,
            density.value_and_grad,
            layout,
            temperature,
            num_flips,
            uniform_weight,
            max_flips,
        )

    return Algorithm(init, step)


# ----------------------------------------------------------------------------- PAFS
def without_replacement_log_prob(
    log_q_coord: torch.Tensor, draws: torch.Tensor, active: torch.Tensor, reverse: bool = False
) -> torch.Tensor:
    r"""Log normalisers :math:`-\sum_l \log(1 - \sum_{m < l} q(i_m))` of a sequence of
    distinct coordinates drawn without replacement (``reverse``: of the sequence read
    backwards), from GWG's :func:`~pyro_gwg.proposals.gwg.log_mass_left`.

    :param torch.Tensor log_q_coord: ``[C, D]`` log coordinate marginal.
    :param torch.Tensor draws: long ``[C, N]`` the sequence (distinct where active).
    :param torch.Tensor active: bool ``[C, N]`` the draws that count.
    :param bool reverse: normalise the reversed sequence.
    :returns: ``[C]``.
    """
    return -_masked_sum(log_mass_left(log_q_coord, draws, active, reverse), active)


def pafs_step(
    state: GWGState,
    value_and_grad: ValueAndGrad,
    layout: CoordinateLayout,
    temperature: float = 2.0,
    num_flips: int = 1,
    uniform_weight: float = 0.0,
    max_flips: Optional[int] = None,
) -> Tuple[GWGState, GWGInfo]:
    """One PAFS transition of every chain (see the module docstring); one evaluation of
    ``value_and_grad``, at the proposed state. The state is GWG's
    (:func:`~pyro_gwg.proposals.gwg.gwg_init`).

    :param GWGState state: current state.
    :param callable value_and_grad: ``codes -> (log_joint [C], grad [C, D, W])``.
    :param CoordinateLayout layout: the coordinate layout.
    :param float temperature: proposal temperature.
    :param int num_flips: path length (without ``max_flips``).
    :param float uniform_weight: weight of the uniform component of the proposal.
    :param int max_flips: the largest run-time path length, or ``None``.
    :returns: ``(new_state, info)``.
    """
    codes, log_joint, log_q_coord, log_q_cand, flips = state
    size, active = path_length_mask(flips, num_flips, max_flips)
    draws = distinct_draws(log_q_coord, size)  # the Gumbel top-L: sequential draws
    # a coordinate without a move is never drawn
    active = active & torch.isfinite(log_q_coord.gather(1, draws))
    draws = torch.where(active, draws, draws[:, :1])  # inactive: repeat the first, move nothing
    if log_q_cand.shape[-1] == 1:  # one candidate per coordinate (bits)
        candidate = torch.zeros_like(draws)
    else:
        rows = log_q_cand.gather(1, draws.unsqueeze(-1).expand(-1, -1, log_q_cand.shape[-1]))
        candidate = _gumbel_argmax(rows)
        candidate = torch.where(active, candidate, candidate[:, :1])
    move = GWGMove(draws, candidate, active, active)
    proposed, reverse = apply_move(codes, move, layout)
    log_joint_new, grad_new = value_and_grad(proposed)
    log_q_coord_new, log_q_cand_new = gwg_proposal(
        proposed, grad_new, layout, temperature, uniform_weight
    )
    log_forward = move_log_prob(log_q_coord, log_q_cand, move) + without_replacement_log_prob(
        log_q_coord, draws, active
    )
    log_reverse = move_log_prob(
        log_q_coord_new, log_q_cand_new, reverse
    ) + without_replacement_log_prob(log_q_coord_new, draws, active, reverse=True)
    log_ratio = log_joint_new - log_joint + log_reverse - log_forward
    log_ratio = torch.where(torch.isfinite(log_forward), log_ratio, -math.inf)
    accepted = metropolis_hastings(log_ratio)
    new_state = GWGState(
        select(accepted, proposed, codes),
        select(accepted, log_joint_new, log_joint),
        select(accepted, log_q_coord_new, log_q_coord),
        select(accepted, log_q_cand_new, log_q_cand),
        flips,
    )
    return new_state, _path_info(accepted, log_ratio, proposed, codes)


def build_pafs(
    density,
    temperature: float = 2.0,
    num_flips: int = 1,
    uniform_weight: float = 0.0,
    max_flips: Optional[int] = None,
) -> Algorithm:
    """PAFS as an ``(init, step)`` pair on ``density`` (see
    :mod:`pyro_gwg.proposals.algorithm`): GWG's :func:`~pyro_gwg.proposals.gwg.gwg_init`
    and :func:`pafs_step`.

    :param density: a :class:`~pyro_gwg.density.Density`.
    :param float temperature: proposal temperature.
    :param int num_flips: path length (the initial state's, with ``max_flips``), at
        most the number of coordinates ``D`` (a longer one is cut to ``D``).
    :param float uniform_weight: weight of the uniform component of the proposal.
    :param int max_flips: the largest path length when the state's ``num_flips``
        changes at run time (adapted in warmup), or ``None`` for a fixed one.
    :rtype: Algorithm
    """
    layout = density.layout
    num_flips = min(num_flips, layout.num_coords)

    def init(codes: torch.Tensor) -> GWGState:
        return gwg_init(
            codes, density.value_and_grad, layout, temperature, uniform_weight, num_flips
        )

    def step(state: GWGState) -> Tuple[GWGState, GWGInfo]:
        return pafs_step(
            state,
            density.value_and_grad,
            layout,
            temperature,
            num_flips,
            uniform_weight,
            max_flips,
        )

    return Algorithm(init, step)
