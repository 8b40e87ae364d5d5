r"""The model bridge: the log joint of a Pyro model and its gradient, per chain.

:class:`ModelDensity` traces an ordinary Pyro model once, classifies every latent
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

The other jobs of the energy are its parts, in the modules of :mod:`pyro_gwg.bridge`:
the model's checks (:mod:`~pyro_gwg.bridge.checks`), the evaluation of several states
(:mod:`~pyro_gwg.bridge.batching`), initial states (:mod:`~pyro_gwg.bridge.initial`),
NaN log densities (:mod:`~pyro_gwg.bridge.nan`) and compilation
(:mod:`~pyro_gwg.bridge.compiled`).
"""

from __future__ import annotations

import contextlib
import math
from functools import partial
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import pyro
import pyro.poutine as poutine
import torch
import torch.nn.functional as F
from pyro.infer.autoguide.initialization import init_to_sample

from pyro_gwg import _trace
from pyro_gwg._taint import Read
from pyro_gwg._validation import check_integer, is_integer
from pyro_gwg.bridge.batching import CHAIN_PLATE, Batching
from pyro_gwg.bridge.checks import StructureChecks
from pyro_gwg.bridge.compiled import Compiling
from pyro_gwg.bridge.errors import log_prob_failure, note_model_error, out_of_memory
from pyro_gwg.bridge.initial import InitialStates
from pyro_gwg.bridge.nan import NanRecording
from pyro_gwg.sites import (
    CATEGORICAL,
    ONE_HOT,
    DiscreteSite,
    UnsupportedModelError,
    build_layout,
    own_term_weight,
    unwrap_distribution,
)

__all__ = ["ModelDensity"]

#: what ``pyro.module`` puts between a module's name and its parameters' names
_MODULE_SEPARATOR = "$$$"


