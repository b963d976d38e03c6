"""The segment lifecycle (cycles/tables/segment.py): markers, states, generation order, abandoned
segments, and update's check of the fetch manifest."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cycles.tables.segment import segment_state
from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.config import Config
from cycles.errors import StageError, StoreError
from cycles.fetch.fetch import fetch_segment
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.commands.status import crawl_status, format_status
from cycles.storage.store import Store, utcnow
from testweb.harness import TestWeb
from cycles.update.update import update_segment
from tests.conftest import write_seeds
from tests.support.fetching import fast_config, make_segment
from tests.examples import examples

text = st.text(max_size=20)


@given(st.builds(seg.Generated, segment=text, generated_at=text, urls=st.integers(0, 10**9),
                 hosts=st.integers(0, 10**6), partitions=st.integers(0, 999), lease_until=text,
                 crawldb_version=text),
       st.builds(seg.Fetched, segment=text, fetched_at=text, seconds=st.floats(0, 1e6), partitions=st.integers(0, 99),
                 requests=st.integers(0, 10**9), chunks=st.none() | st.lists(st.fixed_dictionaries(
                     {"partition": st.integers(0, 99), "chunk": text, "fetched_rows": st.integers(0, 10**6),
                      "outlinks_rows": st.integers(0, 10**6), "warc_bytes": st.none() | st.integers(0, 10**9)}),
                     max_size=5)),
       st.builds(seg.Abandoned, segment=text, reason=text))
@settings(max_examples=examples(50), deadline=None)
def test_every_marker_survives_its_json(generated, fetched, abandoned):
    for marker in (generated, fetched, abandoned):
        assert type(marker).from_json(marker.to_json()) == marker


def test_markers_of_older_versions_and_unknown_keys_are_read(tmp_path):
    store = Store(tmp_path / "data")
    segment = make_segment(store, ["http://a.example/"])  # an old-style marker: no hosts, no lease
    store.write_json(seg.segment_dir(store, segment) / seg.Fetched.FILE, {"segment": segment, "added_later": 1})
    assert seg.read_marker(store, segment, seg.Fetched).chunks is None
    assert seg.read_marker(store, segment, seg.Generated).partitions == 1


def test_the_state_is_the_most_advanced_marker_and_abandoned_beats_a_late_fetch(tmp_path):
    store = Store(tmp_path / "data")
    segment = make_segment(store, ["http://a.example/"])
    assert seg.state(store, segment) == seg.State.GENERATED
    seg.mark_fetching(store, segment)
    assert seg.state(store, segment) == seg.State.FETCHING
    seg.abandon(store, segment, "test")
    seg.write_marker(store, seg.Fetched(segment))  # a fetch that finished after the abandon
    assert seg.state(store, segment) == seg.State.ABANDONED
    assert segment_state(store, segment) == "abandoned"  # the store's delegate agrees


def crawl_db(tmp_path, urls=40) -> tuple[Store, Config]:
    store, config = Store(tmp_path / "data"), Config()
    config.db.buckets = 2  # the default 8 only multiplies every stage's files, not the point
    inject(store, config, write_seeds(tmp_path / "seeds.txt", [f"http://h{i % 8}.example/p{i}" for i in range(urls)]))
    return store, config


def fake_fetch(store: Store, segment: str) -> None:
    """Results for the whole fetch list, as a fetch would commit them (no manifest)."""
    listed = store.read_tables(seg.files(store, segment, seg.FETCHLIST), schema.FETCHLIST).to_pylist()
    rows = []
    for row in listed:
        result = {name: None for name in schema.FETCHED.names}
        result.update(url=row["url"], host=row["host"], fetched_at=utcnow(), outcome="ok", http_status=200,
                      content_hash=f"{hash(row['url']) & 0xffff:032x}", minhash=1)
        rows.append(result)
    folder = seg.segment_dir(store, segment)
    store.write_table(folder / seg.FETCHED / "part-00000-c000001.parquet",
                      pa.Table.from_pylist(rows, schema=schema.FETCHED), schema.FETCHED)
    store.write_table(folder / seg.OUTLINKS / "part-00000-c000001.parquet", schema.OUTLINKS.empty_table(),
                      schema.OUTLINKS)
    seg.write_marker(store, seg.Fetched(segment))


def test_a_segment_whose_lease_ran_out_and_was_generated_again_is_never_applied(tmp_path):
    store, config = crawl_db(tmp_path)
    now = utcnow() + dt.timedelta(seconds=1)
    old = generate(store, config, now=now, top_n=10).segment
    later = now + dt.timedelta(seconds=config.generate.lease_s + 1)
    new = generate(store, config, now=later, top_n=10).segment
    assert seg.state(store, old) == seg.State.ABANDONED
    old_urls = set(store.read_tables(seg.files(store, old, seg.FETCHLIST), schema.FETCHLIST)["url"].to_pylist())
    new_urls = set(store.read_tables(seg.files(store, new, seg.FETCHLIST), schema.FETCHLIST)["url"].to_pylist())
    assert old_urls == new_urls  # leased again
    fake_fetch(store, old)  # the old segment's fetch finishes late
    before = store.manifest()
    with pytest.raises(StageError, match="abandoned"):
        update_segment(store, config, old)
    assert store.manifest() == before


def test_segments_are_applied_in_generation_order(tmp_path):
    store, config = crawl_db(tmp_path)
    now = utcnow() + dt.timedelta(seconds=1)
    first = generate(store, config, now=now, top_n=10).segment
    second = generate(store, config, now=now + dt.timedelta(seconds=1), top_n=10).segment
    fake_fetch(store, first)
    fake_fetch(store, second)
    with pytest.raises(StageError, match=f"crawl update {first}"):
        update_segment(store, config, second)
    assert update_segment(store, config).segment == first  # the oldest fetched by default
    assert update_segment(store, config, second).applied


def test_a_segment_older_than_an_applied_one_is_abandoned_not_applied(tmp_path):
    store, config = crawl_db(tmp_path)
    now = utcnow() + dt.timedelta(seconds=1)
    first = generate(store, config, now=now, top_n=10).segment
    second = generate(store, config, now=now + dt.timedelta(seconds=1), top_n=10).segment
    fake_fetch(store, second)
    update_segment(store, config, second)
    fake_fetch(store, first)  # fetched after a newer segment was applied
    before = store.manifest()
    with pytest.raises(StageError, match="abandoned"):
        update_segment(store, config, first)
    assert store.manifest() == before and seg.state(store, first) == seg.State.ABANDONED


def test_status_names_pending_segments_and_the_command_to_run_next(tmp_path):
    store, config = crawl_db(tmp_path)
    segment = generate(store, config, now=utcnow() + dt.timedelta(seconds=1), top_n=10).segment
    report = crawl_status(store, config)
    assert report["segments"] == [{"segment": segment, "state": "generated", "next": f"crawl fetch {segment}"}]
    assert f"next: `crawl fetch {segment}`" in format_status(report)


def run_crawl(store: Store, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cycles", "--data", str(store.root), *args],
                          capture_output=True, text=True, timeout=120, cwd=os.getcwd())


@pytest.mark.web  # runs python -m cycles fetch with two processes
@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_corrupt_fetch_list_is_one_line_naming_the_file(tmp_path, damage):
    store = Store(tmp_path / "data")
    segment = make_segment(store, [f"http://h{i}.invalid/" for i in range(4)], partitions=2)
    # Every partition's list is damaged: the fetch fails on reading them, before any request
    # (no name of this segment may ever be resolved: no packet leaves the machine).
    paths = [seg.fetchlist_file(seg.segment_dir(store, segment), p) for p in (0, 1)]
    for path in paths:
        data = bytearray(path.read_bytes())
        if damage == "flip":
            for i in range(4, len(data) - 8, 7):
                data[i] ^= 0xFF
        else:
            data = data[: len(data) // 2]
        path.write_bytes(bytes(data))
    done = run_crawl(store, "fetch", segment, "--processes", "2")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert any(str(path) in done.stderr for path in paths) and f"crawl abandon {segment}" in done.stderr


@pytest.fixture(scope="module")
def fetched(tmp_path_factory):
    """A segment fetched from the test web, with several chunks, and a copy of the store."""
    tmp = tmp_path_factory.mktemp("manifest")
    with TestWeb(hosts=4, pages=4, page_bytes=2000, special=False, max_seconds=60) as web:
        store = Store(tmp / "data")
        config = fast_config(web, processes=1, flush_pages=3, delay_s=0.2)
        config.urls.include = {f"h{i}.web.test": [r"/p/\d+\.html$"] for i in range(4)}
        urls = [web.url(f"h{i}", f"/p/{k}.html") for i in range(4) for k in range(4)]
        inject(store, config, write_seeds(tmp / "seeds.txt", urls))
        segment = generate(store, config, now=utcnow() + dt.timedelta(seconds=1)).segment
        fetch_segment(store, config, segment)
    yield {"store": store, "config": config, "segment": segment, "root": tmp / "data"}


@pytest.fixture
def copy(fetched, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(fetched["root"], root)
    return Store(root)


@pytest.mark.web  # its fixture starts a test web
def test_fetch_records_every_committed_chunk(fetched):
    store, segment = fetched["store"], fetched["segment"]
    marker = seg.read_marker(store, segment, seg.Fetched)
    on_disk = sorted(p.name[: -len(".parquet")] for p in seg.files(store, segment, seg.FETCHED))
    assert len(on_disk) >= 3 and sorted(c["chunk"] for c in marker.chunks) == on_disk
    assert sum(c["fetched_rows"] for c in marker.chunks) == 16
    assert all(c["warc_bytes"] for c in marker.chunks)


@pytest.mark.web
@pytest.mark.parametrize("lose", ["a fetched chunk", "the outlinks folder", "a warc file"])
def test_update_refuses_a_segment_missing_a_listed_file(fetched, copy, lose):
    segment = fetched["segment"]
    folder = seg.segment_dir(copy, segment)
    if lose == "a fetched chunk":
        gone = sorted((folder / seg.FETCHED).glob("part-*.parquet"))[1]
        gone.unlink()
    elif lose == "the outlinks folder":
        gone = sorted((folder / seg.OUTLINKS).glob("part-*.parquet"))[0]
        shutil.rmtree(folder / seg.OUTLINKS)
    else:
        gone = sorted((folder / seg.WARC).glob("*.warc.gz"))[0]
        gone.unlink()
    before = copy.manifest()
    with pytest.raises(StoreError, match=f"{gone.name} is missing.*crawl abandon {segment}"):
        update_segment(copy, fetched["config"], segment)
    assert copy.manifest() == before and seg.state(copy, segment) == seg.State.FETCHED


@pytest.mark.web
def test_update_refuses_a_chunk_with_other_rows_and_ignores_unlisted_files(fetched, copy):
    segment = fetched["segment"]
    folder = seg.segment_dir(copy, segment) / seg.FETCHED
    chunks = sorted(folder.glob("part-*.parquet"))
    # An unlisted file (a copy of a chunk under a name no commit made) is not read.
    shutil.copy(chunks[0], folder / "part-00000-c999999.parquet")
    cut = copy.read_table(chunks[1]).slice(0, 1)
    copy.write_table(chunks[1], cut, schema.FETCHED)
    with pytest.raises(StoreError, match=f"{chunks[1].name} has 1 rows"):
        update_segment(copy, fetched["config"], segment)
    shutil.copy(fetched["store"].segment_dir(segment) / seg.FETCHED / chunks[1].name, chunks[1])
    result = update_segment(copy, fetched["config"], segment)
    assert result.applied and result.counters["update/results"] == 16
