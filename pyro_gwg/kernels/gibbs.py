"""The single-site Gibbs kernel."""

from __future__ import annotations

from pyro_gwg._validation import check_integer
from pyro_gwg.kernels.evaluating import EvaluatingKernel
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.gibbs import build_gibbs

__all__ = ["Gibbs"]

SCANS = ("random", "systematic")


class Gibbs(EvaluatingKernel):
    r"""Single-site Gibbs sampling.

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
    number of values a coordinate ranges over (2 for bits). There is no rejection: the
    recorded ``accepted`` says whether the state changed and ``accept_prob`` is the
    probability that it changes.

    Per-draw statistics: ``accepted``, ``accept_prob``, ``num_changed``,
    ``energy_evals``, ``grad_evals`` and ``log_joint`` (see
    :class:`~pyro_gwg.DiscreteKernel`).

    :param str scan: ``"random"`` (default) or ``"systematic"``.
    :param int window: cell width for unbounded ordinal sites (default 8).
    :param options: ``chunk_size`` (see
        :class:`~pyro_gwg.kernels.evaluating.EvaluatingKernel`) and the options of every
        kernel (see :class:`~pyro_gwg.DiscreteKernel`).

    Example::

        >>> Gibbs(scan="systematic", chunk_size=256).scan
        'systematic'
    """

    def __init__(
        self,
        model=None,
        *,
        scan: str = "random",
        window: int = 8,
        **options,
    ) -> None:
        if scan not in SCANS:
            raise ValueError("scan must be one of {}, got {!r}".format(SCANS, scan))
        window = check_integer("window", window, 1)
        super().__init__(model, **options)
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
