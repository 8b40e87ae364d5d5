"""Plumbing shared by every discrete kernel: the Pyro ``MCMCKernel`` interface.

A concrete kernel supplies two pure functions on batched tensors, in the style of
BlackJAX's ``init``/``step`` pairs: ``_init_state(codes, value_and_grad)`` and
``_step(state, value_and_grad)``. States are named tuples with at least ``codes`` (long
``[C, D]``) and ``log_joint`` (``[C]``); step infos are named tuples of ``[C]`` tensors,
recorded per draw and returned by :meth:`DiscreteKernel.diagnostics`.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch
from pyro.infer.autoguide.initialization import init_to_sample
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from pyro_gwg.energy import DiscreteEnergy, trace_compile
from pyro_gwg.sites import UnsupportedModelError

__all__ = ["DiscreteKernel"]


class DiscreteKernel(MCMCKernel):
    """Base class of the pyro-gwg kernels; works with :class:`pyro.infer.MCMC`.

    :param callable model: a Pyro model whose latent sites are discrete.
    :param bool jit_compile: trace the whole transition (model forward and backward
        pass, proposal, MH) into one graph with :func:`torch.jit.trace`; where the
        model's backward pass cannot be traced, only its forward pass is compiled.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param callable init_strategy: Pyro per-site initialisation strategy
        (default :func:`~pyro.infer.autoguide.initialization.init_to_sample`).

    Per-draw statistics (after warmup) come back from :meth:`diagnostics`:
    ``accepted``, ``accept_prob``, ``num_changed`` (coordinates changed by the
    proposal) and ``log_joint`` (of the state after the step), each a tensor with
    one entry per draw, plus ``acceptance rate`` and an empty ``divergences`` list
    (which ``mcmc.summary()`` and ``arviz.from_pyro`` expect).

    Runners that batch chains set the attribute ``vectorized_chains`` before
    :meth:`setup`; samples and statistics then carry a leading chain dimension.
    """

    def __init__(
        self,
        model=None,
        *,
        jit_compile: bool = False,
        max_plate_nesting: Optional[int] = None,
        init_strategy=init_to_sample,
    ) -> None:
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

    # --------------------------------------------------------------- Pyro interface
    def _reset(self) -> None:
        self._step_fn = None
        self._t = 0
        self._warmup_steps = 0
        self._state = None
        self._params: Optional[Dict[str, torch.Tensor]] = None
        self._phase_accepted = 0
        self._phase_draws = 0
        self._draw_stats: Dict[str, List[torch.Tensor]] = {}

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        if self.model is None:
            raise UnsupportedModelError(
                "{} needs a model: {}(model).".format(type(self).__name__, type(self).__name__)
            )
        self._reset()
        self._warmup_steps = warmup_steps
        self.energy = DiscreteEnergy(
            self.model,
            args,
            kwargs,
            max_plate_nesting=self.max_plate_nesting,
            jit_compile=self.jit_compile,
            init_strategy=self.init_strategy,
        )
        if not bool((self.energy.layout.num_values() > 1).any()):
            raise UnsupportedModelError(
                "Every latent discrete site of the model has a single possible value; "
                "there is nothing to sample."
            )
        if self._initial_params is not None:
            codes = self.energy.codes_from_values(self._with_chain_dim(self._initial_params))
            self.energy.check_initial(codes)
        else:
            codes = self.energy.initial_codes(self.vectorized_chains)
        self.energy.warn_gradient_blind_categoricals(codes[:1])
        self._state = self._init_state(codes, self.energy.value_and_grad)
        self._params = self._params_from_codes(codes)
        self._initial_params = self._params

    @property
    def initial_params(self) -> Optional[Dict[str, torch.Tensor]]:
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params: Dict[str, torch.Tensor]) -> None:
        self._initial_params = params

    def transition(self) -> Tuple[NamedTuple, Optional[Tuple[torch.Tensor, ...]]]:
        """One transition of every chain, with warmup adaptation; no host sync.

        The entry point for runners that drive the kernel directly (such as
        :class:`pyro_gwg.MCMC`); :meth:`sample` wraps it for :class:`pyro.infer.MCMC`.

        :returns: ``(info, values)``: the step's per-chain statistics and, when the
            step is compiled, the new state's model values (site order), else ``None``.
        """
        if self._step_fn is None:
            self._step_fn = self._compile_step(self._state)
        self._state, info, values = self._step_fn(self._state)
        if self._t < self._warmup_steps:
            self._adapt(info)
        self._t += 1
        return info, values

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
            self._params = (
                self._params_from_codes(self._state.codes)
                if values is None
                else dict(zip(self._param_names, values))
            )
        return self._params

    def logging(self) -> Dict[str, str]:
        rate = self._phase_accepted / max(self._phase_draws, 1)
        return {"acc. rate": "{:.3f}".format(rate)}

    def diagnostics(self) -> Dict[str, object]:
        stats: Dict[str, object] = {"divergences": []}
        draws = {k: torch.stack(v) for k, v in self._draw_stats.items()}
        if self.vectorized_chains == 1:
            draws = {k: v.squeeze(-1) for k, v in draws.items()}
        if "accepted" in draws:
            stats["acceptance rate"] = float(draws["accepted"].float().mean())
        stats.update(draws)
        return stats

    def cleanup(self) -> None:
        self._initial_params = None
        self._reset()

    def __getstate__(self):
        # compiled functions and traces do not pickle; setup() rebuilds them
        state = self.__dict__.copy()
        state.update(energy=None, _state=None, _params=None, _draw_stats={}, _step_fn=None)
        return state

    def _compile_step(self, state: NamedTuple):
        """The transition function ``state -> (state, info, values)``.

        With ``jit_compile``, the whole transition (model forward and backward pass,
        proposal, MH, and the new state's model values) is traced into one graph;
        where the model's backward pass cannot be traced, the plain step runs with
        the energy compiled on its own. ``values`` is ``None`` when not traced.
        """

        def plain(current: NamedTuple):
            return (*self._step(current, self.energy.value_and_grad), None)

        if not self.jit_compile:
            return plain
        self.energy.value_and_grad(state.codes)  # compile and check the energy first
        value_and_grad = self.energy.traceable_value_and_grad(state.codes.shape[0])
        state_type, size, info_type = type(state), len(state), []

        def flat_step(*tensors):
            new_state, info = self._step(state_type(*tensors), value_and_grad)
            info_type.append(type(info))
            values = self._params_from_codes(new_state.codes)
            return tuple(new_state) + tuple(info) + tuple(values[n] for n in self._param_names)

        try:
            traced = trace_compile(flat_step, tuple(state))
        except RuntimeError:
            return plain
        info_size = len(info_type[0]._fields)

        def step(current: NamedTuple):
            out = traced(*current)
            info = info_type[0](*out[size : size + info_size])
            return state_type(*out[:size]), info, out[size + info_size :]

        return step

    @property
    def params(self) -> Optional[Dict[str, torch.Tensor]]:
        """The model values last returned by :meth:`sample` (the current state)."""
        return self._params

    def refresh(self) -> None:
        """Re-evaluate the current state, after the model changed under it (for example
        when another kernel moved the sites this kernel conditions on)."""
        self._state = self._init_state(self._state.codes, self.energy.value_and_grad)

    def current_values(self) -> Dict[str, torch.Tensor]:
        """Model values (floats) of the current state, ``[C, ...]`` for batched chains."""
        return self._params_from_codes(self._state.codes)

    # --------------------------------------------------------------- helpers
    @property
    def _param_names(self) -> List[str]:
        return [site.name for site in self.energy.sites]

    @property
    def state(self) -> Optional[NamedTuple]:
        """Current batched kernel state (``codes [C, D]``, ``log_joint [C]``, ...)."""
        return self._state

    def _record(self, info: NamedTuple) -> None:
        for name, value in info._asdict().items():
            self._draw_stats.setdefault(name, []).append(value)
        self._draw_stats.setdefault("log_joint", []).append(self._state.log_joint)

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
