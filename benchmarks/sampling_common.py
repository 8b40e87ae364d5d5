"""Helpers shared by the sampling benchmarks (``ising_sampling.py``,
``rbm_sampling.py``, ``fhmm_sampling.py``): driving a kernel on batched chains with
timing and evaluation counts, run metadata, JSON output."""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Optional

import pyro
import torch
from step_cost import code_info, machine_info

import pyro_gwg
from pyro_gwg import DMALA, GWG, HammingBall, LocallyBalanced
from pyro_gwg.diagnostics import chain_ess

RESULTS = Path(__file__).resolve().parent / "results"

#: the kernels of :data:`pyro_gwg.REGISTRY` (and DMALA, NCG's other name) under their
#: lower-case names; they run with their defaults (step sizes adapt in warmup), except
#: for the settings below
KERNELS = {name.lower(): kernel for name, kernel in {**pyro_gwg.REGISTRY, "DMALA": DMALA}.items()}
#: short names with settings of their own (path lengths adapt in warmup)
SETTINGS = {
    "pas": ("pas", {"num_flips": "auto"}),
    "pafs": ("pafs", {"num_flips": "auto"}),
    "gwg-auto": ("gwg", {"num_flips": "auto"}),
}
#: ``gwg-<balancing>``: GWG with another balancing function
BALANCING = ("barker", "min", "max")


def sampler(name: str, model, **kwargs):
    """A kernel from its short name, with ``jit_compile=True``.

    Every kernel of :data:`pyro_gwg.REGISTRY` under its lower-case name (``gwg``,
    ``ncg``, ``dmala``, ``dula``, ``avg``, ``pavg``, ``pas`` and ``pafs`` with their
    path length adapted, ``dlmc``, ``gibbs``, ...), and ``hb-B-R`` (Hamming ball, block
    ``B``, radius ``R``; extra keyword ``blocks`` for fixed blocks), ``gwg-N`` (``N``
    flips per proposal), ``gwg-N-nr`` (``N`` distinct coordinates), ``gwg-rR`` (ordinal
    coordinates jump by up to ``R``), ``gwg-barker``,
    ``gwg-min``, ``gwg-max`` (balancing functions), ``gwg-auto`` (``num_flips``
    adapted), ``lb`` (exact locally balanced).
    """
    kernel, settings = SETTINGS.get(name, (name, {}))
    if kernel in KERNELS:
        return KERNELS[kernel](model, jit_compile=True, **settings, **kwargs)
    if name.startswith("gwg-") and name.split("-")[1] in BALANCING:
        return GWG(model, balancing=name.split("-")[1], jit_compile=True, **kwargs)
    if name.startswith("gwg-") and name.endswith("-nr"):  # without replacement
        flips = int(name.split("-")[1])
        return GWG(model, num_flips=flips, replacement=False, jit_compile=True, **kwargs)
    if name.startswith("gwg-r"):  # the largest jump of ordinal coordinates
        return GWG(model, radius=int(name[len("gwg-r") :]), jit_compile=True, **kwargs)
    if name.startswith("hb-"):
        block_size, radius = (int(v) for v in name.split("-")[1:])
        return HammingBall(model, block_size=block_size, radius=radius, jit_compile=True, **kwargs)
    if name.startswith("gwg-"):
        return GWG(model, num_flips=int(name.split("-")[1]), jit_compile=True, **kwargs)
    if name == "lb":
        return LocallyBalanced(model, jit_compile=True, **kwargs)
    raise ValueError("unknown sampler {!r}".format(name))


