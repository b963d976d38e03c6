"""Sitemaps (sitemaps.org protocol 0.9) as a URL source and a freshness signal.

A host's robots.txt may name sitemaps (``Sitemap:`` lines, cycles/fetch/robots.py). When
the fetch worker has just read a host's robots.txt (downloaded or revalidated, so once per
``fetch.robots_cache_s``, 24 h by default: the sitemaps are re-read as often as robots.txt),
it requests the host's sitemaps on the host's own slot, before the host's pages: the same
delay, robots rules and SSRF guard as any request, archived to WARC like a page. What they
list goes to ``segments/<id>/sitemaps/`` (``schema.SITEMAP_URLS``); update merges the URLs
like outlinks and uses ``lastmod`` / ``changefreq`` / ``priority`` as scheduling hints
(cycles/update/sitemaps.py).

Bounds, each counted in ``sitemap/*`` stats when it stops something:

- per file at most :data:`MAX_URLS_PER_FILE` (50,000) URLs and ``fetch.sitemap_max_bytes``
  (50 MB) uncompressed, as the protocol says. Reading is streamed: gzip is inflated
  :data:`INFLATE_CHUNK` bytes at a time and fed to lxml's pull parser, whose finished
  ``<url>`` elements are dropped as they are read, so a gzip bomb stops at the cap without
  ever being inflated whole, and a file with 10 million entries stops at the 50,000th;
- per host and cycle ``fetch.sitemap_max_urls_per_host`` URLs (one site cannot flood the
  crawl DB) and ``fetch.sitemap_max_files_per_host`` files;
- index nesting: a sitemap index's children are read down to ``fetch.sitemap_max_depth``
  (the robots.txt-listed files are depth 0); a file seen once this cycle is not read again
  (an index listing itself, or two indexes listing each other, is a loop: ``sitemap/repeated``).

Which URLs a sitemap may list: those of its own scheme, host and port (the protocol's
"single host" rule; any path, as the big engines accept for robots.txt-listed sitemaps).
Others are dropped and counted (``sitemap/cross_host``). A robots.txt may name a sitemap on
*another* host (cross-submission); we do not fetch it (``sitemap/other_host_listed``): that
host's politeness slot belongs to another fetch worker, and its URLs would then have to be
trusted on our host's word.

Formats: XML ``<urlset>`` and ``<sitemapindex>`` (any namespace), gzip (``.xml.gz`` or
``Content-Encoding``, one layer of each at most), and plain text (one URL a line, UTF-8).
Malformed XML keeps what was read before the error (``sitemap/malformed``).

The parsing (:func:`read_sitemap`) is a pure function of the bytes; :class:`SitemapSteps` is
the worker's per-host bookkeeping.
"""

from __future__ import annotations

import datetime as dt
import re
import zlib
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, NamedTuple
from urllib.parse import urljoin, urlsplit

from lxml import etree

MAX_URLS_PER_FILE = 50_000
"""The protocol's limit of URLs (or child sitemaps) in one file."""

MAX_URL_CHARS = 2048
"""The protocol's limit on a <loc> (longer ones are dropped: ``sitemap/invalid_url``)."""

INFLATE_CHUNK = 64 * 1024
"""Bytes inflated (and fed to the parser) at a time: all of a compressed file that is ever
held uncompressed at once."""

MAX_TEXT_LINE = 4 * MAX_URL_CHARS
"""A plain-text sitemap line longer than this is dropped unread (bounds the line buffer)."""

GZIP_MAGIC = b"\x1f\x8b"

CHANGEFREQ_S = {"always": 0, "hourly": 3600, "daily": 86_400, "weekly": 7 * 86_400,
                "monthly": 30 * 86_400, "yearly": 365 * 86_400, "never": 10 * 365 * 86_400}
"""A <changefreq> as a refetch interval in seconds (update clamps it to
``[update.min_interval_s, update.max_interval_s]``)."""

