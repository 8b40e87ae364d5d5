"""DMALA (NCG under Zhang et al.'s name) and DULA (its proposal without MH): DULA's
transition matrix, its stationary law and the bias it is known to have; both kernels in
``pyro.infer.MCMC``, the vectorised runner and the estimators. DMALA's exactness runs
with NCG's (``tests/test_kernels_ncg.py``)."""

import pyro
import pytest
import torch
from exactness import assert_exact, draw_codes
from pyro.infer import MCMC
from small_models import SUITE

import pyro_gwg
import pyro_gwg.proposals.ncg as ncg_math
from pyro_gwg import DMALA, DULA, NCG, ModelDensity, exact_posterior
from pyro_gwg.enumeration import ExactPosterior
from pyro_gwg.proposals.layout import CandidateGrid

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")

#: models whose log density is quadratic in the relaxed values (bits, one-hot vectors):
#: there DULA's bias vanishes as the step size goes to zero
QUADRATIC = ["coupled_binary_field", "one_hot_mixture"]


def dula_transition_matrix(energy, states, step_size):
    """``[S, S]`` DULA transition matrix over ``states`` (every state of a bounded
    model): T(x, x') = q(x' | x), the NCG proposal of ``dula_step``."""
    grid = CandidateGrid(energy.layout)
    num = len(states)
    _, grad = energy.value_and_grad(states)
    log_q, base = ncg_math.ncg_proposal(states, grad, torch.full((num,), step_size), grid)
    columns = [
        ncg_math.factorised_log_prob(log_q, base, states[b : b + 1].expand(num, -1))
        for b in range(num)
    ]
    return torch.stack(columns, 1).double().exp()


def stationary_law(matrix):
    """The ``[S]`` law ``p`` with ``p T = p``: the null vector of the generator
    ``T - I`` (off-diagonal entries only, so that a matrix near the identity keeps its
    precision), normalised."""
    generator = matrix - torch.diag(matrix.diagonal())
    generator = generator - torch.diag(generator.sum(1))
    system = generator.T.clone()
    system[-1] = 1.0  # replace one (redundant) balance equation by sum(p) = 1
    rhs = torch.zeros(len(matrix), dtype=matrix.dtype)
    rhs[-1] = 1.0
    return torch.linalg.solve(system, rhs)


def total_variation(p, q):
    return 0.5 * float((p - q).abs().sum())


def _model(name):
    model, args = SUITE[name]
    post = exact_posterior(model, *args)
    return model, args, post, ModelDensity(model, args)


def _dula_law(name, step_size):
    """DULA's stationary law on the states of ``name`` and the exact posterior."""
    _, _, post, energy = _model(name)
    law = stationary_law(dula_transition_matrix(energy, post.states(), step_size))
    return law, post.probs.double(), energy


# ------------------------------------------------------------------ DULA's bias


@pytest.mark.parametrize("name", QUADRATIC)
def test_dula_draws_follow_its_own_stationary_law_not_the_posterior(name):
    """(a) the implementation is DULA: its draws match pi_alpha, the stationary law of
    the proposal's transition matrix, and (so far from the posterior at alpha = 0.5)
    disagree with the posterior."""
    model, args, post, _ = _model(name)
    law, _, energy = _dula_law(name, 0.5)
    pyro.set_rng_seed(0)
    kernel = DULA(model, step_size=0.5, jit_compile=True)
    codes = draw_codes(kernel, 128, 300, 30, *args)
    assert_exact(codes, ExactPosterior(energy, law.log().float()))
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(codes, post)
    stats = kernel.diagnostics()
    assert stats["accepted"].all() and (stats["accept_prob"] == 1).all()
    assert (stats["step_size"] == 0.5).all() and stats["num_changed"].float().mean() > 0.5


@pytest.mark.parametrize("name", QUADRATIC)
def test_dula_is_biased_and_its_bias_shrinks_with_the_step_size(name):
    """(b) at a moderate step size pi_alpha is far from the posterior; (c) the distance
    falls as alpha decreases, to nearly nothing at alpha = 0.1 on these log-quadratic
    targets. DMALA's transition matrix (NCG's) keeps the posterior exactly."""
    distances = []
    for step_size in (2.0, 1.0, 0.5, 0.25, 0.1):
        law, exact, _ = _dula_law(name, step_size)
        assert torch.allclose(law.sum(), torch.tensor(1.0, dtype=law.dtype))
        distances.append(total_variation(law, exact))
    assert distances[0] > 0.4 and distances[2] > 0.3  # alpha = 2 and 0.5
    assert all(a > b for a, b in zip(distances, distances[1:])), distances
    assert distances[-1] < 0.01, distances


