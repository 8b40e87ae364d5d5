"""The Gibbs-With-Gradients kernel, and the base of the kernels that move a number of
coordinates per step drawn from its coordinate proposal (GWG, PAS, PAFS)."""

from __future__ import annotations

import math
from typing import Optional, Union

from pyro_gwg._validation import (
    check_balancing,
    check_bool,
    check_integer,
    check_number,
    is_integer,
)
from pyro_gwg.adaptation import NumFlipsAdaptation
from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.gwg import build_gwg

__all__ = ["FlipCountKernel", "GWG"]


class FlipCountKernel(DiscreteKernel):
    r"""Base of :class:`GWG`, :class:`~pyro_gwg.kernels.path.PAS` and
    :class:`~pyro_gwg.kernels.path.PAFS`: kernels that move ``num_flips`` coordinates
    per step, drawn from GWG's coordinate proposal, a softmax of the gradient's
    first-order estimates of the change of the log joint (balanced by ``balancing`` or
    ``temperature``) mixed with the uniform distribution over the moves (weight
    ``uniform_weight``).

    With ``adapt_num_flips=True`` (implied by ``num_flips="auto"``) the number adapts
    during warmup (:class:`~pyro_gwg.adaptation.NumFlipsAdaptation`): dual averaging on
    :math:`\log N` toward ``target_accept_prob``, rounded to an integer in
    :math:`[1, D]` (``D`` coordinates), shared by the chains and frozen at the end of
    warmup. ``num_flips="auto"`` starts from :math:`\sqrt{D} / 2.5`, which it keeps
    without warmup.

    :param num_flips: coordinates per step (default 1), or ``"auto"``.
    :type num_flips: int or str
    :param bool adapt_num_flips: adapt ``num_flips`` during warmup (default ``False``).
    :param float temperature: proposal temperature :math:`\tau`, logits
        :math:`\tilde d / \tau`; 2 (the default) is ``balancing="sqrt"``.
    :param str balancing: balancing function :math:`g` of the proposal,
        :math:`g(t) = t\, g(1/t)` (:mod:`pyro_gwg.proposals.balancing`): ``"sqrt"``
        (the default), ``"barker"``, ``"min"`` or ``"max"``; give it or
        ``temperature``, not both.
    :param float uniform_weight: weight :math:`w` in :math:`[0, 1)` of the uniform
        component of the proposal (default 0.05; 0 is the papers' proposal).
    :param float target_accept_prob: target of the adaptation (default 0.574).
    :param options: ``jit_compile``, ``max_plate_nesting``, ``init_strategy``: see
        :class:`~pyro_gwg.DiscreteKernel`.
    """

    def __init__(
        self,
        model=None,
        *,
        num_flips: Union[int, str] = 1,
        adapt_num_flips: bool = False,
        temperature: Optional[float] = None,
        balancing: Optional[str] = None,
        uniform_weight: float = 0.05,
        target_accept_prob: float = 0.574,
        **options,
    ) -> None:
        if num_flips != "auto" and not is_integer(num_flips, 1):
            raise ValueError(
                "num_flips must be a positive integer or 'auto', got {!r}".format(num_flips)
            )
        self.num_flips = num_flips if num_flips == "auto" else int(num_flips)
        self.balancing, self.temperature = check_balancing(
            type(self).__name__, balancing, temperature
        )
        self.uniform_weight = check_number("uniform_weight", uniform_weight, 0, 1, high_open=True)
        self.target_accept_prob = check_number(
            "target_accept_prob", target_accept_prob, 0, 1, low_open=True, high_open=True
        )
        self.adapt_num_flips = num_flips == "auto" or check_bool("adapt_num_flips", adapt_num_flips)
        self._adaptation: Optional[NumFlipsAdaptation] = None
        super().__init__(model, **options)

    def _start_num_flips(self, num_coords: int) -> int:
        if self.num_flips == "auto":
            return max(1, round(math.sqrt(num_coords) / 2.5))
        return self.num_flips

    @property
    def current_num_flips(self) -> int:
        """The number of coordinates drawn per proposal in force (adapted during
        warmup with ``adapt_num_flips``; needs :meth:`setup`)."""
        driver = self.driver
        if driver is not None and driver.state is not None:
            return int(driver.state.num_flips[0])
        return self._start_num_flips(self.energy.layout.num_coords)

    def adaptation(self, density, num_warmup: int) -> Optional[NumFlipsAdaptation]:
        if not self.adapt_num_flips:
            return None
        num_coords = density.layout.num_coords
        self._adaptation = NumFlipsAdaptation(
            self._start_num_flips(num_coords), num_coords, self.target_accept_prob, num_warmup
        )
        return self._adaptation

    @property
    def adapted_num_flips(self) -> Optional[int]:
        """With ``adapt_num_flips``: the number of flips frozen at the end of the last
        warmup (``None`` before)."""
        return self._adaptation.adapted if self._adaptation is not None else None

    def _check_density(self, density) -> None:
        num_coords = density.layout.num_coords
        # (one coordinate drawn N times moves once, like N = 1: nothing to refuse)
        if self.num_flips != "auto" and self.num_flips > num_coords > 1:
            raise ValueError(
                "{}(num_flips={}) draws more coordinates per step than the model has "
                "({}): nearly every coordinate would move at every step and the chain "
                "could not settle. Use num_flips <= {}, or adapt_num_flips=True to adapt "
                "it during warmup.".format(
                    type(self).__name__, self.num_flips, num_coords, num_coords
                )
            )

    def _stuck_advice(self) -> str:
        return ", or {} with a larger uniform_weight, e.g. 0.9".format(type(self).__name__)


