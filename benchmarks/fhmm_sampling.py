r"""Factorial HMM posterior sampling: log joint density and reconstruction error over
steps (Grathwohl et al. 2021, Fig. 5 and Appendix G).

What is measured
----------------
The target is the posterior :math:`p(x \mid y)` of a random factorial HMM
(``pyro_gwg.models.random_fhmm``: ``--length`` time steps, ``--factors`` binary
factors, :math:`w, b \sim \mathcal N(0, 1)`, :math:`\sigma = 0.5`, :math:`\alpha = 0.1`,
:math:`\beta = 0.05`; the paper's model has 1000 steps and 10 factors, 10,000 binary
unknowns). Samplers (all ``jit_compile=True``): ``gibbs`` (Gibbs-1, random scan),
``block-hb`` (Hamming ball with the 10 factors of a random time step as the block,
radius 1: the structured sampler of the paper, 11 evaluations per step), ``gwg``
(single flip); ``--samplers`` adds others (``hb-10-1`` with random blocks, ``gwg-3``,
...). Each runs ``--chains`` batched chains for ``--steps`` steps from paths drawn
from the Markov prior (as in the paper). Every ``--every`` steps the mean over chains
of the log joint :math:`\log p(x, y)` and of the reconstruction error
:math:`\sum_t (y_t - w^\top x_t - b)^2` is recorded. Times cover the transitions only.

Run from the repository root::

    PYTHONPATH=. python benchmarks/fhmm_sampling.py            # full (< 15 min, 2 cores)
    PYTHONPATH=. python benchmarks/fhmm_sampling.py --quick    # about a minute

Results: ``benchmarks/results/fhmm_sampling[_quick].json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Dict, List, Optional

import torch
from sampling_common import (
    code_info,
    common_arguments,
    configure,
    fill_defaults,
    metadata,
    run_and_report,
    run_chains,
    sampler,
)

from pyro_gwg import HammingBall, ModelDensity
from pyro_gwg.models import factorial_hmm, fhmm_prior_sample, fhmm_time_blocks, random_fhmm

DEFAULT_SAMPLERS = ("gibbs", "block-hb", "gwg")


def run_sampler(name, data, energy, initial, args) -> Dict[str, object]:
    if name == "block-hb":
        blocks = fhmm_time_blocks(args.length, args.factors)
        kernel = HammingBall(factorial_hmm, blocks=blocks, radius=1, jit_compile=True)
    else:
        kernel = sampler(name, factorial_hmm)
    shape = (args.length, args.factors)

    def observe(codes: torch.Tensor) -> torch.Tensor:
        x = codes.reshape((-1,) + shape).to(data.y.dtype)
        error = ((x @ data.params.weights + data.params.bias - data.y) ** 2).sum(-1)
        return torch.stack([energy.log_joint(codes).mean(), error.mean()])

    run = run_chains(
        kernel,
        (data.y, *data.params),
        args.chains,
        args.steps,
        observe=observe,
        every=args.every,
        initial={"x": initial},
    )
    trace = run.pop("observations")
    return {
        "sampler": name,
        "steps": list(range(0, args.steps + 1, args.every)),
        "log_joint": trace[:, 0].tolist(),
        "reconstruction_error": trace[:, 1].tolist(),
        **run,
    }


def run_benchmark(args: argparse.Namespace) -> Dict[str, object]:
    code = code_info()
    configure(args)
    data = random_fhmm(args.length, args.factors, seed=args.seed)
    energy = ModelDensity(factorial_hmm, (data.y, *data.params))
    truth = energy.codes_from_values({"x": data.x.unsqueeze(0)})
    true_log_joint = float(energy.log_joint(truth))
    true_error = float(((data.x @ data.params.weights + data.params.bias - data.y) ** 2).sum())
    generator = torch.Generator().manual_seed(args.seed + 1)
    initial = fhmm_prior_sample(data.params, args.length, (args.chains,), generator=generator)
    print(
        "true path: log joint {:.1f}, reconstruction error {:.1f}".format(
            true_log_joint, true_error
        ),
        file=sys.stderr,
    )
    runs = []
    for name in args.samplers:
        runs.append(run_sampler(name, data, energy, initial, args))
        r = runs[-1]
        print(
            "{:<9} final log joint {:10.1f}  reconstruction error {:8.1f}  {:.0f} us/step".format(
                name, r["log_joint"][-1], r["reconstruction_error"][-1], 1e6 * r["seconds_per_step"]
            ),
            file=sys.stderr,
        )
    return {
        **metadata("fhmm_sampling", args, code),
        "true_log_joint": true_log_joint,
        "true_reconstruction_error": true_error,
        "runs": runs,
    }


def _at(run: Dict[str, object], key: str, step: int) -> float:
    return run[key][run["steps"].index(step)]


def print_table(results: Dict[str, object]) -> None:
    steps = results["settings"]["steps"]
    every = results["settings"]["every"]
    checkpoints = sorted({max(every, (steps // 10) // every * every), steps // 2 // every * every})
    checkpoints.append(results["runs"][0]["steps"][-1])
    print(
        "true path: log joint {:.1f}, reconstruction error {:.1f}\n".format(
            results["true_log_joint"], results["true_reconstruction_error"]
        )
    )
    head = " | ".join("log joint @{0} | recon. error @{0}".format(c) for c in checkpoints)
    print("| sampler | {} | time to step {} (s) | us / step | evals / step |".format(head, steps))
    print("|---|" + "---:|" * (2 * len(checkpoints) + 3))
    for r in results["runs"]:
        cells = " | ".join(
            "{:.1f} | {:.1f}".format(_at(r, "log_joint", c), _at(r, "reconstruction_error", c))
            for c in checkpoints
        )
        print(
            "| {} | {} | {:.1f} | {:.0f} | {:g} |".format(
                r["sampler"],
                cells,
                r["seconds"],
                1e6 * r["seconds_per_step"],
                (r["energy_evals"] + r["grad_evals"]) / steps,
            )
        )


def plot(results: Dict[str, object], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4), constrained_layout=True)
    for r in results["runs"]:
        axes[0].plot(r["steps"], r["log_joint"], label=r["sampler"])
        axes[1].plot(r["steps"], [math.log10(e) for e in r["reconstruction_error"]])
        seconds = [s * r["seconds_per_step"] for s in r["steps"]]
        axes[2].plot(seconds, r["log_joint"])
    axes[0].axhline(results["true_log_joint"], color="k", linestyle="--", label="true path")
    axes[1].axhline(math.log10(results["true_reconstruction_error"]), color="k", linestyle="--")
    axes[2].axhline(results["true_log_joint"], color="k", linestyle="--")
    axes[0].set_ylabel("mean log joint")
    axes[1].set_ylabel("log10 mean reconstruction error")
    axes[2].set_ylabel("mean log joint")
    for ax, x in zip(axes, ("step", "step", "seconds of sampling")):
        ax.set_xlabel(x)
    for ax in (axes[0], axes[2]):  # the first steps are far below; show the approach
        low = min(min(r["log_joint"][len(r["log_joint"]) // 10 :]) for r in results["runs"])
        ax.set_ylim(low, results["true_log_joint"] + 0.02 * abs(results["true_log_joint"]))
    axes[0].legend()
    fig.savefig(path, dpi=110)
    print("wrote {}".format(path))


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    common_arguments(parser)
    parser.add_argument("--samplers", nargs="+", default=list(DEFAULT_SAMPLERS))
    parser.add_argument("--length", type=int, help="time steps T (default 1000; quick 200)")
    parser.add_argument("--factors", type=int, default=10, help="factors K (default 10)")
    parser.add_argument("--chains", type=int, help="chains per sampler (default 16; quick 8)")
    parser.add_argument("--steps", type=int, help="steps per chain (default 10000; quick 2000)")
    parser.add_argument("--every", type=int, help="record every this many steps")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "length": 200 if quick else 1000,
        "chains": 8 if quick else 16,
        "steps": 2000 if quick else 10000,
        "every": 20 if quick else 100,
    }
    fill_defaults(args, "fhmm_sampling", defaults)
    return args


def main(argv: Optional[List[str]] = None) -> Dict[str, object]:
    return run_and_report(parse_args(argv), run_benchmark, plot, print_table)


if __name__ == "__main__":
    main()
