"""The fetch worker: one partition of a segment, one process, one pycurl multi loop.

The worker owns every host of its partition (generate put each host in exactly one), so
politeness needs no coordination: a :class:`~cycles.fetch.frontier.HostSlot` per host,
one request in flight at most, and ``delay`` seconds between the end of a response and
the next request — robots.txt requests included, and across cycles (the host's last
request end is persisted in the host DB). So is every longer wait the worker learns (a
Retry-After, a back-off, a Crawl-delay or slow-host delay, a host set aside for asking too
long): the slot's next-allowed time, written as ``not_before`` and honoured by the next run.

Per host the first request is for robots.txt unless a copy younger than
``fetch.robots_cache_s`` is known. An older 2xx copy with an ETag or Last-Modified is
revalidated with a conditional GET: a 304 keeps its body and rules and makes it young again
(``robots/not_modified``), a 200 replaces it. Robots times (fetched, errors since) are on the
crawl clock (:mod:`cycles.clock`), so a simulation that moves it a day on sees the copy
expire; request spacing stays on real time. RFC 9309 §2.3.1: 2xx → obey; 4xx (not 429) → allow
all; 5xx, 429 or a network error → assume complete disallow, so the host's URLs are
deferred to a later cycle (never fetched, never marked failed). An unreachable robots.txt
is asked again after ``fetch.robots_error_cache_s`` (not kept for a day), and after
``fetch.robots_unreachable_fallback_s`` of unbroken errors the last good copy is obeyed,
or everything allowed if there is none (§2.3.1.4). A 2xx robots.txt we could not read (binary,
a UTF-16 mark before 8-bit text, a body that does not inflate) is treated as unreachable
(``robots/unreadable``), and one over ``fetch.max_robots_bytes`` is read up to the cap
(``robots/truncated``): see cycles/fetch/robots.py.

Only public addresses, and those in ``fetch.allowed_networks``, are connected to (the SSRF
guard, cycles/fetch/addresses.py, checked by libcurl's open-socket callback on the address
itself). A refused robots.txt request records every queued URL of the host ``blocked``; a
refused page request records that URL ``blocked``. Neither counts as a host failure
(``fetch/blocked_address``).

Page redirects are followed inline, hop by hop through the frontier: a 3xx is recorded
(outcome ``redirect``, target in ``redirect_to``, and the target written as an outlink), and
when this worker owns the target's host (``host_hash % partitions`` is our partition) the
target, normalised and passing the URL filters, is queued at the front of its host's queue,
carrying the chain so far. It then waits its host's delay and robots.txt like any URL, and
gets its own fetched row (update adds it to the crawl DB if new). Not followed: a target
already in the chain (a loop: the hop's row says ``redirect loop``), a hop past
``fetch.max_redirects`` (``too many redirects``), a URL already listed or followed in this
partition (it has, or will have, its own row), a host of another partition or one set aside
(fetched in a later cycle, as the outlink), a URL the crawl DB holds as fetched and not yet
due (``fetch/redirect_known``: an earlier cycle fetched it; cycles/fetch/known.py). A
redirect to the URL itself is recorded, its target dropped.

Politeness survives crashes: each partition holds a lock file while it runs, a resumed
partition waits a full delay before asking any host again, and a pool worker dies with the
process that started it (``kill -9`` of ``crawl fetch`` leaves no orphan still fetching).

:func:`fetch_partition` is a module-level function taking plain data so that it can run
in a pool process (spawned, inheriting nothing) or in-process with the same interface.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import email.utils
import fcntl
import json
import os
import signal
import time
import traceback
from collections import Counter
from urllib.parse import urlsplit

import pycurl

from cycles import clock, schema
from cycles import segment as seg
from cycles.bloom import BloomFilter
from cycles.config import Config, config_from_dict
from cycles.errors import CrawlError, StageError, StoreError
from cycles.fetch.frontier import SPACING_MARGIN_S, Frontier, HostSlot
from cycles.hostdb import load_host_state
from cycles.fetch.known import fetched_not_due
from cycles.fetch.output import PartitionOutput, resume_state
from cycles.fetch.parse import parse_html
from cycles.fetch.robots import ALLOW_ALL, DISALLOW_ALL, UNREADABLE, RobotsRules, robots_redirect_ok
from cycles.fetch.transfer import (ABORT_NOT_HTML, ABORT_TOO_LARGE, ABORT_TRUNCATED, Request, Transfer, configure,
                                   decoded_body, resolve_entries, robots_body)
from cycles.schema import FetchOutcome as O
from cycles.store import Store
from cycles.urls import Normalizer, UrlFilter, host_hash, join_url, url_authority, url_host

CURLE_OPERATION_TIMEDOUT = 28


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


def robots_url_for(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/robots.txt"


DNS_CACHE_S = 3600
"""How long a worker reuses a host name's resolved address (curl's DNS cache)."""


class PartitionFetcher:
    """State of one partition's fetch loop."""

    def __init__(self, store: Store, segment: str, partition: int, config: Config):
        self.store = store
        self.segment = segment
        self.partition = partition
        self.config = config
        self.fc = config.fetch
        self.floor_s = config.effective_delay_s()
        self.clock_offset_s = clock.offset_s()
        """Crawl clock minus real time (cycles.clock): robots.txt ages are measured on it."""
        self.stats: Counter = Counter()
        self.frontier = Frontier()
        self.seg_dir = store.segment_dir(segment)
        self.multi = pycurl.CurlMulti()
        # One DNS cache and TLS session cache for every transfer of this worker. Connections
        # stay in the multi handle's pool (sized by M_MAXCONNECTS below), where libcurl
        # reuses one per host; a share-level connection pool would ignore that size.
        self.share = pycurl.CurlShare()
        self.share.setopt(pycurl.SH_SHARE, pycurl.LOCK_DATA_DNS)
        self.share.setopt(pycurl.SH_SHARE, pycurl.LOCK_DATA_SSL_SESSION)
        self.free: list[pycurl.Curl] = []
        self.active: dict[pycurl.Curl, tuple[Transfer, HostSlot]] = {}
        self.output: PartitionOutput | None = None
        self.resumed = False
        """Set by fetch_partition when an earlier run of this partition started and did not finish."""
        self.parent_pid: int | None = None
        """In a pool worker: the pid of the process that started us (checked every loop)."""
        self.progress_path = progress_dir(store, segment) / f"part-{partition:05d}.json"
        self._last_progress = 0.0
        self.partitions = 1
        """How many partitions generate made: a host is ours when host_hash % partitions == partition."""
        self.listed_urls: set[str] = set()
        """URLs of the fetch list and redirect targets followed: each gets one row, so a
        redirect to one of them is not followed again."""
        self.normalizer = Normalizer(config.urls)
        self.url_filter = UrlFilter(config.urls)
        self._resumed_run = False
        self.known_not_due: dict[str, set[str]] = {}
        """Per host that redirected: its URLs the crawl DB holds as fetched and not yet due
        (cycles/fetch/known.py), read once per partition run."""
        self._crawldb_manifest = None
        """The crawl DB version those lookups read (taken at the first one)."""

    # --- set-up -----------------------------------------------------------------------
    def load(self) -> None:
        items = self.store.read_table(seg.fetchlist_file(self.seg_dir, self.partition)).to_pylist()
        done, next_chunk = resume_state(self.store, self.seg_dir, self.partition)
        resumed = (self.resumed or bool(done)
                   or self.store.exists(seg.hosts_file(self.seg_dir, self.partition)))
        self.stats["fetch/resumed_skipped"] += len(done)
        self.partitions = self._partition_count()
        # With done: a target an earlier run of this partition followed has its row already.
        self.listed_urls = {i["url"] for i in items} | done
        self._resumed_run = resumed
        items = [i for i in items if i["url"] not in done]
        bloom = None
        if self.fc.outlink_bloom_fp > 0:
            bloom = BloomFilter(max(100_000, len(items) * self.fc.outlink_bloom_links_per_page),
                                self.fc.outlink_bloom_fp)
        self.output = PartitionOutput(self.store, self.segment, self.seg_dir, self.partition,
                                      next_chunk, self.fc.user_agent, self.fc.warc_gzip_level, bloom,
                                      flush_bytes=self.fc.flush_bytes)
        states = load_host_state(self.store, {i["host"] for i in items}, self.segment)
        now_mono, now_wall = time.monotonic(), time.time()
        for item in items:
            slot = self.frontier.slots.get(item["host"])
            if slot is None:
                slot = self.frontier.slot(item["host"])
                self._init_slot(slot, item["url"], states.get(item["host"]), now_mono, now_wall, resumed)
            slot.queue.append(item)
        for slot in self.frontier.slots.values():
            self._set_aside_if_far(slot, now_mono)
            self.frontier.schedule(slot)
        self._size_connection_cache(len(self.frontier.slots))

    def _partition_count(self) -> int:
        """Partitions of the segment, from generate's marker (else its fetch list files)."""
        marker = seg.read_marker(self.store, self.segment, seg.Generated)
        listed = len(seg.partitions_of(self.store, self.segment))
        return max(1, int((marker.partitions if marker else 0) or listed))

    def _size_connection_cache(self, hosts: int) -> None:
        """Keep one idle connection per host between its requests.

        libcurl's default cache (4 per transfer in flight) is far smaller than the number of
        hosts waiting out their delay, so connections were closed and every page paid a new
        TCP (and TLS) handshake — on both sides. The file-descriptor limit is raised to fit.
        """
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = hosts + self.fc.max_in_flight + 256
        if soft != resource.RLIM_INFINITY and soft < wanted:
            new_soft = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))
            soft = new_soft
        self.multi.setopt(pycurl.M_MAXCONNECTS, max(16, min(hosts + self.fc.max_in_flight, soft - 256)))

    def _init_slot(self, slot: HostSlot, first_url: str, state: dict | None, now_mono: float,
                   now_wall: float, resumed: bool) -> None:
        slot.delay_s = self.floor_s
        if state is not None:
            if state["crawl_delay_s"]:
                slot.delay_s = max(self.floor_s, float(state["crawl_delay_s"]))
            slot.robots_good_status = state["robots_good_status"]
            slot.robots_good_body = state["robots_good_body"]
            slot.robots_good_fetched_at = state["robots_good_fetched_at"]
            slot.robots_errors_since = state["robots_errors_since"]
            fetched_at = state["robots_fetched_at"]
            if fetched_at is not None:
                # RFC 9309 §2.4: reuse for at most 24 h; an error result only briefly, so
                # that a host whose robots.txt failed once is not kept out for a day.
                error = self._robots_error(state["robots_status"], state["robots_body"])
                max_age = self.fc.robots_error_cache_s if error else self.fc.robots_cache_s
                now_crawl = now_wall + self.clock_offset_s
                if now_crawl - fetched_at.timestamp() < max_age:
                    self._load_robots_copy(slot, state)
                    slot.robots_from_cache = True
                    self.stats["robots/cached_error" if error else "robots/cached"] += 1
                    self._apply_robots(slot, self._robots_rules(slot, now_crawl))
                elif self._revalidatable(state):
                    # Expired, but the server can tell us it is unchanged (a 304 costs no body).
                    self._load_robots_copy(slot, state)
                    slot.robots_revalidating = True
                    self.stats["robots/revalidate"] += 1
            if state["last_request_end"] is not None:
                # Keep the spacing across cycles: the wall-clock end of the last response,
                # mapped onto this process's monotonic clock.
                wait = state["last_request_end"].timestamp() + slot.delay_s + SPACING_MARGIN_S - now_wall
                slot.next_allowed = now_mono + max(0.0, wait)
                slot.last_request_end_wall = state["last_request_end"].timestamp()
            if state["not_before"] is not None:
                # A Retry-After, back-off or slow-host delay learnt by an earlier run (wall
                # clock), held whatever made the host's URLs due (deferred URLs come back after
                # update.deferred_retry_s, maybe sooner than the host asked).
                wait = min(state["not_before"].timestamp() - now_wall, self.fc.max_not_before_s)
                slot.next_allowed = max(slot.next_allowed, now_mono + wait)
        if resumed:
            # A killed run may have asked this host after its last flush: wait a full delay.
            slot.next_allowed = max(slot.next_allowed, now_mono + slot.delay_s + SPACING_MARGIN_S)
        if slot.robots is None:
            slot.robots_url = robots_url_for(first_url)

    # --- robots -----------------------------------------------------------------------
    @staticmethod
    def _load_robots_copy(slot: HostSlot, state: dict) -> None:
        """The host DB's latest robots.txt answer into the slot (rules not applied yet)."""
        slot.robots_status = state["robots_status"]
        slot.robots_body = state["robots_body"]
        slot.robots_fetched_at = state["robots_fetched_at"]
        slot.robots_etag = state["robots_etag"]
        slot.robots_last_modified = state["robots_last_modified"]

    @staticmethod
    def _revalidatable(state: dict) -> bool:
        """Can this stored robots.txt be revalidated: a 2xx body with a validator?"""
        status = state["robots_status"]
        return (status is not None and 200 <= status < 300 and state["robots_body"] is not None
                and bool(state["robots_etag"] or state["robots_last_modified"]))

    @staticmethod
    def _robots_validators(slot: HostSlot) -> list[str]:
        """Conditional headers for a robots.txt request revalidating the slot's expired copy.

        Sent on every redirect hop too: the validators belong to the final URL, and a hop
        that redirects answers 3xx whatever it is sent."""
        if not slot.robots_revalidating:
            return []
        headers = []
        if slot.robots_etag:
            headers.append(f"If-None-Match: {slot.robots_etag}")
        if slot.robots_last_modified:
            headers.append(f"If-Modified-Since: {slot.robots_last_modified}")
        return headers

    def _robots_error(self, status: int | None, body: bytes | None = b"") -> bool:
        """Is this robots.txt answer an error (unreachable: 5xx, 429, network, redirects, or
        a 2xx body we could not read)?"""
        return RobotsRules.from_response(status, body, self.fc.robots_agent,
                                         self.fc.max_robots_bytes).kind == DISALLOW_ALL

    def _robots_rules(self, slot: HostSlot, now_wall: float) -> RobotsRules:
        """Rules from the slot's robots.txt answer, with RFC 9309 §2.3.1.4's way out of a long
        outage: unreachable for fetch.robots_unreachable_fallback_s → the last good copy, else
        allow all."""
        rules = RobotsRules.from_response(slot.robots_status, slot.robots_body, self.fc.robots_agent,
                                          self.fc.max_robots_bytes)
        since = slot.robots_errors_since
        if rules.kind != DISALLOW_ALL or since is None:
            return rules
        if now_wall - since.timestamp() < self.fc.robots_unreachable_fallback_s:
            return rules
        if slot.robots_good_fetched_at is not None:
            self.stats["robots/fallback_last_good"] += 1
            return RobotsRules.from_response(slot.robots_good_status, slot.robots_good_body,
                                             self.fc.robots_agent, self.fc.max_robots_bytes)
        self.stats["robots/fallback_allow"] += 1
        return RobotsRules(ALLOW_ALL, "unreachable_too_long")

    def _apply_robots(self, slot: HostSlot, rules: RobotsRules) -> None:
        slot.robots = rules
        slot.robots_url = None
        self.stats[f"robots/{rules.kind}"] += 1
        if rules.kind == "disallow_all":
            if rules.reason == UNREADABLE:
                self._set_aside(slot, "robots.txt unreadable (not text, or does not inflate): a robots.txt we "
                                      "could not read never grants access; disallow all for now")
                return
            self._set_aside(slot, f"robots.txt unreachable ({rules.reason}); RFC 9309 §2.3.1.4: disallow all for now")
            return
        delay = rules.crawl_delay() if rules.kind == "rules" else None
        if delay is not None:
            if delay > self.fc.max_crawl_delay_s:
                self.stats["robots/crawl_delay_too_long"] += 1
                self._set_aside(slot, f"robots.txt Crawl-delay {delay:g}s exceeds fetch.max_crawl_delay_s")
                return
            slot.delay_s = max(slot.delay_s, self.floor_s, delay)

    def _finish_robots(self, slot: HostSlot, transfer: Transfer, error: tuple[int, str] | None) -> None:
        if error is not None and transfer.blocked_address:
            self._robots_blocked(slot, transfer)
            return
        status = transfer.status_code()
        self.stats["robots/requests"] += 1
        # ABORT_TRUNCATED: we stopped a robots.txt over the cap ourselves, keeping its start.
        if error is not None and transfer.abort != ABORT_TRUNCATED:
            self.stats["robots/network_error"] += 1
            status = None
        if status == 304 and slot.robots_revalidating:
            self._robots_not_modified(slot, transfer)
            return
        if status is not None and 300 <= status < 400 and transfer.header("location"):
            target = join_url(transfer.request.url, transfer.header("location"))
            slot.robots_hops += 1
            if robots_redirect_ok(transfer.request.url, target, slot.robots_hops, self.fc.max_redirects):
                slot.robots_url = target
                self.stats["robots/redirect"] += 1
                return
            # RFC 9309 §2.3.1.2 lets a crawler take robots.txt as unavailable (allow all)
            # past five redirects; we fail closed instead (RobotsRules: disallow all for now).
            self.stats["robots/too_many_redirects"] += 1
            body = b""
        elif status is not None and 200 <= status < 300:
            if transfer.abort == ABORT_TRUNCATED:
                self.stats["robots/truncated"] += 1
            # None when it cannot be read (does not inflate): kept as None, which
            # RobotsRules reads as unreadable, so the host DB copy decides the same way.
            body = robots_body(transfer)
        else:
            body = transfer.body()
        ok = status is not None and 200 <= status < 300
        slot.robots_status = status
        slot.robots_body = body if ok else None
        slot.robots_etag = transfer.header("etag") if ok else None
        slot.robots_last_modified = transfer.header("last-modified") if ok else None
        slot.robots_revalidating = False
        slot.robots_fetched_at = _wall(transfer.started_wall + self.clock_offset_s)
        slot.robots_from_cache = False
        self.stats[f"robots/status/{status if status is not None else 'none'}"] += 1
        if self._robots_error(status, slot.robots_body):
            if ok:
                self.stats["robots/unreadable"] += 1
                # No validators: a 304 to them would make the unreadable copy "good" again.
                slot.robots_etag = slot.robots_last_modified = None
            if slot.robots_errors_since is None:
                slot.robots_errors_since = slot.robots_fetched_at
        else:
            slot.robots_errors_since = None
            slot.robots_good_status = status
            slot.robots_good_body = slot.robots_body
            slot.robots_good_fetched_at = slot.robots_fetched_at
        self._apply_robots(slot, self._robots_rules(slot, time.time() + self.clock_offset_s))

    def _robots_blocked(self, slot: HostSlot, transfer: Transfer) -> None:
        """The host's address is not public (SSRF guard): not one packet was sent to it.

        Every URL queued for the host is recorded ``blocked`` (not deferred: deferring would
        bring it back every hour). Not a robots.txt answer (no robots state is written) and
        not a host failure."""
        self.stats["fetch/blocked_address"] += 1
        slot.robots_url = None
        reason = self._blocked_reason(transfer)
        slot.set_aside = reason
        self.stats["fetch/hosts_set_aside"] += 1
        while slot.queue:
            self.output.add(self._row(slot.queue.popleft(), O.BLOCKED, error=reason), [])

    @staticmethod
    def _blocked_reason(transfer: Transfer) -> str:
        return (f"address {transfer.blocked_address} is not public and not in fetch.allowed_networks "
                "(SSRF guard); not connected")

    def _robots_not_modified(self, slot: HostSlot, transfer: Transfer) -> None:
        """A 304 to the conditional robots.txt GET: the expired copy is current again.

        Its body, status and rules stay; it is as fresh as if just downloaded (a good
        answer, so any run of errors ends). A 304 may carry updated validators (RFC 9110
        §15.4.5); they replace ours."""
        self.stats["robots/not_modified"] += 1
        self.stats["robots/status/304"] += 1
        slot.robots_revalidating = False
        slot.robots_fetched_at = _wall(transfer.started_wall + self.clock_offset_s)
        slot.robots_etag = transfer.header("etag") or slot.robots_etag
        slot.robots_last_modified = transfer.header("last-modified") or slot.robots_last_modified
        slot.robots_from_cache = False
        slot.robots_errors_since = None
        slot.robots_good_status = slot.robots_status
        slot.robots_good_body = slot.robots_body
        slot.robots_good_fetched_at = slot.robots_fetched_at
        self._apply_robots(slot, self._robots_rules(slot, time.time() + self.clock_offset_s))

    # --- pages ------------------------------------------------------------------------
    def _row(self, item: dict, outcome: str, **values) -> dict:
        row = {name: None for name in schema.FETCHED.names}
        row.update(url=item["url"], host=item["host"], outcome=outcome, **values)
        self.stats[f"fetch/outcome/{outcome}"] += 1
        return row

    def _defer_queue(self, slot: HostSlot, reason: str) -> None:
        while slot.queue:
            self.output.add(self._row(slot.queue.popleft(), O.DEFERRED, error=reason), [])

    def _set_aside(self, slot: HostSlot, reason: str) -> None:
        slot.set_aside = reason
        self.stats["fetch/hosts_set_aside"] += 1
        self._defer_queue(slot, reason)

    def _set_aside_if_far(self, slot: HostSlot, now_mono: float) -> None:
        """A host whose not_before (from the host DB) is further away than a Retry-After we
        wait out in a cycle is set aside now, as _back_off would have: its URLs are deferred
        rather than holding this worker, and it is not asked inside the window."""
        wait = slot.next_allowed - now_mono
        if slot.set_aside is None and wait > self.fc.max_retry_after_s:
            self.stats["fetch/not_before_set_aside"] += 1
            self._set_aside(slot, f"host's not_before is {wait:.0f}s away (over fetch.max_retry_after_s); "
                                  "set aside for this cycle")

    def _next_request(self, slot: HostSlot) -> Request | None:
        if slot.robots_url:
            return Request(slot.robots_url, slot.host, "robots", None, self._robots_validators(slot))
        while slot.queue:
            item = slot.queue.popleft()
            if not slot.robots.allowed(item["url"]):
                self.stats["robots/denied"] += 1
                self.output.add(self._row(item, O.ROBOTS_DENIED, error="disallowed by robots.txt"), [])
                continue
            headers = []
            if item.get("etag"):
                headers.append(f"If-None-Match: {item['etag']}")
            if item.get("last_modified"):
                headers.append(f"If-Modified-Since: {item['last_modified']}")
            return Request(item["url"], slot.host, "page", item, headers)
        return None

    def _finish_page(self, slot: HostSlot, transfer: Transfer, error: tuple[int, str] | None, curl) -> None:
        item = transfer.request.item
        if error is not None and transfer.blocked_address:
            # The SSRF guard refused the address (no packet sent): not a host failure.
            self.stats["fetch/blocked_address"] += 1
            self.output.add(self._row(item, O.BLOCKED, error=self._blocked_reason(transfer)), [])
            return
        # Scheduling time (cycles.clock, shiftable in simulations); politeness uses real time.
        started = _wall(transfer.started_wall + clock.offset_s())
        duration_ms = int(transfer.duration_s * 1000)
        common = dict(fetched_at=started, duration_ms=duration_ms, body_bytes=transfer.size)
        status = transfer.status_code()
        if status is not None:
            self.stats[f"fetch/status/{status}"] += 1
            common.update(http_status=status, content_type=transfer.header("content-type"),
                          etag=transfer.header("etag"), last_modified=transfer.header("last-modified"))
        self.stats["fetch/bytes"] += transfer.size
        if transfer.abort == ABORT_TOO_LARGE:
            self.output.add(self._row(item, O.TOO_LARGE, error=f"body over {transfer.max_bytes} bytes; aborted", **common), [])
            return
        if transfer.abort == ABORT_NOT_HTML:
            self.output.add(self._row(item, O.NOT_HTML, error="not HTML; body not downloaded", **common), [])
            return
        if error is not None:
            errno, message = error
            self.stats["fetch/timeout" if errno == CURLE_OPERATION_TIMEDOUT else "fetch/network_error"] += 1
            self._count_failure(slot)
            self.output.add(self._row(item, O.NETWORK_ERROR, error=f"curl {errno}: {message}", **common), [])
            return
        if not (status == 429 or status >= 500):
            slot.failures = 0  # the host answered; 5xx failures are counted in _back_off
        if 200 <= status < 300:
            slot.backoffs = 0
            self._store_page(slot, transfer, item, common, curl)
        elif status == 304:
            slot.backoffs = 0
            self.output.add(self._row(item, O.NOT_MODIFIED, **common), [])
        elif 300 <= status < 400 and transfer.header("location"):
            target = join_url(item["url"], transfer.header("location"))
            self.stats["fetch/redirect"] += 1
            if target.split("#", 1)[0] == item["url"]:
                # A redirect to itself can only loop: record it, follow nothing.
                self.stats["fetch/redirect_loop"] += 1
                self.output.add(self._row(item, O.REDIRECT, redirect_to=target, error="redirect to itself", **common), [])
                return
            if url_authority(target) != url_authority(item["url"]):
                self.stats["fetch/redirect_cross_host"] += 1
            error = self._follow_redirect(slot, item, target)
            self.output.add(self._row(item, O.REDIRECT, redirect_to=target, error=error, **common),
                            [self._link(item, target, "", False)])
        elif status in (404, 410):
            self.output.add(self._row(item, O.GONE, **common), [])
        elif status == 429 or status >= 500:
            self._back_off(slot, transfer, status)
            self.output.add(self._row(item, O.SERVER_ERROR, error=f"HTTP {status}", **common), [])
        else:
            self.output.add(self._row(item, O.CLIENT_ERROR, error=f"HTTP {status}", **common), [])

    # --- redirects ----------------------------------------------------------------------
    def _follow_redirect(self, slot: HostSlot, item: dict, target: str) -> str | None:
        """Queue a redirect's target for this cycle if this worker may fetch it (module doc).

        Returns the error to record on the redirect's row: None, ``redirect loop`` or
        ``too many redirects``."""
        url = self.normalizer.normalize(target)
        if url is None or self.url_filter.reason(url):
            self.stats["fetch/redirect_filtered"] += 1  # update would drop it too
            return None
        chain = item.get("redirect_chain") or (item["url"],)
        if url in chain:
            self.stats["fetch/redirect_loop"] += 1
            return "redirect loop"
        if len(chain) > self.fc.max_redirects:  # this would be hop max_redirects + 1
            self.stats["fetch/redirect_too_many"] += 1
            return "too many redirects"
        if url in self.listed_urls:
            self.stats["fetch/redirect_already_listed"] += 1
            return None
        host = url_host(url)
        if host_hash(host) % self.partitions != self.partition:
            # Another worker owns the host (and its politeness): a later cycle fetches it.
            self.stats["fetch/redirect_other_partition"] += 1
            return None
        if url in self._known_not_due(host):
            # Fetched in an earlier cycle and not due again yet: the redirect's row (and its
            # outlink) is enough; the target stays as the crawl DB has it.
            self.stats["fetch/redirect_known"] += 1
            return None
        target_slot = self._redirect_slot(host, url)
        if target_slot.set_aside:
            self.stats["fetch/redirect_host_set_aside"] += 1
            return None
        self.listed_urls.add(url)
        # At the front: the chain keeps the priority of the URL that started it.
        target_slot.queue.appendleft({
            "url": url, "host": host, "host_hash": host_hash(host), "score": item.get("score"),
            "depth": min(int(item["depth"]) + 1, 32767), "etag": None, "last_modified": None,
            "redirect_chain": chain + (url,)})
        if target_slot is not slot:  # the finishing slot is rescheduled by _finish
            self.frontier.schedule(target_slot)
        self.stats["fetch/redirect_followed"] += 1
        return None

    def _known_not_due(self, host: str) -> set[str]:
        """The host's fetched, not yet due URLs from the current crawl DB (cached per host)."""
        known = self.known_not_due.get(host)
        if known is None:
            if not self.known_not_due:  # the first host asked: the version read from now on
                self._crawldb_manifest = self.store.manifest("crawldb")
            manifest = self._crawldb_manifest
            now = _wall(time.time() + clock.offset_s())  # next_fetch is on the crawl clock
            known = fetched_not_due(self.store, manifest, host, now) if manifest is not None else set()
            self.known_not_due[host] = known
        return known

    def _redirect_slot(self, host: str, first_url: str) -> HostSlot:
        """The host's slot; a host not in the fetch list gets one set up as load() would
        (its state read from the host DB: spacing across cycles and robots.txt hold)."""
        slot = self.frontier.slots.get(host)
        if slot is None:
            self.stats["fetch/redirect_new_host"] += 1
            slot = self.frontier.slot(host)
            state = load_host_state(self.store, {host}, self.segment).get(host)
            now_mono = time.monotonic()
            self._init_slot(slot, first_url, state, now_mono, time.time(), self._resumed_run)
            self._set_aside_if_far(slot, now_mono)
        return slot

    def _link(self, item: dict, url: str, anchor: str, nofollow: bool) -> dict:
        return {"from_url": item["url"], "url": url, "anchor": anchor, "nofollow": nofollow,
                "depth": min(int(item["depth"]) + 1, 32767)}

    def _store_page(self, slot: HostSlot, transfer: Transfer, item: dict, common: dict, curl) -> None:
        raw = transfer.body()
        body = decoded_body(raw, transfer.header("content-encoding"), self.fc.max_page_bytes)
        if body is None:
            self.output.add(self._row(item, O.TOO_LARGE, error="body does not inflate within the size cap", **common), [])
            return
        warc_file, offset, length = self.output.write_response(
            item["url"], curl.getinfo(pycurl.PRIMARY_IP) or None, self._request_headers(transfer),
            self._request_line(item["url"]), transfer.status_line.decode("latin-1"),
            transfer.headers_list(), raw, started_iso(transfer))
        location = dict(warc_file=warc_file, warc_offset=offset, warc_length=length)
        try:
            page = parse_html(body, item["url"], transfer.header("content-type"), self.fc.robots_agent)
        except Exception as exc:  # a parser crash costs one page, never the worker
            self.stats["parse/crash"] += 1
            self.output.add(self._row(item, O.PARSE_ERROR, error=f"parser crashed: {type(exc).__name__}: {exc}"[:500],
                                      **common, **location), [])
            return
        self.stats["parse/pages"] += 1
        links = [self._link(item, link.url, link.anchor, link.nofollow) for link in page.links]
        self.stats["parse/links"] += len(links)
        self.output.add(self._row(item, O.OK, title=page.title, text=page.text, content_hash=page.content_hash,
                                  simhash=page.simhash, canonical=page.canonical, noindex=page.noindex,
                                  **common, **location), links)

    def _request_line(self, url: str) -> str:
        parts = urlsplit(url)
        return f"GET {parts.path or '/'}{'?' + parts.query if parts.query else ''} HTTP/1.1"

    def _request_headers(self, transfer: Transfer) -> list[tuple[str, str]]:
        headers = [("Host", urlsplit(transfer.request.url).netloc), ("User-Agent", self.fc.user_agent),
                   ("Accept-Encoding", "gzip, deflate")]
        for line in transfer.request.headers:
            name, _, value = line.partition(":")
            headers.append((name, value.strip()))
        return headers

    # --- adaptive politeness ------------------------------------------------------------
    def _count_failure(self, slot: HostSlot) -> None:
        slot.failures += 1
        if slot.failures >= self.fc.max_host_failures:
            self._set_aside(slot, f"{slot.failures} consecutive failures; host set aside for this cycle")

    def _back_off(self, slot: HostSlot, transfer: Transfer, status: int) -> None:
        """429/503: wait what Retry-After asks (capped), else back off exponentially."""
        slot.backoffs += 1
        if status >= 500:
            slot.failures += 1
        wait = retry_after_s(transfer.header("retry-after"), time.time())
        if wait is None:
            wait = min(self.fc.max_retry_after_s, slot.delay_s * 2 ** slot.backoffs)
        self.stats["fetch/backoff"] += 1
        # Before any set-aside: a set-aside host's window is written to the host DB too
        # (not_before), so the next cycle does not ask it inside the window either.
        slot.next_allowed = max(slot.next_allowed,
                                transfer.ended + min(wait, self.fc.max_not_before_s) + SPACING_MARGIN_S)
        if slot.failures >= self.fc.max_host_failures:
            self._set_aside(slot, f"{slot.failures} consecutive failures (last HTTP {status}); host set aside for this cycle")
            return
        if wait > self.fc.max_retry_after_s:
            self._set_aside(slot, f"host asked us to wait {wait:.0f}s (HTTP {status}); set aside for this cycle")
            return
        self.stats["fetch/retry_after"] += 1 if transfer.header("retry-after") else 0

    def _delay_after(self, slot: HostSlot, transfer: Transfer) -> float:
        """Spacing before the next request: the host's delay, longer for a slow host."""
        duration = transfer.duration_s
        return max(slot.delay_s, min(self.fc.max_crawl_delay_s, self.fc.delay_factor * duration))

    # --- the loop -----------------------------------------------------------------------
    def _new_handle(self) -> pycurl.Curl:
        curl = pycurl.Curl()
        curl.setopt(pycurl.SHARE, self.share)  # kept through reset(): set once per handle
        return curl

    def _start(self, slot: HostSlot, request: Request) -> None:
        curl = self.free.pop() if self.free else self._new_handle()
        max_bytes = self.fc.max_robots_bytes if request.kind == "robots" else self.fc.max_page_bytes
        transfer = Transfer(request, self.fc, max_bytes)
        configure(curl, transfer, self.fc, resolve_entries(request.url, self.fc.resolve))
        # A host's address is looked up once a cycle, not every minute (libcurl's default).
        curl.setopt(pycurl.DNS_CACHE_TIMEOUT, DNS_CACHE_S)
        slot.in_flight = True
        self.active[curl] = (transfer, slot)
        self.multi.add_handle(curl)
        self.stats["fetch/requests"] += 1

    def _finish(self, curl, error: tuple[int, str] | None, ended: float, ended_wall: float) -> None:
        transfer, slot = self.active.pop(curl)
        self.multi.remove_handle(curl)
        transfer.ended = ended
        # libcurl's own timer: our `ended` is when we got round to the transfer, which
        # includes parsing the pages that completed alongside it.
        transfer.duration_s = curl.getinfo(pycurl.TOTAL_TIME)
        slot.in_flight = False
        slot.last_request_end_wall = ended_wall
        if transfer.request.kind == "robots":
            self._finish_robots(slot, transfer, error)
        else:
            self._finish_page(slot, transfer, error, curl)
        # After the handlers: robots.txt may just have raised the delay (Crawl-delay), and
        # a back-off may already have pushed next_allowed further.
        slot.next_allowed = max(slot.next_allowed, transfer.ended + self._delay_after(slot, transfer) + SPACING_MARGIN_S)
        curl.reset()
        self.free.append(curl)
        self.frontier.schedule(slot)

    def _drain(self) -> None:
        while True:
            ret, _ = self.multi.perform()
            if ret != pycurl.E_CALL_MULTI_PERFORM:
                break
        while True:
            queued, ok, failed = self.multi.info_read()
            # One timestamp for the batch, taken before any of it is processed: it is after
            # every response in it ended (so delays counted from it are never short), and it
            # does not grow with the time spent parsing the batch's other pages.
            ended, ended_wall = time.monotonic(), time.time()
            for curl in ok:
                self._finish(curl, None, ended, ended_wall)
            for curl, errno, message in failed:
                self._finish(curl, (errno, message), ended, ended_wall)
            if not queued:
                break

    def run(self) -> None:
        deadline = time.monotonic() + self.fc.max_duration_s if self.fc.max_duration_s > 0 else None
        stopping_at: float | None = None
        while True:
            now = time.monotonic()
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                # The `crawl fetch` that started us is gone (kill -9): stop at once, without
                # committing, so a resumed run never shares this partition with us.
                os._exit(3)
            if _STOP_SIGNAL is not None and stopping_at is None:
                # SIGTERM/SIGINT (Airflow, systemd, Kubernetes): start nothing new, let the
                # transfers in flight end, commit what was fetched (up to flush_s of pages
                # were lost otherwise) and leave the rest to a resumed run.
                stopping_at = now
                self.stats["fetch/interrupted"] = 1
            if stopping_at is not None and (not self.active or now - stopping_at > STOP_GRACE_S):
                break
            if self.fc.progress_s > 0 and now - self._last_progress >= self.fc.progress_s:
                self.publish_progress(now)
            if deadline is not None and now >= deadline:
                for slot in self.frontier.slots.values():
                    if not slot.set_aside:
                        slot.robots_url = None
                        self._defer_queue(slot, "fetch.max_duration_s reached")
                if not self.active:
                    break
            while stopping_at is None and len(self.active) < self.fc.max_in_flight:
                slot = self.frontier.pop_ready(now)
                if slot is None:
                    break
                request = self._next_request(slot)
                if request is not None:
                    self._start(slot, request)
            self._drain()
            wait = self.frontier.seconds_to_next(time.monotonic())
            if not self.active and wait is None:
                break
            timeout = min(1.0, wait if wait is not None else 1.0)
            if self.active:
                try:
                    self.multi.select(max(timeout, 0.001))
                except pycurl.error:
                    if _STOP_SIGNAL is None:
                        raise  # else: select(2) interrupted by the stop signal
                self._drain()
            elif timeout > 0:
                time.sleep(timeout)
            if self.output.due(self.fc.flush_s, self.fc.flush_pages):
                self.flush()
        self.flush()

    def flush(self) -> None:
        committed = self.output.flush()
        self.stats["fetch/chunks"] += 1 if committed else 0
        self.stats["outlinks/bloom_dropped"] = self.output.bloom_dropped
        self.write_hosts()

    def chunk_manifest(self) -> list[dict]:
        return self.output.manifest()

    def publish_progress(self, now: float) -> None:
        """Counters so far, for the parent's progress display (a small JSON file, replaced)."""
        self._last_progress = now
        active = len(self.active)
        waiting = self.frontier.waiting_hosts()
        data = {"partition": self.partition, "time": time.time(), "hosts_active": active,
                "hosts_waiting": waiting, "counters": dict(self.stats)}
        path = self.progress_path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)

    def _not_before_wall(self, slot: HostSlot, now_mono: float, now_wall: float) -> dt.datetime | None:
        """The slot's next-allowed time (monotonic) on the wall clock, for HOSTS.not_before:
        every wait the run learnt (Retry-After, back-off, Crawl-delay, slow host) in one time.
        None if the slot never had one."""
        if slot.next_allowed <= 0.0:
            return None
        return _wall(now_wall + min(slot.next_allowed - now_mono, self.fc.max_not_before_s))

    def write_hosts(self) -> None:
        now_mono, now_wall = time.monotonic(), time.time()
        rows = [{"host": s.host,
                 "last_request_end": _wall(s.last_request_end_wall) if s.last_request_end_wall else None,
                 "not_before": self._not_before_wall(s, now_mono, now_wall),
                 "robots_status": s.robots_status, "robots_fetched_at": s.robots_fetched_at,
                 "robots_body": s.robots_body, "robots_etag": s.robots_etag,
                 "robots_last_modified": s.robots_last_modified, "crawl_delay_s": s.delay_s,
                 "robots_good_status": s.robots_good_status, "robots_good_body": s.robots_good_body,
                 "robots_good_fetched_at": s.robots_good_fetched_at,
                 "robots_errors_since": s.robots_errors_since}
                for s in self.frontier.slots.values()
                if s.last_request_end_wall is not None or s.robots_fetched_at is not None]
        import pyarrow as pa
        self.store.write_table(seg.hosts_file(self.seg_dir, self.partition),
                               pa.Table.from_pylist(rows, schema=schema.HOSTS), schema.HOSTS)

    def close(self) -> None:
        for curl in list(self.active):
            self.multi.remove_handle(curl)
        self.output.close()
        self.multi.close()


