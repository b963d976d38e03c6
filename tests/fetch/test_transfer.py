"""cycles/fetch/transfer.py: the limits of one transfer, driven through its callbacks as
libcurl calls them (no network): a Content-Length over the cap, a body growing past it, type
sniffing, robots.txt prefixes, and decoded_body's cap on a compression bomb."""

from __future__ import annotations

import gzip
import zlib

import pytest

from cycles.config import Config
from cycles.fetch.transfer import (ABORT_NOT_HTML, ABORT_TOO_LARGE, ABORT_TRUNCATED, Request, Transfer,
                                   decoded_body, resolve_entries, robots_body)

ABORT = 0
"""What a callback returns to make libcurl stop the transfer (CURLE_WRITE_ERROR)."""


def transfer(kind: str = "page", max_bytes: int = 1000, html_only: bool = True) -> Transfer:
    config = Config().fetch
    config.html_only = html_only
    return Transfer(Request(url="http://a.test/x", host="a.test", kind=kind), config, max_bytes)


def send_headers(t: Transfer, status: int = 200, **headers: str):
    """Feed a status line and headers; returns what the callback returned for the blank line."""
    assert t.on_header(f"HTTP/1.1 {status} X\r\n".encode()) is None
    for name, value in headers.items():
        assert t.on_header(f"{name.replace('_', '-')}: {value}\r\n".encode()) is None
    return t.on_header(b"\r\n")


def test_content_length_over_the_cap_aborts_before_the_body():
    t = transfer(max_bytes=1000)
    assert send_headers(t, content_type="text/html", content_length="1001") == ABORT
    assert t.abort == ABORT_TOO_LARGE and t.body() == b""


def test_content_length_at_the_cap_is_read():
    t = transfer(max_bytes=1000)
    assert send_headers(t, content_type="text/html", content_length="1000") is None
    assert t.on_body(b"<p>" + b"x" * 997) is None
    assert t.abort is None and t.size == 1000


def test_a_body_growing_past_the_cap_aborts_without_keeping_the_excess():
    t = transfer(max_bytes=10)
    send_headers(t, content_type="text/html")  # no Content-Length: chunked
    assert t.on_body(b"<p>123456") is None
    assert t.on_body(b"78") == ABORT
    assert t.abort == ABORT_TOO_LARGE and t.body() == b"<p>123456"


def test_a_declared_non_html_type_aborts_at_the_headers():
    t = transfer()
    assert send_headers(t, content_type="application/pdf", content_length="10") == ABORT
    assert t.abort == ABORT_NOT_HTML


def test_the_type_is_judged_before_the_size():
    # A large PDF is reported as "not HTML", the more useful reason.
    t = transfer(max_bytes=10)
    send_headers(t, content_type="application/pdf", content_length="999999")
    assert t.abort == ABORT_NOT_HTML


def test_without_a_type_the_first_bytes_are_sniffed():
    html = transfer()
    send_headers(html)
    assert html.on_body(b"  <!DOCTYPE html><title>x</title>") is None and html.abort is None
    binary = transfer()
    send_headers(binary)
    assert binary.on_body(b"%PDF-1.4\n") == ABORT and binary.abort == ABORT_NOT_HTML


def test_html_only_off_keeps_any_type():
    t = transfer(html_only=False)
    assert send_headers(t, content_type="application/pdf") is None
    assert t.on_body(b"%PDF-1.4\n") is None and t.abort is None


def test_error_statuses_are_not_judged_by_type_or_length():
    # A 404 page in text/plain or of any announced size is a normal answer, not a limit hit.
    t = transfer(max_bytes=10)
    assert send_headers(t, 404, content_type="text/plain", content_length="99999") is None
    assert t.abort is None and t.status_code() == 404


def test_a_new_status_line_forgets_the_previous_headers():
    t = transfer()
    send_headers(t, 100)
    send_headers(t, 200, content_type="text/html", etag='"v1"')
    assert t.status_code() == 200
    assert t.header("ETag") == '"v1"' and t.header("content-type") == "text/html"
    assert t.headers_list() == [("content-type", "text/html"), ("etag", '"v1"')]


