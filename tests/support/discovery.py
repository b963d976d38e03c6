"""Discovery inside the fetch on its own: one partition, a seen-set, links offered by hand."""

from __future__ import annotations

from collections import Counter

from cycles.tables import segment as seg
from cycles.storage.bloom import BloomFilter
from cycles.config import Config
from cycles.tables.crawldb import url_pattern_hash
from cycles.fetch.inline import InlineFetches


def offer_setup(store, **fetch):
    """A Discovery over one partition holding a.test, with a.test/known in the seen-set and
    two /p/N URLs of a.test counted for the pattern cap."""
    import pyarrow as pa

    from cycles.tables import schema
    from cycles.fetch.discovery import Discovery
    from cycles.fetch.frontier import HostSlot

    config = Config()
    for key, value in fetch.items():
        setattr(config.fetch, key, value)
    config.update.max_urls_per_pattern = 3
    seg_dir = store.path("segments", "s1")
    seen = BloomFilter(1000, 0.01)
    seen.add_new(["http://a.test/known", "http://a.test/p/1", "http://a.test/p/2"])
    store.write_bytes(seg.seen_bloom_file(seg_dir, 0), seen.to_bytes())
    store.write_table(seg.seen_counts_file(seg_dir, 0), pa.table(
        {"host": ["a.test", "a.test"], "pattern_hash": pa.array([url_pattern_hash("http://a.test/known"),
                                                                  url_pattern_hash("http://a.test/p/1")], pa.uint64()),
         "urls": pa.array([1, 2], pa.int64())}), schema.SEEN_COUNTS)
    inline = InlineFetches(store, config, seg_dir, 0)
    inline.own_hosts = {"a.test"}
    inline.listed_urls = {"http://a.test/"}
    stats = Counter()
    discovery = Discovery(store, config, seg_dir, 0, inline, stats)
    discovery.load(100, [])
    slot = HostSlot("a.test")
    return discovery, slot, stats


def link(url, nofollow=False):
    return {"from_url": "http://a.test/", "url": url, "anchor": "", "nofollow": nofollow, "depth": 1}
