"""Workers and time per cycle for 1 B and 10 B known URLs at 400 pages/s (issue #11), on paper.

Reads what the benchmarks measured and projects it, printing every assumption:

- ``--cost`` (scripts/bench_cost.py ``--json``): per task type of generate and update its
  CPU seconds and bytes, and the coordinator's serial seconds, on synthetic crawl DBs. Each
  figure is fitted as ``fixed + a × known URLs + b × URLs fetched in the cycle`` over the
  rows (bench_cost runs each size with two segment shares, so the two per-URL terms can be
  told apart, and rows of two sizes or more tell the fixed part from them; from one share
  alone everything is taken as growing with the crawl DB, which overstates what grows with
  the segment when a cycle fetches a smaller share than measured);
- ``--cluster`` (scripts/bench_cluster.py ``--json``): S3 requests per cycle by stage and
  kind as a formula of the crawl DB's buckets, the fetch partitions and the fetch chunks;
  large files cost more requests than the test web's small ones: one per ``--part-mb`` written
  (multipart parts) and one per ``--get-mb`` read (ranged GETs).

For each known-URL count and cycle length: URLs fetched per cycle = pages/s × cycle length;
generate and update of one cycle run while the next segment is fetched (``crawl run``), so
they must finish within the cycle: the coordinator's serial part first, the tasks on
``--cores-per-worker`` × workers cores (at ``--efficiency``) in the rest. Fetch workers come
from CPU per page and the bandwidth per worker. S3: requests per cycle and per month, their
price, and the request rate if all of a stage's requests went to one prefix, against S3's
per-prefix limits (3,500 PUT/COPY/POST/DELETE and 5,500 GET/HEAD per second; LIST counted with
GETs for the rate, with PUTs for the price). Prints a markdown table and names the bottleneck.

    .venv/bin/python scripts/project_cluster.py --cost /tmp/bench-cost.json --cluster /tmp/bench-cluster.json

**The incremental projection** (issue 24: update writes deltas, ``crawl compact`` merges them,
the link DB is merged on a schedule of its own; docs/incremental.md). ``--scale`` reads
scripts/bench_scale.py ``--json`` rows (one crawl DB size, two segment shares: ``--top-n-pct
1`` and ``10``), ``--point`` takes the same figures by hand; each stage's CPU seconds are
fitted as ``a × known URLs + b × URLs fetched``. For an hourly cycle (``--cycle-hours``) at
1 B and 10 B known URLs it prints the bookkeeping's CPU — generate and update every cycle,
compaction of the rows the cycle changed (amortised: a bucket is rewritten, base and deltas,
once its deltas pass ``--compact-ratio`` of it), the link DB's merge every
``--link-interval-h`` — next to the fetch fleet's, and the workers each needs::

    .venv/bin/python scripts/bench_scale.py --sizes 10M --top-n-pct 1 --built DIR --json s1.json
    .venv/bin/python scripts/bench_scale.py --sizes 10M --top-n-pct 10 --built DIR --json s10.json
    .venv/bin/python scripts/project_cluster.py --scale s1.json s10.json --commit <the code measured>
    .venv/bin/python scripts/project_cluster.py --point generate,1e7,1e5,34.6 --point generate,1e7,1e6,67 ...
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

STAGES = ("generate", "update")
WRITE_KINDS = ("PUT", "POST", "DELETE")
"""S3's 3,500-a-second class (COPY too; the crawler sends none)."""
READ_KINDS = ("GET", "HEAD", "LIST")
"""S3's 5,500-a-second class; LIST is priced like a PUT but limited with the reads here."""


@dataclass
class Fit:
    """``fixed + per_known × known URLs + per_fetched × fetched URLs`` (fixed: per cycle;
    the others per URL)."""
    per_known: float
    per_fetched: float
    fixed: float = 0.0

    def at(self, known: float, fetched: float) -> float:
        return self.fixed + self.per_known * known + self.per_fetched * fetched


TERMS = ("per_known", "per_fetched", "fixed")
SUBSETS = [("per_known", "per_fetched", "fixed"), ("per_known", "per_fetched"), ("per_known", "fixed"),
           ("per_fetched", "fixed"), ("per_known",), ("per_fetched",), ("fixed",)]
"""The terms a fit may use, in order of preference when two fit equally well: with one
segment share F/K the two per-URL terms cannot be told apart and all goes to K (the larger
projection whenever a cycle fetches a smaller share of the crawl DB than measured)."""


