"""Every kernel against the exact posterior of models ported from Pyro's and NumPyro's
examples (``real_models.py``), and MixedGibbs against Pyro's NUTS on the enumerated
originals.

The models are written by other people; a failure here is a finding about the package
(a defect, or a limitation such as slow escape from a poor initial state, to fix or to
document), never a reason to rewrite a model. Every test uses the kernels' defaults
(``jit_compile="auto"``, ``init_strategy=init_to_sample``), as a user would.
"""

import functools
import logging
import time

import pyro
import pytest
import torch
from exactness import assert_exact, draw_codes
from pyro.infer import MCMC, NUTS, config_enumerate
from pyro.infer.autoguide import init_to_value
from pyro.ops.stats import effective_sample_size
from real_models import (
    CAPTURE_HISTORY,
    CASES,
    DISASTERS_DATA,
    GMM_DATA,
    cjs_model_1,
    disaster_model,
    disaster_model_plated,
    gmm_model,
)
from test_compile_backends import _reads_allowed

import pyro_gwg
from pyro_gwg import (
    AVG,
    GWG,
    NCG,
    PAVG,
    Gibbs,
    HammingBall,
    LocallyBalanced,
    MixedGibbs,
    exact_posterior,
)
from pyro_gwg.enumeration import lift_enumeration

pytestmark = [pytest.mark.exactness, pytest.mark.filterwarnings("ignore:Categorical site")]

# level of each exactness test (Bonferroni-corrected over its checks); this file holds
# about 110 of them, so 1e-4 keeps the chance of a false alarm in a run near 1%
ALPHA = 1e-4

# (constructor, (chains, draws, warmup)): single-site kernels take many cheap steps;
# NCG/AVG/PAVG move every coordinate per step and adapt a step size, so they run many
# batched chains for fewer steps (as in test_kernels_ncg.py); the Hamming-ball and
# locally balanced kernels evaluate every neighbour per step, and mix in fewer steps
SINGLE_SITE = (32, 1500, 100)
FACTORISED = (128, 300, 60)
NEIGHBOURHOOD = (32, 800, 100)
KERNELS = {
    "GWG": (lambda model: GWG(model), SINGLE_SITE),
    "GWG-3": (lambda model: GWG(model, num_flips=3), SINGLE_SITE),
    "NCG": (lambda model: NCG(model), FACTORISED),
    "AVG": (lambda model: AVG(model), FACTORISED),
    "PAVG": (lambda model: PAVG(model), FACTORISED),
    "Gibbs": (lambda model: Gibbs(model), SINGLE_SITE),
    "HammingBall": (lambda model: HammingBall(model, block_size=3), NEIGHBOURHOOD),
    "LocallyBalanced": (lambda model: LocallyBalanced(model), NEIGHBOURHOOD),
}

# the change point is one coordinate with 112 values: the gradient-free kernels evaluate
# up to 111 states per chain and step (and mix in a few steps), so they run fewer chains
FEWER_CHAINS = {("disaster", k) for k in ("Gibbs", "HammingBall", "LocallyBalanced")}
# init_to_sample draws the initial states from the prior and ignores the data: on MACE 99%
# of the draws have posterior probability below 1e-5 (ruled out by the data; finite only
# because Categorical clamps a zero probability to about e^-16), so even the most probable
# of each chain's INIT_CANDIDATES draws is usually one. NCG, AVG and PAVG, whose
# proposal for the item class (used as an index) sees only its uniform prior, take a few
# hundred steps to leave such a start (GWG and Gibbs a few), so they get the longer
# warmup a user would give them; with 60 warmup steps their draws put 0.83-0.87 on a
# class of exact probability 0.97. (On the capture-recapture models, where 67% of the
# prior draws are such states, the best of 10 draws per chain is enough.)
LONGER_WARMUP = {("mace", "NCG"): 600, ("mace", "AVG"): 600, ("mace", "PAVG"): 600}
# GWG drawing three coordinates per step moves between MACE's posterior modes slowly: a
# state of exact probability 0.0072 is visited by few chains, and 32 chains of 1500
# draws miss it for some seeds (2 of 3 tried; 32 x 20000 draws agree with the exact
# posterior, so this is mixing, not bias); 16 longer chains reach it for every seed tried
LONGER_CHAINS = {("mace", "GWG-3"): (16, 6000, 100)}


@functools.cache
def _exact(name):
    case = CASES[name]
    return exact_posterior(case.model, *case.args, bounds=case.bounds)


