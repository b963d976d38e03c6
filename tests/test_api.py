"""``cycles.open()``: the crawl's tables as DuckDB relations, polars frames, and the pages
feed as record batches, on one small crawl of the test web shared by the module."""

from __future__ import annotations

import sys

import pyarrow as pa
import pytest

import cycles
from cycles.tables import schema
from cycles.config import Config
from cycles.errors import CrawlError, LockedError
from cycles.commands.inject import inject
from cycles.tables.pages import batches, consumer_lock, read_cursor
from cycles.commands.status import crawl_status, open_views
from cycles.storage.store import Store
from tests.conftest import write_seeds


@pytest.fixture(scope="module")
def crawled(small_crawl):
    return small_crawl


@pytest.mark.web
def test_tables_are_relations_with_the_counts_of_the_views(crawled):
    crawl = cycles.open(str(crawled.root))
    con = open_views(crawled, Config())
    for name in schema.VIEWS:
        relation = getattr(crawl, name)
        assert relation.columns == schema.VIEWS[name].names
        assert relation.count("*").fetchall() == con.sql(f"SELECT count(*) FROM {name}").fetchall(), name
    report = crawl_status(crawled, Config())
    assert crawl.crawldb.count("*").fetchall()[0][0] == report["urls"]
    by_status = dict(crawl.sql("SELECT status, count(*) FROM crawldb GROUP BY ALL").fetchall())
    assert by_status == report["by_status"]
    assert crawl.fetched.filter("outcome = 'ok'").count("*").fetchall()[0][0] > 0
    unverified = cycles.open(crawled.root, verify=False)  # the same views, without reading every page first
    assert unverified.crawldb.count("*").fetchall() == crawl.crawldb.count("*").fetchall()


@pytest.mark.web
def test_to_polars_and_arrow(crawled):
    polars = pytest.importorskip("polars")
    with cycles.open(crawled.root) as crawl:
        frame = crawl.to_polars("crawldb")
        assert isinstance(frame, polars.DataFrame) and frame.columns == schema.VIEWS["crawldb"].names
        assert frame.height == crawl.crawldb.count("*").fetchall()[0][0] == frame["url"].n_unique()
        hosts = crawl.to_polars("SELECT host, count(*) AS n FROM fetched GROUP BY host ORDER BY host")
        assert hosts["n"].sum() == crawl.fetched.count("*").fetchall()[0][0]
        assert crawl.arrow("pages").num_rows == crawl.pages.count("*").fetchall()[0][0]


def test_to_polars_without_polars_says_what_to_install(tmp_path, monkeypatch):
    store = Store(tmp_path / "data")
    inject(store, Config(), write_seeds(tmp_path / "seeds.txt", ["http://a.example/"]))
    monkeypatch.setitem(sys.modules, "polars", None)  # import polars now raises ImportError
    with pytest.raises(CrawlError, match="pip install polars"):
        cycles.open(store.root).to_polars("crawldb")


def test_open_without_a_crawl_db_is_an_error(tmp_path):
    with pytest.raises(CrawlError, match="no crawl DB"):
        cycles.open(tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()


@pytest.mark.web
def test_page_batches_read_the_feed_without_moving_a_cursor(crawled):
    crawl = cycles.open(crawled.root)
    every = list(crawl.page_batches())
    assert every and all(isinstance(b, pa.RecordBatch) and b.schema.names == schema.PAGES.names for b in every)
    assert sum(b.num_rows for b in every) == crawl.pages.count("*").fetchall()[0][0]
    # A consumer's unread pages: read twice, the cursor stays (not even registered).
    first = sum(b.num_rows for b in crawl.page_batches("reader"))
    assert first == sum(b.num_rows for b in crawl.page_batches("reader")) > 0
    assert read_cursor(crawled, "reader") == (None, False)


@pytest.mark.web
def test_page_batches_commit_moves_the_cursor_only_after_the_last_batch(crawled):
    crawl = cycles.open(crawled.root)
    names = batches(crawled)
    # Stopped early: nothing committed, and the consumer's lock is released.
    partial = crawl.page_batches("indexer", commit=True)
    next(partial)
    partial.close()
    assert read_cursor(crawled, "indexer") == (None, False)
    # One batch file at a time, to the end: the cursor is past exactly those.
    one = list(crawl.page_batches("indexer", commit=True, limit=1))
    assert read_cursor(crawled, "indexer")[0] == names[0]
    rest = list(crawl.page_batches("indexer", commit=True))
    assert read_cursor(crawled, "indexer")[0] == names[-1]
    assert sum(b.num_rows for b in one + rest) == crawl.pages.count("*").fetchall()[0][0]
    assert list(crawl.page_batches("indexer", commit=True)) == []


@pytest.mark.web
def test_page_batches_commit_holds_the_consumer_lock(crawled):
    crawl = cycles.open(crawled.root)
    reading = crawl.page_batches("locked", commit=True)
    next(reading)
    with pytest.raises(LockedError):
        with consumer_lock(crawled, "locked"):
            pass
    reading.close()
    with consumer_lock(crawled, "locked"):
        pass


def test_commit_needs_a_consumer(tmp_path):
    store = Store(tmp_path / "data")
    inject(store, Config(), write_seeds(tmp_path / "seeds.txt", ["http://a.example/"]))
    with pytest.raises(CrawlError, match="consumer"):
        list(cycles.open(store.root).page_batches(commit=True))
