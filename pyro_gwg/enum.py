r"""Exact posteriors of small discrete models by enumerating every joint state.

:func:`exact_posterior` evaluates the log joint :math:`f(x) = \log p(x, y)` of every
joint state of the latent discrete sites (sites marked
``infer={"enumerate": "parallel"}`` are summed out inside :math:`f`) and normalises:

.. math:: p(x \mid y) = e^{f(x) - \log Z}, \qquad \log Z = \log \sum_x e^{f(x)}.

It is the ground truth of the test suite and a user-facing tool for small models.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import pyro.poutine as poutine
import torch
from pyro.infer import infer_discrete
from torch.distributions import Categorical

from pyro_gwg.energy import DiscreteEnergy, guess_max_plate_nesting
from pyro_gwg.sites import UnsupportedModelError, build_layout, unwrap_distribution

__all__ = ["ExactPosterior", "StateIndex", "exact_posterior", "sample_enumerated"]


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
    :class:`~pyro_gwg.energy.DiscreteEnergy`.

    :param DiscreteEnergy energy: the energy bridge of the model.
    :param torch.Tensor log_joint: ``[S]`` log joint of every state, in index order.
    :param int chunk_size: states processed at once when computing marginals.

    :ivar torch.Tensor log_probs: ``[S]`` normalised log-probabilities.
    :ivar torch.Tensor log_normalizer: :math:`\\log Z`, the log marginal likelihood
        of the observed sites (with the latent discrete sites summed out).
    """

    def __init__(self, energy: DiscreteEnergy, log_joint: torch.Tensor, chunk_size: int = 4096):
        self.energy = energy
        self.sites = energy.sites
        self.chunk_size = chunk_size
        self.index = StateIndex(energy.layout)
        self.offset, self.size = self.index.offset, self.index.size
        self.log_normalizer = torch.logsumexp(log_joint, 0)
        self.log_probs = log_joint - self.log_normalizer
        self.width = int(self.size.max())
        self._pairwise: Optional[torch.Tensor] = None
        self._marginals = self._accumulate(pairwise=False)

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
        dim = self.size.numel() * self.width
        total = torch.zeros((dim, dim) if pairwise else (dim,), dtype=self.log_probs.dtype)
        for start in range(0, self.num_states, self.chunk_size):
            index = torch.arange(start, min(start + self.chunk_size, self.num_states))
            onehot = (
                torch.nn.functional.one_hot(self.states(index) - self.offset, self.width)
                .reshape(len(index), dim)
                .to(total.dtype)
            )
            weights = self.log_probs[index].exp()
            if pairwise:
                total += (onehot * weights.unsqueeze(-1)).T @ onehot
            else:
                total += weights @ onehot
        return total

    def flat_marginals(self) -> torch.Tensor:
        """``[D, V]``: probability that coordinate ``i`` takes value ``offset[i] + v``."""
        return self._marginals.reshape(self.size.numel(), self.width)

    def pairwise_marginals(self) -> torch.Tensor:
        """``[D, D, V, V]``: joint probability of values ``(v, w)`` at coordinates ``(i, j)``."""
        if self._pairwise is None:
            self._pairwise = self._accumulate(pairwise=True)
        d = self.size.numel()
        return self._pairwise.reshape(d, self.width, d, self.width).permute(0, 2, 1, 3)

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


def exact_posterior(
    model,
    *args,
    max_states: int = 2**20,
    chunk_size: int = 4096,
    max_plate_nesting: Optional[int] = None,
    bounds: Optional[Dict[str, Tuple[int, int]]] = None,
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
    energy = DiscreteEnergy(model, args, kwargs, max_plate_nesting=max_plate_nesting)
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
    return ExactPosterior(
        energy, _enumerate_log_joint(energy, int(num_states), chunk_size), chunk_size
    )


def _enumerate_log_joint(energy: DiscreteEnergy, num_states: int, chunk_size: int) -> torch.Tensor:
    """``[S]`` float64 log joint of every state, ``chunk_size`` states per evaluation
    (batched as the model allows: :meth:`DiscreteEnergy.choose_batching
    <pyro_gwg.DiscreteEnergy.choose_batching>` warns when it cannot broadcast)."""
    numbering = StateIndex(energy.layout)
    energy.check_deterministic(numbering.decode(torch.arange(1)))
    out = []
    for start in range(0, num_states, chunk_size):
        index = torch.arange(start, min(start + chunk_size, num_states))
        out.append(energy.log_joint(numbering.decode(index)))
    return torch.cat(out)


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
    with poutine.block():
        trace = poutine.trace(model).get_trace(*args, **kwargs)
    if max_plate_nesting is None:
        max_plate_nesting = guess_max_plate_nesting(trace)
    enumerated = [
        name
        for name, site in trace.nodes.items()
        if site["type"] == "sample"
        and not site["is_observed"]
        and site["infer"].get("enumerate") == "parallel"
    ]
    if not enumerated:
        raise ValueError("The model marks no site infer={'enumerate': 'parallel'}.")
    # MCMC returns float draws; Categorical values are indices for the model
    index_sites = {
        name
        for name, site in trace.nodes.items()
        if site["type"] == "sample" and isinstance(unwrap_distribution(site["fn"]), Categorical)
    }
    num_draws = len(next(iter(samples.values())))
    draws: Dict[str, list] = {name: [] for name in enumerated}
    for i in range(num_draws):
        values = {k: v[i].long() if k in index_sites else v[i] for k, v in samples.items()}
        conditioned = poutine.condition(model, data=values)
        discrete = infer_discrete(
            conditioned, first_available_dim=-1 - max_plate_nesting, temperature=temperature
        )
        with poutine.block():
            tr = poutine.trace(discrete).get_trace(*args, **kwargs)
        for name in enumerated:
            draws[name].append(tr.nodes[name]["value"])
    return {**samples, **{name: torch.stack(v) for name, v in draws.items()}}
