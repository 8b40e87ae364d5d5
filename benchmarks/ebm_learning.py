r"""Deep binary EBMs trained by PCD with Gibbs, GWG, PAS and DMALA, test log-likelihood
by AIS: Grathwohl et al. 2021, Section 8 and Table 2 (Appendix I), at the scale of a
shared two-core machine.

What is measured
----------------
Two data sets of 8 x 8 binary images, neither needing a download:

* ``digits``: the 1797 scikit-learn digits (``sklearn.datasets.load_digits``), pixel
  > 8 set to 1, split at random (seed 0) into ``--test`` test images and the rest for
  training;
* ``blobs``: 8 x 8 patches of two 512 x 512 images of ``skimage.data.binary_blobs``
  (features about 5 pixels across, half the pixels on), ``--blob-train`` training
  patches at random places of one image and ``--test`` test patches of the other (a
  different seed, so the test set shares no pixel with the training set). Unlike the
  digits the patches are not centred, and their law is translation invariant and
  purely local: a data set where the convolutional energy's bias fits and an MLP's
  does not, and whose test set can be made independent of the training set.

Two negative energies :math:`f_\theta` (``pyro_gwg.contrib.train.learnable_ebm``, the
binary EBM :math:`\log p(x) = f_\theta(x) - \log Z` with the network's weights as
Pyro parameters), SiLU (Swish) activations as in the paper's ResNet:

* ``mlp``: ``pyro_gwg.models.mlp_energy(64, hidden=(128, 128))`` (25k weights);
* ``conv``: 3x3 convolutions 1 -> 16 -> 32 channels (the second with stride 2), then an
  MLP head 512 -> 64 -> 1 on the flattened 4 x 4 x 32 features (38k weights): the
  paper's ResNet shrunk to the 8 x 8 grid. Its head sees where each feature is: a
  first version that mean-pooled the features as the paper's ResNet does could not
  tell where on the grid a stroke lies and, on the centred digits, fell below the
  factorised Bernoulli baseline (-26.0 against -24.35 nats, GWG, 300 updates).

Training (``pyro_gwg.contrib.train.PCD``, the recipe of Appendix I.2 scaled down):
Adam, learning rate ``--lr`` with a linear warm-up over the first ``--warmup``
updates, batches of ``--batch`` data points, ``--batch`` chains drawn per update from a
replay buffer of ``--buffer`` states initialised from the factorised Bernoulli
distribution of the training data's pixel means (``init="data_mean"``), no
re-initialisation (the paper found it made training unstable), the energy
regulariser of the paper's reference code with strength ``--energy-reg``, an
exponential moving average (EMA) of the weights with decay ``--ema``, and ``--updates``
(MLP) or ``--conv-updates`` (conv) parameter updates. Every sampler takes the same
``--mcmc-steps`` transitions per update (wall time reported), so a comparison at
equal steps, not at equal time (the paper's Gibbs models got as much time as the GWG
ones, and many more steps):

* ``gibbs``: single-site Gibbs, random scan;
* ``gwg``: Gibbs-With-Gradients, one flip per step;
* ``pas``: the path auxiliary sampler, path length ``--pas-length``;
* ``dmala``: discrete Langevin with MH, step size ``--dmala-step``.

PCD runs its kernel without warmup adaptation (the target moves after every update,
and the kernel is rebound to it uncompiled), so PAS's path length and DMALA's step
size are fixed: ``--pas-length 3`` is :math:`\sqrt{D}/2.5` for :math:`D = 64`, the
value where PAS's own adaptation (``num_flips="auto"``) starts; ``--dmala-step 0.2``
is the reference step size for binary targets (where this package's AVG starts its
adaptation; DMALA's own default start, NCG's 0.5, would accept less). After training,
each run's kernel takes ``--diag-steps`` more steps with its fixed settings on the
trained model from the buffer, and the JSON records its acceptance rate and the
pixels changed per step (``diagnostics``), the check that the fixed values are
sensible.

Evaluation (Appendix I.2.1): the EMA weights, annealed importance sampling
(``pyro_gwg.contrib.estimators.ais``) from the factorised Bernoulli fitted to the
training data along the linear path :math:`f_t = \beta_t f + (1 - \beta_t) \log p_n`,
``--ais-steps`` temperatures, ``--ais-particles`` particles, one GWG transition per
temperature (the same AIS kernel for every model, whatever sampler trained it).
Reported: the mean test (and training) log-likelihood :math:`f(x) - \log \hat Z` in
nats per image, the AIS standard error of :math:`\log \hat Z` (which shifts every
image's log-likelihood alike), the ESS of the final weights, and the AIS time. On the
digits MLP every model is evaluated a second time with ``--ais-long`` temperatures
(four times more), to show that AIS has converged: the two estimates should agree
within their standard errors (AIS overestimates the likelihood when it has not
converged, so a shorter run reads higher). The factorised Bernoulli's own test
log-likelihood (exact) is the baseline every EBM should beat. One training seed per
setting: the AIS standard error does not include the variation between training runs.

Size: full, about 25 minutes (the committed run: 26) on a shared two-core machine
with one torch thread (800 MLP updates, 300 conv updates, 15 MCMC steps each; AIS
with 2,000 temperatures and 64 particles, the check with 8,000); ``--quick`` about 2
minutes (40 / 20 updates, 200 temperatures, the check with 800): a smoke test, too
short to learn.

Run from the repository root (needs scikit-learn and scikit-image; the ``bench``
extra has only the first, the ``docs`` extra both: ``pip install -e .[bench]
scikit-image``)::

    PYTHONPATH=. python benchmarks/ebm_learning.py            # full (about 25 min)
    PYTHONPATH=. python benchmarks/ebm_learning.py --quick    # about 2 minutes

Results: ``benchmarks/results/ebm_learning[_quick].json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Dict, List, Optional

import pyro
import torch
import torch.nn.functional as F
from sampling_common import (
    code_info,
    common_arguments,
    configure,
    fill_defaults,
    metadata,
    run_and_report,
)

from pyro_gwg import DMALA, GWG, PAS, Gibbs
from pyro_gwg.contrib.estimators import ais
from pyro_gwg.contrib.estimators.ais import FactorisedBase
from pyro_gwg.contrib.estimators.driver import TemperedDensity, bind_kernel
from pyro_gwg.contrib.train import PCD, learnable_ebm
from pyro_gwg.models import binary_ebm, mlp_energy

SHAPE = (8, 8)
DATASETS = ("digits", "blobs")
ENERGIES = ("mlp", "conv")
SAMPLERS = ("gibbs", "gwg", "pas", "dmala")


# ---------------------------------------------------------------------- data
def digits_data(args: argparse.Namespace):
    """Binarised scikit-learn digits ``[N, 8, 8]``, split into (train, test)."""
    from sklearn.datasets import load_digits

    images = torch.tensor(load_digits().data > 8, dtype=torch.get_default_dtype())
    order = torch.randperm(images.shape[0], generator=torch.Generator().manual_seed(0))
    images = images[order].reshape(-1, *SHAPE)
    return images[args.test :], images[: args.test]


def blob_patches(num: int, seed: int) -> torch.Tensor:
    """``num`` random 8 x 8 patches of one 512 x 512 ``binary_blobs`` image."""
    from skimage.data import binary_blobs

    image = torch.tensor(
        binary_blobs(length=512, blob_size_fraction=0.01, volume_fraction=0.5, rng=seed),
        dtype=torch.get_default_dtype(),
    )
    g = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, 512 - SHAPE[0] + 1, (num,), generator=g)
    cols = torch.randint(0, 512 - SHAPE[1] + 1, (num,), generator=g)
    offsets = torch.arange(SHAPE[0])
    return image[
        (rows[:, None, None] + offsets[None, :, None]),
        (cols[:, None, None] + offsets[None, None, :]),
    ]


def blobs_data(args: argparse.Namespace):
    """(train, test) blob patches from two independent images."""
    return blob_patches(args.blob_train, 1), blob_patches(args.test, 2)


LOADERS = {"digits": digits_data, "blobs": blobs_data}


# ---------------------------------------------------------------------- energies
class ConvEnergy(torch.nn.Module):
    """``[N, 8, 8] -> [N]``: two 3x3 convolutions (16 maps, then 32 with stride 2),
    SiLU, and an MLP head (512 -> 64 -> 1) on the flattened 4 x 4 x 32 features."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
            self.conv2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
            self.hidden = torch.nn.Linear(32 * 4 * 4, 64)
            self.out = torch.nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.silu(self.conv1(x.unsqueeze(1)))
        h = F.silu(self.conv2(h))
        h = F.silu(self.hidden(h.flatten(1)))
        return self.out(h).squeeze(-1)


