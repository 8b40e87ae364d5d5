"""The energy bridge (pyro_gwg/bridge/density.py): log joint and gradients from a model's
trace."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from small_models import SUITE

from pyro_gwg import BatchingWarning, ModelDensity
from pyro_gwg.sites import BINARY, ONE_HOT, ORDINAL

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")


def manual_grad(fn, *values):
    values = [v.detach().clone().requires_grad_(True) for v in values]
    f = fn(*values)
    return f.detach(), torch.autograd.grad(f, values)


def test_binary_model_value_and_grad():
    logits = torch.tensor([0.5, -1.0, 2.0])
    y = torch.tensor(1.3)

    def model(y, scale=0.7):
        with pyro.plate("bits", 3):
            x = pyro.sample("x", dist.Bernoulli(logits=logits))
        pyro.factor("pair", 0.4 * x[..., 0:1] * x[..., 1:2])
        pyro.sample("y", dist.Normal(x.sum(-1, keepdim=True), scale), obs=y)

    def manual(x):
        return (
            dist.Bernoulli(logits=logits).log_prob(x).sum()
            + 0.4 * x[0] * x[1]
            + dist.Normal(x.sum(), 0.5).log_prob(y)
        )

    energy = ModelDensity(model, (y,), {"scale": 0.5})
    assert [(s.name, s.kind) for s in energy.sites] == [("x", BINARY)]
    codes = torch.tensor([[1, 0, 1]])
    f, grad = energy.value_and_grad(codes)
    f_ref, (g_ref,) = manual_grad(manual, codes[0].float())
    assert torch.allclose(f, f_ref.reshape(1).double())
    assert grad.shape == (1, 3, 1)  # all-scalar models pack one derivative per coordinate
    assert torch.allclose(grad[0, :, 0], g_ref)


def test_one_hot_gradient_is_own_logits_plus_the_downstream_gradient():
    logits = torch.tensor([0.2, -0.4, 0.1])
    locs = torch.tensor([-1.0, 0.5, 2.0])

    def model():
        z = pyro.sample("z", dist.OneHotCategorical(logits=logits))
        pyro.sample("y", dist.Normal(z @ locs, 0.5), obs=torch.tensor(0.8))

    energy = ModelDensity(model)
    assert energy.sites[0].kind == ONE_HOT
    f, grad = energy.value_and_grad(torch.tensor([[2]]))
    z = torch.tensor([0.0, 0.0, 1.0])
    _, (g_down,) = manual_grad(lambda z: dist.Normal(z @ locs, 0.5).log_prob(torch.tensor(0.8)), z)
    own = logits - logits.logsumexp(-1)
    assert torch.allclose(grad[0, 0], own + g_down)
    expected_f = own[2] + dist.Normal(2.0, 0.5).log_prob(torch.tensor(0.8))
    assert torch.allclose(f, expected_f.reshape(1).double())


def test_ordinal_gradients():
    def model():
        k = pyro.sample("k", dist.Binomial(5, 0.3))
        n = pyro.sample("n", dist.Poisson(2.0))
        pyro.sample("y", dist.Normal(k - 0.5 * n, 1.0), obs=torch.tensor(1.0))

    def manual(k, n):
        return (
            dist.Binomial(5, 0.3).log_prob(k)
            + dist.Poisson(2.0).log_prob(n)
            + dist.Normal(k - 0.5 * n, 1.0).log_prob(torch.tensor(1.0))
        )

    energy = ModelDensity(model)
    assert [s.kind for s in energy.sites] == [ORDINAL, ORDINAL]
    assert energy.layout.upper.tolist() == [5.0, float("inf")]
    f, grad = energy.value_and_grad(torch.tensor([[2, 3]]))
    f_ref, g_ref = manual_grad(manual, torch.tensor(2.0), torch.tensor(3.0))
    assert torch.allclose(f, f_ref.reshape(1).double())
    assert torch.allclose(grad[0, :, 0], torch.stack(g_ref))


def test_enumerated_site_is_summed_out():
    model, (y,) = SUITE["enumerated_switch"]
    energy = ModelDensity(model, (y,))
    assert energy.enumerated == ["c"] and [s.name for s in energy.sites] == ["x"]
    codes = torch.tensor([[1, 0, 1, 1]])
    x = codes[0].float()
    probs = torch.tensor([0.3, 0.5, 0.6, 0.4])
    terms = torch.stack(
        [
            torch.tensor(w).log() + dist.Normal(shift + x.sum(), 0.8).log_prob(y)
            for w, shift in ((0.3, -1.0), (0.7, 1.5))
        ]
    )
    expected = dist.Bernoulli(probs).log_prob(x).sum() + terms.logsumexp(0)
    assert torch.allclose(energy.log_joint(codes), expected.reshape(1).double())


def test_scale_and_mask_are_honoured():
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.3))
        with poutine.scale(scale=2.5):
            pyro.sample("y", dist.Normal(x, 1.0), obs=torch.tensor(0.4))
        with poutine.mask(mask=False):
            pyro.sample("ignored", dist.Normal(x, 1.0), obs=torch.tensor(100.0))

    energy = ModelDensity(model)
    expected = dist.Bernoulli(0.3).log_prob(torch.tensor(1.0)) + 2.5 * dist.Normal(
        1.0, 1.0
    ).log_prob(torch.tensor(0.4))
    assert torch.allclose(energy.log_joint(torch.tensor([[1]])), expected.reshape(1).double())


def test_log_joint_is_summed_in_double_precision():
    def model(offset):
        pyro.sample("x", dist.Bernoulli(0.3).expand([2]).to_event(1))
        pyro.factor("constant", torch.tensor(offset))

    codes = torch.tensor([[0, 0], [1, 0], [1, 1]])
    small = ModelDensity(model, (0.0,)).log_joint(codes)
    for offset in (1e7, 1e8):
        large = ModelDensity(model, (offset,)).log_joint(codes)
        assert large.dtype == torch.float64
        # differences between states survive a large constant term
        assert torch.allclose(large - large[0], small - small[0], atol=1e-6)


def test_non_finite_gradients_are_zero():
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5).expand([2]).to_event(1))
        pyro.factor("sqrt", x[..., 0].sqrt())  # infinite derivative at 0

    _, grad = ModelDensity(model).value_and_grad(torch.tensor([[0, 1], [1, 1]]))
    assert grad[0, 0, 0] == 0 and grad[1, 0, 0] == 0.5


@pytest.mark.parametrize("value", [-1, 1.5, True, "2"])
def test_bad_max_plate_nesting_is_refused(value):
    def model():
        pyro.sample("x", dist.Bernoulli(0.5))

    with pytest.raises(ValueError, match="max_plate_nesting must be a non-negative integer"):
        ModelDensity(model, max_plate_nesting=value)


def test_too_small_max_plate_nesting_names_the_site():
    def model():
        with pyro.plate("rows", 2, dim=-2), pyro.plate("cols", 2):
            pyro.sample("x", dist.Bernoulli(0.5))

    with pytest.raises(ValueError, match="max_plate_nesting=1 is too small: site 'x' uses 2"):
        ModelDensity(model, max_plate_nesting=1)


def test_differentiable_log_joint_carries_parameter_gradients():
    pyro.clear_param_store()

    def model():
        coupling = pyro.param("coupling", torch.tensor(0.7))
        with pyro.plate("sites", 3):
            x = pyro.sample("x", dist.Bernoulli(0.5))
            pyro.factor("field", coupling * x)

    energy = ModelDensity(model)
    codes = torch.tensor([[1, 1, 1], [1, 0, 1], [0, 1, 1]])
    plain = energy.log_joint(codes)
    assert not plain.requires_grad
    value = energy.log_joint(codes, differentiable=True)
    assert torch.allclose(value, plain)
    (grad,) = torch.autograd.grad(value.sum(), pyro.param("coupling").unconstrained())
    # d/d coupling of the log joints summed over the three states: 3 + 2 + 2 ones
    assert torch.allclose(grad, torch.tensor(7.0))
    batched = energy.log_joint(codes, batched=False, differentiable=True)
    assert batched.requires_grad and torch.allclose(batched, plain)
    pyro.clear_param_store()


# ---------------------------------------------------------------- weighted own terms


LOGITS = torch.tensor([[0.3, -1.2, 0.8], [1.5, 0.0, -0.7], [-0.2, 0.4, 0.1]])

COUPLING = torch.tensor([[0.5, -0.3, 1.1], [-0.8, 0.2, 0.6], [0.9, -1.4, 0.0]])

KEEP = torch.tensor([True, False, True])


def _one_hot_site(kind, wrap):
    def model():
        with pyro.plate("items", 3):
            fn = dist.OneHotCategorical(logits=LOGITS)
            if kind == "categorical":
                fn = dist.Categorical(logits=LOGITS)
            if wrap == "dist.mask":
                fn = fn.mask(KEEP)
            if wrap == "scale":
                with poutine.scale(scale=0.3):
                    z = pyro.sample("z", fn)
            elif wrap == "scale tensor":
                with poutine.scale(scale=torch.tensor([2.0, 0.5, 1.5])):
                    z = pyro.sample("z", fn)
            elif wrap == "poutine.mask":
                with poutine.mask(mask=KEEP):
                    z = pyro.sample("z", fn)
            else:
                z = pyro.sample("z", fn)
        if kind == "one-hot":  # a term linear in the one-hot values
            pyro.factor("linear", (z * COUPLING).sum())

    return model


def _event_site(wrap):
    # three one-hot coordinates as one event of a site with a batch of two
    def model():
        fn = dist.OneHotCategorical(logits=torch.stack([LOGITS, LOGITS.flip(0)])).to_event(1)
        if wrap == "dist.mask":
            fn = fn.mask(torch.tensor([False, True]))
        with poutine.scale(scale=0.7):
            z = pyro.sample("z", fn)
        pyro.factor("linear", (z * COUPLING).sum())

    return model


@pytest.mark.parametrize(
    "model",
    [
        _one_hot_site(kind, wrap)
        for kind in ("one-hot", "categorical")
        for wrap in ("none", "scale", "scale tensor", "poutine.mask", "dist.mask")
    ]
    + [_event_site("none"), _event_site("dist.mask")],
)
def test_first_order_differences_are_exact_for_a_linear_energy(model):
    # a one-hot value enters its own (scaled, masked) log-probability and the factor
    # linearly, so the first-order estimate of every one-coordinate move must equal the
    # change of the log joint: scales and masks of the site's own term included
    energy = ModelDensity(model)
    num_coords = energy.layout.num_coords
    states = torch.randint(0, 3, (4, num_coords), generator=torch.Generator().manual_seed(0))
    log_joint, grad = energy.value_and_grad(states)
    for i in range(num_coords):
        for b in range(3):
            moved = states.clone()
            moved[:, i] = b
            predicted = grad[:, i, b] - grad[:, i].gather(1, states[:, i, None])[:, 0]
            actual = energy.log_joint(moved) - log_joint
            torch.testing.assert_close(predicted.double(), actual, rtol=0, atol=1e-5)


def test_an_energy_given_values_conditions_the_model_on_them():
    # MixedGibbs's discrete half: the energy conditions the model on the continuous
    # values passed to it, not on a dict shared with the caller
    def model():
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        pyro.sample("x", dist.Bernoulli(logits=mu).expand([3]).to_event(1))

    codes = torch.tensor([[1, 0, 1], [1, 1, 1]])
    energy = ModelDensity(model, given={"mu": torch.tensor(0.5)})
    assert energy.given_names == ("mu",)
    for mu in (0.5, -2.0):
        if mu != 0.5:
            energy.set_given({"mu": torch.tensor(mu)})
        conditioned = ModelDensity(poutine.condition(model, data={"mu": torch.tensor(mu)}))
        assert torch.allclose(energy.log_joint(codes), conditioned.log_joint(codes))
        assert torch.allclose(energy.value_and_grad(codes)[1], conditioned.value_and_grad(codes)[1])
    with pytest.raises(ValueError, match="set_given needs a value for each.*\\['mu'\\]"):
        energy.set_given({"nu": torch.tensor(0.0)})


ONE = torch.tensor(1.0)


def _gated_model(y=ONE):
    # a continuous site inside a plate and one with an event dimension, both read by
    # the discrete sites' log-probabilities
    mu = pyro.sample("mu", dist.Normal(torch.zeros(2), 1.0).to_event(1))
    with pyro.plate("units", 3):
        scale = pyro.sample("scale", dist.LogNormal(0.0, 1.0))
        x = pyro.sample("x", dist.Bernoulli(logits=mu[..., 0] * scale))
    pyro.sample("y", dist.Normal((x * scale).sum(-1, keepdim=True) + mu[..., 1], 1.0), obs=y)


#: torch 2.1's vmap stops at the data-dependent checks in Pyro's distributions that this
#: model reaches (torch 2.2 and later run it); the bridge then evaluates state by state
OLD_VMAP = tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 2)


@pytest.mark.parametrize(
    "batching",
    [
        "plate",
        pytest.param("vmap", marks=pytest.mark.skipif(OLD_VMAP, reason="torch 2.1's vmap")),
        "loop",
    ],
)
def test_given_values_per_chain_condition_each_chain_on_its_own(batching):
    # MixedGibbs's chains in pyro_gwg.MCMC: one batched energy, each chain's states
    # evaluated under its own continuous values; a batch of N states reads chain
    # n % C's values (the kernels lay their states out so), or those of `chains`
    torch.manual_seed(0)
    num_chains = 3
    given = {"mu": torch.randn(num_chains, 2), "scale": torch.rand(num_chains, 3) + 0.5}
    energy = ModelDensity(_gated_model, given=given, given_per_chain=True)
    energy.batching = batching
    states = torch.randint(0, 2, (2 * num_chains, 3))

    def one_chain(c):
        return ModelDensity(_gated_model, given={k: v[c] for k, v in given.items()})

    singles = [one_chain(c) for c in range(num_chains)]
    expected = torch.cat(
        [singles[n % num_chains].log_joint(states[n : n + 1]) for n in range(len(states))]
    )
    assert torch.allclose(energy.log_joint(states), expected)
    assert torch.allclose(energy.log_joint(states[:num_chains]), expected[:num_chains])
    f, grad = energy.value_and_grad(states[:num_chains])
    for c in range(num_chains):
        f_c, grad_c = singles[c].value_and_grad(states[c : c + 1])
        assert torch.allclose(f[c : c + 1], f_c) and torch.allclose(grad[c : c + 1], grad_c)
    chains = torch.tensor([2, 2, 0, 1])
    by_chain = torch.cat([singles[c].log_joint(states[i : i + 1]) for i, c in enumerate(chains)])
    assert torch.allclose(energy.log_joint(states[:4], chains=chains), by_chain)
    new = {k: v.flip(0) for k, v in given.items()}
    energy.set_given(new)
    assert torch.allclose(
        energy.log_joint(states[:1]),
        ModelDensity(_gated_model, given={k: v[0] for k, v in new.items()}).log_joint(states[:1]),
    )
    with pytest.raises(ValueError, match="one leading chain dimension of the same size"):
        energy.set_given({"mu": torch.zeros(3, 2), "scale": torch.ones(2, 3)})


def test_the_batching_of_a_density_given_values_per_chain_is_probed_under_each_chains():
    # each probe state is compared, evaluated alone, under the values of the chain that
    # a batch gives it: a model that broadcasts them runs batched, one that does not
    # (here: .expand of a per-chain value) is caught
    torch.manual_seed(1)
    given = {"mu": torch.randn(4, 2), "scale": torch.rand(4, 3) + 0.5}
    energy = ModelDensity(_gated_model, given=given, given_per_chain=True)
    assert energy.choose_batching(torch.randint(0, 2, (4, 3))) == "plate"

    def expanding(y=ONE):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        x = pyro.sample("x", dist.Bernoulli(logits=mu).expand([3]).to_event(1))
        pyro.sample("y", dist.Normal(x.sum(-1), 1.0), obs=y)

    # (chains at equal values, e.g. the same initial values, would hide it: the probes
    # take the prior's values beside chain 0's)
    energy = ModelDensity(expanding, given={"mu": torch.zeros(4)}, given_per_chain=True)
    with pytest.warns(BatchingWarning, match="plate"):
        chosen = energy.choose_batching(torch.randint(0, 2, (4, 3)))
    assert chosen == ("loop" if OLD_VMAP else "vmap")
