"""Columns renamed since files were written (issue 25: ``simhash`` held a 1-bit MinHash and
is now ``minhash``) read under their new names from stored files: a crawl DB written before
the rename is read by the stages' DuckDB sources, the views and ``crawl rebucket`` (which
writes the new name), and an old pages-feed file through the store. Each test shows first
that its files really carry the old name (the positive control of the migration)."""

from __future__ import annotations

import pyarrow as pa
import pytest
import pyarrow.compute as pc
import pyarrow.parquet as pq

import cycles
from cycles.commands.inject import inject
from cycles.commands.rebucket import rebucket
from cycles.config import Config
from cycles.storage.store import Store, utcnow
from cycles.tables import schema
from cycles.tables.crawldb import current_buckets, read_crawldb
from tests.conftest import write_seeds

HOSTS = [f"h{i}.example" for i in range(12)]


def old_crawldb(tmp_path) -> tuple[Store, Config, dict[str, int]]:
    """A crawl DB whose bucket files name the fingerprint column ``simhash``, with values."""
    store, config = Store(tmp_path / "data"), Config()
    config.db.buckets = 4
    inject(store, config, write_seeds(tmp_path / "seeds.txt", [f"http://{h}/" for h in HOSTS]))
    expected = {}
    _, buckets = current_buckets(store)
    for bucket in buckets:
        table = pq.read_table(bucket.base)
        prints = pa.array([1000 + HOSTS.index(h) for h in table["host"].to_pylist()], pa.uint64())
        expected.update(zip(table["url"].to_pylist(), prints.to_pylist()))
        table = table.set_column(table.schema.get_field_index("minhash"), "simhash", prints)
        pq.write_table(table, bucket.base, compression="zstd", write_page_checksum=True)
        assert "simhash" in pq.read_schema(bucket.base).names  # really the old name on disk
    return store, config, expected


def test_an_old_crawl_db_reads_its_fingerprints_as_minhash(tmp_path):
    store, _, expected = old_crawldb(tmp_path)
    rows = read_crawldb(store, ["url", "minhash"])  # the DuckDB source of the stages
    assert dict(zip(rows["url"].to_pylist(), rows["minhash"].to_pylist())) == expected
    view = cycles.open(store.uri).crawldb  # the views of crawl sql and cycles.open()
    assert dict(view.select("url, minhash").fetchall()) == expected
    assert "simhash" not in view.columns


def test_rebucket_rewrites_an_old_crawl_db_with_the_new_name(tmp_path):
    store, config, expected = old_crawldb(tmp_path)
    result = rebucket(store, config, 3)
    assert result.changed and result.rows == len(HOSTS)
    _, buckets = current_buckets(store)
    for bucket in buckets:
        assert "minhash" in pq.read_schema(bucket.base).names
        assert "simhash" not in pq.read_schema(bucket.base).names
    rows = read_crawldb(store, ["url", "minhash"])
    assert dict(zip(rows["url"].to_pylist(), rows["minhash"].to_pylist())) == expected


def test_an_old_pages_file_reads_through_the_store(tmp_path):
    store = Store(tmp_path / "data")
    row = {name: None for name in schema.PAGES.names} | {
        "url": "http://a.example/", "host": "a.example", "fetched_at": utcnow(), "status": "fetched",
        "content_hash": "c0ffee", "segment": "20260101T000000000000Z-abcdef", "minhash": 42}
    table = pa.Table.from_pylist([row], schema.PAGES)
    old = table.rename_columns(["simhash" if n == "minhash" else n for n in table.column_names])
    path = store.path("pages", "old.parquet")
    store.write_table(path, old, old.schema)
    assert "minhash" not in pq.read_schema(path).names  # the old name on disk
    read = store.read_table(path, schema.PAGES)
    assert read.schema == schema.PAGES and read["minhash"].to_pylist() == [42]
    assert store.read_table(path, columns=["url", "minhash"])["minhash"].to_pylist() == [42]
    assert pc.sum(store.read_tables([path, path], schema.PAGES, ["minhash"])["minhash"]).as_py() == 84


@pytest.mark.web  # moto's S3 server
def test_old_and_new_files_on_s3_read_under_the_new_name(s3_env):
    """On S3 the stages read through a pyarrow dataset, which takes its first file's schema.
    Files written before and after the rename, in either order, read every value under the
    new name. The positive control: the plain dataset reads the other file's column as nulls."""
    import uuid

    import duckdb

    from tests.support.s3 import BUCKET

    store = Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/data")
    new = pa.table({"url": ["http://a.example/1"], "minhash": pa.array([7], pa.uint64())})
    old = pa.table({"url": ["http://a.example/2"], "simhash": pa.array([9], pa.uint64())})
    paths = [store.path("t", "new.parquet"), store.path("t", "old.parquet")]
    for path, table in zip(paths, (new, old)):
        store.write_table(path, table, table.schema)
    con = duckdb.connect()
    plain = store.dataset(paths).to_table()
    assert "simhash" not in plain.column_names and plain["minhash"].to_pylist() == [7, None]  # the control
    for order in (paths, paths[::-1]):
        rows = con.sql(f"SELECT url, minhash FROM {store.duckdb_source(con, order)} ORDER BY url").fetchall()
        assert rows == [("http://a.example/1", 7), ("http://a.example/2", 9)]
        assert "simhash" not in con.sql(f"SELECT * FROM {store.duckdb_source(con, order)}").columns
