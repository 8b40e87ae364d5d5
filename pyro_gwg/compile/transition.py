"""The transition compiler: a kernel's step on a density, as the chain driver calls it.

:func:`compile_transition` turns ``state -> (state, info, extras)`` (a function built on
a kernel's ``step``, see :class:`~pyro_gwg.driver.ChainDriver`) into the form its
``jit_compile`` mode runs (:data:`~pyro_gwg.compile.modes.JIT_COMPILE`). The function
captured is flat: the state's tensors and the density's :meth:`arguments` (the values of
the ``given`` and ``pyro.param`` sites, read at each call, never frozen) in, the new
state's tensors, the step's statistics, the extras and a flag for NaN or ``+inf`` log
densities out (a compiled function cannot raise; the flag is checked after each call
and the error raised then, see :func:`~pyro_gwg.bridge.nan.invalid_evaluations`).
"""

from __future__ import annotations

import logging
import time
from typing import Callable, NamedTuple, Optional, Sequence

import torch

from pyro_gwg.bridge.nan import invalid_evaluations
from pyro_gwg.compile import backends
from pyro_gwg.compile.background import BackgroundCompile, enabled, running_compile
from pyro_gwg.compile.modes import Mode

__all__ = ["BackgroundTransition", "compile_transition"]

logger = logging.getLogger(__name__)

#: seconds an AOTInductor compile of a transition is announced to take (measured:
#: 15-25 s for GWG on Ising, RBM and hidden Markov models on a 2-core machine)
AOT_SECONDS = 20.0


class _CallArguments(Sequence):
    """The density's arguments of the current call of a flat function: what the
    density built for the capture reads (set before each run of its body)."""

    def __init__(self) -> None:
        self.tensors: tuple = ()

    def __getitem__(self, index):
        return self.tensors[index]

    def __len__(self) -> int:
        return len(self.tensors)


class _Flat(NamedTuple):
    """A transition as a function of flat tensors, and its way back to the driver's
    ``(state, info, extras)``."""

    fn: Callable  # (*state, *arguments) -> (*state, *info, *extras, invalid, bad codes)
    example: Callable[[NamedTuple], tuple]  # state -> the flat inputs, now
    wrap: Callable[[Callable], Callable]  # compiled flat function -> driver function


def _flat(body_of: Callable, build: Callable, static: dict, density, state: NamedTuple) -> _Flat:
    num_chains, num_state = state.codes.shape[0], len(state)
    state_type, types = type(state), []  # (info type, number of extras) of the capture
    arguments = density.arguments
    call = _CallArguments()
    # built here, eagerly (a build may read its constants' values, which a capture
    # cannot), on the density that reads the arguments of each call
    body = body_of(build(density.traceable(num_chains, call), **static).step)

    def fn(*tensors: torch.Tensor) -> tuple:
        call.tensors = tensors[num_state:]
        with density.recording() as evaluations:
            new_state, info, extras = body(state_type(*tensors[:num_state]))
        types.append((type(info), len(extras)))
        checks = invalid_evaluations(evaluations, new_state.codes)
        return (*new_state, *info, *extras, *checks)

    def example(current: NamedTuple) -> tuple:
        return tuple(current) + arguments()

    def wrap(compiled: Callable) -> Callable:
        info_type, num_extras = types[0]
        end_info = num_state + len(info_type._fields)

        def run(current: NamedTuple) -> tuple:
            out = compiled(*current, *arguments())
            if bool(out[-2]):
                density.raise_invalid(out[-1])
            info = info_type(*out[num_state:end_info])
            extras = tuple(out[end_info : end_info + num_extras])
            return state_type(*out[:num_state]), info, extras

        return run

    return _Flat(fn, example, wrap)


