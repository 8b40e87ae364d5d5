r"""Potts models written as ordinary Pyro models: one-hot categorical spins.

Each spin is a ``OneHotCategorical`` site :math:`z_i \in \{e_1, \dots, e_K\}`, so the
gradient-informed kernels see the one-hot vector and propose category changes from
its gradient (Grathwohl et al. 2021 [Grathwohl2021]_, Eq. 4).

* :func:`lattice_potts`: nearest-neighbour model on an ``L x L`` grid,
  :math:`f(z) = \theta \sum_{\langle ij \rangle} [z_i = z_j] + \sum_i b^\top z_i`.
* :func:`potts`: dense pairwise model (the protein models of the paper, Section 7),
  :math:`f(z) = \sum_{i, j} z_i^\top J_{ij} z_j + \sum_i b_i^\top z_i`, with parameters
  from :func:`random_potts`.

Pairwise terms enter as a ``pyro.factor`` per spin inside the plates and biases as the
site's logits (their normaliser is a constant), so both models broadcast over batch
(chain) dimensions on the left.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import pyro
import pyro.distributions as dist
import torch

from pyro_gwg.models.ising import lattice_bonds

__all__ = ["PottsParams", "lattice_potts", "potts", "random_potts"]


def lattice_potts(
    size: int = 10,
    num_states: int = 3,
    coupling: float = 0.5,
    bias: Optional[torch.Tensor] = None,
    periodic: bool = True,
) -> torch.Tensor:
    r"""Lattice Potts model on a ``size x size`` grid, sampled at site ``"z"``.

    .. math:: \log p(z) = \theta \sum_{\langle ij, kl \rangle} [z_{ij} = z_{kl}]
              + \sum_{ij} b^\top z_{ij} - \log Z,

    the first sum over nearest-neighbour bonds, each once (periodic or free boundary).

    :param int size: side length ``L``.
    :param int num_states: number of states ``K`` per spin.
    :param float coupling: :math:`\theta`.
    :param torch.Tensor bias: ``[K]`` field ``b`` (default zero).
    :param bool periodic: periodic (torus) or free boundary.
    :returns: one-hot spins, shape ``[L, L, K]``.
    """
    if bias is None:
        bias = torch.zeros(num_states)
    with pyro.plate("rows", size, dim=-2), pyro.plate("cols", size, dim=-1):
        z = pyro.sample("z", dist.OneHotCategorical(logits=bias))
        # z_ij . (z_right + z_down), category by category
        agree = lattice_bonds(z.movedim(-1, -3), periodic).sum(-3)
        pyro.factor("coupling", coupling * agree)
    return z


class PottsParams(NamedTuple):
    """Parameters of a dense Potts model.

    :ivar torch.Tensor couplings: ``[D, D, K, K]`` with
        ``couplings[i, j] == couplings[j, i].T`` and zero diagonal blocks.
    :ivar torch.Tensor bias: ``[D, K]``.
    """

    couplings: torch.Tensor
    bias: torch.Tensor


def potts(couplings: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    r"""Dense Potts model, sampled at site ``"z"`` (``D`` one-hot spins of ``K`` states).

    .. math:: \log p(z) = \sum_{i, j} z_i^\top J_{ij} z_j + \sum_i b_i^\top z_i - \log Z.

    :param torch.Tensor couplings: ``[D, D, K, K]`` couplings ``J``.
    :param torch.Tensor bias: ``[D, K]`` fields ``b``.
    :returns: one-hot spins, shape ``[D, K]``.
    """
    with pyro.plate("sites", bias.shape[0], dim=-1):
        z = pyro.sample("z", dist.OneHotCategorical(logits=bias))
        field = torch.einsum("ijkl,...jl->...ik", couplings, z)
        pyro.factor("coupling", (z * field).sum(-1))
    return z


def random_potts(
    num_sites: int = 10,
    num_states: int = 3,
    coupling_scale: float = 0.2,
    bias_scale: float = 1.0,
    seed: Optional[int] = 0,
) -> PottsParams:
    r"""Random dense Potts parameters: :math:`J_{ij} \sim \mathcal N(0, s_J^2)` for
    :math:`i < j`, :math:`J_{ji} = J_{ij}^\top`, :math:`J_{ii} = 0`,
    :math:`b_i \sim \mathcal N(0, s_b^2)`.

    :param int num_sites: ``D``.
    :param int num_states: ``K``.
    :param float coupling_scale: :math:`s_J`.
    :param float bias_scale: :math:`s_b`.
    :param int seed: seed (``None``: the global RNG).
    :rtype: PottsParams
    """
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    shape = (num_sites, num_sites, num_states, num_states)
    raw = torch.randn(shape, generator=generator) * coupling_scale
    upper = torch.ones(num_sites, num_sites).triu(1)[:, :, None, None]
    half = raw * upper
    couplings = half + half.permute(1, 0, 3, 2)
    bias = torch.randn(num_sites, num_states, generator=generator) * bias_scale
    return PottsParams(couplings, bias)
