r"""Where the time of a default-path GWG step goes.

The targets of ``benchmarks/peers.py`` written as a user writes them
(:func:`peers.user_model`: the 10 x 10 and 40 x 40 lattice Ising models at
:math:`\theta = 0.4`, the 784 x 500 RBM) run through ``pyro_gwg.MCMC(GWG(model,
num_flips=N), ...)`` with every other argument at its default (``jit_compile="auto"``)
for 16 and 256 chains. The kernel and its chain driver are set up as the runner does
it, and after warmup and ``--steps`` transitions (compilation included, reported as
``first_run_s``), ``--steps`` further transitions are timed and ``--steps`` more run
under :mod:`torch.profiler`; the report gives, per setting, the wall-clock time per step
(with and without the profiler), which compiler ``"auto"`` ran the step with and how
many threads it chose, and the operators with the largest share of the operators' own
CPU time. ``dispatch_share`` is the part of a step's wall-clock time not spent inside
any operator: the interpreter, the driver and Python between operators.

``--aot`` runs each setting a second time with ``jit_compile="inductor"`` (AOTInductor
from the first step; its compile time is reported), for the compiled path beside the
default one.

Run from the repository root::

    PYTHONPATH=. python benchmarks/profile_default_path.py           # about 5 minutes
    PYTHONPATH=. python benchmarks/profile_default_path.py --quick   # 10 x 10, 16 chains

Results go to ``benchmarks/results/profile_default_path.json`` (``--output``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from peers import header, rbm_arrays, target_name, user_model  # noqa: E402

TARGETS = [
    {"kind": "ising", "size": 10, "theta": 0.4},
    {"kind": "ising", "size": 40, "theta": 0.4},
    {"kind": "rbm"},
]
#: warmup steps before the timed ones
WARMUP = 100
#: flips per step: the values num_flips="auto" settles on for these targets in peers.json
NUM_FLIPS = {10: 5, 40: 12, "rbm": 10}


def _backend(driver) -> str:
    """The compiler that ran the driver's last step function."""

    names = set()
    for fn in driver._compiled.values():
        threads = getattr(fn, "threads", None)
        inner = getattr(fn, "fn", fn)
        names.add(getattr(inner, "form", driver.mode.backend or "eager"))
        if threads is not None:
            names.add("threads={}".format(threads))
    return ",".join(sorted(names))


def profile_setting(target, chains: int, steps: int, jit_compile: str, rbm_path: Path):
    import pyro
    from torch.profiler import ProfilerActivity, profile

    from pyro_gwg import GWG

    pyro.set_rng_seed(0)
    model, _ = user_model(target, rbm_path)
    flips = NUM_FLIPS[target.get("size", "rbm")]
    # the kernel and driver that pyro_gwg.MCMC(GWG(model, num_flips=flips), num_chains=
    # chains) runs, kept after the run (the runner's cleanup releases them)
    kernel = GWG(model, num_flips=flips, jit_compile=jit_compile)
    kernel.vectorized_chains = chains
    start = time.perf_counter()
    kernel.setup(WARMUP)
    driver = kernel.driver
    driver.run(WARMUP + steps, every=64)
    first_run = time.perf_counter() - start
    begin = time.perf_counter()
    driver.run(steps, every=64)
    plain = (time.perf_counter() - begin) / steps
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        begin = time.perf_counter()
        driver.run(steps, every=64)
        profiled = (time.perf_counter() - begin) / steps
    events = [e for e in prof.key_averages() if not e.key.startswith("[")]
    total_self = sum(e.self_cpu_time_total for e in events) / 1e6 / steps
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:8]
    return {
        "target": target_name(target),
        "chains": chains,
        "jit_compile": jit_compile,
        "num_flips": flips,
        "ran_with": _backend(driver),
        "first_run_s": first_run,
        "ms_per_step": 1e3 * plain,
        "ms_per_step_profiled": 1e3 * profiled,
        "dispatch_share": max(0.0, 1.0 - total_self / profiled),
        "top_operators": [
            {
                "name": e.key,
                "share": e.self_cpu_time_total / 1e6 / steps / profiled,
                "calls_per_step": e.count / steps,
            }
            for e in top
        ],
    }


def main(argv: Optional[List[str]] = None) -> Dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--aot", action="store_true", help="also profile jit_compile='inductor'")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's own)")
    default_output = HERE / "results" / "profile_default_path.json"
    parser.add_argument("--output", type=Path, default=default_output)
    args = parser.parse_args(argv)
    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("PYRO_GWG_CACHE_DIR", tempfile.mkdtemp(prefix="profile_cache_"))
    rbm_path = Path(tempfile.mkdtemp(prefix="profile_")) / "rbm.npz"
    rbm_arrays(rbm_path)
    targets = TARGETS[:1] if args.quick else TARGETS
    chain_counts = [16] if args.quick else [16, 256]
    modes = ["auto", "inductor"] if args.aot else ["auto"]
    runs = []
    for target in targets:
        for chains in chain_counts:
            for mode in modes:
                run = profile_setting(target, chains, args.steps, mode, rbm_path)
                runs.append(run)
                top = ", ".join(
                    "{} {:.0%}".format(op["name"], op["share"]) for op in run["top_operators"][:4]
                )
                print(
                    "{:24s} C={:<4d} {:8s} {:28s} {:7.3f} ms/step  dispatch {:4.0%}  {}".format(
                        run["target"],
                        chains,
                        mode,
                        run["ran_with"],
                        run["ms_per_step"],
                        run["dispatch_share"],
                        top,
                    ),
                    flush=True,
                )
    results = {
        **header("profile_default_path", torch_threads=torch.get_num_threads()),
        "runs": runs,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print("wrote {}".format(args.output))
    return results


if __name__ == "__main__":
    main()
