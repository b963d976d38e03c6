"""The optimal schedule's plan: one aggregate over the whole crawl DB (before) against a rate
histogram per bucket summed by the coordinator (update's ``bucket_rate_histogram`` tasks,
cycles/update/schedule.py), on a synthetic crawl DB of ``--buckets`` Parquet files.

Prints process CPU time (DuckDB on one thread) of each way, the coordinator's share of the
per-bucket way (summing the histograms and solving μ) and the two μ, with the load average.

    .venv/bin/python scripts/bench/scale.py plan --rows 2000000 --buckets 8
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import duckdb

from benchlib import REPO as ROOT  # noqa: E402,F401  (the repository on sys.path)

from cycles.config import Config  # noqa: E402
from cycles.update.schedule import RateHistogram, multiplier_for, rate_histogram, refresh_multiplier  # noqa: E402
from cycles.update.update import CHANGED_SQL, SEEN_SQL  # noqa: E402


def write_crawldb(con, folder: Path, rows: int, buckets: int) -> None:
    """Pages refetched 1..20 times over 30 days with 0..n changes, a tenth never refetched, a
    fifth with a Last-Modified sum; a result for every tenth page, half of them changed."""
    con.execute(f"""CREATE TABLE db AS SELECT 'http://h' || (i % 5000) || '.example/' || i AS url,
        (i % 5000) % {buckets} AS bucket, CASE WHEN i % 10 = 0 THEN 1 ELSE 2 + i % 20 END AS fetch_count,
        CASE WHEN i % 10 = 0 THEN 0 ELSE (i * 7919) % (2 + i % 20) END AS change_count,
        TIMESTAMPTZ '2026-01-01 00:00:00+00' AS first_fetched,
        TIMESTAMPTZ '2026-01-31 00:00:00+00' AS last_fetched, (86400 + i % (13 * 86400))::INTEGER AS fetch_interval_s,
        'h' || (i % 3) AS content_hash, CASE WHEN i % 5 = 0 THEN 86400 * (1 + i % 9) END::BIGINT AS unchanged_s
        FROM range({rows}) t(i)""")
    con.execute("""CREATE TABLE fetched AS SELECT url, bucket, 'ok' AS outcome,
        CASE WHEN hash(url) % 2 = 0 THEN 'new' ELSE content_hash END AS content_hash,
        TIMESTAMPTZ '2026-02-01 00:00:00+00' AS fetched_at, NULL::VARCHAR AS last_modified
        FROM db WHERE hash(url) % 10 = 0""")
    for b in range(buckets):
        con.execute(f"COPY (SELECT * EXCLUDE (bucket) FROM db WHERE bucket = {b}) TO '{folder}/db-{b}.parquet'")
        con.execute(f"COPY (SELECT * EXCLUDE (bucket) FROM fetched WHERE bucket = {b}) TO '{folder}/f-{b}.parquet'")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--buckets", type=int, default=8)
    args = parser.parse_args()
    config = Config()
    config.update.schedule = "optimal"
    config.update.refresh_budget_per_cycle = args.rows // 2  # a day: half the pages (μ inside its bounds)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        write_crawldb(con, folder, args.rows, args.buckets)
        con.close()
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET threads = 1")
        t = time.process_time()
        whole = refresh_multiplier(con, f"read_parquet('{folder}/db-*.parquet')", config,
                                   f"read_parquet('{folder}/f-*.parquet')", SEEN_SQL, CHANGED_SQL)
        whole_s = time.process_time() - t
        t = time.process_time()
        parts = [rate_histogram(con, f"read_parquet('{folder}/db-{b}.parquet')", config.update,
                                f"read_parquet('{folder}/f-{b}.parquet')", SEEN_SQL, CHANGED_SQL)
                 for b in range(args.buckets)]
        tasks_s = time.process_time() - t
        t = time.process_time()
        summed = multiplier_for(config, sum(parts, RateHistogram()))
        coordinator_s = time.process_time() - t
    rows_per_bucket = sum(len(p.counts) for p in parts) / len(parts)
    print(f"plan over {args.rows} rows in {args.buckets} buckets (load {os.getloadavg()[0]:.1f}): "
          f"whole-DB aggregate {whole_s:.2f} CPU-s in the coordinator; per bucket {tasks_s:.2f} CPU-s in "
          f"{args.buckets} tasks ({tasks_s / args.buckets:.2f} each, {rows_per_bucket:.0f} histogram rows each), "
          f"coordinator {1000 * coordinator_s:.1f} CPU-ms; mu {whole:.6g} / {summed:.6g} s")


if __name__ == "__main__":
    main()
