"""The crawl DB's invariants hold where its buckets are written: one row per URL, every
row in the bucket of its host, with its host's hash. A bucket breaking one is never
installed; the joins that once broke them (a host demoted twice, a URL marked twice, a URL
fetched twice) no longer do.
"""

from __future__ import annotations

import datetime as dt
import pyarrow as pa
import pytest

from cycles.tables.segment import write_stage_marker
from cycles.tables import schema
from cycles.config import Config
from cycles.tables.crawldb import current_bucket_files, current_buckets, read_bucket_rows, read_crawldb, replace_crawldb
from cycles.errors import StageError
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.storage.store import Store, utcnow
from cycles.update import update as update_module
from cycles.update.dedup import DedupResult
from cycles.update.update import update_segment
from cycles.urls import host_hash

HOSTS = ["a.example", "b.example", "c.example"]
URLS = [f"http://{h}/p{i}" for h in HOSTS for i in range(4)]


@pytest.fixture
def config() -> Config:
    config = Config()
    config.db.buckets = 2
    return config


def crawldb_rows(store: Store) -> list[dict]:
    return read_crawldb(store).to_pylist()  # bases and deltas merged: one row per URL


def injected(store: Store, config: Config, tmp_path) -> None:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\n".join(URLS) + "\n")
    inject(store, config, seeds)


def fetched_segment(store: Store, config: Config, results: list[dict]) -> str:
    """Generate a segment and write ``results`` as its fetch output (no outlinks)."""
    segment = generate(store, config).segment
    folder = store.segment_dir(segment)
    full = [{**{n: None for n in schema.FETCHED.names}, **r} for r in results]
    store.write_table(folder / "fetched" / "part-00000-c000001.parquet",
                      pa.Table.from_pylist(full, schema=schema.FETCHED), schema.FETCHED)
    store.write_table(folder / "outlinks" / "part-00000-c000001.parquet",
                      schema.OUTLINKS.empty_table(), schema.OUTLINKS)
    write_stage_marker(store, segment, "fetched", {"segment": segment})
    return segment


def ok(url: str, at=None, content="c") -> dict:
    return {"url": url, "host": url.split("/")[2], "outcome": "ok", "http_status": 200,
            "fetched_at": at or utcnow(), "content_hash": content * 32, "minhash": 7}


def with_dedup(monkeypatch, result: DedupResult) -> None:
    monkeypatch.setattr(update_module, "find_segment_duplicates", lambda *args, **kwargs: result)


def no_marks() -> pa.Table:
    return pa.table({"url": pa.array([], pa.string()), "canonical": pa.array([], pa.string()),
                     "kind": pa.array([], pa.string())})


def assert_one_row_per_url(rows: list[dict]) -> None:
    urls = [r["url"] for r in rows]
    assert len(urls) == len(set(urls)), sorted(u for u in urls if urls.count(u) > 1)


def test_a_host_both_mirror_and_duplicate_heavy_keeps_one_row_per_url(store, config, tmp_path, monkeypatch):
    injected(store, config, tmp_path)
    with_dedup(monkeypatch, DedupResult(no_marks(), low_priority_hosts=["a.example"],
                                        mirrors={"a.example": "b.example"}))
    segment = fetched_segment(store, config, [ok(URLS[0])])
    update_segment(store, config, segment)
    rows = crawldb_rows(store)
    assert_one_row_per_url(rows)
    assert len(rows) == len(URLS)
    # The smaller factor applies, once: mirror 0.1 < dup_host_score_factor.
    factor = min(0.1, config.update.dup_host_score_factor)
    demoted = [r for r in rows if r["host"] == "a.example" and r["status"] == "unfetched"]
    assert demoted and all(r["score"] == pytest.approx(factor) for r in demoted)


def test_a_url_marked_twice_keeps_one_row(store, config, tmp_path, monkeypatch):
    injected(store, config, tmp_path)
    marks = pa.table({"url": [URLS[1], URLS[1]], "canonical": [URLS[0], URLS[2]],
                      "kind": ["near_duplicate", "duplicate"]})
    with_dedup(monkeypatch, DedupResult(marks))
    segment = fetched_segment(store, config, [ok(URLS[0]), ok(URLS[1])])
    update_segment(store, config, segment)
    rows = crawldb_rows(store)
    assert_one_row_per_url(rows)
    marked = next(r for r in rows if r["url"] == URLS[1])
    assert marked["status"] == "duplicate" and marked["duplicate_of"] == URLS[2]


def test_a_url_fetched_twice_in_a_segment_keeps_one_row_and_the_newest_result(store, config, tmp_path):
    injected(store, config, tmp_path)
    now = utcnow()
    older = now - dt.timedelta(minutes=5)
    segment = fetched_segment(store, config, [ok(URLS[0], at=older, content="a"), ok(URLS[0], at=now, content="b")])
    update_segment(store, config, segment)
    rows = crawldb_rows(store)
    assert_one_row_per_url(rows)
    row = next(r for r in rows if r["url"] == URLS[0])
    assert row["content_hash"] == "b" * 32 and row["fetch_count"] == 1


