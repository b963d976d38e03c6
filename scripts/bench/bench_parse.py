"""Benchmark of the page parser (cycles.fetch.parse) and the fingerprints (cycles.fingerprint).

Usage::

    .venv/bin/python scripts/bench/web.py parse [--pages 300] [--repeat 5] [--warc PATH] [--testweb 300]
    .venv/bin/python scripts/bench/web.py parse --samples 0     # timings only

Generates realistic ~30 KB news-like pages (head with inline script and style, a 40-link
navigation, breadcrumbs, ~28 paragraphs of Zipf-distributed words with inline links, a
related-articles list, a nofollow footer; half of them minified) and prints, per page:

- microseconds for parse_html as a whole (wall clock and CPU time; with the main content,
  fetch's default, and with the whole text, ``fetch.minhash_main_content = false``) and for
  each of its steps, the same functions in the same order: decode, lxml parse, scan (pad
  block elements; collect anchors, hidden elements and head data), clear
  script/style/template, links (resolve, deduplicate, anchor text), text, main content
  (``_main_blocks``, and its XSLT alone), fingerprints of the main content's blocks or of
  the whole text (and within them the content hash and the SimHash, each timed alone);
- for the test web's pages (``--testweb``: the ~30 KB pages scripts/bench/web.py fetch crawls,
  rendered in-process by testweb, mostly paragraphs of text, 7 links), also the rest
  of the fetch worker's CPU work on a page, in microseconds per page: the WARC request and
  response records (cycles.fetch.output: headers and digests, then the gzip member), and a
  chunk's commit (rows to Arrow, Parquet files) per row;
- near-duplicate sensitivity: Hamming distances between a page and the same page with its
  date changed, with one sentence added, with one paragraph replaced; a different article
  on the same template; a page of another template; two texts from an 80-word vocabulary;
  with --warc, real pages with one word changed and pairs of different real pages. For the
  features used (3-token shingles
  without numbers) and for the alternatives (2-token shingles, 3-token shingles with
  numbers, tokens, distinct tokens), so that the choice documented in
  cycles/fingerprint.py can be checked.

Times are the best of ``--repeat`` runs over all pages, measured with time.perf_counter: the
best run is the one least disturbed by other processes on a shared machine. The total is
also given in CPU time of the process (time.process_time), which leaves out the time the
process waited for a CPU: the fetch budget is in CPU time. With --warc FILE (a WARC
of real pages, e.g. a Common Crawl sample; read, not copied), the same timings are also
taken over its HTML responses.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from pathlib import Path

import benchlib  # noqa: E402,F401  (the repository on sys.path: testweb)

from cycles import fingerprint  # noqa: E402
from cycles.fetch import parse  # noqa: E402


_STOP = ("the of and to a in is that for it as was with be by on not he this are or his from "
         "at which but have an they you were her she there been one all we their has would "
         "when if so no will more out up into do any your what time can only other new some "
         "could these two may then first than my very about over").split()
_SYLLABLES = ("ka lo mi ren sta tor pe qua vin dal ex or un bri cho ment ing ly ter son gra "
              "phi zo nel").split()


def _vocabulary(size: int = 5000) -> list[str]:
    """Stop words first, then made-up words: with Zipf weights, a text looks like English
    word frequencies (the few frequent words dominate)."""
    rng = random.Random(0)
    words, seen = list(_STOP), set(_STOP)
    while len(words) < size:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


VOCABULARY = _vocabulary()
WEIGHTS = [1 / (rank + 1) for rank in range(len(VOCABULARY))]


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choices(VOCABULARY, WEIGHTS, k=rng.randint(8, 22))).capitalize() + "."


def make_article(seed: int, paragraphs: int = 28) -> list[str]:
    """The paragraphs (HTML) of one article."""
    rng = random.Random(seed)
    out = []
    for _ in range(paragraphs):
        sentences = []
        for _ in range(rng.randint(3, 6)):
            sentence = _sentence(rng)
            if rng.random() < 0.35:  # an inline link in about a third of the sentences
                word = rng.choice(VOCABULARY)
                link = (f' <a href="../articles/{word}-{rng.randint(1, 9999)}.html">'
                        f'{word} {rng.choice(VOCABULARY)}</a> ')
                sentence = sentence.replace(" ", link, 1)
            sentences.append(sentence)
        out.append("<p>" + " ".join(sentences) + "</p>")
    return out


def make_page(article: int, template: int = 1, date: str = "12 March 2024",
              minified: bool = False, paragraphs: list[str] | None = None) -> bytes:
    """One ~30 KB page: ``template`` fixes the boilerplate, ``article`` the content."""
    trng = random.Random(template * 7919)
    rng = random.Random(article * 104729 + 1)
    nl = "" if minified else "\n"
    pick = trng.choice
    nav = nl.join(f'<li><a href="/section/{pick(VOCABULARY)}-{i}/">{pick(VOCABULARY).title()} '
                  f'{pick(VOCABULARY)}</a></li>' for i in range(40))
    footer = nl.join(f'<li><a href="https://partner{i}.example.org/{pick(VOCABULARY)}" '
                     f'rel="nofollow">{pick(VOCABULARY)}</a></li>' for i in range(20))
    script = "var cfg = {" + ",".join(f'"{pick(VOCABULARY)}{i}": {i}' for i in range(250)) + "};"
    style = " ".join(f".c{i} {{ color: #{i:06x}; margin: {i}px; }}" for i in range(40))
    site = pick(VOCABULARY).title() + " News"
    body = paragraphs if paragraphs is not None else make_article(article)
    related = nl.join(
        f'<li><a href="//www.example.com/articles/{rng.choice(VOCABULARY)}-{rng.randint(1, 99999)}'
        f'.html?ref=side">{rng.choice(VOCABULARY)} {rng.choice(VOCABULARY)}&nbsp;'
        f'{rng.choice(VOCABULARY)}</a></li>' for _ in range(25))
    title = " ".join(rng.choices(VOCABULARY, WEIGHTS, k=6)).title()
    author = article % 50
    html = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title} | {site}</title>
<meta name="viewport" content="width=device-width"><link rel="canonical" href="/articles/{article}.html">
<link rel="stylesheet" href="/static/site.css"><style>{style}</style><script>{script}</script></head>
<body><header><div class="logo"><a href="/">{site}</a></div><nav><ul>{nav}</ul></nav></header>{nl}
<div class="crumbs"><a href="/">Home</a> &raquo; <a href="/section/world/">World</a></div>
<main><article><h1>{title}</h1><div class="meta">Published on <time>{date}</time>
by <a href="/authors/{author}">Author {author}</a></div>{nl}
{nl.join(body)}</article>
<aside><h2>Related</h2><ul>{related}</ul></aside></main>
<footer><ul>{footer}</ul><p>&copy; 2024 {site}. All rights reserved.
<a href="mailto:news@example.com">Contact</a> <a href="javascript:void(0)">Top</a>
<a href="#top">Back to top</a></p></footer>
<script>window.dataLayer = window.dataLayer || []; function gtag(){{dataLayer.push(arguments);}}</script>
</body></html>"""
    return html.encode("utf-8")


