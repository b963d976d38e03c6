"""The test web: its model (links as written resolve to the oracle's URLs), and the server as
a client sees it (hosts by address, robots variants, validators, slow and huge bodies, the
request log, the time bound)."""

from __future__ import annotations

import socket
import time
from urllib.parse import urljoin, urlsplit

import lxml.html
import pycurl
import pytest

from testweb.harness import TestWeb, TestWebError
from testweb.model import SPECIAL_HOSTS, regular_ip
from testweb.special import BIG_BYTES, LATIN1_TEXT
from testweb.web import Web
from tests.support.webclient import fetch, normalise, wait_for_log

pytestmark = pytest.mark.web


# --- helpers ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def web():
    with TestWeb(hosts=5, pages=8, page_bytes=3000, special=True, max_seconds=120) as w:
        yield w


# --- the model --------------------------------------------------------------------------------

def test_links_in_the_html_resolve_to_the_model_links():
    """Parse every HTML page of a small web as a crawler would (lxml, <base> honoured) and
    find exactly the links the oracle reasons about, nofollow flags included."""
    model = Web(hosts=4, pages=7, page_bytes=2500, special=True, port=8123)
    checked = 0
    for url in sorted(model.universe()):
        profile, target = model.split(url)
        page = profile.page(target)
        if page is None or page.stream is not None or page.location is not None:
            continue
        response = profile.handle("GET", target, {})
        doc = lxml.html.document_fromstring(response.body)
        base = doc.xpath("//base/@href")
        base_url = urljoin(url, base[0]) if base else url
        found = [(normalise(urljoin(base_url, a.get("href"))),
                  "nofollow" in (a.get("rel") or "").split()) for a in doc.iter("a")]
        assert found == [(link.url, link.nofollow) for link in page.links], url
        meta = doc.xpath('//meta[@name="robots"]/@content')
        assert page.meta_nofollow == bool(meta and "nofollow" in meta[0]), url
        checked += 1
    assert checked > 40


def test_oracle_sets():
    model = Web(hosts=4, pages=7, page_bytes=2500, special=True, port=8123)
    reach = model.expected_reachable()
    never = model.must_not_request()
    assert not reach & never
    for i in range(4):
        for k in range(7):
            assert model.url(f"h{i}.web.test", f"/p/{k}.html") in reach
        for bait in ("/nofollow-only.html", "/meta-nofollow-target.html", f"/cgi-bin/search?q=h{i}"):
            assert model.url(f"h{i}.web.test", bait) in never
        assert model.url(f"h{i}.web.test", "/meta-nofollow.html") in reach
    # robots.txt answering 503: not one page of the host may be requested.
    assert not {u for u in reach if "robots-503." in u}
    assert model.url("robots-503.web.test", "/") in never
    assert model.url("robots-404.web.test", "/private/a.html") in reach
    for host, path in [("robots-disallow", "/private/a.html"), ("robots-bom", "/secret/a.html"),
                       ("robots-redirect", "/hidden/a.html"), ("robots-agent", "/nobots/a.html")]:
        assert model.url(f"{host}.web.test", path) in never
    # The robots-agent rule is for crawlbot only.
    assert model.url("robots-agent.web.test", "/nobots/a.html") in model.expected_reachable(agent="otherbot")
    odd = {urlsplit(u).path for u in reach if "odd." in u}
    assert {"/redirect", "/p/0.html", "/loop/a", "/loop/b", "/drip", "/big", "/file.pdf",
            "/latin1", "/caf%C3%A9.html", "/broken/f.html"} <= odd
    # From one regular seed, everything is still found (specials linked from regular pages).
    assert model.expected_reachable([model.url("h0.web.test")]) == reach
    # Depth: the binary tree keeps pages shallow.
    assert len(model.expected_reachable([model.url("h1.web.test")], max_depth=1)) < len(reach)
    assert Web(hosts=1, pages=500, special=False).expected_reachable(max_depth=12) >= {
        f"http://h0.web.test/p/{k}.html" for k in range(500)}


def test_pages_are_deterministic_and_sized():
    a = Web(hosts=3, pages=4, page_bytes=30_000, seed=5, port=81)
    b = Web(hosts=3, pages=4, page_bytes=30_000, seed=5, port=81)
    ra = a.profiles["h2.web.test"].handle("GET", "/p/3.html", {})
    rb = b.profiles["h2.web.test"].handle("GET", "/p/3.html", {})
    assert ra.body == rb.body and ra.headers == rb.headers
    assert 30_000 <= len(ra.body) < 31_000
    other = a.profiles["h2.web.test"].handle("GET", "/p/2.html", {}).body
    assert other != ra.body
    assert Web(hosts=3, pages=4, seed=6, port=81).profiles["h2.web.test"].handle(
        "GET", "/p/3.html", {}).body != ra.body


