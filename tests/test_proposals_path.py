"""PAS and PAFS as pure functions: the probability of a path drawn without replacement,
and detailed balance of the whole transition kernel, enumerated on tiny models (every
path of PAS, with the proposal recomputed at each of its states; every ordered path of
PAFS)."""

import itertools
import math

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyro_gwg
import pyro_gwg.proposals.path as path_math
from pyro_gwg.proposals.gwg import GWGMove, apply_move, gwg_proposal, move_log_prob
from pyro_gwg.proposals.path import (
    build_pafs,
    build_pas,
    path_log_prob,
    without_replacement_log_prob,
)

TEMPERATURE, WEIGHT = 2.0, 0.05


def bits_and_one_hot(y):
    """Two bits and a one-hot category: 12 states."""
    b = pyro.sample("b", dist.Bernoulli(0.4).expand([2]).to_event(1))
    z = pyro.sample("z", dist.OneHotCategorical(logits=torch.tensor([0.2, -0.3, 0.5])))
    mean = b @ torch.tensor([1.5, -0.8]) + z @ torch.tensor([-1.0, 0.5, 2.0])
    pyro.sample("y", dist.Normal(mean, 0.8), obs=y)


def three_bits(y):
    """Three coupled bits (the all-binary layout): 8 states."""
    b = pyro.sample("b", dist.Bernoulli(0.4).expand([3]).to_event(1))
    pyro.factor("pair", 0.8 * b[..., 0] * b[..., 1] - 0.6 * b[..., 1] * b[..., 2])
    pyro.sample("y", dist.Normal(b @ torch.tensor([1.5, -0.8, 0.6]), 0.8), obs=y)


def bit_category_count(y):
    """A bit, a one-hot category and a Binomial(2) count: 18 states."""
    b = pyro.sample("b", dist.Bernoulli(0.4))
    z = pyro.sample("z", dist.OneHotCategorical(logits=torch.tensor([0.2, -0.3, 0.5])))
    k = pyro.sample("k", dist.Binomial(2, 0.5))
    mean = 1.5 * b + z @ torch.tensor([-1.0, 0.5, 2.0]) + 0.7 * k
    pyro.sample("y", dist.Normal(mean, 0.8), obs=y)


def _states(energy):
    sizes = energy.layout.num_values().long().tolist()
    return torch.tensor(list(itertools.product(*(range(n) for n in sizes))))


def _index(states, codes):
    """Row of ``states`` equal to each row of ``codes``."""
    return (codes.unsqueeze(1) == states).all(-1).long().argmax(1)


def _assert_detailed_balance(log_joint, transitions):
    pi = (log_joint - log_joint.logsumexp(0)).exp().double()
    assert torch.allclose(transitions.sum(1), torch.ones_like(pi), atol=1e-9)
    flow = pi.unsqueeze(1) * transitions
    assert torch.allclose(flow, flow.T, atol=1e-9), float((flow - flow.T).abs().max())


# ------------------------------------------------------------ without replacement


def test_ordered_paths_without_replacement_sum_to_one():
    torch.manual_seed(0)
    log_q = torch.randn(1, 4).log_softmax(-1)
    for length in (1, 2, 4):
        total = 0.0
        for seq in itertools.permutations(range(4), length):
            draws = torch.tensor([seq])
            active = torch.ones_like(draws, dtype=torch.bool)
            log_p = log_q.gather(1, draws).sum(-1) + without_replacement_log_prob(
                log_q, draws, active
            )
            total += float(log_p.exp())
        assert total == pytest.approx(1.0, abs=1e-6)


def test_the_reverse_normaliser_is_that_of_the_reversed_sequence():
    torch.manual_seed(1)
    log_q = torch.randn(1, 5).log_softmax(-1)
    draws = torch.tensor([[3, 0, 4]])
    active = torch.ones_like(draws, dtype=torch.bool)
    assert torch.allclose(
        without_replacement_log_prob(log_q, draws, active, reverse=True),
        without_replacement_log_prob(log_q, draws.flip(1), active),
    )
    # inactive draws count for nothing
    masked = torch.tensor([[True, True, False]])
    assert torch.allclose(
        without_replacement_log_prob(log_q, draws, masked),
        without_replacement_log_prob(log_q, draws[:, :2], active[:, :2]),
    )


