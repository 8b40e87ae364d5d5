"""The pure proposal functions: gains, sampling, log q, MH and detailed balance, for
GWG and its variants (balancing functions, draws without replacement, jump radius)."""

import itertools
import math

import pytest
import torch

import pyro_gwg.proposals.gwg as gwg_math
from pyro_gwg._validation import check_balancing
from pyro_gwg.proposals import (
    CoordinateLayout,
    GWGMove,
    accept_probability,
    apply_move,
    coordinate_log_probs,
    defensive_mixture,
    distinct_counts,
    distinct_draws,
    gwg_init,
    gwg_proposal,
    gwg_step,
    inverse_cdf_draws,
    metropolis_hastings,
    move_log_prob,
    proposal_logits,
    sample_move,
    select,
    sequential_log_probs,
)
from pyro_gwg.proposals.balancing import BALANCING, balanced_logits
from pyro_gwg.proposals.blocks import evaluate_changes

INF = float("inf")


def make_layout(kinds):
    """``kinds``: list of ("bit",), ("ord", low, high) or ("cat", K)."""
    is_scalar, lower, upper, cats = [], [], [], []
    for kind in kinds:
        is_scalar.append(kind[0] != "cat")
        lower.append(0.0 if kind[0] != "ord" else kind[1])
        upper.append(1.0 if kind[0] == "bit" else kind[2] if kind[0] == "ord" else kind[1] - 1.0)
        cats.append(kind[1] if kind[0] == "cat" else 0)
    return CoordinateLayout(
        torch.tensor(is_scalar), torch.tensor(lower), torch.tensor(upper), torch.tensor(cats)
    )


LAYOUTS = {
    "mixed": [("bit",), ("bit",), ("cat", 3), ("ord", 0.0, 2.0), ("ord", 0.0, INF)],
    "bits": [("bit",), ("bit",), ("bit",)],
    "ordinals": [("ord", 0.0, 2.0), ("ord", -1.0, 2.0)],
    "categoricals": [("cat", 3), ("cat", 2), ("cat", 3)],
}
FINITE_CAP = 2  # the target puts -inf above this on unbounded coordinates
#: layouts with a jump radius for ordinals: name -> (a key of LAYOUTS, radius)
RADIUS_LAYOUTS = {"mixed-r2": ("mixed", 2), "ordinals-r3": ("ordinals", 3)}
#: every layout GWG's tests run on
GWG_LAYOUTS = sorted(LAYOUTS) + sorted(RADIUS_LAYOUTS)


def gwg_layout(name):
    """A layout of :data:`LAYOUTS` or :data:`RADIUS_LAYOUTS` by name."""
    if name in RADIUS_LAYOUTS:
        base, radius = RADIUS_LAYOUTS[name]
        return make_layout(LAYOUTS[base]).with_radius(radius)
    return make_layout(LAYOUTS[name])


class Target:
    """A non-linear log density of the relaxed values: e @ w + e^T A e / 2."""

    def __init__(self, layout, seed=0, quadratic=0.6):
        self.layout = layout
        self.sizes = [1 if s else int(k) for s, k in zip(layout.is_scalar, layout.num_categories)]
        dim = sum(self.sizes)
        gen = torch.Generator().manual_seed(seed)
        self.w = torch.randn(dim, generator=gen)
        a = torch.randn(dim, dim, generator=gen) * quadratic
        self.a = (a + a.T) / 2

    def embed(self, codes):
        parts = []
        for i, size in enumerate(self.sizes):
            if self.layout.is_scalar[i]:
                parts.append(codes[..., i : i + 1].float())
            else:
                parts.append(torch.nn.functional.one_hot(codes[..., i], size).float())
        return torch.cat(parts, -1)

    def log_density(self, embedded):
        return embedded @ self.w + 0.5 * ((embedded @ self.a) * embedded).sum(-1)

    def __call__(self, codes):
        f = self.log_density(self.embed(codes))
        unbounded = torch.isinf(self.layout.upper)
        return torch.where((codes[..., unbounded] <= FINITE_CAP).all(-1), f, -INF)

    def value_and_grad(self, codes):
        e = self.embed(codes).requires_grad_(True)
        (g,) = torch.autograd.grad(self.log_density(e).sum(), e)
        packed = torch.zeros(codes.shape + (self.layout.grad_width,))
        start = 0
        for i, size in enumerate(self.sizes):
            packed[..., i, :size] = g[..., start : start + size]
            start += size
        return self(codes), packed

    def states(self):
        ranges = [
            range(int(lo), int(min(hi, FINITE_CAP)) + 1) if s else range(int(k))
            for s, lo, hi, k in zip(
                self.layout.is_scalar,
                self.layout.lower,
                self.layout.upper,
                self.layout.num_categories,
            )
        ]
        return torch.tensor(list(itertools.product(*ranges)))


