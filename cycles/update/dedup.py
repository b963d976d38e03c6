"""One page, one copy: exact and near-duplicate detection for the pages of a segment.

Run by update before the crawl DB is rewritten; returns the URLs to mark.

**Exact duplicates** share a ``content_hash`` (the normalised text). Each group of URLs
with the same hash, among the pages this segment fetched and the crawl DB's stored pages,
has one canonical URL — highest score, then first seen, then shortest URL, then the URL —
and every other member becomes ``duplicate`` with ``duplicate_of`` pointing at it. Only
groups touched by the segment are looked at, so the cost is one scan of two columns of
the crawl DB, linear in its size.

**Near-duplicates** have near-duplicate fingerprints (the ``simhash`` column: a 1-bit
MinHash since GitHub issue #13 section 3, cycles.fingerprint.minhash64; a SimHash before,
searched the same way) within ``update.simhash_max_distance`` bits. Comparing
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
from cycles.schema import DbStatus

STORED_STATUSES = f"('{DbStatus.FETCHED}', '{DbStatus.NOT_MODIFIED}', '{DbStatus.DUPLICATE}', '{DbStatus.NEAR_DUPLICATE}')"
"""SQL list of the statuses whose row holds the fingerprints of a stored page (its copies too)."""

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
    # The segment's pages with their crawl DB facts. The crawl DB's other stored pages are
    # never materialised: at 100 M URLs they are ~80 M rows, and copying them (as this
    # did once) made update's largest table.
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE seg AS
        SELECT p.url, p.host, p.content_hash, p.simhash, p.text_chars, db.score, db.first_seen
        FROM seg_pages p JOIN {db_source} db USING (url)""")
    # Each scan of the crawl DB filters on its cheap columns first; only the few rows left
    # are checked against the segment's URLs.
    stored = f"""{db_source} WHERE status IN {STORED_STATUSES}
                  AND content_hash IS NOT NULL"""
    # Exact copies have equal fingerprints too, so stored candidates are found by a join on
    # the 64-bit SimHash and only then compared by content hash: probing 80 M 32-character
    # strings took a minute at 100 M URLs, the integers a few seconds.
    con.execute(f"""CREATE OR REPLACE TEMP TABLE exact_stored AS
        SELECT url, host, content_hash, score, first_seen FROM {stored}
           AND simhash IN (SELECT simhash FROM seg WHERE simhash IS NOT NULL)""")
    exact = con.sql(f"""
        WITH stored_copies AS (
            SELECT * FROM exact_stored
            WHERE content_hash IN (SELECT content_hash FROM seg) AND url NOT IN (SELECT url FROM seg)),
        shared AS (
            SELECT content_hash FROM seg WHERE content_hash IS NOT NULL GROUP BY content_hash HAVING count(*) > 1
            UNION SELECT content_hash FROM stored_copies),
        members AS (
            SELECT url, host, content_hash, score, first_seen FROM seg WHERE content_hash IN (SELECT * FROM shared)
            UNION ALL SELECT * FROM stored_copies),
        groups AS (
            SELECT *, first_value(url) OVER (PARTITION BY content_hash ORDER BY {CANONICAL_ORDER}) AS canonical
            FROM members)
        SELECT url, host, canonical, '{DbStatus.DUPLICATE}' AS kind FROM groups WHERE url <> canonical""").to_arrow_table()
    counters["dedup/exact"] += exact.num_rows

    con.register("exact_marks", exact)
    near = find_near_duplicates(con, stored, u)
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
            WHERE status = '{DbStatus.DUPLICATE}' AND duplicate_of IS NOT NULL AND url NOT IN (SELECT url FROM seg_pages)
            UNION ALL
            SELECT host, regexp_extract(canonical, '^[a-z]+://([^/:]+)', 1) FROM marks WHERE kind = 'duplicate'),
        directed AS (SELECT host, of_host, count(*) AS n FROM copies WHERE host <> of_host GROUP BY ALL),
        pairs AS (
            SELECT least(host, of_host) AS a, greatest(host, of_host) AS b,
                   sum(n) AS shared, sum(n) FILTER (WHERE host = least(host, of_host)) AS a_copies
            FROM directed GROUP BY ALL),
        sizes AS (SELECT host, count(*) AS pages FROM {db_source}
                  WHERE status IN {STORED_STATUSES}
                    AND host IN (SELECT a FROM pairs UNION SELECT b FROM pairs) GROUP BY host)
        SELECT CASE WHEN coalesce(a_copies, 0) * 2 >= shared THEN a ELSE b END AS mirror,
               CASE WHEN coalesce(a_copies, 0) * 2 >= shared THEN b ELSE a END AS original
        FROM pairs JOIN sizes sa ON sa.host = pairs.a JOIN sizes sb ON sb.host = pairs.b
        WHERE shared >= {u.mirror_min_pages}
          AND shared >= {u.mirror_ratio} * least(sa.pages, sb.pages)""").fetchall()
    mirrors = dict(mirror_rows)
    counters["dedup/mirror_hosts"] += len(mirrors)
    for table in ("seg", "exact_stored", "near_mine", "near_hashes", "near_cand", "near_pairs"):
        con.execute(f"DROP TABLE IF EXISTS {table}")  # the memory goes to the next steps
    return DedupResult(marks.select(["url", "canonical", "kind"]), low, mirrors)


def find_near_duplicates(con: duckdb.DuckDBPyConnection, stored: str, u) -> pa.Table:
    """(url, host, canonical, kind) for the segment's pages (table ``seg``) that are near
    a better page; ``stored`` is ``<crawl DB> WHERE <it stored content>``, to which more
    conditions are joined with AND.

    Two passes, so that only fingerprints are carried through the joins: the block-mask
    joins pair each page of the segment with the *fingerprints* within the distance, then
    the few pages holding those fingerprints are looked up to pick the best one.
    """
    con.execute(f"""CREATE OR REPLACE TEMP TABLE near_mine AS
        SELECT url, simhash FROM seg WHERE simhash IS NOT NULL AND simhash <> 0 AND text_chars >= {u.simhash_min_chars}
          AND url NOT IN (SELECT url FROM exact_marks)""")
    # The stored fingerprints without their URLs (no URL column is read); the segment's own
    # carry theirs, so that a page does not pair with itself. A segment page's previous
    # fingerprint or an exact copy's may still pair here: they are dropped below, where the
    # holders of the paired fingerprints are looked up.
    con.execute(f"""CREATE OR REPLACE TEMP TABLE near_hashes AS
        SELECT simhash, url FROM near_mine
        UNION ALL SELECT simhash, NULL AS url FROM {stored} AND simhash IS NOT NULL AND simhash <> 0""")
    # One join per block mask, one at a time: each hash table is built on the segment's
    # pages and the stored fingerprints stream past it. (All 20 in one UNION ALL built
    # them side by side and spilled: 115 s instead of ~40 s at 100 M URLs.)
    con.execute("CREATE OR REPLACE TEMP TABLE near_cand (url VARCHAR, other_hash UBIGINT)")
    for mask in block_masks(u.simhash_blocks, u.simhash_max_distance):
        con.execute(f"""INSERT INTO near_cand
            SELECT a.url, b.simhash FROM near_mine a JOIN near_hashes b
              ON (a.simhash & {mask}::UBIGINT) = (b.simhash & {mask}::UBIGINT)
            WHERE bit_count(xor(a.simhash, b.simhash)) <= {u.simhash_max_distance}
              AND b.url IS DISTINCT FROM a.url""")
    con.execute("CREATE OR REPLACE TEMP TABLE near_pairs AS SELECT DISTINCT url, other_hash FROM near_cand")
    return con.sql(f"""
        WITH holders AS (
            SELECT url, simhash, score, first_seen FROM near_mine JOIN seg USING (url, simhash)
            UNION ALL
            SELECT * FROM (SELECT url, simhash, score, first_seen FROM {stored}
                             AND simhash IN (SELECT other_hash FROM near_pairs))
            WHERE url NOT IN (SELECT url FROM seg) AND url NOT IN (SELECT url FROM exact_marks)),
        scored AS (
            SELECT p.url, m.host, o.url AS other,
                   row_number() OVER (PARTITION BY p.url ORDER BY o.score DESC, o.first_seen, length(o.url), o.url) AS r
            FROM near_pairs p JOIN seg m ON m.url = p.url JOIN holders o ON o.simhash = p.other_hash AND o.url <> p.url
            -- only the worse page of a pair is marked: the other is better by the canonical order
            WHERE (o.score > m.score) OR (o.score = m.score AND o.first_seen < m.first_seen)
               OR (o.score = m.score AND o.first_seen = m.first_seen AND length(o.url) < length(m.url))
               OR (o.score = m.score AND o.first_seen = m.first_seen AND length(o.url) = length(m.url) AND o.url < m.url))
        SELECT url, host, other AS canonical, '{DbStatus.NEAR_DUPLICATE}' AS kind FROM scored WHERE r = 1""").to_arrow_table()
