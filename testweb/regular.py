"""Regular hosts ``h{i}.web.test``: the bulk of the web (:mod:`testweb.web` describes
their link structure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from testweb.host import HostProfile
from testweb.model import Link, Page, Robots, mix, regular_ip, regular_name, str_key

if TYPE_CHECKING:  # only for annotations: web.py imports this module
    from testweb.web import Web


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
            if num.isdigit() and (num == "0" or num[0] != "0") and int(num) < self.web.pages_of(self.index):
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
                    key=mix(self.index, str_key(target)))

    def _index(self) -> Page:
        web = self.web
        i = self.index
        links = [self.link("/p/0.html", "p/0.html", text="Start reading")]
        if web.pages_of(i) > 1:
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
                    key=mix(i, 1 << 40))

    def _article(self, k: int) -> Page:
        web = self.web
        i = self.index
        P = web.pages_of(i)
        base = k % 4 == 1
        h = mix(web.seed, i, k)
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
                hr = mix(web.seed, i, k, r + 7)
                j = hr % web.hosts
                if j == i:
                    j = (j + 1) % web.hosts
                m = (hr >> 24) % web.pages_of(j)
                name = regular_name(j)
                origin = web.origin(name)
                target = f"/p/{m}.html"
                if r == 1 and origin.split("://", 1)[0] == self.origin.split("://", 1)[0]:
                    href = "//" + origin.split("://", 1)[1] + target  # scheme-relative
                elif r == 2 and (hr >> 50) % 3 == 0:
                    href = origin.replace(name, name.upper()) + target + "#comments"
                else:
                    href = origin + target
                links.append(Link(href=href, url=origin + target, text=f"{name} page {m}"))
        return Page(title=f"{self.name}: page {k}", links=links,
                    base_href=self.origin + "/" if base else None,
                    text_bytes=web.page_bytes, key=mix(i, k))

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
