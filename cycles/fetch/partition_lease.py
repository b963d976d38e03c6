"""A fetch partition's lease on an S3 store: one run of a partition at a time, across machines.

On a local store a partition's run holds an ``fcntl`` lock file (cycles/fetch/partition.py).
On S3, with partitions running on a cluster (cycles/cluster.py), a retried partition may
start on another machine while the first run is still alive (a worker the scheduler
lost touch with: a *zombie*). Two runs of one partition would ask the same hosts at once,
and politeness is per partition (generate puts every URL of a host in one partition).

So the run holds a lease object, ``fetch/partitions/<segment>/part-NNNNN/.lock``: an
:class:`cycles.storage.store.S3Lock` (created with ``If-None-Match: *``, renewed with ``If-Match``
on its ETag every ``db.s3_lock_renew_s``, lasting ``db.s3_lock_lease_s``). Fencing:

- S3 cannot refuse a zombie's writes to other objects, so a holder fences *itself*: it
  counts its lease valid only for half of ``s3_lock_lease_s`` after its last successful
  write of the lease object (its own monotonic clock). Past that, the run loop stops
  starting requests and commits (:func:`fenced_stop_signal`), and the partition's stats
  file is not written (:meth:`PartitionLease.check`). Another run can take the lease over
  only when it expired (the full ``s3_lock_lease_s`` after that write, by the writer's
  wall clock) or when its holder is a dead process on the same machine; the second half
  of the lease is the margin for the requests in flight (``fetch.timeout_s`` must stay
  well under it) and for clock differences between machines.
- A run that took the lease over (its holder died or stalled) is a resumed run: the
  holder may have asked any host just before, so each host's first request waits a full
  delay after the host's not-before and last-request times (cycles/fetch/politeness.py
  ``restore_spacing``). Those carry over: the fetcher writes its partition's host state
  (``hosts/part-NNNNN.parquet``: last request end, not-before from a Retry-After or a
  back-off) at every chunk commit, and a run reads it with the host DB
  (cycles/tables/hostdb.py ``load_host_state``).
"""

from __future__ import annotations

import signal
import time
from typing import Callable

from cycles.config import DbConfig
from cycles.errors import LockedError
from cycles.storage.store import S3Lock, Store

VALID_SHARE = 0.5
"""The share of ``db.s3_lock_lease_s`` after its last renewal during which a holder still
fetches; the rest is the margin before another run may take the lease over."""


def lease_name(segment: str, partition: int) -> str:
    """The lease's folder in the store (beside the store-wide ``fetch/.lock``)."""
    return f"fetch/partitions/{segment}/part-{partition:05d}"


class PartitionLease:
    """The S3 lease of one partition's run: ``with PartitionLease(...) as lease:``; waits
    while another live run holds it, and takes it over when that run died or its lease expired."""

    def __init__(self, store: Store, segment: str, partition: int, db: DbConfig):
        self.segment, self.partition = segment, partition
        self.lock = S3Lock(store, lease_name(segment, partition), db.s3_lock_lease_s, db.s3_lock_renew_s)
        self.interrupted = False
        """Set when the run stopped before finishing: the lease object is then left behind."""

    def __enter__(self) -> "PartitionLease":
        self.lock.acquire(wait=True)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.interrupted or exc_type is not None:
            self.lock.abandon()  # like the local lock file, it tells the resumed run to wait a full delay
        else:
            self.lock.release()

    @property
    def taken_over(self) -> bool:
        """The lease was taken from an earlier run that died or stalled: this run is a resumed one."""
        return self.lock.took_over

    def valid(self, now_mono: float | None = None) -> bool:
        now_mono = time.monotonic() if now_mono is None else now_mono
        return not self.lock.lost and now_mono < self.lock.renewed_mono + self.lock.lease_s * VALID_SHARE

    def check(self) -> None:
        """Before the partition's final commit (its stats file): refuse if the lease may be another run's."""
        if not self.valid():
            raise LockedError(f"fetch: partition {self.partition} of segment {self.segment} lost its lease "
                              f"({self.lock.uri}: not renewed for over half of db.s3_lock_lease_s, a stalled "
                              f"worker); what it committed is kept; run `crawl fetch {self.segment}` to resume")


def fenced_stop_signal(stop_signal: Callable[[], int | None], lease: PartitionLease) -> Callable[[], int | None]:
    """The fetcher's stop check, also answering SIGTERM once the lease is no longer surely
    ours: the run loop then starts nothing new, commits and stops (cycles/fetch/worker.py)."""
    def check() -> int | None:
        received = stop_signal()
        if received is not None:
            return received
        return None if lease.valid() else signal.SIGTERM
    return check
