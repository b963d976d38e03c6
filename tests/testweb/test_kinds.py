"""The optional kinds of test-web hosts: traps, near-duplicates, changing pages. Each is
checked in the model (the oracle's labels hold for the bytes served) and over HTTP (the
server answers as the oracle says; the virtual clock moves versions, ETags and dates)."""

from __future__ import annotations

import difflib
import json
import time
from collections import Counter, deque
from email.utils import parsedate_to_datetime
from urllib.parse import urljoin, urlsplit

import lxml.html
import pytest

from testweb.harness import TestWeb, TestWebError
from testweb.model import CLOCK_START, KIND_IP_PREFIX
from testweb.respond import http_date
from testweb.web import Web
from cycles.urls import normalize_url
from tests.support.webclient import normalise, fetch, wait_for_log

pytestmark = pytest.mark.web

KINDS = dict(traps=True, neardups=True, changing=True)


@pytest.fixture(scope="module")
def model() -> Web:
    return Web(hosts=3, pages=6, page_bytes=3000, special=False, port=8124, **KINDS)


def body(model: Web, url: str, headers: dict | None = None) -> bytes:
    profile, target = model.split(url)
    return profile.handle("GET", target, headers or {}).body


def words(model: Web, url: str) -> list[str]:
    return lxml.html.document_fromstring(body(model, url)).text_content().split()


def html_links(model: Web, url: str) -> list[tuple[str, bool]]:
    doc = lxml.html.document_fromstring(body(model, url))
    base = doc.xpath("//base/@href")
    base_url = urljoin(url, base[0]) if base else url
    return [(normalise(urljoin(base_url, a.get("href"))), "nofollow" in (a.get("rel") or "").split())
            for a in doc.iter("a")]


def walk_trap(model: Web, start: str, limit: int) -> list[str]:
    """Breadth-first through trap URLs only, from ``start``: the first ``limit`` found."""
    seen, order, queue = {start}, [start], deque([start])
    while queue and len(order) < limit:
        page = model.page(queue.popleft())
        assert page is not None and page.status == 200
        for link in page.links:
            if link.url not in seen and model.is_trap(link.url):
                seen.add(link.url)
                order.append(link.url)
                queue.append(link.url)
    return order[:limit]


# --- all kinds ---------------------------------------------------------------------------------

def test_kinds_are_off_by_default():
    plain = Web(hosts=3, pages=4, page_bytes=2000, port=8124)
    assert plain.kinds == frozenset() and plain.kind_names() == []
    assert not any(ip.startswith(tuple(KIND_IP_PREFIX.values())) for ip in plain.ips())
    assert plain.neardup_pairs() == [] and plain.exact_duplicate_groups() == []
    assert plain.mirror_hosts() == {} and plain.trap_hosts() == []
    with_kinds = Web(hosts=3, pages=4, page_bytes=2000, port=8124, **KINDS)
    assert with_kinds.seeds()[:len(plain.seeds())] == plain.seeds()
    # Pages other than the regular / (which links the new hosts) are unchanged.
    url = plain.url("h1.web.test", "/p/2.html")
    assert body(plain, url) == body(with_kinds, url)


def test_links_in_the_html_are_the_model_links(model):
    """What a parser finds in every page equals the oracle's links: all non-trap pages, and
    the first 40 pages into each trap."""
    urls = sorted(model.universe())
    for host in model.trap_hosts():
        entry = next(link.url for link in model.page(model.url(host, "/")).links if model.is_trap(link.url))
        urls += walk_trap(model, entry, 40)
    for url in urls:
        page = model.page(url)
        if page is None or page.status != 200:
            continue
        assert html_links(model, url) == [(link.url, link.nofollow) for link in page.links], url
    assert len(urls) > 250


def test_oracle_with_kinds(model):
    reach = model.expected_reachable()
    never = model.must_not_request()
    assert not reach & never and not any(model.is_trap(u) for u in reach | never)
    # Regular seeds alone find every new host (h0 links them all).
    assert model.expected_reachable([model.url("h0.web.test")]) == reach
    for name in model.kind_names():
        assert model.url(name, "/") in reach
    assert Web(hosts=0, special=False, traps=True).seeds()  # a web of one kind alone


# --- traps -------------------------------------------------------------------------------------

