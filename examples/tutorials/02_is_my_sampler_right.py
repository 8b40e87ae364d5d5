"""
Is my sampler right?
====================

.. note::
   Requires: matplotlib, statsmodels (beyond pyro-gwg's own requirements;
   ``pip install -e ".[docs]"`` installs them). Run as a script,
   ``python examples/tutorials/02_is_my_sampler_right.py``, it saves its figures in
   the working directory as ``02_is_my_sampler_right_<n>.png``; with ``PYRO_GWG_FAST=1``
   it runs on the smaller problems of the documentation build.

A Markov chain can look healthy, with R-hat near one and a large effective sample size,
and still sample the wrong distribution: a mistake in a model's log density, a kernel
used outside what it can do exactly, or a bug in a sampler can mix perfectly well. This
tutorial runs three checks a user can make on their own model, from the strongest to
the most widely applicable:

1. **exact enumeration** (:func:`pyro_gwg.exact_posterior`) when the model is small
   enough to list every joint state of its discrete sites: compare the draws with the
   exact answer, with a tolerance set by the effective sample size;
2. **the usual MCMC diagnostics** through ArviZ (R-hat, ESS, trace and rank plots),
   which detect chains that disagree with each other, but not chains that agree on the
   wrong answer;
3. **simulation-based calibration** (:func:`pyro_gwg.contrib.sbc.sbc`), which needs no exact
   answer and so works at any model size.

Each check is run twice: on the exact Gibbs-With-Gradients kernel
(:class:`pyro_gwg.GWG`) and on a deliberately broken sampler, to show what a failure
looks like.

The model is a two-regime hidden Markov model of the annual flow of the Nile at Aswan
(the series statsmodels ships, 1871-1970), around the years when the flow dropped at
the end of the 19th century: each year is "wet" or "dry", and the regime persists from
one year to the next. With one binary unknown per year, a window of sixteen years has
:math:`2^{16}` joint states: few enough to enumerate, and GWG samples them as it would
sample a model far too large to enumerate.
"""

# %%
# The data and the model
# ----------------------
# We measure the flow in units of :math:`10^{10}\,\mathrm{m}^3` per year. Year
# :math:`t` is dry (:math:`z_t = 1`) or wet (:math:`z_t = 0`); the regime stays the same
# from one year to the next with probability :math:`\rho`, and the flow is normal
# around the mean of its regime (the means of the decades before 1890 and after 1910,
# a fixed scale):
#
# .. math::
#
#    z_1 \sim \mathrm{Bernoulli}(1/2), \quad
#    P(z_t = z_{t-1}) = \rho, \quad
#    y_t \sim \mathcal N\big(\mu_{\mathrm{wet}} + (\mu_{\mathrm{dry}} -
#    \mu_{\mathrm{wet}})\, z_t,\ \sigma^2\big).
#
# It is written as an ordinary Pyro model, a loop over years under ``pyro.markov``.
# Nothing in it is specific to pyro-gwg; it broadcasts over a batch of states (several
# chains, or a chunk of an enumeration) because every operation is elementwise.
import os
import sys
import time

import arviz as az
import matplotlib.pyplot as plt
import pyro
import pyro.distributions as dist
import statsmodels.api as sm
import torch
from pyro import poutine

import pyro_gwg
from pyro_gwg import GWG, diagnostics
from pyro_gwg.contrib.sbc import sbc

FAST = os.environ.get("PYRO_GWG_FAST") == "1"
pyro.set_rng_seed(0)

nile = sm.datasets.nile.load_pandas().data
all_years = nile["year"].to_numpy().astype(int)
all_flow = torch.tensor(nile["volume"].to_numpy() / 100.0, dtype=torch.float32)
WET = float(all_flow[all_years < 1890].mean())
DRY = float(all_flow[all_years >= 1910].mean())
SIGMA = float(
    torch.cat([all_flow[all_years < 1890] - WET, all_flow[all_years >= 1910] - DRY]).std()
)
RHO = 0.8
window = (all_years >= 1890) & (all_years < 1906)
years, flow = all_years[window], all_flow[window]
print("wet mean {:.2f}, dry mean {:.2f}, scale {:.2f}".format(WET, DRY, SIGMA))


def regimes(y):
    dry = None
    for t in pyro.markov(range(len(y))):
        p_dry = 0.5 if dry is None else RHO * dry + (1 - RHO) * (1 - dry)
        dry = pyro.sample("dry_{}".format(t), dist.Bernoulli(p_dry))
        pyro.sample("y_{}".format(t), dist.Normal(WET + (DRY - WET) * dry, SIGMA), obs=y[t])


