"""Bucket tasks: generate and update give the same crawl DB in-process and in a pool.

The pool is a real spawn pool of two processes, each task given only locations, ids and
the config; the comparison is on the Parquet written.
"""

from __future__ import annotations

import datetime as dt
import os
import signal

import duckdb
import pyarrow as pa
import pytest

from cycles.tables.segment import write_stage_marker
from cycles.tables import schema
from cycles.config import Config
from cycles.tables.crawldb import read_crawldb
from cycles.executor import InProcess, LocalPool, share_of_memory
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.storage.store import Store, utcnow
from cycles.update.update import update_segment



def crawl_once(root, executor, now) -> tuple[list[dict], list[dict]]:
    """Inject, generate, write results and outlinks, update at ``now``; return (fetch list, crawl DB)."""
    store, config = Store(root), Config()
    config.db.buckets = 4
    config.generate.max_urls_per_host = 3
    seeds = root.parent / f"seeds-{root.name}.txt"
    seeds.write_text("".join(f"http://h{h}.example/p{p}\n" for h in range(12) for p in range(5)))
    inject(store, config, seeds)
    segment = generate(store, config, now=now, top_n=20, executor=executor).segment
    listed = store.read_tables(store.list(store.segment_dir(segment) / "fetchlist", "part-*.parquet"),
                               schema.FETCHLIST).to_pylist()
    results, links = [], []
    for i, row in enumerate(sorted(listed, key=lambda r: r["url"])):
        result = {name: None for name in schema.FETCHED.names}
        result.update(url=row["url"], host=row["host"], fetched_at=now, outcome="ok" if i % 4 else "gone",
                      http_status=200 if i % 4 else 404, content_hash=f"{i % 7:032x}", minhash=i + 1)
        results.append(result)
        links += [{"from_url": row["url"], "url": f"http://{row['host']}/new/{i}/{j}", "anchor": "", "nofollow": False,
                   "depth": 1} for j in range(3)]
    folder = store.segment_dir(segment)
    store.write_table(folder / "fetched" / "part-00000-c000001.parquet",
                      pa.Table.from_pylist(results, schema=schema.FETCHED), schema.FETCHED)
    store.write_table(folder / "outlinks" / "part-00000-c000001.parquet",
                      pa.Table.from_pylist(links, schema=schema.OUTLINKS), schema.OUTLINKS)
    write_stage_marker(store, segment, "fetched", {"segment": segment})
    update_segment(store, config, segment, now=now, executor=executor)
    merged = read_crawldb(store)  # bases and deltas merged
    # A seed's first_seen (and due time, until fetched) is its injection, which differs between runs.
    rows = duckdb.sql("SELECT * EXCLUDE (first_seen) REPLACE (CASE WHEN fetch_count = 0 AND depth = 0 "
                      "AND last_fetched IS NULL THEN NULL ELSE next_fetch END AS next_fetch) FROM merged ORDER BY url").to_arrow_table()
    assert not store.exists(folder / "update")  # the routed inputs are cleaned up
    return sorted(listed, key=lambda r: r["url"]), rows.to_pylist()


@pytest.mark.web  # spawns a pool of two processes
def test_bucket_tasks_in_a_process_pool_write_what_in_process_tasks_write(tmp_path):
    now = utcnow() + dt.timedelta(minutes=1)  # after both runs inject their seeds, so they are due
    listed_here, db_here = crawl_once(tmp_path / "here", InProcess(), now)
    listed_pool, db_pool = crawl_once(tmp_path / "pool", LocalPool(2), now)
    assert listed_pool == listed_here and len(listed_here) == 20
    assert db_pool == db_here
    statuses = [r["status"] for r in db_here]
    # 60 seeds plus new links (those of exact copies dropped); 15 pages stored, 7 distinct
    # texts among them, so 8 exact copies; 5 gone.
    assert len(db_here) > 60 and statuses.count("gone") == 5
    assert statuses.count("fetched") == 7 and statuses.count("duplicate") == 8


def test_a_failing_task_leaves_the_crawl_db_as_it_was(tmp_path):
    store, config = Store(tmp_path / "data"), Config()
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://a.example/\n")
    inject(store, config, seeds)
    segment = generate(store, config).segment
    write_stage_marker(store, segment, "fetched", {"segment": segment})
    before = store.manifest()

    class Failing:
        workers = 1

        def map(self, fn, tasks):
            raise RuntimeError("the cluster went away")

    with pytest.raises(RuntimeError, match="cluster"):
        update_segment(store, config, segment, executor=Failing())
    assert store.manifest() == before
    assert store.list_dirs(store.path("crawldb")) == [before.version]  # half-written version gone


