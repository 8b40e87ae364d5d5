r"""Pyro-trace plumbing shared by the model bridge, the ArviZ converter, exact enumeration,
the continuous targets and :class:`~pyro_gwg.kernels.mixed.MixedGibbs`.

This is the one module of pyro-gwg that relies on Pyro's internals; every other module
reaches them through the functions here, and ``tests/test__trace.py`` checks each
internal it uses, so that a Pyro release that changes one fails there, by name:

* the trace of the sites recorded before a model raised, ``msngr.trace`` of the
  handler ``pyro.poutine.trace`` returns (:func:`trace_model`'s ``on_error``);
* the distribution ``pyro.poutine.subsample_messenger._Subsample`` of the sample site
  that a ``pyro.plate`` records (:func:`is_subsample`, :func:`check_full_plates`);
* the ``infer`` keys that mark ``pyro.factor`` (``is_auxiliary``) and
  ``pyro.deterministic`` (``_deterministic``) sites (:func:`is_factor`);
* the trace's tensor packing (``Trace.pack_tensors``, ``plate_to_symbol``,
  ``symbol_to_dim``, ``site["packed"]``) and ``pyro.ops.contract.contract_to_tensor``,
  with which :func:`contract_enumerated` sums enumerated sites out as Pyro's
  ``TraceEinsumEvaluator`` does;
* the local variables of ``pyro.infer.mcmc.api``'s sequential runner
  ``_UnarySampler.run`` (``i``, ``self.num_chains``), found on the call stack
  (:func:`pyro_sequential_chain`);
* the private attributes of Pyro's HMC/NUTS (``_max_plate_nesting``,
  ``_jit_compile``) and of ``pyro.infer.MCMC`` (``_args``, ``_kwargs``, ``_samples``,
  ``_diagnostics``) (:func:`kernel_max_plate_nesting`, :func:`kernel_jit_compiles`,
  :func:`run_arguments`, :func:`run_has_samples`, :func:`run_chain_statistics`).

Shapes: a model run *batched* over ``B`` states (chains or draws) runs inside an outer
``pyro.plate`` of size ``B`` at dimension ``-(max_plate_nesting + 1)``, left of the
model's own plates; enumeration dimensions lie left of that.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Union

import pyro
import pyro.poutine as poutine
import torch
from opt_einsum import shared_intermediates
from pyro.distributions.util import scale_and_mask
from pyro.infer.autoguide.initialization import InitMessenger
from pyro.ops.contract import contract_to_tensor
from pyro.poutine.subsample_messenger import _Subsample

from pyro_gwg.sites import UnsupportedModelError

__all__ = [
    "SITE_KINDS",
    "check_full_plates",
    "check_max_plate_nesting",
    "contract_enumerated",
    "guess_max_plate_nesting",
    "in_batch_plate",
    "is_enumerated",
    "is_factor",
    "is_subsample",
    "kernel_jit_compiles",
    "kernel_max_plate_nesting",
    "model_at",
    "run_arguments",
    "run_chain_statistics",
    "run_has_samples",
    "sample_sites",
    "scaled_log_prob",
    "trace_model",
]

#: the kinds of sample sites :func:`sample_sites` selects: ``"latent"`` (not observed,
#: enumerated ones included), ``"observed"`` (observed data: neither ``pyro.factor``
#: nor ``pyro.deterministic``) and ``"factor"`` (``pyro.factor`` and
#: ``pyro.deterministic``)
SITE_KINDS = ("latent", "observed", "factor")

Site = dict


# ---------------------------------------------------------------------- running the model
def trace_model(
    model: Callable,
    args: tuple = (),
    kwargs: Optional[dict] = None,
    *,
    init_strategy: Optional[Callable] = None,
    on_error: Optional[Callable] = None,
):
    """Run ``model`` once under :func:`pyro.poutine.trace`, blocked from any handler
    outside (so that an enclosing trace or ``pyro.infer`` run does not see it).

    :param callable model: a Pyro model.
    :param tuple args: its positional arguments.
    :param dict kwargs: its keyword arguments.
    :param callable init_strategy: a Pyro per-site initialisation function (e.g.
        :func:`~pyro.infer.autoguide.initialization.init_to_sample`) that sets the
        values of the latent sites; ``None`` samples them from the model.
    :param callable on_error: called as ``on_error(error, partial_trace)`` when the
        model raises, with the trace of the sites recorded before the error; it may
        raise a clearer error (else the model's error propagates).
    :returns: the trace.
    :rtype: ~pyro.poutine.trace_struct.Trace
    """
    if init_strategy is not None:
        model = InitMessenger(init_strategy)(model)
    tracer = poutine.trace(model)
    with poutine.block():
        try:
            return tracer.get_trace(*args, **(kwargs or {}))
        except Exception as error:
            if on_error is not None:
                on_error(error, tracer.msngr.trace)
            raise


def in_batch_plate(model: Callable, name: str, size: int, max_plate_nesting: int) -> Callable:
    """``model`` run inside an outer ``pyro.plate(name, size)`` at dimension
    ``-(max_plate_nesting + 1)``: left of every plate of the model, so that a model
    written to broadcast evaluates ``size`` states at once.

    :param callable model: a Pyro model.
    :param str name: the plate's name (one the model does not use).
    :param int size: the number of states ``B``.
    :param int max_plate_nesting: the model's plate nesting.
    :rtype: callable
    """

    def batched(*args, **kwargs):
        with pyro.plate(name, size, dim=-1 - max_plate_nesting):
            return model(*args, **kwargs)

    return batched


def model_at(
    model: Callable,
    values: Mapping[str, torch.Tensor],
    max_plate_nesting: int,
    *,
    batch: Optional[Tuple[str, int]] = None,
    enumerated: bool = False,
) -> Callable:
    """``model`` conditioned on ``values``, run inside a batch plate when ``batch`` is
    given, with its sites marked ``infer={"enumerate": "parallel"}`` enumerated in
    parallel (in dimensions left of the batch plate) when ``enumerated``.

    :param callable model: a Pyro model.
    :param dict values: ``{site: value}``; batched values carry the batch dimension at
        ``-(max_plate_nesting + 1)`` (left of the site's event dimensions).
    :param int max_plate_nesting: the model's plate nesting.
    :param tuple batch: ``(plate name, number of states)``, or ``None`` for one state.
    :param bool enumerated: enumerate the marked sites.
    :rtype: callable
    """
    model = poutine.condition(model, data=dict(values))
    if batch is not None:
        model = in_batch_plate(model, batch[0], batch[1], max_plate_nesting)
    if enumerated:
        first_dim = -1 - max_plate_nesting - int(batch is not None)
        model = poutine.enum(model, first_available_dim=first_dim)
    return model


# ---------------------------------------------------------------------- sites
def is_subsample(site: Site) -> bool:
    """Whether ``site`` is the sample site a ``pyro.plate`` records for its indices
    (no random variable of the model).

    :param dict site: a trace node.
    """
    return site["type"] == "sample" and isinstance(site["fn"], _Subsample)


def is_factor(site: Site) -> bool:
    """Whether the observed ``site`` is a ``pyro.factor`` or ``pyro.deterministic``
    site rather than observed data.

    :param dict site: a trace node.
    """
    infer = site["infer"]
    return bool(site["is_observed"] and (infer.get("is_auxiliary") or infer.get("_deterministic")))


def is_enumerated(site: Site) -> bool:
    """Whether the latent ``site`` is marked ``infer={"enumerate": "parallel"}``.

    :param dict site: a trace node.
    """
    return not site["is_observed"] and site["infer"].get("enumerate") == "parallel"


def sample_sites(trace, kind: Optional[str] = None) -> Iterator[Site]:
    """The sample sites of ``trace`` in model order, without the sites of plates'
    indices: all of them, or those of one of :data:`SITE_KINDS`.

    :param trace: a Pyro trace.
    :param str kind: ``"latent"``, ``"observed"``, ``"factor"`` or ``None`` (all).
    :raises ValueError: for another ``kind``.
    """
    if kind is not None and kind not in SITE_KINDS:
        raise ValueError(
            "kind must be one of {} or None, got {!r}".format(", ".join(SITE_KINDS), kind)
        )
    for site in trace.nodes.values():
        if site["type"] != "sample" or is_subsample(site):
            continue
        if kind is None:
            yield site
        elif kind == "latent":
            if not site["is_observed"]:
                yield site
        elif site["is_observed"] and is_factor(site) == (kind == "factor"):
            yield site


def scaled_log_prob(site: Site, value: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The log-probability of a sample site as it enters the log joint: its
    distribution's ``log_prob`` at its value (or at ``value``), times the scale of the
    site's handlers, with masked-out elements zero.

    :param dict site: a trace node of type ``"sample"``.
    :param torch.Tensor value: the value to evaluate at (default: the site's value).
    :rtype: torch.Tensor
    """
    value = site["value"] if value is None else value
    log_prob = site["fn"].log_prob(value, *site["args"], **site["kwargs"])
    return scale_and_mask(log_prob, site["scale"], site["mask"])


# ---------------------------------------------------------------------- plates
def check_full_plates(trace, why: str) -> None:
    """Refuse a trace in which a ``pyro.plate`` subsamples its elements.

    :param trace: a Pyro trace.
    :param str why: why the caller needs every element (one clause, no full stop).
    :raises UnsupportedModelError: naming the plate and its sizes.
    """
    for name, site in trace.nodes.items():
        if not is_subsample(site):
            continue
        fn = site["fn"]
        if fn.subsample_size is not None and fn.subsample_size < fn.size:
            raise UnsupportedModelError(
                "pyro.plate '{}' subsamples {} of {} elements: {}. Use the full plate "
                "(subsample_size=None).".format(name, fn.subsample_size, fn.size, why)
            )


def guess_max_plate_nesting(
    trace, with_site: bool = False
) -> Union[int, Tuple[int, Optional[str]]]:
    """The deepest plate dimension or batch rank of any sample site (at least 0).

    :param trace: a Pyro trace.
    :param bool with_site: also return the name of a site at that depth (``None``
        when the depth is 0).
    :returns: ``depth``, or ``(depth, site name)`` with ``with_site``.
    """
    depth, deepest = 0, None
    for site in sample_sites(trace):
        dims = [-f.dim for f in site["cond_indep_stack"] if f.vectorized]
        site_depth = max([len(site["fn"].batch_shape)] + dims)
        if site_depth > depth:
            depth, deepest = site_depth, site["name"]
    return (depth, deepest) if with_site else depth


def check_max_plate_nesting(trace, given: Optional[int]) -> int:
    """``given``, checked against the sites of ``trace``, or the depth guessed from them
    when ``given`` is ``None``.

    :param trace: a Pyro trace.
    :param int given: the caller's bound on nested plates, or ``None``.
    :raises ValueError: when a site uses more batch dimensions than ``given``, naming it.
    :rtype: int
    """
    depth, deepest = guess_max_plate_nesting(trace, with_site=True)
    if given is None:
        return depth
    if given < depth:
        raise ValueError(
            "max_plate_nesting={} is too small: site '{}' uses {} batch dimensions. "
            "Pass max_plate_nesting={} or more, or leave it None to have it "
            "guessed.".format(given, deepest, depth, depth)
        )
    return int(given)


# ---------------------------------------------------------------------- enumeration
def contract_enumerated(
    trace, log_probs: Mapping[str, torch.Tensor], batch_plate: Optional[str] = None
) -> torch.Tensor:
    r"""Sum the enumerated sites of ``trace`` out of its log joint, as Pyro's
    ``TraceEinsumEvaluator`` does: the product over plates and the sum over
    enumeration dimensions of :math:`\exp` of every site's log-probability factor,
    in log space.

    The sites' ``log_prob`` entries are set to ``log_probs`` (the trace is changed).

    :param trace: a trace of the model run under :func:`model_at` with ``enumerated``.
    :param dict log_probs: ``{site: log-probability}`` of every sample site (see
        :func:`scaled_log_prob`), in the dtype of the result.
    :param str batch_plate: the name of the batch plate to keep (see
        :func:`model_at`), or ``None`` to reduce every plate.
    :returns: the log joint, ``[B]`` with a batch plate, else a scalar.
    :rtype: torch.Tensor
    """
    sites = list(sample_sites(trace))
    for site in sites:
        site["log_prob"] = site["unscaled_log_prob"] = log_probs[site["name"]]
    trace.pack_tensors()
    log_factors: Dict[frozenset, List[torch.Tensor]] = OrderedDict()
    for site in sites:
        ordinal = frozenset(
            trace.plate_to_symbol[f.name] for f in site["cond_indep_stack"] if f.vectorized
        )
        log_factors.setdefault(ordinal, []).append(site["packed"]["log_prob"])
    sum_dims = set(trace.symbol_to_dim) - set(trace.plate_to_symbol.values())
    target = frozenset() if batch_plate is None else frozenset([trace.plate_to_symbol[batch_plate]])
    with shared_intermediates() as cache:
        return contract_to_tensor(log_factors, sum_dims, target_ordinal=target, cache=cache)


# ---------------------------------------------------------------------- Pyro's runners
def kernel_max_plate_nesting(kernel) -> Optional[int]:
    """The ``max_plate_nesting`` a kernel was given (a pyro-gwg kernel's public
    attribute, or the private one of Pyro's HMC and NUTS), or ``None``.

    :param kernel: an MCMC kernel.
    """
    for attribute in ("max_plate_nesting", "_max_plate_nesting"):
        value = getattr(kernel, attribute, None)
        if isinstance(value, int):
            return value
    return None


def kernel_jit_compiles(kernel) -> bool:
    """Whether Pyro's HMC or NUTS kernel ``kernel`` compiles its potential energy
    (``jit_compile=True``).

    :param kernel: a Pyro MCMC kernel.
    """
    return bool(getattr(kernel, "_jit_compile", False))


def run_arguments(mcmc) -> Tuple[tuple, dict]:
    """The model arguments ``(args, kwargs)`` of the last run of ``mcmc``
    (:class:`pyro.infer.MCMC` or a runner with its interface); empty before a run.

    :param mcmc: an MCMC runner.
    """
    return tuple(getattr(mcmc, "_args", None) or ()), dict(getattr(mcmc, "_kwargs", None) or {})


def _running_locals(function: Optional[Callable]) -> dict:
    """The local variables of the innermost frame on the call stack that runs
    ``function`` (found by its code object), or ``{}`` where none does (or where
    ``function`` is ``None``: a Pyro version without it)."""
    code = getattr(function, "__code__", None)
    frame = sys._getframe(1)
    while frame is not None and code is not None:
        if frame.f_code is code:
            return frame.f_locals
        frame = frame.f_back
    return {}


def pyro_sequential_chain() -> Optional[Tuple[int, int, int]]:
    """``(chain, number of chains, chain)`` where the caller runs inside the chains that
    :class:`pyro.infer.MCMC` runs one after the other (``_UnarySampler.run``, found on
    the call stack), else ``None``: the kernel's warnings come once per run, not once
    per chain (see :class:`~pyro_gwg.kernels.base.DiscreteKernel`).

    :rtype: tuple or None
    """
    from pyro.infer.mcmc import api

    found = _running_locals(getattr(getattr(api, "_UnarySampler", None), "run", None))
    chain, sampler = found.get("i"), found.get("self")
    if isinstance(chain, int) and isinstance(getattr(sampler, "num_chains", None), int):
        return chain, sampler.num_chains, chain
    return None


def run_has_samples(mcmc) -> bool:
    """Whether a :class:`pyro.infer.MCMC` run holds samples (it has run, and its last
    run did not raise).

    :param ~pyro.infer.mcmc.api.MCMC mcmc: a Pyro MCMC runner.
    """
    return getattr(mcmc, "_samples", None) is not None


def run_chain_statistics(mcmc) -> Optional[List[Mapping]]:
    """The kernel's per-draw statistics of each chain of a :class:`pyro.infer.MCMC`
    run, ``[{stat: value}]`` in chain order, without the site diagnostics
    ``mcmc.diagnostics()`` adds (Pyro's ESS of every site needs ``T x T`` memory per
    coordinate); ``None`` where the run holds none.

    :param ~pyro.infer.mcmc.api.MCMC mcmc: a Pyro MCMC runner.
    """
    per_chain = getattr(mcmc, "_diagnostics", None)
    if isinstance(per_chain, list) and per_chain and all(isinstance(d, Mapping) for d in per_chain):
        return per_chain
    return None
