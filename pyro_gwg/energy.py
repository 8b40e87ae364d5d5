r"""The energy bridge: the log joint of a Pyro model and its gradient, per chain.

:class:`DiscreteEnergy` traces an ordinary Pyro model once, classifies every latent
discrete site (:mod:`pyro_gwg.sites`), and exposes

.. math:: f(x) = \log p(x, y) \quad\text{and}\quad \nabla f(x),

for a batch of states ``codes`` of shape ``[C, D]`` (see
:mod:`pyro_gwg.proposals.layout`). ``f`` includes every latent site, observed site
and ``pyro.factor``, summed in double precision; scale and mask handlers are
honoured. Sites marked ``infer={"enumerate": "parallel"}`` are summed out exactly, as
Pyro's HMC does.

The gradient is taken with respect to the *relaxed* value the model sees: the float
value of binary and ordinal sites, the one-hot vector of ``OneHotCategorical`` sites.
``Categorical`` values are integers the model may use as indices, so no gradient
flows through them; their gradient is the site's own normalised logits (the exact
change of the site's own log-probability), and the bridge warns once when the model
uses the value beyond that. Non-finite gradient entries are replaced by zero: the
samplers' exactness never depends on the gradient.

**What a model must satisfy, and how it is checked.** Every state of the latent sites
must give a trace with the same latent sites and the same supports. At set-up the
model is run once with every latent value *tainted* (:mod:`pyro_gwg._taint`): a
support computed from another latent value is refused, and Python control flow that
reads a latent value (``if x.item():``) is recorded; such a model runs eagerly, one
state at a time, with the latent sites of every trace compared with the first one, and
the states next to the initial one are probed at set-up. The log density at the initial
state is evaluated twice: a model that draws random numbers outside ``pyro.sample``
is refused. During a run, a ``NaN`` or ``+inf`` log density raises an error naming
the sites and the state.

**Batches of states.** One chain (``C = 1``) runs the model exactly as written.
Several states are evaluated in one of three ways, chosen on the first such evaluation
by comparing each with state-by-state evaluation on probe states: ``"plate"``, one run
of the model inside an outer ``pyro.plate`` at dimension ``-(max_plate_nesting + 1)``
(the fast path, for models written to broadcast); ``"vmap"``, the unbatched model
under :func:`torch.func.vmap`; ``"loop"``, one run per state. The latter two come with
one :class:`BatchingWarning` that says why the model does not broadcast.
"""

from __future__ import annotations

import contextlib
import math
import os
import traceback
from functools import partial
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import pyro
import pyro.poutine as poutine
import torch
import torch.nn.functional as F
from pyro.infer.autoguide.initialization import init_to_sample
from torch.distributions import Categorical

from pyro_gwg import _trace
from pyro_gwg._taint import Read, sources_of, trace_reads, user_location
from pyro_gwg._validation import check_integer, is_integer
from pyro_gwg._warn import name_list, warn
from pyro_gwg.compilation import trace_compile
from pyro_gwg.proposals.layout import CoordinateLayout
from pyro_gwg.sites import (
    CATEGORICAL,
    ONE_HOT,
    DiscreteSite,
    UnsupportedModelError,
    base_constraint,
    build_layout,
    classify_site,
    own_term_weight,
    unwrap_distribution,
)

__all__ = [
    "BATCHING_MODES",
    "BatchingWarning",
    "CHAIN_PLATE",
    "DiscreteEnergy",
    "INIT_CANDIDATES",
    "invalid_evaluations",
]

CHAIN_PLATE = "_pyro_gwg_chains"
#: ways of evaluating several states (see the module docstring), fastest first
BATCHING_MODES = ("plate", "vmap", "loop")
# relative and absolute tolerance when comparing batched with state-by-state values
_RTOL, _ATOL = 1e-4, 1e-4

#: what ``pyro.module`` puts between a module's name and its parameters' names
_MODULE_SEPARATOR = "$$$"
# model runs spent at set-up probing states next to the initial one (value-read models)
_MAX_STRUCTURE_PROBES = 64
# the code of torch's and Pyro's distributions (see _refuse_invalid_distribution)
_DISTRIBUTION_DIRS = tuple(
    os.path.dirname(os.path.abspath(module.__file__)) + os.sep
    for module in (torch.distributions, pyro.distributions)
)
#: states drawn from the init strategy per chain, of which the chain starts at the most
#: probable (see :meth:`DiscreteEnergy.initial_codes`)
INIT_CANDIDATES = 10


class BatchingWarning(UserWarning):
    """The model does not broadcast over a batch dimension: states are evaluated with
    :func:`torch.func.vmap` or one at a time, which is exact but slower."""


