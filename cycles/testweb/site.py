"""The model of the test web: hosts, their robots.txt, their pages and their links.

Everything here is a pure function of the parameters (hosts, pages, page size, seed, port):
the server (``server.py``) renders responses from it and the tests ask it what a polite
crawler must and must not request (:meth:`Web.expected_reachable`, :meth:`Web.must_not_request`).
Both sides build the same :class:`Web` from the same parameters, so nothing but the
parameters crosses the process boundary.

Shape of the web
----------------
- Regular host ``i`` (``0 <= i < hosts``) is ``h{i}.web.test`` on the loopback address
  :func:`regular_ip` (``127.1.0.1``, ``127.1.0.2``, ...). Every host listens on the same port,
  like port 80 on the real web; the crawler maps names to addresses through
  :meth:`Web.resolve_map` (``fetch.resolve``).
- Each regular host has ``/`` and ``/p/{k}.html`` for ``k < pages``. ``/`` links to page 0
  and 1; page ``k`` links to ``2k+1``, ``2k+2`` (a binary tree, so page ``k`` is about
  ``log2 k`` hops deep and a ``max_depth`` of 20 never hides a page), to ``k+1`` and back, and
  to three pages of other hosts picked from the seed. Links come in every form the real web
  uses: root-relative, path-relative, ``./`` and ``../``, absolute, scheme-relative, with a
  fragment, with an upper-case host name. Pages with ``k % 4 == 1`` carry
  ``<base href="http://host/">`` and write same-host links as ``p/x.html``, which resolve to
  the right page only if the base is honoured.
- Each regular host also has ``/nofollow-only.html`` (linked only with ``rel=nofollow``),
  ``/meta-nofollow.html`` (``<meta name=robots content=nofollow>``; linked normally) whose
  only link goes to ``/meta-nofollow-target.html``, and ``/cgi-bin/search?q=...``, disallowed
  by its robots.txt. None of the three bait pages may be requested by a polite crawler.
- With ``special=True`` the hosts of :data:`SPECIAL_HOSTS` are added (robots.txt variants and
  ``odd.web.test`` with redirects, slow and huge bodies, error statuses, a Latin-1 page and
  broken markup). Regular ``/`` pages link to them so a crawl from regular seeds finds them.
- Three more kinds, each off by default (``Web(..., traps=True, neardups=True,
  changing=True)``, ``serve --traps --neardups --changing``), so existing tests and benchmarks
  see the same web as before. Regular ``/`` pages link to these hosts as to the special ones
  (host 0 to all of them). Each kind has its own address block (:data:`KIND_IP_PREFIX`).

  * **Traps** (``traps.py``, ``127.0.101.x``): ``trap-calendar`` (``/cal/2024/01`` linking
    the previous and next month and every day, for ever), ``trap-session`` (every link
    carries a fresh ``?sid=``, ``;jsessionid=``, ``?session=`` or ``?s=`` value: the first two
    are dropped by a normaliser, the last two are not), ``trap-repeat`` (broken relative links
    ``b/`` and ``a/`` building ``/a/b/a/b/...``, and ``x/`` building ``/x/x/x/...``),
    ``trap-numbers`` (``/item?id=N`` to ``N+1``, ``/list/page/N`` to ``N+1``, no end).
    Each also has eleven good pages, ``/`` and ``/p/0.html`` .. ``/p/9.html``
    (:meth:`Web.good_pages`), every one of which links into the trap. :meth:`Web.is_trap`
    says whether a URL is inside a trap. The oracle walks never enter a trap: trap URLs are
    in neither :meth:`Web.expected_reachable` nor :meth:`Web.must_not_request`; a test
    bounds how many of them were requested instead. Trap pages are small and share their
    host's text, as empty calendar days and missing items do on the real web.
  * **Near-duplicates** (``neardups.py``, ``127.0.102.x``): ``dup-news`` has ten articles of
    about 800 words on one template (``/article/{n}.html``); variants that change only the
    date line (``/v/date/{n}.html``), the visit counter (``/v/counter/{n}.html``) or the
    advertisement line (``/v/ad/{n}.html``); exact copies at ``/article/{n}.html?print=1``
    and ``/article/{n}/index.html``. ``dup-syndicate`` serves the same articles in another
    site's header, nav and footer (``/story/{n}.html``). ``mirror-of-h1`` serves h1's pages
    byte for byte (so its absolute links point at h1, as a copied site's do). The labels:
    :meth:`Web.neardup_pairs`, :meth:`Web.exact_duplicate_groups`, :meth:`Web.mirror_hosts`.
  * **Changing pages** (``changing.py``, ``127.0.103.x``): ``changing`` has ``/c/{k}.html``
    for ``k < 15`` whose content version at virtual time ``t`` is
    ``floor((t + phase_k) / period_k)``, periods cycling through an hour, four hours, a day,
    a week and never (:meth:`Web.change_period`, :meth:`Web.version_at`). Pages 0-9 get new
    text with each version, pages 10-14 only a new "Updated" line
    (:meth:`Web.change_kind`). ETag and Last-Modified follow the version (Last-Modified is
    the virtual time the version began), so a conditional request gets 304 until the next
    change, and the host's ``Date`` header is the virtual time.

  * **Hostile** (``hostile.py``, ``127.0.60.x``, ``hostile=True, internal_port=P``): robots.txt
    files that must not grant access (oversized, UTF-16 mark on 8-bit text, gzip that is
    not), a 429 host, an endless chunked body, header floods, a drip, and links and a
    redirect into an internal service on ``127.0.0.1:P`` that a crawler must never reach.

Virtual clock
-------------
Time on the changing host is :attr:`Web.clock`, a :class:`VirtualClock`: a Unix time that
starts at :data:`CLOCK_START` (2024-01-01T00:00:00Z) and stands still unless moved, so the
web stays a function of its parameters and the clock. The server moves it when told on its
control address :data:`CONTROL_IP` (same port, not in the resolve map, so no crawler finds
it): ``GET /__clock`` answers ``{"t": ..., "rate": ...}``; ``?t=T`` sets it, ``?advance=S``
moves it on, ``?rate=R`` lets it run at ``R`` virtual seconds per real second (0 stops
it), ``?offset=S`` makes it the real time plus ``S`` seconds, running at rate 1: the
crawler's own clock (``cycles/clock.py``) with ``CRAWL_CLOCK_OFFSET_S=S``. The answer comes after the change is made, so the next request sees the new time.
:meth:`TestWeb.set_clock <cycles.testweb.harness.TestWeb.set_clock>` does this and keeps the
test side's model in step; every request log line carries the virtual time it was served at
(``clock_t``). Keep the virtual time before the real one if a crawler under test compares
Last-Modified with its own clock.

Extending
---------
A host is a :class:`HostProfile`: it answers :meth:`HostProfile.page` with a :class:`Page`
(status, links, body source) for a request target, and has a :class:`Robots`. The server
turns a :class:`Page` into bytes (conditional requests included) and the reachability oracle
reads its ``links``. New kinds of hosts (traps, near-duplicates, pages that change) subclass
:class:`HostProfile` and are added in :meth:`Web._build_profiles`.
"""

