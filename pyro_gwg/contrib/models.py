r"""Continuous targets with exact reference values, for
:class:`~pyro_gwg.contrib.estimators.uha.UHA` and
:class:`~pyro_gwg.contrib.diffusion.MCScoreSampler`.

* Paper 001's multimodal targets, given by :math:`f` with
  :math:`p(\theta) \propto e^{f(\theta) - |\theta|^2/2}`: the 1-D four-mode
  :func:`four_mode_tanh` and the 2-D :func:`himmelblau`; :func:`mode_probabilities`
  integrates the probability of each mode's Voronoi cell on a grid.
* :class:`GaussianMixture` with exact moments.
* Bayesian linear regression with a normal-inverse-gamma prior
  (:func:`linear_regression`) and its analytic log marginal likelihood
  (:func:`linear_regression_log_evidence`).
* Bayesian logistic regression (:func:`logistic_regression`, and the same density as a
  plain batched function, :func:`logistic_regression_log_density`) on scikit-learn's breast
  cancer data (:func:`breast_cancer`), the kind of benchmark of Geffner & Domke 2021 [Geffner2021]_.
"""

from __future__ import annotations

import math
from typing import Tuple

import pyro
import pyro.distributions as dist
import torch

__all__ = [
    "FOUR_MODE_CENTRES",
    "GaussianMixture",
    "HIMMELBLAU_MODES",
    "breast_cancer",
    "four_mode_tanh",
    "grid_moments",
    "himmelblau",
    "linear_regression",
    "linear_regression_log_evidence",
    "logistic_regression",
    "logistic_regression_log_density",
    "mode_probabilities",
    "nearest_mode",
]

#: Centres :math:`\mu_i` of :func:`four_mode_tanh` (McDonald & Barron 2022 [McDonald2022]_,
#: Section 3), shape ``[4, 1]``.
FOUR_MODE_CENTRES = torch.tensor([[-5.0], [-1.0], [3.0], [4.0]])

#: The four maxima of :func:`himmelblau` (where :math:`f = 0`), shape ``[4, 2]``.
HIMMELBLAU_MODES = torch.tensor(
    [[3.0, 2.0], [-2.805118, 3.131312], [-3.779310, -3.283186], [3.584428, -1.848126]]
)


def four_mode_tanh(theta: torch.Tensor) -> torch.Tensor:
    r""":math:`f(\theta) = 100\sum_{i=1}^4 [\tanh(\theta + 0.05 - \mu_i) -
    \tanh(\theta - 0.05 - \mu_i)]`, :math:`\mu = (-5, -1, 3, 4)` (McDonald & Barron 2022
    [McDonald2022]_, Section 3).

    Evaluated through the identity :math:`\tanh(u + a) - \tanh(u - a) =
    2\sinh(2a) / (\cosh 2u + \cosh 2a)`, written with :math:`e = e^{-2|u|}` as
    :math:`4\sinh(2a)\, e / (1 + 2\cosh(2a)\, e + e^2)`: one exponential per mode instead
    of two hyperbolic tangents, no cancellation far from the modes, finite gradients.

    :param torch.Tensor theta: ``[..., 1]``.
    :returns: ``[...]``.
    """
    e = torch.exp(-2 * (theta - FOUR_MODE_CENTRES[:, 0].to(theta)).abs())
    bump = 4 * math.sinh(0.1) * e / (1 + 2 * math.cosh(0.1) * e + e**2)
    return 100 * bump.sum(-1)


def himmelblau(theta: torch.Tensor) -> torch.Tensor:
    r""":math:`f(\theta) = -(\theta_1^2 + \theta_2 - 11)^2 - (\theta_1 + \theta_2^2 - 7)^2`
    (McDonald & Barron 2022 [McDonald2022]_, Section 3).

    :param torch.Tensor theta: ``[..., 2]``.
    :returns: ``[...]``.
    """
    a, b = theta[..., 0], theta[..., 1]
    return -((a**2 + b - 11) ** 2) - (a + b**2 - 7) ** 2


