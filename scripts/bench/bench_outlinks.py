"""Benchmark of outlink preparation (normalise, filter, dedupe; issue #5).

Usage::

    .venv/bin/python scripts/bench/scale.py outlinks [--links 1M] [--db-size 10M]
        [--processes N] [--chunk-rows 100000] [--file /tmp/bench-outlinks.parquet]

Builds (once, cached in ``--file``) a synthetic segment's outlinks shaped like those of
``scale.py scale`` (scale.py scale: same host and path generators): half links to known URLs of a
crawl DB of ``--db-size`` URLs on ``min(1M, size/10)`` hosts, half to new pages of known
hosts (70 %) and of new hosts (30 %); 1 % ``mailto:``, 2 % images, 5 % fragments, 3 %
tracking parameters, 2 % upper-case hosts, 3 % nofollow; depth 1-6. Then runs
``cycles.update.outlinks.prepare_outlinks`` (a process pool over chunks) in a fresh process
and prints wall seconds, CPU seconds (the process and its children: the pool workers), peak
RSS (the parent's own VmHWM, and the largest worker's) and a digest of the table, which
stays the same while only the speed of the step changes. The single loop it replaced, and
its figures, are in docs/decisions.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchlib import load_average, own_peak_rss, parse_size  # noqa: E402  (and the repository on sys.path)


def children_peak_rss(stop, peaks: dict) -> None:
    """Poll this process's children (the pool workers) for their own VmHWM until ``stop``.
    ru_maxrss of RUSAGE_CHILDREN would be the parent's high-water mark, which a child
    inherits through fork + exec."""
    me = os.getpid()
    while not stop.wait(0.05):
        try:
            kids = Path(f"/proc/{me}/task/{me}/children").read_text().split()
        except OSError:
            continue
        for pid in kids:
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        # The last sample, not the largest: just after fork, before exec,
                        # a child still shows the parent's high-water mark.
                        peaks[pid] = int(line.split()[1]) * 1024
            except OSError:
                pass


def build(path: Path, n_links: int, db_size: int, seed: int = 3) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    import bench_scale as bs  # the same host_of / path_of / scheme_of macros

    con = bs.connect(2, "2GB", Path("/tmp/bench-outlinks-spill"))
    rng = np.random.default_rng(seed)
    n_hosts = min(1_000_000, db_size // 10)
    counts = bs.host_sizes(db_size, n_hosts, rng)
    hid, j = bs.link_targets(rng, counts, n_links)
    src = rng.integers(0, n_hosts, n_links)
    links = pa.table({
        "src": pa.array(src), "hid": pa.array(hid), "j": pa.array(j),
        "noise": pa.array(rng.random(n_links)),
        "sdepth": pa.array(rng.integers(0, 6, n_links).astype(np.int16)),
    })
    con.register("links", links)
    table = con.sql(f"""
        SELECT scheme_of(src) || host_of(src) || '/' AS from_url,
            {bs.NOISY_LINK_COLUMNS},
            (sdepth + 1)::SMALLINT AS depth
        FROM (SELECT *, scheme_of(hid) || host_of(hid) || path_of(hid, j) AS u FROM links)
        ORDER BY from_url""").to_arrow_table()
    from cycles.tables import schema

    pq.write_table(table.cast(schema.OUTLINKS), path, compression="zstd")


def child(args) -> None:
    """Run one implementation on the cached outlinks; print a RESULT line."""
    from collections import Counter

    import pyarrow.parquet as pq

    from cycles.config import Config

    from cycles.update.outlinks import prepare_outlinks

    config = Config()
    if args.processes:
        config.db.duckdb_threads = args.processes
    if args.chunk_rows:
        import cycles.update.outlinks as mod
        mod.CHUNK_ROWS = args.chunk_rows
    links = pq.read_table(args.file)
    rss_before = own_peak_rss()
    import threading

    stop, peaks = threading.Event(), {}
    sampler = threading.Thread(target=children_peak_rss, args=(stop, peaks), daemon=True)
    sampler.start()
    counters: Counter = Counter()
    t0, c0 = time.perf_counter(), time.process_time()
    out = prepare_outlinks(links, config, counters)
    seconds, own_cpu = time.perf_counter() - t0, time.process_time() - c0
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    stop.set()
    sampler.join()
    digest = out.sort_by([("url", "ascending")])
    import hashlib

    h = hashlib.sha256()
    for col in digest.columns:
        h.update(str(col.to_pylist()).encode())
    print("RESULT " + json.dumps({
        "impl": args.child, "links": links.num_rows, "rows": out.num_rows, "seconds": round(seconds, 2),
        "cpu_s": round(own_cpu + kids.ru_utime + kids.ru_stime, 2), "parent_cpu_s": round(own_cpu, 2),
        "peak_rss_mb": round(own_peak_rss() / 2**20), "rss_after_read_mb": round(rss_before / 2**20),
        "worker_peak_rss_mb": round(max(peaks.values(), default=0) / 2**20), "workers": len(peaks),
        "counters": dict(sorted(counters.items())), "digest": h.hexdigest()[:16]}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--links", default="1M")
    p.add_argument("--db-size", default="10M")
    p.add_argument("--processes", type=int, default=0, help="pool size (default: db.duckdb_threads)")
    p.add_argument("--chunk-rows", type=int, default=0)
    p.add_argument("--file", default="/tmp/bench-outlinks.parquet")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    path = Path(args.file)
    if not path.exists():
        t0 = time.perf_counter()
        build(path, parse_size(args.links), parse_size(args.db_size))
        print(f"built {path} in {time.perf_counter() - t0:.1f}s", flush=True)
    cmd = [sys.executable, __file__, "--child", "new", "--file", str(path)]
    if args.processes:
        cmd += ["--processes", str(args.processes)]
    if args.chunk_rows:
        cmd += ["--chunk-rows", str(args.chunk_rows)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        print(out.stderr, file=sys.stderr)
        raise SystemExit("prepare_outlinks failed")
    r = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])
    print(f"{r['links']:,} links -> {r['rows']:,} URLs: {r['seconds']:.2f} s wall, "
          f"{r['cpu_s']:.2f} CPU-s ({r['parent_cpu_s']:.2f} in the parent), peak RSS {r['peak_rss_mb']} MB "
          f"(after reading the input {r['rss_after_read_mb']} MB; {r['workers']} child processes, largest "
          f"{r['worker_peak_rss_mb']} MB), digest {r['digest']}; {load_average()}", flush=True)

if __name__ == "__main__":
    main()
