r"""The path auxiliary kernels PAS and PAFS: GWG's proposal along a path of ``L``
single-coordinate moves, with ``L`` adapted during warmup as GWG's number of flips."""

from __future__ import annotations

from typing import Optional

from pyro_gwg.kernels.gwg import GWG
from pyro_gwg.kernels.support import check_supported_coordinates
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.path import build_pafs, build_pas

__all__ = ["PAFS", "PAS"]


class _PathKernel(GWG):
    """GWG's arguments without the options of GWG's own move (``balancing``,
    ``replacement``, ``radius``), which a path of square-root-balanced single moves
    does not have: each is refused by name rather than ignored."""

    def __init__(
        self,
        model=None,
        *,
        balancing: Optional[str] = None,
        replacement: bool = True,
        radius: int = 1,
        **kwargs,
    ) -> None:
        for option, value, default in (
            ("balancing", balancing, None),
            ("replacement", replacement, True),
            ("radius", radius, 1),
        ):
            if value != default and not (option == "balancing" and value == "sqrt"):
                raise ValueError(
                    "{} takes no {}={!r}: its path is made of GWG moves with the "
                    "square-root balancing (temperature), one coordinate at a time, "
                    "ordinals by +-1. Use GWG({}={!r}) for that proposal.".format(
                        type(self).__name__, option, value, option, value
                    )
                )
        super().__init__(model, **kwargs)


class PAS(_PathKernel):
    r"""The path auxiliary sampler (Sun et al. 2022) [Sun2022]_ for the binary and
    categorical latent sites of any Pyro model, as a
    :class:`~pyro.infer.mcmc.mcmc_kernel.MCMCKernel`.

    Each step draws ``L`` coordinates :math:`i_1, \dots, i_L` *with replacement* from
    GWG's coordinate proposal :math:`q(i \mid x)` at the current state (see
    :class:`~pyro_gwg.kernels.gwg.GWG`) and moves along the path they define: every
    visit moves the coordinate once, by GWG's candidate distribution at its current
    value under the gradient at :math:`x`. A bit drawn :math:`n_i` times is flipped iff
    :math:`n_i` is odd; a category ends at value :math:`y_i` with probability
    :math:`(T_i^{n_i})_{x_i y_i}`, :math:`T_i` the transition matrix of one visit. The
    reverse path (the same coordinates, the gradient at the proposed state :math:`y`)
    gives the exact acceptance probability

    .. math:: \min\Big(1, e^{f(y) - f(x)} \prod_i
              \Big(\frac{q(i \mid y)}{q(i \mid x)}\Big)^{n_i}
              \frac{(T_i'^{\,n_i})_{y_i x_i}}{(T_i^{n_i})_{x_i y_i}}\Big)

    (the derivation is in :mod:`pyro_gwg.proposals.path`). One forward and one backward
    pass of the model per step, whatever ``L``. Every step takes ``L`` or, with
    probability 1/2 when :math:`L \ge 2`, ``L - 1`` for its path length: a fixed even
    length would keep the parity of the number of ones of binary sites.

    The arguments are GWG's, with ``num_flips`` the path length ``L``. With
    ``num_flips="auto"`` (or ``adapt_num_flips=True``) ``L`` is adapted during warmup by
    :class:`~pyro_gwg.adaptation.NumFlipsAdaptation`: dual averaging on :math:`\log L`
    toward ``target_accept_prob`` (default 0.574, the target of the adaptive path
    samplers of the DISCS benchmark, Goshvadi et al. 2023 [Goshvadi2023]_), frozen at the
    end of warmup so that the chain after warmup is a fixed MCMC kernel.

    Ordinal sites other than bits are refused (use :class:`PAFS` or
    :class:`~pyro_gwg.kernels.gwg.GWG`).

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed``,
    ``energy_evals``, ``grad_evals`` and ``log_joint`` (see
    :class:`~pyro_gwg.DiscreteKernel`).

    :param callable model: a Pyro model whose latent sites are bits and categoricals.
    :param num_flips: path length ``L`` (default 1), or ``"auto"`` (adapted, starting
        from :math:`\sqrt{D} / 2.5`).
    :type num_flips: int or str
    :param bool adapt_num_flips: adapt ``L`` during warmup.
    :param float temperature: proposal temperature :math:`\tau` (2: locally balanced).
    :param float uniform_weight: weight :math:`w` of the uniform component of the
        coordinate proposal and of each visit's move (default 0.05).
    :param float target_accept_prob: target of the adaptation of ``L`` (default 0.574).
    :param jit_compile: compilation of the whole transition; see
        :class:`~pyro_gwg.DiscreteKernel`.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param callable init_strategy: Pyro per-site initialisation strategy.

    Example::

        >>> import pyro, torch
        >>> import pyro.distributions as dist
        >>> from pyro.infer import MCMC
        >>> def model(y):
        ...     with pyro.plate("sites", 3):
        ...         x = pyro.sample("x", dist.Bernoulli(0.5))
        ...     pyro.sample("y", dist.Normal(x.sum(-1, keepdim=True), 1.0), obs=y)
        >>> pyro.set_rng_seed(0)
        >>> mcmc = MCMC(PAS(model, num_flips=2), num_samples=100, disable_progbar=True)
        >>> mcmc.run(torch.tensor(2.0))
        >>> mcmc.get_samples()["x"].shape
        torch.Size([100, 3])
    """

    def build(
        self, density, num_flips: Optional[int] = None, max_flips: Optional[int] = None
    ) -> Algorithm:
        """PAS on ``density``: :func:`~pyro_gwg.proposals.path.build_pas` with this
        kernel's settings.

        :param density: a :class:`~pyro_gwg.density.Density`.
        :param int num_flips: overrides the kernel's starting path length.
        :param int max_flips: the largest run-time path length (set by the adaptation),
            or ``None`` for a fixed one.
        :rtype: Algorithm
        """
        if num_flips is None:
            num_flips = self._start_num_flips(density.layout.num_coords)
        return build_pas(density, self.temperature, num_flips, self.uniform_weight, max_flips)

    def _check_density(self, density) -> None:
        # (a path may visit a coordinate several times: L > D is allowed)
        check_supported_coordinates(type(self).__name__, density.layout, bounded_ordinals=False)


