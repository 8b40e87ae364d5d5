"""pyro_gwg._trace: the one module that relies on Pyro's internals.

``test_pyro_internals_are_as_relied_on`` exercises every Pyro internal the module uses,
each with a message naming it, so that a Pyro release that changes one fails there.
"""

import itertools
import math
from types import SimpleNamespace

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch
from pyro.infer import HMC, MCMC
from pyro.infer.autoguide.initialization import init_to_value

from pyro_gwg import GWG, _trace
from pyro_gwg.sites import UnsupportedModelError

pytestmark = pytest.mark.filterwarnings("ignore:num_chains=.* is more than available_cpu")


def plated_model():
    """Every kind of site: latent (one enumerated), observed, factor, deterministic,
    inside and outside a plate."""
    p = pyro.sample("p", dist.Beta(2.0, 2.0))
    z = pyro.sample("z", dist.Bernoulli(0.3), infer={"enumerate": "parallel"})
    with pyro.plate("data", 3):
        x = pyro.sample("x", dist.Bernoulli(p))
        pyro.sample("y", dist.Normal(x + z, 1.0), obs=torch.tensor([0.0, 1.0, 2.0]))
    pyro.factor("f", -0.5 * p)
    pyro.deterministic("d", 2 * p)


def enumerated_model():
    """A global enumerated site shared by a plate of observations, beside a plate of
    sampled bits: its log joint is a sum over z of a product over the plate."""
    probs = torch.tensor([0.2, 0.5, 0.3])
    z = pyro.sample("z", dist.Categorical(probs), infer={"enumerate": "parallel"})
    with pyro.plate("data", 2):
        x = pyro.sample("x", dist.Bernoulli(0.4))
        pyro.sample("y", dist.Normal(x + z.float(), 1.0), obs=torch.tensor([0.5, 2.0]))


def enumerated_brute_force(x):
    """log p(x, y) of :func:`enumerated_model`, summing z by hand."""
    total = []
    for z, prior in enumerate([0.2, 0.5, 0.3]):
        log = math.log(prior) + dist.Bernoulli(0.4).log_prob(x).sum()
        log = log + dist.Normal(x + z, 1.0).log_prob(torch.tensor([0.5, 2.0])).sum()
        total.append(log)
    return torch.stack(total).logsumexp(0).double()


def enumerated_log_probs(trace):
    return {s["name"]: _trace.scaled_log_prob(s).double() for s in _trace.sample_sites(trace)}


def test_pyro_internals_are_as_relied_on():
    """Every Pyro internal pyro_gwg._trace relies on, checked by name."""
    from pyro.ops.contract import contract_to_tensor
    from pyro.poutine.subsample_messenger import _Subsample

    # pyro.poutine.subsample_messenger._Subsample: the fn of a plate's own sample site
    def subsampled():
        with pyro.plate("data", 10, subsample_size=3):
            pyro.sample("x", dist.Normal(0.0, 1.0))

    site = poutine.trace(subsampled).get_trace().nodes["data"]
    assert site["type"] == "sample", "a pyro.plate no longer records a sample site"
    assert isinstance(site["fn"], _Subsample), "a plate's site fn is no longer _Subsample"
    assert (site["fn"].size, site["fn"].subsample_size) == (10, 3), "_Subsample.size changed"

    # the infer keys of pyro.factor ("is_auxiliary") and pyro.deterministic ("_deterministic")
    nodes = poutine.trace(plated_model).get_trace().nodes
    assert nodes["f"]["is_observed"] and nodes["f"]["infer"].get("is_auxiliary"), (
        "pyro.factor no longer marks its site infer={'is_auxiliary': True}"
    )
    assert nodes["d"]["is_observed"] and nodes["d"]["infer"].get("_deterministic"), (
        "pyro.deterministic no longer marks its site infer={'_deterministic': True}"
    )

    # Trace.pack_tensors, plate_to_symbol, symbol_to_dim, site["packed"], contract_to_tensor
    trace = poutine.trace(poutine.enum(enumerated_model, first_available_dim=-2)).get_trace()
    for s in _trace.sample_sites(trace):
        s["log_prob"] = s["unscaled_log_prob"] = _trace.scaled_log_prob(s).double()
    trace.pack_tensors()
    assert set(trace.plate_to_symbol) == {"data"}, "Trace.plate_to_symbol changed"
    assert trace.symbol_to_dim[trace.plate_to_symbol["data"]] == -1, "Trace.symbol_to_dim changed"
    assert "log_prob" in trace.nodes["y"]["packed"], "Trace.pack_tensors packs no log_prob"
    assert callable(contract_to_tensor)
    x = trace.nodes["x"]["value"]
    contracted = _trace.contract_enumerated(trace, enumerated_log_probs(trace))
    assert torch.allclose(contracted, enumerated_brute_force(x)), "contract_to_tensor changed"

    # pyro.infer.autoguide.initialization.InitMessenger
    trace = _trace.trace_model(
        enumerated_model,
        init_strategy=init_to_value(values={"z": torch.tensor(2), "x": torch.ones(2)}),
    )
    assert int(trace.nodes["z"]["value"]) == 2, "InitMessenger no longer sets latent values"

    # TraceHandler.msngr.trace: the sites recorded before the model raised
    def failing():
        pyro.sample("a", dist.Bernoulli(0.5))
        raise RuntimeError("model failed")

    partial = []
    with pytest.raises(RuntimeError, match="model failed"):
        _trace.trace_model(failing, on_error=lambda error, trace: partial.append(trace))
    recorded = [site["name"] for site in _trace.sample_sites(partial[0])]
    assert recorded == ["a"], "TraceHandler.msngr.trace no longer holds the sites"

    # pyro.distributions.util.scale_and_mask
    site = poutine.trace(poutine.scale(poutine.mask(plated_model, False), 3.0)).get_trace()
    assert float(_trace.scaled_log_prob(site.nodes["p"])) == 0.0, "scale_and_mask: mask"

    # HMC/NUTS's _max_plate_nesting and _jit_compile
    kernel = HMC(plated_model, max_plate_nesting=2, jit_compile=True)
    assert _trace.kernel_max_plate_nesting(kernel) == 2, "HMC._max_plate_nesting changed"
    assert _trace.kernel_jit_compiles(kernel), "HMC._jit_compile changed"
    assert not _trace.kernel_jit_compiles(HMC(plated_model)), "HMC._jit_compile changed"

    # pyro.infer.MCMC's _args, _kwargs, _samples and _diagnostics
    def normal(loc, scale=1.0):
        pyro.sample("theta", dist.Normal(loc, scale))

    mcmc = MCMC(HMC(normal), num_samples=2, warmup_steps=1, disable_progbar=True)
    assert not _trace.run_has_samples(mcmc), "MCMC._samples is set before a run"
    mcmc.run(torch.tensor(0.0), scale=2.0)
    assert _trace.run_has_samples(mcmc), "MCMC._samples is not set by a run"
    args, kwargs = _trace.run_arguments(mcmc)
    assert args == (torch.tensor(0.0),) and kwargs == {"scale": 2.0}, "MCMC._args changed"
    statistics = _trace.run_chain_statistics(mcmc)
    assert statistics is not None and len(statistics) == 1, "MCMC._diagnostics changed"
    assert "divergences" in statistics[0], "MCMC._diagnostics changed"