FUTURE_SLACK = dt.timedelta(days=1)
"""A <lastmod> further in the future than this is ignored (``sitemap/bad_lastmod``): it
would make the URL due at every re-read."""


class Entry(NamedTuple):
    """One <url> of a urlset (or a line of a text sitemap). A tuple: 50,000 a file are made."""

    url: str
    lastmod: dt.datetime | None = None
    changefreq: str | None = None
    priority: float | None = None


@dataclass
class Sitemap:
    """What one sitemap file gave."""

    url: str
    kind: str = "empty"
    """``urlset``, ``index``, ``text``, ``malformed`` (not a sitemap, or broken before any
    element) or ``empty``."""
    entries: list[Entry] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    """The child sitemaps of an index (same host only)."""
    counters: Counter = field(default_factory=Counter)
    inflated_bytes: int = 0
    """Bytes of the file after decompression that were read (at most the cap)."""


class _Stop(Exception):
    """Reading ends here: a cap was reached (counted by whoever raised it)."""


# --- bytes ------------------------------------------------------------------------------
def _inflate(chunks: Iterable[bytes], counters: Counter, wbits: int = 16 + zlib.MAX_WBITS) -> Iterator[bytes]:
    """Gunzip a stream of chunks, :data:`INFLATE_CHUNK` bytes of output at a time.

    ``zlib``'s ``max_length`` keeps each step's output small whatever the ratio, so a
    bomb's output is never held: the caller stops pulling at its cap. Concatenated gzip
    members are read one after the other. Corrupt data ends the stream (``sitemap/bad_gzip``).
    """
    inflater = zlib.decompressobj(wbits)
    for chunk in chunks:
        data = chunk
        while data:
            try:
                out = inflater.decompress(data, INFLATE_CHUNK)
            except zlib.error:
                counters["sitemap/bad_gzip"] += 1
                return
            data = inflater.unconsumed_tail
            if inflater.eof:
                data = inflater.unused_data
                inflater = zlib.decompressobj(wbits)
            if out:
                yield out


def _pieces(raw: bytes) -> Iterator[bytes]:
    for start in range(0, len(raw), INFLATE_CHUNK):
        yield raw[start:start + INFLATE_CHUNK]


def _peek(chunks: Iterator[bytes]) -> tuple[bytes, Iterator[bytes]]:
    """The first non-empty chunk, and the stream with it put back."""
    for first in chunks:
        if first:
            def again() -> Iterator[bytes]:
                yield first
                yield from chunks
            return first, again()
    return b"", iter(())


def _capped(chunks: Iterator[bytes], result: Sitemap, max_bytes: int) -> Iterator[bytes]:
    """Pass at most ``max_bytes`` on; past it count ``sitemap/bytes_cap`` and stop."""
    for chunk in chunks:
        room = max_bytes - result.inflated_bytes
        if len(chunk) > room:
            result.inflated_bytes += max(room, 0)
            if room > 0:
                yield chunk[:room]
            result.counters["sitemap/bytes_cap"] += 1
            return
        result.inflated_bytes += len(chunk)
        yield chunk


def file_bytes(raw: bytes, content_encoding: str | None, result: Sitemap, max_bytes: int) -> Iterator[bytes]:
    """The sitemap's own bytes, streamed: a ``Content-Encoding: gzip`` layer and a gzipped
    file (``.xml.gz``: found by its magic bytes) are inflated, at most ``max_bytes`` passed on."""
    chunks: Iterator[bytes] = _pieces(raw)
    encoding = (content_encoding or "").strip().lower()
    if encoding in ("gzip", "x-gzip"):
        chunks = _inflate(chunks, result.counters)
    elif encoding == "deflate":  # zlib-wrapped (RFC 9110 §8.4.1.2); 32: a gzip header is read too
        chunks = _inflate(chunks, result.counters, 32 + zlib.MAX_WBITS)
    first, chunks = _peek(chunks)
    if first.startswith(GZIP_MAGIC):
        chunks = _inflate(chunks, result.counters)
    return _capped(chunks, result, max_bytes)