class GWG(FlipCountKernel):
    r"""Gibbs-With-Gradients (Grathwohl et al. 2021) [Grathwohl2021]_.

    With :math:`f` the log joint and :math:`g = \nabla f(x)` its gradient in the
    relaxed values, the first-order estimate of the change of :math:`f` under a
    single-coordinate move is (Eqs. 3-4) :math:`\tilde d_i = -(2x_i - 1) g_i` for bits,
    :math:`\tilde d_{ij} = g_{ij} - g_{i x_i}` for categories and :math:`\tilde d = g_i
    \delta` for a step :math:`\delta` of an ordinal. A move is proposed from
    :math:`q(i, v \mid x) = \mathrm{Softmax}(\tilde d / \tau)` over all moves of all
    sites (mixed with the uniform distribution over the moves, weight
    ``uniform_weight``: :func:`~pyro_gwg.proposals.gwg.defensive_mixture`) and accepted
    with probability (Algorithm 1)

    .. math:: \min\Big(1, e^{f(x') - f(x)} \frac{q(i, v' \mid x')}{q(i, v \mid x)}\Big).

    ``num_flips = N > 1`` draws ``N`` coordinates with replacement and moves each
    distinct one (Appendix D, Eq. 27); with ``replacement=False``, ``N`` or ``N - 1``
    distinct coordinates (probability 1/2 each, so that a chain on bits is irreducible)
    move one after the other (:mod:`pyro_gwg.proposals.gwg`). One forward and one
    backward pass of the model per step. The number of flips, the balancing and the
    adaptation are those of :class:`FlipCountKernel`.

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed``,
    ``energy_evals``, ``grad_evals`` and ``log_joint`` (see
    :class:`~pyro_gwg.DiscreteKernel`).

    :param callable model: a Pyro model whose latent sites are discrete.
    :param bool replacement: with ``num_flips > 1``, draw the coordinates with
        replacement (default ``True``) or not.
    :param int radius: largest jump of an ordinal coordinate in one move (default 1:
        :math:`\pm 1`); needs a model with such a coordinate.
    :param settings: ``num_flips``, ``adapt_num_flips``, ``temperature``,
        ``balancing``, ``uniform_weight``, ``target_accept_prob`` (see
        :class:`FlipCountKernel`) and the options of every kernel (see
        :class:`~pyro_gwg.DiscreteKernel`).

    Example::

        >>> GWG(num_flips="auto", balancing="barker").adapt_num_flips
        True
    """

    def __init__(
        self, model=None, *, replacement: bool = True, radius: int = 1, **settings
    ) -> None:
        self.replacement = check_bool("replacement", replacement)
        self.radius = check_integer("radius", radius, 1, "largest jump of an ordinal")
        super().__init__(model, **settings)

    def build(
        self, density, num_flips: Optional[int] = None, max_flips: Optional[int] = None
    ) -> Algorithm:
        """GWG on ``density``: :func:`~pyro_gwg.proposals.gwg.build_gwg` with this
        kernel's settings.

        :param density: a :class:`~pyro_gwg.density.Density`.
        :param int num_flips: overrides the kernel's starting number of flips.
        :param int max_flips: the largest run-time number of flips (set by the
            adaptation of ``num_flips``), or ``None`` for a fixed one.
        :rtype: Algorithm
        """
        if num_flips is None:
            num_flips = self._start_num_flips(density.layout.num_coords)
        return build_gwg(
            density,
            2.0 if self.temperature is None else self.temperature,
            num_flips,
            self.uniform_weight,
            max_flips,
            balancing=self.balancing,
            replacement=self.replacement,
            radius=self.radius,
        )

    def _check_density(self, density) -> None:
        super()._check_density(density)
        layout = density.layout
        movable = int((layout.num_values() > 1).sum())
        if not self.replacement and self.num_flips != "auto" and self.num_flips > movable:
            raise ValueError(
                "GWG(num_flips={}, replacement=False) moves up to {} distinct "
                "coordinates per step but the model has {} that can change: those "
                "proposals would all be rejected. Use num_flips <= {}.".format(
                    self.num_flips, self.num_flips, movable, movable
                )
            )
        ordinal = layout.is_scalar & (layout.num_values() > 2)
        if self.radius > 1 and not bool(ordinal.any()):
            raise ValueError(
                "GWG(radius={}) sets the largest jump of ordinal coordinates, but the "
                "model has none (bits and categories move to any of their values "
                "already): use radius=1.".format(self.radius)
            )
