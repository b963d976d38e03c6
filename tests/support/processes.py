"""Crawl subprocesses and what they committed: the resume and run tests."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq

from cycles.tables import segment as seg
from cycles.tables.crawldb import read_crawldb
from cycles.storage.store import Store


def toml_config(web, path) -> None:
    resolve = ", ".join(f'"{name}" = "{ip}"' for name, ip in web.resolve_map().items())
    path.write_text(f"""[fetch]
processes = 2
flush_s = 1.0
timeout_s = 5.0
connect_timeout_s = 2.0
progress_s = 0.5
allowed_networks = ["127.0.0.0/8"]
resolve = {{ {resolve} }}
""")


def crawl(data, config, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cycles", "--data", str(data), "--config", str(config), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=os.getcwd())


def committed(store: Store, segment: str) -> list[dict]:
    folder = store.segment_dir(segment) / "fetched"
    return [r for f in sorted(folder.glob("part-*.parquet")) for r in pq.read_table(f).to_pylist()]


def fetchlist_hosts(store: Store, segment: str) -> set[str]:
    return {r["host"] for f in seg.files(store, segment, seg.FETCHLIST) for r in store.read_table(f).to_pylist()}


def crawldb_urls(store: Store) -> list[str]:
    """Every row's URL, duplicates kept."""
    return read_crawldb(store, ["url"]).column("url").to_pylist()  # bases and deltas merged


def wait_for(process: subprocess.Popen, done, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)


def start_watched(cmd: list[str], cwd: Path, env: dict, log: Path, max_s: float) -> subprocess.Popen:
    """A server or worker process logging to ``log``, killed after ``max_s`` whatever happens:
    none outlives a hung test run."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    watchdog = threading.Timer(max_s, proc.kill)
    watchdog.daemon = True
    watchdog.start()
    return proc


def stop_all(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to every process, then SIGKILL to any still there after 10 s."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
