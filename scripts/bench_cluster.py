"""What each task type of a cycle costs on S3, and what stays in the coordinator (issue #11).

Real cycles (generate -> fetch -> update) of the local test web against moto's S3 server on
loopback. The stages are called with a measuring executor that runs their tasks in this
process one after the other, so a task's CPU is this process's CPU time while it ran (DuckDB's
threads included); the rest of a stage's CPU (its own and its child processes') is the
coordinator's serial part. moto's access log gives the S3 requests of each stage (GET, PUT,
LIST, HEAD, DELETE; POST is a multipart upload's start and end: pyarrow uploads even a small
file as one), a listing of the bucket before and after each stage the bytes it wrote.

Prints, per cycle and stage: tasks by type with CPU-s and CPU-s per million URLs, the
coordinator's CPU-s and its share of the stage, S3 requests by kind, MB written; then the
totals. The machine this was written on had 2 cores shared with other work: CPU seconds
are comparable between runs, wall times are not.

    .venv/bin/python scripts/bench_cluster.py                       # 20 hosts x 10 pages, 3 cycles
    .venv/bin/python scripts/bench_cluster.py --hosts 50 --pages 20 --cycles 4
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cycles.crawldb import current_bucket_files  # noqa: E402
from cycles.fetch.fetch import fetch_segment  # noqa: E402
from cycles.generate.generate import generate  # noqa: E402
from cycles.inject import inject  # noqa: E402
from cycles.store import Store  # noqa: E402
from cycles.update.update import update_segment  # noqa: E402
from testweb.moto import STRAY_AWS_SETTINGS, start_moto as start_moto_server  # noqa: E402
from testweb.harness import TestWeb  # noqa: E402

HOST = "127.0.83.2"
BUCKET = "crawl-bench"
REQUEST = re.compile(r'"(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP')
COLOUR = re.compile(r"\x1b\[[0-9;]*m")
"""moto's server colours some log lines (a 206 of a ranged GET) with terminal escapes."""


class MeasuringExecutor:
    """Runs each task in this process and adds its CPU seconds under the task function's name."""

    workers = 1

    def __init__(self):
        self.cpu: Counter = Counter()
        self.tasks: Counter = Counter()

    def map(self, fn, tasks):
        results = []
        for task in tasks:
            started = time.process_time()
            results.append(fn(task))
            self.cpu[fn.__name__] += time.process_time() - started
            self.tasks[fn.__name__] += 1
        return results


def cpu_now() -> float:
    """This process's CPU seconds and its finished children's (update's outlink pool)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def start_moto(log: Path) -> tuple[subprocess.Popen, dict]:
    """moto's S3 server on loopback (testweb/moto.py), made this process's AWS settings."""
    try:
        proc, env = start_moto_server(HOST, log)
    except RuntimeError as error:
        raise SystemExit(str(error)) from None
    os.environ.update(env)
    for key in STRAY_AWS_SETTINGS:
        os.environ.pop(key, None)
    return proc, env


def s3_requests(log: Path, skip: int) -> tuple[Counter, int]:
    """Requests in moto's log after its first ``skip`` lines, by kind; and the new line count."""
    lines = log.read_text(errors="replace").splitlines()
    kinds: Counter = Counter()
    for line in lines[skip:]:
        match = REQUEST.search(COLOUR.sub("", line))
        if not match:
            continue
        method, target = match.groups()
        path, _, query = target.partition("?")
        if method == "GET" and path.strip("/").count("/") == 0 and ("list-type" in query or "prefix" in query):
            kinds["LIST"] += 1
        else:
            kinds[method] += 1
    return kinds, len(lines)


def objects(client, prefix: str) -> dict[str, tuple[str, int]]:
    found = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for item in page.get("Contents", []):
            found[item["Key"]] = (item["ETag"], item["Size"])
    return found


def written_bytes(before: dict, after: dict) -> int:
    return sum(size for key, (etag, size) in after.items() if before.get(key, (None,))[0] != etag)


def crawldb_rows(store: Store) -> int:
    _, files = current_bucket_files(store)
    return sum(store.read_metadata(f).num_rows for f in files)


