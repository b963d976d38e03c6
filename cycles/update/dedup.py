"""One page, one copy: exact and near-duplicate detection for the pages of a segment.

Run by update before the crawl DB is rewritten; returns the URLs to mark.

**Exact duplicates** share a ``content_hash`` (the normalised text). Each group of URLs
with the same hash, among the pages this segment fetched and the crawl DB's stored pages,
has one canonical URL — highest score, then first seen, then shortest URL, then the URL —
and every other member becomes ``duplicate`` with ``duplicate_of`` pointing at it. Only
groups touched by the segment are looked at, so the cost is one scan of two columns of
the crawl DB, linear in its size.

**Near-duplicates** have SimHashes within ``update.simhash_max_distance`` bits. Comparing
every pair is quadratic; instead (Manku et al., WWW 2007) the 64 bits are cut into
``update.simhash_blocks`` blocks: two fingerprints within k bits differ in at most k
blocks, so they agree exactly on some ``blocks - k`` of them. For every such combination
of blocks we join the segment's pages with the stored pages on the masked fingerprint
(a ~32-bit key for 6 blocks and k = 3), and check the distance of the candidates only.
A page fetched now that is near another, better page becomes ``near_duplicate`` of it;
stored pages are not demoted by a near match (a near match is weaker evidence).

**Hosts**: a host whose pages in the segment are mostly duplicates is reported (its
unfetched URLs lose priority in update), and a host most of whose pages are exact copies
of one other host's pages is reported as that host's mirror.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from cycles.config import Config

CANONICAL_ORDER = "score DESC, first_seen ASC, length(url) ASC, url ASC"
"""Which member of a duplicate group is the canonical one."""


@dataclass
class DedupResult:
    marks: pa.Table
    """(url, canonical, kind) for every URL to mark; kind is 'duplicate' or 'near_duplicate'."""
    low_priority_hosts: list[str] = field(default_factory=list)
    mirrors: dict[str, str] = field(default_factory=dict)
    """mirror host -> the host it copies."""


def block_masks(blocks: int, distance: int) -> list[int]:
    """One 64-bit mask per combination of ``blocks - distance`` blocks."""
    edges = [round(i * 64 / blocks) for i in range(blocks + 1)]
    block_bits = [((1 << (edges[i + 1] - edges[i])) - 1) << edges[i] for i in range(blocks)]
    keep = max(1, blocks - distance)
    return [sum(combo) for combo in itertools.combinations(block_bits, keep)]


def find_duplicates(con: duckdb.DuckDBPyConnection, db_source: str, pages: pa.Table,
                    config: Config, counters: Counter) -> DedupResult:
    """``pages``: this segment's stored pages (url, host, content_hash, simhash, text_chars).

    ``db_source`` is the SQL source of the whole (old) crawl DB.
    """
    u = config.update
    con.register("seg_pages", pages)
    # Stored pages of the crawl DB that could be copies (their last fetch stored content),
    # with the segment's own URLs taking their new fingerprints.
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE known_pages AS
        SELECT db.url, db.host, coalesce(p.content_hash, db.content_hash) AS content_hash,
               coalesce(p.simhash, db.simhash) AS simhash, db.score, db.first_seen,
               p.url IS NOT NULL AS in_segment, coalesce(p.text_chars, {u.simhash_min_chars}) AS text_chars
        FROM {db_source} db LEFT JOIN seg_pages p ON db.url = p.url
        WHERE p.url IS NOT NULL
           OR (db.status IN ('fetched', 'not_modified', 'duplicate', 'near_duplicate') AND db.content_hash IS NOT NULL)""")
    exact = con.sql(f"""
        WITH touched AS (SELECT DISTINCT content_hash FROM known_pages WHERE in_segment AND content_hash IS NOT NULL),
        groups AS (
            SELECT k.*, first_value(url) OVER (PARTITION BY k.content_hash ORDER BY {CANONICAL_ORDER}) AS canonical
            FROM known_pages k SEMI JOIN touched t ON k.content_hash = t.content_hash)
        SELECT url, host, canonical, 'duplicate' AS kind FROM groups WHERE url <> canonical""").to_arrow_table()
    counters["dedup/exact"] += exact.num_rows

    con.register("exact_marks", exact)
    masks = block_masks(u.simhash_blocks, u.simhash_max_distance)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE near_cand AS
        SELECT url, host, simhash, score, first_seen, in_segment FROM known_pages
        WHERE simhash IS NOT NULL AND simhash <> 0 AND text_chars >= {u.simhash_min_chars}
          AND url NOT IN (SELECT url FROM exact_marks)""")
    con.execute("CREATE OR REPLACE TEMP TABLE near_mine AS SELECT url, simhash FROM near_cand WHERE in_segment")
    # One small join per block mask: its hash table is built on the segment's pages and the
    # stored pages stream past it once. (A single join on (mask id, key) over 20 copies of
    # every stored page spilled tens of GB at 10 M URLs: scripts/bench_scale_parts.py.)
    per_mask = " UNION ALL ".join(f"""
            SELECT a.url, b.url AS other FROM near_mine a JOIN near_cand b
              ON (a.simhash & {m}::UBIGINT) = (b.simhash & {m}::UBIGINT) AND a.url <> b.url
            WHERE bit_count(xor(a.simhash, b.simhash)) <= {u.simhash_max_distance}""" for m in masks)
    near = con.sql(f"""
        WITH cand AS (SELECT * FROM near_cand),
        pairs AS (SELECT DISTINCT url, other FROM ({per_mask})),
        scored AS (
            SELECT p.url, p.other, m.host,
                   row_number() OVER (PARTITION BY p.url ORDER BY o.score DESC, o.first_seen, length(o.url), o.url) AS r
            FROM pairs p JOIN cand m ON m.url = p.url JOIN cand o ON o.url = p.other
            -- only the worse page of a pair is marked: the other is better by the canonical order
            WHERE (o.score > m.score) OR (o.score = m.score AND o.first_seen < m.first_seen)
               OR (o.score = m.score AND o.first_seen = m.first_seen AND length(o.url) < length(m.url))
               OR (o.score = m.score AND o.first_seen = m.first_seen AND length(o.url) = length(m.url) AND o.url < m.url))
        SELECT url, host, other AS canonical, 'near_duplicate' AS kind FROM scored WHERE r = 1""").to_arrow_table()
    counters["dedup/near"] += near.num_rows
    marks = pa.concat_tables([exact, near.cast(exact.schema)])

    con.register("marks", marks)
    per_host = con.sql(f"""
        SELECT p.host, count(*) AS pages, count(m.url) AS dups
        FROM seg_pages p LEFT JOIN marks m ON p.url = m.url
        GROUP BY p.host HAVING count(m.url) >= {u.dup_host_ratio} * count(*) AND count(m.url) > 0""").fetchall()
    low = sorted(host for host, _, _ in per_host)
    counters["dedup/low_priority_hosts"] += len(low)
    # Mirrors: host pairs sharing many exact copies, over the whole crawl DB (earlier marks)
    # and this segment's. Which page of a pair is canonical varies page by page, so pairs are
    # counted in both directions; the mirror is the host with fewer canonical pages of the pair.
    mirror_rows = con.sql(f"""
        WITH copies AS (
            SELECT host, regexp_extract(duplicate_of, '^[a-z]+://([^/:]+)', 1) AS of_host
            FROM {db_source} db
            WHERE status = 'duplicate' AND duplicate_of IS NOT NULL AND url NOT IN (SELECT url FROM seg_pages)
            UNION ALL
            SELECT m.host, k.host FROM marks m JOIN known_pages k ON k.url = m.canonical WHERE m.kind = 'duplicate'),
        directed AS (SELECT host, of_host, count(*) AS n FROM copies WHERE host <> of_host GROUP BY ALL),
        pairs AS (
            SELECT least(host, of_host) AS a, greatest(host, of_host) AS b,
                   sum(n) AS shared, sum(n) FILTER (WHERE host = least(host, of_host)) AS a_copies
            FROM directed GROUP BY ALL),
        sizes AS (SELECT host, count(*) AS pages FROM {db_source}
                  WHERE status IN ('fetched', 'not_modified', 'duplicate', 'near_duplicate') GROUP BY host)
        SELECT CASE WHEN coalesce(a_copies, 0) * 2 >= shared THEN a ELSE b END AS mirror,
               CASE WHEN coalesce(a_copies, 0) * 2 >= shared THEN b ELSE a END AS original
        FROM pairs JOIN sizes sa ON sa.host = pairs.a JOIN sizes sb ON sb.host = pairs.b
        WHERE shared >= {u.mirror_min_pages}
          AND shared >= {u.mirror_ratio} * least(sa.pages, sb.pages)""").fetchall()
    mirrors = dict(mirror_rows)
    counters["dedup/mirror_hosts"] += len(mirrors)
    return DedupResult(marks.select(["url", "canonical", "kind"]), low, mirrors)
