"""cycles/update/sitemaps.py: what a sitemap's lastmod, changefreq and priority do to a
bucket's rows, as a matrix of old row × hint → new row (DuckDB, no crawl)."""

from __future__ import annotations

import datetime as dt

import duckdb
import pyarrow as pa
import pytest

from cycles.config import Config
from cycles.update.sitemaps import HINTS, hinted_sql, lastmod_due_count

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 1, 10, tzinfo=UTC)
DAY = dt.timedelta(days=1)
LATER = NOW + 5 * DAY

ROWS = pa.schema([("url", pa.string()), ("status", pa.string()), ("first_seen", pa.timestamp("us", tz="UTC")),
                  ("last_fetched", pa.timestamp("us", tz="UTC")), ("next_fetch", pa.timestamp("us", tz="UTC")),
                  ("fetch_interval_s", pa.int32()), ("score", pa.float32()), ("f_outcome", pa.string())])


def row(url, status="fetched", first_seen=NOW - 9 * DAY, last_fetched=NOW - 3 * DAY, f_outcome=None):
    return {"url": url, "status": status, "first_seen": first_seen, "last_fetched": last_fetched,
            "next_fetch": LATER, "fetch_interval_s": 1000, "score": 0.5, "f_outcome": f_outcome}


def hint(url, lastmod=None, changefreq_s=None, priority=None):
    return {"url": url, "host": "a.test", "host_hash": 1, "lastmod": lastmod, "changefreq_s": changefreq_s,
            "priority": priority}


CASES = [
    # (old row, hint, expected (next_fetch, fetch_interval_s, score))
    (row("changed"), hint("changed", lastmod=NOW - DAY), (NOW, 1000, 0.5)),
    (row("unchanged"), hint("unchanged", lastmod=NOW - 5 * DAY), (LATER, 1000, 0.5)),
    (row("fetched-now", f_outcome="ok"), hint("fetched-now", lastmod=NOW - DAY), (LATER, 1000, 0.5)),
    (row("gone", status="gone"), hint("gone", lastmod=NOW - DAY), (LATER, 1000, 0.5)),
    (row("never", status="unfetched", last_fetched=None), hint("never", lastmod=NOW - DAY), (LATER, 1000, 0.5)),
    (row("new", status="unfetched", first_seen=NOW, last_fetched=None),
     hint("new", changefreq_s=86_400, priority=0.9), (LATER, 86_400, 0.7)),
    (row("new-always", status="unfetched", first_seen=NOW, last_fetched=None),
     hint("new-always", changefreq_s=0), (LATER, Config().update.min_interval_s, 0.5)),
    (row("old", status="unfetched", last_fetched=None), hint("old", changefreq_s=86_400, priority=1.0),
     (LATER, 1000, 0.5)),  # hints only when a URL is added: a re-read never compounds
    (row("no-hint"), None, (LATER, 1000, 0.5)),
]


@pytest.mark.parametrize("old, given, expected", CASES, ids=[c[0]["url"] for c in CASES])
def test_hint_matrix(old, given, expected):
    con = duckdb.connect()
    con.register("rows", pa.Table.from_pylist([old], schema=ROWS))
    con.register("hints", pa.Table.from_pylist([given] if given else [], schema=HINTS))
    sql = hinted_sql("SELECT * FROM rows", "hints", Config())
    got = con.execute(f"SELECT next_fetch, fetch_interval_s, score FROM ({sql})", {"now": NOW}).fetchone()
    assert (got[0], got[1], pytest.approx(got[2])) == (expected[0], expected[1], pytest.approx(expected[2]))


def test_lastmod_due_counts_only_what_it_moves():
    con = duckdb.connect()
    old = [row("changed"), row("unchanged"), row("gone", status="gone"), row("fetched-now")]
    con.register("old", pa.Table.from_pylist(old, schema=ROWS))
    # Every row gets a lastmod newer than its last fetch: only the two fetched rows not
    # fetched again in this segment are moved (a gone URL keeps its own schedule).
    con.register("hints", pa.Table.from_pylist([hint(r["url"], lastmod=NOW - DAY) for r in old], schema=HINTS))
    con.register("fetched", pa.table({"url": ["fetched-now"]}))
    assert lastmod_due_count(con, "old", "hints", "fetched", NOW) == 2
