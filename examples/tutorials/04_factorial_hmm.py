"""
Decoding a factorial HMM on a real multivariate time series
===========================================================

.. note::
   Requires: matplotlib, statsmodels (beyond pyro-gwg's own requirements;
   ``pip install -e ".[docs]"`` installs them). Run as a script,
   ``python examples/tutorials/04_factorial_hmm.py``, it saves its figures in
   the working directory as ``04_factorial_hmm_<n>.png``; with ``PYRO_GWG_FAST=1``
   it runs on the smaller problems of the documentation build.

A factorial hidden Markov model (FHMM) explains a multivariate time series by
:math:`K` hidden binary chains, the *factors*, each switching on and off on its own
Markov schedule, and each adding its own shift to the mean of the observations while
it is on. Here the series is quarterly US macroeconomic data (the ``macrodata`` set
that statsmodels ships, 1959-2009): the growth of real GDP, the change of the
unemployment rate, and inflation. A factor that lowers growth and raises
unemployment while it is on is a "recession regime"; one that moves inflation is an
"inflation regime". Decoding the model means computing, for every quarter and every
factor, the posterior probability that the factor was on.

The unknowns are :math:`T \\times K` coupled bits: each bit is tied to its neighbours
in time by the Markov prior and to the other factors of the same quarter by the
likelihood. Exact inference sums over the :math:`2^K` joint states of the factors at
every step, so its cost and memory grow like :math:`2^K`. Gibbs-With-Gradients
(:class:`pyro_gwg.GWG`) is built for exactly this kind of posterior, many coupled
binary unknowns: each step costs one forward and one backward pass of the model, it
uses the gradient of the log joint to choose which bits to flip, and a
Metropolis-Hastings test keeps the chain exact.

The tutorial

1. fits the model's parameters (transition probabilities, weights, offsets, noise) at
   :math:`K = 2` by maximum likelihood with Pyro's SVI;
2. samples the hidden states with GWG and plots the decoded regimes against the data;
3. checks GWG's posterior marginals against exact ones from Pyro's own enumeration
   (``pyro.markov`` with ``infer={"enumerate": "parallel"}`` and
   :class:`~pyro.infer.TraceEnum_ELBO`);
4. increases :math:`K` until enumeration no longer fits in memory, while GWG's cost
   per step grows at most linearly.
"""

# %%
# The data
# --------
# GDP growth is the annualised quarterly log difference in percent; unemployment
# enters as its change from the previous quarter, inflation as it is. Each series is
# standardised to mean zero and unit variance. The fast mode used to build the
# documentation quickly keeps the whole series and runs fewer steps everywhere.
import itertools
import os
import sys
import time
import warnings

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pyro
import pyro.distributions as dist
import statsmodels.api as sm
import torch
from pyro import poutine
from pyro.infer import SVI, Trace_ELBO, TraceEnum_ELBO

import pyro_gwg
from pyro_gwg import GWG, MCMC, StuckChainWarning

FAST = os.environ.get("PYRO_GWG_FAST") == "1"
pyro.set_rng_seed(0)
np.random.seed(0)
# The models here are small: one thread per step is the fastest on a busy machine.
torch.set_num_threads(1)
# The timing runs of the scaling section below are far too short to mix (10 warmup
# steps from random states), and pyro-gwg says so after each (a StuckChainWarning about
# bits the chains hold at different values). The comparison with the exact answer is
# the real check of the sampler, so the warning is silenced here.
warnings.filterwarnings("ignore", category=StuckChainWarning)

macro = sm.datasets.macrodata.load_pandas().data


def growth(column):
    """Annualised quarter-on-quarter growth in percent."""
    return 400 * np.diff(np.log(macro[column].to_numpy()))


series = {
    "GDP growth": growth("realgdp"),
    "unemployment change": np.diff(macro["unemp"].to_numpy()),
    "inflation": macro["infl"].to_numpy()[1:],
}
names = list(series)
dates = (macro["year"] + (macro["quarter"] - 1) / 4).to_numpy()[1:]
values = np.stack([series[name] for name in names], axis=-1)
values = (values - values.mean(0)) / values.std(0)
y = torch.tensor(values, dtype=torch.float32)
T, D = y.shape


