"""What every kernel shares (pyro_gwg/kernels/base.py): models written without batching
in mind, bad initial values, invalid densities met during a run."""

import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from exactness import assert_exact, draw_codes
from pyro.infer import MCMC
from pyro.infer.autoguide.initialization import init_to_value
from small_models import SUITE

import pyro_gwg
from pyro_gwg import (
    AVG,
    GWG,
    NCG,
    PAVG,
    BatchingWarning,
    Gibbs,
    HammingBall,
    LocallyBalanced,
    UnsupportedModelError,
    exact_posterior,
)
from pyro_gwg.compile import CompilationWarning
from pyro_gwg.kernels import REGISTRY

KERNELS = {
    "gwg": lambda model, **kw: GWG(model, **kw),
    "gwg-2-flips": lambda model, **kw: GWG(model, num_flips=2, **kw),
    "ncg": lambda model, **kw: NCG(model, **kw),
    "avg": lambda model, **kw: AVG(model, **kw),
    "pavg": lambda model, **kw: PAVG(model, **kw),
    "gibbs": lambda model, **kw: Gibbs(model, **kw),
    "hamming-ball": lambda model, **kw: HammingBall(model, block_size=3, **kw),
    "locally-balanced": lambda model, **kw: LocallyBalanced(model, **kw),
}


# ---------------------------------------------------------------- models as users write them


def plain_ising(theta=0.4):
    """An Ising field in two plates with the coupling summed to a scalar: the factor
    drops the plates' dimensions, so the model does not broadcast over chains."""
    with pyro.plate("rows", 2, dim=-2), pyro.plate("cols", 3, dim=-1):
        spins = pyro.sample("S", dist.Bernoulli(0.5))
    s = 2 * spins - 1
    pyro.factor("coupling", theta * (s * s.roll(1, -1)).sum((-1, -2)))


Y_EXPANDED, Y_MEAN, Y_SQRT = torch.tensor([1.0, 2.3]), torch.tensor(0.7), torch.tensor(-0.5)


def expanded_likelihood(y=Y_EXPANDED):
    """Scalar latent sites feeding a likelihood expanded to a fixed shape."""
    n = pyro.sample("n", dist.Binomial(3, 0.5))
    m = pyro.sample("m", dist.Bernoulli(0.4))
    pyro.sample("y", dist.Normal(n + 0.3 * m, 1.0).expand([2]).to_event(1), obs=y)


def value_dependent_mean(y=Y_MEAN):
    """Python control flow on a latent value that keeps the sites (runs one state at a
    time, eagerly)."""
    x = pyro.sample("x", dist.Bernoulli(0.4).expand([3]).to_event(1))
    mean = 1.5 if x[0].item() else -0.5
    pyro.sample("y", dist.Normal(mean + x[1] - x[2], 1.0), obs=y)


NOT_BROADCASTING = {
    "plain_ising": (plain_ising, "vmap"),
    "expanded_likelihood": (expanded_likelihood, "vmap"),
    "value_dependent_mean": (value_dependent_mean, "loop"),
}


def _cases():
    # every kernel on one model; the kernels of different families on the others
    # (evaluating states one at a time, or under vmap without compilation, is slow)
    subsets = {
        "plain_ising": sorted(KERNELS),
        "expanded_likelihood": ["gwg-2-flips", "ncg", "hamming-ball"],
        "value_dependent_mean": ["gwg", "gibbs"],
    }
    for model, kernels in subsets.items():
        for kernel in kernels:
            yield model, kernel


@pytest.mark.parametrize("model_name,kernel", list(_cases()))
def test_models_that_do_not_broadcast_are_sampled_exactly(model_name, kernel):
    model, mode = NOT_BROADCASTING[model_name]
    pyro.set_rng_seed(1)
    kern = KERNELS[kernel](model)
    with pytest.warns(BatchingWarning, match="does not broadcast"):
        codes = draw_codes(kern, 8 if mode == "loop" else 16, 600, 60)
    assert kern.energy.batching == mode
    assert_exact(codes, exact_posterior(model))


