"""Command line of the test web: ``python -m testweb serve|dns|bench``.

Serve 50 hosts of 20 pages on a free port for ten minutes::

    python -m testweb serve --hosts 50 --pages 20 --port 0 \\
        --log /tmp/web.jsonl --ready-file /tmp/web.json --max-seconds 600

Add the trap, near-duplicate and changing hosts, with a virtual clock running an hour a
second::

    python -m testweb serve --hosts 10 --traps --neardups --changing --clock-rate 3600 \\
        --log /tmp/web.jsonl --ready-file /tmp/web.json

Answer the test web's names over DNS (port 53 of a free 127.53.x.y; testweb/dns.py)::

    python -m testweb dns --zone zone.json --log dns.jsonl --ready-file dns.json

HTTPS on 90 % of the regular hosts (a third of those offering HTTP/2), the bad-TLS hosts and
round trips of 20-300 ms; the ready file names the TLS port and the test CA (``tls_port``,
``ca_file``)::

    python -m testweb serve --hosts 50 --https 0.9 --h2 0.3 --tls --rtt-ms 20-300 \\
        --log /tmp/web.jsonl --ready-file /tmp/web.json

Measure throughput with 30 KB pages::

    python -m testweb bench --page-bytes 30000 --seconds 5
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testweb",
                                     description="The deterministic local multi-host test web.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the test web on loopback addresses",
                           description="Serve the test web until SIGTERM or --max-seconds. Example: "
                           "serve --hosts 50 --pages 20 --port 0 --log web.jsonl --ready-file web.json")
    serve.add_argument("--hosts", type=int, default=20, help="regular hosts (default 20)")
    serve.add_argument("--pages", type=int, default=10, help="pages per regular host (default 10)")
    serve.add_argument("--page-bytes", type=int, default=30_000, help="HTML size of a page (default 30000)")
    serve.add_argument("--port", type=int, default=0, help="shared port; 0 picks a free one (default 0)")
    serve.add_argument("--log", required=True, help="request log, one JSON line per request")
    serve.add_argument("--ready-file", help="JSON written once every socket listens: port, resolve, seeds")
    serve.add_argument("--max-seconds", type=float, default=600.0, help="exit after this long (default 600)")
    serve.add_argument("--no-special", action="store_true", help="leave out the special hosts")
    serve.add_argument("--seed", type=int, default=0, help="seed of links and text (default 0)")
    serve.add_argument("--traps", action="store_true",
                       help="add the crawler-trap hosts (calendar, session ids, repeating paths, numbers)")
    serve.add_argument("--neardups", action="store_true",
                       help="add the near-duplicate hosts (dup-news, dup-syndicate, mirror-of-h1)")
    serve.add_argument("--changing", action="store_true",
                       help="add the host whose pages change with the virtual clock")
    serve.add_argument("--hostile", action="store_true",
                       help="add the hostile hosts (bad robots.txt, endless bodies, header floods, "
                       "links into an internal service on 127.0.0.1:--internal-port)")
    serve.add_argument("--tail", action="store_true",
                       help="regular hosts of a long tail of sizes (host i: about pages / (1+i)^0.8)")
    serve.add_argument("--internal-port", type=int, default=0,
                       help="port of the internal service the hostile hosts point at (default 0)")
    serve.add_argument("--sitemaps", action="store_true",
                       help="add the sitemap hosts (robots.txt Sitemap: lines; a gzip bomb, 10 million "
                       "entries, cross-host URLs, malformed XML, an index loop)")
    serve.add_argument("--clock-start", type=float, default=None,
                       help="virtual clock at start, Unix seconds (default 1704067200, 2024-01-01)")
    serve.add_argument("--clock-rate", type=float, default=0.0,
                       help="virtual seconds per real second (default 0: the clock stands still "
                       "until moved through the control address)")
    serve.add_argument("--https", type=float, default=0.0,
                       help="fraction of the regular hosts served over HTTPS (default 0; testweb/tls.py)")
    serve.add_argument("--h2", type=float, default=0.0,
                       help="fraction of the HTTPS regular hosts that offer HTTP/2 (ALPN h2; default 0)")
    serve.add_argument("--tls", action="store_true",
                       help="add the TLS hosts: good, expired, wrong-name, self-signed, stall, tls10")
    serve.add_argument("--rtt-ms", default="0",
                       help="per-host round trip, LO-HI ms drawn log-uniformly per host, or MS (default 0)")
    serve.add_argument("--tls-port", type=int, default=0,
                       help="port of the HTTPS hosts' TLS addresses; 0 picks a free one (default 0)")
    serve.add_argument("--tls-dir", default=None,
                       help="folder of the test CA (ca.pem, ca.key; made if absent; default tls/ beside --log)")
    serve.add_argument("--processes", type=int, default=1,
                       help="server processes, each serving a share of the hosts (default 1; testweb/server.py)")
    serve.add_argument("--loop", choices=("asyncio", "uvloop", "auto"), default="asyncio",
                       help="event loop; auto uses uvloop when it is installed (default asyncio: "
                       "uvloop measured no faster here)")

    bench = sub.add_parser("bench", help="measure pages per second",
                           description="Start a server and fetch pages over keep-alive connections "
                           "with pycurl. Example: bench --page-bytes 30000 --seconds 5")
    bench.add_argument("--page-bytes", type=int, default=30_000, help="page size (default 30000)")
    bench.add_argument("--seconds", type=float, default=5.0, help="how long to fetch (default 5)")
    bench.add_argument("--connections", type=int, default=32,
                       help="transfers in flight, one keep-alive connection each (default 32)")
    bench.add_argument("--hosts", type=int, default=64, help="hosts; connection c walks host c %% hosts (default 64)")
    bench.add_argument("--pages", type=int, default=200,
                       help="pages per host; more than fit the 64 MB render cache measure rendering too (default 200)")
    bench.add_argument("--loop", choices=("asyncio", "uvloop", "auto"), default="asyncio")
    bench.add_argument("--https", type=float, default=0.0, help="share of the hosts on HTTPS (default 0)")
    bench.add_argument("--h2", type=float, default=0.0, help="share of the HTTPS hosts offering HTTP/2 (default 0)")
    bench.add_argument("--no-reuse", action="store_true",
                       help="a new connection (and full TLS handshake) for every request")

    dns = sub.add_parser("dns", help="answer the test web's names over DNS (testweb/dns.py)",
                         description="DNS server on UDP and TCP port 53 of 127.53.x.y (needs root). Example: "
                         "dns --zone zone.json --log dns.jsonl --ready-file dns.json")
    dns.add_argument("--zone", required=True, help="zone JSON (testweb.dns.zone_for)")
    dns.add_argument("--log", required=True, help="query log, one JSON line per query")
    dns.add_argument("--ready-file", help="JSON written once both sockets listen: address, port, pid")
    dns.add_argument("--address", help="listen address (default: a free 127.53.x.y)")
    dns.add_argument("--max-seconds", type=float, default=600.0, help="exit after this long (default 600)")

    real = sub.add_parser("realweb", help="the named-host HTTPS web and a command run inside its namespace",
                          description="Start the test web (HTTPS, bad-TLS hosts, round trips), its DNS server and "
                          "a mount namespace whose resolv.conf and CA bundle are the test web's, then run COMMAND "
                          "there (needs root). Example: realweb --hosts 300 --seeds-file seeds.txt -- "
                          "crawl --set 'fetch.allowed_networks=[\"127.0.0.0/8\"]' run --seconds 60")
    real.add_argument("--hosts", type=int, default=300, help="regular hosts (default 300)")
    real.add_argument("--pages", type=int, default=50, help="pages of the biggest host (long tail; default 50)")
    real.add_argument("--https", type=float, default=0.9, help="share of HTTPS hosts (default 0.9)")
    real.add_argument("--h2", type=float, default=None,
                      help="share of the good HTTPS hosts offering HTTP/2 (default: RealWeb's, 0.5)")
    real.add_argument("--rtt-ms", default="20-300", help="round trip range per host, ms (default 20-300)")
    real.add_argument("--dns-ms", default="10-200", help="DNS answer delay range per name, ms (default 10-200)")
    real.add_argument("--seeds-file", help="write every host's home page (and the failing names') here")
    real.add_argument("--max-seconds", type=float, default=3600.0, help="stop the web after this long (default 3600)")
    real.add_argument("--workdir", help="keep the logs here (requests, DNS queries, TLS handshakes)")
    real.add_argument("run", nargs=argparse.REMAINDER, metavar="COMMAND", help="command run in the namespace (default: a shell)")

    args = parser.parse_args(argv)
    if args.command == "realweb":
        return _realweb(args)
    if args.command == "dns":
        from testweb.dns import serve_dns

        try:
            reason = serve_dns(args.zone, args.log, args.ready_file, args.address, max_seconds=args.max_seconds)
        except (OSError, ValueError) as exc:
            print(f"testweb dns: {exc}", file=sys.stderr)
            return 2
        print(f"testweb dns: stopped: {reason}", file=sys.stderr)
        return 0
    if args.command == "serve":
        from testweb.server import serve as run
        from testweb.tls import parse_rtt

        try:
            reason = run(hosts=args.hosts, pages=args.pages, page_bytes=args.page_bytes,
                         special=not args.no_special, seed=args.seed, port=args.port,
                         log_path=args.log, ready_file=args.ready_file,
                         max_seconds=args.max_seconds, loop=args.loop, traps=args.traps,
                         neardups=args.neardups, changing=args.changing,
                         clock_start=args.clock_start, clock_rate=args.clock_rate,
                         hostile=args.hostile, internal_port=args.internal_port, sitemaps=args.sitemaps,
                         tail=args.tail, https=args.https, tls=args.tls,
                         rtt_ms=parse_rtt(args.rtt_ms), tls_port=args.tls_port, tls_dir=args.tls_dir,
                         h2=args.h2, processes=args.processes)
        except (OSError, ValueError, RuntimeError) as exc:
            print(f"testweb: {exc}", file=sys.stderr)
            return 2
        print(f"testweb: stopped: {reason}", file=sys.stderr)
        return 0
    from testweb.harness import bench as run_bench

    result = run_bench(page_bytes=args.page_bytes, seconds=args.seconds,
                       connections=args.connections, hosts=args.hosts, pages=args.pages,
                       loop=args.loop, https=args.https, h2=args.h2, reuse=not args.no_reuse)
    print(json.dumps(result))
    return 0


def _realweb(args) -> int:
    import os
    import subprocess
    from pathlib import Path

    from testweb.realweb import RealWeb
    from testweb.tls import parse_rtt

    command = [c for c in args.run if c != "--"] or [os.environ.get("SHELL", "/bin/sh")]
    try:
        h2 = {} if args.h2 is None else {"h2": args.h2}
        web = RealWeb(args.hosts, https=args.https, **h2, rtt_ms=parse_rtt(args.rtt_ms), dns_latency_ms=parse_rtt(args.dns_ms),
                      workdir=args.workdir, max_seconds=args.max_seconds, pages=args.pages, special=True, tail=True)
        with web as real:
            if args.seeds_file:
                Path(args.seeds_file).write_text("\n".join(real.web.seeds() + real.failing_urls(1)) + "\n")
            print(f"testweb realweb: {len(real.web.resolve_map())} hosts, DNS {real.dns.address}, logs in "
                  f"{real.workdir}; running {' '.join(command)} in the namespace", file=sys.stderr)
            return subprocess.run(real.prefix + command).returncode
    except (OSError, RuntimeError) as exc:
        print(f"testweb realweb: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
