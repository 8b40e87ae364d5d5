r"""Normalising constants of an RBM fitted to binarised scikit-learn digits: error
against compute of annealed importance sampling (AIS) and the adaptive resample-move
algorithm (ARM), with GWG and Gibbs transitions.

What is measured
----------------
The target is the Pyro model ``pyro_gwg.models.rbm`` of an RBM with 64 visible units
(the 8 x 8 digits, pixel > 8 set to 1) and ``--hidden`` hidden units, trained by
``pyro_gwg.contrib.train.train_rbm`` (CD-10, Adam, ``--epochs`` passes). Its exact log
normaliser sums the hidden units out and enumerates their ``2^H`` states
(``rbm_log_partition`` less the visible Bernoulli normalisers of the model).

Estimators (``pyro_gwg.contrib.estimators``), each run ``--repeats`` times per budget:

* ``ais-gwg`` / ``ais-gibbs``: AIS from the factorised Bernoulli base fitted to the
  data, linear schedule (Grathwohl et al. 2021, Appendix I.2.1), ``--ais-particles`` particles,
  one kernel step per temperature, ``T`` in ``--ais-steps`` temperatures;
* ``arm-gwg`` / ``arm-gibbs``: ARM (Fraccaro et al. 2016) over the visible units added one at a
  time, most active first; ``R`` in ``--arm-particles`` particles, one sweep
  (``D_n`` single-site kernel steps) per move step, ``gamma_thr = 0.7``,
  ``i_max = --i-max``, residual resampling below an ESS of ``0.7 R``, one run per
  estimate;
* ``arm-reseed-gibbs``: ARM-reseed, new particles from training images brought to
  :math:`p_n` by ``--reseed-steps`` single-site Gibbs steps (``reseed_steps / D_n`` sweeps
  at stage ``n``; one row per value given). Too few leave :math:`\log \hat Z` too high:
  the images' first units are not draws of :math:`p_n` (see
  ``pyro_gwg.contrib.estimators.arm``);
* ``arm-block`` / ``arm-reseed-block``: the same with the RBM's block-Gibbs kernel
  (``pyro_gwg.contrib.kernels.RBMBlockGibbs`` on each stage's RBM, one block sweep per move step
  and ``--reseed-steps`` sweeps per reseed), the structured kernel of the RBM of Fraccaro et
  al. 2016
  experiments, with ``R`` in ``--block-particles`` (its sweeps cost no model run, so
  larger sets fit the same time). AIS cannot use it: it samples the model in closed
  form and ignores the annealed density.

Per estimate: the error of :math:`\log \hat Z`, its reported standard error (AIS), the
wall-clock seconds (eager kernels, one thread), the model evaluations (states at which
a stage model or the annealed model was evaluated) and the coordinate evaluations
(each evaluated state times its dimension: the :math:`O(tHn)` cost of Fraccaro et al. 2016,
Section 5, for which ARM's early stages are cheap). The summary per budget reports
the bias, the standard deviation and the RMSE of :math:`\log \hat Z` over repeats.

Run from the repository root (needs scikit-learn, ``pip install -e .[bench]``)::

    PYTHONPATH=. python benchmarks/estimators_rbm.py            # full (about 10 min)
    PYTHONPATH=. python benchmarks/estimators_rbm.py --quick    # about a minute

Results: ``benchmarks/results/estimators_rbm[_quick].json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from typing import Dict, List, Optional

import pyro
import torch
import torch.nn.functional as F
from rbm_sampling import binary_digits
from sampling_common import (
    code_info,
    common_arguments,
    configure,
    fill_defaults,
    metadata,
    run_and_report,
)

from pyro_gwg import GWG, Gibbs
from pyro_gwg.contrib.estimators import activity_order, ais, arm, rbm_stages
from pyro_gwg.contrib.kernels import RBMBlockGibbs
from pyro_gwg.contrib.train import train_rbm
from pyro_gwg.models import rbm, rbm_log_partition
from pyro_gwg.proposals.algorithm import Algorithm

METHODS = (
    "ais-gwg",
    "ais-gibbs",
    "arm-gwg",
    "arm-gibbs",
    "arm-reseed-gibbs",
    "arm-block",
    "arm-reseed-block",
)


class CountingBlockGibbs(RBMBlockGibbs):
    """Block Gibbs that counts its closed-form evaluations (it bypasses the model)."""

    def __init__(self) -> None:
        super().__init__()
        self.evaluations = self.coordinate_evaluations = 0

    def build(self, density) -> Algorithm:
        init, step = super().build(density)

        def counted(state):
            self.evaluations += state.codes.shape[0]
            self.coordinate_evaluations += state.codes.numel()
            return step(state)

        return Algorithm(init, counted)


KERNELS = {"gwg": GWG, "gibbs": Gibbs, "block": CountingBlockGibbs}


def estimate(
    method: str, budget: int, params, data, order, args, reseed_steps: Optional[int] = None
) -> Dict[str, object]:
    """One estimate of log Z with its cost (``reseed_steps``: ARM-reseed's kernel steps
    per reseeded particle)."""
    kernel = KERNELS[method.split("-")[-1]]()
    start = time.perf_counter()
    if method.startswith("ais"):
        result = ais(
            rbm,
            kernel,
            num_particles=args.ais_particles,
            num_steps=budget,
            base={"v": data},
            model_args=tuple(params),
        )
        extra = {"ess": float(result.ess)}
        coordinate_evaluations = result.evaluations * data.shape[1]
    else:
        result = arm(
            rbm_stages(params, order),
            kernel,
            num_particles=budget,
            num_moves=1 if isinstance(kernel, RBMBlockGibbs) else "sweep",
            num_runs=1,
            i_max=args.i_max,
            reseed=data[:, order].long() if "reseed" in method else None,
            reseed_steps=reseed_steps or 0,
        )
        extra = {
            "generate_iterations": int(
                sum(int(s.generate_iterations.sum()) for s in result.stages)
            ),
            "resampled_stages": int(sum(int(s.resampled.sum()) for s in result.stages)),
        }
        coordinate_evaluations = result.coordinate_evaluations
    seconds = time.perf_counter() - start
    evaluations = result.evaluations
    if isinstance(kernel, CountingBlockGibbs):
        evaluations += kernel.evaluations
        coordinate_evaluations += kernel.coordinate_evaluations
    return {
        "log_z": float(result.log_z),
        "log_z_se": float(result.log_z_se),
        "seconds": seconds,
        "evaluations": evaluations,
        "coordinate_evaluations": coordinate_evaluations,
        **extra,
    }


def summarise(estimates: List[Dict[str, object]], exact: float) -> List[Dict[str, object]]:
    rows = []
    variants = dict.fromkeys((e["method"], e.get("reseed_steps")) for e in estimates)
    for method, reseed_steps in variants:
        same = [
            e for e in estimates if e["method"] == method and e.get("reseed_steps") == reseed_steps
        ]
        for budget in sorted({e["budget"] for e in same}):
            group = [e for e in same if e["budget"] == budget]
            errors = torch.tensor([e["log_z"] - exact for e in group], dtype=torch.float64)
            rows.append(
                {
                    "method": method,
                    "budget": budget,
                    **({} if reseed_steps is None else {"reseed_steps": reseed_steps}),
                    "repeats": len(group),
                    "bias": float(errors.mean()),
                    "sd": float(errors.std()) if len(group) > 1 else float("nan"),
                    "rmse": float(errors.pow(2).mean().sqrt()),
                    "mean_reported_se": sum(e["log_z_se"] for e in group) / len(group),
                    "seconds": sum(e["seconds"] for e in group) / len(group),
                    "evaluations": sum(e["evaluations"] for e in group) / len(group),
                    "coordinate_evaluations": sum(e["coordinate_evaluations"] for e in group)
                    / len(group),
                }
            )
    return rows


def run_benchmark(args: argparse.Namespace) -> Dict[str, object]:
    code = code_info()
    configure(args)
    data = binary_digits()
    start = time.perf_counter()
    params = train_rbm(data, args.hidden, epochs=args.epochs, lr=args.lr, seed=args.seed)
    train_s = time.perf_counter() - start
    exact = float(rbm_log_partition(params) - F.softplus(params.visible_bias.double()).sum())
    order = activity_order(data)
    print("trained in {:.1f}s; exact log Z {:.4f}".format(train_s, exact), file=sys.stderr)
    estimates = []
    for method in args.methods:
        if method.startswith("ais"):
            budgets = args.ais_steps
        else:
            budgets = args.block_particles if method.endswith("block") else args.arm_particles
        reseed_steps = args.reseed_steps if "reseed" in method else [None]
        for budget, steps in itertools.product(budgets, reseed_steps):
            variant = {} if steps is None else {"reseed_steps": steps}
            for repeat in range(args.repeats):
                pyro.set_rng_seed(args.seed + 1000 * repeat + budget)
                record = estimate(method, budget, params, data, order, args, steps)
                estimates.append(
                    {"method": method, "budget": budget, **variant, "repeat": repeat, **record}
                )
                print(
                    "{:<17} budget {:>5}{} #{}: error {:+.4f} (se {:.4f})  {:6.1f}s".format(
                        method,
                        budget,
                        "" if steps is None else ", {} reseed steps".format(steps),
                        repeat,
                        record["log_z"] - exact,
                        record["log_z_se"],
                        record["seconds"],
                    ),
                    file=sys.stderr,
                )
    return {
        **metadata("estimators_rbm", args, code),
        "data": {"num_examples": data.shape[0], "num_visible": data.shape[1]},
        "train_s": train_s,
        "exact_log_z": exact,
        "estimates": estimates,
        "summary": summarise(estimates, exact),
    }


def print_table(results: Dict[str, object]) -> None:
    print("exact log Z = {:.4f}".format(results["exact_log_z"]))
    print(
        "| method | budget | bias | sd | RMSE | mean reported se | seconds | "
        "evaluations | coordinate evaluations |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results["summary"]:
        print(
            "| {} | {} | {:+.4f} | {:.4f} | {:.4f} | {:.4f} | {:.1f} | {:.3g} | {:.3g} |".format(
                r["method"]
                + ("" if "reseed_steps" not in r else " ({})".format(r["reseed_steps"])),
                r["budget"],
                r["bias"],
                r["sd"],
                r["rmse"],
                r["mean_reported_se"],
                r["seconds"],
                r["evaluations"],
                r["coordinate_evaluations"],
            )
        )


def plot(results: Dict[str, object], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    summary = results["summary"]
    for method, steps in dict.fromkeys((r["method"], r.get("reseed_steps")) for r in summary):
        rows = [r for r in summary if r["method"] == method and r.get("reseed_steps") == steps]
        style = "-o" if method.startswith("ais") else "--s"
        label = method if steps is None else "{} ({} reseed steps)".format(method, steps)
        for ax, key in zip(axes, ("seconds", "coordinate_evaluations")):
            ax.plot([r[key] for r in rows], [r["rmse"] for r in rows], style, label=label)
    for ax, label in zip(axes, ("seconds per estimate", "coordinate evaluations per estimate")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("RMSE of log Z")
    axes[0].set_title("RBM on digits (64 visible, {} hidden)".format(results["settings"]["hidden"]))
    axes[1].set_title("exact log Z = {:.3f}".format(results["exact_log_z"]))
    axes[0].legend()
    fig.savefig(path, dpi=110)
    print("wrote {}".format(path))


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    common_arguments(parser)
    parser.add_argument("--methods", nargs="+", choices=METHODS, help="estimators to run")
    parser.add_argument("--hidden", type=int, default=20, help="hidden units (exact: <= 24)")
    parser.add_argument("--epochs", type=int, help="RBM training passes (default 100; quick 20)")
    parser.add_argument("--lr", type=float, default=1e-2, help="RBM training learning rate")
    parser.add_argument("--ais-steps", type=int, nargs="+", help="AIS temperatures T")
    parser.add_argument("--ais-particles", type=int, default=100, help="AIS particles")
    parser.add_argument("--arm-particles", type=int, nargs="+", help="ARM particles R")
    parser.add_argument("--block-particles", type=int, nargs="+", help="ARM-block particles R")
    parser.add_argument("--i-max", type=int, default=10, help="ARM generate iterations")
    parser.add_argument(
        "--reseed-steps",
        type=int,
        nargs="+",
        default=[200],
        help="ARM-reseed burn-in: kernel steps per reseeded particle (one row each)",
    )
    parser.add_argument("--repeats", type=int, help="estimates per budget (default 5; quick 2)")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "methods": ["ais-gwg", "arm-gwg", "arm-reseed-block"] if quick else list(METHODS),
        "epochs": 20 if quick else 100,
        "ais_steps": [100, 300] if quick else [100, 300, 1000, 3000],
        "arm_particles": [25, 50] if quick else [50, 100, 200, 400],
        "block_particles": [50, 200] if quick else [100, 400, 1600],
        "repeats": 2 if quick else 5,
    }
    fill_defaults(args, "estimators_rbm", defaults)
    return args


def main(argv: Optional[List[str]] = None) -> Dict[str, object]:
    return run_and_report(parse_args(argv), run_benchmark, plot, print_table)


if __name__ == "__main__":
    main()
