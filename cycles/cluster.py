"""Running the stages' tasks on a Dask cluster: ``db.executor = "tcp://scheduler:8786"``.

generate, update and fetch already split their work into tasks that are a module-level
function and one picklable dataclass naming only the store, ids and the config
(cycles/executor.py). :class:`DaskExecutor` is the :class:`~cycles.executor.Executor`
that sends them to a Dask ``distributed`` scheduler; the coordinating process (``crawl
cycle``, ``crawl generate`` …) keeps the small serial parts: choosing the segment, the
locks, swapping ``CURRENT``.

Why Dask and not Ray (measured on 2026-12-02 with this environment's pip index, Python 3.11):

- install weight: ``distributed`` and its dependencies are 5.2 MB of wheels, 19.6 MB
  installed (21 wheels, pure Python but for msgpack, psutil, pyyaml, tornado); ``ray`` is
  79 MB for its wheel alone, 215 MB installed with its 20 dependencies (protobuf, grpc
  inside the wheel);
- a local cluster for tests: ``dask scheduler`` and ``dask worker`` are two ordinary
  processes on a TCP port; ``ray start --head`` starts a GCS server, a raylet, a
  dashboard and log monitors per node;
- task retries: both re-run a task whose worker died (Dask: the scheduler's
  ``distributed.scheduler.allowed-failures``, default 3; Ray: ``max_retries``, default 3);
  both retry a task that raised only when asked (Dask ``retries=``; Ray ``retry_exceptions``);
- S3 credentials: the same on both — each worker process reads the standard AWS settings
  of its own environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``… or its instance
  role), exactly like a single-machine crawl; nothing secret travels with a task.

Dask's ``Client.map`` maps one-to-one onto :meth:`Executor.map`, so the whole executor is
a few lines. A task must not rely on the coordinator's disk: everything it reads and
writes is in the store, which is why a cluster needs an ``s3://`` store.
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence, TypeVar

from cycles.config import Config
from cycles.errors import ConfigError, StageError
from cycles.executor import Executor

T = TypeVar("T")
R = TypeVar("R")

LOCAL = "local"
"""``db.executor`` for this machine's processes (cycles/executor.py)."""

CONNECT_TIMEOUT_S = 30.0
"""How long the coordinator waits to reach the scheduler before giving up with a clear error."""


class DaskExecutor:
    """Runs tasks on the Dask cluster whose scheduler listens at ``address``.

    ``workers`` is 1: on a cluster each task has its worker's memory to itself (start
    workers with ``--nthreads 1``), so a bucket task must not shrink its DuckDB memory
    limit as a local pool's tasks do (cycles/executor.py share_of_memory).
    """

    workers = 1

    def __init__(self, address: str):
        self.address = address
        self._client = None

    def client(self):
        if self._client is None:
            try:
                from distributed import Client
            except ImportError:
                raise ConfigError(f"db.executor = {self.address!r} needs Dask: pip install 'crawl[cluster]'") from None
            try:
                self._client = Client(self.address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
            except (OSError, TimeoutError) as exc:
                raise StageError(f"cannot reach the Dask scheduler at {self.address} ({exc}); start it with "
                                 f"`dask scheduler` and workers with `dask worker {self.address} --nthreads 1`, "
                                 "or set db.executor = \"local\"") from None
        return self._client

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        """``fn(task)`` for every task on the cluster; results in task order.

        ``pure=False``: two equal tasks (a retry of a stage) are run again, never answered
        from the cluster's memory. A task whose worker died is re-run on another worker by
        the scheduler (``distributed.scheduler.allowed-failures`` times); a task that raised
        fails the stage, as in a local pool.
        """
        if not tasks:
            return []
        client = self.client()
        name = getattr(fn, "__name__", "task")
        futures = client.map(fn, list(tasks), pure=False)
        try:
            return client.gather(futures)
        except Exception as exc:
            if type(exc).__name__ == "KilledWorker":
                raise StageError(f"{name}: the workers running one of its tasks died too often ({exc}; killed, or "
                                 "out of memory); nothing was swapped in; run the stage again") from None
            raise

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


@functools.cache
def cluster_executor(address: str) -> DaskExecutor:
    """One executor (one connection) per scheduler address for the life of this process."""
    if address.startswith("ray://"):
        raise ConfigError(f"db.executor = {address!r}: Ray is not supported; the cluster engine is Dask "
                          "(docs/cluster.md): use tcp://scheduler:8786")
    return DaskExecutor(address)


def executor_for(store, config: Config) -> Executor | None:
    """The cluster executor ``db.executor`` names, or None for this machine (the stages'
    own defaults). A cluster shares nothing but the store, so it needs an ``s3://`` one."""
    address = config.db.executor
    if address == LOCAL:
        return None
    if store.local:
        raise ConfigError(f"db.executor = {address!r} runs tasks on other machines, which cannot see the local "
                          f"store {store.uri}; use an s3:// store (--data s3://bucket/prefix) or db.executor = \"local\"")
    return cluster_executor(address)
