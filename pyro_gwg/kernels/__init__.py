"""Pyro MCMC kernels for discrete latent sites."""

from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.kernels.evaluating import EvaluatingKernel
from pyro_gwg.kernels.gibbs import Gibbs
from pyro_gwg.kernels.gwg import GWG
from pyro_gwg.kernels.hamming_ball import HammingBall
from pyro_gwg.kernels.locally_balanced import LocallyBalanced
from pyro_gwg.kernels.ncg import AVG, NCG, PAVG, FactorisedKernel

__all__ = [
    "AVG",
    "DiscreteKernel",
    "EvaluatingKernel",
    "FactorisedKernel",
    "GWG",
    "Gibbs",
    "HammingBall",
    "LocallyBalanced",
    "NCG",
    "PAVG",
]
