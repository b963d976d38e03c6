"""Tests of cycles/fetch/robots.py: status classes, decoding, group choice, helpers,
the public conformance suites (tests/data/robots/) and a real-world corpus.

Each conformance suite must pass every row except those listed in
tests/data/robots/DIFFERENCES.md, and every listed row must still differ: when a
difference is fixed the test says which line of DIFFERENCES.md to remove.
"""

from __future__ import annotations

import base64
import json
import random
import re
import tarfile
import time
from pathlib import Path

import pytest

from tests.examples import corpus_sample
from cycles.fetch.robots import RobotsRules, product_token, robots_redirect_ok, robots_url

DATA = Path(__file__).resolve().parent.parent / "data" / "robots"
AGENT = "crawlbot"


def rules(body: bytes | str, agent: str = AGENT, **kwargs) -> RobotsRules:
    if isinstance(body, str):
        body = body.encode("utf-8")
    return RobotsRules.from_response(200, body, agent, **kwargs)


# --- status classes (RFC 9309 §2.3.1) ---------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "reason"),
    [
        (200, "rules", "2xx"),
        (203, "rules", "2xx"),
        (299, "rules", "2xx"),
        (301, "disallow_all", "too_many_redirects"),
        (308, "disallow_all", "too_many_redirects"),
        (400, "allow_all", "4xx"),
        (401, "allow_all", "4xx"),
        (403, "allow_all", "4xx"),
        (404, "allow_all", "4xx"),
        (410, "allow_all", "4xx"),
        (429, "disallow_all", "429"),
        (499, "allow_all", "4xx"),
        (500, "disallow_all", "5xx"),
        (503, "disallow_all", "5xx"),
        (599, "disallow_all", "5xx"),
        (None, "disallow_all", "network_error"),
        (100, "disallow_all", "unexpected_status"),
        (0, "disallow_all", "unexpected_status"),
        (600, "disallow_all", "unexpected_status"),
    ],
)
def test_status_classes(status, kind, reason):
    # A body that would disallow everything shows that only 2xx bodies are read.
    result = RobotsRules.from_response(status, b"User-agent: *\nDisallow: /\n", AGENT)
    assert (result.kind, result.reason) == (kind, reason)
    page = "https://example.com/page"
    assert result.allowed(page) is (kind == "allow_all")
    assert result.crawl_delay() is None
    assert result.sitemaps() == []


@pytest.mark.parametrize("status", [None, 429, 500, 503, 301])
def test_robots_txt_itself_stays_allowed_when_unreachable(status):
    # §2.2.2: the robots.txt URI is implicitly allowed, so it can be fetched again.
    result = RobotsRules.from_response(status, None, AGENT)
    assert result.allowed("https://example.com/robots.txt")
    assert result.allowed("/robots.txt")
    assert not result.allowed("https://example.com/robots.txt.bak")
    assert not result.allowed("https://example.com/x/robots.txt")


def test_robots_txt_itself_allowed_by_rules():
    result = rules("User-agent: *\nDisallow: /\n")
    assert result.allowed("https://example.com/robots.txt")
    assert not result.allowed("https://example.com/")


@pytest.mark.parametrize("body", [b"", b"\n\n", b"# only a comment\n"])
def test_empty_2xx_body_allows_everything(body):
    result = RobotsRules.from_response(200, body, AGENT)
    assert result.kind == "rules"
    assert result.allowed("https://example.com/anything?x=1")
    assert result.crawl_delay() is None


# --- decoding: BOM, bad bytes, size limit ----------------------------------------

BLOCKING = b"User-agent: *\nDisallow: /private/\n"


@pytest.mark.parametrize("prefix", [b"\xef\xbb\xbf", b"\xef\xbb", b"\xef"])
def test_utf8_bom_does_not_hide_first_group(prefix):
    # protego 0.7.0 reads "\ufeffUser-agent" as an unknown line and drops the group.
    result = rules(prefix + BLOCKING)
    assert not result.allowed("https://example.com/private/x")
    assert result.allowed("https://example.com/public")


def test_bom_only_in_first_position_is_skipped():
    result = rules(b"\xef\xbb\xbf" + BLOCKING + b"\xef\xbb\xbfDisallow: /other/\n")
    assert not result.allowed("https://example.com/private/")
    assert result.allowed("https://example.com/other/")  # a mid-file BOM spoils its line only


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_with_bom_is_read(encoding):
    bom = "\ufeff".encode(encoding)
    result = rules(bom + BLOCKING.decode().encode(encoding))
    assert not result.allowed("https://example.com/private/x")


