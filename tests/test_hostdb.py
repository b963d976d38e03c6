"""Tests of the bucketed host DB (cycles/tables/hostdb.py: merge_hostdb writes it, load_host_state
reads it): the layout merge_hostdb writes, a merge bucket by bucket equal to a merge of
everything at once, reads that open only the hosts' bucket files, and host DBs of another
layout — one ``hosts.parquet`` written before the split, or another bucket count — read as
they are and rewritten in the crawl DB's layout by the next merge."""

from __future__ import annotations

import datetime as dt
import random

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cycles.tables.segment import write_stage_marker
from cycles.tables import schema
from cycles.config import Config
from cycles.tables import hostdb
from cycles.tables.hostdb import MERGE_SQL, hostdb_files, load_host_state, merge_hostdb
from cycles.commands.status import open_views
from cycles.storage.store import Manifest, Store, new_id, utcnow
from cycles.urls import host_hash
from tests.examples import examples

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def random_rows(rng: random.Random, hosts: list[str], stamps: iter) -> list[dict]:
    """One host row each, with times from ``stamps`` (distinct: no ties to break)."""
    rows = []
    for host in hosts:
        error = rng.random() < 0.3
        row = {name: None for name in schema.HOSTS.names}
        row.update(host=host, last_request_end=T0 + dt.timedelta(seconds=next(stamps)),
                   robots_fetched_at=T0 + dt.timedelta(seconds=next(stamps)),
                   robots_status=None if error else rng.choice([200, 404]),
                   robots_body=None if error else f"User-agent: *\nDisallow: /{rng.random()}\n".encode(),
                   robots_etag=None if error else f'"{rng.random()}"',
                   crawl_delay_s=rng.choice([1.0, 2.0, 5.0]),
                   robots_errors_since=T0 if error else None)
        if rng.random() < 0.7:
            row.update(robots_good_status=200, robots_good_body=b"User-agent: *\n",
                       robots_good_fetched_at=T0 + dt.timedelta(seconds=next(stamps)))
        rows.append(row)
    return rows


def write_segment(store: Store, rows: list[dict], partitions: int = 3) -> str:
    """A fetched segment whose hosts/ output holds ``rows`` (split over ``partitions`` files)."""
    segment = new_id()
    folder = store.segment_dir(segment, must_exist=False) / "hosts"
    for p in range(partitions):
        part = rows[p::partitions]
        store.write_table(folder / f"part-{p:05d}.parquet", pa.Table.from_pylist(part, schema=schema.HOSTS),
                          schema.HOSTS)
    write_stage_marker(store, segment, "generated", {"segment": segment})
    write_stage_marker(store, segment, "fetched", {"segment": segment})
    return segment


def mark_updated(store: Store) -> None:
    """Every segment updated: the host DB is then the only source load_host_state reads."""
    for segment in store.segments():
        write_stage_marker(store, segment, "updated", {"segment": segment})


_reference_con = None


def merge_all_at_once(rows: list[dict]) -> dict[str, dict]:
    """The reference: the merge as it ran before the split, over one table of every row."""
    global _reference_con
    if _reference_con is None:  # one connection for the test module: a new one costs ~40 ms
        _reference_con = duckdb.connect()
        _reference_con.execute("SET TimeZone = 'UTC'")
    _reference_con.register("everything", pa.Table.from_pylist(rows, schema=schema.HOSTS))
    merged = _reference_con.sql(MERGE_SQL.format(source="SELECT * FROM everything")).to_arrow_table().cast(schema.HOSTS)
    _reference_con.unregister("everything")
    return {r["host"]: r for r in merged.to_pylist()}


def check_layout(store: Store, buckets: int) -> list[str]:
    """Every host in file host_hash % buckets, sorted by host; returns all hosts."""
    manifest = store.manifest("hostdb")
    files = hostdb_files(store, manifest)
    assert manifest.buckets == buckets and len(files) == buckets
    assert [f.name for f in files] == [f"bucket-{b:05d}.parquet" for b in range(buckets)]
    assert sorted(f.name for f in files[0].parent.iterdir() if f.name != "_COMPLETE") == [f.name for f in files]
    everyone = []
    for bucket, path in enumerate(files):
        hosts = pq.read_table(path, columns=["host"])["host"].to_pylist()
        assert hosts == sorted(hosts) and all(host_hash(h) % buckets == bucket for h in hosts), path
        everyone += hosts
    assert len(everyone) == len(set(everyone))
    return everyone


