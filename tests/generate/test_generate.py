"""generate: due URLs, best first, capped per host and in total, leased, partitioned by host."""

from __future__ import annotations

import datetime as dt

import pyarrow.parquet as pq
import pytest

from cycles.config import Config
from cycles.tables.crawldb import current_bucket_files
from cycles.tables.leases import live_lease_files
from cycles.commands.status import crawl_status
from cycles.errors import StageError, StoreError
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.storage.store import utcnow


@pytest.fixture
def config() -> Config:
    config = Config()
    config.db.buckets = 3
    config.generate.partitions = 4
    return config


def seed(store, config, tmp_path, hosts=6, per_host=5):
    urls = [f"http://host{h}.example/p{p}" for h in range(hosts) for p in range(per_host)]
    path = tmp_path / "seeds.txt"
    path.write_text("\n".join(urls) + "\n")
    inject(store, config, path)
    return urls


def fetchlist(store, segment):
    return pq.read_table(store.segment_dir(segment) / "fetchlist").to_pylist()


def test_generate_caps_per_host_and_in_total(store, config, tmp_path):
    seed(store, config, tmp_path)
    config.generate.max_urls_per_host = 2
    result = generate(store, config, top_n=9)
    rows = fetchlist(store, result.segment)
    assert len(rows) == result.urls == 9
    per_host = {}
    for row in rows:
        per_host[row["host"]] = per_host.get(row["host"], 0) + 1
    assert max(per_host.values()) == 2


def partition_of(store, config, segment):
    """The segment's "whose is this host" (cycles/tables/assign.py Assignment)."""
    from cycles.tables.assign import Assignment

    return Assignment.read(store, store.segment_dir(segment), config, config.generate.partitions).partition_of


def fetchlist_partitions(store, segment, partitions) -> dict[str, int]:
    """host → the partition whose fetch list holds it; fails on a host in two."""
    folder = store.segment_dir(segment) / "fetchlist"
    assert sorted(p.name for p in folder.iterdir()) == [f"part-{i:05d}.parquet" for i in range(partitions)]
    seen: dict[str, int] = {}
    for part in range(partitions):
        for host in pq.read_table(folder / f"part-{part:05d}.parquet")["host"].to_pylist():
            assert seen.setdefault(host, part) == part
    return seen


@pytest.mark.parametrize("partition_by", ["host", "domain"])
@pytest.mark.parametrize("top_keys", [10_000, 2])
def test_each_host_in_exactly_one_partition_as_the_assignment_says(store, config, tmp_path, partition_by, top_keys):
    """Every host in one fetch list, the one the assignment names — whether its key is placed
    by name or (top_keys = 2) by its hash group; with partition_by = domain, a domain's hosts
    in one partition; and a host in no fetch list has one owner too."""
    urls = [f"http://{sub}.site{s}.com/p{p}" for s in range(6) for sub in ("www", "blog") for p in range(2)]
    (tmp_path / "seeds.txt").write_text("\n".join(urls) + "\n")
    inject(store, config, tmp_path / "seeds.txt")
    config.generate.partition_by = partition_by
    config.generate.assign_top_keys = top_keys
    config.generate.assign_groups = 64
    segment = generate(store, config).segment
    listed = fetchlist_partitions(store, segment, 4)
    owner = partition_of(store, config, segment)
    assert len(listed) == 12 and all(owner(host) == part for host, part in listed.items())
    if partition_by == "domain":
        assert all(listed[f"www.site{s}.com"] == listed[f"blog.site{s}.com"] for s in range(6))
        assert owner("new.site3.com") == listed["www.site3.com"]
    # The fetch workers' question (cycles/fetch/inline.py), a listed host or not: exactly one
    # partition says yes, the one of its fetch list; a host in none by its key's group.
    from cycles.fetch.inline import InlineFetches

    workers = []
    for part in range(4):
        workers.append(InlineFetches(store, config, store.segment_dir(segment), part))
        workers[-1].partitions = 4
    for host in [*listed, "nowhere.test", "new.site3.com", "x.y.fresh.org"]:
        owners = [part for part, worker in enumerate(workers) if worker.owns(host)]
        assert owners == [listed.get(host, owner(host))]


