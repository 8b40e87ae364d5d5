r"""The discrete Langevin kernels of Zhang, Liu & Liu (2022) [Zhang2022]_: DMALA (with
Metropolis-Hastings, the same sampler as :class:`~pyro_gwg.kernels.ncg.NCG`) and DULA
(without: biased)."""

from __future__ import annotations

from typing import Optional

from pyro_gwg.kernels.ncg import NCG, FactorisedKernel
from pyro_gwg.proposals.ncg import build_dula

__all__ = ["DMALA", "DULA"]


class DMALA(NCG):
    r"""Discrete Metropolis-adjusted Langevin algorithm (Zhang, Liu & Liu 2022
    [Zhang2022]_, Algorithm 1 with its MH test), as a
    :class:`~pyro.infer.mcmc.mcmc_kernel.MCMCKernel`: the name under which DMALA is
    known for the sampler this package implements as :class:`~pyro_gwg.kernels.ncg.NCG`
    (Rhodes & Gutmann 2022 [Rhodes2022]_, Eq. 8). This class *is* NCG (a subclass with
    nothing of its own but this docstring): same proposal, settings, step-size
    adaptation and statistics.

    With :math:`f` the log joint and step size :math:`\alpha`, Zhang et al. propose
    every coordinate at once from

    .. math:: q(x' \mid x) = \prod_i q_i(x'_i \mid x), \qquad
              q_i(x'_i \mid x) = \mathrm{Softmax}_{x'_i}\Big(\tfrac12 \nabla f(x)_i
              (x'_i - x_i) - \tfrac{1}{2\alpha} (x'_i - x_i)^2\Big)

    (their discrete Langevin proposal, DLP), and accept with probability
    :math:`\min\big(1, e^{f(x') - f(x)} q(x \mid x') / q(x' \mid x)\big)`. This is
    NCG's proposal with :math:`\epsilon = \alpha`: for a categorical coordinate in
    one-hot form, :math:`\lVert e_v - e_{x_i} \rVert^2 = 2 [v \ne x_i]` and the terms
    that do not depend on ``v`` cancel in the softmax, leaving NCG's logits
    :math:`g_{iv} / 2 - [v \ne x_i] / \epsilon`. The step size ``step_size``
    (:math:`\alpha`) is adapted during warmup toward ``target_accept_prob`` (default
    0.574), as for NCG. See :class:`DULA` for the same proposal without the MH test.

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed``,
    ``step_size``, ``energy_evals``, ``grad_evals`` and ``log_joint`` (as for
    :class:`~pyro_gwg.kernels.ncg.NCG`).

    Arguments as for :class:`~pyro_gwg.kernels.ncg.NCG`.
    """


class DULA(FactorisedKernel):
    r"""Discrete *unadjusted* Langevin algorithm (Zhang, Liu & Liu 2022 [Zhang2022]_,
    Algorithm 1 without the MH test), as a
    :class:`~pyro.infer.mcmc.mcmc_kernel.MCMCKernel`.

    **DULA is biased: its draws do not follow the posterior.** Each step draws every
    coordinate from the proposal of :class:`DMALA` (the NCG proposal, step size
    :math:`\alpha`),

    .. math:: q_i(x'_i \mid x) = \mathrm{Softmax}_{x'_i}\Big(\tfrac12 \nabla f(x)_i
              (x'_i - x_i) - \tfrac{1}{2\alpha} (x'_i - x_i)^2\Big),

    and keeps it: the transition matrix is :math:`T_\alpha(x, x') = q(x' \mid x)`, and
    its stationary law :math:`\pi_\alpha` differs from the target :math:`\pi`. As
    :math:`\alpha \to 0` the bias vanishes for targets whose log density is quadratic
    in the relaxed values (bits, one-hot vectors; Zhang et al. prove it) and stays
    small for nearly quadratic ones, while mixing slows down (fewer coordinates
    change per step). The tests compute :math:`\pi_\alpha` exactly on small models:
    on five coupled bits, the total-variation distance to :math:`\pi` is 0.62 at
    :math:`\alpha = 2`, 0.35 at 0.5, 0.13 at 0.25 and 0.007 at 0.1; on a model with a
    ``Binomial`` count and a ``Categorical`` site used as an index, whose first-order
    estimates are not exact to second order, it levels off near 0.25
    instead of vanishing. Use it where a cheap, always-moving, approximate
    sampler is acceptable (short-run chains in PCD training, as in the paper); for
    posterior inference use :class:`DMALA`, which corrects the same proposal. The
    estimators that need a transition leaving the target invariant (AIS, ARM) warn
    when given DULA: their estimates then carry its bias. The kernel declares
    ``exact = False``.

    There is no acceptance test, so no acceptance rate to adapt the step size to: the
    step size is fixed (default 0.1; smaller is less biased and mixes slower).

    Per-draw statistics: ``accepted`` (always True), ``accept_prob`` (always 1),
    ``num_changed`` (coordinates changed by the step), ``step_size``,
    ``energy_evals``, ``grad_evals`` and ``log_joint`` (as for
    :class:`~pyro_gwg.kernels.ncg.NCG`).

    :param callable model: a Pyro model whose latent sites are discrete.
    :param float step_size: :math:`\alpha` (default 0.1).
    :param int window: half-width of the candidate window of unbounded ordinals.
    :param jit_compile: compilation of the whole transition: ``"auto"`` (default),
        ``True``, ``"inductor"``, ``"make_fx"`` or ``False``; see
        :class:`~pyro_gwg.DiscreteKernel`.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param callable init_strategy: Pyro per-site initialisation strategy.
    """

    default_step_size = 0.1
    exact = False
    _build = staticmethod(build_dula)

    def __init__(
        self,
        model=None,
        *,
        step_size: Optional[float] = None,
        adapt_step_size: bool = False,
        **kwargs,
    ) -> None:
        if adapt_step_size is not False:
            raise ValueError(
                "DULA(adapt_step_size={!r}): DULA accepts every proposal, so there is no "
                "acceptance rate to adapt the step size to. Give a fixed step_size "
                "(smaller: less bias, slower mixing), or use DMALA, which adapts "
                "it.".format(adapt_step_size)
            )
        super().__init__(model, step_size=step_size, adapt_step_size=False, **kwargs)
