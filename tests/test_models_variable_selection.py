"""Bayesian variable selection (Rhodes & Gutmann 2022, Appendix G) and spike-and-slab
regression."""

import itertools
import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from exactness import assert_exact, draw_codes
from pyro.infer import NUTS
from pyro.ops.stats import effective_sample_size

import pyro_gwg
from pyro_gwg import AVG, GWG, PAVG, MixedGibbs, ModelDensity, exact_posterior
from pyro_gwg.models import (
    spike_and_slab_coefficients,
    spike_and_slab_regression,
    variable_selection,
    variable_selection_data,
    variable_selection_exact,
)
from pyro_gwg.models.variable_selection import pairwise_tables, selection_log_likelihood

SMALL = dict(num_obs=15, num_pairs=3, active_pairs=2, seed=3)


def test_data_are_seeded_and_pairs_are_correlated():
    x, y, w = variable_selection_data(num_obs=400, seed=1)
    x2, y2, _ = variable_selection_data(num_obs=400, seed=1)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert x.shape == (400, 20) and y.shape == (400,)
    assert torch.allclose(x.mean(0), torch.zeros(20), atol=1e-5) and abs(float(y.mean())) < 1e-5
    corr = torch.corrcoef(x.T)
    assert corr[0, 1] > 0.9 and abs(float(corr[0, 2])) < 0.2
    assert (w != 0).sum() == 4 and w[1] == 0 and w[0] != 0


def test_marginal_likelihood_is_a_multivariate_student_t():
    x, y, _ = variable_selection_data(**SMALL)
    torch.manual_seed(0)
    masks = torch.randint(0, 2, (5, x.shape[1])).double()
    tau, a0, b0 = 0.7, 2.0, 1.5
    got = selection_log_likelihood(masks, x.double(), y.double(), tau, a0, b0)
    for mask, value in zip(masks, got):
        xs = x.double() * mask
        cov = (b0 / a0) * (torch.eye(len(y)) + tau**2 * xs @ xs.T).double()
        student = dist.MultivariateStudentT(
            torch.tensor(2 * a0).double(), torch.zeros(len(y)).double(), torch.linalg.cholesky(cov)
        )
        assert float(value) == pytest.approx(float(student.log_prob(y.double())), abs=1e-6)


def test_marginal_likelihood_is_differentiable_in_a_relaxed_mask():
    x, y, _ = variable_selection_data(**SMALL)
    mask = torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0, 0.0], dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(selection_log_likelihood(mask, x, y), mask)
    for i in range(6):
        step = torch.zeros(6, dtype=torch.float64)
        step[i] = 1e-6
        fd = (
            selection_log_likelihood(mask.detach() + step, x, y)
            - selection_log_likelihood(mask.detach() - step, x, y)
        ) / 2e-6
        assert float(grad[i]) == pytest.approx(float(fd), rel=1e-4, abs=1e-6)
    # the mask scales the design matrix: informative at included covariates, zero at
    # excluded ones (see the module docstring)
    on = mask.detach().bool()
    assert (grad[on] != 0).all() and (grad[~on] == 0).all()


def test_exact_summaries_match_brute_force_enumeration():
    x, y, _ = variable_selection_data(**SMALL)
    kwargs = dict(num_irrelevant=3, inclusion_prob=0.3, irrelevant_prob=0.05)
    exact = variable_selection_exact(x, y, **kwargs)
    post = exact_posterior(variable_selection, x, y, **kwargs)
    marginals = post.flat_marginals()[:, 1].double()
    assert torch.allclose(exact.marginals, marginals, atol=1e-5)
    states = post.states().double()
    joint = states.T @ (post.probs.double().unsqueeze(-1) * states)
    assert torch.allclose(exact.joint, joint, atol=1e-5)
    assert float(exact.log_evidence) == pytest.approx(float(post.log_normalizer), abs=1e-3)
    # the irrelevant bits keep their prior, independent of everything else
    assert torch.allclose(exact.marginals[6:], torch.full((3,), 0.05).double())
    assert float(exact.joint[0, 7]) == pytest.approx(float(exact.marginals[0]) * 0.05)


