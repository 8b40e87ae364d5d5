r"""The ordinal lattice targets of Rhodes & Gutmann (2022 [Rhodes2022]_, Section 5.1).

Each of ``D`` coordinates takes one of ``V`` equally spaced values
:math:`\mathcal S = \{\ell, \ell + h, \dots, u\}` (the paper: ``D = 20``, ``V = 50`` on
:math:`[-1.5, 3.0]`). The target is an equally weighted mixture of ``K`` fully
factorised components,

.. math:: p(s) = \frac1K \sum_{k=1}^K \prod_{i=1}^D p_k(s_i), \qquad
          p_k(s) = \frac{e^{g_k(s)}}{\sum_{t \in \mathcal S} e^{g_k(t)}},

so the log density is :math:`f(s) = \log \sum_k \exp\big(\sum_i g_k(s_i) - D \log
Z_k\big) - \log K`. The component shapes :math:`g_k(s) = g(s - \mu_k)` are one of two
polynomials (the forms and shifts of the reference implementation):

* ``"quadratic"``: :math:`g(u) = 0.75 - 2u - 6u^2` (that is :math:`\sum_j w_j (2u)^j`
  with :math:`w = (0.75, -1, -1.5)`), shifts :math:`\mu_k` equally spaced on
  :math:`[0, 2]`;
* ``"quartic"``: :math:`g(u) = 2(-u + u^2 - u^3 - u^4)`, shifts equally spaced on
  :math:`[0, 3]`.

The components sit at equally spaced points of the diagonal of the hypercube, so the
target concentrates along the diagonal and every pair of coordinates is positively
correlated; moving along the diagonal needs all coordinates to move together.

The number of components ``K`` is not in our copy of the paper. The default, 25, makes
neighbouring components overlap enough in 20 dimensions that the mass forms one
connected ridge along the diagonal (the picture the paper describes). With the
reference implementation's constructor default of 3 the components are isolated
modes in 20 dimensions (the density between neighbours is about :math:`e^{-30}` of the
peaks for the quadratic form): measured, none of GWG, NCG, AVG and PAVG left the
component it started in (mean marginal KL about :math:`\log 3`).

The model holds the lattice index :math:`c_i \in \{0, \dots, V-1\}` of every coordinate
in one ordinal site ``"s"`` (uniform prior, support ``integer_interval(0, V - 1)``) and
maps it linearly to the lattice, :math:`s_i = \ell + h c_i`, inside the model; the log
density is a ``pyro.factor`` of the float index, so its gradient with respect to the
index is :math:`h\, \partial f / \partial s_i`, informative for gradient-based samplers.
Exact marginals, means and covariance come from the mixture
(:func:`ordinal_mixture_moments`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pyro
import torch
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution

__all__ = [
    "IntegerUniform",
    "OrdinalMixtureMoments",
    "ordinal_component_log_probs",
    "ordinal_grid",
    "ordinal_mixture",
    "ordinal_mixture_moments",
]

_FORMS = {
    # (coefficients of u^0, u^1, ...) after the scaling of u, scale of u, shift range
    "quadratic": ((0.75, -1.0, -1.5), 2.0, 2.0),
    "quartic": ((0.0, -2.0, 2.0, -2.0, -2.0), 1.0, 3.0),
}


class IntegerUniform(TorchDistribution):
    """Uniform distribution on the integers ``low, ..., high`` (both included).

    Its support is ``integer_interval(low, high)``, so pyro-gwg treats a site with this
    distribution as an ordinal site.

    :param int low: smallest value.
    :param int high: largest value.
    :param torch.Size batch_shape: batch shape.
    """

    arg_constraints = {}
    has_enumerate_support = True

    def __init__(self, low: int, high: int, batch_shape=(), validate_args=None):
        if int(low) != low or int(high) != high or high < low:
            raise ValueError("need integers low <= high, got {}, {}".format(low, high))
        self.low, self.high = int(low), int(high)
        super().__init__(torch.Size(batch_shape), validate_args=validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(self.low, self.high)

    def expand(self, batch_shape, _instance=None):
        return IntegerUniform(self.low, self.high, batch_shape)

    def sample(self, sample_shape=()):
        shape = torch.Size(sample_shape) + self.batch_shape
        return torch.randint(self.low, self.high + 1, shape).to(torch.get_default_dtype())

    def log_prob(self, value):
        inside = (value >= self.low) & (value <= self.high)
        log_p = torch.full_like(value, -math.log(self.high - self.low + 1), dtype=torch.float)
        return torch.where(inside, log_p, -float("inf")).expand(
            torch.broadcast_shapes(value.shape, self.batch_shape)
        )

    def enumerate_support(self, expand=True):
        values = torch.arange(self.low, self.high + 1, dtype=torch.get_default_dtype())
        values = values.reshape((-1,) + (1,) * len(self.batch_shape))
        return values.expand((-1,) + self.batch_shape) if expand else values


def ordinal_grid(num_values: int = 50, low: float = -1.5, high: float = 3.0) -> torch.Tensor:
    """The ``num_values`` equally spaced lattice values on ``[low, high]``.

    :rtype: torch.Tensor
    """
    return torch.linspace(low, high, num_values)


def _shape(values: torch.Tensor, form: str, num_components: int) -> torch.Tensor:
    """Unnormalised log densities :math:`g_k(s)`, ``[..., K]``."""
    if form not in _FORMS:
        raise ValueError("form must be one of {}, got {!r}".format(sorted(_FORMS), form))
    coefs, scale, span = _FORMS[form]
    shifts = torch.linspace(0.0, span, num_components, dtype=values.dtype)
    u = (values.unsqueeze(-1) - shifts) * scale
    out = torch.zeros_like(u)
    for coef in reversed(coefs):  # Horner
        out = out * u + coef
    return out


def _log_normalisers(form, num_components, num_values, low, high) -> torch.Tensor:
    r""":math:`\log Z_k = \log \sum_{t \in \mathcal S} e^{g_k(t)}`, ``[K]`` (float64)."""
    grid = ordinal_grid(num_values, low, high).double()
    return torch.logsumexp(_shape(grid, form, num_components), 0)


def ordinal_component_log_probs(
    form: str = "quadratic",
    num_components: int = 25,
    num_values: int = 50,
    low: float = -1.5,
    high: float = 3.0,
) -> torch.Tensor:
    r"""Normalised one-dimensional component log-probabilities :math:`\log p_k(s)`.

    :returns: ``[K, V]`` (float64).
    """
    grid = ordinal_grid(num_values, low, high).double()
    log_z = _log_normalisers(form, num_components, num_values, low, high)
    return _shape(grid, form, num_components).T - log_z.unsqueeze(-1)


def ordinal_mixture(
    num_dims: int = 20,
    form: str = "quadratic",
    num_components: int = 25,
    num_values: int = 50,
    low: float = -1.5,
    high: float = 3.0,
) -> torch.Tensor:
    r"""The ordinal lattice target as a Pyro model; latent site ``"s"`` holds the
    lattice indices ``[num_dims]`` (an ordinal site on ``0 .. num_values - 1``).

    The log joint of the model is the normalised :math:`\log p(s)`.

    :param int num_dims: ``D``.
    :param str form: ``"quadratic"`` or ``"quartic"`` component shape.
    :param int num_components: ``K``.
    :param int num_values: ``V``.
    :param float low: smallest lattice value.
    :param float high: largest lattice value.
    :returns: the lattice values :math:`s` (float, ``[num_dims]``).
    """
    spacing = (high - low) / (num_values - 1)
    log_z = _log_normalisers(form, num_components, num_values, low, high)
    with pyro.plate("dims", num_dims):
        index = pyro.sample("s", IntegerUniform(0, num_values - 1))
    values = low + spacing * index
    per_dim = _shape(values, form, num_components) - log_z.to(values.dtype)  # [..., D, K]
    # the sum over the plate keeps its dimension, so batched chains stay apart
    log_mix = torch.logsumexp(per_dim.sum(-2, keepdim=True), -1) - math.log(num_components)
    # the uniform prior of "s" contributes -D log V; add it back so that f = log p(s)
    pyro.factor("mixture", log_mix + num_dims * math.log(num_values))
    return values


class OrdinalMixtureMoments(NamedTuple):
    """Exact summaries of the ordinal mixture target (on the lattice values).

    :ivar torch.Tensor values: ``[V]`` lattice values.
    :ivar torch.Tensor marginals: ``[D, V]`` marginal probabilities.
    :ivar torch.Tensor mean: ``[D]``.
    :ivar torch.Tensor covariance: ``[D, D]``.
    """

    values: torch.Tensor
    marginals: torch.Tensor
    mean: torch.Tensor
    covariance: torch.Tensor


def ordinal_mixture_moments(
    num_dims: int = 20,
    form: str = "quadratic",
    num_components: int = 25,
    num_values: int = 50,
    low: float = -1.5,
    high: float = 3.0,
) -> OrdinalMixtureMoments:
    r"""Exact marginals, mean and covariance of :func:`ordinal_mixture` (float64).

    With component means :math:`m_k` and variances :math:`v_k` of :math:`p_k`:
    :math:`p(s_i) = \frac1K\sum_k p_k(s_i)`, :math:`\mathbb E s_i = \bar m = \frac1K
    \sum_k m_k`, :math:`\operatorname{Cov}(s_i, s_j) = \frac1K\sum_k m_k^2 - \bar m^2`
    for :math:`i \ne j` and :math:`\frac1K \sum_k (v_k + m_k^2) - \bar m^2` for
    :math:`i = j`.

    Arguments as in :func:`ordinal_mixture`.

    :rtype: OrdinalMixtureMoments
    """
    values = ordinal_grid(num_values, low, high).double()
    probs = ordinal_component_log_probs(form, num_components, num_values, low, high).exp()
    means = probs @ values
    second = probs @ values.pow(2)
    mean = means.mean()
    across = means.pow(2).mean() - mean**2
    within = second.mean() - mean**2
    covariance = torch.full((num_dims, num_dims), float(across), dtype=torch.float64)
    covariance.diagonal().fill_(float(within))
    marginals = probs.mean(0).expand(num_dims, -1).clone()
    return OrdinalMixtureMoments(
        values, marginals, torch.full((num_dims,), float(mean), dtype=torch.float64), covariance
    )
