"""Tests of cycles/commands/rebucket.py and ``crawl rebucket``: on a real small crawl DB (a test web
injected and crawled one cycle), 8 → 3 → 5 buckets keep every row, put every host in
exactly its own bucket, survive a segment generated before and updated after, and a
failure midway leaves the old version current."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from cycles.commands.cli import app
from cycles.tables.crawldb import current_buckets, read_crawldb
from cycles.commands.cycle import run_cycles
from cycles.errors import StageError
from cycles.fetch.fetch import fetch_segment
from cycles.tables.hostdb import load_host_state
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.commands.rebucket import old_buckets_for, rebucket
from cycles.storage.store import Store
from testweb.harness import TestWeb
from cycles.update.update import update_segment
from tests.conftest import config_for, write_seeds

pytestmark = pytest.mark.web

runner = CliRunner()


def all_rows(store: Store) -> pa.Table:
    return read_crawldb(store).sort_by([("url", "ascending")])  # bases and deltas merged


def check_layout(store: Store, buckets: int) -> None:
    """Every row in bucket host_hash % buckets, every host in one file, files sorted by host, url."""
    manifest, files = current_buckets(store)
    assert manifest.buckets == buckets and len(files) == buckets
    # A bucket is its base and deltas (docs/incremental.md): each file of it holds only its hosts.
    seen: dict[str, int] = {}
    for bucket, path in ((b, path) for b, one in enumerate(files) for path in one.files):
        table = pq.read_table(path, columns=["url", "host", "host_hash"])
        assert all(h % buckets == bucket for h in table["host_hash"].to_pylist()), path
        for host in set(table["host"].to_pylist()):
            assert seen.setdefault(host, bucket) == bucket, host
        if path.name.startswith("base-"):
            continue  # a compacted base is sorted by next_fetch, for generate (docs/incremental.md)
        keys = list(zip(table["host"].to_pylist(), table["url"].to_pylist()))
        assert keys == sorted(keys), path


def test_old_buckets_for():
    assert old_buckets_for(3, 8, 16) == [3]
    assert old_buckets_for(11, 8, 16) == [3]
    assert old_buckets_for(1, 8, 4) == [1, 5]
    assert old_buckets_for(2, 8, 3) == list(range(8))
    assert old_buckets_for(4, 6, 8) == [0, 2, 4]


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rebucket")
    with TestWeb(hosts=10, pages=4, page_bytes=2000, max_seconds=240) as web:
        store = Store(tmp / "data")
        config = config_for(web)
        config.db.buckets = 8
        inject(store, config, write_seeds(tmp / "seeds.txt", web.seeds()))
        log = list(run_cycles(store, config, cycles=1))
        yield {"web": web, "store": store, "config": config, "tmp": tmp, "log": log}


def test_rebucket_8_3_5_then_crawl_on(crawl):
    store, config, tmp = crawl["store"], crawl["config"], crawl["tmp"]
    check_layout(store, 8)
    before = all_rows(store)
    hosts = set(before["host"].to_pylist())
    assert before.num_rows > len(hosts) >= 10  # the first cycle added the pages' outlinks
    manifest = store.manifest()
    hostdb = store.manifest("hostdb")
    assert hostdb.buckets == 8
    host_state = load_host_state(store, hosts)
    assert len(host_state) >= 10

    result = rebucket(store, config, 3)
    assert result.changed and result.rows == before.num_rows and (result.old_buckets, result.buckets) == (8, 3)
    check_layout(store, 3)
    # The host DB keeps its 8 buckets until the next update, and reads the same.
    assert store.manifest("hostdb") == hostdb and load_host_state(store, hosts) == host_state
    assert all_rows(store).equals(before)
    after = store.manifest()
    assert after.applied_segments == manifest.applied_segments and after.schema_version == manifest.schema_version
    assert after.version != manifest.version and after.written_by.startswith("rebucket@")

    # A segment generated with 3 buckets, rebucketed to 5 by the CLI, then fetched and updated.
    segment = generate(store, config).segment
    assert segment is not None
    out = runner.invoke(app, ["--data", str(tmp / "data"), "rebucket", "--buckets", "5"])
    assert out.exit_code == 0, out.output
    assert "from 3 to 5 buckets" in out.output
    check_layout(store, 5)
    leased = all_rows(store)
    assert leased.num_rows == before.num_rows
    fetch_segment(store, config, segment)
    updated = update_segment(store, config, segment)
    assert updated.applied and segment in store.manifest().applied_segments
    check_layout(store, 5)
    assert update_segment(store, config, segment).applied is False  # still idempotent
    # That update wrote the host DB with the crawl DB's new count; no host lost.
    assert store.manifest("hostdb").buckets == 5
    assert set(load_host_state(store, hosts)) >= set(host_state)

    # Cycles go on with 5 buckets; one row per URL.
    log = list(run_cycles(store, config, cycles=2))
    assert any("updated" in line for line in log), log
    check_layout(store, 5)
    rows = all_rows(store)
    assert rows.num_rows == len(set(rows["url"].to_pylist())) > before.num_rows
    assert pc.sum(pc.equal(rows["status"], "fetched")).as_py() > 0

    same = runner.invoke(app, ["--data", str(tmp / "data"), "rebucket", "--buckets", "5"])
    assert same.exit_code == 0 and "already has 5 buckets; nothing changed" in same.output


def test_failure_midway_keeps_the_old_version(crawl, monkeypatch, fail_second_write):
    store, config = crawl["store"], crawl["config"]
    manifest = store.manifest()
    rows = all_rows(store)
    fail_second_write()
    written = []
    original = Store.new_version_dir
    monkeypatch.setattr(Store, "new_version_dir",
                        lambda self, name="crawldb": written.append(original(self, name)) or written[-1])
    with pytest.raises(OSError, match="disk full"):
        rebucket(store, config, manifest.buckets + 1)
    monkeypatch.undo()
    assert store.manifest() == manifest
    versions = {p.name for p in store.path("crawldb").iterdir() if p.name.startswith("v")}
    # Kept: the installed versions (db.keep_versions) and the folders whose files they name. A
    # compaction's version names only its own bases while the version before it still names
    # the inject's: that folder stays until the older version goes (docs/incremental.md,
    # pruning), so the count alone is not the rule (it was flaky: one folder more when every
    # bucket happened to be compacted).
    kept = store.history("crawldb")
    assert manifest.version in kept and len(kept) <= max(2, config.db.keep_versions)
    named = set(kept).union(*(store.sealed_manifest("crawldb", v)[0].folders() for v in kept))
    # The failed rebucket made a version folder (and wrote its first bucket there): it is gone.
    assert len(written) == 1 and written[0][0] not in versions
    assert versions == named, "a folder no kept version names"
    assert all_rows(store).equals(rows)


def test_errors(tmp_path, crawl):
    with pytest.raises(StageError, match="crawl inject"):
        rebucket(Store(tmp_path / "empty"), crawl["config"], 4)
    out = runner.invoke(app, ["--data", str(tmp_path / "empty"), "rebucket", "--buckets", "4"])
    assert out.exit_code == 2 and "run `crawl inject` first" in out.output
    out = runner.invoke(app, ["--data", str(crawl["tmp"] / "data"), "rebucket", "--buckets", "0"])
    assert out.exit_code == 2 and "between 1 and" in out.output


def test_help_has_an_example():
    result = runner.invoke(app, ["rebucket", "--help"])
    assert result.exit_code == 0 and "Example: crawl rebucket --buckets" in result.output
