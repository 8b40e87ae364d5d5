"""The reverse OU diffusion with a Monte Carlo score (McDonald & Barron 2022).

Exact references: the score of a Gaussian's OU marginal (closed form), the moments of a
Gaussian mixture, a conjugate Pyro model, and the mode probabilities of the
targets of McDonald & Barron 2022 integrated on a grid. Tolerances are four standard errors of
the estimate at
the sample size used; settings are chosen so that the method's own bias (finite K,
Euler steps, the N(0, I) start) is below that, as measured with larger runs.
"""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyro_gwg import UnsupportedModelError
from pyro_gwg.contrib.diffusion import (
    MCScoreSampler,
    gradient_weighted_score,
    importance_weights,
    monte_carlo_score,
    ou_coefficients,
    reverse_ou_step,
    time_grid,
    u_weighted_score,
)
from pyro_gwg.contrib.models import (
    FOUR_MODE_CENTRES,
    HIMMELBLAU_MODES,
    GaussianMixture,
    four_mode_tanh,
    himmelblau,
    mode_probabilities,
    nearest_mode,
)


# ------------------------------------------------------------------------ the math
def test_ou_coefficients_and_time_grid():
    decay, sigma = ou_coefficients(0.3)
    assert math.isclose(decay**2 + sigma**2, 1.0) and math.isclose(decay, math.exp(-0.3))
    grid = time_grid(2.0, 0.3)
    assert grid[0] == (2.0, 0.3) and len(grid) == 7
    assert math.isclose(sum(delta for _, delta in grid), 2.0)
    assert math.isclose(grid[-1][0], grid[-1][1])  # the last step ends at t = 0
    assert len(time_grid(1.0, 0.01)) == 100


def test_weights_are_stable_and_estimators_follow_the_equations():
    log_f = torch.tensor([[1000.0, 1000.0 + math.log(3.0)]])
    assert torch.allclose(importance_weights(log_f), torch.tensor([[0.25, 0.75]]), atol=1e-4)
    theta = torch.tensor([[0.5, -1.0]])
    u = torch.tensor([[[1.0, 2.0], [-1.0, 0.0]]])
    w = torch.tensor([[0.25, 0.75]])
    decay, sigma = ou_coefficients(0.5)
    s1 = u_weighted_score(theta, u, w, 0.5)
    assert torch.allclose(s1, -theta + decay / sigma * torch.tensor([[-0.5, 0.5]]))
    s2 = gradient_weighted_score(theta, u, w, 0.5)
    assert torch.allclose(s2, -theta + decay * torch.tensor([[-0.5, 0.5]]))
    step = reverse_ou_step(theta, s1, 0.1, torch.ones(1, 2))
    assert torch.allclose(step, theta - 0.1 * (-theta - 2 * s1) + math.sqrt(0.2))


MEAN, VAR = torch.tensor([0.5, -0.3]), torch.tensor([0.5, 2.0])


def gaussian_f(theta):
    """f of p0 = N(MEAN, diag(VAR)) against the N(0, I) reference."""
    return dist.Normal(MEAN, VAR.sqrt()).log_prob(theta).sum(-1) + 0.5 * (theta**2).sum(-1)


def gaussian_f_and_grad(theta):
    return gaussian_f(theta), -(theta - MEAN) / VAR + theta


@pytest.mark.parametrize("t", [1.0, 0.3, 0.05], ids=["s1-large-t", "s1-mid-t", "s2-small-t"])
def test_monte_carlo_score_matches_exact_score(t):
    # p_t = N(e^-t MEAN, e^-2t VAR + sigma_t^2) for the OU process started at p0.
    torch.manual_seed(0)
    theta = torch.tensor([[0.0, 0.0], [1.0, -2.0], [-1.5, 1.0]]).repeat_interleave(2000, 0)
    decay, sigma = ou_coefficients(t)
    exact = -(theta - decay * MEAN) / (decay**2 * VAR + sigma**2)
    est = monte_carlo_score(gaussian_f, gaussian_f_and_grad, theta, t, 256, switch_time=0.1)
    est, exact = est.reshape(3, 2000, 2), exact.reshape(3, 2000, 2)[:, 0]
    se = est.std(1) / math.sqrt(2000)
    assert ((est.mean(1) - exact).abs() < 4 * se + 0.01).all()


# ---------------------------------------------------------------------- sampling
@pytest.mark.slow
def test_gaussian_mixture_moments():
    torch.manual_seed(1)
    mixture = GaussianMixture.example_2d()
    sampler = MCScoreSampler(mixture.log_prob, dim=2, num_draws=200, step_size=0.02, final_time=4)
    result = sampler.sample(1000)
    x = result.samples
    n = len(x)
    assert torch.isfinite(x).all()
    mean_se = x.std(0) / math.sqrt(n)
    assert ((x.mean(0) - mixture.mean()).abs() < 4 * mean_se).all()
    centred = x - mixture.mean()
    products = centred[:, :, None] * centred[:, None, :]  # unbiased for the covariance
    cov_se = products.std(0) / math.sqrt(n)
    assert ((products.mean(0) - mixture.covariance()).abs() < 4 * cov_se).all()
    steps = len(sampler.grid)
    assert result.num_evaluations == n * 200 * steps
    assert result.num_gradients == n * 200 * sum(t <= 0.1 for t, _ in sampler.grid)


