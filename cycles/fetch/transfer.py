"""One HTTP transfer on a pycurl easy handle: limits, early aborts, header capture.

Limits are enforced by libcurl (connect timeout, total timeout, low-speed limit) and by
our callbacks, which abort the transfer as soon as we know we do not want the body:
a Content-Length over the size cap, a non-HTML type, or a body that grows past the cap.
Aborting (rather than downloading and truncating) frees the slot and spares the server.
Bodies are requested compressed and stored exactly as received (the WARC keeps the
bytes on the wire); :func:`decoded_body` inflates them with the same size cap, so a
compression bomb cannot exhaust memory.

robots.txt is the exception to aborting: RFC 9309 §2.5 asks us to parse the first 500 KiB
of a larger file, and a file dropped unread was crawled as if it had no rules. So a
robots.txt transfer keeps its first ``max_bytes + 1`` bytes and then stops
(``ABORT_TRUNCATED``); the byte past the cap tells the parser that the file went on, so it
drops the cut-off last line. :func:`robots_body` turns that into the bytes to parse.
"""

from __future__ import annotations

import socket
import time
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import urlsplit

import pycurl

from cycles.config import FetchConfig
from cycles.fetch.addresses import is_allowed, parse_networks
from cycles.fetch.parse import sniff_html
from cycles.fetch.records import FetchItem
from cycles.fetch import tls

# Why a transfer was aborted by us (libcurl then reports CURLE_WRITE_ERROR).
ABORT_TOO_LARGE = "too_large"
ABORT_NOT_HTML = "not_html"
ABORT_TRUNCATED = "truncated"  # a robots.txt cut after max_bytes + 1 bytes, the rest unread


FIXED_HEADERS = ["Accept: text/html,application/xhtml+xml;q=0.9,*/*;q=0.1", "Accept-Language: en;q=1.0, *;q=0.5"]
"""Headers every request sends besides Host, User-Agent and Accept-Encoding (the WARC
request records list them too: cycles/fetch/exchange.py)."""


@dataclass(slots=True)
class Request:
    """One request to start: its URL, its host's slot, and what it is for."""

    url: str
    host: str
    kind: str  # "robots", "sitemap" or "page"
    item: FetchItem | None = None  # the URL of a page request (cycles/fetch/records.py)
    headers: list[str] = field(default_factory=list)
    sitemap_depth: int = 0  # a sitemap request: sitemap index levels above it (cycles/tables/sitemaps.py)


