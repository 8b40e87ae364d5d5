r"""Lattice Ising models written as ordinary Pyro models.

Spins are Bernoulli sites :math:`x_{ij} \in \{0, 1\}` on an ``H x W`` grid, read as
:math:`s_{ij} = 2 x_{ij} - 1 \in \{-1, +1\}`. The Ising log density is

.. math:: f(x) = \theta \sum_{\langle ij, kl \rangle} s_{ij} s_{kl} + b \sum_{ij} s_{ij},

the first sum over nearest-neighbour bonds (each once), with periodic or free
boundaries. In the models each spin carries the bonds to its right and lower
neighbours as a ``pyro.factor`` inside the plates, so the models broadcast over any
batch (chain) dimension on the left.

:func:`ising` is the general model on any graph, in the convention of Grathwohl et al.
(2021, Eq. 30): :math:`f(x) = s^\top J s + b^\top s` with a coupling matrix ``J``
(each bond appears as :math:`J_{ij}` and :math:`J_{ji}`, so it counts twice);
:func:`lattice_couplings` and :func:`erdos_renyi_couplings` generate ``J``.
``ising(lattice_couplings(L, theta))`` is ``lattice_ising(L, coupling=2 * theta)``.
"""

from __future__ import annotations

from typing import Optional, Tuple

import pyro
import pyro.distributions as dist
import torch

__all__ = [
    "cut_value",
    "erdos_renyi_couplings",
    "ising",
    "ising_denoising",
    "lattice_bonds",
    "lattice_couplings",
    "lattice_ising",
    "maxcut_couplings",
    "noisy_image",
]


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


def ising(couplings: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    r"""Ising model on any graph, sampled at site ``"x"`` (``D`` spins).

    .. math:: \log p(x) = s^\top J s + b^\top s - \log Z, \qquad s = 2x - 1,

    the convention of Grathwohl et al. (2021 [Grathwohl2021]_, Eq. 30). Each spin carries
    :math:`s_i (J s)_i` as a ``pyro.factor`` inside the ``"spins"`` plate, and the bias
    enters through the site's ``Bernoulli(logits=2 b)`` (whose normaliser is a
    constant), so the model broadcasts over batch dimensions on the left.

    :param torch.Tensor couplings: ``[D, D]`` coupling matrix ``J`` (symmetric, zero
        diagonal, e.g. from :func:`lattice_couplings` or :func:`erdos_renyi_couplings`).
    :param torch.Tensor bias: ``[D]`` field ``b`` (default zero).
    :returns: the spins as {0, 1} floats, shape ``[D]``.
    """
    num_spins = couplings.shape[-1]
    if bias is None:
        bias = couplings.new_zeros(num_spins)
    with pyro.plate("spins", num_spins, dim=-1):
        x = pyro.sample("x", dist.Bernoulli(logits=2.0 * bias))
        s = 2 * x - 1
        pyro.factor("coupling", s * (s @ couplings))
    return x


def lattice_couplings(size: int, theta: float = 1.0, periodic: bool = True) -> torch.Tensor:
    r"""Coupling matrix :math:`J = \theta A` of the ``size x size`` lattice, ``A`` its
    adjacency matrix (spins numbered row by row), for :func:`ising`.

    Every bond (to the right and lower neighbour of each spin, wrapping around when
    ``periodic``) adds :math:`\theta` to :math:`J_{ij}` and :math:`J_{ji}`, so
    ``ising(lattice_couplings(size, theta))`` is ``lattice_ising(size, 2 * theta)``.

    :param int size: side length ``L``; ``D = L^2``.
    :param float theta: connectivity strength :math:`\theta` of the paper's Eq. 10.
    :param bool periodic: periodic (torus) or free boundary.
    :returns: ``[D, D]``.
    """
    rows, cols = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    couplings = torch.zeros(size * size, size * size)
    for down, right in ((0, 1), (1, 0)):
        to_row, to_col = rows + down, cols + right
        keep = (to_row < size) & (to_col < size) if not periodic else torch.ones_like(rows > 0)
        i = (rows * size + cols)[keep]
        j = ((to_row % size) * size + to_col % size)[keep]
        couplings.index_put_((i, j), torch.tensor(theta), accumulate=True)
        couplings.index_put_((j, i), torch.tensor(theta), accumulate=True)
    return couplings


def maxcut_couplings(weights: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    r"""Couplings of :func:`ising` whose density is the Boltzmann distribution of the
    weighted max-cut problem on the graph ``weights`` (the combinatorial target of the
    DISCS benchmark, Goshvadi et al. 2023 [Goshvadi2023]_).

    With spins :math:`s = 2x - 1`, the cut of :math:`x` is
    :math:`\mathrm{cut}(x) = \sum_{i<j} w_{ij} (1 - s_i s_j) / 2`, and
    :math:`p(x) \propto e^{\mathrm{cut}(x) / T}` is :func:`ising` with
    :math:`J = -W / (4T)` (its :math:`s^\top J s` counts every pair twice).

    :param torch.Tensor weights: ``[D, D]`` symmetric edge weights, zero diagonal.
    :param float temperature: :math:`T > 0`.
    :returns: ``[D, D]`` couplings.
    """
    if not temperature > 0:
        raise ValueError("temperature must be positive, got {}".format(temperature))
    return -weights / (4 * temperature)


def cut_value(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    r"""The cut :math:`\sum_{i<j} w_{ij} [x_i \ne x_j]` of 0/1 states ``x [..., D]``."""
    x = x.to(weights.dtype)
    differ = x.unsqueeze(-1) + x.unsqueeze(-2) - 2 * x.unsqueeze(-1) * x.unsqueeze(-2)
    return (differ * weights).sum((-2, -1)) / 2


def erdos_renyi_couplings(
    num_nodes: int = 200, avg_degree: float = 4.0, seed: Optional[int] = 0
) -> torch.Tensor:
    r"""Random coupling matrix on an Erdos-Renyi graph, for :func:`ising`.

    Each pair of nodes is joined with probability ``avg_degree / (num_nodes - 1)`` (so
    a node has ``avg_degree`` neighbours on average) and every edge gets a weight
    :math:`w \sim \mathcal N(0, 1 / \text{avg\_degree})`, stored symmetrically
    (Grathwohl et al. 2021 [Grathwohl2021]_, Appendix F.2).

    :param int num_nodes: ``D``.
    :param float avg_degree: expected number of neighbours.
    :param int seed: seed (``None``: the global RNG).
    :returns: ``[D, D]`` symmetric, zero diagonal.
    """
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    shape = (num_nodes, num_nodes)
    edges = torch.rand(shape, generator=generator) < avg_degree / max(num_nodes - 1, 1)
    weights = torch.randn(shape, generator=generator) / avg_degree**0.5
    upper = torch.triu(edges * weights, diagonal=1)
    return upper + upper.T
