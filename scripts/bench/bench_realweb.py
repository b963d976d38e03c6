"""Benchmarks on the named-host HTTPS test web (issue 28), ``--real-web`` of bench_fetch and bench_crawl.

Usage::

    .venv/bin/python scripts/bench_fetch.py --real-web            # 3,000 hosts, 60 s each crawler
    .venv/bin/python scripts/bench_fetch.py --real-web --hosts 500 --seconds 30 --scrapy-seconds 30
    .venv/bin/python scripts/bench_crawl.py --real-web --seconds 300

The web (:class:`testweb.realweb.RealWeb`): ``--hosts`` regular hosts, 90 % of them HTTPS
from the test CA (``--https``), the bad-TLS hosts (expired, wrong name, self-signed,
stalled handshake, TLS 1.0 only), a round trip per host drawn in ``--rtt-ms`` (default
20-500 ms, held by the server before every response and ServerHello), and its DNS server:
every name answered after 10-200 ms (``--dns-ms``) with a 300 s TTL, plus names that
answer NXDOMAIN, SERVFAIL or nothing (5 URLs each in the fetch list / seeds).

Both crawlers run inside the namespace (testweb/namespace.py), each with the system
resolver configuration and CA store and nothing pointed at the test web: ours with the
default configuration (only ``fetch.allowed_networks = ["127.0.0.0/8"]``, the SSRF guard
refusing loopback otherwise, and what puts the list in one segment); Scrapy with its own
defaults for DNS (its caching threaded resolver), TLS (which does not verify) and HTTP
(HTTP/1.1 only: Scrapy 2.x has an HTTP/2 download handler, ``H2DownloadHandler``, but it is
not the default and we leave it off). Half of the good HTTPS hosts offer HTTP/2 (``--h2``,
RealWeb's default ``H2_SHARE``); ours negotiates it by ALPN (libcurl's default).

Printed side by side: pages/s, CPU-ms/page, hosts in flight (the server's request log:
the time requests were open, summed, over the window: one request per host at a time, so
this is hosts being answered at once), DNS queries per name (the DNS server's log: A
queries per resolving name, mean and max, and per failing name), requests completed to the
bad-certificate hosts, politeness faults, the share of HTTPS requests served over HTTP/2
(the server's log); and ``uptime`` at start and end (a shared machine).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import benchlib  # noqa: E402
from testweb.dns import FAILING_NAMES  # noqa: E402
from testweb.realweb import H2_SHARE, RealWeb  # noqa: E402


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average %.2f %.2f %.2f" % os.getloadavg()


def add_arguments(ap) -> None:
    """The ``--real-web`` flag and its web's physics (added to both benchmarks' parsers)."""
    ap.add_argument("--real-web", action="store_true",
                    help="the named-host HTTPS web behind the test DNS server, both crawlers run in the "
                    "namespace with the system resolver and CA store (scripts/bench_realweb.py)")
    ap.add_argument("--https", type=float, default=0.9, help="--real-web: share of HTTPS hosts (default 0.9)")
    ap.add_argument("--h2", type=float, default=H2_SHARE,
                    help=f"--real-web: share of the good HTTPS hosts offering HTTP/2 (default {H2_SHARE}, RealWeb's; "
                    "0: HTTP/1.1 only)")
    ap.add_argument("--rtt-ms", default="20-500", help="--real-web: round trip range per host, ms (default 20-500)")
    ap.add_argument("--dns-ms", default="10-200", help="--real-web: DNS answer delay range per name, ms (default 10-200)")
    ap.add_argument("--server-processes", type=int, default=2,
                    help="--real-web: test web server processes, each serving a share of the hosts (default 2: "
                    "one process did every TLS handshake of 3,000 hosts and was the limit; testweb/server.py)")


def _range(text: str) -> tuple[float, float]:
    lo, _, hi = text.partition("-")
    return float(lo), float(hi or lo)


def open_real_web(args, hosts: int, work: Path, max_seconds: float, **web_kw) -> RealWeb:
    return RealWeb(hosts, https=args.https, h2=args.h2, tls=True, rtt_ms=_range(args.rtt_ms), dns_latency_ms=_range(args.dns_ms),
                   workdir=work / "realweb", max_seconds=max_seconds, ready_timeout_s=300,
                   processes=args.server_processes, **web_kw)


def servers_cpu_s(real: RealWeb) -> tuple[float, float]:
    """CPU seconds so far of the test web's server processes and of its DNS server."""
    from bench_fetch import proc_cpu_s

    try:
        dns = proc_cpu_s(real.dns.process.pid)
    except (AttributeError, OSError):
        dns = float("nan")
    return real.web.cpu_seconds(), dns


