"""One page, one copy: exact and near-duplicate detection for the pages of a segment.

Run by update before the crawl DB is rewritten; returns the URLs to mark.

**Exact duplicates** share a ``content_hash`` (the normalised text). Each group of URLs
with the same hash, among *all* the pages this segment fetched (listed by generate, found
by discovery inside the fetch, redirect targets: whichever bucket their rows are or will
be in) and the crawl DB's stored pages, has one canonical URL by :data:`CANONICAL_ORDER`
(not on a known mirror, not a stored copy, earliest first fetched, shortest URL, URL),
and every other member becomes ``duplicate`` with ``duplicate_of`` pointing at it. Only
groups touched by the segment are looked at, so the cost is one scan of two columns of
the crawl DB, linear in its size (docs/dedup.md says why that scan stays).

**Near-duplicates** have near-duplicate fingerprints (the ``minhash`` column: a 1-bit
MinHash since GitHub issue #13 section 3, cycles.fingerprint.minhash64; a SimHash before,
searched the same way) within ``update.minhash_max_distance`` bits. Comparing
every pair is quadratic; instead (Manku et al., WWW 2007) the 64 bits are cut into
``update.minhash_blocks`` blocks: two fingerprints within k bits differ in at most k
blocks, so they agree exactly on some ``blocks - k`` of them. For every such combination
of blocks we join the segment's pages with the stored pages on the masked fingerprint
(a ~32-bit key for 6 blocks and k = 3), and check the distance of the candidates only.
A page fetched now that is near another page earlier in the canonical order becomes
``near_duplicate`` of it; stored pages are not demoted by a near match (a near match is
weaker evidence). Marks whose canonical is itself marked are followed to the page kept
(:func:`flatten_marks`).

**Variant parameters** (issue #26): a query parameter whose variants prove copies of the
URL without it on a host (``?print=1``, ``?view=N``) is learned for that host
(:func:`learn_variants`, state beside the crawl DB: :data:`STATE_FILE`); update then sets
its URLs aside and discovery inside the fetch leaves new ones alone.

**Hosts**: a host whose pages in the segment are mostly duplicates is reported (its
unfetched URLs lose priority in update), and a host most of whose pages are exact copies
of one other host's pages is reported as that host's mirror.

**Where it runs** (issue #11): the crawl DB is scanned by :func:`dedup_scan` tasks on
update's executor, each over a group of buckets (:func:`scan_groups`), which verify their
bucket files first and write what they matched (:data:`MATCH_KINDS`) under the segment's
``update/dedup/``; the coordinator then joins only the segment's pages with those matches
(:func:`merge_matches`), and asks :func:`count_host_pages` tasks, only in the buckets of a
possible mirror pair's hosts, for those hosts' stored pages. :func:`find_duplicates` runs
the same scan and merge over the whole crawl DB in one process (tools, tests).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from cycles.config import Config
from cycles.tables.crawldb import as_bucket_files, bucket_source_sql, buckets_source_sql, connect, verify_bucket_file
from cycles.executor import Executor
from cycles.fingerprint import content_hash
from cycles.tables.hostdb import host_buckets
from cycles.tables.schema import DbStatus
from cycles.storage.store import Store, StorePath
from cycles.tables.dedup_state import STATE_FILE, learned_by_host, read_state, write_state  # noqa: F401  (the state table)
from cycles.storage.sql import literal

STORED_STATUSES = "(" + ", ".join(literal(s) for s in (DbStatus.FETCHED, DbStatus.NOT_MODIFIED, DbStatus.DUPLICATE,
                                                        DbStatus.NEAR_DUPLICATE)) + ")"
"""SQL list of the statuses whose row holds the fingerprints of a stored page (its copies too)."""

CANONICAL_ORDER = "mirror ASC, copy ASC, first_fetched ASC NULLS LAST, length(url) ASC, url ASC"
"""Which member of a duplicate group is the canonical one (docs/dedup.md): a page on a host
known to mirror another comes last; then a page the crawl DB holds as a copy (its row is
``duplicate`` or ``near_duplicate``) after one it holds as an original, so that a stored
canonical stays canonical; then the earliest first fetched (a page first fetched in this
segment has none yet: all of them tie after every stored page, so the order in which one
segment's fetchers happened to reach them never matters); then the shortest URL; then the
URL. Score is left out: it moves with every cycle's link ranking and demotions, and a
canonical that moved would re-mark the group each time."""


@dataclass
class DedupResult:
    marks: pa.Table
    """(url, canonical, kind) for every URL to mark; kind is 'duplicate' or 'near_duplicate'."""
    low_priority_hosts: list[str] = field(default_factory=list)
    mirrors: dict[str, str] = field(default_factory=dict)
    """mirror host -> the host it copies."""
    per_host: dict[str, dict[str, int]] = field(default_factory=dict)
    """host → {"duplicate": n, "near_duplicate": n}: the marks of this update, by the marked page's host."""
    known_hashes: pa.Table | None = None
    """(url, content_hash): the crawl DB's stored content hash of each page of the segment it
    holds, for the pages feed (set by :func:`find_segment_duplicates`; None: not gathered)."""


EMPTY_HASH = content_hash("")
"""The content hash of a page without text: never an exact copy of another such page (two
image-only or script-only pages are not the same page because both have no text)."""


def per_host_counts(marks: pa.Table) -> dict[str, dict[str, int]]:
    """host → {kind: marks} of a marks table (url, host, canonical, kind)."""
    counts: dict[str, Counter] = {}
    for host, kind in zip(marks["host"].to_pylist(), marks["kind"].to_pylist()):
        counts.setdefault(host, Counter())[kind] += 1
    return {host: dict(sorted(c.items())) for host, c in sorted(counts.items())}


def block_masks(blocks: int, distance: int) -> list[int]:
    """One 64-bit mask per combination of ``blocks - distance`` blocks."""
    edges = [round(i * 64 / blocks) for i in range(blocks + 1)]
    block_bits = [((1 << (edges[i + 1] - edges[i])) - 1) << edges[i] for i in range(blocks)]
    keep = max(1, blocks - distance)
    return [sum(combo) for combo in itertools.combinations(block_bits, keep)]


def find_duplicates(con: duckdb.DuckDBPyConnection, db_source: str, pages: pa.Table,
                    config: Config, counters: Counter, known_mirrors: dict[str, str] | None = None) -> DedupResult:
    """``pages``: this segment's stored pages (url, host, content_hash, minhash, text_chars).

    ``db_source`` is the SQL source of the whole (old) crawl DB, scanned here in one
    process: for tools and tests. update runs the same scan bucket by bucket as tasks
    (:func:`find_segment_duplicates`); both then choose by :func:`merge_matches`.
    """
    con.register("seg_pages", pages)
    tables = match_stored(con, db_source, "seg_pages", config.update)
    sources = {kind: f"(SELECT * FROM {table})" for kind, table in tables.items()}
    try:
        return merge_matches(con, "seg_pages", sources, config, counters,
                             lambda hosts: stored_pages_per_host(con, db_source, hosts), known_mirrors)
    finally:
        for table in tables.values():
            con.execute(f"DROP TABLE IF EXISTS {table}")


MATCH_KINDS = ("seg", "exact", "near_pairs", "near_holders", "copies")
"""What a scan of crawl DB rows gives the segment's dedup (:func:`match_stored`), each a table:

- ``seg``: the segment's pages the rows hold, with their crawl DB facts (``first_fetched``
  for the canonical order, the stored content hash ``db_content_hash``, which the pages
  feed compares);
- ``exact``: stored pages (not of the segment) sharing a fingerprint and a content hash
  with a page of the segment: exact-copy candidates, with ``first_fetched`` and ``copy``
  (the row is a duplicate or near-duplicate already);
- ``near_pairs``: (url, other_hash) — a page of the segment and a stored fingerprint
  within ``update.minhash_max_distance`` bits; ``near_holders``: the stored pages holding
  those fingerprints;
- ``copies``: (host, of_host, n) — the rows' earlier exact copies (not of the segment's
  pages) by host pair, for the mirror search.

A page's row lives in one bucket, and a stored page that matches a page of the segment
matches it in its own bucket, so the union of the buckets' tables is what one scan of the
whole crawl DB gives; every segment-wide condition (which pages are in the crawl DB, the
exact marks before the near search) is applied after the union, in :func:`merge_matches`.
"""


def match_stored(con: duckdb.DuckDBPyConnection, db_source: str, pages: str, u) -> dict[str, str]:
    """Scan crawl DB rows ``db_source`` (a bucket, or the whole crawl DB) for the segment's
    pages ``pages`` (a table: url, host, content_hash, minhash, text_chars); returns kind →
    temp table (:data:`MATCH_KINDS`). Cost: two passes over the rows (the stored
    fingerprints alone, then the few rows any scan can match) plus one hash join per block
    mask with the segment's fingerprints on the build side.

    The near search runs first, on the stored fingerprints only (:func:`near_pairs`): it
    names the fingerprints whose holders are wanted. Then the rows any of the scans below
    can match (the segment's own URLs, stored pages holding one of the segment's
    fingerprints or a paired one, duplicates) are read once into ``m_db`` with the seven
    columns the scans use, and the scans read that small table: ``db_source`` merges a
    base with its deltas on read, and five scans of it ran that merge five times. Reading
    the seven columns of every stored page into ``m_db`` (a row in 1.3 of a bucket) cost
    half of a dedup task (docs/incremental.md, "Update's scans at 100 M")."""
    near_pairs(con, db_source, pages, u)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE m_db AS
        SELECT url, host, status, content_hash, minhash, first_fetched, duplicate_of FROM {db_source}
        WHERE (status IN {STORED_STATUSES} AND content_hash IS NOT NULL
               AND (minhash IN (SELECT minhash FROM {pages} WHERE minhash IS NOT NULL)
                    OR minhash IN (SELECT other_hash FROM m_near_pairs)))
           OR status = {literal(DbStatus.DUPLICATE)} OR url IN (SELECT url FROM {pages})""")
    # The pairs were found among every fingerprint of a stored status (the content hash
    # left unread: a column of 32-character strings); the stored rows' own are kept.
    con.execute(f"""DELETE FROM m_near_pairs WHERE other_hash NOT IN (SELECT minhash FROM {stored_sql('m_db')}
        AND minhash IS NOT NULL)""")
    matched_rows(con, "m_db", pages)
    con.execute("DROP TABLE m_db")
    return {kind: f"m_{kind}" for kind in MATCH_KINDS}


def near_pairs(con: duckdb.DuckDBPyConnection, db_source: str, pages: str, u) -> None:
    """``m_near_pairs`` (url, other_hash): the segment's candidates (before the exact marks
    are known: a superset, cut in merge_matches) against the fingerprints of the rows
    ``db_source`` of a stored status (a superset of :func:`stored_sql`'s: the caller cuts
    the pairs to those), one join per block mask, one at a time: each hash table is built
    on the segment's pages and the stored fingerprints stream past it (all 20 in one UNION
    ALL built them side by side and spilled: 115 s instead of ~40 s at 100 M URLs). Only
    fingerprints go through the joins (one column of the rows read); the few rows holding
    a paired one are read after (:func:`match_stored`)."""
    con.execute(f"""CREATE OR REPLACE TEMP TABLE m_mine AS
        SELECT url, minhash FROM {pages} WHERE minhash IS NOT NULL AND minhash <> 0
          AND text_chars >= ?""", [u.minhash_min_chars])
    con.execute(f"""CREATE OR REPLACE TEMP TABLE m_hashes AS
        SELECT minhash FROM {db_source} WHERE status IN {STORED_STATUSES} AND minhash <> 0""")
    con.execute("CREATE OR REPLACE TEMP TABLE m_cand (url VARCHAR, other_hash UBIGINT)")
    # No page of the segment to pair, or no stored fingerprint to pair it with (a first
    # crawl, a segment of errors): the joins would find nothing, and each is a statement.
    paired = con.execute("SELECT EXISTS (FROM m_mine) AND EXISTS (FROM m_hashes)").fetchone()[0]
    for mask in block_masks(u.minhash_blocks, u.minhash_max_distance) if paired else ():
        con.execute("""INSERT INTO m_cand
            SELECT a.url, b.minhash FROM m_mine a JOIN m_hashes b
              ON (a.minhash & $mask::UBIGINT) = (b.minhash & $mask::UBIGINT)
            WHERE bit_count(xor(a.minhash, b.minhash)) <= $distance""", {"mask": mask, "distance": u.minhash_max_distance})
    con.execute("CREATE OR REPLACE TEMP TABLE m_near_pairs AS SELECT DISTINCT url, other_hash FROM m_cand")
    for table in ("m_mine", "m_hashes", "m_cand"):
        con.execute(f"DROP TABLE {table}")


def matched_rows(con: duckdb.DuckDBPyConnection, db_source: str, pages: str) -> None:
    """``m_seg``, ``m_exact``, ``m_near_holders`` and ``m_copies`` (:data:`MATCH_KINDS`) from
    the rows ``db_source`` (``m_db``: every row they can match) and ``m_near_pairs``."""
    stored = stored_sql(db_source)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE m_seg AS
        SELECT p.url, db.first_fetched, db.content_hash AS db_content_hash
        FROM {pages} p JOIN {db_source} db USING (url)""")
    # Exact copies have equal fingerprints too, so stored candidates are found by the
    # 64-bit SimHash and only then compared by content hash: probing 80 M 32-character
    # strings took a minute at 100 M URLs, the integers a few seconds.
    con.execute(f"""CREATE OR REPLACE TEMP TABLE m_exact AS
        SELECT url, host, content_hash, minhash, first_fetched,
               status IN ({literal(DbStatus.DUPLICATE)}, {literal(DbStatus.NEAR_DUPLICATE)}) AS copy FROM {stored}
           AND minhash IN (SELECT minhash FROM {pages} WHERE minhash IS NOT NULL)
           AND content_hash IN (SELECT content_hash FROM {pages})
           AND url NOT IN (SELECT url FROM {pages})""")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE m_near_holders AS
        SELECT url, host, minhash, first_fetched FROM {stored}
           AND status NOT IN ({literal(DbStatus.DUPLICATE)}, {literal(DbStatus.NEAR_DUPLICATE)})
           AND minhash IN (SELECT other_hash FROM m_near_pairs)""")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE m_copies AS
        SELECT host, regexp_extract(duplicate_of, '^[a-z]+://([^/:]+)', 1) AS of_host, count(*) AS n
        FROM {db_source} db
        WHERE status = {literal(DbStatus.DUPLICATE)} AND duplicate_of IS NOT NULL AND url NOT IN (SELECT url FROM {pages})
        GROUP BY ALL""")


