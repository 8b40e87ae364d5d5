"""Lattice Ising models."""

import itertools

import pyro
import pytest
import torch
from exactness import assert_exact, draw_codes

from pyro_gwg import GWG, exact_posterior
from pyro_gwg.models import ising_denoising, lattice_bonds, lattice_ising, noisy_image


def explicit_bond_sum(s, periodic):
    height, width = s.shape
    total = 0.0
    for i, j in itertools.product(range(height), range(width)):
        for di, dj in ((0, 1), (1, 0)):
            k, m = i + di, j + dj
            if periodic:
                k, m = k % height, m % width
            elif k >= height or m >= width:
                continue
            total += float(s[i, j] * s[k, m])
    return total


@pytest.mark.parametrize("periodic", [True, False])
def test_lattice_bonds_sum_every_bond_once(periodic):
    torch.manual_seed(0)
    s = torch.randint(0, 2, (4, 5)).float() * 2 - 1
    assert float(lattice_bonds(s, periodic).sum()) == pytest.approx(explicit_bond_sum(s, periodic))


def test_lattice_ising_density_matches_the_ising_energy():
    post = exact_posterior(lattice_ising, size=3, coupling=0.3, bias=0.2)
    states = post.states()
    spins = (2 * states - 1).float().reshape(-1, 3, 3)
    energy = torch.tensor([0.3 * explicit_bond_sum(s, True) + 0.2 * float(s.sum()) for s in spins])
    assert torch.allclose(post.log_probs, (energy - energy.logsumexp(0)).double(), atol=1e-5)


def test_gwg_samples_a_small_lattice_exactly():
    pyro.set_rng_seed(0)
    codes = draw_codes(GWG(lattice_ising), 32, 1500, 100, size=3, coupling=0.4)
    assert_exact(codes, exact_posterior(lattice_ising, size=3, coupling=0.4))


def test_gwg_samples_the_denoising_posterior_exactly():
    _, noisy = noisy_image(size=3, noise_scale=1.0, seed=1)
    pyro.set_rng_seed(0)
    codes = draw_codes(GWG(ising_denoising), 32, 1500, 100, noisy, noise_scale=1.0)
    assert_exact(codes, exact_posterior(ising_denoising, noisy, noise_scale=1.0))


def test_noisy_image_is_reproducible():
    clean, noisy = noisy_image(size=12, seed=3)
    clean2, noisy2 = noisy_image(size=12, seed=3)
    assert clean.shape == noisy.shape == (12, 12)
    assert torch.equal(noisy, noisy2) and set(clean.unique().tolist()) == {0.0, 1.0}
