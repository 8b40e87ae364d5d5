"""The transition compiler and the jit_compile table (pyro_gwg.compile.modes and
.transition): what each mode runs, that every form of a transition draws what the eager
one draws, the switch of the default mode to a background compile's package, and that
the default path uses no deprecated PyTorch API."""

import pyro
import pytest
import torch
from small_models import SUITE

import pyro_gwg
import pyro_gwg.compile.transition as transition
from pyro_gwg import GWG, MCMC
from pyro_gwg.compile import JIT_COMPILE, CompilationWarning, Mode, backends, mode_of
from pyro_gwg.compile.transition import BackgroundTransition

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    # surprising failures are reported once per process: each test starts afresh
    monkeypatch.setattr(backends, "_WARNED", set())


def test_the_table_gives_every_jit_compile_value_its_mode():
    assert mode_of("auto") == Mode("aot", background=True)
    assert mode_of(True) == Mode("graph") and mode_of(False) == Mode(None)
    assert mode_of("inductor") == Mode("aot") and mode_of("make_fx") == Mode("make_fx")
    assert set(JIT_COMPILE) == {"auto", True, "inductor", "make_fx", False}
    # the kernels accept exactly the table's values
    assert pyro_gwg.kernels.base.JIT_MODES == tuple(JIT_COMPILE)
    for wrong in (1, 0, "trace", "compile", None):
        with pytest.raises(ValueError, match="jit_compile must be one of"):
            GWG(None, jit_compile=wrong)


def _kernel(name, num_chains, **kwargs):
    model, args = SUITE[name]
    kernel = GWG(model, num_flips=2, **kwargs)
    kernel.vectorized_chains = num_chains
    kernel.setup(0, *args)
    return kernel


def _steps(kernel, num_steps, seed):
    """``num_steps`` transitions from the kernel's state now, under ``seed``: codes."""
    pyro.set_rng_seed(seed)
    blocks = []
    kernel.driver.run(num_steps, lambda t, *block: blocks.append(block), num_steps)
    return blocks[0]


@pytest.mark.parametrize("name", ["coupled_binary_field", "mixed_kinds"])
@pytest.mark.parametrize("jit_compile", [True, "auto"])
def test_the_captured_graph_draws_what_the_eager_transition_draws(name, jit_compile):
    runs = []
    for mode in (jit_compile, False):
        pyro.set_rng_seed(0)
        kernel = _kernel(name, 6, jit_compile=mode)
        runs.append(_steps(kernel, 12, seed=1))
        fn = next(iter(kernel.driver._compiled.values()))
        fn = getattr(fn, "fn", fn)
        if mode == "auto":  # the first step eager, the others the captured graph
            assert isinstance(fn, BackgroundTransition) and fn.form == "graph"
            assert fn.compile is None  # (no background compile in the test suite)
    (info_c, codes_c, log_joint_c), (info_e, codes_e, log_joint_e) = runs
    assert torch.equal(codes_c, codes_e)
    assert torch.allclose(log_joint_c, log_joint_e, atol=1e-5)
    assert torch.equal(info_c.accepted, info_e.accepted)


class _FakeCompile:
    """A background compile that ends after ``calls`` polls with ``result``."""

    started = []

    def __init__(self, graph, example, key, result, calls=3):
        self.graph, self.key, self.result_fn, self.polls = graph, key, result, calls
        self.seconds, self.error, self.stopped = 1.5, None, False
        _FakeCompile.started.append(self)

    @property
    def done(self):
        self.polls -= 1
        return self.polls < 0

    def result(self):
        return None if self.result_fn is None else self.result_fn(self.graph)

    def detach(self):
        self.detached = True

    def attach(self):
        self.detached = False

    def stop(self):
        self.stopped = True


def _fake_background(monkeypatch, result, calls=3):
    _FakeCompile.started = []
    monkeypatch.setattr(transition, "enabled", lambda: True)
    monkeypatch.setattr(backends, "aot_available", lambda: True)
    monkeypatch.setattr(
        transition,
        "BackgroundCompile",
        lambda graph, example, key: _FakeCompile(graph, example, key, result, calls),
    )
    monkeypatch.setattr(  # the fakes not done, by key
        transition,
        "running_compile",
        lambda key: next((c for c in _FakeCompile.started if c.key == key and c.polls >= 0), None),
    )