@pytest.mark.parametrize("kernel", ["gibbs", "hamming-ball", "locally-balanced", "gwg"])
def test_one_chain_in_pyro_mcmc_runs_a_model_that_does_not_broadcast(kernel):
    # the gradient-free kernels evaluate many states per step even for one chain
    pyro.set_rng_seed(0)
    mcmc = MCMC(
        KERNELS[kernel](expanded_likelihood), num_samples=30, warmup_steps=10, disable_progbar=True
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BatchingWarning)
        mcmc.run()
    assert mcmc.get_samples()["n"].shape == (30,)


def test_the_batching_warning_is_given_once_per_model():
    pyro.set_rng_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pyro_gwg.MCMC(Gibbs(plain_ising), num_samples=20, num_chains=4, disable_progbar=True).run()
    assert sum(issubclass(w.category, BatchingWarning) for w in caught) == 1


# ---------------------------------------------------------------- initial values


def bits_and_count():
    pyro.sample("x", dist.Bernoulli(0.3).expand([3]).to_event(1))
    pyro.sample("g", dist.Geometric(0.3))


BAD_STARTS = [
    ({"x": [0.0, 2.0, 1.0], "g": 1.0}, "'x'.*2.0 at position \\(1,\\).*0 or 1"),
    ({"x": [0.0, 1.0, 1.0], "g": -2.0}, "'g'.*-2.0.*integer >= 0"),
    ({"x": [0.0, 1.0, 1.0], "g": 1.5}, "'g'.*1.5.*whole number"),
    ({"x": [0.0, 1.0], "g": 1.0}, "'x'.*has shape"),
    ({"x": [0.0, 1.0, 1.0]}, "No value given for latent site\\(s\\) 'g'"),
]


@pytest.mark.parametrize("values,message", BAD_STARTS)
@pytest.mark.parametrize("how", ["init_to_value", "pyro initial_params", "pyro_gwg.MCMC"])
def test_initial_values_outside_the_support_are_refused_naming_the_site(values, message, how):
    values = {k: torch.tensor(v) for k, v in values.items()}
    if how == "init_to_value":
        if len(values) < 2:  # init_to_value samples missing sites: nothing to refuse
            return
        mcmc = MCMC(
            GWG(bits_and_count, init_strategy=init_to_value(values=values)),
            num_samples=5,
            disable_progbar=True,
        )
    elif how == "pyro initial_params":
        mcmc = MCMC(GWG(bits_and_count), 5, initial_params=values, disable_progbar=True)
    else:
        values = {k: torch.stack([v, v]) for k, v in values.items()}
        mcmc = pyro_gwg.MCMC(
            GWG(bits_and_count), 5, num_chains=2, initial_params=values, disable_progbar=True
        )
    with pytest.raises(ValueError, match=message):
        mcmc.run()


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_kernels_algorithm_refuses_codes_outside_the_model_layout(name):
    # kernel.build(energy).init once started chains at codes outside the supports
    energy = pyro_gwg.ModelDensity(bits_and_count)
    init, step = getattr(pyro_gwg, name)().build(energy)
    with pytest.raises(ValueError, match="coordinate 1 \\(a bit, 0 or 1, got \\[2\\]\\)"):
        init(torch.tensor([[0, 2, 1, 0]]))
    with pytest.raises(ValueError, match="coordinate 3 \\(an integer >= 0, got \\[-1\\]\\)"):
        init(torch.tensor([[0, 1, 1, -1], [0, 0, 0, 3]]))
    state = init(torch.tensor([[0, 1, 1, 7]]))
    with pytest.raises(ValueError, match="codes are shaped \\[num_chains, D\\] = \\[C, 4\\]"):
        step(state._replace(codes=torch.zeros(1, 5, dtype=torch.long)))
    assert step(state)[0].codes.shape == (1, 4)


