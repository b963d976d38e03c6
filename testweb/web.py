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
- With ``tail=True`` (``serve --tail``) regular hosts have a long tail of sizes instead:
  host ``i`` has :meth:`Web.pages_of` pages, ``pages`` for host 0 down to a few for the last
  (cross-host links pick a page the target host has).
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

  * **Sitemaps** (``sitemaps.py``, ``127.0.61.x``, ``sitemaps=True``): robots.txt ``Sitemap:``
    lines, a sitemap index, gzip and text sitemaps with lastmod, and hostile ones (a gzip
    bomb, 10 million entries made lazily, cross-host URLs, malformed XML, an index loop).
  * **HTTPS** (``tls.py``, ``https=0.9``, ``tls=True``, ``rtt_ms=(20, 300)``): a fraction of
    the regular hosts on HTTPS at ``tls_port``, hosts with bad certificates and handshakes
    (``127.0.62.x``), http -> https redirects and per-host round trips: the ``testweb.tls`` doc.
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
:meth:`TestWeb.set_clock <testweb.harness.TestWeb.set_clock>` does this and keeps the
test side's model in step; every request log line carries the virtual time it was served at
(``clock_t``). Keep the virtual time before the real one if a crawler under test compares
Last-Modified with its own clock.

Extending
---------
A host is a :class:`~testweb.host.HostProfile` (``host.py``): it answers
:meth:`~testweb.host.HostProfile.page` with a :class:`~testweb.model.Page` (status, links,
body source) for a request target, and has a :class:`~testweb.model.Robots`. The server glue
(``respond.py``) turns a page into bytes (conditional requests included) and the
reachability oracle reads its ``links``. A new kind of host lives in its own module, builds
on ``model.py``, ``host.py`` and ``respond.py`` only, offers ``{kind}_hosts(web, prefix)``
and gets an address block in :data:`~testweb.model.KIND_IP_PREFIX`; this module imports it
and calls it from :meth:`Web._build_profiles`. Imports go one way (kinds never import this
module at run time), and shared helpers are public names of ``model.py``.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Iterable
from urllib.parse import urlsplit
from testweb.changing import changing_hosts
from testweb.host import HostProfile
from testweb.hostile import extra_resolve, hostile_hosts
from testweb.sitemaps import sitemap_hosts
from testweb.model import (CLOCK_START, DOMAIN, KIND_IP_PREFIX, KINDS, ROBOTS_AGENT, SPECIAL_HOSTS,
                           Page, canonical_target, paragraphs, special_name)
