"""May this URL be fetched inline, in this partition, in this segment? — the one home of the rule.

Two steps fetch URLs that are not in the fetch list: redirects (cycles/fetch/redirects.py)
and discovery (cycles/fetch/discovery.py). Both ask :class:`InlineFetches`:

- :meth:`~InlineFetches.prepare`: the URL as update would store it — normalised and passing
  the URL filters (cycles/urls.py, the functions update's outlink preparation uses), else None;
- :meth:`~InlineFetches.owns`: is the host this worker's? A host of this partition's fetch
  list is; any other host is the partition the segment's assignment gives it
  (cycles/tables/assign.py :class:`~cycles.tables.assign.Assignment`: its slot key's
  named row, else its key's hash group's), one partition per host whether it is in a
  fetch list or not, so exactly one worker may take it up. With ``generate.partition_by`` =
  domain or ip the hosts sharing a slot key (cycles/slotkey.py) get the same answer, so two
  workers never ask one server at once. A segment without an assignment file (made by
  hand) uses ``host_hash(key) % partitions``. A host the crawl DB does not know at all
  (generate's known-hosts filter) is instead the worker's that claims it first, across
  partitions and segments in flight (:meth:`~InlineFetches.take_new_host`, cycles/tables/newhosts.py);
- :meth:`~InlineFetches.claim`: a URL is fetched at most once a segment. Every URL of the
  fetch list, every URL committed by an earlier run of the partition and every URL claimed
  inline is in :attr:`~InlineFetches.listed_urls`; a second claim (another path to the
  same URL, another spelling of it) is refused.
"""

from __future__ import annotations

from cycles.config import Config
from cycles.tables.newhosts import NewHosts
from cycles.tables.assign import Assignment
from cycles.storage.store import Store, StorePath
from cycles.urls import Normalizer, UrlFilter


class InlineFetches:
    """The URLs one partition has or will have a row for, and which hosts it owns."""

    def __init__(self, store: Store, config: Config, seg_dir: StorePath, partition: int):
        self.store = store
        self.seg_dir = seg_dir
        self.partition = partition
        self.partitions = 1
        """How many partitions generate made (set by the worker from the Generated marker)."""
        self.config = config
        self.normalizer = Normalizer(config.urls)
        self.url_filter = UrlFilter(config.urls)
        self.listed_urls: set[str] = set()
        """URLs of the fetch list, committed by earlier runs, or claimed inline: each gets one row."""
        self.own_hosts: set[str] = set()
        """The hosts of this partition's fetch list."""
        self._assignment: Assignment | None = None
        self.new_hosts: NewHosts | None = None
        """Claims of hosts nobody knows (set by the worker; None: no new host is taken)."""

    def prepare(self, url: str) -> str | None:
        """``url`` normalised, if the URL filters keep it (None: update would drop it too)."""
        norm = self.normalizer.normalize(url)
        if norm is None or self.url_filter.reason(norm):
            return None
        return norm

    def owns(self, host: str) -> bool:
        if host in self.own_hosts:
            return True
        if self.new_hosts is not None and self.new_hosts.is_new(host) and self.config.generate.partition_by == "host":
            # Nobody knows it: ours only by claim, so no other worker — of this segment
            # or of another in flight — fetches it too.
            return self.take_new_host(host)
        if self.partitions <= 1:
            return True
        return self.assignment().partition_of(host) == self.partition

    def take_new_host(self, host: str) -> bool:
        """Claim ``host``, which the crawl DB does not know, for this partition (then it is
        one of :attr:`own_hosts`); False when it is known or another worker has it."""
        if self.new_hosts is None or not self.new_hosts.is_new(host):
            return False
        if self.config.generate.partition_by != "host":
            # A claim is per host name, and hosts sharing a server must share one worker:
            # with partition_by = domain | ip a new host waits for generate to place it.
            return False
        if not self.new_hosts.claim(host):
            return False
        self.own_hosts.add(host)
        return True

    def assignment(self) -> Assignment:
        """The segment's assignment (read once, after :attr:`partitions` is set)."""
        if self._assignment is None:
            self._assignment = Assignment.read(self.store, self.seg_dir, self.config, self.partitions)
        return self._assignment

    def claim(self, url: str) -> bool:
        """Take ``url`` for an inline fetch; False when this segment already has (or will
        have) a row for it."""
        if url in self.listed_urls:
            return False
        self.listed_urls.add(url)
        return True
