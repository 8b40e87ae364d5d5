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

Vectorised and sequential runs drive the kernel's chains through its
:class:`~pyro_gwg.driver.ChainDriver` (the chain loop of the package), one compiled
function call for :data:`STEPS_PER_CALL` transitions at a time, the few left at the end
of warmup and of sampling eagerly; warmup steps of a kernel that adapts, and every step
of a run with a ``hook_fn``, go one at a time. With the kernels' default
``jit_compile="auto"`` each function is traced by :func:`torch.jit.trace` and moved to
AOTInductor when the cost model of the driver, told the length of the run, predicts
that the compilation pays (see :mod:`pyro_gwg.compilation`); the progress bar says
when the run is compiling. Draws are stored as integer
codes in preallocated buffers (the smallest integer type that holds the model's values,
thinned as they are stored) and stay codes after the run: :meth:`MCMC.get_samples`
decodes them to model values when asked, :data:`DECODE_ELEMENTS` codes at a time, so
that neither the run nor the decoding holds more than the codes, the decoded values
and a small work buffer. The per-draw statistics of the kernel accumulate on the
device, and the host synchronises only to refresh the progress bar.

A run stopped by ``KeyboardInterrupt`` (Ctrl-C) keeps the draws taken so far (see
:attr:`MCMC.interrupted`); a run that raises any other error keeps nothing, so that no
results of an earlier run outlive it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing
import numbers
import time
import warnings
from collections import OrderedDict
from itertools import product
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import pyro
import torch
from pyro.infer.mcmc.api import AbstractMCMC
from pyro.ops.stats import hpdi
from tqdm.auto import tqdm

from pyro_gwg import _trace, cluster
from pyro_gwg._validation import check_bool, check_integer, is_integer
from pyro_gwg.bridge.density import DiscreteEnergy
from pyro_gwg.diagnostics import site_diagnostics
from pyro_gwg.kernels.base import DiscreteKernel

__all__ = [
    "DECODE_ELEMENTS",
    "MCMC",
    "RAY_CHAINS_PER_BLOCK",
    "STEPS_PER_CALL",
    "fit_many",
    "smallest_int_dtype",
]

_CHAIN_METHODS = ("vectorized", "sequential", "parallel", "ray")
#: chains per block of a ``chain_method="ray"`` run unless ``chains_per_block`` says
#: otherwise: on a CPU worker a batch of 256 chains runs at about two thirds of the
#: chain-steps per second of 1024 (``benchmarks/chain_throughput.py``), so blocks of
#: this size lose little to splitting, and the default does not depend on the number
#: of workers (which would change the draws)
RAY_CHAINS_PER_BLOCK = 256
#: transitions per call of the compiled transition function
STEPS_PER_CALL = 8
#: stored codes decoded (or checked, or summarised) at once: bounds the work buffers
#: of :meth:`MCMC.get_samples`, :meth:`MCMC.diagnostics` and :meth:`MCMC.summary`
#: (an int64 copy of this many codes is 8 MiB)
DECODE_ELEMENTS = 2**20


