"""
Bayesian variable selection with a spike-and-slab prior
=======================================================

.. note::
   Requires: matplotlib, scikit-learn (beyond pyro-gwg's own requirements;
   ``pip install -e ".[docs]"`` installs them). Run as a script,
   ``python examples/tutorials/05_variable_selection.py``, it saves its figures in
   the working directory as ``05_variable_selection_<n>.png``; with ``PYRO_GWG_FAST=1``
   it runs on the smaller problems of the documentation build.

Which measurements predict how fast diabetes progresses? scikit-learn's ``diabetes``
data set records ten baseline variables of 442 patients (age, sex, body-mass index,
mean blood pressure and six blood serum measurements ``s1``-``s6``) and a measure of
disease progression one year later. Interactions between the variables could matter
too, so the candidate predictors here are the 10 main effects and their 45 pairwise
products: 55 candidates, hence :math:`2^{55} \\approx 3.6 \\times 10^{16}` subsets,
far too many to score one by one. A Markov chain has to visit the plausible ones.

A *spike-and-slab* prior gives every coefficient :math:`\\beta_j` a binary inclusion
indicator :math:`\\gamma_j`. Where :math:`\\gamma_j = 0`, :math:`\\beta_j` is held
near zero by a narrow normal, the *spike*; where :math:`\\gamma_j = 1` it has a wide
normal, the *slab*. The posterior mean of :math:`\\gamma_j`, the *posterior inclusion
probability* (PIP), is the probability that covariate :math:`j` has a non-negligible
effect, averaged over all the subsets of the other covariates.

The model has continuous unknowns (the coefficients, the noise scale, the intercept
and the prior inclusion rate) and 55 binary ones. Pyro's NUTS cannot sample discrete
sites, and pyro-gwg's discrete kernels cannot sample continuous ones, so the sampler
is :class:`pyro_gwg.MixedGibbs`: every iteration runs one NUTS step on the continuous
sites with the indicators held fixed, then one Gibbs-With-Gradients step
(:class:`pyro_gwg.GWG`) on the indicators with the continuous sites held fixed. Each
half leaves its conditional distribution invariant, so the pair samples the joint
posterior.

The tutorial

1. writes the model and runs ``MixedGibbs(NUTS(model), GWG())`` in
   :class:`pyro.infer.MCMC`, and checks the chains with ArviZ; then lets
   :class:`pyro_gwg.Auto` choose, which sums the indicators out and runs NUTS alone,
   about 2.5 times as many effective draws per second here;
2. plots the inclusion probabilities with Monte Carlo error bars;
3. compares them with the frequentist lasso: the order in which covariates enter the
   lasso path, and the set that cross-validated lasso keeps;
4. compares the spike-and-slab model with two regressions with a plain normal prior by
   approximate leave-one-out cross-validation (:func:`arviz.loo`, :func:`arviz.compare`).
"""

# %%
# The data
# --------
# The main effects are standardised, their pairwise products formed and standardised
# in turn, and the response standardised too, so every coefficient is in units of
# standard deviations of the response per standard deviation of the covariate and the
# priors below can use one scale for all of them. The fast mode used to build the
# documentation quickly keeps the whole data set and runs shorter chains.
import itertools
import os
import sys
import time

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.infer import MCMC, NUTS
from pyro.infer.autoguide import init_to_median, init_to_value
from scipy.stats import spearmanr
from sklearn.datasets import load_diabetes
from sklearn.linear_model import LassoCV, lasso_path

import pyro_gwg
from pyro_gwg import GWG, MixedGibbs

FAST = os.environ.get("PYRO_GWG_FAST") == "1"
# a small model: one PyTorch thread is fastest (the setting is restored at the end)
DEFAULT_THREADS = torch.get_num_threads()
torch.set_num_threads(1)
NUM_CHAINS = 2 if FAST else 4
NUM_WARMUP = 20 if FAST else 150
NUM_DRAWS = 20 if FAST else 350

