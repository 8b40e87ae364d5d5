"""Count the package warnings of a first run as a new user makes it (issue: one warning
per cause per run).

A 30-step regime HMM written the usual way (a ``pyro.markov`` loop, one ``Categorical``
per step), ``GWG(num_flips="auto")``, then ``summary()``, ``diagnostics()`` and
``to_inference_data()``, through ``pyro.infer.MCMC`` and through ``pyro_gwg.MCMC``; and
the README quickstart. Writes ``results/warning_count.json``.

Run: ``python benchmarks/warning_count.py``
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import io
import json
import os
import re
import sys
import warnings

import pyro
import pyro.distributions as dist
import torch

import pyro_gwg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_cost import code_info, machine_info  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def regime_hmm(y):
    trans = torch.tensor([[0.9, 0.05, 0.05], [0.05, 0.9, 0.05], [0.05, 0.05, 0.9]])
    locs = torch.tensor([-2.0, 0.0, 2.0])
    z = 0
    for t in pyro.markov(range(len(y))):
        z = pyro.sample("z_{}".format(t), dist.Categorical(trans[z]))
        pyro.sample("y_{}".format(t), dist.Normal(locs[z], 1.0), obs=y[t])


def _count(run) -> dict:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with contextlib.redirect_stdout(io.StringIO()):
            run()
    # every warning shown to the user counts (pyro-gwg points its warnings at the
    # user's line, so the file does not tell them apart); a cause is the class and the
    # message's first words with names and numbers blanked
    by_class = collections.Counter(type(w.message).__name__ for w in caught)
    by_cause = collections.Counter(
        "{}: {}".format(type(w.message).__name__, _template(str(w.message))) for w in caught
    )
    return {"total": len(caught), "by_class": dict(by_class), "by_cause": dict(by_cause)}


def _template(message: str) -> str:
    message = re.sub(r"'[^']*'", "'_'", message)
    return re.sub(r"\d+(\.\d+)?", "N", message)[:70]


def hmm_run(runner: str):
    def run():
        pyro.set_rng_seed(0)
        y = torch.cat([torch.full((10,), -2.0), torch.zeros(10), torch.full((10,), 2.0)])
        y = y + 0.5 * torch.randn(30)
        kernel = pyro_gwg.GWG(regime_hmm, num_flips="auto")
        if runner == "pyro":
            mcmc = pyro.infer.MCMC(
                kernel, num_samples=300, warmup_steps=100, num_chains=2, disable_progbar=True
            )
        else:
            mcmc = pyro_gwg.MCMC(
                kernel, num_samples=300, warmup_steps=100, num_chains=2, disable_progbar=True
            )
        mcmc.run(y)
        mcmc.summary()
        mcmc.diagnostics()
        pyro_gwg.to_inference_data(mcmc)

    return run


def quickstart_run():
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    import quickstart

    return quickstart.main(num_samples=1000, warmup_steps=300)


def main() -> dict:
    code = code_info()
    runs = {
        "hmm_pyro_infer_mcmc": _count(hmm_run("pyro")),
        "hmm_pyro_gwg_mcmc": _count(hmm_run("gwg")),
        "quickstart": _count(quickstart_run),
    }
    result = {
        "benchmark": "warning_count",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "machine": machine_info(),
        "code": code,
        "totals": [
            {"run": key, "warnings": value["total"], **value["by_class"]}
            for key, value in runs.items()
        ],
        **runs,
    }
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "warning_count.json"), "w") as f:
        json.dump(result, f, indent=1)
    for key, value in runs.items():
        print(key, value["total"], value["by_class"])
    return result


if __name__ == "__main__":
    main()