class MCMC(AbstractMCMC):
    """Run a pyro-gwg kernel on many chains; the interface of :class:`pyro.infer.MCMC`.

    A subclass of Pyro's :class:`~pyro.infer.mcmc.api.AbstractMCMC` that takes
    :class:`pyro.infer.MCMC`'s arguments in its order and with its defaults; the
    arguments of its own (``chain_method``, ``thinning``, ``device``) are keyword-only.
    Every argument is checked when the object is built; a wrong one raises a
    ``TypeError`` or ``ValueError`` that names it. An integer in the place of
    ``initial_params`` (the fourth positional argument) is refused with a
    ``TypeError``: before this order was Pyro's, ``num_chains`` stood there.

    :param DiscreteKernel kernel: a pyro-gwg kernel, e.g. :class:`~pyro_gwg.GWG`.
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
        (with ``jit_compile=False`` or ``True``; ``"auto"`` may move a block to
        AOTInductor code at a step its cost model picks from measured times, and that
        code draws its random numbers differently). Default: all chains for
        ``"vectorized"``, ``min(num_chains,`` :data:`RAY_CHAINS_PER_BLOCK` ``)`` for
        ``"ray"``; ``"sequential"`` is the same as ``chains_per_block=1``.
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
        states), ``warmup`` and ``sampling``, and ``compile``, the part of those two
        spent compiling transitions (:attr:`~pyro_gwg.driver.ChainDriver.compile_seconds`:
        at the first step, and where ``jit_compile="auto"`` moves to AOTInductor),
        summed over the blocks of chains (with ``"ray"`` summed over the workers'
        blocks, and ``wall``, the run's wall-clock time; ``chain_method="parallel"``
        does not measure ``compile``); empty when the last run raised.

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
        kernel: DiscreteKernel,
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
        if not isinstance(kernel, DiscreteKernel):
            raise TypeError(
                "pyro_gwg.MCMC runs pyro-gwg kernels (GWG, ...); for {} use "
                "pyro.infer.MCMC.".format(type(kernel).__name__)
            )
        num_samples = check_integer("num_samples", num_samples, 1, "draws per chain")
        num_chains = check_integer("num_chains", num_chains, 1, "chains")
        super().__init__(kernel, num_chains, _check_transforms(transforms))
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
        if not isinstance(chain_method, str) or chain_method not in _CHAIN_METHODS:
            raise ValueError(
                "chain_method must be one of {}, got {!r}".format(_CHAIN_METHODS, chain_method)
            )
        self.chain_method = chain_method
        self.chains_per_block = self._check_blocks(chains_per_block, num_workers, ray_remote_args)
        self.num_workers = cluster.check_num_workers(num_workers)
        self.ray_remote_args = dict(ray_remote_args or {})
        self.initial_params = _check_initial_params(initial_params, self.num_chains)
        self.device = _check_device(device)
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
        self.save_params = _check_save_params(save_params)
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
        self._codes: Optional[torch.Tensor] = None  # [C, T, D] integer codes
        self._stats: Dict[str, torch.Tensor] = {}  # [C, T] per statistic
        self._energy: Optional[DiscreteEnergy] = None  # decodes the codes
        self._draws: Optional[_DrawBuffers] = None  # buffers of the run in progress
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

    def _run(self, args: tuple, kwargs: dict, seeds: Optional[List[int]] = None) -> None:
        """:meth:`run`, with the blocks' seeds given (a Ray worker's block) or drawn."""
        self._clear()
        self._status = "running"
        initial_params = self.initial_params
        if self.device is not None and self.chain_method != "ray":  # "ray": on the workers
            args = tuple(_to(a, self.device) for a in args)
            kwargs = {k: _to(v, self.device) for k, v in kwargs.items()}
            if initial_params is not None:
                initial_params = {k: v.to(self.device) for k, v in initial_params.items()}
        self._args, self._kwargs = args, kwargs
        self.timing = {"setup": 0.0, "warmup": 0.0, "sampling": 0.0, "compile": 0.0}
        try:
            with _validation(self.disable_validation):
                if self.chain_method == "parallel":
                    self._run_with_pyro(initial_params, args, kwargs)
                else:
                    blocks = cluster.split(self.num_chains, self.chains_per_block)
                    if seeds is None:
                        seeds = cluster.block_seeds(cluster.draw_base_seed(), len(blocks))
                    if self.chain_method == "ray":
                        self._run_ray(blocks, seeds, initial_params, args, kwargs)
                    else:
                        self._run_blocks(blocks, seeds, initial_params, args, kwargs)
        except KeyboardInterrupt:
            self._keep_partial()
            raise
        except BaseException:
            self._clear()
            self._status = "failed"
            raise
        if self._draws is not None:
            self._codes, self._stats = self._draws.codes, self._draws.stats
            self._draws = None
        self.num_draws_kept = self._codes.shape[1]
        self._status = "done"

    def _keep_partial(self) -> None:
        """After ``KeyboardInterrupt``: keep the largest block of chains x draws taken,
        and warn."""
        draws, self._draws = self._draws, None
        self._status, self.interrupted = "interrupted", True
        chains, kept, least = 0, 0, None
        for c, count in enumerate(draws.kept if draws is not None else []):
            least = count if least is None else min(least, count)
            if (c + 1) * least > chains * kept:
                chains, kept = c + 1, least
        self.num_draws_kept = kept
        if kept == 0:
            self._energy = None
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
        self._codes = draws.codes[:chains, :kept]
        self._stats = {k: v[:chains, :kept] for k, v in draws.stats.items()}
        warnings.warn(
            "pyro_gwg.MCMC.run() was interrupted: kept {} draws per chain of {} chains "
            "(of {} draws per chain of {} chains asked for). get_samples(), "
            "get_statistics(), diagnostics(), summary() and to_inference_data() work on "
            "these partial results.".format(kept, chains, draws.num_kept, self.num_chains),
            UserWarning,
            stacklevel=3,
        )

    def _run_blocks(self, blocks: List[slice], seeds: List[int], initial_params, args, kwargs):
        """Run the blocks of chains one after the other, each under its seed (the
        kernel warns once per cause, at the end of the last block)."""
        try:
            for index, (block, seed) in enumerate(zip(blocks, seeds)):
                params = _block_params(initial_params, block, self.num_chains)
                label = "[{}] ".format(block.start) if len(blocks) > 1 else ""
                self.kernel.block_of_run = (index, len(blocks), block.start)
                with cluster.seeded(seed):
                    self._run_batch(block, params, label, args, kwargs)
        finally:
            self.kernel.block_of_run = None

    def _run_ray(self, blocks: List[slice], seeds: List[int], initial_params, args, kwargs):
        """Run each block as vectorised chains in a Ray task; gather the codes and the
        statistics in block order."""
        energy = self._local_energy(args, kwargs)
        if initial_params is not None:  # refused here rather than on a worker
            values = initial_params
            if self.num_chains == 1:
                values = energy.with_chain_dim(values)
            energy.check_initial(energy.codes_from_values(values, "Initial value"))
        num_workers = self.num_workers
        if num_workers is None:
            ray = cluster.require_ray("pyro_gwg.MCMC(chain_method='ray')")
            if not ray.is_initialized():
                ray.init()
            num_workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        if len(blocks) < num_workers:
            warnings.warn(
                "{} chains in blocks of chains_per_block={} make {} block(s) for {} "
                "workers, so {} worker(s) stay idle; pass chains_per_block={} to use them "
                "all.".format(
                    self.num_chains,
                    self.chains_per_block,
                    len(blocks),
                    num_workers,
                    num_workers - len(blocks),
                    math.ceil(self.num_chains / num_workers),
                ),
                UserWarning,
                stacklevel=4,
            )
        clock = time.perf_counter()
        results = cluster.run_tasks(
            _run_ray_block,
            [
                self._block_task(block, seed, initial_params, args, kwargs)
                for block, seed in zip(blocks, seeds)
            ],
            num_workers=num_workers,
            feature="pyro_gwg.MCMC(chain_method='ray')",
            remote_args=self.ray_remote_args,
            progress_bar=not self.disable_progbar,
            desc="MCMC blocks",
        )
        self.timing["wall"] = time.perf_counter() - clock
        self._gather(energy, results)

    def _block_task(self, block: slice, seed: int, initial_params, args, kwargs) -> _RayBlock:
        """The Ray task of a block of chains: a vectorised run of those chains."""
        device = self.device
        if device is None and self.ray_remote_args.get("num_gpus", 0):
            device = torch.device("cuda")
        initial_params = _block_params(initial_params, block, self.num_chains)
        settings = dict(
            num_samples=self.num_samples,
            warmup_steps=self.warmup_steps,
            initial_params=initial_params,
            num_chains=block.stop - block.start,
            hook_fn=self.hook_fn,
            disable_progbar=True,
            disable_validation=self.disable_validation,
            save_params=self.save_params,
            thinning=self.thinning,
            device=device,
        )
        return _RayBlock(self.kernel, settings, seed, args, kwargs)

    def _gather(self, energy: DiscreteEnergy, results: list) -> None:
        """Take the blocks' codes, statistics and timing, in block order."""
        for _, _, timing in results:
            for phase, seconds in timing.items():
                self.timing[phase] = self.timing.get(phase, 0.0) + seconds
        self._energy = energy if self.save_params is None else _SavedSites(energy, self.save_params)
        self._codes = torch.cat([codes for codes, _, _ in results])
        self._stats = {k: torch.cat([stats[k] for _, stats, _ in results]) for k in results[0][1]}

    def _receive(self, args: tuple, kwargs: dict, result) -> None:
        """Take the results of a run made elsewhere (a Ray task of :func:`fit_many`)
        as this object's results."""
        self._clear()
        self._args, self._kwargs = args, kwargs
        self._gather(self._local_energy(args, kwargs), [result])
        self.num_draws_kept = self._codes.shape[1]
        self._status = "done"

    def _local_energy(self, args, kwargs) -> DiscreteEnergy:
        """The model's :class:`DiscreteEnergy` in this process, to check names and
        initial values before chains run elsewhere and to decode their draws."""
        kernel = self.kernel
        if kernel.model is None:  # the kernel's own message
            kernel.setup(self.warmup_steps, *args, **kwargs)
        energy = DiscreteEnergy(
            kernel.model,
            args,
            kwargs,
            max_plate_nesting=kernel.max_plate_nesting,
            init_strategy=kernel.init_strategy,
        )
        self._check_site_names(energy)
        kernel._check_density(energy)
        return energy

    @pyro.poutine.block
    def _run_batch(self, chains: slice, initial_params, label: str, args, kwargs) -> None:
        kernel = self.kernel
        num_chains = chains.stop - chains.start
        kernel.vectorized_chains = num_chains
        kernel.initial_params = initial_params  # one chain: with or without its chain dim
        clock = time.perf_counter()
        kernel.setup(self.warmup_steps, *args, **kwargs)
        clock = self._tick("setup", clock)
        layout = kernel.energy.layout
        if self._draws is None:
            self._check_site_names(kernel.energy)
            device = kernel.state.codes.device
            # with save_params, only the saved sites' coordinates are stored
            saved = (
                None if self.save_params is None else _SavedSites(kernel.energy, self.save_params)
            )
            self._energy = kernel.energy if saved is None else saved
            self._draws = _DrawBuffers(
                self.num_chains,
                self.num_samples // self.thinning,
                self.thinning,
                layout.num_coords if saved is None else saved.columns.numel(),
                _code_dtype(layout),
                device,
                None if saved is None else saved.columns.to(device),
            )
        draws = self._draws
        driver = kernel.driver
        total = self.warmup_steps + self.num_samples
        every = 1 if self.hook_fn is not None else STEPS_PER_CALL
        progress = _Progress(tqdm(total=total, disable=self.disable_progbar), num_chains, total)
        # the cost model of jit_compile="auto" weighs compile time against these steps
        driver.horizon = driver.t + total
        driver.on_compile = progress.compiling
        phases = (
            ("Warmup", "warmup", self.warmup_steps),
            ("Sample", "sampling", self.num_samples),
        )
        phase = "warmup"

        def observe(t: int, info, codes: torch.Tensor, log_joint: torch.Tensor) -> None:
            if phase == "sampling":
                draws.store(t - self.warmup_steps, info, codes, log_joint, chains)
            if self.hook_fn is not None:
                self.hook_fn(kernel, kernel.current_values(), stage, t - start)
            progress.update(codes.shape[1], info.accepted)

        compiled_before = driver.compile_seconds
        try:
            for stage, phase, steps in phases:
                progress.start(stage + " " + label)
                start = driver.t
                driver.run(steps, observe, every, draws.code_dtype)
                _synchronize(draws.codes.device)
                clock = self._tick(phase, clock)
        except KeyboardInterrupt:
            self._tick(phase, clock)
            raise
        finally:
            progress.close()
            driver.horizon = driver.on_compile = None
            self.timing["compile"] += driver.compile_seconds - compiled_before
        kernel.cleanup()

    def _check_site_names(self, energy: DiscreteEnergy) -> None:
        """Refuse ``initial_params`` and ``save_params`` that name no latent site."""
        names = [site.name for site in energy.sites]
        for argument, given, fix in (
            ("initial_params has a value for", self.initial_params, "Remove it."),
            ("save_params names", self.save_params, "Save only latent sites."),
        ):
            unknown = [name for name in given or () if name not in names]
            if unknown:
                raise ValueError(
                    "{} {}, which is not a latent discrete site sampled by the kernel "
                    "(latent sites: {}). {}".format(
                        argument, ", ".join(map(repr, unknown)), ", ".join(map(repr, names)), fix
                    )
                )

    def _keep_saved_sites(self) -> None:
        """With ``save_params``, after a run through :class:`pyro.infer.MCMC`: keep only
        the codes of the saved sites, and decode them with those sites alone (the
        vectorised and sequential runs store only those in the first place)."""
        if self.save_params is None or self._codes is None:
            return
        self._energy = _SavedSites(self._energy, self.save_params)
        self._codes = self._codes[..., self._energy.columns.to(self._codes.device)]

    def _tick(self, phase: str, since: float) -> float:
        now = time.perf_counter()
        self.timing[phase] += now - since
        return now

    def _run_with_pyro(self, initial_params, args, kwargs) -> None:
        kernel = self.kernel
        energy = self._local_energy(args, kwargs)
        mcmc = pyro.infer.MCMC(
            kernel,
            num_samples=self.num_samples,
            warmup_steps=self.warmup_steps,
            num_chains=self.num_chains,
            initial_params=initial_params,
            hook_fn=self.hook_fn,
            mp_context=self.mp_context or "spawn",
            disable_progbar=self.disable_progbar,
            disable_validation=self.disable_validation,
        )
        del self.timing["compile"]  # compiled in Pyro's worker processes, not measured
        clock = time.perf_counter()
        mcmc.run(*args, **kwargs)
        self._tick("sampling", clock)
        kept = slice(self.thinning - 1, None, self.thinning)
        samples = {k: v[:, kept] for k, v in mcmc.get_samples(group_by_chain=True).items()}
        num_kept = self.num_samples // self.thinning
        codes = torch.empty(
            (self.num_chains, num_kept, energy.num_coords), dtype=_code_dtype(energy.layout)
        )
        for c in range(self.num_chains):
            codes[c] = energy.codes_from_values({k: v[c] for k, v in samples.items()})
        # the kernel's per-chain statistics (Pyro's diagnostics() would also compute
        # the ESS of every site, which needs T x T memory per coordinate)
        per_chain = _trace.run_chain_statistics(mcmc)
        stats = {}
        for name in per_chain[0]:
            values = [chain[name] for chain in per_chain]
            if all(isinstance(v, torch.Tensor) and v.dim() == 1 for v in values):
                if all(v.shape[0] == self.num_samples for v in values):
                    stats[name] = torch.stack(values)[:, kept]
        self._energy, self._codes, self._stats = energy, codes, stats
        self._keep_saved_sites()

    # ------------------------------------------------------------------ results
    def _results(self) -> torch.Tensor:
        """The codes ``[C, T, D]`` of the last run; a clear error where there are none,
        a warning where they are partial."""
        if self._codes is None:
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
                    self._codes.shape[1],
                    self._codes.shape[0],
                    self.num_samples // self.thinning,
                ),
                UserWarning,
                stacklevel=3,
            )
        return self._codes

    def get_samples(
        self, num_samples: Optional[int] = None, group_by_chain: bool = False
    ) -> Dict[str, torch.Tensor]:
        """Draws ``{site: [num_chains, num_draws, ...]}`` (or flattened over chains), as
        model values: ``Categorical`` sites as category indices (``torch.long``, usable
        as indices, e.g. by :class:`pyro.infer.Predictive`), every other site as floats
        of the default dtype, as :class:`pyro.infer.MCMC` returns them.

        The draws are decoded from the stored integer codes at every call (about a
        million codes at a time, see :data:`DECODE_ELEMENTS`); keep the result rather
        than calling this repeatedly.

        :param int num_samples: draw this many samples with replacement (as Pyro does);
            only those are decoded.
        :param bool group_by_chain: keep the chain dimension.
        """
        codes = self._results()
        num_chains, num_draws = codes.shape[:2]
        if num_samples is None:
            values = _decode(self._energy, codes)
        else:
            num_samples = check_integer("num_samples", num_samples, 1, "draws to select")
            if group_by_chain:
                index = torch.randint(0, num_draws, (num_samples,), device=codes.device)
                values = _decode(self._energy, codes[:, index])
            else:
                index = torch.randint(0, num_chains * num_draws, (num_samples,))
                index = index.to(codes.device)
                chosen = codes[index // num_draws, index % num_draws]
                values = _decode(self._energy, chosen.unsqueeze(0))
                return {k: v[0] for k, v in values.items()}
        if not group_by_chain:
            values = {k: v.reshape((-1,) + v.shape[2:]) for k, v in values.items()}
        return values

    def _integer_samples(self) -> Dict[str, torch.Tensor]:
        """Draws ``{site: [C, T, *value_shape]}`` as integers of the smallest type that
        holds them (``int8`` for a one-hot site's vectors), copied from the codes a block
        of draws at a time (for :func:`~pyro_gwg.to_inference_data`)."""
        codes = self._results()
        num_chains, num_draws = codes.shape[:2]
        out = {}
        for site in self._energy.sites:
            own = codes[:, :, site.offset : site.offset + site.num_coords]
            if site.kind == "one-hot":
                dtype, width = torch.int8, site.num_categories
                categories = torch.arange(width, device=codes.device, dtype=codes.dtype)
            else:
                dtype, width = smallest_int_dtype(float(own.min()), float(own.max())), 1
            value = torch.empty(
                (num_chains, num_draws) + tuple(site.value_shape), dtype=dtype, device=codes.device
            )
            step = max(1, DECODE_ELEMENTS // max(1, num_chains * site.num_coords * width))
            for start in range(0, num_draws, step):
                block = own[:, start : start + step]
                if site.kind == "one-hot":
                    block = block.unsqueeze(-1) == categories
                value[:, start : start + step] = block.to(dtype).reshape(
                    block.shape[:2] + tuple(site.value_shape)
                )
            out[site.name] = value
        return out

    def get_statistics(self) -> Dict[str, torch.Tensor]:
        """Per-draw kernel statistics ``{name: [num_chains, num_draws]}`` (``accepted``,
        ``accept_prob``, ``num_changed``, ``log_joint``, ...)."""
        self._results()
        return dict(self._stats)

    def diagnostics(self) -> Dict[str, Dict[str, object]]:
        """Convergence diagnostics per site and the kernel's statistics per chain.

        For every site, ``{"n_eff": ..., "r_hat": ...}`` shaped like the site's value:
        the effective sample size of Stan and ArviZ (positive for antithetic chains too)
        and Pyro's split R-hat, computed coordinate by coordinate
        (:func:`pyro_gwg.diagnostics.site_diagnostics`), NaN only for coordinates whose
        draws are all equal (R-hat also NaN for runs of fewer than 4 draws per chain).
        It warns about nothing that :meth:`run` reported (coordinates that never changed
        where the posterior is not sure of them: a
        :class:`~pyro_gwg.kernels.base.StuckChainWarning` at the end of the run).

        Then each per-draw statistic of the kernel, as ``{name: {"chain i": tensor}}``,
        the acceptance rate per chain and an empty ``divergences`` list per chain.
        """
        codes = self._results()
        diag: Dict[str, Dict[str, object]] = OrderedDict()
        for name, columns in self._site_table(codes, summary=False).items():
            diag[name] = columns
        diag.update(self._chain_statistics())
        return diag

    def _chain_statistics(self) -> Dict[str, Dict[str, object]]:
        """``{statistic: {"chain i": value}}`` of the kernel (no site diagnostics)."""
        num_chains = self._codes.shape[0]
        chains = ["chain {}".format(c) for c in range(num_chains)]
        out: Dict[str, Dict[str, object]] = OrderedDict()
        for name, value in self._stats.items():
            out[name] = dict(zip(chains, value.cpu()))
        if "accepted" in self._stats:
            rates = self._stats["accepted"].float().mean(-1).tolist()
            out["acceptance rate"] = dict(zip(chains, rates))
        out["divergences"] = {c: [] for c in chains}
        return out

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
        codes = self._results()
        categorical = {site.name for site in self._energy.sites if site.kind == "categorical"}
        _print_table(self._site_table(codes, summary=True, prob=float(prob)), categorical)

    def _site_table(self, codes: torch.Tensor, summary: bool, prob: float = 0.9):
        """``{site: OrderedDict(column: tensor of the value shape)}``: n_eff and r_hat,
        and with ``summary`` also mean, std, median and the HPD interval, computed on a
        few coordinates at a time."""
        num_chains, num_draws = codes.shape[:2]
        dtype = torch.get_default_dtype()
        table = OrderedDict()
        for site in self._energy.sites:
            # the summary of a Categorical site: the indicator of each category
            categories = site.num_categories if summary and site.kind == "categorical" else 0
            width = site.num_categories if site.kind == "one-hot" or categories else 1
            per_coord = max(1, DECODE_ELEMENTS // max(1, num_chains * num_draws * width))
            columns: Dict[str, List[torch.Tensor]] = OrderedDict()
            for start in range(0, site.num_coords, per_coord):
                stop = min(site.num_coords, start + per_coord)
                block = codes[:, :, site.offset + start : site.offset + stop].long()
                values = site.values_from_codes(block)
                if categories:
                    values = values.unsqueeze(-1) == torch.arange(categories, device=values.device)
                values = values.to(dtype).reshape(num_chains, num_draws, -1)
                del block
                for key, value in _columns(values, summary, prob).items():
                    columns.setdefault(key, []).append(value)
            shape = site.value_shape + ((categories,) if categories else ())
            table[site.name] = OrderedDict(
                (key, torch.cat(parts).reshape(shape)) for key, parts in columns.items()
            )
        return table


@dataclasses.dataclass
class _RayBlock:
    """What a Ray task needs to run one block of chains."""

    kernel: DiscreteKernel
    settings: dict  # arguments of the block's MCMC
    seed: int
    args: tuple
    kwargs: dict


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
    """Fit ``model`` to each of many data sets: one :class:`MCMC` run per data set, in
    this process or as Ray tasks.

    Data set ``i`` is run as ``MCMC(kernel(model), num_samples, warmup_steps,
    num_chains=num_chains, **mcmc_kwargs)`` under its own seed (derived from ``seed``
    and ``i`` by :func:`pyro_gwg.cluster.block_seeds`), so the draws are the same
    whether the runs are local or distributed, and whatever the number of workers
    (with ``jit_compile=False`` or ``True``; see ``chains_per_block`` of
    :class:`MCMC`). Each returned object has the run's results: ``get_samples``,
    ``summary``, ``diagnostics`` and :func:`~pyro_gwg.to_inference_data` work on it.

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
    :param mcmc_kwargs: further arguments of :class:`MCMC` (``thinning``,
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
        from tqdm.auto import tqdm

        for fit, (args, kwargs), s in tqdm(
            list(zip(fits, data, seeds)), desc="fits", unit="fit", disable=not progress_bar
        ):
            fit._run(args, kwargs, seeds=[s])
        return fits
    whole = slice(0, num_chains)
    results = cluster.run_tasks(
        _run_ray_block,
        [
            fit._block_task(whole, s, fit.initial_params, args, kwargs)
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


def _run_ray_block(block: _RayBlock):
    """A Ray task: one block of chains as a vectorised run under the block's seed; its
    codes and statistics (on the CPU) and its timing."""
    mcmc = MCMC(block.kernel, **block.settings)
    mcmc._run(block.args, block.kwargs, seeds=[block.seed])
    stats = {k: v.cpu() for k, v in mcmc._stats.items()}
    return mcmc._codes.cpu(), stats, mcmc.timing


def _columns(values: torch.Tensor, summary: bool, prob: float) -> Dict[str, torch.Tensor]:
    """Summary columns of ``values [C, T, n]``, each ``[n]``."""
    out = OrderedDict()
    if summary:
        flat = values.reshape((-1,) + values.shape[2:])
        low, high = hpdi(flat, prob=prob)
        out["mean"] = flat.mean(0)
        out["std"] = flat.std(0) if flat.shape[0] > 1 else torch.full_like(flat[0], float("nan"))
        out["median"] = flat.median(0).values
        out["{:.1f}%".format(50 * (1 - prob))] = low
        out["{:.1f}%".format(50 * (1 + prob))] = high
    out.update(site_diagnostics(values))
    return out


def _print_table(
    table: Mapping[str, Mapping[str, torch.Tensor]], categorical: Sequence[str] = ()
) -> None:
    """Print ``{site: {column: tensor}}`` in the format of Pyro's ``print_summary``;
    the last dimension of a site named in ``categorical`` is its category (rows
    ``z[0]=k``)."""
    if not table:
        return
    rows = []
    for name, stats in table.items():
        for index in product(*map(range, stats["mean"].shape)):
            position, suffix = index, ""
            if name in categorical:
                position, suffix = index[:-1], "={}".format(index[-1])
            label = name + ("[{}]".format(",".join(map(str, position))) if position else "")
            rows.append([label + suffix] + [float(v[index]) for v in stats.values()])
    name_format = "{:>" + str(max(max(len(row[0]) for row in rows), 10)) + "}"
    columns = [""] + list(next(iter(table.values())).keys())
    print()
    print((name_format + " {:>9}" * (len(columns) - 1)).format(*columns))
    row_format = name_format + " {:>9.2f}" * (len(columns) - 1)
    for row in rows:
        print(row_format.format(*row))
    print()


def _decode(energy: DiscreteEnergy, codes: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Model values ``{name: [C, T, *value_shape]}`` of codes ``[C, T, D]``, decoded
    :data:`DECODE_ELEMENTS` codes at a time into preallocated tensors."""
    num_chains, num_draws, num_coords = codes.shape
    rows = max(1, DECODE_ELEMENTS // max(1, num_coords))  # draws per block
    chains_per_block = max(1, rows // max(1, num_draws))
    draws_per_block = num_draws if chains_per_block > 1 else min(rows, num_draws)
    out: Dict[str, torch.Tensor] = {}
    for c0 in range(0, num_chains, chains_per_block):
        c1 = min(num_chains, c0 + chains_per_block)
        for t0 in range(0, num_draws, draws_per_block):
            t1 = min(num_draws, t0 + draws_per_block)
            block = codes[c0:c1, t0:t1].reshape(-1, num_coords).long()
            for name, value in energy.values_from_codes(block).items():
                if name not in out:
                    shape = (num_chains, num_draws) + tuple(value.shape[1:])
                    out[name] = torch.empty(shape, dtype=value.dtype, device=value.device)
                out[name][c0:c1, t0:t1] = value.reshape((c1 - c0, t1 - t0) + value.shape[1:])
    return out


class _DrawBuffers:
    """Preallocated ``[C, num_kept, ...]`` buffers of the kept draws (codes, only the
    coordinates ``columns`` with ``save_params``) and of the per-draw statistics, filled
    on the device from runs of transitions; ``kept`` counts the draws stored per chain."""

    def __init__(self, num_chains, num_kept, thinning, num_coords, code_dtype, device, columns):
        self.num_kept, self.thinning, self.code_dtype = num_kept, thinning, code_dtype
        self.columns = columns  # the coordinates stored (None: all)
        self.codes = torch.empty(
            (num_chains, num_kept, num_coords), dtype=code_dtype, device=device
        )
        self.stats: Dict[str, torch.Tensor] = {}
        self.kept = [0] * num_chains

    def store(
        self, first: int, info, codes: torch.Tensor, log_joint: torch.Tensor, chains: slice
    ) -> None:
        """Keep the thinned draws among the draws ``first, first + 1, ...`` (after
        warmup) of a run of transitions of ``chains``; ``codes [c, n, D]``, the rest
        ``[c, n]``."""
        thin = self.thinning
        offset = -(first + 1) % thin  # run position of the first draw j with (j + 1) % thin == 0
        slot = (first + offset) // thin
        count = min(len(range(offset, codes.shape[1], thin)), self.num_kept - slot)
        if count <= 0:
            return
        kept = slice(offset, offset + thin * (count - 1) + 1, thin)
        block = codes[:, kept]
        if self.columns is not None:
            block = block.index_select(-1, self.columns)
        self.codes[chains, slot : slot + count] = block
        for name, value in dict(info._asdict(), log_joint=log_joint).items():
            if name not in self.stats:
                self.stats[name] = torch.empty(
                    (self.codes.shape[0], self.num_kept), dtype=value.dtype, device=value.device
                )
            self.stats[name][chains, slot : slot + count] = value[:, kept]
        for c in range(chains.start, chains.stop):
            self.kept[c] = slot + count


class _Progress:
    """Progress bar with the acceptance rate of the current phase; the accepted count
    stays on the device and is read only when the bar is refreshed."""

    def __init__(self, bar, num_chains: int, total: int) -> None:
        self.bar, self.num_chains = bar, num_chains
        self.refresh = max(1, total // 200)
        self.accepted, self.steps = torch.zeros(()), 0

    def start(self, description: str) -> None:
        self.description = description
        self.bar.set_description(description)
        self.accepted, self.steps = torch.zeros(()), 0

    def compiling(self, message: str) -> None:
        """Say in the bar that the run is compiling (until the next update)."""
        self.bar.set_description("{} ({})".format(self.description, message))
        self.bar.refresh()

    def update(self, steps: int, accepted: torch.Tensor) -> None:
        self.accepted = self.accepted.to(accepted.device) + accepted.sum()
        self.steps += steps
        done = self.bar.n + steps
        if not self.bar.disable and (
            done // self.refresh > self.bar.n // self.refresh or done == self.bar.total
        ):
            rate = float(self.accepted) / (self.steps * self.num_chains)
            self.bar.set_description(self.description, refresh=False)
            self.bar.set_postfix({"acc. rate": "{:.3f}".format(rate)}, refresh=False)
        self.bar.update(steps)

    def close(self) -> None:
        self.bar.close()


class _SavedSites:
    """The sites of ``energy`` named in ``names`` (in the energy's order), numbered for
    codes that hold only their coordinates (``columns`` of the full codes); decodes
    such codes as :meth:`DiscreteEnergy.values_from_codes` decodes full ones."""

    def __init__(self, energy: DiscreteEnergy, names: List[str]) -> None:
        self.sites, columns, offset = [], [], 0
        for site in energy.sites:
            if site.name in names:
                columns.append(torch.arange(site.offset, site.offset + site.num_coords))
                self.sites.append(dataclasses.replace(site, offset=offset))
                offset += site.num_coords
        self.columns = torch.cat(columns)

    def values_from_codes(self, codes: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Model values ``{name: [N, *value_shape]}`` of codes ``[N, D_saved]``."""
        return {
            site.name: site.values_from_codes(
                codes[:, site.offset : site.offset + site.num_coords].reshape(
                    (-1,) + site.coord_shape
                )
            )
            for site in self.sites
        }


def _validation(disable_validation: Optional[bool]):
    """Pyro's distribution validation off (``True``), on (``False``) or left as it is
    (``None``) during a run, as in :class:`pyro.infer.MCMC`."""
    if disable_validation is None:
        return contextlib.nullcontext()
    return pyro.validation_enabled(not disable_validation)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _to(value, device):
    return value.to(device) if isinstance(value, torch.Tensor) else value


def smallest_int_dtype(low: float, high: float) -> torch.dtype:
    """The smallest signed integer type holding every integer in ``[low, high]`` (int64
    if none does, e.g. for an unbounded range).

    :param float low: least value.
    :param float high: largest value.
    :rtype: torch.dtype
    """
    for dtype in (torch.int8, torch.int16, torch.int32):
        info = torch.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return dtype
    return torch.int64


def _code_dtype(layout) -> torch.dtype:
    """Smallest integer type holding every code of the layout (int64 if unbounded)."""
    low = float(torch.where(layout.is_scalar, layout.lower, 0.0).min())
    high = float(torch.where(layout.is_scalar, layout.upper, layout.num_categories - 1.0).max())
    return smallest_int_dtype(low, high)


# ---------------------------------------------------------------------- arguments


def _check_device(device) -> Optional[torch.device]:
    if device is None:
        return None
    if isinstance(device, bool) or not isinstance(device, (str, numbers.Integral, torch.device)):
        raise TypeError(
            "device must be a torch.device, a string such as 'cpu' or 'cuda:0', a CUDA "
            "device index or None; got {!r} of type {}.".format(device, type(device).__name__)
        )
    try:
        result = torch.device(device if isinstance(device, (str, torch.device)) else int(device))
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            "device {!r} is not a torch device; use for example 'cpu', 'cuda' or 'cuda:0'.".format(
                device
            )
        ) from None
    if result.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "device {!r} asks for a GPU, but CUDA is not available to this PyTorch; use "
            "device='cpu' or None.".format(device)
        )
    return result


def _check_transforms(transforms) -> Dict:
    """``{}`` for ``None`` or an empty dict: discrete sites have no transforms."""
    if transforms is None:
        return {}
    if not isinstance(transforms, Mapping):
        raise TypeError(
            "transforms must be a dict {{site name: transform}} or None, got {}.".format(
                type(transforms).__name__
            )
        )
    if transforms:
        raise ValueError(
            "transforms has an entry for {}, but pyro_gwg.MCMC samples discrete sites, "
            "which have no transforms to an unconstrained space: their values are stored "
            "as they are. Pass transforms=None (or {{}}).".format(", ".join(map(repr, transforms)))
        )
    return {}


def _check_save_params(save_params) -> Optional[List[str]]:
    """``save_params`` as a list of site names (checked against the latent sites at
    the start of the run)."""
    if save_params is None:
        return None
    if isinstance(save_params, str) or not isinstance(save_params, (list, tuple)):
        raise TypeError(
            "save_params must be a list of site names such as ['x'], or None; got {!r}.".format(
                save_params
            )
        )
    bad = [name for name in save_params if not isinstance(name, str)]
    if bad:
        raise TypeError("save_params must hold site names (strings), got {!r}.".format(bad[0]))
    if not save_params:
        raise ValueError(
            "save_params is empty: no site would be saved. Name at least one latent "
            "site, or pass None to save all of them."
        )
    return list(save_params)


def _block_params(initial_params, block: slice, num_chains: int):
    """The initial values of a block of chains; a block that is the whole run takes
    them as given (one chain's values may come without their chain dimension, as in
    :class:`pyro.infer.MCMC`: the kernel tells them apart by the sites' shapes)."""
    if initial_params is None or (block.start == 0 and block.stop == num_chains):
        return initial_params
    return {k: v[block] for k, v in initial_params.items()}


def _check_initial_params(initial_params, num_chains: int) -> Optional[Dict[str, torch.Tensor]]:
    """``initial_params`` as tensors with a leading chain dimension of ``num_chains``
    (for one chain, also without it, as :class:`pyro.infer.MCMC` takes them)."""
    if initial_params is None:
        return None
    if not isinstance(initial_params, Mapping):
        raise TypeError(
            "initial_params must be a dict {{site name: initial values, one per chain}}, "
            "got {}.".format(type(initial_params).__name__)
        )
    out = {}
    for name, value in initial_params.items():
        if not isinstance(name, str):
            raise TypeError(
                "initial_params keys must be site names (strings), got {!r}.".format(name)
            )
        if not isinstance(value, torch.Tensor):
            try:
                value = torch.as_tensor(value)
            except (TypeError, ValueError, RuntimeError):
                raise TypeError(
                    "initial_params['{}'] must be a tensor, a numpy array or a nested list "
                    "of numbers, got {!r} of type {}.".format(name, value, type(value).__name__)
                ) from None
        if num_chains == 1:  # its shape is checked against the site's at setup
            out[name] = value
            continue
        if value.dim() == 0:
            raise ValueError(
                "initial_params['{}'] is a scalar; it needs a leading (chain) dimension of "
                "size num_chains={}.".format(name, num_chains)
            )
        if value.shape[0] != num_chains:
            raise ValueError(
                "initial_params['{}'] has a leading (chain) dimension of size {}, but "
                "num_chains={}: give every site one initial value per chain, shaped "
                "[num_chains, *value_shape].".format(name, value.shape[0], num_chains)
            )
        out[name] = value
    return out
