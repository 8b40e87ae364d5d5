r"""
Sampling Ising models and RBMs with gradients
=============================================

.. note::
   Requires: matplotlib, scikit-learn (beyond pyro-gwg's own requirements;
   ``pip install -e ".[docs]"`` installs them). Run as a script,
   ``python examples/tutorials/01_ising_rbm_sampling.py``, it saves its figures in
   the working directory as ``01_ising_rbm_sampling_<n>.png``; with ``PYRO_GWG_FAST=1``
   it runs on the smaller problems of the documentation build.

This tutorial puts the main samplers of pyro-gwg side by side on two classic binary
targets, a 2-D lattice Ising model near its critical coupling and a restricted
Boltzmann machine (RBM) trained on handwritten digits, and measures what each kernel
buys per step and per second against plain Gibbs sampling.

All the kernels read the log joint density :math:`f(x) = \log p(x)` (up to a
constant) of an ordinary Pyro model and differ in how they propose the next state.

**Gibbs-With-Gradients** (:class:`pyro_gwg.GWG`; Grathwohl et al. 2021). For binary
:math:`x \in \{0, 1\}^D`, one gradient gives a first-order (Taylor) estimate of the
change of :math:`f` when coordinate :math:`i` is flipped, for all :math:`i` at once
(the paper's Eq. 3):

.. math::

    \tilde d(x) = -(2x - 1) \odot \nabla_x f(x), \qquad
    \tilde d_i(x) \approx f(x^{\neg i}) - f(x),

where :math:`x^{\neg i}` is :math:`x` with bit :math:`i` flipped. The kernel draws
the coordinate to flip from a softmax over these estimates at temperature 2 (Eq. 6),
flips it and corrects with a Metropolis-Hastings test (Algorithm 1):

.. math::

    q(i \mid x) = \mathrm{Softmax}\big(\tilde d(x) / 2\big)_i, \qquad
    A = \min\Big(1,\; e^{f(x') - f(x)}\, \frac{q(i \mid x')}{q(i \mid x)}\Big).

A step costs one forward and one backward pass of the model, whatever :math:`D`.
(pyro-gwg mixes a little of the uniform distribution over coordinates into
:math:`q`, ``uniform_weight=0.05``, so that no move is ever impossible however wrong
the gradient's estimate; the test uses the mixture both ways and stays exact.)
Coordinates whose flip would raise :math:`f` (the edges of a domain of aligned spins,
the outline of a digit) are proposed most often, which is where a Gibbs sampler that
picks coordinates blindly wastes its steps.

**Multi-flip GWG** (``num_flips=N``; Appendix D, Eq. 27) draws :math:`i_1, \dots, i_N`
from the same :math:`q(\cdot \mid x)` and flips them all; the acceptance ratio then
holds the products :math:`\prod_n q(i_n \mid x') / \prod_n q(i_n \mid x)` (pyro-gwg
flips a coordinate drawn twice once, with the matching exact ratio). A step still
costs one gradient, and moves up to :math:`N` coordinates, at a lower acceptance
rate. ``num_flips="auto"`` starts from :math:`\sqrt{D}/2.5` and adapts :math:`N`
during warmup, by dual averaging on :math:`\log N`, toward an acceptance rate of
0.574; it is frozen when warmup ends.

**NCG, AVG and PAVG** (:class:`pyro_gwg.NCG`, :class:`pyro_gwg.AVG`,
:class:`pyro_gwg.PAVG`; Rhodes and Gutmann 2022) propose a new value for *every*
coordinate at once from a factorised, gradient-informed distribution with a step size
:math:`\epsilon`, accepted by a Metropolis-Hastings test. With :math:`g = \nabla f(x)`,
NCG (their Eq. 8) uses

.. math::

    q_i(v \mid x) \propto \exp\Big(\tfrac12 g_i (v - x_i)
    - \tfrac{1}{2\epsilon} (v - x_i)^2\Big).

AVG draws a Gaussian auxiliary variable :math:`z \sim \mathcal N(\sqrt{2/\epsilon}\,x, I)`
and proposes :math:`q_i(v \mid z, x) \propto \exp\big((g_i + \sqrt{2/\epsilon}\,z_i)
v - v^2/\epsilon\big)`. PAVG adds a preconditioner :math:`M`, a symmetric matrix
standing for the Hessian of :math:`f`: with :math:`d = 2/\epsilon - \min(\lambda_{\min}(M),
0)` and :math:`A = (M + dI)^{1/2}` it draws :math:`z \sim \mathcal N(Ax, I)` and
proposes

.. math::

    q_i(v \mid z, x) \propto \exp\Big(\big(g - Mx + Az\big)_i\, v - \tfrac d2 v^2\Big).

When :math:`f` is quadratic in :math:`x` with Hessian :math:`M` (an Ising model is),
this proposal is the exact conditional given :math:`z` and every proposal is accepted.
By default PAVG fits :math:`M` from the chains during warmup. In all three, a larger
:math:`\epsilon` changes more coordinates per step and lowers the acceptance rate;
:math:`\epsilon` is adapted during warmup toward an acceptance rate of 0.574, as
Pyro's HMC adapts its step size.

**Gibbs** (:class:`pyro_gwg.Gibbs`) is the gradient-free baseline: it picks one
coordinate uniformly at random and redraws it from its exact conditional, at the cost
of one evaluation of the model. It has no rejection step; its "acceptance rate" below
is the fraction of steps that changed the state.

Every kernel runs several chains as one batch through :class:`pyro_gwg.MCMC`, and
every run is turned into ArviZ ``InferenceData`` with :func:`pyro_gwg.to_inference_data`,
whose ``sample_stats`` hold what the kernels record per draw: whether the proposal was
accepted (``accepted``), how many coordinates it proposed to change (``n_changed``) and the log
joint (``lp``).
"""