def test_pairwise_tables_are_distributions():
    x, y, _ = variable_selection_data(**SMALL)
    exact = variable_selection_exact(x, y, num_irrelevant=2)
    tables = pairwise_tables(exact.marginals, exact.joint)
    assert tables.shape == (8, 8, 2, 2)
    assert torch.allclose(tables.sum((-1, -2)), torch.ones(8, 8).double())
    assert (tables > -1e-12).all()
    assert torch.allclose(tables[..., 1, :].sum(-1), exact.marginals.unsqueeze(-1).expand(8, 8))


def test_default_target_has_the_papers_dimensions():
    x, y, _ = variable_selection_data()
    energy = ModelDensity(variable_selection, (x, y))
    assert [s.name for s in energy.sites] == ["s", "t"]
    assert energy.num_coords == 100 and energy.layout.all_binary
    torch.manual_seed(0)
    codes = torch.randint(0, 2, (3, 100))
    energy.check_vectorized(codes)  # batched chains stay apart
    f, grad = energy.value_and_grad(codes)
    assert torch.isfinite(f).all() and grad.shape == (3, 100, 1)
    # the irrelevant bits only see their prior: gradient log(0.001 / 0.999)
    assert torch.allclose(grad[:, 20:, 0], torch.tensor(math.log(0.001 / 0.999)), atol=1e-4)


@pytest.mark.parametrize("kernel", [AVG, PAVG])
def test_samplers_are_exact_on_a_small_instance(kernel):
    x, y, _ = variable_selection_data(**SMALL)
    kwargs = dict(num_irrelevant=2, irrelevant_prob=0.1)
    pyro.set_rng_seed(0)
    codes = draw_codes(kernel(variable_selection, jit_compile=True), 128, 300, 60, x, y, **kwargs)
    assert_exact(codes, exact_posterior(variable_selection, x, y, **kwargs))


# spike-and-slab regression: 6 independent covariates, columns 0 and 2 active; the four
# null covariates have exact inclusion probabilities 0.021-0.037
SPIKE_DATA = dict(num_obs=50, num_pairs=3, active_pairs=2, correlation=0.0, seed=2)
SPIKE = dict(inclusion_prob=0.2, prior_scale=2.0, noise_scale=1.0)


def spike_and_slab_brute_force(x, y, inclusion_prob, prior_scale, noise_scale):
    """Inclusion probabilities and posterior means of gamma * beta of the natural model
    (beta kept, fixed noise), from the 2^d masks: y | gamma is a multivariate normal,
    and beta of the included covariates given gamma and y is Gaussian."""
    x, y = x.double(), y.double()
    num_obs, dim = x.shape
    log_w, means = [], []
    masks = torch.tensor(list(itertools.product([0.0, 1.0], repeat=dim)), dtype=torch.float64)
    for mask in masks:
        xa = x[:, mask.bool()]
        cov = noise_scale**2 * torch.eye(num_obs, dtype=torch.float64) + prior_scale**2 * xa @ xa.T
        normal = dist.MultivariateNormal(torch.zeros(num_obs, dtype=torch.float64), cov)
        count = float(mask.sum())
        log_prior = count * math.log(inclusion_prob) + (dim - count) * math.log1p(-inclusion_prob)
        log_w.append(normal.log_prob(y) + log_prior)
        precision = xa.T @ xa / noise_scale**2 + torch.eye(xa.shape[1]) / prior_scale**2
        mean = torch.zeros(dim, dtype=torch.float64)
        mean[mask.bool()] = torch.linalg.solve(precision, xa.T @ y / noise_scale**2)
        means.append(mean)
    probs = torch.softmax(torch.stack(log_w), 0)
    return probs @ masks, probs @ torch.stack(means)


def natural_spike_and_slab(x, y, inclusion_prob, prior_scale, noise_scale):
    """Spike-and-slab regression as a user writes it: the coefficients stay in the
    model when their covariate is excluded."""
    with pyro.plate("covariates", x.shape[1]):
        gamma = pyro.sample("gamma", dist.Bernoulli(inclusion_prob))
        beta = pyro.sample("beta", dist.Normal(0.0, prior_scale))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Normal(x @ (gamma * beta), noise_scale), obs=y)


