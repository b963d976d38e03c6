#!/usr/bin/env python3
"""Benchmarks of generate, update and the tables on synthetic crawl DBs (no network).

    .venv/bin/python scripts/bench/scale.py scale --sizes 1M,10M       # generate + update: s, CPU, RSS per size
    .venv/bin/python scripts/bench/scale.py cost --sizes 1M --json cost.json   # per task type, the serial part
    .venv/bin/python scripts/bench/scale.py parts --store /tmp/bench-scale/10M  # where the time goes

Figures and what each prints: docs/benchmarks.md.
"""

from __future__ import annotations

import sys

from benchlib import dispatch

COMMANDS = {
    "scale": ("bench_scale", "generate and update on 1 M-100 M URL crawl DBs: seconds, CPU, peak RSS, s per M URLs"),
    "parts": ("bench_scale_parts", "where generate's and update's time goes, part by part, on a kept scale store"),
    "cost": ("bench_cost", "per task type CPU, bytes and store operations; the coordinator's serial share"),
    "topn": ("bench_topn", "generate's final top-N: one sort vs k-way merge vs histograms, CPU and RSS"),
    "assign": ("bench_assign", "generate's host -> partition plan: coordinator CPU and balance vs LPT"),
    "outlinks": ("bench_outlinks", "update's outlink preparation (normalise, filter, dedupe) on 1 M links"),
    "plan": ("bench_plan", "the optimal schedule's plan: one aggregate vs per-bucket rate histograms"),
    "sitemaps": ("bench_sitemaps", "sitemap reading: URLs/s, memory held, the caps (a gzip bomb, 10 M entries)"),
    "integrity": ("bench_integrity", "cost of the crawl DB's integrity checks (checksums, invariants, verify)"),
    "genprofile": ("bench_genprofile", "where generate's CPU goes, part by part, in one process on a kept store"),
}

if __name__ == "__main__":
    sys.exit(dispatch("scale.py", __doc__, COMMANDS))
