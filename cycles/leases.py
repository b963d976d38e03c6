"""Leases: which URLs are handed to a segment and must not be generated again.

A URL is leased while it sits in the fetch list of a segment that has not been updated
yet and whose lease (``lease_until`` in the segment's ``_GENERATED`` marker, generate
time + ``generate.lease_s``) has not run out. Update ends the lease by writing the
segment's ``_UPDATED`` marker; a segment that is never updated lets its URLs become due
again when the lease runs out.

The fetch lists *are* the lease table: generate writes them anyway, so leasing costs
nothing, and the crawl DB is not rewritten just to mark the chosen rows (that rewrite was
two thirds of generate's time at 10 M URLs: scripts/bench_scale.py).
"""

from __future__ import annotations

import datetime as dt

from cycles.store import Store, StorePath


def live_lease_files(store: Store, now: dt.datetime) -> list[StorePath]:
    """The fetch list files of every segment whose lease is live at ``now``."""
    files: list[StorePath] = []
    for segment in store.segments():
        if store.segment_state(segment) not in ("generated", "fetched"):
            continue  # updated: released; incomplete: generate never finished, nothing leased
        marker = store.marker(segment, "generated") or {}
        lease_until = marker.get("lease_until")
        if lease_until and dt.datetime.fromisoformat(lease_until) > now:
            files += store.list(store.segment_dir(segment) / "fetchlist", "part-*.parquet")
    return files


def leased_urls_sql(store: Store, con, files: list[StorePath]) -> str:
    """SQL table expression (one column, ``url``) of the URLs in these fetch list files
    (:func:`live_lease_files`)."""
    if not files:
        return "(SELECT NULL::VARCHAR AS url WHERE false)"
    return f"(SELECT url FROM {store.duckdb_source(con, files)})"
