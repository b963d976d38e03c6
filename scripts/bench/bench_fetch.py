"""Benchmark of the fetch stage (cycles.fetch) next to Scrapy, on the same local test web, in one run.

Usage::

    .venv/bin/python scripts/bench_fetch.py                      # ours, Scrapy, profile (~4-5 min)
    .venv/bin/python scripts/bench_fetch.py --only ours --profile-seconds 0
    .venv/bin/python scripts/bench_fetch.py --only scrapy --scrapy-seconds 30
    .venv/bin/python scripts/bench_fetch.py --hosts 500 --pages-per-host 10 --py-spy
    .venv/bin/python scripts/bench_fetch.py --replay 1500 --replay-repeat 5   # CPU per page, no network

Setup: the test web (``testweb``) with ``--hosts`` regular hosts (default 2,000) of
``--pages-per-host`` pages of ~30 KB HTML (``special=False``), served by its own process.
Politeness is real: one request at a time per host, one second apart, so ``--hosts`` caps the
rate at ``hosts`` pages/s.

1. **ours**: a store in a temporary folder; every reachable URL of the web (the oracle's
   ``expected_reachable``: ``/``, ``/p/0..N-1.html``, ``/meta-nofollow.html`` per host) is
   injected and one ``generate`` puts them all in one segment (``top_n`` raised to the web's
   size: the scenario, not a fetch setting). Then ``python -m cycles fetch`` runs alone, as a
   subprocess, with the default configuration: one worker process per core, and the
   segment planned for ``--seconds`` (``generate.segment_s``, whose default, 120 s, is
   ``--seconds``'s), so the fetch ends there or when it becomes a tail (docs/segments.md).
   With ``--set``, that default run comes first and the run with the overrides after it.
2. **scrapy**: ``scripts/scrapy_peer.py`` as a subprocess: the same start URLs, robots.txt
   obeyed, one request per host, DOWNLOAD_DELAY 1 s, link following, for ``--scrapy-seconds``.
3. Figures for both, measured the same way: wall time of the subprocess (Python start-up
   included) and of the crawl proper; pages = HTML pages answered 200 and processed (ours:
   outcome ``ok``; Scrapy: parse callbacks); CPU-ms per page = user + system time of the
   subprocess and all its descendants (``os.wait4`` rusage) over pages; peak RSS = the largest
   VmHWM among them, polled from /proc (``ru_maxrss`` carries the benchmark's own size over
   fork + exec); politeness violations from the server's request log, per host:
   *overlap* (a request starting before the previous response ended), *gap* (previous
   response end -> next request start under 1 s - 5 ms: our rule) and *start gap* (start ->
   start under 1 s - 5 ms: Scrapy's own DOWNLOAD_DELAY rule). The server's CPU seconds
   (``/proc/<pid>/stat``) are reported per phase: it shares the two cores with the crawler.
   So is the rest of the machine: per phase the CPU seconds used by OTHER processes
   (/proc/stat minus crawler and server), the crawler's runnable-but-waiting time
   (/proc/<pid>/task/*/schedstat) and the CPU pressure (/proc/pressure/cpu) are printed; on a
   shared machine read pages/s next to them. Also printed: the per-host gap distribution
   (p50 far above 1 s = hosts waiting on the crawler, not on politeness), requests/s per 10 s
   window, and for ours the transfer durations the worker measured (they feed
   ``fetch.delay_factor``'s slow-host rule).
4. **profile**: ours again in-process (``processes=1``, one partition) under cProfile for
   ``--profile-seconds``; the top 25 functions by cumulative and by own time. With ``--py-spy``
   the production-shaped fetch of step 1 is also sampled by py-spy (subprocesses included,
   no instrumentation overhead) and the hottest functions are printed (CPU and RSS of ours
   then include py-spy itself).

5. **replay** (``--replay PAGES``, alone: no server, no Scrapy): the CPU per page of the fetch
   worker's per-page path without the network, for A/B comparisons of a code change on a
   shared machine, where pages/s and the crawl's CPU-ms/page move with the other processes.
   PAGES test-web pages (30 a host, rendered in-process) are injected and generated into one
   partition; a :class:`~cycles.fetch.worker.PartitionFetcher` loads it, and each page goes
   through what ``_finish`` does once libcurl is done: a Transfer fed the server's header lines
   and the body in 16 KB chunks, ``configure`` on a reset easy handle, ``_finish_page`` (parse,
   discovery, WARC records, the row), the spacing and the frontier; then the chunk's commit.
   Printed: CPU-ms per page (process time) of the loop and of the commit, best and median of
   ``--replay-repeat`` passes, and with ``--profile-seconds`` > 0 a cProfile of one pass on the
   process-time clock (under load the default wall clock charges waiting to whatever ran).
   The process's memory is set up as a pool worker's (``keep_memory_mapped``): without it the
   commit's CPU varied 0.15-0.67 ms a page from pass to pass with the kernel's huge-page zeroing.
   Not included: libcurl's own work, robots.txt, the loop's select.

``--set section.key=value`` overrides a setting of ours for experiments (e.g.
``--set fetch.delay_factor=0``); ``--keep`` keeps stores, server log, Scrapy log and the
pstats file.

Targets (issue #3): >= 1,000 pages/s, >= 5x Scrapy, <= 1.5 CPU-ms/page, zero violations.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import json
import os
import pstats
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchlib import by_host_round_robin, scrapy_peer_command  # noqa: E402
from cycles.tables.segment import stage_marker  # noqa: E402
from cycles.config import Config, config_from_dict  # noqa: E402
from cycles.errors import CrawlError  # noqa: E402
from cycles.fetch.fetch import fetch_segment  # noqa: E402
from cycles.generate.generate import generate  # noqa: E402
from cycles.commands.inject import inject  # noqa: E402
from cycles.storage.store import Store  # noqa: E402
from testweb.harness import TestWeb  # noqa: E402

SLACK_S = 0.005
"""Clock slack between the server's and the crawler's time.time() (as in tests/test_e2e.py)."""

DELAY_S = 1.0


# --- measuring ---------------------------------------------------------------------------
def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of one live process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class MachineLoad:
    """What else the machine did during a phase: CPU seconds of every process (/proc/stat),
    and the share of time some runnable task waited for a CPU (/proc/pressure/cpu)."""

    def __init__(self) -> None:
        self.t0, self.busy0, self.pressure0 = time.monotonic(), self._busy(), self._pressure()

    @staticmethod
    def _busy() -> float:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)
        return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _pressure() -> float | None:
        try:
            line = Path("/proc/pressure/cpu").read_text().split("\n", 1)[0]
            return int(line.rsplit("total=", 1)[1]) / 1e6
        except (OSError, IndexError, ValueError):
            return None

    def end(self) -> dict:
        wall = time.monotonic() - self.t0
        pressure = self._pressure()
        return {"machine_busy_cpu_s": self._busy() - self.busy0, "machine_wall_s": wall,
                "cpu_pressure_pct": None if pressure is None or self.pressure0 is None
                else 100 * (pressure - self.pressure0) / wall}


def descendants(pid: int) -> list[int]:
    """A process and all its descendants (Linux /proc/<pid>/task/<tid>/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                todo.extend(int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
    return out


def peak_rss_kb(pid: int) -> int | None:
    """VmHWM (peak resident set of the process's current image) in KB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return None


def run_delay_s(pid: int) -> float | None:
    """Seconds the process's threads spent runnable but waiting for a CPU (schedstat)."""
    total, found = 0, False
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[1])
                found = True
            except (FileNotFoundError, ProcessLookupError, IndexError):
                pass
    except (FileNotFoundError, ProcessLookupError):
        return None
    return total / 1e9 if found else None


def run_measured(cmd: list[str], *, timeout_s: float, log_path: Path, env: dict | None = None) -> dict:
    """Run a command; return wall seconds, exit code, CPU seconds of it and every descendant
    (``wait4`` rusage of that one child), and peak RSS.

    Peak RSS is polled (VmHWM of every process of the tree, every 0.1 s), not taken from
    ``ru_maxrss``: Linux carries the parent's resident size over a fork + exec into
    ``ru_maxrss``, so the benchmark's own size would be reported as the crawler's.
    ``maxrss_mb`` is the largest process; ``sum_rss_mb`` the sum of the peaks of all of them."""
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=REPO,
                                env=env, start_new_session=True)
    killer = threading.Timer(timeout_s, lambda: os.killpg(proc.pid, signal.SIGKILL))
    killer.start()
    peaks: dict[int, int] = {}
    waits: dict[int, float] = {}
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            for pid in descendants(proc.pid):
                kb = peak_rss_kb(pid)
                if kb is not None:
                    peaks[pid] = max(kb, peaks.get(pid, 0))
                wait = run_delay_s(pid)
                if wait is not None:
                    waits[pid] = max(wait, waits.get(pid, 0.0))
            done.wait(0.1)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        killer.cancel()
        done.set()
        poller.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"wall_s": time.monotonic() - started, "rc": proc.returncode,
            "cpu_s": usage.ru_utime + usage.ru_stime, "user_s": usage.ru_utime, "sys_s": usage.ru_stime,
            "maxrss_mb": max(peaks.values(), default=0) / 1024, "sum_rss_mb": sum(peaks.values()) / 1024,
            "processes": len(peaks), "runq_wait_s": sum(waits.values()),
            "rss_by_process_mb": sorted((kb / 1024 for kb in peaks.values()), reverse=True)}


