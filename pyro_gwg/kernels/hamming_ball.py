"""The Hamming ball kernel."""

from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

from pyro_gwg._validation import check_integer
from pyro_gwg.kernels.evaluating import EvaluatingKernel
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.hamming_ball import build_hamming_ball

__all__ = ["HammingBall"]


class HammingBall(EvaluatingKernel):
    r"""The Hamming ball sampler of Titsias & Yau (2017) [TitsiasYau2017]_.

    Each step picks a block of ``block_size`` coordinates (``block_size`` distinct
    coordinates uniformly at random, or one of ``blocks`` uniformly at random), draws
    an auxiliary state ``u`` uniformly from the states that differ from the current
    one in at most ``radius`` coordinates of the block, and draws the new state from
    the target restricted to the same ball around ``u``, whose log joint is evaluated
    in one batched run of the model (see :mod:`pyro_gwg.proposals.hamming_ball`).
    HB-10-1 of Grathwohl et al. (2021) [Grathwohl2021]_ is ``HammingBall(model, block_size=10,
    radius=1)``: 11 log-joint evaluations per step on bits. Categorical and ordinal
    coordinates may change to any value of their window (a cyclic shift); unbounded
    ordinal sites range over a randomly shifted cell of ``window`` values, as in
    :class:`~pyro_gwg.Gibbs`. The recorded ``accepted`` says whether the state
    changed.

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed``,
    ``energy_evals``, ``grad_evals`` and ``log_joint`` (see
    :class:`~pyro_gwg.DiscreteKernel`).

    :param int block_size: coordinates per block (capped at the number of
        coordinates); ignored when ``blocks`` is given.
    :param int radius: Hamming radius of the ball.
    :param blocks: optional fixed blocks: a ``[num_blocks, B]`` integer tensor (or
        nested sequence) of flat coordinate indices, e.g. all factors of one time
        step of a factorial HMM (:func:`pyro_gwg.models.fhmm_time_blocks`).
    :param int window: cell width for unbounded ordinal sites (default 8).
    :param options: ``chunk_size`` (see
        :class:`~pyro_gwg.kernels.evaluating.EvaluatingKernel`) and the options of every
        kernel (see :class:`~pyro_gwg.DiscreteKernel`).

    Example::

        >>> HammingBall(block_size=10, radius=1).block_size  # HB-10-1
        10
    """

    def __init__(
        self,
        model=None,
        *,
        block_size: int = 10,
        radius: int = 1,
        blocks: Optional[Union[torch.Tensor, Sequence[Sequence[int]]]] = None,
        window: int = 8,
        **options,
    ) -> None:
        for name, value in (("block_size", block_size), ("radius", radius), ("window", window)):
            check_integer(name, value, 1)
        if blocks is not None:
            blocks = torch.as_tensor(blocks, dtype=torch.long)
            if blocks.dim() != 2 or blocks.numel() == 0:
                raise ValueError("blocks must be a non-empty [num_blocks, block_size] array")
            block_size = blocks.shape[1]
        super().__init__(model, **options)
        self.block_size = int(block_size)
        self.radius = int(radius)
        self.blocks = blocks
        self.window = int(window)

    def build(self, density) -> Algorithm:
        """The Hamming ball sampler on ``density``:
        :func:`~pyro_gwg.proposals.hamming_ball.build_hamming_ball` with this kernel's
        settings.

        :rtype: Algorithm
        """
        return build_hamming_ball(
            density, self.block_size, self.radius, self.blocks, self.window, self.chunk_size
        )
