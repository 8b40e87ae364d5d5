r"""The adaptive resample-move algorithm (ARM, Fraccaro et al. 2016 [Fraccaro2016]_) for the
normaliser of a
discrete model built up one component at a time.

The target is reached through a sequence of unnormalised distributions of growing
dimension, :math:`p^*_1(x_{[1]}), p^*_2(x_{[2]}), \dots, p^*_N(x_{[N]})`, each a Pyro
model (a :class:`Stage`) whose flat codes extend those of the previous stage by one or
a few coordinates (for an RBM: the visible units added one at a time, most active
first, :func:`rbm_stages`). With :math:`Z_n = \sum p^*_n`, particles
:math:`(x^r_{[n]}, \tilde w^r_n)` targeting :math:`p_n` go through

1. **move**: a transition of any pyro-gwg kernel that leaves :math:`p_n` invariant
   (one per particle; ``num_moves`` steps, a "sweep" of :math:`D_n` steps by default);
2. **smooth**: the incremental weight marginalises the next component exactly
   (Fraccaro et al. 2016 [Fraccaro2016]_, Eqs. 2-3; :func:`smooth_log_weights`),

   .. math:: \mathcal W(x_{[n]}) = \frac{p^*_{n+1}(x_{[n]})}{p^*_n(x_{[n]})}
             = \frac{\sum_{x_{n+1}} p^*_{n+1}(x_{[n]}, x_{n+1})}{p^*_n(x_{[n]})},
             \qquad \frac{Z_{n+1}}{Z_n} \approx \sum_r \tilde w^r_n \mathcal W(x^r_{[n]})

   (Eq. 1; :func:`log_z_increment`), and the weights become
   :math:`\tilde w^r_{n+1} \propto \tilde w^r_n \mathcal W(x^r_{[n]})`;
3. **generate loop** (Algorithm 2): while the ESS ratio
   :math:`\gamma^{(i)} = R^{(i)}_{\mathrm{eff}} / R` of the updated weights is below
   :math:`\gamma_{\rm thr}` (0.7) and :math:`i < i_{\max}`, ``R`` more particles
   targeting :math:`p_n` join the set: copies of the set before the move, moved
   afresh (ARM), or new particles from data run through ``reseed_steps`` kernel
   steps (ARM-reseed, :math:`S = \max((1 - \gamma^{(i)} / \gamma_{\rm thr}) R, 100)`);
   each added set enters with its share of the particles. The ratio is taken
   relative to the base level ``R`` (not to the grown set), so that adding particles
   raises it, as the paper's reseed count :math:`S` presumes;
4. **resample** (residual, :func:`~pyro_gwg.contrib.estimators.weights.residual_resample`)
   back to ``R`` uniformly weighted particles when the set grew (necessarily) or its
   ESS fell below ``resample_threshold * R``;
5. **augment**: :math:`x^r_{n+1} \sim p_{n+1}(x_{n+1} \mid x^r_{[n]})`, read off the
   same evaluations as the smooth step.

**ARM-reseed is exact only once the reseeded particles reach** :math:`p_n`. They enter
the pool weighted as draws of :math:`p_n`. Rows of data that the model fits are close to
draws of the full model, whose first :math:`n` coordinates follow its marginal, not
:math:`p_n`; that marginal tilts :math:`p_n` towards the states whose future units add
the most mass (for the model one stage larger it is exactly
:math:`p_n \mathcal W / \mathbb{E}_{p_n}[\mathcal W]`), so the reseeded particles' mean of
:math:`\mathcal W` is about :math:`\mathbb{E}[\mathcal W^2] / \mathbb{E}[\mathcal W] \ge
Z_{n+1} / Z_n`, and :math:`\log \hat Z` comes out too high, by a bias that adds up over
the stages. ``reseed_steps`` counts kernel steps: for a single-site kernel such as
:class:`~pyro_gwg.Gibbs` that is ``reseed_steps / D_n`` sweeps at stage ``n``. Measured
(``benchmarks/RESULTS.md``, ``estimators_rbm``): on an RBM with 64 visible and 20 hidden
units fitted to digits, 200 single-site Gibbs steps (about 3 sweeps at the last stages)
left ARM-reseed +0.9 to +1.5 nats high at every number of particles, and 800 steps
removed the upward bias (``estimators_rbm_reseed``: +1.36 with 200, -0.58 with 800, the
downward bias of plain ARM with 50 particles); on a 10-unit RBM the bias fell from +1.17
nats with no steps to +0.02 (within the standard error) with 300
(``tests/contrib/test_estimators_arm.py``).

The first stage is enumerated exactly (:math:`Z_1` and exact draws), so
:math:`\log \hat Z_N = \log Z_1 + \sum_n \log \widehat{Z_{n+1} / Z_n}`. The standard
error comes from ``num_runs`` independent runs (their particles share the kernel's
batched moves): :math:`\log \hat Z` is the log of the mean of the runs'
:math:`\hat Z`, with the delta-method error of that mean.

The "anticipate" variant of Fraccaro et al. 2016 [Fraccaro2016]_ (Section 3.2) is not
implemented: the copy of
the paper this package follows does not define it.
"""

