"""The host DB: per-host state (last request time, robots.txt) merged from each segment.

Update folds a segment's ``hosts/`` output (cycles/fetch/hoststate.py writes it) into a new
host DB version, newest answer per column; fetch reads it back at the start of a cycle.
"""

from __future__ import annotations

from cycles import schema
from cycles.config import Config
from cycles.crawldb import connect
from cycles.fetch.hoststate import read_all_host_files
from cycles.store import Manifest, Store, utcnow


def merge_hostdb(store: Store, config: Config, segment: str) -> int:
    """Fold the segment's host state into a new host DB version; returns hosts held."""
    manifest = store.manifest("hostdb")
    files = store.version_files("hostdb", manifest) if manifest else []
    files += store.list(store.segment_dir(segment) / "hosts", "part-*.parquet")
    table = read_all_host_files(files, store)
    con = connect(store, config)
    con.register("hosts", table)
    # arg_max_null, not arg_max: arg_max skips NULL values, so a newer network error
    # (robots_status NULL) or 4xx (robots_body NULL) would take the older row's value.
    merged = con.sql("""
        SELECT host, max(last_request_end) AS last_request_end,
               arg_max_null(robots_status, robots_fetched_at) AS robots_status,
               max(robots_fetched_at) AS robots_fetched_at,
               arg_max_null(robots_body, robots_fetched_at) AS robots_body,
               arg_max_null(robots_etag, robots_fetched_at) AS robots_etag,
               arg_max_null(robots_last_modified, robots_fetched_at) AS robots_last_modified,
               arg_max(crawl_delay_s, coalesce(robots_fetched_at, last_request_end)) AS crawl_delay_s,
               arg_max_null(robots_good_status, robots_good_fetched_at) AS robots_good_status,
               max(robots_good_fetched_at) AS robots_good_fetched_at,
               arg_max_null(robots_good_body, robots_good_fetched_at) AS robots_good_body,
               arg_max_null(robots_errors_since, robots_fetched_at) AS robots_errors_since
        FROM hosts GROUP BY host ORDER BY host""").to_arrow_table()
    version, folder = store.new_version_dir("hostdb")
    store.write_table(folder / "hosts.parquet", merged, schema.HOSTS)
    store.install("hostdb", Manifest(version=version, buckets=1, schema_version=schema.SCHEMA_VERSION,
                                     written_at=utcnow().isoformat(), written_by="update"), keep=config.db.keep_versions)
    return merged.num_rows
