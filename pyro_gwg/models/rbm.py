r"""Restricted Boltzmann machines: the marginal model of the visible units, its exact
normaliser and the block-Gibbs ground truth (training by contrastive divergence is
:func:`pyro_gwg.contrib.train.rbm.train_rbm`).

A binary RBM with weights ``W [H, V]``, visible bias ``b [V]`` and hidden bias
``c [H]`` has :math:`\log p(v, h) = h^\top W v + b^\top v + c^\top h - \log Z`.
Summing out the hidden units (Grathwohl et al. 2021 [Grathwohl2021]_, Eq. 29),

.. math:: \log p(v) = b^\top v + \sum_j \mathrm{softplus}(W_j v + c_j) - \log Z.

:func:`rbm` is this marginal as a Pyro model over the visible units. Its conditionals
:math:`p(h_j = 1 \mid v) = \sigma(W_j v + c_j)` and
:math:`p(v_i = 1 \mid h) = \sigma((W^\top h)_i + b_i)` give the block-Gibbs sampler
(:func:`block_gibbs`; as a kernel, :class:`pyro_gwg.contrib.kernels.RBMBlockGibbs`) that
the paper uses as ground truth.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F

from pyro_gwg.driver import ChainDriver
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.blocks import StepInfo

__all__ = [
    "RBMParams",
    "block_gibbs",
    "block_gibbs_step",
    "categorical_rbm",
    "random_categorical_rbm",
    "random_rbm",
    "rbm",
    "rbm_log_density",
    "rbm_log_partition",
]

MAX_SUMMED_UNITS = 24


class RBMParams(NamedTuple):
    """Parameters of a binary RBM; ``rbm(*params)`` is its Pyro model.

    :ivar torch.Tensor weights: ``[H, V]``.
    :ivar torch.Tensor visible_bias: ``[V]``.
    :ivar torch.Tensor hidden_bias: ``[H]``.
    """

    weights: torch.Tensor
    visible_bias: torch.Tensor
    hidden_bias: torch.Tensor


def rbm(weights: torch.Tensor, visible_bias: torch.Tensor, hidden_bias: torch.Tensor):
    r"""The visible units of an RBM as a Pyro model, sampled at site ``"v"``.

    The log joint of the model is

    .. math:: f(v) = \sum_i \log \mathrm{Bernoulli}(v_i; \sigma(b_i))
              + \sum_j \mathrm{softplus}(W_j v + c_j)
              = \log \tilde p(v) - \sum_i \mathrm{softplus}(b_i),

    with :math:`\log \tilde p(v) = b^\top v + \sum_j \mathrm{softplus}(W_j v + c_j)`
    the unnormalised RBM marginal (:func:`rbm_log_density`): the model is the RBM,
    normalised by :math:`\log Z - \sum_i \mathrm{softplus}(b_i)`, ``log Z`` from
    :func:`rbm_log_partition`. The hidden units enter as one ``pyro.factor`` each,
    inside a ``"hidden"`` plate, so the model broadcasts over batch dimensions.

    :param torch.Tensor weights: ``[H, V]`` weights ``W``.
    :param torch.Tensor visible_bias: ``[V]`` visible bias ``b``.
    :param torch.Tensor hidden_bias: ``[H]`` hidden bias ``c``.
    :returns: the visible units as {0, 1} floats, shape ``[V]``.
    """
    num_hidden, num_visible = weights.shape
    with pyro.plate("visible", num_visible, dim=-1):
        v = pyro.sample("v", dist.Bernoulli(logits=visible_bias))
    with pyro.plate("hidden", num_hidden, dim=-1):
        pyro.factor("hidden_units", F.softplus(v @ weights.T + hidden_bias))
    return v


def rbm_log_density(v: torch.Tensor, params: RBMParams) -> torch.Tensor:
    r"""Unnormalised log marginal :math:`b^\top v + \sum_j \mathrm{softplus}(W_j v + c_j)`.

    :param torch.Tensor v: ``[..., V]`` visible states (0/1, any dtype).
    :param RBMParams params: the RBM.
    :returns: ``[...]``.
    """
    weights, visible_bias, hidden_bias = params
    v = v.to(weights.dtype)
    return v @ visible_bias + F.softplus(v @ weights.T + hidden_bias).sum(-1)


def rbm_log_partition(params: RBMParams, chunk_size: int = 1 << 14) -> torch.Tensor:
    r"""Exact :math:`\log Z = \log \sum_{v, h} e^{h^\top W v + b^\top v + c^\top h}`.

    Sums analytically over one layer and explicitly over all states of the other, the
    smaller one: :math:`Z = \sum_h e^{c^\top h} \prod_i (1 + e^{b_i + (W^\top h)_i})` when
    there are fewer hidden than visible units, else
    :math:`Z = \sum_v e^{\log \tilde p(v)}`.

    :param RBMParams params: the RBM.
    :param int chunk_size: states of the summed layer processed at once.
    :returns: scalar (float64).
    :raises ValueError: when the smaller layer has more than 24 units.
    """
    weights, visible_bias, hidden_bias = (p.double() for p in params)
    if weights.shape[0] > weights.shape[1]:  # fewer visible units: sum over v
        weights, visible_bias, hidden_bias = weights.T, hidden_bias, visible_bias
    num_summed = weights.shape[0]
    if num_summed > MAX_SUMMED_UNITS:
        raise ValueError(
            "log Z by enumeration sums over 2^{} states of the smaller layer; at most "
            "2^{} are supported. Estimate log Z with annealed importance sampling "
            "instead.".format(num_summed, MAX_SUMMED_UNITS)
        )
    bits = torch.arange(num_summed)
    terms = []
    for start in range(0, 1 << num_summed, chunk_size):
        index = torch.arange(start, min(start + chunk_size, 1 << num_summed))
        h = ((index.unsqueeze(-1) >> bits) & 1).double()
        terms.append(h @ hidden_bias + F.softplus(h @ weights + visible_bias).sum(-1))
    return torch.logsumexp(torch.cat(terms), 0)


def block_gibbs_step(v: torch.Tensor, params: RBMParams) -> torch.Tensor:
    """One block-Gibbs sweep: :math:`h \\sim p(h \\mid v)`, then :math:`v \\sim p(v \\mid h)`.

    :param torch.Tensor v: ``[..., V]`` float visible states.
    :param RBMParams params: the RBM.
    :returns: new ``[..., V]`` float visible states.
    """
    weights, visible_bias, hidden_bias = params
    h = torch.bernoulli(torch.sigmoid(v @ weights.T + hidden_bias))
    return torch.bernoulli(torch.sigmoid(h @ weights + visible_bias))


def block_gibbs(
    params: RBMParams,
    num_chains: int,
    num_steps: int,
    init: Optional[torch.Tensor] = None,
    thin: int = 0,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Run block-Gibbs chains on an RBM (the ground-truth sampler of the paper).

    :param RBMParams params: the RBM.
    :param int num_chains: chains run in parallel (ignored when ``init`` is given).
    :param int num_steps: sweeps.
    :param torch.Tensor init: ``[C, V]`` initial states (default: uniform random).
    :param int thin: when positive, also return every ``thin``-th state.
    :returns: ``(final [C, V], trace [num_steps // thin, C, V] or None)``, float.
    """
    weights = params[0]
    if init is None:
        init = torch.bernoulli(torch.full((num_chains, weights.shape[1]), 0.5))
    v = init.to(weights.dtype)
    if num_steps <= 0:
        return v, None
    driver = ChainDriver(lambda density: _block_gibbs_algorithm(params), density=None)
    driver.init(v)
    trace = []

    def keep_last(t: int, info, states: torch.Tensor, log_joint: torch.Tensor) -> None:
        if thin > 0 and states.shape[1] == thin:
            trace.append(states[:, -1])

    # blocks of ``thin`` sweeps (the driver stacks the states of a block)
    driver.run(num_steps, keep_last, thin if thin > 0 else min(num_steps, 32), v.dtype)
    return driver.state.codes, torch.stack(trace) if trace else None


