r"""Tuned UHA against Hamiltonian AIS on Bayesian logistic regression (the claim of Geffner &
Domke 2021:
tuned UHA with K = 64 bridges matches or beats Hamiltonian AIS with K = 512).

Target
------
:func:`pyro_gwg.contrib.models.logistic_regression` on scikit-learn's breast cancer
data (569 observations, 30 standardised features and an intercept, N(0, 1) prior): the
log marginal likelihood :math:`\log p(y)`. The script evaluates the same density as the
Pyro model (checked at the start) through a plain batched function, which is several
times faster than tracing the model at every bridge.

Protocol
--------
As in the paper's Section 5: under-damped Langevin bridges with one leapfrog step each,
q initialised by plain VI, the same q for both methods. The grid searches are our choice
of a fair, equally informed baseline.

1. Plain VI: the mean-field Gaussian q fitted by Adam on the ELBO (``--vi-steps``).
2. Hamiltonian AIS, for every K in ``--hais-bridges``: q from step 1, the linear schedule,
   mass :math:`1/\sigma_q^2`, and the step size and damping chosen by grid search
   (``--grid-particles`` particles per grid point) for the best bound; then evaluated
   with ``--eval-particles`` particles.
3. UHA, for every K in ``--uha-bridges``: from q of step 1 with the linear schedule and
   mass :math:`1/\sigma_q^2`, the step size and damping chosen by the same grid search on
   the UHA bound ("grid search only"), then q, step size, damping, schedule and mass
   tuned together by Adam on the bound (``--uha-steps`` steps of ``--train-particles``
   particles, learning rate ``--lr`` for 60% of the steps, then a third of it for 25%
   and a tenth for the last 15%) ("tuned").
4. Reference: :math:`\log \hat Z` of a long Hamiltonian AIS run (``--reference-bridges``
   bridges, ``--reference-particles`` particles, the best grid setting of the largest
   HAIS K), with its delta-method standard error.

Every bound is the mean of :math:`\log w` over the evaluation particles, reported with
its Monte Carlo standard error. Oracle cost: one gradient of the log joint per bridge.

``--authors-setting`` repeats the protocol with the momentum and training of the authors'
code (github.com/tomsons22/UHA, ``src/main.py``, ``momdist.py``, ``opt.py``) in place of
ours: the momentum :math:`S = \mathcal{N}(0, I)` for both methods (not :math:`1/\sigma_q^2`),
UHA tunes q, step size, damping and schedule but not the mass, Adam at a constant
learning rate 0.01 for 5000 steps of 5 particles, and the step sizes of both grids in
absolute units (``AUTHORS_STEP_SIZES``). Results go to ``uha_logistic_authors.json``.

Run from the repository root::

    python benchmarks/uha_logistic.py --quick   # about a minute
    python benchmarks/uha_logistic.py           # full, about 12 minutes
    python benchmarks/uha_logistic.py --authors-setting   # about 5 minutes

Results go to ``benchmarks/results/uha_logistic.json`` (``uha_logistic_quick.json`` for
``--quick``; ``--output``) and a PNG next to it; the table is printed.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from typing import Dict

import torch
from sampling_common import common_arguments, configure, fill_defaults, metadata, write_json
from step_cost import code_info

from pyro_gwg.contrib.continuous import ContinuousTarget
from pyro_gwg.contrib.estimators import UHA, hamiltonian_ais
from pyro_gwg.contrib.models import (
    breast_cancer,
    logistic_regression,
    logistic_regression_log_density,
)

QUICK = {
    "vi_steps": 500,
    "hais_bridges": [16, 64, 512],
    "uha_bridges": [16, 64],
    "uha_steps": 150,
    "train_particles": 16,
    "lr": 0.02,
    "grid_particles": 32,
    "eval_particles": 256,
    "reference_bridges": 2048,
    "reference_particles": 64,
}
FULL = {
    "vi_steps": 2000,
    "hais_bridges": [16, 64, 128, 256, 512],
    "uha_bridges": [16, 64],
    "uha_steps": 6000,
    "train_particles": 64,
    "lr": 0.02,
    "grid_particles": 128,
    "eval_particles": 2048,
    "reference_bridges": 8192,
    "reference_particles": 256,
}
#: --authors-setting: the training budget of the authors' code (src/main.py defaults)
AUTHORS = {"uha_steps": 5000, "train_particles": 5, "lr": 0.01}
#: Adam's learning rate is lowered in steps: (share of the steps, factor on --lr)
LR_PHASES = [(0.6, 1.0), (0.25, 1 / 3), (0.15, 1 / 10)]
#: step sizes in units of q's scale (momentum mass 1 / sigma_q^2)
STEP_SIZES = [0.1, 0.2, 0.3, 0.5, 0.7]
#: step sizes in absolute units (--authors-setting: momentum mass I; sigma_q is 0.27-0.67)
AUTHORS_STEP_SIZES = [0.02, 0.05, 0.1, 0.15, 0.2, 0.3]
DAMPINGS = [0.5, 0.8, 0.95]


class IdentityMomentumUHA(UHA):
    """UHA with the momentum of the authors' code, :math:`S = \\mathcal{N}(0, I)`, not
    tuned (``log_mass`` is frozen and unused)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log_mass.requires_grad_(False)

    @property
    def mass(self) -> torch.Tensor:
        return torch.ones_like(self.loc)


