"""The progress bar of a run of :class:`pyro_gwg.MCMC`."""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["Progress"]


class Progress:
    """Progress bar with the acceptance rate of the current phase; the accepted count
    stays on the device and is read only when the bar is refreshed.

    :param bar: a :class:`tqdm.tqdm` bar.
    :param int num_chains: chains of the run.
    :param int total: steps of the run.
    """

    def __init__(self, bar, num_chains: int, total: int) -> None:
        self.bar, self.num_chains = bar, num_chains
        self.refresh = max(1, total // 200)
        self.accepted, self.steps = torch.zeros(()), 0
        self.description, self.note = "", None

    def start(self, description: str) -> None:
        """Start a phase (``"Warmup"``, ``"Sample"``): count the acceptance rate afresh."""
        self.description = description
        self.bar.set_description(self._label())
        self.accepted, self.steps = torch.zeros(()), 0

    def _label(self) -> str:
        if self.note is None:
            return self.description
        return "{} ({})".format(self.description, self.note)

    def compiling(self, message: Optional[str]) -> None:
        """Say in the bar that the run is compiling (``message``, shown until the
        compiled transition takes over), or that it has finished (``None``)."""
        self.note = message
        self.bar.set_description(self._label())

    def update(self, steps: int, accepted: Optional[torch.Tensor]) -> None:
        """Count ``steps`` steps with ``accepted`` (bool, one entry per chain and step;
        ``None`` for a run without an acceptance rate to show: HMC/NUTS alone)."""
        if accepted is not None:
            self.accepted = self.accepted.to(accepted.device) + accepted.sum()
        self.steps += steps
        done = self.bar.n + steps
        if (
            accepted is not None
            and not self.bar.disable
            and (done // self.refresh > self.bar.n // self.refresh or done == self.bar.total)
        ):
            rate = float(self.accepted) / (self.steps * self.num_chains)
            self.bar.set_description(self._label(), refresh=False)
            self.bar.set_postfix({"acc. rate": "{:.3f}".format(rate)}, refresh=False)
        self.bar.update(steps)

    def close(self) -> None:
        self.bar.close()
