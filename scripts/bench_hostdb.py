"""Peak memory of the host DB's readers and merge, before and after its split into buckets.

Usage::

    .venv/bin/python scripts/bench_hostdb.py [--hosts 1000000] [--buckets 32] [--lookup 1000]
        [--touched 100000] [--root /tmp/bench-hostdb] [--before 3a49dc0]

Builds two stores holding the same host DB of ``--hosts`` hosts (~300-byte robots.txt
bodies, a good copy for most): *before*, one ``hosts.parquet`` as update wrote it until
the split; *after*, ``--buckets`` bucket files (cycles/tables/hostdb.py). Each store gets a
fetched segment whose ``hosts/`` output (16 partition files) touches ``--touched`` known
hosts and a tenth as many new ones. Then, each in a fresh process (so that the peak is its
own), it measures

- ``load_host_state`` for ``--lookup`` random hosts (a fetch partition's start),
- ``load_host_state`` for one host (an inline redirect to a host not in the fetch list),
- ``merge_hostdb`` of the segment (update),

with the code of commit ``--before`` (cycles/fetch/hoststate.py and cycles/update/hostdb.py
as they were, loaded from git) on the *before* store, and the working tree's code on both.
Printed per run: peak RSS (VmHWM), RSS after imports, and seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from cycles.tables.segment import write_stage_marker  # noqa: E402
from cycles.tables import schema  # noqa: E402
from cycles.config import Config  # noqa: E402
from cycles.storage.store import Manifest, Store, new_id, utcnow  # noqa: E402


def vm_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def host_rows_sql(n: int, offset: int, age_s: int, where: str = "TRUE") -> str:
    """``n`` host rows (hosts offset .. offset+n-1), robots.txt ~300 bytes, ``age_s`` old."""
    return f"""
        SELECT 'www.' || md5(i::VARCHAR)[:10] || '-' || i::VARCHAR || '.example' AS host,
               now() - to_seconds({age_s} + i % 3600) AS last_request_end,
               now() - to_seconds({age_s} + i % 3600) + INTERVAL 1 SECOND AS not_before,
               (CASE WHEN i % 10 < 8 THEN 200 WHEN i % 10 = 8 THEN 404 ELSE NULL END)::SMALLINT AS robots_status,
               now() - to_seconds({age_s} + i % 7200) AS robots_fetched_at,
               CASE WHEN i % 10 < 8 THEN encode('User-agent: *' || chr(10) || 'Disallow: /' || md5(i::VARCHAR)
                    || '/' || chr(10) || 'Disallow: /search' || chr(10) || 'Disallow: /' || md5((i+1)::VARCHAR)
                    || chr(10) || 'Disallow: /cgi-bin/' || chr(10) || 'Allow: /public/' || chr(10) || 'Crawl-delay: 1' || chr(10) || 'User-agent: badbot' || chr(10)
                    || 'Disallow: /' || chr(10) || 'Sitemap: https://www.' || md5(i::VARCHAR)[:10] || '-'
                    || i::VARCHAR || '.example/sitemap-' || md5((i+2)::VARCHAR) || '.xml' || chr(10)) END AS robots_body,
               CASE WHEN i % 10 < 8 THEN '"' || md5((i+3)::VARCHAR)[:16] || '"' END AS robots_etag,
               NULL::VARCHAR AS robots_last_modified,
               1.0::FLOAT AS crawl_delay_s,
               (CASE WHEN i % 10 < 9 THEN 200 END)::SMALLINT AS robots_good_status,
               CASE WHEN i % 10 < 9 THEN now() - to_seconds({age_s} + i % 7200) END AS robots_good_fetched_at,
               CASE WHEN i % 10 < 8 THEN encode('User-agent: *' || chr(10) || 'Disallow: /' || md5(i::VARCHAR)
                    || '/' || chr(10) || 'Disallow: /search' || chr(10) || 'Disallow: /' || md5((i+1)::VARCHAR)
                    || chr(10) || 'Disallow: /cgi-bin/' || chr(10) || 'Allow: /public/' || chr(10) || 'Crawl-delay: 1' || chr(10) || 'User-agent: badbot' || chr(10)
                    || 'Disallow: /' || chr(10) || 'Sitemap: https://www.' || md5(i::VARCHAR)[:10] || '-'
                    || i::VARCHAR || '.example/sitemap-' || md5((i+2)::VARCHAR) || '.xml' || chr(10)) END AS robots_good_body,
               CASE WHEN i % 10 = 9 THEN now() - to_seconds({age_s}) END AS robots_errors_since
        FROM range({offset}, {offset + n}) t(i) WHERE {where}"""


def build(root: Path, args) -> None:
    from cycles.tables.hostdb import host_buckets

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    hosts = con.sql(host_rows_sql(args.hosts, 0, 86400) + " ORDER BY host").to_arrow_table().cast(schema.HOSTS)
    print(f"host DB: {hosts.num_rows} hosts, avg robots body "
          f"{np.mean([len(b) for b in hosts['robots_body'].to_pylist()[:10000] if b]):.0f} bytes", flush=True)
    touched = sorted(random.Random(1).sample(range(args.hosts), args.touched))
    con.register("touched", pa.table({"i": pa.array(touched, pa.int64())}))
    segment_rows = con.sql(
        f"{host_rows_sql(args.hosts, 0, 60, 'i IN (SELECT i FROM touched)')} "
        f"UNION ALL {host_rows_sql(args.touched // 10, args.hosts, 60)}"
    ).to_arrow_table().cast(schema.HOSTS)
    lookup = random.Random(2).sample(hosts["host"].to_pylist(), args.lookup)
    for layout in ("before", "after"):
        store = Store(root / layout)
        version, folder = store.new_version_dir("hostdb")
        if layout == "before":
            store.write_table(folder / "hosts.parquet", hosts, schema.HOSTS)
            buckets = 1
        else:
            of = host_buckets(hosts["host"], args.buckets)
            for bucket in range(args.buckets):
                store.write_table(store.bucket_file(folder, bucket), hosts.filter(pa.array(of == bucket)), schema.HOSTS)
            buckets = args.buckets
        store.install("hostdb", Manifest(version=version, buckets=buckets, schema_version=schema.SCHEMA_VERSION,
                                         written_at=utcnow().isoformat(), written_by="bench_hostdb"), keep=2)
        segment = new_id()
        seg_dir = store.segment_dir(segment, must_exist=False)
        bounds = [p * segment_rows.num_rows // 16 for p in range(17)]
        for p in range(16):
            store.write_table(seg_dir / "hosts" / f"part-{p:05d}.parquet",
                              segment_rows.slice(bounds[p], bounds[p + 1] - bounds[p]), schema.HOSTS)
        write_stage_marker(store, segment, "generated", {"segment": segment})
        write_stage_marker(store, segment, "fetched", {"segment": segment})
    (root / "lookup.json").write_text(json.dumps({"hosts": lookup, "segment_rows": segment_rows.num_rows}))


def old_modules(commit: str) -> tuple[types.ModuleType, types.ModuleType]:
    """hoststate and hostdb as they were at ``commit``."""
    def load(name: str, path: str, *replace: tuple[str, str]) -> types.ModuleType:
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{path}"], check=True,
                              capture_output=True, text=True).stdout
        for old, new in replace:
            text = text.replace(old, new)
        module = types.ModuleType(name)
        sys.modules[name] = module
        exec(compile(text, f"{commit}:{path}", "exec"), module.__dict__)
        return module

    hoststate = load("old_hoststate", "cycles/fetch/hoststate.py")
    # The old merge also carries not_before (a column added since), so that it writes the
    # current schema.HOSTS.
    hostdb = load("old_hostdb", "cycles/update/hostdb.py",
                  ("from cycles.fetch.hoststate import", "from old_hoststate import"),
                  ("max(last_request_end) AS last_request_end,",
                   "max(last_request_end) AS last_request_end, max(not_before) AS not_before,"))
    return hoststate, hostdb


def measure(root: Path, layout: str, code: str, what: str, args) -> dict:
    """One run in this (fresh) process."""
    if code == "before":
        hoststate, hostdb = old_modules(args.before)
    else:
        from cycles.tables import hostdb
        hoststate = hostdb  # one module since the host DB became a shared table
    store = Store(root / layout)
    config = Config()
    config.db.buckets = args.buckets
    lookup = json.loads((root / "lookup.json").read_text())["hosts"]
    base = vm_kib("VmRSS")
    started = time.monotonic()
    if what == "load":
        result = len(hoststate.load_host_state(store, set(lookup)))
    elif what == "load1":
        result = len(hoststate.load_host_state(store, {lookup[0]}))
    else:
        current = store.path("hostdb", "CURRENT").read_bytes()
        segment = store.segments()[-1]
        try:
            result = hostdb.merge_hostdb(store, config, segment)
        finally:  # leave the store as built, for the next run
            new = store.manifest("hostdb").version
            store.path("hostdb", "CURRENT").write_bytes(current)
            if new != json.loads(current)["version"]:
                store.discard_version("hostdb", new)
    return {"layout": layout, "code": code, "what": what, "result": result,
            "seconds": round(time.monotonic() - started, 2),
            "rss_after_imports_mib": round(base / 1024), "peak_rss_mib": round(vm_kib("VmHWM") / 1024)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1_000_000)
    parser.add_argument("--buckets", type=int, default=32)
    parser.add_argument("--lookup", type=int, default=1000)
    parser.add_argument("--touched", type=int, default=100_000)
    parser.add_argument("--root", default="/tmp/bench-hostdb")
    parser.add_argument("--before", default="3a49dc0", help="commit whose host DB code is 'before'")
    parser.add_argument("--run", nargs=3, metavar=("LAYOUT", "CODE", "WHAT"), help=argparse.SUPPRESS)
    parser.add_argument("--keep", action="store_true", help="reuse a store built by an earlier run")
    args = parser.parse_args()
    root = Path(args.root)
    if args.run:
        print(json.dumps(measure(root, *args.run, args)))
        return
    if not (args.keep and (root / "lookup.json").exists()):
        import shutil

        shutil.rmtree(root, ignore_errors=True)
        started = time.monotonic()
        build(root, args)
        print(f"built in {time.monotonic() - started:.0f} s: {root}", flush=True)
    runs = [("before", "before", w) for w in ("load", "load1", "merge")] + \
           [("after", "after", w) for w in ("load", "load1", "merge")] + \
           [("before", "after", w) for w in ("load", "load1", "merge")]
    print(f"{'store':8} {'code':7} {'what':6} {'result':>8} {'seconds':>8} {'base MiB':>9} {'peak MiB':>9}")
    for layout, code, what in runs:
        out = subprocess.run([sys.executable, __file__, "--root", str(root), "--buckets", str(args.buckets),
                              "--before", args.before, "--run", layout, code, what],
                             check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"{layout:8} {code:7} {what:6} {r['result']:>8} {r['seconds']:>8} {r['rss_after_imports_mib']:>9} "
              f"{r['peak_rss_mib']:>9}", flush=True)


if __name__ == "__main__":
    main()