def conjugate(y):
    mu = pyro.sample("mu", dist.Normal(3.0, 2.0))
    pyro.sample("tau", dist.LogNormal(0.0, 0.5))  # not in the likelihood: posterior = prior
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y)


def test_pyro_model_with_constrained_site_and_standardised_coordinates():
    torch.manual_seed(2)
    y = torch.tensor([4.4, 3.1, 5.0, 3.9, 4.6, 4.2, 3.5, 4.8])
    post_var = 1 / (1 / 4 + len(y))
    post_mean = post_var * (3.0 / 4 + y.sum())
    sampler = MCScoreSampler(
        conjugate,
        (y,),
        num_draws=100,
        step_size=0.05,
        final_time=4,
        loc=torch.tensor([3.5, 0.0]),  # a rough guess of the posterior's location
        scale=torch.tensor([0.5, 1.0]),
    )
    result = sampler.sample(1000)
    draws = result.constrained()
    assert (draws["tau"] > 0).all()
    for values, mean, sd in [(draws["mu"], post_mean, post_var**0.5), (draws["tau"].log(), 0, 0.5)]:
        assert abs(float(values.mean()) - mean) < 4 * sd / math.sqrt(1000)
        assert abs(float(values.std()) / sd - 1) < 4 / math.sqrt(2 * 1000) + 0.05


def test_trajectory_runs_from_the_reference_to_the_draws():
    torch.manual_seed(5)
    sampler = MCScoreSampler(f=himmelblau, dim=2, num_draws=8, step_size=0.5, final_time=1.2)
    assert [round(t, 6) for t, _ in sampler.grid] == [1.2, 0.7, 0.2]
    result = sampler.sample(5, trajectory=True)
    assert result.trajectory.shape == (4, 5, 2)
    assert torch.equal(result.trajectory[-1], result.samples)
    assert result.constrained()["z"] is result.samples


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="exactly one"):
        MCScoreSampler(conjugate, f=himmelblau, dim=2)
    with pytest.raises(ValueError, match="dim"):
        MCScoreSampler(f=himmelblau)
    with pytest.raises(ValueError, match="loc and scale"):
        MCScoreSampler(f=himmelblau, dim=2, loc=torch.zeros(2))

    def discrete(y):
        z = pyro.sample("z", dist.Categorical(torch.ones(3) / 3))
        pyro.sample("y", dist.Normal(z.float(), 1.0), obs=y)

    with pytest.raises(UnsupportedModelError, match="'z' is discrete"):
        MCScoreSampler(discrete, (torch.tensor(0.5),))


# ------------------------------------------------ the targets of McDonald & Barron 2022
def assert_mode_proportions(samples, modes, exact):
    """Each mode's count within four binomial standard deviations (plus one draw)."""
    counts = torch.bincount(nearest_mode(samples, modes), minlength=len(modes)).double()
    n = len(samples)
    sd = (n * exact * (1 - exact)).sqrt()
    assert ((counts - n * exact).abs() <= 4 * sd + 1).all(), (counts / n, exact)


def test_exact_mode_probabilities_are_converged():
    coarse = mode_probabilities(himmelblau, HIMMELBLAU_MODES, -7, 7, 700)
    fine = mode_probabilities(himmelblau, HIMMELBLAU_MODES, -7, 7, 1400)
    assert torch.allclose(coarse, fine, atol=1e-4)
    assert torch.allclose(fine, torch.tensor([0.805, 0.051, 0.001, 0.143]).double(), atol=2e-3)
    tanh = mode_probabilities(four_mode_tanh, FOUR_MODE_CENTRES, -10, 10, 200_000)
    assert torch.allclose(tanh, torch.tensor([0.0, 0.332, 0.556, 0.112]).double(), atol=2e-3)


def test_four_mode_target_is_the_papers_formula():
    theta = torch.linspace(-30, 30, 10001, dtype=torch.float64)[:, None]
    x = theta - FOUR_MODE_CENTRES[:, 0].double()
    paper = 100 * (torch.tanh(x + 0.05) - torch.tanh(x - 0.05)).sum(-1)
    assert torch.allclose(four_mode_tanh(theta), paper, atol=1e-9)


# (25-90 s: 6000 draws per score) under -m heavy: the sampler's mode proportions are
# checked in CI on the Gaussian mixture and on Himmelblau's function
@pytest.mark.slow
@pytest.mark.heavy
def test_four_mode_tanh_proportions():
    # The 3 | 4 split needs small Euler steps (the bumps are steep), the -1 | {3, 4}
    # split many draws K: at K = 2000 the mode at -1 gets ~0.44 instead of 0.33.
    torch.manual_seed(3)
    exact = mode_probabilities(four_mode_tanh, FOUR_MODE_CENTRES, -10, 10, 200_000)
    sampler = MCScoreSampler(f=four_mode_tanh, dim=1, num_draws=6000, step_size=0.02, final_time=4)
    assert_mode_proportions(sampler.sample(400).samples, FOUR_MODE_CENTRES, exact)


@pytest.mark.slow
def test_himmelblau_proportions():
    torch.manual_seed(4)
    exact = mode_probabilities(himmelblau, HIMMELBLAU_MODES, -7, 7, 1400)
    sampler = MCScoreSampler(f=himmelblau, dim=2, num_draws=8000, step_size=0.05, final_time=4)
    assert_mode_proportions(sampler.sample(500).samples, HIMMELBLAU_MODES, exact)
