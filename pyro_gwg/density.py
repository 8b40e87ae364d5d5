r"""The density protocol every kernel samples, and a density from a hand-written potential.

A kernel never reads a Pyro model: it reads a :class:`Density`, an object with

* ``layout``: the :class:`~pyro_gwg.proposals.layout.CoordinateLayout` of the ``D``
  discrete coordinates (bits, bounded or unbounded ordinals, categories);
* ``log_joint(codes)``: ``codes`` long ``[N, D]`` :math:`\to` the log density ``[N]``
  (float64), up to a constant;
* ``value_and_grad(codes)``: the log density and its gradient with respect to the
  relaxed values, packed ``[N, D, W]`` as the layout module describes.

Four objects implement it: the model bridge :class:`~pyro_gwg.ModelDensity` (a Pyro
model), the tempered density of the estimators
(:class:`~pyro_gwg.contrib.estimators.driver.TemperedDensity`), the learnable model of PCD
training (a :class:`~pyro_gwg.ModelDensity` whose parameters change between runs) and
:class:`PotentialDensity`, for users who have a log density as a function of the values
and no Pyro model (the ``potential_fn`` entry of Pyro's HMC).

The runner's chain driver (:class:`~pyro_gwg.driver.ChainDriver`) also asks a density
whether and how a compiler may trace it: ``compilable``,
``traceable(num_chains, arguments)``, ``arguments()``, ``recording()`` and
``raise_invalid(codes)``. :class:`BaseDensity` gives the first four their defaults, for
a density evaluated eagerly; :class:`~pyro_gwg.ModelDensity` implements them all.
"""

from __future__ import annotations

import contextlib
from typing import (
    Callable,
    ContextManager,
    Iterator,
    List,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    runtime_checkable,
)

import torch

from pyro_gwg.bridge.batching import ATOL, RTOL
from pyro_gwg.bridge.nan import invalid_evaluations
from pyro_gwg.proposals.layout import CandidateGrid, CoordinateLayout

__all__ = [
    "BaseDensity",
    "Density",
    "PotentialDensity",
    "binary_layout",
    "categorical_layout",
]


