"""AIS: schedules, weights and the factorised base as pure functions; log Z against exact
enumeration on small Ising, RBM and mixed-site models, within the reported error."""

import importlib
import math

import pyro
import pyro.distributions as dist
import pytest
import torch
import torch.nn.functional as F
from small_models import SUITE

from pyro_gwg import (
    GWG,
    NCG,
    Gibbs,
    HammingBall,
    LocallyBalanced,
    ModelDensity,
    UnsupportedModelError,
)
from pyro_gwg import exact_posterior as enumerate_model
from pyro_gwg.contrib.estimators import FactorisedBase, ais, ais_log_likelihood, log_likelihood
from pyro_gwg.contrib.estimators.ais import (
    ais_log_weight_increment,
    annealing_schedule,
    geometric_schedule,
    linear_schedule,
    sigmoid_schedule,
)
from pyro_gwg.contrib.estimators.weights import (
    effective_sample_size,
    log_mean_exp,
    log_mean_exp_se,
    normalize_log_weights,
)
from pyro_gwg.contrib.kernels import RBMBlockGibbs
from pyro_gwg.models import (
    ising,
    lattice_couplings,
    random_rbm,
    rbm,
    rbm_log_partition,
)

# ---------------------------------------------------------------------- pure functions


@pytest.mark.parametrize("make", [linear_schedule, sigmoid_schedule, geometric_schedule])
def test_schedules_run_from_zero_to_one(make):
    betas = make(50)
    assert betas.shape == (51,)
    assert float(betas[0]) == 0.0 and float(betas[-1]) == pytest.approx(1.0, abs=1e-12)
    assert bool((betas[1:] >= betas[:-1]).all())


def test_schedule_shapes():
    assert torch.allclose(linear_schedule(4), torch.tensor([0, 0.25, 0.5, 0.75, 1]).double())
    sig = sigmoid_schedule(100)
    steps = sig.diff()
    assert steps[0] < steps[50] and steps[-1] < steps[50]  # dense at both ends
    geo = geometric_schedule(10, start=1e-2)
    assert float(geo[1]) == pytest.approx(1e-2)
    ratios = geo[2:] / geo[1:-1]
    assert torch.allclose(ratios, ratios[0].expand_as(ratios))


def test_schedule_errors():
    with pytest.raises(ValueError, match="schedule must be one of"):
        annealing_schedule("cosine", 10)
    with pytest.raises(ValueError, match="start at beta = 0"):
        annealing_schedule(torch.tensor([0.1, 1.0]))
    with pytest.raises(ValueError, match="must not decrease"):
        annealing_schedule(torch.tensor([0.0, 0.6, 0.4, 1.0]))
    with pytest.raises(ValueError, match="disagrees"):
        annealing_schedule(torch.tensor([0.0, 0.5, 1.0]), num_steps=5)
    with pytest.raises(ValueError, match="positive integer"):
        linear_schedule(0)
    assert annealing_schedule(torch.tensor([0.0, 0.5, 1.0])).dtype == torch.float64


def test_increments_telescope_to_the_full_log_ratio():
    # at a fixed state the increments add up to f(x) - log p0(x)
    betas = sigmoid_schedule(17)
    f, b = torch.tensor([1.3, -0.4]), torch.tensor([-2.0, -0.7])
    total = sum(
        ais_log_weight_increment(f, b, float(betas[t - 1]), float(betas[t]))
        for t in range(1, len(betas))
    )
    assert torch.allclose(total, (f - b).to(total.dtype), atol=1e-6)


def test_effective_sample_size_and_se():
    assert float(effective_sample_size(torch.zeros(10))) == pytest.approx(10.0)
    one_hot = torch.tensor([0.0, -float("inf"), -float("inf")])
    assert float(effective_sample_size(one_hot)) == pytest.approx(1.0)
    w = torch.randn(500, generator=torch.Generator().manual_seed(0)).double()
    assert float(effective_sample_size(w + 7.0)) == pytest.approx(float(effective_sample_size(w)))
    e = w.exp()
    assert float(effective_sample_size(w)) == pytest.approx(float(e.sum() ** 2 / (e**2).sum()))
    assert float(log_mean_exp(w)) == pytest.approx(math.log(float(e.mean())))
    se = float(e.std() / (math.sqrt(len(e)) * e.mean()))
    assert float(log_mean_exp_se(w)) == pytest.approx(se, rel=1e-6)
    assert float(normalize_log_weights(w).exp().sum()) == pytest.approx(1.0)


def test_weight_errors():
    with pytest.raises(ValueError, match="NaN"):
        effective_sample_size(torch.tensor([0.0, float("nan")]))
    with pytest.raises(ValueError, match="-inf"):
        log_mean_exp(torch.full((3,), -float("inf")))
    with pytest.raises(ValueError, match="1-d"):
        log_mean_exp(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="two weights"):
        log_mean_exp_se(torch.zeros(1))


def _mixed_model():
    b = pyro.sample("b", dist.Bernoulli(logits=torch.tensor([0.7, -1.2])).to_event(1))
    z = pyro.sample("z", dist.OneHotCategorical(logits=torch.tensor([0.3, -0.5, 1.0])))
    c = pyro.sample("c", dist.Categorical(logits=torch.tensor([0.2, -0.1, 0.4, 0.0])))
    return b, z, c


