"""The Mercator frontier of one fetch worker: a queue per host and a heap of next-allowed times.

Each host has a :class:`HostSlot` owned by this worker alone (generate put the host in
exactly one partition). A slot holds at most one request in flight; when the response
ends, the slot's next-allowed time becomes ``end + delay`` and it goes back on the heap.
Times are on the monotonic clock, so a wall-clock jump cannot shorten a delay. The rules
that move a slot's times (spacing, back-off, set-aside) are in cycles/fetch/politeness.py.

With ``generate.partition_by`` = domain or ip, host names that share a server share a
:class:`ServerGate` too (cycles/slotkey.py; generate put them in one partition): one request
in flight among them, and the spacing after it holds for all of them. Each name keeps its
own slot for what is the name's (robots.txt, queue, failures, back-off).
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from cycles.fetch.robots_state import RobotsState


SPACING_MARGIN_S = 0.005
"""Added to every delay after a complete response. The gap a server sees is never shorter
than ours: its response ends before libcurl reports it to us (we time the end then), and our
next request reaches it after we send it. What is left to cover is a server that reads its
clock a little after writing (descheduled in between) and timer resolution (monotonic clock
in ns, the loop's select in ms): 5 ms. It was 20 ms; bench_crawl (load ~11 on 2 cores,
server log): the shortest gap the server saw was 1.0207 s at 20 ms, 1.0059 s at 5 ms over
~1,900 spaced requests, 0 faults either way — a big host gains ~1.5 % of its requests."""

ABORTED_MARGIN_S = 0.25
"""The margin after a transfer we aborted or that failed (too large, not HTML, a timeout, a
network error): the server notices the end only when our close reaches its event loop, a
later moment we do not see. It was 20 ms; on the shared 2-core machine at load 14–23 the test
web logged an aborted response's end 49 ms after we closed, and the next request came 0.971 s
later on a 1 s host (tests/fetch/test_fetch_limits.py). A busy real server is no quicker to
notice, and aborts are rare, so a quarter second costs little and keeps the gap it sees whole."""


@dataclass
class ServerGate:
    """What the host names of one slot key share: one request in flight, and no request
    before ``next_allowed`` (the end of the last response plus its delay)."""

    in_flight: bool = False
    next_allowed: float = 0.0
    """Monotonic time before which none of its hosts may be asked."""
    waiting: set = field(default_factory=set)
    """Hosts that were ready while another host of the key was in flight."""


@dataclass
class HostSlot:
    host: str
    queue: deque = field(default_factory=deque)
    next_allowed: float = 0.0
    """Monotonic time before which no request may start."""
    delay_s: float = 1.0
    """Current spacing between the end of one response and the next request."""
    in_flight: bool = False
    robots: RobotsState = field(default_factory=RobotsState)
    """The host's robots.txt: rules, pending request, cached copies (cycles/fetch/robots_state.py)."""
    failures: int = 0
    """Consecutive network errors or 5xx; past fetch.max_host_failures the host is set aside."""
    backoffs: int = 0
    """Consecutive 429/503 answers, for exponential backoff."""
    set_aside: str | None = None
    """Why the host is not fetched further this cycle (its URLs are deferred)."""
    last_request_end_wall: float | None = None
    """Wall-clock end of the last response, persisted so the next cycle keeps the spacing."""
    gate: ServerGate | None = None
    """Shared with the other hosts of its slot key (``generate.partition_by``); None: its own."""
    cycle_s: float = 0.0
    """The last request cycle: response time plus the delay after it (cycles/fetch/tail.py)."""
    pending: bool = False
    """On the heap with work, waiting to be started (the idle-with-work clock runs from ``ready_from``)."""
    ready_from: float = 0.0
    """Monotonic time the host last had work and was scheduled (see :attr:`Frontier.idle_with_work_s`)."""


