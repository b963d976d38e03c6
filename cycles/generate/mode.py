"""How a segment is to be generated: ``crawl generate`` and ``crawl cycle`` take the defaults,
``crawl run`` (cycles/commands/run.py) overlaps segments and says so here (issue 25: one
object instead of four keyword flags on :func:`cycles.generate.generate.generate`)."""

from __future__ import annotations

from dataclasses import dataclass

from cycles.config import Config


@dataclass(frozen=True)
class RunMode:
    """The segment's mode: which hosts and URLs it may take, and its planned length."""

    exclude_hosts_in_flight: bool = False
    """Leave out every host of a segment generated or being fetched, not only its URLs, so
    this segment can be fetched while (or right after) those are without a host in two
    fetch lists at once (two fetches of one host would break its spacing)."""
    continuing: str | None = None
    """With ``exclude_hosts_in_flight``: the segment being fetched, after which this one is
    fetched. Its hosts are not left out, so a busy host goes on at once in the next segment
    (cycles/tables/leases.py ``continuing_lease``)."""
    leftovers: bool = False
    """The URLs fetched segments queued by discovery and did not reach are candidates too
    (``crawl run`` before an update, when nothing else is due)."""
    segment_s: float | None = None
    """The segment's planned length; None: ``generate.segment_s``. Each host's share fits
    it, and the fetch ends there (written in the generated marker)."""

    def planned_s(self, config: Config) -> float:
        """The planned length in seconds (0: no time budget)."""
        return config.generate.segment_s if self.segment_s is None else self.segment_s

    @classmethod
    def overlapped(cls, segment_s: float, continuing: str | None = None, leftovers: bool = False) -> RunMode:
        """``crawl run``'s mode: hosts in flight left out, its own planned length."""
        return cls(exclude_hosts_in_flight=True, continuing=continuing, leftovers=leftovers, segment_s=segment_s)
