"""Update's steps and their one failure rule (cycles/update/update.py ``run_steps``): a step that
fails leaves the crawl DB as it was and no version folder of its own; the update can be run
again and applies the segment once."""

from __future__ import annotations

import pytest

from cycles.config import Config
from cycles.generate.generate import generate
from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.commands.inject import inject
from cycles.storage.store import Store, utcnow
from cycles.update import update as upd
from tests.support.transitions import URL, fetch_result, rows


def fetched_segment(store: Store, tmp_path) -> tuple[Config, str]:
    config = Config()
    config.db.buckets = 2
    config.db.duckdb_memory_limit = "1GB"
    seeds = tmp_path / "seeds.txt"
    seeds.write_text(URL + "\n")
    inject(store, config, seeds)
    segment = generate(store, config).segment
    assert segment
    fetch_result(store, segment, [{"url": URL, "outcome": "ok", "http_status": 200, "content_hash": "a" * 32,
                                   "fetched_at": utcnow()}],
                 [{"url": "http://h.example/other", "from_url": URL, "nofollow": False, "depth": 1}])
    return config, segment


def test_steps_are_named_in_order():
    names = [step.__name__ for step in upd.UPDATE_STEPS]
    assert names == ["dedup_step", "route_step", "plan_step", "links_step", "hostdb_step", "buckets_step",
                     "feed_step", "install_step"]


@pytest.mark.parametrize("failing", ["buckets_step", "feed_step"])
def test_a_failing_step_leaves_the_crawl_db_and_no_version(tmp_path, monkeypatch, failing):
    store = Store(tmp_path / "data")
    config, segment = fetched_segment(store, tmp_path)
    before = store.manifest()
    folders = set(store.version_dirs("crawldb"))
    steps = list(upd.UPDATE_STEPS)
    original = steps[[s.__name__ for s in steps].index(failing)]
    reached = []

    def broken(run):
        original(run)  # the step did its work (a version folder, a feed batch) and then failed
        reached.append(run.version in store.version_dirs("crawldb"))
        raise OSError("disk full")
    steps[steps.index(original)] = broken
    monkeypatch.setattr(upd, "UPDATE_STEPS", tuple(steps))
    monkeypatch.setattr(upd.run_steps, "__defaults__", (tuple(steps),))
    with pytest.raises(OSError, match="disk full"):
        upd.update_segment(store, config, segment)
    # Positive control: the buckets step had made its version folder before the failure.
    assert reached == [True]
    assert store.manifest() == before
    assert set(store.version_dirs("crawldb")) == folders  # the failed update's folder discarded
    assert rows(store)[URL]["status"] == "unfetched"
    monkeypatch.undo()
    result = upd.update_segment(store, config, segment)
    assert result.applied and rows(store)[URL]["status"] == "fetched"
    assert upd.update_segment(store, config, segment).applied is False


@pytest.mark.parametrize("delta", [True, False])
def test_a_bucket_with_nothing_to_merge_gives_what_the_duckdb_merge_gives(tmp_path, monkeypatch, delta):
    """update_bucket's shortcut for a bucket without old rows or inputs (``empty_bucket``, no
    DuckDB) returns the counts and writes the file that the merge in DuckDB does for it."""
    store = Store(tmp_path / "data")
    config, segment = fetched_segment(store, tmp_path)  # one host: one of the two buckets is empty
    config.db.delta_updates = delta
    compared, real = [], upd.update_bucket

    def both_ways(task):
        done = real(task)
        inputs = seg.segment_dir(store, task.segment) / seg.UPDATE_INPUTS
        if upd.nothing_to_merge(store, inputs, task):
            merged = upd.merge_bucket(store, task, inputs)
            assert {**merged, "file": None} == {**done, "file": None}
            assert (done["file"] is None) == (merged["file"] is None) == delta
            if not delta:
                for name in (done["file"], merged["file"]):
                    written = store.read_table(task.new_folder / name)
                    assert written.num_rows == 0 and written.schema == schema.CRAWLDB
        compared.append(upd.nothing_to_merge(store, inputs, task))
        return done
    monkeypatch.setattr(upd, "update_bucket", both_ways)
    upd.update_segment(store, config, segment)
    assert sorted(compared) == [False, True]  # the shortcut taken for one bucket, not the other
    assert rows(store)[URL]["status"] == "fetched"


def test_the_plan_of_a_bucket_without_rows_is_what_the_duckdb_scan_gives(tmp_path, monkeypatch):
    """bucket_rate_histogram's shortcut for a bucket without rows (no DuckDB) is the histogram
    the scan in DuckDB gives it (empty); the other bucket takes the scan (a positive control:
    its page was fetched, so its histogram is not empty)."""
    from cycles.tables.crawldb import as_bucket_files, holds_no_rows
    from cycles.update import schedule

    store = Store(tmp_path / "data")
    config, segment = fetched_segment(store, tmp_path)  # one host: one of the two buckets is empty
    assert config.update.schedule == "optimal"
    compared, real = [], schedule.bucket_rate_histogram

    def both_ways(task):
        done = real(task)
        assert schedule.scan_rate_histogram(store, task) == done
        compared.append((holds_no_rows(store, as_bucket_files(task.old_file).files), done == schedule.RateHistogram()))
        return done
    monkeypatch.setattr(schedule, "bucket_rate_histogram", both_ways)
    upd.update_segment(store, config, segment)
    assert sorted(compared) == [(False, False), (True, True)]
