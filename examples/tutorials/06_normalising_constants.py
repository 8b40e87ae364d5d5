"""
Normalising constants and learning: AIS, ARM and PCD
====================================================

.. note::
   Requires: matplotlib, scikit-learn (beyond pyro-gwg's own requirements;
   ``pip install -e ".[docs]"`` installs them). Run as a script,
   ``python examples/tutorials/06_normalising_constants.py``, it saves its figures in
   the working directory as ``06_normalising_constants_<n>.png``; with ``PYRO_GWG_FAST=1``
   it runs on the smaller problems of the documentation build.

Samplers for discrete models are useful beyond drawing samples. This tutorial uses
them as the transitions inside two jobs that need many samples from a sequence of
distributions:

1. **Estimating a normalising constant.** A restricted Boltzmann machine (RBM) is
   fitted to binarised handwritten digits, and its log normaliser :math:`\\log Z` is
   estimated by *annealed importance sampling* (AIS; Neal 2001) with Gibbs-With-Gradients
   (GWG) or single-site Gibbs transitions, and by the *adaptive resample-move*
   algorithm (ARM; Fraccaro et al. 2016). With few hidden units the exact value can
   still be computed, so every estimate is checked against it, and the estimates are
   turned into a test-set log-likelihood.
2. **Learning a model.** The couplings of an Ising model are learned from data it
   generated, by *persistent contrastive divergence* (PCD; Tieleman 2008), whose
   persistent chains are moved by GWG or by Gibbs.

Everything runs through the public API: :func:`pyro_gwg.contrib.estimators.ais`,
:func:`pyro_gwg.contrib.estimators.arm`,
:func:`pyro_gwg.contrib.estimators.ais_log_likelihood`,
:class:`pyro_gwg.contrib.train.PCD`, and :class:`pyro_gwg.MCMC` for plain sampling.
The models are ordinary Pyro functions written out below.
"""

# %%
# Set-up
# ------
# ``PYRO_GWG_FAST=1`` runs the same code on a smaller problem (fewer hidden units,
# shorter runs, a smaller lattice), as the documentation build does. The tensors
# here are small (a few hundred chains of 64 pixels), so one CPU thread is faster
# than PyTorch's thread pool; the setting is restored at the end.
import math
import os
import sys
import time

import matplotlib.pyplot as plt
import numpy as np
import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

from pyro_gwg import GWG, MCMC, Gibbs
from pyro_gwg.contrib.estimators import (
    Stage,
    activity_order,
    ais,
    ais_log_likelihood,
    arm,
    log_likelihood,
)
from pyro_gwg.contrib.train import PCD, coupling_rmse, symmetric_couplings, train_rbm
from pyro_gwg.models import (
    lattice_couplings,
    rbm,
    rbm_log_density,
    rbm_log_partition,
)

FAST = os.environ.get("PYRO_GWG_FAST") == "1"
pyro.set_rng_seed(0)
np.random.seed(0)
previous_threads = torch.get_num_threads()
torch.set_num_threads(1)

NUM_HIDDEN = 12 if FAST else 16  # exact log Z sums over 2^NUM_HIDDEN hidden states
EPOCHS = 5 if FAST else 20  # contrastive-divergence epochs for the RBM
SAMPLE_STEPS = 300 if FAST else 1000  # GWG steps per chain for the picture of samples
AIS_PARTICLES = 100 if FAST else 200
AIS_STEPS = (10, 30, 100) if FAST else (10, 30, 100, 300, 1000)
ARM_PARTICLES = (50,) if FAST else (25, 50, 100, 200, 400)
ARM_RUNS = 4 if FAST else 8
LATTICE = 4 if FAST else 6  # Ising lattice side
DATA_CHAINS = 500 if FAST else 1000  # training states of the Ising model
DATA_STEPS = 300 if FAST else 1000  # GWG steps per data chain
PCD_ITERATIONS = 60 if FAST else 400
PCD_LR = 0.01 if FAST else 0.003  # Adam learning rate of PCD
print(
    "mode: {}; RBM with {} hidden units, {} epochs; AIS with {} particles and T in {}; "
    "ARM with R in {}, {} runs; Ising {} x {} lattice, {} training states, {} PCD "
    "iterations at learning rate {}".format(
        "fast" if FAST else "full",
        NUM_HIDDEN,
        EPOCHS,
        AIS_PARTICLES,
        AIS_STEPS,
        ARM_PARTICLES,
        ARM_RUNS,
        LATTICE,
        LATTICE,
        DATA_CHAINS,
        PCD_ITERATIONS,
        PCD_LR,
    )
)

