r"""Per-step cost of GWG inside ``pyro.infer.MCMC`` versus a hand-written PyTorch loop.

What is measured
----------------
The target is a ``size x size`` periodic lattice Ising model,
:math:`f(x) = \theta \sum_{\langle ij \rangle} s_i s_j`, :math:`s = 2x - 1`, sampled
with single-flip Gibbs-With-Gradients (Grathwohl et al. 2021, Algorithm 1, proposal
temperature 2) by three variants, one chain each:

* ``hand_eager``: a minimal eager PyTorch loop written for this energy (``torch.roll``
  on a ``[L, L]`` view, autograd for the gradient, ``torch.multinomial`` for the
  flip, ``torch.rand`` for the MH test), caching ``f`` and the proposal of the current
  state so that each step costs one forward and one backward pass;
* ``gwg_eager``: ``pyro.infer.MCMC(pyro_gwg.GWG(lattice_ising))``;
* ``gwg_jit``: the same with ``GWG(..., jit_compile=True)``.

How
---
Machines are noisy, so the variants are interleaved: each of ``--rounds`` rounds runs
every variant once (the order rotates from round to round). A run makes
``--burn-in`` untimed steps (MCMC warmup for GWG; they also let the TorchScript
executor specialise), then ``--steps`` timed steps. For GWG the steps are timestamped
with MCMC's ``hook_fn``, so the per-step time includes MCMC's own per-step work
(logging hook, sample flattening) and excludes setup (model tracing, initial state,
jit compilation), which is reported separately as ``setup_ms``. Ratios to the hand
loop are computed per round and summarised by their median. The target is
``gwg_jit / hand_eager <= 1.5``.

The timed steps double as a correctness check: every round is an independent chain,
so the per-round means of the bond sum :math:`\sum s_i s_j` and of :math:`|m|` give
standard errors; the variants are compared with each other and the bond sum with its
exact value, computed with a row-to-row transfer matrix.

``--profile`` adds a breakdown of the jit GWG step (compiled energy alone, the eager
``gwg_step`` around the compiled energy, ``kernel.sample`` alone, ``MCMC`` around a
kernel that does nothing, the hand loop's energy alone), the top ``cProfile`` entries
of jit GWG inside MCMC and the top ``torch.profiler`` operators (about 1.5 minutes).

Run from the repository root::

    PYTHONPATH=. python benchmarks/step_cost.py            # full (a minute or two)
    PYTHONPATH=. python benchmarks/step_cost.py --quick    # smoke run (seconds)
    PYTHONPATH=. python benchmarks/step_cost.py --profile  # full plus profiles

Results go to ``benchmarks/results/step_cost.json`` (``--output``).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import json
import math
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import pyro
import torch
from pyro.infer import MCMC
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from pyro_gwg import GWG
from pyro_gwg.models import lattice_bonds, lattice_ising

VARIANTS = ("hand_eager", "gwg_eager", "gwg_jit")
TARGET_RATIO = 1.5
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "step_cost.json"


# ----------------------------------------------------------------------------- hand loop
def hand_value_and_grad(x: torch.Tensor, coupling: float, size: int):
    """Ising log density ``f(x)`` (up to a constant) and its gradient, ``x`` float ``[D]``."""
    x = x.detach().requires_grad_()
    s = (2 * x - 1).view(size, size)
    f = coupling * (s * (s.roll(-1, 1) + s.roll(-1, 0))).sum()
    (grad,) = torch.autograd.grad(f, x)
    return f.detach(), grad


def hand_log_proposal(x: torch.Tensor, grad: torch.Tensor, temperature: float) -> torch.Tensor:
    """``log q(i | x) = log_softmax(d / T)`` with ``d_i = -(2 x_i - 1) g_i``."""
    return torch.log_softmax(-(2 * x - 1) * grad / temperature, dim=-1)


def run_hand(
    coupling: float, size: int, steps: int, burn_in: int, temperature: float = 2.0
) -> Dict[str, object]:
    """Single-chain eager GWG loop; times the ``steps`` steps after ``burn_in``.

    :returns: ``per_step_s``, ``states`` (float ``[steps, L, L]``) and ``acceptance``.
    """
    x = torch.randint(0, 2, (size * size,)).to(torch.get_default_dtype())
    f, grad = hand_value_and_grad(x, coupling, size)
    log_q = hand_log_proposal(x, grad, temperature)
    states: List[torch.Tensor] = []
    accepted = 0
    start = 0.0
    for t in range(burn_in + steps):
        if t == burn_in:
            start = time.perf_counter()
        i = torch.multinomial(log_q.exp(), 1)
        x_new = x.clone()
        x_new[i] = 1 - x_new[i]
        f_new, grad_new = hand_value_and_grad(x_new, coupling, size)
        log_q_new = hand_log_proposal(x_new, grad_new, temperature)
        log_ratio = f_new - f + log_q_new[i] - log_q[i]
        accept = bool(torch.rand(()).log() < log_ratio)
        if accept:
            x, f, log_q = x_new, f_new, log_q_new
        if t >= burn_in:
            accepted += accept
            states.append(x)  # x is never modified in place: a reference suffices
    elapsed = time.perf_counter() - start
    return {
        "per_step_s": elapsed / steps,
        "states": torch.stack(states).view(steps, size, size),
        "acceptance": accepted / steps,
    }


# ----------------------------------------------------------------------------- pyro_gwg
def run_gwg(jit: bool, coupling: float, size: int, steps: int, burn_in: int) -> Dict[str, object]:
    """``MCMC(GWG(lattice_ising))``; per-step time from ``hook_fn`` timestamps.

    :returns: ``per_step_s``, ``setup_s`` (time before the first step, less one step),
        ``states`` (float ``[steps, L, L]``) and ``acceptance``.
    """
    stamps: List[float] = []
    first: List[float] = []

    def hook(kernel, params, stage, i):
        now = time.perf_counter()
        if not first:
            first.append(now)
        if stage.startswith("Sample"):
            stamps.append(now)

    kernel = GWG(lattice_ising, jit_compile=jit)
    mcmc = MCMC(kernel, num_samples=steps, warmup_steps=burn_in, disable_progbar=True, hook_fn=hook)
    start = time.perf_counter()
    mcmc.run(size=size, coupling=coupling)
    per_step = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
    return {
        "per_step_s": per_step,
        "setup_s": first[0] - start - per_step,
        "states": mcmc.get_samples()["x"],
        "acceptance": float(mcmc.diagnostics()["acceptance rate"]["chain 0"]),
    }


# ----------------------------------------------------------------------------- correctness
def observables(states: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Bond sum :math:`\\sum s_i s_j` and :math:`|m|` of {0, 1} states ``[N, L, L]``."""
    s = 2 * states - 1
    return {
        "bond_sum": lattice_bonds(s, periodic=True).sum((-2, -1)),
        "abs_magnetisation": s.mean((-2, -1)).abs(),
    }


