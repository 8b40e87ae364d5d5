"""The compile wing: how a kernel's transition becomes the code that runs it.

* :mod:`pyro_gwg.compile.modes`: the one table from ``jit_compile`` values to what runs
  (:data:`~pyro_gwg.compile.modes.JIT_COMPILE`);
* :mod:`pyro_gwg.compile.backends`: the capture of a transition as a pure graph of ATen
  operators and the compilers of that graph (AOTInductor with its disk cache,
  TorchInductor);
* :mod:`pyro_gwg.compile.background`: AOTInductor in a background process while the
  chains run;
* :mod:`pyro_gwg.compile.transition`: the transition compiler the chain driver calls.
"""

from pyro_gwg.compile.backends import CompilationWarning
from pyro_gwg.compile.modes import JIT_COMPILE, Mode, mode_of

__all__ = ["JIT_COMPILE", "CompilationWarning", "Mode", "mode_of"]
