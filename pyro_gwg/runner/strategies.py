"""How :class:`pyro_gwg.MCMC` runs its chains: one strategy per chain method, each
around the one chain loop (:class:`~pyro_gwg.driver.ChainDriver`).

* :class:`LocalBlocks` (``"vectorized"``, ``"sequential"``): blocks of chains in this
  process, one after the other, each a batch of chains under its own seed;
* :class:`RayBlocks` (``"ray"``): the same blocks, each a Ray task
  (:func:`pyro_gwg.cluster.run_tasks`), gathered in block order;
* :class:`PyroChains` (``"parallel"``): the chains through :class:`pyro.infer.MCMC`.

:func:`strategy_for` says which strategy runs a kernel's chains: the discrete kernels
under every chain method; :class:`~pyro_gwg.MixedGibbs` and Pyro's HMC/NUTS (on a
model whose discrete sites are all enumerated) as :class:`LocalBlocks` of vectorised
chains (``"vectorized"``, or ``"sequential"``), each block one
:class:`~pyro_gwg.kernels.mixed.MixedRun`.

A strategy takes the run's settings (:class:`RunConfig`), runs the chains and returns
their :class:`~pyro_gwg.runner.draws.Draws`; it keeps the wall-clock ``timing`` of the
run and, for a run stopped by ``KeyboardInterrupt``, the ``buffers`` filled so far.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
import warnings
from abc import ABC, abstractmethod
from typing import Callable, Dict, List, Mapping, Optional

import pyro
import torch
from tqdm.auto import tqdm

from pyro_gwg import _trace, cluster
from pyro_gwg.auto import Auto
from pyro_gwg.bridge.density import ModelDensity
from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.kernels.mixed import MixedGibbs, start_continuous
from pyro_gwg.runner.checks import block_params, check_device, check_site_names
from pyro_gwg.runner.draws import DrawBuffers, Draws, code_dtype, saved, statistics_of
from pyro_gwg.runner.progress import Progress

__all__ = [
    "LocalBlocks",
    "PyroChains",
    "RAY_CHAINS_PER_BLOCK",
    "RayBlocks",
    "RunConfig",
    "STEPS_PER_CALL",
    "STRATEGIES",
    "Strategy",
    "on_device",
    "strategy_for",
    "validation",
]

#: chains per block of a ``chain_method="ray"`` run unless ``chains_per_block`` says
#: otherwise: on a CPU worker a batch of 256 chains runs at about two thirds of the
#: chain-steps per second of 1024 (``benchmarks/chain_throughput.py``), so blocks of
#: this size lose little to splitting, and the default does not depend on the number
#: of workers (which would change the draws)
RAY_CHAINS_PER_BLOCK = 256
#: transitions per block of the chain driver (see :meth:`ChainDriver.run
#: <pyro_gwg.driver.ChainDriver.run>`): the block's draws are stacked, stored, counted
#: and shown in the progress bar once, so that this work costs little per step (on a
#: 10 x 10 Ising model with 16 chains it took about 40 us per step in blocks of 8)
STEPS_PER_CALL = 64


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The checked settings of a run (the arguments of :class:`pyro_gwg.MCMC`)."""

    kernel: DiscreteKernel
    num_samples: int
    warmup_steps: int
    num_chains: int
    chains_per_block: int
    thinning: int = 1
    initial_params: Optional[Dict[str, torch.Tensor]] = None
    save_params: Optional[List[str]] = None
    hook_fn: Optional[Callable] = None
    disable_progbar: bool = False
    disable_validation: Optional[bool] = True
    device: Optional[torch.device] = None
    mp_context: Optional[str] = None
    num_workers: Optional[int] = None
    ray_remote_args: Mapping = dataclasses.field(default_factory=dict)


def validation(disable_validation: Optional[bool]):
    """Pyro's distribution validation off (``True``), on (``False``) or left as it is
    (``None``) during a run, as in :class:`pyro.infer.MCMC`."""
    if disable_validation is None:
        return contextlib.nullcontext()
    return pyro.validation_enabled(not disable_validation)


def on_device(device: Optional[torch.device], args: tuple, kwargs: dict, initial_params):
    """The model's arguments and the initial values, tensors moved to ``device``."""
    if device is None:
        return args, kwargs, initial_params
    args = tuple(_to(a, device) for a in args)
    kwargs = {k: _to(v, device) for k, v in kwargs.items()}
    if initial_params is not None:
        initial_params = {k: v.to(device) for k, v in initial_params.items()}
    return args, kwargs, initial_params