def stored_sql(db_source: str) -> str:
    """``db_source``'s rows holding a stored page's fingerprints, to which more conditions
    are joined with AND. Each scan filters on the cheap columns first; only the few rows
    left are checked against the segment's URLs."""
    return f"{db_source} WHERE status IN {STORED_STATUSES} AND content_hash IS NOT NULL"


def stored_pages_per_host(con: duckdb.DuckDBPyConnection, db_source: str, hosts: list[str]) -> dict[str, int]:
    """host → stored pages in ``db_source``, for ``hosts`` (those without any are left out)."""
    if not hosts:
        return {}
    con.register("mirror_hosts", pa.table({"host": pa.array(sorted(hosts), pa.string())}))
    rows = con.sql(f"""SELECT host, count(*) FROM {db_source}
        WHERE status IN {STORED_STATUSES} AND host IN (SELECT host FROM mirror_hosts) GROUP BY host""").fetchall()
    con.unregister("mirror_hosts")
    return dict(rows)


def merge_matches(con: duckdb.DuckDBPyConnection, pages: str, sources: dict[str, str], config: Config,
                  counters: Counter, stored_pages_of, known_mirrors: dict[str, str] | None = None) -> DedupResult:
    """The segment's marks, low-priority hosts and mirrors from the scans' tables
    (``sources``: kind → SQL source, the union over the scanned buckets; see
    :data:`MATCH_KINDS`). ``pages``: the segment's pages (table), every one of them: those
    the crawl DB does not hold yet (found by discovery inside the fetch, redirect targets)
    too; ``stored_pages_of(hosts)``: host → stored pages, asked only for the hosts of a
    possible mirror pair; ``known_mirrors``: mirror host → origin, found by earlier updates
    (:func:`read_state`): their pages are never canonical over another copy.

    Memory and time are bounded by the segment (its pages and their matches) and, for the
    mirrors, by the host pairs that share earlier copies — not by the crawl DB."""
    u = config.update
    known = sorted(known_mirrors or {})
    con.register("known_mirrors", pa.table({"host": pa.array(known, pa.string())}))
    # Every page of the segment, whichever bucket its row is (or will be) in, with the crawl
    # DB's facts where it has a row: the exact and near searches below see the whole segment.
    con.execute(f"""CREATE OR REPLACE TEMP TABLE seg AS
        SELECT p.url, p.host, p.content_hash, p.minhash, p.text_chars, s.first_fetched, false AS copy,
               p.host IN (SELECT host FROM known_mirrors) AS mirror
        FROM {pages} p LEFT JOIN (SELECT url, min(first_fetched) AS first_fetched FROM {sources['seg']} GROUP BY url) s
          USING (url)""")
    exact = exact_marks(con, sources["exact"])
    counters["dedup/exact"] += exact.num_rows

    con.register("exact_marks", exact)
    near = find_near_duplicates(con, sources, u)
    counters["dedup/near"] += near.num_rows
    marks = flatten_marks(con, pa.concat_tables([exact, near.cast(exact.schema)]))

    con.register("marks", marks)
    per_host = con.sql(f"""
        SELECT p.host, count(*) AS pages, count(m.url) AS dups
        FROM {pages} p LEFT JOIN marks m ON p.url = m.url
        GROUP BY p.host HAVING count(m.url) >= ? * count(*) AND count(m.url) > 0""", params=[u.dup_host_ratio]).fetchall()
    low = sorted(host for host, _, _ in per_host)
    counters["dedup/low_priority_hosts"] += len(low)
    mirrors = find_mirrors(con, sources["copies"], u, stored_pages_of)
    # A pair known from before keeps its direction: the canonical choice already put the
    # mirror's pages last, so its copies count against it again.
    mirrors = {m: o for m, o in mirrors.items() if known_mirrors is None or known_mirrors.get(o) != m}
    counters["dedup/mirror_hosts"] += len(mirrors)
    for table in ("seg", "exact_stored", "near_mine", "near_cand", "near_pairs"):
        con.execute(f"DROP TABLE IF EXISTS {table}")  # the memory goes to the next steps
    con.unregister("exact_marks")
    con.unregister("marks")
    con.unregister("known_mirrors")
    return DedupResult(marks.select(["url", "canonical", "kind"]), low, mirrors,
                       per_host=per_host_counts(marks))


