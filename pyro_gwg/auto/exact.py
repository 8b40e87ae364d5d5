r"""``ExactDraws``: independent draws from the exact posterior of a model whose latent
sites can all be summed out.

When every latent site of a model is discrete and can be summed out by parallel
enumeration within the budget of :mod:`pyro_gwg.auto.plan`, no Markov chain is
needed: forward-filtering backward-sampling (:func:`pyro.infer.infer_discrete` at
temperature 1) draws a joint state :math:`x \sim p(x \mid y)` exactly, at the cost of
one enumerated run of the model. As an MCMC kernel this is the independence sampler
whose proposal is the target, :math:`q(x' \mid x) = p(x' \mid y)`: its
Metropolis-Hastings ratio is 1, every draw is accepted, and successive draws are
independent. A model with few joint states (at most :attr:`ExactDraws.table_states`) is
drawn from a table of the posterior probability of every state instead, computed once
when the chains start (:meth:`ExactPosterior.of <pyro_gwg.enumeration.ExactPosterior.of>`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Tuple

import torch

from pyro_gwg.enumeration import ExactPosterior, draw_enumerated_batch, with_enumeration
from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.blocks import StepInfo, step_info

__all__ = ["ExactDraws"]


class _State(NamedTuple):
    """State of independent draws: ``codes [C, D]`` and ``log_joint [C]``."""

    codes: torch.Tensor
    log_joint: torch.Tensor


class ExactDraws(DiscreteKernel):
    r"""Independent exact draws of every latent site (see the module docstring); a
    pyro-gwg kernel, for :class:`pyro.infer.MCMC` and :class:`pyro_gwg.MCMC`.

    :class:`~pyro_gwg.Auto` runs it when its plan sums out every latent site; use it
    directly on a model whose latent sites are all discrete and enumerable (Pyro must
    be able to enumerate the model: conditionally independent plates, ``pyro.markov``
    for chains of sites). It runs eagerly (``jit_compile`` is ``False``): a step is a
    Pyro run of the model per chain.

    Per-draw statistics: ``accepted``, ``accept_prob`` (1), ``num_changed``,
    ``energy_evals``, ``grad_evals`` (0) and ``log_joint`` (see
    :class:`~pyro_gwg.DiscreteKernel`).

    :param callable model: a Pyro model.
    :param options: ``max_plate_nesting`` and ``init_strategy`` (see
        :class:`~pyro_gwg.DiscreteKernel`).

    Example::

        >>> import pyro, torch
        >>> import pyro.distributions as dist
        >>> def model():
        ...     with pyro.plate("items", 3):
        ...         z = pyro.sample("z", dist.Bernoulli(0.5))
        ...         pyro.sample("y", dist.Normal(z, 1.0), obs=torch.tensor([0.0, 1.0, 2.0]))
        >>> mcmc = pyro.infer.MCMC(ExactDraws(model), num_samples=5, warmup_steps=0,
        ...                        disable_progbar=True)
        >>> mcmc.run()
        >>> mcmc.get_samples()["z"].shape
        torch.Size([5, 3])
    """

    needs_gradient = False
    #: (so that the runner chooses how the model evaluates several states: the draws
    #: of all chains run in one batched run where the model broadcasts)
    evaluates_states = True

    #: models with at most this many joint states are drawn from a table of every state
    #: (computed once, at set-up) instead of by forward-filtering backward-sampling
    table_states = 2**16

    def __init__(self, model=None, **options) -> None:
        if options.get("jit_compile", False):
            raise ValueError(
                "ExactDraws runs eagerly (each step is a Pyro run of the model); "
                "jit_compile must be False, got {!r}.".format(options["jit_compile"])
            )
        options["jit_compile"] = False
        super().__init__(model, **options)

    def build(self, density) -> Algorithm:
        """Independent draws on ``density`` (a :class:`~pyro_gwg.ModelDensity`: the
        draws need its model and arguments).

        :rtype: Algorithm
        """

        def init(codes: torch.Tensor) -> _State:
            return _State(codes, density.log_joint(codes))

        def step(state: _State, draw: Callable[[int], _State]) -> Tuple[_State, StepInfo]:
            new = draw(state.codes.shape[0])
            moved = new.codes != state.codes
            always = torch.ones_like(state.log_joint)
            return new, step_info(moved.any(-1), always, moved.sum(-1), 1)

        num_states = float(torch.prod(density.layout.num_values().double()))
        if num_states <= self.table_states:  # a table of every state: draws by index
            table = ExactPosterior.of(density)
            device = density.layout.lower.device

            def from_table(num_chains: int) -> _State:
                index = torch.multinomial(table.probs, num_chains, replacement=True)
                log_joint = table.log_probs[index] + table.log_normalizer
                return _State(table.states(index).to(device), log_joint.to(device))

            return Algorithm(init, lambda state: step(state, from_table))

        names = [site.name for site in density.sites]
        enumerated = with_enumeration(density.model, names)
        shapes = {site.name: (site.batch_shape, site.event_shape) for site in density.sites}
        args, kwargs = density.model_args, density.model_kwargs

        def draw(num_chains: int) -> _State:
            values = draw_enumerated_batch(
                enumerated,
                {},
                num_chains,
                shapes,
                args,
                kwargs,
                density.max_plate_nesting,
                batched=num_chains > 1 and density.batching == "plate",
            )
            codes = density.codes_from_values(values, "Exact draw")
            return _State(codes, density.log_joint(codes))

        return Algorithm(init, lambda state: step(state, draw))
