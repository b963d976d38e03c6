"""When a segment's fetch ends before its fetch list is done: its plan and its tail.

A segment is planned to last ``generate.segment_s`` seconds (or what ``crawl run`` chose,
written in its generated marker): generate gave each host no more URLs than its spacing
fits into that time, and the fetch ends there (cycles/fetch/worker.py). Two rules here keep
the fetch inside that plan (docs/segments.md):

- :func:`fits_before`: discovery inside the fetch queues a link for its host only while the
  host's queue still ends before the planned end, at the host's spacing; what does not fit
  is left to the next segment (cycles/fetch/discovery.py, ``discover/host_time_budget``);
- :class:`TailWatch`: the segment has become a *tail* — the hosts with work left could
  make far fewer requests a second than its hosts could earlier (a few hosts waiting out a
  Crawl-delay, a back-off or a slow server) — so its fetch ends now and hands the rest back
  (``fetch/tail_stop``), and the next segment starts with every host the crawl DB has due.

Both measure a host by its *spacing* (:func:`spacing_s`): the delay after a response, or
the whole last request cycle (response time plus the delay after it) when that was longer.
The tail rule compares the segment with itself, so it holds for a 3-host crawl as for a
30,000-host one; no fixed pages/s floor does (``fetch.throughput_min_pages_s``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable

from cycles.config import FetchConfig
from cycles.fetch.frontier import HostSlot

TAIL_CHECK_S = 1.0
"""How often the tail rule sums its hosts' rates (a pass over the partition's slots)."""


def spacing_s(slot: HostSlot) -> float:
    """Seconds between the starts of two of the host's requests, as last seen."""
    return max(slot.delay_s, slot.cycle_s, 0.001)


def has_work(slot: HostSlot) -> bool:
    return slot.set_aside is None and bool(slot.queue or slot.robots.url)


def fits_before(slot: HostSlot, now: float, deadline: float | None) -> bool:
    """Would one more URL queued for ``slot`` start before ``deadline`` (monotonic; None: no end)?"""
    if deadline is None:
        return True
    first = max(now, slot.next_allowed)
    return first + len(slot.queue) * spacing_s(slot) < deadline


def request_rate(slots: Iterable[HostSlot], now: float) -> float:
    """Requests a second the hosts with work left could make: each one over its spacing, or
    over the wait to its next allowed time when that is longer (a back-off, a not-before)."""
    return sum(1.0 / max(spacing_s(s), s.next_allowed - now) for s in slots if has_work(s))


def measured_share(slots: Iterable[HostSlot]) -> float:
    """Share of the hosts with work left whose request cycle has been seen (``cycle_s``)."""
    working = measured = 0
    for s in slots:
        if has_work(s):
            working += 1
            measured += s.cycle_s > 0
    return measured / working if working else 1.0


MEASURED_SHARE = 0.5
"""The peak rate is taken only while at least this share of the hosts with work have had a
response: an unasked host counts at its bare delay, and a peak of those is no yardstick for
measured hosts. At the start of the named-host HTTPS test web's fetch (3,000 new hosts, round
trips 20-500 ms, TLS handshakes, ``delay_factor`` x response time) every host counted at 1 s
made a peak that the measured cycles of 3-9 s (a loaded machine) fell under by 4x: both partitions stopped as a
"tail" at half their planned length with 43,965 of 45,043 URLs not reached
(scripts/bench_fetch.py --real-web)."""


class TailWatch:
    """Says once when a partition's fetch has become a tail (module doc).

    ``share``: ``fetch.tail_share`` (0: never); ``after_s``: seconds from the start before
    the rule applies (``fetch.tail_after_share`` of the planned length)."""

    def __init__(self, share: float, after_s: float, started: float):
        self.share = share
        self.after_s = after_s
        self.started = started
        self.peak = 0.0
        """The highest :func:`request_rate` seen in this fetch."""
        self.rate = 0.0
        self._checked = started - TAIL_CHECK_S

    def is_tail(self, slots: Iterable[HostSlot], now: float) -> bool:
        if self.share <= 0 or now - self._checked < TAIL_CHECK_S:
            return False
        self._checked = now
        slots = list(slots)
        self.rate = request_rate(slots, now)
        if measured_share(slots) >= MEASURED_SHARE:
            self.peak = max(self.peak, self.rate)
        return now - self.started >= self.after_s and self.rate < self.share * self.peak


EARLY_END_FILE = "end-early"
"""In the segment's progress folder (cycles/fetch/partition.py ``progress_dir``): when it
exists, each partition hands back what it has not reached, as at ``fetch.max_duration_s``,
and finishes (cycles/fetch/fetch.py ``request_early_end``)."""

EARLY_END_CHECK_S = 0.1
"""How often :class:`EndWatch` looks for :data:`EARLY_END_FILE` (one stat(2))."""


class EndWatch:
    """Says once why a partition's fetch ends before its fetch list is done, setting that
    reason's counter: the planned length (``fetch/time_limit_stop``), a tail
    (``fetch/tail_stop``), a rate under ``fetch.throughput_min_pages_s``
    (``fetch/throughput_stop``) or :data:`EARLY_END_FILE` (``fetch/end_requested``).

    ``limit_s``: ``fetch.max_duration_s`` when set, else the segment's planned length (0: no end)."""

    def __init__(self, fc: FetchConfig, limit_s: float, started: float, stats: Counter, progress_dir: Path):
        self.fc = fc
        self.started = started
        self.stats = stats
        self.progress_dir = progress_dir
        self.deadline = started + limit_s if limit_s > 0 else None
        """Monotonic time the fetch ends at (None: no end planned)."""
        self.tail = TailWatch(fc.tail_share if limit_s > 0 else 0.0, fc.tail_after_share * limit_s, started)
        self._window_start, self._window_requests = started, 0
        self._early_end_checked = 0.0

    def ended(self, slots: Iterable[HostSlot], now: float) -> bool:
        """True when a rule (class doc) ends the fetch now; the rules are asked in that order
        and the first one that holds is counted."""
        if self.deadline is not None and now >= self.deadline:
            self.stats["fetch/time_limit_stop"] = 1
        elif self.tail.is_tail(slots, now):
            # A few hosts waiting out long spacings: the next segment has every due host.
            self.stats["fetch/tail_stop"] = 1
            self.stats["fetch/tail_stop_at_s"] = round(now - self.started, 1)
        elif self._throughput_low(now):
            self.stats["fetch/throughput_stop"] = 1
        elif self._early_end_requested(now):
            self.stats["fetch/end_requested"] = 1
        else:
            return False
        return True

    def _throughput_low(self, now: float) -> bool:
        """True once, when the requests started over the last ``fetch.throughput_window_s``
        fall under ``fetch.throughput_min_pages_s`` a second (after ``throughput_after_s``)."""
        fc = self.fc
        if fc.throughput_min_pages_s <= 0 or now - self._window_start < fc.throughput_window_s:
            return False
        rate = (self.stats["fetch/requests"] - self._window_requests) / (now - self._window_start)
        self._window_start, self._window_requests = now, self.stats["fetch/requests"]
        return now - self.started >= fc.throughput_after_s and rate < fc.throughput_min_pages_s

    def _early_end_requested(self, now: float) -> bool:
        """True when :data:`EARLY_END_FILE` exists (looked for every ``EARLY_END_CHECK_S``)."""
        if now - self._early_end_checked < EARLY_END_CHECK_S:
            return False
        self._early_end_checked = now
        return (self.progress_dir / EARLY_END_FILE).exists()
