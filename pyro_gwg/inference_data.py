r"""Conversion of an MCMC run to ArviZ ``InferenceData``, and its draws in the model's
own types.

:func:`typed_samples` returns the draws of :class:`pyro.infer.MCMC` or
:class:`pyro_gwg.MCMC` with each site's own dtype (``Categorical`` indices as
``torch.long``), as :class:`pyro.infer.Predictive` needs them.

:func:`to_inference_data` reads a finished run of :class:`pyro.infer.MCMC` or of any
runner with the same interface (``kernel`` with a ``model``, ``_args``, ``_kwargs``,
``get_samples(group_by_chain=True)`` and ``diagnostics()`` returning
``{stat: {"chain i": value}}``), and builds the groups itself:

* ``posterior``: every sampled site, ``(chain, draw, ...)``; discrete sites as integers
  of the smallest type that holds them (read straight from the stored codes of a
  :class:`pyro_gwg.MCMC` run);
* ``sample_stats``: the per-draw statistics of the kernel (``acceptance_rate``,
  ``accepted``, ``lp``, ``n_changed``, ``step_size``, evaluation counts, ...) and
  ``diverging``;
* ``observed_data`` and ``log_likelihood``: the observed sites, and their pointwise
  log-likelihood at every posterior draw, with enumerated sites summed out;
* ``posterior_predictive``, ``prior`` and ``prior_predictive``: draws given as
  :func:`arviz.from_pyro` takes them (e.g. from :class:`pyro.infer.Predictive`).

Chains are ordered by their index, whatever their number.
"""

from __future__ import annotations

import datetime
import math
import re
import warnings
from collections import OrderedDict
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pyro
import torch
from pyro.infer.mcmc.api import MCMC as _PyroMCMC

from pyro_gwg import _trace
from pyro_gwg.mcmc import MCMC as _BatchedMCMC
from pyro_gwg.runner.draws import smallest_int_dtype
from pyro_gwg.sites import support_is_discrete

__all__ = ["to_inference_data", "typed_samples"]

_DRAW_PLATE = "_pyro_gwg_draws"
_SAMPLE_DIMS = ("chain", "draw")
# kernel statistics under the names ArviZ and its users expect; others keep their name
_STAT_NAMES = {
    "accept_prob": "acceptance_rate",
    "log_joint": "lp",
    "num_changed": "n_changed",
    "energy_evals": "n_energy_evals",
    "grad_evals": "n_grad_evals",
}
_CHAIN_KEY = re.compile(r"chain (\d+)")
# tensor elements of one batched run of the model (bounds memory, not results)
_ELEMENTS_PER_RUN = 2**22