def test_merge_bucket_by_bucket_equals_one_merge_of_everything(store):
    rng = random.Random(5)
    stamps = iter(rng.sample(range(10**7), 10**5))
    hosts = [f"h{i}.test" for i in range(300)]
    cycles = [random_rows(rng, hosts[:200], stamps), random_rows(rng, hosts[100:], stamps),
              random_rows(rng, rng.sample(hosts, 150), stamps)]
    config = Config()
    config.db.buckets = 5
    for rows in cycles:
        assert merge_hostdb(store, config, write_segment(store, rows)) > 0
    mark_updated(store)
    assert sorted(check_layout(store, 5)) == sorted(hosts)
    expected = merge_all_at_once([r for rows in cycles for r in rows])
    assert load_host_state(store, set(hosts)) == expected
    # A newer network error keeps no older status or body (arg_max_null), in every bucket.
    assert any(r["robots_status"] is None and r["robots_body"] is None and r["robots_good_body"]
               for r in expected.values())


def test_the_bucket_count_follows_the_crawl_db(store):
    config = Config()
    config.db.buckets = 4
    rows = random_rows(random.Random(1), [f"h{i}.test" for i in range(50)], iter(range(1, 10**6)))
    merge_hostdb(store, config, write_segment(store, rows))
    check_layout(store, 4)
    crawl = store.manifest("hostdb")
    store.path("crawldb", crawl.version).mkdir(parents=True)
    store.install("crawldb", Manifest(version=crawl.version, buckets=7, schema_version=schema.SCHEMA_VERSION,
                                      written_at=utcnow().isoformat(), written_by="test"), keep=2)
    merge_hostdb(store, config, write_segment(store, rows[:5]))
    assert len(check_layout(store, 7)) == 50


def test_an_empty_segment_keeps_every_bucket_file(store):
    config = Config()
    config.db.buckets = 3
    merge_hostdb(store, config, write_segment(store, [], partitions=1))
    assert check_layout(store, 3) == []
    mark_updated(store)
    assert load_host_state(store, {"nobody.test"}) == {}
    # Again over the empty version: each bucket's old file holds no row (merge_host_bucket
    # writes it without DuckDB), and the next rows merge over those files.
    first = store.manifest("hostdb").version
    merge_hostdb(store, config, write_segment(store, [], partitions=1))
    assert store.manifest("hostdb").version != first and check_layout(store, 3) == []
    rows = random_rows(random.Random(2), ["h1.test", "h2.test"], iter(range(1, 10**6)))
    merge_hostdb(store, config, write_segment(store, rows, partitions=1))
    assert sorted(check_layout(store, 3)) == ["h1.test", "h2.test"]


def test_load_host_state_reads_only_the_buckets_of_its_hosts(store, monkeypatch):
    config = Config()
    config.db.buckets = 8
    hosts = [f"h{i}.test" for i in range(200)]
    rows = random_rows(random.Random(2), hosts, iter(range(1, 10**6)))
    merge_hostdb(store, config, write_segment(store, rows))
    mark_updated(store)
    opened = []
    original = hostdb.read_host_rows

    def spy(store_, path, wanted):
        opened.append((path.name, len(wanted)))
        return original(store_, path, wanted)

    monkeypatch.setattr(hostdb, "read_host_rows", spy)
    state = load_host_state(store, {"h7.test"})
    assert opened == [(f"bucket-{host_hash('h7.test') % 8:05d}.parquet", 1)]
    assert state["h7.test"]["robots_body"] == rows[7]["robots_body"]
    opened.clear()
    some = {"h1.test", "h2.test", "h3.test", "unknown.test"}
    state = load_host_state(store, some)
    assert sorted(name for name, _ in opened) == sorted({f"bucket-{host_hash(h) % 8:05d}.parquet" for h in some})
    assert sum(n for _, n in opened) == len(some) and set(state) == some - {"unknown.test"}


def write_legacy_hostdb(store: Store, rows: list[dict]) -> None:
    """A host DB as written before the split: one hosts.parquet, buckets=1, and (older
    still) without the robots.txt validator columns and not_before."""
    old_schema = pa.schema([f for f in schema.HOSTS if f.name not in ("robots_etag", "robots_last_modified", "not_before")])
    version, folder = store.new_version_dir("hostdb")
    table = pa.Table.from_pylist([{k: v for k, v in r.items() if k in old_schema.names} for r in rows],
                                 schema=old_schema).sort_by("host")
    pq.write_table(table, folder / "hosts.parquet")
    store.install("hostdb", Manifest(version=version, buckets=1, schema_version=schema.SCHEMA_VERSION,
                                     written_at=utcnow().isoformat(), written_by="update"), keep=2)