def test_undecodable_bytes_do_not_raise_and_spoil_only_their_line():
    body = b"User-agent: *\nDisallow: /caf\xe9/\nDisallow: /\xff\xfe\nDisallow: /private/\n"
    result = rules(body)
    assert not result.allowed("https://example.com/private/")
    assert result.allowed("https://example.com/public/")


def test_non_ascii_rule_matches_percent_encoded_url():
    result = rules("User-agent: *\nDisallow: /café/\n")
    assert not result.allowed("https://example.com/caf%C3%A9/menu")
    assert not result.allowed("https://example.com/caf%c3%a9/menu")


def test_only_first_max_bytes_are_parsed():
    head = b"User-agent: *\nDisallow: /early/\n"
    body = head + b"#" * 100 + b"\nDisallow: /late/\n"
    result = rules(body, max_bytes=len(head) + 50)
    assert not result.allowed("https://example.com/early/")
    assert result.allowed("https://example.com/late/")


def test_line_cut_by_the_size_limit_is_dropped():
    # "Allow: /private/public" cut to "Allow: /priv" would allow all of /private/.
    head = b"User-agent: *\nDisallow: /private/\n"
    body = head + b"Allow: /private/public\n"
    result = rules(body, max_bytes=len(head) + len(b"Allow: /priv"))
    assert not result.allowed("https://example.com/private/secret")


def test_default_limit_is_the_configured_500_kib():
    filler = b"# " + b"x" * 1000 + b"\n"
    body = b"User-agent: *\n" + filler * 600 + b"Disallow: /\n"  # Disallow past 500 KiB
    assert len(body) > 500 * 1024
    assert rules(body).allowed("https://example.com/page")


@pytest.mark.parametrize("seed", range(20))
def test_garbage_bodies_never_raise(seed):
    rng = random.Random(seed)
    alphabet = b"User-agent:Disallow:Allow:Crawl-delay:Sitemap:*$#/%\r\n\t \x00\xef\xbb\xbf\xff<br>"
    body = bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 3000)))
    result = RobotsRules.from_response(200, body, AGENT)
    for url in ("https://example.com/", "https://example.com/a%ZZ?b=%", "/x/y$", "", "http://[::1/"):
        assert isinstance(result.allowed(url), bool)
    result.crawl_delay()
    result.sitemaps()


def test_html_error_page_served_as_robots_txt_allows_everything():
    page = b"<!DOCTYPE html><html><head><title>Not found</title></head><body><p>Oops: nothing here.</p></body></html>"
    result = rules(page)
    assert result.allowed("https://example.com/any")


def test_html_br_tags_are_ignored():
    result = rules("<html><body>\nUser-agent: *<br>\nDisallow: /private/<BR />\nCrawl-delay: 5<br/>\n</body></html>")
    assert not result.allowed("https://example.com/private/")
    assert result.crawl_delay() == 5.0


# --- choosing our group (§2.2.1) --------------------------------------------------


def test_product_token_of_agent_strings():
    assert product_token("crawlbot") == "crawlbot"
    assert product_token("CrawlBot/0.1 (+https://example.org/bot)") == "crawlbot"
    assert product_token("  MJ12bot ") == "mj12bot"
    assert product_token("Foo Bar") == "foo"
    assert product_token("*") == ""
    assert product_token("") == ""


@pytest.mark.parametrize("agent", ["", "   ", "*", "/1.0"])
def test_agent_without_product_token_is_a_config_error(agent):
    with pytest.raises(ValueError, match="fetch.robots_agent"):
        RobotsRules.from_response(200, b"", agent)


ROBOTS_WITH_GROUPS = """\
User-agent: *
Disallow: /star-only/

User-agent: CrawlBot
Disallow: /ours/

User-agent: crawl
Disallow: /prefix-of-ours/

User-agent: crawlbot-news
Disallow: /longer-than-ours/

User-agent: othercrawlbot
Disallow: /contains-ours/
"""


def test_our_group_is_matched_exactly_and_case_insensitively():
    result = rules(ROBOTS_WITH_GROUPS)
    assert not result.allowed("https://example.com/ours/")
    for path in ("/star-only/", "/prefix-of-ours/", "/longer-than-ours/", "/contains-ours/"):
        assert result.allowed("https://example.com" + path), path


