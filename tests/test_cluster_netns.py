"""One crawl cycle on a cluster of separate hosts: network namespaces on one machine (issue 24).

tests/test_cluster.py runs the scheduler, the workers and S3 as processes on loopback: they
could still share files or addresses by accident. Here each is a host of its own
(testweb/netns.py): the Dask scheduler, two workers and the S3 server (moto) each in its own
network namespace with its own address on a bridge the test makes, with no default route;
each worker also in a private mount namespace whose ``/tmp``, the tests' temporary folder and
the worktree's ``data/`` are empty tmpfs, and with a host name of its own. The coordinator
(this process) and the test web stay in the root namespace; the workers reach the web's
loopback addresses over the bridge.

One cycle (generate, fetch, update) of a small test web on an ``s3://`` store must then
complete, which proves that the machines share only S3; and what the servers saw says who
did the work:

- no worker could see a canary file of the coordinator's, which the coordinator sees;
- moto's request log has requests from each worker's address (and the coordinator's);
- the test web's log has every page request from a worker's address, none from the root
  namespace;
- the crawl DB read back from S3 holds a fetched row for each page the web served.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from cycles.cluster import cluster_executor
from cycles.commands.cycle import run_cycles
from cycles.commands.inject import inject
from cycles.storage.store import Store
from cycles.tables.crawldb import read_crawldb
from testweb.harness import TestWeb
from testweb.moto import STRAY_AWS_SETTINGS, moto_server_path
from testweb.netns import host_network, netns_available
from tests.conftest import config_for, write_seeds
from tests.support.processes import start_watched, stop_all
from tests.support.s3 import s3_settings_with_bucket

pytest.importorskip("distributed", reason="the cluster extra: pip install 'crawl[cluster]'")
pytestmark = pytest.mark.web

WORKERS = ("w1", "w2")
HOSTS = ("scheduler", "s3", *WORKERS)
SCHEDULER_PORT = 8786
S3_PORT = 5000
"""Fixed ports: each namespace is new and has nothing else listening."""
BUCKET = "crawl-netns"
PROCESS_MAX_S = 300
"""No scheduler, worker or S3 server outlives a hung test run by more than this."""
WORKDIR = "/tmp/host"
"""A worker's working and temporary folder, inside its private ``/tmp``."""

MOTO_LINE = re.compile(r'^(\d+\.\d+\.\d+\.\d+) - - \[[^]]*\] "(\w+) ')
"""werkzeug's request line in moto_server's log: client address, method."""


def start(cmd: list[str], cwd: Path, env: dict, log: Path) -> subprocess.Popen:
    return start_watched(cmd, cwd, env, log, PROCESS_MAX_S)


def wait_for_port(address: str, port: int, proc: subprocess.Popen, log: Path, wait_s: float = 60.0) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            socket.create_connection((address, port), timeout=0.5).close()
            return
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.2)


