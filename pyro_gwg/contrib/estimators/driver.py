r"""Plumbing shared by the estimators: running any pyro-gwg kernel on a density that
the estimator chooses (a tempered path, or one stage of a growing sequence), with
evaluation counts.

Every kernel samples a :class:`~pyro_gwg.density.Density` (its ``layout``,
``log_joint`` and ``value_and_grad``) through a :class:`~pyro_gwg.driver.ChainDriver`.
:class:`TemperedDensity` is the density of an estimator:

.. math:: f_\beta(x) = \beta f(x) + (1 - \beta) \log p_0(x)

(Grathwohl et al. 2021 [Grathwohl2021]_, Eq. 35) for a base distribution :math:`p_0` (or :math:`f`
itself without a base) and counts the states it evaluates; :func:`bind_kernel`
gives a kernel's chain driver on it and :func:`run_kernel` applies transitions to a
batch of particles. The kernels' own warmup adaptation and compilation are not used.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple, Optional, Tuple

import torch

from pyro_gwg.bridge.density import ModelDensity
from pyro_gwg.density import BaseDensity
from pyro_gwg.driver import ChainDriver
from pyro_gwg.kernels.base import DiscreteKernel

__all__ = ["TemperedDensity", "bind_kernel", "check_kernel", "run_kernel"]


class Evaluation(NamedTuple):
    """Untempered values at one batch of states: ``target [C]`` (:math:`f`) and ``base
    [C]`` (:math:`\\log p_0`, zero without a base)."""

    target: torch.Tensor
    base: torch.Tensor


class TemperedDensity(BaseDensity):
    r"""The density a kernel sees inside an estimator: :math:`\beta f + (1 - \beta) \log p_0`.

    Attributes other than ``log_joint``, ``value_and_grad`` and the eager defaults of
    :class:`~pyro_gwg.density.BaseDensity` (``layout``, ``sites``, ``check_vectorized``,
    ``raise_invalid``, ...) are those of the wrapped energy.

    :param ModelDensity energy: the model's energy :math:`f`.
    :param base: a base distribution with ``log_prob(codes)`` and ``grad(codes)`` (see
        :class:`~pyro_gwg.contrib.estimators.ais.FactorisedBase`), or ``None``.
    :param float beta: inverse temperature :math:`\beta` (ignored without a base).

    :ivar int evaluations: states at which the model's log joint was evaluated.
    :ivar int gradient_evaluations: of those, states with a gradient (backward pass).
    :ivar int coordinate_evaluations: evaluated states times the model's number of
        coordinates (a cost that grows with the dimension, as the model's does).
    """

    def __init__(self, energy: ModelDensity, base=None, beta: float = 1.0) -> None:
        self.energy = energy
        self.base = base
        self.beta = float(beta)
        self.evaluations = 0
        self.gradient_evaluations = 0
        self.coordinate_evaluations = 0
        self._primed: Optional[Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]] = None

    def __getattr__(self, name: str):
        if name == "energy":  # not yet set (e.g. while unpickling)
            raise AttributeError(name)
        return getattr(self.energy, name)

    def _count(self, codes: torch.Tensor, with_grad: bool) -> None:
        self.evaluations += codes.shape[0]
        self.coordinate_evaluations += codes.shape[0] * codes.shape[1]
        if with_grad:
            self.gradient_evaluations += codes.shape[0]

    def _combine(self, codes: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        if self.base is None:
            return value
        return self.beta * value + (1 - self.beta) * self.base.log_prob(codes).to(value.dtype)

    def evaluate(self, codes: torch.Tensor, with_grad: bool) -> Evaluation:
        """Evaluate :math:`f` (and its gradient when ``with_grad``) and
        :math:`\\log p_0` at ``codes``, and keep the result for the kernel's next call
        with this very tensor (so that re-initialising a kernel costs nothing more).

        :param torch.Tensor codes: long ``[C, D]``.
        :param bool with_grad: also compute the gradient (for gradient-based kernels).
        :rtype: Evaluation
        """
        self._count(codes, with_grad)
        if with_grad:
            value, grad = self.energy.value_and_grad(codes)
        else:
            value, grad = self.energy.log_joint(codes), None
        self._primed = (codes, value, grad)
        base = self.base.log_prob(codes).to(value.dtype) if self.base is not None else None
        return Evaluation(value, torch.zeros_like(value) if base is None else base)

    def _take_primed(self, codes: torch.Tensor, need_grad: bool):
        primed, self._primed = self._primed, None
        if primed is not None and primed[0] is codes and (primed[2] is not None or not need_grad):
            return primed[1], primed[2]
        return None

    def log_joint(self, codes: torch.Tensor, batched: bool = True) -> torch.Tensor:
        """The (tempered) log density of ``codes [C, D]``, without gradient.

        :rtype: torch.Tensor
        """
        primed = self._take_primed(codes, need_grad=False)
        if primed is None:
            self._count(codes, with_grad=False)
            value = self.energy.log_joint(codes, batched)
        else:
            value = primed[0]
        return self._combine(codes, value)

    def value_and_grad(self, codes: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The (tempered) log density of ``codes [C, D]`` and its packed gradient.

        :rtype: tuple
        """
        primed = self._take_primed(codes, need_grad=True)
        if primed is None:
            self._count(codes, with_grad=True)
            value, grad = self.energy.value_and_grad(codes)
        else:
            value, grad = primed
        if self.base is None:
            return value, grad
        base_grad = self.base.grad(codes).to(grad.dtype)
        return self._combine(codes, value), self.beta * grad + (1 - self.beta) * base_grad


def check_kernel(kernel, estimator: str, needs_invariance: bool = False) -> None:
    """Raise a clear error for kernels an estimator cannot drive, and warn about a
    biased kernel (``exact = False``, e.g. DULA) where the estimator's correctness
    rests on transitions that leave each density invariant.

    :param kernel: the transition kernel.
    :param str estimator: the estimator's name, for the messages.
    :param bool needs_invariance: whether the estimator needs invariant transitions
        (AIS, ARM).
    """
    if not isinstance(kernel, DiscreteKernel):
        raise TypeError(
            "{} needs a pyro-gwg discrete kernel (GWG, Gibbs, NCG, ...) as its "
            "transition, got {}".format(estimator, type(kernel).__name__)
        )
    if needs_invariance and not kernel.exact:
        warnings.warn(
            "{} does not leave the density it samples invariant (it has no MH "
            "correction), which {} assumes of its transitions: the estimate carries the "
            "kernel's bias. Use an exact kernel (its MH-corrected form, e.g. DMALA for "
            "DULA) for an unbiased estimate.".format(type(kernel).__name__, estimator),
            UserWarning,
            stacklevel=3,
        )


def uses_gradient(kernel: DiscreteKernel) -> bool:
    """Whether ``kernel`` evaluates gradients (its declared trait)."""
    return kernel.needs_gradient


def bind_kernel(kernel: DiscreteKernel, energy: TemperedDensity) -> ChainDriver:
    """A chain driver of ``kernel`` on ``energy``, without warmup adaptation and
    uncompiled (the estimators change the density between runs: a tempering
    ``beta``, PCD's parameters).

    :param DiscreteKernel kernel: the kernel.
    :param TemperedDensity energy: the density it is to target.
    :rtype: ChainDriver
    """
    return kernel.driver_for(energy)


def run_kernel(
    driver: ChainDriver, codes: torch.Tensor, num_steps: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Apply ``num_steps`` transitions of ``driver`` (from :func:`bind_kernel`) to every
    row of ``codes``: each row is an independent chain.

    :param ChainDriver driver: the kernel's driver on the estimator's density.
    :param torch.Tensor codes: long ``[C, D]`` starting states.
    :param int num_steps: transitions per chain (0: none).
    :returns: ``(codes [C, D], log_joint [C])``: the final states and the density's log
        density there (evaluated afresh when ``num_steps`` is 0).
    """
    if num_steps <= 0:
        return codes, driver.density.log_joint(codes)
    driver.init(codes)
    driver.run(num_steps, every=num_steps)
    return driver.state.codes, driver.state.log_joint