def test_a_host_db_written_before_the_split_is_read_and_then_rebucketed(store):
    rng = random.Random(3)
    stamps = iter(rng.sample(range(10**7), 10**5))
    hosts = [f"h{i}.test" for i in range(120)]
    old = random_rows(rng, hosts, stamps)
    for row in old:
        row.update(robots_etag=None, robots_last_modified=None)
    write_legacy_hostdb(store, old)
    assert load_host_state(store, {"h5.test", "h77.test"}) == {r["host"]: r for r in old if r["host"] in ("h5.test", "h77.test")}
    con = open_views(store, Config())
    assert con.sql("SELECT count(*), count(robots_body) FROM hosts").fetchall()[0][0] == 120

    config = Config()
    config.db.buckets = 4
    new = random_rows(rng, hosts[60:] + ["new.test"], stamps)
    merge_hostdb(store, config, write_segment(store, new))
    mark_updated(store)
    assert sorted(check_layout(store, 4)) == sorted(hosts + ["new.test"])
    assert load_host_state(store, set(hosts) | {"new.test"}) == merge_all_at_once(old + new)
    con = open_views(store, Config())
    assert con.sql("SELECT count(*) FROM hosts").fetchall()[0][0] == 121


def test_a_host_db_with_another_bucket_count_is_read_as_it_is(store):
    """After ``crawl rebucket`` the host DB keeps its count until the next update."""
    config = Config()
    config.db.buckets = 6
    hosts = [f"h{i}.test" for i in range(90)]
    rows = random_rows(random.Random(4), hosts, iter(range(1, 10**6)))
    merge_hostdb(store, config, write_segment(store, rows))
    mark_updated(store)
    config.db.buckets = 4  # as if the crawl DB (no manifest here) had been rebucketed
    assert load_host_state(store, set(hosts)) == {r["host"]: r for r in rows}
    assert open_views(store, config).sql("SELECT count(*) FROM hosts").fetchall()[0][0] == 90
    merge_hostdb(store, config, write_segment(store, rows[:3]))
    assert sorted(check_layout(store, 4)) == sorted(hosts)


def test_a_failed_merge_leaves_the_old_version(store, fail_second_write):
    config = Config()
    config.db.buckets = 3
    rows = random_rows(random.Random(6), [f"h{i}.test" for i in range(30)], iter(range(1, 10**6)))
    merge_hostdb(store, config, write_segment(store, rows))
    before = store.manifest("hostdb")
    fail_second_write()
    with pytest.raises(OSError, match="disk full"):
        merge_hostdb(store, config, write_segment(store, rows[:10]))
    assert store.manifest("hostdb") == before
    assert [p.name for p in store.path("hostdb").iterdir() if p.name.startswith("v")] == [before.version]
    assert not list(store.scratch_dir().glob("hostdb-*"))