class Frontier:
    """Hosts ordered by when they may next be asked."""

    def __init__(self, key_of: Callable[[str], str] | None = None) -> None:
        self.slots: dict[str, HostSlot] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self.key_of = key_of
        """host → slot key (cycles/slotkey.py); None: every host its own slot."""
        self.gates: dict[str, ServerGate] = {}
        self.idle_with_work_s = 0.0
        """Host-seconds in which a host had a fetchable URL, its spacing allowed a request
        and none was in flight (the loop was busy, or ``fetch.max_in_flight`` full):
        counted when the host is started, from the later of its allowed time and when it got
        work (``fetch/idle_with_work_s``)."""
        self.idle_with_work_requests = 0.0
        """The same, in requests its delay would have allowed: its share of the politeness
        budget (cycles/metrics.py ``fetch/idle_with_work_ratio``)."""

    def slot(self, host: str) -> HostSlot:
        slot = self.slots.get(host)
        if slot is None:
            slot = self.slots[host] = HostSlot(host)
            if self.key_of is not None:
                slot.gate = self.gates.setdefault(self.key_of(host), ServerGate())
        return slot

    def started(self, slot: HostSlot) -> None:
        """A request of ``slot`` is in flight: none of its gate's other hosts may start."""
        slot.in_flight = True
        if slot.gate is not None:
            slot.gate.in_flight = True

    def finished(self, slot: HostSlot, spaced_until: float) -> None:
        """``slot``'s response ended and was handled: its gate's hosts wait until
        ``spaced_until`` (the end plus the delay) and those that were ready meanwhile go back
        on the heap. (The slot's own ``in_flight`` was cleared before the handlers ran.)"""
        gate = slot.gate
        if gate is None:
            return
        gate.in_flight = False
        gate.next_allowed = max(gate.next_allowed, spaced_until)
        for host in gate.waiting:
            self.schedule(self.slots[host])
        gate.waiting.clear()

    def restore_gates(self, now_mono: float, now_wall: float) -> None:
        """Each gate's next-allowed time from its hosts' last responses (the host DB): a
        host asked at the end of the last cycle delays its key-mates too."""
        for slot in self.slots.values():
            if slot.gate is not None and slot.last_request_end_wall is not None:
                wait = slot.last_request_end_wall + slot.delay_s + SPACING_MARGIN_S - now_wall
                slot.gate.next_allowed = max(slot.gate.next_allowed, now_mono + wait)

    def schedule(self, slot: HostSlot) -> None:
        """Put a host (back) on the heap at its next-allowed time, if it has work."""
        if not slot.in_flight and slot.set_aside is None and (slot.queue or slot.robots.url):
            if not slot.pending:
                slot.pending = True
                slot.ready_from = time.monotonic()
            heapq.heappush(self._heap, (slot.next_allowed, next(self._seq), slot.host))

    def pop_ready(self, now: float) -> HostSlot | None:
        """The host that has waited longest past its next-allowed time, or None."""
        while self._heap and self._heap[0][0] <= now:
            _, _, host = heapq.heappop(self._heap)
            slot = self.slots[host]
            # Stale heap entries (the slot was rescheduled or set aside) are skipped.
            if slot.in_flight or slot.set_aside or not (slot.queue or slot.robots.url):
                slot.pending = False  # work gone (or set aside): its idle clock starts again with new work
                continue
            if slot.next_allowed > now:
                self.schedule(slot)
                continue
            gate = slot.gate
            if gate is not None and gate.in_flight:
                gate.waiting.add(host)  # back on the heap when the gate's request ends
                continue
            if gate is not None and gate.next_allowed > now:
                heapq.heappush(self._heap, (gate.next_allowed, next(self._seq), host))
                continue
            self._count_idle(slot, now)
            return slot
        return None

    def _count_idle(self, slot: HostSlot, now: float) -> None:
        """``slot`` is started at ``now``: the time it could have been, with work, is idle."""
        allowed = max(slot.ready_from, slot.next_allowed, slot.gate.next_allowed if slot.gate else 0.0)
        slot.pending = False
        if now > allowed:
            self.idle_with_work_s += now - allowed
            self.idle_with_work_requests += (now - allowed) / max(slot.delay_s, 0.001)

    def seconds_to_next(self, now: float) -> float | None:
        if not self._heap:
            return None
        return max(0.0, self._heap[0][0] - now)

    def waiting_hosts(self) -> int:
        return sum(1 for s in self.slots.values() if not s.in_flight and s.set_aside is None and (s.queue or s.robots.url))
