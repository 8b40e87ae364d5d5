r"""The per-site plan of :class:`~pyro_gwg.Auto`: which move each latent site gets, and why.

:func:`make_plan` reads a model's trace and gives every latent site one move:

* ``"enumerate"``: the site is summed out of the density by parallel enumeration, as
  Pyro's ``TraceEnum_ELBO`` and NUTS do (every ``infer={"enumerate": "parallel"}``
  mark the model carries is kept). A site is summed out automatically when it can be
  (:func:`enumeration_obstacle` finds nothing against it) and the enumerated tensors
  stay within a budget of elements (:func:`enumeration_cost`).
* ``"Gibbs"``: exact single-site Gibbs (every value of a coordinate scored in one
  batched run of the model) for index sites (``Categorical``, whose integer value
  carries no gradient) and ordinal sites.
* ``"GWG"``: Gibbs-with-gradients for binary and one-hot sites, whose gradient
  ranks the moves of many coupled coordinates at once (Gibbs when the model samples
  fewer than 4 such coordinates).
* Sampled sites given different kernels are updated in turn, each with the others
  held fixed (:class:`~pyro_gwg.auto.sweep.Sweep`).
* ``"NUTS"``: Pyro's NUTS for the continuous sites, composed with the discrete moves
  as :class:`~pyro_gwg.MixedGibbs` does.

Every choice can be overridden per site (``Auto(model, sites={"z": "Gibbs"})``); the
plan prints as a table with the reasons and the estimated costs.

**When is parallel enumeration exact?** It evaluates the model once with each
enumerated site holding *every* value of its support along a new tensor dimension,
and one value for all the elements of a plate: the result is the marginal only if
no element of a plate reads the site at another element (conditional independence
along the plate, which ``pyro.plate`` declares but does not check). A model that
couples a plate's elements (``x[..., 1:] * x[..., :-1]``, ``x @ W``) runs without
error under enumeration and gives a wrong density. :func:`enumeration_obstacle`
checks it by probing: it moves one element of the site at a time, at a few states of
the model, and requires that every log-probability factor that changes lies in the
site's plates at the moved element's index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import pyro.poutine as poutine
import torch
from torch.distributions import constraints

from pyro_gwg import _trace
from pyro_gwg.enumeration import with_enumeration
from pyro_gwg.sites import (
    UnsupportedModelError,
    base_constraint,
    support_is_discrete,
    unwrap_distribution,
)

__all__ = [
    "DEFAULT_BUDGET",
    "MOVES",
    "Plan",
    "SitePlan",
    "enumeration_cost",
    "enumeration_obstacle",
    "make_plan",
    "value_batch_shape",
]

#: largest number of elements of one enumerated log-probability tensor
#: (``2 ** 20``: 8 MB in float64)
DEFAULT_BUDGET = 2**20
#: moves a site may be given besides a discrete kernel's name (see :data:`MOVES`)
ENUMERATE, NUTS = "enumerate", "NUTS"
#: the moves of a plan: summing out, NUTS, and the discrete kernels Auto chooses among
MOVES = (ENUMERATE, NUTS, "Gibbs", "GWG")
#: elements of a plated site moved one at a time by the probes, at each probed state
_PROBE_ELEMENTS = 4
#: states of the model at which the probes run (the initial one, then prior draws)
_PROBE_STATES = 2
#: the move of a sampled discrete site before its kernel is chosen
_SAMPLED = "sampled"
#: binary and one-hot coordinates below which Gibbs is chosen over gradient moves
_GRADIENT_MIN_COORDS = 4


@dataclass(frozen=True)
class SitePlan:
    """The move of one latent site.

    :ivar str name: the site.
    :ivar str kind: ``"binary"``, ``"one-hot"``, ``"index"``, ``"ordinal"`` or
        ``"continuous"``.
    :ivar int size: number of scalar elements (coordinates) of its value.
    :ivar str move: ``"enumerate"``, ``"NUTS"`` or a discrete kernel's name.
    :ivar str reason: why, in words.
    """

    name: str
    kind: str
    size: int
    move: str
    reason: str


@dataclass(frozen=True)
class Plan:
    """What :class:`~pyro_gwg.Auto` runs: one :class:`SitePlan` per latent site, in
    model order.

    :ivar tuple sites: the site plans.
    :ivar int enumerated_elements: elements of the largest enumerated
        log-probability tensor (0 without enumeration).
    :ivar int budget: the budget it was held to.
    """

    sites: Tuple[SitePlan, ...]
    enumerated_elements: int
    budget: int

    def names(self, move: str) -> List[str]:
        """The sites given ``move``, in model order.

        :param str move: a move.
        :rtype: list
        """
        return [site.name for site in self.sites if site.move == move]

    @property
    def enumerated(self) -> List[str]:
        """The sites summed out."""
        return self.names(ENUMERATE)

    @property
    def continuous(self) -> List[str]:
        """The sites NUTS samples."""
        return self.names(NUTS)

    @property
    def discrete_moves(self) -> Dict[str, List[str]]:
        """``{kernel name: sites}`` for the sampled discrete sites, in model order."""
        moves: Dict[str, List[str]] = {}
        for site in self.sites:
            if site.move not in (ENUMERATE, NUTS):
                moves.setdefault(site.move, []).append(site.name)
        return moves

    def __str__(self) -> str:
        rows = [("site", "kind", "size", "move", "why")]
        rows += [(s.name, s.kind, str(s.size), s.move, s.reason) for s in self.sites]
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4] for row in rows
        ]
        if self.enumerated:
            lines.append(
                "enumeration: largest tensor {:,} elements (budget {:,})".format(
                    self.enumerated_elements, self.budget
                )
            )
        return "\n".join(lines)


# ---------------------------------------------------------------------- site kinds
def site_kind(site) -> str:
    """The kind of a latent site (see :class:`SitePlan`)."""
    fn = site["fn"]
    if not support_is_discrete(fn.support):
        return "continuous"
    support = base_constraint(fn.support)
    if isinstance(support, type(constraints.boolean)):
        return "binary"
    if isinstance(support, type(constraints.one_hot)):
        return "one-hot"
    if isinstance(support, constraints.integer_interval) and _is_index(fn):
        return "index"
    return "ordinal"


def _is_index(fn) -> bool:
    return isinstance(unwrap_distribution(fn), torch.distributions.Categorical)


def _plated_dims(site) -> Dict[int, object]:
    """``{dim: frame}`` of the vectorised plates of ``site``."""
    return {f.dim: f for f in site["cond_indep_stack"] if f.vectorized and f.dim is not None}


def _num_coords(site) -> int:
    """Scalar elements of a site's value (one per one-hot vector)."""
    value = site["value"]
    return value.numel() // (value.shape[-1] if site_kind(site) == "one-hot" else 1)


