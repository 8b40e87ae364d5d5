"""The energy bridge: log joint and gradients from a model's trace, and its errors."""

import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import MCMC
from pyro.infer.autoguide.initialization import init_to_value
from small_models import SUITE, VMAP_OR_LOOP, VMAP_RUNS_PYRO

import pyro_gwg
from pyro_gwg import GWG, BatchingWarning, DiscreteEnergy, UnsupportedModelError, exact_posterior
from pyro_gwg.energy import _TORCH_OOM as OUT_OF_MEMORY
from pyro_gwg.sites import BINARY, CATEGORICAL, ONE_HOT, ORDINAL

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")


def manual_grad(fn, *values):
    values = [v.detach().clone().requires_grad_(True) for v in values]
    f = fn(*values)
    return f.detach(), torch.autograd.grad(f, values)


def test_binary_model_value_and_grad():
    logits = torch.tensor([0.5, -1.0, 2.0])
    y = torch.tensor(1.3)

    def model(y, scale=0.7):
        with pyro.plate("bits", 3):
            x = pyro.sample("x", dist.Bernoulli(logits=logits))
        pyro.factor("pair", 0.4 * x[..., 0:1] * x[..., 1:2])
        pyro.sample("y", dist.Normal(x.sum(-1, keepdim=True), scale), obs=y)

    def manual(x):
        return (
            dist.Bernoulli(logits=logits).log_prob(x).sum()
            + 0.4 * x[0] * x[1]
            + dist.Normal(x.sum(), 0.5).log_prob(y)
        )

    energy = DiscreteEnergy(model, (y,), {"scale": 0.5})
    assert [(s.name, s.kind) for s in energy.sites] == [("x", BINARY)]
    codes = torch.tensor([[1, 0, 1]])
    f, grad = energy.value_and_grad(codes)
    f_ref, (g_ref,) = manual_grad(manual, codes[0].float())
    assert torch.allclose(f, f_ref.reshape(1).double())
    assert grad.shape == (1, 3, 1)  # all-scalar models pack one derivative per coordinate
    assert torch.allclose(grad[0, :, 0], g_ref)


def test_one_hot_gradient_is_own_logits_plus_the_downstream_gradient():
    logits = torch.tensor([0.2, -0.4, 0.1])
    locs = torch.tensor([-1.0, 0.5, 2.0])

    def model():
        z = pyro.sample("z", dist.OneHotCategorical(logits=logits))
        pyro.sample("y", dist.Normal(z @ locs, 0.5), obs=torch.tensor(0.8))

    energy = DiscreteEnergy(model)
    assert energy.sites[0].kind == ONE_HOT
    f, grad = energy.value_and_grad(torch.tensor([[2]]))
    z = torch.tensor([0.0, 0.0, 1.0])
    _, (g_down,) = manual_grad(lambda z: dist.Normal(z @ locs, 0.5).log_prob(torch.tensor(0.8)), z)
    own = logits - logits.logsumexp(-1)
    assert torch.allclose(grad[0, 0], own + g_down)
    expected_f = own[2] + dist.Normal(2.0, 0.5).log_prob(torch.tensor(0.8))
    assert torch.allclose(f, expected_f.reshape(1).double())


