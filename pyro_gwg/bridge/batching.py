"""Batches of states.

One chain (``C = 1``) runs the model exactly as written. Several states are evaluated
in one of three ways, chosen on the first such evaluation by comparing each with
state-by-state evaluation on probe states: ``"plate"``, one run of the model inside an
outer ``pyro.plate`` at dimension ``-(max_plate_nesting + 1)`` (the fast path, for
models written to broadcast); ``"vmap"``, the unbatched model under
:func:`torch.func.vmap`; ``"loop"``, one run per state. The latter two come with one
:class:`BatchingWarning` that says why the model does not broadcast.
"""

from __future__ import annotations

from functools import partial
from typing import Optional

import torch

from pyro_gwg import _trace
from pyro_gwg._warn import warn
from pyro_gwg.bridge.errors import first_line, format_values, out_of_memory
from pyro_gwg.sites import UnsupportedModelError

__all__ = ["ATOL", "BATCHING_MODES", "BatchingWarning", "Batching", "CHAIN_PLATE", "RTOL"]

CHAIN_PLATE = "_pyro_gwg_chains"
#: ways of evaluating several states (see the module docstring), fastest first
BATCHING_MODES = ("plate", "vmap", "loop")
# relative and absolute tolerance when comparing batched with state-by-state values
RTOL, ATOL = 1e-4, 1e-4


class BatchingWarning(UserWarning):
    """The model does not broadcast over a batch dimension: states are evaluated with
    :func:`torch.func.vmap` or one at a time, which is exact but slower."""