def test_robots_keeps_one_byte_past_the_cap_then_stops():
    t = transfer(kind="robots", max_bytes=20)
    # robots.txt is exempt from the Content-Length abort (RFC 9309 §2.5: parse the prefix).
    assert send_headers(t, content_type="text/plain", content_length="100") is None
    body = b"User-agent: *\nDisallow: /private/public\n"
    assert t.on_body(body) == ABORT
    assert t.abort == ABORT_TRUNCATED and t.body() == body[:21]
    # Handed to the parser as read: the byte past the cap tells it the file went on, so it
    # drops the cut-off last line (cycles/fetch/robots.py).
    assert robots_body(t) == body[:21]


def test_a_compressed_robots_prefix_loses_its_cut_off_line():
    # Inflated to less than the cap, the cut is not visible from the length: robots_body
    # itself drops the last, partial line ("Disallow: /priv" would disallow too little).
    body = b"User-agent: *\nDisallow: /private/public\n" + b"#" * 200
    t = transfer(kind="robots", max_bytes=30)
    t.on_header(b"HTTP/1.1 200 OK\r\n")
    t.on_header(b"Content-Encoding: gzip\r\n")
    t.on_header(b"\r\n")
    raw = gzip.compress(body, mtime=0)
    while t.on_body(raw[:8]) is None:
        raw = raw[8:]
    assert t.abort == ABORT_TRUNCATED
    assert robots_body(t) in (b"", b"User-agent: *\n")


def test_robots_body_inflates_gzip_and_refuses_what_does_not_inflate():
    good = transfer(kind="robots", max_bytes=1000)
    good.on_header(b"HTTP/1.1 200 OK\r\n")
    good.on_header(b"Content-Encoding: gzip\r\n")
    good.on_header(b"\r\n")
    good.on_body(gzip.compress(b"User-agent: *\nDisallow: /x\n"))
    assert robots_body(good) == b"User-agent: *\nDisallow: /x\n"
    bad = transfer(kind="robots", max_bytes=1000)
    bad.on_header(b"HTTP/1.1 200 OK\r\n")
    bad.on_header(b"Content-Encoding: gzip\r\n")
    bad.on_header(b"\r\n")
    bad.on_body(b"User-agent: *\nDisallow: /x\n")  # says gzip, is not
    assert robots_body(bad) is None


def test_decoded_body_caps_a_gzip_bomb():
    bomb = gzip.compress(b"\0" * (50 * 1024 * 1024))  # 50 MB of zeros in about 50 KB
    assert len(bomb) < 100_000
    assert decoded_body(bomb, "gzip", max_bytes=1024 * 1024) is None


@pytest.mark.parametrize("encoding,compress", [
    ("gzip", gzip.compress), ("x-gzip", gzip.compress), ("deflate", zlib.compress),
    ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw deflate, as some servers send
])
def test_decoded_body_inflates_within_the_cap(encoding, compress):
    text = b"<p>hello</p>" * 100
    assert decoded_body(compress(text), encoding, max_bytes=len(text)) == text
    assert decoded_body(compress(text), encoding, max_bytes=len(text) - 1) is None


def test_decoded_body_passes_identity_and_unknown_codings_and_refuses_corrupt_data():
    assert decoded_body(b"plain", None, 10) == b"plain"
    assert decoded_body(b"plain", "identity", 10) == b"plain"
    assert decoded_body(b"plain", "br", 10) == b"plain"
    assert decoded_body(b"not gzip at all", "gzip", 100) is None


def test_resolve_entries_pin_the_host_and_port():
    assert resolve_entries("http://a.test:8080/x", {"a.test": "127.0.0.5"}) == ["a.test:8080:127.0.0.5"]
    assert resolve_entries("https://a.test/x", {"a.test": "127.0.0.5"}) == ["a.test:443:127.0.0.5"]
    assert resolve_entries("http://b.test/x", {"a.test": "127.0.0.5"}) == []
    assert resolve_entries("http://a.test/x", {}) == []
