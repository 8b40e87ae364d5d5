"""Uncorrected Hamiltonian annealing, Hamiltonian AIS and the continuous-target bridge.

The reference is Bayesian linear regression with a normal-inverse-gamma prior, whose
log marginal likelihood is analytic; the noise variance is a constrained site, so the
log-Jacobian of the unconstrained coordinates matters. Statistical checks use four
Monte Carlo standard errors.
"""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyro_gwg import UnsupportedModelError
from pyro_gwg.contrib.continuous import ContinuousTarget
from pyro_gwg.contrib.estimators import UHA, hamiltonian_ais
from pyro_gwg.contrib.estimators.uha import (
    AnnealingParameters,
    anneal,
    beta_schedule,
    geometric_bridge,
    leapfrog,
    momentum_log_prob,
    refresh_momentum,
    uha_log_weight_increment,
)
from pyro_gwg.contrib.models import linear_regression, linear_regression_log_evidence


@pytest.fixture(scope="module")
def data():
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(30, 3, generator=gen)
    y = X @ torch.tensor([1.0, -0.5, 0.3]) + 0.5 * torch.randn(30, generator=gen)
    return X, y


@pytest.fixture(scope="module")
def fitted_q(data):
    """Mean-field q fitted by plain VI (the paper's initialisation), as a state dict."""
    pyro.set_rng_seed(0)
    uha = UHA(linear_regression, data, num_bridges=0)
    uha.fit(300, num_particles=16, lr=0.05, bridges=False)
    return {"loc": uha.loc.detach().clone(), "log_scale": uha.log_scale.detach().clone()}


def make_uha(data, fitted_q, num_bridges, **kwargs):
    uha = UHA(
        linear_regression, data, num_bridges=num_bridges, step_size=0.3, damping=0.5, **kwargs
    )
    with torch.no_grad():
        uha.loc.copy_(fitted_q["loc"])
        uha.log_scale.copy_(fitted_q["log_scale"])
    return uha


# ------------------------------------------------------------------ the target bridge
def test_model_density_is_pyro_potential_with_jacobian(data):
    from pyro.infer.mcmc.util import initialize_model

    target = ContinuousTarget.from_model(linear_regression, data)
    _, potential_fn, _, _ = initialize_model(linear_regression, data)
    z = torch.randn(5, target.dim)
    expected = torch.stack([-potential_fn({"sigma2": row[0], "w": row[1:]}) for row in z])
    assert [name for name, _ in target.sites] == ["sigma2", "w"]
    assert torch.allclose(target(z), expected, atol=1e-4)
    value, grad = target.value_and_grad(z)
    assert grad.shape == z.shape and torch.allclose(value, expected, atol=1e-4)


def test_unconstrained_density_includes_log_jacobian():
    def lognormal():
        pyro.sample("s", dist.LogNormal(0.3, 0.7))

    target = ContinuousTarget.from_model(lognormal)
    u = torch.linspace(-2, 2, 7)[:, None]
    # u = log s is N(0.3, 0.7) exactly: the density of s times ds/du = s.
    assert torch.allclose(target(u), dist.Normal(0.3, 0.7).log_prob(u[:, 0]), atol=1e-5)
    assert torch.allclose(target.constrain(u)["s"], u[:, 0].exp())


def test_models_that_vmap_cannot_run_are_evaluated_one_by_one():
    def data_dependent():
        x = pyro.sample("x", dist.Normal(0.0, 1.0))
        if x.item() > 0:  # Python control flow on a value: no vmap
            pyro.factor("bonus", x)

    with pytest.warns(UserWarning, match="vmap"):
        target = ContinuousTarget.from_model(data_dependent)
    z = torch.tensor([[-1.0], [2.0]])
    expected = dist.Normal(0.0, 1.0).log_prob(z[:, 0]) + torch.tensor([0.0, 2.0])
    assert torch.allclose(target(z), expected)


def test_log_density_must_be_a_function_of_the_latent_sites():
    def noisy():
        pyro.sample("x", dist.Normal(torch.randn(()), 1.0))

    with pytest.raises(UnsupportedModelError, match="deterministic function"):
        ContinuousTarget.from_model(noisy)


def test_discrete_site_is_named_with_alternatives():
    def mixed():
        z = pyro.sample("z", dist.Bernoulli(0.5))
        pyro.sample("x", dist.Normal(z, 1.0), obs=torch.tensor(0.3))

    with pytest.raises(UnsupportedModelError, match="'z' is discrete.*MixedGibbs"):
        UHA(mixed, num_bridges=2)


def test_plain_log_density_must_be_batched():
    with pytest.raises(ValueError, match="one value per point"):
        UHA(lambda z: -(z**2).sum(), dim=2, num_bridges=1)
    target = ContinuousTarget.from_log_density(lambda z: -(z**2).sum(), 2, batched=False)
    assert target(torch.ones(4, 2)).shape == (4,)


