"""The stages on a real Dask cluster (cycles/cluster.py), S3 (moto, loopback) the only shared storage.

The module starts a scheduler and two workers as separate processes on loopback. Each
worker has its own working directory and temporary folder (``TMPDIR``: the store's local
staging and spill folders), none of them the coordinator's, and reaches the store with the
AWS settings of its own environment. One worker kills itself (SIGKILL, cycles/storage/faults.py)
at its first fetch chunk commit, the other at its first crawl DB bucket write of an update;
their nannies start fresh worker processes, the scheduler re-runs the lost tasks.

The crawl of a small test web on the cluster must give the crawl DB (URLs, statuses,
content hashes) of the same crawl on one machine, and never ask a host twice within its
delay, killed partition retried or not.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from cycles.cluster import cluster_executor
from cycles.tables.crawldb import read_crawldb
from cycles.commands.cycle import run_cycles
from cycles.commands.inject import inject
from cycles.storage.store import Store
from testweb.harness import TestWeb
from tests.conftest import config_for, write_seeds
from tests.support.fetching import assert_polite
from tests.support.s3 import BUCKET
from testweb.moto import free_port
from tests.support.processes import start_watched, stop_all

# find_spec, not importorskip: importing distributed costs 0.54 s in each test worker
# collecting this file, in the fast tier too, where every test of it is deselected (web).
if importlib.util.find_spec("distributed") is None:
    pytest.skip("the cluster extra: pip install 'crawl[cluster]'", allow_module_level=True)
pytestmark = pytest.mark.web

LOOPBACK = "127.0.0.1"
PROCESS_MAX_S = 300
"""No scheduler or worker outlives a hung test run by more than this."""

KILLS = {"w1": "/fetched/", "w2": "/crawldb/"}
"""Worker name -> the commit points (path part) at whose first one it kills itself: a fetch
chunk's commit record, an update's crawl DB bucket."""

CYCLES = 4


def start(cmd: list[str], cwd: Path, env: dict, log: Path) -> subprocess.Popen:
    return start_watched(cmd, cwd, env, log, PROCESS_MAX_S)


@pytest.fixture(scope="module")
def dask_cluster(s3_env, tmp_path_factory):  # noqa: F811
    """A scheduler and two workers (with nannies), each in its own folder; yields the address,
    the folders and ``ready()``, which waits until both workers have joined."""
    from distributed import Client

    tmp = tmp_path_factory.mktemp("dask")
    dask = str(Path(sys.executable).parent / "dask")
    port = free_port(LOOPBACK)
    address = f"tcp://{LOOPBACK}:{port}"
    base_env = {**os.environ, **s3_env, "PYTHONPATH": os.getcwd(), "PYTHONUNBUFFERED": "1"}
    procs = [start([dask, "scheduler", "--host", LOOPBACK, "--port", str(port), "--no-dashboard"],
                   tmp, base_env, tmp / "scheduler.log")]
    folders = {}
    try:
        for name, match in KILLS.items():
            folder = tmp / name
            (folder / "tmp").mkdir(parents=True)
            env = {**base_env, "TMPDIR": str(folder / "tmp"), "CRAWL_FAULT_LOG": str(folder / "faults.log"),
                   "CRAWL_FAULT_KILL_AT": "1", "CRAWL_FAULT_KILL_MATCH": match}
            procs.append(start([dask, "worker", address, "--nthreads", "1", "--host", LOOPBACK, "--name", name,
                                "--no-dashboard", "--local-directory", str(folder / "dask")],
                               folder, env, folder / "worker.log"))
            folders[name] = folder

        def wait_until_ready() -> None:
            with Client(address, timeout=60) as client:
                client.wait_for_workers(len(KILLS), timeout=60)

        # Not waited for here: the single-machine crawl runs while the workers start.
        yield {"address": address, "folders": folders, "tmp": tmp, "ready": wait_until_ready}
    finally:
        executor = cluster_executor(address)
        executor.close()
        cluster_executor.cache_clear()
        stop_all(procs)


def crawl_db(store: Store) -> dict[str, tuple]:
    """URL -> (status, content hash) of the current crawl DB."""
    rows = read_crawldb(store).to_pylist()  # bases and deltas merged, through the store (S3)
    return {r["url"]: (r["status"], r["content_hash"]) for r in rows}


@pytest.fixture(scope="module")
def crawls(dask_cluster, tmp_path_factory):
    """The same crawl on this machine (in-process) and on the cluster, of one test web."""
    tmp = tmp_path_factory.mktemp("crawls")
    with TestWeb(hosts=2, pages=3, page_bytes=2000, special=False, max_seconds=240) as web:
        seeds = write_seeds(tmp / "seeds.txt", web.seeds())
        config = config_for(web, processes=1)
        config.generate.partitions = 2
        config.db.buckets = 2
        local = Store(tmp / "local")
        inject(local, config, seeds)
        local_log = list(run_cycles(local, config, cycles=CYCLES))
        dask_cluster["ready"]()
        started = time.time()
        remote = Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/cluster")
        config.db.executor = dask_cluster["address"]
        inject(remote, config, seeds)
        remote_log = list(run_cycles(remote, config, cycles=CYCLES))
        requests = [r for r in web.requests() if r["t_start"] >= started]
    return {"local": local, "remote": remote, "local_log": local_log, "remote_log": remote_log,
            "requests": requests, "folders": dask_cluster["folders"]}


def test_cluster_crawl_gives_the_single_machine_crawl_db(crawls):
    local, remote = crawl_db(crawls["local"]), crawl_db(crawls["remote"])
    fetched = [url for url, (status, _) in local.items() if status == "fetched"]
    assert len(fetched) >= 8, crawls["local_log"]
    assert remote == local, crawls["remote_log"]


def test_each_worker_was_killed_at_its_first_commit_in_its_stage(crawls):
    """The kill happened (the fault log's matching line is written just before the SIGKILL): the
    process that reached the stage's first commit point wrote nothing after it, and the crawl
    still completed, so the scheduler re-ran the lost task."""
    for name, match in KILLS.items():
        log = [line.split("\t", 1) for line in (crawls["folders"][name] / "faults.log").read_text().splitlines()]
        hits = [i for i, (_, path) in enumerate(log) if match in path]
        assert hits, (name, log)
        killed_pid = log[hits[0]][0]
        assert all(pid != killed_pid for pid, _ in log[hits[0] + 1:]), (name, log)
    assert any("updated" in line for line in crawls["remote_log"])


def test_no_host_was_asked_twice_within_its_delay_across_the_kills(crawls):
    assert assert_polite(crawls["requests"]) >= 6


def test_workers_wrote_only_to_the_store_and_their_own_folders(crawls):
    """Staging files of fetch (WARC) were made in the workers' own temporary folders, and
    nothing of the cluster's segments was staged on the coordinator's disk."""
    remote: Store = crawls["remote"]
    mirror = remote.local_dir(remote.path("segments"))
    assert not mirror.exists() or not list(mirror.rglob("*.warc.gz*")), list(mirror.rglob("*"))
    for folder in crawls["folders"].values():
        assert list((folder / "tmp").glob("crawl-store-*")), f"{folder}: the worker never staged a file"


def test_a_retried_partition_never_overlaps_its_stalled_run(s3_env):  # noqa: F811
    """A run that stops renewing its lease (a stalled or cut-off worker, still alive) stops
    fetching at half the lease; a retry takes the lease over only when all of it ran out,
    and then knows it resumes an earlier run."""
    from cycles.config import DbConfig
    from cycles.errors import LockedError
    from cycles.fetch.partition_lease import VALID_SHARE, PartitionLease

    store = Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/lease")
    db = DbConfig(s3_lock_lease_s=5.0, s3_lock_renew_s=1.0)
    first = PartitionLease(store, "segment", 0, db).__enter__()
    assert first.valid() and not first.taken_over
    first.lock.abandon()  # stalled: alive (this very process), renewing no more
    stops_fetching_at = first.lock.renewed_mono + db.s3_lock_lease_s * VALID_SHARE
    second = PartitionLease(store, "segment", 0, db).__enter__()
    try:
        started = time.monotonic()
        assert second.taken_over
        assert started - stops_fetching_at >= db.s3_lock_lease_s * (1 - VALID_SHARE) - 0.5  # the margin held
        assert not first.valid()
        with pytest.raises(LockedError, match="lost its lease"):
            first.check()  # its partition's stats file is never written
    finally:
        second.__exit__(None, None, None)