def quarter(date):
    """1974.75 -> '1974Q4'."""
    return "{}Q{}".format(int(date), int(round((date % 1) * 4)) + 1)


print("{} quarters ({} to {}), {} series".format(T, quarter(dates[0]), quarter(dates[-1]), D))

# %%
# The model
# ---------
# Factor :math:`k` is on (:math:`x_{tk} = 1`) or off in quarter :math:`t`. It turns on
# with probability :math:`a_k` when it was off and stays on with probability
# :math:`c_k` when it was on, and starts from its stationary probability
# :math:`a_k / (a_k + 1 - c_k)`. The observations are normal around a mean that each
# factor shifts by its weight vector :math:`w_k` while it is on:
#
# .. math::
#
#    P(x_{tk} = 1 \mid x_{t-1,k}) = x_{t-1,k}\, c_k + (1 - x_{t-1,k})\, a_k, \qquad
#    y_t \sim \mathcal N\Big(b + \sum_k x_{tk} w_k,\ \mathrm{diag}(\sigma^2)\Big).
#
# The model is written for speed, as the getting-started guide advises
# (:ref:`fast-models`): the hidden states are one ``[T, K]`` site inside two plates
# rather than a ``pyro.markov`` loop of :math:`T K` sites. The site has a flat base
# measure (a masked ``Bernoulli``), and the Markov prior enters as a ``pyro.factor`` of
# shifted arrays. (:func:`pyro_gwg.models.factorial_hmm` is the library's version of
# the same construction for a univariate series.)
#
# One detail matters for GWG. It predicts the change of the log joint caused by
# flipping a bit from the gradient, a first-order Taylor estimate, which is exact for
# a function that is linear in each bit separately. On bits the transition
# probability can be written in two ways with the same values,
#
# .. math::
#
#    \log\big(x c + (1 - x) a\big) = x \log c + (1 - x) \log a
#    \qquad (x \in \{0, 1\}),
#
# but only the right-hand side is linear in :math:`x`. The left-hand side, the log of
# a mixture, has slope :math:`(c - a) / a` at :math:`x = 0`, far more than the true
# change :math:`\log(c / a)` when :math:`a` is small, as it is for a rare regime: GWG
# would keep proposing flips that the Metropolis-Hastings test then rejects. The
# model below writes the Markov prior in the linear form (``linear_in_bits=True``) and
# keeps the other form to show the difference. The Gaussian likelihood is quadratic
# in each bit, so its estimate is not exact either, but that error is moderate here
# (the weights are of the order of the noise); the Metropolis-Hastings test corrects
# whatever error is left, so both forms sample the same posterior.


def fhmm(y, weights, offset, noise, turn_on, stay_on, linear_in_bits=True):
    """Factorial HMM with hidden states ``x [T, K]`` (floats 0/1) and data ``y [T, D]``."""
    num_steps, num_series = y.shape
    num_factors = weights.shape[0]
    start = turn_on / (turn_on + 1 - stay_on)
    time_plate = pyro.plate("time", num_steps, dim=-2)
    with time_plate, pyro.plate("factors", num_factors, dim=-1):
        x = pyro.sample("x", dist.Bernoulli(0.5).mask(False))
        previous = x[..., :-1, :]
        # log P(x_t = 1 | x_{t-1}) and log P(x_t = 0 | x_{t-1}) for t >= 2
        if linear_in_bits:
            log_on = previous * stay_on.log() + (1 - previous) * turn_on.log()
            log_off = previous * (-stay_on).log1p() + (1 - previous) * (-turn_on).log1p()
        else:
            prob_on = previous * stay_on + (1 - previous) * turn_on
            log_on, log_off = prob_on.log(), (-prob_on).log1p()
        # the first quarter starts from the stationary probability
        first_shape = x[..., :1, :].shape
        log_on = torch.cat([start.log().expand(first_shape), log_on], dim=-2)
        log_off = torch.cat([(-start).log1p().expand(first_shape), log_off], dim=-2)
        pyro.factor("markov", x * log_on + (1 - x) * log_off)
    with time_plate, pyro.plate("series", num_series, dim=-1):
        pyro.sample("y", dist.Normal(x @ weights + offset, noise), obs=y)
    return x


