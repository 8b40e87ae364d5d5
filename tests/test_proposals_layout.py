"""The candidate grid of the factorised proposals (pyro_gwg/proposals/layout.py): the
candidates of every coordinate kind, and symmetric windows."""

import itertools
import math

import torch
from test_proposals import LAYOUTS, make_layout

from pyro_gwg.proposals.layout import CandidateGrid
from pyro_gwg.proposals.ncg import factorised_log_prob

WINDOW = 2


def candidate_sets(layout, codes, window=WINDOW):
    """Candidate values of every coordinate, written out independently of the library."""
    sets = []
    for i, x in enumerate(codes.tolist()):
        if not layout.is_scalar[i]:
            sets.append(list(range(int(layout.num_categories[i]))))
            continue
        lo, hi = float(layout.lower[i]), float(layout.upper[i])
        if math.isinf(lo) or math.isinf(hi):
            lo, hi = max(lo, x - window), min(hi, x + window)
        sets.append(list(range(int(lo), int(hi) + 1)))
    return sets


def test_candidates_of_every_coordinate_kind():
    layout = make_layout(LAYOUTS["mixed"])
    grid = CandidateGrid(layout, window=WINDOW)
    codes = torch.tensor([[0, 1, 2, 1, 1], [1, 0, 0, 2, 5]])
    log_q, base = grid.logits(torch.zeros(2, grid.relaxed_dim), torch.zeros(2), codes)
    for c in range(2):
        for i, expected in enumerate(candidate_sets(layout, codes[c])):
            values = (base[c, i] + torch.nonzero(torch.isfinite(log_q[c, i])).squeeze(-1)).tolist()
            assert values == expected
    assert grid.relaxed_dim == 1 + 1 + 3 + 1 + 1
    assert grid.num_slots == 2 * WINDOW + 1


def test_windows_are_symmetric_so_every_reverse_move_exists():
    layout = make_layout([("ord", 0.0, math.inf), ("ord", -math.inf, math.inf)])
    grid = CandidateGrid(layout, window=3)
    zero = torch.zeros(1, grid.relaxed_dim)
    for x in itertools.product(range(0, 6), range(-4, 5)):
        x = torch.tensor([x])
        forward, base = grid.logits(zero, torch.zeros(1), x)
        for x_new in itertools.product(*candidate_sets(layout, x[0], window=3)):
            x_new = torch.tensor([x_new])
            assert torch.isfinite(factorised_log_prob(forward, base, x_new))
            reverse, base_new = grid.logits(zero, torch.zeros(1), x_new)
            assert torch.isfinite(factorised_log_prob(reverse, base_new, x))
        # a value outside the window gets probability zero
        far = x.clone()
        far[0, 0] += 4
        assert factorised_log_prob(forward, base, far) == -math.inf
