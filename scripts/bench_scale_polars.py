"""DuckDB or Polars for update's per-bucket merge? A standalone comparison (issue #5).

Usage (on a store left by ``bench_scale.py --keep``, whose segment was updated)::

    .venv/bin/python scripts/bench_scale_polars.py --store /tmp/bench-scale/10M [--threads 2]

The merge of one bucket is: the old bucket LEFT JOIN the segment's results for the bucket
(a transition of the fetched columns and the lease), UNION the bucket's new outlinks that
the old bucket does not hold (anti-join), sorted by host, url, written as zstd Parquet.
Both engines get the same inputs and the same (reduced) transition rules:

- inputs: the crawl DB version update started from (the newest version that is not
  CURRENT: generate's output, with the leases), the segment's fetched rows with their
  host hash, and its outlinks prepared once by ``cycles.update.update.prepare_outlinks``
  (normalised, filtered, deduplicated; its time is reported too) — written to Parquet
  under the store's ``.polars-bench/`` so that every variant reads the same files;
- variants, each in a fresh process (peak RSS: the child's own VmHWM):
  ``duckdb-arrow``   DuckDB query -> Arrow reader -> pyarrow ParquetWriter (what
                     cycles.crawldb.replace_crawldb does, cast included);
  ``duckdb-copy``    the same query, DuckDB's own ``COPY ... TO`` Parquet writer;
  ``duckdb-full``    as duckdb-arrow but with update's real ``transition_sql``;
  ``polars-stream``  Polars lazy, ``sink_parquet`` on the streaming engine;
  ``polars-arrow``   Polars lazy ``collect(engine="streaming")`` -> pyarrow ParquetWriter.

Every variant writes the same rows (checked: row count per bucket and a hash of the URL
column). Thread pools: DuckDB ``SET threads``, Polars ``POLARS_MAX_THREADS``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def _src_dir() -> str:
    if "--src" in sys.argv[:-1]:
        return str(Path(sys.argv[sys.argv.index("--src") + 1]).resolve())
    return str(Path(__file__).resolve().parent.parent)


sys.path.insert(0, _src_dir())

VARIANTS = ("duckdb-arrow", "duckdb-copy", "duckdb-full", "polars-stream", "polars-arrow")

# --- the reduced transition, written twice ----------------------------------------------
DUCK_SELECT = """
    SELECT db.* REPLACE (
        CASE WHEN f.outcome IS NULL OR f.outcome = 'deferred' THEN db.status
             WHEN f.outcome = 'ok' THEN 'fetched' WHEN f.outcome = 'not_modified' THEN 'not_modified'
             WHEN f.outcome IN ('gone', 'client_error') THEN 'gone' ELSE 'error' END AS status,
        coalesce(f.fetched_at, db.last_fetched) AS last_fetched,
        CASE WHEN f.outcome IS NULL THEN db.next_fetch
             ELSE coalesce(f.fetched_at, $now) + to_seconds(db.fetch_interval_s) END AS next_fetch,
        (db.fetch_count + CASE WHEN f.outcome IN ('ok', 'not_modified') THEN 1 ELSE 0 END)::INTEGER AS fetch_count,
        (db.change_count + CASE WHEN f.outcome = 'ok' AND f.content_hash IS DISTINCT FROM db.content_hash
                                THEN 1 ELSE 0 END)::INTEGER AS change_count,
        coalesce(f.http_status, db.http_status) AS http_status,
        CASE WHEN f.outcome = 'ok' THEN f.content_hash ELSE db.content_hash END AS content_hash,
        CASE WHEN f.outcome = 'ok' THEN f.simhash ELSE db.simhash END AS simhash,
        CASE WHEN f.outcome = 'ok' THEN f.etag ELSE db.etag END AS etag,
        CASE WHEN f.outcome = 'ok' THEN f.last_modified ELSE db.last_modified END AS last_modified,
        CASE WHEN db.lease_segment = $segment THEN NULL ELSE db.lease_until END AS lease_until,
        CASE WHEN db.lease_segment = $segment THEN NULL ELSE db.lease_segment END AS lease_segment)
    FROM read_parquet('{old}') db
    LEFT JOIN (SELECT * FROM read_parquet('{fetched}') WHERE host_hash % {buckets} = {bucket}) f ON db.url = f.url
    UNION ALL BY NAME
    {new_rows}"""


def duck_new_rows(bucket: int, buckets: int, old: str, links: str, config) -> str:
    from cycles.crawldb import new_url_rows_sql
    return new_url_rows_sql(f"(SELECT l.* FROM read_parquet('{links}') l ANTI JOIN read_parquet('{old}') o USING (url) "
                            f"WHERE l.host_hash % {buckets} = {bucket})", config)


def polars_bucket(pl, old: str, fetched: str, links: str, bucket: int, buckets: int, segment: str, now, config,
                  schema_names: list[str]):
    db = pl.scan_parquet(old)
    f = (pl.scan_parquet(fetched).filter(pl.col("host_hash") % buckets == bucket)
         .select(["url", "outcome", "fetched_at", "http_status", "etag", "last_modified", "content_hash", "simhash"])
         .rename(lambda c: c if c == "url" else "f_" + c))
    j = db.join(f, on="url", how="left")
    outcome = pl.col("f_outcome")
    ok = outcome == "ok"
    released = pl.col("lease_segment") == segment
    merged = j.with_columns(
        pl.when(outcome.is_null() | (outcome == "deferred")).then(pl.col("status"))
          .when(ok).then(pl.lit("fetched")).when(outcome == "not_modified").then(pl.lit("not_modified"))
          .when(outcome.is_in(["gone", "client_error"])).then(pl.lit("gone")).otherwise(pl.lit("error")).alias("status"),
        pl.coalesce("f_fetched_at", "last_fetched").alias("last_fetched"),
        pl.when(outcome.is_null()).then(pl.col("next_fetch"))
          .otherwise(pl.coalesce(pl.col("f_fetched_at"), pl.lit(now))
                     + pl.duration(seconds=pl.col("fetch_interval_s"))).alias("next_fetch"),
        (pl.col("fetch_count") + outcome.is_in(["ok", "not_modified"]).fill_null(False).cast(pl.Int32)).alias("fetch_count"),
        (pl.col("change_count") + (ok & pl.col("f_content_hash").ne_missing(pl.col("content_hash")))
         .fill_null(False).cast(pl.Int32)).alias("change_count"),
        pl.coalesce("f_http_status", "http_status").alias("http_status"),
        pl.when(ok).then(pl.col("f_content_hash")).otherwise(pl.col("content_hash")).alias("content_hash"),
        pl.when(ok).then(pl.col("f_simhash")).otherwise(pl.col("simhash")).alias("simhash"),
        pl.when(ok).then(pl.col("f_etag")).otherwise(pl.col("etag")).alias("etag"),
        pl.when(ok).then(pl.col("f_last_modified")).otherwise(pl.col("last_modified")).alias("last_modified"),
        pl.when(released).then(None).otherwise(pl.col("lease_until")).alias("lease_until"),
        pl.when(released).then(None).otherwise(pl.col("lease_segment")).alias("lease_segment"),
    ).select(schema_names)
    u = config.update
    new = (pl.scan_parquet(links).filter(pl.col("host_hash") % buckets == bucket)
           .join(db.select("url"), on="url", how="anti")
           .select(
               "url", "host", "host_hash", pl.lit("unfetched").alias("status"), pl.lit(now).alias("first_seen"),
               pl.lit(None, pl.Datetime("us", "UTC")).alias("last_fetched"), pl.lit(now).alias("next_fetch"),
               pl.lit(u.default_interval_s, pl.Int32).alias("fetch_interval_s"), pl.lit(0, pl.Int16).alias("retries"),
               pl.lit(0, pl.Int32).alias("fetch_count"), pl.lit(0, pl.Int32).alias("change_count"),
               pl.col("score").cast(pl.Float32), pl.col("depth").cast(pl.Int16)))
    return pl.concat([merged, new], how="diagonal_relaxed").select(schema_names).sort(["host", "url"])


def run_variant(args) -> None:
    """Child: merge every bucket with one variant; print RESULT json."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    from cycles import schema
    from cycles.config import Config

    config = Config()
    work = Path(args.store) / ".polars-bench"
    meta = json.loads((work / "inputs.json").read_text())
    buckets, segment = meta["buckets"], meta["segment"]
    now = dt.datetime.fromisoformat(meta["now"])
    out = work / "out" / args.variant
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    fetched, links = str(work / "fetched.parquet"), str(work / "links.parquet")
    names = schema.CRAWLDB.names
    started = time.perf_counter()
    checks = []
    if args.variant.startswith("duckdb"):
        import duckdb
        con = duckdb.connect()
        con.execute(f"SET memory_limit = '{args.memory_limit}'")
        con.execute(f"SET threads = {args.threads}")
        con.execute(f"SET temp_directory = '{work / 'spill'}'")
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET preserve_insertion_order = false")
        for bucket in range(buckets):
            old = meta["files"][bucket]
            if args.variant == "duckdb-full":
                from cycles.update.update import transition_sql
                body = f"""SELECT {transition_sql(config)}
                    FROM read_parquet('{old}') db LEFT JOIN (SELECT * FROM read_parquet('{fetched}')
                         WHERE host_hash % {buckets} = {bucket}) f ON db.url = f.url
                    UNION ALL BY NAME {duck_new_rows(bucket, buckets, old, links, config)}"""
            else:
                body = DUCK_SELECT.format(old=old, fetched=fetched, buckets=buckets, bucket=bucket,
                                          new_rows=duck_new_rows(bucket, buckets, old, links, config))
            sql = f"SELECT {', '.join(names)} FROM ({body}) ORDER BY host, url"
            params = {"now": now, "segment": segment}
            if args.variant == "duckdb-full":
                params.pop("segment")
            path = out / f"bucket-{bucket:05d}.parquet"
            if args.variant == "duckdb-copy":
                con.execute(f"COPY ({sql}) TO '{path}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880)", params)
            else:
                reader = con.sql(sql, params=params).to_arrow_reader(64 * 1024)
                with pq.ParquetWriter(path, schema.CRAWLDB, compression="zstd") as writer:
                    for batch in reader:
                        writer.write_table(pa.Table.from_batches([batch]).select(names).cast(schema.CRAWLDB))
            checks.append(bucket_check(path))
    else:
        import polars as pl
        for bucket in range(buckets):
            lf = polars_bucket(pl, meta["files"][bucket], fetched, links, bucket, buckets, segment, now, config, names)
            path = out / f"bucket-{bucket:05d}.parquet"
            if args.variant == "polars-stream":
                lf.sink_parquet(path, compression="zstd", engine="streaming")
            else:
                table = lf.collect(engine="streaming").to_arrow()
                with pq.ParquetWriter(path, schema.CRAWLDB, compression="zstd") as writer:
                    for batch in table.to_batches(64 * 1024):
                        writer.write_table(pa.Table.from_batches([batch]).select(names).cast(schema.CRAWLDB))
            checks.append(bucket_check(path))
    seconds = time.perf_counter() - started
    size = sum(p.stat().st_size for p in out.glob("*.parquet"))
    hwm = next(int(ln.split()[1]) * 1024 for ln in Path("/proc/self/status").read_text().splitlines()
               if ln.startswith("VmHWM:"))
    print("RESULT " + json.dumps({"seconds": round(seconds, 2), "bytes": size, "checks": checks, "peak_rss": hwm}),
          flush=True)


