"""Generate's seen-sets from the seen indexes compaction keeps beside each base
(cycles/tables/seenindex.py) are those of the crawl DB rows: the same Bloom filter bit for
bit, the same counts, the same fetch lists, with deltas over the indexed bases and with a
segment fetched but not updated. Each comparison runs generate twice at the same clock on
two copies of one store: one with its indexes, one without (the row scan, as before)."""

from __future__ import annotations

import datetime as dt
import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cycles.commands.compact import compact, due_buckets
from cycles.commands.inject import inject
from cycles.generate.generate import generate
from cycles.generate.mode import RunMode
from cycles.storage.bloom import BloomFilter
from cycles.storage.store import Store
from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.tables.crawldb import current_buckets, read_crawldb
from cycles.tables.seenindex import SUFFIX, has_index, held, index_path
from tests.support.corruption import flip_a_bit_in_a_data_page
from tests.support.incremental import HOSTS, NOW, SEEDS, config_of, fetch_output, one_cycle, result

PARTITIONS = 2
LATER = NOW + dt.timedelta(days=120)
INLINE = f"http://{HOSTS[1]}/found-inline"


def config():
    config = config_of(True)
    config.generate.partitions = PARTITIONS
    return config


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """A store crawled two cycles, compacted (every base gets its index), crawled a third
    (deltas over the indexed bases), and a fourth segment generated and fetched, not updated."""
    tmp = tmp_path_factory.mktemp("seenindex")
    seeds = tmp / "seeds.txt"
    seeds.write_text("\n".join(SEEDS) + "\n")
    store = Store(tmp / "store")
    inject(store, config(), seeds)
    for round_ in range(2):
        one_cycle(store, config(), NOW + dt.timedelta(days=round_ * 30), round_)
    manifest, buckets = current_buckets(store)
    assert not any(has_index(store, b.base) for b in buckets)
    assert compact(store, config(), everything=True, links=False).buckets == manifest.buckets
    one_cycle(store, config(), NOW + dt.timedelta(days=60), 2)
    now = LATER - dt.timedelta(minutes=30)  # its lease still holds at LATER
    pending = generate(store, config(), now=now, top_n=10).segment
    fetch_output(store, pending, now + dt.timedelta(minutes=1), 3)
    # and, by discovery inside that fetch, a URL the crawl DB does not hold
    store.write_table(store.segment_dir(pending) / "fetched" / "part-00001-c000001.parquet",
                      pa.Table.from_pylist([result(INLINE, "ok", now)], schema=schema.FETCHED), schema.FETCHED)
    return tmp, store


def without_indexes(src, dst) -> Store:
    shutil.copytree(src, dst)
    for path in dst.rglob(f"*{SUFFIX}"):
        path.unlink()
    return Store(dst)


def seen_outputs(store: Store, segment: str) -> tuple[list, list, list, dict]:
    folder = store.segment_dir(segment)
    blooms = [store.read_bytes(seg.seen_bloom_file(folder, p)) for p in range(PARTITIONS)]
    blooms.append(store.read_bytes(folder / "seen" / "hosts.bloom"))  # the known hosts: bases' from their indexes
    counts = [store.read_table(seg.seen_counts_file(folder, p)).to_pylist() for p in range(PARTITIONS)]
    lists = [store.read_table(seg.fetchlist_file(folder, p)).to_pylist() for p in range(PARTITIONS)]
    stats = json.loads(seg.stats_file(folder, "generate").read_text())
    return blooms, counts, lists, stats


def generate_both(tmp, store, name: str, mode: RunMode | None = None):
    results = []
    for copy in (Store(shutil.copytree(store.root, tmp / f"{name}-idx")), without_indexes(store.root, tmp / f"{name}-rows")):
        segment = generate(copy, config(), now=LATER, top_n=1000, mode=mode or RunMode()).segment
        results.append(seen_outputs(copy, segment))
    return results


def test_compaction_writes_an_index_beside_each_base(indexed):
    tmp, store = indexed
    manifest, buckets = current_buckets(store)
    assert any(b.deltas for b in buckets)  # the third cycle's deltas, over indexed bases
    for bucket in buckets:
        assert has_index(store, bucket.base)
        index = pq.read_table(index_path(bucket.base))
        assert index.num_rows == pq.read_metadata(bucket.base).num_rows
        hosts = index.column("host").to_pylist()
        assert hosts == sorted(hosts)
    # crawl compact --all gives a base without an index its own (a store compacted before).
    copy = without_indexes(store.root, tmp / "no-index")
    manifest, buckets = current_buckets(copy)
    assert due_buckets(copy, config(), manifest, buckets, everything=True) == list(range(manifest.buckets))
    compact(copy, config(), everything=True, links=False)
    assert all(has_index(copy, b.base) for b in current_buckets(copy)[1])


