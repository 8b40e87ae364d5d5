r"""Chain-steps per second of batched chains: ``pyro_gwg.MCMC`` against a hand-written loop.

What is measured
----------------
The target is the ``10 x 10`` periodic lattice Ising model
(:func:`pyro_gwg.models.lattice_ising`, :math:`\theta = 0.4`), sampled with single-flip
Gibbs-With-Gradients by ``C`` chains advancing together as one batch:

* ``hand``: a hand-written batched PyTorch GWG loop on the same energy (eager; ``[C, D]``
  state, autograd for the gradient, Gumbel-max for the flip, cached proposal);
* ``gwg_eager``: ``pyro_gwg.MCMC(GWG(lattice_ising), num_chains=C)``;
* ``gwg_jit``: the same with ``GWG(..., jit_compile=True)``.

How
---
For every ``C`` the three variants run in interleaved rounds. For ``pyro_gwg.MCMC`` the
sampling phase is timed (``mcmc.timing["sampling"]``, after 20 warmup steps that absorb
the compilation): it includes everything the runner does per step (the kernel step,
storing draws and statistics, progress). The hand loop is timed after 50 burn-in
steps. Throughput is
``C / seconds per step`` (chain-steps per second); ratios to the hand loop are taken
per round and summarised by their median. The issue's target: ``gwg_jit`` at least
0.7x the hand loop at 256 chains.

Run from the repository root::

    python benchmarks/chain_throughput.py            # full (a few minutes)
    python benchmarks/chain_throughput.py --quick    # about a minute

Results go to ``benchmarks/results/chain_throughput.json`` (``--output``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pyro
import torch

from pyro_gwg import GWG, MCMC
from pyro_gwg.models import lattice_ising

VARIANTS = ("hand", "gwg_eager", "gwg_jit")


def hand_steps(num_chains: int, size: int, coupling: float, steps: int, burn_in: int) -> float:
    """Seconds per step of a batched hand-written GWG loop (after ``burn_in`` steps)."""

    def value_and_grad(x):
        x = x.detach().requires_grad_()
        s = (2 * x - 1).view(-1, size, size)
        f = coupling * (s * (s.roll(-1, -1) + s.roll(-1, -2))).sum((-2, -1))
        (grad,) = torch.autograd.grad(f.sum(), x)
        return f.detach(), grad

    def log_proposal(x, grad):
        return torch.log_softmax(-(2 * x - 1) * grad / 2.0, dim=-1)

    x = torch.randint(0, 2, (num_chains, size * size)).float()
    f, grad = value_and_grad(x)
    log_q = log_proposal(x, grad)
    rows = torch.arange(num_chains)
    start = 0.0
    for t in range(burn_in + steps):
        if t == burn_in:
            start = time.perf_counter()
        i = (log_q - torch.empty_like(log_q).exponential_().log()).argmax(-1)
        x_new = x.clone()
        x_new[rows, i] = 1 - x_new[rows, i]
        f_new, grad_new = value_and_grad(x_new)
        log_q_new = log_proposal(x_new, grad_new)
        log_ratio = f_new - f + log_q_new[rows, i] - log_q[rows, i]
        accept = torch.rand(num_chains).log() < log_ratio
        x = torch.where(accept[:, None], x_new, x)
        f = torch.where(accept, f_new, f)
        log_q = torch.where(accept[:, None], log_q_new, log_q)
    return (time.perf_counter() - start) / steps


def gwg_seconds_per_step(
    jit: bool, num_chains: int, size: int, coupling: float, steps: int
) -> Dict[str, float]:
    """Steady-state seconds per step of ``pyro_gwg.MCMC``: sampling time over draws,
    after a short warmup that absorbs the compilation."""
    mcmc = MCMC(
        GWG(lattice_ising, jit_compile=jit),
        num_samples=steps,
        warmup_steps=20,
        num_chains=num_chains,
        disable_progbar=True,
    )
    mcmc.run(size=size, coupling=coupling)
    return {
        "per_step_s": mcmc.timing["sampling"] / steps,
        "setup_s": mcmc.timing["setup"] + mcmc.timing["warmup"],
    }


def run(args: argparse.Namespace) -> Dict[str, object]:
    pyro.set_rng_seed(args.seed)
    results: Dict[str, object] = {
        "benchmark": "chain_throughput",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python"] + sys.argv),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "pyro": pyro.__version__,
            "torch_num_threads": torch.get_num_threads(),
        },
        "settings": {
            "size": args.size,
            "coupling": args.coupling,
            "chains": args.chains,
            "steps": args.steps,
            "rounds": args.rounds,
        },
        "per_chain_count": {},
    }
    for num_chains in args.chains:
        per_round: Dict[str, List[float]] = {v: [] for v in VARIANTS}
        setup: Dict[str, List[float]] = {v: [] for v in VARIANTS[1:]}
        for r in range(args.rounds):
            for variant in VARIANTS[r % 3 :] + VARIANTS[: r % 3]:
                if variant == "hand":
                    per_step = hand_steps(num_chains, args.size, args.coupling, args.steps, 50)
                else:
                    out = gwg_seconds_per_step(
                        variant == "gwg_jit", num_chains, args.size, args.coupling, args.steps
                    )
                    per_step = out["per_step_s"]
                    setup[variant].append(out["setup_s"])
                per_round[variant].append(num_chains / per_step)
        ratios = {v: [a / b for a, b in zip(per_round[v], per_round["hand"])] for v in VARIANTS[1:]}
        entry = {
            "chain_steps_per_s": {
                v: {"rounds": per_round[v], "median": statistics.median(per_round[v])}
                for v in VARIANTS
            },
            "ratio_to_hand": {
                v: {"rounds": ratios[v], "median": statistics.median(ratios[v])}
                for v in VARIANTS[1:]
            },
            "setup_s": {v: statistics.median(setup[v]) for v in setup},
        }
        results["per_chain_count"][str(num_chains)] = entry
        print(
            "C={:5d}: hand {:9.0f}  gwg_eager {:9.0f} ({:.2f}x)  gwg_jit {:9.0f} ({:.2f}x) "
            "chain-steps/s".format(
                num_chains,
                entry["chain_steps_per_s"]["hand"]["median"],
                entry["chain_steps_per_s"]["gwg_eager"]["median"],
                entry["ratio_to_hand"]["gwg_eager"]["median"],
                entry["chain_steps_per_s"]["gwg_jit"]["median"],
                entry["ratio_to_hand"]["gwg_jit"]["median"],
            ),
            flush=True,
        )
    at_256 = results["per_chain_count"].get("256")
    if at_256 is not None:
        ratio = at_256["ratio_to_hand"]["gwg_jit"]["median"]
        results["target"] = {"ratio": "gwg_jit/hand at 256 chains", "min": 0.7, "value": ratio}
        results["target_met"] = ratio >= 0.7
    return results


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds")
    parser.add_argument("--chains", type=int, nargs="+", default=[1, 16, 256, 1024])
    parser.add_argument("--steps", type=int, default=None, help="timed steps per run")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--coupling", type=float, default=0.4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--output",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / "chain_throughput.json",
    )
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = 100 if args.quick else 300
    if args.rounds is None:
        args.rounds = 2 if args.quick else 3
    return args


def main(argv: Optional[List[str]] = None) -> Dict[str, object]:
    args = parse_args(argv)
    results = run(args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    if "target" in results:
        print(
            "target gwg_jit >= 0.7x hand at 256 chains: {:.2f} -> {}".format(
                results["target"]["value"], "met" if results["target_met"] else "NOT met"
            )
        )
    print("wrote {}".format(args.output))
    return results


if __name__ == "__main__":
    main()