from __future__ import annotations

import math
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch

from pyro_gwg import cluster
from pyro_gwg.bridge.density import ModelDensity
from pyro_gwg.contrib.estimators.driver import (
    TemperedDensity,
    bind_kernel,
    check_kernel,
    run_kernel,
)
from pyro_gwg.contrib.estimators.weights import (
    effective_sample_size,
    log_mean_exp,
    log_mean_exp_se,
    residual_resample,
)
from pyro_gwg.driver import ChainDriver
from pyro_gwg.enumeration import StateIndex, exact_posterior
from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.models.ising import ising
from pyro_gwg.models.rbm import RBMParams, rbm
from pyro_gwg.proposals.layout import CoordinateLayout
from pyro_gwg.sites import UnsupportedModelError

__all__ = [
    "ARMResult",
    "ARMStageInfo",
    "Stage",
    "activity_order",
    "arm",
    "ising_stages",
    "log_z_increment",
    "rbm_stages",
    "reseed_count",
    "smooth_log_weights",
]

MAX_NEW_STATES = 4096
CHUNK = 1 << 14


class Stage(NamedTuple):
    """One distribution :math:`p^*_n` of the sequence: a Pyro model and its arguments.

    :ivar callable model: a Pyro model whose latent sites are discrete.
    :ivar tuple args: its positional arguments.
    :ivar dict kwargs: its keyword arguments (``None``: none).
    """

    model: Callable
    args: tuple = ()
    kwargs: Optional[dict] = None


# ---------------------------------------------------------------------- sequences
def activity_order(data: torch.Tensor) -> torch.Tensor:
    """Coordinates from the most to the least active: decreasing variance in ``data``
    (Fraccaro et al. 2016 [Fraccaro2016]_, Section 5: units "whose variance in the training set
    is higher" come
    first), ties in index order.

    :param torch.Tensor data: ``[N, D]`` data (e.g. binary images).
    :returns: long ``[D]`` permutation.
    """
    if data.dim() != 2 or data.shape[0] < 2:
        raise ValueError("data must be [N, D] with N >= 2, got {}".format(tuple(data.shape)))
    variance = data.double().var(0)
    return torch.sort(-variance, stable=True).indices


def _order(order: Optional[torch.Tensor], size: int) -> torch.Tensor:
    if order is None:
        return torch.arange(size)
    order = torch.as_tensor(order, dtype=torch.long)
    if order.shape != (size,) or not torch.equal(torch.sort(order).values, torch.arange(size)):
        raise ValueError("order must be a permutation of 0 .. {}".format(size - 1))
    return order


