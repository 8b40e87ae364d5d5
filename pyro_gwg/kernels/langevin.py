r"""The discrete Langevin samplers of Zhang, Liu & Liu (2022) [Zhang2022]_: DMALA (with
Metropolis-Hastings), which is :class:`~pyro_gwg.kernels.ncg.NCG` under that paper's
name, and DULA (without: biased)."""

from __future__ import annotations

from pyro_gwg._validation import check_integer, check_number
from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.kernels.ncg import NCG
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.ncg import build_dula

__all__ = ["DMALA", "DULA"]

#: The discrete Metropolis-adjusted Langevin algorithm of Zhang, Liu & Liu (2022)
#: [Zhang2022]_ (Algorithm 1 with its MH test): another name of
#: :class:`~pyro_gwg.kernels.ncg.NCG`, the same sampler (their step size :math:`\alpha`
#: is NCG's :math:`\epsilon`).
DMALA = NCG


class DULA(DiscreteKernel):
    r"""Discrete *unadjusted* Langevin algorithm (Zhang, Liu & Liu 2022 [Zhang2022]_,
    Algorithm 1 without the MH test).

    **DULA is biased: its draws do not follow the posterior.** Each step draws every
    coordinate from the proposal of :class:`~pyro_gwg.kernels.ncg.NCG` (DMALA) with
    step size :math:`\alpha`,

    .. math:: q_i(x'_i \mid x) = \mathrm{Softmax}_{x'_i}\Big(\tfrac12 \nabla f(x)_i
              (x'_i - x_i) - \tfrac{1}{2\alpha} (x'_i - x_i)^2\Big),

    and keeps it: the stationary law :math:`\pi_\alpha` of :math:`T_\alpha(x, x') =
    q(x' \mid x)` differs from the target. As :math:`\alpha \to 0` the bias vanishes
    for log densities quadratic in the relaxed values (bits, one-hot vectors) and stays
    small for nearly quadratic ones, while mixing slows down; it levels off for others.
    Use it where a cheap, always-moving approximate sampler will do (short-run chains in
    PCD training, as in the paper); for posterior inference use DMALA, which corrects
    the same proposal. The kernel declares ``exact = False``: the estimators that need
    an invariant transition (AIS, ARM) warn when given it.

    Per-draw statistics: ``accepted`` (always True), ``accept_prob`` (always 1),
    ``num_changed`` (coordinates changed by the step), ``step_size``,
    ``energy_evals``, ``grad_evals`` and ``log_joint``.

    :param float step_size: :math:`\alpha` (default 0.1; smaller is less biased and
        mixes slower). Fixed: without an acceptance test there is no acceptance rate
        to adapt it to, and ``adapt_step_size=True`` is refused.
    :param int window: half-width of the candidate window of unbounded ordinals
        (default 10), as for :class:`~pyro_gwg.kernels.ncg.NCG`.
    :param options: ``jit_compile``, ``max_plate_nesting``, ``init_strategy``: see
        :class:`~pyro_gwg.DiscreteKernel`.

    Example::

        >>> DULA(step_size=0.05).exact
        False
    """

    exact = False

    def __init__(
        self,
        model=None,
        *,
        step_size: float = 0.1,
        window: int = 10,
        adapt_step_size: bool = False,
        **options,
    ) -> None:
        if adapt_step_size is not False:
            raise ValueError(
                "DULA(adapt_step_size={!r}): DULA accepts every proposal, so there is no "
                "acceptance rate to adapt the step size to. Give a fixed step_size "
                "(smaller: less bias, slower mixing), or use DMALA, which adapts "
                "it.".format(adapt_step_size)
            )
        self.step_size = check_number(
            "step_size", step_size, 0, float("inf"), low_open=True, high_open=True
        )
        self.window = check_integer("window", window, 1)
        super().__init__(model, **options)

    def build(self, density) -> Algorithm:
        """DULA on ``density``: :func:`~pyro_gwg.proposals.ncg.build_dula` with this
        kernel's step size and window.

        :rtype: Algorithm
        """
        return build_dula(density, self.step_size, self.window)
