"""The compilers of pure tensor functions (whole sampler transitions).

The functions compiled here map tensors to a tuple of tensors and may contain a backward
pass (a ``torch.autograd.grad`` inside) and random operators. Every compilation starts
from one **capture** (:func:`capture`): the function's Python (a Pyro model with its
handlers, a kernel's proposal) runs once under
:func:`~torch.fx.experimental.proxy_tensor.make_fx` and is recorded as a graph of ATen
operators, the backward pass of any ``torch.autograd.grad`` written out, subgraphs that
read no input folded into constants. The graph is a pure function of its tensors: no
Pyro handler, no autograd, no Python control flow of the model is left in it. Three
backends take it from there:

* ``"graph"``: the captured graph itself, run by Python (each ATen operator called in
  turn). Ready as soon as captured; cheaper per call than the model run eagerly.
* ``"aot"``: AOTInductor. The graph is exported (:func:`torch.export.export`) and
  compiled ahead of time (:func:`torch._inductor.aoti_compile_and_package`) into a
  package of fused C++ (or GPU) kernels with a C++ runner, saved in an on-disk cache
  (:func:`cache_dir`) under a hash of the graph, its constants and the shapes of its
  inputs (:func:`graph_key`). Tens of seconds the first time; any later run of the same
  transition, in any process, loads the package in milliseconds. The default mode
  compiles it in a background process while the chains run on the graph (see
  :mod:`pyro_gwg.compile.background`).
* ``"make_fx"``: TorchInductor's own entry point (a private ``torch._inductor`` API,
  so opt-in only), in process; seconds to compile, about as fast per call as
  ``"aot"``, not cached on disk.

Which ``jit_compile`` value runs which backend, and when, is the one table
:data:`pyro_gwg.compile.modes.JIT_COMPILE`. A compilation expected to take a second or
more is announced in one line on standard error (:func:`announce`).

A backend that fails hands over to the caller, which runs what it ran before (the
graph, or the model eagerly). A failure the backend is known for (a documented limit,
see :data:`KNOWN_LIMITS`) is an expected fallback, logged at debug level; any other
failure is reported by a :class:`CompilationWarning`, once per backend and kind of
error in a process. Either way the model's Python control flow must not depend on
latent values: a capture records one path (the model bridge checks this, see
:class:`pyro_gwg.ModelDensity`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import pathlib
import platform
import sys
import tempfile
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import pyro
import torch
from tqdm.auto import tqdm

from pyro_gwg._warn import warn

__all__ = [
    "ANNOUNCE_SECONDS",
    "BACKENDS",
    "CACHE_ENV",
    "KNOWN_LIMITS",
    "CompilationWarning",
    "announce",
    "aot_available",
    "aot_compile",
    "cache_dir",
    "cached_package",
    "capture",
    "compile_function",
    "cpu_key",
    "graph_key",
    "load_package",
    "make_fx_compile",
]

logger = logging.getLogger(__name__)

#: the backends (see the module's description)
BACKENDS = ("graph", "aot", "make_fx")

#: fragments of the error messages of failures a backend is known for: falling back
#: from them is expected (logged at debug level, no warning)
KNOWN_LIMITS: Dict[str, Tuple[str, ...]] = {
    # a capture records shapes and values as they are: data-dependent operators fail
    "graph": ("data-dependent", "DataDependent", "_local_scalar_dense"),
    # ... and PyTorch before 2.6 has no AOTInductor packages
    "aot": ("data-dependent", "DataDependent", "aoti_compile_and_package", "aoti_load_package"),
    "make_fx": ("data-dependent", "_local_scalar_dense"),
}

# (backend, error type) pairs already reported by a CompilationWarning in this process
_WARNED: Set[Tuple[str, str]] = set()


class CompilationWarning(UserWarning):
    """A compiler failed on a transition; a slower path (or eager mode) runs instead."""


@contextlib.contextmanager
def _tracing_context() -> Iterator[None]:
    """The conditions a capture runs under (those of Pyro's HMC when it traces):
    parameters in the param store frozen, distribution validation off."""
    frozen = [p for _, p in pyro.get_param_store().named_parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        with pyro.validation_enabled(False):
            yield
    finally:
        for p in frozen:
            p.requires_grad_(True)


def _one_fake_mode() -> contextlib.AbstractContextManager:
    """A context in which a capture's node metadata shares one fake-tensor mode.

    Tracing real tensors, :func:`~torch.fx.experimental.proxy_tensor.make_fx` records
    each value's metadata through the ambient fake mode, or else through a new
    ``FakeTensorMode`` per value, each of which extracts the Python stack: about a
    third of a capture, more under a deep stack. A tracing context holding one mode is
    the ambient mode. (The make_fx of PyTorch 2.1 makes a new mode per value whatever
    the context.) ``torch._guards`` is private: where it is missing the capture runs
    without it, as before (it changes no node of the graph, and :func:`capture`'s
    callers check the graph against the eager step)."""
    try:
        from torch._guards import TracingContext, tracing
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError:  # pragma: no cover (a PyTorch without them)
        return contextlib.nullcontext()
    return tracing(TracingContext(FakeTensorMode(allow_fallback_kernels=True)))


@contextlib.contextmanager
def keeping_rng(example_inputs: Sequence[torch.Tensor]) -> Iterator[None]:
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
    never folded. The tensors that only the folded subgraphs read are dropped (the
    graph's key and its export hold none that no node reads)."""
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
    read = {node.target for node in graph.graph.nodes if node.op == "get_attr"}
    for name, _ in list(graph.named_buffers()):  # (those of the folded subgraphs)
        if name not in read:
            delattr(graph, name)
    graph.recompile()
    return graph


def capture(fn: Callable, example_inputs: Sequence[torch.Tensor]) -> torch.fx.GraphModule:
    """``fn`` captured as a pure graph of ATen operators: its Python runs once on
    ``example_inputs`` under :func:`~torch.fx.experimental.proxy_tensor.make_fx` (which
    follows :func:`torch.func.vmap`, ``torch.autograd.grad`` and tensors made from
    Python numbers), parameters in the param store frozen and validation off, without
    taking random numbers from the caller's stream; Python may read the values of
    tensors that depend on no input (:func:`_constant_reads`), and a graph that read a
    value computed from the inputs is refused (:func:`_refuse_input_reads`); subgraphs
    that read no input are folded into constants (:func:`_fold_constants`). Calling
    the graph runs each operator in turn, random operators included (a call draws
    what the function itself would draw from the global generator).

    :param callable fn: a function of tensors returning a tuple of tensors.
    :param example_inputs: example arguments (their shapes, dtypes and devices are
        those of every later call).
    :rtype: torch.fx.GraphModule
    :raises Exception: whatever ``fn`` raises under the capture (a ``RuntimeError``
        naming a "data-dependent" operator for a read of an input's value).
    """
    from torch.fx.experimental.proxy_tensor import make_fx

    with _tracing_context(), keeping_rng(example_inputs), _one_fake_mode():
        graph = make_fx(fn, **_constant_reads(make_fx))(*example_inputs)
    _refuse_input_reads(graph)
    return _fold_constants(graph)


def _constant_reads(make_fx: Callable) -> dict:
    """The options of ``make_fx`` under which Python may read the value of a tensor
    (``.item()``, ``int()``, a ``for`` loop over its elements, a slice bound): the
    length of a sequence in the model's data, the indices of a sequential plate, as
    Pyro's HMM and annotation examples are written. ``make_fx`` refuses every such read
    by default, of a constant as of a value computed from the inputs;
    :func:`_refuse_input_reads` refuses the second kind after the capture. Empty for a
    PyTorch whose ``make_fx`` has no such option (every read refused, as before)."""
    import inspect

    option = "_error_on_data_dependent_ops"
    return {option: False} if option in inspect.signature(make_fx).parameters else {}


def _refuse_input_reads(graph: torch.fx.GraphModule) -> None:
    """Refuse a captured graph in which an operator whose output depends on the values
    of its operands (``_local_scalar_dense`` of a read, ``nonzero``, ``equal``: tagged
    ``data_dependent_output``) reads a tensor computed from the graph's inputs: the
    capture recorded the value it read at the example (a branch on a latent value, a
    shape that depends on one), which later calls would not follow. Reads of tensors
    that depend on no input (the model's data, tensors made from Python numbers) are
    constants.

    :raises RuntimeError: naming the operator (a "data-dependent" capture failure, see
        :data:`KNOWN_LIMITS`).
    """
    from_inputs: Set[torch.fx.Node] = set()
    for node in graph.graph.nodes:
        if node.op == "placeholder" or any(a in from_inputs for a in node.all_input_nodes):
            from_inputs.add(node)
        target = node.target
        if (
            node in from_inputs
            and isinstance(target, torch._ops.OpOverload)
            and torch.Tag.data_dependent_output in target.tags
        ):
            raise RuntimeError(
                "data-dependent operator {} reads a value computed from the inputs (Python "
                "control flow or a shape that depends on a latent value)".format(target)
            )


def _on_inputs(compiled: Callable, example_inputs: Sequence[torch.Tensor]) -> Callable:
    """``compiled`` called once on ``example_inputs`` (without taking random numbers
    from the caller's stream), so that errors surface at compilation."""
    with keeping_rng(example_inputs):
        compiled(*example_inputs)
    return compiled


#: environment variable naming the directory of the on-disk cache of compiled packages
CACHE_ENV = "PYRO_GWG_CACHE_DIR"


def cache_dir() -> pathlib.Path:
    """The directory of the on-disk cache of AOTInductor packages (:func:`aot_compile`):
    ``$PYRO_GWG_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/pyro_gwg`` (``~/.cache``
    without it), in a folder per PyTorch version and CPU (:func:`cpu_key`: a package
    holds machine code for the CPU it was compiled on, so machines that share a home
    directory keep apart). Delete it to compile afresh.

    :rtype: pathlib.Path
    """
    root = os.environ.get(CACHE_ENV)
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "pyro_gwg")
    return pathlib.Path(root) / "aot-torch-{}-{}".format(torch.__version__, cpu_key())


