"""The pure proposal functions: gains, sampling, log q, MH and detailed balance."""

import itertools
import math

import pytest
import torch

from pyro_gwg.proposals import (
    CoordinateLayout,
    accept_probability,
    coordinate_log_probs,
    gwg_init,
    gwg_step,
    metropolis_hastings,
    move_log_prob,
    proposal_logits,
    sample_move,
    select,
)

INF = float("inf")


def mixed_layout():
    """Two bits, a 3-category coordinate, an ordinal in [0, 2] and an unbounded one."""
    return CoordinateLayout(
        is_scalar=torch.tensor([True, True, False, True, True]),
        lower=torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0]),
        upper=torch.tensor([1.0, 1.0, 2.0, 2.0, INF]),
        num_categories=torch.tensor([0, 0, 3, 0, 0]),
    )


def embed(layout, codes):
    """Relaxed values: scalars as floats, the categorical as one-hot (width 3)."""
    parts = []
    for i in range(layout.num_coords):
        if layout.is_scalar[i]:
            parts.append(codes[..., i : i + 1].float())
        else:
            parts.append(torch.nn.functional.one_hot(codes[..., i], 3).float())
    return torch.cat(parts, -1)


WEIGHTS = torch.tensor([0.7, -1.2, 0.4, -0.3, 0.9, 0.5, -0.8])


def log_density(layout, codes):
    """A non-linear log density on the mixed layout (finite support for coordinate 4)."""
    e = embed(layout, codes)
    return (
        e @ WEIGHTS
        + 0.8 * e[..., 0] * e[..., 1]
        - 0.6 * e[..., 5] * e[..., 2]
        + 0.5 * e[..., 6] * e[..., 3]
        - 0.4 * e[..., 6] ** 2
    )


def value_and_grad(layout, codes):
    e = embed(layout, codes).requires_grad_(True)
    # recompute from the embedding so the gradient is taken w.r.t. relaxed values
    f = (
        e @ WEIGHTS
        + 0.8 * e[..., 0] * e[..., 1]
        - 0.6 * e[..., 5] * e[..., 2]
        + 0.5 * e[..., 6] * e[..., 3]
        - 0.4 * e[..., 6] ** 2
    )
    (g,) = torch.autograd.grad(f.sum(), e)
    packed = torch.zeros(codes.shape + (layout.width,))
    packed[..., 0, 0], packed[..., 1, 0] = g[..., 0], g[..., 1]
    packed[..., 2, :3] = g[..., 2:5]
    packed[..., 3, 0], packed[..., 4, 0] = g[..., 5], g[..., 6]
    return f.detach(), packed


def test_gains_match_the_papers_formulas():
    layout = mixed_layout()
    codes = torch.tensor([[0, 1, 2, 0, 3]])
    grad = torch.zeros(1, 5, 3)
    grad[0, :, 0] = torch.tensor([0.5, -2.0, 0.0, 1.5, -0.7])
    grad[0, 2] = torch.tensor([0.3, -0.1, 0.9])
    gains = layout.gains(codes, grad)
    # bits: the one valid move is a flip, gain -(2x - 1) g
    assert gains[0, 0].tolist() == [-INF, 0.5, -INF]
    assert gains[0, 1].tolist() == [2.0, -INF, -INF]
    # categorical: g_ij - g_i,x_i, current category excluded
    assert torch.allclose(gains[0, 2], torch.tensor([0.3 - 0.9, -0.1 - 0.9, -INF]))
    # ordinal at its lower bound can only go up; unbounded one goes both ways
    assert gains[0, 3, :2].tolist() == [-INF, 1.5] and gains[0, 3, 2] == -INF
    assert torch.allclose(gains[0, 4, :2], torch.tensor([0.7, -0.7]))


def test_gains_are_exact_for_a_linear_log_density():
    layout = mixed_layout()
    codes = torch.tensor([[1, 0, 1, 1, 2]])
    e = embed(layout, codes)
    grad = torch.zeros(1, 5, 3)
    grad[0, 0, 0], grad[0, 1, 0], grad[0, 3, 0], grad[0, 4, 0] = WEIGHTS[[0, 1, 5, 6]]
    grad[0, 2] = WEIGHTS[2:5]
    gains = layout.gains(codes, grad)
    for i, v in itertools.product(range(5), range(3)):
        if torch.isinf(gains[0, i, v]):
            continue
        moved = codes.clone()
        moved[0, i] = layout.move(codes, torch.full_like(codes, v))[0, i]
        exact = (embed(layout, moved) - e) @ WEIGHTS
        assert torch.allclose(gains[0, i, v], exact), (i, v)


def test_move_and_reverse_are_involutions():
    layout = mixed_layout()
    codes = torch.tensor([[0, 1, 2, 1, 5], [1, 0, 0, 2, 0]])
    gains = layout.gains(codes, torch.zeros(2, 5, 3))
    for v in range(3):
        cand = torch.full_like(codes, v)
        valid = torch.isfinite(gains.gather(-1, cand.unsqueeze(-1)).squeeze(-1))
        moved = torch.where(valid, layout.move(codes, cand), codes)
        back = layout.move(moved, layout.reverse(codes, cand))
        assert torch.equal(torch.where(valid, back, codes), codes)


