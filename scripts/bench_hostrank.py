"""The host graph's PageRank: update's coordinator before, tasks now (cycles/update/hostrank.py).

On a store bench_scale.py built (``--built DIR``: its link DB holds the host graph in the
one-file layout of before the parts), with no new segment pairs, three A/B figures in one
run, each the CPU of the process(es) doing the work (the load average printed beside):

- *before*: ``rank_hosts`` of ``--old-src`` (a checkout of the code before the move, e.g.
  main at the merge base), in a child process: the whole host graph's DISTINCT, PageRank
  (NumPy up to 4 M edges, DuckDB past) and writes, as update's coordinator ran them;
- *migration*: the tasks reading that one-file layout (each build task keeps its part of
  the two files) and writing the parts;
- *steady*: the tasks of the next cycle, from the parts.

Tasks run one after the other in this process (a measuring executor), each timed by its
function's name; ``--in-memory-edges`` picks one NumPy task or the rounds of part tasks.

    .venv/bin/python scripts/bench_hostrank.py --built /tmp/built/10M --old-src /tmp/main-src
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cycles.config import Config  # noqa: E402
from cycles.storage.store import Store  # noqa: E402
from cycles.update import hostrank  # noqa: E402

OLD = """
import sys, time, resource
sys.path.insert(0, sys.argv[1])
from collections import Counter
import pyarrow as pa
from cycles.config import Config
from cycles.tables.crawldb import connect
from cycles.storage.store import Store
from cycles.update.linkgraph import LINKDB, rank_hosts
from cycles.update.route import HOST_LINKS
store = Store(sys.argv[2])
config = Config()
config.db.duckdb_threads = int(sys.argv[3])
con = connect(store, config)
con.register("no_pairs", HOST_LINKS.empty_table())
con.execute("CREATE TEMP TABLE seg_links AS SELECT DISTINCT host, from_host FROM no_pairs")
cpu, wall = time.process_time(), time.monotonic()
hosts, edges, iterations = rank_hosts(store, config, con, store.manifest(LINKDB), store.path("before-out"))
print(hosts, edges, iterations, round(time.process_time() - cpu, 2), round(time.monotonic() - wall, 2))
"""


class Timing:
    """Runs every task in this process and sums its CPU and wall by function name."""

    workers = 1

    def __init__(self):
        self.cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)
        self.count: dict[str, int] = defaultdict(int)

    def map(self, fn, tasks):
        out = []
        for task in tasks:
            cpu, wall = time.process_time(), time.monotonic()
            out.append(fn(task))
            self.cpu[fn.__name__] += time.process_time() - cpu
            self.wall[fn.__name__] += time.monotonic() - wall
            self.count[fn.__name__] += 1
        return out


def cycle(store: Store, config: Config, name: str, old: hostrank.OldHostGraph, parts: int,
          in_memory_edges: int) -> tuple:
    executor = Timing()
    cpu, wall = time.process_time(), time.monotonic()
    result = hostrank.rank_host_graph(store, config, executor, None, store.path(name), parts, old, in_memory_edges)
    total_cpu, total_wall = time.process_time() - cpu, time.monotonic() - wall
    tasks = ", ".join(f"{fn} x{executor.count[fn]} {executor.cpu[fn]:.1f}/{executor.wall[fn]:.1f}"
                      for fn in executor.cpu)
    coordinator = total_cpu - sum(executor.cpu.values())
    print(f"{name:10} hosts {result[0]:,} edges {result[1]:,} iterations {result[2]}: tasks CPU/wall s: {tasks}; "
          f"coordinator CPU {coordinator:.2f} s, wall {total_wall - sum(executor.wall.values()):.2f} s "
          f"(load {os.getloadavg()[0]:.1f})", flush=True)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--built", required=True, help="a store bench_scale built (DIR/<size> of its --built)")
    p.add_argument("--old-src", help="the code before the move (a checkout holding cycles/): also time it")
    p.add_argument("--work", default="/tmp/bench-hostrank", help="scratch store (the link DB hard-linked in)")
    p.add_argument("--threads", type=int, default=2, help="DuckDB threads")
    p.add_argument("--in-memory-edges", type=int, default=hostrank.IN_MEMORY_EDGES)
    args = p.parse_args()
    built = Store(args.built)
    manifest = built.manifest("linkdb")
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    (work / "linkdb").mkdir(parents=True)
    for name in ("CURRENT", "HISTORY"):
        shutil.copy(built.path("linkdb", name), work / "linkdb" / name)
    subprocess.run(["cp", "-al", str(built.path("linkdb", manifest.version)), str(work / "linkdb")], check=True)
    store = Store(work)
    config = Config()
    config.db.duckdb_threads = args.threads
    parts = manifest.buckets
    print(f"{args.built}: link DB {manifest.version}, {parts} parts (load {os.getloadavg()[0]:.1f})", flush=True)
    if args.old_src:
        out = subprocess.run([sys.executable, "-c", OLD, args.old_src, str(work), str(args.threads)],
                             capture_output=True, text=True, check=True).stdout.split()
        print(f"{'before':10} hosts {int(out[0]):,} edges {int(out[1]):,} iterations {out[2]}: in the coordinator "
              f"CPU {out[3]} s, wall {out[4]} s (load {os.getloadavg()[0]:.1f})", flush=True)
    old = hostrank.old_host_graph(store, store.path("linkdb", manifest.version), parts)
    cycle(store, config, "migration", old, parts, args.in_memory_edges)
    cycle(store, config, "steady", hostrank.OldHostGraph(store.path("migration"), parts), parts, args.in_memory_edges)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
