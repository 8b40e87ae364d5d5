r"""Binary energy-based models: any torch module as the log density of binary data.

:func:`binary_ebm` turns a network :math:`f_\theta: \{0, 1\}^{D} \to \mathbb R` into the
Pyro model :math:`\log p(x) = f_\theta(x) - \log Z` over a binary site ``"x"`` of a
given shape (the deep EBMs of Grathwohl et al. 2021 [Grathwohl2021]_, Section 8). The
gradient-informed
kernels differentiate the network with respect to its input; the gradient-free ones
only evaluate it. :func:`mlp_energy` builds a small seeded network.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import pyro
import pyro.distributions as dist
import torch

__all__ = ["binary_ebm", "mlp_energy"]


def binary_ebm(net: torch.nn.Module, shape: Union[int, Sequence[int]]) -> torch.Tensor:
    r"""A binary EBM, sampled at site ``"x"`` of shape ``shape``.

    .. math:: \log p(x) = f_\theta(x) - \log Z, \qquad x \in \{0, 1\}^{\text{shape}},

    ``x`` with a flat base measure (a masked ``Bernoulli``, contributing 0) and
    :math:`f_\theta` added as a ``pyro.factor``. ``net`` maps a float batch
    ``[N, *shape]`` to ``[N]`` (or ``[N, 1]``); the model flattens any leading batch
    (chain) dimensions into ``N`` and back, so it broadcasts over them. For
    ``jit_compile=True`` freeze the network first (``net.requires_grad_(False)``).

    :param torch.nn.Module net: the negative energy :math:`f_\theta`.
    :param shape: shape of one data point, e.g. ``(8, 8)`` or ``64``.
    :returns: the state as {0, 1} floats, shape ``shape``.
    """
    shape = torch.Size([shape] if isinstance(shape, int) else shape)
    base = dist.Bernoulli(probs=torch.tensor(0.5)).expand(shape).to_event(len(shape))
    x = pyro.sample("x", base.mask(False))
    batch = x.shape[: x.dim() - len(shape)]
    f = net(x.reshape((-1,) + shape)).reshape(batch)
    pyro.factor("energy", f)
    return x


def mlp_energy(
    num_inputs: int, hidden: Sequence[int] = (32,), seed: Optional[int] = 0
) -> torch.nn.Module:
    """A small multilayer perceptron ``[N, num_inputs] -> [N]`` (SiLU activations),
    with seeded initialisation, for :func:`binary_ebm`.

    :param int num_inputs: ``D`` (the input is flattened).
    :param hidden: widths of the hidden layers.
    :param int seed: seed of the initial weights (``None``: the global RNG).
    :rtype: torch.nn.Module
    """
    with torch.random.fork_rng(enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        layers = [torch.nn.Flatten()]
        width = num_inputs
        for size in hidden:
            layers += [torch.nn.Linear(width, size), torch.nn.SiLU()]
            width = size
        layers += [torch.nn.Linear(width, 1), torch.nn.Flatten(0)]
        return torch.nn.Sequential(*layers)