def s3_settings(address: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": f"http://{address}:{S3_PORT}", "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true"}


def hidden_folders(tmp_root: Path) -> list[str]:
    """What a worker must not see: every temporary file, the tests' folder (the coordinator's
    files), the worktree's default data folder."""
    folders = ["/tmp", str(tmp_root)]
    data = Path.cwd() / "data"
    if data.is_dir():
        folders.append(str(data))
    return folders


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The hosts, their processes started; yields the network, the S3 settings, the logs and
    the coordinator's canary file. Stops every process before the namespaces go."""
    why = netns_available()
    if why is not None:
        pytest.skip(why)
    if not moto_server_path().exists():
        pytest.skip("moto_server is not installed (pip install 'moto[server]')")
    tmp = tmp_path_factory.mktemp("netns")
    canary = tmp / "coordinator-canary.txt"
    canary.write_text("only the coordinator's machine has this file\n")
    dask = str(Path(sys.executable).parent / "dask")
    with host_network(HOSTS) as net:
        for name in WORKERS:
            net.route_web(name)
        s3 = net.hosts["s3"].address
        settings = s3_settings(s3)
        base_env = {k: v for k, v in os.environ.items() if k not in STRAY_AWS_SETTINGS}
        base_env.update(settings, PYTHONPATH=os.getcwd(), PYTHONUNBUFFERED="1")
        address = f"tcp://{net.hosts['scheduler'].address}:{SCHEDULER_PORT}"
        logs = {name: tmp / f"{name}.log" for name in HOSTS}
        procs = []
        try:
            procs.append(start(net.hosts["s3"].prefix() + [str(moto_server_path()), "-H", s3, "-p", str(S3_PORT)],
                               tmp, base_env, logs["s3"]))
            procs.append(start(net.hosts["scheduler"].prefix()
                               + [dask, "scheduler", "--host", net.hosts["scheduler"].address,
                                  "--port", str(SCHEDULER_PORT), "--no-dashboard"], tmp, base_env, logs["scheduler"]))
            worker_env = {**base_env, "TMPDIR": WORKDIR, "HOME": WORKDIR}
            for name in WORKERS:
                procs.append(start(net.private_host(name, hidden_folders(tmp_path_factory.getbasetemp()), WORKDIR)
                                   + [dask, "worker", address, "--nthreads", "1", "--host", net.hosts[name].address,
                                      "--name", name, "--no-dashboard", "--local-directory", f"{WORKDIR}/dask"],
                                   tmp, worker_env, logs[name]))
            wait_for_port(s3, S3_PORT, procs[0], logs["s3"])
            with s3_settings_with_bucket(settings, BUCKET):
                yield {"net": net, "address": address, "logs": logs, "canary": canary, "tmp": tmp}
        finally:
            executor = cluster_executor(address)
            executor.close()
            cluster_executor.cache_clear()
            stop_all(procs)


@pytest.fixture(scope="module")
def cycle(cluster):
    """One cycle of a small test web on the cluster; what the workers could see, asked of them."""
    from distributed import Client

    tmp = cluster["tmp"]
    with TestWeb(hosts=4, pages=3, page_bytes=2000, special=False, max_seconds=240) as web:
        seeds = write_seeds(tmp / "seeds.txt", web.seeds())
        config = config_for(web, processes=1)
        config.generate.partitions = 2
        config.db.buckets = 2
        config.db.executor = cluster["address"]
        with Client(cluster["address"], timeout=60) as client:
            client.wait_for_workers(len(WORKERS), timeout=120)
            workers = {info["name"]: addr for addr, info in client.scheduler_info()["workers"].items()}
            sees_canary = client.run(os.path.exists, str(cluster["canary"]))
            sees_own_folder = client.run(os.path.exists, WORKDIR)
            sees_code = client.run(os.path.exists, str(Path.cwd() / "cycles" / "cluster.py"))
            host_names = client.run(socket.gethostname)
        store = Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/crawl")
        inject(store, config, seeds)
        log = list(run_cycles(store, config, cycles=1))
        requests = web.requests()
        served = web.requested_urls(r for r in requests if r["status"] == 200)
    return {"store": store, "log": log, "requests": requests, "workers": workers, "sees_canary": sees_canary,
            "sees_own_folder": sees_own_folder, "sees_code": sees_code, "host_names": host_names,
            "seeds": web.seeds(), "served": served}


def address_of(worker_uri: str) -> str:
    return worker_uri.split("://", 1)[1].rsplit(":", 1)[0]


def test_each_worker_is_a_host_of_its_own(cluster, cycle):
    net = cluster["net"]
    assert {name: address_of(uri) for name, uri in cycle["workers"].items()} == \
        {name: net.hosts[name].address for name in WORKERS}
    assert sorted(cycle["host_names"].values()) == sorted(WORKERS)
    assert len({h.address for h in net.hosts.values()} | {net.root_address}) == len(HOSTS) + 1


def test_no_worker_saw_a_coordinator_file(cluster, cycle):
    """The canary is there for the coordinator (the positive control) and for nobody else; the
    workers see the code they run and their own folder, so the check itself can say yes."""
    assert cluster["canary"].exists()
    assert set(cycle["sees_canary"].values()) == {False}, cycle["sees_canary"]
    assert set(cycle["sees_own_folder"].values()) == {True}, cycle["sees_own_folder"]
    assert set(cycle["sees_code"].values()) == {True}, cycle["sees_code"]


def moto_requests(log: Path) -> list[tuple[str, str]]:
    """(client address, method) of every request in moto_server's log."""
    lines = log.read_text(errors="replace").splitlines()
    return [m.groups() for m in map(MOTO_LINE.match, lines) if m]


def test_s3_saw_each_worker_and_the_coordinator(cluster, cycle):
    net = cluster["net"]
    seen = moto_requests(cluster["logs"]["s3"])
    clients = {addr for addr, _ in seen}
    assert net.root_address in clients, seen[:5]  # the coordinator's requests: the log is read right
    for name in WORKERS:
        writes = [m for addr, m in seen if addr == net.hosts[name].address and m in ("PUT", "POST")]
        assert writes, (name, sorted(clients))
    assert clients <= {net.root_address, *(net.hosts[n].address for n in WORKERS)}, clients


def test_the_web_saw_every_page_fetched_from_a_worker(cluster, cycle):
    net = cluster["net"]
    workers = {net.hosts[n].address for n in WORKERS}
    requests = cycle["requests"]
    assert requests, cycle["log"]
    clients = {r["client"] for r in requests}
    assert clients and clients <= workers, clients


def test_the_crawl_db_in_s3_has_the_fetched_rows(cycle):
    rows = read_crawldb(cycle["store"]).to_pylist()
    fetched = {r["url"] for r in rows if r["status"] == "fetched"}
    assert set(cycle["seeds"]) <= fetched, (sorted(fetched), cycle["log"])
    assert fetched == cycle["served"], (sorted(fetched), sorted(cycle["served"]))
    assert len(rows) > len(fetched)  # the fetched pages' links, found by update


def test_no_host_has_a_route_out_of_the_test_network(cluster):
    """The network rule: a namespace reaches the bridge (the positive control) and nothing
    else; there is no default route, so no packet can leave for another address."""
    net = cluster["net"]
    for host in net.hosts.values():
        assert subprocess.run(["ip", "-n", host.name, "route", "get", net.root_address],
                              capture_output=True).returncode == 0
        assert "default" not in subprocess.run(["ip", "-n", host.name, "route", "show"], capture_output=True,
                                               text=True).stdout
        out = subprocess.run(["ip", "-n", host.name, "route", "get", "192.0.2.1"], capture_output=True, text=True)
        assert out.returncode != 0 and "unreachable" in out.stderr.lower(), (host.name, out.stdout, out.stderr)
