"""DLMC as pure functions: the per-coordinate chain's transition matrices, the binary
closed form, and detailed balance of the whole transition kernel, enumerated."""

import itertools
import math

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyro_gwg
from pyro_gwg.proposals.dlmc import (
    binary_flip_log_probs,
    build_dlmc,
    ctmc_log_transitions,
    dlmc_proposal,
    log1mexp,
)
from pyro_gwg.proposals.layout import CandidateGrid
from pyro_gwg.proposals.ncg import factorised_log_prob


def _explicit_generator(psi):
    """The rate matrix of one coordinate, entry by entry: u -> v at exp(psi_v - psi_u)."""
    size = psi.numel()
    rates = torch.zeros(size, size, dtype=torch.float64)
    for u, v in itertools.product(range(size), repeat=2):
        if u != v:
            rates[u, v] = math.exp(float(psi[v] - psi[u]))
    return rates - torch.diag(rates.sum(1))


def test_log1mexp_is_accurate_at_both_ends():
    a = torch.tensor([1e-8, 0.3, math.log(2), 5.0, 60.0], dtype=torch.float64)
    assert torch.allclose(log1mexp(a), torch.log(-torch.expm1(-a)), rtol=1e-12)
    assert float(log1mexp(torch.tensor(float("inf")))) == 0.0


def test_transition_matrices_are_stochastic_and_match_matrix_exp():
    torch.manual_seed(0)
    psi = torch.randn(2, 3, 4)
    psi[1, 2, 3] = -math.inf  # a coordinate with three values of four slots
    step = torch.tensor([0.3, 1.7])
    log_p = ctmc_log_transitions(psi, step)
    assert log_p.dtype == torch.float64 and log_p.shape == (2, 3, 4, 4)
    assert torch.allclose(log_p.exp().sum(-1), torch.ones(2, 3, 4, dtype=torch.float64))
    for c, i in itertools.product(range(2), range(3)):
        size = int(torch.isfinite(psi[c, i]).sum())
        expected = torch.linalg.matrix_exp(float(step[c]) * _explicit_generator(psi[c, i, :size]))
        assert torch.allclose(log_p[c, i, :size, :size].exp(), expected, atol=1e-10)
    # the missing value is never entered
    assert torch.all(log_p[1, 2, :3, 3] == -math.inf)


def test_the_binary_closed_form_is_the_two_state_matrix_exponential():
    gain = torch.tensor([[-6.0, -0.5, 0.0, 0.7, 4.0]])
    for h in (1e-3, 0.4, 3.0):
        log_stay, log_flip = binary_flip_log_probs(gain.double(), torch.tensor([h]).double())
        assert torch.allclose(torch.logaddexp(log_stay, log_flip), torch.zeros_like(gain).double())
        for d, stay, flip in zip(gain[0], log_stay[0], log_flip[0]):
            # from value 0, flipping to value 1 has estimated gain d: psi = (0, d / 2)
            p = torch.linalg.matrix_exp(h * _explicit_generator(torch.tensor([0.0, float(d) / 2])))
            assert math.exp(float(flip)) == pytest.approx(float(p[0, 1]), rel=1e-6, abs=1e-15)
            assert math.exp(float(stay)) == pytest.approx(float(p[0, 0]), rel=1e-6)


def test_the_proposal_of_bits_is_the_categorical_one_with_two_values():
    # the all-binary closed form and the general matrix exponential give one proposal
    torch.manual_seed(1)
    layout = pyro_gwg.density.binary_layout(4)
    codes = torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0]])
    grad = torch.randn(2, 4, 1)
    step = torch.tensor([0.5, 2.0])
    grid = CandidateGrid(layout)
    closed, base = dlmc_proposal(codes, grad, step, layout, grid)
    psi = grid.logits(grid.flat_grad(grad) / 2, torch.zeros(2), codes)[0]
    rows = (
        ctmc_log_transitions(psi, step)
        .gather(-2, codes.reshape(2, 4, 1, 1).expand(-1, -1, 1, 2))
        .squeeze(-2)
    )
    assert torch.equal(base, torch.zeros_like(codes))
    assert torch.allclose(closed.double(), rows, atol=1e-6)