@functools.cache
def cpu_key() -> str:
    """The CPU in a cache folder's name: its architecture and the first 12 hex digits of
    the SHA-256 of its instruction-set flags (the ``flags`` or ``Features`` line of
    ``/proc/cpuinfo``; elsewhere, :func:`platform.processor`), e.g.
    ``x86_64-3f2a9c01b7de``.

    :rtype: str
    """
    flags = None
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as info:
            for line in info:
                name, _, value = line.partition(":")
                if name.strip() in ("flags", "Features"):
                    flags = " ".join(sorted(value.split()))
                    break
    if flags is None:
        flags = platform.processor()
    digest = hashlib.sha256(flags.encode()).hexdigest()[:12]
    return "{}-{}".format(platform.machine() or "unknown", digest)


def _digest(parts: Sequence[object]) -> str:
    """SHA-256 of strings and tensors (by dtype, shape and bytes)."""
    sha = hashlib.sha256()
    for part in parts:
        if isinstance(part, torch.Tensor):
            sha.update("{}{}".format(part.dtype, tuple(part.shape)).encode())
            if part.numel():
                flat = part.detach().cpu().contiguous().reshape(-1)
                sha.update(flat.view(torch.uint8).numpy().tobytes())
        else:
            sha.update(str(part).encode())
        sha.update(b"\0")
    return sha.hexdigest()