def fit(points: list[tuple[float, float, float]]) -> Fit:
    """Non-negative least squares of y = fixed + a·K + b·F over (K, F, y).

    Without the fixed term, whatever a stage costs regardless of size (starting DuckDB,
    reading manifests, a per-bucket step while the bucket count stays put) was booked per
    URL: from 1 M-URL rows it then grew a thousandfold in a 1 B projection. The fixed term
    needs two crawl DB sizes, the two per-URL terms two segment shares: a term the rows
    cannot tell apart from another is left out (:data:`SUBSETS` order). Each equation is
    divided by K, so every size weighs by its per-URL cost, not by its absolute seconds
    (else the largest size's noise would swamp the smallest's fixed part). Exact NNLS for
    three terms: the best of the least-squares fits on each subset of the terms whose
    coefficients are all non-negative."""
    if not points:
        return Fit(0.0, 0.0)
    k = np.array([p[0] for p in points], dtype=float)
    columns = {"per_known": np.ones_like(k), "per_fetched": np.array([p[1] for p in points], dtype=float) / k,
               "fixed": 1.0 / k}
    y = np.array([p[2] for p in points], dtype=float) / k
    best, best_residual = None, math.inf
    tie = 1e-12 * float(np.sum(y ** 2))  # float noise: a residual this close is a tie
    for terms in SUBSETS:
        scale = np.array([np.abs(columns[t]).max() or 1.0 for t in terms])
        design = np.column_stack([columns[t] for t in terms]) / scale
        if np.linalg.matrix_rank(design) < len(terms):
            continue  # the rows cannot tell these terms apart
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        coef = coef / scale
        if (coef < 0).any():
            continue
        residual = float(np.sum((design @ (coef * scale) - y) ** 2))
        if residual < best_residual - tie:  # ties keep the earlier (preferred) subset
            best, best_residual = dict(zip(terms, coef.tolist())), residual
    if best is None:
        return Fit(0.0, 0.0)
    return Fit(**{t: best.get(t, 0.0) for t in TERMS})


def sizes_measured(rows: list[dict]) -> int:
    return len({r["size"] for r in rows})


def ratios_measured(rows: list[dict]) -> int:
    return len({round(segment_urls(r, "update") / r["size"], 4) for r in rows})


def segment_urls(row: dict, stage: str) -> float:
    return float(row["selected"] if stage == "generate" else row.get("fetched", row["selected"]))


def cost_model(rows: list[dict], serial: str) -> dict[str, dict[str, Fit]]:
    """Per stage: a Fit for each task type's CPU seconds, the tasks' bytes moved, and the
    coordinator's serial seconds (its wall time, or with ``serial='cpu'`` its CPU time
    and its own pools' over 2: less disturbed on a shared machine)."""
    model: dict[str, dict[str, Fit]] = {}
    for stage in STAGES:
        names = sorted({n for r in rows for n in r[stage]["tasks"]})
        parts = {}
        for name in names:
            parts[f"task {name}"] = fit([(r["size"], segment_urls(r, stage), r[stage]["tasks"].get(name, {}).get("cpu_s", 0.0))
                                         for r in rows])
        parts["read bytes"] = fit([(r["size"], segment_urls(r, stage), sum(
            t["store_bytes"].get("GET", 0) for t in r[stage]["tasks"].values())
            + r[stage]["coordinator"]["store_bytes"].get("GET", 0)) for r in rows])
        parts["written bytes"] = fit([(r["size"], segment_urls(r, stage), sum(
            t["store_bytes"].get("PUT", 0) for t in r[stage]["tasks"].values())
            + r[stage]["coordinator"]["store_bytes"].get("PUT", 0)) for r in rows])

        def serial_s(r: dict) -> float:
            c = r[stage]["coordinator"]
            return c["wall_s"] if serial == "wall" else c["cpu_s"] + c.get("child_cpu_s", 0.0) / 2
        parts["serial"] = fit([(r["size"], segment_urls(r, stage), serial_s(r)) for r in rows])
        model[stage] = parts
    return model