pyro.set_rng_seed(0)
np.random.seed(0)


def standardise(a):
    return (a - a.mean(0)) / a.std(0)


diabetes = load_diabetes()
main = standardise(diabetes.data)
main_names = list(diabetes.feature_names)
pairs = list(itertools.combinations(range(main.shape[1]), 2))
products = np.stack([main[:, i] * main[:, j] for i, j in pairs], axis=1)
names = main_names + [f"{main_names[i]}:{main_names[j]}" for i, j in pairs]
X_np = np.concatenate([main, standardise(products)], axis=1)
y_np = standardise(diabetes.target)
X = torch.tensor(X_np, dtype=torch.float32)
y = torch.tensor(y_np, dtype=torch.float32)
num_obs, num_covariates = X.shape
print(f"{num_obs} patients, {num_covariates} candidate covariates ({len(main_names)} main")
print(f"effects, {len(pairs)} interactions); {NUM_CHAINS} chains of {NUM_WARMUP} warmup")
print(f"and {NUM_DRAWS} kept iterations per model")

# %%
# The model
# ---------
# With :math:`x_i` the 55 covariates of patient :math:`i`,
#
# .. math::
#
#     \pi \sim \mathrm{Beta}(1, 1), \qquad
#     \gamma_j \mid \pi \sim \mathrm{Bernoulli}(\pi), \qquad
#     \beta_j \mid \gamma_j \sim \mathcal N\big(0, s_{\gamma_j}^2\big), \quad
#     s_0 = 0.03, \; s_1 = 0.3,
#
# .. math::
#
#     \sigma \sim \mathrm{HalfNormal}(1), \qquad
#     \alpha \sim \mathcal N(0, 1), \qquad
#     y_i \sim \mathcal N\big(\alpha + x_i^\top \beta, \sigma^2\big).
#
# The uniform prior on the inclusion rate :math:`\pi` lets the data choose how sparse
# the model is, and it adjusts for multiplicity: the more candidates are null, the
# lower :math:`\pi` goes, and with it the inclusion probability of every covariate
# (Scott & Berger, 2010). The spike and the slab cross at
# :math:`|\beta_j| = \delta`, with :math:`\delta^2 = 2 \log(s_1/s_0) / (s_0^{-2} -
# s_1^{-2})`: a covariate is "included" when its effect is larger than about
# :math:`\delta`, which the cell below prints. This continuous spike, rather than a
# coefficient set exactly to zero, is the formulation of George & McCulloch (1993).
#
# The prior of :math:`\beta_j` is written as the spike, ``Normal(0, s0)``, plus a
# ``pyro.factor`` that adds :math:`\gamma_j` times the difference of the two log
# densities. For :math:`\gamma_j \in \{0, 1\}` this is the same prior as
# ``Normal(0, torch.where(gamma == 1, s1, s0))``, but GWG differentiates the log joint
# with respect to a relaxed :math:`\gamma_j \in [0, 1]` to estimate what flipping each
# indicator would change, and in this form the log joint is linear in
# :math:`\gamma_j`, so the estimate is exact and GWG proposes the flips that are
# likely to be accepted. (With the scale itself a function of :math:`\gamma_j` the
# derivative badly mispredicts the change and most proposals are rejected.)
SPIKE, SLAB = 0.03, 0.3


def spike_and_slab(X, y):
    pi = pyro.sample("pi", dist.Beta(1.0, 1.0))
    sigma = pyro.sample("sigma", dist.HalfNormal(1.0))
    intercept = pyro.sample("intercept", dist.Normal(0.0, 1.0))
    with pyro.plate("covariates", X.shape[1]):
        gamma = pyro.sample("gamma", dist.Bernoulli(pi))
        beta = pyro.sample("beta", dist.Normal(0.0, SPIKE))
        # where gamma_j = 1, swap the spike's log density for the slab's
        swap = dist.Normal(0.0, SLAB).log_prob(beta) - dist.Normal(0.0, SPIKE).log_prob(beta)
        pyro.factor("slab", gamma * swap)
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Normal(intercept + X @ beta, sigma), obs=y)


