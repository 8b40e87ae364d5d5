"""The plan of ``Auto`` (pyro_gwg/auto/plan.py): which sites are summed out, which are
sampled by which kernel, and the overrides. Both directions are tested: models whose
enumeration would be wrong must not be summed out (or, marked by the user, must be
refused), and models Pyro enumerates exactly must be summed out."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from real_models import CASES

from pyro_gwg.auto import plan as auto_plan
from pyro_gwg.auto.plan import make_plan
from pyro_gwg.kernels import REGISTRY
from pyro_gwg.sites import UnsupportedModelError


def plan_of(model, *args, **options):
    return make_plan(model, args, kernels=REGISTRY, **options)


def moves(plan):
    return {site.name: site.move for site in plan.sites}


def coupled_in_plate():
    z = pyro.sample("z", dist.Bernoulli(0.3))
    with pyro.plate("p", 3):
        x = pyro.sample("x", dist.Bernoulli(0.5))
        pyro.factor("f", 1.5 * x * x.sum(-1, keepdim=True) * (2 * z - 1))


def neighbours_in_plate():
    with pyro.plate("p", 6):
        x = pyro.sample("x", dist.Bernoulli(0.5))
        # element i reads element i + 1 (a chain written with a roll)
        pyro.factor("f", 0.8 * x * torch.roll(x, 1, -1))


def read_outside_plate():
    with pyro.plate("p", 10):
        x = pyro.sample("x", dist.Bernoulli(0.5))
    pyro.factor("f", (x[..., 1:] * x[..., :-1]).sum(-1))


Y = torch.tensor([0.0, 1.0, 3.0])


def mixture():
    with pyro.plate("data", 3):
        z = pyro.sample("z", dist.Bernoulli(0.4))
        pyro.sample("y", dist.Normal(2.0 * z, 1.0), obs=Y)


def test_a_plate_whose_elements_read_each_other_is_sampled():
    for model in (coupled_in_plate, neighbours_in_plate):
        site = next(s for s in plan_of(model).sites if s.name == "x")
        assert site.move != "enumerate" and "couples the plate's elements" in site.reason


def test_a_plated_site_read_outside_its_plate_is_sampled():
    (site,) = plan_of(read_outside_plate).sites
    assert site.move == "GWG" and "outside its plate 'p'" in site.reason


def test_a_batch_dimension_without_plate_or_an_event_is_sampled():
    def unplated():
        x = pyro.sample("x", dist.Bernoulli(0.5 * torch.ones(3)))
        pyro.factor("f", x.sum())

    def to_event():
        x = pyro.sample("x", dist.Bernoulli(0.5 * torch.ones(3)).to_event(1))
        pyro.factor("f", x.sum())

    (site,) = plan_of(unplated).sites
    assert site.move == "Gibbs" and "is not a pyro.plate" in site.reason
    (site,) = plan_of(to_event).sites
    assert site.move == "Gibbs" and "Independent has no enumerable support" in site.reason
    assert site.size == 3


def test_independent_plates_and_markov_chains_are_summed_out():
    assert moves(plan_of(mixture)) == {"z": "enumerate"}
    for name in ("hmm_model_1", "hmm_model_3", "cjs_model_1", "dawid_skene", "mace", "asia"):
        case = CASES[name]
        plan = plan_of(case.model, *case.args)
        assert set(moves(plan).values()) == {"enumerate"}, name
        assert 0 < plan.enumerated_elements <= plan.budget


def test_a_model_pyro_cannot_enumerate_is_sampled():
    case = CASES["disaster"]  # the observations are a batch dimension without a plate
    (site,) = plan_of(case.model, *case.args).sites
    assert site.move == "Gibbs" and "Pyro's enumeration fails" in site.reason


def test_the_budget_bounds_what_is_summed_out():
    (site,) = plan_of(mixture, budget=4).sites  # its tensor has 6 elements
    assert site.move == "Gibbs" and "exceeds the budget" in site.reason


def test_kernels_by_kind():
    def index_and_bits():
        with pyro.plate("p", 5):
            x = pyro.sample("x", dist.Bernoulli(0.5))
        k = pyro.sample("k", dist.Poisson(2.0))  # no enumerable support: sampled
        pyro.factor("f", (x[..., 1:] * x[..., :-1]).sum(-1) * k)

    def few_bits():
        with pyro.plate("p", 2):
            x = pyro.sample("x", dist.Bernoulli(0.5))
        pyro.factor("f", x[..., 0] * x[..., 1])

    assert moves(plan_of(index_and_bits)) == {"x": "GWG", "k": "Gibbs"}  # (a sweep)
    assert moves(plan_of(few_bits)) == {"x": "Gibbs"}
    assert moves(plan_of(read_outside_plate, sites={"x": "NCG"})) == {"x": "NCG"}
    assert moves(plan_of(index_and_bits, sites={"x": "Gibbs"})) == {"x": "Gibbs", "k": "Gibbs"}


def test_overrides_are_checked():
    with pytest.raises(ValueError, match="names no latent site"):
        plan_of(mixture, sites={"w": "Gibbs"})
    with pytest.raises(ValueError, match="is not one of"):
        plan_of(mixture, sites={"z": "Metropolis"})
    with pytest.raises(ValueError, match="'NUTS' is for continuous sites"):
        plan_of(mixture, sites={"z": "NUTS"})

    def continuous():
        pyro.sample("loc", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match="continuous sites take 'NUTS'"):
        plan_of(continuous, sites={"loc": "Gibbs"})
    assert moves(plan_of(mixture, sites={"z": "Gibbs"})) == {"z": "Gibbs"}


def test_enumeration_that_would_be_wrong_is_refused_when_asked_for():
    with pytest.raises(UnsupportedModelError, match="Site 'x' is set to 'enumerate'.*couples"):
        plan_of(coupled_in_plate, sites={"x": "enumerate"})

    def marked():
        with pyro.plate("p", 10):
            x = pyro.sample("x", dist.Bernoulli(0.5), infer={"enumerate": "parallel"})
        pyro.factor("f", (x[..., 1:] * x[..., :-1]).sum(-1))

    with pytest.raises(UnsupportedModelError, match="marked infer=.*outside its plate"):
        plan_of(marked)
    # a mark on a site Pyro enumerates exactly is kept
    site = plan_of(CASES["gmm"].model, *CASES["gmm"].args, sites={"assignment": "enumerate"})
    assert moves(site) == {"assignment": "enumerate"}


def test_the_plan_prints_as_a_table():
    text = str(plan_of(coupled_in_plate))
    assert text.splitlines()[0].split() == ["site", "kind", "size", "move", "why"]
    assert "enumeration: largest tensor 6 elements" in text


def test_probe_positions_cover_the_ends():
    assert auto_plan._probe_indices(torch.Size([10])) == [0, 3, 6, 9]
    assert auto_plan._probe_indices(torch.Size([2, 3])) == [0, 2, 3, 5]