# %%
# Fitting the parameters
# ----------------------
# The parameters are fixed at a maximum-likelihood estimate made up front at
# :math:`K = 2`. With two factors the model is an ordinary HMM over the
# :math:`2^K = 4` joint states of the factors, and Pyro's
# :class:`~pyro.distributions.DiscreteHMM` sums them out exactly, so the log likelihood
# :math:`\log p(y \mid \theta)` is one differentiable distribution. ``SVI`` with an
# empty guide (there are no latent sites left) and ``Trace_ELBO`` then simply maximises
# it over the ``pyro.param`` values with Adam. (The transition matrix of this joint
# chain has :math:`4^K` entries, one reason this route is only for small :math:`K`.)
#
# Like every mixture likelihood this one has several local maxima, and Adam climbs the
# one nearest to its start: from random weights some starts end in a worse one. We
# start from the principal directions of the data (the right singular vectors of
# :math:`y`), a usual start for factor models.
K = 2
states = torch.tensor(list(itertools.product([0.0, 1.0], repeat=K)))  # [2^K, K]


def fhmm_likelihood(y):
    """The same model with the hidden states summed out: one DiscreteHMM site."""
    weights = pyro.param("weights", lambda: torch.linalg.svd(y, full_matrices=False).Vh[:K])
    offset = pyro.param("offset", lambda: torch.zeros(D))
    noise = pyro.param("noise", lambda: torch.ones(D), constraint=dist.constraints.positive)
    turn_on = pyro.param(
        "turn_on", lambda: torch.full((K,), 0.1), constraint=dist.constraints.unit_interval
    )
    stay_on = pyro.param(
        "stay_on", lambda: torch.full((K,), 0.8), constraint=dist.constraints.unit_interval
    )
    start = turn_on / (turn_on + 1 - stay_on)
    init_logits = dist.Bernoulli(start).log_prob(states).sum(-1)
    prob_on = states.unsqueeze(1) * stay_on + (1 - states.unsqueeze(1)) * turn_on
    transition_logits = dist.Bernoulli(prob_on).log_prob(states).sum(-1)  # [from, to]
    emission = dist.Normal(states @ weights + offset, noise).to_event(1)
    hmm = dist.DiscreteHMM(init_logits, transition_logits, emission)
    pyro.sample("y", hmm, obs=y)


def empty_guide(y):
    pass


num_fit_steps = 100 if FAST else 300
svi = SVI(fhmm_likelihood, empty_guide, pyro.optim.Adam({"lr": 0.05}), Trace_ELBO())
start_time = time.time()
for _ in range(num_fit_steps):
    svi.step(y)
loss = svi.evaluate_loss(y)  # minus the log likelihood at the final parameters
print(
    "{} SVI steps in {:.1f} s: log likelihood {:.2f}".format(
        num_fit_steps, time.time() - start_time, -loss
    )
)
store = pyro.get_param_store()
fitted = {
    name: store[name].detach().clone()
    for name in ["weights", "offset", "noise", "turn_on", "stay_on"]
}

# %%
# The labels of a fit are arbitrary: the factors can be listed in any order, and
# "on" and "off" of a factor can be swapped (replacing :math:`x_{tk}` by
# :math:`1 - x_{tk}` moves :math:`w_k` into the offset and exchanges the roles of
# :math:`a_k` and :math:`1 - c_k`) without changing the likelihood. We name them so
# that "on" is each factor's rarer state and the factor that raises unemployment most
# comes first.
for k in range(K):
    turn_on, stay_on = fitted["turn_on"][k].clone(), fitted["stay_on"][k].clone()
    if turn_on / (turn_on + 1 - stay_on) > 0.5:  # on more often than off: swap
        fitted["offset"] = fitted["offset"] + fitted["weights"][k]
        fitted["weights"][k] = -fitted["weights"][k]
        fitted["turn_on"][k], fitted["stay_on"][k] = 1 - stay_on, 1 - turn_on