# ------------------------------------------------ detailed balance, kernels enumerated


def _pafs_transitions(energy, length, normalise_reverse_at_start=False):
    """The PAFS transition matrix: every ordered path of ``length`` distinct coordinates
    and every choice of candidates, with its probability and acceptance."""
    layout = energy.layout
    states = _states(energy)
    log_joint, grad = energy.value_and_grad(states)
    log_q_coord, log_q_cand = gwg_proposal(states, grad, layout, TEMPERATURE, WEIGHT)
    width = log_q_cand.shape[-1]
    paths = [
        (seq, cands)
        for seq in itertools.permutations(range(layout.num_coords), length)
        for cands in itertools.product(range(width), repeat=length)
    ]
    draws = torch.tensor([p[0] for p in paths])
    candidate = torch.tensor([p[1] for p in paths])
    active = torch.ones_like(draws, dtype=torch.bool)
    move = GWGMove(draws, candidate, active, active)
    transitions = torch.zeros(len(states), len(states), dtype=torch.float64)
    for a in range(len(states)):
        forward = move_log_prob(
            log_q_coord[a].expand(len(paths), -1), log_q_cand[a].expand(len(paths), -1, -1), move
        ) + without_replacement_log_prob(log_q_coord[a].expand(len(paths), -1), draws, active)
        keep = torch.isfinite(forward)  # the valid moves
        possible = GWGMove(*(field[keep] for field in move))
        proposed, reverse = apply_move(states[a].expand(int(keep.sum()), -1), possible, layout)
        b = _index(states, proposed)
        backward = move_log_prob(log_q_coord[b], log_q_cand[b], reverse)
        at = log_q_coord[a].expand_as(log_q_coord[b]) if normalise_reverse_at_start else None
        backward = backward + without_replacement_log_prob(
            log_q_coord[b] if at is None else at, possible.draws, possible.active, reverse=True
        )
        ratio = (log_joint[b] - log_joint[a] + backward - forward[keep]).clamp(max=0).exp()
        transitions[a].index_add_(0, b, (forward[keep].exp() * ratio).double())
        transitions[a, a] += 1 - transitions[a].sum()
    return log_joint, transitions


@pytest.mark.parametrize("length", [1, 2, 3])
def test_pafs_is_reversible_for_every_path_length(length):
    energy = pyro_gwg.ModelDensity(bit_category_count, (torch.tensor(2.0),))
    _assert_detailed_balance(*_pafs_transitions(energy, length))


def test_the_pafs_check_fails_with_the_reverse_path_normalised_at_the_start():
    energy = pyro_gwg.ModelDensity(bit_category_count, (torch.tensor(2.0),))
    with pytest.raises(AssertionError):
        _assert_detailed_balance(*_pafs_transitions(energy, 2, normalise_reverse_at_start=True))


def _single_moves(energy, codes, grad):
    """Every single GWG move from ``codes [D]`` under the proposal built on ``grad [D, W]``:
    ``(log q(i, v | codes; grad), moved state, move back)`` for each move of positive
    probability."""
    log_q_coord, log_q_cand = gwg_proposal(
        codes[None], grad[None], energy.layout, TEMPERATURE, WEIGHT
    )
    out = []
    for i, c in itertools.product(range(log_q_cand.shape[1]), range(log_q_cand.shape[2])):
        log_q = float(log_q_coord[0, i] + log_q_cand[0, i, c])
        if log_q == -math.inf:
            continue
        one = torch.ones(1, 1, dtype=torch.bool)
        move = GWGMove(torch.tensor([[i]]), torch.tensor([[c]]), one)
        moved, back = apply_move(codes[None], move, energy.layout)
        out.append((log_q, moved[0], back))
    return out


