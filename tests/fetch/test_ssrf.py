"""The SSRF guard: links and redirects must not make the crawler fetch from inside its network.

The decision (cycles/fetch/addresses.py) is tested on addresses alone, without a packet;
the guard in the transfer with a fake libcurl address; and a crawl of the hostile hosts
(all on loopback: public stand-ins on 127.0.60.0/24, the one allowed network) against an
internal service on 127.0.0.1 whose own log must stay empty.
"""

from __future__ import annotations

import socket
from collections import namedtuple

import pycurl
import pytest

from cycles.config import Config, ConfigError, config_from_dict, load_config
from cycles.fetch.addresses import is_allowed, parse_networks
from cycles.fetch.transfer import Request, Transfer
from cycles.commands.inject import inject
from cycles.commands.cycle import run_cycles
from cycles.storage.store import Store
from testweb.harness import TestWeb
from testweb.hostile import InternalService, internal_urls
from tests.conftest import config_for, write_seeds
from tests.support.transitions import cycle_once

# --- the decision, no network ------------------------------------------------------------------

NOT_PUBLIC = [
    "10.0.0.1", "172.16.0.1", "192.168.1.1",  # RFC 1918
    "169.254.169.254",  # link-local: the cloud metadata service
    "100.64.0.1",  # CGNAT shared space
    "0.0.0.0", "127.0.0.1", "127.255.255.254", "255.255.255.255", "240.0.0.1",  # this host, reserved
    "192.0.2.1", "198.51.100.1", "203.0.113.1", "198.18.0.1",  # documentation, benchmarking
    "224.0.0.1", "239.255.255.250",  # multicast (Python calls 224.0.0.1 global)
    "::1", "::", "fe80::1", "fe80::1%eth0", "fc00::1", "fd12:3456::1", "2001:db8::1",
    "ff02::1", "ff0e::1",  # IPv6 multicast, also the "global" scope
    "::ffff:10.0.0.1", "::ffff:127.0.0.1", "::ffff:169.254.169.254",  # IPv4-mapped
    "2002:7f00:1::1", "2002:a00:1::1",  # 6to4 around 127.0.0.1 and 10.0.0.1
    "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe",  # NAT64 around 127.0.0.1 and 169.254.169.254
    "2001::1",  # Teredo
    "not an address", "",
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "2a00:1450:4001:80b::200e",
          "::ffff:8.8.8.8", "64:ff9b::808:808"]


@pytest.mark.parametrize("ip", NOT_PUBLIC)
def test_non_public_addresses_are_refused_by_default(ip):
    assert not is_allowed(ip)


@pytest.mark.parametrize("ip", PUBLIC)
def test_public_addresses_are_allowed(ip):
    assert is_allowed(ip)


def test_allowed_networks_let_exactly_their_addresses_through():
    nets = parse_networks(["10.1.0.0/16", "fd00::/8", "127.0.60.0/24"])
    assert is_allowed("10.1.2.3", nets) and is_allowed("fd00::5", nets) and is_allowed("127.0.60.7", nets)
    assert is_allowed("::ffff:10.1.2.3", nets)  # an IPv4-mapped address is the IPv4 address
    assert not is_allowed("10.2.0.1", nets)
    assert not is_allowed("127.0.0.1", nets)
    assert not is_allowed("169.254.169.254", nets)
    assert is_allowed("8.8.8.8", nets)


@pytest.mark.parametrize("bad", [["10.0.0.1/8"], ["nonsense"], ["10.0.0.0/33"], [8], "10.0.0.0/8"])
def test_a_bad_allowed_network_is_a_config_error(bad, tmp_path):
    with pytest.raises(ConfigError, match="fetch.allowed_networks"):
        config_from_dict({"fetch": {"allowed_networks": bad}})
    toml = tmp_path / "crawl.toml"
    toml.write_text(f"[fetch]\nallowed_networks = {bad!r}\n".replace("'", '"'))
    with pytest.raises(ConfigError):
        load_config(toml)


def test_the_default_config_allows_no_private_network():
    assert Config().fetch.allowed_networks == []
    assert config_from_dict({"fetch": {"allowed_networks": ["10.0.0.0/8"]}}).fetch.allowed_networks == ["10.0.0.0/8"]


