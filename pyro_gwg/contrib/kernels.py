"""Model-specific kernels: samplers that use the closed form of one model rather than the
density they are built on, as ground truths and baselines for the generic kernels."""

from __future__ import annotations

import inspect
from typing import NamedTuple, Tuple, Union

import torch
import torch.nn.functional as F
from pyro.infer.autoguide.initialization import init_to_sample

from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.models.rbm import RBMParams, block_gibbs_step, rbm, rbm_log_density
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.blocks import StepInfo, cost

__all__ = ["RBMBlockGibbs", "RBMBlockGibbsState"]


class RBMBlockGibbsState(NamedTuple):
    """State of block-Gibbs chains: ``codes [C, V]`` and ``log_joint [C]``."""

    codes: torch.Tensor
    log_joint: torch.Tensor


class RBMBlockGibbs(DiscreteKernel):
    r"""Block-Gibbs sampling of :func:`~pyro_gwg.models.rbm.rbm` as a Pyro MCMC kernel:
    each step draws all hidden units given the visible ones, then all visible units given
    the hidden ones (exact conditionals; the hidden units are not kept).

    The RBM's parameters are read from the model arguments, as in
    ``MCMC(RBMBlockGibbs(), ...).run(*params)``. The recorded ``log_joint`` is the
    model's log joint in closed form (one evaluation's worth of work:
    ``energy_evals`` is 1, ``grad_evals`` 0); ``accepted`` says whether the state
    changed. It ignores the density it is built on (``targets_bound_density`` is
    ``False``), so the estimators refuse it as a transition of their annealed densities.

    :param callable model: :func:`~pyro_gwg.models.rbm.rbm` (the default) or a model
        with its signature and site ``"v"``.
    :param jit_compile: compilation of the whole transition: ``"auto"`` (default),
        ``True``, ``"inductor"``, ``"make_fx"`` or ``False``; see
        :class:`~pyro_gwg.DiscreteKernel`.
    :param callable init_strategy: Pyro per-site initialisation strategy.
    """

    targets_bound_density = False

    def __init__(
        self, model=rbm, *, jit_compile: Union[bool, str] = "auto", init_strategy=init_to_sample
    ):
        super().__init__(model, jit_compile=jit_compile, init_strategy=init_strategy)

    needs_gradient = False

    def build(self, density) -> Algorithm:
        """Block Gibbs on the RBM whose parameters are the arguments the density's model
        was run with (``density`` is the model's :class:`~pyro_gwg.ModelDensity`).

        :rtype: Algorithm
        """
        density = getattr(density, "source", density)  # the energy behind a compiler's view
        if [s.name for s in density.sites] != ["v"]:
            raise ValueError("RBMBlockGibbs samples the model rbm(weights, visible_bias, ...)")
        bound = inspect.signature(rbm).bind(*density.model_args, **density.model_kwargs)
        params = RBMParams(**bound.arguments)

        def log_joint(codes: torch.Tensor) -> torch.Tensor:
            # in double precision, as the model bridge's log joint
            log_density = rbm_log_density(codes, params) - F.softplus(params.visible_bias).sum()
            return log_density.double()

        def init(codes: torch.Tensor) -> RBMBlockGibbsState:
            return RBMBlockGibbsState(codes, log_joint(codes))

        def step(state: RBMBlockGibbsState) -> Tuple[RBMBlockGibbsState, StepInfo]:
            codes = state.codes
            new = block_gibbs_step(codes.to(params.weights.dtype), params).long()
            num_changed = (new != codes).sum(-1)
            info = StepInfo(
                num_changed > 0,
                torch.ones_like(state.log_joint),
                num_changed,
                cost(codes, 1),
                cost(codes, 0),
            )
            return RBMBlockGibbsState(new, log_joint(new)), info

        return Algorithm(init, step)
