"""The must-accept corpus: ordinary Pyro models that the kernels must sample, not refuse.

Issue 26 ("guard the class, not the cases"): checks that refuse what cannot be sampled
exactly must not refuse what can. Each entry of :data:`CORPUS` is a small model, written
the way Pyro's and NumPyro's examples and tutorials write discrete models, whose
posterior is enumerable exactly (at most a few thousand joint states with every
enumeration mark lifted). ``tests/test_corpus.py`` runs every kernel that applies on
each of them (structure in the deterministic tier, chains against the exact posterior in
the statistical tier).

Four sources:

* ``port:<name>``: the ports of :mod:`real_models` as the kernels receive them
  (:data:`real_models.CASES`: continuous parameters fixed, enumeration marks lifted);
* ``marked:<name>``: the same ports *with* their enumeration marks, as the examples
  write them. With the continuous parameters fixed, a port whose every discrete site is
  marked would leave the kernels nothing to sample (a legitimate refusal: "no latent
  discrete sites"), so each marked variant lifts the marks of some sites (named in its
  comment) and keeps the others: the kernels sample the first and the energy sums the
  others out, above and below the sampled ones. ``gmm`` and ``dawid_skene`` have a single
  discrete site, so they have no marked variant;
* ``small:<name>``: the shared suite of :mod:`small_models` and its enumeration-bridge
  models (``SUITE`` and ``BRIDGE``);
* the rest: models written here, one per feature a user meets in the first hour
  (``Binomial``/``Categorical``/``OneHotCategorical``/``Poisson``/``Geometric`` sites
  whose parameters depend on other latents, enumerated sites above and below sampled
  ones, ``pyro.param``, ``pyro.deterministic``, masks, scales, ``pyro.factor``, nested
  plates, ``to_event``, ``pyro.markov``), after Pyro's discrete-latent tutorials where
  one exists (the tutorial is named in the docstring; the bodies are written in its
  style, at toy sizes, not copied).

Every model must give the same exact posterior with its enumeration marks lifted
(:func:`pyro_gwg.enumeration.lift_enumeration`) and the lifted sites summed out by brute
force: that is how the tests check the enumeration bridge without trusting it.
"""

from __future__ import annotations

from typing import Callable, Dict, NamedTuple, Optional, Tuple

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer import config_enumerate
from pyro.ops.indexing import Vindex
from real_models import (
    CAPTURE_HISTORY,
    CASES,
    CJS_1_PARAMS,
    CJS_2_PARAMS,
    HMM_PARAMS,
    MACE_DATA,
    MACE_PARAMS,
    _hmm_args,
    asia,
    cjs_model_1,
    cjs_model_2,
    hmm_model_0,
    hmm_model_1,
    hmm_model_2,
    hmm_model_3,
    hmm_model_4,
    mace,
)
from small_models import BOUNDS, BRIDGE, SUITE

__all__ = ["CORPUS", "Ordinary"]


class Ordinary(NamedTuple):
    """One model of the corpus.

    :ivar model: the model as a user gives it to a kernel.
    :ivar args: its arguments.
    :ivar bounds: ``{site: (low, high)}`` windows of the sites with an unbounded support
        (``Poisson``, ``Geometric``), chosen so that the posterior mass beyond them is
        negligible (the tests check it).
    :ivar options: kernel arguments a user of this model passes (``jit_compile=True``).
    """

    model: Callable
    args: Tuple
    bounds: Optional[Dict[str, Tuple[int, int]]] = None
    options: Dict[str, object] = {}


def sample_sites(model: Callable, sampled: Callable[[str], bool]) -> Callable:
    """``model`` with the enumeration marks of the sites named by ``sampled`` lifted (the
    kernels sample them) and every other mark kept (the energy sums those sites out).

    :param callable model: a Pyro model with enumeration marks.
    :param callable sampled: ``name -> bool``, the sites to sample.
    :rtype: callable
    """

    def lift(msg):
        marked = msg["infer"].get("enumerate") is not None
        return {"enumerate": None} if marked and sampled(msg["name"]) else {}

    return poutine.infer_config(model, config_fn=lift)


