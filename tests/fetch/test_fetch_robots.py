"""robots.txt as the fetcher applies it (RFC 9309), judged by what the server saw: status
classes, a redirected robots.txt, Crawl-delay, a BOM, the 24 h cache and its revalidation
by conditional GET, errors asked again soon, and the 30-day way out of an outage. Spacing across two cycles is checked here too.

Two fetches of hand-made segments run back to back on one store; the second reads the
host state the first wrote (a fetched, not yet updated segment counts, as in production).
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cycles.tables.segment import write_stage_marker
from cycles import clock
from cycles.tables import schema
from cycles.storage.store import Store, new_id, utcnow
from testweb.harness import TestWeb
from tests.support.fetching import CLOCK_SLACK_S, assert_polite, fast_config, fetch, host_requests, paths, results

pytestmark = pytest.mark.web

DELAYS = {"robots-delay.web.test": 2.0}

FIRST = {
    "robots-503": ["/", "/private/a.html"],
    "robots-404": ["/", "/private/a.html"],
    "robots-redirect": ["/", "/hidden/a.html", "/p/0.html"],
    "robots-delay": ["/", "/p/0.html", "/p/1.html"],
    "robots-bom": ["/", "/secret/a.html", "/p/0.html"],
}
SECOND = {
    "robots-503": ["/p/0.html"],
    "robots-404": ["/p/0.html"],
    "robots-redirect": ["/p/1.html"],
    "robots-delay": ["/p/2.html"],
    "robots-bom": ["/p/1.html"],
}


@pytest.fixture(scope="module")
def two_cycles(tmp_path_factory):
    with TestWeb(hosts=0, pages=2, page_bytes=2000, special=True, max_seconds=120) as web:
        store = Store(tmp_path_factory.mktemp("robots") / "data")
        # An unreachable robots.txt is asked again after 1 s (the default is an hour).
        config = fast_config(web, robots_error_cache_s=1)
        first = [web.url(h, p) for h, ps in FIRST.items() for p in ps]
        seg1, res1 = fetch(store, config, first)
        split = web.requests()[-1]["t_end"]
        second = [web.url(h, p) for h, ps in SECOND.items() for p in ps]
        seg2, res2 = fetch(store, config, second)
        requests = web.requests()
        yield {"web": web, "store": store, "requests": requests, "split": split,
               "cycle1": [r for r in requests if r["t_start"] <= split],
               "cycle2": [r for r in requests if r["t_start"] > split],
               "rows1": results(store, seg1), "rows2": results(store, seg2), "res1": res1, "res2": res2}


def test_503_robots_means_no_page_request_and_urls_deferred(two_cycles):
    assert paths(two_cycles["cycle1"], "robots-503") == ["/robots.txt"]
    web = two_cycles["web"]
    for p in FIRST["robots-503"]:
        row = two_cycles["rows1"][web.url("robots-503", p)]
        assert row["outcome"] == "deferred" and "unreachable" in row["error"]


def test_an_unreachable_robots_txt_is_asked_again_next_cycle_not_cached_for_a_day(two_cycles):
    assert paths(two_cycles["cycle2"], "robots-503") == ["/robots.txt"]
    assert two_cycles["rows2"][two_cycles["web"].url("robots-503", "/p/0.html")]["outcome"] == "deferred"


def test_404_robots_means_everything_may_be_fetched(two_cycles):
    assert paths(two_cycles["cycle1"], "robots-404") == ["/robots.txt", "/", "/private/a.html"]


def test_a_redirected_robots_txt_is_followed_and_obeyed(two_cycles):
    asked = host_requests(two_cycles["cycle1"], "robots-redirect")
    assert [r["path"] for r in asked] == ["/robots.txt", "/robots-real.txt", "/", "/p/0.html"]
    # The redirect hop went through the host's slot: a full delay between the two.
    assert asked[1]["t_start"] - asked[0]["t_end"] >= 1.0 - CLOCK_SLACK_S
    row = two_cycles["rows1"][two_cycles["web"].url("robots-redirect", "/hidden/a.html")]
    assert row["outcome"] == "robots_denied"


def test_crawl_delay_is_kept(two_cycles):
    asked = host_requests(two_cycles["requests"], "robots-delay")
    assert [r["path"] for r in asked] == ["/robots.txt", "/", "/p/0.html", "/p/1.html", "/p/2.html"]
    gaps = [b["t_start"] - a["t_end"] for a, b in zip(asked, asked[1:])]
    assert min(gaps) >= 2.0 - CLOCK_SLACK_S, gaps


def test_a_robots_txt_with_a_byte_order_mark_is_obeyed(two_cycles):
    assert "/secret/a.html" not in paths(two_cycles["requests"], "robots-bom")
    assert two_cycles["rows1"][two_cycles["web"].url("robots-bom", "/secret/a.html")]["outcome"] == "robots_denied"
    assert two_cycles["rows1"][two_cycles["web"].url("robots-bom", "/p/0.html")]["outcome"] == "ok"


def test_a_good_robots_txt_is_cached_across_cycles(two_cycles):
    for host in ("robots-404", "robots-redirect", "robots-delay", "robots-bom"):
        asked = paths(two_cycles["cycle2"], host)
        assert asked == [SECOND[host][0]], (host, asked)
    assert two_cycles["res2"].counters["robots/cached"] == 4


def test_spacing_holds_across_the_cycle_boundary(two_cycles):
    """The first request of cycle 2 waits the host's delay after cycle 1's last response
    (the host state is persisted, and a new process maps it onto its own clock)."""
    for host in FIRST:
        last = host_requests(two_cycles["cycle1"], host)[-1]
        first = host_requests(two_cycles["cycle2"], host)[0]
        need = DELAYS.get(f"{host}.web.test", 1.0)
        assert first["t_start"] - last["t_end"] >= need - CLOCK_SLACK_S, host
    assert_polite(two_cycles["requests"], delays=DELAYS)


def seed_host_state(store: Store, host: str, **values) -> None:
    """A fetched segment holding only host state, as an earlier cycle would have left it."""
    segment = new_id()
    row = {name: None for name in schema.HOSTS.names}
    row.update(host=host, **values)
    store.write_table(store.segment_dir(segment, must_exist=False) / "hosts" / "part-00000.parquet",
                      pa.Table.from_pylist([row], schema=schema.HOSTS), schema.HOSTS)
    write_stage_marker(store, segment, "generated", {"segment": segment})
    write_stage_marker(store, segment, "fetched", {"segment": segment})


@pytest.mark.parametrize("good_copy", [True, False], ids=["last-good-copy", "no-copy-allow-all"])
def test_robots_unreachable_for_30_days_falls_back(tmp_path, good_copy):
    """RFC 9309 §2.3.1.4: after a long outage, the last good copy is obeyed (or, with none,
    everything is allowed) instead of disallowing the host for ever."""
    now = utcnow()
    with TestWeb(hosts=0, pages=2, page_bytes=2000, special=True, max_seconds=60) as web:
        store = Store(tmp_path / "data")
        host = "robots-503.web.test"
        good = dict(robots_good_status=200, robots_good_body=b"User-agent: *\nDisallow: /private/\n",
                    robots_good_fetched_at=now - dt.timedelta(days=31)) if good_copy else {}
        seed_host_state(store, host, robots_status=503, robots_fetched_at=now - dt.timedelta(hours=2),
                        robots_errors_since=now - dt.timedelta(days=31), **good)
        urls = [web.url("robots-503", p) for p in ("/", "/private/a.html")]
        segment, result = fetch(store, fast_config(web), urls)
        requests = web.requests()
    asked = paths(requests, "robots-503")
    rows = results(store, segment)
    if good_copy:
        assert asked == ["/robots.txt", "/"]
        assert rows[urls[1]]["outcome"] == "robots_denied"
        assert result.counters["robots/fallback_last_good"] == 1
    else:
        assert asked == ["/robots.txt", "/", "/private/a.html"]
        assert result.counters["robots/fallback_allow"] == 1
    assert rows[urls[0]]["outcome"] == "ok"
    assert_polite(requests)


def test_robots_unreachable_for_less_than_30_days_still_disallows(tmp_path):
    now = utcnow()
    with TestWeb(hosts=0, pages=2, page_bytes=2000, special=True, max_seconds=60) as web:
        store = Store(tmp_path / "data")
        seed_host_state(store, "robots-503.web.test", robots_status=503,
                        robots_fetched_at=now - dt.timedelta(hours=2), robots_errors_since=now - dt.timedelta(days=29),
                        robots_good_status=200, robots_good_body=b"User-agent: *\nDisallow:\n",
                        robots_good_fetched_at=now - dt.timedelta(days=29))
        segment, _ = fetch(store, fast_config(web), [web.url("robots-503", "/")])
        requests = web.requests()
    assert paths(requests, "robots-503") == ["/robots.txt"]
    assert results(store, segment)[web.url("robots-503", "/")]["outcome"] == "deferred"


def test_hostdb_merge_keeps_the_newest_robots_answer_even_when_it_is_an_error(store):
    """update's merge_hostdb: a newer network error (status NULL) must not inherit the older
    200's status and body (DuckDB's arg_max skips NULLs), and the good copy survives it."""
    from cycles.config import Config
    from cycles.tables.hostdb import load_host_state
    from cycles.tables.hostdb import merge_hostdb

    now = utcnow()
    old, new = now - dt.timedelta(hours=30), now - dt.timedelta(hours=1)
    body = b"User-agent: *\nDisallow: /x/\n"
    seed_host_state(store, "h.test", robots_status=200, robots_body=body, robots_fetched_at=old,
                    robots_good_status=200, robots_good_body=body, robots_good_fetched_at=old)
    segment = new_id()
    row = {name: None for name in schema.HOSTS.names}
    row.update(host="h.test", robots_status=None, robots_fetched_at=new, robots_errors_since=new,
               robots_good_status=200, robots_good_body=body, robots_good_fetched_at=old)
    store.write_table(store.segment_dir(segment, must_exist=False) / "hosts" / "part-00000.parquet",
                      pa.Table.from_pylist([row], schema=schema.HOSTS), schema.HOSTS)
    write_stage_marker(store, segment, "generated", {"segment": segment})
    merge_hostdb(store, Config(), store.segments()[0])
    merge_hostdb(store, Config(), segment)
    for segment_id in store.segments():  # only the host DB remains as a source
        write_stage_marker(store, segment_id, "updated", {"segment": segment_id})
    state = load_host_state(store, {"h.test"})["h.test"]
    assert state["robots_status"] is None and state["robots_body"] is None
    assert state["robots_fetched_at"] == new and state["robots_errors_since"] == new
    assert state["robots_good_status"] == 200 and state["robots_good_body"] == body


def expire_robots_cache(web, monkeypatch, config) -> float:
    """Move the crawler's clock and the web's virtual clock past the robots.txt cache lifetime."""
    offset = config.fetch.robots_cache_s + 3600.0
    monkeypatch.setenv(clock.OFFSET_ENV, repr(offset))
    web.set_clock(offset=offset)
    return offset


def hostdb_state(store: Store, host: str) -> dict:
    """The host DB after update's merge of every segment so far (the only source left)."""
    from cycles.config import Config
    from cycles.tables.hostdb import load_host_state
    from cycles.tables.hostdb import merge_hostdb

    for segment in store.segments():
        merge_hostdb(store, Config(), segment)
        write_stage_marker(store, segment, "updated", {"segment": segment})
    return load_host_state(store, {host})[host]


