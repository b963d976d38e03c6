"""Scale benchmark of generate and update over synthetic crawl DBs (issue #5, first part).

Usage::

    .venv/bin/python scripts/bench_scale.py --sizes 1M,10M,100M [--root /tmp/bench-scale]
        [--memory-limit 4GB] [--threads 2] [--bucket-rows 1600000] [--buckets N]
        [--cap 100] [--top-n-pct 10] [--text-chars 1000] [--keep] [--resume] [--max-temp 25GB]
        [--py-spy] [--src DIR] [--built DIR]

For each size it

1. builds a crawl DB directly as Parquet in the store layout (``crawldb/<version>/
   bucket-NNNNN.parquet`` + ``crawldb/CURRENT``, schema.CRAWLDB, rows sorted by host, url
   inside a bucket, bucket = host_hash % buckets) with DuckDB ``range()``-style vectorised
   string building — no Python loop per row. ~1M hosts (``min(1M, size/10)``) with a
   log-normal number of URLs each (a few big hosts, many small), URLs of 60-100 chars
   (paths with segments, some queries), a mix of statuses and histories, and a host DB;
2. runs ``generate`` (top_n = 10 % of the size, a per-host cap) in a fresh subprocess;
3. writes what a fetch of that segment would leave: ``fetched/part-NNNNN-cNNNNNN.parquet``
   chunks of ``fetch.flush_pages`` rows (mostly ok with content hash and SimHash, some
   304/404/5xx/redirect/...), ``outlinks/`` (10 % of the DB size: half known URLs, half
   new ones on known and new hosts, a few % nofollow, some with fragments, tracking
   parameters, images, mailto), ``hosts/part-NNNNN.parquet``, ``stats/fetch.json`` and
   the ``_FETCHED`` marker;
4. runs ``update`` of that segment in a fresh subprocess;

With ``--linkdb-links-per-url F`` (default 1) step 1 also writes a link DB as earlier cycles
would have left it (cycles/update/linkgraph.py): F × size (URL, linking host) pairs on
existing URLs, their per-URL counts, the host graph and ranks, so that generate ranks by links
over it and update's link-graph step (column ``link s``: the ``merge_link_bucket`` tasks and
the coordinator's ``start_linkdb`` + ``install_linkdb``) merges the segment into a graph that
grows with the crawl (0: no prior link DB);

and prints seconds, peak RSS (the child's own VmHWM: ``ru_maxrss`` from ``os.wait4`` would
include the parent's high-water mark, which a child inherits through fork + exec), seconds per
million URLs and the per-URL time ratio of the largest size to the smallest. Each child
also reports where its time went (phase timers wrapped around the library functions; the
DuckDB part of a bucket write is the time spent pulling batches from the query, the rest
is the Arrow cast and the Parquet write). ``--py-spy`` records each stage with py-spy
(``raw`` collapsed stacks, summarised per line of cycles/).

The stage children can also be run by hand::

    .venv/bin/python scripts/bench_scale.py --stage generate --store DIR --top-n N --cap 100
    .venv/bin/python scripts/bench_scale.py --stage update --store DIR --segment ID

Synthetic stores live under ``--root`` and are deleted after each size unless ``--keep``.
``--built DIR`` keeps each store as built (before generate) in ``DIR/<size>`` and starts later
runs, of this script or of scripts/bench_cost.py, from a hard-linked copy of it.
``--src DIR`` measures another copy of the code, e.g. a commit exported with
``git archive <commit> cycles | tar -x -C DIR``, while others edit this checkout;
columns of a newer schema the builder does not know are written as nulls.
Disk: about 97 bytes per crawl DB row per version (9.7 GB at 100M, schema 2026-12) and 43
bytes per link DB pair (4.3 GB at 100M); a stage keeps up to three versions while it runs,
plus DuckDB's spill (``--max-temp`` caps it). The 100M build took 34 min for the crawl DB and
14 min for the link DB on the shared 2-core machine (load 4-16).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import importlib
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path



def _src_dir() -> str:
    """The crawler code to measure: --src DIR (e.g. a `git archive` of a commit), else this checkout."""
    if "--src" in sys.argv[:-1]:
        return str(Path(sys.argv[sys.argv.index("--src") + 1]).resolve())
    return str(Path(__file__).resolve().parents[2])


sys.path.insert(0, _src_dir())
from benchlib import human, own_peak_rss, parse_size  # noqa: E402  (own_peak_rss: VmHWM, not the parent's ru_maxrss)

import duckdb  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from cycles.tables.segment import segment_state, write_stage_marker  # noqa: E402
from cycles.tables import schema  # noqa: E402
from cycles.config import Config  # noqa: E402
from cycles.storage.store import Manifest, Store, utcnow  # noqa: E402
from cycles.urls import host_hashes  # noqa: E402

WORDS = ("news sport world local river blue green market city garden health travel music "
         "science money tech style food home house energy water forest mountain ocean north "
         "south east west spring summer winter autumn story report review guide photo video "
         "event school family policy culture nature planet light night morning future history "
         "county state union island valley bridge street avenue harbor lake field tower star "
         "international entertainment environment technology government university restaurant "
         "photography development information management community education insurance "
         "conference architecture collection department experience automotive marketplace "
         "championship literature newsletter residential").split()
TLDS = ["com", "com", "com", "org", "net", "de", "co.uk", "fr", "io", "info", "nl", "it", "es", "jp"]
SECTIONS = ["news", "blog", "articles", "products", "category", "docs", "forum", "en", "shop", "wiki"]


def sql_list(items) -> str:
    return "[" + ", ".join("'" + i + "'" for i in items) + "]"


def connect(threads: int, memory_limit: str, spill: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"SET enable_progress_bar = {str(sys.stdout.isatty()).lower()}")  # not into logs
    spill.mkdir(parents=True, exist_ok=True)
    con.execute(f"SET memory_limit = '{memory_limit}'")
    con.execute(f"SET threads = {threads}")
    con.execute(f"SET temp_directory = '{spill}'")
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = false")
    # Deterministic synthetic values: every random-looking field is hash(ids, salt).
    con.execute(f"CREATE MACRO w(x) AS ({sql_list(WORDS)})[1 + (x % {len(WORDS)})::BIGINT]")
    con.execute(f"CREATE MACRO tld(x) AS ({sql_list(TLDS)})[1 + (x % {len(TLDS)})::BIGINT]")
    con.execute(f"CREATE MACRO sect(x) AS ({sql_list(SECTIONS)})[1 + (x % {len(SECTIONS)})::BIGINT]")
    con.execute("CREATE MACRO u01(x) AS ((x % 1000000)::DOUBLE / 1e6)")
    con.execute("""CREATE MACRO host_of(hid) AS
        (CASE hash(hid::BIGINT, 11) % 6 WHEN 0 THEN '' WHEN 1 THEN 'blog.' WHEN 2 THEN 'shop.'
              ELSE 'www.' END)
        || w(hash(hid::BIGINT, 12)) || w(hash(hid::BIGINT, 13)) || '-' || hid::VARCHAR
        || '.' || tld(hash(hid::BIGINT, 14))""")
    con.execute("""CREATE MACRO scheme_of(hid) AS
        CASE WHEN hash(hid::BIGINT, 15) % 4 = 0 THEN 'http://' ELSE 'https://' END""")
    # A path unique per (hid, j): every variant ends in the token j, after a separator no
    # word contains. Queries are already in canonical (sorted) order.
    con.execute("""CREATE MACRO path_of(hid, j) AS CASE WHEN j = 0 THEN '/' ELSE
        CASE hash(hid::BIGINT, j::BIGINT, 21) % 10
            WHEN 0 THEN '/' || sect(hash(hid::BIGINT, 22)) || '/' || (2010 + j % 15)::VARCHAR || '/'
                || lpad((1 + j % 12)::VARCHAR, 2, '0') || '/' || w(hash(hid::BIGINT, j::BIGINT, 23)) || '-'
                || w(hash(hid::BIGINT, j::BIGINT, 24)) || '-' || w(hash(hid::BIGINT, j::BIGINT, 25)) || '-'
                || j::VARCHAR || '.html'
            WHEN 1 THEN '/' || sect(hash(hid::BIGINT, 22)) || '/' || (2010 + j % 15)::VARCHAR || '/'
                || w(hash(hid::BIGINT, j::BIGINT, 23)) || '-' || w(hash(hid::BIGINT, j::BIGINT, 24)) || '-'
                || w(hash(hid::BIGINT, j::BIGINT, 25)) || '-' || w(hash(hid::BIGINT, j::BIGINT, 26)) || '-'
                || j::VARCHAR
            WHEN 2 THEN '/' || sect(hash(hid::BIGINT, 22)) || '/' || w(hash(hid::BIGINT, j::BIGINT, 23)) || '/'
                || w(hash(hid::BIGINT, j::BIGINT, 24)) || '-' || w(hash(hid::BIGINT, j::BIGINT, 25)) || '-'
                || j::VARCHAR || '.html'
            WHEN 3 THEN '/' || sect(hash(hid::BIGINT, 22)) || '/' || w(hash(hid::BIGINT, j::BIGINT, 23)) || '-'
                || w(hash(hid::BIGINT, j::BIGINT, 24)) || '/' || j::VARCHAR
            WHEN 4 THEN '/product/' || w(hash(hid::BIGINT, j::BIGINT, 23)) || '-' || w(hash(hid::BIGINT, j::BIGINT, 24))
                || '-' || j::VARCHAR || '?color=' || w(hash(hid::BIGINT, j::BIGINT, 25)) || '&size='
                || (hash(hid::BIGINT, j::BIGINT, 26) % 50)::VARCHAR
            WHEN 5 THEN '/index.php?id=' || j::VARCHAR || '&lang=en&page=' || (j % 7)::VARCHAR
            WHEN 6 THEN '/' || w(hash(hid::BIGINT, j::BIGINT, 23)) || '/' || w(hash(hid::BIGINT, j::BIGINT, 24))
                || '/' || w(hash(hid::BIGINT, j::BIGINT, 25)) || '/' || j::VARCHAR || '/'
            WHEN 7 THEN '/search?page=' || (j % 40)::VARCHAR || '&q=' || w(hash(hid::BIGINT, j::BIGINT, 23))
                || '+' || w(hash(hid::BIGINT, j::BIGINT, 24)) || '&start=' || j::VARCHAR
            ELSE '/' || sect(hash(hid::BIGINT, 22)) || '/' || w(hash(hid::BIGINT, j::BIGINT, 23)) || '-'
                || w(hash(hid::BIGINT, j::BIGINT, 24)) || '-' || w(hash(hid::BIGINT, j::BIGINT, 25)) || '_'
                || j::VARCHAR || '.htm'
        END END""")
    return con


# --- 1. the crawl DB ------------------------------------------------------------------------
def host_sizes(size: int, hosts: int, rng: np.random.Generator) -> np.ndarray:
    """URLs per host: log-normal (sigma 1.4), at least 1, summing exactly to size."""
    raw = rng.lognormal(0.0, 1.4, hosts)
    counts = np.maximum(1, np.floor(raw / raw.sum() * size)).astype(np.int64)
    diff = size - int(counts.sum())
    order = np.argsort(-counts)
    if diff > 0:
        counts[order[: diff % hosts]] += 1
        counts += diff // hosts
    while diff < 0:  # take from the biggest hosts, never below 1
        take = min(-diff, hosts)
        idx = order[:take]
        can = counts[idx] > 1
        counts[idx[can]] -= 1
        diff += int(can.sum())
    assert counts.sum() == size and counts.min() >= 1
    return counts


def build_hosts(con, n_hosts: int, extra: int = 0) -> pa.Table:
    """hid, host, host_hash for hosts 0 .. n_hosts+extra-1."""
    table = con.sql(f"SELECT range AS hid, scheme_of(range) AS scheme, host_of(range) AS host "
                    f"FROM range({n_hosts + extra})").to_arrow_table()
    return table.append_column("host_hash", host_hashes(table["host"]))


DB_SELECT = """
    SELECT {columns}
    FROM (SELECT *,
        CASE WHEN fetch_count > 0 THEN least(last_fetched, first_seen + INTERVAL 1 DAY) END AS first_fetched,
        -- due: unfetched always (the backlog); the others ~8 %; ~1 % leased by a live segment
        CASE WHEN status = 'unfetched' THEN first_seen
             WHEN u01(hash(hid, j, 5)) < 0.08 THEN $now - to_seconds((hash(hid, j, 6) % (10 * 86400))::BIGINT)
             ELSE $now + to_seconds((3600 + hash(hid, j, 6) % (60 * 86400))::BIGINT) END AS next_fetch,
        CASE WHEN u01(hash(hid, j, 7)) < 0.01 THEN $now + INTERVAL 3 HOUR END AS lease_until,
        CASE WHEN u01(hash(hid, j, 7)) < 0.01 THEN '20240101T000000000000Z-abcdef' END AS lease_segment,
        CASE WHEN status = 'unfetched' THEN 14 * 86400
             ELSE (7200 * (1 << (hash(hid, j, 8) % 11)::INTEGER))::INTEGER END AS fetch_interval_s,
        (CASE status WHEN 'error' THEN 1 + hash(hid, j, 9) % 2 WHEN 'dead' THEN 3 ELSE 0 END)::SMALLINT AS retries,
        (hash(hid, j, 10) % (fetch_count + 1))::INTEGER AS change_count,
        CASE WHEN fetch_count > 0 THEN last_fetched - to_seconds((hash(hid, j, 11) % (30 * 86400))::BIGINT) END AS last_changed,
        (CASE status WHEN 'unfetched' THEN NULL WHEN 'robots_denied' THEN NULL WHEN 'not_modified' THEN 304
             WHEN 'gone' THEN 404 WHEN 'redirected' THEN 301 WHEN 'error' THEN 503 WHEN 'dead' THEN 503
             ELSE 200 END)::SMALLINT AS http_status,
        CASE WHEN content_hash IS NOT NULL THEN hash(url, 12) END AS minhash,
        CASE WHEN content_hash IS NOT NULL AND hash(hid, j, 13) % 2 = 0
             THEN '"' || substr(md5(url || 'e'), 1, 16) || '"' END AS etag,
        CASE WHEN content_hash IS NOT NULL AND hash(hid, j, 14) % 10 < 3
             THEN strftime(last_fetched - INTERVAL 5 DAY, '%a, %d %b %Y %H:%M:%S GMT') END AS last_modified,
        (CASE WHEN status = 'unfetched' THEN 1.0 / (1 + hash(hid, j, 15) % 6)
              ELSE u01(hash(hid, j, 16)) * u01(hash(hid, j, 17)) * 2 END)::FLOAT AS score,
        (hash(hid, j, 15) % 6)::SMALLINT AS depth,
        CASE WHEN status = 'redirected' THEN split_part(url, '/', 1) || '//' || host || '/'
             || w(hash(hid, j, 18)) || '/' || j::VARCHAR END AS redirect_to,
        CASE WHEN status = 'duplicate' THEN split_part(url, '/', 1) || '//' || host || '/' END AS duplicate_of,
        CASE status WHEN 'error' THEN 'HTTP 503' WHEN 'dead' THEN 'timeout: no response in 30 s' END AS error
    FROM (SELECT *,
        coalesce(last_fetched, $now) - to_seconds((hash(hid, j, 2) % (365 * 86400))::BIGINT) AS first_seen
    FROM (SELECT *,
        CASE WHEN status = 'unfetched' THEN NULL
             ELSE $now - to_seconds((hash(hid, j, 3) % (90 * 86400))::BIGINT) END AS last_fetched,
        CASE WHEN status = 'unfetched' THEN 0 ELSE 1 + (hash(hid, j, 4) % 20)::INTEGER END AS fetch_count,
        CASE WHEN status IN ('fetched', 'not_modified', 'duplicate') THEN md5(url) END AS content_hash
    FROM (SELECT hid, j, host, host_hash, scheme || host || path_of(hid, j) AS url,
          CASE WHEN u < 0.12 THEN 'unfetched' WHEN u < 0.80 THEN 'fetched' WHEN u < 0.87 THEN 'not_modified'
               WHEN u < 0.91 THEN 'gone' WHEN u < 0.94 THEN 'redirected' WHEN u < 0.96 THEN 'error'
               WHEN u < 0.97 THEN 'robots_denied' WHEN u < 0.98 THEN 'dead' WHEN u < 0.99 THEN 'duplicate'
               ELSE 'skipped' END AS status
    FROM (SELECT *, u01(hash(hid, j, 1)) AS u FROM rows)))))
