"""The partition runner: one :class:`FetchTask` from lock to stats file, in a pool worker or in-process.

:func:`fetch_partition` is a module-level function taking one picklable :class:`FetchTask`
(store URI, segment id, partition number, config), so it runs the same in a spawned pool
process (cycles/executor.py ProcessPool, inheriting nothing) or in this process. It

- holds the partition's lock file while it runs: one run of a partition at a time, and
  finding the file means an earlier run started and did not finish (``resumed``: the worker
  then waits a full delay before asking any host again); on an S3 store, where runs may be
  on different machines, an S3 lease instead (cycles/fetch/partition_lease.py; taken over = resumed);
- resumes: a finished partition (stats file written) returns its counters; an unfinished
  one continues from its last committed chunk (cycles/fetch/output.py);
- drives :class:`~cycles.fetch.worker.PartitionFetcher` and writes the partition's stats
  file (counters and chunk manifest) when it finished;
- stops on request: SIGTERM/SIGINT (:class:`StopSignals` in the parent, forwarded to the
  pool workers, whose handlers :func:`install_stop_handlers` installs) make the run loop
  commit what was fetched and stop, leaving the lock file for the resumed run.
"""

from __future__ import annotations

import fcntl
import os
import signal
import threading
import time
import traceback
from dataclasses import dataclass

from cycles.tables import segment as seg
from cycles.config import Config
from cycles.errors import CrawlError, StageError, StoreError
from cycles.executor import parent_pid
from cycles.fetch.partition_lease import PartitionLease, fenced_stop_signal
from cycles.fetch.worker import PartitionFetcher
from cycles.storage.store import Store


@dataclass(frozen=True)
class FetchTask:
    """One partition's fetch: locations, ids and the config (picklable)."""

    store_uri: str
    """The store's folder or ``s3://`` URI."""
    segment: str
    partition: int
    config: Config


LOCK_WAIT_S = 120.0
"""How long a partition waits for the lock of an earlier run of itself (an orphan of a
killed ``crawl fetch`` notices within a second that its parent is gone, and exits)."""


def progress_dir(store: Store, segment: str):
    """Where partitions publish their progress counters: a local folder (see Store.local_dir)."""
    return store.local_dir(store.path(seg.SEGMENTS, segment, seg.STATS, seg.PROGRESS))


def fetch_partition(task: FetchTask) -> dict:
    """Fetch one partition of a segment; returns its counters. Safe to call again after a crash."""
    store = Store(task.store_uri)
    segment, partition, config = task.segment, task.partition, task.config
    seg_dir = seg.segment_dir(store, segment)
    stats_path = seg.partition_stats_file(seg_dir, partition)
    if store.exists(stats_path):
        return store.read_json(stats_path)["counters"]
    if not store.local:
        return _fetch_leased(store, task)
    # A local lock file (for S3, on this machine: the store-wide fetch lock keeps other
    # machines out). It outlives a crash: finding it means an earlier run started this
    # partition and may have asked hosts after its last flush.
    lock_path = store.local_dir(seg_dir) / f".fetch-part-{partition:05d}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    started_before = lock_path.exists()
    with open(lock_path, "a+") as lock:
        _lock_partition(lock, lock_path, segment, partition)
        if store.exists(stats_path):  # finished by the run we waited for
            return store.read_json(stats_path)["counters"]
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        counters = _run(store, task, started_before)
        if counters.get("fetch/interrupted"):
            # Stopped by a signal: what was fetched is committed, the partition is not
            # finished (no stats file); the lock file stays, so the resumed run knows it
            # must wait a full delay before asking any host again.
            return counters
    lock_path.unlink(missing_ok=True)
    return counters


def _fetch_leased(store: Store, task: FetchTask) -> dict:
    """On S3: the partition under its lease (cycles/fetch/partition_lease.py), so that a run retried
    on another machine never overlaps an earlier run that is still alive."""
    with PartitionLease(store, task.segment, task.partition, task.config.db) as lease:
        stats_path = seg.partition_stats_file(seg.segment_dir(store, task.segment), task.partition)
        if store.exists(stats_path):  # finished by the run whose lease we waited for
            return store.read_json(stats_path)["counters"]
        counters = _run(store, task, lease.taken_over, lease)
        lease.interrupted = bool(counters.get("fetch/interrupted"))
        return counters