def _step(name: str) -> int:
    """The time step of a site named ``<prefix>_<t>`` (``x_3``, ``x_1_3``)."""
    return int(name.rsplit("_", 1)[1])


def _even_steps(prefix: str) -> Callable[[str], bool]:
    return lambda name: name.startswith(prefix) and _step(name) % 2 == 0


ENUM = {"enumerate": "parallel"}


# =====================================================================================
# The two false refusals of issue 26, as the issue writes them
# =====================================================================================


def binomial_fixed_support(y):
    """``m ~ Binomial(4, sigmoid(n - 3))`` with ``n`` latent: the support of ``m`` is
    0..4 whatever ``n`` is (``total_count`` is only broadcast against a probability
    computed from ``n``). 7 x 5 states."""
    n = pyro.sample("n", dist.Binomial(6, 0.5))
    m = pyro.sample("m", dist.Binomial(4, torch.sigmoid(n - 3.0)))
    pyro.sample("y", dist.Normal(m + 0.5 * n, 1.0), obs=y)


def binomial_fixed_support_poisson(y):
    """:func:`binomial_fixed_support` with an unbounded ``n ~ Poisson(2)``."""
    n = pyro.sample("n", dist.Poisson(2.0))
    m = pyro.sample("m", dist.Binomial(4, torch.sigmoid(n - 3.0)))
    pyro.sample("y", dist.Normal(m + 0.5 * n, 1.0), obs=y)


def enumerated_above_sampled(y):
    """Issue 26 verbatim: an enumerated switch ``z`` feeds the sampled bits ``x``."""
    z = pyro.sample("z", dist.Bernoulli(0.3), infer={"enumerate": "parallel"})
    with pyro.plate("p", 3):
        x = pyro.sample("x", dist.Bernoulli(0.2 + 0.6 * z))
    pyro.sample("y", dist.Normal(x.sum(-1) + 2.0 * z, 1.0), obs=y)


def enumerated_below_sampled(y):
    """Sampled bits ``x``; an enumerated indicator ``c`` whose probability they set."""
    with pyro.plate("p", 3):
        x = pyro.sample("x", dist.Bernoulli(0.4))
    total = x.sum(-1, keepdim=True)  # (keeps the plate dimension: broadcasts over chains)
    c = pyro.sample("c", dist.Bernoulli(torch.sigmoid(total - 1.5)), infer=ENUM)
    pyro.sample("y", dist.Normal(2.0 * c + 0.5 * total, 1.0), obs=y)


def enumerated_in_plate_above_sampled(y):
    """A per-row regime ``r`` (enumerated, in the rows plate) above a 2 x 3 grid of
    sampled bits in nested plates."""
    with pyro.plate("rows", 2, dim=-2):
        r = pyro.sample("r", dist.Bernoulli(0.5), infer=ENUM)
        with pyro.plate("cols", 3, dim=-1):
            x = pyro.sample("x", dist.Bernoulli(0.25 + 0.5 * r))
            pyro.sample("y", dist.Normal(x + r, 1.0), obs=y)


# =====================================================================================
# Distributions whose parameters depend on other latent sites (fixed supports)
# =====================================================================================


def categorical_latent_probs(y):
    """``c ~ Categorical(table[b])`` in a plate, ``b`` a latent bit (2 x 3^2 states)."""
    table = torch.tensor([[0.6, 0.3, 0.1], [0.1, 0.3, 0.6]])
    b = pyro.sample("b", dist.Bernoulli(0.5))
    with pyro.plate("items", 2):
        c = pyro.sample("c", dist.Categorical(table[b.long()].unsqueeze(-2)))
        pyro.sample("y", dist.Normal(c.float(), 0.7), obs=y)


def binomial_in_plate(y):
    """Three ``Binomial(3, p[c])`` counts in a plate, their probability chosen by a
    latent class ``c`` (3 x 4^3 states)."""
    probs = torch.tensor([0.2, 0.5, 0.8])
    c = pyro.sample("c", dist.Categorical(torch.ones(3) / 3))
    with pyro.plate("items", 3):
        k = pyro.sample("k", dist.Binomial(3, probs[c].unsqueeze(-1)))
        pyro.sample("y", dist.Normal(k, 0.8), obs=y)


