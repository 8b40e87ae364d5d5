r"""The default path's cost per step against the floor: a hand-written, fused GWG step.

What is measured
----------------
For each setting (target, chain count), in ONE worker process (``--threads`` torch
threads, default 1), with an on-disk compile cache of its own
(``PYRO_GWG_CACHE_DIR``, a fresh empty folder):

* ``default``: the path users run, the model written as a user writes it for Pyro
  (:func:`peers.user_model`) and run by ``pyro_gwg.MCMC(GWG(model, num_flips="auto"),
  num_samples, warmup_steps=``:data:`peers.GWG_WARMUP` ``, num_chains=C,
  disable_progbar=True)`` with every other argument at its default. Microseconds per
  step are ``mcmc.timing["sampling"] / num_samples`` (one step moves all ``C`` chains).
  It runs twice: ``uncached`` (the first run of the process, with the cache empty) and
  ``cached`` (after the first run's compilation, which the library does in the
  background, has landed in the cache: the worker waits for the library's compile
  processes to end, up to ``--compile-timeout`` seconds). Each run asks for as many
  draws as fill ``--budget`` seconds at the rate a pilot run measured just before it:
  the pilot of the uncached run uses a throw-away cache and no background compilation
  (so that the measured run starts from an empty cache: its rate is that of the
  uncompiled path, and the run may end sooner once the compiled step takes over), the
  pilot of the cached run uses the filled cache (and a cached run that fills less than
  half the budget, its pilot's few draws having overstated the one-time load of the
  compiled step, is run again at its own rate).
* ``fused``: the floor, the same transition written by hand in plain PyTorch and
  compiled whole with ``torch.compile(step, fullgraph=True, dynamic=False)``: the log
  density and its gradient written out (no autograd, no Pyro), the GWG proposal of
  ``GWG(num_flips=N)`` at its defaults (:func:`pyro_gwg.proposals.gwg.gwg_step`:
  ``N`` coordinates drawn *with* replacement from the coordinate marginal
  :math:`q(i \mid x) = (1 - w)\,\mathrm{Softmax}(\tilde d(x) / 2)_i + w / D`, with the
  defensive weight ``w = 0.05``; the distinct drawn bits flip; the MH ratio
  :math:`e^{f(x') - f(x)} \prod_n q(i_n \mid x') / q(i_n \mid x)`) with ``N`` the
  number of flips the default path's warmup settled on, batched over the ``C`` chains.
  It keeps no draws (the bare transition). Its compile seconds are those of the first
  call; then, after as many untimed calls as the default path has warmup steps, it
  runs for the same ``--budget`` seconds.
  Measured twice: with ``torch.compile``'s defaults (``fused``: Inductor's kernels
  called from Python) and with Inductor's C++ wrapper (``fused_cpp_wrapper``: no
  Python between the kernels, as in an AOTInductor package).
* ``ratio``: default microseconds per step over fused, uncached and cached; and cached
  over the C++-wrapper floor.

The gains :math:`\tilde d_i = g_i (1 - 2 x_i)` (:math:`g = \nabla_x f`) of the fused
step, with :math:`s = 2x - 1`:

* Ising, :math:`f = \theta \sum_{\langle ij \rangle} s_i s_j`: with :math:`n_i` the sum
  of the four neighbours' spins, :math:`\partial f / \partial s_i = \theta n_i`, so
  :math:`g_i = 2 \theta n_i`, :math:`\tilde d_i = -2 \theta s_i n_i` (the exact change
  of ``f`` when bit ``i`` flips: ``f`` is linear in each spin), and
  :math:`f = \tfrac{\theta}{2} \sum_i s_i n_i`;
* RBM (hidden units summed out), :math:`f = b^\top v + \sum_j
  \mathrm{softplus}(W v + c)_j`: :math:`g = b + W^\top \sigma(W v + c)`.

Constants of the log density (the priors' normalisers) are left out: MH ratios do not
see them.

Time to the first draw: the wall time of ``mcmc.run()`` with ``num_samples=1,
warmup_steps=0`` from a fresh ``pyro_gwg.MCMC``, each in a fresh process:
``uncached`` with an empty cache folder (that process then runs the same settings for
a few more draws, which starts the background compilation, and waits for it to land
in the cache), ``cached`` in the next process, with that folder. Each process then
runs :data:`FILL_STEPS` draws of the same settings (the process's first capture, at
the transition's second step, and in the cached process the load of its package):
that run's ``mcmc.timing["compile"]``, the seconds the chains waited (``blocked``),
is reported beside the time to the first draw.

The drop-in path (``dropin``): for L = 10 at theta 0.4 and the RBM, in ONE worker
process with a fresh cache folder of its own, one chain of ``GWG(model)`` (its default
``num_flips``) run by ``pyro.infer.MCMC(kernel, num_samples, warmup_steps=0,
disable_progbar=True)`` (``pyro_infer``: Pyro's own runner, whose draws the kernel
serves from blocks of transitions) and by ``pyro_gwg.MCMC(kernel, num_samples,
warmup_steps=0, num_chains=1, disable_progbar=True)`` (``pyro_gwg``), every other
argument at its default. First a ``pyro_gwg.MCMC`` run of :data:`DROPIN_FILL` draws
starts the background compile, and the worker waits for it to land in the cache; one
untimed run of each runner then loads the package. Where ``pyro_gwg.MCMC``'s loads
none (the library refused the capture of the fill's transition, its check against the
eager step having failed at the fill's state, and ran it eagerly without a compile),
the fill is tried again from the next seed, up to :data:`DROPIN_FILL_TRIES` times
(``fill`` in the JSON lists the tries, ``warnings`` the library's warnings).
Microseconds per draw are the difference of the wall times of ``.run()`` with
:data:`DROPIN_SHORT` and
``DROPIN_SHORT + N`` draws over ``N`` (set-up, the capture and load of the compiled
transition, and the ramp of blocks cancel out), ``N`` filling ``--budget`` seconds at
the rate a pilot measured (then at the median rate measured so far); the runners are
interleaved, in reverse order every other round, for ``--dropin-rounds`` rounds; the
table gives the per-runner medians and the median of the per-round ratios ``ratio =
pyro_infer_us / pyro_gwg_us`` (issue 29: at most 1.5, ``met``). ``pyro_loop_us`` is
Pyro's own per-draw loop, measured the same way with a kernel that returns its
parameters (:class:`step_cost.StillKernel`, a parameter of the model's size), and
``kernel_us = pyro_infer_us - pyro_loop_us`` the kernel's share, to set against
``pyro_gwg_us``. ``compiled`` says what was checked of the compiled transition: every
measured run of each runner logged one load of it from the cache (the library's
``"loaded a compiled transition"`` message), the cache holds a package, no compile
process ran after the wait for the fill's nor after the rounds, and the rounds added no
file to the cache (no compile of their own); ``met`` needs all of it.

The targets of issue 29: the default path per step (cached) within 1.5x of the fused
floor at L = 10 with 16 chains and on the RBM (``met``), the first draw in under 2 s
cached or not, and the drop-in path within 1.5x of ``pyro_gwg.MCMC`` with one chain.
Settings run one after the other on a shared 2-core machine whose load varies between
runs (the library's background compiler takes the second core while it runs), so
compare numbers within one setting.

Run from the repository root::

    python benchmarks/floor.py            # L = 10 and 40 at theta 0.4, 16 and 256 chains, RBM
    python benchmarks/floor.py --quick    # L = 10, 16 chains, short budget
    python benchmarks/floor.py --dropin-only --budget 4   # the drop-in comparison only

Results go to ``benchmarks/results/floor.json`` (``--output``);
``benchmarks/report.py`` puts them into ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from peers import (
    GWG_WARMUP,
    MAX_STORED_BYTES,
    header,
    num_coords,
    rbm_arrays,
    target_name,
    thread_env,
    user_model,
    wait_for_compiles,
)

HERE = Path(__file__).resolve().parent
#: draws of each pilot run (after its warmup), which measures the rate of the run after it
PILOT = 200
#: steps of the run, after the first draw's, that fills the cache for the cached first draw
FILL_STEPS = 20
#: the largest ratio of default to fused microseconds per step that meets the target
RATIO_TARGET = 1.5
#: the longest time to the first draw that meets the target, seconds
FIRST_DRAW_TARGET_S = 2.0
#: the largest difference of acceptance rates between the default runs and the fused
#: step that still counts as the same transition (their noise is below 0.01; but they
#: are averaged over different stretches of the chains, so a target that equilibrates
#: slowly, such as L = 40 with 256 chains, can differ while its chains still approach
#: equilibrium)
ACCEPT_TOLERANCE = 0.05
#: ``GWG``'s defaults that the fused step reproduces
TEMPERATURE = 2.0
UNIFORM_WEIGHT = 0.05
#: keeps a uniform draw strictly below the total mass (as the library's inverse CDF)
CDF_MARGIN = 1e-12
#: the drop-in comparison (see the module docstring): its targets, the draws of the run
#: that fills the cache, of the short run of each difference (past the ramp of blocks of
#: 1, 2, 4, ... 64 transitions that pyro.infer.MCMC's draws are served from) and of the
#: pilot that sizes the long runs, its rounds, and issue 29's largest ratio
DROPIN_TARGETS = ({"kind": "ising", "size": 10, "theta": 0.4}, {"kind": "rbm"})
DROPIN_FILL = 300
#: fills tried, from successive seeds, until ``pyro_gwg.MCMC`` loads a package (a fill
#: whose transition's capture the library refuses, see the module docstring, starts no
#: compile)
DROPIN_FILL_TRIES = 3
DROPIN_SHORT = 200
DROPIN_PILOT = 1000
DROPIN_ROUNDS = 3
DROPIN_REQUIRED = 1.5
#: the drop-in comparison's runners, in the order of the first round
DROPIN_RUNNERS = ("pyro_infer", "pyro_gwg", "pyro_loop")
#: the message the library logs when a run loads its compiled transition from the cache
LOADED_MESSAGE = "loaded a compiled transition"
NOTE = (
    "Measured on a 2-core machine, one torch thread per process (the library's background "
    "compiler takes the second core while it runs); the machine is shared and its load "
    "varies between runs: compare numbers within one setting."
)


# ----------------------------------------------------------------------------- targets
#: the targets a full run measures, by ``--targets`` key: lattice sides and the RBM
TARGETS = ("10", "40", "rbm")


def targets(quick: bool, keys=TARGETS, thetas=(0.4,)) -> List[Dict[str, object]]:
    """The targets of the run: the lattices of sides in ``keys`` at each ``theta``,
    then the RBM if ``keys`` has ``"rbm"`` (``quick``: L = 10 at theta 0.4 only)."""
    if quick:
        return [{"kind": "ising", "size": 10, "theta": 0.4}]
    sizes = [int(key) for key in keys if key != "rbm"]
    ising = [{"kind": "ising", "size": size, "theta": theta} for size in sizes for theta in thetas]
    return ising + ([{"kind": "rbm"}] if "rbm" in keys else [])


def target_met(target: Dict[str, object], chains: int) -> bool:
    """Whether issue 29 sets the 1.5x target for this setting: L = 10 with 16 chains,
    and the RBM."""
    return target["kind"] == "rbm" or (target["size"] == 10 and chains == 16)


# ----------------------------------------------------------------------------- fused step
def ising_terms(x, size: int, theta: float):
    """``(f [C], gains [C, D])`` of the periodic ``size x size`` Ising model at bits
    ``x [C, D]`` (row-major), by hand (see the module docstring)."""
    import torch

    s = (2 * x - 1).reshape(-1, size, size)
    neighbours = (
        torch.roll(s, 1, -1) + torch.roll(s, -1, -1) + torch.roll(s, 1, -2) + torch.roll(s, -1, -2)
    )
    field = (s * neighbours).flatten(1)
    return 0.5 * theta * field.sum(-1), -2 * theta * field


def rbm_terms(v, weights, visible_bias, hidden_bias):
    """``(f [C], gains [C, D])`` of the RBM (hidden units summed out) at bits
    ``v [C, D]``, by hand (see the module docstring)."""
    import torch

    hidden = v @ weights.T + hidden_bias
    f = v @ visible_bias + torch.nn.functional.softplus(hidden).sum(-1)
    grad = visible_bias + torch.sigmoid(hidden) @ weights
    return f, grad * (1 - 2 * v)


def proposal_log_probs(gains):
    """``log q(i | x) [C, D]``: :math:`(1 - w)\\,\\mathrm{Softmax}(\\tilde d / 2) + w / D`."""
    import torch

    mixed = (1 - UNIFORM_WEIGHT) * torch.softmax(gains / TEMPERATURE, -1)
    return (mixed + UNIFORM_WEIGHT / gains.shape[-1]).log()


def draw_coordinates(log_q, num_flips: int):
    """long ``[C, N]``: ``N`` coordinates per chain drawn with replacement from
    ``exp(log_q)``, by inverting the cumulative distribution (in float64)."""
    import torch

    cdf = log_q.exp().double().cumsum(-1)
    total = cdf[:, -1:]
    uniform = torch.rand(cdf.shape[0], num_flips, dtype=cdf.dtype)
    return torch.searchsorted(cdf, torch.minimum(uniform * total, total * (1 - CDF_MARGIN)))


def propose(x, draws):
    """The proposed bits: every distinct drawn coordinate flipped."""
    import torch

    flip = torch.zeros_like(x).scatter(1, draws, 1.0)
    return x + flip * (1 - 2 * x)


def log_ratio(f, log_q, f_new, log_q_new, draws):
    """The MH log ratio of the move ``draws`` (an auxiliary sequence, Eq. 27 of
    Grathwohl et al. 2021): :math:`f(x') - f(x) + \\sum_n \\log q(i_n|x') - \\log
    q(i_n|x)`."""
    return f_new - f + (log_q_new.gather(1, draws) - log_q.gather(1, draws)).sum(-1)


def make_step(terms: Callable, num_flips: int) -> Callable:
    """The fused GWG step ``(x, f, log_q) -> (x, f, log_q, accepted)`` on the log
    density and gains ``terms(x) -> (f, gains)``."""
    import torch

    def step(x, f, log_q):
        draws = draw_coordinates(log_q, num_flips)
        proposed = propose(x, draws)
        f_new, gains_new = terms(proposed)
        log_q_new = proposal_log_probs(gains_new)
        accepted = torch.rand_like(f).log() < log_ratio(f, log_q, f_new, log_q_new, draws)
        keep = accepted.unsqueeze(-1)
        return (
            torch.where(keep, proposed, x),
            torch.where(accepted, f_new, f),
            torch.where(keep, log_q_new, log_q),
            accepted,
        )

    return step


def fused_terms(target: Dict[str, object], rbm_path: Path) -> Callable:
    """``terms(x) -> (f, gains)`` of ``target``."""
    import torch

    if target["kind"] == "ising":
        size, theta = int(target["size"]), float(target["theta"])
        return lambda x: ising_terms(x, size, theta)
    arrays = rbm_arrays(rbm_path)
    weights, visible_bias, hidden_bias = (
        torch.from_numpy(arrays[k]).float() for k in ("weights", "visible_bias", "hidden_bias")
    )
    return lambda v: rbm_terms(v, weights, visible_bias, hidden_bias)


def fused_init(terms: Callable, x) -> Tuple[object, object, object]:
    """The fused step's state ``(x, f, log_q)`` at bits ``x``."""
    f, gains = terms(x)
    return x, f, proposal_log_probs(gains)


