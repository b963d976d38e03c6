"""A client of the test web: one request with curl, and waiting for the request log."""

from __future__ import annotations

import io
import time
from urllib.parse import urldefrag, urlsplit, urlunsplit

import pycurl

from testweb.harness import TestWeb
from testweb.model import canonical_target


class Fetched:
    def __init__(self, status: int, headers: dict[str, str], body: bytes, elapsed: float, error=None):
        self.status, self.headers, self.body, self.elapsed, self.error = status, headers, body, elapsed, error


def fetch(web: TestWeb, url: str, headers: list[str] = (), timeout_s: float = 10.0,
          max_bytes: int | None = None, curl: pycurl.Curl | None = None, head: bool = False) -> Fetched:
    """GET (or HEAD) ``url`` with pycurl through the web's resolve map."""
    c = curl or pycurl.Curl()
    body = io.BytesIO()
    got = {}

    def write(data: bytes):
        body.write(data)
        if max_bytes is not None and body.tell() >= max_bytes:
            return -1  # abort the transfer, as a crawler does past its size limit

    def header(line: bytes):
        text = line.decode("latin-1").strip()
        if ":" in text:
            name, _, value = text.partition(":")
            got[name.strip().lower()] = value.strip()

    c.setopt(pycurl.URL, url)
    c.setopt(pycurl.RESOLVE, web.curl_resolve())
    c.setopt(pycurl.WRITEFUNCTION, write)
    c.setopt(pycurl.HEADERFUNCTION, header)
    c.setopt(pycurl.HTTPHEADER, list(headers))
    c.setopt(pycurl.USERAGENT, "crawlbot-test/1.0")
    c.setopt(pycurl.TIMEOUT_MS, int(timeout_s * 1000))
    c.setopt(pycurl.NOBODY, head)
    t0 = time.monotonic()
    error = None
    try:
        c.perform()
    except pycurl.error as exc:
        error = exc
    status = c.getinfo(pycurl.RESPONSE_CODE)
    if curl is None:
        c.close()
    return Fetched(status, got, body.getvalue(), time.monotonic() - t0, error)


def wait_for_log(web: TestWeb, predicate, count: int = 1, timeout_s: float = 5.0) -> list[dict]:
    """Log rows matching ``predicate``, once there are ``count`` of them (the server flushes
    its log right after answering, so a row may land a moment after the client is done)."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = [r for r in web.requests() if predicate(r)]
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.02)


def normalise(url: str) -> str:
    url = urldefrag(url)[0]
    parts = urlsplit(url)
    netloc = parts.hostname.lower() + (f":{parts.port}" if parts.port not in (None, 80) else "")
    return urlunsplit((parts.scheme, netloc, canonical_target(parts.path or "/").partition("?")[0],
                       parts.query, ""))


def key(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.hostname, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