def poisson_latent_rate(y):
    """``k ~ Poisson(0.5 + 0.5 n)`` with ``n ~ Poisson(1.5)``; ``y ~ Poisson(1 + k)``."""
    n = pyro.sample("n", dist.Poisson(1.5))
    k = pyro.sample("k", dist.Poisson(0.5 + 0.5 * n))
    pyro.sample("y", dist.Poisson(1.0 + k), obs=y)


def geometric_latent_probs(y):
    """``g ~ Geometric(0.3 + 0.4 b)`` with ``b`` a latent bit; ``y ~ Poisson(g + 0.5)``."""
    b = pyro.sample("b", dist.Bernoulli(0.4))
    g = pyro.sample("g", dist.Geometric(0.3 + 0.4 * b))
    pyro.sample("y", dist.Poisson(g + 0.5), obs=y)


def one_hot_regimes(y):
    """A one-hot regime ``z`` (sampled) over four levels and an enumerated outlier
    indicator ``o`` per observation, below it."""
    levels = torch.tensor([-1.0, 0.0, 1.0, 2.0])
    z = pyro.sample("z", dist.OneHotCategorical(logits=torch.tensor([0.2, 0.0, -0.3, 0.1])))
    with pyro.plate("data", 3):
        o = pyro.sample("o", dist.Bernoulli(0.2), infer=ENUM)
        scale = 0.6 + 2.0 * o
        pyro.sample("y", dist.Normal(z @ levels, scale), obs=y)


# =====================================================================================
# Pyro features: pyro.param, pyro.deterministic, masks, scales, factors, to_event
# =====================================================================================


def with_param(y):
    """A probability and a coupling learned with ``pyro.param`` (constants for the
    kernels; named apart from the parameters of :func:`tutorial_plates`, as the
    parameter store is global)."""
    prob = pyro.param("prob", torch.tensor(0.3), constraint=dist.constraints.unit_interval)
    coupling = pyro.param("coupling", torch.tensor(0.4))
    with pyro.plate("bits", 3):
        x = pyro.sample("x", dist.Bernoulli(prob))
    pyro.factor("pairs", coupling * (x[..., :-1] * x[..., 1:]).sum(-1))
    pyro.sample("y", dist.Normal(x.sum(-1), 1.0), obs=y)


def with_deterministic(y):
    """The number of ones recorded with ``pyro.deterministic``."""
    with pyro.plate("bits", 4):
        x = pyro.sample("x", dist.Bernoulli(torch.tensor([0.3, 0.5, 0.6, 0.4])))
    total = pyro.deterministic("total", x.sum(-1))
    pyro.sample("y", dist.Normal(total, 0.8), obs=y)


def with_poutine_mask(y, observed):
    """Missing observations left out with ``poutine.mask``."""
    with pyro.plate("items", 4):
        x = pyro.sample("x", dist.Bernoulli(0.5))
        with poutine.mask(mask=observed):
            pyro.sample("y", dist.Normal(2.0 * x - 1.0, 0.9), obs=y)


def with_distribution_mask(y, observed):
    """The same with ``Distribution.mask``, and a latent prior masked at one item (flat
    there)."""
    prior_mask = torch.tensor([True, True, False, True])
    with pyro.plate("items", 4):
        x = pyro.sample("x", dist.Bernoulli(0.2).mask(prior_mask))
        pyro.sample("y", dist.Normal(2.0 * x - 1.0, 0.9).mask(observed), obs=y)


def with_scale(y):
    """A tempered likelihood (``poutine.scale``) and a prior term scaled by 2."""
    with pyro.plate("items", 3):
        with poutine.scale(scale=2.0):
            x = pyro.sample("x", dist.Bernoulli(0.35))
        with poutine.scale(scale=0.5):
            pyro.sample("y", dist.Normal(x, 0.5), obs=y)


def potts_chain(y):
    """Four 3-colour ``Categorical`` sites coupled by ``pyro.factor`` (a Potts chain)."""
    with pyro.plate("nodes", 4):
        c = pyro.sample("c", dist.Categorical(logits=torch.tensor([0.2, 0.0, -0.2])))
    same = (c[..., :-1] == c[..., 1:]).float()
    pyro.factor("bonds", 0.8 * same.sum(-1))
    pyro.sample("y", dist.Normal(c.float().mean(-1), 0.5), obs=y)