delta = np.sqrt(2 * np.log(SLAB / SPIKE) / (SPIKE**-2 - SLAB**-2))
print(f"spike and slab cross at |beta| = {delta:.3f}")

# %%
# The sampler
# -----------
# ``MixedGibbs(NUTS(model), GWG())`` takes the model from the NUTS kernel; NUTS must
# not be compiled (a compiled potential would freeze the indicators), while GWG's
# transition is captured as a graph of ATen operators (``jit_compile=True``, ready in
# moments; the default also compiles that graph with AOTInductor in a background
# process and switches to it when it is ready). ``num_flips="auto"``
# lets GWG flip several indicators per step, adapting their number during warmup.
# NUTS starts from the prior medians (coefficients at zero) rather than Pyro's default
# random point, which would put coefficients far out in the spike's tails and spend the
# early warmup on tiny steps; the chains still start from different indicators, drawn
# from the prior.
#
# :class:`pyro.infer.MCMC` starts one process per chain when the machine has enough
# idle cores and otherwise runs the chains one after the other. The helper below runs
# them one after the other in every case, one :class:`pyro.infer.MCMC` run per chain,
# converts each run with :func:`pyro_gwg.to_inference_data` (which also computes the
# pointwise log-likelihood of every observation at every draw, needed for
# leave-one-out cross-validation) and joins the chains with :func:`arviz.concat`.
#
# The PIPs below are only as good as the chains' mixing: an indicator can switch on
# only when NUTS has moved its coefficient out of the spike, so the indicators move
# more slowly than the coefficients, and the chains here are short. The Monte Carlo
# error bars and the agreement between chains (R-hat) say how far to trust them.
# pyro-gwg says so too: at the end of a run, a ``StuckChainWarning`` lists the
# indicators that never changed after warmup although the posterior is not sure of
# them. The cell prints every indicator that never changed, by name, with the value it
# kept: those kept at 1 are covariates the posterior is sure
# about; those kept at 0 are rarely included covariates that this short chain never
# switched on, whose PIPs rest on the other chains.


def run_chains(make_kernel, *args, num_chains=NUM_CHAINS, coords=None):
    runs, start = [], time.perf_counter()
    for chain in range(num_chains):
        pyro.set_rng_seed(chain)
        mcmc = MCMC(
            make_kernel(),
            num_samples=NUM_DRAWS,
            warmup_steps=NUM_WARMUP,
            disable_progbar=True,
        )
        mcmc.run(*args)
        runs.append(pyro_gwg.to_inference_data(mcmc, coords=coords))
    print(f"{num_chains} chains in {time.perf_counter() - start:.0f} s")
    return az.concat(runs, dim="chain")


def mixed_kernel():
    nuts = NUTS(spike_and_slab, init_strategy=init_to_median, max_tree_depth=6)
    return MixedGibbs(nuts, GWG(num_flips="auto", jit_compile=True))


idata = run_chains(mixed_kernel, X, y, coords={"covariates": names})
stats = idata.sample_stats
print(f"NUTS divergences: {int(stats['diverging'].sum())}")
print(f"GWG acceptance rate: {float(stats['discrete_acceptance_rate'].mean()):.2f}")
gamma_draws = idata.posterior["gamma"]
for chain in gamma_draws.chain.values:
    draws = gamma_draws.sel(chain=chain).to_pandas()  # draws x covariates
    fixed = draws.columns[draws.nunique() == 1]
    values = ", ".join(f"{name}={int(draws[name].iloc[0])}" for name in fixed)
    print(f"chain {chain}, indicators that never changed: {values or '-'}")

