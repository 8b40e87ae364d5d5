r"""GWG, NCG, AVG and PAVG on the targets of Rhodes & Gutmann (2022): error and ESS
against wall-clock time.

Targets
-------
* ``ordinal_quadratic`` and ``ordinal_quartic``: :func:`pyro_gwg.models.ordinal_mixture`,
  20 ordinal coordinates on 50 equally spaced values in [-1.5, 3.0], a mixture of
  fully factorised components with the quadratic or the quartic :math:`g_k` (Section
  5.1). Chains start near the lower end of the diagonal ridge, every coordinate at
  lattice index 10, 11 or 12 (uniformly; the reference implementation's point start).
* ``variable_selection``: :func:`pyro_gwg.models.variable_selection` on
  :func:`~pyro_gwg.models.variable_selection_data` (seed 0): 20 covariates in
  correlated pairs plus 80 irrelevant Bernoulli(0.001) bits, 100 bits in all (Section
  5.2, Appendix G). Chains start from prior draws.

Measures (the paper's, Appendix F, against exact values)
--------------------------------------------------------
* ordinal: the mean marginal KL divergence :math:`\frac1d \sum_i
  \mathrm{KL}(q_i \,\|\, p_i)` of the empirical marginals ``q`` of all draws so far,
  and the Frobenius norm of the difference between the empirical and the exact
  covariance (in lattice values);
* variable selection: the mean absolute marginal error
  :math:`\frac1d \sum_i |q_i(1) - p_i(1)|` and the pairwise error
  :math:`\frac1{d^2} \sum_{i,j} \sum_{k,l} |q_{ij}(k,l) - p_{ij}(k,l)|`;
* ESS: the multi-chain effective sample size (Pyro's ``effective_sample_size``) of
  Zanella's statistic, the L1 distance between the chain state and one fixed random
  reference state (the Hamming distance for bits), over all post-warmup draws, and
  the same per second of sampling.

How
---
Every sampler runs ``--chains`` batched chains with ``jit_compile=True`` for
``--warmup`` warmup steps (step-size adaptation for NCG, AVG and PAVG, the
preconditioner fit for PAVG; timed separately), then samples for ``--budget`` seconds
of wall-clock time. The errors are evaluated on the draws available at a geometric
grid of times, so samplers are compared at equal time, not equal steps. Each step is
timed around ``kernel.sample``, which includes the kernel's own bookkeeping. PyTorch
runs on ``--threads`` threads (default 1: the tensors are small, and extra threads on
a shared machine add noise rather than speed).

Run from the repository root::

    PYTHONPATH=. python benchmarks/ncg_targets.py --quick   # about a minute
    PYTHONPATH=. python benchmarks/ncg_targets.py           # full, about 12 minutes

Results go to ``benchmarks/results/ncg_targets.json`` (``ncg_targets_quick.json`` for
``--quick``; ``--output``), one PNG per target next to it
(``ncg_targets_<target>.png``), and the table is printed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple

import pyro
import torch
from pyro.ops.stats import effective_sample_size
from step_cost import code_info, machine_info

from pyro_gwg import AVG, GWG, NCG, PAVG
from pyro_gwg.models import (
    ordinal_mixture,
    ordinal_mixture_moments,
    variable_selection,
    variable_selection_data,
    variable_selection_exact,
)
from pyro_gwg.models.variable_selection import pairwise_tables

SAMPLERS = {"GWG": GWG, "NCG": NCG, "AVG": AVG, "PAVG": PAVG}
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "ncg_targets.json"


class Target(NamedTuple):
    """A benchmark target: the model, how chains start, and its error measures."""

    model: Callable
    args: tuple
    kwargs: dict
    site: str
    initial: Callable[[int], torch.Tensor]  # num_chains -> codes [C, D] (or None)
    errors: Callable[[torch.Tensor], Dict[str, float]]  # codes [C, T, D] -> errors
    values: torch.Tensor  # [V] value of each code (for the ESS statistic)
    labels: Dict[str, str]


# ----------------------------------------------------------------------------- targets
def ordinal_target(form: str) -> Target:
    moments = ordinal_mixture_moments(form=form)
    values = moments.values
    log_p = moments.marginals.log()

    def errors(codes: torch.Tensor) -> Dict[str, float]:
        flat = codes.reshape(-1, codes.shape[-1]).long()
        counts = torch.stack(
            [torch.bincount(flat[:, i], minlength=len(values)) for i in range(flat.shape[1])]
        )
        q = counts.double() / flat.shape[0]
        kl = torch.where(q > 0, q * (q.log() - log_p), torch.zeros_like(q)).sum(-1).mean()
        cov = torch.cov(values[flat].T)
        return {
            "marginal_kl": float(kl),
            "covariance_error": float((cov - moments.covariance).norm()),
        }

    def initial(num_chains: int) -> torch.Tensor:
        return 10 + torch.randint(0, 3, (num_chains, moments.mean.numel()))

    labels = {
        "marginal": "marginal_kl",
        "second": "covariance_error",
        "marginal_label": "mean marginal KL(q || p)",
        "second_label": "covariance error (Frobenius)",
    }
    return Target(ordinal_mixture, (), {"form": form}, "s", initial, errors, values, labels)


def selection_target() -> Target:
    x, y, _ = variable_selection_data(seed=0)
    exact = variable_selection_exact(x, y)
    exact_tables = pairwise_tables(exact.marginals, exact.joint)

    def errors(codes: torch.Tensor) -> Dict[str, float]:
        flat = codes.reshape(-1, codes.shape[-1]).double()
        marginals = flat.mean(0)
        joint = flat.T @ flat / flat.shape[0]
        tables = pairwise_tables(marginals, joint)
        dim = flat.shape[1]
        return {
            "marginal_error": float((marginals - exact.marginals).abs().mean()),
            "pairwise_error": float((tables - exact_tables).abs().sum() / dim**2),
        }

    labels = {
        "marginal": "marginal_error",
        "second": "pairwise_error",
        "marginal_label": "mean |q_i - p_i|",
        "second_label": "pairwise error",
    }
    values = torch.tensor([0.0, 1.0], dtype=torch.float64)
    return Target(variable_selection, (x, y), {}, "", lambda c: None, errors, values, labels)


# ----------------------------------------------------------------------------- runs
def run_sampler(
    name: str, target: Target, num_chains: int, warmup: int, budget: float, seed: int
) -> Dict[str, object]:
    """Warm up, then sample for ``budget`` seconds; codes, step times and statistics."""
    pyro.set_rng_seed(seed)
    kernel = SAMPLERS[name](target.model, jit_compile=True)
    kernel.vectorized_chains = num_chains
    start = target.initial(num_chains)
    if start is not None:
        kernel.initial_params = {target.site: start.to(torch.get_default_dtype())}
    began = time.perf_counter()
    kernel.setup(warmup, *target.args, **target.kwargs)
    params = kernel.initial_params
    setup_s = time.perf_counter() - began
    began = time.perf_counter()
    for _ in range(warmup):
        params = kernel.sample(params)
    warmup_s = time.perf_counter() - began
    draws: List[torch.Tensor] = []
    times: List[float] = []
    elapsed = 0.0
    while elapsed < budget:
        tick = time.perf_counter()
        params = kernel.sample(params)
        elapsed += time.perf_counter() - tick
        draws.append(kernel.state.codes.to(torch.uint8))
        times.append(elapsed)
    stats = kernel.diagnostics()
    out = {
        "codes": torch.stack(draws, dim=1),
        "times": torch.tensor(times, dtype=torch.float64),
        "setup_s": setup_s,
        "warmup_s": warmup_s,
        "acceptance": float(stats["accept_prob"].double().mean()),
        "changed_per_step": float(stats["num_changed"].double().mean()),
    }
    if "step_size" in stats:
        out["step_size_median"] = float(stats["step_size"][0].median())
    fit = getattr(kernel, "preconditioner_fit", None)
    if fit is not None:
        out["preconditioner"] = {"kind": fit.kind, "scale": fit.scale, "losses": fit.losses}
    return out


def zanella_ess(codes: torch.Tensor, values: torch.Tensor, seed: int) -> float:
    """ESS of the L1 distance to one fixed random reference state."""
    gen = torch.Generator().manual_seed(seed)
    reference = torch.randint(0, len(values), (codes.shape[-1],), generator=gen)
    stat = (values[codes.long()] - values[reference]).abs().sum(-1)
    return float(effective_sample_size(stat, chain_dim=0, sample_dim=1))


def evaluate(target: Target, run: Dict[str, object], num_points: int, seed: int):
    codes, times = run.pop("codes"), run.pop("times")
    budget = float(times[-1])
    grid = torch.logspace(math.log10(budget / 50), math.log10(budget), num_points).tolist()
    curve = []
    for t in grid:
        steps = max(int((times <= t).sum()), 2)
        curve.append({"time_s": t, "steps": steps, **target.errors(codes[:, :steps])})
    ess = zanella_ess(codes, target.values, seed)
    run.update(
        steps=codes.shape[1],
        sampling_s=budget,
        ms_per_step=1e3 * budget / codes.shape[1],
        ess=ess,
        ess_per_s=ess / budget,
        final=curve[-1],
        curve=curve,
    )
    return run


def plot(name: str, target: Target, results: Dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for sampler, res in results.items():
        t = [p["time_s"] for p in res["curve"]]
        for ax, key in zip(axes[:2], ("marginal", "second")):
            ax.plot(t, [p[target.labels[key]] for p in res["curve"]], marker="o", label=sampler)
    for ax, key in zip(axes[:2], ("marginal", "second")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("sampling time (s)")
        ax.set_ylabel(target.labels[key + "_label"])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    names = list(results)
    axes[2].bar(names, [results[s]["ess_per_s"] for s in names])
    axes[2].set_ylabel("ESS / s (L1 distance to a reference state)")
    fig.suptitle("{}: {} chains".format(name, len(results) and results[names[0]]["chains"]))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(results: Dict[str, Dict[str, dict]], targets: Dict[str, Target]) -> str:
    head = "{:<19} {:<5} {:>7} {:>8} {:>6} {:>8} {:>10} {:>11} {:>9} {:>8}".format(
        "target",
        "kern.",
        "steps",
        "ms/step",
        "accept",
        "changed",
        "marginal",
        "cov/pair",
        "ESS",
        "ESS/s",
    )
    lines = [head, "-" * len(head)]
    for name, per_sampler in results.items():
        labels = targets[name].labels
        for sampler, res in per_sampler.items():
            lines.append(
                "{:<19} {:<5} {:>7d} {:>8.2f} {:>6.3f} {:>8.2f} {:>10.4f} {:>11.4f} "
                "{:>9.0f} {:>8.1f}".format(
                    name,
                    sampler,
                    res["steps"],
                    res["ms_per_step"],
                    res["acceptance"],
                    res["changed_per_step"],
                    res["final"][labels["marginal"]],
                    res["final"][labels["second"]],
                    res["ess"],
                    res["ess_per_s"],
                )
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (about a minute)")
    parser.add_argument("--chains", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=None, help="default 1000 (quick: 200)")
    parser.add_argument("--budget", type=float, default=None, help="seconds per sampler")
    parser.add_argument("--points", type=int, default=12, help="points of the error curves")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=None, help="JSON path (see above)")
    args = parser.parse_args()
    if args.output is None:  # a smoke run does not overwrite the full results
        args.output = DEFAULT_OUTPUT.with_name(
            DEFAULT_OUTPUT.stem + ("_quick" if args.quick else "") + ".json"
        )
    warmup = args.warmup if args.warmup is not None else (200 if args.quick else 1000)
    budget = args.budget if args.budget is not None else (4.0 if args.quick else 40.0)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    names = ["ordinal_quadratic", "variable_selection"]
    if not args.quick:
        names.insert(1, "ordinal_quartic")
    started = time.perf_counter()
    targets: Dict[str, Target] = {}
    results: Dict[str, Dict[str, dict]] = {}
    for name in names:
        began = time.perf_counter()
        targets[name] = (
            selection_target() if name == "variable_selection" else ordinal_target(name[8:])
        )
        exact_s = time.perf_counter() - began
        results[name] = {}
        for sampler in SAMPLERS:
            run = run_sampler(sampler, targets[name], args.chains, warmup, budget, args.seed)
            run = evaluate(targets[name], run, args.points, args.seed)
            run.update(chains=args.chains, warmup=warmup, exact_summaries_s=exact_s)
            results[name][sampler] = run
            print(
                "{} {}: {} steps, final {}".format(
                    name, sampler, run["steps"], {k: round(v, 4) for k, v in run["final"].items()}
                ),
                flush=True,
            )
        args.output.parent.mkdir(parents=True, exist_ok=True)
        png = args.output.with_name("{}_{}.png".format(args.output.stem, name))
        plot(name, targets[name], results[name], png)
    report = {
        "benchmark": "ncg_targets",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": "python benchmarks/ncg_targets.py" + (" --quick" if args.quick else ""),
        "config": {
            "chains": args.chains,
            "warmup": warmup,
            "budget_s": budget,
            "threads": args.threads,
            "seed": args.seed,
            "jit_compile": True,
        },
        "machine": machine_info(),
        "code": code_info(),
        "total_s": time.perf_counter() - started,
        "results": results,
    }
    args.output.write_text(json.dumps(report, indent=2))
    print()
    print(table(results, targets))
    print("\nwrote {} and its PNGs ({:.0f} s)".format(args.output, report["total_s"]))


if __name__ == "__main__":
    main()