# --- figures -----------------------------------------------------------------------------------
def in_flight(requests: list[dict], t0: float, t1: float) -> float:
    """Mean requests open at the server over [t0, t1] (one per host at a time: hosts in flight)."""
    if t1 <= t0:
        return 0.0
    return sum(max(0.0, min(r["t_end"], t1) - max(r["t_start"], t0)) for r in requests) / (t1 - t0)


def dns_figures(real: RealWeb, t0: float, t1: float) -> dict:
    """A queries per name the crawler sent in [t0, t1] (the server's log)."""
    queries = [q for q in real.dns.queries() if t0 <= q["t"] <= t1]
    a = collections.Counter(q["name"] for q in queries if q["type"] == "A")
    resolving = [n for n in a if n not in FAILING_NAMES]
    return {"queries": len(queries), "names": len(a),
            "a_per_name_mean": sum(a[n] for n in resolving) / len(resolving) if resolving else 0.0,
            "a_per_name_max": max((a[n] for n in resolving), default=0),
            "failing": {FAILING_NAMES[n]: a.get(n, 0) for n in FAILING_NAMES}}


def http2_share(requests: list[dict]) -> tuple[int, int]:
    """(requests over HTTP/2, requests over HTTPS), from the server's log (``http_version``)."""
    https = [r for r in requests if r.get("scheme") == "https"]
    return sum(1 for r in https if r.get("http_version") == "2"), len(https)


def _share(pair: tuple[int, int]) -> str:
    return f"{pair[0] / pair[1]:.0%} ({pair[0]:,}/{pair[1]:,})" if pair[1] else "-"


def figures(real: RealWeb, name: str, requests: list[dict], t0: float, t1: float, pages: int, cpu_s: float,
            faults: int, server_cpu_s: float = float("nan"), dns_cpu_s: float = float("nan"),
            pages_polite: int | None = None) -> dict:
    seconds = t1 - t0
    return {"name": name, "pages_polite": pages_polite, "server_cpu_s": server_cpu_s, "dns_cpu_s": dns_cpu_s, "cpu_s": cpu_s, "pages": pages, "seconds": seconds, "pages_per_s": pages / seconds if seconds else 0.0,
            "cpu_ms_per_page": 1000 * cpu_s / pages if pages else float("nan"),
            "in_flight": in_flight(requests, t0, t1), "requests": len(requests), "h2": http2_share(requests),
            "dns": dns_figures(real, t0, t1), "bad_tls": real.completed_to_bad_tls(requests), "faults": faults}


def print_side_by_side(title: str, results: list[dict], loads: list[str]) -> None:
    rows = [
        ("good pages", lambda r: f"{r['pages']:,}"),
        ("good pages from requests without a fault", lambda r: "-" if r["pages_polite"] is None else f"{r['pages_polite']:,}"),
        ("seconds (wall)", lambda r: f"{r['seconds']:.1f}"),
        ("pages/s", lambda r: f"{r['pages_per_s']:.1f}"),
        ("CPU-ms/page (the crawler's processes)", lambda r: f"{r['cpu_ms_per_page']:.2f}"),
        ("crawler CPU-s (all its processes)", lambda r: f"{r['cpu_s']:.1f}"),
        ("hosts in flight (mean)", lambda r: f"{r['in_flight']:.1f}"),
        ("requests seen by the server", lambda r: f"{r['requests']:,}"),
        ("HTTPS requests over HTTP/2 (server log)", lambda r: _share(r["h2"])),
        ("DNS: names asked", lambda r: f"{r['dns']['names']:,}"),
        ("DNS: A queries per name, mean", lambda r: f"{r['dns']['a_per_name_mean']:.2f}"),
        ("DNS: A queries per name, max", lambda r: str(r["dns"]["a_per_name_max"])),
        ("DNS: A queries, NXDOMAIN name", lambda r: str(r["dns"]["failing"].get("nxdomain", 0))),
        ("DNS: A queries, SERVFAIL name", lambda r: str(r["dns"]["failing"].get("servfail", 0))),
        ("DNS: A queries, silent name", lambda r: str(r["dns"]["failing"].get("timeout", 0))),
        ("requests completed to bad-cert hosts", lambda r: str(r["bad_tls"])),
        ("politeness faults (end->start < 1 s)", lambda r: str(r["faults"])),
        ("test web server CPU-s (shares the cores)", lambda r: f"{r['server_cpu_s']:.1f}"),
        ("test DNS server CPU-s (shares the cores)", lambda r: f"{r['dns_cpu_s']:.1f}"),
    ]
    if all(r["pages_polite"] is None for r in results):  # bench_fetch: no link following to judge
        rows = [row for row in rows if not row[0].startswith("good pages from")]
    print(f"\n{title}")
    for load in loads:
        print(f"  {load}")
    benchlib.print_side_by_side(rows, [r["name"] for r in results], results)


