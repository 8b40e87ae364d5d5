"""MixedGibbs(NUTS, Gibbs) on the coal-mining change point: one chain in
``pyro.infer.MCMC`` against four batched chains in ``pyro_gwg.MCMC`` (issue 28).

The model is ``disaster_model`` of ``tests/real_models.py`` (PyMC's example as written,
``early_mean`` and ``late_mean`` latent, ``switchpoint`` a ``Categorical`` over 112
years). Each runner gets the same warmup and draws per chain; the report gives, per
runner, the effective sample size (Stan's, over all chains) of the slowest-mixing of
``switchpoint``, ``early_mean`` and ``late_mean``, per second of wall-clock time of the
whole run (setup, warmup and sampling) and per CPU second of the process, and the
z-scores of the posterior means against the exact posterior (the Gamma-Poisson
marginal of each switch point, so exact to rounding). Measured on a loaded 2-core
machine; the ratio is what matters.

Run: ``PYTHONPATH=. python benchmarks/mixed_chains.py [--warmup 200 --samples 1000]``;
writes ``benchmarks/results/mixed_chains.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import time
from pathlib import Path

import pyro
import torch
from pyro.infer import MCMC, NUTS

import pyro_gwg
from pyro_gwg import Gibbs, MixedGibbs
from pyro_gwg.diagnostics import site_diagnostics

ROOT = Path(__file__).resolve().parent.parent
SITES = ("switchpoint", "early_mean", "late_mean")


def _real_models():
    spec = importlib.util.spec_from_file_location("ported", ROOT / "tests" / "real_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def exact_means(data: torch.Tensor) -> dict:
    """Posterior means of the three sites: ``p(s | y)`` from the Gamma(1, 1)-Poisson
    marginals of the years before and after the switch, the rates' means given ``s``
    by conjugacy."""
    y = data.double()
    years = len(y)
    log_w, early, late = [], [], []
    for s in range(years + 1):
        n1 = min(s + 1, years)
        a1, a2, n2 = y[:n1].sum(), y[n1:].sum(), years - n1
        log_w.append(
            torch.lgamma(1 + a1) - (1 + a1) * math.log(1 + n1)
            + torch.lgamma(1 + a2) - (1 + a2) * math.log(1 + n2)
        )  # fmt: skip
        early.append((1 + a1) / (1 + n1))
        late.append((1 + a2) / (1 + n2))
    w = torch.softmax(torch.stack(log_w), 0)
    return {
        "switchpoint": float((w * torch.arange(years + 1, dtype=torch.float64)).sum()),
        "early_mean": float((w * torch.stack(early)).sum()),
        "late_mean": float((w * torch.stack(late)).sum()),
    }


def report(samples: dict, seconds: float, cpu: float, exact: dict) -> dict:
    """ESS and z-scores of ``samples {site: [C, T]}``."""
    out = {"wall_seconds": seconds, "cpu_seconds": cpu, "sites": {}}
    for name in SITES:
        values = samples[name].double()
        ess = float(site_diagnostics(values.reshape(values.shape[:2] + (1,)))["n_eff"][0])
        mean = float(values.mean())
        se = float(values.std()) / math.sqrt(max(ess, 1.0))
        out["sites"][name] = {
            "ess": ess,
            "mean": mean,
            "exact": exact[name],
            "z": (mean - exact[name]) / se,
        }
    slowest = min(out["sites"].values(), key=lambda s: s["ess"])
    out["min_ess"] = slowest["ess"]
    out["ess_per_second"] = slowest["ess"] / seconds
    out["ess_per_cpu_second"] = slowest["ess"] / cpu
    return out


def run(args) -> dict:
    ported = _real_models()
    model, data = ported.disaster_model, ported.DISASTERS_DATA
    exact = exact_means(data)
    results = {
        "benchmark": "mixed_chains",
        "command": "PYTHONPATH=. python benchmarks/mixed_chains.py --warmup {} --samples {}".format(
            args.warmup, args.samples
        ),
        "created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "pyro": pyro.__version__,
            "torch_num_threads": torch.get_num_threads(),
            "note": "A loaded, shared 2-core machine: wall-clock times include waiting",
        },
        "model": "coal-mining change point (tests/real_models.py disaster_model)",
        "kernel": "MixedGibbs(NUTS(model), Gibbs())",
        "warmup_steps": args.warmup,
        "num_samples": args.samples,
        "seed": args.seed,
        "runs": {},
    }
    for name, runner, chains in (
        ("pyro.infer.MCMC, 1 chain", MCMC, 1),
        ("pyro_gwg.MCMC, 4 batched chains", pyro_gwg.MCMC, 4),
    ):
        pyro.set_rng_seed(args.seed)
        mcmc = runner(
            MixedGibbs(NUTS(model), Gibbs()),
            num_samples=args.samples,
            warmup_steps=args.warmup,
            num_chains=chains,
            disable_progbar=True,
        )
        wall, cpu = time.perf_counter(), time.process_time()
        mcmc.run(data)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        samples = mcmc.get_samples(group_by_chain=True)
        results["runs"][name] = dict(report(samples, wall, cpu, exact), num_chains=chains)
        print(name, json.dumps(results["runs"][name], indent=1))
    one, four = (results["runs"][k]["ess_per_second"] for k in results["runs"])
    results["ratio_ess_per_second"] = four / one
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "mixed_chains.json"))
    args = parser.parse_args()
    results = run(args)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(
        "ESS/s ratio (4 batched chains / 1 chain): {:.2f}".format(results["ratio_ess_per_second"])
    )


if __name__ == "__main__":
    main()