# %%
# Set-up
# ------
# ``PYRO_GWG_FAST=1`` runs the same code on a smaller lattice, a briefly trained RBM
# and shorter chains.
#
# Every kernel below gets ``jit_compile=True``: its whole transition (the model's
# forward and backward pass, the proposal and the Metropolis-Hastings test) is
# captured once as a graph of ATen operators, which runs without a compiler. The
# default, ``"auto"``, runs the same graph while AOTInductor compiles it in a
# background process (faster steps, tens of seconds to compile), switches to the
# compiled transition when it is ready, and loads it at once where an earlier run left
# it in its disk cache, so a comparison of kernels would depend on when each switch
# came and on what that cache holds. For your own runs, keep the default. The
# kernels also time one PyTorch thread against PyTorch's default number on their first
# calls and keep the faster; on a small model one thread is usually best, and setting
# it here skips that timing, so that the timings below are about the samplers.
import os
import sys
import time

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter
from sklearn.datasets import load_digits

import pyro_gwg
from pyro_gwg import GWG, MCMC, PAVG, Gibbs
from pyro_gwg.contrib.train import train_rbm
from pyro_gwg.diagnostics import chain_ess, hamming_ess

FAST = os.environ.get("PYRO_GWG_FAST") == "1"
pyro.set_rng_seed(0)
default_threads = torch.get_num_threads()
torch.set_num_threads(1)

NUM_CHAINS = 8
SIZE = 6 if FAST else 12  # Ising lattice side: D = SIZE**2 spins
THETA = 0.4  # coupling; the critical value of the infinite lattice is about 0.4407
NUM_WARMUP = 80 if FAST else 600
NUM_SAMPLES = 300 if FAST else 3000
RBM_HIDDEN = 32 if FAST else 50
RBM_EPOCHS = 2 if FAST else 20
print(
    f"{NUM_CHAINS} chains, {NUM_WARMUP} warmup steps and {NUM_SAMPLES} draws per chain; "
    f"Ising lattice {SIZE} x {SIZE} at theta = {THETA}; "
    f"RBM with {RBM_HIDDEN} hidden units trained for {RBM_EPOCHS} epochs"
)

