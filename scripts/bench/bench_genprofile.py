"""Where generate's CPU goes: generate in one process on a kept store, CPU timers around its
parts (summed per name, DuckDB's threads included).

Usage::

    cp -al /tmp/bench-scale/built/10M /tmp/genprofile/10M   # generate writes a segment
    .venv/bin/python scripts/bench/scale.py genprofile --store /tmp/genprofile/10M --top-n 100000 [--src DIR] [--now T]

One process (``db.processes = 1``) so the timers see every task; DuckDB 2 threads, 4 GB, 100
URLs a host, 2 partitions, as bench_scale's stages. ``--src DIR``: another copy of the cycles
package (``git archive <commit> cycles | tar -x -C DIR``). Figures: docs/incremental.md,
"Generate, measured".
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import functools
import resource
import sys
import time

import benchlib  # noqa: F401  (the repository on sys.path)

PARTS = ("select_bucket_due", "verify_due_pages", "write_bucket_hosts", "with_time_budget_sql", "count_chosen_hosts",
         "prefilter_threshold", "write_candidates", "exact_cutoff", "bucket_load", "write_known_hosts_part", "merge_known_hosts", "write_partition", "write_seen_set",
         "write_seen_set_indexed",
         "top_n_cutoff", "plan_assignment", "write_fetchlists", "choose_and_write")
"""Functions of cycles/generate/generate.py (or imported into it) that are timed."""


def timed(table: dict, owner, name: str) -> None:
    """Replace ``owner.name`` with a wrapper adding its CPU and wall seconds to ``table``."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            row = table[name]
            row[0] += time.process_time() - cpu
            row[1] += time.perf_counter() - wall
            row[2] += 1
    setattr(owner, name, wrapper)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", required=True, help="a store to generate from (a copy: a segment is written)")
    p.add_argument("--top-n", type=int, default=100_000)
    p.add_argument("--src", help="directory holding the cycles package to measure (default: this checkout)")
    p.add_argument("--now", help="generate's clock, ISO 8601 (default: the time of the run): two trees' runs "
                                 "at the same --now on copies of one store must write the same fetch lists")
    args = p.parse_args()
    if args.src:
        sys.path.insert(0, args.src)
    from cycles.config import Config
    from cycles.storage.bloom import BloomFilter
    from cycles.storage.store import Store
    import cycles.generate.generate as gen

    table: dict = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for name in PARTS:
        if hasattr(gen, name):
            timed(table, gen, name)
    for name in ("add_new", "add_all", "add_hashes"):  # add_all, add_hashes: the bulk adds (older trees lack them)
        if hasattr(BloomFilter, name):
            timed(table, BloomFilter, name)
    config = Config()
    config.db.duckdb_memory_limit, config.db.duckdb_threads, config.db.processes = "4GB", 2, 1
    config.generate.max_urls_per_host, config.generate.partitions = 100, 2
    cpu, wall = time.process_time(), time.perf_counter()
    now = dt.datetime.fromisoformat(args.now) if args.now else None
    result = gen.generate(Store(args.store), config, top_n=args.top_n, now=now)
    print(f"generate: {time.perf_counter() - wall:.1f} s, {time.process_time() - cpu:.1f} CPU-s, {result.urls} URLs, "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
    for name, (seconds, elapsed, calls) in sorted(table.items(), key=lambda kv: -kv[1][0]):
        print(f"  {name:26s} calls {calls:3d}  CPU-s {seconds:6.2f}  s {elapsed:6.2f}")


if __name__ == "__main__":
    main()