def _signature(example_inputs: Sequence[torch.Tensor]) -> List[tuple]:
    return [(tuple(t.shape), t.dtype, t.stride(), t.device) for t in example_inputs]


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


def load_package(path: pathlib.Path) -> Callable:
    """The package at ``path`` loaded, as a function of the flat tensors of the captured
    graph returning a list of tensors. Not called: the caller's first call shows
    whether it runs.

    The package's runner is PyTorch's own loader (``AOTIModelPackageLoader``, as
    :func:`torch._inductor.package.load_package` makes it) made directly: through
    :func:`torch._inductor.aoti_load_package`, the first load of a process compares the
    package's CPU with this one's, which probes the CPU's vector instructions by
    building and loading test libraries in ten child processes (1.5 s, which the chains
    waited for), only to log a warning on a mismatch. The cache keeps packages apart by
    CPU instead (:func:`cache_dir`). Where that loader is missing or takes other
    arguments (another PyTorch), the package loads through
    :func:`torch._inductor.aoti_load_package`.

    :raises RuntimeError: naming the file, when it does not load."""
    try:
        loader = _package_loader(str(path))
    except Exception as error:
        raise RuntimeError(
            "the cached package {} does not load ({}: {})".format(
                path, type(error).__name__, _first_line(error)
            )
        ) from error
    if not hasattr(loader, "boxed_run"):
        return loader
    boxed_run = loader.boxed_run

    # the flat tensors straight to the package's runner (calling the model itself
    # re-reads its input and output specs and walks them at every call: 0.1 ms), laid
    # out as at compilation: the compiled kernels read them with the example's strides
    def run(*tensors: torch.Tensor):
        return boxed_run([t.contiguous() for t in tensors])

    return run


