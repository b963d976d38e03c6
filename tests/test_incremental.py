"""The crawl DB as bases and deltas (docs/incremental.md): an update writes only what its
segment changed, readers merge, ``crawl compact`` folds the deltas back into bases.

Every check compares with the whole rewrite (``db.delta_updates = false``), the way the
crawl DB was written before: two copies of one store get the same fetch output and are
updated at the same instant, so their crawl DBs must hold the same rows, column for column.
"""

from __future__ import annotations

import datetime as dt
import shutil

import pyarrow.parquet as pq
import pytest

from cycles.tables import schema
from cycles.commands.compact import compact, compaction_due
from cycles.tables.crawldb import current_buckets
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.commands.recover import recover
from cycles.errors import StoreError
from cycles.storage.store import Store
from cycles.update.update import update_segment
from tests.support.incremental import NOW, SEEDS, config_of, fetch_output, rows

@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Two copies of one injected store, crawled two cycles alike: with deltas, and whole."""
    tmp = tmp_path_factory.mktemp("incremental")
    seeds = tmp / "seeds.txt"
    seeds.write_text("\n".join(SEEDS) + "\n")
    whole = Store(tmp / "whole")
    inject(whole, config_of(False), seeds)
    shutil.copytree(tmp / "whole", tmp / "delta")
    delta = Store(tmp / "delta")
    for store, config in ((delta, config_of(True)), (whole, config_of(False))):
        for round_ in range(2):
            now = NOW + dt.timedelta(days=round_ * 30)
            segment = generate(store, config, now=now, top_n=20).segment
            fetch_output(store, segment, now + dt.timedelta(minutes=1), round_)
            update_segment(store, config, segment, now=now + dt.timedelta(minutes=2))
    return tmp, delta, whole


def test_a_delta_update_gives_the_rows_of_a_whole_rewrite(pair):
    _, delta, whole = pair
    manifest = delta.manifest()
    assert any(manifest.bucket_deltas) and not any(whole.manifest().bucket_deltas)  # both ways ran
    # Each update wrote per bucket only the rows it changed: less than the bucket, never twice a URL.
    _, buckets = current_buckets(delta)
    for bucket in buckets:
        for path in bucket.deltas:
            urls = pq.read_table(path, columns=["url"]).column("url").to_pylist()
            assert len(urls) == len(set(urls))
    written = sum(pq.read_metadata(p).num_rows for b in buckets for p in b.deltas)
    assert 0 < written < 2 * len(rows(whole))
    assert rows(delta) == rows(whole)


def test_the_views_show_one_row_per_url(pair):
    from cycles.commands.views import open_views

    _, delta, whole = pair
    con = open_views(delta, config_of(True))
    count, urls = con.sql("SELECT count(*), count(DISTINCT url) FROM crawldb").fetchall()[0]
    assert count == urls == len(rows(whole))
    fetched = con.sql("SELECT count(*) FROM crawldb WHERE status = 'fetched'").fetchall()[0][0]
    assert fetched == sum(r["status"] == "fetched" for r in rows(whole)) > 0


def test_generate_lists_the_same_urls_from_deltas(pair):
    tmp, delta, whole = pair
    later = NOW + dt.timedelta(days=90)
    lists = []
    for name, store in (("g-delta", delta), ("g-whole", whole)):
        shutil.copytree(store.root, tmp / name)
        copy = Store(tmp / name)
        segment = generate(copy, config_of(True), now=later, top_n=1000).segment
        lists.append(sorted(pq.read_table(copy.segment_dir(segment) / "fetchlist").column("url").to_pylist()))
    assert lists[0] == lists[1] and lists[0]


def test_compact_folds_the_deltas_into_bases_sorted_by_due_time(pair):
    tmp, delta, whole = pair
    shutil.copytree(delta.root, tmp / "compacted")
    store = Store(tmp / "compacted")
    config = config_of(True)
    config.db.compact_ratio = 100.0  # nothing due by size: the positive control below
    config.db.compact_max_deltas = 1000
    assert not compaction_due(store, config) and compact(store, config).buckets == 0
    config.db.compact_ratio = 0.0  # any delta is due
    config.db.compact_buckets_per_version = 2  # 3 buckets: two versions installed
    before = store.manifest()
    done = compact(store, config)
    assert done.buckets == sum(1 for d in before.bucket_deltas if d) and done.versions == 2
    manifest = store.manifest()
    assert not any(manifest.bucket_deltas) and rows(store) == rows(whole)
    # A compacted base is sorted by next_fetch: each row group's statistics bound its due
    # times, so generate skips every group whose smallest next_fetch is in the future.
    _, buckets = current_buckets(store)
    for bucket in buckets:
        meta = pq.read_metadata(bucket.base)
        column = meta.schema.to_arrow_schema().get_field_index("next_fetch")
        ranges = [(meta.row_group(g).column(column).statistics.min, meta.row_group(g).column(column).statistics.max)
                  for g in range(meta.num_row_groups)]
        assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:]))
        values = pq.read_table(bucket.base, columns=["next_fetch"]).column("next_fetch").to_pylist()
        assert values == sorted(values)
    # Nothing left to do; the folders of replaced files are pruned once no kept version names them.
    assert compact(store, config).buckets == 0
    assert not compaction_due(store, config)


def test_recover_reinstates_a_version_made_of_older_folders_files(pair):
    tmp, delta, _ = pair
    shutil.copytree(delta.root, tmp / "recovered")
    store = Store(tmp / "recovered")
    manifest = store.manifest()
    expected = rows(store)
    assert len(manifest.folders()) > 1  # bases in the inject's folder, deltas in the updates'
    (store.path("crawldb", "CURRENT")).unlink()
    results = {r.table: r for r in recover(store, tables=("crawldb",))}
    assert results["crawldb"].action == "reinstated" and store.manifest() == manifest
    assert rows(store) == expected
    # A version whose carried-over base is gone is not complete: recover passes over it (here
    # every kept version shares that base, so none is, and it says which file is missing).
    base = store.version_bucket_file("crawldb", manifest, 0)
    base.rename(base.with_name("moved-away"))
    (store.path("crawldb", "CURRENT")).unlink()
    with pytest.raises(StoreError, match=f"{manifest.version}: .*{base.name} is missing"):
        recover(store, tables=("crawldb",))


def test_a_manifest_names_bases_and_deltas_and_reads_as_before_without_them():
    from cycles.storage.store import Manifest

    plain = Manifest("v2", 2, schema.SCHEMA_VERSION, "t", "w")
    assert "bucket_deltas" not in plain.to_json() and Manifest.from_json(plain.to_json()) == plain
    assert plain.entries() == [] and plain.folders() == {"v2"} and plain.delta_names(1) == ()
    named = Manifest("v3", 2, schema.SCHEMA_VERSION, "t", "w", bucket_files=("v1/bucket-00000.parquet", "b.parquet"),
                     bucket_deltas=(("v2/delta-00000.a.parquet", "d.parquet"), ()))
    again = Manifest.from_json(named.to_json())
    assert again == named and again.delta_names(0) == ("v2/delta-00000.a.parquet", "d.parquet")
    assert again.entries() == ["v1/bucket-00000.parquet", "v3/b.parquet", "v2/delta-00000.a.parquet", "v3/d.parquet"]
    assert again.folders() == {"v1", "v2", "v3"}
