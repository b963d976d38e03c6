"""Discovery inside the fetch (cycles/fetch/discovery.py) and the early end of a partition
(``fetch.max_duration_s``, ``fetch.throughput_min_pages_s``), judged by what the test web's
server saw and what update wrote. One small crawl per scenario, shared by its tests."""

from __future__ import annotations

import re
import threading
from collections import Counter
from urllib.parse import urlsplit

import duckdb
import pyarrow.parquet as pq
import pytest

from cycles.tables import segment as seg
from cycles.storage.bloom import BloomFilter
from cycles.config import Config
from cycles.fetch.records import FetchItem
from cycles.tables.crawldb import pattern_hash_sql, url_pattern_hash
from cycles.fetch.fetch import fetch_segment
from cycles.fetch.inline import InlineFetches
from cycles.fetch.partition import FetchTask, clear_stop, fetch_partition, request_stop
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.storage.store import Store
from cycles.update.update import update_segment
from cycles.urls import host_hash, url_host
from testweb.harness import TestWeb
from tests.conftest import write_seeds
from tests.support.discovery import link, offer_setup
from tests.support.fetching import assert_polite, crawldb_rows, fast_config, results

HOSTS = 3
P_PAGE = re.compile(r"^/p/\d+\.html$")


def page_requests(requests: list[dict]) -> list[dict]:
    return [r for r in requests if r["path"] != "/robots.txt"]


def fetchlist_urls(store: Store, segment: str) -> set[str]:
    return set(pq.read_table(store.segment_dir(segment) / "fetchlist")["url"].to_pylist())


def discovery_config(web, **fetch) -> Config:
    config = fast_config(web, **fetch)
    config.fetch.follow_outlinks_depth = fetch.get("follow_outlinks_depth", 2)
    config.fetch.flush_s = 0.5
    return config


def run_cycle(store: Store, config: Config) -> tuple[str, dict]:
    segment = generate(store, config).segment
    assert segment is not None, "nothing due"
    counters = fetch_segment(store, config, segment).counters
    update_segment(store, config, segment)
    return segment, counters


