"""Pyro MCMC kernels for discrete latent sites.

:data:`REGISTRY` lists every kernel of the package by public name; :mod:`pyro_gwg`
exports each of them, and the tests, the benchmarks and the documentation's kernel
table iterate over it. Adding a kernel takes its proposals module (the math and
``build_<name>``), its kernel module (the class), its test module and one line here
(see :doc:`/design`, "How to add a kernel").
"""

from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.kernels.dlmc import DLMC
from pyro_gwg.kernels.evaluating import EvaluatingKernel
from pyro_gwg.kernels.gibbs import Gibbs
from pyro_gwg.kernels.gwg import GWG, FlipCountKernel
from pyro_gwg.kernels.hamming_ball import HammingBall
from pyro_gwg.kernels.langevin import DMALA, DULA
from pyro_gwg.kernels.locally_balanced import LocallyBalanced
from pyro_gwg.kernels.ncg import AVG, NCG, PAVG, FactorisedKernel
from pyro_gwg.kernels.path import PAFS, PAS
from pyro_gwg.kernels.step_size import StepSizeKernel

#: every kernel of the package, once, by its public name (``DMALA``, another name of
#: ``NCG``, is exported beside them)
REGISTRY = {
    kernel.__name__: kernel
    for kernel in (GWG, NCG, AVG, PAVG, DULA, PAS, PAFS, DLMC, Gibbs, HammingBall, LocallyBalanced)
}

__all__ = [
    "DMALA",
    "DiscreteKernel",
    "EvaluatingKernel",
    "FactorisedKernel",
    "FlipCountKernel",
    "REGISTRY",
    "StepSizeKernel",
    *REGISTRY,
]
