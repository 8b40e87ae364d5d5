"""Plumbing shared by the kernels that evaluate the log joint at many states per step.

:class:`~pyro_gwg.Gibbs`, :class:`~pyro_gwg.HammingBall` and
:class:`~pyro_gwg.LocallyBalanced` use no gradient: each step runs the model, batched,
at a set of states near the current one (``energy.log_joint``), ``chunk_size``
states per run.
"""

from __future__ import annotations

from typing import Optional, Union

from pyro.infer.autoguide.initialization import init_to_sample

from pyro_gwg._validation import check_integer
from pyro_gwg.kernels.base import DiscreteKernel

__all__ = ["EvaluatingKernel"]


class EvaluatingKernel(DiscreteKernel):
    """Base class of the gradient-free kernels (``needs_gradient = False``,
    ``evaluates_states = True``).

    :param callable model: a Pyro model whose latent sites are discrete; the states of
        one step are evaluated in one batched run where the model broadcasts over a
        leading batch dimension, else with :func:`torch.func.vmap` or one at a time
        (with a :class:`~pyro_gwg.BatchingWarning`).
    :param int chunk_size: most states per batched run of the model.
    :param jit_compile: compilation of the whole transition: ``"auto"`` (default),
        ``True``, ``"inductor"``, ``"make_fx"`` or ``False``; see
        :class:`~pyro_gwg.DiscreteKernel`.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param callable init_strategy: Pyro per-site initialisation strategy.

    Every step records ``energy_evals`` (states the model was run at, per chain) and
    ``grad_evals`` (zero) with the other per-draw statistics.
    """

    needs_gradient = False
    evaluates_states = True

    def __init__(
        self,
        model=None,
        *,
        chunk_size: int = 4096,
        jit_compile: Union[bool, str] = "auto",
        max_plate_nesting: Optional[int] = None,
        init_strategy=init_to_sample,
    ) -> None:
        chunk_size = check_integer("chunk_size", chunk_size, 1)
        super().__init__(
            model,
            jit_compile=jit_compile,
            max_plate_nesting=max_plate_nesting,
            init_strategy=init_strategy,
        )
        self.chunk_size = int(chunk_size)
