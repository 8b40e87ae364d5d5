"""The Gibbs-With-Gradients kernel."""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Tuple, Union

import torch
from pyro.infer.autoguide.initialization import init_to_sample
from pyro.ops.dual_averaging import DualAveraging

from pyro_gwg._validation import check_number, is_integer
from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.proposals.gwg import GWGInfo, GWGState, gwg_init, gwg_step

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
    moves of all sites jointly, accepted with probability

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
    :mod:`pyro_gwg.proposals.gwg`).
    Each step costs one forward and one backward pass of the model, at the proposed
    state. The proposal is a valid MH proposal whatever the gradient, so the chain
    targets the exact posterior even where the gradient is uninformative.

    With ``num_flips="auto"``, ``N`` adapts during warmup: dual averaging
    (:class:`~pyro.ops.dual_averaging.DualAveraging`, as for the step size of Pyro's
    HMC) on :math:`\log N` with statistic ``target_accept_prob`` minus the acceptance
    probability averaged over chains, ``N`` rounded to an integer in
    :math:`[1, D]`, frozen at the rounded average of the iterates at the end of warmup
    (chains share one ``N``; each new value compiles the transition once more). It
    starts from :math:`\sqrt{D} / 2.5` (``D`` coordinates), which it keeps when there
    is no warmup.

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed``,
    ``energy_evals``, ``grad_evals`` and ``log_joint`` (see
    :class:`~pyro_gwg.DiscreteKernel`).

    :param callable model: a Pyro model whose latent sites are discrete.
    :param num_flips: coordinates drawn per proposal (default 1), or ``"auto"``.
        Several flips per step cost about as much as one and move further: on lattice
        Ising models and an RBM, the number that gave the most effective samples per
        second had an acceptance rate near 0.6 (``benchmarks/peers.py``), the target
        of ``"auto"``.
    :type num_flips: int or str
    :param float temperature: proposal temperature :math:`\tau`; 2 is the locally
        balanced choice of the paper.
    :param float uniform_weight: weight :math:`w` in :math:`[0, 1)` of the uniform
        component of the proposal (default 0.05; 0 is the paper's proposal).
    :param float target_accept_prob: acceptance probability that ``num_flips="auto"``
        aims at (default 0.574, as for the step size of the NCG kernels).
    :param jit_compile: compilation of the whole transition: ``"auto"`` (default),
        ``True``, ``"inductor"`` or ``False``; see :class:`~pyro_gwg.DiscreteKernel`.
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
        temperature: float = 2.0,
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
        self.temperature = check_number(
            "temperature", temperature, 0, math.inf, low_open=True, high_open=True
        )
        self.uniform_weight = check_number("uniform_weight", uniform_weight, 0, 1, high_open=True)
        self.target_accept_prob = check_number(
            "target_accept_prob", target_accept_prob, 0, 1, low_open=True, high_open=True
        )
        #: with ``num_flips="auto"``: the value frozen at the end of the last warmup
        self.adapted_num_flips: Optional[int] = None
        super().__init__(
            model,
            jit_compile=jit_compile,
            max_plate_nesting=max_plate_nesting,
            init_strategy=init_strategy,
        )

    def _reset(self) -> None:
        super()._reset()
        self._flips: Optional[int] = None if self.num_flips == "auto" else self.num_flips
        self._dual: Optional[DualAveraging] = None

    @property
    def current_num_flips(self) -> int:
        """The number of coordinates drawn per proposal in force (with
        ``num_flips="auto"``: the adapted one; needs :meth:`setup`)."""
        if self._flips is None:
            self._flips = max(1, round(math.sqrt(self.energy.layout.num_coords) / 2.5))
        return self._flips

    @property
    def adapts(self) -> bool:
        return self.num_flips == "auto"

    def _adapt(self, info: GWGInfo) -> None:
        if self.num_flips != "auto":
            return
        if self._dual is None:
            self._dual = DualAveraging(prox_center=math.log(self.current_num_flips))
        self._dual.step(self.target_accept_prob - float(info.accept_prob.mean()))
        log_flips, log_flips_avg = self._dual.get_state()
        final = self._t + 1 >= self._warmup_steps
        num_coords = self.energy.layout.num_coords
        log_flips = min(max(log_flips_avg if final else log_flips, 0.0), math.log(num_coords))
        self._flips = max(1, min(round(math.exp(log_flips)), num_coords))
        if final:
            self.adapted_num_flips = self._flips

    def _check_model(self) -> None:
        num_coords = self.energy.layout.num_coords
        # (one coordinate drawn N times moves once, like N = 1: nothing to refuse)
        if self.num_flips != "auto" and self.num_flips > num_coords > 1:
            raise ValueError(
                "GWG(num_flips={}) draws more coordinates per step than the model has ({}): "
                "nearly every coordinate would move at every step and the chain could "
                "not settle. Use num_flips <= {}, or num_flips='auto' to adapt it during "
                "warmup.".format(self.num_flips, num_coords, num_coords)
            )

    def _compile_key(self) -> tuple:
        return (self.current_num_flips,)

    def _init_state(self, codes: torch.Tensor, value_and_grad) -> GWGState:
        return gwg_init(
            codes, value_and_grad, self.energy.layout, self.temperature, self.uniform_weight
        )

    def _step(self, state: NamedTuple, value_and_grad) -> Tuple[GWGState, GWGInfo]:
        return gwg_step(
            state,
            value_and_grad,
            self.energy.layout,
            self.temperature,
            self.current_num_flips,
            self.uniform_weight,
        )

    def _stuck_advice(self) -> str:
        return ", or GWG with a larger uniform_weight, e.g. 0.9"
