"""The one table from a kernel's ``jit_compile`` to what runs its transitions.

Every compiled form starts from the capture of the transition as a pure graph of ATen
operators (:func:`~pyro_gwg.compile.backends.capture`: the model's energy, its
gradient, the proposal and the MH test, with nothing of Pyro's bookkeeping left); the
table says what runs until a compiled form is ready, which compiler makes it, and
whether the chains wait for it.

.. list-table::
   :header-rows: 1

   * - ``jit_compile``
     - runs first
     - compiled form
     - chains wait
   * - ``"auto"`` (default)
     - the model eagerly (one step), then the captured graph
     - AOTInductor, in a background process, cached on disk
     - never
   * - ``True``
     - the captured graph
     - none
     - for the capture
   * - ``"inductor"``
     - (nothing)
     - AOTInductor, in this process, cached on disk
     - for the compile
   * - ``"make_fx"``
     - (nothing)
     - TorchInductor (private API), in this process
     - for the compile
   * - ``False``
     - the model eagerly
     - none
     - (nothing)

A model that cannot be captured (its Python control flow reads latent values, it reads
``pyro.module`` parameters, or it is evaluated one state at a time) runs eagerly in
every mode (``"auto"`` says so once, with a
:class:`~pyro_gwg.compile.backends.CompilationWarning`; the other modes refuse it).
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Union

__all__ = ["JIT_COMPILE", "Mode", "mode_of"]


class Mode(NamedTuple):
    """What a ``jit_compile`` value runs (a row of :data:`JIT_COMPILE`)."""

    #: the compiled form: ``"graph"`` (the captured graph, run by Python), ``"aot"``,
    #: ``"make_fx"`` (see :mod:`pyro_gwg.compile.backends`), or ``None`` (eager)
    backend: Optional[str]
    #: whether the compiled form is made in a background process while the chains run
    #: (the model eagerly for one step, then the captured graph), rather than before
    #: the first step
    background: bool = False


#: ``jit_compile`` value -> :class:`Mode`
JIT_COMPILE: Dict[Union[bool, str], Mode] = {
    "auto": Mode("aot", background=True),
    True: Mode("graph"),
    "inductor": Mode("aot"),
    "make_fx": Mode("make_fx"),
    False: Mode(None),
}


def mode_of(jit_compile: Union[bool, str]) -> Mode:
    """The :class:`Mode` of a ``jit_compile`` value.

    :raises ValueError: for a value not in :data:`JIT_COMPILE`.
    """
    for value, mode in JIT_COMPILE.items():
        if jit_compile is value or (isinstance(jit_compile, str) and jit_compile == value):
            return mode
    raise ValueError(
        "jit_compile must be one of {}, got {!r}".format(
            ", ".join(repr(v) for v in JIT_COMPILE), jit_compile
        )
    )
