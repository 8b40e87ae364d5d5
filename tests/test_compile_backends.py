"""The compilers of pyro_gwg.compile.backends: the capture of a function as a pure graph,
the compilers of that graph against eager mode, the disk cache of AOTInductor packages,
and the fallbacks."""

import inspect
import os
import pathlib
import pickle
import re
import stat
import warnings

import pyro
import pytest
import torch

import pyro_gwg.compile.backends as backends
from pyro_gwg.compile import CompilationWarning

#: AOTInductor packages exist from PyTorch 2.6 on
needs_aot = pytest.mark.skipif(
    not backends.aot_available(), reason="no AOTInductor packages in this PyTorch"
)


def _transition(x):
    """What a transition does: a gradient with respect to a tensor made inside, a
    categorical draw and a uniform one."""
    with torch.enable_grad():
        relaxed = x.float().requires_grad_()
        value = (relaxed * relaxed.roll(1, -1)).sum(-1)
        (grad,) = torch.autograd.grad(value.sum(), relaxed)
    move = torch.multinomial(torch.softmax(grad, -1), 1)
    return value.detach(), grad, move, torch.rand(x.shape[0], device=x.device)


X = torch.tensor([[0, 1, 1, 0, 1], [1, 1, 0, 1, 0], [0, 0, 0, 1, 1]])


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    # surprising failures are reported once per process: each test starts afresh
    monkeypatch.setattr(backends, "_WARNED", set())


def _agrees(fn, seed=3):
    pyro.set_rng_seed(seed)
    out = fn(X)
    pyro.set_rng_seed(seed)
    expected = _transition(X)
    assert len(out) == len(expected)
    for got, want in zip(out, expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert torch.allclose(got.float(), want.float())


def test_the_capture_is_a_pure_graph_that_draws_what_the_function_draws():
    state = torch.get_rng_state()
    graph = backends.capture(_transition, (X,))
    assert torch.equal(torch.get_rng_state(), state)  # the capture draws nothing
    assert isinstance(graph, torch.fx.GraphModule)
    targets = {str(n.target) for n in graph.graph.nodes if n.op == "call_function"}
    # the backward pass is written out: no autograd call is left in the graph
    assert not any("autograd" in t for t in targets)
    _agrees(graph)
    _agrees(graph, seed=4)  # random operators draw afresh at each call


def _make_fx_reads_the_ambient_fake_mode() -> bool:
    from torch.fx.experimental import proxy_tensor

    return "detect_fake_mode" in inspect.getsource(proxy_tensor.extract_val)


@pytest.mark.skipif(
    not _make_fx_reads_the_ambient_fake_mode(),
    reason="this PyTorch's make_fx makes a fake-tensor mode per value whatever the context",
)
def test_the_capture_does_not_extract_the_python_stack_per_value(monkeypatch):
    # make_fx records each value's metadata through a fake-tensor mode; a new mode per
    # value extracts the Python stack each time (a third of a capture): the capture
    # shares one, so the count stays far below the graph's nodes
    import traceback

    calls = []
    extract = traceback.extract_stack

    def counted(*args, **kwargs):
        calls.append(1)
        return extract(*args, **kwargs)

    monkeypatch.setattr(traceback, "extract_stack", counted)
    graph = backends.capture(_transition, (X,))
    nodes = sum(node.op == "call_function" for node in graph.graph.nodes)
    assert nodes > 10 and len(calls) <= 2, (nodes, len(calls))
    _agrees(graph)


def test_graph_data_rebuilds_the_graph_with_its_random_operators():
    # the background worker rebuilds the captured graph from graph_data; an operator
    # that reads no tensor (aten.rand here) must stay an operator, not become the
    # constant of one draw (as it does when a pickled graph module retraces its code)
    graph = backends.capture(_transition, (X,))
    rebuilt = backends.graph_from_data(pickle.loads(pickle.dumps(backends.graph_data(graph))))
    assert backends.graph_key(rebuilt, (X,)) == backends.graph_key(graph, (X,))
    _agrees(rebuilt)
    _agrees(rebuilt, seed=4)
    # a graph with constants of its own, one of them folded (the expand of a tensor
    # made inside): it keeps no tensor that no node reads, and has the same key rebuilt
    weights = torch.tensor([1, 1, 2, 1, 1])
    graph = backends.capture(lambda x: _transition(x * weights.expand(3, 5)), (X,))
    read = {node.target for node in graph.graph.nodes if node.op == "get_attr"}
    assert read and set(dict(graph.named_buffers())) <= read
    rebuilt = backends.graph_from_data(pickle.loads(pickle.dumps(backends.graph_data(graph))))
    assert backends.graph_key(rebuilt, (X,)) == backends.graph_key(graph, (X,))
    data = backends.graph_data(graph)
    data["code"] += "# not the graph's code"
    with pytest.raises(RuntimeError, match="differs from the captured graph"):
        backends.graph_from_data(data)
    with pytest.raises(ValueError, match="no call_module node"):
        backends.graph_data(torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(2, 2))))


