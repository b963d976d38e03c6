"""Discovery's two bounds (cycles/fetch/discovery.py): links within a host counted from where
the segment entered the host, and the chain of new-host claims counted apart. Pure unit
tests of :meth:`Discovery.offer` over a seen-set on disk (no server, fast tier)."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.storage.bloom import BloomFilter
from cycles.config import Config
from cycles.fetch.records import FetchItem
from cycles.urls import host_hash
from cycles.tables.crawldb import url_pattern_hash
from cycles.fetch.discovery import Discovery
from cycles.fetch.frontier import HostSlot
from cycles.fetch.inline import InlineFetches
from cycles.tables.newhosts import NewHosts


def setup(store, known_hosts=("a.test", "b.test"), listed=("a.test",), **fetch):
    """A Discovery of partition 0 of a one-partition segment listing ``listed``; the crawl
    DB knows ``known_hosts`` (every other host is new) and one URL, a.test/known."""
    config = Config()
    for key, value in fetch.items():
        setattr(config.fetch, key, value)
    seg_dir = store.path("segments", "s1")
    seen = BloomFilter(1000, 0.01)
    seen.add_new(["http://a.test/known"])
    store.write_bytes(seg.seen_bloom_file(seg_dir, 0), seen.to_bytes())
    store.write_table(seg.seen_counts_file(seg_dir, 0), pa.table(
        {"host": ["a.test"], "pattern_hash": pa.array([url_pattern_hash("http://a.test/known")], pa.uint64()),
         "urls": pa.array([1], pa.int64())}), schema.SEEN_COUNTS)
    inline = InlineFetches(store, config, seg_dir, 0)
    inline.own_hosts = set(listed)
    inline.listed_urls = {f"http://{h}/" for h in listed}
    stats = Counter()
    discovery = Discovery(store, config, seg_dir, 0, inline, stats)
    discovery.load(100, [])
    new_hosts = NewHosts(store, seg_dir, "s1", 0, stats)
    new_hosts.known = BloomFilter(1000, 0.001)
    new_hosts.known.add_new(list(known_hosts))
    inline.new_hosts = new_hosts
    slots: dict[str, HostSlot] = {}

    def slot_for(host, url):
        if host not in inline.own_hosts:
            return None
        return slots.setdefault(host, HostSlot(host))

    return discovery, slots, slot_for, stats


def link(url):
    return {"from_url": "", "url": url, "anchor": "", "nofollow": False, "depth": 0}


def page(url, host, depth, hop=None):
    return FetchItem(url, host, host_hash(host), 1.0 / (depth + 1), depth, hop=hop)


def test_a_claimed_host_gets_its_own_levels_however_deep_it_was_entered(store):
    discovery, slots, slot_for, stats = setup(store, follow_outlinks_depth=2)
    # a.test's page at hop 2 (the last level within a.test) links to new host n.test
    # and to a.test/deeper: the first is taken (an entry: hop 0), the second is not.
    discovery.offer(page("http://a.test/2", "a.test", 2, hop=2),
                    [link("http://n.test/"), link("http://a.test/deeper")], slot_for)
    assert [q.url for q in slots["n.test"].queue] == ["http://n.test/"]
    assert slots["n.test"].queue[0].hop == 0
    assert "a.test" not in slots
    # Within n.test: two levels from its entry, then no more.
    entry = slots["n.test"].queue.popleft()
    discovery.offer(entry, [link("http://n.test/1")], slot_for)
    level1 = slots["n.test"].queue.popleft()
    assert level1.hop == 1
    discovery.offer(level1, [link("http://n.test/2")], slot_for)
    level2 = slots["n.test"].queue.popleft()
    assert level2.hop == 2
    discovery.offer(level2, [link("http://n.test/3")], slot_for)
    assert not slots["n.test"].queue


def test_a_link_passed_over_past_the_depth_is_taken_from_a_page_nearer_the_entry(store):
    discovery, slots, slot_for, stats = setup(store, follow_outlinks_depth=1)
    discovery.offer(page("http://a.test/x", "a.test", 3, hop=1), [link("http://a.test/y")], slot_for)
    assert "a.test" not in slots
    discovery.offer(page("http://a.test/", "a.test", 0), [link("http://a.test/y")], slot_for)
    assert [q.url for q in slots["a.test"].queue] == ["http://a.test/y"]


def test_the_chain_of_new_host_claims_is_bounded(store):
    discovery, slots, slot_for, stats = setup(store, follow_new_hosts_chain=2)
    discovery.offer(page("http://a.test/", "a.test", 0), [link("http://n1.test/")], slot_for)
    n1 = slots["n1.test"].queue.popleft()
    discovery.offer(n1, [link("http://n2.test/")], slot_for)
    n2 = slots["n2.test"].queue.popleft()
    assert discovery.claim_level("n1.test") == 1 and discovery.claim_level("n2.test") == 2
    # n2.test is the second claim in a row: it claims no third host, but keeps its own links.
    discovery.offer(n2, [link("http://n3.test/"), link("http://n2.test/more")], slot_for)
    assert "n3.test" not in slots and "n3.test" not in discovery.inline.own_hosts
    assert [q.url for q in slots["n2.test"].queue] == ["http://n2.test/more"]
    assert stats["discover/new_host_chain"] == 1 and stats["discover/new_host_claimed"] == 2
    # A link back to a fetch-list host is no claim and no entry: the hop count goes on.
    discovery.offer(n2, [link("http://a.test/back")], slot_for)
    assert [(q.url, q.hop) for q in slots["a.test"].queue] == [("http://a.test/back", 1)]


def test_no_new_host_is_claimed_with_a_chain_of_zero_and_redirect_claims_end_a_chain(store):
    discovery, slots, slot_for, stats = setup(store, follow_new_hosts_chain=0)
    discovery.offer(page("http://a.test/", "a.test", 0), [link("http://n1.test/")], slot_for)
    assert not slots and stats["discover/new_host_claimed"] == 0
    discovery, slots, slot_for, stats = setup(store, follow_new_hosts_chain=3)
    assert discovery.inline.take_new_host("r.test")  # as a redirect claims its target's host
    assert discovery.claim_level("r.test") == 3
    discovery.offer(page("http://r.test/", "r.test", 1), [link("http://n1.test/"), link("http://r.test/a")], slot_for)
    assert "n1.test" not in slots and [q.url for q in slots["r.test"].queue] == ["http://r.test/a"]


def test_no_url_is_queued_twice_and_the_budget_holds_across_entries(store):
    discovery, slots, slot_for, stats = setup(store, listed=("a.test", "b.test"), follow_outlinks_per_host=3)
    links = [link(f"http://b.test/{i}") for i in range(5)] + [link("http://a.test/known")]
    discovery.offer(page("http://a.test/", "a.test", 0), links, slot_for)
    # b.test linked from a.test, then from its own page and from a.test again: one row a URL.
    discovery.offer(page("http://b.test/", "b.test", 0), [link(f"http://b.test/{i}") for i in range(5)], slot_for)
    discovery.offer(page("http://a.test/z", "a.test", 1, hop=1), [link("http://b.test/0")], slot_for)
    queued = [q.url for q in slots["b.test"].queue]
    assert queued == ["http://b.test/0", "http://b.test/1", "http://b.test/2"]
    assert len(set(queued)) == len(queued) and stats["discover/host_budget"] >= 2
    assert "a.test" not in slots and stats["discover/known"] == 1
    assert [q.hop for q in slots["b.test"].queue] == [1, 1, 1]  # fetch-list hosts: no entry


def test_past_its_depth_a_page_still_enters_a_new_host_but_not_a_fetch_list_one(store):
    discovery, slots, slot_for, stats = setup(store, listed=("a.test", "b.test"), follow_outlinks_depth=1)
    discovery.offer(page("http://a.test/x", "a.test", 1, hop=1),
                    [link("http://b.test/y"), link("http://n.test/"), link("http://a.test/z")], slot_for)
    assert set(slots) == {"n.test"} and slots["n.test"].queue[0].hop == 0
