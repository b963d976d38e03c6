"""The fetcher's non-blocking DNS queries (cycles/fetch/dns.py ``UdpQueries``) against small
UDP name servers on loopback that answer as told: what each server received is the record."""

from __future__ import annotations

import socket
import threading
import time

import dns.message
import dns.rcode
import dns.rrset
import pytest

from cycles.fetch.dns import UdpQueries, _Query


class Server:
    """A UDP name server on 127.0.0.1: ``mode`` is ``answer``, ``servfail``, ``silent`` or
    ``wrong_id`` (a reply whose id is not the query's, then none); ``asked`` is what it got."""

    def __init__(self, mode: str, host: str = "127.0.0.1"):
        self.mode = mode
        self.asked: list[tuple[str, str]] = []
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.sock.settimeout(0.1)
        self.address = self.sock.getsockname()[:2]
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                data, client = self.sock.recvfrom(2048)
            except socket.timeout:
                continue
            query = dns.message.from_wire(data)
            question = query.question[0]
            self.asked.append((question.name.to_text(omit_final_dot=True), dns.rdatatype.to_text(question.rdtype)))
            reply = dns.message.make_response(query)
            if self.mode == "silent":
                continue
            if self.mode == "servfail":
                reply.set_rcode(dns.rcode.SERVFAIL)
            elif question.rdtype == dns.rdatatype.A:
                reply.answer.append(dns.rrset.from_text(question.name, 120, "IN", "A", "127.9.9.9"))
            if self.mode == "wrong_id":
                reply.id = (query.id + 1) % 65536
            self.sock.sendto(reply.to_wire(), client)

    def close(self) -> None:
        self._stop = True
        self.thread.join()
        self.sock.close()


def run(queries: UdpQueries, names: list[tuple[str, str]], seconds: float = 3.0) -> dict:
    for host, rdtype in names:
        queries.send(_Query(host, rdtype, sent=time.monotonic()), time.monotonic())
    results: dict = {}
    deadline = time.monotonic() + seconds
    while len(results) < len(names) and time.monotonic() < deadline:
        for query, result in queries.poll(time.monotonic()):
            results[(query.host, query.rdtype)] = result
        time.sleep(0.005)
    return results


def test_answers_nodata_and_the_servers_record():
    server = Server("answer")
    try:
        queries = UdpQueries([server.address], timeout_s=1.0, attempts=2)
        results = run(queries, [("a.test", "A"), ("a.test", "AAAA")])
        assert results[("a.test", "A")] == (("127.9.9.9",), 120.0, None, "")
        assert results[("a.test", "AAAA")] == ((), None, None, "")  # NODATA: no address, no failure
        assert sorted(server.asked) == [("a.test", "A"), ("a.test", "AAAA")]
    finally:
        server.close()


def test_a_reply_with_another_id_is_not_taken_and_the_query_is_tried_again():
    server = Server("wrong_id")
    try:
        queries = UdpQueries([server.address], timeout_s=0.3, attempts=2)
        results = run(queries, [("b.test", "A")])
        assert results[("b.test", "A")][2] == "timeout"  # the answer with the wrong id never counted
        assert server.asked == [("b.test", "A")] * 2  # attempts: 2, as glibc would
    finally:
        server.close()


def test_servfail_passes_to_the_next_server_and_silence_is_tried_attempts_times():
    failing, good = Server("servfail"), Server("answer")
    try:
        queries = UdpQueries([failing.address, good.address], timeout_s=1.0, attempts=2)
        results = run(queries, [("c.test", "A")])
        assert results[("c.test", "A")][0] == ("127.9.9.9",)
        assert failing.asked == [("c.test", "A")] and good.asked == [("c.test", "A")]
        # One server answering SERVFAIL: asked once, not once per attempt.
        alone = UdpQueries([failing.address], timeout_s=1.0, attempts=2)
        assert run(alone, [("d.test", "A")])[("d.test", "A")][2] == "servfail"
        assert failing.asked.count(("d.test", "A")) == 1
    finally:
        failing.close()
        good.close()
    silent = Server("silent")
    try:
        queries = UdpQueries([silent.address], timeout_s=0.2, attempts=3)
        assert run(queries, [("e.test", "A")])[("e.test", "A")][2] == "timeout"
        assert silent.asked == [("e.test", "A")] * 3
    finally:
        silent.close()


def test_an_ipv6_name_server_written_another_way_is_recognised_as_the_source():
    try:
        server = Server("answer", "::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    try:
        # resolv.conf may write ::1 as 0:0::1: the reply's source is matched by address, not text.
        queries = UdpQueries([("0:0::1", server.address[1])], timeout_s=1.0, attempts=1)
        assert run(queries, [("f.test", "A")])[("f.test", "A")][0] == ("127.9.9.9",)
    finally:
        server.close()
