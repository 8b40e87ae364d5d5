r"""Contrastive divergence (CD-k) for the binary RBMs of :mod:`pyro_gwg.models.rbm`,
with their block-Gibbs sampler for the negative phase: the RBMs of the sampling and
normalising-constant experiments are fitted to data with it.
"""

from __future__ import annotations

from typing import Optional

import torch

from pyro_gwg.models.rbm import RBMParams, block_gibbs, rbm_log_density

__all__ = ["train_rbm"]


def train_rbm(
    data: torch.Tensor,
    num_hidden: int,
    epochs: int = 50,
    batch_size: int = 100,
    lr: float = 1e-3,
    cd_steps: int = 10,
    seed: Optional[int] = 0,
) -> RBMParams:
    r"""Fit an RBM to binary data by contrastive divergence (CD-k), as in Grathwohl et
    al. (2021, Appendix E.1): Adam on :math:`-\mathrm{mean}(\log \tilde p(v_{data}) -
    \log \tilde p(v_{model}))`, the negatives from ``cd_steps`` block-Gibbs sweeps
    started at the batch; visible bias initialised at the logit of the data mean.

    :param torch.Tensor data: ``[N, V]`` binary data.
    :param int num_hidden: ``H``.
    :param int epochs: passes through the data.
    :param int batch_size: batch size.
    :param float lr: Adam learning rate.
    :param int cd_steps: block-Gibbs sweeps per negative sample.
    :param int seed: seed of the initialisation, batches and sweeps (the global RNG
        is restored afterwards; ``None``: use and advance the global RNG).
    :rtype: RBMParams
    """
    data = data.to(torch.get_default_dtype())
    with torch.random.fork_rng(enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        num_visible = data.shape[1]
        mean = data.mean(0).clamp(0.01, 0.99)
        weights = (torch.randn(num_hidden, num_visible) / num_visible**0.5).requires_grad_()
        visible_bias = (mean.log() - (1 - mean).log()).requires_grad_()
        hidden_bias = torch.zeros(num_hidden, requires_grad=True)
        params = RBMParams(weights, visible_bias, hidden_bias)
        optimizer = torch.optim.Adam(params, lr=lr)
        for _ in range(epochs):
            for batch in data[torch.randperm(data.shape[0])].split(batch_size):
                with torch.no_grad():
                    negative, _ = block_gibbs(params, 0, cd_steps, init=batch)
                loss = rbm_log_density(negative, params).mean()
                loss = loss - rbm_log_density(batch, params).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    return RBMParams(*(p.detach() for p in params))
