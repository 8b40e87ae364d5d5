"""pyro_gwg.cluster and the runs built on it: MCMC(chain_method="ray"), sbc and
fit_many with num_workers, AIS/ARM particle blocks.

The first group needs no Ray: block splitting and seeding, argument checks, and the
in-process block runs that the Ray runs must reproduce. The second starts a local
two-CPU Ray cluster and is skipped where Ray is not installed."""

from __future__ import annotations

import os
import signal
import sys
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyro_gwg
from pyro_gwg import GWG, MCMC, Gibbs, cluster, fit_many
from pyro_gwg.contrib.estimators import ais, arm, rbm_stages
from pyro_gwg.contrib.sbc import sbc
from pyro_gwg.models import ising, lattice_couplings, lattice_ising, random_rbm

pytestmark = pytest.mark.xdist_group("ray")


def bits_model(y=None):
    z = pyro.sample("z", dist.Bernoulli(0.3 * torch.ones(3)).to_event(1))
    return pyro.sample("y", dist.Normal(z.sum(-1), 1.0), obs=y)


def eager_gwg(model=None):
    # eager: the same numbers on every worker (see MCMC's chains_per_block)
    return GWG(model, jit_compile=False)


def draws(chain_method, seed=3, num_chains=6, **kwargs):
    pyro.set_rng_seed(seed)
    mcmc = MCMC(
        eager_gwg(lattice_ising),
        30,
        10,
        num_chains=num_chains,
        chain_method=chain_method,
        disable_progbar=True,
        **kwargs,
    )
    mcmc.run(size=3, coupling=0.3)
    return mcmc


# ---------------------------------------------------------------- without Ray
@pytest.mark.parametrize(
    "total,per_block,minimum", [(10, 3, 1), (8, 2, 1), (3, 2, 2), (7, 7, 1), (5, 256, 1), (9, 4, 2)]
)
def test_split_covers_everything_in_near_equal_blocks(total, per_block, minimum):
    blocks = cluster.split(total, per_block, minimum)
    sizes = [b.stop - b.start for b in blocks]
    assert blocks[0].start == 0 and blocks[-1].stop == total
    assert all(a.stop == b.start for a, b in zip(blocks, blocks[1:]))
    assert max(sizes) - min(sizes) <= 1 and max(sizes) <= max(per_block, minimum + 1)
    assert min(sizes) >= minimum


def test_block_seeds_depend_on_the_block_index_only():
    assert cluster.block_seeds(7, 5)[:3] == cluster.block_seeds(7, 3)
    seeds = cluster.block_seeds(7, 100)
    assert len(set(seeds)) == 100 and all(0 <= s < 2**64 for s in seeds)
    assert cluster.block_seeds(8, 3) != cluster.block_seeds(7, 3)


def test_seeded_restores_the_global_generator():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    with cluster.seeded(123):
        inside = torch.rand(3)
    assert torch.equal(torch.rand(3), expected)
    with cluster.seeded(123):
        assert torch.equal(torch.rand(3), inside)


def test_missing_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pyro-gwg\[ray\]"):
        cluster.require_ray("this feature")
    mcmc = MCMC(GWG(lattice_ising), 5, 5, num_chains=2, chain_method="ray", disable_progbar=True)
    with pytest.raises(ImportError, match="chain_method='ray'.*pip install"):
        mcmc.run(size=3, coupling=0.3)
    with pytest.raises(ImportError, match="sbc"):
        sbc(bits_model, GWG, num_simulations=4, num_draws=3, num_workers=2, progress_bar=False)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"num_workers": 2}, ValueError, "num_workers is for chain_method='ray'"),
        ({"ray_remote_args": {"num_cpus": 1}}, ValueError, "ray_remote_args is for"),
        ({"chain_method": "ray", "num_workers": 0}, ValueError, "num_workers must be a positive"),
        ({"chain_method": "ray", "num_workers": 1.5}, TypeError, "num_workers must be an integer"),
        ({"chain_method": "ray", "ray_remote_args": 4}, TypeError, "ray_remote_args must be"),
        ({"chains_per_block": 0}, ValueError, "chains_per_block must be a positive"),
        ({"chains_per_block": 5}, ValueError, "chains_per_block=5 is more than num_chains=4"),
        (
            {"chain_method": "sequential", "chains_per_block": 2},
            ValueError,
            "chains_per_block is for",
        ),
        (
            {"chain_method": "parallel", "chains_per_block": 2},
            ValueError,
            "chains_per_block is for",
        ),
    ],
)
def test_bad_block_and_worker_arguments_are_refused_up_front(kwargs, error, match):
    with pytest.raises(error, match=match):
        MCMC(GWG(lattice_ising), 5, num_chains=4, **kwargs)


