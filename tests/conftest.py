"""Test-wide settings and the test tiers.

The default run (``python -m pytest``; ``setup.cfg`` adds ``-m "not exactness and not
slow"``) is the deterministic tier. ``-m exactness`` runs the statistical tier: every
test that compares drawn chains with an exact posterior through
:func:`tests.exactness.assert_exact` is put there by :func:`pytest_collection_modifyitems`
below, directly or through a helper of its module, without a marker of its own.
"""

import os
import tempfile
import types
import zlib

import pyro
import pyro.infer.mcmc.api as pyro_mcmc
import pytest
import torch

_STATISTICAL_CHECKS = frozenset({"assert_exact"})

# compiled transitions go to a cache of this test process, not the user's
os.environ["PYRO_GWG_CACHE_DIR"] = tempfile.mkdtemp(prefix="pyro_gwg_tests_")
# no AOTInductor compiles in background processes (the suite runs one worker per core,
# with none free for a compiler): the default mode runs the captured graph; the tests
# of the background compile turn it on (tests/test_compile_background.py)
os.environ["PYRO_GWG_BACKGROUND_COMPILE"] = "0"


def _reaches(code: types.CodeType, namespace: dict, seen: set) -> bool:
    """Whether ``code`` calls a statistical check, itself or through the functions of
    ``namespace`` (the test's module) and the functions nested in it."""
    if code in seen:
        return False
    seen.add(code)
    for name in code.co_names:
        if name in _STATISTICAL_CHECKS:
            return True
        helper = getattr(namespace.get(name), "__code__", None)
        if helper is not None and _reaches(helper, namespace, seen):
            return True
    return any(
        _reaches(const, namespace, seen)
        for const in code.co_consts
        if isinstance(const, types.CodeType)
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Mark each test that checks chains against an exact posterior ``exactness``."""
    for item in items:
        function = getattr(item, "function", None)
        if function is None or item.get_closest_marker("exactness") is not None:
            continue
        if _reaches(function.__code__, vars(item.module), set()):
            item.add_marker(pytest.mark.exactness)


@pytest.fixture(autouse=True)
def _seeded(request):
    """Seed every test from its id: a test's random draws do not depend on the tests
    run before it in its worker (tests that need a particular seed set their own)."""
    pyro.set_rng_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(autouse=True)
def _chains_in_this_process(monkeypatch):
    """Make ``pyro.infer.MCMC`` run several chains sequentially on every machine.

    With more than two cores Pyro would fork one process per chain; PyTorch's OpenMP
    thread pool does not survive ``fork`` once the parent has used it, and the forked
    chains would hang. Tests that want worker processes use :func:`worker_processes`.
    """
    monkeypatch.setattr(pyro_mcmc.mp, "cpu_count", lambda: 1)


@pytest.fixture
def worker_processes(monkeypatch, request):
    """Let ``pyro.infer.MCMC`` start one worker process per chain (up to four chains)
    on any machine, and fail the test if it draws the chains sequentially instead.
    Such tests must use the ``spawn`` context (``pyro_gwg.MCMC``'s default)."""
    monkeypatch.setattr(pyro_mcmc.mp, "cpu_count", lambda: 5)
    request.node.add_marker(pytest.mark.filterwarnings("error:num_chains=.*sequentially"))


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Run the tests on one torch thread: their tensors are small and gain nothing from
    more, and on a busy machine OpenMP threads contending for the cores make such tests
    many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
