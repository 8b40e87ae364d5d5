"""PAS and PAFS as pure functions: the walk of a revisited coordinate, the probability of
a path drawn without replacement, and detailed balance of the whole transition kernel,
enumerated on tiny models."""

import itertools
import math

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyro_gwg
from pyro_gwg.proposals.gwg import GWGMove, apply_move, gwg_proposal, move_log_prob
from pyro_gwg.proposals.layout import CandidateGrid
from pyro_gwg.proposals.path import (
    build_pafs,
    build_pas,
    pas_proposal,
    visit_log_probs,
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
    """Three coupled bits (the all-binary layout; PAS flips by the parity of the visits):
    8 states."""
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


# ---------------------------------------------------------------------------- the walk


def _explicit_visit_matrix(logits, weight):
    """One visit of a coordinate with value weights ``logits [K]``, built entry by
    entry: to every other value, proportionally to its weight, mixed with uniform."""
    size = logits.numel()
    matrix = torch.zeros(size, size, dtype=torch.float64)
    for u in range(size):
        others = [v for v in range(size) if v != u]
        weights = logits.double()[others].exp()
        matrix[u, others] = (1 - weight) * weights / weights.sum() + weight / len(others)
    return matrix


@pytest.mark.parametrize("weight", [0.0, 0.05])
def test_the_walk_of_a_revisited_coordinate_is_a_matrix_power(weight):
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 4)  # [C, N, V]
    start = torch.randint(0, 4, (2, 3))
    visits = torch.tensor([[0, 1, 2], [3, 5, 7]])
    log_probs = visit_log_probs(logits, start, visits, max_visits=7, uniform_weight=weight)
    assert log_probs.dtype == torch.float64
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(2, 3, dtype=torch.float64))
    for c, n in itertools.product(range(2), range(3)):
        power = torch.linalg.matrix_power(
            _explicit_visit_matrix(logits[c, n], weight), int(visits[c, n])
        )
        assert torch.allclose(log_probs[c, n].exp(), power[start[c, n]], atol=1e-12)
    # no visit: the value stays; one visit: GWG's candidate distribution at the start
    assert torch.equal(log_probs[0, 0].exp(), torch.eye(4, dtype=torch.float64)[start[0, 0]])


def test_a_bit_ends_flipped_iff_it_is_visited_an_odd_number_of_times():
    logits = torch.tensor([[[0.0, 3.0]] * 4])  # a strong preference changes nothing
    visits = torch.tensor([[1, 2, 3, 4]])
    start = torch.tensor([[0, 1, 1, 0]])
    end = visit_log_probs(logits, start, visits, 4, 0.05).exp()
    expected = torch.nn.functional.one_hot((start + visits) % 2, 2).double()
    assert torch.allclose(end, expected)


def test_categories_not_in_a_coordinate_are_never_reached():
    logits = torch.tensor([[[0.5, -0.2, -math.inf, -math.inf]]])  # K = 2 of width 4
    end = visit_log_probs(logits, torch.tensor([[1]]), torch.tensor([[3]]), 3, 0.05).exp()
    assert torch.allclose(end, torch.tensor([[[1.0, 0.0, 0.0, 0.0]]], dtype=torch.float64))


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


def _visit_matrices(value_logits, weight):
    """``[S, D, V, V]`` one-visit matrices of every coordinate at every state."""
    rows = [
        [
            _explicit_visit_matrix(value_logits[s, i][torch.isfinite(value_logits[s, i])], weight)
            for i in range(value_logits.shape[1])
        ]
        for s in range(value_logits.shape[0])
    ]
    width = value_logits.shape[-1]
    out = torch.zeros(*value_logits.shape[:2], width, width, dtype=torch.float64)
    for s, per_state in enumerate(rows):
        for i, matrix in enumerate(per_state):
            out[s, i, : matrix.shape[0], : matrix.shape[1]] = matrix
    return out


def _pas_transitions(energy, length, drop_walk_reverse=False):
    """The PAS transition matrix, from the counts of the path's coordinates
    (multinomial) and the matrix powers of each coordinate's walk, built entry by entry."""
    layout = energy.layout
    grid = CandidateGrid(layout)
    states = _states(energy)
    log_joint, grad = energy.value_and_grad(states)
    log_q_coord, value_logits = pas_proposal(states, grad, layout, grid, TEMPERATURE, WEIGHT)
    visits = _visit_matrices(value_logits, WEIGHT)
    num_coords = layout.num_coords
    counts = [
        n for n in itertools.product(range(length + 1), repeat=num_coords) if sum(n) == length
    ]
    transitions = torch.zeros(len(states), len(states), dtype=torch.float64)
    for a, b in itertools.product(range(len(states)), repeat=2):
        x, y = states[a], states[b]
        for n in counts:
            coef = math.factorial(length) / math.prod(math.factorial(k) for k in n)
            walk_x = walk_y = 1.0
            for i, k in enumerate(n):
                walk_x *= float(torch.linalg.matrix_power(visits[a, i], k)[x[i], y[i]])
                walk_y *= float(torch.linalg.matrix_power(visits[b, i], k)[y[i], x[i]])
            if walk_x == 0:
                continue
            n_t = torch.tensor(n, dtype=log_q_coord.dtype)
            log_fwd = (n_t * log_q_coord[a]).sum() + math.log(walk_x)
            log_bwd = (n_t * log_q_coord[b]).sum() + (0 if drop_walk_reverse else math.log(walk_y))
            ratio = min(1.0, math.exp(float(log_joint[b] - log_joint[a] + log_bwd - log_fwd)))
            transitions[a, b] += coef * math.exp(float(log_fwd)) * ratio
    transitions += torch.diag(1 - transitions.sum(1))
    return log_joint, transitions


@pytest.mark.parametrize("model", [three_bits, bits_and_one_hot])
@pytest.mark.parametrize("length", [1, 2, 3])
def test_pas_is_reversible_for_every_path_length(length, model):
    energy = pyro_gwg.ModelDensity(model, (torch.tensor(1.2),))
    _assert_detailed_balance(*_pas_transitions(energy, length))


def test_the_pas_check_fails_without_the_reverse_walk():
    energy = pyro_gwg.ModelDensity(bits_and_one_hot, (torch.tensor(1.2),))
    with pytest.raises(AssertionError):
        _assert_detailed_balance(*_pas_transitions(energy, 2, drop_walk_reverse=True))


def _one_step_frequencies(build, energy, start, num_chains=20000, **settings):
    init, step = build(energy, TEMPERATURE, uniform_weight=WEIGHT, **settings)
    state, _ = step(init(start.expand(num_chains, -1).clone()))
    states = _states(energy)
    return torch.bincount(_index(states, state.codes), minlength=len(states)).double() / num_chains


@pytest.mark.parametrize(
    "build, model, transitions",
    [
        (build_pas, three_bits, _pas_transitions),
        (build_pas, bits_and_one_hot, _pas_transitions),
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
