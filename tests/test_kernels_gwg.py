"""GWG against the exact posterior of the small-model suite, and its Pyro plumbing."""

import pyro
import pytest
from exactness import assert_exact, draw_codes
from pyro.infer import MCMC
from small_models import BOUNDS, SUITE

import pyro_gwg.proposals.gwg as gwg_math
from pyro_gwg import GWG, exact_posterior

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")

NUM_CHAINS, NUM_SAMPLES, WARMUP = 32, 1500, 100


def _exact(name):
    model, args = SUITE[name]
    return exact_posterior(model, *args, bounds=BOUNDS.get(name))


@pytest.mark.parametrize("num_flips", [1, 3])
@pytest.mark.parametrize("name", sorted(SUITE))
def test_gwg_matches_exact_posterior(name, num_flips):
    model, args = SUITE[name]
    pyro.set_rng_seed(0)
    codes = draw_codes(GWG(model, num_flips=num_flips), NUM_CHAINS, NUM_SAMPLES, WARMUP, *args)
    assert_exact(codes, _exact(name))


def test_exactness_check_fails_for_a_broken_acceptance_ratio(monkeypatch):
    # dropping the proposal ratio q(x|x')/q(x'|x) leaves a sampler that is not exact;
    # the exactness check must notice
    model, args = SUITE["coupled_binary_field"]
    monkeypatch.setattr(
        gwg_math, "move_log_prob", lambda logits, *a: logits.new_zeros(logits.shape[0])
    )
    pyro.set_rng_seed(0)
    codes = draw_codes(GWG(model), NUM_CHAINS, NUM_SAMPLES, WARMUP, *args)
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(codes, _exact("coupled_binary_field"))


def test_exactness_check_fails_for_a_wrong_reverse_move(monkeypatch):
    # scoring the reverse move with the forward candidates is a subtler bug (only
    # categorical coordinates are affected); the check must notice it too
    model, args = SUITE["one_hot_mixture"]
    monkeypatch.setattr(gwg_math.CoordinateLayout, "reverse", lambda self, codes, cand: cand)
    pyro.set_rng_seed(0)
    codes = draw_codes(GWG(model), NUM_CHAINS, NUM_SAMPLES, WARMUP, *args)
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(codes, _exact("one_hot_mixture"))


@pytest.mark.parametrize("jit_compile", [False, True])
def test_gwg_in_pyro_mcmc_matches_exact_posterior(jit_compile):
    model, args = SUITE["coupled_binary_field"]
    pyro.set_rng_seed(1)
    mcmc = MCMC(
        GWG(model, jit_compile=jit_compile),
        num_samples=4000,
        warmup_steps=200,
        num_chains=2,
        disable_progbar=True,
    )
    mcmc.run(*args)
    x = mcmc.get_samples(group_by_chain=True)["x"].long()
    assert_exact(x, _exact("coupled_binary_field"))