def read_log(web: TestWeb, skip: int) -> list[dict]:
    """Server log records after the first ``skip`` (the log of the phases before)."""
    time.sleep(0.3)  # the server flushes its log at the end of a loop iteration
    return web.requests()[skip:]


def politeness(requests: list[dict], delay_s: float = DELAY_S) -> dict:
    """Per host, consecutive requests judged against the delay (see the module doc)."""
    by_host: dict[str, list[dict]] = collections.defaultdict(list)
    for r in requests:
        by_host[r["host"] or r.get("ip") or "?"].append(r)
    out = {"overlaps": [], "gaps": [], "start_gaps": [], "gap_values": [], "duplicates": 0,
           "connections": len({r["conn_id"] for r in requests}), "requests": len(requests)}
    for host, rows in by_host.items():
        rows.sort(key=lambda r: r["t_start"])
        seen = collections.Counter(r["path"] for r in rows)
        out["duplicates"] += sum(n - 1 for n in seen.values() if n > 1)
        for prev, nxt in zip(rows, rows[1:]):
            gap = nxt["t_start"] - prev["t_end"]
            start_gap = nxt["t_start"] - prev["t_start"]
            out["gap_values"].append(gap)
            detail = (host, prev["path"], nxt["path"], round(gap, 4), round(start_gap, 4),
                      prev["status"], prev["conn_id"], nxt["conn_id"])
            if nxt["t_start"] < prev["t_end"]:
                out["overlaps"].append(detail)
            elif gap < delay_s - SLACK_S:
                out["gaps"].append(detail)
            if start_gap < delay_s - SLACK_S:
                out["start_gaps"].append(detail)
    return out


