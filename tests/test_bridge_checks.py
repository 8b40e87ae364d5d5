"""What a model must satisfy (pyro_gwg/bridge/checks.py): the models refused, with the
site and the state to blame, and those accepted."""

import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC
from pyro.infer.autoguide.initialization import init_to_value

import pyro_gwg
from pyro_gwg import GWG, ModelDensity, UnsupportedModelError, exact_posterior
from pyro_gwg.sites import CATEGORICAL

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")


def test_categorical_used_as_index_warns_once_and_uses_its_own_logits():
    logits = torch.tensor([0.2, -0.4, 0.1])

    def indexed():
        z = pyro.sample("z", dist.Categorical(logits=logits))
        pyro.sample("y", dist.Normal(torch.tensor([-1.0, 0.5, 2.0])[z], 0.5), obs=torch.tensor(0.8))

    def unused():
        pyro.sample("z", dist.Categorical(logits=logits))
        pyro.sample("y", dist.Normal(0.0, 1.0), obs=torch.tensor(0.8))

    energy = ModelDensity(indexed)
    assert energy.sites[0].kind == CATEGORICAL
    with pytest.warns(UserWarning, match="Categorical site 'z'.*OneHotCategorical"):
        energy.warn_gradient_blind_categoricals(torch.tensor([[1]]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        energy.warn_gradient_blind_categoricals(torch.tensor([[1]]))  # only once
        ModelDensity(unused).warn_gradient_blind_categoricals(torch.tensor([[0]]))
    _, grad = energy.value_and_grad(torch.tensor([[1]]))
    assert torch.allclose(grad[0, 0], logits - logits.logsumexp(-1))


# ---------------------------------------------------------------- bad input


def test_continuous_latent_site_is_refused_with_a_pointer_to_the_mixed_kernel():
    def model():
        pyro.sample("x", dist.Bernoulli(0.5))
        pyro.sample("mu", dist.Normal(0.0, 1.0))

    with pytest.raises(UnsupportedModelError, match="'mu' is continuous.*MixedGibbs"):
        ModelDensity(model)


def test_model_without_discrete_latent_sites_is_refused():
    def model():
        pyro.sample("y", dist.Bernoulli(0.5), obs=torch.tensor(1.0))
        pyro.sample("c", dist.Categorical(torch.ones(2) / 2), infer={"enumerate": "parallel"})

    with pytest.raises(UnsupportedModelError, match="no latent discrete sites.*'?c'?"):
        ModelDensity(model)


def test_discrete_site_of_unknown_support_is_refused():
    def model():
        pyro.sample("counts", dist.Multinomial(3, torch.ones(3) / 3))

    with pytest.raises(
        UnsupportedModelError, match="Cannot determine the support of latent site 'counts'"
    ):
        ModelDensity(model)


def test_nan_log_density_at_the_initial_state_is_refused():
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5))
        pyro.factor("nan", x * float("nan"))

    # the first trace validates the factor whatever the runner set (MCMC runs with
    # validation off), and names its line
    with pyro.validation_enabled(False):
        with pytest.raises(UnsupportedModelError, match='pyro.factor\\("nan".* is invalid'):
            ModelDensity(model).initial_codes(1)


def test_subsampled_plate_is_refused():
    def model():
        with pyro.plate("data", 10, subsample_size=3):
            pyro.sample("x", dist.Bernoulli(0.5))

    with pytest.raises(UnsupportedModelError, match="subsamples 3 of 10"):
        ModelDensity(model)


def test_sequential_enumeration_is_refused():
    def model():
        pyro.sample("x", dist.Bernoulli(0.5), infer={"enumerate": "sequential"})
        pyro.sample("y", dist.Bernoulli(0.5))

    with pytest.raises(UnsupportedModelError, match="'x'.*'sequential'"):
        ModelDensity(model)


