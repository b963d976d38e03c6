"""``crawl cycle`` is crash-only: killed with SIGKILL in the middle of a fetch, run again it
resumes and updates the interrupted segment (it printed "no URL is due" and left the URLs
leased for 6 hours); a second ``crawl cycle`` at once exits with one line and leases
nothing (it leased URLs, then died on the fetch lock with a traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter

import pytest

from cycles.tables import segment as seg
from cycles.config import Config
from cycles.commands.inject import inject
from cycles.storage.store import Store
from testweb.harness import TestWeb
from tests.conftest import kill_when, write_seeds
from tests.support.processes import committed, toml_config
from tests.support.fetching import crawldb_rows

HOSTS, PAGES = 24, 8


def crawl(store: Store, config, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cycles", "--data", str(store.root), "--config", str(config),
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=os.getcwd())


def setup_crawl(tmp_path, web) -> tuple[Store, object, list[str]]:
    store = Store(tmp_path / "data")
    config = tmp_path / "crawl.toml"
    toml_config(web, config)
    # Only the listed pages: the cycle's update adds their links, never fetched here.
    with open(config, "a") as fh:
        fh.write("\n[db]\nbuckets = 2\n")
    urls = [web.url(f"h{i}", f"/p/{k}.html") for i in range(HOSTS) for k in range(PAGES)]
    cfg = Config()
    cfg.db.buckets = 2
    inject(store, cfg, write_seeds(tmp_path / "seeds.txt", urls))
    return store, config, urls


def segment_ids(store: Store) -> list[str]:
    return seg.segment_ids(store)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


@pytest.mark.web
def test_a_cycle_killed_mid_fetch_is_resumed_and_updated_by_the_next(tmp_path):
    with TestWeb(hosts=HOSTS, pages=PAGES, page_bytes=3000, special=False, max_seconds=150) as web:
        store, config, urls = setup_crawl(tmp_path, web)
        first = crawl(store, config, "cycle", "--cycles", "1")
        try:
            kill_when(first, lambda: bool(segment_ids(store)) and len(committed(store, segment_ids(store)[0])) >= 20,
                      within_s=60)
        finally:
            stop(first)
        segment = segment_ids(store)[0]
        before = committed(store, segment)
        time.sleep(1.0)
        second = crawl(store, config, "cycle", "--cycles", "1")
        try:
            out, err = second.communicate(timeout=90)
        finally:
            stop(second)
        assert second.returncode == 0, err
        assert "no URL is due" not in out and f"resuming segment {segment}" in out, out
        assert segment_ids(store) == [segment] and seg.state(store, segment) == seg.State.UPDATED
        db = crawldb_rows(store)
        assert all(db[u]["last_fetched"] is not None for u in urls)
        # At least once, at most twice: only what the killed run had not committed yet.
        asked = Counter(web.url(r["host"].split(".")[0], r["path"]) for r in web.requests()
                        if r["path"].startswith("/p/"))
        assert set(asked) == set(urls)
        assert all(asked[r["url"]] == 1 for r in before)
        assert max(asked.values()) <= 2


@pytest.mark.web
def test_a_second_cycle_at_once_exits_with_one_line_and_leases_nothing(tmp_path):
    with TestWeb(hosts=HOSTS, pages=PAGES, page_bytes=3000, special=False, max_seconds=150) as web:
        store, config, urls = setup_crawl(tmp_path, web)
        first = crawl(store, config, "cycle", "--cycles", "1", "--top-n", "60")
        try:
            deadline = time.monotonic() + 60
            while not segment_ids(store) or seg.state(store, segment_ids(store)[0]) != seg.State.FETCHING:
                assert first.poll() is None and time.monotonic() < deadline, first.communicate()
                time.sleep(0.05)
            second = crawl(store, config, "cycle", "--cycles", "1", "--top-n", "60")
            out, err = second.communicate(timeout=60)
            generate = crawl(store, config, "generate", "--top-n", "60")
            g_out, g_err = generate.communicate(timeout=60)
            first_out, first_err = first.communicate(timeout=90)
        finally:
            stop(first)
        assert second.returncode == 2 and generate.returncode == 2, (err, g_err)
        for text in (err, g_err):
            assert "Traceback" not in text and len(text.strip().splitlines()) == 1 and "nothing was generated" in text
        assert first.returncode == 0, first_err
        assert len(segment_ids(store)) == 1  # neither the loser nor generate made a segment
        assert seg.state(store, segment_ids(store)[0]) == seg.State.UPDATED
