"""Per-host state that outlives a cycle: when we last asked a host, and its robots.txt.

The host DB (``hostdb/``, schema.HOSTS) is merged by update from each segment's
``hosts/`` output. A fetch also reads the ``hosts/`` output of segments fetched but not
yet updated, so two fetches in a row without an update in between still keep a host's
spacing.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cycles import schema
from cycles.store import Store, read_parquet_checked


def host_state_files(store: Store, include_segment: str | None = None) -> list[Path]:
    """Host DB file plus the hosts outputs of segments not yet merged by update."""
    files: list[Path] = []
    manifest = store.manifest("hostdb")
    if manifest is not None:
        files += store.version_files("hostdb", manifest)
    for segment in store.segments():
        state = store.segment_state(segment)
        if state in ("fetched", "generated") or segment == include_segment:
            files += sorted((store.segment_dir(segment) / "hosts").glob("part-*.parquet"))
    return files


def merge_host_rows(tables: list[pa.Table]) -> dict[str, dict]:
    """Latest knowledge per host: the latest request end, and the newest robots.txt."""
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
                for key in ("robots_status", "robots_fetched_at", "robots_body", "crawl_delay_s"):
                    old[key] = row[key]
    return merged


def load_host_state(store: Store, hosts: set[str], segment: str | None = None) -> dict[str, dict]:
    """State of the given hosts, from every source that may know them."""
    wanted = pa.array(sorted(hosts), pa.string())
    tables = []
    for path in host_state_files(store, include_segment=segment):
        table = read_parquet_checked(path, schema.HOSTS)
        tables.append(table.filter(pc.is_in(table["host"], value_set=wanted)))
    return merge_host_rows(tables)


def read_all_host_files(paths: list[Path]) -> pa.Table:
    tables = [pq.read_table(p).select(schema.HOSTS.names).cast(schema.HOSTS) for p in paths]
    return pa.concat_tables(tables) if tables else schema.HOSTS.empty_table()