def bucket_check(path: Path) -> list:
    import duckdb
    rows, digest = duckdb.sql(f"SELECT count(*), bit_xor(hash(url)) FROM read_parquet('{path}')").fetchall()[0]
    return [rows, str(digest)]


def prepare_inputs(args) -> dict:
    """Write the shared inputs once; returns their description."""
    import datetime as dt
    from collections import Counter

    import pyarrow.parquet as pq

    from cycles import schema
    from cycles.config import Config
    from cycles.store import Manifest, Store
    from cycles.update.update import prepare_outlinks, read_segment_table
    from cycles.urls import host_hashes

    store = Store(args.store)
    current = store.manifest("crawldb").version
    versions = sorted(p.name for p in store.path("crawldb").iterdir() if p.is_dir() and p.name.startswith("v"))
    older = [v for v in versions if v != current]
    if not older:
        raise SystemExit("no older crawl DB version: run bench_scale.py with --keep (update keeps two versions)")
    version = args.version or older[-1]
    segment = args.segment or [s for s in store.segments() if store.segment_state(s) == "updated"][-1]
    seg_dir = store.segment_dir(segment)
    files = sorted(str(p) for p in store.path("crawldb", version).glob("bucket-*.parquet"))
    work = store.path(".polars-bench")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    fetched = read_segment_table(seg_dir / "fetched", schema.FETCHED, [
        "url", "host", "outcome", "fetched_at", "http_status", "etag", "last_modified", "redirect_to",
        "error", "content_hash", "simhash"])
    fetched = fetched.append_column("host_hash", host_hashes(fetched["host"]))
    pq.write_table(fetched, work / "fetched.parquet", compression="zstd")
    t0 = time.perf_counter()
    links = prepare_outlinks(read_segment_table(seg_dir / "outlinks", schema.OUTLINKS), Config(), Counter())
    prep_s = time.perf_counter() - t0
    pq.write_table(links, work / "links.parquet", compression="zstd")
    meta = {"version": version, "segment": segment, "buckets": len(files), "files": files,
            "now": dt.datetime.now(dt.timezone.utc).isoformat(), "prepare_outlinks_s": round(prep_s, 2),
            "fetched": fetched.num_rows, "links": links.num_rows,
            "db_rows": sum(pq.read_metadata(f).num_rows for f in files)}
    (work / "inputs.json").write_text(json.dumps(meta))
    return meta


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", required=True)
    p.add_argument("--src", help="directory holding the cycles package (default: this checkout)")
    p.add_argument("--version", help="crawl DB version to merge into (default: newest non-current)")
    p.add_argument("--segment", help="segment (default: newest updated)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--memory-limit", default="4GB")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--repeat", type=int, default=1, help="runs per variant (best wall time kept)")
    p.add_argument("--variant", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.variant:
        run_variant(args)
        return
    meta = prepare_inputs(args)
    print(f"inputs: {meta['db_rows']:,} crawl DB rows in {meta['buckets']} buckets, {meta['fetched']:,} results, "
          f"{meta['links']:,} prepared outlinks (prepare_outlinks took {meta['prepare_outlinks_s']} s)", flush=True)
    results = {}
    for variant in args.variants.split(","):
        best = None
        for _ in range(args.repeat):
            env = dict(os.environ, POLARS_MAX_THREADS=str(args.threads))
            cmd = [sys.executable, __file__, "--store", args.store, "--src", _src_dir(), "--threads", str(args.threads),
                   "--memory-limit", args.memory_limit, "--variant", variant]
            t0 = time.monotonic()
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            output = proc.stdout.read()
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.monotonic() - t0
            if os.waitstatus_to_exitcode(status) != 0:
                print(f"{variant}: failed\n{output[-3000:]}", flush=True)
                break
            res = json.loads([ln for ln in output.splitlines() if ln.startswith("RESULT ")][-1][7:])
            res.update(wall=round(wall, 2), cpu=round(usage.ru_utime + usage.ru_stime, 1),
                       rss=res["peak_rss"], load=round(os.getloadavg()[0], 1))  # own VmHWM, not ru_maxrss
            if best is None or res["wall"] < best["wall"]:
                best = res
        if best is None:
            continue
        results[variant] = best
        print(f"{variant:>14}: {best['wall']:7.1f} s wall ({best['seconds']:.1f} s merging), CPU {best['cpu']:7.1f} s, "
              f"peak RSS {best['rss'] / 2**30:5.2f} GiB, output {best['bytes'] / 1e9:.2f} GB, load {best['load']}",
              flush=True)
    base = results.get("duckdb-arrow", {}).get("checks")
    for variant, res in results.items():
        if variant != "duckdb-full" and base is not None and res["checks"] != base:
            print(f"WARNING: {variant} wrote different rows than duckdb-arrow", flush=True)
    shutil.rmtree(Path(args.store) / ".polars-bench" / "out", ignore_errors=True)


if __name__ == "__main__":
    main()
