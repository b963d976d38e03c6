"""Near-duplicate and duplicate pages, with labels a test can score a detector against.

- ``dup-news.web.test`` ("The Daily Test"): ten articles ``/article/{n}.html`` of sixteen
  paragraphs (about 800 words) on one template. Each article shows a date line, a visit
  counter and an advertisement line. Near-duplicate variants change exactly one of them:
  ``/v/date/{n}.html`` (another date and time), ``/v/counter/{n}.html`` (another count),
  ``/v/ad/{n}.html`` (another advertisement). Exact copies, byte for byte:
  ``/article/{n}.html?print=1`` and ``/article/{n}/index.html``.
- ``dup-syndicate.web.test`` ("World Wire"): the same articles at ``/story/{n}.html`` in
  another site's header, nav and footer (about twenty words of boilerplate differ). Its
  ``/story/{n}.html?print=1`` is not a print view but the print edition's order page for
  that story, another page each: the control for variant-parameter learning (a ``print``
  parameter that carries content on this host, and none on dup-news).
- ``mirror-of-h1.web.test``: every page of ``h1`` byte for byte (``h0`` in a one-host web;
  no mirror without regular hosts). Its relative links stay on the mirror; its absolute ones
  (and those of pages with ``<base href>``) point at ``h1``, as on a copied site.

Article texts are disjoint runs of the filler paragraph pool, so two articles share their
template and nothing else. :func:`neardup_pairs` lists the labelled pairs and
:func:`exact_duplicate_groups` the groups of identical bodies.

The labels say what the pages are, not what a detector will manage. Measured with
``cycles.fingerprint.simhash64`` over the lxml text (2-shingles, numbers left out, as it
stood at commit 8c7d038), the Hamming distances over the pairs of each kind were:

==============  =====  ==========================  ==================
kind            label  words differing (of ~880)   SimHash bits apart
==============  =====  ==========================  ==================
counter         True   1 (a number)                0
date            True   3                           0-2
ad              True   about 12                    0-7
boilerplate     True   about 35                    2-10
exact, mirror   True   0                           0
same-template   False  all but the template        23-37
other-site      False  all                         24-36
==============  =====  ==========================  ==================

So at the usual k = 3 a SimHash finds every date and counter variant, most ad variants
and few boilerplate ones, and never mistakes two articles for each other.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, replace

from testweb.host import HostProfile
from testweb.model import DOMAIN, WORDS, Link, Page, mix, paragraphs, regular_name

ARTICLES = 10
"""Articles on dup-news (and stories on dup-syndicate)."""

ARTICLE_PARAGRAPHS = 16
"""Paragraphs of an article: about 50 words each, about 800 words in all."""

POOL_OFFSET = 4096
"""Articles take paragraphs ``POOL_OFFSET + n * ARTICLE_PARAGRAPHS`` onwards of the pool."""

VARIANTS = ("date", "counter", "ad")
"""Near-duplicate variants of an article on dup-news, one changed line each."""

ADS = (
    "Fresh coffee beans roasted this morning and delivered to your door every week.",
    "Learn a new language in ten minutes a day with our friendly teachers.",
    "Cheap flights to sunny places this winter, book before the end of the month.",
    "Comfortable running shoes for every road, now with free returns.",
    "Fast and secure hosting for your small business website, first year free.",
    "Handmade wooden furniture built to last a lifetime, visit our showroom.",
    "Your garden deserves better tools, see the spring collection today.",
)

MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August",
               "September", "October", "November", "December")


@dataclass(frozen=True)
class Template:
    """A site's boilerplate: the same on every page of the site."""

    site: str
    tagline: str
    nav: tuple[tuple[str, str], ...]
    """(target, anchor text) of the nav links."""
    footer: str


NEWS = Template(
    site="The Daily Test", tagline="Independent news from all over the test web since 1999.",
    nav=(("/", "Front page"), ("/about.html", "About us"), ("/privacy.html", "Privacy policy")),
    footer="Copyright 2024 The Daily Test. All rights reserved. Write to the newsroom to report "
           "an error in this article.")

WIRE = Template(
    site="World Wire", tagline="Stories from our partner newsrooms, every hour of the day.",
    nav=(("/", "Home"), ("/contact.html", "Contact"), ("/terms.html", "Terms of use")),
    footer="Syndicated content. World Wire is not responsible for the opinions of partner "
           "authors. Subscribe to our daily letter.")


def neardup_hosts(web, prefix: str) -> list[HostProfile]:
    hosts: list[HostProfile] = [NewsHost(web, f"dup-news.{DOMAIN}", f"{prefix}1"),
                                SyndicateHost(web, f"dup-syndicate.{DOMAIN}", f"{prefix}2")]
    if web.hosts:
        source = web.profiles[regular_name(1 if web.hosts > 1 else 0)]
        hosts.append(MirrorHost(web, f"mirror-of-{source.name.split('.')[0]}.{DOMAIN}",
                                f"{prefix}3", source))
    return hosts


# --- article parts -----------------------------------------------------------------------------