def test_full_user_agent_string_is_read_as_its_product_token():
    result = rules(ROBOTS_WITH_GROUPS, agent="CrawlBot/0.1 (+https://example.org/bot)")
    assert not result.allowed("https://example.com/ours/")


def test_star_group_applies_when_ours_is_absent():
    result = rules(ROBOTS_WITH_GROUPS, agent="somebot")
    assert not result.allowed("https://example.com/star-only/")
    assert result.allowed("https://example.com/ours/")


@pytest.mark.parametrize("line", ["User-agent: crawlbot/2.1", "User-agent: CRAWLBOT BAR", "User-agent: crawlbot*", "user agent: crawlbot"])
def test_user_agent_value_is_read_up_to_its_product_token(line):
    result = rules(f"User-agent: *\nAllow: /\n\n{line}\nDisallow: /\n")
    assert not result.allowed("https://example.com/page")


def test_groups_naming_us_are_merged():
    body = "User-agent: crawlbot\nDisallow: /a/\n\nUser-agent: *\nDisallow: /b/\n\nUser-agent: crawlbot\nDisallow: /c/\n"
    result = rules(body)
    assert not result.allowed("https://example.com/a/")
    assert result.allowed("https://example.com/b/")
    assert not result.allowed("https://example.com/c/")


def test_consecutive_user_agent_lines_share_the_rules():
    result = rules("User-agent: otherbot\nUser-agent: crawlbot\nDisallow: /shared/\n")
    assert not result.allowed("https://example.com/shared/")


@pytest.mark.parametrize("between", ["Invalid-Unknown-Line: x", "Sitemap: https://example.com/s.xml", "Crawl-delay: 5", "Noindex: /x", "Host: example.com"])
def test_other_records_do_not_split_a_group(between):
    # §2.2.4; protego 0.7.0 starts a new group after an unknown line or a Crawl-delay.
    result = rules(f"User-agent: crawlbot\n{between}\nUser-agent: *\nDisallow: /\n")
    assert not result.allowed("https://example.com/page")


def test_rules_before_any_user_agent_are_obeyed_as_star():
    result = rules("Disallow: /private/\n\nUser-agent: otherbot\nDisallow: /\n")
    assert not result.allowed("https://example.com/private/x")
    assert result.allowed("https://example.com/public")
    # Our own group overrides them, as it overrides any "*" group.
    assert rules("Disallow: /private/\nUser-agent: crawlbot\nDisallow: /ours/\n").allowed("https://example.com/private/")


def test_longest_match_wins_and_allow_wins_ties():
    result = rules("User-agent: *\nDisallow: /shop/\nAllow: /shop/public/\nAllow: /tie\nDisallow: /tie\n")
    assert not result.allowed("https://example.com/shop/cart")
    assert result.allowed("https://example.com/shop/public/item")
    assert result.allowed("https://example.com/tie")


def test_wildcards_and_end_anchor():
    result = rules("User-agent: *\nDisallow: /*.pdf$\nDisallow: /*?sessionid=\n")
    assert not result.allowed("https://example.com/docs/a.pdf")
    assert result.allowed("https://example.com/docs/a.pdf?download=1")
    assert not result.allowed("https://example.com/page?sessionid=42")


def test_percent_encoding_equivalence():
    # §2.2.2: unreserved characters compare equal encoded or not; %2F is not "/".
    result = rules("User-agent: *\nDisallow: /%7Ejoe/\nDisallow: /a%2fb\nDisallow: /%E3%83%84/\n")
    assert not result.allowed("https://example.com/~joe/index.html")
    assert not result.allowed("https://example.com/%7ejoe/index.html")
    assert not result.allowed("https://example.com/a%2Fb")
    assert result.allowed("https://example.com/a/b")
    assert not result.allowed("https://example.com/%e3%83%84/x")


# --- Crawl-delay and Sitemap -------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [("10", 10.0), ("0.5", 0.5), (" 3 ", 3.0), ("0", 0.0), ("-1", None), ("ten", None), ("nan", None), ("inf", None), ("", None)],
)
def test_crawl_delay_values(value, expected):
    assert rules(f"User-agent: *\nCrawl-delay: {value}\n").crawl_delay() == expected


