r"""Cyclical step sizes (ACS) against the fixed-step samplers on a multimodal target with
known mode masses.

The target is :func:`pyro_gwg.models.binary_modes`: ``--modes`` product-Bernoulli modes
on ``--bits`` bits, their patterns ``--distance`` bits apart
(:func:`~pyro_gwg.models.random_binary_modes`, one target per seed), each bit flipped
with probability ``--flip-prob``, mode weights proportional to 1, 2, ..., K. The mass of
mode ``k`` is its weight exactly, and the mean of the responsibilities
:math:`r_k(x)` (:func:`~pyro_gwg.models.mode_responsibilities`) over a chain's draws
estimates it.

Samplers: ``acs-dmala`` and ``acs-dlmc`` (DMALA and DLMC with
``step_size_schedule="cyclical"``, both step sizes tuned in warmup) against ``dmala``,
``dlmc``, ``gwg`` and ``pavg`` with their defaults (step sizes adapted in warmup). Each
runs ``--chains`` chains from the same uniform random initial states for an equal
wall-clock budget: after ``--warmup`` steps, blocks of ``--block`` steps until
``--budget`` seconds have passed (at most ``--steps`` steps), for each of ``--seeds``
seeds (targets and initial states).

Measured, per chain after ``--burn-in``, then averaged over chains and seeds:

* ``chain_tv``: the total-variation error :math:`\tfrac12 \sum_k |\hat w_k - w_k|` of
  the chain's own mode masses (a chain that never leaves its mode scores
  :math:`1 - w_k`);
* ``pooled_tv``: the same error of the masses pooled over the chains (which also
  credits the spread of the initial states);
* ``switches_per_1000``: mode switches per 1000 steps (the chain's mode changes when
  another mode's responsibility passes 0.9), and ``switches_per_second``;
* ``modes_visited``: distinct modes a chain visited.

Run from the repository root::

    python benchmarks/discs_multimodal.py           # about 12 minutes
    python benchmarks/discs_multimodal.py --quick   # about 2 minutes

Results go to ``benchmarks/results/discs_multimodal[_quick].json``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Dict, List

import pyro
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sampling_common import (  # noqa: E402
    code_info,
    common_arguments,
    configure,
    fill_defaults,
    metadata,
    sampler,
    write_json,
)

from pyro_gwg.models import (  # noqa: E402
    binary_modes,
    mode_responsibilities,
    random_binary_modes,
)

DEFAULT_SAMPLERS = ("acs-dmala", "dmala", "acs-dlmc", "dlmc", "gwg", "pavg")
#: the responsibility at which a chain counts as having moved to another mode
SWITCH_AT = 0.9


def make_kernel(name: str, cycle_length: int):
    """``acs-<kernel>``: the kernel with the cyclical schedule; else as the DISCS table."""
    if name.startswith("acs-"):
        return sampler(
            name[4:], binary_modes, step_size_schedule="cyclical", cycle_length=cycle_length
        )
    return sampler(name, binary_modes)


def mode_path(responsibilities: torch.Tensor) -> torch.Tensor:
    """``[C, T]`` mode of each chain at each step, with hysteresis: the chain stays in
    its mode until another mode's responsibility passes :data:`SWITCH_AT` (at the start:
    the most responsible mode)."""
    current = responsibilities[:, 0].argmax(-1)
    path = []
    for t in range(responsibilities.shape[1]):
        best = responsibilities[:, t].max(-1)
        current = torch.where(best.values > SWITCH_AT, best.indices, current)
        path.append(current)
    return torch.stack(path, 1)


def total_variation(estimate: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    return 0.5 * (estimate - exact).abs().sum(-1)


def timed_run(kernel, target, args, initial) -> Dict[str, object]:
    """Warmup, then transitions in blocks of ``--block`` steps until ``--budget``
    seconds of sampling have passed (the first two steps, which compile, not counted):
    equal wall-clock budgets measured, not predicted from a pilot run. Returns the
    responsibilities ``[C, T, K]`` after each step and the timing."""
    kernel.vectorized_chains = args.chains
    kernel.initial_params = initial
    kernel.setup(args.warmup, *target)
    driver = kernel.driver
    driver.run(args.warmup)
    observed, accepted = [], []

    def on_block(t, info, codes, log_joint) -> None:
        observed.append(mode_responsibilities(codes, *target))  # codes [C, n, D]
        accepted.append(info.accepted.double().mean(0))

    driver.run(2, on_block)  # compilation
    seconds, steps = 0.0, 0
    while seconds < args.budget and steps < args.steps:
        start = time.perf_counter()
        driver.run(args.block, on_block)
        seconds += time.perf_counter() - start
        steps += args.block
    return {
        "responsibilities": torch.cat(observed, 1)[:, 2:],
        "steps": steps,
        "seconds": seconds,
        "accept_rate": float(torch.cat(accepted)[2:].mean()),
    }


def run_one(name: str, target, args, seed: int) -> Dict[str, object]:
    kernel = make_kernel(name, args.cycle_length)
    generator = torch.Generator().manual_seed(1000 + seed)
    initial = {"x": torch.randint(0, 2, (args.chains, args.bits), generator=generator).float()}
    pyro.set_rng_seed(seed)
    run = timed_run(kernel, target, args, initial)
    resp, steps = run["responsibilities"], run["steps"]
    kept = resp[:, int(args.burn_in * steps) :]
    weights = target.weights
    chain_tv = total_variation(kept.mean(1), weights)
    pooled_tv = total_variation(kept.mean((0, 1)), weights)
    path = mode_path(kept)
    switches = (path[:, 1:] != path[:, :-1]).sum(1).double()
    seconds_kept = run["seconds"] * kept.shape[1] / steps
    visited = torch.tensor([len(set(row.tolist())) for row in path]).double()
    row = {
        "seed": seed,
        "steps": steps,
        "seconds": run["seconds"],
        "seconds_per_step": run["seconds"] / steps,
        "accept_rate": run["accept_rate"],
        "chain_tv": float(chain_tv.mean()),
        "pooled_tv": float(pooled_tv),
        "switches_per_1000": float(switches.mean() * 1000 / kept.shape[1]),
        "switches_per_second": float(switches.mean() / seconds_kept),
        "modes_visited": float(visited.mean()),
    }
    state = kernel.driver.state
    if hasattr(state, "big_step_size"):
        row["big_step_size"] = float(state.big_step_size.median())
        row["small_step_size"] = float(state.small_step_size.median())
    elif hasattr(state, "step_size"):
        row["step_size"] = float(state.step_size.median())
    return row


def summarise(rows: List[Dict[str, object]]) -> Dict[str, object]:
    """Mean and standard error over seeds of each measured number."""
    out: Dict[str, object] = {"seeds": len(rows)}
    for key in ("chain_tv", "pooled_tv", "switches_per_1000", "switches_per_second"):
        values = torch.tensor([float(r[key]) for r in rows], dtype=torch.float64)
        se = float(values.std() / math.sqrt(len(values))) if len(values) > 1 else 0.0
        out[key] = {"mean": float(values.mean()), "se": se}
    for key in ("modes_visited", "accept_rate", "steps", "seconds_per_step"):
        out[key] = float(sum(float(r[key]) for r in rows) / len(rows))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common_arguments(parser)
    parser.add_argument("--samplers", nargs="+", default=list(DEFAULT_SAMPLERS))
    parser.add_argument("--seeds", type=int)
    parser.add_argument("--chains", type=int)
    parser.add_argument("--steps", type=int, help="at most this many steps per run")
    parser.add_argument("--budget", type=float, help="seconds of sampling per run")
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--burn-in", type=float, default=0.1)
    parser.add_argument("--block", type=int, default=100, help="steps between clock reads")
    parser.add_argument("--modes", type=int, default=4)
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--distance", type=int, default=16)
    parser.add_argument("--flip-prob", type=float, default=0.15)
    parser.add_argument("--cycle-length", type=int, default=10)
    args = parser.parse_args()
    defaults = dict(seeds=3, chains=16, steps=50000, budget=20.0, warmup=300)
    if args.quick:
        defaults = dict(seeds=2, chains=8, steps=5000, budget=3.0, warmup=100)
    fill_defaults(args, "discs_multimodal", defaults)
    configure(args)
    runs: List[Dict[str, object]] = []
    for seed in range(args.seeds):
        target = random_binary_modes(
            args.modes, args.bits, args.distance, args.flip_prob, seed=seed
        )
        for name in args.samplers:
            clock = time.perf_counter()
            row = {"sampler": name, **run_one(name, target, args, seed)}
            runs.append(row)
            print(
                {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()},
                "{:.0f} s".format(time.perf_counter() - clock),
                flush=True,
            )
    table = [
        {"sampler": name, **summarise([r for r in runs if r["sampler"] == name])}
        for name in args.samplers
    ]
    results = {
        **metadata("discs_multimodal", args, code_info()),
        "note": (
            "a loaded, shared 2-core CPU machine: compare the samplers within this run "
            "(equal wall-clock budgets), not absolute numbers across runs"
        ),
        "exact_mode_masses": [float(w) for w in target.weights],
        "table": table,
        "runs": runs,
    }
    write_json(results, args.output)


if __name__ == "__main__":
    main()