def measure(stage: str, run, store: Store, client, prefix: str, log: Path, skip: int, urls: int) -> tuple[dict, int]:
    executor = MeasuringExecutor()
    before = objects(client, prefix)
    cpu, wall = cpu_now(), time.monotonic()
    result = run(executor)
    cpu, wall = cpu_now() - cpu, time.monotonic() - wall
    kinds, skip = s3_requests(log, skip)
    task_cpu = sum(executor.cpu.values())
    row = {"stage": stage, "result": result, "urls": urls, "wall_s": wall, "cpu_s": cpu,
           "tasks": {name: (executor.tasks[name], executor.cpu[name]) for name in executor.cpu},
           "coordinator_cpu_s": max(0.0, cpu - task_cpu), "s3": kinds,
           "written_mb": written_bytes(before, objects(client, prefix)) / 1e6}
    return row, skip


def show(cycle: int, row: dict) -> None:
    per_m = lambda cpu: cpu / max(1, row["urls"]) * 1e6  # noqa: E731
    tasks = ", ".join(f"{name} x{count}: {cpu:.2f} CPU-s ({per_m(cpu):,.0f} per M URLs)"
                      for name, (count, cpu) in row["tasks"].items())
    share = row["coordinator_cpu_s"] / row["cpu_s"] if row["cpu_s"] else 0.0
    s3 = " ".join(f"{k}={v}" for k, v in sorted(row["s3"].items()))
    print(f"cycle {cycle} {row['stage']:8} {row['urls']:>7} URLs  wall {row['wall_s']:6.1f}s  CPU {row['cpu_s']:6.2f}s  "
          f"coordinator {row['coordinator_cpu_s']:5.2f}s ({share:.0%})  S3 {s3}  written {row['written_mb']:.2f} MB")
    if tasks:
        print(f"    tasks: {tasks}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        log = Path(tmp) / "moto.log"
        moto, _ = start_moto(log)
        try:
            import boto3

            client = boto3.client("s3")
            client.create_bucket(Bucket=BUCKET)
            prefix = f"{uuid.uuid4().hex[:8]}/crawl"
            with TestWeb(hosts=args.hosts, pages=args.pages, page_bytes=5000, special=False,
                         max_seconds=3600) as web:
                store = Store(f"s3://{BUCKET}/{prefix}")
                config = web.crawl_config()
                config.fetch.processes = 1
                config.db.buckets = args.buckets
                config.generate.partitions = args.partitions
                seeds = Path(tmp) / "seeds.txt"
                seeds.write_text("\n".join(web.seeds()) + "\n")
                inject(store, config, seeds)
                _, skip = s3_requests(log, 0)
                rows = []
                for cycle in range(1, args.cycles + 1):
                    known = crawldb_rows(store)
                    row, skip = measure("generate", lambda ex: generate(store, config, executor=ex),
                                        store, client, prefix, log, skip, known)
                    show(cycle, row)
                    rows.append(row)
                    segment = row["result"].segment
                    if segment is None:
                        break
                    listed = row["result"].urls
                    for stage, run, urls in (
                            ("fetch", lambda ex: fetch_segment(store, config, segment, executor=ex), listed),
                            ("update", lambda ex: update_segment(store, config, segment, executor=ex), known)):
                        row, skip = measure(stage, run, store, client, prefix, log, skip, urls)
                        show(cycle, row)
                        rows.append(row)
                totals(rows)
        finally:
            moto.terminate()
            moto.wait(10)


def totals(rows: list[dict]) -> None:
    print("\ntotals by stage (all cycles):")
    for stage in ("generate", "fetch", "update"):
        mine = [r for r in rows if r["stage"] == stage]
        if not mine:
            continue
        cpu = sum(r["cpu_s"] for r in mine)
        coordinator = sum(r["coordinator_cpu_s"] for r in mine)
        urls = sum(r["urls"] for r in mine)
        s3 = sum((r["s3"] for r in mine), Counter())
        print(f"  {stage:8} CPU {cpu:6.2f}s = {cpu / max(1, urls) * 1e6:,.0f} CPU-s per M URLs; coordinator "
              f"{coordinator:5.2f}s ({coordinator / cpu if cpu else 0:.0%}); S3 per cycle "
              + " ".join(f"{k}={v / len(mine):.0f}" for k, v in sorted(s3.items()))
              + f"; written {sum(r['written_mb'] for r in mine) / len(mine):.2f} MB per cycle")


if __name__ == "__main__":
    main()