#: the fused step's compile settings: ``torch.compile``'s defaults (Inductor's Python
#: wrapper around its kernels), and Inductor's C++ wrapper (the form AOTInductor runs)
FUSED_VARIANTS = {"fused": {}, "fused_cpp_wrapper": {"cpp_wrapper": True}}


def run_fused(
    spec: Dict[str, object], num_flips: int, options: Dict[str, object]
) -> Dict[str, object]:
    """Compile the fused step with Inductor ``options``, call it as many times as the
    default path's warmup has steps (untimed: the chains reach the region the timed
    steps and their acceptance rate describe), then time it for ``budget_s`` seconds."""
    import torch

    torch._dynamo.reset()
    torch.manual_seed(spec["seed"])
    terms = fused_terms(spec["target"], Path(spec["rbm_path"]))
    coords = num_coords(spec["target"])
    state = fused_init(terms, torch.randint(0, 2, (spec["chains"], coords)).float())
    step = torch.compile(
        make_step(terms, num_flips), fullgraph=True, dynamic=False, options=options
    )
    start = time.perf_counter()
    *state, accepted = step(*state)
    compile_s = time.perf_counter() - start
    for _ in range(spec["warmup"]):
        *state, accepted = step(*state)
    steps, blocks, accepts = 0, 0, 0.0
    start = time.perf_counter()
    while True:
        for _ in range(50):
            *state, accepted = step(*state)
        steps += 50
        blocks += 1
        accepts += float(accepted.float().mean())
        seconds = time.perf_counter() - start
        if seconds >= spec["budget_s"]:
            break
    return {
        "us_per_step": 1e6 * seconds / steps,
        "steps": steps,
        "seconds": seconds,
        "compile_s": compile_s,
        "num_flips": num_flips,
        "options": options,
        # the acceptance of the last step of each block of 50, averaged
        "accept_rate": accepts / blocks,
    }