def rbm_stages(params: RBMParams, order: Optional[torch.Tensor] = None) -> List[Stage]:
    r"""The RBM sequence of Fraccaro et al. 2016 [Fraccaro2016]_ (Section 5): stage ``n`` is
    the RBM restricted to
    the first ``n`` visible units in ``order``,
    :math:`p^*_n(v_{[n]}) = \sum_h e^{h^\top W_{:, [n]} v_{[n]} + b_{[n]}^\top v_{[n]} + c^\top h}`,
    written as the Pyro model :func:`~pyro_gwg.models.rbm` (which also carries the
    visible Bernoulli normalisers; the last stage is the full ``rbm(*params)`` with
    permuted visible units, whose normaliser is that of ``rbm(*params)``).

    :param RBMParams params: the RBM.
    :param torch.Tensor order: permutation of the visible units (default: as given;
        :func:`activity_order` of the training data for the paper's choice).
    :rtype: list
    """
    weights, visible_bias, hidden_bias = params
    order = _order(order, weights.shape[1])
    return [
        Stage(rbm, (weights[:, order[:n]], visible_bias[order[:n]], hidden_bias))
        for n in range(1, weights.shape[1] + 1)
    ]


def ising_stages(
    couplings: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    order: Optional[torch.Tensor] = None,
) -> List[Stage]:
    r"""Ising models (:func:`~pyro_gwg.models.ising`) on the first ``n`` spins in
    ``order``: :math:`p^*_n(x_{[n]}) = e^{s_{[n]}^\top J_{[n][n]} s_{[n]} + b_{[n]}^\top
    s_{[n]}}`.

    :param torch.Tensor couplings: ``[D, D]`` couplings ``J``.
    :param torch.Tensor bias: ``[D]`` field (default zero).
    :param torch.Tensor order: permutation of the spins (default: as given).
    :rtype: list
    """
    size = couplings.shape[-1]
    bias = couplings.new_zeros(size) if bias is None else bias
    order = _order(order, size)
    stages = []
    for n in range(1, size + 1):
        keep = order[:n]
        stages.append(Stage(ising, (couplings[keep][:, keep], bias[keep])))
    return stages


# ---------------------------------------------------------------------- pure steps
def smooth_log_weights(next_log_joint: torch.Tensor, log_joint: torch.Tensor) -> torch.Tensor:
    r"""Smooth-step log weights :math:`\log \mathcal W(x_{[n]}) = \log \sum_{v}
    p^*_{n+1}(x_{[n]}, v) - \log p^*_n(x_{[n]})` (Fraccaro et al. 2016 [Fraccaro2016]_,
    Algorithm 1 line 4).

    :param torch.Tensor next_log_joint: ``[R, K]``, :math:`\log p^*_{n+1}(x^r_{[n]}, v_k)`
        for every joint value :math:`v_k` of the added coordinates.
    :param torch.Tensor log_joint: ``[R]``, :math:`\log p^*_n(x^r_{[n]})`.
    :rtype: torch.Tensor
    """
    return torch.logsumexp(next_log_joint, -1) - log_joint


def log_z_increment(log_weights: torch.Tensor, log_smooth: torch.Tensor) -> torch.Tensor:
    r"""Estimate of :math:`\log (Z_{n+1} / Z_n) = \log \sum_r \tilde w^r_n
    \mathcal W(x^r_{[n]})` (Fraccaro et al. 2016 [Fraccaro2016]_, Eq. 1 and Algorithm 1 line 5).

    :param torch.Tensor log_weights: ``[R]`` self-normalised log weights.
    :param torch.Tensor log_smooth: ``[R]`` smooth-step log weights.
    :rtype: torch.Tensor
    """
    return torch.logsumexp(log_weights + log_smooth, 0)


def reseed_count(gamma: float, gamma_thr: float, num_particles: int, min_new: int = 100) -> int:
    r"""New particles per ARM-reseed generate iteration,
    :math:`S = \max\big((1 - \gamma^{(i)} / \gamma_{\rm thr}) R, S_{\min}\big)`
    (Fraccaro et al. 2016 [Fraccaro2016]_, Section 5).

    :param float gamma: current ESS ratio :math:`\gamma^{(i)}`.
    :param float gamma_thr: threshold :math:`\gamma_{\rm thr}`.
    :param int num_particles: base number ``R``.
    :param int min_new: :math:`S_{\min}` (100 in the paper).
    :rtype: int
    """
    return max(int(math.ceil((1 - gamma / gamma_thr) * num_particles)), int(min_new))