fig, ax = plt.subplots(figsize=(9, 3))
ax.plot(all_years, all_flow.numpy(), "k.-", lw=0.8)
ax.axvspan(years[0] - 0.5, years[-1] + 0.5, color="C1", alpha=0.2, label="modelled window")
ax.axhline(WET, color="C0", ls="--", label="wet mean")
ax.axhline(DRY, color="C3", ls="--", label="dry mean")
ax.set(xlabel="year", ylabel="flow (10^10 m^3)", title="Annual flow of the Nile at Aswan")
ax.legend(loc="upper right", fontsize=8)
plt.tight_layout()

# %%
# Check 1: the exact posterior
# ----------------------------
# :func:`pyro_gwg.exact_posterior` evaluates the model's log joint density at every
# joint state (in batches) and normalises.
start = time.perf_counter()
exact = pyro_gwg.exact_posterior(regimes, flow)
print("enumerated {:,} states in {:.1f} s".format(exact.num_states, time.perf_counter() - start))
sites = ["dry_{}".format(t) for t in range(len(flow))]
exact_p_dry = torch.stack([exact.mean()[site] for site in sites])

# %%
# We summarise a path of regimes by three numbers: how many years are dry, how many
# times the regime switches, and the first dry year. Their exact posterior means are
# sums over the enumerated states, weighted by their probabilities.


def path(values):
    return torch.stack([values[site] for site in sites], -1).double()


QUANTITIES = {
    "dry_years": lambda v: path(v).sum(-1),
    "switches": lambda v: (path(v).diff(dim=-1) != 0).double().sum(-1),
    "first_dry": lambda v: years[0] + (path(v) == 0).double().cumprod(-1).sum(-1),
}
state_values = exact.energy.values_from_codes(exact.states())
exact_means = {q: float(exact.probs.double() @ f(state_values)) for q, f in QUANTITIES.items()}
print("exact posterior means:", {q: round(m, 3) for q, m in exact_means.items()})

# %%
# Now the sampler. GWG suits this model: each step it scores the flip of every year's
# regime by a first-order Taylor expansion of the log density, proposes flips in
# proportion and corrects with a Metropolis-Hastings test, so the chain is exact
# whatever the quality of that expansion. The broken sampler is the same kernel on the
# model with its log density doubled (``poutine.scale(model, 2.0)``): it samples
# :math:`p(z \mid y)^2`, normalised, a posterior that is too sure of itself. This is
# what a model that counts its likelihood twice does, and no sampler diagnostic can
# see it.
num_samples, warmup = (500, 200) if FAST else (3000, 500)


def run(kernel):
    mcmc = pyro_gwg.MCMC(
        kernel, num_samples=num_samples, warmup_steps=warmup, num_chains=4, disable_progbar=True
    )
    start = time.perf_counter()
    mcmc.run(flow)
    print("{} draws x 4 chains in {:.1f} s".format(num_samples, time.perf_counter() - start))
    idata = pyro_gwg.to_inference_data(mcmc)
    values = mcmc.get_samples(group_by_chain=True)
    for name, f in QUANTITIES.items():  # the summaries, beside the sites
        idata.posterior[name] = (("chain", "draw"), f(values).numpy())
    return mcmc, idata


exact_run, exact_idata = run(GWG(regimes))
broken_run, broken_idata = run(GWG(poutine.scale(regimes, scale=2.0)))

# %%
# Compare the draws with the exact answer. An error means something only against its
# Monte Carlo standard error: the difference between the sampled and the exact
# posterior mean, divided by ArviZ's MCSE (which accounts for the autocorrelation of
# the draws through the effective sample size), is approximately standard normal for a
# correct sampler, so :math:`|z| > 4` is a failure rather than bad luck. The
# total-variation distance over all joint states
# (:func:`pyro_gwg.diagnostics.tv_distance`) looks at the whole distribution; it is
# never exactly zero for a finite run, so compare it with that of as many exact draws.


def check_against_exact(name, mcmc, idata):
    codes = exact.energy.codes_from_values(mcmc.get_samples())
    reference = diagnostics.tv_distance(exact.sample_codes(len(codes)), exact)
    print(
        "{}: total-variation distance {:.3f} (as many exact draws: {:.3f})".format(
            name, diagnostics.tv_distance(codes, exact), reference
        )
    )
    mcse = az.mcse(idata, var_names=list(QUANTITIES))
    for quantity, exact_value in exact_means.items():
        sampled = float(idata.posterior[quantity].mean())
        z = (sampled - exact_value) / float(mcse[quantity])
        print(
            "  {:<10} sampled {:8.3f}  exact {:8.3f}  mcse {:.3f}  z = {:+6.1f}  {}".format(
                quantity,
                sampled,
                exact_value,
                float(mcse[quantity]),
                z,
                "FAIL" if abs(z) > 4 else "ok",
            )
        )


check_against_exact("GWG", exact_run, exact_idata)
check_against_exact("GWG on the doubled density", broken_run, broken_idata)

