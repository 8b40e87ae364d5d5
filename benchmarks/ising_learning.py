r"""Learning Ising couplings by persistent contrastive divergence: log RMSE of the learned
couplings against MCMC steps per iteration for Gibbs, GWG, NCG, AVG and PAVG, with a
preconditioner that tracks the coupling estimate (model-specific) or one fitted to the
persistent chains (model-agnostic) (Rhodes & Gutmann 2022, Section 5.3; the Gibbs/GWG
part is Grathwohl et al. 2021, Section 6, Fig. 6), at small scale.

What is measured
----------------
The true model is the periodic ``L x L`` lattice Ising model in the paper's convention,
:math:`\log p(x) = s^\top J s + b^\top s`, :math:`J = \theta A` (``A`` the lattice
adjacency matrix), zero field: ``pyro_gwg.models.ising(lattice_couplings(L, theta))``
(``L = 10``, ``theta = 0.2``: the 100-dimensional model of both papers). Its training
set is ``--data`` states, the final states of as many independent systematic-scan Gibbs
chains run for ``--data-sweeps`` sweeps from uniform noise (the papers run one long
Gibbs chain).

The learner is ``pyro_gwg.contrib.train.learnable_ising`` (couplings and field as
``pyro.param``, initialised at zero; paper 002 fixes the field at its true value, here
it is learned as in the Gibbs/GWG benchmark before) fitted with
``pyro_gwg.contrib.train.PCD``: ``--chains`` persistent chains started from uniform
noise, a batch of ``--chains`` data points per iteration, Adam with learning rate
``--lr``, an L1 penalty of strength ``--l1`` on the couplings, ``--iterations`` updates.
For each number ``K`` of MCMC steps per iteration in ``--steps`` and each sampler the
RMSE between the learned and true coupling matrices (all ``D^2`` entries, the
``rmse.txt`` of paper 002's code) is recorded every ``--every`` iterations, with the
wall-clock time of the PCD steps and the model evaluations of the chains; after
training, ``--diag-steps`` untimed transitions of the final chains at the learned
parameters give the kernel's acceptance probability and accepted coordinate changes
per step. Each setting is repeated for ``--seeds`` seeds (data shared); the table
reports the mean and standard error of the final natural-log RMSE.

Samplers (all eager, ``jit_compile=False``; one step = one kernel transition):

* ``gibbs``: single-site random-scan Gibbs (one coordinate per step);
* ``gwg``: single-flip Gibbs-With-Gradients;
* ``ncg``: ``pyro_gwg.NCG`` with the fixed step size ``--ncg-step-size`` (0.2);
* ``avg``: ``pyro_gwg.AVG`` with the fixed step size ``--avg-step-size`` (0.2);
* ``pavg``: ``pyro_gwg.PAVG`` with the model-specific preconditioner of paper 002
  Section 5.3 following the estimate: ``PCD(..., preconditioner=lambda:
  ising_preconditioner(symmetric_couplings(pyro.param("couplings"))),
  refresh_every=1)`` gives the kernel ``M = 8 J`` of the current ``J`` before the chains
  move in every update. With the exact Hessian of the (quadratic) model the PAVG
  proposal is the exact conditional, so every proposal is accepted: this is the
  block-Gibbs sampler of Martens & Sutskever 2010 that paper 002 calls "PAVG
  model-specific". Step size ``--pavg-step-size`` 2000, i.e. auxiliary diagonal
  :math:`d = 2/\epsilon - \min(\lambda_{\min}(M), 0) = 0.001 + |\lambda_{\min}|`, the
  value of the reference code's block-Gibbs sampler (``epsilon = 1000`` there, with
  ``d = 1/\epsilon - \ldots``).
* ``pavg_agnostic``: ``pyro_gwg.PAVG`` with the model-agnostic preconditioner of paper
  002 Section 5.3, fitted to the persistent chains: ``PCD(...,
  preconditioner="chains", preconditioner_window=--pavg-window, refresh_every=1)``
  refits ``M`` before every update from the chains' states, gradients and log joints
  over the transitions of the last ``--pavg-window`` (10) updates, as PAVG's warmup
  fits it (``M = 0``, AVG, in update 0). Step size ``--pavg-agnostic-step-size`` 0.2,
  the authors' value. ``--add-to results/ising_learning.json`` adds such rows to an
  earlier run with the same settings (same training data) without rerunning the rest.

Step sizes
----------
PCD does no warmup adaptation, so NCG, AVG and PAVG run at fixed step sizes, as in
paper 002 (its released ``run_all_ising_script.py``: NCG 0.5, AVG 0.2, model-agnostic
PAVG 0.2, block-Gibbs PAVG as above, all fixed during PCD). AVG and PAVG use those
values. NCG does not: at ``theta = 0.2`` on the 10x10 lattice, step size 0.5 proposes
about 15 changed coordinates per step and accepts 13 % of them (1.8 accepted changes
per step on the true model), while 0.2 accepts 78 % and moves 3.3 coordinates per
step, the most of the grid 0.1, 0.2, 0.5, 1. The script re-measures this every run
before training (``step_size_check`` in the JSON: each kernel at each step size of
``--check-grid`` / ``--check-pavg-grid`` on the TRUE model, ``--check-steps``
transitions of ``--chains`` chains started at training states; ``used`` marks the
values of the main runs). The PAVG column of the check shows why the block-Gibbs
setting is the large step size: acceptance is 1 at every step size, and the moves per
step grow with it.

A good step size at the true model is not enough inside PCD: Adam moves all 4,950
couplings up by about ``lr`` per update at first (the data are magnetised, so every
pair is positively correlated), and the model passes through a strongly coupled
all-to-all regime that the chains must follow. AVG (0.2) does not with 1 or 3 steps per
update: its acceptance falls below 1 % within the first 25 updates, the chains stay at
their initial noise, the couplings grow linearly and the run diverges (final log RMSE
about -0.2, acceptance 0 at the end); a diagnostic run with step size 0.1 (1 step, 200
updates, not in the results) failed the same way. With 10 or more steps AVG keeps up.

Deviations from paper 002 Section 5.3, for this 2-core machine: ``K`` is the same grid
for every sampler (the paper scales each sampler's ``K`` grid by its run time, e.g.
AVG 1-20, GWG and NCG 1-24, Gibbs 2-40, block Gibbs 3-60; the middle panel of the plot
puts the runs against their wall-clock time instead), 300 updates of 128 chains with
learning rate 0.003 (paper: 2000 updates, batch 50 from a 5000-state buffer, AdamW with
learning rate 3e-4), 2 seeds (paper: 1 run per setting).

GWG's acceptance at the end of training (the ``accept prob`` column) depends on the
phase of training the run is in at its last update, not on ``K`` as such:
``ising_learning_gwg.py`` measures it along training (RESULTS.md explains it with its
numbers): it is low when the persistent chains have fallen into near-ordered states, at
every ``K``.

Run from the repository root::

    PYTHONPATH=. python benchmarks/ising_learning.py            # full (about 25 min)
    PYTHONPATH=. python benchmarks/ising_learning.py --quick    # about a minute

The full run is sized for about 25 minutes of wall time on the shared 2-core machine
(one torch thread, other jobs running): ``K`` in 1, 3, 10, 20, 300 updates, 2 seeds,
5 samplers (eager NCG, AVG and PAVG steps cost about 3 times a GWG step here). The
committed run took 24.5 minutes with 4-5 processes sharing the two cores (2.6 minutes of
it the training data).

Results: ``benchmarks/results/ising_learning[_quick].json`` and ``.png`` (left: final
log RMSE against ``K``, mean ± standard error over seeds, one line per sampler;
middle: the same against training time; right: the learning curves at the largest
``K``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
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

from pyro_gwg import AVG, GWG, MCMC, NCG, PAVG, Gibbs
from pyro_gwg.bridge.density import ModelDensity
from pyro_gwg.contrib.estimators.driver import TemperedDensity, bind_kernel
from pyro_gwg.contrib.train import (
    PCD,
    coupling_rmse,
    ising_preconditioner,
    learnable_ising,
    symmetric_couplings,
)
from pyro_gwg.models import ising, lattice_couplings


def current_preconditioner() -> torch.Tensor:
    """Model-specific PAVG preconditioner at the current estimate: the Hessian ``8 J``
    of the learned Ising model in its bits (it tracks ``J`` as PCD learns it)."""
    return ising_preconditioner(symmetric_couplings(pyro.param("couplings")))


#: ``name -> (kernel factory of args, extra PCD keywords of args)``; all eager, fixed
#: step sizes (PCD does no warmup adaptation)
SAMPLERS = {
    "gibbs": (lambda a: Gibbs(jit_compile=False), lambda a: {}),
    "gwg": (lambda a: GWG(jit_compile=False), lambda a: {}),
    "ncg": (
        lambda a: NCG(step_size=a.ncg_step_size, adapt_step_size=False, jit_compile=False),
        lambda a: {},
    ),
    "avg": (
        lambda a: AVG(step_size=a.avg_step_size, adapt_step_size=False, jit_compile=False),
        lambda a: {},
    ),
    "pavg": (
        lambda a: PAVG(step_size=a.pavg_step_size, adapt_step_size=False, jit_compile=False),
        lambda a: {"preconditioner": current_preconditioner, "refresh_every": a.refresh_every},
    ),
    "pavg_agnostic": (
        lambda a: PAVG(
            step_size=a.pavg_agnostic_step_size, adapt_step_size=False, jit_compile=False
        ),
        lambda a: {
            "preconditioner": "chains",
            "refresh_every": a.refresh_every,
            "preconditioner_window": a.pavg_window,
        },
    ),
}


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


def run_statistics(kernel, energy, codes: torch.Tensor, steps: int) -> Dict[str, float]:
    """``steps`` eager transitions of ``kernel`` on ``energy`` from ``codes``: mean
    acceptance probability, accepted coordinate changes per step and proposed ones,
    seconds per step."""
    driver = bind_kernel(kernel, energy)
    infos = []
    start = time.perf_counter()
    with torch.no_grad():
        driver.init(codes)
        driver.run(steps, observe=lambda t, info, c, log_joint: infos.append(info), every=1)
    seconds = (time.perf_counter() - start) / steps
    accept_prob = torch.cat([i.accept_prob.reshape(-1) for i in infos]).double()
    accepted = torch.cat([i.accepted.reshape(-1) for i in infos])
    changed = torch.cat([i.num_changed.reshape(-1) for i in infos]).double()
    return {
        "accept_prob": float(accept_prob.mean()),
        "flips_per_step": float((changed * accepted).mean()),
        "proposed_flips": float(changed.mean()),
        "seconds_per_step": seconds,
    }


def kernel_statistics(pcd: PCD, steps: int) -> Dict[str, float]:
    """Acceptance and moves of the kernel at the learned parameters: ``steps``
    transitions of the final persistent chains (not counted in the timings)."""
    if steps <= 0:
        return {}
    kernel = pcd.kernel
    if pcd.preconditioner is not None:  # the parameters moved after the last refresh
        kernel = PAVG(
            preconditioner=pcd.refresh_preconditioner(),
            step_size=kernel.step_size,
            adapt_step_size=False,
            jit_compile=False,
        )
    stats = run_statistics(kernel, TemperedDensity(pcd.energy), pcd.chains, steps)
    return {key: stats[key] for key in ("accept_prob", "flips_per_step")}


def step_size_check(true: torch.Tensor, data: torch.Tensor, args) -> List[Dict[str, object]]:
    """The step-size grid behind the fixed step sizes: every kernel on the TRUE model,
    ``--check-steps`` transitions of ``--chains`` chains started at training states
    (draws from it), for NCG and AVG at each of ``--check-grid``, for PAVG with the
    true model's preconditioner at ``--check-pavg-grid``; Gibbs and GWG for scale."""
    if args.check_steps <= 0:
        return []
    model_energy = ModelDensity(ising, (true,))
    energy = TemperedDensity(model_energy)
    codes = model_energy.codes_from_values({"x": data[: args.chains]})
    hessian = ising_preconditioner(true)
    settings = [("gibbs", None, Gibbs(jit_compile=False)), ("gwg", None, GWG(jit_compile=False))]
    for cls in (NCG, AVG):
        for eps in args.check_grid:
            kernel = cls(step_size=eps, adapt_step_size=False, jit_compile=False)
            settings.append((cls.__name__.lower(), eps, kernel))
    for eps in args.check_pavg_grid:
        kernel = PAVG(
            step_size=eps, preconditioner=hessian, adapt_step_size=False, jit_compile=False
        )
        settings.append(("pavg", eps, kernel))
    rows = []
    for name, eps, kernel in settings:
        chosen = {"ncg": args.ncg_step_size, "avg": args.avg_step_size}.get(
            name, args.pavg_step_size if name == "pavg" else None
        )
        stats = run_statistics(kernel, energy, codes, args.check_steps)
        rows.append({"sampler": name, "step_size": eps, "used": eps == chosen, **stats})
        print(
            "check {:<6} eps {:>8}: accept {:.3f}, accepted flips/step {:.2f}".format(
                name, str(eps), stats["accept_prob"], stats["flips_per_step"]
            ),
            file=sys.stderr,
        )
    return rows


