"""Update's routing by chunk (cycles/update/route.py) and its attempt-unique bucket files.

One generated segment is copied; each copy gets the same fetch output, written as one
chunk or cut into three, and is updated at the same instant: the crawl DBs must be equal,
and equal to what the rules say (a URL's links from several chunks keep the smallest
depth, a URL fetched in two chunks its newest result, a listed result beats an inline one).
"""

from __future__ import annotations

import datetime as dt
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cycles.tables.segment import write_stage_marker
from cycles.tables import schema
from cycles.config import Config
from cycles.tables.crawldb import read_crawldb
from cycles.executor import InProcess
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.storage.store import Manifest, Store
from cycles.update import route
from cycles.update.update import update_segment

NOW = dt.datetime(2026, 12, 2, 6, 0, tzinfo=dt.timezone.utc)
SEEDS = [f"http://h{i}.example/p" for i in range(6)]


def result(url: str, outcome: str, minutes: int, **more) -> dict:
    row = {name: None for name in schema.FETCHED.names}
    row.update(url=url, host=url.split("/")[2].split(":")[0].lower(), outcome=outcome,
               fetched_at=NOW - dt.timedelta(minutes=minutes), **more)
    return row


def link(from_url: str, url: str, depth: int) -> dict:
    return {"from_url": from_url, "url": url, "anchor": "", "nofollow": False, "depth": depth}


# (fetched rows, outlinks) of each of three chunks of partition 0.
CHUNKS = [
    ([result(SEEDS[0], "server_error", 30, http_status=503),
      result("HTTP://H1.EXAMPLE:80/target#a", "ok", 30, http_status=200, content_hash="a" * 32),
      result(SEEDS[1], "redirect", 30, http_status=301, redirect_to="http://h1.example/target")],
     [link(SEEDS[1], "http://h3.example/new", 3), link(SEEDS[1], "http://h4.example/deep", 25)]),
    ([result(SEEDS[0], "ok", 20, http_status=200, content_hash="0" * 32),
      result(SEEDS[2], "ok", 20, http_status=200, content_hash="2" * 32),
      result("http://H2.example/p", "gone", 10, http_status=404)],  # an inline spelling of a listed URL
     [link(SEEDS[2], "http://h3.example/new", 1), link(SEEDS[2], "http://other.example/x", 4)]),
    ([result("http://h1.example/target", "ok", 10, http_status=200, content_hash="b" * 32),
      result(SEEDS[3], "not_modified", 10, http_status=304)],
     [link(SEEDS[3], "http://h4.example/deep", 2), link(SEEDS[3], "http://other.example/x", 6)]),
]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """A crawl DB of the seeds (3 buckets) and its generated segment, in one partition."""
    folder = tmp_path_factory.mktemp("route")
    config = Config()
    config.db.buckets = 3
    config.generate.partitions = 1
    config.update.link_rank_interval_s = 0  # the link DB merged in update: its tasks are routed too
    store = Store(folder / "data")
    seeds = folder / "seeds.txt"
    seeds.write_text("\n".join(SEEDS) + "\n")
    inject(store, config, seeds)
    segment = generate(store, config).segment
    return folder / "data", config, segment


def fetched_copy(generated, target, chunks) -> Store:
    """A copy of the generated store with ``chunks`` [(name, fetched rows, links)] as its fetch output."""
    source, _, segment = generated
    shutil.copytree(source, target)
    store = Store(target)
    folder = store.segment_dir(segment)
    for name, fetched, links in chunks:
        store.write_table(folder / "fetched" / f"{name}.parquet",
                          pa.Table.from_pylist(fetched, schema=schema.FETCHED), schema.FETCHED)
        store.write_table(folder / "outlinks" / f"{name}.parquet",
                          pa.Table.from_pylist(links, schema=schema.OUTLINKS), schema.OUTLINKS)
    write_stage_marker(store, segment, "fetched", {"segment": segment})
    return store


def crawldb_rows(store: Store) -> list[dict]:
    rows = read_crawldb(store).to_pylist()  # bases and deltas merged
    return sorted(rows, key=lambda row: row["url"])


class Recording(InProcess):
    """Runs in-process and records each map: (function, tasks); ``repeat``: each task that often
    (a task retried after its worker was lost, both attempts finishing)."""

    def __init__(self, repeat: int = 1):
        self.calls: list[tuple[str, int]] = []
        self.repeat = repeat

    def map(self, fn, tasks):
        self.calls.append((fn.__name__, len(tasks)))
        for _ in range(self.repeat - 1):
            [fn(task) for task in tasks]
        return [fn(task) for task in tasks]


@pytest.fixture(scope="module")
def one_chunk(generated, tmp_path_factory):
    fetched = [row for rows, _ in CHUNKS for row in rows]
    links = [row for _, rows in CHUNKS for row in rows]
    store = fetched_copy(generated, tmp_path_factory.mktemp("one") / "data", [("part-00000-c000001", fetched, links)])
    result = update_segment(store, generated[1], generated[2], now=NOW, executor=Recording())
    return store, result