# --- timing ---------------------------------------------------------------------------------

def best_per_item(function, items, repeat: int, setup=None, clock=time.perf_counter) -> float:
    """Best (least disturbed) mean time per item in µs over ``repeat`` runs.

    ``setup`` makes a fresh input for steps that change theirs (a tree), right before the
    step is timed, so that the input is as cache-warm as in parse_html, where each step
    follows the previous one on the same page.
    """
    best = float("inf")
    for _ in range(repeat):
        total = 0.0
        for item in items:
            value = setup(item) if setup else item
            start = clock()
            function(value)
            total += clock() - start
        best = min(best, total / len(items) * 1e6)
    return best


def time_steps(pages: list[tuple[bytes, str, str | None]], repeat: int) -> dict[str, float]:
    """µs per page of parse_html and of each of its steps (the same functions, in order)."""
    from cycles.fingerprint import _content_hash_normalised, _simhash_normalised

    decoded = [parse._decode(body, ctype) for body, _, ctype in pages]
    indexes = list(range(len(pages)))

    def tree(index: int):
        (body, _, _), (text, encoding) = pages[index], decoded[index]
        return parse._tree(body, text, encoding)

    def scanned(index: int):
        root = tree(index)
        scan = parse._scan(root, "crawlbot")
        return root, scan

    def cleared(index: int):
        root, scan = scanned(index)
        parse._clear(scan.hidden)
        return root, scan, pages[index][1]

    def with_links(index: int):
        root, scan, url = cleared(index)
        parse._links(scan, url)
        return root, scan

    def text_step(state) -> str:
        root, scan = state
        parse._clear(scan.noscripts)
        return parse._visible_text(root)

    def with_text(index: int):
        root, scan = with_links(index)
        return root, text_step((root, scan))

    texts = [text_step(with_links(i)) for i in indexes]
    lowered = [fingerprint.lower(text) for text in texts]
    fingerprints = lambda text: fingerprint.fingerprints(text, collapsed=True)  # noqa: E731
    whole = lambda page: parse.parse_html(page[0], page[1], page[2])  # noqa: E731
    # fetch.minhash_main_content = true (the default): the fingerprint of the main content.
    block = parse.SIMHASH_BLOCK_MIN_BYTES
    main = lambda page: parse.parse_html(page[0], page[1], page[2], "crawlbot", block)  # noqa: E731
    blocks = [parse._main_blocks(*with_text(i), block) for i in indexes]
    return {
        "parse_html (total, main content)": best_per_item(main, pages, repeat),
        "parse_html (total, main content, CPU time of the process)": best_per_item(
            main, pages, repeat, clock=time.process_time),
        "parse_html (total, whole text)": best_per_item(whole, pages, repeat),
        "parse_html (total, whole text, CPU time of the process)": best_per_item(
            whole, pages, repeat, clock=time.process_time),
        "  decode (charset, validate UTF-8)": best_per_item(
            lambda page: parse._decode(page[0], page[2]), pages, repeat),
        "  lxml parse": best_per_item(tree, indexes, repeat),
        "  scan (pad blocks; collect anchors, head)": best_per_item(
            lambda root: parse._scan(root, "crawlbot"), indexes, repeat, setup=tree),
        "  clear script/style/template": best_per_item(
            lambda state: parse._clear(state[1].hidden), indexes, repeat, setup=scanned),
        "  links (resolve, dedupe, anchor text, Link)": best_per_item(
            lambda state: parse._links(state[1], state[2]), indexes, repeat, setup=cleared),
        "  text (clear noscript, normalize-space)": best_per_item(text_step, indexes, repeat,
                                                                   setup=with_links),
        "  main content (_main_blocks: XSLT, blocks)": best_per_item(
            lambda state: parse._main_blocks(*state, block), indexes, repeat, setup=with_text),
        "    of which the marked content (XSLT)": best_per_item(
            lambda state: parse._marked_content(state[0], parse._MARKS), indexes, repeat, setup=with_text),
        "  fingerprints of the main content (content hash, MinHash)": best_per_item(
            lambda item: fingerprint.fingerprints(item[0], collapsed=True, blocks=item[1]),
            list(zip(texts, blocks)), repeat),
        "  fingerprints of the whole text (content hash, MinHash)": best_per_item(fingerprints, texts, repeat),
        "    content hash alone (BLAKE2b)": best_per_item(_content_hash_normalised, lowered, repeat),
        "    simhash alone (numpy)": best_per_item(_simhash_normalised, lowered, repeat),
    }