# %%
# The Ising model as a Pyro model
# -------------------------------
# Each spin is a ``Bernoulli`` site :math:`x_{ij}` inside two plates, read as
# :math:`s_{ij} = 2x_{ij} - 1 \in \{-1, +1\}`, and the couplings enter through
# ``pyro.factor``: every spin carries the bonds to its right and lower neighbours
# (periodic boundaries), so the log joint is
# :math:`f(x) = \theta \sum_{\langle ij, kl \rangle} s_{ij} s_{kl}` up to a constant.
# Everything is written along the last two dimensions, so the model broadcasts over
# the chain dimension that :class:`pyro_gwg.MCMC` adds on the left. (The same model
# is :func:`pyro_gwg.models.lattice_ising`.)
#
# At :math:`\theta = 0.4`, just below the critical coupling, spins form large aligned
# domains that fluctuate slowly: mixing is hard, but not frozen as it is deep in the
# ordered phase.


def ising(size, coupling):
    with pyro.plate("rows", size, dim=-2), pyro.plate("cols", size, dim=-1):
        x = pyro.sample("x", dist.Bernoulli(logits=torch.zeros(())))
        s = 2 * x - 1
        neighbours = torch.roll(s, -1, dims=-1) + torch.roll(s, -1, dims=-2)
        pyro.factor("bonds", coupling * s * neighbours)
    return x


# %%
# PAVG can also be given the Hessian of :math:`f` instead of fitting one. With
# :math:`s = 2x - 1`, each bond :math:`\theta s_i s_j` contributes :math:`4\theta` to
# :math:`\partial^2 f / \partial x_i \partial x_j`, so :math:`M = 4\theta A` with
# :math:`A` the adjacency matrix of the lattice (spins numbered row by row, the order
# of the site's values). :func:`pyro_gwg.models.lattice_couplings` with
# :math:`\theta = 1` is that adjacency matrix.

hessian = 4 * THETA * pyro_gwg.models.lattice_couplings(SIZE, 1.0)

# %%
# A first run
# -----------
# :class:`pyro_gwg.MCMC` has the interface of :class:`pyro.infer.MCMC` and runs all
# chains as one batch. Single-flip GWG, the default ``GWG(model)``, needs no tuning.
# :meth:`~pyro_gwg.mcmc.MCMC.diagnostics` gives Pyro's ``n_eff`` and ``r_hat`` per site
# together with the kernel's statistics, and :func:`pyro_gwg.to_inference_data` turns
# the run into ArviZ ``InferenceData``, whose ``sample_stats`` hold the per-draw
# statistics of the kernel: every kernel records ``accepted``, ``acceptance_rate``
# (the Metropolis-Hastings acceptance probability of the step), ``n_changed`` (the
# number of coordinates the proposal changed, whether or not it was accepted) and
# ``lp`` (the log joint), and the counts of model
# evaluations per step (``n_energy_evals``, ``n_grad_evals``); NCG, AVG and PAVG add
# their ``step_size``. This run also pays what the first run of a process pays once,
# so that the timings further down compare the kernels alone.

mcmc = MCMC(
    GWG(ising, jit_compile=True),
    num_samples=NUM_SAMPLES // 4,
    warmup_steps=NUM_WARMUP,
    num_chains=NUM_CHAINS,
    disable_progbar=True,
)
mcmc.run(SIZE, THETA)
rates = mcmc.diagnostics()["acceptance rate"]
print("acceptance rate per chain:", {chain: round(rate, 3) for chain, rate in rates.items()})
print("seconds per phase:", {phase: round(sec, 1) for phase, sec in mcmc.timing.items()})
first_look = pyro_gwg.to_inference_data(mcmc, log_likelihood=False)
print(first_look.sample_stats)

