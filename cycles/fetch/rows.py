"""The fetched rows of one partition: built in one place, each counted by its outcome.

Every row a partition writes (``schema.FETCHED``; cycles/fetch/output.py buffers and commits
them) goes through :meth:`Rows.add`, which counts it in ``fetch/outcome/<outcome>``; a host
set aside, refused or backed off writes its whole queue through :meth:`Rows.drain`.
"""

from __future__ import annotations

from collections import Counter

from cycles.fetch.frontier import HostSlot
from cycles.fetch.output import PartitionOutput
from cycles.fetch.records import FetchItem
from cycles.tables import schema

_EMPTY_ROW = dict.fromkeys(schema.FETCHED.names)
"""A fetched row with every column None, copied for each row (pyarrow builds the list of
``schema.FETCHED.names`` anew at each access)."""


def row(item: FetchItem, outcome: str, **values) -> dict:
    """The fetched row of a fetch list item (its url and host) with these columns set."""
    fetched = _EMPTY_ROW.copy()
    fetched.update(url=item.url, host=item.host, outcome=outcome, **values)
    return fetched


class Rows:
    """Writes a partition's rows to its output, counting each outcome into ``stats``."""

    def __init__(self, output: PartitionOutput, stats: Counter):
        self.output = output
        self.stats = stats

    def add(self, item: FetchItem, outcome: str, links: list[dict] | None = None, **values) -> None:
        self.stats[f"fetch/outcome/{outcome}"] += 1
        self.output.add(row(item, outcome, **values), links if links is not None else [])

    def drain(self, slot: HostSlot, outcome: str, error: str) -> None:
        """Every URL still queued for the host gets a row with this outcome and error."""
        while slot.queue:
            self.add(slot.queue.popleft(), outcome, error=error)
