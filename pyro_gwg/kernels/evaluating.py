"""Plumbing shared by the kernels that evaluate the log joint at many states per step.

:class:`~pyro_gwg.Gibbs`, :class:`~pyro_gwg.HammingBall` and
:class:`~pyro_gwg.LocallyBalanced` use no gradient: each step runs the model, batched,
at a set of states near the current one (``energy.log_joint``), ``chunk_size``
states per run.
"""

from __future__ import annotations

from typing import Optional, Union

import torch
from pyro.infer.autoguide.initialization import init_to_sample

from pyro_gwg.kernels.base import DiscreteKernel

__all__ = ["EvaluatingKernel"]


class EvaluatingKernel(DiscreteKernel):
    """Base class of the gradient-free kernels.

    :param callable model: a Pyro model whose latent sites are discrete; it must
        broadcast over a leading batch dimension (checked), as the states of one step
        are evaluated in one batched run.
    :param int chunk_size: most states per batched run of the model.
    :param jit_compile: compilation of the whole transition: ``"auto"`` (default),
        ``True``, ``"inductor"`` or ``False``; see :class:`~pyro_gwg.DiscreteKernel`.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param callable init_strategy: Pyro per-site initialisation strategy.

    Every step records ``energy_evals`` (states the model was run at, per chain) and
    ``grad_evals`` (zero) with the other per-draw statistics.
    """

    def __init__(
        self,
        model=None,
        *,
        chunk_size: int = 4096,
        jit_compile: Union[bool, str] = "auto",
        max_plate_nesting: Optional[int] = None,
        init_strategy=init_to_sample,
    ) -> None:
        if int(chunk_size) != chunk_size or chunk_size < 1:
            raise ValueError("chunk_size must be a positive integer, got {}".format(chunk_size))
        super().__init__(
            model,
            jit_compile=jit_compile,
            max_plate_nesting=max_plate_nesting,
            init_strategy=init_strategy,
        )
        self.chunk_size = int(chunk_size)
        self._checked_energy = None

    def _log_joint(self, codes: torch.Tensor) -> torch.Tensor:
        """``codes [N, D] -> [N]``: the model's log joint, in one batched run."""
        return self.energy.log_joint(codes)

    def _check_batching(self, codes: torch.Tensor) -> None:
        """Check once per model set-up that the model broadcasts over a batch dimension
        (even for a single chain, whose step evaluates many states at once)."""
        if self._checked_energy is not self.energy:
            self.energy.check_vectorized(codes[:1].expand(2, -1).clone())
            self._checked_energy = self.energy

    def __getstate__(self):
        state = super().__getstate__()
        state["_checked_energy"] = None
        return state