def train_one(name, steps, seed, data, true, args) -> Dict[str, object]:
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    num_spins = true.shape[0]
    make_kernel, extra = SAMPLERS[name]
    pcd = PCD(
        learnable_ising,
        make_kernel(args),
        num_chains=args.chains,
        mcmc_steps=steps,
        lr=args.lr,
        penalty={"couplings": args.l1},
        model_args=(num_spins,),
        **extra(args),
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
    evaluations = pcd.evaluations
    return {
        "sampler": name,
        "steps": steps,
        "seed": seed,
        "curve": curve,
        "final_rmse": curve[-1]["rmse"],
        "log_rmse": math.log(curve[-1]["rmse"]),
        "seconds": seconds,
        "evaluations": evaluations,
        **kernel_statistics(pcd, args.diag_steps),
    }


def summarise(runs: List[Dict[str, object]]) -> List[Dict[str, object]]:
    rows = []
    names = [n for n in SAMPLERS if any(r["sampler"] == n for r in runs)]
    for steps in sorted({r["steps"] for r in runs}):
        for name in names:
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
                    **{
                        key + "_mean": sum(r[key] for r in group) / len(group)
                        for key in ("accept_prob", "flips_per_step")
                        if all(key in r for r in group)
                    },
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
    check = step_size_check(true, data, args)
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
        "step_size_check": check,
        "runs": runs,
        "summary": summarise(runs),
    }


