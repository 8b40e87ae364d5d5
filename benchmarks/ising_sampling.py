r"""Lattice Ising sampling: ESS of the Hamming statistic against coupling strength
(Grathwohl et al. 2021, Fig. 4 and Appendix F.1).

What is measured
----------------
Targets: the periodic ``L x L`` lattice Ising model in the paper's convention
:math:`\log p(x) = \theta\, s^\top A s`, ``A`` the lattice adjacency matrix (each bond
counted twice), i.e. ``pyro_gwg.models.lattice_ising(L, coupling=2 * theta)``, for
``L`` in ``--sizes`` and :math:`\theta` in ``--thetas``. Samplers (all
``jit_compile=True``): ``gibbs`` (Gibbs-1, random scan), ``hb-10-1`` (Hamming ball,
random blocks of 10, radius 1), ``gwg`` (single flip); ``--samplers`` adds others
(``lb``, ``gwg-3``, ...).

Every sampler runs ``--chains`` batched chains from uniform random states for
``--steps`` steps. The test statistic is the Hamming distance from the chain's state to
one fixed random state with exactly ``D / 2`` ones (Zanella 2020); its effective
sample size per chain (ArviZ, after discarding the first ``--burn-in`` fraction) is
reported per run, per second of sampling and per 1000 model evaluations (forward
passes plus gradient passes), as mean and standard error over chains of the natural
log ESS. Times cover the transitions only (the first, jit-tracing step is counted at
the average cost).

Run from the repository root::

    PYTHONPATH=. python benchmarks/ising_sampling.py            # full (< 15 min, 2 cores)
    PYTHONPATH=. python benchmarks/ising_sampling.py --quick    # about a minute

Results: ``benchmarks/results/ising_sampling[_quick].json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Dict, List, Optional

import torch
from sampling_common import (
    code_info,
    common_arguments,
    configure,
    ess_report,
    fill_defaults,
    metadata,
    run_and_report,
    run_chains,
    sampler,
)

from pyro_gwg.diagnostics import hamming_statistic, reference_state
from pyro_gwg.models import lattice_ising

DEFAULT_SAMPLERS = ("gibbs", "hb-10-1", "gwg")


def run_one(name: str, size: int, theta: float, args: argparse.Namespace) -> Dict[str, object]:
    reference = reference_state(size * size, seed=args.seed)
    initial = {"x": torch.randint(0, 2, (args.chains, size, size)).float()}
    run = run_chains(
        sampler(name, lattice_ising),
        (size, 2 * theta),
        args.chains,
        args.steps,
        observe=lambda codes: hamming_statistic(codes, reference),
        initial=initial,
    )
    series = run.pop("observations")[1:].T  # [C, T]
    return {
        "sampler": name,
        "size": size,
        "theta": theta,
        **ess_report(series, run, args.burn_in),
        **run,
    }


def run_benchmark(args: argparse.Namespace) -> Dict[str, object]:
    code = code_info()
    configure(args)
    runs: List[Dict[str, object]] = []
    for size in args.sizes:
        for theta in args.thetas:
            for name in args.samplers:
                runs.append(run_one(name, size, theta, args))
                r = runs[-1]
                print(
                    "L={} theta={:.2f} {:<8} log ESS {:6.2f} +- {:.2f}   /s {:6.2f}   "
                    "/1k evals {:6.2f}   {:.0f} us/step".format(
                        size,
                        theta,
                        name,
                        r["log_ess"]["mean"],
                        r["log_ess"]["se"],
                        r["log_ess_per_second"]["mean"],
                        r["log_ess_per_1000_evals"]["mean"],
                        1e6 * r["seconds_per_step"],
                    ),
                    file=sys.stderr,
                )
    return {**metadata("ising_sampling", args, code), "runs": runs}


def print_table(results: Dict[str, object]) -> None:
    print(
        "| L | theta | sampler | log ESS | log ESS / s | log ESS / 1k evals | us / step "
        "| evals / step |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for r in results["runs"]:
        steps = results["settings"]["steps"]
        print(
            "| {} | {:.2f} | {} | {:.2f} ± {:.2f} | {:.2f} | {:.2f} | {:.0f} | {:g} |".format(
                r["size"],
                r["theta"],
                r["sampler"],
                r["log_ess"]["mean"],
                r["log_ess"]["se"],
                r["log_ess_per_second"]["mean"],
                r["log_ess_per_1000_evals"]["mean"],
                1e6 * r["seconds_per_step"],
                (r["energy_evals"] + r["grad_evals"]) / steps,
            )
        )


def plot(results: Dict[str, object], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r["size"] for r in results["runs"]})
    metrics = (
        ("log_ess", "log ESS"),
        ("log_ess_per_second", "log ESS / s"),
        ("log_ess_per_1000_evals", "log ESS / 1000 evals"),
    )
    fig, axes = plt.subplots(
        len(sizes), 3, figsize=(13, 3.6 * len(sizes)), squeeze=False, constrained_layout=True
    )
    for row, size in zip(axes, sizes):
        for ax, (key, label) in zip(row, metrics):
            for name in results["settings"]["samplers"]:
                runs = [r for r in results["runs"] if r["size"] == size and r["sampler"] == name]
                ax.errorbar(
                    [r["theta"] for r in runs],
                    [r[key]["mean"] for r in runs],
                    yerr=[r[key]["se"] for r in runs],
                    marker="o",
                    capsize=3,
                    label=name,
                )
            ax.set_title("{0}x{0} lattice: {1}".format(size, label))
            ax.set_xlabel("connectivity strength theta")
            ax.set_ylabel(label)
        row[0].legend()
    fig.savefig(path, dpi=110)
    print("wrote {}".format(path))


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    common_arguments(parser)
    parser.add_argument("--sizes", type=int, nargs="+", help="lattice sides (default 10 20)")
    parser.add_argument("--thetas", type=float, nargs="+", help="couplings theta (paper's Eq. 10)")
    parser.add_argument("--samplers", nargs="+", default=list(DEFAULT_SAMPLERS))
    parser.add_argument("--chains", type=int, help="chains per run (default 16; quick 8)")
    parser.add_argument("--steps", type=int, help="steps per chain (default 20000; quick 1500)")
    parser.add_argument("--burn-in", type=float, default=0.1, help="fraction discarded")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "sizes": [10, 20],
        "thetas": [0.1, 0.25, 0.4] if quick else [0.1, 0.2, 0.3, 0.4, 0.5],
        "chains": 8 if quick else 16,
        "steps": 1500 if quick else 20000,
    }
    fill_defaults(args, "ising_sampling", defaults)
    return args


def main(argv: Optional[List[str]] = None) -> Dict[str, object]:
    return run_and_report(parse_args(argv), run_benchmark, plot, print_table)


if __name__ == "__main__":
    main()
