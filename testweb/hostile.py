"""Hostile hosts: servers that try to make a crawler fail open, hang, or reach inside.

Switched on with ``Web(..., hostile=True, internal_port=P)`` (``serve --hostile
--internal-port P``, ``TestWeb(hostile=True, internal_port=P)``); the hosts live on
``127.0.60.x`` (:data:`~testweb.web.KIND_IP_PREFIX`). ``internal_port`` is the port of
an *internal service* on ``127.0.0.1`` (and ``[::1]`` when the machine has it), started by
the test as an :class:`InternalService`: a stand-in for an admin page or the cloud metadata
address that a crawler must never reach, however it is pointed there. Its own request log
says whether it was.

Every host has ``/`` linking ``/p/0.html`` .. ``/p/2.html`` (plain pages) and its own bait:

- ``robots-huge``: a 600 KiB robots.txt sent with a Content-Length, ``Disallow: /`` in its
  first bytes and comment padding after (RFC 9309 §2.5: parse the first 500 KiB). A crawler
  that drops an oversized file unread crawls the host as if it had none.
- ``robots-utf16``: a UTF-16 byte order mark followed by 8-bit text ``User-agent: *`` /
  ``Disallow: /`` (an even number of bytes, so it "decodes" to CJK characters).
- ``robots-gzip``: ``Content-Encoding: gzip`` on bytes that are not gzip.
- ``robots-gzipped``: a good robots.txt, gzip-encoded (``Disallow: /private/``; its pages
  link ``/private/a.html``): read only if the crawler inflates it.
- ``throttle``: every page answers 429 with ``Retry-After: 1``.
- ``endless``: ``/endless`` is a chunked body that never ends.
- ``flood``: ``/many-headers`` sends 10,000 header lines, ``/huge-header`` one 2 MB header.
- ``drip``: ``/drip`` announces 10,000 bytes and sends one every half second.
- ``linker``: a "public" page whose links lead to the internal service: by literal address
  (``127.0.0.1``), by ``localhost``, by spellings that normalise to ``127.0.0.1``
  (``0x7f.1``, ``2130706433``), by ``[::1]``, through ``/go-internal`` (a 302 to it) and by a
  host name, ``smuggle.web.test``, that the resolve map sends to ``127.0.0.1`` (DNS
  smuggling: the name looks public, the address is not).

:func:`robots_blocked_hosts` names the hosts none of whose pages may be requested;
:func:`internal_urls` the links into the internal service.
"""

from __future__ import annotations

import gzip
import http.server
import socket
import threading
import time
from typing import Iterator

from testweb.host import SmallHost
from testweb.model import DOMAIN, Link, Page, Robots, Stream
from testweb.respond import Response

HOSTILE_HOSTS = ("robots-huge", "robots-utf16", "robots-gzip", "robots-gzipped", "throttle",
                 "endless", "flood", "drip", "linker")
"""Short names of the hostile hosts, in address order."""

SMUGGLE_HOST = f"smuggle.{DOMAIN}"
"""A host name the resolve map points at ``127.0.0.1`` (the internal service)."""

INTERNAL_IP = "127.0.0.1"
HUGE_ROBOTS_BYTES = 600 * 1024
DRIP_BYTES = 10_000


def hostile_hosts(web, prefix: str) -> list[SmallHost]:
    return [HostileHost(web, short, f"{prefix}{1 + j}") for j, short in enumerate(HOSTILE_HOSTS)]


def robots_blocked_hosts() -> list[str]:
    """Hosts whose robots.txt forbids everything or cannot be read: no page request allowed."""
    return [f"{short}.{DOMAIN}" for short in ("robots-huge", "robots-utf16", "robots-gzip")]


def internal_urls(port: int) -> list[str]:
    """The linker's links into the internal service (each must be blocked, none fetched)."""
    return [f"http://127.0.0.1:{port}/literal", f"http://localhost:{port}/by-name",
            f"http://0x7f.1:{port}/hex", f"http://2130706433:{port}/decimal",
            f"http://[::1]:{port}/v6", f"http://{SMUGGLE_HOST}:{port}/smuggled"]


def extra_resolve() -> dict[str, str]:
    """Resolve-map entries besides the hosts' own: the smuggling name."""
    return {SMUGGLE_HOST: INTERNAL_IP}


