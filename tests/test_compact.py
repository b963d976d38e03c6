"""``crawl compact`` against a concurrent generate (docs/incremental.md, issue 24).

Compaction installs crawl DB versions while generate reads the crawl DB, so the two must
never interleave: each holds the ``crawldb`` lock from reading ``CURRENT`` to its last
write. To run one *during* the other without timers, the first is frozen (SIGSTOP,
cycles/storage/faults.py ``CRAWL_FAULT_SIGNAL=STOP``) exactly at one of its commit points,
lock held, and the second is started then:

- a generate during a compaction stopped at any of its commit points refuses at once
  (exit 2, naming the lock) and leaves no segment; the crawl DB reads whole meanwhile; the
  compaction, continued, finishes; and generate then lists what it lists on the crawl DB
  before compaction (the positive control: the same generate does run and list URLs);
- a compaction during a stopped generate refuses the same way, and runs once generate is done.

(Compaction killed at every commit point and resumed is tests/test_fault_injection.py.)
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from cycles.commands.inject import inject
from cycles.storage.store import Store
from cycles.tables.crawldb import read_crawldb
from tests.support.incremental import NOW, SEEDS, config_of, one_cycle

# Crawl subprocesses frozen at each commit point: the web tier (pyproject.toml's marker), ~17 s.
pytestmark = pytest.mark.web

AHEAD_S = 90 * 86400
"""The subprocesses' clock (``CRAWL_CLOCK_OFFSET_S``): past every row's next fetch, so generate lists many."""

CONFIG = """[db]
buckets = 3
compact_row_group_rows = 1024
duckdb_memory_limit = "512MB"
processes = 1

[generate]
partitions = 1
top_n = 1000

[update]
link_rank_interval_s = 0
"""


def crawl_cmd(data, config, *args) -> list[str]:
    return [sys.executable, "-m", "cycles", "--data", str(data), "--config", str(config), *args]


def env_for(log=None, stop_at=None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWL_FAULT_")}
    env["CRAWL_CLOCK_OFFSET_S"] = str(AHEAD_S)
    if log is not None:
        env.update(CRAWL_FAULT_LOG=str(log))
        if stop_at is not None:
            env.update(CRAWL_FAULT_KILL_AT=str(stop_at), CRAWL_FAULT_SIGNAL="STOP")
    return env


def run(data, config, *args, log=None) -> subprocess.CompletedProcess:
    return subprocess.run(crawl_cmd(data, config, *args), capture_output=True, text=True, timeout=300,
                          env=env_for(log), cwd=os.getcwd())


def stopped_at(data, config, point: int, log, *args) -> subprocess.Popen:
    """``crawl ARGS`` frozen at its ``point``-th commit point (waited for: no timer)."""
    log.unlink(missing_ok=True)  # the fault log counts the points of every run that shares it
    proc = subprocess.Popen(crawl_cmd(data, config, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env_for(log, point), cwd=os.getcwd())
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), (point, proc.communicate())
    return proc


def resumed(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def rows(data) -> list[dict]:
    return read_crawldb(Store(data)).sort_by([("url", "ascending")]).to_pylist()


def listed(data) -> list[str]:
    """The URLs of the store's newest segment's fetch list."""
    store = Store(data)
    segment = max(store.segments())
    return sorted(pq.read_table(store.segment_dir(segment) / "fetchlist").column("url").to_pylist())


def copy(src, dst):
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".duckdb-tmp"))
    return dst


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A crawl DB with deltas in every bucket (two updates), a config file, and the commit
    points of an uninterrupted ``crawl compact --all`` of it."""
    tmp = tmp_path_factory.mktemp("compact")
    seeds = tmp / "seeds.txt"
    seeds.write_text("\n".join(SEEDS) + "\n")
    store = Store(tmp / "deltas")
    inject(store, config_of(True), seeds)
    for round_ in range(2):
        one_cycle(store, config_of(True), NOW + dt.timedelta(days=round_ * 30), round_)
    assert any(store.manifest("crawldb").bucket_deltas)
    config = tmp / "crawl.toml"
    config.write_text(CONFIG)
    reference = copy(tmp / "deltas", tmp / "reference")
    log = tmp / "reference.log"
    done = run(reference, config, "compact", "--all", log=log)
    assert done.returncode == 0, done.stderr
    points = [line.split("\t", 1)[1].strip() for line in log.read_text().splitlines()]
    assert any("/crawldb/" in p for p in points) and not any(Store(reference).manifest("crawldb").bucket_deltas)
    generated = copy(tmp / "deltas", tmp / "generated")
    assert run(generated, config, "generate").returncode == 0
    return {"tmp": tmp, "config": config, "points": points, "rows": rows(tmp / "deltas"),
            "listed": listed(generated)}


def test_a_generate_during_a_compaction_refuses_at_every_commit_point(world):
    tmp, config = world["tmp"], world["config"]
    assert world["listed"]  # the positive control: this generate lists URLs when it runs
    for n, point in enumerate(world["points"], 1):
        data = copy(tmp / "deltas", tmp / "run")
        compaction = stopped_at(data, config, n, tmp / "run.log", "compact", "--all")
        try:
            segments = Store(data).segments()
            during = run(data, config, "generate")
            assert during.returncode == 2 and "held by another" in during.stderr, (point, during.stderr)
            assert Store(data).segments() == segments, point
            assert rows(data) == world["rows"], point  # a reader without the lock sees a whole version
        finally:
            done = resumed(compaction)
        assert done.returncode == 0, (point, done.stderr)
        assert rows(data) == world["rows"] and not any(Store(data).manifest("crawldb").bucket_deltas), point
        after = run(data, config, "generate")
        assert after.returncode == 0, (point, after.stderr)
        assert listed(data) == world["listed"], point


def test_a_compaction_during_a_generate_refuses_and_runs_after_it(world):
    tmp, config = world["tmp"], world["config"]
    data = copy(tmp / "deltas", tmp / "run-generate")
    generate = stopped_at(data, config, 1, tmp / "run-generate.log", "generate")
    try:
        during = run(data, config, "compact", "--all")
        assert during.returncode == 2 and "held by another" in during.stderr, during.stderr
        assert any(Store(data).manifest("crawldb").bucket_deltas)  # nothing compacted
    finally:
        done = resumed(generate)
    assert done.returncode == 0, done.stderr
    assert listed(data) == world["listed"]
    after = run(data, config, "compact", "--all")
    assert after.returncode == 0, after.stderr
    assert rows(data) == world["rows"] and not any(Store(data).manifest("crawldb").bucket_deltas)
