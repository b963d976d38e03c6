"""The test web's HTTPS (testweb/tls.py): which hosts are HTTPS in the model, and over the
wire what each handshake mode does to a verifying libcurl client, the http -> https
redirect, the round-trip delay and the handshake log."""

from __future__ import annotations

import io
import time

import pycurl
import pytest

from testweb import tls
from testweb.harness import TestWeb
from testweb.web import Web

pytestmark = pytest.mark.web


def test_model_https_fraction_and_origins():
    web = Web(hosts=200, pages=3, page_bytes=100, special=True, https=0.9, tls=True, port=8080, tls_port=8443)
    regular = [p for p in web.profiles.values() if p.kind == "regular"]
    share = sum(bool(p.tls) for p in regular) / len(regular)
    assert 0.8 < share < 0.97
    # Special hosts stay on plain HTTP; the TLS kind has one host per mode.
    assert all(p.tls is None for p in web.profiles.values() if p.kind == "special")
    assert {p.tls for p in web.profiles.values() if p.kind == "tls"} == set(tls.MODES)
    https_host = next(p for p in regular if p.tls)
    http_host = next(p for p in regular if not p.tls)
    assert https_host.origin == f"https://{https_host.name}:8443"
    assert http_host.origin == f"http://{http_host.name}:8080"
    # The oracle knows an HTTPS page by its https URL only; the http one is a redirect.
    assert web.split(https_host.url("/p/0.html"))[0] is https_host
    assert web.split(f"http://{https_host.name}:8080/p/0.html")[0] is None
    assert web.split(f"https://{https_host.name}:8443/p/0.html?x=%41")[0] is https_host
    reachable = web.expected_reachable()
    assert https_host.url("/p/0.html") in reachable and http_host.url("/") in reachable
    assert Web(hosts=5, special=False).https_ips() == []  # HTTPS is off by default


def test_rtt_is_per_host_and_log_uniform():
    values = sorted(tls.rtt_s(0, f"h{i}.web.test", 20, 300) for i in range(2000))
    assert 0.020 <= values[0] and values[-1] <= 0.300
    assert 0.060 < values[1000] < 0.095  # median of log-uniform 20-300 ms: 77 ms
    assert tls.rtt_s(0, "h1.web.test", 0, 0) == 0.0
    assert tls.parse_rtt("20-300") == (20.0, 300.0) and tls.parse_rtt("50") == (50.0, 50.0)


def _get(web: TestWeb, url: str, curl: pycurl.Curl | None = None, share=None, **opts):
    """(status or curl error number, message, APPCONNECT_TIME) of one GET trusting the test CA."""
    c = curl or pycurl.Curl()
    c.setopt(pycurl.URL, url)
    c.setopt(pycurl.RESOLVE, web.curl_resolve())
    c.setopt(pycurl.CAINFO, web.ca_file())
    c.setopt(pycurl.CONNECTTIMEOUT_MS, 1500)
    c.setopt(pycurl.WRITEDATA, io.BytesIO())
    if share is not None:
        c.setopt(pycurl.SHARE, share)
    for key, value in opts.items():
        c.setopt(getattr(pycurl, key), value)
    try:
        c.perform()
        return c.getinfo(pycurl.RESPONSE_CODE), "", c.getinfo(pycurl.APPCONNECT_TIME)
    except pycurl.error as exc:
        return exc.args[0], exc.args[1], c.getinfo(pycurl.APPCONNECT_TIME)


