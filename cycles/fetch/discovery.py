"""Discovery inside the fetch: new links to this partition's hosts are fetched in the same cycle.

Nutch's ``fetcher.follow.outlinks.depth``. A page's links are still written as outlinks for
update; in addition :meth:`Discovery.offer` queues, at the end of its host's queue, each
link that update would add to the crawl DB as a new URL and that this worker may fetch now:

- the page is at most ``fetch.follow_outlinks_depth - 1`` links from where this segment
  entered its host's chain (``hop``: 0 for a fetch-list URL and for a URL of a claimed new
  host linked from a host nearer the fetch list — fewer claims, :meth:`claim_level` — else
  +1 per link, unchanged through a redirect). A claimed host's first URL is like a
  fetch-list URL: counted from the fetch-list URL on another host instead, a new host
  claimed at hop 2 had only 2 levels left and stalled after ~4 requests until the next
  segment (bench_crawl: a 10 s gap on two time-bound hosts);
- a link to a host this worker does not hold yet (a new host to claim): the page's host was
  reached through at most ``fetch.follow_new_hosts_chain - 1`` claims (:meth:`claim_level`:
  0 for a fetch-list host), so hosts do not chain without end inside a segment;
- the link's depth (the page's + 1) is within ``update.max_depth``;
- the link is not nofollow (rel or meta robots), and normalised it passes the URL filters
  (cycles/fetch/inline.py, with update's functions);
- its host is one of this partition's fetch-list hosts — the hosts the seen-set covers —
  or a host nobody knows that this worker just claimed (cycles/tables/newhosts.py: the crawl
  DB holds none of its URLs, so the seen-set needs none), and it is not set aside; its
  robots.txt, when already read, allows it;
- the crawl DB does not hold it: not in the partition's seen-set (generate's Bloom filter of
  the URLs the crawl DB holds for these hosts; a false positive leaves the URL to the next
  cycle), and no row in this segment yet (:meth:`InlineFetches.claim`);
- the host's queue still ends before the segment's planned end at the host's spacing
  (cycles/fetch/tail.py ``fits_before``): a URL past it is not queued but kept for the next
  segment (:attr:`Discovery.beyond_plan`, the partition's leftover file;
  ``discover/host_time_budget``), so discovery cannot hold a segment past its plan;
- the host has taken fewer than ``fetch.follow_outlinks_per_host`` this segment, and the
  trap caps update applies to new URLs hold: the host's known URLs plus those taken here
  stay within ``update.max_urls_per_host_total``, the pattern's within
  ``update.max_urls_per_pattern`` (counts from generate's ``seen/part-N.parquet``; the
  pattern hash is the crawl DB's, cycles.tables.crawldb.url_pattern_hash).

Without a seen-set (generate ran with discovery off, or the fetch list was made by hand)
nothing is discovered: the worker cannot tell a new URL from a known one.

Each distinct raw link is looked at once per partition (a Bloom filter of links considered:
navigation links repeat on every page; the last links looked at are also kept in an exact
set in front of it, RECENT_LINKS_MAX), and the seen-set is asked once per page for all its
candidates, so a page of known links costs well under a microsecond a link.

A discovered URL's fetched row is merged by update like a redirect target's: a new crawl DB
row whose depth and score come from its outlink (the link is always written, past the
outlink filter), the result applied. Counters: ``discover/*``.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

from cycles.tables import segment as seg
from cycles.storage.bloom import BloomFilter
from cycles.config import Config
from cycles.tables.crawldb import url_pattern_hash
from cycles.tables.dedup_state import learned_by_host
from cycles.fetch.frontier import HostSlot
from cycles.fetch.inline import InlineFetches
from cycles.fetch.records import FetchItem
from cycles.storage.store import Store, StorePath
from cycles.urls import host_hash, url_host


def query_params(url: str) -> list[str]:
    """The names of ``url``'s query parameters (cycles/update/dedup.py ``query_params``)."""
    query = url.split("#", 1)[0].partition("?")[2]
    return [param.partition("=")[0] for param in query.split("&") if param] if query else []