def _package_loader(path: str):
    """The runner of the package at ``path`` (see :func:`load_package`): its loader, or
    the loaded model (callable) where no loader with ``boxed_run`` can be had."""
    make = getattr(getattr(torch._C, "_aoti", None), "AOTIModelPackageLoader", None)
    if make is not None:
        try:  # (path, model name, run single-threaded, runners, device index)
            return make(path, "model", False, 1, -1)
        except TypeError:  # another PyTorch's signature
            pass
    model = torch._inductor.aoti_load_package(path)
    loader = getattr(model, "loader", None)
    return loader if hasattr(loader, "boxed_run") else model


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def graph_key(graph: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> str:
    """The name of a captured graph (:func:`capture`) in the disk cache: a hash of its
    code, the values of its constants, the shapes, dtypes, strides and devices of its
    inputs, the PyTorch version and the compiler settings. Equal keys mean the same
    computation compiled the same way.

    :rtype: str
    """
    constants = sorted(
        (name, t) for name, t in graph.state_dict().items() if isinstance(t, torch.Tensor)
    )
    parts = ["aot fallback_random", torch.__version__, graph.code, _signature(example_inputs)]
    for name, tensor in constants:
        parts += [name, tensor]
    return _digest(parts)


def package_path(key: str) -> pathlib.Path:
    """Where the package of the graph of :func:`graph_key` ``key`` is saved."""
    return cache_dir() / (key + ".pt2")


def cached_package(key: str) -> Optional[Callable]:
    """The package saved under ``key`` (:func:`graph_key`), loaded
    (:func:`load_package`); ``None`` when there is none, when it is damaged (see
    :func:`_verified`) or when it does not load (a package of another machine's
    architecture, say: reported by a :class:`CompilationWarning` naming the file).

    :rtype: callable or None
    """
    path = package_path(key)
    if not _verified(path):
        return None
    try:
        return load_package(path)
    except Exception as error:  # a foreign package: the caller compiles afresh
        report_failure("aot", error, "compiling it afresh")
        return None


def save_aot_package(
    graph: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor], key: str
) -> pathlib.Path:
    """Compile a captured graph (:func:`capture`) ahead of time and save the package in
    the disk cache under ``key`` (:func:`graph_key`), unless a whole package is there
    already: the graph is exported (:func:`torch.export.export`, non-strict: it holds
    ATen operators only) and compiled by AOTInductor
    (:func:`torch._inductor.aoti_compile_and_package`) for the shapes, strides and
    devices of ``example_inputs``, with the SHA-256 of the package's bytes saved beside
    it (a damaged package is compiled afresh, see :func:`_verified`). Random operators
    call PyTorch's own kernels (TorchInductor's ``fallback_random``): a compiled call
    draws the same random numbers from the global generator as the graph, or the
    function it captured, run eagerly.

    This is what the background compiler's worker process runs
    (:mod:`pyro_gwg.compile.background`).

    :param torch.fx.GraphModule graph: the captured graph.
    :param example_inputs: example arguments.
    :param str key: its :func:`graph_key`.
    :returns: the package's path.
    :raises Exception: whatever the exporter or the compiler raises.
    """
    path = package_path(key)
    if _verified(path):
        return path
    return compile_program(export_graph(graph, example_inputs), key)