from __future__ import annotations

import hashlib
import html
import random
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from email.utils import formatdate, parsedate_to_datetime
from functools import lru_cache
from typing import Callable, Iterable, Iterator
from urllib.parse import quote, unquote, urljoin, urlsplit

DOMAIN = "web.test"
"""Every host name ends in this (RFC 6761 reserves ``.test``; it never resolves for real)."""

ROBOTS_AGENT = "crawlbot"
"""Default product token the oracle evaluates robots.txt for (``config.fetch.robots_agent``)."""

SPECIAL_IP_PREFIX = "127.0.100."
"""Special hosts live on ``127.0.100.1``, ``127.0.100.2``, ... apart from the regular ones."""

LAST_MODIFIED_BASE = 1_704_067_200
"""2024-01-01T00:00:00Z. Each page's Last-Modified is a fixed, seed-chosen day before it, so
validators are the same in every run (a recrawl test can replay them)."""

KIND_IP_PREFIX = {"traps": "127.0.101.", "neardups": "127.0.102.", "changing": "127.0.103.",
                  "hostile": "127.0.60."}
"""Address block of each optional kind of host; host ``j`` of a kind is ``{prefix}{1 + j}``.
Separate blocks keep a host's address the same whichever other kinds are switched on."""

KINDS = tuple(KIND_IP_PREFIX)
"""The optional kinds of hosts, in the order their hosts are added."""

CONTROL_IP = "127.0.0.2"
"""The server's control address (same port as the hosts): ``/__clock`` (module doc)."""

CLOCK_START = LAST_MODIFIED_BASE
"""Where the virtual clock starts: 2024-01-01T00:00:00Z."""

SPECIAL_HOSTS = (
    "robots-disallow", "robots-delay", "robots-404", "robots-503", "robots-bom",
    "robots-redirect", "robots-agent", "odd",
)
"""Names (without ``.web.test``) of the special hosts, in address order."""

SLOW_PATHS = ("/drip",)
"""Targets that take a long time to answer; a test crawling the whole web may want to
see them requested without waiting for them (the drip lasts a minute)."""


# --- small deterministic helpers ---------------------------------------------------------

_MASK = (1 << 64) - 1


def _mix(*parts: int) -> int:
    """SplitMix64 over the parts: a fast, process-independent hash of small integers.
    (Python's ``hash`` of strings is salted per process and must not be used here.)"""
    x = 0x9E3779B97F4A7C15
    for p in parts:
        x = (x ^ (p & _MASK)) * 0xBF58476D1CE4E5B9 & _MASK
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
        x ^= x >> 31
    return x


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def regular_ip(i: int) -> str:
    """Loopback address of regular host ``i``: ``127.{1 + i // 65024}.{(i // 254) % 256}.{1 + i % 254}``.
    The last octet skips 0 and 255 so no address looks like a network or broadcast one;
    this gives room for 16 million hosts. All of 127.0.0.0/8 routes to ``lo`` on Linux."""
    return f"127.{1 + i // (254 * 256)}.{(i // 254) % 256}.{1 + i % 254}"


def special_ip(j: int) -> str:
    """Loopback address of the ``j``-th special host (``127.0.100.{1 + j}``)."""
    return f"{SPECIAL_IP_PREFIX}{1 + j}"


def regular_name(i: int) -> str:
    return f"h{i}.{DOMAIN}"


def special_name(short: str) -> str:
    return f"{short}.{DOMAIN}"


def canonical_target(target: str) -> str:
    """The request target as the model keys it: path percent-encoded the way a browser does
    (UTF-8, upper-case hex), query kept as sent. ``/caf%c3%a9.html`` and ``/café.html`` both
    become ``/caf%C3%A9.html``."""
    path, sep, query = target.partition("?")
    if "%" in path or not path.isascii():
        path = quote(unquote(path, errors="surrogateescape"), safe="/:@!$&'()*+,;=-._~",
                     errors="surrogateescape")
    return path + sep + query


# --- filler text ----------------------------------------------------------------------------

_WORDS = """
the of and to in is that for it as was with be by on not he this are or his from at which
but have an they you were her she there been one all we their has would when if can who will
more no out so said what up its about into than them only other new some time could these two
may first then do any like my now over such our man me even most made after also did many
before must through back years where much your way well down should because each just those
people how too little state good very make world still own see men work long get here between
both life being under never day same another know while last might us great old year off come
since against go came right used take three states himself few house use during without again
place around however home small found thought went say part once general high upon school
every does got united left number course war until always away something fact though water
less public put think almost hand enough far took head yet government system better set told
nothing night end why called didnt eyes find going look asked later knew point next program
city business give group toward young days let room president side social given present
several order national second possible rather per face among form important often things
looked early white case john become large big need four within felt along children saw best
church ever least power development light thing seemed family interest want members others
mind country area done open god service certain kind problem began different door thus help
means sense whole matter perhaps itself york times law human line above name example action
company hands local show whether five history gave today either act feet across taken past
quite anything seen having death experience body word half really field car words already
themselves information tell together college shall money period held keep sure real probably
free seems political cannot behind miss question air office making brought whose special
major heard federal became study ago moment available known result street economic boy
""".split()

PARAGRAPH_POOL = 8192
"""Paragraphs of filler text shared by all pages. A page draws ~3 per KB along an arithmetic
progression of the pool, so two pages share about one paragraph: pages are distinct enough
that no near-duplicate detector mistakes one for another."""


@lru_cache(maxsize=4)
def _paragraphs(seed: int) -> tuple[bytes, ...]:
    rng = random.Random(seed)
    words = rng.choices(_WORDS, k=PARAGRAPH_POOL * 4 * 13)
    lengths = [rng.randint(7, 19) for _ in range(PARAGRAPH_POOL * 4)]
    out = []
    pos = 0
    for p in range(PARAGRAPH_POOL):
        sentences = []
        for s in range(4):
            n = lengths[p * 4 + s]
            chunk = words[pos:pos + n]
            pos = (pos + n) % (len(words) - 20)
            sentences.append(chunk[0].capitalize() + " " + " ".join(chunk[1:]) + ".")
        out.append(("<p>" + " ".join(sentences) + "</p>\n").encode())
    return tuple(out)