def value_batch_shape(site) -> torch.Size:
    """The batch shape of a site's value (its shape without the event dimensions)."""
    value = site["value"]
    return value.shape[: value.dim() - site["fn"].event_dim]


# ---------------------------------------------------------------------- enumeration
def enumeration_obstacle(
    model: Callable,
    args: tuple,
    kwargs: dict,
    traces: Sequence,
    name: str,
) -> Optional[str]:
    """Why summing site ``name`` out by parallel enumeration would be wrong or
    impossible, or ``None`` when nothing was found against it (see the module
    docstring).

    :param callable model: the model.
    :param tuple args: its positional arguments.
    :param dict kwargs: its keyword arguments.
    :param traces: traces of the model at the states to probe (the first one gives
        the site's shape).
    :param str name: a latent discrete site.
    :rtype: str or None
    """
    site = traces[0].nodes[name]
    fn = site["fn"]
    if not fn.has_enumerate_support:
        return "{} has no enumerable support".format(type(fn).__name__)
    one_hot = isinstance(base_constraint(fn.support), type(constraints.one_hot))
    if fn.event_dim > int(one_hot):
        return "its value has event dimensions (to_event): enumeration would list every joint value"
    frames = _plated_dims(site)
    batch_shape = value_batch_shape(site)
    for dim in range(-len(batch_shape), 0):
        if batch_shape[dim] > 1 and dim not in frames:
            return (
                "its batch dimension {} (size {}) is not a pyro.plate: enumeration would give "
                "all its elements one value".format(dim, batch_shape[dim])
            )
    if not frames or batch_shape.numel() == 1:
        return None  # one element: any site may read it
    for trace in traces:
        found = _probe(model, args, kwargs, trace, name, frames, batch_shape)
        if found is not None:
            return found
    return None