# ---------------------------------------------------------------------- results
class ARMStageInfo(NamedTuple):
    """Per-stage record of :func:`arm`, each ``[num_runs]``, for the step from stage
    ``n`` to ``n + 1``.

    :ivar torch.Tensor num_particles: particles after the generate loop.
    :ivar torch.Tensor generate_iterations: generate iterations ``i``.
    :ivar torch.Tensor ess_ratio: final :math:`\\gamma^{(i)}`.
    :ivar torch.Tensor resampled: whether the particles were resampled.
    :ivar torch.Tensor log_z_increment: :math:`\\log \\widehat{Z_{n+1} / Z_n}`.
    """

    num_particles: torch.Tensor
    generate_iterations: torch.Tensor
    ess_ratio: torch.Tensor
    resampled: torch.Tensor
    log_z_increment: torch.Tensor


class ARMResult(NamedTuple):
    """Result of :func:`arm`.

    :ivar torch.Tensor log_z: :math:`\\log` of the mean of the runs' :math:`\\hat Z`.
    :ivar torch.Tensor log_z_se: delta-method standard error over the runs (NaN for
        a single run).
    :ivar torch.Tensor log_z_runs: ``[num_runs]`` each run's estimate.
    :ivar torch.Tensor codes: long ``[R, D_N]`` final particles of the first run.
    :ivar torch.Tensor log_weights: ``[R]`` their normalised log weights.
    :ivar list stages: one :class:`ARMStageInfo` per step between stages.
    :ivar int evaluations: states at which any stage model was evaluated.
    :ivar int gradient_evaluations: of those, with a gradient.
    :ivar int coordinate_evaluations: evaluated states times their dimension.
    """

    log_z: torch.Tensor
    log_z_se: torch.Tensor
    log_z_runs: torch.Tensor
    codes: torch.Tensor
    log_weights: torch.Tensor
    stages: List[ARMStageInfo]
    evaluations: int
    gradient_evaluations: int
    coordinate_evaluations: int


class _Pool:
    """The weighted particle sets of one run at one stage (the generate loop's output)."""

    def __init__(self) -> None:
        self.codes: List[torch.Tensor] = []
        self.log_weights: List[torch.Tensor] = []  # normalised within each set
        self.next_log_joint: List[torch.Tensor] = []
        self.log_smooth: List[torch.Tensor] = []

    def add(self, codes, log_weights, next_log_joint, log_smooth) -> None:
        self.codes.append(codes)
        self.log_weights.append(log_weights - torch.logsumexp(log_weights, 0))
        self.next_log_joint.append(next_log_joint)
        self.log_smooth.append(log_smooth)

    @property
    def size(self) -> int:
        return sum(c.shape[0] for c in self.codes)

    def combined(self) -> Tuple[torch.Tensor, ...]:
        """Codes, normalised log weights (each set weighted by its share of the
        particles), next-stage log joints and smooth log weights of the whole pool."""
        total = self.size
        shares = [w + math.log(c.shape[0] / total) for w, c in zip(self.log_weights, self.codes)]
        return (
            torch.cat(self.codes),
            torch.cat(shares),
            torch.cat(self.next_log_joint),
            torch.cat(self.log_smooth),
        )

    def ess_ratio(self, num_particles: int) -> float:
        _, log_weights, _, log_smooth = self.combined()
        return float(effective_sample_size(log_weights + log_smooth)) / num_particles


