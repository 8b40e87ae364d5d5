"""The cyclical step-size schedule on its own: the formula, and the wrapper that runs an
algorithm with it."""

import math

import torch

from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.ncg import GradientState
from pyro_gwg.proposals.schedule import cyclical, cyclical_step_size, scheduled_state_type


def _schedule(t, cycle_length, big, small):
    iteration = torch.tensor([t])
    return float(
        cyclical_step_size(iteration, cycle_length, torch.tensor([big]), torch.tensor([small]))
    )


def test_cyclical_step_size_is_the_floored_cosine():
    big, small, s = 4.0, 0.5, 8
    for t in range(3 * s):
        expected = max(big * (math.cos(math.pi * (t % s) / s) + 1) / 2, small)
        assert math.isclose(_schedule(t, s, big, small), expected, rel_tol=1e-6)


def test_each_cycle_starts_big_and_decays_to_the_small_step():
    values = [_schedule(t, 10, 3.0, 0.2) for t in range(20)]
    assert values[0] == values[10] == 3.0
    assert all(a >= b for a, b in zip(values[:10], values[1:10]))  # decays within a cycle
    assert math.isclose(min(values), 0.2, rel_tol=1e-6) and values[9] == min(values)
    assert values[:10] == values[10:]  # periodic


def test_a_cycle_of_one_step_is_the_big_step_size():
    assert all(_schedule(t, 1, 2.5, 0.1) == 2.5 for t in range(5))


def test_equal_step_sizes_give_a_constant_schedule():
    assert len({_schedule(t, 7, 0.3, 0.3) for t in range(14)}) == 1


def test_schedule_is_per_chain():
    sizes = cyclical_step_size(
        torch.tensor([0, 0, 5]), 10, torch.tensor([2.0, 8.0, 2.0]), torch.tensor([0.1, 0.1, 0.1])
    )
    assert torch.allclose(sizes, torch.tensor([2.0, 8.0, 1.0]))


def _recording_algorithm(seen):
    """An algorithm on GradientState that records the step size it is given."""

    def init(codes):
        zeros = torch.zeros(codes.shape[0])
        return GradientState(codes, zeros, zeros, torch.full((codes.shape[0],), 0.25))

    def step(state):
        seen.append(state.step_size.clone())
        return state, state.step_size

    return Algorithm(init, step)


def test_cyclical_runs_the_algorithm_with_the_scheduled_step_size():
    seen = []
    algorithm = cyclical(_recording_algorithm(seen), 4, 2.0)
    state = algorithm.init(torch.zeros(3, 2, dtype=torch.long))
    assert type(state) is scheduled_state_type(GradientState)
    assert type(state).base is GradientState
    assert torch.equal(state.iteration, torch.zeros(3, dtype=torch.long))
    assert torch.equal(state.small_step_size, torch.full((3,), 0.25))
    assert torch.equal(state.big_step_size, torch.full((3,), 2.0))
    for _ in range(9):
        state, _ = algorithm.step(state)
    assert torch.equal(state.iteration, torch.full((3,), 9))
    expected = [_schedule(t, 4, 2.0, 0.25) for t in range(9)]
    assert [float(s[0]) for s in seen] == expected


def test_cyclical_without_a_big_step_is_constant_until_warmup_sets_it():
    # the big step size defaults to the small one, and is never below it
    seen = []
    algorithm = cyclical(_recording_algorithm(seen), 4, None)
    state = algorithm.init(torch.zeros(2, 2, dtype=torch.long))
    for _ in range(5):
        state, _ = algorithm.step(state)
    assert {float(s[0]) for s in seen} == {0.25}
    state = cyclical(_recording_algorithm(seen), 4, 0.1).init(torch.zeros(2, 2, dtype=torch.long))
    assert torch.equal(state.big_step_size, state.small_step_size)