def to_inference_data(
    mcmc,
    *,
    posterior_predictive: Optional[Mapping[str, torch.Tensor]] = None,
    prior: Optional[Mapping[str, torch.Tensor]] = None,
    coords: Optional[Mapping[str, Sequence]] = None,
    dims: Optional[Mapping[str, Sequence[str]]] = None,
    log_likelihood: bool = True,
):
    r"""Convert a finished MCMC run to ArviZ ``InferenceData``.

    Works with :class:`pyro.infer.MCMC` and any runner with its interface, for any number
    of chains (ordered by index: ``chain 10`` comes after ``chain 9``).

    **posterior.** Every sampled site, shaped ``(chain, draw, *value_shape)``. Discrete
    sites hold integers of the smallest type that holds their draws (``int8`` for
    binary, categorical and small counts) and keep the value the model sees: a
    ``Categorical`` site its category index, a ``OneHotCategorical`` site its one-hot
    vector (so that its posterior mean is the probability of each category), a
    ``Bernoulli``, ``Binomial``, ``Poisson``... site its count. Continuous sites keep
    their floats, as does every site when the kernel has no ``model`` to read the
    sites from. Dimensions inside a ``pyro.plate`` are named after the plate.

    **sample_stats.** Each per-draw statistic of the kernel, ``(chain, draw)``:
    ``acceptance_rate`` (the Metropolis-Hastings acceptance probability of the step),
    ``accepted``, ``lp`` (the log joint), ``n_changed`` (coordinates changed by the
    proposal), ``step_size`` and the evaluation counts ``n_energy_evals`` and
    ``n_grad_evals`` where the kernel records them, other per-draw statistics under
    their own name (a kernel's prefix kept: MixedGibbs's ``discrete accept_prob`` is
    ``discrete_acceptance_rate``), and ``diverging`` (``False`` except at the
    divergences the kernel reports). Per-chain summaries (``acceptance rate``, the
    mean of ``accepted``) are not repeated; a statistic whose length differs from the
    number of draws is left out with a warning.

    **observed_data, log_likelihood.** Each observed site (``pyro.factor`` and
    ``pyro.deterministic`` excluded) and its pointwise log-likelihood
    :math:`\ell_i` at every posterior draw :math:`\theta`, shaped
    ``(chain, draw, *batch_shape)``, as the term enters the model's log joint (scale
    and mask applied). The model is run conditioned on the draws, batched over draws in
    a plate left of the model's plates where the model broadcasts (as batched chains
    need), else draw by draw.

    Sites marked ``infer={"enumerate": "parallel"}`` are summed out, not drawn:

    .. math:: \ell_i(\theta) = \log p(y \mid \theta) - \log p(y_{-i} \mid \theta)
              = \log p(y_i \mid y_{-i}, \theta),

    where :math:`p(y_{-i} \mid \theta)` is the marginal likelihood with the term of
    observation :math:`i` removed. This is exactly what PSIS-LOO and WAIC need: the
    leave-one-out posterior is the posterior divided by :math:`e^{\ell_i}`. When the
    enumerated sites an observation depends on are local to its plate (mixture
    assignments), it is that observation's marginal likelihood
    :math:`\log \sum_z p(z \mid \theta)\, p(y_i \mid z, \theta)`, and the
    :math:`\ell_i` sum to :math:`\log p(y \mid \theta)`. When an enumerated site is
    shared by several observations (a global regime or change point), it is the
    predictive of :math:`y_i` given the others, and the :math:`\ell_i` do not sum to
    :math:`\log p(y \mid \theta)`. It is computed in one pass as
    :math:`-\log \mathbb E_{p(z \mid y, \theta)}[1 / p(y_i \mid z, \theta)]`, with
    the posterior marginals of the enumerated sites taken as gradients of the
    contracted log joint, in double precision.

    **posterior_predictive, prior, prior_predictive.** Draws computed after the run,
    given as :func:`arviz.from_pyro` takes them: dicts of tensors such as
    :class:`pyro.infer.Predictive` returns. A ``posterior_predictive`` value shaped
    ``[num_chains * num_draws, ...]`` (``Predictive`` given
    ``typed_samples(mcmc)``, the draws of chain 0 first) is split into
    ``(chain, draw, ...)``, one already shaped ``[num_chains, num_draws, ...]`` is
    kept, any other is one chain (with a warning that names it). The ``prior`` draws
    ``[num_prior_draws, ...]`` (``Predictive(model, num_samples=...)``) get one chain:
    the latent sites (sampled by the run or enumerated) go to the ``prior`` group
    (discrete sites as integers, as in ``posterior``), the others (the simulated
    observations) to ``prior_predictive``. Dimensions are named after the plates, as elsewhere.

    Example::

        mcmc = pyro.infer.MCMC(GWG(model), num_samples=1000, num_chains=4)
        mcmc.run(data)
        predictive = Predictive(model, posterior_samples=pyro_gwg.typed_samples(mcmc))
        prior = Predictive(model, num_samples=500)(None)
        idata = pyro_gwg.to_inference_data(
            mcmc, posterior_predictive=predictive(None), prior=prior,
            coords={"points": names},
        )
        arviz.summary(idata)
        arviz.loo(idata)

    :param ~pyro.infer.mcmc.api.MCMC mcmc: a finished run: :class:`pyro.infer.MCMC`,
        :class:`pyro_gwg.MCMC` or another runner with their interface (a run
        interrupted by Ctrl-C gives its partial draws, with a warning).
    :param dict posterior_predictive: ``{name: tensor}`` of posterior predictive
        draws, ``[num_chains * num_draws, ...]`` or ``[num_chains, num_draws, ...]``.
    :param dict prior: ``{name: tensor}`` of prior (and prior predictive) draws
        ``[num_prior_draws, ...]``.
    :param dict coords: coordinate values by dimension name (each a one-dimensional
        sequence with one value per index of the dimension); dimensions without them
        get ``0, 1, ...``.
    :param dict dims: dimension names by variable name (each a list of strings,
        without ``chain`` and ``draw``), overriding the plate names; a log-likelihood
        variable uses the leading dimensions of its observed site.
    :param bool log_likelihood: compute the ``log_likelihood`` group.
    :returns: ``arviz.InferenceData`` (ArviZ 0.x), or an ``xarray.DataTree`` with the
        same groups (ArviZ 1.x).
    :raises RuntimeError: for a run that has not run (or whose last run raised).
    :raises TypeError: for arguments of the wrong type.
    :raises ValueError: for ``dims`` or ``coords`` that do not fit the variables.
    :raises ~pyro_gwg.sites.UnsupportedModelError: for a model whose ``pyro.plate``
        subsamples its elements.
    """
    coords = _check_coords(coords)
    dims = _check_dims(dims)
    if not isinstance(log_likelihood, (bool, np.bool_)):
        raise TypeError(
            "log_likelihood must be True or False, got {!r} of type {}.".format(
                log_likelihood, type(log_likelihood).__name__
            )
        )
    samples, per_chain = _read_run(mcmc)
    num_chains, num_draws = next(iter(samples.values())).shape[:2]
    kernel = getattr(mcmc, "kernel", None)
    model = getattr(kernel, "model", None)
    view = None
    if model is not None:
        args, kwargs = _trace.run_arguments(mcmc)
        with torch.random.fork_rng(devices=[]):  # keep the caller's random state
            view = _ModelView(model, args, kwargs, _trace.kernel_max_plate_nesting(kernel))

    groups = OrderedDict()  # group: (arrays, dims, has chain and draw dims)
    posterior, posterior_dims = _posterior(samples, view)
    groups["posterior"] = (posterior, _override(posterior_dims, dims, posterior), True)
    if posterior_predictive is not None:
        draws = _predictive(posterior_predictive, "posterior_predictive", num_chains, num_draws)
        groups["posterior_predictive"] = _drawn_group(draws, view, dims)
    if prior is not None:
        draws = _predictive(prior, "prior", 1, None)
        latent = set(samples) | (set(view.latent) | set(view.enumerated) if view else set())
        in_prior = OrderedDict((n, v) for n, v in draws.items() if n in latent)
        arrays, prior_dims = _posterior(in_prior, view)
        groups["prior"] = (arrays, _override(prior_dims, dims, arrays), True)
        others = OrderedDict((n, v) for n, v in draws.items() if n not in latent)
        if others:
            groups["prior_predictive"] = _drawn_group(others, view, dims)
    stats = _sample_stats(per_chain, num_chains, num_draws)
    groups["sample_stats"] = (stats, _override({}, dims, stats), True)
    if view is not None and view.observed:
        observed = {n: _numpy(s["value"]) for n, s in view.observed.items()}
        observed_dims = {n: view.dims(n, a.shape) for n, a in observed.items()}
        observed_dims = _override(observed_dims, dims, observed)
        if log_likelihood and view.can_condition(samples):
            with torch.random.fork_rng(devices=[]):
                pointwise = view.log_likelihood(samples)
            ll_dims = {}
            for name, array in pointwise.items():
                array = array.reshape((num_chains, num_draws) + array.shape[1:])
                pointwise[name] = array
                ll_dims[name] = _leading_dims(
                    observed_dims[name], observed[name].shape, array.shape[2:], name
                )
            groups["log_likelihood"] = (pointwise, ll_dims, True)
        groups["observed_data"] = (observed, observed_dims, False)
    elif log_likelihood and model is None:
        warnings.warn(
            "The MCMC kernel has no model attribute: no observed_data or log_likelihood.",
            UserWarning,
            stacklevel=2,
        )

    variables = {name for arrays, _, _ in groups.values() for name in arrays}
    unknown = sorted(set(dims) - variables)
    if unknown:
        raise ValueError(
            "dims names {} that the run does not have; its variables are {}.".format(
                ", ".join(map(repr, unknown)), ", ".join(map(repr, sorted(variables)))
            )
        )
    attrs = _attrs(kernel)
    datasets = OrderedDict(
        (group, _dataset(arrays, var_dims, coords, sampled, attrs))
        for group, (arrays, var_dims, sampled) in groups.items()
    )
    if _arviz_major() >= 1:  # ArviZ 1.x: InferenceData is an xarray.DataTree
        import xarray

        return xarray.DataTree.from_dict(dict(datasets))
    import arviz

    return arviz.InferenceData(**datasets)