# %%
# Part 1: the normaliser of an RBM
# --------------------------------
# The 1797 scikit-learn digits are 8 x 8 images with grey levels 0 to 16; a pixel
# above 8 becomes 1. 1500 images are for training and the rest for testing. An RBM
# with 64 visible units :math:`v` and ``NUM_HIDDEN`` hidden units :math:`h` has
# :math:`p(v, h) \propto \exp(h^\top W v + b^\top v + c^\top h)`; it is fitted by
# contrastive divergence with :func:`pyro_gwg.contrib.train.train_rbm` (block-Gibbs
# negatives, Adam).
images = torch.tensor(load_digits().data > 8, dtype=torch.get_default_dtype())
shuffle = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))
train, test = images[shuffle[:1500]], images[shuffle[1500:]]
start = time.perf_counter()
params = train_rbm(train, NUM_HIDDEN, epochs=EPOCHS, lr=1e-2, seed=0)
weights, visible_bias, hidden_bias = params
print(
    "{} training and {} test images; RBM trained in {:.1f}s".format(
        len(train), len(test), time.perf_counter() - start
    )
)

# %%
# The visible units as a Pyro model
# ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
# Summing the hidden units out of the joint gives the marginal of the pixels,
#
# .. math:: \log \tilde p(v) = b^\top v + \sum_j \mathrm{softplus}(W_j v + c_j),
#
# with :math:`W_j` the j-th row of :math:`W`. In the Pyro model below the pixels are
# ``Bernoulli(logits=b)`` sites (which contribute :math:`b^\top v` and a constant)
# and each hidden unit adds its softplus term as a ``pyro.factor``. The model's log
# joint is therefore :math:`f(v) = \log \tilde p(v) - \sum_i \mathrm{softplus}(b_i)`.
# Written with plates, it evaluates a whole batch of states at once, which is what
# the samplers and estimators need. (It is the same model as
# :func:`pyro_gwg.models.rbm`.)


def rbm_model(weights, visible_bias, hidden_bias):
    """The pixels of an RBM with its hidden units summed out, at site ``"v"``."""
    num_hidden, num_visible = weights.shape
    with pyro.plate("pixels", num_visible, dim=-1):
        v = pyro.sample("v", dist.Bernoulli(logits=visible_bias))
    with pyro.plate("hidden", num_hidden, dim=-1):
        pyro.factor("hidden_units", F.softplus(v @ weights.T + hidden_bias))
    return v


# f(v) at the test images, from the model and from the formula above
model_f = log_likelihood(rbm_model, {"v": test}, 0.0, model_args=tuple(params))
formula_f = rbm_log_density(test, params) - F.softplus(visible_bias).sum()
library_f = log_likelihood(rbm, {"v": test}, 0.0, model_args=tuple(params))
print(
    "largest difference of f(v) from the formula: {:.2e}; from pyro_gwg.models.rbm: {:.2e}".format(
        float((model_f - formula_f).abs().max()), float((model_f - library_f).abs().max())
    )
)

# %%
# The exact normaliser
# ^^^^^^^^^^^^^^^^^^^^
# :func:`pyro_gwg.models.rbm_log_partition` sums the joint over all :math:`2^H`
# hidden states (the visible units factorise given :math:`h`). The model's
# normaliser is :math:`\log Z = \log \sum_v e^{f(v)}`, i.e. that of the RBM minus the
# constant :math:`\sum_i \mathrm{softplus}(b_i)` carried by the Bernoulli sites.
exact_log_z = float(rbm_log_partition(params) - F.softplus(visible_bias.double()).sum())
print(
    "exact log Z of rbm_model = {:.4f} ({} hidden states summed)".format(exact_log_z, 2**NUM_HIDDEN)
)

