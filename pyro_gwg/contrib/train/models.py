r"""The models of the learning experiments of Grathwohl et al. 2021 [Grathwohl2021]_
with ``pyro.param`` parameters (:func:`learnable_ising`, :func:`learnable_potts`,
:func:`learnable_ebm`, :func:`learnable_categorical_ebm`), and what is specific to
them: the symmetrised couplings, the exact :class:`~pyro_gwg.PAVG` preconditioners of
the Ising and Potts models (Rhodes & Gutmann 2022 [Rhodes2022]_, Section 5.3) and the
coupling error of a learned model.
"""

from __future__ import annotations

from typing import Sequence, Union

import pyro
import torch

from pyro_gwg.models.ebm import binary_ebm, categorical_ebm
from pyro_gwg.models.ising import ising
from pyro_gwg.models.potts import potts

__all__ = [
    "coupling_rmse",
    "ising_preconditioner",
    "learnable_categorical_ebm",
    "learnable_ebm",
    "learnable_ising",
    "learnable_potts",
    "potts_preconditioner",
    "symmetric_couplings",
    "symmetric_potts_couplings",
]


def ising_preconditioner(couplings: torch.Tensor) -> torch.Tensor:
    r"""The Hessian :math:`M = 4 (J + J^\top)` of the Ising log density
    :math:`f(x) = s^\top J s + b^\top s`, :math:`s = 2x - 1`, of
    :func:`~pyro_gwg.models.ising` in its bits :math:`x` (``8 J`` for a symmetric ``J``):
    the preconditioner that makes :class:`~pyro_gwg.PAVG` the block-Gibbs sampler of
    Martens & Sutskever 2010 [MartensSutskever2010]_ ("model-specific PAVG", Rhodes &
    Gutmann 2022 [Rhodes2022]_, Sections 3.2.1 and 5.3), which accepts every proposal.

    :param torch.Tensor couplings: ``[D, D]`` ``J`` (e.g.
        ``symmetric_couplings(pyro.param("couplings"))`` of :func:`learnable_ising`).
    :returns: ``[D, D]`` ``M``.
    """
    return 4.0 * (couplings + couplings.transpose(-1, -2))


def potts_preconditioner(couplings: torch.Tensor) -> torch.Tensor:
    r"""The Hessian of the Potts log density :math:`f(z) = \sum_{ij} z_i^\top J_{ij} z_j
    + \sum_i b_i^\top z_i` of :func:`~pyro_gwg.models.potts` in its one-hot values, laid
    out as :class:`~pyro_gwg.PAVG` orders them (coordinate ``i``, then category ``k``):
    :math:`M_{(i,k),(j,l)} = (J_{ij})_{kl} + (J_{ji})_{lk}`; with it PAVG accepts every
    proposal (Rhodes & Gutmann 2022 [Rhodes2022]_, Section 3.2.1).

    :param torch.Tensor couplings: ``[D, D, K, K]`` ``J`` (e.g.
        ``symmetric_potts_couplings(pyro.param("couplings"))`` of :func:`learnable_potts`).
    :returns: ``[D K, D K]`` ``M``.
    """
    size, _, states, _ = couplings.shape
    hessian = couplings + couplings.permute(1, 0, 3, 2)
    return hessian.permute(0, 2, 1, 3).reshape(size * states, size * states)


