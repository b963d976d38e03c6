"""Update through the bases' key indexes (cycles/tables/keyindex.py, cycles/update/probe.py)
gives what update without them gives: two copies of one compacted store, one with its
bases' key indexes and one without (the fallback, as bases written before them), crawled
alike at the same instants, hold the same rows column for column and count the same —
with the trap caps biting, exact copies marked, a learned variant parameter, sitemap hints,
links to URLs only a delta holds, and a delta on top of each base. The positive control: the indexed copy's bucket tasks did use
the indexes (``update/key_index_buckets``), the other's did not."""

from __future__ import annotations

import datetime as dt
import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash

from cycles.commands.compact import compact
from cycles.commands.inject import inject
from cycles.generate.generate import generate
from cycles.storage.store import Store
from cycles.tables import schema
from cycles.tables.crawldb import current_buckets
from cycles.tables.dedup_state import read_state, write_state
from cycles.tables.keyindex import (
    KEY_INDEX,
    has_key_index,
    index_path,
    read_key_index,
    sorted_count,
    sorted_member,
    url_fingerprints,
)
from cycles.tables.segment import stats_file, write_stage_marker
from cycles.update.update import update_segment
from tests.support.incremental import HOSTS, NOW, SEEDS, config_of, result, rows


def config_with_caps():
    config = config_of(True)
    config.update.max_urls_per_pattern = 6  # the /trap/N links of one page pass it
    config.update.max_urls_per_host_total = 14
    return config


def fetch_output(store: Store, segment: str, at: dt.datetime, round_: int) -> None:
    """A fetch of ``segment``: mixed outcomes, pairs of pages with the same text (exact
    copies), and links to new URLs, to seeds (in a base), to the last round's new URLs (in
    a delta) and to a trap's numbered pages (one pattern)."""
    folder = store.segment_dir(segment)
    listed = sorted(pq.read_table(folder / "fetchlist").column("url").to_pylist())
    outcomes = ["ok", "ok", "not_modified", "server_error", "ok", "redirect", "ok"]
    fetched, links = [], []
    for i, url in enumerate(listed):
        outcome = outcomes[(i + round_) % len(outcomes)]
        more = {"http_status": 200, "content_hash": f"{round_}{i // 2:031d}"} if outcome == "ok" else {}
        if outcome == "redirect":
            more = {"http_status": 301, "redirect_to": url + "/moved"}
        fetched.append(result(url, outcome, at - dt.timedelta(seconds=i), **more))
        host = HOSTS[(i + 1) % len(HOSTS)]
        targets = [f"http://{host}/new{round_}-{i}", SEEDS[(i * 7) % len(SEEDS)],
                   f"http://{host}/new{max(0, round_ - 1)}-{i}"]
        targets += [f"http://{HOSTS[i % 2]}/trap/{round_}/{k}" for k in range(4)]
        targets += [f"http://{HOSTS[2]}/v{i % 3}?v={round_}", f"http://{HOSTS[2]}/v{i % 3}"]  # a learned variant
        links += [{"from_url": url, "url": t, "anchor": "", "nofollow": False, "depth": 1} for t in targets]
    store.write_table(folder / "fetched" / "part-00000-c000001.parquet",
                      pa.Table.from_pylist(fetched, schema=schema.FETCHED), schema.FETCHED)
    store.write_table(folder / "outlinks" / "part-00000-c000001.parquet",
                      pa.Table.from_pylist(links, schema=schema.OUTLINKS), schema.OUTLINKS)
    hints = [{"sitemap_url": f"http://{HOSTS[3]}/sitemap.xml", "url": url, "lastmod": at - dt.timedelta(hours=1),
              "changefreq": "daily", "priority": 0.9}
             for url in [SEEDS[(round_ * 5 + k) % len(SEEDS)] for k in range(6)] + [f"http://{HOSTS[3]}/map{round_}"]]
    store.write_table(folder / "sitemaps" / "part-00000-c000001.parquet",  # named as the chunk it came with
                      pa.Table.from_pylist(hints, schema=schema.SITEMAP_URLS), schema.SITEMAP_URLS)
    write_stage_marker(store, segment, "fetched", {"segment": segment})