# %%
# Running and measuring the kernels
# ---------------------------------
# ``run`` starts a kernel on a model and keeps the run's ``InferenceData`` and its
# timing: ``mcmc.timing`` splits the run into ``setup`` (tracing the model,
# drawing initial states), ``warmup`` and ``sampling``. :class:`pyro_gwg.MCMC` runs
# blocks of 64 transitions, each one call of the one-step compiled function, which is
# captured at its first call (a kernel that adapts runs its warmup one transition at a
# time). So the ``warmup`` time of every kernel includes its capture, and the
# ``sampling`` time of GWG with ``num_flips="auto"`` includes one more (its transition
# for the number of flips frozen at the end of warmup), a one-off cost that longer
# runs amortise. ``measure`` turns a run
# into the numbers we compare:
#
# * the acceptance rate (mean of ``accepted``) and the mean number of coordinates a
#   proposal changed (``n_changed``), and the mean number of coordinates a step
#   actually changed (``n_changed`` of the accepted proposals, zero for the others);
# * effective sample sizes of two scalar summaries of the state, chain by chain: the
#   Hamming distance to a fixed random reference state
#   (:func:`pyro_gwg.diagnostics.hamming_ess`, the statistic of Grathwohl et al.) and
#   the log joint ``lp`` (:func:`pyro_gwg.diagnostics.chain_ess`);
# * ESS per 1000 steps (mean over chains) and ESS per second of sampling (summed over
#   the chains, which advance together in one batch).


def run(kernel, *args):
    mcmc = MCMC(
        kernel,
        num_samples=NUM_SAMPLES,
        warmup_steps=NUM_WARMUP,
        num_chains=NUM_CHAINS,
        disable_progbar=True,
    )
    mcmc.run(*args)
    idata = pyro_gwg.to_inference_data(mcmc, log_likelihood=False)
    return {"idata": idata, "timing": dict(mcmc.timing)}


def measure(result, site):
    idata, timing = result["idata"], result["timing"]
    stats = idata.sample_stats
    codes = torch.as_tensor(idata.posterior[site].values).flatten(2).long()  # [C, T, D]
    lp = torch.as_tensor(stats["lp"].values)
    moved = stats["n_changed"].values.astype(int) * stats["accepted"].values
    draws = codes.shape[1]
    row = {
        "accept": float(stats["accepted"].mean()),
        "proposed": float(stats["n_changed"].mean()),
        "moved": float(moved.mean()),
        "moved_hist": np.bincount(moved.ravel()),
    }
    for name, ess in (("hamming", hamming_ess(codes)), ("lp", chain_ess(lp))):
        row[f"ess_step_{name}"] = 1000 * float(ess.mean()) / draws
        row[f"ess_sec_{name}"] = float(ess.sum()) / timing["sampling"]
    row.update(timing)
    return row


def print_table(table):
    print(
        f"{'':14s} {'setup':>6s} {'warmup':>7s} {'sample':>7s} {'accept':>7s} "
        f"{'proposed':>8s} {'moved':>6s} {'ESS per 1000 steps':>18s} {'ESS per second':>16s}"
    )
    print(
        f"{'kernel':14s} {'s':>6s} {'s':>7s} {'s':>7s} {'rate':>7s} {'':>8s} {'':>6s} "
        f"{'Hamming':>10s} {'lp':>7s} {'Hamming':>8s} {'lp':>7s}"
    )
    for name, r in table.items():
        print(
            f"{name:14s} {r['setup']:6.1f} {r['warmup']:7.1f} {r['sampling']:7.1f} "
            f"{r['accept']:7.3f} {r['proposed']:8.2f} {r['moved']:6.2f} "
            f"{r['ess_step_hamming']:10.1f} {r['ess_step_lp']:7.1f} "
            f"{r['ess_sec_hamming']:8.1f} {r['ess_sec_lp']:7.1f}"
        )


# %%
# The Ising model
# ---------------
# Five kernels: single-flip GWG (the default ``GWG(model)``), GWG with an adapted number
# of flips, PAVG with its preconditioner fitted during warmup, PAVG given the Hessian
# (with ``preconditioner=hessian``; its step size still adapts), and random-scan Gibbs.