order = torch.argsort(fitted["weights"][:, names.index("unemployment change")], descending=True)
for name in ["weights", "turn_on", "stay_on"]:
    fitted[name] = fitted[name][order]
params = tuple(fitted.values())
for k in range(K):
    loadings = ", ".join(
        "{} {:+.2f}".format(name, float(w)) for name, w in zip(names, fitted["weights"][k])
    )
    print(
        "factor {}: turns on {:.3f}, stays on {:.3f}; shifts {}".format(
            k + 1, float(fitted["turn_on"][k]), float(fitted["stay_on"][k]), loadings
        )
    )

# %%
# Sampling the hidden states with GWG
# -----------------------------------
# First, what the linear form buys: a short run of each version of the model (the
# same posterior) and the fraction of GWG's proposals that were accepted.
num_short = 50 if FAST else 200
for linear_in_bits in [False, True]:
    short = MCMC(
        GWG(fhmm, jit_compile=True),
        num_samples=num_short,
        warmup_steps=num_short,
        num_chains=8,
        disable_progbar=True,
    )
    short.run(y, *params, linear_in_bits=linear_in_bits)
    rate = short.get_statistics()["accepted"].float().mean()
    print("linear_in_bits={}: acceptance rate {:.3f}".format(linear_in_bits, float(rate)))

# %%
# Now the run itself: :class:`pyro_gwg.MCMC` runs all chains as one batch. The
# kernel is GWG with its defaults (one flip per step, chosen from the gradient), except
# ``jit_compile=True``: the transition is captured once as a graph of ATen operators,
# which takes a moment. (The default, ``"auto"``, also compiles that graph with
# AOTInductor in a background process and switches to it when it is ready: faster
# steps, tens of seconds to compile the first time, never waited for.) The
# chains start from random bit patterns (Pyro's ``init_to_sample``).
num_chains = 16
num_samples = 1500 if FAST else 6000
mcmc = MCMC(
    GWG(fhmm, jit_compile=True),
    num_samples=num_samples,
    warmup_steps=500 if FAST else 1000,
    num_chains=num_chains,
    disable_progbar=True,
)
mcmc.run(y, *params)
x_draws = mcmc.get_samples(group_by_chain=True)["x"].float()  # [chains, draws, T, K]
gwg_marginals = x_draws.mean((0, 1))
print(
    "{} chains x {} draws of {} bits; warmup {:.1f} s, sampling {:.1f} s".format(
        num_chains, num_samples, T * K, mcmc.timing["warmup"], mcmc.timing["sampling"]
    )
)
print("acceptance rate {:.3f}".format(float(mcmc.get_statistics()["accepted"].float().mean())))

# %%
# Decoded regimes
# ---------------
# The top panel shows the standardised data; each panel below it the posterior
# probability that a factor is on, quarter by quarter.


def plot_decoding(dates, values, marginals, names, weights):
    """The data and the posterior probability of each factor being on."""
    num_factors = marginals.shape[1]
    fig, axes = plt.subplots(num_factors + 1, 1, figsize=(9, 2.2 * (num_factors + 1)), sharex=True)
    for d, name in enumerate(names):
        axes[0].plot(dates, values[:, d], lw=1, label=name)
    axes[0].set_ylabel("standardised")
    axes[0].set_title("Quarterly US macro data")
    axes[0].legend(fontsize=7, ncol=3, loc="lower left")
    for k in range(num_factors):
        ax = axes[k + 1]
        ax.fill_between(dates, marginals[:, k], step="mid", alpha=0.6)
        ax.set_ylim(0, 1)
        ax.set_ylabel("P(on | data)")
        largest = int(weights[k].abs().argmax())
        ax.set_title(
            "factor {} (largest shift: {} {:+.1f})".format(
                k + 1, names[largest], float(weights[k, largest])
            )
        )
    axes[-1].set_xlabel("year")
    plt.tight_layout()


