"""The host slots of one partition's fetch: set up, politeness after each response, set aside.

:class:`HostSteps` is the one home of what happens to a host's slot (cycles/fetch/frontier.py)
in the fetch loop; the rules themselves are in cycles/fetch/politeness.py (spacing, back-off,
failures, windows), cycles/fetch/robots_state.py (robots.txt) and cycles/fetch/dns.py:

- :meth:`~HostSteps.init_slot`: a slot from the host DB's row (delay, robots.txt copy,
  spacing across cycles, TLS and DNS state), for a fetch-list host or one met on the way
  (a redirect target, a discovered new host: :meth:`~HostSteps.outside_slot`);
- :meth:`~HostSteps.next_request`: robots.txt first, then the sitemaps it names, then the
  queue (a URL robots.txt disallows gets its row, never a request);
- :meth:`~HostSteps.learn` and :meth:`~HostSteps.after_response`: what a response tells the
  slot (cycles/fetch/classify.py ``Outcome.host``), and its spacing: the host's delay (a
  slow host's longer) from the end of the response;
- :meth:`~HostSteps.set_aside`: the host is done for this cycle, its queue deferred;
- the DNS gate (:meth:`~HostSteps.dns_ready`): a slot waits off the heap for its lookup.
"""

from __future__ import annotations

import time
from collections import Counter

from cycles.config import Config
from cycles.fetch import politeness
from cycles.fetch.classify import HOST_BACK_OFF, HOST_FAILURE
from cycles.fetch.dns import Resolver
from cycles.fetch.exchange import wall
from cycles.fetch.frontier import ABORTED_MARGIN_S, SPACING_MARGIN_S, Frontier, HostSlot
from cycles.fetch.inline import InlineFetches
from cycles.fetch.records import FetchItem
from cycles.fetch.robots import robots_url
from cycles.fetch.robots_state import RobotsSteps
from cycles.fetch.rows import Rows
from cycles.fetch.tls import TlsSteps
from cycles.fetch.transfer import Request, Transfer, validator_headers
from cycles.storage.store import Store
from cycles.tables.hostdb import load_host_state
from cycles.tables.schema import FetchOutcome as O
from cycles.tables.sitemaps import SitemapSteps
from cycles.urls import url_host


