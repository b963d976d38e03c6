"""kill -9 at every commit point of every stage, then run again as an operator would.

Each stage is run as ``crawl`` subprocess with :mod:`cycles.storage.faults` armed: the process
that reaches the N-th commit point (the rename or upload of a file that matters) kills
itself with SIGKILL just before making that file visible. For every N of the stage:

- the crawl DB is the old or the new version, whole: ``CURRENT`` names a readable
  version, every bucket file reads, no URL has two rows, every row is in its bucket;
- running the stage (or ``crawl cycle``) again completes, and the crawl DB then holds the
  same URLs with the same statuses as a run without the kill;
- the web's server log shows no URL asked more than twice (the at-least-once window of an
  uncommitted chunk) and no host asked twice within its delay across the kill.

Fetch is killed at one commit point of every kind (results, outlinks, WARC, host state,
partition stats, marker), since each of its runs waits on politeness delays; generate,
update and inject at every one. (That ``crawl cycle`` finishes an interrupted segment
before generating is tested in tests/test_cycle_recovery.py.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections import Counter

import pyarrow.parquet as pq
import pytest

from cycles.tables.crawldb import current_buckets, read_bucket_rows
from cycles.storage.store import Store
from cycles.tables.segment import segment_state
from testweb.harness import TestWeb
from cycles.urls import host_hash
from tests.support.fetching import assert_polite

pytestmark = pytest.mark.web

HOSTS, PAGES = 3, 3
FETCH_POINTS_MAX = 7


def write_config(web, path) -> None:
    from cycles.config import FetchConfig

    allowed = 'allowed_networks = ["127.0.0.0/8"]\n' if "allowed_networks" in FetchConfig.__dataclass_fields__ else ""
    resolve = ", ".join(f'"{name}" = "{ip}"' for name, ip in web.resolve_map().items())
    path.write_text(f"""[db]
buckets = 2
processes = 1
duckdb_memory_limit = "512MB"

[generate]
partitions = 2

[fetch]
processes = 1
flush_pages = 2
timeout_s = 5.0
connect_timeout_s = 2.0
progress_s = 0.0
{allowed}resolve = {{ {resolve} }}
""")


def crawl(data, config, *args, log=None, kill_at=None, timeout=120) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("CRAWL_FAULT_LOG", None)
    env.pop("CRAWL_FAULT_KILL_AT", None)
    if log is not None:
        env["CRAWL_FAULT_LOG"] = str(log)
        if kill_at is not None:
            env["CRAWL_FAULT_KILL_AT"] = str(kill_at)
    return subprocess.run([sys.executable, "-m", "cycles", "--data", str(data), "--config", str(config), *args],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=os.getcwd())


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def resume(data, config, *args) -> subprocess.CompletedProcess:
    """Run a command again after a kill, as an operator would: when it refuses because
    ``CURRENT`` is gone (a kill between recording a version as installed and writing
    ``CURRENT``), run the ``crawl recover`` it names first."""
    result = crawl(data, config, *args)
    if result.returncode == 2 and "crawl recover" in result.stderr:
        ok(crawl(data, config, "recover"))
        result = crawl(data, config, *args)
    return result


def crawldb_state(data) -> dict[str, str]:
    """URL -> status of the current crawl DB, after checking it is whole and consistent."""
    store = Store(data)
    manifest = store.manifest("crawldb")
    assert manifest is not None, "CURRENT is gone"
    rows: dict[str, str] = {}
    _, buckets = current_buckets(store, verify=True)
    for bucket in range(manifest.buckets):
        # Base and deltas merged (docs/incremental.md): what every reader sees.
        table = read_bucket_rows(store, buckets[bucket], manifest.schema_version)
        for row in table.select(["url", "host", "host_hash", "status"]).to_pylist():
            assert row["url"] not in rows, f"two rows for {row['url']}"
            assert row["host_hash"] % manifest.buckets == bucket, f"{row['url']} in bucket {bucket}"
            assert row["host_hash"] == host_hash(row["host"])
            rows[row["url"]] = row["status"]
    return rows


def commit_points(log) -> list[str]:
    return [line.split("\t", 1)[1].rstrip("\n") for line in open(log)] if os.path.exists(log) else []


def copy_store(src, dst) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".duckdb-tmp"))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A test web, a config, and stores snapshotted at each stage boundary of cycle 2."""
    tmp = tmp_path_factory.mktemp("faults")
    with TestWeb(hosts=HOSTS, pages=PAGES, page_bytes=2000, special=False, max_seconds=600) as web:
        config = tmp / "crawl.toml"
        write_config(web, config)
        seeds = tmp / "seeds.txt"
        seeds.write_text("".join(web.url(f"h{i}", "/") + "\n" for i in range(HOSTS)))
        snaps = {"empty": tmp / "snap-empty"}
        snaps["empty"].mkdir()
        data = tmp / "data"
        ok(crawl(data, config, "inject", str(seeds)))
        ok(crawl(data, config, "cycle", "--cycles", "1"))
        copy_store(data, snaps.setdefault("before_generate", tmp / "snap-gen"))
        ok(crawl(data, config, "generate"))
        copy_store(data, snaps.setdefault("before_fetch", tmp / "snap-fetch"))
        ok(crawl(data, config, "fetch"))
        copy_store(data, snaps.setdefault("before_update", tmp / "snap-update"))
        ok(crawl(data, config, "update"))
        copy_store(data, snaps.setdefault("before_compact", tmp / "snap-compact"))  # with deltas
        yield {"web": web, "config": config, "seeds": seeds, "snaps": snaps, "tmp": tmp,
               "final": crawldb_state(data)}