def started_iso(transfer: Transfer) -> str:
    return _wall(transfer.started_wall).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


LOCK_WAIT_S = 120.0
"""How long a partition waits for the lock of an earlier run of itself (an orphan of a
killed ``crawl fetch`` notices within a second that its parent is gone, and exits)."""


def progress_dir(store: Store, segment: str):
    """Where partitions publish their progress counters: a local folder (see Store.local_dir)."""
    return store.local_dir(store.path(seg.SEGMENTS, segment, seg.STATS, seg.PROGRESS))


def fetch_partition(root: str, segment: str, partition: int, config_values: dict) -> dict:
    """Fetch one partition of a segment; returns its counters. Safe to call again after a crash.

    ``root`` is the store's folder or ``s3://`` URI."""
    store = Store(root)
    config = config_from_dict(config_values)
    seg_dir = seg.segment_dir(store, segment)
    stats_path = seg.partition_stats_file(seg_dir, partition)
    if store.exists(stats_path):
        return store.read_json(stats_path)["counters"]
    # A local lock file (for S3, on this machine: the store-wide fetch lock keeps other
    # machines out). It outlives a crash: finding it means an earlier run started this
    # partition and may have asked hosts after its last flush.
    lock_path = store.local_dir(seg_dir) / f".fetch-part-{partition:05d}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    started_before = lock_path.exists()
    with open(lock_path, "a+") as lock:
        _lock_partition(lock, lock_path, segment, partition)
        if store.exists(stats_path):  # finished by the run we waited for
            return store.read_json(stats_path)["counters"]
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        started = time.monotonic()
        fetcher = PartitionFetcher(store, segment, partition, config)
        fetcher.resumed = started_before
        fetcher.parent_pid = _PARENT_PID
        try:
            fetcher.load()
        except StoreError as exc:
            # pyarrow's messages span lines; the stage's error is one line, with the fix.
            raise StoreError(f"fetch: segment {segment}, partition {partition}: {' '.join(str(exc).split())}; "
                             f"or give the segment up with `crawl abandon {segment}` and run `crawl generate`"
                             ) from None
        try:
            fetcher.run()
        finally:
            fetcher.close()
        fetcher.stats["fetch/seconds"] = round(time.monotonic() - started, 3)
        counters = dict(fetcher.stats)
        if counters.get("fetch/interrupted"):
            # Stopped by a signal: what was fetched is committed, the partition is not
            # finished (no stats file); the lock file stays, so the resumed run knows it
            # must wait a full delay before asking any host again.
            return counters
        # The partition's chunk manifest, summed into the segment's fetched marker: update
        # checks every listed file (a lost chunk was silently dropped before).
        store.write_json(stats_path, {"partition": partition, "counters": counters,
                                      "chunks": fetcher.chunk_manifest()})
        if config.fetch.progress_s > 0:
            fetcher.publish_progress(time.monotonic())  # final counters (fetch_segment removes the folder)
    lock_path.unlink(missing_ok=True)
    return counters


