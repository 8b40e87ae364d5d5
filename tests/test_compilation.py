"""Compiled transitions: agreement with eager ones, exactness, fallbacks, and the runner's
bookkeeping of multi-step calls."""

import logging
import os
import re
import stat
import time
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
import torch._inductor.config as inductor_config
from exactness import assert_exact
from pyro.infer import NUTS
from small_models import SUITE

import pyro_gwg
import pyro_gwg.compilation as compilation
from pyro_gwg import GWG, MCMC, MixedGibbs, UnsupportedModelError, exact_posterior
from pyro_gwg.compilation import CompilationWarning
from pyro_gwg.kernels import REGISTRY

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")


def _setup(name, num_chains, **kwargs):
    model, args = SUITE[name]
    kernel = GWG(model, **kwargs)
    kernel.vectorized_chains = num_chains
    kernel.setup(0, *args)
    return kernel


@pytest.mark.slow
@pytest.mark.parametrize("name", ["coupled_binary_field", "mixed_kinds"])
def test_inductor_transitions_equal_eager_ones(name):
    # with the eager random number generator inside the compiled graph, a compiled run
    # of transitions draws the same moves as the eager run from the same state
    with inductor_config.patch(fallback_random=True):
        _compare_compiled_and_eager(name, "make_fx")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["coupled_binary_field", "mixed_kinds"])
def test_aot_transitions_equal_eager_ones(name):
    # AOTInductor packages always call PyTorch's random operators: the move of "auto"
    # from trace to AOTInductor never changes the draws of a seed
    _compare_compiled_and_eager(name, "aot")


def _compare_compiled_and_eager(name, backend):
    pyro.set_rng_seed(0)
    kernel = _setup(name, 6, num_flips=2)
    start = kernel.state
    _advance(kernel, 4, backend)  # compiles
    runs = []
    for each in (backend, None):
        kernel.driver.state = start
        pyro.set_rng_seed(1)
        runs.append(_advance(kernel, 4, each))
    (info_c, codes_c, log_joint_c), (info_e, codes_e, log_joint_e) = runs
    assert codes_c.dtype == torch.int8 and codes_c.shape == (6, 4, kernel.energy.num_coords)
    assert torch.equal(codes_c, codes_e)
    assert torch.allclose(log_joint_c, log_joint_e, atol=1e-5)
    assert torch.equal(info_c.accepted, info_e.accepted)
    assert torch.allclose(info_c.accept_prob, info_e.accept_prob, atol=1e-5)


def test_inductor_chains_match_the_exact_posterior():
    model, args = SUITE["mixed_kinds"]
    pyro.set_rng_seed(0)
    mcmc = MCMC(
        GWG(model, num_flips=2, jit_compile="inductor"),
        num_samples=1500,
        warmup_steps=100,
        num_chains=32,
        disable_progbar=True,
    )
    mcmc.run(*args)
    post = exact_posterior(model, *args)
    samples = mcmc.get_samples(group_by_chain=True)
    flat = {k: v.flatten(0, 1) for k, v in samples.items()}
    codes = post.energy.codes_from_values(flat).reshape(32, 1500, -1)
    assert_exact(codes, post)


def _advance(kernel, num_steps: int, backend):
    """``num_steps`` transitions in one block compiled by ``backend`` (``None``: eager):
    ``(info, codes, log_joint)``."""
    driver = kernel.driver
    driver.backend = backend
    blocks = []
    driver.run(num_steps, lambda t, *block: blocks.append(block), num_steps, torch.int8)
    return blocks[0]


def _failing(*args, **kwargs):
    raise RuntimeError("no compiler here")


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    # surprising failures are reported once per process: each test starts afresh
    monkeypatch.setattr(compilation, "_WARNED", set())


def test_a_failing_compiler_hands_over_to_the_next_with_a_warning(monkeypatch):
    monkeypatch.setitem(compilation._COMPILERS, "make_fx", _failing)
    kernel = _setup("coupled_binary_field", 4)
    with pytest.warns(CompilationWarning, match="make_fx failed.*using trace instead"):
        _advance(kernel, 3, "make_fx")
    monkeypatch.setitem(compilation._COMPILERS, "trace", _failing)
    kernel = _setup("coupled_binary_field", 4, jit_compile=True)
    with pytest.warns(CompilationWarning, match="trace failed.*running it eagerly"):
        info, codes, _ = _advance(kernel, 3, "trace")
    assert codes.shape == (4, 3, 5) and info.accepted.shape == (4, 3)