# --- values -----------------------------------------------------------------------------
def _origin(url: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80)


def same_origin(url: str, other: str) -> bool:
    """Same scheme, host and port (the protocol's single-host rule)."""
    mine = _origin(url)
    return mine is not None and mine == _origin(other)


_W3C_DATE = re.compile(r"^(\d{4})(?:-(\d{2}))?$")


def parse_lastmod(text: str | None, now: dt.datetime | None = None) -> dt.datetime | None:
    """A W3C datetime (``2024``, ``2024-05``, ``2024-05-01``, ``2024-05-01T10:00:00+02:00`` …)
    as UTC; None when absent, unreadable or more than :data:`FUTURE_SLACK` in the future."""
    if not text:
        return None
    text = text.strip()
    try:
        short = _W3C_DATE.match(text)
        if short:
            value = dt.datetime(int(short.group(1)), int(short.group(2) or 1), 1, tzinfo=dt.timezone.utc)
        else:
            value = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)  # no zone given: read as UTC
    value = value.astimezone(dt.timezone.utc)
    if value.year < 1990 or (now is not None and value > now + FUTURE_SLACK):
        return None
    return value


def parse_priority(text: str | None) -> float | None:
    """A <priority> in [0, 1]; None when absent or not such a number."""
    try:
        value = float((text or "").strip())
    except ValueError:
        return None
    return value if 0.0 <= value <= 1.0 else None


def parse_changefreq(text: str | None) -> str | None:
    value = (text or "").strip().lower()
    return value if value in CHANGEFREQ_S else None


# --- reading ----------------------------------------------------------------------------
class _Reader:
    """Collects a file's entries under the caps."""

    def __init__(self, result: Sitemap, max_urls: int, budget: int, now: dt.datetime | None):
        self.result = result
        self.max_urls = min(max_urls, MAX_URLS_PER_FILE)
        self.budget = budget
        self.now = now
        self.counters = result.counters
        self.origin = _origin(result.url)
        parts = urlsplit(result.url)
        self.prefix = f"{parts.scheme}://{parts.netloc}".lower()
        """The sitemap's own ``scheme://host[:port]`` as written: most URLs start with it,
        and then need no parsing (50,000 URLs a file)."""

    def _loc(self, text: str | None) -> str | None:
        url = (text or "").strip()
        if not url or len(url) > MAX_URL_CHARS:
            self.counters["sitemap/invalid_url"] += 1
            return None
        prefix = self.prefix
        if url[:len(prefix)].lower() == prefix and url[len(prefix):len(prefix) + 1] in ("/", "?", "#", ""):
            return url
        origin = _origin(url)
        if origin is None:
            self.counters["sitemap/invalid_url"] += 1
            return None
        if origin != self.origin:
            self.counters["sitemap/cross_host"] += 1
            return None
        return url

    def entry(self, loc: str | None, lastmod: str | None = None, changefreq: str | None = None,
              priority: str | None = None) -> None:
        url = self._loc(loc)
        if url is None:
            return
        if len(self.result.entries) >= self.max_urls:
            self.counters["sitemap/file_cap"] += 1
            raise _Stop
        if len(self.result.entries) >= self.budget:
            self.counters["sitemap/budget_cap"] += 1
            raise _Stop
        if lastmod is None and changefreq is None and priority is None:
            self.result.entries.append(Entry(url))
            return
        when, freq, prio = parse_lastmod(lastmod, self.now), parse_changefreq(changefreq), parse_priority(priority)
        for name, raw, value in (("lastmod", lastmod, when), ("changefreq", changefreq, freq),
                                 ("priority", priority, prio)):
            if raw is not None and raw.strip() and value is None:
                self.counters[f"sitemap/bad_{name}"] += 1
        self.result.entries.append(Entry(url, when, freq, prio))

    def child(self, loc: str | None) -> None:
        url = self._loc(loc)
        if url is None:
            return
        if len(self.result.children) >= self.max_urls:
            self.counters["sitemap/file_cap"] += 1
            raise _Stop
        self.result.children.append(url)


