"""The exact locally balanced kernel (the proposal GWG approximates)."""

from __future__ import annotations

from typing import Optional

from pyro_gwg._validation import check_balancing
from pyro_gwg.kernels.evaluating import EvaluatingKernel
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.locally_balanced import build_locally_balanced

__all__ = ["LocallyBalanced"]


class LocallyBalanced(EvaluatingKernel):
    r"""Metropolis-Hastings with the exact locally balanced proposal of Zanella (2020)
    [Zanella2020]_ over all single-coordinate moves.

    .. math:: q(x' \mid x) \propto e^{(f(x') - f(x)) / \tau}, \quad x' \in N(x),

    :math:`N(x)` the moves GWG proposes (bits flip, categories switch, ordinals step
    by :math:`\pm 1`) and :math:`\tau = 2` the square-root balancing function; with
    ``balancing``, :math:`q(x' \mid x) \propto g(e^{f(x') - f(x)})` for the balancing
    function ``g`` (``"sqrt"``, ``"barker"``, ``"min"`` or ``"max"``; see
    :mod:`pyro_gwg.proposals.balancing`). ``balancing`` and ``temperature`` interact as
    for :class:`~pyro_gwg.kernels.gwg.GWG`: one of them, or ``balancing="sqrt"`` with
    ``temperature=2``. This is the proposal Gibbs-With-Gradients approximates to first
    order (Grathwohl et al. 2021, Eq. 2); it needs :math:`f` at every neighbour, ``D * M`` log-joint
    evaluations per step and chain (``M`` = 1 for bits), run in batches of
    ``chunk_size`` states. See :mod:`pyro_gwg.proposals.locally_balanced`.

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed``,
    ``energy_evals``, ``grad_evals`` and ``log_joint`` (see
    :class:`~pyro_gwg.DiscreteKernel`).

    :param float temperature: proposal temperature :math:`\tau` (default 2,
        ``balancing="sqrt"``).
    :param str balancing: balancing function: ``"sqrt"`` (default), ``"barker"``,
        ``"min"`` or ``"max"``.
    :param options: ``chunk_size`` (see
        :class:`~pyro_gwg.kernels.evaluating.EvaluatingKernel`) and the options of every
        kernel (see :class:`~pyro_gwg.DiscreteKernel`).

    Example::

        >>> LocallyBalanced(balancing="barker").balancing
        'barker'
    """

    def __init__(
        self,
        model=None,
        *,
        temperature: Optional[float] = None,
        balancing: Optional[str] = None,
        **options,
    ) -> None:
        balancing, temperature = check_balancing("LocallyBalanced", balancing, temperature)
        super().__init__(model, **options)
        self.balancing, self.temperature = balancing, temperature

    def build(self, density) -> Algorithm:
        """The locally balanced sampler on ``density``:
        :func:`~pyro_gwg.proposals.locally_balanced.build_locally_balanced` with this
        kernel's settings.

        :rtype: Algorithm
        """
        return build_locally_balanced(
            density,
            2.0 if self.temperature is None else self.temperature,
            self.chunk_size,
            balancing=self.balancing,
        )