def test_gains_match_the_papers_formulas():
    layout = make_layout(LAYOUTS["mixed"])
    codes = torch.tensor([[0, 1, 2, 0, 3]])
    grad = torch.zeros(1, 5, 3)
    grad[0, :, 0] = torch.tensor([0.5, -2.0, 0.0, 1.5, -0.7])
    grad[0, 2] = torch.tensor([0.3, -0.1, 0.9])
    gains = layout.gains(codes, grad)
    # bits (in a mixed layout): candidates down/up, the valid one flips, gain -(2x - 1) g
    assert gains[0, 0].tolist() == [-INF, 0.5, -INF]
    assert gains[0, 1].tolist() == [2.0, -INF, -INF]
    # categorical: g_ij - g_i,x_i, current category excluded
    assert torch.allclose(gains[0, 2], torch.tensor([0.3 - 0.9, -0.1 - 0.9, -INF]))
    # ordinal at its lower bound can only go up; unbounded one goes both ways
    assert gains[0, 3].tolist() == [-INF, 1.5, -INF]
    assert torch.allclose(gains[0, 4, :2], torch.tensor([0.7, -0.7]))
    # an all-bit layout has the single candidate "flip"
    bits = make_layout(LAYOUTS["bits"])
    gains = bits.gains(torch.tensor([[0, 1, 1]]), torch.tensor([[[0.5], [-2.0], [0.25]]]))
    assert gains.squeeze(-1).tolist() == [[0.5, 2.0, -0.25]]


@pytest.mark.parametrize("name", GWG_LAYOUTS)
def test_gains_are_exact_for_a_linear_log_density(name):
    layout = gwg_layout(name)
    target = Target(layout, quadratic=0.0)
    states = target.states()
    _, grad = target.value_and_grad(states)
    gains = layout.gains(states, grad)
    for v in range(layout.width):
        cand = torch.full_like(states, v)
        for i in range(layout.num_coords):
            ok = torch.isfinite(gains[:, i, v])
            moved = states[ok].clone()
            moved[:, i] = layout.move(states[ok], cand[ok])[:, i]
            exact = target.log_density(target.embed(moved)) - target.log_density(
                target.embed(states[ok])
            )
            assert torch.allclose(gains[ok, i, v], exact, atol=1e-5), (i, v)


@pytest.mark.parametrize("name", GWG_LAYOUTS)
def test_moves_and_their_reverse_are_involutions(name):
    layout = gwg_layout(name)
    states = Target(layout).states()
    gains = layout.gains(states, torch.zeros(states.shape + (layout.grad_width,)))
    for i, v in itertools.product(range(layout.num_coords), range(layout.width)):
        ok = torch.isfinite(gains[:, i, v])
        move = GWGMove(
            torch.full((int(ok.sum()), 1), i),
            torch.full((int(ok.sum()), 1), v),
            torch.ones(int(ok.sum()), 1, dtype=torch.bool),
        )
        proposed, reverse = apply_move(states[ok], move, layout)
        assert (proposed != states[ok]).sum(-1).eq(1).all()
        back, again = apply_move(proposed, reverse, layout)
        assert torch.equal(back, states[ok]) and torch.equal(again.candidate, move.candidate)


