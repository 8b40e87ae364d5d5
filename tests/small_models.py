"""The shared suite of small models with exactly enumerable posteriors.

Each entry is ``(model, args)``; every model is an ordinary Pyro model written to
broadcast over batch dimensions on the left (reductions over a plate keep the reduced
dimension), as Pyro's vectorised particles require.
"""

import pyro
import pyro.distributions as dist
import torch

_J = torch.tensor(
    [
        [0.0, 0.8, -0.5, 0.0, 0.3],
        [0.8, 0.0, 0.6, -0.4, 0.0],
        [-0.5, 0.6, 0.0, 0.7, -0.2],
        [0.0, -0.4, 0.7, 0.0, 0.9],
        [0.3, 0.0, -0.2, 0.9, 0.0],
    ]
)
_W = torch.tensor([[1.0, -0.5, 0.8, 0.0, 0.4], [0.2, 0.9, -0.6, 1.1, -0.3]])


def coupled_binary_field(y):
    """Five coupled bits with fields, observed through a noisy linear map."""
    with pyro.plate("bits", 5):
        x = pyro.sample("x", dist.Bernoulli(logits=torch.tensor([1.5, -1.0, 0.5, -2.0, 0.0])))
    s = 2 * x - 1
    pyro.factor("coupling", 0.5 * ((s @ _J) * s).sum(-1, keepdim=True))
    with pyro.plate("data", 2):
        pyro.sample("y", dist.Normal(x @ _W.T, 0.8), obs=y)


def one_hot_mixture(y):
    """Three points, each assigned to one of three Gaussian components (one-hot)."""
    locs = torch.tensor([-1.5, 0.3, 1.8])
    with pyro.plate("points", 3):
        z = pyro.sample("z", dist.OneHotCategorical(logits=torch.tensor([0.4, -0.2, 0.0])))
        pyro.sample("y", dist.Normal(z @ locs, 0.9), obs=y)


def categorical_index_mixture(y):
    """The same mixture with Categorical assignments used as indices."""
    locs = torch.tensor([-1.5, 0.3, 1.8])
    with pyro.plate("points", 3):
        z = pyro.sample("z", dist.Categorical(logits=torch.tensor([0.4, -0.2, 0.0])))
        pyro.sample("y", dist.Normal(locs[z], 0.9), obs=y)


def binomial_ordinal(y):
    """Two Binomial counts and a Poisson count (unbounded, +-1 moves)."""
    with pyro.plate("pair", 2):
        k = pyro.sample("k", dist.Binomial(torch.tensor([4.0, 6.0]), torch.tensor([0.3, 0.6])))
    n = pyro.sample("n", dist.Poisson(1.5))
    pyro.sample("y", dist.Normal(k.sum(-1, keepdim=True) - 0.5 * n, 1.2), obs=y)


def nested_plates(y):
    """A 2 x 3 grid of bits in nested plates with row-wise coupling factors."""
    with pyro.plate("rows", 2, dim=-2), pyro.plate("cols", 3, dim=-1):
        x = pyro.sample("x", dist.Bernoulli(0.4))
        s = 2 * x - 1
        pyro.factor("bond", 0.6 * s * torch.roll(s, 1, -1))
        pyro.sample("y", dist.Normal(x, 1.0), obs=y)


def enumerated_switch(y):
    """Four bits; a regime switch summed out by parallel enumeration."""
    with pyro.plate("bits", 4):
        x = pyro.sample("x", dist.Bernoulli(torch.tensor([0.3, 0.5, 0.6, 0.4])))
    c = pyro.sample(
        "c", dist.Categorical(torch.tensor([0.3, 0.7])), infer={"enumerate": "parallel"}
    )
    shift = torch.tensor([-1.0, 1.5])[c]
    pyro.sample("y", dist.Normal(shift + x.sum(-1, keepdim=True), 0.8), obs=y)


def mixed_kinds(y):
    """One site of every kind in one model (exercises the mixed coordinate layout)."""
    b = pyro.sample("b", dist.Bernoulli(0.3).expand([2]).to_event(1))
    z = pyro.sample("z", dist.OneHotCategorical(logits=torch.tensor([0.0, 0.5, -0.5, 0.2])))
    c = pyro.sample("c", dist.Categorical(logits=torch.tensor([0.1, -0.3, 0.2])))
    k = pyro.sample("k", dist.Binomial(3, 0.5))
    mean = b.sum(-1) + z @ torch.tensor([-1.0, 0.0, 1.0, 2.0]) + 0.5 * c + 0.3 * k
    pyro.sample("y", dist.Normal(mean, 1.0), obs=y)


