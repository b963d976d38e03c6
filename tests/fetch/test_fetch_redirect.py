"""Redirects followed inline (issue #3): each hop through its host's slot, one fetched row
per hop, at most fetch.max_redirects hops, loops stopped, hosts of other partitions left to
a later cycle. Judged by what the test web's server saw.

The odd host's unlinked ``/chain/{n}/0`` starts a chain of ``n`` same-host redirects,
``/loop/a`` and ``/loop/b`` redirect to each other, and ``/elsewhere/{short}`` redirects to
``/p/0.html`` of another special host.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from cycles.fetch.fetch import fetch_segment
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.storage.store import Store
from testweb.harness import TestWeb
from testweb.model import SPECIAL_HOSTS
from cycles.update.update import update_segment
from cycles.urls import host_hash
from tests.conftest import write_seeds
from tests.support.fetching import (assert_polite, crawldb_rows, fast_config, fetch, host_requests, paths,
                                            results)

pytestmark = pytest.mark.web

ODD = "odd.web.test"


@pytest.fixture(scope="module")
def web():
    with TestWeb(hosts=0, pages=2, page_bytes=2000, special=True, max_seconds=300) as web:
        yield web


def run(web, tmp_path, targets, partitions=1, host="odd"):
    """Fetch the given paths of a host in a fresh store; returns the requests of this fetch,
    the fetched rows, the counters and the outlinks."""
    store = Store(tmp_path / "data")
    before = len(web.requests())
    urls = [web.url(host, t) for t in targets]
    segment, result = fetch(store, fast_config(web), urls, partitions=partitions)
    outlinks = pq.read_table(store.segment_dir(segment) / "outlinks").to_pylist()
    return web.requests()[before:], results(store, segment), result.counters, outlinks


def test_a_same_host_chain_of_three_ends_with_the_page_fetched_in_the_same_cycle(web, tmp_path):
    requests, rows, counters, outlinks = run(web, tmp_path, ["/chain/3/0"])
    chain = [f"/chain/3/{k}" for k in range(4)]
    assert paths(requests, "odd") == ["/robots.txt"] + chain  # each hop once, in order
    assert assert_polite(requests) == 4  # a full delay between each response and the next request
    for k in range(3):
        row = rows[web.url("odd", chain[k])]
        assert (row["outcome"], row["redirect_to"], row["error"]) == ("redirect", web.url("odd", chain[k + 1]), None)
    assert rows[web.url("odd", chain[3])]["outcome"] == "ok"
    assert counters["fetch/redirect_followed"] == 3
    # Each hop's target is still written as an outlink, as before.
    assert {(o["from_url"], o["url"]) for o in outlinks} >= {
        (web.url("odd", chain[k]), web.url("odd", chain[k + 1])) for k in range(3)}


def test_a_chain_of_seven_stops_after_five_hops(web, tmp_path):
    requests, rows, counters, _ = run(web, tmp_path, ["/chain/7/0"])
    assert paths(requests, "odd") == ["/robots.txt"] + [f"/chain/7/{k}" for k in range(6)]
    last = rows[web.url("odd", "/chain/7/5")]
    assert (last["outcome"], last["error"]) == ("redirect", "too many redirects")
    assert last["redirect_to"] == web.url("odd", "/chain/7/6")
    assert web.url("odd", "/chain/7/6") not in rows
    assert counters["fetch/redirect_followed"] == 5 and counters["fetch/redirect_too_many"] == 1
    assert_polite(requests)


def test_a_redirect_loop_requests_each_url_once(web, tmp_path):
    requests, rows, counters, _ = run(web, tmp_path, ["/loop/a"])
    assert paths(requests, "odd") == ["/robots.txt", "/loop/a", "/loop/b"]
    assert rows[web.url("odd", "/loop/a")]["error"] is None
    back = rows[web.url("odd", "/loop/b")]
    assert (back["outcome"], back["redirect_to"], back["error"]) == ("redirect", web.url("odd", "/loop/a"), "redirect loop")
    assert counters["fetch/redirect_loop"] == 1


def test_a_target_already_in_the_fetch_list_is_fetched_once(web, tmp_path):
    requests, rows, counters, _ = run(web, tmp_path, ["/chain/3/0", "/chain/3/2"])
    assert sorted(paths(requests, "odd")) == sorted(["/robots.txt"] + [f"/chain/3/{k}" for k in range(4)])
    assert len(rows) == 4
    assert counters["fetch/redirect_already_listed"] == 1


def test_the_target_hosts_robots_txt_applies(web, tmp_path):
    """A redirect to a path the target host disallows: its robots.txt is asked, the path never."""
    requests, rows, _, _ = run(web, tmp_path, ["/elsewhere/robots-disallow/private"])
    assert paths(requests, "robots-disallow") == ["/robots.txt"]
    assert rows[web.url("robots-disallow", "/private/a.html")]["outcome"] == "robots_denied"
    assert_polite(requests)


def test_a_target_on_a_host_of_another_partition_waits_for_a_later_cycle(web, tmp_path):
    partitions = 2
    mine = host_hash(ODD) % partitions
    others = [s for s in SPECIAL_HOSTS if s != "odd" and "503" not in s]
    same = next(s for s in others if host_hash(f"{s}.web.test") % partitions == mine)
    other = next(s for s in others if host_hash(f"{s}.web.test") % partitions != mine)
    requests, rows, counters, outlinks = run(web, tmp_path, [f"/elsewhere/{same}", f"/elsewhere/{other}"],
                                             partitions=partitions)
    assert host_requests(requests, other) == []
    assert web.url(other, "/p/0.html") not in rows
    assert counters["fetch/redirect_other_partition"] == 1
    assert web.url(other, "/p/0.html") in {o["url"] for o in outlinks}
    # A host of our own partition is followed, robots.txt first.
    assert paths(requests, same) == ["/robots.txt", "/p/0.html"]
    assert rows[web.url(same, "/p/0.html")]["outcome"] == "ok"
    assert_polite(requests, delays={"robots-delay.web.test": 2.0})


def test_a_cycle_puts_every_hop_in_the_crawl_db(web, tmp_path):
    """generate -> fetch -> update: the chain's targets, fetched inline, are crawl DB rows of
    their own (update inserts a result for a URL it did not know), each hop redirected to the
    next and the last one fetched."""
    store = Store(tmp_path / "data")
    config = fast_config(web)
    chain = [web.url("odd", f"/chain/3/{k}") for k in range(4)]
    inject(store, config, write_seeds(tmp_path / "seeds.txt", chain[:1]))
    segment = generate(store, config).segment
    before = len(web.requests())
    fetch_segment(store, config, segment)
    update_segment(store, config, segment)
    assert paths(web.requests()[before:], "odd") == ["/robots.txt"] + [f"/chain/3/{k}" for k in range(4)]
    db = crawldb_rows(store)
    for k in range(3):
        assert (db[chain[k]]["status"], db[chain[k]]["redirect_to"]) == ("redirected", chain[k + 1])
    assert db[chain[3]]["status"] == "fetched" and db[chain[3]]["last_fetched"] is not None