def compile_transition(
    body_of: Callable[[Callable], Callable],
    eager_step: Callable,
    build: Callable,
    static: dict,
    density,
    state: NamedTuple,
    mode: Mode,
    on_compile: Optional[Callable[[Optional[str]], None]] = None,
    may_compile: Callable[[], bool] = lambda: True,
) -> Callable:
    """``state -> (state, info, extras)``: ``body_of(step)`` in the form ``mode`` runs.

    :param callable body_of: builds the driver's function from a kernel's ``step``.
    :param callable eager_step: the step on the density itself (the eager form).
    :param callable build: the kernel's ``build``; ``build(density, **static)``.
    :param dict static: the build arguments in force.
    :param density: the density sampled, or ``None``.
    :param NamedTuple state: the chains' state now (the example of the capture).
    :param Mode mode: the row of :data:`~pyro_gwg.compile.modes.JIT_COMPILE`.
    :param callable on_compile: told a short message when a compilation starts (a
        runner shows it in its progress bar) and ``None`` when the compiled form
        takes over, or ``None``.
    :param callable may_compile: with ``mode.background``, whether a background
        compile may start now, and the capture come at the second call (see
        :class:`BackgroundTransition`).
    :returns: the function; with ``mode.background`` a :class:`BackgroundTransition`.
    """
    eager = body_of(eager_step)
    usable = tuple(density.compilable) if density is not None else ()
    if mode.backend is None or not usable:
        return eager
    flat = _flat(body_of, build, static, density, state)
    if mode.background:
        return BackgroundTransition(eager, flat, on_compile, may_compile)
    if mode.backend != "graph":
        short = backends.announce(
            "AOTInductor" if mode.backend == "aot" else "TorchInductor (make_fx)", AOT_SECONDS
        )
        if on_compile is not None:
            on_compile(short)
    compiled = backends.compile_function(flat.fn, flat.example(state), mode.backend)
    if on_compile is not None and mode.backend != "graph":
        on_compile(None)
    return eager if compiled is None else flat.wrap(compiled)


#: relative size of the rounding allowed between the captured graph and the eager step,
#: over the largest magnitude they compute (16 float32 epsilons: the graph may run the
#: same arithmetic decomposed otherwise)
ROUNDING = 1e-6
#: random streams on which the captured graph is compared with the eager step
AGREEMENT_TRIES = 2
#: calls a transition makes eagerly before its capture while the driver says no to a
#: compile (an adapting warmup): a capture costs as much as 30-60 eager steps
#: (measured on 10x10 Ising with 16 chains: 0.13 s against 2-4 ms), so a transition
#: that the adaptation leaves sooner (the wide early iterates of dual averaging) is
#: never captured
WARMUP_CAPTURE_CALLS = 32


def _agree(eager: Callable, graph: Callable, example: tuple) -> bool:
    """Whether ``graph`` computes what ``eager`` computes on ``example`` with the same
    random numbers (the caller's random stream is left as it was): the same integers,
    and floats within rounding (:data:`ROUNDING` of the largest magnitude, plus
    ``1e-5``). A graph that departs from the model (a value recorded as a constant,
    control flow that reads values) differs on every stream; a float rounding that
    tips an accept decision or a drawn coordinate does so on few, so the graph is
    refused only when it differs on each of :data:`AGREEMENT_TRIES` streams (the
    current one, then fresh ones)."""
    for attempt in range(AGREEMENT_TRIES):
        with backends.keeping_rng(example):
            if attempt:
                torch.manual_seed(attempt)
            expected = eager(*example)
        with backends.keeping_rng(example):
            if attempt:
                torch.manual_seed(attempt)
            got = graph(*example)
        if len(got) == len(expected) and _close(got, expected):
            return True
    return False


def _close(got: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]) -> bool:
    finite = [e[torch.isfinite(e)] for e in expected if e.is_floating_point()]
    scale = max((float(e.abs().max()) for e in finite if e.numel()), default=0.0)
    atol = 1e-5 + ROUNDING * scale
    return all(
        torch.allclose(g, e, rtol=1e-5, atol=atol, equal_nan=True)
        if e.is_floating_point()
        else torch.equal(g, e)
        for g, e in zip(got, expected)
    )


