"""The README's demo: crawl the local demo web for a few cycles into ./data, then show status.

There is no internet here, so the demo starts the test web (many hosts, each on its own
127.x.y.z address) and points the crawler at it through a resolve override. Everything
else is what an operator would run against the real web:

    crawl --config data/demo.toml inject data/demo-seeds.txt
    crawl --config data/demo.toml cycle --cycles 4
    crawl status

After the cycles it prints what each one asked the web for, from the segments' own stats
(``segments/<id>/stats/``): a cycle can generate URLs and make no request, when every one
of them is refused by a robots.txt the crawler already holds (the demo web's
``/cgi-bin/search`` links, found in the cycle before: the link is kept as an outlink, the
URL enters the crawl DB, and the next cycle records it ``robots_denied`` from the cached
rules, RFC 9309 §2.4, without asking the host).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the test web is tooling beside the product, not installed with it

from cycles.tables import segment as seg  # noqa: E402
from cycles.storage.store import Store  # noqa: E402
from testweb.harness import TestWeb, TestWebError  # noqa: E402


NOTHING_TO_DO = 3
"""crawl's exit code when nothing was due (docs/operations.md, "Exit codes"): a second demo run after the
first crawled the whole demo web, which is not an error."""


def crawl(*args: str, prefix: tuple[str, ...] = ()) -> None:
    command = [*prefix, sys.executable, "-m", "cycles", *args]
    print("$ crawl " + " ".join(args), flush=True)
    code = subprocess.run(command, cwd=ROOT).returncode
    if code not in (0, NOTHING_TO_DO):
        raise SystemExit(f"demo: `crawl {' '.join(args)}` failed with exit code {code}")


DEMO_PORT = 18471
"""The demo web listens on a fixed port when it can, so a second run of the demo continues
the same crawl (URLs include the port) instead of finding a new web."""


@contextlib.contextmanager
def start_web(args):
    """The demo web on DEMO_PORT, or on any free port if that one is taken; stopped on exit."""
    try:
        web = TestWeb(hosts=args.hosts, pages=args.pages, page_bytes=8000, special=True,
                      port=DEMO_PORT, max_seconds=900).start()
    except TestWebError:
        web = TestWeb(hosts=args.hosts, pages=args.pages, page_bytes=8000, special=True,
                      port=0, max_seconds=900).start()
    try:
        yield web
    finally:
        web.stop()


REASONS = {
    "robots_denied": "disallowed by robots.txt rules held from an earlier cycle (cached, RFC 9309 §2.4)",
    "deferred": "the host set aside or not to be asked yet (Retry-After, back-off, robots.txt error)",
    "blocked": "the address refused by the SSRF guard",
}
"""Why a URL of a cycle got a row without a request, by outcome."""


def cycle_line(store: Store, number: int, segment: str) -> str:
    """One cycle: URLs generated, requests made, rows by outcome (from the segment's stats)."""
    generated = seg.read_marker(store, segment, seg.Generated)
    path = seg.stats_file(store.segment_dir(segment), "fetch")
    counters = store.read_json(path) if store.exists(path) else {}
    outcomes = {k.rsplit("/", 1)[1]: v for k, v in sorted(counters.items()) if k.startswith("fetch/outcome/") and v}
    line = (f"  cycle {number} ({segment}): {generated.urls if generated else '?'} URLs generated, "
            f"{counters.get('fetch/requests', 0)} requests; rows: "
            + (", ".join(f"{n} {o}" for o, n in outcomes.items()) or "none"))
    if not counters.get("fetch/requests") and outcomes:
        why = "; ".join(f"{n} {o}: {REASONS.get(o, o)}" for o, n in outcomes.items())
        line += f"\n    no request needed, each URL was answered without one: {why}"
    return line


def explain_cycles(data: Path, before: set[str]) -> None:
    """What each cycle of this demo run asked for (a cycle with 0 requests says why)."""
    store = Store(data)
    new = [s for s in seg.segment_ids(store) if s not in before]
    if new:
        print("what each cycle asked the web for (segments/<id>/stats/fetch.json):")
        for number, segment in enumerate(new, 1):
            print(cycle_line(store, number, segment))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=40)
    parser.add_argument("--pages", type=int, default=12)
    parser.add_argument("--cycles", type=int, default=4)
    parser.add_argument("--data", default="data")
    parser.add_argument("--fresh", action="store_true", help="delete the data folder first")
    parser.add_argument("--real-web", action="store_true",
                        help="the named-host HTTPS web behind its own DNS server; the crawler runs in its mount "
                        "namespace with the system resolver and CA store, no resolve override (needs root; "
                        "docs/real-web-testing.md)")
    args = parser.parse_args()
    if args.real_web:
        real_web_demo(args)
        return
    data = ROOT / args.data
    if args.fresh:
        for child in ("crawldb", "hostdb", "segments", "pages"):
            shutil.rmtree(data / child, ignore_errors=True)
    data.mkdir(exist_ok=True)
    with start_web(args) as web:
        config = data / "demo.toml"
        resolve = "\n".join(f'"{host}" = "{ip}"' for host, ip in sorted(web.resolve_map().items()))
        config.write_text(
            "# Written by scripts/demo.py: the demo web lives on loopback addresses.\n"
            "# Everything else is the default configuration a user gets (docs/segments.md).\n"
            "[fetch]\nuser_agent = \"crawlbot/0.1 (demo; +https://example.invalid/crawlbot)\"\n"
            "# Loopback is refused by default (SSRF guard); the demo web lives there.\n"
            "allowed_networks = [\"127.0.0.0/8\"]\n\n"
            f"[fetch.resolve]\n{resolve}\n")
        seeds = data / "demo-seeds.txt"
        seeds.write_text("\n".join(web.seeds()[:10]) + "\n")
        print(f"demo web: {len(web.resolve_map())} hosts on 127.x.y.z port {web.port}")
        base = ["--data", str(data), "--config", str(config)]
        crawl(*base, "inject", str(seeds))
        before = set(seg.segment_ids(Store(data)))
        crawl(*base, "cycle", "--cycles", str(args.cycles))
        print(f"the demo web answered {len(web.requests())} requests")
        explain_cycles(data, before)
    crawl("--data", str(data), "status")