def cycle(store: Store, round_: int) -> dict:
    config = config_with_caps()
    now = NOW + dt.timedelta(days=round_ * 30)
    segment = generate(store, config, now=now, top_n=30).segment
    assert segment
    fetch_output(store, segment, now + dt.timedelta(minutes=1), round_)
    update_segment(store, config, segment, now=now + dt.timedelta(minutes=2))
    return json.loads(store.read_bytes(stats_file(store.segment_dir(segment), "update")))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """One store crawled a cycle and compacted (bases with key indexes), copied; the copy's
    indexes removed; then both crawled three more cycles alike."""
    tmp = tmp_path_factory.mktemp("keyindex")
    seeds = tmp / "seeds.txt"
    seeds.write_text("\n".join(SEEDS) + "\n")
    indexed = Store(tmp / "indexed")
    inject(indexed, config_with_caps(), seeds)
    cycle(indexed, 0)
    state = read_state(indexed)  # "v" learned on one host: its URLs with it are set aside (docs/dedup.md)
    state["params"].append([HOSTS[2], "v", 10, 0, True])
    write_state(indexed, state)
    assert compact(indexed, config_with_caps(), everything=True).buckets == 3
    _, buckets = current_buckets(indexed)
    assert all(has_key_index(indexed, b.base) for b in buckets)
    shutil.copytree(tmp / "indexed", tmp / "plain")
    plain = Store(tmp / "plain")
    for bucket in current_buckets(plain)[1]:
        index_path(bucket.base).unlink()
    stats = {"indexed": [], "plain": []}
    for round_ in (1, 2, 3):
        for name, store in (("indexed", indexed), ("plain", plain)):
            stats[name].append(cycle(store, round_))
    return indexed, plain, stats


def test_update_with_the_key_indexes_gives_the_rows_and_counts_of_update_without(pair):
    indexed, plain, stats = pair
    # Positive control: every bucket task of the indexed copy used its base's index, none of the other's.
    assert all(s["update/key_index_buckets"] == 3 for s in stats["indexed"])
    assert all(s["update/key_index_buckets"] == 0 for s in stats["plain"])
    assert any(current_buckets(indexed)[1][b].deltas for b in range(3))  # deltas on the bases
    for with_index, without in zip(stats["indexed"], stats["plain"]):
        def counts(stats: dict) -> dict:  # the timings left out
            return {k: v for k, v in stats.items() if k != "update/key_index_buckets"
                    and not k.endswith(("_ms", "/ms", "_per_s", "seconds", "_s"))}
        assert counts(with_index) == counts(without)
    def total(key: str) -> int:
        return sum(s[key] for s in stats["plain"])
    # What the index answers was asked: caps bit, new and known links, exact copies marked,
    # variants set aside.
    assert min(total("trap/pattern_cap"), total("trap/host_cap"), total("outlinks/new"), total("outlinks/known"),
               total("dedup/exact"), total("dedup/variant_skipped")) > 0
    assert {f"http://{HOSTS[3]}/map{r}" for r in (1, 2, 3)} <= {r["url"] for r in rows(plain)}  # the hints merged
    assert rows(indexed) == rows(plain)


def test_a_damaged_or_foreign_index_is_not_used(pair, tmp_path):
    indexed, _, _ = pair
    _, buckets = current_buckets(indexed)
    base = buckets[0].base
    assert read_key_index(indexed, base) is not None  # the positive control
    copy = tmp_path / "damaged.parquet"
    shutil.copy(base, copy)
    other = Store(tmp_path)
    shutil.copy(index_path(base), index_path(copy))  # names another base
    assert read_key_index(other, copy) is None
    data = bytearray(index_path(base).read_bytes())
    data[len(data) // 2] ^= 0xFF
    index_path(copy).write_bytes(bytes(data))
    assert read_key_index(other, copy) is None


def test_compact_all_gives_every_base_its_index(pair, tmp_path):
    indexed, _, _ = pair
    shutil.copytree(indexed.root, tmp_path / "s")
    store = Store(tmp_path / "s")
    compact(store, config_with_caps(), everything=True)
    _, buckets = current_buckets(store)
    index_path(buckets[1].base).unlink()
    assert compact(store, config_with_caps(), everything=True).buckets == 1  # only the one without
    _, buckets = current_buckets(store)
    for bucket in buckets:
        index = read_key_index(store, bucket.base)
        urls = pq.read_table(bucket.base, columns=["url"]).column("url")
        assert index is not None and list(index.url_fp) == sorted(url_fingerprints(urls))
        assert pq.read_schema(index_path(bucket.base)).names == KEY_INDEX.names


def test_fingerprints_and_sorted_lookups():
    # XXH3-64 of the URL's UTF-8 bytes: a specified hash, the same on every machine and version.
    assert url_fingerprints(pa.array(["http://a.example/", "http://b.example/ä"])).tolist() == [
        0xD9ADADF2D37A6499, xxhash.xxh3_64_intdigest("http://b.example/ä".encode())]
    assert url_fingerprints(pa.array([], pa.string())).tolist() == []
    values = np.array([1, 3, 3, 3, 9], np.uint64)
    assert sorted_member(values, np.array([0, 3, 9, 10], np.uint64)).tolist() == [False, True, True, False]
    assert sorted_count(values, np.array([3, 4, 9], np.uint64)).tolist() == [3, 0, 1]
    assert sorted_member(np.zeros(0, np.uint64), np.array([1], np.uint64)).tolist() == [False]