def test_categorical_used_as_index_warns_once_and_uses_its_own_logits():
    logits = torch.tensor([0.2, -0.4, 0.1])

    def indexed():
        z = pyro.sample("z", dist.Categorical(logits=logits))
        pyro.sample("y", dist.Normal(torch.tensor([-1.0, 0.5, 2.0])[z], 0.5), obs=torch.tensor(0.8))

    def unused():
        pyro.sample("z", dist.Categorical(logits=logits))
        pyro.sample("y", dist.Normal(0.0, 1.0), obs=torch.tensor(0.8))

    energy = DiscreteEnergy(indexed)
    assert energy.sites[0].kind == CATEGORICAL
    with pytest.warns(UserWarning, match="Categorical site 'z'.*OneHotCategorical"):
        energy.warn_gradient_blind_categoricals(torch.tensor([[1]]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        energy.warn_gradient_blind_categoricals(torch.tensor([[1]]))  # only once
        DiscreteEnergy(unused).warn_gradient_blind_categoricals(torch.tensor([[0]]))
    _, grad = energy.value_and_grad(torch.tensor([[1]]))
    assert torch.allclose(grad[0, 0], logits - logits.logsumexp(-1))


def test_ordinal_gradients():
    def model():
        k = pyro.sample("k", dist.Binomial(5, 0.3))
        n = pyro.sample("n", dist.Poisson(2.0))
        pyro.sample("y", dist.Normal(k - 0.5 * n, 1.0), obs=torch.tensor(1.0))

    def manual(k, n):
        return (
            dist.Binomial(5, 0.3).log_prob(k)
            + dist.Poisson(2.0).log_prob(n)
            + dist.Normal(k - 0.5 * n, 1.0).log_prob(torch.tensor(1.0))
        )

    energy = DiscreteEnergy(model)
    assert [s.kind for s in energy.sites] == [ORDINAL, ORDINAL]
    assert energy.layout.upper.tolist() == [5.0, float("inf")]
    f, grad = energy.value_and_grad(torch.tensor([[2, 3]]))
    f_ref, g_ref = manual_grad(manual, torch.tensor(2.0), torch.tensor(3.0))
    assert torch.allclose(f, f_ref.reshape(1).double())
    assert torch.allclose(grad[0, :, 0], torch.stack(g_ref))


def test_enumerated_site_is_summed_out():
    model, (y,) = SUITE["enumerated_switch"]
    energy = DiscreteEnergy(model, (y,))
    assert energy.enumerated == ["c"] and [s.name for s in energy.sites] == ["x"]
    codes = torch.tensor([[1, 0, 1, 1]])
    x = codes[0].float()
    probs = torch.tensor([0.3, 0.5, 0.6, 0.4])
    terms = torch.stack(
        [
            torch.tensor(w).log() + dist.Normal(shift + x.sum(), 0.8).log_prob(y)
            for w, shift in ((0.3, -1.0), (0.7, 1.5))
        ]
    )
    expected = dist.Bernoulli(probs).log_prob(x).sum() + terms.logsumexp(0)
    assert torch.allclose(energy.log_joint(codes), expected.reshape(1).double())


def test_scale_and_mask_are_honoured():
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.3))
        with poutine.scale(scale=2.5):
            pyro.sample("y", dist.Normal(x, 1.0), obs=torch.tensor(0.4))
        with poutine.mask(mask=False):
            pyro.sample("ignored", dist.Normal(x, 1.0), obs=torch.tensor(100.0))

    energy = DiscreteEnergy(model)
    expected = dist.Bernoulli(0.3).log_prob(torch.tensor(1.0)) + 2.5 * dist.Normal(
        1.0, 1.0
    ).log_prob(torch.tensor(0.4))
    assert torch.allclose(energy.log_joint(torch.tensor([[1]])), expected.reshape(1).double())


@pytest.mark.parametrize("name", sorted(SUITE))
def test_batched_chains_equal_chain_by_chain_evaluation(name):
    model, args = SUITE[name]
    energy = DiscreteEnergy(model, args)
    pyro.set_rng_seed(0)
    codes = energy.initial_codes(5)
    f, grad = energy.value_and_grad(codes)
    for c in range(5):
        f_c, grad_c = energy.value_and_grad(codes[c : c + 1])
        assert torch.allclose(f[c : c + 1], f_c, atol=1e-5)
        assert torch.allclose(grad[c : c + 1], grad_c, atol=1e-5)


@pytest.mark.parametrize("num_chains", [1, 4])
@pytest.mark.parametrize("name", ["coupled_binary_field", "enumerated_switch", "mixed_kinds"])
def test_jit_compiled_value_and_grad_equals_eager(name, num_chains):
    model, args = SUITE[name]
    eager = DiscreteEnergy(model, args)
    compiled = DiscreteEnergy(model, args, jit_compile=True)
    pyro.set_rng_seed(0)
    for _ in range(3):
        codes = eager.initial_codes(num_chains)
        f, grad = eager.value_and_grad(codes)
        f_jit, grad_jit = compiled.value_and_grad(codes)
        assert torch.allclose(f, f_jit, atol=1e-5) and torch.allclose(grad, grad_jit, atol=1e-5)


