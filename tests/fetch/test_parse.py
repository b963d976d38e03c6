"""cycles.fetch.parse: charset, links, robots meta, canonical, title, text, sniffing, robustness."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from cycles import fingerprint
from tests.examples import corpus_sample
from cycles.fetch.parse import (ANCHOR_MAX_CHARS, META_PRESCAN_BYTES, Link, ParsedPage,
                                decode_html, parse_html, sniff_html)

DATA = Path(__file__).resolve().parent.parent / "data" / "html"
PAGE = "http://example.com/dir/page.html"


def parse(html: str | bytes, url: str = PAGE, content_type: str | None = None, **kwargs) -> ParsedPage:
    body = html.encode("utf-8") if isinstance(html, str) else html
    return parse_html(body, url, content_type, **kwargs)


def urls(page: ParsedPage) -> list[str]:
    return [link.url for link in page.links]


def link_to(page: ParsedPage, url: str) -> Link:
    return next(link for link in page.links if link.url == url)


def assert_sane(page: ParsedPage) -> None:
    """The documented types and invariants of a ParsedPage."""
    assert isinstance(page, ParsedPage)
    assert page.title is None or (isinstance(page.title, str) and page.title)
    assert isinstance(page.text, str) and page.text == " ".join(page.text.split())
    assert isinstance(page.links, list)
    seen = set()
    for link in page.links:
        assert isinstance(link, Link)
        assert link.url.startswith(("http://", "https://")) and "#" not in link.url
        assert link.url not in seen
        seen.add(link.url)
        assert isinstance(link.anchor, str) and len(link.anchor) <= ANCHOR_MAX_CHARS
        assert isinstance(link.nofollow, bool)
    assert page.canonical is None or page.canonical.startswith(("http://", "https://"))
    assert isinstance(page.noindex, bool) and isinstance(page.nofollow, bool)
    assert page.content_hash == fingerprint.content_hash(page.text)
    assert page.minhash == fingerprint.minhash64(page.text)
    assert 0 <= page.minhash < 1 << 64
    assert isinstance(page.encoding, str) and page.encoding


# --- links ---------------------------------------------------------------------------------------

def test_links_resolve_relative_protocol_relative_and_absolute():
    page = parse("""<body>
        <a href="other.html">relative</a>
        <a href="../up.html">up</a>
        <a href="./same/x?q=1">dot</a>
        <a href="/root">root</a>
        <a href="?page=2">query</a>
        <a href="//cdn.example.net/lib">protocol-relative</a>
        <a href="https://secure.example.org/a/b">absolute</a>
        <a href="HTTP://Upper.Example.com/X">upper-case scheme</a>
        <a href="/a/b/../c/./d">dots</a>
    </body>""")
    assert urls(page) == [
        "http://example.com/dir/other.html",
        "http://example.com/up.html",
        "http://example.com/dir/same/x?q=1",
        "http://example.com/root",
        "http://example.com/dir/page.html?page=2",
        "http://cdn.example.net/lib",
        "https://secure.example.org/a/b",
        "http://Upper.Example.com/X",  # the scheme is lower-cased, the rest left to update
        "http://example.com/a/c/d",
    ]
    assert_sane(page)


def test_protocol_relative_link_takes_the_page_scheme():
    page = parse('<a href="//cdn.example.net/x">x</a>', url="https://example.com/")
    assert urls(page) == ["https://cdn.example.net/x"]


def test_rfc3986_reference_resolution_examples():
    # RFC 3986 §5.4.1 and §5.4.2, except what a crawler skips: other schemes ("g:h") and
    # same-document references ("#s", "").
    base = "http://a/b/c/d;p?q"
    cases = {
        "g": "http://a/b/c/g", "./g": "http://a/b/c/g", "g/": "http://a/b/c/g/", "/g": "http://a/g",
        "//g": "http://g", "?y": "http://a/b/c/d;p?y", "g?y": "http://a/b/c/g?y",
        "g#s": "http://a/b/c/g", "g?y#s": "http://a/b/c/g?y", ";x": "http://a/b/c/;x",
        "g;x": "http://a/b/c/g;x", "g;x?y#s": "http://a/b/c/g;x?y", ".": "http://a/b/c/",
        "./": "http://a/b/c/", "..": "http://a/b/", "../": "http://a/b/", "../g": "http://a/b/g",
        "../..": "http://a/", "../../": "http://a/", "../../g": "http://a/g",
        "../../../g": "http://a/g", "../../../../g": "http://a/g", "/./g": "http://a/g",
        "/../g": "http://a/g", "g.": "http://a/b/c/g.", ".g": "http://a/b/c/.g",
        "g..": "http://a/b/c/g..", "..g": "http://a/b/c/..g", "./../g": "http://a/b/g",
        "./g/.": "http://a/b/c/g/", "g/./h": "http://a/b/c/g/h", "g/../h": "http://a/b/c/h",
        "g;x=1/./y": "http://a/b/c/g;x=1/y", "g;x=1/../y": "http://a/b/c/y",
        "g?y/./x": "http://a/b/c/g?y/./x", "g?y/../x": "http://a/b/c/g?y/../x",
        "g#s/./x": "http://a/b/c/g", "g#s/../x": "http://a/b/c/g",
        "http:g": "http://a/b/c/g",  # the "for backward compatibility" reading (and WHATWG's)
    }
    for href, expected in cases.items():
        page = parse(f'<a href="{href}">x</a>', url=base)
        assert urls(page) == [expected], href


def test_links_resolve_against_base_href():
    page = parse("""<html><head><base href="/base/dir/"></head>
        <body><a href="x.html">x</a><a href="/abs">abs</a><a href="//h/p">h</a>
        <link rel="canonical" href="canon.html"></body></html>""")
    assert urls(page) == ["http://example.com/base/dir/x.html", "http://example.com/abs", "http://h/p"]
    assert page.canonical == "http://example.com/base/dir/canon.html"


def test_base_href_is_the_first_one_and_counts_wherever_it_stands():
    page = parse("""<body><a href="x">x</a>
        <base href="https://other.example/one/"><base href="https://ignored.example/"></body>""")
    assert urls(page) == ["https://other.example/one/x"]


def test_base_href_that_is_not_http_is_ignored():
    for base in ("javascript:void(0)", "mailto:a@example.com", "#top", ""):
        page = parse(f'<base href="{base}"><a href="x">x</a>')
        assert urls(page) == ["http://example.com/dir/x"], base


def test_skipped_hrefs():
    page = parse("""<body>
        <a href="javascript:void(0)">js</a><a href="JavaScript:alert(1)">js2</a>
        <a href="mailto:someone@example.com">mail</a><a href="tel:+1234">tel</a>
        <a href="data:text/html,hi">data</a><a href="ftp://example.com/f">ftp</a>
        <a href="">empty</a><a href="   ">blank</a><a>no href</a><a name="x">anchor</a>
        <a href="#section">fragment only</a><a href="#">hash</a>
        <a href="http:///nohost">no host</a><a href="//">empty host</a>
        <a href="ok">kept</a>
    </body>""")
    assert urls(page) == ["http://example.com/dir/ok"]


def test_fragments_are_removed_and_links_deduplicated_keeping_the_first():
    page = parse("""<a href="a.html#one">First anchor</a>
        <a href="a.html#two" rel="nofollow">Second anchor</a>
        <a href="http://example.com/dir/a.html">Third</a>""")
    assert page.links == [Link("http://example.com/dir/a.html", "First anchor", False)]


def test_href_whitespace_is_cleaned_as_browsers_do():
    page = parse('<a href="  \n /x\ty\n ">x</a><a href="\\back\\slash?q=\\v">b</a>')
    assert urls(page) == ["http://example.com/xy", "http://example.com/back/slash?q=\\v"]


def test_area_links_use_alt_as_anchor():
    page = parse('<map><area href="/region" alt="The  region" rel="sponsored"></map>')
    assert page.links == [Link("http://example.com/region", "The region", True)]


def test_anchor_text_is_collapsed_and_truncated():
    long_words = " ".join(["word"] * 100)
    page = parse(f"""<a href="/a">  Hello
        <b>bold</b>\t<img src="x.png">world&nbsp;! </a>
        <a href="/b"><div>Card title</div><div>Card text</div></a>
        <a href="/c">{long_words}</a>
        <a href="/d"><span>un</span>broken</a>""")
    anchors = {link.url.rsplit("/", 1)[1]: link.anchor for link in page.links}
    assert anchors["a"] == "Hello bold world !"
    assert anchors["b"] == "Card title Card text"
    assert len(anchors["c"]) <= ANCHOR_MAX_CHARS and anchors["c"].startswith("word word")
    assert not anchors["c"].endswith(" ")
    assert anchors["d"] == "unbroken"


def test_anchor_text_leaves_out_scripts():
    page = parse('<a href="/x">Go<script>var s = "no";</script><style>a{}</style> on</a>')
    assert page.links[0].anchor == "Go on"


# --- nofollow, noindex ---------------------------------------------------------------------------

def test_nofollow_from_rel():
    page = parse("""<a href="/1" rel="nofollow">1</a><a href="/2" rel="NoFollow noopener">2</a>
        <a href="/3" rel="ugc">3</a><a href="/4" rel="sponsored">4</a>
        <a href="/5" rel="noopener noreferrer">5</a><a href="/6" rel="nofollowing">6</a>
        <a href="/7">7</a>""")
    assert [link.nofollow for link in page.links] == [True, True, True, True, False, False, False]
    assert not page.nofollow and not page.noindex


def test_meta_robots_nofollow_makes_every_link_nofollow():
    page = parse("""<head><meta name="robots" content="nofollow"></head>
        <body><a href="/1">1</a><a href="/2" rel="noopener">2</a></body>""")
    assert page.nofollow and not page.noindex
    assert all(link.nofollow for link in page.links) and len(page.links) == 2


@pytest.mark.parametrize("content, noindex, nofollow", [
    ("noindex", True, False),
    ("NOINDEX, NOFOLLOW", True, True),
    ("noindex,nofollow", True, True),
    ("none", True, True),
    ("index, follow", False, False),
    ("all", False, False),
    ("max-snippet:-1, noarchive", False, False),
])
def test_meta_robots_values(content, noindex, nofollow):
    page = parse(f'<meta name="robots" content="{content}"><a href="/x">x</a>')
    assert (page.noindex, page.nofollow) == (noindex, nofollow)
    assert page.links[0].nofollow == nofollow


def test_meta_for_our_agent_counts_and_other_agents_do_not():
    assert parse('<meta name="CrawlBot" content="noindex">').noindex
    assert parse('<meta name="examplebot" content="noindex">', agent="examplebot").noindex
    assert not parse('<meta name="googlebot" content="noindex, nofollow">').noindex
    assert not parse('<meta name="description" content="noindex">').noindex


def test_meta_robots_in_the_body_counts():
    assert parse('<body><p>text</p><meta name="robots" content="noindex"></body>').noindex


# --- canonical, title ----------------------------------------------------------------------------

def test_canonical():
    assert parse('<link rel="canonical" href="/canon?a=1#frag">').canonical == "http://example.com/canon?a=1"
    assert parse('<link rel="Canonical" href="https://example.com/x">').canonical == "https://example.com/x"
    assert parse('<link rel="alternate" href="/alt">').canonical is None
    assert parse('<link rel="canonical" href="javascript:x">').canonical is None
    first = parse('<link rel="canonical" href="/first"><link rel="canonical" href="/second">')
    assert first.canonical == "http://example.com/first"


def test_title():
    assert parse("<title>  A\n  spaced\ttitle </title>").title == "A spaced title"
    assert parse("<title>Fish &amp; Chips</title>").title == "Fish & Chips"
    assert parse("<p>no title</p>").title is None
    assert parse("<title>   </title>").title is None
    assert parse("<title>First</title><title>Second</title>").title == "First"


def test_title_is_not_body_text():
    page = parse("<html><head><title>The title</title></head><body>The body</body></html>")
    assert page.text == "The body"


# --- text ----------------------------------------------------------------------------------------

def test_script_style_noscript_template_are_not_text():
    page = parse("""<html><head><style>h1 { color: red }</style><script>var a = 1;</script></head>
        <body>Visible<script>document.write("hidden")</script> words<style>.x{}</style>
        <noscript>Enable JavaScript <a href="/nojs">plain version</a></noscript>
        <template><p>template text</p></template> end</body></html>""")
    assert page.text == "Visible words end"
    assert urls(page) == ["http://example.com/nojs"]  # links in noscript count


def test_block_elements_separate_words_and_inline_elements_do_not():
    page = parse("<ul><li>Home</li><li>News</li></ul><p>One</p><p>Two<br>Three</p>"
                 "<div>Intro<p>Para</p></div><td>A</td><td>B</td>"
                 "<p><b>Bold</b>face and <i>it</i>alic</p><p>H<sub>2</sub>O</p>")
    assert page.text == "Home News One Two Three Intro Para A B Boldface and italic H2O"


def test_text_whitespace_and_entities():
    page = parse("<p>  a\u00a0&nbsp;b\n\n\tc &amp; d &lt;e&gt; &#169; \u3000 f</p>")
    assert page.text == "a b c & d <e> \u00a9 f"


def test_text_keeps_link_text_and_alt_is_not_text():
    page = parse('<p>See <a href="/x">the docs</a>.<img alt="a picture" src="p.png"></p>')
    assert page.text == "See the docs."


def test_frameset_page_has_no_text_but_is_not_an_error():
    page = parse('<html><frameset><frame src="/a"><frame src="/b"></frameset></html>')
    assert_sane(page)
    assert page.text == ""


def test_fingerprints_are_of_the_text():
    page = parse("<title>T</title><p>Some  <b>page</b> text</p>")
    assert page.content_hash == fingerprint.content_hash("Some page text")
    assert page.minhash == fingerprint.minhash64("Some page text")


# --- charset -------------------------------------------------------------------------------------

LATIN1_PAGE = ("<html><head><title>Caf\u00e9</title>{meta}</head>"
               "<body><p>Cr\u00e8me br\u00fbl\u00e9e \u00e0 la carte</p></body></html>")


def test_latin1_page_declared_only_in_meta_decodes_right():
    body = LATIN1_PAGE.format(meta='<meta charset="iso-8859-1">').encode("latin-1")
    page = parse_html(body, PAGE, "text/html")
    assert page.encoding == "windows-1252"
    assert page.title == "Caf\u00e9" and page.text == "Cr\u00e8me br\u00fbl\u00e9e \u00e0 la carte"


def test_meta_http_equiv_content_type():
    body = ('<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">'
            '<p>\u041f\u0440\u0438\u0432\u0435\u0442</p>').encode("cp1251")
    page = parse_html(body, PAGE, None)
    assert (page.encoding, page.text) == ("windows-1251", "\u041f\u0440\u0438\u0432\u0435\u0442")


def test_header_beats_meta():
    body = ('<meta charset="iso-8859-1"><p>\u041f\u0440\u0438\u0432\u0435\u0442</p>').encode("cp1251")
    page = parse_html(body, PAGE, "text/html; charset=windows-1251")
    assert (page.encoding, page.text) == ("windows-1251", "\u041f\u0440\u0438\u0432\u0435\u0442")


def test_bom_beats_header_and_meta():
    body = b"\xef\xbb\xbf" + '<meta charset="windows-1251"><p>caf\u00e9</p>'.encode("utf-8")
    page = parse_html(body, PAGE, "text/html; charset=iso-8859-1")
    assert (page.encoding, page.text) == ("utf-8", "caf\u00e9")
    body = "\ufeff<title>\u00fcber</title><p>caf\u00e9</p>".encode("utf-16-le")
    page = parse_html(body, PAGE, "text/html; charset=utf-8")
    assert (page.encoding, page.title, page.text) == ("utf-16le", "\u00fcber", "caf\u00e9")


def test_utf8_page_with_a_wrong_header_is_read_as_utf8():
    # Not WHATWG (a browser shows "cafÃ©"): see the module doc of cycles.fetch.parse.
    body = "<p>caf\u00e9 \u2014 na\u00efve \u20ac</p>".encode("utf-8")
    page = parse_html(body, PAGE, "text/html; charset=ISO-8859-1")
    assert (page.encoding, page.text) == ("utf-8", "caf\u00e9 \u2014 na\u00efve \u20ac")
    page = parse_html(b'<meta charset="windows-1251">' + body, PAGE, None)
    assert page.encoding == "utf-8"


def test_header_label_decides_when_the_body_is_not_utf8():
    body = "<p>caf\u00e9</p>".encode("latin-1")
    page = parse_html(body, PAGE, "text/html; charset=utf-8")
    assert page.encoding == "utf-8" and page.text == "caf\ufffd"  # bad bytes replaced
    assert parse_html(body, PAGE, 'text/html; Charset="latin1"').text == "caf\u00e9"


def test_without_any_label_utf8_else_windows_1252():
    assert parse_html("<p>\u00e9t\u00e9</p>".encode("utf-8"), PAGE, "text/html").encoding == "utf-8"
    page = parse_html("<p>\u00e9t\u00e9 \u2019</p>".encode("cp1252"), PAGE, "text/html")
    assert (page.encoding, page.text) == ("windows-1252", "\u00e9t\u00e9 \u2019")
    assert parse_html(b"<p>plain ascii</p>", PAGE, None).encoding == "utf-8"


def test_meta_charset_rules():
    latin1 = "<p>caf\u00e9</p>".encode("latin-1")
    # In a comment: ignored.
    assert decode_html(b'<!-- <meta charset="windows-1251"> -->' + latin1)[1] == "windows-1252"
    # Past the prescan window: ignored; inside it: used.
    filler = b"<!-- " + b"x" * META_PRESCAN_BYTES + b" -->"
    assert decode_html(filler + b'<meta charset="koi8-r">' + latin1)[1] == "windows-1252"
    assert decode_html(b" " * (META_PRESCAN_BYTES - 100) + b'<meta charset="koi8-r">' + latin1)[1] == "koi8-r"
    # UTF-16 in a meta means UTF-8 (WHATWG); unknown labels are ignored.
    assert decode_html('<meta charset="utf-16"><p>\u00e9</p>'.encode("utf-8"))[1] == "utf-8"
    assert decode_html(b'<meta charset="no-such-charset">' + latin1)[1] == "windows-1252"
    # Labels map as in the Encoding Standard.
    assert decode_html(b'<meta charset="GB2312">' + "\u4e2d\u6587".encode("gbk")) == (
        '<meta charset="GB2312">\u4e2d\u6587', "gbk")
    assert decode_html(b"<meta charset='Shift_JIS'>" + "\u65e5\u672c".encode("cp932"))[1] == "shift_jis"
    assert decode_html(b"<meta content='text/html;charset=euc-kr' http-equiv=content-type>"
                       + "\ud55c\uad6d".encode("cp949"))[1] == "euc-kr"


def test_seven_bit_encoding_declared_in_meta_is_honoured():
    body = b'<meta charset="iso-2022-jp"><p>' + "\u65e5\u672c\u8a9e".encode("iso2022_jp") + b"</p>"
    assert body.isascii()
    page = parse_html(body, PAGE, None)
    assert (page.encoding, page.text) == ("iso-2022-jp", "\u65e5\u672c\u8a9e")


def test_decoding_never_raises():
    rng = random.Random(1)
    for content_type in (None, "text/html", "text/html; charset=utf-16le", "text/html; charset=shift_jis",
                         "text/html; charset=iso-2022-jp", "text/html; charset=bogus"):
        for _ in range(50):
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
            text, encoding = decode_html(body, content_type)
            assert isinstance(text, str) and isinstance(encoding, str)


# --- sniff_html ----------------------------------------------------------------------------------

@pytest.mark.parametrize("content_type, expected", [
    ("text/html", True), ("text/html; charset=utf-8", True), ("TEXT/HTML ;charset=x", True),
    ("application/xhtml+xml", True), ("text/plain", False), ("image/png", False),
    ("application/pdf", False), ("application/json", False), ("text/xml", False),
])
def test_sniff_html_by_content_type(content_type, expected):
    assert sniff_html(b"", content_type) is expected
    assert sniff_html(b"<html><body>looks like html</body></html>", content_type) is expected


@pytest.mark.parametrize("prefix, expected", [
    (b"<!DOCTYPE html><html>", True), (b"<!doctype HTML>", True), (b"\n\t  <html lang=en>", True),
    (b"<HEAD>", True), (b"<body>", True), (b"<p>hello", True), (b"<table border=1>", True),
    (b"<!-- comment -->", True), (b"<br>", True), (b"<a href=x>", True), (b"<script>", True),
    (b"\xef\xbb\xbf<!DOCTYPE html>", True),
    (b"<?xml version='1.0'?>", False), (b"%PDF-1.4", False), (b"\x89PNG\r\n\x1a\n", False),
    (b"GIF89a", False), (b"plain text", False), (b"<abbr>", False), (b"<htmlx>", False),
    (b'{"json": true}', False), (b"   ", False),
])
def test_sniff_html_by_signature(prefix, expected):
    for content_type in (None, "", "unknown/unknown", "application/unknown", "*/*"):
        assert sniff_html(prefix, content_type) is expected


def test_sniff_html_without_bytes_keeps_downloading():
    assert sniff_html(b"", None) is True
    assert sniff_html(b"", "unknown/unknown") is True


# --- robustness ----------------------------------------------------------------------------------

@pytest.mark.parametrize("body", [
    b"", b"   \n\t ", b"\x00", b"\x00" * 1000, b"<!-- only a comment -->", b"<!DOCTYPE html>",
    b"\xff\xfe", b"\xef\xbb\xbf", bytes(range(256)), b"<", b"<<<<>>>>", b"<a href", b"</html>",
    b"\x00<html>\x00<a href='/x\x00y'>\x00</a>", b"<html>" * 10_000, b"<div>" * 5000 + b"deep",
])
def test_unparseable_or_odd_bodies_give_a_sane_page(body):
    page = parse_html(body, PAGE, None)
    assert_sane(page)


def test_empty_body_gives_an_empty_page():
    page = parse_html(b"", PAGE, "text/html")
    assert (page.title, page.text, page.links, page.canonical, page.noindex, page.nofollow) == \
           (None, "", [], None, False, False)
    assert page.minhash == 0 and page.content_hash == fingerprint.content_hash("")


def test_random_bytes_never_raise():
    rng = random.Random(7)
    fragments = [b"<a href='", b"'>", b"</a>", b"<p>", b"<script>", b"</script>", b"<!--", b"-->",
                 b"<base href=", b"<meta charset=", b"&amp;", b"&#", b"\x00", b"\xff", b"\xc3",
                 b"<title>", b"<table>", b"<noscript>", b"<template>", b"</", b">", b" ", b"x",
                 b"<div>", b"<li>", b"\x1f", b"\x0c", b"\x01", "\ufffe".encode(), b"&#x1f;"]
    for _ in range(1000):
        body = b"".join(rng.choice(fragments) for _ in range(rng.randrange(0, 60)))
        assert_sane(parse_html(body, PAGE, None))


def _html5lib_rows() -> list[dict]:
    with (DATA / "html5lib_tree_construction.jsonl").open(encoding="utf-8") as stream:
        return [json.loads(line) for line in stream]


def test_html5lib_tree_construction_inputs_never_raise():
    rows = _html5lib_rows()
    assert len(rows) == 1796
    pages_with_links = 0
    for row in corpus_sample(rows):  # all in the full suite, a quarter in the fast tier
        data = row["data"]
        if row["fragment_context"]:  # a fragment: also as the body of a document
            data = f"<{row['fragment_context'].split()[-1]}>{data}"
        # As UTF-8, and as UTF-16 without a BOM or label (read as UTF-8: NULs everywhere).
        for body in (data.encode("utf-8", "surrogatepass"), data.encode("utf-16-le", "surrogatepass")):
            page = parse_html(body, "https://example.org/tests/page.html", None)
            assert_sane(page)
        page = parse_html(data.encode("utf-8", "surrogatepass"), "https://example.org/tests/page.html",
                          "text/html; charset=utf-8")
        pages_with_links += bool(page.links)
    assert pages_with_links > 0


def test_html5lib_link_inputs():
    # The rows with an href: links are found in misnested markup too, and resolve.
    found = {}
    for row in _html5lib_rows():
        if "href" in row["data"] and not row["fragment_context"]:
            page = parse(row["data"], url="https://example.org/tests/page.html")
            assert_sane(page)
            found[row["data"]] = urls(page)
    misnested = [links for data, links in found.items() if 'href="blah"' in data and 'href="foo"' in data]
    assert misnested and all(links == ["https://example.org/tests/blah", "https://example.org/tests/foo"]
                             for links in misnested)
    assert found["<a href=a>aa<marquee>aa<a href=b>bb</marquee>aa"] == [
        "https://example.org/tests/a", "https://example.org/tests/b"]
    assert found["<a href='\\nbar'></a>"] == ["https://example.org/nbar"]  # backslash is a slash


def test_page_url_that_is_not_http_resolves_only_absolute_links():
    body = b'<a href="/x">x</a><a href="//h/y">y</a><a href="https://ok.example/z">z</a><a href="r">r</a>'
    assert urls(parse(body, url="not a url")) == ["https://ok.example/z"]
    # ... unless a <base href> gives an absolute base.
    assert urls(parse(b'<base href="https://b.example/d/">' + body, url="")) == [
        "https://b.example/x", "https://h/y", "https://ok.example/z", "https://b.example/d/r"]


def test_control_characters_in_text_do_not_break_the_word_separation():
    # libxml2 keeps U+000C and U+001F in text; lxml refuses to set such text back.
    page = parse("<div>a\x1fb</div><p>c\x0cd</p><li>e</li>\x1ff")
    assert_sane(page)
    assert page.text == "a b c d e f"
