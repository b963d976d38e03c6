"""Where generate's and update's time goes, part by part, on a store left by bench_scale.py --keep.

Usage::

    .venv/bin/python scripts/bench_scale_parts.py --store /tmp/bench-scale/10M [--parts outlinks,dedup,neardup,write]
        [--src DIR] [--explain]

Each part prints wall seconds and CPU seconds (user + system of this process, all threads:
less disturbed by other work on the machine than wall time):

- ``outlinks``: cycles.update.update.prepare_outlinks step by step (read, unique, the
  Python normalise + filter loop, the DuckDB dedupe, the ``NOT IN`` max-depth count,
  ``url_host`` per URL, ``host_hashes``);
- ``dedup``: cycles.update.dedup.find_duplicates with every DuckDB statement timed (a
  proxy connection), on the crawl DB version update started from; ``--explain`` adds
  DuckDB's EXPLAIN ANALYZE of the slowest statement; then an alternative near-duplicate
  query that probes with the crawl DB instead of materialising 20 key rows per stored page;
- ``neardup``: the near-duplicate pairs found with 20 small joins whose build side is the
  segment's keys and whose probe side streams the stored pages (no 20x key table);
- (``select`` and ``lease``, which measured generate's choice and its rewrite of the crawl
  DB to lease, were removed with that design: generate now chooses per bucket and leases
  through the fetch lists; see the commits of cycles/tables/leases.py.)
- ``pagerank``: the host graph's PageRank (update's coordinator) on random host graphs of
  ``--pr-hosts`` hosts and each of ``--pr-edges`` edge counts, ``--pr-iterations``
  iterations: linear in the edges or not (the store is only its scratch folder);
- ``write``: one bucket written with pyarrow zstd (as Store.write_batches: 64 Ki-row row
  groups, cast per batch), zstd level 1 and 3, snappy, lz4, one large row group, and by
  DuckDB COPY; size and time to read back.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import time
from collections import Counter
from pathlib import Path


def _src_dir() -> str:
    if "--src" in sys.argv[:-1]:
        return str(Path(sys.argv[sys.argv.index("--src") + 1]).resolve())
    return str(Path(__file__).resolve().parents[2])


sys.path.insert(0, _src_dir())

import duckdb  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from cycles.tables.segment import segment_state  # noqa: E402
from cycles.tables import schema  # noqa: E402
from cycles.config import Config  # noqa: E402
from cycles.storage.store import Store  # noqa: E402


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Timer:
    def __init__(self):
        self.rows = []

    def __call__(self, label: str):
        timer = self

        class _T:
            def __enter__(self):
                self.w, self.c = time.perf_counter(), cpu()

            def __exit__(self, *exc):
                timer.rows.append((label, time.perf_counter() - self.w, cpu() - self.c))
                print(f"  {label:<62} {timer.rows[-1][1]:8.2f} s wall {timer.rows[-1][2]:8.2f} s CPU", flush=True)
        return _T()


def connect(store: Store, threads: int, memory_limit: str) -> duckdb.DuckDBPyConnection:
    from cycles.tables.crawldb import connect as cycles_connect
    config = Config()
    config.db.duckdb_threads = threads
    config.db.duckdb_memory_limit = memory_limit
    return cycles_connect(store, config)


def versions(store: Store) -> tuple[list[str], list[str]]:
    """(files of the version update started from, files of the current version)."""
    current = store.manifest("crawldb").version
    names = sorted(p.name for p in store.path("crawldb").iterdir() if p.is_dir() and p.name.startswith("v"))
    older = [v for v in names if v != current]
    old = older[-1] if older else current
    files = lambda v: [str(p) for p in sorted(store.path("crawldb", v).glob("bucket-*.parquet"))]  # noqa: E731
    return files(old), files(current)


def segment_dir(store: Store) -> Path:
    return store.segment_dir([s for s in store.segments() if segment_state(store, s) in ("updated", "fetched")][-1])


# --- outlinks ------------------------------------------------------------------------------
def part_outlinks(store: Store, t: Timer) -> None:
    from cycles.update.update import read_segment_table
    from cycles.urls import Normalizer, UrlFilter, host_hashes, rejection_reason, url_host
    config = Config()
    seg = segment_dir(store)
    with t("read outlinks (read_segment_table)"):
        links = read_segment_table(seg / "outlinks", schema.OUTLINKS)
    with t("nofollow filter + pc.unique + to_pylist"):
        follow = links.filter(pc.invert(links["nofollow"]))
        raw = pc.unique(follow["url"]).to_pylist()
    normalizer, url_filter = Normalizer(config.urls), UrlFilter(config.urls)
    counters = Counter()
    with t(f"normalise {len(raw):,} distinct URLs (Normalizer.normalize)"):
        norms = [normalizer.normalize(u) for u in raw]
    with t("filter them (UrlFilter.reason / rejection_reason)"):
        out = []
        for url, norm in zip(raw, norms):
            reason = rejection_reason(url) if norm is None else url_filter.reason(norm)
            if reason:
                counters[reason] += 1
                norm = None
            out.append(norm)
    mapping = pa.table({"raw": pa.array(raw, pa.string()), "url": pa.array(out, pa.string())})
    con = duckdb.connect()
    con.register("links", follow)
    con.register("mapping", mapping)
    with t("DuckDB dedupe (join mapping, group by url)"):
        deduped = con.sql(f"""
            SELECT m.url, min(l.depth) AS depth FROM links l JOIN mapping m ON l.url = m.raw
            WHERE m.url IS NOT NULL GROUP BY m.url HAVING min(l.depth) <= {int(config.update.max_depth)}""").to_arrow_table()
    with t("DuckDB too_deep count (NOT IN subquery)"):
        con.execute("""SELECT count(DISTINCT m.url) FROM links l JOIN mapping m ON l.url = m.raw
            WHERE m.url IS NOT NULL AND m.url NOT IN (SELECT url FROM deduped)""").fetchall()
    with t(f"url_host for {deduped.num_rows:,} URLs (Python)"):
        hosts = [url_host(u) for u in deduped["url"].to_pylist()]
    with t("url_host vectorised instead (pc.extract_regex)"):
        pc.struct_field(pc.extract_regex(deduped["url"], r"^[A-Za-z][A-Za-z0-9+.-]*://(?:[^/?#@]*@)?(?P<h>\[[^\]/?#]*\]|[^:/?#]*)"), [0])
    with t("host_hashes"):
        host_hashes(hosts)


# --- dedup ---------------------------------------------------------------------------------
class TimedRel:
    def __init__(self, rel, label, t, con, sql, explain):
        self.rel, self.label, self.t, self.con, self.sql, self.explain = rel, label, t, con, sql, explain

    def _run(self, how):
        with self.t(self.label):
            result = getattr(self.rel, how)()
        if self.explain and self.t.rows[-1][1] > 5:  # only the slow statements
            plan = self.con.execute("EXPLAIN ANALYZE " + self.sql).fetchall()
            Path(f"/tmp/bench-scale-explain-{abs(hash(self.sql)) % 10**6}.txt").write_text(plan[0][1])
            print(f"    EXPLAIN ANALYZE in /tmp/bench-scale-explain-{abs(hash(self.sql)) % 10**6}.txt")
        return result

    def to_arrow_table(self):
        return self._run("to_arrow_table")

    def fetchall(self):
        return self._run("fetchall")


class TimedCon:
    """Passes everything to a DuckDB connection, timing execute() and each query's result."""

    def __init__(self, con, t: Timer, explain: bool):
        self.con, self.t, self.explain = con, t, explain

    @staticmethod
    def label(sql: str) -> str:
        words = " ".join(sql.split())
        return "  sql: " + words[:56]

    def execute(self, sql, *args):
        with self.t(self.label(sql)):
            return self.con.execute(sql, *args)

    def sql(self, sql, **kwargs):
        return TimedRel(self.con.sql(sql, **kwargs), self.label(sql), self.t, self.con, sql, self.explain)

    def __getattr__(self, name):
        return getattr(self.con, name)


