"""Bayesian variable selection (Rhodes & Gutmann 2022, Appendix G)."""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from exactness import assert_exact, draw_codes

from pyro_gwg import AVG, PAVG, DiscreteEnergy, exact_posterior
from pyro_gwg.models import (
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
    energy = DiscreteEnergy(variable_selection, (x, y))
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