def assert_means(draws, exact, what):
    """``draws [C, T, K]`` against exact means ``[K]``: z-scores with the standard error
    ``sd / sqrt(ESS)`` of each column (a constant column counts as one draw's worth)."""
    num = draws.shape[0] * draws.shape[1]
    ess = torch.stack(
        [effective_sample_size(draws[..., k].double(), 0, 1) for k in range(draws.shape[-1])]
    )
    ess = torch.where(torch.isfinite(ess), ess, torch.ones(()).double()).clamp(1, num)
    var = draws.reshape(num, -1).double().var(0).clamp(min=1.0 / num)
    z = (draws.double().mean((0, 1)) - exact) / (var / ess).sqrt()
    assert z.abs().max() < 4.5, "{}: estimates {} exact {} z {}".format(
        what, draws.double().mean((0, 1)).tolist(), exact.tolist(), z.tolist()
    )


def test_fixed_noise_marginal_likelihood_is_gaussian():
    x, y, _ = variable_selection_data(**SMALL)
    torch.manual_seed(0)
    masks = torch.randint(0, 2, (5, x.shape[1])).double()
    tau, sigma = 0.7, 1.3
    got = selection_log_likelihood(masks, x.double(), y.double(), tau, noise_scale=sigma)
    for mask, value in zip(masks, got):
        xs = x.double() * mask
        cov = sigma**2 * torch.eye(len(y)).double() + tau**2 * xs @ xs.T
        normal = dist.MultivariateNormal(torch.zeros(len(y)).double(), cov)
        assert float(value) == pytest.approx(float(normal.log_prob(y.double())), abs=1e-6)


@pytest.mark.parametrize("noise_scale", [1.0, None])
def test_spike_and_slab_model_is_the_collapsed_variable_selection_model(noise_scale):
    x, y, _ = variable_selection_data(**SPIKE_DATA)
    kwargs = dict(SPIKE, noise_scale=noise_scale)
    post = exact_posterior(spike_and_slab_regression, x, y, **kwargs)
    exact = variable_selection_exact(x, y, num_irrelevant=0, **kwargs)
    assert torch.allclose(post.flat_marginals()[:, 1].double(), exact.marginals, atol=1e-5)
    if noise_scale is not None:
        inclusion, _ = spike_and_slab_brute_force(x, y, **kwargs)
        assert torch.allclose(exact.marginals, inclusion, atol=1e-9)
        # the target of the test data: both active covariates, rarely included nulls
        assert (inclusion[[0, 2]] > 0.999).all()
        assert ((inclusion[[1, 3, 4, 5]] > 0.02) & (inclusion[[1, 3, 4, 5]] < 0.04)).all()


@pytest.mark.parametrize("noise_scale", [1.3, None])
def test_coefficients_follow_their_conditional_posterior(noise_scale):
    x, y, _ = variable_selection_data(**SPIKE_DATA)
    x, y = x.double(), y.double()
    tau, a0, b0, num = 2.0, 2.0, 1.5, 40000
    mask = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0]).double()
    pyro.set_rng_seed(0)
    draws = spike_and_slab_coefficients(
        mask.expand(num, 6), x, y, prior_scale=tau, noise_scale=noise_scale, a0=a0, b0=b0
    )
    assert draws.coefficients.shape == (num, 6) and draws.noise_scale.shape == (num,)
    assert (draws.coefficients[:, ~mask.bool()] == 0).all()
    # the Gaussian posterior of the included coefficients, written out on their columns
    xa = x[:, mask.bool()]
    sigma2 = 1.0 if noise_scale is None else noise_scale**2
    precision = xa.T @ xa / sigma2 + torch.eye(3).double() / tau**2
    mean = torch.linalg.solve(precision, xa.T @ y / sigma2)
    if noise_scale is None:
        # sigma^2 | gamma, y ~ InvGamma(a0 + n/2, b0 + (y'y - y'X P^-1 X'y) / 2)
        a_n = a0 + len(y) / 2
        b_n = b0 + 0.5 * (y @ y - (xa.T @ y) @ mean)
        variance = draws.noise_scale**2
        assert float(variance.mean()) == pytest.approx(float(b_n / (a_n - 1)), rel=0.01)
        assert float(variance.var()) == pytest.approx(
            float(b_n**2 / ((a_n - 1) ** 2 * (a_n - 2))), rel=0.05
        )
        cov = float(b_n / (a_n - 1)) * torch.linalg.inv(precision)
    else:
        assert (draws.noise_scale == noise_scale).all()
        cov = torch.linalg.inv(precision)
    beta = draws.coefficients[:, mask.bool()]
    se = (cov.diagonal() / num).sqrt()
    assert ((beta.mean(0) - mean).abs() < 4.5 * se).all()
    assert torch.allclose(torch.cov(beta.T), cov, rtol=0.05, atol=0.05 * float(cov.max()))


