r"""Throughput of the Ray runner on 1 and 2 local workers, and a model of N machines.

What is measured (one run, on a local Ray cluster of ``--workers`` CPUs)
--------------------------------------------------------------------------
* **Overheads**: starting the local cluster (``ray.init``); a task's round trip on a
  warm worker (an empty task through :func:`pyro_gwg.cluster.run_tasks`); the first
  task on a fresh worker (importing torch, Pyro and pyro-gwg); the gather
  (``ray.get`` of a block's codes, per MB).
* **Chains** (``MCMC``): the ``10 x 10`` lattice Ising model (:math:`\theta = 0.4`),
  ``GWG(lattice_ising)`` with default arguments, ``C`` chains in blocks of
  ``chains_per_block``, for ``warmup + samples`` steps: in one process (the blocks one
  after the other, and all chains as one batch) and as Ray tasks on 1 and 2 workers.
  Chain-steps per second = ``C (warmup + samples) / wall-clock seconds`` of ``run()``,
  everything included (setup, compilation, gather). Each variant runs ``--rounds``
  times, interleaved; medians are reported, and ratios are taken within a round.
* **SBC**: simulations per minute of :func:`pyro_gwg.contrib.sbc.sbc` on a 12-bit regression
  model, in one process and on 1 and 2 workers.

The model
---------
A run of ``B`` blocks on ``N`` workers takes about

.. math:: T(N) = \lceil B/N \rceil\,(t_{\rm setup} + t_{\rm block})
          + B\,(t_{\rm task} + s\, /\, \beta)

(after the cluster is up: starting or connecting to it, :math:`t_{\rm start}`, is
paid once per session) with :math:`t_{\rm setup}` a block's setup and compilation on its worker,
:math:`t_{\rm block}` its sampling time, :math:`t_{\rm task}` the per-task round trip,
``s`` a block's stored draws (bytes) and :math:`\beta` the bandwidth of the gather into
the driver (measured here through the local object store; across machines the network
bounds it, an assumed 1 GB/s). The fitted terms predict the throughput for more
workers; ``scaling_model`` lists it, and ``docs/distributed.rst`` discusses it.

Run from the repository root (needs ``pip install -e ".[ray]"``)::

    python benchmarks/ray_scaling.py            # a few minutes
    python benchmarks/ray_scaling.py --quick    # about a minute

Results go to ``benchmarks/results/ray_scaling.json`` (``--output``).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

import pyro
import pyro.distributions as dist
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sampling_common import common_arguments, fill_defaults, metadata, write_json  # noqa: E402
from step_cost import code_info  # noqa: E402

from pyro_gwg import GWG, MCMC, cluster  # noqa: E402
from pyro_gwg.contrib.sbc import sbc  # noqa: E402
from pyro_gwg.models import lattice_ising  # noqa: E402

#: bandwidth assumed for the gather across machines (bytes per second)
NETWORK_BANDWIDTH = 1e9


def regression(x, y=None):
    """12 binary inclusion indicators of a linear regression (the SBC target)."""
    gamma = pyro.sample("gamma", dist.Bernoulli(0.3 * torch.ones(x.shape[-1])).to_event(1))
    return pyro.sample("y", dist.Normal(x @ gamma.unsqueeze(-1), 1.0).to_event(2), obs=y)


def echo(payload):
    return payload


def overheads(ray, workers: int) -> Dict[str, float]:
    """Per-task round trip on warm workers, the first (cold) task, and the gather."""
    clock = time.perf_counter()
    cluster.run_tasks(
        echo, list(range(workers)), num_workers=workers, feature="bench", progress_bar=False
    )
    cold = time.perf_counter() - clock
    # warm: import what a block imports, then time many empty tasks
    cluster.run_tasks(
        _import_package,
        list(range(workers)),
        num_workers=workers,
        feature="bench",
        progress_bar=False,
    )
    n = 40
    clock = time.perf_counter()
    cluster.run_tasks(
        echo, list(range(n)), num_workers=workers, feature="bench", progress_bar=False
    )
    task = (time.perf_counter() - clock) / n * workers  # per task per worker slot
    block = torch.zeros(256, 1000, 100, dtype=torch.int8)  # 25.6 MB of codes
    ref = ray.put(block)
    clock = time.perf_counter()
    for _ in range(5):
        ray.get(ref)
    gather = (time.perf_counter() - clock) / 5
    return {
        "cold_first_tasks_s": cold,
        "task_round_trip_s": task,
        "gather_bytes_per_s": block.numel() / gather,
    }


def _import_package(_):
    import pyro_gwg  # noqa: F401

    return None


def run_chains(method: str, args, **kwargs) -> Dict[str, float]:
    pyro.set_rng_seed(args.seed)
    mcmc = MCMC(
        GWG(lattice_ising),
        args.samples,
        args.warmup,
        num_chains=args.chains,
        chain_method=method,
        disable_progbar=True,
        **kwargs,
    )
    clock = time.perf_counter()
    mcmc.run(size=10, coupling=0.4)
    wall = time.perf_counter() - clock
    steps = args.chains * (args.warmup + args.samples)
    blocks = math.ceil(args.chains / kwargs.get("chains_per_block", args.chains))
    return {
        "wall_s": wall,
        "chain_steps_per_s": steps / wall,
        "setup_s_per_block": mcmc.timing["setup"] / blocks,
        "sampling_s_per_block": (mcmc.timing["warmup"] + mcmc.timing["sampling"]) / blocks,
        "stored_bytes_per_block": mcmc.draws.codes.nbytes / blocks,
    }


def run_sbc(args, num_workers) -> float:
    x = torch.randn(20, 12, generator=torch.Generator().manual_seed(0))
    clock = time.perf_counter()
    sbc(
        regression,
        GWG,
        x,
        observed=["y"],
        num_simulations=args.simulations,
        num_draws=49,
        num_chains=2,
        warmup_steps=100,
        thinning=2,
        progress_bar=False,
        num_workers=num_workers,
    )
    return args.simulations / (time.perf_counter() - clock) * 60


def scaling_model(chains_row: dict, over: dict, args) -> List[dict]:
    """Predicted wall time and chain-steps per second on N workers from the measured
    terms: ``weak`` (one block per worker, the chains grow with the cluster) and
    ``strong`` (16 blocks shared by the workers)."""
    setup = chains_row["setup_s_per_block"]
    block = chains_row["sampling_s_per_block"]
    size = chains_row["stored_bytes_per_block"]
    steps_per_block = args.chains_per_block * (args.warmup + args.samples)
    rows = []
    for mode in ("weak", "strong"):
        for workers in (1, 2, 4, 8, 16, 64, 256):
            blocks = workers if mode == "weak" else 16
            rounds = math.ceil(blocks / workers)
            gather = blocks * size / NETWORK_BANDWIDTH
            tasks = blocks * over["task_round_trip_s"]
            wall = rounds * (setup + block) + tasks + gather
            rows.append(
                {
                    "scaling": mode,
                    "workers": workers,
                    "chains": blocks * args.chains_per_block,
                    "predicted_wall_s": wall,
                    "predicted_chain_steps_per_s": blocks * steps_per_block / wall,
                    "compile_share": rounds * setup / wall,
                    "task_share": tasks / wall,
                    "gather_share": gather / wall,
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common_arguments(parser)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chains", type=int)
    parser.add_argument("--chains-per-block", type=int)
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--samples", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--simulations", type=int)
    args = parser.parse_args()
    defaults = dict(
        chains=512, chains_per_block=256, warmup=200, samples=1000, rounds=3, simulations=24
    )
    if args.quick:
        defaults = dict(
            chains=64, chains_per_block=32, warmup=20, samples=100, rounds=1, simulations=8
        )
    fill_defaults(args, "ray_scaling", defaults)
    torch.set_num_threads(args.threads)
    import ray

    clock = time.perf_counter()
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    over = {"ray_init_s": time.perf_counter() - clock, **overheads(ray, args.workers)}
    blocked = {"chains_per_block": args.chains_per_block}
    variants = {
        "one process, one batch": ("vectorized", {}),
        "one process, blocks": ("vectorized", blocked),
        "ray, 1 worker": ("ray", dict(blocked, num_workers=1)),
        "ray, {} workers".format(args.workers): ("ray", dict(blocked, num_workers=args.workers)),
    }
    measured: Dict[str, List[dict]] = {name: [] for name in variants}
    for r in range(args.rounds):
        for name, (method, kwargs) in variants.items():
            measured[name].append(run_chains(method, args, **kwargs))
            print(r, name, measured[name][-1])
    reference = "one process, blocks"
    chains = []
    for name, rounds in measured.items():
        row = {"variant": name}
        for key in rounds[0]:
            row[key] = statistics.median(m[key] for m in rounds)
        row["speedup_vs_blocks_in_one_process"] = statistics.median(
            m["chain_steps_per_s"] / ref["chain_steps_per_s"]
            for m, ref in zip(rounds, measured[reference])
        )
        chains.append(row)
    sbc_rows = []
    for label, workers in (
        ("one process", None),
        ("ray, 1 worker", 1),
        ("ray, {} workers".format(args.workers), args.workers),
    ):
        sbc_rows.append({"variant": label, "simulations_per_min": run_sbc(args, workers)})
        print(sbc_rows[-1])
    ray_row = next(r for r in chains if r["variant"] == "ray, 1 worker")
    result = {
        **metadata("ray_scaling", args, code_info()),
        "overheads": [over],
        "chains": chains,
        "sbc": sbc_rows,
        "scaling_model": scaling_model(ray_row, over, args),
        "rounds": measured,
    }
    ray.shutdown()
    write_json(result, args.output)


if __name__ == "__main__":
    main()