def make_energy(name: str, seed: int) -> torch.nn.Module:
    if name == "mlp":
        return mlp_energy(SHAPE[0] * SHAPE[1], hidden=(128, 128), seed=seed)
    return ConvEnergy(seed)


def make_kernel(name: str, args: argparse.Namespace):
    """The training kernel, with fixed settings (PCD does not adapt)."""
    if name == "gibbs":
        return Gibbs()
    if name == "gwg":
        return GWG()
    if name == "pas":
        return PAS(num_flips=args.pas_length)
    return DMALA(step_size=args.dmala_step, adapt_step_size=False)


def num_weights(net: torch.nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


# ---------------------------------------------------------------------- training
def kernel_diagnostics(pcd: PCD, steps: int) -> Dict[str, float]:
    """Acceptance rate and pixels changed per step of the training kernel, fixed
    settings, on the trained model, from the first ``--batch`` buffer states."""
    driver = bind_kernel(pcd.kernel, TemperedDensity(pcd.energy))
    totals = {"accepted": 0.0, "changed": 0.0}

    def observe(t, info, codes, log_joint):
        if hasattr(info, "accepted"):
            totals["accepted"] += float(info.accepted.double().mean()) * info.accepted.shape[1]
        if hasattr(info, "num_changed"):
            totals["changed"] += float(info.num_changed.double().mean()) * info.num_changed.shape[1]

    with torch.no_grad():
        driver.init(pcd.chains[: pcd.num_chains].clone())
        driver.run(steps, observe, 1)
    return {
        "accept_rate": totals["accepted"] / steps,
        "changed_per_step": totals["changed"] / steps,
    }


def train_one(
    data_name: str, energy_name: str, sampler: str, train: torch.Tensor, args
) -> Dict[str, object]:
    pyro.clear_param_store()
    pyro.set_rng_seed(args.seed)
    net = make_energy(energy_name, args.seed)
    updates = args.updates if energy_name == "mlp" else args.conv_updates
    pcd = PCD(
        learnable_ebm,
        make_kernel(sampler, args),
        num_chains=args.batch,
        mcmc_steps=args.mcmc_steps,
        lr=args.lr,
        buffer_size=args.buffer,
        reinit_prob=0.0,
        init="data_mean",
        ema=args.ema,
        warmup_iterations=args.warmup,
        energy_reg=args.energy_reg,
        model_args=(net, SHAPE),
    )
    codes = pcd.data_codes(train)
    pcd.fit_init_distribution(codes)
    curve, seconds = [], 0.0
    gap = 0.0
    for t in range(updates):
        batch = codes[torch.randint(0, codes.shape[0], (args.batch,))]
        start = time.perf_counter()
        out = pcd.step(batch)
        seconds += time.perf_counter() - start
        # loss less the regulariser: mean f(chains) - mean f(data), minus the "gap"
        gap += -(out["loss"] - out["penalty"] - out["energy_reg"])
        if (t + 1) % args.every == 0 or t + 1 == updates:
            curve.append({"update": t + 1, "gap": gap / args.every, "seconds": seconds})
            gap = 0.0
    diag = kernel_diagnostics(pcd, args.diag_steps)
    return {
        "pcd": pcd,
        "net": net,
        "record": {
            "dataset": data_name,
            "energy": energy_name,
            "sampler": sampler,
            "updates": updates,
            "train_seconds": seconds,
            "seconds_per_update": seconds / updates,
            "evaluations": pcd.evaluations,
            "curve": curve,
            "diagnostics": diag,
        },
    }


# ---------------------------------------------------------------------- evaluation
def evaluate(pcd: PCD, net, train, test, num_steps: int, args) -> Dict[str, object]:
    """AIS test (and training) log-likelihood of the EMA weights."""
    base = FactorisedBase.fit(pcd.energy.layout, pcd.data_codes(train))
    with pcd.use_ema():
        net.requires_grad_(False)
        try:
            start = time.perf_counter()
            result = ais(
                binary_ebm,
                GWG(),
                num_particles=args.ais_particles,
                num_steps=num_steps,
                base=base,
                model_args=(net, SHAPE),
            )
            seconds = time.perf_counter() - start
            log_z = float(result.log_z)
            with torch.no_grad():
                f_test = net(test).double()
                f_train = net(train).double()
        finally:
            net.requires_grad_(True)
    return {
        "ais_steps": num_steps,
        "ais_particles": args.ais_particles,
        "log_z": log_z,
        "log_z_se": float(result.log_z_se),
        "ess": float(result.ess),
        "test_ll": float(f_test.mean()) - log_z,
        "test_ll_sd_over_images": float(f_test.std()),
        "train_ll": float(f_train.mean()) - log_z,
        "ais_seconds": seconds,
    }


def baseline(train: torch.Tensor, test: torch.Tensor) -> Dict[str, float]:
    """Exact log-likelihoods of the factorised Bernoulli fitted to the training data
    (add-one smoothing): the AIS base and the chains' initial distribution."""
    probs = (train.reshape(train.shape[0], -1).sum(0) + 1) / (train.shape[0] + 2)

    def ll(x):
        x = x.reshape(x.shape[0], -1).double()
        p = probs.double()
        return float((x * p.log() + (1 - x) * (1 - p).log()).sum(-1).mean())

    return {"train_ll": ll(train), "test_ll": ll(test)}


def run_benchmark(args: argparse.Namespace) -> Dict[str, object]:
    code = code_info()
    configure(args)
    runs, datasets = [], {}
    for data_name in args.datasets:
        train, test = LOADERS[data_name](args)
        datasets[data_name] = {
            "train": train.shape[0],
            "test": test.shape[0],
            "pixel_mean": float(train.mean()),
            "bernoulli_baseline": baseline(train, test),
        }
        print(
            "{}: {} train, {} test, Bernoulli test LL {:.2f}".format(
                data_name,
                train.shape[0],
                test.shape[0],
                datasets[data_name]["bernoulli_baseline"]["test_ll"],
            ),
            file=sys.stderr,
        )
        for energy_name in args.energies:
            for sampler in args.samplers:
                trained = train_one(data_name, energy_name, sampler, train, args)
                record = trained["record"]
                record["weights"] = num_weights(trained["net"])
                record["ais"] = evaluate(
                    trained["pcd"], trained["net"], train, test, args.ais_steps, args
                )
                if data_name == "digits" and energy_name == "mlp" and args.ais_long:
                    record["ais_long"] = evaluate(
                        trained["pcd"], trained["net"], train, test, args.ais_long, args
                    )
                runs.append(record)
                a = record["ais"]
                print(
                    "{:<6} {:<4} {:<5}: test LL {:8.3f} ± {:.3f} (train {:8.3f}; "
                    "{:.0f}s train, {:.0f}s AIS, accept {:.2f}, changed/step {:.2f}){}".format(
                        data_name,
                        energy_name,
                        sampler,
                        a["test_ll"],
                        a["log_z_se"],
                        a["train_ll"],
                        record["train_seconds"],
                        a["ais_seconds"],
                        record["diagnostics"]["accept_rate"],
                        record["diagnostics"]["changed_per_step"],
                        ""
                        if "ais_long" not in record
                        else "; long AIS {:.3f} ± {:.3f}".format(
                            record["ais_long"]["test_ll"], record["ais_long"]["log_z_se"]
                        ),
                    ),
                    file=sys.stderr,
                )
    return {
        **metadata("ebm_learning", args, code),
        "datasets": datasets,
        "runs": runs,
        "summary": summarise(runs, datasets),
    }


def summarise(runs: List[Dict[str, object]], datasets) -> List[Dict[str, object]]:
    rows = []
    for r in runs:
        row = {
            "dataset": r["dataset"],
            "energy": r["energy"],
            "sampler": r["sampler"],
            "test_ll": r["ais"]["test_ll"],
            "ais_se": r["ais"]["log_z_se"],
            "train_ll": r["ais"]["train_ll"],
            "ais_steps": r["ais"]["ais_steps"],
            "ais_particles": r["ais"]["ais_particles"],
            "ais_ess": r["ais"]["ess"],
        }
        if "ais_long" in r:
            row["test_ll_long_ais"] = r["ais_long"]["test_ll"]
            row["ais_se_long"] = r["ais_long"]["log_z_se"]
            row["ais_steps_long"] = r["ais_long"]["ais_steps"]
        row.update(
            {
                "bernoulli_test_ll": datasets[r["dataset"]]["bernoulli_baseline"]["test_ll"],
                "updates": r["updates"],
                "train_seconds": r["train_seconds"],
                "accept_rate": r["diagnostics"]["accept_rate"],
                "changed_per_step": r["diagnostics"]["changed_per_step"],
            }
        )
        rows.append(row)
    return rows


def print_table(results: Dict[str, object]) -> None:
    print(
        "| data | energy | sampler | test LL ± AIS se | long AIS | train LL | updates "
        "| train s | accept | changed/step |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results["summary"]:
        long = (
            "{:.2f} ± {:.2f}".format(r["test_ll_long_ais"], r["ais_se_long"])
            if "test_ll_long_ais" in r
            else "-"
        )
        print(
            (
                "| {} | {} | {} | {:.2f} ± {:.2f} | {} | {:.2f} | {} | {:.0f} | {:.2f} | {:.2f} |"
            ).format(
                r["dataset"],
                r["energy"],
                r["sampler"],
                r["test_ll"],
                r["ais_se"],
                long,
                r["train_ll"],
                r["updates"],
                r["train_seconds"],
                r["accept_rate"],
                r["changed_per_step"],
            )
        )


def plot(results: Dict[str, object], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["summary"]
    panels = [
        (d, e)
        for d in results["settings"]["datasets"]
        for e in results["settings"]["energies"]
        if any(r["dataset"] == d and r["energy"] == e for r in rows)
    ]
    fig, axes = plt.subplots(
        1, len(panels), figsize=(3.2 * len(panels), 3.6), constrained_layout=True, squeeze=False
    )
    for ax, (d, e) in zip(axes[0], panels):
        group = [r for r in rows if r["dataset"] == d and r["energy"] == e]
        xs = range(len(group))
        ax.errorbar(
            xs,
            [r["test_ll"] for r in group],
            yerr=[r["ais_se"] for r in group],
            fmt="o",
            capsize=4,
            label="AIS, {} temperatures".format(group[0]["ais_steps"]),
        )
        if any("test_ll_long_ais" in r for r in group):
            ax.errorbar(
                [x + 0.15 for x in xs],
                [r.get("test_ll_long_ais", float("nan")) for r in group],
                yerr=[r.get("ais_se_long", 0.0) for r in group],
                fmt="s",
                capsize=4,
                label="AIS, {} temperatures".format(group[0].get("ais_steps_long")),
            )
        ax.axhline(
            group[0]["bernoulli_test_ll"], color="grey", ls="--", label="Bernoulli (data mean)"
        )
        ax.set_xticks(list(xs))
        ax.set_xticklabels(["{}\n{:.0f}s".format(r["sampler"], r["train_seconds"]) for r in group])
        ax.set_title("{}, {} energy".format(d, e))
        ax.set_ylabel("test log-likelihood (nats / image)")
        ax.legend(fontsize=7)
    fig.suptitle(
        "PCD, {} MCMC steps per update (x labels: training wall time)".format(
            results["settings"]["mcmc_steps"]
        ),
        fontsize=10,
    )
    fig.savefig(path, dpi=110)
    print("wrote {}".format(path))


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    common_arguments(parser)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--energies", nargs="+", default=list(ENERGIES), choices=ENERGIES)
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    parser.add_argument("--updates", type=int, help="PCD updates, MLP (default 800; quick 40)")
    parser.add_argument("--conv-updates", type=int, help="PCD updates, conv (300; quick 20)")
    parser.add_argument("--mcmc-steps", type=int, default=15, help="MCMC steps per update")
    parser.add_argument("--batch", type=int, default=128, help="data points and chains per update")
    parser.add_argument("--buffer", type=int, default=1000, help="replay buffer size")
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
    parser.add_argument("--warmup", type=int, help="learning-rate warm-up updates (default 100)")
    parser.add_argument("--ema", type=float, default=0.99, help="EMA decay of the weights")
    parser.add_argument("--energy-reg", type=float, default=1e-3, help="energy regulariser")
    parser.add_argument("--pas-length", type=int, default=3, help="PAS path length")
    parser.add_argument("--dmala-step", type=float, default=0.2, help="DMALA step size")
    parser.add_argument("--test", type=int, default=400, help="test images per data set")
    parser.add_argument("--blob-train", type=int, default=1400, help="training blob patches")
    parser.add_argument("--ais-steps", type=int, help="AIS temperatures (2000; quick 200)")
    parser.add_argument(
        "--ais-long", type=int, help="longer AIS on digits MLP (8000; quick 800; 0: none)"
    )
    parser.add_argument("--ais-particles", type=int, default=64, help="AIS particles")
    parser.add_argument("--diag-steps", type=int, help="kernel diagnostic steps (50; quick 10)")
    parser.add_argument("--every", type=int, default=20, help="curve point every this many")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "updates": 40 if quick else 800,
        "conv_updates": 20 if quick else 300,
        "warmup": 10 if quick else 100,
        "ais_steps": 200 if quick else 2000,
        "ais_long": 800 if quick else 8000,
        "diag_steps": 10 if quick else 50,
    }
    fill_defaults(args, "ebm_learning", defaults)
    return args


def main(argv: Optional[List[str]] = None) -> Dict[str, object]:
    return run_and_report(parse_args(argv), run_benchmark, plot, print_table)


if __name__ == "__main__":
    main()
