"""Reading the indexer feed with a cursor per consumer, and the back-pressure it exerts.

Batches are ``pages/<segment id>.parquet``; ids sort by time, so "after the cursor" is
"named later than the cursor". A consumer registers by reading once; its cursor is
``pages/_consumers/<name>.json``, replaced atomically on commit. Pages are never dropped:
when a consumer falls more than ``generate.feed_max_lag_cycles`` batches behind, generate
holds the crawl (and from half that lag it halves the fetch list) until it catches up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from cycles import schema
from cycles.errors import CrawlError
from cycles.store import Store, utcnow

CONSUMER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass
class FeedRead:
    consumer: str
    batches: list[str]
    pages: int
    table: pa.Table
    committed: bool


def batches(store: Store) -> list[str]:
    return [p.name for p in store.list(store.path("pages"), "*.parquet")]


def _cursor_path(store: Store, consumer: str):
    if not CONSUMER_NAME.match(consumer):
        raise CrawlError(f"consumer name {consumer!r} must be 1-64 letters, digits, '.', '_' or '-'")
    return store.path("pages", "_consumers", f"{consumer}.json")


def consumers(store: Store) -> dict[str, str | None]:
    return {p.stem: store.read_json(p).get("last") for p in store.list(store.path("pages", "_consumers"), "*.json")}


def read_feed(store: Store, consumer: str, commit: bool = True, limit: int | None = None) -> FeedRead:
    """The pages of every batch after the consumer's cursor (at most ``limit`` batches)."""
    path = _cursor_path(store, consumer)
    try:
        last, registered = store.read_json(path).get("last"), True
    except FileNotFoundError:
        last, registered = None, False
    pending = [b for b in batches(store) if last is None or b > last][:limit]
    tables = [store.read_table(store.path("pages", b), schema.PAGES) for b in pending]
    table = pa.concat_tables(tables) if tables else schema.PAGES.empty_table()
    if commit and (pending or not registered):
        store.write_json(path, {"last": pending[-1] if pending else last, "updated_at": utcnow().isoformat()})
    return FeedRead(consumer, pending, table.num_rows, table, commit)


def feed_lag(store: Store) -> tuple[str | None, int]:
    """(the consumer furthest behind, how many batches it has not read)."""
    all_batches = batches(store)
    worst, lag = None, 0
    for name, last in consumers(store).items():
        behind = sum(1 for b in all_batches if last is None or b > last)
        if behind > lag:
            worst, lag = name, behind
    return worst, lag