# --- bench_fetch --real-web -------------------------------------------------------------------
def run_fetch(args) -> int:
    """bench_fetch.py --real-web: one fetch list over the web, ours then Scrapy (module doc)."""
    import shutil
    import tempfile

    from bench_fetch import (MachineLoad, apply_override, politeness, prepare_store, run_measured,  # noqa: F401
                             segment_counters, write_toml)

    work = Path(tempfile.mkdtemp(prefix="bench-fetch-realweb-"))
    loads = [f"start: {uptime()}"]
    results = []
    budget = args.seconds + args.scrapy_seconds + 900
    started = time.monotonic()
    try:
        with open_real_web(args, args.hosts, work, budget, pages=args.pages_per_host, page_bytes=30_000,
                           special=False) as real:
            seeds = sorted(real.web.expected_reachable()) + real.failing_urls(5)
            seeds_file = work / "seeds.txt"
            seeds_file.write_text("\n".join(seeds) + "\n")
            print(f"real web: {args.hosts} hosts ({args.https:.0%} HTTPS, {args.h2:.0%} of those HTTP/2, RTT {args.rtt_ms} ms, DNS {args.dns_ms} ms), "
                  f"{len(seeds):,} URLs, DNS server {real.dns.address}, up in {time.monotonic() - started:.0f}s; "
                  f"work {work}", flush=True)
            if args.only != "scrapy":
                results.append(_fetch_ours(real, seeds_file, len(seeds), args, work))
            if args.only != "ours":
                results.append(_fetch_scrapy(real, seeds, args, work))
        loads.append(f"end:   {uptime()}")
        print_side_by_side(f"bench_fetch --real-web: {args.hosts} named hosts, fetch list of {len(seeds):,} URLs, "
                           "default configuration, both crawlers in the namespace", results, loads)
        for r in results:
            if r["name"].startswith("ours"):
                print("targets (issue 28): " + "; ".join(
                    f"{label}: {'PASS' if ok else 'FAIL'}" for label, ok in (
                        ("pages/s >= 1000", r["pages_per_s"] >= 1000), ("CPU-ms/page <= 2", r["cpu_ms_per_page"] <= 2),
                        ("0 requests to bad-cert hosts", r["bad_tls"] == 0),
                        ("<= 1 A query per resolving name", r["dns"]["a_per_name_max"] <= 1))))
                print("ours' counters: " + ", ".join(f"{k} {v}" for k, v in sorted(r["counters"].items())
                                                      if k.startswith(("dns/", "fetch/outcome/", "tls/"))))
    finally:
        if getattr(args, "keep", False):
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _fetch_ours(real: RealWeb, seeds_file: Path, urls: int, args, work: Path) -> dict:
    from bench_fetch import apply_override, politeness, prepare_store, run_measured, segment_counters, write_toml

    config = real.crawl_config()
    config.generate.segment_s = args.seconds  # the default (120 s) unless --seconds says otherwise
    # The fetch list under test is listed whole (45,043 URLs, 15 a host: within the default
    # top-N and per-host cap); a larger --hosts raises the top-N to the list's size.
    config.generate.top_n = max(config.generate.top_n, urls)
    for item in args.set:
        config = apply_override(config, item)
    store, segment, prep_s = prepare_store(work / "ours", config, seeds_file)
    config_path = work / "ours.toml"
    write_toml(config, config_path)
    print(f"[ours] inject + generate {prep_s:.1f}s; crawl fetch {segment} in the namespace ...", flush=True)
    skip = len(real.web.requests())
    server0, dns0 = servers_cpu_s(real)
    t0 = time.time()
    m = run_measured(real.prefix + [sys.executable, "-m", "cycles", "--data", str(store.root), "--config",
                                    str(config_path), "fetch", segment],
                     timeout_s=args.seconds + 300, log_path=work / "ours.log")
    t1 = time.time()
    if m["rc"] != 0:
        print((work / "ours.log").read_text()[-3000:], file=sys.stderr)
        raise SystemExit(f"[ours] crawl fetch exited with {m['rc']}")
    counters, marker = segment_counters(store, segment)
    time.sleep(0.3)
    requests = real.web.requests()[skip:]
    pol = politeness(requests)
    server1, dns1 = servers_cpu_s(real)
    result = figures(real, "ours (crawl fetch)", requests, t0, t1, counters.get("fetch/outcome/ok", 0), m["cpu_s"],
                     len(pol["overlaps"]) + len(pol["gaps"]), server1 - server0, dns1 - dns0)
    result["counters"] = counters
    return result


