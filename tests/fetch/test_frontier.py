"""cycles/fetch/frontier.py: per-host slots on a heap of next-allowed times (no network)."""

from __future__ import annotations

from cycles.fetch.frontier import Frontier, HostSlot


def frontier_with(*hosts: tuple[str, float]) -> Frontier:
    """A frontier with one queued URL per host, each host allowed from the given time."""
    frontier = Frontier()
    for host, allowed in hosts:
        slot = frontier.slot(host)
        slot.queue.append(f"http://{host}/")
        slot.next_allowed = allowed
        frontier.schedule(slot)
    return frontier


def test_slot_is_made_once_per_host():
    frontier = Frontier()
    slot = frontier.slot("a.test")
    assert frontier.slot("a.test") is slot
    assert isinstance(slot, HostSlot) and slot.host == "a.test"
    assert slot.delay_s == 1.0 and slot.next_allowed == 0.0 and not slot.in_flight


def test_pop_ready_gives_the_longest_waiting_host_first():
    frontier = frontier_with(("late.test", 5.0), ("early.test", 1.0), ("middle.test", 3.0))
    order = [frontier.pop_ready(10.0).host for _ in range(3)]
    assert order == ["early.test", "middle.test", "late.test"]
    assert frontier.pop_ready(10.0) is None


def test_hosts_with_the_same_time_come_out_in_the_order_they_were_scheduled():
    frontier = frontier_with(("b.test", 2.0), ("a.test", 2.0), ("c.test", 2.0))
    assert [frontier.pop_ready(2.0).host for _ in range(3)] == ["b.test", "a.test", "c.test"]


def test_a_host_is_not_ready_before_its_next_allowed_time():
    frontier = frontier_with(("a.test", 5.0))
    assert frontier.pop_ready(4.999) is None
    assert frontier.seconds_to_next(4.0) == 1.0
    assert frontier.pop_ready(5.0).host == "a.test"  # the boundary is inclusive


def test_a_later_next_allowed_than_the_heap_entry_puts_the_host_back():
    # The slot's delay grew (a Crawl-delay, a backoff) after it was scheduled: the old heap
    # entry must not let the request go early.
    frontier = frontier_with(("a.test", 1.0))
    frontier.slots["a.test"].next_allowed = 8.0
    assert frontier.pop_ready(2.0) is None
    assert frontier.seconds_to_next(2.0) == 6.0
    assert frontier.pop_ready(8.0).host == "a.test"


def test_one_request_in_flight_per_host():
    frontier = frontier_with(("a.test", 0.0))
    slot = frontier.slots["a.test"]
    slot.queue.append("http://a.test/2")
    assert frontier.pop_ready(1.0) is slot
    slot.in_flight = True
    frontier.schedule(slot)  # ignored while a request is in flight
    assert frontier.pop_ready(100.0) is None
    assert frontier.waiting_hosts() == 0
    # The response ends: the slot goes back with its next-allowed time after the delay.
    slot.in_flight = False
    slot.next_allowed = 1.0 + slot.delay_s
    frontier.schedule(slot)
    assert frontier.pop_ready(1.5) is None
    assert frontier.pop_ready(2.0) is slot


def test_stale_entries_are_skipped():
    frontier = frontier_with(("gone.test", 0.0), ("aside.test", 0.0), ("busy.test", 0.0), ("ok.test", 0.0))
    frontier.slots["gone.test"].queue.clear()          # its work was taken elsewhere
    frontier.slots["aside.test"].set_aside = "too many failures"
    frontier.slots["busy.test"].in_flight = True
    assert frontier.pop_ready(1.0).host == "ok.test"
    assert frontier.pop_ready(1.0) is None
    assert frontier.seconds_to_next(1.0) is None       # the stale entries were dropped


def test_only_hosts_with_work_are_scheduled():
    frontier = Frontier()
    idle = frontier.slot("idle.test")
    frontier.schedule(idle)
    assert frontier.seconds_to_next(0.0) is None
    robots_only = frontier.slot("robots.test")
    robots_only.robots.url = "http://robots.test/robots.txt"  # robots.txt first, no pages yet
    frontier.schedule(robots_only)
    assert frontier.waiting_hosts() == 1
    assert frontier.pop_ready(0.0) is robots_only


def test_seconds_to_next_never_goes_negative():
    frontier = frontier_with(("a.test", 3.0))
    assert frontier.seconds_to_next(10.0) == 0.0
