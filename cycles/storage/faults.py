"""Fault injection at commit points: the test suite's way of killing a stage exactly where it hurts.

A *commit point* is the moment a file that matters becomes visible: the rename (or the PUT
on S3) of a Parquet file, a WARC chunk, a marker, ``CURRENT``. :class:`cycles.storage.store.Store`
calls :func:`commit_point` just before each one. Normally that costs one dictionary lookup.

With ``CRAWL_FAULT_LOG=<file>`` set, every commit point appends a line (pid and path) to that
file, so a test can count the commit points of a run. With ``CRAWL_FAULT_KILL_AT=N`` as well,
the process that reaches the N-th commit point (counted over every process sharing the log
file: a stage and its pool workers) kills itself with SIGKILL before making the file visible
— what ``kill -9``, the OOM killer or a lost machine would do at that instant. The test then
checks that the store is still consistent and that running the stage again completes.

Timers cannot do this: a kill "after 2 seconds" lands wherever the machine's load puts it,
and the dangerous instants (between a file and the marker naming it, between the last
bucket and ``CURRENT``) are a few microseconds wide.
"""

from __future__ import annotations

import fcntl
import os
import signal

LOG_ENV = "CRAWL_FAULT_LOG"
KILL_AT_ENV = "CRAWL_FAULT_KILL_AT"
KILL_MATCH_ENV = "CRAWL_FAULT_KILL_MATCH"
"""With this set, ``CRAWL_FAULT_KILL_AT`` counts only the commit points whose path contains
it (``/fetched/``: a fetch chunk; ``/crawldb/``: an update bucket), so a test can kill a
cluster worker in one stage wherever the scheduler placed that stage's tasks."""
SIGNAL_ENV = "CRAWL_FAULT_SIGNAL"
"""``STOP`` instead of the default ``KILL``: the process freezes at that commit point, holding
its locks, so a test can run another stage against it (tests/test_compact.py), then SIGCONT it."""


def commit_point(path: object) -> None:
    """Called by the store just before ``path`` is made visible (renamed or uploaded)."""
    log = os.environ.get(LOG_ENV)
    if not log:
        return
    kill_at = int(os.environ.get(KILL_AT_ENV) or 0)
    with open(log, "a+") as fh:
        # One lock for the count and the append: pool workers reach commit points at once.
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        match = os.environ.get(KILL_MATCH_ENV)
        if match and match not in str(path):
            reached = -1  # not a point this kill counts
        else:
            reached = sum(1 for line in fh if not match or match in line) + 1
        fh.write(f"{os.getpid()}\t{path}\n")
        fh.flush()
        if reached == kill_at:
            os.fsync(fh.fileno())
            os.kill(os.getpid(), getattr(signal, "SIG" + (os.environ.get(SIGNAL_ENV) or "KILL")))
