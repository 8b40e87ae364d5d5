r"""A deterministic sweep of algorithms over disjoint blocks of coordinates.

With the coordinates split into blocks :math:`B_1, \dots, B_K`, one sweep step applies,
in turn, algorithm :math:`k` to the coordinates of :math:`B_k` with every other
coordinate held at its current value:

.. math:: x_{B_k}' \sim T_k(x_{B_k}, \cdot \mid x_{-B_k}), \qquad k = 1, \dots, K.

Each :math:`T_k` leaves the conditional :math:`p(x_{B_k} \mid x_{-B_k})` invariant
(it is an exact kernel on the density restricted to its block, :class:`BlockDensity`),
so each update leaves the joint invariant, and so does the sweep (a composition of
invariant kernels). A block's algorithm starts afresh at every sweep (its ``init`` at
the current state: one evaluation of the density, with its gradient where the
algorithm needs it), because the other blocks have moved since its last step.
"""

from __future__ import annotations

from typing import Callable, List, NamedTuple, Sequence, Tuple

import torch

from pyro_gwg.density import BaseDensity
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.blocks import StepInfo
from pyro_gwg.proposals.layout import CoordinateLayout

__all__ = ["BlockDensity", "SweepState", "build_sweep"]


class SweepState(NamedTuple):
    """State of a sweep: ``codes [C, D]`` and ``log_joint [C]``."""

    codes: torch.Tensor
    log_joint: torch.Tensor


class BlockDensity(BaseDensity):
    """The density ``density`` as a function of the coordinates ``index`` alone, the
    others held at the codes of the current sweep (row ``n`` of a batch of ``N``
    states belongs to chain ``n % C``, the package's batching rule).

    :param density: a :class:`~pyro_gwg.density.Density` of ``D`` coordinates.
    :param torch.Tensor index: long ``[d]``, the block's coordinates.
    """

    def __init__(self, density, index: torch.Tensor) -> None:
        self.density = density
        self.index = index
        whole = density.layout
        self.layout = CoordinateLayout(
            whole.is_scalar[index],
            whole.lower[index],
            whole.upper[index],
            whole.num_categories[index],
            whole.radius,
        )
        #: the codes ``[C, D]`` of the chains now (set by the sweep before each block)
        self.current: torch.Tensor = torch.empty(0)

    def _full(self, codes: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(codes.shape[0], device=codes.device) % self.current.shape[0]
        full = self.current[rows].clone()
        full[:, self.index] = codes
        return full

    def log_joint(self, codes: torch.Tensor) -> torch.Tensor:
        """``codes [N, d] -> [N]``: the log density with the block at ``codes``."""
        return self.density.log_joint(self._full(codes))

    def value_and_grad(self, codes: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The log density and its gradient with respect to the block's coordinates."""
        value, grad = self.density.value_and_grad(self._full(codes))
        grad = grad[:, self.index]
        return value, grad[..., : self.layout.grad_width]

    def raise_invalid(self, codes: torch.Tensor) -> None:
        """The whole density's error at the state with the block at ``codes [d]``."""
        self.density.raise_invalid(self._full(codes.unsqueeze(0))[0])


def build_sweep(
    density, blocks: Sequence[Tuple[torch.Tensor, Callable[[BlockDensity], Algorithm], bool]]
) -> Algorithm:
    """A sweep over ``blocks`` as an ``(init, step)`` pair (see the module docstring).

    :param density: a :class:`~pyro_gwg.density.Density`.
    :param blocks: ``(index, build, needs_gradient)``: the long ``[d]`` coordinates of
        a block (disjoint, together covering the coordinates to sample), the function
        that builds the block's algorithm on its :class:`BlockDensity`, and whether its
        ``init`` evaluates the gradient (for the ``grad_evals`` statistic).
    :rtype: Algorithm
    """
    parts: List[Tuple[BlockDensity, Algorithm]] = []
    init_grads = 0
    for index, build, needs_gradient in blocks:
        block = BlockDensity(density, index)
        parts.append((block, build(block)))
        init_grads += int(needs_gradient)

    def init(codes: torch.Tensor) -> SweepState:
        return SweepState(codes, density.log_joint(codes))

    def step(state: SweepState) -> Tuple[SweepState, StepInfo]:
        codes, log_joint, infos = state.codes, state.log_joint, []
        for block, algorithm in parts:
            block.current = codes
            new, info = algorithm.step(algorithm.init(codes[:, block.index]))
            codes = codes.clone()
            codes[:, block.index] = new.codes
            log_joint = new.log_joint
            infos.append(info)
        changed = (codes != state.codes).any(-1)
        # (the evaluations of each block's init counted with its step's)
        return SweepState(codes, log_joint), StepInfo(
            changed,
            torch.stack([i.accept_prob for i in infos]).mean(0),
            sum(i.num_changed for i in infos),
            sum(i.energy_evals for i in infos) + len(parts),
            sum(i.grad_evals for i in infos) + init_grads,
        )

    return Algorithm(init, step)