"""


DB_KNOWN = ("url host host_hash status first_seen first_fetched last_fetched next_fetch fetch_interval_s retries "
            "fetch_count change_count last_changed http_status content_hash minhash etag last_modified score "
            "depth lease_until lease_segment redirect_to duplicate_of error").split()


def write_reader(path: Path, reader, table_schema: pa.Schema) -> int:
    """Like Store.write_batches: one Parquet file, zstd, page checksums, a row group per batch."""
    tmp = path.with_name("." + path.name + ".tmp")
    rows = 0
    with pq.ParquetWriter(tmp, table_schema, compression="zstd", write_page_checksum=True) as writer:
        for batch in reader:
            if batch.num_rows:
                writer.write_table(pa.Table.from_batches([batch]).select(table_schema.names).cast(table_schema))
                rows += batch.num_rows
    os.replace(tmp, path)
    return rows


def computed_column(name: str) -> str:
    """SQL for a crawl DB column DB_SELECT does not produce: derived as the crawler does, else NULL."""
    if name == "pattern_hash":
        from cycles.tables.crawldb import pattern_hash_sql
        return f"{pattern_hash_sql('url')} AS pattern_hash"
    return f"NULL AS {name}"


def write_live_lease(store: Store, folder: Path, now: dt.datetime, con) -> int:
    """~1 % of the due URLs handed to a segment that is still fetching (its fetch list is
    the lease, cycles/tables/leases.py), so generate's anti-join on leases has work to do.
    Crawl DBs of the older schema carry these leases in lease_until instead."""
    if "lease_until" in schema.CRAWLDB.names:
        return 0
    leased = con.sql(f"""SELECT {", ".join(schema.FETCHLIST.names)} FROM read_parquet('{folder}/*.parquet')
                         WHERE next_fetch <= $now AND hash(url, 7) % 100 = 0""", params={"now": now}).to_arrow_table()
    segment = "20240101T000000000000Z-leased"
    seg = store.segment_dir(segment, must_exist=False)
    store.write_table(seg / "fetchlist" / "part-00000.parquet", leased, schema.FETCHLIST)
    write_stage_marker(store, segment, "generated", {"segment": segment, "urls": leased.num_rows,
                                              "lease_until": (now + dt.timedelta(hours=3)).isoformat()})
    return leased.num_rows


def build_db(store: Store, size: int, n_hosts: int, buckets: int, con, seed: int = 1) -> dict:
    """Write a crawl DB of ``size`` URLs over ``n_hosts`` hosts and a host DB; return facts."""
    started = time.monotonic()
    rng = np.random.default_rng(seed)
    now = utcnow()
    hosts = build_hosts(con, n_hosts)
    counts = host_sizes(size, n_hosts, rng)
    hh = hosts["host_hash"].to_numpy()
    bucket_of = (hh % np.uint64(buckets)).astype(np.int64)
    version, folder = store.new_version_dir("crawldb")
    rows_total = 0
    # Columns this benchmark does not know (a newer schema) are written as NULL.
    known = set(DB_KNOWN)
    db_select = DB_SELECT.format(columns=", ".join(
        n if n in known else computed_column(n) for n in schema.CRAWLDB.names))
    for bucket in range(buckets):
        hids = np.flatnonzero(bucket_of == bucket)
        n = counts[hids]
        total = int(n.sum())
        rep = np.repeat(np.arange(len(hids)), n)
        starts = np.repeat(np.cumsum(n) - n, n)
        j = np.arange(total, dtype=np.int64) - starts
        rows = pa.table({
            "hid": pa.array(hids[rep].astype(np.int64)), "j": pa.array(j),
            "host": hosts["host"].take(pa.array(hids[rep])),
            "scheme": hosts["scheme"].take(pa.array(hids[rep])),
            "host_hash": pa.array(hh[hids[rep]], pa.uint64()),
        })
        con.register("rows", rows)
        reader = con.sql(f"SELECT * FROM ({db_select}) ORDER BY host, url",
                         params={"now": now}).to_arrow_reader(64 * 1024)
        rows_total += write_reader(store.bucket_file(folder, bucket), reader, schema.CRAWLDB)
        con.unregister("rows")
    store.install("crawldb", Manifest(version=version, buckets=buckets, schema_version=schema.SCHEMA_VERSION,
                                      written_at=now.isoformat(), written_by="bench_scale"), keep=2)
    # Host DB: 90 % of hosts known (robots.txt fetched, last request time).
    con.register("hosts_all", hosts)
    host_rows = con.sql(f"""
        SELECT host, $now - to_seconds((hash(hid, 30) % (30 * 86400))::BIGINT) AS last_request_end,
               (CASE WHEN hash(hid, 31) % 10 < 8 THEN 200 ELSE 404 END)::SMALLINT AS robots_status,
               $now - to_seconds((hash(hid, 32) % 86400)::BIGINT) AS robots_fetched_at,
               CASE WHEN hash(hid, 31) % 10 < 8 THEN encode('User-agent: *' || chr(10) || 'Disallow: /'
                    || w(hash(hid, 33)) || '/' || chr(10) || 'Disallow: /search' || chr(10)
                    || 'Sitemap: https://' || host || '/sitemap.xml' || chr(10)) END AS robots_body,
               1.0::FLOAT AS crawl_delay_s, (host_hash % {buckets})::BIGINT AS bucket
        FROM hosts_all WHERE hash(hid, 34) % 10 < 9 ORDER BY host""", params={"now": now}).to_arrow_table()
    hversion, hfolder = store.new_version_dir("hostdb")
    # Bucketed like the crawl DB (cycles/tables/hostdb.py): host_hash % buckets, sorted by host.
    # One stable sort by bucket and a slice each (host order kept inside a bucket), not a
    # filter of every host per bucket.
    order = np.argsort(host_rows["bucket"].to_numpy(), kind="stable")
    host_bucket = host_rows["bucket"].to_numpy()[order]
    host_rows = fill_schema(host_rows.drop_columns(["bucket"]).take(pa.array(order)), schema.HOSTS)
    bounds = np.searchsorted(host_bucket, np.arange(buckets + 1))
    for bucket in range(buckets):
        store.write_table(store.bucket_file(hfolder, bucket),
                          host_rows.slice(bounds[bucket], bounds[bucket + 1] - bounds[bucket]), schema.HOSTS)
    store.install("hostdb", Manifest(version=hversion, buckets=buckets, schema_version=schema.SCHEMA_VERSION,
                                     written_at=now.isoformat(), written_by="bench_scale"), keep=2)
    con.unregister("hosts_all")
    stats = con.sql(f"""SELECT count(*) AS n, avg(length(url)) AS avg_len, min(length(url)) AS min_len,
                               max(length(url)) AS max_len,
                               count(*) FILTER (WHERE next_fetch <= $now) AS due
                        FROM read_parquet('{folder}/*.parquet')""", params={"now": utcnow()}).fetchall()[0]
    assert stats[0] == size == rows_total, (stats, size, rows_total)
    leased = write_live_lease(store, folder, now, con)
    return {"build_s": round(time.monotonic() - started, 1), "hosts": n_hosts, "buckets": buckets,
            "avg_url_len": round(stats[1], 1), "min_url_len": stats[2], "max_url_len": stats[3],
            "due": stats[4], "leased": leased, "max_host_urls": int(counts.max()), "db_bytes": du(folder),
            "_hosts": hosts, "_counts": counts}


def fill_schema(table: pa.Table, table_schema: pa.Schema) -> pa.Table:
    """Add the columns of a newer schema this benchmark does not know, as nulls."""
    for f in table_schema:
        if f.name not in table.column_names:
            table = table.append_column(f.name, pa.nulls(table.num_rows, f.type))
    return table.select(table_schema.names).cast(table_schema)


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


# --- 3. the fetch output of a segment --------------------------------------------------------
FETCHED_SELECT = """
    SELECT url, host, outcome,
        CASE WHEN outcome NOT IN ('robots_denied', 'deferred') THEN $now - to_seconds((hash(url, 41) % 7200)::BIGINT) END AS fetched_at,
        (CASE outcome WHEN 'ok' THEN 200 WHEN 'not_modified' THEN 304 WHEN 'gone' THEN 404
             WHEN 'server_error' THEN 503 WHEN 'redirect' THEN 301 WHEN 'not_html' THEN 200 END)::SMALLINT AS http_status,
        CASE outcome WHEN 'ok' THEN 'text/html; charset=utf-8' WHEN 'not_html' THEN 'application/pdf' END AS content_type,
        CASE WHEN outcome = 'ok' THEN (8000 + hash(url, 42) % 120000)::BIGINT ELSE 0 END AS body_bytes,
        CASE WHEN outcome = 'ok' AND hash(url, 43) % 2 = 0 THEN '"' || substr(md5(url || 'f'), 1, 16) || '"' END AS etag,
        CASE WHEN outcome = 'ok' AND hash(url, 44) % 10 < 3 THEN strftime($now - INTERVAL 1 DAY, '%a, %d %b %Y %H:%M:%S GMT') END AS last_modified,
        CASE WHEN outcome = 'redirect' THEN split_part(url, '/', 1) || '//' || host || '/moved/' || substr(md5(url), 1, 8) END AS redirect_to,
        CASE outcome WHEN 'server_error' THEN 'HTTP 503' WHEN 'network_error' THEN 'timeout after 30 s'
             WHEN 'deferred' THEN 'host set aside' END AS error,
        CASE WHEN outcome = 'ok' THEN w(hash(url, 45)) || ' ' || w(hash(url, 46)) || ' - ' || host END AS title,
        NULL::VARCHAR AS text,  -- filled chunk by chunk when written (keeps the builder's memory small)
        -- a fifth of the ok pages unchanged (same hash as in the crawl DB), 3 % exact copies
        -- of their host's root page, the rest changed
        CASE WHEN outcome = 'ok' THEN CASE WHEN hash(url, 49) % 100 < 3 THEN md5(root)
                                           WHEN hash(url, 49) % 5 = 0 THEN md5(url) ELSE md5(url || 'v2') END END AS content_hash,
        -- 3 % near-duplicates (one bit off) of their host's root page
        CASE WHEN outcome = 'ok' THEN CASE WHEN hash(url, 49) % 100 < 3 THEN hash(root, 12)
                                           WHEN hash(url, 49) % 100 < 6 THEN xor(hash(root, 12), 1::UBIGINT << (hash(url, 54) % 64)::INTEGER)
                                           ELSE hash(url, 50) END END AS minhash,
        NULL::VARCHAR AS canonical, CASE WHEN outcome = 'ok' THEN hash(url, 51) % 50 = 0 END AS noindex,
        CASE WHEN outcome IN ('ok', 'not_modified', 'gone', 'server_error', 'redirect', 'not_html')
             THEN 'warc/' || chunk_name || '.warc.gz' END AS warc_file,
        CASE WHEN outcome IN ('ok', 'not_modified', 'gone', 'server_error', 'redirect', 'not_html')
             THEN (rn % $chunk) * 20000 END AS warc_offset,
        CASE WHEN outcome IN ('ok', 'not_modified', 'gone', 'server_error', 'redirect', 'not_html')
             THEN (2000 + hash(url, 52) % 30000)::BIGINT END AS warc_length,
        (50 + hash(url, 53) % 3000)::INTEGER AS duration_ms,
        part, chunk, rn, depth
    FROM (
        SELECT *, 'part-' || lpad(part::VARCHAR, 5, '0') || '-c' || lpad((1 + rn // $chunk)::VARCHAR, 6, '0') AS chunk_name,
               1 + rn // $chunk AS chunk,
            CASE WHEN u < 0.80 THEN 'ok' WHEN u < 0.87 THEN 'not_modified' WHEN u < 0.91 THEN 'gone'
                 WHEN u < 0.93 THEN 'server_error' WHEN u < 0.95 THEN 'network_error' WHEN u < 0.97 THEN 'redirect'
                 WHEN u < 0.98 THEN 'not_html' WHEN u < 0.99 THEN 'robots_denied' ELSE 'deferred' END AS outcome
        FROM (SELECT *, u01(hash(url, 40)) AS u, split_part(url, '/', 1) || '//' || host || '/' AS root,
                     (row_number() OVER (PARTITION BY part ORDER BY host, url)) - 1 AS rn FROM fetchlist)
    )
    ORDER BY part, rn"""


NOISY_LINK_COLUMNS = """
            CASE WHEN noise < 0.01 THEN 'mailto:info@' || host_of(hid)
                 WHEN noise < 0.03 THEN scheme_of(hid) || host_of(hid) || '/images/' || w(hash(hid, j, 60)) || '-' || j::VARCHAR || '.jpg'
                 WHEN noise < 0.08 THEN u || '#' || w(hash(hid, j, 61))
                 WHEN noise < 0.11 THEN u || CASE WHEN contains(u, '?') THEN '&' ELSE '?' END || 'utm_source=newsletter'
                 WHEN noise < 0.13 THEN scheme_of(hid) || upper(host_of(hid)) || path_of(hid, j)
                 ELSE u END AS url,
            w(hash(hid, j, 62)) || ' ' || w(hash(hid, j, 63)) AS anchor,
            noise > 0.97 AS nofollow"""
"""The url, anchor and nofollow columns of a synthetic outlink to page ``j`` of host ``hid``
(``u`` its canonical URL): a mailto: link, an image, a fragment, a tracking parameter or an
upper-case host in the proportions real pages have (scripts/bench_outlinks.py uses it too)."""


def build_linkdb(store: Store, hosts: pa.Table, counts: np.ndarray, buckets: int, per_url: float, con,
                 seed: int = 3) -> dict:
    """A link DB as earlier cycles would have left it: ``per_url`` × size (url, from_host)
    pairs, each target an existing URL drawn uniformly, each linking host another host drawn
    like link sources (big hosts more often); per-URL counts, the host graph and ranks.

    Drawn and written bucket by bucket, so time and memory stay linear in the crawl size: a
    bucket's targets are its own URLs (so its inlink files need only its pairs) and gets
    Binomial(pairs, bucket URLs / size) of the pairs, which is what the uniform draw over all
    URLs gave it. One table of all the pairs, scanned once per bucket, had made the build
    quadratic (~40 s a bucket at 100 M, 64 buckets) and held 100 M string pairs. A host edge
    (from_host, to_host) belongs to the bucket of to_host, so each bucket's distinct edges
    are distinct overall: they are kept as host ids (16 bytes an edge, spillable) and named
    only for the one sorted write at the end."""
    from cycles.update import linkgraph

    started = time.monotonic()
    rng = np.random.default_rng(seed)
    size, n_hosts = int(counts.sum()), len(counts)
    offsets = np.cumsum(counts) - counts
    hh = hosts["host_hash"].to_numpy()
    host_bucket = (hh % np.uint64(buckets)).astype(np.int64)
    bucket_urls = np.bincount(host_bucket, weights=counts, minlength=buckets).astype(np.int64)
    bucket_pairs = rng.multinomial(int(size * per_url), bucket_urls / size)
    version, folder = store.new_version_dir(linkgraph.LINKDB)
    con.execute("CREATE OR REPLACE TEMP TABLE link_edges (from_hid BIGINT, hid BIGINT)")
    rows = 0
    for bucket in range(buckets):
        hids = np.flatnonzero(host_bucket == bucket)  # sorted: the bucket's URLs in global order
        b_offsets = np.cumsum(counts[hids]) - counts[hids]
        g = rng.integers(0, max(1, int(bucket_urls[bucket])), int(bucket_pairs[bucket]))  # 0 pairs: empty files
        at = np.searchsorted(b_offsets, g, side="right") - 1
        hid, j = hids[at], g - b_offsets[at]
        from_hid = np.searchsorted(offsets, rng.integers(0, size, len(g)), side="right") - 1
        from_hid = np.where(from_hid == hid, (from_hid + 1) % n_hosts, from_hid)  # never its own host
        con.register("pairs", pa.table({"hid": pa.array(hid.astype(np.int64)), "j": pa.array(j.astype(np.int64)),
                                        "from_hid": pa.array(from_hid.astype(np.int64)),
                                        "host_hash": pa.array(hh[hid], pa.uint64())}))
        con.execute("""CREATE OR REPLACE TEMP TABLE link_pairs AS
            SELECT DISTINCT scheme_of(hid) || host_of(hid) || path_of(hid, j) AS url, host_hash,
                   host_of(from_hid) AS from_host FROM pairs""")
        con.execute("INSERT INTO link_edges SELECT DISTINCT from_hid, hid FROM pairs")
        con.unregister("pairs")
        rows += write_reader(linkgraph.inlinks_file(folder, bucket, store), con.sql(
            "SELECT url, host_hash, from_host FROM link_pairs ORDER BY url, from_host"
        ).to_arrow_reader(64 * 1024), schema.LINK_INLINKS)
        write_reader(linkgraph.urls_file(folder, bucket, store), con.sql(
            """SELECT url, any_value(host_hash) AS host_hash, count(*)::INTEGER AS inlink_hosts FROM link_pairs
               GROUP BY url ORDER BY url""").to_arrow_reader(64 * 1024), schema.LINK_URLS)
        con.execute("DROP TABLE link_pairs")
    edges = write_reader(folder / "host_edges.parquet", con.sql(
        "SELECT host_of(from_hid) AS from_host, host_of(hid) AS to_host FROM link_edges ORDER BY ALL"
    ).to_arrow_reader(64 * 1024), schema.LINK_HOST_EDGES)
    # Ranks are recomputed by update from the edges; these only give generate something to join.
    write_reader(folder / "hosts.parquet", con.sql("""
        SELECT host_of(hid) AS host, 1.0 / count(*) OVER () AS rank, 1.0::DOUBLE AS importance, inlink_hosts FROM (
            SELECT hid, max(inlink_hosts)::INTEGER AS inlink_hosts FROM (
                SELECT hid, count(*) AS inlink_hosts FROM link_edges GROUP BY hid
                UNION ALL SELECT DISTINCT from_hid AS hid, 0 AS inlink_hosts FROM link_edges) GROUP BY hid)
        ORDER BY host""").to_arrow_reader(64 * 1024), schema.LINK_HOSTS)
    con.execute("DROP TABLE link_edges")
    store.install(linkgraph.LINKDB, Manifest(version=version, buckets=buckets, schema_version=schema.SCHEMA_VERSION,
                                             written_at=utcnow().isoformat(), written_by="bench_scale"), keep=2)
    return {"linkdb_s": round(time.monotonic() - started, 1), "linkdb_inlinks": rows, "linkdb_host_edges": edges,
            "linkdb_bytes": du(folder)}


def link_targets(rng: np.random.Generator, counts: np.ndarray, n_links: int) -> tuple[np.ndarray, np.ndarray]:
    """(hid, j) of ``n_links`` outlink targets over hosts of ``counts`` URLs each: half known
    URLs (uniformly random existing ones, j < count), half new ones — 70 % new pages of
    known hosts (drawn like links: big hosts more often), 30 % pages of hosts never seen
    (10 % as many new hosts as known ones); ~2 links per new URL."""
    size, n_hosts = int(counts.sum()), len(counts)
    half = n_links // 2
    offsets = np.cumsum(counts) - counts
    g = rng.integers(0, size, half)
    k_hid = np.searchsorted(offsets, g, side="right") - 1
    k_j = g - offsets[k_hid]
    n_new = n_links - half
    on_known = rng.random(n_new) < 0.7
    g2 = rng.integers(0, size, n_new)
    n_hid = np.where(on_known, np.searchsorted(offsets, g2, side="right") - 1,
                     n_hosts + rng.integers(0, max(1, n_hosts // 10), n_new))
    base = np.where(on_known, counts[np.minimum(n_hid, n_hosts - 1)], 0)
    span = np.where(on_known, np.maximum(2, counts[np.minimum(n_hid, n_hosts - 1)] // 4), 20)
    n_j = base + (rng.random(n_new) * span).astype(np.int64)
    return np.concatenate([k_hid, n_hid]).astype(np.int64), np.concatenate([k_j, n_j]).astype(np.int64)


def build_segment(store: Store, segment: str, size: int, n_hosts: int, hosts: pa.Table, counts: np.ndarray,
                  con, chunk_rows: int, text_chars: int, seed: int = 2, links_per_page: float = 0) -> dict:
    """Write fetched/, outlinks/, hosts/, stats/ and _FETCHED for a generated segment.
    Outlinks: ``links_per_page`` × the pages fetched, or (0) 10 % of the DB size."""
    started = time.monotonic()
    now = utcnow()
    seg = store.segment_dir(segment)
    parts = sorted((seg / "fetchlist").glob("part-*.parquet"))
    fetchlist = pa.concat_tables([
        pq.read_table(p, columns=["url", "host", "depth"]).append_column(
            "part", pa.array(np.full(pq.read_metadata(p).num_rows, int(p.stem.split("-")[1]), np.int32)))
        for p in parts])
    con.register("fetchlist", fetchlist)
    fetched = con.sql(FETCHED_SELECT, params={"now": now, "chunk": chunk_rows}).to_arrow_table()
    con.unregister("fetchlist")
    for sub in ("fetched", "outlinks", "hosts", "stats", "warc"):
        (seg / sub).mkdir(parents=True, exist_ok=True)
    # chunk boundaries (fetched is ordered by part, rn)
    part_np = fetched["part"].to_numpy()
    chunk_np = fetched["chunk"].to_numpy()
    key = part_np.astype(np.int64) * 10_000_000 + chunk_np
    bounds = np.flatnonzero(np.diff(key)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(key)]])
    names = [f"part-{part_np[s]:05d}-c{chunk_np[s]:06d}" for s in starts]
    fetched_out = fill_schema(fetched.select([n for n in schema.FETCHED.names if n in fetched.column_names]), schema.FETCHED)
    for name, s, e in zip(names, starts, ends):
        con.register("chunk_rows", fetched_out.slice(s, e - s))
        chunk = con.sql("""SELECT * REPLACE (CASE WHEN outcome = 'ok' THEN
                               repeat(w(hash(url, 47)) || ' ' || w(hash(url, 48)) || ' the of and ',
                                      ($text_chars // 30 * (0.5 + u01(hash(url, 55))))::BIGINT) END AS text)
                           FROM chunk_rows""", params={"text_chars": text_chars}).to_arrow_table()
        pq.write_table(chunk.cast(schema.FETCHED), seg / "fetched" / f"{name}.parquet", compression="zstd")
    con.unregister("chunk_rows")
    del fetched_out

    # Outlinks: 10 % of the DB size (or links_per_page a fetched page: the same segment at
    # every size), found on the ok pages, in the chunk of their page.
    rng = np.random.default_rng(seed)
    n_links = int(links_per_page * fetched.num_rows) if links_per_page > 0 else size // 10
    ok_idx = np.flatnonzero(pc.equal(fetched["outcome"], "ok").to_numpy(zero_copy_only=False))
    src = np.sort(rng.choice(ok_idx, n_links))
    hid, j = link_targets(rng, counts, n_links)
    links = pa.table({"src": pa.array(src), "hid": pa.array(hid), "j": pa.array(j),
                      "noise": pa.array(rng.random(n_links))})
    src_tab = pa.table({"src": pa.array(np.arange(fetched.num_rows)), "from_url": fetched["url"],
                        "part": fetched["part"], "chunk": fetched["chunk"], "sdepth": fetched["depth"]})
    con.register("links", links)
    con.register("src_tab", src_tab)
    outlinks = con.sql(f"""
        SELECT from_url,
            {NOISY_LINK_COLUMNS},
            (least(sdepth, 19) + 1)::SMALLINT AS depth, part, chunk
        FROM (SELECT l.*, scheme_of(hid) || host_of(hid) || path_of(hid, j) AS u, s.from_url, s.part, s.chunk, s.sdepth
              FROM links l JOIN src_tab s USING (src))
        ORDER BY part, chunk""").to_arrow_table()
    con.unregister("links")
    con.unregister("src_tab")
    lkey = outlinks["part"].to_numpy().astype(np.int64) * 10_000_000 + outlinks["chunk"].to_numpy()
    lb = np.flatnonzero(np.diff(lkey)) + 1
    lstarts = np.concatenate([[0], lb])
    lends = np.concatenate([lb, [len(lkey)]])
    out = fill_schema(outlinks.select([n for n in schema.OUTLINKS.names if n in outlinks.column_names]), schema.OUTLINKS)
    for s, e in zip(lstarts, lends):
        name = f"part-{lkey[s] // 10_000_000:05d}-c{lkey[s] % 10_000_000:06d}"
        pq.write_table(out.slice(s, e - s), seg / "outlinks" / f"{name}.parquet", compression="zstd")

    # hosts/: one row per host of each partition, robots.txt refetched for ~1/10 of them
    con.register("fetched_t", fetched.select(["host", "part", "fetched_at"]))
    for part in sorted(set(part_np.tolist())):
        host_rows = con.sql(f"""
            SELECT host, max(fetched_at) + INTERVAL 1 SECOND AS last_request_end,
                   CASE WHEN hash(host, 70) % 10 = 0 THEN 200 END::SMALLINT AS robots_status,
                   CASE WHEN hash(host, 70) % 10 = 0 THEN min(fetched_at) - INTERVAL 2 SECOND END AS robots_fetched_at,
                   CASE WHEN hash(host, 70) % 10 = 0 THEN encode('User-agent: *' || chr(10) || 'Disallow: /private/' || chr(10)) END AS robots_body,
                   CASE WHEN hash(host, 70) % 10 = 0 THEN 1.0 END::FLOAT AS crawl_delay_s
            FROM fetched_t WHERE part = {part} GROUP BY host ORDER BY host""").to_arrow_table()
        store.write_table(seg / "hosts" / f"part-{part:05d}.parquet", fill_schema(host_rows, schema.HOSTS), schema.HOSTS)
    con.unregister("fetched_t")
    outcome_counts = collections.Counter(fetched["outcome"].to_pylist())
    counters = {f"fetch/outcome/{k}": v for k, v in outcome_counts.items()}
    counters["fetch/outlinks"] = outlinks.num_rows
    store.write_json(seg / "stats" / "fetch.json", dict(sorted(counters.items())))
    write_stage_marker(store, segment, "fetched", {"segment": segment, "fetched_at": utcnow().isoformat(),
                                            "seconds": 0.0, "partitions": len(parts),
                                            "requests": fetched.num_rows, "synthetic": True})
    return {"segment_s": round(time.monotonic() - started, 1), "fetched": fetched.num_rows,
            "outlinks": outlinks.num_rows, "fetched_files": len(names), "outlink_files": len(lstarts),
            "segment_bytes": du(seg)}


# --- a built store shared between runs (--built DIR) -----------------------------------------
def copy_store(source: Path, target: Path) -> None:
    """``cp -al source target``, then the copy's lock files (``.lock``, cycles/storage/locks.py)
    unlinked: a hard-linked lock file is one flock for both stores, and two benchmarks on copies
    of one store stopped each other with LockedError (session 14). The copy makes its own on
    first use; the source's stay."""
    subprocess.run(["cp", "-al", str(source), str(target)], check=True)
    for lock in target.rglob(".lock"):
        lock.unlink()


def built_store(args, size: int, n_hosts: int, buckets: int, root: Path, con) -> tuple[dict, pa.Table, np.ndarray]:
    """Make ``root`` a freshly built synthetic store (crawl DB, host DB, link DB); return
    its facts, hosts and per-host URL counts.

    With ``--built DIR`` the store as built is kept in ``DIR/<size>`` and later runs (of this
    script or of scripts/bench_cost.py, which pass the same DIR) start from a hard-linked
    copy of it instead of building again: at 100 M URLs the build is most of a run. Sharing
    inodes is safe because the store never changes a file in place: every write goes to a
    temporary name and is renamed over (cycles/storage/store.py ``_rename_durably``), and pruning
    an old version in the copy only unlinks the copy's names. The hosts and counts are
    rebuilt, not stored: they are deterministic (seed 1), as ``--resume`` relies on."""
    built = Path(args.built) / human(size) if getattr(args, "built", None) else None
    params = {"size": size, "hosts": n_hosts, "buckets": buckets, "linkdb_links_per_url": args.linkdb_links_per_url,
              "schema_version": schema.SCHEMA_VERSION}
    facts_file = built.with_name(built.name + ".json") if built else None
    shutil.rmtree(root, ignore_errors=True)
    if built and facts_file.exists() and json.loads(facts_file.read_text()).get("params") == params:
        print(f"[{human(size)}] copying the built store {built} (hard links) to {root}", flush=True)
        root.parent.mkdir(parents=True, exist_ok=True)
        copy_store(built, root)
        facts = dict(json.loads(facts_file.read_text())["facts"], reused_build=str(built))
        return facts, build_hosts(con, n_hosts), host_sizes(size, n_hosts, np.random.default_rng(1))
    print(f"[{human(size)}] building crawl DB: {size:,} URLs, {n_hosts:,} hosts, {buckets} buckets", flush=True)
    facts = build_db(Store(root), size, n_hosts, buckets, con)
    hosts, counts = facts.pop("_hosts"), facts.pop("_counts")
    if args.linkdb_links_per_url > 0:
        facts.update(build_linkdb(Store(root), hosts, counts, buckets, args.linkdb_links_per_url, con))
    if built:
        shutil.rmtree(built, ignore_errors=True)
        built.parent.mkdir(parents=True, exist_ok=True)
        copy_store(root, built)
        facts_file.write_text(json.dumps({"params": params, "facts": facts}, indent=1))
        print(f"[{human(size)}]   kept as built in {built} for later runs (--built)", flush=True)
    return facts, hosts, counts


# --- 2/4. stage children: run one stage, report phases ----------------------------------------
class Phases:
    def __init__(self):
        self.t = collections.defaultdict(float)
        self.n = collections.Counter()
        self.peak: dict[str, float] = {}

    def wrap(self, module, name: str, label: str | None = None):
        fn = getattr(module, name)
        label = label or name

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            hwm0 = own_peak_rss()
            try:
                return fn(*args, **kwargs)
            finally:
                self.t[label] += time.perf_counter() - t0
                self.n[label] += 1
                hwm1 = own_peak_rss()
                if hwm1 > hwm0:  # which phase raised the peak, and to what (GiB)
                    self.peak[label] = round(hwm1 / 2**30, 2)
        setattr(module, name, timed)
        return fn

    def report(self) -> dict:
        return {k: round(v, 3) for k, v in sorted(self.t.items(), key=lambda kv: -kv[1])}


def time_bucket_tasks(module, phases: Phases) -> None:
    """Time the stage's bucket tasks as one phase (they may run in pool processes, where
    the other phase timers do not reach)."""
    if not hasattr(module, "bucket_executor"):
        return
    original = module.bucket_executor

    def bucket_executor(*args, **kwargs):
        executor = original(*args, **kwargs)
        run = executor.map

        def timed_map(fn, tasks):
            t0 = time.perf_counter()
            try:
                return run(fn, tasks)
            finally:
                # one phase per task function: the link DB merges are the link-graph step's
                phases.t[f"{fn.__name__} tasks ({type(executor).__name__}, {executor.workers} workers)"] += \
                    time.perf_counter() - t0
        executor.map = timed_map
        return executor
    module.bucket_executor = bucket_executor


def _instrument_writes(phases: Phases) -> None:
    """Split every bucket write into DuckDB (pulling batches: the query runs lazily) and
    Arrow cast + Parquet write (the rest of Store.write_batches)."""
    original = Store.write_batches

    def write_batches(self, path, batches, table_schema, *args, **kwargs):
        pulled_before = phases.t["  bucket query (DuckDB)"]

        def pulled():
            it = iter(batches)
            while True:
                t0 = time.perf_counter()
                try:
                    batch = next(it)
                except StopIteration:
                    phases.t["  bucket query (DuckDB)"] += time.perf_counter() - t0
                    return
                phases.t["  bucket query (DuckDB)"] += time.perf_counter() - t0
                yield batch
        t0 = time.perf_counter()
        rows = original(self, path, pulled(), table_schema, *args, **kwargs)
        total = time.perf_counter() - t0
        phases.t["  bucket write_batches (total)"] += total
        phases.t["  bucket cast+parquet write"] += total - (phases.t["  bucket query (DuckDB)"] - pulled_before)
        return rows
    Store.write_batches = write_batches


def stage_config(args) -> Config:
    config = Config()
    config.db.duckdb_memory_limit = args.memory_limit
    config.db.duckdb_threads = args.threads
    config.generate.max_urls_per_host = args.cap
    config.generate.partitions = args.partitions
    return config


def run_stage(args) -> None:
    store = Store(args.store)
    config = stage_config(args)
    phases = Phases()
    _instrument_writes(phases)
    if args.max_temp:  # a guard for a shared machine: DuckDB's default spill cap is 90 % of free disk
        import cycles.tables.crawldb as crawldb
        import cycles.generate.generate as gen_mod
        import cycles.update.update as upd_mod
        original_connect = crawldb.connect

        def capped_connect(store_, config_, *more):
            con = original_connect(store_, config_, *more)
            con.execute(f"SET max_temp_directory_size = '{args.max_temp}'")
            return con
        crawldb.connect = gen_mod.connect = upd_mod.connect = capped_connect
    started = time.perf_counter()
    if args.stage == "generate":
        from cycles.generate import generate as gen
        for name in ("select_due", "write_fetchlists", "replace_crawldb", "current_bucket_files", "leased_urls_sql"):
            if hasattr(gen, name):  # the code measured may be older or newer than this script
                phases.wrap(gen, name)
        time_bucket_tasks(gen, phases)
        result = gen.generate(store, config, top_n=args.top_n)
        out = {"segment": result.segment, "urls": result.urls, "hosts": result.hosts}
    elif args.stage == "compact":  # crawl compact: the crawl DB's buckets (--all: every one with deltas or unsorted)
        from cycles.commands import compact as cmp
        phases.wrap(cmp, "compact_buckets")
        result = cmp.compact(store, config, everything=args.all, links=False)
        out = {"buckets": result.buckets, "versions": result.versions, "rows": result.rows}
    elif args.stage == "links":  # the link DB's pending deltas merged, the host graph ranked
        from cycles.update import linkgraph
        for name in ("start_linkdb", "install_linkdb"):
            phases.wrap(linkgraph, name)
        with store.lock("crawldb", db=config.db):
            out = {"counters": dict(linkgraph.merge_pending_links(store, config))}
    else:
        from cycles.update import update as upd
        for name in ("read_segment_table", "prepare_outlinks", "merge_hostdb", "host_hashes",
                     "current_bucket_files", "stored_pages", "find_duplicates", "feed_candidates",
                     "write_feed_batch", "load_fetch_results", "update_linkdb", "refresh_multiplier", "plan_refresh",
                     "route_segment", "start_linkdb", "install_linkdb"):
            if hasattr(upd, name):
                phases.wrap(upd, name)
        original_replace = getattr(upd, "replace_crawldb", None)

        def replace(store_, config_, build_bucket, **kwargs):
            def timed_build(con, old, bucket):
                t0 = time.perf_counter()
                try:
                    return build_bucket(con, old, bucket)
                finally:
                    phases.t["  build_bucket (anti-join + trap caps)"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            try:
                return original_replace(store_, config_, timed_build, **kwargs)
            finally:
                phases.t["replace_crawldb"] += time.perf_counter() - t0
        if original_replace is not None:
            upd.replace_crawldb = replace
        for name in ("write_routed", "install_version"):
            if hasattr(upd, name):
                phases.wrap(upd, name)
        time_bucket_tasks(upd, phases)
        # inside prepare_outlinks: the Python normalisation loop
        # where redirect targets are normalised: update itself, or its routing tasks (cycles/update/route.py)
        norm_module = upd if hasattr(upd, "Normalizer") else importlib.import_module("cycles.update.route")
        orig_norm = norm_module.Normalizer

        class TimedNormalizer(orig_norm):
            def normalize(self, url, base=None):
                t0 = time.perf_counter()
                try:
                    return super().normalize(url, base)
                finally:
                    phases.t["  Normalizer.normalize"] += time.perf_counter() - t0
                    phases.n["  Normalizer.normalize"] += 1
        if args.fine:
            norm_module.Normalizer = TimedNormalizer
            phases.wrap(norm_module, "url_host", "  url_host (per new link)")
        result = upd.update_segment(store, config, args.segment)
        out = {"applied": result.applied, "counters": dict(result.counters)}
    out["seconds"] = round(time.perf_counter() - started, 3)
    out["peak_rss"] = own_peak_rss()
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # bucket tasks' pool workers
    out["own_cpu_s"] = round(own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime, 1)  # right also under py-spy
    out["phases"] = phases.report()
    out["calls"] = dict(phases.n)
    out["peak_after"] = phases.peak
    print("RESULT " + json.dumps(out, default=str), flush=True)


def child(cmd: list[str], log: Path, py_spy: Path | None = None) -> tuple[float, int, dict]:
    """Run a stage in a fresh process; (wall seconds, peak RSS bytes, its RESULT dict).

    The RESULT dict also gets ``cpu_s`` (user + system time of the child, which is less
    disturbed than wall time when other work shares the machine) and ``load`` (the 1-minute
    load average before and after)."""
    load0 = os.getloadavg()[0]
    if py_spy is not None:
        cmd = [str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw", "-r", "20",
               "-o", str(py_spy), "--subprocesses", "--"] + cmd
    started = time.monotonic()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
        sampler = TreeRss(proc.pid)
        _, status, usage = os.wait4(proc.pid, 0)
        sampler.stop()
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    text = log.read_text()
    if proc.returncode != 0:
        raise SystemExit(f"stage failed ({proc.returncode}): {' '.join(cmd)}\n{text[-3000:]}")
    result = json.loads([ln for ln in text.splitlines() if ln.startswith("RESULT ")][-1][7:])
    result["cpu_s"] = result.get("own_cpu_s") or round(usage.ru_utime + usage.ru_stime, 1)
    result["ru_maxrss"] = usage.ru_maxrss * 1024  # may include the parent's peak (fork + exec)
    result["load"] = [round(load0, 1), round(os.getloadavg()[0], 1)]
    result["tree_peak_rss"] = sampler.peak
    # The stage's bucket tasks may run in pool processes: count them too.
    return wall, max(result.get("peak_rss") or usage.ru_maxrss * 1024, sampler.peak), result


class TreeRss:
    """Samples (every 0.2 s) the summed RSS of a process and all its descendants: a
    stage's pool workers hold memory the stage's own VmHWM does not show."""

    def __init__(self, pid: int):
        import threading
        self.pid, self.peak, self._done = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(0.2):
            self.peak = max(self.peak, sum(self._rss(p) for p in self._tree(self.pid)))

    def _tree(self, pid: int) -> list[int]:
        pids, todo = [], [pid]
        while todo:
            p = todo.pop()
            pids.append(p)
            for task in Path(f"/proc/{p}/task").glob("*/children"):
                try:
                    todo += [int(c) for c in task.read_text().split()]
                except OSError:
                    pass
        return pids

    @staticmethod
    def _rss(pid: int) -> int:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def summarise_py_spy(path: Path, top: int = 25) -> list[tuple[str, float]]:
    """Share of samples per innermost cycles/ (or scripts/) frame line."""
    if not path.exists():
        return []
    per_line = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        try:
            n = int(count)
        except ValueError:
            continue
        total += n
        frames = stack.split(";")
        own = next((f for f in reversed(frames) if "cycles/" in f), frames[-1] if frames else "?")
        per_line[own.strip()] += n
    return [(k, round(100 * v / total, 1)) for k, v in per_line.most_common(top)]


def bench_size(args, size: int) -> dict:
    root = Path(args.root) / human(size)
    store = Store(root)
    n_hosts = min(1_000_000, size // 10)
    buckets = args.buckets or max(8, 2 ** round(math.log2(max(1, size / args.bucket_rows))))
    con = connect(args.threads, args.memory_limit, Path(args.root) / ".duckdb-tmp")
    resume = args.resume and any(segment_state(store, s) in ("generated", "fetched") for s in store.segments())
    if resume:
        # The crawl DB and generate's segment are there (a run stopped after generate):
        # rebuild the same hosts and counts (deterministic) and go on with the segment.
        print(f"[{human(size)}] resuming in {root}: segment output and update", flush=True)
        hosts = build_hosts(con, n_hosts)
        counts = host_sizes(size, n_hosts, np.random.default_rng(1))
        buckets = store.manifest("crawldb").buckets
        facts = {"hosts": n_hosts, "buckets": buckets, "resumed": True,
                 "db_bytes": du(store.path("crawldb", store.manifest("crawldb").version))}
    else:
        facts, hosts, counts = built_store(args, size, n_hosts, buckets, root, con)
        print(f"[{human(size)}]   {json.dumps(facts)}", flush=True)
    base = [sys.executable, str(Path(__file__).resolve()), "--src", _src_dir(), "--store", str(root), "--memory-limit", args.memory_limit,
            "--threads", str(args.threads), "--cap", str(args.cap), "--partitions", str(args.partitions)]
    if args.fine:
        base.append("--fine")
    if args.max_temp:
        base += ["--max-temp", args.max_temp]
    top_n = int(size * args.top_n_pct / 100)
    spy = (lambda s: Path(args.root) / f"py-spy-{human(size)}-{s}.txt") if args.py_spy else (lambda s: None)
    if resume:
        g_log = Path(args.root) / f"generate-{human(size)}.log"
        g = json.loads([ln for ln in g_log.read_text().splitlines() if ln.startswith("RESULT ")][-1][7:])
        g_wall, g_rss = g["seconds"], g["peak_rss"]
        g.setdefault("cpu_s", g.get("own_cpu_s", float("nan")))
        g.setdefault("load", [])
        seg_dir = store.segment_dir(g["segment"])
        for sub in ("fetched", "outlinks", "hosts", "stats", "warc"):
            shutil.rmtree(seg_dir / sub, ignore_errors=True)
        (seg_dir / "_FETCHED").unlink(missing_ok=True)
    else:
        if incremental():  # once: the built bases sorted by due time, as compaction leaves them
            s_wall, s_rss, s = child(base + ["--stage", "compact", "--all"], Path(args.root) / f"sort-{human(size)}.log")
            print(f"[{human(size)}] first compaction (bases sorted by next_fetch, once): {s_wall:.1f} s "
                  f"(CPU {s['own_cpu_s']} s), {s_rss / 2**30:.2f} GiB, {s['buckets']} buckets", flush=True)
        g_wall, g_rss, g = child(base + ["--stage", "generate", "--top-n", str(top_n)],
                                 Path(args.root) / f"generate-{human(size)}.log", spy("generate"))
    print(f"[{human(size)}] generate: {g_wall:.1f} s (CPU {g['cpu_s']} s, load {g['load']}), {g_rss / 2**30:.2f} GiB, {g['urls']:,} URLs of "
          f"{g['hosts']:,} hosts; phases {g['phases']}", flush=True)
    seg = build_segment(store, g["segment"], size, n_hosts, hosts, counts, con, args.chunk_rows, args.text_chars,
                        links_per_page=args.links_per_page)
    print(f"[{human(size)}]   segment {json.dumps(seg)}", flush=True)
    del hosts, counts
    con.close()
    u_wall, u_rss, u = child(base + ["--stage", "update", "--segment", g["segment"]],
                             Path(args.root) / f"update-{human(size)}.log", spy("update"))
    print(f"[{human(size)}] update: {u_wall:.1f} s (CPU {u['cpu_s']} s, load {u['load']}), {u_rss / 2**30:.2f} GiB; "
          f"phases {u['phases']}", flush=True)
    print(f"[{human(size)}]   peak RSS (GiB) raised by: generate {g.get('peak_after')}, update {u.get('peak_after')}", flush=True)
    print(f"[{human(size)}]   counters {json.dumps(u['counters'])}", flush=True)
    c_wall = c_rss = l_wall = l_rss = float("nan")
    c = {}
    if incremental() and not args.no_after_stages:
        # The deltas this update wrote merged into new bases (forced: the default policy
        # compacts a bucket once its deltas pass db.compact_ratio of its base), then the link
        # DB's pending deltas merged and the host graph ranked (update.link_rank_interval_s).
        c_wall, c_rss, c = child(base + ["--stage", "compact", "--all"], Path(args.root) / f"compact-{human(size)}.log")
        print(f"[{human(size)}] compact --all: {c_wall:.1f} s (CPU {c['own_cpu_s']} s), {c_rss / 2**30:.2f} GiB, "
              f"{c['buckets']} buckets, {c['rows']:,} rows", flush=True)
        l_wall, l_rss, l_out = child(base + ["--stage", "links"], Path(args.root) / f"links-{human(size)}.log")
        print(f"[{human(size)}] link DB merge + PageRank: {l_wall:.1f} s (CPU {l_out['own_cpu_s']} s), "
              f"{l_rss / 2**30:.2f} GiB; {json.dumps(l_out['counters'])}", flush=True)
    if args.py_spy:
        for stage in ("generate", "update"):
            print(f"[{human(size)}] py-spy {stage} (share of samples by innermost cycles/ line):")
            for frame, pct in summarise_py_spy(spy(stage)):
                print(f"    {pct:5.1f}%  {frame}")
    row = {"size": size, "buckets": buckets, **facts, **seg, "generate_s": g_wall, "generate_rss": g_rss,
           "update_s": u_wall, "update_rss": u_rss, "generate_cpu": g["cpu_s"], "update_cpu": u["cpu_s"],
           "generate_load": g["load"], "update_load": u["load"], "generate_phases": g["phases"], "update_phases": u["phases"],
           "selected": g["urls"], "db_bytes_after": du(root / "crawldb"), "compact_s": c_wall, "compact_rss": c_rss,
           "compact_cpu": c.get("own_cpu_s", float("nan")), "links_s": l_wall, "links_rss": l_rss,
           "links_cpu": l_out.get("own_cpu_s", float("nan")) if c else float("nan"),
           "compact_rows": c.get("rows", 0), "update_counters": u["counters"]}
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return row


def build_only(args, size: int) -> None:
    """Build one size's store into ``--built`` and stop (no stage run)."""
    if not args.built:
        raise SystemExit("--build-only needs --built DIR")
    n_hosts = min(1_000_000, size // 10)
    buckets = args.buckets or max(8, 2 ** round(math.log2(max(1, size / args.bucket_rows))))
    con = connect(args.threads, args.memory_limit, Path(args.root) / ".duckdb-tmp")
    root = Path(args.root) / human(size)
    facts, _, _ = built_store(args, size, n_hosts, buckets, root, con)
    con.close()
    shutil.rmtree(root, ignore_errors=True)
    print(f"[{human(size)}] built: {json.dumps(facts)}", flush=True)


def incremental() -> bool:
    """Whether the code measured has the crawl DB's deltas and `crawl compact` (docs/incremental.md)."""
    src = Path(_src_dir()) / "cycles"  # cycles/compact.py moved to cycles/commands/ with the layers (#25)
    return (src / "commands" / "compact.py").exists() or (src / "compact.py").exists()


def link_seconds(row: dict) -> float:
    """Update's link-graph step (cycles/update/linkgraph.py), from its phase timers: the
    coordinator's part (``start_linkdb`` + ``install_linkdb``, the host graph's PageRank)
    and the per-bucket link DB merges (``merge_link_bucket`` tasks, timed around the
    executor's map), or ``update_linkdb`` of code from before the per-bucket link tasks."""
    phases = row.get("update_phases", {})
    merges = sum(v for name, v in phases.items() if name.startswith("merge_link_bucket tasks"))
    return float(merges + sum(phases.get(name, 0.0) for name in ("update_linkdb", "start_linkdb", "install_linkdb")))


def print_table(rows: list[dict]) -> None:
    """Wall seconds, peak RSS, seconds per million URLs; CPU seconds (user+sys) beside."""
    head = (f"{'size':>6} {'bkts':>4} {'selected':>10} {'generate s':>10} {'(CPU s)':>8} {'gen RSS GiB':>11} {'gen s/M':>8} "
            f"{'update s':>9} {'(CPU s)':>8} {'upd RSS GiB':>11} {'upd s/M':>8} {'total s':>8} {'DB GB':>6} "
            f"{'link s':>7} {'link s/M':>8} {'compact s':>9} {'(CPU s)':>8} {'cmp RSS GiB':>11} {'links s':>7} "
            f"{'lnk RSS GiB':>11}")
    print(head)
    print("-" * len(head))
    for r in rows:
        m = r["size"] / 1e6
        print(f"{human(r['size']):>6} {r['buckets']:>4} {r['selected']:>10,} {r['generate_s']:>10.1f} "
              f"{r['generate_cpu']:>8.1f} {r['generate_rss'] / 2**30:>11.2f} {r['generate_s'] / m:>8.2f} {r['update_s']:>9.1f} "
              f"{r['update_cpu']:>8.1f} {r['update_rss'] / 2**30:>11.2f} {r['update_s'] / m:>8.2f} {r['generate_s'] + r['update_s']:>8.1f} "
              f"{r['db_bytes'] / 1e9:>6.2f} {link_seconds(r):>7.1f} {link_seconds(r) / m:>8.2f} "
              f"{r.get('compact_s', float('nan')):>9.1f} {r.get('compact_cpu', float('nan')):>8.1f} "
              f"{r.get('compact_rss', float('nan')) / 2**30:>11.2f} {r.get('links_s', float('nan')):>7.1f} "
              f"{r.get('links_rss', float('nan')) / 2**30:>11.2f}")
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        ma, mb = a["size"] / 1e6, b["size"] / 1e6
        print(f"per-URL time ratio {human(b['size'])} vs {human(a['size'])}: generate "
              f"{(b['generate_s'] / mb) / (a['generate_s'] / ma):.2f}x, update "
              f"{(b['update_s'] / mb) / (a['update_s'] / ma):.2f}x, together "
              f"{((b['generate_s'] + b['update_s']) / mb) / ((a['generate_s'] + a['update_s']) / ma):.2f}x; "
              f"CPU time: generate {(b['generate_cpu'] / mb) / (a['generate_cpu'] / ma):.2f}x, update "
              f"{(b['update_cpu'] / mb) / (a['update_cpu'] / ma):.2f}x"
              + (f"; link-graph step {(link_seconds(b) / mb) / (link_seconds(a) / ma):.2f}x" if link_seconds(a) else ""))


def add_store_args(p: argparse.ArgumentParser) -> None:
    """The options of the synthetic store and its stages' settings (this script's and
    scripts/bench_cost.py's, which builds with the same functions)."""
    p.add_argument("--memory-limit", default="4GB", help="DuckDB memory limit (db.duckdb_memory_limit)")
    p.add_argument("--threads", type=int, default=2, help="DuckDB threads (db.duckdb_threads)")
    p.add_argument("--buckets", type=int, default=0, help="crawl DB buckets (0: by --bucket-rows, at least 8)")
    p.add_argument("--bucket-rows", type=int, default=1_600_000, help="target URLs per bucket")
    p.add_argument("--cap", type=int, default=100, help="generate.max_urls_per_host")
    p.add_argument("--partitions", type=int, default=2, help="generate.partitions")
    p.add_argument("--chunk-rows", type=int, default=Config().fetch.flush_pages, help="rows per fetched/ chunk file")
    p.add_argument("--text-chars", type=int, default=1000, help="mean visible text per fetched page")
    p.add_argument("--links-per-page", type=float, default=0,
                   help="outlinks per fetched page (10: the same 100 k-page, 1 M-link segment at every size "
                        "with --top-n-pct 1 at 10M, 0.1 at 100M); 0: 10 %% of the DB size, as before")
    p.add_argument("--linkdb-links-per-url", type=float, default=1.0,
                   help="prior link DB: (URL, linking host) pairs per crawl DB URL (0: none)")
    p.add_argument("--built", help="keep each size's store as built in DIR/<size> and start from a hard-linked "
                                    "copy of it when one with the same settings is there (same DIR for "
                                    "bench_scale and bench_cost: the 100 M store is built once)")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", help="directory holding the cycles package to measure (default: this checkout)")
    p.add_argument("--sizes", default="1M,10M", help="crawl DB sizes, e.g. 1M,10M,100M")
    p.add_argument("--root", default="/tmp/bench-scale", help="where the synthetic stores go")
    add_store_args(p)
    p.add_argument("--top-n-pct", type=float, default=10,
                   help="top_n as a percentage of the size (0.1 at 100M: the 100 k-page segment)")
    p.add_argument("--build-only", action="store_true",
                   help="only build each size's store into --built (start a long build early)")
    p.add_argument("--keep", action="store_true", help="keep the synthetic stores")
    p.add_argument("--resume", action="store_true",
                   help="reuse a store left after generate (crawl DB + generated segment): redo the segment output, update")
    p.add_argument("--py-spy", action="store_true", help="profile each stage with py-spy")
    p.add_argument("--max-temp", default="", help="cap DuckDB's spill (max_temp_directory_size) in the stages, e.g. 25GB")
    p.add_argument("--fine", action="store_true", help="also time each Normalizer.normalize call (adds overhead)")
    p.add_argument("--json", help="also write the rows to this JSON file")
    p.add_argument("--no-after-stages", action="store_true",
                   help="skip the compaction and the link DB merge after the update (at 100M they take longer "
                        "than the cycle itself; their cost per row is the same at 10M)")
    # child mode
    p.add_argument("--stage", choices=("generate", "update", "compact", "links"), help=argparse.SUPPRESS)
    p.add_argument("--all", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    p.add_argument("--top-n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--segment", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.stage:
        run_stage(args)
        return
    Path(args.root).mkdir(parents=True, exist_ok=True)
    print(f"measuring the cycles package in {_src_dir()}", flush=True)
    rows = []
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        if args.build_only:
            build_only(args, size)
            continue
        rows.append(bench_size(args, size))
        print_table(rows)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    shutil.rmtree(Path(args.root) / ".duckdb-tmp", ignore_errors=True)


if __name__ == "__main__":
    main()