def bound_summary(result) -> Dict[str, float]:
    return {
        "bound": float(result.elbo.detach()),
        "bound_se": result.elbo_stderr,
        "log_z_estimate": float(result.log_evidence.detach()),
        "ess": result.ess,
    }


def check_density(target: ContinuousTarget, X: torch.Tensor, y: torch.Tensor) -> None:
    model_target = ContinuousTarget.from_model(logistic_regression, (X, y))
    w = 0.3 * torch.randn(4, X.shape[1])
    if not torch.allclose(target(w), model_target(w), rtol=1e-5, atol=1e-3):
        raise AssertionError("the plain density differs from the Pyro model's")


def run_hais(target, K: int, q, args) -> Dict[str, object]:
    loc, scale = q
    mass = torch.ones_like(loc) if args.authors_setting else None  # None: 1 / sigma_q^2
    grid = []
    start = time.perf_counter()
    for step, damping in itertools.product(args.step_sizes, DAMPINGS):
        result = hamiltonian_ais(
            target,
            num_bridges=K,
            num_particles=args.grid_particles,
            loc=loc,
            scale=scale,
            step_size=step,
            damping=damping,
            mass=mass,
        )
        grid.append(
            {
                "step_size": step,
                "damping": damping,
                "bound": float(result.elbo),
                "acceptance": result.acceptance_rate,
            }
        )
    best = max(grid, key=lambda g: g["bound"])
    result = hamiltonian_ais(
        target,
        num_bridges=K,
        num_particles=args.eval_particles,
        loc=loc,
        scale=scale,
        step_size=best["step_size"],
        damping=best["damping"],
        mass=mass,
    )
    return {
        "K": K,
        "step_size": best["step_size"],
        "damping": best["damping"],
        "acceptance": result.acceptance_rate,
        **bound_summary(result),
        "grid": grid,
        "seconds": time.perf_counter() - start,
    }


