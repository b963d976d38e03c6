"""Politeness rules on a host's slot: spacing, back-off, failures, set-aside windows.

Each function reads or moves a :class:`~cycles.fetch.frontier.HostSlot`'s times (monotonic
clock) and returns why the host must be set aside for this cycle, if it must; the fetch
loop (cycles/fetch/worker.py) then defers the host's URLs. Counted in ``fetch/backoff``,
``fetch/retry_after`` and ``fetch/not_before_set_aside``.

- spacing: ``delay`` seconds between the end of one response and the next request, longer
  for a slow host (``fetch.delay_factor`` × response time), kept across cycles through the
  host DB's ``last_request_end``;
- back-off: a 429/503 waits what Retry-After asks (capped), else exponentially longer;
- failures: ``fetch.max_host_failures`` consecutive network errors or 5xx set the host aside;
- windows: every wait learnt is written as ``not_before`` and honoured by the next run.
"""

from __future__ import annotations

import datetime as dt
import email.utils
from collections import Counter

from cycles.config import FetchConfig
from cycles.fetch.frontier import ABORTED_MARGIN_S, SPACING_MARGIN_S, HostSlot
from cycles.fetch.transfer import Transfer


def _wall(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc)


def retry_after_s(value: str | None, now_wall: float) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP-date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return max(0.0, when.timestamp() - now_wall)


def restore_spacing(slot: HostSlot, state: dict | None, now_mono: float, now_wall: float, resumed: bool,
                    fc: FetchConfig) -> None:
    """The slot's next-allowed time from the host DB (last response end, not_before) and,
    for a resumed partition, a full delay from now."""
    if state is not None and state["last_request_end"] is not None:
        # Keep the spacing across cycles: the wall-clock end of the last response,
        # mapped onto this process's monotonic clock.
        wait = state["last_request_end"].timestamp() + slot.delay_s + SPACING_MARGIN_S - now_wall
        slot.next_allowed = now_mono + max(0.0, wait)
        slot.last_request_end_wall = state["last_request_end"].timestamp()
    if state is not None and state["not_before"] is not None:
        # A Retry-After, back-off or slow-host delay learnt by an earlier run (wall clock),
        # held whatever made the host's URLs due (deferred URLs come back after
        # update.deferred_retry_s, maybe sooner than the host asked).
        wait = min(state["not_before"].timestamp() - now_wall, fc.max_not_before_s)
        slot.next_allowed = max(slot.next_allowed, now_mono + wait)
    if resumed:
        # A killed run may have asked this host after its last flush: wait a full delay.
        slot.next_allowed = max(slot.next_allowed, now_mono + slot.delay_s + SPACING_MARGIN_S)


def far_window(slot: HostSlot, now_mono: float, fc: FetchConfig, stats: Counter) -> str | None:
    """A host whose not_before (from the host DB) is further away than a Retry-After we wait
    out in a cycle is set aside now, as :func:`back_off` would have: its URLs are deferred
    rather than holding this worker, and it is not asked inside the window."""
    wait = slot.next_allowed - now_mono
    if slot.set_aside is None and wait > fc.max_retry_after_s:
        stats["fetch/not_before_set_aside"] += 1
        return f"host's not_before is {wait:.0f}s away (over fetch.max_retry_after_s); set aside for this cycle"
    return None


def delay_after(slot: HostSlot, transfer: Transfer, fc: FetchConfig) -> float:
    """Spacing before the next request: the host's delay, longer for a slow host — slow to
    answer: the response time counts from the request sent, not the new connection's connect
    and TLS handshake before it (``Transfer.setup_s``). Counted in, the first request of each
    segment's new connection doubled a 484 ms host's delay to 2 s (bench_crawl --real-web:
    ~1 s lost on h0 at each of ~10 segment boundaries)."""
    answer_s = max(0.0, transfer.duration_s - transfer.setup_s)
    return max(slot.delay_s, min(fc.max_crawl_delay_s, fc.delay_factor * answer_s))


def space_after_response(slot: HostSlot, transfer: Transfer, fc: FetchConfig) -> None:
    """After the response's handlers: robots.txt may just have raised the delay (Crawl-delay),
    and a back-off may already have pushed next_allowed further."""
    slot.next_allowed = max(slot.next_allowed, transfer.ended + delay_after(slot, transfer, fc) + margin_after(transfer))


def margin_after(transfer: Transfer) -> float:
    """:data:`~cycles.fetch.frontier.SPACING_MARGIN_S` after a complete response, the larger
    :data:`~cycles.fetch.frontier.ABORTED_MARGIN_S` after one cut short (its end is the server's to notice)."""
    return ABORTED_MARGIN_S if transfer.abort or transfer.error is not None else SPACING_MARGIN_S


def count_failure(slot: HostSlot, fc: FetchConfig) -> str | None:
    """A network error: past fetch.max_host_failures in a row the host is set aside."""
    slot.failures += 1
    if slot.failures >= fc.max_host_failures:
        return f"{slot.failures} consecutive failures; host set aside for this cycle"
    return None


def answered(slot: HostSlot, status: int) -> None:
    """The host answered with ``status``: a run of failures ends unless it is a 429/5xx
    (counted by :func:`back_off`), a run of back-offs on a 2xx or 304."""
    if not (status == 429 or status >= 500):
        slot.failures = 0
    if 200 <= status < 300 or status == 304:
        slot.backoffs = 0


def back_off(slot: HostSlot, transfer: Transfer, status: int, now_wall: float, fc: FetchConfig,
             stats: Counter) -> str | None:
    """429/503: wait what Retry-After asks (capped), else back off exponentially."""
    slot.backoffs += 1
    if status >= 500:
        slot.failures += 1
    wait = retry_after_s(transfer.header("retry-after"), now_wall)
    if wait is None:
        wait = min(fc.max_retry_after_s, slot.delay_s * 2 ** slot.backoffs)
    stats["fetch/backoff"] += 1
    # Before any set-aside: a set-aside host's window is written to the host DB too
    # (not_before), so the next cycle does not ask it inside the window either.
    slot.next_allowed = max(slot.next_allowed, transfer.ended + min(wait, fc.max_not_before_s) + SPACING_MARGIN_S)
    if slot.failures >= fc.max_host_failures:
        return f"{slot.failures} consecutive failures (last HTTP {status}); host set aside for this cycle"
    if wait > fc.max_retry_after_s:
        return f"host asked us to wait {wait:.0f}s (HTTP {status}); set aside for this cycle"
    stats["fetch/retry_after"] += 1 if transfer.header("retry-after") else 0
    return None


def not_before_wall(slot: HostSlot, now_mono: float, now_wall: float, fc: FetchConfig) -> dt.datetime | None:
    """The slot's next-allowed time (monotonic) on the wall clock, for HOSTS.not_before:
    every wait the run learnt (Retry-After, back-off, Crawl-delay, slow host) in one time.
    None if the slot never had one."""
    if slot.next_allowed <= 0.0:
        return None
    return _wall(now_wall + min(slot.next_allowed - now_mono, fc.max_not_before_s))