def typed_samples(
    mcmc, num_samples: Optional[int] = None, group_by_chain: bool = False
) -> Dict[str, torch.Tensor]:
    """The draws of an MCMC run with each site's own dtype, as the model's distributions
    sample them: ``Categorical`` indices (and other integer-valued sites) as
    ``torch.long``, ``Bernoulli``, ``Binomial``, ``OneHotCategorical``... values as
    floats, continuous sites as floats.

    :class:`pyro.infer.MCMC` stores the draws of all sites in one floating-point
    tensor, so its ``get_samples()`` returns ``Categorical`` indices as floats, which
    a model that indexes with them (``locs[z]``) refuses, e.g. in
    :class:`pyro.infer.Predictive`. This converts them: the dtype of each site is read
    from one run of the model on the run's arguments (integer draws are rounded
    first). It works for :class:`pyro_gwg.MCMC` too (whose ``get_samples()`` already
    returns ``Categorical`` sites as ``long``). Sites the model does not have, and
    every site of a kernel without a model, keep the runner's dtype.

    Example::

        mcmc = pyro.infer.MCMC(GWG(model), num_samples=500, num_chains=4)
        mcmc.run(data)
        predictive = Predictive(model, posterior_samples=pyro_gwg.typed_samples(mcmc))
        simulated = predictive(None)

    :param mcmc: a finished run: :class:`pyro.infer.MCMC`, :class:`pyro_gwg.MCMC` or
        another runner with their interface.
    :param int num_samples: as in ``get_samples``: this many draws picked at random.
    :param bool group_by_chain: as in ``get_samples``: keep the chain dimension.
    :returns: ``{site: tensor}`` shaped as ``mcmc.get_samples`` shapes them.
    :rtype: dict
    :raises RuntimeError: for a run that has not run (or whose last run raised).
    :raises TypeError: for an object that is not an MCMC run.
    """
    _check_run(mcmc, "typed_samples")
    samples = mcmc.get_samples(num_samples=num_samples, group_by_chain=group_by_chain)
    model = getattr(getattr(mcmc, "kernel", None), "model", None)
    if model is None:
        return dict(samples)
    args, kwargs = _trace.run_arguments(mcmc)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):  # the caller's random state
        trace = _trace.trace_model(model, args, kwargs)
    dtypes = {site["name"]: site["value"].dtype for site in _trace.sample_sites(trace)}
    return {
        name: _as_dtype(value, dtypes[name]) if name in dtypes else value
        for name, value in samples.items()
    }


