"""Compilation of pure tensor functions (whole sampler transitions) into fast callables.

The functions compiled here map tensors to a tuple of tensors and may contain a backward
pass (a ``torch.autograd.grad`` inside) and random operators. Four compilers:

* ``"aot"``: :func:`torch.export.export` in non-strict mode records the function as
  an ATen graph (as for ``"compile"``; a function that makes tensors from Python
  numbers or runs a model under :func:`torch.func.vmap` goes through
  :func:`~torch.fx.experimental.proxy_tensor.make_fx` first, see :func:`_export`);
  AOTInductor
  (:func:`torch._inductor.aoti_compile_and_package`) compiles it ahead of time into a
  package of fused C++ (or GPU) kernels with a C++ runner, saved in an on-disk cache
  (:func:`cache_dir`) under a hash of the graph, its constants and the shapes of its
  inputs. Tens of seconds the first time; a later run of the same model, in any
  process, loads the package in milliseconds.
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
process. Whether compiling pays at all is a question of how long a run is: the chain
driver's ``"auto"`` mode starts with ``"trace"`` and moves to ``"aot"`` when the cost
model :func:`worth_compiling` says so (see :class:`pyro_gwg.driver.ChainDriver`). A
compilation expected to take a second or more is announced in one line on standard
error (:func:`announce`).

A compiler that fails hands over to the next of its fallbacks (``"trace"``),
then to the caller, which runs the function eagerly. A failure the compiler is known
for (a documented limit, see :data:`KNOWN_LIMITS`) is an expected fallback, logged at
debug level; any other failure is reported by a :class:`CompilationWarning`, once per
compiler and kind of error in a process. Either way the model's Python control flow
must not depend on latent values: tracing records one path (the model bridge checks
this, see :class:`pyro_gwg.ModelDensity`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import pathlib
import sys
import tempfile
import threading
import time
import warnings
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import pyro
import torch
from tqdm.auto import tqdm

from pyro_gwg._warn import warn

__all__ = [
    "BACKENDS",
    "ANNOUNCE_SECONDS",
    "aot_available",
    "aot_compile",
    "announce",
    "cache_dir",
    "cached_aot",
    "estimated_compile_seconds",
    "prewarm_loader",
    "trace_key",
    "trace_ops",
    "try_aot_compile",
    "worth_compiling",
    "KNOWN_LIMITS",
    "CompilationWarning",
    "choose_backend",
    "compile_function",
    "export_compile",
    "make_fx_compile",
    "trace_compile",
]

logger = logging.getLogger(__name__)

#: compilers a caller may name (besides ``"default"``, resolved by :func:`choose_backend`)
BACKENDS = ("aot", "compile", "make_fx", "trace")

#: what each compiler hands over to when it fails
FALLBACKS: Dict[str, Tuple[str, ...]] = {
    "aot": ("trace",),
    "compile": ("trace",),
    "make_fx": ("trace",),
    "trace": (),
}

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
    # ... and PyTorch before 2.6 has no AOTInductor packages
    "aot": ("data-dependent", "DataDependent", "aoti_compile_and_package", "aoti_load_package"),
    "compile": ("data-dependent", "DataDependent"),
    "make_fx": ("data-dependent", "_local_scalar_dense"),
}

#: fragments of the errors of :func:`torch.export.export` on functions it cannot record
#: but :func:`_fx_graph` can (tensors made from Python numbers, :func:`torch.func.vmap`)
_EXPORT_VIA_FX = ("fake tensor in the exported program constant",)

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


@contextlib.contextmanager
def _keeping_rng(example_inputs: Sequence[torch.Tensor]) -> Iterator[None]:
    """Restore the global random generators (the CPU's, and the CUDA devices' of
    ``example_inputs``) on exit: compiling runs the function, but never takes random
    numbers from the run it compiles for."""
    devices = sorted({t.device.index or 0 for t in example_inputs if t.device.type == "cuda"})
    with torch.random.fork_rng(devices=devices):
        yield


def _fold_constants(graph: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``graph`` with every subgraph that reads no input (e.g. ``expand`` of a tensor
    the model made from a Python number) evaluated once and held as a contiguous
    constant: AOTInductor cannot lower views of constants. Random operators are
    never folded."""
    values: Dict[torch.fx.Node, torch.Tensor] = {}
    for node in graph.graph.nodes:
        if node.op == "get_attr":
            values[node] = functools.reduce(getattr, node.target.split("."), graph)
        elif (
            node.op == "call_function"
            and isinstance(node.target, torch._ops.OpOverload)
            and torch.Tag.nondeterministic_seeded not in node.target.tags
            and all(arg in values for arg in node.all_input_nodes)
        ):
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), values.__getitem__)
            value = node.target(*args, **kwargs)
            if isinstance(value, torch.Tensor):
                values[node] = value
    for i, (node, value) in enumerate(values.items()):
        if node.op == "get_attr" or all(user in values for user in node.users):
            continue
        name = "_pyro_gwg_folded_{}".format(i)
        graph.register_buffer(name, value.detach().contiguous().clone())
        with graph.graph.inserting_before(node):
            node.replace_all_uses_with(graph.graph.get_attr(name))
    graph.graph.eliminate_dead_code()
    graph.recompile()
    return graph


