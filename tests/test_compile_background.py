"""AOTInductor in a background process (pyro_gwg.compile.background): a real worker
compiles a transition while the chains run on its captured graph; the chains switch to
the package, which draws what the eager transition draws, and a later run loads it
from the disk cache at its capture."""

import pyro
import pytest
import torch
from small_models import SUITE
from test_compile_transition import _steps

from pyro_gwg import GWG
from pyro_gwg.compile import backends, background

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Categorical site"),
    pytest.mark.skipif(not backends.aot_available(), reason="no AOTInductor packages"),
]


def _no_cpu_probe():
    raise AssertionError("a package load probed the CPU's vector instructions")


def _kernel(jit_compile):
    model, args = SUITE["mixed_kinds"]
    kernel = GWG(model, num_flips=2, jit_compile=jit_compile)
    kernel.vectorized_chains = 4
    pyro.set_rng_seed(0)
    kernel.setup(0, *args)
    return kernel


def test_a_background_compile_switches_the_chains_to_its_package(monkeypatch, tmp_path):
    monkeypatch.setenv(backends.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(background.BACKGROUND_ENV, "1")
    exports, jobs = [], []  # (the exports in this process, the compiles started)
    real_export, real_init = backends.export_graph, background.BackgroundCompile.__init__
    monkeypatch.setattr(backends, "export_graph", lambda *a: exports.append(1) or real_export(*a))

    def counted(self, *args):
        jobs.append(1)
        real_init(self, *args)

    monkeypatch.setattr(background.BackgroundCompile, "__init__", counted)
    kernel = _kernel("auto")
    _steps(kernel, 3, seed=1)  # eager, then the graph while the worker compiles
    # the worker exports the graph: the chains waited for the capture only
    assert exports == [] and jobs == [1]
    fn = next(iter(kernel.driver._compiled.values())).fn
    assert fn.form == "graph" and fn.compile is not None
    # a run that ends before its compile leaves it running; the next run of the same
    # transition neither exports nor compiles again: it takes that compile over
    kernel.driver.close()
    second = _kernel("auto")
    _steps(second, 3, seed=1)
    taken = next(iter(second.driver._compiled.values())).fn
    assert taken.compile is fn.compile and jobs == [1] and not fn.compile._stopped
    # packages load without PyTorch's probe of the CPU (seconds; the cache is per CPU)
    from torch._inductor import cpu_vec_isa

    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", _no_cpu_probe)
    assert fn.compile.wait(timeout=600) is not None, fn.compile.error
    assert list(tmp_path.glob("*/*.pt2"))  # the package is in the disk cache
    compiled = _steps(kernel, 6, seed=2)
    assert fn.form == "aot" and fn.background_seconds > 0
    kernel.driver.state = kernel.driver.state  # (the same state for the eager run)
    eager = _kernel(False)
    eager.driver.state = kernel.driver.state
    # the package draws the random numbers the eager transition draws
    start = kernel.driver.state
    after = _steps(kernel, 6, seed=3)
    eager.driver.state = start
    expected = _steps(eager, 6, seed=3)
    assert torch.equal(after[1], expected[1])
    assert torch.allclose(after[2], expected[2], atol=1e-5)
    assert compiled[1].shape == (4, 6, kernel.energy.num_coords)
    # a later run of the same transition loads the package at its capture
    again = _kernel("auto")
    _steps(again, 3, seed=1)
    fn = next(iter(again.driver._compiled.values())).fn
    assert fn.form == "aot" and fn.compile is None


@pytest.mark.exactness
def test_aot_chains_match_the_exact_posterior(monkeypatch, tmp_path):
    # jit_compile="inductor": every sampling step runs the AOTInductor package
    from exactness import assert_exact

    from pyro_gwg import MCMC, exact_posterior

    monkeypatch.setenv(backends.CACHE_ENV, str(tmp_path))
    model, args = SUITE["mixed_kinds"]
    pyro.set_rng_seed(0)
    mcmc = MCMC(
        GWG(model, num_flips=2, jit_compile="inductor"),
        num_samples=1500,
        warmup_steps=100,
        num_chains=32,
        disable_progbar=True,
    )
    mcmc.run(*args)
    post = exact_posterior(model, *args)
    samples = mcmc.get_samples(group_by_chain=True)
    flat = {k: v.flatten(0, 1) for k, v in samples.items()}
    codes = post.energy.codes_from_values(flat).reshape(32, 1500, -1)
    assert_exact(codes, post)
    assert list(tmp_path.glob("*/*.pt2"))  # (it ran the package)