# --- the guard in the transfer (no connection is made) ------------------------------------------

Address = namedtuple("Address", "family socktype protocol addr")


def open_socket(ip: str, allowed: list[str]) -> tuple[Transfer, object]:
    config = Config().fetch
    config.allowed_networks = allowed
    transfer = Transfer(Request("http://x.test/", "x.test", "page"), config, 1000)
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    addr = (ip, 80, 0, 0) if family == socket.AF_INET6 else (ip, 80)
    return transfer, transfer.on_open_socket(0, Address(family, socket.SOCK_STREAM, 6, addr))


@pytest.mark.parametrize("ip", ["169.254.169.254", "10.0.0.1", "::1", "::ffff:127.0.0.1", "127.0.0.1"])
def test_the_guard_refuses_the_socket_of_a_non_public_address(ip):
    transfer, result = open_socket(ip, [])
    assert result == pycurl.SOCKET_BAD
    assert transfer.blocked_address == ip


def test_the_guard_opens_a_socket_for_an_allowed_address():
    transfer, result = open_socket("127.0.60.1", ["127.0.60.0/24"])
    try:
        assert isinstance(result, socket.socket) and transfer.blocked_address is None
    finally:
        result.close()


# --- update ------------------------------------------------------------------------------------


def test_a_blocked_url_is_looked_at_again_after_the_gone_interval_and_never_dead(tmp_path):
    store = Store(tmp_path / "data")
    config = Config()
    config.db.buckets = 2
    row = cycle_once(store, config, tmp_path, {"outcome": "blocked", "fetched_at": None,
                                               "error": "address 10.0.0.1 is not public"})
    assert row["status"] == "blocked" and row["retries"] == 0
    waited = (row["next_fetch"] - row["_fetched_at"]).total_seconds()
    assert abs(waited - config.update.gone_interval_s) < 120


# --- a crawl that is pointed inside -------------------------------------------------------------


@pytest.mark.web
def test_links_and_redirects_into_the_network_are_never_fetched(tmp_path):
    with InternalService(max_seconds=120) as internal:
        with TestWeb(hosts=0, special=False, hostile=True, internal_port=internal.port, pages=2,
                     page_bytes=2000, max_seconds=120) as web:
            store = Store(tmp_path / "data")
            config = config_for(web)
            config.fetch.processes = 1
            config.fetch.progress_s = 0.0
            # The hostile hosts stand for the public web; 127.0.0.1 (the internal service) is not.
            config.fetch.allowed_networks = ["127.0.60.0/24"]
            inject(store, config, write_seeds(tmp_path / "seeds.txt", [web.url("linker", "/")]))
            log = list(run_cycles(store, config, cycles=3))
            requests = web.requests()
        seen_inside = list(internal.requests)
    assert seen_inside == [], seen_inside
    assert any("/go-internal" == r["path"] for r in requests), log  # the redirect was served
    import duckdb
    fetched = duckdb.sql(f"SELECT url, outcome, error FROM read_parquet('{store.root}/segments/*/fetched/*.parquet')").fetchall()
    blocked = {url for url, outcome, _ in fetched if outcome == "blocked"}
    # Every spelling and the redirect target reached the guard and stopped there.
    hosts = {"127.0.0.1", "localhost", "[::1]", "smuggle.web.test"}
    assert {u.split("/")[2].rsplit(":", 1)[0] for u in blocked} == hosts, fetched
    assert any(u.endswith("/redirected") for u in blocked)
    assert len(blocked) >= len(internal_urls(internal.port))  # hex and decimal became 127.0.0.1 URLs
    counters = _fetch_counters(store)
    # A refused robots.txt request per host and cycle; the host's URLs are then blocked, not
    # deferred (which would bring them back within the hour), and no host failure counted.
    assert counters["fetch/blocked_address"] >= len(hosts)
    assert counters["fetch/outcome/blocked"] == len(blocked)
    assert counters.get("fetch/network_error", 0) == 0 and counters.get("fetch/outcome/deferred", 0) == 0


def _fetch_counters(store: Store) -> dict:
    import json
    from collections import Counter

    total = Counter()
    for path in (store.root / "segments").glob("*/stats/fetch-part-*.json"):
        total.update(json.loads(path.read_text())["counters"])
    return total
