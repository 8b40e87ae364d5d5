r"""Simulation-based calibration: check a kernel on your own model.

Simulation-based calibration (SBC; Talts et al. 2018 [Talts2018]_) tests a sampler
on a model without knowing any posterior. If :math:`\tilde\theta \sim p(\theta)` and
:math:`\tilde y \sim p(y \mid \tilde\theta)`, then :math:`\tilde\theta` is a draw from
the posterior :math:`p(\theta \mid \tilde y)`; so for ``L`` exact posterior draws
:math:`\theta_1, \dots, \theta_L`, the rank of each scalar component of
:math:`\tilde\theta` among them,

.. math::

    r = \#\{l : \theta_l < \tilde\theta\} + U, \qquad
    U \sim \mathrm{Uniform}\{0, \dots, \#\{l : \theta_l = \tilde\theta\}\},

is uniform on :math:`\{0, \dots, L\}` (the ties of discrete values are broken at
random, which keeps the rank uniform). Over ``N`` simulations a sampler that is wrong
about the posterior shows a rank histogram that is not flat: a U shape for draws too
narrow, a hump for draws too wide, a slope for a biased location. :func:`sbc` runs
the simulations, :func:`rank_statistics` and :func:`uniformity_test` are the pure
parts, and :class:`SBCResult` holds the ranks with a chi-square test per component
and a plot of the rank histograms.

The posterior draws should be nearly independent: autocorrelated draws make even an
exact kernel's histogram lumpy. Thin the chains (``thinning``) to about one draw per
effective sample.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

import pyro
import torch
from pyro import poutine
from pyro.poutine.util import site_is_subsample

from pyro_gwg import cluster
from pyro_gwg.sites import UnsupportedModelError

__all__ = ["SBCResult", "rank_statistics", "sbc", "uniformity_test"]


def rank_statistics(
    truth: torch.Tensor, draws: torch.Tensor, generator: Optional[torch.Generator] = None
) -> torch.Tensor:
    """The rank of each component of ``truth`` among ``draws``, ties broken uniformly
    at random (so that ranks are uniform on ``{0, ..., L}`` for an exact sampler, for
    discrete values too).

    :param torch.Tensor truth: the value drawn from the prior, shape ``S``.
    :param torch.Tensor draws: ``L`` posterior draws, shape ``[L, *S]``.
    :param torch.Generator generator: random generator of the tie-breaking.
    :returns: long ranks in ``[0, L]``, shape ``S``.
    :rtype: torch.Tensor
    """
    truth = truth.to(draws.dtype)
    below = (draws < truth).sum(0)
    ties = (draws == truth).sum(0)
    u = torch.rand(truth.shape, generator=generator, dtype=torch.float64)
    return below + torch.floor(u * (ties + 1).double()).long()


def uniformity_test(
    ranks: torch.Tensor, num_draws: int, num_bins: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Pearson's chi-square test that ranks are uniform on ``{0, ..., num_draws}``,
    per component, from the counts of ``num_bins`` bins of consecutive ranks (each
    bin's expected count is its share of the ``num_draws + 1`` rank values).

    :param torch.Tensor ranks: long ``[N, K]`` ranks of ``N`` simulations.
    :param int num_draws: ``L``, the posterior draws each rank was taken among.
    :param int num_bins: bins, at most ``L + 1``.
    :returns: ``(statistic [K], p_value [K])``, with ``num_bins - 1`` degrees of freedom.
    :rtype: tuple
    """
    num_values = num_draws + 1
    if not 2 <= num_bins <= num_values:
        raise ValueError(
            "num_bins must be in [2, num_draws + 1] = [2, {}], got {}".format(num_values, num_bins)
        )
    bins = ranks.long() * num_bins // num_values  # [N, K]
    counts = torch.nn.functional.one_hot(bins, num_bins).sum(0).double()  # [K, B]
    width = torch.bincount(torch.arange(num_values) * num_bins // num_values, minlength=num_bins)
    expected = ranks.shape[0] * width.double() / num_values  # [B]
    statistic = ((counts - expected) ** 2 / expected).sum(-1)
    dof = torch.tensor((num_bins - 1) / 2.0, dtype=torch.float64)
    return statistic, torch.special.gammaincc(dof, statistic / 2)


class SBCResult:
    """The ranks of a simulation-based calibration run (see :func:`sbc`).

    :ivar dict ranks: ``{site: long [N, *site shape]}``, ranks in ``[0, L]``.
    :ivar int num_draws: ``L``.
    :ivar int num_bins: bins of the chi-square test and of :meth:`plot`.
    """

    def __init__(self, ranks: Dict[str, torch.Tensor], num_draws: int, num_bins: int) -> None:
        self.ranks = ranks
        self.num_draws = int(num_draws)
        self.num_bins = int(num_bins)

    @property
    def num_simulations(self) -> int:
        return next(iter(self.ranks.values())).shape[0]

    def p_values(self) -> Dict[str, torch.Tensor]:
        """Per site, the p-value of :func:`uniformity_test` of each component (shaped
        like the site).

        :rtype: dict
        """
        out = {}
        for name, ranks in self.ranks.items():
            flat = ranks.reshape(ranks.shape[0], -1)
            _, p = uniformity_test(flat, self.num_draws, self.num_bins)
            out[name] = p.reshape(ranks.shape[1:])
        return out

    def p_value(self) -> float:
        """One p-value for the whole run: the smallest component p-value times the
        number of components (Bonferroni), at most 1.

        :rtype: float
        """
        p = torch.cat([v.reshape(-1) for v in self.p_values().values()])
        return float(min(1.0, p.min().item() * p.numel()))

    def passed(self, alpha: float = 0.01) -> bool:
        """Whether the ranks are consistent with uniform at level ``alpha``
        (:meth:`p_value` at least ``alpha``).

        :rtype: bool
        """
        return self.p_value() >= alpha

    def plot(self, sites: Optional[Sequence[str]] = None, max_panels: int = 12, axes=None):
        """Rank histograms, one panel per scalar component (the first ``max_panels``),
        with the band that holds 99 % of a bin's count under uniform ranks
        (binomial quantiles). Needs matplotlib.

        :param sites: the sites to plot (default: all).
        :param int max_panels: most panels drawn.
        :param axes: a sequence of matplotlib axes to draw in (default: a new figure).
        :returns: the matplotlib figure.
        """
        import matplotlib.pyplot as plt
        from torch.distributions import Binomial

        panels = []
        for name in sites or list(self.ranks):
            flat = self.ranks[name].reshape(self.num_simulations, -1)
            for k in range(flat.shape[1]):
                label = name if flat.shape[1] == 1 else "{}[{}]".format(name, k)
                panels.append((label, flat[:, k]))
        panels = panels[:max_panels]
        if axes is None:
            columns = min(4, len(panels))
            rows = math.ceil(len(panels) / columns)
            figure, grid = plt.subplots(rows, columns, figsize=(3 * columns, 2.4 * rows))
            axes = [grid] if len(panels) == 1 else list(getattr(grid, "flat", grid))
        figure = axes[0].figure
        share = 1.0 / self.num_bins
        counts = torch.arange(self.num_simulations + 1)
        cdf = Binomial(self.num_simulations, torch.tensor(share)).log_prob(counts).exp().cumsum(0)
        low = int((cdf < 0.005).sum())
        high = int((cdf < 0.995).sum())
        for ax, (label, ranks) in zip(axes, panels):
            ax.axhspan(low, high, color="0.85", lw=0)
            ax.hist(ranks.numpy(), bins=self.num_bins, range=(0, self.num_draws + 1), color="C0")
            ax.set_title(label, fontsize=9)
            ax.set_yticks([])
        for ax in axes[len(panels) :]:
            ax.set_visible(False)
        figure.tight_layout()
        return figure


def _latent_sites(trace, observed: Sequence[str]) -> Dict[str, torch.Tensor]:
    return {
        name: site["value"].detach()
        for name, site in trace.nodes.items()
        if site["type"] == "sample"
        and not site_is_subsample(site)
        and name not in observed
        and not site["is_observed"]
        and not site["infer"].get("was_observed", False)
    }


def sbc(
    model: Callable,
    kernel: Callable,
    *args,
    observed: Optional[Sequence[str]] = None,
    num_simulations: int = 100,
    num_draws: int = 99,
    num_bins: Optional[int] = None,
    num_chains: int = 4,
    warmup_steps: int = 200,
    thinning: int = 5,
    sites: Optional[Sequence[str]] = None,
    statistics: Optional[Mapping[str, Callable]] = None,
    seed: int = 0,
    progress_bar: bool = True,
    num_workers: Optional[int] = None,
    ray_remote_args: Optional[dict] = None,
    **kwargs,
) -> SBCResult:
    r"""Simulation-based calibration of ``kernel`` on ``model`` (see the module's
    description).

    Each of ``num_simulations`` simulations draws the latent sites and the
    ``observed`` sites from the prior (``model`` run with its observations
    unconditioned), conditions ``model`` on the simulated observations
    (:func:`pyro.poutine.condition`), draws ``num_draws`` posterior draws with
    ``pyro_gwg.MCMC(kernel(conditioned_model), ...)`` (``num_chains`` chains, every
    ``thinning``-th draw kept, spread evenly over the chains) and records the rank of
    each latent component among them (:func:`rank_statistics`). Simulation ``i`` is
    seeded with ``seed + i``.

    Any function of the latent values has uniform ranks under an exact sampler, so
    ``statistics`` can rank quantities with more power than the raw components: the
    category index of a ``OneHotCategorical`` site (whose 0/1 components say little
    on their own), a sum over a field of bits, a model's derived quantity.

    Example::

        result = sbc(model, lambda m: GWG(m), y, observed=["y"], num_simulations=200)
        result.p_value(), result.plot()

    :param callable model: a Pyro model; its ``observed`` sites are simulated.
    :param callable kernel: ``kernel(model) -> MCMCKernel`` (a kernel class such as
        :class:`pyro_gwg.GWG`, or a function building one).
    :param args: the model's arguments (observations passed here are replaced by the
        simulated ones).
    :param observed: names of the sites to simulate and condition on (default: every
        site the model observes; each observed site must be among them).
    :param int num_simulations: ``N``.
    :param int num_draws: ``L``, posterior draws per simulation.
    :param int num_bins: bins of the test and the plot (default: the largest divisor of
        ``L + 1`` that is at most ``N / 5``, so each bin expects five counts or more).
    :param int num_chains: chains per posterior run.
    :param int warmup_steps: warmup steps per chain.
    :param int thinning: keep every ``thinning``-th draw.
    :param sites: latent sites to rank (default: every latent sample site, or none
        when ``statistics`` is given).
    :param dict statistics: ``{name: f}``, each ``f`` taking the dict of latent
        values (of the prior draw, and of the ``L`` posterior draws with a leading
        dimension) to a tensor with that leading dimension, e.g.
        ``{"year": lambda v: v["tau"].argmax(-1)}``; ranked beside ``sites``.
    :param int seed: seed of the first simulation.
    :param bool progress_bar: show a progress bar over simulations.
    :param int num_workers: ``None`` (default): the simulations run one after the
        other in this process; an integer: they run as Ray tasks, at most
        ``num_workers`` at once (see :mod:`pyro_gwg.cluster`). Each simulation is
        seeded by its own seed, so the ranks are the same either way.
    :param dict ray_remote_args: options of each simulation's :func:`ray.remote` task
        (default ``{"num_cpus": 1, "max_retries": 3}``).
    :param kwargs: the model's keyword arguments.
    :rtype: SBCResult
    :raises ~pyro_gwg.sites.UnsupportedModelError: for a model with a ``pyro.factor``
        site: its term cannot be simulated (write it as a distribution, a likelihood
        with ``obs=``). ``pyro.deterministic`` sites are neither simulated nor ranked.
    :raises ValueError: for an ``observed`` name that is no sample site of the model
        or is a ``pyro.deterministic`` site, a site in ``sites`` that is not latent, a
        statistic that is not callable, is named like a site or gives a shape without
        the draws' leading dimension.

    A kernel that is not exact (:attr:`~pyro_gwg.DiscreteKernel.exact` false, e.g.
    :class:`~pyro_gwg.DULA`) gets a ``UserWarning`` when the run starts: SBC then
    measures its bias.
    """
    from pyro_gwg.kernels.run import StuckChainWarning

    num_workers = cluster.check_num_workers(num_workers)
    for name, value, low in (
        ("num_simulations", num_simulations, 2),
        ("num_draws", num_draws, 1),
        ("num_chains", num_chains, 1),
        ("thinning", thinning, 1),
        ("warmup_steps", warmup_steps, 0),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError("{} must be an integer >= {}, got {!r}".format(name, low, value))
    if num_bins is None:
        num_bins = max(
            [
                b
                for b in range(2, num_draws + 2)
                if (num_draws + 1) % b == 0 and b <= num_simulations / 5
            ]
            or [2]
        )
    per_chain = math.ceil(num_draws / num_chains)
    # the first simulation's prior draw checks the names before any run
    pyro.set_rng_seed(seed)
    with poutine.block():
        prior = poutine.trace(poutine.uncondition(model)).get_trace(*args, **kwargs)
    observed = _observed_sites(prior, observed, sites)
    built = kernel(model)
    if not getattr(built, "exact", True):
        warnings.warn(
            "{} is not exact: its transitions do not leave the posterior invariant (it "
            "has no Metropolis-Hastings correction), so SBC measures its bias, and with "
            "enough simulations rejects it on any model. Calibrate an exact kernel (the "
            "MH-corrected form, e.g. DMALA for DULA) to check the model.".format(
                type(built).__name__
            ),
            UserWarning,
            stacklevel=2,
        )
    truth = _latent_sites(prior, observed)
    _check_statistics(statistics, truth)
    chosen = list(sites) if sites is not None else [] if statistics else list(truth)
    plan = _Simulation(
        model=model,
        kernel=kernel,
        args=args,
        kwargs=kwargs,
        observed=observed,
        chosen=chosen,
        statistics=statistics,
        mcmc=dict(
            num_samples=per_chain * thinning,
            warmup_steps=warmup_steps,
            num_chains=num_chains,
            thinning=thinning,
            disable_progbar=True,
        ),
        num_draws=num_draws,
    )
    results = cluster.map_tasks(
        _simulate,
        [(plan, seed + i) for i in range(num_simulations)],
        num_workers=num_workers,
        feature="sbc(num_workers=...)",
        remote_args=ray_remote_args,
        progress_bar=progress_bar,
        desc="SBC",
    )
    ranks = {name: torch.stack([r[name] for r, _ in results]) for name in results[0][0]}
    stuck = sum(held for _, held in results)
    if stuck:
        warnings.warn(
            "In {} of {} simulations a chain or a coordinate never moved after warmup "
            "(a StuckChainWarning of each run, not shown one by one). Coordinates that "
            "a posterior is sure of do this; a chain that cannot move makes the ranks of "
            "an exact kernel fail: if they do, run more warmup_steps and thinning.".format(
                stuck, num_simulations
            ),
            StuckChainWarning,
            stacklevel=2,
        )
    return SBCResult(ranks, num_draws, num_bins)


@dataclasses.dataclass
class _Simulation:
    """What one simulation of :func:`sbc` needs (it travels to a Ray worker)."""

    model: Callable
    kernel: Callable
    args: tuple
    kwargs: dict
    observed: list
    chosen: list
    statistics: Optional[Mapping[str, Callable]]
    mcmc: dict  # arguments of the posterior run's MCMC
    num_draws: int


def _simulate(task: Tuple[_Simulation, int]) -> Tuple[Dict[str, torch.Tensor], bool]:
    """One simulation, seeded by its seed: the ranks ``{name: [...]}`` and whether a
    StuckChainWarning was held back."""
    from pyro_gwg.kernels.run import StuckChainWarning
    from pyro_gwg.mcmc import MCMC

    plan, seed = task
    model, args, kwargs = plan.model, plan.args, plan.kwargs
    pyro.set_rng_seed(seed)
    with poutine.block():
        prior = poutine.trace(poutine.uncondition(model)).get_trace(*args, **kwargs)
    truth = _latent_sites(prior, plan.observed)
    data = {name: prior.nodes[name]["value"].detach() for name in plan.observed}
    mcmc = MCMC(plan.kernel(poutine.condition(model, data=data)), **plan.mcmc)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(*args, **kwargs)
    stuck = _reissue(caught, StuckChainWarning)
    samples = mcmc.get_samples()
    pooled = samples[next(iter(truth))].shape[0]
    keep = torch.linspace(0, pooled - 1, plan.num_draws).round().long()
    draws = {name: samples[name][keep].to(truth[name].dtype) for name in truth}
    generator = torch.Generator().manual_seed(seed)
    ranks = {
        name: rank_statistics(true_value, drawn, generator)
        for name, (true_value, drawn) in _ranked(plan.chosen, plan.statistics, truth, draws).items()
    }
    return ranks, stuck


#: where warnings re-issued by :func:`_reissue` are registered, so that the default
#: filter shows each of them once, not once per simulation
_SEEN: dict = {}


def _reissue(caught, held: type) -> bool:
    """Re-issue the warnings ``caught`` during a run, except those of category
    ``held``; whether any was held back."""
    held_back = False
    for w in caught:
        if issubclass(w.category, held):
            held_back = True
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, registry=_SEEN)
    return held_back


def _check_statistics(statistics, truth) -> None:
    for name, f in (statistics or {}).items():
        if not callable(f):
            raise ValueError("statistic {!r} must be a function of the latent values".format(name))
        if name in truth:
            raise ValueError(
                "statistic {!r} has the name of a latent site: name it otherwise".format(name)
            )


def _ranked(chosen, statistics, truth, draws) -> Dict[str, Tuple[torch.Tensor, torch.Tensor]]:
    """``{name: (true value, L draws)}`` of the chosen sites and the statistics."""
    pairs = {name: (truth[name], draws[name]) for name in chosen}
    num_draws = next(iter(draws.values())).shape[0]
    for name, f in (statistics or {}).items():
        true_value, drawn = torch.as_tensor(f(truth)), torch.as_tensor(f(draws))
        if drawn.shape != (num_draws,) + true_value.shape:
            raise ValueError(
                "statistic {!r} gave shape {} on the prior draw and {} on {} posterior "
                "draws; it must keep the draws' leading dimension".format(
                    name, tuple(true_value.shape), tuple(drawn.shape), num_draws
                )
            )
        pairs[name] = (true_value, drawn.to(true_value.dtype))
    return pairs


def _observed_sites(trace, observed: Optional[Sequence[str]], sites) -> list:
    """The names of the sites to simulate, checked against the prior trace."""
    names = [
        n for n, s in trace.nodes.items() if s["type"] == "sample" and not site_is_subsample(s)
    ]
    factors = [n for n in names if trace.nodes[n]["infer"].get("is_auxiliary", False)]
    if factors:
        raise UnsupportedModelError(
            "sbc cannot check a model with pyro.factor site(s) {}: SBC simulates the "
            "latent sites and the observations from their distributions, and the term a "
            "factor adds to the log density cannot be simulated, so the simulated values "
            "would not come from the model and even an exact kernel would fail the check. "
            "Write the term as a distribution: a likelihood as a sample site with obs= "
            "(e.g. pyro.sample('y', dist.Normal(x.sum(-1), 0.5), obs=y) in place of "
            "pyro.factor('lik', -2.0 * (y - x.sum(-1)) ** 2)), a prior term as part of "
            "the latent site's distribution.".format(", ".join(map(repr, factors)))
        )
    computed = {n for n in names if trace.nodes[n]["infer"].get("_deterministic", False)}
    was_observed = [
        n for n in names if trace.nodes[n]["infer"].get("was_observed", False) and n not in computed
    ]
    if observed is None:
        observed = was_observed
    observed = list(observed)
    for name in observed:
        if name not in names:
            raise ValueError(
                "observed site {!r} is not a sample site of the model (sample sites: {})".format(
                    name, names
                )
            )
        if name in computed:
            raise ValueError(
                "observed site {!r} is a pyro.deterministic site: the model computes it "
                "from the other sites, so SBC neither simulates nor conditions on it; "
                "leave it out of observed".format(name)
            )
    for name in was_observed:
        if name not in observed:
            raise ValueError(
                "the model observes site {!r}, which observed= does not list: SBC must "
                "simulate every observation; add it, or leave observed=None".format(name)
            )
    latent = _latent_sites(trace, observed)
    for name in sites or ():
        if name not in latent:
            raise ValueError(
                "site {!r} is not a latent sample site of the model (latent sites: {})".format(
                    name, list(latent)
                )
            )
    if not latent:
        raise ValueError("the model has no latent sample site to calibrate")
    return observed