class PAFS(_PathKernel):
    r"""The path auxiliary sampler without replacement, PAFS (the fast path auxiliary
    sampler of the DISCS benchmark, Goshvadi et al. 2023 [Goshvadi2023]_, after Sun et
    al. 2022 [Sun2022]_) for the latent discrete sites of any Pyro model, as a
    :class:`~pyro.infer.mcmc.mcmc_kernel.MCMCKernel`.

    Each step draws ``L`` *distinct* coordinates one after the other from GWG's
    coordinate proposal :math:`q(i \mid x)` restricted to the coordinates not drawn yet
    (see :class:`~pyro_gwg.kernels.gwg.GWG`), and moves each once, to a candidate :math:`v_l` from
    :math:`q(v \mid i_l, x)`; the reverse path visits the same coordinates in the
    reverse order under the proposal at the proposed state :math:`y`, which gives the
    exact acceptance probability

    .. math:: \min\Big(1, e^{f(y) - f(x)} \prod_{l=1}^{L}
              \frac{q(i_l \mid y)\, q(v'_l \mid i_l, y)}{q(i_l \mid x)\, q(v_l \mid i_l, x)}
              \cdot \frac{1 - \sum_{m < l} q(i_m \mid x)}{1 - \sum_{m > l} q(i_m \mid y)}
              \Big)

    (:mod:`pyro_gwg.proposals.path`). Bits flip, categories switch, ordinals step by
    :math:`\pm 1`, as in GWG. One forward and one backward pass of the model per step.
    Every step takes ``L`` or, with probability 1/2 when :math:`L \ge 2`, ``L - 1``
    for its path length: with a fixed length ``L`` every accepted move would flip ``L``
    bits, and a chain on binary sites would keep the parity of their number of ones.

    The arguments are GWG's, with ``num_flips`` the path length ``L`` (at most the
    number of coordinates). With ``num_flips="auto"`` (or ``adapt_num_flips=True``)
    ``L`` is adapted during warmup by :class:`~pyro_gwg.adaptation.NumFlipsAdaptation`:
    dual averaging on :math:`\log L` toward ``target_accept_prob`` (default 0.574, the
    target of DISCS's adaptive PAFS, which moves a real-valued radius by the acceptance
    rate's distance to it), frozen at the end of warmup.

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed``,
    ``energy_evals``, ``grad_evals`` and ``log_joint`` (see
    :class:`~pyro_gwg.DiscreteKernel`).

    :param callable model: a Pyro model whose latent sites are discrete.
    :param num_flips: path length ``L`` (default 1), or ``"auto"`` (adapted, starting
        from :math:`\sqrt{D} / 2.5`).
    :type num_flips: int or str
    :param bool adapt_num_flips: adapt ``L`` during warmup.
    :param float temperature: proposal temperature :math:`\tau` (2: locally balanced).
    :param float uniform_weight: weight :math:`w` of the uniform component of the
        proposal (default 0.05).
    :param float target_accept_prob: target of the adaptation of ``L`` (default 0.574).
    :param jit_compile: compilation of the whole transition; see
        :class:`~pyro_gwg.DiscreteKernel`.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param callable init_strategy: Pyro per-site initialisation strategy.
    """

    def build(
        self, density, num_flips: Optional[int] = None, max_flips: Optional[int] = None
    ) -> Algorithm:
        """PAFS on ``density``: :func:`~pyro_gwg.proposals.path.build_pafs` with this
        kernel's settings.

        :param density: a :class:`~pyro_gwg.density.Density`.
        :param int num_flips: overrides the kernel's starting path length.
        :param int max_flips: the largest run-time path length (set by the adaptation),
            or ``None`` for a fixed one.
        :rtype: Algorithm
        """
        if num_flips is None:
            num_flips = self._start_num_flips(density.layout.num_coords)
        return build_pafs(density, self.temperature, num_flips, self.uniform_weight, max_flips)