def test_default_blocks():
    assert MCMC(GWG(lattice_ising), 5, num_chains=300).chains_per_block == 300
    assert (
        MCMC(GWG(lattice_ising), 5, num_chains=300, chain_method="sequential").chains_per_block == 1
    )
    ray_run = MCMC(GWG(lattice_ising), 5, num_chains=300, chain_method="ray")
    assert ray_run.chains_per_block == pyro_gwg.runner.strategies.RAY_CHAINS_PER_BLOCK
    assert MCMC(GWG(lattice_ising), 5, num_chains=6, chain_method="ray").chains_per_block == 6


def test_blocks_of_one_chain_are_the_sequential_run():
    sequential = draws("sequential").get_samples(group_by_chain=True)["x"]
    blocked = draws("vectorized", chains_per_block=1).get_samples(group_by_chain=True)["x"]
    assert torch.equal(sequential, blocked)


def test_a_block_runs_the_same_whatever_the_blocks_before_it():
    # the seed of block j depends on j only, so chains 4..5 are the same in blocks of
    # 2 and of (4, 2): the reason a Ray run does not depend on its workers
    two = draws("vectorized", chains_per_block=2).get_samples(group_by_chain=True)["x"]
    pyro.set_rng_seed(3)
    mcmc = MCMC(eager_gwg(lattice_ising), 30, 10, num_chains=2, disable_progbar=True)
    base = cluster.draw_base_seed()
    mcmc._run((), {"size": 3, "coupling": 0.3}, seeds=cluster.block_seeds(base, 3)[2:])
    assert torch.equal(two[4:], mcmc.get_samples(group_by_chain=True)["x"])


def test_particle_blocks_in_process_give_one_ais_estimate():
    J = lattice_couplings(3, 0.2)
    pyro.set_rng_seed(0)
    result = ais(ising, GWG(), num_particles=9, num_steps=5, model_args=(J,), particles_per_block=4)
    assert result.log_weights.shape == (9,) and result.codes.shape == (9, 9)
    assert torch.allclose(
        result.log_z, torch.logsumexp(result.log_weights, 0) - torch.log(torch.tensor(9.0)).double()
    )
    with pytest.raises(ValueError, match="particles_per_block must be an integer >= 2"):
        ais(ising, GWG(), num_particles=9, num_steps=5, model_args=(J,), particles_per_block=1)


# ---------------------------------------------------------------- on a local Ray cluster
# (one pytest-xdist worker runs them all, on one local cluster)
@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason='Ray is optional: pip install "pyro-gwg[ray]"')
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # the workers cannot import this test module: its models travel by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    ray.shutdown()


def test_ray_draws_do_not_depend_on_the_number_of_workers(ray_cluster):
    local = draws("vectorized", chains_per_block=2)
    one = draws("ray", chains_per_block=2, num_workers=1)
    two = draws("ray", chains_per_block=2, num_workers=2)
    for run in (one, two):
        assert torch.equal(
            run.get_samples(group_by_chain=True)["x"], local.get_samples(group_by_chain=True)["x"]
        )
        for name, value in local.get_statistics().items():
            assert torch.equal(run.get_statistics()[name], value), name
    assert set(two.timing) == {
        "setup",
        "warmup",
        "sampling",
        "compile",
        "background_compile",
        "wall",
    }
    assert two.diagnostics()["x"]["r_hat"].shape == (3, 3)
    idata = pyro_gwg.to_inference_data(two)
    assert idata.posterior["x"].shape == (6, 30, 3, 3)
    assert "log_likelihood" not in idata or True  # lattice_ising observes nothing


def test_ray_blocks_take_their_initial_values_and_saved_sites(ray_cluster):
    def model():
        pyro.sample("a", dist.Bernoulli(0.5 * torch.ones(2)).to_event(1))
        pyro.sample("b", dist.Categorical(torch.ones(3)))

    start = {
        "a": torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]),
        "b": torch.tensor([0, 1, 2, 0]),
    }
    runs = []
    for method, extra in (("vectorized", {}), ("ray", {"num_workers": 2})):
        pyro.set_rng_seed(1)
        mcmc = MCMC(
            eager_gwg(model),
            5,
            0,
            start,
            num_chains=4,
            chain_method=method,
            chains_per_block=2,
            save_params=["b"],
            disable_progbar=True,
            **extra,
        )
        mcmc.run()
        runs.append(mcmc.get_samples(group_by_chain=True))
    assert list(runs[1]) == ["b"] and torch.equal(runs[0]["b"], runs[1]["b"])
    # one chain: its values with or without the chain dimension, as in pyro.infer.MCMC
    one = []
    for method, value in (("vectorized", start["a"][:1]), ("ray", start["a"][0])):
        pyro.set_rng_seed(1)
        mcmc = MCMC(
            eager_gwg(model),
            5,
            0,
            {"a": value, "b": start["b"][0]},
            chain_method=method,
            disable_progbar=True,
        )
        mcmc.run()
        one.append(mcmc.get_samples()["a"])
    assert torch.equal(one[0], one[1])
    bad = dict(start, b=torch.tensor([0, 1, 5, 0]))
    mcmc = MCMC(
        eager_gwg(model),
        5,
        0,
        bad,
        num_chains=4,
        chain_method="ray",
        chains_per_block=2,
        num_workers=2,
        disable_progbar=True,
    )
    with pytest.raises(ValueError, match="site 'b'.*outside the site's support"):  # before any task
        mcmc.run()


