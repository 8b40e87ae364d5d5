"""The batched-chain runner ``pyro_gwg.MCMC``."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from exactness import assert_exact
from small_models import BOUNDS, SUITE

from pyro_gwg import GWG, MCMC, UnsupportedModelError, exact_posterior

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")


def codes_of(mcmc, name):
    """Draws of a run as codes ``[C, T, D]`` (for comparison with the exact posterior)."""
    model, args = SUITE[name]
    post = exact_posterior(model, *args, bounds=BOUNDS.get(name))
    samples = mcmc.get_samples(group_by_chain=True)
    chains, draws = next(iter(samples.values())).shape[:2]
    flat = {k: v.reshape((chains * draws,) + v.shape[2:]) for k, v in samples.items()}
    return post.energy.codes_from_values(flat).reshape(chains, draws, -1), post


@pytest.mark.parametrize("name", ["mixed_kinds", "enumerated_switch", "nested_plates"])
@pytest.mark.parametrize("jit_compile", [False, True])
def test_vectorized_chains_match_the_exact_posterior(name, jit_compile):
    model, args = SUITE[name]
    pyro.set_rng_seed(0)
    mcmc = MCMC(
        GWG(model, jit_compile=jit_compile),
        num_samples=1500,
        warmup_steps=100,
        num_chains=32,
        disable_progbar=True,
    )
    mcmc.run(*args)
    codes, post = codes_of(mcmc, name)
    assert codes.shape[:2] == (32, 1500)
    assert_exact(codes, post)


def test_results_interface_matches_pyro():
    model, args = SUITE["coupled_binary_field"]
    pyro.set_rng_seed(0)
    mcmc = MCMC(GWG(model), num_samples=60, warmup_steps=10, num_chains=12, disable_progbar=True)
    mcmc.run(*args)
    assert mcmc.get_samples()["x"].shape == (12 * 60, 5)
    assert mcmc.get_samples(25)["x"].shape == (25, 5)
    diag = mcmc.diagnostics()
    assert diag["x"]["n_eff"].shape == (5,)
    assert list(diag["accepted"]) == ["chain {}".format(c) for c in range(12)]
    assert diag["accepted"]["chain 11"].shape == (60,)
    assert 0 < diag["acceptance rate"]["chain 3"] <= 1
    stats = mcmc.get_statistics()
    assert stats["log_joint"].shape == (12, 60) and stats["num_changed"].eq(1).all()
    assert set(mcmc.timing) == {"setup", "warmup", "sampling"}
    assert all(v > 0 for v in mcmc.timing.values())


def test_sequential_and_parallel_chain_methods(monkeypatch):
    import pyro.infer.mcmc.api as pyro_mcmc

    model, args = SUITE["nested_plates"]
    pyro.set_rng_seed(0)
    seq = MCMC(GWG(model), 40, 10, num_chains=3, chain_method="sequential", disable_progbar=True)
    seq.run(*args)
    assert seq.get_samples(group_by_chain=True)["x"].shape == (3, 40, 2, 3)
    assert seq.get_statistics()["accepted"].shape == (3, 40)
    monkeypatch.setattr(pyro_mcmc.mp, "cpu_count", lambda: 4)  # two worker processes
    par = MCMC(GWG(model), 40, 10, num_chains=2, chain_method="parallel", disable_progbar=True)
    par.run(*args)
    assert par.get_samples(group_by_chain=True)["x"].shape == (2, 40, 2, 3)
    assert par.get_statistics()["accepted"].shape == (2, 40)


@pytest.mark.parametrize("chain_method", ["vectorized", "sequential", "parallel"])
def test_thinning_keeps_every_kth_draw(chain_method):
    model, args = SUITE["coupled_binary_field"]
    mcmc = MCMC(
        GWG(model),
        num_samples=30,
        num_chains=2,
        thinning=3,
        chain_method=chain_method,
        disable_progbar=True,
    )
    mcmc.run(*args)
    assert mcmc.get_samples(group_by_chain=True)["x"].shape == (2, 10, 5)
    assert mcmc.get_statistics()["accepted"].shape == (2, 10)


def test_initial_params_hooks_and_progress_bar(capsys):
    model, args = SUITE["coupled_binary_field"]
    start = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0, 1.0]])
    calls = []

    def hook(kernel, params, stage, i):
        calls.append((stage, i, params["x"].shape))

    mcmc = MCMC(GWG(model), 5, 2, num_chains=2, initial_params={"x": start}, hook_fn=hook)
    mcmc.run(*args)
    assert [c[:2] for c in calls[:3]] == [("Warmup", 0), ("Warmup", 1), ("Sample", 2)]
    assert calls[0][2] == (2, 5)
    first = mcmc.get_samples(group_by_chain=True)["x"][:, 0]
    assert ((first != start).sum(-1) <= 3).all()  # three single-flip steps from the start
    assert "acc. rate" in capsys.readouterr().err


def test_summary_prints_a_table(capsys):
    model, args = SUITE["coupled_binary_field"]
    mcmc = MCMC(GWG(model), num_samples=30, num_chains=4, disable_progbar=True)
    mcmc.run(*args)
    mcmc.summary()
    assert "x[4]" in capsys.readouterr().out


def test_runs_are_reproducible_and_respect_the_device():
    model, args = SUITE["mixed_kinds"]
    runs = []
    for _ in range(2):
        pyro.set_rng_seed(3)
        mcmc = MCMC(GWG(model), 30, 5, num_chains=8, device="cpu", disable_progbar=True)
        mcmc.run(*args)
        runs.append(mcmc.get_samples())
    for name in runs[0]:
        assert torch.equal(runs[0][name], runs[1][name])


def test_model_that_does_not_batch_gets_a_clear_error():
    def model():
        with pyro.plate("bits", 3):
            x = pyro.sample("x", dist.Bernoulli(0.5))
        pyro.factor("total", x.sum())  # sums over the chain dimension too

    with pytest.raises(UnsupportedModelError, match="'total'"):
        MCMC(GWG(model), num_samples=5, num_chains=4, disable_progbar=True).run()
    # one chain at a time works
    mcmc = MCMC(GWG(model), 5, num_chains=2, chain_method="sequential", disable_progbar=True)
    mcmc.run()


def test_bad_arguments_are_refused():
    model, _ = SUITE["coupled_binary_field"]
    with pytest.raises(ValueError, match="chain_method"):
        MCMC(GWG(model), 10, chain_method="threads")
    with pytest.raises(ValueError, match="thinning"):
        MCMC(GWG(model), 10, thinning=0)
    with pytest.raises(TypeError, match="pyro.infer.MCMC"):
        MCMC(pyro.infer.NUTS(model), 10)