LENGTHS = torch.tensor([2, 3, 1])


def _reads_constants(x):
    """Python reads tensors that depend on no input: the model's data (``LENGTHS``, a
    slice bound from it), one made inside from Python numbers, a loop over its
    elements."""
    total = x.float().sum(-1)
    steps = torch.tensor([1, 2])
    for k in steps:
        total = total + int(k) * x[:, : int(LENGTHS[k])].float().sum(-1)
    return (total, x[:, : int(LENGTHS.max())] * 2)


def _reads_allowed() -> bool:
    from torch.fx.experimental.proxy_tensor import make_fx

    return bool(backends._constant_reads(make_fx))


#: whether this PyTorch's make_fx lets Python read values (PyTorch 2.1's refuses every read)
needs_reads = pytest.mark.skipif(not _reads_allowed(), reason="this make_fx refuses every read")


@needs_reads
def test_a_capture_reads_the_values_of_constants():
    graph = backends.capture(_reads_constants, (X,))
    other = torch.tensor([[1, 1, 0, 0, 1], [0, 1, 1, 1, 0], [1, 0, 1, 0, 1]])
    for x in (X, other):
        for got, want in zip(graph(x), _reads_constants(x)):
            assert torch.equal(got, want)
    targets = {str(n.target) for n in graph.graph.nodes}
    assert not any("_local_scalar_dense" in t for t in targets)  # no read left in it


@pytest.mark.parametrize(
    "read",
    [
        lambda x: (x * 2,) if bool(x.sum() > 100) else (x,),  # a branch on an input
        lambda x: (x[:, : int(x[0, 1]) + 1],),  # a slice bound read from an input
        lambda x: (torch.ones(int((x.sum() * 0 + LENGTHS.sum()).item())),),  # (through it)
    ],
    ids=["branch", "slice", "through-an-input"],
)
def test_a_capture_refuses_to_read_a_value_computed_from_its_inputs(read):
    # the capture would record the value at the example: a graph wrong at other inputs
    with pytest.raises(RuntimeError, match="data-dependent"):
        backends.capture(read, (X,))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["graph", "aot", "make_fx"])
def test_each_backend_agrees_with_eager_mode(backend, monkeypatch, tmp_path):
    monkeypatch.setenv(backends.CACHE_ENV, str(tmp_path))
    if backend == "aot" and not backends.aot_available():
        pytest.skip("no AOTInductor packages in this PyTorch")
    # random operators call PyTorch's own kernels: the same draws as eager mode
    _agrees(backends.compile_function(_transition, (X,), backend))


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="backend must be one of"):
        backends.compile_function(_transition, (X,), "trace")


def _failing(*args, **kwargs):
    raise RuntimeError("no compiler here")


def test_a_failing_compiler_hands_over_to_the_graph_with_a_warning(monkeypatch):
    monkeypatch.setitem(backends._COMPILERS, "make_fx", _failing)
    with pytest.warns(CompilationWarning, match="make_fx failed.*running its captured graph"):
        graph = backends.compile_function(_transition, (X,), "make_fx")
    assert isinstance(graph, torch.fx.GraphModule)
    _agrees(graph)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilationWarning)  # once per kind of error
        backends.compile_function(_transition, (X,), "make_fx")