def test_ray_runs_traced_blocks_too(ray_cluster):
    def traced(method, **kwargs):
        pyro.set_rng_seed(5)
        mcmc = MCMC(
            GWG(lattice_ising, jit_compile=True),
            20,
            5,
            num_chains=4,
            chain_method=method,
            chains_per_block=2,
            disable_progbar=True,
            **kwargs,
        )
        mcmc.run(size=3, coupling=0.3)
        return mcmc.get_samples()["x"]

    assert torch.equal(traced("vectorized"), traced("ray", num_workers=2))


def _kill_once(marker):
    def hook(kernel, params, stage, i):
        if stage == "Sample" and i == 5 and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def test_a_killed_worker_is_retried_and_every_draw_comes_back(ray_cluster, tmp_path):
    marker = str(tmp_path / "killed")
    expected = draws(
        "ray", chains_per_block=2, num_workers=2, hook_fn=_kill_once(str(tmp_path / "never"))
    )
    open(str(tmp_path / "never"), "w").close()  # that hook never kills
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        survived = draws("ray", chains_per_block=2, num_workers=2, hook_fn=_kill_once(marker))
    assert os.path.exists(marker)  # a worker was killed mid-run
    assert torch.equal(
        survived.get_samples(group_by_chain=True)["x"],
        expected.get_samples(group_by_chain=True)["x"],
    )


def test_errors_and_warnings_of_a_block_reach_the_caller(ray_cluster):
    def warn(kernel, params, stage, i):
        if i == 2:
            warnings.warn("from the worker", RuntimeWarning, stacklevel=2)

    def fail(kernel, params, stage, i):
        if stage == "Sample" and i == 3:
            raise ValueError("bad hook")

    with pytest.warns(RuntimeWarning, match="from the worker"):
        draws("ray", chains_per_block=3, num_workers=2, hook_fn=warn)
    with pytest.raises(ValueError, match="bad hook"):
        draws("ray", chains_per_block=3, num_workers=2, hook_fn=fail)
    with pytest.warns(UserWarning, match="1 block.*pass chains_per_block=3"):
        draws("ray", num_workers=2)


def test_sbc_and_fit_many_on_ray_match_the_local_runs(ray_cluster):
    settings = dict(
        observed=["y"], num_simulations=6, num_draws=9, warmup_steps=10, progress_bar=False
    )
    local = sbc(bits_model, eager_gwg, **settings)
    distributed = sbc(bits_model, eager_gwg, num_workers=2, **settings)
    assert torch.equal(local.ranks["z"], distributed.ranks["z"])
    data = [{"y": torch.tensor(v)} for v in (0.0, 2.0, 3.0)]
    fits = fit_many(bits_model, eager_gwg, data, 20, 5, num_chains=2, progress_bar=False)
    remote = fit_many(
        bits_model, eager_gwg, data, 20, 5, num_chains=2, num_workers=2, progress_bar=False
    )
    for a, b in zip(fits, remote):
        assert torch.equal(a.get_samples()["z"], b.get_samples()["z"])
        assert torch.equal(a.get_statistics()["log_joint"], b.get_statistics()["log_joint"])
    idata = pyro_gwg.to_inference_data(remote[1])
    assert idata.log_likelihood["y"].shape == (2, 20)


def test_ais_and_arm_on_ray_match_their_in_process_blocks(ray_cluster):
    J = lattice_couplings(3, 0.2)
    settings = dict(num_particles=12, num_steps=10, model_args=(J,), particles_per_block=4)
    pyro.set_rng_seed(0)
    here = ais(ising, eager_gwg(), **settings)
    pyro.set_rng_seed(0)
    there = ais(ising, eager_gwg(), num_workers=2, **settings)
    assert torch.equal(here.log_weights, there.log_weights) and torch.equal(here.log_z, there.log_z)
    stages = rbm_stages(random_rbm(5, 3, seed=0))
    runs = []
    for workers in (1, 2):
        pyro.set_rng_seed(0)
        runs.append(arm(stages, Gibbs(), num_particles=30, num_runs=3, num_workers=workers))
    assert torch.equal(runs[0].log_z_runs, runs[1].log_z_runs)
    assert runs[1].stages[0].num_particles.shape == (3,)
    assert torch.isfinite(runs[1].log_z_se)
