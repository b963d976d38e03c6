"""cycles.fetch.parse: the near-duplicate fingerprint is taken of a page's main content, in paragraphs.

The content hash (exact duplicates) stays the hash of the whole visible text; only the
near-duplicate fingerprint (cycles.fingerprint.minhash64, the ``minhash`` column) leaves out
what surrounds the content (issue #13, section 3).
"""

from __future__ import annotations

import functools

from cycles.fetch.parse import SIMHASH_BLOCK_MIN_BYTES, parse_html as parse_whole

# fetch.minhash_main_content = true (the default): the fingerprint of the main content's paragraphs.
parse_html = functools.partial(parse_whole, block_min_bytes=SIMHASH_BLOCK_MIN_BYTES)
from cycles.fingerprint import content_hash, hamming, minhash64, minhash64_blocks, simhash64, simhash64_blocks
from testweb.model import paragraphs

PARAS = [p.decode()[3:-5] for p in paragraphs(3)[:8]]
"""Eight paragraphs of filler prose, each well over 200 bytes."""

URL = "http://example.test/a.html"


def page(*parts: str) -> bytes:
    return ("<!DOCTYPE html><html><head><title>T</title></head><body>" + "".join(parts)
            + "</body></html>").encode()


def prose(paras=PARAS) -> str:
    return "".join(f"<p>{p}</p>" for p in paras)


def test_the_content_hash_is_of_the_whole_text_the_simhash_of_the_paragraphs():
    body = page("<header><p>Site tagline here</p></header>", prose(), "<footer><p>Copyright</p></footer>")
    parsed = parse_html(body, URL)
    assert parsed.text.startswith("Site tagline here") and parsed.text.endswith("Copyright")
    assert parsed.content_hash == content_hash(parsed.text)
    assert parsed.minhash == minhash64_blocks(PARAS)
    assert parsed.minhash != minhash64(parsed.text)


def test_boilerplate_sections_are_left_out():
    long_box = " ".join(PARAS[6:8])  # long enough to pass the paragraph length rule
    for box in ("<nav><p>{}</p></nav>", "<aside><p>{}</p></aside>", "<header><p>{}</p></header>",
                "<footer><p>{}</p></footer>"):
        parsed = parse_html(page(prose(PARAS[:6]), box.format(long_box)), URL)
        assert long_box in parsed.text
        assert parsed.minhash == minhash64_blocks(PARAS[:6]), box


def test_classes_do_not_decide():
    # Measured, not kept (see _main_blocks): a class naming boilerplate is content like any.
    parsed = parse_html(page("<div class=sidebar>", prose(PARAS[:6]), "</div>"), URL)
    assert parsed.minhash == minhash64_blocks(PARAS[:6])


def test_main_or_article_is_the_content_when_there_is_one():
    outside = "<p>" + PARAS[7] + "</p>"
    parsed = parse_html(page(outside, "<article>", prose(PARAS[:6]), "</article>"), URL)
    assert parsed.minhash == minhash64_blocks(PARAS[:6])
    parsed = parse_html(page(outside, "<main>", prose(PARAS[:6]), "</main>"), URL)
    assert parsed.minhash == minhash64_blocks(PARAS[:6])


def test_short_paragraphs_are_left_out_and_the_threshold_is_a_parameter():
    short = "<p>Published 3 April 2025 by the newsroom. Session 8f3a9c2e.</p>"
    parsed = parse_html(page(short, prose()), URL)
    assert parsed.minhash == minhash64_blocks(PARAS)
    everything = parse_html(page(short, prose()), URL, block_min_bytes=0)
    assert everything.minhash == minhash64_blocks(["Published 3 April 2025 by the newsroom. Session 8f3a9c2e."] + PARAS)


def test_a_page_without_long_paragraphs_is_fingerprinted_whole():
    # A list of links, a page of short lines, a form-wrapped page: the reading does not fit.
    links = page("<ul>" + "".join(f"<li><a href=/{i}>Item number {i} of the list</a></li>" for i in range(40)) + "</ul>")
    parsed = parse_html(links, URL)
    assert parsed.minhash == minhash64(parsed.text) != 0
    lines = page("".join(f"<p>Line {i}: a short line of text</p>" for i in range(40)))
    parsed = parse_html(lines, URL)
    assert parsed.minhash == minhash64(parsed.text) != 0
    form = page("<form id=form1>", prose(), "</form>")
    assert parse_html(form, URL).minhash == minhash64_blocks(PARAS)