def exact_marks(con: duckdb.DuckDBPyConnection, exact: str) -> pa.Table:
    """(url, host, canonical, kind) of the exact copies among the segment's pages (table
    ``seg``) and the stored candidates ``exact`` (:data:`MATCH_KINDS`): each group of one
    content hash (not the empty text's) keeps its first URL by :data:`CANONICAL_ORDER`."""
    con.execute(f"""CREATE OR REPLACE TEMP TABLE exact_stored AS
        SELECT url, host, content_hash, first_fetched, copy, host IN (SELECT host FROM known_mirrors) AS mirror
        FROM {exact}
        WHERE minhash IN (SELECT minhash FROM seg WHERE minhash IS NOT NULL)""")
    return con.sql(f"""
        WITH stored_copies AS (
            SELECT * FROM exact_stored
            WHERE content_hash IN (SELECT content_hash FROM seg) AND url NOT IN (SELECT url FROM seg)),
        shared AS (
            SELECT content_hash FROM seg WHERE content_hash IS NOT NULL AND content_hash <> $empty
            GROUP BY content_hash HAVING count(*) > 1
            UNION SELECT content_hash FROM stored_copies WHERE content_hash <> $empty),
        members AS (
            SELECT url, host, content_hash, first_fetched, copy, mirror FROM seg WHERE content_hash IN (SELECT * FROM shared)
            UNION ALL SELECT url, host, content_hash, first_fetched, copy, mirror FROM stored_copies),
        groups AS (
            SELECT *, first_value(url) OVER (PARTITION BY content_hash ORDER BY {CANONICAL_ORDER}) AS canonical
            FROM members)
        SELECT url, host, canonical, {literal(DbStatus.DUPLICATE)} AS kind FROM groups WHERE url <> canonical""",
                   params={"empty": EMPTY_HASH}).to_arrow_table()