def _probe_indices(batch_shape: torch.Size) -> List[int]:
    """Flat indices of the elements the probes move: the first, the last and ones
    spread between them."""
    n = batch_shape.numel()
    return sorted({round(i * (n - 1) / (_PROBE_ELEMENTS - 1)) for i in range(_PROBE_ELEMENTS)})


def _moved(value: torch.Tensor, fn, flat_index: int, batch_shape: torch.Size) -> torch.Tensor:
    """``value`` with one element moved to another value of its support."""
    support = fn.enumerate_support(expand=False)  # [K, 1, ..., 1(, K)]
    values = support.reshape(support.shape[0], -1)  # [K, 1] or [K, K] for one-hot
    moved = value.clone().reshape((batch_shape.numel(),) + value.shape[len(batch_shape) :])
    current = moved[flat_index]
    for candidate in values:
        candidate = candidate.reshape(current.shape) if current.dim() else candidate[0]
        if not torch.equal(candidate.to(current.dtype), current):
            moved[flat_index] = candidate.to(current.dtype)
            return moved.reshape(value.shape)
    return value  # a support of one value


def _probe(model, args, kwargs, trace, name, frames, batch_shape) -> Optional[str]:
    latent = {
        s["name"]: s["value"] for s in _trace.sample_sites(trace, "latent") if s["name"] != name
    }
    base = _log_probs(model, args, kwargs, {**latent, name: trace.nodes[name]["value"]})
    if base is None:
        return None  # the state is not a valid one of the model: nothing to compare
    fn = trace.nodes[name]["fn"]
    value = trace.nodes[name]["value"]
    for flat_index in _probe_indices(batch_shape):
        moved = _moved(value, fn, flat_index, batch_shape)
        after = _log_probs(model, args, kwargs, {**latent, name: moved})
        if after is None or set(after) != set(base):
            return "the model's sample sites change with its value"
        position = dict(zip(range(-len(batch_shape), 0), _unravel(flat_index, batch_shape)))
        for other, (log_prob, stack) in after.items():
            before = base[other][0]
            if log_prob.shape != before.shape:
                return "the shape of site '{}' changes with its value".format(other)
            changed = ~torch.isclose(log_prob, before, rtol=1e-9, atol=1e-12, equal_nan=True)
            if not changed.any():
                continue
            for dim, frame in frames.items():
                if frame.name not in stack:
                    return (
                        "site '{}', outside its plate '{}', reads it: enumeration gives every "
                        "element of the plate one value".format(other, frame.name)
                    )
                if -dim > changed.dim():
                    continue
                elsewhere = changed.movedim(dim, 0).clone()
                elsewhere[position[dim]] = False
                if elsewhere.any():
                    return (
                        "one of its elements changes site '{}' at other elements of plate "
                        "'{}': the model couples the plate's elements, which enumeration "
                        "treats as independent".format(other, frame.name)
                    )
    return None


def _unravel(flat_index: int, shape: torch.Size) -> List[int]:
    out = []
    for size in reversed(shape):
        out.append(flat_index % size)
        flat_index //= size
    return out[::-1]


def _log_probs(model, args, kwargs, values) -> Optional[Dict[str, Tuple[torch.Tensor, frozenset]]]:
    """``{site: (log-probability, names of its plates)}`` of every sample site of
    ``model`` conditioned on ``values``; ``None`` where the model raises there."""
    try:
        trace = _trace.trace_model(
            with_enumeration(poutine.condition(model, data=values), ()), args, kwargs
        )
    except Exception:  # a state the model cannot run (e.g. a moved value ruled out)
        return None
    out = {}
    for site in _trace.sample_sites(trace):
        stack = frozenset(f.name for f in site["cond_indep_stack"])
        out[site["name"]] = (_trace.scaled_log_prob(site).detach(), stack)
    return out


