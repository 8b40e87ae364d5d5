r"""What a model must satisfy, and how it is checked.

Every state of the latent sites must give a trace with the same latent sites and the
same supports. At set-up the model is run once with every latent value *tainted*
(:mod:`pyro_gwg._taint`): a support computed from another latent value is refused
(or, where it only broadcasts against one, checked at other states and at every
evaluation), and Python control flow that reads a latent value (``if x.item():``) is
recorded; such a model runs eagerly, one state at a time, with the latent sites of
every trace compared with the first one, and the states next to the initial one are
probed at set-up. The log density at the initial state is evaluated twice: a model
that draws random numbers outside ``pyro.sample`` is refused. A ``Categorical`` site
used beyond its own log-probability (an index) is reported once.
"""

from __future__ import annotations

import math
import os
import traceback
from typing import Dict, List, Optional, Tuple

import pyro
import pyro.poutine as poutine
import torch
from torch.distributions import Categorical

from pyro_gwg import _trace
from pyro_gwg._taint import Read, sources_of, trace_reads, user_location
from pyro_gwg._warn import name_list, warn
from pyro_gwg.bridge.errors import describe_values, out_of_memory, structure_error, support_error
from pyro_gwg.sites import (
    CATEGORICAL,
    DiscreteSite,
    UnsupportedModelError,
    base_constraint,
    classify_site,
    unwrap_distribution,
)

__all__ = ["StructureChecks", "same_bound", "support_bounds"]

# model runs spent at set-up probing states next to the initial one (value-read models)
_MAX_STRUCTURE_PROBES = 64
# the code of torch's and Pyro's distributions (see _refuse_invalid_distribution)
_DISTRIBUTION_DIRS = tuple(
    os.path.dirname(os.path.abspath(module.__file__)) + os.sep
    for module in (torch.distributions, pyro.distributions)
)


class StructureChecks:
    """The structure and taint checks of
    :class:`~pyro_gwg.bridge.density.ModelDensity` (a part of it: it runs the
    energy's model and reads its sites)."""

    sites: List[DiscreteSite]
    value_reads: List[Read]

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
                describe_values(values) if values else "{}",
                type(error).__name__,
                # (the text before the shapes Pyro appends, on one line)
                " ".join(str(error).split("Trace Shapes:")[0].split()),
            )
        ) from error

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
                tr = self._run_model(poutine.condition(self._model(), data=values))
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
        reference = support_bounds(trace, suspects)
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
                    found = support_bounds(
                        self._run_model(poutine.condition(self._model(), data=values)), suspects
                    )
            except UnsupportedModelError:
                raise
            except Exception as error:  # a state the model cannot run: no evidence either way
                if out_of_memory(error):
                    raise
                continue
            self._check_bounds(reference, found, values, suspects)
        self._fixed_bounds, self._bound_sources = reference, suspects

    def _check_bounds(self, reference, found, values, sources) -> None:
        """Raise :func:`~pyro_gwg.bridge.errors.support_error` for the first bound of
        ``found`` that differs from ``reference`` (both ``{site: {bound: value}}``) at
        the state ``values``."""
        for name, bounds in reference.items():
            varying = [k for k in bounds if not same_bound(bounds[k], found[name][k])]
            if varying:
                site = next(s for s in self.sites if s.name == name)
                raise support_error(site, varying, sources[name], reference, found, values)

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

    def _check_signature(self, trace, values, num_chains: int) -> None:
        """Raise when the latent sites of ``trace`` differ from the first trace's."""
        signature = self._latent_signature(trace, num_chains)
        if signature != self._signature:
            raise structure_error(self._signature, signature, values, num_chains, self.value_reads)

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
                        describe_values(self.values_from_codes(state), index=0),
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


def support_bounds(trace, sites) -> Dict[str, Dict[str, torch.Tensor]]:
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


def same_bound(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two values of a bound agree (shapes that broadcast: a trace with
    enumeration dimensions has them on the left)."""
    try:
        torch.broadcast_shapes(a.shape, b.shape)
    except RuntimeError:
        return False
    return bool((a.double() == b.double().to(a.device)).all())
