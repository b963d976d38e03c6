"""The transfers in flight of one partition: the libcurl multi handle, its easy handles, its caches.

:class:`Transfers` starts a request on a free easy handle (cycles/fetch/transfer.py sets its
options), hands each finished one to the caller with one timestamp per batch, waits in
select(2), and cuts what is still running when a partition ends early. Handles are reused
(``reset`` keeps the share), connections are kept per host between its requests.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable, Iterator

import pycurl

from cycles.config import FetchConfig
from cycles.fetch.dns import Resolver
from cycles.fetch.frontier import Frontier, HostSlot
from cycles.fetch.tls import TlsSteps
from cycles.fetch.transfer import Request, Transfer, configure, resolve_entries
from cycles.urls import url_host

Finish = Callable[[pycurl.Curl, "tuple[int, str] | None", float, float], None]
"""Called for each finished transfer: (handle, libcurl error or None, ended monotonic, ended wall)."""


class Transfers:
    """The multi handle and the transfers in flight (module doc)."""

    def __init__(self, fc: FetchConfig, stats: Counter, frontier: Frontier, tls: TlsSteps, dns: Resolver):
        self.fc = fc
        self.stats = stats
        self.frontier = frontier
        self.tls = tls
        self.dns = dns
        self.multi = pycurl.CurlMulti()
        # One DNS cache and TLS session cache for every transfer of this worker. Connections
        # stay in the multi handle's pool (sized by M_MAXCONNECTS below), where libcurl
        # reuses one per host; a share-level connection pool would ignore that size.
        self.share = pycurl.CurlShare()
        self.share.setopt(pycurl.SH_SHARE, pycurl.LOCK_DATA_DNS)
        self.share.setopt(pycurl.SH_SHARE, pycurl.LOCK_DATA_SSL_SESSION)
        self.free: list[pycurl.Curl] = []
        self.active: dict[pycurl.Curl, tuple[Transfer, HostSlot]] = {}

    def size_connection_cache(self, hosts: int) -> None:
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

    def _new_handle(self) -> pycurl.Curl:
        curl = pycurl.Curl()
        curl.setopt(pycurl.SHARE, self.share)  # kept through reset(): set once per handle
        return curl

    def start(self, slot: HostSlot, request: Request) -> None:
        """Start the slot's request (the slot is in flight until it finishes)."""
        curl = self.free.pop() if self.free else self._new_handle()
        max_bytes = {"robots": self.fc.max_robots_bytes,
                     "sitemap": self.fc.sitemap_max_bytes}.get(request.kind, self.fc.max_page_bytes)
        transfer = Transfer(request, self.fc, max_bytes)
        transfer.tls_unverified = self.tls.unverified_for(slot.host)
        if transfer.tls_unverified is not None:
            self.stats["tls/unverified"] += 1  # fetch.tls_archive_anyway: asked without verifying
        pinned = resolve_entries(request.url, self.fc.resolve) or self.dns.curl_entries(request.url, url_host(request.url))
        configure(curl, transfer, self.fc, pinned)
        # A name libcurl looks up itself (an /etc/hosts name; no resolv.conf) is kept once a
        # cycle, not a minute (its default). A pinned name is not looked up, and -1 spares the
        # transfer libcurl's prune of its DNS cache when it ends: a walk of every entry, one
        # per host pinned (~3,000 in bench_fetch --real-web), ~3 % of a worker's CPU in py-spy.
        curl.setopt(pycurl.DNS_CACHE_TIMEOUT, -1 if pinned else self.fc.dns_cache_s)
        self.frontier.started(slot)
        self.active[curl] = (transfer, slot)
        self.multi.add_handle(curl)
        self.stats["fetch/requests"] += 1

    def ended(self, curl: pycurl.Curl, error: tuple[int, str] | None, ended: float,
              ended_wall: float) -> tuple[Transfer, HostSlot]:
        """Take a finished transfer off the multi handle, with libcurl's figures of it; its
        slot is no longer in flight."""
        transfer, slot = self.active.pop(curl)
        self.multi.remove_handle(curl)
        transfer.ended = ended
        # libcurl's own timer: our `ended` is when we got round to the transfer, which
        # includes parsing the pages that completed alongside it.
        transfer.duration_s = curl.getinfo(pycurl.TOTAL_TIME)
        transfer.setup_s = curl.getinfo(pycurl.PRETRANSFER_TIME)
        transfer.ip = curl.getinfo(pycurl.PRIMARY_IP) or None
        transfer.error = error[0] if error is not None else None
        slot.in_flight = False
        slot.last_request_end_wall = ended_wall
        return transfer, slot

    def release(self, curl: pycurl.Curl) -> None:
        """The handle back to the free list, its options reset (the share stays)."""
        curl.reset()
        self.free.append(curl)

    def drain(self, finish: Finish) -> None:
        """Let libcurl work, then hand each finished transfer to ``finish``."""
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
                finish(curl, None, ended, ended_wall)
            for curl, errno, message in failed:
                finish(curl, (errno, message), ended, ended_wall)
            if not queued:
                break

    def select(self, timeout: float, interrupted: Callable[[], bool]) -> None:
        """Wait for a transfer's socket, at most ``timeout`` seconds; a select(2) the stop
        signal interrupted returns quietly (``interrupted()`` says whether it came)."""
        try:
            self.multi.select(max(timeout, 0.001))
        except pycurl.error:
            if not interrupted():
                raise

    def cut(self) -> Iterator[tuple[Transfer, HostSlot]]:
        """End every transfer still in flight, yielding each (its slot no longer in flight)."""
        for curl, (transfer, slot) in list(self.active.items()):
            self.multi.remove_handle(curl)
            del self.active[curl]
            slot.in_flight = False
            yield transfer, slot
            self.release(curl)

    def close(self) -> None:
        for curl in list(self.active):
            self.multi.remove_handle(curl)
        self.multi.close()