# %%
# Letting ``Auto`` choose
# -----------------------
# :class:`pyro_gwg.Auto` reads the model and gives every site a move. Here it does
# not sample the indicators at all: given the coefficients, :math:`\gamma_j` enters
# only its own prior and the ``slab`` factor of covariate :math:`j` (the plan's probe
# checks that no other element of the plate reads it), so Pyro can sum each indicator
# out, and NUTS samples the coefficients under the resulting two-component prior, the
# continuous spike-and-slab mixture. The indicators are drawn afterwards from their
# exact conditional given each draw, so the PIPs come out as before.
#
# Summing the indicators out is the better call here. Measured with 2 chains of 150
# warmup and 300 kept iterations each (on a loaded 2-core machine), the slowest of
# :math:`\pi`, :math:`\sigma` and the 55 coefficients reached 44 effective draws in
# 223 s under ``Auto`` against 8.4 in 106 s under ``MixedGibbs(NUTS, GWG)``: 0.20
# against 0.08 effective draws per second, with the same leading PIPs. NUTS moves a
# coefficient between spike and slab in one trajectory, where the mixed sweep must wait
# for GWG to flip its indicator first. (With ``PYRO_GWG_FAST=1`` the chains below are
# too short to show the difference.)


def auto_kernel():
    options = {"init_strategy": init_to_median, "max_tree_depth": 6}
    return pyro_gwg.Auto(spike_and_slab, nuts_options=options)


print(auto_kernel().plan(X, y))
idata_auto = run_chains(auto_kernel, X, y, coords={"covariates": names})
pip_auto = idata_auto.posterior["gamma"].mean(("chain", "draw")).to_series()
ess_pi = {
    "MixedGibbs(NUTS, GWG)": float(az.ess(idata, var_names=["pi"])["pi"]),
    "Auto (NUTS, indicators summed out)": float(az.ess(idata_auto, var_names=["pi"])["pi"]),
}
print(f"ESS of pi: {ess_pi}")
pip_mixed = idata.posterior["gamma"].mean(("chain", "draw")).to_series()
print(f"largest PIP difference between the two runs: {(pip_auto - pip_mixed).abs().max():.2f}")

# %%
# Convergence checks
# ------------------
# :func:`arviz.summary` gives the effective sample sizes and the rank-normalised
# :math:`\hat R` of the noise scale, the inclusion rate, the intercept and the
# coefficients of the five covariates with the highest PIPs. :math:`\hat R` near 1
# (below about 1.01 for a final analysis) means the chains agree. The quantities that
# depend on *which* covariates are included, :math:`\pi` and the coefficients of
# covariates with intermediate PIPs, are the slowest to get there, for the reason
# given above; a run whose :math:`\hat R` is still well above 1.01 needs longer
# chains (``NUM_DRAWS``) before its PIPs are reported.
pip = idata.posterior["gamma"].mean(("chain", "draw")).to_series()
ranked = pip.sort_values(ascending=False)
top = list(ranked.index[:5])
summary = az.summary(
    idata,
    var_names=["sigma", "pi", "intercept", "beta"],
    coords={"covariates": top},
    kind="all",
)
print(summary[["mean", "sd", "hdi_3%", "hdi_97%", "ess_bulk", "ess_tail", "r_hat"]])
rhat_beta = az.rhat(idata, var_names=["beta"])["beta"]
print(f"largest R-hat among all 55 coefficients: {float(rhat_beta.max()):.3f}")

# %%
# The trace plots show each chain's draws and their marginal densities, the rank plots
# whether each chain's draws spread evenly over the pooled ranks (flat histograms mean
# the chains agree).
az.plot_trace(
    idata,
    var_names=["sigma", "pi", "beta"],
    coords={"covariates": top[:3]},
    legend=True,
    figsize=(9, 7),
)
plt.tight_layout()

az.plot_rank(
    idata,
    var_names=["sigma", "pi", "beta"],
    coords={"covariates": top[:3]},
    figsize=(9, 5),
)
plt.tight_layout()

