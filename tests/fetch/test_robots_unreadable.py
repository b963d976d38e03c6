"""A robots.txt we could not read never grants access (cycles/fetch/robots.py).

Unit tests of the decision (unreadable bodies, bytes that are not UTF-8, the size cap), of
the robots.txt transfer (download up to the cap, then stop and parse what was read;
inflate), property tests with hypothesis, and a fetch against the hostile hosts judged by
what the server saw.
"""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cycles.config import FetchConfig
from cycles.fetch.robots import RobotsRules
from cycles.fetch.transfer import Request, Transfer
from cycles.storage.store import Store
from testweb.harness import TestWeb
from tests.support.fetching import fast_config, fetch, paths, results
from tests.examples import examples

AGENT = "crawlbot"
DISALLOW_ALL = b"User-agent: *\nDisallow: /\n"


def decide(body: bytes | None, **kwargs) -> RobotsRules:
    return RobotsRules.from_response(200, body, AGENT, **kwargs)


def denies_everything(rules: RobotsRules, paths=("/", "/a", "/p/0.html", "/private/x?y=1")) -> bool:
    return not any(rules.allowed("https://example.com" + p) for p in paths)


# --- unreadable bodies --------------------------------------------------------------------


@pytest.mark.parametrize("text", [DISALLOW_ALL, DISALLOW_ALL + b"#"])  # even and odd length
def test_utf16_bom_before_8bit_text_is_unreadable_not_allow_all(text):
    # Decoded as UTF-16 this is a line of CJK characters and no rules: allow all.
    rules = decide(b"\xff\xfe" + text)
    assert (rules.kind, rules.reason) == ("disallow_all", "unreadable")
    assert denies_everything(rules)
    assert rules.allowed("https://example.com/robots.txt")  # §2.2.2: asked again later


def test_real_utf16_with_bom_is_still_read():
    rules = decide("\ufeffUser-agent: *\nDisallow: /private/\n".encode("utf-16-le"))
    assert rules.kind == "rules"
    assert not rules.allowed("https://example.com/private/x")
    assert rules.allowed("https://example.com/public")


@pytest.mark.parametrize("body", [
    b"\x00\x00\x01\x00\x03\x0000\x00\x00\x01\x00 \x00\xa8%\x00\x00",  # an icon, as www.pch.com serves
    "User-agent: *\nDisallow: /\n".encode("utf-16-le"),  # UTF-16 without a BOM
    b"\x1f\x8b\x08\x00junk",  # gzip that was never inflated
    b"User-agent: *\x01\nAllow: /\n",  # a control byte no text file has
])
def test_binary_bodies_are_unreadable(body):
    rules = decide(body)
    assert (rules.kind, rules.reason) == ("disallow_all", "unreadable")
    assert denies_everything(rules)


def test_a_body_the_fetcher_could_not_read_is_unreadable():
    rules = decide(None)
    assert (rules.kind, rules.reason) == ("disallow_all", "unreadable")


def test_latin1_rule_still_matches_the_urls_it_was_written_for():
    # Replacing \xe9 with U+FFFD made a rule that matches nothing: /café/ was crawled.
    rules = decide(b"User-agent: *\nDisallow: /caf\xe9/\n")
    assert rules.kind == "rules"
    assert not rules.allowed("https://example.com/caf%E9/menu")
    assert not rules.allowed("https://example.com/caf%e9/menu")
    assert rules.allowed("https://example.com/cafe/menu")


# --- the transfer: keep the first bytes, stop, parse --------------------------------------


def robots_transfer(chunks: list[bytes], max_bytes: int, headers: list[bytes] = ()) -> Transfer:
    """A robots.txt transfer fed as libcurl would feed it; stops where the callbacks say."""
    transfer = Transfer(Request("http://h.test/robots.txt", "h.test", "robots"), FetchConfig(), max_bytes)
    transfer.on_header(b"HTTP/1.1 200 OK\r\n")
    length = sum(len(c) for c in chunks)
    for line in [b"Content-Length: %d\r\n" % length, *headers, b"\r\n"]:
        if transfer.on_header(line) == 0:
            return transfer
    for chunk in chunks:
        if transfer.on_body(chunk) == 0:
            break
    return transfer