def test_trace_model_is_blocked_and_takes_arguments():
    def model(n, loc=0.0):
        pyro.sample("x", dist.Normal(loc, 1.0).expand([n]).to_event(1))

    with poutine.trace() as outer:
        trace = _trace.trace_model(model, (4,), {"loc": 5.0})
    assert "x" not in outer.trace.nodes
    assert trace.nodes["x"]["value"].shape == (4,)
    assert float(trace.nodes["x"]["fn"].base_dist.loc[0]) == 5.0


def test_sample_sites_by_kind():
    trace = _trace.trace_model(plated_model)
    names = {
        kind: [s["name"] for s in _trace.sample_sites(trace, kind)]
        for kind in (None, *_trace.SITE_KINDS)
    }
    assert names == {
        None: ["p", "z", "x", "y", "f", "d"],
        "latent": ["p", "z", "x"],
        "observed": ["y"],
        "factor": ["f", "d"],
    }
    assert [_trace.is_enumerated(trace.nodes[n]) for n in ("p", "z", "x")] == [False, True, False]
    assert _trace.is_subsample(trace.nodes["data"])
    with pytest.raises(ValueError, match="kind must be one of latent, observed, factor"):
        list(_trace.sample_sites(trace, "discrete"))


def test_scaled_log_prob_honours_scale_mask_and_value():
    def model():
        with pyro.plate("data", 2), poutine.mask(mask=torch.tensor([True, False])):
            pyro.sample("x", dist.Normal(0.0, 1.0), obs=torch.tensor([1.0, 1.0]))

    site = _trace.trace_model(poutine.scale(model, 3.0)).nodes["x"]
    expected = 3.0 * dist.Normal(0.0, 1.0).log_prob(torch.tensor(1.0))
    assert torch.allclose(_trace.scaled_log_prob(site), torch.stack([expected, torch.zeros(())]))
    at_zero = _trace.scaled_log_prob(site, torch.zeros(2))
    assert torch.allclose(at_zero[0], 3.0 * dist.Normal(0.0, 1.0).log_prob(torch.tensor(0.0)))


def test_check_full_plates():
    def model(subsample_size):
        with pyro.plate("data", 10, subsample_size=subsample_size):
            pyro.sample("x", dist.Bernoulli(0.5))

    _trace.check_full_plates(_trace.trace_model(model, (None,)), "why")
    _trace.check_full_plates(_trace.trace_model(model, (10,)), "why")
    with pytest.raises(UnsupportedModelError, match="'data' subsamples 3 of 10 elements: why"):
        _trace.check_full_plates(_trace.trace_model(model, (3,)), "why")


