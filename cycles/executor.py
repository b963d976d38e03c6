"""Who runs the independent tasks of a stage: this process, a local pool, or your cluster.

generate and update split their work into one task per crawl DB bucket, and fetch into one
task per partition. A task is a top-level function and one picklable argument holding
only locations (the store URI, file paths), ids and the config; it reads its inputs from
the store and writes only its own outputs there, so tasks share nothing and can run on
any machine that sees the store. The coordinating stage does the small serial parts
(choosing the segment, swapping the crawl DB's ``CURRENT``) under the crawl DB lock.

To run the tasks elsewhere, pass any object with this ``map`` (a Dask, Ray or Spark
wrapper is a few lines) to the stage function; by default a local spawn pool is used.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
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
    """Runs the tasks in ``workers`` spawned processes of this machine (never forked: a
    task must not inherit the parent's DuckDB connections or open files)."""

    def __init__(self, workers: int):
        self.workers = max(1, int(workers))

    def map(self, fn, tasks):
        if self.workers == 1 or len(tasks) <= 1:
            return [fn(task) for task in tasks]
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(self.workers, len(tasks)), mp_context=context) as pool:
            try:
                return list(pool.map(fn, tasks))
            except BrokenProcessPool:
                raise worker_died(getattr(fn, "__name__", "task")) from None


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
