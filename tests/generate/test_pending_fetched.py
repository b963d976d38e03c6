"""A URL fetched by a segment not updated yet is neither listed again nor fetched inline again.

``crawl run`` generates segment k+1 when k's fetch ends, before k is updated, while the
update of k-1 has just added k-1's discoveries to the crawl DB as new, due URLs. A page
that k fetched by discovery inside the fetch (in no fetch list) was then listed by k+1 and
fetched twice; and k+1's seen-set, made from the crawl DB alone, let its discovery fetch
again what k had fetched inline (bench_crawl: 39 of 5,364 requests). Generate now leases the
fetched rows of segments not updated (cycles/tables/leases.py) and adds them to the seen-set
(cycles/tables/assign.py ``write_seen_set``). Fast tier: segments written by hand."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.storage.bloom import BloomFilter
from cycles.config import Config
from cycles.generate.generate import generate
from cycles.generate.mode import RunMode
from cycles.commands.inject import inject
from cycles.storage.store import Store
from tests.conftest import write_seeds


def fetchlist(store: Store, segment: str) -> list[str]:
    return [u for f in seg.files(store, segment, seg.FETCHLIST) for u in store.read_table(f)["url"].to_pylist()]


def fetched_by_discovery(store: Store, segment: str, listed: list[str], inline: list[str]) -> None:
    """What a fetch of ``segment`` commits: its listed URLs and those discovery fetched."""
    seg.write_marker(store, seg.Fetching(segment))
    rows = [{"url": u, "host": "a.test", "outcome": "ok"} for u in listed + inline]
    store.write_table(seg.segment_dir(store, segment) / seg.FETCHED / "part-00000-c000001.parquet",
                      pa.Table.from_pylist(rows, schema=schema.FETCHED), schema.FETCHED)


def test_a_url_fetched_inline_is_not_listed_nor_fetched_inline_by_the_next_segment(store, tmp_path):
    config = Config()
    config.generate.partitions = 1
    inject(store, config, write_seeds(tmp_path / "seeds.txt", ["http://a.test/1", "http://a.test/2"]))
    first = generate(store, config, top_n=1)
    listed = fetchlist(store, first.segment)
    # Segment 1 fetched its URL and, by discovery, /9 and /8 (which the crawl DB does not hold).
    fetched_by_discovery(store, first.segment, listed, ["http://a.test/9", "http://a.test/8"])
    seg.write_marker(store, seg.Fetched(first.segment))
    # The update of an earlier segment adds /9 as a new URL, due now (a link found there).
    inject(store, config, write_seeds(tmp_path / "more.txt", ["http://a.test/9"]))
    second = generate(store, config, top_n=100, mode=RunMode(exclude_hosts_in_flight=True))
    assert sorted(fetchlist(store, second.segment)) == sorted({"http://a.test/1", "http://a.test/2"} - set(listed))
    folder = seg.segment_dir(store, second.segment)
    seen = BloomFilter.from_bytes(store.read_bytes(seg.seen_bloom_file(folder, 0)))
    assert all(u in seen for u in ["http://a.test/1", "http://a.test/2", "http://a.test/8", "http://a.test/9"])
    # The trap caps count each URL once: the crawl DB's three and /8.
    counts = store.read_table(seg.seen_counts_file(folder, 0))
    assert pc.sum(counts.filter(pc.equal(counts["host"], "a.test"))["urls"]).as_py() == 4


def test_once_updated_its_fetched_rows_no_longer_count(store, tmp_path):
    config = Config()
    config.generate.partitions = 1
    inject(store, config, write_seeds(tmp_path / "seeds.txt", ["http://a.test/1", "http://a.test/2"]))
    first = generate(store, config, top_n=1)
    fetched_by_discovery(store, first.segment, fetchlist(store, first.segment), ["http://a.test/8"])
    seg.write_marker(store, seg.Fetched(first.segment))
    seg.write_marker(store, seg.Updated(first.segment))  # (by hand: the crawl DB is not changed)
    second = generate(store, config, top_n=100)
    seen = BloomFilter.from_bytes(store.read_bytes(seg.seen_bloom_file(seg.segment_dir(store, second.segment), 0)))
    assert "http://a.test/8" not in seen


def write_leftover(store: Store, segment: str, partition: int, urls: list[str]) -> None:
    from cycles.urls import host_hash

    rows = [{"url": u, "host": "a.test", "host_hash": host_hash("a.test"), "score": 0.5, "depth": 1} for u in urls]
    store.write_table(seg.leftover_file(seg.segment_dir(store, segment), partition),
                      pa.Table.from_pylist(rows, schema=schema.LEFTOVER), schema.LEFTOVER)


def test_what_a_fetch_did_not_reach_is_listed_before_its_update_and_a_damaged_file_is_skipped(store, tmp_path):
    """crawl run at a crawl's start (cycles/commands/run.py next_segment): nothing is due before the
    seeds' segment is updated, but its discovery queued pages it did not reach."""
    config = Config()
    config.generate.partitions = 1
    inject(store, config, write_seeds(tmp_path / "seeds.txt", ["http://a.test/1"]))
    first = generate(store, config)
    fetched_by_discovery(store, first.segment, ["http://a.test/1"], ["http://a.test/2"])
    write_leftover(store, first.segment, 0, ["http://a.test/5", "http://a.test/6", "http://a.test/2"])
    folder = seg.segment_dir(store, first.segment)
    (folder / seg.LEFTOVER / "part-00001.parquet").write_bytes(b"PAR1 not parquet")  # a damaged one
    seg.write_marker(store, seg.Fetched(first.segment))
    assert generate(store, config, mode=RunMode(exclude_hosts_in_flight=True)).segment is None  # nothing due
    second = generate(store, config, mode=RunMode(exclude_hosts_in_flight=True, leftovers=True))
    # /2 was fetched (leased by its fetched row), /1 is leased by the fetch list.
    assert sorted(fetchlist(store, second.segment)) == ["http://a.test/5", "http://a.test/6"]
    # Leased by that fetch list from now on, also once the update adds them as rows (the
    # second segment fetched, nothing reached: its host is no longer in flight).
    seg.write_marker(store, seg.Fetching(second.segment))
    seg.write_marker(store, seg.Fetched(second.segment))
    inject(store, config, write_seeds(tmp_path / "more.txt", ["http://a.test/5", "http://a.test/6"]))
    assert generate(store, config, mode=RunMode(exclude_hosts_in_flight=True, leftovers=True)).segment is None