def _wait(predicate, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_handshake_modes_against_libcurl():
    with TestWeb(hosts=2, pages=3, page_bytes=500, special=False, https=1.0, tls=True, max_seconds=120) as web:
        assert web.ca_file() and web.tls_port
        good = _get(web, web.url("tls-good"))
        assert good[0] == 200 and good[2] > 0
        results = {mode: _get(web, web.url(tls.host_name(mode).split(".")[0])) for mode in tls.BAD_MODES}
        assert results["expired"][:2] == (60, results["expired"][1]) and "expired" in results["expired"][1]
        assert results["wrong_name"][0] == 60 and "no alternative certificate subject name" in results["wrong_name"][1]
        assert results["self_signed"][0] == 60 and "self-signed" in results["self_signed"][1]
        assert results["stall"][0] == 28 and results["stall"][2] == 0
        assert results["tls10"][0] == 35 and "alert protocol version" in results["tls10"][1]
        # Without verification the certificate hosts answer (the archive-anyway path).
        unverified = _get(web, web.url("tls-expired"), SSL_VERIFYPEER=0, SSL_VERIFYHOST=0)
        assert unverified[0] == 200
        _wait(lambda: any(h["host"] == tls.host_name("tls10") and h["error"] for h in web.handshakes())
              and any(r["host"] == "tls-expired.web.test" for r in web.requests()))
        https_hosts = {r["host"] for r in web.requests() if r["scheme"] == "https"}
        # The good host and the one fetched unverified got requests; no refused one did.
        assert https_hosts == {"tls-good.web.test", "tls-expired.web.test"}
        shakes = web.handshakes()
        stalled = [h for h in shakes if h["host"] == tls.host_name("stall")]
        assert stalled and stalled[0]["error"] == "stalled"  # TCP accepted, never answered
        old = [h for h in shakes if h["host"] == tls.host_name("tls10")]
        assert old and old[0]["error"] == "UNSUPPORTED_PROTOCOL"
        sni = {h["host"]: h["sni"] for h in shakes if h["ok"]}
        assert sni["tls-good.web.test"] == "tls-good.web.test"


def test_no_sni_gets_the_default_certificate():
    with TestWeb(hosts=1, pages=2, page_bytes=500, special=False, https=1.0, max_seconds=60) as web:
        url = web.url("h0")
        assert url.startswith("https://")
        # libcurl sends no SNI for an IP literal: the server's default certificate names
        # no-sni.web.test, so the name check fails (the SNI choice is what made it pass).
        ip_url = url.replace("h0.web.test", web.resolve_map()["h0.web.test"])
        code, message, _ = _get(web, ip_url)
        assert code == 60 and "no-sni" not in url
        assert _get(web, url)[0] == 200


def test_http_redirects_to_https_and_rtt_delays_the_response():
    with TestWeb(hosts=1, pages=2, page_bytes=500, special=False, https=1.0, rtt_ms=(80, 80),
                 max_seconds=60) as web:
        https_url = web.url("h0", "/p/0.html")
        http_url = f"http://h0.web.test:{web.port}/p/0.html"
        c = pycurl.Curl()
        assert _get(web, http_url, curl=c)[0] == 301
        assert c.getinfo(pycurl.REDIRECT_URL) == https_url
        code, _, appconnect = _get(web, https_url)
        assert code == 200 and appconnect >= 0.080  # the ServerHello waited one round trip
        _wait(lambda: len(web.requests()) >= 2)
        first, second = web.requests()[:2]
        assert (first["scheme"], first["status"], second["scheme"], second["status"]) == ("http", 301, "https", 200)
        assert all(r["t_end"] - r["t_start"] >= 0.079 for r in (first, second))
        assert web.requested_urls() == {http_url, https_url}


def test_keep_alive_and_session_reuse_seen_by_the_server():
    with TestWeb(hosts=1, pages=4, page_bytes=500, special=False, https=1.0, max_seconds=60) as web:
        share = pycurl.CurlShare()
        share.setopt(pycurl.SH_SHARE, pycurl.LOCK_DATA_SSL_SESSION)
        c = pycurl.Curl()
        c.setopt(pycurl.SHARE, share)
        for k in range(2):
            assert _get(web, web.url("h0", f"/p/{k}.html"), curl=c)[0] == 200
        other = pycurl.Curl()  # a new handle: a new connection, the session resumed
        assert _get(web, web.url("h0", "/p/2.html"), curl=other, share=share)[0] == 200
        _wait(lambda: len(web.handshakes()) >= 2 and len(web.requests()) >= 3)
        conns = [r["conn_id"] for r in web.requests()]
        assert conns[0] == conns[1] != conns[2]
        assert [h["session_reused"] for h in web.handshakes()] == [False, True]


def test_http2_where_the_host_offers_it():
    model = Web(hosts=200, pages=2, page_bytes=100, special=False, https=0.9, h2=0.5, port=80)
    https_hosts = [p for p in model.profiles.values() if p.tls]
    share = sum(p.h2 for p in https_hosts) / len(https_hosts)
    assert 0.35 < share < 0.65 and not any(p.h2 for p in model.profiles.values() if not p.tls)
    with TestWeb(hosts=4, pages=3, page_bytes=100_000, special=False, https=1.0, h2=0.5, max_seconds=60) as web:
        offers = {name: web.web.profiles[f"{name}.web.test"].h2 for name in ("h0", "h1", "h2", "h3")}
        assert set(offers.values()) == {True, False}
        for name in offers:
            c = pycurl.Curl()
            for target in ("/", "/p/1.html"):  # 100 KB bodies: past the 64 KB initial flow-control window
                assert _get(web, web.url(name, target), curl=c)[0] == 200
                assert c.getinfo(pycurl.INFO_HTTP_VERSION) == (pycurl.CURL_HTTP_VERSION_2_0 if offers[name]
                                                               else pycurl.CURL_HTTP_VERSION_1_1)
        _wait(lambda: len(web.requests()) >= 8)
        for r in web.requests():
            assert r["http_version"] == ("2" if offers[r["host"].split(".")[0]] else "1.1")
            assert r["status"] == 200 and r["bytes_sent"] > 100_000 and not r["client_closed"]
        by_host = {}
        for r in web.requests():
            by_host.setdefault(r["host"], set()).add(r["conn_id"])
        assert all(len(ids) == 1 for ids in by_host.values())  # one connection a host, either way
        assert {h["host"].split(".")[0]: h["alpn"] for h in web.handshakes()} == \
            {name: "h2" if h2 else "http/1.1" for name, h2 in offers.items()}


def test_tls_close_over_http2_sends_goaway_and_the_next_request_resumes_the_session():
    """On a web with HTTP/2, tls-close offers it and ends each connection after one response
    (GOAWAY): two GETs on one handle are two connections, the second resuming the session.
    Without h2 it stays an HTTP/1.1 host (Connection: close; tests/fetch/test_fetch_tls.py)."""
    assert not Web(hosts=1, special=False, https=1.0, tls=True, port=80).profiles[tls.CLOSING].h2
    with TestWeb(hosts=1, pages=2, page_bytes=500, special=False, https=1.0, tls=True, h2=0.5, max_seconds=60) as web:
        c = pycurl.Curl()
        for target in ("/p/0.html", "/p/1.html"):
            assert _get(web, web.url("tls-close", target), curl=c)[0] == 200
            assert c.getinfo(pycurl.INFO_HTTP_VERSION) == pycurl.CURL_HTTP_VERSION_2_0
        _wait(lambda: len(web.handshakes()) >= 2 and len(web.requests()) >= 2)
        requests = [r for r in web.requests() if r["host"] == tls.CLOSING]
        assert [r["http_version"] for r in requests] == ["2", "2"] and len({r["conn_id"] for r in requests}) == 2
        assert [(h["alpn"], h["session_reused"]) for h in web.handshakes() if h["host"] == tls.CLOSING] == \
            [("h2", False), ("h2", True)]


def test_several_server_processes_share_the_hosts_and_one_log():
    """``processes=2``: both processes answer (connection ids of process 1 start at 1e9), each
    host's plain and TLS addresses belong to one process, the one request log holds every
    request as a whole JSON line, and ``cpu_seconds`` reads both processes."""
    with TestWeb(hosts=12, pages=2, page_bytes=2000, special=False, https=0.5, processes=2) as web:
        assert len(web.ready["pids"]) == 2 and web.ready["pids"][0] == web.process.pid
        urls = [web.web.profiles[name].url(f"/p/{k}.html") for name in sorted(web.web.profiles) for k in range(2)]
        http_of_https = [f"http://{p.name}:{web.port}/" for p in web.web.profiles.values() if p.tls][:3]
        for url in urls + http_of_https:
            status, message, _ = _get(web, url)
            assert status in (200, 301), (url, status, message)
        assert web.cpu_seconds() > 0
        time.sleep(0.3)
        requests = web.requests()
    assert len(requests) == len(urls) + len(http_of_https)  # every line parsed: none cut into another
    by_process = {r["conn_id"] >= 1_000_000_000 for r in requests}
    assert by_process == {False, True}  # both processes served
    for host in {r["host"] for r in requests}:
        assert len({r["conn_id"] >= 1_000_000_000 for r in requests if r["host"] == host}) == 1, host
    # Positive control: one process (the default) gives no ids from the second range.
    with TestWeb(hosts=4, pages=1, page_bytes=500, special=False) as web:
        for name in web.web.profiles:
            _get(web, web.web.profiles[name].url("/"))
        time.sleep(0.3)
        assert {r["conn_id"] < 1_000_000_000 for r in web.requests()} == {True}
