"""NCG (DMALA), AVG and PAVG against the exact posterior of the small-model suite; step-size
adaptation; PAVG as block Gibbs; Pyro plumbing."""

import pyro
import pytest
import torch
from exactness import assert_exact, draw_codes
from pyro.infer import MCMC
from small_models import BOUNDS, SUITE

import pyro_gwg.proposals.ncg as ncg_math
from pyro_gwg import AVG, NCG, PAVG, ModelDensity, exact_posterior
from pyro_gwg.models import lattice_ising
from pyro_gwg.proposals.layout import CandidateGrid
from pyro_gwg.proposals.mh import accept_probability

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")

KERNELS = {"NCG": NCG, "AVG": AVG, "PAVG": PAVG}
# many batched chains, few steps: the step cost hardly grows with the chains
NUM_CHAINS, NUM_SAMPLES, WARMUP = 128, 300, 60


def _exact(name):
    model, args = SUITE[name]
    return exact_posterior(model, *args, bounds=BOUNDS.get(name))


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("name", sorted(SUITE))
def test_matches_exact_posterior(name, kernel):
    model, args = SUITE[name]
    pyro.set_rng_seed(0)
    sampler = KERNELS[kernel](model, jit_compile=True)
    codes = draw_codes(sampler, NUM_CHAINS, NUM_SAMPLES, WARMUP, *args)
    assert_exact(codes, _exact(name))
    stats = sampler.diagnostics()
    assert stats["step_size"].shape == (NUM_SAMPLES, NUM_CHAINS)
    assert (stats["step_size"] == stats["step_size"][0]).all()  # frozen after warmup
    if kernel == "PAVG":  # warmup fitted the preconditioner
        assert sampler.preconditioner_fit is not None


def ncg_transition_matrix(energy, states, step_size):
    """``[S, S]`` NCG transition matrix over ``states`` (which must hold every state
    NCG can propose): q(x'|x) min(1, r) off the diagonal, the rest on it; q from
    ``ncg_proposal`` and r from ``ncg_log_ratio``, the functions ``ncg_step`` uses."""
    grid = CandidateGrid(energy.layout)
    num = len(states)
    f, grad = energy.value_and_grad(states)
    step = torch.full((num,), step_size)
    log_q, base = ncg_math.ncg_proposal(states, grad, step, grid)
    state = ncg_math.GradientState(states, f, grad, step)
    matrix = torch.zeros(num, num, dtype=torch.float64)
    for b in range(num):
        target = states[b : b + 1].expand(num, -1)
        log_ratio = ncg_math.ncg_log_ratio(
            state, target, f[b].expand(num), grad[b : b + 1].expand_as(grad), grid
        )
        log_q_b = ncg_math.factorised_log_prob(log_q, base, target)
        matrix[:, b] = (log_q_b.exp() * accept_probability(log_ratio)).double()
    matrix.fill_diagonal_(0.0)
    return matrix + torch.diag(1 - matrix.sum(1))


@pytest.mark.parametrize("name", ["coupled_binary_field", "one_hot_mixture", "mixed_kinds"])
def test_ncg_transition_matrix_keeps_the_exact_posterior(name):
    """A deterministic check through the energy bridge: pi T = pi for NCG's exact
    transition matrix on every state of a small model."""
    model, args = SUITE[name]
    post = _exact(name)
    energy = ModelDensity(model, args)
    pi = post.probs.double()
    for step_size in (0.3, 3.0):
        matrix = ncg_transition_matrix(energy, post.states(), step_size)
        assert torch.allclose(pi @ matrix, pi, atol=1e-7)
        assert (matrix.diagonal() < 1).any()


def test_transition_matrix_check_fails_without_the_reverse_proposal(monkeypatch):
    model, args = SUITE["coupled_binary_field"]
    post = _exact("coupled_binary_field")
    energy = ModelDensity(model, args)
    monkeypatch.setattr(
        ncg_math,
        "ncg_log_ratio",
        lambda state, proposed, f_new, *a, **k: f_new - state.log_joint,
    )
    matrix = ncg_transition_matrix(energy, post.states(), 1.0)
    pi = post.probs.double()
    assert not torch.allclose(pi @ matrix, pi, atol=1e-4)


