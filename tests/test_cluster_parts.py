"""The cluster's small parts without a cluster: choosing the executor, and a partition lease's
self-fencing (cycles/cluster.py, cycles/fetch/partition_lease.py). The cluster itself: tests/test_cluster.py."""

from __future__ import annotations

import signal

import pytest

from cycles.cluster import DaskExecutor, cluster_executor, executor_for
from cycles.config import Config, config_from_dict
from cycles.errors import ConfigError, LockedError
from cycles.fetch.partition_lease import VALID_SHARE, PartitionLease, fenced_stop_signal, lease_name
from cycles.storage.store import Store


def test_local_is_the_default_and_runs_nothing_elsewhere(tmp_path):
    assert Config().db.executor == "local"
    assert executor_for(Store(tmp_path), Config()) is None


def test_a_scheduler_address_gives_the_dask_executor_once_per_address():
    config = config_from_dict({"db": {"executor": "tcp://10.0.0.5:8786"}})
    store = Store.__new__(Store)
    store.local, store.uri = False, "s3://bucket/crawl"
    executor = executor_for(store, config)
    assert isinstance(executor, DaskExecutor) and executor.address == "tcp://10.0.0.5:8786"
    assert executor.workers == 1  # a bucket task keeps its worker's whole DuckDB memory limit
    assert executor_for(store, config) is executor  # one client per scheduler, not one per stage
    cluster_executor.cache_clear()


@pytest.mark.parametrize("value", ["ray://head:10001", "tcp://scheduler", "scheduler:8786", ""])
def test_executor_setting_is_local_or_a_scheduler_address(value):
    with pytest.raises(ConfigError, match="db.executor"):
        config_from_dict({"db": {"executor": value}})


def test_a_cluster_refuses_a_local_store(tmp_path):
    """Workers on other machines cannot see this machine's folder."""
    config = config_from_dict({"db": {"executor": "tcp://127.0.0.1:8786"}})
    with pytest.raises(ConfigError, match="s3://"):
        executor_for(Store(tmp_path), config)


def test_ray_addresses_are_refused_with_the_engine_to_use():
    with pytest.raises(ConfigError, match="Dask"):
        cluster_executor("ray://head:10001")


class FakeLock:
    """What PartitionLease reads of its S3Lock."""

    def __init__(self, renewed_mono: float, lease_s: float = 120.0):
        self.renewed_mono, self.lease_s, self.lost, self.took_over = renewed_mono, lease_s, False, False
        self.uri = "s3://b/fetch/partitions/s/part-00003/.lock"


def lease_with(lock: FakeLock) -> PartitionLease:
    lease = PartitionLease.__new__(PartitionLease)
    lease.segment, lease.partition, lease.lock, lease.interrupted = "s", 3, lock, False
    return lease


def test_a_holder_fetches_only_in_the_first_half_of_its_lease():
    """The second half is the margin: another run may take the lease over only when all of it ran out."""
    lease = lease_with(FakeLock(renewed_mono=1000.0, lease_s=120.0))
    assert lease.valid(1000.0 + 120.0 * VALID_SHARE - 0.01)
    assert not lease.valid(1000.0 + 120.0 * VALID_SHARE)
    assert VALID_SHARE <= 0.5


def test_a_lost_lease_stops_the_run_and_refuses_the_final_commit(monkeypatch):
    lock = FakeLock(renewed_mono=0.0)
    lease = lease_with(lock)
    monkeypatch.setattr("cycles.fetch.partition_lease.time.monotonic", lambda: 10.0)
    stop = fenced_stop_signal(lambda: None, lease)
    assert stop() is None
    lock.lost = True  # a renewal found another run's lease object
    assert stop() == signal.SIGTERM
    with pytest.raises(LockedError, match="partition 3 of segment s lost its lease"):
        lease.check()


def test_a_received_stop_signal_is_passed_through():
    lease = lease_with(FakeLock(renewed_mono=0.0))
    assert fenced_stop_signal(lambda: signal.SIGINT, lease)() == signal.SIGINT


def test_leases_live_beside_the_store_wide_fetch_lock():
    assert lease_name("20261202T000000000000Z-abcdef", 7) == "fetch/partitions/20261202T000000000000Z-abcdef/part-00007"


def test_a_fault_kill_can_count_only_one_stage_commit_points(tmp_path, monkeypatch):
    """CRAWL_FAULT_KILL_MATCH: the cluster test kills a worker at its first fetch chunk commit
    wherever the scheduler put it, whatever the worker committed before."""
    from cycles.storage import faults

    killed = []
    monkeypatch.setattr(faults.os, "kill", lambda pid, sig: killed.append(sig))
    monkeypatch.setenv(faults.LOG_ENV, str(tmp_path / "faults.log"))
    monkeypatch.setenv(faults.KILL_AT_ENV, "2")
    monkeypatch.setenv(faults.KILL_MATCH_ENV, "/fetched/")
    for path in ["s/candidates/bucket-00000.parquet", "s/fetched/part-00000-c000000.parquet",
                 "crawldb/v/bucket-00000.parquet"]:
        faults.commit_point(path)
    assert killed == []
    faults.commit_point("s/fetched/part-00000-c000001.parquet")
    assert killed == [signal.SIGKILL]
    faults.commit_point("s/fetched/part-00000-c000002.parquet")  # the restarted worker: no second kill
    assert killed == [signal.SIGKILL]


def test_the_executor_option_sets_db_executor(tmp_path):
    import json

    from typer.testing import CliRunner

    from cycles.commands.cli import app

    shown = CliRunner().invoke(app, ["--data", str(tmp_path / "data"), "--executor", "tcp://10.0.0.5:8786",
                                     "config", "show", "--json"])
    assert shown.exit_code == 0, shown.output
    setting = json.loads(shown.output.strip().splitlines()[-1])["config"]["db"]["executor"]
    assert setting["value"] == "tcp://10.0.0.5:8786"
    refused = CliRunner().invoke(app, ["--data", str(tmp_path / "data"), "--executor", "ray://head:10001",
                                       "config", "show"])
    assert refused.exit_code != 0 and "db.executor" in refused.output