def body_of(transfer: Transfer) -> bytes | None:
    from cycles.fetch.transfer import robots_body

    return robots_body(transfer)


def test_oversized_robots_txt_with_content_length_is_read_up_to_the_cap():
    body = DISALLOW_ALL + b"# padding\n" * 1000
    transfer = robots_transfer([body[:4000], body[4000:]], max_bytes=1000)
    assert transfer.abort == "truncated"
    assert transfer.size == 1001  # the cap and one byte that shows the file went on
    rules = decide(body_of(transfer), max_bytes=1000)
    assert rules.kind == "rules" and denies_everything(rules)


def test_a_line_cut_by_the_stop_is_dropped_even_when_inflated_short():
    # Stored (level 0) deflate: the wire is longer than the text, so stopping at the cap
    # inflates to less than the cap, cut inside "Allow: /private/public".
    text = b"User-agent: *\nDisallow: /private/\nAllow: /private/public\n"
    cap = len(text) - 10
    transfer = robots_transfer([zlib.compress(text, 0)], max_bytes=cap,
                               headers=[b"Content-Encoding: deflate\r\n"])
    assert transfer.abort == "truncated"
    body = body_of(transfer)
    assert body == b"User-agent: *\nDisallow: /private/\n"
    assert not decide(body, max_bytes=cap).allowed("https://example.com/private/x")


def test_gzip_robots_txt_is_inflated_and_obeyed():
    text = b"User-agent: *\nDisallow: /private/\n"
    transfer = robots_transfer([gzip.compress(text)], 5000, headers=[b"Content-Encoding: gzip\r\n"])
    assert body_of(transfer) == text
    assert not decide(body_of(transfer)).allowed("https://example.com/private/a")


@pytest.mark.parametrize("wire", [b"not gzip at all\n", gzip.compress(DISALLOW_ALL, mtime=0)[:-12], b""],
                         ids=["not-gzip", "cut-gzip", "empty"])
def test_gzip_that_does_not_inflate_is_unreadable(wire):
    transfer = robots_transfer([wire] if wire else [], 5000, headers=[b"Content-Encoding: gzip\r\n"])
    assert body_of(transfer) is None
    assert decide(body_of(transfer)).reason == "unreadable"


def test_a_coding_we_did_not_ask_for_is_unreadable():
    transfer = robots_transfer([b"\x8b\x02\x80User-agent"], 5000, headers=[b"Content-Encoding: br\r\n"])
    assert body_of(transfer) is None


# --- properties -------------------------------------------------------------------------

LINES = st.sampled_from([
    "User-agent: *", "User-agent: crawlbot", "User-agent: other", "Disallow: /", "Disallow: /a",
    "Disallow: /a/b", "Allow: /a", "Allow: /a/b/c", "Disallow: /*.pdf$", "Allow: /a$", "Crawl-delay: 2",
    "# comment", "", "Disallow:", "Sitemap: http://x/s.xml", "junk line", "Disallow: /private/public",
])
PATHS = ["/", "/a", "/a/", "/a/b", "/a/b/c", "/a/b/c/d", "/x.pdf", "/private/public", "/private/p", "/z"]


def decisions(rules: RobotsRules) -> list[bool]:
    return [rules.allowed("https://example.com" + p) for p in PATHS]


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(junk=st.binary(max_size=400))
def test_junk_after_a_disallow_all_never_opens_the_site(junk):
    """Whatever follows ``Disallow: /`` — bytes that are not UTF-8, controls, NULs, a BOM, a
    cut line — the answer denies every path, unless the junk itself names an agent or
    allows a path (then it is a robots.txt, not junk)."""
    lowered = junk.lower()
    assume(b"allow" not in lowered and b"agent" not in lowered)
    rules = decide(DISALLOW_ALL + junk)
    assert rules.kind in ("rules", "disallow_all")
    assert not any(decisions(rules))


