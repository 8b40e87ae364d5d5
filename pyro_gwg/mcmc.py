"""``pyro_gwg.MCMC``: Pyro's MCMC interface with chains run as one batched tensor.

:class:`MCMC` mirrors :class:`pyro.infer.MCMC` (``run``, ``get_samples``,
``diagnostics``, ``summary``, ``hook_fn``) and adds ``chain_method="vectorized"``: all
chains advance together as a leading batch dimension of one state tensor, so a step of
hundreds or thousands of chains costs far less than as many single-chain steps (on
the CPU measured by ``benchmarks/chain_throughput.py``: 256 chains take about 7x one
chain's step time, not 256x), on the CPU or on the GPU that holds the model's
tensors. ``"sequential"`` runs the chains one after the other with the same fast loop;
``"parallel"`` hands them to :class:`pyro.infer.MCMC` (one process per chain).

Vectorised and sequential runs call the kernel's compiled transition function
(:meth:`DiscreteKernel.advance <pyro_gwg.DiscreteKernel.advance>`) for
:data:`STEPS_PER_CALL` transitions at a time, the few left at the end of warmup and of
sampling eagerly; warmup steps of a kernel that adapts, and every step of a run with a
``hook_fn``, go one at a time. With the kernels' default ``jit_compile="auto"`` the
function is traced by :func:`torch.jit.trace`, or compiled by TorchInductor for runs of
at least :data:`AUTO_INDUCTOR_MIN_SIZE` chain-transition-coordinates, where its seconds
of compilation pay off (see :mod:`pyro_gwg.compilation`). Draws are stored as integer
codes in preallocated buffers (the smallest integer type that holds the model's values,
thinned as they are stored) and decoded to model values once, after the run; the
per-draw statistics of the kernel accumulate on the device, and the host synchronises
only to refresh the progress bar.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, Optional

import pyro
import torch
from pyro.infer.mcmc.util import diagnostics as pyro_diagnostics
from pyro.infer.mcmc.util import print_summary, select_samples
from tqdm.auto import tqdm

from pyro_gwg.kernels.base import DiscreteKernel

__all__ = ["AUTO_INDUCTOR_MIN_SIZE", "MCMC", "STEPS_PER_CALL"]

_CHAIN_METHODS = ("vectorized", "sequential", "parallel")
#: transitions per call of the compiled transition function
STEPS_PER_CALL = 8
#: with ``jit_compile="auto"``, runs of at least this size (chains x transitions x
#: coordinates) compile with TorchInductor, smaller ones with torch.jit.trace.
#: Measured on a CPU (GWG, 8 steps per call): TorchInductor takes about 8.5 s to
#: compile and saves 9-60 ns per chain, transition and coordinate over the trace
#: (10 x 10 Ising with 16 chains: 116 -> 20 us per step; 40 x 40 Ising with 256
#: chains: 7.2 -> 2.9 ms; RBM 784 x 500 with 16 chains: 499 -> 354 us); this size
#: keeps the time lost by the wrong choice below 9 s at either end of that range
AUTO_INDUCTOR_MIN_SIZE = 25 * 10**7


class MCMC:
    """Run a pyro-gwg kernel on many chains; the interface of :class:`pyro.infer.MCMC`.

    :param DiscreteKernel kernel: a pyro-gwg kernel, e.g. :class:`~pyro_gwg.GWG`.
    :param int num_samples: draws per chain after warmup (before thinning).
    :param int warmup_steps: warmup (adaptation) steps per chain.
    :param int num_chains: number of chains.
    :param str chain_method: ``"vectorized"`` (all chains as one batch), ``"sequential"``
        (one chain after the other) or ``"parallel"`` (processes, through
        :class:`pyro.infer.MCMC`).
    :param dict initial_params: initial model values, each with a leading chain
        dimension of size ``num_chains``.
    :param int thinning: keep every ``thinning``-th draw (``num_samples // thinning``
        draws per chain are stored).
    :param device: move tensor arguments of the model to this device before the run,
        so that a model that builds its tensors from its data runs there.
    :param callable hook_fn: ``hook_fn(kernel, params, stage, i)`` after every step, as
        in Pyro; ``params`` holds the model values of all chains ``[C, ...]`` (computing
        them costs time, so runs without a hook are faster).
    :param bool disable_progbar: no progress bar.
    :param bool disable_validation: disable Pyro's distribution validation during the
        run (as :class:`pyro.infer.MCMC` does by default).
    :param str mp_context: multiprocessing context for ``chain_method="parallel"``
        (default ``"spawn"``: PyTorch's OpenMP thread pool does not survive ``fork``
        once the parent process has used it, so forked chains can hang).

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
        warmup_steps: int = 0,
        num_chains: int = 1,
        chain_method: str = "vectorized",
        initial_params: Optional[Dict[str, torch.Tensor]] = None,
        thinning: int = 1,
        device=None,
        hook_fn: Optional[Callable] = None,
        disable_progbar: bool = False,
        disable_validation: bool = True,
        mp_context: Optional[str] = None,
    ) -> None:
        if chain_method not in _CHAIN_METHODS:
            raise ValueError(
                "chain_method must be one of {}, got {!r}".format(_CHAIN_METHODS, chain_method)
            )
        if not isinstance(kernel, DiscreteKernel):
            raise TypeError(
                "pyro_gwg.MCMC runs pyro-gwg kernels (GWG, ...); for {} use "
                "pyro.infer.MCMC.".format(type(kernel).__name__)
            )
        if int(thinning) != thinning or thinning < 1:
            raise ValueError("thinning must be a positive integer, got {}".format(thinning))
        self.kernel = kernel
        self.num_samples = num_samples
        self.warmup_steps = warmup_steps
        self.num_chains = num_chains
        self.chain_method = chain_method
        self.initial_params = initial_params
        self.thinning = int(thinning)
        self.device = device
        self.hook_fn = hook_fn
        self.disable_progbar = disable_progbar
        self.disable_validation = disable_validation
        self.mp_context = mp_context
        self._samples: Optional[Dict[str, torch.Tensor]] = None
        self._stats: Dict[str, torch.Tensor] = {}
        #: wall-clock seconds of the last run: ``setup`` (tracing, initial states),
        #: ``warmup`` and ``sampling`` (compilation falls in the first step of warmup,
        #: or of sampling without warmup), summed over chains run one after the other
        self.timing: Dict[str, float] = {}
        self._args, self._kwargs = (), {}

    # ------------------------------------------------------------------ running
    def run(self, *args, **kwargs) -> None:
        """Run the chains; the model's arguments are passed through.

        :raises UnsupportedModelError: for ``chain_method="vectorized"``, when the
            model does not broadcast over a leading chain dimension (naming the site).
        """
        if self.device is not None:
            args = tuple(_to(a, self.device) for a in args)
            kwargs = {k: _to(v, self.device) for k, v in kwargs.items()}
        self._args, self._kwargs = args, kwargs
        self.timing = {"setup": 0.0, "warmup": 0.0, "sampling": 0.0}
        with pyro.validation_enabled(not self.disable_validation):
            if self.chain_method == "parallel":
                self._run_with_pyro(args, kwargs)
            elif self.chain_method == "vectorized":
                self._samples, self._stats = self._run_batch(
                    self.num_chains, self.initial_params, "", args, kwargs
                )
            else:
                runs = [
                    self._run_batch(1, self._chain_params(c), "[{}] ".format(c), args, kwargs)
                    for c in range(self.num_chains)
                ]
                self._samples = {k: torch.cat([r[0][k] for r in runs]) for k in runs[0][0]}
                self._stats = {k: torch.cat([r[1][k] for r in runs]) for k in runs[0][1]}

    def _chain_params(self, chain: int) -> Optional[Dict[str, torch.Tensor]]:
        if self.initial_params is None:
            return None
        return {k: v[chain : chain + 1] for k, v in self.initial_params.items()}

    @pyro.poutine.block
    def _run_batch(self, num_chains, initial_params, label, args, kwargs):
        kernel = self.kernel
        kernel.vectorized_chains = num_chains
        if initial_params is not None and num_chains == 1:
            initial_params = {k: v[0] for k, v in initial_params.items()}
        kernel.initial_params = initial_params
        clock = time.perf_counter()
        kernel.setup(self.warmup_steps, *args, **kwargs)
        clock = self._tick("setup", clock)
        layout = kernel.energy.layout
        draws = _DrawBuffers(
            num_chains,
            self.num_samples // self.thinning,
            self.thinning,
            layout.num_coords,
            _code_dtype(layout),
            kernel.state.codes.device,
        )
        total = self.warmup_steps + self.num_samples
        size = num_chains * total * layout.num_coords
        backend = "inductor" if size >= AUTO_INDUCTOR_MIN_SIZE else "trace"
        progress = _Progress(tqdm(total=total, disable=self.disable_progbar), num_chains, total)
        phases = (
            ("Warmup", "warmup", False, self.warmup_steps),
            ("Sample", "sampling", True, total),
        )
        t = 0
        for stage, phase, keep, end in phases:
            progress.start(stage + " " + label)
            while t < end:
                if self.hook_fn is not None or (kernel.adapts and stage == "Warmup"):
                    info, codes, log_joint = _one_transition(kernel, draws.code_dtype)
                else:  # whole calls compiled, the remainder of the phase eagerly
                    steps = min(STEPS_PER_CALL, end - t)
                    info, codes, log_joint = kernel.advance(
                        steps, draws.code_dtype, backend if steps == STEPS_PER_CALL else None
                    )
                steps = codes.shape[1]
                if keep:
                    draws.store(t - self.warmup_steps, info, codes, log_joint)
                if self.hook_fn is not None:
                    self.hook_fn(kernel, kernel.current_values(), stage, t)
                progress.update(steps, info.accepted)
                t += steps
            _synchronize(draws.codes.device)
            clock = self._tick(phase, clock)
        progress.close()
        values = kernel.energy.values_from_codes(draws.codes.flatten(0, 1).long())
        dtype = torch.get_default_dtype()
        samples = {
            name: v.to(dtype).reshape(draws.codes.shape[:2] + v.shape[1:])
            for name, v in values.items()
        }
        kernel.cleanup()
        return samples, draws.stats

    def _tick(self, phase: str, since: float) -> float:
        now = time.perf_counter()
        self.timing[phase] += now - since
        return now

    def _run_with_pyro(self, args, kwargs) -> None:
        mcmc = pyro.infer.MCMC(
            self.kernel,
            num_samples=self.num_samples,
            warmup_steps=self.warmup_steps,
            num_chains=self.num_chains,
            initial_params=self.initial_params,
            hook_fn=self.hook_fn,
            mp_context=self.mp_context or "spawn",
            disable_progbar=self.disable_progbar,
            disable_validation=self.disable_validation,
        )
        mcmc.run(*args, **kwargs)
        samples = mcmc.get_samples(group_by_chain=True)
        self._samples = {k: v[:, self.thinning - 1 :: self.thinning] for k, v in samples.items()}
        diagnostics = mcmc.diagnostics()
        chains = ["chain {}".format(c) for c in range(self.num_chains)]
        self._stats = {
            name: torch.stack([per_chain[c] for c in chains])[:, self.thinning - 1 :: self.thinning]
            for name, per_chain in diagnostics.items()
            if isinstance(per_chain, dict)
            and all(isinstance(per_chain.get(c), torch.Tensor) for c in chains)
            and per_chain[chains[0]].dim() == 1
        }

    # ------------------------------------------------------------------ results
    def get_samples(self, num_samples: Optional[int] = None, group_by_chain: bool = False):
        """Draws ``{site: [num_chains, num_draws, ...]}`` (or flattened over chains).

        :param int num_samples: draw this many samples with replacement (as Pyro does).
        :param bool group_by_chain: keep the chain dimension.
        """
        if self._samples is None:
            raise RuntimeError("MCMC.run() has not been called.")
        return select_samples(self._samples, num_samples, group_by_chain)

    def get_statistics(self) -> Dict[str, torch.Tensor]:
        """Per-draw kernel statistics ``{name: [num_chains, num_draws]}`` (``accepted``,
        ``accept_prob``, ``num_changed``, ``log_joint``, ...)."""
        return dict(self._stats)

    def diagnostics(self) -> Dict[str, Dict[str, object]]:
        """Pyro's diagnostics (effective sample size, split R-hat per site) plus the
        kernel's per-draw statistics, as ``{name: {"chain i": tensor}}``, and the
        acceptance rate per chain."""
        diag = pyro_diagnostics(self._samples)
        chains = ["chain {}".format(c) for c in range(self.num_chains)]
        for name, value in self._stats.items():
            diag[name] = dict(zip(chains, value.cpu()))
        if "accepted" in self._stats:
            rates = self._stats["accepted"].float().mean(-1).tolist()
            diag["acceptance rate"] = dict(zip(chains, rates))
        diag["divergences"] = {c: [] for c in chains}
        return diag

    def summary(self, prob: float = 0.9) -> None:
        """Print Pyro's summary table (mean, std, quantiles, n_eff, r_hat per site)."""
        print_summary(self._samples, prob=prob)


