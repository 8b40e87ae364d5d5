"""``fit_many``: one :class:`pyro_gwg.MCMC` run per data set, in this process or as
Ray tasks."""

from __future__ import annotations

from typing import Callable, List, Mapping, Optional, Sequence, Tuple

from tqdm.auto import tqdm

from pyro_gwg import cluster
from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.mcmc import MCMC
from pyro_gwg.runner.strategies import RayBlocks, run_block_task

__all__ = ["fit_many"]


def fit_many(
    model: Callable,
    kernel: Callable,
    datasets: Sequence,
    num_samples: int,
    warmup_steps: Optional[int] = None,
    *,
    num_chains: int = 1,
    seed: int = 0,
    num_workers: Optional[int] = None,
    ray_remote_args: Optional[dict] = None,
    progress_bar: bool = True,
    **mcmc_kwargs,
) -> List[MCMC]:
    """Fit ``model`` to each of many data sets: one :class:`~pyro_gwg.MCMC` run per
    data set, in this process or as Ray tasks.

    Data set ``i`` is run as ``MCMC(kernel(model), num_samples, warmup_steps,
    num_chains=num_chains, **mcmc_kwargs)`` under its own seed (derived from ``seed``
    and ``i`` by :func:`pyro_gwg.cluster.block_seeds`), so the draws are the same
    whether the runs are local or distributed, and whatever the number of workers
    (with ``jit_compile=False`` or ``True``; see ``chains_per_block`` of
    :class:`~pyro_gwg.MCMC`). Each returned object has the run's results
    (:attr:`~pyro_gwg.mcmc.MCMC.draws`): ``get_samples``, ``summary``,
    ``diagnostics`` and :func:`~pyro_gwg.to_inference_data` work on it.

    Example (one variable selection per gene)::

        fits = fit_many(model, GWG, [(X, y_gene) for y_gene in Y.T], 1000, 500,
                        num_chains=4, num_workers=8)
        inclusion = torch.stack([f.get_samples()["gamma"].float().mean(0) for f in fits])

    :param callable model: a Pyro model.
    :param callable kernel: ``kernel(model) -> DiscreteKernel``, e.g. the class
        :class:`~pyro_gwg.GWG` or ``lambda m: GWG(m, num_flips="auto")``.
    :param datasets: one entry per fit: a tuple (or list) of the model's positional
        arguments, a dict of its keyword arguments, or a pair ``(args tuple, kwargs
        dict)``.
    :param int num_samples: draws per chain after warmup.
    :param int warmup_steps: warmup steps per chain (default ``num_samples``).
    :param int num_chains: chains per fit.
    :param int seed: the seed all the fits' seeds derive from.
    :param int num_workers: ``None``: the fits run one after the other here; an
        integer: as Ray tasks, at most ``num_workers`` at once.
    :param dict ray_remote_args: options of each fit's :func:`ray.remote` task.
    :param bool progress_bar: a progress bar over the fits.
    :param mcmc_kwargs: further arguments of :class:`~pyro_gwg.MCMC` (``thinning``,
        ``save_params``, ``initial_params``, ``device``, ...).
    :rtype: list
    """
    if isinstance(datasets, (str, bytes)) or not isinstance(datasets, Sequence):
        raise TypeError(
            "datasets must be a sequence (e.g. a list) with one entry per fit, got {}.".format(
                type(datasets).__name__
            )
        )
    if not datasets:
        raise ValueError("datasets is empty: give at least one data set to fit.")
    if not callable(kernel) or isinstance(kernel, DiscreteKernel):
        raise TypeError(
            "kernel must build a kernel from a model, e.g. GWG (the class) or "
            "lambda m: GWG(m, num_flips='auto'); got {!r}.".format(kernel)
        )
    num_workers = cluster.check_num_workers(num_workers)
    data = [_model_arguments(i, entry) for i, entry in enumerate(datasets)]
    fits = [
        MCMC(
            kernel(model),
            num_samples,
            warmup_steps,
            num_chains=num_chains,
            disable_progbar=True,
            **mcmc_kwargs,
        )
        for _ in data
    ]
    seeds = cluster.block_seeds(seed, len(data))
    if num_workers is None:
        if ray_remote_args is not None:
            raise ValueError("ray_remote_args is for Ray runs: give num_workers too.")
        for fit, (args, kwargs), s in tqdm(
            list(zip(fits, data, seeds)), desc="fits", unit="fit", disable=not progress_bar
        ):
            fit._run(args, kwargs, seeds=[s])
        return fits
    whole = slice(0, num_chains)
    results = cluster.run_tasks(
        run_block_task,
        [
            RayBlocks(fit._config()).task(whole, s, fit.initial_params, args, kwargs)
            for fit, (args, kwargs), s in zip(fits, data, seeds)
        ],
        num_workers=num_workers,
        feature="fit_many(num_workers=...)",
        remote_args=ray_remote_args,
        progress_bar=progress_bar,
        desc="fits",
    )
    for fit, (args, kwargs), result in zip(fits, data, results):
        fit._receive(args, kwargs, result)
    return fits


def _model_arguments(index: int, entry) -> Tuple[tuple, dict]:
    """``(args, kwargs)`` of one entry of ``fit_many``'s ``datasets``."""
    if isinstance(entry, Mapping):
        return (), dict(entry)
    if (
        isinstance(entry, tuple)
        and len(entry) == 2
        and isinstance(entry[0], tuple)
        and isinstance(entry[1], Mapping)
    ):
        return entry[0], dict(entry[1])
    if isinstance(entry, (tuple, list)):
        return tuple(entry), {}
    raise TypeError(
        "datasets[{}] must be a tuple of the model's positional arguments, a dict of its "
        "keyword arguments or a pair (args, kwargs); got {}. For a model of one "
        "argument write (value,).".format(index, type(entry).__name__)
    )
