"""The base classes of every host: :class:`HostProfile` (one host: name, address,
robots.txt, the :class:`~testweb.model.Page` of each target, and answering a request) and
:class:`SmallHost` (a host whose pages are a fixed table).

A new kind of host subclasses one of them in its own module and offers a function
``{kind}_hosts(web, prefix)`` that :class:`~testweb.web.Web` calls (see :mod:`testweb.traps`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable
from testweb.model import LAST_MODIFIED_BASE, Link, Page, Robots, canonical_target, digest, mix, str_key
from testweb.respond import Response, http_date, not_modified, render

if TYPE_CHECKING:  # only for annotations: web.py imports this module
    from testweb.web import Web



class HostProfile:
    """One host: name, address, robots.txt and the :class:`Page` of each target.

    Subclasses override :meth:`page` (and set ``robots``). Everything must be deterministic
    in the web's parameters: the server and the oracle each build their own copy.
    """

    kind = "base"

    has_traps = False
    """Whether :meth:`is_trap` can say yes (lets the oracle skip the call on other hosts)."""

    tls: str | None = None
    """HTTPS mode (``testweb.tls.MODES``), None for plain HTTP; set by ``testweb.tls.assign``."""

    rtt_s: float = 0.0
    """Round trip the server waits before each response's first byte (and the TLS handshake)."""

    h2: bool = False
    """The host offers HTTP/2 (ALPN ``h2``) on its TLS address (testweb/http2.py)."""

    keep_alive: bool = True
    """False: the server closes the connection after every response (testweb/tls.py)."""

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
        day = 1 + mix(self.web.seed, str_key(self.name), str_key(target)) % 400
        return LAST_MODIFIED_BASE - day * 86400 + version * 3600

    def etag(self, target: str, version: int) -> str:
        return '"' + digest(f"{self.web.seed}|{self.name}|{target}|{version}|{self.web.page_bytes}") + '"'



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
                    key=str_key(self.name + target), **kw)

    def tree(self, n: int, extra: list[Link]) -> dict[str, Page]:
        """``/`` linking ``/p/0.html`` .. ``/p/{n-1}.html`` and ``extra``; each page links home."""
        pages = {"/": self.article("/", "home", [self.link(f"/p/{k}.html") for k in range(n)] + extra)}
        for k in range(n):
            pages[f"/p/{k}.html"] = self.article(f"/p/{k}.html", f"page {k}", [self.link("/")])
        return pages