class _VisibleState(NamedTuple):
    codes: torch.Tensor  # [C, V] float visible states
    log_joint: torch.Tensor  # [C] zeros: the sweep needs no density


def _block_gibbs_algorithm(params: RBMParams) -> Algorithm:
    """Block-Gibbs sweeps as an ``(init, step)`` pair for the chain driver."""

    def init(v: torch.Tensor) -> _VisibleState:
        return _VisibleState(v, v.new_zeros(v.shape[0]))

    def step(state: _VisibleState) -> Tuple[_VisibleState, StepInfo]:
        new = block_gibbs_step(state.codes, params)
        changed = (new != state.codes).sum(-1)
        none = torch.zeros_like(changed)  # no evaluation of a density
        info = StepInfo(changed > 0, torch.ones_like(state.log_joint), changed, none, none)
        return _VisibleState(new, state.log_joint), info

    return Algorithm(init, step)


def random_rbm(
    num_visible: int = 25,
    num_hidden: int = 10,
    weight_scale: float = 0.05**0.5,
    bias_scale: float = 1.0,
    seed: Optional[int] = 0,
) -> RBMParams:
    r"""Random RBM of Grathwohl et al. (2021 [Grathwohl2021]_, Appendix C):
    :math:`W \sim \mathcal N(0, 0.05)`, :math:`b, c \sim \mathcal N(0, 1)`.

    :param int num_visible: ``V``.
    :param int num_hidden: ``H``.
    :param float weight_scale: standard deviation of the weights.
    :param float bias_scale: standard deviation of the biases.
    :param int seed: seed (``None``: the global RNG).
    :rtype: RBMParams
    """
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    return RBMParams(
        torch.randn(num_hidden, num_visible, generator=generator) * weight_scale,
        torch.randn(num_visible, generator=generator) * bias_scale,
        torch.randn(num_hidden, generator=generator) * bias_scale,
    )


