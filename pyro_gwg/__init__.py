"""pyro-gwg: gradient-informed MCMC for the discrete latent sites of Pyro models."""

from pyro_gwg import diagnostics, diffusion, enum, estimators, kernels, models, proposals, train
from pyro_gwg.energy import BatchingWarning, DiscreteEnergy
from pyro_gwg.enum import exact_posterior
from pyro_gwg.inference_data import to_inference_data
from pyro_gwg.kernels import REGISTRY, DiscreteKernel
from pyro_gwg.kernels.mixed import MixedGibbs
from pyro_gwg.mcmc import MCMC
from pyro_gwg.sites import UnsupportedModelError

globals().update({name: getattr(kernels, name) for name in REGISTRY})

__version__ = "0.1.0"

__all__ = [
    *REGISTRY,
    "BatchingWarning",
    "DiscreteEnergy",
    "DiscreteKernel",
    "MCMC",
    "MixedGibbs",
    "UnsupportedModelError",
    "__version__",
    "diagnostics",
    "diffusion",
    "enum",
    "estimators",
    "exact_posterior",
    "models",
    "proposals",
    "to_inference_data",
    "train",
]
