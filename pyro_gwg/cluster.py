"""Independent pieces of work (blocks of chains, posterior runs, particle blocks) as
Ray tasks.

Every distributed feature of the package goes through :func:`run_tasks`: it sends
``fn(payload)`` for each payload to a Ray cluster as one task, keeps at most
``num_workers`` tasks in flight, shows a progress bar over tasks, re-issues on the
driver the warnings each task raised, and returns the results in the payloads' order.
A task whose worker process dies is re-run by Ray (``max_retries``, 3 by default);
because each payload carries its own seed (:func:`block_seeds`), the re-run draws the
same numbers, and the results do not depend on which worker ran what, nor on how many
there were.

Ray is optional: ``pip install "pyro-gwg[ray]"``. Without it the package imports and
works, and asking for a distributed run raises an ``ImportError`` that says how to
install it. :func:`run_tasks` connects to a running cluster when ``ray.init`` was
called (``ray.init(address=...)`` for a real cluster), and otherwise starts a local
one, as Ray's own API does.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from pyro_gwg._validation import check_integer

__all__ = [
    "INSTALL",
    "block_seeds",
    "check_num_workers",
    "map_tasks",
    "require_ray",
    "run_tasks",
    "seeded",
    "split",
]

#: how to install the optional dependency
INSTALL = 'pip install "pyro-gwg[ray]"'
#: Ray task options used unless the caller's ``remote_args`` say otherwise: one CPU
#: per task (Ray then gives the worker one intra-op thread), and a dead worker's task
#: re-run up to three times
DEFAULT_REMOTE_ARGS = {"num_cpus": 1, "max_retries": 3}


def require_ray(feature: str):
    """The ``ray`` module; an ``ImportError`` naming ``feature`` and the install command
    when it is missing."""
    try:
        import ray
    except ImportError:
        raise ImportError(
            "{} runs on Ray, which is not installed. Install it with {} (or "
            "`pip install ray`), or run in one process (leave num_workers=None / use "
            "chain_method='vectorized').".format(feature, INSTALL)
        ) from None
    return ray


def check_num_workers(num_workers) -> Optional[int]:
    """``None`` (run in this process) or a positive integer of concurrent Ray tasks."""
    if num_workers is None:
        return None
    return check_integer("num_workers", num_workers, 1, "concurrent Ray tasks")


def split(total: int, per_block: int, minimum: int = 1) -> List[slice]:
    """``total`` items in ``ceil(total / per_block)`` contiguous blocks whose sizes differ
    by at most one (fewer blocks where that keeps each at least ``minimum``)."""
    num_blocks = max(1, min(math.ceil(total / per_block), total // minimum))
    size, extra = divmod(total, num_blocks)
    bounds = [0]
    for j in range(num_blocks):
        bounds.append(bounds[-1] + size + (j < extra))
    return [slice(a, b) for a, b in zip(bounds, bounds[1:])]


def block_seeds(base_seed: int, num_blocks: int) -> List[int]:
    """Independent 64-bit seeds of ``num_blocks`` blocks from one ``base_seed``
    (NumPy's :class:`~numpy.random.SeedSequence`, spawn key = the block index): block
    ``j``'s seed depends only on ``base_seed`` and ``j``, never on how the blocks are
    shared among workers."""
    return [
        int(np.random.SeedSequence(int(base_seed), spawn_key=(j,)).generate_state(1, np.uint64)[0])
        for j in range(num_blocks)
    ]


def draw_base_seed() -> int:
    """A base seed drawn from torch's global generator, so that
    :func:`pyro.set_rng_seed` fixes every block seed derived from it."""
    return int(torch.randint(0, 2**62, ()))


@contextlib.contextmanager
def seeded(seed: int):
    """Run the body with torch's CPU (and CUDA) generators seeded by ``seed``, and
    restore them afterwards."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def _call(fn: Callable, payload) -> Tuple[object, list]:
    """Run ``fn(payload)`` in a worker; its result and the warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(payload)
    return result, [(w.category, str(w.message), w.filename, w.lineno) for w in caught]


#: where warnings re-issued from tasks are registered: each is shown once, not once
#: per task
_SEEN: dict = {}


def run_tasks(
    fn: Callable,
    payloads: Sequence,
    *,
    num_workers: int,
    feature: str,
    remote_args: Optional[dict] = None,
    progress_bar: bool = True,
    desc: str = "tasks",
) -> list:
    """``[fn(p) for p in payloads]``, each call a Ray task, at most ``num_workers`` at
    once.

    :param callable fn: a picklable function of one payload (Ray pickles it with
        cloudpickle, so closures and functions defined in ``__main__`` work).
    :param payloads: the payloads, each carrying what its task needs (its seed too).
    :param int num_workers: tasks in flight at once.
    :param str feature: what is being run, for the message when Ray is missing.
    :param dict remote_args: options of :func:`ray.remote` (default
        :data:`DEFAULT_REMOTE_ARGS`; e.g. ``{"num_gpus": 1}`` for a GPU per task).
    :param bool progress_bar: a progress bar over the tasks.
    :param str desc: the progress bar's label.
    :returns: the results, in the order of ``payloads``.
    :raises Exception: the first error a task raised (Ray re-raises it as an instance
        of the original exception's type); the tasks still in flight are cancelled.
    """
    ray = require_ray(feature)
    if not ray.is_initialized():
        ray.init()
    options = dict(DEFAULT_REMOTE_ARGS)
    options.update(remote_args or {})
    task = ray.remote(**options)(_call)
    fn_ref = ray.put(fn)
    results: list = [None] * len(payloads)
    pending: dict = {}
    queue = iter(enumerate(payloads))
    from tqdm.auto import tqdm

    bar = tqdm(total=len(payloads), desc=desc, unit="task", disable=not progress_bar)
    try:
        while True:
            while len(pending) < num_workers:
                item = next(queue, None)
                if item is None:
                    break
                pending[task.remote(fn_ref, item[1])] = item[0]
            if not pending:
                break
            done, _ = ray.wait(list(pending), num_returns=1)
            index = pending.pop(done[0])
            results[index], caught = ray.get(done[0])
            for category, message, filename, lineno in caught:
                warnings.warn_explicit(message, category, filename, lineno, registry=_SEEN)
            bar.update(1)
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        bar.close()
    return results


def map_tasks(
    fn: Callable,
    payloads: Sequence,
    *,
    num_workers: Optional[int],
    feature: str,
    remote_args: Optional[dict] = None,
    progress_bar: bool = True,
    desc: str = "tasks",
) -> list:
    """``[fn(p) for p in payloads]`` in this process when ``num_workers`` is ``None``,
    else as Ray tasks by :func:`run_tasks`: one code path for local and distributed
    runs, so that both give the same results for the same payloads."""
    if num_workers is not None:
        return run_tasks(
            fn,
            payloads,
            num_workers=num_workers,
            feature=feature,
            remote_args=remote_args,
            progress_bar=progress_bar,
            desc=desc,
        )
    if remote_args is not None:
        raise ValueError("ray_remote_args is for Ray runs: give num_workers too.")
    from tqdm.auto import tqdm

    return [fn(p) for p in tqdm(payloads, desc=desc, unit="task", disable=not progress_bar)]