def test_trap_hosts_have_good_pages_and_endless_traps(model):
    reach = model.expected_reachable()
    assert [h.split(".")[0] for h in model.trap_hosts()] == [
        "trap-calendar", "trap-session", "trap-repeat", "trap-numbers"]
    for host in model.trap_hosts():
        good = model.good_pages(host)
        assert len(good) == 11 and set(good) <= reach
        assert not any(model.is_trap(u) for u in good)
        for url in good:
            page = model.page(url)
            assert page.status == 200 and any(model.is_trap(u) for u in page.followable()), url
        assert model.good_pages(host.split(".")[0]) == good
        # Deep into the trap there is always more; trap pages link back to good pages (on
        # trap-session, through a session id).
        entry = next(u for u in model.page(good[0]).followable() if model.is_trap(u))
        found = walk_trap(model, entry, 3000)
        assert len(found) == 3000, host
        last = model.page(found[-1])
        assert any(model.is_trap(u) for u in last.followable()), host
        if host.startswith("trap-session"):
            assert {normalize_url(u) for u in last.followable()} & set(good), host
        else:
            assert any(u in good for u in last.followable()), host
        assert not any(u in reach for u in found)
    with pytest.raises(KeyError, match="no host"):
        Web(hosts=1, special=False).good_pages("trap-calendar")


def test_calendar_trap(model):
    url = lambda t: model.url("trap-calendar.web.test", t)  # noqa: E731
    dec = model.page(url("/cal/2024/12"))
    assert url("/cal/2025/01") in dec.followable() and url("/cal/2024/11") in dec.followable()
    assert url("/cal/2024/12/31") in dec.followable()
    assert url("/cal/2024/02/29") in model.page(url("/cal/2024/02")).followable()
    assert model.page(url("/cal/2023/02/29")) is None
    assert model.page(url("/cal/2024/13")) is None and model.page(url("/cal/02024/01")) is None
    assert model.page(url("/cal/123456/07/04")).status == 200  # no end
    assert model.is_trap(url("/cal/2024/01")) and not model.is_trap(url("/p/3.html"))


def test_session_trap(model):
    host = "trap-session.web.test"
    home = model.page(model.url(host, "/"))
    session_links = [u for u in home.followable() if model.is_trap(u)]
    styles = Counter(u.split(host, 1)[1].split(".html", 1)[1][:3] for u in session_links)
    assert set(styles) == {"?si", ";js", "?se", "?s="}
    # A page with a session id: same article text, every link with a new id.
    inner = session_links[0]
    page = model.page(inner)
    assert page.status == 200 and all(model.is_trap(u) for u in page.followable())
    assert not set(page.followable()) & set(session_links)
    clean = inner.split("?")[0].split(";")[0]
    paragraphs = [lxml.html.document_fromstring(body(model, u)).xpath("//main/p/text()")[:3]
                  for u in (inner, clean)]
    assert paragraphs[0] == paragraphs[1] and len(paragraphs[0]) == 3
    assert model.page(model.url(host, "/p/1.html;foo=1")) is None
    # The default normaliser drops sid and jsessionid but keeps session and s: the trap
    # stays a trap for a crawler relying on normalisation alone.
    kept = set()
    for url in walk_trap(model, inner, 400):
        normal = normalize_url(url)
        if model.is_trap(normal):
            kept.add(urlsplit(normal).query.partition("=")[0])
        else:
            assert normal in model.good_pages(host)
    assert kept == {"session", "s"}
    # Deterministic: the same page links the same ids in another build.
    again = Web(hosts=3, pages=6, page_bytes=3000, special=False, port=8124, **KINDS)
    assert again.page(inner).followable() == page.followable()


def test_repeat_trap(model):
    host = "trap-repeat.web.test"
    url = model.url(host, "/")
    for expect in ("/a/", "/a/b/", "/a/b/a/", "/a/b/a/b/"):
        page = model.page(url)
        nxt = [link for link in page.links if model.is_trap(link.url)][0]
        assert not nxt.href.startswith("/")  # a relative link, the trap's cause
        url = nxt.url
        assert url == model.url(host, expect)
    assert model.page(model.url(host, "/" + "x/" * 50)).status == 200
    assert model.page(model.url(host, "/a/a/")) is None and model.page(model.url(host, "/b/")) is None


def test_numbers_trap(model):
    url = lambda t: model.url("trap-numbers.web.test", t)  # noqa: E731
    assert url("/item?id=42") in model.page(url("/item?id=41")).followable()
    assert url("/list/page/8") in model.page(url("/list/page/7")).followable()
    assert url("/item?id=79") in model.page(url("/list/page/7")).followable()
    assert model.page(url("/item?id=007")) is None and model.page(url("/list/page/0")) is None
    assert model.page(url(f"/item?id={10**20}")).status == 200


# --- near-duplicates ---------------------------------------------------------------------------

