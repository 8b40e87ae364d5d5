"""Data-parallel PCD launched from a script: :func:`run_data_parallel` runs a function
in spawned worker processes joined in one gloo :mod:`torch.distributed` process group,
and :func:`fit_data_parallel` runs :meth:`PCD.fit <pyro_gwg.contrib.train.pcd.PCD.fit>`
in them after :meth:`PCD.distribute <pyro_gwg.contrib.train.pcd.PCD.distribute>` (see
``docs/data_parallel_pcd.rst``).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import pickle
import sys
import tempfile
import traceback
from typing import Callable, Dict, List, NamedTuple, TypeVar, Union

import pyro
import torch
import torch.distributed as dist

from pyro_gwg._validation import check_integer
from pyro_gwg.cluster import block_seeds
from pyro_gwg.contrib.train.pcd import PCD

__all__ = ["DataParallelFit", "fit_data_parallel", "run_data_parallel"]

T = TypeVar("T")


class DataParallelFit(NamedTuple):
    """What :func:`fit_data_parallel` returns."""

    #: ``{name: value}``: the learned (constrained) parameters, as ``pyro.param(name)``
    params: Dict[str, torch.Tensor]
    #: the per-update dicts of :meth:`.PCD.step` (losses averaged over the workers)
    history: List[Dict[str, float]]


def _check_picklable(name: str, value) -> None:
    try:
        pickle.dumps(value)
    except Exception as error:
        raise TypeError(
            "{} must be picklable to reach the worker processes (a module-level function, "
            "or functools.partial of one; not a lambda or a local function): {}".format(name, error)
        ) from None


class _RemoteTraceback(Exception):
    """The traceback of an error raised in a worker process, as its text (set as the
    ``__cause__`` of the error re-raised here, so that both tracebacks are shown)."""


def _worker_main(rank: int, world_size: int, folder: str, seed: int, fn: Callable, args: tuple):
    """One spawned worker: seed, join the gloo group, run ``fn(*args)`` and wait at a
    barrier for every rank to finish; rank 0 saves the result, a failing rank its error.

    The worker ends with :func:`os._exit`, without destroying the process group: on
    torch releases before 2.8, ``ProcessGroupGloo``'s destructor holds the GIL while it
    joins its threads, and a thread that is about to free the last reference to a
    tensor of a finished collective waits for the GIL; the process then never exits
    (seen on torch 2.1.2). After the barrier no rank has a collective in flight, so
    nothing is lost by not tearing the group down."""
    code = 1
    try:
        torch.manual_seed(block_seeds(seed, world_size)[rank])
        dist.init_process_group(
            "gloo",
            init_method="file://" + os.path.join(folder, "rendezvous"),
            rank=rank,
            world_size=world_size,
        )
        result = fn(*args)
        if rank == 0:
            torch.save(result, os.path.join(folder, "result.pt"))
        dist.barrier()
        code = 0
    except BaseException as error:
        try:
            pickled = pickle.dumps(error)
        except Exception:
            pickled = None
        summary = "{}: {}".format(type(error).__name__, error)
        with open(os.path.join(folder, "error-{}.pkl".format(rank)), "wb") as file:
            pickle.dump((pickled, summary, traceback.format_exc()), file)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _join_workers(processes: list, folder: str) -> None:
    """Wait for every worker; as soon as one fails, raise its error (with the worker's
    traceback as the cause), or say how it ended (the caller stops the others)."""
    running = dict(enumerate(processes))
    while running:
        sentinels = {process.sentinel: rank for rank, process in running.items()}
        for sentinel in multiprocessing.connection.wait(list(sentinels)):
            rank = sentinels[sentinel]
            process = running.pop(rank)
            process.join()
            if process.exitcode == 0:
                continue
            error_file = os.path.join(folder, "error-{}.pkl".format(rank))
            if os.path.exists(error_file):
                with open(error_file, "rb") as file:
                    pickled, summary, text = pickle.load(file)
                try:  # an exception whose class cannot be rebuilt here comes as its text
                    error = pickle.loads(pickled)
                except Exception:
                    error = RuntimeError(summary)
                raise error from _RemoteTraceback(
                    "in data-parallel worker {}:\n{}".format(rank, text)
                )
            raise RuntimeError(
                "data-parallel worker {} ended with exit code {} (a negative code is the "
                "signal that stopped it) before finishing".format(rank, process.exitcode)
            )


def run_data_parallel(
    fn: Callable[..., T], args: tuple = (), *, num_workers: int, seed: int = 0
) -> T:
    """``fn(*args)`` in ``num_workers`` spawned processes on this machine, joined in one
    gloo process group (the default group of each), and rank 0's return value.

    Worker ``rank`` seeds torch's generator with
    ``pyro_gwg.cluster.block_seeds(seed, num_workers)[rank]``, so that the ranks draw
    different numbers, rank 0 draws the same whatever ``num_workers``, and a run is
    repeatable for a seed. The workers are fresh interpreters (``spawn``) with this
    process's environment and ``sys.path``, and each has its own, empty, Pyro parameter
    store. The group's rendezvous is a file in a temporary folder (no port to
    choose). After ``fn`` returns, the ranks meet at a barrier and exit. An exception in
    a worker stops the others and is raised here, with the worker's traceback as its
    cause; a worker that dies without one (killed by a signal, say) gives a
    ``RuntimeError`` with its exit code.

    :param callable fn: a picklable function (defined at module level) run on every rank;
        rank 0's return value must be picklable.
    :param tuple args: its arguments (pickled to each worker).
    :param int num_workers: processes (ranks).
    :param int seed: the base seed.
    :returns: rank 0's ``fn(*args)``.
    """
    num_workers = check_integer("num_workers", num_workers, 1, "worker processes")
    seed = check_integer("seed", seed, 0)
    _check_picklable("fn", fn)
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="pyro_gwg_data_parallel_") as folder:
        processes = [
            context.Process(
                target=_worker_main,
                args=(rank, num_workers, folder, seed, fn, args),
                name="pyro_gwg data-parallel worker {}".format(rank),
            )
            for rank in range(num_workers)
        ]
        for process in processes:
            process.start()
        try:
            _join_workers(processes, folder)
        finally:  # after a failure or an interrupt, the workers still running
            for process in processes:
                if process.is_alive():
                    process.kill()
                process.join()
        return torch.load(os.path.join(folder, "result.pt"), weights_only=False)


def _fit_worker(make_pcd: Callable[[], PCD], data, num_iterations: int, batch_size: int):
    pcd = make_pcd().distribute()
    history = pcd.fit(data, num_iterations, batch_size)
    if not pcd.parameters_synchronised():
        raise RuntimeError("the workers' parameters diverged (a rank changed them on its own)")
    params = {name: pyro.param(name).detach().clone() for name in pcd.param_names}
    return DataParallelFit(params, history)


def fit_data_parallel(
    make_pcd: Callable[[], PCD],
    data: Union[Dict[str, torch.Tensor], torch.Tensor],
    *,
    num_workers: int = 2,
    num_iterations: int,
    batch_size: int = 256,
    seed: int = 0,
) -> DataParallelFit:
    """Data-parallel :meth:`.PCD.fit` in ``num_workers`` processes on this machine
    (:func:`run_data_parallel`, gloo on CPU): every worker builds its PCD with
    ``make_pcd()``, calls :meth:`.PCD.distribute` and fits, holding ``num_chains /
    num_workers`` chains and drawing ``batch_size / num_workers`` data points per update.

    ``make_pcd`` is called in each worker, not here, because the ``pyro.param``
    parameters that PCD learns live in the parameter store of the process that runs
    the model: each worker needs its own PCD on its own store (whose values are then
    broadcast from rank 0). It is called once here too, in a scope of its own of the
    parameter store (this process's store is left as it was), to check the arguments
    before any process starts.

    :param callable make_pcd: builds the :class:`.PCD` (with ``num_chains`` the total over
        the workers); picklable: a module-level function or a :func:`functools.partial`
        of one.
    :param data: ``{site: [N, ...]}`` (or a tensor for one-site models), sent to every
        worker.
    :param int num_workers: worker processes.
    :param int num_iterations: parameter updates.
    :param int batch_size: data points per update over all workers; divisible by
        ``num_workers``.
    :param int seed: the base seed of the workers' generators (see
        :func:`run_data_parallel`).
    :returns: rank 0's learned parameters and the history; load them into this
        process's store with ``pyro.get_param_store()[name] = value``.
    :rtype: DataParallelFit
    """
    num_workers = check_integer("num_workers", num_workers, 1, "worker processes")
    num_iterations = check_integer("num_iterations", num_iterations, 1, "parameter updates")
    batch_size = check_integer("batch_size", batch_size, 1, "data points per update")
    if batch_size % num_workers:
        raise ValueError(
            "batch_size ({}) must be divisible by num_workers ({}): each worker draws "
            "batch_size / num_workers data points per update".format(batch_size, num_workers)
        )
    _check_picklable("make_pcd", make_pcd)
    with pyro.get_param_store().scope():
        pcd = make_pcd()
        if not isinstance(pcd, PCD):
            raise TypeError("make_pcd must return a PCD, got {}".format(type(pcd).__name__))
        pcd._check_shards(num_workers)
        pcd.data_codes(data)
    return run_data_parallel(
        _fit_worker,
        (make_pcd, data, num_iterations, batch_size),
        num_workers=num_workers,
        seed=seed,
    )
