"""robots.txt as the fetcher applies it (RFC 9309), judged by what the server saw: status
classes, a redirected robots.txt, Crawl-delay, a BOM, the 24 h cache, errors asked again
soon, and the 30-day way out of an outage. Spacing across two cycles is checked here too.

Two fetches of hand-made segments run back to back on one store; the second reads the
host state the first wrote (a fetched, not yet updated segment counts, as in production).
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from cycles import schema
from cycles.store import Store, new_id, utcnow
from cycles.testweb.harness import TestWeb
from tests.fetch.test_fetch_support import CLOCK_SLACK_S, assert_polite, fast_config, fetch, host_requests, paths, results

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
    store.write_marker(segment, "generated", {"segment": segment})
    store.write_marker(segment, "fetched", {"segment": segment})


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
    from cycles.fetch.hoststate import load_host_state
    from cycles.update.hostdb import merge_hostdb

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
    store.write_marker(segment, "generated", {"segment": segment})
    merge_hostdb(store, Config(), store.segments()[0])
    merge_hostdb(store, Config(), segment)
    for segment_id in store.segments():  # only the host DB remains as a source
        store.write_marker(segment_id, "updated", {"segment": segment_id})
    state = load_host_state(store, {"h.test"})["h.test"]
    assert state["robots_status"] is None and state["robots_body"] is None
    assert state["robots_fetched_at"] == new and state["robots_errors_since"] == new
    assert state["robots_good_status"] == 200 and state["robots_good_body"] == body