def flatten_marks(con: duckdb.DuckDBPyConnection, marks: pa.Table, rounds: int = 16) -> pa.Table:
    """Marks whose canonical is itself marked point at that page's canonical instead, so
    that every copy names the page kept (an exact group's canonical may be a near copy of
    a page earlier in :data:`CANONICAL_ORDER`: its exact copies then name that page). The
    kind stays ``duplicate`` only when every step was exact. Each mark points at a page
    strictly earlier in one total order, so chains end; they are short (two steps here)."""
    if marks.num_rows == 0:
        return marks  # nothing to flatten: no table to make
    con.register("flat_in", marks)
    con.execute("CREATE OR REPLACE TEMP TABLE flat AS SELECT * FROM flat_in")
    con.unregister("flat_in")
    for _ in range(rounds):
        changed = con.execute(f"""UPDATE flat SET canonical = m2.canonical,
                kind = CASE WHEN flat.kind = {literal(DbStatus.DUPLICATE)} AND m2.kind = {literal(DbStatus.DUPLICATE)}
                            THEN {literal(DbStatus.DUPLICATE)} ELSE {literal(DbStatus.NEAR_DUPLICATE)} END
            FROM (SELECT url, canonical, kind FROM flat) m2 WHERE flat.canonical = m2.url""").fetchall()[0][0]
        if not changed:
            break
    out = con.sql("SELECT * FROM flat").to_arrow_table().cast(marks.schema)
    con.execute("DROP TABLE flat")
    return out


