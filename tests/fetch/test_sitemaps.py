"""cycles/tables/sitemaps.py: reading sitemap files (pure functions) and the per-host steps."""

from __future__ import annotations

import datetime as dt
import gzip
import tracemalloc
import zlib
from collections import Counter
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from cycles.tables.sitemaps import (INFLATE_CHUNK, MAX_URLS_PER_FILE, SitemapSteps, parse_lastmod, read_sitemap,
                                   same_origin)
from tests.examples import examples

URL = "http://a.test/sitemap.xml"
NS = b'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
UTC = dt.timezone.utc


def urlset(*entries: bytes) -> bytes:
    return b'<?xml version="1.0" encoding="UTF-8"?>\n<urlset ' + NS + b">" + b"".join(entries) + b"</urlset>"


def url(loc: str, extra: str = "") -> bytes:
    return f"<url><loc>{loc}</loc>{extra}</url>".encode()


def test_urlset_with_hints():
    body = urlset(url("http://a.test/1", "<lastmod>2024-05-01T10:00:00+02:00</lastmod><changefreq>Daily</changefreq>"
                                         "<priority>0.8</priority>"),
                  url("http://a.test/2"))
    found = read_sitemap(body, URL)
    assert found.kind == "urlset"
    first, second = found.entries
    assert (first.url, first.lastmod, first.changefreq, first.priority) == \
        ("http://a.test/1", dt.datetime(2024, 5, 1, 8, tzinfo=UTC), "daily", 0.8)
    assert (second.url, second.lastmod, second.changefreq, second.priority) == ("http://a.test/2", None, None, None)
    assert found.counters["sitemap/urls"] == 2


def test_bad_hints_are_ignored_and_counted():
    body = urlset(url("http://a.test/1", "<lastmod>yesterday</lastmod><changefreq>often</changefreq>"
                                         "<priority>7</priority>"),
                  url("http://a.test/2", "<lastmod>2999-01-01</lastmod>"))
    found = read_sitemap(body, URL, now=dt.datetime(2026, 1, 1, tzinfo=UTC))
    assert [(e.lastmod, e.changefreq, e.priority) for e in found.entries] == [(None, None, None)] * 2
    assert (found.counters["sitemap/bad_lastmod"], found.counters["sitemap/bad_changefreq"],
            found.counters["sitemap/bad_priority"]) == (2, 1, 1)


def test_only_the_sitemaps_own_host_scheme_and_port():
    body = urlset(url("http://a.test/ok"), url("HTTP://A.TEST/upper"), url("http://b.test/other"),
                  url("https://a.test/scheme"), url("http://a.test:8080/port"), url("http://a.test.evil/x"),
                  url("http://a.test@b.test/userinfo"), url("javascript:alert(1)"), url(""))
    found = read_sitemap(body, URL)
    assert [e.url for e in found.entries] == ["http://a.test/ok", "HTTP://A.TEST/upper"]
    assert found.counters["sitemap/cross_host"] == 5
    assert found.counters["sitemap/invalid_url"] == 2


def test_index_children_same_host_only():
    body = (b"<sitemapindex " + NS + b"><sitemap><loc>http://a.test/s1.xml.gz</loc></sitemap>"
            b"<sitemap><loc>http://b.test/s2.xml</loc></sitemap></sitemapindex>")
    found = read_sitemap(body, URL)
    assert (found.kind, found.children, found.entries) == ("index", ["http://a.test/s1.xml.gz"], [])
    assert found.counters["sitemap/cross_host"] == 1


def test_gzip_file_and_content_encoding_and_text():
    body = urlset(url("http://a.test/1"))
    assert [e.url for e in read_sitemap(gzip.compress(body), URL).entries] == ["http://a.test/1"]
    assert [e.url for e in read_sitemap(gzip.compress(body), URL, content_encoding="gzip").entries] == \
        ["http://a.test/1"]
    both = gzip.compress(gzip.compress(body))  # a .xml.gz sent with Content-Encoding: gzip
    assert [e.url for e in read_sitemap(both, URL, content_encoding="gzip").entries] == ["http://a.test/1"]
    text = b"\xef\xbb\xbfhttp://a.test/x\r\n\nhttp://a.test/y\nftp://a.test/z\nhttp://b.test/w"
    found = read_sitemap(text, URL)
    assert (found.kind, [e.url for e in found.entries]) == ("text", ["http://a.test/x", "http://a.test/y"])


