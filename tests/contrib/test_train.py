"""PCD: the surrogate's gradient (Grathwohl et al. 2021, Eq. 12), penalties and coupling helpers on
their own; learning Ising, Potts and binary-EBM parameters with persistent chains and a
replay buffer."""

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyro_gwg import GWG, Gibbs, exact_posterior
from pyro_gwg.contrib.train import (
    PCD,
    coupling_rmse,
    group_l1_penalty,
    l1_penalty,
    learnable_ebm,
    learnable_ising,
    learnable_potts,
    pcd_objective,
    symmetric_couplings,
    symmetric_potts_couplings,
)
from pyro_gwg.models import binary_ebm, ising, lattice_couplings, mlp_energy, potts, random_potts


@pytest.fixture(autouse=True)
def _fresh_params():
    """A clean parameter store for every test."""
    pyro.clear_param_store()
    yield
    pyro.clear_param_store()


# ---------------------------------------------------------------------- pure functions


def test_pcd_objective_gradient_is_minus_equation_12():
    # f_theta(x) = theta . phi(x): the gradient is mean phi(chains) - mean phi(data)
    theta = torch.tensor([0.3, -0.2, 0.5], requires_grad=True)
    data_phi = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    chain_phi = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    pcd_objective(data_phi @ theta, chain_phi @ theta).backward()
    assert torch.allclose(theta.grad, chain_phi.mean(0) - data_phi.mean(0))


def test_penalties():
    value = torch.tensor([[1.0, -2.0], [0.0, 3.0]])
    assert float(l1_penalty(value)) == 6.0
    blocks = torch.zeros(2, 2, 2, 2)
    blocks[0, 1] = torch.tensor([[3.0, 0.0], [0.0, 4.0]])  # norm 5
    blocks[1, 0] = torch.tensor([[1.0, 1.0], [1.0, 1.0]])  # norm 2
    assert float(group_l1_penalty(blocks, group_dims=2)) == pytest.approx(7.0)
    assert float(group_l1_penalty(value, group_dims=1)) == pytest.approx(5**0.5 + 3.0)
    with pytest.raises(ValueError, match="group_dims"):
        group_l1_penalty(value, group_dims=3)


def test_coupling_helpers():
    raw = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))
    sym = symmetric_couplings(raw)
    assert torch.allclose(sym, sym.T) and bool((sym.diagonal() == 0).all())
    raw_potts = torch.randn(3, 3, 2, 2, generator=torch.Generator().manual_seed(1))
    potts_couplings = symmetric_potts_couplings(raw_potts)
    assert torch.allclose(potts_couplings, potts_couplings.permute(1, 0, 3, 2))
    assert bool((potts_couplings[range(3), range(3)] == 0).all())
    assert float(coupling_rmse(torch.ones(2, 2), torch.zeros(2, 2))) == 1.0
    with pytest.raises(ValueError, match="shapes differ"):
        coupling_rmse(torch.ones(2, 2), torch.zeros(3))


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
    assert len(history) == 200 and set(history[0]) == {"loss", "penalty"}
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
