"""Discovery and encoding of the latent discrete sites of a Pyro model.

Every latent discrete site is classified into one of four *kinds*:

================ ============================================= =====================
kind             distributions                                 value the model sees
================ ============================================= =====================
``binary``       ``Bernoulli`` (support ``boolean``)           float 0./1.
``categorical``  ``Categorical``                               long index
``one-hot``      ``OneHotCategorical`` (support ``one_hot``)   float one-hot vector
``ordinal``      ``Binomial``, ``BetaBinomial``, any           float integer value
                 ``integer_interval`` support; ``Poisson``,
                 ``Geometric``, ``NegativeBinomial``
                 (unbounded, moved by +-1)
================ ============================================= =====================

Wrappers (``.to_event``, ``.expand``, ``.mask``) are looked through. Each site owns a
contiguous slice of the flat coordinate vector used by the kernels (see
:mod:`pyro_gwg.proposals.layout`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, List, Optional

import torch
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import ExpandedDistribution, MaskedDistribution
from torch.distributions import Categorical, Independent

from pyro_gwg.proposals.layout import CoordinateLayout

__all__ = [
    "BINARY",
    "CATEGORICAL",
    "DiscreteSite",
    "ONE_HOT",
    "ORDINAL",
    "UnsupportedModelError",
    "base_constraint",
    "build_layout",
    "classify_site",
    "support_is_discrete",
    "unwrap_distribution",
]

BINARY = "binary"
CATEGORICAL = "categorical"
ONE_HOT = "one-hot"
ORDINAL = "ordinal"

_SUPPORTED = (
    "Bernoulli, Categorical, OneHotCategorical, Binomial and other distributions with "
    "integer_interval support, Poisson, Geometric and other distributions with "
    "nonnegative_integer or positive_integer support"
)


class UnsupportedModelError(ValueError):
    """A model (or a site of it) that pyro-gwg cannot sample; the message says why."""


def _wrappers(fn) -> tuple:
    """``(wrappers, innermost)``: the ``Independent``, expanded and masked wrappers of a
    distribution, outermost first, and the distribution below them."""
    layers = []
    while isinstance(fn, (Independent, MaskedDistribution, ExpandedDistribution)):
        layers.append(fn)
        fn = fn.base_dist
    return layers, fn


def unwrap_distribution(fn):
    """The innermost distribution below ``Independent``, expanded and masked wrappers."""
    return _wrappers(fn)[1]


def own_term_weight(node) -> Optional[torch.Tensor]:
    """The weight of a sample site's own log-probability at each element of its
    innermost distribution's batch (:func:`unwrap_distribution`): the scale of the
    site's handlers times its masks (``poutine.mask`` and ``.mask()`` at any depth),
    with the dimensions that ``Independent`` wrappers below each factor reinterpret
    added on the right; ``None`` when the site is neither scaled nor masked.

    :param dict node: a trace node of type ``"sample"``.
    :returns: a tensor that broadcasts against the innermost batch shape, or ``None``.
    """
    layers = _wrappers(node["fn"])[0]
    independent = [layer for layer in layers if isinstance(layer, Independent)]
    below = sum(layer.reinterpreted_batch_ndims for layer in independent)
    factors = [(node["scale"], below), (node["mask"], below)]
    for layer in layers:
        if isinstance(layer, Independent):
            below -= layer.reinterpreted_batch_ndims
        elif isinstance(layer, MaskedDistribution):
            factors.append((layer._mask, below))
    weight = None
    for factor, trailing in factors:
        if factor is None or (not torch.is_tensor(factor) and factor == 1):
            continue
        factor = torch.as_tensor(factor, dtype=torch.get_default_dtype())
        factor = factor.reshape(factor.shape + (1,) * trailing) if factor.dim() else factor
        weight = factor if weight is None else weight * factor
    return weight


def base_constraint(support):
    """The constraint below any ``independent`` wrappers."""
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    return support


def support_is_discrete(support) -> Optional[bool]:
    """Whether a support (below any ``independent`` wrappers) is discrete; ``None`` for
    a support that depends on other values (``constraints.dependent``), which torch
    cannot classify.

    :param support: a distribution's support.
    :rtype: bool or None
    """
    support = base_constraint(support)
    return None if constraints.is_dependent(support) else bool(support.is_discrete)


@dataclass
class DiscreteSite:
    """One latent discrete site and its slice of the flat coordinate vector.

    :ivar str name: site name.
    :ivar str kind: one of ``binary``, ``categorical``, ``one-hot``, ``ordinal``.
    :ivar str dist_name: class name of the (unwrapped) distribution, for messages.
    :ivar torch.Size batch_shape: batch shape of the site's distribution.
    :ivar torch.Size event_shape: event shape of the site's distribution.
    :ivar int num_categories: ``K`` for (one-hot) categorical sites, else 0.
    :ivar torch.Tensor lower: float lower bound per coordinate (scalar kinds).
    :ivar torch.Tensor upper: float upper bound per coordinate (``inf`` if unbounded).
    :ivar int offset: first flat coordinate of this site.
    """

    name: str
    kind: str
    dist_name: str
    batch_shape: torch.Size
    event_shape: torch.Size
    num_categories: int = 0
    lower: Optional[torch.Tensor] = None
    upper: Optional[torch.Tensor] = None
    offset: int = 0
    _numel: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._numel = self.coord_shape.numel()

    @property
    def value_shape(self) -> torch.Size:
        """Shape of the site's value in an unbatched run of the model."""
        return self.batch_shape + self.event_shape

    @property
    def coord_shape(self) -> torch.Size:
        """Shape of the site's coordinates (the value shape without a one-hot axis)."""
        shape = self.value_shape
        return shape[:-1] if self.kind == ONE_HOT else shape

    @property
    def num_coords(self) -> int:
        """Number of flat coordinates of the site."""
        return self._numel

    @property
    def is_scalar(self) -> bool:
        """True for binary and ordinal sites (one number per coordinate)."""
        return self.kind in (BINARY, ORDINAL)

    @property
    def grad_width(self) -> int:
        """Gradient entries per coordinate: 1, or ``K`` for (one-hot) categoricals."""
        return 1 if self.is_scalar else self.num_categories

    def model_shape(self, num_chains: int, max_plate_nesting: int) -> torch.Size:
        """Shape of the value handed to the model.

        A single chain sees the site's own shape; batched chains get a chain dimension
        at ``-(max_plate_nesting + 1)``, left of every plate dimension, as in Pyro's
        vectorised particles.
        """
        if num_chains == 1:
            return self.value_shape
        pad = max_plate_nesting - len(self.batch_shape)
        return torch.Size((num_chains,) + (1,) * pad) + self.value_shape

    def values_from_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """Model value from codes ``[..., *coord_shape]`` (long)."""
        if self.kind == CATEGORICAL:
            return codes
        if self.kind == ONE_HOT:
            # a comparison, not F.one_hot, whose range check reads values (untraceable)
            categories = torch.arange(self.num_categories, device=codes.device)
            return (codes.unsqueeze(-1) == categories).to(torch.get_default_dtype())
        return codes.to(torch.get_default_dtype())

    def codes_from_values(self, value, what: str = "Value") -> torch.Tensor:
        """Codes (long) ``[C, *coord_shape]`` from model values ``[C, *value_shape]``,
        checked: the shape, whole numbers, and the site's support.

        :param value: a tensor, array or nested list.
        :param str what: how to call the value in error messages.
        :raises ValueError: naming the site, the offending entry and the support.
        """
        try:
            value = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError) as error:
            raise ValueError(
                "{} of latent site {} is not a tensor of numbers: {!r} ({})".format(
                    what, self.describe(), value, error
                )
            ) from None
        rank = len(self.value_shape)
        if value.dim() != rank + 1 or tuple(value.shape[1:]) != tuple(self.value_shape):
            raise ValueError(
                "{} of latent site {} has shape {}; expected {} (a leading dimension of "
                "chains or draws, then the site's shape).".format(
                    what,
                    self.describe(),
                    tuple(value.shape),
                    "(C, {})".format(", ".join(map(str, self.value_shape))) if rank else "(C,)",
                )
            )
        if value.dtype == torch.bool:
            value = value.long()
        if value.is_complex():
            raise ValueError("{} of latent site {} is complex.".format(what, self.describe()))
        if value.is_floating_point():
            whole = torch.isfinite(value) & (value == value.round())
            self._refuse(what, value, ~whole, "a whole number")
        codes = value.argmax(-1) if self.kind == ONE_HOT else value.round().long()
        if self.kind == ONE_HOT:
            is_one_hot = ((value == 0) | (value == 1)).all(-1) & (value.sum(-1) == 1)
            self._refuse(what, value, ~is_one_hot, "a one-hot vector (one 1, zeros elsewhere)")
        elif self.kind == CATEGORICAL:
            inside = (codes >= 0) & (codes < self.num_categories)
            self._refuse(
                what, value, ~inside, "a category in 0 .. {}".format(self.num_categories - 1)
            )
        else:
            lower, upper = self.lower.to(value.device), self.upper.to(value.device)
            inside = (value >= lower) & (value <= upper)
            self._refuse(what, value, ~inside, self._support_text())
        return codes

    def _support_text(self) -> str:
        if self.kind == BINARY:
            return "0 or 1"
        low, high = float(self.lower.min()), float(self.upper.max())
        if float(self.lower.max()) == low and float(self.upper.min()) == high:
            if high == float("inf"):
                return "an integer >= {:g}".format(low) if low > -float("inf") else "an integer"
            return "an integer in {:g} .. {:g}".format(low, high)
        return "an integer within the site's bounds (lower {}, upper {})".format(
            self.lower.tolist(), self.upper.tolist()
        )

    def _refuse(self, what: str, value: torch.Tensor, bad: torch.Tensor, expected: str) -> None:
        if not bool(bad.any()):
            return
        index = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(
            "{} of latent site {} is outside the site's support: {}{} (chain/draw {}); a "
            "value of this site must be {}. Give a value in the support (init_to_value, "
            "initial_params, or the draws passed in).".format(
                what,
                self.describe(),
                value[index].tolist(),
                " at position {}".format(index[1:]) if len(index) > 1 else "",
                index[0],
                expected,
            )
        )

    def describe(self) -> str:
        """Short human-readable description, e.g. ``'z' (Categorical, 3 categories)``."""
        if self.kind in (CATEGORICAL, ONE_HOT):
            detail = "{} categories".format(self.num_categories)
        elif self.kind == BINARY:
            detail = "binary"
        else:
            detail = "ordinal"
        return "'{}' ({}, {}, shape {})".format(
            self.name, self.dist_name, detail, tuple(self.value_shape)
        )


