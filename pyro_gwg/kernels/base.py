"""Plumbing shared by every discrete kernel: the Pyro ``MCMCKernel`` interface.

A concrete kernel supplies two pure functions on batched tensors, in the style of
BlackJAX's ``init``/``step`` pairs: ``_init_state(codes, value_and_grad)`` and
``_step(state, value_and_grad)``. States are named tuples with at least ``codes`` (long
``[C, D]``) and ``log_joint`` (``[C]``); step infos are named tuples of ``[C]`` tensors,
recorded per draw and returned by :meth:`DiscreteKernel.diagnostics`.

Code that drives a kernel itself (the estimators of :mod:`pyro_gwg.contrib.estimators`, for
example, which step it under a tempered density) uses the public pair
:meth:`DiscreteKernel.init_state` / :meth:`DiscreteKernel.step` after
:meth:`DiscreteKernel.bind`.
"""

from __future__ import annotations

import warnings
from abc import abstractmethod
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple, Union

import torch
from pyro.infer.autoguide.initialization import init_to_sample
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from pyro_gwg._validation import check_integer
from pyro_gwg.compilation import CompilationWarning, compile_function
from pyro_gwg.energy import DiscreteEnergy, invalid_evaluations
from pyro_gwg.sites import UnsupportedModelError

__all__ = ["DiscreteKernel", "JIT_MODES", "StuckChainWarning"]

#: values of ``jit_compile``
JIT_MODES = (False, True, "auto", "inductor")

#: a chain that changes state in less than this fraction of its steps after warmup
#: (and at least ``STUCK_MIN_STEPS`` steps) is reported by a :class:`StuckChainWarning`
STUCK_FRACTION = 0.01
STUCK_MIN_STEPS = 100

# ``(state, value_and_grad) -> (state, info, extras)``: the functions that get compiled
Transition = Callable[[NamedTuple, Callable], Tuple[NamedTuple, NamedTuple, tuple]]


class StuckChainWarning(UserWarning):
    """After warmup, a chain almost never changed state: its draws may not represent the
    posterior."""


