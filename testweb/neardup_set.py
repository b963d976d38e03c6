"""A labelled set of page pairs for near-duplicate detection, generated deterministically.

Served by no host: a detector is scored on the HTML bodies directly (parse them as fetch
does, fingerprint, compare), so the set can be several hundred pairs and cost a second.
``scripts/bench_update.py`` prints precision and recall on it, before and after;
``tests/update/test_neardup_set.py`` holds the chosen method to its figures.

Sites use one of four templates, as the web writes them:

- ``semantic``: ``<header>``, ``<nav>``, ``<main>``/``<article>``, ``<aside>``, ``<footer>``;
- ``divs``: the same parts as ``<div id=header>``, ``<div class="menu">``, ``<div id=content>``,
  ``<div class="sidebar">``, ``<div id=footer>``;
- ``table``: an old layout table, parts named only by class on the cells;
- ``bare``: no markup naming anything: boilerplate and article are plain paragraphs.

An article is a headline and 4-16 paragraphs of filler (English from
:func:`testweb.model.paragraphs`; one article in six is Japanese, Chinese or Thai from
:mod:`testweb.languages`). Each page carries a date line, a view counter, an advertisement,
a "related" box and a session line, as real pages do.

Labelled near-duplicates (the same article), one kind of change each:

============  ====================================================================
date          another publication date and time
counter       another view count
ad            another advertisement
session       another session id and visitor token in the text
boilerplate   the article syndicated on another site (other header, menu, footer)
reordered     the related box moved below the article, two paragraphs swapped
print         the print view: the article alone, "printed from" line, no template
comment       a reader's comment added under the article
edit          one word of the article changed (a typo fixed; one character in Japanese,
              Chinese and Thai, which have no spaces)
update        a paragraph appended to the article ("Update: ...")
related       other headlines in the "related" box (recommendations rotate)
mobile        the mobile site: a name bar, the article, "view the full site"
============  ====================================================================

Labelled different pages (label False): ``same-template`` (two articles of one site),
``same-template-short`` (two 3-paragraph articles of one site: the template is most of
the page), ``other-site`` (two articles on two sites), ``shared-paragraphs`` (two articles
of one site quoting the same two paragraphs, a press release, among their own), ``series``
(an article and its part 2, which repeats its headline and first paragraph as a recap),
``listing`` (two index pages of one site: ten headlines with one-sentence teasers each, no
paragraph long enough to be main content).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from testweb import languages
from testweb.model import WORDS, mix, paragraphs
from testweb.neardups import ADS, MONTH_NAMES  # the crawled web's ads and dates, reused

POSITIVE_KINDS = ("date", "counter", "ad", "session", "boilerplate", "reordered", "print", "comment",
                  "edit", "update", "related", "mobile")
NEGATIVE_KINDS = ("same-template", "same-template-short", "other-site", "shared-paragraphs", "series",
                  "listing")
TEMPLATES = ("semantic", "divs", "table", "bare")

@dataclass(frozen=True)
class Site:
    name: str
    template: str
    tagline: str
    menu: tuple[str, ...]
    footer: str


def _words(h: int, count: int) -> str:
    return " ".join(WORDS[(h >> (5 * j)) % len(WORDS) if j < 12 else mix(h, j) % len(WORDS)]
                    for j in range(count))


def site(number: int) -> Site:
    h = mix(7, number)
    name = _words(h, 2).title()
    return Site(name=name, template=TEMPLATES[number % len(TEMPLATES)],
                tagline=f"{name}: " + _words(mix(h, 1), 9) + ".",
                menu=tuple(_words(mix(h, 10 + i), 2).capitalize() for i in range(6)),
                footer=f"Copyright 2024 {name}. " + _words(mix(h, 2), 14).capitalize() + ". "
                       + _words(mix(h, 3), 10).capitalize() + ".")


@dataclass(frozen=True)
class Article:
    headline: str
    paragraphs: tuple[str, ...]


def article(seed: int, number: int, count: int | None = None) -> Article:
    """Article ``number``: English, or in one case of six Japanese, Chinese or Thai."""
    h = mix(seed, number, 31)
    count = count or 4 + h % 13
    language = ("ja", "zh", "th")[(h >> 8) % 3] if (h >> 4) % 6 == 0 else "en"
    if language == "en":
        pool = paragraphs(seed)
        start = 64 + number * 17
        paras = tuple(pool[(start + j) % len(pool)].decode()[3:-5] for j in range(count))
    else:
        paras = tuple(languages.join(language, languages.sentences(language, h + j, 4)) for j in range(count))
    return Article(_words(mix(h, 5), 7).capitalize(), paras)


@dataclass(frozen=True)
class Dress:
    """What a page shows around its article; a near-duplicate changes one of these."""

    date: int = 0
    counter: int = 0
    ad: int = 0
    session: int = 0
    related_below: bool = False
    swap: bool = False
    comment: bool = False
    printed: bool = False
    edit: bool = False
    update: bool = False
    related: int = 0
    mobile: bool = False


def _date(h: int) -> str:
    return (f"{1 + (h >> 8) % 28} {MONTH_NAMES[h % 12]} {2020 + (h >> 16) % 5}, "
            f"{(h >> 24) % 24:02d}:{(h >> 32) % 60:02d}")


def _session(h: int) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    token = "".join(alphabet[(h >> (5 * j)) % 36] for j in range(12))
    return f"Session {token}. Visitor token {token[::-1].upper()}."


def render(s: Site, a: Article, number: int, dress: Dress = Dress()) -> bytes:
    """The HTML of article ``number`` (``a``) on site ``s``, dressed as ``dress`` says."""
    esc = html.escape
    h = mix(number, 99)
    paras = list(a.paragraphs)
    if dress.swap and len(paras) > 2:
        paras[1], paras[2] = paras[2], paras[1]
    if dress.edit:
        middle = paras[len(paras) // 2]
        words = middle.split(" ")
        if len(words) > 1:
            where = mix(h, 60) % len(words)
            words[where] = "changed" if words[where] != "changed" else "edited"
            paras[len(paras) // 2] = " ".join(words)
        else:  # Japanese, Chinese, Thai: no spaces; a typo fixed is one character replaced
            where = mix(h, 60) % len(middle)
            paras[len(paras) // 2] = middle[:where] + ("日" if middle[where] != "日" else "本") + middle[where + 1:]
    if dress.update:
        paras.append("Update: " + " ".join(_words(mix(h, 61 + j), 12) for j in range(3)) + ".")
    body = "".join(f"<p>{esc(p)}</p>\n" for p in paras)
    dateline = f"Published {_date(mix(h, dress.date))} by the newsroom."
    views = f"Read {1000 + mix(h, 50 + dress.counter) % 90000:,} times."
    ad = f"Advertisement: {ADS[(number + 3 * dress.ad) % len(ADS)]}"
    session = _session(mix(h, 70 + dress.session))
    related = "Related: " + "; ".join(_words(mix(h, 80 + i + 10 * dress.related), 5).capitalize() for i in range(4)) + "."
    comment = (f"<p>Comment from a reader: {esc(_words(mix(h, 90), 16))}.</p>\n" if dress.comment else "")
    if dress.printed:
        return (f"<!DOCTYPE html><html><head><title>{esc(a.headline)}</title></head><body>\n"
                f"<h1>{esc(a.headline)}</h1>\n<p>{esc(dateline)}</p>\n{body}"
                f"<p>Printed from {esc(s.name)}.</p>\n</body></html>\n").encode()
    if dress.mobile:  # the mobile site: a name bar, the article, a link to the full site
        return (f"<!DOCTYPE html><html><head><title>{esc(a.headline)}</title>"
                f'<meta name="viewport" content="width=device-width"></head><body>\n'
                f'<div class="bar"><a href="/">{esc(s.name)}</a> <a href="/menu">Menu</a></div>\n'
                f"<h1>{esc(a.headline)}</h1>\n<p>{esc(dateline)}</p>\n{body}"
                f'<p><a href="/full">View the full site</a> | {esc(ad)}</p>\n</body></html>\n').encode()
    menu = " ".join(f'<a href="/{i}.html">{esc(m)}</a>' for i, m in enumerate(s.menu))
    head = f"<!DOCTYPE html><html><head><title>{esc(a.headline)} | {esc(s.name)}</title></head><body>\n"
    parts = {
        "semantic": (f"<header><p>{esc(s.tagline)}</p><nav>{menu}</nav></header>\n",
                     f"<aside class=related><p>{esc(related)}</p></aside>\n",
                     "<main><article>\n", f"<aside class=ad><p>{esc(ad)}</p></aside>\n",
                     "</article></main>\n", f"<footer><p>{esc(s.footer)}</p><p>{esc(session)}</p></footer>\n"),
        "divs": (f'<div id="header"><p>{esc(s.tagline)}</p><div class="menu">{menu}</div></div>\n',
                 f'<div class="sidebar"><p>{esc(related)}</p></div>\n',
                 '<div id="content">\n', f'<div class="ad-box"><p>{esc(ad)}</p></div>\n',
                 "</div>\n", f'<div id="footer"><p>{esc(s.footer)}</p><p>{esc(session)}</p></div>\n'),
        "table": (f'<table><tr><td class="top" colspan=2><p>{esc(s.tagline)}</p>{menu}</td></tr>\n',
                  f'<tr><td class="side"><p>{esc(related)}</p></td>\n',
                  '<td class="main">\n', f'<p class="advert">{esc(ad)}</p>\n',
                  "</td></tr>\n", f'<tr><td class="bottom" colspan=2><p>{esc(s.footer)}</p><p>{esc(session)}</p></td></tr></table>\n'),
        "bare": (f"<p>{esc(s.tagline)}</p><p>{menu}</p>\n", f"<p>{esc(related)}</p>\n", "",
                 f"<p>{esc(ad)}</p>\n", "", f"<p>{esc(s.footer)}</p><p>{esc(session)}</p>\n"),
    }[s.template]
    top, side, open_main, ad_html, close_main, foot = parts
    half = len(paras) // 2 + 1
    split = body.split("\n")
    first, second = "\n".join(split[:half]) + "\n", "\n".join(split[half:])
    main = (f"{open_main}<h1>{esc(a.headline)}</h1>\n<p>{esc(dateline)} {esc(views)}</p>\n"
            f"{first}{ad_html}{second}{comment}{close_main}")
    if s.template == "table":  # the related cell stands before the main cell in a row
        return (head + top + side + main + foot + "</body></html>\n").encode()
    page = top + (main + side if dress.related_below else side + main) + foot
    return (head + page + "</body></html>\n").encode()


@dataclass(frozen=True)
class Pair:
    kind: str
    label: bool
    a_url: str
    a: bytes
    b_url: str
    b: bytes


_DRESS = {"date": Dress(date=1), "counter": Dress(counter=1), "ad": Dress(ad=1),
          "session": Dress(session=1), "reordered": Dress(related_below=True, swap=True),
          "comment": Dress(comment=True), "print": Dress(printed=True), "edit": Dress(edit=True),
          "update": Dress(update=True), "related": Dress(related=1), "mobile": Dress(mobile=True)}


def listing(s: Site, seed: int, first: int, number: int) -> bytes:
    """An index page of site ``s``: ten headlines from article ``first`` on, each with the
    first sentence of its article as teaser (short lines: no paragraph of 200 bytes)."""
    esc = html.escape
    items = []
    for n in range(first, first + 10):
        a = article(seed, n)
        teaser = a.paragraphs[0].split(". ")[0][:150]
        items.append(f'<li><a href="/{n}.html">{esc(a.headline)}</a> {esc(teaser)}</li>')
    body = Article(f"{s.name}: page {number}", ())
    page = render(s, body, number).decode()
    return page.replace("<h1>", "<ul>" + "".join(items) + "</ul><h1>", 1).encode()


def labelled_pairs(seed: int = 0, per_kind: int = 40) -> list[Pair]:
    """``per_kind`` pairs of every kind: 12 positive kinds, 6 negative (720 pairs by default)."""
    pairs = []
    sites = [site(i) for i in range(12)]
    for n in range(per_kind):
        s, other = sites[n % len(sites)], sites[(n + 5) % len(sites)]
        if other.template == s.template:
            other = sites[(n + 6) % len(sites)]
        a = article(seed, n)
        url = f"http://{s.name.lower().replace(' ', '-')}.test/{n}.html"
        base = render(s, a, n)
        for kind in POSITIVE_KINDS:
            if kind == "boilerplate":
                b_url, b = f"http://{other.name.lower().replace(' ', '-')}.test/story/{n}.html", render(other, a, n)
            else:
                b_url, b = f"{url}?v={kind}", render(s, a, n, _DRESS[kind])
            pairs.append(Pair(kind, True, url, base, b_url, b))
        m = n + 1000
        pairs.append(Pair("same-template", False, url, base, f"{url[:-5]}-{m}.html", render(s, article(seed, m), n)))
        short_a, short_b = article(seed, n + 2000, 3), article(seed, n + 3000, 3)
        pairs.append(Pair("same-template-short", False, f"{url[:-5]}-s.html", render(s, short_a, n),
                          f"{url[:-5]}-t.html", render(s, short_b, n)))
        pairs.append(Pair("other-site", False, url, base, f"http://{other.name.lower().replace(' ', '-')}.test/x{n}.html",
                          render(other, article(seed, n + 4000), n)))
        quoted = article(seed, n + 5000, 2).paragraphs
        own_a, own_b = article(seed, n + 6000), article(seed, n + 7000)
        pairs.append(Pair("shared-paragraphs", False, f"{url[:-5]}-q.html",
                          render(s, Article(own_a.headline, quoted + own_a.paragraphs), n),
                          f"{url[:-5]}-r.html", render(s, Article(own_b.headline, own_b.paragraphs + quoted), n)))
        # Part 2 of a story: its headline, then part 1's first paragraph as a recap, then its own.
        part2 = Article(a.headline + " (part 2)", a.paragraphs[:1] + article(seed, n + 8000).paragraphs)
        pairs.append(Pair("series", False, url, base, f"{url[:-5]}-part-2.html", render(s, part2, n)))
        pairs.append(Pair("listing", False, f"http://{s.name.lower().replace(' ', '-')}.test/index-{n}.html",
                          listing(s, seed, 9000 + 20 * n, n),
                          f"http://{s.name.lower().replace(' ', '-')}.test/index-{n}-next.html",
                          listing(s, seed, 9010 + 20 * n, n + 1)))
    return pairs


@dataclass
class UpdateRun:
    """What :func:`update_search` found: for each pair (by ``id``), whether its two pages
    ended in one group; and what the search cost."""

    found: dict[int, bool]
    stored_pages: int
    segment_pages: int
    cpu_s: float
    wall_s: float


def update_search(pairs: list[Pair], prints: dict[str, int], texts: dict[str, str], config,
                  stored: int = 0) -> UpdateRun:
    """Run update's own search (cycles.update.dedup.find_duplicates) on the pairs: the first
    page of every pair stored in a crawl DB (score 1.0), with ``stored`` random fingerprints
    beside them so that the block-mask joins have a crawl DB to search; the second page of
    every pair fetched in a segment (score 0.5). ``prints``: each URL's fingerprint as fetch
    stores it; ``texts``: its text. A pair is found when both its pages end in one group
    after the canonical choice (the better page is never the copy)."""
    import random
    import time
    from collections import Counter

    import duckdb
    import pyarrow as pa

    from cycles.fingerprint import content_hash
    from cycles.update.dedup import find_duplicates

    firsts = sorted({p.a_url for p in pairs})
    seconds = sorted({p.b_url for p in pairs} - set(firsts))
    rng = random.Random(13)
    randoms = [f"http://r{i % 997}.test/{i}" for i in range(stored)]

    def rows(urls: list[str], score: float, status: str, fetched: bool) -> pa.Table:
        return pa.table({
            "url": urls, "host": [u.split("/")[2] for u in urls],
            "content_hash": pa.array([content_hash(texts[u]) if fetched else None for u in urls], pa.string()),
            "simhash": pa.array([prints[u] if fetched else None for u in urls], pa.uint64()),
            "score": [score] * len(urls), "first_seen": pa.array([int(not fetched)] * len(urls), pa.timestamp("us")),
            "first_fetched": pa.array([0 if fetched else None] * len(urls), pa.timestamp("us")),
            "status": [status] * len(urls), "duplicate_of": pa.array([None] * len(urls), pa.string())})

    random_rows = pa.table({
        "url": randoms, "host": [u.split("/")[2] for u in randoms],
        "content_hash": [f"{i:032x}" for i in range(stored)],
        "simhash": pa.array([rng.getrandbits(64) for _ in range(stored)], pa.uint64()),
        "score": [1.0] * stored, "first_seen": pa.array([0] * stored, pa.timestamp("us")),
        "first_fetched": pa.array([0] * stored, pa.timestamp("us")),
        "status": ["fetched"] * stored, "duplicate_of": pa.array([None] * stored, pa.string())})
    crawl_db = pa.concat_tables([rows(firsts, 1.0, "fetched", True), random_rows,
                                 rows(seconds, 0.5, "unfetched", False)])
    segment = pa.table({"url": seconds, "host": [u.split("/")[2] for u in seconds],
                        "content_hash": [content_hash(texts[u]) for u in seconds],
                        "simhash": pa.array([prints[u] for u in seconds], pa.uint64()),
                        "text_chars": [len(texts[u]) for u in seconds]})
    con = duckdb.connect()
    con.register("neardup_set_db", crawl_db)
    started_cpu, started = time.process_time(), time.perf_counter()
    result = find_duplicates(con, "neardup_set_db", segment, config, Counter())
    cpu_s, wall_s = time.process_time() - started_cpu, time.perf_counter() - started
    canonical = dict(zip(result.marks["url"].to_pylist(), result.marks["canonical"].to_pylist()))
    found = {id(p): canonical.get(p.a_url, p.a_url) == canonical.get(p.b_url, p.b_url) for p in pairs}
    return UpdateRun(found, len(firsts) + stored, len(seconds), cpu_s, wall_s)