def test_a_function_that_cannot_be_captured_runs_eagerly_with_a_warning():
    def reads_a_value(x):
        return (x * 2,) if bool(x.sum() > 100) else (x,)

    def fails(x):
        raise TypeError("not a tensor function")

    # a Python branch on a value is a known limit of the capture (logged); a function
    # that raises anything else is warned about
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilationWarning)
        assert backends.compile_function(reads_a_value, (X,), "graph") is None
    with pytest.warns(CompilationWarning, match="graph failed .*TypeError.*running it eagerly"):
        assert backends.compile_function(fails, (X,), "graph") is None


def test_a_known_limit_is_logged_not_warned(monkeypatch, caplog):
    def limited(*args, **kwargs):
        raise RuntimeError("data-dependent operator")

    monkeypatch.setitem(backends._COMPILERS, "make_fx", limited)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilationWarning)
        with caplog.at_level("DEBUG", logger="pyro_gwg.compile.backends"):
            backends.compile_function(_transition, (X,), "make_fx")
    assert "make_fx failed" in caplog.text


def test_graph_keys_name_the_computation_its_constants_and_inputs():
    w = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])

    def key(weights, x):
        graph = backends.capture(lambda y: (y * weights.expand(3, 5),), (x,))
        return backends.graph_key(graph, (x,))

    assert key(w, X.float()) == key(w.clone(), X.float())
    assert key(w, X.float()) != key(w + 1, X.float())  # another constant
    assert key(w, X.float()) != key(w, X.double())  # another input type


# ---------------------------------------------------------------- the disk cache


def _fake_package(path):
    """A zip like an AOTInductor package: a stored (uncompressed) shared object."""
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("model/data/aotinductor/model.so", bytes(range(256)) * 64)


def _damage(kind, package):
    data = bytearray(package.read_bytes())
    if kind == "inside the zip":  # one byte of the shared object: the zip stays readable
        start = data.index(bytes(range(256)))
        data[start + 1000] ^= 0xFF
    elif kind == "truncated":
        data = data[: len(data) // 2]
    else:
        data = bytearray(b"garbage" * 100)
    package.write_bytes(bytes(data))


class _FakeAot:
    """The exporter, AOTInductor and the loader replaced: counts compilations and
    loads, and saves fake packages."""

    def __init__(self, monkeypatch, tmp_path):
        self.compiled, self.loaded = [], []
        monkeypatch.setenv(backends.CACHE_ENV, str(tmp_path))
        monkeypatch.setattr(backends, "_DAMAGED", set())
        monkeypatch.setattr(torch.export, "export", lambda *args, **kwargs: "program")
        monkeypatch.setattr(
            torch._inductor, "aoti_compile_and_package", self.compile, raising=False
        )
        monkeypatch.setattr(backends, "load_package", self.load)

    def compile(self, program, package_path):
        self.compiled.append(package_path)
        _fake_package(package_path)

    def load(self, path):
        self.loaded.append(path)
        return lambda *tensors: "loaded"


@pytest.mark.parametrize("kind", ["inside the zip", "truncated", "garbage"])
def test_a_damaged_package_is_never_loaded_and_is_compiled_afresh(kind, monkeypatch, tmp_path):
    fake = _FakeAot(monkeypatch, tmp_path)
    x = (torch.zeros(2),)
    package = backends.save_aot_package(None, x, "key")
    assert package == backends.cache_dir() / "key.pt2" and len(fake.compiled) == 1
    assert backends.cached_package("key")() == "loaded"  # whole: loaded
    backends.save_aot_package(None, x, "key")
    assert len(fake.compiled) == 1  # there already
    _damage(kind, package)
    with pytest.warns(CompilationWarning, match=re.escape(str(package)) + " is damaged"):
        assert backends.cached_package("key") is None  # not loaded
    assert len(fake.loaded) == 1 and not package.exists()  # removed
    backends.save_aot_package(None, x, "key")  # compiled afresh
    assert len(fake.compiled) == 2 and backends.cached_package("key") is not None
    _damage(kind, package)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilationWarning)  # one warning per file
        backends.save_aot_package(None, x, "key")  # found damaged: recompiled
    assert len(fake.compiled) == 3


