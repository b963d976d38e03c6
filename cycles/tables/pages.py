"""Reading the indexer feed with a cursor per consumer, and the back-pressure it exerts.

Batches are ``pages/<segment id>.parquet``; ids sort by time, so "after the cursor" is
"named later than the cursor". A consumer registers by reading once; its cursor is
``pages/_consumers/<name>.json``, replaced atomically on commit. Pages are never dropped:
when a consumer falls more than ``generate.feed_max_lag_cycles`` batches behind, generate
holds the crawl (and from half that lag it halves the fetch list) until it catches up.

Deliver first, then move the cursor (:func:`deliver_feed`, ``crawl pages``): the pages
are written completely to the consumer's file (temporary name, fsync, rename) before the
cursor moves, so a failed write (missing folder, disk full) leaves the cursor where it
was and the next read gets the same pages again. A cursor is moved only under the
consumer's lock and only from the position the pages were read at (compare-and-swap),
so two readers of one consumer name never both move it past pages only one of them got.
"""

from __future__ import annotations

import contextlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from cycles.tables import schema
from cycles.errors import CrawlError, LockedError
from cycles.storage.durable import write_atomically
from cycles.storage.store import Store, utcnow

CONSUMER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

STDOUT = "-"
"""``--out -``: the pages go to stdout as one Parquet file."""


@dataclass
class FeedRead:
    consumer: str
    batches: list[str]
    pages: int
    table: pa.Table
    committed: bool


@dataclass
class FeedDelivery:
    """What :func:`deliver_feed` wrote and whether it moved the cursor."""

    consumer: str
    batches: list[str]
    pages: int
    out: str
    committed: bool


def batches(store: Store) -> list[str]:
    return [p.name for p in store.list(store.path("pages"), "*.parquet")]


def _cursor_path(store: Store, consumer: str):
    if not CONSUMER_NAME.match(consumer):
        raise CrawlError(f"consumer name {consumer!r} must be 1-64 letters, digits, '.', '_' or '-'")
    return store.path("pages", "_consumers", f"{consumer}.json")


def consumers(store: Store) -> dict[str, str | None]:
    return {p.stem: store.read_json(p).get("last") for p in store.list(store.path("pages", "_consumers"), "*.json")}


def read_cursor(store: Store, consumer: str) -> tuple[str | None, bool]:
    """(the last batch the consumer committed, or None; whether it is registered)."""
    try:
        return store.read_json(_cursor_path(store, consumer)).get("last"), True
    except FileNotFoundError:
        return None, False


def pending_batches(store: Store, last: str | None, limit: int | None = None) -> list[str]:
    """The batches named after ``last`` (all when None), oldest first, at most ``limit``."""
    if limit is not None and limit < 1:
        raise CrawlError(f"--limit must be at least 1 batch, not {limit}")
    return [b for b in batches(store) if last is None or b > last][:limit]


@contextlib.contextmanager
def consumer_lock(store: Store, consumer: str) -> Iterator[None]:
    """Hold the consumer's lock (a file lock, or a lock object on S3) from reading its cursor
    until it is moved: a second reader of the same name is refused instead of getting the
    same pages and racing to move the cursor."""
    _cursor_path(store, consumer)  # checks the name before it becomes a path
    with contextlib.ExitStack() as stack:
        try:
            # A consumer holds it for one read (seconds): the default lease and renewal.
            stack.enter_context(store.lock(f"pages/_consumers/.{consumer}"))
        except LockedError:
            raise LockedError(f"consumer {consumer!r} is being read by another process right now; wait for it "
                              "to finish (two readers of one consumer would get the same pages)") from None
        yield


def commit_cursor(store: Store, consumer: str, expected: str | None, last: str | None) -> None:
    """Move the cursor from ``expected`` to ``last`` (compare-and-swap, under the consumer lock)."""
    now, _ = read_cursor(store, consumer)
    if now != expected:
        # Only a reader that does not take the lock (an older crawl) gets here.
        raise CrawlError(f"the cursor of consumer {consumer!r} moved from {expected or 'start'} to "
                         f"{now or 'start'} while its pages were read; it was left there, read again for "
                         "what is new")
    store.write_json(_cursor_path(store, consumer), {"last": last, "updated_at": utcnow().isoformat()})