def headline(seed: int, n: int) -> str:
    h = mix(seed, n, 77)
    words = [WORDS[(h >> (6 * j)) % len(WORDS)] for j in range(6)]
    return " ".join(words).capitalize()


def article_html(seed: int, n: int) -> tuple[str, str]:
    """The two halves of article ``n``'s text (the advertisement goes between them)."""
    pool = paragraphs(seed)
    paras = [pool[POOL_OFFSET + n * ARTICLE_PARAGRAPHS + j].decode()
             for j in range(ARTICLE_PARAGRAPHS)]
    half = ARTICLE_PARAGRAPHS // 2
    return "".join(paras[:half]), "".join(paras[half:])


def dateline(seed: int, n: int, variant: int = 0) -> str:
    h = mix(seed, n, 1000 + variant)
    month = h % 12
    day = 1 + (h >> 8) % 28
    return f"{day} {MONTH_NAMES[month]} 2024, {(h >> 16) % 24:02d}:{(h >> 24) % 60:02d} UTC"


def counter(seed: int, n: int, variant: int = 0) -> str:
    return f"{1000 + mix(seed, n, 2000 + variant) % 90000:,}"


def advert(n: int, variant: int = 0) -> str:
    return ADS[(n + 3 * variant) % len(ADS)]


# --- hosts -----------------------------------------------------------------------------------

class TemplateHost(HostProfile):
    """A host whose pages are rendered in one :class:`Template`."""

    kind = "neardup"
    template: Template

    def render(self, title: str, items: list) -> Page:
        """A page of ``items`` (HTML strings and :class:`Link` s) inside the template; the
        page's links are the nav's then the items', in document order."""
        esc = html.escape
        t = self.template
        links = [self.link(target, text=text) for target, text in t.nav]
        nav = " | ".join(f'<a href="{esc(link.href)}">{esc(link.text)}</a>' for link in links)
        parts = ['<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n',
                 f"<title>{esc(title)} | {esc(t.site)}</title>\n</head>\n<body>\n",
                 f'<header>\n<p class="site">{esc(t.site)}: {esc(t.tagline)}</p>\n',
                 f"<nav>{nav}</nav>\n</header>\n<main>\n<h1>{esc(title)}</h1>\n"]
        for item in items:
            if isinstance(item, Link):
                links.append(item)
                parts.append(f'<p><a href="{esc(item.href)}">{esc(item.text)}</a></p>\n')
            else:
                parts.append(item)
        parts.append(f"</main>\n<footer><p>{esc(t.footer)}</p></footer>\n</body>\n</html>\n")
        return Page(title=title, links=links, body="".join(parts).encode())

    def article(self, n: int, date: int = 0, count: int = 0, ad: int = 0) -> Page:
        seed = self.web.seed
        first, second = article_html(seed, n)
        return self.render(headline(seed, n), [
            f'<article>\n<p class="dateline">Published on {dateline(seed, n, date)} by the '
            "newsroom.</p>\n",
            f'<p class="views">This article has been read {counter(seed, n, count)} times.</p>\n',
            first,
            f'<aside class="ad"><p>Advertisement: {html.escape(advert(n, ad))}</p></aside>\n',
            second,
            "</article>\n",
        ])

    def note(self, title: str, text: str) -> Page:
        return self.render(title, [f"<p>{html.escape(text)}</p>\n"])


def _article_number(text: str) -> int | None:
    if text.isdigit() and (text == "0" or text[0] != "0") and int(text) < ARTICLES:
        return int(text)
    return None


class NewsHost(TemplateHost):
    """``dup-news``: articles, their one-line variants and their exact copies."""

    template = NEWS

    def page(self, target: str) -> Page | None:
        path, _, query = target.partition("?")
        if path == "/" and not query:
            items = []
            for n in range(ARTICLES):
                items.append(self.link(f"/article/{n}.html", text=headline(self.web.seed, n)))
                items += [self.link(f"/v/{v}/{n}.html", text=f"{v} variant") for v in VARIANTS]
                items += [self.link(f"/article/{n}.html?print=1", text="Print"),
                          self.link(f"/article/{n}/index.html", text="Permalink")]
            items.append(self.link("/", host=f"dup-syndicate.{DOMAIN}", text="Our partners"))
            return self.render("Front page", items)
        if path == "/about.html" and not query:
            return self.note("About us", "The Daily Test is written by a small team of "
                             "volunteers who read everything twice before it is published.")
        if path == "/privacy.html" and not query:
            return self.note("Privacy policy", "We keep no record of your visits other than "
                             "the counter at the top of every article.")
        if path.startswith("/article/"):
            rest = path[9:]
            if rest.endswith("/index.html"):
                n = _article_number(rest[:-11])
                return self.article(n) if n is not None and not query else None
            if rest.endswith(".html") and query in ("", "print=1"):
                n = _article_number(rest[:-5])
                return self.article(n) if n is not None else None
            return None
        if path.startswith("/v/") and not query:
            variant, _, name = path[3:].partition("/")
            n = _article_number(name[:-5]) if name.endswith(".html") else None
            if variant not in VARIANTS or n is None:
                return None
            return self.article(n, **{variant if variant != "counter" else "count": 1})
        return None