def enumeration_cost(
    model: Callable, args: tuple, kwargs: dict, enumerated: Iterable[str], max_plate_nesting: int
) -> int:
    """Elements of the largest log-probability tensor of ``model`` with the sites
    ``enumerated`` summed out in parallel (the size of its largest factor; with
    ``pyro.markov`` Pyro recycles the dimensions of sites left behind). The density
    is contracted once, so that a model Pyro cannot enumerate raises here.

    :raises Exception: whatever Pyro raises for a model it cannot enumerate.
    :rtype: int
    """
    marked = with_enumeration(model, enumerated)
    enumerated_model = poutine.enum(marked, first_available_dim=-1 - max_plate_nesting)
    trace = _trace.trace_model(enumerated_model, args, kwargs)
    log_probs = {s["name"]: _trace.scaled_log_prob(s).double() for s in _trace.sample_sites(trace)}
    largest = max((t.numel() for t in log_probs.values()), default=0)
    result = _trace.contract_enumerated(trace, log_probs)
    if result.numel() != 1 or torch.isnan(result).any():
        raise ValueError("the enumerated density is not a scalar")
    return largest


# ---------------------------------------------------------------------- the plan
def make_plan(
    model: Callable,
    args: tuple = (),
    kwargs: Optional[dict] = None,
    *,
    sites: Optional[Mapping[str, str]] = None,
    budget: int = DEFAULT_BUDGET,
    max_plate_nesting: Optional[int] = None,
    init_strategy: Optional[Callable] = None,
    kernels: Iterable[str] = (),
) -> Plan:
    """The plan of :class:`~pyro_gwg.Auto` for ``model`` at these arguments.

    :param callable model: a Pyro model.
    :param tuple args: its positional arguments.
    :param dict kwargs: its keyword arguments.
    :param dict sites: per-site overrides ``{site: move}``, a move being
        ``"enumerate"``, ``"NUTS"`` or the name of a pyro-gwg kernel (``kernels``).
    :param int budget: largest number of elements of an enumerated tensor.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param callable init_strategy: sets the values of the trace the plan reads.
    :param kernels: the names of the discrete kernels an override may give.
    :raises ValueError: for an override naming no latent site, an unknown move, or a
        move the site cannot take.
    :rtype: Plan
    """
    kwargs = kwargs or {}
    overrides = dict(sites or {})
    trace = _trace.trace_model(model, args, kwargs, init_strategy=init_strategy)
    if max_plate_nesting is None:
        max_plate_nesting = _trace.guess_max_plate_nesting(trace)
    latent = list(_trace.sample_sites(trace, "latent"))
    _check_overrides(overrides, latent, frozenset(kernels) | {ENUMERATE, NUTS})
    traces = [trace] + [
        _trace.trace_model(with_enumeration(model, ()), args, kwargs)
        for _ in range(_PROBE_STATES - 1)
    ]
    decided: Dict[str, Tuple[str, str]] = {}
    candidates: List[str] = []
    enumerated: List[str] = []
    for site in latent:
        name, kind = site["name"], site_kind(site)
        if name in overrides and overrides[name] != ENUMERATE:
            decided[name] = (overrides[name], "set by the user")
        elif kind == "continuous":
            decided[name] = (NUTS, "continuous")
        elif name in overrides or _trace.is_enumerated(site):
            obstacle = enumeration_obstacle(model, args, kwargs, traces, name)
            if obstacle is not None:
                raise UnsupportedModelError(
                    "Site '{}' is {} but cannot be summed out exactly: {}. Sample it "
                    "instead: Auto(model, sites={{{!r}: 'Gibbs'}}) (or 'GWG').".format(
                        name,
                        "set to 'enumerate'"
                        if name in overrides
                        else "marked infer={'enumerate': 'parallel'}",
                        obstacle,
                        name,
                    )
                )
            why = "set by the user" if name in overrides else "marked for enumeration by the model"
            decided[name] = (ENUMERATE, why)
            enumerated.append(name)
        else:
            obstacle = enumeration_obstacle(model, args, kwargs, traces, name)
            if obstacle is None:
                candidates.append(name)
            else:
                decided[name] = (_SAMPLED, "not summed out: " + obstacle)
    largest = _cost_or_none(model, args, kwargs, enumerated, max_plate_nesting)
    if largest is None and enumerated:
        raise UnsupportedModelError(
            "Pyro cannot sum out the sites {} (marked for enumeration) of this model; "
            "sample them instead: Auto(model, sites={{{}}}).".format(
                enumerated, ", ".join("{!r}: 'GWG'".format(n) for n in enumerated)
            )
        )
    largest = largest or 0
    # every candidate at once first (one enumerated trace); one at a time only when
    # that fails or exceeds the budget
    joint = _cost_or_none(model, args, kwargs, enumerated + candidates, max_plate_nesting)
    if candidates and joint is not None and joint <= budget:
        for name in candidates:
            decided[name] = (ENUMERATE, "summed out; largest tensor {:,}".format(joint))
        enumerated += candidates
        largest, candidates = max(largest, joint), []
    for name in candidates:
        cost = _cost_or_none(model, args, kwargs, enumerated + [name], max_plate_nesting)
        if cost is not None and cost <= budget:
            enumerated.append(name)
            largest = max(largest, cost)
            decided[name] = (ENUMERATE, "summed out; largest tensor {:,}".format(cost))
        else:
            why = (
                "Pyro's enumeration fails on the model"
                if cost is None
                else "its enumerated tensor ({:,}) exceeds the budget".format(cost)
            )
            decided[name] = (_SAMPLED, "not summed out: " + why)
    _choose_kernel(decided, {s["name"]: s for s in latent})
    plans = tuple(
        SitePlan(
            s["name"],
            site_kind(s),
            _num_coords(s),
            *decided[s["name"]],
        )
        for s in latent
    )
    return Plan(plans, largest, budget)