def test_crawl_delay_belongs_to_the_agents_named_above_it():
    body = "User-agent: crawlbot\nCrawl-delay: 10\nUser-agent: otherbot\nCrawl-delay: 60\nUser-agent: *\nDisallow: /x/\n"
    assert rules(body).crawl_delay() == 10.0
    assert rules(body, agent="otherbot").crawl_delay() == 60.0
    assert rules(body, agent="somebot").crawl_delay() is None
    # ... while the Disallow below is shared by all three (§2.2.4).
    assert not rules(body).allowed("https://example.com/x/")


def test_slowest_crawl_delay_of_merged_groups_wins():
    body = "User-agent: crawlbot\nCrawl-delay: 2\nDisallow: /a\n\nUser-agent: crawlbot\nCrawl-delay: 7\n"
    assert rules(body).crawl_delay() == 7.0


def test_sitemaps_are_global_deduplicated_and_in_order():
    body = (
        "Sitemap: https://example.com/a.xml\n"
        "User-agent: otherbot\nSitemap: https://example.com/b.xml\nDisallow: /\n"
        "sitemap: https://example.com/a.xml\nSitemap https://example.com/c.xml\n"
    )
    result = rules(body)
    assert result.sitemaps() == ["https://example.com/a.xml", "https://example.com/b.xml", "https://example.com/c.xml"]
    result.sitemaps().clear()
    assert len(result.sitemaps()) == 3


# --- helpers for the fetcher --------------------------------------------------------


def test_redirect_hops_up_to_five():
    a, b = "https://example.com/robots.txt", "https://www.example.com/robots.txt"
    assert all(robots_redirect_ok(a, b, hops) for hops in range(5))
    assert not robots_redirect_ok(a, b, 5)
    assert robots_redirect_ok(a, b, 5, max_hops=6)


@pytest.mark.parametrize(
    ("target", "ok"),
    [
        ("https://www.example.com/robots.txt", True),
        ("http://example.com/robots.txt", True),
        ("https://other.example.net/robots.txt", True),  # cross-host is followed
        ("https://example.com/login?next=/robots.txt", True),
        ("https://example.com/robots.txt", False),  # to itself: a loop
        ("ftp://example.com/robots.txt", False),
        ("javascript:alert(1)", False),
        ("/robots.txt", False),  # the fetcher resolves Location first
        ("http://[::1/robots.txt", False),
    ],
)
def test_redirect_targets(target, ok):
    assert robots_redirect_ok("https://example.com/robots.txt", target, 0) is ok


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://user@example.com:80/path;params?query#fragment", "http://example.com/robots.txt"),
        ("https://user@example.com:443/path;params?query#fragment", "https://example.com/robots.txt"),
        ("http://user@example.com:8080/path;params?query#fragment", "http://example.com:8080/robots.txt"),
        ("HTTPS://WWW.Example.COM/x", "https://www.example.com/robots.txt"),
        ("http://[2001:db8::1]:8443/x", "http://[2001:db8::1]:8443/robots.txt"),
    ],
)
def test_robots_url(url, expected):
    assert robots_url(url) == expected


@pytest.mark.parametrize("url", ["ftp://example.com/x", "/path", "mailto:a@example.com"])
def test_robots_url_rejects_non_http(url):
    with pytest.raises(ValueError):
        robots_url(url)


# --- conformance suites --------------------------------------------------------------

SUITES = [
    "google_robotstxt_cases",
    "google_robotstxt_spec_test_cases",
    "crawler_commons_cases",
    "cpython_test_robotparser",
    "seomoz_repcpp_cases",
    "protego_own_tests_recorded",
]

_DIFFERENCE = re.compile(r"^\s*- `([a-z0-9_]+): ([^`]+)`", re.MULTILINE)


def _known_differences() -> dict[str, set[str]]:
    known: dict[str, set[str]] = {suite: set() for suite in SUITES}
    for suite, name in _DIFFERENCE.findall((DATA / "DIFFERENCES.md").read_text(encoding="utf-8")):
        known[suite].add(name)
    return known


def _body(row: dict) -> bytes:
    if "robots_txt_b64" in row:  # exact bytes of rows that are not valid UTF-8
        return base64.b64decode(row["robots_txt_b64"])
    return row["robots_txt"].encode("utf-8")


def _agent(row: dict) -> str:
    agent = row.get("user_agent")
    if agent is None and row.get("args"):
        agent = row["args"][0]
    # protego's own tests ask as "*", i.e. as an agent no group names.
    return "unnamedbot" if agent in (None, "*") else agent


def _url(row: dict) -> str:
    url = row["url"]
    if url.startswith("/"):  # rep-cpp rows give a path; its host is the robots.txt's
        url = (row.get("robots_url") or "http://a.com/robots.txt").rsplit("/", 1)[0] + url
    return url


