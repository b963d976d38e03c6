"""``crawl status`` and ``crawl sql``: what the store holds, read with DuckDB.

The views (crawldb, hosts, fetchlist, fetched, outlinks, pages, segments) are defined in
cycles/commands/views.py, the one home of their definitions; ``open_views`` and ``require_crawldb``
are imported from there (and importable from here, as before).
"""

from __future__ import annotations

import duckdb

from cycles import clock
from cycles.tables import segment as seg
from cycles.config import Config
from cycles.errors import CrawlError, is_damaged_parquet
from cycles.tables.leases import leased_urls_sql, live_lease_files
from cycles.tables.pages import batches, consumers, feed_lag
from cycles.storage.store import Store
from cycles.update.dedup import dedup_summary, format_dedup
from cycles.commands.views import open_views, require_crawldb

__all__ = ["crawl_status", "format_status", "open_views", "require_crawldb", "run_sql", "sql_text"]


def crawl_status(store: Store, config: Config) -> dict:
    require_crawldb(store)
    manifest = store.manifest("crawldb")
    con = open_views(store, config)  # reads and verifies the bucket files, once
    by_status = dict(con.execute("SELECT status, count(*) FROM crawldb GROUP BY status ORDER BY 2 DESC").fetchall())
    now = clock.now()
    total, hosts, due = con.execute("""
        SELECT count(*), count(DISTINCT host), count(*) FILTER (WHERE next_fetch <= $now) FROM crawldb""",
        {"now": now}).fetchall()[0]
    leased_sql = leased_urls_sql(store, con, live_lease_files(store, now))
    leased = con.execute(f"SELECT count(*) FROM {leased_sql}").fetchall()[0][0]
    # Due and not handed to a live segment: what the next generate can choose from.
    due -= con.execute(f"SELECT count(*) FROM crawldb SEMI JOIN {leased_sql} l USING (url) WHERE next_fetch <= $now",
                       {"now": now}).fetchall()[0][0]
    segments = [{"segment": s, "state": state.value, "next": seg.next_command(s, state)}
                for s, state in seg.states(store)]
    dead = dict(con.execute("""SELECT coalesce(error, '?'), count(*) FROM crawldb WHERE status = 'dead'
                               GROUP BY ALL ORDER BY 2 DESC LIMIT 10""").fetchall())
    consumer, lag = feed_lag(store)
    dedup = dedup_summary(store, con)
    return {"store": store.uri, "crawldb_version": manifest.version, "buckets": manifest.buckets,
            "urls": total, "hosts": hosts, "due": due, "leased": leased, "by_status": by_status,
            "segments": segments, "dead_letters": dead, "feed_batches": len(batches(store)),
            "feed_consumers": consumers(store), "feed_lag": {"consumer": consumer, "batches": lag},
            "last_fetch": last_fetch(store, segments), "dedup": dedup}


def last_fetch(store: Store, segments: list[dict]) -> dict | None:
    """The newest fetched segment's rate and politeness utilisation (its stats/fetch.json,
    cycles/metrics.py), or None before any fetch finished."""
    for s in reversed(segments):
        path = seg.stats_file(seg.segment_dir(store, s["segment"]), "fetch")
        if s["state"] in (seg.State.FETCHED, seg.State.UPDATED) and store.exists(path):
            stats = store.read_json(path)
            return {"segment": s["segment"], "seconds": stats.get("fetch/seconds"),
                    "pages_per_s": stats.get("fetch/pages_per_s"),
                    "politeness_utilisation": stats.get("fetch/politeness_utilisation"),
                    "idle_with_work_s": stats.get("fetch/idle_with_work_s", 0.0),
                    "idle_with_work_ratio": stats.get("fetch/idle_with_work_ratio", 0.0)}
    return None


def format_status(report: dict) -> str:
    lines = [f"store {report['store']}  (crawl DB {report['crawldb_version']}, {report['buckets']} buckets)",
             f"urls {report['urls']}  hosts {report['hosts']}  due now {report['due']}  leased {report['leased']}",
             "by status:"]
    lines += [f"  {status:<14} {count:>10}" for status, count in report["by_status"].items()]
    if report["dead_letters"]:
        lines.append("dead letters (retried rarely), by last error:")
        lines += [f"  {count:>8}  {error}" for error, count in report["dead_letters"].items()]
    if "dedup" in report:
        lines += format_dedup(report["dedup"])
    lines.append(f"pages feed: {report['feed_batches']} batches; consumers: "
                 + (", ".join(f"{k} (at {v or 'start'})" for k, v in report["feed_consumers"].items()) or "none"))
    states: dict[str, int] = {}
    for s in report["segments"]:
        states[s["state"]] = states.get(s["state"], 0) + 1
    lines.append(f"segments {len(report['segments'])}: " + ", ".join(f"{v} {k}" for k, v in sorted(states.items())))
    if report["segments"]:
        last = report["segments"][-1]
        lines.append(f"  newest {last['segment']} ({last['state']})")
    fetch = report.get("last_fetch")
    if fetch and fetch["pages_per_s"] is not None:
        ratio = fetch["politeness_utilisation"]
        lines.append(f"last fetch {fetch['segment']}: {fetch['pages_per_s']} pages/s over {fetch['seconds']} s, "
                     f"politeness utilisation {'?' if ratio is None else f'{ratio:.0%}'} "
                     "(requests made / allowed by the per-host delays), idle with work "
                     f"{fetch.get('idle_with_work_s') or 0:g} host-s ({fetch.get('idle_with_work_ratio') or 0:.1%} "
                     "of that budget)")
    pending = [s for s in report["segments"] if s.get("next")]
    if pending:
        # Applied in generation order: the oldest pending segment is the one to move on.
        lines.append(f"pending segments ({len(pending)}), oldest first; next: `{pending[0]['next']}` "
                     "(or `crawl cycle`, which finishes them first):")
        lines += [f"  {s['segment']}  {s['state']:<9}  {s['next']}" for s in pending[:10]]
    return "\n".join(lines)


def run_sql(store: Store, config: Config, query: str):
    """The query's relation over :func:`open_views` (not run yet: DuckDB runs it when read)."""
    require_crawldb(store)
    con = open_views(store, config)
    try:
        return con.sql(query)
    except duckdb.Error as exc:
        raise CrawlError(f"query failed: {exc}") from None


def sql_text(store: Store, config: Config, query: str) -> str:
    """The query's result as a printable table. Run here, so that its errors (a bad query,
    a corrupt file met while reading) are reported like any other, not while printing."""
    relation = run_sql(store, config, query)
    try:
        return "" if relation is None else str(relation)
    except duckdb.Error as exc:
        if is_damaged_parquet(str(exc)):
            raise  # a damaged store file, not a bad query: the CLI names the file and the repair
        raise CrawlError(f"query failed: {exc}") from None
