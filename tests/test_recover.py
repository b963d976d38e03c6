"""Versions: only versions once current are pruned (never the current one or the one
before it, never a newer folder); a lost ``CURRENT`` stops every stage instead of letting
it start an empty crawl DB; ``crawl recover`` reinstates the newest complete version.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from cycles.tables.segment import write_stage_marker
from cycles.tables import schema
from cycles.commands.cli import app
from cycles.config import Config
from cycles.tables.crawldb import current_bucket_files, read_crawldb
from cycles.errors import StoreError
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.storage.store import Store
from cycles.update.update import update_segment


@pytest.fixture
def config() -> Config:
    config = Config()
    config.db.buckets = 2
    config.db.keep_versions = 2
    return config


def seed(store: Store, config: Config, tmp_path, urls) -> str:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\n".join(urls) + "\n")
    inject(store, config, seeds)
    return store.manifest().version


def half_written_version(store: Store, name: str = "crawldb") -> str:
    """What an update killed between two bucket writes leaves: a folder with one bucket."""
    version, folder = store.new_version_dir(name)
    table = schema.CRAWLDB.empty_table()
    store.write_batches(store.bucket_file(folder, 0), iter(table.to_batches()), schema.CRAWLDB)
    return version


def versions(store: Store, name: str = "crawldb") -> list[str]:
    return [v for v in store.list_dirs(store.path(name)) if v.startswith("v")]


def url_count(store: Store) -> int:
    return read_crawldb(store, ["url"]).num_rows  # bases and deltas merged


def test_pruning_keeps_the_last_good_version_not_a_crashed_writers_leftover(store, config, tmp_path):
    first = seed(store, config, tmp_path, ["http://a.example/"])
    good = seed(store, config, tmp_path, ["http://b.example/"])
    leftover = half_written_version(store)  # newer than the good one, never installed
    newest = seed(store, config, tmp_path, ["http://c.example/"])
    kept = versions(store)
    assert good in kept and newest in kept, kept
    assert leftover not in kept and first not in kept
    assert store.history("crawldb") == [good, newest]


def test_pruning_never_deletes_a_folder_newer_than_the_version_installed(store, config, tmp_path):
    seed(store, config, tmp_path, ["http://a.example/"])
    running = "v99990101T000000000000Z-ffffff"  # a writer that started later and still runs
    store.path("crawldb", running).mkdir()
    for host in "bcd":
        seed(store, config, tmp_path, [f"http://{host}.example/"])
    assert running in versions(store)


def test_a_missing_current_stops_every_stage_with_one_line(store, config, tmp_path):
    seed(store, config, tmp_path, ["http://a.example/", "http://b.example/"])
    seed(store, config, tmp_path, ["http://c.example/"])
    segment = generate(store, config).segment
    write_stage_marker(store, segment, "fetched", {"segment": segment})
    before = versions(store)
    store.path("crawldb", "CURRENT").unlink()
    seeds = tmp_path / "more.txt"
    seeds.write_text("http://d.example/\n")
    for stage in (lambda: inject(store, config, seeds), lambda: generate(store, config),
                  lambda: update_segment(store, config, segment)):
        with pytest.raises(StoreError, match="CURRENT is missing .*crawl recover"):
            stage()
    assert versions(store) == before  # no empty crawl DB was started, nothing pruned
    result = CliRunner().invoke(app, ["--data", str(store.root), "inject", str(seeds)])
    assert result.exit_code != 0 and "crawl recover" in result.output
    assert "Traceback" not in result.output


def test_recover_reinstates_the_newest_complete_version(store, config, tmp_path):
    seed(store, config, tmp_path, ["http://a.example/", "http://b.example/"])
    good_manifest = store.manifest()
    half_written_version(store)
    store.path("crawldb", "CURRENT").unlink()
    result = CliRunner().invoke(app, ["--data", str(store.root), "recover", "--table", "crawldb"])
    assert result.exit_code == 0, result.output
    assert f"crawldb: reinstated {good_manifest.version}" in result.output
    assert "passed over" in result.output and "never finished" in result.output
    assert store.manifest() == good_manifest  # applied segments and schema version included
    assert url_count(store) == 2
    seeds = tmp_path / "more.txt"
    seeds.write_text("http://d.example/\n")
    inject(store, config, seeds)  # the stages run again
    assert url_count(store) == 3


def test_recover_passes_over_a_version_whose_file_was_lost(store, config, tmp_path):
    older = seed(store, config, tmp_path, ["http://a.example/"])
    newer = seed(store, config, tmp_path, ["http://b.example/"])
    store.path("crawldb", "CURRENT").unlink()
    store.bucket_file(store.path("crawldb", newer), 1).unlink()
    from cycles.commands.recover import recover

    [result] = recover(store, tables=("crawldb",))
    assert result.version == older and result.skipped[0][0] == newer
    assert store.manifest().version == older


def test_recover_reinstates_the_host_db(store, config, tmp_path):
    seed(store, config, tmp_path, ["http://a.example/"])
    segment = generate(store, config).segment
    folder = store.segment_dir(segment)
    store.write_table(folder / "fetched" / "part-00000-c000001.parquet", schema.FETCHED.empty_table(), schema.FETCHED)
    write_stage_marker(store, segment, "fetched", {"segment": segment})
    update_segment(store, config, segment)
    host_manifest = store.manifest("hostdb")
    assert host_manifest is not None
    store.path("hostdb", "CURRENT").unlink()
    with pytest.raises(StoreError, match="hostdb.CURRENT is missing"):
        store.manifest("hostdb")
    from cycles.commands.recover import recover

    results = {r.table: r for r in recover(store)}
    assert results["crawldb"].action == "kept" and results["hostdb"].action == "reinstated"
    assert store.manifest("hostdb") == host_manifest


def test_recover_with_nothing_complete_says_what_to_do(store, config, tmp_path):
    half_written_version(store)  # an interrupted first inject
    from cycles.commands.recover import recover

    with pytest.raises(StoreError, match="no complete version.*delete them and inject again"):
        recover(store, tables=("crawldb",))
    assert len(versions(store)) == 1  # recover deletes nothing


def test_each_installed_version_is_sealed_with_its_row_counts(store, config, tmp_path):
    version = seed(store, config, tmp_path, ["http://a.example/", "http://b.example/", "http://c.example/"])
    seal = store.read_json(store.path("crawldb", version, "_COMPLETE"))
    assert seal["rows"] == 3 and sorted(seal["files"]) == ["bucket-00000.parquet", "bucket-00001.parquet"]
    assert seal["manifest"]["version"] == version and seal["manifest"]["buckets"] == 2


def test_recover_dedupe_repairs_a_crawl_db_written_with_duplicate_rows(store, config, tmp_path):
    """A crawl DB written before buckets were checked may hold a URL twice (the demoted-hosts
    join of old): the next stage refuses it, naming the fix, and the fix works."""
    config.db.buckets = 1
    seed(store, config, tmp_path, ["http://a.example/", "http://b.example/"])
    _, [bucket] = current_bucket_files(store)
    rows = store.read_table(bucket, schema.CRAWLDB)
    doubled = pa.concat_tables([rows, rows.slice(0, 1)]).sort_by([("host", "ascending"), ("url", "ascending")])
    store.write_table(bucket, doubled, schema.CRAWLDB)
    seeds = tmp_path / "more.txt"
    seeds.write_text("http://c.example/\n")
    with pytest.raises(Exception, match="twice.*crawl recover --dedupe"):
        inject(store, config, seeds)
    result = CliRunner().invoke(app, ["--data", str(store.root), "recover", "--dedupe"])
    assert result.exit_code == 0 and "crawldb: 1 duplicate rows dropped" in result.output, result.output
    inject(store, config, seeds)
    assert url_count(store) == 3


def test_recover_has_help_with_an_example():
    result = CliRunner().invoke(app, ["recover", "--help"])
    assert result.exit_code == 0 and "Example: crawl recover" in result.output