class BackgroundTransition:
    """The transition of the default mode: the model eagerly for the first call (the
    first draw comes at once), then the captured graph, while AOTInductor compiles it
    in a background process (:class:`~pyro_gwg.compile.background.BackgroundCompile`);
    the compiled package from the first call after it is loaded on. A package already
    in the disk cache is loaded at the capture. Every form draws the same random
    numbers for the same state, so the chains do not depend on when the switch comes.

    The compile starts at the first call at which ``may_compile()`` is true: the driver
    says no during an adapting warmup, whose transitions change with the adapted
    settings (the bound on the number of flips, say) and last a few hundred steps, far
    less than a compile; the transition in force when warmup ends starts its compile
    then. While it says no, the capture waits for the transition's
    :data:`WARMUP_CAPTURE_CALLS`-th call instead of its second.

    :ivar float blocking_seconds: seconds the calls spent capturing and loading
        (the chains waited for them).
    :ivar compile: the background compile while it runs, or ``None``.
    :ivar str form: what runs now: ``"eager"``, ``"graph"`` or ``"aot"``.
    """

    def __init__(
        self, eager: Callable, flat: _Flat, on_compile, may_compile: Callable[[], bool]
    ) -> None:
        self.current = eager
        self.flat = flat
        self.on_compile = on_compile
        self.may_compile = may_compile
        self.deferred: Optional[tuple] = None  # (graph, example, key) of a compile to start
        self.graph: Optional[Callable] = None
        self.compile: Optional[BackgroundCompile] = None
        self.compiled_by: Optional[BackgroundCompile] = None  # (once it has ended)
        self.blocking_seconds = 0.0
        self.form = "eager"
        self.calls = 0
        self.captured = False  # (tried)

    def __call__(self, state: NamedTuple) -> tuple:
        if self.compile is not None and self.compile.done:
            self._switch()
        elif not self.captured and self.calls >= self._capture_call():
            self.captured = True  # (a one-step run never captures)
            self._blocking(self._capture_from, state)
        elif self.deferred is not None and self.may_compile():
            self._blocking(self._start_compile)
        self.calls += 1
        return self.current(state)

    def _capture_call(self) -> int:
        """The 0-based call at which the transition is captured."""
        return 1 if self.may_compile() else WARMUP_CAPTURE_CALLS - 1

    @property
    def background_seconds(self) -> Optional[float]:
        """Seconds from the start of the background compile to its package's load."""
        return None if self.compiled_by is None else self.compiled_by.seconds

    def _blocking(self, work: Callable, *args) -> None:
        begin = time.perf_counter()
        try:
            work(*args)
        finally:
            self.blocking_seconds += time.perf_counter() - begin

    def _capture_from(self, state: NamedTuple) -> None:
        example = self.flat.example(state)
        try:
            graph = backends.capture(self.flat.fn, example)
        except Exception as error:  # cannot be captured: the model runs eagerly
            backends.report_failure("graph", error, "running it eagerly")
            return
        if not _agree(self.flat.fn, graph, example):
            backends.report_failure(
                "graph",
                RuntimeError(
                    "the captured graph gives another step than the model at the same "
                    "state (an operation recorded as a constant, or control flow that "
                    "reads values)"
                ),
                "running it eagerly",
            )
            return
        self.graph = self.flat.wrap(graph)
        self.current, self.form = self.graph, "graph"
        if not backends.aot_available():
            return
        key = backends.graph_key(graph, example)
        cached = backends.cached_package(key)
        if cached is not None:
            logger.info("loaded a compiled transition from %s", backends.cache_dir())
            self._use(cached)
        elif enabled():
            self.deferred = (graph, example, key)
            if self.may_compile():
                self._start_compile()

    def _start_compile(self) -> None:
        (graph, example, key), self.deferred = self.deferred, None
        self.compile = running_compile(key)  # an earlier run's compile of the same transition
        if self.compile is not None:
            self.compile.attach()
        else:
            try:
                self.compile = BackgroundCompile(graph, example, key)
            except Exception as error:  # (no job written: the graph runs on)
                backends.report_failure("aot", error, "running its captured graph")
                return
        if self.on_compile is not None:
            self.on_compile("compiling in the background")

    def _switch(self) -> None:
        compile_, self.compile = self.compile, None
        self.compiled_by = compile_
        compiled = compile_.result()
        if self.on_compile is not None:
            self.on_compile(None)
        if compiled is None:
            backends.report_failure(
                "aot", RuntimeError(compile_.error or "no package"), "running its captured graph"
            )
            return
        self._use(compiled)

    def _use(self, compiled: Callable) -> None:
        """Run ``compiled`` from the next call on; its first call is checked, and a
        package that does not run hands back to the graph."""
        run = self.flat.wrap(compiled)
        fallback = self.graph

        def first(state: NamedTuple) -> tuple:
            try:
                out = run(state)
            except Exception as error:  # a package that does not run here
                backends.report_failure("aot", error, "running its captured graph")
                self.current, self.form = fallback, "graph"
                return fallback(state)
            self.current = run
            return out

        self.current, self.form = first, "aot"

    def detach(self) -> None:
        """The run has ended: a background compile still running goes on to fill the
        disk cache (see :meth:`~pyro_gwg.compile.background.BackgroundCompile.detach`)."""
        if self.compile is not None and not self.compile.done:
            self.compile.detach()
