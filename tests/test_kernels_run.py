"""The end of a run: stuck chains and coordinates, told apart from a posterior sure of its
state (pyro_gwg/kernels/run.py)."""

import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC
from pyro.infer.autoguide.initialization import init_to_value
from small_models import regime_hmm
from test_kernels_base import expanded_likelihood

import pyro_gwg
from pyro_gwg import GWG, Gibbs
from pyro_gwg.kernels.run import StuckChainWarning


def _warnings_of(run) -> list:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [w for w in caught if issubclass(w.category, StuckChainWarning)]


def concentrated():
    """A posterior that is one state: an exact chain never leaves it."""
    pyro.sample("x", dist.Bernoulli(logits=torch.full((3,), 30.0)).to_event(1))


LOCS = torch.linspace(0.0, 10.0, 12)


def sharp_one_hot(y):
    """With uniform_weight=0, GWG proposes only the farthest category and freezes where
    it started (here far from the posterior's mode)."""
    with pyro.plate("items", 2):
        z = pyro.sample("z", dist.OneHotCategorical(logits=torch.zeros(12)))
        pyro.sample("y", dist.Normal(z @ LOCS, 0.3), obs=y)


Y_SHARP = torch.tensor([1.9, 8.1])


@pytest.mark.parametrize("runner", ["pyro", "pyro_gwg"])
def test_a_chain_that_cannot_move_is_reported_once(runner):
    pyro.set_rng_seed(0)
    far = torch.nn.functional.one_hot(torch.tensor([11, 0]), 12).float()
    kernel = GWG(sharp_one_hot, uniform_weight=0.0, init_strategy=init_to_value(values={"z": far}))
    if runner == "pyro":  # chains one after the other, one setup each: one warning
        mcmc = MCMC(kernel, 150, 20, num_chains=2, disable_progbar=True)
    else:
        mcmc = pyro_gwg.MCMC(kernel, 150, 20, num_chains=2, disable_progbar=True)
    caught = _warnings_of(lambda: mcmc.run(Y_SHARP))
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert "chains 0, 1 of GWG changed state in fewer than 1%" in str(caught[0].message)
    assert "not sure of their state" in str(caught[0].message)


def test_a_chain_that_stays_where_the_posterior_is_sure_is_not_reported():
    # the chain never moves, as an exact sampler does on a point mass
    pyro.set_rng_seed(0)
    caught = _warnings_of(
        lambda: pyro_gwg.MCMC(
            GWG(concentrated), num_samples=300, num_chains=2, disable_progbar=True
        ).run()
    )
    assert not caught, [str(w.message) for w in caught]
    pyro.set_rng_seed(0)
    caught = _warnings_of(lambda: MCMC(Gibbs(concentrated), 300, disable_progbar=True).run())
    assert not caught, [str(w.message) for w in caught]
    with warnings.catch_warnings():
        warnings.simplefilter("error", StuckChainWarning)
        pyro_gwg.MCMC(
            GWG(expanded_likelihood), num_samples=300, num_chains=2, disable_progbar=True
        ).run()


def pinned_and_free():
    pyro.sample("pinned", dist.Bernoulli(logits=torch.tensor([30.0, 0.0, 30.0])).to_event(1))
    pyro.sample("free", dist.Bernoulli(0.5))


@pytest.mark.parametrize("runner", ["pyro", "pyro_gwg"])
def test_coordinates_the_posterior_is_sure_of_are_not_reported(runner):
    # pinned[0] and pinned[2] never change: their other value has probability e^-30
    pyro.set_rng_seed(0)
    if runner == "pyro":
        mcmc = MCMC(GWG(pinned_and_free), 300, num_chains=2, disable_progbar=True)
    else:
        mcmc = pyro_gwg.MCMC(
            GWG(pinned_and_free), num_samples=300, num_chains=3, disable_progbar=True
        )
    caught = _warnings_of(mcmc.run)
    assert not caught, [str(w.message) for w in caught]


