#!/usr/bin/env python3
"""Benchmarks that crawl the local test web (on loopback), ours next to Scrapy where there is a peer.

    .venv/bin/python scripts/bench/web.py fetch                 # fetch stage vs Scrapy, 2,000 hosts
    .venv/bin/python scripts/bench/web.py fetch --real-web      # named hosts, HTTPS, DNS: in the namespace (root)
    .venv/bin/python scripts/bench/web.py crawl --seconds 300   # `crawl run` vs Scrapy, link following
    .venv/bin/python scripts/bench/web.py parse --pages 300

Scrapy and datasketch are in the bench extra: .venv/bin/pip install -e '.[bench]'.
Figures and what each prints: docs/benchmarks.md.
"""

from __future__ import annotations

import sys

from benchlib import dispatch

COMMANDS = {
    "fetch": ("bench_fetch", "the fetch stage vs Scrapy on one fetch list: pages/s, CPU-ms/page, RSS, politeness"),
    "crawl": ("bench_crawl", "`crawl run` vs Scrapy following links on a hostile long-tail web, same wall time"),
    "parse": ("bench_parse", "the parser and fingerprints step by step, µs per page (no network)"),
    "update": ("bench_update", "what update decides: drops, near-duplicates, traps, Bloom filter, freshness"),
    "freshness": ("bench_freshness", "freshness of the adaptive and optimal schedules vs uniform and the optimum"),
}

if __name__ == "__main__":
    sys.exit(dispatch("web.py", __doc__, COMMANDS))