def test_an_expired_robots_txt_is_revalidated_with_a_conditional_get(tmp_path, monkeypatch):
    """RFC 9309 §2.4 caching: a day later the copy is asked about with its validators; the
    304 keeps its rules (the disallowed path is still not requested) and makes it fresh."""
    host = "robots-disallow.web.test"
    with TestWeb(hosts=0, pages=2, page_bytes=2000, special=True, max_seconds=120) as web:
        store = Store(tmp_path / "data")
        config = fast_config(web)
        _, res1 = fetch(store, config, [web.url("robots-disallow", "/")])
        before = hostdb_state(store, host)
        offset = expire_robots_cache(web, monkeypatch, config)
        urls = [web.url("robots-disallow", p) for p in ("/p/0.html", "/private/a.html")]
        segment, res2 = fetch(store, config, urls)
        requests = web.requests()
        after = hostdb_state(store, host)
    robots = [r for r in host_requests(requests, host) if r["path"] == "/robots.txt"]
    assert [r["status"] for r in robots] == [200, 304]
    assert robots[0]["if_none_match"] is None and robots[0]["if_modified_since"] is None
    assert before["robots_etag"] and before["robots_last_modified"]
    assert robots[1]["if_none_match"] == before["robots_etag"]
    assert robots[1]["if_modified_since"] == before["robots_last_modified"]
    assert res1.counters["robots/not_modified"] == 0 and res2.counters["robots/not_modified"] == 1
    assert "/private/a.html" not in paths(requests, host)
    rows = results(store, segment)
    assert rows[urls[0]]["outcome"] == "ok" and rows[urls[1]]["outcome"] == "robots_denied"
    # The host DB: same copy, fetched-at moved by the day that passed, validators kept.
    moved = (after["robots_fetched_at"] - before["robots_fetched_at"]).total_seconds()
    assert moved >= offset
    assert after["robots_body"] == before["robots_body"] and after["robots_status"] == 200
    assert after["robots_etag"] == before["robots_etag"]
    assert after["robots_good_fetched_at"] == after["robots_fetched_at"]
    assert_polite(requests)