def _to(value, device):
    return value.to(device) if isinstance(value, torch.Tensor) else value


class Strategy(ABC):
    """A way to run the chains of a run (one subclass per chain method).

    :param RunConfig config: the run's settings.
    :param starter: what starts a block of chains, ``starter.start(...)`` as
        :meth:`DiscreteKernel.start <pyro_gwg.kernels.base.DiscreteKernel.start>` (see
        :func:`strategy_for`; default: the kernel).
    """

    #: whether the model's arguments go to ``config.device`` in this process
    moves_to_device = True

    def __init__(self, config: RunConfig, starter=None) -> None:
        self.config = config
        self.starter = config.kernel if starter is None else starter
        self.timing: Dict[str, float] = {
            "setup": 0.0,
            "warmup": 0.0,
            "sampling": 0.0,
            "compile": 0.0,
            "background_compile": 0.0,
        }
        #: the draws stored so far (in this process), or ``None``
        self.buffers: Optional[DrawBuffers] = None

    @abstractmethod
    def run(self, args: tuple, kwargs: dict, initial_params, seeds=None) -> Draws:
        """Run the chains on the model with these arguments.

        :param tuple args: the model's positional arguments.
        :param dict kwargs: its keyword arguments.
        :param dict initial_params: initial values (on the run's device), or ``None``.
        :param list seeds: the blocks' seeds (default: drawn from torch's generator).
        :rtype: Draws
        """

    def _blocks(self, seeds):
        config = self.config
        blocks = cluster.split(config.num_chains, config.chains_per_block)
        if seeds is None:
            seeds = cluster.block_seeds(cluster.draw_base_seed(), len(blocks))
        return blocks, seeds

    def _tick(self, phase: str, since: float) -> float:
        now = time.perf_counter()
        self.timing[phase] += now - since
        return now

    def local_density(self, args: tuple, kwargs: dict) -> ModelDensity:
        """The model's :class:`~pyro_gwg.ModelDensity` in this process, to check names
        and initial values before chains run elsewhere and to decode their draws."""
        config = self.config
        energy = config.kernel.model_density(args, kwargs)
        check_site_names(energy, config.initial_params, config.save_params)
        return energy


class LocalBlocks(Strategy):
    """Blocks of ``chains_per_block`` chains in this process, one after the other,
    each under its seed (the kernel warns once per cause, at the end of the last
    block)."""

    def run(self, args: tuple, kwargs: dict, initial_params, seeds=None) -> Draws:
        config = self.config
        blocks, seeds = self._blocks(seeds)
        report = None
        for index, (block, seed) in enumerate(zip(blocks, seeds)):
            params = block_params(initial_params, block, config.num_chains)
            label = "[{}] ".format(block.start) if len(blocks) > 1 else ""
            with cluster.seeded(seed):
                report = self._run_block(
                    block, (index, len(blocks), block.start), report, params, label, args, kwargs
                )
        return self.buffers.draws()

    @pyro.poutine.block
    def _run_block(self, chains: slice, block: tuple, report, initial_params, label, args, kwargs):
        """Run one block of chains as a batch; the report of what it found."""
        config = self.config
        num_chains = chains.stop - chains.start
        total = config.warmup_steps + config.num_samples
        progress: Optional[Progress] = None
        clock = time.perf_counter()
        run = self.starter.start(
            config.warmup_steps,
            args,
            kwargs,
            num_chains=num_chains,
            initial_params=initial_params,  # one chain: with or without its chain dim
            on_compile=lambda message: progress.compiling(message),
            block=block,
            report=report,
        )
        clock = self._tick("setup", clock)
        if self.buffers is None:
            continuous = getattr(run, "continuous_names", ())  # (MixedGibbs, HMC/NUTS)
            check_site_names(run.energy, config.initial_params, config.save_params, continuous)
            device = run.state.codes.device
            # with save_params, only the saved sites' coordinates are stored
            self.buffers = DrawBuffers(
                config.num_chains,
                config.num_samples // config.thinning,
                config.thinning,
                code_dtype(run.energy.layout) if run.energy is not None else torch.int8,
                device,
                saved(run.energy, config.save_params),
                [n for n in continuous if config.save_params is None or n in config.save_params],
            )
        draws = self.buffers
        driver = run.driver
        every = 1 if config.hook_fn is not None else STEPS_PER_CALL
        progress = Progress(tqdm(total=total, disable=config.disable_progbar), num_chains, total)
        phases = (
            ("Warmup", "warmup", config.warmup_steps),
            ("Sample", "sampling", config.num_samples),
        )
        phase = "warmup"

        def observe(t: int, info, codes, log_joint, continuous=None) -> None:
            if phase == "sampling":
                draws.store(t - config.warmup_steps, info, codes, log_joint, chains, continuous)
            if config.hook_fn is not None:
                config.hook_fn(config.kernel, run.current_values(), stage, t - start)
            stats = statistics_of(info)  # (a MixedGibbs run: the discrete half's)
            progress.update(codes.shape[1], stats.get("accepted", stats.get("discrete accepted")))

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
            self.timing["compile"] += driver.compile_seconds
            self.timing["background_compile"] += driver.background_compile_seconds
        run.finish()
        return run.report