ising_kernels = {
    "GWG": GWG(ising, jit_compile=True),
    "GWG auto": GWG(ising, num_flips="auto", jit_compile=True),
    "PAVG": PAVG(ising, jit_compile=True),
    "PAVG Hessian": PAVG(ising, preconditioner=hessian, jit_compile=True),
    "Gibbs": Gibbs(ising, jit_compile=True),
}
ising_runs = {name: run(kernel, SIZE, THETA) for name, kernel in ising_kernels.items()}
ising_table = {name: measure(result, "x") for name, result in ising_runs.items()}
print_table(ising_table)

# %%
# What the adaptation settled on: the number of flips of ``GWG auto``, the step size
# of the PAVG runs (recorded per draw as ``step_size``; each chain adapts its own) and
# the kind of preconditioner that PAVG fitted. The adaptation keeps
# :math:`|\log \epsilon| \le 20`: a chain at :math:`\epsilon = e^{20}` accepted its
# proposals more often than the target even at the largest step size, so there the
# preconditioner alone sets how far a proposal goes (with the exact Hessian every
# proposal is accepted, whatever :math:`\epsilon`).


def print_step_sizes(name, result):
    step = result["idata"].sample_stats["step_size"].values[:, 0]
    capped = int((np.log(step) >= PAVG.max_log_step_size - 1e-3).sum())
    print(
        f"{name}: step size after warmup from {step.min():.3g} to {step.max():.3g}; "
        f"{capped} of {len(step)} chains at the upper bound"
    )


print("GWG auto: num_flips adapted to", ising_kernels["GWG auto"].adapted_num_flips)
for name in ("PAVG", "PAVG Hessian"):
    print_step_sizes(name, ising_runs[name])
print("PAVG fitted preconditioner:", ising_kernels["PAVG"].preconditioner_fit.kind)

# %%
# Acceptance, moves and effective samples
# ---------------------------------------
# ``plot_comparison`` draws four panels per target: the acceptance rate, the
# distribution of the number of coordinates a step changed (zero for a rejected
# proposal, or a Gibbs update that kept the value), and the ESS per 1000 steps and per
# second, each relative to Gibbs (the dashed line).


# one colour per kernel, the same in every figure
COLORS = dict(zip(["GWG", "GWG auto", "PAVG", "PAVG Hessian", "Gibbs"], plt.cm.tab10.colors))