def replace_with(store: Store, config: Config, sql_of_old) -> None:
    with store.lock("crawldb"):
        replace_crawldb(store, config, lambda con, old, bucket: sql_of_old(old, bucket), who="test")


def snapshot(store: Store) -> tuple[str, list[str], list[dict]]:
    return (store.path("crawldb", "CURRENT").read_text(), store.list_dirs(store.path("crawldb")),
            sorted(crawldb_rows(store), key=lambda r: r["url"]))


@pytest.mark.parametrize("bad_sql, expected", [
    # the old rows twice: the first URL of the bucket is written twice
    (lambda old, bucket: f"SELECT * FROM {old} UNION ALL SELECT * FROM {old}", "twice"),
    # a row whose host_hash lies in the other bucket
    (lambda old, bucket: f"SELECT * REPLACE (host_hash + 1 AS host_hash) FROM {old}", "of another bucket"),
    # a row whose host_hash is not its host's (but still of this bucket)
    (lambda old, bucket: f"SELECT * REPLACE (host_hash + 2 AS host_hash) FROM {old}", "not its host's"),
])
def test_a_bucket_breaking_an_invariant_is_never_installed(store, config, tmp_path, bad_sql, expected):
    injected(store, config, tmp_path)
    before = snapshot(store)
    with pytest.raises(StageError, match=expected) as failure:
        replace_with(store, config, bad_sql)
    message = str(failure.value)
    assert "bucket 0" in message and "bucket-00000.parquet" in message and "http://" in message
    assert "\n" not in message
    assert snapshot(store) == before  # CURRENT, the version folders and every row unchanged


def test_duplicates_across_two_batches_are_found(store, config, tmp_path):
    """The check compares each batch's first key with the previous batch's last one."""
    from cycles.tables.crawldb import checked_rows

    config.db.buckets = 1
    rows = [{"url": f"http://a.example/{i:06d}", "host": "a.example", "host_hash": host_hash("a.example")}
            for i in range(3)]
    keys = pa.schema([("url", pa.string()), ("host", pa.string()), ("host_hash", pa.uint64())])
    first = pa.RecordBatch.from_pylist(rows[:2], schema=keys)
    second = pa.RecordBatch.from_pylist(rows[1:2] + rows[2:], schema=keys)
    with pytest.raises(StageError, match="000001' twice"):
        list(checked_rows([first, second], "test", 0, 1))
    assert len(list(checked_rows([first, pa.RecordBatch.from_pylist(rows[2:], schema=keys)], "test", 0, 1))) == 2


def test_the_checks_host_hash_is_the_crawlers():
    from cycles.tables.crawldb import run_host_hashes
    from cycles.urls import host_hashes

    hosts = pa.array(["a.example", "www.b.example", "xn--bcher-kva.example", "[::1]", "127.0.0.1"])
    assert run_host_hashes(hosts).tolist() == host_hashes(hosts).to_pylist()


def test_rebucket_refuses_to_carry_a_url_written_twice(store, config, tmp_path):
    from cycles.commands.rebucket import rebucket

    injected(store, config, tmp_path)
    _, files = current_bucket_files(store)
    rows = store.read_table(files[0], schema.CRAWLDB)
    doubled = pa.concat_tables([rows, rows.slice(0, 1)]).sort_by([("host", "ascending"), ("url", "ascending")])
    store.write_table(files[0], doubled, schema.CRAWLDB)
    before = snapshot(store)
    with pytest.raises(StageError, match="twice"):
        rebucket(store, config, 4)
    assert snapshot(store) == before


def test_inject_writes_the_buckets_its_seeds_miss_empty_as_duckdb_would(store, tmp_path):
    """inject tells replace_crawldb which buckets its seeds fill (``adds_to``); every other
    bucket without old rows is written empty without DuckDB. The same crawl DB rewritten
    through DuckDB for every bucket (``adds_to=None``) has the same rows in each bucket."""
    config = Config()
    config.db.buckets = 8
    injected(store, config, tmp_path)  # three hosts: at most three of eight buckets hold rows
    buckets = [store.read_table(f) for f in current_bucket_files(store)[1]]
    assert [t.num_rows for t in buckets].count(0) >= 5
    assert sorted(r["url"] for r in crawldb_rows(store)) == sorted(URLS)
    # read_crawldb reads only the buckets with rows: the same table as every bucket read.
    every = pa.concat_tables([read_bucket_rows(store, b) for b in current_buckets(store)[1]])
    assert read_crawldb(store).equals(every) and every.num_rows == len(URLS)
    with store.lock("crawldb"):
        replace_crawldb(store, config, lambda con, old, bucket: f"SELECT * FROM {old}", who="test")
    rewritten = [store.read_table(f) for f in current_bucket_files(store)[1]]
    assert [t.schema for t in rewritten] == [t.schema for t in buckets] == [schema.CRAWLDB] * 8
    assert [t.sort_by("url").to_pylist() for t in rewritten] == [t.sort_by("url").to_pylist() for t in buckets]
