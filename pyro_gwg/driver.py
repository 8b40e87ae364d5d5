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

from typing import Callable, Dict, NamedTuple, Optional, Tuple

import torch

from pyro_gwg.compilation import compile_function
from pyro_gwg.density import traceable
from pyro_gwg.energy import invalid_evaluations
from pyro_gwg.proposals.algorithm import Algorithm

__all__ = ["ChainDriver", "MoveMonitor", "Observer"]

#: ``observe(t, info, codes, log_joint)``: a block of transitions starting at step ``t``
#: (counted from the first warmup step), with ``info`` fields ``[C, n]``, the states
#: ``codes [C, n, D]`` after each transition and their log joints ``[C, n]``
Observer = Callable[[int, NamedTuple, torch.Tensor, torch.Tensor], None]


class MoveMonitor:
    """Moves after warmup: per chain, the steps that changed its state; per coordinate,
    whether it ever left the chains' first post-warmup states."""

    def __init__(self) -> None:
        self.moved: Optional[torch.Tensor] = None  # [C] steps that changed the state
        self.first: Optional[torch.Tensor] = None  # [C, D] first states after warmup
        self.unchanged: Optional[torch.Tensor] = None  # bool [D]
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
        self.unchanged &= (codes == self.first.unsqueeze(1)).all(1).all(0)
        self.steps += codes.shape[1]


class ChainDriver:
    """Runs the transitions of ``build(density, **static)`` on a batch of chains.

    :param callable build: ``build(density, **static) -> Algorithm`` (see
        :mod:`pyro_gwg.proposals.algorithm`), e.g. a kernel's
        :meth:`~pyro_gwg.DiscreteKernel.build`.
    :param density: the :class:`~pyro_gwg.density.Density` sampled.
    :param adaptation: the warmup adaptation (see :mod:`pyro_gwg.adaptation`), or
        ``None``; its ``static`` dict overrides ``build``'s arguments.
    :param int num_warmup: warmup steps (adapted, when there is an adaptation).
    :param str backend: the compiler of blocks of transitions (a backend of
        :func:`~pyro_gwg.compilation.compile_function`: ``"make_fx"``, ``"compile"``,
        ``"trace"``), or ``None`` for eager transitions. A density with a dictionary
        ``inputs`` of tensors that change between calls (see
        :class:`~pyro_gwg.DiscreteEnergy`) has them passed to the compiled function as
        arguments, with their values of each call.

    :ivar NamedTuple state: the chains' state (``None`` before :meth:`init`).
    :ivar int t: transitions taken since :meth:`init`.
    :ivar MoveMonitor moves: moves after warmup.
    """

    def __init__(
        self,
        build: Callable[..., Algorithm],
        density,
        *,
        adaptation=None,
        num_warmup: int = 0,
        backend: Optional[str] = None,
    ) -> None:
        self.build = build
        self.density = density
        self.adaptation = adaptation
        self.num_warmup = int(num_warmup)
        self.backend = backend
        self.state: Optional[NamedTuple] = None
        self.t = 0
        self.moves = MoveMonitor()
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
        """The ``(init, step)`` pair in force, on the density itself (eager)."""
        key = self._static_key
        if key not in self._algorithms:
            self._algorithms[key] = self.build(self.density, **self.static)
        return self._algorithms[key]

    def init(self, codes: torch.Tensor) -> NamedTuple:
        """Start the chains at ``codes`` (long ``[C, D]``, one evaluation of the
        density); the step counter keeps its value, so that a restart during warmup
        continues the warmup, and so does the record of moves unless the number of
        chains changed.

        :rtype: NamedTuple
        """
        if self.state is None or self.state.codes.shape != codes.shape:
            self.moves = MoveMonitor()  # other chains: their moves are counted afresh
        self.state = self.algorithm.init(codes)
        return self.state

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
        fn = self._function(
            (num_steps, code_dtype, backend),
            lambda step: _blocks(step, num_steps, code_dtype),
            backend,
        )
        self.state, info, (codes, log_joint) = fn(self.state)
        return info, codes, log_joint

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
        fn = self._function(
            ("step", extras, self.backend), lambda step: _single(step, extras), self.backend
        )
        self.state, info, out = fn(self.state)
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
    def _function(self, key: tuple, body_of: Callable, backend: Optional[str]) -> Callable:
        """The function of the cache for ``key`` and the build arguments in force,
        compiled (see :meth:`_compile`) on its first use."""
        key = key + self._static_key
        fn = self._compiled.get(key)
        if fn is None:
            fn = self._compiled[key] = self._compile(body_of, backend)
        return fn

    def _compile(self, body_of: Callable[[Callable], Callable], backend: Optional[str]):
        """``state -> (state, info, extras)``: ``body_of(step)`` (a function of the state
        built on the algorithm's ``step``) compiled whole by ``backend`` (with a check
        for NaN or ``+inf`` log densities returned as a flag, since a compiled function
        cannot raise), or eager where ``backend`` is ``None``, where the density cannot
        be compiled and where every compiler fails."""
        density = self.density
        if backend is None or backend not in _compilers(density):
            return body_of(self.algorithm.step)
        state = self.state
        num_chains = state.codes.shape[0]
        body = body_of(self.build(traceable(density, num_chains), **self.static).step)
        state_type, types = type(state), []
        # tensors the density reads that change between calls: arguments, not constants
        inputs = getattr(density, "inputs", None) or {}
        names = list(inputs)
        num_state = len(state)

        def flat(*tensors: torch.Tensor) -> tuple:
            given = dict(inputs)
            inputs.update(zip(names, tensors[num_state:]))
            try:
                with density.recording() as evaluations:
                    new_state, info, extras = body(state_type(*tensors[:num_state]))
            finally:
                inputs.update(given)
            types.append((type(info), len(extras)))
            checks = invalid_evaluations(evaluations, new_state.codes)
            return (*new_state, *info, *extras, *checks)

        example = tuple(state) + tuple(inputs[name] for name in names)
        compiled = compile_function(flat, example, backend)
        if compiled is None:
            return body_of(self.algorithm.step)
        info_type, num_extras = types[0]
        end_info = num_state + len(info_type._fields)

        def run(current: NamedTuple) -> tuple:
            out = compiled(*current, *(inputs[name] for name in names))
            invalid, bad_codes = out[-2:]
            if bool(invalid):
                density.raise_invalid(bad_codes)
            info = info_type(*out[num_state:end_info])
            return state_type(*out[:num_state]), info, tuple(out[end_info : end_info + num_extras])

        return run


def _compilers(density) -> Tuple[str, ...]:
    """The compilers a density declares it can be traced by (its class's
    ``compilable``; none for a density that does not declare them, which runs eagerly)."""
    if not hasattr(type(density), "compilable"):
        return ()
    return tuple(density.compilable)


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
