"""Helpers of the fetch tests (no tests here): hand-made segments, results, and the
politeness check every fetch test runs on the server's request log.

A fetch test writes its own fetch list (:func:`make_segment`) instead of running generate:
the URLs, their order and their validators are then exactly what the test says, and the
result is judged by what the test web's server saw.
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pyarrow.parquet as pq

from cycles.tables.segment import write_stage_marker
from cycles.tables import schema
from cycles.fetch.fetch import fetch_segment
from cycles.storage.store import Store, new_id, utcnow
from cycles.urls import host_hash, url_host
from tests.conftest import config_for

CLOCK_SLACK_S = 0.005
"""Two processes on one machine reading time.time(): allow this much disagreement."""


def fast_config(web, **fetch):
    """The test config with the short timeouts a fetch test wants."""
    config = config_for(web, **fetch)
    config.fetch.processes = fetch.get("processes", 1)
    config.fetch.connect_timeout_s = fetch.get("connect_timeout_s", 2.0)
    config.fetch.progress_s = fetch.get("progress_s", 0.0)
    return config


def make_segment(store: Store, urls: list[str], partitions: int = 1, etags: dict | None = None) -> str:
    """A generated segment whose fetch list is ``urls``, in this order within each host."""
    segment = new_id()
    folder = store.segment_dir(segment, must_exist=False) / "fetchlist"
    rows = [{"url": u, "host": url_host(u), "host_hash": host_hash(url_host(u)), "score": 1.0 - i / 1e6,
             "depth": 1, "etag": (etags or {}).get(u), "last_modified": None} for i, u in enumerate(urls)]
    for part in range(partitions):
        mine = [r for r in rows if r["host_hash"] % partitions == part]
        store.write_table(folder / f"part-{part:05d}.parquet",
                          pa.Table.from_pylist(mine, schema=schema.FETCHLIST), schema.FETCHLIST)
    write_stage_marker(store, segment, "generated", {"segment": segment, "generated_at": utcnow().isoformat(),
                                              "urls": len(urls), "partitions": partitions})
    return segment


def fetch(store: Store, config, urls: list[str], **kw):
    segment = make_segment(store, urls, **kw)
    return segment, fetch_segment(store, config, segment)


def results(store: Store, segment: str) -> dict[str, dict]:
    """The segment's fetched rows by URL (fails if a URL has two)."""
    rows = pq.read_table(store.segment_dir(segment) / "fetched").to_pylist()
    out = {r["url"]: r for r in rows}
    assert len(out) == len(rows), "a URL has two fetched rows"
    return out


def host_requests(requests: list[dict], short: str) -> list[dict]:
    """Requests to one host (``odd`` or ``odd.web.test``), in order of arrival."""
    name = short if "." in short else f"{short}.web.test"
    return sorted((r for r in requests if r["host"] == name), key=lambda r: r["t_start"])


def paths(requests: list[dict], short: str) -> list[str]:
    return [r["path"] for r in host_requests(requests, short)]


def assert_polite(requests: list[dict], delay_s: float = 1.0, delays: dict[str, float] | None = None) -> int:
    """Per host: never two requests in flight, never less than the delay between the end of
    one response and the start of the next. Returns how many gaps were checked."""
    by_host = defaultdict(list)
    for r in requests:
        by_host[r["host"]].append(r)
    checked = 0
    for host, rows in by_host.items():
        rows.sort(key=lambda r: r["t_start"])
        need = (delays or {}).get(host, delay_s)
        for prev, nxt in zip(rows, rows[1:]):
            gap = nxt["t_start"] - prev["t_end"]
            assert gap >= need - CLOCK_SLACK_S, (host, prev["path"], nxt["path"], round(gap, 3))
            checked += 1
    return checked


def crawldb_rows(store: Store) -> dict[str, dict]:
    """The current crawl DB by URL."""


    from cycles.tables.crawldb import read_crawldb

    table = read_crawldb(store)  # bases and deltas merged: one row per URL
    return {r["url"]: r for r in table.to_pylist()}


def make_all_due(store: Store) -> None:
    """Every URL due now, as if time had passed (a new crawl DB version, as update makes)."""
    from cycles.config import Config
    from cycles.tables.crawldb import replace_crawldb

    with store.lock():
        replace_crawldb(store, Config(), lambda con, old, b: f"SELECT * REPLACE (now() - INTERVAL 1 SECOND AS next_fetch) FROM {old}",
                        who="test")