def classify_site(name: str, fn, value: torch.Tensor) -> DiscreteSite:
    """Classify a latent sample site; raise :class:`UnsupportedModelError` if impossible.

    :param str name: site name.
    :param fn: the site's distribution.
    :param torch.Tensor value: a value of the site (for shapes).
    :rtype: DiscreteSite
    """
    base_dist = unwrap_distribution(fn)
    dist_name = type(base_dist).__name__
    support = base_constraint(fn.support)
    is_discrete = support_is_discrete(support)
    if is_discrete is None:
        raise UnsupportedModelError(
            "Cannot determine the support of latent site '{}' ({}): its support is "
            "not a fixed constraint. pyro-gwg supports {}. Give the distribution a "
            "concrete discrete support, observe the site, or mark it "
            "infer={{'enumerate': 'parallel'}} to sum it out.".format(name, dist_name, _SUPPORTED)
        )
    if not is_discrete:
        raise UnsupportedModelError(
            "Latent site '{}' is continuous ({}, support {}). GWG and the other "
            "pyro-gwg kernels sample discrete sites only. A model with continuous "
            "latent sites needs a kernel that runs HMC/NUTS on the continuous sites: "
            "pyro_gwg.Auto(model) chooses NUTS for them and a move for every other "
            "site, or pyro_gwg.MixedGibbs(NUTS(model), GWG()). Alternatively observe the site "
            "(pyro.condition), or sample the model with Pyro's NUTS after marking the "
            "discrete sites infer={{'enumerate': 'parallel'}}.".format(name, dist_name, support)
        )
    batch_shape, event_shape = fn.batch_shape, fn.event_shape
    if tuple(value.shape) != tuple(batch_shape + event_shape):
        batch_shape = value.shape[: value.dim() - len(event_shape)]
    kwargs = dict(name=name, dist_name=dist_name, batch_shape=batch_shape, event_shape=event_shape)
    if isinstance(support, type(constraints.boolean)):
        return _scalar_site(BINARY, 0.0, 1.0, **kwargs)
    if isinstance(support, type(constraints.one_hot)):
        return DiscreteSite(kind=ONE_HOT, num_categories=int(event_shape[-1]), **kwargs)
    if isinstance(base_dist, Categorical):
        return DiscreteSite(
            kind=CATEGORICAL, num_categories=int(base_dist.logits.shape[-1]), **kwargs
        )
    if isinstance(support, constraints.integer_interval):
        return _scalar_site(ORDINAL, support.lower_bound, support.upper_bound, **kwargs)
    if isinstance(support, type(constraints.nonnegative_integer)):
        return _scalar_site(ORDINAL, support.lower_bound, float("inf"), **kwargs)
    if isinstance(support, constraints._Integer):
        return _scalar_site(ORDINAL, -float("inf"), float("inf"), **kwargs)
    raise UnsupportedModelError(
        "Cannot determine the support of latent site '{}' ({}, support {}): it is "
        "discrete but not a form pyro-gwg knows. pyro-gwg supports {}. Rewrite the "
        "site with one of these, or mark it infer={{'enumerate': 'parallel'}} to sum "
        "it out.".format(name, dist_name, support, _SUPPORTED)
    )


