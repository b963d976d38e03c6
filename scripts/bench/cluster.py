#!/usr/bin/env python3
"""The cluster: what each task type of a cycle costs on S3 (a local S3 server on loopback), and the
projection to 1 B / 10 B known URLs from those figures and scale.py cost's.

    .venv/bin/python scripts/bench/scale.py cost --sizes 1M,10M --top-n-pct 10,2 --built /tmp/built --json cost.json
    .venv/bin/python scripts/bench/cluster.py cluster --json cluster.json       # S3 requests per cycle
    .venv/bin/python scripts/bench/cluster.py projection --cost cost.json --cluster cluster.json

Figures and what each prints: docs/benchmarks.md and docs/cluster.md.
"""

from __future__ import annotations

import sys

from benchlib import dispatch

COMMANDS = {
    "cluster": ("bench_cluster", "real cycles against a local S3 server: CPU per task type, S3 requests per stage"),
    "projection": ("project_cluster", "workers, time and S3 requests per cycle for 1 B / 10 B URLs, on paper"),
}

if __name__ == "__main__":
    sys.exit(dispatch("cluster.py", __doc__, COMMANDS))
