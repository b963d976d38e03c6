"""Server glue: turning a :class:`~testweb.model.Page` into bytes on the wire.

:class:`Response` (what the server sends), the standard HTML rendering of a page
(:func:`render`), conditional requests (:func:`not_modified`), HTTP dates and the
byte-bounded cache of rendered bodies (:class:`PageCache`).
"""

from __future__ import annotations

import html
from collections import OrderedDict
from dataclasses import dataclass
from email.utils import formatdate, parsedate_to_datetime
from functools import lru_cache
from typing import TYPE_CHECKING

from testweb.model import Page, Stream, filler

if TYPE_CHECKING:  # only for annotations: host.py imports this module
    from testweb.host import HostProfile


@dataclass
class Response:
    """An answer ready for the wire (the server adds Date, Server, Content-Length)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    stream: Stream | None = None
    date: str | None = None
    """``Date`` header to send instead of the real time (the changing host's virtual time)."""


def not_modified(headers: dict[str, str], etag: str, last_modified: int) -> bool:
    """RFC 9110 §13.2.2: If-None-Match decides when present (weak comparison), else
    If-Modified-Since; an unparsable date is ignored."""
    inm = headers.get("if-none-match")
    if inm is not None:
        if inm.strip() == "*":
            return True
        return etag in (t.strip().removeprefix("W/") for t in inm.split(","))
    ims = headers.get("if-modified-since")
    if ims:
        when = parse_http_date(ims)
        return when is not None and last_modified <= when
    return False


@lru_cache(maxsize=1 << 16)
def http_date(ts: float) -> str:
    """An IMF-fixdate (RFC 9110 §5.6.7). Cached: a page's Last-Modified is a fixed time, and
    formatdate's ~5 µs were paid on every answer."""
    return formatdate(ts, usegmt=True)


def parse_http_date(value: str) -> float | None:
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def render(profile: HostProfile, page: Page) -> bytes:
    """The standard HTML of a page: head, nav of links, filler text, footer."""
    if page.body is not None:
        return page.body
    esc = html.escape
    title = esc(page.title)
    head = ['<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n',
            f"<title>{title}</title>\n"]
    if page.base_href:
        head.append(f'<base href="{esc(page.base_href)}">\n')
    if page.meta_nofollow:
        head.append('<meta name="robots" content="nofollow">\n')
    head.append('<meta name="viewport" content="width=device-width, initial-scale=1">\n'
                "</head>\n<body>\n<header><nav><ul>\n")
    anchors = []
    for link in page.links:
        rel = f' rel="{esc(link.rel)}"' if link.rel else ""
        anchors.append(f'<li><a href="{esc(link.href)}"{rel}>{esc(link.text)}</a></li>\n')
    head.extend(anchors)
    head.append(f"</ul></nav></header>\n<main>\n<h1>{title}</h1>\n")
    tail = (f"</main>\n<footer><p>{esc(profile.name)} &middot; a page of the crawl test web"
            "</p></footer>\n</body>\n</html>\n")
    start = "".join(head).encode()
    text = filler(profile.web.seed, page.key, page.text_bytes - len(start) - len(tail))
    return start + text + tail.encode()


class PageCache:
    """A byte-bounded LRU of rendered bodies, so refetch benchmarks don't re-render."""

    def __init__(self, max_bytes: int = 64 * 1024 * 1024):
        self.max_bytes = max_bytes
        self.size = 0
        self._items: OrderedDict[tuple[str, str, int], bytes] = OrderedDict()

    def get(self, key: tuple[str, str, int]) -> bytes | None:
        body = self._items.get(key)
        if body is not None:
            self._items.move_to_end(key)
        return body

    def put(self, key: tuple[str, str, int], body: bytes) -> None:
        if len(body) > self.max_bytes // 8:
            return
        self._items[key] = body
        self.size += len(body)
        while self.size > self.max_bytes:
            _, old = self._items.popitem(last=False)
            self.size -= len(old)