def _cost_or_none(model, args, kwargs, enumerated, max_plate_nesting) -> Optional[int]:
    if not enumerated:
        return 0
    try:
        return enumeration_cost(model, args, kwargs, enumerated, max_plate_nesting)
    except Exception:
        return None


def _choose_kernel(decided: Dict[str, Tuple[str, str]], latent: Dict) -> None:
    """Give each sampled discrete site (move ``_SAMPLED`` in ``decided``) its kernel:
    Gibbs for index and ordinal sites, GWG for binary and one-hot sites where the
    sampled sites hold at least 4 such coordinates (else Gibbs)."""
    sampled = [name for name, (move, _) in decided.items() if move == _SAMPLED]
    graded = sum(
        _num_coords(latent[n]) for n in sampled if site_kind(latent[n]) in ("binary", "one-hot")
    )
    for name in sampled:
        kind = site_kind(latent[name])
        if kind in ("index", "ordinal"):
            move, why = "Gibbs", "{} site: exact conditional of each coordinate".format(kind)
        elif graded < _GRADIENT_MIN_COORDS:
            move, why = "Gibbs", "{} binary/one-hot coordinates: exact conditional".format(graded)
        else:
            move = "GWG"
            why = "gradient moves: {} coupled binary/one-hot coordinates".format(graded)
        decided[name] = (move, "{}; {}".format(decided[name][1], why))


def _check_overrides(overrides: Mapping[str, str], latent, allowed: frozenset) -> None:
    kinds = {site["name"]: site_kind(site) for site in latent}
    for name, move in overrides.items():
        if name not in kinds:
            raise ValueError(
                "Auto: sites={{{!r}: ...}} names no latent site of the model (latent sites: "
                "{}).".format(name, sorted(kinds))
            )
        if move not in allowed:
            raise ValueError(
                "Auto: the move {!r} for site '{}' is not one of {}.".format(
                    move, name, sorted(allowed)
                )
            )
        continuous = kinds[name] == "continuous"
        if continuous != (move == NUTS):
            raise ValueError(
                "Auto: site '{}' is {}; it cannot take the move {!r} ({}).".format(
                    name,
                    kinds[name],
                    move,
                    "continuous sites take 'NUTS'"
                    if continuous
                    else "'NUTS' is for continuous sites",
                )
            )