def plot_comparison(table, title):
    names = list(table)
    position = np.arange(len(names))
    colors = [COLORS[n] for n in names]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    ax = axes[0, 0]
    ax.bar(position, [table[n]["accept"] for n in names], color=colors)
    ax.set_xticks(position, names, rotation=20)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("acceptance rate")
    ax.set_title("Accepted (Gibbs: changed) steps")
    ax = axes[0, 1]
    for n, color in zip(names, colors):
        hist = table[n]["moved_hist"]
        ax.plot(np.arange(len(hist)), hist / hist.sum(), "o-", color=color, label=n, ms=3)
    ax.set_xscale("symlog", linthresh=1)
    most = max(len(table[n]["moved_hist"]) for n in names) - 1
    ticks = [t for t in (0, 1, 2, 5, 10, 20, 50, 100, 200, 500) if t <= max(most, 2)]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_xlabel("coordinates changed by the step")
    ax.set_ylabel("fraction of steps")
    ax.set_title("Coordinates changed per step")
    ax.legend(fontsize=8)
    for ax, key, label in (
        (axes[1, 0], "ess_step", "ESS per step"),
        (axes[1, 1], "ess_sec", "ESS per second"),
    ):
        width = 0.4
        for offset, stat, hatch in ((-width / 2, "hamming", ""), (width / 2, "lp", "//")):
            gibbs = table["Gibbs"][f"{key}_{stat}"]
            ratio = [table[n][f"{key}_{stat}"] / gibbs for n in names]
            ax.bar(position + offset, ratio, width, color=colors, hatch=hatch, edgecolor="k")
        ax.bar(0, 0, color="w", edgecolor="k", label="Hamming statistic")
        ax.bar(0, 0, color="w", edgecolor="k", hatch="//", label="log joint")
        ax.axhline(1.0, color="k", ls="--", lw=1)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(position, names, rotation=20)
        ax.set_ylabel("relative to Gibbs")
        ax.set_title(label + ", relative to Gibbs")
    axes[1, 0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()


plot_comparison(ising_table, f"Ising model, {SIZE} x {SIZE}, theta = {THETA}")

# %%
# The slowest quantity of an Ising model near criticality is the magnetisation
# :math:`m = \frac{1}{D}\sum_{ij} s_{ij}`, which changes only as whole domains grow
# and shrink. Its autocorrelation per kernel, with
# ArviZ (all chains combined): the faster the curve falls to zero, the more nearly
# independent the draws.


def magnetisation(idata):
    return (2 * idata.posterior["x"].astype(float) - 1).mean(("rows", "cols")).values


magnet = az.from_dict(posterior={name: magnetisation(r["idata"]) for name, r in ising_runs.items()})
axes = az.plot_autocorr(
    magnet, combined=True, max_lag=min(NUM_SAMPLES // 2, 500), figsize=(10, 5), grid=(2, 3)
)
for ax in axes.ravel():
    ax.set_xlabel("lag (steps)")
axes[0, 0].set_ylabel("autocorrelation of m")
plt.gcf().suptitle("Magnetisation: autocorrelation per kernel")
plt.tight_layout()

# %%
# The last state of four chains of each kernel. The chains started from random spins;
# near the critical coupling a typical state is made of large domains of either sign,
# up to the size of the lattice.


def show_spins(runs, num_chains=4):
    fig, axes = plt.subplots(
        num_chains, len(runs), figsize=(1.6 * len(runs), 1.6 * num_chains), squeeze=False
    )
    for col, (name, result) in enumerate(runs.items()):
        last = result["idata"].posterior["x"].values[:, -1]
        for row in range(num_chains):
            axes[row, col].imshow(last[row], cmap="gray", vmin=0, vmax=1)
            axes[row, col].set_xticks([])
            axes[row, col].set_yticks([])
        axes[0, col].set_title(name, fontsize=9)
        axes[-1, col].set_xlabel("last draw", fontsize=8)
    for row in range(num_chains):
        axes[row, 0].set_ylabel(f"chain {row}", fontsize=8)
    fig.suptitle("Ising spins (white: +1)")
    fig.tight_layout()


show_spins(ising_runs)

# %%
# A binary RBM on handwritten digits
# ----------------------------------
# The second target is an RBM with :math:`\log p(v, h) = h^\top W v + b^\top v +
# c^\top h - \log Z` over visible units :math:`v` (the 64 pixels of scikit-learn's
# 8 x 8 digits, binarised at half intensity) and hidden units :math:`h`.
# :func:`pyro_gwg.contrib.train.train_rbm` fits it by contrastive divergence.

digits = load_digits()
data = torch.tensor(digits.data >= 8, dtype=torch.get_default_dtype())
start = time.perf_counter()
weights, visible_bias, hidden_bias = train_rbm(data, num_hidden=RBM_HIDDEN, epochs=RBM_EPOCHS)
print(f"trained on {len(data)} digits in {time.perf_counter() - start:.1f} s")

# %%
# Summing out the hidden units gives the marginal of the visible units,
# :math:`\log p(v) = b^\top v + \sum_j \mathrm{softplus}(W_j v + c_j) - \log Z`
# (Grathwohl et al., Eq. 29). As a Pyro model: the visible units are ``Bernoulli`` sites
# with logits :math:`b` (which gives the term :math:`b^\top v` up to a constant), and
# each hidden unit adds its softplus term through a ``pyro.factor`` in a plate of its
# own. This is :func:`pyro_gwg.models.rbm.rbm`. The softplus terms make the log density
# non-quadratic in :math:`v`, so there is no exact Hessian to give PAVG: it fits its
# preconditioner.


def rbm(weights, visible_bias, hidden_bias):
    with pyro.plate("pixels", weights.shape[1], dim=-1):
        v = pyro.sample("v", dist.Bernoulli(logits=visible_bias))
    with pyro.plate("hidden", weights.shape[0], dim=-1):
        pyro.factor("hidden_units", F.softplus(v @ weights.T + hidden_bias))
    return v


rbm_kernels = {
    "GWG": GWG(rbm, jit_compile=True),
    "GWG auto": GWG(rbm, num_flips="auto", jit_compile=True),
    "PAVG": PAVG(rbm, jit_compile=True),
    "Gibbs": Gibbs(rbm, jit_compile=True),
}
rbm_args = (weights, visible_bias, hidden_bias)
rbm_runs = {name: run(kernel, *rbm_args) for name, kernel in rbm_kernels.items()}
rbm_table = {name: measure(result, "v") for name, result in rbm_runs.items()}
print_table(rbm_table)
print("GWG auto: num_flips adapted to", rbm_kernels["GWG auto"].adapted_num_flips)
print_step_sizes("PAVG", rbm_runs["PAVG"])
print("PAVG fitted preconditioner:", rbm_kernels["PAVG"].preconditioner_fit.kind)

# %%
plot_comparison(rbm_table, f"RBM on binarised digits, {RBM_HIDDEN} hidden units")

# %%
# The log joint of every draw, per kernel, as an ArviZ trace plot (one colour per
# chain): a well-mixing kernel moves through its whole range quickly and its chains
# overlap; a slow one wanders.

energy = az.from_dict(
    posterior={name: r["idata"].sample_stats["lp"].values for name, r in rbm_runs.items()}
)
axes = az.plot_trace(energy, figsize=(10, 8))
for left, right in axes:
    left.set_xlabel("log joint")
    right.set_xlabel("draw")
plt.gcf().suptitle("RBM: log joint of the draws per kernel (density and trace)")
plt.tight_layout()

# %%
# The last draw of each chain, per kernel, next to training digits. The draws come from
# the RBM, not from the data: they look like digits as far as the RBM has learnt them.


def show_digits(rows, labels):
    fig, axes = plt.subplots(len(rows), NUM_CHAINS, figsize=(8, 1.1 * len(rows)))
    for r, (images, label) in enumerate(zip(rows, labels)):
        for c in range(NUM_CHAINS):
            axes[r, c].imshow(images[c].reshape(8, 8), cmap="gray_r", vmin=0, vmax=1)
            axes[r, c].set_xticks([])
            axes[r, c].set_yticks([])
        axes[r, 0].set_ylabel(label, fontsize=8, rotation=0, ha="right", va="center")
    fig.suptitle("Binarised digits: training data and the last draw of each chain")
    fig.tight_layout()


show_digits(
    [data[:NUM_CHAINS].numpy()]
    + [r["idata"].posterior["v"].values[:, -1] for r in rbm_runs.values()],
    ["data"] + list(rbm_runs),
)

# %%
# Which kernel when
# -----------------
# The conclusions below are computed from the tables above. Per-second figures are
# wall-clock times: they depend on the machine and its load and, in short runs (such
# as those of ``PYRO_GWG_FAST=1``), on the one-off compilations counted in them.
# Per-step figures do not.


def best(table, key):
    return max(table, key=lambda name: table[name][key])


for target, table in (("Ising", ising_table), ("RBM", rbm_table)):
    gibbs = table["Gibbs"]
    print(f"{target}:")
    for stat, label in (("hamming", "Hamming statistic"), ("lp", "log joint")):
        per_step = best(table, f"ess_step_{stat}")
        per_second = best(table, f"ess_sec_{stat}")
        print(
            f"  {label}: most ESS per step {per_step} "
            f"({table[per_step][f'ess_step_{stat}'] / gibbs[f'ess_step_{stat}']:.1f} x Gibbs), "
            f"per second {per_second} "
            f"({table[per_second][f'ess_sec_{stat}'] / gibbs[f'ess_sec_{stat}']:.1f} x Gibbs)"
        )
    gwg = table["GWG"]
    step_ratio = gwg["ess_step_hamming"] / gibbs["ess_step_hamming"]
    second_ratio = gwg["ess_sec_hamming"] / gibbs["ess_sec_hamming"]
    print(
        f"  single-flip GWG against Gibbs: {step_ratio:.1f} x per step, "
        f"{second_ratio:.1f} x per second (Hamming statistic)"
    )
    pavg = table["PAVG"]
    print(
        f"  PAVG (fitted) against single-flip GWG: "
        f"{pavg['ess_step_hamming'] / gwg['ess_step_hamming']:.1f} x per step, "
        f"{pavg['ess_sec_hamming'] / gwg['ess_sec_hamming']:.1f} x per second, at "
        f"{pavg['sampling'] / gwg['sampling']:.1f} x the sampling time (Hamming statistic)"
    )
    auto = table["GWG auto"]
    print(
        f"  GWG auto against single-flip GWG: {auto['moved'] / gwg['moved']:.1f} x the "
        f"coordinates changed per step, {auto['ess_sec_hamming'] / gwg['ess_sec_hamming']:.1f}"
        " x the ESS per second (Hamming statistic)"
    )
torch.set_num_threads(default_threads)  # as it was before this tutorial

# %%
# How to read this:
#
# * **Gibbs** spends most of its steps on coordinates whose conditional hardly favours a
#   change: on the Ising lattice the spins inside a domain, on the RBM the background
#   pixels. Its low "acceptance" rate is the fraction of steps that changed anything.
#   A step is cheap (one forward pass), but few of them count.
# * **Single-flip GWG** costs one forward and one backward pass per step, but its
#   gradient-informed choice of coordinate makes most steps count: it proposes the
#   spins on domain walls and the pixels on the outline of a digit, and accepts most
#   of its proposals. It needs no warmup and no tuning, which makes it the default for
#   coupled binary fields.
# * **GWG with** ``num_flips="auto"`` moves several coordinates per step for about the
#   cost of one, at an acceptance rate near 0.574. It needs warmup steps to adapt, and
#   the capture of its sampling transition counts in its sampling time here.
#   More coordinates per step show up at once in the Hamming statistic; whether they
#   also speed up the slow summaries depends on the target, as the ratios above show.
# * **PAVG** (like NCG and AVG) proposes every coordinate at once. Its steps cost more
#   than GWG's (the auxiliary draw multiplies by a :math:`D \times D` matrix), and it
#   needs warmup to adapt its step size and fit its preconditioner. It pays off where
#   the preconditioner captures how the coordinates interact, so that many of them can
#   move together and still be accepted: with the exact Hessian of the Ising model it
#   accepts every proposal, and a step size at the upper bound of the adaptation says
#   that the fitted preconditioner alone sets the size of the moves. The tables say
#   whether its larger moves paid for their cost on each target.
# * The ranking by ESS depends on the summary: the Hamming statistic moves with any
#   local change, while the log joint and, on the Ising model, the magnetisation move
#   only as whole domains change, which is slow for every kernel near the critical
#   coupling. Judge a sampler by the slowest summary you care about, and by ESS per
#   second on your own machine: per step, the kernels that move more coordinates look
#   better than they are per second.
#
# A rule of thumb, then: start with ``GWG(model)``; with a few hundred warmup steps to
# spare, try ``num_flips="auto"``; for models with strong pairwise interactions
# (Ising and Boltzmann-machine-like energies) try ``PAVG``, with the Hessian as
# ``preconditioner`` when you know it; keep ``Gibbs`` as the baseline, and for models
# whose gradient says nothing about a change of value. For an RBM specifically, the
# exact block-Gibbs sampler :class:`pyro_gwg.contrib.kernels.RBMBlockGibbs` updates all
# visible units per step from their exact conditional; the kernels compared here need
# no such structure and work on any Pyro model with binary sites.

# sphinx_gallery_start_ignore
if "sphinx_gallery" not in sys.modules:  # run as a script: save the figures
    stem = os.path.splitext(os.path.basename(__file__))[0]
    for number in plt.get_fignums():
        plt.figure(number).savefig("{}_{}.png".format(stem, number))
# sphinx_gallery_end_ignore