def print_table(results: Dict[str, object]) -> None:
    print(
        "| steps / iteration | sampler | log RMSE (mean ± se) | seconds | evaluations "
        "| accept prob | flips / step |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|")
    for row in results["summary"]:
        print(
            "| {} | {} | {:.3f} ± {:.3f} | {:.1f} | {:.3g} | {:.3f} | {:.2f} |".format(
                row["steps"],
                row["sampler"],
                row["log_rmse_mean"],
                row["log_rmse_se"],
                row["seconds_mean"],
                row["evaluations_mean"],
                row.get("accept_prob_mean", float("nan")),
                row.get("flips_per_step_mean", float("nan")),
            )
        )


def plot(results: Dict[str, object], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = results["settings"]
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 4.4), constrained_layout=True)
    longest = max(settings["steps"])
    for index, name in enumerate(SAMPLERS):
        rows = [r for r in results["summary"] if r["sampler"] == name]
        if not rows:
            continue
        color = "C{}".format(index)
        yerr = [0.0 if math.isnan(r["log_rmse_se"]) else r["log_rmse_se"] for r in rows]
        for axis, x in ((left, "steps"), (middle, "seconds_mean")):
            axis.errorbar(
                [r[x] for r in rows],
                [r["log_rmse_mean"] for r in rows],
                yerr=yerr,
                marker="o",
                capsize=3,
                color=color,
                label=name,
            )
        runs = [r for r in results["runs"] if r["sampler"] == name and r["steps"] == longest]
        if runs:
            logs = torch.tensor([[math.log(c["rmse"]) for c in r["curve"]] for r in runs])
            mean = logs.mean(0)
            se = logs.std(0) / math.sqrt(len(runs)) if len(runs) > 1 else torch.zeros_like(mean)
            iterations = [c["iteration"] for c in runs[0]["curve"]]
            right.plot(iterations, mean, color=color, label=name)
            right.fill_between(iterations, mean - se, mean + se, color=color, alpha=0.25)
    title = "{0}x{0} lattice Ising, theta = {1}, {2} seed{3}".format(
        settings["size"], settings["theta"], settings["seeds"], "s" if settings["seeds"] > 1 else ""
    )
    left.set_xscale("log")
    left.minorticks_off()
    left.set_xticks(settings["steps"])
    left.set_xticklabels([str(k) for k in settings["steps"]])
    left.set_xlabel("MCMC steps per PCD iteration")
    left.set_ylabel("log RMSE of the couplings (final, mean ± se)")
    left.set_title(title)
    left.legend()
    middle.set_xscale("log")
    middle.set_xlabel("training wall-clock seconds (PCD steps, 1 thread)")
    middle.set_ylabel("log RMSE of the couplings (final)")
    middle.set_title("the same runs against their cost")
    right.set_xlabel("PCD iteration")
    right.set_ylabel("log RMSE (mean ± se over seeds)")
    right.set_title("learning curves, {} steps per iteration".format(longest))
    right.legend()
    fig.savefig(path, dpi=110)
    plt.close(fig)
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
    parser.add_argument("--iterations", type=int, help="PCD updates (default 300; quick 150)")
    parser.add_argument("--chains", type=int, default=128, help="persistent chains and batch")
    parser.add_argument("--lr", type=float, default=0.003, help="Adam learning rate")
    parser.add_argument("--l1", type=float, default=0.01, help="L1 strength on the couplings")
    parser.add_argument("--data", type=int, default=2000, help="training states")
    parser.add_argument("--data-sweeps", type=int, help="Gibbs sweeps per data state")
    parser.add_argument("--seeds", type=int, help="repeats per setting (default 2; quick 1)")
    parser.add_argument("--every", type=int, default=25, help="RMSE every this many updates")
    parser.add_argument(
        "--ncg-step-size", type=float, default=0.2, help="fixed NCG epsilon (default 0.2)"
    )
    parser.add_argument(
        "--avg-step-size", type=float, default=0.2, help="fixed AVG epsilon (default 0.2)"
    )
    parser.add_argument(
        "--pavg-step-size",
        type=float,
        default=2000.0,
        help="fixed PAVG epsilon (default 2000: d = 0.001 - min(eig M, 0), block Gibbs)",
    )
    parser.add_argument(
        "--pavg-agnostic-step-size",
        type=float,
        default=0.2,
        help="fixed epsilon of model-agnostic PAVG (default 0.2, the authors' value)",
    )
    parser.add_argument(
        "--pavg-window",
        type=int,
        default=10,
        help="updates whose chains each model-agnostic PAVG fit pools (default 10)",
    )
    parser.add_argument(
        "--refresh-every", type=int, default=1, help="PCD updates between PAVG refreshes"
    )
    parser.add_argument(
        "--add-to",
        type=Path,
        help="results JSON of an earlier run with the same settings: add this run's "
        "samplers' runs to it (replacing that sampler's runs there) and write it back",
    )
    parser.add_argument(
        "--diag-steps",
        type=int,
        default=10,
        help="untimed kernel steps at the learned model for the acceptance statistics",
    )
    parser.add_argument(
        "--check-steps",
        type=int,
        help="steps of the step-size check on the true model (default 50; quick 20; 0: none)",
    )
    parser.add_argument(
        "--check-grid",
        type=float,
        nargs="+",
        default=[0.1, 0.2, 0.5, 1.0],
        help="NCG and AVG step sizes of the check",
    )
    parser.add_argument(
        "--check-pavg-grid",
        type=float,
        nargs="+",
        default=[0.2, 2.0, 2000.0],
        help="PAVG step sizes of the check",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "size": 5 if quick else 10,
        "steps": [1, 5] if quick else [1, 3, 10, 20],
        "iterations": 150 if quick else 300,
        "data_sweeps": 100 if quick else 200,
        "seeds": 1 if quick else 2,
        "check_steps": 20 if quick else 50,
    }
    fill_defaults(args, "ising_learning", defaults)
    return args


