"""DLMC against the exact posterior of the small-model suite; its step-size adaptation;
the kernel in pyro.infer.MCMC, the vectorised runner and the estimators."""

import pyro
import pytest
import torch
from exactness import assert_exact, draw_codes
from pyro.infer import MCMC
from small_models import SUITE

import pyro_gwg
import pyro_gwg.proposals.dlmc as dlmc_math
from pyro_gwg import DLMC, UnsupportedModelError, exact_posterior
from pyro_gwg.contrib.estimators import ais
from pyro_gwg.models import ising, lattice_couplings, lattice_ising, potts, random_potts

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")

# 64 batched chains of 750 draws: about the draws (and ESS) of 32 x 1500 in half the
# steps (a step of these tiny models costs little more for 64 chains than for 32)
NUM_CHAINS, NUM_SAMPLES, WARMUP = 64, 750, 100
#: the suite's models with finite supports
BOUNDED = sorted(set(SUITE) - {"binomial_ordinal"})


def _exact(name):
    model, args = SUITE[name]
    return exact_posterior(model, *args)


def _draws(name, seed=0, **settings):
    model, args = SUITE[name]
    pyro.set_rng_seed(seed)
    return draw_codes(DLMC(model, **settings), NUM_CHAINS, NUM_SAMPLES, WARMUP, *args)


@pytest.mark.parametrize("name", BOUNDED)
def test_dlmc_matches_exact_posterior(name):
    assert_exact(_draws(name), _exact(name))


@pytest.mark.parametrize("step_size", [0.02, 3.0])
def test_dlmc_is_exact_for_short_and_long_fixed_times(step_size):
    codes = _draws("mixed_kinds", step_size=step_size, adapt_step_size=False)
    assert_exact(codes, _exact("mixed_kinds"))


@pytest.mark.parametrize("name", ["coupled_binary_field", "one_hot_mixture"])
def test_exactness_check_fails_without_the_proposal_ratio(monkeypatch, name):
    # q(x | y) / q(y | x) dropped: the check must notice, for bits and categories
    monkeypatch.setattr(
        dlmc_math, "factorised_log_prob", lambda log_probs, *a: log_probs.new_zeros(len(log_probs))
    )
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(_draws(name, step_size=1.0, adapt_step_size=False), _exact(name))


def test_in_pyro_mcmc_matches_exact_posterior():
    model, args = SUITE["one_hot_mixture"]
    pyro.set_rng_seed(1)
    mcmc = MCMC(
        DLMC(model, jit_compile=True),
        num_samples=1500,
        warmup_steps=200,
        num_chains=2,
        disable_progbar=True,
    )
    mcmc.run(*args)
    z = mcmc.get_samples(group_by_chain=True)["z"].argmax(-1)
    assert_exact(z, _exact("one_hot_mixture"))
    assert set(mcmc.diagnostics()) >= {"acceptance rate", "step_size"}


def test_in_the_vectorised_runner_matches_exact_posterior():
    model, args = SUITE["coupled_binary_field"]
    pyro.set_rng_seed(0)
    mcmc = pyro_gwg.MCMC(
        DLMC(model), num_samples=1500, warmup_steps=200, num_chains=16, disable_progbar=True
    )
    mcmc.run(*args)
    x = mcmc.get_samples(group_by_chain=True)["x"].long()
    assert x.shape == (16, 1500, 5)
    assert_exact(x, _exact("coupled_binary_field"))


# ---------------------------------------------------------------- the step size


@pytest.mark.slow
def test_the_step_size_adapts_to_the_target_acceptance():
    pyro.set_rng_seed(0)
    times = {}
    for coupling in (0.1, 0.4):
        kernel = DLMC(lattice_ising)
        mcmc = pyro_gwg.MCMC(
            kernel, num_samples=200, warmup_steps=300, num_chains=8, disable_progbar=True
        )
        mcmc.run(size=8, coupling=coupling)
        rate = sum(mcmc.diagnostics()["acceptance rate"].values()) / 8
        assert abs(rate - 0.574) < 0.15, rate
        # frozen after warmup: one step size per chain, read by every step
        steps = mcmc.get_statistics()["step_size"]  # [chains, draws]
        assert torch.equal(steps[:, :1].expand_as(steps), steps)
        times[coupling] = float(steps.mean())
    assert times[0.1] > times[0.4]  # a weaker coupling takes longer times


def test_a_fixed_step_size_is_kept():
    model, args = SUITE["coupled_binary_field"]
    kernel = DLMC(model, step_size=0.3, adapt_step_size=False)
    MCMC(kernel, num_samples=5, warmup_steps=5, disable_progbar=True).run(*args)
    assert kernel.step_size == 0.3


# ---------------------------------------------------------------- the estimators


def test_ais_with_dlmc_matches_enumeration():
    pyro.set_rng_seed(0)
    couplings = lattice_couplings(3, 0.3)
    exact = float(exact_posterior(ising, couplings).log_normalizer)
    result = ais(
        ising, DLMC(step_size=0.5), num_particles=200, num_steps=200, model_args=(couplings,)
    )
    err, se = float(result.log_z) - exact, float(result.log_z_se)
    assert 0 < se < 0.1 and abs(err) < 4 * se, (err, se)


def test_ais_with_dlmc_on_a_potts_model_matches_enumeration():
    pyro.set_rng_seed(0)
    params = random_potts(4, 3, coupling_scale=0.5, seed=1)
    exact = float(exact_posterior(potts, *params).log_normalizer)
    result = ais(
        potts, DLMC(step_size=0.5), num_particles=200, num_steps=100, model_args=tuple(params)
    )
    err, se = float(result.log_z) - exact, float(result.log_z_se)
    assert 0 < se < 0.1 and abs(err) < 4 * se, (err, se)


# ---------------------------------------------------------------- arguments


def test_unbounded_ordinals_are_refused():
    model, args = SUITE["binomial_ordinal"]
    with pytest.raises(UnsupportedModelError, match="DLMC samples binary, categorical and bounded"):
        MCMC(DLMC(model), num_samples=2, disable_progbar=True).run(*args)


def test_bad_arguments_are_refused():
    for bad in (0.0, -1.0, float("inf"), "long"):
        with pytest.raises(ValueError, match="step_size"):
            DLMC(step_size=bad)
    with pytest.raises(ValueError, match="target_accept_prob"):
        DLMC(target_accept_prob=1.0)
    with pytest.raises(TypeError, match="adapt_step_size"):
        DLMC(adapt_step_size="yes")