def _run_broken(kernel, name):
    model, args = SUITE[name]
    pyro.set_rng_seed(0)
    codes = draw_codes(kernel(model, jit_compile=True), NUM_CHAINS, NUM_SAMPLES, WARMUP, *args)
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(codes, _exact(name))


def test_exactness_check_fails_without_the_reverse_proposal(monkeypatch):
    # NCG that drops q(x|x')/q(x'|x) is not exact; the check must notice
    monkeypatch.setattr(
        ncg_math, "factorised_log_prob", lambda log_probs, *a: log_probs.new_zeros(len(log_probs))
    )
    _run_broken(NCG, "coupled_binary_field")


def test_exactness_check_fails_without_the_auxiliary_gaussian(monkeypatch):
    # AVG whose ratio leaves out N(z; A phi(x'), I) / N(z; A phi(x), I) is not exact;
    # the check must notice. (Leaving out the factor *and* building the reverse
    # proposal with the forward noise would be exact: an MH kernel for every fixed
    # noise draw.)
    root = ncg_math.auxiliary_root

    def without_gaussian(state, proposed, f_new, g_new, noise, grid, precond=None, forward=None):
        codes, log_joint, _, step_size = state[:4]
        moved, _ = root(grid.embed(proposed) - grid.embed(codes), step_size, precond)
        reverse = ncg_math.avg_proposal(
            proposed, g_new, *root(noise - moved, step_size, precond), grid
        )
        return (
            f_new
            - log_joint
            + ncg_math.factorised_log_prob(*reverse, codes)
            - ncg_math.factorised_log_prob(*forward, proposed)
        )

    monkeypatch.setattr(ncg_math, "auxiliary_log_ratio", without_gaussian)
    _run_broken(AVG, "binomial_ordinal")


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("start", [1e-3, 1e3])
def test_step_size_adapts_toward_the_target_acceptance(kernel, start):
    model, args = SUITE["binomial_ordinal"]
    pyro.set_rng_seed(0)
    sampler = KERNELS[kernel](model, step_size=start, jit_compile=True)
    draw_codes(sampler, 32, 100, 150, *args)
    stats = sampler.diagnostics()
    eps = stats["step_size"]
    assert (eps == eps[0]).all()  # frozen after warmup
    # the step size moved away from a start that is far too small or too large (PAVG's
    # fitted preconditioner carries most of the scale: where its step size ends up from
    # a start of 1000 varies from 20 to 600 with the initial states)
    moved = eps[0].median() / start
    factor = 1 if kernel == "PAVG" else 10
    assert moved > factor if start < 1 else moved < 1 / factor
    rate = float(stats["accept_prob"].mean())
    assert abs(rate - 0.574) < 0.1, rate


def test_fixed_step_size_is_kept():
    model, args = SUITE["coupled_binary_field"]
    sampler = NCG(model, step_size=0.3, adapt_step_size=False)
    draw_codes(sampler, 4, 10, 10, *args)
    assert torch.equal(sampler.diagnostics()["step_size"], torch.full((10, 4), 0.3))


def _ising_hessian(energy):
    """The Hessian of a log-quadratic log joint in the bits, from gradient differences
    (exact for a quadratic): column j is g(e_j) - g(0)."""
    dim = energy.num_coords
    codes = torch.cat([torch.zeros(1, dim, dtype=torch.long), torch.eye(dim, dtype=torch.long)])
    _, grad = energy.value_and_grad(codes)
    return (grad[1:, :, 0] - grad[:1, :, 0]).T