# ---------------------------------------------------------------- bad input


def test_continuous_latent_site_is_refused_with_a_pointer_to_the_mixed_kernel():
    def model():
        pyro.sample("x", dist.Bernoulli(0.5))
        pyro.sample("mu", dist.Normal(0.0, 1.0))

    with pytest.raises(UnsupportedModelError, match="'mu' is continuous.*MixedGibbs"):
        DiscreteEnergy(model)


def test_model_without_discrete_latent_sites_is_refused():
    def model():
        pyro.sample("y", dist.Bernoulli(0.5), obs=torch.tensor(1.0))
        pyro.sample("c", dist.Categorical(torch.ones(2) / 2), infer={"enumerate": "parallel"})

    with pytest.raises(UnsupportedModelError, match="no latent discrete sites.*'?c'?"):
        DiscreteEnergy(model)


def test_discrete_site_of_unknown_support_is_refused():
    def model():
        pyro.sample("counts", dist.Multinomial(3, torch.ones(3) / 3))

    with pytest.raises(
        UnsupportedModelError, match="Cannot determine the support of latent site 'counts'"
    ):
        DiscreteEnergy(model)


def test_infinite_log_density_at_the_initial_state_names_the_site():
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5).expand([3]).to_event(1))
        pyro.factor("hard", torch.where(x.sum(-1) > 5, 0.0, -float("inf")))

    with pytest.raises(ValueError, match="initial state is -inf.*'hard'"):
        DiscreteEnergy(model).initial_codes(1)


def test_invalid_user_initial_state_is_refused():
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5).expand([3]).to_event(1))
        pyro.factor("not_all_zero", torch.where(x.sum(-1) > 0, 0.0, -float("inf")))

    strategy = init_to_value(values={"x": torch.zeros(3)})
    with pytest.raises(ValueError, match="'not_all_zero'.*init_strategy"):
        DiscreteEnergy(model, init_strategy=strategy).initial_codes(1)


def test_nan_log_density_at_the_initial_state_is_refused():
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5))
        pyro.factor("nan", x * float("nan"))

    # the first trace validates the factor whatever the runner set (MCMC runs with
    # validation off), and names its line
    with pyro.validation_enabled(False):
        with pytest.raises(UnsupportedModelError, match='pyro.factor\\("nan".* is invalid'):
            DiscreteEnergy(model).initial_codes(1)


def test_subsampled_plate_is_refused():
    def model():
        with pyro.plate("data", 10, subsample_size=3):
            pyro.sample("x", dist.Bernoulli(0.5))

    with pytest.raises(UnsupportedModelError, match="subsamples 3 of 10"):
        DiscreteEnergy(model)


def test_sequential_enumeration_is_refused():
    def model():
        pyro.sample("x", dist.Bernoulli(0.5), infer={"enumerate": "sequential"})
        pyro.sample("y", dist.Bernoulli(0.5))

    with pytest.raises(UnsupportedModelError, match="'x'.*'sequential'"):
        DiscreteEnergy(model)


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
            DiscreteEnergy(model)


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
        energy = DiscreteEnergy(model)
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
            DiscreteEnergy(_support_from_one_element)


def _support_changing_at_one_value():
    n = pyro.sample("n", dist.Binomial(30, 0.5))
    pyro.sample("m", dist.Binomial(4 + (n == 17).float(), 0.5))  # 5 at n = 17 only


