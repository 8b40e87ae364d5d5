"""pyro-gwg: gradient-informed MCMC for the discrete latent sites of Pyro models."""

from pyro_gwg import enum, models, proposals
from pyro_gwg.energy import DiscreteEnergy
from pyro_gwg.enum import exact_posterior
from pyro_gwg.kernels import GWG, DiscreteKernel
from pyro_gwg.kernels.mixed import MixedGibbs
from pyro_gwg.mcmc import MCMC
from pyro_gwg.sites import UnsupportedModelError

__version__ = "0.1.0"

__all__ = [
    "DiscreteEnergy",
    "DiscreteKernel",
    "GWG",
    "MCMC",
    "MixedGibbs",
    "UnsupportedModelError",
    "__version__",
    "enum",
    "exact_posterior",
    "models",
    "proposals",
]