def test_the_default_mode_switches_to_the_compiled_package_when_it_is_ready(monkeypatch):
    # the "package" here is the captured graph itself, so that the draws can be compared
    _fake_background(monkeypatch, lambda graph: graph)
    model, args = SUITE["coupled_binary_field"]
    messages, draws = [], []
    monkeypatch.setattr(
        "pyro_gwg.runner.progress.Progress.compiling", lambda self, m: messages.append(m)
    )
    for jit_compile in ("auto", False):
        pyro.set_rng_seed(2)
        mcmc = MCMC(GWG(model, jit_compile=jit_compile), num_samples=40, warmup_steps=0)
        mcmc.run(*args)
        draws.append(mcmc.get_samples()["x"])
        if jit_compile == "auto":
            assert mcmc.timing["background_compile"] == 1.5
            assert mcmc.timing["compile"] > 0  # the capture
    assert len(_FakeCompile.started) == 1
    # the progress bar says "compiling" until the switch
    assert messages == ["compiling in the background", None]
    # eager, then the graph, then the package: the same chain as eager all along
    assert torch.equal(draws[0], draws[1])


def test_a_package_that_fails_hands_back_to_the_graph_with_a_warning(monkeypatch):
    def broken(graph):
        def run(*tensors):
            raise RuntimeError("the package does not run here")

        return run

    _fake_background(monkeypatch, broken)
    kernel = _kernel("coupled_binary_field", 4)
    with pytest.warns(CompilationWarning, match="aot failed .*does not run here.*captured graph"):
        info, codes, _ = _steps(kernel, 10, seed=0)
    fn = next(iter(kernel.driver._compiled.values())).fn
    assert fn.form == "graph" and codes.shape == (4, 10, 5)
    # a compile that failed: the same message, the graph goes on
    backends._WARNED.clear()
    _fake_background(monkeypatch, None)
    kernel = _kernel("coupled_binary_field", 4)
    with pytest.warns(CompilationWarning, match="aot failed"):
        _steps(kernel, 10, seed=0)
    # a compile whose job cannot be written: the same message, the graph goes on
    backends._WARNED.clear()

    def unwritable(graph, example, key):
        raise OSError("No space left on device")

    monkeypatch.setattr(transition, "BackgroundCompile", unwritable)
    kernel = _kernel("coupled_binary_field", 4)
    with pytest.warns(CompilationWarning, match="aot failed .*No space left"):
        info, codes, _ = _steps(kernel, 10, seed=0)
    fn = next(iter(kernel.driver._compiled.values())).fn
    assert fn.form == "graph" and fn.compile is None and codes.shape == (4, 10, 5)


def test_an_adapting_warmup_starts_no_compile_and_sampling_starts_one(monkeypatch):
    _fake_background(monkeypatch, lambda graph: graph, calls=10**6)  # never done
    made, started = [], []  # transitions; (transition, its call) of each compile start
    init = transition.BackgroundTransition.__init__
    start = transition.BackgroundTransition._start_compile

    def record_init(self, *args):
        made.append(self)
        init(self, *args)

    def record_start(self):
        started.append((made.index(self), self.calls))
        start(self)

    monkeypatch.setattr(transition.BackgroundTransition, "__init__", record_init)
    monkeypatch.setattr(transition.BackgroundTransition, "_start_compile", record_start)
    model, args = SUITE["coupled_binary_field"]
    for num_flips, warmup in (("auto", 20), (2, 20), ("auto", 0)):
        made.clear()
        started.clear()
        kernel = GWG(model, num_flips=num_flips)
        MCMC(kernel, num_samples=30, warmup_steps=warmup, disable_progbar=True).run(*args)
        if num_flips == "auto" and warmup:  # the warmup transition (bound D) compiles not
            assert len(made) == 2 and started == [(1, 1)]
        else:  # one transition, whose compile starts at its capture (its second call)
            assert len(made) == 1 and started == [(0, 1)]
    # while the driver says no, a transition is captured at its WARMUP_CAPTURE_CALLS-th
    # call, not its second; captured then, it starts its compile at its first call
    # after the driver says yes
    monkeypatch.setattr(transition, "WARMUP_CAPTURE_CALLS", 4)
    _FakeCompile.started = []
    made.clear()
    started.clear()
    allowed = [False]
    kernel = _kernel("coupled_binary_field", 4)
    kernel.driver._may_compile = lambda: allowed[0]
    _steps(kernel, 3, seed=0)
    assert made[0].form == "eager" and not made[0].captured
    _steps(kernel, 2, seed=0)
    assert made[0].form == "graph" and started == [] and made[0].deferred is not None
    allowed[0] = True
    info, codes, _ = _steps(kernel, 3, seed=0)
    assert started == [(0, 5)] and len(_FakeCompile.started) == 1
    assert made[0].deferred is None and codes.shape == (4, 3, 5)
    # a transition not captured when the driver says yes is captured at its next call
    made.clear()
    allowed[0] = False
    kernel = _kernel("coupled_binary_field", 4)
    kernel.driver._may_compile = lambda: allowed[0]
    _steps(kernel, 3, seed=0)
    allowed[0] = True
    _steps(kernel, 1, seed=0)
    assert made[0].form == "graph"


