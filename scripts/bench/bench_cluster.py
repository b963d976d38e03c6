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
totals, and each stage's requests as a formula of the counts that drive them: every request
is put, by the key it names (a LIST by its prefix), on a crawl DB/host DB/link DB bucket file
(``bucket-NNNNN``: per bucket), a fetch chunk (``part-NNNNN-cNNNNNN``: per chunk), a
partition's file (``part-NNNNN``: per partition) or a fixed key (markers, ``CURRENT``, the
lock, stats: per cycle), and divided by how many of those the cycle had. ``--json`` writes
it all for scripts/project_cluster.py. The machine this was written on had 2 cores shared with other work: CPU seconds
are comparable between runs, wall times are not.

    .venv/bin/python scripts/bench_cluster.py                       # 20 hosts x 10 pages, 3 cycles
    .venv/bin/python scripts/bench_cluster.py --hosts 50 --pages 20 --cycles 4 --json /tmp/bench-cluster.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import parse_qs

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cycles.tables.crawldb import current_bucket_files  # noqa: E402
from cycles.fetch.fetch import fetch_segment  # noqa: E402
from cycles.generate.generate import generate  # noqa: E402
from cycles.commands.inject import inject  # noqa: E402
from cycles.storage.store import Store  # noqa: E402
from cycles.update.update import update_segment  # noqa: E402
from testweb.moto import STRAY_AWS_SETTINGS, start_moto as start_moto_server  # noqa: E402
from testweb.harness import TestWeb  # noqa: E402

HOST = "127.0.83.2"
BUCKET = "crawl-bench"
REQUEST = re.compile(r'"(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP')
COLOUR = re.compile(r"\x1b\[[0-9;]*m")
"""moto's server colours some log lines (a 206 of a ranged GET) with terminal escapes."""
UNITS = (("chunk", re.compile(r"part-\d{5}-c\d{6}")), ("bucket", re.compile(r"bucket-\d{5}")),
         ("partition", re.compile(r"part-\d{5}")))
"""What a request's key is one of (the first that matches); anything else is per cycle ("fixed")."""


def unit_of(key: str) -> str:
    return next((unit for unit, pattern in UNITS if pattern.search(key)), "fixed")


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


def s3_requests(log: Path, skip: int, by_unit: dict | None = None) -> tuple[Counter, int]:
    """Requests in moto's log after its first ``skip`` lines, by kind; and the new line count.
    ``by_unit``: also counted there by the unit their key belongs to (:func:`unit_of`)."""
    lines = log.read_text(errors="replace").splitlines()
    kinds: Counter = Counter()
    for line in lines[skip:]:
        match = REQUEST.search(COLOUR.sub("", line))
        if not match:
            continue
        method, target = match.groups()
        path, _, query = target.partition("?")
        key = path
        if method == "GET" and path.strip("/").count("/") == 0 and ("list-type" in query or "prefix" in query):
            method = "LIST"
            key = parse_qs(query).get("prefix", [""])[0]
        kinds[method] += 1
        if by_unit is not None:
            by_unit[unit_of(key)][method] += 1
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
    by_unit: dict = defaultdict(Counter)
    kinds, skip = s3_requests(log, skip, by_unit)
    task_cpu = sum(executor.cpu.values())
    row = {"stage": stage, "result": result, "urls": urls, "wall_s": wall, "cpu_s": cpu,
           "tasks": {name: (executor.tasks[name], executor.cpu[name]) for name in executor.cpu},
           "coordinator_cpu_s": max(0.0, cpu - task_cpu), "s3": kinds, "s3_by_unit": by_unit,
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
    parser.add_argument("--json", help="also write the rows and the formulas to this file (scripts/project_cluster.py)")
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
                        row["units"] = {"bucket": store.manifest("crawldb").buckets, "partition": 0, "chunk": 0}
                        break
                    listed = row["result"].urls
                    for stage, run, urls in (
                            ("fetch", lambda ex: fetch_segment(store, config, segment, executor=ex), listed),
                            ("update", lambda ex: update_segment(store, config, segment, executor=ex), known)):
                        row, skip = measure(stage, run, store, client, prefix, log, skip, urls)
                        show(cycle, row)
                        rows.append(row)
                    units = cycle_units(store, segment, rows[-3]["result"].partitions)
                    for row in rows[-3:]:
                        row["units"] = units
                totals(rows)
                formulas = request_formulas(rows)
                print_formulas(formulas)
                if args.json:
                    write_json(Path(args.json), args, rows, formulas)
        finally:
            moto.terminate()
            moto.wait(10)


def cycle_units(store: Store, segment: str, partitions: int) -> dict[str, int]:
    """The counts a cycle's requests scale with: crawl DB buckets, fetch partitions, fetch chunks."""
    chunks = len(store.list(store.segment_dir(segment) / "fetched", "part-*-c*.parquet"))
    return {"bucket": store.manifest("crawldb").buckets, "partition": partitions, "chunk": chunks}


def request_formulas(rows: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    """Per stage and request kind: requests per cycle ("fixed") and per bucket, partition and
    chunk, from the requests on each kind of key over all the cycles measured."""
    formulas = {}
    for stage in ("generate", "fetch", "update"):
        mine = [r for r in rows if r["stage"] == stage and "units" in r]
        if not mine:
            continue
        per: dict[str, dict[str, float]] = defaultdict(dict)
        for unit in ("fixed", "bucket", "partition", "chunk"):
            count = len(mine) if unit == "fixed" else sum(r["units"][unit] for r in mine)
            for kind in sorted({k for r in mine for k in r["s3_by_unit"].get(unit, {})}):
                total = sum(r["s3_by_unit"].get(unit, {}).get(kind, 0) for r in mine)
                per[kind][unit] = total / count if count else 0.0
        formulas[stage] = dict(per)
    return formulas


def print_formulas(formulas: dict) -> None:
    print("\nS3 requests per cycle as a formula (B buckets, P partitions, C fetch chunks):")
    for stage, kinds in formulas.items():
        terms = []
        for kind, per in sorted(kinds.items()):
            parts = [f"{per[u]:.1f}{'' if u == 'fixed' else ' ' + u[0].upper()}" for u in
                     ("fixed", "bucket", "partition", "chunk") if per.get(u)]
            terms.append(f"{kind} = " + " + ".join(parts))
        print(f"  {stage:8} " + "; ".join(terms))


def write_json(path: Path, args, rows: list[dict], formulas: dict) -> None:
    keep = ("stage", "urls", "wall_s", "cpu_s", "coordinator_cpu_s", "s3", "s3_by_unit", "written_mb", "units")
    out = [{k: r[k] for k in keep if k in r} | {"tasks": {n: {"count": c, "cpu_s": cpu} for n, (c, cpu) in r["tasks"].items()}}
           for r in rows]
    path.write_text(json.dumps({"bench": "bench_cluster", "hosts": args.hosts, "pages": args.pages,
                                "buckets": args.buckets, "partitions": args.partitions, "rows": out,
                                "formulas": formulas}, indent=1, default=str))


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