def test_a_changed_robots_txt_answers_200_and_replaces_the_expired_copy(tmp_path):
    """The stored copy (disallowing /p/) no longer matches the server's: its 200 replaces it."""
    host = "robots-disallow.web.test"
    stale = utcnow() - dt.timedelta(hours=25)
    old_body = b"User-agent: *\nDisallow: /p/\n"
    with TestWeb(hosts=0, pages=2, page_bytes=2000, special=True, max_seconds=60) as web:
        store = Store(tmp_path / "data")
        seed_host_state(store, host, robots_status=200, robots_body=old_body, robots_fetched_at=stale,
                        robots_etag='"old"', robots_good_status=200, robots_good_body=old_body,
                        robots_good_fetched_at=stale)
        urls = [web.url("robots-disallow", p) for p in ("/p/0.html", "/private/a.html")]
        segment, result = fetch(store, fast_config(web), urls)
        requests = web.requests()
        state = hostdb_state(store, host)
    robots = [r for r in host_requests(requests, host) if r["path"] == "/robots.txt"]
    assert [(r["status"], r["if_none_match"]) for r in robots] == [(200, '"old"')]
    assert result.counters["robots/revalidate"] == 1 and result.counters["robots/not_modified"] == 0
    rows = results(store, segment)
    assert rows[urls[0]]["outcome"] == "ok" and rows[urls[1]]["outcome"] == "robots_denied"
    assert state["robots_body"] == b"User-agent: *\nDisallow: /private/\n"
    assert state["robots_etag"] not in (None, '"old"') and state["robots_fetched_at"] > stale


