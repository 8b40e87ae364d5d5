"""The chain driver, the functional kernels and the density protocol."""

import time

import pyro
import pytest
import torch
from exactness import assert_exact
from small_models import SUITE

import pyro_gwg
from pyro_gwg.adaptation import flips_bound, warmup_bound
from pyro_gwg.density import Density, PotentialDensity, binary_layout
from pyro_gwg.driver import ChainDriver, CheckedAlgorithm, checked_algorithm
from pyro_gwg.enumeration import exact_posterior
from pyro_gwg.kernels import REGISTRY
from pyro_gwg.proposals.gwg import build_gwg

COUPLING = torch.tensor(
    [[0.0, 0.8, -0.5, 0.0], [0.8, 0.0, 0.3, 0.6], [-0.5, 0.3, 0.0, -0.9], [0.0, 0.6, -0.9, 0.0]]
)
BIAS = torch.tensor([0.2, -0.4, 0.1, 0.3])


def _ising(x):
    return (x @ COUPLING * x).sum(-1) / 2 + x @ BIAS


def _ising_model():
    x = pyro.sample("x", pyro.distributions.Bernoulli(0.5).expand([4]).to_event(1))
    pyro.factor("f", _ising(x))


@pytest.fixture(scope="module")
def exact():
    return exact_posterior(_ising_model)


def test_potential_density_matches_the_pyro_model():
    density = PotentialDensity(_ising, binary_layout(4))
    energy = pyro_gwg.ModelDensity(_ising_model)
    codes = torch.tensor([[0, 1, 1, 0], [1, 1, 0, 1], [0, 0, 0, 0]])
    value, grad = density.value_and_grad(codes)
    expected, expected_grad = energy.value_and_grad(codes)
    # the model adds the prior's constant 4 log(1/2)
    assert torch.allclose(value - value[2], expected - expected[2])
    assert torch.allclose(grad, expected_grad, atol=1e-6)
    assert isinstance(density, Density) and isinstance(energy, Density)
    assert density.traceable(3) is density


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_kernel_samples_a_hand_written_potential(name, exact):
    # a density with no Pyro model behind it: only the protocol
    pyro.set_rng_seed(0)
    kernel = getattr(pyro_gwg, name)()
    driver = kernel.driver_for(PotentialDensity(_ising, binary_layout(4)), num_warmup=100)
    driver.init(torch.randint(0, 2, (16, 4)))
    driver.run(100, every=8)
    draws = []
    driver.run(800, lambda t, info, codes, log_joint: draws.append(codes), every=8)
    draws = torch.cat(draws, 1)
    if kernel.exact:
        assert_exact(draws, exact)
    else:  # biased by design (DULA): its bias is tested with the kernel
        assert (draws != draws[:, :1]).any() and ((draws == 0) | (draws == 1)).all()


def test_build_reads_only_its_arguments():
    # the (init, step) pair works without setup, on a density it was never bound to,
    # for gradient-free kernels too (they read the density they are built on)
    energy = pyro_gwg.ModelDensity(*SUITE["coupled_binary_field"])
    for name in sorted(REGISTRY):
        init, step = getattr(pyro_gwg, name)().build(energy)
        state, info = step(init(energy.initial_codes(3)))
        assert state.codes.shape == (3, energy.num_coords) and info.accepted.shape == (3,)


def test_one_step_function_serves_blocks_of_every_length():
    kernel = pyro_gwg.GWG(_ising_model, jit_compile=True)
    kernel.vectorized_chains = 4
    kernel.setup(0)
    driver = kernel.driver
    blocks = []
    driver.run(24, lambda t, info, codes, log_joint: blocks.append(codes.shape), every=8)
    assert len(driver._compiled) == 1
    driver.run(5, lambda t, info, codes, log_joint: blocks.append(codes.shape), every=8)
    assert len(driver._compiled) == 1  # a shorter last block: the same function
    assert blocks == [(4, 8, 4)] * 3 + [(4, 5, 4)]
    assert driver.t == 29


@pytest.mark.parametrize("code_dtype", [torch.int8, torch.long])
def test_blocks_hand_the_observer_the_states_in_its_integer_type(code_dtype):
    kernel = pyro_gwg.GWG(_ising_model)
    kernel.vectorized_chains = 3
    kernel.setup(0)
    seen, states = [], []
    kernel.driver.run(10, lambda *block: seen.append(block[2]), 4, code_dtype, states)
    assert [codes.dtype for codes in seen] == [code_dtype] * 3
    expected = torch.stack([s.codes for s in states], 1)
    assert torch.equal(torch.cat(seen, 1).long(), expected)