def test_malformed_xml_keeps_what_came_before():
    body = urlset(url("http://a.test/1"), url("http://a.test/2"))[:-30] + b"<url><loc>&bogus;</lo"
    found = read_sitemap(body, URL)
    assert [e.url for e in found.entries] == ["http://a.test/1"]
    assert found.counters["sitemap/malformed"] == 1
    assert read_sitemap(b"<html><body>not a sitemap</body></html>", URL).kind == "malformed"
    assert read_sitemap(b"\x1f\x8b garbage", URL).counters["sitemap/bad_gzip"] == 1


def test_entities_are_not_expanded():
    laughs = (b'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY a "http://a.test/aaaaaaaaaa">'
              b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]>'
              b"<urlset><url><loc>&c;</loc></url><url><loc>http://a.test/plain</loc></url></urlset>")
    found = read_sitemap(laughs, URL)
    assert all(len(e.url) < 100 for e in found.entries)


def _bomb(inflated_mib: int) -> bytes:
    """A gzip file that inflates to ``inflated_mib`` MiB of blanks inside a urlset."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    filler = b" " * (1 << 20)
    return packer.compress(b"<urlset>") + b"".join(packer.compress(filler) for _ in range(inflated_mib)) \
        + packer.flush()


def test_gzip_bomb_stops_at_the_cap_without_holding_it():
    bomb = _bomb(64)
    assert len(bomb) < 200_000
    tracemalloc.start()
    try:
        found = read_sitemap(bomb, URL, max_bytes=4 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found.counters["sitemap/bytes_cap"] == 1
    assert found.inflated_bytes == 4 << 20
    # What Python holds at once: a few inflate chunks, never the cap (4 MiB), let alone the
    # 64 MiB the bomb inflates to (libxml2's own buffers are bounded by its 10 MB text limit,
    # no huge_tree).
    assert peak < 1 << 20, peak


def test_ten_million_entries_stop_at_the_file_cap():
    def lazily():
        yield b"<urlset>"
        for i in range(10_000_000):
            yield b"<url><loc>http://a.test/p/%d</loc></url>" % i
    raw = b"".join(_take_bytes(lazily(), 4 << 20))  # what a 4 MiB download cap lets through
    found = read_sitemap(raw, URL)
    assert len(found.entries) == MAX_URLS_PER_FILE
    assert found.counters["sitemap/file_cap"] == 1
    assert found.inflated_bytes < len(raw)  # it stopped reading at the 50,000th


def _take_bytes(chunks, limit):
    size = 0
    for chunk in chunks:
        if size >= limit:
            return
        size += len(chunk)
        yield chunk


def test_host_budget_stops_reading():
    body = urlset(*(url(f"http://a.test/{i}") for i in range(20)))
    found = read_sitemap(body, URL, budget=5)
    assert len(found.entries) == 5 and found.counters["sitemap/budget_cap"] == 1


def test_lastmod_forms():
    assert parse_lastmod("2024") == dt.datetime(2024, 1, 1, tzinfo=UTC)
    assert parse_lastmod("2024-03") == dt.datetime(2024, 3, 1, tzinfo=UTC)
    assert parse_lastmod("2024-03-04T05:06Z") == dt.datetime(2024, 3, 4, 5, 6, tzinfo=UTC)
    assert parse_lastmod("2024-03-04T05:06:07.5-01:00") == dt.datetime(2024, 3, 4, 6, 6, 7, 500000, tzinfo=UTC)
    assert parse_lastmod("1900-01-01") is None and parse_lastmod("13/04/2024") is None


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=3000), st.sampled_from([None, "gzip", "deflate", "br"]))
def test_random_bytes_never_raise(body, encoding):
    found = read_sitemap(body, URL, content_encoding=encoding, max_bytes=2000, max_urls=10)
    assert len(found.entries) <= 10 and found.inflated_bytes <= 2000
    assert all(same_origin(e.url, URL) for e in found.entries)


_piece = st.sampled_from([b"<url>", b"</url>", b"<loc>", b"</loc>", b"http://a.test/", b"http://b.test/x",
                          b"<lastmod>", b"</lastmod>", b"2024-01-01", b"<priority>0.3</priority>", b"<sitemap>",
                          b"</sitemap>", b"&amp;", b"&", b"<![CDATA[", b"]]>", b"\x00", b"\xff", b" ", b"\n",
                          b"<!--", b"-->", b"<?xml", b"?>"])


@settings(max_examples=examples(300), deadline=None)
@given(st.sampled_from([b"<urlset>", b"<sitemapindex>", b"<?xml version='1.0'?><urlset " + NS + b">", b""]),
       st.lists(_piece, max_size=60), st.booleans())
def test_malformed_sitemaps_never_raise_and_keep_their_host(head, pieces, zipped):
    body = head + b"".join(pieces)
    found = read_sitemap(gzip.compress(body) if zipped else body, URL, max_urls=20)
    assert found.kind in ("urlset", "index", "text", "malformed", "empty")
    assert len(found.entries) <= 20 and len(found.children) <= 20
    assert all(same_origin(u, URL) for u in [e.url for e in found.entries] + found.children)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.tuples(st.text(alphabet="abc/?=%é", max_size=20), st.booleans()), max_size=40))
def test_well_formed_urlsets_keep_same_host_entries_in_order(paths):
    locs = [("http://a.test/" if own else "http://b.test/") + path.replace("&", "") for path, own in paths]
    body = urlset(*(url(loc.replace("<", "")) for loc in locs))
    found = read_sitemap(body, URL)
    assert [e.url for e in found.entries] == [loc.strip() for loc, (_, own) in zip(locs, paths) if own]
    assert found.counters["sitemap/cross_host"] == sum(1 for _, own in paths if not own)


def test_inflate_chunk_is_small():
    assert INFLATE_CHUNK <= 1 << 20


# --- the per-host steps -------------------------------------------------------------------
def _fc(**kw):
    base = dict(sitemaps=True, sitemap_max_depth=1, sitemap_max_files_per_host=3, sitemap_max_urls_per_host=3,
                sitemap_max_bytes=1 << 20)
    return SimpleNamespace(**{**base, **kw})


def test_steps_queue_follow_index_cap_and_obey_robots():
    stats = Counter()
    steps = SitemapSteps(_fc(), stats)
    steps.start("a.test", "http://a.test/robots.txt", ["/index.xml", "http://b.test/s.xml", "http://a.test/private.xml"])
    assert stats["sitemap/other_host_listed"] == 1
    allowed = lambda u: "private" not in u  # noqa: E731
    assert steps.next_url("a.test", allowed) == ("http://a.test/index.xml", 0)
    index = (b"<sitemapindex><sitemap><loc>http://a.test/index.xml</loc></sitemap>"
             b"<sitemap><loc>http://a.test/s1.xml</loc></sitemap><sitemap><loc>http://a.test/s2.xml</loc></sitemap>"
             b"</sitemapindex>")
    now = dt.datetime(2026, 1, 1, tzinfo=UTC)
    assert steps.read("a.test", "http://a.test/index.xml", 0, 200, index, None, now) == []
    assert stats["sitemap/repeated"] == 1  # the index listing itself
    assert stats["sitemap/files_cap"] == 1  # three files per host: index, private, s1
    assert steps.next_url("a.test", allowed) == ("http://a.test/s1.xml", 1)
    assert stats["sitemap/robots_denied"] == 1
    rows = steps.read("a.test", "http://a.test/s1.xml", 1, 200, urlset(*(url(f"http://a.test/{i}") for i in range(5))),
                      None, now)
    assert [r["url"] for r in rows] == ["http://a.test/0", "http://a.test/1", "http://a.test/2"]
    assert stats["sitemap/budget_cap"] == 1 and steps.next_url("a.test", allowed) is None