def serial_steps(rows: list[dict], stage: str, serial: str) -> list[tuple[str, float]]:
    """The coordinator's steps (bench_cost's step timers) at the largest crawl DB measured,
    by share of its serial time, largest first; rows whose steps have the tasks they ran taken
    out (``own_*``) first: with them a step that hands out tasks (write_fetchlists) showed
    more than the whole serial part."""
    row = max(rows, key=lambda r: (all("own_wall_s" in step for step in r[stage]["coordinator"].get("steps", {}).values()),
                                   r["size"], segment_urls(r, stage)))
    coordinator = row[stage]["coordinator"]
    total = coordinator["wall_s"] if serial == "wall" else coordinator["cpu_s"]
    steps = coordinator.get("steps", {})
    key = "wall_s" if serial == "wall" else "cpu_s"
    # own_*: the step's time without the tasks it handed to the executor (older JSON: with them)
    return sorted(((name, step.get("own_" + key, step[key]) / total) for name, step in steps.items() if total),
                  key=lambda kv: -kv[1])


def s3_per_cycle(formulas: dict, buckets: float, partitions: float, chunks: float) -> dict[str, dict[str, float]]:
    """Requests per stage and kind from bench_cluster's formulas."""
    units = {"fixed": 1.0, "bucket": buckets, "partition": partitions, "chunk": chunks}
    return {stage: {kind: sum(per.get(u, 0.0) * n for u, n in units.items()) for kind, per in kinds.items()}
            for stage, kinds in formulas.items()}


@dataclass
class Row:
    known: float
    cycle_h: float
    fetched: float
    task_cpu_h: dict
    serial_s: dict
    db_workers: int
    fetch_workers: int
    db_wall_h: float
    s3_requests: float
    s3_usd_month: float
    peak_write_rate: float
    peak_read_rate: float
    db_bytes: float
    feasible: bool
    bottleneck: str


def project(args, model: dict, formulas: dict, known: float, cycle_h: float) -> Row:
    cycle_s = cycle_h * 3600
    fetched = args.pages_per_s * cycle_s
    cores = args.cores_per_worker * args.efficiency
    task_cpu = {f"{stage} {name[5:]}": part.at(known, fetched) for stage in STAGES
                for name, part in model[stage].items() if name.startswith("task ")}
    serial = {stage: model[stage]["serial"].at(known, fetched) for stage in STAGES}
    serial_total = sum(serial.values())
    db_bytes = sum(model[stage]["read bytes"].at(known, fetched) + model[stage]["written bytes"].at(known, fetched)
                   for stage in STAGES)
    left = cycle_s - serial_total
    feasible = left > 0
    cpu_total = sum(task_cpu.values())
    bandwidth = args.worker_gbit * 1e9 / 8
    if feasible:
        db_workers = max(1, math.ceil(max(cpu_total / (cores * left),
                                          db_bytes / (bandwidth * left))))
        db_wall = serial_total + max(cpu_total / (cores * db_workers), db_bytes / (bandwidth * db_workers))
    else:
        db_workers, db_wall = 0, serial_total + cpu_total / cores
    fetch_workers = max(1, math.ceil(max(args.pages_per_s * args.fetch_cpu_ms / 1000 / cores,
                                         args.pages_per_s * args.page_kb * 1e3 / bandwidth)))
    buckets = math.ceil(known / args.bucket_rows)
    partitions = args.partitions or fetch_workers * args.cores_per_worker
    chunks = math.ceil(fetched / args.flush_pages)
    per_stage = s3_per_cycle(formulas, buckets, partitions, chunks)
    read_bytes = sum(model[s]["read bytes"].at(known, fetched) for s in STAGES)
    written_bytes = sum(model[s]["written bytes"].at(known, fetched) for s in STAGES)
    fetch_stored = fetched * args.stored_kb * 1e3
    extra_get = read_bytes / (args.get_mb * 1e6)
    extra_put = (written_bytes + fetch_stored) / (args.part_mb * 1e6)
    totals = {k: sum(kinds.get(k, 0.0) for kinds in per_stage.values())
              for k in ("GET", "HEAD", "LIST", "PUT", "POST", "DELETE")}
    totals["GET"] += extra_get
    totals["PUT"] += extra_put
    priced_put = totals["PUT"] + totals["POST"] + totals["LIST"]
    priced_get = totals["GET"] + totals["HEAD"]
    usd_cycle = priced_put / 1000 * args.put_usd_per_1000 + priced_get / 1000 * args.get_usd_per_1000
    cycles_month = 30 * 86400 / cycle_s
    # The busiest prefix: a crawl DB version's folder takes every bucket file of update.
    db_parallel_s = max(1.0, db_wall - serial_total)
    upd = per_stage.get("update", {})
    upd_written = model["update"]["written bytes"].at(known, fetched)
    upd_read = model["update"]["read bytes"].at(known, fetched)
    write_rate = (sum(upd.get(k, 0.0) for k in WRITE_KINDS) + upd_written / (args.part_mb * 1e6)) / db_parallel_s
    read_rate = (sum(upd.get(k, 0.0) for k in READ_KINDS) + upd_read / (args.get_mb * 1e6)) / db_parallel_s
    bottleneck = name_bottleneck(args, serial, serial_total, cycle_s, task_cpu, fetch_workers, db_workers,
                                 write_rate, read_rate, cpu_total, db_bytes, bandwidth, cores)
    return Row(known, cycle_h, fetched, {k: v / 3600 for k, v in task_cpu.items()}, serial, db_workers, fetch_workers,
               db_wall / 3600, sum(totals.values()), usd_cycle * cycles_month, write_rate, read_rate, db_bytes,
               feasible, bottleneck)


