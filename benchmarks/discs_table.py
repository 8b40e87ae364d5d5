r"""A DISCS-style table: every sampler of the package on the classic discrete targets.

After the DISCS benchmark (Goshvadi et al. 2023), at the scale of a 2-core machine.

What is measured
----------------
Targets (all ordinary Pyro models from :mod:`pyro_gwg.models`):

* ``rbm``: a Bernoulli RBM (64 visible, 25 hidden units) trained by CD-10 on
  scikit-learn's binarised 8 x 8 digits;
* ``cat-rbm``: a categorical RBM (32 visible units of 4 categories, 16 hidden; random
  weights of scale 1);
* ``ising-<theta>``: the 10 x 10 periodic lattice Ising model at three couplings, from
  weak to near-critical (:math:`\theta` = 0.1, 0.25, 0.4);
* ``potts-<theta>``: the 8 x 8 periodic lattice Potts model with 3 states at three
  couplings (0.5, 1.0 and 1.4; the critical coupling is about 1.0);
* ``fhmm``: the posterior of a factorial HMM (200 steps, 5 factors);
* ``maxcut``: the Boltzmann distribution of weighted max-cut on an Erdos-Renyi graph
  (100 nodes, average degree 4, weights :math:`|\mathcal N(0, 1)|`) at temperature 0.5;
  the best and mean cut found are reported beside the ESS;
* ``ordinal``: Rhodes and Gutmann's ordinal lattice target (20 coordinates of 50
  values, a mixture of 25 quadratic components along the diagonal;
  :func:`pyro_gwg.models.ordinal_mixture`), where ``gwg-r4`` (GWG whose ordinal
  coordinates jump by up to 4 values) runs beside single-step GWG. Its statistic is the
  sum of the coordinates, the position along the diagonal (a Hamming distance to a
  random state of 50 values per coordinate barely moves).

Each sampler runs ``--chains`` chains through the chain driver (``kernel.driver``, as
:class:`pyro_gwg.MCMC` runs it), from the same random initial states, for an equal wall-
clock budget (``--budget`` seconds, priced by a 20-step pilot run; at most ``--steps``
and at least ``--min-steps`` steps: a run whose budget bought fewer steps runs the
minimum, over its budget, and is flagged ``min_steps_applied``). The statistic is the
Hamming distance to a fixed random reference state (paper 000's choice); its ESS after
``--burn-in`` is reported per chain: per second, per 1000 model evaluations (forward
plus gradient passes, the kernel's own count), and per step where each chain kept at
least 1,000 draws (``ess_per_step`` is ``None`` otherwise: the estimate of a shorter
chain's autocorrelation is too rough to compare). A sampler that cannot sample a target
(an ``UnsupportedModelError``, or GWG's radius on a target without ordinals) is listed
as such.

Run from the repository root::

    python benchmarks/discs_table.py            # full (about 45 minutes)
    python benchmarks/discs_table.py --quick    # about 4 minutes

Results go to ``benchmarks/results/discs_table[_quick].json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Tuple

import pyro
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sampling_common import (  # noqa: E402
    code_info,
    common_arguments,
    configure,
    ess_report,
    fill_defaults,
    metadata,
    run_chains,
    sampler,
    write_json,
)

from pyro_gwg.contrib.train import train_rbm  # noqa: E402
from pyro_gwg.diagnostics import hamming_statistic  # noqa: E402
from pyro_gwg.models import (  # noqa: E402
    categorical_rbm,
    cut_value,
    erdos_renyi_couplings,
    factorial_hmm,
    ising,
    lattice_ising,
    lattice_potts,
    maxcut_couplings,
    ordinal_mixture,
    random_categorical_rbm,
    random_fhmm,
    rbm,
)
from pyro_gwg.sites import UnsupportedModelError  # noqa: E402

DEFAULT_SAMPLERS = (
    "gibbs",
    "hb-3-1",
    "lb",
    "gwg",
    "gwg-barker",
    "gwg-3",
    "gwg-3-nr",
    "gwg-auto",
    "dmala",
    "dula",
    "avg",
    "pas",
    "pafs",
    "dlmc",
    "gwg-r4",
)
#: per-step ESS needs at least this many kept draws per chain
MIN_KEPT_FOR_ESS_PER_STEP = 1000


MAXCUT_TEMPERATURE = 0.5


def digits_rbm(seed: int) -> tuple:
    from sklearn.datasets import load_digits

    data = torch.tensor(load_digits().data > 7, dtype=torch.float32)
    return tuple(train_rbm(data, 25, epochs=30, lr=1e-2, seed=seed))


def targets(seed: int) -> Dict[str, Tuple[Callable, tuple]]:
    """``{name: (model, args)}``."""
    out: Dict[str, Tuple[Callable, tuple]] = {
        "rbm": (rbm, digits_rbm(seed)),
        "cat-rbm": (
            categorical_rbm,
            random_categorical_rbm(32, 4, 16, weight_scale=1.0, seed=seed),
        ),
    }
    for theta in (0.1, 0.25, 0.4):
        out["ising-{}".format(theta)] = (lattice_ising, (10, theta))
    for theta in (0.5, 1.0, 1.4):
        out["potts-{}".format(theta)] = (lattice_potts, (8, 3, theta))
    fhmm = random_fhmm(200, 5, seed=seed)
    out["fhmm"] = (factorial_hmm, (fhmm.y, *fhmm.params))
    weights = erdos_renyi_couplings(100, 4.0, seed=seed).abs()
    out["maxcut"] = (ising, (maxcut_couplings(weights, MAXCUT_TEMPERATURE),))
    out["ordinal"] = (ordinal_mixture, ())
    return out


def reference(layout, seed: int) -> torch.Tensor:
    """A random state: a uniform value code of every coordinate."""
    generator = torch.Generator().manual_seed(seed)
    sizes = layout.num_values().cpu()
    return (torch.rand(sizes.shape, generator=generator) * sizes).long()


def run_one(name: str, model, model_args, args) -> Dict[str, object]:
    pyro.set_rng_seed(args.seed)
    kernel = sampler(name, model)
    try:
        kernel.vectorized_chains = 1
        kernel.setup(0, *model_args)
    except UnsupportedModelError as error:
        return {"unsupported": str(error).split("\n")[0]}
    except ValueError as error:  # GWG's radius, on a target without ordinals
        if not name.startswith("gwg-r"):
            raise
        return {"unsupported": str(error).split("\n")[0]}
    ref = reference(kernel.energy.layout, args.seed)

    def observe(codes):
        if model is ordinal_mixture:  # the position along the diagonal
            return codes.sum(-1).double()
        return hamming_statistic(codes, ref.to(codes.device))

    # equal wall-clock budgets: a pilot run prices a step, and a sampler whose steps
    # cost more runs fewer of them (at least --min-steps)
    pilot = run_chains(kernel, model_args, args.chains, 20, observe, warmup=args.warmup)
    affordable = args.budget / pilot["seconds_per_step"]
    steps = int(min(args.steps, max(args.min_steps, affordable)))
    pyro.set_rng_seed(args.seed)
    run = run_chains(kernel, model_args, args.chains, steps, observe, warmup=args.warmup)
    series = run.pop("observations")[1:].T  # [C, T]
    report = ess_report(series.double(), run, args.burn_in)
    kept = series.shape[1] - int(args.burn_in * series.shape[1])
    ess = torch.tensor(report.pop("ess"))
    row = {
        "ess_per_step": float((ess / kept).mean()) if kept >= MIN_KEPT_FOR_ESS_PER_STEP else None,
        "kept_per_chain": kept,
        "min_steps_applied": affordable < args.min_steps,
        "log_ess_per_second": report["log_ess_per_second"]["mean"],
        "log_ess_per_1000_evals": report["log_ess_per_1000_evals"]["mean"],
        "accept_rate": run["accept_rate"],
        "steps": steps,
        "evals_per_step": (run["energy_evals"] + run["grad_evals"]) / steps,
        "seconds_per_step": run["seconds_per_step"],
        "setup_s": run["setup_s"] + run["first_step_s"],
    }
    row["final_codes"] = kernel.driver.state.codes
    return row


def plot(results: Dict[str, Dict[str, dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    samplers = sorted({s for rows in results.values() for s in rows})
    fig, axes = plt.subplots(1, 2, figsize=(14, 0.45 * len(samplers) + 2), sharey=True)
    for ax, key, title in (
        (axes[0], "log_ess_per_second", "log ESS per second"),
        (axes[1], "log_ess_per_1000_evals", "log ESS per 1000 evaluations"),
    ):
        grid = torch.full((len(samplers), len(names)), float("nan"))
        for j, target in enumerate(names):
            for i, s in enumerate(samplers):
                row = results[target].get(s, {})
                if key in row:
                    grid[i, j] = row[key]
        image = ax.imshow(grid, aspect="auto", cmap="viridis")
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right")
        ax.set_yticks(range(len(samplers)), samplers)
        ax.set_title(title)
        fig.colorbar(image, ax=ax)
        for i in range(len(samplers)):
            for j in range(len(names)):
                if not math.isnan(float(grid[i, j])):
                    ax.text(
                        j,
                        i,
                        "{:.1f}".format(float(grid[i, j])),
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="w",
                    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print("wrote {}".format(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common_arguments(parser)
    parser.add_argument("--samplers", nargs="+", default=list(DEFAULT_SAMPLERS))
    parser.add_argument("--targets", nargs="+")
    parser.add_argument("--chains", type=int)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--burn-in", type=float, default=0.2)
    parser.add_argument("--budget", type=float, help="seconds of sampling per run")
    parser.add_argument("--min-steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, help="adaptation steps (step sizes, paths)")
    args = parser.parse_args()
    defaults = dict(chains=32, steps=5000, budget=8.0, warmup=300)
    if args.quick:
        defaults = dict(chains=8, steps=300, budget=2.0, warmup=100)
    fill_defaults(args, "discs_table", defaults)
    configure(args)
    all_targets = targets(args.seed)
    chosen = args.targets or list(all_targets)
    results: Dict[str, Dict[str, dict]] = {}
    for target in chosen:
        model, model_args = all_targets[target]
        results[target] = {}
        for name in args.samplers:
            clock = time.perf_counter()
            row = run_one(name, model, model_args, args)
            final = row.pop("final_codes", None)
            if target == "maxcut" and final is not None:
                cuts = cut_value(final, -4 * MAXCUT_TEMPERATURE * model_args[0])
                row.update(best_cut=float(cuts.max()), mean_cut=float(cuts.mean()))
            results[target][name] = row
            print(
                target,
                name,
                {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()},
                "{:.0f} s".format(time.perf_counter() - clock),
            )
    table = [
        {"target": target, "sampler": name, **row}
        for target, rows in results.items()
        for name, row in rows.items()
    ]
    write_json({**metadata("discs_table", args, code_info()), "table": table}, args.output)
    plot(results, args.output.with_suffix(".png"))


if __name__ == "__main__":
    main()
