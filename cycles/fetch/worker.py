"""The fetch loop: one partition of a segment, one process, one pycurl multi loop.

:class:`PartitionFetcher` sets up the partition's parts and runs the loop: it starts the
ready hosts' requests and hands each finished transfer through the parts that own its
concern; each part counts what it does in the partition's stats:

- cycles/fetch/transfers.py: the libcurl multi handle, its easy handles, select(2);
- cycles/fetch/hosts.py: a host's slot (set-up from the host DB, next request, what a
  response tells it, spacing, set-aside, the DNS gate);
- cycles/fetch/classify.py: what a finished transfer comes to (a pure function);
- cycles/fetch/results.py: routes it by that outcome: archived, written, its host told;
- cycles/fetch/pages.py: a 2xx stored and parsed, its links offered, a redirect followed;
- cycles/fetch/rows.py: every fetched row, counted by outcome;
- cycles/fetch/records.py: the typed record a URL travels as (``FetchItem``);
- cycles/fetch/exchange.py: a transfer's WARC request line and headers, its times;
- cycles/fetch/tail.py: when the fetch ends before its list is done (plan, tail, rate, request);
- cycles/fetch/handback.py: what it then hands back (the URLs not reached, transfers cut);
- cycles/fetch/meter.py: the progress file and the politeness budget;
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
- cycles/fetch/warc_records.py: which WARC records each exchange gets (every one by default);
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

import functools
import os
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import pyarrow as pa

from cycles import clock
from cycles.config import Config
from cycles.fetch.warc_records import Archive, warcinfo_fields
from cycles.fetch.discovery import Discovery
from cycles.fetch.dns import Resolver
from cycles.fetch.exchange import started_iso, wall  # noqa: F401  (started_iso: tests/fetch/test_hot_path.py)
from cycles.fetch.frontier import Frontier, HostSlot
from cycles.fetch.handback import HandBack
from cycles.fetch.hosts import HostSteps
from cycles.fetch.inline import InlineFetches
from cycles.fetch.memory import freeze_loaded_objects, keep_memory_mapped
from cycles.fetch.meter import Meter
from cycles.fetch.output import PartitionOutput, resume_state
from cycles.fetch.pages import Pages
from cycles.fetch.records import FetchItem
from cycles.fetch.redirects import Redirects
from cycles.fetch.results import Results
from cycles.fetch.resumed_hosts import carried_host_rows
from cycles.fetch.robots_state import RobotsSteps
from cycles.fetch.rows import Rows
from cycles.fetch.tail import EARLY_END_FILE, EndWatch, fits_before  # noqa: F401  (EARLY_END_FILE: its old home)
from cycles.fetch.tls import TlsSteps
from cycles.fetch.transfer import Transfer
from cycles.fetch.transfers import Transfers
from cycles.slotkey import slot_key
from cycles.storage.bloom import BloomFilter
from cycles.storage.store import Store
from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.tables.hostdb import load_host_state
from cycles.tables.leases import fetched_by_continued
from cycles.tables.newhosts import NewHosts
from cycles.tables.sitemaps import SitemapSteps
from cycles.urls import url_host

DNS_POLL_S = 0.005
"""While lookups are under way, the loop looks for finished ones this often (seconds)."""

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


class PartitionFetcher:
    """The fetch loop of one partition: sets up its parts, starts requests, hands finished
    transfers on (module doc).

    Set up and driven by cycles/fetch/partition.py (``fetch_partition``)."""

    def __init__(self, store: Store, segment: str, partition: int, config: Config, progress_path: Path):
        self.store = store
        self.segment = segment
        self.partition = partition
        self.config = config
        self.fc = config.fetch
        self.stats: Counter = Counter()
        self.seg_dir = store.segment_dir(segment)
        self._make_parts()
        self.output: PartitionOutput | None = None
        self.archive: Archive | None = None
        """Which WARC records each exchange gets (cycles/fetch/warc_records.py)."""
        self.results: Results | None = None
        """Where finished transfers go (set up with the output, by :meth:`load`)."""
        self.resumed = False
        """Set by fetch_partition when an earlier run of this partition started and did not finish."""
        self.parent_pid: int | None = None
        """In a pool worker: the pid of the process that started us (checked every loop)."""
        self.stop_signal: Callable[[], int | None] = lambda: None
        """The stop signal this process received, if any (cycles/fetch/partition.py)."""
        self.progress_path = progress_path
        self.meter = Meter(partition, self.stats, self.frontier, self.transfers, progress_path)
        self.carried_hosts = None
        """A resumed partition's rows of its killed run, written with every hosts/ output
        (cycles/fetch/resumed_hosts.py)."""
        self.planned_s: float | None = None
        """The segment's planned length (its generated marker), read by :meth:`load`."""
        self.deadline: float | None = None
        """Monotonic time the fetch ends at (:meth:`run`; None: no end planned)."""

    def _make_parts(self) -> None:
        """The steps of the partition's fetch, each counting into :attr:`stats`."""
        store, config, fc, stats = self.store, self.config, self.fc, self.stats
        self.robots = RobotsSteps(fc, stats, clock.offset_s(), config.effective_delay_s())
        self.sitemaps = SitemapSteps(fc, stats)
        self.tls = TlsSteps(fc, stats)
        self.dns = Resolver(fc, stats)
        """Host name lookups: once per TTL, failures backed off, off the loop (cycles/fetch/dns.py)."""
        # Hosts sharing a server share its spacing when generate.partition_by says so.
        self.frontier = Frontier(None if config.generate.partition_by == "host"
                                 else functools.partial(slot_key, config=config))
        self.inline = InlineFetches(store, config, self.seg_dir, self.partition)
        self.redirects = Redirects(store, config, self.inline, stats)
        self.discovery = Discovery(store, config, self.seg_dir, self.partition, self.inline, stats)
        self.new_hosts = NewHosts(store, self.seg_dir, self.segment, self.partition, stats)
        self.hosts = HostSteps(store, self.segment, config, self.frontier, stats,
                               (self.robots, self.sitemaps, self.tls, self.dns), self.inline)
        self.transfers = Transfers(fc, stats, self.frontier, self.tls, self.dns)
        self.pages = Pages(fc, stats, self.frontier, self.hosts, self.discovery, self.redirects)
        self.hand_back = HandBack(stats, self.frontier, self.transfers, self.hosts, self.discovery)

    @property
    def active(self) -> dict:
        """The transfers in flight (cycles/fetch/transfers.py)."""
        return self.transfers.active

    # --- set-up -----------------------------------------------------------------------
    def load(self) -> None:
        """Read the partition's fetch list (less what a killed run or the segment before
        fetched), open its output and set up a slot per host."""
        items, done, next_chunk = self._read_fetch_list()
        self._open_output(len(items), next_chunk)
        self._set_up_slots(items)

    def _read_fetch_list(self) -> tuple[list[FetchItem], set[str], int]:
        """The fetch list's items still to fetch, the URLs a killed run fetched, and the
        output's next chunk number; on a resumed run, the killed run's host rows carried."""
        rows = self.store.read_table(seg.fetchlist_file(self.seg_dir, self.partition)).to_pylist()
        items = [FetchItem.from_row(row) for row in rows]
        done, next_chunk = resume_state(self.store, self.seg_dir, self.partition)
        resumed = (self.resumed or bool(done)
                   or self.store.exists(seg.hosts_file(self.seg_dir, self.partition)))
        self.stats["fetch/resumed_skipped"] += len(done)
        self.inline.partitions = self._partition_count()
        listed = {i.url for i in items}
        # With done: a URL an earlier run of this partition fetched inline has its row already.
        self.inline.listed_urls = listed | done
        self.inline.own_hosts = {i.host for i in items}
        self.hosts.resumed = resumed
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
        kept = [i for i in items if i.url not in done and i.url not in fetched_meanwhile]
        self.stats["fetch/fetched_before"] += sum(1 for i in items if i.url not in done) - len(kept)
        self.discovery.load(len(listed) * self.fc.outlink_bloom_links_per_page,
                            [(url, url_host(url)) for url in done - listed])
        self.discovery.add_fetched_before(earlier)
        self.discovery.fits = lambda slot: fits_before(slot, time.monotonic(), self.deadline)
        if self.discovery.enabled and self.fc.follow_new_hosts:
            self.new_hosts.load()
            self.inline.new_hosts = self.new_hosts
        return kept, done, next_chunk

    def _open_output(self, items: int, next_chunk: int) -> None:
        """The partition's output (chunks, WARC), its archive policy and the steps writing to it."""
        bloom = None
        if self.fc.outlink_bloom_fp > 0:
            bloom = BloomFilter(max(100_000, items * self.fc.outlink_bloom_links_per_page), self.fc.outlink_bloom_fp)
        self.output = PartitionOutput(self.store, self.segment, self.seg_dir, self.partition,
                                      next_chunk, self.fc.user_agent, self.fc.warc_gzip_level, bloom,
                                      flush_bytes=self.fc.flush_bytes, warc_prefix=self.config.warc.file_prefix,
                                      warcinfo=warcinfo_fields(self.config))
        self.archive = Archive(self.output, self.config.warc)
        self.hosts.rows = rows = Rows(self.output, self.stats)
        self.results = Results(self.fc, self.stats, self.hosts, rows, self.output, self.archive, self.pages)

    def _set_up_slots(self, items: list[FetchItem]) -> None:
        """A slot per host, its URLs queued, its state from the host DB, on the heap."""
        states = load_host_state(self.store, {i.host for i in items}, self.segment)
        now_mono, now_wall = time.monotonic(), time.time()
        for item in items:
            self.frontier.slot(item.host).queue.append(item)
        # Each slot is set up once its URLs are queued: a host set aside on the spot (a
        # cached robots.txt error) defers them all; set up before, the URLs queued after
        # it were never fetched nor written.
        for slot in self.frontier.slots.values():
            self.hosts.init_slot(slot, slot.queue[0].url, states.get(slot.host), now_mono, now_wall)
        self.frontier.restore_gates(now_mono, now_wall)
        for slot in self.frontier.slots.values():
            self.hosts.set_aside_if_far(slot, now_mono)
            self.frontier.schedule(slot)
        self.transfers.size_connection_cache(len(self.frontier.slots))

    def _partition_count(self) -> int:
        """Partitions of the segment, from generate's marker (else its fetch list files);
        the marker's planned length goes to :attr:`planned_s`."""
        marker = seg.read_marker(self.store, self.segment, seg.Generated)
        self.planned_s = marker.planned_s if marker is not None else None
        listed = len(seg.partitions_of(self.store, self.segment))
        return max(1, int((marker.partitions if marker else 0) or listed))

    # --- the loop -----------------------------------------------------------------------
    def run(self) -> None:
        if self.parent_pid is not None:  # a pool worker: see keep_memory_mapped
            keep_memory_mapped()
            freeze_loaded_objects()
        self.meter.started = started = time.monotonic()
        limit = self.fc.max_duration_s if self.fc.max_duration_s > 0 else (self.planned_s or 0.0)
        self.ending = EndWatch(self.fc, limit, started, self.stats, self.progress_path.parent)
        self.deadline = self.ending.deadline
        self._stopping_at: float | None = None
        self._handed_back = False
        self._ended_at: float | None = None
        while self._turn():
            pass
        self.flush()

    def _turn(self) -> bool:
        """One pass of the loop; False once the partition is done."""
        now = time.monotonic()
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            # The `crawl fetch` that started us is gone (kill -9): stop at once, without
            # committing, so a resumed run never shares this partition with us.
            os._exit(3)
        if not self._going_on(now):
            return False
        self.hosts.dns_answered()
        while self._stopping_at is None and not self._handed_back and len(self.active) < self.fc.max_in_flight:
            slot = self.frontier.pop_ready(now)
            if slot is None:
                break
            if not self.hosts.dns_ready(slot, time.time()):
                continue  # back on the heap when its lookup answers
            request = self.hosts.next_request(slot)
            if request is not None:
                self.transfers.start(slot, request)
        self._drain()
        return self._wait()

    def _going_on(self, now: float) -> bool:
        """The stop signal, the progress file and the end rules (cycles/fetch/tail.py);
        False once the partition is to stop."""
        if self.stop_signal() is not None and self._stopping_at is None:
            # SIGTERM/SIGINT (Airflow, systemd, Kubernetes): start nothing new, let the
            # transfers in flight end, commit what was fetched (up to flush_s of pages
            # were lost otherwise) and leave the rest to a resumed run.
            self._stopping_at = now
            self.stats["fetch/interrupted"] = 1
        if self._stopping_at is not None and (not self.active or now - self._stopping_at > STOP_GRACE_S):
            return False
        if self.fc.progress_s > 0 and now - self.meter.last_published >= self.fc.progress_s:
            self.publish_progress(now)
        if not self._handed_back and self.ending.ended(self.frontier.slots.values(), now):
            self._handed_back = True
            self.hand_back.queued()
        if not self._handed_back:
            return True
        if self.active:
            self._ended_at = now if self._ended_at is None else self._ended_at
            if now - self._ended_at > END_GRACE_S:
                self._drain()  # responses that came while the loop was busy are kept
                self.hand_back.in_flight()
        if not self.active:
            self.hand_back.queued()  # what the last responses queued (redirects, discoveries)
            return False
        return True

    def _wait(self) -> bool:
        """Wait for a transfer or the next host's turn; False when nothing is left to do."""
        wait = self.frontier.seconds_to_next(time.monotonic())
        if not self.active and wait is None and not self.dns.pending:
            return False
        timeout = min(1.0, wait if wait is not None else 1.0)
        if self.dns.pending:
            # A lookup's end does not wake select(2): look again soon (a lookup takes
            # 10-200 ms on the real web; 5 ms of extra wait is within its noise).
            timeout = min(timeout, DNS_POLL_S)
        if self.active:
            self.transfers.select(timeout, lambda: self.stop_signal() is not None)
            self._drain()
        elif timeout > 0:
            time.sleep(timeout)
        if self.output.due(self.fc.flush_s, self.fc.flush_pages):
            self.flush()
        return True

    def _drain(self) -> None:
        self.transfers.drain(self._finish)

    def _finish(self, curl, error: tuple[int, str] | None, ended: float, ended_wall: float) -> None:
        """A finished transfer through its steps: TLS observed, routed by its outcome
        (cycles/fetch/results.py), then its host's spacing, and the host back on the heap."""
        transfer, slot = self.transfers.ended(curl, error, ended, ended_wall)
        tls_reason = self.tls.observe(curl, transfer.request.url, error)
        if error is None and transfer.request.url[:6].lower() == "https:":
            self.tls.succeeded(slot.host, transfer.tls_unverified is not None, wall(ended_wall))
        self.results.route(slot, transfer, error, tls_reason)
        self.hosts.after_response(slot, transfer)
        self.transfers.release(curl)
        self.frontier.schedule(slot)

    def _finish_page(self, slot: HostSlot, transfer: Transfer, error: tuple[int, str] | None, curl) -> None:
        """A page response through classify and its steps, without the loop (the replay of
        scripts/bench_fetch.py drives the per-page path through this)."""
        self.results.route(slot, transfer, error, None)

    # --- ending -------------------------------------------------------------------------
    def write_leftover(self) -> None:
        """The partition's leftover file (cycles/fetch/handback.py)."""
        self.hand_back.write(self.store, self.seg_dir, self.partition)

    # --- output and progress ------------------------------------------------------------
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
        self.meter.publish(now)

    def count_idle(self) -> None:
        self.meter.count_idle()

    def allowed_requests(self, now: float) -> float:
        """Requests this partition's hosts' delays allowed since :meth:`run` started (cycles/fetch/meter.py)."""
        return self.meter.allowed_requests(now)

    def write_hosts(self) -> None:
        table = pa.Table.from_pylist(self.hosts.host_rows(), schema=schema.HOSTS)
        if self.carried_hosts is not None:  # a host's rows are merged by their readers (hostdb.MERGE_SQL)
            table = pa.concat_tables([self.carried_hosts, table])
        self.store.write_table(seg.hosts_file(self.seg_dir, self.partition), table, schema.HOSTS)

    def close(self) -> None:
        self.dns.close()
        self.output.close()
        self.transfers.close()
