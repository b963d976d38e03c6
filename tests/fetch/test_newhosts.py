"""New hosts fetched inside the fetch (cycles/tables/newhosts.py): a host nobody knows is
claimed by exactly one worker, across processes and segments in flight, and fetched in the
segment that found it — judged by the claims, the rows written and what the server saw.

- fast tier: the claim is created once among racing writers; a worker claims an unknown host
  once, never a known one, another partition's or another pending segment's; an overlapped
  generate leaves out a host a fetch in flight claimed and claims its own new hosts there;
- one small web seeded at one host (two fetch processes): new hosts are fetched in the first
  segment, robots.txt first, each by one partition, within the budget, politely, once;
- ``crawl run --generate-ahead`` from that one seed: no host fetched by two segments at once,
  every URL once, one crawl DB row each; a run killed by SIGKILL is finished by the next.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter, defaultdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cycles.tables import segment as seg
from cycles.storage.bloom import BloomFilter
from cycles.config import Config
from cycles.fetch.fetch import fetch_segment
from cycles.tables.newhosts import (NewHosts, claim_body, claimed_hosts, create_if_absent, leave_out_claimed,
                                   read_claim, read_known_hosts)
from cycles.generate.generate import generate
from cycles.generate.mode import RunMode
from cycles.commands.inject import inject
from cycles.commands.run import RunState, run_crawl
from cycles.storage.store import Store, new_id
from cycles.update.update import update_segment
from cycles.urls import url_host
from testweb.harness import TestWeb
from tests.conftest import kill_when, write_seeds
from tests.support.processes import committed, toml_config
from tests.support.fetching import assert_polite, crawldb_rows, fast_config, results
from tests.support.processes import crawldb_urls, fetchlist_hosts


# --- fast tier: the claim, the worker's verdicts, generate's side ---------------------------
def generated_segment(store: Store, known: list[str], state: type = seg.Generated) -> str:
    """A segment folder with a Generated marker (and ``state``'s) and a known-hosts filter."""
    segment = new_id()
    folder = store.segment_dir(segment, must_exist=False)
    bloom = BloomFilter(1000, 0.001)
    bloom.add_new(known)
    store.write_bytes(seg.known_hosts_file(folder), bloom.to_bytes())
    seg.write_marker(store, seg.Generated(segment, generated_at="2026-01-01T00:00:00+00:00", urls=1, hosts=1,
                                          partitions=2, lease_until="2999-01-01T00:00:00+00:00"))
    if state is seg.Fetched:
        seg.write_marker(store, seg.Fetched(segment))
    return segment


def worker(store: Store, segment: str, partition: int) -> tuple[NewHosts, Counter]:
    stats: Counter = Counter()
    hosts = NewHosts(store, store.segment_dir(segment), segment, partition, stats)
    hosts.load()
    return hosts, stats


def test_a_claim_is_created_once_among_racing_writers(store):
    path = store.path("segments", "x", "newhosts", "h.test.json")
    won: list[int] = []
    barrier = threading.Barrier(8)

    def race(n: int) -> None:
        barrier.wait()
        if create_if_absent(store, path, claim_body("x", n, "h.test")):
            won.append(n)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert read_claim(store, path) == {"host": "h.test", "segment": "x", "partition": won[0]}
    assert [p.name for p in path.parent.iterdir()] == ["h.test.json"]  # no temporary left behind


def test_claimed_hosts_are_read_back_from_the_claim_names(store):
    segment = generated_segment(store, [])
    folder = store.segment_dir(segment)
    hosts = {"h1.web.test", "[::1]", "xn--bcher-kva.example", "a_b-c.test"}
    for host in hosts:
        assert create_if_absent(store, seg.newhost_claim_file(folder, host), claim_body(segment, 0, host))
    assert claimed_hosts(store, segment) == hosts


def test_a_worker_claims_an_unknown_host_once_and_never_a_known_one(store):
    segment = generated_segment(store, ["known.test"])
    first, stats = worker(store, segment, 0)
    second, other_stats = worker(store, segment, 1)
    assert first.is_new("new.test") and not first.is_new("known.test")
    assert first.claim("new.test") and first.claim("new.test")  # asked twice, claimed once
    assert not second.claim("new.test")
    assert not first.claim("known.test")
    assert stats["discover/new_host_claimed"] == 1 and stats["discover/new_host_known"] == 1
    assert other_stats["discover/new_host_taken"] == 1
    # A resumed run of partition 0 (after a crash) reads its own claim back and keeps the host.
    resumed, _ = worker(store, segment, 0)
    assert resumed.claim("new.test")
    assert claimed_hosts(store, segment) == {"new.test"}


def test_a_segment_without_a_known_hosts_filter_claims_nothing(store):
    segment = generated_segment(store, [])
    store.delete(seg.known_hosts_file(store.segment_dir(segment)))
    hosts, _ = worker(store, segment, 0)
    assert not hosts.enabled and not hosts.is_new("new.test") and not hosts.claim("new.test")
    assert claimed_hosts(store, segment) == set()


def test_a_host_another_pending_segment_claimed_is_not_claimed_again(store):
    earlier = generated_segment(store, [], state=seg.Fetched)  # fetched, not yet updated
    assert create_if_absent(store, seg.newhost_claim_file(store.segment_dir(earlier), "x.test"),
                            claim_body(earlier, 0, "x.test"))
    later = generated_segment(store, [])
    hosts, stats = worker(store, later, 0)
    assert not hosts.claim("x.test") and hosts.claim("y.test")
    assert stats["discover/new_host_taken"] == 1
    # Once the earlier segment is updated its hosts are in the crawl DB (the later segment's
    # filter then holds them); its claims no longer count.
    seg.write_marker(store, seg.Updated(earlier))
    assert worker(store, later, 0)[0].claim("x.test")


def test_leave_out_claimed_drops_a_claimed_host_and_claims_the_others_new_hosts(store):
    in_flight = generated_segment(store, ["known.test"])
    folder = store.segment_dir(in_flight)
    fetch_worker, _ = worker(store, in_flight, 1)
    assert fetch_worker.claim("taken.test")
    selected = pa.table({"url": [f"http://{h}/" for h in ("known.test", "taken.test", "free.test")],
                         "host": ["known.test", "taken.test", "free.test"]})
    counters: Counter = Counter()
    kept = leave_out_claimed(store, "later", selected, counters)
    assert kept["host"].to_pylist() == ["known.test", "free.test"]
    assert counters["generate/new_hosts_left_out"] == 1
    # free.test is now claimed in the in-flight segment for the later one: its workers keep off.
    assert read_claim(store, seg.newhost_claim_file(folder, "free.test"))["segment"] == "later"
    assert not worker(store, in_flight, 0)[0].claim("free.test")
    # known.test: the in-flight segment's workers never claim it, so nothing is written.
    assert not store.exists(seg.newhost_claim_file(folder, "known.test"))
    # A second pass (a retried generate of the same segment) keeps what it claimed.
    assert leave_out_claimed(store, "later", selected)["host"].to_pylist() == ["known.test", "free.test"]


def test_an_overlapped_generate_leaves_out_a_host_the_fetch_in_flight_claimed(store, tmp_path):
    config = Config()
    config.generate.partitions = 2
    inject(store, config, write_seeds(tmp_path / "a.txt", ["http://a.test/", "http://b.test/"]))
    first = generate(store, config, top_n=1).segment  # a.test or b.test
    known = read_known_hosts(store, store.segment_dir(first))
    assert known is not None and "a.test" in known and "b.test" in known and "c.test" not in known
    # The first segment's fetch claims c.test and d.test; meanwhile an update adds them (and e.test) to the crawl DB.
    fetch_worker, _ = worker(store, first, 0)
    assert fetch_worker.claim("c.test") and fetch_worker.claim("d.test")
    inject(store, config, write_seeds(tmp_path / "b.txt", ["http://c.test/", "http://d.test/", "http://e.test/"]))
    second = generate(store, config, top_n=100, mode=RunMode(exclude_hosts_in_flight=True)).segment
    hosts = fetchlist_hosts(store, second)
    assert hosts == {"a.test", "b.test", "e.test"} - fetchlist_hosts(store, first)
    assert not fetch_worker.claim("e.test") and not worker(store, first, 1)[0].claim("e.test")
    # The second segment's filter knows the first one's claims (a pending segment's), even
    # of a host not in the crawl DB yet: its workers leave z.test to the first segment.
    assert fetch_worker.claim("z.test")
    third = generate(store, config, top_n=100).segment  # c.test and d.test, left out of the second
    assert "z.test" in read_known_hosts(store, store.segment_dir(third))
    assert not worker(store, third, 0)[0].claim("z.test")


# --- one small web seeded at one host: one segment, two partitions in two processes ---------
HOSTS, PAGES, BUDGET = 6, 8, 3


def new_hosts_config(web, **fetch) -> Config:
    config = fast_config(web, **{"follow_outlinks_depth": 2, "follow_outlinks_per_host": BUDGET, **fetch})
    config.fetch.flush_s = 0.5
    config.db.buckets = 2
    return config


def partitions_by_host(store: Store, segment: str) -> dict[str, set[int]]:
    """host → the partitions whose fetched files hold its rows."""
    found: dict[str, set[int]] = defaultdict(set)
    for path in seg.files(store, segment, seg.FETCHED):
        part = int(path.name.split("-")[1])
        for host in set(pq.read_table(path, columns=["host"])["host"].to_pylist()):
            found[host].add(part)
    return found


@pytest.fixture(scope="module")
def one_seed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("newhosts")
    with TestWeb(hosts=HOSTS, pages=PAGES, page_bytes=1500, special=False, max_seconds=150) as web:
        store = Store(tmp / "data")
        config = new_hosts_config(web, processes=2)
        config.generate.partitions = 2
        # Two seeds, one a partition: both workers find links to the same new hosts.
        inject(store, config, write_seeds(tmp / "seeds.txt", [web.url("h0"), web.url("h3")]))
        segment = generate(store, config).segment
        counters = fetch_segment(store, config, segment).counters
        update_segment(store, config, segment)
        yield web, store, [(segment, counters, web.requests())]


@pytest.mark.web
def test_new_hosts_are_fetched_in_the_segment_that_found_them_each_by_one_partition(one_seed):
    web, store, cycles = one_seed
    segment, counters, requests = cycles[0]
    listed = fetchlist_hosts(store, segment)
    assert listed == {"h0.web.test", "h3.web.test"}
    assert len(seg.partitions_of(store, segment)) == 2
    claims = {host: read_claim(store, seg.newhost_claim_file(store.segment_dir(segment), host))
              for host in claimed_hosts(store, segment)}
    asked = {r["host"] for r in requests}
    assert claims and set(claims) == asked - listed
    assert counters["discover/new_host_claimed"] == len(claims)
    # Claims of both partitions: each host went to the one whose create came first.
    assert len({c["partition"] for c in claims.values()}) == 2, claims
    by_host = partitions_by_host(store, segment)
    for host, claim in claims.items():
        assert claim["segment"] == segment
        assert by_host[host] == {claim["partition"]}, (host, by_host[host], claim)


@pytest.mark.web
def test_a_new_host_is_asked_for_robots_txt_first_and_within_the_budget(one_seed):
    web, store, cycles = one_seed
    segment, _, requests = cycles[0]
    for host in claimed_hosts(store, segment):
        rows = sorted((r for r in requests if r["host"] == host), key=lambda r: r["t_start"])
        assert rows[0]["path"] == "/robots.txt", (host, [r["path"] for r in rows])
        assert 1 <= len([r for r in rows if r["path"] != "/robots.txt"]) <= BUDGET, host


@pytest.mark.web
def test_new_hosts_rows_are_merged_once_and_every_url_is_asked_once(one_seed):
    web, store, cycles = one_seed
    all_requests = [r for _, _, requests, in cycles for r in requests]
    asked = Counter(web.url(r["host"], r["path"]) for r in all_requests if r["path"] != "/robots.txt")
    assert max(asked.values()) == 1, [u for u, n in asked.items() if n > 1]
    assert not web.requested_urls(all_requests) & web.must_not_request()
    assert assert_polite(all_requests) >= len(asked)
    rows = crawldb_rows(store)
    assert len(crawldb_urls(store)) == len(rows)  # no URL has two rows
    first, _, _ = cycles[0]
    fetched = results(store, first)  # fails if a URL has two rows in the segment
    new = {u for u, r in fetched.items() if r["host"] in claimed_hosts(store, first) and r["outcome"] == "ok"}
    assert new
    for url in new:
        assert rows[url]["status"] == "fetched" and rows[url]["last_fetched"] is not None, url


# --- crawl run --generate-ahead from one seed; then a run killed and finished ---------------
RUN_HOSTS, RUN_PAGES = 5, 3


def worker_claims(store: Store, segment: str) -> set[str]:
    """Hosts a fetch worker of ``segment`` claimed (not those a later generate claimed there)."""
    folder = store.segment_dir(segment)
    return {h for h in claimed_hosts(store, segment)
            if read_claim(store, seg.newhost_claim_file(folder, h)).get("partition") is not None}


@pytest.fixture(scope="module")
def run_ahead(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("newhosts-run")
    with TestWeb(hosts=RUN_HOSTS, pages=RUN_PAGES, page_bytes=1500, special=False, max_seconds=150) as web:
        store = Store(tmp / "data")
        config = new_hosts_config(web, processes=1, follow_outlinks_per_host=2)
        config.generate.partitions = 2
        config.fetch.max_duration_s = 4.0  # short segments: several in flight while new hosts turn up
        inject(store, config, write_seeds(tmp / "seeds.txt", [web.url("h0")]))
        state = RunState()
        log = list(run_crawl(store, config, seconds=100, top_n=4, state=state, generate_ahead=True))
        yield {"web": web, "store": store, "log": log, "state": state, "requests": web.requests()}


@pytest.mark.web
def test_no_host_is_fetched_by_two_segments_in_flight(run_ahead):
    store = run_ahead["store"]
    assert run_ahead["state"].stopped_by == "nothing due", run_ahead["log"]
    ids = seg.segment_ids(store)
    assert sum(len(worker_claims(store, s)) for s in ids) >= 2
    for i, earlier in enumerate(ids):
        done = seg.read_marker(store, earlier, seg.Fetched).fetched_at
        mine = fetchlist_hosts(store, earlier) | worker_claims(store, earlier)
        for later in ids[i + 1:]:
            if seg.read_marker(store, later, seg.Generated).generated_at < done:
                theirs = fetchlist_hosts(store, later) | worker_claims(store, later)
                # Generated while ``earlier`` was fetched, ``later`` may go on with its
                # fetch-list hosts (cycles/commands/run.py generate_ahead), never with a host its
                # workers claimed, and is fetched only once ``earlier`` has ended.
                assert not worker_claims(store, earlier) & theirs, (earlier, later)
                if mine & theirs:
                    assert seg.read_marker(store, later, seg.Fetching).started_at >= done, (earlier, later)


@pytest.mark.web
def test_a_run_with_new_hosts_fetches_every_url_once_politely_with_one_row_each(run_ahead):
    web, store = run_ahead["web"], run_ahead["store"]
    reachable = web.expected_reachable([web.url("h0")])
    asked = Counter(web.url(r["host"], r["path"]) for r in run_ahead["requests"] if r["path"] != "/robots.txt")
    assert set(asked) == reachable
    assert max(asked.values()) == 1, [u for u, n in asked.items() if n > 1]
    assert assert_polite(run_ahead["requests"]) >= len(reachable)
    rows = crawldb_rows(store)
    assert len(crawldb_urls(store)) == len(rows)
    assert all(rows[u]["last_fetched"] is not None for u in reachable)


def crawl(store: Store, config, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cycles", "--data", str(store.root), "--config", str(config),
                             "-s", "fetch.follow_outlinks_per_host=2", "-s", "fetch.max_duration_s=4", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=os.getcwd())


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("newhosts-kill")
    with TestWeb(hosts=RUN_HOSTS, pages=RUN_PAGES, page_bytes=1500, special=False, max_seconds=150) as web:
        store = Store(tmp / "data")
        config = tmp / "crawl.toml"
        toml_config(web, config)
        with open(config, "a") as fh:
            fh.write("\n[db]\nbuckets = 2\n[generate]\npartitions = 2\n")
        cfg = Config()
        cfg.db.buckets = 2
        inject(store, cfg, write_seeds(tmp / "seeds.txt", [web.url("h0")]))
        first = crawl(store, config, "run", "--top-n", "4")
        try:
            # Killed once a worker claimed a new host and committed some of its pages.
            kill_when(first, lambda: any(r["host"] in worker_claims(store, s)
                                         for s in seg.segment_ids(store) for r in committed(store, s)),
                      within_s=60)
        finally:
            first.kill()
        before = [r for s in seg.segment_ids(store) for r in committed(store, s)]
        second = crawl(store, config, "run", "--top-n", "4", "--seconds", "100")
        try:
            out, err = second.communicate(timeout=140)
        finally:
            second.kill()
        yield {"web": web, "store": store, "before": before, "second": (second.returncode, out, err),
               "requests": web.requests()}


@pytest.mark.web
def test_a_run_killed_while_fetching_new_hosts_is_finished_by_the_next(killed_run):
    web, store = killed_run["web"], killed_run["store"]
    code, out, err = killed_run["second"]
    assert code == 0 and "stopped (nothing due)" in out, (out, err)
    assert not [s for s, st in seg.states(store) if st in seg.PENDING]
    urls = crawldb_urls(store)
    assert len(urls) == len(set(urls))
    rows = crawldb_rows(store)
    reachable = web.expected_reachable([web.url("h0")])
    assert all(rows[u]["status"] == "fetched" for u in reachable), [u for u in reachable if rows[u]["status"] != "fetched"]
    asked = Counter(web.url(r["host"], r["path"]) for r in killed_run["requests"] if r["path"] != "/robots.txt")
    assert set(asked) == reachable
    # Asked again only if not committed before the kill (in flight or not yet flushed).
    assert all(asked[r["url"]] == 1 for r in killed_run["before"] if r["outcome"] == "ok")
    assert max(asked.values()) <= 2
    assert assert_polite(killed_run["requests"]) >= len(reachable)
    assert {url_host(u) for u in reachable} == {r["host"] for r in killed_run["requests"]}