def _skewed_count():
    # P(n = 0) is small: a random prototype trace almost never shows n = 0
    return pyro.sample("n", dist.Binomial(2, torch.tensor(0.95)))


def _support_from_latent():
    n = _skewed_count()
    pyro.sample("x", dist.Binomial(n + 1, 0.5))


def _support_from_latent_in_a_plate():
    n = _skewed_count()
    with pyro.plate("items", 2):
        pyro.sample("x", dist.Binomial(n + 1, 0.5))


def _support_from_latent_wrapped():
    n = _skewed_count()
    pyro.sample("x", dist.Binomial(2 * n, 0.5).expand([3]).to_event(1))


@pytest.mark.parametrize(
    "model", [_support_from_latent, _support_from_latent_in_a_plate, _support_from_latent_wrapped]
)
def test_support_that_depends_on_another_latent_site_is_refused(model):
    # detected from the model's dependencies in one run, whatever the random initial trace
    for seed in range(3):
        pyro.set_rng_seed(seed)
        with pytest.raises(UnsupportedModelError, match="support of latent site 'x'.*'n'"):
            ModelDensity(model)


def _fixed_count_with_latent_probs(prior):
    def model():
        n = pyro.sample("n", prior)
        # total_count 4 is broadcast against probs computed from n: its support stays 0..4
        pyro.sample("m", dist.Binomial(4, torch.sigmoid(n - 3.0)))
        pyro.sample("y", dist.Normal(n, 2.0), obs=torch.tensor(2.5))

    return model


@pytest.mark.parametrize("prior", [dist.Binomial(5, 0.5), dist.Poisson(2.0)], ids=repr)
def test_fixed_support_broadcast_against_latent_probs_is_sampled(prior):
    # decided from the bound's values at other states, not from where the tensor came from
    model = _fixed_count_with_latent_probs(prior)
    for seed in range(3):
        pyro.set_rng_seed(seed)
        energy = ModelDensity(model)
        (m,) = [s for s in energy.sites if s.name == "m"]
        assert (float(m.lower), float(m.upper)) == (0.0, 4.0)
    codes = torch.tensor([[3, 2], [1, 4]])
    n, k = codes[:, 0].double(), codes[:, 1].double()
    expected = (
        prior.log_prob(n.float()).double()
        + dist.Binomial(4, torch.sigmoid(n - 3.0)).log_prob(k)
        + dist.Normal(n, 2.0).log_prob(torch.tensor(2.5)).double()
    )
    assert torch.allclose(energy.log_joint(codes), expected)


def _support_from_one_element():
    with pyro.plate("items", 3):
        n = pyro.sample("n", dist.Binomial(3, 0.5))
    # the bound changes with n[..., 2] alone, and not at all where n is 1 or 3
    pyro.sample("x", dist.Binomial(4 - (n[..., 2] - 2) ** 2 + 3, 0.5))


def test_support_that_changes_with_one_element_of_another_site_is_refused():
    for seed in range(3):
        pyro.set_rng_seed(seed)
        with pytest.raises(
            UnsupportedModelError,
            match="support of latent site 'x'.*upper bound is computed from latent site.*'n' "
            "and changes with them \\(\\d+ at the initial state, \\d+ at the state",
        ):
            ModelDensity(_support_from_one_element)


def _support_changing_at_one_value():
    n = pyro.sample("n", dist.Binomial(30, 0.5))
    pyro.sample("m", dist.Binomial(4 + (n == 17).float(), 0.5))  # 5 at n = 17 only


