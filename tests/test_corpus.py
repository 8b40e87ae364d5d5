"""The must-accept corpus (``ordinary_models.py``) run by every kernel that applies, and
the must-refuse corpus still refused (issue 26: "guard the class, not the cases").

Deterministic tier (the main guard, cheap): every corpus model builds its energy, every
kernel of :data:`pyro_gwg.REGISTRY` that applies to its site kinds sets up and takes a
step on it (one that does not apply refuses it with its clean error), and the energy's
enumeration bridge gives the exact posterior that brute force gives (the model with its
marks lifted, the lifted sites summed out by hand). Statistical tier: chains of
:class:`pyro_gwg.MCMC` (batched chains) for every exact kernel that applies, and of
:class:`pyro.infer.MCMC` for a subset, against that brute-force posterior.

A failure here is a false refusal or a wrong answer on a model people write: a defect of
the package, never a reason to rewrite the model.
"""

from __future__ import annotations

import functools
from typing import Optional

import pyro
import pytest
import torch
from capture import assert_default_capture
from exactness import assert_exact
from ordinary_models import CORPUS
from test_bridge_checks import (
    _branch_bool,
    _branch_item,
    _loop_over_latent_count,
    _plate_of_latent_size,
    _support_from_latent,
    _support_from_latent_in_a_plate,
    _support_from_latent_wrapped,
)
from test_real_models import _codes_from_samples

import pyro_gwg
from pyro_gwg import REGISTRY, ModelDensity, UnsupportedModelError, exact_posterior
from pyro_gwg.enumeration import ExactPosterior, lift_enumeration
from pyro_gwg.kernels import StepSizeKernel

pytestmark = [
    pytest.mark.filterwarnings("ignore:Categorical site"),
    pytest.mark.filterwarnings("ignore::pyro_gwg.StuckChainWarning"),
    pytest.mark.filterwarnings("ignore::pyro_gwg.BatchingWarning"),
]

#: the kernels whose chains leave the posterior invariant (DULA is biased by design)
EXACT_KERNELS = [name for name in REGISTRY if REGISTRY[name].exact]


def refusal(kernel: str, layout) -> Optional[str]:
    """The start of the error with which ``kernel`` legitimately refuses a model of this
    coordinate ``layout``, or ``None`` if it samples every site kind there.

    Read from the kernels' ``_check_density`` (through
    :func:`pyro_gwg.kernels.support.check_supported_coordinates`): DLMC samples every
    kind but ordinals of infinite support (``pyro_gwg/kernels/dlmc.py``). Every other
    kernel samples every kind: GWG, PAS, PAFS and LocallyBalanced move ordinals by +-1,
    the factorised (NCG, AVG, PAVG, DULA) and the evaluating kernels (Gibbs,
    HammingBall) use a window for the unbounded ones.
    """
    unbounded = layout.is_scalar & torch.isinf(layout.upper)
    if kernel == "DLMC" and bool(unbounded.any()):
        return "DLMC samples binary, categorical and bounded ordinal sites"
    return None


def make_kernel(kernel: str, name: str, **settings):
    """``kernel`` on corpus model ``name`` with the model's own options (a user's
    ``jit_compile=True``), else uncompiled (the tiers test acceptance and exactness;
    compilation has tests of its own)."""
    entry = CORPUS[name]
    options = {"jit_compile": False, **entry.options, **settings}
    return getattr(pyro_gwg, kernel)(entry.model, **options)


@pytest.fixture(autouse=True)
def _fresh_parameters():
    """Corpus models with ``pyro.param`` start from their initial values in every test
    (another test may have left a parameter of the same name in the global store)."""
    pyro.clear_param_store()


@functools.cache
def _layout(name):
    entry = CORPUS[name]
    return ModelDensity(entry.model, entry.args).layout


@functools.cache
def _posteriors(name):
    """``(bridge, brute)``: the exact posterior as :func:`~pyro_gwg.exact_posterior`
    computes it on the model (marked sites summed out by the energy), and the same
    states' probabilities from the model with every mark lifted, the lifted sites
    summed out by adding up the probabilities of the lifted model's states."""
    pyro.clear_param_store()
    entry = CORPUS[name]
    bridge = exact_posterior(entry.model, *entry.args, bounds=entry.bounds)
    lifted = exact_posterior(lift_enumeration(entry.model), *entry.args, bounds=entry.bounds)
    where = {site.name: site for site in lifted.sites}
    columns = torch.cat(
        [
            torch.arange(where[s.name].offset, where[s.name].offset + s.num_coords)
            for s in bridge.sites
        ]
    )
    index = bridge.state_index(lifted.states()[:, columns])
    brute = torch.zeros(bridge.num_states, dtype=torch.float64)
    brute.index_add_(0, index, lifted.probs.double())
    return bridge, brute


def _ground_truth(name) -> ExactPosterior:
    """The exact posterior of the sampled sites, from brute force (not the bridge)."""
    bridge, brute = _posteriors(name)
    return ExactPosterior(bridge.energy, brute.log())


# ------------------------------------------------------------------ deterministic tier


