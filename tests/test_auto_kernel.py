"""The Auto kernel (pyro_gwg/auto/kernel.py) in both runners: exact on every ported
model and on small models with summed-out sites above and below sampled ones, its
plan visible, its arguments checked, and the probe of the plan shown to matter (with
it removed, Auto sums out a coupled site and the exactness check fails)."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from exactness import assert_exact
from real_models import CASES, DISASTERS_DATA, disaster_model

import pyro_gwg
from pyro_gwg import Auto, ExactDraws, ModelDensity
from pyro_gwg.auto import Sweep
from pyro_gwg.auto import plan as auto_plan
from pyro_gwg.enumeration import lift_enumeration
from pyro_gwg.sites import UnsupportedModelError

Y = torch.tensor([0.0, 1.0, 2.0, 1.0])


def layered():
    """A global site summed out above a coupled plated site (sampled), and an index site
    summed out below it."""
    z = pyro.sample("z", dist.Bernoulli(0.3))
    with pyro.plate("p", 4):
        x = pyro.sample("x", dist.Bernoulli(0.5))
        pyro.factor("f", 1.2 * x * (x.sum(-1, keepdim=True) - x) * (2 * z - 1))
        w = pyro.sample("w", dist.Categorical(logits=torch.stack([x, 1 - x, 0.5 * x], -1)))
        pyro.sample("y", dist.Normal(w.float(), 0.5), obs=Y)


def codes_of(samples, model, num_chains, args=()):
    """Codes ``[C, T, D]`` of the lifted model from grouped draws."""
    density = ModelDensity(lift_enumeration(model), args)
    return torch.stack(
        [
            density.codes_from_values({n: v[c] for n, v in samples.items()})
            for c in range(num_chains)
        ]
    )


def run_gwg_mcmc(kernel, args=(), num_chains=8, num_samples=300, warmup_steps=50):
    pyro.set_rng_seed(0)
    mcmc = pyro_gwg.MCMC(
        kernel, num_samples, warmup_steps, num_chains=num_chains, disable_progbar=True
    )
    mcmc.run(*args)
    return mcmc


def test_arguments_are_checked():
    with pytest.raises(TypeError, match="model must be a callable"):
        Auto(None)
    with pytest.raises(TypeError, match="sites must be a dict"):
        Auto(layered, sites=["x"])
    with pytest.raises(ValueError, match="budget"):
        Auto(layered, budget=0)
    with pytest.raises(TypeError, match="draw_enumerated"):
        Auto(layered, draw_enumerated="yes")
    with pytest.raises(TypeError, match="nuts_options"):
        Auto(layered, nuts_options=1.0)
    with pytest.raises(ValueError, match="jit_compile"):
        Auto(layered, jit_compile="fast")


def test_the_plan_is_visible():
    kernel = Auto(layered)
    assert "no plan yet" in repr(kernel)
    plan = kernel.plan()
    assert [s.move for s in plan.sites] == ["enumerate", "GWG", "enumerate"]
    assert isinstance(kernel.kernel, pyro_gwg.GWG)
    assert "running GWG" in repr(kernel) and str(plan) in repr(kernel)


def index_and_bits():
    with pyro.plate("p", 5):
        x = pyro.sample("x", dist.Bernoulli(0.5))
    k = pyro.sample("k", dist.Binomial(6, 0.4))
    pyro.factor("f", 0.3 * (x[..., 1:] * x[..., :-1]).sum(-1) * (k - 2))


def test_sites_given_different_kernels_are_swept():
    kernel = Auto(index_and_bits, sites={"k": "Gibbs"})  # (else k is summed out)
    assert {s.name: s.move for s in kernel.plan().sites} == {"x": "GWG", "k": "Gibbs"}
    assert isinstance(kernel.kernel, Sweep)
    blocks = {name: type(k).__name__ for name, k in kernel.kernel.kernels.items()}
    assert blocks == {"x": "GWG", "k": "Gibbs"}


def test_sweep_arguments_are_checked():
    with pytest.raises(TypeError, match="non-empty dict"):
        Sweep(index_and_bits, {})
    with pytest.raises(TypeError, match="kernel of site 'x' must be a pyro-gwg kernel"):
        Sweep(index_and_bits, {"x": "GWG"})
    with pytest.raises(ValueError, match="adapts during warmup"):
        Sweep(index_and_bits, {"x": pyro_gwg.GWG(num_flips="auto")})
    with pytest.raises(ValueError, match="runs eagerly"):
        Sweep(index_and_bits, {"x": pyro_gwg.GWG()}, jit_compile=True)
    with pytest.raises(UnsupportedModelError, match="without a kernel: \\['k'\\]"):
        run_gwg_mcmc(Sweep(index_and_bits, {"x": pyro_gwg.GWG()}), num_samples=2)


@pytest.mark.exactness
def test_a_sweep_is_exact_in_both_runners():
    posterior = pyro_gwg.exact_posterior(index_and_bits)
    mcmc = run_gwg_mcmc(Auto(index_and_bits, sites={"k": "Gibbs"}), num_samples=800)
    assert_exact(mcmc.draws.codes, posterior)
    pyro.set_rng_seed(2)
    kernel = Sweep(index_and_bits, {"x": pyro_gwg.GWG(), "k": pyro_gwg.Gibbs()})
    pyro_mcmc = pyro.infer.MCMC(kernel, 2000, 100, disable_progbar=True)
    pyro_mcmc.run()
    samples = {k: v.unsqueeze(0) for k, v in pyro_mcmc.get_samples().items()}
    assert_exact(codes_of(samples, index_and_bits, 1), posterior)


def test_summed_out_sites_are_drawn_on_request():
    mcmc = run_gwg_mcmc(
        Auto(layered, jit_compile=False), num_chains=2, num_samples=20, warmup_steps=5
    )
    samples = mcmc.get_samples(group_by_chain=True)
    assert {k: tuple(v.shape) for k, v in samples.items()} == {
        "x": (2, 20, 4),
        "z": (2, 20),
        "w": (2, 20, 4),
    }
    kernel = Auto(layered, draw_enumerated=False, jit_compile=False)
    mcmc = run_gwg_mcmc(kernel, num_chains=2, num_samples=20, warmup_steps=5)
    assert set(mcmc.get_samples()) == {"x"}


def test_a_continuous_plan_runs_in_both_runners():
    def model(y):
        loc = pyro.sample("loc", dist.Normal(0.0, 5.0))
        with pyro.plate("data", len(y)):
            z = pyro.sample("z", dist.Bernoulli(0.5))
            pyro.sample("y", dist.Normal(loc * z, 1.0), obs=y)

    y = torch.tensor([0.1, 2.9, 3.2])
    mcmc = run_gwg_mcmc(Auto(model), (y,), num_chains=2, num_samples=10, warmup_steps=10)
    assert {k: tuple(v.shape) for k, v in mcmc.get_samples().items()} == {
        "loc": (20,),
        "z": (20, 3),
    }
    assert isinstance(mcmc.kernel.kernel, pyro.infer.NUTS)
    pyro_mcmc = pyro.infer.MCMC(Auto(model), 10, 10, disable_progbar=True)
    pyro_mcmc.run(y)
    assert set(pyro_mcmc.get_samples()) == {"loc", "z"}


@pytest.mark.exactness
@pytest.mark.parametrize("name", sorted(CASES))
def test_exact_on_every_ported_model(name):
    case = CASES[name]
    mcmc = run_gwg_mcmc(Auto(case.model), case.args)
    posterior = pyro_gwg.exact_posterior(case.model, *case.args)
    assert_exact(
        codes_of(mcmc.get_samples(group_by_chain=True), case.model, 8, case.args), posterior
    )


@pytest.mark.exactness
def test_exact_with_sites_summed_out_above_and_below_sampled_ones():
    posterior = pyro_gwg.exact_posterior(layered)
    mcmc = run_gwg_mcmc(Auto(layered), num_samples=500)
    assert_exact(codes_of(mcmc.get_samples(group_by_chain=True), layered, 8), posterior)
    # through pyro.infer.MCMC: one chain, the summed-out sites drawn at every step
    pyro.set_rng_seed(1)
    pyro_mcmc = pyro.infer.MCMC(Auto(layered, jit_compile=False), 600, 50, disable_progbar=True)
    pyro_mcmc.run()
    samples = {k: v.unsqueeze(0) for k, v in pyro_mcmc.get_samples().items()}
    assert_exact(codes_of(samples, layered, 1), posterior)


@pytest.mark.exactness
@pytest.mark.parametrize("name", ["disaster", "gmm", "hmm_model_3"])
def test_exact_through_pyro_infer_mcmc(name):
    # (jit_compile=False: one chain of a few thousand steps does not pay for a compile)
    case = CASES[name]
    pyro.set_rng_seed(0)
    mcmc = pyro.infer.MCMC(Auto(case.model, jit_compile=False), 2000, 100, disable_progbar=True)
    mcmc.run(*case.args)
    samples = {k: v.unsqueeze(0) for k, v in mcmc.get_samples().items()}
    posterior = pyro_gwg.exact_posterior(case.model, *case.args)
    assert_exact(codes_of(samples, case.model, 1, case.args), posterior)


@pytest.mark.exactness
def test_the_check_fails_without_the_probe(monkeypatch):
    """Negative control: with the probe of the plan removed, ``x`` (whose plate's
    elements read each other) is summed out, and the draws are wrong; with it, the same
    run is exact (test_exact_with_sites_summed_out_above_and_below_sampled_ones)."""
    monkeypatch.setattr(auto_plan, "enumeration_obstacle", lambda *args: None)
    # (forward-filtering on the enumerated model; a table of the lifted model's states
    # would not use the enumeration)
    monkeypatch.setattr(ExactDraws, "table_states", 0)
    kernel = Auto(layered)
    assert kernel.plan().enumerated == ["z", "x", "w"]
    mcmc = run_gwg_mcmc(kernel, num_samples=300)
    monkeypatch.undo()
    posterior = pyro_gwg.exact_posterior(layered)
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(codes_of(mcmc.get_samples(group_by_chain=True), layered, 8), posterior)


@pytest.mark.exactness
@pytest.mark.slow
def test_change_point_with_latent_rates_matches_nuts_on_the_plated_twin():
    """The coal-mining change point as PyMC writes it (the rates latent): Pyro cannot
    enumerate it (unplated observations), so Auto runs MixedGibbs(NUTS, Gibbs);
    the posterior mean of the switch point agrees with Pyro's NUTS on the plated
    twin, where the switch point is summed out and drawn afterwards."""
    kernel = Auto(disaster_model)
    plan = kernel.plan(DISASTERS_DATA)
    assert {s.name: s.move for s in plan.sites} == {
        "switchpoint": "Gibbs",
        "early_mean": "NUTS",
        "late_mean": "NUTS",
    }
    mcmc = run_gwg_mcmc(kernel, (DISASTERS_DATA,), num_chains=2, num_samples=200)
    ours = mcmc.get_samples()["switchpoint"].double()
    from real_models import disaster_model_plated

    reference = run_gwg_mcmc(
        Auto(disaster_model_plated), (DISASTERS_DATA,), num_chains=2, num_samples=200
    )
    theirs = reference.get_samples()["switchpoint"].double()
    assert reference.kernel.plan(DISASTERS_DATA).enumerated == ["switchpoint"]
    spread = float(torch.sqrt(ours.var() / 100 + theirs.var() / 100))  # (ESS >= 100)
    assert abs(float(ours.mean() - theirs.mean())) < 5 * spread + 0.5


@pytest.mark.exactness
def test_the_check_fails_on_a_sweep_that_forgets_the_other_blocks(monkeypatch):
    """Negative control: each block evaluated with the other blocks at their lowest
    values (zeros) instead of their current ones."""
    from pyro_gwg.proposals import sweep

    full = sweep.BlockDensity._full

    def forgetful(self, codes):
        current, self.current = self.current, torch.zeros_like(self.current)
        try:
            return full(self, codes)
        finally:
            self.current = current

    monkeypatch.setattr(sweep.BlockDensity, "_full", forgetful)
    mcmc = run_gwg_mcmc(Auto(index_and_bits, sites={"k": "Gibbs"}), num_samples=800)
    monkeypatch.undo()
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(mcmc.draws.codes, pyro_gwg.exact_posterior(index_and_bits))