def run_chains(
    kernel,
    model_args: tuple,
    num_chains: int,
    num_steps: int,
    observe: Callable[[torch.Tensor], torch.Tensor],
    every: int = 1,
    initial: Optional[Dict[str, torch.Tensor]] = None,
    model_kwargs: Optional[dict] = None,
    warmup: int = 0,
) -> Dict[str, object]:
    """Run ``num_chains`` batched chains for ``num_steps`` transitions.

    ``observe(codes [C, D])`` is called on the initial state and after every
    ``every``-th step; its results are stacked. The chains run through the kernel's chain
    driver as :class:`pyro_gwg.MCMC` runs them, ``every`` transitions per call of the
    compiled block (``kernel.driver.run``, no per-step host synchronisation); the first
    two blocks (compilation, and the compiler's own second-call optimisation) are timed
    apart and their steps counted at the average cost of the others.

    ``warmup`` adaptation steps run first (untimed, unobserved; the kernel's step
    size or path length adapts there, then stays fixed).

    :returns: ``observations [num_steps // every + 1, ...]``, ``seconds`` (all steps),
        ``seconds_per_step``, ``first_step_s`` (the first two blocks), ``setup_s`` (model
        tracing and initial state), per-chain mean totals ``energy_evals`` and
        ``grad_evals``, ``accept_rate``.
    """
    kernel.vectorized_chains = num_chains
    kernel.initial_params = initial
    start = time.perf_counter()
    kernel.setup(warmup, *model_args, **(model_kwargs or {}))
    driver = kernel.driver
    if warmup:
        driver.run(warmup)
    setup = time.perf_counter() - start
    observations = [observe(driver.state.codes)]
    totals = {"energy_evals": 0, "grad_evals": 0, "accepted": 0}

    def on_block(t: int, info, codes: torch.Tensor, log_joint: torch.Tensor) -> None:
        totals["energy_evals"] = totals["energy_evals"] + info.energy_evals.sum(1)
        totals["grad_evals"] = totals["grad_evals"] + info.grad_evals.sum(1)
        totals["accepted"] = totals["accepted"] + info.accepted.double().sum(1)
        observations.append(observe(driver.state.codes))

    # the first two blocks: compilation, then TorchScript's profiling run (a second
    # call that optimises the graph), both far slower than the steady state
    first_steps = min(2 * every, num_steps)
    start = time.perf_counter()
    driver.run(first_steps, on_block, every)
    first = time.perf_counter() - start
    start = time.perf_counter()
    driver.run(num_steps - first_steps, on_block, every)
    seconds = time.perf_counter() - start
    energy_evals, grad_evals, accepted = (
        totals[k] for k in ("energy_evals", "grad_evals", "accepted")
    )
    per_step = seconds / max(num_steps - first_steps, 1)
    return {
        "observations": torch.stack(observations),
        "seconds": seconds + first_steps * per_step,  # the first blocks at the average cost
        "seconds_per_step": per_step,
        "first_step_s": first,
        "setup_s": setup,
        "energy_evals": float(torch.as_tensor(energy_evals).double().mean()),
        "grad_evals": float(torch.as_tensor(grad_evals).double().mean()),
        "accept_rate": float(torch.as_tensor(accepted).mean()) / max(num_steps, 1),
    }


def summary(values: torch.Tensor) -> Dict[str, float]:
    """Mean, median and standard error of the mean over chains."""
    se = float(values.std() / math.sqrt(values.numel())) if values.numel() > 1 else 0.0
    return {"mean": float(values.mean()), "median": float(values.median()), "se": se}


def ess_report(series: torch.Tensor, run: Dict[str, object], burn_in: float) -> Dict[str, object]:
    """ESS of a statistic ``series [C, T]`` (one value per step) after discarding the
    first ``burn_in`` fraction, per run, per second and per 1000 model evaluations
    (forward plus gradient passes) of the kept steps: mean, median and standard error
    over chains of the natural log."""
    num_steps = series.shape[1]
    kept = series[:, int(burn_in * num_steps) :]
    fraction = kept.shape[1] / num_steps
    ess = chain_ess(kept)
    log_ess = ess.log()
    evaluations = (run["energy_evals"] + run["grad_evals"]) * fraction
    return {
        "ess": ess.tolist(),
        "log_ess": summary(log_ess),
        "log_ess_per_second": summary(log_ess - math.log(run["seconds"] * fraction)),
        "log_ess_per_1000_evals": summary(log_ess - math.log(evaluations / 1000)),
    }


def configure(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    pyro.set_rng_seed(args.seed)


def metadata(name: str, args: argparse.Namespace, code: Dict[str, object]) -> Dict[str, object]:
    return {
        "benchmark": name,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "machine": {**machine_info(), "load_average": os.getloadavg()},
        "code": code,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }


def write_json(results: Dict[str, object], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print("wrote {}".format(path))


def common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="smoke run (about a minute)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, help="JSON path (default under results/)")


def fill_defaults(args: argparse.Namespace, name: str, defaults: Dict[str, object]) -> None:
    """Set each argument left at ``None`` to its default (``defaults`` already chosen
    for ``--quick`` or not) and the output path to ``results/<name>[_quick].json``."""
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.output is None:
        args.output = RESULTS / "{}{}.json".format(name, "_quick" if args.quick else "")


def run_and_report(args: argparse.Namespace, run_benchmark, plot, print_table) -> Dict[str, object]:
    """The common ``main`` of the benchmarks: run, write the JSON and the PNG next to it,
    print the table."""
    results = run_benchmark(args)
    write_json(results, args.output)
    plot(results, args.output.with_suffix(".png"))
    print_table(results)
    return results


__all__ = [
    "RESULTS",
    "run_and_report",
    "fill_defaults",
    "code_info",
    "common_arguments",
    "configure",
    "ess_report",
    "metadata",
    "run_chains",
    "sampler",
    "summary",
    "write_json",
]
