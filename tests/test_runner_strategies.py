"""pyro_gwg.runner.strategies: the chain methods of pyro_gwg.MCMC (batched blocks in
this process, pyro.infer.MCMC's processes; Ray blocks are tested in test_cluster)."""

import pyro
import pytest
from small_models import SUITE

from pyro_gwg import GWG, MCMC


@pytest.mark.slow
def test_sequential_and_parallel_chain_methods(worker_processes):
    model, args = SUITE["nested_plates"]
    pyro.set_rng_seed(0)
    seq = MCMC(GWG(model), 40, 10, num_chains=3, chain_method="sequential", disable_progbar=True)
    seq.run(*args)
    assert seq.get_samples(group_by_chain=True)["x"].shape == (3, 40, 2, 3)
    assert seq.get_statistics()["accepted"].shape == (3, 40)
    par = MCMC(GWG(model), 40, 10, num_chains=2, chain_method="parallel", disable_progbar=True)
    par.run(*args)
    assert par.get_samples(group_by_chain=True)["x"].shape == (2, 40, 2, 3)
    assert par.get_statistics()["accepted"].shape == (2, 40)
    # compilation happens in Pyro's worker processes, out of sight: not reported as 0
    assert "compile" in seq.timing and "compile" not in par.timing
    assert "background_compile" in seq.timing and "background_compile" not in par.timing


def test_initial_params_hooks_and_progress_bar(capsys):
    # seeded, and started at the complement of where the chains go without
    # initial_params: chains that ignored them would sit five flips away, for certain
    model, args = SUITE["coupled_binary_field"]
    pyro.set_rng_seed(0)
    free = MCMC(GWG(model), 5, 2, num_chains=2, disable_progbar=True)
    free.run(*args)
    start = 1.0 - free.get_samples(group_by_chain=True)["x"][:, 0]
    calls = []

    def hook(kernel, params, stage, i):
        calls.append((stage, i, params["x"].shape))

    pyro.set_rng_seed(0)
    mcmc = MCMC(GWG(model), 5, 2, num_chains=2, initial_params={"x": start}, hook_fn=hook)
    mcmc.run(*args)
    # the index restarts at 0 in each stage, as in pyro.infer.MCMC
    assert [c[:2] for c in calls] == [("Warmup", 0), ("Warmup", 1)] + [
        ("Sample", i) for i in range(5)
    ]
    assert calls[0][2] == (2, 5)
    first = mcmc.get_samples(group_by_chain=True)["x"][:, 0]
    assert ((first != start).sum(-1) <= 3).all()  # three single-flip steps from the start
    assert "acc. rate" in capsys.readouterr().err


def test_one_function_says_which_strategy_runs_a_kernel():
    from pyro.infer import NUTS
    from pyro.infer.mcmc import RandomWalkKernel

    from pyro_gwg import MixedGibbs
    from pyro_gwg.runner.strategies import LocalBlocks, PyroChains, RayBlocks, strategy_for

    model, _ = SUITE["coupled_binary_field"]
    gwg = GWG(model)
    for method, strategy in (
        ("vectorized", LocalBlocks),
        ("sequential", LocalBlocks),
        ("parallel", PyroChains),
        ("ray", RayBlocks),
    ):
        assert strategy_for(gwg, method) == (strategy, gwg)
    mixed = MixedGibbs(NUTS(model), GWG())
    assert strategy_for(mixed, "vectorized") == (LocalBlocks, mixed)
    assert strategy_for(NUTS(model), "sequential")[0] is LocalBlocks
    for method in ("parallel", "ray"):
        message = "or 'sequential' only, got chain_method='{}'".format(method)
        with pytest.raises(ValueError, match=message):
            strategy_for(mixed, method)
    with pytest.raises(TypeError, match="for RandomWalkKernel use pyro.infer.MCMC"):
        strategy_for(RandomWalkKernel(model), "vectorized")