def _article(model: Web, url: str) -> str:
    doc = lxml.html.document_fromstring(body(model, url))
    return " ".join(doc.xpath("//article")[0].text_content().split())


def test_neardup_labels(model):
    pairs = model.neardup_pairs()
    kinds = Counter((kind, label) for _, _, label, kind in pairs)
    assert kinds == {("date", True): 10, ("counter", True): 10, ("ad", True): 10,
                     ("boilerplate", True): 10, ("exact", True): 20, ("mirror", True): 7,
                     ("same-template", False): 30, ("other-site", False): 10}
    reach = model.expected_reachable()
    for a, b, label, kind in pairs:
        assert a != b and a in reach and b in reach, (a, b)
        wa, wb = words(model, a), words(model, b)
        assert len(wa) >= 300 and len(wb) >= 300
        ratio = difflib.SequenceMatcher(None, wa, wb, autojunk=False).ratio()
        if label:
            assert ratio >= 0.95, (a, b, kind, ratio)
        else:
            assert ratio <= 0.15, (a, b, kind, ratio)
        if kind in ("date", "counter", "ad"):
            # Exactly one line of the HTML differs, and only in a few words.
            la, lb = body(model, a).splitlines(), body(model, b).splitlines()
            changed = [(x, y) for x, y in zip(la, lb) if x != y]
            assert len(la) == len(lb) and len(changed) == 1, (a, b)
            assert len(set(changed[0][0].split()) ^ set(changed[0][1].split())) <= 40
        elif kind == "boilerplate":
            assert _article(model, a) == _article(model, b)
        elif not label:
            # Other articles: not one paragraph in common.
            pa = set(lxml.html.document_fromstring(body(model, a)).xpath("//article/p[not(@class)]/text()"))
            pb = set(lxml.html.document_fromstring(body(model, b)).xpath("//article/p[not(@class)]/text()"))
            assert len(pa) == len(pb) == 16 and not pa & pb


def test_exact_duplicates_and_mirror(model):
    groups = model.exact_duplicate_groups()
    assert len(groups) == 10 + 7
    for group in groups:
        bodies = {body(model, u) for u in group}
        assert len(bodies) == 1 and len(group) >= 2, group
    assert model.mirror_hosts() == {"mirror-of-h1.web.test": "h1.web.test"}
    # The mirror's relative links stay on the mirror; its absolute ones go to h1.
    page = model.page(model.url("mirror-of-h1.web.test", "/p/2.html"))
    hosts = {u.split("/")[2].split(":")[0] for u in page.followable()}
    assert "mirror-of-h1.web.test" in hosts
    assert model.page(model.url("mirror-of-h1.web.test", "/nowhere")) is None
    one = Web(hosts=1, special=False, neardups=True)
    assert one.mirror_hosts() == {"mirror-of-h0.web.test": "h0.web.test"}
    assert Web(hosts=0, special=True, neardups=True).mirror_hosts() == {}


# --- changing pages ----------------------------------------------------------------------------