@pytest.mark.parametrize("name", list(CORPUS))
def test_the_model_is_accepted_and_its_sums_are_exact(name):
    bridge, brute = _posteriors(name)
    assert bridge.num_states <= 6561
    torch.testing.assert_close(bridge.probs.double(), brute, atol=1e-8, rtol=1e-5)
    # the windows of unbounded sites hold all but a negligible mass: the posteriors
    # here fall off at least geometrically with ratio below 0.9 past the window, so
    # the mass beyond it is below 10 times the mass of its last value
    entry = CORPUS[name]
    flat = bridge.flat_marginals()
    for site in bridge.sites:
        if entry.bounds and site.name in entry.bounds:
            high = entry.bounds[site.name][1]
            last = flat[
                site.offset : site.offset + site.num_coords, high - bridge.offset[site.offset]
            ]
            assert float(last.max()) < 1e-10, (site.name, float(last.max()))


@pytest.mark.parametrize("kernel", list(REGISTRY))
@pytest.mark.parametrize("name", list(CORPUS))
def test_every_kernel_that_applies_runs_in_the_batched_runner(name, kernel):
    # a short run of pyro_gwg.MCMC: set-up, warmup and the multi-step chunks
    entry = CORPUS[name]
    refused = refusal(kernel, _layout(name))
    sampler = make_kernel(kernel, name)
    mcmc = pyro_gwg.MCMC(sampler, num_samples=3, warmup_steps=2, num_chains=2, disable_progbar=True)
    if refused is not None:
        with pytest.raises(UnsupportedModelError, match=refused + ".*Use GWG, PAS or PAFS"):
            mcmc.run(*entry.args)
        return
    mcmc.run(*entry.args)
    samples = mcmc.get_samples(group_by_chain=True)
    assert set(samples) == {site.name for site in mcmc.draws.sites}
    assert all(value.shape[:2] == (2, 3) for value in samples.values())


@pytest.mark.parametrize("name", list(CORPUS))
def test_gwg_runs_in_pyro_mcmc(name):
    entry = CORPUS[name]
    sampler = make_kernel("GWG", name)
    mcmc = pyro.infer.MCMC(sampler, num_samples=3, warmup_steps=2, disable_progbar=True)
    mcmc.run(*entry.args)
    samples = mcmc.get_samples()
    assert set(samples) == {site.name for site in sampler.energy.sites}
    assert all(value.shape[0] == 3 for value in samples.values())


@pytest.mark.parametrize("name", list(CORPUS))
def test_the_default_transition_is_captured(name, caplog):
    # (see capture.assert_default_capture)
    entry = CORPUS[name]
    sampler = pyro_gwg.GWG(entry.model, **{**entry.options, "jit_compile": "auto"})
    assert_default_capture(sampler, caplog, *entry.args)


# the must-refuse corpus: the models of tests/test_bridge_checks.py's "bad input" section that
# are module-level functions (the other refusals there, and in test_sites.py,
# test__trace.py and test_kernels_base.py, are written inside their tests)
MUST_REFUSE = {
    "support_from_latent": (_support_from_latent, "support of latent site 'x'.*'n'"),
    "support_from_latent_in_a_plate": (
        _support_from_latent_in_a_plate,
        "support of latent site 'x'.*'n'",
    ),
    "support_from_latent_wrapped": (
        _support_from_latent_wrapped,
        "support of latent site 'x'.*'n'",
    ),
    "branch_item": (_branch_item, "latent sites of the model change.*reads"),
    "branch_bool": (_branch_bool, "latent sites of the model change.*reads"),
    "loop_over_latent_count": (_loop_over_latent_count, "latent sites of the model change.*reads"),
    "plate_of_latent_size": (_plate_of_latent_size, "latent sites of the model change.*reads"),
}


@pytest.mark.parametrize("name", list(MUST_REFUSE))
def test_the_must_refuse_corpus_is_still_refused(name):
    model, match = MUST_REFUSE[name]
    for seed in range(2):
        pyro.set_rng_seed(seed)
        with pytest.raises(UnsupportedModelError, match=match):
            ModelDensity(model).initial_codes(1)


# ------------------------------------------------------------------ statistical tier


def sizes_of(kernel: str) -> tuple:
    """``(chains, draws, warmup)`` of ``kernel``: the evaluating kernels mix in few
    steps, those with an adapted step size move many coordinates per step, the others
    (a few coordinates per step) take more cheap steps. Sized for the corpus's tiny
    posteriors (8 to 243 states), whose ESS they keep in the thousands."""
    if REGISTRY[kernel].evaluates_states:
        return (8, 300, 30)
    if issubclass(REGISTRY[kernel], StepSizeKernel):
        return (16, 250, 50)
    return (8, 500, 50)


ALPHA = 1e-4
#: the models whose steps cost most run fewer or shorter chains: two that do not
#: broadcast (the energy runs them state by state, as its BatchingWarning says) and those
#: that sum a Markov chain out at every evaluation
FEWER = {
    "enumerated_above_sampled": (4, 400, 40),
    "gmm_enumerated_assignment": (4, 400, 40),
    **{
        name: (8, 300, 30)
        for name in CORPUS
        if name.startswith(("marked:hmm", "marked:cjs")) or name == "tutorial_hmm_marked"
    },
}