def real_web_demo(args) -> None:
    """The demo on the named-host HTTPS web (testweb/realweb.py): 90 % HTTPS, bad-TLS hosts,
    20-300 ms round trips, DNS with latency and failing names. The config names no host:
    the crawler resolves through the namespace's resolv.conf and verifies against its CA
    bundle, as it would on the internet."""
    from testweb.realweb import RealWeb

    data = ROOT / args.data
    if args.fresh:
        for child in ("crawldb", "hostdb", "segments", "pages"):
            shutil.rmtree(data / child, ignore_errors=True)
    data.mkdir(exist_ok=True)
    with RealWeb(args.hosts, pages=args.pages, page_bytes=8000, special=True, max_seconds=900) as real:
        config = data / "demo-real.toml"
        config.write_text(
            "# Written by scripts/demo.py --real-web: the demo web lives on loopback addresses, found through DNS.\n"
            "[fetch]\nuser_agent = \"crawlbot/0.1 (demo; +https://example.invalid/crawlbot)\"\n"
            "# Loopback is refused by default (SSRF guard); the demo web lives there.\n"
            "allowed_networks = [\"127.0.0.0/8\"]\n")
        seeds = data / "demo-seeds.txt"
        seeds.write_text("\n".join(real.web.seeds()[:10] + real.failing_urls(1)) + "\n")
        print(f"demo web: {len(real.web.resolve_map())} named hosts, DNS server {real.dns.address}")
        base = ["--data", str(data), "--config", str(config)]
        crawl(*base, "inject", str(seeds))
        before = set(seg.segment_ids(Store(data)))
        crawl(*base, "cycle", "--cycles", str(args.cycles), prefix=tuple(real.prefix))
        requests = real.web.requests()
        print(f"the demo web answered {len(requests)} requests ({sum(r.get('scheme') == 'https' for r in requests)} "
              f"over HTTPS, {real.completed_to_bad_tls(requests)} to bad-certificate hosts); its DNS server "
              f"answered {len(real.dns.queries())} queries")
        explain_cycles(data, before)
    crawl("--data", str(data), "status")


if __name__ == "__main__":
    main()