def test_gwg_on_the_collapsed_form_is_exact_with_pyro_gwg_mcmc():
    x, y, _ = variable_selection_data(**SPIKE_DATA)
    pyro.set_rng_seed(0)
    # jit_compile=False: torch.jit.trace cannot trace the Cholesky factor's gradient
    # (with the default "auto" the kernel falls back to eager mode with a warning)
    mcmc = pyro_gwg.MCMC(
        GWG(spike_and_slab_regression, jit_compile=False),
        1000,
        200,
        num_chains=32,
        disable_progbar=True,
    )
    mcmc.run(x, y, **SPIKE)
    gamma = mcmc.get_samples(group_by_chain=True)["gamma"]  # [32, 1000, 6]
    assert_exact(gamma.long(), exact_posterior(spike_and_slab_regression, x, y, **SPIKE))
    # the coefficients, one draw per posterior draw of the mask
    coefficients = spike_and_slab_coefficients(gamma, x, y, prior_scale=2.0, noise_scale=1.0)
    _, exact_means = spike_and_slab_brute_force(x, y, **SPIKE)
    assert_means(coefficients.coefficients, exact_means, "posterior means of gamma * beta")


def test_gwg_on_the_collapsed_form_is_exact_with_pyro_infer_mcmc():
    x, y, _ = variable_selection_data(**SPIKE_DATA)
    pyro.set_rng_seed(1)
    mcmc = pyro.infer.MCMC(
        GWG(spike_and_slab_regression, jit_compile=False),
        2000,
        200,
        num_chains=2,
        disable_progbar=True,
    )
    mcmc.run(x, y, **SPIKE)
    gamma = mcmc.get_samples(group_by_chain=True)["gamma"]  # [2, 2000, 6]
    assert_exact(gamma.long(), exact_posterior(spike_and_slab_regression, x, y, **SPIKE))


# (a 110 s run) under -m heavy: it keeps a documented limitation true, not an exact
# posterior; the collapsed form's chains are checked against the exact posterior in CI
# by the two tests above, MixedGibbs(NUTS, GWG) by tests/test_kernels_mixed.py
@pytest.mark.slow
@pytest.mark.heavy
def test_natural_form_mixes_poorly_under_mixed_gibbs():
    # the defect that the collapsed form avoids (docs: "Spike-and-slab regression"), with
    # a wide slab: exact null inclusion probabilities 0.033-0.058. With the coefficients
    # kept, MixedGibbs(NUTS, GWG) switches a null indicator on a few times per 1000 draws
    # and the estimates are far off: some null covariate below a tenth of its exact
    # value in each of seeds 0-3 (ratios 0-0.05; others up to 10 times too high), while
    # GWG on the collapsed form with the same runner and number of draws kept every ratio
    # within 0.46-1.82 (seeds 0-7)
    x, y, _ = variable_selection_data(**SPIKE_DATA)
    wide = dict(inclusion_prob=0.5, prior_scale=5.0, noise_scale=1.0)
    exact, _ = spike_and_slab_brute_force(x, y, **wide)
    null = [1, 3, 4, 5]

    def null_ratios(kernel):
        pyro.set_rng_seed(0)
        mcmc = pyro.infer.MCMC(kernel, 1200, 300, disable_progbar=True)
        mcmc.run(x, y, **wide)
        gamma = mcmc.get_samples()["gamma"].double()
        return gamma[:, null].mean(0) / exact[null]

    natural = null_ratios(MixedGibbs(NUTS(natural_spike_and_slab), GWG()))
    collapsed = null_ratios(GWG(spike_and_slab_regression, jit_compile=False))
    assert natural.min() < 0.1, natural
    assert collapsed.min() > 0.3, collapsed