# %%
# Samples from the RBM
# ^^^^^^^^^^^^^^^^^^^^
# Before estimating anything, a look at what the RBM has learned. GWG
# (:class:`pyro_gwg.GWG`) proposes which pixel to flip from the gradient of
# :math:`f` at the current image, which typically brings its chains to plausible
# digits sooner than blind single-site updates. 32 chains run as one batch in
# :class:`pyro_gwg.MCMC`, each from a random initial image; the picture shows each chain's
# last state. ``jit_compile=True`` captures the transition once as a graph of ATen
# operators and runs it without a compiler; the default ``"auto"`` also compiles it
# with AOTInductor in a background process and switches to it when it is ready.


def tile(rows, num_cols=8):
    """Arrange ``[N, 64]`` binary images as one mosaic of 8 x 8 tiles with grey gaps."""
    rows = np.asarray(rows, dtype=float)
    num_rows = math.ceil(len(rows) / num_cols)
    canvas = np.full((9 * num_rows + 1, 9 * num_cols + 1), 0.5)
    for k, image in enumerate(rows):
        r, c = divmod(k, num_cols)
        canvas[9 * r + 1 : 9 * r + 9, 9 * c + 1 : 9 * c + 9] = image.reshape(8, 8)
    return canvas


def show_digits(ax, rows, title):
    """Draw binary digit images on ``ax`` as a mosaic."""
    ax.imshow(tile(rows), cmap="gray_r", vmin=0, vmax=1, interpolation="nearest")
    ax.set_title(title)
    ax.axis("off")


sampler = MCMC(
    GWG(rbm_model, jit_compile=True),
    num_samples=1,
    warmup_steps=SAMPLE_STEPS,
    num_chains=32,
    disable_progbar=True,
)
sampler.run(*params)
rbm_samples = sampler.get_samples()["v"]  # [32, 64]

fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
show_digits(axes[0], train[:32], "training images")
show_digits(axes[1], rbm_samples, "RBM samples ({} GWG steps per chain)".format(SAMPLE_STEPS))
plt.tight_layout()

# %%
# Annealed importance sampling
# ^^^^^^^^^^^^^^^^^^^^^^^^^^^^
# AIS starts :math:`P` particles from a tractable, normalised base distribution
# :math:`p_0` (here independent pixels with the training set's frequencies, as in
# Grathwohl et al. 2021, Appendix I.2.1) and moves them through the intermediate
# densities
#
# .. math:: f_t(v) = \beta_t f(v) + (1 - \beta_t) \log p_0(v),
#           \qquad 0 = \beta_0 < \beta_1 < \dots < \beta_T = 1.
#
# At step :math:`t` each particle's log weight grows by the increment
#
# .. math:: f_t(v_{t-1}) - f_{t-1}(v_{t-1})
#           = (\beta_t - \beta_{t-1}) \big(f(v_{t-1}) - \log p_0(v_{t-1})\big),
#
# and then the particle takes a step of a kernel that leaves :math:`e^{f_t}`
# invariant (one GWG or one Gibbs step here). The weights :math:`w_p` are unbiased
# for :math:`Z`, so :math:`\log \hat Z = \log \frac1P \sum_p w_p`, with the
# delta-method standard error :math:`\mathrm{sd}(w) / (\sqrt{P}\, \bar w)` and the
# effective sample size :math:`(\sum_p w_p)^2 / \sum_p w_p^2`. Because the logarithm
# is concave, :math:`\log \hat Z` is biased low, by about half its variance; both the
# bias and the spread shrink as the number of temperatures :math:`T` grows and
# consecutive densities become closer.