def name_bottleneck(args, serial: dict, serial_total: float, cycle_s: float, task_cpu: dict, fetch_workers: int,
                    db_workers: int, write_rate: float, read_rate: float, cpu_total: float, db_bytes: float,
                    bandwidth: float, cores: float) -> str:
    """The limit that binds first: the coordinator's serial part (over the target share of
    the cycle), an S3 prefix's request rate, or the worker-hours of one task type."""
    worst = max(serial, key=serial.get)
    if serial_total >= cycle_s:
        return f"{worst}'s coordinator: {serial_total / 3600:.1f} h serial > the cycle"
    if serial_total > args.serial_target * cycle_s:
        return f"{worst}'s coordinator: serial {serial_total / cycle_s:.0%} of the cycle > {args.serial_target:.0%}"
    if write_rate > args.prefix_writes_per_s or read_rate > args.prefix_reads_per_s:
        return f"S3 prefix rate ({write_rate:,.0f} writes/s, {read_rate:,.0f} reads/s)"
    if db_bytes / bandwidth > cpu_total / cores:
        return "S3 bandwidth of generate/update workers"
    top = max(task_cpu, key=task_cpu.get)
    if db_workers >= fetch_workers:
        return f"{top} CPU ({task_cpu[top] / cpu_total:.0%} of task CPU)"
    return "fetch CPU/bandwidth"


def human(n: float) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:g} {unit}" if n % div == 0 else f"{n / div:.1f} {unit}"
    return f"{n:.0f}"


def print_assumptions(args, cost_rows: list[dict], formulas_from: str) -> None:
    sizes = ", ".join(f"{human(r['size'])} ({r.get('top_n_pct', '?')} % fetched)" for r in cost_rows)
    print("Assumptions")
    print(f"- {args.pages_per_s:g} pages/s sustained; URLs fetched per cycle = {args.pages_per_s:g} x cycle length")
    print(f"- workers of {args.cores_per_worker} cores at {args.efficiency:.0%} efficiency, {args.worker_gbit:g} Gbit/s to S3 each")
    print(f"- generate and update of a cycle run during the next cycle's fetch: they must finish within the cycle; "
          f"serial target {args.serial_target:.0%} of a cycle")
    print(f"- task CPU and the coordinator's serial {args.serial} time from bench_cost at {sizes}, fitted as "
          "fixed + a x known + b x fetched; the coordinator runs as measured (2 DuckDB threads)")
    print(f"- fetch: {args.fetch_cpu_ms:g} CPU-ms per page (bench_fetch), {args.page_kb:g} KB downloaded and "
          f"{args.stored_kb:g} KB stored (WARC + Parquet) per page")
    print(f"- crawl DB buckets of {args.bucket_rows:,.0f} URLs; fetch chunks of {args.flush_pages:,} pages; "
          f"fetch partitions {'= fetch processes' if not args.partitions else args.partitions}")
    print(f"- S3 requests per cycle from bench_cluster's formula ({formulas_from}), plus one PUT per {args.part_mb:g} MB "
          f"written and one GET per {args.get_mb:g} MB read")
    print(f"- S3 prices: ${args.put_usd_per_1000:g} per 1,000 PUT/POST/LIST, ${args.get_usd_per_1000:g} per 1,000 "
          f"GET/HEAD, DELETE free; limits per prefix {args.prefix_writes_per_s:,}/s PUT/COPY/POST/DELETE, "
          f"{args.prefix_reads_per_s:,}/s GET/HEAD (LIST counted here); rate = update's requests to one "
          "crawl DB version prefix over its parallel phase")
    print()