def test_a_one_step_run_captures_nothing(monkeypatch):
    captured = []
    real = backends.capture
    monkeypatch.setattr(backends, "capture", lambda *a: captured.append(1) or real(*a))
    model, args = SUITE["coupled_binary_field"]
    MCMC(GWG(model, num_flips=1), num_samples=1, warmup_steps=0).run(*args)
    assert captured == []
    MCMC(GWG(model, num_flips=1), num_samples=2, warmup_steps=0).run(*args)
    assert captured == [1]


def test_the_default_path_calls_no_deprecated_torch_api(monkeypatch):
    def deprecated(*args, **kwargs):
        raise AssertionError("torch.jit.trace on the default path")

    monkeypatch.setattr(torch.jit, "trace", deprecated)
    monkeypatch.setattr(torch.jit, "script", deprecated)
    model, args = SUITE["mixed_kinds"]
    for runner in (MCMC, pyro.infer.MCMC):
        runner(GWG(model), num_samples=20, warmup_steps=10, disable_progbar=True).run(*args)


def test_a_captured_graph_that_does_not_follow_the_model_is_not_run(monkeypatch):
    # the capture is checked against the eager step at the same state and random
    # numbers; one that gives another step (here: a log density shifted by 1) is refused
    real = backends.capture

    def shifted(fn, example):
        graph = real(fn, example)
        return lambda *tensors: (tensors[0], graph(*tensors)[1] + 1.0, *graph(*tensors)[2:])

    monkeypatch.setattr(backends, "capture", shifted)
    kernel = _kernel("coupled_binary_field", 4)
    with pytest.warns(CompilationWarning, match="another step than the model.*eagerly"):
        _steps(kernel, 6, seed=0)
    assert next(iter(kernel.driver._compiled.values())).fn.form == "eager"


def _step_like(x):
    """A stand-in transition: a float32 log density of magnitude 1000, an acceptance
    probability, a random accept decision."""
    return (x * 1000.0, torch.sigmoid(x), (torch.rand(x.shape) < 0.5).long())


def test_the_graph_check_allows_rounding_and_refuses_a_departure():
    x = torch.linspace(0.1, 1.0, 8)

    def noisy(y):  # float32 rounding of a magnitude of 1000, in the probability too
        value, prob, accepted = _step_like(y)
        return value + 3e-5, prob + 4e-5, accepted

    def off(y):  # a log density off by 0.5
        value, prob, accepted = _step_like(y)
        return value + 0.5, prob, accepted

    calls = []

    def tipped_once(y):  # a rounding that tips one accept decision, on one stream
        value, prob, accepted = _step_like(y)
        calls.append(1)
        return value, prob, accepted if len(calls) > 1 else 1 - accepted

    def always_tipped(y):
        value, prob, accepted = _step_like(y)
        return value, prob, 1 - accepted

    state = torch.get_rng_state()
    assert transition._agree(_step_like, _step_like, (x,))
    assert transition._agree(_step_like, noisy, (x,))
    assert transition._agree(_step_like, tipped_once, (x,))
    assert not transition._agree(_step_like, off, (x,))
    assert not transition._agree(_step_like, always_tipped, (x,))
    assert torch.equal(torch.get_rng_state(), state)  # the caller's stream untouched


def test_another_run_of_a_transition_waits_for_its_running_compile(monkeypatch):
    # a run shorter than the compile leaves it running; the next run of the same
    # transition does not export and compile again (nor stop it): it waits for it
    _fake_background(monkeypatch, lambda graph: graph, calls=10**6)  # never done
    model, args = SUITE["coupled_binary_field"]
    for _ in range(3):
        MCMC(GWG(model, num_flips=2), num_samples=10, warmup_steps=0).run(*args)
    assert len(_FakeCompile.started) == 1 and not _FakeCompile.started[0].stopped
    assert _FakeCompile.started[0].detached  # left to fill the cache when the run ended
    # another transition (other settings) has a compile of its own
    MCMC(GWG(model, num_flips=3), num_samples=10, warmup_steps=0).run(*args)
    assert len(_FakeCompile.started) == 2
