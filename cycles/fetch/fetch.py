"""``crawl fetch``: fetch every partition of a segment in a pool of processes.

Each partition is one task (:func:`cycles.fetch.partition.fetch_partition` of a
:class:`~cycles.fetch.partition.FetchTask`: the store URI, the segment id, the partition
number and the config); tasks share nothing,
so any executor can run them (``executor=``, cycles/executor.py). The default runs them
in spawned processes (never forked: a worker must not inherit the parent's open
handles); ``processes=1`` runs them in-process through the same function. Re-running ``crawl fetch`` on a segment resumes
it: finished partitions are skipped and unfinished ones continue from their last chunk.

Pool workers die with the parent (cycles/executor.py ProcessPool ``die_with_parent``), so ``kill -9`` of ``crawl fetch``
leaves nothing fetching behind it. On a terminal, a one-line progress display (pages,
pages/s, URLs done of the fetch list and ETA, bytes, errors, hosts in flight and waiting) is
redrawn every ``fetch.progress_s`` from the small counter files the workers publish under
``stats/progress/``; off a terminal the same line is logged every ``log.progress_interval_s``
(cycles/progress.py).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import time
from collections import Counter
from concurrent.futures import FIRST_EXCEPTION, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

from cycles import metrics, progress
from cycles.tables import segment as seg
from cycles.cluster import executor_for
from cycles.config import Config
from cycles.errors import FetchInterrupted, SegmentNotFound, StageError
from cycles.executor import Executor, ProcessPool
from cycles.fetch.identity import warn_if_placeholder_agent
from cycles.fetch.memory import worker_allocator_env
from cycles.fetch.tail import EARLY_END_FILE
from cycles.fetch.partition import (FetchTask, StopSignals, fetch_partition, fetch_partition_task,
                                    install_stop_handlers, progress_dir)
from cycles.storage.store import Store, utcnow


@dataclass
class FetchResult:
    segment: str
    partitions: int
    counters: Counter = field(default_factory=Counter)
    seconds: float = 0.0


def request_early_end(store: Store, segment: str) -> None:
    """Ask the partitions fetching ``segment`` to hand back what they have not reached and
    finish now, as at ``fetch.max_duration_s`` (cycles/fetch/worker.py ``EARLY_END_FILE``).
    Only workers on this machine see it (the progress folder is local); others keep to
    their time limit."""
    folder = progress_dir(store, segment)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / EARLY_END_FILE).touch()


def partitions_of(store: Store, segment: str) -> list[int]:
    return seg.partitions_of(store, segment)


def choose_segment(store: Store, segment: str | None) -> str:
    """The segment to fetch: the one named, else the oldest generated or interrupted one
    (segments are fetched and applied in generation order)."""
    if segment is None:
        segment = seg.oldest(store, seg.State.GENERATED, seg.State.FETCHING)
        if segment is None:
            raise SegmentNotFound(f"fetch: no generated segment waiting in {store.uri_of(seg.segments_root(store))}; "
                                  "run `crawl generate` first")
    state = seg.state(store, segment)
    if state == seg.State.INCOMPLETE:
        raise StageError(f"fetch: segment {segment} has no generated marker (generate was "
                         "interrupted); run `crawl generate` again")
    if state == seg.State.ABANDONED:
        marker = seg.read_marker(store, segment, seg.Abandoned)
        raise StageError(f"fetch: segment {segment} is abandoned ({marker.reason if marker else '?'}); "
                         "it is never fetched or applied; run `crawl generate` for a new one")
    if state in (seg.State.FETCHED, seg.State.UPDATED):
        raise StageError(f"fetch: segment {segment} is already {state}; nothing to do")
    return segment


def run_pool(tasks: list[FetchTask], processes: int, stop: StopSignals, counters: Counter, segment: str) -> None:
    """Run the partition tasks in a spawn pool whose workers die with this process.

    A worker that dies (SIGKILL, the OOM killer) breaks the pool: the stage ends at once
    with a one-line error (the pool's ``death_error``), not a hang holding the fetch lock.
    The partitions are resumable, so the message says how to resume.
    """
    died = StageError(f"fetch: a worker process of segment {segment} died (killed, or out of memory); "
                      f"what it committed is kept; run `crawl fetch {segment}` to resume")
    with worker_allocator_env(), ProcessPool(processes, "fetch", initializer=install_stop_handlers,
                                             die_with_parent=True, death_error=died) as pool:
        try:
            stop.pool = pool  # signals are forwarded to its workers
            futures = [pool.submit(fetch_partition_task, task) for task in tasks]
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=1.0, return_when=FIRST_EXCEPTION)
                for future in done:
                    counters.update(future.result())
        except BaseException as exc:
            if not isinstance(exc, BrokenProcessPool):  # the pool's exit turns it into `died`
                # Another partition failed: ask the others to commit and stop, rather than
                # wait for them to fetch their whole partition.
                pool.signal_workers(signal.SIGTERM)
            raise
        finally:
            stop.pool = None


def _run_tasks(tasks: list[FetchTask], executor: Executor | None, processes: int, stop: StopSignals,
               counters: Counter, segment: str) -> None:
    """Run the partition tasks on the executor, in this process (one process) or in a local
    pool, summing their counters; in this process, a stop signal ends it between partitions."""
    if executor is not None:
        for result in executor.map(fetch_partition_task, tasks):
            counters.update(result)
    elif processes == 1:
        for task in tasks:
            if stop.received is not None:
                break
            counters.update(fetch_partition(task))
    else:
        run_pool(tasks, processes, stop, counters, segment)


def fetch_segment(store: Store, config: Config, segment: str | None = None,
                  processes: int | None = None, executor: Executor | None = None) -> FetchResult:
    """Fetch a generated segment (the oldest unfetched one if ``segment`` is None).

    ``executor`` (cycles/executor.py) runs the partition tasks elsewhere, e.g. on a
    cluster; by default they run in a local pool of ``processes`` whose workers die with
    this process. SIGTERM or SIGINT commits what was fetched and raises
    :class:`FetchInterrupted` (resume with ``crawl fetch SEGMENT``).
    """
    segment = choose_segment(store, segment)
    partitions = partitions_of(store, segment)
    if executor is None:
        executor = executor_for(store, config)  # db.executor: the partitions run on a cluster
    processes = processes or config.fetch.processes or os.cpu_count() or 1
    processes = max(1, min(processes, len(partitions)))
    started = time.monotonic()
    tasks = [FetchTask(store.uri, segment, p, config) for p in partitions]
    counters: Counter = Counter()
    # One store-wide fetch at a time: two fetches of different segments could otherwise
    # both ask the same host.
    progress_folder = progress_dir(store, segment)
    # A request to end an earlier, interrupted fetch of this segment early is not for this one.
    (progress_folder / EARLY_END_FILE).unlink(missing_ok=True)
    generated = seg.read_marker(store, segment, seg.Generated)
    progress = Progress(progress_folder, segment, len(partitions), config.fetch.progress_s,
                        total=generated.urls if generated else None,
                        log_interval_s=config.log.progress_interval_s)
    warn_if_placeholder_agent(store, config, segment)
    # Rewrites crawl_fetch.prom every metrics.fetch_interval_s from the same counter files.
    live_metrics = metrics.FetchMetricsLoop(store, config, segment, len(partitions), progress_folder)
    with store.lock("fetch", db=config.db), StopSignals() as stop:
        seg.mark_fetching(store, segment)
        progress.start()
        live_metrics.start()
        try:
            _run_tasks(tasks, executor, processes, stop, counters, segment)
        finally:
            live_metrics.stop()
            progress.stop()
        received = stop.received
    shutil.rmtree(progress_folder, ignore_errors=True)
    seconds = round(time.monotonic() - started, 3)
    counters.pop("fetch/seconds", None)
    seg_dir = seg.segment_dir(store, segment)
    finished = [p for p in partitions if store.exists(seg.partition_stats_file(seg_dir, p))]
    if received is not None or counters.get("fetch/interrupted") or len(finished) < len(partitions):
        name = signal.Signals(received).name if received else "a stop signal"
        raise FetchInterrupted(
            f"fetch: segment {segment} stopped by {name}: {len(finished)} of {len(partitions)} partitions "
            f"finished, every page fetched is committed; resume with `crawl fetch {segment}`")
    write_fetched(store, segment, partitions, counters, seconds, config, started_wall=live_metrics.started_wall)
    return FetchResult(segment, len(partitions), counters, seconds)


def write_fetched(store: Store, segment: str, partitions: list[int], counters: Counter, seconds: float,
                  config: Config | None = None, started_wall: float | None = None) -> None:
    """Write the segment's fetch stats and its fetched marker, listing every partition's chunks;
    then, with a ``config``, the stage's Prometheus file (cycles/metrics.py).

    The stats file holds the partitions' summed counters and the stage's duration and rates
    (:func:`cycles.metrics.fetch_summary`: seconds, pages/s, errors by kind, politeness
    utilisation)."""
    seg_dir = seg.segment_dir(store, segment)
    stats = [store.read_json(seg.partition_stats_file(seg_dir, p)) for p in partitions]
    # Partitions finished by an older version have no chunk list: the segment is then not verified.
    chunks = None if any("chunks" not in s for s in stats) else [c for s in stats for c in s["chunks"]]
    store.write_json(seg.stats_file(seg_dir, "fetch"),
                     dict(sorted({**counters, **metrics.fetch_summary(counters, seconds)}.items())))
    seg.write_marker(store, seg.Fetched(segment, fetched_at=utcnow().isoformat(), seconds=seconds,
                                        partitions=len(partitions), requests=counters.get("fetch/requests", 0),
                                        chunks=chunks))
    if config is not None:
        started = started_wall if started_wall is not None else time.time() - seconds
        metrics.publish(store, config, "fetch", metrics.fetch_families(
            counters, seconds, segment, running=False, started_wall=started, partitions=len(partitions),
            partitions_reporting=len(partitions)))


def fetch_one_partition(store: Store, config: Config, segment: str, partition: int) -> FetchResult:
    """Fetch one partition of a segment (``crawl fetch SEGMENT --partition N``), for a
    scheduler that runs the partitions as its own tasks (deploy/airflow/dags/crawl_dag.py);
    :func:`finish_fetch` then writes the fetched marker. Safe to run again: a finished
    partition returns its counters.

    It takes no store-wide fetch lock: the partitions of one segment hold disjoint hosts
    (generate partitions by host) and run at once; each holds its own partition lock. The
    scheduler must not fetch two segments at once (the DAG runs one at a time).
    """
    segment = choose_segment(store, segment)
    partitions = partitions_of(store, segment)
    if partition not in partitions:
        raise StageError(f"fetch: segment {segment} has no partition {partition} (its partitions: "
                         f"{', '.join(map(str, partitions))}); pick one of those")
    started = time.monotonic()
    warn_if_placeholder_agent(store, config, segment)
    # Only this partition's counters: a scheduler may fetch the others at the same time.
    urls = store.read_metadata(seg.fetchlist_file(seg.segment_dir(store, segment), partition)).num_rows
    progress = Progress(progress_dir(store, segment), f"{segment} partition {partition}", 1, config.fetch.progress_s,
                        total=urls, log_interval_s=config.log.progress_interval_s,
                        files=f"{seg.part_name(partition)}.json")
    with StopSignals() as stop, progress:
        seg.mark_fetching(store, segment)
        counters = Counter(fetch_partition(FetchTask(store.uri, segment, partition, config)))
        received = stop.received
    counters.pop("fetch/seconds", None)
    if received is not None or counters.get("fetch/interrupted"):
        name = signal.Signals(received).name if received else "a stop signal"
        raise FetchInterrupted(f"fetch: partition {partition} of segment {segment} stopped by {name}; every page "
                               f"fetched is committed; resume with `crawl fetch {segment} --partition {partition}`")
    return FetchResult(segment, 1, counters, round(time.monotonic() - started, 3))


def finish_fetch(store: Store, config: Config, segment: str) -> FetchResult:
    """Write the fetched marker of a segment whose partitions were fetched one by one
    (``crawl fetch SEGMENT --finish``); refuses while a partition is unfinished. Its
    counters are the partitions' sums; its seconds run from the fetching marker."""
    segment = choose_segment(store, segment)
    partitions = partitions_of(store, segment)
    seg_dir = seg.segment_dir(store, segment)
    missing = [p for p in partitions if not store.exists(seg.partition_stats_file(seg_dir, p))]
    if missing:
        raise StageError(f"fetch: segment {segment}: partitions {', '.join(map(str, missing))} are not finished; "
                         f"run `crawl fetch {segment} --partition N` for each (or `crawl fetch {segment}`)")
    counters: Counter = Counter()
    for p in partitions:
        counters.update(store.read_json(seg.partition_stats_file(seg_dir, p))["counters"])
    counters.pop("fetch/seconds", None)
    fetching = seg.read_marker(store, segment, seg.Fetching)
    started = dt.datetime.fromisoformat(fetching.started_at) if fetching and fetching.started_at else utcnow()
    seconds = round(max(0.0, (utcnow() - started).total_seconds()), 3)
    shutil.rmtree(progress_dir(store, segment), ignore_errors=True)
    write_fetched(store, segment, partitions, counters, seconds, config)
    return FetchResult(segment, len(partitions), counters, seconds)


def progress_line(progress_dir, segment: str, partitions: int, elapsed_s: float, total: int | None = None,
                  files: str = "part-*.json") -> str:
    """One line summing the workers' published counters (see ``PartitionFetcher.publish_progress``)
    in the ``files`` of ``progress_dir``; with the fetch list's ``total`` URLs, also how many
    are done and an ETA at the rate so far."""
    totals: Counter = Counter()
    active = waiting = reporting = 0
    for path in sorted(progress_dir.glob(files)) if progress_dir.exists() else []:
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
    # Deferred URLs are done too (they go back unfetched): the ETA counts every URL settled.
    settled = pages + totals.get("fetch/outcome/deferred", 0)
    done = (f", {progress.done_of_total(settled, total, 'URLs')}, ETA {progress.eta(settled, total, elapsed_s)}"
            if total else "")
    return (f"fetch {segment}: {pages} pages ({rate:.1f}/s){done}, {totals.get('fetch/bytes', 0) / 1e6:.1f} MB, "
            f"{errors} errors, {totals.get('fetch/outcome/deferred', 0)} deferred, "
            f"hosts {active} active / {waiting} waiting, {reporting}/{partitions} partitions")


class Progress(progress.LiveProgress):
    """The fetch's :func:`progress_line`, from the counters the workers publish every
    ``interval_s`` (``fetch.progress_s``): redrawn at that rate on a terminal, logged every
    ``log_interval_s`` (``log.progress_interval_s``) elsewhere (cycles/progress.py)."""

    def __init__(self, progress_dir, segment: str, partitions: int, interval_s: float, stream=None,
                 total: int | None = None, log_interval_s: float = 0.0, files: str = "part-*.json"):
        def describe(elapsed_s: float) -> str:
            return progress_line(progress_dir, segment, partitions, elapsed_s, total, files)

        # fetch.progress_s = 0: the workers publish nothing, so there is nothing to log either.
        super().__init__(describe, interval_s, log_interval_s if interval_s > 0 else 0.0, stream,
                         name="fetch-progress")
