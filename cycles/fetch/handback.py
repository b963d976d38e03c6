"""What a partition ending early gives back: the URLs it did not reach, and the transfers it cut.

A partition that ends before its fetch list is done (cycles/fetch/tail.py says when) hands
back every URL not reached, without a row: update leaves its crawl DB row as it was — due —
and the segment's update ends its lease, so the next generate can take it again
(``fetch/handed_back``). Transfers still in flight after the grace are cut the same way
(``fetch/cut_at_end``). A URL discovery queued here has no crawl DB row yet: it goes to the
partition's leftover file (``segment.LEFTOVER``), which ``crawl run`` lists for the fetch
that follows (cycles/generate/generate.py); until this segment's update it is an outlink.
"""

from __future__ import annotations

import time
from collections import Counter

import pyarrow as pa

from cycles.fetch.discovery import Discovery
from cycles.fetch.frontier import Frontier
from cycles.fetch.hosts import HostSteps
from cycles.fetch.records import FetchItem
from cycles.fetch.transfers import Transfers
from cycles.storage.store import Store, StorePath
from cycles.tables import schema
from cycles.tables import segment as seg


class HandBack:
    """The URLs one partition hands back (module doc), counted into ``stats``."""

    def __init__(self, stats: Counter, frontier: Frontier, transfers: Transfers, hosts: HostSteps,
                 discovery: Discovery):
        self.stats = stats
        self.frontier = frontier
        self.transfers = transfers
        self.hosts = hosts
        self.discovery = discovery
        self.leftover: list[FetchItem] = []
        """Discovered URLs queued and not reached when the partition ended."""

    def queued(self) -> None:
        """Every URL still queued goes back (robots.txt requests pending are dropped too)."""
        for slot in self.frontier.slots.values():
            slot.robots.url = None
            self.stats["fetch/handed_back"] += len(slot.queue)
            self.leftover += [i for i in slot.queue if i.discovered]
            slot.queue.clear()

    def in_flight(self) -> None:
        """End every transfer still in flight without a row: its URL goes back like one not
        reached; its host is spaced as after an aborted response (cycles/fetch/hosts.py ``after_cut``)."""
        now, now_wall = time.monotonic(), time.time()
        for transfer, slot in self.transfers.cut():
            self.hosts.after_cut(slot, transfer, now, now_wall)
            if transfer.request.kind == "page":
                self.stats["fetch/handed_back"] += 1
                if transfer.request.item.discovered:
                    self.leftover.append(transfer.request.item)
            self.stats["fetch/cut_at_end"] += 1

    def write(self, store: Store, seg_dir: StorePath, partition: int) -> None:
        """The leftover file: what discovery queued and the partition did not reach, and what
        did not fit the segment's plan (cycles/fetch/discovery.py ``beyond_plan``)."""
        rows = [i.leftover_row() for i in self.leftover + self.discovery.beyond_plan]
        store.write_table(seg.leftover_file(seg_dir, partition),
                          pa.Table.from_pylist(rows, schema=schema.LEFTOVER), schema.LEFTOVER)