def find_mirrors(con: duckdb.DuckDBPyConnection, copies: str, u, stored_pages_of) -> dict[str, str]:
    """mirror host → the host it copies: host pairs sharing many exact copies, over the
    whole crawl DB (earlier marks: ``copies``, by host pair) and this segment's (table
    ``marks``). Which page of a pair is canonical varies page by page, so pairs are counted
    in both directions; the mirror is the host with fewer canonical pages of the pair."""
    con.execute(f"""CREATE OR REPLACE TEMP TABLE mirror_pairs AS
        WITH copies AS (
            SELECT host, of_host, n FROM {copies}
            UNION ALL
            SELECT host, regexp_extract(canonical, '^[a-z]+://([^/:]+)', 1), 1 FROM marks WHERE kind = 'duplicate'),
        directed AS (SELECT host, of_host, sum(n) AS n FROM copies WHERE host <> of_host GROUP BY ALL)
        SELECT least(host, of_host) AS a, greatest(host, of_host) AS b,
               sum(n) AS shared, sum(n) FILTER (WHERE host = least(host, of_host)) AS a_copies
        FROM directed GROUP BY ALL HAVING sum(n) >= ?""", [u.mirror_min_pages])
    hosts = [h for (h,) in con.execute("SELECT a FROM mirror_pairs UNION SELECT b FROM mirror_pairs").fetchall()]
    sizes = Counter(stored_pages_of(hosts) if hosts else {})
    # With the pages this segment fetched first (no stored row yet): a mirror found by
    # discovery in the segment that also found its origin is known at once, not one
    # update later, when its next pages would already have been fetched.
    if hosts:
        con.register("mirror_hosts_seg", pa.table({"host": pa.array(hosts, pa.string())}))
        sizes.update(dict(con.execute("""SELECT host, count(*) FROM seg WHERE first_fetched IS NULL
            AND host IN (SELECT host FROM mirror_hosts_seg) GROUP BY host""").fetchall()))
        con.unregister("mirror_hosts_seg")
    con.register("mirror_sizes", pa.table({"host": pa.array(list(sizes), pa.string()),
                                           "pages": pa.array(list(sizes.values()), pa.int64())}))
    rows = con.sql(f"""
        SELECT CASE WHEN coalesce(a_copies, 0) * 2 >= shared THEN a ELSE b END AS mirror,
               CASE WHEN coalesce(a_copies, 0) * 2 >= shared THEN b ELSE a END AS original
        FROM mirror_pairs pairs JOIN mirror_sizes sa ON sa.host = pairs.a JOIN mirror_sizes sb ON sb.host = pairs.b
        WHERE shared >= ? * least(sa.pages, sb.pages)""", params=[u.mirror_ratio]).fetchall()
    con.unregister("mirror_sizes")
    con.execute("DROP TABLE mirror_pairs")
    return dict(rows)


