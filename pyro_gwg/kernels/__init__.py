"""Pyro MCMC kernels for discrete latent sites."""

from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.kernels.gwg import GWG

__all__ = ["DiscreteKernel", "GWG"]