def test_coordinate_log_probs_factorise_the_joint_softmax():
    layout = mixed_layout()
    codes = torch.tensor([[0, 1, 2, 0, 3]])
    logits = proposal_logits(layout.gains(codes, torch.randn(1, 5, 3)), 2.0)
    log_q_coord, log_q_cand = coordinate_log_probs(logits)
    joint = torch.log_softmax(logits.reshape(1, -1), -1).reshape(logits.shape)
    recombined = log_q_coord.unsqueeze(-1) + log_q_cand
    finite = torch.isfinite(joint)
    assert torch.allclose(recombined[finite], joint[finite], atol=1e-6)
    assert torch.allclose(log_q_coord.exp().sum(), torch.tensor(1.0))


def test_sample_move_draws_from_the_softmax():
    torch.manual_seed(0)
    layout = mixed_layout()
    num_chains = 40000
    codes = torch.tensor([[0, 1, 2, 1, 3]]).expand(num_chains, -1)
    grad = torch.randn(1, 5, 3).expand(num_chains, -1, -1)
    logits = proposal_logits(layout.gains(codes, grad), 2.0)
    draws, changed, cand = sample_move(logits, num_flips=1)
    assert torch.equal(changed.sum(-1), torch.ones(num_chains, dtype=torch.long))
    flat = draws[:, 0] * 3 + cand.gather(1, draws)[:, 0]
    freq = torch.bincount(flat, minlength=15).float() / num_chains
    probs = torch.softmax(logits[0].reshape(-1), -1)
    se = (probs * (1 - probs) / num_chains).sqrt().clamp(min=1e-12)
    assert ((freq - probs).abs() / se).max() < 4.5
    assert (freq[probs == 0] == 0).all()


def test_move_log_prob_of_a_multi_flip_move():
    layout = mixed_layout()
    codes = torch.tensor([[0, 1, 2, 1, 3]])
    logits = proposal_logits(layout.gains(codes, torch.randn(1, 5, 3)), 2.0)
    log_q_coord, log_q_cand = coordinate_log_probs(logits)
    draws = torch.tensor([[2, 4, 2]])  # coordinate 2 twice
    changed = torch.zeros(1, 5, dtype=torch.bool)
    changed[0, [2, 4]] = True
    cand = torch.tensor([[0, 0, 1, 0, 0]])
    expected = 2 * log_q_coord[0, 2] + log_q_coord[0, 4] + log_q_cand[0, 2, 1] + log_q_cand[0, 4, 0]
    assert torch.allclose(move_log_prob(logits, draws, changed, cand), expected.reshape(1))


def _all_states(layout):
    # coordinate 4 is unbounded: restrict the check's state space to a finite target
    sizes = [2, 2, 3, 3, 3]
    return torch.tensor(list(itertools.product(*[range(s) for s in sizes])))


@pytest.mark.parametrize("num_flips", [1, 2])
def test_detailed_balance_of_every_move(num_flips):
    """p(x) q(move|x) a(x->x') = p(x') q(reverse|x') a(x'->x) for every move.

    The target puts -inf on coordinate 4 > 2, so the unbounded coordinate's
    out-of-target moves are rejected and balance holds on the finite space.
    """
    layout = mixed_layout()

    def target(codes):
        f = log_density(layout, codes)
        return torch.where(codes[..., 4] <= 2, f, -INF)

    states = _all_states(layout)
    f, grad = value_and_grad(layout, states)
    logits = proposal_logits(layout.gains(states, grad), 2.0)
    checked = 0
    for seq in itertools.product(range(5), repeat=num_flips):
        draws = torch.tensor(seq).expand(len(states), -1)
        changed = torch.zeros(len(states), 5, dtype=torch.bool)
        changed[:, list(seq)] = True
        distinct = sorted(set(seq))
        for cands in itertools.product(range(3), repeat=len(distinct)):
            cand = torch.zeros(len(states), 5, dtype=torch.long)
            cand[:, distinct] = torch.tensor(cands)
            log_fwd = move_log_prob(logits, draws, changed, cand)
            ok = torch.isfinite(log_fwd)
            new = torch.where(changed, layout.move(states, cand), states)[ok]
            old = states[ok]
            f_new, grad_new = value_and_grad(layout, new)
            f_new = torch.where(new[..., 4] <= 2, f_new, -INF)
            logits_new = proposal_logits(layout.gains(new, grad_new), 2.0)
            log_rev = move_log_prob(
                logits_new, draws[ok], changed[ok], layout.reverse(old, cand[ok])
            )
            log_ratio = f_new - target(old) + log_rev - log_fwd[ok]
            forward = target(old) + log_fwd[ok] + accept_probability(log_ratio).log()
            backward = f_new + log_rev + accept_probability(-log_ratio).log()
            both = torch.isfinite(forward) | torch.isfinite(backward)
            assert torch.allclose(forward[both], backward[both], atol=1e-4)
            checked += int(both.sum())
    assert checked > 100


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
def test_gwg_step_carries_a_consistent_cache(num_flips):
    torch.manual_seed(1)
    layout = mixed_layout()
    vg = lambda c: value_and_grad(layout, c)  # noqa: E731
    state = gwg_init(torch.tensor([[0, 1, 2, 1, 1]] * 8), vg, layout)
    for _ in range(20):
        state, info = gwg_step(state, vg, layout, 2.0, num_flips)
        f, grad = vg(state.codes)
        assert torch.allclose(state.log_joint, f)
        assert torch.allclose(state.logits, proposal_logits(layout.gains(state.codes, grad)))
        assert (info.num_changed >= 1).all() and (info.num_changed <= num_flips).all()
        assert ((info.accept_prob >= 0) & (info.accept_prob <= 1)).all()
