"""Binary and categorical EBMs wrapping a torch module: density, batching, samplers."""

import pyro
import pytest
import torch
from exactness import assert_exact, draw_codes

from pyro_gwg import GWG, LocallyBalanced, ModelDensity, exact_posterior
from pyro_gwg.models import binary_ebm, mlp_energy
from pyro_gwg.models.ebm import categorical_ebm


def test_density_is_the_network():
    net = mlp_energy(6, hidden=(8,), seed=0)
    post = exact_posterior(binary_ebm, net, (2, 3))
    with torch.no_grad():
        f = net(post.states().reshape(-1, 2, 3).float()).double()
    assert torch.allclose(post.log_probs.double(), f - f.logsumexp(0), atol=1e-5)


def test_model_broadcasts_over_chains_and_gives_input_gradients():
    net = mlp_energy(5, hidden=(4, 4), seed=1)
    energy = ModelDensity(binary_ebm, (net, 5))
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


def test_categorical_density_is_the_network_of_the_one_hot_values():
    net = mlp_energy(12, hidden=(8,), seed=0)
    post = exact_posterior(categorical_ebm, net, (2, 2), 3)
    one_hot = torch.nn.functional.one_hot(post.states(), 3).reshape(-1, 2, 2, 3).float()
    with torch.no_grad():
        f = net(one_hot).double()
    assert post.states().shape == (81, 4)
    assert torch.allclose(post.log_probs.double(), f - f.logsumexp(0), atol=1e-5)


def test_categorical_model_broadcasts_and_gives_one_hot_gradients():
    net = mlp_energy(8, hidden=(4,), seed=1)
    energy = ModelDensity(categorical_ebm, (net, 2, 4))
    codes = torch.randint(0, 4, (3, 2))
    energy.check_vectorized(codes)
    f, grad = energy.value_and_grad(codes)
    x = torch.nn.functional.one_hot(codes, 4).float().requires_grad_()
    expected = torch.autograd.grad(net(x).sum(), x)[0]
    assert torch.allclose(f, net(x).detach().double(), atol=1e-5)
    # up to a constant per coordinate (the bridge adds the masked uniform base's
    # normalised logits, -log K for every category), which no proposal sees: they use
    # differences between the categories of a coordinate
    centred = grad - grad.mean(-1, keepdim=True)
    assert torch.allclose(centred, expected - expected.mean(-1, keepdim=True), atol=1e-5)
    assert energy.values_from_codes(codes)["x"].shape == (3, 2, 4)


def test_categorical_ebm_checks_the_number_of_categories():
    with pytest.raises(ValueError, match="num_categories must be an integer >= 2"):
        categorical_ebm(mlp_energy(3), 3, 1)
    with pytest.raises(TypeError, match="num_categories must be an integer"):
        categorical_ebm(mlp_energy(6), 3, 2.0)


def test_gwg_samples_a_small_categorical_ebm_exactly():
    net = mlp_energy(9, hidden=(16,), seed=2)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(3.0)  # a peaked target
    net.requires_grad_(False)  # traceable: the transition is compiled
    pyro.set_rng_seed(0)
    codes = draw_codes(GWG(categorical_ebm), 64, 1500, 100, net, 3, 3)
    assert_exact(codes, exact_posterior(categorical_ebm, net, 3, 3))
