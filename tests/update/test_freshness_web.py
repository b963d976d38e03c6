"""Recrawl by change rate, on the test web's changing host over simulated days.

The crawler's clock (cycles.clock, CRAWL_CLOCK_OFFSET_S) and the web's virtual clock move
in step; fetching is real and as polite as ever (politeness runs on real time).
"""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict

import pyarrow.parquet as pq
import pytest

from cycles import clock
from cycles.fetch.fetch import fetch_segment
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from testweb.harness import TestWeb
from testweb.model import CLOCK_START
from cycles.update.update import update_segment
from tests.conftest import config_for
from tests.support.transitions import rows

pytestmark = pytest.mark.web

HOUR = 3600


@pytest.fixture
def virtual_time(monkeypatch):
    def shift(web, t):
        offset = t - time.time()
        monkeypatch.setenv(clock.OFFSET_ENV, repr(offset))
        web.set_clock(offset=offset)
    yield shift
    os.environ.pop(clock.OFFSET_ENV, None)


def test_pages_are_revisited_by_how_often_they_change(store, tmp_path, virtual_time):
    with TestWeb(hosts=0, pages=1, special=False, changing=True, max_seconds=300) as web:
        config = config_for(web)
        config.update.default_interval_s = 12 * HOUR
        config.update.min_interval_s = 2 * HOUR
        changing = sorted(u for u in web.expected_reachable(web.seeds()) if "/c/" in u)
        # Politeness makes every fetch cost a real second: crawl three fast and three static pages.
        # Fast: every 4 h. The hourly pages change faster than min_interval_s lets us follow;
        # their Last-Modified tells so, and they are left for longer (tests/update/test_schedule.py).
        pages = ([u for u in changing if web.change_period(u) == 4 * HOUR][:3]
                 + [u for u in changing if web.change_period(u) is None][:3])
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("\n".join(pages) + "\n")
        t = float(CLOCK_START)
        virtual_time(web, t)
        inject(store, config, seeds)
        fetched = defaultdict(int)
        outcomes = Counter()
        for _ in range(9):  # two simulated days in 6-hour steps
            virtual_time(web, t)
            segment = generate(store, config).segment
            if segment:
                fetch_segment(store, config, segment)
                update_segment(store, config, segment)
                for row in pq.read_table(store.segment_dir(segment) / "fetched").to_pylist():
                    fetched[row["url"]] += 1
                    outcomes[row["outcome"]] += 1
            t += 6 * HOUR
        db = rows(store)
        requests = web.requests()
    fast = [u for u in pages if web.change_period(u) == 4 * HOUR]
    static = [u for u in pages if web.change_period(u) is None]
    assert fast and static
    assert min(fetched[u] for u in fast) > max(fetched[u] for u in static)
    for url in static:
        assert db[url]["change_count"] == 0
        assert db[url]["fetch_interval_s"] > config.update.default_interval_s  # grew
    for url in fast:
        assert db[url]["fetch_interval_s"] < config.update.default_interval_s
    # Unchanged pages were asked with validators and answered 304 without a body.
    assert outcomes["not_modified"] > 0
    conditional = [r for r in requests if r["if_none_match"]]
    assert conditional and all(r["status"] in (200, 304) for r in conditional)