def _run(store: Store, task: FetchTask, resumed: bool, lease: PartitionLease | None = None) -> dict:
    """Load, run and close the partition's fetcher; write its stats file if it finished."""
    segment, partition, config = task.segment, task.partition, task.config
    started = time.monotonic()
    fetcher = PartitionFetcher(store, segment, partition, config,
                               progress_path=progress_dir(store, segment) / f"part-{partition:05d}.json")
    fetcher.resumed = resumed
    fetcher.parent_pid = parent_pid()
    fetcher.stop_signal = stop_signal if lease is None else fenced_stop_signal(stop_signal, lease)
    try:
        fetcher.load()
    except StoreError as exc:
        # pyarrow's messages span lines; the stage's error is one line, with the fix.
        raise StoreError(f"fetch: segment {segment}, partition {partition}: {' '.join(str(exc).split())}; "
                         f"or give the segment up with `crawl abandon {segment}` and run `crawl generate`"
                         ) from None
    try:
        fetcher.run()
    finally:
        fetcher.close()
    fetcher.stats["fetch/seconds"] = round(time.monotonic() - started, 3)
    fetcher.stats["fetch/allowed_requests"] = fetcher.allowed_requests(time.monotonic())
    fetcher.count_idle()
    counters = dict(fetcher.stats)
    if counters.get("fetch/interrupted"):
        return counters
    # The partition's chunk manifest, summed into the segment's fetched marker: update
    # checks every listed file (a lost chunk was silently dropped before).
    seg_dir = seg.segment_dir(store, segment)
    if lease is not None:
        lease.check()  # a stalled run must not finish a partition another run may hold now
    fetcher.write_leftover()  # before the stats file, the partition's commit
    store.write_json(seg.partition_stats_file(seg_dir, partition),
                     {"partition": partition, "counters": counters, "chunks": fetcher.chunk_manifest()})
    if config.fetch.progress_s > 0:
        fetcher.publish_progress(time.monotonic())  # final counters (fetch_segment removes the folder)
    return counters


def _lock_partition(lock, lock_path, segment: str, partition: int) -> None:
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise StageError(f"fetch: partition {partition} of segment {segment} is locked by another "
                                 f"process ({lock_path}, pid inside); stop that process, then run "
                                 f"`crawl fetch {segment}` again") from None
            time.sleep(0.1)


def fetch_partition_task(task: FetchTask) -> dict:
    """Pool entry point: like fetch_partition, but an unexpected error keeps its traceback."""
    try:
        return fetch_partition(task)
    except CrawlError:
        raise
    except Exception as exc:
        raise StageError(f"fetch: partition {task.partition} of segment {task.segment} failed:\n"
                         f"{traceback.format_exc()}") from exc


# --- stop signals ----------------------------------------------------------------------------
_STOP_SIGNAL: int | None = None
"""Set by :func:`request_stop` (a SIGTERM or SIGINT handler): the run loop commits and stops."""


def request_stop(signum: int = signal.SIGTERM, frame=None) -> None:
    """Ask the partition running in this process to commit its open chunk and stop."""
    global _STOP_SIGNAL
    _STOP_SIGNAL = signum


def clear_stop() -> None:
    global _STOP_SIGNAL
    _STOP_SIGNAL = None


def stop_signal() -> int | None:
    """The stop signal received by this process, if any."""
    return _STOP_SIGNAL


def install_stop_handlers() -> None:
    """Pool worker initializer: SIGTERM and SIGINT (sent by the parent, or by a supervisor
    to the whole process group) make the partition commit what it fetched and stop.
    Dying with the parent is the pool's part (ProcessPool ``die_with_parent``)."""
    clear_stop()
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)


class StopSignals:
    """While fetching: SIGTERM and SIGINT ask every partition to commit what it fetched and
    stop (the handler forwards the signal to the pool workers), instead of killing the
    stage and losing up to ``fetch.flush_s`` of fetched pages."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.received: int | None = None
        self.pool = None
        """The fetch pool (cycles/executor.py ProcessPool), while it runs: signals go to its workers."""
        self._previous: dict = {}

    def __enter__(self):
        clear_stop()
        if threading.current_thread() is threading.main_thread():  # signal() works only there
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.received = signum
        request_stop(signum)  # a partition running in this process
        if self.pool is not None:
            self.pool.signal_workers(signal.SIGTERM)

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        clear_stop()
