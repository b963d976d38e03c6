"""Ending a fetch early on request (cycles/fetch/fetch.py ``request_early_end``, the worker's
``EARLY_END_FILE``): what ``crawl run`` does to a thin segment when the update beside it
ends. Judged by what the server saw and what the segment holds."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from cycles.fetch.fetch import fetch_segment, request_early_end
from cycles.fetch.partition import progress_dir
from cycles.fetch.tail import EARLY_END_FILE
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.storage.store import Store
from cycles.update.update import update_segment
from testweb.harness import TestWeb
from tests.conftest import write_seeds
from tests.support.fetching import assert_polite, crawldb_rows, fast_config, results


@pytest.mark.web
def test_a_fetch_asked_to_end_hands_back_what_it_did_not_reach_and_finishes(tmp_path):
    with TestWeb(hosts=2, pages=12, page_bytes=2000, special=False, max_seconds=120) as web:
        store = Store(tmp_path / "data")
        config = fast_config(web)
        config.fetch.follow_outlinks_depth = 0
        config.fetch.max_duration_s = 60.0  # far off: only the request ends it
        slow = [web.url("h0", f"/p/{k}.html") for k in range(10)]
        inject(store, config, write_seeds(tmp_path / "seeds.txt", slow))
        segment = generate(store, config).segment
        # A stale request (an interrupted earlier fetch of the segment) is not for this fetch.
        request_early_end(store, segment)
        asked = threading.Event()

        def end_after_two_pages():
            while not asked.wait(0.05):
                if sum(1 for r in web.requests() if r["path"].startswith("/p/")) >= 2:
                    asked.set()
            request_early_end(store, segment)

        ender = threading.Thread(target=end_after_two_pages, daemon=True)
        ender.start()
        try:
            counters = fetch_segment(store, config, segment).counters
        finally:
            asked.set()
            ender.join(timeout=10)
        update_segment(store, config, segment)
        requests = web.requests()
    fetched = set(results(store, segment))
    back = set(slow) - fetched
    # summed over the partitions
    assert counters["fetch/end_requested"] >= 1 and counters.get("fetch/time_limit_stop", 0) == 0
    assert counters["fetch/handed_back"] == len(back) and 2 <= len(fetched) < len(slow)
    db = crawldb_rows(store)
    assert all(db[u]["status"] == "unfetched" and db[u]["last_fetched"] is None for u in back)
    pages = Counter(r["path"] for r in requests if r["path"].startswith("/p/"))
    assert len(pages) == len(fetched) and max(pages.values()) == 1
    assert not (progress_dir(store, segment) / EARLY_END_FILE).exists()  # cleared with the fetch
    assert_polite(requests)