# ---------------------------------------------------------------------- ARM
def arm(
    stages: Sequence[Union[Stage, Callable, tuple]],
    kernel: DiscreteKernel,
    *,
    num_particles: int = 100,
    num_moves: Union[int, str] = "sweep",
    gamma_thr: float = 0.7,
    i_max: int = 50,
    resample_threshold: float = 0.7,
    num_runs: int = 8,
    reseed: Optional[torch.Tensor] = None,
    reseed_steps: int = 200,
    min_reseed: int = 100,
    max_plate_nesting: Optional[int] = None,
    num_workers: Optional[int] = None,
    ray_remote_args: Optional[dict] = None,
) -> ARMResult:
    r"""Adaptive resample-move estimate of the log normaliser of the last stage.

    :param stages: the sequence :math:`p^*_1, \dots, p^*_N`: :class:`Stage`\ s,
        ``(model, args[, kwargs])`` tuples or argument-free models. Stage ``n + 1``'s
        flat codes must begin with stage ``n``'s (same coordinates, same supports)
        and add at most a few bounded coordinates (their joint values are summed
        over); stage 1 must be small enough to enumerate.
    :param DiscreteKernel kernel: the move-step transition, any pyro-gwg kernel (its
        own model, if any, is ignored; no warmup adaptation: give NCG/AVG/PAVG a
        ``step_size``).
    :param int num_particles: ``R``, particles per run (the base level
        :math:`R^{(0)}_n`).
    :param num_moves: kernel steps per move step: an integer, or ``"sweep"`` for
        :math:`D_n` steps at stage ``n`` (a sweep of a single-site kernel).
    :param float gamma_thr: the generate loop stops once
        :math:`\gamma^{(i)} = R_{\rm eff}^{(i)} / R \ge \gamma_{\rm thr}`.
    :param int i_max: most generate iterations per stage.
    :param float resample_threshold: resample when the ESS falls below this
        fraction of ``R`` (the pool is always resampled back to ``R`` when the
        generate loop grew it).
    :param int num_runs: independent runs, for the standard error.
    :param torch.Tensor reseed: ARM-reseed: long ``[M, D_N]`` codes (in the last
        stage's coordinate order, e.g. training data) whose first :math:`D_n`
        coordinates start new particles at stage ``n``; ``None`` for plain ARM.
    :param int reseed_steps: kernel steps that bring reseeded particles to
        :math:`p_n` (for a single-site kernel, ``reseed_steps / D_n`` sweeps); too few
        leave :math:`\log \hat Z` biased upwards (see the module's description).
    :param int min_reseed: :math:`S_{\min}`, fewest new particles per reseed.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param int num_workers: ``None`` (default): the runs advance together here; an
        integer: each run is a Ray task, at most ``num_workers`` at once, seeded by its
        own seed (from one draw of torch's global generator), so the result does not
        depend on ``num_workers``. Resampling stays exact because it never crosses a
        run: each run resamples only its own particles, so every run's
        :math:`\hat Z` is an ordinary resample-move estimate, unbiased for
        :math:`Z`, and the runs' estimates are combined, as here, by the log of their
        mean. (A resampling step across workers would need every particle's weight at
        every stage; runs need nothing from each other.)
    :param dict ray_remote_args: options of each run's :func:`ray.remote` task.
    :rtype: ARMResult

    Example::

        >>> from pyro_gwg import Gibbs
        >>> from pyro_gwg.models import random_rbm
        >>> result = arm(rbm_stages(random_rbm(6, 3)), Gibbs(), num_particles=50, num_runs=2)
        >>> result.log_z_runs.shape
        torch.Size([2])
    """
    stages = [_as_stage(s, n) for n, s in enumerate(stages)]
    _check_arguments(kernel, stages, num_particles, num_moves, gamma_thr, i_max, num_runs)
    if not 0 <= resample_threshold <= 1:
        raise ValueError("resample_threshold must lie in [0, 1], got {}".format(resample_threshold))
    num_workers = cluster.check_num_workers(num_workers)
    if num_workers is not None:
        settings = dict(
            stages=stages,
            kernel=kernel,
            num_particles=num_particles,
            num_moves=num_moves,
            gamma_thr=gamma_thr,
            i_max=i_max,
            resample_threshold=resample_threshold,
            num_runs=1,
            reseed=reseed,
            reseed_steps=reseed_steps,
            min_reseed=min_reseed,
            max_plate_nesting=max_plate_nesting,
        )
        seeds = cluster.block_seeds(cluster.draw_base_seed(), num_runs)
        runs = cluster.run_tasks(
            _arm_run,
            [(settings, seed) for seed in seeds],
            num_workers=num_workers,
            feature="arm(num_workers=...)",
            remote_args=ray_remote_args,
            progress_bar=False,
            desc="ARM runs",
        )
        return _combine_runs(runs)
    settings = _Settings(
        num_particles, gamma_thr, i_max, resample_threshold, reseed, reseed_steps, min_reseed
    )
    build = _EnergyBuilder(stages, max_plate_nesting)
    counters: List[TemperedDensity] = []
    first = exact_posterior(
        stages[0].model,
        *stages[0].args,
        max_plate_nesting=max_plate_nesting,
        **(stages[0].kwargs or {}),
    )
    log_z = torch.full((num_runs,), float(first.log_normalizer), dtype=torch.float64)
    runs = [first.sample_codes(num_particles) for _ in range(num_runs)]
    log_weights = [_uniform(num_particles) for _ in range(num_runs)]
    if reseed is not None:
        last = build.energy(len(stages) - 1).num_coords
        settings = settings._replace(reseed=_check_reseed(reseed, last))
    infos = []
    current = TemperedDensity(build.energy(0))
    counters.append(current)
    for n in range(len(stages) - 1):
        following = TemperedDensity(build.energy(n + 1))
        counters.append(following)
        added = _added_values(current.layout, following.layout, n)
        steps = current.num_coords if num_moves == "sweep" else int(num_moves)
        step = _Transition(bind_kernel(kernel, current), current, following, added, steps)
        pools = [_Pool() for _ in range(num_runs)]
        moved = step.move_and_smooth(runs, steps)
        for pool, w, (codes, nxt, smooth) in zip(pools, log_weights, moved):
            pool.add(codes, w, nxt, smooth)
        iterations = _generate(step, pools, runs, log_weights, settings)
        stage_info = []
        for k, pool in enumerate(pools):
            codes, w, nxt, increment, resampled = _smooth_and_resample(pool, settings)
            log_z[k] += increment
            runs[k] = torch.cat([codes, added[_augment(nxt)]], dim=1)
            log_weights[k] = w
            stage_info.append(
                (pool.size, iterations[k], pool.ess_ratio(num_particles), resampled, increment)
            )
        infos.append(ARMStageInfo(*(torch.tensor(v) for v in zip(*stage_info))))
        current = following
    return ARMResult(
        log_z=log_mean_exp(log_z),
        log_z_se=log_mean_exp_se(log_z) if num_runs > 1 else torch.tensor(float("nan")),
        log_z_runs=log_z,
        codes=runs[0],
        log_weights=log_weights[0],
        stages=infos,
        evaluations=sum(c.evaluations for c in counters),
        gradient_evaluations=sum(c.gradient_evaluations for c in counters),
        coordinate_evaluations=sum(c.coordinate_evaluations for c in counters),
    )


