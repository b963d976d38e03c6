"""``crawl fetch``: fetch every partition of a segment in a pool of processes.

Each partition is one task (:func:`cycles.fetch.worker.fetch_partition`) given only the
store path, the segment id, the partition number and the config; tasks share nothing,
so any executor can run them (``executor=``, cycles/executor.py). The default runs them
in spawned processes (never forked: a worker must not inherit the parent's open
handles); ``processes=1`` runs them in-process through the same function. Re-running ``crawl fetch`` on a segment resumes
it: finished partitions are skipped and unfinished ones continue from their last chunk.

Pool workers die with the parent (``pool_worker_init``), so ``kill -9`` of ``crawl fetch``
leaves nothing fetching behind it. On a terminal, a one-line progress display (pages,
pages/s, bytes, errors, hosts in flight and waiting) is redrawn every ``fetch.progress_s``
from the small counter files the workers publish under ``stats/progress/``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from cycles.config import Config
from cycles.errors import StageError
from cycles.executor import Executor
from cycles.fetch.worker import fetch_partition, fetch_partition_task, pool_worker_init, progress_dir
from cycles.store import Store, utcnow


@dataclass
class FetchResult:
    segment: str
    partitions: int
    counters: Counter = field(default_factory=Counter)
    seconds: float = 0.0


def partitions_of(store: Store, segment: str) -> list[int]:
    folder = store.segment_dir(segment) / "fetchlist"
    return sorted(int(p.stem.split("-")[1]) for p in store.list(folder, "part-*.parquet"))


def fetch_segment(store: Store, config: Config, segment: str | None = None,
                  processes: int | None = None, executor: Executor | None = None) -> FetchResult:
    """Fetch a generated segment (the newest unfetched one if ``segment`` is None).

    ``executor`` (cycles/executor.py) runs the partition tasks elsewhere, e.g. on a
    cluster; by default they run in a local pool of ``processes`` whose workers die with
    this process.
    """
    segment = segment or store.latest_segment("generated")
    state = store.segment_state(segment)
    if state == "incomplete":
        raise StageError(f"fetch: segment {segment} has no _GENERATED marker (generate was "
                         "interrupted); run `crawl generate` again")
    if state in ("fetched", "updated"):
        raise StageError(f"fetch: segment {segment} is already {state}; nothing to do")
    partitions = partitions_of(store, segment)
    processes = processes or config.fetch.processes or os.cpu_count() or 1
    processes = max(1, min(processes, len(partitions)))
    started = time.monotonic()
    values = config.to_dict()
    tasks = [(store.uri, segment, p, values) for p in partitions]
    counters: Counter = Counter()
    # One store-wide fetch at a time: two fetches of different segments could otherwise
    # both ask the same host.
    progress_folder = progress_dir(store, segment)
    progress = Progress(progress_folder, segment, len(partitions), config.fetch.progress_s)
    with store.lock("fetch"):
        progress.start()
        try:
            if executor is not None:
                for result in executor.map(fetch_partition_task, tasks):
                    counters.update(result)
            elif processes == 1:
                for task in tasks:
                    counters.update(fetch_partition(*task))
            else:
                context = multiprocessing.get_context("spawn")
                with context.Pool(processes, initializer=pool_worker_init, initargs=(os.getpid(),)) as pool:
                    for result in pool.imap_unordered(fetch_partition_task, tasks, chunksize=1):
                        counters.update(result)
        finally:
            progress.stop()
    shutil.rmtree(progress_folder, ignore_errors=True)
    seconds = round(time.monotonic() - started, 3)
    counters.pop("fetch/seconds", None)
    store.write_json(store.segment_dir(segment) / "stats" / "fetch.json", dict(sorted(counters.items())))
    store.write_marker(segment, "fetched", {"segment": segment, "fetched_at": utcnow().isoformat(),
                                            "seconds": seconds, "partitions": len(partitions),
                                            "requests": counters.get("fetch/requests", 0)})
    return FetchResult(segment, len(partitions), counters, seconds)


def progress_line(progress_dir, segment: str, partitions: int, elapsed_s: float) -> str:
    """One line summing the workers' published counters (see ``PartitionFetcher.publish_progress``)."""
    totals: Counter = Counter()
    active = waiting = reporting = 0
    for path in sorted(progress_dir.glob("part-*.json")) if progress_dir.exists() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being replaced right now; next second
        reporting += 1
        totals.update(data["counters"])
        active += data["hosts_active"]
        waiting += data["hosts_waiting"]
    pages = sum(v for k, v in totals.items() if k.startswith("fetch/outcome/") and k != "fetch/outcome/deferred")
    errors = sum(totals.get(f"fetch/outcome/{o}", 0) for o in ("network_error", "server_error"))
    rate = pages / elapsed_s if elapsed_s > 0 else 0.0
    return (f"fetch {segment}: {pages} pages ({rate:.1f}/s), {totals.get('fetch/bytes', 0) / 1e6:.1f} MB, "
            f"{errors} errors, {totals.get('fetch/outcome/deferred', 0)} deferred, "
            f"hosts {active} active / {waiting} waiting, {reporting}/{partitions} partitions")


class Progress:
    """Redraws :func:`progress_line` on stderr about once a second, only on a terminal."""

    def __init__(self, progress_dir, segment: str, partitions: int, interval_s: float, stream=None):
        self.dir = progress_dir
        self.segment = segment
        self.partitions = partitions
        self.interval_s = interval_s
        self.stream = stream if stream is not None else sys.stderr
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()

    def enabled(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return self.interval_s > 0 and bool(isatty and isatty())

    def start(self) -> None:
        if self.enabled():
            self._started = time.monotonic()
            self._thread = threading.Thread(target=self._loop, name="fetch-progress", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._draw()

    def _draw(self) -> None:
        line = progress_line(self.dir, self.segment, self.partitions, time.monotonic() - self._started)
        self.stream.write("\r\x1b[2K" + line)
        self.stream.flush()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
