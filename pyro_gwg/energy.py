r"""The energy bridge: the log joint of a Pyro model and its gradient, per chain.

:class:`DiscreteEnergy` traces an ordinary Pyro model once, classifies every latent
discrete site (:mod:`pyro_gwg.sites`), and exposes

.. math:: f(x) = \log p(x, y) \quad\text{and}\quad \nabla f(x),

for a batch of states ``codes`` of shape ``[C, D]`` (see
:mod:`pyro_gwg.proposals.layout`). ``f`` includes every latent site, observed site
and ``pyro.factor``; scale and mask handlers are honoured. Sites marked
``infer={"enumerate": "parallel"}`` are summed out exactly, as Pyro's HMC does.

The gradient is taken with respect to the *relaxed* value the model sees: the float
value of binary and ordinal sites, the one-hot vector of ``OneHotCategorical`` sites.
``Categorical`` values are integers the model may use as indices, so no gradient
flows through them; their gradient is the site's own normalised logits (the exact
change of the site's own log-probability), and the bridge warns once when the model
uses the value beyond that. Exactness of the samplers never depends on the gradient.

One chain (``C = 1``) runs the model exactly as written. Several chains run it once,
batched, inside an outer ``pyro.plate`` at dimension ``-(max_plate_nesting + 1)``; the
first batched call checks that the model broadcasts correctly over that dimension.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from functools import partial
from typing import Dict, List, Optional, Tuple

import pyro
import pyro.poutine as poutine
import torch
import torch.nn.functional as F
from opt_einsum import shared_intermediates
from pyro.distributions.util import scale_and_mask
from pyro.infer.autoguide.initialization import InitMessenger, init_to_sample
from pyro.ops.contract import contract_to_tensor
from pyro.poutine.subsample_messenger import _Subsample

from pyro_gwg.compilation import trace_compile
from pyro_gwg.sites import (
    CATEGORICAL,
    ONE_HOT,
    DiscreteSite,
    UnsupportedModelError,
    build_layout,
    classify_site,
    unwrap_distribution,
)

__all__ = ["CHAIN_PLATE", "DiscreteEnergy"]

CHAIN_PLATE = "_pyro_gwg_chains"
_LARGE = 1e30


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
        values; the compiled function is checked against the eager one at two states.
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
        >>> f.shape, grad.shape
        (torch.Size([1]), torch.Size([1, 3, 1]))
    """

    def __init__(
        self,
        model,
        model_args: tuple = (),
        model_kwargs: Optional[dict] = None,
        *,
        max_plate_nesting: Optional[int] = None,
        jit_compile: bool = False,
        init_strategy=init_to_sample,
        max_init_tries: int = 100,
    ) -> None:
        self.model = model
        self.model_args = tuple(model_args)
        self.model_kwargs = dict(model_kwargs or {})
        self.jit_compile = jit_compile
        self.init_strategy = init_strategy
        self.max_init_tries = max_init_tries
        trace = self._prototype_trace()
        self.sites: List[DiscreteSite] = []
        self.enumerated: List[str] = []
        self._discover(trace)
        self.max_plate_nesting = (
            guess_max_plate_nesting(trace) if max_plate_nesting is None else max_plate_nesting
        )
        self._check_static_supports()
        self.device = trace.nodes[self.sites[0].name]["value"].device
        self.layout = build_layout(self.sites).to(self.device)
        self._slices = [slice(s.offset, s.offset + s.num_coords) for s in self.sites]
        self._compiled: Dict[int, object] = {}
        self._vectorization_checked = False
        self._warned_categoricals: set = set()

    # ------------------------------------------------------------------ discovery
    def _run_model(self, model):
        with poutine.block():
            return poutine.trace(model).get_trace(*self.model_args, **self.model_kwargs)

    def _prototype_trace(self):
        return self._run_model(InitMessenger(self.init_strategy)(self.model))

    def _discover(self, trace) -> None:
        for name, site in trace.nodes.items():
            if site["type"] != "sample":
                continue
            fn = site["fn"]
            if isinstance(fn, _Subsample):
                if fn.subsample_size is not None and fn.subsample_size < fn.size:
                    raise UnsupportedModelError(
                        "pyro.plate '{}' subsamples {} of {} elements: a subsampled "
                        "log density is random, which breaks Metropolis-Hastings. Use "
                        "the full plate (subsample_size=None).".format(
                            name, fn.subsample_size, fn.size
                        )
                    )
                continue
            if site["is_observed"]:
                continue
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
            self.sites.append(classify_site(name, fn, site["value"]))
        if not self.sites:
            raise UnsupportedModelError(
                "The model has no latent discrete sites to sample: every sample site "
                "is observed{}. Nothing is left for a discrete MCMC kernel.".format(
                    " or summed out by enumeration ({})".format(", ".join(self.enumerated))
                    if self.enumerated
                    else ""
                )
            )

    def _check_static_supports(self) -> None:
        """Supports read from a second prototype trace must match the first."""
        other = self._prototype_trace()
        for site in self.sites:
            node = other.nodes[site.name]
            again = classify_site(site.name, node["fn"], node["value"])
            same = again.kind == site.kind and again.num_categories == site.num_categories
            if same and site.is_scalar:
                same = torch.equal(again.lower, site.lower) and torch.equal(again.upper, site.upper)
            if not same:
                raise UnsupportedModelError(
                    "The support of latent site {} changes with the values of other "
                    "latent sites; the kernels need a fixed support. Give it a fixed "
                    "support (for example the largest one, with the dependence "
                    "expressed in a pyro.factor), or mark it "
                    "infer={{'enumerate': 'parallel'}}.".format(site.describe())
                )

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
        return {s.name: s.encode(c) for s, c in zip(self.sites, self.split(codes))}

    def codes_from_values(self, values: Dict[str, torch.Tensor]) -> torch.Tensor:
        """Flat codes ``[C, D]`` from model values ``{name: [C, *value_shape]}``."""
        missing = [s.name for s in self.sites if s.name not in values]
        if missing:
            raise ValueError("No value given for latent site(s) {}".format(missing))
        return self.join([s.decode(values[s.name]) for s in self.sites])

    # ------------------------------------------------------------------ evaluation
    # Below, ``num_chains`` is a Python int passed down (not read from tensor shapes),
    # so that traced graphs carry no shape arithmetic; ``num_chains > 1`` runs the
    # model batched over chains.
    def _trace(self, values: Dict[str, torch.Tensor], num_chains: int):
        model = poutine.condition(self.model, data=values)
        if num_chains > 1:
            model = _in_chain_plate(model, num_chains, self.max_plate_nesting)
        if self.enumerated:
            first_dim = -1 - self.max_plate_nesting - int(num_chains > 1)
            model = poutine.enum(model, first_available_dim=first_dim)
        return self._run_model(model)

    def _relaxed(self, codes: torch.Tensor, with_grad: bool) -> List[torch.Tensor]:
        """Float values ``[C, *value_shape]`` of the non-``Categorical`` sites: the
        tensors the gradient is taken with respect to."""
        relaxed = []
        for site, site_codes in zip(self.sites, self.split(codes)):
            if site.kind != CATEGORICAL:
                relaxed.append(site.encode(site_codes).requires_grad_(with_grad))
        return relaxed

    def _state_trace(self, codes: torch.Tensor, relaxed, num_chains: int):
        relaxed = list(relaxed)
        values = {}
        for site, site_codes in zip(self.sites, self.split(codes)):
            value = site_codes if site.kind == CATEGORICAL else relaxed.pop(0)
            values[site.name] = value.reshape(site.model_shape(num_chains, self.max_plate_nesting))
        return self._trace(values, num_chains)

    def _forward(self, num_chains: int, codes: torch.Tensor, *relaxed: torch.Tensor):
        """``(log_joint [C], *own_logits)``: the model run at one batch of states, with
        the own logits ``[C, n, K]`` of every (one-hot) categorical site."""
        trace = self._state_trace(codes, relaxed, num_chains)
        own = [
            self._own_logits(trace, site, num_chains) for site in self.sites if not site.is_scalar
        ]
        return (self._log_joint(trace, num_chains), *own)

    def _site_log_prob(self, site) -> torch.Tensor:
        value = site["value"]
        if site["name"] in self._one_hot_names:
            # the site's own term enters the gradient through its logits (below)
            value = value.detach()
        log_prob = site["fn"].log_prob(value, *site["args"], **site["kwargs"])
        return scale_and_mask(log_prob, site["scale"], site["mask"])

    @property
    def _one_hot_names(self):
        return {s.name for s in self.sites if s.kind == ONE_HOT}

    def _sample_nodes(self, trace):
        return [
            site
            for site in trace.nodes.values()
            if site["type"] == "sample" and not isinstance(site["fn"], _Subsample)
        ]

    def _log_joint(self, trace, num_chains: int) -> torch.Tensor:
        if self.enumerated:
            return self._contract(trace, num_chains)
        total = 0.0
        for site in self._sample_nodes(trace):
            total = total + self._chain_sum(self._site_log_prob(site), num_chains)
        total = torch.as_tensor(total).reshape(-1)
        return total if num_chains == 1 else total.expand(num_chains)

    def _chain_sum(self, log_prob: torch.Tensor, num_chains: int) -> torch.Tensor:
        if num_chains == 1:
            return log_prob.sum().reshape(1)
        batch_dims = self.max_plate_nesting + 1
        if log_prob.dim() < batch_dims:
            log_prob = log_prob.reshape((1,) * (batch_dims - log_prob.dim()) + log_prob.shape)
        return log_prob.sum(tuple(range(1, log_prob.dim()))) if log_prob.dim() > 1 else log_prob

    def _contract(self, trace, num_chains: int) -> torch.Tensor:
        for site in self._sample_nodes(trace):
            site["unscaled_log_prob"] = site["log_prob"] = self._site_log_prob(site)
        trace.pack_tensors()
        log_factors: OrderedDict[frozenset, list] = OrderedDict()
        for site in self._sample_nodes(trace):
            ordinal = frozenset(
                trace.plate_to_symbol[f.name] for f in site["cond_indep_stack"] if f.vectorized
            )
            log_factors.setdefault(ordinal, []).append(site["packed"]["log_prob"])
        sum_dims = set(trace.symbol_to_dim) - set(trace.plate_to_symbol.values())
        target = frozenset([trace.plate_to_symbol[CHAIN_PLATE]]) if num_chains > 1 else frozenset()
        with shared_intermediates() as cache:
            result = contract_to_tensor(log_factors, sum_dims, target_ordinal=target, cache=cache)
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
                    block = block + grad.reshape(block.shape)
            if site.grad_width < width:
                block = F.pad(block, (0, width - site.grad_width))
            blocks.append(block)
        grad = torch.cat(blocks, dim=1) if len(blocks) > 1 else blocks[0]
        # nan_to_num, written so that compilers vectorise it (x == x is False for NaN)
        return torch.where(grad == grad, grad.clamp(-_LARGE, _LARGE), 0.0)

    def _own_logits(self, trace, site: DiscreteSite, num_chains: int):
        logits = unwrap_distribution(trace.nodes[site.name]["fn"]).logits
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
        return log_joint.detach(), self._assemble(relaxed, grads, own)

    def traceable_value_and_grad(self, num_chains: int):
        """:meth:`value_and_grad` for ``num_chains`` chains, uncompiled and unchecked,
        for callers that trace it inside a larger function (after one call of
        :meth:`value_and_grad`, which runs the checks)."""
        return partial(self._value_and_grad, num_chains=num_chains)

    def value_and_grad(self, codes: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Log joint and packed gradient of a batch of states.

        :param torch.Tensor codes: long ``[C, D]`` states.
        :returns: ``(log_joint [C], grad [C, D, W])``, ``W`` the layout's
            ``grad_width`` (1 when every coordinate is scalar); non-finite entries are
            replaced by 0 (NaN) or +-1e30 (infinities).
        """
        num_chains = codes.shape[0]
        if num_chains > 1 and not self._vectorization_checked:
            self.check_vectorized(codes)
        if self.jit_compile:
            compiled = self._compiled.get(num_chains)
            if compiled is None:
                compiled = self._compile(codes)
            return compiled(codes)
        return self._value_and_grad(codes, num_chains)

    def log_joint(
        self, codes: torch.Tensor, batched: bool = True, differentiable: bool = False
    ) -> torch.Tensor:
        """Log joint density of a batch of states.

        :param torch.Tensor codes: long ``[C, D]`` states.
        :param bool batched: run the chains in one batched run of the model (else one
            run per chain).
        :param bool differentiable: keep the autograd graph, so that the result can be
            differentiated with respect to the model's parameters (for learning them,
            as :class:`pyro_gwg.train.PCD` does); by default no graph is built.
        :rtype: torch.Tensor
        """
        num_chains = codes.shape[0]
        if not batched and num_chains > 1:
            return torch.cat(
                [self.log_joint(c.unsqueeze(0), differentiable=differentiable) for c in codes]
            )
        with torch.set_grad_enabled(differentiable and torch.is_grad_enabled()):
            return self._forward(num_chains, codes, *self._relaxed(codes, False))[0]

    def site_log_probs(self, codes: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Per-site log-probability sums of one unbatched state ``codes [1, D]``.

        Sites whose log-probability carries enumeration dimensions report the
        log-sum-exp over them. Used to name the sites behind an invalid state.

        :rtype: dict
        """
        with torch.no_grad():
            trace = self._state_trace(codes, self._relaxed(codes, False), num_chains=1)
            out = {}
            for site in self._sample_nodes(trace):
                log_prob = self._site_log_prob(site)
                if self.enumerated and log_prob.dim() > self.max_plate_nesting:
                    keep = log_prob.shape[log_prob.dim() - self.max_plate_nesting :]
                    log_prob = log_prob.reshape((-1,) + keep).logsumexp(0)
                out[site["name"]] = log_prob.sum()
            return out

    # ------------------------------------------------------------------ batching
    def check_vectorized(self, codes: torch.Tensor) -> None:
        """Check that batched evaluation over chains equals chain-by-chain evaluation.

        :raises UnsupportedModelError: naming the first site that does not broadcast
            over the leading chain dimension.
        """
        probe = codes[:2].clone()
        probe[1] = self._perturb(probe[1:])[0]
        try:
            batched = self.log_joint(probe, batched=True)
        except Exception as e:
            raise UnsupportedModelError(
                "The model does not broadcast over a leading chain dimension, which "
                "batched chains need: {}. Write the model with pyro.plate for every "
                "batch dimension and reduce only over a site's own dimensions, keeping "
                "the plate's dimension for sites outside the plate (x.sum(-1, "
                "keepdim=True), not x.sum() or x.sum(-1)), or run chains one at a "
                'time (pyro.infer.MCMC, or chain_method="sequential").'.format(e)
            ) from e
        one_by_one = self.log_joint(probe, batched=False)
        if not torch.allclose(batched, one_by_one, rtol=1e-4, atol=1e-4):
            raise UnsupportedModelError(
                "Batched chains change the model's log density (batched {} vs one by "
                "one {}){}. The model mixes chains, typically through a reduction over "
                "all dimensions (x.sum()), a reduction that drops a plate's dimension "
                "(x.sum(-1) feeding a site outside the plate) or a reshape; write "
                "x.sum(-1, keepdim=True), use pyro.plate for batch dimensions, or run "
                'chains one at a time (pyro.infer.MCMC, or chain_method="sequential").'.format(
                    batched.tolist(), one_by_one.tolist(), self._mismatching_site(probe)
                )
            )
        self._vectorization_checked = True

    def _mismatching_site(self, probe: torch.Tensor) -> str:
        if self.enumerated:
            return ""
        with torch.no_grad():
            trace = self._state_trace(probe, self._relaxed(probe, False), probe.shape[0])
            batched = {
                s["name"]: self._chain_sum(self._site_log_prob(s), probe.shape[0])
                for s in self._sample_nodes(trace)
            }
        singles = [self.site_log_probs(probe[i : i + 1]) for i in range(probe.shape[0])]
        for name, value in batched.items():
            expected = torch.stack([s[name] for s in singles])
            if not torch.allclose(value.expand_as(expected), expected, rtol=1e-4, atol=1e-4):
                return "; the first site that differs is '{}'".format(name)
        return ""

    def _perturb(self, codes: torch.Tensor) -> torch.Tensor:
        """Move every coordinate that can move by one valid step (deterministic)."""
        zero_grad = torch.zeros(codes.shape + (self.layout.grad_width,), device=codes.device)
        gains = self.layout.gains(codes, zero_grad)
        candidate = gains.argmax(-1)
        movable = torch.isfinite(gains).any(-1)
        return torch.where(movable, self.layout.move(codes, candidate), codes)

    # ------------------------------------------------------------------ compilation
    def _compile(self, codes: torch.Tensor):
        """Trace the whole ``value_and_grad`` (forward and backward pass); where the
        tracer cannot follow a backward formula, trace the forward pass only and
        differentiate the traced graph, as Pyro's HMC does."""
        num_chains = codes.shape[0]
        try:
            compiled = trace_compile(lambda c: self._value_and_grad(c, num_chains), (codes,))
        except RuntimeError:
            forward = trace_compile(
                lambda c, *r: self._forward(num_chains, c, *r),
                (codes, *self._relaxed(codes, False)),
            )
            compiled = partial(self._value_and_grad, num_chains=num_chains, forward=forward)
        for probe in (codes, self._perturb(codes)):
            f_jit, g_jit = compiled(probe)
            f_eager, g_eager = self._value_and_grad(probe, num_chains)
            if not (
                torch.allclose(f_jit, f_eager, rtol=1e-4, atol=1e-4)
                and torch.allclose(g_jit, g_eager, rtol=1e-4, atol=1e-4)
            ):
                raise UnsupportedModelError(
                    "jit_compile=True gives a different log density than the eager "
                    "model at a second state: the model's Python control flow depends "
                    "on latent values, which torch.jit.trace cannot follow. Use "
                    "jit_compile=False."
                )
        self._compiled[num_chains] = compiled
        return compiled

    # ------------------------------------------------------------------ initial states
    def initial_codes(self, num_chains: int = 1) -> torch.Tensor:
        """Initial states from ``init_strategy`` with a finite log joint.

        Several chains are initialised in one batched run of the model where the
        strategy allows it (e.g. ``init_to_sample``); chains whose batched draw has a
        non-finite log joint, and strategies that give unbatched values, fall back to
        one run per chain.

        :param int num_chains: number of chains ``C``.
        :returns: long ``[C, D]``.
        :raises ValueError: naming the sites with a non-finite log-probability when no
            valid state is found in ``max_init_tries`` attempts per chain.
        """
        codes = self._batched_initial_codes(num_chains) if num_chains > 1 else None
        if codes is None:
            return torch.cat([self._single_initial_codes() for _ in range(num_chains)])
        bad = ~torch.isfinite(self.log_joint(codes))
        for c in bad.nonzero().reshape(-1).tolist():
            codes[c] = self._single_initial_codes()[0]
        return codes

    def _batched_initial_codes(self, num_chains: int) -> Optional[torch.Tensor]:
        plated = _in_chain_plate(self.model, num_chains, self.max_plate_nesting)
        try:
            trace = self._run_model(InitMessenger(self.init_strategy)(plated))
            values = {
                s.name: trace.nodes[s.name]["value"].reshape((num_chains,) + s.value_shape)
                for s in self.sites
            }
        except (RuntimeError, ValueError):  # values without the chain dimension
            return None
        codes = self.codes_from_values(values)
        self.check_vectorized(codes)
        return codes

    def _single_initial_codes(self) -> torch.Tensor:
        previous = None
        for _ in range(self.max_init_tries):
            trace = self._prototype_trace()
            codes = self.codes_from_values(
                {s.name: trace.nodes[s.name]["value"].unsqueeze(0) for s in self.sites}
            )
            if torch.isfinite(self.log_joint(codes)).all():
                break
            if previous is not None and torch.equal(previous, codes):
                break  # a deterministic strategy gives the same state again
            previous = codes
        self.check_initial(codes)
        return codes

    def check_initial(self, codes: torch.Tensor) -> None:
        """Raise a clear error if any chain of ``codes`` has a -inf or NaN log joint."""
        log_joint = self.log_joint(codes)
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

    # ------------------------------------------------------------------ diagnostics
    def warn_gradient_blind_categoricals(self, codes: torch.Tensor) -> None:
        """Warn once per ``Categorical`` site whose value the model uses beyond its own
        log-probability (typically as an index), where the gradient cannot see it.

        :param torch.Tensor codes: long ``[1, D]`` a valid state.
        """
        base_total = float(self.log_joint(codes[:1]))
        base_terms = self.site_log_probs(codes[:1])
        for site, sl in zip(self.sites, self._slices):
            if site.kind != CATEGORICAL or site.num_categories < 2:
                continue
            if site.name in self._warned_categoricals:
                continue
            shifted = codes[:1].clone()
            shifted[:, sl] = (shifted[:, sl] + 1) % site.num_categories
            total = float(self.log_joint(shifted))
            own = float(self.site_log_probs(shifted)[site.name])
            rest_change = (total - own) - (base_total - float(base_terms[site.name]))
            if not abs(rest_change) <= 1e-6 * (1 + abs(base_total)):  # NaN counts too
                self._warned_categoricals.add(site.name)
                warnings.warn(
                    "Categorical site {} is used by the model beyond its own "
                    "log-probability (for example as an index, locs[z]). Integer "
                    "values carry no gradient, so the gradient-informed proposal for "
                    "this site sees only its prior; the sampler stays exact but may "
                    "mix slowly. For informed proposals, write the site as "
                    "OneHotCategorical and use the one-hot vector (e.g. z @ locs).".format(
                        site.describe()
                    ),
                    UserWarning,
                    stacklevel=3,
                )


def _in_chain_plate(model, num_chains: int, max_plate_nesting: int):
    def batched(*args, **kwargs):
        with pyro.plate(CHAIN_PLATE, num_chains, dim=-1 - max_plate_nesting):
            return model(*args, **kwargs)

    return batched


def guess_max_plate_nesting(trace) -> int:
    """Deepest plate dimension or batch rank of any sample site (at least 0)."""
    depth = 0
    for site in trace.nodes.values():
        if site["type"] != "sample" or isinstance(site["fn"], _Subsample):
            continue
        dims = [-f.dim for f in site["cond_indep_stack"] if f.vectorized]
        depth = max([depth, len(site["fn"].batch_shape)] + dims)
    return depth
