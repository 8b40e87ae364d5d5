"""Warnings raised while a sampler runs point at the user's line, whatever the path
through the library (pyro_gwg.MCMC, pyro.infer.MCMC, MixedGibbs in pyro.infer.MCMC), and their
classes can be imported from the package to filter them."""

import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import HMC
from pyro.infer import MCMC as PyroMCMC

import pyro_gwg
from pyro_gwg import GWG, MCMC, MixedGibbs, StuckChainWarning
from pyro_gwg._warn import warn


def one_bit_never_moves(y):
    with pyro.plate("bits", 3):
        x = pyro.sample("x", dist.Bernoulli(logits=torch.tensor([0.5, -0.5, 40.0])))
    pyro.sample("y", dist.Normal(x.sum(-1, keepdim=True), 1.0), obs=y)


def indexed_categorical():
    z = pyro.sample("z", dist.Categorical(logits=torch.zeros(3)))
    pyro.sample("y", dist.Normal(torch.tensor([-1.0, 0.0, 1.0])[z], 1.0), obs=torch.tensor(0.3))


def with_a_location(y):
    loc = pyro.sample("loc", dist.Normal(0.0, 1.0))
    with pyro.plate("bits", 3):
        x = pyro.sample("x", dist.Bernoulli(logits=torch.tensor([0.5, -0.5, 40.0])))
    pyro.sample("y", dist.Normal(loc + x.sum(-1, keepdim=True), 1.0), obs=y)


def _run_mixed(model, *args):
    PyroMCMC(MixedGibbs(HMC(model, num_steps=2), GWG()), 150, 20, disable_progbar=True).run(*args)


def _run_pyro(model, *args):
    PyroMCMC(GWG(model), 150, 20, disable_progbar=True).run(*args)


def _run_ours(model, *args):
    MCMC(GWG(model), 150, 20, num_chains=2, disable_progbar=True).run(*args)


@pytest.mark.parametrize("runner", [_run_pyro, _run_ours], ids=["pyro.infer.MCMC", "MCMC"])
@pytest.mark.parametrize(
    "model,args,category,match",
    [
        (one_bit_never_moves, (torch.tensor([1.5]),), StuckChainWarning, "never changed"),
        (indexed_categorical, (), UserWarning, "beyond its own log-probability"),
    ],
    ids=["stuck coordinate", "categorical as index"],
)
def test_run_time_warnings_point_at_the_callers_line(runner, model, args, category, match):
    pyro.set_rng_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner(model, *args)
    ours = [w for w in caught if issubclass(w.category, category) and match in str(w.message)]
    assert ours, [str(w.message) for w in caught]
    # the first frame outside pyro-gwg, Pyro and PyTorch: this file's runner
    assert all(w.filename == __file__ for w in ours), [(w.filename, w.lineno) for w in ours]


def test_a_mixed_kernel_warns_at_the_callers_line():
    pyro.set_rng_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run_mixed(with_a_location, torch.tensor([1.5]))
    ours = [w for w in caught if issubclass(w.category, StuckChainWarning)]
    assert ours, [str(w.message) for w in caught]
    assert all(w.filename == __file__ for w in ours), [(w.filename, w.lineno) for w in ours]


def test_warn_outside_the_library_is_at_its_caller():
    with pytest.warns(UserWarning, match="here") as record:
        warn("here")
    assert record[0].filename == __file__


def test_warning_classes_are_exported():
    for name in ("StuckChainWarning", "CompilationWarning", "BatchingWarning"):
        assert issubclass(getattr(pyro_gwg, name), UserWarning)
        assert name in pyro_gwg.__all__