def to_event_grid(y):
    """A 2 x 3 grid of bits as one site with ``.to_event(2)``."""
    x = pyro.sample("x", dist.Bernoulli(0.4).expand([2, 3]).to_event(2))
    pyro.sample("y", dist.Normal(x.sum((-2, -1)), 1.0), obs=y)


def markov_ising_chain(y):
    """Five bits in a ``pyro.markov`` loop, each depending on the previous one."""
    x = torch.tensor(0.0)
    for t in pyro.markov(range(5)):
        x = pyro.sample("x_{}".format(t), dist.Bernoulli(0.25 + 0.5 * x))
        pyro.sample("y_{}".format(t), dist.Normal(x, 0.8), obs=y[t])


# =====================================================================================
# After Pyro's discrete-latent tutorials
# =====================================================================================

HMM_TRANSITION = torch.tensor([[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]])
HMM_EMISSION = torch.tensor([[0.7, 0.2, 0.1], [0.2, 0.6, 0.2], [0.1, 0.2, 0.7]])
HMM_DATA = torch.tensor([0, 0, 1, 2, 2])


def tutorial_hmm(data, transition, emission):
    """The HMM of Pyro's enumeration tutorial (tutorial/source/enumeration.ipynb, "HMM"
    section): one ``Categorical`` per step in a ``pyro.markov`` loop, ``x = 0`` before
    the first step, each ``x_t`` marked for parallel enumeration. The tutorial samples
    ``transition``/``emission`` from Dirichlet priors; here they are arguments."""
    x = 0  # initial state
    for t, y in pyro.markov(enumerate(data)):
        x = pyro.sample(
            "x_{}".format(t), dist.Categorical(transition[x]), infer={"enumerate": "parallel"}
        )
        pyro.sample("y_{}".format(t), dist.Categorical(emission[x]), obs=y)


def tutorial_plates(e):
    """The "plates" example of Pyro's enumeration tutorial (tutorial/source/
    enumeration.ipynb): ``a ~ Categorical(6)``, ``b ~ Bernoulli(p[a])``, ``c`` in
    ``c_plate``, ``d`` in a nested ``d_plate``, an observed ``e`` whose location
    ``locs[d]`` depends on ``d``, ``@config_enumerate`` on the whole model; at toy plate
    sizes (2 x 2 instead of 4 x 5, 3 instead of 7 dimensions of ``e``) and with ``e``
    observed, its location shifted by ``c``. ``a`` and ``b`` stay
    enumerated (above nothing observed), ``c`` and ``d`` are sampled (see CORPUS)."""
    p = pyro.param("p", torch.arange(6.0) / 6)
    locs = pyro.param("locs", torch.tensor([-1.0, 1.0]))
    a = pyro.sample("a", dist.Categorical(torch.ones(6) / 6))
    pyro.sample("b", dist.Bernoulli(p[a]))  # Note this depends on a.
    with pyro.plate("c_plate", 2):
        c = pyro.sample("c", dist.Bernoulli(0.3))
        with pyro.plate("d_plate", 2):
            d = pyro.sample("d", dist.Bernoulli(0.4))
            e_loc = locs[d.long()].unsqueeze(-1)
            e_scale = torch.arange(1.0, 4.0)
            pyro.sample("e", dist.Normal(e_loc + c.unsqueeze(-1), e_scale).to_event(1), obs=e)


GRID = torch.tensor([-1.0, 1.0, 3.0, 5.0])


def gmm_enumerated_assignment(data):
    """The Gaussian mixture of Pyro's GMM tutorial (tutorial/source/gmm.ipynb) with the
    component locations on a grid (``Categorical`` indices into :data:`GRID`, sampled by
    the kernels) instead of ``Normal``, weights and scale fixed; the assignments are
    summed out by enumeration, as in the tutorial (``@config_enumerate`` there, the mark
    on the site here)."""
    weights = torch.tensor([0.4, 0.6])
    with pyro.plate("components", 2):
        loc_index = pyro.sample("loc_index", dist.Categorical(torch.ones(4) / 4))
    locs = GRID[loc_index]
    with pyro.plate("data", len(data)):
        assignment = pyro.sample("assignment", dist.Categorical(weights), infer=ENUM)
        pyro.sample("obs", dist.Normal(Vindex(locs)[..., assignment], 1.0), obs=data)


