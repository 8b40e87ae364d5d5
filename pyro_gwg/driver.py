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
* one cache of transitions in the form its ``jit_compile`` mode runs (see
  :mod:`pyro_gwg.compile`), keyed by the caller's function and the ``build`` arguments
  in force;
* the record of moves after warmup, for the stuck-chain and never-moving-coordinate
  warnings (:class:`MoveMonitor`).

:meth:`ChainDriver.run` is the loop. It takes blocks of ``every`` transitions, each a
call of the one-step function (density forward and backward passes, proposal, MH:
compiled whole, see :mod:`pyro_gwg.compile`), stacks their states and statistics once
per block, and hands each block to ``observe``; warmup
steps of an adapting algorithm go one at a time.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import torch

from pyro_gwg.compile.modes import Mode, mode_of
from pyro_gwg.compile.transition import BackgroundTransition, compile_transition
from pyro_gwg.density import Density
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.layout import CoordinateLayout

__all__ = [
    "ChainDriver",
    "CheckedAlgorithm",
    "MoveMonitor",
    "Observer",
    "THREAD_GAIN",
    "THREAD_TUNING_CALLS",
    "UNTIMED_CALLS",
    "checked_algorithm",
    "fewest_fast_threads",
]

logger = logging.getLogger(__name__)

#: calls of a function not timed by :class:`_ThreadTuned` (the first calls of a
#: function capture it, load a package, warm caches)
UNTIMED_CALLS = 2

