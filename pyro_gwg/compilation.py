"""Compilation of pure tensor functions (whole sampler transitions) into fast callables.

Two compilers, tried in this order, each falling back to the next with a
:class:`CompilationWarning` when it fails:

* ``"inductor"``: the function is traced to a graph of ATen operators
  (:func:`torch.fx.experimental.proxy_tensor.make_fx`, which also records the backward
  pass of any ``torch.autograd.grad`` inside) and compiled by TorchInductor into fused
  C++ (or GPU) kernels. Seconds to compile, then the fastest per call: a GWG step of a
  small model becomes one or two kernels, with no per-operator dispatch.
* ``"trace"``: :func:`torch.jit.trace`, as Pyro's HMC does. Milliseconds to compile; the
  TorchScript interpreter still dispatches every operator.

When both fail the caller runs the function eagerly. Either way the model's Python
control flow must not depend on latent values: tracing records one path (the energy
bridge checks this, see :class:`pyro_gwg.DiscreteEnergy`).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Callable, Iterator, Optional, Sequence

import pyro
import torch

__all__ = [
    "BACKENDS",
    "CompilationWarning",
    "compile_function",
    "inductor_compile",
    "trace_compile",
]

#: compilers, fastest per call first; a failing one hands over to the next
BACKENDS = ("inductor", "trace")


class CompilationWarning(UserWarning):
    """A compiler failed on a transition; a slower path (or eager mode) runs instead."""


@contextlib.contextmanager
def _tracing_context() -> Iterator[None]:
    """The conditions Pyro's HMC traces under: parameters in the param store frozen,
    distribution validation off, tracer warnings silenced."""
    frozen = [p for _, p in pyro.get_param_store().named_parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        with pyro.validation_enabled(False), warnings.catch_warnings():
            warnings.simplefilter("ignore", category=torch.jit.TracerWarning)
            warnings.filterwarnings("ignore", "`torch.jit.trace` is deprecated")
            yield
    finally:
        for p in frozen:
            p.requires_grad_(True)


def trace_compile(fn: Callable, example_inputs: tuple) -> Callable:
    """:func:`torch.jit.trace` of ``fn`` the way Pyro's HMC does it: parameters in the
    param store frozen, validation off, tracer warnings silenced.

    :param callable fn: a function of tensors returning tensors.
    :param tuple example_inputs: example arguments.
    """
    with _tracing_context():
        return torch.jit.trace(fn, example_inputs, check_trace=False)


def inductor_compile(fn: Callable, example_inputs: Sequence[torch.Tensor]) -> Callable:
    """Compile ``fn`` with TorchInductor, without TorchDynamo: ``fn`` is traced once to an
    ATen graph (:func:`~torch.fx.experimental.proxy_tensor.make_fx`) and the graph is
    compiled for the shapes, strides and devices of ``example_inputs`` (on the CPU with
    a C++ wrapper around the kernels, which saves the Python calls between them); the
    result is called once on them, so that errors surface here.

    The compiled function takes the same positional tensors (made contiguous, as at
    compilation) and returns a sequence of tensors. Random operators draw their seeds
    from the global torch generator, so runs are reproducible under
    :func:`pyro.set_rng_seed`, though not equal to eager runs.

    :param callable fn: a function of tensors returning a tuple of tensors.
    :param example_inputs: example arguments.
    :raises Exception: whatever the tracer or the compiler raises.
    """
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx
    from torch.fx.experimental.proxy_tensor import make_fx

    example_inputs = [t.contiguous() for t in example_inputs]
    with _tracing_context():
        graph = make_fx(fn)(*example_inputs)
    # the compiler propagates shapes afresh; the C++ wrapper needs that (it refuses
    # the tracer's fake tensors)
    for node in graph.graph.nodes:
        node.meta.pop("val", None)
        node.meta.pop("tensor_meta", None)
    on_cpu = all(t.device.type == "cpu" for t in example_inputs)
    with inductor_config.patch(cpp_wrapper=on_cpu):
        compiled = compile_fx(graph, example_inputs)

    def run(*tensors: torch.Tensor):
        return compiled(*(t.contiguous() for t in tensors))

    run(*example_inputs)
    return run


_COMPILERS = {"inductor": inductor_compile, "trace": trace_compile}


def compile_function(fn: Callable, example_inputs: tuple, backend: str) -> Optional[Callable]:
    """``fn`` compiled by ``backend``, or by the next compiler of :data:`BACKENDS` when
    that fails (with a :class:`CompilationWarning`); ``None`` when every one fails, for
    the caller to run ``fn`` eagerly.

    :param callable fn: a function of tensors returning a tuple of tensors.
    :param tuple example_inputs: example arguments.
    :param str backend: ``"inductor"`` or ``"trace"``.
    :rtype: callable or None
    """
    if backend not in BACKENDS:
        raise ValueError("backend must be one of {}, got {!r}".format(BACKENDS, backend))
    for name in BACKENDS[BACKENDS.index(backend) :]:
        try:
            return _COMPILERS[name](fn, example_inputs)
        except Exception as error:  # any compiler failure: hand over to the next one
            following = BACKENDS[BACKENDS.index(name) + 1 :]
            warnings.warn(
                "Compiling the transition with {} failed ({}: {}); {}.".format(
                    name,
                    type(error).__name__,
                    str(error).strip().splitlines()[0] if str(error).strip() else "",
                    "using {} instead".format(following[0]) if following else "running it eagerly",
                ),
                CompilationWarning,
                stacklevel=3,
            )
    return None
