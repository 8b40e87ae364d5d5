r"""The Monte Carlo score diffusion (McDonald & Barron 2022) against NUTS and Hamiltonian AIS
at equal
numbers of target evaluations.

Targets (all with exact references)
-----------------------------------
* ``four_mode_tanh``: the 1-D target of McDonald & Barron 2022, :math:`e^{f - \theta^2/2}` with
  :func:`~pyro_gwg.contrib.models.four_mode_tanh`;
* ``himmelblau``: the 2-D target of McDonald & Barron 2022 with
  :func:`~pyro_gwg.contrib.models.himmelblau`;
* ``gaussian_mixture``: :meth:`~pyro_gwg.contrib.models.GaussianMixture.example_2d`
  given as a log density (the standard normal reference handled by the sampler).

Exact values: the probability of each mode's Voronoi cell (the mixture's component means
serve as its modes) and the mean and covariance, by the midpoint rule on a fine grid.

Measures
--------
``tv``: total variation distance between the sampled and the exact cell probabilities
(:math:`\frac12\sum_j |\hat p_j - p_j|`); ``mean_error``: Euclidean norm of the error of
the mean; ``cov_error``: Frobenius norm of the covariance error over that of the exact
covariance.

Methods and budget
------------------
The budget is the number of target evaluations, all particles or chains together; an
evaluation of :math:`f` and an evaluation of :math:`(f, \nabla f)` count alike (NUTS and
AIS always take both; the diffusion takes gradients only for :math:`t \le 0.1`, and its
gradient count is reported apart).

* ``diffusion``: :class:`~pyro_gwg.contrib.diffusion.MCScoreSampler` with T = 4 and delta = 0.02
  (200 Euler steps); budget B = particles x K x 200, with the particles and K of
  ``DIFFUSION_LADDER``. Its last rung (1e9) has no AIS or NUTS counterpart: it shows
  how far the diffusion has to go (its evaluations are batched, so it is the cheapest
  method per evaluation in wall-clock time).
* ``hais``: Hamiltonian AIS (:func:`~pyro_gwg.contrib.estimators.uha.hamiltonian_ais`) from the
  reference N(0, I) to the target, one leapfrog step per bridge, damping 0.9, the step
  size chosen by a pilot run (the best ESS over ``AIS_STEP_SIZES`` at the smallest
  budget, not counted); budget B = particles x (bridges + 1); estimates weighted by the
  normalised importance weights.
* ``nuts``: Pyro's NUTS on the same density (``--nuts-chains`` chains, each started from
  a N(0, I) draw, 300 warmup iterations with step-size and diagonal mass adaptation),
  run once to ``--nuts-budget`` evaluations; the estimate at a smaller budget b uses the
  post-warmup draws of each chain made within its first b / chains evaluations (counted
  by wrapping the potential function).

Run from the repository root::

    python benchmarks/score_diffusion.py --quick   # about a minute
    python benchmarks/score_diffusion.py           # full, about 12 minutes

Results go to ``benchmarks/results/score_diffusion.json`` (``score_diffusion_quick.json``
for ``--quick``; ``--output``) and a PNG next to it; the table is printed.
"""

from __future__ import annotations

import argparse
import time
from typing import Dict, List

import pyro
import torch
from pyro.infer import MCMC, NUTS
from sampling_common import common_arguments, configure, fill_defaults, metadata, write_json
from step_cost import code_info

from pyro_gwg.contrib.diffusion import MCScoreSampler
from pyro_gwg.contrib.estimators import hamiltonian_ais
from pyro_gwg.contrib.models import (
    FOUR_MODE_CENTRES,
    HIMMELBLAU_MODES,
    GaussianMixture,
    four_mode_tanh,
    grid_moments,
    himmelblau,
    mode_probabilities,
    nearest_mode,
)

#: (budget, diffusion particles, draws K); 200 Euler steps each
DIFFUSION_LADDER = [
    (1e5, 50, 10),
    (1e6, 100, 50),
    (1e7, 250, 200),
    (1e8, 500, 1000),
    (1e9, 1000, 5000),
]
#: (budget, AIS particles); bridges = budget / particles - 1
AIS_LADDER = [(1e5, 100), (1e6, 200), (1e7, 500), (1e8, 1000)]
AIS_STEP_SIZES = [0.05, 0.1, 0.2, 0.4]
DIFFUSION_STEP, DIFFUSION_T = 0.02, 4.0