def test_coordinate_log_probs_factorise_the_joint_softmax():
    layout = make_layout(LAYOUTS["mixed"])
    codes = torch.tensor([[0, 1, 2, 0, 3]])
    logits = proposal_logits(layout.gains(codes, torch.randn(1, 5, 3)), 2.0)
    log_q_coord, log_q_cand = coordinate_log_probs(logits)
    joint = torch.log_softmax(logits.reshape(1, -1), -1).reshape(logits.shape)
    recombined = log_q_coord.unsqueeze(-1) + log_q_cand
    finite = torch.isfinite(joint)
    assert torch.allclose(recombined[finite], joint[finite], atol=1e-6)
    assert torch.allclose(log_q_coord.exp().sum(), torch.tensor(1.0))


@pytest.mark.parametrize("name", ["mixed", "bits"])
def test_sample_move_draws_from_the_softmax(name):
    torch.manual_seed(0)
    layout = make_layout(LAYOUTS[name])
    num_chains, d, m = 40000, layout.num_coords, layout.width
    codes = Target(layout).states()[3:4].expand(num_chains, -1)
    grad = torch.randn(1, d, layout.grad_width).expand(num_chains, -1, -1)
    logits = proposal_logits(layout.gains(codes, grad), 2.0)
    move = sample_move(*coordinate_log_probs(logits), num_flips=1)
    assert move.distinct.all()
    flat = move.draws[:, 0] * m + move.candidate[:, 0]
    freq = torch.bincount(flat, minlength=d * m).float() / num_chains
    probs = torch.softmax(logits[0].reshape(-1), -1)
    se = (probs * (1 - probs) / num_chains).sqrt().clamp(min=1e-12)
    assert ((freq - probs).abs() / se).max() < 4.5
    assert (freq[probs == 0] == 0).all()


def test_inverse_cdf_draws_follow_the_probabilities():
    torch.manual_seed(0)
    probs = torch.tensor([0.5, 0.0, 0.2, 0.3, 0.0])
    draws = inverse_cdf_draws(probs.log().expand(20000, -1), num_draws=3)
    assert draws.shape == (20000, 3)
    freq = torch.bincount(draws.reshape(-1), minlength=5).float() / draws.numel()
    se = (probs * (1 - probs) / draws.numel()).sqrt().clamp(min=1e-12)
    assert ((freq - probs).abs() / se).max() < 4.5
    assert (freq[probs == 0] == 0).all()
    # a uniform number at the very top of the range stays on a possible entry
    last = inverse_cdf_draws(torch.tensor([[0.0, -float("inf")]]), num_draws=1000)
    assert (last == 0).all()


def test_repeated_draws_of_a_coordinate_move_it_once():
    torch.manual_seed(0)
    logits = torch.zeros(500, 2, 3)  # two coordinates: repeats are frequent
    move = sample_move(*coordinate_log_probs(logits), num_flips=4)
    for draws, cand, distinct in zip(*move[:3]):
        for n in range(4):
            first = int((draws == draws[n]).nonzero()[0])
            assert bool(distinct[n]) == (first == n) and cand[n] == cand[first]


def test_move_log_prob_of_a_multi_flip_move():
    layout = make_layout(LAYOUTS["mixed"])
    codes = torch.tensor([[0, 1, 2, 1, 3]])
    logits = proposal_logits(layout.gains(codes, torch.randn(1, 5, 3)), 2.0)
    log_q_coord, log_q_cand = coordinate_log_probs(logits)
    move = GWGMove(  # coordinate 2 drawn twice, moved once
        torch.tensor([[2, 4, 2]]), torch.tensor([[1, 0, 1]]), torch.tensor([[True, True, False]])
    )
    expected = 2 * log_q_coord[0, 2] + log_q_coord[0, 4] + log_q_cand[0, 2, 1] + log_q_cand[0, 4, 0]
    assert torch.allclose(move_log_prob(log_q_coord, log_q_cand, move), expected.reshape(1))


def reference_logits(gains, balancing=None):
    """Proposal logits log g(e^d) computed directly in float64 (``None``: d / 2)."""
    t = gains.double().exp()
    g = {
        None: t.sqrt(),
        "sqrt": t.sqrt(),
        "barker": t / (1 + t),
        "min": t.clamp(max=1.0),
        "max": t.clamp(min=1.0),
    }[balancing]
    return torch.where(torch.isfinite(gains), g.log(), -INF)