def test_change_periods_and_versions(model):
    pages = model.changing_pages()
    assert len(pages) == 12
    periods = Counter(model.change_period(u) for u in pages)
    assert periods == {3600: 3, 4 * 3600: 3, 86400: 3, 7 * 86400: 3}
    never = model.url("changing.web.test", "/c/4.html")
    assert model.change_period(never) is None and model.change_kind(never) == "never"
    assert model.version_at(never, 0) == model.version_at(never, 1e10) == 0
    assert model.change_period(model.url("h0.web.test", "/")) is None
    for url in pages:
        period = model.change_period(url)
        t = CLOCK_START
        v = model.version_at(url, t)
        # Exactly one change per period, at a page-specific phase.
        steps = [model.version_at(url, t + s) for s in range(0, 3 * period + 1, period // 8)]
        assert steps[0] == v and steps[-1] == v + 3
        assert all(b - a in (0, 1) for a, b in zip(steps, steps[1:]))
    host = model.profiles["changing.web.test"]
    phases = {host.version_start(model.split(u)[1], 0) % model.change_period(u) for u in pages}
    assert len(phases) > 3


def test_changing_content_follows_the_clock():
    web = Web(hosts=1, special=False, changing=True)
    host = web.profiles["changing.web.test"]
    for k, kind in ((0, "content"), (12, "timestamp")):
        target = f"/c/{k}.html"
        url = web.url(host.name, target)
        assert web.change_kind(url) == kind
        web.clock.set(t=CLOCK_START)
        first = host.handle("GET", target, {})
        etag = dict(first.headers)["ETag"]
        modified = dict(first.headers)["Last-Modified"]
        v = web.version_at(url, CLOCK_START)
        assert parsedate_to_datetime(modified).timestamp() == host.version_start(target, v) <= CLOCK_START
        assert host.handle("GET", target, {"if-none-match": etag}).status == 304
        assert first.date == http_date(CLOCK_START)
        # Just before the next change: same; at it: a new version.
        nxt = host.version_start(target, v + 1)
        web.clock.set(t=nxt - 1)
        assert host.handle("GET", target, {"if-none-match": etag}).status == 304
        web.clock.set(t=nxt)
        second = host.handle("GET", target, {"if-none-match": etag})
        assert second.status == 200 and dict(second.headers)["ETag"] != etag
        a, b = first.body.decode().splitlines(), second.body.decode().splitlines()
        changed = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        if kind == "timestamp":
            assert len(changed) == 1 and "Updated" in a[changed[0]]
        else:
            assert len(changed) > 10
    web.clock.set(rate=3600)
    t0 = web.clock.now()
    assert web.clock.now() >= t0


# --- over HTTP -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kweb():
    with TestWeb(hosts=2, pages=4, page_bytes=2000, special=False, max_seconds=120, **KINDS) as w:
        yield w


def test_server_answers_as_the_model(kweb):
    model = kweb.web
    urls = []
    for host in kweb.trap_hosts():
        urls += kweb.good_pages(host)
        entry = next(u for u in model.page(model.url(host, "/")).followable() if kweb.is_trap(u))
        urls += walk_trap(model, entry, 15)
    urls += [u for pair in kweb.neardup_pairs()[:30] for u in pair[:2]]
    urls.append(kweb.url("trap-calendar", "/cal/2023/02/29"))
    for url in dict.fromkeys(urls):
        page = model.page(url)
        r = fetch(kweb, url)
        assert r.status == (404 if page is None else page.status), url
        if page is not None:
            assert r.body == body(model, url), url
    for group in kweb.exact_duplicate_groups():
        assert len({fetch(kweb, u).body for u in group}) == 1


def test_virtual_clock_over_http(kweb):
    url = kweb.url("changing", "/c/0.html")
    assert kweb.ready["control"].startswith("127.0.0.2:")
    t0 = kweb.set_clock(CLOCK_START)
    assert t0 == CLOCK_START == kweb.clock()
    first = fetch(kweb, url)
    etag = first.headers["etag"]
    assert first.headers["date"] == http_date(CLOCK_START)
    assert parsedate_to_datetime(first.headers["last-modified"]).timestamp() <= CLOCK_START
    assert fetch(kweb, url, [f"If-None-Match: {etag}"]).status == 304
    period = kweb.change_period(url)
    assert kweb.set_clock(advance=period) == CLOCK_START + period
    second = fetch(kweb, url, [f"If-None-Match: {etag}"])
    assert second.status == 200 and second.headers["etag"] != etag
    assert second.body == body(kweb.web, url)  # the test side's model moved with the server
    rows = wait_for_log(kweb, lambda r: r["path"] == "/c/0.html", count=3)
    versions = [kweb.version_at(url, r["clock_t"]) for r in rows]
    assert versions[0] == versions[1] == versions[2] - 1
    # A running clock, then stopped again.
    kweb.set_clock(rate=1000)
    a = kweb.clock()
    assert kweb.clock() > a
    # In step with the crawler's clock (real time + CRAWL_CLOCK_OFFSET_S).
    before = time.time()
    t = kweb.set_clock(offset=86400)
    assert before + 86400 <= t <= time.time() + 86400 and kweb.web.clock.rate == 1
    kweb.set_clock(CLOCK_START, rate=0)
    assert kweb.clock() == kweb.clock() == CLOCK_START
    with pytest.raises(TestWebError, match="unknown parameters"):
        kweb._control("speed=2")
    with pytest.raises(TestWebError, match="400"):
        kweb._control("t=soon")
    # The control address is no host: a crawler sent there gets nothing.
    assert "127.0.0.2" not in kweb.resolve_map().values()
    assert fetch(kweb, f"http://127.0.0.2:{kweb.port}/p/0.html").status == 404


def test_clock_options_reach_the_server():
    with TestWeb(hosts=1, special=False, changing=True, clock_start=CLOCK_START + 86400,
                 clock_rate=3600, max_seconds=30) as w:
        assert w.ready["clock"]["rate"] == 3600 and w.ready["changing"] is True
        assert CLOCK_START + 86400 <= w.clock() < CLOCK_START + 86400 + 3600 * 30
        assert w.web.clock.rate == 3600
        json.dumps(w.ready)
