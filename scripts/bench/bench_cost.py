"""The coordinator's serial part and each task type's cost, at scale (issue #11).

For each size it builds a synthetic crawl DB and a fetched segment with
scripts/bench/scale.py scale's builders (imported, not copied), and runs generate and update each
in a fresh process with a *measuring executor*: the stage function gets it as ``executor=``
and it runs every task it is given in that process, one after the other, timing each. So
whatever the stage hands to its executor (bucket tasks today; the dedup, outlink and
routing tasks, or generate's merge tasks, once those steps become tasks) is counted as
task work by its function's name, and the rest of the stage's wall time is the
coordinator's serial part: what no number of workers makes shorter.

Per stage it reports:

- wall and CPU seconds of the stage, of each task type (count, sum, largest task) and of
  the coordinator (stage minus tasks), and the coordinator's share of the wall time (the
  serial fraction: issue #11's target is at most 5 % of a cycle). CPU of processes the
  coordinator itself spawns (update's outlink pool) is shown apart: parallel, but not on
  the executor, so it cannot leave this machine;
- per task type and for the coordinator, the store's operations by kind (GET / PUT / LIST /
  HEAD / DELETE, counted by the optional hook of cycles/storage/store.py: one per call, as the
  store asks for it) with the bytes of the files read (at most what an S3 GET would fetch:
  a query reads only its columns) and written; and the bytes the process actually read and
  wrote (``/proc/self/io`` rchar/wchar, DuckDB's spill included).

Tasks run one at a time with all of DuckDB's threads (``--threads``), so a task's CPU is
the process's CPU while it ran; on a cluster they run side by side. The machine this was
written on had 2 cores shared with other work: CPU seconds compare between runs, wall
times less so. ``--json`` writes the rows for scripts/bench/cluster.py projection.

    .venv/bin/python scripts/bench/scale.py cost --sizes 1M --json /tmp/bench-cost.json
    .venv/bin/python scripts/bench/scale.py cost --sizes 10M,100M --root /big/disk --json cost.json
    .venv/bin/python scripts/bench/scale.py cost --sizes 100M --built /big/disk/built   # bench_scale's store, built once
"""

from __future__ import annotations

import argparse
import functools
import json
import types
import math
import os
import resource
import shutil
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import benchlib  # noqa: E402,F401  (the repository on sys.path)

import bench_scale  # noqa: E402  (its builders and child runner; it puts the code measured on sys.path)
from benchlib import human, parse_size, print_table  # noqa: E402

from cycles.storage.store import Store, observe_io  # noqa: E402

COORDINATOR = "coordinator"


def proc_io() -> tuple[int, int]:
    """Bytes this process has read and written through system calls (all its threads)."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["rchar"]), int(fields["wchar"])


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def task_name(fn) -> str:
    """A task type's name: its function's (through ``functools.partial``), else its class's."""
    while hasattr(fn, "func"):
        fn = fn.func
    return getattr(fn, "__name__", type(fn).__name__)


class Meter:
    """Wall, CPU and I/O of each task type and of the coordinator (everything else).

    The store's hook (cycles/storage/store.py :func:`observe_io`) reports each operation; it is
    booked to the task type running at that moment, else to the coordinator."""

    def __init__(self):
        self.running = COORDINATOR
        self.tasks: Counter = Counter()
        self.wall: Counter = Counter()
        self.cpu: Counter = Counter()
        self.child_cpu: Counter = Counter()
        self.longest: Counter = Counter()
        self.rchar: Counter = Counter()
        self.wchar: Counter = Counter()
        self.ops: dict[str, Counter] = defaultdict(Counter)
        self.op_bytes: dict[str, Counter] = defaultdict(Counter)
        self.step_wall: Counter = Counter()
        self.step_cpu: Counter = Counter()
        self.step_calls: Counter = Counter()
        self.step_own_wall: Counter = Counter()
        self.step_own_cpu: Counter = Counter()
        self.in_step = False

    def io(self, kind: str, path, nbytes: int | None) -> None:
        if nbytes is None:  # the whole file
            try:
                nbytes = os.stat(path).st_size
            except (OSError, TypeError):  # an S3 path: the store's sizes are not asked for
                nbytes = 0
        self.ops[self.running][kind] += 1
        self.op_bytes[self.running][kind] += nbytes

    def run_task(self, fn, task):
        name = task_name(fn)
        outer, self.running = self.running, name
        wall, cpu, kids, (rchar, wchar) = time.perf_counter(), time.process_time(), children_cpu(), proc_io()
        try:
            return fn(task)
        finally:
            took = time.perf_counter() - wall
            self.tasks[name] += 1
            self.wall[name] += took
            self.longest[name] = max(self.longest[name], took)
            self.cpu[name] += time.process_time() - cpu
            self.child_cpu[name] += children_cpu() - kids
            r, w = proc_io()
            self.rchar[name] += r - rchar
            self.wchar[name] += w - wchar
            self.running = outer


