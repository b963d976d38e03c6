"""Named errors. The CLI turns each into a clear message and a non-zero exit code.

Messages say what went wrong, where (stage, segment, file) and how to repair it.
"""


class CrawlError(Exception):
    """Base class of every error the crawler raises on purpose."""


class ConfigError(CrawlError):
    """The configuration is invalid."""


class StoreError(CrawlError):
    """A file of the store is missing, unreadable or corrupt."""


class SegmentNotFound(CrawlError):
    """A command named a segment that does not exist."""


class StageError(CrawlError):
    """A stage cannot run in the current state (e.g. update before fetch)."""


class LockedError(CrawlError):
    """Another process holds the crawl DB lock."""


class FetchInterrupted(CrawlError):
    """Fetch stopped on SIGTERM/SIGINT after committing what it fetched; resumable."""

    exit_code = 75
    """EX_TEMPFAIL (sysexits.h): stopped on request, run the same command again to resume.
    Distinct from 2 (an error to fix) so a supervisor can tell the two apart."""