def _check_run(mcmc, caller: str) -> None:
    """A clear error for ``mcmc`` that is no MCMC run, or a Pyro run without draws."""
    if not callable(getattr(mcmc, "get_samples", None)) or not callable(
        getattr(mcmc, "diagnostics", None)
    ):
        raise TypeError(
            "{} needs an MCMC run: pyro.infer.MCMC, pyro_gwg.MCMC or an "
            "object with get_samples(group_by_chain=True) and diagnostics(); got "
            "{}.".format(caller, type(mcmc).__name__)
        )
    if isinstance(mcmc, _PyroMCMC) and not _trace.run_has_samples(mcmc):
        message = "The pyro.infer.MCMC object has no samples: call mcmc.run(...) before {}(mcmc)."
        raise RuntimeError(message.format(caller))


def _as_dtype(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Draws ``value`` as ``dtype`` (floats rounded first where ``dtype`` is integer)."""
    if not dtype.is_floating_point and value.is_floating_point():
        value = value.round()
    return value.to(dtype)


def _read_run(mcmc) -> Tuple[Dict[str, torch.Tensor], Mapping]:
    """The draws ``{site: [C, T, ...]}`` and the per-chain statistics ``{stat:
    {"chain i": value}}`` of a finished run; a clear error for anything else."""
    if isinstance(mcmc, _BatchedMCMC):
        # integers straight from the stored codes (and the continuous sites' values of
        # a MixedGibbs or HMC/NUTS run); no site diagnostics are needed
        draws = mcmc.draws
        samples = OrderedDict(draws.integer_samples())
        samples.update(draws.continuous)
        return samples, draws.chain_statistics()
    _check_run(mcmc, "to_inference_data")
    pyro_run = isinstance(mcmc, _PyroMCMC)
    samples = mcmc.get_samples(group_by_chain=True)
    if not isinstance(samples, Mapping):
        raise TypeError(
            "mcmc.get_samples(group_by_chain=True) returned {}, not a dict of "
            "[chain, draw, ...] tensors.".format(type(samples).__name__)
        )
    if not samples:
        raise ValueError("The MCMC run has no samples; call mcmc.run(...) first.")
    for name, value in samples.items():
        if not isinstance(value, torch.Tensor) or value.dim() < 2:
            raise ValueError(
                "The samples of '{}' are not a tensor shaped [chain, draw, ...]; "
                "to_inference_data reads get_samples(group_by_chain=True).".format(name)
            )
    per_chain = _trace.run_chain_statistics(mcmc) if pyro_run else None
    if per_chain is not None:
        # the kernel's statistics without Pyro's ESS of every site (T^2 memory per
        # coordinate for long chains), as mcmc.diagnostics() would compute them
        per_chain = OrderedDict(
            (name, {"chain {}".format(c): d[name] for c, d in enumerate(per_chain)})
            for name in per_chain[0]
        )
    else:
        per_chain = mcmc.diagnostics()
    return OrderedDict(samples), per_chain


def _check_coords(coords) -> Dict[str, np.ndarray]:
    if coords is None:
        return {}
    if not isinstance(coords, Mapping):
        raise TypeError(
            "coords must be a dict {{dimension name: coordinate values}}, got {}.".format(
                type(coords).__name__
            )
        )
    out = {}
    for dim, values in coords.items():
        if not isinstance(dim, str):
            raise TypeError("coords keys must be dimension names (strings), got {!r}.".format(dim))
        if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
            raise TypeError(
                "coords['{}'] must be a sequence of coordinate values (a list, tuple or "
                "one-dimensional array), got {!r}.".format(dim, values)
            )
        array = np.asarray(values.cpu() if isinstance(values, torch.Tensor) else values)
        if array.ndim != 1:
            raise ValueError(
                "coords['{}'] must be one-dimensional (one value per index), got shape {}.".format(
                    dim, array.shape
                )
            )
        out[dim] = array
    return out


def _check_dims(dims) -> Dict[str, List[str]]:
    if dims is None:
        return {}
    if not isinstance(dims, Mapping):
        raise TypeError(
            "dims must be a dict {{variable name: list of dimension names}}, got {}.".format(
                type(dims).__name__
            )
        )
    out = {}
    for name, names in dims.items():
        if isinstance(names, str):
            raise TypeError(
                "dims['{}'] must be a list of dimension names, got the string {!r}; for "
                "one dimension write [{!r}].".format(name, names, names)
            )
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
            raise TypeError(
                "dims['{}'] must be a list of dimension names (strings), got {!r}.".format(
                    name, names
                )
            )
        reserved = [n for n in names if n in _SAMPLE_DIMS]
        if reserved:
            raise ValueError(
                "dims['{}'] names {}, which to_inference_data adds itself; list the "
                "dimensions after chain and draw only.".format(name, reserved)
            )
        out[name] = list(names)
    return out


# ---------------------------------------------------------------------- the model


class _NotBatchable(Exception):
    """The model cannot run batched over draws."""


class _ModelView:
    """The sites of a model, read from one prior trace, and its pointwise likelihood."""

    def __init__(self, model, args: tuple, kwargs: dict, max_plate_nesting: Optional[int]):
        self.model, self.args, self.kwargs = model, args, kwargs
        trace = self._trace(model)
        _trace.check_full_plates(
            trace,
            "the observed data and their pointwise log-likelihood would be those of a "
            "random subset, another one at every run of the model",
        )
        self.latent: Dict[str, dict] = OrderedDict()
        self.observed: Dict[str, dict] = OrderedDict()
        self.enumerated: List[str] = []
        self.point_shapes: Dict[str, Tuple[int, ...]] = {}
        elements, enum_size = 0, 1
        for site in _trace.sample_sites(trace):
            name, fn = site["name"], site["fn"]
            elements += site["value"].numel()
            if _trace.is_factor(site):
                continue
            if site["is_observed"]:
                self.observed[name] = site
                log_prob = _trace.scaled_log_prob(site)
                self.point_shapes[name] = tuple(log_prob.shape)
                elements += log_prob.numel()
            elif _trace.is_enumerated(site):
                self.enumerated.append(name)
                enum_size = max(enum_size, fn.enumerate_support(expand=False).shape[0])
            else:
                self.latent[name] = site
        if max_plate_nesting is None:
            max_plate_nesting = _trace.guess_max_plate_nesting(trace)
        self.max_plate_nesting = max_plate_nesting
        self.draws_per_run = max(1, _ELEMENTS_PER_RUN // max(1, elements * enum_size))

    def _trace(self, model):
        with torch.no_grad():
            return _trace.trace_model(model, self.args, self.kwargs)

    # ---------------------------------------------------------------- naming
    def dims(self, name: str, shape: Sequence[int]) -> List[str]:
        """Dimension names of a value of site ``name`` (plates where they match)."""
        site = self.latent.get(name) or self.observed.get(name)
        names = ["{}_dim_{}".format(name, i) for i in range(len(shape))]
        if site is None:
            return names
        batch_rank = len(shape) - len(site["fn"].event_shape)
        for frame in site["cond_indep_stack"]:
            if not frame.vectorized or frame.name in _SAMPLE_DIMS:
                continue
            position = batch_rank + frame.dim
            if 0 <= position < batch_rank and shape[position] == frame.size:
                names[position] = frame.name
        return names

    def is_discrete(self, name: str) -> bool:
        site = self.latent.get(name)
        if site is None:
            return False
        discrete = support_is_discrete(site["fn"].support)
        if discrete is None:  # a support that depends on other values: typed by its values
            return not site["value"].is_floating_point()
        return discrete

    # ---------------------------------------------------------------- evaluation
    def can_condition(self, samples: Mapping[str, torch.Tensor]) -> bool:
        missing = [name for name in self.latent if name not in samples]
        if missing:
            warnings.warn(
                "Latent site(s) {} of the model have no samples (neither sampled nor "
                "marked infer={{'enumerate': 'parallel'}}); no log_likelihood "
                "group.".format(", ".join(missing)),
                UserWarning,
                stacklevel=3,
            )
        return not missing

    def log_likelihood(self, samples: Mapping[str, torch.Tensor]) -> Dict[str, np.ndarray]:
        """Pointwise log-likelihood ``{name: [S, *point_shape]}`` of all draws."""
        values = {}
        for name in self.latent:
            value = samples[name]
            values[name] = value.reshape((-1,) + tuple(value.shape[2:]))
        num_draws = next(iter(samples.values())).shape[:2].numel()
        if num_draws > 1 and self._broadcasts(values, num_draws):
            size = self.draws_per_run
            runs = [
                self._run(self._typed(values, slice(start, start + size)), batched=True)
                for start in range(0, num_draws, size)
            ]
        else:
            runs = [
                {n: ll.unsqueeze(0) for n, ll in self._run(self._typed(values, s), False).items()}
                for s in range(num_draws)
            ]
        return {name: torch.cat([r[name] for r in runs]).numpy() for name in self.observed}

    def _typed(self, values: Mapping[str, torch.Tensor], index) -> Dict[str, torch.Tensor]:
        """The draws ``index`` of ``values``, in the types of the model's values (the
        draws are converted a run at a time, never all at once)."""
        return {
            name: _as_dtype(value[index], self.latent[name]["value"].dtype)
            for name, value in values.items()
        }

    def _broadcasts(self, values: Dict[str, torch.Tensor], num_draws: int) -> bool:
        """Whether the model run batched over two distinct draws gives what it gives
        run once per draw."""
        other = num_draws - 1
        for s in range(1, num_draws):
            if any(not torch.equal(v[s], v[0]) for v in values.values()):
                other = s
                break
        probe = [0, other]
        try:
            batched = self._run(self._typed(values, probe), batched=True)
        except Exception:  # whatever fails batched is run draw by draw
            return False
        singles = [self._run(self._typed(values, s), False) for s in probe]
        return all(
            torch.allclose(
                batched[n],
                torch.stack([s[n] for s in singles]),
                rtol=1e-4,
                atol=1e-5,
                equal_nan=True,
            )
            for n in self.observed
        )

    def _run(self, values: Dict[str, torch.Tensor], batched: bool) -> Dict[str, torch.Tensor]:
        """Pointwise log-likelihood of each observed site, float64: ``[S, *point_shape]``
        for values ``[S, *value_shape]`` (``batched``), else ``point_shape`` for the
        values of one draw."""
        depth = self.max_plate_nesting
        num_draws = next(iter(values.values())).shape[0] if batched and values else 1
        data = values
        if batched:
            data = {}
            for name, value in values.items():
                event_rank = len(self.latent[name]["fn"].event_shape)
                pad = depth - (value.dim() - 1 - event_rank)
                if pad < 0:
                    raise _NotBatchable(name)
                data[name] = value.reshape((num_draws,) + (1,) * pad + tuple(value.shape[1:]))
        model = _trace.model_at(
            self.model,
            data,
            depth,
            batch=(_DRAW_PLATE, num_draws) if batched else None,
            enumerated=bool(self.enumerated),
        )
        trace = self._trace(model)
        keep = depth + int(batched)  # trailing dims that are not enumeration dims
        pointwise = _pointwise(trace, self.observed, keep, batched, bool(self.enumerated))
        out = {}
        for name, value in pointwise.items():
            shape = self.point_shapes[name]
            full = ((num_draws,) + (1,) * (depth - len(shape)) if batched else ()) + shape
            if value.dim() > len(full):
                if batched:
                    raise _NotBatchable(name)
                raise ValueError(
                    "The log-probability of observed site '{}' has shape {}, more batch "
                    "dimensions than max_plate_nesting={} allows.".format(
                        name, tuple(value.shape), depth
                    )
                )
            value = value.reshape((1,) * (len(full) - value.dim()) + tuple(value.shape))
            value = value.expand(full).reshape(((num_draws,) if batched else ()) + shape)
            out[name] = value.detach().cpu()
        return out


def _pointwise(
    trace, observed: Mapping[str, dict], keep: int, batched: bool, enumerated: bool
) -> Dict[str, torch.Tensor]:
    """``{name: pointwise log-likelihood}`` of the observed sites of a trace (enumerated
    when ``enumerated``), in double precision; the ``keep`` trailing dimensions are
    the draw and plate dimensions, any others enumeration dimensions (see
    :func:`to_inference_data` for the definition)."""
    factors = {
        site["name"]: _trace.scaled_log_prob(site).double() for site in _trace.sample_sites(trace)
    }
    if not enumerated or not any(factors[name].dim() > keep for name in observed):
        return {name: factors[name] for name in observed}
    # Some observations depend on enumerated sites: the posterior marginals q of those
    # sites at each observation are the gradients of the contracted log joint with
    # respect to the observation's term l, and l_i = -log sum_z q_i(z) exp(-l_i(z)).
    with torch.enable_grad():
        leaves = OrderedDict()
        for name in observed:
            if factors[name].dim() > keep:
                factors[name] = leaves[name] = factors[name].detach().requires_grad_()
        log_evidence = _trace.contract_enumerated(trace, factors, _DRAW_PLATE if batched else None)
        marginals = torch.autograd.grad(log_evidence.sum(), list(leaves.values()))
    out = {}
    for name in observed:
        term = factors[name].detach()
        if name in leaves:
            q = marginals[list(leaves).index(name)]
            log_ratio = torch.where(q > 0, q.clamp(min=1e-300).log() - term, -math.inf)
            term = -log_ratio.reshape((-1,) + tuple(term.shape[term.dim() - keep :])).logsumexp(0)
        out[name] = term
    return out


# ---------------------------------------------------------------------- groups


def _posterior(samples: Mapping[str, torch.Tensor], view: Optional[_ModelView]):
    arrays, var_dims = OrderedDict(), {}
    for name, value in samples.items():
        value = value.detach().cpu()
        if view is not None and view.is_discrete(name):
            value = _as_integers(value)
        arrays[name] = _numpy(value)
        if view is not None:
            var_dims[name] = view.dims(name, value.shape[2:])
    return arrays, var_dims


def _predictive(
    draws, group: str, num_chains: int, num_draws: Optional[int]
) -> Dict[str, torch.Tensor]:
    """The draws ``{name: tensor}`` of a group given as :func:`arviz.from_pyro` takes
    them, shaped ``(chain, draw, ...)``: ``[num_chains, num_draws, ...]`` kept,
    ``[num_chains * num_draws, ...]`` split by chain, anything else one chain (with a
    warning when ``num_draws`` is given, that is for posterior draws)."""
    if not isinstance(draws, Mapping):
        raise TypeError(
            "{} must be a dict {{name: tensor of draws}} (as pyro.infer.Predictive returns), "
            "got {}.".format(group, type(draws).__name__)
        )
    out, unmatched = OrderedDict(), []
    for name, value in draws.items():
        if not isinstance(value, (torch.Tensor, np.ndarray)) or value.ndim < 1:
            raise TypeError(
                "{}[{!r}] must be a tensor of draws with a leading draw dimension, got "
                "{!r}.".format(group, name, value)
            )
        value = torch.as_tensor(value).detach().cpu()
        shape = tuple(value.shape)
        if num_draws is not None and shape[:2] == (num_chains, num_draws):
            out[name] = value
        elif num_draws is not None and shape[0] == num_chains * num_draws:
            out[name] = value.reshape((num_chains, num_draws) + shape[1:])
        else:
            if num_draws is not None:
                unmatched.append("{!r} {}".format(name, list(shape)))
            out[name] = value.unsqueeze(0)
    if unmatched:
        warnings.warn(
            "{} {} not shaped [num_chains * num_draws, ...] = [{}, ...] or [num_chains, "
            "num_draws, ...] = [{}, {}, ...]: each is stored as one chain of all its "
            "draws. Pass draws computed from all of the run's samples (e.g. "
            "Predictive(model, posterior_samples=typed_samples(mcmc))) to keep the "
            "chains.".format(
                group,
                ", ".join(unmatched),
                num_chains * num_draws,
                num_chains,
                num_draws,
            ),
            UserWarning,
            stacklevel=3,
        )
    return out


def _drawn_group(draws: Mapping[str, torch.Tensor], view: Optional[_ModelView], dims):
    """``(arrays, dims, True)`` of a group of drawn values ``(chain, draw, ...)``,
    dimensions named after the plates of the sites they are draws of."""
    arrays = OrderedDict((name, _numpy(value)) for name, value in draws.items())
    own = {}
    if view is not None:
        own = {name: view.dims(name, array.shape[2:]) for name, array in arrays.items()}
    return arrays, _override(own, dims, arrays), True


def _as_integers(value: torch.Tensor) -> torch.Tensor:
    """Discrete draws as integers of the smallest type that holds them."""
    if value.numel() == 0:
        return value.to(torch.int8)
    dtype = smallest_int_dtype(float(value.min()), float(value.max()))
    if value.dtype == dtype:
        return value
    return (value.round() if value.is_floating_point() else value).to(dtype)


def _sample_stats(diagnostics: Mapping, num_chains: int, num_draws: int) -> Dict[str, np.ndarray]:
    """Per-draw statistics ``(chain, draw, ...)`` from ``{stat: {"chain i": value}}``."""
    stats: Dict[str, np.ndarray] = OrderedDict()
    diverging = np.zeros((num_chains, num_draws), dtype=bool)
    for key, per_chain in diagnostics.items():
        chains = _by_chain(per_chain, num_chains)
        if chains is None:  # not a per-chain statistic (e.g. r_hat of a site)
            continue
        if key == "divergences":
            for c, draws in enumerate(chains):
                index = np.asarray(_numpy(draws), dtype=np.int64).reshape(-1)
                diverging[c, index[(index >= 0) & (index < num_draws)]] = True
            continue
        arrays = [_numpy(value) for value in chains]
        if any(a.ndim == 0 for a in arrays):  # one number per chain (acceptance rate)
            continue
        lengths = {a.shape[0] for a in arrays}
        if lengths != {num_draws}:
            warnings.warn(
                "Diagnostic '{}' has {} entries per chain for {} draws; left out of "
                "sample_stats.".format(key, sorted(lengths), num_draws),
                UserWarning,
                stacklevel=3,
            )
            continue
        stats[_stat_name(key)] = np.stack(arrays)
    stats["diverging"] = diverging
    return stats


def _stat_name(key: str) -> str:
    """``accept_prob`` -> ``acceptance_rate``; ``discrete accept_prob`` (a statistic
    of one kernel of several) -> ``discrete_acceptance_rate``."""
    head, _, tail = str(key).rpartition(" ")
    name = _STAT_NAMES.get(tail, tail)
    return "{}_{}".format(head.replace(" ", "_"), name) if head else name


def _by_chain(per_chain, num_chains: int) -> Optional[list]:
    """The values of ``{"chain i": value}`` in chain order, or ``None``."""
    if not isinstance(per_chain, Mapping):
        return None
    index = {}
    for key in per_chain:
        match = _CHAIN_KEY.fullmatch(str(key))
        if match is None:
            return None
        index[int(match.group(1))] = per_chain[key]
    if sorted(index) != list(range(num_chains)):
        return None
    return [index[c] for c in range(num_chains)]


def _override(default: Mapping[str, List[str]], user: Mapping[str, List[str]], arrays) -> dict:
    """Dims by variable: the user's where given, else the default."""
    return {name: user.get(name, default.get(name)) for name in arrays}