class RayBlocks(Strategy):
    """Each block of chains as vectorised chains in a Ray task; the codes and the
    statistics gathered in block order."""

    moves_to_device = False  # on the workers

    def run(self, args: tuple, kwargs: dict, initial_params, seeds=None) -> Draws:
        config = self.config
        blocks, seeds = self._blocks(seeds)
        energy = self.local_density(args, kwargs)
        if initial_params is not None:  # refused here rather than on a worker
            values = initial_params
            if config.num_chains == 1:
                values = energy.with_chain_dim(values)
            energy.check_initial(energy.codes_from_values(values, "Initial value"))
        num_workers = config.num_workers
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
                    config.num_chains,
                    config.chains_per_block,
                    len(blocks),
                    num_workers,
                    num_workers - len(blocks),
                    math.ceil(config.num_chains / num_workers),
                ),
                UserWarning,
                stacklevel=4,
            )
        clock = time.perf_counter()
        results = cluster.run_tasks(
            run_block_task,
            [
                self.task(block, seed, initial_params, args, kwargs)
                for block, seed in zip(blocks, seeds)
            ],
            num_workers=num_workers,
            feature="pyro_gwg.MCMC(chain_method='ray')",
            remote_args=config.ray_remote_args,
            progress_bar=not config.disable_progbar,
            desc="MCMC blocks",
        )
        self.timing["wall"] = time.perf_counter() - clock
        return self.gather(energy, results)

    def task(self, block: slice, seed: int, initial_params, args, kwargs) -> RayBlock:
        """The Ray task of a block of chains: a vectorised run of those chains."""
        config = self.config
        device = config.device
        if device is None and config.ray_remote_args.get("num_gpus", 0):
            device = torch.device("cuda")
        size = block.stop - block.start
        block_config = dataclasses.replace(
            config,
            initial_params=block_params(initial_params, block, config.num_chains),
            num_chains=size,
            chains_per_block=size,
            disable_progbar=True,
            device=device,
        )
        return RayBlock(block_config, seed, args, kwargs)

    def gather(self, energy: ModelDensity, results: list) -> Draws:
        """The blocks' codes, statistics and timing, in block order."""
        for _, _, timing in results:
            for phase, seconds in timing.items():
                self.timing[phase] = self.timing.get(phase, 0.0) + seconds
        codes = torch.cat([codes for codes, _, _ in results])
        stats = {k: torch.cat([stats[k] for _, stats, _ in results]) for k in results[0][1]}
        return Draws(codes, stats, saved(energy, self.config.save_params))


@dataclasses.dataclass
class RayBlock:
    """What a Ray task needs to run one block of chains."""

    config: RunConfig  # the block's settings
    seed: int
    args: tuple
    kwargs: dict


def run_block_task(block: RayBlock):
    """A Ray task: one block of chains as a vectorised run under the block's seed; its
    codes and statistics (on the CPU) and its timing."""
    config = dataclasses.replace(block.config, device=check_device(block.config.device))
    strategy = LocalBlocks(config)
    args, kwargs, initial_params = on_device(
        config.device, block.args, block.kwargs, config.initial_params
    )
    with validation(config.disable_validation):
        draws = strategy.run(args, kwargs, initial_params, seeds=[block.seed])
    stats = {k: v.cpu() for k, v in draws.statistics.items()}
    return draws.codes.cpu(), stats, strategy.timing


