r"""Path auxiliary proposals: PAS (Sun et al. 2022 [Sun2022]_) and its
without-replacement variant PAFS (the fast path sampler of the DISCS benchmark,
Goshvadi et al. 2023 [Goshvadi2023]_).

Both move ``L`` coordinates per step along a *path* of single-coordinate moves, each
drawn from the GWG proposal (:mod:`pyro_gwg.proposals.gwg`) built on the gradient at
the **start** :math:`x` of the path: the coordinate marginal
:math:`q(i \mid x) = \sum_v q(i, v \mid x)` of :math:`q(i, v \mid x) = \mathrm{Softmax}
(\tilde d(x) / \tau)` (with the kernels' defensive mixture) and, for each drawn
coordinate, a move from the same first-order estimate. The reverse path runs from the
proposed state :math:`y` back to :math:`x`, with the proposal built on the gradient at
:math:`y`; the acceptance probability is :math:`\min(1, e^{f(y) - f(x)}
q(\text{reverse path} \mid y) / q(\text{path} \mid x))`.

**PAS: coordinates drawn with replacement.** The path's coordinates
:math:`i_1, \dots, i_L` are independent draws from :math:`q(\cdot \mid x)`, so the
probability of the sequence, :math:`\prod_l q(i_l \mid x) = \prod_i q(i \mid x)^{n_i}`,
depends on the visit counts :math:`n_i` only (the multinomial coefficient of the counts
is the same forward and backward and cancels). A coordinate visited :math:`n_i` times
moves :math:`n_i` times; each visit moves it from its current value :math:`u` to
:math:`v \ne u` with probability

.. math:: T_i(u, v) = (1 - w)\,\frac{e^{\phi_{iv}}}{\sum_{v' \ne u} e^{\phi_{iv'}}}
          + \frac{w}{K_i - 1},

the GWG candidate distribution at :math:`u` under the start gradient
(:math:`\phi_{iv} = g_{iv} / \tau` for a category, :math:`g_i v / \tau` for a bit,
:math:`K_i` values, :math:`w` the uniform weight). Given the counts the coordinates move
independently, and summing over the intermediate values of each coordinate's walk
gives the probability of its end value, :math:`(T_i^{n_i})_{x_i y_i}`. With the counts
:math:`n` as the auxiliary variable (drawn afresh from :math:`q(n \mid x)` at every step)
the exact MH ratio is

.. math:: \frac{e^{f(y)} \prod_i q(i \mid y)^{n_i}\, (T_i'^{\,n_i})_{y_i x_i}}
               {e^{f(x)} \prod_i q(i \mid x)^{n_i}\, (T_i^{n_i})_{x_i y_i}},

:math:`T'` built on the gradient at :math:`y`: the reverse path visits the same
coordinates in the reverse order. For a bit, :math:`T_i` is the swap of its two values
whatever the gradient: :math:`T_i^{n_i}` is the identity for even :math:`n_i` and the
swap for odd :math:`n_i`, so the proposal flips exactly the bits drawn an odd number of
times and the ratio keeps only the coordinate factors
:math:`\prod_i (q(i \mid y) / q(i \mid x))^{n_i}`, the binary PAS of Sun et al. 2022
[Sun2022]_ with first-order (gradient) weights. A categorical coordinate's powers are
computed by repeated squaring, in double precision. Ordinals other than bits are not
supported (their walks would leave the :math:`\pm 1` moves of the coordinate marginal).

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
number of ones of a binary state (PAFS flips exactly ``L`` bits, PAS a number of bits of
the parity of ``L``), and a chain confined to one parity class is exact but not
irreducible. Each step therefore draws its length afresh, independently of the state:
the state's ``num_flips`` ``L`` or, when :math:`L \ge 2`, :math:`L - 1`, with
probability 1/2 each. The kernel is the mixture of the two path kernels, each reversible,
and two consecutive lengths reach both parity classes. (DISCS's PAFS randomises its
length too, by a Poisson draw around its radius.) With ``max_flips``, ``L`` is a run-time
value (adapted in warmup by :class:`~pyro_gwg.adaptation.NumFlipsAdaptation`, as GWG's
number of flips): ``max_flips`` draws are made and those past the step's length are
masked.
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
    _first_draw_index,
    _gumbel_argmax,
    apply_move,
    distinct_counts,
    distinct_draws,
    gwg_init,
    gwg_proposal,
    inverse_cdf_draws,
    log_mass_left,
    move_log_prob,
)
from pyro_gwg.proposals.layout import CandidateGrid, CoordinateLayout
from pyro_gwg.proposals.mh import accept_probability, metropolis_hastings, select

__all__ = [
    "PASState",
    "build_pafs",
    "build_pas",
    "pafs_step",
    "pas_init",
    "pas_proposal",
    "pas_step",
    "path_length_mask",
    "visit_log_probs",
    "without_replacement_log_prob",
]


class PASState(NamedTuple):
    """State of a batch of PAS chains, with the proposal at the current state cached.

    :ivar torch.Tensor codes: long ``[C, D]`` coordinates.
    :ivar torch.Tensor log_joint: ``[C]`` log joint density at ``codes``.
    :ivar torch.Tensor log_q_coord: ``[C, D]`` log coordinate marginal of the proposal.
    :ivar torch.Tensor value_logits: ``[C, D, V]`` first-order log weights
        :math:`\\phi_{iv}` of the values of each coordinate (``-inf`` past its last).
    :ivar torch.Tensor num_flips: long ``[C]`` path length ``L`` (a step's path has
        length ``L`` or ``L - 1``; see :func:`path_length_mask`).
    """

    codes: torch.Tensor
    log_joint: torch.Tensor
    log_q_coord: torch.Tensor
    value_logits: torch.Tensor
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


def _masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, values, 0.0).sum(-1)


# ------------------------------------------------------------------------------ PAS
def visit_log_probs(
    value_logits: torch.Tensor,
    start: torch.Tensor,
    visits: torch.Tensor,
    max_visits: int,
    uniform_weight: float = 0.0,
) -> torch.Tensor:
    r"""Log probabilities of a coordinate's value after ``visits`` moves of PAS: the row
    ``start`` of :math:`T^{n}` (see the module docstring), by repeated squaring.

    :param torch.Tensor value_logits: ``[C, N, V]`` log weights :math:`\phi` of the
        values of each coordinate (``-inf`` for values it does not have).
    :param torch.Tensor start: long ``[C, N]`` value before the first visit.
    :param torch.Tensor visits: long ``[C, N]`` number of visits :math:`n` (0: stays).
    :param int max_visits: an upper bound of ``visits``.
    :param float uniform_weight: weight :math:`w` of the uniform move.
    :returns: float64 ``[C, N, V]`` log probabilities of the end value.
    """
    width = value_logits.shape[-1]
    same = torch.eye(width, dtype=torch.bool, device=value_logits.device)
    logits = value_logits.double().unsqueeze(-2).expand(*value_logits.shape[:-1], width, width)
    moves = torch.softmax(logits.masked_fill(same, -math.inf), dim=-1)  # row u: to v != u
    if uniform_weight > 0:
        others = (torch.isfinite(logits) & ~same).double()
        uniform = others / others.sum(-1, keepdim=True)
        moves = (1 - uniform_weight) * moves + uniform_weight * uniform
    prob = torch.nn.functional.one_hot(start, width).double()
    power = moves
    num_bits = max(int(max_visits), 1).bit_length()
    for bit in range(num_bits):
        take = ((visits >> bit) & 1).bool().unsqueeze(-1)
        prob = torch.where(take, (prob.unsqueeze(-2) @ power).squeeze(-2), prob)
        if bit + 1 < num_bits:
            power = power @ power
    return prob.log()


def pas_proposal(
    codes: torch.Tensor,
    grad: torch.Tensor,
    layout: CoordinateLayout,
    grid: CandidateGrid,
    temperature: float = 2.0,
    uniform_weight: float = 0.0,
) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""The PAS proposal at ``codes``: GWG's coordinate marginal and the value weights
    :math:`\phi = g / \tau` of every coordinate.

    :param torch.Tensor codes: long ``[C, D]``.
    :param torch.Tensor grad: ``[C, D, M]`` packed gradient at ``codes``.
    :param CoordinateLayout layout: the coordinate layout.
    :param CandidateGrid grid: the values of every coordinate.
    :param float temperature: proposal temperature :math:`\tau`.
    :param float uniform_weight: weight :math:`w` of the uniform component.
    :returns: ``(log q(i | x) [C, D], value_logits [C, D, V])``.
    """
    log_q_coord = gwg_proposal(codes, grad, layout, temperature, uniform_weight)[0]
    flat = grid.flat_grad(grad) / temperature
    value_logits = grid.logits(flat, flat.new_zeros(codes.shape[0]), codes)[0]
    return log_q_coord, value_logits