def episodes(dates, on):
    """Runs of consecutive quarters where ``on`` is true, as 'first-last' strings."""
    runs, begin = [], None
    for i, flag in enumerate(list(on) + [False]):
        if flag and begin is None:
            begin = i
        elif not flag and begin is not None:
            first, last = quarter(dates[begin]), quarter(dates[i - 1])
            runs.append(first if first == last else "{}-{}".format(first, last))
            begin = None
    return runs


plot_decoding(dates, values, gwg_marginals.numpy(), names, fitted["weights"])
for k in range(K):
    on = episodes(dates, (gwg_marginals[:, k] > 0.5).tolist())
    print("factor {} more likely on than off: {}".format(k + 1, ", ".join(on) or "never"))

# %%
# Checking against Pyro's exact enumeration
# -----------------------------------------
# At :math:`K = 2` Pyro can compute the exact posterior marginals. The model is written
# again in the form Pyro's enumeration needs: a ``pyro.markov`` loop over quarters, one
# ``Bernoulli`` site per factor and quarter marked ``infer={"enumerate": "parallel"}``.
# :class:`~pyro.infer.TraceEnum_ELBO` sums every site out and returns the log evidence
# :math:`\log p(y)`. The marginals come from one more trick: an extra factor
# :math:`e^{\lambda_{tk} x_{tk}}` with :math:`\lambda = 0` leaves the model unchanged,
# and the derivative of the log evidence in :math:`\lambda_{tk}` is
# :math:`P(x_{tk} = 1 \mid y)`, so one backward pass gives all of them. Its log
# evidence should equal the log likelihood of the fit: the enumerated model, the
# relabelled parameters and the ``DiscreteHMM`` describe the same model.


def fhmm_enumerated(y, weights, offset, noise, turn_on, stay_on, tilt):
    """The same FHMM as a pyro.markov loop whose hidden sites Pyro enumerates."""
    num_steps, num_series = y.shape
    num_factors = weights.shape[0]
    start = turn_on / (turn_on + 1 - stay_on)
    x = [None] * num_factors
    for t in pyro.markov(range(num_steps)):
        mean = offset
        for k in range(num_factors):
            if t == 0:
                prob_on = start[k]
            else:
                prob_on = x[k] * stay_on[k] + (1 - x[k]) * turn_on[k]
            x[k] = pyro.sample(
                "x_{}_{}".format(t, k),
                dist.Bernoulli(prob_on),
                infer={"enumerate": "parallel"},
            )
            pyro.factor("tilt_{}_{}".format(t, k), tilt[t, k] * x[k])
            mean = mean + x[k] * weights[k]
        with pyro.plate("series_{}".format(t), num_series, dim=-1):
            pyro.sample("y_{}".format(t), dist.Normal(mean, noise), obs=y[t])


def no_guide(*args):
    pass


tilt = torch.zeros(T, K, requires_grad=True)
start_time = time.time()
elbo = TraceEnum_ELBO(max_plate_nesting=1)
log_evidence = -elbo.differentiable_loss(fhmm_enumerated, no_guide, y, *params, tilt)
(exact_marginals,) = torch.autograd.grad(log_evidence, tilt)
print("enumeration: {:.1f} s".format(time.time() - start_time))
print(
    "log evidence: TraceEnum_ELBO {:.2f}, DiscreteHMM (the fit) {:.2f}".format(
        float(log_evidence.detach()), -loss
    )
)

