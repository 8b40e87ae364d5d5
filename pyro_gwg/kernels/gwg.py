"""The Gibbs-With-Gradients kernel."""

from __future__ import annotations

import math
from typing import Optional, Union

from pyro.infer.autoguide.initialization import init_to_sample

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

__all__ = ["GWG"]


class GWG(DiscreteKernel):
    r"""Gibbs-With-Gradients (Grathwohl et al. 2021) [Grathwohl2021]_ for the latent discrete
    sites of
    any Pyro model, as a :class:`~pyro.infer.mcmc.mcmc_kernel.MCMCKernel`.

    With :math:`f` the log joint of the model and :math:`g = \nabla f(x)` the gradient
    with respect to the relaxed values, the first-order estimate of the change of
    :math:`f` under a single-coordinate move is (Grathwohl et al. 2021 [Grathwohl2021]_, Eqs. 3-4)

    * bits: :math:`\tilde d_i = -(2x_i - 1) g_i`;
    * (one-hot) categoricals: :math:`\tilde d_{ij} = g_{ij} - g_{i x_i}`, for all
      site-value pairs :math:`j \ne x_i`;
    * ordinals: :math:`\tilde d = \pm g_i` for moves of :math:`\pm 1` inside the
      support (unbounded supports, e.g. ``Poisson``, move by :math:`\pm 1` too).

    The proposal is :math:`q(i, v \mid x) = \mathrm{Softmax}(\tilde d / \tau)` over all
    moves of all sites jointly (with ``balancing``, :math:`\mathrm{Softmax}(\log
    g(e^{\tilde d}))` for the balancing function ``g``), accepted with probability

    .. math:: \min\Big(1, e^{f(x') - f(x)} \frac{q(i, v' \mid x')}{q(i, v \mid x)}\Big)

    (Algorithm 1), where the kernel uses the *defensive mixture*
    :math:`q_w = (1 - w)\, q + w\, U(N(x))` with the uniform distribution over the
    valid moves (weight ``uniform_weight``; :func:`~pyro_gwg.proposals.gwg.defensive_mixture`):
    where the first-order estimate is badly wrong (a one-hot site in a sharp
    likelihood, an infinite derivative) the gradient proposal alone can put
    probability :math:`e^{-100}` on every move that the target favours and freeze the
    chain; under :math:`q_w` every move keeps probability at least
    :math:`w / |N(x)|` in both directions. ``num_flips = N > 1`` draws ``N`` coordinates
    with replacement and moves each distinct one (Appendix D, Eq. 27; see
    :mod:`pyro_gwg.proposals.gwg`); with ``replacement=False`` it draws ``N`` or
    ``N - 1`` distinct coordinates (probability 1/2 each: exactly ``N`` moves of bits
    would keep the parity of their sum and the chain would not be irreducible) one after
    the other, and every one of them moves (the ordered sequence is an auxiliary
    variable of an exact MH step; the derivation is in :mod:`pyro_gwg.proposals.gwg`).
    ``radius = r > 1`` lets ordinal coordinates jump to any value within distance ``r``
    (inside their support) in one move, with the first-order estimate
    :math:`\tilde d = g_i \delta` for a step :math:`\delta`.
    Each step costs one forward and one backward pass of the model, at the proposed
    state. The proposal is a valid MH proposal whatever the gradient, so the chain
    targets the exact posterior even where the gradient is uninformative.

    With ``adapt_num_flips=True``, ``N`` adapts during warmup
    (:class:`~pyro_gwg.adaptation.NumFlipsAdaptation`): dual averaging
    (:class:`~pyro.ops.dual_averaging.DualAveraging`, as for the step size of Pyro's
    HMC) on :math:`\log N` with statistic ``target_accept_prob`` minus the acceptance
    probability averaged over chains, ``N`` rounded to an integer in
    :math:`[1, D]`, frozen at the rounded average of the iterates at the end of warmup
    (chains share one ``N``; each new value compiles the transition once more), starting
    from ``num_flips``. ``num_flips="auto"`` adapts starting from
    :math:`\sqrt{D} / 2.5` (``D`` coordinates), which it keeps when there is no warmup.
    The adaptation works with ``replacement=False`` too (the first ``n`` of a run-time
    bound of distinct draws are a sequence of ``n`` draws without replacement).

    **Balancing function.** ``balancing`` chooses :math:`g` with
    :math:`g(t) = t\, g(1/t)` (see :mod:`pyro_gwg.proposals.balancing`): ``"sqrt"``
    (:math:`\sqrt t`, the paper's choice and the default, identical to
    ``temperature=2``), ``"barker"`` (:math:`t / (1 + t)`), ``"min"``
    (:math:`\min(1, t)`) or ``"max"`` (:math:`\max(1, t)`). ``temperature`` is the
    older way to shape the proposal, :math:`g(t) = t^{1/\tau}`, balanced only for
    :math:`\tau = 2`; giving both with different meanings (anything but
    ``balancing="sqrt", temperature=2``) is a :class:`ValueError`. The attributes
    ``balancing`` and ``temperature`` hold the proposal in force: ``("sqrt", 2.0)`` by
    default, ``(None, tau)`` for another temperature, ``(name, None)`` for another
    balancing function.

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed``,
    ``energy_evals``, ``grad_evals`` and ``log_joint`` (see
    :class:`~pyro_gwg.DiscreteKernel`).

    :param callable model: a Pyro model whose latent sites are discrete.
    :param num_flips: coordinates drawn per proposal (default 1), or ``"auto"``.
        Several flips per step cost about as much as one and move further: on lattice
        Ising models and an RBM, the number that gave the most effective samples per
        second had an acceptance rate near 0.6 (``benchmarks/peers.py``), the target
        of the adaptation.
    :type num_flips: int or str
    :param bool adapt_num_flips: adapt ``num_flips`` during warmup (default ``False``;
        implied by ``num_flips="auto"``).
    :param float temperature: proposal temperature :math:`\tau`; 2 (the default) is the
        locally balanced choice of the paper, ``balancing="sqrt"``.
    :param str balancing: balancing function: ``"sqrt"`` (default), ``"barker"``,
        ``"min"`` or ``"max"``.
    :param bool replacement: with ``num_flips > 1``, draw the coordinates with
        replacement (default ``True``, Eq. 27: a coordinate drawn twice moves once) or
        without (``False``: ``num_flips`` or ``num_flips - 1`` distinct coordinates
        move, with probability 1/2 each).
    :param int radius: largest jump of an ordinal (bounded or unbounded integer)
        coordinate in one move (default 1: :math:`\pm 1`); needs a model with such a
        coordinate.
    :param float uniform_weight: weight :math:`w` in :math:`[0, 1)` of the uniform
        component of the proposal (default 0.05; 0 is the paper's proposal).
    :param float target_accept_prob: acceptance probability that the adaptation of
        ``num_flips`` aims at (default 0.574, as for the step size of the NCG kernels).
    :param jit_compile: compilation of the whole transition: ``"auto"`` (default),
        ``True``, ``"inductor"``, ``"make_fx"`` or ``False``; see
        :class:`~pyro_gwg.DiscreteKernel`.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param callable init_strategy: Pyro per-site initialisation strategy (default
        :func:`~pyro.infer.autoguide.initialization.init_to_sample`).

    Example::

        >>> import pyro, torch
        >>> import pyro.distributions as dist
        >>> from pyro.infer import MCMC
        >>> def model(y):
        ...     with pyro.plate("sites", 3):
        ...         x = pyro.sample("x", dist.Bernoulli(0.5))
        ...     pyro.sample("y", dist.Normal(x.sum(-1, keepdim=True), 1.0), obs=y)
        >>> pyro.set_rng_seed(0)
        >>> mcmc = MCMC(GWG(model), num_samples=200, warmup_steps=50, disable_progbar=True)
        >>> mcmc.run(torch.tensor(2.0))
        >>> mcmc.get_samples()["x"].shape
        torch.Size([200, 3])
    """

    def __init__(
        self,
        model=None,
        *,
        num_flips: Union[int, str] = 1,
        adapt_num_flips: bool = False,
        temperature: Optional[float] = None,
        balancing: Optional[str] = None,
        replacement: bool = True,
        radius: int = 1,
        uniform_weight: float = 0.05,
        target_accept_prob: float = 0.574,
        jit_compile: Union[bool, str] = "auto",
        max_plate_nesting: Optional[int] = None,
        init_strategy=init_to_sample,
    ) -> None:
        if num_flips != "auto" and not is_integer(num_flips, 1):
            raise ValueError(
                "num_flips must be a positive integer or 'auto', got {!r}".format(num_flips)
            )
        self.num_flips = num_flips if num_flips == "auto" else int(num_flips)
        self.balancing, self.temperature = check_balancing("GWG", balancing, temperature)
        self.replacement = check_bool("replacement", replacement)
        self.radius = check_integer("radius", radius, 1, "largest jump of an ordinal")
        self.uniform_weight = check_number("uniform_weight", uniform_weight, 0, 1, high_open=True)
        self.target_accept_prob = check_number(
            "target_accept_prob", target_accept_prob, 0, 1, low_open=True, high_open=True
        )
        self.adapt_num_flips = num_flips == "auto" or check_bool("adapt_num_flips", adapt_num_flips)
        self._adaptation: Optional[NumFlipsAdaptation] = None
        super().__init__(
            model,
            jit_compile=jit_compile,
            max_plate_nesting=max_plate_nesting,
            init_strategy=init_strategy,
        )

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
        layout = density.layout
        num_coords = layout.num_coords
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

    def _stuck_advice(self) -> str:
        return ", or {} with a larger uniform_weight, e.g. 0.9".format(type(self).__name__)