class Target:
    """A target given by f, or by a log density (``log_prob``, f derived from it), with
    its exact cell probabilities and moments on a grid over ``[-box, box]^dim``."""

    def __init__(self, name, dim, modes, box, n, f=None, log_prob=None):
        self.name, self.dim, self.modes, self.log_prob = name, dim, modes, log_prob
        self.f = f if f is not None else lambda x: log_prob(x) + 0.5 * (x**2).sum(-1)
        self.cells = mode_probabilities(self.f, modes, -box, box, n)
        self.mean, self.cov = grid_moments(self.f, dim, -box, box, n)

    def log_density(self, theta: torch.Tensor) -> torch.Tensor:
        if self.log_prob is not None:
            return self.log_prob(theta)
        return self.f(theta) - 0.5 * (theta**2).sum(-1)

    def sampler(self, draws: int) -> MCScoreSampler:
        settings = {"num_draws": draws, "step_size": DIFFUSION_STEP, "final_time": DIFFUSION_T}
        if self.log_prob is not None:  # the sampler handles the N(0, I) reference itself
            return MCScoreSampler(self.log_prob, dim=self.dim, **settings)
        return MCScoreSampler(f=self.f, dim=self.dim, **settings)

    def measures(self, x: torch.Tensor, log_weights=None) -> Dict[str, float]:
        x = x.double()
        n = len(x)
        w = torch.full((n,), 1.0 / n, dtype=torch.float64)
        if log_weights is not None:
            w = torch.softmax(log_weights.double(), 0)
        cells = torch.zeros(len(self.modes), dtype=torch.float64).index_add_(
            0, nearest_mode(x, self.modes.double()), w
        )
        mean = w @ x
        cov = (w[:, None] * (x - mean)).T @ (x - mean)
        return {
            "tv": 0.5 * float((cells - self.cells).abs().sum()),
            "mean_error": float((mean - self.mean).norm()),
            "cov_error": float((cov - self.cov).norm() / self.cov.norm()),
            "cells": cells.tolist(),
        }


def targets(quick: bool) -> List[Target]:
    mixture = GaussianMixture.example_2d()
    return [
        Target("four_mode_tanh", 1, FOUR_MODE_CENTRES, 10.0, 200_000, f=four_mode_tanh),
        Target("himmelblau", 2, HIMMELBLAU_MODES, 7.0, 700 if quick else 1400, f=himmelblau),
        Target(
            "gaussian_mixture",
            2,
            mixture.means,
            8.0,
            400 if quick else 800,
            log_prob=mixture.log_prob,
        ),
    ]


def run_diffusion(target: Target, ladder) -> List[Dict[str, object]]:
    rows = []
    for budget, particles, draws in ladder:
        start = time.perf_counter()
        result = target.sampler(draws).sample(particles)
        rows.append(
            {
                "budget": budget,
                "evaluations": result.num_evaluations,
                "gradient_evaluations": result.num_gradients,
                "particles": particles,
                "draws": draws,
                "seconds": time.perf_counter() - start,
                **target.measures(result.samples),
            }
        )
    return rows


def run_ais(target: Target, ladder) -> Dict[str, object]:
    def ais(budget, particles, step):
        return hamiltonian_ais(
            target.log_density,
            dim=target.dim,
            num_bridges=int(budget / particles) - 1,
            num_particles=particles,
            loc=torch.zeros(target.dim),
            scale=torch.ones(target.dim),
            step_size=step,
            damping=0.9,
        )

    pilot = {step: ais(*ladder[0], step).ess for step in AIS_STEP_SIZES}
    step = max(pilot, key=pilot.get)
    rows = []
    for budget, particles in ladder:
        start = time.perf_counter()
        result = ais(budget, particles, step)
        rows.append(
            {
                "budget": budget,
                "evaluations": particles * int(budget / particles),
                "particles": particles,
                "bridges": int(budget / particles) - 1,
                "seconds": time.perf_counter() - start,
                "ess": result.ess,
                "acceptance": result.acceptance_rate,
                **target.measures(result.samples, result.log_weights),
            }
        )
    return {"step_size": step, "pilot_ess": pilot, "rows": rows}


class BudgetReached(Exception):
    """Raised by the NUTS hook to stop a chain once it has used its evaluations."""


def nuts_chain(target: Target, evaluations: float):
    """One NUTS chain from a N(0, I) draw until it has used ``evaluations`` potential
    evaluations: its post-warmup draws and the evaluation count at each."""
    count, kept, at = [0], [], []

    def potential(params):
        count[0] += 1
        return -target.log_density(params["theta"])

    def hook(kernel, samples, stage, i):
        if stage == "Sample":
            kept.append(samples["theta"].detach().clone())
            at.append(count[0])
        if count[0] >= evaluations:
            raise BudgetReached

    mcmc = MCMC(
        NUTS(potential_fn=potential, adapt_mass_matrix=True),
        num_samples=10**7,
        warmup_steps=300,
        initial_params={"theta": torch.randn(target.dim)},
        hook_fn=hook,
        disable_progbar=True,
    )
    try:
        mcmc.run()
    except BudgetReached:
        pass
    draws = torch.stack(kept) if kept else torch.empty(0, target.dim)
    return draws, torch.tensor(at, dtype=torch.float64)