# ----------------------------------------------------------------------------- default path
@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """Environment variables set for the duration of the block."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def default_mcmc(model, chains: int, num_samples: int, warmup: int, thinning: int = 1):
    from pyro_gwg import GWG, MCMC

    return MCMC(
        GWG(model, num_flips="auto"),
        num_samples=num_samples,
        warmup_steps=warmup,
        num_chains=chains,
        thinning=thinning,
        disable_progbar=True,
    )


def run_default(model, spec: Dict[str, object], num_samples: int) -> Dict[str, object]:
    """One run of the default path from the worker's seed: its timing, the number of
    flips its warmup settled on and its acceptance rate."""
    import pyro

    pyro.set_rng_seed(spec["seed"])
    coords = num_coords(spec["target"])
    # keep at most MAX_STORED_BYTES of draws, as peers.py does
    thin = max(1, math.ceil(num_samples * spec["chains"] * coords / MAX_STORED_BYTES))
    num_samples = max(num_samples - num_samples % thin, thin)
    mcmc = default_mcmc(model, spec["chains"], num_samples, spec["warmup"], thin)
    start = time.perf_counter()
    mcmc.run()
    wall = time.perf_counter() - start
    timing = {k: float(v) for k, v in mcmc.timing.items()}
    return {
        "us_per_step": 1e6 * timing["sampling"] / num_samples,
        "num_samples": num_samples,
        "thinning": thin,
        "run_s": wall,
        "compile_s": timing.get("compile"),
        "timing": timing,
        "num_flips": mcmc.kernel.adapted_num_flips,
        "accept_rate": float(mcmc.get_statistics()["accepted"].float().mean()),
    }


def measured_run(
    model, spec: Dict[str, object], pilot_env: Dict[str, str], refine: bool = False
) -> Dict[str, object]:
    """A pilot run (under ``pilot_env``) for the rate, then a run that fills the budget;
    with ``refine``, a run that filled less than half of it (the pilot's few draws
    overstate one-time costs, such as loading a compiled step) is followed by one
    sized at its own rate, which is reported."""
    with environment(**pilot_env):
        pilot = run_default(model, spec, spec["pilot"])
    out = run_default(model, spec, _steps(spec, pilot))
    if refine and out["timing"]["sampling"] < spec["budget_s"] / 2:
        out = dict(run_default(model, spec, _steps(spec, out)), first_try=out)
    out["pilot_us_per_step"] = pilot["us_per_step"]
    return out


def _steps(spec: Dict[str, object], run: Dict[str, object]) -> int:
    """The draws that fill the budget at the rate of ``run``."""
    return max(int(1e6 * spec["budget_s"] / run["us_per_step"]), spec["pilot"])


def run_main(spec: Dict[str, object]) -> Dict[str, object]:
    """The default path uncached and cached, then the fused step, in this process."""
    import torch

    torch.set_num_threads(spec["threads"])
    model, _ = user_model(spec["target"], Path(spec["rbm_path"]))
    out: Dict[str, object] = {}
    throwaway = tempfile.mkdtemp(prefix="floor_pilot_")
    try:
        try:
            # the pilot leaves the cache empty and starts no compilation
            quiet = {"PYRO_GWG_CACHE_DIR": throwaway, "PYRO_GWG_BACKGROUND_COMPILE": "0"}
            out["uncached"] = measured_run(model, spec, quiet)
            out["cache_after_uncached"] = wait_for_compiles(spec["compile_timeout"])
            out["cached"] = measured_run(model, spec, {}, refine=True)
            num_flips = out["cached"]["num_flips"]
        except Exception as error:  # the library's own failure is a result to report
            out["default_error"] = "{}: {}".format(type(error).__name__, error)[:2000]
            num_flips = None
    finally:
        shutil.rmtree(throwaway, ignore_errors=True)
    if num_flips is None:  # no warmup settled it: the kernel's starting value
        num_flips = max(1, round(math.sqrt(num_coords(spec["target"])) / 2.5))
        out["fused_num_flips_note"] = "default path failed: GWG's starting num_flips"
    for name, options in FUSED_VARIANTS.items():
        out[name] = run_fused(spec, num_flips, options)
    return out


def run_first_draw(spec: Dict[str, object]) -> Dict[str, object]:
    """The wall time of ``mcmc.run()`` for one draw without warmup, from a fresh
    ``pyro_gwg.MCMC`` in this fresh process; then a run of :data:`FILL_STEPS` draws of
    the same settings, the seconds its chains waited (``blocked_s``: the capture, and a
    package load from the cache), and, with ``fill_cache``, a wait for the compilation
    it started to land in the cache."""
    import torch

    torch.set_num_threads(spec["threads"])
    import pyro

    model, _ = user_model(spec["target"], Path(spec["rbm_path"]))
    pyro.set_rng_seed(spec["seed"])
    mcmc = default_mcmc(model, spec["chains"], 1, 0)
    start = time.perf_counter()
    mcmc.run()
    out = {
        "run_s": time.perf_counter() - start,
        "timing": {k: float(v) for k, v in mcmc.timing.items()},
        "cache_files_before": len(spec["cache_files_before"]),
    }
    # a few more steps: the capture (and load, or compile) of the transition
    more = default_mcmc(model, spec["chains"], FILL_STEPS, 0)
    more.run()
    out["blocked_s"] = float(more.timing["compile"])
    if spec["fill_cache"]:
        out["cache"] = wait_for_compiles(spec["compile_timeout"])
    return out


# ----------------------------------------------------------------------------- drop-in
class CompileLog(logging.Handler):
    """The messages the library logs (``pyro_gwg`` and below, from DEBUG) while
    installed: cache loads and compile failures."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    @contextlib.contextmanager
    def installed(self) -> Iterator[CompileLog]:
        logger = logging.getLogger("pyro_gwg")
        level = logger.level
        logger.addHandler(self)
        logger.setLevel(logging.DEBUG)
        try:
            yield self
        finally:
            logger.removeHandler(self)
            logger.setLevel(level)

    def loads(self) -> int:
        """The runs that loaded their compiled transition from the cache."""
        return sum(LOADED_MESSAGE in message for message in self.messages)