def nearest_mode(x: torch.Tensor, modes: torch.Tensor) -> torch.Tensor:
    """Index of the nearest mode (Euclidean) of each point: the Voronoi cell it lies in.

    :param torch.Tensor x: ``[N, d]``.
    :param torch.Tensor modes: ``[M, d]``.
    :returns: long ``[N]``.
    """
    return torch.cdist(x.to(modes), modes).argmin(-1)


def _grid(f, dim: int, low: float, high: float, points_per_dim: int):
    """Midpoints of a regular grid over ``[low, high]^dim`` (float64) and the normalised
    weights of :math:`e^{f - |\theta|^2/2}` at them."""
    step = (high - low) / points_per_dim
    axis = low + step * (torch.arange(points_per_dim, dtype=torch.float64) + 0.5)
    grid = torch.stack(torch.meshgrid(*([axis] * dim), indexing="ij"), -1).reshape(-1, dim)
    return grid, torch.softmax(f(grid) - 0.5 * (grid**2).sum(-1), 0)


def mode_probabilities(
    f, modes: torch.Tensor, low: float, high: float, points_per_dim: int
) -> torch.Tensor:
    r"""Probability of each mode's Voronoi cell under :math:`p \propto e^{f - |\theta|^2/2}`,
    by the midpoint rule on a regular grid over :math:`[low, high]^d` in double precision
    (the mass outside the box must be negligible).

    :param callable f: batched :math:`f` on ``[..., d]``.
    :param torch.Tensor modes: ``[M, d]``.
    :param float low: lower end of the box in every coordinate.
    :param float high: upper end.
    :param int points_per_dim: grid points per coordinate.
    :returns: float64 ``[M]``, summing to 1.
    """
    grid, weights = _grid(f, modes.shape[1], low, high, points_per_dim)
    cells = nearest_mode(grid, modes.double())
    return torch.zeros(len(modes), dtype=torch.float64).index_add_(0, cells, weights)


def grid_moments(
    f, dim: int, low: float, high: float, points_per_dim: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Mean and covariance of :math:`p \propto e^{f - |\theta|^2/2}` by the midpoint rule
    on a regular grid (as :func:`mode_probabilities`).

    :returns: float64 ``(mean [d], covariance [d, d])``.
    """
    grid, weights = _grid(f, dim, low, high, points_per_dim)
    mean = weights @ grid
    centred = grid - mean
    return mean, (weights[:, None] * centred).T @ centred


class GaussianMixture:
    """A mixture of diagonal Gaussians with exact moments.

    :param torch.Tensor weights: mixing weights, ``[M]`` (normalised here).
    :param torch.Tensor means: ``[M, d]``.
    :param torch.Tensor scales: standard deviations, ``[M, d]``.
    """

    def __init__(self, weights: torch.Tensor, means: torch.Tensor, scales: torch.Tensor):
        self.weights = weights / weights.sum()
        self.means = means
        self.scales = scales

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised log density, ``[..., d] -> [...]``."""
        components = dist.Normal(self.means, self.scales).log_prob(x.unsqueeze(-2)).sum(-1)
        return torch.logsumexp(components + self.weights.log(), -1)

    def mean(self) -> torch.Tensor:
        """Exact mean, ``[d]``."""
        return self.weights @ self.means

    def covariance(self) -> torch.Tensor:
        """Exact covariance, ``[d, d]``."""
        second = torch.diag_embed(self.scales**2) + self.means[:, :, None] * self.means[:, None]
        mean = self.mean()
        return (self.weights[:, None, None] * second).sum(0) - torch.outer(mean, mean)

    @classmethod
    def example_2d(cls) -> GaussianMixture:
        """The 2-D, two-component mixture used in the tests and the benchmark."""
        return cls(
            torch.tensor([0.3, 0.7]),
            torch.tensor([[-1.5, 0.5], [1.0, -0.5]]),
            torch.tensor([[0.5, 0.8], [0.7, 0.4]]),
        )


def linear_regression(
    X: torch.Tensor, y: torch.Tensor, a0: float = 3.0, b0: float = 2.0, v0: float = 1.0
) -> None:
    r"""Bayesian linear regression with a conjugate normal-inverse-gamma prior:
    :math:`\sigma^2 \sim \mathrm{InvGamma}(a_0, b_0)`,
    :math:`w \mid \sigma^2 \sim \mathcal{N}(0, v_0\sigma^2 I)`,
    :math:`y \sim \mathcal{N}(Xw, \sigma^2 I)`. Latent sites ``sigma2`` (positive) and
    ``w``.

    :param torch.Tensor X: design matrix, ``[n, p]``.
    :param torch.Tensor y: responses, ``[n]``.
    :param float a0: prior shape.
    :param float b0: prior rate.
    :param float v0: prior variance scale of the coefficients.
    """
    sigma2 = pyro.sample("sigma2", dist.InverseGamma(a0, b0))
    w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1]), (v0 * sigma2).sqrt()).to_event(1))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(X @ w, sigma2.sqrt()), obs=y)


