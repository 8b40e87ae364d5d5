"""The warmup adaptation schemes (pyro_gwg.adaptation): the bound on GWG's number of
flips that warmup transitions are built with."""

import random
from typing import NamedTuple

import pytest
import torch

from pyro_gwg.adaptation import MIN_WARMUP_BOUND, NumFlipsAdaptation, flips_bound, warmup_bound


class _State(NamedTuple):
    num_flips: torch.Tensor


class _Info(NamedTuple):
    accept_prob: torch.Tensor


def _walk(num_coords, accept_probs, start=None):
    """Run a :class:`NumFlipsAdaptation` on ``accept_probs`` (one per warmup step):
    ``(adaptation, [(N, bound in force after the step)])``."""
    start = max(1, round(num_coords**0.5 / 2.5)) if start is None else start
    adaptation = NumFlipsAdaptation(start, num_coords, 0.574, len(accept_probs))
    state = _State(torch.full((4,), start))
    assert start <= adaptation.static["max_flips"]
    path = []
    for t, p in enumerate(accept_probs):
        state = adaptation.update(t, state, _Info(torch.full((4,), float(p))))
        path.append((int(state.num_flips[0]), adaptation.static["max_flips"]))
    return adaptation, path


def test_the_warmup_bound_leaves_room_to_double_and_is_at_least_the_minimum():
    assert MIN_WARMUP_BOUND == 64
    assert [warmup_bound(n, 1600) for n in (1, 16, 32, 33, 100, 600, 1600)] == [
        64,
        64,
        64,
        128,
        256,
        1600,
        1600,
    ]
    assert warmup_bound(1, 36) == 36 and warmup_bound(30, 36) == 36  # never above D


@pytest.mark.parametrize("num_coords", [5, 36, 100, 1600])
def test_every_warmup_step_draws_at_least_its_number_of_flips(num_coords):
    # a bound below N would silently move fewer coordinates than the adaptation set
    rng = random.Random(num_coords)
    walks = [[rng.random() for _ in range(200)], [1.0] * 60 + [0.0] * 60 + [0.6] * 80]
    for accept_probs in walks:
        adaptation, path = _walk(num_coords, accept_probs)
        for num_flips, bound in path[:-1]:
            assert 1 <= num_flips <= bound <= num_coords
            # and not wastefully above it (under eight times N, or the least bound)
            assert bound < 8 * num_flips or bound == min(num_coords, MIN_WARMUP_BOUND)
        # sampling: the next power of two above the frozen value
        num_flips, bound = path[-1]
        assert num_flips == adaptation.adapted and bound == flips_bound(num_flips, num_coords)


def test_the_warmup_bound_rises_with_the_number_of_flips_and_falls_back():
    # every proposal accepted: N climbs; none accepted: it falls
    adaptation, path = _walk(1600, [1.0] * 40 + [0.0] * 200 + [0.574] * 10, start=16)
    bounds = [bound for _, bound in path[:-1]]
    top = max(bounds)
    assert bounds[0] == 64 and top > 64  # raised as N passed 64
    assert top == warmup_bound(max(n for n, _ in path[:40]), 1600)
    assert bounds[-1] < top  # lowered once N fell to an eighth of the bound
    for (num_flips, bound), (_, before) in zip(path[1:-1], path[:-2]):
        if bound != before:  # changed only when N left [bound / 8, bound]
            assert num_flips > before or 8 * num_flips <= before
            assert bound == warmup_bound(num_flips, 1600)
    # few transitions: one per power of two at most
    assert len(set(bounds)) <= 6
