"""Per-host state that outlives a cycle: when we last asked a host, and its robots.txt.

The host DB (``hostdb/``, schema.HOSTS) is merged by update from each segment's
``hosts/`` output. A fetch also reads the ``hosts/`` output of segments fetched but not
yet updated, so two fetches in a row without an update in between still keep a host's
spacing.

Robots.txt is kept twice: the latest answer (``robots_status``, ``robots_body``,
``robots_fetched_at``, and the validators ``robots_etag`` / ``robots_last_modified`` a
conditional GET sends once the copy expires) and the last *good* one (``robots_good_*``: a
2xx or 4xx), with ``robots_errors_since`` marking an unbroken run of errors. Host files
written before these columns existed are read with them null.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from cycles import schema
from cycles.store import Store, StorePath, read_parquet_checked


def host_state_files(store: Store, include_segment: str | None = None) -> list[StorePath]:
    """Host DB file plus the hosts outputs of segments not yet merged by update."""
    files: list[StorePath] = []
    manifest = store.manifest("hostdb")
    if manifest is not None:
        files += store.version_files("hostdb", manifest)
    for segment in store.segments():
        state = store.segment_state(segment)
        if state in ("fetched", "generated") or segment == include_segment:
            files += store.list(store.segment_dir(segment) / "hosts", "part-*.parquet")
    return files


ROBOTS_LATEST = ("robots_status", "robots_fetched_at", "robots_body", "robots_etag", "robots_last_modified",
                 "crawl_delay_s", "robots_errors_since")
ROBOTS_GOOD = ("robots_good_status", "robots_good_fetched_at", "robots_good_body")


def merge_host_rows(tables: list[pa.Table]) -> dict[str, dict]:
    """Latest knowledge per host: the latest request end, the newest robots.txt answer and
    the newest good robots.txt (the same rules as ``merge_hostdb`` in cycles/update/hostdb.py)."""
    merged: dict[str, dict] = {}
    for table in tables:
        for row in table.to_pylist():
            old = merged.get(row["host"])
            if old is None:
                merged[row["host"]] = row
                continue
            if row["last_request_end"] and (old["last_request_end"] is None or row["last_request_end"] > old["last_request_end"]):
                old["last_request_end"] = row["last_request_end"]
            if row["robots_fetched_at"] and (old["robots_fetched_at"] is None or row["robots_fetched_at"] > old["robots_fetched_at"]):
                for key in ROBOTS_LATEST:
                    old[key] = row[key]
            if row["robots_good_fetched_at"] and (old["robots_good_fetched_at"] is None
                                                  or row["robots_good_fetched_at"] > old["robots_good_fetched_at"]):
                for key in ROBOTS_GOOD:
                    old[key] = row[key]
    return merged


def read_host_file(path: StorePath, store: Store | None = None) -> pa.Table:
    """One hosts file in the current schema; columns added since it was written are null.

    ``store`` given: read through it (needed for S3); else ``path`` is a local file."""
    table = store.read_table(path) if store is not None else read_parquet_checked(path)
    for name in schema.HOSTS.names:
        if name not in table.column_names:
            table = table.append_column(schema.HOSTS.field(name), pa.nulls(table.num_rows, schema.HOSTS.field(name).type))
    return table.select(schema.HOSTS.names).cast(schema.HOSTS)


def load_host_state(store: Store, hosts: set[str], segment: str | None = None) -> dict[str, dict]:
    """State of the given hosts, from every source that may know them."""
    wanted = pa.array(sorted(hosts), pa.string())
    tables = []
    for path in host_state_files(store, include_segment=segment):
        table = read_host_file(path, store)
        tables.append(table.filter(pc.is_in(table["host"], value_set=wanted)))
    return merge_host_rows(tables)


def read_all_host_files(paths: list[StorePath], store: Store | None = None) -> pa.Table:
    tables = [read_host_file(p, store) for p in paths]
    return pa.concat_tables(tables) if tables else schema.HOSTS.empty_table()
