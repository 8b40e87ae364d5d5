r"""Peak memory of ``pyro_gwg.MCMC``: the run, ``get_samples`` and ``to_inference_data``.

What is measured
----------------
GWG (``jit_compile="auto"``) on the ``size x size`` periodic lattice Ising model
(:func:`pyro_gwg.models.lattice_ising`, default 10 x 10, coupling 0.4), ``--chains``
vectorised chains of ``--samples`` draws each (default 64 x 200,000, no warmup). The
draws are stored as one-byte codes, so the *stored draws* take
``chains x samples x size^2`` bytes (1.28 GB by default); the kernel's per-draw
statistics (accepted, acceptance probability, coordinates changed, evaluation counts,
log joint: 33 bytes per draw and chain) come on top.

Each case runs in a fresh Python process, which imports everything, reads its
resident-memory high-water mark (``VmHWM`` of ``/proc/self/status``) as the
*baseline*, then

* ``run``: runs the chains and reads the high-water mark again;
* ``get_samples``: runs the chains, resets the high-water mark (``/proc/self/clear_refs``),
  calls ``mcmc.get_samples(group_by_chain=True)`` and reads it;
* ``to_inference_data``: the same with ``pyro_gwg.to_inference_data(mcmc)``.

For each case the JSON holds the baseline, the peak, the resident memory before the
measured call, the seconds it took, and the ratio ``(peak - baseline) / stored
draws``: the memory the run holds at its worst over what the process held before it,
in units of the stored draws (decoded float32 draws alone are 4 of these units).

Run from the repository root::

    python benchmarks/memory.py            # full: 64 x 200,000 draws, a few minutes per case
    python benchmarks/memory.py --quick    # smoke run: 8 x 20,000 draws (seconds)

``--cases run,get_samples`` measures some cases only; ``--label`` tags the results
(e.g. the code version measured: with ``PYTHONPATH`` pointing at another checkout the
script measures that code). Results go to ``benchmarks/results/memory.json``
(``memory_quick.json`` with ``--quick``; ``--output`` to choose).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict

from step_cost import code_info, machine_info

CASES = ("run", "get_samples", "to_inference_data")
RESULTS = Path(__file__).resolve().parent / "results"


def _status() -> Dict[str, int]:
    """``VmRSS`` and ``VmHWM`` of this process, in KiB."""
    out = {}
    with open("/proc/self/status") as status:
        for line in status:
            key = line.split(":")[0]
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(line.split()[1])
    return out


def _reset_peak() -> bool:
    """Reset ``VmHWM`` to the current resident size (Linux); ``False`` if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


def child(args: argparse.Namespace) -> Dict[str, object]:
    """One case, in this (fresh) process."""
    import pyro
    import torch

    import pyro_gwg
    from pyro_gwg import GWG, MCMC
    from pyro_gwg.models import lattice_ising
    from pyro_gwg.runner.draws import code_dtype

    torch.set_num_threads(args.threads)
    energy = pyro_gwg.ModelDensity(lattice_ising, (), {"size": args.size})
    item = torch.iinfo(code_dtype(energy.layout)).bits // 8
    stored = args.chains * args.samples * energy.num_coords * item
    pyro.set_rng_seed(args.seed)
    baseline = _status()["VmHWM"]
    out: Dict[str, object] = {
        "case": args.child,
        "pyro_gwg": os.path.dirname(pyro_gwg.__file__),
        "stored_draws_bytes": stored,
        "baseline_kib": baseline,
    }
    mcmc = MCMC(
        GWG(lattice_ising),
        num_samples=args.samples,
        warmup_steps=0,
        num_chains=args.chains,
        disable_progbar=True,
    )
    clock = time.perf_counter()
    mcmc.run(size=args.size, coupling=args.coupling)
    seconds = time.perf_counter() - clock
    after = _status()
    out["run"] = _measure(baseline, baseline, after, seconds, stored)
    out["run"]["timing"] = dict(mcmc.timing)
    if args.child != "run":
        call = {
            "get_samples": lambda: mcmc.get_samples(group_by_chain=True),
            "to_inference_data": lambda: pyro_gwg.to_inference_data(mcmc),
        }[args.child]
        reset = _reset_peak()
        before = _status()["VmRSS"]
        clock = time.perf_counter()
        result = call()
        seconds = time.perf_counter() - clock
        out[args.child] = _measure(baseline, before, _status(), seconds, stored)
        out[args.child]["peak_reset"] = reset
        del result
    return out


def _measure(baseline: int, before: int, status: Dict[str, int], seconds: float, stored: int):
    peak = status["VmHWM"]
    return {
        "seconds": seconds,
        "rss_before_kib": before,
        "peak_kib": peak,
        "rss_after_kib": status["VmRSS"],
        "peak_over_baseline_bytes": (peak - baseline) * 1024,
        "ratio_peak_to_stored": (peak - baseline) * 1024 / stored,
        "ratio_extra_to_stored": (peak - before) * 1024 / stored,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 8 x 20,000 draws")
    parser.add_argument("--chains", type=int, help="chains (default 64, quick 8)")
    parser.add_argument("--samples", type=int, help="draws per chain (default 200000)")
    parser.add_argument("--size", type=int, default=10, help="side of the Ising lattice")
    parser.add_argument("--coupling", type=float, default=0.4)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated cases")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label", default="", help="a tag stored with the results")
    parser.add_argument("--output", type=Path, help="JSON path (default under results/)")
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.chains is None:
        args.chains = 8 if args.quick else 64
    if args.samples is None:
        args.samples = 20000 if args.quick else 200000
    if args.child:
        print(json.dumps(child(args)))
        return
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error("unknown case(s) {}; choose from {}".format(unknown, list(CASES)))
    results = {
        "benchmark": "memory",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "machine": {**machine_info(), "load_average": os.getloadavg()},
        "code": code_info(),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "cases": {},
    }
    settings = [
        "--chains={}".format(args.chains),
        "--samples={}".format(args.samples),
        "--size={}".format(args.size),
        "--coupling={}".format(args.coupling),
        "--threads={}".format(args.threads),
        "--seed={}".format(args.seed),
    ]
    for case in cases:
        command = [sys.executable, os.path.abspath(__file__), "--child", case] + settings
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            results["cases"][case] = {"failed": done.returncode, "stderr": done.stderr[-3000:]}
            continue
        measured = json.loads(done.stdout.strip().splitlines()[-1])
        results["cases"][case] = measured
        row = measured[case]
        print(
            "{:>18}: peak {:7.3f} GB over the baseline = {:5.2f} x stored draws "
            "({:.3f} GB); {:7.1f} s".format(
                case,
                row["peak_over_baseline_bytes"] / 1e9,
                row["ratio_peak_to_stored"],
                measured["stored_draws_bytes"] / 1e9,
                row["seconds"],
            ),
            flush=True,
        )
    path = args.output or RESULTS / "memory{}.json".format("_quick" if args.quick else "")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print("wrote {}".format(path))


if __name__ == "__main__":
    main()