def test_support_change_the_probes_miss_is_refused_where_met():
    # from n = 3 the probes (n at 0, 1, 2, 5, 10, 20, 29, 30, then 0 and 4) see 4 only:
    # the bound is checked at every evaluation, batched and compiled ones too
    match = "support of latent site 'm'.*\\(4 at the initial state, 5 at the state \\{'n': 17\\}\\)"
    init = init_to_value(values={"n": torch.tensor(3.0), "m": torch.tensor(0.0)})
    energy = DiscreteEnergy(_support_changing_at_one_value, init_strategy=init)
    assert torch.isfinite(energy.log_joint(torch.tensor([[3, 2], [16, 4]]))).all()
    for codes in (torch.tensor([[17, 2]]), torch.tensor([[3, 2], [17, 1]])):
        with pytest.raises(UnsupportedModelError, match=match):
            energy.log_joint(codes)
    traced = DiscreteEnergy(_support_changing_at_one_value, init_strategy=init, jit_compile=True)
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
    energy = DiscreteEnergy(_with_an_empty_site, (y,))
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
            match="distribution of the site sampled at .*test_energy.py:\\d+ "
            "\\(pyro.sample\\(\"w\".* is invalid at the state \\{{'x': {}\\}}.*"
            "torch.clamp".format(int(x)),
        ):
            DiscreteEnergy(model, init_strategy=init)


def test_invalid_distribution_met_during_a_run_names_the_site():
    init = init_to_value(values={"x": torch.tensor(1.0), "w": torch.tensor(0.0)})
    energy = DiscreteEnergy(_negative_probs, init_strategy=init)
    with pyro.validation_enabled(True):
        with pytest.raises(
            UnsupportedModelError,
            match="distribution of latent site 'w' \\(at .*test_energy.py:\\d+ .* is invalid at "
            "the state \\{'x': 2\\} \\(ValueError: Expected parameter probs",
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
        DiscreteEnergy(model).initial_codes(1)


def test_the_error_names_the_line_of_the_model_that_reads_a_latent_value():
    with pytest.raises(UnsupportedModelError, match="test_energy.py:\\d+ \\(if x.item\\(\\):\\)"):
        for seed in range(2):
            pyro.set_rng_seed(seed)
            DiscreteEnergy(_branch_item).initial_codes(1)


def _value_dependent_mean(y):
    x = pyro.sample("x", dist.Bernoulli(0.4).expand([2]).to_event(1))
    mean = 2.0 if x[0].item() else -1.0  # control flow on a latent value, same sites
    pyro.sample("y", dist.Normal(mean + x[1], 1.0), obs=y)


def test_control_flow_that_keeps_the_sites_runs_eagerly_one_state_at_a_time():
    energy = DiscreteEnergy(_value_dependent_mean, (torch.tensor(0.5),))
    assert energy.value_reads and energy.compilable == ()
    codes = torch.tensor([[0, 0], [1, 0], [1, 1]])
    with pytest.warns(BatchingWarning, match="reads latent values.*one at a time"):
        f = energy.log_joint(codes)
    assert energy.batching == "loop"
    for c in range(3):
        assert torch.allclose(f[c : c + 1], energy.log_joint(codes[c : c + 1]))
    with pytest.raises(UnsupportedModelError, match="jit_compile=True cannot compile.*item"):
        DiscreteEnergy(
            _value_dependent_mean, (torch.tensor(0.5),), jit_compile=True
        ).value_and_grad(codes[:1])


def test_log_joint_is_summed_in_double_precision():
    def model(offset):
        pyro.sample("x", dist.Bernoulli(0.3).expand([2]).to_event(1))
        pyro.factor("constant", torch.tensor(offset))

    codes = torch.tensor([[0, 0], [1, 0], [1, 1]])
    small = DiscreteEnergy(model, (0.0,)).log_joint(codes)
    for offset in (1e7, 1e8):
        large = DiscreteEnergy(model, (offset,)).log_joint(codes)
        assert large.dtype == torch.float64
        # differences between states survive a large constant term
        assert torch.allclose(large - large[0], small - small[0], atol=1e-6)


def test_non_finite_gradients_are_zero():
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5).expand([2]).to_event(1))
        pyro.factor("sqrt", x[..., 0].sqrt())  # infinite derivative at 0

    _, grad = DiscreteEnergy(model).value_and_grad(torch.tensor([[0, 1], [1, 1]]))
    assert grad[0, 0, 0] == 0 and grad[1, 0, 0] == 0.5


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_nan_or_infinite_log_density_names_the_site_and_the_state(bad):
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5).expand([3]).to_event(1))
        pyro.factor("spike", torch.where(x.sum(-1) == 3, torch.tensor(bad), torch.tensor(0.0)))

    energy = DiscreteEnergy(model)
    assert torch.isfinite(energy.log_joint(torch.tensor([[0, 1, 1]]))).all()
    # (with validation on, Pyro itself rejects a NaN factor; MCMC runs without it)
    with pyro.validation_enabled(False):
        for evaluate in (energy.log_joint, lambda c: energy.value_and_grad(c)[0]):
            with pytest.raises(
                UnsupportedModelError,
                match="log density is {}.*'x': \\[1, 1, 1\\].*'spike'".format(bad),
            ):
                evaluate(torch.tensor([[0, 1, 1], [1, 1, 1]]))


