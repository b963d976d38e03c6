"""The fetcher's DNS policy without a network (cycles/fetch/dns.py): which names are looked up,
how a lookup's two queries combine, the back-off, and the answer's round trip through the
host DB's merge rule. The lookups themselves are tested against the test web's DNS server
in tests/fetch/test_dns.py."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from cycles.tables import schema
from cycles.config import Config
from cycles.fetch.dns import Answer, backoff_s, combine, hosts_file_names, needs_lookup, resolv_attempts
from cycles.tables.hostdb import merge_host_rows


def test_ip_literals_resolve_pins_and_hosts_file_names_are_not_looked_up(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost  # the machine\n10.0.0.5 intranet.corp db\n")
    names = hosts_file_names(hosts)
    assert names == {"localhost", "intranet.corp", "db"}
    assert not needs_lookup("127.0.0.1", {}, names) and not needs_lookup("[::1]", {}, names)
    assert not needs_lookup("h1.web.test", {"h1.web.test": "127.1.0.2"}, names)
    assert not needs_lookup("db", {}, names)
    assert needs_lookup("h1.web.test", {}, names) and needs_lookup("xn--bcher-kva.web.test", {}, names)


def test_a_lookup_combines_its_a_and_aaaa_queries():
    ok4, ok6 = (("1.2.3.4",), 300.0, None, ""), (("2001:db8::1",), 60.0, None, "")
    empty = ((), None, None, "")
    assert combine(ok4, ok6) == (("1.2.3.4", "2001:db8::1"), 60.0, None, "")
    assert combine(ok4, empty) == (("1.2.3.4",), 300.0, None, "")
    assert combine(ok4, ((), None, "servfail", "x"))[0] == ("1.2.3.4",)  # an answer wins over a failed AAAA
    assert combine(((), None, "timeout", ""), ((), None, "nxdomain", ""))[2] == "nxdomain"
    assert combine(((), None, "servfail", "a"), ((), None, "timeout", ""))[2] == "servfail"
    assert combine(empty, empty)[2] == "no_address"


def test_the_back_off_doubles_up_to_its_cap():
    fc = Config().fetch
    fc.dns_retry_s, fc.dns_retry_max_s = 600.0, 3000.0
    assert [backoff_s(n, fc) for n in (1, 2, 3, 4)] == [600.0, 1200.0, 2400.0, 3000.0]


def test_resolv_conf_attempts(tmp_path):
    conf = tmp_path / "resolv.conf"
    conf.write_text("nameserver 127.53.0.1\noptions timeout:1 attempts:3\n")
    assert resolv_attempts(conf) == 3
    conf.write_text("nameserver 127.53.0.1\n")
    assert resolv_attempts(conf) == 2  # glibc's default
    assert resolv_attempts(tmp_path / "missing") == 2


def test_an_answer_survives_the_host_db_merge_and_the_newest_lookup_wins():
    t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp()
    old = Answer(("127.1.0.2",), None, t, t + 300, 0)
    failed = Answer((), "servfail", t + 400, t + 1000, 2, "x")
    rows = [{"host": "h1.web.test", **old.host_columns()}, {"host": "h1.web.test", **failed.host_columns()},
            {"host": "h1.web.test", "last_request_end": dt.datetime.fromtimestamp(t + 500, dt.timezone.utc)}]
    merged = merge_host_rows([pa.Table.from_pylist(rows, schema=schema.HOSTS)])["h1.web.test"]
    back = Answer.from_host_row(merged)
    assert (back.addresses, back.error, back.failures) == ((), "servfail", 2)
    assert back.expires == t + 1000 and back.fresh(t + 999) and not back.fresh(t + 1000)
    # The detail of the lookup is not kept in the host DB; kind, count and next lookup are.
    assert back.reason() == ("dns servfail: the name servers failed to answer (SERVFAIL); 2 failed lookups in a "
                             "row, next lookup after 2026-01-01T00:16:40Z")
    good = Answer.from_host_row(merge_host_rows([pa.Table.from_pylist(rows[:1], schema=schema.HOSTS)])["h1.web.test"])
    assert good.addresses == ("127.1.0.2",) and good.error is None
    assert Answer.from_host_row({"host": "x", "dns_checked_at": None}) is None
