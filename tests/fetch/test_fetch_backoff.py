"""Adaptive politeness, judged by the server's clock: Retry-After windows are kept, a host
that keeps failing is set aside with its URLs deferred (not failed), and a slow host is
given a longer delay."""

from __future__ import annotations

import email.utils

import pytest

from cycles.storage.store import Store
from cycles.fetch.politeness import retry_after_s
from testweb.harness import TestWeb
from tests.support.fetching import CLOCK_SLACK_S, assert_polite, fast_config, fetch, host_requests, results

pytestmark = pytest.mark.web


def test_retry_after_delta_seconds_and_http_date():
    now = 1_700_000_000.0
    assert retry_after_s("120", now) == 120.0
    assert retry_after_s(" 7 ", now) == 7.0
    assert retry_after_s(email.utils.formatdate(now + 90, usegmt=True), now) == pytest.approx(90.0)
    # RFC 850 and asctime forms are HTTP-dates too (RFC 9110 §5.6.7).
    assert retry_after_s("Tuesday, 14-Nov-23 22:15:00 GMT", now) == pytest.approx(100.0)
    assert retry_after_s("Tue Nov 14 22:15:00 2023", now) == pytest.approx(100.0)
    assert retry_after_s(email.utils.formatdate(now - 60, usegmt=True), now) == 0.0  # in the past
    assert retry_after_s("soon", now) is None and retry_after_s("", now) is None and retry_after_s(None, now) is None


def test_no_request_inside_a_retry_after_window(tmp_path):
    with TestWeb(hosts=0, pages=2, page_bytes=2000, special=True, max_seconds=120) as web:
        store = Store(tmp_path / "data")
        config = fast_config(web)
        urls = [web.url("odd", t) for t in ("/status/429", "/p/0.html", "/status/503", "/p/1.html")]
        segment, result = fetch(store, config, urls)
        requests = web.requests()
    odd = host_requests(requests, "odd")
    assert [r["path"] for r in odd] == ["/robots.txt", "/status/429", "/p/0.html", "/status/503", "/p/1.html"]
    # /status/429 says Retry-After: 5, /status/503 says Retry-After: 3.
    assert odd[2]["t_start"] - odd[1]["t_end"] >= 5.0 - CLOCK_SLACK_S
    assert odd[4]["t_start"] - odd[3]["t_end"] >= 3.0 - CLOCK_SLACK_S
    rows = results(store, segment)
    assert rows[urls[0]]["outcome"] == rows[urls[2]]["outcome"] == "server_error"
    assert rows[urls[1]]["outcome"] == rows[urls[3]]["outcome"] == "ok"
    assert result.counters["fetch/retry_after"] == 2
    assert_polite(requests)


def test_a_failing_host_is_set_aside_and_its_urls_deferred(tmp_path):
    with TestWeb(hosts=0, pages=2, page_bytes=2000, special=True, max_seconds=120) as web:
        store = Store(tmp_path / "data")
        config = fast_config(web, max_host_failures=3)
        # The odd host answers /status/500 whatever the query.
        failing = [web.url("odd", f"/status/500?n={n}") for n in range(6)]
        urls = failing + [web.url("odd", "/p/0.html")]
        segment, result = fetch(store, config, urls)
        requests = web.requests()
    asked = [r["path"] for r in host_requests(requests, "odd")]
    assert asked == ["/robots.txt"] + [f"/status/500?n={n}" for n in range(3)]
    rows = results(store, segment)
    assert [rows[u]["outcome"] for u in urls] == ["server_error"] * 3 + ["deferred"] * 4
    assert "consecutive failures" in rows[urls[-1]]["error"]
    assert result.counters["fetch/hosts_set_aside"] == 1
    # Exponential back-off without Retry-After: 2 s, then 4 s (delay 1 s × 2^n).
    odd = host_requests(requests, "odd")
    assert odd[2]["t_start"] - odd[1]["t_end"] >= 2.0 - CLOCK_SLACK_S
    assert odd[3]["t_start"] - odd[2]["t_end"] >= 4.0 - CLOCK_SLACK_S


def test_a_slow_host_gets_a_longer_delay(tmp_path):
    with TestWeb(hosts=0, pages=2, page_bytes=2000, special=True, max_seconds=120) as web:
        store = Store(tmp_path / "data")
        # The drip takes a minute; the 1.5 s total timeout ends it. delay_factor 2 → 3 s.
        config = fast_config(web, timeout_s=1.5, low_speed_bytes_per_s=0, delay_factor=2.0)
        urls = [web.url("odd", "/drip"), web.url("odd", "/p/0.html")]
        segment, result = fetch(store, config, urls)
        requests = web.requests()
    odd = host_requests(requests, "odd")
    assert [r["path"] for r in odd] == ["/robots.txt", "/drip", "/p/0.html"]
    held = odd[1]["t_end"] - odd[1]["t_start"]
    assert 1.3 <= held < 3.0, held
    assert odd[2]["t_start"] - odd[1]["t_end"] >= 2.0 * 1.5 - CLOCK_SLACK_S
    assert results(store, segment)[urls[1]]["outcome"] == "ok"
