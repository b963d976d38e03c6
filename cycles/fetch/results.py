"""Where a finished transfer goes: classified, archived, written, and its host told.

:meth:`Results.route` classifies the transfer (cycles/fetch/classify.py) and hands it to the
step of its outcome:

- a TLS failure (:meth:`~Results.tls_failure`): the exchange's WARC metadata record, then
  the host fetched unverified (``fetch.tls_archive_anyway``) or backed off as a whole;
- a refused address (SSRF guard): the page's row, or for robots.txt the whole host ``blocked``;
- a robots.txt answer (:meth:`~Results.robots`): read (cycles/fetch/robots_state.py), its
  rules settled on the slot, its sitemaps queued;
- a sitemap answer (:meth:`~Results.sitemap`): read (cycles/tables/sitemaps.py), the URLs it
  lists written;
- a page (:meth:`~Results.page`): its row; a 2xx stored and parsed (cycles/fetch/pages.py),
  a redirect's target written as an outlink and maybe followed (cycles/fetch/redirects.py).

Every exchange is archived before its row is written (the row holds its WARC location;
cycles/fetch/warc_records.py decides which records it gets).
"""

from __future__ import annotations

import time
from collections import Counter

from cycles import clock
from cycles.config import FetchConfig
from cycles.fetch.warc_records import Archive
from cycles.fetch.classify import ROBOTS_ANSWER, SITEMAP_ANSWER, HOST_FAILURE, Outcome, classify, curl_error
from cycles.fetch.exchange import request_headers, request_line, response_of, started_iso, wall
from cycles.fetch.frontier import HostSlot
from cycles.fetch.hosts import HostSteps
from cycles.fetch.output import PartitionOutput
from cycles.fetch.pages import Pages
from cycles.fetch.robots import robots_url
from cycles.fetch.rows import Rows
from cycles.fetch.transfer import Transfer
from cycles.tables.schema import FetchOutcome as O


