"""Fetch across whole cycles (inject → generate → fetch → update), on a few URLs of the odd
host: a redirect loop is requested a bounded number of times, and a page with an ETag is
revalidated with If-None-Match, answered 304 and stored as not_modified without a body."""

from __future__ import annotations

import pytest
from warcio.archiveiterator import ArchiveIterator

from cycles.commands.cycle import run_cycles
from cycles.commands.inject import inject
from cycles.storage.store import Store
from testweb.harness import TestWeb
from tests.conftest import write_seeds
from tests.support.fetching import assert_polite, crawldb_rows, fast_config, host_requests, make_all_due, results

pytestmark = pytest.mark.web



@pytest.fixture(scope="module")
def cycles(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cycles")
    with TestWeb(hosts=0, pages=2, page_bytes=2000, special=True, max_seconds=120) as web:
        store = Store(tmp / "data")
        config = fast_config(web, processes=2)
        # Keep the crawl to these URLs: the odd host links to slow and huge paths.
        config.urls.include = {"odd.web.test": [r"/(p/0\.html|loop/[ab]|redirect)$"]}
        seeds = [web.url("odd", t) for t in ("/p/0.html", "/loop/a", "/redirect")]
        inject(store, config, write_seeds(tmp / "seeds.txt", seeds))
        log = list(run_cycles(store, config, cycles=6))
        before_revisit = len(web.requests())
        db_before = crawldb_rows(store)
        make_all_due(store)
        log += list(run_cycles(store, config, cycles=1))
        requests = web.requests()
        yield {"web": web, "store": store, "log": log, "requests": requests,
               "first": requests[:before_revisit], "revisit": requests[before_revisit:],
               "db_before": db_before, "db": crawldb_rows(store)}


def test_the_crawl_stopped_by_itself(cycles):
    assert any("stopping" in line for line in cycles["log"]), cycles["log"]


def test_a_redirect_loop_is_requested_once_per_url_until_due_again(cycles):
    loop = [r["path"] for r in host_requests(cycles["first"], "odd") if r["path"].startswith("/loop/")]
    assert sorted(loop) == ["/loop/a", "/loop/b"], loop
    web, db = cycles["web"], cycles["db_before"]
    a, b = web.url("odd", "/loop/a"), web.url("odd", "/loop/b")
    assert db[a]["status"] == db[b]["status"] == "redirected"
    assert db[a]["redirect_to"] == b and db[b]["redirect_to"] == a
    # Made due again, each loop URL costs one more request, no more.
    again = [r["path"] for r in host_requests(cycles["revisit"], "odd") if r["path"].startswith("/loop/")]
    assert sorted(again) == ["/loop/a", "/loop/b"], again


def test_a_redirect_is_recorded_and_its_target_not_fetched_twice(cycles):
    first = [r["path"] for r in host_requests(cycles["first"], "odd")]
    assert first.count("/redirect") == 1 and first.count("/p/0.html") == 1
    assert cycles["db_before"][cycles["web"].url("odd", "/redirect")]["redirect_to"] == cycles["web"].url("odd", "/p/0.html")


def test_a_page_with_an_etag_is_revalidated_and_304_is_a_revisit_record(cycles):
    web, store = cycles["web"], cycles["store"]
    url = web.url("odd", "/p/0.html")
    etag = cycles["db_before"][url]["etag"]
    assert etag
    (request,) = [r for r in host_requests(cycles["revisit"], "odd") if r["path"] == "/p/0.html"]
    assert request["if_none_match"] == etag and request["status"] == 304 and request["bytes_sent"] == 0
    segment = store.segments()[-1]
    row = results(store, segment)[url]
    assert row["outcome"] == "not_modified" and row["http_status"] == 304
    assert row["body_bytes"] == 0
    # Archived as a revisit record (server-not-modified), no response record with a body.
    with open(store.segment_dir(segment) / row["warc_file"], "rb") as fh:
        fh.seek(row["warc_offset"])
        record = next(iter(ArchiveIterator(fh)))
        assert record.rec_type == "revisit" and record.content_stream().read() == b""
    assert record.rec_headers.get_header("WARC-Profile").endswith("/revisit/server-not-modified")
    for path in (store.segment_dir(segment) / "warc").glob("*.warc.gz"):
        with open(path, "rb") as fh:
            types = {r.rec_type for r in ArchiveIterator(fh) if r.rec_headers.get_header("WARC-Target-URI") == url}
        assert "response" not in types
    assert cycles["db"][url]["status"] == "not_modified" and cycles["db"][url]["etag"] == etag


def test_cycles_kept_the_host_spacing(cycles):
    assert assert_polite(cycles["requests"]) >= 6
