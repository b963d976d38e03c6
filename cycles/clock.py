"""The crawl's notion of "now" for scheduling data (fetch times, due times, leases, robots.txt cache ages).

It is the real UTC time, unless ``CRAWL_CLOCK_OFFSET_S`` is set in the environment: then
it is shifted by that many seconds. Simulations and tests use the offset to replay days
of recrawling in minutes (the test web has a matching virtual clock). Politeness never
uses this clock: delays run on the monotonic clock, and the per-host "last request" time
persisted between cycles is real wall time, so a simulated jump forward can never let a
request through early.
"""

from __future__ import annotations

import datetime as dt
import os

OFFSET_ENV = "CRAWL_CLOCK_OFFSET_S"


def offset_s() -> float:
    value = os.environ.get(OFFSET_ENV)
    return float(value) if value else 0.0


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=offset_s())
