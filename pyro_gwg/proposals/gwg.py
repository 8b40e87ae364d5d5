r"""Gibbs-With-Gradients proposals (Grathwohl et al. 2021 [Grathwohl2021]_, *Oops I Took A
Gradient*).

Pure tensor functions, batched over a leading chain dimension ``C``, on the flat
coordinate layout of :mod:`pyro_gwg.proposals.layout`. With ``f`` the log joint and
:math:`\tilde d(x)` the gains of :meth:`CoordinateLayout.gains
<pyro_gwg.proposals.layout.CoordinateLayout.gains>`, the proposal over single-coordinate
moves is

.. math:: q(i, v \mid x) = \mathrm{Softmax}\big(\tilde d(x) / \tau\big)_{iv},

with temperature :math:`\tau = 2` the locally balanced choice (Eqs. 3-6, Algorithm 1):
:math:`e^{\tilde d / 2} = g(e^{\tilde d})` for the balancing function
:math:`g(t) = \sqrt t`. Another balancing function ``g``
(:mod:`pyro_gwg.proposals.balancing`: Barker's, DISCS's min and max) gives the logits
:math:`\log g(e^{\tilde d})` in place of :math:`\tilde d / 2`
(:func:`proposal_logits`).

**Defensive mixture.** The kernels mix this proposal with the uniform distribution over
the valid single-coordinate moves, with a small weight :math:`w`:

.. math:: q_w(i, v \mid x) = (1 - w)\, q(i, v \mid x) + w / |N(x)|.

The first-order estimate :math:`\tilde d` can be far off: a one-hot site whose value
enters a sharp likelihood through ``z @ locs`` is linear in ``z`` but the log density is
not, and the estimate grows with the distance between the categories, so the proposal
puts all its mass on the farthest category (always rejected) and gives the nearby ones,
and the reverse move, probability :math:`e^{-100}` or less: the chain freezes where it
starts. Every valid move keeps probability at least :math:`w / |N(x)|` under
:math:`q_w`, in both directions, whatever the gradient, so the chain stays irreducible;
the MH ratio uses :math:`q_w` both ways and stays exact.

Multi-flip variant (Appendix D, Eq. 27), written for every coordinate type: draw
``N`` coordinates :math:`i_1, \dots, i_N` with replacement from the coordinate marginal
:math:`q(i \mid x) = \sum_v q(i, v \mid x)`; each distinct drawn coordinate ``i`` then
moves to a candidate drawn from :math:`q(v \mid i, x)` (a coordinate drawn twice
moves once, by the candidate of its first draw). The index sequence is an
auxiliary variable, so the move is an involution given it and the MH ratio

.. math:: \frac{e^{f(x')} \prod_n q(i_n \mid x') \prod_{i \in S} q(v'_i \mid i, x')}
               {e^{f(x)}  \prod_n q(i_n \mid x)  \prod_{i \in S} q(v_i \mid i, x)}

is exact, ``S`` the set of distinct drawn coordinates and :math:`v'_i` the candidate
that undoes :math:`v_i`. For bits the candidate factor is one and this is Eq. 27; with
``N = 1`` it is the single-flip sampler of Algorithm 1 for every coordinate type.

**Multi-flip without replacement** (``replacement=False``): ``n`` coordinates are
drawn one after the other among those not drawn yet (Gumbel top-``n`` on
:math:`\log q(i \mid x)`, :func:`distinct_draws`), so that exactly ``n``
coordinates move, where ``n`` is ``N`` or ``N - 1`` with probability 1/2 each, drawn
afresh for every step and chain, independently of the state (:func:`distinct_counts`;
``n = 1`` when ``N = 1``). A fixed ``n = N`` would not be irreducible: moving exactly
two bits never changes the parity of the number of ones (nor two :math:`\pm 1` steps
that of the sum of ordinal values), and moving all ``D`` bits only reaches the
complement. With both sizes, ``N`` moves followed by ``N - 1`` of them undone is a
single move, so every state the single-flip sampler reaches stays reachable. Given
``n`` the step is the exact MH step below; a mixture over a state-independent ``n``
of kernels that leave :math:`\pi` invariant leaves it invariant. The ordered sequence
:math:`\sigma = (i_1, \dots, i_n)` has probability

.. math:: P(\sigma \mid x) = \prod_{k=1}^n \frac{q(i_k \mid x)}
          {1 - \sum_{m < k} q(i_m \mid x)}

(:func:`sequential_log_probs`). The probability of the *set* of moved coordinates
sums this over the :math:`n!` orderings, which has no closed form; instead the
ordering is an auxiliary variable of the move. On the space of
:math:`(x, \sigma, v)`, with target :math:`\pi(x) P(\sigma \mid x) \prod_n
q(v_k \mid i_k, x)`, the map :math:`(x, \sigma, v) \mapsto (x', \sigma, v')` that
applies the moves and keeps the *same* ordered sequence (with the undoing candidates
:math:`v'`) is an involution (applied to :math:`(x', \sigma, v')` it moves the same
coordinates back), so MH with the ratio

.. math:: \frac{e^{f(x')}\, P(\sigma \mid x') \prod_k q(v'_k \mid i_k, x')}
               {e^{f(x)}\, P(\sigma \mid x) \prod_k q(v_k \mid i_k, x)}

leaves the extended target invariant, and its ``x`` marginal :math:`\pi`. (Reversing
the order in the reverse move would be exact too, by the same argument; summing over
all orderings would be exact and cost :math:`n!` terms.) A sequence that meets a
coordinate of probability zero (fewer movable coordinates than ``n``) is rejected.

**Jump radius** (ordinal coordinates): on the layout
:meth:`CoordinateLayout.with_radius(r) <pyro_gwg.proposals.layout.CoordinateLayout.with_radius>`
an ordinal coordinate's candidates are every value within distance ``r`` inside its
support, :math:`x_i + \delta`, :math:`0 < |\delta| \le r`, with the first-order
estimate :math:`\tilde d = g_i \delta`; the reverse move is the step
:math:`-\delta` from :math:`x'` and the MH ratio is the one above with these
candidates. ``r = 1`` is the :math:`\pm 1` move of Eq. 3.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional, Tuple

import torch

from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.balancing import balanced_logits
from pyro_gwg.proposals.layout import CoordinateLayout
from pyro_gwg.proposals.mh import accept_probability, metropolis_hastings, select

__all__ = [
    "GWGInfo",
    "GWGMove",
    "GWGState",
    "apply_move",
    "coordinate_log_probs",
    "defensive_mixture",
    "distinct_counts",
    "distinct_draws",
    "gwg_init",
    "gwg_proposal",
    "gwg_step",
    "inverse_cdf_draws",
    "log_mass_left",
    "move_log_prob",
    "proposal_logits",
    "sample_move",
    "sequential_log_probs",
]

# keeps a uniform draw strictly below the total mass (float64 rounding is ~1e-16)
_CDF_MARGIN = 1e-12

ValueAndGrad = Callable[[torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]


class GWGState(NamedTuple):
    """State of a batch of GWG chains, with the proposal at the current state cached.

    :ivar torch.Tensor codes: long ``[C, D]`` coordinates.
    :ivar torch.Tensor log_joint: ``[C]`` log joint density at ``codes``.
    :ivar torch.Tensor log_q_coord: ``[C, D]`` log coordinate marginal of the proposal.
    :ivar torch.Tensor log_q_cand: ``[C, D, M]`` log candidate conditional of the proposal.
    :ivar torch.Tensor num_flips: long ``[C]`` coordinate draws per proposal (read by
        steps built with a ``max_flips``, for which it is a run-time value that warmup
        adapts without compiling the step again).
    """

    codes: torch.Tensor
    log_joint: torch.Tensor
    log_q_coord: torch.Tensor
    log_q_cand: torch.Tensor
    num_flips: torch.Tensor


class GWGMove(NamedTuple):
    """A GWG move, stored per draw.

    :ivar torch.Tensor draws: long ``[C, N]`` drawn coordinates.
    :ivar torch.Tensor candidate: long ``[C, N]`` candidate of each drawn coordinate
        (equal for repeated draws of one coordinate).
    :ivar torch.Tensor distinct: bool ``[C, N]``, True at the first draw of each
        coordinate.
    :ivar active: bool ``[C, N]``, the draws that count (the first ``num_flips`` of a
        chain), or ``None`` when all do. An inactive draw repeats the chain's first
        draw, so that it changes nothing.
    """

    draws: torch.Tensor
    candidate: torch.Tensor
    distinct: torch.Tensor
    active: Optional[torch.Tensor] = None


class GWGInfo(NamedTuple):
    """Per-chain statistics of one GWG step.

    :ivar torch.Tensor accepted: bool ``[C]``.
    :ivar torch.Tensor accept_prob: ``[C]`` MH acceptance probability.
    :ivar torch.Tensor num_changed: long ``[C]`` coordinates changed by the proposal.
    :ivar torch.Tensor energy_evals: long ``[C]`` log-joint evaluations per chain in
        this step (1: at the proposed state).
    :ivar torch.Tensor grad_evals: long ``[C]`` gradient evaluations per chain in this
        step (1: at the proposed state).
    """

    accepted: torch.Tensor
    accept_prob: torch.Tensor
    num_changed: torch.Tensor
    energy_evals: torch.Tensor
    grad_evals: torch.Tensor


def proposal_logits(
    gains: torch.Tensor, temperature: float = 2.0, balancing: Optional[str] = None
) -> torch.Tensor:
    r"""Logits of the GWG proposal: :math:`\tilde d(x) / \tau` (Grathwohl et al. 2021
    [Grathwohl2021]_, Eq. 6), or :math:`\log g(e^{\tilde d(x)})` for a balancing
    function ``g`` (:func:`~pyro_gwg.proposals.balancing.balanced_logits`).

    :param torch.Tensor gains: ``[C, D, M]`` estimated log-density changes.
    :param float temperature: :math:`\tau`; 2 is the locally balanced choice (used
        when ``balancing`` is ``None``).
    :param str balancing: ``"sqrt"``, ``"barker"``, ``"min"`` or ``"max"``, or ``None``
        for the temperature.
    :rtype: torch.Tensor
    """
    if balancing is None:
        return gains / temperature
    return balanced_logits(gains, balancing)


def defensive_mixture(
    logits: torch.Tensor, weight: float, num_valid: Optional[int] = None
) -> torch.Tensor:
    r"""Log-probabilities of :math:`(1 - w)\, \mathrm{Softmax}(\text{logits}) + w\,
    U(\text{valid moves})`, over the moves of each chain jointly.

    Computed in probability space: every valid move has probability at least
    :math:`w / |N(x)|`, so the logarithm loses nothing where it matters.

    :param torch.Tensor logits: ``[C, D, M]``, ``-inf`` for invalid moves.
    :param float weight: :math:`w` in :math:`[0, 1)`.
    :param int num_valid: the number of valid moves when it is the same in every state
        (every move of a bit is valid), else ``None`` (counted from ``logits``).
    :returns: ``[C, D, M]`` normalised log-probabilities, ``-inf`` for invalid moves.
    """
    flat = logits.flatten(1)
    if weight == 0:
        return torch.log_softmax(flat, dim=-1).reshape(logits.shape)
    if num_valid is None:
        valid = flat > -math.inf
        count = valid.sum(-1, keepdim=True).to(flat.dtype)
        uniform = torch.where(valid, weight / count, 0.0)
    else:
        uniform = weight / num_valid
    mixed = (1 - weight) * torch.softmax(flat, dim=-1) + uniform
    return mixed.log().reshape(logits.shape)


def coordinate_log_probs(logits: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Split the joint proposal into coordinate marginal and candidate conditional.

    :math:`q(i, v \mid x) = q(i \mid x)\, q(v \mid i, x)`.

    :param torch.Tensor logits: ``[C, D, M]``, ``-inf`` for invalid moves.
    :returns: ``(log q(i | x) [C, D], log q(v | i, x) [C, D, M])``. Rows of a
        coordinate without any valid move are ``-inf`` / NaN and are never drawn.
    """
    if logits.shape[-1] == 1:  # one candidate per coordinate (bits)
        return torch.log_softmax(logits.squeeze(-1), dim=-1), torch.zeros_like(logits)
    per_coord = torch.logsumexp(logits, dim=-1)
    log_q_coord = per_coord - torch.logsumexp(per_coord, dim=-1, keepdim=True)
    return log_q_coord, logits - per_coord.unsqueeze(-1)