def part_dedup(store: Store, t: Timer, threads: int, memory_limit: str, explain: bool) -> None:
    from cycles.tables.crawldb import crawldb_source_sql
    from cycles.update.dedup import block_masks, find_duplicates
    from cycles.update.update import stored_pages
    config = Config()
    old_files, _ = versions(store)
    seg = segment_dir(store)
    con = connect(store, threads, memory_limit)
    with t("stored_pages (reads the text column to get its length)"):
        pages = stored_pages(seg)
    with t("find_duplicates (total)"):
        result = find_duplicates(TimedCon(con, t, explain), crawldb_source_sql([Path(f) for f in old_files]),
                                 pages, config, Counter())
    near_rows = pc.sum(pc.equal(result.marks["kind"], "near_duplicate")).as_py() or 0
    print(f"  -> {result.marks.num_rows:,} marks, {near_rows:,} near", flush=True)
    # Alternative near-duplicate search: the segment's keys are few (20 per page); probe
    # them with the crawl DB's stored pages straight from Parquet (semi-join first, so no
    # 20-rows-per-page table of the whole DB is built).
    u = config.update
    masks = block_masks(u.minhash_blocks, u.minhash_max_distance)
    con.register("seg_pages", pages)
    src = crawldb_source_sql([Path(f) for f in old_files])
    mine_keys = " UNION ALL ".join(
        f"SELECT url, minhash, {i}::UTINYINT AS t, minhash & {m}::UBIGINT AS key FROM mine" for i, m in enumerate(masks))
    db_keys = " UNION ALL ".join(
        f"SELECT d.url, d.minhash, {i}::UTINYINT AS t, d.minhash & {m}::UBIGINT AS key FROM db d "
        f"WHERE d.minhash & {m}::UBIGINT IN (SELECT key FROM mine_keys WHERE t = {i})" for i, m in enumerate(masks))
    with t("alt near-dup: probe DB Parquet against segment keys"):
        con.execute(f"""CREATE OR REPLACE TEMP TABLE mine AS SELECT url, minhash FROM seg_pages
                        WHERE minhash IS NOT NULL AND minhash <> 0 AND text_chars >= {u.minhash_min_chars}""")
        con.execute(f"CREATE OR REPLACE TEMP TABLE mine_keys AS {mine_keys}")
        alt = con.sql(f"""
            WITH db AS (SELECT url, minhash FROM {src}
                        WHERE minhash IS NOT NULL AND minhash <> 0
                          AND status IN ('fetched', 'not_modified', 'duplicate', 'near_duplicate')),
            db_keys AS ({db_keys})
            SELECT DISTINCT a.url, b.url AS other
            FROM mine_keys a JOIN db_keys b ON a.t = b.t AND a.key = b.key AND a.url <> b.url
            WHERE bit_count(xor(a.minhash, b.minhash)) <= {u.minhash_max_distance}""").to_arrow_table()
    print(f"  -> {alt.num_rows:,} candidate pairs within {u.minhash_max_distance} bits "
          "(before the canonical-order pick; same pairs as the original's 'pairs' CTE up to "
          "the segment's own fingerprints)", flush=True)


