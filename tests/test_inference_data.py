"""pyro_gwg.to_inference_data: groups, chain order, encodings and pointwise likelihoods."""

import itertools

import arviz as az
import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
import xarray as xr
from pyro.infer import MCMC
from pyro.infer.mcmc import api as mcmc_api
from small_models import _W, SUITE
from torch.distributions import constraints

import pyro_gwg
import pyro_gwg.inference_data as inference_data
from pyro_gwg import GWG, to_inference_data

matplotlib.use("Agg")

pytestmark = [
    pytest.mark.filterwarnings("ignore:Categorical site"),
    pytest.mark.filterwarnings("ignore:num_chains=.* is more than available_cpu"),
    pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto"),
    pytest.mark.filterwarnings("ignore:For one or more samples the posterior variance"),
    pytest.mark.filterwarnings("ignore::matplotlib.MatplotlibDeprecationWarning"),
]


@pytest.fixture(autouse=True)
def sequential_chains(monkeypatch):
    # pyro.infer.MCMC runs chains in subprocesses when there are enough CPUs: keep them
    # in this process, one after another, on any machine
    monkeypatch.setattr(mcmc_api.mp, "cpu_count", lambda: 1)


def run(model, *args, num_chains=2, num_samples=30, warmup_steps=5, seed=0, kernel=GWG):
    pyro.set_rng_seed(seed)
    mcmc = MCMC(
        kernel(model),
        num_samples=num_samples,
        warmup_steps=warmup_steps,
        num_chains=num_chains,
        disable_progbar=True,
    )
    mcmc.run(*args)
    return mcmc


# ---------------------------------------------------------------- posterior and stats


def test_posterior_holds_integers_as_the_model_sees_them():
    model, args = SUITE["mixed_kinds"]
    mcmc = run(model, *args)
    idata = to_inference_data(mcmc)
    samples = mcmc.get_samples(group_by_chain=True)
    post = idata.posterior
    assert set(post.data_vars) == {"b", "z", "c", "k"}
    for name in post.data_vars:
        assert post[name].dtype == np.int8  # the smallest integer type holding them
        assert post[name].dims[:2] == ("chain", "draw")
        np.testing.assert_array_equal(post[name].values, samples[name].long().numpy())
    assert post["c"].shape == (2, 30) and set(np.unique(post["c"])) <= {0, 1, 2}  # index
    assert post["z"].shape == (2, 30, 4)  # one-hot vector
    np.testing.assert_array_equal(post["z"].values.sum(-1), 1)
    assert post["b"].dims == ("chain", "draw", "b_dim_0")


def test_sample_stats_are_the_kernel_statistics_per_draw():
    model, args = SUITE["mixed_kinds"]
    mcmc = run(model, *args)
    stats = to_inference_data(mcmc).sample_stats
    diag = mcmc.diagnostics()
    required = {"acceptance_rate", "accepted", "lp", "n_changed", "diverging"}
    assert required <= set(stats.data_vars)
    assert set(stats.data_vars) - required <= {"n_energy_evals", "n_grad_evals"}
    for name, key in [("acceptance_rate", "accept_prob"), ("lp", "log_joint")]:
        expected = torch.stack([diag[key]["chain 0"], diag[key]["chain 1"]]).numpy()
        np.testing.assert_array_equal(stats[name].values, expected)
    assert stats["accepted"].dtype == bool and stats["diverging"].dtype == bool
    assert not stats["diverging"].values.any()
    assert np.issubdtype(stats["n_changed"].dtype, np.integer)
    assert stats["acceptance_rate"].shape == (2, 30)
    rate = stats["accepted"].values.mean(1)
    expected = [diag["acceptance rate"]["chain {}".format(c)] for c in (0, 1)]
    np.testing.assert_allclose(rate, expected)