class PyroChains(Strategy):
    """The chains through :class:`pyro.infer.MCMC` (one process per chain); the draws
    are converted to codes, thinned, and with ``save_params`` reduced to the saved
    sites at the end."""

    def run(self, args: tuple, kwargs: dict, initial_params, seeds=None) -> Draws:
        config = self.config
        energy = self.local_density(args, kwargs)
        mcmc = pyro.infer.MCMC(
            config.kernel,
            num_samples=config.num_samples,
            warmup_steps=config.warmup_steps,
            num_chains=config.num_chains,
            initial_params=initial_params,
            hook_fn=config.hook_fn,
            mp_context=config.mp_context or "spawn",
            disable_progbar=config.disable_progbar,
            disable_validation=config.disable_validation,
        )
        # compiled in Pyro's worker processes, not measured
        del self.timing["compile"], self.timing["background_compile"]
        clock = time.perf_counter()
        mcmc.run(*args, **kwargs)
        self._tick("sampling", clock)
        kept = slice(config.thinning - 1, None, config.thinning)
        samples = {k: v[:, kept] for k, v in mcmc.get_samples(group_by_chain=True).items()}
        num_kept = config.num_samples // config.thinning
        codes = torch.empty(
            (config.num_chains, num_kept, energy.num_coords), dtype=code_dtype(energy.layout)
        )
        for c in range(config.num_chains):
            codes[c] = energy.codes_from_values({k: v[c] for k, v in samples.items()})
        # the kernel's per-chain statistics (Pyro's diagnostics() would also compute
        # the ESS of every site, which needs T x T memory per coordinate)
        per_chain = _trace.run_chain_statistics(mcmc)
        stats = {}
        for name in per_chain[0]:
            values = [chain[name] for chain in per_chain]
            if all(isinstance(v, torch.Tensor) and v.dim() == 1 for v in values):
                if all(v.shape[0] == config.num_samples for v in values):
                    stats[name] = torch.stack(values)[:, kept]
        decoder = saved(energy, config.save_params)
        if config.save_params is not None:  # keep only the codes of the saved sites
            codes = codes[..., decoder.columns.to(codes.device)]
        return Draws(codes, stats, decoder)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


#: the strategy of each chain method, for the discrete kernels
STRATEGIES = {
    "vectorized": LocalBlocks,
    "sequential": LocalBlocks,
    "parallel": PyroChains,
    "ray": RayBlocks,
}


def strategy_for(kernel, chain_method: str):
    """``(strategy class, starter)``: how :class:`pyro_gwg.MCMC` runs the chains of
    ``kernel`` under ``chain_method`` (one of :data:`STRATEGIES`), and what starts a
    block of them (see :class:`Strategy`): the one place that says which kernels it
    runs. A discrete kernel runs under every chain method;
    :class:`~pyro_gwg.MixedGibbs` and Pyro's :class:`~pyro.infer.HMC` /
    :class:`~pyro.infer.NUTS` run as vectorised (or sequential) blocks of chains in
    this process (:meth:`MixedGibbs.start
    <pyro_gwg.kernels.mixed.MixedGibbs.start>`,
    :func:`~pyro_gwg.kernels.mixed.start_continuous`).

    :param kernel: the kernel given to :class:`pyro_gwg.MCMC`.
    :param str chain_method: the chain method.
    :raises TypeError: for a kernel it does not run.
    :raises ValueError: for a chain method that does not run this kernel, naming what
        to use instead.
    """
    if isinstance(kernel, (DiscreteKernel, Auto)):  # (Auto: as its planned discrete kernel)
        return STRATEGIES[chain_method], kernel
    if isinstance(kernel, MixedGibbs):
        starter = kernel
    elif isinstance(kernel, pyro.infer.HMC):  # (NUTS is an HMC)
        starter = _ContinuousKernel(kernel)
    else:
        raise TypeError(
            "pyro_gwg.MCMC runs pyro-gwg kernels (GWG, ...), MixedGibbs and Pyro's HMC or "
            "NUTS; for {} use pyro.infer.MCMC.".format(type(kernel).__name__)
        )
    if chain_method not in ("vectorized", "sequential"):
        raise ValueError(
            "pyro_gwg.MCMC runs {} with chain_method='vectorized' (the default: the "
            "discrete half batched over chains, one HMC/NUTS kernel per chain, in this "
            "process) or 'sequential' only, got chain_method={!r}. Use "
            "chain_method='vectorized', or pyro.infer.MCMC(..., num_chains=..., "
            "mp_context='spawn') for one process per chain.".format(
                type(kernel).__name__, chain_method
            )
        )
    return LocalBlocks, starter


@dataclasses.dataclass
class _ContinuousKernel:
    """A Pyro HMC/NUTS kernel as a starter of blocks of chains (see
    :func:`~pyro_gwg.kernels.mixed.start_continuous`)."""

    kernel: pyro.infer.HMC

    def start(self, warmup_steps: int, model_args: tuple, model_kwargs: dict, **options):
        return start_continuous(self.kernel, warmup_steps, model_args, model_kwargs, **options)