class _Ref:
    """A node of a graph, by its position (in :func:`graph_data`); not a tuple, so
    that :func:`torch.fx.node.map_aggregate` treats it as a leaf."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def graph_data(graph: torch.fx.GraphModule) -> dict:
    """A captured graph (:func:`capture`) as data that pickles faithfully, for a
    worker process (:func:`graph_from_data` rebuilds it): its nodes in order, each with
    its operator (an ATen operator by name), arguments (nodes as positions) and name,
    the tensors its ``get_attr`` nodes read, and its code. (A pickled graph module
    retraces its code when loaded, and the retrace evaluates an operator that reads no
    tensor, such as ``aten.rand``, once, into a constant: a random draw would repeat at
    every call.)

    :raises ValueError: for a node other than a placeholder, a constant of the graph
        itself, a function call or the output (a capture makes no other).
    """
    index: Dict[torch.fx.Node, int] = {}
    nodes, constants = [], {}
    for node in graph.graph.nodes:
        if node.op not in ("placeholder", "get_attr", "call_function", "output") or (
            node.op == "get_attr" and "." in node.target
        ):
            raise ValueError("a captured graph has no {} node ({})".format(node.op, node.name))
        target = node.target
        if isinstance(target, torch._ops.OpOverload):
            namespace, name = target._schema.name.split("::")
            target = ("op", namespace, name, target._overloadname)
        elif node.op == "get_attr":
            constants[target] = getattr(graph, target)
        index[node] = len(nodes)
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: _Ref(index[n]))
        nodes.append((node.op, target, args, kwargs, node.name))
    return {"nodes": nodes, "constants": constants, "code": graph.code}


def graph_from_data(data: dict) -> torch.fx.GraphModule:
    """The graph that :func:`graph_data` described, checked against its code.

    :raises RuntimeError: if the rebuilt graph's code differs from the original's.
    """
    graph = torch.fx.Graph()
    nodes: List[torch.fx.Node] = []
    for op, target, args, kwargs, name in data["nodes"]:
        if isinstance(target, tuple) and target[:1] == ("op",):
            _, namespace, op_name, overload = target
            target = getattr(getattr(getattr(torch.ops, namespace), op_name), overload)
        args, kwargs = torch.fx.node.map_aggregate(
            (args, kwargs), lambda a: nodes[a.index] if isinstance(a, _Ref) else a
        )
        nodes.append(graph.create_node(op, target, args, kwargs, name))
    module = torch.fx.GraphModule(dict(data["constants"]), graph)
    if module.code != data["code"]:
        raise RuntimeError("the graph rebuilt from its data differs from the captured graph")
    return module


def export_graph(graph: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]):
    """A captured graph as an exported program (:func:`torch.export.export`,
    non-strict: the graph holds ATen operators only, no Pyro), for contiguous inputs
    of the example's shapes, dtypes and devices."""
    example_inputs = tuple(t.contiguous() for t in example_inputs)
    return torch.export.export(graph, example_inputs, strict=False)


def compile_program(program, key: str) -> pathlib.Path:
    """An exported program (:func:`export_graph`) compiled by AOTInductor and saved in
    the disk cache under ``key``, with its checksum (see :func:`save_aot_package`).

    :returns: the package's path.
    """
    from torch._inductor import config as inductor_config

    path = package_path(key)
    # random operators call PyTorch's own (fallback_random): they draw from the global
    # generator exactly as the graph run eagerly does, so a run gives the same draws
    # for a seed whichever form ran which steps
    with inductor_config.patch(fallback_random=True):
        _save_package(
            path,
            lambda temporary: torch._inductor.aoti_compile_and_package(
                program, package_path=temporary
            ),
        )
    return path