@pytest.mark.parametrize("runner", ["pyro", "pyro_gwg"])
@pytest.mark.parametrize("model", ["hmm", "denoising"])
def test_states_the_posterior_is_sure_of_are_not_reported(runner, model):
    # never moving there is what an exact sampler does: no StuckChainWarning
    from pyro_gwg.models import ising_denoising, noisy_image

    if model == "hmm":
        y = torch.tensor([-2.0, -2.1, -1.9, 0.1, 0.0, -0.1, 2.0, 1.9, 2.1, 2.0])
        kernel, args, kwargs = GWG(regime_hmm, num_flips="auto"), (y,), {"noise_scale": 0.3}
    else:  # the quickstart's model, smaller
        _, noisy = noisy_image(size=8, noise_scale=0.5, seed=0)
        kernel, args = GWG(ising_denoising, num_flips="auto"), (noisy,)
        kwargs = dict(coupling=0.5, noise_scale=0.5)
    pyro.set_rng_seed(0)
    if runner == "pyro":
        mcmc = MCMC(kernel, 300, 100, num_chains=2, disable_progbar=True)
    else:
        mcmc = pyro_gwg.MCMC(kernel, 300, 100, num_chains=2, disable_progbar=True)
    caught = _warnings_of(lambda: mcmc.run(*args, **kwargs))
    assert not caught, [str(w.message) for w in caught]
    # (and some coordinates did stay where they started in every chain)
    draws = mcmc.get_samples(group_by_chain=True).values()
    flat = torch.cat([v.reshape(2, 300, -1) for v in draws], -1)
    assert (flat == flat[:, :1]).all(1).all(0).any()


def tied_and_free():
    """Two bits that are equal with probability 1 - 2e-30: each of the states 00 and
    11 has half the mass, but a single-site move between them is (nearly) impossible."""
    tied = pyro.sample("tied", dist.Bernoulli(0.5).expand([2]).to_event(1))
    pyro.factor("tie", -30.0 * (tied[..., 0] - tied[..., 1]).abs())
    pyro.sample("free", dist.Bernoulli(0.5))


@pytest.mark.parametrize("runner", ["pyro", "pyro_gwg", "pyro_gwg-sequential"])
def test_coordinates_held_at_different_values_by_the_chains_are_reported_once(runner):
    # each chain is sure of its own values, but the chains disagree: the sampler is stuck
    pyro.set_rng_seed(0)
    start = {"tied": torch.tensor([[0.0, 0.0], [1.0, 1.0]]), "free": torch.zeros(2)}
    if runner == "pyro":
        mcmc = MCMC(GWG(tied_and_free), 150, 20, start, num_chains=2, disable_progbar=True)
    else:
        mcmc = pyro_gwg.MCMC(
            GWG(tied_and_free),
            150,
            20,
            start,
            num_chains=2,
            disable_progbar=True,
            chain_method="sequential" if runner.endswith("sequential") else "vectorized",
        )
    caught = _warnings_of(mcmc.run)
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert "2 coordinate(s) never changed in any of the 2 chain(s)" in message
    assert "'tied' (2 of 2: tied[0], tied[1])" in message and "'free'" not in message
    assert "spike-and-slab" not in message  # (no continuous site here)


def test_the_certainty_of_a_coordinate_is_its_exact_conditional_probability():
    from pyro_gwg.kernels.run import leave_probabilities

    energy = pyro_gwg.ModelDensity(pinned_and_free)
    codes = torch.tensor([[1, 0, 1, 0], [1, 1, 1, 1]])
    leave = leave_probabilities(energy, codes, torch.ones(2, 4, dtype=torch.bool))
    # the probability of the other value given the rest (independent bits: the prior's)
    other = torch.tensor([[30.0, 0.0, 30.0, 0.0], [30.0, 0.0, 30.0, 0.0]])
    expected = torch.sigmoid(torch.where(codes == 1, -other, other).double())
    assert torch.allclose(leave, expected, rtol=1e-6, atol=0)
    masked = leave_probabilities(energy, codes, torch.zeros(2, 4, dtype=torch.bool))
    assert (masked == 0).all()


def test_coordinates_beyond_the_evaluation_budget_count_as_not_sure(monkeypatch):
    from pyro_gwg.kernels import run

    energy = pyro_gwg.ModelDensity(pinned_and_free)
    codes = torch.tensor([[1, 0, 1, 0], [1, 1, 1, 1]])
    energy.choose_batching(codes)
    monkeypatch.setattr(run, "STUCK_PROBE_LIMIT", 3)
    leave = run.leave_probabilities(energy, codes, torch.ones(2, 4, dtype=torch.bool))
    assert (leave[0, :3] < 0.6).all() and (leave[0, 3:] == 1).all() and (leave[1] == 1).all()