def test_initial_values_may_be_arrays_or_lists():
    import numpy as np

    kernel = GWG(bits_and_count)
    kernel.initial_params = {"x": np.array([0.0, 1.0, 1.0]), "g": 2}
    kernel.setup(0)
    assert kernel.state.codes.tolist() == [[0, 1, 1, 2]]


def test_a_random_model_is_refused_in_pyro_mcmc():
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5).expand([3]).to_event(1))
        pyro.factor("noise", 0.1 * torch.randn(()) * x.sum(-1))

    with pytest.raises(UnsupportedModelError, match="random numbers outside pyro.sample"):
        MCMC(GWG(model), num_samples=5, disable_progbar=True).run()


# ---------------------------------------------------------------- invalid densities


def spike(bad):
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5).expand([4]).to_event(1))
        pyro.factor("spike", torch.where(x.sum(-1) >= 3, torch.tensor(bad), torch.tensor(0.0)))

    return model


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
@pytest.mark.parametrize(
    "kernel,jit_compile",
    [("gwg", False), ("gwg", "auto"), ("ncg", "auto"), ("gibbs", "auto"), ("hamming-ball", True)],
)
def test_nan_or_infinite_density_met_during_a_run_raises(bad, kernel, jit_compile):
    start = init_to_value(values={"x": torch.zeros(4)})
    kern = KERNELS[kernel](spike(bad), init_strategy=start, jit_compile=jit_compile)
    pyro.set_rng_seed(0)
    mcmc = pyro_gwg.MCMC(kern, num_samples=400, num_chains=4, disable_progbar=True)
    with pytest.raises(UnsupportedModelError, match="log density is {}.*'spike'".format(bad)):
        mcmc.run()


def test_infinite_density_met_inside_pyro_mcmc_raises():
    start = init_to_value(values={"x": torch.zeros(4)})
    pyro.set_rng_seed(0)
    mcmc = MCMC(GWG(spike(float("inf")), init_strategy=start), 400, disable_progbar=True)
    with pytest.raises(UnsupportedModelError, match="log density is inf at") as error:
        mcmc.run()
    # the state named is one where the factor is infinite: three or four ones
    state = error.value.args[0].split("'x': [")[1].split("]")[0]
    assert sum(int(v) for v in state.split(",")) >= 3


def sqrt_at_zero(y=Y_SQRT):
    """An infinite derivative at k = 0 (sqrt): the gradient must not decide where the chain
    can go."""
    k = pyro.sample("k", dist.Binomial(4, 0.5))
    b = pyro.sample("b", dist.Bernoulli(0.3))
    pyro.sample("y", dist.Normal(k.sqrt() + b, 1.0), obs=y)


@pytest.mark.parametrize("kernel", ["gwg", "ncg", "avg"])
def test_infinite_gradients_leave_the_chain_exact(kernel):
    pyro.set_rng_seed(0)
    codes = draw_codes(KERNELS[kernel](sqrt_at_zero), 16, 1000, 100)
    assert_exact(codes, exact_posterior(sqrt_at_zero))