class Batching:
    """How :class:`~pyro_gwg.bridge.density.ModelDensity` evaluates several states
    (a part of it: it runs the energy's model)."""

    batching: Optional[str]

    def _forward(
        self, num_chains: int, codes: torch.Tensor, *relaxed: torch.Tensor, arguments=None
    ):
        """``(log_joint [C], *own_logits)``: the model run at a batch of states (as
        ``self.batching`` says), with the own logits ``[C, n, K]`` of every (one-hot)
        categorical site; ``arguments``: a compiled function's tensors that the model
        reads (see :meth:`~pyro_gwg.bridge.compiled.Compiling.arguments`), ``None``
        for their values now."""
        if num_chains == 1 or self.batching == "plate":
            return self._forward_plate(num_chains, codes, *relaxed, arguments=arguments)
        if self.batching == "vmap":
            return self._forward_vmap(codes, *relaxed, arguments=arguments)
        return self._forward_loop(num_chains, codes, *relaxed, arguments=arguments)

    def _forward_one(self, codes: torch.Tensor, *relaxed: torch.Tensor, arguments=None):
        """The model at one state, ``codes [D]`` (no batch dimension; for vmap)."""
        relaxed = tuple(r.unsqueeze(0) for r in relaxed)
        out = self._forward_plate(1, codes.unsqueeze(0), *relaxed, arguments=arguments)
        return tuple(o.squeeze(0) for o in out)

    def _forward_vmap(self, codes: torch.Tensor, *relaxed: torch.Tensor, arguments=None):
        if not self.given_per_chain:
            one = partial(self._forward_one, arguments=arguments)
            return torch.func.vmap(one, randomness="error")(codes, *relaxed)
        # each state with its chain's given values (mapped with it), the rest shared
        arguments = self._per_state_given(codes.shape[0], arguments)
        count = len(self.given_names)
        rows, shared = arguments[:count], arguments[count:]

        def one(codes, rows, *relaxed):
            given = tuple(r.unsqueeze(0) for r in rows)
            return self._forward_one(codes, *relaxed, arguments=given + shared)

        return torch.func.vmap(one, randomness="error")(codes, rows, *relaxed)

    def _forward_loop(
        self, num_chains: int, codes: torch.Tensor, *relaxed: torch.Tensor, arguments=None
    ):
        count = len(self.given_names) if self.given_per_chain else 0
        if count:  # each state with its chain's given values
            arguments = self._per_state_given(num_chains, arguments)
        outs = [
            self._forward_plate(
                1,
                codes[c : c + 1],
                *(r[c : c + 1] for r in relaxed),
                arguments=arguments
                if not count
                else tuple(a[c : c + 1] for a in arguments[:count]) + arguments[count:],
            )
            for c in range(num_chains)
        ]
        return tuple(torch.cat(parts) for parts in zip(*outs))

    def choose_batching(self, codes: torch.Tensor) -> str:
        """Choose how several states are evaluated (``self.batching``), by comparing the
        batched evaluation of probe states with their evaluation one at a time:
        ``"plate"`` when the model broadcasts, else ``"vmap"`` when it runs under
        :func:`torch.func.vmap`, else ``"loop"``; the last two with one
        :class:`BatchingWarning` that says why.

        :param torch.Tensor codes: long ``[C, D]`` valid states (probes are built
            from them).
        :returns: the mode chosen.
        """
        if self.batching is not None:
            return self.batching
        mode, reasons = self._batching_trials(codes)
        self.batching = mode
        if mode != "plate":
            warn(
                "The model does not broadcast over a batch dimension on the left of its "
                "plates: {}. pyro-gwg evaluates several states {}, which is exact but "
                "slower than one batched run of the model. For speed, write the model "
                "as Pyro's vectorised particles need: every batch dimension in a "
                "pyro.plate, reductions over a site's own dimensions only, keeping the "
                "plate dimension for sites outside the plate (x.sum(-1, keepdim=True), "
                "not x.sum()), .expand only to shapes that include the batch "
                "dimensions.".format(
                    reasons["plate"],
                    "with torch.func.vmap"
                    if mode == "vmap"
                    else "one at a time (one run of the model per state and chain)",
                ),
                BatchingWarning,
            )
        return mode

    def _batching_trials(self, codes: torch.Tensor):
        """``(mode, reasons)``: the fastest way to evaluate probe states built from
        ``codes`` that gives what they give one at a time, and why each faster one
        does not."""
        probe = self._probe_states(codes)
        with self.distinct_given(probe.shape[0]):
            return self._trials(probe)

    def _trials(self, probe: torch.Tensor):
        reasons = {}
        if self.value_reads:
            reasons["plate"] = "its Python control flow reads latent values ({})".format(
                "; ".join(r.describe() for r in self.value_reads)
            )
            mode = "loop"
        else:
            reference = self._reference(probe)
            mode = "loop"
            for candidate in BATCHING_MODES[:2]:
                reasons[candidate] = self._batching_failure(candidate, probe, reference)
                if reasons[candidate] is None:
                    mode = candidate
                    break
        return mode, reasons

    def check_vectorized(self, codes: torch.Tensor) -> None:
        """Check that the model broadcasts over a leading batch dimension (the fast
        ``"plate"`` evaluation), for model authors.

        :param torch.Tensor codes: long ``[C, D]`` valid states (probes are built
            from them).
        :raises UnsupportedModelError: saying why it does not, naming the first site
            that differs where there is one.
        """
        probe = self._probe_states(codes)
        with self.distinct_given(probe.shape[0]):
            failure = (
                "its Python control flow reads latent values"
                if self.value_reads
                else self._batching_failure("plate", probe, self._reference(probe))
            )
        if failure is not None:
            raise UnsupportedModelError(
                "The model does not broadcast over a leading batch dimension: {}. Write "
                "the model with pyro.plate for every batch dimension and reduce only "
                "over a site's own dimensions, keeping the plate's dimension for sites "
                "outside the plate (x.sum(-1, keepdim=True), not x.sum() or "
                "x.sum(-1)).".format(failure)
            )

    def _probe_states(self, codes: torch.Tensor) -> torch.Tensor:
        """Two or three distinct valid states built from ``codes``: see
        :meth:`CoordinateLayout.probe_states
        <pyro_gwg.proposals.layout.CoordinateLayout.probe_states>` (the probe of
        :class:`~pyro_gwg.density.PotentialDensity` too)."""
        return self.layout.probe_states(codes)

    def _reference(self, probe: torch.Tensor):
        """Each probe state evaluated on its own (state ``i`` under chain ``i``'s given
        values, as a batch evaluates it, where they are per chain)."""
        out = []
        with self.recording():
            for i in range(probe.shape[0]):
                with self.given_of_chain(i):
                    out.append(self._value_and_grad(probe[i : i + 1], 1))
        return out

    def _batching_failure(self, mode: str, probe: torch.Tensor, reference) -> Optional[str]:
        """Why evaluating ``probe`` as ``mode`` differs from evaluating it state by
        state (``None`` if it does not)."""
        previous, self.batching = self.batching, mode
        try:
            with self.recording():
                f, grad = self._value_and_grad(probe, probe.shape[0])
        except Exception as error:  # any failure of the batched run: a reason to fall back
            if out_of_memory(error):
                raise
            return "{} fails ({}: {})".format(mode, type(error).__name__, first_line(error))
        finally:
            self.batching = previous
        f_ref = torch.cat([r[0] for r in reference])
        g_ref = torch.cat([r[1] for r in reference])
        same_f = torch.allclose(f, f_ref, rtol=RTOL, atol=ATOL, equal_nan=True)
        if same_f and torch.allclose(grad, g_ref, rtol=RTOL, atol=ATOL, equal_nan=True):
            return None
        detail = (
            "batched log densities {} against {} one state at a time{}".format(
                format_values(f),
                format_values(f_ref),
                self._mismatching_site(probe) if mode == "plate" else "",
            )
            if not same_f
            else "the gradients differ from those computed one state at a time"
        )
        return "{} evaluation mixes the states ({})".format(mode, detail)

    def _mismatching_site(self, probe: torch.Tensor) -> str:
        if self.enumerated:
            return ""
        try:
            with torch.no_grad():
                trace = self._state_trace(probe, self._relaxed(probe, False), probe.shape[0])
                batched = {
                    s["name"]: self._chain_sum(self._site_log_prob(s), probe.shape[0]).double()
                    for s in _trace.sample_sites(trace)
                }
        except Exception:  # the batched run fails: no site to name
            return ""
        singles = []
        for i in range(probe.shape[0]):
            with self.given_of_chain(i):
                singles.append(self.site_log_probs(probe[i : i + 1]))
        for name, value in batched.items():
            expected = torch.stack([s[name] for s in singles])
            if value.shape != expected.shape and value.numel() not in (1, expected.numel()):
                return "; the first site that differs is '{}'".format(name)
            if not torch.allclose(
                value.reshape(-1).expand_as(expected), expected, rtol=RTOL, atol=ATOL
            ):
                return "; the first site that differs is '{}'".format(name)
        return ""