def categorical_rbm(
    weights: torch.Tensor, visible_bias: torch.Tensor, hidden_bias: torch.Tensor
) -> torch.Tensor:
    r"""An RBM with categorical visible units, as a Pyro model of its visible units
    (one-hot, site ``"v"``), the binary hidden units summed out.

    With weights ``W [H, V, K]``, visible bias ``b [V, K]`` and hidden bias ``c [H]``,
    :math:`\log p(v, h) = \sum_j h_j (\sum_{i,k} W_{jik} v_{ik} + c_j) + \sum_{i,k}
    b_{ik} v_{ik} - \log Z` for one-hot :math:`v_i`; summing out :math:`h` as for
    :func:`rbm`,

    .. math:: f(v) = \sum_i \log \mathrm{Categorical}(v_i; \mathrm{softmax}(b_i))
              + \sum_j \mathrm{softplus}\Big(\sum_{i,k} W_{jik} v_{ik} + c_j\Big),

    the categorical RBM of the DISCS benchmark (Goshvadi et al. 2023
    [Goshvadi2023]_), normalised up to :math:`\sum_i \mathrm{logsumexp}_k b_{ik}`.

    :param torch.Tensor weights: ``[H, V, K]``.
    :param torch.Tensor visible_bias: ``[V, K]``.
    :param torch.Tensor hidden_bias: ``[H]``.
    :returns: one-hot visible units, shape ``[V, K]``.
    """
    num_hidden, num_visible, _ = weights.shape
    with pyro.plate("visible", num_visible, dim=-1):
        v = pyro.sample("v", dist.OneHotCategorical(logits=visible_bias))
    with pyro.plate("hidden", num_hidden, dim=-1):
        pyro.factor(
            "hidden_units", F.softplus(torch.einsum("...ik,jik->...j", v, weights) + hidden_bias)
        )
    return v


def random_categorical_rbm(
    num_visible: int = 25,
    num_categories: int = 4,
    num_hidden: int = 10,
    weight_scale: float = 0.05**0.5,
    bias_scale: float = 1.0,
    seed: Optional[int] = 0,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Random categorical RBM for :func:`categorical_rbm`: weights
    :math:`\mathcal N(0, \text{weight\_scale}^2)`, biases
    :math:`\mathcal N(0, \text{bias\_scale}^2)`, as :func:`random_rbm`.

    :param int num_visible: ``V``.
    :param int num_categories: ``K``.
    :param int num_hidden: ``H``.
    :param float weight_scale: standard deviation of the weights.
    :param float bias_scale: standard deviation of the biases.
    :param int seed: seed (``None``: the global RNG).
    :returns: ``(weights [H, V, K], visible_bias [V, K], hidden_bias [H])``.
    """
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    return (
        torch.randn(num_hidden, num_visible, num_categories, generator=generator) * weight_scale,
        torch.randn(num_visible, num_categories, generator=generator) * bias_scale,
        torch.randn(num_hidden, generator=generator) * bias_scale,
    )
