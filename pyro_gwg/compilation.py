"""Compilation of pure tensor functions (whole sampler transitions) into fast callables.

The functions compiled here map tensors to a tuple of tensors and may contain a backward
pass (a ``torch.autograd.grad`` inside) and random operators. Three compilers:

* ``"compile"``: public APIs only. :func:`torch.export.export` in non-strict mode runs
  the function's Python (a Pyro model with its handlers) once and records an ATen graph,
  the backward pass of any ``torch.autograd.grad`` included; :func:`torch.compile`
  (``fullgraph=True``, ``dynamic=False``, TorchInductor, with a C++ wrapper on the CPU)
  turns that graph into fused kernels. Tens of seconds to compile, then the fastest per
  call. (``torch.compile`` cannot capture the function itself: TorchDynamo neither
  follows Pyro's handlers nor, by default, ``torch.autograd.grad``.)
* ``"make_fx"``: :func:`~torch.fx.experimental.proxy_tensor.make_fx` and TorchInductor's
  own entry point (a private ``torch._inductor`` API, so opt-in only); seconds to
  compile, about as fast per call.
* ``"trace"``: :func:`torch.jit.trace`, as Pyro's HMC does (deprecated by PyTorch, so
  opt-in only). Milliseconds to compile; the TorchScript interpreter still dispatches
  every operator.

``"default"`` is resolved by :func:`choose_backend`, a capability probe run once per
process. A compiler that fails hands over to the next of its fallbacks (``"trace"``),
then to the caller, which runs the function eagerly. A failure the compiler is known
for (a documented limit, see :data:`KNOWN_LIMITS`) is an expected fallback, logged at
debug level; any other failure is reported by a :class:`CompilationWarning`, once per
compiler and kind of error in a process. Either way the model's Python control flow
must not depend on latent values: tracing records one path (the energy bridge checks
this, see :class:`pyro_gwg.DiscreteEnergy`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from typing import Callable, Dict, Iterator, Optional, Sequence, Set, Tuple

import pyro
import torch

__all__ = [
    "BACKENDS",
    "KNOWN_LIMITS",
    "CompilationWarning",
    "choose_backend",
    "compile_function",
    "export_compile",
    "inductor_compile",
    "make_fx_compile",
    "trace_compile",
]

logger = logging.getLogger(__name__)

#: compilers a caller may name (besides ``"default"``, resolved by :func:`choose_backend`)
BACKENDS = ("compile", "make_fx", "trace")

#: what each compiler hands over to when it fails
FALLBACKS: Dict[str, Tuple[str, ...]] = {"compile": ("trace",), "make_fx": ("trace",), "trace": ()}

#: names that still work, with a DeprecationWarning: ``"inductor"`` was the make_fx route
DEPRECATED_BACKENDS = {"inductor": "make_fx"}

#: fragments of the error messages of failures a compiler is known for: falling back
#: from them is expected (logged at debug level, no warning)
KNOWN_LIMITS: Dict[str, Tuple[str, ...]] = {
    # TorchScript cannot hold a tensor that requires grad as a constant (Pyro's
    # contraction of enumerated factors makes one) nor follow functorch transforms
    "trace": (
        "Cannot insert a Tensor that requires grad as a constant",
        "Unsupported value kind",
    ),
    # torch.export records shapes and values statically
    "compile": ("data-dependent", "DataDependent"),
    "make_fx": ("data-dependent", "_local_scalar_dense"),
}

# (compiler, error type) pairs already reported by a CompilationWarning in this process
_WARNED: Set[Tuple[str, str]] = set()


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


class _Module(torch.nn.Module):
    """``fn`` as the module that :func:`torch.export.export` takes."""

    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *tensors: torch.Tensor):
        return self.fn(*tensors)


def _on_inputs(compiled: Callable, example_inputs: Sequence[torch.Tensor]) -> Callable:
    """``compiled`` taking its tensors contiguous, as at compilation, and called once on
    ``example_inputs`` so that errors surface at compilation."""

    def run(*tensors: torch.Tensor):
        return compiled(*(t.contiguous() for t in tensors))

    run(*example_inputs)
    return run


def _inductor_options(example_inputs: Sequence[torch.Tensor]) -> dict:
    # on the CPU a C++ wrapper around the kernels saves the Python calls between them
    return {"cpp_wrapper": all(t.device.type == "cpu" for t in example_inputs)}


def export_compile(fn: Callable, example_inputs: Sequence[torch.Tensor]) -> Callable:
    """Compile ``fn`` through public APIs: a non-strict :func:`torch.export.export` of
    ``fn`` (its Python runs once; the ATen graph records the backward pass of any
    ``torch.autograd.grad`` inside), then :func:`torch.compile` of the exported module
    (``fullgraph=True``, ``dynamic=False``: TorchInductor, for the shapes, strides and
    devices of ``example_inputs``). The result is called once on them, so that errors
    surface here.

    The compiled function takes the same positional tensors (made contiguous, as at
    compilation) and returns a sequence of tensors. Random operators draw their seeds
    from the global torch generator, so runs are reproducible under
    :func:`pyro.set_rng_seed`, though not equal to eager runs.

    :param callable fn: a function of tensors returning a tuple of tensors.
    :param example_inputs: example arguments.
    :raises Exception: whatever the exporter or the compiler raises.
    """
    example_inputs = tuple(t.contiguous() for t in example_inputs)
    with _tracing_context():
        program = torch.export.export(_Module(fn), example_inputs, strict=False)
    compiled = torch.compile(
        program.module(),
        fullgraph=True,
        dynamic=False,
        options=_inductor_options(example_inputs),
    )
    return _on_inputs(compiled, example_inputs)


def make_fx_compile(fn: Callable, example_inputs: Sequence[torch.Tensor]) -> Callable:
    """Compile ``fn`` with TorchInductor, without TorchDynamo: ``fn`` is traced once to an
    ATen graph (:func:`~torch.fx.experimental.proxy_tensor.make_fx`) and the graph is
    compiled by TorchInductor's private entry point ``compile_fx`` for the shapes,
    strides and devices of ``example_inputs``. Faster to compile than
    :func:`export_compile` and about as fast per call, but tied to PyTorch internals:
    opt-in (``backend="make_fx"``). Calls and randomness as in :func:`export_compile`.

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
    with inductor_config.patch(**_inductor_options(example_inputs)):
        compiled = compile_fx(graph, example_inputs)
    return _on_inputs(compiled, example_inputs)