def reference(world, snap: str, *args) -> tuple[dict[str, str], list[str]]:
    """The crawl DB after running ``args`` on a copy of a snapshot without a kill, and the
    commit points that run passed."""
    data = world["tmp"] / f"ref-{snap}"
    copy_store(world["snaps"][snap], data)
    log = world["tmp"] / f"ref-{snap}.log"
    log.unlink(missing_ok=True)
    ok(crawl(data, world["config"], *args, log=log))
    return crawldb_state(data), commit_points(log)


def kill_and_resume(world, snap: str, args: tuple, again: tuple, kill_at: int) -> tuple[dict, dict, list]:
    """Copy the snapshot, run ``args`` killed at commit point ``kill_at``, check the store,
    then run ``again``; returns (state after the kill, state after resuming, requests)."""
    data = world["tmp"] / "run"
    copy_store(world["snaps"][snap], data)
    log = world["tmp"] / "run.log"
    log.unlink(missing_ok=True)
    started = time.time()
    killed = crawl(data, world["config"], *args, log=log, kill_at=kill_at)
    assert killed.returncode == -9, f"not killed at commit point {kill_at}: {killed.stdout}{killed.stderr}"
    after_kill = crawldb_state(data) if Store(data).manifest("crawldb") or snap != "empty" else {}
    resumed = resume(data, world["config"], *again)
    # 3, nothing to do: the kill came after the stage's work was installed (an update killed
    # between the swap and its marker finishes by writing the marker).
    assert resumed.returncode in (0, 3), f"resume after kill at {kill_at} failed: {resumed.stdout}{resumed.stderr}"
    requests = [r for r in world["web"].requests() if r["t_start"] >= started]
    return after_kill, crawldb_state(data), requests


def assert_fetched_once_each(data) -> None:
    """No URL has two committed results in any segment."""
    store = Store(data)
    for segment in store.segments():
        folder = store.segment_dir(segment) / "fetched"
        urls = [u for f in sorted(folder.glob("part-*.parquet")) for u in pq.read_table(f, columns=["url"])["url"].to_pylist()]
        dupes = [u for u, n in Counter(urls).items() if n > 1]
        assert not dupes, f"{segment}: committed twice: {dupes[:3]}"


def test_inject_killed_at_every_commit_point(world):
    after, points = reference(world, "empty", "inject", str(world["seeds"]))
    assert points, "inject passed no commit point"
    for n in range(1, len(points) + 1):
        data = world["tmp"] / "run"
        copy_store(world["snaps"]["empty"], data)
        log = world["tmp"] / "run.log"
        log.unlink(missing_ok=True)
        killed = crawl(data, world["config"], "inject", str(world["seeds"]), log=log, kill_at=n)
        assert killed.returncode == -9, killed.stderr
        if (data / "crawldb" / "CURRENT").exists():
            assert crawldb_state(data) == after  # CURRENT is written last: whole or absent
        resume(data, world["config"], "inject", str(world["seeds"]))
        assert crawldb_state(data) == after, f"kill at {n} ({points[n - 1]})"


def fetchlist_urls(data) -> list[str]:
    """URLs in the fetch lists of the complete (generated) segments not yet updated."""
    store = Store(data)
    urls = []
    for segment in store.segments():
        if segment_state(store, segment) in ("generated", "fetched"):
            folder = store.segment_dir(segment) / "fetchlist"
            urls += [u for f in sorted(folder.glob("part-*.parquet")) for u in pq.read_table(f)["url"].to_pylist()]
    return sorted(urls)


def test_generate_killed_at_every_commit_point(world):
    before = crawldb_state(world["snaps"]["before_generate"])
    _, points = reference(world, "before_generate", "generate")
    expected = fetchlist_urls(world["tmp"] / "ref-before_generate")
    assert points and expected
    for n in range(1, len(points) + 1):
        after_kill, resumed, _ = kill_and_resume(world, "before_generate", ("generate",), ("generate",), n)
        assert after_kill == resumed == before  # generate never rewrites the crawl DB
        # A killed generate leased nothing: the one that ran after it leased every due URL, once.
        assert fetchlist_urls(world["tmp"] / "run") == expected, f"kill at {n} ({points[n - 1]})"


