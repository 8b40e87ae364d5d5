"""Simulation-based calibration: the rank statistic, the uniformity test, and the tool
passing an exact kernel and failing a broken one."""

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyro_gwg import GWG
from pyro_gwg.bridge.density import ModelDensity
from pyro_gwg.contrib.sbc import rank_statistics, sbc, uniformity_test


def test_ranks_are_uniform_for_exchangeable_draws_with_ties():
    # the truth and the draws from one distribution: every rank in {0, ..., L} is
    # equally likely, discrete ties included (broken at random)
    generator = torch.Generator().manual_seed(0)
    num_draws, n = 9, 4000
    values = torch.randint(0, 3, (n, num_draws + 1), generator=generator).float()
    ranks = torch.stack(
        [rank_statistics(v[0], v[1:], generator) for v in values.unsqueeze(-1)]
    ).reshape(n, 1)
    assert ranks.min() >= 0 and ranks.max() <= num_draws
    _, p = uniformity_test(ranks, num_draws, num_draws + 1)
    assert p.item() > 1e-3


def test_ranks_count_the_draws_below_and_split_the_ties():
    draws = torch.tensor([[0.0, 1.0], [2.0, 1.0], [3.0, 1.0]])
    ranks = rank_statistics(torch.tensor([2.5, 1.0]), draws)
    assert ranks[0] == 2  # below: 0 and 2
    assert 0 <= ranks[1] <= 3  # three ties


def test_the_uniformity_test_rejects_shifted_ranks_and_refuses_bad_bins():
    generator = torch.Generator().manual_seed(1)
    uniform = torch.randint(0, 20, (500, 2), generator=generator)
    skewed = torch.minimum(uniform, torch.randint(0, 20, (500, 2), generator=generator))
    statistic, p = uniformity_test(torch.cat([uniform[:, :1], skewed[:, :1]], 1), 19, 10)
    assert p[0] > 1e-3 and p[1] < 1e-6 and statistic[1] > statistic[0]
    # unequal bins: expected counts follow each bin's share of the rank values
    _, p = uniformity_test(uniform, 19, 3)
    assert (p > 1e-3).all()
    with pytest.raises(ValueError, match="num_bins must be in"):
        uniformity_test(uniform, 19, 21)


#: a count of 0..30 with a binomial prior, as a Categorical site: GWG's categorical
#: proposal jumps anywhere in one step (near-independent draws after a little thinning),
#: and the posterior spans several values, so the ranks carry information (binary
#: sites give SBC little power)
COUNT_PRIOR = dist.Binomial(30, 0.4).log_prob(torch.arange(31.0)).exp()


def _count_model(y):
    n = pyro.sample("n", dist.Categorical(COUNT_PRIOR))
    pyro.sample("y", dist.Normal(n.float(), 3.0), obs=y)


def _run(**kwargs):
    return sbc(
        _count_model,
        lambda model: GWG(model, jit_compile=False),
        torch.tensor(0.0),
        num_simulations=150,
        num_draws=19,
        num_chains=2,
        warmup_steps=50,
        thinning=5,
        progress_bar=False,
        **kwargs,
    )


@pytest.mark.slow
def test_sbc_passes_an_exact_kernel():
    result = _run()
    assert result.ranks["n"].shape == (150,) and result.num_bins == 20
    assert result.passed(0.01), result.p_values()


@pytest.mark.slow
def test_sbc_fails_a_kernel_that_samples_a_tempered_posterior(monkeypatch):
    # a kernel that doubles the log density (a posterior counted twice) samples a
    # posterior too narrow: the ranks pile up at both ends (p = 0.0006 here, against
    # 0.09 for the exact kernel on the same simulations)
    original = ModelDensity._value_and_grad

    def doubled(self, codes, num_chains, forward=None):
        log_joint, grad = original(self, codes, num_chains, forward)
        return 2 * log_joint, 2 * grad

    monkeypatch.setattr(ModelDensity, "_value_and_grad", doubled)
    assert not _run().passed(0.01)


def test_sbc_names_the_sites_it_cannot_use():
    def two_observations(y, z):
        n = pyro.sample("n", dist.Binomial(5, 0.5))
        pyro.sample("y", dist.Normal(n, 1.0), obs=y)
        pyro.sample("z", dist.Normal(n, 1.0), obs=z)

    args = (torch.tensor(0.0), torch.tensor(0.0))
    with pytest.raises(ValueError, match="observes site 'z'.*observed=None"):
        sbc(two_observations, GWG, *args, observed=["y"], progress_bar=False)
    with pytest.raises(ValueError, match="observed site 'w' is not a sample site"):
        sbc(two_observations, GWG, *args, observed=["y", "z", "w"], progress_bar=False)
    with pytest.raises(ValueError, match="site 'y' is not a latent"):
        sbc(two_observations, GWG, *args, sites=["y"], progress_bar=False)
    with pytest.raises(ValueError, match="num_simulations must be an integer >= 2"):
        sbc(two_observations, GWG, *args, num_simulations=1, progress_bar=False)


def _bits_model(y):
    with pyro.plate("bits", 4):
        x = pyro.sample("x", dist.Bernoulli(0.5))
    pyro.sample("y", dist.Normal(x.sum(-1), 1.0), obs=y)


