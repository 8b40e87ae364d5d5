r"""Exact posteriors of small discrete models by enumerating every joint state.

:func:`exact_posterior` evaluates the log joint :math:`f(x) = \log p(x, y)` of every
joint state of the latent discrete sites (sites marked
``infer={"enumerate": "parallel"}`` are summed out inside :math:`f`) and normalises:

.. math:: p(x \mid y) = e^{f(x) - \log Z}, \qquad \log Z = \log \sum_x e^{f(x)}.

It is the ground truth of the test suite and a user-facing tool for small models.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, Optional, Tuple

import pyro.poutine as poutine
import torch
from pyro.infer import infer_discrete
from torch.distributions import Categorical

from pyro_gwg import _trace
from pyro_gwg._validation import check_integer
from pyro_gwg.bridge.density import ModelDensity
from pyro_gwg.sites import UnsupportedModelError, build_layout, unwrap_distribution

_BATCH_PLATE = "_pyro_gwg_draws"

__all__ = [
    "ExactPosterior",
    "StateIndex",
    "exact_posterior",
    "lift_enumeration",
    "draw_enumerated",
    "broadcasts",
    "draw_enumerated_batch",
    "sample_enumerated",
    "with_enumeration",
]


class StateIndex:
    """Mixed-radix numbering of the joint states of a coordinate layout.

    Coordinate ``i`` takes the values ``offset[i], ..., offset[i] + size[i] - 1``; the
    last coordinate varies fastest.

    :param ~pyro_gwg.proposals.layout.CoordinateLayout layout: a bounded layout.
    """

    def __init__(self, layout) -> None:
        self.offset = torch.where(layout.is_scalar, layout.lower, 0.0).long()
        self.size = layout.num_values().long()
        strides = torch.ones_like(self.size)
        if self.size.numel() > 1:
            strides[:-1] = torch.flip(torch.cumprod(torch.flip(self.size[1:], (0,)), 0), (0,))
        self.strides = strides

    def decode(self, index: torch.Tensor) -> torch.Tensor:
        """Codes ``[n, D]`` of the states numbered ``index [n]``."""
        index = index.to(self.strides.device)
        return (index.unsqueeze(-1) // self.strides) % self.size + self.offset

    def encode(self, codes: torch.Tensor) -> torch.Tensor:
        """Numbers ``[n]`` of the states ``codes [n, D]``."""
        return ((codes - self.offset) * self.strides).sum(-1)


class ExactPosterior:
    """The normalised posterior over all joint states of the latent discrete sites.

    States are numbered by :class:`StateIndex` over the flat layout of
    :class:`~pyro_gwg.bridge.density.ModelDensity`. Marginals are accumulated from the states'
    values, a bounded number of (state, coordinate) entries at a time, never as a dense
    one-hot block of many states; a table that would not fit (see ``max_bytes``) is
    refused before it is allocated.

    :param ModelDensity energy: the model bridge of the model.
    :param torch.Tensor log_joint: ``[S]`` log joint of every state, in index order.
    :param int chunk_size: states processed at once when computing marginals.
    :param int max_bytes: memory the marginal tables may take; default: the memory
        available when they are computed (``MemAvailable`` of ``/proc/meminfo``).

    :ivar torch.Tensor log_probs: ``[S]`` normalised log-probabilities.
    :ivar torch.Tensor log_normalizer: :math:`\\log Z`, the log marginal likelihood
        of the observed sites (with the latent discrete sites summed out).
    """

    #: (state, coordinate) entries processed at once when accumulating marginals
    WORK_ELEMENTS = 2**22
    #: pairwise marginals of coordinates with at most this many values are accumulated
    #: as products of one-hot blocks (a matrix product), wider ones by scattering
    DENSE_WIDTH = 16

    def __init__(
        self,
        energy: ModelDensity,
        log_joint: torch.Tensor,
        chunk_size: int = 4096,
        max_bytes: Optional[int] = None,
    ):
        self.energy = energy
        self.sites = energy.sites
        self.chunk_size = chunk_size
        self.max_bytes = max_bytes
        self.index = StateIndex(energy.layout)
        self.offset, self.size = self.index.offset, self.index.size
        self.log_normalizer = torch.logsumexp(log_joint, 0)
        self.log_probs = log_joint - self.log_normalizer
        self.width = int(self.size.max())
        self._pairwise: Optional[torch.Tensor] = None
        self._marginals = self._accumulate(pairwise=False)

    @classmethod
    def of(
        cls, energy: ModelDensity, chunk_size: int = 4096, max_bytes: Optional[int] = None
    ) -> ExactPosterior:
        """The posterior of ``energy``, whose layout must be bounded: the log joint of
        every joint state, ``chunk_size`` states per evaluation.

        :param ModelDensity energy: the model bridge.
        :param int chunk_size: states per evaluation.
        :param int max_bytes: see :class:`ExactPosterior`.
        :rtype: ExactPosterior
        """
        num_states = int(torch.prod(energy.layout.num_values().double()))
        log_joint = _enumerate_log_joint(energy, num_states, chunk_size)
        return cls(energy, log_joint, chunk_size, max_bytes=max_bytes)

    @property
    def num_states(self) -> int:
        """Number ``S`` of joint states."""
        return self.log_probs.numel()

    @property
    def probs(self) -> torch.Tensor:
        """``[S]`` posterior probabilities."""
        return self.log_probs.exp()

    def states(self, index: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Codes ``[n, D]`` of the states with the given indices (all states by default)."""
        if index is None:
            index = torch.arange(self.num_states)
        return self.index.decode(index)

    def state_index(self, codes: torch.Tensor) -> torch.Tensor:
        """Index of each state in ``codes [n, D]``."""
        return self.index.encode(codes)

    def _accumulate(self, pairwise: bool) -> torch.Tensor:
        """Marginals of the posterior: ``[D * V]``, or ``[D * V, D * V]`` for pairs."""

        def chunks():
            for start in range(0, self.num_states, self.chunk_size):
                index = torch.arange(start, min(start + self.chunk_size, self.num_states))
                yield self.states(index), self.log_probs[index].exp()

        return self._table(chunks(), pairwise)

    def _table(self, chunks, pairwise: bool) -> torch.Tensor:
        """Sum over ``chunks`` of ``(codes [n, D], weights [n])`` of the weighted
        indicators of (coordinate, value), ``[D * V]``, or of pairs of them,
        ``[D * V, D * V]``; at most :attr:`WORK_ELEMENTS` entries of work at a time."""
        num_coords, width = self.size.numel(), self.width
        dim = num_coords * width
        dtype = self.log_probs.dtype
        shape = (dim, dim) if pairwise else (dim,)
        if pairwise:
            label = "pairwise marginal table [D*V, D*V] = [{}, {}]".format(dim, dim)
        else:
            label = "marginal table [D, V] = [{}, {}]".format(num_coords, width)
        table_bytes = _numel(shape) * torch.finfo(dtype).bits // 8
        what = "the pairwise marginals" if pairwise else "the marginals"
        self.check_memory([(label, table_bytes)], self.max_bytes, what)
        total = torch.zeros(shape, dtype=dtype)
        columns = torch.arange(num_coords) * width  # flat column of (coordinate, value 0)
        dense = pairwise and width <= self.DENSE_WIDTH
        per_state = dim if dense else num_coords * (num_coords if pairwise else 1)
        rows = max(1, self.WORK_ELEMENTS // max(1, per_state))
        for codes, weights in chunks:
            for start in range(0, codes.shape[0], rows):
                flat = codes[start : start + rows].cpu() - self.offset + columns
                weight = weights[start : start + rows].cpu().to(dtype)
                if dense:
                    onehot = torch.zeros(flat.shape[0], dim, dtype=dtype).scatter_(1, flat, 1.0)
                    total += (onehot * weight.unsqueeze(-1)).T @ onehot
                elif pairwise:
                    pairs = flat.unsqueeze(2) * dim + flat.unsqueeze(1)
                    total.view(-1).index_add_(
                        0, pairs.reshape(-1), weight.repeat_interleave(num_coords**2)
                    )
                else:
                    total.index_add_(0, flat.reshape(-1), weight.repeat_interleave(num_coords))
        return total

    def flat_marginals(self) -> torch.Tensor:
        """``[D, V]``: probability that coordinate ``i`` takes value ``offset[i] + v``."""
        return self._marginals.reshape(self.size.numel(), self.width)

    def pairwise_marginals(self) -> torch.Tensor:
        """``[D, D, V, V]``: joint probability of values ``(v, w)`` at coordinates ``(i, j)``.

        :raises ValueError: before allocating, where the ``[D * V, D * V]`` table does
            not fit in ``max_bytes`` (or the memory available).
        """
        if self._pairwise is None:
            self._pairwise = self._accumulate(pairwise=True)
        return self._pairs(self._pairwise)

    def _pairs(self, table: torch.Tensor) -> torch.Tensor:
        d = self.size.numel()
        return table.reshape(d, self.width, d, self.width).permute(0, 2, 1, 3)

    def empirical_marginals(self, codes: torch.Tensor, pairwise: bool = False) -> torch.Tensor:
        """Marginals of draws, laid out as :meth:`flat_marginals` (``[D, V]``) or, with
        ``pairwise``, as :meth:`pairwise_marginals` (``[D, D, V, V]``), with the same
        bounded work memory.

        :param torch.Tensor codes: long ``[..., D]`` draws (all leading dimensions pooled).
        :param bool pairwise: the pairwise marginals.
        """
        flat = codes.reshape(-1, codes.shape[-1])
        weight = torch.full((1,), 1.0 / max(1, flat.shape[0]), dtype=self.log_probs.dtype)
        chunks = ((chunk, weight.expand(chunk.shape[0])) for chunk in flat.split(self.chunk_size))
        table = self._table(chunks, pairwise)
        return self._pairs(table) if pairwise else table.reshape(self.size.numel(), self.width)

    def marginals(self) -> Dict[str, torch.Tensor]:
        """Per-site marginals ``{name: [*coord_shape, V]}``; entry ``v`` is the value
        ``offset + v`` of a scalar site, the category ``v`` of a categorical site."""
        flat = self.flat_marginals()
        return {
            s.name: flat[s.offset : s.offset + s.num_coords].reshape(s.coord_shape + (self.width,))
            for s in self.sites
        }

    def mean(self) -> Dict[str, torch.Tensor]:
        """Posterior mean of every site's model value (one-hot means for categoricals
        given as one-hot, index means for ``Categorical``)."""
        flat = self.flat_marginals()
        values = self.offset.unsqueeze(-1) + torch.arange(self.width)
        means = (flat * values).sum(-1)
        out = {}
        for s in self.sites:
            block = flat[s.offset : s.offset + s.num_coords]
            if s.kind == "one-hot":
                out[s.name] = block[:, : s.num_categories].reshape(s.value_shape)
            else:
                out[s.name] = means[s.offset : s.offset + s.num_coords].reshape(s.value_shape)
        return out

    def sample_codes(self, num_samples: int) -> torch.Tensor:
        """``[num_samples, D]`` exact posterior draws as codes."""
        index = torch.multinomial(self.probs, num_samples, replacement=True)
        return self.states(index)

    def sample(self, num_samples: int) -> Dict[str, torch.Tensor]:
        """``{name: [num_samples, *value_shape]}`` exact posterior draws as model values."""
        return self.energy.values_from_codes(self.sample_codes(num_samples))

    @staticmethod
    def check_memory(parts, max_bytes: Optional[int], what: str) -> None:
        """Refuse, before allocating, work whose ``parts`` (``[(label, bytes)]``) add
        up to more than ``max_bytes`` (default: the memory available now).

        :raises ValueError: naming the parts, the largest first.
        """
        if max_bytes is not None:
            limit = check_integer("max_bytes", max_bytes, 1, "bytes")
            source = "max_bytes={}".format(limit)
        else:
            limit, source = _available_bytes(), "the memory available now"
            if limit is None:
                return
        needed = sum(size for _, size in parts)
        if needed <= limit:
            return
        listed = "; ".join(
            "{}: {}".format(label, _human(size))
            for label, size in sorted(parts, key=lambda part: -part[1])
        )
        raise ValueError(
            "Computing {} needs about {} ({}), more than {} ({}). Reduce what dominates: "
            "the number of joint states (fewer or smaller sites, or bounds= windows for "
            "ordinal sites), the number of values V of the widest coordinate (bounds=), "
            "the number of coordinates D, or chunk_size; or pass a larger "
            "max_bytes.".format(what, _human(needed), listed, source, _human(limit))
        )


def _numel(shape: Tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= int(size)
    return count


def _human(num_bytes: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if num_bytes >= scale:
            return "{:.3g} {}".format(num_bytes / scale, unit)
    return "{} bytes".format(int(num_bytes))


def _available_bytes() -> Optional[int]:
    """``MemAvailable`` of ``/proc/meminfo`` (Linux), else ``None``."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def exact_posterior(
    model,
    *args,
    max_states: int = 2**20,
    chunk_size: int = 4096,
    max_plate_nesting: Optional[int] = None,
    bounds: Optional[Dict[str, Tuple[int, int]]] = None,
    max_bytes: Optional[int] = None,
    **kwargs,
) -> ExactPosterior:
    """Enumerate every joint state of the latent discrete sites of ``model``.

    :param callable model: a Pyro model whose latent sites are discrete.
    :param args: the model's positional arguments.
    :param int max_states: refuse to enumerate more joint states than this.
    :param int chunk_size: states evaluated in one batched run of the model (models
        that do not broadcast over a leading batch dimension are run state by state).
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param dict bounds: ``{site: (low, high)}`` windows for ordinal sites with
        unbounded support (``Poisson``, ``Geometric``); the result is then the
        posterior restricted to the window.
    :param int max_bytes: memory the enumeration may take (the log joint of every
        state, the marginal table, the states decoded per chunk); default: the memory
        available when it starts. A larger request is refused before anything is
        allocated, with the sizes of its parts.
    :param kwargs: the model's keyword arguments.
    :rtype: ExactPosterior

    Example::

        >>> import pyro, torch
        >>> import pyro.distributions as dist
        >>> def model():
        ...     x = pyro.sample("x", dist.Bernoulli(0.3))
        ...     pyro.sample("y", dist.Normal(x, 1.0), obs=torch.tensor(1.0))
        >>> post = exact_posterior(model)
        >>> post.num_states
        2
        >>> round(float(post.flat_marginals()[0, 1]), 3)
        0.414
    """
    chunk_size = check_integer("chunk_size", chunk_size, 1, "states per evaluation")
    energy = ModelDensity(model, args, kwargs, max_plate_nesting=max_plate_nesting)
    for name, (low, high) in (bounds or {}).items():
        site = next((s for s in energy.sites if s.name == name), None)
        if site is None or not site.is_scalar:
            raise ValueError("bounds given for '{}', which is no ordinal latent site".format(name))
        site.lower = site.lower.clamp(min=low)
        site.upper = site.upper.clamp(max=high)
    if bounds:
        energy.layout = build_layout(energy.sites).to(energy.device)
    sizes = energy.layout.num_values()
    for site in energy.sites:
        block = sizes[site.offset : site.offset + site.num_coords]
        if not torch.isfinite(block).all():
            raise UnsupportedModelError(
                "Cannot enumerate latent site {}: its support is unbounded. Pass "
                "bounds={{'{}': (low, high)}} to enumerate a window of it.".format(
                    site.describe(), site.name
                )
            )
    num_states = float(torch.prod(sizes.double()))
    if num_states > max_states:
        per_site = ", ".join(
            "'{}': {:.3g}".format(
                s.name, float(torch.prod(sizes[s.offset : s.offset + s.num_coords].double()))
            )
            for s in energy.sites
        )
        raise ValueError(
            "The model has {:.3g} joint states of its latent discrete sites, more than "
            "max_states={} ({}). Enumeration is for small models; raise max_states if "
            "you have the memory and time, or use an MCMC kernel.".format(
                num_states, max_states, per_site
            )
        )
    num_coords, width = energy.layout.num_coords, int(sizes.max())
    ExactPosterior.check_memory(
        [
            ("log joint and probabilities of {:.3g} states".format(num_states), 24 * num_states),
            ("marginal table [D, V] = [{}, {}]".format(num_coords, width), 8 * num_coords * width),
            (
                "states decoded per chunk of {} states".format(chunk_size),
                32 * min(chunk_size, num_states) * num_coords,
            ),
        ],
        max_bytes,
        "the exact posterior",
    )
    return ExactPosterior.of(energy, chunk_size, max_bytes)


def _enumerate_log_joint(energy: ModelDensity, num_states: int, chunk_size: int) -> torch.Tensor:
    """``[S]`` float64 log joint of every state, ``chunk_size`` states per evaluation
    (batched as the model allows: :meth:`ModelDensity.choose_batching
    <pyro_gwg.ModelDensity.choose_batching>` warns when it cannot broadcast)."""
    numbering = StateIndex(energy.layout)
    energy.check_deterministic(numbering.decode(torch.arange(1)))
    out = []
    for start in range(0, num_states, chunk_size):
        index = torch.arange(start, min(start + chunk_size, num_states))
        out.append(energy.log_joint(numbering.decode(index)))
    return torch.cat(out)


def lift_enumeration(model):
    """``model`` with every enumeration mark lifted, so that a pyro-gwg kernel samples the
    sites the model sums out: marks set in the body (``infer={"enumerate": "parallel"}``)
    and by :func:`~pyro.infer.enum.config_enumerate` alike (an outer
    :func:`~pyro.poutine.infer_config` handler sees each site after the inner ones).

    Models written for Pyro's HMC and NUTS mark their discrete sites for enumeration;
    pyro-gwg sums marked sites out too, which is exact but costs memory exponential in
    the number of marked sites that interact. Lift the marks to sample them instead::

        mcmc = pyro.infer.MCMC(GWG(lift_enumeration(model)), num_samples=1000)

    :param callable model: a Pyro model.
    :rtype: callable
    """

    return with_enumeration(model, ())


def with_enumeration(model: Callable, enumerated: Iterable[str]) -> Callable:
    """``model`` with exactly the sites ``enumerated`` marked
    ``infer={"enumerate": "parallel"}`` (marks the model sets on other sites lifted).

    :param callable model: a Pyro model.
    :param enumerated: site names.
    :rtype: callable
    """
    names = frozenset(enumerated)

    def config(msg):
        if msg["name"] in names:
            return {"enumerate": "parallel"}
        return {"enumerate": None} if msg["infer"].get("enumerate") is not None else {}

    return poutine.infer_config(model, config_fn=config)


def sample_enumerated(
    model,
    samples: Dict[str, torch.Tensor],
    *args,
    max_plate_nesting: Optional[int] = None,
    temperature: int = 1,
    **kwargs,
) -> Dict[str, torch.Tensor]:
    """Draw the sites a model sums out by enumeration, for every posterior draw.

    MCMC with enumeration (Pyro's HMC/NUTS on ``config_enumerate(model)``, or a
    pyro-gwg kernel on a model with sites marked ``infer={"enumerate": "parallel"}``)
    never samples the enumerated sites, and ``get_samples()`` does not contain them.
    This runs :func:`pyro.infer.infer_discrete` on the model conditioned on each draw,
    which samples them from their conditional posterior (``temperature=1``) or takes
    their most likely values (``temperature=0``).

    :param callable model: the model with its enumeration marks.
    :param dict samples: ``{site: [N, ...]}`` draws, e.g. ``mcmc.get_samples()``.
    :param args: the model's positional arguments.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param int temperature: 1 to sample, 0 for the MAP values.
    :param kwargs: the model's keyword arguments.
    :returns: ``samples`` with a ``[N, ...]`` entry added for every enumerated site.
    """
    trace = _trace.trace_model(model, args, kwargs)
    if max_plate_nesting is None:
        max_plate_nesting = _trace.guess_max_plate_nesting(trace)
    enumerated = [site["name"] for site in _trace.sample_sites(trace) if _trace.is_enumerated(site)]
    if not enumerated:
        raise ValueError("The model marks no site infer={'enumerate': 'parallel'}.")
    # MCMC returns float draws; Categorical values are indices for the model
    index_sites = _index_sites(model, args, kwargs)
    num_draws = len(next(iter(samples.values())))
    draws: Dict[str, list] = {name: [] for name in enumerated}
    for i in range(num_draws):
        values = {k: v[i] for k, v in samples.items()}
        drawn = draw_enumerated(
            model, values, args, kwargs, max_plate_nesting, temperature, index_sites
        )
        for name in enumerated:
            draws[name].append(drawn[name])
    return {**samples, **{name: torch.stack(v) for name, v in draws.items()}}


def draw_enumerated_batch(
    model,
    values: Dict[str, torch.Tensor],
    num_draws: int,
    shapes: Dict[str, Tuple[torch.Size, torch.Size]],
    args: tuple,
    kwargs: dict,
    max_plate_nesting: int,
    batched: bool,
    temperature: int = 1,
) -> Dict[str, torch.Tensor]:
    """``num_draws`` draws of the sites ``model`` sums out, the ``n``-th given the
    ``n``-th entry of ``values``: in one run of the model inside a batch plate when
    ``batched`` (see :func:`broadcasts`), else one run per draw
    (:func:`draw_enumerated`).

    :param callable model: the model with its enumeration marks.
    :param dict values: ``{site: [N, *value_shape]}`` of the other latent sites (may be
        empty).
    :param int num_draws: ``N``.
    :param dict shapes: ``{site: (batch_shape, event_shape)}`` of every latent site
        (given and enumerated).
    :param tuple args: the model's positional arguments.
    :param dict kwargs: its keyword arguments.
    :param int max_plate_nesting: the model's plate nesting.
    :param bool batched: draw in one batched run.
    :param int temperature: 1 to sample, 0 for the most likely values.
    :returns: ``{site: [N, *value_shape]}`` of the enumerated sites.
    """
    index_sites = _index_sites(model, args, kwargs)
    if not batched:
        draws = [
            draw_enumerated(
                model,
                {k: v[n] for k, v in values.items()},
                args,
                kwargs,
                max_plate_nesting,
                temperature,
                index_sites,
            )
            for n in range(num_draws)
        ]
        return {name: torch.stack([d[name] for d in draws]) for name in draws[0]}

    def padded(name: str) -> Tuple[int, ...]:
        batch_shape, event_shape = shapes[name]
        pad = max_plate_nesting - len(batch_shape)
        return (num_draws,) + (1,) * pad + tuple(batch_shape) + tuple(event_shape)

    given = {k: (v.long() if k in index_sites else v).reshape(padded(k)) for k, v in values.items()}
    batched_model = _trace.model_at(
        model, given, max_plate_nesting, batch=(_BATCH_PLATE, num_draws)
    )
    discrete = infer_discrete(
        batched_model, first_available_dim=-2 - max_plate_nesting, temperature=temperature
    )
    trace = _trace.trace_model(discrete, args, kwargs)
    out = {}
    for site in _trace.sample_sites(trace):
        if _trace.is_enumerated(site):
            name = site["name"]
            full = torch.broadcast_to(site["value"], padded(name))
            out[name] = full.reshape((num_draws,) + tuple(shapes[name][0] + shapes[name][1]))
    return out


def broadcasts(
    model,
    values: Dict[str, torch.Tensor],
    shapes: Dict[str, Tuple[torch.Size, torch.Size]],
    args: tuple,
    kwargs: dict,
    max_plate_nesting: int,
    num_probes: int = 3,
) -> bool:
    """Whether draws of the sites ``model`` sums out may run batched
    (:func:`draw_enumerated_batch`): the most likely values (temperature 0) given the
    first ``num_probes`` entries of ``values``, drawn in one batched run, must equal
    those drawn one at a time (a model that does not broadcast over a batch dimension
    fails or differs).

    :param callable model: the model with its enumeration marks.
    :param dict values: ``{site: [N, *value_shape]}`` of the other latent sites.
    :param dict shapes: as for :func:`draw_enumerated_batch`.
    :param tuple args: the model's positional arguments.
    :param dict kwargs: its keyword arguments.
    :param int max_plate_nesting: the model's plate nesting.
    :param int num_probes: draws compared.
    :rtype: bool
    """
    size = len(next(iter(values.values()))) if values else num_probes
    probe = {k: v[: min(num_probes, size)] for k, v in values.items()}
    count = min(num_probes, size)
    try:
        together = draw_enumerated_batch(
            model, probe, count, shapes, args, kwargs, max_plate_nesting, True, 0
        )
    except Exception:  # (a model that cannot run batched)
        return False
    alone = draw_enumerated_batch(
        model, probe, count, shapes, args, kwargs, max_plate_nesting, False, 0
    )
    return together.keys() == alone.keys() and all(
        torch.equal(together[k], alone[k].to(together[k].dtype)) for k in alone
    )


def _index_sites(model, args: tuple, kwargs: dict) -> set:
    """The ``Categorical`` sites of ``model`` (their values are indices)."""
    trace = _trace.trace_model(model, args, kwargs)
    return {
        site["name"]
        for site in _trace.sample_sites(trace)
        if isinstance(unwrap_distribution(site["fn"]), Categorical)
    }


def draw_enumerated(
    model,
    values: Dict[str, torch.Tensor],
    args: tuple,
    kwargs: dict,
    max_plate_nesting: int,
    temperature: int = 1,
    index_sites: Optional[set] = None,
) -> Dict[str, torch.Tensor]:
    """One draw of the sites ``model`` sums out, given ``values`` of its other latent
    sites: :func:`pyro.infer.infer_discrete` on the model conditioned on them.

    :param callable model: the model with its enumeration marks.
    :param dict values: ``{site: value}`` of the other latent sites (float values of
        ``Categorical`` sites, as MCMC returns them, are converted to indices).
    :param tuple args: the model's positional arguments.
    :param dict kwargs: its keyword arguments.
    :param int max_plate_nesting: the model's plate nesting.
    :param int temperature: 1 to sample, 0 for the most likely values.
    :param set index_sites: the ``Categorical`` sites of ``values`` (found from a trace
        when ``None``).
    :returns: ``{site: value}`` of the enumerated sites.
    """
    if index_sites is None:
        index_sites = _index_sites(model, args, kwargs)
    values = {k: v.long() if k in index_sites else v for k, v in values.items()}
    discrete = infer_discrete(
        poutine.condition(model, data=values),
        first_available_dim=-1 - max_plate_nesting,
        temperature=temperature,
    )
    trace = _trace.trace_model(discrete, args, kwargs)
    return {
        site["name"]: site["value"]
        for site in _trace.sample_sites(trace)
        if _trace.is_enumerated(site)
    }