def print_table(rows: list[Row], args) -> None:
    print("| known URLs | cycle | fetched per cycle | generate+update task CPU-h | coordinator serial (share) "
          "| workers (gen/upd + fetch) | gen+upd wall | DB bytes moved | S3 requests per cycle | S3 request $/month "
          "| update prefix writes/s, reads/s | bottleneck |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        serial = sum(r.serial_s.values())
        share = serial / (r.cycle_h * 3600)
        workers = f"{r.db_workers} + {r.fetch_workers}" if r.feasible else "none suffices"
        print(f"| {human(r.known)} | {r.cycle_h:g} h | {human(r.fetched)} | {sum(r.task_cpu_h.values()):,.1f} "
              f"| {serial / 60:,.1f} min ({share:.1%}) | {workers} | {r.db_wall_h:.2f} h | {r.db_bytes / 1e12:,.2f} TB "
              f"| {human(r.s3_requests)} | {r.s3_usd_month:,.0f} | {r.peak_write_rate:,.1f}, {r.peak_read_rate:,.1f} "
              f"| {r.bottleneck} |")


def shortest_cycle(args, model: dict, known: float) -> float | None:
    """The shortest cycle (hours) whose coordinator serial part is within the target share."""
    per_cycle = sum(model[s]["serial"].per_known * known + model[s]["serial"].fixed for s in STAGES)
    per_second = sum(model[s]["serial"].per_fetched for s in STAGES) * args.pages_per_s
    room = args.serial_target - per_second
    return None if room <= 0 else per_cycle / room / 3600


DELTA_ROWS_PER_PAGE = 3.5
"""Delta rows per fetched page when not measured: the page's row and ~2.5 new URLs (bench_scale's
segment: 10 outlinks a page, half to new URLs, ~2 links per new URL)."""

INCR_STAGES = ("generate", "update", "compact", "links")
"""What a cycle's bookkeeping is made of once update writes deltas (docs/incremental.md)."""


def scale_points(paths: list[str]) -> list[tuple[str, float, float, float, float]]:
    """(stage, known, fetched, CPU s, rows) from bench_scale ``--json`` rows; ``rows`` is the
    rows compaction rewrote (its ``compact --all`` after the update), else 0."""
    points = []
    for path in paths:
        for r in json.loads(Path(path).read_text()):
            known, fetched = float(r["size"]), float(r.get("fetched", r["selected"]))
            points += [("generate", known, fetched, float(r["generate_cpu"]), 0.0),
                       ("update", known, fetched, float(r["update_cpu"]), 0.0)]
            if not math.isnan(float(r.get("compact_cpu", math.nan))):
                points.append(("compact", known, fetched, float(r["compact_cpu"]), float(r.get("compact_rows") or known)))
            if not math.isnan(float(r.get("links_cpu", math.nan))):
                points.append(("links", known, fetched, float(r["links_cpu"]), 0.0))
    return points


def hand_points(specs: list[str]) -> list[tuple[str, float, float, float, float]]:
    """``--point STAGE,KNOWN,FETCHED,CPU_S[,ROWS]`` as :func:`scale_points` gives them."""
    points = []
    for spec in specs:
        stage, *nums = spec.split(",")
        if stage not in INCR_STAGES or len(nums) not in (3, 4):
            raise SystemExit(f"--point {spec!r}: want STAGE,KNOWN,FETCHED,CPU_S[,ROWS] with STAGE one of "
                             f"{', '.join(INCR_STAGES)}")
        known, fetched, cpu, *rows = map(float, nums)
        points.append((stage, known, fetched, cpu, rows[0] if rows else known))
    return points


def measured_delta_rows_per_page(paths: list[str]) -> float | None:
    """Rows of an update's delta per fetched page, from bench_scale rows with update's counters (the largest):
    the fetch results plus the new URLs its outlinks added (the touched rows of demoted hosts
    and dedup marks are left out: a few %)."""
    rows = [r for path in paths for r in json.loads(Path(path).read_text()) if r.get("update_counters")]
    if not rows:
        return None
    # The largest: bench_scale writes outlinks as 10 % of the DB whatever the share fetched, so
    # its smallest segment has the most links a page (10), the nearest to a real page's.
    return max((r["update_counters"].get("update/results", 0) + r["update_counters"].get("outlinks/new", 0))
               / float(r.get("fetched", r["selected"])) for r in rows)


def incremental_model(points) -> dict[str, dict]:
    """Per stage: generate and update as ``a·known + b·fetched`` (:func:`fit`; with one crawl DB
    size a per-bucket constant is a per-known cost too, since buckets grow with the DB);
    compaction as CPU per row rewritten; the link merge as CPU per known URL (it rewrites the
    link DB, whose pairs grow with the crawl)."""
    model = {}
    for stage in ("generate", "update"):
        model[stage] = {"fit": fit([(k, f, c) for s, k, f, c, _ in points if s == stage])}
    compact = [(c, rows) for s, _, _, c, rows in points if s == "compact" and rows]
    if compact:
        model["compact"] = {"per_row": sum(c for c, _ in compact) / sum(rows for _, rows in compact)}
    links = [(c, k) for s, k, _, c, _ in points if s == "links"]
    if links:
        model["links"] = {"per_known": sum(c for c, _ in links) / sum(k for _, k in links)}
    return model


def bookkeeping_cpu_s(args, model: dict, known: float, cycle_s: float) -> dict[str, float]:
    """CPU seconds per cycle of each part of the bookkeeping at ``known`` URLs."""
    fetched = args.pages_per_s * cycle_s
    cpu = {stage: model[stage]["fit"].at(known, fetched) for stage in ("generate", "update")}
    if "compact" in model:
        # Steady state: each compaction rewrites base + deltas = (1 + r)/r times the delta rows
        # that made it due, so a cycle's delta rows cost that many rows rewritten.
        delta_rows = fetched * args.delta_rows_per_page
        cpu["compact"] = model["compact"]["per_row"] * delta_rows * (1 + args.compact_ratio) / args.compact_ratio
    if "links" in model:
        cpu["links"] = model["links"]["per_known"] * known * cycle_s / (args.link_interval_h * 3600)
    return cpu


def print_incremental(args, model: dict, points) -> None:
    cores = args.cores_per_worker * args.efficiency
    measured = sorted({(human(k), human(f)) for _, k, f, _, _ in points})
    print("Assumptions (incremental bookkeeping, docs/incremental.md)")
    print(f"- measured: bench_scale.py stage CPU seconds (stages and their pool workers) at "
          f"{', '.join(f'{k} known / {f} fetched' for k, f in measured)}"
          + (f", code of commit {args.commit}" if args.commit else ""))
    print(f"- {args.pages_per_s:g} pages/s; a cycle of {args.incr_cycle_h:g} h fetches {human(args.pages_per_s * args.incr_cycle_h * 3600)} "
          "pages; generate and update of a cycle run while the next is fetched and must finish within it")
    print(f"- generate, update: CPU = a x known + b x fetched (one crawl DB size: per-bucket constants "
          f"counted per known URL, as buckets grow with the DB at {args.bucket_rows:,.0f} URLs each)")
    print(f"- compaction: CPU per row rewritten as measured; {args.delta_rows_per_page:g} delta rows per fetched page "
          f"(its row and the new URLs it finds); a bucket rewritten once its deltas pass {args.compact_ratio:g} of it")
    print(f"- link DB merge + PageRank every {args.link_interval_h:g} h (update.link_rank_interval_s), CPU per known "
          "URL as measured (the synthetic link DB holds one pair per URL)")
    print(f"- fetch: {args.fetch_cpu_ms:g} CPU-ms per page, {args.page_kb:g} KB per page; workers of "
          f"{args.cores_per_worker} cores at {args.efficiency:.0%}, {args.worker_gbit:g} Gbit/s each")
    print()
    print("Fitted: " + "; ".join(f"{s} {m['fit'].per_known * 1e6:,.2f} CPU-s per M known + "
                                 f"{m['fit'].per_fetched * 1e6:,.2f} per M fetched"
                                 for s, m in model.items() if "fit" in m)
          + ("; compaction {:,.2f} CPU-s per M rows rewritten".format(model["compact"]["per_row"] * 1e6)
             if "compact" in model else "")
          + ("; link merge {:,.2f} CPU-s per M known".format(model["links"]["per_known"] * 1e6)
             if "links" in model else ""))
    print()
    print_incremental_table(args, model, cores)


def print_incremental_table(args, model: dict, cores: float) -> None:
    cycle_s = args.incr_cycle_h * 3600
    fetch_cores = args.pages_per_s * args.fetch_cpu_ms / 1000
    bandwidth = args.worker_gbit * 1e9 / 8
    fetch_workers = max(1, math.ceil(max(fetch_cores / cores, args.pages_per_s * args.page_kb * 1e3 / bandwidth)))
    parts = [s for s in INCR_STAGES if s in model]
    print("| known URLs | " + " | ".join(f"{s} CPU-h" for s in parts) + " | bookkeeping CPU-h (cores busy) "
          "| fetch CPU-h (cores busy) | workers: bookkeeping + fetch | bookkeeping <= fetch fleet? |")
    print("|---|" + "---|" * (len(parts) + 4))
    for known in (float(k) for k in args.known.split(",")):
        cpu = bookkeeping_cpu_s(args, model, known, cycle_s)
        total = sum(cpu.values())
        book_workers = max(1, math.ceil(total / cycle_s / cores))
        verdict = "yes" if book_workers <= fetch_workers else f"no: {total / cycle_s / fetch_cores:,.0f}x its CPU"
        print(f"| {human(known)} | " + " | ".join(f"{cpu[s] / 3600:,.2f}" for s in parts)
              + f" | {total / 3600:,.2f} ({total / cycle_s:,.1f}) | {fetch_cores * cycle_s / 3600:,.2f} "
                f"({fetch_cores:,.1f}) | {book_workers} + {fetch_workers} | {verdict} |")
    print()
    for known in (float(k) for k in args.known.split(",")):
        cpu = bookkeeping_cpu_s(args, model, known, cycle_s)
        per_known = sum(model[s]["fit"].per_known * known for s in ("generate", "update"))
        print(f"{human(known)}: of the bookkeeping's {sum(cpu.values()) / 3600:,.1f} CPU-h per cycle, "
              f"{per_known / 3600:,.1f} grow with the known URLs in generate and update (full-DB scans), "
              + (f"{cpu['links'] / 3600:,.1f} are the link merge; " if "links" in cpu else "")
              + f"the fleet's bar is {fetch_workers * cores * cycle_s / 3600:,.1f} CPU-h "
                f"({fetch_workers} worker(s) of {args.cores_per_worker} cores at {args.efficiency:.0%})")
        rest = sum(cpu.values()) - per_known - cpu.get("links", 0.0)
        budget = (fetch_workers * cores * cycle_s - rest) / known
        measured = (per_known + cpu.get("links", 0.0)) / known
        print(f"  within the fleet needs at most {budget * 1e6:,.2f} CPU-µs per known URL per cycle in "
              f"generate + update + the link merge; measured {measured * 1e6:,.2f}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cost", nargs="+", help="bench_cost.py --json file(s)")
    p.add_argument("--cluster", help="bench_cluster.py --json file")
    p.add_argument("--scale", nargs="+", default=[],
                   help="bench_scale.py --json file(s): the incremental projection (module doc)")
    p.add_argument("--point", action="append", default=[],
                   help="STAGE,KNOWN,FETCHED,CPU_S[,ROWS] measured by hand (STAGE: generate, update, compact "
                        "with the rows it rewrote, links); repeatable, instead of or beside --scale")
    p.add_argument("--commit", default="", help="the commit whose code was measured (printed)")
    p.add_argument("--incr-cycle-hours", dest="incr_cycle_h", type=float, default=1.0,
                   help="cycle length of the incremental projection, hours")
    p.add_argument("--delta-rows-per-page", type=float, default=None,
                   help="crawl DB rows an update's delta holds per fetched page (its row + new URLs found); "
                        f"default: from --scale rows' update counters, else {DELTA_ROWS_PER_PAGE:g}")
    p.add_argument("--compact-ratio", type=float, default=0.25, help="db.compact_ratio")
    p.add_argument("--link-interval-h", type=float, default=6.0, help="update.link_rank_interval_s, hours")
    p.add_argument("--known", default="1e9,1e10", help="known URLs to project, comma-separated")
    p.add_argument("--cycle-hours", default="1,6,24", help="cycle lengths to project, hours")
    p.add_argument("--pages-per-s", type=float, default=400.0)
    p.add_argument("--cores-per-worker", type=int, default=8)
    p.add_argument("--efficiency", type=float, default=0.7, help="share of a worker's cores the tasks keep busy")
    p.add_argument("--worker-gbit", type=float, default=10.0, help="network to S3 per worker, Gbit/s")
    p.add_argument("--serial", choices=("wall", "cpu"), default="wall",
                   help="the coordinator's serial part: its wall time (quiet machine) or CPU time (shared one)")
    p.add_argument("--serial-target", type=float, default=0.05, help="issue #11: at most 5 %% of a cycle")
    p.add_argument("--fetch-cpu-ms", type=float, default=3.05,
                   help="fetch CPU per page (bench_fetch.py on this 2-core VM, quiet: 3.05)")
    p.add_argument("--page-kb", type=float, default=60.0, help="bytes downloaded per page, KB")
    p.add_argument("--stored-kb", type=float, default=20.0, help="bytes stored per page (WARC, Parquet), KB")
    p.add_argument("--bucket-rows", type=float, default=1.6e6, help="URLs per crawl DB bucket (docs/cluster.md)")
    p.add_argument("--flush-pages", type=int, default=0, help="pages per fetch chunk (0: fetch.flush_pages)")
    p.add_argument("--partitions", type=int, default=0, help="fetch partitions (0: one per fetch core)")
    p.add_argument("--part-mb", type=float, default=10.0, help="bytes per multipart part (one PUT each), MB")
    p.add_argument("--get-mb", type=float, default=8.0, help="bytes per ranged GET of a large file, MB")
    p.add_argument("--put-usd-per-1000", type=float, default=0.005, help="S3 Standard us-east-1 PUT/COPY/POST/LIST")
    p.add_argument("--get-usd-per-1000", type=float, default=0.0004, help="S3 Standard us-east-1 GET/HEAD")
    p.add_argument("--prefix-writes-per-s", type=int, default=3500)
    p.add_argument("--prefix-reads-per-s", type=int, default=5500)
    args = p.parse_args(argv)
    if not args.flush_pages:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from cycles.config import Config
        args.flush_pages = Config().fetch.flush_pages

    if args.scale or args.point:
        points = scale_points(args.scale) + hand_points(args.point)
        if args.delta_rows_per_page is None:
            args.delta_rows_per_page = measured_delta_rows_per_page(args.scale) or DELTA_ROWS_PER_PAGE
        print_incremental(args, incremental_model(points), points)
        if not args.cost:
            return
        print()
    if not args.cost or not args.cluster:
        p.error("give --cost and --cluster (the bench_cost projection), or --scale / --point (the incremental one)")
    cost_rows = [row for path in args.cost for row in json.loads(Path(path).read_text())["rows"]]
    cluster = json.loads(Path(args.cluster).read_text())
    model = cost_model(cost_rows, args.serial)
    print_assumptions(args, cost_rows, f"test web of {cluster['hosts']} x {cluster['pages']} pages, "
                                       f"{cluster['buckets']} buckets, {cluster['partitions']} partitions")
    if ratios_measured(cost_rows) < 2:
        print("Note: one segment share measured: every cost taken as growing with the crawl DB "
              "(run bench_cost with --top-n-pct 10,2 to separate the segment's part).\n")
    if sizes_measured(cost_rows) < 2:
        print("Note: one crawl DB size measured: no fixed part can be told from the per-URL ones "
              "(run bench_cost at two sizes or more).\n")
    print("Fitted costs (per million known URLs | per million fetched in the cycle | fixed per cycle; "
          "bytes per URL | per URL | per cycle)")
    for stage in STAGES:
        for name, part in model[stage].items():
            if name.startswith("task") or name == "serial":
                print(f"- {stage} {name}: {part.per_known * 1e6:,.2f} | {part.per_fetched * 1e6:,.2f} | "
                      f"{part.fixed:,.1f} s")
            else:  # bytes per URL
                print(f"- {stage} {name}: {part.per_known:,.0f} | {part.per_fetched:,.0f} | "
                      f"{part.fixed / 1e6:,.1f} MB")
    for stage in STAGES:
        steps = serial_steps(cost_rows, stage, args.serial)
        if steps:
            print(f"- {stage}'s serial part by step: " + ", ".join(f"{name} {share:.0%}" for name, share in steps[:6]))
    print()
    rows = [project(args, model, cluster["formulas"], float(k), float(h))
            for k in args.known.split(",") for h in args.cycle_hours.split(",")]
    print_table(rows, args)
    print()
    for known in sorted({r.known for r in rows}):
        shortest = shortest_cycle(args, model, known)
        print(f"{human(known)} known URLs: the shortest cycle with the coordinator within "
              f"{args.serial_target:.0%} is " + (f"{shortest:.1f} h" if shortest is not None else
                                                 "none: the serial part per fetched page alone exceeds it"))
    worst = max(rows, key=lambda r: r.known)
    print(f"Bottleneck at {human(worst.known)}: " + "; ".join(f"{r.cycle_h:g} h cycle: {r.bottleneck}"
                                                             for r in rows if r.known == worst.known))


if __name__ == "__main__":
    main()