# --- near-duplicate sensitivity ---------------------------------------------------------------

def _variant(width: int, numbers: bool, distinct: bool = False):
    """A SimHash function with other features than cycles.fingerprint's (for comparison)."""
    import numpy as np

    from cycles.fingerprint import (_CLASSES, _CLASSES_WITH_NUMBERS, _features,
                                    _simhash_of_features, _token_hashes)

    def simhash(text: str) -> int:
        with np.errstate(over="ignore"):
            tokens = _token_hashes(fingerprint.normalise(text),
                                   _CLASSES_WITH_NUMBERS if numbers else _CLASSES)
            features = _features(tokens, width)
            if distinct:
                features = np.unique(features)
            return _simhash_of_features(features) if len(features) else 0
    return simhash


VARIANTS = {
    "3-shingles (used)": fingerprint.simhash64,
    "2-shingles": _variant(2, numbers=False),
    "3-shingles+numbers": _variant(3, numbers=True),
    "tokens": _variant(1, numbers=True),
    "distinct tokens": _variant(1, numbers=True, distinct=True),
}
"""Feature choices compared: the one used (3-token shingles without numbers), 2-token
shingles, 3-token shingles with numbers, single tokens (counted, and each distinct token
once)."""

SMALL_VOCABULARY = VOCABULARY[:40] + VOCABULARY[200:240]
"""80 words: pages of one narrow topic (listings, tables, forums) reuse few words."""


