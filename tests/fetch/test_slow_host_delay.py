"""The slow-host delay (``fetch.delay_factor`` × the response time, cycles/fetch/politeness.py
``delay_after``) counts the server's answer, not the connect and TLS handshake of a new
connection before the request (``Transfer.setup_s``, libcurl's PRETRANSFER_TIME)."""

from __future__ import annotations

from cycles.config import FetchConfig
from cycles.fetch.frontier import HostSlot
from cycles.fetch.politeness import delay_after
from cycles.fetch.transfer import Request, Transfer


def transfer(duration_s: float, setup_s: float) -> Transfer:
    t = Transfer(Request("https://h0.web.test/p/1.html", "h0.web.test", "page", {}), FetchConfig(), 1 << 20)
    t.duration_s, t.setup_s = duration_s, setup_s
    return t


def test_a_new_connections_handshake_does_not_lengthen_the_delay():
    fc = FetchConfig()  # delay 1 s, delay_factor 2
    slot = HostSlot("h0.web.test")
    # h0 of bench_crawl --real-web: a 0.48 s answer; the first request of a connection also
    # waits a round trip for the TLS handshake (0.5 s) before it is sent.
    assert delay_after(slot, transfer(0.49, 0.0), fc) == 1.0
    assert delay_after(slot, transfer(0.99, 0.5), fc) == 1.0
    # Positive control: an answer that itself takes a second still doubles the delay.
    assert delay_after(slot, transfer(1.5, 0.5), fc) == 2.0
    assert delay_after(slot, transfer(1.0, 0.0), fc) == 2.0


def test_a_transfer_cut_before_its_end_keeps_its_whole_duration():
    """A transfer the partition's end cuts (cycles/fetch/hosts.py ``after_cut``) has no
    libcurl figures: setup 0, so its whole time held counts, as before."""
    fc = FetchConfig()
    assert transfer(3.0, 0.0).setup_s == 0.0
    assert delay_after(HostSlot("odd.web.test"), transfer(3.0, 0.0), fc) == 6.0
    # Capped at max_crawl_delay_s, as before.
    assert delay_after(HostSlot("odd.web.test"), transfer(100.0, 0.0), fc) == fc.max_crawl_delay_s
