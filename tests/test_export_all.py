"""``crawl export`` without a segment, after a real ``crawl run --seconds`` (issue 27).

A bounded run leaves its last fetch stopped: that segment is ``fetching``, its committed
chunks in WARC files. Here a complete segment comes first (``crawl cycle``), then the run's. Checked, on the files and on what pywb serves:

- one ``crawl export`` writes CDXJ, the cc-index Parquet and WET for every segment with a
  committed chunk, the stopped one included (marked partial), oldest first;
- the CDXJ of the stopped segment lists every page its committed rows say it fetched;
- a second ``crawl export`` does nothing (exit 3) and rewrites no file;
- with one segment's ``_EXPORTED`` removed (a run cut in that segment), the next export does
  that segment alone (resumable);
- once ``crawl fetch`` finishes the stopped segment, the next export does it again, complete;
- pywb, on loopback over every segment's WARC and CDXJ, replays a page of the last segment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from cycles.tables import segment as seg
from cycles.archive.export import EXPORTED, committed_chunks
from cycles.config import Config
from cycles.commands.inject import inject
from cycles.storage.store import Store
from testweb.harness import TestWeb
from tests.conftest import write_seeds
from tests.support.processes import toml_config
from tests.support.archive import capture_time, record_at, replay, wayback

RUN_SECONDS = 20
"""The bounded run's limit. Its one segment holds every page of the web, 40 a host at the
1 s per-host delay: 40 s of fetching, so the deadline stops that fetch in the middle,
whatever the machine's load (a run of short segments stopped between two of them as often)."""

PAGES = 40