def _local(tag) -> str:
    """A tag's name without its namespace (any namespace is accepted); "" for a comment."""
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


def _read_xml(chunks: Iterator[bytes], reader: _Reader) -> None:
    """Stream the XML through lxml's pull parser; each finished child of the root is read
    and dropped at once, so the tree never holds more than one entry."""
    result = reader.result
    # No entities resolved, no network, no huge-tree mode: a hostile file cannot make
    # libxml2 expand or fetch anything, and its text nodes stay under libxml2's limits.
    # End events only (half the events of start+end): a child of the root is known by its
    # parent having no parent, and the root's name is read from the first one.
    parser = etree.XMLPullParser(events=("end",), resolve_entities=False, no_network=True,
                                 huge_tree=False, remove_comments=True, remove_pis=True)
    root = None
    try:
        for chunk in chunks:
            parser.feed(chunk)
            for _, elem in parser.read_events():
                parent = elem.getparent()
                if parent is None or parent.getparent() is not None:
                    continue  # the root's own end, or inside an entry (read with it)
                if root is None:
                    root = _local(parent.tag)
                    result.kind = {"urlset": "urlset", "sitemapindex": "index"}.get(root, "malformed")
                    if result.kind == "malformed":
                        result.counters["sitemap/not_a_sitemap"] += 1
                        return
                name = _local(elem.tag)
                values = {_local(child.tag): child.text for child in elem}
                elem.clear()
                parent.remove(elem)  # drop what was read: memory stays one entry deep
                if name == "url" and root == "urlset":
                    reader.entry(values.get("loc"), values.get("lastmod"), values.get("changefreq"),
                                 values.get("priority"))
                elif name == "sitemap" and root == "sitemapindex":
                    reader.child(values.get("loc"))
        top = parser.close()
        if root is None and top is not None:  # a root without entries
            result.kind = {"urlset": "urlset", "sitemapindex": "index"}.get(_local(top.tag), "malformed")
    except etree.XMLSyntaxError:
        result.counters["sitemap/malformed"] += 1
        if root is None:
            result.kind = "malformed"
    except _Stop:
        pass


def _read_text(chunks: Iterator[bytes], reader: _Reader) -> None:
    """One URL a line (UTF-8); a line over :data:`MAX_TEXT_LINE` bytes is dropped unread."""
    reader.result.kind = "text"
    pending = b""
    skipping = False
    try:
        for chunk in chunks:
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                if skipping:
                    skipping = False
                    reader.counters["sitemap/invalid_url"] += 1
                    continue
                _text_line(line, reader)
            if len(pending) > MAX_TEXT_LINE:
                pending, skipping = b"", True
        if pending and not skipping:
            _text_line(pending, reader)
    except _Stop:
        pass


def _text_line(line: bytes, reader: _Reader) -> None:
    line = line.strip().removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark on the first line
    if not line:
        return
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        reader.counters["sitemap/invalid_url"] += 1
        return
    reader.entry(text)


def read_sitemap(raw: bytes, url: str, *, content_encoding: str | None = None, max_bytes: int = 50 * 1024 * 1024,
                 max_urls: int = MAX_URLS_PER_FILE, budget: int = MAX_URLS_PER_FILE,
                 now: dt.datetime | None = None) -> Sitemap:
    """Read one sitemap file (its body as downloaded) fetched from ``url``.

    At most ``max_bytes`` of the (inflated) file are read, at most ``min(max_urls, 50,000)``
    URLs and ``budget`` (what the host may still add this cycle) kept. Never raises on
    any input: what cannot be read is counted in the result's ``counters``.
    """
    result = Sitemap(url)
    reader = _Reader(result, max_urls, budget, now)
    chunks = file_bytes(raw, content_encoding, result, max_bytes)
    first, chunks = _peek(chunks)
    head = first.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head:
        result.kind = "empty"
    elif head.startswith(b"<"):
        _read_xml(chunks, reader)
    else:
        _read_text(chunks, reader)
    result.counters["sitemap/urls"] += len(result.entries)
    return result