def test_support_change_the_probes_miss_is_refused_where_met():
    # from n = 3 the probes (n at 0, 1, 2, 5, 10, 20, 29, 30, then 0 and 4) see 4 only:
    # the bound is checked at every evaluation, batched and compiled ones too
    match = "support of latent site 'm'.*\\(4 at the initial state, 5 at the state \\{'n': 17\\}\\)"
    init = init_to_value(values={"n": torch.tensor(3.0), "m": torch.tensor(0.0)})
    energy = ModelDensity(_support_changing_at_one_value, init_strategy=init)
    assert torch.isfinite(energy.log_joint(torch.tensor([[3, 2], [16, 4]]))).all()
    for codes in (torch.tensor([[17, 2]]), torch.tensor([[3, 2], [17, 1]])):
        with pytest.raises(UnsupportedModelError, match=match):
            energy.log_joint(codes)
    traced = ModelDensity(_support_changing_at_one_value, init_strategy=init, jit_compile=True)
    traced.value_and_grad(torch.tensor([[3, 2], [16, 1]]))
    with pytest.raises(UnsupportedModelError, match=match):
        traced.value_and_grad(torch.tensor([[3, 2], [17, 1]]))
    with pytest.raises(UnsupportedModelError, match="support of latent site 'm'.*changes with"):
        exact_posterior(_support_changing_at_one_value)  # whatever its initial state


def _with_an_empty_site(y):
    pyro.sample("empty", dist.Bernoulli(0.5).expand([0]).to_event(1))
    with pyro.plate("bits", 2):
        x = pyro.sample("x", dist.Bernoulli(0.3))
    pyro.sample("y", dist.Normal(x.sum(-1, keepdim=True), 1.0), obs=y)


def test_a_site_of_no_elements_is_left_to_the_model():
    # one value (the empty tensor), nothing to sample: the other sites are sampled as if
    # it were not there, by both runners (Pyro's get_samples cannot reshape empty draws)
    y = torch.tensor(1.0)
    energy = ModelDensity(_with_an_empty_site, (y,))
    assert [s.name for s in energy.sites] == ["x"]
    codes = torch.tensor([[0, 1], [1, 1]])
    x = codes.double()
    expected = dist.Bernoulli(0.3).log_prob(x).sum(-1) + dist.Normal(x.sum(-1), 1.0).log_prob(y)
    assert torch.allclose(energy.log_joint(codes), expected)
    for runner in (
        MCMC(GWG(_with_an_empty_site), num_samples=5, warmup_steps=2, disable_progbar=True),
        pyro_gwg.MCMC(GWG(_with_an_empty_site), num_samples=5, num_chains=3, disable_progbar=True),
    ):
        runner.run(y)
        assert set(runner.get_samples()) == {"x"}


def _categories_from_latent():
    k = pyro.sample("k", dist.Categorical(torch.ones(2)))
    pyro.sample("c", dist.Categorical(logits=torch.zeros(int(k) + 2)))


def test_categorical_whose_number_of_categories_changes_is_refused():
    match = "'c' \\(\\) with \\d categories -> \\(\\) with \\d categories.*keep its number of cat"
    for seed in range(2):  # whichever number of categories the first trace has
        pyro.set_rng_seed(seed)
        with pytest.raises(UnsupportedModelError, match=match):
            exact_posterior(_categories_from_latent)
        with pytest.raises(UnsupportedModelError, match=match):
            pyro_gwg.MCMC(GWG(_categories_from_latent), num_samples=2, disable_progbar=True).run()


def _negative_probs():
    x = pyro.sample("x", dist.Binomial(2, 0.5))
    pyro.sample("w", dist.Bernoulli(probs=1.5 - x))  # negative where x = 2


def _nan_logits():
    x = pyro.sample("x", dist.Binomial(2, 0.5))
    pyro.sample("w", dist.Categorical(logits=torch.stack([torch.log(x - 1.0), torch.zeros(())])))


@pytest.mark.parametrize("validation", [True, False])
@pytest.mark.parametrize("model, x", [(_negative_probs, 2.0), (_nan_logits, 0.0)])
def test_invalid_distribution_parameters_name_the_site_and_the_state(model, x, validation):
    # torch's own message ("probability tensor contains either inf, nan or element < 0",
    # or its validation's) names no site
    init = init_to_value(values={"x": torch.tensor(x)})
    with pyro.validation_enabled(validation):
        with pytest.raises(
            UnsupportedModelError,
            match="distribution of the site sampled at .*test_bridge_checks.py:\\d+ "
            "\\(pyro.sample\\(\"w\".* is invalid at the state \\{{'x': {}\\}}.*"
            "torch.clamp".format(int(x)),
        ):
            ModelDensity(model, init_strategy=init)


