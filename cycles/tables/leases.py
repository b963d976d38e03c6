"""Leases: which URLs are handed to a segment and must not be generated again.

A URL is leased while it sits in the fetch list of a segment that has not been updated
yet and whose lease (``lease_until`` in the segment's generated marker, generate
time + ``generate.lease_s``) has not run out (cycles/tables/segment.py). Update ends the lease by
writing the segment's updated marker, ``crawl abandon`` by an abandoned one; a segment
that is never updated lets its URLs become due again when the lease runs out (and the
next generate abandons it: applied after its URLs were leased again, it would put older
results over newer rows).

The fetch lists *are* the lease table: generate writes them anyway, so leasing costs
nothing, and the crawl DB is not rewritten just to mark the chosen rows (that rewrite was
two thirds of generate's time at 10 M URLs: scripts/bench_scale.py).

A segment's **fetched rows** lease too, until its update: discovery inside the fetch
(cycles/fetch/discovery.py) and redirects fetch URLs that are in no fetch list. ``crawl run``
generates the next segment before the last one is updated; an update of an earlier segment
may meanwhile have added such a URL as new and due (found there, fetched here), and the next
segment listed and fetched it again (bench_crawl: 39 of 5,364 requests were such repeats).
The fetched rows of a segment being fetched are read as far as they are committed: a
generate that runs beside a fetch leaves that fetch's hosts out whole (``in_flight_files``).
"""

from __future__ import annotations

import datetime as dt
import logging

import pyarrow as pa
import pyarrow.compute as pc

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.errors import StoreError
from cycles.storage.store import Store, StorePath

log = logging.getLogger(__name__)


def live_segments(store: Store, now: dt.datetime, states) -> list[tuple[str, seg.State]]:
    """(segment, state) of every segment in one of ``states`` whose lease is live at ``now``
    (updated: released; abandoned: given up; incomplete: nothing leased)."""
    live = []
    for segment, state in seg.states(store):
        if state not in states:
            continue
        marker = seg.read_marker(store, segment, seg.Generated)
        if marker is not None and marker.lease_until and not marker.lease_expired(now):
            live.append((segment, state))
    return live


def live_lease_files(store: Store, now: dt.datetime) -> list[StorePath]:
    """The fetch list files of every segment whose lease is live at ``now``, and the fetched
    rows committed so far by those being fetched or fetched (module doc)."""
    files: list[StorePath] = []
    for segment, state in live_segments(store, now, seg.PENDING):
        files += seg.files(store, segment, seg.FETCHLIST)
        if state != seg.State.GENERATED:
            files += seg.files(store, segment, seg.FETCHED)
    return files


def fetched_files(files: list[StorePath]) -> list[StorePath]:
    """The fetched-row files among :func:`live_lease_files`: URLs fetched by a segment not
    updated yet, which the crawl DB may not hold (the seen-set adds them,
    cycles/tables/assign.py ``write_seen_set``)."""
    return [f for f in files if f.parent.name == seg.FETCHED]


IN_FLIGHT = (seg.State.GENERATED, seg.State.FETCHING)
"""States of a segment whose hosts are (or are about to be) fetched."""


def in_flight_files(store: Store, now: dt.datetime) -> list[StorePath]:
    """The fetch list files of every live segment not fetched yet (generated or fetching):
    ``crawl run`` leases their *hosts*, not only their URLs, while it generates the next
    segment (cycles/commands/run.py), so no host is in two segments being fetched."""
    return [f for segment, _ in live_segments(store, now, IN_FLIGHT) for f in seg.files(store, segment, seg.FETCHLIST)]


def leftover_files(store: Store, now: dt.datetime) -> list[StorePath]:
    """What the live segments fetched and not updated yet queued by discovery and did not
    reach (``segment.LEFTOVER``): URLs the crawl DB learns only at their update, which a
    generate before it may list (cycles/commands/run.py ``next_segment``). Listed, they are leased
    by that fetch list like any other URL, also once the update adds them."""
    return [f for segment, _ in live_segments(store, now, (seg.State.FETCHED,))
            for f in seg.files(store, segment, seg.LEFTOVER) if readable_leftover(store, f)]


def readable_leftover(store: Store, path: StorePath) -> bool:
    """Whether a leftover file reads whole with its columns (a few KB). A damaged one is
    only a head start lost: its URLs are outlinks too, listed after the update. Skipped
    with a warning rather than failing the generate."""
    try:
        store.read_table(path, schema.LEFTOVER)
    except StoreError as exc:
        log.warning("generate: leftover file skipped (its URLs wait for their segment's update): %s", exc)
        return False
    return True


def continuing_lease(store: Store, segment: str, files: list[StorePath]) -> list[StorePath]:
    """:func:`in_flight_files` without ``segment``'s, for a segment generated while
    ``segment`` is fetched and fetched right after it (``crawl run``, cycles/commands/run.py): its
    hosts may be listed again, so a busy host goes on at once in the next segment. The next
    fetch starts when this one has ended and reads their spacing from its ``hosts/`` output;
    a URL listed there that this one fetched meanwhile by discovery is dropped by that
    fetch (:func:`fetched_by_continued`)."""
    own = set(seg.files(store, segment, seg.FETCHLIST))
    return [f for f in files if f not in own]


def fetched_by_continued(store: Store, segment: str, hosts: set[str]) -> list[tuple[str, str]]:
    """(url, host) of the rows fetched for ``hosts`` by the segment ``segment`` continues
    (generated while that one was fetched: the ``continues`` of its generated marker), read
    when ``segment``'s fetch starts — that one has ended by then (one fetch at a time), and
    may even be updated. Its generate knew only what that fetch had committed then; what its
    discovery fetched afterwards may be in this fetch list and is not in the seen-set:
    neither is fetched again (cycles/fetch/worker.py; tests/test_run_discovery.py)."""
    marker = seg.read_marker(store, segment, seg.Generated)
    if not hosts or marker is None or not marker.continues:
        return []
    wanted = pa.array(sorted(hosts), pa.string())
    rows: list[tuple[str, str]] = []
    for path in seg.files(store, marker.continues, seg.FETCHED):
        table = store.read_table(path, columns=["url", "host"])
        table = table.filter(pc.is_in(table["host"], value_set=wanted))
        rows += zip(table["url"].to_pylist(), table["host"].to_pylist())
    return rows


def leased_hosts_sql(store: Store, con, files: list[StorePath]) -> str:
    """SQL table expression (one column, ``host``) of the hosts in these fetch list files
    (:func:`in_flight_files`)."""
    if not files:
        return "(SELECT NULL::VARCHAR AS host WHERE false)"
    return f"(SELECT DISTINCT host FROM {store.duckdb_source(con, files)})"


def leased_urls_sql(store: Store, con, files: list[StorePath]) -> str:
    """SQL table expression (one column, ``url``, each URL once) of the URLs in these fetch
    list and fetched files (:func:`live_lease_files`)."""
    fetched = fetched_files(files)
    kinds = [[f for f in files if f.parent.name != seg.FETCHED], fetched]
    parts = [f"SELECT url FROM {store.duckdb_source(con, group)}" for group in kinds if group]
    if not parts:
        return "(SELECT NULL::VARCHAR AS url WHERE false)"
    return f"({' UNION '.join(parts)})"
