"""Sites that never end: the test web's trap hosts, crawled for real.

Each trap host has eleven good pages that all link into an endless URL space (a calendar,
session ids, repeating paths, ID sequences). The crawler must harvest every good page while
the trap stays within the per-pattern budget, judged from the server's request log.
"""

from __future__ import annotations

from collections import defaultdict

import duckdb

import pytest

from cycles.tables.crawldb import url_pattern_sql
from cycles.commands.cycle import run_cycles
from cycles.commands.inject import inject
from testweb.harness import TestWeb
from tests.conftest import config_for, write_seeds

pytestmark = pytest.mark.web

# The good pages share one pattern (/p/N.html): the budget must leave room for them, as on
# the real web, where legitimate sites have thousands of /article/N pages.
PER_CYCLE, TOTAL = 5, 12


def test_traps_stay_within_budget_while_good_pages_are_harvested(store, tmp_path):
    with TestWeb(hosts=0, pages=1, special=False, traps=True, max_seconds=300) as web:
        config = config_for(web)
        config.generate.max_urls_per_pattern = PER_CYCLE
        config.update.max_urls_per_pattern = TOTAL
        inject(store, config, write_seeds(tmp_path / "seeds.txt", web.seeds()))
        log = list(run_cycles(store, config, cycles=6))
        requests = web.requests()
    fetched = defaultdict(set)
    for r in requests:
        if r["path"] != "/robots.txt":
            host = r["host_header"].split(":")[0]
            fetched[host].add(web.url(host, r["path"]))
    assert set(web.trap_hosts()) <= set(fetched), log
    con = duckdb.connect()
    for host in web.trap_hosts():
        good = set(web.good_pages(host))
        assert good <= fetched[host], (host, sorted(good - fetched[host]))
        trap = sorted(u for u in fetched[host] if web.is_trap(u))
        per_pattern = con.execute(f"SELECT {url_pattern_sql('u')} AS p, count(*) FROM unnest($u) t(u) GROUP BY p",
                                  {"u": trap}).fetchall() if trap else []
        for pattern, count in per_pattern:
            assert count <= TOTAL, (host, pattern, count)
