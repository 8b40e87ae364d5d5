r"""Energy-based models: any torch module as the log density of binary or categorical
data.

:func:`binary_ebm` turns a network :math:`f_\theta: \{0, 1\}^{D} \to \mathbb R` into the
Pyro model :math:`\log p(x) = f_\theta(x) - \log Z` over a binary site ``"x"`` of a
given shape (the deep EBMs of Grathwohl et al. 2021 [Grathwohl2021]_, Section 8);
:func:`categorical_ebm` is its counterpart for categorical data, the network reading
one-hot vectors (the paper's categorical EBMs, Appendix I.1). The gradient-informed
kernels differentiate the network with respect to its input; the gradient-free ones
only evaluate it. :func:`mlp_energy` builds a small seeded network.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import pyro
import pyro.distributions as dist
import torch

from pyro_gwg._validation import check_integer

__all__ = ["binary_ebm", "categorical_ebm", "mlp_energy"]


def _event_shape(shape: Union[int, Sequence[int]]) -> torch.Size:
    return torch.Size([shape] if isinstance(shape, int) else shape)


def _network_factor(net: torch.nn.Module, x: torch.Tensor, point_shape: torch.Size) -> None:
    """``pyro.factor("energy", net(x))``, the leading batch (chain) dimensions of ``x``
    in front of ``point_shape`` flattened into one for the network and restored."""
    batch = x.shape[: x.dim() - len(point_shape)]
    pyro.factor("energy", net(x.reshape((-1,) + point_shape)).reshape(batch))


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
    shape = _event_shape(shape)
    base = dist.Bernoulli(probs=torch.tensor(0.5)).expand(shape).to_event(len(shape))
    x = pyro.sample("x", base.mask(False))
    _network_factor(net, x, shape)
    return x


def categorical_ebm(
    net: torch.nn.Module, shape: Union[int, Sequence[int]], num_categories: int
) -> torch.Tensor:
    r"""A categorical EBM, sampled at site ``"x"``: ``shape`` categorical variables of
    ``num_categories`` values each, seen by the network as one-hot vectors.

    .. math:: \log p(x) = f_\theta(x) - \log Z, \qquad
              x \in \{e_1, \dots, e_K\}^{\text{shape}},

    ``x`` with a flat base measure (a masked ``OneHotCategorical``, contributing 0) and
    :math:`f_\theta` added as a ``pyro.factor``, as in :func:`binary_ebm`. ``net`` maps
    a float batch ``[N, *shape, K]`` of one-hot vectors to ``[N]`` (or ``[N, 1]``);
    Grathwohl et al. 2021 [Grathwohl2021]_ (Appendix I.1) start it with a learned linear
    embedding of each one-hot vector, and :func:`mlp_energy` with ``num_inputs = D K``
    reads the flattened one-hot values. The gradient-informed kernels propose category
    changes from the gradient of ``net`` with respect to the one-hot input (Eq. 4 of
    the paper).

    :param torch.nn.Module net: the negative energy :math:`f_\theta` of the one-hot values.
    :param shape: shape of one data point without the category dimension, e.g.
        ``(8, 8)`` or ``64``.
    :param int num_categories: ``K >= 2``.
    :returns: the state as one-hot floats, shape ``shape + (K,)``.
    """
    num_categories = check_integer("num_categories", num_categories, 2, "categories")
    shape = _event_shape(shape)
    uniform = dist.OneHotCategorical(logits=torch.zeros(num_categories))
    x = pyro.sample("x", uniform.expand(shape).to_event(len(shape)).mask(False))
    _network_factor(net, x, shape + (num_categories,))
    return x


def mlp_energy(
    num_inputs: int, hidden: Sequence[int] = (32,), seed: Optional[int] = 0
) -> torch.nn.Module:
    """A small multilayer perceptron ``[N, num_inputs] -> [N]`` (SiLU activations),
    with seeded initialisation, for :func:`binary_ebm` and :func:`categorical_ebm`.

    :param int num_inputs: input values after flattening (``D`` for binary data, ``D K``
        for one-hot categorical data).
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