def exact_mean_bond_sum(coupling: float, size: int) -> Optional[float]:
    r"""Exact :math:`E[\sum s_i s_j] = \partial_\theta \log Z` on the ``size`` torus.

    ``Z = Tr(T^L)`` with the symmetrised row-to-row transfer matrix
    ``T[a, b] = exp(theta (h(a) / 2 + v(a, b) + h(b) / 2))``, ``h`` the bonds inside a
    row and ``v`` those between two rows; ``2^L x 2^L``, so only for ``size <= 10``.
    """
    if size > 10:
        return None
    n = 2**size
    bits = (torch.arange(n).unsqueeze(-1) >> torch.arange(size)) & 1
    s = (2 * bits - 1).double()
    within = (s * s.roll(-1, -1)).sum(-1)
    between = s @ s.T
    theta = torch.tensor(coupling, dtype=torch.float64, requires_grad=True)
    log_t = theta * (within.unsqueeze(-1) / 2 + between + within.unsqueeze(0) / 2)
    shift = log_t.exp().sum(-1).max().log().detach()  # spectral radius of exp(log_t - shift) <= 1
    log_z = size * shift + torch.linalg.matrix_power((log_t - shift).exp(), size).trace().log()
    (grad,) = torch.autograd.grad(log_z, theta)
    return float(grad)


