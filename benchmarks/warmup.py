"""Seconds of an adapting warmup (``num_flips="auto"``): the library's bounded warmup
transitions against warmup transitions that draw every coordinate.

What is measured
----------------
``pyro_gwg.MCMC(Kernel(model, num_flips="auto"), num_samples, warmup_steps, num_chains,
disable_progbar=True)`` with every other argument at its default, on the lattice Ising
model written as a user writes it (:func:`peers.user_model`), one torch thread.
``mcmc.timing["warmup"]`` (which holds the captures made during warmup) and
``mcmc.timing["compile"]`` (every capture and package load of the run) are recorded
for two warmup policies, run in alternating rounds in this one process, each round
from the same seed:

* ``bounded`` (the library): warmup transitions built for
  :func:`~pyro_gwg.adaptation.warmup_bound` of the adapted number of flips, each
  captured at its :data:`~pyro_gwg.compile.transition.WARMUP_CAPTURE_CALLS`-th call;
* ``all_coordinates`` (the policy before): one warmup transition built for all ``D``
  coordinates (GWG draws ``D`` coordinates per step, PAS makes ``D`` sequential
  moves), captured at its second call.

The sampling transitions are the same for both, and the first round (discarded) fills
the disk cache with their compiled packages, so sampling costs the same in every
measured run. Writes ``results/warmup.json``.

Run: ``python benchmarks/warmup.py`` (``--quick``: the 10x10 lattice only).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List

import pyro
import torch

import pyro_gwg
from pyro_gwg import adaptation
from pyro_gwg.compile import transition

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import user_model, wait_for_compiles  # noqa: E402
from step_cost import code_info, machine_info  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
#: (kernel, lattice side, warmup steps)
SETTINGS = [("GWG", 10, 500), ("GWG", 40, 500), ("PAS", 10, 200)]
CHAINS = 16


@contextlib.contextmanager
def all_coordinates() -> Iterator[None]:
    """The warmup policy before bounded transitions: every warmup bound ``D`` (the
    adaptation reads :func:`~pyro_gwg.adaptation.warmup_bound` from its module), and
    the capture at a transition's second call."""
    saved = (adaptation.warmup_bound, transition.WARMUP_CAPTURE_CALLS)
    adaptation.warmup_bound = lambda num_flips, num_coords: int(num_coords)
    transition.WARMUP_CAPTURE_CALLS = 2
    try:
        yield
    finally:
        adaptation.warmup_bound, transition.WARMUP_CAPTURE_CALLS = saved


def one_run(kind: str, size: int, warmup: int, policy: str, seed: int) -> Dict[str, object]:
    model, _ = user_model({"kind": "ising", "size": size, "theta": 0.4}, None)
    kernel = getattr(pyro_gwg, kind)(model, num_flips="auto")
    pyro.set_rng_seed(seed)
    mcmc = pyro_gwg.MCMC(
        kernel, num_samples=10, warmup_steps=warmup, num_chains=CHAINS, disable_progbar=True
    )
    start = time.perf_counter()
    with all_coordinates() if policy == "all_coordinates" else contextlib.nullcontext():
        mcmc.run()
    return {
        "wall_s": time.perf_counter() - start,
        "warmup_s": float(mcmc.timing["warmup"]),
        "compile_s": float(mcmc.timing["compile"]),
        "num_flips": kernel.adapted_num_flips,
    }


def measure(kind: str, size: int, warmup: int, rounds: int) -> Dict[str, object]:
    runs: Dict[str, List[dict]] = {"bounded": [], "all_coordinates": []}
    for policy in runs:  # fills the cache with the sampling packages (discarded)
        one_run(kind, size, warmup, policy, seed=0)
    wait_for_compiles(120)
    for r in range(rounds):
        for policy in runs if r % 2 == 0 else reversed(list(runs)):
            runs[policy].append(one_run(kind, size, warmup, policy, seed=r + 1))
    row: Dict[str, object] = {
        "kernel": kind,
        "target": f"Ising L={size} theta=0.4",
        "chains": CHAINS,
        "warmup_steps": warmup,
    }
    for policy, found in runs.items():
        row[f"{policy} warmup s"] = statistics.median(r["warmup_s"] for r in found)
        row[f"{policy} compile s"] = statistics.median(r["compile_s"] for r in found)
    row["ratio all_coordinates / bounded"] = (
        row["all_coordinates warmup s"] / row["bounded warmup s"]
    )
    row["adapted num_flips (bounded runs)"] = [r["num_flips"] for r in runs["bounded"]]
    row["runs"] = runs
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the 10x10 lattice only")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", default=str(RESULTS / "warmup.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    settings = [s for s in SETTINGS if s[1] == 10] if args.quick else SETTINGS
    rows = [measure(kind, size, warmup, args.rounds) for kind, size, warmup in settings]
    out = {
        "benchmark": "warmup",
        "command": "python benchmarks/warmup.py " + " ".join(argv or sys.argv[1:]),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "code": code_info(),
        "rows": [{k: v for k, v in row.items() if k != "runs"} for row in rows],
        "runs_by_setting": {
            "{} {}".format(row["kernel"], row["target"]): row["runs"] for row in rows
        },
    }
    Path(args.output).write_text(json.dumps(out, indent=1))
    for row in out["rows"]:
        print(row)


if __name__ == "__main__":
    main()