@pytest.mark.slow
def test_warmup_adapts_one_step_at_a_time_without_building_the_step_again():
    pyro.set_rng_seed(0)
    kernel = pyro_gwg.GWG(pyro_gwg.models.lattice_ising, num_flips=1, adapt_num_flips=True)
    kernel.vectorized_chains = 8
    kernel.setup(60, size=6, coupling=0.2)
    driver = kernel.driver
    blocks = []
    driver.run(60, lambda t, info, codes, log_joint: blocks.append(codes.shape[1]), every=8)
    assert blocks == [1] * 60
    assert kernel.adapted_num_flips > 1
    # the number of flips is a field of the state: one step function serves every value
    # visited in warmup, and sampling transitions are keyed by a bound, not the value
    assert len([key for key in driver._compiled if key[1:] == (("max_flips", 36),)]) == 1
    assert driver.static == {"max_flips": flips_bound(kernel.adapted_num_flips, 36)}
    assert torch.equal(driver.state.num_flips, torch.full((8,), kernel.adapted_num_flips))
    assert driver.moves.moved is None  # nothing after warmup yet
    driver.run(16, every=8)
    assert driver.moves.steps == 16


def test_a_warmup_on_many_coordinates_draws_a_bounded_number_of_them():
    # warmup transitions once drew all D coordinates at every step (and PAS made D
    # sequential moves); now each draws at most warmup_bound of the number of flips
    pyro.set_rng_seed(0)
    kernel = pyro_gwg.GWG(pyro_gwg.models.lattice_ising, num_flips="auto")
    kernel.vectorized_chains = 4
    kernel.setup(40, size=12, coupling=0.2)
    driver = kernel.driver
    driver.run(40)
    bounds = [dict(key[1:])["max_flips"] for key in driver._compiled]
    assert bounds[0] == warmup_bound(5, 144) == 64  # from the start, sqrt(D) / 2.5
    assert set(bounds) <= {8, 16, 32, 64, 128, 144}  # powers of two, or D
    assert driver.static == {"max_flips": flips_bound(kernel.adapted_num_flips, 144)}


def test_the_sampling_bound_of_the_number_of_flips_is_the_next_power_of_two():
    assert [flips_bound(n, 100) for n in (1, 2, 3, 4, 5, 9, 64, 65, 100)] == [
        1,
        2,
        4,
        4,
        8,
        16,
        64,
        100,
        100,
    ]
    assert flips_bound(5, 6) == 6


def test_a_chain_driver_on_a_tempered_density_reads_that_density():
    # the gradient-free kernels once ignored the density given to their step
    energy = pyro_gwg.ModelDensity(_ising_model)
    flat = PotentialDensity(lambda x: torch.zeros(x.shape[0]), binary_layout(4))
    for kernel in (pyro_gwg.Gibbs(), pyro_gwg.GWG()):
        pyro.set_rng_seed(0)
        driver: ChainDriver = kernel.driver_for(flat)
        driver.init(energy.initial_codes(256))
        driver.run(30, every=10)
        # uniform target: every bit is a fair coin, whatever the model's couplings say
        assert abs(float(driver.state.codes.float().mean()) - 0.5) < 0.05


def test_compiled_transitions_take_the_energys_given_values_as_arguments():
    # MixedGibbs's discrete half: a model conditioned on values that change between
    # steps compiles once and reads their current values, not those of the tracing
    def model():
        mu = pyro.sample("mu", pyro.distributions.Normal(0.0, 1.0))
        pyro.sample("x", pyro.distributions.Bernoulli(logits=mu).expand([3]).to_event(1))

    kernel = pyro_gwg.GWG(model, jit_compile=True)
    kernel.vectorized_chains = 4  # (one given value per chain)
    kernel.setup_given(0, {"mu": torch.zeros(4)})
    driver = kernel.driver
    driver.run(8, every=8)
    blocks = []
    for mu in (4.0, -4.0):
        kernel.energy.set_given({"mu": torch.tensor([mu, -mu, mu, 0.0])})
        kernel.refresh()
        driver.run(8, lambda t, info, codes, log_joint: blocks.append(log_joint), every=8)
        assert torch.allclose(blocks[-1][:, -1], kernel.energy.log_joint(driver.state.codes))
    assert len(driver._compiled) == 1 and driver.mode.backend == "graph"


def test_bad_densities_and_inputs_are_refused_with_the_way_out():
    with pytest.raises(TypeError, match="log_density must be callable"):
        PotentialDensity(3.0, binary_layout(2))
    with pytest.raises(TypeError, match="layout must be a CoordinateLayout.*binary_layout"):
        PotentialDensity(_ising, 4)
    with pytest.raises(ValueError, match="one value per state, shape \\[2\\]"):
        PotentialDensity(lambda x: x, binary_layout(2)).log_joint(torch.zeros(2, 2).long())
    with pytest.raises(TypeError, match="given must be a dict of tensors"):
        pyro_gwg.ModelDensity(_ising_model, given=[torch.zeros(1)])


BAD_CODES = [
    (
        torch.tensor([[2, 0, -1, 1]]),
        ValueError,
        "coordinate 0 \\(a bit, 0 or 1, got \\[2\\]\\); coordinate 2",
    ),
    (
        torch.tensor([0, 1, 0, 1]),
        ValueError,
        "shaped \\[num_chains, D\\] = \\[C, 4\\].*got shape \\(4,\\)",
    ),
    (torch.zeros(2, 1, 4, dtype=torch.long), ValueError, "got shape \\(2, 1, 4\\)"),
    (torch.zeros(2, 5, dtype=torch.long), ValueError, "got shape \\(2, 5\\)"),
    (torch.zeros(2, 4), TypeError, "an integer tensor .*got dtype torch.float32"),
    ([[0, 1, 0, 1]], TypeError, "must be a tensor of integer codes"),
]