def test_every_compiler_failing_still_samples_exactly(monkeypatch):
    for name in compilation.BACKENDS:
        monkeypatch.setitem(compilation._COMPILERS, name, _failing)
    model, args = SUITE["coupled_binary_field"]
    pyro.set_rng_seed(0)
    mcmc = MCMC(GWG(model), num_samples=1500, warmup_steps=100, num_chains=32, disable_progbar=True)
    with pytest.warns(CompilationWarning, match="running it eagerly"):
        mcmc.run(*args)
    post = exact_posterior(model, *args)
    assert_exact(mcmc.get_samples(group_by_chain=True)["x"].long(), post)


def _value_dependent_model():
    x = pyro.sample("x", dist.Bernoulli(0.5).expand([3]).to_event(1))
    if x.sum() > 1:  # Python control flow on a latent value: tracing cannot follow it
        pyro.factor("branch", torch.tensor(2.0))


def test_auto_mode_runs_a_value_dependent_model_eagerly():
    kernel = GWG(_value_dependent_model)
    with pytest.warns(CompilationWarning, match="eagerly"):
        kernel.setup(0)
    assert kernel.energy.jit_compile is False
    with pytest.raises(UnsupportedModelError, match="jit_compile=False"):
        GWG(_value_dependent_model, jit_compile=True).setup(0)


def test_runs_in_whole_calls_keep_the_same_draws_as_single_steps():
    # eagerly, a call of several transitions draws the same random numbers as single
    # steps: the buffers, thinning and remainders of the runner must not change a draw
    model, args = SUITE["nested_plates"]
    runs = []
    for hook in (None, lambda kernel, params, stage, i: None):  # a hook forces single steps
        pyro.set_rng_seed(5)
        mcmc = MCMC(
            GWG(model, jit_compile=False),
            num_samples=29,
            warmup_steps=11,
            num_chains=3,
            thinning=3,
            hook_fn=hook,
            disable_progbar=True,
        )
        mcmc.run(*args)
        runs.append((mcmc.get_samples(group_by_chain=True), mcmc.get_statistics()))
    (samples, stats), (samples_1, stats_1) = runs
    assert samples["x"].shape == (3, 9, 2, 3)
    assert torch.equal(samples["x"], samples_1["x"])
    for name in stats:
        assert torch.equal(stats[name], stats_1[name])


def test_bad_jit_compile_values_are_refused():
    model, _ = SUITE["coupled_binary_field"]
    with pytest.raises(ValueError, match="jit_compile must be one of"):
        GWG(model, jit_compile="fast")
    with pytest.raises(ValueError, match="backend must be 'default' or one of"):
        compilation.compile_function(lambda x: (x,), (torch.zeros(1),), "xla")


def test_mixed_gibbs_compiles_its_discrete_kernel_with_the_continuous_values_as_inputs():
    def model():
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        pyro.sample("z", dist.Bernoulli(logits=mu))

    kernel = GWG(jit_compile=True)
    mixed = MixedGibbs(NUTS(model), kernel)
    # the discrete half compiles, with the continuous values as arguments
    mixed.setup(0)
    energy = mixed.discrete_kernel.energy
    assert energy.given_names == ("mu",) and energy.arguments() == energy._given_values
    assert mixed.discrete_kernel.driver.backend == "trace"
    assert kernel.energy is None  # the user's kernel is left as it was
    with pytest.raises(UnsupportedModelError, match="jit_compile=False on the HMC/NUTS"):
        MixedGibbs(NUTS(model, jit_compile=True), GWG())


def _transition(x):
    """A transition-like function: a gradient inside, a categorical and a uniform draw."""
    return compilation._probe(x)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["aot", "compile", "make_fx", "trace"])