# Every kernel on every case is the largest part of the statistical tier, and the HMMs
# cost most (15-45 s a run). Every kernel runs on one of the five HMMs (the factorial
# one) in CI, and on the plain, sequential-plate, autoregressive and partially
# factorial HMMs under -m heavy: the kernels see the same categorical coordinates in
# each, and the bridge's handling of these four models is checked in CI by GWG's
# exactness test in the batched runner below
# (MACE with GWG-3, the LONGER_CHAINS run, too: GWG-3 runs on the other real models in
# CI, and every other kernel on MACE)
# On the other cases, CI runs half of the pairs, alternating along both: each kernel on
# four of the eight cases, each case with four kernels (every kernel on both kinds of
# coordinates, binary and categorical); the other half runs under -m heavy.
HEAVY_CASES = ("hmm_model_0", "hmm_model_1", "hmm_model_2", "hmm_model_4")
CI_CASES = [name for name in CASES if name not in HEAVY_CASES]


def _heavy(name: str, kernel: str) -> bool:
    if name in HEAVY_CASES or (name, kernel) in LONGER_CHAINS:
        return True
    return (CI_CASES.index(name) + list(KERNELS).index(kernel)) % 2 == 1


RUNS = [
    pytest.param(name, kernel, marks=pytest.mark.heavy if _heavy(name, kernel) else ())
    for name in CASES
    for kernel in KERNELS
]


@pytest.mark.parametrize("name, kernel", RUNS)
def test_kernel_matches_exact_posterior(name, kernel):
    case = CASES[name]
    make, sizes = KERNELS[kernel]
    num_chains, num_samples, warmup = LONGER_CHAINS.get((name, kernel), sizes)
    if (name, kernel) in FEWER_CHAINS:
        num_chains //= 4
    warmup = LONGER_WARMUP.get((name, kernel), warmup)
    posterior = _exact(name)
    pyro.set_rng_seed(0)
    codes = draw_codes(make(case.model), num_chains, num_samples, warmup, *case.args)
    assert codes.shape == (num_chains, num_samples, posterior.offset.numel())
    print("{} {}: max |z| {:.2f}".format(name, kernel, assert_exact(codes, posterior, ALPHA)))


# ------------------------------------------------- MixedGibbs against Pyro's own NUTS


def assert_means_agree(reference, mixed, names, limit=4.5):
    """Posterior means of the continuous ``names`` from two runs (``[C, T, ...]`` draws
    each) agree: ``z = (m_a - m_b) / sqrt(var_a / ess_a + var_b / ess_b)`` with each
    run's own multi-chain ESS."""
    worst = []
    for name in names:
        a = reference[name].double().reshape(*reference[name].shape[:2], -1)
        b = mixed[name].double().reshape(*mixed[name].shape[:2], -1)
        ess_a = effective_sample_size(a, chain_dim=0, sample_dim=1)
        ess_b = effective_sample_size(b, chain_dim=0, sample_dim=1)
        se = (a.flatten(0, 1).var(0) / ess_a + b.flatten(0, 1).var(0) / ess_b).sqrt()
        z = (a.mean((0, 1)) - b.mean((0, 1))) / se
        worst.append((float(z.abs().max()), name, a.mean((0, 1)).tolist(), b.mean((0, 1)).tolist()))
    z, name, mean_a, mean_b = max(worst)
    assert z < limit, "{}: NUTS mean {} vs MixedGibbs mean {} (|z| = {:.2f})".format(
        name, mean_a, mean_b, z
    )
    return z


def _run_pair(reference_model, model, args, num_samples, warmup, init=None, seed=0):
    """Pyro's NUTS on ``reference_model`` (discrete sites enumerated) and
    ``MixedGibbs(NUTS(model), GWG())`` on ``model`` (discrete sites sampled), two chains
    each; returns both ``[C, T, ...]`` sample dicts. ``init`` (model values) starts both
    runs at the same point, through ``init_to_value``."""
    nuts_kw, gwg_kw = {}, {}
    if init is not None:
        nuts_kw["init_strategy"] = init_to_value(values=init)
        gwg_kw["init_strategy"] = init_to_value(values=init)
    pyro.set_rng_seed(seed)
    start = time.time()
    nuts = MCMC(
        NUTS(reference_model, max_plate_nesting=1, **nuts_kw),
        num_samples=num_samples,
        warmup_steps=warmup,
        num_chains=2,
        disable_progbar=True,
    )
    nuts.run(*args)
    middle = time.time()
    pyro.set_rng_seed(seed + 1)
    mixed = MCMC(
        MixedGibbs(NUTS(model, **nuts_kw), GWG(**gwg_kw)),
        num_samples=num_samples,
        warmup_steps=warmup,
        num_chains=2,
        disable_progbar=True,
    )
    mixed.run(*args)
    print("NUTS {:.1f} s, MixedGibbs {:.1f} s".format(middle - start, time.time() - middle))
    return nuts.get_samples(group_by_chain=True), mixed.get_samples(group_by_chain=True)


