r"""Lattice Ising models written as ordinary Pyro models.

Spins are Bernoulli sites :math:`x_{ij} \in \{0, 1\}` on an ``H x W`` grid, read as
:math:`s_{ij} = 2 x_{ij} - 1 \in \{-1, +1\}`. The Ising log density is

.. math:: f(x) = \theta \sum_{\langle ij, kl \rangle} s_{ij} s_{kl} + b \sum_{ij} s_{ij},

the first sum over nearest-neighbour bonds (each once), with periodic or free
boundaries. In the models each spin carries the bonds to its right and lower
neighbours as a ``pyro.factor`` inside the plates, so the models broadcast over any
batch (chain) dimension on the left.
"""

from __future__ import annotations

from typing import Optional, Tuple

import pyro
import pyro.distributions as dist
import torch

__all__ = ["ising_denoising", "lattice_bonds", "lattice_ising", "noisy_image"]


def lattice_bonds(spins: torch.Tensor, periodic: bool = True) -> torch.Tensor:
    r"""Per-spin bond sums :math:`s_{ij} (s_{i,j+1} + s_{i+1,j})`.

    Summed over the grid this is :math:`\sum_{\langle ij, kl \rangle} s_{ij} s_{kl}`.

    :param torch.Tensor spins: ``[..., H, W]`` spins in {-1, +1}.
    :param bool periodic: wrap around the edges (torus) or leave them free.
    :rtype: torch.Tensor
    """
    if periodic:
        right = torch.roll(spins, -1, dims=-1)
        down = torch.roll(spins, -1, dims=-2)
    else:
        right = torch.nn.functional.pad(spins[..., :, 1:], (0, 1))
        down = torch.nn.functional.pad(spins[..., 1:, :], (0, 0, 0, 1))
    return spins * (right + down)


def lattice_ising(
    size: int = 10,
    coupling: float = 0.4,
    bias: float = 0.0,
    periodic: bool = True,
) -> torch.Tensor:
    r"""Lattice Ising model on a ``size x size`` grid, sampled at site ``"x"``.

    :math:`\log p(x) = \theta \sum_{\langle ij, kl \rangle} s_{ij} s_{kl}
    + b \sum_{ij} s_{ij} - \log Z`.

    :param int size: side length ``L`` (``D = L^2`` spins).
    :param float coupling: :math:`\theta`.
    :param float bias: :math:`b`.
    :param bool periodic: periodic (torus) or free boundary.
    :returns: the spins as {0, 1} floats, shape ``[L, L]``.
    """
    with pyro.plate("rows", size, dim=-2), pyro.plate("cols", size, dim=-1):
        x = pyro.sample("x", dist.Bernoulli(logits=torch.tensor(2.0 * bias)))
        s = 2 * x - 1
        pyro.factor("coupling", coupling * lattice_bonds(s, periodic))
    return x


def ising_denoising(
    image: torch.Tensor,
    coupling: float = 0.5,
    noise_scale: float = 0.8,
    periodic: bool = False,
) -> torch.Tensor:
    r"""Denoise a binary image under an Ising prior; the latent image is site ``"x"``.

    .. math:: \log p(x, y) = \theta \sum_{\langle ij, kl \rangle} s_{ij} s_{kl}
              + \sum_{ij} \log \mathcal N(y_{ij}; s_{ij}, \sigma^2) + \text{const}.

    :param torch.Tensor image: ``[H, W]`` observed noisy image ``y``.
    :param float coupling: :math:`\theta`, the smoothness of the prior.
    :param float noise_scale: :math:`\sigma`.
    :param bool periodic: periodic or free boundary of the prior.
    :returns: the latent image as {0, 1} floats.
    """
    height, width = image.shape[-2:]
    with pyro.plate("rows", height, dim=-2), pyro.plate("cols", width, dim=-1):
        x = pyro.sample("x", dist.Bernoulli(logits=image.new_zeros(())))
        s = 2 * x - 1
        pyro.factor("coupling", coupling * lattice_bonds(s, periodic))
        pyro.sample("y", dist.Normal(s, noise_scale), obs=image)
    return x


def noisy_image(
    size: int = 16,
    noise_scale: float = 0.8,
    seed: Optional[int] = 0,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """A binary test image (a disc and a bar) and a noisy observation of it.

    :param int size: side length of the square image.
    :param float noise_scale: standard deviation of the Gaussian noise on the spins.
    :param int seed: seed of the noise (``None``: the global RNG).
    :returns: ``(clean, noisy)``: clean {0, 1} image and noisy observation
        ``2 * clean - 1 + noise``, both ``[size, size]``.
    """
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    grid = (torch.arange(size, dtype=torch.get_default_dtype()) + 0.5) / size
    row, col = grid.unsqueeze(-1), grid.unsqueeze(0)
    disc = (row - 0.4) ** 2 + (col - 0.35) ** 2 < 0.22**2
    bar = (row > 0.7) & (row < 0.85) & (col > 0.45) & (col < 0.9)
    clean = (disc | bar).to(torch.get_default_dtype())
    noise = torch.randn(size, size, generator=generator) * noise_scale
    return clean, 2 * clean - 1 + noise