def crawl(store: Store, config, *args, timeout: float = 240) -> subprocess.CompletedProcess:
    # One link level a segment (no discovery inside the fetch), so the run makes several segments.
    return subprocess.run([sys.executable, "-m", "cycles", "--data", str(store.root), "--config", str(config),
                           "-s", "fetch.follow_outlinks_depth=0", "-s", "fetch.processes=1", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=os.getcwd())


def archive_files(store: Store, segment: str) -> dict[str, list]:
    folder = store.segment_dir(segment) / seg.ARCHIVE
    return {"cdxj": sorted(folder.glob("*.cdxj")), "index": sorted(folder.glob("*.cc-index.parquet")),
            "wet": sorted((folder / "wet").glob("*.wet.gz"))}


def mtimes(store: Store) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in (store.root / seg.SEGMENTS).glob(f"*/{seg.ARCHIVE}/**/*")}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One complete segment (`crawl cycle` on the two home pages), then every page of the web
    injected and `crawl run --seconds 20`: its one segment is stopped while being fetched.
    Then `crawl export --json` and a second `crawl export`."""
    tmp = tmp_path_factory.mktemp("export-all")
    with TestWeb(hosts=2, pages=PAGES, page_bytes=2000, special=False, max_seconds=300) as web:
        store = Store(tmp / "data")
        config = tmp / "crawl.toml"
        toml_config(web, config)
        inject(store, Config(), write_seeds(tmp / "seeds.txt", web.seeds()))
        cycle = crawl(store, config, "cycle")
        assert cycle.returncode == 0, cycle.stderr
        pages = [web.url(f"h{h}", f"/p/{k}.html") for h in range(2) for k in range(PAGES)]
        inject(store, Config(), write_seeds(tmp / "pages.txt", pages))
        ran = crawl(store, config, "run", "--seconds", str(RUN_SECONDS))
        states = dict(seg.states(store))
        first = crawl(store, config, "export", "--json")
        after_first = mtimes(store)
        second = crawl(store, config, "export")
        after_second = mtimes(store)
        yield {"web": web, "store": store, "config": config, "tmp": tmp, "ran": ran, "states": states,
               "first": first, "second": second, "after_first": after_first, "after_second": after_second}


def with_chunks(store: Store, states: dict) -> list[str]:
    return [s for s in states if committed_chunks(store, store.segment_dir(s))]


@pytest.mark.web
def test_the_bounded_run_stops_a_fetch_in_the_middle(exported):
    ran = exported["ran"]
    assert ran.returncode == 0, ran.stderr
    assert "stopped (deadline)" in ran.stdout + ran.stderr
    stopped = [s for s, state in exported["states"].items() if state == seg.State.FETCHING]
    assert len(stopped) == 1, exported["states"]
    assert committed_chunks(exported["store"], exported["store"].segment_dir(stopped[0]))
    assert list(exported["states"].values()).count(seg.State.UPDATED) >= 1, exported["states"]


@pytest.mark.web
def test_one_export_writes_every_part_for_every_segment_oldest_first(exported):
    store, states = exported["store"], exported["states"]
    done = exported["first"]
    assert done.returncode == 0, done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["status"] == "done" and line["stage"] == "export"
    fetched = with_chunks(store, states)
    assert [e["segment"] for e in line["exported"]] == fetched == sorted(fetched)
    assert fetched[-1] == [s for s, st in states.items() if st == seg.State.FETCHING][-1]  # the last one included
    # Skipped only segments with nothing committed (a segment generated ahead of the stop).
    assert set(line["not_fetched"]) == set(states) - set(fetched)
    for entry in line["exported"]:
        files = archive_files(store, entry["segment"])
        assert all(files.values()), (entry["segment"], files)
        assert entry["partial"] == (states[entry["segment"]] == seg.State.FETCHING)
        assert entry["cdxj_lines"] > 0 and entry["index_rows"] > 0 and entry["wet_records"] > 0
        assert len(files["wet"]) == len(entry["files"]["wet"])
        record = store.read_json(store.segment_dir(entry["segment"]) / seg.ARCHIVE / EXPORTED)
        assert record["partial"] == entry["partial"] and record["chunks"] == committed_chunks(
            store, store.segment_dir(entry["segment"]))


@pytest.mark.web
def test_the_stopped_segments_cdxj_lists_every_page_it_committed(exported):
    store = exported["store"]
    last = with_chunks(store, exported["states"])[-1]
    folder = store.segment_dir(last)
    pages = {r["url"] for f in sorted((folder / seg.FETCHED).glob("part-*.parquet"))
             for r in pq.read_table(f).to_pylist() if r["outcome"] == "ok"}
    assert pages
    (cdxj,) = archive_files(store, last)["cdxj"]
    indexed = {json.loads(line.split(" ", 2)[2])["url"] for line in cdxj.read_text().splitlines()}
    assert pages <= indexed
    index = pq.read_table(archive_files(store, last)["index"][0]).to_pylist()
    assert pages <= {r["url"] for r in index if r["fetch_status"] == 200}


@pytest.mark.web
def test_a_second_export_does_nothing(exported):
    second = exported["second"]
    assert second.returncode == 3, second.stdout + second.stderr
    assert "0 segment(s) exported" in second.stderr and "nothing to do" in second.stderr
    assert exported["after_first"] and exported["after_second"] == exported["after_first"]


@pytest.mark.web
def test_a_cut_export_resumes_with_the_segment_it_had_not_finished(exported):
    store = exported["store"]
    segments = with_chunks(store, exported["states"])
    middle = segments[len(segments) // 2]
    (store.segment_dir(middle) / seg.ARCHIVE / EXPORTED).unlink()
    done = crawl(store, exported["config"], "export", "--json")
    assert done.returncode == 0, done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert [e["segment"] for e in line["exported"]] == [middle]


@pytest.mark.web
def test_pywb_replays_a_page_of_the_last_segment(exported):
    pytest.importorskip("pywb", reason="pywb is the archive extra: pip install -e '.[archive]'")
    store = exported["store"]
    segments = with_chunks(store, exported["states"])
    last = store.segment_dir(segments[-1])
    rows = [r for f in sorted((last / seg.FETCHED).glob("part-*.parquet")) for r in pq.read_table(f).to_pylist()
            if r["outcome"] == "ok" and r["warc_file"]]
    assert rows
    row = rows[-1]
    with wayback(exported["tmp"] / "pywb", [store.segment_dir(s) for s in segments]) as base:
        status, _, body = replay(f"{base}/{capture_time(row)}id_/{row['url']}")
    original = record_at(last / row["warc_file"], row["warc_offset"])
    assert status == 200 and body == original.body and body


@pytest.mark.web
def test_once_the_stopped_fetch_finishes_its_segment_is_exported_again_complete(exported):
    store, config = exported["store"], exported["config"]
    stopped = [s for s, state in exported["states"].items() if state == seg.State.FETCHING][-1]
    before = committed_chunks(store, store.segment_dir(stopped))
    fetched = crawl(store, config, "fetch", stopped)
    assert fetched.returncode == 0, fetched.stderr
    assert seg.state(store, stopped) == seg.State.FETCHED
    done = crawl(store, config, "export", "--json")
    assert done.returncode == 0, done.stderr
    (entry,) = json.loads(done.stdout.strip().splitlines()[-1])["exported"]
    assert entry["segment"] == stopped and not entry["partial"]
    after = committed_chunks(store, store.segment_dir(stopped))
    assert set(before) <= set(after)
    assert store.read_json(store.segment_dir(stopped) / seg.ARCHIVE / EXPORTED)["chunks"] == after


@pytest.mark.web
def test_one_part_exported_again_keeps_the_others_current(exported):
    store = exported["store"]
    first = with_chunks(store, exported["states"])[0]
    done = crawl(store, exported["config"], "export", first, "--only", "cdxj")
    assert done.returncode == 0, done.stderr
    record = store.read_json(store.segment_dir(first) / seg.ARCHIVE / EXPORTED)
    assert record["parts"] == ["cdxj", "index", "wet"] and set(record["files"]) == {"cdxj", "index", "wet"}
    again = crawl(store, exported["config"], "export")
    assert again.returncode == 3, again.stdout + again.stderr


def test_a_warc_file_whose_chunk_was_not_committed_is_left_out(tmp_path):
    """A commit cut by kill -9 between the WARC and the fetched file (cycles/fetch/output.py)
    leaves a WARC file with no fetched rows: it is not part of what the fetch committed."""
    import pyarrow as pa

    from cycles.archive.export import committed_warcs

    store = Store(tmp_path / "data")
    folder = tmp_path / "data" / seg.SEGMENTS / "20261207T000000000000Z-abcdef"
    for sub in (seg.FETCHED, seg.WARC):
        (folder / sub).mkdir(parents=True)
    pq.write_table(pa.table({"url": ["http://a.example/"]}), folder / seg.FETCHED / "part-00000-c000001.parquet")
    for chunk in ("part-00000-c000001", "part-00000-c000002", "part-00001-c000001"):
        (folder / seg.WARC / f"CRAWL-20261207T000000000000Z-abcdef-{chunk}-host.warc.gz").write_bytes(b"")
    seg_dir = store.segment_dir(folder.name)
    chunks = committed_chunks(store, seg_dir)
    assert chunks == ["part-00000-c000001"]
    assert [p.name for p in committed_warcs(store, seg_dir, chunks)] == [
        "CRAWL-20261207T000000000000Z-abcdef-part-00000-c000001-host.warc.gz"]
    assert len(committed_warcs(store, seg_dir, chunks + ["part-00000-c000002"])) == 2  # positive control
