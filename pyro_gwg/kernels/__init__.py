"""Pyro MCMC kernels for discrete latent sites.

:data:`REGISTRY` lists every kernel of the package by public name with the module of
:mod:`pyro_gwg.kernels` that defines it; :mod:`pyro_gwg` exports each of them, and the
test suite and the documentation checks iterate over it. Adding a kernel takes its
proposals module (the math and ``build_<name>``), its kernel module (the class) and one
line here.
"""

from importlib import import_module

from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.kernels.evaluating import EvaluatingKernel
from pyro_gwg.kernels.ncg import FactorisedKernel

#: public name -> module under :mod:`pyro_gwg.kernels`
REGISTRY = {
    "GWG": "gwg",
    "NCG": "ncg",
    "AVG": "ncg",
    "PAVG": "ncg",
    "DMALA": "langevin",
    "DULA": "langevin",
    "Gibbs": "gibbs",
    "HammingBall": "hamming_ball",
    "LocallyBalanced": "locally_balanced",
    "PAS": "path",
    "PAFS": "path",
    "DLMC": "dlmc",
}

globals().update(
    {
        name: getattr(import_module("pyro_gwg.kernels." + module), name)
        for name, module in REGISTRY.items()
    }
)

__all__ = ["DiscreteKernel", "EvaluatingKernel", "FactorisedKernel", "REGISTRY", *REGISTRY]
