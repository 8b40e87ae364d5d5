"""Test-wide settings."""

import pyro.infer.mcmc.api as pyro_mcmc
import pytest
import torch


@pytest.fixture(autouse=True)
def _chains_in_this_process(monkeypatch):
    """Make ``pyro.infer.MCMC`` run several chains sequentially on every machine.

    With more than two cores Pyro would fork one process per chain; PyTorch's OpenMP
    thread pool does not survive ``fork`` once the parent has used it, and the forked
    chains would hang. Tests that want worker processes patch this again and use the
    ``spawn`` context.
    """
    monkeypatch.setattr(pyro_mcmc.mp, "cpu_count", lambda: 1)


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Run the tests on one torch thread: their tensors are small and gain nothing from
    more, and on a busy machine OpenMP threads contending for the cores make such tests
    many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