def read_feed(store: Store, consumer: str, commit: bool = True, limit: int | None = None) -> FeedRead:
    """The pages of every batch after the consumer's cursor (at most ``limit`` batches), in
    memory; with ``commit`` the cursor moves once they are read. Use :func:`deliver_feed`
    to write them to a file first."""
    with consumer_lock(store, consumer) if commit else contextlib.nullcontext():
        last, registered = read_cursor(store, consumer)
        pending = pending_batches(store, last, limit)
        tables = [store.read_table(store.path("pages", b), schema.PAGES) for b in pending]
        table = pa.concat_tables(tables) if tables else schema.PAGES.empty_table()
        if commit and (pending or not registered):
            commit_cursor(store, consumer, last, pending[-1] if pending else last)
    return FeedRead(consumer, pending, table.num_rows, table, commit)


def deliver_feed(store: Store, consumer: str, out: str, commit: bool = True,
                 limit: int | None = None) -> FeedDelivery:
    """Write the pages after the consumer's cursor to ``out`` (a Parquet file, or ``-`` for
    stdout), then (``commit``) move the cursor past them. ``out`` is written even when
    there is nothing new (with no rows), so it always holds exactly this read."""
    with consumer_lock(store, consumer) if commit else contextlib.nullcontext():
        last, registered = read_cursor(store, consumer)
        pending = pending_batches(store, last, limit)
        paths = [store.path("pages", b) for b in pending]
        pages = write_pages_stdout(store, paths) if out == STDOUT else write_pages_file(store, paths, Path(out))
        if commit and (pending or not registered):
            commit_cursor(store, consumer, last, pending[-1] if pending else last)
    return FeedDelivery(consumer, pending, pages, out, commit)


def _write_batches(store: Store, paths: list, sink) -> int:
    """Stream the batches into one Parquet file (one batch in memory at a time)."""
    pages = 0
    with pq.ParquetWriter(sink, schema.PAGES, compression="zstd") as writer:
        for path in paths:
            table = store.read_table(path, schema.PAGES)
            writer.write_table(table)
            pages += table.num_rows
    return pages


def write_pages_file(store: Store, paths: list, out: Path) -> int:
    """Write the batches to ``out`` atomically: a temporary file beside it, fsynced, renamed
    over it; on any failure ``out`` is left as it was and the temporary file removed."""
    folder = out.parent
    if not folder.is_dir():
        raise CrawlError(f"cannot write {out}: folder {folder} does not exist; create it or choose another "
                         "--out (the cursor was not moved)")
    try:
        # Fsynced and renamed, the folder fsynced: the rename survives a power cut before the cursor moves.
        pages = write_atomically(out, lambda tmp: _write_batches(store, paths, str(tmp)))
    except OSError as exc:
        raise CrawlError(f"cannot write {out}: {exc.strerror or exc}; fix that and read again (the cursor "
                         "was not moved, nothing is lost)") from exc
    return pages


def write_pages_stdout(store: Store, paths: list) -> int:
    """Write the batches to stdout as one Parquet file, flushed before the cursor moves."""
    sink = pa.PythonFile(sys.stdout.buffer, mode="w")
    try:
        pages = _write_batches(store, paths, sink)
        sys.stdout.buffer.flush()
    except OSError as exc:  # BrokenPipeError: the reader went away before it had everything
        raise CrawlError(f"cannot write the pages to stdout: {exc.strerror or exc} (the cursor was not "
                         "moved, nothing is lost)") from exc
    return pages


def feed_lag(store: Store) -> tuple[str | None, int]:
    """(the consumer furthest behind, how many batches it has not read)."""
    all_batches = batches(store)
    worst, lag = None, 0
    for name, last in consumers(store).items():
        behind = sum(1 for b in all_batches if last is None or b > last)
        if behind > lag:
            worst, lag = name, behind
    return worst, lag
