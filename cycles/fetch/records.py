"""The record a URL to fetch travels as inside the fetch worker.

A :class:`FetchItem` is made from a fetch list row (``schema.FETCHLIST``), a redirect target
(cycles/fetch/redirects.py) or a link discovery queued (cycles/fetch/discovery.py). It waits
in its host's queue (cycles/fetch/frontier.py), rides on its page's request
(cycles/fetch/transfer.py ``Request.item``), gives the fetched row its url and host
(cycles/fetch/rows.py) and, when the partition ends before reaching a discovered one, its
leftover row (cycles/fetch/handback.py). The files keep their schemas: only the worker's
in-memory record is typed.

The other records of the worker: ``Request`` (cycles/fetch/transfer.py), ``Response`` and
``Outcome`` (cycles/fetch/classify.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from cycles.tables import schema


@dataclass(slots=True)
class FetchItem:
    """One URL to fetch (module doc)."""

    url: str
    host: str
    host_hash: int
    """cycles.urls.host_hash(host)."""
    score: float | None
    """Priority (generate's; discovery's 1 / (depth + 1); a redirect target keeps its source's)."""
    depth: int
    """Link hops from a seed."""
    etag: str | None = None
    """Validators of the stored copy, sent as If-None-Match / If-Modified-Since (a fetch list row's)."""
    last_modified: str | None = None
    hop: int | None = None
    """Discovery hops since the host's entry (cycles/fetch/discovery.py); None on a fetch list row."""
    redirect_chain: tuple[str, ...] | None = None
    """A redirect target's chain from the URL that started it, itself last (cycles/fetch/redirects.py)."""

    @classmethod
    def from_row(cls, row: dict) -> FetchItem:
        """The item of a fetch list row (``schema.FETCHLIST``'s columns)."""
        return cls(row["url"], row["host"], row["host_hash"], row["score"], row["depth"], row["etag"],
                   row["last_modified"])

    @property
    def discovered(self) -> bool:
        """Queued by discovery (not a fetch list row, not a redirect target)."""
        return self.hop is not None and self.redirect_chain is None

    def leftover_row(self) -> dict:
        """Its ``schema.LEFTOVER`` row."""
        return {name: getattr(self, name) for name in schema.LEFTOVER.names}