def dropin_runners(model, num_coords_: int) -> Dict[str, Callable[[int], object]]:
    """``{runner: num_samples -> MCMC}``: ``pyro.infer.MCMC`` and ``pyro_gwg.MCMC`` with
    one chain of ``GWG(model)``, every other argument at its default, and
    ``pyro.infer.MCMC`` around a kernel that does nothing (its own per-draw loop) with a
    parameter of the model's size."""
    import pyro.infer
    from step_cost import StillKernel

    import pyro_gwg

    side = math.isqrt(num_coords_)
    return {
        "pyro_gwg": lambda n: pyro_gwg.MCMC(
            pyro_gwg.GWG(model), num_samples=n, warmup_steps=0, num_chains=1, disable_progbar=True
        ),
        "pyro_infer": lambda n: pyro.infer.MCMC(
            pyro_gwg.GWG(model), num_samples=n, warmup_steps=0, disable_progbar=True
        ),
        "pyro_loop": lambda n: pyro.infer.MCMC(
            StillKernel(side), num_samples=n, warmup_steps=0, disable_progbar=True
        ),
    }


def timed_run(make: Callable[[int], object], num_samples: int, seed: int) -> Tuple[float, object]:
    """The wall time of ``.run()`` of ``make(num_samples)`` from ``seed``, and the MCMC."""
    import pyro

    pyro.set_rng_seed(seed)
    mcmc = make(num_samples)
    start = time.perf_counter()
    mcmc.run()
    return time.perf_counter() - start, mcmc


