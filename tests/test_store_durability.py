"""Durability and silent corruption: files reach the disk before the rename that publishes
them (and the rename before ``CURRENT``), and a flipped bit in a crawl DB page stops the
stage that reads it, naming the file, instead of being carried into the next version.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from cycles.tables.segment import segment_state, write_stage_marker
from cycles.config import Config
from cycles.tables.crawldb import current_bucket_files
from cycles.errors import StoreError
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.storage.durable import write_atomically, write_file_atomically
from cycles.storage.store import Store
from cycles.update.update import update_segment
from tests.support.corruption import flip_a_bit_in_a_data_page

URLS = [f"http://h{i % 7}.example/page/{i}" for i in range(300)]


@pytest.fixture
def config() -> Config:
    config = Config()
    config.db.buckets = 1
    return config


def injected(store: Store, config: Config, tmp_path, urls=URLS) -> None:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\n".join(urls) + "\n")
    inject(store, config, seeds)


# --- fsync before rename, folder fsync after ------------------------------------------------
@pytest.fixture
def disk_log(monkeypatch):
    """Every fsync (of which file or folder) and rename, in order."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("rename", f"{os.fspath(src)} -> {os.fspath(dst)}"))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def assert_durably_renamed(events, path) -> None:
    """``path`` was fsynced under its temporary name, renamed, then its folder fsynced."""
    renames = [i for i, (kind, what) in enumerate(events) if kind == "rename" and what.endswith(f"-> {path}")]
    assert renames, f"{path} was never renamed into place"
    at = renames[-1]
    tmp = events[at][1].split(" -> ")[0]
    assert ("fsync", tmp) in events[:at], f"{path} renamed before its data was fsynced"
    assert ("fsync", str(path.parent)) in events[at + 1:], f"{path.parent} not fsynced after the rename"


def test_every_write_is_fsynced_before_and_after_its_rename(store, disk_log, tmp_path):
    table = pa.table({"url": ["http://a.example/"], "outcome": ["ok"]})
    target = store.path("segments", "s1", "a.parquet")
    store.write_table(target, table, table.schema)
    assert_durably_renamed(disk_log, target)
    streamed = store.path("segments", "s1", "b.parquet")
    store.write_batches(streamed, iter(table.to_batches()), table.schema)
    assert_durably_renamed(disk_log, streamed)
    raw = store.path("segments", "s1", "c.json")
    store.write_bytes(raw, b"{}")
    assert_durably_renamed(disk_log, raw)
    staged = store.staging_file(store.path("segments", "s1", "d.warc.gz"))
    staged.write_bytes(b"warc")
    store.put_file(staged, store.path("segments", "s1", "d.warc.gz"))
    assert_durably_renamed(disk_log, store.path("segments", "s1", "d.warc.gz"))
    # The folders created on the way are durable too: each one's parent was fsynced.
    assert ("fsync", str(store.path("segments"))) in disk_log


def test_local_files_outside_the_store_share_the_one_atomic_write(tmp_path, disk_log):
    """The pages feed's file, a query's --out, the report page and the test web's ready files
    go through storage/durable.py: fsynced, renamed, folder fsynced; a failed write leaves
    the old file and no temporary one (the new content shows the write could succeed)."""
    target = tmp_path / "out" / "result.csv"
    write_file_atomically(target, "old\n")
    assert_durably_renamed(disk_log, target)

    def fails(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(target, fails)
    assert target.read_text() == "old\n" and sorted(p.name for p in target.parent.iterdir()) == ["result.csv"]
    write_file_atomically(target, "new\n", durable=False)  # progress counters: whole, not fsynced
    assert target.read_text() == "new\n"
    assert disk_log[-1][0] == "rename" and disk_log[-1][1].endswith(f"-> {target}")


def test_current_is_renamed_only_after_every_file_it_names_is_durable(store, config, tmp_path, disk_log):
    config.db.buckets = 3
    injected(store, config, tmp_path)
    current = store.path("crawldb", "CURRENT")
    at = max(i for i, (kind, what) in enumerate(disk_log) if kind == "rename" and what.endswith(f"-> {current}"))
    manifest = store.manifest()
    folder = store.path("crawldb", manifest.version)
    for bucket in range(3):
        assert_durably_renamed(disk_log[:at], store.bucket_file(folder, bucket))
    assert ("fsync", str(store.path("crawldb"))) in disk_log[:at]  # the version folder's entry


# --- page checksums ---------------------------------------------------------------------------


def state_of(store: Store) -> tuple[bytes, list[str]]:
    return store.path("crawldb", "CURRENT").read_bytes(), sorted(store.names(store.path("crawldb")))


def test_a_flipped_bit_in_a_bucket_stops_generate_and_update_naming_the_file(store, config, tmp_path):
    injected(store, config, tmp_path)
    segment = generate(store, config).segment
    write_stage_marker(store, segment, "fetched", {"segment": segment})  # nothing fetched: update still reads every bucket
    _, files = current_bucket_files(store)
    flip_a_bit_in_a_data_page(files[0])
    before = state_of(store)
    for stage in (lambda: generate(store, config), lambda: update_segment(store, config, segment)):
        with pytest.raises(StoreError) as failure:
            stage()
        message = str(failure.value)
        assert str(files[0]) in message and "corrupt" in message and "crawl recover --previous" in message
        assert "\n" not in message
        assert state_of(store) == before  # nothing installed, no version folder left behind
    assert segment_state(store, segment) == "fetched"


def test_recover_previous_rolls_back_past_a_corrupt_bucket(store, config, tmp_path):
    injected(store, config, tmp_path, URLS[:100])
    good = store.manifest()
    injected(store, config, tmp_path, URLS)
    _, files = current_bucket_files(store)
    flip_a_bit_in_a_data_page(files[0])
    with pytest.raises(StoreError):
        generate(store, config)
    from cycles.commands.recover import recover

    [result] = recover(store, previous=True, tables=("crawldb",))
    assert result.action == "rolled back" and result.version == good.version
    assert store.manifest() == good
    assert generate(store, config).segment  # the stages run again, on the older version


def test_every_parquet_file_the_store_writes_has_page_checksums(store, tmp_path):
    """pyarrow reads a page's CRC only when one was written: a corrupt page of a file
    written without them is caught by the verifying read, one of a file with them is."""
    table = pa.Table.from_pylist([{"url": f"http://a.example/{i}"} for i in range(200)])
    paths = [store.path("t", "a.parquet"), store.path("t", "b.parquet")]
    store.write_table(paths[0], table, table.schema)
    store.write_batches(paths[1], iter(table.to_batches()), table.schema)
    for path in paths:
        flip_a_bit_in_a_data_page(path)
        with pytest.raises(StoreError, match="not a readable Parquet file"):
            store.read_table(path)
        with pytest.raises(StoreError, match="corrupt"):
            store.verify_parquet([path])