#: settings that two runs must share for ``--add-to`` to put their runs in one table
SHARED_SETTINGS = (
    "size", "theta", "steps", "iterations", "chains", "lr", "l1", "data", "data_sweeps",
    "seed", "seeds", "every", "diag_steps",
)  # fmt: skip


def add_to_earlier(args: argparse.Namespace, results: Dict[str, object]) -> Dict[str, object]:
    """The results of ``--add-to`` with this run's samplers' runs in place of its own
    (same settings, so the same training data), the summary recomputed, and this run's
    metadata under ``added_runs``."""
    earlier = json.loads(args.add_to.read_text())
    differ = [k for k in SHARED_SETTINGS if earlier["settings"][k] != results["settings"][k]]
    if differ:
        raise SystemExit("--add-to {}: settings differ: {}".format(args.add_to, differ))
    runs = [r for r in earlier["runs"] if r["sampler"] not in args.samplers] + results["runs"]
    earlier["runs"] = runs
    earlier["summary"] = summarise(runs)
    settings = earlier["settings"]
    settings.update({k: v for k, v in results["settings"].items() if k not in settings})
    settings["samplers"] = [n for n in SAMPLERS if any(r["sampler"] == n for r in runs)]
    added = {k: results[k] for k in ("created", "command", "machine", "code", "data_s")}
    earlier.setdefault("added_runs", []).append({"samplers": args.samplers, **added})
    return earlier


def main(argv: Optional[List[str]] = None) -> Dict[str, object]:
    args = parse_args(argv)
    if args.add_to is None:
        return run_and_report(args, run_benchmark, plot, print_table)
    args.output = args.add_to
    return run_and_report(args, lambda a: add_to_earlier(a, run_benchmark(a)), plot, print_table)


if __name__ == "__main__":
    main()
