"""What a finished transfer's records say about it: pure functions of a transfer.

- :func:`response_of`: what cycles/fetch/classify.py reads of it;
- :func:`request_line` and :func:`request_headers`: the WARC request record's first line
  and headers, as sent (cycles/fetch/warc_records.py);
- :func:`started_iso` and :func:`wall`: its times.
"""

from __future__ import annotations

import datetime as dt
from urllib.parse import urlsplit

from cycles.fetch.classify import Response
from cycles.fetch.transfer import FIXED_HEADERS, Transfer

_FIXED_HEADER_PAIRS = tuple((name, value.strip()) for name, _, value in (line.partition(":") for line in FIXED_HEADERS))
"""FIXED_HEADERS as the (name, value) pairs of a WARC request record, split once."""


def wall(ts: float) -> dt.datetime:
    """A time.time() value as an aware UTC datetime (the rows' and host DB's timestamps)."""
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc)


def response_of(transfer: Transfer, error: tuple[int, str] | None, tls_reason: str | None) -> Response:
    """What :func:`~cycles.fetch.classify.classify` reads of a finished transfer."""
    return Response(transfer.request.kind, transfer.request.url, transfer.status_code(), error, transfer.abort,
                    transfer.max_bytes, transfer.header("location"), transfer.blocked_address, tls_reason)


def started_iso(transfer: Transfer) -> str:
    """``%Y-%m-%dT%H:%M:%S.%fZ`` of the request's start; isoformat, as strftime took twice
    as long (it goes through the C library's strftime; tests/fetch/test_output.py checks they agree)."""
    return wall(transfer.started_wall).isoformat(timespec="microseconds")[:-6] + "Z"


def request_line(transfer: Transfer) -> str:
    """The WARC request record's request line, in the HTTP version the answer came in
    (libcurl negotiates HTTP/2 by ALPN where a server offers it)."""
    parts = urlsplit(transfer.request.url)
    version = "HTTP/2" if transfer.status_line.startswith(b"HTTP/2") else "HTTP/1.1"
    return f"GET {parts.path or '/'}{'?' + parts.query if parts.query else ''} {version}"


def request_headers(transfer: Transfer, user_agent: str) -> list[tuple[str, str]]:
    """The WARC request record's headers: those every request sends, then the request's own."""
    headers = [("Host", urlsplit(transfer.request.url).netloc), ("User-Agent", user_agent),
               ("Accept-Encoding", "gzip, deflate"), *_FIXED_HEADER_PAIRS]
    for line in transfer.request.headers:
        name, _, value = line.partition(":")
        headers.append((name, value.strip()))
    return headers