SUITE = {
    "coupled_binary_field": (coupled_binary_field, (torch.tensor([1.2, -0.4]),)),
    "one_hot_mixture": (one_hot_mixture, (torch.tensor([-1.2, 0.4, 2.1]),)),
    "categorical_index_mixture": (categorical_index_mixture, (torch.tensor([-1.2, 0.4, 2.1]),)),
    "binomial_ordinal": (binomial_ordinal, (torch.tensor(4.0),)),
    "nested_plates": (nested_plates, (torch.tensor([[1.0, 0.2, -0.3], [0.8, 1.1, 0.1]]),)),
    "enumerated_switch": (enumerated_switch, (torch.tensor(3.1),)),
    "mixed_kinds": (mixed_kinds, (torch.tensor(3.5),)),
}

#: models that together hold every site kind (bits, one-hot, categorical index,
#: bounded and unbounded counts): the exactness checks of a kernel's *options* run on
#: these, its default settings on the whole suite
KIND_COVER = ("coupled_binary_field", "one_hot_mixture", "binomial_ordinal", "mixed_kinds")

# windows for unbounded sites, wide enough that the mass outside is negligible
BOUNDS = {"binomial_ordinal": {"n": (0, 30)}}


def _vmap_runs_pyro() -> bool:
    """Whether ``torch.func.vmap`` can run a Pyro model on this torch (not on torch
    2.1, whose vmap refuses the data-dependent control flow inside Pyro)."""
    import torch

    from pyro_gwg import ModelDensity

    def model():
        with pyro.plate("bits", 2):
            x = pyro.sample("x", dist.Bernoulli(0.5))
        pyro.factor("total", x.sum())

    energy = ModelDensity(model)
    probe = energy._probe_states(torch.tensor([[0, 1], [1, 1]]))
    failure = energy._batching_failure("vmap", probe, energy._reference(probe)) or ""
    return "data-dependent control flow" not in failure


#: the energy evaluates non-broadcasting models with vmap (else one state at a time);
#: required of the torch that CI runs
VMAP_RUNS_PYRO = _vmap_runs_pyro()
VMAP_OR_LOOP = "with torch.func.vmap" if VMAP_RUNS_PYRO else "one at a time"


# ---------------------------------------------------------------- the enumeration bridge
def enumerated_above(y):
    """A switch summed out by enumeration above sampled bits: the bits' distribution
    broadcasts over the switch's enumeration dimension, their values do not."""
    z = pyro.sample("z", dist.Bernoulli(0.3), infer={"enumerate": "parallel"})
    with pyro.plate("p", 3):
        x = pyro.sample("x", dist.Bernoulli(0.2 + 0.6 * z))
    pyro.sample("y", dist.Normal(x.sum(-1, keepdim=True) + 2.0 * z, 1.0), obs=y)


def enumerated_above_and_below(y):
    """A switch summed out above sampled bits and a category summed out below them,
    with probabilities computed from the bits' values."""
    z = pyro.sample("z", dist.Bernoulli(0.35), infer={"enumerate": "parallel"})
    with pyro.plate("p", 3):
        x = pyro.sample("x", dist.Bernoulli(torch.tensor([0.15, 0.3, 0.2]) + 0.6 * z))
    count = x.sum(-1, keepdim=True)
    logits = torch.stack([count - 1.0, 1.5 - count, torch.zeros_like(count)], -1)
    w = pyro.sample("w", dist.Categorical(logits=logits), infer={"enumerate": "parallel"})
    mean = count + 2.0 * z + torch.tensor([-1.0, 0.5, 1.5])[w]
    pyro.sample("y", dist.Normal(mean, 1.0), obs=y)


#: models whose enumerated sites feed sampled ones or are fed by them (every kernel runs
#: the second in test_enum.py)
BRIDGE = {
    "enumerated_above": (enumerated_above, (torch.tensor(3.2),)),
    "enumerated_above_and_below": (enumerated_above_and_below, (torch.tensor(2.6),)),
}


def regime_hmm(y, noise_scale=1.0):
    """A regime HMM written the usual way (a ``pyro.markov`` loop, one ``Categorical``
    per step used as an index): the model of the warning tests. It runs one state at a
    time, so it is not in the exactness suite."""
    trans = torch.tensor([[0.9, 0.05, 0.05], [0.05, 0.9, 0.05], [0.05, 0.05, 0.9]])
    locs = torch.tensor([-2.0, 0.0, 2.0])
    z = 0
    for t in pyro.markov(range(len(y))):
        z = pyro.sample("z_{}".format(t), dist.Categorical(trans[z]))
        pyro.sample("y_{}".format(t), dist.Normal(locs[z], noise_scale), obs=y[t])