def find_near_duplicates(con: duckdb.DuckDBPyConnection, sources: dict[str, str], u) -> pa.Table:
    """(url, host, canonical, kind) for the segment's pages (table ``seg``) that are near
    a better page by :data:`CANONICAL_ORDER`; ``sources``: the scans' ``near_pairs`` and
    ``near_holders`` (the stored side, :func:`match_stored`).

    The segment's pages are paired with each other here (block-mask joins on the segment
    alone: pages of one segment meet whatever their buckets), and with the stored
    fingerprints by the scans; then the pages holding the paired fingerprints are compared
    to pick the best one. A stored row of a page of this segment (its previous fingerprint)
    or of an exact copy may still have paired: such holders are dropped; stored copies are
    never holders (the scans leave them out), so a mark points at an original.
    """
    mine = con.execute(f"""CREATE OR REPLACE TEMP TABLE near_mine AS
        SELECT url, minhash FROM seg WHERE minhash IS NOT NULL AND minhash <> 0 AND text_chars >= ?
          AND url NOT IN (SELECT url FROM exact_marks)""", [u.minhash_min_chars]).fetchall()[0][0]
    con.execute(f"""CREATE OR REPLACE TEMP TABLE near_cand AS
        SELECT url, other_hash FROM {sources['near_pairs']} WHERE url IN (SELECT url FROM near_mine)""")
    # The segment's pages paired among themselves, a join per block mask (ten by default):
    # with fewer than two pages there is no pair to find, and a small update skips them.
    for mask in block_masks(u.minhash_blocks, u.minhash_max_distance) if mine > 1 else ():
        con.execute("""INSERT INTO near_cand
            SELECT a.url, b.minhash FROM near_mine a JOIN near_mine b
              ON (a.minhash & $mask::UBIGINT) = (b.minhash & $mask::UBIGINT)
            WHERE bit_count(xor(a.minhash, b.minhash)) <= $distance
              AND b.url <> a.url""", {"mask": mask, "distance": u.minhash_max_distance})
    con.execute("CREATE OR REPLACE TEMP TABLE near_pairs AS SELECT DISTINCT url, other_hash FROM near_cand")
    order = CANONICAL_ORDER.replace("length(url)", "length(other)").replace("url ASC", "other ASC")
    return con.sql(f"""
        WITH holders AS (
            SELECT url, minhash, first_fetched, copy, mirror FROM near_mine JOIN seg USING (url, minhash)
            UNION ALL
            SELECT url, minhash, first_fetched, false AS copy, host IN (SELECT host FROM known_mirrors) AS mirror
            FROM {sources['near_holders']}
            WHERE url NOT IN (SELECT url FROM seg) AND url NOT IN (SELECT url FROM exact_marks)),
        candidates AS (
            SELECT p.url, o.url AS other, o.first_fetched, o.copy, o.mirror
            FROM near_pairs p JOIN holders o ON o.minhash = p.other_hash AND o.url <> p.url
            UNION ALL  -- the page itself: marked only when another page comes before it
            SELECT url, url AS other, first_fetched, copy, mirror FROM seg WHERE url IN (SELECT url FROM near_pairs)),
        best AS (
            SELECT url, other FROM candidates
            QUALIFY row_number() OVER (PARTITION BY url ORDER BY {order}) = 1)
        SELECT b.url, m.host, b.other AS canonical, {literal(DbStatus.NEAR_DUPLICATE)} AS kind
        FROM best b JOIN seg m USING (url) WHERE b.other <> b.url""").to_arrow_table()


# --- as tasks: one scan per crawl DB bucket ---------------------------------------------------
DEDUP_INPUTS = "dedup"
"""The folder in the segment's update inputs (``update/dedup/``): ``pages.parquet`` (the
segment's stored pages, written by the coordinator) and ``<kind>/part-NNNNN.parquet``,
each scan task's :func:`match_stored` tables (written by its :func:`dedup_scan` task)."""


def pages_file(inputs: StorePath) -> StorePath:
    return inputs / DEDUP_INPUTS / "pages.parquet"


def match_file(inputs: StorePath, kind: str, part: int) -> StorePath:
    return inputs / DEDUP_INPUTS / kind / f"part-{part:05d}.parquet"


def scan_groups(bucket_rows: list[int], pages: int) -> list[list[int]]:
    """The crawl DB's buckets in groups, one :func:`dedup_scan` task each.

    Every task joins the whole segment's fingerprints (a near copy may be in any bucket)
    with its buckets' rows, so its cost is about segment + its rows, and all the tasks'
    together tasks × segment + crawl DB. One task per bucket made that buckets × segment
    (64 × 10 M pages at 100 M URLs: ~6× the crawl DB); one task for all is the old serial
    scan. So: about as many tasks as the segment goes into the crawl DB (a task's rows ≈ the
    segment), at most one per bucket: all tasks together do about twice the work of one
    scan, and each about the segment's twice. Buckets go round-robin (similar sizes)."""
    count = max(1, min(len(bucket_rows), math.ceil(sum(bucket_rows) / max(1, pages))))
    return [list(range(group, len(bucket_rows), count)) for group in range(count)]


@dataclass(frozen=True)
class BucketScanTask:
    """A task reading crawl DB buckets: the store, the config, the buckets' schema (picklable)."""

    store_uri: str
    config: Config
    schema_version: int
    workers: int
    """How many such tasks run at once on this machine (they share memory and threads)."""


@dataclass(frozen=True)
class DedupScanTask(BucketScanTask):
    """One dedup scan over some crawl DB buckets."""

    part: int = 0
    """This task's number: its output files' names."""
    old_files: tuple = ()
    """Its buckets' files (crawldb.BucketFiles) in the crawl DB version update starts from."""
    inputs: StorePath | None = None
    """The segment's update inputs folder (``segments/<id>/update``)."""