class Results:
    """The steps a finished transfer goes through (module doc), counting into ``stats``."""

    def __init__(self, fc: FetchConfig, stats: Counter, hosts: HostSteps, rows: Rows, output: PartitionOutput,
                 archive: Archive, pages: Pages):
        self.fc = fc
        self.stats = stats
        self.hosts = hosts
        self.rows = rows
        self.output = output
        self.archive = archive
        self.pages = pages

    def route(self, slot: HostSlot, transfer: Transfer, error: tuple[int, str] | None, tls_reason: str | None) -> None:
        """Classify the finished transfer and hand it to its step."""
        outcome = classify(response_of(transfer, error, tls_reason))
        for name in outcome.counters:
            self.stats[name] += 1
        kind = transfer.request.kind
        if outcome.outcome == O.TLS_FAILED:
            self.tls_failure(slot, transfer, tls_reason, error, outcome.error)
        elif outcome.outcome == O.BLOCKED:
            if kind == "robots":
                # Not a robots.txt answer (no robots state is written) and not a host failure:
                # not one packet was sent. Deferring would bring the URLs back every hour.
                slot.robots.url = None
                self.hosts.set_aside(slot, outcome.error, O.BLOCKED)
            elif kind == "page":
                self.rows.add(transfer.request.item, O.BLOCKED, error=outcome.error)
        elif outcome.outcome == ROBOTS_ANSWER:
            self.robots(slot, transfer, error)
        elif outcome.outcome == SITEMAP_ANSWER:
            self.sitemap(slot, transfer, error, outcome)
        else:
            self.page(slot, transfer, outcome)

    def _archive(self, transfer: Transfer, error: str | None, outcome: str | None = None) -> dict | None:
        """The exchange's WARC records (cycles/fetch/warc_records.py); a page's WARC location."""
        args = (transfer, transfer.ip, request_line(transfer), request_headers(transfer, self.fc.user_agent),
                started_iso(transfer))
        kind = transfer.request.kind
        if kind == "robots":
            return self.archive.robots(*args, error)
        if kind == "sitemap":
            return self.archive.sitemap(*args, error)
        return self.archive.page(*args, outcome, error)

    def tls_failure(self, slot: HostSlot, transfer: Transfer, reason: str, error: tuple[int, str],
                    text: str) -> None:
        """The TLS handshake failed (cycles/fetch/tls.py): the exchange's WARC metadata record,
        then either the host fetched unverified (``fetch.tls_archive_anyway``; the request is
        asked again) or the whole host backed off: the URL asked and every queued one get
        ``tls_failed``, the host is set aside and its ``not_before`` moves ahead. Never a
        retry over plain http."""
        message = curl_error(error)
        transfer.tls_failure = (reason, message)
        wait, unverified = self.hosts.tls.failed(slot.host, reason, message, wall(time.time()))
        kind = transfer.request.kind
        if kind != "page" or unverified:  # an unverified page is asked again; its exchange archived all the same
            self._archive(transfer, text, O.TLS_FAILED)
        if unverified:
            # Archive anyway: robots.txt stays pending (asked again), a page goes back first.
            if kind == "page":
                slot.queue.appendleft(transfer.request.item)
            return
        if kind == "page":
            self._fetched(transfer, O.TLS_FAILED, [], error=text,
                          fetched_at=wall(transfer.started_wall + clock.offset_s()),
                          duration_ms=int(transfer.duration_s * 1000), body_bytes=0)
        slot.next_allowed = max(slot.next_allowed, transfer.ended + wait)
        slot.robots.url = None
        self.hosts.set_aside(slot, f"{text}; host backed off {wait:.0f} s", O.TLS_FAILED)

    def robots(self, slot: HostSlot, transfer: Transfer, error: tuple[int, str] | None) -> None:
        """A robots.txt answer: archived, read; once in (not a redirect hop), its rules settle
        on the slot and the sitemaps it names are queued (cycles/tables/sitemaps.py)."""
        self._archive(transfer, curl_error(error) if error is not None else None)
        if self.hosts.robots.read_response(slot.robots, transfer, error):
            self.hosts.settle_robots(slot)
            rules = slot.robots.rules
            if slot.set_aside is None and rules is not None and slot.queue and rules.sitemaps():
                self.hosts.sitemaps.start(slot.host, robots_url(slot.queue[0].url), rules.sitemaps())

    def sitemap(self, slot: HostSlot, transfer: Transfer, error: tuple[int, str] | None, outcome: Outcome) -> None:
        """A sitemap answer: archived, then read; failures count against the host as a page's do."""
        self._archive(transfer, curl_error(error) if error is not None else None)
        status = None if outcome.host == HOST_FAILURE else transfer.status_code()
        self.hosts.learn(slot, transfer, outcome.host, status)
        rows = self.hosts.sitemaps.read(slot.host, transfer.request.url, transfer.request.sitemap_depth,
                                        status, transfer.body() if status is not None else b"",
                                        transfer.header("content-encoding"),
                                        wall(transfer.started_wall + clock.offset_s()))
        self.output.add_sitemap_urls(rows)

    def page(self, slot: HostSlot, transfer: Transfer, outcome: Outcome) -> None:
        """A page's row, as classified; a 2xx is stored and parsed, a redirect maybe followed."""
        item = transfer.request.item
        # Scheduling time (cycles.clock, shiftable in simulations); politeness uses real time.
        common = dict(fetched_at=wall(transfer.started_wall + clock.offset_s()),
                      duration_ms=int(transfer.duration_s * 1000), body_bytes=transfer.size)
        status = transfer.status_code()
        if status is not None:
            common.update(http_status=status, content_type=transfer.header("content-type"),
                          etag=transfer.header("etag"), last_modified=transfer.header("last-modified"))
        self.stats["fetch/bytes"] += transfer.size
        self.hosts.learn(slot, transfer, outcome.host, status)
        if outcome.outcome == O.OK:
            stored, links, values = self.pages.store(slot, transfer)
            self._fetched(transfer, stored, links, **values, **common)
        elif outcome.follow:
            error = self.pages.follow_redirect(slot, item, outcome.redirect_to)
            self._fetched(transfer, O.REDIRECT, [self.pages.link(item, outcome.redirect_to, "", False)],
                          redirect_to=outcome.redirect_to, error=error, **common)
        else:
            self._fetched(transfer, outcome.outcome, [], redirect_to=outcome.redirect_to, error=outcome.error,
                          **common)

    def _fetched(self, transfer: Transfer, outcome: str, links: list[dict], **values) -> None:
        """The row of a page that was requested, its exchange archived first (its WARC location
        goes into the row; cycles/fetch/warc_records.py)."""
        location = self._archive(transfer, values.get("error"), outcome)
        self.rows.add(transfer.request.item, outcome, links, **values, **location)
