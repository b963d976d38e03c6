"""Named errors, and the exit codes the ``crawl`` command ends with.

Messages say what went wrong, where (stage, segment, file) and how to repair it. The CLI
(cycles/commands/cli.py, ``EXIT_CODES``) turns every exception into one line on stderr and one of
these exit codes:

====  =====================  =====================================================================
code  name                   meaning
====  =====================  =====================================================================
0     EXIT_OK                done
1     EXIT_FAILURE           failed: an internal error (a bug: the traceback is saved to a file
                             whose path the line names, or printed with ``crawl --debug``) or
                             the machine failed it (disk full, I/O error); run it again once fixed
2     EXIT_USER_ERROR        bad arguments, config or store state the user must fix (the line
                             says how): no crawl DB, unknown segment, corrupt file, lock held
3     EXIT_NOTHING_TO_DO     nothing to do: no URL due (or the crawl is held by a lagging feed
                             consumer), no fetched segment to update, no new pages for a consumer
4     EXIT_INTERRUPTED       interrupted (SIGTERM, Ctrl-C) before finishing; nothing half-written
                             was installed, run the same command again to resume
====  =====================  =====================================================================
"""

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USER_ERROR = 2
EXIT_NOTHING_TO_DO = 3
EXIT_INTERRUPTED = 4

DAMAGED_PARQUET_SIGNS = ("Failed to read file", "TProtocolException", "Decompression", "Corrupt", "corrupt",
                         "Invalid data", "magic bytes", "checksum")
"""How a damaged Parquet file (a flipped bit, a truncated page) shows in DuckDB's errors,
which do not always name the file; the CLI then names it and the repair."""


def is_damaged_parquet(message: str) -> bool:
    return any(sign in message for sign in DAMAGED_PARQUET_SIGNS)


class CrawlError(Exception):
    """Base class of every error the crawler raises on purpose (exit code 2 unless a
    subclass below says otherwise)."""


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


class NothingToDo(CrawlError):
    """The command had nothing to do (exit code 3): scripts and schedulers can tell an idle
    run from a failed one."""


class Interrupted(CrawlError):
    """A stage stopped early on request (SIGTERM, Ctrl-C) and left only resumable state
    (exit code 4): running the same command again continues where it stopped."""


class FetchInterrupted(Interrupted):
    """Fetch stopped on SIGTERM/SIGINT after committing what it had fetched (exit code 4):
    ``crawl fetch SEGMENT`` resumes it."""