def huge_robots() -> bytes:
    head = b"User-agent: *\nDisallow: /\n"
    line = b"# " + b"padding " * 12 + b"\n"
    return head + line * ((HUGE_ROBOTS_BYTES - len(head)) // len(line) + 1)


def _chunk(data: bytes) -> bytes:
    """One chunk of the chunked transfer coding (RFC 9112 §7.1)."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _endless_chunks() -> Iterator[bytes]:
    """A chunked HTML body whose last chunk never comes."""
    yield _chunk(b"<html><body>\n")
    piece = _chunk(b"<p>" + b"more " * 3000 + b"</p>\n")
    while True:
        yield piece


class HostileHost(SmallHost):
    """One hostile host (module doc); ``short`` picks its behaviour."""

    kind = "hostile"

    def __init__(self, web, short: str, ip: str):
        super().__init__(web, f"{short}.{DOMAIN}", ip)
        self.short = short
        disallow_all = short in ("robots-huge", "robots-utf16", "robots-gzip")
        # The oracle's reading: these hosts are off limits (their files say so, or cannot be read).
        self.robots = Robots(groups={"*": ["/"]} if disallow_all else {"*": []})
        if short == "robots-gzipped":
            self.robots = Robots(groups={"*": ["/private/"]})

    def robots_response(self, path: str, headers: dict[str, str]) -> Response:
        text = [("Content-Type", "text/plain")]
        if self.short == "robots-huge":
            return Response(200, text, huge_robots())
        if self.short == "robots-utf16":
            return Response(200, text, b"\xff\xfe" + b"User-agent: *\nDisallow: /\n")
        if self.short == "robots-gzip":
            return Response(200, text + [("Content-Encoding", "gzip")],
                            b"this is not gzip\x00\x01\x02 User-agent: *\nAllow: /\n")
        if self.short == "robots-gzipped":
            return Response(200, text + [("Content-Encoding", "gzip")],
                            gzip.compress(self.robots.render(), mtime=0))
        return super().robots_response(path, headers)

    def build(self) -> dict[str, Page]:
        port = self.web.internal_port
        extra = []
        if self.short == "endless":
            extra = [self.link("/endless")]
        elif self.short == "flood":
            extra = [self.link("/many-headers"), self.link("/huge-header")]
        elif self.short == "drip":
            extra = [self.link("/drip")]
        elif self.short == "robots-gzipped":
            extra = [self.link("/private/a.html")]
        elif self.short == "linker":
            extra = [self.link("/go-internal")] + [self._away(url) for url in internal_urls(port)]
        pages = self.tree(3, extra)
        pages["/private/a.html"] = self.article("/private/a.html", "behind the rules", [self.link("/")])
        if self.short == "throttle":
            for target in list(pages):
                pages[target] = Page(status=429, headers=[("Retry-After", "1")], validators=False,
                                     body=b"slow down\n", content_type="text/plain")
        pages["/endless"] = Page(validators=False, headers=[("Transfer-Encoding", "chunked")],
                                 stream=Stream(length=None, chunks=_endless_chunks))
        pages["/many-headers"] = self.article("/many-headers", "many headers", validators=False,
                                              headers=[(f"X-Flood-{i}", "x" * 24) for i in range(10_000)])
        pages["/huge-header"] = self.article("/huge-header", "huge header", validators=False,
                                             headers=[("X-Huge", "h" * (2 << 20))])
        pages["/drip"] = Page(validators=False, stream=Stream(
            length=DRIP_BYTES, interval_s=0.5, chunks=lambda: iter([b"<"] * DRIP_BYTES)))
        pages["/go-internal"] = Page(status=302, location=f"http://{INTERNAL_IP}:{port}/redirected",
                                     validators=False)
        return pages

    @staticmethod
    def _away(url: str) -> Link:
        return Link(href=url, url=url, text="internal")


# --- the internal service --------------------------------------------------------------


class InternalService:
    """A tiny HTTP server on ``127.0.0.1`` (and ``[::1]`` on the same port when the machine
    has IPv6 loopback) that records every request it gets: what no crawler may reach.

    ``with InternalService(max_seconds=60) as internal: ...`` starts it on a free port
    (:attr:`port`) and stops it on exit, or by itself after ``max_seconds``.
    :attr:`requests` lists ``(address, method, path, host header)`` of every request.
    """

    def __init__(self, max_seconds: float = 120.0):
        self.max_seconds = max_seconds
        self.requests: list[tuple[str, str, str, str | None]] = []
        self.port = 0
        self.ipv6 = False
        self._servers: list[http.server.ThreadingHTTPServer] = []
        self._threads: list[threading.Thread] = []
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def _handler(self):
        service = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                with service._lock:
                    service.requests.append((self.server.server_address[0], self.command, self.path,
                                             self.headers.get("Host")))
                body = b"internal secret\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_HEAD = do_GET

            def log_message(self, *args):
                pass

        return Handler

    def start(self) -> InternalService:
        handler = self._handler()
        v4 = http.server.ThreadingHTTPServer((INTERNAL_IP, 0), handler)
        self.port = v4.server_address[1]
        self._servers.append(v4)

        class V6Server(http.server.ThreadingHTTPServer):
            address_family = socket.AF_INET6

        try:
            self._servers.append(V6Server(("::1", self.port), handler))
            self.ipv6 = True
        except OSError:
            self.ipv6 = False  # no IPv6 loopback here (or the port is taken on it)
        for server in self._servers:
            server.daemon_threads = True
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                      daemon=True)
            thread.start()
            self._threads.append(thread)
        self._timer = threading.Timer(self.max_seconds, self.stop)
        self._timer.daemon = True
        self._timer.start()
        self.started = time.monotonic()
        return self

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers = []
        for thread in self._threads:
            thread.join(5)
        self._threads = []

    def __enter__(self) -> InternalService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