# %%
# Test-set log-likelihood
# ^^^^^^^^^^^^^^^^^^^^^^^
# The log normaliser is what turns :math:`f` into a log-likelihood,
# :math:`\log p(v) = f(v) - \log Z`.
# :func:`pyro_gwg.contrib.estimators.ais_log_likelihood` runs AIS (here with GWG
# transitions and the largest :math:`T`) and subtracts its :math:`\log \hat Z`;
# :func:`pyro_gwg.contrib.estimators.log_likelihood` does the same with the exact
# value. An AIS log Z that is too low makes the model look better than it is, so
# the sign of the gap matters. For scale, the log-likelihood of the
# independent-pixel base is printed too: an RBM that captured nothing beyond the
# pixel frequencies would score about the same.
test_data = {"v": test}
start = time.perf_counter()
ais_ll = ais_log_likelihood(
    rbm_model,
    GWG(),
    test_data,
    model_args=tuple(params),
    num_particles=AIS_PARTICLES,
    num_steps=max(AIS_STEPS),
    base={"v": train},  # factorised Bernoulli fitted to the training images
)
ais_ll_seconds = time.perf_counter() - start
exact_ll = log_likelihood(rbm_model, test_data, exact_log_z, model_args=tuple(params))
train_ll = log_likelihood(rbm_model, {"v": train}, exact_log_z, model_args=tuple(params))
pixel_p = (train.sum(0) + 1) / (len(train) + 2)  # the base's add-one frequencies
pixel_ll = (test * pixel_p.log() + (1 - test) * (1 - pixel_p).log()).sum(-1)
print(
    "test log-likelihood per image: AIS (GWG, T = {}) {:.3f} +- {:.3f}, exact {:.3f}".format(
        max(AIS_STEPS), float(ais_ll.mean), float(ais_ll.log_z_se), float(exact_ll.mean())
    )
)
print(
    "exact training log-likelihood {:.3f}; independent pixels on the test set {:.3f}".format(
        float(train_ll.mean()), float(pixel_ll.mean())
    )
)

# %%
# AIS with fewer and more annealing steps
# ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
# The loop below runs AIS with both kernels over a range of :math:`T` (the GWG run
# with the largest :math:`T` is the one above, ``ais_ll.ais``). A GWG step evaluates
# the model (and its gradient) at a proposed state; a Gibbs step evaluates the state
# that differs in a randomly chosen pixel. Both therefore evaluate the model at the
# same number of states per step, and the cost of a run grows linearly with
# :math:`T`.
ais_runs = {("GWG", max(AIS_STEPS)): (ais_ll.ais, ais_ll_seconds)}  # (kernel, T) -> run
print(
    "{:<6} {:>5} {:>9} {:>7} {:>8} {:>7} {:>10} {:>6}".format(
        "kernel", "T", "log Z", "se", "error", "ESS", "model evals", "s"
    )
)
for name, kernel in (("GWG", GWG), ("Gibbs", Gibbs)):
    for num_steps in AIS_STEPS:
        if (name, num_steps) not in ais_runs:
            start = time.perf_counter()
            result = ais(
                rbm_model,
                kernel(),
                num_particles=AIS_PARTICLES,
                num_steps=num_steps,
                base={"v": train},
                model_args=tuple(params),
            )
            ais_runs[name, num_steps] = (result, time.perf_counter() - start)
        result, seconds = ais_runs[name, num_steps]
        print(
            "{:<6} {:>5} {:>9.3f} {:>7.3f} {:>+8.3f} {:>7.1f} {:>10} {:>6.1f}".format(
                name,
                num_steps,
                float(result.log_z),
                float(result.log_z_se),
                float(result.log_z) - exact_log_z,
                float(result.ess),
                result.evaluations,
                seconds,
            )
        )

