"""A redirect whose target the crawl DB holds as fetched and not yet due is recorded, and
the target is not fetched again inline (``fetch/redirect_known``). Judged by what the test
web's server saw, and, for the lookup itself, on a hand-made crawl DB."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from cycles.tables import schema
from cycles.fetch.fetch import fetch_segment
from cycles.fetch.known import known_urls
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.storage.store import Manifest, Store, utcnow
from testweb.harness import TestWeb
from cycles.update.update import update_segment
from cycles.urls import host_hash
from tests.conftest import write_seeds
from tests.support.fetching import assert_polite, crawldb_rows, fast_config, paths, results

ODD = "odd.web.test"


@pytest.mark.web
def test_a_redirect_to_a_page_fetched_last_cycle_does_not_fetch_it_again(tmp_path):
    with TestWeb(hosts=0, pages=2, page_bytes=2000, special=True, max_seconds=120) as web:
        store = Store(tmp_path / "data")
        config = fast_config(web)
        config.urls.include = {ODD: [r"/(p/0\.html|redirect)$"]}
        page, redirect = web.url("odd", "/p/0.html"), web.url("odd", "/redirect")
        inject(store, config, write_seeds(tmp_path / "seeds.txt", [page]))
        first = generate(store, config).segment
        fetch_segment(store, config, first)
        update_segment(store, config, first)
        fetched_before = crawldb_rows(store)[page]
        assert fetched_before["status"] == "fetched"

        inject(store, config, write_seeds(tmp_path / "more.txt", [redirect]))
        second = generate(store, config).segment
        result = fetch_segment(store, config, second)
        update_segment(store, config, second)
        requests = web.requests()
    asked = paths(requests, "odd")
    assert asked.count("/p/0.html") == 1 and asked.count("/redirect") == 1, asked
    rows = results(store, second)
    assert set(rows) == {redirect}
    assert (rows[redirect]["outcome"], rows[redirect]["redirect_to"]) == ("redirect", page)
    assert result.counters["fetch/redirect_known"] == 1
    db = crawldb_rows(store)
    assert (db[redirect]["status"], db[redirect]["redirect_to"]) == ("redirected", page)
    # The target stays as it was.
    assert {k: db[page][k] for k in ("status", "last_fetched", "next_fetch", "fetch_count")} == \
        {k: fetched_before[k] for k in ("status", "last_fetched", "next_fetch", "fetch_count")}
    assert_polite(requests)


T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def crawldb_row(url: str, host: str, last_fetched, next_fetch) -> dict:
    row = {name: None for name in schema.CRAWLDB.names}
    row.update(url=url, host=host, host_hash=host_hash(host), pattern_hash=0, status="fetched",
               first_seen=T0, last_fetched=last_fetched, next_fetch=next_fetch, fetch_interval_s=3600, retries=0,
               fetch_count=1, change_count=0, score=1.0, depth=0)
    return row


def test_the_lookup_names_only_fetched_urls_of_the_host_that_are_not_due(store):
    """One host's URLs, next to another host of the same bucket, in row groups of two rows."""
    host, other = "a.test", next(f"b{i}.test" for i in range(100) if host_hash(f"b{i}.test") % 2 == host_hash("a.test") % 2)
    later, earlier = T0 + dt.timedelta(hours=1), T0 - dt.timedelta(hours=1)
    rows = [crawldb_row("http://a.test/fetched-not-due", host, T0, later),
            crawldb_row("http://a.test/fetched-due", host, T0, earlier),
            crawldb_row("http://a.test/unfetched", host, None, later),
            crawldb_row("http://a.test/gone-not-due", host, T0, later) | {"status": "gone", "http_status": 404},
            crawldb_row(f"http://{other}/fetched-not-due", other, T0, later)]
    rows.sort(key=lambda r: (r["host"], r["url"]))
    version, folder = store.new_version_dir("crawldb")
    bucket = host_hash(host) % 2
    import pyarrow.parquet as pq
    for b in range(2):
        mine = [r for r in rows if r["host_hash"] % 2 == b]
        pq.write_table(pa.Table.from_pylist(mine, schema=schema.CRAWLDB), store.bucket_file(folder, b), row_group_size=2)
    manifest = Manifest(version=version, buckets=2, schema_version=schema.SCHEMA_VERSION,
                        written_at=utcnow().isoformat(), written_by="test")
    assert bucket == host_hash(other) % 2
    assert known_urls(store, manifest, host, T0)[0] == {"http://a.test/fetched-not-due", "http://a.test/gone-not-due"}
    assert known_urls(store, manifest, "nobody.test", T0) == (set(), set())
    # Due (what generate lists, fetched or not): a redirect leaves it to generate.
    assert known_urls(store, manifest, host, T0)[1] == {"http://a.test/fetched-due"}