# --- depth 1: only links of the fetch-list pages -------------------------------------------
@pytest.fixture(scope="module")
def one_hop(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one-hop")
    with TestWeb(hosts=HOSTS, pages=12, page_bytes=2000, special=False, max_seconds=120) as web:
        store = Store(tmp / "data")
        config = discovery_config(web, follow_outlinks_depth=1)
        inject(store, config, write_seeds(tmp / "seeds.txt", [web.url(f"h{i}") for i in range(HOSTS)]))
        segment, counters = run_cycle(store, config)
        yield web, store, segment, counters, web.requests()


@pytest.mark.web
def test_links_of_the_seeds_are_fetched_in_the_same_cycle_and_no_deeper(one_hop):
    web, store, segment, counters, requests = one_hop
    rows = results(store, segment)  # fails if a URL has two rows
    listed = fetchlist_urls(store, segment)
    discovered = set(rows) - listed
    assert discovered and counters["discover/queued"] == len(discovered)
    db = crawldb_rows(store)
    # Every URL fetched is a seed (depth 0) or one link from one (depth 1); update gave the
    # discovered ones rows of their own, fetched, with the depth and score of their link.
    for url in discovered:
        assert (db[url]["depth"], db[url]["status"]) == (1, "fetched"), url
        assert db[url]["score"] == pytest.approx(1 / 2)
        assert db[url]["last_fetched"] is not None
    # The seeds' links' links are in the crawl DB, unfetched: the next cycle's work.
    deeper = {u for u, r in db.items() if r["depth"] == 2}
    assert deeper and all(db[u]["last_fetched"] is None for u in deeper)
    assert not deeper & web.requested_urls(requests)


@pytest.mark.web
def test_one_cycle_with_discovery_is_polite_and_asks_each_url_once(one_hop):
    web, store, segment, counters, requests = one_hop
    asked = Counter((r["host"], r["path"]) for r in page_requests(requests))
    assert asked and max(asked.values()) == 1, [k for k, n in asked.items() if n > 1]
    # nofollow links, meta-nofollow pages' links, robots.txt-disallowed paths: never asked.
    assert not web.requested_urls(requests) & web.must_not_request()
    assert_polite(requests)
    assert len(results(store, segment)) == len(page_requests(requests))


# --- depth 3 with a small budget and a small pattern cap, two cycles ---------------------
BUDGET, PATTERN_CAP = 2, 3


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("capped")
    with TestWeb(hosts=HOSTS, pages=30, page_bytes=2000, special=False, max_seconds=120) as web:
        store = Store(tmp / "data")
        config = discovery_config(web, follow_outlinks_depth=3, follow_outlinks_per_host=BUDGET)
        config.update.max_urls_per_pattern = PATTERN_CAP
        inject(store, config, write_seeds(tmp / "seeds.txt", [web.url(f"h{i}") for i in range(HOSTS)]))
        cycles = []
        for _ in range(2):
            before = len(web.requests())
            segment, counters = run_cycle(store, config)
            cycles.append((segment, counters, web.requests()[before:], crawldb_rows(store)))
        yield web, store, cycles


@pytest.mark.web
def test_a_host_never_gets_more_than_its_budget_or_its_pattern_cap(capped):
    web, store, cycles = capped
    for segment, counters, requests, db in cycles:
        rows = results(store, segment)
        listed = fetchlist_urls(store, segment)
        per_host = Counter(url_host(u) for u in set(rows) - listed)
        assert max(per_host.values(), default=0) <= BUDGET, per_host
        # update.max_urls_per_pattern: /p/N.html is one pattern per host, in the crawl DB
        # (fetched inline or added by update) and among the pages asked.
        in_db = Counter(r["host"] for u, r in db.items() if P_PAGE.match(urlsplit(u).path))
        assert in_db and max(in_db.values()) <= PATTERN_CAP, in_db
    assert sum(c["discover/trap_pattern_cap"] for _, c, _, _ in cycles) > 0
    assert sum(c["discover/host_budget"] for _, c, _, _ in cycles) > 0
    assert cycles[0][1]["discover/queued"] > 0
    all_requests = [r for _, _, requests, _ in cycles for r in requests]
    asked_p = Counter(r["host"] for r in page_requests(all_requests) if P_PAGE.match(r["path"]))
    assert max(asked_p.values()) <= PATTERN_CAP


@pytest.mark.web
def test_the_seen_set_keeps_known_urls_from_being_fetched_again(capped):
    """Cycle 2's pages link back to pages cycle 1 fetched (the crawl DB holds them, not due):
    the partition's seen-set says so, and the server sees each page once over both cycles."""
    web, store, cycles = capped
    all_requests = [r for _, _, requests, _ in cycles for r in requests]
    asked = Counter((r["host"], r["path"]) for r in page_requests(all_requests))
    assert max(asked.values()) == 1, [k for k, n in asked.items() if n > 1]
    assert cycles[1][1]["discover/known"] > 0
    assert not web.requested_urls(all_requests) & web.must_not_request()
    assert_polite(all_requests)
    seen_dir = store.segment_dir(cycles[1][0]) / seg.SEEN
    parts = seg.partitions_of(store, cycles[1][0])
    # each partition's seen-set and pattern counts, and the segment's known-hosts filter
    assert sorted(p.name for p in seen_dir.iterdir()) == sorted(
        [f"part-{p:05d}.{ext}" for p in parts for ext in ("bloom", "parquet")] + ["hosts.bloom"])


# --- a crash mid-partition, then the resumed run ------------------------------------------
@pytest.mark.web
def test_a_resumed_partition_does_not_fetch_again_what_it_committed(tmp_path):
    with TestWeb(hosts=HOSTS, pages=20, page_bytes=2000, special=False, max_seconds=120) as web:
        store = Store(tmp_path / "data")
        config = discovery_config(web, follow_outlinks_depth=3, follow_outlinks_per_host=6)
        config.fetch.processes = 1
        config.generate.partitions = 1
        inject(store, config, write_seeds(tmp_path / "seeds.txt", [web.url(f"h{i}") for i in range(HOSTS)]))
        segment = generate(store, config).segment
        task = FetchTask(store.uri, segment, 0, config)
        listed = fetchlist_urls(store, segment)
        done = threading.Event()

        def stop_once_a_discovered_page_is_committed():
            """SIGTERM's path (commit what was fetched, leave the rest), mid-partition."""
            folder = store.segment_dir(segment) / "fetched"
            while not done.wait(0.2):
                files = sorted(folder.glob("part-*.parquet")) if folder.exists() else []
                urls = {u for f in files for u in pq.read_table(f, columns=["url"])["url"].to_pylist()}
                if urls - listed:
                    request_stop()
                    return

        watcher = threading.Thread(target=stop_once_a_discovered_page_is_committed, daemon=True)
        watcher.start()
        try:
            first = fetch_partition(task)
        finally:
            done.set()
            watcher.join()
            clear_stop()
        assert first.get("fetch/interrupted") == 1
        committed = set(results(store, segment))
        assert committed - listed, "nothing discovered before the stop"
        second = fetch_partition(task)
        assert not second.get("fetch/interrupted")
        requests = web.requests()
    asked = Counter((r["host"], r["path"]) for r in page_requests(requests))
    assert max(asked.values()) == 1, [k for k, n in asked.items() if n > 1]
    assert second["fetch/resumed_skipped"] == len(committed)
    assert len(results(store, segment)) == len(page_requests(requests))
    assert_polite(requests)


# --- the early end: time limit, throughput floor ------------------------------------------
@pytest.mark.web
def test_urls_a_stopped_partition_did_not_reach_are_due_at_the_next_generate(tmp_path):
    with TestWeb(hosts=2, pages=12, page_bytes=2000, special=False, max_seconds=120) as web:
        store = Store(tmp_path / "data")
        config = fast_config(web)
        config.fetch.follow_outlinks_depth = 0
        slow = [web.url("h0", f"/p/{k}.html") for k in range(10)]
        inject(store, config, write_seeds(tmp_path / "seeds.txt", slow + [web.url("h1")]))
        config.fetch.max_duration_s = 2.5
        first, counters = run_cycle(store, config)
        fetched = set(results(store, first))
        back = set(slow) - fetched
        assert counters["fetch/time_limit_stop"] >= 1 and counters["fetch/handed_back"] == len(back) >= 5
        db = crawldb_rows(store)
        assert all(db[u]["status"] == "unfetched" and db[u]["last_fetched"] is None for u in back)
        # Cycle 2: those (and the first cycle's new outlinks), now cut by the throughput floor
        # (a page a second per host is far under 50 pages/s).
        config.fetch.max_duration_s = 0
        config.fetch.throughput_min_pages_s = 50.0
        config.fetch.throughput_window_s = 1.0
        config.fetch.throughput_after_s = 1.0
        second = generate(store, config).segment
        listed_second = fetchlist_urls(store, second)
        assert back <= listed_second
        counters = fetch_segment(store, config, second).counters
        update_segment(store, config, second)
        not_reached = listed_second - set(results(store, second))
        assert counters["fetch/throughput_stop"] >= 1  # summed over the partitions
        assert counters["fetch/handed_back"] == len(not_reached) > 0
        third = generate(store, config).segment
        assert not_reached <= fetchlist_urls(store, third)
        requests = web.requests()
    asked = Counter((r["host"], r["path"]) for r in page_requests(requests))
    assert max(asked.values()) == 1, [k for k, n in asked.items() if n > 1]
    assert not {urlsplit(u).path for u in not_reached if url_host(u) == "h0.web.test"} & \
        {path for host, path in asked if host == "h0.web.test"}
    assert_polite(requests)


# --- fast: the pieces -----------------------------------------------------------------------
def test_the_python_pattern_hash_is_the_crawl_dbs():
    urls = ["http://h/cal/2024/05?view=day&sid=9f8e7d6c5b4a", "http://a.test/p/12.html", "http://x.test/é?a=1&b=&c",
            "http://d.test/deadbeefcafe/x"]
    con = duckdb.connect()
    for url in urls:
        sql = con.execute(f"SELECT {pattern_hash_sql('u')} FROM (SELECT ? AS u)", [url]).fetchall()[0][0]
        assert sql == url_pattern_hash(url), url


def test_a_bloom_filter_survives_bytes():
    bloom = BloomFilter(1000, 0.01)
    bloom.add_new([f"http://a.test/{i}" for i in range(500)])
    again = BloomFilter.from_bytes(bloom.to_bytes())
    assert again.contains_many([f"http://a.test/{i}" for i in range(500)]).all()
    assert again.count == bloom.count
    with pytest.raises(ValueError):
        BloomFilter.from_bytes(bloom.to_bytes()[:-3])


def test_a_host_is_owned_by_the_partition_the_assignment_names(store, tmp_path):
    """Named hosts by their row, every other host by its hash group's row."""
    from cycles.tables import schema
    from cycles.tables.assign import assignment_table

    seg_dir = store.path("segments", "s1")
    groups = [1, 0, 0, 1, 1]
    store.write_table(seg.assignment_file(seg_dir), assignment_table({"a.test": 1, "b.test": 0}, groups),
                      schema.ASSIGNMENT)
    inline = InlineFetches(store, Config(), seg_dir, 0)
    inline.partitions = 2
    inline.own_hosts = {"b.test"}
    assert inline.owns("b.test") and not inline.owns("a.test")
    new = [h for h in (f"n{i}.test" for i in range(20))]
    assert [inline.owns(h) for h in new] == [groups[host_hash(h) % 5] == 0 for h in new]
    assert inline.claim("http://b.test/x") and not inline.claim("http://b.test/x")


def test_an_assignment_of_an_older_generate_is_still_read(store, tmp_path):
    """One row per host (before the groups): listed hosts by their row, others by host_hash % partitions."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    seg_dir = store.path("segments", "s1")
    path = seg.assignment_file(seg_dir)
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({"host": ["a.test", "b.test"], "partition": pa.array([1, 0], pa.int32())}), path)
    inline = InlineFetches(store, Config(), seg_dir, 0)
    inline.partitions = 2
    assert inline.owns("b.test") and not inline.owns("a.test")
    new = [h for h in (f"n{i}.test" for i in range(20))]
    assert [inline.owns(h) for h in new] == [host_hash(h) % 2 == 0 for h in new]


def test_offer_takes_new_urls_once_and_leaves_known_nofollow_and_other_hosts(store):
    discovery, slot, stats = offer_setup(store, follow_outlinks_depth=2, follow_outlinks_per_host=10)
    item = FetchItem("http://a.test/", "a.test", host_hash("a.test"), 1.0, 0)
    links = [link("http://a.test/new"), link("HTTP://A.TEST:80/new#frag"), link("http://a.test/known"),
             link("http://a.test/nf", nofollow=True), link("http://b.test/x"), link("http://a.test/"),
             link("http://a.test/p/3"), link("http://a.test/p/4")]
    assert discovery.offer(item, links, {"a.test": slot}.get) == [slot]
    queued = [q.url for q in slot.queue]
    # One of the two spellings of /new; /p/3 fits the pattern cap (2 known + 1), /p/4 does not.
    assert queued == ["http://a.test/new", "http://a.test/p/3"]
    assert [q.hop for q in slot.queue] == [1, 1] and [q.depth for q in slot.queue] == [1, 1]
    assert stats["discover/known"] == 1 and stats["discover/trap_pattern_cap"] == 1
    assert links[0].get("inline") and not links[2].get("inline")
    # A later page linking to them again: nothing more.
    assert discovery.offer(item, [link("http://a.test/new")], {"a.test": slot}.get) == []


def test_offer_stops_at_the_depth_and_the_host_budget(store):
    discovery, slot, stats = offer_setup(store, follow_outlinks_depth=1, follow_outlinks_per_host=2)
    deep = FetchItem("http://a.test/x", "a.test", host_hash("a.test"), 0.25, 3, hop=1)
    assert discovery.offer(deep, [link("http://a.test/deeper")], {"a.test": slot}.get) == []
    item = FetchItem("http://a.test/", "a.test", host_hash("a.test"), 1.0, 0)
    discovery.offer(item, [link(f"http://a.test/n{i}") for i in range(5)], {"a.test": slot}.get)
    assert len(slot.queue) == 2 and stats["discover/host_budget"] == 3


def test_recent_links_answer_as_the_considered_filter(monkeypatch):
    """The exact set in front of the considered-links filter gives the filter's answers
    (repeats inside a page, across pages, and after the set is forgotten when full)."""
    import random

    from cycles.fetch import discovery as discovery_module
    from cycles.fetch.discovery import Discovery

    monkeypatch.setattr(discovery_module, "RECENT_LINKS_MAX", 50)
    rng = random.Random(7)
    pool = [f"http://h{n % 7}.test/p/{n}.html" for n in range(400)]
    ours = Discovery(None, Config(), None, 0, None, Counter())
    ours.considered = BloomFilter(100, 0.01)  # small: false positives happen too
    plain = BloomFilter(100, 0.01)
    cleared = 0
    for _ in range(300):
        batch = [rng.choice(pool[:rng.randrange(1, 400)]) for _ in range(rng.randrange(0, 12))]
        before = len(ours.recent_links)
        assert ours._first_considered(batch) == plain.add_new(batch).tolist()
        cleared += len(ours.recent_links) < before
        assert len(ours.recent_links) <= 50 + 12
    assert cleared > 0
    assert ours.considered._array.tobytes() == plain._array.tobytes()