@settings(max_examples=examples(300), deadline=None)
@given(body=st.binary(max_size=300))
def test_an_unreadable_answer_denies_everything_and_nothing_raises(body):
    rules = decide(body)
    assert rules.kind in ("rules", "disallow_all")
    if rules.reason == "unreadable":
        assert not any(decisions(rules))
        assert rules.allowed("https://example.com/robots.txt")


@settings(max_examples=examples(300), deadline=None)
@given(lines=st.lists(LINES, max_size=25), cap=st.integers(min_value=1, max_value=400),
       newline=st.sampled_from(["\n", "\r\n", "\r"]))
def test_a_capped_file_is_read_as_its_complete_lines_within_the_cap(lines, cap, newline):
    """§2.5: past the cap, the decision is that of the lines wholly inside it — a line cut
    in the middle ("Allow: /private/public" -> "Allow: /priv") is never half-read."""
    body = newline.join(lines).encode() + newline.encode()
    kept = body[:cap]
    if len(body) > cap:
        kept = kept[: max(kept.rfind(b"\n"), kept.rfind(b"\r")) + 1]
    assert decisions(decide(body, max_bytes=cap)) == decisions(decide(kept, max_bytes=cap))


@settings(max_examples=examples(200), deadline=None)
@given(lines=st.lists(LINES, max_size=25), cap=st.integers(min_value=1, max_value=400),
       cuts=st.lists(st.integers(min_value=1, max_value=50), max_size=6))
def test_stopping_the_download_at_the_cap_decides_as_the_whole_file_would(lines, cap, cuts):
    """Download to the cap and stop == read the first ``cap`` bytes of the whole file,
    however the bytes arrive in chunks, with or without a Content-Length."""
    body = "\n".join(lines).encode() + b"\n"
    chunks, rest = [], body
    for cut in cuts:
        chunks.append(rest[:cut])
        rest = rest[cut:]
    chunks.append(rest)
    transfer = robots_transfer([c for c in chunks if c], max_bytes=cap)
    streamed = decide(body_of(transfer), max_bytes=cap)
    assert decisions(streamed) == decisions(decide(body, max_bytes=cap))


# --- against the hostile hosts ------------------------------------------------------------


@pytest.mark.web
def test_hostile_robots_txt_files_never_let_a_page_be_fetched(tmp_path):
    with TestWeb(hosts=0, special=False, hostile=True, pages=2, page_bytes=2000, max_seconds=60) as web:
        store = Store(tmp_path / "data")
        config = fast_config(web)
        hosts = ["robots-huge", "robots-utf16", "robots-gzip", "robots-gzipped"]
        urls = [web.url(h, p) for h in hosts for p in ("/", "/p/0.html", "/private/a.html")]
        segment, result = fetch(store, config, urls)
        requests = web.requests()
    rows = results(store, segment)
    for host in ("robots-huge", "robots-utf16", "robots-gzip"):
        assert paths(requests, host) == ["/robots.txt"], host
    # The oversized file was read (its first line disallows all), not dropped as "no file".
    assert {rows[web.url("robots-huge", p)]["outcome"] for p in ("/", "/p/0.html")} == {"robots_denied"}
    for host in ("robots-utf16", "robots-gzip"):
        row = rows[web.url(host, "/")]
        assert row["outcome"] == "deferred" and "unreadable" in row["error"], row
    # A good robots.txt sent gzip-encoded is inflated and obeyed.
    assert paths(requests, "robots-gzipped") == ["/robots.txt", "/", "/p/0.html"]
    assert rows[web.url("robots-gzipped", "/private/a.html")]["outcome"] == "robots_denied"
    counters = result.counters
    assert counters["robots/truncated"] == 1
    assert counters["robots/unreadable"] == 2