def test_a_random_model_is_refused():
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5).expand([3]).to_event(1))
        pyro.factor("noise", x.sum(-1) * torch.randn(()))

    for num_chains in (1, 4):
        with pytest.raises(UnsupportedModelError, match="two different log densities.*'noise'"):
            DiscreteEnergy(model).initial_codes(num_chains)


def test_an_observation_of_the_wrong_dtype_is_named():
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5).expand([3]).to_event(1))
        logits = x.sum(-1, keepdim=True).expand(2)
        pyro.sample("y", dist.Bernoulli(logits=logits).to_event(1), obs=torch.tensor([1, 0]))

    with pytest.raises(
        UnsupportedModelError, match="observed site 'y' \\(Bernoulli\\).*int64.*obs=y.float"
    ):
        DiscreteEnergy(model).initial_codes(4)


@pytest.mark.parametrize("value", [-1, 1.5, True, "2"])
def test_bad_max_plate_nesting_is_refused(value):
    def model():
        pyro.sample("x", dist.Bernoulli(0.5))

    with pytest.raises(ValueError, match="max_plate_nesting must be a non-negative integer"):
        DiscreteEnergy(model, max_plate_nesting=value)


def test_too_small_max_plate_nesting_names_the_site():
    def model():
        with pyro.plate("rows", 2, dim=-2), pyro.plate("cols", 2):
            pyro.sample("x", dist.Bernoulli(0.5))

    with pytest.raises(ValueError, match="max_plate_nesting=1 is too small: site 'x' uses 2"):
        DiscreteEnergy(model, max_plate_nesting=1)


def test_an_allocation_failure_in_batched_initialisation_surfaces():
    def model():
        with pyro.plate("bits", 3):
            x = pyro.sample("x", dist.Bernoulli(0.5))
        if x.dim() > 1:  # the batched run of the initial values
            raise OUT_OF_MEMORY("out of memory (simulated)")

    with pytest.raises(OUT_OF_MEMORY):
        DiscreteEnergy(model).initial_codes(8)


def test_model_that_does_not_broadcast_is_evaluated_exactly_with_one_warning():
    def model():
        with pyro.plate("bits", 3):
            x = pyro.sample("x", dist.Bernoulli(0.5))
        pyro.factor("total", x.sum())  # sums over the chain dimension too

    codes = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 0, 0]])
    energy = DiscreteEnergy(model)
    with pytest.warns(
        BatchingWarning, match=f"'total'.*{VMAP_OR_LOOP}.*x.sum\\(-1, keepdim=True\\)"
    ):
        f, grad = energy.value_and_grad(codes)
    assert energy.batching == ("vmap" if VMAP_RUNS_PYRO else "loop")
    for c in range(3):
        f_c, g_c = energy.value_and_grad(codes[c : c + 1])
        assert torch.allclose(f[c : c + 1], f_c) and torch.allclose(grad[c : c + 1], g_c)
    with pytest.raises(UnsupportedModelError, match="does not broadcast.*'total'"):
        DiscreteEnergy(model).check_vectorized(codes)