def _fx_graph(fn: Callable, example_inputs: Sequence[torch.Tensor]) -> torch.fx.GraphModule:
    """``fn`` as an ATen graph by :func:`~torch.fx.experimental.proxy_tensor.make_fx`,
    which follows what :func:`torch.jit.trace` and :func:`torch.export.export` cannot
    (:func:`torch.func.vmap`, tensors made from Python numbers), with its constant
    subgraphs folded (:func:`_fold_constants`)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    with _tracing_context(), _keeping_rng(example_inputs):
        return _fold_constants(make_fx(fn)(*example_inputs))


def trace_compile(fn: Callable, example_inputs: tuple) -> Callable:
    """:func:`torch.jit.trace` of ``fn`` the way Pyro's HMC does it: parameters in the
    param store frozen, validation off, tracer warnings silenced. A function the tracer
    cannot follow (one evaluating a model under :func:`torch.func.vmap`; see
    :data:`KNOWN_LIMITS`) is traced through its ATen graph (:func:`_fx_graph`), whose
    tensors become constants of the trace.

    :param callable fn: a function of tensors returning tensors.
    :param tuple example_inputs: example arguments.
    """
    with _tracing_context():
        try:
            return torch.jit.trace(fn, example_inputs, check_trace=False)
        except RuntimeError as error:
            if not any(fragment in str(error) for fragment in KNOWN_LIMITS["trace"]):
                raise
            try:
                graph = _fx_graph(fn, example_inputs)
            except Exception:  # the ATen graph fails too: the tracer's error stands
                raise error from None
        return torch.jit.trace(lambda *tensors: graph(*tensors), example_inputs, check_trace=False)


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
    program = _export(fn, example_inputs)
    compiled = torch.compile(
        program.module(),
        fullgraph=True,
        dynamic=False,
        options=_inductor_options(example_inputs),
    )
    return _on_inputs(compiled, example_inputs)


#: environment variable naming the directory of the on-disk cache of compiled packages
CACHE_ENV = "PYRO_GWG_CACHE_DIR"


def cache_dir() -> pathlib.Path:
    """The directory of the on-disk cache of AOTInductor packages (:func:`aot_compile`):
    ``$PYRO_GWG_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/pyro_gwg`` (``~/.cache``
    without it), in a folder per PyTorch version. Delete it to compile afresh.

    :rtype: pathlib.Path
    """
    root = os.environ.get(CACHE_ENV)
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "pyro_gwg")
    return pathlib.Path(root) / "aot-torch-{}".format(torch.__version__)


def _digest(parts: Sequence[object]) -> str:
    """SHA-256 of strings and tensors (by dtype, shape and bytes)."""
    sha = hashlib.sha256()
    for part in parts:
        if isinstance(part, torch.Tensor):
            flat = part.detach().cpu().contiguous().reshape(-1)
            sha.update("{}{}".format(part.dtype, tuple(part.shape)).encode())
            sha.update(flat.view(torch.uint8).numpy().tobytes())
        else:
            sha.update(str(part).encode())
        sha.update(b"\0")
    return sha.hexdigest()


def _signature(example_inputs: Sequence[torch.Tensor]) -> List[tuple]:
    return [(tuple(t.shape), t.dtype, t.stride(), t.device) for t in example_inputs]


def trace_key(traced: Callable, example_inputs: Sequence[torch.Tensor]) -> Optional[str]:
    """A key of a function compiled by :func:`trace_compile`: its TorchScript graph (the
    operators, their source lines and the shapes of its inputs) and the values of its
    tensor constants. Equal keys mean the same computation, so the key finds a package
    that :func:`aot_compile` saved for the same function before exporting it again
    (:func:`cached_aot`). ``None`` for a function that is not a TorchScript trace.

    :rtype: str or None
    """
    graph = getattr(traced, "graph", None)
    if graph is None:
        return None
    constants = [
        node.output().toIValue()
        for node in graph.nodes()
        if node.kind() == "prim::Constant" and node.output().type().kind() == "TensorType"
    ]
    return _digest(["trace", torch.__version__, graph, _signature(example_inputs), *constants])


def _package_key(program, example_inputs: Sequence[torch.Tensor]) -> str:
    """A key of an exported program: its graph, its constants and state, its inputs."""
    tensors = sorted(
        (name, t)
        for name, t in list(program.state_dict.items()) + list(program.constants.items())
        if isinstance(t, torch.Tensor)
    )
    parts = [
        "aot fallback_random",
        torch.__version__,
        program.graph_module.code,
        _signature(example_inputs),
    ]
    for name, tensor in tensors:
        parts += [name, tensor]
    return _digest(parts)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_atomically(path: pathlib.Path, write: Callable[[str], None]) -> None:
    """``write(temporary name)`` then a rename, so that readers in other processes see
    a whole file or none. The file gets the mode a new file gets under the process's
    umask (a temporary file is made ``0600``), so that a cache shared by a group
    stays readable by it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=path.suffix)
    os.close(handle)
    try:
        write(temporary)
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def _checksum_path(package: pathlib.Path) -> pathlib.Path:
    """Where the SHA-256 of the bytes of ``package`` is kept."""
    return package.with_name(package.name + ".sha256")