@pytest.mark.slow  # about 15 s on an idle 2-core machine, 20-40 s on a busy one
def test_mixed_gibbs_agrees_with_nuts_on_the_change_point():
    # NUTS sums switchpoint out of the plated reference (config_enumerate); MixedGibbs
    # runs the PyMC-shaped original, GWG sampling switchpoint
    reference, mixed = _run_pair(
        config_enumerate(disaster_model_plated), disaster_model, (DISASTERS_DATA,), 120, 60
    )
    assert mixed["switchpoint"].shape[:2] == (2, 120)
    print("max |z|", assert_means_agree(reference, mixed, ["early_mean", "late_mean"]))


# (a 30-50 s run, mostly NUTS on the enumerated mixture) under -m heavy: MixedGibbs
# against NUTS is checked in CI on the change point above, and MixedGibbs on a Gaussian
# mixture against its posterior by quadrature in test_kernels_mixed.py
@pytest.mark.slow
@pytest.mark.heavy
def test_mixed_gibbs_agrees_with_nuts_on_the_gaussian_mixture():
    # the tutorial's model, @config_enumerate included, for NUTS; lifted for MixedGibbs.
    # Both runs start in the same labelling of the components (the modes are far apart
    # for the tutorial's data: neither run switches labels)
    init = {
        "weights": torch.tensor([0.4, 0.6]),
        "scale": torch.tensor(1.0),
        "locs": torch.tensor([0.5, 11.0]),
        "assignment": torch.tensor([0, 0, 1, 1, 1]),
    }
    reference, mixed = _run_pair(
        gmm_model, lift_enumeration(gmm_model), (GMM_DATA,), 150, 75, init=init
    )
    assert mixed["assignment"].shape[:2] == (2, 150)
    print("max |z|", assert_means_agree(reference, mixed, ["weights", "scale", "locs"]))


# (a 45 s run) under -m heavy, as the Gaussian mixture test above
@pytest.mark.slow
@pytest.mark.heavy
def test_mixed_gibbs_agrees_with_nuts_on_capture_recapture():
    # cjs model_1 as written (its z_t marked for enumeration) for NUTS; lifted for
    # MixedGibbs
    reference, mixed = _run_pair(
        cjs_model_1, lift_enumeration(cjs_model_1), (CAPTURE_HISTORY, None), 150, 75
    )
    assert mixed["z_3"].shape[:2] == (2, 150)
    print("max |z|", assert_means_agree(reference, mixed, ["phi", "rho"]))


# ------------------------------------------------- the batched runner, pyro_gwg.MCMC


def _codes_from_samples(energy, samples, num_chains):
    """``[C, T, D]`` codes from ``get_samples(group_by_chain=True)``."""
    flat = {name: value.flatten(0, 1) for name, value in samples.items()}
    return energy.codes_from_values(flat).reshape(num_chains, -1, energy.layout.num_coords)


@pytest.mark.parametrize("name", list(CASES))
def test_gwg_in_the_batched_runner_matches_exact_posterior(name, caplog):
    # pyro_gwg.MCMC runs the compiled multi-step chunks (DiscreteKernel.advance), not
    # the per-step transition that draw_codes drives; in the default mode, the captured
    # graph (the HMMs' and Dawid-Skene's Python reads constants of their data, which a
    # capture keeps as values; MACE's reads a latent value, so it runs eagerly)
    case = CASES[name]
    num_chains, num_samples, warmup = 32, 1000, 100
    pyro.set_rng_seed(1)
    kernel = GWG(case.model)
    mcmc = pyro_gwg.MCMC(
        kernel,
        num_samples=num_samples,
        warmup_steps=warmup,
        num_chains=num_chains,
        disable_progbar=True,
    )
    with caplog.at_level(logging.DEBUG, logger="pyro_gwg.compile"):
        mcmc.run(*case.args)
    if name != "mace" and _reads_allowed():
        assert "failed" not in caplog.text, caplog.text
    samples = mcmc.get_samples(group_by_chain=True)
    assert set(samples) == {site.name for site in mcmc.draws.sites}
    codes = _codes_from_samples(mcmc.draws.decoder, samples, num_chains)
    print("{} runner: max |z| {:.2f}".format(name, assert_exact(codes, _exact(name), ALPHA)))