def test_equal_hosts_are_spread_evenly(store, config, tmp_path):
    seed(store, config, tmp_path, hosts=12, per_host=2)
    listed = fetchlist_partitions(store, generate(store, config).segment, 4)
    # 12 equal hosts over 4 partitions: 3 each (balanced by expected time, not by hash).
    assert sorted(list(listed.values()).count(p) for p in range(4)) == [3, 3, 3, 3]


def test_a_big_host_gets_a_partition_of_its_own(store, config, tmp_path):
    """Longest expected fetch time first: the host with 30 URLs (30 s at a 1 s delay) is alone;
    the eight 3-URL hosts share the other three partitions."""
    urls = [f"http://big.example/p{p}" for p in range(30)]
    urls += [f"http://small{h}.example/p{p}" for h in range(8) for p in range(3)]
    path = tmp_path / "seeds.txt"
    path.write_text("\n".join(urls) + "\n")
    inject(store, config, path)
    segment = generate(store, config).segment
    folder = store.segment_dir(segment) / "fetchlist"
    hosts = [set(pq.read_table(folder / f"part-{p:05d}.parquet")["host"].to_pylist()) for p in range(4)]
    assert {"big.example"} in hosts
    assert sorted(len(h) for h in hosts) == [1, 2, 3, 3]


def test_balancing_weighs_each_host_by_its_delay():
    """A host with a 10 s Crawl-delay and 3 URLs (30 s) outweighs one with 20 URLs at 1 s."""
    from cycles.tables.assign import assign_hosts

    urls = {"slow": 3, "many": 20, "a": 5, "b": 5}
    delays = {"slow": 10.0, "many": 1.0, "a": 1.0, "b": 1.0}
    assignment = assign_hosts(urls, delays, 2)
    assert assignment["slow"] != assignment["many"]
    assert {h for h, p in assignment.items() if p == assignment["slow"]} == {"slow"}
    assert assign_hosts(urls, delays, 2) == assignment  # deterministic


def test_leased_urls_are_not_generated_again_until_the_lease_expires(store, config, tmp_path):
    urls = seed(store, config, tmp_path, hosts=2, per_host=2)
    first = generate(store, config)
    assert first.urls == len(urls)
    assert generate(store, config).segment is None
    later = utcnow() + dt.timedelta(seconds=config.generate.lease_s + 1)
    again = generate(store, config, now=later)
    assert again.urls == len(urls)


def test_lease_is_the_fetch_list_and_generate_leaves_the_crawl_db_alone(store, config, tmp_path):
    seed(store, config, tmp_path, hosts=1, per_host=3)
    version = store.manifest().version
    segment = generate(store, config).segment
    assert store.manifest().version == version  # no rewrite of the crawl DB to lease
    assert sorted(map(str, live_lease_files(store, utcnow()))) == sorted(
        map(str, store.list(store.segment_dir(segment) / "fetchlist", "part-*.parquet")))
    assert live_lease_files(store, utcnow() + dt.timedelta(seconds=config.generate.lease_s + 1)) == []
    report = crawl_status(store, config)
    assert report["leased"] == 3 and report["due"] == 0  # leased URLs are not counted as due


def test_an_updated_segment_releases_its_lease(store, config, tmp_path):
    from cycles.update.update import update_segment
    from tests.support.transitions import fetch_result

    urls = seed(store, config, tmp_path, hosts=1, per_host=2)
    segment = generate(store, config).segment
    fetch_result(store, segment, [])  # fetched, no result: the URLs stay due
    update_segment(store, config, segment)
    assert live_lease_files(store, utcnow()) == []
    assert generate(store, config).urls == len(urls)