def _one_transition(kernel: DiscreteKernel, code_dtype: torch.dtype):
    """One transition (with warmup adaptation), shaped like :meth:`DiscreteKernel.advance`."""
    info, _ = kernel.transition()
    state = kernel.state
    info = type(info)(*(field.unsqueeze(1) for field in info))
    return info, state.codes.to(code_dtype).unsqueeze(1), state.log_joint.unsqueeze(1)


class _DrawBuffers:
    """Preallocated ``[C, num_kept, ...]`` buffers of the kept draws (codes) and of the
    per-draw statistics, filled on the device from runs of transitions."""

    def __init__(self, num_chains, num_kept, thinning, num_coords, code_dtype, device):
        self.num_kept, self.thinning, self.code_dtype = num_kept, thinning, code_dtype
        self.codes = torch.empty(
            (num_chains, num_kept, num_coords), dtype=code_dtype, device=device
        )
        self.stats: Dict[str, torch.Tensor] = {}

    def store(self, first: int, info, codes: torch.Tensor, log_joint: torch.Tensor) -> None:
        """Keep the thinned draws among the draws ``first, first + 1, ...`` (after
        warmup) of a run of transitions; ``codes [C, n, D]``, the rest ``[C, n]``."""
        thin = self.thinning
        offset = -(first + 1) % thin  # run position of the first draw j with (j + 1) % thin == 0
        slot = (first + offset) // thin
        count = min(len(range(offset, codes.shape[1], thin)), self.num_kept - slot)
        if count <= 0:
            return
        kept = slice(offset, offset + thin * (count - 1) + 1, thin)
        self.codes[:, slot : slot + count] = codes[:, kept]
        for name, value in dict(info._asdict(), log_joint=log_joint).items():
            if name not in self.stats:
                self.stats[name] = torch.empty(
                    (value.shape[0], self.num_kept), dtype=value.dtype, device=value.device
                )
            self.stats[name][:, slot : slot + count] = value[:, kept]