def _pas_transitions(energy, length, reverse_at_start=False):
    """The PAS transition matrix: every path of ``length`` single moves, each drawn from
    the proposal at the state it leaves built on the start's gradient; the reverse path
    scored move by move under the gradient at the end (``reverse_at_start``: wrongly,
    under the start's)."""
    layout = energy.layout
    states = _states(energy)
    log_joint, grad = energy.value_and_grad(states)
    transitions = torch.zeros(len(states), len(states), dtype=torch.float64)

    def paths(codes, g, remaining):
        """``(log q(path), [(state left, move back)...], end)`` of every path."""
        if remaining == 0:
            yield 0.0, [], codes
            return
        for log_q, moved, back in _single_moves(energy, codes, g):
            for rest, steps, end in paths(moved, g, remaining - 1):
                yield log_q + rest, [(moved, back)] + steps, end

    for a in range(len(states)):
        for log_fwd, steps, end in paths(states[a], grad[a], length):
            b = int(_index(states, end[None]))
            back_grad = grad[a] if reverse_at_start else grad[b]
            log_bwd = 0.0
            for moved, back in steps:  # the move from z_l back to z_{l-1}
                log_q_coord, log_q_cand = gwg_proposal(
                    moved[None], back_grad[None], layout, TEMPERATURE, WEIGHT
                )
                log_bwd += float(move_log_prob(log_q_coord, log_q_cand, back))
            log_ratio = float(log_joint[b] - log_joint[a]) + log_bwd - log_fwd
            transitions[a, b] += math.exp(log_fwd) * min(1.0, math.exp(log_ratio))
    transitions += torch.diag(1 - transitions.sum(1))
    return log_joint, transitions


def test_a_path_scored_in_batches_is_scored_as_in_one(monkeypatch):
    torch.manual_seed(0)
    energy = pyro_gwg.ModelDensity(bit_category_count, (torch.tensor(1.2),))
    states = _states(energy)[torch.randint(0, 18, (4, 5))]  # [C, L, D]
    _, grad = energy.value_and_grad(_states(energy)[:4])
    moves = GWGMove(torch.randint(0, 3, (4, 5)), torch.zeros(4, 5, dtype=torch.long), None)
    active = torch.rand(4, 5) < 0.8
    args = (states, moves, active, grad, energy.layout, TEMPERATURE, WEIGHT)
    whole = path_log_prob(*args)
    monkeypatch.setattr(path_math, "_PATH_BATCH_ELEMENTS", 1)  # one move per batch
    assert torch.equal(path_log_prob(*args), whole)


@pytest.mark.parametrize("model", [three_bits, bits_and_one_hot, bit_category_count])
@pytest.mark.parametrize("length", [1, 2, 3])
def test_pas_is_reversible_for_every_path_length(length, model):
    energy = pyro_gwg.ModelDensity(model, (torch.tensor(1.2),))
    _assert_detailed_balance(*_pas_transitions(energy, length))


def test_the_pas_check_fails_with_the_reverse_path_under_the_start_gradient():
    energy = pyro_gwg.ModelDensity(bit_category_count, (torch.tensor(1.2),))
    with pytest.raises(AssertionError):
        _assert_detailed_balance(*_pas_transitions(energy, 2, reverse_at_start=True))


def _one_step_frequencies(build, energy, start, num_chains=20000, **settings):
    init, step = build(energy, TEMPERATURE, uniform_weight=WEIGHT, **settings)
    state, _ = step(init(start.expand(num_chains, -1).clone()))
    states = _states(energy)
    return torch.bincount(_index(states, state.codes), minlength=len(states)).double() / num_chains


@pytest.mark.parametrize(
    "build, model, transitions",
    [
        (build_pas, three_bits, _pas_transitions),
        (build_pas, bit_category_count, _pas_transitions),
        (build_pafs, bit_category_count, _pafs_transitions),
    ],
    ids=["PAS-bits", "PAS", "PAFS"],
)
def test_one_step_of_the_sampler_follows_the_enumerated_kernel(build, model, transitions):
    # the sampler draws what the enumeration says, with a run-time path length too
    pyro.set_rng_seed(0)
    energy = pyro_gwg.ModelDensity(model, (torch.tensor(1.2),))
    # a step's path has length 2 or 1, with probability 1/2 each
    exact = (transitions(energy, 2)[1] + transitions(energy, 1)[1]) / 2
    states = _states(energy)
    for a in (0, 7):
        for settings in ({"num_flips": 2}, {"num_flips": 2, "max_flips": 3}):
            freq = _one_step_frequencies(build, energy, states[a : a + 1], **settings)
            se = (exact[a] * (1 - exact[a]) / 20000).sqrt().clamp(min=1e-3)
            assert float(((freq - exact[a]) / se).abs().max()) < 5