def coupling_rmse(learned: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    r"""Root-mean-squared error :math:`\sqrt{\mathrm{mean}((\hat J - J)^2)}` over all
    entries (Grathwohl et al. 2021 [Grathwohl2021]_, Section 6 and Fig. 6).

    :param torch.Tensor learned: :math:`\hat J`.
    :param torch.Tensor true: :math:`J`, same shape.
    :rtype: torch.Tensor
    """
    if learned.shape != true.shape:
        raise ValueError(
            "shapes differ: learned {} vs true {}".format(tuple(learned.shape), tuple(true.shape))
        )
    return (learned.detach() - true).pow(2).mean().sqrt()


def symmetric_couplings(raw: torch.Tensor) -> torch.Tensor:
    r"""Symmetric coupling matrix with zero diagonal, :math:`(A + A^\top) / 2` off the
    diagonal, from an unconstrained ``[D, D]`` parameter.

    :rtype: torch.Tensor
    """
    off_diagonal = 1 - torch.eye(raw.shape[-1], dtype=raw.dtype, device=raw.device)
    return 0.5 * (raw + raw.transpose(-1, -2)) * off_diagonal


def symmetric_potts_couplings(raw: torch.Tensor) -> torch.Tensor:
    r"""Potts couplings with :math:`J_{ji} = J_{ij}^\top` and zero diagonal blocks, from an
    unconstrained ``[D, D, K, K]`` parameter.

    :rtype: torch.Tensor
    """
    size = raw.shape[0]
    off_diagonal = (1 - torch.eye(size, dtype=raw.dtype, device=raw.device))[:, :, None, None]
    return 0.5 * (raw + raw.permute(1, 0, 3, 2)) * off_diagonal


def learnable_ising(num_spins: int) -> torch.Tensor:
    r"""The Ising model :func:`~pyro_gwg.models.ising` with learnable couplings and field:
    ``pyro.param("couplings")`` (``[D, D]``, symmetrised by :func:`symmetric_couplings`)
    and ``pyro.param("bias")`` (``[D]``), both initialised at zero; site ``"x"``.

    :param int num_spins: ``D``.
    :returns: the spins as {0, 1} floats, shape ``[D]``.
    """
    raw = pyro.param("couplings", lambda: torch.zeros(num_spins, num_spins))
    bias = pyro.param("bias", lambda: torch.zeros(num_spins))
    return ising(symmetric_couplings(raw), bias)


def learnable_potts(num_sites: int, num_states: int) -> torch.Tensor:
    r"""The dense Potts model :func:`~pyro_gwg.models.potts` with learnable
    ``pyro.param("couplings")`` (``[D, D, K, K]``, see :func:`symmetric_potts_couplings`)
    and ``pyro.param("bias")`` (``[D, K]``), initialised at zero; site ``"z"``.

    :param int num_sites: ``D``.
    :param int num_states: ``K``.
    :returns: one-hot spins ``[D, K]``.
    """
    shape = (num_sites, num_sites, num_states, num_states)
    raw = pyro.param("couplings", lambda: torch.zeros(shape))
    bias = pyro.param("bias", lambda: torch.zeros(num_sites, num_states))
    return potts(symmetric_potts_couplings(raw), bias)


def learnable_ebm(
    net: torch.nn.Module, shape: Union[int, Sequence[int]], name: str = "energy_net"
) -> torch.Tensor:
    r"""The binary EBM :func:`~pyro_gwg.models.binary_ebm` with the network's weights
    registered as Pyro parameters (``pyro.module(name, net)``); site ``"x"``.

    :param torch.nn.Module net: the negative energy :math:`f_\theta`.
    :param shape: shape of one data point.
    :param str name: the module's name in the parameter store.
    :returns: the state as {0, 1} floats.
    """
    pyro.module(name, net)
    return binary_ebm(net, shape)


def learnable_categorical_ebm(
    net: torch.nn.Module,
    shape: Union[int, Sequence[int]],
    num_categories: int,
    name: str = "energy_net",
) -> torch.Tensor:
    r"""The categorical EBM :func:`~pyro_gwg.models.ebm.categorical_ebm` with the
    network's weights registered as Pyro parameters (``pyro.module(name, net)``); site
    ``"x"``.

    :param torch.nn.Module net: the negative energy :math:`f_\theta` of the one-hot values.
    :param shape: shape of one data point (without the category dimension).
    :param int num_categories: ``K``.
    :param str name: the module's name in the parameter store.
    :returns: the state as one-hot floats, shape ``shape + (K,)``.
    """
    pyro.module(name, net)
    return categorical_ebm(net, shape, num_categories)