def us_per_draw(
    make: Callable[[int], object], short: int, extra: int, seed: int, log: CompileLog
) -> Dict[str, object]:
    """Microseconds per draw of ``make``'s runner as the difference of the wall times of
    ``.run()`` with ``short + extra`` and ``short`` draws over ``extra`` (its set-up,
    the load of its compiled transition and the ramp of its blocks cancel out); the
    cache loads the two runs logged, and ``pyro_gwg.MCMC``'s compile seconds."""
    before = log.loads()
    short_s, _ = timed_run(make, short, seed)
    long_s, mcmc = timed_run(make, short + extra, seed)
    timing = getattr(mcmc, "timing", None)
    return {
        "us": 1e6 * (long_s - short_s) / extra,
        "short_s": short_s,
        "long_s": long_s,
        "draws": extra,
        "loads": log.loads() - before,
        "compile_s": float(timing["compile"]) if timing else None,
        "background_compile_s": float(timing["background_compile"]) if timing else None,
    }


def pilot(make: Callable[[int], object], spec: Dict[str, object], log: CompileLog) -> dict:
    """:func:`us_per_draw` with ``spec["pilot"]`` extra draws, then 4 times as many
    until they take a quarter of the budget (beside them the noise of the set-up is
    small) or the long run the whole budget; with ``sizing_us``, its microseconds per
    draw, or those of the whole long run, set-up included, when the extra draws took
    less than a quarter of the budget (they size the long runs: fewer draws, not
    more)."""
    extra, budget = spec["pilot"], spec["budget_s"]
    while True:
        run = us_per_draw(make, spec["short"], extra, spec["seed"], log)
        spent = run["long_s"] - run["short_s"]
        if spent >= budget / 4 or run["long_s"] >= budget:
            break
        extra *= 4
    seconds = spent if spent >= budget / 4 else run["long_s"]
    return dict(run, sizing_us=1e6 * seconds / extra)


