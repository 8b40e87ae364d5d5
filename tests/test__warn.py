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
from pyro.infer.autoguide.initialization import init_to_value
from small_models import regime_hmm

import pyro_gwg
from pyro_gwg import GWG, MCMC, MixedGibbs, StuckChainWarning
from pyro_gwg._warn import name_list, warn

LOCS = torch.linspace(0.0, 10.0, 12)
Y_SHARP = torch.tensor([1.9, 8.1])


def sharp_one_hot(y, shift=0.0):
    """With uniform_weight=0, GWG proposes only the farthest category and freezes."""
    with pyro.plate("items", 2):
        z = pyro.sample("z", dist.OneHotCategorical(logits=torch.zeros(12)))
        pyro.sample("y", dist.Normal(z @ LOCS + shift, 0.3), obs=y)


def shifted_sharp_one_hot(y):
    sharp_one_hot(y, pyro.sample("shift", dist.Normal(0.0, 0.1)))


def indexed_categorical():
    z = pyro.sample("z", dist.Categorical(logits=torch.zeros(3)))
    pyro.sample("y", dist.Normal(torch.tensor([-1.0, 0.0, 1.0])[z], 1.0), obs=torch.tensor(0.3))


def _frozen(model):
    """GWG without its uniform component, started far from the posterior's mode."""
    start = torch.nn.functional.one_hot(torch.tensor([11, 0]), 12).float()
    return GWG(model, uniform_weight=0.0, init_strategy=init_to_value(values={"z": start}))


def _run_mixed(model, discrete, *args, **kwargs):
    kernel = MixedGibbs(HMC(model, num_steps=2), discrete)
    PyroMCMC(kernel, 150, 20, disable_progbar=True, **kwargs).run(*args)


def _run_pyro(kernel, *args):
    PyroMCMC(kernel, 150, 20, disable_progbar=True).run(*args)


def _run_ours(kernel, *args):
    MCMC(kernel, 150, 20, num_chains=2, disable_progbar=True).run(*args)


@pytest.mark.parametrize("runner", [_run_pyro, _run_ours], ids=["pyro.infer.MCMC", "MCMC"])
@pytest.mark.parametrize(
    "kernel,args,category,match",
    [
        (lambda: _frozen(sharp_one_hot), (Y_SHARP,), StuckChainWarning, "may be stuck"),
        (lambda: GWG(indexed_categorical), (), UserWarning, "beyond its own log-probability"),
    ],
    ids=["stuck chain", "categorical as index"],
)
def test_run_time_warnings_point_at_the_callers_line(runner, kernel, args, category, match):
    pyro.set_rng_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner(kernel(), *args)
    ours = [w for w in caught if issubclass(w.category, category) and match in str(w.message)]
    assert ours, [str(w.message) for w in caught]
    # the first frame outside pyro-gwg, Pyro and PyTorch: this file's runner
    assert all(w.filename == __file__ for w in ours), [(w.filename, w.lineno) for w in ours]


def test_a_mixed_kernel_warns_at_the_callers_line():
    pyro.set_rng_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run_mixed(shifted_sharp_one_hot, _frozen(None), Y_SHARP)
    ours = [w for w in caught if issubclass(w.category, StuckChainWarning)]
    assert ours, [str(w.message) for w in caught]
    assert all(w.filename == __file__ for w in ours), [(w.filename, w.lineno) for w in ours]


def tied_indicators(y):
    """Two indicators that are equal with probability 1 - 2e-30, next to a continuous
    site: the chains started at 00 and 11 stay there."""
    shift = pyro.sample("shift", dist.Normal(0.0, 1.0))
    tied = pyro.sample("tied", dist.Bernoulli(0.5).expand([2]).to_event(1))
    pyro.factor("tie", -30.0 * (tied[..., 0] - tied[..., 1]).abs())
    free = pyro.sample("free", dist.Bernoulli(0.5))
    pyro.sample("y", dist.Normal(shift + free, 1.0), obs=y)


def test_spike_and_slab_is_mentioned_for_indicators_next_to_continuous_sites():
    pyro.set_rng_seed(0)
    start = {"tied": torch.tensor([[0.0, 0.0], [1.0, 1.0]]), "free": torch.zeros(2)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run_mixed(tied_indicators, GWG(), torch.tensor(0.5), initial_params=start, num_chains=2)
    ours = [w for w in caught if issubclass(w.category, StuckChainWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert "'tied' (2 of 2: tied[0], tied[1])" in str(ours[0].message)
    assert "spike-and-slab" in str(ours[0].message)


@pytest.mark.parametrize("runner", ["pyro.infer.MCMC", "MCMC", "MCMC-sequential"])
def test_a_run_warns_once_per_cause_listing_the_sites(runner):
    # an HMM written the usual way: one Categorical per step, used as an index
    y = torch.tensor([-2.0, -2.0, 0.0, 0.0, 2.0, 2.0])
    pyro.set_rng_seed(0)
    kernel = GWG(regime_hmm, num_flips="auto")
    if runner == "pyro.infer.MCMC":  # chains one after the other, one setup each
        mcmc = PyroMCMC(kernel, 150, 50, num_chains=2, disable_progbar=True)
    else:
        method = "sequential" if runner.endswith("sequential") else "vectorized"
        mcmc = MCMC(kernel, 150, 50, num_chains=2, chain_method=method, disable_progbar=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(y)
        if runner != "pyro.infer.MCMC":  # they do not repeat what run() said
            mcmc.summary()
            mcmc.diagnostics()
            pyro_gwg.to_inference_data(mcmc)
    ours = [w for w in caught if w.filename == __file__]  # (Pyro's own point into Pyro)
    classes = [w.category for w in ours]
    assert all(classes.count(c) == 1 for c in classes), [str(w.message) for w in ours]
    categorical = [str(w.message) for w in ours if "Categorical sites" in str(w.message)]
    assert len(categorical) == 1 and "6 Categorical sites ('z_0'..'z_5';" in categorical[0]


def test_warn_outside_the_library_is_at_its_caller():
    with pytest.warns(UserWarning, match="here") as record:
        warn("here")
    assert record[0].filename == __file__


def test_warning_classes_are_exported():
    for name in ("StuckChainWarning", "CompilationWarning", "BatchingWarning"):
        assert issubclass(getattr(pyro_gwg, name), UserWarning)
        assert name in pyro_gwg.__all__


def test_name_list_gives_runs_of_numbered_names_as_ranges():
    assert name_list(["z_{}".format(t) for t in range(30)]) == "'z_0'..'z_29'"
    assert name_list(["a", "z_1", "z_2", "z_3", "z_5"]) == "'a', 'z_1'..'z_3', 'z_5'"
    assert name_list(["x[0]", "x[1]"], quote=False) == "x[0], x[1]"
    assert (
        name_list(["s{}".format(2 * i) for i in range(12)], limit=3)
        == "'s0', 's2', 's4' and 9 more"
    )


def test_a_gradient_free_kernel_does_not_warn_about_index_sites():
    """The warning says a gradient-informed proposal sees only the prior of an index
    site; Gibbs (and every kernel without a gradient) proposes from the log joint."""
    y = torch.tensor([-2.0, -2.0, 0.0, 0.0, 2.0, 2.0])
    mcmc = MCMC(pyro_gwg.Gibbs(regime_hmm), 20, 5, disable_progbar=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(y)
    assert not [w for w in caught if "Categorical site" in str(w.message)]
