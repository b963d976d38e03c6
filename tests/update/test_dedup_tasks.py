"""cycles/update/dedup.py: the per-bucket scan tasks find what one scan of the whole crawl DB finds.

update runs dedup as :func:`dedup_scan` tasks, each over a group of buckets (issue #11: no
process scans the whole crawl DB); :func:`find_duplicates` scans the whole crawl DB in one process. On a
crawl DB of several buckets whose exact copies, near copies and mirror pairs cross buckets,
both give the same marks, low-priority hosts and mirrors, and the feed's stored hashes.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter

import pyarrow as pa
import pytest

from cycles.tables import schema
from cycles.config import Config
from cycles.tables.crawldb import connect, crawldb_source_sql
from cycles.errors import StoreError
from cycles.executor import InProcess
from cycles.tables.hostdb import host_buckets
from cycles.storage.store import Store
from cycles.update import dedup
from cycles.update.dedup import find_duplicates, find_segment_duplicates, scan_groups
from cycles.urls import host_hashes
from tests.support.corruption import flip_a_bit_in_a_data_page

BUCKETS = 4
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def near(minhash: int, rng: random.Random, bits: int) -> int:
    for bit in rng.sample(range(64), bits):
        minhash ^= 1 << bit
    return minhash


def crawl_db_rows(rng: random.Random) -> list[dict]:
    """Stored pages over 24 hosts: shared texts across hosts (exact copies), fingerprints a
    few bits apart (near copies), earlier copies of host o0 on host m0 (a mirror pair)."""
    rows = []
    base = [rng.getrandbits(64) for _ in range(12)]
    for h in range(24):
        for p in range(12):
            text = (h * 7 + p) % 40  # 40 texts over 288 pages: exact copies across hosts
            minhash = base[text % 12] if text < 12 else near(base[text % 12], rng, 1 + text % 5)
            rows.append({"url": f"http://h{h}.example/p{p}", "host": f"h{h}.example", "status": "fetched",
                         "content_hash": f"{text:032x}", "minhash": minhash, "score": 1.0 / (1 + p % 3),
                         "first_seen": T0 + dt.timedelta(minutes=h + p), "duplicate_of": None})
    for p in range(8):  # m0 copied o0 in earlier cycles
        rows.append({"url": f"http://o0.example/p{p}", "host": "o0.example", "status": "fetched",
                     "content_hash": f"{100 + p:032x}", "minhash": rng.getrandbits(64), "score": 1.0,
                     "first_seen": T0, "duplicate_of": None})
        rows.append({"url": f"http://m0.example/p{p}", "host": "m0.example", "status": "duplicate",
                     "content_hash": f"{100 + p:032x}", "minhash": rng.getrandbits(64), "score": 0.5,
                     "first_seen": T0, "duplicate_of": f"http://o0.example/p{p}"})
    return rows


def write_crawl_db(store: Store, rows: list[dict]) -> list:
    full = [{**{name: None for name in schema.CRAWLDB.names}, "pattern_hash": 0, "next_fetch": T0,
             "fetch_interval_s": 86400, "retries": 0, "fetch_count": 1, "change_count": 0, "depth": 0, **row}
            for row in rows]
    table = pa.Table.from_pylist(full, schema=schema.CRAWLDB)
    table = table.set_column(table.schema.get_field_index("host_hash"), "host_hash", host_hashes(table["host"]))
    buckets = host_buckets(table["host"], BUCKETS)
    files = []
    for bucket in range(BUCKETS):
        path = store.path("crawldb", "v1") / f"bucket-{bucket:05d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        store.write_table(path, table.filter(pa.array(buckets == bucket)).sort_by([("host", "ascending"),
                                                                                    ("url", "ascending")]),
                          schema.CRAWLDB)
        files.append(path)
    return files


def segment_pages(rng: random.Random, stored: list[dict]) -> pa.Table:
    """Pages fetched now: refetches (some changed, some now copies of other hosts' texts or
    near them) and pages the crawl DB does not hold; m0 fetched again, copying o0."""
    pages = []
    for row in rng.sample([r for r in stored if r["host"].startswith("h")], 60):
        kind = rng.randrange(4)
        text = rng.randrange(60)
        other = rng.choice(stored)  # near a page of any bucket, or only a new text
        minhash = near(other["minhash"], rng, rng.randrange(4)) if kind < 2 else rng.getrandbits(64)
        pages.append({"url": row["url"], "host": row["host"], "content_hash": f"{text:032x}",
                      "minhash": minhash, "text_chars": 100 if kind == 3 else 1000})
    original = {r["url"]: r["minhash"] for r in stored if r["host"] == "o0.example"}
    pages += [{"url": f"http://m0.example/p{p}", "host": "m0.example", "content_hash": f"{100 + p:032x}",
               "minhash": original[f"http://o0.example/p{p}"], "text_chars": 1000} for p in range(3)]
    pages += [{"url": f"http://new{i}.example/", "host": f"new{i}.example", "content_hash": f"{i:032x}",
               "minhash": rng.getrandbits(64), "text_chars": 1000} for i in range(3)]
    return pa.Table.from_pylist(pages, schema=pa.schema([("url", pa.string()), ("host", pa.string()),
                                                          ("content_hash", pa.string()), ("minhash", pa.uint64()),
                                                          ("text_chars", pa.int64())]))


def found(result) -> tuple:
    return (sorted(result.marks.to_pylist(), key=lambda r: (r["url"], r["kind"])), result.low_priority_hosts,
            result.mirrors)


def test_scan_groups_cover_each_bucket_once_and_about_the_segment_each():
    assert scan_groups([100] * 8, 10) == [[b] for b in range(8)]  # at most one task per bucket
    assert scan_groups([100] * 8, 400) == [[0, 2, 4, 6], [1, 3, 5, 7]]  # ~ the segment's rows each
    assert scan_groups([100] * 8, 10_000) == [list(range(8))]
    assert scan_groups([0] * 3, 0) == [[0, 1, 2]]


@pytest.mark.parametrize("seed,groups", [(1, None), (2, None), (3, 2)])
def test_the_bucket_tasks_find_what_one_scan_of_the_crawl_db_finds(tmp_path, seed, groups, monkeypatch):
    if groups:  # buckets grouped: a task scans several
        monkeypatch.setattr(dedup, "scan_groups", lambda rows, pages: [list(range(g, len(rows), groups))
                                                                       for g in range(groups)])
    rng = random.Random(seed)
    store, config = Store(tmp_path / "data"), Config()
    config.update.minhash_min_chars = 300
    stored = crawl_db_rows(rng)
    files = write_crawl_db(store, stored)
    pages = segment_pages(rng, stored)
    con = connect(store, config)
    whole, per_bucket = Counter(), Counter()
    one_scan = find_duplicates(con, crawldb_source_sql(files), pages, config, whole)
    inputs = tmp_path / "data" / "segments" / "s1" / "update"
    tasks = find_segment_duplicates(store, config, con, InProcess(), files, schema.SCHEMA_VERSION, inputs,
                                    pages, per_bucket)
    assert found(tasks) == found(one_scan)
    assert per_bucket == whole
    kinds = Counter(r["kind"] for r in tasks.marks.to_pylist())
    assert kinds["duplicate"] > 5 and kinds["near_duplicate"] > 0  # the copies cross buckets
    assert tasks.mirrors == {"m0.example": "o0.example"}
    # The feed's stored hashes: every page the crawl DB holds, with its stored hash.
    db_hash = {r["url"]: r["content_hash"] for r in stored}
    assert dict(zip(tasks.known_hashes["url"].to_pylist(), tasks.known_hashes["content_hash"].to_pylist())) == {
        url: db_hash[url] for url in pages["url"].to_pylist() if url in db_hash}


def test_a_corrupt_bucket_stops_the_scan_naming_the_file(tmp_path):
    rng = random.Random(3)
    store, config = Store(tmp_path / "data"), Config()
    stored = crawl_db_rows(rng)
    files = write_crawl_db(store, stored)
    flip_a_bit_in_a_data_page(files[2])  # DuckDB would read the changed values without an error
    with pytest.raises(StoreError, match=files[2].name):
        find_segment_duplicates(store, config, connect(store, config), InProcess(), files, schema.SCHEMA_VERSION,
                                tmp_path / "data" / "segments" / "s1" / "update", segment_pages(rng, stored),
                                Counter())


def test_update_with_a_corrupt_bucket_commits_nothing(store, tmp_path):
    """The verification is in update's first round of tasks (dedup_scan): a flipped bit
    stops update naming the file before the host DB, the link DB or the crawl DB is swapped."""
    from cycles.generate.generate import generate
    from cycles.commands.inject import inject
    from cycles.update.update import update_segment
    from cycles.tables.crawldb import current_bucket_files
    from tests.support.corruption import flip_a_bit
    from tests.support.transitions import fetch_result

    config = Config()
    config.db.buckets = 3
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(f"http://h{h}.example/p\n" for h in range(9)))
    inject(store, config, seeds)
    segment = generate(store, config).segment
    fetch_result(store, segment, [{"url": f"http://h{h}.example/p", "host": f"h{h}.example", "outcome": "ok",
                                   "http_status": 200, "fetched_at": T0, "content_hash": "1" * 32, "minhash": 5}
                                  for h in range(9)],
                 [{"from_url": "http://h0.example/p", "url": "http://h1.example/q", "anchor": "", "nofollow": False,
                   "depth": 1}])
    manifests = {table: store.manifest(table) for table in ("crawldb", "hostdb", "linkdb")}
    _, files = current_bucket_files(store)
    flip_a_bit(files[1])
    with pytest.raises(StoreError, match=files[1].name):
        update_segment(store, config, segment)
    assert {table: store.manifest(table) for table in manifests} == manifests
