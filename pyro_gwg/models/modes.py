r"""A multimodal binary target with known mode masses: a mixture of product-Bernoulli
modes, written as an ordinary Pyro model.

Mode :math:`k` is a binary pattern :math:`m_k \in \{0, 1\}^D` whose bits are each
flipped with probability :math:`\varepsilon`, and the modes have weights :math:`w_k`:

.. math:: p(x) = \sum_k w_k \prod_i \varepsilon^{[x_i \ne m_{ki}]}
          (1 - \varepsilon)^{[x_i = m_{ki}]}.

The mass of mode :math:`k` is :math:`w_k`, exactly: it is the expectation under
:math:`p` of the responsibility :math:`r_k(x) = w_k p_k(x) / p(x)`
(:func:`mode_responsibilities`), so a sampler's estimate of the mode masses is the mean
of :math:`r(x)` over its draws, and its error is known without enumeration. With
patterns :math:`d` bits apart, a chain moves from one mode to another through states
about :math:`d/2` flips from both, whose mass falls like :math:`\binom{d}{d/2}
(\varepsilon(1 - \varepsilon))^{d/2}`: the modes are well separated for
:math:`d \gtrsim 16` at :math:`\varepsilon = 0.15`, and a sampler that moves only
within a mode estimates the mass of one of them as 1.

* :func:`binary_modes`: the model (site ``"x"``, ``D`` bits);
* :func:`random_binary_modes`: patterns at a chosen distance from each other;
* :func:`mode_responsibilities`: :math:`r(x)`, for the mode masses and the mode a
  state is in.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import pyro
import pyro.distributions as dist
import torch

from pyro_gwg._validation import check_integer, check_number

__all__ = ["BinaryModes", "binary_modes", "mode_responsibilities", "random_binary_modes"]


class BinaryModes(NamedTuple):
    """Parameters of :func:`binary_modes`.

    :ivar torch.Tensor patterns: ``[K, D]`` {0, 1} patterns :math:`m_k`.
    :ivar torch.Tensor weights: ``[K]`` weights :math:`w_k` (positive, summing to 1):
        the exact mode masses.
    :ivar float flip_prob: :math:`\\varepsilon`.
    """

    patterns: torch.Tensor
    weights: torch.Tensor
    flip_prob: float


def _mode_log_probs(
    x: torch.Tensor, patterns: torch.Tensor, weights: torch.Tensor, flip_prob: float
) -> torch.Tensor:
    """``[..., K]`` :math:`\\log w_k + \\log p_k(x)` for bits ``x [..., D]``."""
    log_flip = torch.log(torch.as_tensor(flip_prob, dtype=x.dtype))
    log_keep = torch.log1p(-torch.as_tensor(flip_prob, dtype=x.dtype))
    patterns = patterns.to(x.dtype)
    # Hamming distances, linear in x: sum_i x_i (1 - 2 m_ki) + |m_k|
    distance = x @ (1 - 2 * patterns).T + patterns.sum(-1)
    num_bits = patterns.shape[-1]
    return weights.log() + distance * log_flip + (num_bits - distance) * log_keep


def binary_modes(
    patterns: torch.Tensor, weights: torch.Tensor, flip_prob: float = 0.15
) -> torch.Tensor:
    r"""A mixture of product-Bernoulli modes (see the module docstring), sampled at site
    ``"x"`` (``D`` bits in the plate ``"bits"``).

    The bits carry a uniform ``Bernoulli(0.5)`` prior (a constant) and the mixture
    enters as one ``pyro.factor``, :math:`\log \sum_k w_k p_k(x)`, outside the plate,
    so the model broadcasts over batch dimensions on the left.

    :param torch.Tensor patterns: ``[K, D]`` {0, 1} patterns.
    :param torch.Tensor weights: ``[K]`` mode weights (positive, summing to 1).
    :param float flip_prob: :math:`\varepsilon` in (0, 1/2).
    :returns: the bits as {0, 1} floats, shape ``[D]``.
    """
    num_bits = patterns.shape[-1]
    with pyro.plate("bits", num_bits, dim=-1):
        x = pyro.sample("x", dist.Bernoulli(0.5))
    log_probs = _mode_log_probs(x, patterns, weights, flip_prob)
    pyro.factor("modes", log_probs.logsumexp(-1, keepdim=True))
    return x


def random_binary_modes(
    num_modes: int = 4,
    num_bits: int = 64,
    distance: int = 16,
    flip_prob: float = 0.15,
    weights: Optional[torch.Tensor] = None,
    seed: int = 0,
) -> BinaryModes:
    """Patterns exactly ``distance`` bits apart, for :func:`binary_modes`: a random base
    pattern with a block of ``distance / 2`` bits of its own flipped in each mode (the
    blocks disjoint, at random positions).

    :param int num_modes: ``K``.
    :param int num_bits: ``D``, at least ``K * distance / 2``.
    :param int distance: the Hamming distance between any two patterns (even).
    :param float flip_prob: :math:`\\varepsilon` in (0, 1/2).
    :param torch.Tensor weights: ``[K]`` mode weights (default: proportional to
        1, 2, ..., K, so that the masses differ).
    :param int seed: seed of the patterns.
    :rtype: BinaryModes
    :raises ValueError: for an odd distance, blocks that do not fit in ``D`` bits, or
        weights that are not ``K`` positive numbers.
    """
    num_modes = check_integer("num_modes", num_modes, 1)
    num_bits = check_integer("num_bits", num_bits, 1)
    distance = check_integer("distance", distance, 2)
    flip_prob = check_number("flip_prob", flip_prob, 0, 0.5, low_open=True, high_open=True)
    half = distance // 2
    if distance % 2 or num_modes * half > num_bits:
        raise ValueError(
            "random_binary_modes: {} modes {} bits apart need an even distance and "
            "num_bits >= num_modes * distance / 2 = {}, got distance={} and "
            "num_bits={}.".format(num_modes, distance, num_modes * half, distance, num_bits)
        )
    if weights is None:
        weights = torch.arange(1, num_modes + 1, dtype=torch.get_default_dtype())
    weights = torch.as_tensor(weights, dtype=torch.get_default_dtype())
    if weights.shape != (num_modes,) or not bool((weights > 0).all()):
        raise ValueError(
            "random_binary_modes: weights must be {} positive numbers, got {}".format(
                num_modes, weights
            )
        )
    generator = torch.Generator().manual_seed(seed)
    base = torch.randint(0, 2, (num_bits,), generator=generator)
    order = torch.randperm(num_bits, generator=generator)
    patterns = base.repeat(num_modes, 1)
    for k in range(num_modes):
        block = order[k * half : (k + 1) * half]
        patterns[k, block] = 1 - patterns[k, block]
    return BinaryModes(
        patterns.to(torch.get_default_dtype()), weights / weights.sum(), float(flip_prob)
    )


def mode_responsibilities(
    x: torch.Tensor, patterns: torch.Tensor, weights: torch.Tensor, flip_prob: float
) -> torch.Tensor:
    r"""Responsibilities :math:`r_k(x) = w_k p_k(x) / \sum_j w_j p_j(x)` of the modes for
    the states ``x``: their mean under :math:`p` is the mode mass :math:`w_k`.

    :param torch.Tensor x: ``[..., D]`` bits.
    :param torch.Tensor patterns: ``[K, D]``.
    :param torch.Tensor weights: ``[K]``.
    :param float flip_prob: :math:`\varepsilon`.
    :returns: ``[..., K]``, summing to 1.
    """
    x = x.to(torch.get_default_dtype())
    return _mode_log_probs(x, patterns, weights, flip_prob).softmax(-1)
