"""AOTInductor compilation in a background process, while the chains run.

The default mode (``jit_compile="auto"``, see :mod:`pyro_gwg.compile.modes`) never
waits for a compiler: the chains run the captured graph of the transition
(:func:`~pyro_gwg.compile.backends.capture`) while a worker process compiles it
(:func:`~pyro_gwg.compile.backends.save_aot_package`), and switch to the compiled
package at the first step after it is ready, with the same chain semantics (the
package draws the same random numbers as the graph; see
:func:`~pyro_gwg.compile.backends.save_aot_package`). A process rather than a thread:
the compiler's Python (tens of seconds of lowering and code generation) then neither
holds the interpreter lock the chains need nor shares Pyro's global handler stack, it
runs on another core, and it can be stopped.

A compile that is still running when its run ends goes on (the package lands in the
disk cache, so that the next run of the same transition loads it at once) until another
compile starts (the new one has the core) or the interpreter exits.
``PYRO_GWG_BACKGROUND_COMPILE=0`` turns background compilation off (the default mode
then runs the captured graph, and loads a package the cache already has): for machines
where no core is free for a compiler, such as a test suite that runs one process per
core.

Run as ``python -m pyro_gwg.compile.background JOB KEY``, this module is the worker: it
rebuilds, exports and compiles the captured graph that :class:`BackgroundCompile`
saved in ``JOB``.
"""

from __future__ import annotations

import atexit
import os
import pathlib
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, List, Optional, Sequence

import torch

from pyro_gwg.compile import backends

__all__ = ["BACKGROUND_ENV", "BackgroundCompile", "enabled", "running_compile"]

#: environment variable that turns background compilation off when set to ``0``
BACKGROUND_ENV = "PYRO_GWG_BACKGROUND_COMPILE"

# the compiles started in this process, oldest first
_RUNNING: List[BackgroundCompile] = []
_LOCK = threading.Lock()


def enabled() -> bool:
    """Whether background compilation is on (:data:`BACKGROUND_ENV` is not ``0``) and
    this PyTorch has AOTInductor packages.

    :rtype: bool
    """
    return os.environ.get(BACKGROUND_ENV, "1") != "0" and backends.aot_available()


class BackgroundCompile:
    """An AOTInductor compilation of a captured graph: the graph's nodes and example
    inputs are pickled here (:func:`~pyro_gwg.compile.backends.graph_data`:
    milliseconds, all the chains wait for), a worker process rebuilds the graph,
    exports and compiles it into the disk cache
    (:func:`~pyro_gwg.compile.backends.save_aot_package`; the export alone takes
    seconds for a graph of a thousand operators) while a thread of this process waits
    for it, and :meth:`result` loads the package.

    :param torch.fx.GraphModule graph: the captured transition.
    :param example_inputs: example arguments (their shapes, dtypes, strides and
        devices are those of every call).
    :param str key: the graph's :func:`~pyro_gwg.compile.backends.graph_key`.

    :ivar float seconds: wall-clock seconds from the start until the package was saved
        (``None`` before).
    :ivar error: what went wrong (a message), or ``None``.
    """

    def __init__(
        self, graph: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor], key: str
    ) -> None:
        self.key = key
        self.seconds: Optional[float] = None
        self.error: Optional[str] = None
        self.process: Optional[subprocess.Popen] = None
        self._saved = False  # the worker saved the package
        self._loaded: Optional[Callable] = None
        self._detached = self._stopped = False
        for old in _running(detached=True):  # the new compile has the core
            old.stop()
        self._start = time.perf_counter()
        folder = backends.cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(dir=folder, prefix="job-", suffix=".pkl")
        os.close(handle)
        self._job = pathlib.Path(name)
        try:
            job = {"graph": backends.graph_data(graph), "example_inputs": tuple(example_inputs)}
            with open(self._job, "wb") as out:
                pickle.dump(job, out)
        except BaseException:
            self._job.unlink(missing_ok=True)
            raise
        self._thread = threading.Thread(
            target=self._work,
            name="pyro_gwg-compile-{}".format(key[:8]),
            daemon=True,
        )
        with _LOCK:
            _RUNNING.append(self)
        self._thread.start()

    def _work(self) -> None:
        job, log = self._job, self._job.with_suffix(".log")
        try:
            with _LOCK:
                if self._stopped:
                    return
                with open(log, "wb") as out:
                    self.process = subprocess.Popen(
                        [sys.executable, "-m", "pyro_gwg.compile.background", str(job), self.key],
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
            code = self.process.wait()
            if code != 0:
                lines = log.read_text(errors="replace").strip().splitlines()
                self.error = lines[-1] if lines else "exit status {}".format(code)
                return
            self._saved = True
            self.seconds = time.perf_counter() - self._start
        except Exception as error:  # the graph runs on
            self.error = _message(error)
        finally:
            for path in (job, log):
                path.unlink(missing_ok=True)
            with _LOCK:
                if self in _RUNNING:
                    _RUNNING.remove(self)

    @property
    def done(self) -> bool:
        """Whether the compile has ended (the package loaded, or an error)."""
        return not self._thread.is_alive()

    def result(self) -> Optional[Callable]:
        """The compiled function (flat tensors -> list of tensors), loaded from the
        package on the first call after the compile has ended; ``None`` while it
        runs, or when it failed (see ``error``)."""
        if self._loaded is None and self._saved and self.done:
            self._saved = False  # (loaded once, or not at all)
            try:
                self._loaded = backends.load_package(backends.package_path(self.key))
            except Exception as error:  # a package that does not load: the graph runs on
                self.error = _message(error)
        return self._loaded

    def wait(self, timeout: Optional[float] = None) -> Optional[Callable]:
        """Wait for the compile to end (at most ``timeout`` seconds); :meth:`result`."""
        self._thread.join(timeout)
        return self.result()

    def detach(self) -> None:
        """The run that started the compile has ended: let it finish (its package goes
        to the disk cache) unless another compile starts first."""
        self._detached = True

    def attach(self) -> None:
        """Another run of the same transition waits for the compile (see
        :func:`running_compile`): no new compile stops it."""
        self._detached = False

    def stop(self) -> None:
        """Stop the compile (nothing is saved)."""
        with _LOCK:
            self._stopped = True
            if self.process is not None and self.process.poll() is None:
                self.process.kill()
        self._thread.join()


def running_compile(key: str) -> Optional[BackgroundCompile]:
    """The compile of ``key`` started in this process and still running (a run that
    ended may have left it to fill the cache), or ``None``: another run of the same
    transition waits for it rather than export and compile again.

    :param str key: a :func:`~pyro_gwg.compile.backends.graph_key`.
    """
    with _LOCK:
        found = [c for c in _RUNNING if c.key == key and not c._stopped]
    return found[-1] if found else None


def _message(error: Exception) -> str:
    return "{}: {}".format(type(error).__name__, backends._first_line(error))


def _running(detached: bool = False) -> List[BackgroundCompile]:
    with _LOCK:
        return [c for c in _RUNNING if c._detached or not detached]


@atexit.register
def _stop_all() -> None:
    for compile_ in _running():
        compile_.stop()


def _worker(job: str, key: str) -> None:
    """Rebuild, export and compile the captured graph saved in ``job`` into the disk
    cache under ``key`` (see :class:`BackgroundCompile`), on one thread."""
    torch.set_num_threads(1)
    with open(job, "rb") as saved:  # (written by BackgroundCompile, in the cache folder)
        data = pickle.load(saved)
    graph = backends.graph_from_data(data["graph"])
    backends.save_aot_package(graph, data["example_inputs"], key)


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