def _fetch_scrapy(real: RealWeb, seeds: list[str], args, work: Path) -> dict:
    from bench_fetch import politeness, run_measured

    cmd, out = benchlib.scrapy_peer_command(work, benchlib.by_host_round_robin(seeds), args.scrapy_seconds,
                                            "--concurrency", str(args.scrapy_concurrency))
    print(f"[scrapy] {args.scrapy_seconds:g}s in the namespace ...", flush=True)
    skip = len(real.web.requests())
    server0, dns0 = servers_cpu_s(real)
    t0 = time.time()
    m = run_measured(real.prefix + cmd, timeout_s=args.scrapy_seconds + 300, log_path=work / "scrapy.out")
    t1 = time.time()
    if m["rc"] != 0 or not out.exists():
        print((work / "scrapy.out").read_text()[-3000:], file=sys.stderr)
        raise SystemExit(f"[scrapy] exited with {m['rc']}")
    summary = json.loads(out.read_text())
    time.sleep(0.3)
    requests = real.web.requests()[skip:]
    pol = politeness(requests)
    server1, dns1 = servers_cpu_s(real)
    return figures(real, f"scrapy {summary['scrapy_version']}", requests, t0, t1, summary["pages"], m["cpu_s"],
                   len(pol["overlaps"]) + len(pol["gaps"]), server1 - server0, dns1 - dns0)


