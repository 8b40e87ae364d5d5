"""``pyro_gwg.MCMC``: Pyro's MCMC interface with chains run as one batched tensor.

:class:`MCMC` subclasses Pyro's :class:`~pyro.infer.mcmc.api.AbstractMCMC` and mirrors
:class:`pyro.infer.MCMC` (its arguments, their order and defaults, ``run``,
``get_samples``, ``diagnostics``, ``summary``, ``hook_fn``, ``save_params``) and adds the
keyword-only ``chain_method="vectorized"``: all
chains advance together as a leading batch dimension of one state tensor, so a step of
hundreds or thousands of chains costs far less than as many single-chain steps (on
the CPU measured by ``benchmarks/chain_throughput.py``: 256 chains take about 7x one
chain's step time, not 256x), on the CPU or on the GPU that holds the model's
tensors. ``"sequential"`` runs the chains one after the other with the same fast loop;
``"parallel"`` hands them to :class:`pyro.infer.MCMC` (one process per chain).

Vectorised and sequential runs drive the kernel's chains through a
:class:`~pyro_gwg.driver.ChainDriver` (the chain loop of the package) that the kernel
starts for the run (:meth:`~pyro_gwg.kernels.base.DiscreteKernel.start`; the kernel
itself is left as it is), in blocks of
:data:`~pyro_gwg.runner.strategies.STEPS_PER_CALL` calls of the compiled transition;
warmup steps of a kernel that adapts, and every step of a run with a ``hook_fn``, go
one at a time. With the kernels' default ``jit_compile="auto"`` the first step runs
the model eagerly, the next ones the transition's captured graph while AOTInductor
compiles it in a background process, and the compiled package from the first step
after it is ready (at once when the disk cache holds it; see :mod:`pyro_gwg.compile`):
sampling never waits for the compiler, and the progress bar says when the run is
compiling. Draws are stored as integer codes and stay codes after
the run (:class:`~pyro_gwg.runner.draws.Draws`, :attr:`MCMC.draws`), decoded when
asked. The per-draw statistics of the kernel accumulate on the device, and the host
synchronises only to refresh the progress bar.

This module is the facade: each chain method is a strategy of
:mod:`pyro_gwg.runner.strategies`, the argument checks are in
:mod:`pyro_gwg.runner.checks`, and :func:`~pyro_gwg.runner.many.fit_many` runs one
:class:`MCMC` per data set.

A run stopped by ``KeyboardInterrupt`` (Ctrl-C) keeps the draws taken so far (see
:attr:`MCMC.interrupted`); a run that raises any other error keeps nothing, so that no
results of an earlier run outlive it.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import numbers
import warnings
from typing import Callable, Dict, List, Mapping, Optional, Union

import torch
from pyro.infer.mcmc.api import AbstractMCMC
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from pyro_gwg import cluster
from pyro_gwg._validation import check_bool, check_integer, is_integer
from pyro_gwg.auto import Auto
from pyro_gwg.runner.checks import (
    check_device,
    check_initial_params,
    check_save_params,
    check_transforms,
)
from pyro_gwg.runner.draws import DrawBuffers, Draws
from pyro_gwg.runner.strategies import (
    RAY_CHAINS_PER_BLOCK,
    RayBlocks,
    RunConfig,
    on_device,
    strategy_for,
    validation,
)

__all__ = ["MCMC"]

_CHAIN_METHODS = ("vectorized", "sequential", "parallel", "ray")


class MCMC(AbstractMCMC):
    """Run a pyro-gwg kernel on many chains; the interface of :class:`pyro.infer.MCMC`.

    A subclass of Pyro's :class:`~pyro.infer.mcmc.api.AbstractMCMC` that takes
    :class:`pyro.infer.MCMC`'s arguments in its order and with its defaults; the
    arguments of its own (``chain_method``, ``thinning``, ``device``) are keyword-only.
    Every argument is checked when the object is built; a wrong one raises a
    ``TypeError`` or ``ValueError`` that names it. An integer in the place of
    ``initial_params`` (the fourth positional argument) is refused with a
    ``TypeError``: before this order was Pyro's, ``num_chains`` stood there.

    :param kernel: a pyro-gwg kernel, e.g. :class:`~pyro_gwg.GWG`; or a
        :class:`~pyro_gwg.MixedGibbs` (continuous and discrete sites), or Pyro's
        :class:`~pyro.infer.HMC` / :class:`~pyro.infer.NUTS` on a model whose discrete
        sites are all marked for enumeration: these two run with
        ``chain_method="vectorized"`` (or ``"sequential"``), the discrete half of all
        the chains as one batch and one HMC/NUTS kernel per chain (Pyro has none
        batched over chains), each chain's sweep as under :class:`pyro.infer.MCMC`
        (see :meth:`MixedGibbs.start <pyro_gwg.kernels.mixed.MixedGibbs.start>`); their
        draws hold the continuous sites' values as :class:`pyro.infer.MCMC` returns
        them (constrained), and their ``initial_params`` are unconstrained, as there.
    :param int num_samples: draws per chain after warmup (before thinning), at least 1.
    :param int warmup_steps: warmup (adaptation) steps per chain, at least 0; ``None``
        (the default) means ``num_samples`` steps, as in :class:`pyro.infer.MCMC`.
    :param dict initial_params: initial model values ``{site: value}``, each with a
        leading chain dimension of size ``num_chains`` (tensors, numpy arrays or nested
        lists; arrays and lists are converted to tensors); for one chain also without
        it, as :class:`pyro.infer.MCMC` takes them.
    :param int num_chains: number of chains, at least 1.
    :param callable hook_fn: ``hook_fn(kernel, params, stage, i)`` after every step, as
        in Pyro: ``stage`` is ``"Warmup"`` or ``"Sample"`` and ``i`` counts the steps
        of that stage from 0; ``params`` holds the model values of all chains
        ``[C, ...]`` (computing them costs time, so runs without a hook are faster).
    :param str mp_context: multiprocessing context for ``chain_method="parallel"``
        (default ``"spawn"``: PyTorch's OpenMP thread pool does not survive ``fork``
        once the parent process has used it, so forked chains can hang).
    :param bool disable_progbar: no progress bar.
    :param bool disable_validation: disable Pyro's distribution validation during the
        run (``True``, the default, as in :class:`pyro.infer.MCMC`), enable it
        (``False``) or leave the global setting as it is (``None``).
    :param dict transforms: ``None`` or ``{}``: discrete sites have no transforms to an
        unconstrained space, so any entry is refused; :attr:`transforms` is ``{}``.
    :param list save_params: names of the latent sites whose draws are kept (``None``:
        all). Only these sites are returned by the results methods and converted by
        :func:`~pyro_gwg.to_inference_data`; a name that is not a latent site is
        refused when the run starts. Vectorised and sequential runs store only these
        sites' draws; ``chain_method="parallel"`` (Pyro's runner) drops the others at
        the end of the run. The ``log_likelihood`` group of
        :func:`~pyro_gwg.to_inference_data` needs every latent site, so it is left out
        (with a warning) when some are not saved.
    :param str chain_method: ``"vectorized"`` (all chains as one batch, or
        ``chains_per_block`` at a time), ``"sequential"`` (one chain after the other),
        ``"parallel"`` (processes, through :class:`pyro.infer.MCMC`) or ``"ray"``
        (blocks of ``chains_per_block`` chains, each run as vectorised chains in a Ray
        task, at most ``num_workers`` at once; see :mod:`pyro_gwg.cluster` and
        :doc:`/distributed`). Keyword-only.
    :param int chains_per_block: chains run together as one batch, each block with its
        own seed (derived from one draw of torch's global generator, so
        :func:`pyro.set_rng_seed` fixes them all). The draws depend on the blocks and
        the seed only: a ``"ray"`` run gives the same draws with any ``num_workers``,
        and the same as a ``"vectorized"`` run with the same ``chains_per_block``
        (every compiled form draws the same random numbers as the eager transition,
        so up to rounding in the fused kernels the draws do not depend on when a
        background compile ends). Default: all chains for
        ``"vectorized"``, ``min(num_chains,``
        :data:`~pyro_gwg.runner.strategies.RAY_CHAINS_PER_BLOCK` ``)`` for ``"ray"``;
        ``"sequential"`` is the same as ``chains_per_block=1``.
        Keyword-only.
    :param int num_workers: ``"ray"`` only: blocks in flight at once (default: the
        CPUs of the Ray cluster). Keyword-only.
    :param dict ray_remote_args: ``"ray"`` only: options of each block's
        :func:`ray.remote` task (default ``{"num_cpus": 1, "max_retries": 3}``; a task
        whose worker dies is re-run, with the same seed, up to ``max_retries`` times).
        With ``"num_gpus"`` the blocks run on their worker's GPU unless ``device``
        says otherwise. Keyword-only.
    :param int thinning: keep every ``thinning``-th draw (``num_samples // thinning``
        draws per chain are stored); at most ``num_samples``. Keyword-only.
    :param device: a ``torch.device``, a string such as ``"cuda:0"`` or a CUDA index;
        tensor arguments of the model (and ``initial_params``) are moved there before
        the run, so that a model that builds its tensors from its data runs there
        (with ``"ray"``: on each worker). Keyword-only.

    :ivar bool interrupted: the last :meth:`run` was stopped by ``KeyboardInterrupt``
        (Ctrl-C). It kept the draws and statistics taken until then
        (:attr:`num_draws_kept` per chain; with ``chain_method="sequential"`` the
        chains finished by then, or the interrupted chain alone if that keeps more),
        warned how many, and re-raised the interrupt; the results methods work on
        these draws and warn that they are partial.
    :ivar int num_draws_kept: draws per chain held after the last :meth:`run` (``None``
        before the first run).
    :ivar dict timing: wall-clock seconds of the last run: ``setup`` (tracing, initial
        states), ``warmup`` and ``sampling``; ``compile``, the part of those two the
        chains waited for compilation (:attr:`~pyro_gwg.driver.ChainDriver.compile_seconds`:
        capturing transitions, loading compiled packages, compiles that the chains
        wait for); and ``background_compile``, the seconds of the background compiles
        that ended during the run (:attr:`~pyro_gwg.driver.ChainDriver.background_compile_seconds`,
        while the chains ran), summed over the blocks of chains (with ``"ray"`` summed
        over the workers' blocks, and ``wall``, the run's wall-clock time;
        ``chain_method="parallel"`` measures neither compile time); empty when the last
        run raised.

    Example::

        >>> import pyro, torch
        >>> from pyro_gwg import GWG, MCMC
        >>> from pyro_gwg.models import lattice_ising
        >>> pyro.set_rng_seed(0)
        >>> mcmc = MCMC(GWG(lattice_ising), num_samples=100, num_chains=64, disable_progbar=True)
        >>> mcmc.run(size=4, coupling=0.3)
        >>> mcmc.get_samples(group_by_chain=True)["x"].shape
        torch.Size([64, 100, 4, 4])
    """

    def __init__(
        self,
        kernel: MCMCKernel,
        num_samples: int,
        warmup_steps: Optional[int] = None,
        initial_params: Optional[Dict[str, torch.Tensor]] = None,
        num_chains: int = 1,
        hook_fn: Optional[Callable] = None,
        mp_context: Optional[str] = None,
        disable_progbar: bool = False,
        disable_validation: Optional[bool] = True,
        transforms: Optional[Mapping] = None,
        save_params: Optional[List[str]] = None,
        *,
        chain_method: str = "vectorized",
        thinning: int = 1,
        device: Union[None, str, int, torch.device] = None,
        chains_per_block: Optional[int] = None,
        num_workers: Optional[int] = None,
        ray_remote_args: Optional[dict] = None,
    ) -> None:
        if is_integer(initial_params):
            raise TypeError(
                "pyro_gwg.MCMC takes pyro.infer.MCMC's argument order: (kernel, num_samples, "
                "warmup_steps, initial_params, num_chains, hook_fn, ...), so its fourth "
                "positional argument is initial_params, got the integer {}. The order "
                "before was (kernel, num_samples, warmup_steps, num_chains, ...): pass "
                "num_chains={} by keyword.".format(initial_params, initial_params)
            )
        if not isinstance(chain_method, str) or chain_method not in _CHAIN_METHODS:
            raise ValueError(
                "chain_method must be one of {}, got {!r}".format(_CHAIN_METHODS, chain_method)
            )
        strategy_for(kernel, chain_method)  # a kernel it runs, under this chain method
        num_samples = check_integer("num_samples", num_samples, 1, "draws per chain")
        num_chains = check_integer("num_chains", num_chains, 1, "chains")
        super().__init__(kernel, num_chains, check_transforms(transforms))
        self.num_samples = num_samples
        if warmup_steps is None:  # as in pyro.infer.MCMC
            warmup_steps = num_samples
        self.warmup_steps = check_integer("warmup_steps", warmup_steps, 0, "steps per chain")
        self.thinning = check_integer("thinning", thinning, 1, "keep every thinning-th draw")
        if self.thinning > self.num_samples:
            raise ValueError(
                "thinning={} is more than num_samples={}: no draw would be kept. Use "
                "thinning <= num_samples.".format(self.thinning, self.num_samples)
            )
        self.chain_method = chain_method
        self.chains_per_block = self._check_blocks(chains_per_block, num_workers, ray_remote_args)
        self.num_workers = cluster.check_num_workers(num_workers)
        self.ray_remote_args = dict(ray_remote_args or {})
        self.initial_params = check_initial_params(initial_params, self.num_chains)
        self.device = check_device(device)
        if hook_fn is not None and not callable(hook_fn):
            raise TypeError(
                "hook_fn must be callable as hook_fn(kernel, params, stage, i), or None; "
                "got {!r}".format(hook_fn)
            )
        self.hook_fn = hook_fn
        self.disable_progbar = check_bool("disable_progbar", disable_progbar)
        if disable_validation is not None:
            disable_validation = check_bool("disable_validation", disable_validation)
        self.disable_validation = disable_validation
        self.save_params = check_save_params(save_params)
        methods = tuple(multiprocessing.get_all_start_methods())
        if mp_context is not None and mp_context not in methods:
            raise ValueError(
                "mp_context must be one of {} (or None for 'spawn'), got {!r}".format(
                    methods, mp_context
                )
            )
        self.mp_context = mp_context
        self._args, self._kwargs = (), {}
        self._status: Optional[str] = None  # None (never run), running, done, interrupted, failed
        self._clear()

    def _check_blocks(self, chains_per_block, num_workers, ray_remote_args) -> int:
        """The block size, checked against the chain method."""
        method = self.chain_method
        if method != "ray":
            for name, value in (("num_workers", num_workers), ("ray_remote_args", ray_remote_args)):
                if value is not None:
                    raise ValueError(
                        "{} is for chain_method='ray' (got chain_method={!r}).".format(name, method)
                    )
        if ray_remote_args is not None and not isinstance(ray_remote_args, Mapping):
            raise TypeError(
                "ray_remote_args must be a dict of ray.remote options, got {!r}.".format(
                    ray_remote_args
                )
            )
        if chains_per_block is None:
            defaults = {"sequential": 1, "ray": min(self.num_chains, RAY_CHAINS_PER_BLOCK)}
            return defaults.get(method, self.num_chains)
        if method in ("sequential", "parallel"):
            raise ValueError(
                "chains_per_block is for chain_method='vectorized' or 'ray' (got "
                "chain_method={!r}; 'sequential' runs blocks of one chain).".format(method)
            )
        chains_per_block = check_integer("chains_per_block", chains_per_block, 1)
        if chains_per_block > self.num_chains:
            raise ValueError(
                "chains_per_block={} is more than num_chains={}.".format(
                    chains_per_block, self.num_chains
                )
            )
        return chains_per_block

    def _clear(self) -> None:
        """Forget the results of the last run."""
        self._draws: Optional[Draws] = None
        self.timing: Dict[str, float] = {}
        self.interrupted = False
        self.num_draws_kept: Optional[int] = None

    # ------------------------------------------------------------------ running
    def run(self, *args, **kwargs) -> None:
        """Run the chains; the model's arguments are passed through.

        The results of an earlier run are dropped first. ``KeyboardInterrupt`` keeps
        the draws taken so far (see :attr:`interrupted`) and is re-raised; any other
        error leaves no results.

        :raises UnsupportedModelError: for a model the kernel cannot sample (naming
            the site).
        """
        self._run(args, kwargs)

    def _config(self) -> RunConfig:
        """The settings of a run."""
        return RunConfig(
            kernel=self.kernel,
            num_samples=self.num_samples,
            warmup_steps=self.warmup_steps,
            num_chains=self.num_chains,
            chains_per_block=self.chains_per_block,
            thinning=self.thinning,
            initial_params=self.initial_params,
            save_params=self.save_params,
            hook_fn=self.hook_fn,
            disable_progbar=self.disable_progbar,
            disable_validation=self.disable_validation,
            device=self.device,
            mp_context=self.mp_context,
            num_workers=self.num_workers,
            ray_remote_args=self.ray_remote_args,
        )

    def _run(self, args: tuple, kwargs: dict, seeds: Optional[List[int]] = None) -> None:
        """:meth:`run`, with the blocks' seeds given (a fit of :func:`fit_many`) or
        drawn."""
        self._clear()
        self._status = "running"
        kernel, config = self.kernel, self._config()
        if isinstance(kernel, Auto):  # the kernel its plan for these arguments runs
            kernel.plan(*args, **kwargs)
            kernel = kernel.kernel
            config = dataclasses.replace(config, kernel=kernel)
        strategy_class, starter = strategy_for(kernel, self.chain_method)
        strategy = strategy_class(config, starter)
        initial_params = self.initial_params
        if strategy.moves_to_device:
            args, kwargs, initial_params = on_device(self.device, args, kwargs, initial_params)
        self._args, self._kwargs = args, kwargs
        self.timing = strategy.timing
        try:
            with validation(self.disable_validation):
                self._draws = strategy.run(args, kwargs, initial_params, seeds)
        except KeyboardInterrupt:
            self._keep_partial(strategy.buffers)
            raise
        except BaseException:
            self._clear()
            self._status = "failed"
            raise
        if isinstance(self.kernel, Auto):  # the sites it summed out, drawn per draw
            draws = self._draws
            drawn = self.kernel.enumerated_draws(draws.samples(group_by_chain=True), args, kwargs)
            continuous = {**draws.continuous, **drawn}
            self._draws = Draws(draws.codes, draws.statistics, draws.decoder, continuous)
        self.num_draws_kept = self._draws.num_draws
        self._status = "done"

    def _keep_partial(self, buffers: Optional[DrawBuffers]) -> None:
        """After ``KeyboardInterrupt``: keep the largest block of chains x draws taken,
        and warn."""
        self._status, self.interrupted = "interrupted", True
        chains, kept, least = 0, 0, None
        for c, count in enumerate(buffers.kept if buffers is not None else []):
            least = count if least is None else min(least, count)
            if (c + 1) * least > chains * kept:
                chains, kept = c + 1, least
        self.num_draws_kept = kept
        if kept == 0:
            warnings.warn(
                "pyro_gwg.MCMC.run() was interrupted and kept no draws (it stopped during "
                "warmup{}); call run() again.".format(
                    ", or ran its chains in worker processes (chain_method={!r})".format(
                        self.chain_method
                    )
                    if self.chain_method in ("parallel", "ray")
                    else ""
                ),
                UserWarning,
                stacklevel=3,
            )
            return
        self._draws = buffers.draws(chains, kept)
        warnings.warn(
            "pyro_gwg.MCMC.run() was interrupted: kept {} draws per chain of {} chains "
            "(of {} draws per chain of {} chains asked for). get_samples(), "
            "get_statistics(), diagnostics(), summary() and to_inference_data() work on "
            "these partial results.".format(kept, chains, buffers.num_kept, self.num_chains),
            UserWarning,
            stacklevel=3,
        )

    def _receive(self, args: tuple, kwargs: dict, result) -> None:
        """Take the results of a run made elsewhere (a Ray task of :func:`fit_many`)
        as this object's results."""
        self._clear()
        self._args, self._kwargs = args, kwargs
        strategy = RayBlocks(self._config())
        self._draws = strategy.gather(strategy.local_density(args, kwargs), [result])
        self.timing = strategy.timing
        self.num_draws_kept = self._draws.num_draws
        self._status = "done"

    # ------------------------------------------------------------------ results
    @property
    def draws(self) -> Draws:
        """The draws of the last run (:class:`~pyro_gwg.runner.draws.Draws`: integer
        codes, per-draw statistics, decoding and summaries); the results methods
        below read them.

        :raises RuntimeError: when there are none (no run yet, or the last one raised
            or kept nothing); a warning when they are partial (see :attr:`interrupted`).
        """
        return self._results()

    def _results(self) -> Draws:
        """The draws of the last run; a clear error where there are none, a warning
        (for the caller of the caller) where they are partial."""
        if self._draws is None:
            if self._status is None:
                reason = "has no draws yet: call run() first."
            elif self._status == "running":
                reason = "has no draws yet: run() is still running."
            elif self._status == "interrupted":
                reason = (
                    "has no draws: the last call of run() was interrupted before it kept "
                    "any draw; call run() again."
                )
            else:
                reason = (
                    "has no draws: the last call of run() raised an error (see its "
                    "traceback) and kept nothing; fix the cause and call run() again."
                )
            raise RuntimeError("pyro_gwg.MCMC " + reason)
        if self.interrupted:
            warnings.warn(
                "These results are partial: the last call of run() was interrupted and "
                "kept {} draws per chain of {} chains (of {} draws per chain asked "
                "for).".format(
                    self._draws.num_draws,
                    self._draws.num_chains,
                    self.num_samples // self.thinning,
                ),
                UserWarning,
                stacklevel=3,
            )
        return self._draws

    def get_samples(
        self, num_samples: Optional[int] = None, group_by_chain: bool = False
    ) -> Dict[str, torch.Tensor]:
        """Draws ``{site: [num_chains, num_draws, ...]}`` (or flattened over chains), as
        model values: ``Categorical`` sites as category indices (``torch.long``, usable
        as indices, e.g. by :class:`pyro.infer.Predictive`), every other site as floats
        of the default dtype, as :class:`pyro.infer.MCMC` returns them.

        The draws are decoded from the stored integer codes at every call (about a
        million codes at a time, see :data:`~pyro_gwg.runner.draws.DECODE_ELEMENTS`);
        keep the result rather than calling this repeatedly.

        :param int num_samples: draw this many samples with replacement (as Pyro does);
            only those are decoded.
        :param bool group_by_chain: keep the chain dimension.
        """
        draws = self._results()
        if num_samples is not None:
            num_samples = check_integer("num_samples", num_samples, 1, "draws to select")
        return draws.samples(num_samples, group_by_chain)

    def get_statistics(self) -> Dict[str, torch.Tensor]:
        """Per-draw kernel statistics ``{name: [num_chains, num_draws]}`` (``accepted``,
        ``accept_prob``, ``num_changed``, ``log_joint``, ...)."""
        return dict(self._results().statistics)

    def diagnostics(self) -> Dict[str, Dict[str, object]]:
        """Convergence diagnostics per site and the kernel's statistics per chain.

        For every site, ``{"n_eff": ..., "r_hat": ...}`` shaped like the site's value:
        the effective sample size of Stan and ArviZ (positive for antithetic chains too)
        and Pyro's split R-hat, computed coordinate by coordinate
        (:func:`pyro_gwg.diagnostics.site_diagnostics`), NaN only for coordinates whose
        draws are all equal (R-hat also NaN for runs of fewer than 4 draws per chain).
        It warns about nothing that :meth:`run` reported (coordinates that never changed
        where the posterior is not sure of them: a
        :class:`~pyro_gwg.kernels.run.StuckChainWarning` at the end of the run).

        Then each per-draw statistic of the kernel, as ``{name: {"chain i": tensor}}``,
        the acceptance rate per chain and an empty ``divergences`` list per chain.
        """
        return self._results().diagnostics()

    def summary(self, prob: float = 0.9) -> None:
        """Print Pyro's summary table (mean, std, median, credible interval, n_eff,
        r_hat per coordinate), with n_eff and r_hat as in :meth:`diagnostics`.

        A ``Categorical`` site has one row per coordinate and category, ``z[0]=k``,
        whose columns are those of the indicator ``z[0] == k``: its mean is the
        posterior probability of category ``k``, its n_eff and r_hat say how well the
        chains estimate it (the mean class index would mean nothing).
        (:class:`pyro.infer.MCMC` reports the class index; print the same rows for its
        draws with Pyro's ``print_summary`` of the one-hot draws:
        ``print_summary({"z": one_hot(typed_samples(mcmc, group_by_chain=True)["z"]).float()})``
        with :func:`torch.nn.functional.one_hot` and
        :func:`~pyro_gwg.inference_data.typed_samples`.)

        :param float prob: the probability mass of the credible interval (highest
            posterior density), in (0, 1).
        """
        if isinstance(prob, bool) or not isinstance(prob, numbers.Real) or not 0 < prob < 1:
            raise ValueError("prob must be a number in (0, 1), got {!r}".format(prob))
        self._results().summary(float(prob))