class Transfer:
    """Callbacks and collected state of one transfer."""

    def __init__(self, request: Request, config: FetchConfig, max_bytes: int):
        self.request = request
        self.max_bytes = max_bytes
        self.html_only = config.html_only and request.kind == "page"
        self.keep_prefix = request.kind in ("robots", "sitemap")
        """Keep the first bytes of a body over the cap instead of aborting with nothing."""
        self.status_line = b""
        self.header_lines: list[bytes] = []
        self.chunks: list[bytes] = []
        self.size = 0
        self.abort: str | None = None
        self.started_wall = time.time()
        self.started = time.monotonic()
        self.ended = 0.0
        self.duration_s = 0.0
        self.setup_s = 0.0
        """Of ``duration_s``, the time before the request was sent (libcurl's PRETRANSFER_TIME:
        lookup, connect, TLS handshake): what a new connection adds, not the server's answer."""
        self.allowed_networks = _networks(tuple(config.allowed_networks))
        self.blocked_address: str | None = None
        """The address we refused to connect to (SSRF guard), if any: when the transfer
        failed to connect, this is why."""
        self.ip: str | None = None
        """The address connected to (libcurl's PRIMARY_IP), set when the transfer ends."""
        self.error: int | None = None
        """libcurl's error number when the transfer failed, set when it ends."""
        self.tls_failure: tuple[str, str] | None = None
        """(reason, libcurl error) when the TLS handshake failed (cycles/fetch/tls.py)."""
        self.tls_unverified: tuple[str, str] | None = None
        """(reason, error) of the verification failure this archive-anyway transfer goes
        through unverified (``fetch.tls_archive_anyway``); None: verified as always."""
        self._checked_type = False
        self._by_name: dict[bytes, bytes] | None = None
        """Lower-case name -> value of the last header line with that name, built on the
        first :meth:`header` call after the lines changed (a page asks for ~8 headers)."""

    # --- callbacks --------------------------------------------------------------------
    def on_open_socket(self, purpose: int, address) -> socket.socket | int:
        """Open the socket libcurl is about to connect, or refuse a non-public address.

        Called for every address libcurl tries (each of a name's A/AAAA answers, a proxy),
        with the address itself: a host name that resolves inside, or a spelling such as
        ``0x7f.1``, is judged by where it leads (cycles/fetch/addresses.py)."""
        ip = address.addr[0]
        if not is_allowed(ip, self.allowed_networks):
            self.blocked_address = ip
            return pycurl.SOCKET_BAD
        return socket.socket(address.family, address.socktype, address.protocol)

    def on_header(self, line: bytes):
        if line.startswith(b"HTTP/"):
            # A new response (after 100 Continue, say): forget the previous headers.
            self.status_line = line.rstrip(b"\r\n")
            self.header_lines = []
            self._by_name = None
            self._checked_type = False
            return None
        if line in (b"\r\n", b"\n"):
            return self._check_headers()
        self.header_lines.append(line.rstrip(b"\r\n"))
        self._by_name = None
        return None

    def _check_headers(self):
        status = self.status_code()
        if status is None or not 200 <= status < 300:
            return None
        # The type first: a large PDF is "not HTML", which says more than "too large".
        ctype = self.header("content-type")
        if self.html_only and ctype is not None:
            self._checked_type = True
            if not sniff_html(b"", ctype):
                self.abort = ABORT_NOT_HTML
                return 0  # abort now: not one byte of the body is read
        length = self.header("content-length")
        if length and length.isdigit() and int(length) > self.max_bytes and not self.keep_prefix:
            self.abort = ABORT_TOO_LARGE
            return 0
        return None

    def on_body(self, data: bytes):
        if self.html_only and not self._checked_type:
            status = self.status_code()
            self._checked_type = True
            if status is not None and 200 <= status < 300 and not sniff_html(data[:512], None):
                self.abort = ABORT_NOT_HTML
                return 0
        if self.keep_prefix and self.size + len(data) > self.max_bytes:
            # One byte past the cap, then stop: parse what was read (module doc).
            data = data[: self.max_bytes + 1 - self.size]
            self.chunks.append(data)
            self.size += len(data)
            self.abort = ABORT_TRUNCATED
            return 0
        self.size += len(data)
        if self.size > self.max_bytes:
            self.abort = ABORT_TOO_LARGE
            return 0
        self.chunks.append(data)
        return None

    # --- results ------------------------------------------------------------------------
    def status_code(self) -> int | None:
        parts = self.status_line.split(None, 2)
        if len(parts) >= 2 and parts[1].isdigit():
            return int(parts[1])
        return None

    def header(self, name: str) -> str | None:
        """Value of the last header with this name (case-insensitive), decoded as Latin-1."""
        by_name = self._by_name
        if by_name is None:
            by_name = self._by_name = {}
            for line in self.header_lines:
                found, colon, value = line.partition(b":")
                if colon:
                    by_name[found.lower()] = value
        value = by_name.get(name.lower().encode())
        return value.strip().decode("latin-1") if value is not None else None

    def headers_list(self) -> list[tuple[str, str]]:
        out = []
        for line in self.header_lines:
            name, sep, value = line.partition(b":")
            if sep:
                out.append((name.decode("latin-1").strip(), value.decode("latin-1").strip()))
        return out

    def body(self) -> bytes:
        # Joined once: the parser and the WARC writer both ask for it.
        if len(self.chunks) > 1:
            self.chunks = [b"".join(self.chunks)]
        return self.chunks[0] if self.chunks else b""


def decoded_body(raw: bytes, content_encoding: str | None, max_bytes: int) -> bytes | None:
    """The body with gzip/deflate removed; None if it inflates past max_bytes or is corrupt."""
    encoding = (content_encoding or "").strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding not in ("gzip", "x-gzip", "deflate"):
        return raw  # unknown coding: hand over as is; the parser copes with junk
    # wbits 47 = zlib or gzip header auto-detected; raw deflate needs -15.
    for wbits in ((47,) if encoding != "deflate" else (47, -15)):
        try:
            inflater = zlib.decompressobj(wbits)
            out = inflater.decompress(raw, max_bytes + 1)
            if len(out) > max_bytes:
                return None
            return out
        except zlib.error:
            continue
    return None