def filler(seed: int, key: int, nbytes: int) -> bytes:
    """About ``nbytes`` of ``<p>`` paragraphs, a deterministic function of ``(seed, key)``."""
    if nbytes <= 0:
        return b""
    pool = _paragraphs(seed)
    h = _mix(seed, key)
    start = h % PARAGRAPH_POOL
    step = (h >> 20) % PARAGRAPH_POOL | 1  # odd, hence coprime to the power-of-two pool size
    parts = []
    size = 0
    j = start
    while size < nbytes:
        para = pool[j]
        parts.append(para)
        size += len(para)
        j = (j + step) % PARAGRAPH_POOL
    return b"".join(parts)


# --- the model's records ------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """One ``<a href>`` of a page: how it is written and what it must resolve to."""

    href: str
    """The attribute value as written in the HTML (relative, absolute, with a fragment...)."""

    url: str
    """The absolute URL a correct parser resolves it to (base honoured, fragment dropped,
    host lower-cased, default port dropped). This is the oracle's truth."""

    nofollow: bool = False
    """The link carries ``rel=nofollow`` (possibly among other rel values)."""

    rel: str = ""
    """The ``rel`` attribute as written (``""`` for none)."""

    text: str = ""
    """Anchor text."""


@dataclass
class Stream:
    """A body sent piece by piece, respecting flow control, for slow or huge responses."""

    length: int | None
    """Content-Length announced in the headers; None for none (the chunks then frame
    themselves, e.g. with ``Transfer-Encoding: chunked``, as the hostile host's endless body)."""

    chunks: Callable[[], Iterator[bytes]]
    """Makes the pieces; their lengths add up to ``length``."""

    interval_s: float = 0.0
    """Pause before each piece (1.0 for the drip)."""


@dataclass
class Page:
    """What one request target answers. The server renders it; the oracle reads ``links``."""

    status: int = 200
    title: str = ""
    links: list[Link] = field(default_factory=list)
    """Every ``<a href>`` in the body, in order (nofollow ones included)."""

    base_href: str | None = None
    """Value of ``<base href>``, if the page has one."""

    meta_nofollow: bool = False
    """``<meta name="robots" content="nofollow">``: none of the links may be followed."""

    location: str | None = None
    """Absolute target of a 3xx (sent as ``Location``: ``location_header`` if set, else this)."""

    location_header: str | None = None
    """``Location`` exactly as sent, when it differs from ``location`` (a relative one)."""

    headers: list[tuple[str, str]] = field(default_factory=list)
    """Extra response headers (``Retry-After``...)."""

    content_type: str = "text/html; charset=utf-8"

    body: bytes | None = None
    """A ready body; ``None`` means render the standard HTML page from title and links."""

    stream: Stream | None = None
    """A body sent in pieces (drip, big files); wins over ``body``."""

    text_bytes: int = 0
    """Filler text to add when rendering the standard page."""

    key: int = 0
    """Chooses the filler text (distinct pages, distinct keys)."""

    validators: bool = True
    """Send ``ETag``/``Last-Modified`` and answer conditional requests with 304."""

    version: int = 0
    """Content version; part of the ETag and Last-Modified (and of the render cache key).
    Static pages stay at 0; the changing host's pages follow the virtual clock."""

    def followable(self) -> list[str]:
        """Absolute URLs a polite crawler follows from this page (redirect target included)."""
        if self.location is not None:
            return [self.location]
        if self.meta_nofollow:
            return []
        return [link.url for link in self.links if not link.nofollow]


@dataclass
class Robots:
    """A host's robots.txt, structured (what the oracle evaluates) and rendered (what is served)."""

    status: int = 200
    """HTTP status of ``/robots.txt``. 4xx means no rules (fetch everything, RFC 9309
    §2.3.1.3); 5xx means fetch nothing (§2.3.1.4)."""

    groups: dict[str, list[str]] = field(default_factory=dict)
    """Product token (lower case, ``*`` for the default group) -> disallowed path prefixes.
    A token with an empty list has a group that allows everything."""

    crawl_delay_s: float | None = None
    """``Crawl-delay`` of the ``*`` group, if any."""

    text: bytes | None = None
    """Bytes served, when they are not the plain rendering of ``groups`` (a BOM...)."""

    redirect_to: str | None = None
    """``/robots.txt`` answers 301 to this same-host path, which serves the rules."""

    def render(self) -> bytes:
        if self.text is not None:
            return self.text
        lines = []
        for agent, prefixes in self.groups.items():
            lines.append(f"User-agent: {agent}")
            if agent == "*" and self.crawl_delay_s is not None:
                lines.append(f"Crawl-delay: {self.crawl_delay_s:g}")
            lines.extend(f"Disallow: {p}" for p in prefixes)
            if not prefixes:
                lines.append("Disallow:")
            lines.append("")
        return "\n".join(lines).encode()

    def allows(self, target: str, agent: str = ROBOTS_AGENT) -> bool:
        """Whether ``agent`` may fetch ``target`` (path and query), by prefix match (RFC 9309
        §2.2.2; the test web uses no wildcards). The most specific matching group wins."""
        if self.status >= 500:
            return False
        if self.status >= 400:
            return True
        agent = agent.lower()
        if agent in self.groups:
            prefixes = self.groups[agent]
        else:
            prefixes = self.groups.get("*", [])
        return not any(target.startswith(p) for p in prefixes if p)