VINDEX_PROBS = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]])


@config_enumerate
def traceenum_vindex(data):
    """A model written for ``TraceEnum_ELBO`` as Pyro's tensor-shapes tutorial
    (tutorial/source/tensor_shapes.ipynb) recommends: ``@config_enumerate``, ``Vindex``
    for indexing with enumerated values. The item classes ``x`` are sampled (their
    mark lifted by :func:`sample_sites` in :data:`CORPUS`); the global class ``c`` above
    them is summed out."""
    c = pyro.sample("c", dist.Categorical(torch.ones(3) / 3))
    with pyro.plate("items", len(data)):
        x = pyro.sample("x", dist.Categorical(Vindex(VINDEX_PROBS)[..., c, :]))
        pyro.sample("y", dist.Normal(x.float() + 0.3 * c, 0.8), obs=data)


# =====================================================================================
# The corpus
# =====================================================================================


def _conditioned(model, params):
    return poutine.condition(model, data=params)


def _marked(name, model, params, sampled, args):
    return "marked:" + name, Ordinary(sample_sites(_conditioned(model, params), sampled), args)


_OBSERVED = torch.tensor([True, False, True, True])
_Y4 = torch.tensor([0.9, 5.0, -1.1, 1.2])  # the second is missing (masked)

CORPUS: Dict[str, Ordinary] = {
    **{
        "port:" + name: Ordinary(case.model, case.args, case.bounds) for name, case in CASES.items()
    },
    **dict(
        [
            # sequence 0 and 1 of a sequential plate; x_i_t sampled at even t
            _marked(
                "hmm_model_0",
                hmm_model_0,
                HMM_PARAMS["model_0"],
                _even_steps("x_"),
                _hmm_args(3, 2, [4, 3]),
            ),
            # x_0, x_2 sampled; x_1, x_3 summed out between them
            _marked(
                "hmm_model_1",
                hmm_model_1,
                HMM_PARAMS["model_1"],
                _even_steps("x_"),
                _hmm_args(3, 2, [4, 3]),
            ),
            # x_1, x_3 sampled; x_0, x_2, x_4 summed out
            _marked(
                "hmm_model_2",
                hmm_model_2,
                HMM_PARAMS["model_2"],
                lambda name: name.startswith("x_") and _step(name) % 2 == 1,
                _hmm_args(2, 2, [5, 4]),
            ),
            # the w chain sampled, the x chain summed out
            _marked(
                "hmm_model_3",
                hmm_model_3,
                HMM_PARAMS["model_3"],
                lambda name: name.startswith("w_"),
                _hmm_args(4, 1, [5]),
            ),
            # x sampled, the w chain above it summed out
            _marked(
                "hmm_model_4",
                hmm_model_4,
                HMM_PARAMS["model_4"],
                lambda name: name.startswith("x_"),
                _hmm_args(4, 1, [5]),
            ),
            # z_1, z_3 sampled; z_0, z_2 summed out
            _marked(
                "cjs_model_1",
                cjs_model_1,
                CJS_1_PARAMS,
                lambda name: name in ("z_1", "z_3"),
                (CAPTURE_HISTORY, None),
            ),
            # z_2 sampled
            _marked(
                "cjs_model_2",
                cjs_model_2,
                CJS_2_PARAMS,
                lambda name: name == "z_2",
                (CAPTURE_HISTORY, None),
            ),
        ]
    ),
    # NumPyro enumerates MACE's discrete sites itself: the spam indicators s summed out
    # (marked here), the item classes c above them sampled
    "marked:mace": Ordinary(
        poutine.infer_config(
            _conditioned(mace, MACE_PARAMS),
            config_fn=lambda msg: ENUM if msg["name"] == "s" else {},
        ),
        MACE_DATA,
    ),
    # the roots asia and smoke summed out, their children sampled
    "marked:asia": Ordinary(
        poutine.infer_config(
            asia, config_fn=lambda msg: ENUM if msg["name"] in ("asia", "smoke") else {}
        ),
        (torch.tensor(1.0), torch.tensor(1.0)),
    ),
    **{
        "small:" + name: Ordinary(model, args, BOUNDS.get(name))
        for name, (model, args) in {**SUITE, **BRIDGE}.items()
    },
    "binomial_fixed_support": Ordinary(binomial_fixed_support, (torch.tensor(3.0),)),
    "binomial_fixed_support_poisson": Ordinary(
        binomial_fixed_support_poisson, (torch.tensor(3.0),), {"n": (0, 25)}
    ),
    "enumerated_above_sampled": Ordinary(enumerated_above_sampled, (torch.tensor(2.5),)),
    "enumerated_below_sampled": Ordinary(enumerated_below_sampled, (torch.tensor(2.5),)),
    "enumerated_in_plate_above_sampled": Ordinary(
        enumerated_in_plate_above_sampled, (torch.tensor([[1.2, 0.3, 0.8], [-0.2, 0.1, 0.4]]),)
    ),
    "categorical_latent_probs": Ordinary(categorical_latent_probs, (torch.tensor([1.8, 1.2]),)),
    "binomial_in_plate": Ordinary(binomial_in_plate, (torch.tensor([2.0, 1.0, 3.0]),)),
    "poisson_latent_rate": Ordinary(
        poisson_latent_rate, (torch.tensor(3.0),), {"n": (0, 25), "k": (0, 25)}
    ),
    "geometric_latent_probs": Ordinary(
        geometric_latent_probs, (torch.tensor(2.0),), {"g": (0, 30)}
    ),
    "one_hot_regimes": Ordinary(one_hot_regimes, (torch.tensor([0.8, 1.3, 4.0]),)),
    "with_param": Ordinary(with_param, (torch.tensor(2.0),)),
    "with_param_jit": Ordinary(with_param, (torch.tensor(2.0),), options={"jit_compile": True}),
    "with_deterministic": Ordinary(with_deterministic, (torch.tensor(2.6),)),
    "with_poutine_mask": Ordinary(with_poutine_mask, (_Y4, _OBSERVED)),
    "with_distribution_mask": Ordinary(with_distribution_mask, (_Y4, _OBSERVED)),
    "with_scale": Ordinary(with_scale, (torch.tensor([0.9, 0.1, 0.6]),)),
    "potts_chain": Ordinary(potts_chain, (torch.tensor(1.1),)),
    "to_event_grid": Ordinary(to_event_grid, (torch.tensor(3.4),)),
    "markov_ising_chain": Ordinary(markov_ising_chain, (torch.tensor([1.1, 0.8, -0.2, 0.1, 0.9]),)),
    # every x_t sampled (the "regime HMM written the usual way" of issue 26, section 3)
    "tutorial_hmm": Ordinary(
        sample_sites(tutorial_hmm, lambda name: True), (HMM_DATA, HMM_TRANSITION, HMM_EMISSION)
    ),
    # x_t sampled at even t, summed out at odd t
    "tutorial_hmm_marked": Ordinary(
        sample_sites(tutorial_hmm, _even_steps("x_")), (HMM_DATA, HMM_TRANSITION, HMM_EMISSION)
    ),
    "tutorial_plates": Ordinary(
        sample_sites(config_enumerate(tutorial_plates), lambda name: name in ("c", "d")),
        (
            torch.tensor(
                [[[0.5, -1.0, 2.0], [1.5, 0.2, -0.5]], [[-0.8, 0.3, 1.0], [0.1, 2.2, 0.4]]]
            ),
        ),
    ),
    "gmm_enumerated_assignment": Ordinary(
        gmm_enumerated_assignment, (torch.tensor([0.0, 1.0, 4.5, 5.2, 3.8]),)
    ),
    "traceenum_vindex": Ordinary(
        sample_sites(traceenum_vindex, lambda name: name == "x"), (torch.tensor([0.2, 1.4, 1.9]),)
    ),
}
