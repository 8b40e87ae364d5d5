r"""Cyclical step sizes (ACS) against the fixed-step samplers on multimodal targets with
known mode masses.

Targets (``--targets``):

* ``modes``: :func:`pyro_gwg.models.binary_modes`, ``--modes`` product-Bernoulli modes
  on ``--bits`` bits, their patterns ``--distance`` bits apart
  (:func:`~pyro_gwg.models.random_binary_modes`, one target per seed), each bit
  flipped with probability ``--flip-prob``, mode weights proportional to 1, 2, ...,
  K; the responsibilities :math:`r_k(x)` are
  :func:`~pyro_gwg.models.mode_responsibilities`;
* ``ordinal``: :func:`pyro_gwg.models.ordinal_mixture` (Rhodes and Gutmann's ordinal
  lattice target, 50 values per coordinate) with ``--components`` components in
  ``--dims`` dimensions: isolated modes of equal mass along the diagonal, the kind of
  target (a low-dimensional mixture on an ordinal grid) on which ACS shows its large
  steps jumping between modes.

The mass of mode ``k`` is known exactly (its weight), and the mean of the
responsibilities :math:`r_k(x) = w_k p_k(x) / p(x)` over a chain's draws estimates it.

Samplers: ``acs-dmala`` and ``acs-dlmc`` (DMALA and DLMC with
``step_size_schedule="cyclical"``, both step sizes tuned in warmup) against ``dmala``,
``dlmc``, ``gwg`` and ``pavg`` with their defaults (step sizes adapted in warmup); see
:data:`DEFAULT_SAMPLERS`. Each runs ``--chains`` chains from the same uniform random
initial states for an equal wall-clock budget: after ``--warmup`` steps, blocks of
``--block`` steps until ``--budget`` seconds have passed (at most ``--steps`` steps),
for each of ``--seeds`` seeds (targets and initial states).

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

    python benchmarks/discs_multimodal.py           # about 13 minutes
    python benchmarks/discs_multimodal.py --quick   # about 3 minutes

Results go to ``benchmarks/results/discs_multimodal[_quick].json``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple

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
    ordinal_mixture,
    random_binary_modes,
)
from pyro_gwg.models.ordinal import ordinal_component_log_probs  # noqa: E402

#: the samplers of each target by default; DLMC is left out of the ordinal target (on
#: its 50-value coordinates a step costs a matrix exponential, about 0.14 s on this
#: machine, 30 times DMALA's, and in a quick run its adapted step size collapsed to
#: about exp(-20) with an acceptance rate below 0.1)
DEFAULT_SAMPLERS = {
    "modes": ("acs-dmala", "dmala", "acs-dlmc", "dlmc", "gwg", "pavg"),
    "ordinal": ("acs-dmala", "dmala", "gwg", "pavg"),
}
#: the responsibility at which a chain counts as having moved to another mode
SWITCH_AT = 0.9


class Target(NamedTuple):
    """A multimodal target: its model and arguments, the exact mode masses ``[K]``, the
    responsibilities ``codes [..., D] -> [..., K]`` and uniform random initial states
    ``(num_chains, generator) -> {site: values}``."""

    model: Callable
    args: tuple
    masses: torch.Tensor
    responsibilities: Callable[[torch.Tensor], torch.Tensor]
    initial: Callable[[int, torch.Generator], Dict[str, torch.Tensor]]


def modes_target(args, seed: int) -> Target:
    """``binary_modes``: product-Bernoulli modes ``--distance`` bits apart."""
    params = random_binary_modes(args.modes, args.bits, args.distance, args.flip_prob, seed=seed)

    def initial(num_chains, generator):
        return {"x": torch.randint(0, 2, (num_chains, args.bits), generator=generator).float()}

    return Target(
        binary_modes,
        params,
        params.weights,
        lambda codes: mode_responsibilities(codes, *params),
        initial,
    )


def ordinal_target(args, seed: int) -> Target:
    """``ordinal_mixture`` with ``--components`` isolated components in ``--dims``
    dimensions (equal masses); the component responsibilities from the exact
    one-dimensional component log-probabilities."""
    num_values = 50
    log_probs = ordinal_component_log_probs("quadratic", args.components, num_values).float()

    def responsibilities(codes):
        per_component = log_probs[:, codes.long()].sum(-1)  # [K, ...]
        return per_component.movedim(0, -1).softmax(-1)

    def initial(num_chains, generator):
        shape = (num_chains, args.dims)
        return {"s": torch.randint(0, num_values, shape, generator=generator).float()}

    masses = torch.full((args.components,), 1.0 / args.components)
    return Target(
        ordinal_mixture,
        (args.dims, "quadratic", args.components, num_values),
        masses,
        responsibilities,
        initial,
    )


TARGETS = {"modes": modes_target, "ordinal": ordinal_target}


def make_kernel(name: str, model, cycle_length: int):
    """``acs-<kernel>``: the kernel with the cyclical schedule; else as the DISCS table."""
    if name.startswith("acs-"):
        return sampler(name[4:], model, step_size_schedule="cyclical", cycle_length=cycle_length)
    return sampler(name, model)


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


def timed_run(kernel, target: Target, args, initial) -> Dict[str, object]:
    """Warmup, then transitions in blocks of ``--block`` steps until ``--budget``
    seconds of sampling have passed (the first two steps, which compile, not counted):
    equal wall-clock budgets measured, not predicted from a pilot run. Returns the
    responsibilities ``[C, T, K]`` after each step and the timing."""
    kernel.vectorized_chains = args.chains
    kernel.initial_params = initial
    kernel.setup(args.warmup, *target.args)
    driver = kernel.driver
    driver.run(args.warmup)
    observed, accepted = [], []

    def on_block(t, info, codes, log_joint) -> None:
        observed.append(target.responsibilities(codes))  # codes [C, n, D]
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


def run_one(name: str, target: Target, args, seed: int) -> Dict[str, object]:
    kernel = make_kernel(name, target.model, args.cycle_length)
    generator = torch.Generator().manual_seed(1000 + seed)
    initial = target.initial(args.chains, generator)
    pyro.set_rng_seed(seed)
    run = timed_run(kernel, target, args, initial)
    resp, steps = run["responsibilities"], run["steps"]
    kept = resp[:, int(args.burn_in * steps) :]
    weights = target.masses
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
    parser.add_argument("--samplers", nargs="+", help="default: DEFAULT_SAMPLERS")
    parser.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
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
    parser.add_argument("--dims", type=int, default=3, help="ordinal: dimensions")
    parser.add_argument("--components", type=int, default=3, help="ordinal: components")
    parser.add_argument("--cycle-length", type=int, default=10)
    args = parser.parse_args()
    defaults = dict(seeds=3, chains=16, steps=50000, budget=15.0, warmup=300)
    if args.quick:
        defaults = dict(seeds=2, chains=8, steps=5000, budget=3.0, warmup=100)
    fill_defaults(args, "discs_multimodal", defaults)
    configure(args)
    results = {
        **metadata("discs_multimodal", args, code_info()),
        "note": (
            "a loaded, shared 2-core CPU machine: compare the samplers within this run "
            "(equal wall-clock budgets), not absolute numbers across runs"
        ),
        "targets": {},
    }
    for name in args.targets:
        runs: List[Dict[str, object]] = []
        samplers = args.samplers or DEFAULT_SAMPLERS[name]
        for seed in range(args.seeds):
            target = TARGETS[name](args, seed)
            for kernel in samplers:
                clock = time.perf_counter()
                row = {"sampler": kernel, **run_one(kernel, target, args, seed)}
                runs.append(row)
                print(
                    name,
                    {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()},
                    "{:.0f} s".format(time.perf_counter() - clock),
                    flush=True,
                )
        table = [
            {"sampler": kernel, **summarise([r for r in runs if r["sampler"] == kernel])}
            for kernel in samplers
        ]
        results["targets"][name] = {
            "exact_mode_masses": [float(w) for w in target.masses],
            "table": table,
            "runs": runs,
        }
    write_json(results, args.output)


if __name__ == "__main__":
    main()
