r"""Why GWG's acceptance in the Ising learning benchmark (``ising_learning.py``) depends on
``K``: the same PCD runs of single-flip GWG, with the kernel and the learned model
measured every ``--every`` updates.

What is measured
----------------
The setting of ``ising_learning.py`` (its data, learner, optimiser and GWG kernel; the
defaults here are its full run's: 10x10 periodic lattice, ``theta = 0.2``, 2000
training states, 128 chains, Adam 0.003, L1 0.01, 300 updates). For each ``K`` in
``--steps`` and seed, every ``--every`` updates (untimed, on copies of the chains, so
that training is not disturbed):

* ``accept_chains``: GWG's mean acceptance probability over ``--diag-steps``
  transitions from the persistent chains at the current parameters (what
  ``ising_learning.py`` reports at the end of training);
* ``accept_data``: the same from ``--chains`` training states;
* the learned couplings: ``bond``, the mean of :math:`\hat J` over the lattice bonds
  (true value ``theta``), ``off_bond``, the mean of :math:`|\hat J|` elsewhere, and
  ``rmse``;
* the persistent chains: ``magnetisation`` (mean of :math:`|\bar s|` per chain; the
  data's is ``data_magnetisation``), ``field`` (mean of :math:`|\Delta_i(x)|`, the
  change of the log density when bit ``i`` flips, over chains and bits),
  ``uphill`` (mean number of bits per chain whose flip raises the log density);
* ``first_order_error``: the largest :math:`|\tilde\Delta_i(x) - \Delta_i(x)|` over the
  chains and bits, :math:`\tilde\Delta_i = (1 - 2 x_i)\,\partial_i f(x)` the first-order
  estimate that GWG's proposal uses and :math:`\Delta_i` the exact change (each
  flipped state evaluated).

Single-flip GWG proposes bit ``i`` with probability :math:`\propto e^{\tilde\Delta_i(x)/2}`
(mixed with 5 % uniform). For a model whose log density is linear in each bit
(:math:`J` with zero diagonal, as here) :math:`\tilde\Delta = \Delta`, and the
Metropolis-Hastings ratio of a flip :math:`x \to x'` reduces to :math:`Z(x) / Z(x')`,
:math:`Z(x) = \sum_j e^{\Delta_j(x)/2}`: the acceptance measures how many bits are
favourable to flip in ``x`` against ``x'``, not an approximation error.

Run from the repository root::

    PYTHONPATH=. python benchmarks/ising_learning_gwg.py           # about 6 minutes
    PYTHONPATH=. python benchmarks/ising_learning_gwg.py --quick   # about a minute

Results: ``benchmarks/results/ising_learning_gwg[_quick].json`` and ``.png``
(acceptance from the chains against the update, one line per ``K`` and seed; the
learned bond coupling and the chains' mean field on the right).
"""

from __future__ import annotations

import argparse
import sys
from typing import Dict, List, Optional

import pyro
import torch
from ising_learning import run_statistics, training_data
from sampling_common import (
    code_info,
    common_arguments,
    configure,
    fill_defaults,
    metadata,
    run_and_report,
)

from pyro_gwg import GWG
from pyro_gwg.contrib.estimators.driver import TemperedDensity
from pyro_gwg.contrib.train import PCD, coupling_rmse, learnable_ising, symmetric_couplings
from pyro_gwg.models import lattice_couplings


def flip_changes(pcd: PCD, codes: torch.Tensor) -> Dict[str, torch.Tensor]:
    """``exact``: ``[C, D]`` change of the log joint when each bit of each state flips
    (every flipped state evaluated); ``first_order``: GWG's estimate
    :math:`(1 - 2x_i)\\,\\partial_i f(x)` from the gradient in the bits."""
    energy = pcd.energy
    with torch.no_grad():
        base = energy.log_joint(codes)
        num = codes.shape[1]
        flipped = codes.unsqueeze(1).repeat(1, num, 1)
        index = torch.arange(num)
        flipped[:, index, index] = 1 - flipped[:, index, index]
        exact = energy.log_joint(flipped.reshape(-1, num)).reshape(-1, num) - base.unsqueeze(-1)
        grad = energy.value_and_grad(codes)[1].squeeze(-1)
    bits = codes.to(grad.dtype)
    return {"exact": exact, "first_order": (1 - 2 * bits) * grad}


def snapshot(pcd: PCD, data_codes: torch.Tensor, bonds: torch.Tensor, true, args) -> Dict:
    couplings = symmetric_couplings(pyro.param("couplings")).detach()
    off = ~bonds & ~torch.eye(bonds.shape[0], dtype=torch.bool)
    chains = pcd.chains.clone()
    changes = flip_changes(pcd, chains)
    spins = 2 * chains.double() - 1
    energy = TemperedDensity(pcd.energy)
    kernel = GWG(jit_compile=False)
    return {
        "iteration": pcd.iteration,
        "accept_chains": run_statistics(kernel, energy, chains.clone(), args.diag_steps)[
            "accept_prob"
        ],
        "accept_data": run_statistics(kernel, energy, data_codes.clone(), args.diag_steps)[
            "accept_prob"
        ],
        "bond": float(couplings[bonds].mean()),
        "off_bond": float(couplings[off].abs().mean()),
        "rmse": float(coupling_rmse(couplings, true)),
        "magnetisation": float(spins.mean(-1).abs().mean()),
        "field": float(changes["exact"].abs().mean()),
        "uphill": float((changes["exact"] > 0).double().sum(-1).mean()),
        "first_order_error": float((changes["first_order"] - changes["exact"]).abs().max()),
    }


