r"""The discrete Langevin Monte Carlo kernel (Sun, Dai & Schuurmans 2023) [Sun2023]_."""

from __future__ import annotations

import math
from typing import Optional, Union

import torch
from pyro.infer.autoguide.initialization import init_to_sample

from pyro_gwg._validation import check_bool, check_number
from pyro_gwg.adaptation import StepSizeAdaptation
from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.kernels.support import check_supported_coordinates
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.dlmc import build_dlmc

__all__ = ["DLMC"]


class DLMC(DiscreteKernel):
    r"""Discrete Langevin Monte Carlo (Sun, Dai & Schuurmans 2023) [Sun2023]_ with a
    Metropolis-Hastings correction, for the binary, categorical and bounded ordinal
    latent sites of any Pyro model, as a :class:`~pyro.infer.mcmc.mcmc_kernel.MCMCKernel`.

    Every coordinate runs, independently and for a time :math:`h` (the step size), the
    continuous-time Markov chain whose rate from value :math:`u` to :math:`v` is the
    square-root locally balanced weight of the first-order estimate at the current
    state, :math:`R_i(u, v) = \exp\big((\phi_{iv} - \phi_{iu}) / 2\big)`
    (:math:`\phi_{iv}` the gradient's estimate of :math:`f` with coordinate :math:`i` at
    value :math:`v`). The chain is simulated exactly: a bit flips with probability
    :math:`\sigma(d)(1 - e^{-2h\cosh(d/2)})` (:math:`d` the estimated gain of the flip);
    a categorical coordinate moves by the matrix exponential :math:`e^{hR_i}`. The
    proposal is accepted with probability
    :math:`\min\big(1, e^{f(y) - f(x)} q(x \mid y) / q(y \mid x)\big)`, so the chain is
    exact for every :math:`h` (see :mod:`pyro_gwg.proposals.dlmc`). One forward and one
    backward pass of the model per step.

    With ``adapt_step_size=True`` (the default) :math:`h` is adapted during warmup,
    separately for every chain, by dual averaging on :math:`\log h` toward
    ``target_accept_prob`` (:class:`~pyro_gwg.adaptation.StepSizeAdaptation`, as for
    :class:`~pyro_gwg.kernels.ncg.NCG`), and frozen afterwards.

    Ordinal sites with an infinite support (``Poisson``, ``Geometric``) are refused.

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed``, ``step_size``
    (in force at the step), ``energy_evals``, ``grad_evals`` and ``log_joint``.

    :param callable model: a Pyro model whose latent sites are discrete and bounded.
    :param float step_size: simulation time :math:`h`: where the adaptation starts
        (default 0.1), or its fixed value with ``adapt_step_size=False``.
    :param bool adapt_step_size: adapt :math:`h` during warmup (default ``True``).
    :param float target_accept_prob: target of the adaptation (default 0.574).
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
        >>> mcmc = MCMC(DLMC(model), num_samples=100, warmup_steps=50, disable_progbar=True)
        >>> mcmc.run(torch.tensor(2.0))
        >>> mcmc.get_samples()["x"].shape
        torch.Size([100, 3])
    """

    #: bound on :math:`|\log h|` during adaptation
    max_log_step_size = 20.0

    def __init__(
        self,
        model=None,
        *,
        step_size: float = 0.1,
        adapt_step_size: bool = True,
        target_accept_prob: float = 0.574,
        jit_compile: Union[bool, str] = "auto",
        max_plate_nesting: Optional[int] = None,
        init_strategy=init_to_sample,
    ) -> None:
        self.step_size = check_number(
            "step_size", step_size, 0, math.inf, low_open=True, high_open=True
        )
        self.adapt_step_size = check_bool("adapt_step_size", adapt_step_size)
        self.target_accept_prob = check_number(
            "target_accept_prob", target_accept_prob, 0, 1, low_open=True, high_open=True
        )
        super().__init__(
            model,
            jit_compile=jit_compile,
            max_plate_nesting=max_plate_nesting,
            init_strategy=init_strategy,
        )

    def build(self, density) -> Algorithm:
        """DLMC on ``density``: :func:`~pyro_gwg.proposals.dlmc.build_dlmc` with this
        kernel's step size.

        :rtype: Algorithm
        """
        return build_dlmc(density, self.step_size)

    def adaptation(self, density, num_warmup: int) -> Optional[StepSizeAdaptation]:
        if not self.adapt_step_size:
            return None
        return StepSizeAdaptation(self.target_accept_prob, num_warmup, self.max_log_step_size)

    @property
    def step_sizes(self) -> Optional[torch.Tensor]:
        """``[C]`` step sizes in force (``None`` before :meth:`setup`)."""
        return self.state.step_size if self.state is not None else None

    def _check_density(self, density) -> None:
        check_supported_coordinates(type(self).__name__, density.layout, bounded_ordinals=True)