def aot_compile(graph: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> Callable:
    """A captured graph compiled by AOTInductor in this process, through the disk cache
    (:func:`save_aot_package`, :func:`load_package`), and called once on
    ``example_inputs`` so that errors surface here.

    :param torch.fx.GraphModule graph: the captured graph (:func:`capture`).
    :param example_inputs: example arguments.
    :raises Exception: whatever the exporter, the compiler or the loader raises.
    """
    path = save_aot_package(graph, example_inputs, graph_key(graph, example_inputs))
    return _on_inputs(load_package(path), example_inputs)


def aot_available() -> bool:
    """Whether this PyTorch has AOTInductor packages (2.6 and later): without them the
    default mode runs the captured graph (see :mod:`pyro_gwg.compile.modes`).

    :rtype: bool
    """
    import torch._inductor

    return hasattr(torch._inductor, "aoti_compile_and_package") and hasattr(
        torch._inductor, "aoti_load_package"
    )


#: a compilation expected to take at least this many seconds is announced (:func:`announce`)
ANNOUNCE_SECONDS = 1.0


def announce(compiler: str, seconds: float, note: str = "") -> str:
    """Say that a compilation expected to take about ``seconds`` starts: from
    :data:`ANNOUNCE_SECONDS` on, one line on standard error (written with
    :func:`tqdm.tqdm.write`, above any progress bar: Pyro's and pyro-gwg's) that says
    what is compiled, the seconds expected and how to run without it.

    :param str compiler: what compiles, e.g. ``"AOTInductor"``.
    :param float seconds: the expected compile time.
    :param str note: a remark added to the line (e.g. that sampling goes on meanwhile).
    :returns: the short form, for a progress bar.
    :rtype: str
    """
    if seconds >= ANNOUNCE_SECONDS:
        tqdm.write(
            "pyro-gwg: compiling the transition with {}, about {:.0f} s{}; "
            "jit_compile=True (the captured graph only) or False runs without it.".format(
                compiler, seconds, " ({})".format(note) if note else ""
            ),
            file=sys.stderr,
        )
    return "compiling with {}, about {:.0f} s".format(compiler, seconds)


def make_fx_compile(
    graph: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]
) -> Callable:
    """A captured graph (:func:`capture`) compiled by TorchInductor's private entry point
    ``compile_fx`` in this process, for the shapes, strides and devices of
    ``example_inputs``: faster to compile than :func:`aot_compile` and about as fast per
    call, but tied to PyTorch internals and not cached on disk (opt-in:
    ``jit_compile="make_fx"``). Called once on ``example_inputs``.

    :param torch.fx.GraphModule graph: the captured graph.
    :param example_inputs: example arguments.
    :raises Exception: whatever the compiler raises.
    """
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx

    example_inputs = [t.contiguous() for t in example_inputs]
    # the compiler propagates shapes afresh; the C++ wrapper needs that (it refuses
    # the capture's fake tensors)
    for node in graph.graph.nodes:
        node.meta.pop("val", None)
        node.meta.pop("tensor_meta", None)
    options = {"cpp_wrapper": all(t.device.type == "cpu" for t in example_inputs)}
    with inductor_config.patch(fallback_random=True, **options):
        compiled = compile_fx(graph, example_inputs)
    return _on_inputs(compiled, example_inputs)


def report_failure(name: str, error: Exception, then: str) -> None:
    """A debug log for a failure the backend ``name`` is known for (see
    :data:`KNOWN_LIMITS`), else a :class:`CompilationWarning` once per backend and
    error type in a process, saying what runs instead (``then``)."""
    text = str(error).strip()
    message = "Compiling the transition with {} failed ({}: {}); {}.".format(
        name, type(error).__name__, _first_line(error), then
    )
    key = (name, type(error).__name__)
    if any(fragment in text for fragment in KNOWN_LIMITS[name]) or key in _WARNED:
        logger.debug(message)
        return
    _WARNED.add(key)
    warn(message, CompilationWarning)


_COMPILERS = {"aot": aot_compile, "make_fx": make_fx_compile}


def compile_function(
    fn: Callable, example_inputs: Sequence[torch.Tensor], backend: str
) -> Optional[Callable]:
    """``fn`` captured (:func:`capture`) and, for ``"aot"`` and ``"make_fx"``,
    compiled, in this process; ``None`` when that fails (a debug log for a known
    limit, else a :class:`CompilationWarning`), for the caller to run ``fn`` eagerly.
    A compiled function takes the same positional tensors and returns a sequence of
    tensors.

    :param callable fn: a function of tensors returning a tuple of tensors.
    :param example_inputs: example arguments (tensors).
    :param str backend: ``"graph"``, ``"aot"`` or ``"make_fx"``.
    :rtype: callable or None
    :raises ValueError: for an unknown ``backend``.
    """
    if backend not in BACKENDS:
        raise ValueError("backend must be one of {}, got {!r}".format(BACKENDS, backend))
    try:
        graph = capture(fn, example_inputs)
    except Exception as error:  # the function cannot be captured: eager
        report_failure("graph", error, "running it eagerly")
        return None
    if backend == "graph":
        return graph
    try:
        return _COMPILERS[backend](graph, example_inputs)
    except Exception as error:  # the compiler failed: the captured graph runs
        report_failure(backend, error, "running its captured graph")
        return graph