def draws_for(spec: Dict[str, object], us: float) -> int:
    """The extra draws that fill the budget at ``us`` microseconds per draw (at least
    ``spec["pilot"]``)."""
    return max(int(1e6 * spec["budget_s"] / us), spec["pilot"])


def run_dropin(spec: Dict[str, object]) -> Dict[str, object]:
    """The drop-in comparison of one target in this process (see the module
    docstring): fill the cache, load the compiled transition in each runner, size the
    long runs with a pilot, then ``spec["rounds"]`` interleaved rounds."""
    import pyro
    import torch

    import pyro_gwg

    torch.set_num_threads(spec["threads"])
    model, _ = user_model(spec["target"], Path(spec["rbm_path"]))
    runners = dropin_runners(model, num_coords(spec["target"]))
    log = CompileLog()
    out: Dict[str, object] = {"target": spec["target"]}
    with log.installed(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out["fill"] = []
        for seed in range(spec["seed"], spec["seed"] + DROPIN_FILL_TRIES):
            fill = pyro_gwg.MCMC(
                pyro_gwg.GWG(model),
                num_samples=spec["fill"],
                warmup_steps=0,
                num_chains=1,
                disable_progbar=True,
            )
            pyro.set_rng_seed(seed)
            fill.run()
            cache = wait_for_compiles(spec["compile_timeout"])
            # untimed: each runner loads the package (pyro_gwg.MCMC first: whether the
            # fill put one in the cache)
            loads = {}
            for name, make in runners.items():
                before = log.loads()
                timed_run(make, spec["short"], spec["seed"])
                loads[name] = log.loads() - before
            timing = {k: float(v) for k, v in fill.timing.items()}
            out["fill"].append({"seed": seed, "timing": timing, "cache": cache, "loads": loads})
            if loads["pyro_gwg"]:
                break
        out["cache_after_fill"], out["warm_loads"] = cache, loads
        out["num_flips"] = fill.kernel.num_flips
        out["pilot"] = {name: pilot(make, spec, log) for name, make in runners.items()}
        # the long runs fill the budget at the median rate measured so far
        rates = {name: [run["sizing_us"]] for name, run in out["pilot"].items()}
        rounds: List[Dict[str, object]] = []
        for index in range(spec["rounds"]):
            rounds.append({})
            for name in DROPIN_RUNNERS if index % 2 == 0 else DROPIN_RUNNERS[::-1]:
                extra = draws_for(spec, statistics.median(rates[name]))
                run = us_per_draw(runners[name], spec["short"], extra, spec["seed"], log)
                rounds[-1][name] = run
                if run["us"] > 0:
                    rates[name].append(run["us"])
        out["rounds"] = rounds
        out["cache_after_rounds"] = wait_for_compiles(0.0)
    out["log"] = log.messages[:50]
    out["warnings"] = sorted({str(w.message)[:500] for w in caught})
    return out


def summarise_dropin(out: Dict[str, object]) -> Dict[str, object]:
    """The drop-in table row of one target: the per-runner medians over the rounds
    (microseconds per draw), Pyro's own loop and the kernel's share of Pyro's draws
    (``kernel_us = pyro_infer_us - pyro_loop_us``), the median of the per-round ratios
    of ``pyro.infer.MCMC`` to ``pyro_gwg.MCMC`` against :data:`DROPIN_REQUIRED`, and
    whether every measured run of both runners loaded the compiled transition from the
    cache (one :data:`LOADED_MESSAGE` per run, no compile still running, the cache
    unchanged by the rounds); the extra draws of each round."""
    rounds = out["rounds"]
    median = {name: statistics.median(r[name]["us"] for r in rounds) for name in DROPIN_RUNNERS}
    ratios = [r["pyro_infer"]["us"] / r["pyro_gwg"]["us"] for r in rounds]
    fill_cache, after = out["cache_after_fill"], out["cache_after_rounds"]
    # (the rounds added no file: no compile of their own)
    unchanged = set(after["cache_files"]) <= set(fill_cache["cache_files"])
    compiled = {
        name: all(r[name]["loads"] == 2 for r in rounds) and out["warm_loads"][name] == 1
        for name in ("pyro_infer", "pyro_gwg")
    }
    package = (
        bool(fill_cache["cache_files"])
        and not fill_cache["still_compiling"]
        and not after["still_compiling"]
        and unchanged
    )
    ratio = statistics.median(ratios)
    both = package and all(compiled.values())
    kernel_us = median["pyro_infer"] - median["pyro_loop"]
    return {
        "target": target_name(out["target"]),
        "num_flips": out["num_flips"],
        "pyro_infer_us": median["pyro_infer"],
        "pyro_gwg_us": median["pyro_gwg"],
        "pyro_loop_us": median["pyro_loop"],
        "kernel_us": kernel_us,
        "kernel_ratio": kernel_us / median["pyro_gwg"],
        "ratio": ratio,
        "ratios": ratios,
        "required": DROPIN_REQUIRED,
        "met": ratio <= DROPIN_REQUIRED and both,
        "compiled": dict(compiled, cache_package=package),
        "pyro_gwg_compile_s": max(r["pyro_gwg"]["compile_s"] for r in rounds),
        "draws": {name: [r[name]["draws"] for r in rounds] for name in DROPIN_RUNNERS},
    }


def dropin_targets(quick: bool) -> List[Dict[str, object]]:
    """The drop-in comparison's targets (``quick``: L = 10 only)."""
    return list(DROPIN_TARGETS[:1] if quick else DROPIN_TARGETS)


WORKERS = {"main": run_main, "first_draw": run_first_draw, "dropin": run_dropin}


def worker_main(spec_json: str) -> None:
    spec = json.loads(spec_json)
    out = WORKERS[spec["mode"]](spec)
    print("RESULT " + json.dumps(out), flush=True)


# ----------------------------------------------------------------------------- driver
def run_worker(spec: Dict[str, object], cache: Path, timeout: float) -> Dict[str, object]:
    """``spec`` in a fresh process with ``spec["threads"]`` threads and the compile
    cache ``cache``; its result, with the process's wall time."""
    env = thread_env(spec["threads"])
    env["PYRO_GWG_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            "{} worker failed on {} with {} chains:\n{}".format(
                spec["mode"], target_name(spec["target"]), spec["chains"], proc.stderr[-3000:]
            )
        )
    out = json.loads(lines[-1][len("RESULT ") :])
    out["process_s"] = time.perf_counter() - start
    return out