# %%
# Posterior inclusion probabilities
# ---------------------------------
# The error bars are :math:`\pm 2` Monte Carlo standard errors from
# :func:`arviz.mcse`, which divides the posterior standard deviation of
# :math:`\gamma_j` by the square root of its effective sample size (estimated from all
# chains): they measure how precisely this run estimates each PIP, not the
# uncertainty about whether the covariate matters (the PIP itself is that). A
# covariate whose indicator never changed in any chain has no estimable error; its bar
# is drawn without one. The dots are the PIPs of the single chains.
mcse = az.mcse(idata, var_names=["gamma"])["gamma"].to_series().fillna(0.0)
per_chain = idata.posterior["gamma"].mean("draw").to_pandas()  # chains x covariates


def plot_pips(ranked, mcse, per_chain, count=25):
    shown = ranked.index[:count][::-1]
    rows = np.arange(len(shown))
    fig, ax = plt.subplots(figsize=(7, 7))
    low = np.minimum(2 * mcse[shown], ranked[shown])  # intervals clipped to [0, 1]
    high = np.minimum(2 * mcse[shown], 1 - ranked[shown])
    ax.barh(rows, ranked[shown], xerr=[low, high], color="tab:blue", alpha=0.6)
    for chain in per_chain.index:
        ax.plot(per_chain.loc[chain, shown], rows, "k.", ms=4)
    ax.axvline(0.5, color="tab:red", ls="--", lw=1, label="PIP = 0.5")
    ax.set_yticks(rows, shown)
    ax.set_xlim(0, 1.05)
    ax.set_xlabel("posterior inclusion probability")
    ax.set_title(f"The {count} covariates with the highest PIPs (dots: single chains)")
    ax.legend(loc="lower right")
    plt.tight_layout()


plot_pips(ranked, mcse, per_chain)
selected = list(ranked.index[ranked > 0.5])
print(f"PIP > 0.5 (the median probability model): {', '.join(selected)}")
size = idata.posterior["gamma"].sum("covariates")
print(f"posterior mean number of included covariates: {float(size.mean()):.1f}")

# %%
# Against the lasso
# -----------------
# The lasso minimises the squared error plus :math:`\lambda \lVert \beta \rVert_1`;
# as :math:`\lambda` decreases from large values, covariates enter the model one by
# one. :func:`sklearn.linear_model.lasso_path` computes the whole path, and the order
# of entry is a frequentist ranking of the covariates, to set beside the PIPs. The
# path is drawn with the covariates that have PIP > 0.5 in colour.
alphas, coefs, _ = lasso_path(X_np, y_np)
nonzero = np.abs(coefs) > 0
# the largest penalty at which each covariate is in the model (0: never enters)
entry = np.where(nonzero.any(1), np.where(nonzero, alphas, 0.0).max(1), 0.0)
entry = dict(zip(names, entry))
lasso_order = sorted(names, key=lambda name: -entry[name])
lasso_cv = LassoCV(cv=5, random_state=0).fit(X_np, y_np)


def plot_lasso_path(alphas, coefs, highlight, cv_alpha):
    fig, ax = plt.subplots(figsize=(9, 5))
    for name, path in zip(names, coefs):
        if name in highlight:
            ax.plot(alphas, path, lw=2, label=name)
        else:
            ax.plot(alphas, path, color="0.75", lw=0.8)
    ax.axvline(cv_alpha, color="k", ls="--", lw=1, label="LassoCV penalty")
    ax.set_xscale("log")
    ax.invert_xaxis()
    ax.set_xlabel(r"lasso penalty $\lambda$ (decreasing to the right)")
    ax.set_ylabel("coefficient (standardised)")
    ax.set_title("Lasso path; in colour: covariates with PIP > 0.5")
    ax.legend(fontsize=8, ncol=2, loc="upper left")
    plt.tight_layout()