def dedup_scan(task: DedupScanTask) -> dict[str, int]:
    """Verify the task's bucket files, then scan them for the segment's pages
    (:func:`match_stored`) and write each table to ``update/dedup/<kind>/part-NNNNN.parquet``;
    returns rows per kind.

    Update's first round over the crawl DB, so the verification is here: a corrupt bucket
    fails this task, naming the file, before update has written anything the crawl DB,
    the host DB or the link DB would commit. A retried task writes the same rows (sorted
    by every column) under the same names, each write atomic, so a zombie attempt's late
    write changes no byte the coordinator reads.
    """
    store, config = Store(task.store_uri), task.config
    for bucket in task.old_files:  # each bucket's base and deltas (crawldb.BucketFiles)
        for path in bucket.files:
            verify_bucket_file(store, path)
    con = connect(store, config, task.workers)
    try:
        db = buckets_source_sql(store, con, list(task.old_files), task.schema_version)
        con.execute(f"CREATE TEMP TABLE pages AS SELECT * FROM {store.duckdb_source(con, [pages_file(task.inputs)])}")
        counts = {}
        for kind, table in match_stored(con, db, "pages", config.update).items():
            reader = con.sql(f"SELECT * FROM {table} ORDER BY ALL").to_arrow_reader(64 * 1024)
            counts[kind] = store.write_batches(match_file(task.inputs, kind, task.part), reader, reader.schema)
    finally:
        con.close()
    return counts


@dataclass(frozen=True)
class HostPagesTask(BucketScanTask):
    """Count stored pages of some hosts in one bucket."""

    file: object = None
    """The bucket's files (crawldb.BucketFiles)."""
    hosts: tuple = ()


def count_host_pages(task: HostPagesTask) -> dict[str, int]:
    """host → stored pages in the bucket file (the mirror test's page counts; the file was
    verified by this update's :func:`dedup_scan`)."""
    store = Store(task.store_uri)
    con = connect(store, task.config, task.workers)
    try:
        db = bucket_source_sql(store, con, task.file, task.schema_version)
        counts = stored_pages_per_host(con, db, list(task.hosts))
    finally:
        con.close()
    return counts


def find_segment_duplicates(store: Store, config: Config, con: duckdb.DuckDBPyConnection, executor: Executor,
                            files: list[StorePath], schema_version: int, inputs: StorePath, pages: pa.Table,
                            counters: Counter, known_mirrors: dict[str, str] | None = None) -> DedupResult:
    """:func:`find_duplicates` for update, with the crawl DB scanned by :func:`dedup_scan`
    tasks on ``executor``, each over a group of buckets (:func:`scan_groups`): the
    coordinator holds the segment's pages and their matches, never the crawl DB's rows
    (issue #11). The result carries ``known_hashes`` for the pages feed (feed.feed_candidates).
    """
    files = [as_bucket_files(f) for f in files]  # a bucket's base and deltas (plain paths: bases alone)
    store.write_table(pages_file(inputs), pages, pages.schema)
    groups = scan_groups([store.read_metadata(f.base).num_rows for f in files], pages.num_rows)
    tasks = [DedupScanTask(store.uri, config, schema_version, executor.workers, part, tuple(files[b] for b in group),
                           inputs) for part, group in enumerate(groups)]
    executor.map(dedup_scan, tasks)
    sources = {kind: store.duckdb_source(con, [match_file(inputs, kind, part) for part in range(len(tasks))])
               for kind in MATCH_KINDS}
    known = con.sql(f"SELECT url, db_content_hash AS content_hash FROM {sources['seg']}").to_arrow_table()

    def stored_pages_of(hosts: list[str]) -> dict[str, int]:
        by_bucket: dict[int, list[str]] = {}
        for host, bucket in zip(hosts, host_buckets(pa.array(hosts, pa.string()), len(files)).tolist()):
            by_bucket.setdefault(int(bucket), []).append(host)
        sizes: dict[str, int] = {}
        for counts in executor.map(count_host_pages, [
                HostPagesTask(store.uri, config, schema_version, executor.workers, files[b], tuple(sorted(h)))
                for b, h in sorted(by_bucket.items())]):
            sizes.update(counts)
        return sizes

    con.register("seg_pages", pages)
    try:
        result = merge_matches(con, "seg_pages", sources, config, counters, stored_pages_of, known_mirrors)
    finally:
        con.unregister("seg_pages")
    result.known_hashes = known
    return result


# --- what dedup keeps between updates: known mirrors, variant parameters ------------------------
# (the state file's reading and writing: cycles/tables/dedup_state.py, which the fetch reads too)
def query_params(url: str) -> list[str]:
    """The distinct names of ``url``'s query parameters, in order."""
    query = url.split("#", 1)[0].partition("?")[2]
    names = [param.partition("=")[0] for param in query.split("&") if param]
    return list(dict.fromkeys(names))


def strip_params(url: str, names) -> str:
    """``url`` without its query parameters named in ``names`` (no ``?`` when none is left)."""
    head, _, fragment = url.partition("#")
    path, sep, query = head.partition("?")
    if not sep:
        return url
    kept = [param for param in query.split("&") if param and param.partition("=")[0] not in names]
    return path + ("?" + "&".join(kept) if kept else "") + ("#" + fragment if fragment else "")


