"""NaN and ``+inf`` log densities: every evaluation of the energy is checked, at once
when eager; inside :meth:`NanRecording.recording` it is listed instead, for a compiled
function to return as a flag (:func:`invalid_evaluations`), since it cannot raise.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator, List, Optional, Sequence, Tuple

import torch

from pyro_gwg.bridge.checks import support_bounds
from pyro_gwg.bridge.errors import describe_values
from pyro_gwg.sites import UnsupportedModelError

__all__ = ["NanRecording", "invalid_evaluations"]


class NanRecording:
    """The NaN and ``+inf`` checks of :class:`~pyro_gwg.bridge.density.ModelDensity`
    (a part of it: it reads the energy's evaluation and checks)."""

    _recording: Optional[List[Tuple[torch.Tensor, torch.Tensor]]]

    def _record(self, codes: torch.Tensor, log_joint: torch.Tensor) -> None:
        """Check an evaluation for NaN or ``+inf``: at once when eager, or, inside
        :meth:`recording`, by keeping it for the caller (a compiled transition cannot
        raise; it returns a flag that its caller checks)."""
        if self._recording is not None:
            self._recording.append((codes, log_joint))
        elif not bool((log_joint < math.inf).all()):
            bad = int((~(log_joint < math.inf)).nonzero()[0, 0])
            self.raise_invalid(codes[bad])

    @contextlib.contextmanager
    def recording(self) -> Iterator[List[Tuple[torch.Tensor, torch.Tensor]]]:
        """Within this context evaluations are not checked but listed, as
        ``(codes, log_joint)`` pairs, for :func:`invalid_evaluations`."""
        previous, self._recording = self._recording, []
        try:
            yield self._recording
        finally:
            self._recording = previous

    def raise_invalid(self, codes: torch.Tensor) -> None:
        """Raise the error for a state ``codes [D]`` whose log density is NaN or
        ``+inf``, naming the sites responsible.

        :raises UnsupportedModelError: always.
        """
        codes = codes.reshape(1, -1).long()
        with self.recording(), torch.no_grad():
            trace = self._state_trace(codes, self._relaxed(codes, False), num_chains=1)
            found = support_bounds(trace, self._fixed_bounds)
            values = {name: value[0] for name, value in self.values_from_codes(codes).items()}
            self._check_bounds(self._fixed_bounds, found, values, self._bound_sources)
            total = float(self._forward_plate(1, codes, *self._relaxed(codes, False))[0])
            terms = self.site_log_probs(codes)
        bad = [
            "'{}' ({:g})".format(k, float(v)) for k, v in terms.items() if not float(v) < math.inf
        ]
        raise UnsupportedModelError(
            "The model's log density is {:g} at a state the sampler evaluated: {}. "
            "Site(s) with a NaN or +inf log-probability there: {}. A log density must "
            "be finite, or -inf for an impossible state, at every state of the latent "
            "sites' supports: check the model's parameters and pyro.factor terms at "
            "this state (for example a log of 0 multiplied by 0, or an infinite "
            "factor).".format(
                total,
                describe_values(self.values_from_codes(codes), index=0),
                ", ".join(bad) or "none individually (check pyro.factor terms)",
            )
        )


def invalid_evaluations(
    evaluations: Sequence[Tuple[torch.Tensor, torch.Tensor]], codes: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Summary of the evaluations listed by :meth:`ModelDensity.recording`, as tensors
    (so that a compiled function can return it): whether any log density was NaN or
    ``+inf``, and the first such state.

    :param evaluations: ``(codes, log_joint)`` pairs.
    :param torch.Tensor codes: long ``[C, D]`` states, for the result's shape and device
        when there was no evaluation.
    :returns: ``(flag [] (bool), codes [D])``.
    """
    flag, state = torch.zeros((), dtype=torch.bool, device=codes.device), codes[0]
    for states, log_joint in evaluations:  # (no concatenation of the states: small ops only)
        bad = ~(log_joint < math.inf)
        # (a one-element index, not a scalar one: graph capture must not read a value)
        first = states.index_select(0, bad.int().argmax().reshape(1))[0]
        state = torch.where(flag, state, first)
        flag = flag | bad.any()
    return flag, state