def sensitivity(samples: int, real: list[tuple[bytes, str, str | None]]) -> dict[str, dict[str, list[int]]]:
    """Pair kind -> variant -> Hamming distances, for pairs of pages that should and should
    not count as near-duplicates."""
    rows: dict[str, dict[str, list[int]]] = {}

    def add_texts(name: str, text_a: str, text_b: str) -> None:
        row = rows.setdefault(name, {variant: [] for variant in VARIANTS})
        for variant, simhash in VARIANTS.items():
            row[variant].append(fingerprint.hamming(simhash(text_a), simhash(text_b)))

    def add(name: str, a: bytes, b: bytes) -> None:
        add_texts(name, parse.parse_html(a, "http://www.example.com/a").text,
                  parse.parse_html(b, "http://www.example.com/a").text)

    later = "3 April 2025"
    for seed in range(samples):
        article = 1000 + seed
        template = seed % 7
        paragraphs = make_article(article)
        page = make_page(article, template, paragraphs=paragraphs)
        add("same page, date changed", page,
            make_page(article, template, date=later, paragraphs=paragraphs))
        short = paragraphs[:4]
        add("4-paragraph page, date changed", make_page(article, template, paragraphs=short),
            make_page(article, template, date=later, paragraphs=short))
        rng = random.Random(seed)
        edited = list(paragraphs)
        index = rng.randrange(len(edited))
        edited[index] = edited[index].replace("</p>", " " + _sentence(rng) + "</p>")
        add("same page, one sentence added", page, make_page(article, template, paragraphs=edited))
        edited = list(paragraphs)
        edited[index] = make_article(article + 500_000, paragraphs=1)[0]
        add("same page, one paragraph of 28 replaced", page,
            make_page(article, template, paragraphs=edited))
        add("other article, same template", page, make_page(article + 1, template))
        add("other 4-paragraph article, same template", make_page(article, template, paragraphs=short),
            make_page(article + 1, template, paragraphs=make_article(article + 1)[:4]))
        add("other article, other template", page, make_page(article + 1, template + 1))
        narrow = [random.Random(seed * 2 + i) for i in range(2)]
        add_texts("other text, 80-word vocabulary, 2,000 words",
                  *(" ".join(rng.choices(SMALL_VOCABULARY, WEIGHTS[:80], k=2000)) for rng in narrow))
    texts = [parse.parse_html(*page).text for page in real]
    for text in texts:
        words = text.split()
        if len(words) < 50:
            continue
        rng = random.Random(len(words))
        for _ in range(5):
            edited_words = list(words)
            edited_words[rng.randrange(len(words))] = "changed"
            add_texts("real page, one word changed", text, " ".join(edited_words))
    for a, b in itertools.combinations(texts, 2):
        add_texts("real pages, different pages", a, b)
    return rows


def warc_pages(path: Path) -> list[tuple[bytes, str, str | None]]:
    """(body, url, content type) of the HTML 200 responses of a WARC file."""
    from warcio.archiveiterator import ArchiveIterator
    pages = []
    with path.open("rb") as stream:
        for record in ArchiveIterator(stream):
            if record.rec_type != "response" or record.http_headers is None:
                continue
            ctype = record.http_headers.get_header("Content-Type")
            if record.http_headers.get_statuscode() == "200" and ctype and "html" in ctype:
                pages.append((record.content_stream().read(),
                              record.rec_headers.get_header("WARC-Target-URI"), ctype))
    return pages


