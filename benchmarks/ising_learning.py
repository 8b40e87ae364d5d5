r"""Learning Ising couplings by persistent contrastive divergence: log RMSE of the learned
couplings against MCMC steps per iteration, Gibbs against GWG (Grathwohl et al. 2021,
Section 6, Fig. 6 and Appendix F.2, at small scale).

What is measured
----------------
The true model is the periodic ``L x L`` lattice Ising model in the paper's convention,
:math:`\log p(x) = s^\top J s + b^\top s`, :math:`J = \theta A` (``A`` the lattice
adjacency matrix), zero field: ``pyro_gwg.models.ising(lattice_couplings(L, theta))``.
Its training set is ``--data`` states, the final states of as many independent
systematic-scan Gibbs chains run for ``--data-sweeps`` sweeps from uniform noise (the
paper runs one long Gibbs chain).

The learner is ``pyro_gwg.contrib.train.learnable_ising`` (couplings and field as
``pyro.param``, initialised at zero) fitted with ``pyro_gwg.contrib.train.PCD``: ``--chains``
persistent chains started from uniform noise, a batch of ``--chains`` data points per
iteration, Adam with learning rate ``--lr``, an L1 penalty of strength ``--l1`` on the
couplings, ``--iterations`` updates. For each number of MCMC steps per iteration in
``--steps`` and each sampler (``gibbs``: single-site random-scan Gibbs, ``gwg``:
single-flip Gibbs-With-Gradients, both eager), the RMSE between the learned and true
coupling matrices (all ``D^2`` entries) is recorded every ``--every`` iterations, with
the wall-clock time and the model evaluations of the chains. Each setting is repeated
for ``--seeds`` seeds (data shared); the table reports the mean and standard error of
the final natural-log RMSE.

Run from the repository root::

    PYTHONPATH=. python benchmarks/ising_learning.py            # full (about 10 min)
    PYTHONPATH=. python benchmarks/ising_learning.py --quick    # about a minute

Results: ``benchmarks/results/ising_learning[_quick].json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Dict, List, Optional

import pyro
import torch
from sampling_common import (
    code_info,
    common_arguments,
    configure,
    fill_defaults,
    metadata,
    run_and_report,
)

from pyro_gwg import GWG, MCMC, Gibbs
from pyro_gwg.contrib.train import PCD, coupling_rmse, learnable_ising, symmetric_couplings
from pyro_gwg.models import ising, lattice_couplings

SAMPLERS = {"gibbs": lambda: Gibbs(), "gwg": lambda: GWG()}


def training_data(couplings: torch.Tensor, args: argparse.Namespace) -> torch.Tensor:
    """``--data`` states from independent systematic-scan Gibbs chains."""
    size = couplings.shape[0]
    kernel = Gibbs(ising, scan="systematic", jit_compile=True)
    mcmc = MCMC(
        kernel,
        num_samples=1,
        warmup_steps=args.data_sweeps * size,
        num_chains=args.data,
        disable_progbar=True,
    )
    mcmc.run(couplings)
    return mcmc.get_samples()["x"].reshape(args.data, size)


def train_one(name, steps, seed, data, true, args) -> Dict[str, object]:
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    num_spins = true.shape[0]
    pcd = PCD(
        learnable_ising,
        SAMPLERS[name](),
        num_chains=args.chains,
        mcmc_steps=steps,
        lr=args.lr,
        penalty={"couplings": args.l1},
        model_args=(num_spins,),
    )
    codes = pcd.data_codes(data)
    curve, seconds = [], 0.0
    for t in range(args.iterations):
        batch = codes[torch.randint(0, codes.shape[0], (args.chains,))]
        start = time.perf_counter()
        pcd.step(batch)
        seconds += time.perf_counter() - start
        if (t + 1) % args.every == 0 or t + 1 == args.iterations:
            rmse = float(coupling_rmse(symmetric_couplings(pyro.param("couplings")), true))
            curve.append({"iteration": t + 1, "rmse": rmse, "seconds": seconds})
    return {
        "sampler": name,
        "steps": steps,
        "seed": seed,
        "curve": curve,
        "final_rmse": curve[-1]["rmse"],
        "log_rmse": math.log(curve[-1]["rmse"]),
        "seconds": seconds,
        "evaluations": pcd.evaluations,
    }


def summarise(runs: List[Dict[str, object]]) -> List[Dict[str, object]]:
    rows = []
    for name in SAMPLERS:
        for steps in sorted({r["steps"] for r in runs}):
            group = [r for r in runs if r["sampler"] == name and r["steps"] == steps]
            if not group:
                continue
            logs = torch.tensor([r["log_rmse"] for r in group], dtype=torch.float64)
            se = float(logs.std() / math.sqrt(len(group))) if len(group) > 1 else float("nan")
            rows.append(
                {
                    "sampler": name,
                    "steps": steps,
                    "log_rmse_mean": float(logs.mean()),
                    "log_rmse_se": se,
                    "seconds_mean": sum(r["seconds"] for r in group) / len(group),
                    "evaluations_mean": sum(r["evaluations"] for r in group) / len(group),
                }
            )
    return rows


def run_benchmark(args: argparse.Namespace) -> Dict[str, object]:
    code = code_info()
    configure(args)
    true = lattice_couplings(args.size, args.theta)
    start = time.perf_counter()
    data = training_data(true, args)
    data_s = time.perf_counter() - start
    print(
        "{} training states in {:.1f}s; initial RMSE {:.4f}".format(
            args.data, data_s, float(true.pow(2).mean().sqrt())
        ),
        file=sys.stderr,
    )
    runs = []
    for steps in args.steps:
        for name in args.samplers:
            for seed in range(args.seed, args.seed + args.seeds):
                runs.append(train_one(name, steps, seed, data, true, args))
                r = runs[-1]
                print(
                    "{:<6} steps {:>3} seed {}: log RMSE {:7.3f} ({:.1f}s)".format(
                        name, steps, seed, r["log_rmse"], r["seconds"]
                    ),
                    file=sys.stderr,
                )
    return {
        **metadata("ising_learning", args, code),
        "num_spins": args.size**2,
        "initial_rmse": float(true.pow(2).mean().sqrt()),
        "data_s": data_s,
        "runs": runs,
        "summary": summarise(runs),
    }


def print_table(results: Dict[str, object]) -> None:
    print("| steps / iteration | sampler | log RMSE (mean ± se) | seconds | evaluations |")
    print("|---:|---|---:|---:|---:|")
    for row in results["summary"]:
        print(
            "| {} | {} | {:.3f} ± {:.3f} | {:.1f} | {:.3g} |".format(
                row["steps"],
                row["sampler"],
                row["log_rmse_mean"],
                row["log_rmse_se"],
                row["seconds_mean"],
                row["evaluations_mean"],
            )
        )


def plot(results: Dict[str, object], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for name in SAMPLERS:
        rows = [r for r in results["summary"] if r["sampler"] == name]
        if not rows:
            continue
        left.errorbar(
            [r["steps"] for r in rows],
            [r["log_rmse_mean"] for r in rows],
            yerr=[0.0 if math.isnan(r["log_rmse_se"]) else r["log_rmse_se"] for r in rows],
            marker="o",
            capsize=3,
            label=name,
        )
        for r in results["runs"]:
            if r["sampler"] == name and r["steps"] == max(results["settings"]["steps"]):
                right.plot(
                    [c["iteration"] for c in r["curve"]],
                    [math.log(c["rmse"]) for c in r["curve"]],
                    color="C0" if name == "gibbs" else "C1",
                    alpha=0.7,
                    label=name if r["seed"] == results["settings"]["seed"] else None,
                )
    left.set_xscale("log")
    left.set_xlabel("MCMC steps per training iteration")
    left.set_ylabel("log RMSE of the couplings (final)")
    left.set_title(
        "{0}x{0} lattice Ising, theta = {1}".format(
            results["settings"]["size"], results["settings"]["theta"]
        )
    )
    left.legend()
    right.set_xlabel("training iteration")
    right.set_ylabel("log RMSE")
    right.set_title("{} steps per iteration".format(max(results["settings"]["steps"])))
    right.legend()
    fig.savefig(path, dpi=110)
    print("wrote {}".format(path))


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    common_arguments(parser)
    parser.add_argument("--size", type=int, help="lattice side L (default 10; quick 5)")
    parser.add_argument("--theta", type=float, default=0.2, help="coupling theta (default 0.2)")
    parser.add_argument("--steps", type=int, nargs="+", help="MCMC steps per iteration")
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    parser.add_argument("--iterations", type=int, help="PCD updates (default 500; quick 150)")
    parser.add_argument("--chains", type=int, default=256, help="persistent chains and batch")
    parser.add_argument("--lr", type=float, default=0.003, help="Adam learning rate")
    parser.add_argument("--l1", type=float, default=0.01, help="L1 strength on the couplings")
    parser.add_argument("--data", type=int, default=2000, help="training states")
    parser.add_argument("--data-sweeps", type=int, help="Gibbs sweeps per data state")
    parser.add_argument("--seeds", type=int, help="repeats per setting (default 2; quick 1)")
    parser.add_argument("--every", type=int, default=25, help="RMSE every this many updates")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "size": 5 if quick else 10,
        "steps": [5, 25] if quick else [5, 10, 25, 50],
        "iterations": 150 if quick else 500,
        "data_sweeps": 100 if quick else 200,
        "seeds": 1 if quick else 2,
    }
    fill_defaults(args, "ising_learning", defaults)
    return args


def main(argv: Optional[List[str]] = None) -> Dict[str, object]:
    return run_and_report(parse_args(argv), run_benchmark, plot, print_table)


if __name__ == "__main__":
    main()
