"""Cost of the crawl DB's integrity checks on one synthetic 1M-row bucket.

Usage::

    .venv/bin/python scripts/bench/scale.py integrity [--rows 1000000] [--root /tmp/bench-integrity] [--repeat 3]

Builds a one-bucket crawl DB of ``--rows`` URLs with scripts/bench/scale.py scale's builder, then
times (best of ``--repeat``, seconds; per million rows in brackets):

- write: the bucket written by pyarrow with and without page checksums, and through
  ``Store.write_batches`` (checksums, fsync, rename: write_bucket without its query);
- invariants: the same stream through ``crawldb.checked_rows`` (one row per URL,
  host_hash of its host and of this bucket) vs. the bare stream;
- verify: ``verify_parquet_file`` (every page's CRC checked on its stored bytes,
  cycles/storage/pagecrc.py), one thread, as ``current_bucket_files`` runs it per bucket
  before a stage, and ``decode_parquet_file`` (every value decoded: the check before it).

``--store DIR`` instead measures both checks on every base of a kept store's crawl DB
(CPU seconds per base, the two alternating), e.g. a ``scale --built`` store::

    .venv/bin/python scripts/bench/scale.py integrity --store /tmp/bench-scale/built/10M
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import pyarrow.parquet as pq

import benchlib  # noqa: E402,F401  (the repository on sys.path)

import bench_scale  # noqa: E402
from cycles.tables import schema  # noqa: E402
from cycles.tables.crawldb import checked_rows  # noqa: E402
from cycles.storage.parquet import decode_parquet_file  # noqa: E402
from cycles.storage.store import Store, verify_parquet_file  # noqa: E402


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def checks_per_base(store: Store) -> None:
    """CPU seconds per base of the store's current crawl DB: the stored-bytes check and the
    decoding one, alternating base by base (the page cache warm for both)."""
    manifest = store.manifest()
    files = [store.version_bucket_file("crawldb", manifest, b) for b in range(manifest.buckets)]
    checks = {"verify_parquet_file (stored bytes)": verify_parquet_file,
              "decode_parquet_file (every value, before)": decode_parquet_file}
    cpu: dict[str, list[float]] = {name: [] for name in checks}
    for path in files:
        for name, check in checks.items():
            started = time.process_time()
            check(path)
            cpu[name].append(time.process_time() - started)
    size = sum(Path(f).stat().st_size for f in files) / len(files) / 1e6
    print(f"{len(files)} bases, {size:.0f} MB each on average")
    for name, seconds in cpu.items():
        print(f"  {name:45s} CPU-s a base: mean {sum(seconds) / len(seconds):.3f}, "
              f"min {min(seconds):.3f}, max {max(seconds):.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--root", default="/tmp/bench-integrity")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--store", help="measure the page checks on this kept store's bases instead")
    args = p.parse_args()
    if args.store:
        checks_per_base(Store(args.store))
        return
    root = Path(args.root)
    shutil.rmtree(root, ignore_errors=True)
    store = Store(root / "data")
    con = bench_scale.connect(2, "2GB", root / "spill")
    facts = bench_scale.build_db(store, args.rows, max(1, args.rows // 10), 1, con)
    source = store.bucket_file(store.path("crawldb", store.manifest().version), 0)
    table = pq.read_table(source).cast(schema.CRAWLDB)
    batches = table.to_batches(64 * 1024)
    out = root / "out.parquet"
    million = args.rows / 1e6

    def write(checksums: bool):
        return lambda: pq.write_table(table, out, compression="zstd", row_group_size=1 << 20,
                                      write_page_checksum=checksums)

    results = {
        "write, page checksums": best(write(True), args.repeat),
        "write, no checksums": best(write(False), args.repeat),
        "Store.write_batches (checksums, fsync, rename)":
            best(lambda: store.write_batches(out, iter(batches), schema.CRAWLDB), args.repeat),
        "stream, bare": best(lambda: sum(b.num_rows for b in batches), args.repeat),
        "stream through checked_rows": best(lambda: sum(b.num_rows for b in checked_rows(batches, "bench", 0, 1)),
                                            args.repeat),
    }
    store.write_batches(out, iter(batches), schema.CRAWLDB)
    results["verify_parquet_file (1 thread)"] = best(lambda: verify_parquet_file(out), args.repeat)
    results["decode_parquet_file (1 thread, the check before)"] = best(lambda: decode_parquet_file(out), args.repeat)
    results["pq.read_table, no verification (for scale)"] = best(lambda: pq.read_table(out), args.repeat)
    print(f"{args.rows:,} rows, {facts['hosts']:,} hosts, bucket {out.stat().st_size / 1e6:.1f} MB")
    for name, seconds in results.items():
        print(f"  {name:50s} {seconds:7.3f} s  ({seconds / million:.3f} s per 1M rows)")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