def _check(row: dict) -> tuple[object, object] | None:
    """(got, expected) for one row, or None when the row tests something we do not offer."""
    kind = row.get("kind", "can_fetch")
    if kind == "robots_url":
        return robots_url(row["input"]), row["expected"]
    try:
        result = RobotsRules.from_response(200, _body(row), _agent(row))
    except ValueError as exc:
        return f"ValueError: {exc}", row.get("allowed", row.get("expected"))
    if kind in ("can_fetch", "pattern_match"):
        return result.allowed(_url(row)), row["allowed"]
    if kind in ("crawl_delay", "crawl_delay_request_rate"):
        expected = row["expected"] if "expected" in row else row["crawl_delay"]
        return result.crawl_delay(), None if expected is None else float(expected)
    if kind == "sitemaps":
        return result.sitemaps(), row["expected"] or []
    if kind == "sitemap_count":
        return len(result.sitemaps()), row["expected"]
    if kind == "sitemap_item":
        sitemaps = result.sitemaps()
        return (sitemaps[row["index"]] if row["index"] < len(sitemaps) else None), row["expected"]
    return None  # request_rate, visit_time, preferred_host: not part of our API


def _rows(suite: str) -> list[dict]:
    with open(DATA / f"{suite}.jsonl", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


@pytest.mark.parametrize("suite", SUITES)
def test_conformance_suite(suite):
    known = _known_differences()[suite]
    checked = 0
    failing: dict[str, str] = {}
    for row in _rows(suite):
        outcome = _check(row)
        if outcome is None:
            continue
        checked += 1
        got, expected = outcome
        if got != expected:
            failing[row["name"]] = f"expected {expected!r}, got {got!r}"
    assert checked > 0
    unexpected = {name: why for name, why in failing.items() if name not in known}
    assert not unexpected, f"{suite}: rows failing that DIFFERENCES.md does not list: {unexpected}"
    fixed = sorted(known - failing.keys())
    assert not fixed, f"{suite}: rows listed in DIFFERENCES.md that now pass (remove them): {fixed}"


def test_every_listed_difference_names_a_suite_row():
    for suite, names in _known_differences().items():
        assert names <= {row["name"] for row in _rows(suite)}, suite


# --- real-world robustness -----------------------------------------------------------


def test_realworld_robots_files_never_raise():
    """4,231 robots.txt files of popular sites (protego's test data): every one parses
    and answers without an exception (a quarter of them in the fast tier). Prints the parse time (pytest -s)."""
    urls = ["https://example.com/", "https://example.com/search?q=a%20b&page=2", "https://example.com/caf%C3%A9/x.pdf"]
    with tarfile.open(DATA / "protego_realworld_robotstxt_4231.tar.gz") as tar:
        files = [(member.name, tar.extractfile(member).read()) for member in tar
                 if member.isfile() and member.name.startswith("test_data/")]
    assert len(files) == 4231
    count = 0
    parse_s = 0.0
    for name, body in corpus_sample(files):
        start = time.perf_counter()
        result = RobotsRules.from_response(200, body, AGENT)
        parse_s += time.perf_counter() - start
        # www.pch.com serves an icon (binary) as its robots.txt: unreadable, which
        # never grants access (tests/fetch/test_robots_unreadable.py).
        expected = ("disallow_all", "unreadable") if name == "test_data/www.pch.com" else ("rules", "2xx")
        assert (result.kind, result.reason) == expected, name
        for url in urls:
            assert isinstance(result.allowed(url), bool)
        delay = result.crawl_delay()
        assert delay is None or delay >= 0
        assert all(isinstance(sitemap, str) for sitemap in result.sitemaps())
        count += 1
    print(f"\nparsed {count} real-world robots.txt in {parse_s:.2f} s ({1000 * parse_s / count:.3f} ms/file)")


def test_realworld_bom_file_keeps_its_rules():
    # www.iherb.com starts with a UTF-8 BOM; bare protego 0.7.0 allows /EditCart.
    with tarfile.open(DATA / "protego_realworld_robotstxt_4231.tar.gz") as tar:
        body = tar.extractfile("test_data/www.iherb.com").read()
    assert body.startswith(b"\xef\xbb\xbf")
    result = RobotsRules.from_response(200, body, AGENT)
    assert not result.allowed("https://www.iherb.com/EditCart")
