"""Sitemap hosts: robots.txt ``Sitemap:`` lines, good sitemaps and hostile ones.

Switched on with ``Web(..., sitemaps=True)`` (``serve --sitemaps``, ``TestWeb(sitemaps=True)``);
the hosts live on ``127.0.61.x`` (:data:`~testweb.model.KIND_IP_PREFIX`). Each has ``/``
(on ``sm-good`` linking ``/p/0.html``), and:

- ``sm-good``: robots.txt disallows ``/private/`` and names ``/index.xml`` (an index of
  ``/s1.xml.gz``, a gzipped urlset, and ``/s2.txt``, a text sitemap), ``/private/sitemap.xml``
  (disallowed: must never be requested) and ``/elsewhere.xml`` on ``sm-bad`` (another host:
  must never be requested). ``s1`` lists :data:`LISTED` (pages linked from nowhere, with
  changefreq and priority), ``/stale.html`` (lastmod 2023-01-01) and ``/fresh.html``, whose
  lastmod is the real time of the request: a crawler re-reading the sitemap after fetching
  ``/fresh.html`` finds it changed since.
- ``sm-bomb``: names ``/bomb.xml.gz``, a gzip file that inflates to :data:`BOMB_MIB` MiB.
- ``sm-huge``: names ``/huge.xml``, a urlset of :data:`HUGE_ENTRIES` (10 million) entries
  made as they are sent (chunked), so the server never holds them; they are images
  (``/img/N.jpg``), which update's URL filters drop, so the test crawl stays small.
- ``sm-bad``: names ``/loop-a.xml`` and ``/loop-b.xml`` (indexes listing themselves and each
  other), ``/cross.xml`` (its own URLs and other hosts', and another scheme) and
  ``/broken.xml`` (two entries, then malformed XML).
"""

from __future__ import annotations

import gzip
import time
import zlib
from typing import Iterator

from testweb.host import SmallHost
from testweb.model import DOMAIN, Page, Robots, Stream
from testweb.respond import Response

SITEMAP_HOSTS = ("sm-good", "sm-bomb", "sm-huge", "sm-bad")
"""Short names of the sitemap hosts, in address order."""

LISTED = ("/listed/0.html", "/listed/1.html")
"""Pages of ``sm-good`` that only its sitemaps name."""

TEXT_LISTED = ("/p/0.html", "/text-only.html")
"""What ``sm-good``'s text sitemap lists."""

BOMB_MIB = 64
HUGE_ENTRIES = 10_000_000
CROSS_OWN = ("/cross/0.html", "/cross/1.html", "/cross/2.html")
CROSS_FOREIGN = 4
"""``/cross.xml``: its own three URLs and this many on other hosts or schemes."""

_bomb_cache: list[bytes] = []


def sitemap_hosts(web, prefix: str) -> list[SmallHost]:
    return [SitemapHost(web, short, f"{prefix}{1 + j}") for j, short in enumerate(SITEMAP_HOSTS)]


