"""The exact locally balanced kernel (the proposal GWG approximates)."""

from __future__ import annotations

from typing import Optional, Union

from pyro.infer.autoguide.initialization import init_to_sample

from pyro_gwg._validation import check_balancing
from pyro_gwg.kernels.evaluating import EvaluatingKernel
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.locally_balanced import build_locally_balanced

__all__ = ["LocallyBalanced"]


class LocallyBalanced(EvaluatingKernel):
    r"""Metropolis-Hastings with the exact locally balanced proposal of Zanella (2020)
    [Zanella2020]_
    over all single-coordinate moves, as a
    :class:`~pyro.infer.mcmc.mcmc_kernel.MCMCKernel`.

    .. math:: q(x' \mid x) \propto e^{(f(x') - f(x)) / \tau}, \quad x' \in N(x),

    :math:`N(x)` the moves GWG proposes (bits flip, categories switch, ordinals step
    by :math:`\pm 1`) and :math:`\tau = 2` the square-root balancing function; with
    ``balancing``, :math:`q(x' \mid x) \propto g(e^{f(x') - f(x)})` for the balancing
    function ``g`` (``"sqrt"``, ``"barker"``, ``"min"`` or ``"max"``; see
    :mod:`pyro_gwg.proposals.balancing`). ``balancing`` and ``temperature`` interact as
    for :class:`~pyro_gwg.kernels.gwg.GWG`: one of them, or ``balancing="sqrt"`` with
    ``temperature=2``. This is
    the proposal Gibbs-With-Gradients approximates to first order (Grathwohl et al.
    2021, Eq. 2); it needs :math:`f` at every neighbour, ``D * M`` log-joint
    evaluations per step and chain (``M`` = 1 for bits), run in batches of
    ``chunk_size`` states. See :mod:`pyro_gwg.proposals.locally_balanced`.

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed``,
    ``energy_evals``, ``grad_evals`` and ``log_joint`` (see
    :class:`~pyro_gwg.DiscreteKernel`).

    :param callable model: a Pyro model whose latent sites are discrete.
    :param float temperature: proposal temperature :math:`\tau` (default 2,
        ``balancing="sqrt"``).
    :param str balancing: balancing function: ``"sqrt"`` (default), ``"barker"``,
        ``"min"`` or ``"max"``.
    :param int chunk_size: most states per batched run of the model.
    :param jit_compile: compilation of the whole transition: ``"auto"`` (default),
        ``True``, ``"inductor"``, ``"make_fx"`` or ``False``; see
        :class:`~pyro_gwg.DiscreteKernel`.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param callable init_strategy: Pyro per-site initialisation strategy.
    """

    def __init__(
        self,
        model=None,
        *,
        temperature: Optional[float] = None,
        balancing: Optional[str] = None,
        chunk_size: int = 4096,
        jit_compile: Union[bool, str] = "auto",
        max_plate_nesting: Optional[int] = None,
        init_strategy=init_to_sample,
    ) -> None:
        balancing, temperature = check_balancing("LocallyBalanced", balancing, temperature)
        super().__init__(
            model,
            chunk_size=chunk_size,
            jit_compile=jit_compile,
            max_plate_nesting=max_plate_nesting,
            init_strategy=init_strategy,
        )
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