def part_neardup(store: Store, t: Timer, threads: int, memory_limit: str) -> None:
    """Near-duplicate pairs, probing instead of building: for each of the 20 block masks,
    hash the segment's keys (small) and stream the stored pages' (url, minhash) past them.
    No table of 20 key rows per stored page is built, so nothing spills."""
    from cycles.tables.crawldb import crawldb_source_sql
    from cycles.update.dedup import block_masks
    from cycles.update.update import stored_pages
    config = Config()
    u = config.update
    old_files, _ = versions(store)
    con = connect(store, threads, memory_limit)
    pages = stored_pages(segment_dir(store))
    con.register("seg_pages", pages)
    src = crawldb_source_sql([Path(f) for f in old_files])
    masks = block_masks(u.minhash_blocks, u.minhash_max_distance)
    with t("probe near-dup: cand (url, minhash) once"):
        con.execute(f"""CREATE OR REPLACE TEMP TABLE cand2 AS
            SELECT db.url, coalesce(p.minhash, db.minhash) AS minhash, p.url IS NOT NULL AS in_segment,
                   coalesce(p.text_chars, {u.minhash_min_chars}) AS text_chars
            FROM {src} db LEFT JOIN seg_pages p ON db.url = p.url
            WHERE (p.url IS NOT NULL OR (db.status IN ('fetched', 'not_modified', 'duplicate', 'near_duplicate')
                                         AND db.content_hash IS NOT NULL))""")
        con.execute(f"""CREATE OR REPLACE TEMP TABLE cand2 AS SELECT url, minhash, in_segment FROM cand2
            WHERE minhash IS NOT NULL AND minhash <> 0 AND text_chars >= {u.minhash_min_chars}""")
    with t("probe near-dup: 20 joins, build = segment keys, probe = stored pages"):
        pairs = []
        for m in masks:
            pairs.append(con.sql(f"""
                SELECT a.url, b.url AS other
                FROM (SELECT url, minhash, minhash & {m}::UBIGINT AS key FROM cand2 WHERE in_segment) a
                JOIN cand2 b ON a.key = (b.minhash & {m}::UBIGINT) AND a.url <> b.url
                WHERE bit_count(xor(a.minhash, b.minhash)) <= {u.minhash_max_distance}""").to_arrow_table())
        con.register("pairs_all", pa.concat_tables(pairs))
        n = con.sql("SELECT count(*) FROM (SELECT DISTINCT url, other FROM pairs_all)").fetchall()[0][0]
    print(f"  -> {n:,} distinct candidate pairs (the original's 'pairs' CTE)", flush=True)