# --- bench_crawl --real-web -------------------------------------------------------------------
def run_crawl(args) -> int:
    """bench_crawl.py --real-web: ``crawl run`` and Scrapy following links on the web, same seconds."""
    import shutil
    import tempfile

    from bench_crawl import host_rules, judge, seed_urls

    work = Path(tempfile.mkdtemp(prefix="bench-crawl-realweb-"))
    loads = [f"start: {uptime()}"]
    results = []
    try:
        with open_real_web(args, args.hosts, work, 4 * args.seconds + 900, pages=args.pages,
                           page_bytes=args.page_bytes, special=True, tail=True) as real:
            web = real.web
            seeds = seed_urls(web, args.seeds, args.hosts) + [u for u in web.seeds() if "//tls-" in u]
            seeds += real.failing_urls(1)
            good = web.expected_reachable()
            rules = host_rules(web)
            print(f"[real web] {len(web.resolve_map())} hosts, {len(good):,} reachable pages, DNS {real.dns.address}; "
                  f"at most {polite_ceiling(web, good, rules, args.seconds):,} of them in {args.seconds:g} s "
                  "by a crawler without faults, "
                  f"{polite_ceiling(web, good, rules, args.seconds, set(real.bad_tls_hosts())):,} if it verifies "
                  "certificates", flush=True)
            for name in ("ours", "scrapy"):
                if args.only and name != args.only:
                    continue
                (work / name).mkdir()
                run = _crawl_ours if name == "ours" else _crawl_scrapy
                server0, dns0 = servers_cpu_s(real)
                t0, label, cpu_s = run(real, seeds, args, work / name)
                server1, dns1 = servers_cpu_s(real)
                time.sleep(0.5)
                requests = [r for r in web.requests() if t0 <= r["t_start"] < t0 + args.seconds]
                judged = judge(web, requests, t0, args.seconds, rules, good, 0)
                if args.keep:  # the timeline of hosts in flight, for scripts/bench/bench_realweb.py's readers
                    (work / name / "requests.jsonl").write_text(
                        "".join(json.dumps(r) + "\n" for r in requests) + json.dumps({"t0": t0}) + "\n")
                faults = sum(judged["faults"].values())
                result = figures(real, label, requests, t0, t0 + args.seconds, judged["good_pages"], cpu_s, faults,
                                 server1 - server0, dns1 - dns0, judged["good_pages_polite"])
                print(f"[{name}] {judged['good_pages']} good pages; faults {judged['faults']}", flush=True)
                results.append(result)
        loads.append(f"end:   {uptime()}")
        print_side_by_side(f"bench_crawl --real-web: link following for {args.seconds:g} s each, {args.hosts} named "
                           "hosts (long tail) + special and bad-TLS hosts, defaults, both in the namespace",
                           results, loads)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def polite_ceiling(web, good: set[str], rules: dict, seconds: float, leave_out: set[str] = frozenset()) -> int:
    """Good pages no crawler without politeness faults can exceed in ``seconds``: n requests
    to a host take at least n round trips (the server answers after its ``rtt_s``) and n - 1
    delays (end -> start, bench_crawl.DELAY_S or its Crawl-delay), one of them its robots.txt;
    every host counted from the first second, handshakes free (an upper bound). On this web
    the biggest host, h0 (402 pages, 484 ms), allows about 200: the reachable-page count is no
    target for a polite crawler, Scrapy's count (start -> start spacing) is above it.
    ``leave_out``: hosts counted as 0 (the bad-certificate hosts, for a verifying crawler)."""
    from bench_crawl import DELAY_S

    model = web._model()
    pages = collections.Counter(u.split("/")[2].split(":")[0] for u in good)
    total = 0
    for host, count in pages.items():
        if host in leave_out:
            continue
        profile = model.profiles.get(host)
        rtt = getattr(profile, "rtt_s", 0.0) or 0.0
        delay = max(DELAY_S, (rules.get(host) or {}).get("crawl_delay") or 0.0)
        total += min(count, int((seconds + delay) / (rtt + delay)) - 1)
    return total


def _crawl_ours(real: RealWeb, seeds: list[str], args, work: Path) -> tuple[float, str, float]:
    from bench_fetch import apply_override, run_measured, write_toml
    from cycles.commands.inject import inject
    from cycles.storage.store import Store

    config = real.crawl_config()
    for item in args.set or []:
        config = apply_override(config, item)
    store = Store(work / "data")
    seeds_file = work / "seeds.txt"
    seeds_file.write_text("\n".join(seeds) + "\n")
    inject(store, config, str(seeds_file))
    toml = work / "crawl.toml"
    write_toml(config, toml)
    print(f"[ours] crawl run --seconds {args.seconds:g} in the namespace ...", flush=True)
    t0 = time.time()
    m = run_measured(real.prefix + [sys.executable, "-m", "cycles", "--data", str(store.root), "--config", str(toml),
                                    "run", "--seconds", str(args.seconds)],
                     timeout_s=args.seconds + 120, log_path=work / "ours.log")
    if m["rc"] not in (0, 4):
        print((work / "ours.log").read_text()[-3000:], file=sys.stderr)
    return t0, "ours (crawl run)", m["cpu_s"]


def _crawl_scrapy(real: RealWeb, seeds: list[str], args, work: Path) -> tuple[float, str, float]:
    from bench_fetch import run_measured

    cmd, out = benchlib.scrapy_peer_command(work, seeds, args.seconds)
    print(f"[scrapy] {args.seconds:g}s in the namespace ...", flush=True)
    t0 = time.time()
    m = run_measured(real.prefix + cmd, timeout_s=args.seconds + 120, log_path=work / "scrapy.out")
    summary = json.loads(out.read_text()) if out.exists() else {}
    return t0, f"scrapy {summary.get('scrapy_version', '?')}", m["cpu_s"]