def _lock_partition(lock, lock_path, segment: str, partition: int) -> None:
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise StageError(f"fetch: partition {partition} of segment {segment} is locked by another "
                                 f"process ({lock_path}, pid inside); stop that process, then run "
                                 f"`crawl fetch {segment}` again") from None
            time.sleep(0.1)


_PARENT_PID: int | None = None
"""In a pool worker, the pid of the fetch that started it (see :func:`pool_worker_init`)."""


STOP_GRACE_S = 10.0
"""After a stop signal, how long transfers in flight may take to end before the partition
commits and stops anyway (Kubernetes waits 30 s between SIGTERM and SIGKILL)."""

_STOP_SIGNAL: int | None = None
"""Set by :func:`request_stop` (a SIGTERM or SIGINT handler): the run loop commits and stops."""


def request_stop(signum: int = signal.SIGTERM, frame=None) -> None:
    """Ask the partition running in this process to commit its open chunk and stop."""
    global _STOP_SIGNAL
    _STOP_SIGNAL = signum


def clear_stop() -> None:
    global _STOP_SIGNAL
    _STOP_SIGNAL = None


def pool_worker_init(parent_pid: int) -> None:
    """Pool initializer: die with the parent. On Linux the kernel sends SIGKILL when the
    parent exits (prctl PR_SET_PDEATHSIG); elsewhere the run loop notices a new parent pid.
    SIGTERM and SIGINT (sent by the parent, or by a supervisor to the whole process group)
    make the partition commit what it fetched and stop."""
    global _PARENT_PID
    _PARENT_PID = parent_pid
    clear_stop()
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(3)


def fetch_partition_task(args: tuple) -> dict:
    """Pool entry point: like fetch_partition, but an unexpected error keeps its traceback."""
    try:
        return fetch_partition(*args)
    except CrawlError:
        raise
    except Exception as exc:
        raise StageError(f"fetch: partition {args[2]} of segment {args[1]} failed:\n"
                         f"{traceback.format_exc()}") from exc