# --- the server ---------------------------------------------------------------------------------

def test_each_host_answers_on_its_own_address(web):
    resolve = web.resolve_map()
    assert len(set(resolve.values())) == len(resolve) == 5 + len(SPECIAL_HOSTS)
    assert web.seeds()[0] == web.url("h0", "/")
    for name in ("h0.web.test", "h3.web.test", "odd.web.test"):
        r = fetch(web, web.url(name, "/"))
        assert r.status == 200
        assert f"<title>{name}: home</title>".encode() in r.body
    rows = wait_for_log(web, lambda r: r["path"] == "/" and r["host"] == "h3.web.test")
    assert rows and rows[0]["ip"] == resolve["h3.web.test"] == regular_ip(3)
    assert rows[0]["host_header"] == f"h3.web.test:{web.port}"
    assert rows[0]["user_agent"] == "crawlbot-test/1.0"
    # Same path, different hosts, different pages.
    assert fetch(web, web.url("h1", "/p/2.html")).body != fetch(web, web.url("h2", "/p/2.html")).body


def test_host_header_mismatch_is_logged(web):
    ip = web.resolve_map()["h2.web.test"]
    r = fetch(web, f"http://{ip}:{web.port}/p/1.html", headers=["Host: h4.web.test"])
    assert r.status == 200 and b"h2.web.test: page 1" in r.body  # the address decides
    rows = wait_for_log(web, lambda r: r["host_header"] == "h4.web.test")
    assert rows[0]["host"] == "h2.web.test" and rows[0]["path"] == "/p/1.html"


@pytest.mark.parametrize("host, status, expect", [
    ("h0", 200, b"User-agent: *\nDisallow: /cgi-bin/\n"),
    ("robots-disallow", 200, b"User-agent: *\nDisallow: /private/\n"),
    ("robots-delay", 200, b"User-agent: *\nCrawl-delay: 2\n"),
    ("robots-404", 404, None),
    ("robots-503", 503, None),
    ("robots-bom", 200, b"\xef\xbb\xbfUser-agent: *\nDisallow: /secret/\n"),
    ("robots-agent", 200, b"User-agent: crawlbot\nDisallow: /nobots/\n\nUser-agent: *\nDisallow:\n"),
])
def test_robots_variants(web, host, status, expect):
    r = fetch(web, web.url(host, "/robots.txt"))
    assert r.status == status
    if expect is not None:
        assert r.body == expect or r.body.startswith(expect)


def test_robots_redirect(web):
    r = fetch(web, web.url("robots-redirect", "/robots.txt"))
    assert r.status == 301 and r.headers["location"] == "/robots-real.txt"
    real = fetch(web, web.url("robots-redirect", "/robots-real.txt"))
    assert real.status == 200 and b"Disallow: /hidden/" in real.body


def test_conditional_requests_answer_304(web):
    url = web.url("h1", "/p/3.html")
    first = fetch(web, url)
    etag, modified = first.headers["etag"], first.headers["last-modified"]
    assert first.status == 200 and etag.startswith('"')
    assert fetch(web, url, [f"If-None-Match: {etag}"]).status == 304
    assert fetch(web, url, [f"If-None-Match: W/{etag}, \"other\""]).status == 304
    assert fetch(web, url, ['If-None-Match: "stale"']).status == 200
    assert fetch(web, url, [f"If-Modified-Since: {modified}"]).status == 304
    assert fetch(web, url, ["If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT"]).status == 200
    rows = wait_for_log(web, lambda r: r["path"] == "/p/3.html" and r["status"] == 304)
    assert rows[0]["if_none_match"] == etag and rows[0]["bytes_sent"] == 0


def test_keep_alive_and_log_fields(web):
    curl = pycurl.Curl()
    try:
        a = fetch(web, web.url("h4", "/p/0.html"), curl=curl)
        b = fetch(web, web.url("h4", "/p/1.html"), curl=curl)
    finally:
        curl.close()
    rows = wait_for_log(web, lambda r: r["host"] == "h4.web.test" and r["path"] in ("/p/0.html", "/p/1.html"),
                        count=2)
    assert len(rows) == 2 and rows[0]["conn_id"] == rows[1]["conn_id"]
    assert [r["bytes_sent"] for r in rows] == [len(a.body), len(b.body)]
    for row in rows:
        assert row["method"] == "GET" and row["status"] == 200 and not row["client_closed"]
        assert row["t_start"] <= row["t_end"] <= time.time()
        assert set(row) >= {"t_start", "t_end", "host", "host_header", "method", "path", "status",
                            "bytes_sent", "user_agent", "if_none_match", "if_modified_since",
                            "conn_id", "client_closed"}