def _arm_run(task) -> ARMResult:
    """One ARM run under its seed (a Ray task)."""
    settings, seed = task
    with cluster.seeded(seed):
        return arm(**settings)


def _combine_runs(runs: List[ARMResult]) -> ARMResult:
    """One :class:`ARMResult` from independent runs: the log of the mean of their
    estimates, its error over the runs, the per-stage records side by side."""
    log_z = torch.cat([r.log_z_runs for r in runs])
    return ARMResult(
        log_z=log_mean_exp(log_z),
        log_z_se=log_mean_exp_se(log_z) if len(runs) > 1 else torch.tensor(float("nan")),
        log_z_runs=log_z,
        codes=runs[0].codes,
        log_weights=runs[0].log_weights,
        stages=[
            ARMStageInfo(*(torch.cat(fields) for fields in zip(*per_run)))
            for per_run in zip(*(r.stages for r in runs))
        ],
        evaluations=sum(r.evaluations for r in runs),
        gradient_evaluations=sum(r.gradient_evaluations for r in runs),
        coordinate_evaluations=sum(r.coordinate_evaluations for r in runs),
    )


def _uniform(num: int) -> torch.Tensor:
    return torch.full((num,), -math.log(num), dtype=torch.float64)


class _Settings(NamedTuple):
    num_particles: int
    gamma_thr: float
    i_max: int
    resample_threshold: float
    reseed: Optional[torch.Tensor]
    reseed_steps: int
    min_reseed: int