def test_invalid_distribution_met_during_a_run_names_the_site():
    init = init_to_value(values={"x": torch.tensor(1.0), "w": torch.tensor(0.0)})
    energy = ModelDensity(_negative_probs, init_strategy=init)
    with pyro.validation_enabled(True):
        with pytest.raises(
            UnsupportedModelError,
            match="distribution of latent site 'w' \\(at .*test_bridge_checks.py:\\d+ .* is "
            "invalid at the state \\{'x': 2\\} \\(ValueError: Expected parameter probs",
        ):
            energy.log_joint(torch.tensor([[2, 0]]))


def _invalid_likelihood():
    x = pyro.sample("x", dist.Bernoulli(0.5))
    pyro.sample("y", dist.Bernoulli(probs=1.5 - 2 * x), obs=torch.tensor(1.0))


@pytest.mark.parametrize("runner", [pyro.infer.MCMC, pyro_gwg.MCMC])
def test_invalid_parameters_are_refused_although_the_runner_turns_validation_off(runner):
    # both runners turn Pyro's validation off (disable_validation=True), under which
    # torch clamps the invalid probabilities of the likelihood and the run went on,
    # silently wrong; the first trace validates them whatever the runner set
    mcmc = runner(GWG(_invalid_likelihood), num_samples=2, warmup_steps=1, disable_progbar=True)
    with pytest.raises(
        UnsupportedModelError,
        match="distribution of the site sampled at .*"
        '\\(pyro.sample\\("y".* is invalid at the state',
    ):
        mcmc.run()


def _branch_item():
    x = pyro.sample("x", dist.Bernoulli(0.7))
    if x.item():
        pyro.sample("w", dist.Bernoulli(0.3))


def _branch_bool():
    x = pyro.sample("x", dist.Bernoulli(0.7).expand([2]).to_event(1))
    if x.sum() > 1:
        pyro.sample("w", dist.Bernoulli(0.3))


def _loop_over_latent_count():
    n = pyro.sample("n", dist.Binomial(3, 0.5))
    for i in range(int(n)):
        pyro.sample("w_{}".format(i), dist.Bernoulli(0.3))


def _plate_of_latent_size():
    n = pyro.sample("n", dist.Binomial(3, 0.5))
    with pyro.plate("items", int(n) + 1):
        pyro.sample("w", dist.Bernoulli(0.3))


@pytest.mark.parametrize(
    "model", [_branch_item, _branch_bool, _loop_over_latent_count, _plate_of_latent_size]
)
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_sites_that_exist_on_some_paths_only_are_refused(model, seed):
    # whichever path the initial state takes, the set-up finds the other one
    pyro.set_rng_seed(seed)
    with pytest.raises(UnsupportedModelError, match="latent sites of the model change.*reads"):
        ModelDensity(model).initial_codes(1)


def test_the_error_names_the_line_of_the_model_that_reads_a_latent_value():
    with pytest.raises(
        UnsupportedModelError, match="test_bridge_checks.py:\\d+ \\(if x.item\\(\\):\\)"
    ):
        for seed in range(2):
            pyro.set_rng_seed(seed)
            ModelDensity(_branch_item).initial_codes(1)


def test_a_random_model_is_refused():
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5).expand([3]).to_event(1))
        pyro.factor("noise", x.sum(-1) * torch.randn(()))

    for num_chains in (1, 4):
        with pytest.raises(UnsupportedModelError, match="two different log densities.*'noise'"):
            ModelDensity(model).initial_codes(num_chains)
