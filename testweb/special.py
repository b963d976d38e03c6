"""The special hosts (``special=True``): robots.txt variants (:class:`RobotsHost`) and
``odd.web.test`` (:class:`OddHost`: redirects, slow and huge bodies, error statuses, a
Latin-1 page, broken markup)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

from testweb.host import HostProfile, SmallHost
from testweb.model import (ROBOTS_AGENT, SPECIAL_HOSTS, Link, Page, Robots, Stream, filler,
                           special_ip, special_name)

if TYPE_CHECKING:  # only for annotations: web.py imports this module
    from testweb.web import Web


def special_hosts(web: Web) -> list[HostProfile]:
    """The hosts of :data:`~testweb.model.SPECIAL_HOSTS`, in address order."""
    robots = _robots_hosts()
    hosts: list[HostProfile] = []
    for j, short in enumerate(SPECIAL_HOSTS):
        if short == "odd":
            hosts.append(OddHost(web, special_ip(j)))
        else:
            rules, bait = robots[short]
            hosts.append(RobotsHost(web, short, special_ip(j), rules, bait))
    return hosts


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