def test_update_killed_at_every_commit_point(world):
    before = crawldb_state(world["snaps"]["before_update"])
    after, points = reference(world, "before_update", "update")
    assert after == world["final"]
    for n in range(1, len(points) + 1):
        after_kill, resumed, _ = kill_and_resume(world, "before_update", ("update",), ("update",), n)
        assert after_kill in (before, after), f"kill at {n} ({points[n - 1]}): a mix of versions"
        assert resumed == after, f"kill at {n} ({points[n - 1]})"
        assert_fetched_once_each(world["tmp"] / "run")


def fetch_kill_points(points: list[str]) -> list[int]:
    """The first commit point of each kind of file, plus an even spread of the others."""
    def kind(path: str) -> str:
        name = path.rsplit("/", 1)[-1]
        folder = path.rsplit("/", 2)[-2]
        return folder if name.startswith("part-") else name
    chosen, seen = [], set()
    for n, path in enumerate(points, 1):
        if kind(path) not in seen:
            seen.add(kind(path))
            chosen.append(n)
    rest = [n for n in range(1, len(points) + 1) if n not in chosen]
    step = max(1, len(rest) // max(1, FETCH_POINTS_MAX - len(chosen)))
    return sorted(set(chosen + rest[::step][: max(0, FETCH_POINTS_MAX - len(chosen))]))


def test_fetch_killed_at_commit_points(world):
    _, points = reference(world, "before_fetch", "fetch")
    after = world["final"]
    assert len(points) >= 4
    for n in fetch_kill_points(points):
        _, _, requests = kill_and_resume(world, "before_fetch", ("fetch",), ("fetch",), n)
        data = world["tmp"] / "run"
        ok(crawl(data, world["config"], "update"))
        assert crawldb_state(data) == after, f"kill at {n} ({points[n - 1]})"
        assert_fetched_once_each(data)
        assert_polite(requests)
        counts = Counter((r["host"], r["path"]) for r in requests if r["path"] != "/robots.txt")
        assert max(counts.values(), default=1) <= 2, f"kill at {n} ({points[n - 1]}): asked more than twice"


def linkdb_state(data) -> list[tuple]:
    """The current link DB's (url, from_host) pairs, sorted."""
    store = Store(data)
    manifest = store.manifest("linkdb")
    assert manifest is not None, "linkdb/CURRENT is gone"
    folder = store.path("linkdb", manifest.version)
    return sorted((r["url"], r["from_host"]) for f in sorted(folder.glob("inlinks-*.parquet"))
                  for r in pq.read_table(f).to_pylist())


def all_rows(data) -> list[dict]:
    """Every column of every crawl DB row (bases and deltas merged), by URL."""
    from cycles.tables.crawldb import read_crawldb

    return read_crawldb(Store(data)).sort_by([("url", "ascending")]).to_pylist()


def test_compact_killed_at_every_commit_point(world):
    """`crawl compact --all` (every bucket's deltas into a new base, the pending links into
    the link DB) killed at each commit point, then run again: the crawl DB holds the same
    rows all along, and ends with no delta and the link DB of an uninterrupted run."""
    before = Store(world["snaps"]["before_compact"]).manifest("crawldb")
    assert any(before.bucket_deltas), "the update wrote no delta: nothing to compact"
    after, points = reference(world, "before_compact", "compact", "--all")
    links = linkdb_state(world["tmp"] / "ref-before_compact")
    assert after == world["final"] and links
    assert any("/crawldb/" in p for p in points)
    from cycles.tables.crawldb import current_buckets
    from cycles.tables.keyindex import has_key_index
    from cycles.update.linkgraph import pending_files

    if pending_files(Store(world["snaps"]["before_compact"])):  # links pending: merged by the same run
        assert any("/linkdb/" in p for p in points)
    for n in range(1, len(points) + 1):
        after_kill, resumed, _ = kill_and_resume(world, "before_compact", ("compact", "--all"), ("compact", "--all"), n)
        assert after_kill == resumed == after, f"kill at {n} ({points[n - 1]})"
        # The same result, column for column: a bucket's compacted rows are a function of its files.
        assert all_rows(world["tmp"] / "run") == all_rows(world["tmp"] / "ref-before_compact"), f"kill at {n}"
        manifest = Store(world["tmp"] / "run").manifest("crawldb")
        assert not any(manifest.bucket_deltas), f"kill at {n} ({points[n - 1]}): deltas left"
        assert all(has_key_index(Store(world["tmp"] / "run"), b.base)  # update's lookups (cycles/tables/keyindex.py)
                   for b in current_buckets(Store(world["tmp"] / "run"))[1]), f"kill at {n}: a base without its index"
        assert linkdb_state(world["tmp"] / "run") == links, f"kill at {n} ({points[n - 1]})"
