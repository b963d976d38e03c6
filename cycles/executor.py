"""Who runs the independent tasks of a stage: this process, a local pool, or your cluster.

generate and update split their work into one task per crawl DB bucket, and fetch into one
task per partition. A task is a top-level function and one picklable argument holding
only locations (the store URI, file paths), ids and the config; it reads its inputs from
the store and writes only its own outputs there, so tasks share nothing and can run on
any machine that sees the store. The coordinating stage does the small serial parts
(choosing the segment, swapping the crawl DB's ``CURRENT``) under the crawl DB lock.

To run the tasks elsewhere, pass any object with this ``map`` to the stage function, or
set ``db.executor`` to a Dask scheduler's address (cycles/cluster.py :class:`DaskExecutor`);
by default a local spawn pool is used.
:class:`ProcessPool` is the one pool every stage uses (buckets, fetch partitions, outlinks).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Protocol, Sequence, TypeVar

from cycles.errors import StageError

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        """Run ``fn(task)`` for every task; results in task order. Raises if any task did."""
        ...


class InProcess:
    """Runs the tasks one after the other in this process (tests, one core, debugging)."""

    workers = 1

    def map(self, fn, tasks):
        return [fn(task) for task in tasks]


class LocalPool:
    """Runs the tasks in ``workers`` spawned processes of this machine (a :class:`ProcessPool`)."""

    def __init__(self, workers: int):
        self.workers = max(1, int(workers))

    def map(self, fn, tasks):
        if self.workers == 1 or len(tasks) <= 1:
            return [fn(task) for task in tasks]
        with ProcessPool(min(self.workers, len(tasks)), getattr(fn, "__name__", "task")) as pool:
            return pool.map(fn, tasks)


class ProcessPool:
    """The one process pool of the crawler: bucket tasks, fetch partitions, outlink chunks.

    Workers are spawned, never forked: a task must not inherit the parent's DuckDB
    connections, curl handles or open files. A worker that dies (SIGKILL, the OOM killer)
    breaks the pool; the ``with`` block then raises a one-line :class:`StageError`
    (``death_error``, by default :func:`worker_died` of ``what``) instead of a traceback of
    BrokenProcessPool (``multiprocessing.Pool`` never noticed and hung). Leaving the block
    on an error cancels the tasks not started yet.

    ``die_with_parent`` (on by default, for every pool of the crawler): each worker is killed
    by the kernel when this process exits (Linux ``PR_SET_PDEATHSIG``; elsewhere the worker
    can poll :func:`parent_pid`), so ``kill -9`` of the stage leaves no orphan working — a
    killed ``crawl update`` had left its bucket workers running, and holding memory, as
    orphans. (The kernel signals when the *thread* that started the worker ends: every pool
    here is made and closed by the thread that uses it.) ``initializer(*initargs)`` then runs
    in each worker (fetch installs its stop-signal handlers there).
    """

    def __init__(self, workers: int, what: str, *, initializer: Callable | None = None, initargs: tuple = (),
                 die_with_parent: bool = True, death_error: StageError | None = None):
        self.workers = max(1, int(workers))
        self.death_error = death_error if death_error is not None else worker_died(what)
        context = multiprocessing.get_context("spawn")
        # The signal signal_workers sent (0: none), for the workers it could not reach yet.
        # Raw (no lock): it is set from a signal handler.
        self._signalled = context.RawValue("i", 0)
        self._pool = ProcessPoolExecutor(
            self.workers, mp_context=context, initializer=_init_worker,
            initargs=(os.getpid() if die_with_parent else None, initializer, initargs, self._signalled))

    def __enter__(self) -> "ProcessPool":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._pool.shutdown(wait=True, cancel_futures=exc_type is not None)
        if exc_type is not None and issubclass(exc_type, BrokenProcessPool):
            raise self.death_error from None

    def submit(self, fn: Callable, *args) -> Future:
        return self._pool.submit(fn, *args)

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        """``fn(task)`` for every task in the pool; results in task order."""
        return list(self._pool.map(fn, tasks))

    def pids(self) -> list[int]:
        """The worker processes now running (spawned on submit; a dead one may be replaced)."""
        return list(self._pool._processes or {})

    def signal_workers(self, signum: int) -> None:
        """Send ``signum`` to the workers that handle it (their initializer installed a
        handler); a worker still starting gets it from itself when its initializer has run
        (``_init_worker``). Sent at once, it would kill a worker still importing — the
        signal's default action — and break the pool: ``crawl run --seconds 5`` on a loaded
        machine stopped with "a fetch worker process died" instead of committing."""
        self._signalled.value = signum
        for pid in self.pids():
            if handles_signal(pid, signum):
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass


def handles_signal(pid: int, signum: int) -> bool:
    """Whether process ``pid`` catches ``signum`` (Linux: the ``SigCgt`` mask of
    ``/proc/<pid>/status``); True where that cannot be read (another system)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError):
        pass
    return True


_PARENT_PID: int | None = None
"""In a worker of a ``die_with_parent`` pool: the pid of the process that started it."""


def parent_pid() -> int | None:
    """The pid of the process that started this pool worker (``die_with_parent`` pools only):
    a worker whose ``os.getppid()`` differs has lost its parent and should exit."""
    return _PARENT_PID


def _init_worker(parent: int | None, initializer: Callable | None, initargs: tuple, signalled) -> None:
    global _PARENT_PID
    if parent is not None:
        _PARENT_PID = parent
        _die_with_parent(parent)
    if initializer is not None:
        initializer(*initargs)
    # A signal the pool sent while this worker was starting, and did not send to it then
    # (ProcessPool.signal_workers: it is read after the handler is in, so none is missed).
    if signalled.value and callable(signal.getsignal(signalled.value)):
        signal.raise_signal(signalled.value)


def _die_with_parent(parent: int) -> None:
    """On Linux the kernel sends SIGKILL when the parent exits (prctl PR_SET_PDEATHSIG);
    elsewhere the worker's loop notices a new parent pid (:func:`parent_pid`)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(3)


def worker_died(what: str) -> StageError:
    """The error when a pool worker was killed (SIGKILL, the OOM killer): one line, saying
    that nothing was swapped in and what to do (a traceback of BrokenProcessPool said neither)."""
    return StageError(f"a worker process running {what} died (killed, or out of memory); the stage "
                      "stopped and nothing was swapped in; run it again (with fewer processes, "
                      "db.duckdb_threads, or a larger machine if memory ran out)")


def default_executor(processes: int) -> Executor:
    """``processes`` workers; 0 means one per core."""
    workers = processes or os.cpu_count() or 1
    return InProcess() if workers == 1 else LocalPool(workers)


def share_of_memory(limit: str, workers: int) -> str:
    """A DuckDB memory limit split between ``workers`` processes ("4GB", 2 → "2048MB")."""
    text = limit.strip().upper().replace(" ", "").removesuffix("B").removesuffix("I")
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "M")
    return f"{max(64, int(float(number) * units[unit] / max(1, workers)))}MB"