def test_best_score_first(store, config, tmp_path):
    from cycles.tables.crawldb import replace_crawldb

    seed(store, config, tmp_path, hosts=3, per_host=3)
    with store.lock():  # give host1/p2 the best score, host2/p0 the second best
        replace_crawldb(store, config, lambda con, old, b: f"""SELECT * REPLACE (
            CASE url WHEN 'http://host1.example/p2' THEN 9 WHEN 'http://host2.example/p0' THEN 5
                     ELSE score END::FLOAT AS score) FROM {old}""", who="test")
    rows = fetchlist(store, generate(store, config, top_n=2).segment)
    assert {r["url"] for r in rows} == {"http://host1.example/p2", "http://host2.example/p0"}


def test_nothing_due_makes_no_segment(store, config, tmp_path):
    seed(store, config, tmp_path, hosts=1, per_host=1)
    generate(store, config)
    result = generate(store, config)
    assert result.segment is None and "due" in result.reason
    assert len(store.segments()) == 1


def test_generate_without_crawl_db_says_what_to_do(store, config):
    with pytest.raises(StageError, match="crawl inject"):
        generate(store, config)


def test_corrupt_bucket_file_is_named(store, config, tmp_path):
    seed(store, config, tmp_path, hosts=2, per_host=1)
    _, files = current_bucket_files(store)
    files[1].write_bytes(b"not parquet at all")
    with pytest.raises(StoreError, match=files[1].name):
        generate(store, config)


def test_missing_bucket_file_is_named(store, config, tmp_path):
    seed(store, config, tmp_path, hosts=2, per_host=1)
    _, files = current_bucket_files(store)
    files[0].unlink()
    with pytest.raises(StoreError, match="missing"):
        generate(store, config)


def test_overdue_urls_outrank_equally_scored_urls_due_now(store, config, tmp_path):
    from cycles.tables.crawldb import replace_crawldb

    seed(store, config, tmp_path, hosts=2, per_host=2)
    with store.lock():  # host0/p1 has been due for four intervals
        replace_crawldb(store, config, lambda con, old, b: f"""SELECT * REPLACE (
            CASE url WHEN 'http://host0.example/p1' THEN now() - to_seconds(4 * fetch_interval_s)
                     ELSE now() - INTERVAL 1 MINUTE END AS next_fetch) FROM {old}""", who="test")
    rows = fetchlist(store, generate(store, config, top_n=1).segment)
    assert [r["url"] for r in rows] == ["http://host0.example/p1"]


@pytest.mark.parametrize("fan_in", [8, 2])
def test_known_hosts_filter_merged_from_bucket_parts_is_the_filter_of_all_hosts(store, config, tmp_path, fan_in,
                                                                               monkeypatch):
    """Each bucket task writes its hosts' part of the known-hosts filter (issue #11: the
    coordinator no longer reads every host of the crawl DB); ORed, the parts are bit for bit
    the one filter of every host, sized for all of them, plus the hosts pending segments claimed."""
    from cycles.tables import segment as seg
    from cycles.storage.bloom import BloomFilter
    from cycles.tables.newhosts import KNOWN_HOSTS_FP, claim_body, read_known_hosts

    from cycles.generate import generate as gen

    monkeypatch.setattr(gen, "KNOWN_HOSTS_FAN_IN", fan_in)  # 2: the 3 parts merged in a tree of two levels
    urls = seed(store, config, tmp_path, hosts=1500, per_host=1)  # above MIN_KNOWN_HOSTS_CAPACITY
    first = generate(store, config, top_n=10).segment
    claim = seg.newhost_claim_file(store.segment_dir(first), "claimed.example")
    store.write_bytes(claim, claim_body(first, 0, "claimed.example"))
    segment = generate(store, config, top_n=10).segment
    hosts = sorted({u.split("/")[2] for u in urls})
    one = BloomFilter(len(hosts) + 1, KNOWN_HOSTS_FP)
    one.add_new(hosts)
    one.add_new(["claimed.example"])
    known = read_known_hosts(store, store.segment_dir(segment))
    assert (known.bits, known.hashes) == (one.bits, one.hashes)
    assert known._array.tobytes() == one._array.tobytes()
    assert all(known.contains_many(hosts + ["claimed.example"]))
    assert not store.exists(store.segment_dir(segment) / seg.CANDIDATES)  # the parts went with the candidates