from testweb.neardups import exact_duplicate_groups, neardup_hosts, neardup_pairs
from testweb.regular import RegularHost
from testweb.respond import PageCache
from testweb.special import special_hosts
from testweb.traps import trap_hosts
from testweb import tls as tls_web


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
                 internal_port: int = 0, sitemaps: bool = False, tail: bool = False,
                 https: float = 0.0, tls: bool = False, rtt_ms: tuple[float, float] = (0.0, 0.0),
                 tls_port: int = 443, h2: float = 0.0):
        if hosts < 0 or pages < 1 or page_bytes < 0:
            raise ValueError(f"need hosts >= 0, pages >= 1, page_bytes >= 0; got hosts={hosts}, "
                             f"pages={pages}, page_bytes={page_bytes}")
        if hosts == 0 and not (special or traps or neardups or changing or hostile or sitemaps):
            raise ValueError("a web with no regular hosts needs special=True (or another kind)")
        self.hosts = hosts
        self.pages = pages
        self.tail = tail
        """Regular hosts of a long tail of sizes (:meth:`pages_of`) instead of ``pages`` each."""
        self.page_bytes = page_bytes
        self.special = special
        self.seed = seed
        self.port = port
        self.kinds = frozenset(k for k, on in zip(KINDS, (traps, neardups, changing, hostile, sitemaps, tls)) if on)
        self.tls_port = tls_port
        """Port of every HTTPS host's TLS address (testweb/tls.py)."""
        self.internal_port = internal_port
        """Port of the hostile hosts' internal service on 127.0.0.1 (hostile.py)."""
        self._extra_resolve: dict[str, str] = {}
        self.clock = VirtualClock()
        self.cache = PageCache()
        self.profiles: dict[str, HostProfile] = {}
        self._kind_names: list[str] = []
        self._build_profiles()
        tls_web.assign(self, https, tuple(rtt_ms), h2)
        self.by_ip = {p.ip: p for p in self.profiles.values()}
        self._by_netloc = {self.origin(name).split("://", 1)[1]: p for name, p in self.profiles.items()}
        self._memo: dict = {}  # oracle answers for the default seeds (links never change)

    def _build_profiles(self) -> None:
        for i in range(self.hosts):
            p = RegularHost(self, i)
            self.profiles[p.name] = p
        if self.special:
            for p in special_hosts(self):
                self.profiles[p.name] = p
        if "traps" in self.kinds:
            self._add_kind(trap_hosts(self, KIND_IP_PREFIX["traps"]))
        if "neardups" in self.kinds:
            self._add_kind(neardup_hosts(self, KIND_IP_PREFIX["neardups"]))
        if "changing" in self.kinds:
            self._add_kind(changing_hosts(self, KIND_IP_PREFIX["changing"]))
        if "hostile" in self.kinds:
            self._add_kind(hostile_hosts(self, KIND_IP_PREFIX["hostile"]))
            self._extra_resolve.update(extra_resolve())
        if "sitemaps" in self.kinds:
            self._add_kind(sitemap_hosts(self, KIND_IP_PREFIX["sitemaps"]))
        if "tls" in self.kinds:
            self._add_kind(tls_web.tls_hosts(self, KIND_IP_PREFIX["tls"]))

    def _add_kind(self, profiles: list[HostProfile]) -> None:
        for p in profiles:
            self.profiles[p.name] = p
            self._kind_names.append(p.name)

    def warm(self) -> None:
        """Build what the first request would otherwise pay for (the filler pool, the
        special hosts' tables), so response times in the log don't include it."""
        paragraphs(self.seed)
        for profile in self.profiles.values():
            profile.page("/")

    def pages_of(self, index: int) -> int:
        """Pages ``/p/{k}.html`` of regular host ``index``: ``pages``, or with ``tail`` a
        long tail of sizes as on the real web (host 0 has ``pages``, host ``i`` about
        ``pages / (1 + i) ** 0.8``, at least 2): a few big sites, many small ones."""
        if not self.tail:
            return self.pages
        return max(2, min(self.pages, round(self.pages / (1 + index) ** 0.8)))

    # Addresses -------------------------------------------------------------------------
    def origin(self, name: str, scheme: str | None = None) -> str:
        """``http://name[:port]``, or ``https://name[:tls_port]`` for an HTTPS host (or
        the scheme asked for: an HTTPS host's plain address redirects to https)."""
        profile = self.profiles.get(name)
        if scheme is None:
            scheme = "https" if profile is not None and profile.tls else "http"
        if scheme == "https":
            return tls_web.https_origin(name, self.tls_port)
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

    def https_ips(self) -> list[str]:
        """Addresses of the HTTPS hosts: they listen on ``tls_port`` too."""
        return [p.ip for p in self.profiles.values() if p.tls]

    # Answers ---------------------------------------------------------------------------
    def split(self, url: str) -> tuple[HostProfile | None, str]:
        """(profile, canonical target) of an absolute URL; the profile is None off the web."""
        https = url.startswith("https://")
        if https or url.startswith("http://"):
            # Fast path for the model's own URLs, already canonical (the oracle walks
            # hundreds of thousands of them).
            rest = url[8:] if https else url[7:]
            slash = rest.find("/")
            if slash > 0:
                profile = self._by_netloc.get(rest[:slash])
                target = rest[slash:]
                if (profile is not None and bool(profile.tls) == https and target.isascii()
                        and "%" not in target and "#" not in target):
                    return profile, target
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        profile = self.profiles.get(host)
        if profile is not None and profile.tls:
            # An HTTPS host's plain-HTTP URL is a redirect, not one of its pages.
            served = parts.scheme == "https" and (parts.port or 443) == self.tls_port
        else:
            served = parts.scheme == "http" and (parts.port or 80) == self.port
        profile = profile if served else None
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
        return neardup_pairs(self) if "neardups" in self.kinds else []

    def exact_duplicate_groups(self) -> list[set[str]]:
        """Sets of URLs whose responses have byte-identical bodies (``neardups=True``)."""
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
