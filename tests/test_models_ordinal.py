"""The ordinal lattice targets of Rhodes & Gutmann (2022)."""

import itertools

import pyro
import pytest
import torch
from exactness import assert_exact, draw_codes
from test_kernels_ncg import ncg_transition_matrix

from pyro_gwg import NCG, PAVG, ModelDensity, exact_posterior
from pyro_gwg.models import (
    IntegerUniform,
    ordinal_mixture,
    ordinal_mixture_moments,
)
from pyro_gwg.models.ordinal import ordinal_component_log_probs, ordinal_grid


def direct_log_density(values, form, num_components, grid):
    """log p(s) written out from the paper's definition, for one state of values."""
    shifts = torch.linspace(0, 2.0 if form == "quadratic" else 3.0, num_components).double()

    def g(u):
        if form == "quadratic":
            return 0.75 - 2 * u - 6 * u**2
        return 2 * (-u + u**2 - u**3 - u**4)

    log_z = torch.stack([torch.logsumexp(g(grid - m), 0) for m in shifts])
    comps = torch.stack([(g(values - m) - z).sum() for m, z in zip(shifts, log_z)])
    return torch.logsumexp(comps, 0) - torch.log(torch.tensor(float(num_components)))


@pytest.mark.parametrize("form", ["quadratic", "quartic"])
def test_log_joint_is_the_normalised_mixture_density(form):
    kwargs = dict(num_dims=3, form=form, num_values=6)
    post = exact_posterior(ordinal_mixture, **kwargs)
    assert abs(float(post.log_normalizer)) < 1e-4  # f is log p(s), already normalised
    grid = ordinal_grid(6).double()
    states = post.states()
    for k in (0, 17, 100, 215):
        expected = direct_log_density(grid[states[k]], form, 25, grid)
        assert float(post.log_probs[k]) == pytest.approx(float(expected), abs=1e-4)


@pytest.mark.parametrize("form", ["quadratic", "quartic"])
def test_exact_marginals_and_covariance_match_enumeration(form):
    kwargs = dict(num_dims=3, form=form, num_values=6, num_components=2)
    post = exact_posterior(ordinal_mixture, **kwargs)
    moments = ordinal_mixture_moments(**kwargs)
    assert torch.allclose(post.flat_marginals().double(), moments.marginals, atol=1e-5)
    values = moments.values[post.states()]  # [S, D] lattice values
    probs = post.probs.double()
    mean = probs @ values
    centred = values - mean
    cov = centred.T @ (probs.unsqueeze(-1) * centred)
    assert torch.allclose(mean, moments.mean, atol=1e-5)
    assert torch.allclose(cov, moments.covariance, atol=1e-5)
    assert (moments.covariance > 0).all()  # positively correlated coordinates


def test_default_target_is_the_papers_lattice():
    energy = ModelDensity(ordinal_mixture)
    (site,) = energy.sites
    assert site.kind == "ordinal" and energy.num_coords == 20
    assert (energy.layout.lower == 0).all() and (energy.layout.upper == 49).all()
    grid = ordinal_grid()
    assert len(grid) == 50 and grid[0] == -1.5 and grid[-1] == 3.0
    for form in ("quadratic", "quartic"):
        log_p = ordinal_component_log_probs(form)
        assert log_p.shape == (25, 50)
        assert torch.allclose(log_p.exp().sum(-1), torch.ones(25, dtype=torch.float64))
        # the components peak at points that move up the lattice
        peaks = log_p.argmax(-1)
        assert (peaks[1:] >= peaks[:-1]).all() and peaks[-1] - peaks[0] >= 20


def test_gradient_is_informative_and_batched():
    energy = ModelDensity(ordinal_mixture, model_kwargs=dict(form="quartic"))
    torch.manual_seed(0)
    codes = torch.randint(0, 50, (4, 20))
    energy.check_vectorized(codes)
    f, grad = energy.value_and_grad(codes)
    # d f / d index = spacing * d log p / d s, checked against the direct density
    grid = ordinal_grid().double()
    spacing = float(grid[1] - grid[0])
    for c in range(2):
        values = (grid[0] + spacing * codes[c].double()).requires_grad_(True)
        direct = direct_log_density(values, "quartic", 25, grid)
        (g,) = torch.autograd.grad(direct, values)
        assert float(f[c]) == pytest.approx(float(direct.detach()), rel=1e-4)
        assert torch.allclose(grad[c, :, 0].double(), spacing * g, rtol=1e-3, atol=1e-3)


def test_integer_uniform():
    d = IntegerUniform(2, 5).expand([3])
    assert d.batch_shape == (3,) and d.support.lower_bound == 2 and d.support.upper_bound == 5
    x = d.sample((1000,))
    assert x.min() == 2 and x.max() == 5 and x.is_floating_point()
    lp = d.log_prob(torch.tensor([1.0, 2.0, 5.0]))
    assert lp[0] == -float("inf") and torch.allclose(lp[1:], torch.log(torch.tensor(0.25)))
    assert d.enumerate_support().shape == (4, 3)
    with pytest.raises(ValueError):
        IntegerUniform(3, 2)


@pytest.mark.parametrize("kernel", [NCG, PAVG])
def test_samplers_are_exact_on_a_small_lattice(kernel):
    # chains start at exact draws: the components are far apart, and chains started
    # anywhere else would not redistribute between them within a short test
    kwargs = dict(num_dims=2, form="quartic", num_values=8, num_components=2)
    post = exact_posterior(ordinal_mixture, **kwargs)
    pyro.set_rng_seed(0)
    sampler = kernel(ordinal_mixture, jit_compile=True)
    sampler.initial_params = {"s": post.states(torch.multinomial(post.probs, 128, True)).float()}
    codes = draw_codes(sampler, 128, 300, 60, **kwargs)
    assert_exact(codes, post)


def test_ncg_transition_matrix_keeps_the_target():
    """Every transition probability of NCG on a 2 x 8 lattice (through the energy
    bridge): the exact target is invariant, pi T = pi."""
    kwargs = dict(num_dims=2, form="quartic", num_values=8, num_components=3)
    post = exact_posterior(ordinal_mixture, **kwargs)
    energy = ModelDensity(ordinal_mixture, model_kwargs=kwargs)
    matrix = ncg_transition_matrix(energy, post.states(), step_size=2.0)
    pi = post.probs.double()
    assert torch.allclose(pi @ matrix, pi, atol=1e-7)


def test_states_cover_the_lattice():
    post = exact_posterior(ordinal_mixture, num_dims=2, num_values=4)
    assert post.num_states == 16
    assert {tuple(s) for s in post.states().tolist()} == set(itertools.product(range(4), repeat=2))