# --- write -----------------------------------------------------------------------------------
def part_write(store: Store, t: Timer) -> None:
    _, files = versions(store)
    table = pq.read_table(files[0])
    out = store.path(".parts-write")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    print(f"  one bucket: {table.num_rows:,} rows, {Path(files[0]).stat().st_size / 1e6:.0f} MB as stored", flush=True)
    names = schema.CRAWLDB.names

    def batches_write(path, **kw):
        with pq.ParquetWriter(path, schema.CRAWLDB, **kw) as w:
            for batch in table.to_batches(64 * 1024):
                w.write_table(pa.Table.from_batches([batch]).select(names).cast(schema.CRAWLDB))
    variants = {
        "as Store.write_batches: zstd (default level), 64Ki-row groups": lambda p: batches_write(p, compression="zstd"),
        "zstd level 1, 64Ki-row groups": lambda p: batches_write(p, compression="zstd", compression_level=1),
        "zstd level 3, 64Ki-row groups": lambda p: batches_write(p, compression="zstd", compression_level=3),
        "snappy, 64Ki-row groups": lambda p: batches_write(p, compression="snappy"),
        "lz4, 64Ki-row groups": lambda p: batches_write(p, compression="lz4"),
        "zstd, no dictionary for url/content_hash": lambda p: batches_write(
            p, compression="zstd", use_dictionary=[n for n in names if n not in ("url", "content_hash", "minhash", "etag")]),
        "zstd, one write_table (1Mi-row groups)": lambda p: pq.write_table(table, p, compression="zstd"),
    }
    for label, fn in variants.items():
        path = out / "x.parquet"
        with t(label):
            fn(path)
        size = path.stat().st_size
        w0 = time.perf_counter()
        pq.read_table(path)
        print(f"      {size / 1e6:7.1f} MB, read back in {time.perf_counter() - w0:.2f} s", flush=True)
    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.register("t", table)
    with t("DuckDB COPY zstd (its own writer)"):
        con.execute(f"COPY t TO '{out / 'y.parquet'}' (FORMAT parquet, COMPRESSION zstd)")
    print(f"      {(out / 'y.parquet').stat().st_size / 1e6:7.1f} MB", flush=True)
    shutil.rmtree(out, ignore_errors=True)