@pytest.mark.parametrize("codes,error,message", BAD_CODES)
@pytest.mark.parametrize("entry", ["build", "driver_for", "ChainDriver"])
def test_init_refuses_codes_that_are_not_states_of_the_layout(codes, error, message, entry):
    # codes outside the layout were once sampled there; wrong ranks gave raw errors
    density = PotentialDensity(_ising, binary_layout(4))
    init = {
        "build": lambda: pyro_gwg.GWG().build(density).init,
        "driver_for": lambda: pyro_gwg.GWG().driver_for(density).init,
        "ChainDriver": lambda: ChainDriver(lambda d: build_gwg(d, 2.0, 1), density).init,
    }[entry]()
    with pytest.raises(error, match=message):
        init(codes)
    assert init(torch.tensor([[1, 0, 1, 1]])).codes.shape == (1, 4)  # one state
    assert init(torch.tensor([[1, 0, 1, 1], [0, 0, 0, 1]], dtype=torch.int32)) is not None


def test_step_refuses_a_state_of_another_number_of_coordinates():
    algorithm = pyro_gwg.GWG().build(PotentialDensity(_ising, binary_layout(4)))
    state = algorithm.init(torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(
        ValueError, match="codes are shaped \\[num_chains, D\\] = \\[C, 4\\].*\\(2, 5\\)"
    ):
        algorithm.step(state._replace(codes=torch.zeros(2, 5, dtype=torch.long)))
    assert algorithm.step(state)[0].codes.shape == (2, 4)


def test_run_or_step_before_init_says_to_call_init():
    driver = pyro_gwg.GWG().driver_for(PotentialDensity(_ising, binary_layout(4)))
    for method in (lambda: driver.run(3), driver.step):
        with pytest.raises(RuntimeError, match="call driver.init\\(codes\\) first"):
            method()
    driver.init(torch.zeros(2, 4, dtype=torch.long))
    driver.run(3)
    assert driver.t == 3


def test_the_chains_own_states_are_not_checked_again(monkeypatch):
    # a refresh (MixedGibbs) or a tempering step (AIS) restarts from the current states
    density = PotentialDensity(_ising, binary_layout(4))
    driver = pyro_gwg.GWG().driver_for(density)
    checks = []
    monkeypatch.setattr(type(density.layout), "check_codes", lambda *args: checks.append(1))
    driver.init(torch.zeros(2, 4, dtype=torch.long))
    driver.run(2)
    driver.init(driver.state.codes)
    assert len(checks) == 1
    driver.init(driver.state.codes.clone())
    assert len(checks) == 2


def test_algorithms_are_checked_once():
    density = PotentialDensity(_ising, binary_layout(4))
    algorithm = pyro_gwg.Gibbs().build(density)
    assert isinstance(algorithm, CheckedAlgorithm)
    assert checked_algorithm(algorithm, density.layout) is algorithm
    driver = ChainDriver(pyro_gwg.Gibbs().build, density)
    assert isinstance(driver.algorithm, CheckedAlgorithm)


# ---------------------------------------------------------------- threads of "auto"


def test_fewest_fast_threads_takes_more_threads_only_when_they_pay():
    from pyro_gwg.driver import fewest_fast_threads

    assert fewest_fast_threads({1: [1.0, 1.1, 0.9], 2: [0.5, 0.6, 5.0]}) == 2
    assert fewest_fast_threads({1: [1.0, 1.0, 1.0], 2: [0.95, 0.95, 0.95]}) == 1  # < 10 %
    assert fewest_fast_threads({1: [1.0, 1.0, 9.0], 2: [6.0, 6.0, 0.1]}) == 1  # medians
    assert fewest_fast_threads({1: [1.0], 4: [0.2], 8: [0.19]}) == 4


@pytest.mark.parametrize("fast", [1, 2])
def test_thread_tuned_functions_settle_on_the_faster_count_and_restore_the_callers(
    fast, monkeypatch
):
    from pyro_gwg import driver

    seen = []

    def fn(state):  # slow under the thread count that is not ``fast``
        seen.append(torch.get_num_threads())
        if seen[-1] != fast:
            time.sleep(2e-3)
        return state

    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        tuned = driver._ThreadTuned(fn)
        calls = driver.UNTIMED_CALLS + 2 * driver.THREAD_TUNING_CALLS
        for _ in range(calls + 5):
            tuned(None)
            assert torch.get_num_threads() == 2  # the caller's setting, after every call
        assert sorted(set(seen[driver.UNTIMED_CALLS : calls])) == [1, 2]  # both timed
        assert seen[calls:] == [fast] * 5 and tuned.threads == fast
    finally:
        torch.set_num_threads(previous)
