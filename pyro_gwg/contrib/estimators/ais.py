r"""Annealed importance sampling (AIS) of the normaliser of a discrete Pyro model.

With :math:`f(x) = \log p(x, y)` the model's log joint over its latent discrete sites
and :math:`p_0` a normalised, tractable base distribution, AIS (Neal 2001 [Neal2001]_) anneals
along the path of Grathwohl et al. 2021 [Grathwohl2021]_ (Appendix I.2.1, Eq. 35)

.. math:: f_t(x) = \beta_t f(x) + (1 - \beta_t) \log p_0(x),
          \qquad 0 = \beta_0 < \beta_1 < \dots < \beta_T = 1.

Particles start from :math:`x_0 \sim p_0`; at step ``t`` each particle's log weight
grows by the incremental weight

.. math:: f_t(x_{t-1}) - f_{t-1}(x_{t-1}) = (\beta_t - \beta_{t-1})\,
          \big(f(x_{t-1}) - \log p_0(x_{t-1})\big)

(:func:`ais_log_weight_increment`), and then moves by a transition of any pyro-gwg
kernel that leaves :math:`e^{f_t}` invariant. The mean of the weights estimates
:math:`Z = \sum_x e^{f(x)}` without bias, so :math:`\log \hat Z` is biased low (and a
likelihood :math:`f(x) - \log \hat Z` high) by about half its variance.

The base is uniform or a factorised Bernoulli / categorical distribution fitted to data
(:class:`FactorisedBase`, as in the paper); the schedules are linear (the paper's),
sigmoid (Grosse et al. 2013 [Grosse2013]_) or geometric (Fraccaro et al. 2016 [Fraccaro2016]_,
Section 5), or
any tensor of
inverse temperatures.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Union

import torch

from pyro_gwg import cluster
from pyro_gwg._validation import check_integer
from pyro_gwg.bridge.density import ModelDensity
from pyro_gwg.contrib.estimators.driver import (
    TemperedDensity,
    bind_kernel,
    check_kernel,
    run_kernel,
    uses_gradient,
)
from pyro_gwg.contrib.estimators.weights import effective_sample_size, log_mean_exp, log_mean_exp_se
from pyro_gwg.enumeration import StateIndex
from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.proposals.layout import CoordinateLayout
from pyro_gwg.runner.strategies import RAY_CHAINS_PER_BLOCK
from pyro_gwg.sites import UnsupportedModelError

__all__ = [
    "AISResult",
    "FactorisedBase",
    "LogLikelihood",
    "ais",
    "ais_log_likelihood",
    "ais_log_weight_increment",
    "annealing_schedule",
    "geometric_schedule",
    "linear_schedule",
    "log_likelihood",
    "sigmoid_schedule",
]

SCHEDULES = ("linear", "sigmoid", "geometric")
MAX_BASE_VALUES = 1 << 16


# ---------------------------------------------------------------------- schedules
def linear_schedule(num_steps: int) -> torch.Tensor:
    r"""Evenly spaced inverse temperatures :math:`\beta_t = t / T`, ``t = 0 .. T``
    (the schedule of Grathwohl et al. 2021 [Grathwohl2021]_, Appendix I.2.1).

    :param int num_steps: ``T``.
    :returns: float64 ``[T + 1]``.
    """
    _check_num_steps(num_steps)
    return torch.linspace(0.0, 1.0, num_steps + 1, dtype=torch.float64)


def sigmoid_schedule(num_steps: int, scale: float = 4.0) -> torch.Tensor:
    r"""Sigmoid schedule (Grosse, Maddison & Salakhutdinov 2013 [Grosse2013]_): with
    :math:`\tilde\beta_t = \sigma(\delta (2t / T - 1))`,
    :math:`\beta_t = (\tilde\beta_t - \tilde\beta_0) / (\tilde\beta_T - \tilde\beta_0)`;
    dense near both ends of the path.

    :param int num_steps: ``T``.
    :param float scale: :math:`\delta > 0`; larger is denser at the ends.
    :returns: float64 ``[T + 1]``.
    """
    _check_num_steps(num_steps)
    if not scale > 0:
        raise ValueError("scale must be positive, got {}".format(scale))
    raw = torch.sigmoid(scale * torch.linspace(-1.0, 1.0, num_steps + 1, dtype=torch.float64))
    return (raw - raw[0]) / (raw[-1] - raw[0])


def geometric_schedule(num_steps: int, start: float = 1e-3) -> torch.Tensor:
    r"""Geometric schedule (the "geometric discretisation" of Fraccaro et al. 2016
    [Fraccaro2016]_, Section 5):
    :math:`\beta_0 = 0` and :math:`\beta_1, \dots, \beta_T` a geometric progression from
    ``start`` to 1; dense near :math:`\beta = 0`.

    :param int num_steps: ``T``.
    :param float start: :math:`\beta_1`, in ``(0, 1]``.
    :returns: float64 ``[T + 1]``.
    """
    _check_num_steps(num_steps)
    if not 0 < start <= 1:
        raise ValueError("start must lie in (0, 1], got {}".format(start))
    exponents = torch.linspace(1.0, 0.0, num_steps, dtype=torch.float64)
    return torch.cat([torch.zeros(1, dtype=torch.float64), start**exponents])


def annealing_schedule(
    schedule: Union[str, torch.Tensor], num_steps: Optional[int] = None
) -> torch.Tensor:
    """The inverse temperatures of a named schedule, or a checked copy of a given one.

    :param schedule: ``"linear"``, ``"sigmoid"``, ``"geometric"`` or a 1-d tensor of
        non-decreasing inverse temperatures from 0 to 1.
    :param int num_steps: ``T`` for a named schedule (default 1000); for a tensor,
        ``None`` or its length less one.
    :returns: float64 ``[T + 1]``.
    """
    if isinstance(schedule, str):
        if schedule not in SCHEDULES:
            raise ValueError(
                "schedule must be one of {} or a tensor of inverse temperatures, got {!r}".format(
                    SCHEDULES, schedule
                )
            )
        num_steps = 1000 if num_steps is None else num_steps
        return {
            "linear": linear_schedule,
            "sigmoid": sigmoid_schedule,
            "geometric": geometric_schedule,
        }[schedule](num_steps)
    betas = torch.as_tensor(schedule, dtype=torch.float64)
    if betas.dim() != 1 or betas.numel() < 2:
        raise ValueError("a schedule tensor must be 1-d with at least two inverse temperatures")
    if num_steps is not None and num_steps != betas.numel() - 1:
        raise ValueError(
            "num_steps={} disagrees with the schedule's {} inverse temperatures (num_steps "
            "is their number less one; leave it None)".format(num_steps, betas.numel())
        )
    if float(betas[0]) != 0.0 or float(betas[-1]) != 1.0:
        raise ValueError(
            "a schedule must start at beta = 0 (the base) and end at beta = 1 (the model), "
            "got {:g} ... {:g}".format(float(betas[0]), float(betas[-1]))
        )
    if bool((betas[1:] < betas[:-1]).any()):
        raise ValueError("the inverse temperatures of a schedule must not decrease")
    return betas


def _check_num_steps(num_steps: int) -> None:
    if int(num_steps) != num_steps or num_steps < 1:
        raise ValueError("num_steps must be a positive integer, got {}".format(num_steps))


def ais_log_weight_increment(
    log_target: torch.Tensor,
    log_base: torch.Tensor,
    beta_prev: float,
    beta_next: float,
) -> torch.Tensor:
    r"""AIS incremental log weight :math:`f_t(x) - f_{t-1}(x) = (\beta_t - \beta_{t-1})
    (f(x) - \log p_0(x))` on the path of Eq. 35 (Grathwohl et al. 2021 [Grathwohl2021]_).

    :param torch.Tensor log_target: ``[P]`` :math:`f(x)` at the particles.
    :param torch.Tensor log_base: ``[P]`` :math:`\log p_0(x)` at the particles.
    :param float beta_prev: :math:`\beta_{t-1}`.
    :param float beta_next: :math:`\beta_t`.
    :rtype: torch.Tensor
    """
    return (beta_next - beta_prev) * (log_target - log_base)


# ---------------------------------------------------------------------- base distribution
class FactorisedBase:
    r"""A normalised distribution over the flat codes of a model whose coordinates are
    independent: :math:`\log p_0(x) = \sum_i \log \pi_i(x_i)`.

    Bits give a multivariate Bernoulli, (one-hot) categoricals a product of
    categoricals, bounded ordinals a categorical over their values (Grathwohl et al. 2021
    [Grathwohl2021]_,
    Appendix I.2.1). Its "gradient" (for the gradient-informed kernels, packed as in
    :mod:`pyro_gwg.proposals.layout`) is exact for bits and categoricals (the log
    probabilities, linear in the relaxed value) and the central difference of
    :math:`\log \pi_i` for wider ordinals; exactness never depends on it.

    :param CoordinateLayout layout: the model's coordinate layout (bounded).
    :param torch.Tensor log_probs: ``[D, M]`` normalised log probabilities of value
        ``j`` of coordinate ``i`` (value ``lower_i + j`` of a scalar coordinate,
        category ``j`` of a categorical one), ``-inf`` beyond each coordinate's values.
    """

    def __init__(self, layout: CoordinateLayout, log_probs: torch.Tensor) -> None:
        sizes = _bounded_sizes(layout)
        width = int(sizes.max())
        if log_probs.shape != (layout.num_coords, width):
            raise ValueError(
                "log_probs must have shape [D, M] = [{}, {}], got {}".format(
                    layout.num_coords, width, tuple(log_probs.shape)
                )
            )
        inside = torch.arange(width, device=log_probs.device) < sizes.unsqueeze(-1)
        if not bool(torch.isfinite(log_probs[inside]).all()):
            raise ValueError(
                "log_probs must be finite on every coordinate's values (a zero-probability "
                "value would give infinite AIS weights); fit with smoothing > 0"
            )
        total = torch.logsumexp(log_probs.masked_fill(~inside, -float("inf")), -1)
        if not torch.allclose(total, torch.zeros_like(total), atol=1e-4):
            raise ValueError("the rows of log_probs must be normalised (logsumexp 0)")
        self.layout = layout
        self.index = StateIndex(layout)
        self.sizes = sizes.long()
        self.log_probs = log_probs.masked_fill(~inside, -float("inf"))
        self._slopes = _central_slopes(self.log_probs, self.sizes)

    @classmethod
    def uniform(cls, layout: CoordinateLayout) -> FactorisedBase:
        """The uniform distribution over the model's (bounded) coordinates.

        :param CoordinateLayout layout: the model's coordinate layout.
        :rtype: FactorisedBase
        """
        sizes = _bounded_sizes(layout)
        width = int(sizes.max())
        inside = torch.arange(width, device=sizes.device) < sizes.unsqueeze(-1)
        log_probs = (-sizes.double().log()).unsqueeze(-1).expand(-1, width)
        return cls(layout, log_probs.masked_fill(~inside, -float("inf")).float())

    @classmethod
    def fit(
        cls, layout: CoordinateLayout, codes: torch.Tensor, smoothing: float = 1.0
    ) -> FactorisedBase:
        """Independent per-coordinate frequencies of data (with add-``smoothing``
        counts): the factorised Bernoulli / categorical base of Grathwohl et al. 2021
        [Grathwohl2021]_.

        :param CoordinateLayout layout: the model's coordinate layout.
        :param torch.Tensor codes: long ``[N, D]`` data as codes.
        :param float smoothing: pseudo-count added to every value (must be positive).
        :rtype: FactorisedBase
        """
        if not smoothing > 0:
            raise ValueError("smoothing must be positive, got {}".format(smoothing))
        sizes = _bounded_sizes(layout)
        width = int(sizes.max())
        if codes.dim() != 2 or codes.shape[1] != layout.num_coords:
            raise ValueError(
                "data codes must be [N, {}], got {}".format(layout.num_coords, tuple(codes.shape))
            )
        codes = codes.to(sizes.device)
        index = codes.long() - StateIndex(layout).offset
        if bool(((index < 0) | (index >= sizes)).any()):
            raise ValueError("data codes lie outside the model's support")
        counts = torch.nn.functional.one_hot(index, width).double().sum(0) + smoothing
        inside = torch.arange(width, device=sizes.device) < sizes.unsqueeze(-1)
        counts = counts.masked_fill(~inside, 0.0)
        log_probs = counts.log() - counts.sum(-1, keepdim=True).log()
        return cls(layout, log_probs.float())

    def log_prob(self, codes: torch.Tensor) -> torch.Tensor:
        r""":math:`\log p_0(x)` of ``codes [C, D]``: ``[C]``."""
        index = codes.long() - self.index.offset
        table = self.log_probs.unsqueeze(0).expand(codes.shape[0], -1, -1)
        return table.gather(-1, index.unsqueeze(-1)).squeeze(-1).sum(-1)

    def sample(self, num_samples: int) -> torch.Tensor:
        """``num_samples`` independent draws as long codes ``[num_samples, D]``."""
        index = torch.distributions.Categorical(logits=self.log_probs).sample((num_samples,))
        return index + self.index.offset

    def grad(self, codes: torch.Tensor) -> torch.Tensor:
        """Packed gradient ``[C, D, W]`` of :math:`\\log p_0` (see the class docstring)."""
        layout = self.layout
        index = codes.long() - self.index.offset
        num = codes.shape[0]
        slope = self._slopes.unsqueeze(0).expand(num, -1, -1).gather(-1, index.unsqueeze(-1))
        if layout.grad_width == 1:
            return slope
        width = layout.grad_width
        table = torch.where(torch.isfinite(self.log_probs), self.log_probs, 0.0)
        categorical = torch.nn.functional.pad(table, (0, max(0, width - table.shape[1])))
        categorical = categorical[:, :width]
        scalar = torch.nn.functional.pad(slope, (0, width - 1))
        is_scalar = layout.is_scalar.reshape(1, -1, 1)
        return torch.where(is_scalar, scalar, categorical.unsqueeze(0).expand(num, -1, -1))


def _bounded_sizes(layout: CoordinateLayout) -> torch.Tensor:
    sizes = layout.num_values()
    if not bool(torch.isfinite(sizes).all()):
        bad = (~torch.isfinite(sizes)).nonzero().reshape(-1).tolist()
        raise UnsupportedModelError(
            "A factorised base distribution needs bounded coordinates; coordinate(s) {} "
            "are unbounded ordinals (Poisson, Geometric, ...). Give those sites a bounded "
            "support to anneal from a base.".format(bad)
        )
    if float(sizes.max()) > MAX_BASE_VALUES:
        raise UnsupportedModelError(
            "A coordinate takes {:g} values, more than the {} a factorised base tabulates.".format(
                float(sizes.max()), MAX_BASE_VALUES
            )
        )
    return sizes.long()


def _central_slopes(log_probs: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """``[D, M]``: the slope of :math:`\\log \\pi_i` at value ``j`` (central difference,
    one-sided at the ends, zero for single-valued coordinates)."""
    width = log_probs.shape[1]
    slopes = torch.zeros_like(log_probs)
    if width < 2:
        return slopes
    forward = log_probs[:, 1:] - log_probs[:, :-1]  # [D, M - 1]: value j -> j + 1
    j = torch.arange(width, device=log_probs.device)
    has_up = (j.unsqueeze(0) + 1) < sizes.unsqueeze(-1)
    has_down = (j.unsqueeze(0) >= 1) & (j.unsqueeze(0) < sizes.unsqueeze(-1))
    up = torch.nn.functional.pad(forward, (0, 1))
    down = torch.nn.functional.pad(forward, (1, 0))
    up = torch.where(has_up, up, torch.zeros_like(up))
    down = torch.where(has_down, down, torch.zeros_like(down))
    count = has_up.float() + has_down.float()
    return (up + down) / count.clamp(min=1.0)


# ---------------------------------------------------------------------- AIS
class AISResult(NamedTuple):
    """Result of :func:`ais`.

    :ivar torch.Tensor log_z: estimate of :math:`\\log Z = \\log \\sum_x e^{f(x)}`.
    :ivar torch.Tensor log_z_se: its delta-method standard error
        (:func:`~pyro_gwg.contrib.estimators.weights.log_mean_exp_se`).
    :ivar torch.Tensor log_weights: ``[P]`` final log weights of the particles.
    :ivar torch.Tensor ess: effective sample size of the final weights.
    :ivar torch.Tensor codes: long ``[P, D]`` final particles (weighted draws from the
        model).
    :ivar dict samples: the particles as model values ``{site: [P, ...]}``.
    :ivar torch.Tensor betas: ``[T + 1]`` inverse temperatures used.
    :ivar int evaluations: states at which the model was evaluated.
    :ivar int gradient_evaluations: of those, with a gradient.
    """

    log_z: torch.Tensor
    log_z_se: torch.Tensor
    log_weights: torch.Tensor
    ess: torch.Tensor
    codes: torch.Tensor
    samples: Dict[str, torch.Tensor]
    betas: torch.Tensor
    evaluations: int
    gradient_evaluations: int


def ais(
    model,
    kernel: DiscreteKernel,
    *,
    num_particles: int = 100,
    num_steps: Optional[int] = None,
    schedule: Union[str, torch.Tensor] = "linear",
    base: Union[str, FactorisedBase, Dict[str, torch.Tensor]] = "uniform",
    num_moves: int = 1,
    model_args: tuple = (),
    model_kwargs: Optional[dict] = None,
    max_plate_nesting: Optional[int] = None,
    num_workers: Optional[int] = None,
    particles_per_block: Optional[int] = None,
    ray_remote_args: Optional[dict] = None,
) -> AISResult:
    r"""Annealed importance sampling estimate of the log normaliser of ``model``.

    Estimates :math:`\log Z = \log \sum_x e^{f(x)}`, :math:`f` the model's log joint
    over its latent discrete sites (with observed sites, the log marginal likelihood
    :math:`\log p(y)`), along :math:`f_t = \beta_t f + (1 - \beta_t) \log p_0` (Grathwohl et al.
    2021 [Grathwohl2021]_, Eq. 35). All particles advance together as one batch of chains.

    :param callable model: a Pyro model whose latent sites are discrete; it must
        broadcast over a leading batch dimension (as for batched chains).
    :param DiscreteKernel kernel: the transition at each temperature, any pyro-gwg
        kernel (``GWG()``, ``Gibbs()``, ``NCG(step_size=...)``, ...; its own model, if
        any, is ignored). Step sizes are not adapted: give NCG/AVG/PAVG a ``step_size``.
    :param int num_particles: ``P``, independent AIS runs.
    :param int num_steps: ``T``, the number of annealing increments (default 1000
        for a named schedule); transitions happen at :math:`\beta_1 .. \beta_{T-1}`.
    :param schedule: ``"linear"``, ``"sigmoid"``, ``"geometric"`` or a tensor of
        inverse temperatures (see :func:`annealing_schedule`).
    :param base: ``"uniform"``, a :class:`FactorisedBase`, or data ``{site: [N, ...]}``
        to fit a factorised Bernoulli / categorical base to.
    :param int num_moves: kernel transitions per intermediate temperature.
    :param tuple model_args: the model's positional arguments.
    :param dict model_kwargs: the model's keyword arguments.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param int num_workers: ``None`` (default): the particles run here; an integer:
        blocks of particles run as Ray tasks, at most ``num_workers`` at once (see
        :mod:`pyro_gwg.cluster`). AIS particles are independent, so the blocks' log
        weights are simply concatenated: the estimate
        :math:`\log \frac1P \sum_p w_p` is the log-sum-exp over every block's
        weights, the same estimator as one run with all ``P`` particles.
    :param int particles_per_block: particles per block, each block with its own
        seed (from one draw of torch's global generator), so the result depends on
        the blocks and the seed, not on ``num_workers`` (default
        ``min(P, 256)`` with ``num_workers``; with ``num_workers=None`` a value runs
        the same blocks one after the other here).
    :param dict ray_remote_args: options of each block's :func:`ray.remote` task.
    :rtype: AISResult

    Example::

        >>> import torch
        >>> from pyro_gwg import GWG
        >>> from pyro_gwg.models import ising, lattice_couplings
        >>> result = ais(ising, GWG(), num_particles=16, num_steps=10,
        ...              model_args=(lattice_couplings(3, 0.2),))
        >>> result.log_weights.shape
        torch.Size([16])
    """
    check_kernel(kernel, "ais", needs_invariance=True)
    if not kernel.targets_bound_density:
        raise UnsupportedModelError(
            "{} samples its model from a closed form and ignores the annealed density; "
            "AIS needs a kernel that targets the density it is given (GWG, Gibbs, "
            "...).".format(type(kernel).__name__)
        )
    if int(num_particles) != num_particles or num_particles < 2:
        raise ValueError("num_particles must be an integer >= 2, got {}".format(num_particles))
    if int(num_moves) != num_moves or num_moves < 0:
        raise ValueError("num_moves must be a non-negative integer, got {}".format(num_moves))
    betas = annealing_schedule(schedule, num_steps)
    num_workers = cluster.check_num_workers(num_workers)
    if num_workers is not None or particles_per_block is not None:
        settings = dict(
            model=model,
            kernel=kernel,
            num_steps=num_steps,
            schedule=schedule,
            base=base,
            num_moves=num_moves,
            model_args=model_args,
            model_kwargs=model_kwargs,
            max_plate_nesting=max_plate_nesting,
        )
        if particles_per_block is None:
            particles_per_block = min(num_particles, RAY_CHAINS_PER_BLOCK)
        particles_per_block = check_integer("particles_per_block", particles_per_block, 2)
        blocks = cluster.split(int(num_particles), particles_per_block, minimum=2)
        seeds = cluster.block_seeds(cluster.draw_base_seed(), len(blocks))
        results = cluster.map_tasks(
            _ais_block,
            [(dict(settings, num_particles=b.stop - b.start), s) for b, s in zip(blocks, seeds)],
            num_workers=num_workers,
            feature="ais(num_workers=...)",
            remote_args=ray_remote_args,
            progress_bar=False,
            desc="AIS blocks",
        )
        return _combine(results)
    energy = ModelDensity(model, model_args, model_kwargs, max_plate_nesting=max_plate_nesting)
    base = _make_base(energy, base)
    annealed = TemperedDensity(energy, base, beta=0.0)
    driver = bind_kernel(kernel, annealed)
    with_grad = uses_gradient(kernel)
    codes = base.sample(num_particles).to(energy.device)
    log_weights = torch.zeros(num_particles, dtype=torch.float64, device=energy.device)
    num_temperatures = betas.numel() - 1
    for t in range(1, num_temperatures + 1):
        # f and log p0 at x_{t-1}; the kernel's next initialisation reuses them
        moves = num_moves if t < num_temperatures else 0
        value = annealed.evaluate(codes, with_grad=with_grad and moves > 0)
        log_weights += ais_log_weight_increment(
            value.target.double(), value.base.double(), float(betas[t - 1]), float(betas[t])
        )
        if moves > 0:
            annealed.beta = float(betas[t])
            codes = run_kernel(driver, codes, num_moves)[0]
    _check_weights(log_weights)
    return AISResult(
        log_z=log_mean_exp(log_weights),
        log_z_se=log_mean_exp_se(log_weights),
        log_weights=log_weights,
        ess=effective_sample_size(log_weights),
        codes=codes,
        samples=energy.values_from_codes(codes),
        betas=betas,
        evaluations=annealed.evaluations,
        gradient_evaluations=annealed.gradient_evaluations,
    )


def _ais_block(task) -> AISResult:
    """One block of AIS particles under its seed (a Ray task)."""
    settings, seed = task
    with cluster.seeded(seed):
        return ais(**settings)


def _combine(blocks) -> AISResult:
    """One :class:`AISResult` from independent blocks of particles: their log weights
    concatenated, and the estimate, its error and the ESS of all of them."""
    log_weights = torch.cat([b.log_weights for b in blocks])
    return AISResult(
        log_z=log_mean_exp(log_weights),
        log_z_se=log_mean_exp_se(log_weights),
        log_weights=log_weights,
        ess=effective_sample_size(log_weights),
        codes=torch.cat([b.codes for b in blocks]),
        samples={k: torch.cat([b.samples[k] for b in blocks]) for k in blocks[0].samples},
        betas=blocks[0].betas,
        evaluations=sum(b.evaluations for b in blocks),
        gradient_evaluations=sum(b.gradient_evaluations for b in blocks),
    )


def _check_weights(log_weights: torch.Tensor) -> None:
    if not bool(torch.isfinite(log_weights).any()):
        raise ValueError(
            "Every AIS particle ended with a log weight of {}: the model's log joint is "
            "-inf or NaN where the base puts mass. Use a base that only covers the "
            "model's support.".format(float(log_weights.max()))
        )


def _make_base(energy: ModelDensity, base) -> FactorisedBase:
    if isinstance(base, FactorisedBase):
        if base.layout.num_coords != energy.num_coords:
            raise ValueError(
                "the base has {} coordinates, the model {}".format(
                    base.layout.num_coords, energy.num_coords
                )
            )
        return base
    try:
        if isinstance(base, str):
            if base != "uniform":
                raise ValueError(
                    "base must be 'uniform', a FactorisedBase or data {{site: values}}, "
                    "got {!r}".format(base)
                )
            return FactorisedBase.uniform(energy.layout)
        if isinstance(base, dict):
            return FactorisedBase.fit(energy.layout, energy.codes_from_values(base))
    except UnsupportedModelError as e:
        names = ", ".join(s.describe() for s in energy.sites if not _site_bounded(energy, s))
        raise UnsupportedModelError("{} Unbounded site(s): {}.".format(e, names)) from e
    raise TypeError(
        "base must be 'uniform', a FactorisedBase or data {{site: values}}, got {}".format(
            type(base).__name__
        )
    )


def _site_bounded(energy: ModelDensity, site) -> bool:
    sizes = energy.layout.num_values()[site.offset : site.offset + site.num_coords]
    return bool(torch.isfinite(sizes).all())


# ---------------------------------------------------------------------- log-likelihoods
class LogLikelihood(NamedTuple):
    """Result of :func:`ais_log_likelihood`.

    :ivar torch.Tensor mean: mean log-likelihood of the data points.
    :ivar torch.Tensor log_z_se: standard error of the AIS log normaliser, which
        shifts every log-likelihood alike.
    :ivar torch.Tensor per_example: ``[N]`` log-likelihood of each data point.
    :ivar AISResult ais: the AIS run behind it.
    """

    mean: torch.Tensor
    log_z_se: torch.Tensor
    per_example: torch.Tensor
    ais: AISResult


def log_likelihood(
    model,
    data: Dict[str, torch.Tensor],
    log_z: Union[float, torch.Tensor],
    *,
    model_args: tuple = (),
    model_kwargs: Optional[dict] = None,
    max_plate_nesting: Optional[int] = None,
) -> torch.Tensor:
    r"""Log-likelihood :math:`f(x) - \log Z` of data points under a model whose latent
    discrete sites are the data.

    :param callable model: the model.
    :param dict data: ``{site: [N, ...]}`` values of every latent discrete site.
    :param log_z: the model's log normaliser (exact, or from :func:`ais`).
    :param tuple model_args: the model's positional arguments.
    :param dict model_kwargs: the model's keyword arguments.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :returns: ``[N]``.
    """
    if not isinstance(data, dict):
        raise TypeError("data must be a dict {site: [N, ...] values}")
    energy = ModelDensity(model, model_args, model_kwargs, max_plate_nesting=max_plate_nesting)
    codes = energy.codes_from_values(data)
    return energy.log_joint(codes).double() - torch.as_tensor(log_z, dtype=torch.float64)


def ais_log_likelihood(
    model,
    kernel: DiscreteKernel,
    data: Dict[str, torch.Tensor],
    *,
    model_args: tuple = (),
    model_kwargs: Optional[dict] = None,
    **ais_kwargs,
) -> LogLikelihood:
    """Test-set log-likelihood with the normaliser from :func:`ais`, as Grathwohl et al. 2021
    [Grathwohl2021]_ reports
    for its energy-based models (Section 8, Appendix I.2.1). AIS underestimates
    :math:`\\log Z` on average, so the likelihood is overestimated; more annealing
    steps shrink the gap.

    :param callable model: the model.
    :param DiscreteKernel kernel: the AIS transition.
    :param dict data: ``{site: [N, ...]}`` test points.
    :param tuple model_args: the model's positional arguments.
    :param dict model_kwargs: the model's keyword arguments.
    :param ais_kwargs: passed to :func:`ais` (``num_particles``, ``num_steps``,
        ``schedule``, ``base`` -- e.g. the training data, ...).
    :rtype: LogLikelihood
    """
    result = ais(model, kernel, model_args=model_args, model_kwargs=model_kwargs, **ais_kwargs)
    per_example = log_likelihood(
        model, data, result.log_z, model_args=model_args, model_kwargs=model_kwargs
    )
    return LogLikelihood(per_example.mean(), result.log_z_se, per_example, result)
