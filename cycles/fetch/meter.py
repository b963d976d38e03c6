"""A partition's running figures: the progress file its parent reads, and the politeness budget.

:class:`Meter` writes the counters so far to the partition's progress file every
``fetch.progress_s`` (the parent sums them: cycles/fetch/fetch.py), with the hosts in flight
and waiting, the frontier's idle-with-work figures and the requests the hosts' delays
allowed since the loop started (cycles/metrics.py: politeness utilisation).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from cycles.fetch.frontier import Frontier
from cycles.fetch.transfers import Transfers
from cycles.metrics import allowed_requests
from cycles.storage.durable import write_file_atomically


class Meter:
    """The figures of one partition's fetch (module doc)."""

    def __init__(self, partition: int, stats: Counter, frontier: Frontier, transfers: Transfers, path: Path):
        self.partition = partition
        self.stats = stats
        self.frontier = frontier
        self.transfers = transfers
        self.path = path
        self.last_published = 0.0
        self.started: float | None = None
        """When the loop started (monotonic): the politeness budget counts from here."""

    def publish(self, now: float) -> None:
        """Counters so far, for the parent's progress display (a small JSON file, replaced)."""
        self.last_published = now
        active = len(self.transfers.active)
        waiting = self.frontier.waiting_hosts()
        self.stats["fetch/hosts_waiting_peak"] = max(self.stats["fetch/hosts_waiting_peak"], waiting)
        self.count_idle()
        counters = {**self.stats, "fetch/allowed_requests": self.allowed_requests(now)}
        data = {"partition": self.partition, "time": time.time(), "hosts_active": active,
                "hosts_waiting": waiting, "counters": counters}
        # Rewritten every second and read only while the fetch runs: whole or absent, no fsync.
        write_file_atomically(self.path, json.dumps(data), durable=False)

    def count_idle(self) -> None:
        """The frontier's idle-with-work figures into the stats (always, 0 too: a dashboard
        reads the series whether or not a stall happened)."""
        self.stats["fetch/idle_with_work_s"] = round(self.frontier.idle_with_work_s, 3)
        self.stats["fetch/idle_with_work_requests"] = round(self.frontier.idle_with_work_requests, 3)

    def allowed_requests(self, now: float) -> float:
        """Requests this partition's hosts' delays allowed since the loop started
        (cycles/metrics.py: the denominator of politeness utilisation)."""
        elapsed = now - self.started if self.started is not None else 0.0
        return round(allowed_requests((s.delay_s for s in self.frontier.slots.values()), elapsed), 1)
