r"""Factorial hidden Markov model (Grathwohl et al. 2021 [Grathwohl2021]_, Section 6 and
Appendix G).

A binary hidden state :math:`x \in \{0, 1\}^{T \times K}` (``K`` independent Markov
chains, the factors) generates a real time series :math:`y \in \mathbb R^T`:

.. math::
    p(x, y) &= p(x_1) \prod_{t=2}^T p(x_t \mid x_{t-1}) \prod_{t=1}^T
              \mathcal N(y_t; w^\top x_t + b, \sigma^2), \\
    p(x_1) &= \prod_k \mathrm{Bernoulli}(x_{1k}; \alpha_k), \qquad
    p(x_{tk} \ne x_{t-1,k}) = \beta_k.

:func:`factorial_hmm` is the model, :func:`random_fhmm` draws parameters, a hidden
path and data as in the paper's code (:math:`w, b \sim \mathcal N(0, 1)`,
:math:`\sigma = 0.5`, :math:`\alpha = 0.1`, :math:`\beta = 0.05`), and
:func:`fhmm_prior_sample` draws paths from the prior and
:func:`fhmm_time_blocks` lists the blocks of the structured Hamming-ball sampler (all
factors of one time step).
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import pyro
import pyro.distributions as dist
import torch

__all__ = [
    "FHMMData",
    "FHMMParams",
    "factorial_hmm",
    "fhmm_prior_sample",
    "fhmm_time_blocks",
    "random_fhmm",
]


class FHMMParams(NamedTuple):
    """Parameters of a factorial HMM.

    :ivar torch.Tensor weights: ``[K]`` emission weights ``w``.
    :ivar torch.Tensor bias: scalar emission bias ``b``.
    :ivar float noise_scale: emission noise :math:`\\sigma`.
    :ivar torch.Tensor init_prob: ``[K]`` :math:`\\alpha`, probability that a factor
        starts on.
    :ivar torch.Tensor switch_prob: ``[K]`` :math:`\\beta`, probability that a factor
        changes between consecutive steps.
    """

    weights: torch.Tensor
    bias: torch.Tensor
    noise_scale: float
    init_prob: torch.Tensor
    switch_prob: torch.Tensor


class FHMMData(NamedTuple):
    """A random factorial HMM with a hidden path and its data.

    :ivar FHMMParams params: the model parameters.
    :ivar torch.Tensor x: ``[T, K]`` the hidden path that generated ``y``.
    :ivar torch.Tensor y: ``[T]`` the observations.
    """

    params: FHMMParams
    x: torch.Tensor
    y: torch.Tensor


def _markov_log_prior(x: torch.Tensor, params: FHMMParams) -> torch.Tensor:
    """``[..., T, K]`` per-step log prior terms of ``x [..., T, K]`` (float, 0/1)."""
    first = x[..., :1, :]
    first_term = first * params.init_prob.log() + (1 - first) * (-params.init_prob).log1p()
    previous, current = x[..., :-1, :], x[..., 1:, :]
    change = previous + current - 2 * previous * current  # 1 where the factor switched
    change_term = change * params.switch_prob.log() + (1 - change) * (-params.switch_prob).log1p()
    return torch.cat([first_term, change_term], dim=-2)


def factorial_hmm(
    y: torch.Tensor,
    weights: torch.Tensor,
    bias: torch.Tensor,
    noise_scale: float,
    init_prob: torch.Tensor,
    switch_prob: torch.Tensor,
) -> torch.Tensor:
    r"""Factorial HMM posterior over the hidden path, sampled at site ``"x"`` ``[T, K]``.

    The log joint is exactly :math:`\log p(x, y)` of the module docstring: ``x`` has
    a flat base measure (a masked ``Bernoulli``, contributing 0), the Markov prior enters
    as a ``pyro.factor`` per step and factor (differentiable in ``x``: a switch is
    :math:`x_{t-1} + x_t - 2 x_{t-1} x_t`), and ``y`` is observed in a ``"time"`` plate.

    :param torch.Tensor y: ``[T]`` observations.
    :param torch.Tensor weights: ``[K]`` emission weights.
    :param torch.Tensor bias: scalar emission bias.
    :param float noise_scale: emission noise :math:`\sigma`.
    :param torch.Tensor init_prob: ``[K]`` :math:`\alpha`.
    :param torch.Tensor switch_prob: ``[K]`` :math:`\beta`.
    :returns: the hidden path as {0, 1} floats, ``[T, K]``.
    """
    params = FHMMParams(weights, bias, noise_scale, init_prob, switch_prob)
    num_steps, num_factors = y.shape[-1], weights.shape[-1]
    with pyro.plate("time", num_steps, dim=-2):
        with pyro.plate("factors", num_factors, dim=-1):
            x = pyro.sample("x", dist.Bernoulli(probs=y.new_tensor(0.5)).mask(False))
            pyro.factor("markov_prior", _markov_log_prior(x, params))
        mean = (x * weights).sum(-1, keepdim=True) + bias
        pyro.sample("y", dist.Normal(mean, noise_scale), obs=y.unsqueeze(-1))
    return x


def random_fhmm(
    num_steps: int = 1000,
    num_factors: int = 10,
    noise_scale: float = 0.5,
    init_prob: float = 0.1,
    switch_prob: float = 0.05,
    seed: Optional[int] = 0,
) -> FHMMData:
    r"""Random factorial HMM, hidden path and data: :math:`w, b \sim \mathcal N(0, 1)`,
    :math:`x \sim p(x)`, :math:`y \sim p(y \mid x)`. ``factorial_hmm(data.y,
    *data.params)`` is the posterior model.

    :param int num_steps: ``T``.
    :param int num_factors: ``K``.
    :param float noise_scale: :math:`\sigma`.
    :param float init_prob: :math:`\alpha` (every factor).
    :param float switch_prob: :math:`\beta` (every factor).
    :param int seed: seed (``None``: the global RNG).
    :rtype: FHMMData
    """
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    weights = torch.randn(num_factors, generator=generator)
    bias = torch.randn((), generator=generator)
    alpha = torch.full((num_factors,), init_prob)
    beta = torch.full((num_factors,), switch_prob)
    params = FHMMParams(weights, bias, noise_scale, alpha, beta)
    x = fhmm_prior_sample(params, num_steps, generator=generator)
    noise = torch.randn(num_steps, generator=generator) * noise_scale
    y = x @ weights + bias + noise
    return FHMMData(params, x, y)


def fhmm_prior_sample(
    params: FHMMParams,
    num_steps: int,
    sample_shape: Tuple[int, ...] = (),
    generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """Hidden paths drawn from the Markov prior :math:`p(x)`.

    :param FHMMParams params: the model parameters.
    :param int num_steps: ``T``.
    :param tuple sample_shape: leading shape of the batch of paths.
    :param torch.Generator generator: random generator (default: the global RNG).
    :returns: float ``[*sample_shape, T, K]`` with values in {0, 1}.
    """
    num_factors = params.weights.shape[-1]
    shape = tuple(sample_shape)
    start = torch.rand(shape + (1, num_factors), generator=generator) < params.init_prob
    switches = torch.rand(shape + (num_steps - 1, num_factors), generator=generator)
    switches = switches < params.switch_prob
    # x_t = x_1 XOR (number of switches up to t, mod 2)
    steps = torch.cat([start, switches], dim=-2).float()
    return steps.cumsum(-2).remainder(2)


def fhmm_time_blocks(num_steps: int, num_factors: int) -> torch.Tensor:
    """Blocks of the structured Hamming-ball sampler: the ``K`` factors of each step.

    Row ``t`` holds the flat coordinates of ``x[t, :]`` (site ``"x"`` is laid out
    row by row), for ``HammingBall(factorial_hmm, blocks=...)``.

    :param int num_steps: ``T``.
    :param int num_factors: ``K``.
    :returns: long ``[T, K]``.
    """
    return torch.arange(num_steps * num_factors).reshape(num_steps, num_factors)