plot_lasso_path(alphas, coefs, selected, lasso_cv.alpha_)

# %%
# Side by side, the first ten covariates by each ranking, and the rank correlation of
# the PIPs with the penalty at which each covariate enters the lasso path:
print(f"{'rank':>4}  {'by PIP':<12} {'PIP':>5}   {'lasso entry':<12}")
for k in range(10):
    name = ranked.index[k]
    print(f"{k + 1:>4}  {name:<12} {ranked[name]:5.2f}   {lasso_order[k]:<12}")
rho = spearmanr(ranked[names].values, [entry[name] for name in names]).statistic
print(f"Spearman correlation of PIP and lasso entry penalty: {rho:.2f}")


def plot_entry_vs_pip(ranked, entry, label_count=8):
    fig, ax = plt.subplots(figsize=(7, 5))
    first = np.array([entry[name] for name in ranked.index])
    ax.scatter(np.where(first > 0, first, np.nan), ranked.values, s=20)
    for k, name in enumerate(ranked.index[:label_count]):
        if entry[name] > 0:
            ax.annotate(
                name,
                (entry[name], ranked[name]),
                fontsize=8,
                xytext=(5, 3 if k % 2 else -9),
                textcoords="offset points",
            )
    ax.set_xscale("log")
    ax.margins(x=0.08)
    ax.set_xlabel(r"penalty $\lambda$ at which the covariate enters the lasso path")
    ax.set_ylabel("posterior inclusion probability")
    ax.invert_xaxis()
    ax.set_title("Lasso entry (earlier to the left) against PIP")
    plt.tight_layout()


plot_entry_vs_pip(ranked, entry)

# %%
# Cross-validated lasso picks the penalty that predicts best and keeps every
# covariate with a non-zero coefficient at that penalty; the Bayesian counterpart
# here is the median probability model, PIP > 0.5.
kept = {name for name, c in zip(names, lasso_cv.coef_) if c != 0}
chosen = set(selected)
print(f"LassoCV keeps {len(kept)} covariates, PIP > 0.5 selects {len(chosen)}")
print(f"in both:          {', '.join(sorted(kept & chosen, key=names.index)) or '-'}")
print(f"only LassoCV:     {', '.join(sorted(kept - chosen, key=names.index)) or '-'}")
print(f"only PIP > 0.5:   {', '.join(sorted(chosen - kept, key=names.index)) or '-'}")

# %%
# Model comparison by leave-one-out cross-validation
# --------------------------------------------------
# Is selecting variables worth it for prediction? Two alternatives, each run with
# Pyro's NUTS alone (all their unknowns are continuous, so it can be compiled):
#
# * a *dense* regression on all 55 covariates with the slab as prior,
#   :math:`\beta_j \sim \mathcal N(0, 0.3^2)` for every :math:`j`: no selection, only
#   shrinkage (a Bayesian ridge regression);
# * the same on the 10 main effects only.
#
# The interactions are strongly correlated, which makes the posterior of the dense
# model's coefficients a long, thin ellipsoid, slow for NUTS until its mass matrix has
# adapted to it. But the prior :math:`\mathcal N(0, 0.3^2 I)` is the same in every
# rotated basis, so the model can be written, exactly, in the basis of the principal
# axes of :math:`X`: with the singular value decomposition :math:`X = U S V^\top`,
# :math:`X \beta = (X V) \theta` with :math:`\theta = V^\top \beta \sim
# \mathcal N(0, 0.3^2 I)`, and the columns of :math:`X V` are orthogonal, so the
# coordinates of :math:`\theta` are independent given :math:`\sigma`. Rescaling each
# one by a rough guess of its posterior standard deviation,
# :math:`\theta_k = d_k u_k` with :math:`d_k = (s_k^2 + 0.3^{-2})^{-1/2}` (the
# posterior standard deviation at :math:`\sigma = 1`), leaves coordinates :math:`u_k`
# of about unit scale, which NUTS samples in a few leapfrog steps once its diagonal
# mass matrix has adapted to the narrower intercept and noise scale. The likelihood of
# each patient is unchanged (:math:`\beta = V (d \odot u)` if the coefficients are
# wanted). The chains start at the least-squares fit, and two chains per model are
# enough for these Gaussian-shaped posteriors.
#
# :func:`arviz.loo` estimates each model's expected log predictive density for a new
# patient (ELPD) by Pareto-smoothed importance sampling from the pointwise
# log-likelihoods that :func:`pyro_gwg.to_inference_data` stored, and
# :func:`arviz.compare` ranks the models by it, with the standard error of each
# difference.