class SyndicateHost(TemplateHost):
    """``dup-syndicate``: dup-news's articles in another site's boilerplate."""

    template = WIRE

    def page(self, target: str) -> Page | None:
        if target == "/":
            return self.render("Home", [self.link(f"/story/{n}.html", text=headline(self.web.seed, n))
                                        for n in range(ARTICLES)])
        if target == "/contact.html":
            return self.note("Contact", "Write to the desk of World Wire for partnerships.")
        if target == "/terms.html":
            return self.note("Terms of use", "Stories may be quoted with a link to the source.")
        path, _, query = target.partition("?")
        if path.startswith("/story/") and path.endswith(".html") and query in ("", "print=1"):
            n = _article_number(path[7:-5])
            if n is None:
                return None
            return self.article(n) if not query else self.print_order(n)
        return None

    def render(self, title: str, items: list) -> Page:
        page = super().render(title, items)
        if title in {headline(self.web.seed, n) for n in range(ARTICLES)}:  # a story: link its print order page
            n = next(n for n in range(ARTICLES) if headline(self.web.seed, n) == title)
            link = self.link(f"/story/{n}.html?print=1", text="Order the print edition")
            body = page.body.replace(b"</main>", f'<p><a href="{html.escape(link.href)}">{link.text}</a></p>\n</main>'.encode())
            page = replace(page, links=page.links + [link], body=body)
        return page

    def print_order(self, n: int) -> Page:
        """Story ``n``'s print-edition order page: text of its own (not a copy of the story)."""
        h = mix(self.web.seed, n, 3000)
        words = " ".join(WORDS[mix(h, j) % len(WORDS)] for j in range(120))
        return self.note(f"Print edition {n}", f"Order story {n} in print. {words}.")


class MirrorHost(HostProfile):
    """Serves another host's bodies byte for byte under its own name."""

    kind = "mirror"

    def __init__(self, web, name: str, ip: str, source: HostProfile):
        super().__init__(web, name, ip)
        self.source = source
        self.robots = source.robots

    def page(self, target: str) -> Page | None:
        src = self.source.page(target)
        if src is None or src.stream is not None:
            return src
        # The same bytes resolve differently here: relative links stay on the mirror unless
        # a <base href> (which names the source) says otherwise.
        links = [link if src.base_href or _absolute(link.href) else
                 replace(link, url=self.origin + link.url[len(self.source.origin):])
                 for link in src.links]
        location = src.location
        if location and src.location_header and not _absolute(src.location_header):
            location = self.origin + location[len(self.source.origin):]
        return replace(src, links=links, location=location)

    def respond(self, page, target, headers):
        if page.body is None and page.stream is None and 200 <= page.status < 300:
            source_page = self.source.page(target)
            page.body = self.source.respond(source_page, target, {}).body
        return super().respond(page, target, headers)


def _absolute(href: str) -> bool:
    return href.startswith("//") or href[:7].lower() == "http://" or href[:8].lower() == "https://"


# --- the labels ----------------------------------------------------------------------------------

def neardup_pairs(web) -> list[tuple[str, str, bool, str]]:
    news = web.url(f"dup-news.{DOMAIN}", "")
    wire = web.url(f"dup-syndicate.{DOMAIN}", "")
    pairs: list[tuple[str, str, bool, str]] = []
    for n in range(ARTICLES):
        base = f"{news}/article/{n}.html"
        pairs += [(base, f"{news}/v/{v}/{n}.html", True, v) for v in VARIANTS]
        pairs.append((base, f"{wire}/story/{n}.html", True, "boilerplate"))
        pairs += [(base, f"{base}?print=1", True, "exact"),
                  (base, f"{news}/article/{n}/index.html", True, "exact")]
        m1, m2, m3 = ((n + d) % ARTICLES for d in (1, 2, 3))
        pairs += [(base, f"{news}/article/{m1}.html", False, "same-template"),
                  (f"{news}/v/ad/{n}.html", f"{news}/article/{m2}.html", False, "same-template"),
                  (f"{wire}/story/{n}.html", f"{wire}/story/{m1}.html", False, "same-template"),
                  (f"{wire}/story/{n}.html", f"{news}/article/{m3}.html", False, "other-site")]
    for mirror, source in web.mirror_hosts().items():
        pairs += [(web.url(source, t), web.url(mirror, t), True, "mirror")
                  for t in _mirrored_targets(web)]
    return pairs


def _mirrored_targets(web) -> list[str]:
    return ["/"] + [f"/p/{k}.html" for k in range(web.pages_of(1))]  # the mirror is of h1


def exact_duplicate_groups(web) -> list[set[str]]:
    news = web.url(f"dup-news.{DOMAIN}", "")
    groups = [{f"{news}/article/{n}.html", f"{news}/article/{n}.html?print=1",
               f"{news}/article/{n}/index.html"} for n in range(ARTICLES)]
    for mirror, source in web.mirror_hosts().items():
        groups += [{web.url(source, t), web.url(mirror, t)} for t in _mirrored_targets(web)]
    return groups