def first_draw(spec: Dict[str, object], timeout: float) -> Dict[str, object]:
    """Time to the first draw, uncached (a fresh cache, filled before the process
    ends) then cached (the next fresh process, with that cache)."""
    cache = Path(tempfile.mkdtemp(prefix="floor_cache_"))
    try:
        out = {}
        for name, fill in (("uncached", True), ("cached", False)):
            files = sorted(str(p) for p in cache.rglob("*") if p.is_file())
            worker = dict(spec, mode="first_draw", fill_cache=fill, cache_files_before=files)
            out[name] = run_worker(worker, cache, timeout)
        return out
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def summarise(target: Dict[str, object], chains: int, out: Dict[str, object]) -> Dict[str, object]:
    """The table row of one setting: microseconds per step, their ratios (default over
    fused: uncached, cached, and cached over the C++-wrapper floor), the target of
    issue 29 (``met``: cached ratio at most :data:`RATIO_TARGET`, for the same
    transition) and the time to the first draw; the acceptance rates of the default
    runs and of the fused step, and whether they agree within :data:`ACCEPT_TOLERANCE`
    (``same_transition``)."""
    fused = out["fused"]["us_per_step"]
    cpp = out["fused_cpp_wrapper"]["us_per_step"]
    row: Dict[str, object] = {
        "target": target_name(target),
        "chains": chains,
        "num_flips": out["fused"]["num_flips"],
    }
    for name in ("uncached", "cached"):
        run = out.get(name)
        row["default_{}_us".format(name)] = run["us_per_step"] if run else None
    row["fused_us"] = fused
    row["fused_cpp_wrapper_us"] = cpp
    for name in ("uncached", "cached"):
        run = out.get(name)
        row["ratio_{}".format(name)] = run["us_per_step"] / fused if run else None
    cached = out.get("cached")
    row["ratio_cached_cpp_wrapper"] = cached["us_per_step"] / cpp if cached else None
    row["required"] = "<= {:g}x".format(RATIO_TARGET) if target_met(target, chains) else "-"
    # the same transition accepts alike, up to noise: a default run that does not is
    # another transition, whose speed does not count
    rates = [out[k]["accept_rate"] if k in out else None for k in ("uncached", "cached", "fused")]
    row["accept_rates"] = rates
    row["same_transition"] = (
        all(abs(rate - rates[2]) <= ACCEPT_TOLERANCE for rate in rates[:2])
        if None not in rates
        else None
    )
    ratio = row["ratio_cached"]
    if target_met(target, chains) and ratio:
        row["met"] = ratio <= RATIO_TARGET and bool(row["same_transition"])
    else:
        row["met"] = None
    row["default_compile_s"] = out["uncached"]["compile_s"] if "uncached" in out else None
    row["fused_compile_s"] = out["fused"]["compile_s"]
    draws = out.get("first_draw", {})
    for name in ("uncached", "cached"):
        row["first_draw_{}_s".format(name)] = draws[name]["run_s"] if name in draws else None
        row["blocked_{}_s".format(name)] = draws.get(name, {}).get("blocked_s")
    row["first_draw_met"] = (
        all(d["run_s"] < FIRST_DRAW_TARGET_S for d in draws.values()) if draws else None
    )
    if "default_error" in out:
        row["default_error"] = out["default_error"]
    return row