MAX_DEPTH_VALUE = 32767
"""Depth is an int16 column."""

RECENT_LINKS_MAX = 50_000
"""Raw links remembered exactly in front of the considered-links Bloom filter (~7 MB of
strings; forgotten all at once when full). A page's navigation links are mostly the same as
the last page's of its site: a set lookup (~0.05 µs) answers them, where the filter's
hash and 10 probes in Python took ~3 µs a link with BLAKE2b (~4 % of the worker's per-page
CPU on the test web, py-spy of ``scripts/bench_fetch.py --replay``; XXH3 since session 14
takes ~0.6 µs of that, cycles/storage/bloom.py). The answers are the
filter's: a link in the set was added to the filter, which never forgets."""


class Discovery:
    """The links one partition fetches in the same cycle."""

    def __init__(self, store: Store, config: Config, seg_dir: StorePath, partition: int,
                 inline: InlineFetches, stats: Counter):
        self.store = store
        self.seg_dir = seg_dir
        self.partition = partition
        self.inline = inline
        self.stats = stats
        self.max_hops = config.fetch.follow_outlinks_depth
        self.max_claims = config.fetch.follow_new_hosts_chain
        self.listed_hosts: frozenset[str] = frozenset()
        """The hosts of the fetch list (claim level 0), fixed at :meth:`load`."""
        self.claim_levels: dict[str, int] = {}
        """Hosts claimed by discovery → claims on the chain that reached them (1 = linked
        from a fetch-list host)."""
        self.per_host = config.fetch.follow_outlinks_per_host
        self.max_depth = config.update.max_depth
        self.max_host_total = config.update.max_urls_per_host_total
        self.max_pattern = config.update.max_urls_per_pattern
        self.fp_rate = config.fetch.follow_seen_fp
        self.seen: BloomFilter | None = None
        """The crawl DB's URLs of this partition's hosts (None: discovery is off)."""
        self.considered: BloomFilter | None = None
        self.recent_links: set[str] = set()
        """Links known to be in ``considered`` (see RECENT_LINKS_MAX)."""
        self.host_known: Counter = Counter()
        """URLs per host: the crawl DB's, then + those taken here."""
        self.pattern_known: Counter = Counter()
        """URLs per (host, pattern hash): the same."""
        self.taken: Counter = Counter()
        """URLs discovered per host this segment."""
        self.variant_params: dict[str, frozenset[str]] = {}
        """host → query parameters update learned carry no content there (cycles/update/dedup.py):
        a new URL with one is a copy, not fetched (``discover/variant_param``)."""
        self.fits: Callable[[HostSlot], bool] = lambda slot: True
        """Does one more URL fit ``slot``'s queue before the segment's planned end (set by the worker)."""
        self.beyond_plan: list[FetchItem] = []
        """URLs taken for a host whose queue was full up to the planned end: written with the
        partition's leftovers (cycles/fetch/worker.py ``write_leftover``) for the next segment."""

    def load(self, expected_links: int, earlier_inline: list[tuple[str, str]]) -> None:
        """Read the seen-set; ``earlier_inline``: (url, host) of rows an earlier run of this
        partition committed for URLs not in the fetch list (they count against the budget
        and the caps — conservatively also redirect targets — so a resumed run stays within them)."""
        if self.max_hops <= 0:
            return
        self.listed_hosts = frozenset(self.inline.own_hosts)
        bloom_path = seg.seen_bloom_file(self.seg_dir, self.partition)
        counts_path = seg.seen_counts_file(self.seg_dir, self.partition)
        if not (self.store.exists(bloom_path) and self.store.exists(counts_path)):
            self.stats["discover/no_seen_set"] = 1
            return
        try:
            self.seen = BloomFilter.from_bytes(self.store.read_bytes(bloom_path))
        except ValueError as exc:
            self.stats["discover/no_seen_set"] = 1
            self.stats["discover/seen_set_unreadable"] = 1
            del exc
            return
        self.variant_params = learned_by_host(self.store)
        counts = self.store.read_table(counts_path).to_pydict()
        for host, pattern, urls in zip(counts["host"], counts["pattern_hash"], counts["urls"]):
            self.host_known[host] += urls
            self.pattern_known[(host, pattern)] += urls
        self.considered = BloomFilter(max(100_000, expected_links), 0.001)
        for url, host in earlier_inline:
            self._count(host, url_pattern_hash(url))

    def add_fetched_before(self, rows: list[tuple[str, str]]) -> None:
        """(url, host) fetched by the segment this one continues (cycles/tables/leases.py ``fetched_by_continued``):
        known like the crawl DB's URLs, and counted once against the trap caps."""
        if self.seen is None or not rows:
            return
        fresh = self.seen.add_new([url for url, _ in rows])
        for (url, host), new in zip(rows, fresh.tolist()):
            if new:
                self.host_known[host] += 1
                self.pattern_known[(host, url_pattern_hash(url))] += 1
        self.stats["discover/fetched_before"] += int(fresh.sum())

    @property
    def enabled(self) -> bool:
        return self.seen is not None

    def _count(self, host: str, pattern: int) -> None:
        self.taken[host] += 1
        self.host_known[host] += 1
        self.pattern_known[(host, pattern)] += 1

    def claim_level(self, host: str) -> int:
        """Claims on the chain that reached ``host``: 0 for a fetch-list host; a host claimed
        outside discovery (a redirect target, cycles/fetch/redirects.py) counts as the end
        of a chain, so it claims no further host."""
        level = self.claim_levels.get(host)
        if level is not None:
            return level
        return 0 if host in self.listed_hosts else self.max_claims

    def offer(self, item: FetchItem, links: list[dict],
              slot_for: Callable[[str, str], HostSlot | None]) -> list[HostSlot]:
        """Queue the page's links this worker fetches now; returns the slots that got work.

        ``links`` are the page's outlink rows (the worker's ``_link``); a link taken gets
        ``inline = True``, so the outlink writer keeps it. ``slot_for(host, url)``: the host's
        slot (a claimed new host's is set up at its first URL)."""
        depth = item.depth + 1
        if self.seen is None or depth > min(self.max_depth, MAX_DEPTH_VALUE):
            return []
        page_host = item.host
        hop = (item.hop or 0) + 1
        within_ok = hop <= self.max_hops  # else only links entering a newly claimed host
        level = self.claim_level(page_host)
        claims_ok = level + 1 <= self.max_claims
        followed = [link for link in links if not link["nofollow"]]
        if not (within_ok and claims_ok):
            # Only what this page may still lead to is marked considered: a link passed over
            # here may be taken from a page nearer its host's entry.
            followed = [link for link in followed if self._may_lead(link["url"], within_ok, claims_ok, level)]
        if not followed:
            return []
        candidates = self._candidates(followed, within_ok, claims_ok, level)
        if not candidates:
            return []
        return self._queue(candidates, depth, hop, level, slot_for)

    def _candidates(self, followed: list[dict], within_ok: bool, claims_ok: bool,
                    level: int) -> list[tuple[dict, str, str]]:
        """(link, normalised URL, host) of the followed links first considered here that this
        worker may fetch (its hosts, or a new host it claims) and that are not listed."""
        fresh = self._first_considered([link["url"] for link in followed])
        candidates: list[tuple[dict, str, str]] = []
        for link, new in zip(followed, fresh):
            if not new:
                continue
            url = self.inline.prepare(link["url"])
            if url is None:
                self.stats["discover/filtered"] += 1
                continue
            host = url_host(url)
            if host not in self.inline.own_hosts:
                if not claims_ok:
                    continue  # counted by _may_lead
                if not self.inline.take_new_host(host):
                    continue  # another partition's, or a host whose known URLs we were not given
                self.claim_levels.setdefault(host, level + 1)
            if not within_ok and self.claim_level(host) <= level:
                continue
            if url in self.inline.listed_urls:
                continue
            candidates.append((link, url, host))
        return candidates

    def _queue(self, candidates: list[tuple[dict, str, str]], depth: int, hop: int, level: int,
               slot_for: Callable[[str, str], HostSlot | None]) -> list[HostSlot]:
        """Queue the candidates the crawl DB does not know, within their host's budgets and
        the segment's plan; returns the slots that got work."""
        known = self.seen.contains_many([url for _, url, _ in candidates])
        slots: dict[str, HostSlot] = {}
        for (link, url, host), in_db in zip(candidates, known):
            if in_db:
                self.stats["discover/known"] += 1
                continue
            if host in self.variant_params and not self.variant_params[host].isdisjoint(query_params(url)):
                self.stats["discover/variant_param"] += 1  # update sets its row aside as a copy
                continue
            pattern = url_pattern_hash(url)
            slot = self._slot_if_allowed(url, host, pattern, slot_for)
            if slot is None or not self.inline.claim(url):
                continue
            self._count(host, pattern)
            link["inline"] = True
            entry = FetchItem(url, host, host_hash(host), 1.0 / (depth + 1), depth,
                              hop=0 if self.claim_level(host) > level else hop)
            if not self.fits(slot):
                self.stats["discover/host_time_budget"] += 1
                self.beyond_plan.append(entry)
                continue
            slot.queue.append(entry)
            self.stats["discover/queued"] += 1
            slots[host] = slot
        return list(slots.values())

    def _first_considered(self, urls: list[str]) -> list[bool]:
        """``considered.add_new(urls)``: which links are (probably) considered for the first
        time, a repeat inside the batch counting as seen after its first occurrence; links
        in ``recent_links`` skip the filter (see RECENT_LINKS_MAX)."""
        recent = self.recent_links
        asked = [i for i, url in enumerate(urls) if url not in recent]
        fresh = [False] * len(urls)
        if asked:
            for i, new in zip(asked, self.considered.add_new([urls[i] for i in asked]).tolist()):
                fresh[i] = new
            if len(recent) + len(asked) > RECENT_LINKS_MAX:
                recent.clear()
            recent.update([urls[i] for i in asked])
        return fresh

    def _may_lead(self, raw_url: str, within_ok: bool, claims_ok: bool, level: int) -> bool:
        """Could a link of a page past one of its bounds still be taken (by its raw host)?"""
        try:
            host = url_host(raw_url)
        except ValueError:
            return False
        if host in self.inline.own_hosts:
            return within_ok or self.claim_level(host) > level
        if claims_ok:
            return True
        self.stats["discover/new_host_chain"] += 1  # links passed over: the chain is at its bound
        return False

    def _slot_if_allowed(self, url: str, host: str, pattern: int,
                         slot_for: Callable[[str, str], HostSlot | None]) -> HostSlot | None:
        """The host's slot when budget, trap caps, set-aside and robots.txt let ``url`` be queued."""
        if self.taken[host] >= self.per_host:
            self.stats["discover/host_budget"] += 1
            return None
        if self.host_known[host] >= self.max_host_total:
            self.stats["discover/trap_host_cap"] += 1
            return None
        if self.pattern_known[(host, pattern)] >= self.max_pattern:
            self.stats["discover/trap_pattern_cap"] += 1
            return None
        slot = slot_for(host, url)
        if slot is None or slot.set_aside:
            self.stats["discover/host_set_aside"] += 1
            return None
        if slot.robots.rules is not None and not slot.robots.rules.allowed(url):
            self.stats["discover/robots_denied"] += 1
            return None
        return slot