class _Transition(NamedTuple):
    """The step from one stage to the next: the chain driver of the kernel on the current
    stage, the next stage's energy and the joint values of the coordinates it adds."""

    driver: ChainDriver
    current: TemperedDensity
    following: TemperedDensity
    added: torch.Tensor
    steps: int

    def move_and_smooth(self, starts: List[torch.Tensor], steps: int):
        """Move every run's particles (one batched kernel run) and evaluate the next
        stage: ``[(codes, next_log_joint [R, K], log_smooth [R]) per run]``."""
        sizes = [s.shape[0] for s in starts]
        codes, log_joint = run_kernel(self.driver, torch.cat(starts), steps)
        nxt = _next_log_joint(self.following, codes, self.added)
        smooth = smooth_log_weights(nxt.double(), log_joint.double())
        return list(zip(codes.split(sizes), nxt.split(sizes), smooth.split(sizes)))


def _generate(
    step: _Transition,
    pools: List[_Pool],
    starts: List[torch.Tensor],
    log_weights: List[torch.Tensor],
    settings: _Settings,
) -> List[int]:
    """The generate loop of Algorithm 2 for all runs together; returns iterations."""
    iterations = [0] * len(pools)
    num_particles, gamma_thr = settings.num_particles, settings.gamma_thr
    while True:
        gammas = [pool.ess_ratio(num_particles) for pool in pools]
        active = [
            k for k, g in enumerate(gammas) if g < gamma_thr and iterations[k] < settings.i_max
        ]
        if not active:
            return iterations
        if settings.reseed is None:  # ARM: copies of the set before the move, moved afresh
            new = [starts[k] for k in active]
            weights = [log_weights[k] for k in active]
            steps = step.steps
        else:  # ARM-reseed: data rows brought to p_n by the kernel, uniform weights
            counts = [
                reseed_count(gammas[k], gamma_thr, num_particles, settings.min_reseed)
                for k in active
            ]
            rows = [torch.randint(0, settings.reseed.shape[0], (c,)) for c in counts]
            size = step.current.num_coords
            new = [settings.reseed[r, :size].to(starts[0].device) for r in rows]
            weights = [_uniform(c) for c in counts]
            steps = settings.reseed_steps
        for k, w, (codes, nxt, smooth) in zip(active, weights, step.move_and_smooth(new, steps)):
            pools[k].add(codes, w, nxt, smooth)
            iterations[k] += 1


def _smooth_and_resample(pool: _Pool, settings: _Settings):
    """Incremental log Z, updated weights, resampling back to ``R`` particles."""
    num_particles = settings.num_particles
    codes, log_weights, nxt, smooth = pool.combined()
    increment = log_z_increment(log_weights, smooth)
    updated = log_weights + smooth - increment
    ess = float(effective_sample_size(updated))
    resample = codes.shape[0] != num_particles or ess < settings.resample_threshold * num_particles
    if resample:
        index = residual_resample(updated, num_particles)
        codes, nxt, updated = codes[index], nxt[index], _uniform(num_particles)
    return codes, updated, nxt, float(increment), resample


def _augment(next_log_joint: torch.Tensor) -> torch.Tensor:
    """Draw the added coordinates' joint value index from
    :math:`p_{n+1}(x_{n+1} \\mid x_{[n]}) \\propto p^*_{n+1}(x_{[n]}, x_{n+1})`."""
    return torch.distributions.Categorical(logits=next_log_joint.double()).sample()


def _next_log_joint(
    following: TemperedDensity, codes: torch.Tensor, added: torch.Tensor
) -> torch.Tensor:
    """``[R, K]``: the next stage's log joint at every particle extended by every joint
    value of the added coordinates."""
    num, values = codes.shape[0], added.shape[0]
    extended = torch.cat(
        [
            codes.repeat_interleave(values, dim=0),
            added.to(codes.device).repeat(num, 1),
        ],
        dim=1,
    )
    out = [following.log_joint(chunk) for chunk in extended.split(CHUNK)]
    return torch.cat(out).reshape(num, values)