def time_coordinator_steps(module, meter: Meter, entry: str) -> None:
    """Wrap every function of the crawler that the stage's module calls by name, so the
    coordinator's time is split by step (the outermost step only: nested calls are inside
    it). Whatever functions the stage module has now or later are timed; calls inside tasks
    are the tasks' and are not booked."""
    for name, fn in list(vars(module).items()):
        if (name == entry or not isinstance(fn, types.FunctionType)
                or not getattr(fn, "__module__", "").startswith("cycles")):
            continue

        def timed(*args, __fn=fn, __name=name, **kwargs):
            if meter.running != COORDINATOR or meter.in_step:
                return __fn(*args, **kwargs)
            meter.in_step = True
            wall, cpu = time.perf_counter(), time.process_time()
            tasks_wall, tasks_cpu = sum(meter.wall.values()), sum(meter.cpu.values())
            try:
                return __fn(*args, **kwargs)
            finally:
                meter.step_wall[__name] += time.perf_counter() - wall
                meter.step_cpu[__name] += time.process_time() - cpu
                # A step that hands tasks to the executor (write_fetchlists) would otherwise
                # count their time as the coordinator's: its own part is what is left.
                meter.step_own_wall[__name] += time.perf_counter() - wall - (sum(meter.wall.values()) - tasks_wall)
                meter.step_own_cpu[__name] += time.process_time() - cpu - (sum(meter.cpu.values()) - tasks_cpu)
                meter.step_calls[__name] += 1
                meter.in_step = False
        setattr(module, name, functools.wraps(fn)(timed))


class MeasuringExecutor:
    """An executor (cycles/executor.py) that runs each task here, one after the other,
    and books its time to :class:`Meter` under the task function's name."""

    workers = 1

    def __init__(self, meter: Meter):
        self.meter = meter

    def map(self, fn, tasks):
        return [self.meter.run_task(fn, task) for task in list(tasks)]


def task_names(meter: Meter) -> list[str]:
    return sorted(meter.tasks, key=lambda n: -meter.wall[n])


def measure_stage(run, meter: Meter | None = None) -> tuple[object, dict]:
    """Run ``run(executor)`` with the store hook on; returns its result and the measurements."""
    meter = meter or Meter()
    previous = observe_io(meter.io)
    wall, cpu, kids, (rchar, wchar) = time.perf_counter(), time.process_time(), children_cpu(), proc_io()
    try:
        result = run(MeasuringExecutor(meter))
    finally:
        observe_io(previous)
    wall, cpu, kids = time.perf_counter() - wall, time.process_time() - cpu, children_cpu() - kids
    r, w = proc_io()
    names = task_names(meter)
    tasks = {name: {"count": meter.tasks[name], "wall_s": meter.wall[name], "cpu_s": meter.cpu[name],
                    "child_cpu_s": meter.child_cpu[name], "longest_s": meter.longest[name],
                    "read_bytes": meter.rchar[name], "written_bytes": meter.wchar[name],
                    "store_ops": dict(meter.ops[name]), "store_bytes": dict(meter.op_bytes[name])}
             for name in names}
    task_wall = sum(meter.wall.values())
    coordinator = {"wall_s": max(0.0, wall - task_wall), "cpu_s": max(0.0, cpu - sum(meter.cpu.values())),
                   "child_cpu_s": max(0.0, kids - sum(meter.child_cpu.values())),
                   "read_bytes": (r - rchar) - sum(meter.rchar.values()),
                   "written_bytes": (w - wchar) - sum(meter.wchar.values()),
                   "store_ops": dict(meter.ops[COORDINATOR]), "store_bytes": dict(meter.op_bytes[COORDINATOR]),
                   "steps": {name: {"wall_s": meter.step_wall[name], "cpu_s": meter.step_cpu[name],
                                    "own_wall_s": meter.step_own_wall[name], "own_cpu_s": meter.step_own_cpu[name],
                                    "calls": meter.step_calls[name]}
                             for name in sorted(meter.step_own_wall, key=lambda n: -meter.step_own_wall[n])}}
    return result, {"wall_s": wall, "cpu_s": cpu + kids, "tasks": tasks, "coordinator": coordinator,
                    "serial_fraction": coordinator["wall_s"] / wall if wall else 0.0}


