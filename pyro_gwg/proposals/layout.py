r"""The flat coordinate layout shared by every proposal.

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

A layout with a jump ``radius`` :math:`r > 1` (:meth:`CoordinateLayout.with_radius`)
gives each scalar coordinate the ``2 r`` candidates ``j = 0 .. 2r - 1``, the steps
:math:`\delta_j = j - r` for :math:`j < r` and :math:`j - r + 1` for :math:`j \ge r`
(:math:`-r, \dots, -1, 1, \dots, r`); :math:`r = 1` is the layout above. The step of
candidate ``j`` is undone by candidate :math:`2r - 1 - j`. Bits keep their single
candidate whatever the radius (a bit has one other value).

A :class:`CandidateGrid` lists the values a factorised proposal (NCG, AVG, PAVG, DLMC,
PathAuxiliary) may give each coordinate, and the relaxed embedding :math:`\phi` of
the values (numbers for scalar coordinates, one-hot vectors for categorical ones).
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["CandidateGrid", "CoordinateLayout"]


class CoordinateLayout:
    """Static description of the ``D`` coordinates of a model; pure tensor methods.

    :param torch.Tensor is_scalar: bool ``[D]``, True for binary/ordinal coordinates.
    :param torch.Tensor lower: float ``[D]`` lower bound of scalar coordinates
        (ignored for categorical ones).
    :param torch.Tensor upper: float ``[D]`` upper bound of scalar coordinates
        (may be ``inf``).
    :param torch.Tensor num_categories: long ``[D]``, ``K`` of categorical coordinates
        (ignored for scalar ones).
    :param int radius: largest step of a scalar coordinate's moves (default 1).
    """

    def __init__(
        self,
        is_scalar: torch.Tensor,
        lower: torch.Tensor,
        upper: torch.Tensor,
        num_categories: torch.Tensor,
        radius: int = 1,
    ) -> None:
        self.radius = int(radius)
        self.is_scalar = is_scalar.bool()
        self.lower = lower.float()
        self.upper = upper.float()
        self.num_categories = num_categories.long()
        self.num_coords = int(is_scalar.numel())
        self.all_scalar = bool(self.is_scalar.all())
        self.all_categorical = not bool(self.is_scalar.any())
        self.all_binary = self.all_scalar and bool(((self.lower == 0) & (self.upper == 1)).all())
        widest = int(self.num_categories[~self.is_scalar].max()) if not self.all_scalar else 0
        # the gradient is packed as for radius 1, whatever the radius
        self.grad_width = 1 if self.all_scalar else max(0 if self.all_categorical else 2, widest)
        scalar_slots = 0 if self.all_categorical else 2 * self.radius
        self.width = 1 if self.all_binary else max(scalar_slots, widest)
        slot = torch.arange(self.width, device=self.is_scalar.device)
        self._slot = slot
        r = self.radius
        self._steps = torch.where(slot < r, slot - r, slot - r + 1).float()
        # the smallest and largest code of each coordinate, float [D] each
        self._code_bounds = (
            torch.where(self.is_scalar, self.lower, 0.0),
            torch.where(self.is_scalar, self.upper, (self.num_categories - 1).float()),
        )

    def to(self, device: torch.device) -> CoordinateLayout:
        """Copy of the layout on ``device``."""
        return CoordinateLayout(
            self.is_scalar.to(device),
            self.lower.to(device),
            self.upper.to(device),
            self.num_categories.to(device),
            self.radius,
        )

    def with_radius(self, radius: int) -> CoordinateLayout:
        """The same coordinates, with scalar moves of up to ``radius`` steps either way.

        :param int radius: a positive integer.
        :rtype: CoordinateLayout
        """
        if radius == self.radius:
            return self
        return CoordinateLayout(self.is_scalar, self.lower, self.upper, self.num_categories, radius)

    def num_values(self) -> torch.Tensor:
        """Number of values each coordinate can take (``inf`` for unbounded ordinals).

        :rtype: torch.Tensor
        """
        return torch.where(self.is_scalar, self.upper - self.lower + 1, self.num_categories.float())

    def check_codes(self, codes, what: str = "codes") -> None:
        """Refuse states that are not long ``[num_chains, D]`` codes inside the layout:
        every coordinate within its values (``lower .. upper`` for a scalar one,
        ``0 .. K-1`` for a categorical one). One comparison of the whole batch, for the
        entry points (an algorithm's ``init``, :meth:`ChainDriver.init
        <pyro_gwg.driver.ChainDriver.init>`), never for the states a step proposes.

        :param torch.Tensor codes: the states.
        :param str what: how to call them in the messages.
        :raises TypeError: for anything but an integer tensor.
        :raises ValueError: for another shape, or naming the coordinates outside their
            values, the values found and the values allowed.
        """
        expected = "[num_chains, D] = [C, {0}] ([1, {0}] for one state)".format
        if not isinstance(codes, torch.Tensor):
            raise TypeError(
                "{} must be a tensor of integer codes shaped {}, got {}".format(
                    what, expected(self.num_coords), type(codes).__name__
                )
            )
        if codes.dim() != 2 or codes.shape[1] != self.num_coords:
            raise ValueError(
                "{} must be shaped {}: one row per chain, one column per coordinate of "
                "the layout; got shape {}{}".format(
                    what,
                    expected(self.num_coords),
                    tuple(codes.shape),
                    " (one state: codes.reshape(1, -1))" if codes.dim() == 1 else "",
                )
            )
        if codes.dtype == torch.bool or codes.is_floating_point() or codes.is_complex():
            raise TypeError(
                "{} must be an integer tensor (torch.long): the value of each scalar "
                "coordinate, the category of each categorical one; got dtype {} (use "
                "codes.long() after rounding)".format(what, codes.dtype)
            )
        lower, upper = self._code_bounds
        if lower.device != codes.device:
            lower, upper = lower.to(codes.device), upper.to(codes.device)
        outside = (codes < lower) | (codes > upper)
        if not bool(outside.any()):
            return
        coords = outside.any(0).nonzero().reshape(-1).tolist()
        shown = [
            "coordinate {} ({}, got {})".format(
                i,
                self._values_text(i),
                sorted(set(codes[outside[:, i], i].tolist()))[:5],
            )
            for i in coords[:5]
        ]
        raise ValueError(
            "{} lie outside the layout at {} coordinate(s): {}{}. A chain started "
            "outside the coordinates' values would be sampled there, off the density's "
            "support: give every coordinate one of its values.".format(
                what, len(coords), "; ".join(shown), ", ..." if len(coords) > 5 else ""
            )
        )

    def _values_text(self, i: int) -> str:
        """The values of coordinate ``i``, in words."""
        if not bool(self.is_scalar[i]):
            return "a category in 0 .. {}".format(int(self.num_categories[i]) - 1)
        low, high = float(self.lower[i]), float(self.upper[i])
        if low == 0 and high == 1:
            return "a bit, 0 or 1"
        if high == float("inf"):
            return "an integer >= {:g}".format(low) if low > -float("inf") else "an integer"
        return "an integer in {:g} .. {:g}".format(low, high)

    def perturb(self, codes: torch.Tensor) -> torch.Tensor:
        """``codes [N, D]`` with every coordinate that can move moved by one valid step
        (deterministic: the first valid candidate).

        :rtype: torch.Tensor
        """
        zero_grad = torch.zeros(codes.shape + (self.grad_width,), device=codes.device)
        gains = self.gains(codes, zero_grad)
        candidate = gains.argmax(-1)
        movable = torch.isfinite(gains).any(-1)
        return torch.where(movable, self.move(codes, candidate), codes)

    def probe_states(self, codes: torch.Tensor) -> torch.Tensor:
        """Two or three distinct states to compare a batched evaluation of a density with
        its evaluation one state at a time: the first state of ``codes [N, D]``, that
        state with every coordinate moved by one step (:meth:`perturb`), and the first
        other state of ``codes`` where there is one.

        :rtype: torch.Tensor
        """
        rows = [codes[:1], self.perturb(codes[:1])]
        other = codes[(codes != codes[:1]).any(-1)]
        if other.shape[0]:
            rows.append(other[:1])
        return torch.cat(rows)

    def gains(self, codes: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        r"""First-order estimate of :math:`f(x') - f(x)` for every single-coordinate move.

        Scalar coordinate ``i``, candidate ``v`` in {0: down, 1: up}:
        :math:`\tilde d_{iv} = g_i (x'_i - x_i) = \pm g_i` (Grathwohl et al. 2021
        [Grathwohl2021]_, Eq. 3 for bits,
        whose one valid move is a flip); with a radius :math:`r > 1`,
        :math:`\tilde d_{iv} = g_i \delta_v` for the step :math:`\delta_v` of candidate
        ``v``. Categorical coordinate ``i``, category ``k``:
        :math:`\tilde d_{ik} = g_{ik} - g_{i x_i}` (Grathwohl et al. 2021 [Grathwohl2021]_, Eq.
        4). Moves that leave
        the support, or keep a categorical coordinate where it is, get ``-inf``.

        :param torch.Tensor codes: long ``[C, D]`` current state.
        :param torch.Tensor grad: float packed gradient, ``[C, D, 1]`` when every
            coordinate is scalar, else ``[C, D, grad_width]``.
        :returns: float ``[C, D, M]`` gains, ``-inf`` where the move is invalid.
        """
        x = codes.unsqueeze(-1)
        if self.all_binary:
            return grad * (1 - 2 * x)
        if self.all_scalar:
            step = self._steps.to(grad.dtype)
            target = x + step
            valid = (target >= self.lower.unsqueeze(-1)) & (target <= self.upper.unsqueeze(-1))
            return (grad[..., :1] * step).masked_fill(~valid, -float("inf"))
        slot = self._slot
        if grad.shape[-1] < self.width:  # room for the 2 r steps of a radius r > 1
            grad = torch.nn.functional.pad(grad, (0, self.width - grad.shape[-1]))
        parts = []
        if not self.all_categorical:
            step = self._steps.to(grad.dtype)
            target = x + step
            valid = (
                (slot < 2 * self.radius)
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
        if self.radius == 1:
            stepped = values + 2 * candidate - 1
        else:
            stepped = values + self._steps.long()[candidate]
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
        flipped = 2 * self.radius - 1 - candidate
        if self.all_scalar:
            return flipped
        return torch.where(self._scalar_at(coords), flipped, values)


class CandidateGrid:
    """The candidate values of every coordinate and the relaxed embedding
    :math:`\\phi`; static tensors and pure tensor methods, like
    :class:`~pyro_gwg.proposals.layout.CoordinateLayout`.

    Proposal tables are ``[C, D, V]``: slot ``j`` of coordinate ``i`` is the value
    ``base_i + j`` of a scalar coordinate (``base_i`` is its lower bound, or
    :math:`x_i - w` for a windowed one) or the category ``j`` of a categorical one.

    :param CoordinateLayout layout: the coordinate layout.
    :param int window: half-width ``w`` of the candidate window of coordinates with
        an infinite bound (``2 w + 1`` values at most).
    """

    def __init__(self, layout: CoordinateLayout, window: int = 10) -> None:
        if int(window) != window or window < 1:
            raise ValueError("window must be a positive integer, got {}".format(window))
        self.layout = layout
        self.window = int(window)
        scalar = layout.is_scalar
        device = scalar.device
        self.is_scalar = scalar
        self.windowed = scalar & ~(torch.isfinite(layout.lower) & torch.isfinite(layout.upper))
        self.lower = torch.where(scalar, layout.lower, 0.0)
        self.upper = torch.where(scalar, layout.upper, (layout.num_categories - 1).float())
        finite = torch.where(self.windowed, 2.0 * self.window + 1, self.upper - self.lower + 1)
        self.span = finite.long()
        self.num_slots = int(self.span.max())
        self.slot = torch.arange(self.num_slots, device=device)
        self._static_lower = torch.where(self.windowed, 0.0, self.lower).long()
        sizes = torch.where(scalar, 1, layout.num_categories)
        self.offset = torch.cumsum(sizes, 0) - sizes
        self.relaxed_dim = int(sizes.sum())
        # relaxed dimension r belongs to coordinate coord[r]; category slot[r] (0 if scalar)
        self.coord = torch.repeat_interleave(torch.arange(layout.num_coords, device=device), sizes)
        self.category = torch.arange(self.relaxed_dim, device=device) - self.offset[self.coord]
        self.relaxed_scalar = scalar[self.coord]
        # [D, V] index into the relaxed vector of the linear coefficient of each slot
        cats = torch.minimum(self.slot, (sizes - 1).unsqueeze(-1))
        self._coef_index = self.offset.unsqueeze(-1) + torch.where(scalar.unsqueeze(-1), 0, cats)
        self._grad_index = self.coord * layout.grad_width + self.category
        self._all_static = not bool(self.windowed.any())

    # ------------------------------------------------------------------ embedding
    def embed(self, codes: torch.Tensor) -> torch.Tensor:
        r"""Relaxed values :math:`\phi(x)`.

        :param torch.Tensor codes: long ``[C, D]``.
        :returns: ``[C, R]`` in the default dtype.
        """
        per_dim = codes[:, self.coord]
        dtype = torch.get_default_dtype()
        return torch.where(
            self.relaxed_scalar, per_dim.to(dtype), (per_dim == self.category).to(dtype)
        )

    def flat_grad(self, grad: torch.Tensor) -> torch.Tensor:
        """The packed gradient ``[C, D, W]`` of the model bridge as ``[C, R]``.

        :param torch.Tensor grad: packed gradient.
        :rtype: torch.Tensor
        """
        return grad.flatten(1)[:, self._grad_index]

    def block_mask(self) -> torch.Tensor:
        """bool ``[R, R]``: False between two different categories of one coordinate,
        products the one-hot embedding makes identically zero."""
        same = self.coord.unsqueeze(-1) == self.coord
        return ~same | torch.eye(self.relaxed_dim, dtype=torch.bool, device=same.device)

    # ------------------------------------------------------------------ candidates
    def base(self, center: torch.Tensor) -> torch.Tensor:
        """long ``[C, D]``: the value of slot 0 of each coordinate's candidates."""
        if self._all_static:
            return self._static_lower.expand_as(center)
        return torch.where(self.windowed, center - self.window, self._static_lower)

    def logits(self, linear: torch.Tensor, curvature: torch.Tensor, center: torch.Tensor):
        r"""Log-probabilities of the factorised proposal
        :math:`q_i(v) \propto \exp(\langle a_i, u_i(v)\rangle - \kappa \lVert u_i(v)\rVert^2/2)`,
        :math:`u_i(v) = \phi_i(v) - \phi_i(x_i)`.

        :param torch.Tensor linear: ``[C, R]`` linear coefficients ``a``.
        :param torch.Tensor curvature: ``[C]`` curvature :math:`\kappa`.
        :param torch.Tensor center: long ``[C, D]`` the state ``x`` the candidates are
            built around (it fixes the windows).
        :returns: ``([C, D, V]`` log-probabilities, ``-inf`` at invalid slots; ``base [C, D])``.
        """
        base = self.base(center)
        values = base.unsqueeze(-1) + self.slot
        valid = (
            (values >= self.lower.unsqueeze(-1))
            & (values <= self.upper.unsqueeze(-1))
            & (self.slot < self.span.unsqueeze(-1))
        )
        x = center.unsqueeze(-1)
        scalar = self.is_scalar.unsqueeze(-1)
        delta = (values - x).to(linear.dtype)
        coef = linear[:, self._coef_index]
        lin = torch.where(scalar, coef * delta, coef)
        quad = torch.where(scalar, delta * delta, 2.0 * (values != x).to(linear.dtype))
        logits = lin - (0.5 * curvature).reshape(-1, 1, 1) * quad
        logits = logits.masked_fill(~valid, -float("inf"))
        return torch.log_softmax(logits, dim=-1), base