def true_log_prob(logits, move, uniform_weight=0.0, replacement=True):
    """Probability of ``move`` computed from the joint softmax mixed with the uniform
    distribution over valid moves, independently of the library: coordinates drawn from
    the marginal (with replacement, or one after the other among those not drawn yet),
    each distinct one's candidate from the conditional."""
    flat = logits.flatten(1)
    valid = torch.isfinite(flat).double()
    uniform = valid / valid.sum(-1, keepdim=True)
    joint = (1 - uniform_weight) * torch.softmax(flat.double(), -1) + uniform_weight * uniform
    joint = joint.reshape(logits.shape)
    marginal = joint.sum(-1)
    picked = marginal.gather(1, move.draws)
    if replacement:
        log_p = picked.log().sum(-1)
    else:  # q(i_n) / (1 - q(i_1) - ... - q(i_{n-1}))
        before = torch.cat([torch.zeros_like(picked[:, :1]), picked.cumsum(-1)[:, :-1]], -1)
        log_p = (picked / (1 - before)).log().sum(-1)
    cond = joint.gather(1, move.draws.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
    cond = cond.gather(-1, move.candidate.unsqueeze(-1)).squeeze(-1) / marginal.gather(
        1, move.draws
    )
    return log_p + torch.where(move.distinct, cond.log(), 0.0).sum(-1)


def _moves(layout, num_flips, num_states, replacement=True):
    """Every (draw sequence, candidates of its distinct coordinates) as a GWGMove; only
    sequences of distinct coordinates without replacement."""
    for seq in itertools.product(range(layout.num_coords), repeat=num_flips):
        if not replacement and len(set(seq)) < num_flips:
            continue
        firsts = [seq.index(i) for i in seq]
        distinct = torch.tensor([f == n for n, f in enumerate(firsts)])
        for cands in itertools.product(range(layout.width), repeat=int(distinct.sum())):
            per_first = dict(zip([n for n in range(num_flips) if distinct[n]], cands))
            candidate = torch.tensor([per_first[f] for f in firsts])
            yield GWGMove(
                torch.tensor(seq).expand(num_states, -1),
                candidate.expand(num_states, -1),
                distinct.expand(num_states, -1),
            )


def _check_masked_draw_changes_nothing(states, move, proposal, ok, layout, replacement):
    """The move with one more draw, inactive (a run-time number of flips below the
    number drawn), proposes the same state with the same probability both ways."""
    padded = GWGMove(
        torch.cat([move.draws, move.draws[:, :1]], 1),
        torch.cat([move.candidate, move.candidate[:, :1]], 1),
        torch.cat([move.distinct, torch.zeros_like(move.distinct[:, :1])], 1),
        torch.cat([torch.ones_like(move.distinct), torch.zeros_like(move.distinct[:, :1])], 1),
    )
    proposal = tuple(t[ok] for t in proposal)
    assert torch.allclose(
        move_log_prob(*proposal, padded, replacement), move_log_prob(*proposal, move, replacement)
    )
    new, reverse = apply_move(states, move, layout)
    new_padded, reverse_padded = apply_move(states, padded, layout)
    assert torch.equal(new, new_padded)
    assert torch.equal(reverse_padded.candidate[:, :-1], reverse.candidate)


def check_detailed_balance(layout, num_flips, uniform_weight, balancing=None, replacement=True):
    """p(x) q(move|x) a(x->x') = p(x') q(reverse|x') a(x'->x) for every state and move.

    q is computed independently of the library (``reference_logits``,
    ``true_log_prob``); the acceptance probability ``a`` uses the library's
    ``gwg_proposal`` and ``move_log_prob``. The target puts -inf above ``FINITE_CAP``
    on unbounded coordinates, so moves out of the finite space are rejected and balance
    holds on it. Returns the number of (state, move) pairs checked.
    """
    target = Target(layout)
    states = target.states()
    f, grad = target.value_and_grad(states)

    def library(codes, grad):
        return gwg_proposal(codes, grad, layout, uniform_weight=uniform_weight, balancing=balancing)

    logits = reference_logits(layout.gains(states, grad), balancing)
    proposal = library(states, grad)
    checked = 0
    for move in _moves(layout, num_flips, len(states), replacement):
        true_fwd = true_log_prob(logits, move, uniform_weight, replacement)
        ok = torch.isfinite(true_fwd)
        if not ok.any():
            continue
        log_fwd = move_log_prob(*proposal, move, replacement)[ok]
        assert torch.allclose(log_fwd.double(), true_fwd[ok], atol=1e-4)
        move = GWGMove(*(t[ok] for t in move[:3]))
        new, reverse = apply_move(states[ok], move, layout)
        _check_masked_draw_changes_nothing(states[ok], move, proposal, ok, layout, replacement)
        f_new, grad_new = target.value_and_grad(new)
        logits_new = reference_logits(layout.gains(new, grad_new), balancing)
        true_rev = true_log_prob(logits_new, reverse, uniform_weight, replacement)
        log_rev = move_log_prob(*library(new, grad_new), reverse, replacement)
        log_ratio = f_new - f[ok] + log_rev - log_fwd
        forward = f[ok] + true_fwd[ok] + accept_probability(log_ratio).log()
        backward = f_new + true_rev + accept_probability(-log_ratio).log()
        both = torch.isfinite(forward) | torch.isfinite(backward)
        assert torch.allclose(forward[both], backward[both], atol=1e-4)
        checked += int(both.sum())
    return checked


@pytest.mark.parametrize("uniform_weight", [0.0, 0.3])
@pytest.mark.parametrize("num_flips", [1, 2])
@pytest.mark.parametrize("name", GWG_LAYOUTS)
def test_detailed_balance_of_every_move(name, num_flips, uniform_weight):
    assert check_detailed_balance(gwg_layout(name), num_flips, uniform_weight) > 20


#: GWG's options other than the default (balancing "sqrt", with replacement)
VARIANTS = {
    "barker": dict(balancing="barker"),
    "min": dict(balancing="min"),
    "max": dict(balancing="max"),
    "without-replacement": dict(replacement=False),
    "without-replacement-barker": dict(replacement=False, balancing="barker"),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("num_flips", [1, 2])
@pytest.mark.parametrize("name", GWG_LAYOUTS)
def test_detailed_balance_of_every_variant(name, num_flips, variant):
    assert check_detailed_balance(gwg_layout(name), num_flips, 0.3, **VARIANTS[variant]) > 20


def test_detailed_balance_check_fails_for_a_move_scored_with_replacement(monkeypatch):
    # scoring a sequence of distinct coordinates without renormalising (as if drawn with
    # replacement) breaks the MH ratio; the check must notice
    monkeypatch.setattr(
        gwg_math,
        "sequential_log_probs",
        lambda log_probs, draws, active=None: log_probs.gather(1, draws),
    )
    with pytest.raises(AssertionError):
        check_detailed_balance(gwg_layout("mixed"), 2, 0.3, replacement=False)


def test_defensive_mixture_keeps_every_valid_move_possible():
    # a gradient so large that the softmax alone gives every other move probability 0
    logits = torch.tensor([[[1e4, -INF], [-1e4, 3.0], [0.0, -1e4]]])
    for weight in (0.05, 0.5):
        log_q = defensive_mixture(logits, weight)
        probs = log_q.exp()
        valid = torch.isfinite(logits)
        assert torch.allclose(probs.sum(), torch.tensor(1.0))
        assert (probs[valid] >= weight / valid.sum() - 1e-7).all()
        assert (log_q[~valid] == -INF).all()
    assert torch.allclose(
        defensive_mixture(logits, 0.0),
        torch.log_softmax(logits.flatten(1), -1).reshape(logits.shape),
    )


def test_metropolis_hastings_accepts_at_the_right_rate():
    torch.manual_seed(0)
    log_ratio = torch.tensor([0.5, -1.0, -3.0, float("nan"), -INF, INF]).repeat(20000, 1)
    rate = metropolis_hastings(log_ratio).float().mean(0)
    expected = accept_probability(log_ratio[0])
    assert torch.allclose(expected, torch.tensor([1.0, math.exp(-1), math.exp(-3), 0, 0, 1]))
    assert torch.allclose(rate, expected, atol=0.012)
    assert rate[3] == 0 and rate[4] == 0 and rate[5] == 1


def test_select_broadcasts_over_trailing_dimensions():
    accept = torch.tensor([True, False])
    new, old = torch.ones(2, 3, 2), torch.zeros(2, 3, 2)
    out = select(accept, new, old)
    assert out[0].eq(1).all() and out[1].eq(0).all()


@pytest.mark.parametrize("num_flips", [1, 3])
@pytest.mark.parametrize("name", GWG_LAYOUTS)
def test_gwg_step_carries_a_consistent_cache(name, num_flips):
    torch.manual_seed(1)
    layout = gwg_layout(name)
    target = Target(layout)
    state = gwg_init(target.states()[:1].expand(8, -1), target.value_and_grad, layout)
    for _ in range(20):
        state, info = gwg_step(state, target.value_and_grad, layout, 2.0, num_flips)
        f, grad = target.value_and_grad(state.codes)
        assert torch.allclose(state.log_joint, f)
        log_q_coord, log_q_cand = gwg_proposal(state.codes, grad, layout)
        assert torch.allclose(state.log_q_coord, log_q_coord)
        finite = torch.isfinite(log_q_cand)
        assert torch.equal(finite, torch.isfinite(state.log_q_cand))
        assert torch.allclose(state.log_q_cand[finite], log_q_cand[finite])
        assert (info.num_changed >= 1).all() and (info.num_changed <= num_flips).all()
        assert ((info.accept_prob >= 0) & (info.accept_prob <= 1)).all()


# ------------------------------------------------------------------ balancing functions


@pytest.mark.parametrize("balancing", sorted(BALANCING))
def test_balancing_functions_are_locally_balanced_and_stable(balancing):
    s = torch.cat([torch.linspace(-30, 30, 121), torch.tensor([-1e4, -200.0, 200.0, 1e4])])
    s = s.double()
    log_g = balanced_logits(s, balancing)
    # g(t) = t g(1/t), in log space
    assert torch.allclose(log_g, s + balanced_logits(-s, balancing), atol=1e-9)
    assert torch.isfinite(log_g).all()  # no overflow at |log t| = 1e4
    moderate = s.abs() <= 30
    expected = reference_logits(s[moderate], None if balancing == "sqrt" else balancing)
    assert torch.allclose(log_g[moderate], expected, atol=1e-9)
    invalid = balanced_logits(torch.tensor([-INF, 0.0]), balancing)
    assert invalid[0] == -INF and torch.isfinite(invalid[1])


def test_sqrt_balancing_is_temperature_two():
    layout = make_layout(LAYOUTS["mixed"])
    gains = layout.gains(torch.tensor([[0, 1, 2, 1, 3]]), torch.randn(1, 5, 3))
    assert torch.equal(proposal_logits(gains, 2.0), proposal_logits(gains, balancing="sqrt"))
    assert torch.equal(proposal_logits(gains, 0.5), gains / 0.5)


def test_balancing_and_temperature_resolve_to_one_proposal():
    assert check_balancing("GWG", None, None) == ("sqrt", 2.0)
    assert check_balancing("GWG", None, 2) == ("sqrt", 2.0)
    assert check_balancing("GWG", "sqrt", 2.0) == ("sqrt", 2.0)
    assert check_balancing("GWG", None, 1.0) == (None, 1.0)
    assert check_balancing("GWG", "barker", None) == ("barker", None)
    with pytest.raises(ValueError, match=r"GWG\(balancing='barker', temperature=2.0\).*one of"):
        check_balancing("GWG", "barker", 2.0)
    with pytest.raises(ValueError, match="balancing='sqrt', temperature=1.0"):
        check_balancing("GWG", "sqrt", 1.0)
    with pytest.raises(ValueError, match="balancing must be one of 'sqrt', 'barker'"):
        check_balancing("GWG", "cubic", None)
    with pytest.raises(ValueError, match="temperature"):
        check_balancing("GWG", None, -1.0)


# ------------------------------------------------------------------ draws without replacement


def test_distinct_draws_follow_sequential_draws_without_replacement():
    torch.manual_seed(0)
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    num = 60000
    log_probs = probs.log().expand(num, -1)
    draws = distinct_draws(log_probs, 2)
    assert (draws[:, 0] != draws[:, 1]).all() and (draws < 4).all()
    pairs = [(i, j) for i in range(4) for j in range(4) if i != j]
    index = torch.tensor(pairs)
    exact = probs[index[:, 0]] * probs[index[:, 1]] / (1 - probs[index[:, 0]])
    library = sequential_log_probs(probs.log().expand(len(pairs), -1), index).sum(-1).exp()
    assert torch.allclose(library, exact, atol=1e-6)
    assert torch.allclose(exact.sum(), torch.tensor(1.0))
    freq = (draws.unsqueeze(1) == index).all(-1).float().mean(0)
    se = (exact * (1 - exact) / num).sqrt()
    assert ((freq - exact).abs() / se).max() < 4.5


def test_sequential_log_probs_keep_their_precision_when_one_draw_takes_nearly_all():
    probs = torch.tensor([[1 - 3e-9, 1e-9, 2e-9]], dtype=torch.float64)
    log_q = sequential_log_probs(probs.log(), torch.tensor([[0, 2, 1]]))
    # the second draw picks 2e-9 out of the 3e-9 left: probability 2/3, then 1
    assert torch.allclose(log_q[0, 1:].exp(), torch.tensor([2 / 3, 1.0], dtype=torch.float64))
    # inactive draws (repeating the first) leave the active ones as they are
    masked = sequential_log_probs(
        probs.log(), torch.tensor([[0, 2, 0]]), torch.tensor([[True, True, False]])
    )
    assert torch.allclose(masked[0, :2], log_q[0, :2])


def test_distinct_counts_are_n_or_one_fewer_with_even_odds():
    torch.manual_seed(0)
    counts = distinct_counts(torch.tensor([1, 2, 5]).repeat(20000))
    counts = counts.reshape(20000, 3)
    assert (counts[:, 0] == 1).all()
    for column, n in ((1, 2), (2, 5)):
        assert ((counts[:, column] == n) | (counts[:, column] == n - 1)).all()
        assert abs(float((counts[:, column] == n).float().mean()) - 0.5) < 0.015


@pytest.mark.parametrize("name", ["mixed", "bits"])
def test_sample_move_without_replacement_moves_every_active_draw(name):
    torch.manual_seed(0)
    layout = make_layout(LAYOUTS[name])
    codes = Target(layout).states()[3:4].expand(500, -1)
    logits = proposal_logits(
        layout.gains(codes, torch.randn(500, layout.num_coords, layout.grad_width))
    )
    proposal = coordinate_log_probs(logits)
    active = torch.arange(3) < torch.randint(1, 4, (500, 1))
    move = sample_move(*proposal, 3, active, replacement=False)
    assert torch.equal(move.distinct, active)
    new, _ = apply_move(codes, move, layout)
    assert torch.equal((new != codes).sum(-1), active.sum(-1))


@pytest.mark.parametrize("chunk_size", [1, 5, 6, 4096])
def test_changed_states_are_evaluated_in_whole_sets_of_chains(chunk_size):
    # a density given values per chain reads state n of a batch as chain n % C's: every
    # batch is whole rows of the chains in chain order, and the result is the same
    num_chains, num_rows = 3, 4
    codes = (torch.arange(num_chains) * 10).unsqueeze(-1).expand(num_chains, 2)
    coords = torch.zeros(num_chains, num_rows, 1, dtype=torch.long)
    values = torch.arange(num_rows).expand(num_chains, num_rows).unsqueeze(-1) + 100
    batches = []

    def log_joint(states):
        batches.append(states)
        return (states[:, 0] + 1000 * states[:, 1]).double()

    f = evaluate_changes(log_joint, codes, coords, values, chunk_size)
    for states in batches:
        assert states.shape[0] % num_chains == 0
        assert torch.equal(states[:, 1] // 10, torch.arange(states.shape[0]) % num_chains)
    expected = values[..., 0] + 1000 * codes[:, 1:]
    assert torch.equal(f, expected.double())