# --- the stage children ---------------------------------------------------------------------
def run_stage(args) -> None:
    """One stage in this (fresh) process; prints ``RESULT {json}`` for bench_scale.child."""
    store = Store(args.store)
    config = bench_scale.stage_config(args)
    meter = Meter()
    if args.stage == "generate":
        from cycles.generate import generate as module
        time_coordinator_steps(module, meter, "generate")
        result, measured = measure_stage(
            lambda ex: module.generate(store, config, top_n=args.top_n, executor=ex), meter)
        out = {"segment": result.segment, "urls": result.urls, "hosts": result.hosts}
    else:
        from cycles.update import update as module
        time_coordinator_steps(module, meter, "update_segment")
        result, measured = measure_stage(
            lambda ex: module.update_segment(store, config, args.segment, executor=ex), meter)
        out = {"applied": result.applied, "counters": dict(result.counters)}
    out.update(measured, seconds=measured["wall_s"], own_cpu_s=measured["cpu_s"], peak_rss=bench_scale.own_peak_rss())
    print("RESULT " + json.dumps(out, default=str), flush=True)


# --- the parent: build, run, report ---------------------------------------------------------
def bench_size(args, size: int, top_n_pct: float) -> dict:
    root = Path(args.root) / human(size)
    store = Store(root)
    n_hosts = min(1_000_000, size // 10)
    buckets = args.buckets or max(8, 2 ** round(math.log2(max(1, size / args.bucket_rows))))
    con = bench_scale.connect(args.threads, args.memory_limit, Path(args.root) / ".duckdb-tmp")
    print(f"[{human(size)}] a segment of {top_n_pct:g} % of the crawl DB", flush=True)
    facts, hosts, counts = bench_scale.built_store(args, size, n_hosts, buckets, root, con)
    base = [sys.executable, str(Path(__file__).resolve()), "--store", str(root), "--memory-limit", args.memory_limit,
            "--threads", str(args.threads), "--cap", str(args.cap), "--partitions", str(args.partitions)]
    top_n = int(size * top_n_pct / 100)
    _, g_rss, g = bench_scale.child(base + ["--stage", "generate", "--top-n", str(top_n)],
                                    Path(args.root) / f"cost-generate-{human(size)}.log")
    show(size, "generate", g)
    seg = bench_scale.build_segment(store, g["segment"], size, n_hosts, hosts, counts, con, args.chunk_rows,
                                    args.text_chars)
    del hosts, counts
    con.close()
    _, u_rss, u = bench_scale.child(base + ["--stage", "update", "--segment", g["segment"]],
                                    Path(args.root) / f"cost-update-{human(size)}.log")
    show(size, "update", u)
    row = {"size": size, "top_n_pct": top_n_pct, "buckets": buckets, "partitions": args.partitions, "threads": args.threads,
           "selected": g["urls"], **facts, **seg,
           "generate": {k: g[k] for k in ("wall_s", "cpu_s", "tasks", "coordinator", "serial_fraction", "load")}
           | {"peak_rss": g_rss},
           "update": {k: u[k] for k in ("wall_s", "cpu_s", "tasks", "coordinator", "serial_fraction", "load")}
           | {"peak_rss": u_rss}}
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return row


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f}"


def ops_text(ops: dict, nbytes: dict) -> str:
    return " ".join(f"{kind}={ops[kind]}" + (f"({mb(nbytes.get(kind, 0))} MB)" if nbytes.get(kind) else "")
                    for kind in sorted(ops))