def sample_move(
    log_q_coord: torch.Tensor,
    log_q_cand: torch.Tensor,
    num_flips: int = 1,
    active: Optional[torch.Tensor] = None,
    replacement: bool = True,
) -> GWGMove:
    """Draw a GWG move: ``num_flips`` coordinates, with or without replacement, then a
    candidate each.

    :param torch.Tensor log_q_coord: ``[C, D]`` log coordinate marginal.
    :param torch.Tensor log_q_cand: ``[C, D, M]`` log candidate conditional.
    :param int num_flips: number ``N`` of coordinate draws (Eq. 27).
    :param active: bool ``[C, N]``: the draws that count (a prefix of each row), or
        ``None`` for all: a number of flips below ``N`` known only at run time.
    :param bool replacement: draw the coordinates with replacement (Eq. 27) or
        without (:func:`distinct_draws`: ``N`` distinct coordinates, of which the
        active ones move).
    :rtype: GWGMove
    """
    if replacement:
        draws = inverse_cdf_draws(log_q_coord, num_flips)
    else:
        draws = distinct_draws(log_q_coord, num_flips)
    if active is not None:  # an inactive draw repeats the first one: it moves nothing
        draws = torch.where(active, draws, draws[:, :1])
    if not replacement:  # every active draw is a distinct coordinate
        distinct = torch.ones_like(draws, dtype=torch.bool) if active is None else active
        if log_q_cand.shape[-1] == 1:  # bits
            candidate = torch.zeros_like(draws)
        else:
            candidate = _draw_candidates(log_q_cand, draws)
        if active is not None:  # an inactive draw moves like the first one
            candidate = torch.where(active, candidate, candidate[:, :1])
        return GWGMove(draws, candidate, distinct, active)
    if log_q_cand.shape[-1] == 1:  # one candidate per coordinate (bits)
        distinct = _first_draws(draws, log_q_coord.shape[1])
        return GWGMove(draws, torch.zeros_like(draws), distinct, active)
    candidate = _draw_candidates(log_q_cand, draws)
    if num_flips == 1:
        return GWGMove(draws, candidate, torch.ones_like(draws, dtype=torch.bool), active)
    first = _first_draw_index(draws, log_q_coord.shape[1])
    distinct = _first_draws(draws, log_q_coord.shape[1], first)
    return GWGMove(draws, candidate.gather(1, first), distinct, active)