def _leading_dims(
    names: Sequence[str], shape: Sequence[int], point_shape: Sequence[int], var: str
) -> List[str]:
    """Dims of a log-likelihood variable: the leading dims of its observed site."""
    names = list(names)
    if len(names) >= len(point_shape) and tuple(shape[: len(point_shape)]) == tuple(point_shape):
        return names[: len(point_shape)]
    return ["{}_dim_{}".format(var, i) for i in range(len(point_shape))]


def _dataset(arrays, var_dims, coords, sampled: bool, attrs):
    import xarray

    data_vars, used = {}, {}
    lead = list(_SAMPLE_DIMS) if sampled else []
    for name, array in arrays.items():
        own = var_dims.get(name)
        rank = array.ndim - len(lead)
        if own is None:
            own = ["{}_dim_{}".format(name, i) for i in range(rank)]
        if len(own) != rank:
            raise ValueError(
                "dims of '{}' name {} dimension(s), {}, for values with {} dimension(s){}.".format(
                    name, len(own), list(own), rank, " besides chain and draw" if sampled else ""
                )
            )
        names = lead + list(own)
        data_vars[name] = (names, array)
        used.update(zip(names, array.shape))
        for dim, size in zip(names, array.shape):
            if dim in coords and len(coords[dim]) != size:
                raise ValueError(
                    "coords['{}'] has {} value(s), but dimension '{}' of '{}' has size {}.".format(
                        dim, len(coords[dim]), dim, name, size
                    )
                )
    dataset_coords = {
        d: np.asarray(coords[d]) if d in coords else np.arange(size) for d, size in used.items()
    }
    return xarray.Dataset(data_vars, coords=dataset_coords, attrs=dict(attrs))


def _attrs(kernel) -> Dict[str, str]:
    import arviz

    return {
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "arviz_version": arviz.__version__,
        "inference_library": "pyro",
        "inference_library_version": pyro.__version__,
        "sampler": type(kernel).__name__,
    }


def _arviz_major() -> int:
    import arviz

    return int(arviz.__version__.split(".")[0])


def _numpy(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
        return torch.stack([torch.as_tensor(v) for v in value]).detach().cpu().numpy()
    return np.asarray(value)
