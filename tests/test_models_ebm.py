"""Binary EBM wrapping a torch module: density, batching, samplers."""

import pyro
import pytest
import torch
from exactness import assert_exact, draw_codes

from pyro_gwg import GWG, DiscreteEnergy, LocallyBalanced, exact_posterior
from pyro_gwg.models import binary_ebm, mlp_energy


def test_density_is_the_network():
    net = mlp_energy(6, hidden=(8,), seed=0)
    post = exact_posterior(binary_ebm, net, (2, 3))
    with torch.no_grad():
        f = net(post.states().reshape(-1, 2, 3).float()).double()
    assert torch.allclose(post.log_probs.double(), f - f.logsumexp(0), atol=1e-5)


def test_model_broadcasts_over_chains_and_gives_input_gradients():
    net = mlp_energy(5, hidden=(4, 4), seed=1)
    energy = DiscreteEnergy(binary_ebm, (net, 5))
    codes = torch.randint(0, 2, (3, 5))
    energy.check_vectorized(codes)
    f, grad = energy.value_and_grad(codes)
    x = codes.float().requires_grad_()
    expected = torch.autograd.grad(net(x).sum(), x)[0]
    assert torch.allclose(f, net(codes.float()).detach().double(), atol=1e-5)
    assert torch.allclose(grad.squeeze(-1), expected, atol=1e-5)


def test_mlp_energy_is_seeded():
    a, b = mlp_energy(4, seed=3), mlp_energy(4, seed=3)
    x = torch.rand(2, 4)
    assert torch.equal(a(x), b(x)) and a(x).shape == (2,)


@pytest.mark.parametrize("make", [GWG, LocallyBalanced])
def test_samplers_sample_a_small_ebm_exactly(make):
    net = mlp_energy(6, hidden=(16,), seed=2)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(3.0)  # a peaked target
    pyro.set_rng_seed(0)
    codes = draw_codes(make(binary_ebm), 64, 1500, 100, net, 6)
    assert_exact(codes, exact_posterior(binary_ebm, net, 6))
