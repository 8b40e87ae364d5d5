"""pyro-gwg: gradient-informed MCMC for the discrete latent sites of Pyro models.

``import pyro_gwg`` loads the core (sites and energy, proposals, kernels, runner,
enumeration, diagnostics, the discrete model library); :mod:`pyro_gwg.contrib`
(estimators, training, diffusion, continuous targets, model-specific kernels) and the
optional dependencies (ArviZ, scikit-learn) load when first used.
"""

from pyro_gwg import diagnostics, enumeration, models, proposals
from pyro_gwg.auto import Auto, ExactDraws
from pyro_gwg.bridge.batching import BatchingWarning
from pyro_gwg.bridge.density import ModelDensity
from pyro_gwg.compile import CompilationWarning
from pyro_gwg.enumeration import exact_posterior
from pyro_gwg.inference_data import to_inference_data, typed_samples
from pyro_gwg.kernels import (
    AVG,
    DLMC,
    DMALA,
    DULA,
    GWG,
    NCG,
    PAFS,
    PAS,
    PAVG,
    REGISTRY,
    DiscreteKernel,
    Gibbs,
    HammingBall,
    LocallyBalanced,
)
from pyro_gwg.kernels.mixed import MixedGibbs
from pyro_gwg.kernels.run import StuckChainWarning
from pyro_gwg.mcmc import MCMC
from pyro_gwg.runner.draws import Draws
from pyro_gwg.runner.many import fit_many
from pyro_gwg.sites import UnsupportedModelError

__version__ = "0.1.0"

__all__ = [
    "Auto",
    "ExactDraws",
    "AVG",
    "BatchingWarning",
    "CompilationWarning",
    "DLMC",
    "DMALA",
    "DULA",
    "ModelDensity",
    "DiscreteKernel",
    "Draws",
    "GWG",
    "Gibbs",
    "HammingBall",
    "LocallyBalanced",
    "MCMC",
    "MixedGibbs",
    "NCG",
    "PAFS",
    "PAS",
    "PAVG",
    "REGISTRY",
    "StuckChainWarning",
    "UnsupportedModelError",
    "__version__",
    "diagnostics",
    "enumeration",
    "exact_posterior",
    "fit_many",
    "models",
    "proposals",
    "to_inference_data",
    "typed_samples",
]