# ------------------------------------------------------------------------- the math
def test_schedule_is_increasing_inside_unit_interval():
    assert torch.allclose(beta_schedule(torch.zeros(4)), torch.tensor([0.25, 0.5, 0.75]))
    betas = beta_schedule(torch.randn(9))
    assert (betas.diff() > 0).all() and betas[0] > 0 and betas[-1] < 1
    assert geometric_bridge(0.0, torch.tensor(1.0), torch.tensor(5.0)) == 1.0
    assert geometric_bridge(1.0, torch.tensor(1.0), torch.tensor(5.0)) == 5.0


def quartic_grad(z):
    """Gradient of a non-Gaussian log density, and no auxiliary output."""
    return -torch.tensor([2.0, 0.5, 1.0]) * z - 0.1 * z**3, None


def test_leapfrog_is_reversible_and_volume_preserving():
    mass = torch.tensor([1.0, 2.0, 0.5])
    z, rho = torch.randn(3), torch.randn(3)
    step = 0.3
    z1, rho1, _ = leapfrog(z, rho, quartic_grad(z)[0], step, mass, quartic_grad)
    z2, rho2, _ = leapfrog(z1, -rho1, quartic_grad(z1)[0], step, mass, quartic_grad)
    assert torch.allclose(z2, z, atol=1e-5) and torch.allclose(rho2, -rho, atol=1e-5)

    def flow(state):
        a, b = state[:3], state[3:]
        a1, b1, _ = leapfrog(a, b, quartic_grad(a)[0], step, mass, quartic_grad)
        return torch.cat([a1, b1])

    jac = torch.autograd.functional.jacobian(flow, torch.cat([z, rho]))
    assert torch.allclose(torch.det(jac), torch.tensor(1.0), atol=1e-5)


def test_partial_refresh_keeps_momentum_distribution():
    torch.manual_seed(0)
    mass = torch.tensor([0.5, 4.0])
    rho = torch.sqrt(mass) * torch.randn(200_000, 2)
    new = refresh_momentum(rho, torch.randn_like(rho), 0.8, mass)
    tol = 4 * mass * math.sqrt(2 / 200_000)  # standard error of a variance estimate
    assert ((new.var(0) - mass).abs() < tol).all()
    lag = (new * rho).mean(0) / mass
    assert torch.allclose(lag, torch.tensor([0.8, 0.8]), atol=4 / math.sqrt(200_000))


def test_uha_increment_is_kinetic_energy_change():
    mass = torch.tensor([2.0, 0.5])
    rho_ref, rho_new = torch.tensor([1.0, -1.0]), torch.tensor([0.5, 2.0])
    kinetic = lambda r: 0.5 * (r**2 / mass).sum()  # noqa: E731
    expected = kinetic(rho_ref) - kinetic(rho_new)
    assert torch.allclose(uha_log_weight_increment(rho_new, rho_ref, mass), expected)
    assert torch.allclose(
        momentum_log_prob(rho_new, mass), dist.Normal(0, mass.sqrt()).log_prob(rho_new).sum()
    )


def gaussian_target(log_z):
    mean, sd = torch.tensor([1.0, -2.0]), torch.tensor([0.5, 2.0])
    return ContinuousTarget.from_log_density(
        lambda z: log_z + dist.Normal(mean, sd).log_prob(z).sum(-1), 2
    )


@pytest.mark.parametrize("corrected", [False, True], ids=["uha", "hais"])
def test_importance_weights_are_unbiased_for_any_parameters(corrected):
    # E[w] = Z holds for every q, step size, damping, mass and schedule (Thm. 2 for UHA,
    # the AIS identity for Hamiltonian AIS), so this checks the weights exactly. The
    # standard error of the mean weight is only trustworthy when the weights are not
    # heavy-tailed, hence the ESS condition (wrong weights fail it or the mean test).
    torch.manual_seed(1)
    log_z, num = 3.0, 100_000
    params = AnnealingParameters(
        loc=torch.tensor([1.2, -1.5]),  # the target is N((1, -2), diag(0.25, 4))
        scale=torch.tensor([0.4, 1.6]),
        step_size=torch.tensor(0.4),
        damping=torch.tensor(0.7),
        mass=torch.tensor([3.0, 0.3]),
        betas=torch.tensor([0.2, 0.5, 0.6, 0.9]),
    )
    with torch.no_grad():
        result = anneal(gaussian_target(log_z), params, num, corrected=corrected)
    ratio = (result.log_weights - log_z).exp()
    assert result.ess > 0.3 * num
    assert abs(float(ratio.mean()) - 1) < 4 * float(ratio.std()) / math.sqrt(num)
    assert result.elbo < log_z - 0.05  # Jensen
    assert (result.acceptance_rate is not None) == corrected