def testweb_pages(count: int) -> list[tuple[bytes, str, str | None]]:
    """(body, url, content type) of ``count`` article pages of the test web bench_fetch.py
    crawls (testweb, regular hosts, ~30 KB), rendered in-process."""
    from testweb.web import Web
    per_host = 10
    web = Web(hosts=max(1, count // per_host) + 1, pages=30, page_bytes=30_000, special=False)
    pages = []
    for profile in list(web.profiles.values()):
        for k in range(per_host):
            response = profile.handle("GET", f"/p/{k}.html", {})
            pages.append((response.body, profile.url(f"/p/{k}.html"), "text/html; charset=utf-8"))
    return pages[:count]


def time_output(pages: list[tuple[bytes, str, str | None]], repeat: int) -> dict[str, float]:
    """µs per page of what the fetch worker does with a page besides parsing it."""
    import tempfile
    import zlib

    from cycles.tables import schema
    from cycles.fetch.output import PartitionOutput
    from cycles.storage.store import Store

    headers = [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", "30000"),
               ("ETag", '"0123456789abcdef"'), ("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")]
    request = [("Host", "h1.web.test"), ("User-Agent", "crawlbot/1.0"), ("Accept-Encoding", "gzip, deflate")]
    parsed = [parse.parse_html(*page) for page in pages]
    rows = [dict({name: None for name in schema.FETCHED.names}, url=url, host="h1.web.test", outcome="ok",
                 http_status=200, content_type=ctype, body_bytes=len(body), title=page.title, text=page.text,
                 content_hash=page.content_hash, minhash=page.minhash, warc_file="warc/x.warc.gz",
                 warc_offset=0, warc_length=1, duration_ms=100)
            for (body, url, ctype), page in zip(pages, parsed)]
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp))
        output = PartitionOutput(store, "bench", store.path("segments") / "bench", 0, 1,
                                 "crawlbot/1.0", gzip_level=1)

        def write(page) -> None:
            output.write_response(page[1], "10.0.0.1", request, "GET /p/1.html HTTP/1.1", "HTTP/1.1 200 OK",
                                  headers, page[0], "2024-03-01T12:00:00.123456Z")

        def fresh_rows(_) -> list[dict]:
            # New text objects, as a chunk's are: pyarrow caches the UTF-8 of a str it has
            # converted, which would make a repeated commit cheaper than a real one.
            return [dict(row, text=row["text"].encode().decode()) for row in rows]

        def commit(chunk_rows: list[dict]) -> None:  # a whole chunk, as flush() writes it
            output.rows = chunk_rows
            output.flush()

        times = {
            "WARC request + response records (with gzip)": best_per_item(write, pages, repeat),
            "  of which gzip (level 1) of the response":
                best_per_item(lambda page: zlib.compress(page[0], 1, 31), pages, repeat),
            "commit a chunk (Arrow, Parquet), per row":
                best_per_item(commit, [None], repeat, setup=fresh_rows) / len(rows),
        }
        output.close()
    return times


def _describe(pages: list[tuple[bytes, str, str | None]]) -> str:
    parsed = [parse.parse_html(*page) for page in pages]
    return (f"{len(pages)} pages, mean {statistics.mean(len(p[0]) for p in pages) / 1024:.1f} KiB, "
            f"{statistics.mean(len(p.links) for p in parsed):.0f} links, "
            f"{statistics.mean(len(p.text.split()) for p in parsed):.0f} words of text")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=300, help="generated pages to time")
    parser.add_argument("--repeat", type=int, default=5, help="runs; the best is reported")
    parser.add_argument("--samples", type=int, default=100, help="generated page pairs per sensitivity row")
    parser.add_argument("--warc", type=Path, default=None,
                        help="also time the HTML responses of this WARC file")
    parser.add_argument("--testweb", type=int, default=300,
                        help="also time this many of bench_fetch.py's test-web pages, WARC and commit included (0: none)")
    args = parser.parse_args()

    generated = [(make_page(i, template=i % 5, minified=i % 2 == 0), f"http://www.example.com/a/{i}.html",
                  "text/html; charset=utf-8") for i in range(args.pages)]
    parse.parse_html(*generated[0])  # warm up: class table, power tables, parser
    sets = [("generated", generated)]
    if args.warc is not None:
        sets.append((f"real ({args.warc.name})", warc_pages(args.warc)))
    if args.testweb > 0:
        sets.append(("test web (bench_fetch.py's pages)", testweb_pages(args.testweb)))
    for name, pages in sets:
        print(f"\n{name}: {_describe(pages)}")
        steps = time_steps(pages, args.repeat)
        if name.startswith("test web"):
            steps.update(time_output(pages, args.repeat))
        for step, micros in steps.items():
            print(f"  {step:50s} {micros:8.1f} µs/page")
    if args.samples <= 0:
        return

    print("\nNear-duplicate sensitivity: Hamming distance of 64-bit SimHashes, min / median / max, "
          "and the share of pairs within k = 3 (taken for near-duplicates)")
    real = warc_pages(args.warc) if args.warc is not None else []
    rows = sensitivity(args.samples, real)
    print(f"  {'pair':42s} {'n':>4s}" + "".join(f" {variant:>22s}" for variant in VARIANTS))
    for name, row in rows.items():
        cells = "".join(
            f" {min(d):3d} /{statistics.median(d):5.1f} /{max(d):3d} {sum(x <= 3 for x in d) / len(d):4.2f}"
            for d in row.values())
        print(f"  {name:42s} {len(next(iter(row.values()))):4d}{cells}")


if __name__ == "__main__":
    main()
