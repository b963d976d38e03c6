"""HTTP/2 on the named-host HTTPS web (testweb/realweb.py), with the crawler's defaults:
``crawl fetch`` inside the namespace, nothing set about HTTP versions, TLS or connections.

Where a host offers ``h2`` by ALPN, libcurl (in the pycurl wheel, with nghttp2) speaks
HTTP/2 to it; issue 28 asks that it stays one request at a time per host, over one reused
connection, with the spacing held. What the server saw (request and handshake logs) and
what was written (the WARC records) say so; a client that does open two streams at once
(the ``h2`` package) shows the server would have taken them (the positive control)."""

from __future__ import annotations

import io
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections import defaultdict

import h2.config
import h2.connection
import h2.events
import pytest
from warcio.archiveiterator import ArchiveIterator

from cycles.storage.store import Store
from testweb import tls as tls_web
from testweb.harness import REPO_ROOT
from testweb.namespace import namespace_available
from testweb.realweb import RealWeb
from tests.support.fetching import assert_polite, make_segment, results

pytestmark = [pytest.mark.web,
              pytest.mark.skipif(namespace_available() is not None, reason=str(namespace_available()))]

PAGES = ("/p/0.html", "/p/1.html", "/p/2.html")


def crawl_fetch(prefix: list[str], store: Store, segment: str) -> None:
    """``crawl fetch SEGMENT`` in the namespace with the defaults but loopback allowed (the SSRF
    guard), no outlinks followed and no progress lines: nothing about HTTP, TLS or connections."""
    sets = {"fetch.allowed_networks": ["127.0.0.0/8"], "fetch.follow_outlinks_depth": 0, "fetch.progress_s": 0.0}
    args = [arg for key, value in sets.items() for arg in ("--set", f"{key}={json.dumps(value)}")]
    result = subprocess.run(prefix + [sys.executable, "-m", "cycles", "--data", str(store.root), "-q", *args,
                                      "fetch", segment], capture_output=True, text=True, timeout=240,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert result.returncode == 0, result.stderr


def warc_records(store: Store, segment: str) -> list:
    out = []
    for path in sorted((store.segment_dir(segment) / "warc").glob("*.warc.gz")):
        out.extend(ArchiveIterator(io.BytesIO(path.read_bytes())))
    return out


def wait_for(read, count: int, seconds: float = 30.0) -> list:
    """``read()`` once it holds ``count`` items (or what it holds after ``seconds``)."""
    deadline = time.monotonic() + seconds
    while len(items := read()) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return items


def most_open_at_once(requests: list[dict]) -> int:
    """The most requests of ``requests`` open at the server at one time ([t_start, t_end])."""
    edges = sorted([(r["t_start"], 1) for r in requests] + [(r["t_end"], -1) for r in requests],
                   key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def two_streams_at_once(real: RealWeb, host: str) -> list[int]:
    """The positive control: a client (the ``h2`` package over ``ssl``) that sends two GETs
    to ``host`` on one connection in one write, two streams open at once; returns the
    status of each. The server holds each answer for the host's round trip (> 0), so it
    has both requests before it answers either."""
    profile = real.web.web.profiles[host]
    assert profile.rtt_s > 0
    context = ssl.create_default_context(cafile=real.web.ca_file())
    context.set_alpn_protocols(["h2"])
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    statuses: dict[int, int] = {}
    with socket.create_connection((profile.ip, real.web.tls_port), timeout=30) as raw, \
            context.wrap_socket(raw, server_hostname=host) as sock:
        assert sock.selected_alpn_protocol() == "h2"
        conn.initiate_connection()
        for target in ("/p/0.html", "/p/1.html"):
            conn.send_headers(conn.get_next_available_stream_id(),
                              [(":method", "GET"), (":path", target), (":scheme", "https"), (":authority", host)],
                              end_stream=True)
        sock.sendall(conn.data_to_send())
        ended = 0
        while ended < 2:
            data = sock.recv(65536)
            assert data, "the server closed the connection"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    statuses[event.stream_id] = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    ended += 1
            sock.sendall(conn.data_to_send())
    return [statuses[k] for k in sorted(statuses)]


def test_http2_where_offered_one_request_at_a_time_per_host_with_the_defaults(tmp_path):
    with RealWeb(hosts=4, pages=3, page_bytes=100_000, special=False, https=1.0, rtt_ms=(5, 20),
                 dns_latency_ms=(0, 0), max_seconds=300) as real:
        web = real.web
        h2_hosts = sorted(p.name for p in web.web.profiles.values() if p.kind == "regular" and p.h2)
        h1_hosts = sorted(p.name for p in web.web.profiles.values() if p.kind == "regular" and not p.h2)
        assert h2_hosts and h1_hosts, "RealWeb offers HTTP/2 on about half of the good HTTPS hosts by default"
        names = h2_hosts + h1_hosts + [tls_web.CLOSING]
        urls = [web.url(name.split(".")[0], target) for name in names for target in PAGES]
        store = Store(tmp_path / "data")
        segment = make_segment(store, urls)
        crawl_fetch(real.prefix, store, segment)
        requests = wait_for(web.requests, 4 * len(names))  # robots.txt and three pages a host
        shakes = web.handshakes()

        # The positive control: the server takes two concurrent streams on one connection
        # from a client that opens them, so "at most one at a time" below is the crawler's doing.
        skip = len(web.requests())
        assert two_streams_at_once(real, h2_hosts[0]) == [200, 200]
        control = wait_for(lambda: web.requests()[skip:], 2)  # logged as each response ends
        assert len(control) == 2 and len({r["conn_id"] for r in control}) == 1
        assert most_open_at_once(control) == 2

    assert {u: r["outcome"] for u, r in results(store, segment).items()} == {u: "ok" for u in urls}
    by_host = defaultdict(list)
    for r in requests:
        by_host[r["host"]].append(r)
    assert set(by_host) == set(names)
    for name in h2_hosts + h1_hosts:  # robots.txt and three pages, over one connection (keep-alive)
        rows = by_host[name]
        assert len(rows) == 4 and len({r["conn_id"] for r in rows}) == 1, rows
        assert {r["http_version"] for r in rows} == {"2" if name in h2_hosts else "1.1"}
        assert most_open_at_once(rows) == 1  # never a second stream (or request) at a time
    assert_polite(requests)  # the delay between one response's end and the next start

    # The handshake log: ALPN said h2 where offered, one handshake a host but tls-close, whose
    # GOAWAY after every response makes each request a new connection resuming the session.
    handshakes = defaultdict(list)
    for h in shakes:
        handshakes[h["host"]].append(h)
    for name in h2_hosts + h1_hosts:
        assert [h["alpn"] for h in handshakes[name]] == ["h2" if name in h2_hosts else "http/1.1"]
    closing = by_host[tls_web.CLOSING]
    assert [r["http_version"] for r in closing] == ["2"] * 4 and len({r["conn_id"] for r in closing}) == 4
    assert [(h["alpn"], h["session_reused"]) for h in handshakes[tls_web.CLOSING]] == \
        [("h2", False)] + [("h2", True)] * 3

    # What was written: the request and response records of an exchange say HTTP/2 where it was.
    records = warc_records(store, segment)
    for name in (h2_hosts[0], h1_hosts[0]):
        url = web.url(name.split(".")[0], PAGES[0])
        protocol = "HTTP/2" if name in h2_hosts else "HTTP/1.1"
        request = next(r for r in records if r.rec_type == "request"
                       and r.rec_headers.get_header("WARC-Target-URI") == url)
        response = next(r for r in records if r.rec_type == "response"
                        and r.rec_headers.get_header("WARC-Target-URI") == url)
        # warcio splits a request line "GET /p/0.html HTTP/2" into method and the rest.
        assert (request.http_headers.protocol, request.http_headers.statusline) == ("GET", f"{PAGES[0]} {protocol}")
        assert response.http_headers.protocol == protocol and response.http_headers.get_statuscode() == "200"
