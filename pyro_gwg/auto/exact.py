r"""``ExactDraws``: independent draws from the exact posterior of a model whose latent
sites can all be summed out.

When every latent site of a model is discrete and can be summed out by parallel
enumeration within the budget of :mod:`pyro_gwg.auto.plan`, no Markov chain is
needed: forward-filtering backward-sampling (:func:`pyro.infer.infer_discrete` at
temperature 1) draws a joint state :math:`x \sim p(x \mid y)` exactly, at the cost of
one enumerated run of the model. As an MCMC kernel this is the independence sampler
whose proposal is the target, :math:`q(x' \mid x) = p(x' \mid y)`: its
Metropolis-Hastings ratio is 1, every draw is accepted, and successive draws are
independent.
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import torch
from pyro.infer import infer_discrete

from pyro_gwg import _trace
from pyro_gwg.enumeration import with_enumeration
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

    Per-draw statistics as for every kernel (:class:`~pyro_gwg.DiscreteKernel`);
    ``accept_prob`` is 1.

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
        names = [site.name for site in density.sites]
        enumerated = with_enumeration(density.model, names)
        first_dim = -1 - density.max_plate_nesting
        draw_model = infer_discrete(enumerated, first_available_dim=first_dim, temperature=1)
        args, kwargs = density.model_args, density.model_kwargs

        def draw(num_chains: int) -> torch.Tensor:
            values = []
            for _ in range(num_chains):
                trace = _trace.trace_model(draw_model, args, kwargs)
                values.append({name: trace.nodes[name]["value"] for name in names})
            stacked = {name: torch.stack([v[name] for v in values]) for name in names}
            return density.codes_from_values(stacked, "Exact draw")

        def init(codes: torch.Tensor) -> _State:
            return _State(codes, density.log_joint(codes))

        def step(state) -> Tuple[_State, StepInfo]:
            codes = draw(state.codes.shape[0]).to(state.codes.device)
            changed = (codes != state.codes).any(-1)
            num_changed = (codes != state.codes).sum(-1)
            always = torch.ones_like(state.log_joint)
            return _State(codes, density.log_joint(codes)), step_info(
                changed, always, num_changed, 1
            )

        return Algorithm(init, step)