@pytest.mark.parametrize("limit, workers, share", [("4GB", 2, "2048MB"), ("1GB", 1, "1024MB"),
                                                   ("512MB", 4, "128MB"), ("100MB", 8, "64MB")])
def test_memory_limit_is_shared_between_workers(limit, workers, share):
    assert share_of_memory(limit, workers) == share


def _pid_and_parent(_task) -> tuple[int, int | None]:
    from cycles.executor import parent_pid

    return os.getpid(), parent_pid()


def _die(_task) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.web  # starts pool processes (spawned interpreters, ~1 s each)
def test_the_process_pool_runs_tasks_in_other_processes_that_know_their_parent():
    from cycles.executor import ProcessPool

    with ProcessPool(2, "a test", die_with_parent=True) as pool:
        results = pool.map(_pid_and_parent, range(4))
    assert all(pid != os.getpid() and parent == os.getpid() for pid, parent in results)


@pytest.mark.web  # starts pool processes (spawned interpreters, ~1 s each)
def test_a_dead_pool_worker_is_the_pools_one_line_stage_error():
    from cycles.errors import StageError
    from cycles.executor import ProcessPool

    died = StageError("a test worker died; run it again")
    with pytest.raises(StageError) as raised:
        with ProcessPool(2, "a test", death_error=died) as pool:
            pool.map(_die, range(2))
    assert raised.value is died and raised.value.__cause__ is None


_STOPPED = False


def _note_stop(signum, frame) -> None:
    global _STOPPED
    _STOPPED = True


def _install_stop_handler() -> None:
    signal.signal(signal.SIGTERM, _note_stop)


def _wait_for_stop(_task) -> str:
    import time

    deadline = time.monotonic() + 30
    while not _STOPPED and time.monotonic() < deadline:
        time.sleep(0.02)
    return "stopped" if _STOPPED else "never stopped"


@pytest.mark.web  # starts pool processes (spawned interpreters, ~1 s each)
def test_a_stop_sent_while_workers_start_reaches_them_and_kills_none():
    """SIGTERM sent to the pool right after its tasks were submitted: the workers are still
    importing, and the signal's default action would kill them (`crawl run --seconds 5`
    under load ended with "a fetch worker process died"). signal_workers sends it to the
    workers that handle it and the others raise it themselves once their handler is in."""
    from cycles.errors import StageError
    from cycles.executor import ProcessPool

    with ProcessPool(2, "a test", initializer=_install_stop_handler) as pool:
        futures = [pool.submit(_wait_for_stop, k) for k in range(2)]
        pool.signal_workers(signal.SIGTERM)
        assert [f.result() for f in futures] == ["stopped", "stopped"]
    # Positive control: the same signal sent straight to the starting workers kills them.
    with pytest.raises(StageError, match="died"):
        with ProcessPool(2, "a test", initializer=_install_stop_handler) as pool:
            futures = [pool.submit(_wait_for_stop, k) for k in range(2)]
            for pid in pool.pids():
                os.kill(pid, signal.SIGTERM)
            [f.result() for f in futures]


STAGE_WITH_A_POOL = """
import os, sys, time
sys.path.insert(0, {repo!r})
from tests.support.tasks import write_pid_and_sleep
from cycles.executor import LocalPool
LocalPool(2).map(write_pid_and_sleep, [({folder!r}, k) for k in range(2)])
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.web  # starts a stage process and its pool (spawned interpreters, ~2 s)
def test_a_stage_killed_while_its_bucket_tasks_run_leaves_no_pool_worker_behind(tmp_path):
    """The stages' pool (LocalPool: generate's and update's bucket tasks) dies with the stage:
    a `crawl update` killed by cron's timeout or the OOM killer left its two workers running
    as orphans (seen: two 480 MB workers of a killed benchmark still alive 18 min later)."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    repo = str(Path(__file__).resolve().parent.parent)
    stage = subprocess.Popen([sys.executable, "-c", STAGE_WITH_A_POOL.format(repo=repo, folder=str(tmp_path))])
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < deadline and stage.poll() is None:
            time.sleep(0.05)
        workers = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
        assert len(workers) == 2, stage.poll()
    finally:
        stage.kill()
        stage.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in workers if _alive(pid)]
    for pid in left:  # never leave them to the rest of the suite
        os.kill(pid, signal.SIGKILL)
    assert left == []
