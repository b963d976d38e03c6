"""Sitemaps on the test web (testweb/sitemaps.py): found through robots.txt, fetched politely,
bounded against hostile files, merged by update, and lastmod making a known URL due.

One crawl for the module: three cycles of the four sitemap hosts (about 25 s).
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict

import pytest
from warcio.archiveiterator import ArchiveIterator

from cycles.commands.cycle import run_cycles
from cycles.tables.sitemaps import MAX_URLS_PER_FILE
from cycles.commands.inject import inject
from cycles.storage.store import Store
from testweb.harness import TestWeb
from testweb.sitemaps import CROSS_FOREIGN, CROSS_OWN, LISTED
from tests.conftest import config_for, write_seeds
from tests.support.fetching import CLOCK_SLACK_S

pytestmark = pytest.mark.web

CAP_BYTES = 4 << 20


def _stats(store: Store, segment: str, stage: str) -> dict:
    return json.loads((store.segment_dir(segment) / "stats" / f"{stage}.json").read_text())


def _crawldb(store: Store) -> dict[str, dict]:
    import cycles
    rows = cycles.open(store.root).sql("SELECT * FROM crawldb").to_arrow_table().to_pylist()
    return {r["url"]: r for r in rows}


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sitemaps")
    with TestWeb(hosts=0, special=False, sitemaps=True, max_seconds=180) as web:
        store = Store(tmp / "data")
        config = config_for(web, processes=1)
        config.fetch.sitemap_max_bytes = CAP_BYTES
        config.generate.max_urls_per_host = 4
        config.generate.partitions = 1  # one worker fetches the four hosts side by side
        # /fresh.html and /stale.html are fetched in cycle 1, after sm-good's sitemaps were read.
        seeds = web.seeds() + [web.url("sm-good", "/fresh.html"), web.url("sm-good", "/stale.html")]
        inject(store, config, write_seeds(tmp / "seeds.txt", seeds))
        out = {"web": web, "store": store, "config": config, "log": []}
        out["log"] += run_cycles(store, config, cycles=1)
        out["updated1"] = dt.datetime.now(dt.timezone.utc)
        out["db1"] = _crawldb(store)
        out["requests1"] = web.requests()
        # Cycle 2 reads robots.txt again, and so the sitemaps: /fresh.html's lastmod is now
        # newer than its fetch in cycle 1.
        config.fetch.robots_cache_s = 0
        out["log"] += run_cycles(store, config, cycles=1)
        out["updated2"] = dt.datetime.now(dt.timezone.utc)
        out["db2"] = _crawldb(store)
        out["requests"] = web.requests()
        out["segments"] = store.segments()
    assert len(out["segments"]) == 2, out["log"]
    return out


def test_hostile_sitemaps_stop_at_their_caps_with_counted_drops(crawl):
    stats = _stats(crawl["store"], crawl["segments"][0], "fetch")
    assert stats["sitemap/bytes_cap"] >= 1  # the gzip bomb
    assert stats["sitemap/file_cap"] >= 1  # the 10 million entries
    # What one file ever held (per partition: fetch.json sums partitions' counters).
    partitions = [json.loads(p.read_text())["counters"] for p in
                  (crawl["store"].segment_dir(crawl["segments"][0]) / "stats").glob("fetch-part-*.json")]
    assert max(p.get("sitemap/entries_held_max", 0) for p in partitions) == MAX_URLS_PER_FILE
    assert 0 < max(p.get("sitemap/inflated_bytes_max", 0) for p in partitions) <= CAP_BYTES
    assert stats["sitemap/cross_host"] == CROSS_FOREIGN
    assert stats["sitemap/malformed"] >= 1
    assert stats["sitemap/repeated"] == 4  # loop-a and loop-b list themselves and each other
    assert stats["sitemap/other_host_listed"] == 1 and stats["sitemap/robots_denied"] == 1


def test_sitemap_requests_obey_robots_and_spacing(crawl):
    web, requests = crawl["web"], crawl["requests1"]
    paths = [(r["host"].split(".")[0], r["path"]) for r in requests if r["host"]]
    assert ("sm-good", "/private/sitemap.xml") not in paths  # disallowed by robots.txt
    assert ("sm-bad", "/elsewhere.xml") not in paths  # named by another host's robots.txt
    for name in ("/loop-a.xml", "/loop-b.xml", "/cross.xml", "/broken.xml"):
        assert paths.count(("sm-bad", name)) == 1, name
    by_host = defaultdict(list)
    for r in requests:
        if r["host"]:
            by_host[r["host"]].append(r)
    delay = crawl["config"].effective_delay_s()
    for host, seen in by_host.items():
        seen.sort(key=lambda r: r["t_start"])
        assert seen[0]["path"] == "/robots.txt", host
        for before, after in zip(seen, seen[1:]):
            assert after["t_start"] - before["t_end"] >= delay - CLOCK_SLACK_S, (host, before["path"], after["path"])
    assert web  # the server answered throughout


def test_sitemaps_are_archived(crawl):
    store = crawl["store"]
    uris = set()
    for path in (store.segment_dir(crawl["segments"][0]) / "warc").glob("*.warc.gz"):
        with open(path, "rb") as fh:
            uris |= {r.rec_headers.get_header("WARC-Target-URI") for r in ArchiveIterator(fh)
                     if r.rec_type == "response"}
    web = crawl["web"]
    assert {web.url("sm-good", "/index.xml"), web.url("sm-good", "/s1.xml.gz"), web.url("sm-good", "/s2.txt")} <= uris


def test_update_merges_sitemap_urls_like_outlinks(crawl):
    web, db = crawl["web"], crawl["db1"]
    for target in (*LISTED, "/text-only.html", "/fresh.html", "/stale.html", *CROSS_OWN, "/broken/0.html"):
        assert web.url("sm-good" if not target.startswith(("/cross", "/broken")) else "sm-bad", target) in db, target
    assert web.url("sm-good", "/stolen.html") not in db  # listed by sm-bad: another host
    assert not any("other-scheme" in url for url in db)
    listed, plain = db[web.url("sm-good", LISTED[0])], db[web.url("sm-good", "/text-only.html")]
    assert listed["fetch_interval_s"] == max(crawl["config"].update.min_interval_s, 86400)  # changefreq daily
    assert listed["score"] > plain["score"]  # priority 0.9 against none
    update = _stats(crawl["store"], crawl["segments"][0], "update")
    # sm-huge's 50,000 images went through the outlink filters, as a page's links would.
    assert not any(url.startswith(web.url("sm-huge", "/img/")) for url in db)
    assert update["filter/extension"] >= MAX_URLS_PER_FILE


def test_lastmod_newer_than_the_last_fetch_makes_a_url_due(crawl):
    web = crawl["web"]
    fresh, stale = web.url("sm-good", "/fresh.html"), web.url("sm-good", "/stale.html")
    before = crawl["db1"]
    assert before[fresh]["last_fetched"] is not None and before[stale]["last_fetched"] is not None
    assert before[fresh]["next_fetch"] > crawl["updated2"]  # its lastmod was older than its fetch
    after = crawl["db2"]
    assert after[fresh]["next_fetch"] <= crawl["updated2"]  # the re-read sitemap says it changed since
    assert after[stale]["next_fetch"] == before[stale]["next_fetch"]  # lastmod 2023: nothing new
    assert _stats(crawl["store"], crawl["segments"][1], "update")["sitemap/lastmod_due"] == 1