# %%
# GWG's marginals against the exact ones. The Monte Carlo standard error of each
# marginal is :math:`\sqrt{p (1 - p) / n_\mathrm{eff}}`, with the effective sample size
# :math:`n_\mathrm{eff}` of that bit's draws from
# :func:`pyro_gwg.diagnostics.site_diagnostics`. It is reliable for the bits whose
# posterior probability :math:`p` lies between 0.05 and 0.95; for rarer events a few
# excursions make up all the draws that differ, and :math:`n_\mathrm{eff}` is poorly
# estimated. Over :math:`n` such bits, a correct sampler keeps the largest error,
# in standard errors, below the two-sided :math:`1 - 0.01 / n` normal quantile with
# probability about 0.99.
error = (gwg_marginals - exact_marginals).abs()
n_eff = pyro_gwg.diagnostics.site_diagnostics(x_draws)["n_eff"]
std_error = (exact_marginals * (1 - exact_marginals) / n_eff).sqrt()
uncertain = (exact_marginals > 0.05) & (exact_marginals < 0.95) & torch.isfinite(n_eff)
num_uncertain = int(uncertain.sum())
z_max = float((error[uncertain] / std_error[uncertain]).max())
band = float(dist.Normal(0.0, 1.0).icdf(torch.tensor(1 - 0.005 / num_uncertain)))
print("max |GWG - exact| over all bits = {:.3f}".format(float(error.max())))
print(
    "largest error over the {} uncertain bits: {:.1f} standard errors "
    "({} the 99% band, {:.1f})".format(
        num_uncertain, z_max, "inside" if z_max < band else "OUTSIDE", band
    )
)


def plot_marginal_check(exact, estimate):
    """Scatter of sampled against exact marginals."""
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    for k in range(exact.shape[1]):
        ax.scatter(exact[:, k], estimate[:, k], s=10, alpha=0.7, label="factor {}".format(k + 1))
    ax.plot([0, 1], [0, 1], color="grey", lw=1)
    ax.set_xlabel("exact P(on | data) (TraceEnum_ELBO)")
    ax.set_ylabel("GWG estimate")
    ax.set_title("Posterior marginals, one point per quarter")
    ax.legend()
    plt.tight_layout()


plot_marginal_check(exact_marginals.numpy(), gwg_marginals.numpy())

# %%
# Convergence diagnostics with ArviZ
# ----------------------------------
# :func:`pyro_gwg.to_inference_data` converts the run; the bits get the dimensions
# ``time`` and ``factors`` from the model's plates. A summary statistic of each
# factor's path, the number of quarters it is on, is a scalar per draw that ArviZ can
# check: its R-hat and effective sample sizes, and a trace plot whose right-hand
# panels are rank plots (chains that sample the same distribution have ranks spread
# evenly, and the lines stay close to the dashed uniform level).
idata = pyro_gwg.to_inference_data(
    mcmc, coords={"time": dates, "factors": [1, 2]}, log_likelihood=False
)
idata.posterior["quarters_on"] = idata.posterior["x"].sum("time")
print(az.summary(idata, var_names=["quarters_on"], kind="diagnostics"))
az.plot_trace(idata, var_names=["quarters_on"], kind="rank_vlines", compact=False, figsize=(9, 5))
plt.tight_layout()

# %%
# Growing the number of factors
# -----------------------------
# Pyro's enumeration of the ``pyro.markov`` model keeps, for every quarter, the log
# density of the observation at all :math:`2^K` joint states of the factors: a float32
# tensor of :math:`2^K \times D` entries per quarter, all :math:`T` of them held at
# once before they are contracted. Its memory is therefore
# :math:`4\,T D\, 2^K` bytes (the intermediate tensors of the contraction come on
# top), and its time grows like :math:`2^K` too. Where the enumeration runs, the
# "measured" column adds up the log densities of the observed sites in Pyro's
# enumerated trace (``poutine.enum`` inside ``poutine.trace``). GWG holds one
# state of :math:`T K` bits per chain, and a step costs one pass through the
# vectorised model, linear in :math:`T K`.
#
# To keep this page quick the comparison uses a window of the last quarters, and
# random parameters (weights :math:`\mathcal N(0, 1/K)`, the same Markov
# probabilities for every factor): only memory and time are measured here. Pyro's
# enumeration is tried under a guard. Above a hard limit (2 GiB, computed from the
# formula) it is refused before anything is allocated; below it but above a smaller
# limit it would fit but is skipped to keep the build short; and an error raised by
# the attempt (out of memory, too many tensor dimensions) is caught.
T_WINDOW = 20 if FAST else 40
window = y[-T_WINDOW:]
factor_counts = [1, 8, 64] if FAST else [1, 2, 4, 8, 12, 16, 20, 24, 32, 48, 64]
MEMORY_LIMIT = 2 * 2**30  # never attempt more than this
RUN_LIMIT = (1 if FAST else 4) * 2**20  # enumerations run on this page
num_timed = 100 if FAST else 300  # GWG steps timed at each K