class _Progress:
    """Progress bar with the acceptance rate of the current phase; the accepted count
    stays on the device and is read only when the bar is refreshed."""

    def __init__(self, bar, num_chains: int, total: int) -> None:
        self.bar, self.num_chains = bar, num_chains
        self.refresh = max(1, total // 200)
        self.accepted, self.steps = torch.zeros(()), 0

    def start(self, description: str) -> None:
        self.bar.set_description(description)
        self.accepted, self.steps = torch.zeros(()), 0

    def update(self, steps: int, accepted: torch.Tensor) -> None:
        self.accepted = self.accepted.to(accepted.device) + accepted.sum()
        self.steps += steps
        done = self.bar.n + steps
        if not self.bar.disable and (
            done // self.refresh > self.bar.n // self.refresh or done == self.bar.total
        ):
            rate = float(self.accepted) / (self.steps * self.num_chains)
            self.bar.set_postfix({"acc. rate": "{:.3f}".format(rate)}, refresh=False)
        self.bar.update(steps)

    def close(self) -> None:
        self.bar.close()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _to(value, device):
    return value.to(device) if isinstance(value, torch.Tensor) else value


def _code_dtype(layout) -> torch.dtype:
    """Smallest integer type holding every code of the layout (int64 if unbounded)."""
    low = float(torch.where(layout.is_scalar, layout.lower, 0.0).min())
    high = float(torch.where(layout.is_scalar, layout.upper, layout.num_categories - 1.0).max())
    for dtype in (torch.int8, torch.int16, torch.int32):
        info = torch.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return dtype
    return torch.int64
