"""Test-wide settings."""

import pyro.infer.mcmc.api as pyro_mcmc
import pytest


@pytest.fixture(autouse=True)
def _chains_in_this_process(monkeypatch):
    """Make ``pyro.infer.MCMC`` run several chains sequentially on every machine.

    With more than two cores Pyro would fork one process per chain; PyTorch's OpenMP
    thread pool does not survive ``fork`` once the parent has used it, and the forked
    chains would hang. Tests that want worker processes patch this again and use the
    ``spawn`` context.
    """
    monkeypatch.setattr(pyro_mcmc.mp, "cpu_count", lambda: 1)