def part_pagerank(store: Store, t: Timer, threads: int, memory_limit: str, edges: str, hosts: int,
                  iterations: int) -> None:
    """The host graph's PageRank (cycles/update/linkgraph.py ``host_pagerank``, update's
    coordinator) on random host graphs of ``hosts`` hosts and each edge count of ``edges``,
    a fixed number of iterations (tolerance 0): does its cost stay linear in the edges (issue
    #13 §1: bench_scale's link DB has about one host edge per crawl DB URL)? Past
    ``IN_MEMORY_EDGES`` it runs in DuckDB. Only the iteration's setup and loop: the edges'
    DISTINCT and write around it in ``rank_hosts`` are not in it."""
    from cycles.update.linkgraph import IN_MEMORY_EDGES, host_pagerank
    for n_edges in (parse_count(e) for e in edges.split(",")):
        con = connect(store, threads, memory_limit)
        con.execute(f"""CREATE TEMP TABLE pr_hosts AS
            SELECT 'h' || lpad(range::VARCHAR, 8, '0') AS host FROM range({hosts})""")
        con.execute(f"""CREATE TEMP TABLE pr_graph AS
            SELECT DISTINCT 'h' || lpad(a::VARCHAR, 8, '0') AS from_host, 'h' || lpad(b::VARCHAR, 8, '0') AS to_host
            FROM (SELECT hash(range, 1) % {hosts} AS a, hash(range, 2) % {hosts} AS b FROM range({n_edges}))
            WHERE a <> b""")
        found = con.execute("SELECT count(*) FROM pr_graph").fetchall()[0][0]
        way = "NumPy" if found <= IN_MEMORY_EDGES else "DuckDB"
        with t(f"host_pagerank {found:,} edges, {hosts:,} hosts, {iterations} it. ({way})"):
            host_pagerank(con, "pr_hosts", "pr_graph", 0.85, iterations, 0.0)
        con.close()


def parse_count(text: str) -> int:
    text = text.strip().upper()
    return int(float(text.rstrip("KM")) * {"K": 1_000, "M": 1_000_000}.get(text[-1:], 1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", required=True)
    p.add_argument("--src")
    p.add_argument("--parts", default="outlinks,dedup,write")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--memory-limit", default="4GB")
    p.add_argument("--explain", action="store_true")
    p.add_argument("--pr-edges", default="11M,110M", help="pagerank: host edge counts (bench_scale: ~1 per URL)")
    p.add_argument("--pr-hosts", type=int, default=1_030_000, help="pagerank: hosts (bench_scale: ~1 M from 10 M URLs on)")
    p.add_argument("--pr-iterations", type=int, default=11, help="pagerank: iterations (update from the last ranks: 11)")
    args = p.parse_args()
    store = Store(args.store)
    t = Timer()
    size = sum(pq.read_metadata(f).num_rows for f in versions(store)[1])
    for part in args.parts.split(","):
        print(f"[{part}] {store.root} ({size:,} URLs)", flush=True)
        if part == "outlinks":
            part_outlinks(store, t)
        elif part == "dedup":
            part_dedup(store, t, args.threads, args.memory_limit, args.explain)
        elif part == "neardup":
            part_neardup(store, t, args.threads, args.memory_limit)
        elif part == "write":
            part_write(store, t)
        elif part == "pagerank":
            part_pagerank(store, t, args.threads, args.memory_limit, args.pr_edges, args.pr_hosts, args.pr_iterations)


if __name__ == "__main__":
    main()