def run_uha(target, K: int, vi: UHA, args) -> Dict[str, object]:
    """UHA from q of plain VI: the best step size and damping of a grid search on the
    UHA bound itself (linear schedule, mass 1/sigma_q^2), then every parameter tuned."""
    uha = (IdentityMomentumUHA if args.authors_setting else UHA)(target, num_bridges=K)
    with torch.no_grad():
        uha.loc.copy_(vi.loc)
        uha.log_scale.copy_(vi.log_scale)
    grid = []
    for step, damping in itertools.product(args.step_sizes, DAMPINGS):
        with torch.no_grad():
            uha.step_logit.fill_(math.log(step / (uha.max_step_size - step)))
            uha.damping_logit.fill_(math.log(damping / (1 - damping)))
            bound = float(uha(args.grid_particles).elbo)
        grid.append({"step_size": step, "damping": damping, "bound": bound})
    best = max(grid, key=lambda g: g["bound"])
    with torch.no_grad():
        uha.step_logit.fill_(math.log(best["step_size"] / (uha.max_step_size - best["step_size"])))
        uha.damping_logit.fill_(math.log(best["damping"] / (1 - best["damping"])))
        grid_only = uha(args.eval_particles)
    start = time.perf_counter()
    history = []
    optimizer = torch.optim.Adam([p for p in uha.parameters() if p.requires_grad], lr=args.lr)
    for share, factor in [(1.0, 1.0)] if args.authors_setting else LR_PHASES:
        for group in optimizer.param_groups:
            group["lr"] = args.lr * factor
        steps = round(share * args.uha_steps)
        history += uha.fit(steps, num_particles=args.train_particles, optimizer=optimizer)
    seconds = time.perf_counter() - start
    with torch.no_grad():
        tuned = uha(args.eval_particles)
        betas = uha.betas
        return {
            "K": K,
            "grid_only": {**bound_summary(grid_only), **best},
            "grid": grid,
            "tuned": bound_summary(tuned),
            "step_size": float(uha.step_size),
            "damping": float(uha.damping),
            "betas": betas.tolist(),
            "mass_over_q_precision": (uha.mass * uha.scale**2).tolist(),
            "training_curve": history,
            "train_seconds": seconds,
        }