def test_a_read_skips_row_groups_without_its_hosts_and_keeps_only_their_rows(store, monkeypatch):
    """A bucket file sorted by host, in row groups of 10 hosts: asking for two hosts decodes
    only the row groups whose host range holds them."""
    rows = random_rows(random.Random(7), [f"h{i:03d}.test" for i in range(100)], iter(range(1, 10**6)))
    path = store.path("hosts.parquet")
    store.path().mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema.HOSTS), path, row_group_size=10)
    asked = []
    original = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        asked.append(kwargs.get("row_groups"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    table = hostdb.read_host_rows(store, path, ["h015.test", "h093.test", "zzz.test"])
    assert asked == [[1, 9]]
    assert table.to_pylist() == [rows[15], rows[93]]
    assert hostdb.read_host_rows(store, path, ["a.test"]).num_rows == 0 and asked[-1] == [1, 9]


# --- One merge rule (hostdb.MERGE_SQL's table), whichever path merges ---------------------
# Few hosts and few distinct times: ties on every time column are common, so the rule's tie
# breaking is exercised, not only its ordering.
_STAMPS = [None] + [T0 + dt.timedelta(seconds=s) for s in (0, 1, 2)]


@st.composite
def host_row(draw) -> dict:
    row = {name: None for name in schema.HOSTS.names}
    row.update(
        host=draw(st.sampled_from(["a.test", "b.test", "c.test"])),
        last_request_end=draw(st.sampled_from(_STAMPS)),
        not_before=draw(st.sampled_from(_STAMPS)),
        robots_status=draw(st.sampled_from([None, 200, 404, 503])),
        robots_fetched_at=draw(st.sampled_from(_STAMPS)),
        robots_body=draw(st.sampled_from([None, b"", b"User-agent: *\nDisallow: /x\n"])),
        robots_etag=draw(st.sampled_from([None, '"1"', '"2"'])),
        robots_last_modified=draw(st.sampled_from([None, "Mon, 01 Jan 2024 00:00:00 GMT"])),
        crawl_delay_s=draw(st.sampled_from([None, 1.0, 2.0, 5.0])),
        robots_good_status=draw(st.sampled_from([None, 200, 404])),
        robots_good_fetched_at=draw(st.sampled_from(_STAMPS)),
        robots_good_body=draw(st.sampled_from([None, b"User-agent: *\n", b"# empty\n"])),
        robots_errors_since=draw(st.sampled_from(_STAMPS)))
    return row


def _table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema.HOSTS)


@settings(max_examples=examples(50), deadline=None)
@given(rows=st.lists(host_row(), max_size=12), cuts=st.lists(st.integers(0, 12), max_size=3), seed=st.integers(0, 99))
def test_both_merges_follow_one_rule_in_any_order_and_grouping(rows, cuts, seed):
    """Fetch merges host DB rows with unmerged segments' rows (merge_host_rows); update merges
    the host DB with one segment (MERGE_SQL, bucket by bucket). Both must give what one merge of
    every row gives, however the rows are grouped and ordered: else a host's state depends on
    which path read it last."""
    everything = merge_all_at_once(rows)
    shuffled = rows[:]
    random.Random(seed).shuffle(shuffled)
    bounds = sorted({0, len(rows), *(min(c, len(rows)) for c in cuts)})
    groups = [_table(shuffled[a:b]) for a, b in zip(bounds, bounds[1:])]
    assert hostdb.merge_host_rows(groups) == everything
    # A merged group fed back in (the host DB) with the rest (segments not yet updated).
    if len(groups) > 1:
        first = hostdb.merge_host_rows(groups[:1])
        assert hostdb.merge_host_rows([_table(list(first.values()))] + groups[1:]) == everything
    # The rule itself, where it names one answer: times are maxima; the robots answer is the
    # newest one's (any row with the newest robots_fetched_at, on a tie).
    for host, merged in everything.items():
        mine = [r for r in rows if r["host"] == host]
        for column in ("last_request_end", "not_before", "robots_fetched_at", "robots_good_fetched_at"):
            values = [r[column] for r in mine if r[column] is not None]
            assert merged[column] == (max(values) if values else None), column
        newest = [r for r in mine if r["robots_fetched_at"] is not None and r["robots_fetched_at"] == merged["robots_fetched_at"]]
        if newest:
            assert any(all(merged[c] == r[c] for c in hostdb.ROBOTS_LATEST) for r in newest)
        good = [r for r in mine if r["robots_good_fetched_at"] is not None
                and r["robots_good_fetched_at"] == merged["robots_good_fetched_at"]]
        if good:
            assert any(all(merged[c] == r[c] for c in hostdb.ROBOTS_GOOD) for r in good)


def merge_with_retries(store: Store, config: Config, segment: str, attempts: int) -> None:
    """merge_hostdb's steps with every route task, then every bucket task, run ``attempts``
    times (a worker lost after its task wrote: the task is run again elsewhere)."""
    update = hostdb.start_hostdb(store, config, segment, store.segment_dir(segment) / "update" / "hostdb")
    for fn, tasks in ((hostdb.route_host_file, update.routes), (hostdb.merge_host_bucket, update.tasks)):
        for _ in range(attempts):
            for task in tasks:
                fn(task)
    hostdb.install_hostdb(store, config, update)


def test_route_and_bucket_tasks_run_twice_give_the_same_host_db(tmp_path):
    """Each of merge_hostdb's tasks writes under names fixed by its inputs: run twice, the
    host DB is the same file for file; also when the old host DB is routed (another count)."""
    rng = random.Random(8)
    stamps = iter(rng.sample(range(10**7), 10**5))
    hosts = [f"h{i}.test" for i in range(120)]
    cycles = [random_rows(rng, hosts[:80], stamps), random_rows(rng, hosts[40:], stamps),
              random_rows(rng, rng.sample(hosts, 60), stamps)]
    once, twice = Store(tmp_path / "once"), Store(tmp_path / "twice")
    for i, rows in enumerate(cycles):
        config = Config()
        config.db.buckets = 3 if i < 2 else 5  # the third merge routes the old files too
        for store, attempts in ((once, 1), (twice, 2)):
            merge_with_retries(store, config, write_segment(store, rows), attempts)
    for store in (once, twice):
        mark_updated(store)
        assert sorted(check_layout(store, 5)) == sorted(hosts)
        assert not list(store.path("segments").rglob("bucket-*"))  # the routed rows are gone
    tables = [[pq.read_table(f) for f in hostdb_files(s, s.manifest("hostdb"))] for s in (once, twice)]
    assert all(a.equals(b) for a, b in zip(*tables))
    assert load_host_state(twice, set(hosts)) == merge_all_at_once([r for rows in cycles for r in rows])
