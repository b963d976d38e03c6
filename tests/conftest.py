"""Shared fixtures: a store in a temporary folder, and configs that point at a test web.

Every test web is started by the test that uses it, on its own loopback addresses, is
bounded in time (``max_seconds``) and is stopped when the test ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from typing import Callable, Iterator

# Python's bytecode cache, written even where PYTHONDONTWRITEBYTECODE=1 is set (container
# images often set it): without it every run, and each xdist worker, compiled cycles/,
# testweb/ and pytest's rewritten test modules again — 6.2 CPU-s of collecting the fast
# tier per process against 2.3 s with the cache (2-core machine). Set before the imports
# below; the cache is gitignored.
sys.dont_write_bytecode = False

import pytest  # noqa: E402

from cycles.config import Config  # noqa: E402
from cycles.storage.store import Store  # noqa: E402
from testweb.harness import TestWeb  # noqa: E402


@contextmanager
def loopback_servers(addresses, handler, max_seconds: float, **shared) -> Iterator[tuple[int, list]]:
    """One ``ThreadingHTTPServer`` of ``handler`` per loopback address of ``addresses``, all on
    one port (the first free one), for tests whose few hand-written hosts each need their own
    address. Every server gets the attributes ``shared`` (the same objects: a request log, a
    page table); yields ``(port, servers)``. Stopped when the block ends, and by a timer after
    ``max_seconds`` whatever the test does, so a hung test cannot keep a server up."""
    servers, timers = [], []
    port = 0
    try:
        for address in addresses:
            server = ThreadingHTTPServer((address, port), handler)
            port = server.server_address[1]
            for name, value in shared.items():
                setattr(server, name, value)
            servers.append(server)
        for server in servers:
            threading.Thread(target=server.serve_forever, daemon=True).start()
            timer = threading.Timer(max_seconds, server.shutdown)
            timer.daemon = True
            timer.start()
            timers.append(timer)
        yield port, servers
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
        for timer in timers:
            timer.cancel()


def kill_when(process: subprocess.Popen, ready: Callable[[], bool], within_s: float, poll_s: float = 0.05) -> None:
    """SIGKILL ``process`` (a crawl subprocess) as soon as ``ready()`` holds — the crash-only
    tests' kill at a chosen point; fails the test, with the process's output, if it exits
    first or ``ready`` does not hold within ``within_s``."""
    deadline = time.monotonic() + within_s
    while not ready():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(poll_s)
    process.send_signal(signal.SIGKILL)
    process.wait()


def config_for(web, **fetch) -> Config:
    """The test web's crawl config, with two processes, frequent flushes and a small DuckDB."""
    config = web.crawl_config()
    # Tests of the cycle's steps assert what one cycle fetches (the seeds, then their links);
    # discovery inside the fetch (on by default) is tested with it on, in tests/fetch/test_discovery.py.
    config.fetch.follow_outlinks_depth = 0
    config.fetch.processes = 2
    config.fetch.flush_s = 5.0
    config.db.duckdb_memory_limit = "1GB"
    for key, value in fetch.items():
        setattr(config.fetch, key, value)
    return config


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path / "data")


def write_seeds(path, urls) -> str:
    path.write_text("\n".join(urls) + "\n")
    return str(path)


@pytest.fixture
def fail_second_write(monkeypatch):
    """Call it to make the next Store.write_batches calls fail on the second one
    ("disk full"), as a stage failing midway between two files would."""
    def arm() -> None:
        calls = []
        original = Store.write_batches

        def failing(self, path, batches, table_schema):
            calls.append(path)
            if len(calls) == 2:
                raise OSError("disk full")
            return original(self, path, batches, table_schema)

        monkeypatch.setattr(Store, "write_batches", failing)
    return arm