def _scalar_site(kind, lower, upper, **kwargs) -> DiscreteSite:
    site = DiscreteSite(kind=kind, **kwargs)
    shape = site.coord_shape
    dtype = torch.get_default_dtype()
    site.lower = torch.broadcast_to(torch.as_tensor(lower, dtype=dtype), shape).clone()
    site.upper = torch.broadcast_to(torch.as_tensor(upper, dtype=dtype), shape).clone()
    return site


def build_layout(sites: Iterable[DiscreteSite]) -> CoordinateLayout:
    """Assign flat offsets to ``sites`` (in order) and build their coordinate layout.

    :param sites: the latent discrete sites.
    :rtype: ~pyro_gwg.proposals.layout.CoordinateLayout
    """
    is_scalar: List[torch.Tensor] = []
    lower: List[torch.Tensor] = []
    upper: List[torch.Tensor] = []
    categories: List[torch.Tensor] = []
    offset = 0
    for site in sites:
        site.offset = offset
        n = site.num_coords
        offset += n
        is_scalar.append(torch.full((n,), site.is_scalar))
        if site.is_scalar:
            lower.append(site.lower.reshape(-1).float())
            upper.append(site.upper.reshape(-1).float())
        else:
            lower.append(torch.zeros(n))
            upper.append(torch.full((n,), float(site.num_categories - 1)))
        categories.append(torch.full((n,), site.num_categories, dtype=torch.long))
    return CoordinateLayout(
        torch.cat(is_scalar), torch.cat(lower), torch.cat(upper), torch.cat(categories)
    )