class DiscreteEnergy:
    r"""Log joint density and gradient of a Pyro model over its latent discrete sites.

    :param callable model: a Pyro model whose latent sites are discrete.
    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :param int max_plate_nesting: bound on nested plates (and batch dimensions);
        guessed from one trace when ``None``.
    :param bool jit_compile: trace ``value_and_grad`` (forward *and* backward pass)
        with :func:`torch.jit.trace`, once per number of chains; where the tracer
        cannot follow the backward pass, trace the forward pass only and differentiate
        it. Like Pyro's HMC, the model's Python control flow must not depend on latent
        values (a model whose control flow reads them is refused; the compiled
        function is also checked against the eager one at two states).
    :param dict inputs: tensors that the model reads and that change between
        evaluations, in a dictionary that the caller updates in place (for example the
        data of a ``poutine.condition`` around the model: the continuous sites of
        :class:`~pyro_gwg.MixedGibbs`). A compiled transition takes them as arguments
        (see :class:`~pyro_gwg.driver.ChainDriver`) instead of freezing the values of
        the moment it was traced, and the energy is then not compiled on its own.
    :param callable init_strategy: a Pyro per-site initialisation function
        (default :func:`~pyro.infer.autoguide.initialization.init_to_sample`).
    :param int max_init_tries: initial states tried per chain before giving up.

    Example::

        >>> import pyro, torch
        >>> import pyro.distributions as dist
        >>> def model():
        ...     x = pyro.sample("x", dist.Bernoulli(0.5).expand([3]).to_event(1))
        ...     pyro.sample("y", dist.Normal(x.sum(-1, keepdim=True), 1.0), obs=torch.tensor(2.0))
        >>> energy = DiscreteEnergy(model)
        >>> f, grad = energy.value_and_grad(torch.tensor([[1, 0, 1]]))
        >>> f.dtype, f.shape, grad.shape
        (torch.float64, torch.Size([1]), torch.Size([1, 3, 1]))
    """

    def __init__(
        self,
        model,
        model_args: tuple = (),
        model_kwargs: Optional[dict] = None,
        *,
        max_plate_nesting: Optional[int] = None,
        jit_compile: bool = False,
        inputs: Optional[Dict[str, torch.Tensor]] = None,
        init_strategy=init_to_sample,
        max_init_tries: int = 100,
    ) -> None:
        if not callable(model):
            raise TypeError("model must be a callable Pyro model, got {!r}".format(model))
        if max_plate_nesting is not None and not is_integer(max_plate_nesting, 0):
            raise ValueError(
                "max_plate_nesting must be a non-negative integer (or None to guess it), "
                "got {!r}".format(max_plate_nesting)
            )
        max_init_tries = check_integer("max_init_tries", max_init_tries, 1)
        self.model = model
        self.model_args = tuple(model_args)
        self.model_kwargs = dict(model_kwargs or {})
        if inputs is not None and not isinstance(inputs, dict):
            raise TypeError("inputs must be a dict of tensors, got {!r}".format(inputs))
        self.inputs = inputs
        self.jit_compile = jit_compile and inputs is None
        self.init_strategy = init_strategy
        self.max_init_tries = int(max_init_tries)
        self._latent_order: List[str] = []  # (for _refuse_invalid_distribution)
        # the first run validates the distributions' parameters whatever the runner set
        # (pyro.infer.MCMC turns validation off, and torch would then clamp invalid
        # probabilities silently): invalid ones are refused here, naming the site
        with pyro.validation_enabled(True):
            trace = self._prototype_trace()
        self._latent_order = [site["name"] for site in _trace.sample_sites(trace, "latent")]
        self.sites: List[DiscreteSite] = []
        self.enumerated: List[str] = []
        self._discover(trace)
        #: ``pyro.param`` sites the model reads (``pyro.module`` parameters apart): a
        #: compiled function takes their values as arguments (see :meth:`arguments`)
        self.param_names = [
            name
            for name, node in trace.nodes.items()
            if node["type"] == "param" and _MODULE_SEPARATOR not in name
        ]
        self._module_params = [
            name
            for name, node in trace.nodes.items()
            if node["type"] == "param" and _MODULE_SEPARATOR in name
        ]
        # the values a tracer substitutes for the pyro.param sites (empty otherwise)
        self._param_values: Dict[str, torch.Tensor] = {}
        self.max_plate_nesting = _trace.check_max_plate_nesting(trace, max_plate_nesting)
        self.device = trace.nodes[self.sites[0].name]["value"].device
        self.layout = build_layout(self.sites).to(self.device)
        self._slices = [slice(s.offset, s.offset + s.num_coords) for s in self.sites]
        self._names = [s.name for s in self.sites]
        self._value_shapes = {s.name: tuple(s.value_shape) for s in self.sites}
        self._ranks = {  # of the latent sites' distributions, for _latent_signature
            site["name"]: len(site["fn"].batch_shape + site["fn"].event_shape)
            for site in _trace.sample_sites(trace, "latent")
        }
        #: reads of latent values by the model's Python code (see :mod:`pyro_gwg._taint`)
        self.value_reads: List[Read] = []
        self._analyse(trace)
        #: how several states are evaluated: one of :data:`BATCHING_MODES`, chosen on the
        #: first evaluation of several states (``None`` until then)
        self.batching: Optional[str] = None
        self._compiled: Dict[int, object] = {}
        self._checked_categoricals: set = set()  # (warn_gradient_blind_categoricals)
        self._checked_state = False
        self._recording: Optional[List[Tuple[torch.Tensor, torch.Tensor]]] = None

    # ------------------------------------------------------------------ discovery
    def _run_model(self, model, init_strategy=None):
        try:
            return _trace.trace_model(
                model,
                self.model_args,
                self.model_kwargs,
                init_strategy=init_strategy,
                on_error=self._refuse_invalid_distribution,
            )
        except Exception as error:
            if not isinstance(error, UnsupportedModelError) and not _out_of_memory(error):
                _note_model_error(error)
            raise

    def _refuse_invalid_distribution(self, error: BaseException, partial) -> None:
        """Name the site and the state where a distribution could not be built or
        sampled (its validation refused its parameters, or torch could not sample from
        them: negative or NaN probabilities, ...); other errors are left as they are.

        :param error: the model's error.
        :param partial: the trace of the sites recorded before it.
        """
        frames = traceback.extract_tb(error.__traceback__)
        if not (frames and os.path.abspath(frames[-1].filename).startswith(_DISTRIBUTION_DIRS)):
            return
        if not (
            isinstance(error, RuntimeError)
            or isinstance(error, ValueError)
            and str(error).startswith("Expected parameter")
        ):
            return
        recorded = {site["name"]: site for site in _trace.sample_sites(partial)}
        following = [name for name in self._latent_order if name not in recorded]
        where = user_location(frames)
        values = {
            name: site["value"]
            for name, site in recorded.items()
            if not _trace.is_enumerated(site)
            and (name in self._latent_order or not site["is_observed"])
        }
        raise UnsupportedModelError(
            "The distribution of {} is invalid at the state {} ({}: {}). The kernels "
            "visit every state of the latent sites' supports, and a distribution's "
            "parameters must be valid at each: probabilities in [0, 1], finite logits, "
            "positive rates. Compute them so that they are (e.g. torch.sigmoid, "
            "torch.clamp(p, 0.0, 1.0), or logits= instead of probs=), and make the "
            "states the model rules out impossible with a pyro.factor that is -inf "
            "there.".format(
                "latent site '{}' (at {})".format(following[0], where)
                if following
                else "the site sampled at {}".format(where),
                _describe_values(values) if values else "{}",
                type(error).__name__,
                # (the text before the shapes Pyro appends, on one line)
                " ".join(str(error).split("Trace Shapes:")[0].split()),
            )
        ) from error

    def _prototype_trace(self):
        return self._run_model(self.model, self.init_strategy)

    def _discover(self, trace) -> None:
        _trace.check_full_plates(
            trace, "a subsampled log density is random, which breaks Metropolis-Hastings"
        )
        for site in _trace.sample_sites(trace, "latent"):
            name, fn = site["name"], site["fn"]
            enumerate_ = site["infer"].get("enumerate")
            if enumerate_ == "parallel":
                if not fn.has_enumerate_support:
                    raise UnsupportedModelError(
                        "Site '{}' is marked infer={{'enumerate': 'parallel'}} but "
                        "{} has no enumerable support. Remove the mark to let the "
                        "kernel sample it.".format(name, type(fn).__name__)
                    )
                self.enumerated.append(name)
                continue
            if enumerate_ is not None:
                raise UnsupportedModelError(
                    "Site '{}' is marked infer={{'enumerate': '{}'}}; only parallel "
                    "enumeration is supported. Use 'parallel' to sum the site out, or "
                    "remove the mark to let the kernel sample it.".format(name, enumerate_)
                )
            self._check_value_shape(name, fn, site["value"])
            discrete = classify_site(name, fn, site["value"])
            if discrete.num_coords:  # a site of no elements has one value, which the
                self.sites.append(discrete)  # model draws itself: nothing to sample
        if not self.sites:
            raise UnsupportedModelError(
                "The model has no latent discrete sites to sample: every sample site "
                "is observed{}. Nothing is left for a discrete MCMC kernel.".format(
                    " or summed out by enumeration ({})".format(", ".join(self.enumerated))
                    if self.enumerated
                    else ""
                )
            )

    def _check_value_shape(self, name: str, fn, value: torch.Tensor) -> None:
        """The initial value of a latent site (from the init strategy) must broadcast with
        the shape of its distribution."""
        shape = tuple(fn.batch_shape + fn.event_shape)
        try:
            torch.broadcast_shapes(tuple(value.shape), shape)
        except RuntimeError:
            raise ValueError(
                "Initial value of latent site '{}' ({}) has shape {}, but its distribution "
                "has shape {}: the init strategy gave a value of the wrong shape. Give "
                "init_to_value a value of shape {}.".format(
                    name, type(unwrap_distribution(fn)).__name__, tuple(value.shape), shape, shape
                )
            ) from None

    def _analyse(self, trace) -> None:
        """Run the model once with tainted latent values: refuse supports that depend on
        latent values, record reads of latent values by the model's Python code."""
        latent = {site["name"]: site["value"] for site in _trace.sample_sites(trace, "latent")}

        def run(values):
            with pyro.validation_enabled(False):
                tr = self._run_model(poutine.condition(self.model, data=values))
                for node in _trace.sample_sites(tr):
                    self._site_log_prob(node)
            return tr

        tainted_trace, self.value_reads = trace_reads(run, latent)
        #: bounds computed from latent values that the probes found fixed, checked at
        #: every evaluation (see :meth:`_bounds_changed`), and the sites they come from
        self._fixed_bounds: Dict[str, Dict[str, torch.Tensor]] = {}
        self._bound_sources: Dict[str, Dict[str, frozenset]] = {}
        suspects = {}
        for site in self.sites:
            support = base_constraint(tainted_trace.nodes[site.name]["fn"].support)
            tainted = {k: sources_of(v) for k, v in vars(support).items() if sources_of(v)}
            if tainted:
                suspects[site.name] = tainted
        if suspects:
            self._check_fixed_supports(trace, suspects)
        self._signature = self._latent_signature(trace, num_chains=1)

    def _check_fixed_supports(self, trace, suspects: Dict[str, Dict[str, frozenset]]) -> None:
        """Refuse a latent site whose support bounds take other values at other states.

        ``suspects`` are the sites whose bounds the tainted run found computed from
        latent values (``{site: {bound: sources}}``): a bound that depends on them, or a
        fixed one that was only broadcast against a parameter that does (the
        ``total_count`` of ``Binomial(4, torch.sigmoid(n))``). Their values decide: the
        bounds at the initial state are compared with those at up to
        ``_MAX_STRUCTURE_PROBES`` states where one source site takes other values (every
        element at once at a few levels of its support, then one element at a time)."""
        sources = frozenset().union(*(s for bounds in suspects.values() for s in bounds.values()))
        reference = _support_bounds(trace, suspects)
        latent = {site["name"]: site["value"] for site in _trace.sample_sites(trace, "latent")}
        per_source = [self._probe_values(trace.nodes[name]) for name in sorted(sources)]
        probes = [  # every source at its levels first, then its elements one at a time
            {**latent, name: value}
            for part in (0, 1)
            for name, values in zip(sorted(sources), per_source)
            for value in values[part]
        ]
        for values in probes[:_MAX_STRUCTURE_PROBES]:
            try:
                with pyro.validation_enabled(False):
                    found = _support_bounds(
                        self._run_model(poutine.condition(self.model, data=values)), suspects
                    )
            except UnsupportedModelError:
                raise
            except Exception as error:  # a state the model cannot run: no evidence either way
                if _out_of_memory(error):
                    raise
                continue
            self._check_bounds(reference, found, values, suspects)
        self._fixed_bounds, self._bound_sources = reference, suspects

    def _check_bounds(self, reference, found, values, sources) -> None:
        """Raise :meth:`_support_error` for the first bound of ``found`` that differs
        from ``reference`` (both ``{site: {bound: value}}``) at the state ``values``."""
        for name, bounds in reference.items():
            varying = [k for k in bounds if not _same_bound(bounds[k], found[name][k])]
            if varying:
                self._support_error(name, varying, sources[name], reference, found, values)

    def _bounds_changed(self, trace, num_chains: int) -> Optional[torch.Tensor]:
        """``[C]`` whether a bound of :attr:`_fixed_bounds` differs in ``trace`` from its
        value at set-up, per chain (tensor operations only, so that compiled functions
        check it too: :meth:`_log_joint` makes such a state NaN, and
        :meth:`raise_invalid` names the bound); ``None`` without such bounds."""
        changed = None
        for name, bounds in self._fixed_bounds.items():
            support = base_constraint(trace.nodes[name]["fn"].support)
            event_shape = self.sites[self._names.index(name)].event_shape
            right = self.max_plate_nesting + 1 + len(event_shape)
            for k, reference in bounds.items():
                diff = torch.as_tensor(getattr(support, k), device=reference.device) != reference
                if num_chains == 1 or diff.dim() < right:
                    diff = diff.any().reshape(1)
                else:  # the chain dimension first, any over the others
                    diff = diff.movedim(diff.dim() - right, 0).unsqueeze(-1).flatten(1).any(1)
                changed = diff if changed is None else changed | diff
        return None if changed is None else changed.expand(num_chains)

    def _support_error(self, name, varying, sources, reference, found, values) -> None:
        site = next(s for s in self.sites if s.name == name)
        sources = frozenset().union(*(sources[k] for k in varying))
        raise UnsupportedModelError(
            "The support of latent site {} depends on the values of other latent "
            "sites: its {} computed from latent site(s) {} and changes with them ({} at "
            "the initial state, {} at the state {}). The kernels move every latent site "
            "within one fixed support, so this model would be sampled wrongly. Give '{}' "
            "a fixed support that covers every case (for example Binomial(n_max, p), or "
            "a Categorical over 0 .. n_max) and add the dependence as a pyro.factor that "
            "is -inf where the value is impossible (e.g. torch.where(x <= n, 0.0, "
            "-inf)).".format(
                site.describe(),
                " and ".join("{} is".format(k.strip("_").replace("_", " ")) for k in varying),
                ", ".join("'{}'".format(s) for s in sorted(sources)),
                " and ".join(_describe_bound(reference[name][k]) for k in varying),
                " and ".join(_describe_bound(found[name][k]) for k in varying),
                _describe_values({k: v for k, v in values.items() if k in sources}),
                name,
            )
        )

    def _probe_values(self, node) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        """Values of a latent site other than its value in ``node``, for
        :meth:`_check_fixed_supports`: ``(levels, elements)``, every element at one level
        (each value of a support of at most 11 values, else a few from each end), and
        one element at a time moved to its lowest value or one step up."""
        site = next((s for s in self.sites if s.name == node["name"]), None)
        if site is None:  # an enumerated site: each value of its support at every element
            return list(node["fn"].enumerate_support(expand=True)), []
        current = site.codes_from_values(node["value"].detach().unsqueeze(0))
        if site.is_scalar:
            lower, upper = site.lower.to(current.device), site.upper.to(current.device)
        else:
            lower = torch.zeros(current.shape[1:], device=current.device)
            upper = torch.full_like(lower, site.num_categories - 1)
        low, high = float(lower.min()), float(upper.max())
        if high - low <= 10:
            levels = [low + i for i in range(int(high - low) + 1)]
        else:
            levels = [low, low + 1, low + 2, low + 5, low + 10, low + 20]
            levels += [high - 1, high] if math.isfinite(high) else []
        at_levels = [
            torch.minimum(torch.maximum(torch.full_like(lower, level), lower), upper)
            for level in levels
        ]
        flat, one_at_a_time = current.reshape(-1).to(lower.dtype), []
        for i in range(min(flat.numel(), _MAX_STRUCTURE_PROBES)):  # (more are not run)
            for level in (lower.reshape(-1)[i], torch.minimum(flat[i] + 1, upper.reshape(-1)[i])):
                moved = flat.clone()
                moved[i] = level
                one_at_a_time.append(moved)

        def values(candidates):
            codes = [c.long().reshape(current.shape) for c in candidates]
            return [site.values_from_codes(c)[0] for c in codes if not torch.equal(c, current)]

        return values(at_levels), values(one_at_a_time)

    # ------------------------------------------------------------------ encoding
    @property
    def num_coords(self) -> int:
        """Number ``D`` of flat coordinates."""
        return self.layout.num_coords

    def split(self, codes: torch.Tensor) -> List[torch.Tensor]:
        """Per-site codes ``[C, *coord_shape]`` from flat codes ``[C, D]``."""
        return [
            codes[:, sl].reshape((-1,) + site.coord_shape)
            for site, sl in zip(self.sites, self._slices)
        ]

    def join(self, per_site: List[torch.Tensor]) -> torch.Tensor:
        """Flat codes ``[C, D]`` from per-site codes ``[C, *coord_shape]``."""
        return torch.cat([c.reshape(c.shape[0], -1) for c in per_site], dim=1)

    def values_from_codes(self, codes: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Model values ``{name: [C, *value_shape]}`` of a batch of states."""
        return {s.name: s.values_from_codes(c) for s, c in zip(self.sites, self.split(codes))}

    def with_chain_dim(self, values: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """The values of one chain with a leading chain dimension of size 1: a value
        shaped like its site gets one (as :class:`pyro.infer.MCMC` passes a single
        chain's values), a value shaped ``[1, *value_shape]`` is kept; other shapes are
        left for :meth:`codes_from_values` to refuse.

        :param dict values: ``{name: value}`` (tensors, arrays or nested lists).
        :rtype: dict
        """
        shapes = {site.name: tuple(site.value_shape) for site in self.sites}
        out = {}
        for name, value in values.items():
            value = torch.as_tensor(value)
            if name in shapes and tuple(value.shape) != (1,) + shapes[name]:
                value = value.unsqueeze(0)
            out[name] = value
        return out

    def codes_from_values(
        self, values: Dict[str, torch.Tensor], what: str = "Value"
    ) -> torch.Tensor:
        """Flat codes ``[C, D]`` from model values ``{name: [C, *value_shape]}``.

        Every value is checked: its shape, that it is a whole number, and that it lies
        in the site's support (whatever Pyro's validation flag says).

        :param dict values: one entry per latent site (tensors, arrays or nested lists).
        :param str what: how to call the values in error messages (e.g.
            ``"Initial value"``).
        :raises ValueError: naming the site, for a missing value or one outside the
            site's support.
        """
        missing = [s.name for s in self.sites if s.name not in values]
        if missing:
            raise ValueError(
                "No value given for latent site(s) {}; the model's latent discrete sites "
                "are {}.".format(
                    ", ".join("'{}'".format(m) for m in missing),
                    ", ".join("'{}'".format(n) for n in self._names),
                )
            )
        return self.join([s.codes_from_values(values[s.name], what) for s in self.sites])

    # ------------------------------------------------------------------ evaluation
    # Below, ``num_chains`` is a Python int passed down (not read from tensor shapes),
    # so that traced graphs carry no shape arithmetic; ``num_chains > 1`` runs the
    # model batched over chains (``self.batching`` says how).
    def _trace(self, values: Dict[str, torch.Tensor], num_chains: int):
        model = self.model
        if self._param_values:  # a compiler traces: the parameters are its arguments
            model = poutine.substitute(model, data=dict(self._param_values))
        model = _trace.model_at(
            model,
            values,
            self.max_plate_nesting,
            batch=(CHAIN_PLATE, num_chains) if num_chains > 1 else None,
            enumerated=bool(self.enumerated),
        )
        trace = self._run_model(model)
        self._check_signature(trace, values, num_chains)
        return trace

    def _check_signature(self, trace, values, num_chains: int) -> None:
        """Raise when the latent sites of ``trace`` differ from the first trace's."""
        signature = self._latent_signature(trace, num_chains)
        if signature != self._signature:
            self._structure_error(signature, values, num_chains)

    def _latent_signature(self, trace, num_chains: int) -> tuple:
        """The latent sites of a trace (conditioned on their values, or sampled), with
        the shapes of their distributions (without the chain dimension and enumeration
        dimensions: the value of a conditioned site is the one given, whatever the
        distribution's shape) and the number of categories of a ``Categorical``."""
        out = []
        for site in _trace.sample_sites(trace):
            name = site["name"]
            if name in self._value_shapes or not (site["is_observed"] or name in self.enumerated):
                shape = tuple(site["fn"].batch_shape + site["fn"].event_shape)
                if num_chains > 1 or self.enumerated:
                    # drop the chain dimension, the enumeration dimensions of the sites
                    # it depends on (left of the plates) and the ones padding them
                    rank = self._ranks.get(name, len(shape))
                    shape = shape[len(shape) - rank :]
                base = unwrap_distribution(site["fn"])
                categories = base.param_shape[-1] if isinstance(base, Categorical) else None
                out.append((name, (shape, categories)))
        return tuple(sorted(out))

    def _structure_error(self, signature: tuple, values, num_chains: int) -> None:
        expected, found = dict(self._signature), dict(signature)
        missing = [n for n in expected if n not in found]
        extra = [n for n in found if n not in expected]
        reshaped = [n for n in expected if n in found and expected[n] != found[n]]
        parts = []
        if missing:
            parts.append("site(s) {} are missing".format(", ".join(map(repr, missing))))
        if extra:
            parts.append("new site(s) {} appear".format(", ".join(map(repr, extra))))
        if reshaped:
            parts.append(
                "site(s) {} change shape".format(
                    ", ".join(
                        "'{}' {} -> {}".format(
                            n, _describe_shape(expected[n]), _describe_shape(found[n])
                        )
                        for n in reshaped
                    )
                )
            )
        if any(expected[n][1] != found[n][1] for n in reshaped):
            parts[-1] += (
                " (a Categorical site must keep its number of categories: give it the "
                "largest number, with logits -inf for the categories impossible at a "
                "state, e.g. torch.where(torch.arange(K_max) < k + 2, 0.0, -inf))"
            )
        state = _describe_values(values) if num_chains == 1 else "a batch of states"
        reads = "; ".join(r.describe() for r in self.value_reads)
        raise UnsupportedModelError(
            "The latent sites of the model change with the values of its latent sites: "
            "at the state {}, {}{}. The kernels need every latent site at every state, "
            "with a fixed shape. Sample every latent site on every path (use its value "
            "only where it matters, e.g. mean = x * w instead of sampling w only when "
            "x is 1), or sum the varying part out exactly.".format(
                state,
                " and ".join(parts) or "the sites differ",
                " (the model reads latent values in Python: {})".format(reads) if reads else "",
            )
        )

    def _relaxed(self, codes: torch.Tensor, with_grad: bool) -> List[torch.Tensor]:
        """Float values ``[C, *value_shape]`` of the non-``Categorical`` sites: the
        tensors the gradient is taken with respect to."""
        relaxed = []
        for site, site_codes in zip(self.sites, self.split(codes)):
            if site.kind != CATEGORICAL:
                relaxed.append(site.values_from_codes(site_codes).requires_grad_(with_grad))
        return relaxed

    def _state_trace(self, codes: torch.Tensor, relaxed, num_chains: int):
        relaxed = list(relaxed)
        values = {}
        for site, site_codes in zip(self.sites, self.split(codes)):
            value = site_codes if site.kind == CATEGORICAL else relaxed.pop(0)
            values[site.name] = value.reshape(site.model_shape(num_chains, self.max_plate_nesting))
        return self._trace(values, num_chains)

    def _forward(self, num_chains: int, codes: torch.Tensor, *relaxed: torch.Tensor):
        """``(log_joint [C], *own_logits)``: the model run at a batch of states (as
        ``self.batching`` says), with the own logits ``[C, n, K]`` of every (one-hot)
        categorical site."""
        if num_chains == 1 or self.batching == "plate":
            return self._forward_plate(num_chains, codes, *relaxed)
        if self.batching == "vmap":
            return self._forward_vmap(codes, *relaxed)
        return self._forward_loop(num_chains, codes, *relaxed)

    def _forward_plate(self, num_chains: int, codes: torch.Tensor, *relaxed: torch.Tensor):
        trace = self._state_trace(codes, relaxed, num_chains)
        own = [
            self._own_logits(trace, site, num_chains) for site in self.sites if not site.is_scalar
        ]
        return (self._log_joint(trace, num_chains), *own)

    def _forward_one(self, codes: torch.Tensor, *relaxed: torch.Tensor):
        """The model at one state, ``codes [D]`` (no batch dimension; for vmap)."""
        out = self._forward_plate(1, codes.unsqueeze(0), *(r.unsqueeze(0) for r in relaxed))
        return tuple(o.squeeze(0) for o in out)

    def _forward_vmap(self, codes: torch.Tensor, *relaxed: torch.Tensor):
        return torch.func.vmap(self._forward_one, randomness="error")(codes, *relaxed)

    def _forward_loop(self, num_chains: int, codes: torch.Tensor, *relaxed: torch.Tensor):
        outs = [
            self._forward_plate(1, codes[c : c + 1], *(r[c : c + 1] for r in relaxed))
            for c in range(num_chains)
        ]
        return tuple(torch.cat(parts) for parts in zip(*outs))

    def _site_log_prob(self, site) -> torch.Tensor:
        value = site["value"]
        if site["name"] in self._one_hot_names:
            # the site's own term enters the gradient through its logits (below)
            value = value.detach()
        try:
            return _trace.scaled_log_prob(site, value)
        except Exception as error:
            if _out_of_memory(error) or isinstance(error, UnsupportedModelError):
                raise
            raise UnsupportedModelError(
                _log_prob_failure(site, error, self._value_shapes)
            ) from error

    @property
    def _one_hot_names(self):
        return {s.name for s in self.sites if s.kind == ONE_HOT}

    def _log_joint(self, trace, num_chains: int) -> torch.Tensor:
        """``[C]`` float64 sum of every site's log-probability (each term is summed in its
        own precision, the terms in double precision, so that a large constant term does
        not swallow the differences between states)."""
        if self.enumerated:
            total = self._contract(trace, num_chains)
        else:
            total = 0.0
            for site in _trace.sample_sites(trace):
                total = total + self._chain_sum(self._site_log_prob(site), num_chains).double()
            total = torch.as_tensor(total, dtype=torch.float64).reshape(-1)
            total = total if num_chains == 1 else total.expand(num_chains)
        changed = self._bounds_changed(trace, num_chains)
        return total if changed is None else torch.where(changed, math.nan, total)

    def _chain_sum(self, log_prob: torch.Tensor, num_chains: int) -> torch.Tensor:
        if num_chains == 1:
            return log_prob.sum().reshape(1)
        batch_dims = self.max_plate_nesting + 1
        if log_prob.dim() < batch_dims:
            log_prob = log_prob.reshape((1,) * (batch_dims - log_prob.dim()) + log_prob.shape)
        return log_prob.sum(tuple(range(1, log_prob.dim()))) if log_prob.dim() > 1 else log_prob

    def _contract(self, trace, num_chains: int) -> torch.Tensor:
        log_probs = {
            site["name"]: self._site_log_prob(site).double() for site in _trace.sample_sites(trace)
        }
        result = _trace.contract_enumerated(
            trace, log_probs, CHAIN_PLATE if num_chains > 1 else None
        )
        return result.reshape(-1).expand(num_chains)

    def _assemble(self, relaxed, grads, own) -> torch.Tensor:
        """Pack per-site gradients into ``[C, D, M]`` (see the layout module)."""
        width = self.layout.grad_width
        relaxed, grads, own = list(relaxed), list(grads), list(own)
        blocks = []
        for site in self.sites:
            grad = None
            if site.kind != CATEGORICAL:
                leaf, grad = relaxed.pop(0), grads.pop(0)
                grad = torch.zeros_like(leaf) if grad is None else grad
            if site.is_scalar:
                block = grad.reshape(-1, site.num_coords, 1)
            else:
                block = own.pop(0)
                if grad is not None:
                    block = block + grad.reshape(block.shape).to(block.dtype)
            if site.grad_width < width:
                block = F.pad(block, (0, width - site.grad_width))
            blocks.append(block)
        grad = torch.cat(blocks, dim=1) if len(blocks) > 1 else blocks[0]
        # non-finite entries (NaN, an infinite derivative such as sqrt's at 0) carry no
        # usable direction: zero, not a huge number that would make the proposal put all
        # its mass on one move; written so that compilers vectorise it
        return torch.where(grad.abs() < math.inf, grad, 0.0)

    def _own_logits(self, trace, site: DiscreteSite, num_chains: int):
        node = trace.nodes[site.name]
        logits = unwrap_distribution(node["fn"]).logits
        weight = own_term_weight(node)  # the site's scale and masks
        if weight is not None:
            logits = logits * weight.to(logits.dtype).unsqueeze(-1)
        shape = site.model_shape(num_chains, self.max_plate_nesting)
        if site.kind == CATEGORICAL:
            shape = shape + (site.num_categories,)
        extra = logits.dim() - len(shape)
        if extra > 0:  # logits depend on enumerated sites: average them out
            logits = logits.mean(dim=tuple(range(extra)))
        return logits.expand(shape).reshape(-1, site.num_coords, site.num_categories)

    def _value_and_grad(self, codes: torch.Tensor, num_chains: int, forward=None):
        if forward is None:
            forward = partial(self._forward, num_chains)
        with torch.enable_grad():
            relaxed = self._relaxed(codes, with_grad=True)
            log_joint, *own = forward(codes, *relaxed)
            grads = (
                torch.autograd.grad(log_joint.sum(), relaxed, allow_unused=True)
                if relaxed and log_joint.requires_grad
                else [None] * len(relaxed)
            )
        log_joint = log_joint.detach()
        self._record(codes, log_joint)
        return log_joint, self._assemble(relaxed, grads, own)

    def traceable_value_and_grad(self, num_chains: int):
        """:meth:`value_and_grad` for ``num_chains`` chains, uncompiled and unchecked,
        for callers that trace it inside a larger function (after one call of
        :meth:`value_and_grad`, which runs the checks), inside :meth:`recording`."""
        return partial(self._value_and_grad, num_chains=num_chains)

    def traceable(self, num_chains: int) -> TraceableEnergy:
        """The density a compiler traces for ``num_chains`` chains (see
        :func:`pyro_gwg.density.traceable`): :meth:`traceable_value_and_grad` and the
        batched :meth:`log_joint`, to be called inside :meth:`recording`."""
        value_and_grad = self.traceable_value_and_grad(num_chains)
        return TraceableEnergy(self, self.layout, self.log_joint, value_and_grad)

    @property
    def compilable(self) -> Tuple[str, ...]:
        """Compilers that can compile a whole transition that evaluates this energy for
        several states (see :mod:`pyro_gwg.compilation`): all for a model that broadcasts
        (``"plate"``) or runs under :func:`torch.func.vmap` (traced through its ATen
        graph), none for a model evaluated one state at a time, whose control flow
        reads latent values or that reads ``pyro.module`` parameters (run eagerly)."""
        if self.value_reads or self.batching == "loop" or self._module_params:
            return ()
        return ("aot", "compile", "make_fx", "trace")

    def value_and_grad(self, codes: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Log joint and packed gradient of a batch of states.

        :param torch.Tensor codes: long ``[C, D]`` states.
        :returns: ``(log_joint [C] (float64), grad [C, D, W])``, ``W`` the layout's
            ``grad_width`` (1 when every coordinate is scalar); non-finite gradient
            entries are replaced by 0.
        :raises UnsupportedModelError: naming the sites and the state, when a log
            density is NaN or ``+inf``.
        """
        num_chains = codes.shape[0]
        if num_chains > 1 and self.batching is None:
            self.choose_batching(codes)
        if self.jit_compile and (num_chains == 1 or self.batching == "plate"):
            compiled = self._compiled.get(num_chains)
            if compiled is None:
                compiled = self._compile(codes)
            log_joint, grad = compiled(codes)
            self._record(codes, log_joint)
            return log_joint, grad
        return self._value_and_grad(codes, num_chains)

    def log_joint(
        self, codes: torch.Tensor, batched: bool = True, differentiable: bool = False
    ) -> torch.Tensor:
        """Log joint density of a batch of states, in double precision.

        :param torch.Tensor codes: long ``[C, D]`` states.
        :param bool batched: evaluate the states together (as ``self.batching`` says);
            ``False`` runs the model once per state.
        :param bool differentiable: keep the autograd graph, so that the result can be
            differentiated with respect to the model's parameters (for learning them,
            as :class:`pyro_gwg.contrib.train.PCD` does); by default no graph is built.
        :rtype: torch.Tensor
        :raises UnsupportedModelError: naming the sites and the state, when a log
            density is NaN or ``+inf``.
        """
        num_chains = codes.shape[0]
        if num_chains > 1 and batched and self.batching is None:
            self.choose_batching(codes)
        with torch.set_grad_enabled(differentiable and torch.is_grad_enabled()):
            relaxed = self._relaxed(codes, False)
            if batched or num_chains == 1:
                log_joint = self._forward(num_chains, codes, *relaxed)[0]
            else:
                log_joint = self._forward_loop(num_chains, codes, *relaxed)[0]
        self._record(codes, log_joint)
        return log_joint

    def site_log_probs(self, codes: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Per-site log-probability sums of one unbatched state ``codes [1, D]``.

        Sites whose log-probability carries enumeration dimensions report the
        log-sum-exp over them. Used to name the sites behind an invalid state.

        :rtype: dict
        """
        with torch.no_grad():
            trace = self._state_trace(codes, self._relaxed(codes, False), num_chains=1)
            out = {}
            for site in _trace.sample_sites(trace):
                log_prob = self._site_log_prob(site).double()
                if self.enumerated and log_prob.dim() > self.max_plate_nesting:
                    keep = log_prob.shape[log_prob.dim() - self.max_plate_nesting :]
                    log_prob = log_prob.reshape((-1,) + keep).logsumexp(0)
                out[site["name"]] = log_prob.sum()
            return out

    # ------------------------------------------------------------------ invalid densities
    def _record(self, codes: torch.Tensor, log_joint: torch.Tensor) -> None:
        """Check an evaluation for NaN or ``+inf``: at once when eager, or, inside
        :meth:`recording`, by keeping it for the caller (a compiled transition cannot
        raise; it returns a flag that its caller checks)."""
        if self._recording is not None:
            self._recording.append((codes, log_joint))
        elif not bool((log_joint < math.inf).all()):
            bad = int((~(log_joint < math.inf)).nonzero()[0, 0])
            self.raise_invalid(codes[bad])

    @contextlib.contextmanager
    def recording(self) -> Iterator[List[Tuple[torch.Tensor, torch.Tensor]]]:
        """Within this context evaluations are not checked but listed, as
        ``(codes, log_joint)`` pairs, for :func:`invalid_evaluations`."""
        previous, self._recording = self._recording, []
        try:
            yield self._recording
        finally:
            self._recording = previous

    def raise_invalid(self, codes: torch.Tensor) -> None:
        """Raise the error for a state ``codes [D]`` whose log density is NaN or
        ``+inf``, naming the sites responsible.

        :raises UnsupportedModelError: always.
        """
        codes = codes.reshape(1, -1).long()
        with self.recording(), torch.no_grad():
            trace = self._state_trace(codes, self._relaxed(codes, False), num_chains=1)
            found = _support_bounds(trace, self._fixed_bounds)
            values = {name: value[0] for name, value in self.values_from_codes(codes).items()}
            self._check_bounds(self._fixed_bounds, found, values, self._bound_sources)
            total = float(self._forward_plate(1, codes, *self._relaxed(codes, False))[0])
            terms = self.site_log_probs(codes)
        bad = [
            "'{}' ({:g})".format(k, float(v)) for k, v in terms.items() if not float(v) < math.inf
        ]
        raise UnsupportedModelError(
            "The model's log density is {:g} at a state the sampler evaluated: {}. "
            "Site(s) with a NaN or +inf log-probability there: {}. A log density must "
            "be finite, or -inf for an impossible state, at every state of the latent "
            "sites' supports: check the model's parameters and pyro.factor terms at "
            "this state (for example a log of 0 multiplied by 0, or an infinite "
            "factor).".format(
                total,
                _describe_values(self.values_from_codes(codes), index=0),
                ", ".join(bad) or "none individually (check pyro.factor terms)",
            )
        )

    # ------------------------------------------------------------------ batching
    def choose_batching(self, codes: torch.Tensor) -> str:
        """Choose how several states are evaluated (``self.batching``), by comparing the
        batched evaluation of probe states with their evaluation one at a time:
        ``"plate"`` when the model broadcasts, else ``"vmap"`` when it runs under
        :func:`torch.func.vmap`, else ``"loop"``; the last two with one
        :class:`BatchingWarning` that says why.

        :param torch.Tensor codes: long ``[C, D]`` valid states (probes are built
            from them).
        :returns: the mode chosen.
        """
        if self.batching is not None:
            return self.batching
        probe = self._probe_states(codes)
        reasons = {}
        if self.value_reads:
            reasons["plate"] = "its Python control flow reads latent values ({})".format(
                "; ".join(r.describe() for r in self.value_reads)
            )
            mode = "loop"
        else:
            reference = self._reference(probe)
            mode = "loop"
            for candidate in BATCHING_MODES[:2]:
                reasons[candidate] = self._batching_failure(candidate, probe, reference)
                if reasons[candidate] is None:
                    mode = candidate
                    break
        self.batching = mode
        if mode != "plate":
            warn(
                "The model does not broadcast over a batch dimension on the left of its "
                "plates: {}. pyro-gwg evaluates several states {}, which is exact but "
                "slower than one batched run of the model. For speed, write the model "
                "as Pyro's vectorised particles need: every batch dimension in a "
                "pyro.plate, reductions over a site's own dimensions only, keeping the "
                "plate dimension for sites outside the plate (x.sum(-1, keepdim=True), "
                "not x.sum()), .expand only to shapes that include the batch "
                "dimensions.".format(
                    reasons["plate"],
                    "with torch.func.vmap"
                    if mode == "vmap"
                    else "one at a time (one run of the model per state and chain)",
                ),
                BatchingWarning,
            )
        return mode

    def check_vectorized(self, codes: torch.Tensor) -> None:
        """Check that the model broadcasts over a leading batch dimension (the fast
        ``"plate"`` evaluation), for model authors.

        :param torch.Tensor codes: long ``[C, D]`` valid states (probes are built
            from them).
        :raises UnsupportedModelError: saying why it does not, naming the first site
            that differs where there is one.
        """
        probe = self._probe_states(codes)
        failure = (
            "its Python control flow reads latent values"
            if self.value_reads
            else self._batching_failure("plate", probe, self._reference(probe))
        )
        if failure is not None:
            raise UnsupportedModelError(
                "The model does not broadcast over a leading batch dimension: {}. Write "
                "the model with pyro.plate for every batch dimension and reduce only "
                "over a site's own dimensions, keeping the plate's dimension for sites "
                "outside the plate (x.sum(-1, keepdim=True), not x.sum() or "
                "x.sum(-1)).".format(failure)
            )

    def _probe_states(self, codes: torch.Tensor) -> torch.Tensor:
        """Two or three distinct valid states built from ``codes``: see
        :meth:`CoordinateLayout.probe_states
        <pyro_gwg.proposals.layout.CoordinateLayout.probe_states>` (the probe of
        :class:`~pyro_gwg.density.PotentialDensity` too)."""
        return self.layout.probe_states(codes)

    def _reference(self, probe: torch.Tensor):
        with self.recording():
            return [self._value_and_grad(probe[i : i + 1], 1) for i in range(probe.shape[0])]

    def _batching_failure(self, mode: str, probe: torch.Tensor, reference) -> Optional[str]:
        """Why evaluating ``probe`` as ``mode`` differs from evaluating it state by
        state (``None`` if it does not)."""
        previous, self.batching = self.batching, mode
        try:
            with self.recording():
                f, grad = self._value_and_grad(probe, probe.shape[0])
        except Exception as error:  # any failure of the batched run: a reason to fall back
            if _out_of_memory(error):
                raise
            return "{} fails ({}: {})".format(mode, type(error).__name__, _first_line(error))
        finally:
            self.batching = previous
        f_ref = torch.cat([r[0] for r in reference])
        g_ref = torch.cat([r[1] for r in reference])
        same_f = torch.allclose(f, f_ref, rtol=_RTOL, atol=_ATOL, equal_nan=True)
        if same_f and torch.allclose(grad, g_ref, rtol=_RTOL, atol=_ATOL, equal_nan=True):
            return None
        detail = (
            "batched log densities {} against {} one state at a time{}".format(
                _fmt(f), _fmt(f_ref), self._mismatching_site(probe) if mode == "plate" else ""
            )
            if not same_f
            else "the gradients differ from those computed one state at a time"
        )
        return "{} evaluation mixes the states ({})".format(mode, detail)

    def _mismatching_site(self, probe: torch.Tensor) -> str:
        if self.enumerated:
            return ""
        try:
            with torch.no_grad():
                trace = self._state_trace(probe, self._relaxed(probe, False), probe.shape[0])
                batched = {
                    s["name"]: self._chain_sum(self._site_log_prob(s), probe.shape[0]).double()
                    for s in _trace.sample_sites(trace)
                }
        except Exception:  # the batched run fails: no site to name
            return ""
        singles = [self.site_log_probs(probe[i : i + 1]) for i in range(probe.shape[0])]
        for name, value in batched.items():
            expected = torch.stack([s[name] for s in singles])
            if value.shape != expected.shape and value.numel() not in (1, expected.numel()):
                return "; the first site that differs is '{}'".format(name)
            if not torch.allclose(
                value.reshape(-1).expand_as(expected), expected, rtol=_RTOL, atol=_ATOL
            ):
                return "; the first site that differs is '{}'".format(name)
        return ""

    # ------------------------------------------------------------------ compilation
    def _compile(self, codes: torch.Tensor):
        """Trace the whole ``value_and_grad`` (forward and backward pass); where the
        tracer cannot follow a backward formula, trace the forward pass only and
        differentiate the traced graph, as Pyro's HMC does."""
        if self.value_reads:
            raise UnsupportedModelError(
                "jit_compile=True cannot compile this model: its Python control flow "
                "reads latent values ({}), and a traced graph would follow one path "
                "only. Use jit_compile=False (or the default 'auto', which runs such a "
                "model eagerly).".format("; ".join(r.describe() for r in self.value_reads))
            )
        if self._module_params:
            raise UnsupportedModelError(
                "jit_compile=True cannot compile this model: it reads the parameters of "
                "a pyro.module ({}), which a traced graph would hold as constants. Use "
                "jit_compile=False (or the default 'auto', which runs such a model "
                "eagerly), or make them pyro.param sites, which a compiled transition "
                "takes as arguments.".format(", ".join(map(repr, self._module_params)))
            )
        num_chains = codes.shape[0]
        with self.recording():
            compiled = self._trace_value_and_grad(codes, num_chains)
            for probe in (codes, self.layout.perturb(codes)):
                f_jit, g_jit = compiled(probe)
                f_eager, g_eager = self._value_and_grad(probe, num_chains)
                if not (
                    torch.allclose(f_jit, f_eager, rtol=_RTOL, atol=_ATOL, equal_nan=True)
                    and torch.allclose(g_jit, g_eager, rtol=_RTOL, atol=_ATOL, equal_nan=True)
                ):
                    raise UnsupportedModelError(
                        "jit_compile=True: the graph that torch.jit.trace recorded gives "
                        "a different {} than the eager model at a second state, so it "
                        "does not follow the model (an operation the tracer records as a "
                        "constant, or value-dependent control flow it could not see). "
                        "Use jit_compile=False (or the default 'auto', which then runs "
                        "the model eagerly).".format(
                            "log density"
                            if not torch.allclose(f_jit, f_eager, rtol=_RTOL, atol=_ATOL)
                            else "gradient"
                        )
                    )
        self._compiled[num_chains] = compiled
        return compiled

    def _trace_value_and_grad(self, codes: torch.Tensor, num_chains: int):
        try:
            try:
                return self._trace_with_arguments(
                    lambda c: self._value_and_grad(c, num_chains), (codes,)
                )
            except RuntimeError:
                forward = self._trace_with_arguments(
                    lambda c, *r: self._forward(num_chains, c, *r),
                    (codes, *self._relaxed(codes, False)),
                )
                return partial(self._value_and_grad, num_chains=num_chains, forward=forward)
        except Exception as error:  # whatever the model raises under the tracer
            if _out_of_memory(error) or isinstance(error, UnsupportedModelError):
                raise
            raise UnsupportedModelError(
                "torch.jit.trace could not trace the model ({}: {}); use jit_compile=False "
                "(or the default 'auto', which then runs the model eagerly).".format(
                    type(error).__name__, _first_line(error)
                )
            ) from error

    def _trace_with_arguments(self, fn: Callable, example: tuple) -> Callable:
        """:func:`~pyro_gwg.compilation.trace_compile` of ``fn``, with the model's
        :meth:`arguments` as further inputs of the trace (not constants), passed at
        their values of each call."""
        arguments = self.arguments()
        size = len(example)

        def taking(*tensors: torch.Tensor):
            with self.reading(tensors[size:]):
                return fn(*tensors[:size])

        traced = trace_compile(taking, example + arguments)
        return lambda *tensors: traced(*tensors, *self.arguments())

    # ------------------------------------------------------------------ arguments
    def arguments(self) -> Tuple[torch.Tensor, ...]:
        """The tensors besides the states that a compiled function of this energy
        takes as arguments, at their values now: those of ``inputs``, then those of
        the model's ``pyro.param`` sites (:attr:`param_names`), read from the param
        store, so that a parameter changed since the compilation (trained, or set
        again) is used at its new value.

        :rtype: tuple
        """
        store = pyro.get_param_store()
        params = tuple(store.get_param(name).detach() for name in self.param_names)
        return tuple((self.inputs or {}).values()) + params

    @contextlib.contextmanager
    def reading(self, arguments: Sequence[torch.Tensor]) -> Iterator[None]:
        """Within this context the model reads ``arguments`` (a tracer's tensors, in
        the order of :meth:`arguments`) in place of the values of ``inputs`` and of
        the ``pyro.param`` sites."""
        inputs = self.inputs if self.inputs is not None else {}
        given = dict(inputs)
        previous = self._param_values
        inputs.update(zip(given, arguments))
        self._param_values = dict(zip(self.param_names, arguments[len(given) :]))
        try:
            yield
        finally:
            inputs.update(given)
            self._param_values = previous

    # ------------------------------------------------------------------ initial states
    def initial_codes(self, num_chains: int = 1) -> torch.Tensor:
        """Initial states from ``init_strategy`` with a finite log joint, checked (see
        :meth:`check_initial`).

        :data:`INIT_CANDIDATES` states are drawn per chain and each chain starts at the
        most probable of its own: ``init_to_sample`` draws from the prior, which ignores
        the data, and a prior draw that the data all but rule out (a state of posterior
        probability :math:`10^{-6}` whose density is finite only because a distribution
        clamps a zero probability) can hold a chain for thousands of steps. The draws
        are made in one batched run of the model where the strategy allows it;
        strategies that give unbatched values, and chains without a finite candidate,
        fall back to one run per draw (a strategy that gives the same state twice, such
        as ``init_to_value``, is asked once per chain).

        :param int num_chains: number of chains ``C``.
        :returns: long ``[C, D]``.
        :raises ValueError: naming the sites with a non-finite log-probability when no
            valid state is found in ``max_init_tries`` attempts per chain.
        """
        per_chain = INIT_CANDIDATES
        candidates = self._batched_initial_codes(num_chains * per_chain)
        if candidates is None:
            first = self._single_initial_codes()
            second = self._single_initial_codes()
            per_chain = 1 if torch.equal(first, second) else per_chain
            more = [self._single_initial_codes() for _ in range(num_chains * per_chain - 2)]
            candidates = torch.cat([first, second, *more])[: num_chains * per_chain]
        self.check_deterministic(candidates[:1])
        # (a single chain evaluates its candidates one by one: it may never need batches)
        batched = num_chains > 1 or self.batching is not None
        log_joint = self._unchecked_log_joint(candidates, batched).reshape(per_chain, num_chains)
        best = torch.where(torch.isnan(log_joint), -math.inf, log_joint).argmax(0)
        chains = torch.arange(num_chains, device=candidates.device)
        codes = candidates.reshape(per_chain, num_chains, -1)[best, chains]
        for c in (~torch.isfinite(log_joint[best, chains])).nonzero().reshape(-1).tolist():
            codes[c] = self._single_initial_codes()[0]
        self.check_initial(codes)
        return codes

    def _unchecked_log_joint(self, codes: torch.Tensor, batched: bool = True) -> torch.Tensor:
        with self.recording():
            return self.log_joint(codes, batched)

    def _batched_initial_codes(self, num_chains: int) -> Optional[torch.Tensor]:
        plated = _trace.in_batch_plate(self.model, CHAIN_PLATE, num_chains, self.max_plate_nesting)
        try:
            trace = _trace.trace_model(
                plated, self.model_args, self.model_kwargs, init_strategy=self.init_strategy
            )
            values = {
                s.name: trace.nodes[s.name]["value"].reshape((num_chains,) + s.value_shape)
                for s in self.sites
            }
        except Exception as error:  # the model does not broadcast: one run per chain
            if _out_of_memory(error):
                raise
            return None
        return self.codes_from_values(values, "Initial value")

    def _single_initial_codes(self) -> torch.Tensor:
        previous = None
        for _ in range(self.max_init_tries):
            trace = self._prototype_trace()
            values = {n: site["value"] for n, site in trace.nodes.items() if n in self._names}
            self._check_signature(trace, values, num_chains=1)
            codes = self.codes_from_values(
                {s.name: trace.nodes[s.name]["value"].unsqueeze(0) for s in self.sites},
                "Initial value",
            )
            self.check_deterministic(codes)
            if torch.isfinite(self._unchecked_log_joint(codes)).all():
                break
            if previous is not None and torch.equal(previous, codes):
                break  # a deterministic strategy gives the same state again
            previous = codes
        return codes

    def check_initial(self, codes: torch.Tensor) -> None:
        """Check initial states: a finite log joint in every chain, the same log joint
        when evaluated twice (no randomness outside ``pyro.sample``), and, for a model
        whose control flow reads latent values, the same latent sites at the states
        next to the first one.

        :param torch.Tensor codes: long ``[C, D]`` states (already checked against the
            supports by :meth:`codes_from_values`).
        :raises ValueError: naming the sites with a non-finite log-probability.
        :raises UnsupportedModelError: for a random model or one whose latent sites
            change with latent values.
        """
        self.check_deterministic(codes[:1])
        if self.value_reads:
            self._probe_structure(codes[:1])
        log_joint = self._unchecked_log_joint(codes)
        for c in range(codes.shape[0]):
            if torch.isfinite(log_joint[c]):
                continue
            terms = self.site_log_probs(codes[c : c + 1])
            bad = [
                "'{}' ({:g})".format(k, float(v)) for k, v in terms.items() if not torch.isfinite(v)
            ]
            raise ValueError(
                "The log density at the initial state is {:g}{}. The sites with a "
                "non-finite log-probability: {}. Pass an init_strategy (e.g. "
                "pyro.infer.autoguide.init_to_value(values={{...}})) or initial_params "
                "with a state the model supports.".format(
                    float(log_joint[c]),
                    " (chain {})".format(c) if codes.shape[0] > 1 else "",
                    ", ".join(bad) or "none individually (check pyro.factor terms)",
                )
            )

    def check_deterministic(self, codes: torch.Tensor) -> None:
        """Evaluate a state, and the state with every coordinate moved by one step, twice
        each; refuse a model whose log density differs between the two runs (it draws
        random numbers outside ``pyro.sample``). Done once per energy.

        :param torch.Tensor codes: long ``[1, D]`` a state.
        :raises UnsupportedModelError: naming the sites whose log-probability changed.
        """
        if self._checked_state:
            return
        for state in (codes[:1], self.layout.perturb(codes[:1])):
            first = self.site_log_probs(state)
            second = self.site_log_probs(state)
            differ = [
                name
                for name in first
                if not torch.allclose(
                    first[name], second[name], rtol=1e-6, atol=1e-6, equal_nan=True
                )
            ]
            if differ:
                raise UnsupportedModelError(
                    "The model gives two different log densities at the same state ({}): "
                    "the log-probability of site(s) {} changed between two runs. The model "
                    "draws random numbers outside pyro.sample (torch.randn, torch.rand, a "
                    "dropout layer in training mode, ...), so its density is not a "
                    "function of the latent sites and MCMC cannot target it. Make the "
                    "model deterministic given its sample sites: sample the random "
                    "quantity with pyro.sample, fix it outside the model, or put networks "
                    "in eval mode.".format(
                        _describe_values(self.values_from_codes(state), index=0),
                        ", ".join(
                            "'{}' ({:g} then {:g})".format(n, float(first[n]), float(second[n]))
                            for n in differ
                        ),
                    )
                )
        self._checked_state = True

    def _probe_structure(self, codes: torch.Tensor) -> None:
        """For a model whose control flow reads latent values: run the model at the states
        that differ from ``codes [1, D]`` in one coordinate of a site it reads, by up to
        two steps (at most ``_MAX_STRUCTURE_PROBES`` runs); a change of the latent sites
        raises (in :meth:`_trace`)."""
        read = frozenset().union(*(r.sources for r in self.value_reads))
        layout = self.layout
        probes = []
        for site, sl in zip(self.sites, self._slices):
            if site.name not in read:
                continue
            for i in range(sl.start, sl.stop):
                scalar = bool(layout.is_scalar[i])
                low = float(layout.lower[i]) if scalar else 0.0
                high = float(layout.upper[i]) if scalar else float(layout.num_categories[i] - 1)
                current = int(codes[0, i])
                for v in range(int(max(low, current - 2)), int(min(high, current + 2)) + 1):
                    if v != current:
                        probe = codes[:1].clone()
                        probe[0, i] = v
                        probes.append(probe)
        with self.recording():
            for probe in probes[:_MAX_STRUCTURE_PROBES]:
                self._forward_plate(1, probe, *self._relaxed(probe, False))

    # ------------------------------------------------------------------ diagnostics
    def warn_gradient_blind_categoricals(
        self, codes: torch.Tensor, checked: Optional[set] = None
    ) -> None:
        """Warn, in one warning that lists them, about the ``Categorical`` sites whose
        value the model uses beyond their own log-probability (typically as an index),
        where the gradient cannot see it. Each site is checked once: sites named in
        ``checked`` are skipped, and the sites checked now are added to it.

        :param torch.Tensor codes: long ``[1, D]`` a valid state.
        :param set checked: names of the sites already checked (by default, those
            checked by earlier calls on this energy); a kernel passes the set of its
            run, so that the chains of one run warn once.
        """
        checked = self._checked_categoricals if checked is None else checked
        candidates = [
            (site, sl)
            for site, sl in zip(self.sites, self._slices)
            if site.kind == CATEGORICAL and site.num_categories >= 2 and site.name not in checked
        ]
        if not candidates:
            return
        base_total = float(self._unchecked_log_joint(codes[:1]))
        base_terms = self.site_log_probs(codes[:1])
        blind = []
        for site, sl in candidates:
            checked.add(site.name)
            shifted = codes[:1].clone()
            shifted[:, sl] = (shifted[:, sl] + 1) % site.num_categories
            total = float(self._unchecked_log_joint(shifted))
            own = float(self.site_log_probs(shifted)[site.name])
            rest_change = (total - own) - (base_total - float(base_terms[site.name]))
            if not abs(rest_change) <= 1e-6 * (1 + abs(base_total)):  # NaN counts too
                blind.append(site)
        if not blind:
            return
        if len(blind) == 1:
            which = "Categorical site {} is used by the model beyond its own".format(
                blind[0].describe()
            )
        else:
            which = (
                "{} Categorical sites ({}; the first: {}) are used by the model beyond "
                "their own".format(
                    len(blind), name_list([site.name for site in blind]), blind[0].describe()
                )
            )
        warn(
            "{} log-probability (for example as an "
            "index, locs[z]). Integer values carry no gradient, so the gradient-informed "
            "proposal for such a site sees only its prior; the sampler stays exact but may "
            "mix slowly. For informed proposals, write the site as OneHotCategorical and "
            "use the one-hot vector (e.g. z @ locs).".format(which),
            UserWarning,
        )


class TraceableEnergy(NamedTuple):
    """A :class:`~pyro_gwg.density.Density` view of a :class:`DiscreteEnergy` for
    compilers (see :meth:`DiscreteEnergy.traceable`); ``source`` is that energy."""

    source: DiscreteEnergy
    layout: CoordinateLayout
    log_joint: Callable[[torch.Tensor], torch.Tensor]
    value_and_grad: Callable[[torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]


def invalid_evaluations(
    evaluations: Sequence[Tuple[torch.Tensor, torch.Tensor]], codes: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Summary of the evaluations listed by :meth:`DiscreteEnergy.recording`, as tensors
    (so that a compiled function can return it): whether any log density was NaN or
    ``+inf``, and the first such state.

    :param evaluations: ``(codes, log_joint)`` pairs.
    :param torch.Tensor codes: long ``[C, D]`` states, for the result's shape and device
        when there was no evaluation.
    :returns: ``(flag [] (bool), codes [D])``.
    """
    flag, state = torch.zeros((), dtype=torch.bool, device=codes.device), codes[0]
    for states, log_joint in evaluations:  # (no concatenation of the states: small ops only)
        bad = ~(log_joint < math.inf)
        # (a one-element index, not a scalar one: graph capture must not read a value)
        first = states.index_select(0, bad.int().argmax().reshape(1))[0]
        state = torch.where(flag, state, first)
        flag = flag | bad.any()
    return flag, state


#: torch's allocation failure (``torch.cuda.OutOfMemoryError`` before torch 2.5)
_TORCH_OOM = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


def _out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is an allocation failure (which must surface, never be taken
    for a model that does not broadcast)."""
    if isinstance(error, (MemoryError, _TORCH_OOM)):
        return True
    text = str(error)
    return "can't allocate memory" in text or "out of memory" in text.lower()


def _support_bounds(trace, sites) -> Dict[str, Dict[str, torch.Tensor]]:
    """``{site: {bound: value}}``: the named bounds of the supports of ``sites`` in
    ``trace`` (``{site: {bound: ...}}``), as plain tensors."""
    out = {}
    for name, bounds in sites.items():
        support = base_constraint(trace.nodes[name]["fn"].support)
        out[name] = {
            k: torch.as_tensor(getattr(support, k)).detach().as_subclass(torch.Tensor)
            for k in bounds
        }
    return out


def _same_bound(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two values of a bound agree (shapes that broadcast: a trace with
    enumeration dimensions has them on the left)."""
    try:
        torch.broadcast_shapes(a.shape, b.shape)
    except RuntimeError:
        return False
    return bool((a.double() == b.double().to(a.device)).all())


def _describe_bound(bound: torch.Tensor) -> str:
    if bound.numel() and bool((bound == bound.reshape(-1)[0]).all()):
        return "{:g}".format(float(bound.reshape(-1)[0]))
    text = str(bound.tolist())
    return text if len(text) <= 60 else text[:57] + "..."


def _describe_shape(entry: tuple) -> str:
    """``(3,)``, or ``() with 2 categories``: an entry of the latent signature."""
    shape, categories = entry
    return str(shape) if categories is None else "{} with {} categories".format(shape, categories)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def _fmt(values: torch.Tensor) -> str:
    return "[{}]".format(", ".join("{:.6g}".format(float(v)) for v in values.reshape(-1)))


def _describe_values(values: Dict[str, torch.Tensor], index: Optional[int] = None) -> str:
    """``{'x': [0, 1], 'n': 3}``-style description of (one state of) site values."""
    parts = []
    for name, value in values.items():
        value = torch.as_tensor(value)
        if index is not None:
            value = value[index]
        value = value.detach()
        if value.is_floating_point() and bool((value == value.round()).all()):
            value = value.long()
        text = str(value.tolist())
        parts.append("'{}': {}".format(name, text if len(text) <= 80 else text[:77] + "..."))
    return "{" + ", ".join(parts) + "}"


def _log_prob_failure(site, error: BaseException, latent) -> str:
    value = site["value"]
    observed = site["is_observed"] and site["name"] not in latent
    dist_name = type(unwrap_distribution(site["fn"])).__name__
    hint = ""
    if (
        isinstance(value, torch.Tensor)
        and not value.is_floating_point()
        and not isinstance(unwrap_distribution(site["fn"]), torch.distributions.Categorical)
    ):
        hint = (
            " The {}value has the integer dtype {}, and {}.log_prob needs a floating-point "
            "value: pass it as a float tensor (e.g. obs=y.float()).".format(
                "observed " if observed else "", value.dtype, dist_name
            )
        )
    return (
        "Computing the log-probability of {}site '{}' ({}) failed at a value of dtype {} "
        "and shape {}: {}: {}.{}"
    ).format(
        "observed " if observed else "latent ",
        site["name"],
        dist_name,
        getattr(value, "dtype", type(value).__name__),
        tuple(getattr(value, "shape", ())),
        type(error).__name__,
        _first_line(error),
        hint,
    )


def _note_model_error(error: BaseException) -> None:
    """Add a note to an error raised inside the model (where Python has ``add_note``)."""
    note = "(raised while pyro-gwg ran the model)"
    if hasattr(error, "add_note") and note not in getattr(error, "__notes__", ()):
        error.add_note(note)