def test_mostly_short_paragraphs_fall_back_to_the_content():
    # One long paragraph among many short ones is under a third of the content.
    body = page("".join(f"<p>Short line {i} of a page of notes.</p>" for i in range(60)), "<p>" + PARAS[0] + "</p>")
    parsed = parse_html(body, URL)
    assert parsed.minhash == minhash64(parsed.text)


def test_five_long_paragraphs_are_the_content_among_any_amount_of_short_lines():
    # Under a third of the content either way; five long paragraphs are an article's text
    # (a page whose comments outgrow it keeps its fingerprint), four are not.
    notes = "".join(f"<p>Short line {i} of a page of notes.</p>" for i in range(400))
    parsed = parse_html(page(prose(PARAS[:5]), notes), URL)
    assert 3 * sum(map(len, PARAS[:5])) < len(parsed.text)
    assert parsed.minhash == minhash64_blocks(PARAS[:5])
    parsed = parse_html(page(prose(PARAS[:4]), notes), URL)
    assert parsed.minhash == minhash64(parsed.text)


def test_simhash64_blocks_ignores_block_order_and_equals_simhash64_for_one_block():
    assert simhash64_blocks([PARAS[0]]) == simhash64(PARAS[0])
    assert simhash64_blocks([]) == simhash64("") == 0
    assert simhash64_blocks(PARAS) == simhash64_blocks(PARAS[::-1]) == simhash64_blocks(["", *PARAS, " "])
    assert hamming(simhash64(" ".join(PARAS)), simhash64(" ".join(PARAS[::-1]))) > 0
    assert simhash64_blocks(["日本語の文章です。" * 20, "ภาษาไทย" * 20]) == simhash64_blocks(["ภาษาไทย" * 20, "日本語の文章です。" * 20])


def test_minhash64_blocks_ignores_block_order_and_equals_minhash64_for_one_block():
    assert minhash64_blocks([PARAS[0]]) == minhash64(PARAS[0])
    assert minhash64_blocks([]) == minhash64("") == 0
    assert minhash64_blocks(PARAS) == minhash64_blocks(PARAS[::-1]) == minhash64_blocks(["", *PARAS, " "])
    assert minhash64_blocks(["日本語の文章です。" * 20, "ภาษาไทย" * 20]) == minhash64_blocks(["ภาษาไทย" * 20, "日本語の文章です。" * 20])


def test_main_content_is_the_default():
    from cycles.config import Config
    assert Config().fetch.minhash_main_content
    assert Config().fetch.minhash_block_min_bytes == SIMHASH_BLOCK_MIN_BYTES


def test_without_main_content_the_simhash_is_of_the_whole_text():
    """fetch.minhash_main_content = false: parse_html's fingerprint is the whole text's,
    header and footer included."""
    body = page("<header>" + "site header words " * 20 + "</header>", prose(PARAS[:6]))
    whole = parse_whole(body, URL)
    assert whole.minhash == minhash64(whole.text)
    assert parse_html(body, URL).minhash != whole.minhash


# --- the one-transform content (parse._marked_content) against the marking it replaced ---

def _marked_by_setters(root, text: str, block_min_bytes: int) -> list[str]:
    """_main_blocks as it was (commit 307205d): boilerplate emptied in the tree, each
    paragraph's start and end set into it as marks, one normalize-space() of the content."""
    from cycles.fetch import parse
    from cycles.fingerprint import collapse_other_whitespace

    start, end = "\ue000", "\ue001"
    body = root.find("body")
    if body is None or not text:
        return [text]
    for element in list(body.iter(*parse._BOILERPLATE_TAGS)):
        element.clear(keep_tail=True)
    main = next(body.iter(*parse._MAIN_TAGS), body)
    for element in main.iter(*parse._BLOCKS):
        inner, tail = element.text, element.tail
        element.text = start + inner if inner else start
        element.tail = end + tail if tail else end
    pieces = collapse_other_whitespace(parse._text_of(main)).split(end)
    content = sum(len(piece) for piece in pieces) - len(start) * (len(pieces) - 1)
    if content < block_min_bytes:
        return [text]
    blocks = [block for block in (piece.rpartition(start)[2] for piece in pieces[:-1])
              if len(block.encode()) >= block_min_bytes]
    kept = sum(len(block) for block in blocks)
    enough = len(blocks) >= parse._MAIN_MIN_BLOCKS
    return blocks if enough or 3 * kept >= content else ["".join(pieces).replace(start, "")]


