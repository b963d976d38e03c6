"""Page redirects followed inline, hop by hop through the frontier.

A 3xx is recorded by the worker (outcome ``redirect``, target in ``redirect_to``, and the
target written as an outlink). :meth:`Redirects.follow` then decides whether this worker
fetches the target in this cycle: when it owns the target's host and the target, normalised
and passing the URL filters, has no row yet (cycles/fetch/inline.py, the one home of "may
this URL be fetched inline"), it is queued at the
front of its host's queue carrying the chain so far. It then waits its host's delay and
robots.txt like any URL, and gets its own fetched row (update adds it to the crawl DB if new).

Not followed, each counted under ``fetch/redirect_*``: a target already in the chain (a loop:
the hop's row says ``redirect loop``), a hop past ``fetch.max_redirects`` (``too many
redirects``), a URL already listed or followed in this partition (it has, or will have, its
own row), a host of another partition or one set aside (fetched in a later cycle, as the
outlink), a URL the crawl DB holds as fetched and not yet due (``fetch/redirect_known``: an
earlier cycle fetched it; cycles/fetch/known.py), a URL the crawl DB holds as due
(``fetch/redirect_due``: generate lists it — the next segment of ``crawl run``, generated
before this one's update, would have fetched it a second time).
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from typing import Callable

from cycles import clock
from cycles.config import Config
from cycles.fetch.frontier import HostSlot
from cycles.fetch.known import known_urls
from cycles.fetch.inline import InlineFetches
from cycles.fetch.records import FetchItem
from cycles.storage.store import Store
from cycles.urls import host_hash, url_host


class Redirects:
    """The redirect targets one partition follows (and the URLs it already has rows for)."""

    def __init__(self, store: Store, config: Config, inline: InlineFetches, stats: Counter):
        self.store = store
        self.max_redirects = config.fetch.max_redirects
        self.inline = inline
        """Which hosts are ours and which URLs already have a row (cycles/fetch/inline.py)."""
        self.stats = stats
        self.known: dict[str, tuple[set[str], set[str]]] = {}
        """Per host that redirected: its URLs the crawl DB holds as fetched and not yet due,
        and as due (cycles/fetch/known.py), read once per partition run."""
        self._crawldb_manifest = None
        """The crawl DB version those lookups read (taken at the first one)."""

    def follow(self, item: FetchItem, target: str, slot_for: Callable[[str, str], HostSlot]) -> tuple[str | None, HostSlot | None]:
        """Queue a redirect's target for this cycle if this worker may fetch it.

        ``slot_for(host, url)`` gives the target host's slot (set up from the host DB if new).
        Returns the error to record on the redirect's row (None, ``redirect loop`` or ``too
        many redirects``) and the slot the target was queued on, if it was."""
        url = self.inline.prepare(target)
        if url is None:
            self.stats["fetch/redirect_filtered"] += 1  # update would drop it too
            return None, None
        chain = item.redirect_chain or (item.url,)
        if url in chain:
            self.stats["fetch/redirect_loop"] += 1
            return "redirect loop", None
        if len(chain) > self.max_redirects:  # this would be hop max_redirects + 1
            self.stats["fetch/redirect_too_many"] += 1
            return "too many redirects", None
        if url in self.inline.listed_urls:
            self.stats["fetch/redirect_already_listed"] += 1
            return None, None
        host = url_host(url)
        if not self.inline.owns(host):
            # Another worker owns the host (and its politeness): a later cycle fetches it.
            self.stats["fetch/redirect_other_partition"] += 1
            return None, None
        # A known host outside every fetch list of this segment is followed even though a
        # segment generated meanwhile (`crawl run`) may list it: segments are fetched one at
        # a time, and that segment's worker sets the host's slot up from this segment's
        # hosts/ output (cycles/tables/hostdb.py load_host_state), which holds this request, its
        # Crawl-delay and any Retry-After — also after a kill, as a resumed partition keeps
        # its rows (cycles/fetch/resumed_hosts.py). Leaving it to the later segment instead
        # would cost every cross-host redirect a segment (tests/test_run_redirect.py).
        not_due, due = self._known(host)
        if url in not_due:
            # Fetched in an earlier cycle and not due again yet: the redirect's row (and its
            # outlink) is enough; the target stays as the crawl DB has it.
            self.stats["fetch/redirect_known"] += 1
            return None, None
        if url in due:
            # Due: a generate lists it. `crawl run` generates the next segment before this
            # one is updated, so fetched here it was listed and fetched there again.
            self.stats["fetch/redirect_due"] += 1
            return None, None
        target_slot = slot_for(host, url)
        if target_slot.set_aside:
            self.stats["fetch/redirect_host_set_aside"] += 1
            return None, None
        self.inline.claim(url)
        # At the front: the chain keeps the priority of the URL that started it.
        target_slot.queue.appendleft(FetchItem(url, host, host_hash(host), item.score, min(item.depth + 1, 32767),
                                               hop=item.hop or 0, redirect_chain=chain + (url,)))
        self.stats["fetch/redirect_followed"] += 1
        return None, target_slot

    def _known(self, host: str) -> tuple[set[str], set[str]]:
        """The host's fetched-not-due and due URLs from the current crawl DB (cached per host)."""
        known = self.known.get(host)
        if known is None:
            if not self.known:  # the first host asked: the version read from now on
                self._crawldb_manifest = self.store.manifest("crawldb")
            manifest = self._crawldb_manifest
            # next_fetch is on the crawl clock
            now = dt.datetime.fromtimestamp(time.time() + clock.offset_s(), dt.timezone.utc)
            known = known_urls(self.store, manifest, host, now) if manifest is not None else (set(), set())
            self.known[host] = known
        return known
