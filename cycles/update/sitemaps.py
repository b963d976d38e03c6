"""Update's merge of the URLs the hosts' sitemaps listed (``segments/<id>/sitemaps/``,
``schema.SITEMAP_URLS``; read by cycles/tables/sitemaps.py).

- **A URL source.** Each listed URL joins the segment's outlinks (followed, at depth
  :data:`SITEMAP_DEPTH`), so it is normalised, filtered, trap-capped and anti-joined exactly
  as a link is: the crawl DB stays the one seen-set and every drop is counted by reason.
- **A freshness signal.** A ``lastmod`` newer than a fetched URL's last fetch makes it due
  now (``sitemap/lastmod_due``); generate's per-host caps and fetch's delays still apply,
  so it only moves the URL up, never around politeness. A sitemap is re-read at most once
  per ``fetch.robots_cache_s`` and a future lastmod is ignored, so a site cannot keep its
  URLs due by lying.
- **Hints for new URLs.** ``changefreq`` sets a new URL's first refetch interval
  (cycles/tables/sitemaps.py ``CHANGEFREQ_S``, within ``[update.min_interval_s,
  update.max_interval_s]``); ``priority`` multiplies its score by ``0.5 + priority`` (the
  default 0.5 leaves it as it is). Only when the URL is added: a re-read never compounds.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.config import Config
from cycles.tables.sitemaps import CHANGEFREQ_S
from cycles.storage.store import Store, StorePath
from cycles.urls import Normalizer, UrlFilter, host_hashes, url_host
from cycles.storage.sql import literal

SITEMAP_DEPTH = 1
"""Depth given to a URL first found in a sitemap: one hop from the host's robots.txt."""

HINTS = pa.schema([("url", pa.string()), ("host", pa.string()), ("host_hash", pa.uint64()),
                   ("lastmod", schema.TS), ("changefreq_s", pa.int64()), ("priority", pa.float32())])
"""Per normalised URL: the newest lastmod, the shortest changefreq, the highest priority."""


def sitemap_files(store: Store, seg_dir: StorePath) -> list[StorePath]:
    """The segment's sitemap files of committed chunks (a chunk's fetched file is its commit)."""
    committed = {path.name for path in seg.output_files(store, seg_dir, seg.FETCHED)}
    return [path for path in store.list(seg_dir / seg.SITEMAPS, seg.PART_GLOB) if path.name in committed]


def sitemap_links(con, store: Store, seg_dir: StorePath, counters: Counter) -> pa.Table:
    """The listed URLs as outlinks (url, nofollow, depth) to add to the segment's links."""
    files = sitemap_files(store, seg_dir)
    if not files:
        return pa.table({"url": pa.array([], pa.string()), "nofollow": pa.array([], pa.bool_()),
                         "depth": pa.array([], pa.int16())})
    links = con.sql(f"""SELECT DISTINCT url, false AS nofollow, {SITEMAP_DEPTH}::SMALLINT AS depth
                        FROM {store.duckdb_source(con, files)}""").to_arrow_table()
    counters["sitemap/listed"] += links.num_rows
    return links


def sitemap_hints(con, store: Store, seg_dir: StorePath, config: Config) -> pa.Table:
    """The listed URLs that carry a lastmod, changefreq or priority, normalised (:data:`HINTS`)."""
    return hints_of_files(con, store, sitemap_files(store, seg_dir), config)


def hints_of_files(con, store: Store, files: list[StorePath], config: Config) -> pa.Table:
    """:func:`sitemap_hints` of some sitemap files (update's routing reads a group of chunks'
    files, cycles/update/route.py; the bucket task merges a URL's hints of every group the
    same way: newest lastmod, shortest changefreq, highest priority)."""
    if not files:
        return HINTS.empty_table()
    freq = "CASE changefreq " + " ".join(f"WHEN {literal(k)} THEN {v}" for k, v in CHANGEFREQ_S.items()) + " END"
    raw = con.sql(f"""SELECT url, max(lastmod) AS lastmod, min({freq}) AS changefreq_s, max(priority) AS priority
                      FROM {store.duckdb_source(con, files)}
                      WHERE lastmod IS NOT NULL OR changefreq IS NOT NULL OR priority IS NOT NULL
                      GROUP BY url""").to_arrow_table()
    normalizer, url_filter = Normalizer(config.urls), UrlFilter(config.urls)
    keep, urls = [], []
    for i, url in enumerate(raw.column("url").to_pylist()):
        norm = normalizer.normalize(url)
        if norm is not None and not url_filter.reason(norm):
            keep.append(i)
            urls.append(norm)
    raw = raw.take(pa.array(keep, pa.int64()))
    hosts = [url_host(u) for u in urls]
    table = pa.table({"url": pa.array(urls, pa.string()), "host": pa.array(hosts, pa.string()),
                      "host_hash": host_hashes(hosts), "lastmod": raw.column("lastmod"),
                      "changefreq_s": raw.column("changefreq_s"), "priority": raw.column("priority")}, schema=HINTS)
    con.register("sitemap_hints_raw", table)
    # Two spellings of one URL: one row, the strongest hints.
    merged = con.sql("""SELECT url, any_value(host) AS host, any_value(host_hash) AS host_hash, max(lastmod) AS lastmod,
                               min(changefreq_s) AS changefreq_s, max(priority) AS priority
                        FROM sitemap_hints_raw GROUP BY url""").to_arrow_table()
    con.unregister("sitemap_hints_raw")
    return merged.cast(HINTS)


def _lastmod_due(row: str, hints: str) -> str:
    """A fetched URL, not fetched in this segment, whose sitemap lastmod is newer than its last fetch."""
    return (f"({hints}.lastmod IS NOT NULL AND {row}.last_fetched IS NOT NULL AND {hints}.lastmod > {row}.last_fetched "
            f"AND {row}.status IN ({literal(schema.DbStatus.FETCHED)}, {literal(schema.DbStatus.NOT_MODIFIED)}))")


def hinted_sql(sql: str, hints: str, config: Config) -> str:
    """``sql`` (a bucket's new rows, with ``f_outcome``) with the sitemap hints applied (module doc)."""
    u = config.update
    new = "(x.first_seen = $now AND x.last_fetched IS NULL)"
    return f"""
        SELECT x.* REPLACE (
            CASE WHEN x.f_outcome IS NULL AND {_lastmod_due('x', 's')} THEN least(x.next_fetch, $now)
                 ELSE x.next_fetch END AS next_fetch,
            CASE WHEN {new} AND s.changefreq_s IS NOT NULL
                 THEN greatest({int(u.min_interval_s)}, least({int(u.max_interval_s)}, s.changefreq_s))::INTEGER
                 ELSE x.fetch_interval_s END AS fetch_interval_s,
            CASE WHEN {new} AND s.priority IS NOT NULL THEN (x.score * (0.5 + s.priority))::FLOAT
                 ELSE x.score END AS score)
        FROM ({sql}) x LEFT JOIN {hints} s ON x.url = s.url"""


def lastmod_due_count(con, old: str, hints: str, fetched: str, now) -> int:
    """How many known URLs the hints make due now (``sitemap/lastmod_due``)."""
    return con.execute(f"""SELECT count(*) FROM {old} o JOIN {hints} s ON o.url = s.url
                           WHERE o.url NOT IN (SELECT url FROM {fetched}) AND {_lastmod_due('o', 's')}
                           AND o.next_fetch > $now""", {"now": now}).fetchall()[0][0]