# --- the worker's bookkeeping ---------------------------------------------------------
@dataclass
class HostSitemaps:
    """One host's sitemaps in this cycle."""

    pending: deque = field(default_factory=deque)
    """(url, depth) still to request."""
    seen: set = field(default_factory=set)
    files: int = 0
    urls: int = 0


class SitemapSteps:
    """The sitemap steps of one partition's fetch (``fetch.sitemaps``), counting into ``stats``.

    The worker calls :meth:`start` when a host's robots.txt was just read, asks
    :meth:`next_url` before each page request of the host, and hands each sitemap response
    to :meth:`read`, which returns the rows for ``schema.SITEMAP_URLS``.
    """

    def __init__(self, fc, stats: Counter):
        self.fc = fc
        self.stats = stats
        self.hosts: dict[str, HostSitemaps] = {}

    def start(self, host: str, robots_url: str, listed: list[str]) -> None:
        if not self.fc.sitemaps or not listed or host in self.hosts:
            return
        state = self.hosts[host] = HostSitemaps()
        for url in listed:
            url = urljoin(robots_url, url.strip())
            if not same_origin(url, robots_url):
                self.stats["sitemap/other_host_listed"] += 1
                continue
            self._queue(state, url, 0)

    def _queue(self, state: HostSitemaps, url: str, depth: int) -> None:
        url = url.split("#", 1)[0]
        if url in state.seen:
            self.stats["sitemap/repeated"] += 1
            return
        if depth > self.fc.sitemap_max_depth:
            self.stats["sitemap/too_deep"] += 1
            return
        if len(state.seen) >= self.fc.sitemap_max_files_per_host:
            self.stats["sitemap/files_cap"] += 1
            return
        state.seen.add(url)
        state.pending.append((url, depth))

    def next_url(self, host: str, allowed: Callable[[str], bool]) -> tuple[str, int] | None:
        """The host's next sitemap to request (robots rules obeyed), or None."""
        state = self.hosts.get(host)
        while state is not None and state.pending:
            url, depth = state.pending.popleft()
            if not allowed(url):
                self.stats["sitemap/robots_denied"] += 1
                continue
            return url, depth
        return None

    def read(self, host: str, url: str, depth: int, status: int | None, raw: bytes,
             content_encoding: str | None, now: dt.datetime) -> list[dict]:
        """Read a sitemap response; its child sitemaps are queued, its URLs returned as rows."""
        state = self.hosts.setdefault(host, HostSitemaps())
        state.files += 1
        self.stats["sitemap/requests"] += 1
        if status is None or not 200 <= status < 300:
            self.stats[f"sitemap/status/{status if status is not None else 'none'}"] += 1
            return []
        budget = max(0, self.fc.sitemap_max_urls_per_host - state.urls)
        found = read_sitemap(raw, url, content_encoding=content_encoding, max_bytes=self.fc.sitemap_max_bytes,
                             budget=budget, now=now)
        self.stats.update(found.counters)
        self.stats[f"sitemap/kind/{found.kind}"] += 1
        self.stats["sitemap/inflated_bytes_max"] = max(self.stats["sitemap/inflated_bytes_max"],
                                                       found.inflated_bytes)
        self.stats["sitemap/entries_held_max"] = max(self.stats["sitemap/entries_held_max"],
                                                     len(found.entries))
        for child in found.children:
            self._queue(state, child, depth + 1)
        state.urls += len(found.entries)
        return [{"sitemap_url": url, "url": e.url, "lastmod": e.lastmod, "changefreq": e.changefreq,
                 "priority": e.priority} for e in found.entries]