def plot(results: Dict[str, object], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    ref, hais, uha = results["reference"], results["hais"], results["uha"]
    lowest = min([h["bound"] for h in hais] + [u["grid_only"]["bound"] for u in uha])
    limits = (max(lowest, ref["log_z"] - 8) - 0.5, ref["log_z"] + 0.5)
    for ax in (left, right):
        ax.axhline(
            ref["log_z"], color="k", lw=1, label="reference log Z (HAIS-{})".format(ref["K"])
        )
        ax.set_ylim(*limits)
    left.set_title(
        "breast cancer logistic regression (plain VI: {:.1f})".format(results["vi"]["bound"])
    )
    left.errorbar(
        [h["K"] for h in hais],
        [h["bound"] for h in hais],
        yerr=[h["bound_se"] for h in hais],
        marker="o",
        label="Hamiltonian AIS (grid)",
    )
    left.errorbar(
        [u["K"] for u in uha],
        [u["tuned"]["bound"] for u in uha],
        yerr=[u["tuned"]["bound_se"] for u in uha],
        marker="s",
        label="UHA, tuned",
    )
    left.errorbar(
        [u["K"] for u in uha],
        [u["grid_only"]["bound"] for u in uha],
        yerr=[u["grid_only"]["bound_se"] for u in uha],
        marker="^",
        ls="--",
        label="UHA, grid search only",
    )
    left.set_xscale("log", base=2)
    left.set_xlabel("bridges K (gradient evaluations per sample)")
    left.set_ylabel("lower bound on log p(y)")
    left.legend(fontsize=8)
    for u in uha:
        curve = torch.tensor(u["training_curve"])
        width = max(1, len(curve) // 30)
        smooth = curve.unfold(0, width, width).mean(-1)
        right.plot((torch.arange(len(smooth)) + 1) * width, smooth, label="UHA K={}".format(u["K"]))
    right.set_xlabel("Adam step")
    right.set_ylabel("training bound (moving mean)")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print("wrote {}".format(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_arguments(parser)
    for key, value in FULL.items():  # every setting can be overridden; None = default
        if isinstance(value, list):
            parser.add_argument("--" + key.replace("_", "-"), type=int, nargs="+")
        else:
            parser.add_argument("--" + key.replace("_", "-"), type=type(value))
    parser.add_argument(
        "--authors-setting",
        action="store_true",
        help="momentum N(0, I) for both methods (not tuned) and the authors' training budget",
    )
    args = parser.parse_args()
    defaults = QUICK if args.quick else FULL
    if args.authors_setting:
        defaults = {**defaults, **AUTHORS}
    name = "uha_logistic_authors" if args.authors_setting else "uha_logistic"
    fill_defaults(args, name, defaults)
    args.step_sizes = AUTHORS_STEP_SIZES if args.authors_setting else STEP_SIZES
    configure(args)
    code = code_info()
    results = metadata("uha_logistic", args, code)
    results["momentum"] = "identity" if args.authors_setting else "1/sigma_q^2"
    results["mass_tuned"] = not args.authors_setting
    start = time.perf_counter()

    X, y = breast_cancer()
    target = ContinuousTarget.from_log_density(logistic_regression_log_density(X, y), X.shape[1])
    check_density(target, X, y)

    vi = UHA(target, num_bridges=0)
    vi.fit(args.vi_steps, num_particles=32, lr=0.02, bridges=False)
    with torch.no_grad():
        results["vi"] = bound_summary(vi(args.eval_particles, bridges=False))
        q = (vi.loc.detach().clone(), vi.scale.detach().clone())
    print("plain VI        bound {bound:9.3f} +- {bound_se:.3f}".format(**results["vi"]))

    results["hais"] = []
    for K in args.hais_bridges:
        h = run_hais(target, K, q, args)
        results["hais"].append(h)
        print(
            "HAIS  K={K:4d}   bound {bound:9.3f} +- {bound_se:.3f}   "
            "log Z-hat {log_z_estimate:9.3f}   (step {step_size}, damping {damping}, "
            "acceptance {acceptance:.2f})".format(**h)
        )

    best = results["hais"][-1]
    reference = hamiltonian_ais(
        target,
        num_bridges=args.reference_bridges,
        num_particles=args.reference_particles,
        loc=q[0],
        scale=q[1],
        step_size=best["step_size"],
        damping=best["damping"],
        mass=torch.ones_like(q[0]) if args.authors_setting else None,
    )
    results["reference"] = {
        "K": args.reference_bridges,
        "log_z": float(reference.log_evidence),
        "log_z_se": reference.log_evidence_stderr,
        "bound": float(reference.elbo),
    }
    print(
        "reference       log Z {log_z:9.3f} +- {log_z_se:.3f} (HAIS-{K})".format(
            **results["reference"]
        )
    )

    results["uha"] = []
    for K in args.uha_bridges:
        u = run_uha(target, K, vi, args)
        results["uha"].append(u)
        print(
            "UHA   K={:4d}   bound {:9.3f} +- {:.3f} tuned, {:9.3f} grid only   "
            "(step {:.3f}, damping {:.3f}, {:.0f} s)".format(
                K,
                u["tuned"]["bound"],
                u["tuned"]["bound_se"],
                u["grid_only"]["bound"],
                u["step_size"],
                u["damping"],
                u["train_seconds"],
            )
        )

    hais_max = max(results["hais"], key=lambda h: h["K"])
    uha_64 = next((u for u in results["uha"] if u["K"] == 64), None)
    if uha_64 is not None:
        diff = uha_64["tuned"]["bound"] - hais_max["bound"]
        se = (uha_64["tuned"]["bound_se"] ** 2 + hais_max["bound_se"] ** 2) ** 0.5
        results["claim"] = {
            "uha_K": 64,
            "hais_K": hais_max["K"],
            "uha_minus_hais": diff,
            "se": se,
            "uha_matches_or_beats_hais": bool(diff > -2 * se),
        }
        print("UHA-64 minus HAIS-{}: {:+.3f} +- {:.3f}".format(hais_max["K"], diff, se))
    results["seconds"] = time.perf_counter() - start
    write_json(results, args.output)
    plot(results, args.output.with_suffix(".png"))


if __name__ == "__main__":
    main()