def robots_body(transfer: Transfer) -> bytes | None:
    """The bytes of a 2xx robots.txt response to parse: inflated (Content-Encoding gzip or
    deflate) to at most ``max_bytes + 1``, a line cut by our stop dropped. None when the
    body cannot be read: it does not inflate, stops short of its end, or has a coding we
    did not ask for. A robots.txt we could not read never grants access
    (cycles.fetch.robots), so None is never "no rules"."""
    raw = transfer.body()
    encoding = (transfer.header("content-encoding") or "").strip().lower()
    if encoding in ("", "identity"):
        body = raw
    elif encoding in ("gzip", "x-gzip", "deflate"):
        body = _inflate_prefix(raw, encoding, transfer.max_bytes + 1,
                               complete=transfer.abort != ABORT_TRUNCATED)
        if body is None:
            return None
    else:
        return None  # we send Accept-Encoding: gzip, deflate; anything else we cannot read
    if transfer.abort == ABORT_TRUNCATED and len(body) <= transfer.max_bytes:
        # The file went on past what we read (a compressed one can inflate to less than
        # the cap): its last line may be cut, and "Allow: /private/public" cut to
        # "Allow: /priv" would allow all of /priv*.
        body = body[: max(body.rfind(b"\n"), body.rfind(b"\r")) + 1]
    return body


def _inflate_prefix(raw: bytes, encoding: str, limit: int, complete: bool) -> bytes | None:
    """Up to ``limit`` inflated bytes of ``raw``; None if it is not gzip/zlib/deflate data,
    or if a ``complete`` body ends before its compressed stream does (a corrupt one)."""
    for wbits in ((47,) if encoding != "deflate" else (47, -15)):
        try:
            inflater = zlib.decompressobj(wbits)
            out = inflater.decompress(raw, limit)
        except zlib.error:
            continue
        if complete and not inflater.eof and len(out) < limit:
            return None
        return out
    return None


def configure(curl: pycurl.Curl, transfer: Transfer, config: FetchConfig, resolve: list[str]) -> None:
    """Set every option of one transfer on a (reset) easy handle."""
    request = transfer.request
    curl.setopt(pycurl.URL, request.url)
    curl.setopt(pycurl.USERAGENT, config.user_agent)
    curl.setopt(pycurl.HTTPHEADER, FIXED_HEADERS + request.headers)
    curl.setopt(pycurl.ENCODING, "gzip, deflate")
    # Keep the bytes as sent (for the WARC); we inflate ourselves, with a cap.
    curl.setopt(pycurl.HTTP_CONTENT_DECODING, 0)
    curl.setopt(pycurl.FOLLOWLOCATION, 0)
    curl.setopt(pycurl.NOSIGNAL, 1)
    curl.setopt(pycurl.CONNECTTIMEOUT_MS, int(config.connect_timeout_s * 1000))
    curl.setopt(pycurl.TIMEOUT_MS, int(config.timeout_s * 1000))
    curl.setopt(pycurl.LOW_SPEED_LIMIT, int(config.low_speed_bytes_per_s))
    curl.setopt(pycurl.LOW_SPEED_TIME, int(config.low_speed_time_s))
    curl.setopt(pycurl.PROTOCOLS, pycurl.PROTO_HTTP | pycurl.PROTO_HTTPS)
    # Verify certificates, fetch.min_tls_version at least (cycles/fetch/tls.py).
    tls.configure(curl, config, transfer.tls_unverified[0] if transfer.tls_unverified else None)
    # The SSRF guard: every connection's address is checked before it is made.
    curl.setopt(pycurl.OPENSOCKETFUNCTION, transfer.on_open_socket)
    curl.setopt(pycurl.HEADERFUNCTION, transfer.on_header)
    curl.setopt(pycurl.WRITEFUNCTION, transfer.on_body)
    if resolve:
        curl.setopt(pycurl.RESOLVE, resolve)


@lru_cache(maxsize=8)
def _networks(cidrs: tuple[str, ...]):
    """fetch.allowed_networks parsed once per worker (config load validated them)."""
    return parse_networks(cidrs)


def resolve_entries(url: str, resolve: dict[str, str]) -> list[str]:
    """curl RESOLVE entry pinning the URL's host and port to its override address."""
    if not resolve:
        return []
    parts = urlsplit(url)
    ip = resolve.get(parts.hostname or "")
    if not ip:
        return []
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return [f"{parts.hostname}:{port}:{ip}"]


def validator_headers(etag: str | None, last_modified: str | None) -> list[str]:
    """The conditional request headers of a refetch (RFC 9110 §13.1): a 304 costs no body."""
    headers = []
    if etag:
        headers.append(f"If-None-Match: {etag}")
    if last_modified:
        headers.append(f"If-Modified-Since: {last_modified}")
    return headers