def rate_timeline(requests: list[dict], step_s: float = 10.0) -> list[tuple[float, float]]:
    """Requests per second in consecutive windows of the phase (shows ramp-up and tail)."""
    if not requests:
        return []
    t0 = min(r["t_start"] for r in requests)
    counts = collections.Counter(int((r["t_start"] - t0) // step_s) for r in requests)
    return [(k * step_s, counts[k] / step_s) for k in range(max(counts) + 1)]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# --- ours ----------------------------------------------------------------------------------
def bench_config(web: TestWeb, urls: int, seconds: float, partitions: int = 2, processes: int = 0,
                 overrides: list[str] = ()) -> Config:
    config = Config()
    config.fetch.resolve = dict(web.resolve_map())
    config.fetch.allowed_networks = ["127.0.0.0/8"]  # the test web is on loopback (SSRF guard)
    config.fetch.processes = processes
    config.generate.segment_s = seconds  # the default (120 s) unless --seconds says otherwise
    # The fetch list under test is listed whole: the default top-N unless the list is larger.
    config.generate.top_n = max(config.generate.top_n, urls)
    config.generate.partitions = partitions
    for item in overrides:
        config = apply_override(config, item)
    return config


def apply_override(config: Config, item: str) -> Config:
    """``section.key=value`` (value parsed as JSON when it can be: numbers, true/false),
    checked by the config loader like a TOML file's."""
    name, sep, raw = item.partition("=")
    section, _, key = name.strip().partition(".")
    if not sep or not key:
        raise SystemExit(f"--set {item!r}: expected section.key=value, e.g. fetch.delay_factor=0")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    values = config.to_dict()
    values.setdefault(section, {})[key] = value
    try:
        return config_from_dict(values)
    except CrawlError as exc:
        raise SystemExit(f"--set {item!r}: {exc}") from None


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(value)


def write_toml(config: Config, path: Path) -> None:
    """The config as TOML for ``python -m cycles --config`` (tables last, as TOML wants)."""
    lines = []
    for section, values in config.to_dict().items():
        lines.append(f"[{section}]")
        tables = {}
        for key, value in values.items():
            if isinstance(value, dict):
                tables[key] = value
            else:
                lines.append(f"{key} = {toml_value(value)}")
        for key, table in tables.items():
            lines.append(f"[{section}.{key}]")
            lines.extend(f"{json.dumps(k)} = {toml_value(v)}" for k, v in table.items())
        lines.append("")
    path.write_text("\n".join(lines))


def prepare_store(root: Path, config: Config, seeds_file: Path) -> tuple[Store, str, float]:
    store = Store(root)
    started = time.monotonic()
    inject(store, config, str(seeds_file))
    result = generate(store, config)
    return store, result.segment, time.monotonic() - started


def segment_counters(store: Store, segment: str) -> tuple[dict, dict]:
    folder = store.segment_dir(segment)
    counters = json.loads((folder / "stats" / "fetch.json").read_text())
    marker = stage_marker(store, segment, "fetched") or {}
    return counters, marker


def warc_bytes_by_type(store: Store, segment: str) -> dict[str, int]:
    """Compressed bytes of the segment's WARC files by record type (warc.archive decides
    which records there are; cycles/fetch/warc_records.py)."""
    from warcio.archiveiterator import ArchiveIterator

    sizes: dict[str, int] = collections.Counter()
    for path in sorted((store.segment_dir(segment) / "warc").glob("*.warc.gz")):
        with open(path, "rb") as fh:
            it = ArchiveIterator(fh)
            for record in it:
                it.read_to_end(record)
                sizes[record.rec_type] += it.get_record_length()
    return dict(sizes)


def run_ours(web: TestWeb, seeds_file: Path, urls: int, args, work: Path, overrides: list[str] | None = None,
             tag: str = "") -> dict:
    config = bench_config(web, urls, args.seconds, partitions=args.partitions, processes=args.processes,
                          overrides=args.set if overrides is None else overrides)
    store, segment, prep_s = prepare_store(work / f"ours{tag}", config, seeds_file)
    config_path = work / f"ours{tag}.toml"
    write_toml(config, config_path)
    print(f"[ours] inject + generate: {prep_s:.1f}s; segment {segment}; fetching ...", flush=True)
    cmd = [sys.executable, "-m", "cycles", "--data", str(store.root), "--config", str(config_path),
           "fetch", segment]
    spy_out = None
    if args.py_spy:
        print("[ours] --py-spy: CPU and RSS figures of ours include py-spy's own sampling", flush=True)
        spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
        spy_out = work / "pyspy.txt"
        cmd = [spy, "record", "--subprocesses", "-r", "200", "--format", "raw",
               "-o", str(spy_out), "--"] + cmd
    server0 = proc_cpu_s(web.process.pid)
    skip = len(web.requests())
    load = MachineLoad()
    m = run_measured(cmd, timeout_s=args.seconds + 300, log_path=work / f"ours{tag}.log")
    m.update(load.end())
    server_cpu = proc_cpu_s(web.process.pid) - server0
    if m["rc"] != 0:
        print((work / f"ours{tag}.log").read_text()[-3000:], file=sys.stderr)
        raise SystemExit(f"[ours] crawl fetch exited with {m['rc']}")
    counters, marker = segment_counters(store, segment)
    requests = read_log(web, skip)
    pages = counters.get("fetch/outcome/ok", 0)
    import duckdb

    durations = duckdb.connect().execute(
        f"SELECT quantile_cont(duration_ms, [0.5, 0.9, 0.99]), max(duration_ms) FROM "
        f"read_parquet('{store.segment_dir(segment)}/fetched/*.parquet') WHERE duration_ms IS NOT NULL").fetchone()
    m["duration_ms"] = durations
    m["warc_bytes"] = warc_bytes_by_type(store, segment)
    return {"name": "ours (cycles.fetch)", **m, "pages": pages, "crawl_s": marker.get("seconds", m["wall_s"]),
            "server_cpu_s": server_cpu, "counters": counters, "requests": requests,
            "politeness": politeness(requests), "spy_out": spy_out}


# --- scrapy ----------------------------------------------------------------------------------
def run_scrapy(web: TestWeb, seeds: list[str], urls: int, args, work: Path) -> dict:
    resolve_file = work / "resolve.json"
    resolve_file.write_text(json.dumps(web.resolve_map()))
    cmd, out = scrapy_peer_command(work, by_host_round_robin(seeds), args.scrapy_seconds, "--resolve",
                                   str(resolve_file), "--pages", str(urls + args.hosts),
                                   "--concurrency", str(args.scrapy_concurrency))
    print(f"[scrapy] crawling for up to {args.scrapy_seconds:g}s ...", flush=True)
    server0 = proc_cpu_s(web.process.pid)
    skip = len(web.requests())
    load = MachineLoad()
    m = run_measured(cmd, timeout_s=args.scrapy_seconds + 300, log_path=work / "scrapy.out")
    m.update(load.end())
    server_cpu = proc_cpu_s(web.process.pid) - server0
    if m["rc"] != 0 or not out.exists():
        print((work / "scrapy.out").read_text()[-3000:], file=sys.stderr)
        raise SystemExit(f"[scrapy] exited with {m['rc']}")
    summary = json.loads(out.read_text())
    requests = read_log(web, skip)
    return {"name": f"scrapy {summary['scrapy_version']}", **m, "pages": summary["pages"],
            "crawl_s": summary["crawl_seconds"], "server_cpu_s": server_cpu, "summary": summary,
            "requests": requests, "politeness": politeness(requests)}


# --- profile ---------------------------------------------------------------------------------
def run_profile(web: TestWeb, seeds_file: Path, urls: int, args, work: Path) -> None:
    config = bench_config(web, urls, args.profile_seconds, partitions=1, processes=1, overrides=args.set)
    store, segment, _ = prepare_store(work / "profile", config, seeds_file)
    print(f"[profile] in-process fetch (processes=1, one partition) under cProfile for "
          f"{args.profile_seconds:g}s ...", flush=True)
    skip = len(web.requests())
    server0 = proc_cpu_s(web.process.pid)
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    profiler = cProfile.Profile()
    started = time.monotonic()
    profiler.enable()
    result = fetch_segment(store, config, segment, processes=1)
    profiler.disable()
    wall = time.monotonic() - started
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    server_cpu = proc_cpu_s(web.process.pid) - server0
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    pages = result.counters.get("fetch/outcome/ok", 0)
    pol = politeness(read_log(web, skip))
    print(f"\n== profile: one process, {pages} pages in {wall:.1f}s = {pages / wall:.0f} pages/s, "
          f"{1000 * cpu / max(pages, 1):.2f} CPU-ms/page (cProfile overhead included), "
          f"server {server_cpu:.1f} CPU-s, violations {len(pol['overlaps']) + len(pol['gaps'])}")
    stats = pstats.Stats(profiler)
    total = sum(v[2] for v in stats.stats.values())  # sum of own times = profiled CPU+wait
    for order, title in (("cumulative", "cumulative time"), ("tottime", "own time (tottime)")):
        buf = io.StringIO()
        pstats.Stats(profiler, stream=buf).strip_dirs().sort_stats(order).print_stats(args.profile_top)
        text = buf.getvalue()
        start = text.find("   ncalls")
        print(f"\n-- top {args.profile_top} by {title} (sum of own times {total:.1f}s; "
              f"per page = /{pages}) --")
        print(text[start:].rstrip())
    profiler.dump_stats(str(work / "fetch.prof"))
    print(f"\n(pstats file: {work / 'fetch.prof'}; kept with --keep)")


def pyspy_summary(path: Path, top: int = 25) -> None:
    """Own and inclusive sample shares per function of the fetch workers, from py-spy's raw
    (collapsed) output. Samples are taken of running threads only (no --idle), so the shares
    are of the workers' CPU, not of wall time; the pool's parent process is left out."""
    own: collections.Counter = collections.Counter()
    incl: collections.Counter = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit() or "fetch_partition" not in stack:
            continue
        n = int(n)
        # py-spy frames are "function (file:line)"; drop the line so a function is one key.
        names = [f.rsplit(":", 1)[0] + ")" if f.endswith(")") else f for f in stack.split(";")]
        start = next((i for i, f in enumerate(names) if f.startswith("fetch_partition ")), 0)
        names = names[start:]
        total += n
        own[names[-1]] += n
        for name in set(names):
            incl[name] += n
    if not total:
        print("py-spy: no samples of the fetch workers")
        return
    print(f"\n== py-spy: fetch workers of the production-shaped run, {total} samples of running "
          f"threads (shares of worker CPU; C calls are charged to the Python caller) ==")
    print("-- own --")
    for name, n in own.most_common(top):
        print(f"{100 * n / total:6.1f}%  {name}")
    print("-- inclusive --")
    for name, n in incl.most_common(top):
        print(f"{100 * n / total:6.1f}%  {name}")


# --- replay ----------------------------------------------------------------------------------
def replay_responses(pages: int) -> dict[str, tuple[list[bytes], bytes]]:
    """URL -> (header lines as libcurl hands them over, body) of ``pages`` test-web pages,
    rendered in-process by testweb (the pages the crawl above fetches)."""
    from testweb.web import Web

    per_host = 30
    hosts = max(1, -(-pages // per_host))
    web = Web(hosts=hosts, pages=per_host, page_bytes=30_000, special=False)
    out = {}
    for profile in list(web.profiles.values())[:hosts]:
        for k in range(per_host):
            response = profile.handle("GET", f"/p/{k}.html", {})
            lines = [f"HTTP/1.1 {response.status} OK\r\n".encode(), b"Date: Wed, 02 Dec 2026 05:00:00 GMT\r\n",
                     b"Server: crawl-testweb\r\n"]
            lines += [f"{name}: {value}\r\n".encode() for name, value in response.headers]
            lines += [f"Content-Length: {len(response.body)}\r\n".encode(), b"\r\n"]
            out[profile.url(f"/p/{k}.html")] = (lines, response.body)
            if len(out) == pages:
                return out
    return out


def replay_pass(responses: dict, work: Path, overrides: list[str], profiler: cProfile.Profile | None) -> tuple[int, float, float]:
    """One pass of the replay (module doc, step 5): (pages, CPU s of the loop, CPU s of the commit)."""
    import pycurl

    from cycles.fetch import politeness
    from cycles.fetch.robots import RobotsRules
    from cycles.fetch.transfer import Request, Transfer, configure, resolve_entries
    from cycles.fetch.worker import PartitionFetcher

    root = Path(tempfile.mkdtemp(prefix="replay-", dir=work))
    try:
        config = Config()
        config.fetch.allowed_networks = ["127.0.0.0/8"]
        config.generate.top_n = config.generate.max_urls_per_host = len(responses)
        config.generate.max_urls_per_pattern = len(responses)  # /p/<n>.html is one pattern
        config.generate.partitions = 1
        for item in overrides:
            config = apply_override(config, item)
        seeds = root / "seeds.txt"
        seeds.write_text("\n".join(responses) + "\n")
        store, segment, _ = prepare_store(root / "store", config, seeds)
        fetcher = PartitionFetcher(store, segment, 0, config, root / "progress.json")
        fetcher.load()
        fc = fetcher.fc
        allow_all = RobotsRules.from_response(200, b"User-agent: *\nAllow: /\n", fc.robots_agent)
        slots = list(fetcher.frontier.slots.values())
        for slot in slots:  # robots.txt read and allowing all (not part of a page's cost)
            slot.robots.url, slot.robots.rules = None, allow_all
        curl = pycurl.Curl()
        pages = 0
        if profiler is not None:
            profiler.enable()
        started = time.process_time()
        for slot in slots:
            while slot.queue:
                item = slot.queue.popleft()
                if item.url not in responses:
                    continue
                lines, body = responses[item.url]
                transfer = Transfer(Request(item.url, slot.host, "page", item, []), fc, fc.max_page_bytes)
                configure(curl, transfer, fc, resolve_entries(item.url, fc.resolve))
                curl.setopt(pycurl.DNS_CACHE_TIMEOUT, fc.dns_cache_s)
                for line in lines:
                    transfer.on_header(line)
                for k in range(0, len(body), 16384):
                    transfer.on_body(body[k:k + 16384])
                transfer.ended, transfer.duration_s, transfer.ip = time.monotonic(), 0.01, "127.0.0.1"
                slot.in_flight, slot.last_request_end_wall = False, time.time()
                fetcher._finish_page(slot, transfer, None, curl)
                politeness.space_after_response(slot, transfer, fc)
                curl.reset()
                fetcher.frontier.schedule(slot)
                pages += 1
        looped = time.process_time()
        fetcher.flush()
        committed = time.process_time()
        if profiler is not None:
            profiler.disable()
        fetcher.close()
        return pages, looped - started, committed - looped
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_replay(args, work: Path) -> None:
    import statistics

    try:  # as in a fetch pool worker (cycles/fetch/worker.py), when the code measured has it
        from cycles.fetch.worker import keep_memory_mapped
    except ImportError:
        pass
    else:
        keep_memory_mapped()
    responses = replay_responses(args.replay)
    print(f"[replay] {len(responses)} test-web pages through the worker's per-page path, "
          f"{args.replay_repeat} passes ...", flush=True)
    loops, commits = [], []
    for k in range(args.replay_repeat):
        pages, loop_s, commit_s = replay_pass(responses, work, args.set, None)
        loops.append(1000 * loop_s / pages)
        commits.append(1000 * commit_s / pages)
        print(f"  pass {k + 1}: {pages} pages, CPU-ms/page {loops[-1]:.3f} + commit {commits[-1]:.3f} "
              f"= {loops[-1] + commits[-1]:.3f}", flush=True)
    totals = [a + b for a, b in zip(loops, commits)]
    print(f"\n== replay: CPU-ms/page (process time) best {min(totals):.3f} (loop {min(loops):.3f}, "
          f"commit {min(commits):.3f}), median {statistics.median(totals):.3f}; not included: libcurl, "
          f"robots.txt, the loop's select ==")
    if args.profile_seconds > 0:
        profiler = cProfile.Profile(time.process_time)
        pages, _, _ = replay_pass(responses, work, args.set, profiler)
        for order, title in (("cumulative", "cumulative"), ("tottime", "own time")):
            buf = io.StringIO()
            pstats.Stats(profiler, stream=buf).strip_dirs().sort_stats(order).print_stats(args.profile_top)
            text = buf.getvalue()
            print(f"\n-- replay profile, top {args.profile_top} by {title} CPU time ({pages} pages; "
                  f"cProfile overhead included) --")
            print(text[text.find("   ncalls"):].rstrip())


# --- report ----------------------------------------------------------------------------------
def report(results: list[dict], args) -> None:
    print("\n== fetch benchmark: %d hosts x %d pages of ~30 KB, 1 request/s/host (cap %d pages/s) ==" % (
        args.hosts, args.pages_per_host, args.hosts))
    head = (f"{'crawler':<22}{'pages':>8}{'seconds':>9}{'crawl s':>9}{'pages/s':>9}{'CPU-ms/page':>13}"
            f"{'peak RSS MB':>13}{'violations':>12}{'start<1s':>10}{'server CPU s':>14}")
    print(head)
    print("-" * len(head))
    for r in results:
        pol = r["politeness"]
        violations = len(pol["overlaps"]) + len(pol["gaps"])
        r["pages_per_s"] = r["pages"] / r["wall_s"] if r["wall_s"] else 0
        r["cpu_ms_per_page"] = 1000 * r["cpu_s"] / r["pages"] if r["pages"] else float("nan")
        print(f"{r['name']:<22}{r['pages']:>8}{r['wall_s']:>9.1f}{r['crawl_s']:>9.1f}{r['pages_per_s']:>9.0f}"
              f"{r['cpu_ms_per_page']:>13.2f}{r['maxrss_mb']:>13.0f}{violations:>12}"
              f"{len(pol['start_gaps']):>10}{r['server_cpu_s']:>14.1f}")
    print("  seconds = subprocess wall time (start-up included); pages/s = pages / seconds; crawl s = "
          "the stage's own timer;\n  CPU = user+sys of the process tree; violations = overlaps + "
          "(end->start gap < 1s-5ms); start<1s = start->start < 1s-5ms (Scrapy's rule)")
    for r in results:
        pol = r["politeness"]
        g = pol["gap_values"]
        print(f"\n[{r['name']}] requests {pol['requests']} on {pol['connections']} connections; "
              f"duplicate requests {pol['duplicates']}; CPU user {r['user_s']:.1f}s sys {r['sys_s']:.1f}s; "
              f"server CPU-ms/request {1000 * r['server_cpu_s'] / max(1, pol['requests']):.3f}; "
              f"{r['processes']} processes, peak RSS MB "
              f"{'+'.join(f'{v:.0f}' for v in r['rss_by_process_mb'])} = {r['sum_rss_mb']:.0f}")
        print(f"  end->next start gap per host: min {min(g, default=float('nan')):.3f}  p1 {pct(g, .01):.3f}  p50 {pct(g, .5):.3f}  "
              f"p90 {pct(g, .9):.3f}  p99 {pct(g, .99):.3f}  max {max(g, default=float('nan')):.3f} s")
        print("  requests/s by 10 s window: " + " ".join(f"{v:.0f}" for _, v in rate_timeline(r["requests"])))
        other = r["machine_busy_cpu_s"] - r["cpu_s"] - r["server_cpu_s"]
        pressure = r["cpu_pressure_pct"]
        print(f"  machine: {r['machine_busy_cpu_s']:.0f} CPU-s busy in {r['machine_wall_s']:.0f}s on "
              f"{os.cpu_count()} cores, of which {max(0.0, other):.0f} CPU-s by OTHER processes; crawler "
              f"runnable-but-waiting {r['runq_wait_s']:.1f}s; CPU pressure (some) "
              + (f"{pressure:.0f}%" if pressure is not None else "n/a"))
        if r.get("duration_ms"):
            (q, top) = r["duration_ms"]
            if q:
                print(f"  transfer duration_ms as the worker measured it (feeds fetch.delay_factor): "
                      f"p50 {q[0]:.0f}  p90 {q[1]:.0f}  p99 {q[2]:.0f}  max {top}")
        if "counters" in r:
            c = r["counters"]
            keys = ("fetch/requests", "robots/requests", "fetch/outcome/ok", "fetch/outcome/deferred",
                    "fetch/outcome/network_error", "fetch/timeout", "fetch/network_error", "fetch/chunks")
            print("  counters: " + ", ".join(f"{k} {c.get(k, 0)}" for k in keys))
        if r.get("warc_bytes") is not None and r["pages"]:
            sizes = r["warc_bytes"]
            print(f"  WARC bytes per page (gzip members, {sum(sizes.values()) / r['pages']:.0f} in all) by record type: "
                  + ", ".join(f"{t} {b / r['pages']:.0f}" for t, b in sorted(sizes.items(), key=lambda i: -i[1])))
        if "summary" in r:
            s = r["summary"]
            st = s["stats"]
            print(f"  close reason {s['close_reason']}; responses {st.get('response_received_count')}; "
                  f"robots {st.get('robotstxt/request_count')}; links followed {s['links_followed']}; "
                  f"filtered dupes {st.get('dupefilter/filtered')}; errors "
                  f"{ {k: v for k, v in st.items() if 'exception' in k or 'error' in k} }")
        for kind in ("overlaps", "gaps"):
            if pol[kind]:
                print(f"  !! {len(pol[kind])} politeness violations ({kind}); first ones "
                      "(host, prev path, next path, end->start gap s, start->start s, prev status, conns):")
                for d in pol[kind][:args.show_violations]:
                    print("     ", d)
    peers = [r for r in results if r["name"].startswith("scrapy") and r["pages_per_s"]]
    peer = peers[0] if peers else None
    if peer is not None and results[0]["name"].startswith("ours"):
        ours = results[0]  # the default configuration's run
        print(f"\nours / scrapy: pages/s x{ours['pages_per_s'] / peer['pages_per_s']:.2f}, "
              f"CPU-ms/page x{ours['cpu_ms_per_page'] / peer['cpu_ms_per_page']:.2f}, "
              f"peak RSS x{ours['maxrss_mb'] / peer['maxrss_mb']:.2f}")
    for r in results:
        if r["name"].startswith("ours"):
            pol = r["politeness"]
            checks = [("pages/s >= 1000", r["pages_per_s"] >= 1000),
                      ("CPU-ms/page <= 1.5", r["cpu_ms_per_page"] <= 1.5),
                      ("zero violations", not pol["overlaps"] and not pol["gaps"])]
            if peer is not None:
                checks.append(("pages/s >= 5x scrapy", r["pages_per_s"] >= 5 * peer["pages_per_s"]))
            print(f"targets ({r['name']}): " + "; ".join(f"{name}: {'PASS' if ok else 'FAIL'}" for name, ok in checks))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Example: .venv/bin/python scripts/bench_fetch.py --hosts 2000 "
                                 "--pages-per-host 30 --seconds 120 --scrapy-seconds 60")
    ap.add_argument("--hosts", type=int, default=2000, help="regular hosts of the test web (default 2000)")
    ap.add_argument("--pages-per-host", type=int, default=30,
                    help="pages /p/k.html per host; a host has this + 2 reachable URLs (default 30)")
    ap.add_argument("--seconds", type=float, default=120.0,
                    help="planned length of our segment (generate.segment_s; default 120, its default)")
    ap.add_argument("--scrapy-seconds", type=float, default=60.0,
                    help="time budget of Scrapy (CLOSESPIDER_TIMEOUT; default 60)")
    ap.add_argument("--scrapy-concurrency", type=int, default=256, help="Scrapy CONCURRENT_REQUESTS (default 256)")
    ap.add_argument("--only", choices=("ours", "scrapy"), help="run only one crawler")
    ap.add_argument("--processes", type=int, default=0, help="our fetch processes (0: one per core; default 0)")
    ap.add_argument("--partitions", type=int, default=2, help="fetch-list partitions (default 2)")
    ap.add_argument("--profile-seconds", type=float, default=20.0,
                    help="length of the cProfile run of ours (0: no profile; default 20)")
    ap.add_argument("--profile-top", type=int, default=25, help="functions listed per profile order (default 25)")
    ap.add_argument("--py-spy", action="store_true", help="also sample our production fetch with py-spy")
    ap.add_argument("--show-violations", type=int, default=20, help="violations listed per kind (default 20)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a setting of our crawler (repeatable), e.g. --set fetch.delay_factor=0")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (stores, logs, profile)")
    ap.add_argument("--replay", type=int, default=0, metavar="PAGES",
                    help="only the replay: CPU per page of the worker's per-page path, no network (module doc)")
    ap.add_argument("--replay-repeat", type=int, default=3, help="replay passes (default 3)")
    from bench_realweb import add_arguments as add_real_web_arguments

    add_real_web_arguments(ap)
    args = ap.parse_args(argv)
    if args.real_web:
        # The named-host HTTPS web (scripts/bench_realweb.py); its own defaults where none was given:
        # 3,000 hosts of 13 pages (15 URLs each: ~45,000, the list of issue 28), 60 s each crawler.
        from bench_realweb import run_fetch

        for name, real_default in (("hosts", 3000), ("pages_per_host", 13), ("seconds", 60.0)):
            if getattr(args, name) == ap.get_default(name):
                setattr(args, name, real_default)
        return run_fetch(args)
    if args.replay > 0:
        work = Path(tempfile.mkdtemp(prefix="bench-fetch-replay-"))
        try:
            run_replay(args, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return 0

    work = Path(tempfile.mkdtemp(prefix="bench-fetch-"))
    budget = (0 if args.only == "scrapy" else args.seconds + args.profile_seconds) + \
             (0 if args.only == "ours" else args.scrapy_seconds) + 600
    results = []
    started = time.monotonic()
    try:
        with TestWeb(hosts=args.hosts, pages=args.pages_per_host, page_bytes=30_000, special=False,
                     max_seconds=budget, workdir=work / "web", ready_timeout_s=120) as web:
            seeds = sorted(web.expected_reachable())
            seeds_file = work / "seeds.txt"
            seeds_file.write_text("\n".join(seeds) + "\n")
            print(f"test web: {args.hosts} hosts, {len(seeds)} reachable URLs, server pid {web.process.pid}, "
                  f"up in {time.monotonic() - started:.1f}s; work folder {work}", flush=True)
            if args.only != "scrapy" and args.set:
                # The default configuration's run first; the knob study after it.
                results.append(run_ours(web, seeds_file, len(seeds), args, work, overrides=[], tag="-defaults"))
                results[-1]["name"] = "ours, defaults"
            if args.only != "scrapy":
                results.append(run_ours(web, seeds_file, len(seeds), args, work))
                if args.set:
                    results[-1]["name"] = "ours, --set " + " ".join(args.set)
            if args.only != "ours":
                results.append(run_scrapy(web, seeds, len(seeds), args, work))
            report(results, args)
            if results and results[0].get("spy_out") and results[0]["spy_out"].exists():
                pyspy_summary(results[0]["spy_out"], args.profile_top)
            if args.only != "scrapy" and args.profile_seconds > 0:
                run_profile(web, seeds_file, len(seeds), args, work)
    finally:
        if args.keep:
            print(f"\nwork folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\ntotal {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
