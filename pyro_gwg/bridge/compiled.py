"""The energy a compiler captures: the whole ``value_and_grad`` captured as a pure graph
by :func:`~pyro_gwg.compile.backends.capture` (and checked against the model), the view
of the energy that a compiled transition captures (:class:`TraceableDensity`), and the
tensors such a function takes as arguments instead of freezing them (the values of the
``given`` sites and of the model's ``pyro.param`` sites), which the captured function
passes to the model's evaluation (see :meth:`Compiling.traceable`)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional, Sequence, Tuple

import pyro
import torch

from pyro_gwg.bridge.batching import ATOL, RTOL
from pyro_gwg.bridge.errors import first_line, out_of_memory
from pyro_gwg.compile.backends import BACKENDS, capture
from pyro_gwg.proposals.layout import CoordinateLayout
from pyro_gwg.sites import UnsupportedModelError

if TYPE_CHECKING:
    from pyro_gwg.bridge.density import ModelDensity

__all__ = ["Compiling", "TraceableDensity"]


class Compiling:
    """Compilation of :class:`~pyro_gwg.bridge.density.ModelDensity` (a part of it:
    it traces the energy's evaluation)."""

    def traceable(
        self, num_chains: int, arguments: Optional[Sequence[torch.Tensor]] = None
    ) -> TraceableDensity:
        """The density a compiler traces for ``num_chains`` chains (see
        :meth:`Density.traceable <pyro_gwg.density.Density.traceable>`): the
        ``value_and_grad`` and the batched :meth:`log_joint` of the model reading
        ``arguments`` (the traced function's tensors, in the order of
        :meth:`arguments`; ``None``: their values now), uncompiled and unchecked, to
        be called inside :meth:`recording`."""
        value_and_grad = partial(self._value_and_grad, num_chains=num_chains, arguments=arguments)
        log_joint = partial(self._log_joint_at, arguments=arguments)
        return TraceableDensity(self, self.layout, log_joint, value_and_grad)

    @property
    def compilable(self) -> Tuple[str, ...]:
        """Compilers that can compile a whole transition that evaluates this energy for
        several states (see :mod:`pyro_gwg.compile`): all for a model that broadcasts
        (``"plate"``) or runs under :func:`torch.func.vmap`, none for a model
        evaluated one state at a time, whose control flow reads latent values or
        that reads ``pyro.module`` parameters (run eagerly)."""
        if self.value_reads or self.batching == "loop" or self._module_params:
            return ()
        return BACKENDS

    def _compile(self, codes: torch.Tensor):
        """Capture the whole ``value_and_grad`` (forward and backward pass) as a pure
        graph, checked against the model at ``codes`` and at a second state."""
        self.check_capturable()
        num_chains = codes.shape[0]
        with self.recording():
            compiled = self._capture_value_and_grad(codes, num_chains)
            for probe in (codes, self.layout.perturb(codes)):
                f_jit, g_jit = compiled(probe)
                f_eager, g_eager = self._value_and_grad(probe, num_chains)
                if not (
                    torch.allclose(f_jit, f_eager, rtol=RTOL, atol=ATOL, equal_nan=True)
                    and torch.allclose(g_jit, g_eager, rtol=RTOL, atol=ATOL, equal_nan=True)
                ):
                    raise UnsupportedModelError(
                        "jit_compile: the graph captured from the model gives a different "
                        "{} than the eager model at a second state, so it does not follow "
                        "the model (an operation the capture records as a constant, or "
                        "value-dependent control flow it could not see). "
                        "Use jit_compile=False (or the default 'auto', which then runs "
                        "the model eagerly).".format(
                            "log density"
                            if not torch.allclose(f_jit, f_eager, rtol=RTOL, atol=ATOL)
                            else "gradient"
                        )
                    )
        self._compiled[num_chains] = compiled
        return compiled

    def check_capturable(self) -> None:
        """Refuse a model that no capture can follow (see :attr:`compilable`).

        :raises UnsupportedModelError: naming what the model reads: latent values in
            its Python control flow, or the parameters of a ``pyro.module``.
        """
        if self.value_reads:
            raise UnsupportedModelError(
                "jit_compile=True cannot compile this model: its Python control flow "
                "reads latent values ({}), and a captured graph would follow one path "
                "only. Use jit_compile=False (or the default 'auto', which runs such a "
                "model eagerly).".format("; ".join(r.describe() for r in self.value_reads))
            )
        if self._module_params:
            raise UnsupportedModelError(
                "jit_compile=True cannot compile this model: it reads the parameters of "
                "a pyro.module ({}), which a captured graph would hold as constants. Use "
                "jit_compile=False (or the default 'auto', which runs such a model "
                "eagerly), or make them pyro.param sites, which a compiled transition "
                "takes as arguments.".format(", ".join(map(repr, self._module_params)))
            )

    def _capture_value_and_grad(self, codes: torch.Tensor, num_chains: int) -> Callable:
        """:func:`~pyro_gwg.compile.backends.capture` of ``value_and_grad`` with the
        model's :meth:`arguments` as further inputs of the graph (not constants),
        passed at their values of each call."""

        def fn(c: torch.Tensor, *arguments: torch.Tensor):
            return self._value_and_grad(c, num_chains, arguments=arguments)

        try:
            graph = capture(fn, (codes,) + self.arguments())
        except Exception as error:  # whatever the model raises under the capture
            if out_of_memory(error) or isinstance(error, UnsupportedModelError):
                raise
            raise UnsupportedModelError(
                "The model could not be captured as a graph ({}: {}); use "
                "jit_compile=False (or the default 'auto', which then runs the model "
                "eagerly).".format(type(error).__name__, first_line(error))
            ) from error
        return lambda c: tuple(graph(c, *self.arguments()))

    def arguments(self) -> Tuple[torch.Tensor, ...]:
        """The tensors besides the states that a compiled function of this energy
        takes as arguments, at their values now: the values of the ``given`` sites
        (see :meth:`set_given`), then those of the model's ``pyro.param`` sites
        (:attr:`param_names`), read from the param store, so that a parameter changed
        since the compilation (trained, or set again) is used at its new value.

        :rtype: tuple
        """
        store = pyro.get_param_store()
        params = tuple(store.get_param(name).detach() for name in self.param_names)
        return self._given_values + params


class TraceableDensity(NamedTuple):
    """The view of a :class:`ModelDensity` that a kernel's ``build`` is given when a
    compiler traces a transition (see :meth:`ModelDensity.traceable`): the members
    of a :class:`~pyro_gwg.density.Density` that the kernels read; ``source`` is that
    energy."""

    source: ModelDensity
    layout: CoordinateLayout
    log_joint: Callable[[torch.Tensor], torch.Tensor]
    value_and_grad: Callable[[torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]