def correctness_report(
    round_means: Dict[str, Dict[str, List[float]]],
    acceptance: Dict[str, List[float]],
    exact_bond_sum: Optional[float],
    conclusive: bool = True,
) -> Dict[str, object]:
    """Means and standard errors from independent rounds; z-scores of the differences."""

    def mean_se(values: List[float]) -> Tuple[float, float]:
        mean = statistics.fmean(values)
        se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan
        return mean, se

    report: Dict[str, object] = {"per_variant": {}, "comparisons": {}}
    summary = {}
    for variant in VARIANTS:
        summary[variant] = {k: mean_se(v) for k, v in round_means[variant].items()}
        report["per_variant"][variant] = {
            **{k: {"mean": m, "se": se} for k, (m, se) in summary[variant].items()},
            "acceptance": statistics.fmean(acceptance[variant]),
        }
    z_scores = []
    for other in VARIANTS[1:]:
        for name in ("bond_sum", "abs_magnetisation"):
            (m1, s1), (m2, s2) = summary["hand_eager"][name], summary[other][name]
            z = (m2 - m1) / math.sqrt(s1**2 + s2**2)
            z_scores.append(z)
            report["comparisons"]["{} {} - hand_eager".format(name, other)] = {
                "difference": m2 - m1,
                "z": z,
            }
    if exact_bond_sum is not None:
        report["exact_bond_sum"] = exact_bond_sum
        for variant in VARIANTS:
            m, se = summary[variant]["bond_sum"]
            z = (m - exact_bond_sum) / se
            z_scores.append(z)
            report["comparisons"]["bond_sum {} - exact".format(variant)] = {
                "difference": m - exact_bond_sum,
                "z": z,
            }
    report["max_abs_z"] = max(abs(z) for z in z_scores)
    report["consistent"] = bool(report["max_abs_z"] < 3.5)
    report["conclusive"] = conclusive
    report["note"] = (
        "standard errors from the spread of the per-round means (independent chains, "
        "burn-in discarded); consistent = every |z| < 3.5; conclusive only with at least "
        "10 sweeps of burn-in and 20 sweeps per round (--quick is not), as chains mix "
        "slowly near the critical coupling"
    )
    return report


# ----------------------------------------------------------------------------- profiling
def _time_calls(fn: Callable[[], object], calls: int) -> float:
    """Mean seconds per call of ``fn`` over ``calls`` calls, after 20 warm-up calls."""
    for _ in range(20):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


