"""ExactDraws (pyro_gwg/auto/exact.py): independent draws from the exact posterior,
from a table of every state or by forward-filtering backward-sampling, against the
exact posterior, with negative controls."""

import pyro
import pytest
import torch
from exactness import assert_exact
from real_models import CASES

import pyro_gwg
from pyro_gwg import enumeration
from pyro_gwg.auto import ExactDraws


def run_codes(kernel, case, num_chains=8, num_samples=300):
    pyro.set_rng_seed(0)
    mcmc = pyro_gwg.MCMC(
        kernel, num_samples=num_samples, warmup_steps=0, num_chains=num_chains, disable_progbar=True
    )
    mcmc.run(*case.args)
    return mcmc


def forward_filtering(model):
    kernel = ExactDraws(model)
    kernel.table_states = 0  # never a table: infer_discrete draws
    return kernel


def test_jit_compile_is_refused():
    with pytest.raises(ValueError, match="jit_compile must be False"):
        ExactDraws(CASES["gmm"].model, jit_compile=True)


def test_draws_are_independent_and_always_accepted():
    mcmc = run_codes(ExactDraws(CASES["gmm"].model), CASES["gmm"], num_samples=50)
    stats = mcmc.draws.statistics
    assert bool((stats["accept_prob"] == 1).all())
    assert mcmc.draws.codes.shape == (8, 50, 5)


@pytest.mark.exactness
@pytest.mark.parametrize("name", ["gmm", "asia", "mace", "hmm_model_1"])
@pytest.mark.parametrize("make", [ExactDraws, forward_filtering], ids=["table", "ffbs"])
def test_exact(name, make):
    case = CASES[name]
    mcmc = run_codes(make(case.model), case)
    assert_exact(mcmc.draws.codes, pyro_gwg.exact_posterior(case.model, *case.args))


@pytest.mark.exactness
def test_the_check_fails_on_a_wrong_table(monkeypatch):
    """Negative control: draws from a table of the prior-free (uniform) distribution."""
    case = CASES["asia"]
    of = enumeration.ExactPosterior.of

    def uniform(energy, *rest, **options):
        posterior = of(energy, *rest, **options)
        return enumeration.ExactPosterior(energy, torch.zeros_like(posterior.log_probs))

    monkeypatch.setattr(enumeration.ExactPosterior, "of", staticmethod(uniform))
    mcmc = run_codes(ExactDraws(case.model), case)
    monkeypatch.undo()
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(mcmc.draws.codes, pyro_gwg.exact_posterior(case.model, *case.args))


@pytest.mark.exactness
def test_the_check_fails_on_most_likely_values(monkeypatch):
    """Negative control: forward-filtering that returns the most likely state."""
    case = CASES["hmm_model_1"]
    batch = enumeration.draw_enumerated_batch

    def most_likely(*args, **kwargs):
        return batch(*args, **{**kwargs, "temperature": 0})

    monkeypatch.setattr("pyro_gwg.auto.exact.draw_enumerated_batch", most_likely)
    mcmc = run_codes(forward_filtering(case.model), case, num_samples=100)
    monkeypatch.undo()
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(mcmc.draws.codes, pyro_gwg.exact_posterior(case.model, *case.args))
