"""``crawl fetch``: fetch every partition of a segment in a pool of processes.

Each partition is one task (:func:`cycles.fetch.worker.fetch_partition`) given only the
store path, the segment id, the partition number and the config; tasks share nothing,
so any executor can run them. The default runs them in spawned processes (never forked:
a worker must not inherit the parent's open handles); ``processes=1`` runs them
in-process through the same function. Re-running ``crawl fetch`` on a segment resumes
it: finished partitions are skipped and unfinished ones continue from their last chunk.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import Counter
from dataclasses import dataclass, field

from cycles.config import Config
from cycles.errors import StageError
from cycles.fetch.worker import fetch_partition, fetch_partition_task
from cycles.store import Store, utcnow


@dataclass
class FetchResult:
    segment: str
    partitions: int
    counters: Counter = field(default_factory=Counter)
    seconds: float = 0.0


def partitions_of(store: Store, segment: str) -> list[int]:
    folder = store.segment_dir(segment) / "fetchlist"
    return sorted(int(p.stem.split("-")[1]) for p in folder.glob("part-*.parquet"))


def fetch_segment(store: Store, config: Config, segment: str | None = None,
                  processes: int | None = None) -> FetchResult:
    """Fetch a generated segment (the newest unfetched one if ``segment`` is None)."""
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
    tasks = [(str(store.root), segment, p, values) for p in partitions]
    counters: Counter = Counter()
    # One store-wide fetch at a time: two fetches of different segments could otherwise
    # both ask the same host.
    with store.lock("fetch"):
        if processes == 1:
            for task in tasks:
                counters.update(fetch_partition(*task))
        else:
            context = multiprocessing.get_context("spawn")
            with context.Pool(processes) as pool:
                for result in pool.imap_unordered(fetch_partition_task, tasks, chunksize=1):
                    counters.update(result)
    seconds = round(time.monotonic() - started, 3)
    counters.pop("fetch/seconds", None)
    store.write_json(store.segment_dir(segment) / "stats" / "fetch.json", dict(sorted(counters.items())))
    store.write_marker(segment, "fetched", {"segment": segment, "fetched_at": utcnow().isoformat(),
                                            "seconds": seconds, "partitions": len(partitions),
                                            "requests": counters.get("fetch/requests", 0)})
    return FetchResult(segment, len(partitions), counters, seconds)