def run_nuts(target: Target, chains: int, total: float, budgets: List[float]) -> Dict[str, object]:
    start = time.perf_counter()
    draws, counts = zip(*[nuts_chain(target, total / chains) for _ in range(chains)])
    seconds = time.perf_counter() - start
    rows = []
    for budget in budgets:
        limit = budget / chains
        parts = [d[c <= limit] for d, c in zip(draws, counts)]
        x = torch.cat(parts)
        if len(x) < 2:
            continue
        rows.append({"budget": budget, "draws": len(x), "chains": chains, **target.measures(x)})
    return {"seconds_total": seconds, "rows": rows}


def plot(results: Dict[str, object], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["targets"])
    fig, axes = plt.subplots(2, len(names), figsize=(4.2 * len(names), 7), squeeze=False)
    for col, name in enumerate(names):
        res = results["targets"][name]
        series = {
            "MC-score diffusion": res["diffusion"],
            "Hamiltonian AIS": res["hais"]["rows"],
            "NUTS ({} chains)".format(results["settings"]["nuts_chains"]): res["nuts"]["rows"],
        }
        for row, key in enumerate(["tv", "cov_error"]):
            ax = axes[row][col]
            for label, rows in series.items():
                ax.plot(
                    [r["budget"] for r in rows], [r[key] for r in rows], marker="o", label=label
                )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("target evaluations")
            ax.set_ylabel(
                {"tv": "TV of mode probabilities", "cov_error": "rel. covariance error"}[key]
            )
            ax.set_title(name)
            ax.grid(alpha=0.3)
        axes[0][col].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print("wrote {}".format(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_arguments(parser)
    parser.add_argument("--nuts-chains", type=int)
    parser.add_argument("--nuts-budget", type=float)
    args = parser.parse_args()
    defaults = {"nuts_chains": 8, "nuts_budget": 2e4 if args.quick else 2e5}
    fill_defaults(args, "score_diffusion", defaults)
    configure(args)
    code = code_info()
    results = metadata("score_diffusion", args, code)
    diffusion_ladder = DIFFUSION_LADDER[:2] if args.quick else DIFFUSION_LADDER
    ais_ladder = AIS_LADDER[:2] if args.quick else AIS_LADDER
    nuts_budgets = sorted({b for b in [1e4, 2e4, 5e4, 1e5, 2e5, 5e5] if b <= args.nuts_budget})
    results["targets"] = {}
    start = time.perf_counter()
    for target in targets(args.quick):
        pyro.set_rng_seed(args.seed)
        res = {
            "exact": {
                "cells": target.cells.tolist(),
                "mean": target.mean.tolist(),
                "cov": target.cov.tolist(),
            }
        }
        res["diffusion"] = run_diffusion(target, diffusion_ladder)
        res["hais"] = run_ais(target, ais_ladder)
        res["nuts"] = run_nuts(target, args.nuts_chains, args.nuts_budget, nuts_budgets)
        results["targets"][target.name] = res
        print(
            "\n{} (exact cells {})".format(
                target.name, ", ".join("{:.3f}".format(p) for p in target.cells.tolist())
            )
        )
        print(
            "  {:10s} {:>9s} {:>7s} {:>10s} {:>9s} {:>8s}".format(
                "method", "budget", "TV", "mean err", "cov err", "seconds"
            )
        )
        for label, rows in [
            ("diffusion", res["diffusion"]),
            ("hais", res["hais"]["rows"]),
            ("nuts", res["nuts"]["rows"]),
        ]:
            for r in rows:
                print(
                    "  {:10s} {:9.0e} {:7.3f} {:10.3f} {:9.3f} {:8.1f}".format(
                        label,
                        r["budget"],
                        r["tv"],
                        r["mean_error"],
                        r["cov_error"],
                        r.get("seconds", float("nan")),
                    )
                )
        print("  NUTS: {:.0f} s for all budgets".format(res["nuts"]["seconds_total"]))
    results["seconds"] = time.perf_counter() - start
    write_json(results, args.output)
    plot(results, args.output.with_suffix(".png"))


if __name__ == "__main__":
    main()
