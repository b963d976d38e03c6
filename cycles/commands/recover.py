"""``crawl recover``: make a complete version of the crawl DB (and host DB) current again.

A versioned table (``crawldb/``, ``hostdb/``) is trusted only through ``CURRENT``. When
``CURRENT`` is missing, unreadable or names a missing folder, every stage refuses to run
(``Store.manifest``): going on would create a fresh, empty table and prune the real one.
This command reinstates the newest *complete* version: sealed by its writer with a
``_COMPLETE`` marker (the manifest to install and each file's row count, written after its
last file and before ``CURRENT``), every file of the seal present with the sealed row count
and every page's checksum intact. A version folder a crashed writer left half-written has
no seal and is passed over.

With ``previous`` it rolls back instead: the newest complete version older than the current
one becomes current — the repair for a bucket found corrupt (``verify_parquet``).

Nothing is deleted: the next stage that installs a version prunes what is not kept.

``dedupe_crawldb`` (``crawl recover --dedupe``) repairs a crawl DB written before buckets
were checked as they are written, in which a URL has several rows (update once wrote every
row of a host twice when the host was both a mirror and duplicate-heavy): it writes a new
version keeping one row per URL, the most recently fetched.
"""

from __future__ import annotations

from dataclasses import dataclass

from cycles.config import Config, DbConfig
from cycles.tables.crawldb import replace_crawldb
from cycles.errors import StageError, StoreError
from cycles.storage.store import Manifest, Store, verify_parquet_file

TABLES = ("crawldb", "hostdb", "linkdb")  # linkdb: cycles/update/linkgraph.py


@dataclass
class RecoverResult:
    table: str
    action: str
    """'kept' (CURRENT was fine), 'reinstated', 'rolled back' or 'absent' (no such table)."""
    version: str | None = None
    skipped: tuple[tuple[str, str], ...] = ()
    """(version, why it is not complete) for each newer version passed over."""


def recover(store: Store, previous: bool = False, tables: tuple[str, ...] = TABLES,
            db: DbConfig | None = None) -> list[RecoverResult]:
    """Reinstate (or with ``previous`` roll back to) a complete version of each table.

    Holds the ``crawldb`` lock, which every stage writing either table holds, so no writer
    runs meanwhile.
    """
    for table in tables:
        if table not in TABLES:
            raise StoreError(f"recover: unknown table {table!r}; choose from {', '.join(TABLES)}")
    with store.lock("crawldb", db=db):
        return [recover_table(store, table, previous) for table in tables]


def recover_table(store: Store, table: str, previous: bool) -> RecoverResult:
    current = current_or_none(store, table)
    if current is not None and not previous:
        return RecoverResult(table, "kept", current.version)
    if not previous and not store.version_dirs(table):
        return RecoverResult(table, "absent")
    candidates = list(reversed(store.version_dirs(table)))
    if previous:
        if current is None:
            raise StoreError(f"recover: {store.uri_of(store.path(table, 'CURRENT'))} is missing or unreadable; "
                             "run `crawl recover` without --previous first")
        candidates = [v for v in candidates if v < current.version]
    skipped = []
    for version in candidates:
        manifest, why = complete_version(store, table, version)
        if manifest is None:
            skipped.append((version, why))
            continue
        store.reinstate(table, manifest)
        return RecoverResult(table, "rolled back" if previous else "reinstated", version, tuple(skipped))
    looked = "; ".join(f"{v}: {why}" for v, why in skipped) or "no version folder"
    raise StoreError(f"recover: no complete {'older ' if previous else ''}version of {store.uri_of(store.path(table))} "
                     f"({looked}); restore the table from backup (if these are leftovers of an interrupted first "
                     f"`crawl inject`, delete them and inject again)")


def current_or_none(store: Store, table: str) -> Manifest | None:
    """The current manifest, or None if ``CURRENT`` is missing, unreadable or dangling."""
    try:
        return store.manifest(table)
    except StoreError:
        return None


def complete_version(store: Store, table: str, version: str) -> tuple[Manifest | None, str]:
    """(manifest, "") if ``version`` is sealed, whole and every page checks out; else (None, why)."""
    manifest, why = store.sealed_manifest(table, version)
    if manifest is None:
        return None, why
    # Its own files and those of older versions its manifest names (bases carried over, deltas).
    own = store.list(store.path(table, version), "*.parquet")
    for path in own + [p for p in store.sealed_files(table, version) if p not in own]:
        try:
            verify_parquet_file(path, filesystem=store.fs)
        except StoreError as exc:
            return None, str(exc).split(";")[0]
    return manifest, ""


DEDUPE_ORDER = "last_fetched DESC NULLS LAST, fetch_count DESC, score ASC, first_seen ASC"
"""Which of a URL's rows stays: the newest fetch; among copies of one row, the lowest score
(the duplicate rows of the old demoted-hosts join differed only in the factor applied)."""


def dedupe_crawldb(store: Store, config: Config) -> int:
    """Write a crawl DB version with one row per URL and install it; returns rows dropped."""
    with store.lock("crawldb", db=config.db):
        manifest = store.manifest("crawldb")
        if manifest is None:
            raise StageError(f"recover: there is no crawl DB in {store.uri}; nothing to repair")
        before = sum(store.read_metadata(f).num_rows for f in store.version_files("crawldb", manifest))
        result = replace_crawldb(store, config, lambda con, old, bucket: (
            f"SELECT * FROM {old} QUALIFY row_number() OVER (PARTITION BY url ORDER BY {DEDUPE_ORDER}) = 1"),
            who="recover", adds_to=())
    return before - result.rows