def _file_digest(path: pathlib.Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def _save_package(path: pathlib.Path, write: Callable[[str], None]) -> None:
    """``write(temporary name)`` of a package, renamed to ``path``, then the SHA-256 of
    its bytes beside it (:func:`_checksum_path`), which :func:`_verified` checks before
    any load."""
    _write_atomically(path, write)
    digest = _file_digest(path)
    _write_atomically(_checksum_path(path), lambda t: pathlib.Path(t).write_text(digest))


# damaged packages already reported by a CompilationWarning in this process
_DAMAGED: Set[str] = set()


def _verified(path: pathlib.Path) -> bool:
    """Whether the package at ``path`` can be loaded: it exists and its bytes hash to
    the checksum saved with it. A damaged package (a truncated or overwritten file: a
    damaged shared object inside it can kill the process that loads it) is reported
    by a :class:`CompilationWarning` naming the file, once per file in a process, and
    removed with its checksum, so that the next compilation saves it afresh; one
    without a checksum (saved by an older pyro-gwg, or being saved right now) is not
    loaded either, and a compilation overwrites it."""
    if not path.exists():
        return False
    try:
        expected = _checksum_path(path).read_text().strip()
    except OSError:
        logger.info("the cached package %s has no checksum: compiling it afresh", path)
        return False
    try:
        if _file_digest(path) == expected:
            return True
    except OSError:  # removed meanwhile: as if missing
        return False
    if str(path) not in _DAMAGED:
        _DAMAGED.add(str(path))
        warn(
            "The cached package {} is damaged (its bytes do not match the checksum saved "
            "with it); it is not loaded, and is removed to be compiled afresh.".format(path),
            CompilationWarning,
        )
    for damaged in (path, _checksum_path(path)):
        with contextlib.suppress(OSError):
            damaged.unlink()
    return False


#: the background probe of the CPU's vector instructions (see :func:`prewarm_loader`)
_PROBE: Optional[threading.Thread] = None


def prewarm_loader() -> None:
    """Start, once per process, the probe of the CPU's vector instruction sets that
    PyTorch runs before it loads the first AOTInductor package of a process (about 2 s
    of compiling test programs on a 2-core machine) in a background thread, so that it
    overlaps with tracing the transition; done only when the disk cache holds
    packages, i.e. where a load is likely. :func:`_load` waits for it."""
    global _PROBE
    if _PROBE is not None or not aot_available():
        return
    try:
        if not any(cache_dir().glob("*.pt2")):
            return
        from torch._inductor import cpu_vec_isa
    except Exception:  # no cache, or a PyTorch without this (private) module
        return

    def probe() -> None:
        try:
            cpu_vec_isa.valid_vec_isa_list()
        except Exception as error:  # the load then probes itself
            logger.debug("probing the CPU's vector instructions failed: %s", error)

    _PROBE = threading.Thread(target=probe, name="pyro_gwg-isa-probe", daemon=True)
    _PROBE.start()


def _load(path: pathlib.Path, example_inputs: Sequence[torch.Tensor]) -> Callable:
    """The package at ``path`` (checked by :func:`_verified` first), loaded (the first
    load in a process also probes the CPU's vector instructions: a few seconds, unless
    :func:`prewarm_loader` did) and called once on ``example_inputs``.

    :raises RuntimeError: naming the file, when it does not load or run."""
    if _PROBE is not None:
        _PROBE.join()
    try:
        with warnings.catch_warnings():
            # PyTorch's own deprecation notices from unpickling the package's call spec
            warnings.simplefilter("ignore", FutureWarning)
            model = torch._inductor.aoti_load_package(str(path))
        loader = getattr(model, "loader", None)
        if loader is None or not hasattr(loader, "boxed_run"):
            return _on_inputs(model, example_inputs)

        # the model's flat tensors straight to its runner: calling the model itself
        # re-reads its input and output specs and walks them at every call (0.1 ms)
        def run(*tensors: torch.Tensor):
            return loader.boxed_run(list(tensors))

        return _on_inputs(run, example_inputs)
    except Exception as error:
        raise RuntimeError(
            "the cached package {} does not load ({}: {})".format(
                path, type(error).__name__, _first_line(error)
            )
        ) from error


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def cached_aot(key: Optional[str], example_inputs: Sequence[torch.Tensor]) -> Optional[Callable]:
    """The package that :func:`aot_compile` saved under the :func:`trace_key` ``key``,
    loaded and called once on ``example_inputs``; ``None`` when there is none, when it
    is damaged (see :func:`_verified`) or when it does not load (a package of another
    machine's architecture, say: reported by a :class:`CompilationWarning` naming the
    file).

    :rtype: callable or None
    """
    if key is None:
        return None
    alias = cache_dir() / "aliases" / key
    try:
        path = cache_dir() / alias.read_text().strip()
    except OSError:  # never compiled here
        return None
    if not _verified(path):
        return None
    try:
        with _keeping_rng(example_inputs):
            return _load(path, example_inputs)
    except Exception as error:  # a foreign package: the caller compiles afresh
        _report("aot", error, ("the function compiled so far",))
        return None


def _export(fn: Callable, example_inputs: Sequence[torch.Tensor]):
    """``fn`` as an exported program: a non-strict :func:`torch.export.export`, or, for a
    function that makes tensors from Python numbers as it runs (Pyro's distributions
    do: ``Bernoulli(0.5)``) or evaluates a model under :func:`torch.func.vmap`, which
    the exporter records as fake constants it then refuses, an export of its ATen graph
    (:func:`_fx_graph`), where such tensors are real constants."""
    with _tracing_context():
        try:
            return torch.export.export(_Module(fn), example_inputs, strict=False)
        except RuntimeError as error:
            if not any(fragment in str(error) for fragment in _EXPORT_VIA_FX):
                raise
    return torch.export.export(_fx_graph(fn, example_inputs), tuple(example_inputs), strict=False)


def aot_compile(
    fn: Callable,
    example_inputs: Sequence[torch.Tensor],
    alias: Optional[str] = None,
    ops: Optional[int] = None,
) -> Callable:
    """Compile ``fn`` ahead of time, with an on-disk cache: a non-strict
    :func:`torch.export.export` of ``fn`` (its Python runs once; see :func:`_export`
    for functions that make tensors from Python numbers), then
    AOTInductor (:func:`torch._inductor.aoti_compile_and_package`) for the shapes,
    strides and devices of ``example_inputs``. The package is saved in
    :func:`cache_dir` under a hash of the exported graph, its constants and its inputs,
    with the SHA-256 of its bytes beside it, and loaded from there by every later
    compilation of the same function, in any process, once its bytes are checked
    against that checksum (a damaged package is compiled afresh, see
    :func:`_verified`). The result is called once on ``example_inputs``, so that errors surface
    here. Random operators call PyTorch's own kernels (TorchInductor's
    ``fallback_random``): a compiled call draws the same random numbers from the global
    generator as the same function run eagerly or traced.

    :param callable fn: a function of tensors returning a tuple of tensors.
    :param example_inputs: example arguments.
    :param str alias: a :func:`trace_key` of the same function, recorded so that
        :func:`cached_aot` finds the package without exporting again.
    :param int ops: the operator count of the function's trace, recorded with the
        compile time for :func:`estimated_compile_seconds`.
    :raises Exception: whatever the exporter or the compiler raises.
    """
    example_inputs = tuple(t.contiguous() for t in example_inputs)
    program = _export(fn, example_inputs)
    name = _package_key(program, example_inputs) + ".pt2"
    path = cache_dir() / name
    if not _verified(path):
        start = time.perf_counter()
        from torch._inductor import config as inductor_config

        # random operators call PyTorch's own (fallback_random): they draw from the
        # global generator exactly as the traced and eager transitions do, so a run
        # gives the same draws for a seed whichever compiler ran which steps
        with warnings.catch_warnings(), inductor_config.patch(fallback_random=True):
            warnings.simplefilter("ignore", FutureWarning)  # PyTorch's own notices
            _save_package(
                path,
                lambda temporary: torch._inductor.aoti_compile_and_package(
                    program, package_path=temporary
                ),
            )
        if ops is not None:
            _record_compile(ops, time.perf_counter() - start, example_inputs[0].device.type)
    if alias is not None:
        aliased = cache_dir() / "aliases" / alias
        _write_atomically(aliased, lambda temporary: pathlib.Path(temporary).write_text(name))
    return _load(path, example_inputs)


def aot_available() -> bool:
    """Whether this PyTorch has AOTInductor packages (2.6 and later): without them
    ``"auto"`` stays with :func:`trace_compile`.

    :rtype: bool
    """
    import torch._inductor

    return hasattr(torch._inductor, "aoti_compile_and_package") and hasattr(
        torch._inductor, "aoti_load_package"
    )


def trace_ops(traced: Callable) -> Optional[int]:
    """The number of ATen operators in a function compiled by :func:`trace_compile`
    (``None`` for another function): the size the cost model prices compilation by.

    :rtype: int or None
    """
    graph = getattr(traced, "graph", None)
    if graph is None:
        return None
    return sum(1 for node in graph.nodes() if node.kind().startswith("aten::"))


def try_aot_compile(
    fn: Callable,
    example_inputs: Sequence[torch.Tensor],
    alias: Optional[str] = None,
    ops: Optional[int] = None,
) -> Optional[Callable]:
    """:func:`aot_compile`, or ``None`` when it fails (reported as by
    :func:`compile_function`: a debug log for a known limit, else a
    :class:`CompilationWarning` once per kind of error).

    :rtype: callable or None
    """
    try:
        with _keeping_rng(example_inputs):
            return aot_compile(fn, example_inputs, alias, ops)
    except Exception as error:  # any compiler failure: the caller keeps what it has
        _report("aot", error, ("the function compiled so far",))
        return None


#: the cost model's prior for a compilation by :func:`aot_compile`, in seconds: a fixed
#: part ... (fitted to GWG transitions compiled on a 2-core machine: 12-24 s for
#: 135-233 operators in the trace, Ising and hidden Markov models; 29-40 s for 2,901,
#: a model with 60 sites in a pyro.markov loop)
COMPILE_SECONDS_FIXED = 15.0
#: ... and a part per operator of the function's trace (:func:`trace_ops`)
COMPILE_SECONDS_PER_OP = 0.007
#: the cost model's prior for the time of a transition compiled by :func:`aot_compile`,
#: as a fraction of its time under :func:`trace_compile` (0.08-0.14 measured for one
#: GWG transition of a 10 x 10 Ising model, 16 chains; rounded up)
AOT_TIME_FRACTION = 0.2
_STATS_FILE = "compile_times.json"
_STATS_KEPT = 32


def _read_stats() -> List[dict]:
    try:
        return json.loads((cache_dir() / _STATS_FILE).read_text())
    except Exception:  # no record yet, or a partial one
        return []


def _record_compile(ops: int, seconds: float, device: str) -> None:
    records = _read_stats() + [{"ops": int(ops), "seconds": float(seconds), "device": device}]
    text = json.dumps(records[-_STATS_KEPT:])
    _write_atomically(cache_dir() / _STATS_FILE, lambda t: pathlib.Path(t).write_text(text))


def estimated_compile_seconds(ops: Optional[int], device: str = "cpu") -> float:
    """Predicted seconds for :func:`aot_compile` of a function whose trace has ``ops``
    operators: the prior :data:`COMPILE_SECONDS_FIXED` + :data:`COMPILE_SECONDS_PER_OP`
    x ``ops``, scaled by the median ratio of measured to predicted times of the
    compilations recorded on this machine (the cache keeps the last 32).

    :param int ops: operator count (``None``: unknown, 500 assumed).
    :param str device: device type; records of other devices are not used.
    :rtype: float
    """

    def prior(n: Optional[int]) -> float:
        return COMPILE_SECONDS_FIXED + COMPILE_SECONDS_PER_OP * (500 if n is None else n)

    ratios = sorted(
        r["seconds"] / prior(r["ops"]) for r in _read_stats() if r.get("device") == device
    )
    scale = ratios[len(ratios) // 2] if ratios else 1.0
    return scale * prior(ops)


#: a compilation expected to take at least this many seconds is announced (:func:`announce`)
ANNOUNCE_SECONDS = 1.0


def announce(compiler: str, seconds: float, note: str = "") -> str:
    """Say that a compilation expected to take ``seconds`` starts: where it is expected
    to take at least :data:`ANNOUNCE_SECONDS`, one line on standard error (written
    with :func:`tqdm.tqdm.write`, above any progress bar: Pyro's and pyro-gwg's) that
    says what is compiled, the seconds expected and how to run without it.

    :param str compiler: what compiles, e.g. ``"AOTInductor"``.
    :param float seconds: the expected compile time.
    :param str note: a remark added to the line (e.g. that the result is cached).
    :returns: the short form, for a progress bar.
    :rtype: str
    """
    if seconds >= ANNOUNCE_SECONDS:
        tqdm.write(
            "pyro-gwg: compiling the transition with {}, about {:.0f} s{}; "
            "jit_compile=True (TorchScript only) or False runs without it.".format(
                compiler, seconds, " ({})".format(note) if note else ""
            ),
            file=sys.stderr,
        )
    return "compiling with {}, about {:.0f} s".format(compiler, seconds)


def worth_compiling(
    seconds_per_call: float,
    calls_left: Optional[int],
    seconds_spent: float,
    compile_seconds: float,
    time_fraction: float = AOT_TIME_FRACTION,
) -> bool:
    r"""The cost model of the ``"auto"`` compilation mode: whether to stop calling a
    cheaply compiled function and compile it with :func:`aot_compile`.

    With a known number of calls left :math:`n`, compile when the time it saves,
    :math:`n\,t\,(1 - f)` for :math:`t` seconds per call now and a compiled call
    taking a fraction :math:`f` of that, exceeds the compile time :math:`c`: a
    compilation that cannot pay back before the run ends is never started. (The
    kernels learn the length of a run from :class:`pyro_gwg.MCMC`, and from
    :class:`pyro.infer.MCMC`'s sampling loop, see
    ``pyro_gwg._trace.pyro_run_length``.) With an unknown horizon, compile once
    the time already spent in the function reaches :math:`c`: the rule of ski rental,
    which never spends more than twice the time of the best choice made knowing the
    future.

    :param float seconds_per_call: :math:`t`.
    :param calls_left: :math:`n`, or ``None`` when unknown.
    :param float seconds_spent: time spent in the function so far.
    :param float compile_seconds: :math:`c` (:func:`estimated_compile_seconds`).
    :param float time_fraction: :math:`f`.
    :rtype: bool
    """
    if calls_left is None:
        return seconds_spent >= compile_seconds
    return calls_left * seconds_per_call * (1.0 - time_fraction) > compile_seconds


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

    example_inputs = [t.contiguous() for t in example_inputs]
    graph = _fx_graph(fn, example_inputs)
    # the compiler propagates shapes afresh; the C++ wrapper needs that (it refuses
    # the tracer's fake tensors)
    for node in graph.graph.nodes:
        node.meta.pop("val", None)
        node.meta.pop("tensor_meta", None)
    with inductor_config.patch(**_inductor_options(example_inputs)):
        compiled = compile_fx(graph, example_inputs)
    return _on_inputs(compiled, example_inputs)


_COMPILERS = {
    "aot": aot_compile,
    "compile": export_compile,
    "make_fx": make_fx_compile,
    "trace": trace_compile,
}


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
        value, grad, move, _ = _COMPILERS["aot"](_probe, (x,))(x)
        eager_value, eager_grad, _, _ = _probe(x)
        if not (torch.equal(value, eager_value) and torch.equal(grad, eager_grad)):
            raise RuntimeError("the compiled probe disagrees with the eager one")
        if move.shape != (2, 1):
            raise RuntimeError("the compiled probe draws moves of shape {}".format(move.shape))
    except Exception as error:  # any failure means: not this compiler here
        logger.debug("AOTInductor unavailable (%s: %s); using trace", type(error).__name__, error)
        return "trace"
    return "aot"


def choose_backend(device: torch.device | str = "cpu") -> str:
    """The compiler that ``backend="default"`` means on ``device``: ``"aot"`` when
    :func:`aot_compile` compiles and runs a small transition-like function (a
    gradient inside, random draws) and agrees with eager mode, else ``"trace"``. The
    probe runs once per process and device type (about ten seconds the first time on
    a machine, milliseconds once its package is in the cache).

    :param device: a device or its name.
    :rtype: str
    """
    return _choose_backend(torch.device(device).type)


def _resolve(backend: str, device: torch.device | str) -> str:
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
        name, type(error).__name__, _first_line(error), then
    )
    key = (name, type(error).__name__)
    if any(fragment in text for fragment in KNOWN_LIMITS[name]) or key in _WARNED:
        logger.debug(message)
        return
    _WARNED.add(key)
    warn(message, CompilationWarning)


def compile_function(fn: Callable, example_inputs: tuple, backend: str) -> Optional[Callable]:
    """``fn`` compiled by ``backend``, or by one of its fallbacks when that fails (see
    the module's description for which fallbacks are logged and which warned about);
    ``None`` when every one fails, for the caller to run ``fn`` eagerly.

    :param callable fn: a function of tensors returning a tuple of tensors.
    :param tuple example_inputs: example arguments (tensors).
    :param str backend: ``"default"`` (the compiler :func:`choose_backend` picks for
        the device of ``example_inputs``), ``"aot"``, ``"compile"``, ``"make_fx"`` or
        ``"trace"``.
    :rtype: callable or None
    :raises ValueError: for an unknown ``backend``.
    """
    device = example_inputs[0].device if example_inputs else "cpu"
    backend = _resolve(backend, device)
    chain = (backend,) + FALLBACKS[backend]
    for i, name in enumerate(chain):
        try:
            with _keeping_rng(example_inputs):
                return _COMPILERS[name](fn, example_inputs)
        except Exception as error:  # any compiler failure: hand over to the next one
            _report(name, error, chain[i + 1 :])
    return None
