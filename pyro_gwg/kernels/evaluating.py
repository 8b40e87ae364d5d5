"""Plumbing shared by the kernels that evaluate the log joint at many states per step.

:class:`~pyro_gwg.Gibbs`, :class:`~pyro_gwg.HammingBall` and
:class:`~pyro_gwg.LocallyBalanced` use no gradient: each step runs the model, batched,
at a set of states near the current one (``energy.log_joint``), ``chunk_size``
states per run.
"""

from __future__ import annotations

from pyro_gwg._validation import check_integer
from pyro_gwg.kernels.base import DiscreteKernel

__all__ = ["EvaluatingKernel"]


class EvaluatingKernel(DiscreteKernel):
    """Base class of the gradient-free kernels (``needs_gradient = False``,
    ``evaluates_states = True``).

    The states of one step are evaluated in one batched run where the model
    broadcasts over a leading batch dimension, else with :func:`torch.func.vmap` or one
    at a time (with a :class:`~pyro_gwg.BatchingWarning`).

    :param int chunk_size: most states per batched run of the model (default 4096).
    :param options: ``jit_compile``, ``max_plate_nesting``, ``init_strategy``: see
        :class:`~pyro_gwg.DiscreteKernel`.

    Every step records ``energy_evals`` (states the model was run at, per chain) and
    ``grad_evals`` (zero) with the other per-draw statistics.
    """

    needs_gradient = False
    evaluates_states = True

    def __init__(self, model=None, *, chunk_size: int = 4096, **options) -> None:
        self.chunk_size = check_integer("chunk_size", chunk_size, 1)
        super().__init__(model, **options)