# %%
# Adaptive resample-move
# ^^^^^^^^^^^^^^^^^^^^^^
# ARM (Fraccaro et al. 2016) reaches the model through distributions of growing
# dimension instead of a temperature path. Stage :math:`n` is the RBM restricted to
# the first :math:`n` pixels, taken from the most to the least variable in the
# training set (:func:`pyro_gwg.contrib.estimators.activity_order`):
# :math:`p^*_n(v_{[n]})` with normaliser :math:`Z_n`. The first stage is summed
# exactly, and
#
# .. math:: \frac{Z_{n+1}}{Z_n} = \mathbb{E}_{p_n}\big[\mathcal W(v_{[n]})\big],
#           \qquad
#           \mathcal W(v_{[n]}) = \frac{\sum_{v_{n+1} \in \{0, 1\}}
#           p^*_{n+1}(v_{[n]}, v_{n+1})}{p^*_n(v_{[n]})},
#
# so the weighted particles :math:`(v^r_{[n]}, \tilde w^r)` give
# :math:`\widehat{Z_{n+1}/Z_n} = \sum_r \tilde w^r \mathcal W(v^r_{[n]})` and
# :math:`\log \hat Z = \log Z_1 + \sum_n \log \widehat{Z_{n+1}/Z_n}`. At every
# stage the particles are *moved* by a kernel that leaves :math:`p_n` invariant,
# *reweighted* by :math:`\mathcal W` (the new pixel is summed out exactly), and,
# while the effective sample size of the new weights is below 70% of :math:`R`,
# :math:`R` further particles are *generated* and moved afresh (the adaptive part);
# the pool is then *resampled* back to :math:`R` and the new pixel is drawn from its
# exact conditional. The standard error comes from independent runs.
#
# The stages are the same Pyro model on sub-matrices of the parameters
# (:func:`pyro_gwg.contrib.estimators.rbm_stages` builds this list for
# :func:`pyro_gwg.models.rbm`). ``num_moves=1`` gives one GWG step per stage: the
# default, a sweep of :math:`n` steps at stage :math:`n`, would take about thirty
# times more kernel steps on 64 pixels.
order = activity_order(train)
stages = [
    Stage(rbm_model, (weights[:, order[:n]], visible_bias[order[:n]], hidden_bias))
    for n in range(1, len(order) + 1)
]
arm_runs = {}  # R -> (result, seconds)
for num_particles in ARM_PARTICLES:
    start = time.perf_counter()
    result = arm(stages, GWG(), num_particles=num_particles, num_moves=1, num_runs=ARM_RUNS)
    seconds = time.perf_counter() - start
    arm_runs[num_particles] = (result, seconds)
    grown = sum(int((s.generate_iterations > 0).sum()) for s in result.stages)
    print(
        "ARM, R = {:>3}: log Z {:.3f} +- {:.3f} (error {:+.3f}); extra particles "
        "generated in {} of {} stage steps; {} model evaluations; {:.1f}s".format(
            num_particles,
            float(result.log_z),
            float(result.log_z_se),
            float(result.log_z) - exact_log_z,
            grown,
            ARM_RUNS * len(result.stages),
            result.evaluations,
            seconds,
        )
    )

# %%
# Convergence of the estimates
# ^^^^^^^^^^^^^^^^^^^^^^^^^^^^
# Left: the AIS estimates against the number of annealing steps. Right: all
# estimates against the number of model evaluations they made (a state evaluated by
# an ARM stage is a partial model of :math:`n \le 64` pixels, so somewhat cheaper).
# Bars are :math:`\pm 1` standard error; the dashed line is the exact value.
styles = {"GWG": ("C0", "o"), "Gibbs": ("C1", "s")}
fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
for shift, name in zip((0.94, 1.06), styles):
    color, marker = styles[name]
    runs = [ais_runs[name, t][0] for t in AIS_STEPS]
    estimates = [float(r.log_z) for r in runs]
    errors = [float(r.log_z_se) for r in runs]
    label = "AIS, {} steps".format(name)
    axes[0].errorbar(
        [shift * t for t in AIS_STEPS], estimates, errors, color=color, marker=marker, label=label
    )
    evaluations = [shift * r.evaluations for r in runs]
    axes[1].errorbar(evaluations, estimates, errors, color=color, marker=marker, label=label)
