"""The test web's DNS server (testweb/dns.py) and the crawl namespace (testweb/namespace.py).

The server is asked with dnspython pointed at it (UDP and TCP); the namespace is checked
with the system's own tools run inside it (getent, curl), so what a crawler sees there is
what these tests see.
"""

from __future__ import annotations

import subprocess
import sys
import time

import dns.exception
import dns.message
import dns.query
import dns.rcode
import dns.resolver
import pytest

from testweb.dns import FAILING_NAMES, IDN_ALIASES, TestDNS, idn_name, zone_for
from testweb.namespace import (NamespaceError, check_name_service, crawl_namespace, namespace_available,
                               resolv_conf_text)

pytestmark = pytest.mark.web
needs_root = pytest.mark.skipif(namespace_available() is not None, reason=str(namespace_available()))

RESOLVE = {"h0.web.test": "127.1.0.1", "h1.web.test": "127.1.0.2", "h2.web.test": "127.1.0.3"}


@pytest.fixture(scope="module")
def server():
    zone = zone_for(RESOLVE, overrides={"slow.web.test": {"a": ["127.1.0.9"], "latency_ms": 400, "ttl": 7},
                                        "v6.web.test": {"aaaa": ["::1"]}})
    with TestDNS(zone, max_seconds=300) as running:
        yield running


def ask(server, name: str, rdtype: str = "A", tcp: bool = False, timeout: float = 2.0):
    query = dns.message.make_query(name, rdtype)
    send = dns.query.tcp if tcp else dns.query.udp
    return send(query, server.address, timeout=timeout)


def test_zone_names_answer_their_address_ttl_and_nodata(server):
    answer = ask(server, "h1.web.test")
    assert answer.rcode() == dns.rcode.NOERROR
    assert [r.address for r in answer.answer[0]] == ["127.1.0.2"] and answer.answer[0].ttl == 300
    nodata = ask(server, "h1.web.test", "AAAA")  # a v4-only name: NOERROR, no record, the SOA
    assert nodata.rcode() == dns.rcode.NOERROR and not nodata.answer and nodata.authority
    assert [r.address for r in ask(server, "v6.web.test", "AAAA").answer[0]] == ["::1"]
    assert ask(server, "H1.Web.Test", tcp=True).answer[0][0].address == "127.1.0.2"  # TCP, any case
    assert [q["proto"] for q in server.queries("h1.web.test")][-1] == "tcp"


def test_per_name_latency_and_ttl(server):
    started = time.monotonic()
    answer = ask(server, "slow.web.test")
    assert time.monotonic() - started >= 0.39
    assert answer.answer[0].ttl == 7


def test_idn_names_are_answered_in_their_a_label_form(server):
    name = idn_name(IDN_ALIASES[0])
    assert name == "xn--bcher-kva.web.test"
    assert ask(server, name).answer[0][0].address == RESOLVE["h0.web.test"]


@pytest.mark.parametrize("name, rcode", [(n, k) for n, k in FAILING_NAMES.items()] + [("nowhere.web.test", "nxdomain")])
def test_failing_names_and_the_query_log(server, name, rcode):
    before = len(server.queries(name))
    if rcode == "timeout":
        with pytest.raises(dns.exception.Timeout):
            ask(server, name, timeout=0.5)
    else:
        answer = ask(server, name)
        assert answer.rcode() == {"nxdomain": dns.rcode.NXDOMAIN, "servfail": dns.rcode.SERVFAIL}[rcode]
    logged = server.queries(name)[before:]
    assert [(q["name"], q["type"], q["rcode"]) for q in logged] == [(name, "A", rcode.upper())]
    assert set(logged[0]) == {"t", "name", "type", "rcode", "proto", "client"}


def test_two_servers_listen_on_their_own_addresses():
    with TestDNS(zone_for(RESOLVE), max_seconds=60) as one, TestDNS(zone_for(RESOLVE), max_seconds=60) as two:
        assert one.address != two.address and one.address.startswith("127.53.")
        assert ask(two, "h2.web.test").answer[0][0].address == "127.1.0.3"


def test_name_service_checks(tmp_path, monkeypatch):
    import testweb.namespace as ns

    nsswitch, hosts = tmp_path / "nsswitch.conf", tmp_path / "hosts"
    monkeypatch.setattr(ns, "NSSWITCH", nsswitch)
    monkeypatch.setattr(ns, "HOSTS", hosts)
    monkeypatch.setattr(ns, "NSCD_SOCKET", tmp_path / "no-nscd")
    nsswitch.write_text("hosts: files dns\n")
    hosts.write_text("127.0.0.1 localhost\n")
    check_name_service(["h1.web.test"])  # the good case passes
    for line in ("hosts: files mdns4_minimal [NOTFOUND=return] dns", "hosts: files resolve dns", "hosts: files"):
        nsswitch.write_text(line + "\n")
        with pytest.raises(NamespaceError, match="nsswitch"):
            check_name_service()
    nsswitch.write_text("hosts: files dns\n")
    hosts.write_text("127.0.0.1 localhost\n127.9.9.9 h1.web.test\n")
    with pytest.raises(NamespaceError, match="h1.web.test"):
        check_name_service(["h1.web.test"])
    assert "nameserver 127.53.1.1" in resolv_conf_text("127.53.1.1")


@needs_root
def test_the_system_resolver_in_the_namespace_asks_the_test_server(server):
    with crawl_namespace(server.address, names=RESOLVE) as prefix:
        inside = subprocess.run(prefix + ["getent", "ahostsv4", "h2.web.test"], capture_output=True, text=True,
                                timeout=30)
        python = subprocess.run(prefix + [sys.executable, "-c", "import socket; print(socket.gethostbyname('h0.web.test'))"],
                                capture_output=True, text=True, timeout=30)
    assert inside.returncode == 0 and inside.stdout.split()[0] == "127.1.0.3"
    assert python.stdout.strip() == "127.1.0.1"
    assert server.queries("h2.web.test") and server.queries("h0.web.test")
    # Outside the namespace nothing changed (the mounts are private to it). Read, not asked:
    # a lookup here would go to the machine's real name server, off loopback.
    from pathlib import Path

    assert server.address not in Path("/etc/resolv.conf").read_text()