def bit_category_count(y):
    """A bit, a one-hot category and a Binomial(2) count: 18 states."""
    b = pyro.sample("b", dist.Bernoulli(0.4))
    z = pyro.sample("z", dist.OneHotCategorical(logits=torch.tensor([0.2, -0.3, 0.5])))
    k = pyro.sample("k", dist.Binomial(2, 0.5))
    mean = 1.5 * b + z @ torch.tensor([-1.0, 0.5, 2.0]) + 0.7 * k
    pyro.sample("y", dist.Normal(mean, 0.8), obs=y)


def _dlmc_transitions(energy, step_size, reverse_at_start=False):
    layout = energy.layout
    grid = CandidateGrid(layout)
    sizes = layout.num_values().long().tolist()
    states = torch.tensor(list(itertools.product(*(range(n) for n in sizes))))
    num = len(states)
    log_joint, grad = energy.value_and_grad(states)
    step = torch.full((num,), step_size)
    table, base = dlmc_proposal(states, grad, step, layout, grid)
    # q(y | x) for every pair: rows x, columns y
    pairs = (num, num)
    log_q = (
        factorised_log_prob(
            table.unsqueeze(1).expand(*pairs, *table.shape[1:]).flatten(0, 1),
            base.unsqueeze(1).expand(*pairs, -1).flatten(0, 1),
            states.unsqueeze(0).expand(*pairs, -1).flatten(0, 1),
        )
        .reshape(pairs)
        .double()
    )
    log_reverse = log_q if reverse_at_start else log_q.T
    ratio = log_joint.double().unsqueeze(0) - log_joint.double().unsqueeze(1) + log_reverse - log_q
    transitions = log_q.exp() * ratio.clamp(max=0).exp()
    transitions.fill_diagonal_(0)
    transitions += torch.diag(1 - transitions.sum(1))
    return log_joint, transitions


def _assert_detailed_balance(log_joint, transitions):
    pi = (log_joint - log_joint.logsumexp(0)).exp().double()
    flow = pi.unsqueeze(1) * transitions
    assert torch.allclose(flow, flow.T, atol=1e-9), float((flow - flow.T).abs().max())


@pytest.mark.parametrize("step_size", [0.05, 0.5, 5.0])
def test_dlmc_is_reversible(step_size):
    energy = pyro_gwg.ModelDensity(bit_category_count, (torch.tensor(2.0),))
    log_joint, transitions = _dlmc_transitions(energy, step_size)
    assert bool((transitions > -1e-6).all())
    _assert_detailed_balance(log_joint, transitions)


def test_the_dlmc_check_fails_with_the_reverse_proposal_at_the_start():
    energy = pyro_gwg.ModelDensity(bit_category_count, (torch.tensor(2.0),))
    with pytest.raises(AssertionError):
        _assert_detailed_balance(*_dlmc_transitions(energy, 0.5, reverse_at_start=True))


def test_one_step_of_the_sampler_follows_its_proposal():
    pyro.set_rng_seed(0)
    energy = pyro_gwg.ModelDensity(bit_category_count, (torch.tensor(2.0),))
    _, exact = _dlmc_transitions(energy, 0.5)
    states = torch.tensor(list(itertools.product(range(2), range(3), range(3))))
    init, step = build_dlmc(energy, 0.5)
    num_chains = 20000
    for a in (0, 9, 17):
        state, _ = step(init(states[a : a + 1].expand(num_chains, -1).clone()))
        hit = (state.codes.unsqueeze(1) == states).all(-1).long().argmax(1)
        freq = torch.bincount(hit, minlength=len(states)).double() / num_chains
        p = exact[a].clamp(0, 1)  # (a diagonal entry can round to -1e-9)
        se = (p * (1 - p) / num_chains).sqrt().clamp(min=1e-3)
        assert float(((freq - exact[a]) / se).abs().max()) < 5