arm_results = [arm_runs[r][0] for r in ARM_PARTICLES]
axes[1].errorbar(
    [r.evaluations for r in arm_results],
    [float(r.log_z) for r in arm_results],
    [float(r.log_z_se) for r in arm_results],
    color="C2",
    marker="^",
    label="ARM, GWG moves (R = {}..{})".format(min(ARM_PARTICLES), max(ARM_PARTICLES)),
)
for ax in axes:
    ax.axhline(exact_log_z, color="k", linestyle="--", label="exact log Z")
    ax.set_xscale("log")
    ax.legend(fontsize=8)
axes[0].set_xlabel("annealing steps T")
axes[0].set_ylabel("estimate of log Z")
axes[0].set_title("AIS ({} particles)".format(AIS_PARTICLES))
axes[1].set_xlabel("model evaluations")
axes[1].set_title("estimate against computation")
plt.tight_layout()

longest = {name: ais_runs[name, max(AIS_STEPS)][0] for name in styles}
tighter = min(longest, key=lambda name: float(longest[name].log_z_se))
print(
    "at T = {}: standard error with GWG {:.3f}, with Gibbs {:.3f}; {} is tighter".format(
        max(AIS_STEPS),
        float(longest["GWG"].log_z_se),
        float(longest["Gibbs"].log_z_se),
        tighter,
    )
)
for name, result in longest.items():
    error = float(result.log_z) - exact_log_z
    print(
        "  {}: error {:+.3f} = {:+.1f} standard errors".format(
            name, error, error / float(result.log_z_se)
        )
    )
biggest = arm_runs[max(ARM_PARTICLES)][0]
nearest = min(  # the AIS run whose cost is closest to that of the largest ARM run
    AIS_STEPS, key=lambda t: abs(math.log(ais_runs["GWG", t][0].evaluations / biggest.evaluations))
)
for label, result in (
    ("ARM, R = {}".format(max(ARM_PARTICLES)), biggest),
    ("AIS with GWG, T = {}".format(nearest), ais_runs["GWG", nearest][0]),
):
    print(
        "{}: {} model evaluations, standard error {:.3f}, |error| {:.3f}".format(
            label,
            result.evaluations,
            float(result.log_z_se),
            abs(float(result.log_z) - exact_log_z),
        )
    )

# %%
# Part 2: learning an Ising model by PCD
# --------------------------------------
# The Ising model on :math:`D` spins :math:`x \in \{0, 1\}^D`, read as
# :math:`s = 2x - 1 \in \{-1, 1\}^D`, has
# :math:`f(x) = s^\top J s + b^\top s` with a symmetric coupling matrix :math:`J`
# (zero diagonal). As a Pyro model each spin carries its share
# :math:`s_i (J s)_i` as a factor, and the field enters through the Bernoulli
# logits; this is :func:`pyro_gwg.models.ising`. The true model here is the periodic
# ``LATTICE x LATTICE`` grid with :math:`J = \theta A` (:math:`A` the adjacency
# matrix, :math:`\theta = 0.2`; :func:`pyro_gwg.models.lattice_couplings`) and no
# field.


def ising_model(couplings, bias):
    """Ising model on ``D`` spins (site ``"x"``) with couplings ``J`` and field ``b``."""
    num_spins = couplings.shape[-1]
    with pyro.plate("spins", num_spins, dim=-1):
        x = pyro.sample("x", dist.Bernoulli(logits=2.0 * bias))
        s = 2 * x - 1
        pyro.factor("pairs", s * (s @ couplings))
    return x


