"""A density from a hand-written potential (pyro_gwg/density.py): the checks that the
model bridge makes of a model, made of a log density."""

import pytest
import torch

import pyro_gwg
from pyro_gwg.density import Density, PotentialDensity, binary_layout, categorical_layout
from pyro_gwg.proposals.layout import CoordinateLayout

COUPLING = torch.tensor([[0.0, 0.8, -0.5], [0.8, 0.0, 0.3], [-0.5, 0.3, 0.0]])


def _ising(x):
    return (x @ COUPLING * x).sum(-1) / 2 + x.sum(-1)


def _run(density, num_chains=3, num_steps=30, kernel=None):
    algorithm = (kernel or pyro_gwg.GWG()).build(density)
    state = algorithm.init(torch.zeros(num_chains, density.layout.num_coords, dtype=torch.long))
    for _ in range(num_steps):
        state, _ = algorithm.step(state)
    return state


# ---------------------------------------------------------------- NaN and +inf


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_nan_or_infinite_log_density_is_refused_naming_the_state(bad):
    # once read as an impossible state and silently rejected
    density = PotentialDensity(
        lambda x: torch.where(x[:, 0] > 0, bad, 0.0) + _ising(x), binary_layout(3)
    )
    with pytest.raises(
        ValueError, match="is {} at a state the sampler evaluated: codes \\[1, ".format(bad)
    ):
        density.log_joint(torch.tensor([[0, 0, 0], [1, 0, 1]]))
    with pytest.raises(ValueError, match="A log density must be finite, or -inf"):
        density.value_and_grad(torch.tensor([[1, 1, 0]]))
    with pytest.raises(ValueError, match="check log_density at this state"):
        _run(density)


def test_minus_infinity_is_an_impossible_state_and_is_never_visited():
    density = PotentialDensity(
        lambda x: torch.where(x[:, 0] > 0, -float("inf"), 0.0) + _ising(x), binary_layout(3)
    )
    assert density.log_joint(torch.tensor([[1, 0, 0]])).isinf().all()
    assert (_run(density, num_steps=50).codes[:, 0] == 0).all()


# ---------------------------------------------------------------- batches


@pytest.mark.parametrize(
    "mixed",
    [
        lambda x: 2.0 * x[0, 0] + x[:, 1],  # x[0, 0] written for x[:, 0]
        lambda x: x.sum() + 0.0 * x[:, 0],  # a sum over the batch
        lambda x: x[:, 0] + (x - x.detach()).sum(),  # right values, mixed gradients
    ],
)
def test_a_log_density_that_mixes_the_states_of_a_batch_is_refused(mixed):
    # once sampled with wrong marginals and no warning
    density = PotentialDensity(mixed, binary_layout(3))
    with pytest.raises(ValueError, match="mixes the states of a batch.*torch.func.vmap"):
        _run(density)


def test_identical_states_are_probed_with_their_neighbours():
    # chains that all start at one state cannot show the mixing by themselves
    density = PotentialDensity(lambda x: 2.0 * x[0, 0] + x[:, 1], binary_layout(3))
    with pytest.raises(ValueError, match="mixes the states"):
        density.log_joint(torch.zeros(4, 3, dtype=torch.long))


@pytest.mark.parametrize(
    "log_density",
    [
        _ising,
        torch.func.vmap(lambda x: x @ COUPLING @ x / 2 + x.sum()),  # one state, vmapped
        lambda x: (x[..., 0] - x[..., 2]) ** 2,  # written on the last dimension
    ],
)
def test_densities_written_per_state_are_accepted(log_density):
    density = PotentialDensity(log_density, binary_layout(3))
    codes = torch.tensor([[0, 1, 1], [1, 0, 1], [1, 1, 1]])
    value, _ = density.value_and_grad(codes)
    one_by_one = torch.cat([density.log_joint(codes[i : i + 1]) for i in range(3)])
    assert torch.allclose(value, one_by_one)
    assert _run(density).codes.shape == (3, 3)
    assert _run(density, num_chains=1).codes.shape == (1, 3)  # a batch of one state


def test_a_categorical_layout_is_probed_too():
    layout = categorical_layout(2, 3)
    weights = torch.tensor([0.5, -1.0, 2.0, 0.0, 1.0, -0.5])
    assert _run(PotentialDensity(lambda x: x @ weights, layout)).codes.shape == (3, 2)
    with pytest.raises(ValueError, match="mixes the states"):
        _run(PotentialDensity(lambda x: x[0] @ weights + 0.0 * x[:, 0], layout))


def test_an_ordinal_layout_accepts_its_values_and_refuses_others():
    layout = CoordinateLayout(
        torch.tensor([True, True]),
        torch.tensor([0.0, -2.0]),
        torch.tensor([4.0, float("inf")]),
        torch.ones(2, dtype=torch.long),
    )
    density = PotentialDensity(lambda x: -((x - 1.0) ** 2).sum(-1), layout)
    algorithm = pyro_gwg.Gibbs().build(density)
    algorithm.init(torch.tensor([[4, -2], [0, 100]]))
    with pytest.raises(ValueError, match="coordinate 0 \\(an integer in 0 .. 4, got \\[5\\]\\)"):
        algorithm.init(torch.tensor([[5, 0]]))
    with pytest.raises(ValueError, match="coordinate 1 \\(an integer >= -2, got \\[-3\\]\\)"):
        algorithm.init(torch.tensor([[0, -3]]))


def test_a_density_on_the_base_has_every_member_of_the_protocol_and_runs_eagerly():
    # the chain driver calls these members directly: no density is probed for them
    density = PotentialDensity(_ising, binary_layout(3))
    assert isinstance(density, Density)
    assert density.compilable == () and density.arguments() == ()
    assert density.traceable(4) is density
    with density.recording() as evaluations:
        density.log_joint(torch.zeros(2, 3, dtype=torch.long))
    assert evaluations == []