def test_a_bucket_without_rows_gives_what_the_duckdb_scan_gives(store, config, tmp_path, monkeypatch):
    """select_bucket_due's shortcut for a bucket without rows (``empty_bucket_due``, no DuckDB)
    returns and writes what the due scan in DuckDB does for it: no candidates, in a file of
    the scan's columns (CANDIDATES), and an empty hosts part; count_chosen_hosts then counts
    nothing without DuckDB either. Positive control: a bucket with rows takes the scan, with
    those same columns."""
    import dataclasses

    from cycles.generate import generate as gen
    from cycles.tables.crawldb import holds_no_rows

    config.db.buckets = 8
    assert gen.known_hosts_wanted(config)  # each bucket task writes its hosts' part too
    seed(store, config, tmp_path, hosts=1)  # one host: seven of eight buckets are empty
    compared, real = [], gen.select_bucket_due

    def both_ways(task):
        done = real(task)
        empty = holds_no_rows(store, [task.file.base, *task.file.deltas])
        other = dataclasses.replace(task, out=task.out.with_name("scanned.parquet"),
                                    hosts_out=task.hosts_out and task.hosts_out.with_name("scanned-hosts.parquet"))
        scanned = gen.scan_bucket_due(store, other, gen.verify_due_pages(store, task.file, task.now))
        assert scanned == done
        assert pq.read_schema(other.out) == pq.read_schema(task.out) == gen.CANDIDATES
        assert (pq.read_metadata(task.out).num_rows == 0) == empty
        assert pq.read_table(task.hosts_out).equals(pq.read_table(other.hosts_out))
        compared.append(empty)
        return done
    monkeypatch.setattr(gen, "select_bucket_due", both_ways)
    segment = generate(store, config).segment
    assert sorted(compared) == [False] + [True] * 7
    assert len(fetchlist(store, segment)) == 5


def test_a_partition_without_hosts_gives_what_the_duckdb_joins_give(store, config, tmp_path, monkeypatch):
    """write_partition's shortcut for a partition without hosts (``empty_partition``: no DuckDB
    joins) writes the fetch list and seen-set files, and counts, that ``fill_partition`` writes
    for it: the same store generated twice at one time, the second without the shortcut."""
    import json
    import shutil

    from cycles.generate import generate as gen
    from cycles.storage.store import Store
    from cycles.tables import segment as seg

    seed(store, config, tmp_path, hosts=2)  # two hosts, four partitions: two without hosts
    shutil.copytree(store.root, tmp_path / "copy")
    now = utcnow()
    taken = []
    real_empty = gen.empty_partition
    monkeypatch.setattr(gen, "empty_partition", lambda *a: taken.append(a[2].partition) or real_empty(*a))
    first = generate(store, config, now=now)
    monkeypatch.setattr(gen, "empty_partition", gen.fill_partition)
    second = generate(Store(tmp_path / "copy"), config, now=now)
    assert len(taken) == 2 and first.urls == second.urls == 10
    for part in range(config.generate.partitions):
        ours, theirs = (store.segment_dir(first.segment), Store(tmp_path / "copy").segment_dir(second.segment))
        for path in (seg.fetchlist_file, seg.seen_counts_file):
            assert pq.read_table(path(ours, part)).equals(pq.read_table(path(theirs, part)), check_metadata=True)
        assert seg.seen_bloom_file(ours, part).read_bytes() == seg.seen_bloom_file(theirs, part).read_bytes()
    counted = [{k: v for k, v in json.loads(seg.stats_file(folder, "generate").read_text()).items()
                if k.startswith("generate/") and k not in ("generate/seconds", "generate/urls_per_s")}
               for folder in (ours, theirs)]
    assert counted[0] == counted[1] and counted[0]["generate/urls"] == 10