def test_pavg_with_the_coupling_matrix_is_block_gibbs():
    """Ising model without data, M = its Hessian in the bits (4 theta times the adjacency
    of the lattice): every PAVG proposal is accepted and the draws are exact."""
    size, coupling = 3, 0.4
    energy = ModelDensity(lattice_ising, (size, coupling))
    hessian = _ising_hessian(energy)
    adjacency = (hessian != 0).float()
    assert torch.allclose(hessian, 4 * coupling * adjacency, atol=1e-5)
    pyro.set_rng_seed(0)
    sampler = PAVG(lattice_ising, preconditioner=hessian, step_size=100.0, jit_compile=True)
    codes = draw_codes(sampler, 64, 300, 0, size, coupling)
    stats = sampler.diagnostics()
    assert torch.allclose(stats["accept_prob"], torch.ones(300, 64).double(), atol=1e-4)
    assert (stats["num_changed"] > 1).float().mean() > 0.1  # block moves
    assert_exact(codes, exact_posterior(lattice_ising, size, coupling))


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_works_inside_pyro_mcmc(kernel):
    model, args = SUITE["mixed_kinds"]
    pyro.set_rng_seed(0)
    mcmc = MCMC(KERNELS[kernel](model), num_samples=30, warmup_steps=20, disable_progbar=True)
    mcmc.run(*args)
    samples = mcmc.get_samples()
    assert samples["z"].shape == (30, 4) and samples["k"].shape == (30,)
    assert samples["b"].is_floating_point()
    diag = mcmc.diagnostics()
    assert {"step_size", "accept_prob", "num_changed", "accepted", "divergences"} <= set(diag)
    eps = diag["step_size"]["chain 0"]
    assert eps.shape == (30,) and (eps == eps[0]).all()


# NCG, AVG and PAVG share pyro.infer.MCMC's plumbing (StepSizeKernel): PAVG, which adds
# the preconditioner's fit, in CI; NCG and AVG (80 s) under -m heavy
@pytest.mark.slow
@pytest.mark.parametrize(
    "kernel",
    [k if k == "PAVG" else pytest.param(k, marks=pytest.mark.heavy) for k in sorted(KERNELS)],
)
def test_exact_inside_pyro_mcmc(kernel):
    # two sequential chains of one; binomial_ordinal mixes without metastable states, so
    # 3000 draws per chain are enough for the single-chain ESS estimates to hold
    model, args = SUITE["binomial_ordinal"]
    pyro.set_rng_seed(1)
    mcmc = MCMC(
        KERNELS[kernel](model, jit_compile=True),
        num_samples=3000,
        warmup_steps=200,
        num_chains=2,
        disable_progbar=True,
    )
    mcmc.run(*args)
    energy = mcmc.kernel.energy
    samples = mcmc.get_samples(group_by_chain=True)
    codes = torch.stack(
        [energy.codes_from_values({k: v[c] for k, v in samples.items()}) for c in range(2)]
    )
    assert_exact(codes, _exact("binomial_ordinal"))
    if kernel == "PAVG":  # the fit stays readable after MCMC's cleanup
        assert mcmc.kernel.preconditioner_fit is not None


def test_pavg_checks_the_preconditioner():
    model, args = SUITE["coupled_binary_field"]
    with pytest.raises(ValueError, match="square"):
        PAVG(model, preconditioner=torch.zeros(5))
    with pytest.raises(ValueError, match="symmetric"):
        PAVG(model, preconditioner=torch.triu(torch.ones(5, 5)))
    with pytest.raises(ValueError, match=r"must be \[5, 5\]"):
        PAVG(model, preconditioner=torch.eye(4)).setup(0, *args)
    # categorical coordinates count K relaxed values each
    model, args = SUITE["mixed_kinds"]
    kernel = PAVG(model, preconditioner=torch.eye(2 + 4 + 3 + 1))
    kernel.setup(0, *args)
    assert kernel.preconditioner_matrix.shape == (10, 10)


def test_pavg_with_short_warmup_stays_avg():
    model, args = SUITE["coupled_binary_field"]
    kernel = PAVG(model)
    with pytest.warns(UserWarning, match="at least"):
        draw_codes(kernel, 2, 2, 4, *args)
    assert kernel.preconditioner_fit is None
    assert (kernel.preconditioner_matrix == 0).all()


def test_bad_arguments_are_refused():
    model, _ = SUITE["coupled_binary_field"]
    with pytest.raises(ValueError, match="step_size"):
        NCG(model, step_size=0.0)
    with pytest.raises(ValueError, match="target_accept_prob"):
        AVG(model, target_accept_prob=1.0)
    with pytest.raises(ValueError, match="window"):
        NCG(model, window=0)


def test_kernel_pickles_after_adaptation():
    import pickle

    model, args = SUITE["coupled_binary_field"]
    kernel = PAVG(model)
    draw_codes(kernel, 4, 5, 20, *args)
    clone = pickle.loads(pickle.dumps(kernel))
    assert clone.energy is None and clone.target_accept_prob == kernel.target_accept_prob