class ModelDensity(StructureChecks, Batching, InitialStates, NanRecording, Compiling):
    r"""Log joint density and gradient of a Pyro model over its latent discrete sites.

    :param callable model: a Pyro model whose latent sites are discrete.
    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :param int max_plate_nesting: bound on nested plates (and batch dimensions);
        guessed from one trace when ``None``.
    :param bool jit_compile: capture ``value_and_grad`` (forward *and* backward pass)
        as a pure graph of ATen operators
        (:func:`~pyro_gwg.compile.backends.capture`), once per number of chains, and
        evaluate it by that graph. Like Pyro's HMC, the model's Python control flow
        must not depend on latent values (a model whose control flow reads them is
        refused; the graph is also checked against the eager model at two states).
    :param dict given: ``{site: value}`` of sites the model is conditioned on whose
        values change between evaluations (the continuous sites of
        :class:`~pyro_gwg.MixedGibbs`); the energy conditions the model on them itself,
        at the values last passed to :meth:`set_given`. A compiled transition takes
        them as arguments (see :meth:`arguments`) instead of freezing the values of the
        moment it was traced, and the energy is then not compiled on its own.
    :param bool given_per_chain: the ``given`` values carry a leading chain dimension
        ``[C, *shape]``, one value per chain (the chains of
        :class:`~pyro_gwg.MixedGibbs` in :class:`pyro_gwg.MCMC`): state ``n`` of a
        batch of ``N`` states is evaluated under chain ``n % C``'s values (the order
        in which the kernels lay out the states they evaluate: the chains, then the
        chains again; see :func:`~pyro_gwg.proposals.blocks.evaluate_changes`), in
        one batched run of the model as for one value (or under
        :func:`torch.func.vmap`, or one state at a time, each with its own values).
    :param callable init_strategy: a Pyro per-site initialisation function
        (default :func:`~pyro.infer.autoguide.initialization.init_to_sample`).
    :param int max_init_tries: initial states tried per chain before giving up.

    Example::

        >>> import pyro, torch
        >>> import pyro.distributions as dist
        >>> def model():
        ...     x = pyro.sample("x", dist.Bernoulli(0.5).expand([3]).to_event(1))
        ...     pyro.sample("y", dist.Normal(x.sum(-1, keepdim=True), 1.0), obs=torch.tensor(2.0))
        >>> energy = ModelDensity(model)
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
        given: Optional[Dict[str, torch.Tensor]] = None,
        given_per_chain: bool = False,
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
        if given is not None and not isinstance(given, dict):
            raise TypeError("given must be a dict of tensors, got {!r}".format(given))
        #: names of the sites the model is conditioned on (see :meth:`set_given`)
        self.given_names: Tuple[str, ...] = tuple(given or {})
        self._given_values: Tuple[torch.Tensor, ...] = tuple((given or {}).values())
        #: whether the given values carry a leading chain dimension (see :meth:`_model`)
        self.given_per_chain = bool(given_per_chain) and bool(self.given_names)
        if self.given_per_chain:
            self._check_given_chains(self._given_values)
        self.jit_compile = jit_compile and not self.given_names
        self.init_strategy = init_strategy
        self.max_init_tries = int(max_init_tries)
        self._latent_order: List[str] = []  # (for _refuse_invalid_distribution)
        # the first run validates the distributions' parameters whatever the runner set
        # (pyro.infer.MCMC turns validation off, and torch would then clamp invalid
        # probabilities silently): invalid ones are refused here, naming the site
        with pyro.validation_enabled(True):
            trace = self._prototype_trace()
        self._latent_order = [site["name"] for site in _trace.sample_sites(trace, "latent")]
        # the event dimensions of the given sites (where a chain dimension goes)
        self._given_event_dims = tuple(trace.nodes[n]["fn"].event_dim for n in self.given_names)
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
            if not isinstance(error, UnsupportedModelError) and not out_of_memory(error):
                note_model_error(error)
            raise

    def _prototype_trace(self):
        return self._run_model(self._model(), self.init_strategy)

    def set_given(self, values: Dict[str, torch.Tensor]) -> None:
        """Condition the model on new values of the ``given`` sites (all of them);
        later evaluations read these.

        :param dict values: ``{site: value}``, one entry per name of
            :attr:`given_names`.
        :raises ValueError: naming the sites, for missing or unknown ones.
        """
        if set(values) != set(self.given_names):
            raise ValueError(
                "set_given needs a value for each of the sites the energy was given ({}), "
                "got {}.".format(list(self.given_names), sorted(values))
            )
        given = tuple(values[name] for name in self.given_names)
        if self.given_per_chain:
            self._check_given_chains(given)
        self._given_values = given

    def _check_given_chains(self, values: Sequence[torch.Tensor]) -> None:
        sizes = [v.shape[0] if v.dim() else None for v in values]
        if None in sizes or len(set(sizes)) > 1:
            raise ValueError(
                "given values per chain need one leading chain dimension of the same size "
                "for every site ({}), got shapes {}.".format(
                    list(self.given_names), [tuple(v.shape) for v in values]
                )
            )

    @contextlib.contextmanager
    def given_of_chain(self, chain: int) -> Iterator[None]:
        """A context in which every state is evaluated under the given values of chain
        ``chain`` (modulo the number of chains: state ``n``'s values in a batch; for a
        density whose given values are per chain, else nothing changes): the probes of
        the batching and the messages about one chain's state use it.

        :param int chain: the chain.
        """
        saved = self._given_values
        if self.given_per_chain:
            self._given_values = tuple(
                v[chain % v.shape[0] : chain % v.shape[0] + 1] for v in saved
            )
        try:
            yield
        finally:
            self._given_values = saved

    @contextlib.contextmanager
    def distinct_given(self, num_states: int) -> Iterator[None]:
        """A context in which the given values per chain are those of chain 0, then
        ``num_states - 1`` draws from the model's prior (for a density whose given
        values are per chain; else nothing changes): the probes of the batching use it,
        since chains at equal values (the same initial values, say) would hide a model
        that mixes the values of the states of a batch.

        :param int num_states: the rows.
        """
        saved = self._given_values
        if self.given_per_chain:
            rows = [tuple(v[0] for v in saved)]
            for _ in range(num_states - 1):
                trace = self._run_model(self.model)
                rows.append(tuple(trace.nodes[n]["value"].detach() for n in self.given_names))
            self._given_values = tuple(torch.stack(values) for values in zip(*rows))
        try:
            yield
        finally:
            self._given_values = saved

    def _model(self, arguments: Optional[Sequence[torch.Tensor]] = None, num_states: int = 1):
        """The model conditioned on the ``given`` sites: at ``arguments`` (a compiled
        function's tensors, in the order of :meth:`arguments`, which stand also for
        the ``pyro.param`` sites; the given values alone, without them, read the
        parameters from the store), or at the values of :meth:`set_given`.

        Given values per chain (``given_per_chain``) are ``[K, *shape]``: state ``n``
        of a batch of ``num_states`` states is conditioned on row ``n % K`` (``K`` is
        the number of chains, or ``num_states`` for values already picked per state),
        a single state on row 0; the rows of a batch go at the dimension of the batch
        plate, left of the plates of the site."""
        model, given = self.model, self._given_values
        if arguments is not None:
            given, params = arguments[: len(given)], arguments[len(given) :]
            model = poutine.substitute(model, data=dict(zip(self.param_names, params)))
        if self.given_per_chain and num_states == 1:
            given = tuple(v[0] for v in given)
        elif self.given_per_chain:
            dims = self._given_event_dims
            given = tuple(self._given_rows(v, d, num_states) for v, d in zip(given, dims))
        if self.given_names:
            model = poutine.condition(model, data=dict(zip(self.given_names, given)))
        return model

    def _given_rows(self, value: torch.Tensor, event_dim: int, num_states: int) -> torch.Tensor:
        """The value per chain ``value [K, *shape]`` of ``num_states > 1`` states (see
        :meth:`_model`)."""
        value = _rows(value, num_states)
        pad = self.max_plate_nesting - (value.dim() - 1 - event_dim)
        return value.reshape((num_states,) + (1,) * pad + value.shape[1:])

    def _per_state_given(self, num_states: int, arguments=None) -> tuple:
        """``arguments`` (``None``: the given values now, without the parameters) with
        the given values per chain picked per state, ``[num_states, *shape]`` (state
        ``n`` reads row ``n % K``), for evaluations that take the states apart."""
        count = len(self.given_names)
        given = self._given_values if arguments is None else tuple(arguments[:count])
        params = () if arguments is None else tuple(arguments[count:])
        return tuple(_rows(v, num_states) for v in given) + params

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
    def _trace(self, values: Dict[str, torch.Tensor], num_chains: int, arguments=None):
        model = _trace.model_at(
            self._model(arguments, num_chains),
            values,
            self.max_plate_nesting,
            batch=(CHAIN_PLATE, num_chains) if num_chains > 1 else None,
            enumerated=bool(self.enumerated),
        )
        trace = self._run_model(model)
        self._check_signature(trace, values, num_chains)
        return trace

    def _relaxed(self, codes: torch.Tensor, with_grad: bool) -> List[torch.Tensor]:
        """Float values ``[C, *value_shape]`` of the non-``Categorical`` sites: the
        tensors the gradient is taken with respect to."""
        relaxed = []
        for site, site_codes in zip(self.sites, self.split(codes)):
            if site.kind != CATEGORICAL:
                relaxed.append(site.values_from_codes(site_codes).requires_grad_(with_grad))
        return relaxed

    def _state_trace(self, codes: torch.Tensor, relaxed, num_chains: int, arguments=None):
        relaxed = list(relaxed)
        values = {}
        for site, site_codes in zip(self.sites, self.split(codes)):
            value = site_codes if site.kind == CATEGORICAL else relaxed.pop(0)
            values[site.name] = value.reshape(site.model_shape(num_chains, self.max_plate_nesting))
        return self._trace(values, num_chains, arguments)

    def _forward_plate(
        self, num_chains: int, codes: torch.Tensor, *relaxed: torch.Tensor, arguments=None
    ):
        trace = self._state_trace(codes, relaxed, num_chains, arguments)
        own = [
            self._own_logits(trace, site, num_chains) for site in self.sites if not site.is_scalar
        ]
        return (self._log_joint(trace, num_chains), *own)

    def _site_log_prob(self, site) -> torch.Tensor:
        value = site["value"]
        if site["name"] in self._one_hot_names:
            # the site's own term enters the gradient through its logits (below)
            value = value.detach()
        try:
            return _trace.scaled_log_prob(site, value)
        except Exception as error:
            if out_of_memory(error) or isinstance(error, UnsupportedModelError):
                raise
            raise UnsupportedModelError(
                log_prob_failure(site, error, self._value_shapes)
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

    def _value_and_grad(self, codes: torch.Tensor, num_chains: int, arguments=None):
        forward = partial(self._forward, num_chains, arguments=arguments)
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
        self,
        codes: torch.Tensor,
        batched: bool = True,
        differentiable: bool = False,
        chains: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Log joint density of a batch of states, in double precision.

        :param torch.Tensor codes: long ``[C, D]`` states.
        :param bool batched: evaluate the states together (as ``self.batching`` says);
            ``False`` runs the model once per state.
        :param bool differentiable: keep the autograd graph, so that the result can be
            differentiated with respect to the model's parameters (for learning them,
            as :class:`pyro_gwg.contrib.train.PCD` does); by default no graph is built.
        :param torch.Tensor chains: long ``[N]``, the chain of each state, for given
            values per chain (``given_per_chain``; by default state ``n`` is chain
            ``n % C``); ignored otherwise.
        :rtype: torch.Tensor
        :raises UnsupportedModelError: naming the sites and the state, when a log
            density is NaN or ``+inf``.
        """
        arguments = None
        if chains is not None and self.given_per_chain:
            arguments = tuple(v[chains] for v in self._given_values)
        return self._log_joint_at(codes, batched, differentiable, arguments)

    def _log_joint_at(
        self,
        codes: torch.Tensor,
        batched: bool = True,
        differentiable: bool = False,
        arguments=None,
    ) -> torch.Tensor:
        """:meth:`log_joint`, with the model reading ``arguments`` (a compiled
        function's tensors, see :meth:`arguments`; ``None``: their values now)."""
        num_chains = codes.shape[0]
        if num_chains > 1 and batched and self.batching is None:
            self.choose_batching(codes)
        with torch.set_grad_enabled(differentiable and torch.is_grad_enabled()):
            relaxed = self._relaxed(codes, False)
            if batched or num_chains == 1:
                log_joint = self._forward(num_chains, codes, *relaxed, arguments=arguments)[0]
            else:
                log_joint = self._forward_loop(num_chains, codes, *relaxed, arguments=arguments)[0]
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


def _rows(value: torch.Tensor, num_states: int) -> torch.Tensor:
    """Row ``n % K`` of ``value [K, ...]`` for each of ``num_states`` states."""
    if value.shape[0] == num_states:
        return value
    return value[torch.arange(num_states, device=value.device) % value.shape[0]]