def train_one(steps: int, seed: int, data, true, args) -> Dict[str, object]:
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    num_spins = true.shape[0]
    pcd = PCD(
        learnable_ising,
        GWG(jit_compile=False),
        num_chains=args.chains,
        mcmc_steps=steps,
        lr=args.lr,
        penalty={"couplings": args.l1},
        model_args=(num_spins,),
    )
    codes = pcd.data_codes(data)
    data_codes = codes[: args.chains]
    bonds = true != 0
    trace = []
    for t in range(args.iterations):
        pcd.step(codes[torch.randint(0, codes.shape[0], (args.chains,))])
        if (t + 1) % args.every == 0 or t + 1 == args.iterations:
            trace.append(snapshot(pcd, data_codes, bonds, true, args))
    last = trace[-1]
    print(
        "K {:>3} seed {}: accept {:.3f} (data {:.3f}), bond {:.3f}, field {:.2f}, "
        "magnetisation {:.2f}".format(
            steps,
            seed,
            last["accept_chains"],
            last["accept_data"],
            last["bond"],
            last["field"],
            last["magnetisation"],
        ),
        file=sys.stderr,
    )
    return {"steps": steps, "seed": seed, "trace": trace}


def run_benchmark(args: argparse.Namespace) -> Dict[str, object]:
    code = code_info()
    configure(args)
    true = lattice_couplings(args.size, args.theta)
    data = training_data(true, args)
    data_spins = 2 * data.double() - 1
    runs = [
        train_one(steps, seed, data, true, args)
        for steps in args.steps
        for seed in range(args.seed, args.seed + args.seeds)
    ]
    return {
        **metadata("ising_learning_gwg", args, code),
        "data_magnetisation": float(data_spins.mean(-1).abs().mean()),
        "runs": runs,
    }


def print_table(results: Dict[str, object]) -> None:
    print(
        "| K | seed | accept (chains) | accept (data) | bond J | off-bond abs J "
        "| chains' mean abs field | uphill bits | magnetisation | first-order error |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for run in results["runs"]:
        r = run["trace"][-1]
        print(
            "| {} | {} | {:.3f} | {:.3f} | {:.3f} | {:.4f} | {:.2f} | {:.2f} | {:.2f} "
            "| {:.1e} |".format(
                run["steps"],
                run["seed"],
                r["accept_chains"],
                r["accept_data"],
                r["bond"],
                r["off_bond"],
                r["field"],
                r["uphill"],
                r["magnetisation"],
                r["first_order_error"],
            )
        )


def plot(results: Dict[str, object], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    steps = sorted({run["steps"] for run in results["runs"]})
    for run in results["runs"]:
        color = "C{}".format(steps.index(run["steps"]))
        style = "-" if run["seed"] == results["settings"]["seed"] else "--"
        label = "K = {}, seed {}".format(run["steps"], run["seed"])
        iterations = [r["iteration"] for r in run["trace"]]
        left.plot(
            iterations, [r["accept_chains"] for r in run["trace"]], style, color=color, label=label
        )
        right.plot(iterations, [r["field"] for r in run["trace"]], style, color=color)
    left.set_xlabel("PCD update")
    left.set_ylabel("GWG acceptance from the persistent chains")
    left.legend(fontsize=7)
    right.set_xlabel("PCD update")
    right.set_ylabel("mean |change of log p| of a single flip at the chains")
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
    parser.add_argument("--iterations", type=int, help="PCD updates (default 300; quick 100)")
    parser.add_argument("--chains", type=int, default=128, help="persistent chains and batch")
    parser.add_argument("--lr", type=float, default=0.003, help="Adam learning rate")
    parser.add_argument("--l1", type=float, default=0.01, help="L1 strength on the couplings")
    parser.add_argument("--data", type=int, default=2000, help="training states")
    parser.add_argument("--data-sweeps", type=int, help="Gibbs sweeps per data state")
    parser.add_argument("--seeds", type=int, help="repeats per setting (default 2; quick 1)")
    parser.add_argument("--every", type=int, default=25, help="measure every this many updates")
    parser.add_argument("--diag-steps", type=int, default=10, help="GWG steps per acceptance")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "size": 5 if quick else 10,
        "steps": [1, 3] if quick else [1, 3, 10, 20],
        "iterations": 100 if quick else 300,
        "data_sweeps": 100 if quick else 200,
        "seeds": 1 if quick else 2,
    }
    fill_defaults(args, "ising_learning_gwg", defaults)
    return args


def main(argv: Optional[List[str]] = None) -> Dict[str, object]:
    return run_and_report(parse_args(argv), run_benchmark, plot, print_table)


if __name__ == "__main__":
    main()