def test_each_backend_agrees_with_eager_mode(backend):
    x = torch.tensor([[0, 1, 1, 0, 1], [1, 1, 0, 1, 0], [0, 0, 0, 1, 1]])
    with inductor_config.patch(fallback_random=True):
        compiled = compilation.compile_function(_transition, (x,), backend)
        pyro.set_rng_seed(3)
        out = compiled(x)
    pyro.set_rng_seed(3)
    expected = _transition(x)
    assert len(out) == len(expected)
    for got, want in zip(out, expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert torch.allclose(got.float(), want.float())


@pytest.mark.slow
def test_the_probe_chooses_the_public_compiler_once_per_process(monkeypatch):
    compilation._choose_backend.cache_clear()
    calls = []

    def counting(fn, example_inputs):
        calls.append(fn)
        return compilation.aot_compile(fn, example_inputs)

    monkeypatch.setitem(compilation._COMPILERS, "aot", counting)
    assert compilation.choose_backend() == "aot"
    assert compilation.choose_backend(torch.device("cpu")) == "aot"
    assert calls == [compilation._probe]
    compilation._choose_backend.cache_clear()


def test_the_probe_falls_back_to_trace_silently(monkeypatch, caplog, recwarn):
    compilation._choose_backend.cache_clear()
    monkeypatch.setitem(compilation._COMPILERS, "aot", _failing)
    with caplog.at_level(logging.DEBUG, logger="pyro_gwg.compilation"):
        assert compilation.choose_backend() == "trace"
        compiled = compilation.compile_function(lambda x: (x * 2,), (torch.ones(2),), "default")
    compilation._choose_backend.cache_clear()
    assert torch.equal(compiled(torch.ones(2))[0], torch.full((2,), 2.0))
    assert "AOTInductor unavailable" in caplog.text
    assert not [w for w in recwarn if issubclass(w.category, CompilationWarning)]


def test_known_limits_fall_back_silently_and_surprises_warn_once(monkeypatch, caplog, recwarn):
    def limited(fn, example_inputs):
        raise RuntimeError("Cannot insert a Tensor that requires grad as a constant.")

    monkeypatch.setitem(compilation._COMPILERS, "trace", limited)
    with caplog.at_level(logging.DEBUG, logger="pyro_gwg.compilation"):
        assert compilation.compile_function(_transition, (torch.ones(2, 3),), "trace") is None
    assert "trace failed" in caplog.text
    assert not [w for w in recwarn if issubclass(w.category, CompilationWarning)]

    monkeypatch.setitem(compilation._COMPILERS, "trace", _failing)
    with pytest.warns(CompilationWarning, match="trace failed.*running it eagerly"):
        compilation.compile_function(_transition, (torch.ones(2, 3),), "trace")
    recwarn.clear()
    assert compilation.compile_function(_transition, (torch.ones(2, 3),), "trace") is None
    assert not [w for w in recwarn if issubclass(w.category, CompilationWarning)]


def _enumerated_model(y):
    x = pyro.sample("x", dist.Bernoulli(0.5).expand([2]).to_event(1))
    c = pyro.sample("c", dist.Bernoulli(0.3), infer={"enumerate": "parallel"})
    pyro.sample("y", dist.Normal(x.sum(-1) + c, 1.0), obs=y)


def test_the_documented_enumerated_model_runs_without_a_compilation_warning(recwarn):
    mcmc = pyro.infer.MCMC(
        GWG(_enumerated_model), num_samples=20, warmup_steps=5, disable_progbar=True
    )
    mcmc.run(torch.tensor(2.0))
    assert not [w for w in recwarn if issubclass(w.category, CompilationWarning)]
    assert set(mcmc.get_samples()) == {"x"}


#: one kernel of each kind of transition: single-coordinate gradient moves, paths,
#: factorised proposals, the jump process, evaluation of many states
MAKE_FX_KERNELS = {"GWG", "PAS", "NCG", "DLMC", "Gibbs"}


# every kernel under the tracer and AOTInductor (the compilers of jit_compile="auto");
# make_fx, a path through private APIs, on one kernel of each kind
@pytest.mark.slow
@pytest.mark.parametrize(
    "name,backend",
    [
        (name, backend)
        for name in sorted(REGISTRY)
        for backend in ("trace", "make_fx", "aot")
        if backend != "make_fx" or name in MAKE_FX_KERNELS
    ],
)
def test_every_kernel_compiles_whole_blocks_without_falling_back(name, backend, caplog):
    # a compiler that fails falls back quietly where the failure is a known limit:
    # the blocks of every kernel on a plain model must really compile
    model, args = SUITE["coupled_binary_field"]
    kernel = getattr(pyro_gwg, name)(model)
    kernel.vectorized_chains = 4
    kernel.setup(0, *args)
    with caplog.at_level(logging.DEBUG, logger="pyro_gwg.compilation"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompilationWarning)
            info, codes, _ = _advance(kernel, 4, backend)
    assert not [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert codes.shape == (4, 4, 5) and info.accepted.shape == (4, 4)


# ---------------------------------------------------------------- the cost model of "auto"


def test_worth_compiling_weighs_the_time_saved_against_the_compile_time():
    # known horizon: 1000 calls of 10 ms, a compiled call at 30 %: 7 s saved
    assert compilation.worth_compiling(0.01, 1000, 0.0, 6.9, time_fraction=0.3)
    assert not compilation.worth_compiling(0.01, 1000, 0.0, 7.1, time_fraction=0.3)
    assert not compilation.worth_compiling(0.01, 0, 100.0, 0.5)
    # unknown horizon: ski rental, compile once the time spent reaches the compile time
    assert not compilation.worth_compiling(0.01, None, 9.9, 10.0)
    assert compilation.worth_compiling(0.01, None, 10.0, 10.0)


def test_the_compile_time_estimate_learns_from_this_machines_records(monkeypatch, tmp_path):
    monkeypatch.setenv(compilation.CACHE_ENV, str(tmp_path))
    prior = compilation.estimated_compile_seconds(100)
    assert prior == pytest.approx(
        compilation.COMPILE_SECONDS_FIXED + 100 * compilation.COMPILE_SECONDS_PER_OP
    )
    assert compilation.estimated_compile_seconds(None) > prior  # unknown size: 500 ops
    compilation._record_compile(100, 3 * prior, "cpu")
    compilation._record_compile(200, 1.0, "cuda")  # another device's record is not used
    assert compilation.estimated_compile_seconds(100) == pytest.approx(3 * prior)
    assert compilation.estimated_compile_seconds(300) == pytest.approx(
        3 * (compilation.COMPILE_SECONDS_FIXED + 300 * compilation.COMPILE_SECONDS_PER_OP)
    )
    assert (tmp_path / compilation.cache_dir().name / "compile_times.json").exists()


def test_trace_keys_tell_computations_apart():
    weights = torch.tensor([1.0, 2.0, 3.0])

    def key(w, x):
        return compilation.trace_key(compilation.trace_compile(lambda y: (y * w,), (x,)), (x,))

    x = torch.ones(3)
    assert key(weights, x) == key(weights.clone(), x)  # same operators, same constants
    assert key(weights, x) != key(weights + 1, x)  # a constant's value
    assert key(weights, x) != key(weights, torch.ones(2, 3))  # an input's shape
    assert compilation.trace_key(lambda y: y, (x,)) is None  # not a trace


class _Clock:
    """A stand-in for a compiled function: counts its calls."""

    def __init__(self, name):
        self.name, self.calls = name, 0

    def __call__(self, state):
        self.calls += 1
        return self.name


def _auto(compile_seconds, calls_left, upgraded):
    from pyro_gwg.driver import _AutoCompiled

    start, upgrades = _Clock("start"), []

    def upgrade():
        upgrades.append(1)
        return upgraded

    auto = _AutoCompiled(start, upgrade, lambda: calls_left, compile_seconds, "cpu")
    return auto, start, upgrades


def test_auto_functions_move_to_the_compiled_one_once_it_pays():
    from pyro_gwg.driver import TIMED_CALLS, UNTIMED_CALLS

    final = _Clock("final")
    auto, start, upgrades = _auto(0.0, 10, final)
    results = [auto(None) for _ in range(UNTIMED_CALLS + TIMED_CALLS + 2)]
    # the untimed calls, then the timed calls decide; every later call is compiled
    assert results == ["start"] * (UNTIMED_CALLS + TIMED_CALLS) + ["final"] * 2
    assert upgrades == [1] and start.calls == UNTIMED_CALLS + TIMED_CALLS
    # a compile that does not pay back is never started
    auto, start, upgrades = _auto(1e9, 10**6, final)
    assert {auto(None) for _ in range(20)} == {"start"} and not upgrades
    # a failed compilation is not retried: the function stays as it was
    auto, start, upgrades = _auto(0.0, None, None)
    assert {auto(None) for _ in range(20)} == {"start"} and upgrades == [1]


def test_one_slow_call_does_not_start_a_compilation():
    # the TorchScript executor can spend most of a second optimising a large graph in
    # one early call; the decision takes the median of several calls
    from pyro_gwg.driver import UNTIMED_CALLS

    class OneSlowCall(_Clock):
        def __call__(self, state):
            if self.calls == UNTIMED_CALLS:
                time.sleep(0.3)
            return super().__call__(state)

    from pyro_gwg.driver import _AutoCompiled

    upgrades = []
    auto = _AutoCompiled(OneSlowCall("start"), lambda: upgrades.append(1), lambda: 100, 5.0, "cpu")
    assert {auto(None) for _ in range(30)} == {"start"} and not upgrades


@pytest.mark.slow
def test_auto_mode_compiles_once_then_loads_the_package_from_disk(monkeypatch, tmp_path):
    monkeypatch.setenv(compilation.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(compilation, "estimated_compile_seconds", lambda ops, device="cpu": 0.0)
    compiles = []
    real = torch._inductor.aoti_compile_and_package

    def counting(*args, **kwargs):
        compiles.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", counting)
    model, args = SUITE["coupled_binary_field"]
    messages, draws = [], []
    for _ in range(2):
        pyro.set_rng_seed(2)
        mcmc = MCMC(GWG(model), num_samples=40, warmup_steps=10, num_chains=3)
        # the progress bar says when the run compiles
        monkeypatch.setattr(
            "pyro_gwg.runner.progress.Progress.compiling",
            lambda self, message: messages.append(message),
        )
        mcmc.run(*args)
        draws.append(mcmc.get_samples()["x"])
    assert compiles == [1]  # the second run loaded the package of the first
    assert messages == ["compiling with AOTInductor, about 0 s"]
    assert list((tmp_path / compilation.cache_dir().name / "aliases").iterdir())
    # the first run moved from trace to AOTInductor, the second used it from the start:
    # both draw their random numbers from PyTorch's generator alike
    assert torch.equal(draws[0], draws[1])


@pytest.mark.slow
def test_aot_packages_are_cached_on_disk_and_damaged_ones_are_compiled_afresh(
    monkeypatch, tmp_path
):
    monkeypatch.setenv(compilation.CACHE_ENV, str(tmp_path))
    x = torch.tensor([[0, 1, 1, 0], [1, 1, 0, 1]])
    traced = compilation.trace_compile(_transition, (x,))
    key = compilation.trace_key(traced, (x,))
    assert compilation.cached_aot(key, (x,)) is None
    with inductor_config.patch(fallback_random=True):
        first = compilation.aot_compile(_transition, (x,), alias=key, ops=7)
        (package,) = (tmp_path / compilation.cache_dir().name).glob("*.pt2")
        loaded = compilation.cached_aot(key, (x,))
        for fn in (first, loaded):
            pyro.set_rng_seed(3)
            got = fn(x)
            pyro.set_rng_seed(3)
            for a, b in zip(got, _transition(x)):
                assert torch.allclose(a.float(), b.float())
    package.write_bytes(b"not a package")
    with pytest.warns(
        CompilationWarning, match="cached package .*{}.* is damaged".format(re.escape(package.name))
    ):
        assert compilation.cached_aot(key, (x,)) is None


def _scalar_probability_model():
    # Bernoulli(0.5) makes its probability tensor from a Python number as the model
    # runs: torch.export records such tensors as fake constants and refuses them
    with pyro.plate("sites", 6):
        x = pyro.sample("x", dist.Bernoulli(0.5))
    pyro.factor("pairs", 0.8 * (x[..., 1:] * x[..., :-1]).sum(-1))


def _non_broadcasting_lattice():
    # a lattice Ising model summed over both plates, as NumPyro's examples write it:
    # it does not broadcast over chains, so the energy evaluates it under vmap, which
    # neither torch.jit.trace nor torch.export follows
    with pyro.plate("rows", 3, dim=-2), pyro.plate("cols", 3, dim=-1):
        x = pyro.sample("x", dist.Bernoulli(0.5))
    s = 2 * x - 1
    pyro.factor("coupling", 0.4 * (s * (s.roll(-1, -1) + s.roll(-1, -2))).sum((-2, -1)))


MODELS_OUTSIDE_THE_TRACERS = {
    "scalar_probability": _scalar_probability_model,
    "non_broadcasting": _non_broadcasting_lattice,
}


@pytest.mark.filterwarnings("ignore::pyro_gwg.BatchingWarning")
@pytest.mark.parametrize("backend", ["trace", pytest.param("aot", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", sorted(MODELS_OUTSIDE_THE_TRACERS))
def test_models_outside_the_tracers_compile_and_draw_as_eager_ones(name, backend, caplog):
    # every compiler captures such models through their ATen graph (make_fx), with
    # no fallback: once compiled, steps no longer run the model's Python; and the
    # compiled transitions draw the eager ones' moves
    model, calls = MODELS_OUTSIDE_THE_TRACERS[name], []
    pyro.set_rng_seed(0)
    kernel = GWG(lambda: calls.append(1) or model(), num_flips=2)
    kernel.vectorized_chains = 4
    kernel.setup(0)
    if kernel.energy.batching == "loop":
        pytest.skip("this torch's vmap cannot run a Pyro model: evaluated one at a time")
    start = kernel.state
    with caplog.at_level(logging.DEBUG, logger="pyro_gwg.compilation"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompilationWarning)
            _advance(kernel, 3, backend)
    assert not [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    before = len(calls)
    _advance(kernel, 3, backend)
    assert len(calls) == before, "the compiled steps ran the model eagerly"
    runs = []
    for each in (backend, None):
        kernel.driver.state = start
        pyro.set_rng_seed(1)
        runs.append(_advance(kernel, 3, each))
    assert torch.equal(runs[0][1], runs[1][1])
    assert torch.allclose(runs[0][2], runs[1][2])


def test_the_cpu_probe_of_package_loads_starts_once_and_only_with_packages(monkeypatch, tmp_path):
    if not compilation.aot_available():
        pytest.skip("no AOTInductor packages in this PyTorch")
    from torch._inductor import cpu_vec_isa

    calls = []
    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", lambda: calls.append(1))
    monkeypatch.setattr(compilation, "_PROBE", None)
    monkeypatch.setenv(compilation.CACHE_ENV, str(tmp_path))
    compilation.prewarm_loader()  # an empty cache: no load is coming, no probe
    assert compilation._PROBE is None
    folder = compilation.cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "package.pt2").write_bytes(b"")
    compilation.prewarm_loader()
    compilation.prewarm_loader()
    compilation._PROBE.join()
    assert calls == [1]


# ---------------------------------------------------------------- pyro.param sites


def _param_model():
    w = pyro.param("w", torch.tensor(0.5))
    p = pyro.param("p", torch.tensor(0.3), constraint=dist.constraints.unit_interval)
    with pyro.plate("sites", 3):
        x = pyro.sample("x", dist.Bernoulli(logits=w + torch.logit(p)))
    pyro.sample("y", dist.Normal(x.sum(-1, keepdim=True), 1.0), obs=torch.tensor([2.0]))


def _param_draws(runner, jit_compile, seed=0):
    pyro.set_rng_seed(seed)
    if runner == "pyro":
        mcmc = pyro.infer.MCMC(
            GWG(_param_model, jit_compile=jit_compile),
            num_samples=30,
            warmup_steps=5,
            disable_progbar=True,
        )
    else:
        mcmc = MCMC(
            GWG(_param_model, jit_compile=jit_compile),
            num_samples=30,
            warmup_steps=5,
            num_chains=3,
            disable_progbar=True,
        )
    mcmc.run()
    return mcmc.get_samples()["x"]


@pytest.mark.parametrize("runner", ["pyro", "pyro_gwg"])
@pytest.mark.parametrize(
    "jit_compile",
    [True, "auto"] + [pytest.param(m, marks=pytest.mark.slow) for m in ("make_fx", "inductor")],
)
def test_pyro_param_values_are_arguments_of_the_compiled_transition(
    runner, jit_compile, monkeypatch, tmp_path
):
    # a model reading pyro.param compiles (it raised "Unsupported value kind: Tensor"),
    # draws what the eager path draws, and a value set between runs is the one used
    # (also by the package that AOTInductor compiled and cached in the first run)
    monkeypatch.setenv(compilation.CACHE_ENV, str(tmp_path))
    pyro.clear_param_store()
    for value in (0.5, -3.0):
        pyro.get_param_store()["w"] = torch.tensor(value)
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompilationWarning)
            compiled = _param_draws(runner, jit_compile)
        eager = _param_draws(runner, False)
        if jit_compile == "make_fx":  # TorchInductor's own random numbers: same law only
            assert compiled.float().mean() < 0.6 if value < 0 else compiled.float().mean() > 0.4
        else:
            assert torch.equal(compiled, eager)
    assert float(pyro.param("w")) == -3.0


def test_the_energy_takes_pyro_param_values_as_arguments():
    pyro.clear_param_store()
    energy = pyro_gwg.ModelDensity(_param_model, jit_compile=True)
    assert energy.param_names == ["w", "p"]
    codes = torch.tensor([[1, 0, 1]])
    compiled = energy.value_and_grad(codes)
    pyro.get_param_store()["w"] = torch.tensor(2.0)
    changed = energy.value_and_grad(codes)
    energy.jit_compile = False
    eager = energy.value_and_grad(codes)
    assert not torch.allclose(compiled[0], changed[0])
    assert torch.allclose(changed[0], eager[0]) and torch.allclose(changed[1], eager[1])
    assert len(energy._compiled) == 1  # one trace, whatever the parameter's value


def test_pyro_module_parameters_are_not_compiled_in():
    net = torch.nn.Linear(1, 3)

    def model():
        pyro.module("net", net)
        x = pyro.sample("x", dist.Bernoulli(logits=net(torch.ones(1))).to_event(1))
        pyro.sample("y", dist.Normal(x.sum(-1), 1.0), obs=torch.tensor(2.0))

    pyro.clear_param_store()
    with pytest.raises(UnsupportedModelError, match="pyro.module.*'net\\$\\$\\$weight'"):
        GWG(model, jit_compile=True).setup(0)
    kernel = GWG(model)
    with pytest.warns(CompilationWarning, match="pyro.module"):
        kernel.setup(0)
    assert kernel.energy.compilable == ()


# ---------------------------------------------------------------- the disk cache's packages


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
    """aot_compile's exporter, compiler and loader replaced: counts compilations and
    loads, and saves fake packages."""

    def __init__(self, monkeypatch):
        self.compiled, self.loaded = [], []
        monkeypatch.setattr(compilation, "_export", lambda fn, inputs: "program")
        monkeypatch.setattr(compilation, "_package_key", lambda program, inputs: "key")
        monkeypatch.setattr(
            torch._inductor, "aoti_compile_and_package", self.compile, raising=False
        )
        monkeypatch.setattr(compilation, "_load", self.load)

    def compile(self, program, package_path):
        self.compiled.append(package_path)
        _fake_package(package_path)

    def load(self, path, example_inputs):
        self.loaded.append(path)
        return "loaded"


@pytest.mark.parametrize("kind", ["inside the zip", "truncated", "garbage"])
def test_a_damaged_package_is_never_loaded_and_is_compiled_afresh(kind, monkeypatch, tmp_path):
    monkeypatch.setenv(compilation.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(compilation, "_DAMAGED", set())
    fake = _FakeAot(monkeypatch)
    x = (torch.zeros(2),)
    assert compilation.aot_compile(None, x, alias="trace-key") == "loaded"
    package = compilation.cache_dir() / "key.pt2"
    assert len(fake.compiled) == 1 and fake.loaded == [package]
    assert compilation.cached_aot("trace-key", x) == "loaded"  # whole: loaded
    assert compilation.aot_compile(None, x) == "loaded" and len(fake.compiled) == 1
    _damage(kind, package)
    with pytest.warns(CompilationWarning, match=re.escape(str(package)) + " is damaged"):
        assert compilation.cached_aot("trace-key", x) is None  # not loaded
    assert len(fake.loaded) == 3 and not package.exists()  # removed
    compilation.aot_compile(None, x)  # compiled afresh, saved over the damaged one
    assert len(fake.compiled) == 2 and fake.loaded[-1] == package
    assert compilation.cached_aot("trace-key", x) == "loaded"
    _damage(kind, package)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilationWarning)  # one warning per file
        assert compilation.aot_compile(None, x) == "loaded"  # found damaged: recompiled
    assert len(fake.compiled) == 3 and len(fake.loaded) == 6


def test_a_package_without_its_checksum_is_compiled_afresh(monkeypatch, tmp_path):
    # a package saved by an older pyro-gwg, or whose checksum is not written yet
    monkeypatch.setenv(compilation.CACHE_ENV, str(tmp_path))
    fake = _FakeAot(monkeypatch)
    x = (torch.zeros(2),)
    compilation.aot_compile(None, x, alias="trace-key")
    compilation._checksum_path(compilation.cache_dir() / "key.pt2").unlink()
    assert compilation.cached_aot("trace-key", x) is None
    compilation.aot_compile(None, x)
    assert len(fake.compiled) == 2 and len(fake.loaded) == 2


def test_a_package_that_does_not_load_is_reported_with_its_file(monkeypatch, tmp_path):
    monkeypatch.setenv(compilation.CACHE_ENV, str(tmp_path))
    _FakeAot(monkeypatch)
    x = (torch.zeros(2),)
    compilation.aot_compile(None, x, alias="trace-key")
    monkeypatch.undo()  # the real loader, on a fake package
    monkeypatch.setenv(compilation.CACHE_ENV, str(tmp_path))
    if not compilation.aot_available():
        pytest.skip("no AOTInductor packages in this PyTorch")
    package = compilation.cache_dir() / "key.pt2"
    with pytest.warns(
        CompilationWarning,
        match=r"the cached package {} does not load".format(re.escape(str(package))),
    ):
        assert compilation.cached_aot("trace-key", x) is None


@pytest.mark.parametrize("umask", [0o002, 0o077])
def test_cache_files_follow_the_umask(umask, monkeypatch, tmp_path):
    monkeypatch.setenv(compilation.CACHE_ENV, str(tmp_path))
    _FakeAot(monkeypatch)
    previous = os.umask(umask)
    try:
        compilation.aot_compile(None, (torch.zeros(2),), alias="trace-key", ops=3)
    finally:
        os.umask(previous)
    folder = compilation.cache_dir()
    files = [folder / "key.pt2", folder / "key.pt2.sha256", folder / "aliases" / "trace-key"]
    files.append(folder / "compile_times.json")
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path


# ---------------------------------------------------------------- announced compilations


class _NoAot:
    """The cost model says compile, AOTInductor is expected to take ``seconds`` and
    ``try_aot_compile`` records its calls and fails (no real compilation)."""

    def __init__(self, monkeypatch, tmp_path, seconds):
        self.calls = []
        monkeypatch.setenv(compilation.CACHE_ENV, str(tmp_path))
        monkeypatch.setattr(compilation, "worth_compiling", lambda *args, **kwargs: True)
        monkeypatch.setattr(
            compilation, "estimated_compile_seconds", lambda ops, device="cpu": seconds
        )
        monkeypatch.setattr(compilation, "try_aot_compile", lambda *args: self.calls.append(1))


#: "auto" compiles with AOTInductor only where PyTorch has its packages (2.6 and later)
needs_aot = pytest.mark.skipif(
    not compilation.aot_available(), reason="no AOTInductor packages in this PyTorch"
)


@needs_aot
@pytest.mark.parametrize("seconds", [0.2, 5.0])
def test_a_compilation_of_a_second_or_more_is_announced_once(
    seconds, monkeypatch, tmp_path, capsys
):
    model, args = SUITE["coupled_binary_field"]
    fake = _NoAot(monkeypatch, tmp_path, seconds)
    pyro.infer.MCMC(GWG(model), num_samples=30, warmup_steps=0, disable_progbar=True).run(*args)
    assert fake.calls == [1]
    lines = [line for line in capsys.readouterr().err.splitlines() if "pyro-gwg" in line]
    if seconds < compilation.ANNOUNCE_SECONDS:
        assert lines == []
    else:
        assert lines == [
            "pyro-gwg: compiling the transition with AOTInductor, about 5 s (once: later "
            "runs load it from the disk cache); jit_compile=True (TorchScript only) or "
            "False runs without it."
        ]
    # pyro_gwg.MCMC also shows it in its progress bar
    shown = []
    monkeypatch.setattr(
        "pyro_gwg.runner.progress.Progress.compiling", lambda self, m: shown.append(m)
    )
    MCMC(GWG(model), num_samples=30, warmup_steps=0, num_chains=2).run(*args)
    assert shown == ["compiling with AOTInductor, about {:.0f} s".format(seconds)]
    assert len([line for line in capsys.readouterr().err.splitlines() if "pyro-gwg" in line]) == (
        len(lines)
    )


@needs_aot
def test_the_kernel_weighs_compilation_against_the_draws_left_in_pyro_infer_mcmc(monkeypatch):
    # pyro.infer.MCMC does not tell its kernel how many draws it will ask for: the
    # kernel reads it from Pyro's sampling loop, so that the cost model refuses a
    # compilation that cannot pay back before the run ends (it compiled once the time
    # spent reached the compile time, e.g. at 96 % of a run)
    model, args = SUITE["coupled_binary_field"]
    horizons = []

    def never(seconds_per_call, calls_left, seconds_spent, compile_seconds, **kwargs):
        horizons.append(calls_left)
        return False

    monkeypatch.setattr(compilation, "worth_compiling", never)
    pyro.infer.MCMC(GWG(model), num_samples=20, warmup_steps=5, disable_progbar=True).run(*args)
    assert horizons and all(isinstance(left, int) for left in horizons)
    assert horizons[-1] <= 1 and max(horizons) < 25
    # outside a run (the kernel stepped by hand) the horizon stays unknown
    kernel = GWG(model)
    kernel.setup(0, *args)
    assert kernel.driver.horizon is None