def linear_regression_log_evidence(
    X: torch.Tensor, y: torch.Tensor, a0: float = 3.0, b0: float = 2.0, v0: float = 1.0
) -> float:
    r"""Exact :math:`\log p(y \mid X)` of :func:`linear_regression` (a multivariate
    Student t): with :math:`\Lambda_n = I/v_0 + X^\top X`, :math:`m_n = \Lambda_n^{-1}X^\top y`,
    :math:`a_n = a_0 + n/2`, :math:`b_n = b_0 + (y^\top y - m_n^\top\Lambda_n m_n)/2`,

    .. math:: \log p(y) = -\tfrac n2\log 2\pi - \tfrac12\log|\Lambda_n| - \tfrac p2\log v_0
              + a_0\log b_0 - a_n\log b_n + \log\Gamma(a_n) - \log\Gamma(a_0).
    """
    X, y = X.double(), y.double()
    n, p = X.shape
    precision = torch.eye(p, dtype=torch.float64) / v0 + X.T @ X
    mean = torch.linalg.solve(precision, X.T @ y)
    a_n = a0 + n / 2
    b_n = b0 + 0.5 * (y @ y - mean @ precision @ mean)
    return float(
        -n / 2 * math.log(2 * math.pi)
        - 0.5 * torch.logdet(precision)
        - 0.5 * p * math.log(v0)
        + a0 * math.log(b0)
        - a_n * torch.log(b_n)
        + math.lgamma(a_n)
        - math.lgamma(a0)
    )


def logistic_regression(X: torch.Tensor, y: torch.Tensor, prior_scale: float = 1.0) -> None:
    """Bayesian logistic regression: ``w ~ N(0, prior_scale^2 I)``,
    ``y ~ Bernoulli(logits = X w)``; one latent site ``w``.

    :param torch.Tensor X: design matrix (include a column of ones for an intercept).
    :param torch.Tensor y: 0/1 responses.
    :param float prior_scale: prior standard deviation.
    """
    w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1]), prior_scale).to_event(1))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


def logistic_regression_log_density(X: torch.Tensor, y: torch.Tensor, prior_scale: float = 1.0):
    """The log joint of :func:`logistic_regression` as a batched function of ``w``,
    ``[..., p] -> [...]`` (faster than tracing the model for every evaluation)."""

    def log_density(w: torch.Tensor) -> torch.Tensor:
        prior = dist.Normal(0.0, prior_scale).log_prob(w).sum(-1)
        logits = w @ X.T
        return prior + (y * logits - torch.nn.functional.softplus(logits)).sum(-1)

    return log_density


def breast_cancer(intercept: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's breast cancer data (569 x 30), standardised, with an intercept
    column first; needs ``scikit-learn``.

    :param bool intercept: prepend a column of ones.
    :returns: ``(X, y)``, float tensors.
    """
    try:
        from sklearn.datasets import load_breast_cancer
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("breast_cancer() needs scikit-learn: pip install scikit-learn") from error
    features, labels = load_breast_cancer(return_X_y=True)
    X = torch.tensor(features, dtype=torch.float32)
    X = (X - X.mean(0)) / X.std(0)
    if intercept:
        X = torch.cat([torch.ones(len(X), 1), X], 1)
    return X, torch.tensor(labels, dtype=torch.float32)