def test_a_package_without_its_checksum_is_compiled_afresh(monkeypatch, tmp_path):
    # a package saved by an older pyro-gwg, or whose checksum is not written yet
    fake = _FakeAot(monkeypatch, tmp_path)
    package = backends.save_aot_package(None, (torch.zeros(2),), "key")
    backends._checksum_path(package).unlink()
    assert backends.cached_package("key") is None
    backends.save_aot_package(None, (torch.zeros(2),), "key")
    assert len(fake.compiled) == 2 and fake.loaded == []


@needs_aot
def test_a_package_that_does_not_load_is_reported_with_its_file(monkeypatch, tmp_path):
    _FakeAot(monkeypatch, tmp_path)
    package = backends.save_aot_package(None, (torch.zeros(2),), "key")
    monkeypatch.undo()  # the real loader, on a fake package
    monkeypatch.setenv(backends.CACHE_ENV, str(tmp_path))
    with pytest.warns(
        CompilationWarning,
        match=r"the cached package {} does not load".format(re.escape(str(package))),
    ):
        assert backends.cached_package("key") is None


@pytest.mark.parametrize("umask", [0o002, 0o077])
def test_cache_files_follow_the_umask(umask, monkeypatch, tmp_path):
    _FakeAot(monkeypatch, tmp_path)
    previous = os.umask(umask)
    try:
        package = backends.save_aot_package(None, (torch.zeros(2),), "key")
    finally:
        os.umask(previous)
    for path in (package, backends._checksum_path(package)):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path


def test_the_cache_keeps_packages_apart_by_pytorch_version_and_cpu(monkeypatch, tmp_path):
    fake = _FakeAot(monkeypatch, tmp_path)
    key = backends.cpu_key()
    assert re.fullmatch(r"[\w.]+-[0-9a-f]{12}", key)
    assert backends.cache_dir() == tmp_path / "aot-torch-{}-{}".format(torch.__version__, key)
    backends.save_aot_package(None, (torch.zeros(2),), "key")
    assert backends.cached_package("key") is not None
    # the same cache on a machine with another CPU: its packages are not loaded there
    monkeypatch.setattr(backends, "cpu_key", lambda: "x86_64-000000000000")
    assert backends.cached_package("key") is None and len(fake.loaded) == 1
    backends.save_aot_package(None, (torch.zeros(2),), "key")
    assert len(fake.compiled) == 2 and len(list(tmp_path.glob("*/key.pt2"))) == 2


class _Runner:
    def boxed_run(self, tensors):
        return [t + 1 for t in tensors]


class _Model:
    def __init__(self, loader):
        self.loader = loader

    def __call__(self, *tensors):
        return [t - 1 for t in tensors]


@pytest.mark.parametrize("loader", [_Runner(), None])
def test_a_pytorch_whose_package_loader_takes_other_arguments_loads_through_aoti(
    loader, monkeypatch
):
    def other_signature(*args):
        raise TypeError("incompatible constructor arguments")

    aoti = getattr(torch._C, "_aoti", None)
    if aoti is not None:
        monkeypatch.setattr(aoti, "AOTIModelPackageLoader", other_signature, raising=False)
    monkeypatch.setattr(
        torch._inductor, "aoti_load_package", lambda path: _Model(loader), raising=False
    )
    run = backends.load_package(pathlib.Path("x.pt2"))
    # its loader's boxed_run where it has one, else the model itself
    assert run(torch.zeros(2))[0].tolist() == ([1.0, 1.0] if loader else [-1.0, -1.0])


@pytest.mark.parametrize("seconds", [0.2, 5.0])
def test_a_compilation_of_a_second_or_more_is_announced(seconds, capsys):
    short = backends.announce("AOTInductor", seconds)
    assert short == "compiling with AOTInductor, about {:.0f} s".format(seconds)
    lines = [line for line in capsys.readouterr().err.splitlines() if "pyro-gwg" in line]
    if seconds < backends.ANNOUNCE_SECONDS:
        assert lines == []
    else:
        assert lines == [
            "pyro-gwg: compiling the transition with AOTInductor, about 5 s; "
            "jit_compile=True (the captured graph only) or False runs without it."
        ]
