"""The crawler's TLS policy against the test web's HTTPS hosts (testweb/tls.py): each kind of
TLS failure is an outcome with its reason, backs the whole host off (host DB), gets a WARC
metadata record, and no HTTP request reaches the host — while a good HTTPS host of the same
web is fetched (the positive control). Also: archive-anyway, http -> https redirects with no
fallback to http, keep-alive, and the SSRF guard on https.

The crawler trusts the test CA through ``fetch.ca_bundle`` and finds the hosts through
``fetch.resolve`` (TestWeb.crawl_config sets both)."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from warcio.archiveiterator import ArchiveIterator

from cycles.tables.hostdb import load_host_state
from cycles.storage.store import Store
from testweb import tls as tls_web
from testweb.harness import TestWeb
from tests.support.fetching import assert_polite, fast_config, fetch, results

pytestmark = pytest.mark.web

REASON = {"expired": "expired", "wrong_name": "name_mismatch", "self_signed": "untrusted_issuer",
          "stall": "handshake_timeout", "tls10": "protocol_too_old"}
GOOD = tls_web.host_name("good")


@pytest.fixture(scope="module")
def web():
    with TestWeb(hosts=2, pages=4, page_bytes=2000, special=False, https=1.0, tls=True, max_seconds=300) as web:
        yield web


def warc_records(store: Store, segment: str) -> list:
    out = []
    for path in sorted((store.segment_dir(segment) / "warc").glob("*.warc.gz")):
        for record in ArchiveIterator(io.BytesIO(path.read_bytes())):
            record.body = record.content_stream().read()
            out.append(record)
    return out


def metadata_of(records: list, url: str) -> list[dict]:
    """The metadata records of ``url`` as dicts of their warc-fields."""
    out = []
    for r in records:
        if r.rec_type == "metadata" and r.rec_headers.get_header("WARC-Target-URI") == url:
            fields = {}
            for line in r.body.decode().splitlines():
                name, _, value = line.partition(": ")
                fields[name] = value
            out.append(fields)
    return out


@pytest.mark.parametrize("mode", sorted(REASON))
def test_a_tls_failure_is_an_outcome_backs_the_host_off_and_is_archived(web, tmp_path, mode):
    reason = REASON[mode]
    bad = tls_web.host_name(mode)
    store = Store(tmp_path / "data")
    config = fast_config(web, connect_timeout_s=1.5)
    assert config.fetch.ca_bundle == web.ca_file()
    bad_urls = [web.url(bad.split(".")[0], t) for t in ("/", "/p/0.html", "/p/1.html")]
    good_urls = [web.url("tls-good", t) for t in ("/", "/p/0.html")]
    before, shakes_before = len(web.requests()), len(web.handshakes())
    started = dt.datetime.now(dt.timezone.utc)
    segment, result = fetch(store, config, bad_urls + good_urls)
    requests = web.requests()[before:]
    rows = results(store, segment)

    # The fetched rows: every URL of the bad host failed with the reason, none was requested.
    for url in bad_urls:
        assert rows[url]["outcome"] == "tls_failed", rows[url]
        assert rows[url]["error"].startswith(f"TLS {reason}: curl "), rows[url]["error"]
    # The positive control: the good HTTPS host on the same web was fetched.
    assert [rows[u]["outcome"] for u in good_urls] == ["ok", "ok"]
    assert {r["path"] for r in requests if r["host"] == GOOD and r["scheme"] == "https"} >= {"/", "/p/0.html"}
    # What the server saw: no HTTP request to the bad host, on https or (no fallback) http.
    assert not [r for r in requests if r["host"] == bad]
    # ... yet the crawler did reach it, once for the whole host (not URL by URL).
    tries = [h for h in web.handshakes()[shakes_before:] if h["host"] == bad]
    assert len(tries) == 1, tries
    if mode == "stall":
        assert tries[0]["error"] == "stalled"
    elif mode == "tls10":
        assert tries[0]["error"] == "UNSUPPORTED_PROTOCOL"

    assert result.counters[f"tls/failures/{reason}"] == 1
    assert sum(v for k, v in result.counters.items() if k.startswith("tls/failures/")) == 1
    stats = json.loads((store.segment_dir(segment) / "stats" / "fetch.json").read_text())
    assert stats[f"tls/failures/{reason}"] == 1 and stats["fetch/tls_failures"] == 1
    assert stats["tls/handshakes"] >= 1 and stats["fetch/tls_seconds"] > 0

    # The host DB: the reason for operators, and the host backed off a day.
    state = load_host_state(store, {bad, GOOD})
    assert state[bad]["tls_failures"] == 1 and state[bad]["tls_error"].startswith(f"{reason}: curl ")
    # A day for a certificate or protocol verdict; an hour for a stalled handshake.
    backoff_s = config.fetch.tls_failure_backoff_s / (24 if reason == "handshake_timeout" else 1)
    assert started + dt.timedelta(seconds=backoff_s * 0.99) <= state[bad]["not_before"] \
        <= dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=backoff_s * 1.01)
    assert state[GOOD]["tls_error"] is None

    # The WARC: a metadata record of the failed exchange (robots.txt, the host's first request).
    meta = metadata_of(warc_records(store, segment), bad_urls[0] + "robots.txt")
    assert len(meta) == 1
    assert meta[0]["tls-verify"] == "failed" and meta[0]["tls-failure"] == reason
    assert meta[0]["tls-error"].startswith("curl ") and "tls-verification" not in meta[0]
    assert_polite(requests)


def test_archive_anyway_fetches_unverified_and_records_the_failure(web, tmp_path):
    store = Store(tmp_path / "data")
    config = fast_config(web, tls_archive_anyway=True)
    hosts = {"expired": tls_web.host_name("expired"), "tls10": tls_web.host_name("tls10")}
    urls = [web.url(h.split(".")[0], t) for h in hosts.values() for t in ("/", "/p/0.html")]
    before = len(web.requests())
    segment, result = fetch(store, config, urls)
    requests = web.requests()[before:]
    rows = results(store, segment)
    assert [rows[u]["outcome"] for u in urls] == ["ok"] * 4
    for host in hosts.values():
        assert {r["path"] for r in requests if r["host"] == host and r["scheme"] == "https"} == \
            {"/robots.txt", "/", "/p/0.html"}
    assert result.counters["tls/failures/expired"] == result.counters["tls/failures/protocol_too_old"] == 1
    assert result.counters["tls/unverified"] == 6  # robots.txt and two pages a host
    records = warc_records(store, segment)
    # The failed handshake is on record, then each exchange fetched unverified says so.
    failed, retried = metadata_of(records, urls[0] + "robots.txt")
    assert failed["tls-verify"] == "failed" and "tls-verification" not in failed
    assert retried["tls-verification"].startswith("skipped") and retried["tls-failure"] == "expired"
    (page,) = metadata_of(records, urls[1])
    assert page["outcome"] == "ok" and page["tls-verify"] == "failed" and page["tls-failure"] == "expired"
    assert page["tls-verification"].startswith("skipped")
    (old,) = metadata_of(records, urls[3])
    assert old["tls-failure"] == "protocol_too_old"
    # The host DB still tells the operator the certificate is bad.
    state = load_host_state(store, set(hosts.values()))
    assert state[hosts["expired"]]["tls_error"].startswith("expired: ")


def test_http_redirects_to_https_and_never_back(web, tmp_path):
    store = Store(tmp_path / "data")
    config = fast_config(web)
    http_url = f"http://h0.web.test:{web.port}/p/0.html"
    https_url = web.url("h0", "/p/0.html")
    expired_http = f"http://tls-expired.web.test:{web.port}/"
    before = len(web.requests())
    segment, _ = fetch(store, config, [http_url, expired_http])
    requests = web.requests()[before:]
    rows = results(store, segment)
    assert rows[http_url]["outcome"] == "redirect" and rows[http_url]["redirect_to"] == https_url
    assert rows[https_url]["outcome"] == "ok"  # the redirect was followed, on https
    h0 = [(r["scheme"], r["path"], r["status"]) for r in requests if r["host"] == "h0.web.test"]
    assert ("https", "/p/0.html", 200) in h0 and ("http", "/p/0.html", 301) in h0
    # The expired host: its http robots.txt redirects to https, whose handshake fails, and
    # the whole host is backed off: its http URL is not asked over http either.
    expired = [(r["scheme"], r["path"], r["status"]) for r in requests if r["host"] == "tls-expired.web.test"]
    assert expired == [("http", "/robots.txt", 301)]
    assert rows[expired_http]["outcome"] == "tls_failed"
    assert rows[expired_http]["error"].startswith("TLS expired: ")
    assert_polite(requests)


def test_keep_alive_one_handshake_per_host(web, tmp_path):
    store = Store(tmp_path / "data")
    config = fast_config(web)
    urls = [web.url("h1", f"/p/{k}.html") for k in range(4)]
    before, shakes_before = len(web.requests()), len(web.handshakes())
    segment, result = fetch(store, config, urls)
    requests = [r for r in web.requests()[before:] if r["host"] == "h1.web.test"]
    assert [results(store, segment)[u]["outcome"] for u in urls] == ["ok"] * 4
    assert len(requests) == 5 and len({r["conn_id"] for r in requests}) == 1  # robots.txt + 4 pages
    shakes = [h for h in web.handshakes()[shakes_before:] if h["host"] == "h1.web.test"]
    assert len(shakes) == 1 and shakes[0]["sni"] == "h1.web.test"
    assert result.counters["tls/handshakes"] == 1 and result.counters["tls/seconds"] > 0


def test_ssrf_guard_holds_on_https(web, tmp_path):
    store = Store(tmp_path / "data")
    config = fast_config(web)
    config.fetch.allowed_networks = []  # loopback is not public: refused before connecting
    url = web.url("h0", "/p/1.html")
    shakes_before = len(web.handshakes())
    segment, _ = fetch(store, config, [url])
    assert results(store, segment)[url]["outcome"] == "blocked"
    assert not [h for h in web.handshakes()[shakes_before:] if h["host"] == "h0.web.test"]


def test_a_new_connection_resumes_the_hosts_tls_session(web, tmp_path):
    """tls-close ends every connection after its response: each request is a new connection,
    and the worker's share object (LOCK_DATA_SSL_SESSION) resumes the host's session."""
    store = Store(tmp_path / "data")
    config = fast_config(web)
    urls = [web.url("tls-close", t) for t in ("/", "/p/0.html", "/p/1.html")]
    before, shakes_before = len(web.requests()), len(web.handshakes())
    segment, result = fetch(store, config, urls)
    assert [results(store, segment)[u]["outcome"] for u in urls] == ["ok"] * 3
    requests = [r for r in web.requests()[before:] if r["host"] == tls_web.CLOSING]
    assert len(requests) == 4 and len({r["conn_id"] for r in requests}) == 4  # robots.txt + 3 pages
    shakes = [h for h in web.handshakes()[shakes_before:] if h["host"] == tls_web.CLOSING]
    assert [h["session_reused"] for h in shakes] == [False, True, True, True]
    assert result.counters["tls/handshakes"] == 4


def test_http2_where_the_server_offers_it(tmp_path):
    """libcurl negotiates HTTP/2 by ALPN; still one request at a time per host, one connection,
    and the WARC records say HTTP/2."""
    with TestWeb(hosts=1, pages=3, page_bytes=2000, special=False, https=1.0, h2=1.0, max_seconds=120) as web:
        store = Store(tmp_path / "data")
        urls = [web.url("h0", f"/p/{k}.html") for k in range(3)]
        segment, _ = fetch(store, fast_config(web), urls)
        requests = web.requests()
    assert [results(store, segment)[u]["outcome"] for u in urls] == ["ok"] * 3
    assert [r["http_version"] for r in requests] == ["2"] * 4 and len({r["conn_id"] for r in requests}) == 1
    assert_polite(requests)
    records = warc_records(store, segment)
    response = next(r for r in records if r.rec_type == "response" and r.rec_headers.get_header("WARC-Target-URI") == urls[0])
    request = next(r for r in records if r.rec_type == "request" and r.rec_headers.get_header("WARC-Target-URI") == urls[0])
    assert response.http_headers.protocol == "HTTP/2" and response.http_headers.get_statuscode() == "200"
    assert request.http_headers.statusline.endswith(" HTTP/2")  # "GET /p/0.html HTTP/2"


def test_the_tls_failure_survives_update_and_the_next_cycle_asks_nothing(web, tmp_path):
    """inject → generate → fetch → update → generate → fetch: the host DB that update wrote
    keeps the reason and the back-off, so the next cycle defers the host without a handshake."""
    from cycles.fetch.fetch import fetch_segment
    from cycles.generate.generate import generate
    from cycles.commands.inject import inject
    from cycles.update.update import update_segment
    from tests.conftest import write_seeds

    store = Store(tmp_path / "data")
    config = fast_config(web)
    bad = tls_web.host_name("self_signed")
    seeds = [web.url("tls-self-signed", "/"), web.url("tls-good", "/")]
    inject(store, config, write_seeds(tmp_path / "seeds.txt", seeds))
    first = generate(store, config).segment
    fetch_segment(store, config, first)
    update_segment(store, config, first)
    state = load_host_state(store, {bad})[bad]
    assert state["tls_error"].startswith("untrusted_issuer: curl 60: ") and state["tls_failures"] == 1
    # Due again (as if its retry time had come): the host's not_before keeps it out.
    from tests.support.fetching import make_all_due

    make_all_due(store)
    shakes_before = len(web.handshakes())
    second = generate(store, config).segment
    fetch_segment(store, config, second)
    rows = results(store, second)
    assert rows[seeds[0]]["outcome"] == "deferred" and "not_before" in rows[seeds[0]]["error"]
    assert rows[seeds[1]]["outcome"] == "not_modified"  # the good host was asked (positive control)
    assert not [h for h in web.handshakes()[shakes_before:] if h["host"] == bad]


def test_min_tls_version_1_0_reaches_the_old_server_still_verified(web, tmp_path):
    store = Store(tmp_path / "data")
    config = fast_config(web, min_tls_version="1.0")
    old = [web.url("tls-tls10", t) for t in ("/", "/p/0.html")]
    expired = web.url("tls-expired", "/")
    before = len(web.requests())
    segment, result = fetch(store, config, old + [expired])
    rows = results(store, segment)
    assert [rows[u]["outcome"] for u in old] == ["ok", "ok"]
    assert rows[expired]["outcome"] == "tls_failed"  # the old protocol allowed, verification kept
    assert {r["path"] for r in web.requests()[before:] if r["host"] == tls_web.host_name("tls10")} == \
        {"/robots.txt", "/", "/p/0.html"}
    assert result.counters.get("tls/failures/protocol_too_old", 0) == 0