class StillKernel(MCMCKernel):
    """A kernel that returns its parameters unchanged: the cost of ``MCMC`` alone."""

    transforms: Dict[str, object] = {}

    def __init__(self, size: int) -> None:
        self.model = None
        self._params = {"x": torch.zeros(size, size)}

    @property
    def initial_params(self) -> Dict[str, torch.Tensor]:
        return self._params

    @initial_params.setter
    def initial_params(self, params: Dict[str, torch.Tensor]) -> None:
        self._params = params

    def sample(self, params: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        return params

    def logging(self) -> Dict[str, str]:
        return {"acc. rate": "1.000"}


def profile_jit_gwg(
    coupling: float, size: int, steps: int, top: int, op_steps: int = 200
) -> Dict[str, object]:
    """Where the time of a jit GWG step goes: layer by layer, cProfile, torch.profiler.

    ``torch.profiler`` records ``op_steps`` steps only: summarising its events takes
    tens of microseconds per operator call.
    """
    from pyro_gwg.proposals.gwg import gwg_step

    op_steps = min(op_steps, steps)
    result: Dict[str, object] = {"steps": steps, "torch_profiler_steps": op_steps}

    # the floor: pyro.infer.MCMC's own per-step work around a kernel that does nothing
    stamps: List[float] = []
    mcmc = MCMC(
        StillKernel(size),
        num_samples=steps,
        warmup_steps=0,
        disable_progbar=True,
        hook_fn=lambda kernel, params, stage, i: stamps.append(time.perf_counter()),
    )
    mcmc.run()
    mcmc_floor_us = 1e6 * (stamps[-1] - stamps[20]) / (len(stamps) - 21)

    # layers: compiled energy < proposal step < kernel.sample < MCMC step
    kernel = GWG(lattice_ising, jit_compile=True)
    kernel.setup(0, size=size, coupling=coupling)
    energy, state = kernel.energy, kernel.state
    layers = {
        "gwg_jit energy.value_and_grad (compiled)": lambda: energy.value_and_grad(state.codes),
        "gwg_step, eager proposal + compiled energy": lambda: gwg_step(
            state, energy.value_and_grad, energy.layout, kernel.temperature, kernel.num_flips
        ),
    }
    params = {"p": kernel.initial_params}

    def sample():
        params["p"] = kernel.sample(params["p"])

    layers["gwg_jit kernel.sample (step + kernel bookkeeping)"] = sample
    x = torch.randint(0, 2, (size * size,)).to(torch.get_default_dtype())
    layers["hand_eager value_and_grad"] = lambda: hand_value_and_grad(x, coupling, size)
    repeats: Dict[str, List[float]] = {k: [] for k in layers}
    for _ in range(3):  # interleaved repeats against noise; the median is kept
        for name, fn in layers.items():
            repeats[name].append(1e6 * _time_calls(fn, steps))
    result["layers_us"] = {k: statistics.median(v) for k, v in repeats.items()}
    result["layers_us"]["MCMC loop alone (a kernel that does nothing)"] = mcmc_floor_us

    # cProfile of the sampling phase of MCMC (enabled from the hook, after warmup)
    profiler = cProfile.Profile()
    _run_profiled(profiler.enable, steps, size, coupling)
    profiler.disable()
    stats = pstats.Stats(profiler)
    entries = []
    for (filename, line, func), (_, ncalls, tottime, cumtime, _) in stats.stats.items():
        where = "{}:{}({})".format(_short_path(filename), line, func)
        entries.append((where, ncalls / steps, 1e6 * tottime / steps, 1e6 * cumtime / steps))
    result["cprofile_note"] = "per MCMC step; cProfile inflates Python-heavy code"
    result["cprofile_by_tottime"] = [
        {"function": w, "calls_per_step": n, "tottime_us": t, "cumtime_us": c}
        for w, n, t, c in sorted(entries, key=lambda e: -e[2])[:top]
    ]
    result["cprofile_by_cumtime"] = [
        {"function": w, "calls_per_step": n, "tottime_us": t, "cumtime_us": c}
        for w, n, t, c in sorted(entries, key=lambda e: -e[3])[:top]
    ]

    # torch.profiler: operators of the sampling phase
    torch_prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    _run_profiled(torch_prof.start, op_steps, size, coupling)
    torch_prof.stop()
    ops = sorted(torch_prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    result["torch_ops"] = [
        {
            "op": e.key,
            "calls_per_step": e.count / op_steps,
            "self_cpu_us": e.self_cpu_time_total / op_steps,
            "cpu_us": e.cpu_time_total / op_steps,
        }
        for e in ops[:top]
    ]
    result["torch_ops_total_calls_per_step"] = sum(e.count for e in ops) / op_steps
    result["torch_profiler_note"] = "per MCMC step; the profiler adds overhead per op"

    # the hand loop's operator count, for comparison
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as hand_prof:
        run_hand(coupling, size, op_steps, 0)
    hand_calls = sum(e.count for e in hand_prof.key_averages())
    result["hand_torch_ops_total_calls_per_step"] = hand_calls / op_steps
    return result


def _run_profiled(start, num_samples: int, size: int, coupling: float) -> None:
    """Run jit GWG in MCMC, calling ``start()`` at the first draw after warmup."""

    def hook(kernel, params, stage, i):
        if stage.startswith("Sample") and i == 0:
            start()

    kernel = GWG(lattice_ising, jit_compile=True)
    mcmc = MCMC(
        kernel, num_samples=num_samples, warmup_steps=100, disable_progbar=True, hook_fn=hook
    )
    mcmc.run(size=size, coupling=coupling)


def _short_path(filename: str) -> str:
    for marker in ("site-packages/", "pyro_gwg/", "benchmarks/"):
        if marker in filename:
            return filename[filename.index(marker) :].replace("site-packages/", "")
    return filename


# ----------------------------------------------------------------------------- driver
def machine_info() -> Dict[str, object]:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "pyro": pyro.__version__,
        "torch_num_threads": torch.get_num_threads(),
    }


def code_info() -> Dict[str, object]:
    """Commit of the checkout and its uncommitted changes under ``pyro_gwg/``."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        return out.stdout.strip()

    try:
        return {
            "commit": git("rev-parse", "HEAD"),
            "uncommitted_package_files": git(
                "status", "--porcelain", "--untracked-files=all", "pyro_gwg"
            ).splitlines(),
        }
    except OSError:
        return {"commit": None}


def summarise(values: List[float]) -> Dict[str, object]:
    return {"rounds": values, "median": statistics.median(values), "min": min(values)}


def run_benchmark(args: argparse.Namespace) -> Dict[str, object]:
    code = code_info()  # at the start: the package was imported just before
    pyro.set_rng_seed(args.seed)
    num_spins = args.size**2
    per_step = {v: [] for v in VARIANTS}
    setup = {v: [] for v in VARIANTS[1:]}
    acceptance = {v: [] for v in VARIANTS}
    round_means = {v: {"bond_sum": [], "abs_magnetisation": []} for v in VARIANTS}
    for r in range(args.rounds):
        order = VARIANTS[r % 3 :] + VARIANTS[: r % 3]
        for variant in order:
            if variant == "hand_eager":
                out = run_hand(args.coupling, args.size, args.steps, args.burn_in)
            else:
                out = run_gwg(
                    variant == "gwg_jit", args.coupling, args.size, args.steps, args.burn_in
                )
                setup[variant].append(1e3 * out["setup_s"])
            per_step[variant].append(1e6 * out["per_step_s"])
            acceptance[variant].append(out["acceptance"])
            for name, values in observables(out["states"]).items():
                round_means[variant][name].append(float(values.mean()))
        print(
            "round {}/{}: ".format(r + 1, args.rounds)
            + ", ".join("{} {:.0f} us".format(v, per_step[v][-1]) for v in VARIANTS),
            file=sys.stderr,
        )

    ratios = {
        "{}/hand_eager".format(v): [a / b for a, b in zip(per_step[v], per_step["hand_eager"])]
        for v in ("gwg_jit", "gwg_eager")
    }
    jit_ratio = statistics.median(ratios["gwg_jit/hand_eager"])
    results: Dict[str, object] = {
        "benchmark": "step_cost",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "machine": machine_info(),
        "code": code,
        "settings": {
            "model": "pyro_gwg.models.lattice_ising (periodic)",
            "size": args.size,
            "coupling": args.coupling,
            "temperature": 2.0,
            "num_flips": 1,
            "num_chains": 1,
            "rounds": args.rounds,
            "timed_steps_per_round": args.steps,
            "burn_in_steps": args.burn_in,
            "threads": args.threads,
            "seed": args.seed,
            "quick": args.quick,
        },
        "per_step_us": {v: summarise(per_step[v]) for v in VARIANTS},
        "setup_ms": {
            **{v: summarise(setup[v]) for v in setup},
            "note": "MCMC.run start to first step, less one step: model tracing, "
            "initial state and (gwg_jit) torch.jit.trace with its eager cross-check",
        },
        "ratios": {k: summarise(v) for k, v in ratios.items()},
        "target": {
            "ratio": "gwg_jit/hand_eager",
            "max": TARGET_RATIO,
            "value": jit_ratio,
            "met": bool(jit_ratio <= TARGET_RATIO),
        },
        "target_met": bool(jit_ratio <= TARGET_RATIO),
        "correctness": correctness_report(
            round_means,
            acceptance,
            exact_mean_bond_sum(args.coupling, args.size),
            conclusive=args.burn_in >= 10 * num_spins and args.steps >= 20 * num_spins,
        ),
    }
    if args.profile:
        print("profiling gwg_jit ...", file=sys.stderr)
        results["profile"] = profile_jit_gwg(args.coupling, args.size, args.steps, args.top)
        layers = results["profile"]["layers_us"]
        for variant in ("gwg_jit", "hand_eager"):
            name = "{} full step (timed rounds, median)".format(variant)
            layers[name] = results["per_step_us"][variant]["median"]
    return results


def print_table(results: Dict[str, object]) -> None:
    per_step, setup = results["per_step_us"], results["setup_ms"]
    ratio = {"hand_eager": None}
    ratio.update({k.split("/")[0]: v["median"] for k, v in results["ratios"].items()})
    acc = results["correctness"]["per_variant"]
    print(
        "{:<11} {:>10} {:>10} {:>10} {:>9} {:>10} {:>9} {:>7}".format(
            "variant", "us/step", "min", "max", "x hand", "setup ms", "bond sum", "|m|"
        )
    )
    for v in VARIANTS:
        print(
            "{:<11} {:>10.1f} {:>10.1f} {:>10.1f} {:>9} {:>10} {:>9.2f} {:>7.3f}".format(
                v,
                per_step[v]["median"],
                per_step[v]["min"],
                max(per_step[v]["rounds"]),
                "-" if ratio[v] is None else "{:.2f}".format(ratio[v]),
                "{:.1f}".format(setup[v]["median"]) if v in setup else "-",
                acc[v]["bond_sum"]["mean"],
                acc[v]["abs_magnetisation"]["mean"],
            )
        )
    target, corr = results["target"], results["correctness"]
    print(
        "target gwg_jit/hand_eager <= {}: {:.2f} -> {}".format(
            target["max"], target["value"], "met" if target["met"] else "NOT met"
        )
    )
    exact = corr.get("exact_bond_sum")
    print(
        "correctness: exact bond sum {}, max |z| {:.2f} -> {}{}".format(
            "n/a" if exact is None else "{:.2f}".format(exact),
            corr["max_abs_z"],
            "consistent" if corr["consistent"] else "INCONSISTENT",
            "" if corr["conclusive"] else " (runs too short: not conclusive)",
        )
    )
    profile = results.get("profile")
    if profile:
        print("\nlayers of the jit GWG step (us/call):")
        for name, us in profile["layers_us"].items():
            print("  {:<46} {:>8.1f}".format(name, us))
        for key in ("tottime", "cumtime"):
            print("\ncProfile, jit GWG inside MCMC, per step, by {}:".format(key))
            print("  {:>9} {:>9} {:>7}  function".format("tot us", "cum us", "calls"))
            for e in profile["cprofile_by_" + key]:
                print(
                    "  {:>9.1f} {:>9.1f} {:>7.2f}  {}".format(
                        e["tottime_us"], e["cumtime_us"], e["calls_per_step"], e["function"]
                    )
                )
        print(
            "\ntorch.profiler, jit GWG inside MCMC, per step ({:.0f} op calls/step; "
            "hand loop: {:.0f}):".format(
                profile["torch_ops_total_calls_per_step"],
                profile["hand_torch_ops_total_calls_per_step"],
            )
        )
        print("  {:>9} {:>9} {:>7}  op".format("self us", "cpu us", "calls"))
        for e in profile["torch_ops"]:
            print(
                "  {:>9.1f} {:>9.1f} {:>7.2f}  {}".format(
                    e["self_cpu_us"], e["cpu_us"], e["calls_per_step"], e["op"]
                )
            )


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 short rounds")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 7; quick 3)")
    parser.add_argument("--steps", type=int, help="timed steps per run (default 4000; quick 300)")
    parser.add_argument("--burn-in", type=int, help="untimed steps first (default 2000; quick 200)")
    parser.add_argument("--size", type=int, default=10, help="lattice side (default 10)")
    parser.add_argument("--coupling", type=float, default=0.4, help="theta (default 0.4)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="also profile jit GWG")
    parser.add_argument("--top", type=int, default=20, help="profile entries kept (default 20)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON path")
    args = parser.parse_args(argv)
    defaults = (3, 300, 200) if args.quick else (7, 4000, 2000)
    for name, default in zip(("rounds", "steps", "burn_in"), defaults):
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.rounds < 2 or args.steps < 2 or args.burn_in < 0:
        parser.error("need --rounds >= 2, --steps >= 2 and --burn-in >= 0")
    return args


def main(argv: Optional[List[str]] = None) -> Dict[str, object]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    results = run_benchmark(args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    print("wrote {}".format(args.output))
    return results


if __name__ == "__main__":
    main()
