r"""The one chain loop: :class:`ChainDriver` runs an algorithm's transitions on a batch
of chains.

Every consumer of a sampler drives its chains through a :class:`ChainDriver`: the Pyro
kernel adapter (:class:`~pyro_gwg.DiscreteKernel`, one step per
:meth:`~pyro.infer.mcmc.mcmc_kernel.MCMCKernel.sample`), the vectorised runner
:class:`pyro_gwg.MCMC`, the estimators, PCD training, the exactness tests and the
benchmarks. The driver owns

* the state of the chains (``[C, ...]`` tensors in the algorithm's state tuple) and the
  step counter ``t`` (warmup steps first);
* the warmup adaptation (:mod:`pyro_gwg.adaptation`), called after every warmup step;
* one cache of compiled transitions, keyed by (steps per call, integer type of the
  returned codes, compiler, the ``build`` arguments in force);
* the record of moves after warmup, for the stuck-chain and never-moving-coordinate
  warnings (:class:`MoveMonitor`).

:meth:`ChainDriver.run` is the loop. It takes ``every`` transitions per call of one
compiled function (the whole block: density forward and backward passes, proposal, MH;
see :mod:`pyro_gwg.compilation`) and hands each block to ``observe``; warmup steps of an
adapting algorithm go one at a time, and a last block shorter than ``every`` runs
eagerly rather than compiling a function for its length.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch

from pyro_gwg import compilation
from pyro_gwg.bridge.nan import invalid_evaluations
from pyro_gwg.compilation import compile_function
from pyro_gwg.density import Density
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.layout import CoordinateLayout

__all__ = [
    "ChainDriver",
    "CheckedAlgorithm",
    "MoveMonitor",
    "Observer",
    "ONE_STEP_BACKENDS",
    "THREAD_GAIN",
    "THREAD_TUNING_CALLS",
    "TIMED_CALLS",
    "UNTIMED_CALLS",
    "checked_algorithm",
    "fewest_fast_threads",
]

logger = logging.getLogger(__name__)

#: compilers whose blocks are a Python loop over one compiled step (see :meth:`_block`)
ONE_STEP_BACKENDS = ("auto", "aot")

#: calls of a function in the ``"auto"`` mode not timed for the cost model (the
#: TorchScript executor specialises the graph during its first calls)
UNTIMED_CALLS = 2

#: timed calls the cost model takes the median of before it decides: one call can be
#: slow for reasons of its own (the TorchScript executor may optimise a large graph
#: during an early call), and one slow call must not start a long compilation
TIMED_CALLS = 5

#: what each compiler slower than ``"trace"`` is called in its announcement (see
#: :func:`~pyro_gwg.compilation.announce`), with a remark
_COMPILER_NAMES = {
    "aot": ("AOTInductor", "once: later runs load it from the disk cache"),
    "compile": ("torch.compile", ""),
    "make_fx": ("TorchInductor (make_fx)", ""),
}

#: ``observe(t, info, codes, log_joint)``: a block of transitions starting at step ``t``
#: (counted from the first warmup step), with ``info`` fields ``[C, n]``, the states
#: ``codes [C, n, D]`` after each transition and their log joints ``[C, n]``
Observer = Callable[[int, NamedTuple, torch.Tensor, torch.Tensor], None]


class CheckedAlgorithm(Algorithm):
    """An :class:`~pyro_gwg.proposals.algorithm.Algorithm` whose entry points check
    their input (see :func:`checked_algorithm`)."""

    __slots__ = ()


def checked_algorithm(algorithm: Algorithm, layout: CoordinateLayout) -> CheckedAlgorithm:
    """``algorithm`` with checks at its entry points: ``init`` refuses codes that are not
    long ``[num_chains, D]`` states of ``layout``
    (:meth:`~pyro_gwg.proposals.layout.CoordinateLayout.check_codes`, once per call, on
    the states given), ``step`` a state whose codes are not shaped ``[num_chains, D]``
    (a comparison of shapes: a compiled transition records it as a constant, and an
    eager one spends a Python comparison). Every kernel's ``build`` and the
    :class:`ChainDriver` return their algorithms checked; an algorithm already checked
    is returned as it is.

    :param Algorithm algorithm: the ``(init, step)`` pair.
    :param CoordinateLayout layout: the coordinates of the density it samples.
    :rtype: CheckedAlgorithm
    """
    if isinstance(algorithm, CheckedAlgorithm):
        return algorithm
    init, step = algorithm
    num_coords = layout.num_coords

    def checked_step(state: NamedTuple) -> Tuple[NamedTuple, NamedTuple]:
        codes = state.codes
        if codes.dim() != 2 or codes.shape[1] != num_coords:
            raise ValueError(
                "step takes a state whose codes are shaped [num_chains, D] = [C, {}] (the "
                "coordinates of the density's layout), got codes of shape {}: pass the "
                "state that this algorithm's init or step returned.".format(
                    num_coords, tuple(codes.shape)
                )
            )
        return step(state)

    return CheckedAlgorithm(_CheckedInit(init, layout), checked_step)


class _CheckedInit:
    """An algorithm's ``init`` that checks its codes first; ``unchecked`` is the
    ``init`` itself (for states known to be valid: the chains' own)."""

    def __init__(self, init: Callable[[torch.Tensor], NamedTuple], layout: CoordinateLayout):
        self.unchecked = init
        self.layout = layout

    def __call__(self, codes: torch.Tensor) -> NamedTuple:
        self.layout.check_codes(codes)
        return self.unchecked(codes)


class MoveMonitor:
    """Moves after warmup: per chain, the steps that changed its state; per coordinate,
    whether it ever left the chains' first post-warmup states."""

    def __init__(self) -> None:
        self.moved: Optional[torch.Tensor] = None  # [C] steps that changed the state
        self.first: Optional[torch.Tensor] = None  # [C, D] first states after warmup
        self.unchanged: Optional[torch.Tensor] = None  # bool [D]
        self.unchecked_coords = True  # whether some coordinate has not moved yet
        self.steps = 0

    def observe(self, info: NamedTuple, codes: torch.Tensor) -> None:
        """Count the moves of ``n`` transitions: ``info`` fields ``[C, n]``, states
        ``codes [C, n, D]``."""
        moved = (info.accepted & (info.num_changed > 0)).reshape(codes.shape[:2]).sum(1)
        if self.moved is None:
            self.moved, self.first = moved, codes[:, 0]
            self.unchanged = torch.ones_like(codes[0, 0], dtype=torch.bool)
        else:
            self.moved = self.moved + moved
        if self.unchecked_coords:  # once every coordinate has moved, nothing to compare
            self.unchanged &= (codes == self.first.unsqueeze(1)).all(1).all(0)
            self.unchecked_coords = bool(self.unchanged.any())
        self.steps += codes.shape[1]


class _CallArguments(Sequence):
    """The arguments besides the state of the current call of a compiled transition
    (the values a density is conditioned on, ``pyro.param`` values), which the compiled
    function sets as it starts: the density view the transition was built on reads
    them, as tensors of the tracer while it traces."""

    def __init__(self) -> None:
        self.tensors: Tuple[torch.Tensor, ...] = ()

    def __getitem__(self, index):
        return self.tensors[index]

    def __len__(self) -> int:
        return len(self.tensors)


class ChainDriver:
    """Runs the transitions of ``build(density, **static)`` on a batch of chains.

    :param callable build: ``build(density, **static) -> Algorithm`` (see
        :mod:`pyro_gwg.proposals.algorithm`), e.g. a kernel's
        :meth:`~pyro_gwg.DiscreteKernel.build`.
    :param Density density: the density sampled, or ``None`` for an algorithm that
        reads none (e.g. the block-Gibbs sweeps of :func:`~pyro_gwg.models.rbm.block_gibbs`).
    :param adaptation: the warmup adaptation (see :mod:`pyro_gwg.adaptation`), or
        ``None``; its ``static`` dict overrides ``build``'s arguments.
    :param int num_warmup: warmup steps (adapted, when there is an adaptation).
    :param str backend: the compiler of blocks of transitions (a backend of
        :func:`~pyro_gwg.compilation.compile_function`: ``"aot"``, ``"compile"``,
        ``"make_fx"``, ``"trace"``), ``"auto"`` or ``None`` for eager transitions.
        ``"auto"`` starts each function with ``"trace"`` (milliseconds to compile) and
        moves it to ``"aot"`` when the cost model
        :func:`~pyro_gwg.compilation.worth_compiling` says the compile time will be
        paid back: at once when the on-disk cache already has its package, else from
        the time per call measured so far, the predicted compile time and the calls
        left before :attr:`horizon`. Blocks of ``"auto"`` and ``"aot"`` are a Python
        loop over one compiled step (one compilation serves every block length;
        ``"aot"`` looks up the disk cache by the trace of the step, as ``"auto"``
        does, before exporting anything). The tensors a density reads that change
        between calls (the ``given`` and ``pyro.param`` values of a
        :class:`~pyro_gwg.ModelDensity`, see its
        :meth:`~pyro_gwg.ModelDensity.arguments`) are passed to the compiled
        function as arguments, with their values of each call.
    :param int horizon: the initial :attr:`horizon`.
    :param callable on_compile: the initial :attr:`on_compile`.

    :ivar NamedTuple state: the chains' state (``None`` before :meth:`init`).
    :ivar int t: transitions taken since :meth:`init`.
    :ivar MoveMonitor moves: moves after warmup.
    :ivar horizon: the step count ``t`` at which the caller will stop, or ``None`` when
        unknown (the cost model of ``"auto"`` then compiles once the time spent in a
        function reaches the predicted compile time).
    :ivar on_compile: ``callable(message)`` told before a compilation by TorchInductor
        (``"aot"``, ``"compile"``, ``"make_fx"``, and the move of ``"auto"`` to
        ``"aot"``) starts, with the seconds it is expected to take (a runner shows it in
        its progress bar), or ``None``. Such a compilation also says so in one line on
        standard error when it is expected to take a second or more
        (:func:`~pyro_gwg.compilation.announce`).
    :ivar float compile_seconds: wall-clock seconds spent compiling since the driver
        was made: tracing, exporting and AOTInductor compilation, or loading a
        compiled package from the disk cache (the first traced call runs one step).
    """

    def __init__(
        self,
        build: Callable[..., Algorithm],
        density: Optional[Density],
        *,
        adaptation=None,
        num_warmup: int = 0,
        backend: Optional[str] = None,
        horizon: Optional[int] = None,
        on_compile: Optional[Callable[[str], None]] = None,
    ) -> None:
        self.build = build
        self.density = density
        self.adaptation = adaptation
        self.num_warmup = int(num_warmup)
        self.backend = backend
        self.state: Optional[NamedTuple] = None
        self.t = 0
        self.moves = MoveMonitor()
        self.horizon = horizon
        self.on_compile = on_compile
        self.compile_seconds = 0.0
        self._algorithms: Dict[tuple, Algorithm] = {}
        self._compiled: Dict[tuple, Callable] = {}
        # the build arguments in force, as a cache key (changed only by the adaptation)
        self._static_key = self._key_of_static()

    # ------------------------------------------------------------------ state
    def _key_of_static(self) -> tuple:
        if self.adaptation is None:
            return ()
        return tuple(sorted(self.adaptation.static.items()))

    @property
    def static(self) -> Dict[str, object]:
        """The ``build`` arguments in force (set by the adaptation)."""
        return dict(self._static_key)

    @property
    def algorithm(self) -> Algorithm:
        """The ``(init, step)`` pair in force, on the density itself (eager), checked
        (:func:`checked_algorithm`) where there is a density."""
        key = self._static_key
        if key not in self._algorithms:
            algorithm = self.build(self.density, **self.static)
            if self.density is not None:
                algorithm = checked_algorithm(algorithm, self.density.layout)
            self._algorithms[key] = algorithm
        return self._algorithms[key]

    def init(self, codes: torch.Tensor) -> NamedTuple:
        """Start the chains at ``codes`` (long ``[C, D]``, one evaluation of the
        density); the step counter keeps its value, so that a restart during warmup
        continues the warmup, and so does the record of moves unless the number of
        chains changed.

        :rtype: NamedTuple
        :raises ValueError: for codes that are not ``[C, D]`` states of the density's
            layout (see :meth:`~pyro_gwg.proposals.layout.CoordinateLayout.check_codes`),
            unchecked when they are the tensor of the chains' current states (a
            re-evaluation after the density changed, a tempering step).
        """
        init = self.algorithm.init
        if self.state is not None and codes is self.state.codes:
            init = getattr(init, "unchecked", init)
        state = init(codes)
        if self.state is None or self.state.codes.shape != state.codes.shape:
            self.moves = MoveMonitor()  # other chains: their moves are counted afresh
        self.state = state
        return self.state

    def _check_started(self, method: str) -> None:
        if self.state is None:
            raise RuntimeError(
                "ChainDriver.{}() needs the chains' states: call driver.init(codes) "
                "first, with codes long [num_chains, D] (D the coordinates of the "
                "density's layout).".format(method)
            )

    @property
    def warming_up(self) -> bool:
        return self.t < self.num_warmup

    # ------------------------------------------------------------------ the loop
    def run(
        self,
        num_steps: int,
        observe: Optional[Observer] = None,
        every: int = 1,
        code_dtype: torch.dtype = torch.long,
    ) -> None:
        """``num_steps`` transitions of every chain.

        :param int num_steps: transitions.
        :param callable observe: ``observe(t, info, codes, log_joint)`` after every
            block of transitions (see :data:`Observer`), or ``None``.
        :param int every: transitions per block (per call of the compiled function);
            warmup steps of an adapting algorithm go one at a time.
        :param torch.dtype code_dtype: integer type of the ``codes`` handed to
            ``observe``.
        """
        self._check_started("run")
        end = self.t + int(num_steps)
        while self.t < end:
            start = self.t
            if self.adaptation is not None and self.warming_up:  # one adapted step
                info, _ = self.step()
                info = type(info)(*(field.unsqueeze(1) for field in info))
                codes = self.state.codes.to(code_dtype).unsqueeze(1)
                log_joint = self.state.log_joint.unsqueeze(1)
            else:
                size = min(every, end - start, self._to_phase_end())
                info, codes, log_joint = self._block(size, code_dtype, size in (every, 1))
                self.t += size
                first = max(self.num_warmup - start, 0)
                if first == 0:
                    self.moves.observe(info, codes)
                elif first < size:
                    self.moves.observe(
                        type(info)(*(field[:, first:] for field in info)), codes[:, first:]
                    )
            if observe is not None:
                observe(start, info, codes, log_joint)

    def _to_phase_end(self) -> int:
        """Steps to the end of warmup (or an unbounded number after it): a block never
        straddles the end of warmup."""
        return self.num_warmup - self.t if self.warming_up else 1 << 62

    def _block(
        self, num_steps: int, code_dtype: torch.dtype, compiled: bool
    ) -> Tuple[NamedTuple, torch.Tensor, torch.Tensor]:
        backend = self.backend if compiled else None
        if self.backend in ONE_STEP_BACKENDS:
            # a Python loop over the one-step function: it compiles once, whatever
            # the block lengths (an AOTInductor step costs what a step of a compiled
            # block does), and the cost model of "auto" counts steps
            single = self._step_function(None)
            fn = self._function(
                (num_steps, code_dtype, self.backend),
                lambda _: _blocks(lambda state: single(state)[:2], num_steps, code_dtype),
                None,
                tuned=False,
            )
        else:
            fn = self._function(
                (num_steps, code_dtype, backend),
                lambda step: _blocks(step, num_steps, code_dtype),
                backend,
            )
        self.state, info, (codes, log_joint) = fn(self.state)
        return info, codes, log_joint

    def _step_function(self, extras: Optional[Callable[[NamedTuple], tuple]]) -> Callable:
        """The one-step function ``state -> (state, info, extras(state))`` in force."""
        adapting = self.adaptation is not None and self.warming_up
        return self._function(
            ("step", extras, self.backend),
            lambda step: _single(step, extras),
            self.backend,
            lambda: self._steps_left(self.num_warmup if adapting else self.horizon),
        )

    def step(self, extras: Optional[Callable[[NamedTuple], tuple]] = None) -> tuple:
        """One transition of every chain, with the warmup adaptation: the entry point
        of the Pyro kernel adapter (one draw per
        :meth:`~pyro.infer.mcmc.mcmc_kernel.MCMCKernel.sample`), which needs neither
        stacked statistics nor stacked states.

        :param callable extras: ``state -> tuple of tensors`` computed inside the
            compiled transition from the new state (e.g. the model values of the
            chains), or ``None``.
        :returns: ``(info, extras)``: the step's statistics (``[C]`` fields) and the
            tensors ``extras`` returned (an empty tuple without it).
        """
        self._check_started("step")
        self.state, info, out = self._step_function(extras)(self.state)
        start = self.t
        self.t += 1
        if start < self.num_warmup:
            if self.adaptation is not None:
                self.state = self.adaptation.update(start, self.state, info)
                self._static_key = self._key_of_static()
        else:
            self.moves.observe(
                type(info)(*(field.unsqueeze(1) for field in info)),
                self.state.codes.unsqueeze(1),
            )
        return info, out

    # ------------------------------------------------------------------ compilation
    def _steps_left(self, end: Optional[int]) -> Optional[int]:
        return None if end is None else max(end - self.t, 0)

    def _function(
        self,
        key: tuple,
        body_of: Callable,
        backend: Optional[str],
        calls_left: Callable[[], Optional[int]] = lambda: None,
        tuned: bool = True,
    ) -> Callable:
        """The function of the cache for ``key`` and the build arguments in force,
        compiled (see :meth:`_compile`) on its first use; ``calls_left()`` is the
        number of calls the caller still expects (``None``: unknown). On the CPU it
        runs with the thread count it is fastest with (:class:`_ThreadTuned`) unless
        ``tuned`` is false (a loop over functions that are tuned themselves)."""
        key = key + self._static_key
        fn = self._compiled.get(key)
        if fn is None:
            begin = time.perf_counter()
            fn = self._compile(body_of, backend, calls_left)
            self.compile_seconds += time.perf_counter() - begin
            if tuned and self.state.codes.device.type == "cpu":
                fn = _ThreadTuned(fn)
            self._compiled[key] = fn
        return fn

    def _compile(
        self,
        body_of: Callable[[Callable], Callable],
        backend: Optional[str],
        calls_left: Callable[[], Optional[int]] = lambda: None,
    ):
        """``state -> (state, info, extras)``: ``body_of(step)`` (a function of the state
        built on the algorithm's ``step``) compiled whole by ``backend`` (with a check
        for NaN or ``+inf`` log densities returned as a flag, since a compiled function
        cannot raise), or eager where ``backend`` is ``None``, where the density cannot
        be compiled and where every compiler fails. ``"auto"`` gives an
        :class:`_AutoCompiled` function."""
        density = self.density
        usable = tuple(density.compilable) if density is not None else ()
        if backend is None or not usable or (backend not in usable and backend != "auto"):
            return body_of(self.algorithm.step)
        state = self.state
        num_chains = state.codes.shape[0]
        build, static, state_type, types = self.build, self.static, type(state), []
        # tensors the density reads that change between calls (values it is conditioned
        # on, pyro.param values): arguments of the compiled function, not constants
        arguments = density.arguments
        num_state = len(state)

        # the transition is built here, eagerly (a build may read its constants' values,
        # which a tracer cannot), on the density that reads the arguments of each call
        call = _CallArguments()
        body = body_of(build(density.traceable(num_chains, call), **static).step)

        def flat(*tensors: torch.Tensor) -> tuple:
            call.tensors = tensors[num_state:]
            with density.recording() as evaluations:
                new_state, info, extras = body(state_type(*tensors[:num_state]))
            types.append((type(info), len(extras)))
            checks = invalid_evaluations(evaluations, new_state.codes)
            return (*new_state, *info, *extras, *checks)

        example = tuple(state) + arguments()

        def wrap(compiled: Callable) -> Callable:
            info_type, num_extras = types[0]
            end_info = num_state + len(info_type._fields)

            def run(current: NamedTuple) -> tuple:
                out = compiled(*current, *arguments())
                invalid, bad_codes = out[-2:]
                if bool(invalid):
                    density.raise_invalid(bad_codes)
                info = info_type(*out[num_state:end_info])
                extras = tuple(out[end_info : end_info + num_extras])
                return state_type(*out[:num_state]), info, extras

            return run

        device = state.codes.device.type
        if backend not in ONE_STEP_BACKENDS:
            if backend != "trace":  # TorchInductor: seconds, not milliseconds
                self._announce(backend, compilation.estimated_compile_seconds(None, device))
            compiled = compile_function(flat, example, backend)
            return body_of(self.algorithm.step) if compiled is None else wrap(compiled)
        # "auto" and "aot": traced first, which names the function in the disk cache
        if "aot" in usable and state.codes.device.type == "cpu":
            compilation.prewarm_loader()  # a package load's CPU probe, while tracing
        traced = compile_function(flat, example, "trace") if "trace" in usable else None
        key = compilation.trace_key(traced, example) if traced is not None else None
        if not compilation.aot_available():
            usable = tuple(name for name in usable if name != "aot")
        cached = compilation.cached_aot(key, example) if "aot" in usable else None
        if cached is not None:
            logger.info("loaded a compiled transition from %s", compilation.cache_dir())
            return wrap(cached)
        start = body_of(self.algorithm.step) if traced is None else wrap(traced)
        if "aot" not in usable:
            return start
        ops = compilation.trace_ops(traced) if traced is not None else None
        estimate = compilation.estimated_compile_seconds(ops, device)
        if backend == "aot":
            self._announce("aot", estimate)
            compiled = compilation.try_aot_compile(flat, example, key, ops)
            return start if compiled is None else wrap(compiled)

        def upgrade() -> Optional[Callable]:
            current = tuple(self.state) + arguments()
            self._announce("aot", estimate)
            begin = time.perf_counter()
            compiled = compilation.try_aot_compile(flat, current, key, ops)
            self.compile_seconds += time.perf_counter() - begin
            return None if compiled is None else wrap(compiled)

        return _AutoCompiled(start, upgrade, calls_left, estimate, device)

    def _announce(self, backend: str, seconds: float) -> None:
        """Say that a compilation by ``backend`` expected to take ``seconds`` starts
        (:func:`~pyro_gwg.compilation.announce`: a line on standard error from a
        second on) and show it in the caller's progress bar (:attr:`on_compile`)."""
        compiler, note = _COMPILER_NAMES[backend]
        short = compilation.announce(compiler, seconds, note)
        if self.on_compile is not None:
            self.on_compile(short)


class _AutoCompiled:
    """A function of the ``"auto"`` mode: ``start`` (traced, or eager) until the cost
    model :func:`~pyro_gwg.compilation.worth_compiling` says that ``upgrade()``
    (AOTInductor) pays, then what ``upgrade`` returned (``start`` again when it
    failed)."""

    def __init__(
        self,
        start: Callable,
        upgrade: Callable[[], Optional[Callable]],
        calls_left: Callable[[], Optional[int]],
        compile_seconds: float,
        device: str,
    ) -> None:
        self.current = start
        self.final: Optional[Callable] = None
        self.upgrade = upgrade
        self.calls_left = calls_left
        self.compile_seconds = compile_seconds
        self.device = device
        self.calls = 0
        self.spent = 0.0  # seconds in all calls
        self.timed: List[float] = []  # seconds of the calls after the first UNTIMED_CALLS

    def __call__(self, state: NamedTuple) -> tuple:
        if self.final is not None:
            return self.final(state)
        begin = time.perf_counter()
        out = self.current(state)
        if self.device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - begin
        self.calls += 1
        self.spent += seconds
        if self.calls > UNTIMED_CALLS:
            self.timed.append(seconds)
            if len(self.timed) < TIMED_CALLS:
                return out
            per_call = sorted(self.timed)[len(self.timed) // 2]
            del self.timed[: -4 * TIMED_CALLS]  # the recent calls are enough
            left = self.calls_left()
            if compilation.worth_compiling(per_call, left, self.spent, self.compile_seconds):
                self.final = self.upgrade() or self.current
        return out


#: timed calls per candidate thread count before :class:`_ThreadTuned` chooses
THREAD_TUNING_CALLS = 8

#: how much faster (a fraction of the time per call) more threads must be to be chosen
THREAD_GAIN = 0.1


def fewest_fast_threads(seconds: Dict[int, List[float]], gain: float = THREAD_GAIN) -> int:
    """The thread count to run a function with, from the times of its calls under each
    candidate count: the fewest threads whose median time is within ``gain`` (a
    fraction) of the best median. Extra threads must pay for themselves: on a small
    model, or on a machine whose cores other processes use, PyTorch's intra-op threads
    mostly wait on each other (a 10 x 10 Ising transition ran 6x slower with two
    threads than with one on a loaded 2-core machine).

    :param dict seconds: ``{threads: [seconds per call, ...]}``.
    :rtype: int
    """
    medians = {n: sorted(times)[len(times) // 2] for n, times in seconds.items() if times}
    best = min(medians.values())
    return min(n for n, median in medians.items() if median <= best * (1.0 + gain))


class _ThreadTuned:
    """``fn`` run with the number of PyTorch threads that suits it on this machine, now:
    its calls after the first :data:`UNTIMED_CALLS` alternate between one thread and
    PyTorch's setting (:func:`torch.get_num_threads`) until each has
    :data:`THREAD_TUNING_CALLS` timings; :func:`fewest_fast_threads` then fixes the
    count for every later call. The caller's setting is restored after each call."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        default = torch.get_num_threads()
        self.seconds: Dict[int, List[float]] = {n: [] for n in sorted({1, default})}
        self.threads: Optional[int] = default if len(self.seconds) == 1 else None
        self.calls = 0

    def __call__(self, state: NamedTuple) -> tuple:
        self.calls += 1
        tuning = self.threads is None and self.calls > UNTIMED_CALLS
        if tuning:
            candidates = list(self.seconds)
            threads = candidates[self.calls % len(candidates)]
        else:
            threads = self.threads
        previous = torch.get_num_threads()
        switch = threads is not None and threads != previous
        if switch:
            torch.set_num_threads(threads)
        try:
            begin = time.perf_counter()
            out = self.fn(state)
            seconds = time.perf_counter() - begin
        finally:
            if switch:
                torch.set_num_threads(previous)
        if tuning:
            self.seconds[threads].append(seconds)
            if all(len(times) >= THREAD_TUNING_CALLS for times in self.seconds.values()):
                self.threads = fewest_fast_threads(self.seconds)
                logger.debug("running with %d thread(s): %s", self.threads, self.seconds)
        return out


def _blocks(step: Callable, num_steps: int, code_dtype: torch.dtype) -> Callable:
    """``num_steps`` applications of ``step``, stacking infos, states and log joints:
    ``state -> (state, info [C, n], (codes [C, n, D], log_joint [C, n]))``."""

    def block(state: NamedTuple) -> tuple:
        infos, codes, log_joint = [], [], []
        for _ in range(num_steps):
            state, info = step(state)
            infos.append(info)
            codes.append(state.codes.to(code_dtype))
            log_joint.append(state.log_joint)
        stacked = type(infos[0])(*(torch.stack(field, 1) for field in zip(*infos)))
        return state, stacked, (torch.stack(codes, 1), torch.stack(log_joint, 1))

    return block


def _single(step: Callable, extras: Optional[Callable]) -> Callable:
    """One application of ``step``: ``state -> (state, info, extras(state))``."""

    def one(state: NamedTuple) -> tuple:
        state, info = step(state)
        return state, info, (tuple(extras(state)) if extras is not None else ())

    return one