def enumeration_bytes(num_factors, num_steps, num_series):
    """Memory of the observation log densities Pyro's enumeration keeps (float32)."""
    return 4 * num_steps * num_series * 2**num_factors


def random_params(num_factors, generator):
    weights = torch.randn(num_factors, D, generator=generator) / num_factors**0.5
    turn_on = torch.full((num_factors,), 0.1)
    stay_on = torch.full((num_factors,), 0.9)
    return weights, torch.zeros(D), torch.ones(D), turn_on, stay_on


generator = torch.Generator().manual_seed(0)
rows = []
for num_factors in factor_counts:
    scale_params = random_params(num_factors, generator)
    needed = enumeration_bytes(num_factors, T_WINDOW, D)
    row = {"K": num_factors, "predicted": needed, "measured": None, "enum_s": None}
    if needed > MEMORY_LIMIT:
        row["status"] = "refused: needs {:.3g} GiB".format(needed / 2**30)
    elif needed > RUN_LIMIT:
        row["status"] = "fits, skipped here"
    else:
        try:
            no_tilt = torch.zeros(T_WINDOW, num_factors)
            trace = poutine.trace(poutine.enum(fhmm_enumerated, first_available_dim=-2)).get_trace(
                window, *scale_params, no_tilt
            )
            trace.compute_log_prob()
            row["measured"] = sum(
                site["log_prob"].numel() * site["log_prob"].element_size()
                for site in trace.nodes.values()
                if site["type"] == "sample" and site["is_observed"]
            )
            start_time = time.time()
            TraceEnum_ELBO(max_plate_nesting=1).loss(
                fhmm_enumerated, no_guide, window, *scale_params, no_tilt
            )
            row["enum_s"] = time.time() - start_time
            row["status"] = "ran"
        except (RuntimeError, MemoryError) as exc:
            row["status"] = "failed: {}".format(str(exc).splitlines()[0][:60])
    run = MCMC(
        GWG(fhmm, jit_compile=True),
        num_samples=num_timed,
        warmup_steps=10,
        num_chains=8,
        disable_progbar=True,
    )
    run.run(window, *scale_params)
    row["gwg_ms"] = 1000 * run.timing["sampling"] / num_timed
    rows.append(row)
    print(
        "K={:3d}: enumeration {:>10} predicted, {:>10} measured, {:>7}; GWG {:.2f} ms/step".format(
            num_factors,
            "{:.3g} MiB".format(needed / 2**20),
            "-" if row["measured"] is None else "{:.3g} MiB".format(row["measured"] / 2**20),
            row["status"] if row["enum_s"] is None else "{:.2f} s".format(row["enum_s"]),
            row["gwg_ms"],
        )
    )

# %%
# Memory of the enumeration (left) and time per step of GWG (right) against the
# number of factors. The left panel also shows what the whole series would need, the
# 2 GiB limit of this page and the memory of the machine that built it.
try:
    machine_memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
except (AttributeError, ValueError, OSError):  # not available on this platform
    machine_memory = None


def plot_scaling(rows, memory_limit, machine_memory):
    counts = np.array([row["K"] for row in rows])
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    left.semilogy(
        counts,
        [row["predicted"] for row in rows],
        "-",
        label="predicted, {} quarters".format(T_WINDOW),
    )
    left.semilogy(
        counts,
        [enumeration_bytes(int(k), T, D) for k in counts],
        "-",
        color="C0",
        alpha=0.4,
        label="predicted, {} quarters".format(T),
    )
    ran = [row for row in rows if row["measured"] is not None]
    left.semilogy(
        [row["K"] for row in ran], [row["measured"] for row in ran], "o", label="measured (ran)"
    )
    left.axhline(memory_limit, ls="--", color="C3", label="limit (2 GiB)")
    if machine_memory is not None:
        left.axhline(machine_memory, ls=":", color="k", label="this machine's memory")
    left.set_xlabel("number of factors K")
    left.set_ylabel("bytes")
    left.set_title("Pyro enumeration: memory")
    left.legend(fontsize=8)
    right.plot(counts, [row["gwg_ms"] for row in rows], "o-", color="C2")
    right.set_ylim(bottom=0)
    right.set_xlabel("number of factors K ({} K bits per chain)".format(T_WINDOW))
    right.set_ylabel("ms per step (8 chains)")
    right.set_title("GWG: time per step")
    plt.tight_layout()