def bomb() -> bytes:
    """gzip of ``<urlset>`` and :data:`BOMB_MIB` MiB of blanks (~65 KB; made once)."""
    if not _bomb_cache:
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        blanks = b" " * (1 << 20)
        _bomb_cache.append(packer.compress(b"<urlset>") + b"".join(packer.compress(blanks) for _ in range(BOMB_MIB))
                           + packer.flush())
    return _bomb_cache[0]


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _w3c(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class SitemapHost(SmallHost):
    """One sitemap host (module doc); ``short`` picks its files."""

    kind = "sitemaps"

    def __init__(self, web, short: str, ip: str):
        super().__init__(web, f"{short}.{DOMAIN}", ip)
        self.short = short
        lines = {"sm-good": ["/index.xml", "/private/sitemap.xml", self.web.origin(f"sm-bad.{DOMAIN}") + "/elsewhere.xml"],
                 "sm-bomb": ["/bomb.xml.gz"], "sm-huge": ["/huge.xml"],
                 "sm-bad": ["/loop-a.xml", "/loop-b.xml", "/cross.xml", "/broken.xml"]}[short]
        disallowed = ["/private/"] if short == "sm-good" else []
        self.robots = Robots(groups={"*": disallowed})
        text = self.robots.render() + b"".join(
            f"Sitemap: {line if line.startswith('http') else self.origin + line}\n".encode() for line in lines)
        self.robots = Robots(groups={"*": disallowed}, text=text)

    def build(self) -> dict[str, Page]:
        # Only sm-good's home links a page: the others' URLs come from their sitemaps alone.
        pages = self.tree(1 if self.short == "sm-good" else 0, [])
        for target in (*LISTED, "/fresh.html", "/stale.html", "/text-only.html", *CROSS_OWN):
            pages[target] = self.article(target, target, [self.link("/")])
        return pages

    # --- the sitemap files ------------------------------------------------------------
    def handle(self, method: str, target: str, headers: dict[str, str]) -> Response:
        body = self.sitemap(target.partition("?")[0])
        if body is None:
            return super().handle(method, target, headers)
        return body

    def _xml(self, body: str) -> Response:
        return Response(200, [("Content-Type", "application/xml")], body.encode())

    def _urlset(self, entries: list[str]) -> str:
        return ('<?xml version="1.0" encoding="UTF-8"?>\n'
                '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">' + "".join(entries) + "</urlset>")

    def _index(self, targets: list[str]) -> str:
        return ('<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                + "".join(f"<sitemap><loc>{self.url(t)}</loc></sitemap>" for t in targets) + "</sitemapindex>")

    def sitemap(self, path: str) -> Response | None:
        short = self.short
        if short == "sm-good" and path == "/index.xml":
            return self._xml(self._index(["/s1.xml.gz", "/s2.txt"]))
        if short == "sm-good" and path == "/s1.xml.gz":
            entries = [f"<url><loc>{self.url(t)}</loc><changefreq>daily</changefreq><priority>0.9</priority></url>"
                       for t in LISTED]
            entries.append(f"<url><loc>{self.url('/stale.html')}</loc><lastmod>2023-01-01</lastmod></url>")
            entries.append(f"<url><loc>{self.url('/fresh.html')}</loc><lastmod>{_w3c(time.time())}</lastmod></url>")
            return Response(200, [("Content-Type", "application/gzip")],
                            gzip.compress(self._urlset(entries).encode(), mtime=0))
        if short == "sm-good" and path == "/s2.txt":
            return Response(200, [("Content-Type", "text/plain")],
                            "".join(self.url(t) + "\n" for t in TEXT_LISTED).encode())
        if short == "sm-bomb" and path == "/bomb.xml.gz":
            return Response(200, [("Content-Type", "application/gzip")], bomb())
        if short == "sm-huge" and path == "/huge.xml":
            return Response(200, [("Content-Type", "application/xml"), ("Transfer-Encoding", "chunked")],
                            stream=Stream(length=None, chunks=self._huge_chunks))
        if short == "sm-bad" and path == "/loop-a.xml":
            return self._xml(self._index(["/loop-a.xml", "/loop-b.xml"]))
        if short == "sm-bad" and path == "/loop-b.xml":
            return self._xml(self._index(["/loop-a.xml", "/loop-b.xml"]))
        if short == "sm-bad" and path == "/cross.xml":
            foreign = [self.web.origin(f"sm-good.{DOMAIN}") + "/stolen.html", "http://example.com/x",
                       self.url("/other-scheme.html").replace("http://", "https://", 1),
                       self.web.origin(f"sm-bomb.{DOMAIN}") + "/p/0.html"]
            assert len(foreign) == CROSS_FOREIGN
            return self._xml(self._urlset([f"<url><loc>{u}</loc></url>" for u in
                                           [self.url(t) for t in CROSS_OWN] + foreign]))
        if short == "sm-bad" and path == "/broken.xml":
            good = "".join(f"<url><loc>{self.url(t)}</loc></url>" for t in ("/broken/0.html", "/broken/1.html"))
            return self._xml('<?xml version="1.0"?><urlset>' + good + "<url><loc>&nope;<url></loc><<<")
        return None

    def _huge_chunks(self) -> Iterator[bytes]:
        """The 10 million entries, 1,000 to a chunk, made as they are sent."""
        yield _chunk(b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">')
        origin = self.origin.encode()
        for start in range(0, HUGE_ENTRIES, 1000):
            yield _chunk(b"".join(b"<url><loc>%s/img/%d.jpg</loc></url>" % (origin, i)
                                  for i in range(start, start + 1000)))
        yield _chunk(b"</urlset>")
        yield b"0\r\n\r\n"