num_spins = LATTICE * LATTICE
true_couplings = lattice_couplings(LATTICE, 0.2)
print("{} spins, {} bonds".format(num_spins, int((true_couplings != 0).sum()) // 2))

# %%
# Training data
# ^^^^^^^^^^^^^
# ``DATA_CHAINS`` independent GWG chains each take ``DATA_STEPS`` steps from a random
# state, and the final state of each is one training example. (The mean correlation
# of neighbouring spins in such data did not change when we made the runs several
# times longer: the chains have forgotten their start.)
data_sampler = MCMC(
    GWG(ising_model, jit_compile=True),
    num_samples=1,
    warmup_steps=DATA_STEPS,
    num_chains=DATA_CHAINS,
    disable_progbar=True,
)
data_sampler.run(true_couplings, torch.zeros(num_spins))
data = data_sampler.get_samples()["x"]  # [DATA_CHAINS, D]
spins = 2 * data - 1
bond_correlation = float(((spins @ true_couplings) * spins).sum(-1).mean() / true_couplings.sum())
print(
    "{} training states; mean correlation of neighbouring spins {:.3f}".format(
        len(data), bond_correlation
    )
)

# %%
# PCD with GWG and with Gibbs chains
# ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
# The learnable model keeps its couplings and field in Pyro's parameter store. The
# log-likelihood gradient of an energy-based model is
#
# .. math:: \nabla_\theta \log p_\theta(x) = \nabla_\theta f_\theta(x)
#           - \mathbb{E}_{p_\theta(x')}\big[\nabla_\theta f_\theta(x')\big],
#
# and PCD estimates the expectation with persistent chains :math:`x'_c` that take a
# few kernel steps per parameter update, so that they follow the model as it
# changes. :class:`pyro_gwg.contrib.train.PCD` minimises, one Adam step at a time,
#
# .. math:: \mathcal L(\theta) = \frac1C \sum_c f_\theta(x'_c)
#           - \frac1B \sum_b f_\theta(x_b) + \lambda \lVert J \rVert_1,
#
# with data batches :math:`x_b` and an L1 penalty that favours sparse couplings.
# With only five steps per update the chains lag behind the model, and the quality
# of the learned couplings depends on how far the kernel moves them in those steps:
# GWG (one informed flip per step) and single-site Gibbs (one spin chosen at
# random per step) are compared. Progress is measured by the root-mean-squared error
# :math:`\sqrt{\mathrm{mean}((\hat J - J)^2)}` of the coupling matrix
# (:func:`pyro_gwg.contrib.train.coupling_rmse`).


def learnable_ising(num_spins):
    """The Ising model with couplings and field learned as ``pyro.param`` values."""
    raw = pyro.param("couplings", lambda: torch.zeros(num_spins, num_spins))
    bias = pyro.param("bias", lambda: torch.zeros(num_spins))
    return ising_model(symmetric_couplings(raw), bias)


def learned_couplings():
    """The current coupling matrix in the parameter store (symmetric, zero diagonal)."""
    return symmetric_couplings(pyro.param("couplings")).detach()


zero_log_rmse = math.log(float(coupling_rmse(torch.zeros_like(true_couplings), true_couplings)))
log_rmse, learned = {}, {}
for name, kernel in (("GWG", GWG), ("Gibbs", Gibbs)):
    pyro.clear_param_store()  # every run starts from zero couplings
    pcd = PCD(
        learnable_ising,
        kernel(),
        num_chains=256,
        mcmc_steps=5,
        lr=PCD_LR,
        penalty={"couplings": 0.01},
        model_args=(num_spins,),
    )
    trace = []

    def record(iteration, pcd, trace=trace):
        trace.append(math.log(float(coupling_rmse(learned_couplings(), true_couplings))))

    start = time.perf_counter()
    pcd.fit({"x": data}, num_iterations=PCD_ITERATIONS, batch_size=256, callback=record)
    seconds = time.perf_counter() - start
    log_rmse[name], learned[name] = trace, learned_couplings()
    bonds = true_couplings != 0
    print(
        "{:<5}: final log RMSE {:.3f} (zero couplings {:.3f}); mean learned bond {:.3f} "
        "(true 0.2), mean |non-bond| {:.3f}; {} chain-state evaluations; {:.1f}s".format(
            name,
            trace[-1],
            zero_log_rmse,
            float(learned[name][bonds].mean()),
            float(learned[name][~bonds].abs().mean()),
            pcd.evaluations,
            seconds,
        )
    )
final = {name: np.mean(trace[-max(1, PCD_ITERATIONS // 10) :]) for name, trace in log_rmse.items()}
print(
    "mean log RMSE over the last tenth of the iterations: GWG {:.3f}, Gibbs {:.3f}; "
    "lower with {}".format(final["GWG"], final["Gibbs"], min(final, key=final.get))
)

# %%
# Learning curves and learned couplings
# ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
fig, ax = plt.subplots(figsize=(7, 4))
for name, trace in log_rmse.items():
    ax.plot(np.arange(1, len(trace) + 1), trace, color=styles[name][0], label="PCD, " + name)
ax.axhline(zero_log_rmse, color="k", linestyle="--", label="all-zero couplings (start)")
ax.set_xlabel("PCD iteration")
ax.set_ylabel("log RMSE of the couplings")
ax.set_title("Learning a {0} x {0} lattice Ising model (5 chain steps per update)".format(LATTICE))
ax.legend()
plt.tight_layout()

limit = float(max(m.abs().max() for m in (true_couplings, *learned.values())))
fig, axes = plt.subplots(1, 3, figsize=(10, 3.4), layout="constrained")
panels = [("true J", true_couplings)] + [
    ("learned, {} chains".format(n), m) for n, m in learned.items()
]
for ax, (title, matrix) in zip(axes, panels):
    image = ax.imshow(matrix, cmap="RdBu_r", vmin=-limit, vmax=limit)
    ax.set_title(title)
    ax.set_xlabel("spin j")
    ax.set_ylabel("spin i")
fig.colorbar(image, ax=axes, shrink=0.8, label="coupling")

# %%
# Interpretation
# --------------
# *Normalising constants.* When the annealing path is short for the distance between
# the base and the model, the AIS weights degenerate (the ESS column shows where):
# the effective sample size is a small fraction of the particles, so a handful of
# them decide the estimate, which scatters widely from run to run. The scatter is lopsided
# (:math:`\log \hat Z` is biased low, so most runs land below the exact value and a
# few far above it), and the standard error, computed from those same few weights,
# is itself unreliable. As :math:`T` grows, consecutive temperatures get closer, the
# weights even out, the estimates settle on the exact value and the error bars shrink
# to a size that can be trusted. At equal cost per step the kernels differ in how far
# they move the particles at each temperature: the better a kernel keeps the
# particles close to their annealed distribution, the more even the weights; the
# standard errors printed for the largest :math:`T` say which kernel did better
# here. ARM spends a large share of its evaluations on summing out the next pixel
# for every particle, and adds particles only where the weights degenerate; the right
# panel and the two lines printed under it compare its accuracy with that of AIS at
# a similar number of model evaluations, and its agreement with the exact value
# checks AIS by an unrelated construction. The test log-likelihood inherits the
# error of :math:`\log \hat Z` one for one (the same shift for every image), so a
# too-short AIS run flatters the model. The gap to the independent-pixel baseline
# measures the structure the RBM has captured beyond pixel frequencies, and the
# samples, beside the training images, show what kind of images it produces.
#
# *Learning.* PCD sees only samples, yet the error of the couplings falls below that
# of the all-zero start. How well it recovers the lattice depends on the chains.
# Persistent chains that mix slowly return negative samples that lag behind the
# current model: the gradient keeps pushing the couplings the same way after they
# have passed the right value, until the chains catch up, so the error can rise and
# fall in waves instead of decreasing steadily, and the couplings between spins that
# are not neighbours pick up spurious positive values (the lattice makes all spins
# positively correlated). In the matrices, bonds that stand out on the true diagonals
# over near-zero couplings elsewhere (held down by the L1 penalty) mean the chains
# kept up with the model; the printed mean bond and mean non-bond size this up, and
# the line above the curves says which chain sampler gave the more accurate couplings
# for this budget of five steps per update. In Grathwohl et al. (2021, Section 6) GWG
# chains learned better couplings than Gibbs chains at equal numbers of steps, with
# the largest gap at few steps per update.
torch.set_num_threads(previous_threads)

# sphinx_gallery_start_ignore
if "sphinx_gallery" not in sys.modules:  # run as a script: save the figures
    stem = os.path.splitext(os.path.basename(__file__))[0]
    for number in plt.get_fignums():
        plt.figure(number).savefig("{}_{}.png".format(stem, number))
# sphinx_gallery_end_ignore