def inductor_compile(fn: Callable, example_inputs: Sequence[torch.Tensor]) -> Callable:
    """Deprecated name of :func:`make_fx_compile`.

    :param callable fn: a function of tensors returning a tuple of tensors.
    :param example_inputs: example arguments.
    """
    warnings.warn(
        "inductor_compile is deprecated; use make_fx_compile (the same compiler), or "
        "export_compile (public PyTorch APIs only).",
        DeprecationWarning,
        stacklevel=2,
    )
    return make_fx_compile(fn, example_inputs)


_COMPILERS = {"compile": export_compile, "make_fx": make_fx_compile, "trace": trace_compile}


def _probe(x: torch.Tensor) -> tuple:
    """What a transition does: a gradient with respect to a tensor made inside, a
    categorical draw and a uniform one."""
    with torch.enable_grad():
        relaxed = x.float().requires_grad_()
        value = (relaxed * relaxed.roll(1, -1)).sum(-1)
        (grad,) = torch.autograd.grad(value.sum(), relaxed)
    move = torch.multinomial(torch.softmax(grad, -1), 1)
    return value.detach(), grad, move, torch.rand(x.shape[0], device=x.device)


@functools.cache
def _choose_backend(device_type: str) -> str:
    x = torch.tensor([[0, 1, 1, 0], [1, 1, 0, 1]], device=device_type)
    try:
        value, grad, move, _ = _COMPILERS["compile"](_probe, (x,))(x)
        eager_value, eager_grad, _, _ = _probe(x)
        if not (torch.equal(value, eager_value) and torch.equal(grad, eager_grad)):
            raise RuntimeError("the compiled probe disagrees with the eager one")
        if move.shape != (2, 1):
            raise RuntimeError("the compiled probe draws moves of shape {}".format(move.shape))
    except Exception as error:  # any failure means: not this compiler here
        logger.debug("torch.compile unavailable (%s: %s); using trace", type(error).__name__, error)
        return "trace"
    return "compile"


def choose_backend(device: torch.device | str = "cpu") -> str:
    """The compiler that ``backend="default"`` means on ``device``: ``"compile"`` when
    :func:`export_compile` compiles and runs a small transition-like function (a
    gradient inside, random draws) and agrees with eager mode, else ``"trace"``. The
    probe runs once per process and device type (a few seconds, the first time).

    :param device: a device or its name.
    :rtype: str
    """
    return _choose_backend(torch.device(device).type)


def _resolve(backend: str, device: torch.device | str) -> str:
    if backend in DEPRECATED_BACKENDS:
        replacement = DEPRECATED_BACKENDS[backend]
        warnings.warn(
            "backend={!r} is deprecated; use {!r} (the same compiler), or 'default'.".format(
                backend, replacement
            ),
            DeprecationWarning,
            stacklevel=3,
        )
        return replacement
    if backend == "default":
        return choose_backend(device)
    if backend not in BACKENDS:
        raise ValueError(
            "backend must be 'default' or one of {}, got {!r}".format(BACKENDS, backend)
        )
    return backend


def _report(name: str, error: Exception, following: Tuple[str, ...]) -> None:
    """A debug log for a failure ``name`` is known for, else a CompilationWarning once
    per compiler and error type in a process."""
    text = str(error).strip()
    then = "using {} instead".format(following[0]) if following else "running it eagerly"
    message = "Compiling the transition with {} failed ({}: {}); {}.".format(
        name, type(error).__name__, text.splitlines()[0] if text else "", then
    )
    key = (name, type(error).__name__)
    if any(fragment in text for fragment in KNOWN_LIMITS[name]) or key in _WARNED:
        logger.debug(message)
        return
    _WARNED.add(key)
    warnings.warn(message, CompilationWarning, stacklevel=4)


def compile_function(fn: Callable, example_inputs: tuple, backend: str) -> Optional[Callable]:
    """``fn`` compiled by ``backend``, or by one of its fallbacks when that fails (see
    the module's description for which fallbacks are logged and which warned about);
    ``None`` when every one fails, for the caller to run ``fn`` eagerly.

    :param callable fn: a function of tensors returning a tuple of tensors.
    :param tuple example_inputs: example arguments (tensors).
    :param str backend: ``"default"`` (the compiler :func:`choose_backend` picks for
        the device of ``example_inputs``), ``"compile"``, ``"make_fx"`` or ``"trace"``
        (``"inductor"``, deprecated, means ``"make_fx"``).
    :rtype: callable or None
    :raises ValueError: for an unknown ``backend``.
    """
    device = example_inputs[0].device if example_inputs else "cpu"
    backend = _resolve(backend, device)
    chain = (backend,) + FALLBACKS[backend]
    for i, name in enumerate(chain):
        try:
            return _COMPILERS[name](fn, example_inputs)
        except Exception as error:  # any compiler failure: hand over to the next one
            _report(name, error, chain[i + 1 :])
    return None