class HostSteps:
    """The slots of one partition's hosts, counted into ``stats`` (module doc)."""

    def __init__(self, store: Store, segment: str, config: Config, frontier: Frontier, stats: Counter,
                 steps: tuple[RobotsSteps, SitemapSteps, TlsSteps, Resolver], inline: InlineFetches):
        self.store = store
        self.segment = segment
        self.fc = config.fetch
        self.floor_s = config.effective_delay_s()
        self.frontier = frontier
        self.stats = stats
        self.robots, self.sitemaps, self.tls, self.dns = steps
        self.inline = inline
        self.rows: Rows | None = None
        """Where deferred and denied URLs' rows go (set once the output is open)."""
        self.resumed = False
        """An earlier run of the partition started and did not finish: every host waits a full delay first."""

    # --- set-up ---------------------------------------------------------------------------
    def init_slot(self, slot: HostSlot, first_url: str, state: dict | None, now_mono: float,
                  now_wall: float) -> None:
        """A new slot from the host DB's row: delay, robots.txt copy, spacing and window."""
        slot.delay_s = self.floor_s
        self.dns.known(slot.host, state)
        self.tls.load(slot.host, state)
        if state is not None:
            if state["crawl_delay_s"]:
                slot.delay_s = max(self.floor_s, float(state["crawl_delay_s"]))
            if self.robots.load(slot.robots, state, now_wall):
                self.settle_robots(slot, now_wall)
        politeness.restore_spacing(slot, state, now_mono, now_wall, self.resumed, self.fc)
        if slot.robots.rules is None:
            slot.robots.url = robots_url(first_url)

    def outside_slot(self, host: str, first_url: str) -> HostSlot:
        """A slot for a host not in the fetch list, set up as the fetch list's are (its state
        read from the host DB: spacing across cycles and robots.txt hold)."""
        slot = self.frontier.slot(host)
        state = load_host_state(self.store, {host}, self.segment).get(host)
        now_mono = time.monotonic()
        self.init_slot(slot, first_url, state, now_mono, time.time())
        self.set_aside_if_far(slot, now_mono)
        return slot

    def redirect_slot(self, host: str, first_url: str) -> HostSlot:
        """The slot of a redirect target's host; one outside the fetch list is set up."""
        slot = self.frontier.slots.get(host)
        if slot is None:
            self.stats["fetch/redirect_new_host"] += 1
            slot = self.outside_slot(host, first_url)
        return slot

    def discovery_slot(self, host: str, url: str) -> HostSlot | None:
        """The host's slot for a discovered link; a new host this worker claimed
        (cycles/tables/newhosts.py) gets one set up as a redirect target's."""
        slot = self.frontier.slots.get(host)
        if slot is None and host in self.inline.own_hosts:
            self.stats["discover/new_host_slots"] += 1
            slot = self.outside_slot(host, url)
        return slot

    # --- set aside ------------------------------------------------------------------------
    def set_aside(self, slot: HostSlot, reason: str, outcome: str = O.DEFERRED) -> None:
        """The host is done for this cycle: every queued URL gets a row (deferred: asked again
        by a later cycle) with the reason."""
        slot.set_aside = reason
        self.stats["fetch/hosts_set_aside"] += 1
        self.rows.drain(slot, outcome, reason)

    def set_aside_if(self, slot: HostSlot, reason: str | None) -> None:
        """Set the host aside when a politeness rule gave a reason."""
        if reason is not None:
            self.set_aside(slot, reason)

    def set_aside_if_far(self, slot: HostSlot, now_mono: float) -> None:
        self.set_aside_if(slot, politeness.far_window(slot, now_mono, self.fc, self.stats))

    def settle_robots(self, slot: HostSlot, now_wall: float | None = None) -> None:
        """The robots.txt rules in force (cycles/fetch/robots_state.py); unreachable,
        unreadable or a Crawl-delay too long sets the host aside."""
        self.set_aside_if(slot, self.robots.settle(slot, now_wall))

    # --- requests and responses -----------------------------------------------------------
    def next_request(self, slot: HostSlot) -> Request | None:
        """robots.txt while it is pending, then the sitemaps it names, then the queue."""
        if slot.robots.url:
            return Request(slot.robots.url, slot.host, "robots", None, self.robots.validators(slot.robots))
        sitemap = self.sitemaps.next_url(slot.host, slot.robots.rules.allowed) if slot.queue else None
        if sitemap is not None:
            return Request(sitemap[0], slot.host, "sitemap", sitemap_depth=sitemap[1])
        while slot.queue:
            item = slot.queue.popleft()
            if not slot.robots.rules.allowed(item.url):
                self.stats["robots/denied"] += 1
                self.rows.add(item, O.ROBOTS_DENIED, error="disallowed by robots.txt")
                continue
            return Request(item.url, slot.host, "page", item, _conditional_headers(item))
        return None

    def learn(self, slot: HostSlot, transfer: Transfer, host: str | None, status: int | None) -> None:
        """What the response tells the host's slot (cycles/fetch/classify.py ``Outcome.host``)."""
        if host == HOST_FAILURE:
            self.set_aside_if(slot, politeness.count_failure(slot, self.fc))
        elif host is not None:
            politeness.answered(slot, status)
            if host == HOST_BACK_OFF:
                self.set_aside_if(slot, politeness.back_off(slot, transfer, status, time.time(), self.fc, self.stats))

    def after_response(self, slot: HostSlot, transfer: Transfer) -> None:
        """The slot's spacing once the response's steps ran: robots.txt may just have raised
        the delay (Crawl-delay), and a back-off may already have pushed next_allowed further."""
        politeness.space_after_response(slot, transfer, self.fc)
        delay = politeness.delay_after(slot, transfer, self.fc)
        slot.cycle_s = transfer.duration_s + delay
        self.frontier.finished(slot, transfer.ended + delay + SPACING_MARGIN_S)

    def after_cut(self, slot: HostSlot, transfer: Transfer, now: float, now_wall: float) -> None:
        """A transfer we cut at the partition's end: the host's spacing counts from now, as
        after a response we aborted (the server sees the close now), its slow-host delay
        included, so the next segment asks it no sooner (written with the hosts/ output)."""
        transfer.ended, transfer.duration_s = now, now - transfer.started
        slot.last_request_end_wall = now_wall
        slot.next_allowed = max(slot.next_allowed, now + politeness.delay_after(slot, transfer, self.fc)
                                + ABORTED_MARGIN_S)
        self.frontier.finished(slot, slot.next_allowed)

    # --- DNS ------------------------------------------------------------------------------
    def dns_ready(self, slot: HostSlot, now_wall: float) -> bool:
        """May the slot's next request start? Yes for a name whose answer stands (or that
        libcurl resolves: cycles/fetch/dns.py). A name whose failure stands sets the host
        aside at once (no lookup: its back-off holds); any other name is looked up, and the
        slot waits off the heap until :meth:`dns_answered`."""
        # A robots.txt redirect's target (RFC 9309 §2.3.1.2; often another name, www. or a
        # CDN) is looked up and pinned like the host's own name, not left to libcurl.
        host = url_host(slot.robots.url) if slot.robots.url else slot.host
        if not self.dns.applies(host):
            return True
        answer = self.dns.answer(host, now_wall)
        if answer is None:
            self.dns.submit(host)
            self.dns.waiting.setdefault(host, set()).add(slot.host)
            return not self.dns.applies(host)  # the resolver could not start: libcurl resolves
        if answer.error is None:
            return True
        if answer.seconds == 0.0:
            self.stats["dns/cached_failure"] += 1
        self._dns_failed(slot, answer)
        return False

    def dns_answered(self) -> None:
        """Lookups that ended: their hosts go back on the heap (or aside, when they failed)."""
        for host, answer in self.dns.completed():
            for name in self.dns.waiting.pop(host, (host,)):
                slot = self.frontier.slots.get(name)
                if slot is None:
                    continue
                if answer.error is not None:
                    self._dns_failed(slot, answer)
                else:
                    self.frontier.schedule(slot)

    def _dns_failed(self, slot: HostSlot, answer) -> None:
        """The name did not resolve: the host's URLs are deferred with the failure's kind
        (``dns nxdomain: ...``) and robots.txt is not asked; the back-off is the answer's expiry."""
        slot.robots.url = None
        if slot.set_aside is None:
            self.set_aside(slot, answer.reason())

    # --- the hosts/ output ----------------------------------------------------------------
    def host_rows(self) -> list[dict]:
        """The HOSTS rows of every host this run asked, learnt about or looked up."""
        now_mono, now_wall = time.monotonic(), time.time()
        return [{"host": s.host,
                 "last_request_end": wall(s.last_request_end_wall) if s.last_request_end_wall else None,
                 "not_before": politeness.not_before_wall(s, now_mono, now_wall, self.fc),
                 "crawl_delay_s": s.delay_s, **s.robots.host_row(), **self._dns_columns(s.host),
                 **self.tls.host_row(s.host)}
                for s in self.frontier.slots.values()
                if s.last_request_end_wall is not None or s.robots.fetched_at is not None
                or s.host in self.dns.answers]

    def _dns_columns(self, host: str) -> dict:
        answer = self.dns.answers.get(host)
        return answer.host_columns() if answer is not None else {}


def _conditional_headers(item: FetchItem) -> list[str]:
    """A refetch asks whether the page changed (RFC 9110 §13.1): a 304 costs no body."""
    return validator_headers(item.etag, item.last_modified)