@dataclass
class Response:
    """An answer ready for the wire (the server adds Date, Server, Content-Length)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    stream: Stream | None = None
    date: str | None = None
    """``Date`` header to send instead of the real time (the changing host's virtual time)."""


class VirtualClock:
    """The changing host's notion of now: ``t`` at the moment it was set, running on at
    ``rate`` virtual seconds per real second (0: it stands still, the default)."""

    def __init__(self, t: float = CLOCK_START, rate: float = 0.0):
        self.t = float(t)
        self.rate = float(rate)
        self.wall = time.time()

    def now(self) -> float:
        if not self.rate:
            return self.t
        return self.t + self.rate * (time.time() - self.wall)

    def set(self, t: float | None = None, advance: float | None = None,
            rate: float | None = None, offset: float | None = None) -> float:
        """Set (``t``), move on (``advance`` seconds) and/or change the ``rate``; returns now.
        ``offset`` makes it the real time shifted by that many seconds, running at rate 1
        (``cycles.clock.now()`` with ``CRAWL_CLOCK_OFFSET_S`` set to the same value)."""
        if offset is not None:
            if t is not None:
                raise ValueError("give t or offset, not both")
            t = time.time() + float(offset)
            rate = 1.0 if rate is None else rate
        now = self.now() if t is None else float(t)
        if advance is not None:
            now += float(advance)
        self.t = now
        self.wall = time.time()
        if rate is not None:
            if rate < 0:
                raise ValueError(f"clock rate must be >= 0, got {rate}")
            self.rate = float(rate)
        return now

    def state(self) -> dict:
        return {"t": self.now(), "rate": self.rate}


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


# --- hosts ----------------------------------------------------------------------------------


class HostProfile:
    """One host: name, address, robots.txt and the :class:`Page` of each target.

    Subclasses override :meth:`page` (and set ``robots``). Everything must be deterministic
    in the web's parameters: the server and the oracle each build their own copy.
    """

    kind = "base"

    has_traps = False
    """Whether :meth:`is_trap` can say yes (lets the oracle skip the call on other hosts)."""

    def __init__(self, web: Web, name: str, ip: str):
        self.web = web
        self.name = name
        self.ip = ip
        self.robots = Robots(groups={"*": []})

    # What the oracle asks of the optional kinds (the defaults: none of it applies) ------
    def is_trap(self, target: str) -> bool:
        """Whether ``target`` is inside a crawler trap."""
        return False

    def good_pages(self) -> list[str]:
        """Targets of a trap host's normal pages."""
        return []

    def change_period(self, target: str) -> float | None:
        """Seconds between changes of ``target``; None when it never changes."""
        return None

    def version_at(self, target: str, t: float) -> int:
        """Content version of ``target`` at virtual time ``t``."""
        return 0

    def change_kind(self, target: str) -> str:
        """How a new version differs: ``"never"``, ``"content"`` or ``"timestamp"``."""
        return "never"

    # URLs -------------------------------------------------------------------------------
    @property
    def origin(self) -> str:
        """``http://name[:port]`` (port omitted when it is 80, as a normaliser does)."""
        return self.web.origin(self.name)

    def url(self, target: str) -> str:
        return self.origin + target

    def link(self, target: str, href: str | None = None, *, text: str = "", rel: str = "",
             host: str | None = None) -> Link:
        """A link to ``target`` on ``host`` (default: this host), written as ``href``
        (default: root-relative, or absolute for another host)."""
        origin = self.web.origin(host) if host else self.origin
        if href is None:
            href = target if host is None or host == self.name else origin + target
        return Link(href=href, url=origin + target, nofollow="nofollow" in rel.split(),
                    rel=rel, text=text or target)

    # Answers ----------------------------------------------------------------------------
    def page(self, target: str) -> Page | None:
        """The page a target (canonical path and query) answers; ``None`` is a 404."""
        return None

    def handle(self, method: str, target: str, headers: dict[str, str]) -> Response:
        """Answer one request. ``headers`` has lower-case names."""
        target = canonical_target(target)
        path = target.partition("?")[0]
        robots = self.robots
        if path == "/robots.txt" or (robots.redirect_to and path == robots.redirect_to):
            if path == "/robots.txt" and robots.redirect_to:
                return Response(301, [("Location", robots.redirect_to),
                                      ("Content-Type", "text/plain")], b"Moved\n")
            return self.robots_response(path, headers)
        page = self.page(target)
        if page is None:
            page = Page(status=404, title="Not found", validators=False)
        return self.respond(page, target, headers)

    def robots_response(self, path: str, headers: dict[str, str]) -> Response:
        """The robots.txt (at ``path``: ``/robots.txt`` or its redirect target). A 200 carries
        ``ETag`` and ``Last-Modified`` and answers a matching conditional request with 304, so
        a crawler can revalidate an expired copy (RFC 9309 §2.4 caching)."""
        robots = self.robots
        if robots.status != 200:
            return Response(robots.status, [("Content-Type", "text/plain")],
                            f"status {robots.status}\n".encode())
        etag = self.etag(path, 0)
        modified = self.last_modified(path, 0)
        validators = [("ETag", etag), ("Last-Modified", http_date(modified))]
        if not_modified(headers, etag, modified):
            return Response(304, validators)
        return Response(200, [("Content-Type", "text/plain")] + validators, robots.render())

    def respond(self, page: Page, target: str, headers: dict[str, str]) -> Response:
        """Turn a :class:`Page` into a :class:`Response`, answering conditional requests."""
        out = [("Content-Type", page.content_type)]
        out.extend(page.headers)
        if page.location is not None:
            out.append(("Location", page.location_header or page.location))
        if page.validators and 200 <= page.status < 300:
            etag = self.etag(target, page.version)
            modified = self.last_modified(target, page.version)
            validators = [("ETag", etag), ("Last-Modified", http_date(modified))]
            if not_modified(headers, etag, modified):
                return Response(304, validators)
            out.extend(validators)
        if page.stream is not None:
            return Response(page.status, out, stream=page.stream)
        cache = self.web.cache
        key = (self.name, target, page.version)
        body = cache.get(key)
        if body is None:
            body = render(self, page)
            cache.put(key, body)
        return Response(page.status, out, body)

    def last_modified(self, target: str, version: int) -> int:
        """Fixed per target (and version): between 1 and 400 days before 2024-01-01."""
        day = 1 + _mix(self.web.seed, _str_key(self.name), _str_key(target)) % 400
        return LAST_MODIFIED_BASE - day * 86400 + version * 3600

    def etag(self, target: str, version: int) -> str:
        return '"' + _digest(f"{self.web.seed}|{self.name}|{target}|{version}|{self.web.page_bytes}") + '"'


def _str_key(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


class RegularHost(HostProfile):
    """``h{i}.web.test``: the bulk of the web (see the module doc for its link structure)."""

    kind = "regular"
    DISALLOWED = "/cgi-bin/"

    def __init__(self, web: Web, index: int):
        super().__init__(web, regular_name(index), regular_ip(index))
        self.index = index
        self.robots = Robots(groups={"*": [self.DISALLOWED]})

    def page(self, target: str) -> Page | None:
        path, _, query = target.partition("?")
        if path.startswith("/p/") and path.endswith(".html"):
            num = path[3:-5]
            if num.isdigit() and (num == "0" or num[0] != "0") and int(num) < self.web.pages:
                return self._article(int(num))
            return None
        if query:
            if path == "/cgi-bin/search":
                return self._simple(target, "Search results", [self.link("/")])
            return None
        if path == "/":
            return self._index()
        if path == "/nofollow-only.html":
            return self._simple(target, "Reachable only through nofollow", [self.link("/")])
        if path == "/meta-nofollow.html":
            page = self._simple(target, "Meta robots nofollow",
                                [self.link("/meta-nofollow-target.html", text="target")])
            page.meta_nofollow = True
            return page
        if path == "/meta-nofollow-target.html":
            return self._simple(target, "Linked only from a meta-nofollow page", [self.link("/")])
        return None

    def _simple(self, target: str, title: str, links: list[Link]) -> Page:
        return Page(title=f"{self.name}: {title}", links=links, text_bytes=self.web.page_bytes // 4,
                    key=_mix(self.index, _str_key(target)))

    def _index(self) -> Page:
        web = self.web
        i = self.index
        links = [self.link("/p/0.html", "p/0.html", text="Start reading")]
        if web.pages > 1:
            links.append(self.link("/p/1.html", "./p/1.html", text="Second page"))
        links += [
            self.link("/meta-nofollow.html", text="About our robots"),
            self.link("/nofollow-only.html", rel="nofollow", text="Sponsored"),
            self.link(f"/cgi-bin/search?q=h{i}", text="Search"),
        ]
        if web.hosts > 1:
            other = regular_name((i + 1) % web.hosts)
            links.append(self.link("/", host=other, text=f"Friends at {other}"))
        specials = web.linked_names()
        if specials:
            # Host 0 points at every special (and optional-kind) host, each other host at
            # one of them: a crawl from regular seeds discovers all of them either way.
            chosen = specials if i == 0 else [specials[i % len(specials)]]
            links += [self.link("/", host=s, text=f"Visit {s}") for s in chosen]
        return Page(title=f"{self.name}: home", links=links, text_bytes=web.page_bytes,
                    key=_mix(i, 1 << 40))

    def _article(self, k: int) -> Page:
        web = self.web
        i = self.index
        P = web.pages
        base = k % 4 == 1
        h = _mix(web.seed, i, k)
        targets = [2 * k + 1, 2 * k + 2, k + 1]
        links: list[Link] = []
        for n, t in enumerate(targets):
            if t < P:
                links.append(self._same_host(k, t, base, style=(h >> (4 * n)) % 6, n=n))
        links.append(self.link("/p/0.html", text="First page") if k else self.link("/", text="Home"))
        if k % 3 == 0:
            links.append(self.link("/nofollow-only.html", rel=("nofollow", "ugc nofollow",
                                                                "nofollow noopener")[k % 9 // 3],
                                   text="Advertisement"))
        if web.hosts > 1:
            for r in range(3):
                hr = _mix(web.seed, i, k, r + 7)
                j = hr % web.hosts
                if j == i:
                    j = (j + 1) % web.hosts
                m = (hr >> 24) % P
                name = regular_name(j)
                origin = web.origin(name)
                target = f"/p/{m}.html"
                if r == 1:
                    href = "//" + origin.split("://", 1)[1] + target  # scheme-relative
                elif r == 2 and (hr >> 50) % 3 == 0:
                    href = origin.replace(name, name.upper()) + target + "#comments"
                else:
                    href = origin + target
                links.append(Link(href=href, url=origin + target, text=f"{name} page {m}"))
        return Page(title=f"{self.name}: page {k}", links=links,
                    base_href=self.origin + "/" if base else None,
                    text_bytes=web.page_bytes, key=_mix(i, k))

    def _same_host(self, k: int, t: int, base: bool, style: int, n: int) -> Link:
        target = f"/p/{t}.html"
        text = f"Page {t}"
        if base:
            # <base href="http://host/">: only a parser honouring it gets /p/t.html;
            # one that ignores it would fetch /p/p/t.html (a 404).
            return self.link(target, f"p/{t}.html", text=text)
        if style == 0:
            return self.link(target, f"{t}.html", text=text)
        if style == 1:
            return self.link(target, f"./{t}.html", text=text)
        if style == 2:
            return self.link(target, f"../p/{t}.html", text=text)
        if style == 3:
            return self.link(target, self.origin + target, text=text)
        if style == 4:
            return self.link(target, f"{t}.html#section-{n}", text=text)
        return self.link(target, target, text=text)


class SmallHost(HostProfile):
    """A special host whose pages are a fixed table, built once the port is known."""

    kind = "special"

    def __init__(self, web: Web, name: str, ip: str):
        super().__init__(web, name, ip)
        self._pages: dict[str, Page] | None = None

    def build(self) -> dict[str, Page]:
        raise NotImplementedError

    def page(self, target: str) -> Page | None:
        if self._pages is None:
            self._pages = self.build()
        path = target.partition("?")[0]
        return self._pages.get(target) or self._pages.get(path)

    def article(self, target: str, title: str, links: Iterable[Link] = (), **kw) -> Page:
        return Page(title=f"{self.name}: {title}", links=list(links), text_bytes=1500,
                    key=_str_key(self.name + target), **kw)

    def tree(self, n: int, extra: list[Link]) -> dict[str, Page]:
        """``/`` linking ``/p/0.html`` .. ``/p/{n-1}.html`` and ``extra``; each page links home."""
        pages = {"/": self.article("/", "home", [self.link(f"/p/{k}.html") for k in range(n)] + extra)}
        for k in range(n):
            pages[f"/p/{k}.html"] = self.article(f"/p/{k}.html", f"page {k}", [self.link("/")])
        return pages


class RobotsHost(SmallHost):
    """A host whose point is its robots.txt; its pages link into the paths the rules cover."""

    kind = "robots"

    def __init__(self, web: Web, short: str, ip: str, robots: Robots, bait: list[str]):
        super().__init__(web, special_name(short), ip)
        self.robots = robots
        self.bait = bait

    def build(self) -> dict[str, Page]:
        pages = self.tree(3, [self.link(t, text="bait") for t in self.bait])
        for t in self.bait:
            pages[t] = self.article(t, "behind the rules", [self.link("/")])
        return pages


def _robots_hosts() -> dict[str, tuple[Robots, list[str]]]:
    """The robots.txt cases, by short name: the rules and the bait paths pages link to."""
    return {
        "robots-disallow": (Robots(groups={"*": ["/private/"]}),
                            ["/private/a.html", "/private/b.html"]),
        "robots-delay": (Robots(groups={"*": []}, crawl_delay_s=2), []),
        # 4xx robots.txt: no rules at all, so even /private/ may be fetched (RFC 9309 §2.3.1.3).
        "robots-404": (Robots(status=404), ["/private/a.html"]),
        # 5xx robots.txt: the whole host is off limits for now (RFC 9309 §2.3.1.4).
        "robots-503": (Robots(status=503), ["/private/a.html"]),
        "robots-bom": (Robots(groups={"*": ["/secret/"]},
                              text=b"\xef\xbb\xbfUser-agent: *\nDisallow: /secret/\n"),
                       ["/secret/a.html"]),
        # RFC 9309 §2.3.1.2: follow at least five redirects for robots.txt.
        "robots-redirect": (Robots(groups={"*": ["/hidden/"]}, redirect_to="/robots-real.txt"),
                            ["/hidden/a.html"]),
        "robots-agent": (Robots(groups={ROBOTS_AGENT: ["/nobots/"], "*": []}),
                         ["/nobots/a.html"]),
    }


BIG_BYTES = 20 * 1024 * 1024
PDF_BYTES = 2 * 1024 * 1024
DRIP_BYTES = 60
CHUNK_BYTES = 64 * 1024

LATIN1_TEXT = ("Caf\u00e9 cr\u00e8me, na\u00efve fa\u00e7ade, \u00c5ngstr\u00f6m, "
               "pi\u00f1ata, d\u00e9j\u00e0 vu, \u00fcber, \u00a3 and \u00bd.")
"""The text of ``/latin1``; a crawler that decodes the page right finds it in the page text."""


def _sized(head: bytes, tail: bytes, total: int, fill: bytes) -> Callable[[], Iterator[bytes]]:
    """Pieces of at most ``CHUNK_BYTES``: ``head``, ``fill`` repeated, ``tail``; ``total`` bytes."""
    def chunks() -> Iterator[bytes]:
        block = (fill * (CHUNK_BYTES // len(fill) + 1))[:CHUNK_BYTES]
        yield head
        remaining = total - len(head) - len(tail)
        while remaining > 0:
            piece = block[:remaining]
            remaining -= len(piece)
            yield piece
        yield tail
    return chunks


class OddHost(SmallHost):
    """``odd.web.test``: everything that is not a plain 200 HTML page."""

    kind = "odd"

    def __init__(self, web: Web, ip: str):
        super().__init__(web, special_name("odd"), ip)
        self.robots = Robots(groups={"*": []})

    TARGETS = ("/redirect", "/loop/a", "/drip", "/big", "/file.pdf", "/status/429",
               "/status/503", "/status/500", "/gone", "/missing", "/latin1", "/broken")

    def build(self) -> dict[str, Page]:
        link = self.link
        pages = self.tree(2, [link(t, text=t.strip("/")) for t in self.TARGETS])
        small = self.article
        pages["/redirect"] = Page(status=301, location=self.url("/p/0.html"), validators=False)
        # The loop's Location is relative (RFC 9110 §10.2.2 allows it); the crawler resolves it.
        pages["/loop/a"] = Page(status=301, location=self.url("/loop/b"), location_header="/loop/b",
                                validators=False)
        pages["/loop/b"] = Page(status=301, location=self.url("/loop/a"), location_header="/loop/a",
                                validators=False)
        pages["/drip"] = Page(validators=False, stream=Stream(
            length=DRIP_BYTES, interval_s=1.0,
            chunks=lambda: iter([bytes([b]) for b in b"<html><body><p>drip drip drip</p>".ljust(
                DRIP_BYTES - 15, b".") + b"</body></html>\n"])))
        pages["/big"] = Page(stream=Stream(length=BIG_BYTES, chunks=_sized(
            b"<!DOCTYPE html><html><head><title>Big</title></head><body>\n",
            b"</body></html>\n", BIG_BYTES, filler(self.web.seed, 99, 4096))))
        pages["/file.pdf"] = Page(content_type="application/pdf", stream=Stream(length=PDF_BYTES, chunks=_sized(
            b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n", b"\n%%EOF\n", PDF_BYTES, b"0 0 0 rg 0 0 612 792 re f\n")))
        pages["/status/429"] = small("/status/429", "too many requests", status=429,
                                     headers=[("Retry-After", "5")], validators=False)
        pages["/status/503"] = small("/status/503", "unavailable", status=503,
                                     headers=[("Retry-After", "3")], validators=False)
        pages["/status/500"] = small("/status/500", "server error", status=500, validators=False)
        pages["/gone"] = small("/gone", "gone", status=410, validators=False)
        pages["/missing"] = small("/missing", "not found", status=404, validators=False)
        # A link to a non-ASCII path: browsers (and crawlers) percent-encode paths as UTF-8
        # whatever the page's encoding, so the target is /caf%C3%A9.html.
        cafe = "/caf%C3%A9.html"
        latin_links = [Link(href="/caf\u00e9.html", url=self.url(cafe), text="caf\u00e9")]
        pages["/latin1"] = Page(title="Latin-1", links=latin_links, content_type="text/html",
                                body=self._latin1_body())
        pages[cafe] = small(cafe, "caf\u00e9", [link("/")])
        broken_targets = ["/broken/a.html", "/broken/b.html", "/broken/c.html", "/broken/d.html",
                          "/broken/e.html", "/broken/f.html?a=1&b=2"]
        pages["/broken"] = Page(title="Broken", links=[link(t) for t in broken_targets],
                                body=self._broken_body())
        for t in broken_targets:
            pages[t] = small(t, "reached through broken markup", [link("/")])
        pages.update(self._redirect_chains())
        return pages

    CHAIN_LENGTHS = (3, 7)
    """``/chain/{n}/0`` redirects to ``/chain/{n}/1`` ... to ``/chain/{n}/{n}``, a page: a
    chain of ``n`` redirects. Like ``/elsewhere/...`` not linked from any page (the web's
    oracle and the crawl tests stay as they were); fetch tests list them directly."""

    def _redirect_chains(self) -> dict[str, Page]:
        """The unlinked redirect targets: same-host chains, and ``/elsewhere/{short}`` to
        ``/p/0.html`` of every other special host (``/elsewhere/robots-disallow/private``
        to its disallowed ``/private/a.html``)."""
        pages = {}
        for n in self.CHAIN_LENGTHS:
            for k in range(n):
                pages[f"/chain/{n}/{k}"] = Page(status=301, location=self.url(f"/chain/{n}/{k + 1}"),
                                                validators=False)
            pages[f"/chain/{n}/{n}"] = self.article(f"/chain/{n}/{n}", f"end of a chain of {n}",
                                                    [self.link("/")])
        for short in SPECIAL_HOSTS:
            if short != "odd":
                other = special_name(short)
                pages[f"/elsewhere/{short}"] = Page(status=301, location=self.web.url(other, "/p/0.html"),
                                                    validators=False)
        pages["/elsewhere/robots-disallow/private"] = Page(
            status=301, location=self.web.url(special_name("robots-disallow"), "/private/a.html"),
            validators=False)
        return pages

    def _latin1_body(self) -> bytes:
        # The charset is declared only in the document: the HTTP Content-Type says text/html.
        return (
            "<!DOCTYPE html>\n<html><head>\n"
            '<meta http-equiv="Content-Type" content="text/html; charset=iso-8859-1">\n'
            "<title>Latin-1 \u00e9t\u00e9</title></head><body>\n"
            f"<p>{LATIN1_TEXT}</p>\n"
            '<p><a href="/caf\u00e9.html">caf\u00e9</a></p>\n'
            "</body></html>\n"
        ).encode("iso-8859-1")

    def _broken_body(self) -> bytes:
        # Every link here is found by an HTML5 parser (lxml, html5lib, browsers): no </head>,
        # unquoted and upper-case attributes, unclosed and misnested tags, a newline inside a
        # tag, a duplicate attribute, an entity in the query, no </body></html>. (An unclosed
        # <title> would be too broken: browsers too read the rest of the page as its text.)
        return (
            "<html><head><title>Broken page</title><body>\n"
            "<p>Unclosed paragraph <b>bold <i>italic</b> misnested</i>\n"
            "<table><tr><td><a href=/broken/a.html>unquoted</a><td><A HREF='/broken/b.html'>upper</A>\n"
            "</div></span><p><a href=\"/broken/c.html\">no closing tag\n"
            "<li><a\nhref=\"/broken/d.html\"\n>newlines in the tag</a>\n"
            "<font color=red><a href=\"/broken/e.html\" class=x class=y>duplicate attribute</a>\n"
            "<a href=\"/broken/f.html?a=1&amp;b=2\">entity in query</a>\n"
            "<p>trailing text & an unescaped ampersand < and a stray angle\n"
        ).encode()


# --- the web --------------------------------------------------------------------------------


class Web:
    """The whole test web for one set of parameters.

    ``Web(hosts=20, pages=10, page_bytes=3000, special=True, seed=0, port=8080)``; the server
    and the test side each build one. ``port`` appears in every absolute URL. ``traps``,
    ``neardups`` and ``changing`` add the optional kinds of hosts (module doc); ``clock`` is
    the virtual clock the changing host reads.
    """

    def __init__(self, hosts: int = 20, pages: int = 10, page_bytes: int = 30_000,
                 special: bool = True, seed: int = 0, port: int = 80, traps: bool = False,
                 neardups: bool = False, changing: bool = False, hostile: bool = False,
                 internal_port: int = 0):
        if hosts < 0 or pages < 1 or page_bytes < 0:
            raise ValueError(f"need hosts >= 0, pages >= 1, page_bytes >= 0; got hosts={hosts}, "
                             f"pages={pages}, page_bytes={page_bytes}")
        if hosts == 0 and not (special or traps or neardups or changing or hostile):
            raise ValueError("a web with no regular hosts needs special=True (or another kind)")
        self.hosts = hosts
        self.pages = pages
        self.page_bytes = page_bytes
        self.special = special
        self.seed = seed
        self.port = port
        self.kinds = frozenset(k for k, on in zip(KINDS, (traps, neardups, changing, hostile)) if on)
        self.internal_port = internal_port
        """Port of the hostile hosts' internal service on 127.0.0.1 (hostile.py)."""
        self._extra_resolve: dict[str, str] = {}
        self.clock = VirtualClock()
        self.cache = PageCache()
        self.profiles: dict[str, HostProfile] = {}
        self._kind_names: list[str] = []
        self._build_profiles()
        self.by_ip = {p.ip: p for p in self.profiles.values()}
        self._by_netloc = {self.origin(name)[7:]: p for name, p in self.profiles.items()}
        self._memo: dict = {}  # oracle answers for the default seeds (links never change)

    def _build_profiles(self) -> None:
        for i in range(self.hosts):
            p = RegularHost(self, i)
            self.profiles[p.name] = p
        if self.special:
            robots = _robots_hosts()
            for j, short in enumerate(SPECIAL_HOSTS):
                if short == "odd":
                    p = OddHost(self, special_ip(j))
                else:
                    rules, bait = robots[short]
                    p = RobotsHost(self, short, special_ip(j), rules, bait)
                self.profiles[p.name] = p
        # Imported here: those modules build on this one.
        if "traps" in self.kinds:
            from cycles.testweb.traps import trap_hosts
            self._add_kind(trap_hosts(self, KIND_IP_PREFIX["traps"]))
        if "neardups" in self.kinds:
            from cycles.testweb.neardups import neardup_hosts
            self._add_kind(neardup_hosts(self, KIND_IP_PREFIX["neardups"]))
        if "changing" in self.kinds:
            from cycles.testweb.changing import changing_hosts
            self._add_kind(changing_hosts(self, KIND_IP_PREFIX["changing"]))
        if "hostile" in self.kinds:
            from cycles.testweb.hostile import extra_resolve, hostile_hosts
            self._add_kind(hostile_hosts(self, KIND_IP_PREFIX["hostile"]))
            self._extra_resolve.update(extra_resolve())

    def _add_kind(self, profiles: list[HostProfile]) -> None:
        for p in profiles:
            self.profiles[p.name] = p
            self._kind_names.append(p.name)

    def warm(self) -> None:
        """Build what the first request would otherwise pay for (the filler pool, the
        special hosts' tables), so response times in the log don't include it."""
        _paragraphs(self.seed)
        for profile in self.profiles.values():
            profile.page("/")

    # Addresses -------------------------------------------------------------------------
    def origin(self, name: str) -> str:
        return f"http://{name}" if self.port == 80 else f"http://{name}:{self.port}"

    def url(self, name: str, target: str = "/") -> str:
        return self.origin(name) + target

    def special_names(self) -> list[str]:
        return [special_name(s) for s in SPECIAL_HOSTS] if self.special else []

    def kind_names(self, kind: str | None = None) -> list[str]:
        """Names of the optional kinds' hosts (of one kind: ``"traps"``...), in address order."""
        return [n for n in self._kind_names if kind is None or self.profiles[n].kind == kind]

    def linked_names(self) -> list[str]:
        """Hosts that regular ``/`` pages link to: the special ones, then the optional kinds'."""
        return self.special_names() + self._kind_names

    def resolve_map(self) -> dict[str, str]:
        """Host name -> loopback address, for ``config.fetch.resolve`` (with the hostile
        kind, also a name that resolves to its internal service: hostile.py)."""
        return {**{name: p.ip for name, p in self.profiles.items()}, **self._extra_resolve}

    def seeds(self) -> list[str]:
        """The ``/`` of every host, regular ones first."""
        return [self.url(name) for name in self.profiles]

    def ips(self) -> list[str]:
        return [p.ip for p in self.profiles.values()]

    # Answers ---------------------------------------------------------------------------
    def split(self, url: str) -> tuple[HostProfile | None, str]:
        """(profile, canonical target) of an absolute URL; the profile is None off the web."""
        if url.startswith("http://"):
            # Fast path for the model's own URLs, already canonical (the oracle walks
            # hundreds of thousands of them).
            rest = url[7:]
            slash = rest.find("/")
            if slash > 0:
                profile = self._by_netloc.get(rest[:slash])
                target = rest[slash:]
                if profile is not None and target.isascii() and "%" not in target and "#" not in target:
                    return profile, target
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        port = parts.port or 80
        profile = self.profiles.get(host) if port == self.port and parts.scheme == "http" else None
        target = canonical_target((parts.path or "/") + ("?" + parts.query if parts.query else ""))
        return profile, target

    def page(self, url: str) -> Page | None:
        profile, target = self.split(url)
        return profile.page(target) if profile else None

    # The oracle ------------------------------------------------------------------------
    def allowed(self, url: str, agent: str = ROBOTS_AGENT) -> bool:
        """Whether robots.txt lets ``agent`` fetch ``url`` (False off the web)."""
        profile, target = self.split(url)
        return profile is not None and profile.robots.allows(target, agent)

    def expected_reachable(self, seeds: Iterable[str] | None = None, agent: str = ROBOTS_AGENT,
                           max_depth: int | None = None) -> set[str]:
        """URLs a polite crawler MUST request, starting from ``seeds`` (default: all seeds).

        A URL is in the set when a chain of followable links (no ``rel=nofollow``, no meta
        robots nofollow on the linking page, redirects counted as links) leads to it from a
        seed, every URL of the chain being allowed by its host's robots.txt for ``agent``,
        within ``max_depth`` hops if given. 404s, 5xx, redirects and slow or huge bodies are
        in the set (they must be requested); robots.txt files are not, nor are trap URLs
        (:meth:`is_trap`), which the walk never enters.
        """
        memo_key = ("reach", agent) if seeds is None and max_depth is None else None
        if memo_key in self._memo:
            return set(self._memo[memo_key])
        seen: set[str] = set()      # robots.txt is evaluated once per URL
        allowed: set[str] = set()
        queue: deque[tuple[HostProfile, str, int]] = deque()

        def visit(url: str, depth: int) -> None:
            seen.add(url)
            profile, target = self.split(url)
            if profile is not None and profile.has_traps and profile.is_trap(target):
                return  # a trap is neither required nor forbidden: the walk stays out
            if profile is not None and profile.robots.allows(target, agent):
                allowed.add(url)
                queue.append((profile, target, depth))

        for s in self.seeds() if seeds is None else seeds:
            if s not in seen:
                visit(s, 0)
        while queue:
            profile, target, depth = queue.popleft()
            if max_depth is not None and depth >= max_depth:
                continue
            page = profile.page(target)
            if page is None:
                continue
            for nxt in page.followable():
                if nxt not in seen:
                    visit(nxt, depth + 1)
        if memo_key is not None:
            self._memo[memo_key] = allowed
            return set(allowed)
        return allowed

    def universe(self) -> set[str]:
        """Every URL of the web that some link (followable or not) or redirect points at,
        plus the seeds: what a crawler could ever learn of, robots.txt aside. Trap URLs
        (endless) are left out."""
        seen = set(self.seeds())
        queue = deque(seen)
        while queue:
            page = self.page(queue.popleft())
            if page is None:
                continue
            targets = [page.location] if page.location else [link.url for link in page.links]
            for nxt in targets:
                if nxt not in seen and not self.is_trap(nxt):
                    seen.add(nxt)
                    queue.append(nxt)
        return seen

    def must_not_request(self, agent: str = ROBOTS_AGENT) -> set[str]:
        """URLs a polite crawler must NEVER request, whatever its seeds (from this web):
        everything linked somewhere but reachable only through nofollow, a meta-nofollow
        page or a robots.txt-disallowed URL, and every URL robots.txt disallows for
        ``agent`` (the whole of a host whose robots.txt answers 5xx)."""
        if "universe" not in self._memo:
            self._memo["universe"] = self.universe()
        return self._memo["universe"] - self.expected_reachable(None, agent)

    # The oracle of the optional kinds ---------------------------------------------------
    def is_trap(self, url: str) -> bool:
        """Whether ``url`` lies inside a crawler trap (``traps=True``); False off the web."""
        profile, target = self.split(url)
        return profile is not None and profile.has_traps and profile.is_trap(target)

    def trap_hosts(self) -> list[str]:
        """Names of the trap hosts (empty unless ``traps=True``)."""
        return self.kind_names("trap")

    def good_pages(self, host: str) -> list[str]:
        """URLs of a trap host's normal pages (``/`` and ``/p/0.html`` .. ``/p/9.html``): a
        crawler must keep finding these however deep it goes into the trap. ``host`` is a
        full name or a short one (``trap-calendar``)."""
        name = host if "." in host else f"{host}.{DOMAIN}"
        profile = self.profiles.get(name)
        if profile is None:
            raise KeyError(f"no host {name} in this web (traps={'traps' in self.kinds})")
        return [profile.url(t) for t in profile.good_pages()]

    def neardup_pairs(self) -> list[tuple[str, str, bool, str]]:
        """The labelled near-duplicate set (``neardups=True``): ``(url_a, url_b,
        is_near_duplicate, kind)``. Kinds that are near-duplicates: ``date``, ``counter``,
        ``ad`` (one line differs), ``boilerplate`` (same article, another site's header, nav
        and footer), ``exact`` and ``mirror`` (same bytes). Kinds that are not:
        ``same-template`` (other article, same template and the same date/counter/ad lines
        as far as the template goes) and ``other-site`` (other article on another template)."""
        from cycles.testweb.neardups import neardup_pairs
        return neardup_pairs(self) if "neardups" in self.kinds else []

    def exact_duplicate_groups(self) -> list[set[str]]:
        """Sets of URLs whose responses have byte-identical bodies (``neardups=True``)."""
        from cycles.testweb.neardups import exact_duplicate_groups
        return exact_duplicate_groups(self) if "neardups" in self.kinds else []

    def mirror_hosts(self) -> dict[str, str]:
        """Mirror host name -> the host whose pages it serves byte for byte."""
        return {name: p.source.name for name, p in self.profiles.items() if p.kind == "mirror"}

    def change_period(self, url: str) -> float | None:
        """Seconds of virtual time between changes of ``url``; None when it never changes
        (every URL not on the changing host)."""
        profile, target = self.split(url)
        return profile.change_period(target) if profile is not None else None

    def version_at(self, url: str, t: float) -> int:
        """Content version of ``url`` at virtual time ``t`` (0 for pages that never change).
        Two fetches got the same content exactly when their versions are equal."""
        profile, target = self.split(url)
        return profile.version_at(target, t) if profile is not None else 0

    def change_kind(self, url: str) -> str:
        """``"content"`` (new text each version), ``"timestamp"`` (only an "Updated" line
        changes: a new version that is a near-duplicate of the old) or ``"never"``."""
        profile, target = self.split(url)
        return profile.change_kind(target) if profile is not None else "never"

    def changing_pages(self) -> list[str]:
        """URLs of the changing host's pages that have a period (``changing=True``)."""
        return [p.url(t) for p in self.profiles.values() if p.kind == "changing"
                for t in p.targets() if p.change_period(t) is not None]


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


def http_date(ts: float) -> str:
    return formatdate(ts, usegmt=True)


def parse_http_date(value: str) -> float | None:
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
