"""cycles.fetch.parse: the near-duplicate fingerprint is taken of a page's main content, in paragraphs.

The content hash (exact duplicates) stays the hash of the whole visible text; only the
near-duplicate fingerprint (cycles.fingerprint.minhash64, the ``simhash`` column) leaves out
what surrounds the content (issue #13, section 3).
"""

from __future__ import annotations

import functools

from cycles.fetch.parse import SIMHASH_BLOCK_MIN_BYTES, parse_html as parse_whole

# fetch.simhash_main_content = true (the default): the fingerprint of the main content's paragraphs.
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
    assert parsed.simhash == minhash64_blocks(PARAS)
    assert parsed.simhash != minhash64(parsed.text)


def test_boilerplate_sections_are_left_out():
    long_box = " ".join(PARAS[6:8])  # long enough to pass the paragraph length rule
    for box in ("<nav><p>{}</p></nav>", "<aside><p>{}</p></aside>", "<header><p>{}</p></header>",
                "<footer><p>{}</p></footer>"):
        parsed = parse_html(page(prose(PARAS[:6]), box.format(long_box)), URL)
        assert long_box in parsed.text
        assert parsed.simhash == minhash64_blocks(PARAS[:6]), box


def test_classes_do_not_decide():
    # Measured, not kept (see _main_blocks): a class naming boilerplate is content like any.
    parsed = parse_html(page("<div class=sidebar>", prose(PARAS[:6]), "</div>"), URL)
    assert parsed.simhash == minhash64_blocks(PARAS[:6])


def test_main_or_article_is_the_content_when_there_is_one():
    outside = "<p>" + PARAS[7] + "</p>"
    parsed = parse_html(page(outside, "<article>", prose(PARAS[:6]), "</article>"), URL)
    assert parsed.simhash == minhash64_blocks(PARAS[:6])
    parsed = parse_html(page(outside, "<main>", prose(PARAS[:6]), "</main>"), URL)
    assert parsed.simhash == minhash64_blocks(PARAS[:6])


def test_short_paragraphs_are_left_out_and_the_threshold_is_a_parameter():
    short = "<p>Published 3 April 2025 by the newsroom. Session 8f3a9c2e.</p>"
    parsed = parse_html(page(short, prose()), URL)
    assert parsed.simhash == minhash64_blocks(PARAS)
    everything = parse_html(page(short, prose()), URL, block_min_bytes=0)
    assert everything.simhash == minhash64_blocks(["Published 3 April 2025 by the newsroom. Session 8f3a9c2e."] + PARAS)


def test_a_page_without_long_paragraphs_is_fingerprinted_whole():
    # A list of links, a page of short lines, a form-wrapped page: the reading does not fit.
    links = page("<ul>" + "".join(f"<li><a href=/{i}>Item number {i} of the list</a></li>" for i in range(40)) + "</ul>")
    parsed = parse_html(links, URL)
    assert parsed.simhash == minhash64(parsed.text) != 0
    lines = page("".join(f"<p>Line {i}: a short line of text</p>" for i in range(40)))
    parsed = parse_html(lines, URL)
    assert parsed.simhash == minhash64(parsed.text) != 0
    form = page("<form id=form1>", prose(), "</form>")
    assert parse_html(form, URL).simhash == minhash64_blocks(PARAS)


def test_mostly_short_paragraphs_fall_back_to_the_content():
    # One long paragraph among many short ones is under a third of the content.
    body = page("".join(f"<p>Short line {i} of a page of notes.</p>" for i in range(60)), "<p>" + PARAS[0] + "</p>")
    parsed = parse_html(body, URL)
    assert parsed.simhash == minhash64(parsed.text)


def test_five_long_paragraphs_are_the_content_among_any_amount_of_short_lines():
    # Under a third of the content either way; five long paragraphs are an article's text
    # (a page whose comments outgrow it keeps its fingerprint), four are not.
    notes = "".join(f"<p>Short line {i} of a page of notes.</p>" for i in range(400))
    parsed = parse_html(page(prose(PARAS[:5]), notes), URL)
    assert 3 * sum(map(len, PARAS[:5])) < len(parsed.text)
    assert parsed.simhash == minhash64_blocks(PARAS[:5])
    parsed = parse_html(page(prose(PARAS[:4]), notes), URL)
    assert parsed.simhash == minhash64(parsed.text)


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
    assert Config().fetch.simhash_main_content
    assert Config().fetch.simhash_block_min_bytes == SIMHASH_BLOCK_MIN_BYTES


def test_without_main_content_the_simhash_is_of_the_whole_text():
    """fetch.simhash_main_content = false: parse_html's fingerprint is the whole text's,
    header and footer included."""
    body = page("<header>" + "site header words " * 20 + "</header>", prose(PARAS[:6]))
    whole = parse_whole(body, URL)
    assert whole.simhash == minhash64(whole.text)
    assert parse_html(body, URL).simhash != whole.simhash