def _base_of_mixed_model(energy):
    """The factorised base with the model's own distributions (so f = log p0)."""
    log_probs = torch.full((energy.num_coords, 4), -float("inf"))
    for i, logit in enumerate([0.7, -1.2]):  # Bernoulli(logits): log(1 - p), log p
        log_probs[i, :2] = torch.tensor([0.0, logit]) - F.softplus(torch.tensor(logit))
    log_probs[2, :3] = torch.log_softmax(torch.tensor([0.3, -0.5, 1.0]), 0)
    log_probs[3, :4] = torch.log_softmax(torch.tensor([0.2, -0.1, 0.4, 0.0]), 0)
    return FactorisedBase(energy.layout, log_probs)


def test_factorised_base_matches_a_model_of_independent_sites():
    energy = ModelDensity(_mixed_model)
    base = _base_of_mixed_model(energy)
    post = enumerate_model(_mixed_model)
    states = post.states()
    # normalised, and equal to the model's log joint and its packed gradient
    assert float(torch.logsumexp(base.log_prob(states), 0)) == pytest.approx(0.0, abs=1e-5)
    assert torch.allclose(base.log_prob(states).double(), energy.log_joint(states), atol=1e-5)
    _, grad = energy.value_and_grad(states)
    gains_model = energy.layout.gains(states, grad)
    gains_base = energy.layout.gains(states, base.grad(states))
    assert torch.allclose(gains_base, gains_model, atol=1e-5)
    # draws follow the base
    draws = base.sample(20000)
    freq = torch.nn.functional.one_hot(draws[:, 3], 4).float().mean(0)
    assert torch.allclose(freq, base.log_probs[3].exp(), atol=0.02)


def test_factorised_base_fit_and_uniform():
    energy = ModelDensity(_mixed_model)
    uniform = FactorisedBase.uniform(energy.layout)
    states = enumerate_model(_mixed_model).states()
    assert torch.allclose(uniform.log_prob(states), torch.full((48,), -math.log(48.0)))
    data = torch.tensor([[1, 0, 2, 3], [1, 1, 2, 0], [0, 0, 2, 3]])
    fitted = FactorisedBase.fit(energy.layout, data, smoothing=1.0)
    # coordinate 2 (K = 3): counts [0, 0, 3] + 1 each
    assert torch.allclose(fitted.log_probs[2, :3].exp(), torch.tensor([1.0, 1.0, 4.0]) / 6)
    assert torch.allclose(fitted.log_probs[0, :2].exp(), torch.tensor([2.0, 3.0]) / 5)
    with pytest.raises(ValueError, match="smoothing"):
        FactorisedBase.fit(energy.layout, data, smoothing=0.0)
    with pytest.raises(ValueError, match="outside"):
        FactorisedBase.fit(energy.layout, data + 5)


def test_factorised_base_ordinal_slope_is_the_central_difference():
    def model():
        pyro.sample("k", dist.Binomial(4, 0.3))

    energy = ModelDensity(model)
    table = torch.tensor([[0.1, 0.5, 0.7, 0.3, -0.2]]).log_softmax(-1)
    base = FactorisedBase(energy.layout, table)
    codes = torch.arange(5).unsqueeze(-1)
    slopes = base.grad(codes).reshape(-1)
    t = table[0]
    expected = torch.stack(
        [t[1] - t[0], (t[2] - t[0]) / 2, (t[3] - t[1]) / 2, (t[4] - t[2]) / 2, t[4] - t[3]]
    )
    assert torch.allclose(slopes, expected, atol=1e-6)


# ---------------------------------------------------------------------- exactness


def _within_reported_error(estimate, se, exact, max_se):
    err = float(estimate) - exact
    assert 0 < float(se) < max_se, "standard error {} is not in (0, {})".format(float(se), max_se)
    assert abs(err) < 4 * float(se), "log Z error {:.4f} exceeds 4 SE ({:.4f})".format(
        err, 4 * float(se)
    )


def test_ais_gwg_ising_matches_enumeration():
    pyro.set_rng_seed(0)
    couplings = lattice_couplings(3, 0.3)
    exact = float(enumerate_model(ising, couplings).log_normalizer)
    result = ais(ising, GWG(), num_particles=200, num_steps=200, model_args=(couplings,))
    _within_reported_error(result.log_z, result.log_z_se, exact, max_se=0.1)
    assert result.log_weights.shape == (200,) and result.codes.shape == (200, 9)
    assert result.samples["x"].shape == (200, 9)
    assert 1 <= float(result.ess) <= 200
    assert result.gradient_evaluations == 200 * (2 * 199)  # init + step per temperature