class DiscreteKernel(MCMCKernel):
    """Base class of the pyro-gwg kernels; works with :class:`pyro.infer.MCMC`.

    :param callable model: a Pyro model whose latent sites are discrete.
    :param jit_compile: how the whole transition (model forward and backward pass,
        proposal, MH) is compiled into one graph (see :mod:`pyro_gwg.compilation`):

        * ``"auto"`` (default): :func:`torch.jit.trace` (milliseconds to compile); the
          vectorised runner :class:`pyro_gwg.MCMC` uses TorchInductor instead for long
          runs, several transitions per call. A model whose Python control flow
          depends on latent values runs eagerly, with a warning.
        * ``True``: :func:`torch.jit.trace`; such a model is an error.
        * ``"inductor"``: TorchInductor (fused C++ or GPU kernels: seconds to compile,
          the fastest per step) everywhere, falling back to ``torch.jit.trace`` and
          then to eager mode, with a warning, where compilation fails.
        * ``False``: eager mode.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param callable init_strategy: Pyro per-site initialisation strategy
        (default :func:`~pyro.infer.autoguide.initialization.init_to_sample`).

    Per-draw statistics (after warmup) come back from :meth:`diagnostics`:
    ``accepted``, ``accept_prob``, ``num_changed`` (coordinates changed by the
    proposal), ``log_joint`` (of the state after the step) and the evaluation counts
    ``energy_evals`` and ``grad_evals`` (model runs and gradient passes per chain),
    each a tensor with one entry per draw, plus ``acceptance rate`` and an empty
    ``divergences`` list (which ``mcmc.summary()`` and ``arviz.from_pyro`` expect).

    Runners that batch chains set the attribute ``vectorized_chains`` before
    :meth:`setup`; samples and statistics then carry a leading chain dimension.
    """

    #: Declared trait: whether the transitions leave invariant the density the kernel is
    #: bound to (:meth:`bind`). ``False`` for a model-specific sampler that reads the
    #: model's arguments instead (:class:`pyro_gwg.contrib.kernels.RBMBlockGibbs`); code
    #: that steps a kernel under a density of its own (the estimators) refuses it.
    targets_bound_density: bool = True

    def __init__(
        self,
        model=None,
        *,
        jit_compile: Union[bool, str] = "auto",
        max_plate_nesting: Optional[int] = None,
        init_strategy=init_to_sample,
    ) -> None:
        if not (isinstance(jit_compile, bool) or jit_compile in JIT_MODES[2:]):
            raise ValueError(
                "jit_compile must be one of False, True, 'auto' or 'inductor', got {!r}".format(
                    jit_compile
                )
            )
        self.model = model
        self.jit_compile = jit_compile
        self.max_plate_nesting = max_plate_nesting
        self.init_strategy = init_strategy
        self.transforms: Dict[str, object] = {}
        self.vectorized_chains = 1
        self.energy: Optional[DiscreteEnergy] = None
        self._initial_params: Optional[Dict[str, torch.Tensor]] = None
        self._reset()

    # --------------------------------------------------------------- subclass API
    @abstractmethod
    def _init_state(self, codes: torch.Tensor, value_and_grad) -> NamedTuple:
        """Kernel state at ``codes`` (long ``[C, D]``)."""

    @abstractmethod
    def _step(self, state: NamedTuple, value_and_grad) -> Tuple[NamedTuple, NamedTuple]:
        """One transition of every chain: ``(new_state, info)``."""

    def _adapt(self, info: NamedTuple) -> None:
        """Warmup adaptation hook, called after every warmup step (default: none)."""

    @property
    def adapts(self) -> bool:
        """Whether warmup steps adapt the kernel; runners then take them one at a time
        (through :meth:`transition`) rather than in compiled chunks."""
        return type(self)._adapt is not DiscreteKernel._adapt

    def _check_model(self) -> None:
        """Refuse settings that do not fit the bound model (default: none); called by
        :meth:`setup` and :meth:`bind`."""

    def _compile_key(self) -> tuple:
        """Settings baked into a compiled transition (for example a number of draws that
        fixes a tensor shape); a change compiles the transition anew (default: none)."""
        return ()

    # --------------------------------------------------------------- functional API
    def bind(self, energy: DiscreteEnergy) -> None:
        """Target ``energy`` (a :class:`~pyro_gwg.DiscreteEnergy`, or an object with its
        ``layout``, ``value_and_grad`` and ``log_joint``), dropping what the kernel
        held for another model (compiled functions, adaptation, step-size grids).

        :param DiscreteEnergy energy: the density to sample.
        """
        self._reset()
        self.energy = energy
        self._check_model()

    def init_state(self, codes: torch.Tensor, value_and_grad=None) -> NamedTuple:
        """The kernel state at ``codes``, every row a chain (one evaluation).

        :param torch.Tensor codes: long ``[C, D]`` states.
        :param callable value_and_grad: ``codes -> (log_joint [C], grad [C, D, W])``
            (default: the bound energy's).
        :rtype: NamedTuple
        """
        return self._init_state(codes, value_and_grad or self.energy.value_and_grad)

    def step(self, state: NamedTuple, value_and_grad=None) -> Tuple[NamedTuple, NamedTuple]:
        """One transition of every chain of ``state``, uncompiled and without warmup
        adaptation: ``(new_state, info)``.

        :param NamedTuple state: from :meth:`init_state` or a previous step.
        :param callable value_and_grad: as for :meth:`init_state` (default: the bound
            energy's).
        """
        return self._step(state, value_and_grad or self.energy.value_and_grad)

    # --------------------------------------------------------------- Pyro interface
    def _reset(self) -> None:
        self._step_fns: Dict[tuple, Callable] = {}
        self._chunk_fns: Dict[tuple, Callable] = {}
        self._compiled_mode = self.jit_compile
        self._t = 0
        self._warmup_steps = 0
        self._state = None
        self._params: Optional[Dict[str, torch.Tensor]] = None
        self._phase_accepted = 0
        self._phase_draws = 0
        self._draw_stats: Dict[str, torch.Tensor] = {}  # [capacity, C] rows (see _record)
        # after warmup: steps that changed each chain's state, the chains' first states,
        # and which coordinates have never changed in any chain
        self._moved: Optional[torch.Tensor] = None
        self._first: Optional[torch.Tensor] = None
        self._unchanged: Optional[torch.Tensor] = None
        self._sampled = 0

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        if self.model is None:
            raise UnsupportedModelError(
                "{} needs a model: {}(model).".format(type(self).__name__, type(self).__name__)
            )
        self._reset()
        self._warmup_steps = check_integer("warmup_steps", warmup_steps, 0)
        self.energy = DiscreteEnergy(
            self.model,
            args,
            kwargs,
            max_plate_nesting=self.max_plate_nesting,
            jit_compile=bool(self.jit_compile),
            init_strategy=self.init_strategy,
        )
        if not bool((self.energy.layout.num_values() > 1).any()):
            raise UnsupportedModelError(
                "Every latent discrete site of the model has a single possible value; "
                "there is nothing to sample."
            )
        self._check_model()
        if self._initial_params is not None:
            codes = self.energy.codes_from_values(
                self._with_chain_dim(self._initial_params), "Initial value"
            )
            if codes.shape[0] != self.vectorized_chains:
                raise ValueError(
                    "initial_params hold {} state(s) but {} chain(s) are run; give one "
                    "initial value per chain (a leading dimension of size {}).".format(
                        codes.shape[0], self.vectorized_chains, self.vectorized_chains
                    )
                )
            self.energy.check_initial(codes)
        else:
            codes = self.energy.initial_codes(self.vectorized_chains)
        self.energy.warn_gradient_blind_categoricals(codes[:1])
        if self.jit_compile:
            self._check_traceable(codes)
        self._state = self._init_state(codes, self.energy.value_and_grad)
        self._params = self._params_from_codes(codes)
        self._initial_params = self._params

    def _check_traceable(self, codes: torch.Tensor) -> None:
        """Compile the energy and check it against the eager model (see
        :meth:`DiscreteEnergy.value_and_grad <pyro_gwg.DiscreteEnergy.value_and_grad>`);
        with ``jit_compile="auto"``, a model that fails to compile or fails the check
        runs eagerly."""
        try:
            self.energy.value_and_grad(codes)
        except (UnsupportedModelError, RuntimeError) as error:
            if self.jit_compile != "auto":
                raise
            warnings.warn(
                "{} Running {} eagerly.".format(error, type(self).__name__),
                CompilationWarning,
                stacklevel=3,
            )
            self.energy.jit_compile = self._compiled_mode = False

    @property
    def initial_params(self) -> Optional[Dict[str, torch.Tensor]]:
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params: Dict[str, torch.Tensor]) -> None:
        self._initial_params = params

    def transition(self) -> Tuple[NamedTuple, Tuple[torch.Tensor, ...]]:
        """One transition of every chain, with warmup adaptation; no host sync.

        The entry point for runners that drive the kernel one step at a time;
        :meth:`sample` wraps it for :class:`pyro.infer.MCMC`.

        :returns: ``(info, values)``: the step's per-chain statistics and the new
            state's model values (floats, in site order).
        """
        key = self._compile_key()
        if key not in self._step_fns:
            backend = "inductor" if self._compiled_mode == "inductor" else "trace"
            self._step_fns[key] = self._compile(self._values_step, backend)
        self._state, info, values = self._step_fns[key](self._state)
        if self._t < self._warmup_steps:
            self._adapt(info)
        else:
            self._observe(info, self._state.codes.unsqueeze(1))
        self._t += 1
        return info, values

    def advance(
        self, num_steps: int, code_dtype: torch.dtype = torch.long, backend: Optional[str] = "trace"
    ) -> Tuple[NamedTuple, torch.Tensor, torch.Tensor]:
        """``num_steps`` transitions of every chain in one call of a compiled function,
        without warmup adaptation (runners call :meth:`transition` for adapting
        warmup steps).

        :param int num_steps: transitions.
        :param torch.dtype code_dtype: integer type of the returned codes.
        :param str backend: ``"inductor"`` or ``"trace"`` (the compiler asked for by a
            runner with ``jit_compile="auto"``; ``jit_compile`` itself decides
            otherwise), or ``None`` to run the transitions eagerly.
        :returns: ``(info, codes, log_joint)``: the statistics of every transition,
            each ``[C, num_steps]``, the states ``[C, num_steps, D]`` and their log
            joint ``[C, num_steps]``.
        """
        if backend is not None and self._compiled_mode != "auto":
            backend = {False: None, True: "trace", "inductor": "inductor"}[self._compiled_mode]
        key = (num_steps, code_dtype, backend) + self._compile_key()
        if key not in self._chunk_fns:
            self._chunk_fns[key] = self._compile(self._chunk(num_steps, code_dtype), backend)
        self._state, info, (codes, log_joint) = self._chunk_fns[key](self._state)
        first = max(self._warmup_steps - self._t, 0)
        if first < num_steps:
            self._observe(type(info)(*(f[:, first:] for f in info)), codes[:, first:])
        self._t += num_steps
        return info, codes, log_joint

    def _observe(self, info: NamedTuple, codes: torch.Tensor) -> None:
        """Keep track of moves after warmup: ``info`` fields ``[C, n]`` (or ``[C]``) and
        the states ``codes [C, n, D]`` of ``n`` transitions, for :meth:`_warn_if_stuck`."""
        moved = (info.accepted & (info.num_changed > 0)).reshape(codes.shape[:2]).sum(1)
        if self._moved is None:
            self._moved, self._first = moved, codes[:, 0]
            self._unchanged = torch.ones_like(codes[0, 0], dtype=torch.bool)
        else:
            self._moved = self._moved + moved
        self._unchanged &= (codes == self._first.unsqueeze(1)).all(1).all(0)
        self._sampled += codes.shape[1]

    def _warn_if_stuck(self) -> None:
        """At the end of a run, warn about chains that changed state in almost none of
        their steps after warmup (see :data:`STUCK_FRACTION`), and about coordinates
        that never changed in any chain."""
        if self._moved is None or self._sampled < STUCK_MIN_STEPS:
            return
        self._warn_unchanged_coordinates()
        fraction = self._moved.double().cpu() / self._sampled
        stuck = (fraction < STUCK_FRACTION).nonzero().reshape(-1).tolist()
        if not stuck:
            return
        warnings.warn(
            "After warmup, {} of {} changed state in fewer than {:.0%} of {} steps "
            "(lowest: {:.2%}): {} may be stuck, and {} draws would then not represent the "
            "posterior. A likelihood that is sharply peaked, or initial values far from "
            "the posterior, can do this. Check the draws (trace plots, n_eff), run more "
            "warmup, start nearer the posterior (init_to_value), or use another kernel "
            "(Gibbs{}).".format(
                "chains {}".format(", ".join(map(str, stuck)))
                if len(stuck) > 1
                else ("chain {}".format(stuck[0]) if fraction.numel() > 1 else "the chain"),
                type(self).__name__,
                STUCK_FRACTION,
                self._sampled,
                float(fraction.min()),
                "they" if len(stuck) > 1 else "it",
                "their" if len(stuck) > 1 else "its",
                self._stuck_advice(),
            ),
            StuckChainWarning,
            stacklevel=3,
        )

    def _warn_unchanged_coordinates(self) -> None:
        unchanged = self._unchanged.cpu()
        if not bool(unchanged.any()) or bool(unchanged.all()):
            return  # (a chain that never moves gets its own warning)
        for site, block in zip(self.energy.sites, self.energy.split(unchanged.unsqueeze(0))):
            block = block[0]
            if not bool(block.any()):
                continue
            index = [tuple(i.tolist()) for i in block.nonzero()]
            names = ", ".join(
                "{}{}".format(site.name, list(i) if i else "") for i in index[:10]
            ) + (", ..." if len(index) > 10 else "")
            warnings.warn(
                "After warmup, {} of the {} coordinate(s) of site '{}' never changed in "
                "any of the {} chain(s) of {} in {} steps ({}): either the posterior puts "
                "almost all its mass on one value of each, or the sampler cannot move "
                "them, and their n_eff (the number of draws) and r_hat (NaN) then say "
                "nothing. Compare with a longer run or another kernel; for indicators "
                "whose effect goes through other latent values (spike-and-slab), "
                "integrate those out (see the documentation on spike-and-slab "
                "regression).".format(
                    len(index),
                    site.num_coords,
                    site.name,
                    self._first.shape[0],
                    type(self).__name__,
                    self._sampled,
                    names,
                ),
                StuckChainWarning,
                stacklevel=4,
            )

    def _stuck_advice(self) -> str:
        """Kernel-specific advice appended to the stuck-chain warning."""
        return ""

    def sample(self, params: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        if params is not self._params:  # the caller changed the state: start from it
            self._state = self._init_state(
                self.energy.codes_from_values(self._with_chain_dim(params)),
                self.energy.value_and_grad,
            )
        if self._t == self._warmup_steps:  # first draw after warmup: count afresh
            self._phase_accepted = self._phase_draws = 0
        warmup = self._t < self._warmup_steps
        info, values = self.transition()
        accepted = int(info.accepted.sum())
        self._phase_accepted += accepted
        self._phase_draws += info.accepted.numel()
        if not warmup:
            self._record(info)
        if accepted:
            self._params = dict(zip(self._param_names, values))
        return self._params

    def logging(self) -> Dict[str, str]:
        rate = self._phase_accepted / max(self._phase_draws, 1)
        return {"acc. rate": "{:.3f}".format(rate)}

    def diagnostics(self) -> Dict[str, object]:
        stats: Dict[str, object] = {"divergences": []}
        recorded = self._num_recorded if self._draw_stats else 0
        draws = {k: v[:recorded] for k, v in self._draw_stats.items()}
        if self.vectorized_chains == 1:
            draws = {k: v.squeeze(-1) for k, v in draws.items()}
        if "accepted" in draws:
            stats["acceptance rate"] = float(draws["accepted"].float().mean())
        stats.update(draws)
        return stats

    def cleanup(self) -> None:
        self._warn_if_stuck()
        self._initial_params = None
        self._reset()

    def __getstate__(self):
        # compiled functions and traces do not pickle; setup() rebuilds them
        state = self.__dict__.copy()
        state.update(
            energy=None, _state=None, _params=None, _draw_stats={}, _step_fns={}, _chunk_fns={}
        )
        return state

    # --------------------------------------------------------------- compilation
    def _values_step(self, state: NamedTuple, value_and_grad) -> tuple:
        """One transition, with the new state's model values as extras."""
        new_state, info = self._step(state, value_and_grad)
        values = self._params_from_codes(new_state.codes)
        return new_state, info, tuple(values[name] for name in self._param_names)

    def _chunk(self, num_steps: int, code_dtype: torch.dtype) -> Transition:
        """``num_steps`` transitions, with the stacked states and log joints as extras."""

        def chunk(state: NamedTuple, value_and_grad) -> tuple:
            infos, codes, log_joint = [], [], []
            for _ in range(num_steps):
                state, info = self._step(state, value_and_grad)
                infos.append(info)
                codes.append(state.codes.to(code_dtype))
                log_joint.append(state.log_joint)
            stacked = type(infos[0])(*(torch.stack(field, 1) for field in zip(*infos)))
            return state, stacked, (torch.stack(codes, 1), torch.stack(log_joint, 1))

        return chunk

    def _compile(self, fn: Transition, backend: Optional[str]):
        """``state -> (state, info, extras)``: ``fn`` compiled whole (model forward and
        backward pass, proposal, MH) by ``backend`` (see
        :func:`~pyro_gwg.compilation.compile_function`), or run eagerly, on the energy
        compiled on its own, when ``backend`` is ``None``, when ``jit_compile`` is off
        and where every compiler fails.
        """

        def eager(current: NamedTuple) -> tuple:
            return fn(current, self.energy.value_and_grad)

        if backend is None or not self._compiled_mode or backend not in self.energy.compilable:
            return eager
        energy = self.energy
        state = self._state
        value_and_grad = energy.traceable_value_and_grad(state.codes.shape[0])
        state_type, types = type(state), []

        def flat(*tensors: torch.Tensor) -> tuple:
            with energy.recording() as evaluations:
                new_state, info, extras = fn(state_type(*tensors), value_and_grad)
            types.append(type(info))
            checks = invalid_evaluations(evaluations, new_state.codes)
            return (*new_state, *info, *extras, *checks)

        compiled = compile_function(flat, tuple(state), backend)
        if compiled is None:
            return eager
        num_state, num_info = len(state), len(types[0]._fields)

        def run(current: NamedTuple) -> tuple:
            out = compiled(*current)
            invalid, bad_codes = out[-2:]
            if bool(invalid):
                energy.raise_invalid(bad_codes)
            info = types[0](*out[num_state : num_state + num_info])
            return state_type(*out[:num_state]), info, tuple(out[num_state + num_info : -2])

        return run

    @property
    def params(self) -> Optional[Dict[str, torch.Tensor]]:
        """The model values last returned by :meth:`sample` (the current state)."""
        return self._params

    def refresh(self) -> None:
        """Re-evaluate the current state, after the model changed under it (for example
        when another kernel moved the sites this kernel conditions on)."""
        self._state = self._init_state(self._state.codes, self.energy.value_and_grad)

    def current_values(self) -> Dict[str, torch.Tensor]:
        """Model values of the current state of every chain, ``[C, ...]``, as
        :meth:`pyro_gwg.MCMC.get_samples <pyro_gwg.mcmc.MCMC.get_samples>` gives draws:
        ``Categorical`` sites as ``long`` indices, the others as floats."""
        return self.energy.values_from_codes(self._state.codes)

    # --------------------------------------------------------------- helpers
    @property
    def _param_names(self) -> List[str]:
        return [site.name for site in self.energy.sites]

    @property
    def state(self) -> Optional[NamedTuple]:
        """Current batched kernel state (``codes [C, D]``, ``log_joint [C]``, ...)."""
        return self._state

    def _record(self, info: NamedTuple) -> None:
        # one row per draw in a [capacity, C] tensor per statistic, grown geometrically
        # (a list of per-step tensors costs several times the draws themselves)
        if not self._draw_stats:
            self._num_recorded = 0
        row = self._num_recorded
        for name, value in dict(info._asdict(), log_joint=self._state.log_joint).items():
            buffer = self._draw_stats.get(name)
            if buffer is None or row == buffer.shape[0]:
                grown = value.new_empty((max(16, 2 * row),) + tuple(value.shape))
                if buffer is not None:
                    grown[:row] = buffer
                buffer = self._draw_stats[name] = grown
            buffer[row] = value.detach()
        self._num_recorded = row + 1

    def _with_chain_dim(self, values: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        if self.vectorized_chains > 1:
            return values
        return {k: torch.as_tensor(v).unsqueeze(0) for k, v in values.items()}

    def _params_from_codes(self, codes: torch.Tensor) -> Dict[str, torch.Tensor]:
        # float values: pyro.infer.MCMC concatenates samples of all sites
        dtype = torch.get_default_dtype()
        values = self.energy.values_from_codes(codes)
        if self.vectorized_chains == 1:
            values = {k: v[0] for k, v in values.items()}
        return {k: v if v.dtype == dtype else v.to(dtype) for k, v in values.items()}
