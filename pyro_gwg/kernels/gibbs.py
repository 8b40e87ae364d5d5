"""The single-site Gibbs kernel."""

from __future__ import annotations

from typing import Optional, Union

from pyro.infer.autoguide.initialization import init_to_sample

from pyro_gwg._validation import check_integer
from pyro_gwg.kernels.evaluating import EvaluatingKernel
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.gibbs import build_gibbs

__all__ = ["Gibbs"]

SCANS = ("random", "systematic")


class Gibbs(EvaluatingKernel):
    r"""Single-site Gibbs sampling of the latent discrete sites of a Pyro model, as a
    :class:`~pyro.infer.mcmc.mcmc_kernel.MCMCKernel`.

    Each step updates one coordinate ``i`` (drawn uniformly, ``scan="random"``, or the
    next of a fixed sweep, ``scan="systematic"``) from its exact conditional
    :math:`p(x_i = v \mid x_{-i}) \propto e^{f(x_{i \leftarrow v})}`, with :math:`f`
    the model's log joint evaluated at every value ``v`` in one batched run of the
    model. Bits, categories and bounded ordinals range over their whole support.
    **Unbounded ordinal sites** (``Poisson``, ``Geometric``) range over a finite
    window: the cell of ``window`` consecutive values that holds the current value, in
    a partition of the integers whose offset is redrawn uniformly at every step. Each
    such update is an exact Gibbs update restricted to a fixed set, and the random
    offset makes the chain irreducible, so the sampler stays exact (see
    :mod:`pyro_gwg.proposals.blocks`).

    A step costs ``width - 1`` log-joint evaluations per chain, ``width`` the largest
    number of values a coordinate ranges over (2 for bits, so one evaluation; a model
    mixing sites of different sizes pads the smaller ones). There is no rejection: the recorded
    ``accepted`` says whether the state changed and ``accept_prob`` is the
    probability that it changes.

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed``,
    ``energy_evals``, ``grad_evals`` and ``log_joint`` (see
    :class:`~pyro_gwg.DiscreteKernel`).

    :param callable model: a Pyro model whose latent sites are discrete.
    :param str scan: ``"random"`` or ``"systematic"``.
    :param int window: cell width for unbounded ordinal sites (default 8).
    :param int chunk_size: most states per batched run of the model.
    :param jit_compile: compilation of the whole transition: ``"auto"`` (default),
        ``True``, ``"inductor"``, ``"make_fx"`` or ``False``; see
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
        >>> mcmc = MCMC(Gibbs(model), num_samples=100, warmup_steps=20, disable_progbar=True)
        >>> mcmc.run(torch.tensor(2.0))
        >>> mcmc.get_samples()["x"].shape
        torch.Size([100, 3])
    """

    def __init__(
        self,
        model=None,
        *,
        scan: str = "random",
        window: int = 8,
        chunk_size: int = 4096,
        jit_compile: Union[bool, str] = "auto",
        max_plate_nesting: Optional[int] = None,
        init_strategy=init_to_sample,
    ) -> None:
        if scan not in SCANS:
            raise ValueError("scan must be one of {}, got {!r}".format(SCANS, scan))
        window = check_integer("window", window, 1)
        super().__init__(
            model,
            chunk_size=chunk_size,
            jit_compile=jit_compile,
            max_plate_nesting=max_plate_nesting,
            init_strategy=init_strategy,
        )
        self.scan = scan
        self.window = int(window)

    def build(self, density) -> Algorithm:
        """Gibbs on ``density``: :func:`~pyro_gwg.proposals.gibbs.build_gibbs` with this
        kernel's settings.

        :rtype: Algorithm
        """
        return build_gibbs(
            density, self.window, self.scan == "systematic", chunk_size=self.chunk_size
        )