@pytest.mark.parametrize("runner", ["pyro", "pyro_gwg-sequential"])
def test_the_batching_warning_comes_once_per_run(runner):
    # chains run one after the other, one setup each: the model is probed (and the
    # warning given) once
    pyro.set_rng_seed(0)
    if runner == "pyro":
        mcmc = MCMC(Gibbs(expanded_likelihood), 120, 10, num_chains=3, disable_progbar=True)
    else:
        mcmc = pyro_gwg.MCMC(
            Gibbs(expanded_likelihood),
            120,
            10,
            num_chains=3,
            chain_method="sequential",
            disable_progbar=True,
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run()
    batching = [w for w in caught if issubclass(w.category, BatchingWarning)]
    assert len(batching) == 1, [str(w.message) for w in caught]


def test_a_model_that_does_not_compile_is_reported_once_per_run():
    # jit_compile="auto" runs it eagerly, and says so once, not once per chain
    pyro.set_rng_seed(0)
    mcmc = MCMC(GWG(value_dependent_mean), 120, 10, num_chains=3, disable_progbar=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run()
    compilation = [w for w in caught if issubclass(w.category, CompilationWarning)]
    assert len(compilation) == 1, [str(w.message) for w in caught]
    assert "control flow reads latent values" in str(compilation[0].message)


# ---------------------------------------------------------------- precision


def large_constant(offset):
    def model():
        x = pyro.sample("x", dist.Bernoulli(logits=torch.tensor([0.4, -0.7, 1.1])).to_event(1))
        s = 2 * x - 1
        pyro.factor("coupling", 0.6 * (s[..., 0] * s[..., 1] - s[..., 1] * s[..., 2]))
        pyro.factor("constant", torch.tensor(offset))

    return model


def test_a_large_constant_term_leaves_sampling_and_enumeration_exact():
    # in float32, a constant factor of 1e7 puts the log joint's ulp at 1 and swallows
    # the differences between states; they are summed in float64
    exact = exact_posterior(large_constant(0.0))
    for offset in (1e7, 1e8):
        shifted = exact_posterior(large_constant(offset))
        assert float(shifted.probs.max()) <= 1.0
        assert torch.allclose(shifted.probs, exact.probs, atol=1e-9)
    pyro.set_rng_seed(0)
    codes = draw_codes(GWG(large_constant(1e7)), 16, 800, 50)
    assert_exact(codes, exact)


# ------------------------------------------------------- pyro.infer.MCMC: draws in blocks
def _pyro_draws(model, args, num_samples, warmup_steps, kernel=None):
    pyro.set_rng_seed(5)
    kernel = kernel or GWG(model, num_flips=2)
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps)
    mcmc.run(*args)
    return mcmc.get_samples()["x"], mcmc.diagnostics()


@pytest.mark.parametrize("warmup_steps", [0, 7])
def test_draws_served_from_blocks_are_those_of_single_steps(monkeypatch, warmup_steps):
    from pyro_gwg.kernels import base

    model, args = SUITE["coupled_binary_field"]
    blocks = _pyro_draws(model, args, 150, warmup_steps)
    monkeypatch.setattr(base, "UNOBSERVED_STEPS", 1)  # every draw a single step
    single = _pyro_draws(model, args, 150, warmup_steps)
    assert torch.equal(blocks[0], single[0])
    for name in ("accepted", "accept_prob", "num_changed", "log_joint"):
        assert torch.equal(blocks[1][name]["chain 0"], single[1][name]["chain 0"]), name
    assert blocks[1]["acceptance rate"] == single[1]["acceptance rate"]


def test_a_restart_from_other_values_drops_the_steps_computed_ahead():
    model, args = SUITE["coupled_binary_field"]
    kernel = GWG(model, num_flips=2)
    kernel.setup(3, *args)
    params = kernel.initial_params
    for _ in range(40):
        params = kernel.sample(params)
    assert 40 < kernel.driver.t < 80  # steps computed ahead, fewer than twice the draws
    # the kernel's state is the last draw's, not the newest step computed
    assert torch.equal(kernel.current_values()["x"][0].to(params["x"].dtype), params["x"])
    assert kernel.state is not kernel.driver.state
    served = kernel.state
    kernel.refresh()  # a re-evaluation goes on from the last draw too
    assert torch.equal(kernel.driver.state.codes, served.codes) and kernel.driver.t == 40
    for _ in range(5):
        params = kernel.sample(params)
    other = {"x": 1.0 - params["x"]}
    expected = kernel.energy.codes_from_values(kernel.energy.with_chain_dim(other))
    starts = []
    init = kernel.driver.init
    kernel.driver.init = lambda codes: starts.append(codes) or init(codes)
    params = kernel.sample(other)
    assert len(starts) == 1 and torch.equal(starts[0], expected)
    assert kernel.driver.t == 46  # the chain goes on from the step counter of the draw
    for _ in range(10):  # continuing: no restart, draws in blocks again
        params = kernel.sample(params)
    assert len(starts) == 1
    assert kernel.diagnostics()["accepted"].shape == (56 - 3,)