# --- the longest files first ---------------------------------------------------------------
# With `-n auto --dist loadfile` (scripts/test.sh) each worker takes whole files; a long file
# handed out last keeps one worker busy while the other idles (the 2-core full suite: 20.0 min,
# its last 2-3 min on one worker). Longest first (measured wall times, one file at a time,
# session 12), then the others by their number of tests (xdist's own order): the short files
# fill the end. scripts/test.sh
# passes --no-loadscope-reorder, or xdist orders the files by their number of tests instead.
LONGEST_FILES = (
    "tests/test_fault_injection.py", "tests/test_s3.py", "tests/test_doc_snippets.py",
    "tests/update/test_dedup_run.py", "tests/test_demo.py", "tests/test_run_discovery.py",
    "tests/test_doc_snippets_alone.py", "tests/update/test_dedup_web.py", "tests/update/test_traps_web.py",
    "tests/test_export_all.py", "tests/update/test_freshness_web.py", "tests/test_e2e.py",
    "tests/test_cluster_netns.py", "tests/test_cluster.py", "tests/test_run.py", "tests/test_rebucket.py",
    "tests/test_compact.py", "tests/update/test_importance_web.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: n for n, path in enumerate(LONGEST_FILES)}
    counts: dict[str, int] = {}
    for item in items:
        counts[item.nodeid.split("::", 1)[0]] = counts.get(item.nodeid.split("::", 1)[0], 0) + 1

    def order(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::", 1)[0]
        # The other files as xdist would order them: most tests first (the fast tier's order).
        return (rank[path], 0) if path in rank else (len(rank), -counts[path])

    items.sort(key=order)  # stable: a file's tests keep their order


# --- how many workers `-n auto` starts --------------------------------------------------------
# The full suite mostly waits on servers, delays and subprocesses: the 2-core full suite ran
# at load 1.0-1.8 with two workers (19.0 min). Two workers per core keep the cores busy
# (11.9 min with four, session 12). The fast tier (-m "not web") is CPU-bound: one worker per
# core, as more would only add their collection time.
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    cores = len(os.sched_getaffinity(0))
    return cores if (config.option.markexpr or "").replace(" ", "") == "notweb" else 2 * cores


# --- the fast tier stays fast -------------------------------------------------------------
# A test that starts a test web belongs to the full suite only: it must carry
# @pytest.mark.web, or `pytest -m "not web"` silently pays for servers and crawls. The test
# being set up is remembered so TestWeb.start can tell (its fixtures included).
_running: list[pytest.Item] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _running[:] = [item]


def pytest_runtest_teardown(item: pytest.Item) -> None:
    _running.clear()


_start_test_web = TestWeb.start


def _start_only_in_web_tests(self: TestWeb) -> TestWeb:
    if _running and _running[0].get_closest_marker("web") is None:
        raise RuntimeError(f"{_running[0].nodeid} starts a test web: mark it @pytest.mark.web "
                           "(the fast tier is -m \"not web\")")
    return _start_test_web(self)


TestWeb.start = _start_only_in_web_tests


# --- temporary folders in memory where the machine has room ---------------------------------
# Every stage fsyncs what it commits (cycles/storage/store.py); on a disk that is most of a small
# test's time (test_transitions: 122 s on disk, 73 s on tmpfs, same machine and load). The
# code paths are the same on tmpfs — fsync is called, it is just cheap — and the crash tests
# kill processes, not the machine, so the page cache is what they observe either way.
# CRAWL_TEST_TMP=disk keeps pytest's default; CRAWL_TEST_TMP=/some/dir picks the parent.
MEMORY_TMP = "/dev/shm"
MEMORY_TMP_MIN_FREE_BYTES = 4 << 30
_memory_basetemp: list[str] = []


def _tmp_parent() -> str | None:
    chosen = os.environ.get("CRAWL_TEST_TMP", "")
    if chosen == "disk":
        return None
    if chosen:
        return chosen
    try:
        stats = os.statvfs(MEMORY_TMP)
    except OSError:
        return None
    free = stats.f_bavail * stats.f_frsize
    return MEMORY_TMP if free >= MEMORY_TMP_MIN_FREE_BYTES and os.access(MEMORY_TMP, os.W_OK) else None


def pytest_configure(config: pytest.Config) -> None:
    # The fast tier draws fewer random examples per property (tests/examples.py); the
    # decision is made before test modules are imported, the same way in xdist workers.
    if (config.option.markexpr or "").replace(" ", "") == "notweb":
        os.environ["CRAWL_TEST_FAST"] = "1"
    # xdist workers arrive with the controller's basetemp already set: only the first
    # process chooses, and only it removes the folder at the end.
    if config.option.basetemp is not None:
        return
    parent = _tmp_parent()
    if parent is None:
        return
    folder = tempfile.mkdtemp(prefix="crawl-tests-", dir=parent)
    _memory_basetemp.append(folder)
    config.option.basetemp = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _memory_basetemp:
        shutil.rmtree(folder, ignore_errors=True)
    _memory_basetemp.clear()


@pytest.fixture(scope="session")
def two_cycles(tmp_path_factory):
    """One small crawl shared by tests/test_metrics.py and tests/test_report.py (one crawl, not
    one per module): two cycles of a 3-host test web without the special hosts (about 20 s),
    fetch metrics rewritten every 0.2 s, every ``crawl_fetch.prom`` written kept in ``writes``."""
    from cycles import metrics
    from cycles.commands.cycle import run_cycles
    from cycles.commands.inject import inject

    tmp = tmp_path_factory.mktemp("two-cycles")
    writes: list[str] = []
    real_write = metrics.write_textfile

    def recording(path, families):
        real_write(path, families)
        if path.name == "crawl_fetch.prom":
            writes.append(path.read_text())

    with TestWeb(hosts=3, pages=4, page_bytes=2000, special=False, max_seconds=120) as web, \
            pytest.MonkeyPatch.context() as mp:
        mp.setattr(metrics, "write_textfile", recording)
        store = Store(tmp / "data")
        config = config_for(web, processes=1, progress_s=0.2)
        config.metrics.fetch_interval_s = 0.2
        inject(store, config, write_seeds(tmp / "seeds.txt", web.seeds()))
        log = list(run_cycles(store, config, cycles=2))
        requests = web.requests()
    return {"store": store, "config": config, "log": log, "requests": requests, "writes": writes,
            "segments": store.segments(), "tmp": tmp}


@pytest.fixture(scope="session")
def small_crawl(tmp_path_factory) -> Store:
    """Two cycles of a 2-host test web, shared by tests/test_views.py and tests/test_api.py
    (they only read it): two crawl DB versions kept, two feed batches."""
    from cycles.commands.cycle import run_cycles
    from cycles.commands.inject import inject
    from cycles.tables.pages import batches

    tmp = tmp_path_factory.mktemp("small-crawl")
    with TestWeb(hosts=2, pages=3, page_bytes=2000, max_seconds=120) as web:
        store = Store(tmp / "data")
        config = config_for(web)
        config.generate.max_urls_per_host = 2  # a short cycle: two requests a host, 1 s apart
        config.fetch.processes = 1  # in-process: no pool to start for a few pages
        inject(store, config, write_seeds(tmp / "seeds.txt", web.seeds()))
        log = list(run_cycles(store, config, cycles=2))
    assert any("updated" in line for line in log), log
    assert len(batches(store)) >= 2  # two feed batches: the cursor has somewhere to stop between
    return store


@pytest.fixture(scope="module")
def s3_env():
    """moto_server on loopback with the AWS settings pointed at it (tests/support/s3.py)."""
    from tests.support.s3 import moto_s3

    with moto_s3() as env:
        yield env