def test_differentiable_log_joint_carries_parameter_gradients():
    pyro.clear_param_store()

    def model():
        coupling = pyro.param("coupling", torch.tensor(0.7))
        with pyro.plate("sites", 3):
            x = pyro.sample("x", dist.Bernoulli(0.5))
            pyro.factor("field", coupling * x)

    energy = DiscreteEnergy(model)
    codes = torch.tensor([[1, 1, 1], [1, 0, 1], [0, 1, 1]])
    plain = energy.log_joint(codes)
    assert not plain.requires_grad
    value = energy.log_joint(codes, differentiable=True)
    assert torch.allclose(value, plain)
    (grad,) = torch.autograd.grad(value.sum(), pyro.param("coupling").unconstrained())
    # d/d coupling of the log joints summed over the three states: 3 + 2 + 2 ones
    assert torch.allclose(grad, torch.tensor(7.0))
    batched = energy.log_joint(codes, batched=False, differentiable=True)
    assert batched.requires_grad and torch.allclose(batched, plain)
    pyro.clear_param_store()


def test_vmap_runs_pyro_models_on_the_torch_ci_runs():
    # the probe above chooses what the batching tests expect; on the torch that CI
    # runs it must find vmap working, so that it cannot hide a regression there
    if tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 13):
        assert VMAP_RUNS_PYRO


# ---------------------------------------------------------------- weighted own terms

LOGITS = torch.tensor([[0.3, -1.2, 0.8], [1.5, 0.0, -0.7], [-0.2, 0.4, 0.1]])
COUPLING = torch.tensor([[0.5, -0.3, 1.1], [-0.8, 0.2, 0.6], [0.9, -1.4, 0.0]])
KEEP = torch.tensor([True, False, True])


def _one_hot_site(kind, wrap):
    def model():
        with pyro.plate("items", 3):
            fn = dist.OneHotCategorical(logits=LOGITS)
            if kind == "categorical":
                fn = dist.Categorical(logits=LOGITS)
            if wrap == "dist.mask":
                fn = fn.mask(KEEP)
            if wrap == "scale":
                with poutine.scale(scale=0.3):
                    z = pyro.sample("z", fn)
            elif wrap == "scale tensor":
                with poutine.scale(scale=torch.tensor([2.0, 0.5, 1.5])):
                    z = pyro.sample("z", fn)
            elif wrap == "poutine.mask":
                with poutine.mask(mask=KEEP):
                    z = pyro.sample("z", fn)
            else:
                z = pyro.sample("z", fn)
        if kind == "one-hot":  # a term linear in the one-hot values
            pyro.factor("linear", (z * COUPLING).sum())

    return model


def _event_site(wrap):
    # three one-hot coordinates as one event of a site with a batch of two
    def model():
        fn = dist.OneHotCategorical(logits=torch.stack([LOGITS, LOGITS.flip(0)])).to_event(1)
        if wrap == "dist.mask":
            fn = fn.mask(torch.tensor([False, True]))
        with poutine.scale(scale=0.7):
            z = pyro.sample("z", fn)
        pyro.factor("linear", (z * COUPLING).sum())

    return model


@pytest.mark.parametrize(
    "model",
    [
        _one_hot_site(kind, wrap)
        for kind in ("one-hot", "categorical")
        for wrap in ("none", "scale", "scale tensor", "poutine.mask", "dist.mask")
    ]
    + [_event_site("none"), _event_site("dist.mask")],
)
def test_first_order_differences_are_exact_for_a_linear_energy(model):
    # a one-hot value enters its own (scaled, masked) log-probability and the factor
    # linearly, so the first-order estimate of every one-coordinate move must equal the
    # change of the log joint: scales and masks of the site's own term included
    energy = DiscreteEnergy(model)
    num_coords = energy.layout.num_coords
    states = torch.randint(0, 3, (4, num_coords), generator=torch.Generator().manual_seed(0))
    log_joint, grad = energy.value_and_grad(states)
    for i in range(num_coords):
        for b in range(3):
            moved = states.clone()
            moved[:, i] = b
            predicted = grad[:, i, b] - grad[:, i].gather(1, states[:, i, None])[:, 0]
            actual = energy.log_joint(moved) - log_joint
            torch.testing.assert_close(predicted.double(), actual, rtol=0, atol=1e-5)