@pytest.mark.parametrize(
    "kernel",
    [
        GWG(balancing="barker"),
        GWG(num_flips=3, replacement=False),
        LocallyBalanced(balancing="min"),
    ],
    ids=["gwg-barker", "gwg-without-replacement", "lb-min"],
)
def test_ais_with_gwg_options_matches_enumeration(kernel):
    pyro.set_rng_seed(0)
    couplings = lattice_couplings(3, 0.3)
    exact = float(enumerate_model(ising, couplings).log_normalizer)
    result = ais(ising, kernel, num_particles=200, num_steps=200, model_args=(couplings,))
    _within_reported_error(result.log_z, result.log_z_se, exact, max_se=0.1)


def test_ais_with_a_gwg_jump_radius_matches_enumeration():
    pyro.set_rng_seed(0)
    model, args = SUITE["mixed_kinds"]
    exact = float(enumerate_model(model, *args).log_normalizer)
    result = ais(model, GWG(radius=2), num_particles=200, num_steps=100, model_args=args)
    _within_reported_error(result.log_z, result.log_z_se, exact, max_se=0.1)


def test_ais_gibbs_rbm_matches_exact_hidden_sum():
    pyro.set_rng_seed(1)
    params = random_rbm(12, 6, weight_scale=1.0, seed=3)
    exact = float(rbm_log_partition(params) - F.softplus(params.visible_bias).sum())
    result = ais(rbm, Gibbs(), num_particles=200, num_steps=300, model_args=tuple(params))
    _within_reported_error(result.log_z, result.log_z_se, exact, max_se=0.1)
    assert result.gradient_evaluations == 0


def test_ais_marginal_likelihood_with_data_base_and_sigmoid_schedule():
    # observed sites: log Z is log p(y); base fitted to draws, NCG transitions
    pyro.set_rng_seed(2)
    model, args = SUITE["coupled_binary_field"]
    post = enumerate_model(model, *args)
    data = post.sample(50)
    result = ais(
        model,
        NCG(step_size=0.5),
        num_particles=200,
        num_steps=100,
        schedule="sigmoid",
        base=data,
        model_args=args,
    )
    _within_reported_error(result.log_z, result.log_z_se, float(post.log_normalizer), 0.1)


def test_ais_mixed_sites_uniform_base():
    # bits, one-hot and Categorical sites and a Binomial count in one model
    pyro.set_rng_seed(3)
    model, args = SUITE["mixed_kinds"]
    exact = float(enumerate_model(model, *args).log_normalizer)
    result = ais(model, HammingBall(block_size=2), num_particles=200, num_steps=50, model_args=args)
    _within_reported_error(result.log_z, result.log_z_se, exact, max_se=0.1)


def test_the_check_fails_with_a_wrong_incremental_weight(monkeypatch):
    # dropping the base term from the incremental weight must be caught
    def wrong(log_target, log_base, beta_prev, beta_next):
        return (beta_next - beta_prev) * log_target

    # the package attribute ``ais`` is the function; the module is reached by name
    ais_module = importlib.import_module("pyro_gwg.contrib.estimators.ais")
    monkeypatch.setattr(ais_module, "ais_log_weight_increment", wrong)
    pyro.set_rng_seed(0)
    couplings = lattice_couplings(3, 0.3)
    exact = float(enumerate_model(ising, couplings).log_normalizer)
    result = ais(ising, GWG(), num_particles=200, num_steps=200, model_args=(couplings,))
    with pytest.raises(AssertionError, match="exceeds 4 SE"):
        _within_reported_error(result.log_z, result.log_z_se, exact, max_se=0.1)


def test_log_likelihood_helpers():
    pyro.set_rng_seed(4)
    params = random_rbm(10, 4, weight_scale=1.0, seed=5)
    exact_log_z = float(rbm_log_partition(params) - F.softplus(params.visible_bias).sum())
    data = {"v": torch.bernoulli(torch.full((30, 10), 0.5))}
    exact = log_likelihood(rbm, data, exact_log_z, model_args=tuple(params))
    assert exact.shape == (30,)
    post = enumerate_model(rbm, *params)
    index = post.state_index(data["v"].long())
    assert torch.allclose(exact, post.log_probs[index].double(), atol=1e-4)
    result = ais_log_likelihood(
        rbm, GWG(), data, model_args=tuple(params), num_particles=100, num_steps=100, base=data
    )
    _within_reported_error(-result.mean, result.log_z_se, -float(exact.mean()), max_se=0.2)
    assert torch.allclose(result.per_example - exact, (result.mean - exact.mean()).expand(30))


# ---------------------------------------------------------------------- errors


def test_ais_errors():
    couplings = lattice_couplings(2, 0.3)
    with pytest.raises(UnsupportedModelError, match="RBMBlockGibbs"):
        ais(rbm, RBMBlockGibbs(), model_args=tuple(random_rbm(4, 2)))
    with pytest.raises(TypeError, match="discrete kernel"):
        ais(ising, object(), model_args=(couplings,))
    with pytest.raises(ValueError, match="num_particles"):
        ais(ising, GWG(), num_particles=1, model_args=(couplings,))
    with pytest.raises(ValueError, match="base must be"):
        ais(ising, GWG(), base="bernoulli", model_args=(couplings,))

    def poisson_model():
        pyro.sample("n", dist.Poisson(2.0))

    with pytest.raises(UnsupportedModelError, match="'n'"):
        ais(poisson_model, GWG(), num_steps=2)