def _tiny_sbc(**settings):
    """:func:`sbc` of :func:`_bits_model` with a few short eager runs."""
    settings = {
        "num_simulations": 2,
        "num_draws": 3,
        "num_chains": 1,
        "warmup_steps": 1,
        "thinning": 1,
        "progress_bar": False,
        **settings,
    }
    return sbc(
        _bits_model, lambda model: GWG(model, jit_compile=False), torch.tensor(0.0), **settings
    )


def test_sbc_ranks_statistics_of_the_latent_values():
    result = _tiny_sbc(
        num_simulations=3,
        num_draws=7,
        warmup_steps=5,
        statistics={"ones": lambda values: values["x"].sum(-1)},
    )
    # only the statistic is ranked when sites= is not given
    assert set(result.ranks) == {"ones"}
    assert result.ranks["ones"].shape == (3,)
    assert ((result.ranks["ones"] >= 0) & (result.ranks["ones"] <= 7)).all()


@pytest.mark.parametrize(
    "statistics, match",
    [
        ({"ones": 3}, "statistic 'ones' must be a function"),
        ({"x": lambda v: v["x"].sum(-1)}, "statistic 'x' has the name of a latent site"),
        ({"ones": lambda v: v["x"].sum()}, "statistic 'ones' gave shape .* leading dimension"),
    ],
)
def test_sbc_refuses_bad_statistics(statistics, match):
    with pytest.raises(ValueError, match=match):
        _tiny_sbc(statistics=statistics)


def test_sbc_reports_stuck_runs_once(monkeypatch):
    import warnings

    from pyro_gwg import mcmc as mcmc_module
    from pyro_gwg.kernels.run import StuckChainWarning

    real_run = mcmc_module.MCMC.run

    def run_and_warn(self, *args, **kwargs):
        warnings.warn("chain 0 never moved", StuckChainWarning, stacklevel=1)
        warnings.warn("something else", UserWarning, stacklevel=1)
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(mcmc_module.MCMC, "run", run_and_warn)
    with pytest.warns(UserWarning) as record:
        _tiny_sbc(num_simulations=3)
    stuck = [str(w.message) for w in record if w.category is StuckChainWarning]
    assert len(stuck) == 1 and stuck[0].startswith("In 3 of 3 simulations")
    assert any(str(w.message) == "something else" for w in record)


def _factor_likelihood(y):
    with pyro.plate("bits", 3):
        x = pyro.sample("x", dist.Bernoulli(0.5))
    pyro.factor("lik", -2.0 * (y - x.sum(-1, keepdim=True)) ** 2)


def _factor_prior(y):
    with pyro.plate("bits", 3):
        x = pyro.sample("x", dist.Bernoulli(0.5))
    pyro.factor("prior_term", 1.5 * x.sum(-1))
    pyro.sample("y", dist.Normal(x.sum(-1), 1.0), obs=y)


@pytest.mark.parametrize(
    "model, observed, factor",
    [
        (_factor_likelihood, None, "lik"),
        (_factor_prior, None, "prior_term"),
        (_factor_prior, ["y"], "prior_term"),  # was: "list the factor in observed="
    ],
)
def test_sbc_refuses_a_factor_naming_it(model, observed, factor):
    # a factor's term cannot be simulated: the truths would not come from the model
    # and an exact kernel would fail (p = 3e-28 for the likelihood as a factor)
    from pyro_gwg import UnsupportedModelError

    with pytest.raises(
        UnsupportedModelError, match="pyro.factor site\\(s\\) '{}'.*obs=".format(factor)
    ):
        sbc(model, GWG, torch.tensor([1.0]), observed=observed, progress_bar=False)


def test_sbc_leaves_deterministic_sites_alone():
    def model(y):
        with pyro.plate("bits", 4):
            x = pyro.sample("x", dist.Bernoulli(0.5))
        mu = pyro.deterministic("mu", x.sum(-1))
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    kernel = lambda m: GWG(m, jit_compile=False)  # noqa: E731
    settings = dict(num_simulations=2, num_draws=3, num_chains=1, warmup_steps=1, thinning=1)
    for observed in (None, ["y"]):  # ["y"] was refused: "the model observes site 'mu'"
        result = sbc(
            model, kernel, torch.tensor(0.0), observed=observed, progress_bar=False, **settings
        )
        assert set(result.ranks) == {"x"}
    with pytest.raises(ValueError, match="'mu' is a pyro.deterministic site.*leave it out"):
        sbc(model, kernel, torch.tensor(0.0), observed=["y", "mu"], progress_bar=False)


def test_sbc_warns_once_about_a_kernel_that_is_not_exact():
    import warnings

    from pyro_gwg import DULA

    settings = dict(num_simulations=3, num_draws=3, num_chains=1, warmup_steps=1, thinning=1)
    with pytest.warns(UserWarning) as record:
        sbc(
            _bits_model,
            lambda m: DULA(m, jit_compile=False),
            torch.tensor(0.0),
            progress_bar=False,
            **settings,
        )
    inexact = [w for w in record if "is not exact" in str(w.message)]
    assert len(inexact) == 1 and "DULA is not exact" in str(inexact[0].message)
    assert inexact[0].filename == __file__  # points at the call of sbc
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _tiny_sbc()
    assert not [w for w in caught if "is not exact" in str(w.message)]