def normal_prior(Z, y, prior_scale):
    """Regression on the columns of ``Z`` with independent normal priors."""
    sigma = pyro.sample("sigma", dist.HalfNormal(1.0))
    intercept = pyro.sample("intercept", dist.Normal(0.0, 1.0))
    with pyro.plate("axes", Z.shape[1]):
        u = pyro.sample("u", dist.Normal(0.0, prior_scale))
    with pyro.plate("data", Z.shape[0]):
        pyro.sample("y", dist.Normal(intercept + Z @ u, sigma), obs=y)


def whitened(X):
    """``(X V diag(d), 0.3 / d)``: the dense model in rotated, rescaled coordinates."""
    _, s, vh = torch.linalg.svd(X, full_matrices=False)
    d = (s**2 + SLAB**-2).rsqrt()
    return X @ vh.T * d, SLAB / d


def normal_kernel(Z, y):
    # start at the least-squares fit (the columns of Z are orthogonal)
    start = {"u": Z.T @ y / Z.pow(2).sum(0)}
    return NUTS(
        normal_prior,
        init_strategy=init_to_value(values=start, fallback=init_to_median),
        max_tree_depth=6,
        jit_compile=True,
        ignore_jit_warnings=True,
    )


Z_all, scale_all = whitened(X)
Z_main, scale_main = whitened(X[:, : len(main_names)])
idata_dense = run_chains(lambda: normal_kernel(Z_all, y), Z_all, y, scale_all, num_chains=2)
idata_main = run_chains(lambda: normal_kernel(Z_main, y), Z_main, y, scale_main, num_chains=2)
models = {
    "spike-and-slab, 55": idata,
    "normal prior, 55": idata_dense,
    "normal prior, 10 main effects": idata_main,
}
for label, data in models.items():
    loo = az.loo(data)
    bad = int((loo.pareto_k > 0.7).sum())
    print(f"{label:<30} elpd_loo {loo.elpd_loo:8.1f} (se {loo.se:.1f}), Pareto k > 0.7: {bad}")
comparison = az.compare(models)
print(comparison[["rank", "elpd_loo", "p_loo", "elpd_diff", "dse"]])
az.plot_compare(comparison, figsize=(8, 3))
plt.title("Leave-one-out ELPD (higher is better)")
plt.tight_layout()
print(f"best by LOO: {comparison.index[0]}")

# %%
# Interpretation
# --------------
# The numbers the conclusions rest on, gathered from the cells above:
rhat = az.rhat(idata, var_names=["sigma", "pi", "beta"])
worst = max(float(rhat[name].max()) for name in ["sigma", "pi", "beta"])
print(f"largest R-hat of sigma, pi and the coefficients: {worst:.2f}")
print(f"PIP > 0.9: {', '.join(ranked.index[ranked > 0.9])}")
spread = per_chain.max() - per_chain.min()
print(f"single-chain PIPs differing by more than 0.3: {', '.join(spread.index[spread > 0.3])}")
print("position in the lasso order of each covariate with PIP > 0.5:")
print("  " + ", ".join(f"{name} {lasso_order.index(name) + 1}" for name in selected))
corr = np.corrcoef(X_np[:, :10], rowvar=False)
print(f"correlation of s1 and s2: {corr[4, 5]:.2f}, of s3 and s4: {corr[6, 7]:.2f}")
for label in comparison.index[1:]:
    diff, se = comparison.loc[label, ["elpd_diff", "dse"]]
    verdict = "clearly worse" if diff > 2 * se else "not distinguishable"
    print(f"{label}: {diff:.1f} below the best, {se:.1f} standard error ({verdict})")
