r"""The path auxiliary kernels PAS and PAFS: a path of ``L`` single-coordinate GWG
moves (PAS: the proposal recomputed at every state of the path; PAFS: distinct
coordinates drawn from the proposal at the start), with ``L`` adapted during warmup as
GWG's number of flips."""

from __future__ import annotations

from typing import Optional

from pyro_gwg.kernels.gwg import FlipCountKernel
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.path import build_pafs, build_pas

__all__ = ["PAFS", "PAS"]


class _PathKernel(FlipCountKernel):
    """The settings of :class:`~pyro_gwg.kernels.gwg.FlipCountKernel`, with
    ``num_flips`` the path length ``L`` and the square-root balancing (or a
    temperature) only. The options of GWG's own move (another ``balancing``,
    ``replacement``, ``radius``), which a path of single moves does not have, are
    refused by name, pointing to GWG."""

    def __init__(
        self, model=None, *, replacement: bool = True, radius: int = 1, **settings
    ) -> None:
        for option, value, default in (
            ("balancing", settings.get("balancing", "sqrt"), "sqrt"),
            ("replacement", replacement, True),
            ("radius", radius, 1),
        ):
            if value != default and not (option == "balancing" and value is None):
                raise ValueError(
                    "{} takes no {}={!r}: its path is made of GWG moves with the "
                    "square-root balancing (temperature), one coordinate at a time, "
                    "ordinals by +-1. Use GWG({}={!r}) for that proposal.".format(
                        type(self).__name__, option, value, option, value
                    )
                )
        super().__init__(model, **settings)

    def build(
        self, density, num_flips: Optional[int] = None, max_flips: Optional[int] = None
    ) -> Algorithm:
        """The path sampler on ``density`` (:func:`~pyro_gwg.proposals.path.build_pas`
        or :func:`~pyro_gwg.proposals.path.build_pafs`) with this kernel's settings.

        :param density: a :class:`~pyro_gwg.density.Density`.
        :param int num_flips: overrides the kernel's starting path length.
        :param int max_flips: the largest run-time path length (set by the adaptation),
            or ``None`` for a fixed one.
        :rtype: Algorithm
        """
        if num_flips is None:
            num_flips = self._start_num_flips(density.layout.num_coords)
        return type(self)._build(
            density, self.temperature, num_flips, self.uniform_weight, max_flips
        )


class PAS(_PathKernel):
    r"""The path auxiliary sampler (Sun et al. 2022) [Sun2022]_, with the move weights
    recomputed at every state of the path (the authors' ``pafs``, the gradient version
    of their sampler; DISCS's PAFS is :class:`PAFS`).

    Each step moves along a path :math:`x = z_0, z_1, \dots, z_L = y` of single GWG
    moves: move :math:`l` is drawn from GWG's proposal at :math:`z_{l-1}`, the
    first-order estimates :math:`\tilde d(z_{l-1}; g)` of every single move from
    :math:`z_{l-1}` computed with the gradient :math:`g = \nabla f(x)` at the start. The
    reverse path, back from :math:`y` under the gradient at :math:`y`, gives the exact
    acceptance probability

    .. math:: \min\Big(1, e^{f(y) - f(x)} \prod_{l=1}^{L}
              \frac{q(i_l, v'_l \mid z_l; \nabla f(y))}{q(i_l, v_l \mid z_{l-1}; \nabla f(x))}
              \Big)

    (:mod:`pyro_gwg.proposals.path`). Bits flip, categories switch, ordinals step by
    :math:`\pm 1`.

    Cost of a step: one forward and one backward pass of the model, at :math:`y`
    (the gradient at :math:`x` is carried from the previous step), whatever ``L``, and
    ``2 L`` evaluations of GWG's proposal (at every state of the path, under each of
    the two gradients: tensor arithmetic, no model call), the ``L`` forward moves drawn
    one after the other: on a cheap model a step costs more time than GWG's. A step
    takes ``L`` or, with probability 1/2 when :math:`L \ge 2`, ``L - 1`` for its length
    (a fixed even length would keep the parity of the number of ones). ``num_flips``
    is ``L`` (adapted during warmup with ``"auto"``, toward the 0.574 of the DISCS
    benchmark's adaptive path samplers, Goshvadi et al. 2023 [Goshvadi2023]_); a path
    may move a coordinate several times, so ``L`` may exceed the number of coordinates.
    While ``L`` adapts, a step is built for lengths up to a bound and makes that many
    moves, those past ``L`` masked (as GWG draws that many coordinates): a warmup
    step makes fewer than ``8 L`` moves, or 64, never more than the number of
    coordinates (:func:`~pyro_gwg.adaptation.warmup_bound`), and a sampling step at
    most ``2 L`` (:func:`~pyro_gwg.adaptation.flips_bound`).
    The settings are those of :class:`~pyro_gwg.kernels.gwg.FlipCountKernel`.

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed``,
    ``energy_evals``, ``grad_evals`` and ``log_joint`` (see
    :class:`~pyro_gwg.DiscreteKernel`).

    Example::

        >>> PAS(num_flips="auto").adapt_num_flips
        True
    """

    _build = staticmethod(build_pas)

    def _check_density(self, density) -> None:
        pass  # a path may move a coordinate several times: L > D is allowed


class PAFS(_PathKernel):
    r"""The path auxiliary sampler without replacement: the ``path_auxiliary`` sampler of
    the DISCS benchmark (its class ``PAFSNoReplacement``; Goshvadi et al. 2023
    [Goshvadi2023]_, after Sun et al. 2022 [Sun2022]_). Not the authors' ``pafs``,
    which recomputes the proposal along the path: that is :class:`PAS`.

    Each step draws ``L`` *distinct* coordinates one after the other from GWG's
    coordinate proposal :math:`q(i \mid x)` restricted to those not drawn yet, and moves
    each once, to :math:`v_l \sim q(v \mid i_l, x)`; the reverse path visits them in the
    reverse order under the proposal at the proposed state :math:`y`:

    .. math:: \min\Big(1, e^{f(y) - f(x)} \prod_{l=1}^{L}
              \frac{q(i_l \mid y)\, q(v'_l \mid i_l, y)}{q(i_l \mid x)\, q(v_l \mid i_l, x)}
              \cdot \frac{1 - \sum_{m < l} q(i_m \mid x)}{1 - \sum_{m > l} q(i_m \mid y)}
              \Big)

    (:mod:`pyro_gwg.proposals.path`). Bits flip, categories switch, ordinals step by
    :math:`\pm 1`. One forward and one backward pass per step; a step takes ``L`` or,
    with probability 1/2 when :math:`L \ge 2`, ``L - 1`` for its length. ``num_flips``
    is ``L``, at most the number of coordinates; the settings are those of
    :class:`~pyro_gwg.kernels.gwg.FlipCountKernel`.

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed``,
    ``energy_evals``, ``grad_evals`` and ``log_joint`` (see
    :class:`~pyro_gwg.DiscreteKernel`).

    Example::

        >>> PAFS(num_flips=4, uniform_weight=0.1).num_flips
        4
    """

    _build = staticmethod(build_pafs)