plot_scaling(rows, MEMORY_LIMIT, machine_memory)
largest_run = max(row["K"] for row in rows if row["status"] == "ran")
first_refused = min(row["K"] for row in rows if row["status"].startswith("refused"))
print(
    "enumeration ran up to K={}, refused from K={}; GWG sampled every K up to {}".format(
        largest_run, first_refused, rows[-1]["K"]
    )
)
print(
    "GWG time per step at K={} / at K={}: {:.1f}x for {}x more bits".format(
        rows[-1]["K"], rows[0]["K"], rows[-1]["gwg_ms"] / rows[0]["gwg_ms"], rows[-1]["K"]
    )
)
if machine_memory is not None:
    too_big = next(k for k in range(1, 65) if enumeration_bytes(k, T, D) > machine_memory)
    print(
        "on all {} quarters, enumeration would need more than this machine's {:.1f} GiB "
        "from K={}".format(T, machine_memory / 2**30, too_big)
    )

# %%
# Interpretation
# --------------
# The two fitted factors are regimes of the US economy. Factor 1 lowers GDP growth
# and raises unemployment while it is on, and it switches on in short episodes: the
# episodes printed above are the US recessions of the period (1960-61, 1970, 1973-75,
# 1980, 1981-82, 1990-91, 2001, 2008-09), give or take a quarter at their edges,
# although the model was never told the official recession dates. Factor 2 raises
# inflation and is more persistent; it is on through the high-inflation years of the
# 1970s and early 1980s. The two overlap in the stagflation of the mid-1970s and early
# 1980s, when both are on at once: this is what the factorial structure buys, since an
# HMM with one hidden chain would need a state of its own for every combination.
# Most quarters are decoded with near certainty; the uncertain ones sit at the edges
# of episodes.
#
# GWG's marginals fall on the diagonal of the scatter plot against the exact ones from
# Pyro's enumeration, and the largest error over the uncertain bits lies inside the
# band printed with it. ArviZ's summary and rank plots show how well the chains
# agree: the persistent inflation factor is the slower one (the smaller effective
# sample size, an R-hat further from one, rank bars that stray further from the
# uniform level), because a single-flip sampler moves the edge of a long episode one
# quarter at a time.
#
# Writing the Markov prior linear in each bit mattered a great deal: in
# the form "log of a mixture", GWG's gradient overrates every flip that would start an
# episode, and the printed acceptance rate falls to a small fraction of that of the
# linear form. A limitation remains even then. GWG changes one bit per step, and when
# two factors can explain the same quarters (which happens with more factors, or with
# several series that move together), passing from one explanation to the other
# means changing two bits at once, through a state in which both or neither factor is
# on and which is improbable. Chains then stay with the explanation they found first
# and disagree with each other; R-hat shows it, and a check against enumeration at
# small :math:`K`, as above, shows it before a run at large :math:`K` is trusted.
#
# Enumeration is exact, but its memory and its time grow like :math:`2^K`: beyond
# about two dozen factors it needs more than the 2 GiB limit even on this short
# window, and on the whole series it outgrows the machine's memory at the :math:`K`
# printed above. GWG's time per step grows at most linearly in the number of bits
# :math:`T K`, and over the range measured here it hardly changes, since the fixed
# cost of a step still dominates. What GWG needs in exchange is steps: more bits take
# more steps to visit.

# sphinx_gallery_start_ignore
if "sphinx_gallery" not in sys.modules:  # run as a script: save the figures
    stem = os.path.splitext(os.path.basename(__file__))[0]
    for number in plt.get_fignums():
        plt.figure(number).savefig("{}_{}.png".format(stem, number))
# sphinx_gallery_end_ignore
