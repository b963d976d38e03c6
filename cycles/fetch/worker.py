"""The fetch loop: one partition of a segment, one process, one pycurl multi loop.

:class:`PartitionFetcher` drives the libcurl multi handle and dispatches each finished
transfer to the step that owns its concern; each step counts what it does in the
partition's stats:

- cycles/fetch/frontier.py: the host slots and the heap of next-allowed times;
- cycles/fetch/politeness.py: spacing, back-off, failures, set-aside windows on a slot;
- cycles/fetch/robots_state.py: a host's robots.txt (cache, revalidation, fallback, rules);
- cycles/tables/sitemaps.py: the sitemaps its robots.txt names (requested before its pages);
- cycles/fetch/inline.py: may a URL outside the fetch list be fetched inline (hosts owned,
  one row per URL a segment);
- cycles/fetch/redirects.py: which redirect targets are fetched inline;
- cycles/fetch/discovery.py: which new links are fetched in the same cycle;
- cycles/fetch/transfer.py: one request's libcurl options, limits and body;
- cycles/fetch/tls.py: certificate verification, TLS failures (classified, the host backed
  off, recorded in the host DB and the WARC), archive-anyway;
- cycles/fetch/output.py: the committed chunks (fetched rows, outlinks, WARC);
- cycles/fetch/archive.py: which WARC records each exchange gets (every one by default);
- cycles/fetch/partition.py: the runner around this loop (lock, resume, stats, stop signals).

The worker owns every host of its partition (generate put each host in exactly one), so
politeness needs no coordination: a slot per host, one request in flight at most, and the
host's delay between the end of a response and the next request — robots.txt requests
included, and across cycles (the host DB). Per host the first request is for robots.txt
unless a young enough copy is known; 5xx, 429 or a network error on it means disallow all
for now (RFC 9309 §2.3.1), so the host's URLs are deferred to a later cycle.

Only public addresses, and those in ``fetch.allowed_networks``, are connected to (the SSRF
guard, cycles/fetch/addresses.py, checked by libcurl's open-socket callback on the address
itself). A refused robots.txt request records every queued URL of the host ``blocked``; a
refused page request records that URL ``blocked``. Neither counts as a host failure
(``fetch/blocked_address``).

A partition ends early, handing the URLs not reached back (no row: the lease ends with the
segment's update, so they are due at the next generate; ``fetch/handed_back``), at the
segment's planned length (``fetch.max_duration_s`` when set, else the generated marker's
``planned_s``: ``fetch/time_limit_stop``), when it has become a tail (cycles/fetch/tail.py,
``fetch/tail_stop``), when its rate falls under ``fetch.throughput_min_pages_s`` —
its remaining work is a few slow hosts (``fetch/throughput_stop``) — or when the file
:data:`EARLY_END_FILE` appears in the segment's progress folder (``fetch/end_requested``:
``crawl run`` ends a thin segment so when the update beside it ends, cycles/commands/run.py).

A page's 3xx is recorded (outcome ``redirect``, target in ``redirect_to``, and the target
written as an outlink), its target maybe followed (cycles/fetch/redirects.py); a redirect
to the URL itself is recorded, its target dropped.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

import pycurl

from cycles import clock
from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.storage.bloom import BloomFilter
from cycles.config import Config
from cycles.fetch import politeness
from cycles.fetch.frontier import ABORTED_MARGIN_S, SPACING_MARGIN_S, Frontier, HostSlot
from cycles.fetch.tail import TailWatch, fits_before
from cycles.tables.hostdb import load_host_state
from cycles.tables.leases import fetched_by_continued
from cycles.slotkey import slot_key
from cycles.metrics import allowed_requests
from cycles.fetch.warc_records import Archive, warcinfo_fields
from cycles.fetch.output import PartitionOutput, resume_state
from cycles.fetch.parse import parse_html
from cycles.fetch.discovery import Discovery
from cycles.fetch.dns import Resolver
from cycles.fetch.inline import InlineFetches
from cycles.tables.newhosts import NewHosts
from cycles.fetch.redirects import Redirects
from cycles.fetch.resumed_hosts import carried_host_rows
from cycles.fetch.robots import robots_url
from cycles.fetch.robots_state import RobotsSteps
from cycles.tables.sitemaps import SitemapSteps
from cycles.fetch.tls import TlsSteps, describe as describe_tls
from cycles.fetch.transfer import (ABORT_NOT_HTML, ABORT_TOO_LARGE, ABORT_TRUNCATED, FIXED_HEADERS, Request, Transfer, configure,
                                   decoded_body, resolve_entries)
from cycles.tables.schema import FetchOutcome as O
from cycles.storage.store import Store
from cycles.urls import resolve_location, url_authority, url_host

CURLE_OPERATION_TIMEDOUT = 28

DNS_POLL_S = 0.005
"""While lookups are under way, the loop looks for finished ones this often (seconds)."""


def _wall(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc)


_FIXED_HEADER_PAIRS = tuple((name, value.strip()) for name, _, value in (line.partition(":") for line in FIXED_HEADERS))
"""FIXED_HEADERS as the (name, value) pairs of a WARC request record, split once."""

_EMPTY_ROW = dict.fromkeys(schema.FETCHED.names)
"""A fetched row with every column None, copied for each row (pyarrow builds the list of
``schema.FETCHED.names`` anew at each access)."""


EARLY_END_FILE = "end-early"
"""In the segment's progress folder (cycles/fetch/partition.py ``progress_dir``): when it
exists, each partition hands back what it has not reached, as at ``fetch.max_duration_s``,
and finishes (cycles/fetch/fetch.py ``request_early_end``)."""

EARLY_END_CHECK_S = 0.1
"""How often the loop looks for :data:`EARLY_END_FILE` (one stat(2))."""

END_GRACE_S = 5.0
"""After a partition ended early (planned length, tail, end requested), how long transfers in
flight may still take; those still running then are cut and their URLs handed back without
a row (``fetch/cut_at_end``): a server dripping a byte a second must not hold the segment
past its plan for ``fetch.timeout_s``. As long as ``fetch.low_speed_time_s``'s default: a
page arriving at a rate the low-speed guard accepts is not lost for a second or two of
load (2 s cut pages a loaded machine had been answered, tests/test_run_discovery.py)."""

STOP_GRACE_S = 10.0
"""After a stop signal, how long transfers in flight may take to end before the partition
commits and stops anyway (Kubernetes waits 30 s between SIGTERM and SIGKILL)."""


HEAP_TRIM_THRESHOLD_BYTES = 256 << 20
"""In a pool worker, glibc's malloc gives free memory at the top of its heap back to the
kernel only past this (see :func:`keep_memory_mapped`)."""

HEAP_MMAP_THRESHOLD_BYTES = 16 << 20
"""In a pool worker, glibc's malloc serves blocks up to this from its heap, larger ones by
mmap(2) (see :func:`keep_memory_mapped`)."""

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt(3) parameters (glibc's malloc.h)
_PR_SET_THP_DISABLE = 41  # prctl(2) (linux/prctl.h)


def keep_memory_mapped() -> None:
    """Stop a fetch worker process from paying page faults for the same memory page after page.

    perf on the workers of scripts/bench_fetch.py (the production-shaped run): 6-10 % of
    their CPU was page faults, nearly all of it the kernel zeroing 2 MiB transparent huge
    pages (clear_page_erms under do_huge_pmd_anonymous_page, in memmove): Arrow's allocator
    (mimalloc) madvises a 1 GiB arena MADV_HUGEPAGE and gives its 4 MiB segments back
    (MADV_DONTNEED) between commits, so each chunk's commit faulted in and zeroed fresh huge
    pages; and glibc's heap grew and shrank by brk(2) ~120 times a second (its trim threshold
    follows the largest block freed, about twice a page's ~240 KB numpy temporaries). With
    transparent huge pages off for this process and glibc's thresholds fixed, faults were
    2-3 % of the workers' CPU and zeroing 0.1 %; system time 0.15-0.17 ms a page, against
    0.20-0.25 (20 s runs, load 1.6-2.5). Peak RSS unchanged (~400 MB a worker).

    Only in a pool worker (the process is the fetch's own): in-process, the settings would
    stay with the caller (``crawl run``'s DuckDB work). A C library without mallopt or a
    kernel without the prctl keeps its behaviour.
    """
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0)
        libc.mallopt(_M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD_BYTES)
        libc.mallopt(_M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD_BYTES)
    except (OSError, AttributeError, TypeError):
        pass


class PartitionFetcher:
    """The fetch loop of one partition: starts requests, dispatches finished transfers.

    Set up and driven by cycles/fetch/partition.py (``fetch_partition``)."""

    def __init__(self, store: Store, segment: str, partition: int, config: Config, progress_path: Path):
        self.store = store
        self.segment = segment
        self.partition = partition
        self.config = config
        self.fc = config.fetch
        self.floor_s = config.effective_delay_s()
        self.stats: Counter = Counter()
        self.robots = RobotsSteps(self.fc, self.stats, clock.offset_s(), self.floor_s)
        self.sitemaps = SitemapSteps(self.fc, self.stats)
        self.tls = TlsSteps(self.fc, self.stats)
        # Hosts sharing a server share its spacing when generate.partition_by says so.
        self.frontier = Frontier(None if config.generate.partition_by == "host"
                                 else functools.partial(slot_key, config=config))
        self.seg_dir = store.segment_dir(segment)
        self.inline = InlineFetches(store, config, self.seg_dir, partition)
        self.redirects = Redirects(store, config, self.inline, self.stats)
        self.discovery = Discovery(store, config, self.seg_dir, partition, self.inline, self.stats)
        self.new_hosts = NewHosts(store, self.seg_dir, segment, partition, self.stats)
        self.dns = Resolver(self.fc, self.stats)
        """Host name lookups: once per TTL, failures backed off, off the loop (cycles/fetch/dns.py)."""
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
        self.archive: Archive | None = None
        """Which WARC records each exchange gets (cycles/fetch/archive.py)."""
        self.resumed = False
        """Set by fetch_partition when an earlier run of this partition started and did not finish."""
        self.parent_pid: int | None = None
        """In a pool worker: the pid of the process that started us (checked every loop)."""
        self.stop_signal: Callable[[], int | None] = lambda: None
        """The stop signal this process received, if any (cycles/fetch/partition.py)."""
        self.progress_path = progress_path
        self._last_progress = 0.0
        self.started_mono: float | None = None
        """When :meth:`run` started: the politeness budget (:meth:`allowed_requests`) counts from here."""
        self._resumed_run = False
        self.carried_hosts = None
        """A resumed partition's rows of its killed run, written with every hosts/ output
        (cycles/fetch/resumed_hosts.py)."""
        self.leftover: list[dict] = []
        """Discovered URLs queued and not reached when the partition ended (:meth:`write_leftover`)."""
        self.planned_s: float | None = None
        """The segment's planned length (its generated marker), read by :meth:`load`."""
        self.deadline: float | None = None
        """Monotonic time the fetch ends at (:meth:`run`; None: no end planned)."""

    # --- set-up -----------------------------------------------------------------------
    def load(self) -> None:
        items = self.store.read_table(seg.fetchlist_file(self.seg_dir, self.partition)).to_pylist()
        done, next_chunk = resume_state(self.store, self.seg_dir, self.partition)
        resumed = (self.resumed or bool(done)
                   or self.store.exists(seg.hosts_file(self.seg_dir, self.partition)))
        self.stats["fetch/resumed_skipped"] += len(done)
        self.inline.partitions = self._partition_count()
        listed = {i["url"] for i in items}
        # With done: a URL an earlier run of this partition fetched inline has its row already.
        self.inline.listed_urls = listed | done
        self.inline.own_hosts = {i["host"] for i in items}
        self._resumed_run = resumed
        if resumed:
            # Before any slot is set up: what the killed run knew, and "asked until now" for
            # the hosts it may have asked after its last flush, reach this file (read by the
            # slots below and by every later segment) — cycles/fetch/resumed_hosts.py.
            self.carried_hosts = carried_host_rows(self.store, self.seg_dir, self.segment, self.partition,
                                                   self.inline.own_hosts, time.time())
            self.stats["fetch/resumed_hosts_carried"] = self.carried_hosts.num_rows
            self.write_hosts()
        # Generated while the segment before was fetched (crawl run), this one may list what
        # that one fetched afterwards by discovery, and its seen-set lacks it: skipped, known.
        earlier = fetched_by_continued(self.store, self.segment, self.inline.own_hosts)
        fetched_meanwhile = {url for url, _ in earlier}
        kept = [i for i in items if i["url"] not in done and i["url"] not in fetched_meanwhile]
        self.stats["fetch/fetched_before"] += sum(1 for i in items if i["url"] not in done) - len(kept)
        items = kept
        self.discovery.load(len(listed) * self.fc.outlink_bloom_links_per_page,
                            [(url, url_host(url)) for url in done - listed])
        self.discovery.add_fetched_before(earlier)
        self.discovery.fits = lambda slot: fits_before(slot, time.monotonic(), self.deadline)
        if self.discovery.enabled and self.fc.follow_new_hosts:
            self.new_hosts.load()
            self.inline.new_hosts = self.new_hosts
        bloom = None
        if self.fc.outlink_bloom_fp > 0:
            bloom = BloomFilter(max(100_000, len(items) * self.fc.outlink_bloom_links_per_page),
                                self.fc.outlink_bloom_fp)
        self.output = PartitionOutput(self.store, self.segment, self.seg_dir, self.partition,
                                      next_chunk, self.fc.user_agent, self.fc.warc_gzip_level, bloom,
                                      flush_bytes=self.fc.flush_bytes, warc_prefix=self.config.warc.file_prefix,
                                      warcinfo=warcinfo_fields(self.config))
        self.archive = Archive(self.output, self.config.warc)
        states = load_host_state(self.store, {i["host"] for i in items}, self.segment)
        now_mono, now_wall = time.monotonic(), time.time()
        for item in items:
            self.frontier.slot(item["host"]).queue.append(item)
        # Each slot is set up once its URLs are queued: a host set aside on the spot (a
        # cached robots.txt error) defers them all; set up before, the URLs queued after
        # it were never fetched nor written.
        for slot in self.frontier.slots.values():
            self._init_slot(slot, slot.queue[0]["url"], states.get(slot.host), now_mono, now_wall, resumed)
        self.frontier.restore_gates(now_mono, now_wall)
        for slot in self.frontier.slots.values():
            self._set_aside_if_far(slot, now_mono)
            self.frontier.schedule(slot)
        self._size_connection_cache(len(self.frontier.slots))

    def _partition_count(self) -> int:
        """Partitions of the segment, from generate's marker (else its fetch list files);
        the marker's planned length goes to :attr:`planned_s`."""
        marker = seg.read_marker(self.store, self.segment, seg.Generated)
        self.planned_s = marker.planned_s if marker is not None else None
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
        """A new slot from the host DB's row: delay, robots.txt copy, spacing and window."""
        slot.delay_s = self.floor_s
        self.dns.known(slot.host, state)
        self.tls.load(slot.host, state)
        if state is not None:
            if state["crawl_delay_s"]:
                slot.delay_s = max(self.floor_s, float(state["crawl_delay_s"]))
            if self.robots.load(slot.robots, state, now_wall):
                self._settle_robots(slot, now_wall)
        politeness.restore_spacing(slot, state, now_mono, now_wall, resumed, self.fc)
        if slot.robots.rules is None:
            slot.robots.url = robots_url(first_url)

    # --- DNS --------------------------------------------------------------------------
    def _dns_ready(self, slot: HostSlot, now_wall: float) -> bool:
        """May the slot's next request start? Yes for a name whose answer stands (or that
        libcurl resolves: cycles/fetch/dns.py). A name whose failure stands sets the host
        aside at once (no lookup: its back-off holds); any other name is looked up, and the
        slot waits off the heap until :meth:`_dns_answered`."""
        host = slot.host
        if not self.dns.applies(host):
            return True
        answer = self.dns.answer(host, now_wall)
        if answer is None:
            self.dns.submit(host)
            return not self.dns.applies(host)  # the resolver could not start: libcurl resolves
        if answer.error is None:
            return True
        if answer.seconds == 0.0:
            self.stats["dns/cached_failure"] += 1
        self._dns_failed(slot, answer)
        return False

    def _dns_answered(self) -> None:
        """Lookups that ended: their hosts go back on the heap (or aside, when they failed)."""
        for host, answer in self.dns.completed():
            slot = self.frontier.slots.get(host)
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
            self._set_aside(slot, answer.reason())

    def _dns_columns(self, host: str) -> dict:
        answer = self.dns.answers.get(host)
        return answer.host_columns() if answer is not None else {}

    # --- robots -----------------------------------------------------------------------
    def _settle_robots(self, slot: HostSlot, now_wall: float | None = None) -> None:
        reason = self.robots.settle(slot, now_wall)
        if reason is not None:
            self._set_aside(slot, reason)

    def _finish_tls_failure(self, slot: HostSlot, transfer: Transfer, reason: str, error: tuple[int, str]) -> None:
        """The TLS handshake failed (cycles/fetch/tls.py): the exchange's WARC metadata record,
        then either the host fetched unverified (``fetch.tls_archive_anyway``; the request is
        asked again) or the whole host backed off: the URL asked and every queued one get
        ``tls_failed``, the host is set aside and its ``not_before`` moves ahead. Never a
        retry over plain http."""
        message = f"curl {error[0]}: {error[1]}"
        transfer.tls_failure = (reason, message)
        wait, unverified = self.tls.failed(slot.host, reason, message, _wall(time.time()))
        text = "TLS " + describe_tls(reason, message)
        request, item = transfer.request, transfer.request.item
        started = started_iso(transfer)
        if request.kind == "robots":
            self.archive.robots(transfer, transfer.ip, self._request_line(transfer),
                                self._request_headers(transfer), started, text)
        elif request.kind == "sitemap":
            self.archive.sitemap(transfer, transfer.ip, self._request_line(transfer),
                                 self._request_headers(transfer), started, text)
        elif unverified:  # the page is asked again; its failed exchange is archived all the same
            self.archive.page(transfer, transfer.ip, self._request_line(transfer),
                              self._request_headers(transfer), started, O.TLS_FAILED, text)
        if unverified:
            # Archive anyway: robots.txt stays pending (asked again), a page goes back first.
            if request.kind == "page":
                slot.queue.appendleft(item)
            return
        if request.kind == "page":
            common = dict(fetched_at=_wall(transfer.started_wall + clock.offset_s()),
                          duration_ms=int(transfer.duration_s * 1000), body_bytes=0)
            self._fetched(transfer, O.TLS_FAILED, [], error=text, **common)
        slot.next_allowed = max(slot.next_allowed, transfer.ended + wait)
        slot.robots.url = None
        reason_text = f"{text}; host backed off {wait:.0f} s"
        slot.set_aside = reason_text
        self.stats["fetch/hosts_set_aside"] += 1
        while slot.queue:
            self.output.add(self._row(slot.queue.popleft(), O.TLS_FAILED, error=reason_text), [])

    def _finish_robots(self, slot: HostSlot, transfer: Transfer, error: tuple[int, str] | None) -> None:
        if error is not None and transfer.blocked_address:
            self._robots_blocked(slot, transfer)
            return
        self.archive.robots(transfer, transfer.ip, self._request_line(transfer),
                            self._request_headers(transfer), started_iso(transfer),
                            f"curl {error[0]}: {error[1]}" if error is not None else None)
        if self.robots.read_response(slot.robots, transfer, error):
            self._settle_robots(slot)
            self._start_sitemaps(slot)

    def _start_sitemaps(self, slot: HostSlot) -> None:
        """robots.txt was just read: queue the sitemaps it names (cycles/tables/sitemaps.py)."""
        rules = slot.robots.rules
        if slot.set_aside is None and rules is not None and slot.queue and rules.sitemaps():
            self.sitemaps.start(slot.host, robots_url(slot.queue[0]["url"]), rules.sitemaps())

    def _finish_sitemap(self, slot: HostSlot, transfer: Transfer, error: tuple[int, str] | None) -> None:
        """A sitemap response: archived, then read; failures count against the host as a page's do."""
        if error is not None and transfer.blocked_address:
            self.stats["fetch/blocked_address"] += 1
            return
        message = f"curl {error[0]}: {error[1]}" if error is not None else None
        self.archive.sitemap(transfer, transfer.ip, self._request_line(transfer),
                             self._request_headers(transfer), started_iso(transfer), message)
        status = transfer.status_code()
        if error is not None and transfer.abort != ABORT_TRUNCATED:  # truncated at the cap: read its start
            self._set_aside_if(slot, politeness.count_failure(slot, self.fc))
            status = None
        elif status is not None:
            politeness.answered(slot, status)
            if status == 429 or status >= 500:
                self._set_aside_if(slot, politeness.back_off(slot, transfer, status, time.time(), self.fc, self.stats))
        rows = self.sitemaps.read(slot.host, transfer.request.url, transfer.request.item["sitemap_depth"], status,
                                  transfer.body() if status is not None else b"",
                                  transfer.header("content-encoding"),
                                  _wall(transfer.started_wall + clock.offset_s()))
        self.output.add_sitemap_urls(rows)

    def _robots_blocked(self, slot: HostSlot, transfer: Transfer) -> None:
        """The host's address is not public (SSRF guard): not one packet was sent to it.

        Every URL queued for the host is recorded ``blocked`` (not deferred: deferring would
        bring it back every hour). Not a robots.txt answer (no robots state is written) and
        not a host failure."""
        self.stats["fetch/blocked_address"] += 1
        slot.robots.url = None
        reason = self._blocked_reason(transfer)
        slot.set_aside = reason
        self.stats["fetch/hosts_set_aside"] += 1
        while slot.queue:
            self.output.add(self._row(slot.queue.popleft(), O.BLOCKED, error=reason), [])

    @staticmethod
    def _blocked_reason(transfer: Transfer) -> str:
        return (f"address {transfer.blocked_address} is not public and not in fetch.allowed_networks "
                "(SSRF guard); not connected")

    # --- pages ------------------------------------------------------------------------
    def _row(self, item: dict, outcome: str, **values) -> dict:
        row = _EMPTY_ROW.copy()
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

    def _set_aside_if(self, slot: HostSlot, reason: str | None) -> None:
        """Set the host aside when a politeness rule gave a reason."""
        if reason is not None:
            self._set_aside(slot, reason)

    def _set_aside_if_far(self, slot: HostSlot, now_mono: float) -> None:
        self._set_aside_if(slot, politeness.far_window(slot, now_mono, self.fc, self.stats))

    def _next_request(self, slot: HostSlot) -> Request | None:
        if slot.robots.url:
            return Request(slot.robots.url, slot.host, "robots", None, self.robots.validators(slot.robots))
        sitemap = self.sitemaps.next_url(slot.host, slot.robots.rules.allowed) if slot.queue else None
        if sitemap is not None:
            return Request(sitemap[0], slot.host, "sitemap", {"sitemap_depth": sitemap[1]})
        while slot.queue:
            item = slot.queue.popleft()
            if not slot.robots.rules.allowed(item["url"]):
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

    def _fetched(self, transfer: Transfer, outcome: str, links: list[dict], **values) -> None:
        """The row of a page that was requested, its exchange archived first (its WARC location
        goes into the row; cycles/fetch/archive.py)."""
        location = self.archive.page(transfer, transfer.ip, self._request_line(transfer),
                                     self._request_headers(transfer), started_iso(transfer), outcome,
                                     values.get("error"))
        self.output.add(self._row(transfer.request.item, outcome, **values, **location), links)

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
            self._fetched(transfer, O.TOO_LARGE, [], error=f"body over {transfer.max_bytes} bytes; aborted", **common)
            return
        if transfer.abort == ABORT_NOT_HTML:
            self._fetched(transfer, O.NOT_HTML, [], error="not HTML; body not downloaded", **common)
            return
        if error is not None:
            errno, message = error
            self.stats["fetch/timeout" if errno == CURLE_OPERATION_TIMEDOUT else "fetch/network_error"] += 1
            self._set_aside_if(slot, politeness.count_failure(slot, self.fc))
            self._fetched(transfer, O.NETWORK_ERROR, [], error=f"curl {errno}: {message}", **common)
            return
        politeness.answered(slot, status)
        if 200 <= status < 300:
            self._store_page(slot, transfer, item, common, curl)
        elif status == 304:
            self._fetched(transfer, O.NOT_MODIFIED, [], **common)
        elif 300 <= status < 400 and transfer.header("location"):
            target = resolve_location(item["url"], transfer.header("location"))
            self.stats["fetch/redirect"] += 1
            if target.split("#", 1)[0] == item["url"]:
                # A redirect to itself can only loop: record it, follow nothing.
                self.stats["fetch/redirect_loop"] += 1
                self._fetched(transfer, O.REDIRECT, [], redirect_to=target, error="redirect to itself", **common)
                return
            if url_authority(target) != url_authority(item["url"]):
                self.stats["fetch/redirect_cross_host"] += 1
            error = self._follow_redirect(slot, item, target)
            self._fetched(transfer, O.REDIRECT, [self._link(item, target, "", False)], redirect_to=target,
                          error=error, **common)
        elif status in (404, 410):
            self._fetched(transfer, O.GONE, [], **common)
        elif status == 429 or status >= 500:
            self._set_aside_if(slot, politeness.back_off(slot, transfer, status, time.time(), self.fc, self.stats))
            self._fetched(transfer, O.SERVER_ERROR, [], error=f"HTTP {status}", **common)
        else:
            self._fetched(transfer, O.CLIENT_ERROR, [], error=f"HTTP {status}", **common)

    # --- redirects ----------------------------------------------------------------------
    def _follow_redirect(self, slot: HostSlot, item: dict, target: str) -> str | None:
        """Queue the target if this worker fetches it now (cycles/fetch/redirects.py); the
        error for the redirect's row."""
        error, target_slot = self.redirects.follow(item, target, self._redirect_slot)
        if target_slot is not None and target_slot is not slot:  # the finishing slot is rescheduled by _finish
            self.frontier.schedule(target_slot)
        return error

    def _redirect_slot(self, host: str, first_url: str) -> HostSlot:
        """The host's slot; a host not in the fetch list gets one set up as load() would
        (its state read from the host DB: spacing across cycles and robots.txt hold)."""
        slot = self.frontier.slots.get(host)
        if slot is None:
            self.stats["fetch/redirect_new_host"] += 1
            slot = self._outside_slot(host, first_url)
        return slot

    def _discovery_slot(self, host: str, url: str) -> HostSlot | None:
        """The host's slot for a discovered link; a new host this worker claimed
        (cycles/tables/newhosts.py) gets one set up as a redirect target's."""
        slot = self.frontier.slots.get(host)
        if slot is None and host in self.inline.own_hosts:
            self.stats["discover/new_host_slots"] += 1
            slot = self._outside_slot(host, url)
        return slot

    def _outside_slot(self, host: str, first_url: str) -> HostSlot:
        """A slot for a host not in the fetch list, set up as load() would."""
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
            self._fetched(transfer, O.TOO_LARGE, [], error="body does not inflate within the size cap", **common)
            return
        try:
            page = parse_html(body, item["url"], transfer.header("content-type"), self.fc.robots_agent,
                              self.fc.minhash_block_min_bytes if self.fc.minhash_main_content else None)
        except Exception as exc:  # a parser crash costs one page, never the worker
            self.stats["parse/crash"] += 1
            self._fetched(transfer, O.PARSE_ERROR, [], error=f"parser crashed: {type(exc).__name__}: {exc}"[:500],
                          **common)
            return
        self.stats["parse/pages"] += 1
        links = [self._link(item, link.url, link.anchor, link.nofollow) for link in page.links]
        self.stats["parse/links"] += len(links)
        if self.discovery.enabled:
            for target in self.discovery.offer(item, links, self._discovery_slot):
                if target is not slot:  # the finishing slot is rescheduled by _finish
                    self.frontier.schedule(target)
        self._fetched(transfer, O.OK, links, title=page.title, text=page.text, content_hash=page.content_hash,
                      minhash=page.minhash, canonical=page.canonical, noindex=page.noindex, **common)

    def _request_line(self, transfer: Transfer) -> str:
        """The WARC request record's request line, in the HTTP version the answer came in
        (libcurl negotiates HTTP/2 by ALPN where a server offers it)."""
        parts = urlsplit(transfer.request.url)
        version = "HTTP/2" if transfer.status_line.startswith(b"HTTP/2") else "HTTP/1.1"
        return f"GET {parts.path or '/'}{'?' + parts.query if parts.query else ''} {version}"

    def _request_headers(self, transfer: Transfer) -> list[tuple[str, str]]:
        headers = [("Host", urlsplit(transfer.request.url).netloc), ("User-Agent", self.fc.user_agent),
                   ("Accept-Encoding", "gzip, deflate"), *_FIXED_HEADER_PAIRS]
        for line in transfer.request.headers:
            name, _, value = line.partition(":")
            headers.append((name, value.strip()))
        return headers

    # --- the loop -----------------------------------------------------------------------
    def _new_handle(self) -> pycurl.Curl:
        curl = pycurl.Curl()
        curl.setopt(pycurl.SHARE, self.share)  # kept through reset(): set once per handle
        return curl

    def _start(self, slot: HostSlot, request: Request) -> None:
        curl = self.free.pop() if self.free else self._new_handle()
        max_bytes = {"robots": self.fc.max_robots_bytes,
                     "sitemap": self.fc.sitemap_max_bytes}.get(request.kind, self.fc.max_page_bytes)
        transfer = Transfer(request, self.fc, max_bytes)
        transfer.tls_unverified = self.tls.unverified_for(slot.host)
        if transfer.tls_unverified is not None:
            self.stats["tls/unverified"] += 1  # fetch.tls_archive_anyway: asked without verifying
        configure(curl, transfer, self.fc, resolve_entries(request.url, self.fc.resolve)
                  or self.dns.curl_entries(request.url, url_host(request.url)))
        # A host's address is looked up once a cycle, not every minute (libcurl's default).
        curl.setopt(pycurl.DNS_CACHE_TIMEOUT, self.fc.dns_cache_s)
        self.frontier.started(slot)
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
        transfer.ip = curl.getinfo(pycurl.PRIMARY_IP) or None
        transfer.error = error[0] if error is not None else None
        slot.in_flight = False
        slot.last_request_end_wall = ended_wall
        tls_reason = self.tls.observe(curl, transfer.request.url, error)
        if error is None and transfer.request.url[:6].lower() == "https:":
            self.tls.succeeded(slot.host, transfer.tls_unverified is not None, _wall(ended_wall))
        if tls_reason is not None and not transfer.blocked_address:
            self._finish_tls_failure(slot, transfer, tls_reason, error)
        elif transfer.request.kind == "robots":
            self._finish_robots(slot, transfer, error)
        elif transfer.request.kind == "sitemap":
            self._finish_sitemap(slot, transfer, error)
        else:
            self._finish_page(slot, transfer, error, curl)
        # After the handlers: robots.txt may just have raised the delay (Crawl-delay), and
        # a back-off may already have pushed next_allowed further.
        politeness.space_after_response(slot, transfer, self.fc)
        slot.cycle_s = transfer.duration_s + politeness.delay_after(slot, transfer, self.fc)
        self.frontier.finished(slot, transfer.ended + politeness.delay_after(slot, transfer, self.fc) + SPACING_MARGIN_S)
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

    def _hand_back(self) -> None:
        """End the partition early: every URL not reached goes back without a row (update
        leaves its crawl DB row as it was — due — and the segment's update ends its lease, so
        the next generate can take it again; a URL discovered here stays an outlink)."""
        for slot in self.frontier.slots.values():
            slot.robots.url = None
            self.stats["fetch/handed_back"] += len(slot.queue)
            # Queued by discovery (a fetch-list row has no "hop"; a redirect target is not one).
            self.leftover += [i for i in slot.queue if "hop" in i and "redirect_chain" not in i]
            slot.queue.clear()

    def _cut_in_flight(self) -> None:
        """End every transfer still in flight without a row (see :data:`END_GRACE_S`): its URL
        is handed back like one not reached. The host's spacing counts from now, as after a
        response we aborted (the server sees the close now), its slow-host delay included, so
        the next segment asks it no sooner (written with the hosts/ output)."""
        now, now_wall = time.monotonic(), time.time()
        for curl, (transfer, slot) in list(self.active.items()):
            self.multi.remove_handle(curl)
            del self.active[curl]
            transfer.ended, transfer.duration_s = now, now - transfer.started
            slot.in_flight = False
            slot.last_request_end_wall = now_wall
            slot.next_allowed = max(slot.next_allowed, now + politeness.delay_after(slot, transfer, self.fc)
                                    + ABORTED_MARGIN_S)
            self.frontier.finished(slot, slot.next_allowed)
            item = transfer.request.item
            if transfer.request.kind == "page":
                self.stats["fetch/handed_back"] += 1
                if "hop" in item and "redirect_chain" not in item:
                    self.leftover.append(item)
            self.stats["fetch/cut_at_end"] += 1
            curl.reset()
            self.free.append(curl)

    def write_leftover(self) -> None:
        """What discovery queued and the partition did not reach (``segment.LEFTOVER``):
        before this segment's update only this file knows it (it is an outlink until then),
        and ``crawl run`` lists it for the fetch that follows (cycles/generate/generate.py)."""
        rows = [{k: i[k] for k in schema.LEFTOVER.names} for i in self.leftover + self.discovery.beyond_plan]
        import pyarrow as pa
        self.store.write_table(seg.leftover_file(self.seg_dir, self.partition),
                               pa.Table.from_pylist(rows, schema=schema.LEFTOVER), schema.LEFTOVER)

    def _throughput_low(self, now: float) -> bool:
        """True once, when the requests started over the last ``fetch.throughput_window_s``
        fall under ``fetch.throughput_min_pages_s`` a second (after ``throughput_after_s``)."""
        if self.fc.throughput_min_pages_s <= 0 or now - self._window_start < self.fc.throughput_window_s:
            return False
        rate = (self.stats["fetch/requests"] - self._window_requests) / (now - self._window_start)
        self._window_start, self._window_requests = now, self.stats["fetch/requests"]
        return now - self.started_mono >= self.fc.throughput_after_s and rate < self.fc.throughput_min_pages_s

    def _early_end_requested(self, now: float) -> bool:
        """True when :data:`EARLY_END_FILE` exists (looked for every ``EARLY_END_CHECK_S``)."""
        if now - self._early_end_checked < EARLY_END_CHECK_S:
            return False
        self._early_end_checked = now
        return (self.progress_path.parent / EARLY_END_FILE).exists()

    def run(self) -> None:
        if self.parent_pid is not None:  # a pool worker: see keep_memory_mapped
            keep_memory_mapped()
        self.started_mono = time.monotonic()
        self._early_end_checked = 0.0
        limit = self.fc.max_duration_s if self.fc.max_duration_s > 0 else (self.planned_s or 0.0)
        deadline = self.deadline = self.started_mono + limit if limit > 0 else None
        tail = TailWatch(self.fc.tail_share if limit > 0 else 0.0, self.fc.tail_after_share * limit,
                         self.started_mono)
        stopping_at: float | None = None
        self._window_start, self._window_requests = self.started_mono, 0
        handed_back = False
        ended_at: float | None = None
        while True:
            now = time.monotonic()
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                # The `crawl fetch` that started us is gone (kill -9): stop at once, without
                # committing, so a resumed run never shares this partition with us.
                os._exit(3)
            if self.stop_signal() is not None and stopping_at is None:
                # SIGTERM/SIGINT (Airflow, systemd, Kubernetes): start nothing new, let the
                # transfers in flight end, commit what was fetched (up to flush_s of pages
                # were lost otherwise) and leave the rest to a resumed run.
                stopping_at = now
                self.stats["fetch/interrupted"] = 1
            if stopping_at is not None and (not self.active or now - stopping_at > STOP_GRACE_S):
                break
            if self.fc.progress_s > 0 and now - self._last_progress >= self.fc.progress_s:
                self.publish_progress(now)
            if not handed_back and deadline is not None and now >= deadline:
                self.stats["fetch/time_limit_stop"] = 1
                handed_back = True
                self._hand_back()
            if not handed_back and tail.is_tail(self.frontier.slots.values(), now):
                # A few hosts waiting out long spacings: the next segment has every due host.
                self.stats["fetch/tail_stop"] = 1
                self.stats["fetch/tail_stop_at_s"] = round(now - self.started_mono, 1)
                handed_back = True
                self._hand_back()
            if not handed_back and self._throughput_low(now):
                self.stats["fetch/throughput_stop"] = 1
                handed_back = True
                self._hand_back()
            if not handed_back and self._early_end_requested(now):
                self.stats["fetch/end_requested"] = 1
                handed_back = True
                self._hand_back()
            if handed_back and self.active:
                ended_at = now if ended_at is None else ended_at
                if now - ended_at > END_GRACE_S:
                    self._drain()  # responses that came while the loop was busy are kept
                    self._cut_in_flight()
            if handed_back and not self.active:
                self._hand_back()  # what the last responses queued (redirects, discoveries)
                break
            self._dns_answered()
            while stopping_at is None and not handed_back and len(self.active) < self.fc.max_in_flight:
                slot = self.frontier.pop_ready(now)
                if slot is None:
                    break
                if not self._dns_ready(slot, time.time()):
                    continue  # back on the heap when its lookup answers
                request = self._next_request(slot)
                if request is not None:
                    self._start(slot, request)
            self._drain()
            wait = self.frontier.seconds_to_next(time.monotonic())
            if not self.active and wait is None and not self.dns.pending:
                break
            timeout = min(1.0, wait if wait is not None else 1.0)
            if self.dns.pending:
                # A lookup's end does not wake select(2): look again soon (a lookup takes
                # 10-200 ms on the real web; 5 ms of extra wait is within its noise).
                timeout = min(timeout, DNS_POLL_S)
            if self.active:
                try:
                    self.multi.select(max(timeout, 0.001))
                except pycurl.error:
                    if self.stop_signal() is None:
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
        for record_type, size in self.archive.record_bytes.items():
            self.stats[f"warc/bytes/{record_type}"] = size
        self.write_hosts()

    def chunk_manifest(self) -> list[dict]:
        return self.output.manifest()

    def publish_progress(self, now: float) -> None:
        """Counters so far, for the parent's progress display (a small JSON file, replaced)."""
        self._last_progress = now
        active = len(self.active)
        waiting = self.frontier.waiting_hosts()
        self.stats["fetch/hosts_waiting_peak"] = max(self.stats["fetch/hosts_waiting_peak"], waiting)
        self.count_idle()
        counters = {**self.stats, "fetch/allowed_requests": self.allowed_requests(now)}
        data = {"partition": self.partition, "time": time.time(), "hosts_active": active,
                "hosts_waiting": waiting, "counters": counters}
        path = self.progress_path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)

    def count_idle(self) -> None:
        """The frontier's idle-with-work figures into the stats (always, 0 too: a dashboard
        reads the series whether or not a stall happened)."""
        self.stats["fetch/idle_with_work_s"] = round(self.frontier.idle_with_work_s, 3)
        self.stats["fetch/idle_with_work_requests"] = round(self.frontier.idle_with_work_requests, 3)

    def allowed_requests(self, now: float) -> float:
        """Requests this partition's hosts' delays allowed since :meth:`run` started
        (cycles/metrics.py: the denominator of politeness utilisation)."""
        elapsed = now - self.started_mono if self.started_mono is not None else 0.0
        return round(allowed_requests((s.delay_s for s in self.frontier.slots.values()), elapsed), 1)

    def write_hosts(self) -> None:
        now_mono, now_wall = time.monotonic(), time.time()
        rows = [{"host": s.host,
                 "last_request_end": _wall(s.last_request_end_wall) if s.last_request_end_wall else None,
                 "not_before": politeness.not_before_wall(s, now_mono, now_wall, self.fc),
                 "crawl_delay_s": s.delay_s, **s.robots.host_row(), **self._dns_columns(s.host),
                 **self.tls.host_row(s.host)}
                for s in self.frontier.slots.values()
                if s.last_request_end_wall is not None or s.robots.fetched_at is not None
                or s.host in self.dns.answers]
        import pyarrow as pa
        table = pa.Table.from_pylist(rows, schema=schema.HOSTS)
        if self.carried_hosts is not None:  # a host's rows are merged by their readers (hostdb.MERGE_SQL)
            table = pa.concat_tables([self.carried_hosts, table])
        self.store.write_table(seg.hosts_file(self.seg_dir, self.partition), table, schema.HOSTS)

    def close(self) -> None:
        self.dns.close()
        for curl in list(self.active):
            self.multi.remove_handle(curl)
        self.output.close()
        self.multi.close()


def started_iso(transfer: Transfer) -> str:
    """``%Y-%m-%dT%H:%M:%S.%fZ`` of the request's start; isoformat, as strftime took twice
    as long (it goes through the C library's strftime; tests/fetch/test_output.py checks they agree)."""
    return _wall(transfer.started_wall).isoformat(timespec="microseconds")[:-6] + "Z"
