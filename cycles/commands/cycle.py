"""``crawl cycle``: generate, fetch and update in a row, as cron or Airflow would run them.

Crash-only: a cycle first finishes what an interrupted one left (cycles/tables/segment.py) —
it resumes a segment's unfinished fetch, then updates fetched segments, oldest first —
and only then generates a new segment. Killed at any moment, ``crawl cycle`` run again
carries on. The whole run holds the store's cycle lock, taken before anything is leased:
a second ``crawl cycle`` (or ``crawl generate``) exits at once with one line.
"""

from __future__ import annotations

from typing import Iterator

from cycles.tables import segment as seg
from cycles.commands.compact import compact_when_due
from cycles.config import Config
from cycles.fetch.fetch import fetch_segment
from cycles.generate.generate import generate
from cycles.storage.store import Store
from cycles.update.update import update_segment


def finish_segment(store: Store, config: Config, segment: str, number: int,
                   processes: int | None) -> Iterator[str]:
    """Move a segment on to updated: fetch it (or resume its fetch), then update it."""
    if seg.state(store, segment) in (seg.State.GENERATED, seg.State.FETCHING):
        fetched = fetch_segment(store, config, segment, processes)
        c = fetched.counters
        yield (f"cycle {number}: fetched {c.get('fetch/requests', 0)} requests, {c.get('fetch/outcome/ok', 0)} "
               f"pages in {fetched.seconds:.1f}s")
    updated = update_segment(store, config, segment)
    yield f"cycle {number}: updated, {updated.counters.get('outlinks/new', 0)} new URLs"
    yield from compact_when_due(store, config, f"cycle {number}")  # as `crawl run` (docs/incremental.md)


def run_cycles(store: Store, config: Config, cycles: int, top_n: int | None = None,
               processes: int | None = None) -> Iterator[str]:
    """Run up to ``cycles`` cycles; yields one progress line per stage. Stops when nothing is due.

    A cycle that finds a segment left pending by an interrupted run finishes that segment
    instead of generating a new one.
    """
    with seg.cycle_lock(store, "cycle", config.db):
        for number in range(1, cycles + 1):
            pending = seg.oldest(store, *seg.PENDING)
            if pending is not None:
                yield f"cycle {number}: resuming segment {pending} ({seg.state(store, pending)})"
                yield from finish_segment(store, config, pending, number, processes)
                continue
            generated = generate(store, config, top_n=top_n, cycle_locked=True)
            if generated.segment is None:
                yield f"cycle {number}: {generated.reason}; stopping"
                return
            yield f"cycle {number}: generated {generated.segment} ({generated.urls} URLs, {generated.hosts} hosts)"
            yield from finish_segment(store, config, generated.segment, number, processes)
