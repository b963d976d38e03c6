"""The segment plan's rules without a web (issue 29, docs/segments.md): how many URLs of a host
fit a planned length (cycles/tables/hostdb.py ``planned_urls``), when discovery may still queue one
(cycles/fetch/tail.py ``fits_before``), when a fetch has become a tail (``TailWatch``, the
same answer at 3 hosts and at 30,000), and the frontier's idle-with-work clock."""

from __future__ import annotations

import datetime as dt
from collections import Counter, deque
from pathlib import Path

from cycles.config import FetchConfig
from cycles.fetch.frontier import Frontier, HostSlot
from cycles.fetch.tail import EARLY_END_CHECK_S, EARLY_END_FILE, EndWatch, TailWatch, fits_before, request_rate
from cycles.tables.hostdb import planned_spacing_s, planned_urls

NOW = 1_800_000_000.0


def at(offset_s: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(NOW + offset_s, dt.timezone.utc)


def state(crawl_delay_s=None, last_end=None, not_before=None) -> dict:
    return {"crawl_delay_s": crawl_delay_s, "last_request_end": None if last_end is None else at(last_end),
            "not_before": None if not_before is None else at(not_before)}


def test_a_host_gets_what_its_spacing_fits_into_the_plan():
    assert planned_urls(None, 120, 1.0, 30, NOW) == 120  # unknown host: the delay floor
    assert planned_urls(state(crawl_delay_s=5), 120, 1.0, 30, NOW) == 24
    # A slow host: its last response set a 6 s wait (delay_factor x response time).
    assert planned_spacing_s(state(last_end=-10, not_before=-4), 1.0, 30) == 6.0
    assert planned_urls(state(last_end=-10, not_before=-4), 120, 1.0, 30, NOW) == 20
    # A back-off longer than any spacing is a wait, not a spacing: capped at max_crawl_delay_s.
    assert planned_spacing_s(state(last_end=-1, not_before=3599), 1.0, 30) == 30
    # Not before 60 s from now: half of a 120 s plan is left.
    assert planned_urls(state(not_before=60), 120, 1.0, 30, NOW) == 60
    # A Crawl-delay longer than the plan: one request (the first needs no spacing).
    assert planned_urls(state(crawl_delay_s=30), 6, 1.0, 30, NOW) == 1
    # Not before the plan's end: nothing this segment.
    assert planned_urls(state(not_before=200), 120, 1.0, 30, NOW) == 0
    # The 5 ms spacing margin does not cost a request: 15 at ~1.005 s in 15 s.
    assert planned_urls(state(last_end=-2, not_before=-0.995), 15, 1.0, 30, NOW) == 15


def slot(host: str, queued: int, delay_s: float = 1.0, next_allowed: float = 0.0, measured: bool = True) -> HostSlot:
    s = HostSlot(host, delay_s=delay_s, next_allowed=next_allowed)
    s.cycle_s = delay_s if measured else 0.0  # its last request cycle was seen (a response came)
    s.queue.extend({"url": f"http://{host}/{k}"} for k in range(queued))
    return s


def test_discovery_queues_only_what_ends_before_the_planned_end():
    s = slot("a.test", queued=4)
    assert fits_before(s, now=100.0, deadline=105.5)  # the 5th URL starts at 104
    s.queue.append({"url": "http://a.test/x"})
    assert not fits_before(s, now=100.0, deadline=105.0)  # the 6th would start at 105
    assert fits_before(s, now=100.0, deadline=None)  # no plan: no time budget
    slow = slot("slow.test", queued=0, delay_s=30.0, next_allowed=140.0)
    assert not fits_before(slow, now=100.0, deadline=130.0)  # waiting out its Crawl-delay past the end


def tail_after(slots: list[HostSlot], then: list[HostSlot]) -> tuple[bool, bool]:
    """(tail at the start, tail once ``slots`` became ``then``): checked 1 s apart, after the plan's half."""
    watch = TailWatch(0.25, after_s=0.0, started=0.0)
    return watch.is_tail(slots, 1.0), watch.is_tail(then, 2.0)


def test_a_fetch_is_a_tail_when_few_slow_hosts_are_left_at_any_scale():
    for hosts in (4, 30_000):
        busy = [slot(f"h{i}.test", 5) for i in range(hosts)]
        # Most hosts done; a quarter of them still busy: not a tail (rate = 1/4 of the peak, not under).
        quarter = busy[: hosts // 4]
        assert tail_after(busy, quarter) == (False, False), hosts
        # What is left waits out Crawl-delays: a tail, whatever the crawl's size.
        slow = [slot(f"h{i}.test", 5, delay_s=30.0) for i in range(hosts // 4)]
        assert tail_after(busy, slow) == (False, True), hosts


def test_one_host_is_never_its_own_tail_and_the_rule_waits_for_its_share_of_the_plan():
    only = [slot("one.test", 50, delay_s=30.0)]
    assert tail_after(only, only) == (False, False)
    watch = TailWatch(0.25, after_s=60.0, started=0.0)
    busy = [slot(f"h{i}.test", 5) for i in range(8)]
    assert not watch.is_tail(busy, 1.0)
    assert not watch.is_tail(busy[:1], 30.0)  # a tail, but before half the plan
    assert watch.is_tail(busy[:1], 61.0)
    assert not TailWatch(0.0, 0.0, 0.0).is_tail(busy, 5.0)  # tail_share = 0: off


def test_the_peak_waits_for_measured_hosts():
    """3,000 new hosts count at their bare 1 s delay until they answer; their measured cycles
    (TLS handshake, round trip, delay_factor) are 5 s. That is no tail: the peak is taken once
    half the hosts with work have answered."""
    watch = TailWatch(0.25, after_s=0.0, started=0.0)
    unasked = [slot(f"h{i}.test", 5, measured=False) for i in range(3000)]
    assert not watch.is_tail(unasked, 1.0) and watch.peak == 0.0
    answered = [slot(f"h{i}.test", 5, delay_s=1.0) for i in range(3000)]
    for s in answered:
        s.cycle_s = 5.0
    assert not watch.is_tail(answered, 2.0)
    # Positive control: the old yardstick (the unasked hosts' peak) made the same hosts a tail.
    old = TailWatch(0.25, after_s=0.0, started=0.0)
    for s in unasked:
        s.cycle_s = 1.0
    assert not old.is_tail(unasked, 1.0)
    assert old.is_tail(answered, 2.0)


def test_request_rate_counts_a_back_off_as_its_wait():
    backing_off = slot("b.test", 3, delay_s=1.0, next_allowed=110.0)
    assert request_rate([backing_off], now=100.0) == 0.1
    assert request_rate([slot("done.test", 0)], now=100.0) == 0


def test_idle_with_work_counts_from_when_a_ready_host_could_have_started():
    frontier = Frontier()
    s = frontier.slot("a.test")
    s.queue.append({"url": "http://a.test/"})
    frontier.schedule(s)
    ready = s.ready_from
    assert frontier.pop_ready(ready + 2.0) is s  # ready since it was scheduled, started 2 s later
    assert abs(frontier.idle_with_work_s - 2.0) < 1e-6 and abs(frontier.idle_with_work_requests - 2.0) < 1e-6
    # Positive control's counterpart: started at its allowed time, nothing is idle.
    s.next_allowed = ready + 10.0
    frontier.schedule(s)
    assert frontier.pop_ready(ready + 10.0) is s
    assert abs(frontier.idle_with_work_s - 2.0) < 1e-6
    # Waiting out its delay is politeness, not idleness: a 30 s host started 3 s late loses 0.1 request.
    slow = frontier.slot("slow.test")
    slow.delay_s, slow.next_allowed = 30.0, ready + 20.0
    slow.queue.append({"url": "http://slow.test/"})
    frontier.schedule(slow)
    assert frontier.pop_ready(ready + 23.0) is slow
    assert abs(frontier.idle_with_work_s - 5.0) < 1e-6
    assert abs(frontier.idle_with_work_requests - 2.1) < 1e-6


def test_the_end_rules_say_once_why_a_fetch_ends(tmp_path):
    """cycles/fetch/tail.py ``EndWatch``: the planned length, then the end-early file; each
    counted under its own name, and nothing ends a fetch before its rule holds."""
    busy = [HostSlot("a.test", queue=deque(["x"] * 100), delay_s=1.0)]
    fc = FetchConfig(throughput_min_pages_s=0, tail_share=0)
    stats: Counter = Counter()
    watch = EndWatch(fc, 60.0, 100.0, stats, tmp_path)
    assert watch.deadline == 160.0
    assert not watch.ended(busy, 159.9) and not stats
    assert watch.ended(busy, 160.0) and stats == {"fetch/time_limit_stop": 1}
    # No planned length: only the end-early file (looked for every EARLY_END_CHECK_S) ends it.
    stats.clear()
    watch = EndWatch(fc, 0.0, 100.0, stats, tmp_path)
    assert watch.deadline is None
    assert not watch.ended(busy, 1e9)  # the positive control below shows the same call can say yes
    (tmp_path / EARLY_END_FILE).touch()
    assert not watch.ended(busy, 1e9 + EARLY_END_CHECK_S / 2)  # not looked for again yet
    assert watch.ended(busy, 1e9 + EARLY_END_CHECK_S) and stats == {"fetch/end_requested": 1}


def test_a_fetch_whose_rate_falls_under_the_floor_ends():
    fc = FetchConfig(throughput_min_pages_s=2.0, throughput_window_s=10.0, throughput_after_s=0.0, tail_share=0)
    stats: Counter = Counter()
    watch = EndWatch(fc, 0.0, 0.0, stats, Path("/nonexistent-end-early"))
    stats["fetch/requests"] = 30  # 3 a second over the first window: on
    assert not watch.ended([], 10.0)
    stats["fetch/requests"] = 40  # 1 a second over the next: off
    assert watch.ended([], 20.0) and stats["fetch/throughput_stop"] == 1