def variant_evidence(pages: pa.Table, marks: pa.Table) -> Counter:
    """(host, param, 'same' | 'differs') → pages: for each page of the segment with a query
    parameter, whether it is the same page as the URL without that parameter.

    Same: the page and the URL without the parameter end under one canonical (the page is
    a copy of it, of another value of the parameter, or their canonical). Differs: the URL
    without the parameter was fetched in this segment too and is another page. Without the
    other URL fetched, there is no evidence either way."""
    canonical = dict(zip(marks["url"].to_pylist(), marks["canonical"].to_pylist()))
    urls = pages["url"].to_pylist()
    fetched = set(urls)
    evidence: Counter = Counter()
    for url, host in zip(urls, pages["host"].to_pylist()):
        if "?" not in url:
            continue
        root = canonical.get(url, url)
        for param in query_params(url):
            base = strip_params(url, {param})
            if root != url and strip_params(root, {param}) == base:
                evidence[(host, param, "same")] += 1
            elif base in fetched:
                same = canonical.get(base, base) == root
                evidence[(host, param, "same" if same else "differs")] += 1
    return evidence


def learn_variants(state: dict, evidence: Counter, u, counters: Counter) -> None:
    """Fold a segment's :func:`variant_evidence` into ``state["params"]`` and learn the
    parameters that carry no content on their host: at least ``update.variant_min_pages``
    of its variants proved copies, and at least ``update.variant_ratio`` of those judged.
    Once learned a parameter stays learned (its variants are no longer fetched, so no new
    evidence comes); an operator removes it from the state file to unlearn it."""
    table = {(h, p): [same, differs, learned] for h, p, same, differs, learned in state["params"]}
    for (host, param, verdict), n in evidence.items():
        entry = table.setdefault((host, param), [0, 0, False])
        entry[0 if verdict == "same" else 1] += n
    for (host, param), entry in table.items():
        same, differs, learned = entry
        if not learned and same >= u.variant_min_pages and same >= u.variant_ratio * (same + differs):
            entry[2] = True
            counters["dedup/variant_params_learned"] += 1
    state["params"] = [[h, p, *entry] for (h, p), entry in sorted(table.items())]


def learned_params(state: dict) -> pa.Table:
    """(host, param) of the learned variant parameters (:func:`learn_variants`)."""
    rows = [(h, p) for h, p, _, _, learned in state["params"] if learned]
    return pa.table({"host": pa.array([h for h, _ in rows], pa.string()),
                     "param": pa.array([p for _, p in rows], pa.string())})


def variant_rows(urls: pa.Table, learned: pa.Table) -> pa.Table:
    """(url, base) for the URLs (url, host) that carry a parameter learned on their host:
    ``base`` is the URL without the learned parameters, the page they are copies of."""
    by_host: dict[str, set[str]] = {}
    for host, param in zip(learned["host"].to_pylist(), learned["param"].to_pylist()):
        by_host.setdefault(host, set()).add(param)
    out_url, out_base = [], []
    for url, host in zip(urls["url"].to_pylist(), urls["host"].to_pylist()):
        names = by_host.get(host)
        if names and "?" in url and names.intersection(query_params(url)):
            out_url.append(url)
            out_base.append(strip_params(url, names))
    return pa.table({"url": pa.array(out_url, pa.string()), "base": pa.array(out_base, pa.string())})


def dedup_summary(store: Store, con: duckdb.DuckDBPyConnection, top: int = 10) -> dict:
    """What ``crawl status`` and ``crawl report`` show of dedup: the crawl DB's copies
    (``duplicates``, ``near_duplicates``) in all and for the ``top`` hosts with the most,
    the mirror hosts found (mirror → origin) and the variant parameters learned (host, param).
    ``con`` has the ``crawldb`` view (cycles/commands/views.py)."""
    rows = con.execute(f"""SELECT host, count(*) FILTER (WHERE status = {literal(DbStatus.DUPLICATE)}),
            count(*) FILTER (WHERE status = {literal(DbStatus.NEAR_DUPLICATE)})
        FROM crawldb WHERE status IN ({literal(DbStatus.DUPLICATE)}, {literal(DbStatus.NEAR_DUPLICATE)})
        GROUP BY host ORDER BY count(*) DESC, host""").fetchall()
    state = read_state(store)
    return {"duplicates": sum(r[1] for r in rows), "near_duplicates": sum(r[2] for r in rows),
            "hosts": [list(r) for r in rows[:top]], "mirrors": dict(sorted(state["mirrors"].items())),
            "variant_params": [[h, p] for h, p, _, _, learned in state["params"] if learned]}


def format_dedup(summary: dict) -> list[str]:
    """``crawl status`` lines for :func:`dedup_summary`."""
    lines = [f"copies: {summary['duplicates']} duplicates, {summary['near_duplicates']} near-duplicates; "
             f"mirror hosts {len(summary['mirrors'])}; variant parameters learned {len(summary['variant_params'])}"]
    lines += [f"  {host:<40} {dups:>8} duplicates {near:>8} near" for host, dups, near in summary["hosts"]]
    lines += [f"  mirror {mirror} of {origin}" for mirror, origin in summary["mirrors"].items()]
    lines += [f"  variant ?{param}= on {host}: not fetched" for host, param in summary["variant_params"]]
    return lines