# ------------------------------------------------------------- linear regression
def test_bound_is_below_log_evidence_and_tightens_with_bridges(data, fitted_q):
    torch.manual_seed(2)
    log_z = linear_regression_log_evidence(*data)
    bounds = []
    for num_bridges in [0, 8, 32, 128]:
        with torch.no_grad():
            result = make_uha(data, fitted_q, num_bridges)(4000)
        bounds.append((float(result.elbo), result.elbo_stderr))
        assert float(result.elbo) + 4 * result.elbo_stderr < log_z
    for (low, se_low), (high, se_high) in zip(bounds, bounds[1:]):
        assert high - low > 4 * math.hypot(se_low, se_high)
    assert log_z - bounds[-1][0] < 0.05  # 128 bridges close most of the ~0.2 VI gap


def test_hamiltonian_ais_estimates_log_evidence(data, fitted_q):
    torch.manual_seed(3)
    log_z = linear_regression_log_evidence(*data)
    uha = make_uha(data, fitted_q, 32)
    result = uha.hamiltonian_ais(2000)
    assert result.acceptance_rate > 0.9
    assert abs(float(result.log_evidence) - log_z) < 4 * result.log_evidence_stderr + 0.01
    assert float(result.elbo) < log_z
    # the same through the function, from a plain density and the linear schedule
    again = hamiltonian_ais(
        uha.target,
        num_bridges=32,
        num_particles=500,
        loc=fitted_q["loc"],
        scale=fitted_q["log_scale"].exp(),
        step_size=0.3,
        damping=0.5,
    )
    assert abs(float(again.log_evidence) - log_z) < 4 * again.log_evidence_stderr + 0.01


def test_gradients_reach_every_tuned_parameter(data, fitted_q):
    torch.manual_seed(4)
    uha = make_uha(data, fitted_q, 4)
    uha(8).elbo.backward()
    for name, param in uha.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all() and (param.grad != 0).all(), name


@pytest.mark.slow
def test_tuning_tightens_the_bound(data, fitted_q):
    torch.manual_seed(5)
    log_z = linear_regression_log_evidence(*data)
    uha = make_uha(data, fitted_q, 8)
    with torch.no_grad():
        uha.step_logit.fill_(math.log(0.05))  # a poor start: step size 0.05 / 1.05

    def bound():  # the same noise before and after tuning: a paired comparison
        torch.manual_seed(6)
        with torch.no_grad():
            return uha(2000)

    before = bound()
    history = uha.fit(100, num_particles=16, lr=0.05)
    assert len(history) == 100 and all(math.isfinite(h) for h in history)
    after = bound()
    gain = after.log_weights - before.log_weights
    assert gain.mean() > 4 * gain.std() / math.sqrt(gain.numel())
    assert float(after.elbo) + 4 * after.elbo_stderr < log_z
    # posterior draws, in constrained space
    draws = after.constrained()
    assert draws["sigma2"].shape == (2000,) and (draws["sigma2"] > 0).all()
    assert draws["w"].shape == (2000, 3)
    assert after.resample(100).shape == (100, 4)


def test_invalid_settings_are_refused(data):
    with pytest.raises(ValueError, match="step_size"):
        UHA(linear_regression, data, num_bridges=2, step_size=2.0)
    with pytest.raises(ValueError, match="damping"):
        UHA(linear_regression, data, num_bridges=2, damping=1.0)
    target = ContinuousTarget.from_model(linear_regression, data)
    params = AnnealingParameters(*[torch.ones(()) for _ in range(5)], torch.ones(1))
    with pytest.raises(ValueError, match="not differentiable"):
        anneal(target, params, 2, corrected=True, create_graph=True)


def test_bound_gradient_matches_finite_differences():
    # With the noise fixed, the UHA bound is a smooth function of every parameter; its
    # reparameterised gradient (through all leapfrog steps) must match central
    # differences.
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        target = ContinuousTarget.from_log_density(
            lambda z: -0.5 * (z**2).sum(-1) - 0.1 * (z**4).sum(-1) + z[..., 0] * z[..., 1], 2
        )
        uha = UHA(target, num_bridges=3, init_scale=0.8, step_size=0.4, damping=0.6)
        with torch.no_grad():
            for param in uha.parameters():
                param.add_(0.1 * torch.randn_like(param))

        def bound():
            torch.manual_seed(7)
            return uha(16).elbo

        bound().backward()
        for name, param in uha.named_parameters():
            for i in range(param.numel()):
                flat = param.data.view(-1)
                with torch.no_grad():
                    flat[i] += 1e-5
                    up = float(bound())
                    flat[i] -= 2e-5
                    down = float(bound())
                    flat[i] += 1e-5
                numeric = (up - down) / 2e-5
                assert abs(param.grad.view(-1)[i] - numeric) < 1e-5 * (1 + abs(numeric)), name
    finally:
        torch.set_default_dtype(dtype)
