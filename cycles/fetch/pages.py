"""A page the server answered: its body stored and parsed, its links offered, its redirect followed.

:class:`Pages` turns a 2xx into the row's columns and outlinks (the body inflated within
``fetch.max_page_bytes``, then parsed: cycles/fetch/parse.py), offers the links to
discovery (cycles/fetch/discovery.py) and a redirect's target to cycles/fetch/redirects.py;
the hosts either queues get back on the frontier's heap.
"""

from __future__ import annotations

from collections import Counter

from cycles.config import FetchConfig
from cycles.fetch.discovery import Discovery
from cycles.fetch.frontier import Frontier, HostSlot
from cycles.fetch.hosts import HostSteps
from cycles.fetch.parse import parse_html
from cycles.fetch.records import FetchItem
from cycles.fetch.redirects import Redirects
from cycles.fetch.transfer import Transfer, decoded_body
from cycles.tables.schema import FetchOutcome as O


class Pages:
    """Stores 2xx pages and follows what they lead to, counting into ``stats``."""

    def __init__(self, fc: FetchConfig, stats: Counter, frontier: Frontier, hosts: HostSteps,
                 discovery: Discovery, redirects: Redirects):
        self.fc = fc
        self.stats = stats
        self.frontier = frontier
        self.hosts = hosts
        self.discovery = discovery
        self.redirects = redirects

    def store(self, slot: HostSlot, transfer: Transfer) -> tuple[str, list[dict], dict]:
        """A 2xx page's outcome, outlinks and row columns: ``ok`` when parsed, ``too_large``
        when its body does not inflate within the cap, ``parse_error`` when the parser crashed."""
        item = transfer.request.item
        body = decoded_body(transfer.body(), transfer.header("content-encoding"), self.fc.max_page_bytes)
        if body is None:
            return O.TOO_LARGE, [], {"error": "body does not inflate within the size cap"}
        try:
            page = parse_html(body, item.url, transfer.header("content-type"), self.fc.robots_agent,
                              self.fc.minhash_block_min_bytes if self.fc.minhash_main_content else None)
        except Exception as exc:  # a parser crash costs one page, never the worker
            self.stats["parse/crash"] += 1
            return O.PARSE_ERROR, [], {"error": f"parser crashed: {type(exc).__name__}: {exc}"[:500]}
        self.stats["parse/pages"] += 1
        links = [self.link(item, link.url, link.anchor, link.nofollow) for link in page.links]
        self.stats["parse/links"] += len(links)
        if self.discovery.enabled:
            for target in self.discovery.offer(item, links, self.hosts.discovery_slot):
                if target is not slot:  # the finishing slot is rescheduled when its response is done
                    self.frontier.schedule(target)
        return O.OK, links, dict(title=page.title, text=page.text, content_hash=page.content_hash,
                                 minhash=page.minhash, canonical=page.canonical, noindex=page.noindex)

    def follow_redirect(self, slot: HostSlot, item: FetchItem, target: str) -> str | None:
        """Queue the target if this worker fetches it now (cycles/fetch/redirects.py); the
        error for the redirect's row."""
        error, target_slot = self.redirects.follow(item, target, self.hosts.redirect_slot)
        if target_slot is not None and target_slot is not slot:  # the finishing slot is rescheduled when done
            self.frontier.schedule(target_slot)
        return error

    @staticmethod
    def link(item: FetchItem, url: str, anchor: str, nofollow: bool) -> dict:
        """An outlink row of the page ``item`` (``schema.OUTLINKS``)."""
        return {"from_url": item.url, "url": url, "anchor": anchor, "nofollow": nofollow,
                "depth": min(item.depth + 1, 32767)}
