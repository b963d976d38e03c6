"""``kill -9`` of ``crawl fetch`` in the middle, then ``crawl fetch`` again: the segment
completes, nothing is committed twice, every WARC is whole, nothing is left half-written,
no orphan worker keeps fetching, and host spacing holds across the kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from warcio.archiveiterator import ArchiveIterator

from cycles.tables.segment import segment_state
from cycles.storage.store import Store
from testweb.harness import TestWeb
from tests.support.fetching import assert_polite, make_segment
from tests.support.processes import committed, crawl, toml_config

pytestmark = pytest.mark.web

HOSTS, PAGES = 30, 10


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resume")
    with TestWeb(hosts=HOSTS, pages=PAGES, page_bytes=3000, special=False, max_seconds=120) as web:
        store = Store(tmp / "data")
        config = tmp / "crawl.toml"
        toml_config(web, config)
        urls = [web.url(f"h{i}", f"/p/{k}.html") for i in range(HOSTS) for k in range(PAGES)]
        segment = make_segment(store, urls, partitions=2)
        first = crawl(store.root, config, "fetch", segment)
        # Kill once a few chunks are committed, well before the ~11 s the segment needs.
        deadline = time.monotonic() + 30
        while len(list((store.segment_dir(segment) / "fetched").glob("part-*.parquet"))) < 4:
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        time.sleep(0.3)
        first.send_signal(signal.SIGKILL)
        first.wait()
        killed_at = time.time()
        before = committed(store, segment)
        time.sleep(1.5)  # an orphan worker would go on fetching here
        quiet = [r for r in web.requests() if r["t_start"] > killed_at + 0.2]
        second = crawl(store.root, config, "fetch", segment)
        out, err = second.communicate(timeout=60)
        requests = web.requests()
        yield {"web": web, "store": store, "segment": segment, "urls": urls, "before": before,
               "killed_at": killed_at, "quiet": quiet, "code": second.returncode, "out": out.decode(),
               "err": err.decode(), "requests": requests}


def test_the_resumed_fetch_completes(killed):
    assert killed["code"] == 0, killed["err"]
    assert segment_state(killed["store"], killed["segment"]) == "fetched"
    rows = committed(killed["store"], killed["segment"])
    assert sorted(r["url"] for r in rows) == sorted(killed["urls"])  # every URL, each once
    assert {r["outcome"] for r in rows} == {"ok"}
    assert 0 < len(killed["before"]) < len(killed["urls"])  # the kill was mid-way


def test_no_worker_survived_the_kill(killed):
    assert killed["quiet"] == []


def test_every_committed_row_points_at_a_readable_warc_record(killed):
    folder = killed["store"].segment_dir(killed["segment"])
    for row in committed(killed["store"], killed["segment"]):
        with open(folder / row["warc_file"], "rb") as fh:
            fh.seek(row["warc_offset"])
            record = next(iter(ArchiveIterator(fh)))
            assert record.rec_type == "response"
            assert record.rec_headers.get_header("WARC-Target-URI") == row["url"]
            assert len(record.content_stream().read()) == row["body_bytes"]


def test_warcio_check_accepts_every_warc_file(killed):
    files = sorted((killed["store"].segment_dir(killed["segment"]) / "warc").glob("*.warc.gz"))
    assert files
    warcio = os.path.join(os.path.dirname(sys.executable), "warcio")
    done = subprocess.run([warcio, "check", *map(str, files)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_nothing_half_written_is_left(killed):
    folder = killed["store"].segment_dir(killed["segment"])
    leftovers = [p for p in folder.rglob("*") if p.name.endswith(".tmp") or p.name.endswith(".lock")]
    assert leftovers == []
    assert not (folder / "stats" / "progress").exists()


def test_only_pages_not_committed_before_the_kill_were_requested_again(killed):
    web = killed["web"]
    counts = Counter(web.url(r["host"], r["path"]) for r in killed["requests"] if r["path"] != "/robots.txt")
    again = {u for u, n in counts.items() if n > 1}
    assert max(counts.values()) <= 2
    assert not again & {r["url"] for r in killed["before"]}
    # At most what was in flight or not yet flushed: one request per host per flush interval.
    assert len(again) <= 2 * HOSTS


def test_host_spacing_held_across_the_kill(killed):
    assert assert_polite(killed["requests"]) >= HOSTS * PAGES