def _draw_candidates(log_q_cand: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """long ``[C, N]``: a candidate of each drawn coordinate from its conditional."""
    rows = log_q_cand.gather(1, draws.unsqueeze(-1).expand(-1, -1, log_q_cand.shape[-1]))
    return _gumbel_argmax(rows)


def distinct_draws(log_probs: torch.Tensor, num_draws: int) -> torch.Tensor:
    r"""``num_draws`` distinct entries per row, in the order in which sequential draws
    without replacement would pick them: the top ``num_draws`` of the log
    probabilities perturbed by Gumbel noise (the Gumbel top-k trick; Kool et al. 2019,
    *Stochastic beams and where to find them*). Their probability is
    :func:`sequential_log_probs`.

    :param torch.Tensor log_probs: ``[C, D]`` log probabilities (``-inf`` entries come
        last: they are drawn only when fewer than ``num_draws`` entries are possible).
    :param int num_draws: at most ``D``.
    :returns: long ``[C, num_draws]``.
    """
    perturbed = log_probs - torch.empty_like(log_probs).exponential_().log()
    return perturbed.topk(num_draws, dim=-1).indices


def distinct_counts(num_flips: torch.Tensor) -> torch.Tensor:
    """The number of coordinates a step without replacement moves: ``N`` or ``N - 1``
    with probability 1/2 each (``1`` for ``N = 1``), independently of the state; see
    the module docstring for why a fixed ``N`` would not do.

    :param torch.Tensor num_flips: long ``[C]`` ``N`` per chain.
    :rtype: torch.Tensor
    """
    fewer = (num_flips > 1) & (torch.rand(num_flips.shape, device=num_flips.device) < 0.5)
    return num_flips - fewer.long()


def log_mass_left(
    log_probs: torch.Tensor,
    draws: torch.Tensor,
    active: Optional[torch.Tensor] = None,
    reverse: bool = False,
) -> torch.Tensor:
    r"""Log of the mass left before each draw of a sequence drawn without replacement,
    :math:`\log\big(1 - \sum_{m < n} q(i_m)\big)` (``reverse``: of the sequence read
    backwards, :math:`\sum_{m > n}`).

    The mass left is summed from positive terms, the mass of the entries never drawn
    plus that of draw ``n`` and the draws after it (before it, reversed), so that it
    keeps its relative precision when the first draws take nearly all the mass.

    :param torch.Tensor log_probs: ``[C, D]`` log probabilities (rows sum to one).
    :param torch.Tensor draws: long ``[C, N]`` entries, distinct where active.
    :param active: bool ``[C, N]``, the draws that count (anywhere in the row), or
        ``None`` for all.
    :param bool reverse: read the sequence backwards.
    :returns: ``[C, N]``; the values at inactive draws are meaningless.
    """
    picked = log_probs.gather(1, draws)
    if active is None:
        active = torch.ones_like(draws, dtype=torch.bool)
    picked = picked.masked_fill(~active, -math.inf)
    drawn = torch.zeros_like(log_probs).scatter_add(1, draws, active.to(log_probs.dtype)) > 0
    never = torch.logsumexp(log_probs.masked_fill(drawn, -math.inf), -1, keepdim=True)
    # draw n and those after it in drawing order (before it, read backwards)
    later = picked.logcumsumexp(1) if reverse else picked.flip(1).logcumsumexp(1).flip(1)
    return torch.logaddexp(later, never)


def sequential_log_probs(
    log_probs: torch.Tensor, draws: torch.Tensor, active: Optional[torch.Tensor] = None
) -> torch.Tensor:
    r"""Log-probability of each draw of a sequence without replacement given the
    earlier ones, :math:`\log q(i_n) - \log\big(1 - \sum_{m < n} q(i_m)\big)`
    (the second term from :func:`log_mass_left`).

    :param torch.Tensor log_probs: ``[C, D]`` log probabilities (rows sum to one).
    :param torch.Tensor draws: long ``[C, N]`` distinct entries, in drawing order.
    :param active: bool ``[C, N]``, the draws that count, or ``None`` for all.
    :returns: ``[C, N]``; the values at inactive draws are meaningless.
    """
    return log_probs.gather(1, draws) - log_mass_left(log_probs, draws, active)


def _gumbel_argmax(log_probs: torch.Tensor) -> torch.Tensor:
    """One draw per row of the last dimension (Gumbel-max; cheaper than
    ``torch.multinomial`` for the small batches of a sampler step)."""
    return (log_probs - torch.empty_like(log_probs).exponential_().log()).argmax(-1)


def inverse_cdf_draws(log_probs: torch.Tensor, num_draws: int) -> torch.Tensor:
    """``num_draws`` independent draws per row from normalised log probabilities, by
    inverting the cumulative distribution: one uniform number per draw, where the
    Gumbel-max trick needs one per category (the cost of a many-coordinate step).

    An entry of probability zero is never drawn: a draw lands on the first entry whose
    cumulative sum exceeds ``u * total``, with ``u`` kept below 1.

    :param torch.Tensor log_probs: ``[C, D]`` log probabilities (rows sum to one in
        probability; ``-inf`` for impossible entries).
    :param int num_draws: draws per row.
    :returns: long ``[C, num_draws]``.
    """
    # float64 sums: each entry's interval keeps the relative precision of its own
    # probability (a float32 running sum would blur small entries late in the row)
    cdf = log_probs.exp().double().cumsum(-1)
    total = cdf[:, -1:]
    uniform = torch.rand(cdf.shape[:1] + (num_draws,), dtype=cdf.dtype, device=cdf.device)
    target = torch.minimum(uniform * total, total * (1 - _CDF_MARGIN))
    return torch.searchsorted(cdf, target, right=True)


def _first_draw_index(draws: torch.Tensor, num_coords: int) -> torch.Tensor:
    """``[C, N]``: position of the first draw of the same coordinate (a scatter of the
    positions into ``num_coords`` slots: linear in ``N``, for the many draws of a
    run-time number of flips)."""
    positions = torch.arange(draws.shape[1], device=draws.device).expand_as(draws)
    first_at = torch.full(
        (draws.shape[0], num_coords), draws.shape[1], dtype=positions.dtype, device=draws.device
    )
    first_at = first_at.scatter_reduce(1, draws, positions, "amin")
    return first_at.gather(1, draws)


def _first_draws(draws: torch.Tensor, num_coords: int, first=None) -> torch.Tensor:
    """bool ``[C, N]``: True at the first draw of each coordinate."""
    if draws.shape[1] == 1:
        return torch.ones_like(draws, dtype=torch.bool)
    first = _first_draw_index(draws, num_coords) if first is None else first
    return first == torch.arange(draws.shape[1], device=draws.device)


def move_log_prob(
    log_q_coord: torch.Tensor,
    log_q_cand: torch.Tensor,
    move: GWGMove,
    replacement: bool = True,
) -> torch.Tensor:
    r"""Log probability of a move :math:`\sum_n \log q(i_n|x) + \sum_{i \in S} \log q(v_i|i,x)`,
    or, for a move drawn without replacement, of its ordered sequence
    (:func:`sequential_log_probs`) and candidates.

    :param torch.Tensor log_q_coord: ``[C, D]`` log coordinate marginal at the start.
    :param torch.Tensor log_q_cand: ``[C, D, M]`` log candidate conditional at the start.
    :param GWGMove move: the move.
    :param bool replacement: whether the coordinates were drawn with replacement.
    :rtype: torch.Tensor
    """
    if replacement:
        log_q = log_q_coord.gather(1, move.draws)
    else:
        log_q = sequential_log_probs(log_q_coord, move.draws, move.active)
    if move.active is not None:
        log_q = torch.where(move.active, log_q, 0.0)
    width = log_q_cand.shape[-1]
    if width > 1:  # candidate factor (one for bits)
        picked = log_q_cand.flatten(1).gather(1, move.draws * width + move.candidate)
        log_q = log_q + (torch.where(move.distinct, picked, 0.0) if log_q.shape[1] > 1 else picked)
    return log_q.sum(-1)


def apply_move(
    codes: torch.Tensor, move: GWGMove, layout: CoordinateLayout
) -> Tuple[torch.Tensor, GWGMove]:
    """The proposed state and the move that leads back from it.

    :param torch.Tensor codes: long ``[C, D]`` current state.
    :param GWGMove move: the forward move.
    :param CoordinateLayout layout: the coordinate layout.
    :returns: ``(proposed [C, D], reverse move)``.
    """
    old = codes.gather(1, move.draws)
    proposed = codes.scatter(1, move.draws, layout.move(old, move.candidate, move.draws))
    reverse = move._replace(candidate=layout.reverse(old, move.candidate, move.draws))
    return proposed, reverse


def gwg_proposal(
    codes: torch.Tensor,
    grad: torch.Tensor,
    layout: CoordinateLayout,
    temperature: float = 2.0,
    uniform_weight: float = 0.0,
    balancing: Optional[str] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The GWG proposal at ``codes``: ``coordinate_log_probs`` of the tempered (or
    balanced) gains, mixed with the uniform proposal (:func:`defensive_mixture`).

    :param torch.Tensor codes: long ``[C, D]``.
    :param torch.Tensor grad: ``[C, D, W]`` packed gradient at ``codes``.
    :param CoordinateLayout layout: the coordinate layout.
    :param float temperature: proposal temperature.
    :param float uniform_weight: weight :math:`w` of the uniform component.
    :param str balancing: balancing function in place of the temperature (see
        :func:`proposal_logits`), or ``None``.
    :returns: ``(log q(i | x), log q(v | i, x))``.
    """
    logits = proposal_logits(layout.gains(codes, grad), temperature, balancing)
    if uniform_weight > 0:
        num_valid = layout.num_coords if layout.all_binary else None
        logits = defensive_mixture(logits, uniform_weight, num_valid)
    return coordinate_log_probs(logits)


def gwg_init(
    codes: torch.Tensor,
    value_and_grad: ValueAndGrad,
    layout: CoordinateLayout,
    temperature: float = 2.0,
    uniform_weight: float = 0.0,
    num_flips: int = 1,
    balancing: Optional[str] = None,
) -> GWGState:
    """Initial GWG state: one evaluation of ``value_and_grad`` at ``codes``.

    :param torch.Tensor codes: long ``[C, D]``.
    :param callable value_and_grad: ``codes -> (log_joint [C], grad [C, D, W])``.
    :param CoordinateLayout layout: the coordinate layout.
    :param float temperature: proposal temperature.
    :param float uniform_weight: weight of the uniform component of the proposal.
    :param int num_flips: coordinate draws per proposal (the state's ``num_flips``).
    :param str balancing: balancing function in place of the temperature, or ``None``.
    :rtype: GWGState
    """
    log_joint, grad = value_and_grad(codes)
    proposal = gwg_proposal(codes, grad, layout, temperature, uniform_weight, balancing)
    flips = torch.full_like(codes[:, 0], num_flips)
    return GWGState(codes, log_joint, *proposal, flips)


def gwg_step(
    state: GWGState,
    value_and_grad: ValueAndGrad,
    layout: CoordinateLayout,
    temperature: float = 2.0,
    num_flips: int = 1,
    uniform_weight: float = 0.0,
    max_flips: Optional[int] = None,
    balancing: Optional[str] = None,
    replacement: bool = True,
) -> Tuple[GWGState, GWGInfo]:
    """One GWG transition of every chain (Algorithm 1; Eq. 27 when ``num_flips > 1``).

    Costs one evaluation of ``value_and_grad``, at the proposed state; the current
    state's log joint and proposal are carried in ``state``. With ``max_flips``, the
    number of draws is the state's ``num_flips`` (at most ``max_flips``), a run-time
    value: ``max_flips`` coordinates are drawn and those past ``num_flips`` are
    masked (:class:`GWGMove`'s ``active``), which leaves the move's distribution and
    probability those of ``num_flips`` draws.

    :param GWGState state: current state.
    :param callable value_and_grad: ``codes -> (log_joint [C], grad [C, D, W])``.
    :param CoordinateLayout layout: the coordinate layout.
    :param float temperature: proposal temperature.
    :param int num_flips: coordinate draws per proposal (without ``max_flips``).
    :param float uniform_weight: weight of the uniform component of the proposal.
    :param int max_flips: the largest run-time number of draws, or ``None``.
    :param str balancing: balancing function in place of the temperature, or ``None``.
    :param bool replacement: draw the coordinates with replacement (Eq. 27) or
        without (``num_flips`` or one fewer, :func:`distinct_counts`; see the module
        docstring).
    :returns: ``(new_state, info)``.
    """
    codes, log_joint, log_q_coord, log_q_cand, flips = state
    if max_flips is None and replacement:
        move = sample_move(log_q_coord, log_q_cand, num_flips)
    else:
        bound = num_flips if max_flips is None else max_flips
        count = flips if max_flips is not None else torch.full_like(flips, num_flips)
        if not replacement:
            count = distinct_counts(count)
        active = torch.arange(bound, device=flips.device) < count.unsqueeze(-1)
        move = sample_move(log_q_coord, log_q_cand, bound, active, replacement)
    proposed, reverse = apply_move(codes, move, layout)
    log_joint_new, grad_new = value_and_grad(proposed)
    log_q_coord_new, log_q_cand_new = gwg_proposal(
        proposed, grad_new, layout, temperature, uniform_weight, balancing
    )
    log_forward = move_log_prob(log_q_coord, log_q_cand, move, replacement)
    log_ratio = (
        log_joint_new
        - log_joint
        + move_log_prob(log_q_coord_new, log_q_cand_new, reverse, replacement)
        - log_forward
    )
    if not replacement:  # a coordinate of probability zero was drawn: reject
        log_ratio = log_ratio.masked_fill(log_forward == -math.inf, -math.inf)
    accepted = metropolis_hastings(log_ratio)
    new_state = GWGState(
        select(accepted, proposed, codes),
        select(accepted, log_joint_new, log_joint),
        select(accepted, log_q_coord_new, log_q_coord),
        select(accepted, log_q_cand_new, log_q_cand),
        flips,
    )
    one = torch.ones_like(move.draws[:, 0])  # one forward and one backward pass
    info = GWGInfo(accepted, accept_probability(log_ratio), move.distinct.sum(-1), one, one)
    return new_state, info


def build_gwg(
    density,
    temperature: float = 2.0,
    num_flips: int = 1,
    uniform_weight: float = 0.0,
    max_flips: Optional[int] = None,
    *,
    balancing: Optional[str] = None,
    replacement: bool = True,
    radius: int = 1,
) -> Algorithm:
    """GWG as an ``(init, step)`` pair on ``density`` (see
    :mod:`pyro_gwg.proposals.algorithm`): :func:`gwg_init` and :func:`gwg_step`.

    :param density: a :class:`~pyro_gwg.density.Density`.
    :param float temperature: proposal temperature.
    :param int num_flips: coordinate draws per proposal (the initial state's, with
        ``max_flips``).
    :param float uniform_weight: weight of the uniform component of the proposal.
    :param int max_flips: the largest number of draws when the state's ``num_flips``
        changes at run time (adapted in warmup), or ``None`` for ``num_flips`` fixed.
    :param str balancing: balancing function in place of the temperature (see
        :func:`proposal_logits`), or ``None``.
    :param bool replacement: draw the coordinates with replacement (Eq. 27) or without.
    :param int radius: largest step of an ordinal coordinate's moves
        (:meth:`~pyro_gwg.proposals.layout.CoordinateLayout.with_radius`).
    :rtype: Algorithm
    """
    layout = density.layout.with_radius(radius)

    def init(codes: torch.Tensor) -> GWGState:
        return gwg_init(
            codes,
            density.value_and_grad,
            layout,
            temperature,
            uniform_weight,
            num_flips,
            balancing,
        )

    def step(state: GWGState) -> Tuple[GWGState, GWGInfo]:
        return gwg_step(
            state,
            density.value_and_grad,
            layout,
            temperature,
            num_flips,
            uniform_weight,
            max_flips,
            balancing,
            replacement,
        )

    return Algorithm(init, step)