def test_indexed_seen_sets_are_the_row_scans_bit_for_bit(indexed):
    tmp, store = indexed
    (blooms, counts, lists, stats), (r_blooms, r_counts, r_lists, r_stats) = generate_both(tmp, store, "plain")
    assert stats["generate/seen_index_buckets"] > 0 and "generate/seen_index_fallback" not in stats
    assert r_stats["generate/seen_index_fallback"] == stats["generate/seen_index_buckets"]
    assert "generate/seen_index_buckets" not in r_stats
    assert lists == r_lists and sum(map(len, lists)) > 0
    assert counts == r_counts and sum(map(len, counts)) > 0
    assert blooms == r_blooms
    # The pending segment's URL fetched by discovery is known in both: only its rows hold it.
    assert sum(INLINE in BloomFilter.from_bytes(b) for b in blooms[:PARTITIONS]) == 1
    assert not any(row["url"] == INLINE for row in read_crawldb(store, ["url"]).to_pylist())


def test_with_the_pending_segment_left_out_of_the_lease_the_sets_still_agree(indexed):
    tmp, store = indexed
    mode = RunMode(exclude_hosts_in_flight=True)
    (blooms, counts, lists, stats), (r_blooms, r_counts, r_lists, _) = generate_both(tmp, store, "flight", mode)
    assert stats["generate/seen_index_buckets"] > 0
    assert (blooms, counts, lists) == (r_blooms, r_counts, r_lists)


def test_a_damaged_or_missing_index_falls_back_to_its_buckets_rows(indexed):
    tmp, store = indexed
    (i_blooms, i_counts, i_lists, i_stats), _ = generate_both(tmp, store, "ref")
    for name, spoil in (("damaged", lambda path: flip_a_bit_in_a_data_page(path, column="url_h1", row_group=0)),
                        ("missing", lambda path: path.unlink())):
        copy = Store(shutil.copytree(store.root, tmp / name))
        _, buckets = current_buckets(copy)
        spoil(index_path(buckets[0].base))  # one bucket's: the others' indexes are still read
        segment = generate(copy, config(), now=LATER, top_n=1000).segment
        blooms, counts, lists, stats = seen_outputs(copy, segment)
        assert (blooms, counts, lists) == (i_blooms, i_counts, i_lists)
        assert stats["generate/seen_index_fallback"] >= 1 and stats["generate/seen_index_buckets"] >= 1
        assert (stats["generate/seen_index_fallback"] + stats["generate/seen_index_buckets"]
                == i_stats["generate/seen_index_buckets"])


def test_a_buckets_hosts_from_its_index_are_those_of_its_rows(indexed, monkeypatch):
    import cycles.generate.generate as gen
    from cycles.tables.crawldb import connect, read_bucket_rows

    tmp, store = indexed
    manifest, buckets = current_buckets(store)
    used = []
    real = gen.index_hosts
    monkeypatch.setattr(gen, "index_hosts", lambda *a: used.append(a[1]) or real(*a))
    for number, bucket in enumerate(buckets):
        task = gen.GenerateBucketTask(store.uri, config(), number, bucket, manifest.schema_version,
                                      gen.segment_inputs(store, LATER, RunMode(), config()), LATER, 10,
                                      tmp / "c.parquet", hosts_out=tmp / f"hosts-{number}.parquet")
        con = connect(store, config())
        count = gen.write_bucket_hosts(store, con, task)
        con.close()
        written = pq.read_table(task.hosts_out).column("host").to_pylist()
        merged = set(read_bucket_rows(store, bucket, manifest.schema_version, ["host"]).column("host").to_pylist())
        assert sorted(written) == sorted(merged) and count == len(written)
        assert real(store, bucket.base) is not None  # positive control: the index was there to read
    assert used == [b.base for b in buckets]


def test_held_compares_both_halves():
    h1 = np.array([5, 9, 9, 1], np.uint64)
    h2 = np.array([50, 90, 91, 10], np.uint64)
    by1 = np.array([9, 1, 7], np.uint64)
    by2 = np.array([91, 11, 70], np.uint64)
    assert held(h1, h2, by1, by2).tolist() == [False, False, True, False]
    assert held(h1[:2], h2[:2], by1, by2).tolist() == [False, False]
    assert held(h1[[0, 1]], np.array([50, 90], np.uint64), np.array([9], np.uint64),
                np.array([90], np.uint64)).tolist() == [False, True]
    bloom = BloomFilter(100, 0.01)
    bloom.add_all(["http://a/1"])
    assert "http://a/1" in bloom
