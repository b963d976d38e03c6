"""Property tests of cycles/urls.py: any string in gives a canonical URL or None, never an
exception (one poison link must not crash update on every retry), and what comes out is
canonical (idempotent, ASCII, http(s) with a host, no fragment).

Strategies mix arbitrary text (lone surrogates included: Python strings can hold them,
from a ``surrogateescape`` decode for instance) with URL-shaped text built from the parts
that trip parsers: huge ports, brackets, percent escapes, non-ASCII hosts, dot segments.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cycles.config import UrlConfig
from cycles.urls import (Normalizer, UrlFilter, canonical_mask, link_resolver, rejection_reason, remove_dot_segments,
                         resolve_location, url_authority)
from tests.rfc3986 import resolve_reference
from tests.examples import examples

NORMALIZER = Normalizer(UrlConfig())
FILTER = UrlFilter(UrlConfig())

# Every code point, lone surrogates included (st.text() leaves out category Cs by default).
ANY_CHAR = st.characters(codec=None, exclude_categories=())
ANY_TEXT = st.text(ANY_CHAR, max_size=60)

_PIECES = [
    "http", "https", "HTTP", "ftp", "mailto", ":", "//", "/", "\\", "?", "#", "&", "=", ";", "@", "[", "]",
    ".", "..", "%", "%2e", "%2F", "%41", "%zz", "%E9", "%00", "a", "B", "xn--", "xn--nxasmq6b", "é", "ß",
    "\u0130", "\ufb01", "\uff0e", "\u3002", "\ud800", "\udfff", "\x00", "\t", "\n", " ", "::1", "0x7f",
    "127.0.0.1", "1", "09", "65535", "65536", "0" * 50, "9" * 5000, "1" * 4301, "jsessionid", "sid",
    "utm_source", "ASPSESSIONIDQQGGQGRS", "www.example.com", "a" * 64, "-", "_", "'", '"', "<", ">",
]
PIECE = st.sampled_from(_PIECES)
URLISH = st.lists(st.one_of(PIECE, ANY_TEXT), max_size=12).map("".join)
HTTPISH = st.tuples(st.sampled_from(["http://", "https://", "HTTP://", "http:", "https:///", "//", "/", ""]),
                    URLISH).map("".join)
TEXT = st.one_of(ANY_TEXT, URLISH, HTTPISH)
BASES = st.one_of(st.none(), st.sampled_from(["http://a.example/b/c?d", "https://[::1]:8443/x/", "http://h/"]), TEXT)

POISON = [
    "http://a:" + "9" * 5000 + "/",          # int() refuses over 4,300 digits (ValueError)
    "http://a:" + "0" * 5000 + "1/",
    "http://[::1]:" + "9" * 5000 + "/",
    "http://" + "9" * 5000 + "/",             # a host that is one huge decimal number
    "http://1." + "9" * 5000 + "/",
    "http://\ud800/", "http://a/\ud800?\udfff", "http://[\ud800]/", "http://%ed%a0%80/",
    "http://xn--\ud800/", "http://a\x00b/", "http://[/", "http://]/", "http://[::1/", "http://a:b@[/",
]


def check_canonical(out) -> None:
    """What a Normalizer returns: None, or a canonical http(s) URL (module doc rules)."""
    if out is None:
        return
    assert isinstance(out, str)
    assert out.isascii(), out
    assert out.startswith(("http://", "https://")), out
    assert "#" not in out, out
    authority = out.split("://", 1)[1].split("/", 1)[0]
    assert authority and "?" not in authority and "@" not in authority, out
    assert NORMALIZER.normalize(out) == out, out  # idempotent


@pytest.mark.parametrize("url", POISON)
def test_poison_urls_give_none_or_a_url(url):
    out = NORMALIZER.normalize(url)
    check_canonical(out)
    check_canonical(NORMALIZER.normalize("x", url))  # the poison as a page's base
    assert FILTER.reason(out) is None or isinstance(FILTER.reason(out), str)
    assert rejection_reason(url) in ("unparseable", "scheme")


def test_huge_port_is_unparseable():
    """The poison link of the issue: a port of thousands of digits is a counted drop."""
    url = "http://a.example:" + "9" * 5000 + "/"
    assert NORMALIZER.normalize(url) is None
    assert FILTER.reason(None) == "unparseable"


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXT, BASES)
@example("http://a:" + "9" * 5000, None)
@example("x", "http://a:" + "9" * 5000)
def test_normalize_is_total_and_canonical(url, base):
    check_canonical(NORMALIZER.normalize(url, base))


@settings(max_examples=examples(400), deadline=None)
@given(TEXT)
def test_filter_and_rejection_reason_are_total(url):
    out = NORMALIZER.normalize(url)
    reason = FILTER.reason(out)
    assert reason is None or reason in ("unparseable", "scheme", "too_long", "extension", "too_deep",
                                        "repeating_segments", "host_rule")
    if out is None:
        assert rejection_reason(url) in ("unparseable", "scheme")
    if reason is None:
        assert len(out) <= FILTER.max_length


@settings(max_examples=examples(200), deadline=None)
@given(TEXT, TEXT)
def test_resolve_reference_is_total(ref, base):
    assert isinstance(resolve_reference(ref, base), str)


LATIN1 = st.text(st.characters(max_codepoint=0xFF), max_size=40)  # a Location header, decoded as Latin-1


@settings(max_examples=examples(400), deadline=None)
@given(st.one_of(TEXT, HTTPISH), st.one_of(TEXT, HTTPISH, LATIN1))
@example("http://a.example/p", "http://[a/")
@example("http://a.example/p", "http://a\uff03b/")
def test_resolve_location_and_url_authority_are_total(base, location):
    """The fetch worker's redirect path: a Location resolves like a link, to the RFC's
    answer where the RFC and WHATWG agree, and neither it nor url_authority raises."""
    target = resolve_location(base, location)
    assert isinstance(target, str) and isinstance(url_authority(target), str)
    resolved = link_resolver(base)(location)
    if resolved is not None:
        assert target == resolved
    else:
        assert target in (location, base.split("#", 1)[0])


PLAIN_PATH = st.text(st.sampled_from("ab/.?=&%-_~"), max_size=20)


@settings(max_examples=examples(300), deadline=None)
@given(st.sampled_from(["http://a.example/b/c/d;p?q", "https://a.example/", "http://a.example/x/y/", "http://a.example"]),
       PLAIN_PATH)
def test_the_link_resolver_agrees_with_rfc_3986(base, ref):
    """Where WHATWG and the RFC agree (no backslash, no tab, no scheme-relative host, no
    fragment), the fast resolver's answer is RFC 3986 §5.2's."""
    expected = resolve_reference(ref, base)
    if not expected.startswith("http") or "//" in ref:
        return
    if base == "http://a.example" and not ref.startswith(("/", "?")) and ref:
        expected = resolve_reference(ref, base + "/")  # WHATWG: an http URL's empty path is "/"
    if ref == "":
        expected = None  # an empty href is no link
    elif ref.startswith("?") and base == "http://a.example":
        expected = "http://a.example/" + ref
    assert link_resolver(base)(ref) == expected


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(TEXT, st.builds(lambda u: NORMALIZER.normalize(u) or u, HTTPISH)), max_size=30))
def test_canonical_mask_only_skips_canonical_urls(urls):
    """outlinks.prepare_chunk skips the normaliser where canonical_mask says True: that is
    right only if normalize(x) == x for every such x."""
    safe = [u.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for u in urls]  # Arrow needs UTF-8
    mask = canonical_mask(pa.array(safe, pa.string())).to_pylist()
    for url, skipped in zip(safe, mask):
        if skipped:
            assert NORMALIZER.normalize(url) == url, url


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(TEXT, HTTPISH), max_size=30))
def test_filter_reasons_column_agrees_with_reason(urls):
    """UrlFilter.reasons (Arrow kernels) gives UrlFilter.reason of every normalised URL."""
    normalised = [NORMALIZER.normalize(u) for u in urls]
    column = FILTER.reasons(pa.array(normalised, pa.string())).to_pylist()
    assert column == [FILTER.reason(u) for u in normalised]


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(TEXT, HTTPISH, st.builds(lambda u: NORMALIZER.normalize(u) or u, HTTPISH)), max_size=30))
def test_prepare_chunk_agrees_with_normalizer_and_filter(urls):
    """update's outlink preparation (canonical_mask skip + Arrow filter kernels) keeps and
    drops exactly what normalize + UrlFilter.reason decide one URL at a time."""
    from cycles.update.outlinks import _from_ipc, _to_ipc, prepare_chunk

    urls = list(dict.fromkeys(u.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for u in urls))
    chunk = _to_ipc(pa.table({"url": pa.array(urls, pa.string()), "depth": pa.array([1] * len(urls), pa.int16())}))
    kept, dropped = prepare_chunk(chunk, UrlConfig())
    expected_kept, expected_dropped = [], {}
    for url in urls:
        out = NORMALIZER.normalize(url)
        reason = FILTER.reason(out) if out is not None else rejection_reason(url)
        if reason is None:
            expected_kept.append(out)
        else:
            expected_dropped["filter/" + reason] = expected_dropped.get("filter/" + reason, 0) + 1
    assert _from_ipc(kept).column("url").to_pylist() == expected_kept
    assert dropped == expected_dropped


# --- Link resolution in the fetch stage's parser (cycles/fetch/parse.py) -----------------
def _attribute(text: str) -> bytes:
    import html
    return html.escape(text, quote=True).encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("base_href", ["http://[a/", "http://a\uff03b/", "https://[::1/x", "http://a]/",
                                       "http://a:" + "9" * 5000 + "/"])
def test_poison_base_href_falls_back_to_the_page_url(base_href):
    """A <base href> that urlsplit refuses (unclosed IPv6 bracket: ValueError; a netloc
    that changes under NFKC) crashed parse_html, so the fetch worker, on the page."""
    from cycles.fetch.parse import parse_html

    page = parse_html(b'<base href="' + _attribute(base_href) + b'"><a href="x">x</a><a href="http://b/">b</a>',
                      "http://page.example/dir/p.html")
    urls = [link.url for link in page.links]
    assert urls[-1] == "http://b/"
    assert urls[0] in ("http://page.example/dir/x", base_href.rsplit("/", 1)[0] + "/x")


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.none(), TEXT, HTTPISH), st.lists(st.one_of(TEXT, HTTPISH), max_size=5))
@example("http://[a/", ["x"])
def test_parse_html_link_resolution_is_total(base_href, hrefs):
    """Whatever the hrefs, parse_html gives links that are strings, never an exception."""
    from cycles.fetch.parse import parse_html

    body = b"".join(b'<a href="' + _attribute(h) + b'">l</a>' for h in hrefs)
    if base_href is not None:
        body = b'<base href="' + _attribute(base_href) + b'">' + body
    page = parse_html(body, "http://page.example/dir/p.html")
    for link in page.links:
        assert isinstance(link.url, str) and link.url.startswith(("http://", "https://"))


def test_update_outlinks_count_poison_links():
    """The issue's poison link: update's outlink preparation (in-process and in a pool)
    drops and counts it instead of raising on every retry."""
    from collections import Counter

    from cycles.tables import schema
    from cycles.config import Config
    from cycles.update.outlinks import prepare_outlinks

    urls = ["http://good.example/a"] + POISON
    links = pa.table({"from_url": ["http://s.example/"] * len(urls),
                      "url": [u.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for u in urls],
                      "anchor": [None] * len(urls), "nofollow": [False] * len(urls),
                      "depth": [1] * len(urls)}).cast(schema.OUTLINKS)
    for processes in (1, 2):
        counters = Counter()
        got = prepare_outlinks(links, Config(), counters, processes=processes, chunk_rows=4)
        kept = got.column("url").to_pylist()
        assert "http://good.example/a" in kept
        assert not any(len(u) > 200 for u in kept)  # no 5,000-digit port or host got through
        assert counters["filter/unparseable"] >= 10
        assert counters["outlinks/found"] == len(urls)


SEGMENT = st.sampled_from(["", ".", "..", "a", "b", "..a", ".b", "...", "%2e", "a.b"])


@settings(max_examples=examples(2000), deadline=None)
@given(st.lists(SEGMENT, max_size=8))
def test_remove_dot_segments_fast_path_agrees_with_rfc_steps(segments):
    """An absolute path takes remove_dot_segments' split-based path (the link resolver's);
    it must give what RFC 3986 §5.2.4's steps give."""
    from cycles.urls import _remove_dot_segments_literally

    path = "/" + "/".join(segments)
    assert remove_dot_segments(path) == _remove_dot_segments_literally(path)