# %%
# The probability that each year was dry shows the difference: the broken sampler is
# overconfident, pushing every year toward 0 or 1.
fig, ax = plt.subplots(figsize=(9, 3.5))
ax.plot(years, exact_p_dry.numpy(), "k_", ms=14, mew=2, label="exact")
for offset, (name, mcmc, colour) in enumerate(
    [("GWG", exact_run, "C0"), ("broken", broken_run, "C3")]
):
    p_dry = path(mcmc.get_samples()).mean(0)
    ax.bar(years + (offset - 0.5) * 0.35, p_dry.numpy(), 0.35, color=colour, label=name)
ax.set(xlabel="year", ylabel="P(dry year | flows)", title="Sampled and exact posteriors")
ax.legend(fontsize=8)
plt.tight_layout()

# %%
# Check 2: what the usual diagnostics say
# ---------------------------------------
# R-hat and the effective sample size compare chains with each other. Both runs look
# healthy: the broken chains agree with each other, on the wrong posterior.
for name, idata in [("GWG", exact_idata), ("GWG on the doubled density", broken_idata)]:
    print(name)
    print(az.summary(idata, var_names=list(QUANTITIES), kind="diagnostics"))

az.plot_trace(broken_idata, var_names=list(QUANTITIES), figsize=(10, 6))
plt.gcf().suptitle("Trace of the broken sampler: nothing looks wrong")
plt.tight_layout()

# %%
# Rank plots (the ranks of each chain's draws among the draws of all chains) should
# be flat for every chain; the autocorrelation shows how far apart draws must be to be
# nearly independent, which matters for the next check.
az.plot_rank(exact_idata, var_names=list(QUANTITIES), figsize=(10, 3))
plt.tight_layout()
az.plot_autocorr(exact_idata, var_names=["dry_years"], combined=True, figsize=(5, 3))
plt.tight_layout()

# %%
# Check 3: simulation-based calibration
# -------------------------------------
# Most models are far too large to enumerate. Simulation-based calibration (Talts et
# al. 2018) still works: draw the unknowns from the prior, simulate data from them,
# run the sampler on the simulated data and find the rank of the true value among
# :math:`L` posterior draws. If the sampler is exact, the true value is just one more
# posterior draw, so its rank is uniform on :math:`\{0, \dots, L\}`; a U-shaped
# histogram means posteriors too narrow, a hump too wide, a slope a bias. A
# chi-square test per quantity turns this into a p-value.
#
# Only the model and the kernel are needed: :func:`pyro_gwg.contrib.sbc.sbc` simulates every
# observed site itself. Any function of the unknowns has uniform ranks under an exact
# sampler; we rank the three summaries (``statistics=``), which carry more information
# than the single 0/1 regimes, and thin the chains so that the draws are nearly
# independent.
num_simulations, num_draws = (10, 19) if FAST else (80, 39)
settings = dict(
    num_simulations=num_simulations,
    num_draws=num_draws,
    num_chains=2,
    warmup_steps=50,
    thinning=5,
    statistics=QUANTITIES,
    progress_bar=False,
)
start = time.perf_counter()
calibration = sbc(regimes, GWG, flow, **settings)
print("{} simulations in {:.1f} s".format(num_simulations, time.perf_counter() - start))
broken_calibration = sbc(
    regimes, lambda model: GWG(poutine.scale(model, scale=2.0)), flow, **settings
)
for name, result in [("GWG", calibration), ("broken", broken_calibration)]:
    p = {q: round(float(value), 4) for q, value in result.p_values().items()}
    print("{:<7} p-values {}; passed at 1%: {}".format(name, p, result.passed(0.01)))

# %%
# The rank histograms, with the 99% band that a uniform histogram stays in:
calibration.plot()
plt.gcf().suptitle("GWG: ranks of the true values")
plt.tight_layout()
broken_calibration.plot()
plt.gcf().suptitle("GWG on the doubled density")
plt.tight_layout()

# %%
# What to take away
# -----------------
# * R-hat, ESS and rank plots only compare chains with each other: the broken sampler
#   passes them. They are necessary, not sufficient.
# * On a model small enough to enumerate, compare with
#   :func:`pyro_gwg.exact_posterior`, with errors measured in Monte Carlo standard
#   errors. A shrunken copy of a large model (fewer sites, a shorter series) is often
#   small enough, and bugs in a model or a kernel rarely depend on its size.
# * At any size, run simulation-based calibration. It has less power than an exact
#   comparison (the few simulations of the fast mode may miss an error that the full
#   run's finds), and it cannot see an error that leaves the prior's average unchanged
#   (a sampler that returns the prior passes it), but it needs nothing but the model.

# sphinx_gallery_start_ignore
if "sphinx_gallery" not in sys.modules:  # run as a script: save the figures
    stem = os.path.splitext(os.path.basename(__file__))[0]
    for number in plt.get_fignums():
        plt.figure(number).savefig("{}_{}.png".format(stem, number))
# sphinx_gallery_end_ignore
