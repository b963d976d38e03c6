"""Hosts sharing a server share one politeness slot (``generate.partition_by = 'ip'``),
judged by what the one server saw; and the frontier's shared gate (no network)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from cycles.fetch.frontier import Frontier
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from tests.support.fetching import assert_polite, fast_config, fetch
from testweb.harness import TestWeb


def test_hosts_of_one_gate_wait_for_each_other():
    frontier = Frontier(key_of=lambda host: "server")
    a, b = frontier.slot("a.test"), frontier.slot("b.test")
    assert a.gate is b.gate
    for slot in (a, b):
        slot.queue.append(f"http://{slot.host}/")
        frontier.schedule(slot)
    first = frontier.pop_ready(1.0)
    frontier.started(first)
    assert frontier.pop_ready(1.0) is None  # the other name waits while one is in flight
    first.in_flight = False
    first.queue.clear()
    frontier.finished(first, spaced_until=3.0)
    assert frontier.pop_ready(2.9) is None  # ... and the delay after it
    second = frontier.pop_ready(3.0)
    assert second is not None and second is not first


def test_without_a_key_every_host_is_its_own_slot():
    frontier = Frontier()
    assert frontier.slot("a.test").gate is None


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    """Two host names of the test web pinned to one loopback address."""
    with TestWeb(hosts=2, pages=3, page_bytes=1000, special=False, max_seconds=120) as web:
        yield web


def one_server_urls(web) -> tuple[dict, list[str]]:
    """The resolve map with the second host's name on the first host's address, and two
    pages under each name (the server answers both as the first host)."""
    resolve = dict(web.resolve_map())
    resolve["h1.web.test"] = resolve["h0.web.test"]
    return resolve, [web.url(name, path) for name in ("h0", "h1") for path in ("/", "/p/0.html")]


@pytest.mark.web
@pytest.mark.parametrize("partition_by", ["ip", "host"])
def test_two_names_on_one_address_are_spaced_as_one_server(shared_server, tmp_path, partition_by):
    from cycles.storage.store import Store

    web = shared_server
    start = len(web.requests())
    resolve, urls = one_server_urls(web)
    config = fast_config(web, processes=1)
    config.fetch.resolve = resolve
    config.generate.partition_by = partition_by
    fetch(Store(tmp_path / "data"), config, urls)
    address = resolve[urlsplit(urls[0]).hostname]
    seen = [r for r in web.requests()[start:] if r["ip"] == address]
    assert {r["host_header"].split(":")[0] for r in seen} == {urlsplit(u).hostname for u in urls}
    assert len(seen) == 6  # robots.txt and two pages under each name
    by_server = [{**r, "host": "one server"} for r in seen]
    if partition_by == "ip":
        assert assert_polite(by_server) == 5
    else:
        # Each name its own slot: the server sees both at once (what partition_by = ip prevents).
        with pytest.raises(AssertionError):
            assert_polite(by_server)


def test_generate_puts_names_of_one_address_in_one_partition(store, tmp_path):
    from cycles.config import Config

    config = Config()
    config.generate.partitions = 4
    config.generate.partition_by = "ip"
    config.fetch.resolve = {f"n{i}.web.test": f"127.0.1.{i % 2}" for i in range(6)}
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(f"http://n{i}.web.test/p{p}\n" for i in range(6) for p in range(2)))
    inject(store, config, seeds)
    import pyarrow.parquet as pq

    from cycles.tables.assign import Assignment

    folder = store.segment_dir(generate(store, config).segment)
    listed = {h: part for part in range(4)
              for h in pq.read_table(folder / "fetchlist" / f"part-{part:05d}.parquet")["host"].to_pylist()}
    owner = Assignment.read(store, folder, config, 4).partition_of
    assert all(owner(h) == part for h, part in listed.items()) and len(listed) == 6
    assert len({listed[f"n{i}.web.test"] for i in (0, 2, 4)}) == 1
    assert len({listed[f"n{i}.web.test"] for i in (1, 3, 5)}) == 1
    assert len(set(listed.values())) == 2


def test_a_host_outside_the_fetch_list_goes_with_its_slot_key(store):
    """A redirect or discovery target on a domain whose hosts partition 1 fetches is partition
    1's too: another worker taking it would ask the same server at the same time."""
    from cycles.tables import schema
    from cycles.tables import segment as seg
    from cycles.config import Config
    from cycles.fetch.inline import InlineFetches
    from cycles.tables.assign import assignment_table
    from cycles.urls import host_hash

    seg_dir = store.path("segments", "s1")
    groups = [3, 2, 0, 1, 2, 3, 0, 1]
    store.write_table(seg.assignment_file(seg_dir), assignment_table({"site.com": 1, "other.org": 0}, groups),
                      schema.ASSIGNMENT)
    config = Config()
    config.generate.partition_by = "domain"
    owners = {}
    for part in range(4):
        inline = InlineFetches(store, config, seg_dir, part)
        inline.partitions = 4
        owners[part] = inline
    new = [f"s{i}.site.com" for i in range(12)]
    assert all(owners[1].owns(h) and not any(owners[p].owns(h) for p in (0, 2, 3)) for h in new)
    # A domain in no fetch list: all its hosts in one partition, its group's.
    fresh = [f"s{i}.fresh.net" for i in range(12)]
    assert {p for h in fresh for p in range(4) if owners[p].owns(h)} == {groups[host_hash("fresh.net") % 8]}
    # partition_by = host: by the host's own group.
    plain = InlineFetches(store, Config(), seg_dir, 0)
    plain.partitions = 4
    assert [plain.owns(h) for h in fresh] == [groups[host_hash(h) % 8] == 0 for h in fresh]
