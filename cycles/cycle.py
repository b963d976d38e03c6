"""``crawl cycle``: generate, fetch and update in a row, as cron or Airflow would run them."""

from __future__ import annotations

from typing import Iterator

from cycles.config import Config
from cycles.fetch.fetch import fetch_segment
from cycles.generate.generate import generate
from cycles.store import Store
from cycles.update.update import update_segment


def run_cycles(store: Store, config: Config, cycles: int, top_n: int | None = None,
               processes: int | None = None) -> Iterator[str]:
    """Run up to ``cycles`` cycles; yields one progress line per stage. Stops when nothing is due."""
    for number in range(1, cycles + 1):
        generated = generate(store, config, top_n=top_n)
        if generated.segment is None:
            yield f"cycle {number}: {generated.reason}; stopping"
            return
        yield f"cycle {number}: generated {generated.segment} ({generated.urls} URLs, {generated.hosts} hosts)"
        fetched = fetch_segment(store, config, generated.segment, processes)
        c = fetched.counters
        yield (f"cycle {number}: fetched {c.get('fetch/requests', 0)} requests, {c.get('fetch/outcome/ok', 0)} pages "
               f"in {fetched.seconds:.1f}s")
        updated = update_segment(store, config, generated.segment)
        yield f"cycle {number}: updated, {updated.counters.get('outlinks/new', 0)} new URLs"