def test_pipelined_requests_on_a_raw_socket(web):
    ip = web.resolve_map()["h0.web.test"]
    with socket.create_connection((ip, web.port), timeout=5) as s:
        s.sendall(b"GET /p/0.html HTTP/1.1\r\nHost: h0.web.test\r\n\r\n"
                  b"HEAD /p/1.html HTTP/1.1\r\nHost: h0.web.test\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.count(b"HTTP/1.1 200 OK") == 2 and data.endswith(b"\r\n\r\n")


def test_odd_host_statuses(web):
    for path, status, header in [("/status/429", 429, ("retry-after", "5")),
                                 ("/status/503", 503, ("retry-after", "3")),
                                 ("/status/500", 500, None), ("/gone", 410, None),
                                 ("/missing", 404, None), ("/nowhere", 404, None),
                                 ("/redirect", 301, ("location", web.url("odd", "/p/0.html"))),
                                 ("/loop/a", 301, ("location", "/loop/b")),
                                 ("/loop/b", 301, ("location", "/loop/a"))]:
        r = fetch(web, web.url("odd", path))
        assert r.status == status, path
        if header:
            assert r.headers[header[0]] == header[1], path
    pdf = fetch(web, web.url("odd", "/file.pdf"), head=True)
    assert pdf.headers["content-type"] == "application/pdf"
    assert pdf.headers["content-length"] == str(2 * 1024 * 1024)


def test_latin1_and_broken_pages(web):
    r = fetch(web, web.url("odd", "/latin1"))
    assert r.headers["content-type"] == "text/html"  # charset only in the meta tag
    assert LATIN1_TEXT.encode("iso-8859-1") in r.body
    assert fetch(web, web.url("odd", "/caf%C3%A9.html")).status == 200
    assert fetch(web, web.url("odd", "/broken/f.html?a=1&b=2")).status == 200
    assert b"<a href=/broken/a.html>" in fetch(web, web.url("odd", "/broken")).body


def test_big_body_logs_bytes_actually_sent(web):
    r = fetch(web, web.url("odd", "/big"), max_bytes=1_000_000)
    assert r.error is not None and r.headers["content-length"] == str(BIG_BYTES)
    rows = wait_for_log(web, lambda r: r["path"] == "/big")
    assert rows[0]["client_closed"] is True
    # What the client read plus what sat in socket buffers: far from the 20 MB announced.
    assert 1_000_000 <= rows[0]["bytes_sent"] < 10_000_000


def test_drip_sends_one_byte_a_second(web):
    r = fetch(web, web.url("odd", "/drip"), timeout_s=2.5)
    assert r.error is not None and r.status == 200
    assert 1 <= len(r.body) <= 3
    rows = wait_for_log(web, lambda r: r["path"] == "/drip")
    row = rows[0]
    assert row["client_closed"] is True and 1 <= row["bytes_sent"] <= 3
    assert 2.0 <= row["t_end"] - row["t_start"] <= 4.0


def test_many_hosts_listen():
    with TestWeb(hosts=3000, pages=2, page_bytes=500, special=False, max_seconds=60) as big:
        assert len(big.seeds()) == 3000
        r = fetch(big, big.url("h2999", "/p/1.html"))
        assert r.status == 200 and b"h2999.web.test: page 1" in r.body
        rows = wait_for_log(big, lambda r: True)
        assert rows[0]["ip"] == regular_ip(2999)


def test_server_exits_by_itself_after_max_seconds():
    web = TestWeb(hosts=1, pages=1, special=False, max_seconds=1.0)
    with web:
        assert web.wait(10) == 0
        assert "max-seconds" in web.stderr()
    assert not web.running()


def test_sigterm_stops_cleanly_and_log_survives():
    web = TestWeb(hosts=2, pages=2, special=False, max_seconds=60)
    with web:
        fetch(web, web.url("h1", "/"))
        wait_for_log(web, lambda r: True)
    assert web.stop() == 0
    assert [r["path"] for r in web.requests()] == ["/"]
    assert web.requested_urls() == {web.url("h1", "/")}


def test_start_failure_reports_server_stderr():
    blocker = socket.socket()
    blocker.bind((regular_ip(0), 0))
    blocker.listen()
    try:
        with pytest.raises(TestWebError, match=r"(?s)exited with 2.*cannot listen on 127\.1\.0\.1:\d+: Address already in use"):
            TestWeb(hosts=1, special=False, port=blocker.getsockname()[1]).start()
    finally:
        blocker.close()