def show(size: int, stage: str, r: dict) -> None:
    m = size / 1e6
    c = r["coordinator"]
    print(f"[{human(size)}] {stage}: wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s (load {r['load']}); "
          f"coordinator {c['wall_s']:.1f} s wall = {r['serial_fraction']:.1%} serial, CPU {c['cpu_s']:.1f} s "
          f"+ its own pools {c['child_cpu_s']:.1f} s = {coordinator_cpu_share(r):.1%} of the CPU", flush=True)
    for name, t in r["tasks"].items():
        print(f"    task {name:24} x{t['count']:<5} wall {t['wall_s']:7.1f} s (longest {t['longest_s']:.1f}) "
              f"CPU {t['cpu_s']:7.1f} s = {t['cpu_s'] / m:6.1f} CPU-s per M URLs; read {mb(t['read_bytes'])} MB, "
              f"written {mb(t['written_bytes'])} MB; store {ops_text(t['store_ops'], t['store_bytes'])}")
    print(f"    {COORDINATOR:29} wall {c['wall_s']:7.1f} s {'':14} CPU {c['cpu_s']:7.1f} s = {c['cpu_s'] / m:6.1f} "
          f"CPU-s per M URLs; read {mb(c['read_bytes'])} MB, written {mb(c['written_bytes'])} MB; "
          f"store {ops_text(c['store_ops'], c['store_bytes'])}", flush=True)
    steps = c.get("steps", {})
    named = sum(step["own_wall_s"] for step in steps.values())
    print("      its steps (wall s / CPU s, the tasks they ran taken out): " + ", ".join(
        f"{name} {step['own_wall_s']:.1f}/{step['own_cpu_s']:.1f}" for name, step in list(steps.items())[:12])
          + f"; not in a named step {c['wall_s'] - named:.1f} s", flush=True)


def coordinator_cpu_share(stage: dict) -> float:
    """The coordinator's share of the stage's CPU (its own pools included): on a shared
    machine steadier than the share of the wall time."""
    c = stage["coordinator"]
    return (c["cpu_s"] + c["child_cpu_s"]) / stage["cpu_s"] if stage["cpu_s"] else 0.0


COLUMNS = (("size", 6), ("top %", 5), ("fetched", 8), ("bkts", 4), ("stage", 8), ("wall s", 8), ("tasks s", 8),
           ("coord s", 8), ("serial", 7), ("CPU s", 8), ("coord CPU", 9), ("CPU s/M", 8))


def table_row(r: dict, stage: str) -> list[str]:
    s = r[stage]
    tasks = sum(t["wall_s"] for t in s["tasks"].values())
    return [human(r["size"]), f"{r['top_n_pct']:g}", f"{r['fetched']:,}", str(r["buckets"]), stage,
            f"{s['wall_s']:.1f}", f"{tasks:.1f}", f"{s['coordinator']['wall_s']:.1f}", f"{s['serial_fraction']:.1%}",
            f"{s['cpu_s']:.1f}", f"{coordinator_cpu_share(s):.1%}", f"{s['cpu_s'] / (r['size'] / 1e6):.2f}"]


def show_table(rows: list[dict]) -> None:
    print_table(COLUMNS, [table_row(r, stage) for r in rows for stage in ("generate", "update")])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1M", help="crawl DB sizes, e.g. 1M,10M,100M")
    p.add_argument("--root", default="/tmp/bench-cost", help="where the synthetic stores go")
    bench_scale.add_store_args(p)
    p.add_argument("--top-n-pct", default="10,2",
                   help="top_n (the segment) as percentages of the size, each a run of its own: two let "
                        "scripts/bench/cluster.py projection tell costs that grow with the crawl DB from those of the segment")
    p.add_argument("--keep", action="store_true", help="keep the synthetic stores")
    p.add_argument("--json", help="also write the rows to this JSON file (scripts/bench/cluster.py projection reads it)")
    # child mode
    p.add_argument("--stage", choices=("generate", "update"), help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    p.add_argument("--top-n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--segment", help=argparse.SUPPRESS)
    p.add_argument("--max-temp", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.stage:
        run_stage(args)
        return
    Path(args.root).mkdir(parents=True, exist_ok=True)
    rows = []
    for size, pct in [(parse_size(s), float(p)) for s in args.sizes.split(",") for p in args.top_n_pct.split(",")]:
        started = time.monotonic()
        rows.append(bench_size(args, size, pct))
        rows[-1]["bench_s"] = round(time.monotonic() - started, 1)
        print(f"[{human(size)}] done in {rows[-1]['bench_s']:.0f} s (building included)", flush=True)
        show_table(rows)
        if args.json:
            Path(args.json).write_text(json.dumps({"bench": "bench_cost", "rows": rows}, indent=1, default=str))
    shutil.rmtree(Path(args.root) / ".duckdb-tmp", ignore_errors=True)


if __name__ == "__main__":
    main()
