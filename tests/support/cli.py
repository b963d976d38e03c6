"""The CLI seen from outside: its JSON line, a config file for a test web."""

from __future__ import annotations

import json
from pathlib import Path

from testweb.harness import TestWeb


def json_line(output: str) -> dict:
    """The one JSON line a --json command prints on stdout (nothing else is there)."""
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return json.loads(lines[0])


def toml_value(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)  # strings, ints and floats are written alike in TOML and JSON


def write_web_config(path: Path, web: TestWeb) -> Path:
    """A config TOML pointed at the test web: its names resolve to loopback, which is allowed."""
    config = web.crawl_config()
    sections = {
        "fetch": {"resolve": config.fetch.resolve, "allowed_networks": config.fetch.allowed_networks,
                  "timeout_s": config.fetch.timeout_s, "low_speed_time_s": config.fetch.low_speed_time_s,
                  "connect_timeout_s": 2.0, "delay_s": 0.2, "processes": 1, "progress_s": 0.0,
                  # these tests count what one cycle fetches: the seeds, no discovery inside the fetch
                  "follow_outlinks_depth": 0},
        "generate": {"max_urls_per_host": config.generate.max_urls_per_host},
        "db": {"buckets": config.db.buckets, "duckdb_memory_limit": "1GB"},
    }
    path.write_text("".join(f"[{name}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in values.items()) + "\n"
                            for name, values in sections.items()))
    return path