def test_plate_nesting_is_guessed_and_checked():
    def model():
        pyro.sample("a", dist.Normal(0.0, 1.0))
        pyro.sample("b", dist.Normal(torch.zeros(2, 3), 1.0))  # batch rank 2, no plate
        with pyro.plate("outer", 2, dim=-3):
            pyro.sample("c", dist.Normal(0.0, 1.0))

    trace = _trace.trace_model(model)
    assert _trace.guess_max_plate_nesting(trace) == 3
    assert _trace.guess_max_plate_nesting(trace, with_site=True) == (3, "c")
    assert _trace.guess_max_plate_nesting(_trace.trace_model(lambda: None), True) == (0, None)
    assert _trace.check_max_plate_nesting(trace, None) == 3
    assert _trace.check_max_plate_nesting(trace, 5) == 5
    with pytest.raises(ValueError, match="max_plate_nesting=2 is too small: site 'c' uses 3"):
        _trace.check_max_plate_nesting(trace, 2)


def test_model_at_runs_a_batch_left_of_the_plates():
    x = torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    values = {"x": x}
    model = _trace.model_at(enumerated_model, values, 1, batch=("batch", 4), enumerated=True)
    trace = _trace.trace_model(model)
    assert trace.nodes["x"]["value"].shape == (4, 2)
    assert trace.nodes["z"]["value"].shape == (3, 1, 1)  # enumerated left of the batch
    frames = {f.name: f.dim for f in trace.nodes["y"]["cond_indep_stack"]}
    assert frames == {"data": -1, "batch": -2}
    batched = _trace.contract_enumerated(trace, enumerated_log_probs(trace), "batch")
    expected = torch.stack([enumerated_brute_force(row) for row in x])
    assert batched.shape == (4,) and torch.allclose(batched, expected)


def test_model_at_one_state_without_enumeration():
    trace = _trace.trace_model(_trace.model_at(enumerated_model, {"z": torch.tensor(1)}, 1))
    assert int(trace.nodes["z"]["value"]) == 1 and trace.nodes["z"]["is_observed"]


def test_contraction_matches_brute_force_for_every_state():
    for bits in itertools.product([0.0, 1.0], repeat=2):
        x = torch.tensor(bits)
        model = _trace.model_at(enumerated_model, {"x": x}, 1, enumerated=True)
        trace = _trace.trace_model(model)
        total = _trace.contract_enumerated(trace, enumerated_log_probs(trace))
        assert total.shape == () and torch.allclose(total, enumerated_brute_force(x))


def test_kernel_max_plate_nesting_reads_public_then_private():
    assert _trace.kernel_max_plate_nesting(GWG(plated_model, max_plate_nesting=1)) == 1
    assert _trace.kernel_max_plate_nesting(HMC(plated_model)) is None
    assert _trace.kernel_max_plate_nesting(object()) is None


def test_run_accessors_on_other_runners():
    assert _trace.run_arguments(object()) == ((), {})
    assert not _trace.run_has_samples(object())
    assert _trace.run_chain_statistics(object()) is None


def test_converter_refuses_a_subsampled_plate():
    from pyro_gwg import to_inference_data

    def model():
        theta = pyro.sample("theta", dist.Normal(0.0, 1.0))
        with pyro.plate("data", 10, subsample_size=3):
            pyro.sample("y", dist.Normal(theta, 1.0), obs=torch.zeros(3))

    class Run:  # a runner with pyro.infer.MCMC's interface (Pyro's HMC refuses subsampling)
        kernel = SimpleNamespace(model=model)

        def get_samples(self, group_by_chain=False):
            return {"theta": torch.zeros(1, 2)}

        def diagnostics(self):
            return {}

    with pytest.raises(UnsupportedModelError, match="'data' subsamples 3 of 10"):
        to_inference_data(Run())


def test_continuous_targets_refuse_a_subsampled_plate():
    from pyro_gwg.contrib.continuous import check_continuous_model

    def model():
        theta = pyro.sample("theta", dist.Normal(0.0, 1.0))
        with pyro.plate("data", 10, subsample_size=3):
            pyro.sample("y", dist.Normal(theta, 1.0), obs=torch.zeros(3))

    with pytest.raises(UnsupportedModelError, match="subsamples 3 of 10 elements: the contin"):
        check_continuous_model(model)


def test_pyro_sampling_loop_locals_are_found_on_the_call_stack():
    # the chain of pyro.infer.MCMC's sequential runner, read from its frames
    seen = []

    class Recording(GWG):
        def setup(self, *args, **kwargs):
            seen.append(_trace.pyro_sequential_chain())
            return super().setup(*args, **kwargs)

    def model():
        pyro.sample("x", dist.Bernoulli(0.5))

    MCMC(Recording(model), num_samples=4, warmup_steps=3, num_chains=2, disable_progbar=True).run()
    assert seen == [(0, 2, 0), (1, 2, 1)]
    assert _trace.pyro_sequential_chain() is None
