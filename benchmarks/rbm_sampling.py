r"""RBM sampling on binarised scikit-learn digits: MMD to block-Gibbs ground truth over
steps, and ESS (Grathwohl et al. 2021, Fig. 3 and Appendix E).

What is measured
----------------
The target is an RBM with 64 visible units (the 8 x 8 scikit-learn digits, pixel > 8
set to 1) and ``--hidden`` hidden units, trained by ``pyro_gwg.contrib.train.train_rbm``
(CD-10, Adam, ``--epochs`` passes, learning rate ``--lr``), sampled as the Pyro model
``pyro_gwg.models.rbm`` (hidden units summed out). Ground truth: ``--truth-chains``
block-Gibbs chains run for ``--truth-steps`` sweeps; a second, independent block-Gibbs
set of ``--chains`` states gives the "target" MMD level (two exact sample sets).

Samplers (all ``jit_compile=True``): ``gibbs`` (Gibbs-1, random scan), ``hb-10-1``,
``gwg``, ``lb`` (the exact locally balanced proposal that GWG approximates, 64
evaluations per step) and ``block-gibbs`` (``pyro_gwg.contrib.kernels.RBMBlockGibbs``, which
updates all 64 units per step); ``--samplers`` chooses others (``gwg-3``, ...). Each runs
``--chains`` batched chains for ``--steps`` steps from states drawn from the
Bernoulli distribution of the data mean (as in the paper). Every ``--every`` steps
the MMD between the current states of the chains and the ground truth is computed
with the kernel ``exp(-Hamming / D)`` (V-statistic). The ESS of the Hamming distance to
a fixed random reference state (``D / 2`` ones) is computed per chain after discarding
the first ``--burn-in`` fraction, and reported per run, per second and per 1000
model evaluations (forward plus gradient passes).

Run from the repository root (needs scikit-learn, ``pip install -e .[bench]``)::

    PYTHONPATH=. python benchmarks/rbm_sampling.py            # full (a few minutes)
    PYTHONPATH=. python benchmarks/rbm_sampling.py --quick    # about a minute

Results: ``benchmarks/results/rbm_sampling[_quick].json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
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

from pyro_gwg.contrib.kernels import RBMBlockGibbs
from pyro_gwg.contrib.train import train_rbm
from pyro_gwg.diagnostics import hamming_statistic, mmd, reference_state
from pyro_gwg.models import block_gibbs, rbm

DEFAULT_SAMPLERS = ("gibbs", "hb-10-1", "gwg", "lb", "block-gibbs")


def binary_digits() -> torch.Tensor:
    """The 1797 scikit-learn digits, 8 x 8 pixels in 0..16, binarised at > 8: ``[N, 64]``."""
    from sklearn.datasets import load_digits

    return torch.tensor(load_digits().data > 8, dtype=torch.get_default_dtype())


def run_sampler(name, params, initial, truth, reference, args) -> Dict[str, object]:
    kernel = RBMBlockGibbs(jit_compile=True) if name == "block-gibbs" else sampler(name, rbm)
    run = run_chains(
        kernel,
        tuple(params),
        args.chains,
        args.steps,
        observe=lambda codes: codes.to(torch.uint8),
        initial={"v": initial},
    )
    codes = run.pop("observations").long()  # [T + 1, C, D]
    steps = list(range(0, args.steps + 1, args.every))
    log_mmd = [math.log10(max(float(mmd(codes[t], truth)), 1e-12)) for t in steps]
    series = hamming_statistic(codes[1:].transpose(0, 1), reference)  # [C, T]
    return {
        "sampler": name,
        "steps": steps,
        "log10_mmd": log_mmd,
        **ess_report(series, run, args.burn_in),
        **run,
    }


def run_benchmark(args: argparse.Namespace) -> Dict[str, object]:
    code = code_info()
    configure(args)
    data = binary_digits()
    start = time.perf_counter()
    params = train_rbm(
        data, args.hidden, epochs=args.epochs, lr=args.lr, cd_steps=10, seed=args.seed
    )
    train_s = time.perf_counter() - start
    start = time.perf_counter()
    truth, _ = block_gibbs(params, args.truth_chains, args.truth_steps)
    second, _ = block_gibbs(params, args.chains, args.truth_steps)
    truth_s = time.perf_counter() - start
    target = math.log10(float(mmd(second, truth)))
    print(
        "trained in {:.1f}s, ground truth in {:.1f}s, target log10 MMD {:.3f}".format(
            train_s, truth_s, target
        ),
        file=sys.stderr,
    )
    reference = reference_state(data.shape[1], seed=args.seed)
    initial = torch.bernoulli(data.mean(0).expand(args.chains, -1).contiguous())
    runs = []
    for name in args.samplers:
        runs.append(run_sampler(name, params, initial, truth.long(), reference, args))
        r = runs[-1]
        print(
            "{:<12} final log10 MMD {:7.3f}  log ESS {:5.2f} (median {:5.2f})  /s {:6.2f}  "
            "{:.0f} us/step".format(
                name,
                r["log10_mmd"][-1],
                r["log_ess"]["mean"],
                r["log_ess"]["median"],
                r["log_ess_per_second"]["mean"],
                1e6 * r["seconds_per_step"],
            ),
            file=sys.stderr,
        )
    return {
        **metadata("rbm_sampling", args, code),
        "data": {"num_examples": data.shape[0], "num_visible": data.shape[1]},
        "train_s": train_s,
        "truth_s": truth_s,
        "target_log10_mmd": target,
        "runs": runs,
    }


def windows(steps: int):
    """Step windows ``(a, b]`` of the MMD table: the first tenth, up to half, the rest."""
    return [(0, steps // 10), (steps // 10, steps // 2), (steps // 2, steps)]


def mean_log_mmd(run: Dict[str, object], low: int, high: int) -> float:
    values = [v for s, v in zip(run["steps"], run["log10_mmd"]) if low < s <= high]
    return sum(values) / len(values)


def print_table(results: Dict[str, object]) -> None:
    steps = results["settings"]["steps"]
    spans = windows(steps)
    print("target log10 MMD (two block-Gibbs sets): {:.3f}\n".format(results["target_log10_mmd"]))
    header = " | ".join("log10 MMD, steps {}-{}".format(a, b) for a, b in spans)
    print(
        "| sampler | {} | log ESS (mean ± se) | log ESS / s | log ESS / 1k evals | us / step "
        "| evals / step |".format(header)
    )
    print("|---|" + "---:|" * (len(spans) + 5))
    for r in results["runs"]:
        print(
            "| {} | {} | {:.2f} ± {:.2f} | {:.2f} | {:.2f} | {:.0f} | {:g} |".format(
                r["sampler"],
                " | ".join("{:.3f}".format(mean_log_mmd(r, a, b)) for a, b in spans),
                r["log_ess"]["mean"],
                r["log_ess"]["se"],
                r["log_ess_per_second"]["mean"],
                r["log_ess_per_1000_evals"]["mean"],
                1e6 * r["seconds_per_step"],
                (r["energy_evals"] + r["grad_evals"]) / steps,
            )
        )
    print("\n(MMD columns: mean of the recorded log10 MMD values in each window of steps)")


def plot(results: Dict[str, object], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(14, 4), constrained_layout=True)
    for r in results["runs"]:
        left.plot(r["steps"], r["log10_mmd"], label=r["sampler"])
    left.axhline(results["target_log10_mmd"], color="k", linestyle="--", label="target")
    left.set_xlabel("step")
    left.set_ylabel("log10 MMD to block-Gibbs samples")
    left.legend()
    names = [r["sampler"] for r in results["runs"]]
    log_ess = [torch.tensor(r["ess"]).log().tolist() for r in results["runs"]]
    middle.boxplot(log_ess, showfliers=False)
    middle.set_xticks(range(1, len(names) + 1), names)
    middle.set_ylabel("log ESS after {} steps".format(results["settings"]["steps"]))
    per_second = [
        [v - math.log(r["seconds"]) for v in values] for r, values in zip(results["runs"], log_ess)
    ]
    right.boxplot(per_second, showfliers=False)
    right.set_xticks(range(1, len(names) + 1), names)
    right.set_ylabel("log ESS per second")
    fig.savefig(path, dpi=110)
    print("wrote {}".format(path))


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    common_arguments(parser)
    parser.add_argument("--samplers", nargs="+", default=list(DEFAULT_SAMPLERS))
    parser.add_argument("--hidden", type=int, default=100, help="hidden units (default 100)")
    parser.add_argument("--epochs", type=int, help="training passes (default 300; quick 100)")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate")
    parser.add_argument("--chains", type=int, help="chains per sampler (default 200; quick 100)")
    parser.add_argument("--steps", type=int, help="steps per chain (default 10000; quick 1000)")
    parser.add_argument("--every", type=int, help="MMD every this many steps")
    parser.add_argument("--truth-chains", type=int, default=500)
    parser.add_argument("--truth-steps", type=int, help="block-Gibbs sweeps (default 10000)")
    parser.add_argument("--burn-in", type=float, default=0.1, help="fraction discarded")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "epochs": 100 if quick else 300,
        "chains": 100 if quick else 200,
        "steps": 1000 if quick else 10000,
        "every": 20 if quick else 50,
        "truth_steps": 2000 if quick else 10000,
    }
    fill_defaults(args, "rbm_sampling", defaults)
    return args


def main(argv: Optional[List[str]] = None) -> Dict[str, object]:
    return run_and_report(parse_args(argv), run_benchmark, plot, print_table)


if __name__ == "__main__":
    main()