@runtime_checkable
class Density(Protocol):
    """What the kernels and the chain driver need of the distribution they sample
    (see the module docstring); :class:`BaseDensity` gives ``compilable`` and the
    members from ``traceable`` to ``recording`` their defaults."""

    layout: CoordinateLayout
    #: the compilers that may trace a transition evaluating this density (see
    #: :mod:`pyro_gwg.compile`); empty for a density evaluated eagerly
    compilable: Tuple[str, ...]

    def log_joint(self, codes: torch.Tensor) -> torch.Tensor:
        """``codes [N, D] -> [N]``: the log density, float64."""

    def value_and_grad(self, codes: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``codes [N, D] -> (log density [N], packed gradient [N, D, W])``."""

    def traceable(
        self, num_chains: int, arguments: Optional[Sequence[torch.Tensor]] = None
    ) -> Density:
        """The form of the density that a compiler traces for ``num_chains`` chains:
        the same density without the checks that cannot run inside a compiled
        function, reading ``arguments`` (the traced function's tensors, in the order
        of :meth:`arguments`; ``None``: their values now)."""

    def arguments(self) -> Tuple[torch.Tensor, ...]:
        """The tensors besides the states that a compiled function of the density
        takes as arguments, at their values now."""

    def recording(self) -> ContextManager[List[Tuple[torch.Tensor, torch.Tensor]]]:
        """A context in which evaluations are listed as ``(codes, log_joint)`` pairs
        (for :func:`~pyro_gwg.bridge.nan.invalid_evaluations`) instead of checked."""

    def raise_invalid(self, codes: torch.Tensor) -> None:
        """Raise the error for a state ``codes [D]`` whose log density is NaN or
        ``+inf``."""


class BaseDensity:
    """Defaults of :class:`Density` members, for a density evaluated eagerly: no
    compiler traces it, it reads no tensors besides the states, and it checks each of
    its evaluations itself (a subclass gives ``layout``, ``log_joint``,
    ``value_and_grad`` and ``raise_invalid``)."""

    compilable: Tuple[str, ...] = ()

    def traceable(
        self, num_chains: int, arguments: Optional[Sequence[torch.Tensor]] = None
    ) -> Density:
        """The density itself.

        :param int num_chains: the leading batch size of the traced states.
        :param arguments: the traced tensors of :meth:`arguments` (none).
        :rtype: Density
        """
        return self

    def arguments(self) -> Tuple[torch.Tensor, ...]:
        """No tensors.

        :rtype: tuple
        """
        return ()

    @contextlib.contextmanager
    def recording(self) -> Iterator[List[Tuple[torch.Tensor, torch.Tensor]]]:
        """Nothing listed: the density checks each evaluation as it makes it."""
        yield []


def binary_layout(num_coords: int) -> CoordinateLayout:
    """The layout of ``num_coords`` bits.

    :param int num_coords: number of bits ``D``.
    :rtype: CoordinateLayout
    """
    return CoordinateLayout(
        torch.ones(num_coords, dtype=torch.bool),
        torch.zeros(num_coords),
        torch.ones(num_coords),
        torch.ones(num_coords, dtype=torch.long),
    )


def categorical_layout(num_coords: int, num_categories: int) -> CoordinateLayout:
    """The layout of ``num_coords`` categorical coordinates with ``num_categories``
    values each.

    :param int num_coords: number of coordinates ``D``.
    :param int num_categories: values per coordinate ``K``.
    :rtype: CoordinateLayout
    """
    return CoordinateLayout(
        torch.zeros(num_coords, dtype=torch.bool),
        torch.zeros(num_coords),
        torch.full((num_coords,), float(num_categories - 1)),
        torch.full((num_coords,), num_categories, dtype=torch.long),
    )


class PotentialDensity(BaseDensity):
    r"""A :class:`Density` from a hand-written log density of the relaxed values
    :math:`\phi(x)` (numbers for bits and ordinals, one-hot vectors for categories),
    for users without a Pyro model: the counterpart of the ``potential_fn`` of Pyro's
    HMC (which takes the negative log density; this takes the log density).

    :param callable log_density: ``phi [N, R] -> [N]``, differentiable in ``phi``,
        with ``R`` the number of relaxed values (one per scalar coordinate, ``K`` per
        categorical one, in coordinate order).
    :param CoordinateLayout layout: the coordinates (:func:`binary_layout`,
        :func:`categorical_layout` or a :class:`CoordinateLayout`).

    Example::

        >>> import torch
        >>> from pyro_gwg.density import PotentialDensity, binary_layout
        >>> coupling = torch.tensor([[0.0, 0.5], [0.5, 0.0]])
        >>> density = PotentialDensity(lambda x: (x @ coupling * x).sum(-1), binary_layout(2))
        >>> density.log_joint(torch.tensor([[1, 1], [1, 0]]))
        tensor([1., 0.], dtype=torch.float64)
    """

    def __init__(self, log_density: Callable[[torch.Tensor], torch.Tensor], layout) -> None:
        if not callable(log_density):
            raise TypeError("log_density must be callable, got {!r}".format(log_density))
        if not isinstance(layout, CoordinateLayout):
            raise TypeError(
                "layout must be a CoordinateLayout (see binary_layout and "
                "categorical_layout), got {}".format(type(layout).__name__)
            )
        self.log_density = log_density
        self.layout = layout
        self._grid = CandidateGrid(layout)
        # where each relaxed value's derivative goes in the packed [N, D, W] gradient
        self._slot = self._grid.coord * layout.grad_width + self._grid.category
        self._batching_checked = False

    def _evaluate(self, codes: torch.Tensor, with_grad: bool):
        phi = self._grid.embed(codes).requires_grad_(with_grad)
        with torch.set_grad_enabled(with_grad):
            value = self.log_density(phi)
        if value.shape != codes.shape[:1]:
            raise ValueError(
                "log_density must return one value per state, shape [{}], got {}".format(
                    codes.shape[0], tuple(value.shape)
                )
            )
        return phi, value

    def _value_and_grad(self, codes: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        with torch.enable_grad():
            phi, value = self._evaluate(codes, True)
            grad = None
            if value.requires_grad:
                (grad,) = torch.autograd.grad(value.sum(), phi, allow_unused=True)
        if grad is None:  # a density that does not depend on the values
            grad = torch.zeros_like(phi)
        packed = grad.new_zeros(codes.shape[0], self.layout.num_coords * self.layout.grad_width)
        packed[:, self._slot] = grad
        packed = packed.reshape(codes.shape[0], self.layout.num_coords, self.layout.grad_width)
        return value.detach().double(), torch.where(packed.abs() < float("inf"), packed, 0.0)

    def _checked(self, codes: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """``value``, the log densities of ``codes``, once checked: at the first batch
        of several states, that ``log_density`` treats the states of a batch apart
        (:meth:`check_batching`); at every evaluation, that no value is NaN or ``+inf``
        (the check of :class:`~pyro_gwg.ModelDensity`)."""
        if not self._batching_checked and codes.shape[0] > 1:
            self.check_batching(codes)
        invalid, state = invalid_evaluations([(codes, value)], codes)
        if bool(invalid):
            self.raise_invalid(state)
        return value

    def log_joint(self, codes: torch.Tensor) -> torch.Tensor:
        """The log density at ``codes [N, D]``, float64.

        :rtype: torch.Tensor
        :raises ValueError: when a log density is NaN or ``+inf``, or when
            ``log_density`` mixes the states of a batch (checked once).
        """
        return self._checked(codes, self._evaluate(codes, False)[1].detach().double())

    def value_and_grad(self, codes: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The log density at ``codes [N, D]`` and its packed gradient ``[N, D, W]``.

        :rtype: tuple
        :raises ValueError: as :meth:`log_joint`.
        """
        value, grad = self._value_and_grad(codes)
        return self._checked(codes, value), grad

    def check_batching(self, codes: torch.Tensor) -> None:
        """Check, once, that ``log_density`` computes each state's value from its own
        row of a batch (as :meth:`ModelDensity.choose_batching
        <pyro_gwg.ModelDensity.choose_batching>` checks a model): the log densities
        and gradients of probe states (:meth:`CoordinateLayout.probe_states
        <pyro_gwg.proposals.layout.CoordinateLayout.probe_states>`) evaluated together
        must be those evaluated one state at a time.

        :param torch.Tensor codes: long ``[N, D]`` states in the layout (probes are
            built from them).
        :raises ValueError: saying that ``log_density`` mixes the states, and how to
            write it instead.
        """
        probe = self.layout.probe_states(codes)
        f, grad = self._value_and_grad(probe)
        one_by_one = [self._value_and_grad(probe[i : i + 1]) for i in range(probe.shape[0])]
        f_one = torch.cat([r[0] for r in one_by_one])
        grad_one = torch.cat([r[1] for r in one_by_one])
        same_f = torch.allclose(f, f_one, rtol=RTOL, atol=ATOL, equal_nan=True)
        if not (same_f and torch.allclose(grad, grad_one, rtol=RTOL, atol=ATOL, equal_nan=True)):
            raise ValueError(
                "log_density mixes the states of a batch: at the states {} it gives {} "
                "evaluated together and {} one state at a time. It receives the relaxed "
                "values phi [N, R] of N states and must compute each state's log density "
                "from its own row: index and reduce over the last dimension (phi[:, 0] or "
                "phi[..., 0], not phi[0, 0]; phi.sum(-1), not phi.sum()), or write the "
                "log density of one state phi [R] and pass torch.func.vmap(f).".format(
                    probe.tolist(),
                    "log densities {}".format(f.tolist()) if not same_f else "gradients",
                    f_one.tolist() if not same_f else "other gradients",
                )
            )
        self._batching_checked = True

    def raise_invalid(self, codes: torch.Tensor) -> None:
        """Raise the error for a state ``codes [D]`` whose log density is NaN or
        ``+inf`` (the counterpart of :meth:`ModelDensity.raise_invalid
        <pyro_gwg.ModelDensity.raise_invalid>`).

        :raises ValueError: always.
        """
        codes = codes.reshape(1, -1)
        value = float(self._evaluate(codes, False)[1])
        raise ValueError(
            "The log density (log_density of the PotentialDensity) is {:g} at a state the "
            "sampler evaluated: codes {}. A log density must be finite, or -inf for an "
            "impossible state, at every state of the layout's coordinates: check "
            "log_density at this state (for example a log of 0 multiplied by 0, or an "
            "infinite term), and return -inf where the state is impossible.".format(
                value, codes[0].tolist()
            )
        )