def _both_ways(body: bytes, url: str, block_min_bytes: int) -> tuple[list[str], list[str]]:
    from cycles.fetch import parse

    def prepared():
        text, encoding = parse._decode(body, None)
        root = parse._tree(body, text, encoding)
        if root is None:
            return None, ""
        scan = parse._scan(root, "crawlbot")
        parse._clear(scan.hidden)
        parse._links(scan, url)
        parse._clear(scan.noscripts)
        return root, parse._visible_text(root)

    root, text = prepared()
    if root is None:
        return [], []
    new = parse._main_blocks(root, text, block_min_bytes)
    root, text = prepared()
    return new, _marked_by_setters(root, text, block_min_bytes)


NESTED = [
    page("<header><main>", prose(PARAS[:2]), "</main></header><article>", prose(PARAS[2:7]), "</article>"),
    page("<main><nav>", prose(PARAS[:2]), "</nav>", prose(PARAS[2:7]), "<aside><p>aside</p></aside></main>"),
    page("<blockquote><p>", PARAS[0], "</p>", PARAS[1], "</blockquote>", prose(PARAS[2:7])),
    page("<dl><dt>Term</dt><dd>", PARAS[0], "<p>", PARAS[1], "</p> after</dd></dl>", "<pre>  a\n\tb  </pre>"),
    page("<p></p><p> </p><p>x</p>", "<article><article>", prose(PARAS[:5]), "</article></article>"),
    page("<p>", PARAS[0], " é ü 日本語 ", PARAS[1], "\xa0\u3000 tail</p>", prose(PARAS[2:6])),
    page("<p>Short <b>bold</b> <a href=/x>link</a> text.</p>" * 30),
    page("<footer>", prose(), "</footer>"),
    b"<html><head><title>no body</title></head></html>",
    page("<div>" * 200, prose(PARAS[:6]), "</div>" * 200),
]


def test_the_content_transform_gives_the_marked_texts_blocks():
    from testweb.neardup_set import labelled_pairs
    from testweb.web import Web

    bodies = list(NESTED)
    for pair in labelled_pairs(per_kind=3):
        bodies += [pair.a, pair.b]
    web = Web(hosts=2, pages=5, page_bytes=30_000, special=False)
    for profile in list(web.profiles.values())[:2]:
        bodies += [profile.handle("GET", f"/p/{k}.html", {}).body for k in range(5)]
    for body in bodies:
        for block_min_bytes in (0, 200, 1000):
            new, old = _both_ways(body, URL, block_min_bytes)
            assert new == old, body[:200]


def test_the_content_transform_on_html5lib_inputs():
    import json
    from pathlib import Path

    from tests.examples import corpus_sample

    path = Path(__file__).resolve().parent.parent / "data" / "html" / "html5lib_tree_construction.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    differ = []
    for row in corpus_sample(rows):
        data = row["data"]
        if row["fragment_context"]:
            data = f"<{row['fragment_context'].split()[-1]}>{data}"
        body = data.encode("utf-8", "surrogatepass")
        for block_min_bytes in (0, 5):
            new, old = _both_ways(body, URL, block_min_bytes)
            if new != old:
                differ.append((data, new, old))
    # The marking replaced control characters (U+0001 ...) of a paragraph's own text by
    # spaces where lxml refused to set them back; the transform leaves them (a separator
    # either way for the fingerprint's tokens). And a page's own U+E000 or U+E001 cut its
    # paragraphs there (those were the marks); now it stays text. No other difference.
    import re
    control = re.compile("[\x00-\x08\x0b\x0e-\x1f]")
    assert all(control.search(data) or re.search("[\ue000\ue001]", "".join(new)) for data, new, _ in differ), differ[:3]
    assert len(differ) < 20


def test_a_page_holding_the_marks_is_cut_by_others():
    """A paragraph holding U+0081 or U+008D (a character reference can make one) is not cut
    there: that page's paragraphs are marked with private-use characters instead."""
    from cycles.fetch.parse import _MARKS

    for mark in _MARKS:
        paras = [PARAS[0][:150] + f"&#x{ord(mark):04x};" + PARAS[0][150:]] + PARAS[1:6]
        parsed = parse_html(page(prose(paras)), URL)
        assert parsed.minhash == minhash64_blocks([PARAS[0][:150] + mark + PARAS[0][150:]] + PARAS[1:6])