def _added_values(current: CoordinateLayout, following: CoordinateLayout, n: int) -> torch.Tensor:
    """Long ``[K, d]``: every joint value of the coordinates stage ``n + 2`` adds to stage
    ``n + 1`` (1-based), after checking that its layout extends stage ``n + 1``'s."""
    size = current.num_coords
    if following.num_coords <= size:
        raise ValueError(
            "stage {} has {} coordinates, stage {} has {}: each stage must add at least one "
            "coordinate".format(n + 2, following.num_coords, n + 1, size)
        )
    same = (
        torch.equal(following.is_scalar[:size], current.is_scalar)
        and torch.equal(
            torch.where(current.is_scalar, following.lower[:size], 0.0),
            torch.where(current.is_scalar, current.lower, 0.0),
        )
        and torch.equal(
            torch.where(current.is_scalar, following.upper[:size], 0.0),
            torch.where(current.is_scalar, current.upper, 0.0),
        )
        and torch.equal(
            torch.where(current.is_scalar, 0, following.num_categories[:size]),
            torch.where(current.is_scalar, 0, current.num_categories),
        )
    )
    if not same:
        raise ValueError(
            "the first {} coordinates of stage {} differ from stage {}'s (kind or "
            "support): stage n + 1 must extend stage n's flat codes".format(size, n + 2, n + 1)
        )
    new = CoordinateLayout(
        following.is_scalar[size:],
        following.lower[size:],
        following.upper[size:],
        following.num_categories[size:],
    )
    count = float(torch.prod(new.num_values().double()))
    if not math.isfinite(count) or count > MAX_NEW_STATES:
        raise UnsupportedModelError(
            "stage {} adds coordinates with {:g} joint values; the smooth step sums over "
            "them and supports at most {} (bounded) values. Add fewer coordinates per "
            "stage.".format(n + 2, count, MAX_NEW_STATES)
        )
    return StateIndex(new).decode(torch.arange(int(count)))


class _EnergyBuilder:
    """The energy of each stage, built when first needed."""

    def __init__(self, stages: List[Stage], max_plate_nesting: Optional[int]) -> None:
        self.stages = stages
        self.max_plate_nesting = max_plate_nesting

    def energy(self, n: int) -> ModelDensity:
        stage = self.stages[n]
        return ModelDensity(
            stage.model, stage.args, stage.kwargs, max_plate_nesting=self.max_plate_nesting
        )


def _as_stage(stage, n: int) -> Stage:
    if isinstance(stage, Stage):
        return stage
    if callable(stage):
        return Stage(stage)
    if isinstance(stage, tuple) and 1 <= len(stage) <= 3 and callable(stage[0]):
        return Stage(*stage)
    raise TypeError(
        "stage {} must be a Stage, a (model, args[, kwargs]) tuple or a model, got {}".format(
            n + 1, type(stage).__name__
        )
    )


def _check_arguments(kernel, stages, num_particles, num_moves, gamma_thr, i_max, num_runs):
    check_kernel(kernel, "arm", needs_invariance=True)
    if len(stages) < 2:
        raise ValueError("ARM needs a sequence of at least two stages, got {}".format(len(stages)))
    if int(num_particles) != num_particles or num_particles < 2:
        raise ValueError("num_particles must be an integer >= 2, got {}".format(num_particles))
    if num_moves != "sweep" and (
        isinstance(num_moves, str) or int(num_moves) != num_moves or num_moves < 0
    ):
        raise ValueError(
            "num_moves must be a non-negative integer or 'sweep', got {!r}".format(num_moves)
        )
    if not 0 < gamma_thr <= 1:
        raise ValueError("gamma_thr must lie in (0, 1], got {}".format(gamma_thr))
    if int(i_max) != i_max or i_max < 0:
        raise ValueError("i_max must be a non-negative integer, got {}".format(i_max))
    if int(num_runs) != num_runs or num_runs < 1:
        raise ValueError("num_runs must be a positive integer, got {}".format(num_runs))


def _check_reseed(reseed: torch.Tensor, num_coords: int) -> torch.Tensor:
    if not isinstance(reseed, torch.Tensor) or reseed.dim() != 2 or reseed.shape[1] != num_coords:
        raise ValueError(
            "reseed must be a [M, {}] tensor of last-stage codes, got {}".format(
                num_coords, getattr(reseed, "shape", type(reseed).__name__)
            )
        )
    return reseed.long()