def test_dula_bias_need_not_vanish_when_the_estimate_is_not_second_order():
    """Where the first-order estimates are not exact to second order (a Binomial count,
    a Categorical site used as an index), the bias levels off instead of vanishing:
    the documented caveat."""
    distances = [total_variation(*_dula_law("mixed_kinds", a)[:2]) for a in (0.25, 0.1)]
    assert min(distances) > 0.1, distances


def test_the_bias_check_fails_for_a_kernel_that_is_not_dula(monkeypatch):
    """The check of (a) can fail: a DULA whose proposal forgets the gradient (a wrong
    implementation) does not follow pi_alpha."""
    name = "coupled_binary_field"
    model, args, _, _ = _model(name)
    law, _, energy = _dula_law(name, 0.5)
    proposal = ncg_math.ncg_proposal
    monkeypatch.setattr(
        ncg_math,
        "ncg_proposal",
        lambda codes, grad, step, grid: proposal(codes, torch.zeros_like(grad), step, grid),
    )
    pyro.set_rng_seed(0)
    codes = draw_codes(DULA(model, step_size=0.5, jit_compile=True), 128, 300, 30, *args)
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(codes, ExactPosterior(energy, law.log().float()))


# ------------------------------------------------------------------ DMALA is NCG


def test_dmala_is_ncg():
    assert issubclass(DMALA, NCG) and DMALA.build is NCG.build and DMALA.exact
    assert "Zhang" in DMALA.__doc__ and "NCG" in DMALA.__doc__
    model, args = SUITE["mixed_kinds"]
    runs = []
    for make in (NCG, DMALA):
        pyro.set_rng_seed(0)
        runs.append(draw_codes(make(model, step_size=0.7), 4, 20, 10, *args))
    assert torch.equal(runs[0], runs[1])


def test_dula_declares_itself_inexact_and_refuses_step_size_adaptation():
    assert not DULA.exact and DULA().step_size == 0.1
    assert all(getattr(pyro_gwg, name).exact for name in pyro_gwg.REGISTRY if name != "DULA")
    with pytest.raises(ValueError, match="adapt_step_size=True.*fixed step_size.*DMALA"):
        DULA(adapt_step_size=True)
    with pytest.raises(ValueError, match="step_size"):
        DULA(step_size=0.0)


# ------------------------------------------------------------------ plumbing


@pytest.mark.parametrize("kernel", [DMALA, DULA])
def test_langevin_kernels_run_in_pyro_mcmc_and_the_vectorised_runner(kernel):
    model, args = SUITE["mixed_kinds"]
    pyro.set_rng_seed(0)
    mcmc = MCMC(kernel(model), num_samples=20, warmup_steps=10, disable_progbar=True)
    mcmc.run(*args)
    assert mcmc.get_samples()["z"].shape == (20, 4)
    diag = mcmc.diagnostics()
    assert {"accepted", "accept_prob", "num_changed", "step_size"} <= set(diag)
    runner = pyro_gwg.MCMC(
        kernel(model), num_samples=20, warmup_steps=10, num_chains=3, disable_progbar=True
    )
    runner.run(*args)
    assert runner.get_samples(group_by_chain=True)["k"].shape == (3, 20)


def test_dula_and_dmala_in_the_estimators():
    from pyro_gwg.contrib.estimators.ais import ais
    from pyro_gwg.contrib.train import PCD, learnable_ising
    from pyro_gwg.models import ising, lattice_couplings

    couplings = lattice_couplings(3, 0.3)
    exact = float(exact_posterior(ising, couplings).log_normalizer)
    pyro.set_rng_seed(0)
    result = ais(
        ising, DMALA(step_size=0.5), num_particles=200, num_steps=100, model_args=(couplings,)
    )
    assert abs(float(result.log_z) - exact) < 4 * float(result.log_z_se) + 0.02
    with pytest.warns(UserWarning, match="DULA does not leave the density.*DMALA"):
        ais(ising, DULA(), num_particles=8, num_steps=5, model_args=(couplings,))
    pyro.clear_param_store()
    pcd = PCD(learnable_ising, DULA(step_size=0.3), num_chains=16, mcmc_steps=2, model_args=(9,))
    data = exact_posterior(ising, couplings).sample(32)["x"]
    history = pcd.fit(data, num_iterations=3, batch_size=16)
    assert len(history) == 3 and pcd.chains.shape == (16, 9)
    pyro.clear_param_store()


def test_dula_takes_no_setting_of_the_step_size_adaptation():
    # DULA adapts nothing: target_accept_prob was accepted and ignored before
    with pytest.raises(TypeError, match="target_accept_prob"):
        DULA(target_accept_prob=0.8)
