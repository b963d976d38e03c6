"""Tests of cycles/fetch/classify.py: a finished transfer's outcome, without curl or a server.

The web tests (test_fetch_*.py) check the same rules end to end against real servers; here
each branch is pinned by a table row, including which of two competing facts wins."""

from __future__ import annotations

import pytest

from cycles.fetch.classify import (HOST_ANSWERED, HOST_BACK_OFF, HOST_FAILURE, ROBOTS_ANSWER, SITEMAP_ANSWER,
                                   Outcome, Response, blocked_reason, classify)
from cycles.fetch.transfer import ABORT_NOT_HTML, ABORT_TOO_LARGE, ABORT_TRUNCATED
from cycles.tables.schema import FetchOutcome as O

URL = "http://a.test/p"
WRITE_ERROR = (23, "Failure writing output to destination")


def page(**kw) -> Response:
    return Response("page", kw.pop("url", URL), **kw)


# (response, outcome, error, host effect)
PAGES = [
    (page(status=200), O.OK, None, HOST_ANSWERED),
    (page(status=204), O.OK, None, HOST_ANSWERED),
    (page(status=304), O.NOT_MODIFIED, None, HOST_ANSWERED),
    (page(status=404), O.GONE, None, HOST_ANSWERED),
    (page(status=410), O.GONE, None, HOST_ANSWERED),
    (page(status=403), O.CLIENT_ERROR, "HTTP 403", HOST_ANSWERED),
    (page(status=301), O.CLIENT_ERROR, "HTTP 301", HOST_ANSWERED),  # no Location: nothing to follow
    (page(status=429), O.SERVER_ERROR, "HTTP 429", HOST_BACK_OFF),
    (page(status=500), O.SERVER_ERROR, "HTTP 500", HOST_BACK_OFF),
    (page(status=503), O.SERVER_ERROR, "HTTP 503", HOST_BACK_OFF),
    (page(error=(7, "Failed to connect")), O.NETWORK_ERROR, "curl 7: Failed to connect", HOST_FAILURE),
    (page(error=(6, "Could not resolve host: a.test")), O.NETWORK_ERROR, "curl 6: Could not resolve host: a.test",
     HOST_FAILURE),
    (page(error=(28, "Operation timed out")), O.NETWORK_ERROR, "curl 28: Operation timed out", HOST_FAILURE),
    # Our own aborts win over the write error libcurl reports for them, and are no host failure.
    (page(status=200, error=WRITE_ERROR, abort=ABORT_TOO_LARGE, max_bytes=1000), O.TOO_LARGE,
     "body over 1000 bytes; aborted", None),
    (page(status=200, error=WRITE_ERROR, abort=ABORT_NOT_HTML), O.NOT_HTML, "not HTML; body not downloaded", None),
    # A 5xx whose body stalled: the network error decides (the server did not finish answering).
    (page(status=503, error=(28, "Operation timed out")), O.NETWORK_ERROR, "curl 28: Operation timed out",
     HOST_FAILURE),
]


@pytest.mark.parametrize("response,outcome,error,host", PAGES)
def test_page_outcomes(response, outcome, error, host):
    got = classify(response)
    assert (got.outcome, got.error, got.host, got.redirect_to, got.follow) == (outcome, error, host, None, False)


def test_page_counters():
    assert classify(page(status=200)).counters == ("fetch/status/200",)
    assert classify(page(error=(28, "timed out"))).counters == ("fetch/timeout",)
    assert classify(page(error=(7, "refused"))).counters == ("fetch/network_error",)
    assert classify(page(status=503, error=(56, "reset"))).counters == ("fetch/status/503", "fetch/network_error")


def test_redirect_followed_and_counted():
    got = classify(page(status=301, location="/q#frag"))
    assert got == Outcome(O.REDIRECT, None, "http://a.test/q", HOST_ANSWERED, True,  # fragment dropped
                          ("fetch/status/301", "fetch/redirect"))
    cross = classify(page(status=302, location="https://b.test/"))
    assert cross.redirect_to == "https://b.test/" and cross.follow
    assert cross.counters == ("fetch/status/302", "fetch/redirect", "fetch/redirect_cross_host")


def test_redirect_to_itself_is_recorded_not_followed():
    for location in (URL, URL + "#top", "/p"):
        got = classify(page(status=308, location=location))
        assert (got.outcome, got.error, got.follow) == (O.REDIRECT, "redirect to itself", False)
        assert "fetch/redirect_loop" in got.counters
    # Positive control: the same response to another path is followed.
    assert classify(page(status=308, location="/p2")).follow


def test_blocked_address_wins_over_everything_and_is_no_host_failure():
    refused = (7, "Couldn't connect to server")
    for kind in ("page", "robots", "sitemap"):
        got = classify(Response(kind, URL, error=refused, blocked_address="10.0.0.1", tls_reason="other"))
        assert got == Outcome(O.BLOCKED, blocked_reason("10.0.0.1"), counters=("fetch/blocked_address",))
    assert "10.0.0.1" in blocked_reason("10.0.0.1")
    # A refused address libcurl went past (another of the name's addresses answered) is no block.
    assert classify(page(status=200, blocked_address="10.0.0.1")).outcome == O.OK


def test_tls_failure_for_every_kind():
    error = (60, "SSL certificate problem: certificate has expired")
    for kind in ("page", "robots", "sitemap"):
        got = classify(Response(kind, "https://a.test/", error=error, tls_reason="expired"))
        assert got.outcome == O.TLS_FAILED
        assert got.error == "TLS expired: curl 60: SSL certificate problem: certificate has expired"
        assert got.host is None and got.counters == ()


def test_robots_and_sitemap_answers_go_to_their_steps():
    assert classify(Response("robots", URL, status=500)).outcome == ROBOTS_ANSWER
    assert classify(Response("robots", URL, error=(7, "refused"))).outcome == ROBOTS_ANSWER
    assert classify(Response("sitemap", URL, status=200)) == Outcome(SITEMAP_ANSWER, host=HOST_ANSWERED)
    assert classify(Response("sitemap", URL, status=503)).host == HOST_BACK_OFF
    assert classify(Response("sitemap", URL, status=429)).host == HOST_BACK_OFF
    assert classify(Response("sitemap", URL, error=(7, "refused"))).host == HOST_FAILURE
    # A sitemap we cut at its cap is an answer (its start is read), not a failure.
    truncated = Response("sitemap", URL, status=200, error=WRITE_ERROR, abort=ABORT_TRUNCATED)
    assert classify(truncated).host == HOST_ANSWERED
    assert classify(Response("sitemap", URL)).host is None  # nothing came back and no error: nothing learnt


def test_classify_is_pure():
    response = page(status=302, location="/x")
    assert classify(response) == classify(response)
    with pytest.raises(AttributeError):
        response.status = 200  # frozen: the record cannot change under the worker