def run(args: argparse.Namespace) -> Dict[str, object]:
    results: Dict[str, object] = {
        **header("floor", threads_per_process=args.threads),
        "note": NOTE,
        "settings": {
            "budget_s": args.budget,
            "chains": args.chains,
            "rbm_chains": args.rbm_chains,
            "targets": args.targets,
            "thetas": args.thetas,
            "warmup_steps": args.warmup,
            "pilot_draws": PILOT,
            "seed": args.seed,
            "first_draw": not args.no_first_draw,
            "fused": {"temperature": TEMPERATURE, "uniform_weight": UNIFORM_WEIGHT},
        },
        "runs": [],
        "rows": [],
    }
    results["settings"]["dropin"] = None if args.no_dropin else dropin_settings(args)
    workdir = Path(tempfile.mkdtemp(prefix="floor_"))
    rbm_path = workdir / "rbm.npz"
    try:
        for target in [] if args.dropin_only else targets(args.quick, args.targets, args.thetas):
            if target["kind"] == "rbm":
                rbm_arrays(rbm_path)
            for chains in args.rbm_chains if target["kind"] == "rbm" else args.chains:
                spec = {
                    "target": target,
                    "chains": chains,
                    "budget_s": args.budget,
                    "threads": args.threads,
                    "seed": args.seed,
                    "warmup": args.warmup,
                    "pilot": PILOT,
                    "compile_timeout": args.compile_timeout,
                    "rbm_path": str(rbm_path),
                }
                out: Dict[str, object] = {"target": target, "chains": chains}
                if not args.no_first_draw:
                    out["first_draw"] = first_draw(spec, args.timeout)
                cache = Path(tempfile.mkdtemp(prefix="floor_cache_"))
                try:
                    out.update(run_worker(dict(spec, mode="main"), cache, args.timeout))
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
                out["load_average_after"] = os.getloadavg()
                row = summarise(target, chains, out)
                results["runs"].append(out)
                results["rows"].append(row)
                print(json.dumps(row), flush=True)
        if not args.no_dropin:
            results["dropin"] = run_dropin_targets(args, rbm_path)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def dropin_settings(args: argparse.Namespace) -> Dict[str, object]:
    return {
        "targets": [target_name(t) for t in dropin_targets(args.quick)],
        "budget_s": args.budget,
        "rounds": args.dropin_rounds,
        "fill_draws": DROPIN_FILL,
        "short_draws": DROPIN_SHORT,
        "pilot_draws": DROPIN_PILOT,
        "runners": {
            "pyro_infer": "pyro.infer.MCMC(GWG(model), num_samples, warmup_steps=0, "
            "disable_progbar=True)",
            "pyro_gwg": "pyro_gwg.MCMC(GWG(model), num_samples, warmup_steps=0, "
            "num_chains=1, disable_progbar=True)",
            "pyro_loop": "pyro.infer.MCMC(step_cost.StillKernel(side), num_samples, "
            "warmup_steps=0, disable_progbar=True)",
        },
    }


def run_dropin_targets(args: argparse.Namespace, rbm_path: Path) -> Dict[str, object]:
    """The drop-in comparison of each target, each in a fresh process with a fresh
    cache; its rows and the workers' results."""
    rows, runs = [], []
    for target in dropin_targets(args.quick):
        if target["kind"] == "rbm":
            rbm_arrays(rbm_path)
        spec = {
            "mode": "dropin",
            "target": target,
            "chains": 1,
            "budget_s": args.budget,
            "threads": args.threads,
            "seed": args.seed,
            "fill": DROPIN_FILL,
            "short": DROPIN_SHORT,
            "pilot": DROPIN_PILOT,
            "rounds": args.dropin_rounds,
            "compile_timeout": args.compile_timeout,
            "rbm_path": str(rbm_path),
        }
        cache = Path(tempfile.mkdtemp(prefix="floor_dropin_cache_"))
        try:
            out = run_worker(spec, cache, args.timeout)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        out["load_average_after"] = os.getloadavg()
        row = summarise_dropin(out)
        runs.append(out)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"rows": rows, "runs": runs}


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="L = 10, 16 chains, short")
    parser.add_argument("--targets", nargs="+", default=list(TARGETS), choices=TARGETS)
    parser.add_argument("--chains", type=int, nargs="+", default=None, help="lattice chains")
    parser.add_argument("--rbm-chains", type=int, nargs="+", default=[16])
    parser.add_argument("--thetas", type=float, nargs="+", default=[0.4])
    parser.add_argument("--budget", type=float, default=None, help="timed seconds per run")
    parser.add_argument("--warmup", type=int, default=None, help="warmup steps per run")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--compile-timeout",
        type=float,
        default=240.0,
        help="seconds to wait for the library's background compilation to land in the cache",
    )
    parser.add_argument("--no-first-draw", action="store_true", help="skip the first-draw runs")
    dropin = parser.add_mutually_exclusive_group()
    dropin.add_argument(
        "--no-dropin", action="store_true", help="skip the drop-in comparison (pyro.infer.MCMC)"
    )
    dropin.add_argument(
        "--dropin-only", action="store_true", help="only the drop-in comparison (pyro.infer.MCMC)"
    )
    parser.add_argument(
        "--dropin-rounds", type=int, default=DROPIN_ROUNDS, help="rounds of the drop-in runs"
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds per process")
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.chains is None:
        args.chains = [16] if args.quick else [16, 256]
    if args.budget is None:
        args.budget = 1.0 if args.quick else 10.0
    if args.warmup is None:
        args.warmup = 50 if args.quick else GWG_WARMUP
    if args.output is None:
        name = "floor_quick.json" if args.quick else "floor.json"
        args.output = HERE / "results" / name
    return args


def main(argv: Optional[List[str]] = None) -> Optional[Dict[str, object]]:
    args = parse_args(argv)
    if args.worker:
        worker_main(args.worker)
        return None
    results = run(args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print("wrote {}".format(args.output))
    return results


if __name__ == "__main__":
    main()