def pas_init(
    codes: torch.Tensor,
    value_and_grad: ValueAndGrad,
    layout: CoordinateLayout,
    grid: CandidateGrid,
    temperature: float = 2.0,
    uniform_weight: float = 0.0,
    num_flips: int = 1,
) -> PASState:
    """Initial PAS state: one evaluation of ``value_and_grad`` at ``codes``.

    :param torch.Tensor codes: long ``[C, D]``.
    :param callable value_and_grad: ``codes -> (log_joint [C], grad [C, D, W])``.
    :param CoordinateLayout layout: the coordinate layout.
    :param CandidateGrid grid: the values of every coordinate.
    :param float temperature: proposal temperature.
    :param float uniform_weight: weight of the uniform component of the proposal.
    :param int num_flips: path length (the state's ``num_flips``).
    :rtype: PASState
    """
    log_joint, grad = value_and_grad(codes)
    proposal = pas_proposal(codes, grad, layout, grid, temperature, uniform_weight)
    return PASState(codes, log_joint, *proposal, torch.full_like(codes[:, 0], num_flips))


def pas_step(
    state: PASState,
    value_and_grad: ValueAndGrad,
    layout: CoordinateLayout,
    grid: CandidateGrid,
    temperature: float = 2.0,
    num_flips: int = 1,
    uniform_weight: float = 0.0,
    max_flips: Optional[int] = None,
) -> Tuple[PASState, GWGInfo]:
    """One PAS transition of every chain (see the module docstring); one evaluation of
    ``value_and_grad``, at the proposed state.

    :param PASState state: current state.
    :param callable value_and_grad: ``codes -> (log_joint [C], grad [C, D, W])``.
    :param CoordinateLayout layout: the coordinate layout (bits and categoricals).
    :param CandidateGrid grid: the values of every coordinate.
    :param float temperature: proposal temperature.
    :param int num_flips: path length (without ``max_flips``).
    :param float uniform_weight: weight of the uniform component of the proposal.
    :param int max_flips: the largest run-time path length, or ``None``.
    :returns: ``(new_state, info)``.
    """
    codes, log_joint, log_q_coord, value_logits, flips = state
    size, active = path_length_mask(flips, num_flips, max_flips)
    draws = inverse_cdf_draws(log_q_coord, size)
    draws = torch.where(active, draws, draws[:, :1])  # inactive: repeat the first, count nothing
    visits = torch.zeros_like(codes).scatter_add(1, draws, active.long())
    log_forward = _masked_sum(log_q_coord.gather(1, draws), active)
    if layout.all_binary:  # a bit visited n times ends flipped iff n is odd
        proposed = (codes + visits) % 2
    else:
        first = _first_draw_index(draws, codes.shape[1])
        distinct = first == torch.arange(size, device=draws.device)
        walks = torch.where(distinct, visits.gather(1, draws), 0)
        start = codes.gather(1, draws)
        rows = value_logits.gather(1, draws.unsqueeze(-1).expand(-1, -1, value_logits.shape[-1]))
        forward = visit_log_probs(rows, start, walks, size, uniform_weight)
        end = _gumbel_argmax(forward).gather(1, first)
        proposed = codes.scatter(1, draws, end)
        log_forward = log_forward + _masked_sum(
            forward.gather(-1, end.unsqueeze(-1)).squeeze(-1), distinct
        ).to(log_forward.dtype)
    log_joint_new, grad_new = value_and_grad(proposed)
    log_q_coord_new, value_logits_new = pas_proposal(
        proposed, grad_new, layout, grid, temperature, uniform_weight
    )
    log_reverse = _masked_sum(log_q_coord_new.gather(1, draws), active)
    if not layout.all_binary:
        rows = value_logits_new.gather(
            1, draws.unsqueeze(-1).expand(-1, -1, value_logits_new.shape[-1])
        )
        reverse = visit_log_probs(rows, end, walks, size, uniform_weight)
        log_reverse = log_reverse + _masked_sum(
            reverse.gather(-1, start.unsqueeze(-1)).squeeze(-1), distinct
        ).to(log_reverse.dtype)
    log_ratio = log_joint_new - log_joint + log_reverse - log_forward
    accepted = metropolis_hastings(log_ratio)
    new_state = PASState(
        select(accepted, proposed, codes),
        select(accepted, log_joint_new, log_joint),
        select(accepted, log_q_coord_new, log_q_coord),
        select(accepted, value_logits_new, value_logits),
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

    :param density: a :class:`~pyro_gwg.density.Density` whose coordinates are bits and
        categoricals.
    :param float temperature: proposal temperature.
    :param int num_flips: path length (the initial state's, with ``max_flips``).
    :param float uniform_weight: weight of the uniform component of the proposal.
    :param int max_flips: the largest path length when the state's ``num_flips``
        changes at run time (adapted in warmup), or ``None`` for a fixed one.
    :rtype: Algorithm
    """
    layout = density.layout
    grid = CandidateGrid(layout)

    def init(codes: torch.Tensor) -> PASState:
        return pas_init(
            codes, density.value_and_grad, layout, grid, temperature, uniform_weight, num_flips
        )

    def step(state: PASState) -> Tuple[PASState, GWGInfo]:
        return pas_step(
            state,
            density.value_and_grad,
            layout,
            grid,
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