def test_a_robots_txt_without_validators_is_fetched_again_unconditionally(tmp_path):
    host = "robots-disallow.web.test"
    stale = utcnow() - dt.timedelta(hours=25)
    with TestWeb(hosts=0, pages=2, page_bytes=2000, special=True, max_seconds=60) as web:
        store = Store(tmp_path / "data")
        seed_host_state(store, host, robots_status=200, robots_body=b"User-agent: *\nDisallow:\n",
                        robots_fetched_at=stale)
        _, result = fetch(store, fast_config(web), [web.url("robots-disallow", "/")])
        requests = web.requests()
    robots = [r for r in host_requests(requests, host) if r["path"] == "/robots.txt"]
    assert [(r["status"], r["if_none_match"], r["if_modified_since"]) for r in robots] == [(200, None, None)]
    assert result.counters["robots/revalidate"] == 0


def test_host_files_written_before_the_validator_columns_are_read_with_them_null(tmp_path):
    from cycles.tables.hostdb import read_host_file

    old_schema = pa.schema([f for f in schema.HOSTS if f.name not in ("robots_etag", "robots_last_modified")])
    path = tmp_path / "hosts.parquet"
    row = {name: None for name in old_schema.names}
    row.update(host="h.test", robots_status=200, robots_body=b"User-agent: *\n")
    pq.write_table(pa.Table.from_pylist([row], schema=old_schema), path)
    [state] = read_host_file(path).to_pylist()
    assert state["robots_status"] == 200 and state["robots_etag"] is None and state["robots_last_modified"] is None


def test_a_cached_robots_error_defers_every_url_of_the_host(tmp_path):
    """A robots.txt error younger than fetch.robots_error_cache_s is obeyed from the host DB
    (disallow all for now): the host is not asked at all, and each of its URLs gets a
    ``deferred`` row (none is silently left without a row)."""
    now = utcnow()
    with TestWeb(hosts=0, pages=2, page_bytes=2000, special=True, max_seconds=60) as web:
        store = Store(tmp_path / "data")
        seed_host_state(store, "robots-503.web.test", robots_status=503,
                        robots_fetched_at=now - dt.timedelta(minutes=10),
                        robots_errors_since=now - dt.timedelta(minutes=10))
        urls = [web.url("robots-503", p) for p in ("/", "/a.html")]
        segment, result = fetch(store, fast_config(web), urls)
        requests = web.requests()
    assert paths(requests, "robots-503") == []
    assert result.counters["robots/cached_error"] == 1
    rows = results(store, segment)
    assert {url: rows[url]["outcome"] for url in urls if url in rows} == {url: "deferred" for url in urls}