torch.set_num_threads(DEFAULT_THREADS)  # leave PyTorch's setting as it was

# %%
# * **The selected covariates.** The covariates with PIPs near one include body-mass
#   index, the serum measurement ``s5`` (a log triglyceride level) and blood
#   pressure, the strongest predictors in every analysis of this data set. Most of the
#   45 interactions have small PIPs: the prior inclusion rate :math:`\pi` is learnt
#   from the data, and the fewer candidates the data support, the lower it goes and
#   with it the prior odds of every candidate.
# * **Correlated covariates share their probability.** The serum measurements
#   ``s1``-``s4`` are strongly correlated with each other (two of the correlations are
#   printed above), and so are many of the interactions built from them. The posterior
#   is then uncertain about *which* of them to include rather than *whether* one of
#   them matters, and their PIPs come out in the middle. They are also among the PIPs
#   on which single chains disagree (the dots in the PIP plot, and the list printed
#   above) and whose error bars are widest: moving the posterior mass from one
#   covariate to a correlated one needs a coordinated move of several coefficients and
#   indicators, which Gibbs-type sweeps make slowly. :math:`\hat R` says how far this
#   run got; for a final analysis, run the chains longer (``NUM_DRAWS``) until it is
#   close to 1.
# * **Against the lasso.** Body-mass index, ``s5`` and blood pressure are also the
#   first three covariates to enter the lasso path, so the two rankings agree at the
#   top (the positions printed above and the rank correlation after the lasso
#   table). Lower down they part: the lasso brings in a covariate as soon as it
#   reduces the residual, whereas a PIP asks whether it is needed given all the
#   others. Cross-validated lasso keeps more
#   covariates than the median probability model, as it typically does: the penalty
#   that predicts best is small enough to let many weak or redundant covariates in
#   with shrunken coefficients.
# * **Prediction.** The LOO comparison says which model predicts new patients best
#   and whether each difference exceeds about two of its standard errors (``dse``); a
#   smaller difference does not separate two models. Selection and shrinkage are two
#   ways of spending the 55 candidates: the dense regression fits all of them and its
#   effective number of parameters (``p_loo``) shows it, while the spike-and-slab
#   model spends its parameters on the few covariates it includes, and the
#   main-effects model rules the interactions out from the start.
#   The Pareto :math:`k` counts printed with the LOO estimates say whether the
#   importance-sampling approximation can be trusted for every patient.
# * **The sampler.** NUTS moves the 55 coefficients together with the noise scale,
#   the intercept and :math:`\pi`, and GWG switches the indicators, proposing the
#   flips its exact first-order estimate favours. An indicator can switch only when
#   NUTS has moved its coefficient across :math:`\delta`, so the indicators mix more
#   slowly than the coefficients. :func:`pyro_gwg.models.spike_and_slab_regression`
#   integrates the coefficients out analytically (with a point-mass spike) and leaves
#   GWG only the indicators, which mixes far better; this tutorial keeps them because
#   the pointwise likelihood of every patient, which leave-one-out cross-validation
#   needs, is then part of the model (``docs/getting_started.rst``, section
#   "Spike-and-slab regression", compares the two forms).

# sphinx_gallery_start_ignore
if "sphinx_gallery" not in sys.modules:  # run as a script: save the figures
    stem = os.path.splitext(os.path.basename(__file__))[0]
    for number in plt.get_fignums():
        plt.figure(number).savefig("{}_{}.png".format(stem, number))
# sphinx_gallery_end_ignore