#: single steps (:meth:`ChainDriver.step`) whose moves are counted at once
UNOBSERVED_STEPS = 64

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
    :param jit_compile: a kernel's ``jit_compile`` value, or a
        :class:`~pyro_gwg.compile.modes.Mode`: how the transitions are compiled (the
        table :data:`~pyro_gwg.compile.modes.JIT_COMPILE`). In the default ``"auto"``
        the first step runs the model eagerly, the next ones its captured graph while
        AOTInductor compiles it in a background process, and the compiled package
        from the first step after it is ready (at once when the disk cache has it).
        The tensors a density reads that change between calls (the ``given`` and
        ``pyro.param`` values of a :class:`~pyro_gwg.ModelDensity`, see its
        :meth:`~pyro_gwg.ModelDensity.arguments`) are arguments of the compiled
        function, passed with their values of each call.
    :param callable on_compile: the initial :attr:`on_compile`.

    :ivar NamedTuple state: the chains' state (``None`` before :meth:`init`).
    :ivar int t: transitions taken since :meth:`init`.
    :ivar MoveMonitor moves: moves after warmup.
    :ivar on_compile: ``callable(message)`` told when a compilation starts (a runner
        shows the message in its progress bar) and ``callable(None)`` when the
        compiled form takes over, or ``None``.
    """

    def __init__(
        self,
        build: Callable[..., Algorithm],
        density: Optional[Density],
        *,
        adaptation=None,
        num_warmup: int = 0,
        jit_compile=False,
        on_compile: Optional[Callable[[Optional[str]], None]] = None,
    ) -> None:
        self.build = build
        self.density = density
        self.adaptation = adaptation
        self.num_warmup = int(num_warmup)
        self.mode = jit_compile if isinstance(jit_compile, Mode) else mode_of(jit_compile)
        self.state: Optional[NamedTuple] = None
        self.t = 0
        self._moves = MoveMonitor()
        self._unobserved: List[tuple] = []  # (info, codes) of steps not yet counted
        self.on_compile = on_compile
        self._compile_seconds = 0.0  # in making the transitions (see compile_seconds)
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
            self._unobserved = []
            self._moves = MoveMonitor()  # other chains: their moves are counted afresh
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
        states: Optional[list] = None,
    ) -> None:
        """``num_steps`` transitions of every chain.

        :param int num_steps: transitions.
        :param callable observe: ``observe(t, info, codes, log_joint)`` after every
            block of transitions (see :data:`Observer`), or ``None``.
        :param int every: transitions per block; warmup steps of an adapting
            algorithm go one at a time.
        :param torch.dtype code_dtype: integer type of the ``codes`` handed to
            ``observe``.
        :param list states: a list the state after each transition is appended to, or
            ``None``.
        """
        self._check_started("run")
        end = self.t + int(num_steps)
        while self.t < end:
            start = self.t
            if self.adaptation is not None and self.warming_up:  # one adapted step
                info, codes, log_joint = self.step_block(code_dtype)
                if states is not None:
                    states.append(self.state)
            else:
                size = min(every, end - start, self._to_phase_end())
                info, codes, log_joint = self._block(size, code_dtype, states)
                self.t += size
                first = max(self.num_warmup - start, 0)
                if first == 0:
                    self.moves.observe(info, codes)
                elif first < size:
                    self._moves.observe(
                        type(info)(*(field[:, first:] for field in info)), codes[:, first:]
                    )
            if observe is not None:
                observe(start, info, codes, log_joint)

    def step_block(self, code_dtype: torch.dtype = torch.long) -> tuple:
        """:meth:`step` as a block of one step: ``(info, codes, log_joint)`` as
        :meth:`run` hands them to its observer (fields ``[C, 1]``, codes ``[C, 1, D]``)."""
        info, _ = self.step()
        info = type(info)(*(field.unsqueeze(1) for field in info))
        return info, self.state.codes.to(code_dtype).unsqueeze(1), self.state.log_joint.unsqueeze(1)

    def _to_phase_end(self) -> int:
        """Steps to the end of warmup (or an unbounded number after it): a block never
        straddles the end of warmup."""
        return self.num_warmup - self.t if self.warming_up else 1 << 62

    def _block(
        self, num_steps: int, code_dtype: torch.dtype, kept: Optional[list] = None
    ) -> Tuple[NamedTuple, torch.Tensor, torch.Tensor]:
        """``num_steps`` calls of the one-step function; their statistics, states and log
        joints stacked once for the block (one operator per field, not per step); the
        states appended to ``kept`` (a list, or ``None``)."""
        step = self._step_function(None)
        state = self.state
        infos, states = [], []
        for _ in range(num_steps):
            state, info, _ = step(state)
            infos.append(info)
            states.append(state)
        self.state = state
        if kept is not None:
            kept.extend(states)
        stacked = type(infos[0])(*(torch.stack(field, 1) for field in zip(*infos)))
        # stacked straight into the observer's integer type: a long [C, n, D] stack
        # converted afterwards costs a fresh buffer eight times the size of the result
        # (on 40x40 Ising with 256 chains, 1.7 against 0.5 ms per step)
        first = states[0].codes
        codes = first.new_empty((first.shape[0], num_steps) + first.shape[1:], dtype=code_dtype)
        torch.stack([s.codes for s in states], 1, out=codes)
        return stacked, codes, torch.stack([s.log_joint for s in states], 1)

    def _step_function(self, extras: Optional[Callable[[NamedTuple], tuple]]) -> Callable:
        """The one-step function ``state -> (state, info, extras(state))`` in force,
        in the form of the driver's mode, made on its first use."""
        key = (extras,) + self._static_key
        fn = self._compiled.get(key)
        if fn is None:
            begin = time.perf_counter()
            fn = compile_transition(
                lambda step: _single(step, extras),
                self.algorithm.step,
                self.build,
                self.static,
                self.density,
                self.state,
                self.mode,
                self._tell,
                self._may_compile,
            )
            self._compile_seconds += time.perf_counter() - begin
            if self.state.codes.device.type == "cpu":
                fn = _ThreadTuned(fn)
            self._compiled[key] = fn
        return fn

    def _may_compile(self) -> bool:
        """Whether a background compile may start, and a transition be captured at its
        second call: not during an adapting warmup (see
        :class:`~pyro_gwg.compile.transition.BackgroundTransition`)."""
        return self.adaptation is None or not self.warming_up

    def _tell(self, message: Optional[str]) -> None:
        if self.on_compile is not None:
            self.on_compile(message)

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
                self._static_key = self._key_of_static()  # (a new transition, if changed)
        else:  # counted in blocks (see moves)
            self._unobserved.append((info, self.state.codes))
            if len(self._unobserved) == UNOBSERVED_STEPS:
                self._observe_steps()
        return info, out

    @property
    def moves(self) -> MoveMonitor:
        """The moves after warmup (:class:`MoveMonitor`), up to the last step."""
        self._observe_steps()
        return self._moves

    def _observe_steps(self) -> None:
        """Count the moves of the single steps taken since the last count, at once."""
        if self._unobserved:
            infos, codes = zip(*self._unobserved)
            self._unobserved = []
            stacked = type(infos[0])(*(torch.stack(field, 1) for field in zip(*infos)))
            self._moves.observe(stacked, torch.stack(codes, 1))

    # ------------------------------------------------------------------ compilation
    def _background(self) -> List[BackgroundTransition]:
        found = []
        for fn in self._compiled.values():
            fn = getattr(fn, "fn", fn)  # (under _ThreadTuned)
            if isinstance(fn, BackgroundTransition):
                found.append(fn)
        return found

    @property
    def compile_seconds(self) -> float:
        """Wall-clock seconds the chains waited for compilation since the driver was
        made: capturing transitions, loading packages from the disk cache, compiles in
        this process."""
        return self._compile_seconds + sum(t.blocking_seconds for t in self._background())

    @property
    def background_compile_seconds(self) -> float:
        """Wall-clock seconds of the background compiles that ended (from their start
        to their package's load), while the chains ran."""
        return sum(t.background_seconds or 0.0 for t in self._background())

    def close(self) -> None:
        """The run has ended: background compiles still running go on to fill the disk
        cache (see :meth:`BackgroundTransition.detach`); a later :meth:`run` or
        :meth:`step` goes on with the transitions' current forms."""
        for transition in self._background():
            transition.detach()


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


def _single(step: Callable, extras: Optional[Callable]) -> Callable:
    """One application of ``step``: ``state -> (state, info, extras(state))``."""

    def one(state: NamedTuple) -> tuple:
        state, info = step(state)
        return state, info, (tuple(extras(state)) if extras is not None else ())

    return one
