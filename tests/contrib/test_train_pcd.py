"""PCD: learning Ising, Potts, binary- and categorical-EBM parameters with persistent
chains and a replay buffer; the deep-EBM options (moving average, warm-up, data-mean
initialisation, energy regularisation) and a PAVG preconditioner that follows the
couplings being learned, wired into PCD: model-specific (a function of the parameters)
or model-agnostic (fitted to the persistent chains)."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from exactness import accept_probs, assert_exact, draw_codes

from pyro_gwg import GWG, PAVG, Gibbs, ModelDensity, exact_posterior
from pyro_gwg.adaptation import fit_records
from pyro_gwg.contrib.estimators.ais import FactorisedBase
from pyro_gwg.contrib.train import (
    PCD,
    coupling_rmse,
    ema_update,
    energy_regulariser,
    ising_preconditioner,
    learnable_categorical_ebm,
    learnable_ebm,
    learnable_ising,
    learnable_potts,
    pcd_objective,
    symmetric_couplings,
    symmetric_potts_couplings,
)
from pyro_gwg.models import binary_ebm, ising, lattice_couplings, mlp_energy, potts, random_potts
from pyro_gwg.models.ebm import categorical_ebm
from pyro_gwg.proposals.layout import CandidateGrid
from pyro_gwg.proposals.ncg import preconditioner


@pytest.fixture(autouse=True)
def _fresh_params():
    """A clean parameter store for every test."""
    pyro.clear_param_store()
    yield
    pyro.clear_param_store()


# ---------------------------------------------------------------------- learning


def _exact_data(model, *args, num=2000):
    return exact_posterior(model, *args).sample(num)


@pytest.mark.slow
def test_pcd_recovers_ising_couplings():
    pyro.set_rng_seed(0)
    true = lattice_couplings(3, 0.25)
    data = _exact_data(ising, true)
    pcd = PCD(
        learnable_ising,
        GWG(),
        num_chains=200,
        mcmc_steps=10,
        lr=0.02,
        penalty={"couplings": 1e-4},
        model_args=(9,),
    )
    start = float(coupling_rmse(symmetric_couplings(pyro.param("couplings")), true))
    history = pcd.fit(data, num_iterations=200, batch_size=200)
    learned = symmetric_couplings(pyro.param("couplings")).detach()
    rmse = float(coupling_rmse(learned, true))
    assert rmse < 0.45 * start, "RMSE {:.3f} from {:.3f}".format(rmse, start)
    assert len(history) == 200 and set(history[0]) == {"loss", "penalty", "energy_reg", "lr"}
    assert pcd.chains.shape == (200, 9) and pcd.evaluations == 200 * 11 * 200
    # the lattice is found: bonds near 0.25, the other pairs near 0 (2000 data points)
    bonds = true != 0
    assert 0.15 < float(learned[bonds].mean()) < 0.35
    assert float(learned[~bonds].abs().mean()) < 0.07


@pytest.mark.slow
def test_pcd_potts_with_group_l1_and_gibbs():
    # Potts couplings are identified only up to shifts absorbed by the fields, so the
    # check is on the learned distribution: total variation to the truth, by enumeration
    pyro.set_rng_seed(1)
    true = random_potts(4, 3, coupling_scale=1.0, bias_scale=0.5, seed=2)
    truth = exact_posterior(potts, *true)
    data = truth.sample(2000)
    pcd = PCD(
        learnable_potts,
        Gibbs(),
        num_chains=200,
        mcmc_steps=8,
        lr=0.01,
        penalty={"couplings": 1e-3},
        penalty_kind="group_l1",
        init="data",
        model_args=(4, 3),
    )

    def tv_to_truth():
        couplings = symmetric_potts_couplings(pyro.param("couplings")).detach()
        learned = exact_posterior(potts, couplings, pyro.param("bias").detach())
        return float(0.5 * (learned.probs - truth.probs).abs().sum())

    start = tv_to_truth()
    pcd.fit(data, num_iterations=150, batch_size=200)
    assert start > 0.9 and tv_to_truth() < 0.12


def test_pcd_binary_ebm_with_replay_buffer():
    pyro.set_rng_seed(2)
    net = mlp_energy(6, hidden=(8,), seed=0)
    data = {"x": torch.cat([torch.ones(100, 6), torch.zeros(20, 6)])}
    pcd = PCD(
        learnable_ebm,
        GWG(),
        num_chains=32,
        mcmc_steps=5,
        lr=0.02,
        buffer_size=128,
        reinit_prob=0.05,
        model_args=(net, 6),
    )
    assert all(name.startswith("energy_net$$$") for name in pcd.param_names)
    states = exact_posterior(binary_ebm, net, 6).states().float()  # all 64 states

    def log_likelihood():  # exact, by summing over the states
        with torch.no_grad():
            return float(net(data["x"]).mean() - torch.logsumexp(net(states), 0))

    start = log_likelihood()
    pcd.fit(data, num_iterations=80, batch_size=32)
    assert pcd.chains.shape == (128, 6)
    # from about -6 log 2 towards the data's entropy bound (-0.45)
    assert start < -4.0 and log_likelihood() > -2.5


def test_pcd_categorical_ebm_learns_the_data_marginals():
    # 3 variables of 3 categories (27 states): the learned model's marginals, computed
    # exactly, approach those of the data's distribution
    pyro.set_rng_seed(3)
    true_net = mlp_energy(9, hidden=(16,), seed=5)
    with torch.no_grad():
        for p in true_net.parameters():
            p.mul_(3.0)
    truth = exact_posterior(categorical_ebm, true_net, 3, 3)
    codes = truth.sample_codes(2000)
    net = mlp_energy(9, hidden=(16,), seed=0)
    pcd = PCD(
        learnable_categorical_ebm,
        GWG(),
        num_chains=64,
        mcmc_steps=5,
        lr=0.02,
        buffer_size=256,
        init="data_mean",
        model_args=(net, 3, 3),
    )
    assert all(name.startswith("energy_net$$$") for name in pcd.param_names)

    def learned():
        with torch.no_grad():
            return exact_posterior(categorical_ebm, net, 3, 3)

    def log_likelihood():
        post = learned()
        return float(post.log_probs[post.state_index(codes)].mean())

    start_gap = float((learned().flat_marginals() - truth.flat_marginals()).abs().max())
    start = log_likelihood()
    history = pcd.fit(truth.energy.values_from_codes(codes), num_iterations=100, batch_size=64)
    gap = float((learned().flat_marginals() - truth.flat_marginals()).abs().max())
    assert start_gap > 0.2 and gap < 0.08, (start_gap, gap)
    assert log_likelihood() > start + 0.2
    assert len({round(h["loss"], 6) for h in history}) > 50  # the loss moves
    assert pcd.chains.shape == (256, 3) and int(pcd.chains.min()) >= 0
    assert int(pcd.chains.max()) <= 2


# ---------------------------------------------------------------------- deep-EBM options


def _ising_pcd(**kwargs) -> PCD:
    options = dict(num_chains=8, mcmc_steps=1, lr=0.1, model_args=(4,))
    options.update(kwargs)
    return PCD(learnable_ising, GWG(), **options)


def _params() -> dict:
    return {name: pyro.param(name).detach().clone() for name in ("couplings", "bias")}


def test_ema_follows_the_recursion_and_swaps_into_the_store():
    pyro.set_rng_seed(0)
    pyro.param("couplings", torch.randn(4, 4))
    pcd = _ising_pcd(ema=0.8, optimizer=torch.optim.SGD)
    expected = _params()  # the average starts at the initial parameters
    assert all(torch.equal(pcd.ema_params()[n], expected[n]) for n in expected)

    def record(iteration, pcd):
        for name, value in _params().items():
            expected[name] = ema_update(expected[name], value, 0.8)

    pcd.fit(torch.randint(0, 2, (20, 4)), num_iterations=6, batch_size=8, callback=record)
    trained = _params()
    averages = pcd.ema_params()
    for name in expected:
        torch.testing.assert_close(averages[name], expected[name])
        assert not torch.allclose(averages[name], trained[name])
    with pcd.use_ema():
        assert all(torch.equal(pyro.param(n).detach(), averages[n]) for n in averages)
    assert all(torch.equal(pyro.param(n).detach(), trained[n]) for n in trained)


def test_use_ema_swaps_the_weights_of_a_module():
    pyro.set_rng_seed(1)
    net = mlp_energy(5, hidden=(4,), seed=0)
    pcd = PCD(
        learnable_ebm, GWG(), num_chains=8, mcmc_steps=1, lr=0.1, ema=0.5, model_args=(net, 5)
    )
    pcd.fit(torch.randint(0, 2, (20, 5)), num_iterations=3, batch_size=8)
    trained = {n: p.detach().clone() for n, p in net.named_parameters()}
    averages = pcd.ema_params()
    with pcd.use_ema():
        for name, value in net.named_parameters():
            assert torch.equal(value.detach(), averages["energy_net$$$" + name])
        # (the output bias has no gradient: f's constant cancels in the surrogate)
        assert not torch.equal(net[1].weight.detach(), trained["1.weight"])
    assert all(torch.equal(p.detach(), trained[n]) for n, p in net.named_parameters())


@pytest.mark.parametrize("optimizer", [torch.optim.SGD, torch.optim.Adam, torch.optim.RMSprop])
def test_learning_rate_warms_up_linearly_with_any_optimizer(optimizer):
    pyro.set_rng_seed(2)
    pcd = _ising_pcd(optimizer=optimizer, lr=0.2, warmup_iterations=4)
    history = pcd.fit(torch.randint(0, 2, (20, 4)), num_iterations=6, batch_size=8)
    lrs = [h["lr"] for h in history]
    assert lrs == pytest.approx([0.05, 0.1, 0.15, 0.2, 0.2, 0.2])
    assert pcd.iteration == 6
    assert _ising_pcd(lr=0.2).fit(torch.ones(3, 4), 2, batch_size=2)[0]["lr"] == 0.2


def test_energy_reg_adds_the_regulariser_to_the_update():
    # no chain moves and plain SGD with lr=1: the update is minus the gradient of
    # surrogate + energy_reg * (mean f(data)^2 + mean f(chains)^2)
    pyro.set_rng_seed(3)
    pyro.param("couplings", torch.randn(4, 4))
    pyro.param("bias", torch.randn(4))
    pcd = _ising_pcd(mcmc_steps=0, optimizer=torch.optim.SGD, lr=1.0, energy_reg=0.3)
    chains, batch = torch.randint(0, 2, (8, 4)), torch.randint(0, 2, (6, 4))
    pcd.chains = chains.clone()
    params = [pyro.param(n).unconstrained() for n in pcd.param_names]
    data_f = pcd.energy.log_joint(batch, differentiable=True)
    chain_f = pcd.energy.log_joint(chains, differentiable=True)
    regulariser = energy_regulariser(data_f, chain_f)
    grads = torch.autograd.grad(pcd_objective(data_f, chain_f) + 0.3 * regulariser, params)
    expected = [p.detach() - g for p, g in zip(params, grads)]
    record = pcd.step(batch)
    for param, value in zip(params, expected):
        torch.testing.assert_close(param.detach(), value)
    assert record["energy_reg"] == pytest.approx(0.3 * float(regulariser.detach()))
    surrogate = float(pcd_objective(data_f, chain_f).detach())
    assert record["loss"] == pytest.approx(surrogate + record["energy_reg"])


def test_data_mean_init_draws_chains_and_resets_from_the_data_marginals():
    pyro.set_rng_seed(4)
    probs = torch.tensor([0.9, 0.1, 0.5, 0.7])
    data = torch.bernoulli(probs.expand(400, 4))
    pcd = _ising_pcd(mcmc_steps=0, num_chains=200, buffer_size=2000, init="data_mean")
    assert pcd.init_distribution is None
    pcd.fit(data, num_iterations=1, batch_size=10)
    fitted = FactorisedBase.fit(pcd.energy.layout, pcd.data_codes(data))  # on all the data
    assert torch.equal(pcd.init_distribution.log_probs, fitted.log_probs)
    # buffer of 2000 independent draws: each marginal within 4 standard errors
    means, target = pcd.chains.float().mean(0), fitted.log_probs[:, 1].exp()
    assert bool(((means - target).abs() < 4 * (target * (1 - target) / 2000).sqrt()).all())
    # resets draw from it too: every drawn chain is reset, none moves
    pcd = _ising_pcd(mcmc_steps=0, num_chains=2000, init="data_mean", reinit_prob=1.0)
    pcd.chains = torch.zeros(2000, 4, dtype=torch.long)
    pcd.step(data[:50])  # fitted on the first batch given to step
    fitted = FactorisedBase.fit(pcd.energy.layout, pcd.data_codes(data[:50]))
    assert torch.equal(pcd.init_distribution.log_probs, fitted.log_probs)
    means, target = pcd.chains.float().mean(0), fitted.log_probs[:, 1].exp()
    assert bool(((means - target).abs() < 4 * (target * (1 - target) / 2000).sqrt()).all())
    # or any FactorisedBase of the model's coordinates
    pcd = _ising_pcd(mcmc_steps=0, num_chains=16, init=fitted)
    assert pcd.init_distribution is fitted
    pcd.step(data[:5])
    assert pcd.chains.shape == (16, 4)


# ---------------------------------------------------------------------- PAVG that tracks J


def _tracked_pavg_pcd(kernel, refresh_every=1, **kwargs) -> PCD:
    def current_hessian():
        return ising_preconditioner(symmetric_couplings(pyro.param("couplings")))

    options = dict(num_chains=32, mcmc_steps=2, lr=0.05, model_args=(9,))
    options.update(kwargs)
    return PCD(
        learnable_ising,
        kernel,
        preconditioner=current_hessian,
        refresh_every=refresh_every,
        **options,
    )


def test_pavg_preconditioner_follows_the_couplings():
    pyro.set_rng_seed(5)
    pcd = _tracked_pavg_pcd(PAVG(step_size=1.0), refresh_every=2)
    assert torch.equal(pcd.preconditioner_matrix, torch.zeros(9, 9))  # J = 0 at the start
    couplings = pyro.get_param_store().get_param("couplings").unconstrained()
    with torch.no_grad():
        couplings.copy_(lattice_couplings(3, 0.3))  # the couplings change
    batch = torch.randint(0, 2, (16, 9))
    expected = ising_preconditioner(symmetric_couplings(pyro.param("couplings"))).detach()
    pcd.step(batch)  # update 0 refreshes before its chains move
    assert torch.equal(pcd.preconditioner_matrix, expected)
    # and the chains' PAVG state is built from it
    state = pcd._preconditioned_pavg(pcd.energy).init(batch)
    reference = preconditioner(expected, 16)
    torch.testing.assert_close(state.eigvals, reference.eigvals)
    pcd.step(batch)  # update 1: no refresh (every 2), though update 0 changed J
    assert torch.equal(pcd.preconditioner_matrix, expected)
    moved = ising_preconditioner(symmetric_couplings(pyro.param("couplings"))).detach()
    assert not torch.allclose(moved, expected)
    pcd.step(batch)  # update 2 refreshes
    assert torch.equal(pcd.preconditioner_matrix, moved)


@pytest.mark.parametrize("agnostic", [False, True], ids=["model-specific", "chains"])
def test_pcd_leaves_the_kernel_as_the_user_built_it(agnostic):
    # the matrix in force is PCD's own state, passed to the chains, not set on the kernel
    pyro.set_rng_seed(4)
    kernel = PAVG(step_size=1.0)
    before = dict(vars(kernel))
    if agnostic:
        pcd = _chains_pavg_pcd(kernel)
    else:
        pcd = _tracked_pavg_pcd(kernel)
    pcd.fit(torch.randint(0, 2, (32, 9)).float(), num_iterations=3, batch_size=8)
    pcd.refresh_preconditioner()
    assert pcd.preconditioner_matrix.abs().sum() > 0
    assert vars(kernel).keys() == before.keys()
    assert all(vars(kernel)[name] is value for name, value in before.items())
    assert kernel.preconditioner is None


def _intermediate_tracked_pcd() -> PCD:
    """PAVG chains in PCD on a 3 x 3 lattice Ising model, stopped after 15 updates
    (couplings about half learned), the preconditioner refreshed at those parameters."""
    pyro.set_rng_seed(6)
    data = exact_posterior(ising, lattice_couplings(3, 0.4)).sample(500)
    kernel = PAVG(learnable_ising, step_size=1.0, adapt_step_size=False, jit_compile=False)
    pcd = _tracked_pavg_pcd(kernel)
    pcd.fit(data, num_iterations=15, batch_size=32)
    assert float(symmetric_couplings(pyro.param("couplings")).detach().abs().max()) > 0.2
    pcd.refresh_preconditioner()
    return pcd


def _learned_model_pavg(matrix: torch.Tensor) -> PAVG:
    """PAVG on the learned model with the preconditioner ``matrix``."""
    return PAVG(
        learnable_ising,
        preconditioner=matrix,
        step_size=1.0,
        adapt_step_size=False,
        jit_compile=False,
    )


def test_tracked_pavg_is_block_gibbs_at_the_current_couplings():
    pcd = _intermediate_tracked_pcd()
    # the refreshed matrix is the Hessian of the current model: every proposal accepted
    kernel = _learned_model_pavg(pcd.preconditioner_matrix)
    assert torch.allclose(accept_probs(kernel, 9), torch.ones(()).double(), atol=1e-5)
    # the stale matrix of the initial couplings (zero: AVG) is not
    kernel = _learned_model_pavg(torch.zeros(9, 9))
    assert float(accept_probs(kernel, 9).mean()) < 0.9


def test_tracked_pavg_leaves_the_current_model_invariant():
    pcd = _intermediate_tracked_pcd()
    current = exact_posterior(
        ising,
        symmetric_couplings(pyro.param("couplings")).detach(),
        pyro.param("bias").detach(),
    )
    codes = draw_codes(_learned_model_pavg(pcd.preconditioner_matrix), 64, 400, 20, 9)
    assert_exact(codes, current)


# ---------------------------------------------------------------------- PAVG fitted to the chains


def _chains_pavg_pcd(kernel, **kwargs) -> PCD:
    options = dict(num_chains=32, mcmc_steps=2, lr=0.05, model_args=(9,))
    options.update(kwargs)
    return PCD(learnable_ising, kernel, preconditioner="chains", **options)


def test_chains_preconditioner_is_refitted_from_the_persistent_chains():
    pyro.set_rng_seed(7)
    data = exact_posterior(ising, lattice_couplings(3, 0.3)).sample(200)
    kernel = PAVG(step_size=0.5, adapt_step_size=False, jit_compile=False)
    pcd = _chains_pavg_pcd(kernel, preconditioner_window=2)
    couplings = pyro.get_param_store().get_param("couplings").unconstrained()
    with torch.no_grad():  # away from J = 0, where the log density is flat and M = 0 fits
        couplings.copy_(lattice_couplings(3, 0.3))
    codes = pcd.data_codes(data)
    assert torch.equal(pcd.preconditioner_matrix, torch.zeros(9, 9))  # AVG in update 0
    pcd.step(codes[:32])
    assert pcd.preconditioner_fit is None and torch.equal(
        pcd.preconditioner_matrix, torch.zeros(9, 9)
    )
    # update 0 recorded its chains: the states before and after each of the 2 steps
    (first,) = pcd._records
    states = first.tensors()[0]
    grid = CandidateGrid(pcd.energy.layout, kernel.window)
    assert states.shape == (3, 32, 9) and torch.equal(states[-1], grid.embed(pcd.chains))
    pcd.step(codes[32:64])  # refits from update 0's chains before moving them
    fitted = pcd.preconditioner_matrix
    assert torch.equal(fitted, fit_records([first]).matrix) and fitted.abs().sum() > 0
    assert fitted is pcd.preconditioner_fit.matrix
    # and the chains' PAVG state is built from it
    state = pcd._preconditioned_pavg(pcd.energy).init(codes[:32])
    torch.testing.assert_close(state.eigvals, preconditioner(fitted, 32).eigvals)
    window = list(pcd._records)
    pcd.step(codes[64:96])  # refits from the window: updates 0 and 1
    assert len(window) == 2 and torch.equal(pcd.preconditioner_matrix, fit_records(window).matrix)
    assert not torch.allclose(pcd.preconditioner_matrix, fitted)
    assert len(pcd._records) == 2 and pcd._records[0] is window[1]  # the window slides


def test_chains_preconditioner_refits_every_refresh_every_updates():
    pyro.set_rng_seed(8)
    kernel = PAVG(step_size=0.5, adapt_step_size=False, jit_compile=False)
    pcd = _chains_pavg_pcd(kernel, refresh_every=2, preconditioner_window=3)
    couplings = pyro.get_param_store().get_param("couplings").unconstrained()
    with torch.no_grad():
        couplings.copy_(lattice_couplings(3, 0.3))
    batch = torch.randint(0, 2, (16, 9))
    pcd.step(batch)
    pcd.step(batch)  # update 1: no refit
    assert torch.equal(pcd.preconditioner_matrix, torch.zeros(9, 9))
    pcd.step(batch)  # update 2: refit from updates 0 and 1
    assert pcd.preconditioner_matrix.abs().sum() > 0


def test_chains_pavg_leaves_the_current_model_invariant():
    # the fitted matrix is fixed within an update: the chains' PAVG is exact there (on a
    # model that PAVG mixes on; 15 updates at 0.05 on theta = 0.4 learn an all-to-all
    # ferromagnet with two modes that only block Gibbs crosses)
    pyro.set_rng_seed(6)
    data = exact_posterior(ising, lattice_couplings(3, 0.25)).sample(500)
    kernel = PAVG(learnable_ising, step_size=1.0, adapt_step_size=False, jit_compile=False)
    pcd = _chains_pavg_pcd(kernel, lr=0.02)
    pcd.fit(data, num_iterations=15, batch_size=32)
    pcd.refresh_preconditioner()
    assert pcd.preconditioner_matrix.abs().sum() > 0
    current = exact_posterior(
        ising,
        symmetric_couplings(pyro.param("couplings")).detach(),
        pyro.param("bias").detach(),
    )
    codes = draw_codes(_learned_model_pavg(pcd.preconditioner_matrix), 64, 400, 20, 9)
    assert_exact(codes, current)


@pytest.mark.slow
def test_pcd_with_chains_preconditioner_learns_ising_couplings():
    pyro.set_rng_seed(0)
    true = lattice_couplings(3, 0.25)
    data = _exact_data(ising, true)
    kernel = PAVG(step_size=0.2, adapt_step_size=False, jit_compile=False)
    pcd = _chains_pavg_pcd(
        kernel, num_chains=64, mcmc_steps=3, lr=0.02, penalty={"couplings": 1e-4}
    )
    start = float(coupling_rmse(symmetric_couplings(pyro.param("couplings")), true))
    pcd.fit(data, num_iterations=100, batch_size=64)
    learned = symmetric_couplings(pyro.param("couplings")).detach()
    rmse = float(coupling_rmse(learned, true))
    assert rmse < 0.7 * start, "RMSE {:.3f} from {:.3f}".format(rmse, start)
    bonds = true != 0
    assert float(learned[bonds].mean()) > 0.1 > float(learned[~bonds].abs().mean())
    assert pcd.preconditioner_fit is not None


# ---------------------------------------------------------------------- errors


def test_pcd_errors():
    def no_params():
        pyro.sample("x", dist.Bernoulli(0.5).expand([3]).to_event(1))

    with pytest.raises(ValueError, match="no pyro.param"):
        PCD(no_params, GWG())
    with pytest.raises(ValueError, match="does not use"):
        PCD(learnable_ising, GWG(), penalty={"J": 0.1}, model_args=(3,))
    with pytest.raises(ValueError, match="penalty_kind"):
        PCD(learnable_ising, GWG(), penalty_kind="l2", model_args=(3,))
    with pytest.raises(ValueError, match="buffer_size"):
        PCD(learnable_ising, GWG(), num_chains=10, buffer_size=5, model_args=(3,))
    with pytest.raises(TypeError, match="discrete kernel"):
        PCD(learnable_ising, object(), model_args=(3,))
    pcd = PCD(learnable_ising, GWG(), model_args=(3,))
    with pytest.raises(TypeError, match="dict"):
        pcd.data_codes([[0, 1, 1]])


def test_pcd_errors_of_the_deep_ebm_options():
    def make(kernel=None, **kwargs):
        return PCD(learnable_ising, kernel or GWG(), model_args=(3,), **kwargs)

    for bad in (1.0, -0.1, "0.9"):
        with pytest.raises(ValueError, match="ema must be a number in"):
            make(ema=bad)
    with pytest.raises(ValueError, match="warmup_iterations must be a non-negative"):
        make(warmup_iterations=-1)
    with pytest.raises(TypeError, match="warmup_iterations must be an integer"):
        make(warmup_iterations=2.5)
    with pytest.raises(ValueError, match="energy_reg must be a number in"):
        make(energy_reg=-1.0)
    with pytest.raises(ValueError, match="init must be one of"):
        make(init="mean")
    with pytest.raises(ValueError, match="init is a FactorisedBase over"):
        make(init=FactorisedBase.uniform(ModelDensity(ising, (torch.zeros(4, 4),)).layout))
    with pytest.raises(RuntimeError, match="init='data_mean' only"):
        make().fit_init_distribution(torch.ones(2, 3))
    with pytest.raises(RuntimeError, match="build PCD\\(ema=decay\\)"):
        make().ema_params()
    hessian = lambda: ising_preconditioner(symmetric_couplings(pyro.param("couplings")))  # noqa: E731
    with pytest.raises(TypeError, match="preconditioner is the matrix of a PAVG kernel"):
        make(GWG(), preconditioner=hessian)
    with pytest.raises(TypeError, match="preconditioner must be a function"):
        make(PAVG(), preconditioner=torch.zeros(3, 3))
    with pytest.raises(ValueError, match=r"must be \[3, 3\]"):
        make(PAVG(), preconditioner=lambda: torch.zeros(4, 4))
    with pytest.raises(ValueError, match="not symmetric"):
        make(PAVG(), preconditioner=lambda: torch.triu(torch.ones(3, 3)))
    with pytest.raises(ValueError, match="refresh_every must be a positive"):
        make(PAVG(), preconditioner=hessian, refresh_every=0)
    with pytest.raises(ValueError, match="refresh_every is the period of preconditioner"):
        make(refresh_every=5)
    with pytest.raises(RuntimeError, match="no preconditioner to refresh"):
        make().refresh_preconditioner()
    with pytest.raises(TypeError, match="or 'chains' to fit it to the chains, got 'chain'"):
        make(PAVG(), preconditioner="chain")
    with pytest.raises(TypeError, match="preconditioner is the matrix of a PAVG kernel"):
        make(GWG(), preconditioner="chains")
    with pytest.raises(ValueError, match="preconditioner_window is the window of"):
        make(PAVG(), preconditioner=hessian, preconditioner_window=5)
    with pytest.raises(ValueError, match="preconditioner_window must be a positive"):
        make(PAVG(), preconditioner="chains", preconditioner_window=0)