def three_chunks(generated, target, monkeypatch, executor):
    store = fetched_copy(generated, target, [(f"part-00000-c{i:06d}", fetched, links)
                                            for i, (fetched, links) in enumerate(CHUNKS, 1)])
    monkeypatch.setattr(route, "ROUTE_TASK_ROWS", 1)  # every chunk a task of its own
    return store, update_segment(store, generated[1], generated[2], now=NOW, executor=executor)


def test_chunks_routed_as_tasks_give_the_crawl_db_of_one_chunk(generated, one_chunk, tmp_path, monkeypatch):
    executor = Recording()
    store, result = three_chunks(generated, tmp_path / "data", monkeypatch, executor)
    # On the stage's executor: dedup's scan of each bucket, the routing, the optimal schedule's
    # rate histogram of each bucket, the link DB's bucket merges, its host graph's parts and
    # their PageRank (a small graph: one task), the host DB's bucket merges, the crawl DB's.
    assert [name for name, _ in executor.calls] == ["dedup_scan", "route_chunks", "bucket_rate_histogram",
                                                    "merge_link_bucket", "build_host_part", "rank_whole_graph",
                                                    "route_host_file", "merge_host_bucket", "update_bucket"]
    assert dict(executor.calls)["route_chunks"] == 3 and dict(executor.calls)["update_bucket"] == 3
    assert dict(executor.calls)["bucket_rate_histogram"] == 3
    assert 1 <= dict(executor.calls)["dedup_scan"] <= 3  # a task per group of buckets (dedup.scan_groups)
    assert crawldb_rows(store) == crawldb_rows(one_chunk[0])
    rows = {row["url"]: row for row in crawldb_rows(store)}
    assert rows[SEEDS[0]]["status"] == "fetched" and rows[SEEDS[0]]["content_hash"] == "0" * 32  # the newest
    target = rows["http://h1.example/target"]  # two spellings in two chunks: the newest result
    assert target["status"] == "fetched" and target["content_hash"] == "b" * 32
    assert rows[SEEDS[2]]["status"] == "fetched"  # the listed result, not the inline "gone" of another spelling
    assert rows["http://h3.example/new"]["depth"] == 1  # the smallest depth of two chunks
    assert rows["http://h4.example/deep"]["depth"] == 2  # too deep in one chunk, kept from another
    assert rows["http://other.example/x"]["depth"] == 4
    assert not store.exists(store.segment_dir(generated[2]) / "update")  # the routed inputs are gone
    for name in ("update/results", "outlinks/new", "outlinks/known", "filter/max_depth", "outlinks/found"):
        assert result.counters[name] == one_chunk[1].counters[name], name
    assert result.counters["update/results"] == 6 and result.counters["outlinks/new"] == 3


def test_a_bucket_task_run_twice_commits_one_file(generated, one_chunk, tmp_path, monkeypatch):
    """Every task (routing and bucket) runs twice: the manifest names one delta per bucket, the
    other attempts' files are gone, and the crawl DB is the one of a run without retries."""
    store, _ = three_chunks(generated, tmp_path / "data", monkeypatch, Recording(repeat=2))
    manifest = store.manifest()
    folder = store.path("crawldb", manifest.version)
    deltas = [name for bucket in manifest.bucket_deltas for name in bucket]
    # At most one delta per bucket (none where the segment changed nothing), one name each.
    assert len(manifest.bucket_files) == 3 and len(deltas) >= 2 and len(set(deltas)) == len(deltas)
    assert all(len(bucket) <= 1 for bucket in manifest.bucket_deltas)
    assert [name.split("/")[1].split(".")[0] for name in deltas] == [
        f"delta-{b:05d}" for b, bucket in enumerate(manifest.bucket_deltas) if bucket]
    assert sorted(f"{manifest.version}/{path.name}" for path in store.list(folder, "*.parquet")) == sorted(deltas)
    assert set(store.read_json(folder / "_COMPLETE")["files"]) >= {name.split("/")[1] for name in deltas}
    assert crawldb_rows(store) == crawldb_rows(one_chunk[0])
    # The link DB's and the host DB's tasks too: the tables of a run without retries.
    assert table_rows(store, "linkdb") == table_rows(one_chunk[0], "linkdb") and table_rows(store, "linkdb")
    assert table_rows(store, "hostdb") == table_rows(one_chunk[0], "hostdb") and table_rows(store, "hostdb")


def table_rows(store, table: str) -> dict[str, list]:
    """Every file of a table's current version (link DB, host DB), by name, rows as read."""
    folder = store.path(table, store.manifest(table).version)
    return {path.name: pq.read_table(path).to_pylist() for path in store.list(folder, "*.parquet")}


def test_a_manifest_without_file_names_reads_the_plain_names():
    old = Manifest(version="v1", buckets=2, schema_version=2, written_at="", written_by="")
    assert "bucket_files" not in old.to_json()
    again = Manifest.from_json(old.to_json())
    assert again == old and again.bucket_file_name(1) == "bucket-00001.parquet"
    named = Manifest(version="v1", buckets=2, schema_version=2, written_at="", written_by="",
                     bucket_files=("bucket-00000.a.parquet", "bucket-00001.b.parquet"))
    assert Manifest.from_json(named.to_json()).bucket_file_name(1) == "bucket-00001.b.parquet"