# The chains of each kernel cost one to three model evaluations per step (2 to 25 ms for
# 16 chains here, up to 60 ms for models that do not broadcast and run state by state),
# so the statistical tier samples a selection. The deterministic tier above already
# runs every model with every kernel and checks every model's density against brute
# force; here every exact kernel runs on models that carry each feature the bridge
# transforms (enumerated sites above sampled ones in a plate, an enumerated global
# indexing with Vindex, a fixed support computed from a latent), and GWG on every model
# whose posterior is not already checked by tests/test_real_models.py (the "port:"
# entries) or by the kernel tests on small_models.SUITE (the "small:" entries).
EVERY_KERNEL = ("binomial_fixed_support", "enumerated_in_plate_above_sampled", "traceenum_vindex")
GWG_ONLY = [
    name for name in CORPUS if name not in EVERY_KERNEL and not name.startswith(("port:", "small:"))
]
BATCHED_RUNS = [(name, kernel) for name in EVERY_KERNEL for kernel in EXACT_KERNELS] + [
    (name, "GWG") for name in GWG_ONLY
]


def _run(name, kernel, runner, sizes):
    """Draws ``[C, T, D]`` of ``kernel`` on corpus model ``name`` in ``runner``
    (``pyro_gwg.MCMC`` or ``pyro.infer.MCMC``), ``sizes = (chains, draws, warmup)``."""
    num_chains, num_samples, warmup = sizes
    pyro.set_rng_seed(0)
    sampler = make_kernel(kernel, name)
    mcmc = runner(
        sampler,
        num_samples=num_samples,
        warmup_steps=warmup,
        num_chains=num_chains,
        disable_progbar=True,
    )
    mcmc.run(*CORPUS[name].args)
    # pyro_gwg.MCMC leaves the kernel as it was: its density is the draws' decoder
    energy = mcmc.draws.decoder if isinstance(mcmc, pyro_gwg.MCMC) else sampler.energy
    return _codes_from_samples(energy, mcmc.get_samples(group_by_chain=True), num_chains)


@pytest.mark.parametrize("name, kernel", BATCHED_RUNS, ids=["-".join(run) for run in BATCHED_RUNS])
def test_batched_chains_match_the_exact_posterior(name, kernel):
    assert refusal(kernel, _layout(name)) is None, "choose kernels that apply"
    sizes = FEWER.get(name, sizes_of(kernel))
    worst = assert_exact(_run(name, kernel, pyro_gwg.MCMC, sizes), _ground_truth(name), ALPHA)
    print("{} {}: max |z| {:.2f}".format(name, kernel, worst))


# pyro.infer.MCMC runs its chains one after the other (tests/conftest.py), one
# kernel.sample per step: the two false refusals and pyro.param compiled
PYRO_RUNS = [
    ("binomial_fixed_support", "GWG"),
    ("enumerated_in_plate_above_sampled", "Gibbs"),
    ("with_param_jit", "GWG"),
]


@pytest.mark.parametrize("name, kernel", PYRO_RUNS, ids=["-".join(run) for run in PYRO_RUNS])
def test_pyro_mcmc_chains_match_the_exact_posterior(name, kernel):
    codes = _run(name, kernel, pyro.infer.MCMC, (2, 600, 50))
    worst = assert_exact(codes, _ground_truth(name), ALPHA)
    print("{} {} in pyro.infer.MCMC: max |z| {:.2f}".format(name, kernel, worst))


# ------------------------------------------------ the checks fail for broken samplers
# (negative controls: the statistical tier above must be able to fail on the corpus's
# models, for a broken kernel and for a broken bridge)


def test_the_check_fails_for_a_broken_acceptance_ratio(monkeypatch):
    # GWG without its proposal ratio q(x|x')/q(x'|x) is not exact
    import pyro_gwg.proposals.gwg as gwg_math

    name = "enumerated_in_plate_above_sampled"
    exact = _ground_truth(name)
    monkeypatch.setattr(
        gwg_math, "move_log_prob", lambda logits, *a: logits.new_zeros(logits.shape[0])
    )
    codes = _run(name, "GWG", pyro_gwg.MCMC, sizes_of("GWG"))
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(codes, exact, ALPHA)


def test_the_check_fails_for_a_bridge_that_maximises_over_enumerated_sites(monkeypatch):
    # a bridge that takes the most probable value of an enumerated site instead of
    # summing over its values (max-product for sum-product) targets another posterior
    from pyro.ops.contract import contract_to_tensor
    from pyro.ops.rings import MapRing

    from pyro_gwg import _trace

    name = "enumerated_in_plate_above_sampled"
    exact = _ground_truth(name)
    monkeypatch.setattr(
        _trace,
        "contract_to_tensor",
        lambda *args, **kwargs: contract_to_tensor(*args, **{**kwargs, "ring": MapRing()}),
    )
    codes = _run(name, "GWG", pyro_gwg.MCMC, sizes_of("GWG"))
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(codes, exact, ALPHA)
