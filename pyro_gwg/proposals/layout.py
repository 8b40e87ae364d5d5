"""The flat coordinate layout shared by every proposal.

Kernels hold the state of all latent discrete sites of a model as one integer tensor
``codes`` of shape ``[C, D]``: ``C`` chains, ``D`` coordinates. A coordinate is one
scalar unknown: a bit, an ordinal value, or the category index of a (one-hot)
categorical. Two coordinate types exist:

* **scalar** coordinates (binary and ordinal sites): the code is the integer value
  itself, bounded by ``lower <= code <= upper`` (bounds may be infinite). The model
  sees the value as a float, and the gradient is one number per coordinate.
* **categorical** coordinates (``Categorical`` and ``OneHotCategorical`` sites): the
  code is a category index in ``0 .. K-1``. The gradient is one number per category:
  the derivative of the log joint with respect to the one-hot embedding.

Gradients are packed into a ``[C, D, M]`` tensor, ``M`` the widest candidate axis: a
scalar coordinate stores its derivative in slot 0, a categorical one its ``K``
derivatives in slots ``0 .. K-1`` (zero padding beyond).

Single-coordinate moves ("candidates") index the last axis of a ``[C, D, M]`` tensor:
a scalar coordinate has candidate 0 (one step down) and 1 (one step up); a categorical
coordinate has candidate ``k`` (switch to category ``k``). A model whose coordinates
are all scalar packs its gradient as ``[C, D, 1]``; one whose coordinates are all bits
has a single candidate per coordinate, 0 (flip), so ``M = 1``.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["CoordinateLayout"]


class CoordinateLayout:
    """Static description of the ``D`` coordinates of a model; pure tensor methods.

    :param torch.Tensor is_scalar: bool ``[D]``, True for binary/ordinal coordinates.
    :param torch.Tensor lower: float ``[D]`` lower bound of scalar coordinates
        (ignored for categorical ones).
    :param torch.Tensor upper: float ``[D]`` upper bound of scalar coordinates
        (may be ``inf``).
    :param torch.Tensor num_categories: long ``[D]``, ``K`` of categorical coordinates
        (ignored for scalar ones).
    """

    def __init__(
        self,
        is_scalar: torch.Tensor,
        lower: torch.Tensor,
        upper: torch.Tensor,
        num_categories: torch.Tensor,
    ) -> None:
        self.is_scalar = is_scalar.bool()
        self.lower = lower.float()
        self.upper = upper.float()
        self.num_categories = num_categories.long()
        self.num_coords = int(is_scalar.numel())
        self.all_scalar = bool(self.is_scalar.all())
        self.all_categorical = not bool(self.is_scalar.any())
        self.all_binary = self.all_scalar and bool(((self.lower == 0) & (self.upper == 1)).all())
        widest = int(self.num_categories[~self.is_scalar].max()) if not self.all_scalar else 0
        self.width = 1 if self.all_binary else max(2 if not self.all_categorical else 0, widest)
        self.grad_width = 1 if self.all_scalar else self.width
        slot = torch.arange(self.width)
        self._slot = slot
        self._steps = (2 * slot - 1).float()

    def to(self, device: torch.device) -> CoordinateLayout:
        """Copy of the layout on ``device``."""
        return CoordinateLayout(
            self.is_scalar.to(device),
            self.lower.to(device),
            self.upper.to(device),
            self.num_categories.to(device),
        )

    def num_values(self) -> torch.Tensor:
        """Number of values each coordinate can take (``inf`` for unbounded ordinals).

        :rtype: torch.Tensor
        """
        return torch.where(self.is_scalar, self.upper - self.lower + 1, self.num_categories.float())

    def gains(self, codes: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        r"""First-order estimate of :math:`f(x') - f(x)` for every single-coordinate move.

        Scalar coordinate ``i``, candidate ``v`` in {0: down, 1: up}:
        :math:`\tilde d_{iv} = g_i (x'_i - x_i) = \pm g_i` (Grathwohl et al. 2021
        [Grathwohl2021]_, Eq. 3 for bits,
        whose one valid move is a flip). Categorical coordinate ``i``, category ``k``:
        :math:`\tilde d_{ik} = g_{ik} - g_{i x_i}` (Grathwohl et al. 2021 [Grathwohl2021]_, Eq.
        4). Moves that leave
        the support, or keep a categorical coordinate where it is, get ``-inf``.

        :param torch.Tensor codes: long ``[C, D]`` current state.
        :param torch.Tensor grad: float packed gradient, ``[C, D, 1]`` when every
            coordinate is scalar, else ``[C, D, M]``.
        :returns: float ``[C, D, M]`` gains, ``-inf`` where the move is invalid.
        """
        x = codes.unsqueeze(-1)
        if self.all_binary:
            return grad * (1 - 2 * x)
        if self.all_scalar:
            gain = grad[..., :1] * self._steps.to(grad.dtype)
            valid = torch.cat([x > self.lower.unsqueeze(-1), x < self.upper.unsqueeze(-1)], -1)
            return gain.masked_fill(~valid, -float("inf"))
        slot = self._slot
        parts = []
        if not self.all_categorical:
            step = self._steps.to(grad.dtype)
            target = x + step
            valid = (
                (slot < 2)
                & (target >= self.lower.unsqueeze(-1))
                & (target <= self.upper.unsqueeze(-1))
            )
            parts.append((grad[..., :1] * step, valid))
        index = x if self.all_categorical else torch.where(self.is_scalar.unsqueeze(-1), 0, x)
        gain = grad - grad.gather(-1, index)
        valid = (slot < self.num_categories.unsqueeze(-1)) & (slot != x)
        parts.append((gain, valid))
        if len(parts) == 1:
            gain, valid = parts[0]
        else:
            (g_s, v_s), (g_c, v_c) = parts
            mask = self.is_scalar.unsqueeze(-1)
            gain, valid = torch.where(mask, g_s, g_c), torch.where(mask, v_s, v_c)
        return gain.masked_fill(~valid, -float("inf"))

    def _scalar_at(self, coords: Optional[torch.Tensor]) -> torch.Tensor:
        return self.is_scalar if coords is None else self.is_scalar[coords]

    def move(
        self,
        values: torch.Tensor,
        candidate: torch.Tensor,
        coords: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Value a coordinate takes under its candidate move.

        :param torch.Tensor values: long current values, ``[C, D]`` (every coordinate)
            or ``[C, N]`` (the coordinates ``coords``).
        :param torch.Tensor candidate: long candidate index, shaped like ``values``.
        :param torch.Tensor coords: long ``[C, N]`` coordinate indices, or ``None``
            when ``values`` covers every coordinate.
        :rtype: torch.Tensor
        """
        if self.all_categorical:
            return candidate
        if self.all_binary:
            return 1 - values
        stepped = values + 2 * candidate - 1
        if self.all_scalar:
            return stepped
        return torch.where(self._scalar_at(coords), stepped, candidate)

    def reverse(
        self,
        values: torch.Tensor,
        candidate: torch.Tensor,
        coords: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Candidate that undoes ``candidate`` from the moved state.

        :param torch.Tensor values: long values *before* the move (as in :meth:`move`).
        :param torch.Tensor candidate: long forward candidates.
        :param torch.Tensor coords: long coordinate indices, or ``None``.
        :rtype: torch.Tensor
        """
        if self.all_categorical:
            return values
        if self.all_binary:
            return candidate
        flipped = 1 - candidate
        if self.all_scalar:
            return flipped
        return torch.where(self._scalar_at(coords), flipped, values)