def test_twelve_chains_keep_their_order_and_arviz_runs_on_the_result():
    model, (y,) = SUITE["coupled_binary_field"]
    mcmc = run(model, y, num_chains=12, num_samples=15, warmup_steps=3)
    idata = to_inference_data(mcmc)
    x = idata.posterior["x"].values
    assert x.shape == (12, 15, 5)
    diag = mcmc.diagnostics()
    lp = idata.sample_stats["lp"].values
    accepted = idata.sample_stats["accepted"].values
    energy = pyro_gwg.ModelDensity(model, (y,))
    for c in range(12):
        np.testing.assert_array_equal(lp[c], diag["log_joint"]["chain {}".format(c)].numpy())
        # each chain's statistics belong to that chain's draws
        log_joint = energy.log_joint(torch.as_tensor(x[c]), batched=False)
        np.testing.assert_allclose(lp[c], log_joint.numpy(), rtol=1e-5, atol=1e-5)
        moved = (x[c, 1:] != x[c, :-1]).any(-1)
        assert not (moved & ~accepted[c, 1:]).any()
    # pointwise log-likelihood of the two observations at every draw
    expected = dist.Normal(torch.as_tensor(x).float() @ _W.T, 0.8).log_prob(y).numpy()
    np.testing.assert_allclose(idata.log_likelihood["y"].values, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(idata.observed_data["y"].values, y.numpy())

    summary = az.summary(idata)
    assert list(summary.index[:5]) == ["x[{}]".format(i) for i in range(5)]
    assert az.ess(idata)["x"].shape == (5,)
    assert az.rhat(idata)["x"].shape == (5,)
    axes = az.plot_trace(idata, var_names=["x"])
    assert axes.shape == (1, 2)
    plt.close("all")
    loo = az.loo(idata)
    assert loo["n_data_points"] == 2 and np.isfinite(loo["elpd_loo"])


def test_plates_name_dimensions_and_user_coords_and_dims_apply():
    model, (y,) = SUITE["nested_plates"]
    mcmc = run(model, y)
    idata = to_inference_data(mcmc, coords={"rows": ["top", "bottom"]})
    for group in (idata.posterior["x"], idata.log_likelihood["y"]):
        assert group.dims == ("chain", "draw", "rows", "cols")
        assert list(group["rows"].values) == ["top", "bottom"]
    assert idata.observed_data["y"].dims == ("rows", "cols")
    idata = to_inference_data(mcmc, dims={"x": ["r", "c"]}, log_likelihood=False)
    assert idata.posterior["x"].dims == ("chain", "draw", "r", "c")
    assert "log_likelihood" not in idata.groups() and "observed_data" in idata.groups()
    with pytest.raises(ValueError, match="dims of 'x' name 1 dimension"):
        to_inference_data(mcmc, dims={"x": ["r"]})


# ---------------------------------------------------------------- enumeration

_LOCS = torch.tensor([-1.0, 1.0])
_WEIGHTS = torch.tensor([0.3, 0.7])


def local_mixture(y):
    """Mixture assignments summed out, one per point; a sampled global shift."""
    shift = pyro.sample("shift", dist.Bernoulli(0.5))
    with pyro.plate("points", y.shape[-1]):
        z = pyro.sample("z", dist.Categorical(_WEIGHTS), infer={"enumerate": "parallel"})
        pyro.sample("y", dist.Normal(_LOCS[z] + 1.5 * shift, 1.0), obs=y)


def global_switch(y):
    """One regime, summed out, shared by every observation; three sampled bits."""
    with pyro.plate("bits", 3):
        x = pyro.sample("x", dist.Bernoulli(torch.tensor([0.3, 0.5, 0.6])))
    c = pyro.sample(
        "c", dist.Categorical(torch.tensor([0.4, 0.6])), infer={"enumerate": "parallel"}
    )
    mean = torch.tensor([-1.0, 2.0])[c] + x.sum(-1, keepdim=True)
    with pyro.plate("data", y.shape[-1]):
        pyro.sample("y", dist.Normal(mean, 1.0), obs=y)


def test_local_enumeration_gives_each_point_its_marginal_likelihood():
    y = torch.tensor([-1.2, 0.3, 2.9, 1.1])
    mcmc = run(local_mixture, y)
    idata = to_inference_data(mcmc)
    assert set(idata.posterior.data_vars) == {"shift"}
    shift = torch.as_tensor(idata.posterior["shift"].values).double()
    # log sum_z p(z) p(y_i | z, shift), by hand
    means = _LOCS.double()[:, None, None] + 1.5 * shift  # [z, chain, draw]
    terms = _WEIGHTS.double().log()[:, None, None, None] + dist.Normal(
        means[..., None], 1.0
    ).log_prob(y.double())
    expected = terms.logsumexp(0)
    ll = idata.log_likelihood["y"]
    assert ll.dims == ("chain", "draw", "points")
    np.testing.assert_allclose(ll.values, expected.numpy(), rtol=1e-6, atol=1e-6)
    assert {"shift", "y"} == set(idata.posterior) | set(idata.observed_data)


def test_global_enumeration_gives_each_point_its_predictive_given_the_others():
    y = torch.tensor([0.4, 2.8, 3.6, 1.9, 2.5])
    mcmc = run(global_switch, y)
    idata = to_inference_data(mcmc)
    x = torch.as_tensor(idata.posterior["x"].values).double()  # [chain, draw, 3]
    # l[c, i]: log p(y_i | regime c); T(c) = log p(c) + sum_i l[c, i]
    mean = torch.tensor([-1.0, 2.0]).double()[:, None, None] + x.sum(-1)
    l_ci = dist.Normal(mean[..., None], 1.0).log_prob(y.double())  # [c, chain, draw, i]
    total = torch.tensor([0.4, 0.6]).double().log()[:, None, None] + l_ci.sum(-1)
    # log p(y | x) - log p(y_-i | x)
    expected = total.logsumexp(0)[..., None] - (total[..., None] - l_ci).logsumexp(0)
    ll = idata.log_likelihood["y"].values
    np.testing.assert_allclose(ll, expected.numpy(), rtol=1e-6, atol=1e-6)
    # which is not the per-point marginal, nor do the points add up to log p(y | x)
    marginal = (torch.tensor([0.4, 0.6]).double().log()[:, None, None, None] + l_ci).logsumexp(0)
    assert not np.allclose(ll, marginal.numpy(), atol=1e-3)
    assert not np.allclose(ll.sum(-1), total.logsumexp(0).numpy(), atol=1e-3)


_TRANSITION = torch.tensor([[0.8, 0.2], [0.3, 0.7]])
_ENUM = {"infer": {"enumerate": "parallel"}}


def hmm(y):
    """Hidden states summed out along a Markov chain; a sampled global flip."""
    flip = pyro.sample("flip", dist.Bernoulli(0.5))
    z = 0
    for t in pyro.markov(range(len(y))):
        z = pyro.sample("z_{}".format(t), dist.Categorical(_TRANSITION[z]), **_ENUM)
        pyro.sample("y_{}".format(t), dist.Normal(_LOCS[z] + 2.0 * flip, 1.0), obs=y[t])


def test_markov_enumeration_matches_the_leave_one_out_definition_by_brute_force():
    y = torch.tensor([-0.8, 1.2, 3.9, 0.1])
    mcmc = run(hmm, y, num_chains=1, num_samples=10)
    idata = to_inference_data(mcmc)
    flip = idata.posterior["flip"].values[0]

    def log_evidence(f, leave_out=None):  # sum over all 2^4 hidden paths
        paths = []
        for path in itertools.product([0, 1], repeat=len(y)):
            lp, previous = torch.tensor(0.0, dtype=torch.float64), 0
            for t, z in enumerate(path):
                lp = lp + _TRANSITION[previous, z].double().log()
                if t != leave_out:
                    loc = _LOCS[z].double() + 2.0 * float(f)
                    lp = lp + dist.Normal(loc, 1.0).log_prob(y[t].double())
                previous = z
            paths.append(lp)
        return torch.stack(paths).logsumexp(0)

    for f in np.unique(flip):
        draw = int(np.flatnonzero(flip == f)[0])
        for t in range(len(y)):
            expected = log_evidence(f) - log_evidence(f, leave_out=t)
            got = idata.log_likelihood["y_{}".format(t)].values[0, draw]
            assert got == pytest.approx(float(expected), abs=1e-5)


# ---------------------------------------------------------------- batching


def reduces_over_everything(y):
    """x.sum() mixes a leading batch dimension: the model does not broadcast."""
    with pyro.plate("bits", 3):
        x = pyro.sample("x", dist.Bernoulli(0.5))
    pyro.sample("y", dist.Normal(x.sum(), 1.0), obs=y)


def reshapes(y):
    """A reshape that fails under a leading batch dimension."""
    with pyro.plate("bits", 3):
        x = pyro.sample("x", dist.Bernoulli(0.5))
    pyro.sample("y", dist.Normal(x.reshape(3) @ torch.tensor([1.0, -1.0, 2.0]), 1.0), obs=y)


@pytest.mark.parametrize(
    "model, weights",
    [(reduces_over_everything, [1.0, 1.0, 1.0]), (reshapes, [1.0, -1.0, 2.0])],
    ids=["mixes-draws", "fails-batched"],
)
def test_models_that_do_not_broadcast_run_draw_by_draw(model, weights):
    y = torch.tensor(1.7)
    mcmc = run(model, y, num_samples=20)
    idata = to_inference_data(mcmc)
    x = torch.as_tensor(idata.posterior["x"].values).float()
    expected = dist.Normal(x @ torch.tensor(weights), 1.0).log_prob(y)
    np.testing.assert_allclose(idata.log_likelihood["y"].values, expected.numpy(), rtol=1e-5)


def test_batched_and_draw_by_draw_agree_and_draws_are_split_into_runs(monkeypatch):
    y = torch.tensor([0.4, 2.8, 3.6])
    mcmc = run(global_switch, y)
    whole = to_inference_data(mcmc).log_likelihood["y"].values
    monkeypatch.setattr(inference_data, "_ELEMENTS_PER_RUN", 1)  # one draw per run
    monkeypatch.setattr(inference_data._ModelView, "_broadcasts", lambda *a: False)
    one_by_one = to_inference_data(mcmc).log_likelihood["y"].values
    np.testing.assert_allclose(whole, one_by_one, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- other runners


class Runner:
    """The runner protocol to_inference_data reads, and nothing more."""

    def __init__(self, kernel, samples, diagnostics, args):
        self.kernel, self._samples, self._diagnostics = kernel, samples, diagnostics
        self._args, self._kwargs = args, {}

    def get_samples(self, group_by_chain=False):
        assert group_by_chain
        return self._samples

    def diagnostics(self):
        return self._diagnostics


def test_any_runner_with_the_interface_and_its_statistics():
    model, (y,) = SUITE["coupled_binary_field"]
    num_chains, num_draws = 11, 6
    x = torch.randint(0, 2, (num_chains, num_draws, 5)).float()
    per_draw = {
        # lp encodes (chain, draw): any mix-up of chains shows
        "log_joint": lambda c: torch.arange(num_draws) + 1000.0 * c,
        "step_size": lambda c: torch.full((num_draws,), 0.1 * (c + 1)),
        "energy_evals": lambda c: torch.full((num_draws,), c + 2, dtype=torch.long),
        "grad_evals": lambda c: torch.ones(num_draws, dtype=torch.long),
        "thinned": lambda c: torch.zeros(2 * num_draws),
        "acceptance rate": lambda c: 0.5,
        "divergences": lambda c: [2] if c == 10 else [],
    }
    keys = sorted("chain {}".format(c) for c in range(num_chains))  # "chain 10" < "chain 2"
    diagnostics = {"x": {"n_eff": torch.ones(5), "r_hat": torch.ones(5)}}
    for stat, make in per_draw.items():
        diagnostics[stat] = {key: make(int(key.split()[1])) for key in keys}
    runner = Runner(GWG(model), {"x": x}, diagnostics, (y,))
    with pytest.warns(UserWarning, match="'thinned' has \\[12\\] entries per chain for 6"):
        idata = to_inference_data(runner)
    stats = idata.sample_stats
    names = {"lp", "step_size", "n_energy_evals", "n_grad_evals", "diverging"}
    assert set(stats.data_vars) == names
    expected = np.arange(num_draws) + 1000.0 * np.arange(num_chains)[:, None]
    np.testing.assert_array_equal(stats["lp"].values, expected)
    np.testing.assert_allclose(stats["step_size"].values[:, 0], 0.1 * np.arange(1, 12))
    np.testing.assert_array_equal(stats["n_energy_evals"].values[:, 0], np.arange(2, 13))
    assert stats["diverging"].values.sum() == 1 and stats["diverging"].values[10, 2]
    np.testing.assert_array_equal(idata.posterior["x"].values, x.long().numpy())
    assert idata.log_likelihood["y"].shape == (num_chains, num_draws, 2)


class _Counts(dist.Poisson):
    support = constraints.dependent  # a support torch cannot classify

    def sample(self, sample_shape=()):
        return super().sample(torch.Size(sample_shape)).long()  # integer draws


class _Levels(dist.Normal):
    support = constraints.dependent


def _dependent_supports(y):
    # is_discrete of such a support raises NotImplementedError: the type of the
    # site's values decides
    count = pyro.sample("count", _Counts(2.0, validate_args=False))
    level = pyro.sample("level", _Levels(0.0, 1.0, validate_args=False))
    pyro.sample("y", dist.Normal(count + level, 1.0), obs=y)


def test_sites_of_an_unclassifiable_support_are_typed_by_their_draws():
    count = torch.randint(0, 4, (2, 3))
    level = torch.randn(2, 3)
    runner = Runner(GWG(), {"count": count, "level": level}, {}, (torch.tensor(0.5),))
    runner.kernel.model = _dependent_supports
    posterior = to_inference_data(runner, log_likelihood=False).posterior
    assert posterior["count"].dtype == np.int8
    assert (posterior["count"].values == count.numpy()).all()
    assert posterior["level"].dtype == np.float32


def test_continuous_sites_from_pyro_hmc_stay_floats():
    def model(y):
        loc = pyro.sample("loc", dist.Normal(0.0, 2.0))
        with pyro.plate("points", y.shape[-1]):
            z = pyro.sample("z", dist.Categorical(_WEIGHTS), infer={"enumerate": "parallel"})
            pyro.sample("y", dist.Normal(_LOCS[z] + loc, 1.0), obs=y)

    y = torch.tensor([-0.5, 0.8, 1.9])
    kernel = lambda m: pyro.infer.HMC(m, step_size=0.3, num_steps=4, adapt_step_size=False)  # noqa: E731
    mcmc = run(model, y, num_samples=10, warmup_steps=2, kernel=kernel)
    idata = to_inference_data(mcmc)
    loc = idata.posterior["loc"].values
    assert loc.dtype == np.float32 and loc.shape == (2, 10)
    terms = _WEIGHTS.log()[:, None, None, None] + dist.Normal(
        _LOCS[:, None, None, None] + torch.as_tensor(loc)[..., None], 1.0
    ).log_prob(y)
    np.testing.assert_allclose(
        idata.log_likelihood["y"].values, terms.logsumexp(0).numpy(), rtol=1e-5, atol=1e-5
    )


def mixture(y):
    locs = pyro.sample("locs", dist.Normal(torch.tensor([-2.0, 2.0]), 1.0).to_event(1))
    with pyro.plate("data", len(y)):
        z = pyro.sample("z", dist.OneHotCategorical(logits=torch.zeros(2)))
        pyro.sample("y", dist.Normal(z @ locs, 1.0), obs=y)


def test_mixed_gibbs_continuous_and_discrete_sites_and_prefixed_statistics():
    y = torch.tensor([-2.1, 1.7, 2.4])

    def kernel(model):
        return pyro_gwg.MixedGibbs(pyro.infer.HMC(model, step_size=0.2, num_steps=3), GWG())

    mcmc = run(mixture, y, num_samples=15, warmup_steps=3, kernel=kernel)
    idata = to_inference_data(mcmc)
    locs, z = idata.posterior["locs"], idata.posterior["z"]
    assert locs.dtype == np.float32 and locs.dims == ("chain", "draw", "locs_dim_0")
    assert z.dtype == np.int8 and z.dims == ("chain", "draw", "data", "z_dim_1")
    stats = idata.sample_stats
    assert {"discrete_acceptance_rate", "discrete_lp", "discrete_accepted", "diverging"} <= set(
        stats.data_vars
    )
    mean = (torch.as_tensor(z.values).float() * torch.as_tensor(locs.values)[..., None, :]).sum(-1)
    expected = dist.Normal(mean, 1.0).log_prob(y).numpy()
    np.testing.assert_allclose(idata.log_likelihood["y"].values, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not hasattr(pyro_gwg, "MCMC"), reason="pyro_gwg.MCMC is not written yet")
def test_pyro_gwg_mcmc_with_twelve_vectorized_thinned_chains():
    model, (y,) = SUITE["coupled_binary_field"]
    pyro.set_rng_seed(0)
    mcmc = pyro_gwg.MCMC(
        GWG(model), num_samples=30, warmup_steps=3, num_chains=12, thinning=2, disable_progbar=True
    )
    mcmc.run(y)
    idata = to_inference_data(mcmc)
    x = idata.posterior["x"].values
    assert x.shape == (12, 15, 5) and x.dtype == np.int8
    energy = pyro_gwg.ModelDensity(model, (y,))
    for c in range(12):
        log_joint = energy.log_joint(torch.as_tensor(x[c]), batched=False)
        np.testing.assert_allclose(
            idata.sample_stats["lp"].values[c], log_joint.numpy(), rtol=1e-5, atol=1e-5
        )
    expected = dist.Normal(torch.as_tensor(x).float() @ _W.T, 0.8).log_prob(y).numpy()
    np.testing.assert_allclose(idata.log_likelihood["y"].values, expected, rtol=1e-5, atol=1e-5)
    az.summary(idata)
    az.loo(idata)


# ---------------------------------------------------------------- typed draws, predictive

_MEANS = torch.tensor([-2.0, 0.0, 2.0])


def _indexing_model(y=None):
    # a Categorical used as an index, a Bernoulli and a Binomial beside it
    with pyro.plate("points", 4):
        z = pyro.sample("z", dist.Categorical(torch.ones(3) / 3))
        b = pyro.sample("b", dist.Bernoulli(0.5))
        n = pyro.sample("n", dist.Binomial(2, 0.5))
        return pyro.sample("y", dist.Normal(_MEANS[z] + b + n, 1.0), obs=y)


_Y = torch.tensor([-2.0, 0.5, 2.5, 1.0])


@pytest.mark.parametrize("runner", ["pyro", "pyro_gwg"])
def test_typed_samples_give_each_site_its_dtype_and_predictive_takes_them(runner):
    from pyro.infer import Predictive

    if runner == "pyro":
        mcmc = run(_indexing_model, _Y, num_samples=20)
        assert mcmc.get_samples()["z"].is_floating_point()  # Pyro's runner: floats
        with pytest.raises(IndexError):
            Predictive(_indexing_model, posterior_samples=mcmc.get_samples())(None)
    else:
        pyro.set_rng_seed(0)
        mcmc = pyro_gwg.MCMC(GWG(_indexing_model), 20, 5, num_chains=2, disable_progbar=True)
        mcmc.run(_Y)
    samples = pyro_gwg.typed_samples(mcmc)
    assert samples["z"].dtype == torch.long and samples["z"].shape == (40, 4)
    assert samples["b"].dtype == samples["n"].dtype == torch.get_default_dtype()
    assert torch.equal(samples["z"].double(), mcmc.get_samples()["z"].double())
    simulated = Predictive(_indexing_model, posterior_samples=samples)(None)
    assert simulated["y"].shape == (40, 4)
    grouped = pyro_gwg.typed_samples(mcmc, group_by_chain=True)
    assert grouped["z"].dtype == torch.long and grouped["z"].shape == (2, 20, 4)
    assert pyro_gwg.typed_samples(mcmc, num_samples=7)["z"].shape == (7, 4)


def test_typed_samples_refuse_what_is_not_a_finished_run():
    with pytest.raises(TypeError, match="typed_samples needs an MCMC run"):
        pyro_gwg.typed_samples({"z": torch.zeros(3)})
    mcmc = MCMC(GWG(_indexing_model), num_samples=5)
    with pytest.raises(RuntimeError, match=r"call mcmc.run\(...\) before typed_samples"):
        pyro_gwg.typed_samples(mcmc)


def test_posterior_predictive_and_prior_groups_as_from_pyro_takes_them():
    from pyro.infer import Predictive

    mcmc = run(_indexing_model, _Y, num_samples=20)
    pyro.set_rng_seed(1)
    predicted = Predictive(_indexing_model, posterior_samples=pyro_gwg.typed_samples(mcmc))(None)
    prior = Predictive(_indexing_model, num_samples=50)(None)
    idata = to_inference_data(
        mcmc,
        posterior_predictive=predicted,
        prior=prior,
        coords={"points": list("abcd")},
    )
    assert {"posterior_predictive", "prior", "prior_predictive"} <= set(idata.groups())
    # posterior_predictive: [num_chains * num_draws, ...] split by chain, chain 0 first
    y = idata.posterior_predictive["y"]
    assert y.dims == ("chain", "draw", "points") and y.shape == (2, 20, 4)
    np.testing.assert_array_equal(y.values[1, 0], predicted["y"][20].numpy())
    assert list(y["points"].values) == list("abcd")
    # prior: one chain; latent sites in prior (discrete ones as integers), the
    # simulated observations in prior_predictive
    assert set(idata.prior.data_vars) == {"z", "b", "n"}
    assert idata.prior["z"].shape == (1, 50, 4) and idata.prior["z"].dtype == np.int8
    assert idata.prior["z"].dims == ("chain", "draw", "points")
    np.testing.assert_array_equal(idata.prior["z"].values[0], prior["z"].numpy())
    assert set(idata.prior_predictive.data_vars) == {"y"}
    assert idata.prior_predictive["y"].shape == (1, 50, 4)
    # already [num_chains, num_draws, ...]: kept
    grouped = {"y": predicted["y"].reshape(2, 20, 4)}
    kept = to_inference_data(mcmc, posterior_predictive=grouped, log_likelihood=False)
    np.testing.assert_array_equal(kept.posterior_predictive["y"].values, grouped["y"].numpy())
    az.summary(idata, group="posterior_predictive")


def test_posterior_predictive_of_other_draws_is_one_chain_with_a_warning():
    from pyro.infer import Predictive

    mcmc = run(_indexing_model, _Y, num_samples=20)
    subset = pyro_gwg.typed_samples(mcmc, num_samples=7)
    predicted = Predictive(_indexing_model, posterior_samples=subset)(None)
    with pytest.warns(UserWarning, match="posterior_predictive 'y' \\[7, 4\\] not shaped"):
        idata = to_inference_data(mcmc, posterior_predictive=predicted, log_likelihood=False)
    assert idata.posterior_predictive["y"].shape == (1, 7, 4)
    with pytest.raises(TypeError, match="posterior_predictive must be a dict"):
        to_inference_data(mcmc, posterior_predictive=[predicted["y"]])
    with pytest.raises(TypeError, match="prior\\['y'\\] must be a tensor of draws"):
        to_inference_data(mcmc, prior={"y": 1.0})


def test_arviz_1x_gets_a_datatree(monkeypatch):
    model, args = SUITE["nested_plates"]
    mcmc = run(model, *args, num_samples=10)
    monkeypatch.setattr(inference_data, "_arviz_major", lambda: 1)
    tree = to_inference_data(mcmc)
    assert isinstance(tree, xr.DataTree)
    assert set(tree.children) == {"posterior", "sample_stats", "log_likelihood", "observed_data"}
    assert tree["posterior"]["x"].dims == ("chain", "draw", "rows", "cols")


def test_no_model_means_no_likelihood_groups():
    model, (y,) = SUITE["coupled_binary_field"]
    mcmc = run(model, y, num_samples=10)
    runner = Runner(None, mcmc.get_samples(group_by_chain=True), mcmc.diagnostics(), (y,))
    with pytest.warns(UserWarning, match="no model attribute"):
        idata = to_inference_data(runner)
    assert set(idata.groups()) == {"posterior", "sample_stats"}
    assert idata.posterior["x"].dims == ("chain", "draw", "x_dim_0")


# ---------------------------------------------------------------- integer types and memory


def counts(y):
    """A count of up to 300 (int16) beside a binary and a one-hot site."""
    k = pyro.sample("k", dist.Binomial(300, 0.5))
    b = pyro.sample("b", dist.Bernoulli(0.5).expand([2]).to_event(1))
    z = pyro.sample("z", dist.OneHotCategorical(logits=torch.zeros(3)))
    mean = 0.01 * k + b.sum(-1) + z @ torch.tensor([0.0, 1.0, 2.0])
    pyro.sample("y", dist.Normal(mean, 1.0), obs=y)


@pytest.mark.parametrize("runner", ["pyro_gwg", "pyro"])
def test_discrete_sites_get_the_smallest_integer_type(runner, monkeypatch):
    y = torch.tensor(3.0)
    pyro.set_rng_seed(0)
    if runner == "pyro":
        mcmc = run(counts, y, num_samples=20)
    else:
        mcmc = pyro_gwg.MCMC(GWG(counts), 20, 5, num_chains=3, disable_progbar=True)
        mcmc.run(y)
    samples = mcmc.get_samples(group_by_chain=True)
    if runner == "pyro_gwg":  # read from the stored codes: no float decoding, no site ESS

        def refuse(*args, **kwargs):
            raise AssertionError("to_inference_data decoded the draws or computed their ESS")

        monkeypatch.setattr(mcmc, "get_samples", refuse)
        monkeypatch.setattr(mcmc, "diagnostics", refuse)
    idata = to_inference_data(mcmc)
    post = idata.posterior
    assert post["k"].dtype == np.int16 and post["b"].dtype == np.int8
    assert post["z"].dtype == np.int8 and post["z"].shape[2:] == (3,)
    for name in ("k", "b", "z"):
        np.testing.assert_array_equal(post[name].values, samples[name].numpy())
    assert idata.sample_stats["lp"].shape == post["k"].shape
    expected = dist.Normal(
        0.01 * samples["k"] + samples["b"].sum(-1) + samples["z"] @ torch.tensor([0.0, 1.0, 2.0]),
        1.0,
    ).log_prob(y)
    np.testing.assert_allclose(idata.log_likelihood["y"].values, expected.numpy(), rtol=1e-5)


# ---------------------------------------------------------------- bad input


def test_runs_without_draws_are_an_error():
    model, _ = SUITE["coupled_binary_field"]
    with pytest.raises(RuntimeError, match="pyro.infer.MCMC object has no samples: call mcmc.run"):
        to_inference_data(MCMC(GWG(model), num_samples=5, disable_progbar=True))
    with pytest.raises(RuntimeError, match="has no draws yet: call run\\(\\) first"):
        to_inference_data(pyro_gwg.MCMC(GWG(model), 5, disable_progbar=True))
    with pytest.raises(TypeError, match="needs an MCMC run.*got dict"):
        to_inference_data({"x": torch.zeros(2, 3)})


@pytest.fixture(scope="module")
def finished():
    model, (y,) = SUITE["nested_plates"]
    pyro.set_rng_seed(0)
    mcmc = pyro_gwg.MCMC(GWG(model), 10, num_chains=2, disable_progbar=True)
    mcmc.run(y)
    return mcmc


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"coords": ["top", "bottom"]}, TypeError, "coords must be a dict"),
        ({"coords": {"rows": 2}}, TypeError, "coords\\['rows'\\] must be a sequence"),
        ({"coords": {"rows": "ab"}}, TypeError, "coords\\['rows'\\] must be a sequence"),
        ({"coords": {"rows": [[1, 2]]}}, ValueError, "coords\\['rows'\\] must be one-dim"),
        ({"coords": {1: [0, 1]}}, TypeError, "coords keys must be dimension names"),
        (
            {"coords": {"rows": ["a", "b", "c"]}},
            ValueError,
            "coords\\['rows'\\] has 3 value\\(s\\), but dimension 'rows' of 'x' has size 2",
        ),
        ({"dims": ["rows"]}, TypeError, "dims must be a dict"),
        ({"dims": {"x": "rows"}}, TypeError, "got the string 'rows'; for one dimension"),
        ({"dims": {"x": ["r", 2]}}, TypeError, "dims\\['x'\\] must be a list of dimension"),
        ({"dims": {"x": ["chain", "r", "c"]}}, ValueError, "adds itself"),
        ({"dims": {"w": ["r"]}}, ValueError, "dims names 'w' that the run does not have"),
        ({"log_likelihood": "yes"}, TypeError, "log_likelihood must be True or False"),
    ],
)
def test_bad_arguments_are_refused(finished, kwargs, error, match):
    with pytest.raises(error, match=match):
        to_inference_data(finished, **kwargs)
