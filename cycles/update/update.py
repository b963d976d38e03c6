"""``crawl update``: merge a fetched segment into the crawl DB.

For each bucket of the crawl DB, DuckDB joins the old bucket with the segment's fetch
results and its new outlinks and writes the rows that changed or are new as the bucket's
delta, beside its untouched base (``db.delta_updates``; off: the whole new bucket); the new
version is swapped in atomically (see cycles/tables/crawldb.py, docs/incremental.md). The rules:

- every fetch result updates its URL's row by the transition rules in
  :func:`transition_sql` (status, next fetch, interval, retries, validators, hashes);
- outlinks are normalised and filtered (cycles/urls.py; every drop counted by reason),
  nofollow links dropped, deduplicated, and only URLs the crawl DB does not hold are
  added (anti-join) — the crawl DB is the exact seen-set, so no URL gets two rows;
- the segment's leases end with its updated marker (cycles/tables/leases.py), fetched or not;
- segments are applied in generation order, and only whole: every chunk the fetched
  marker lists must be there (cycles/tables/segment.py);
- a fetch result for a URL the crawl DB does not hold yet (a redirect target followed
  inline) adds that URL, with the result applied;
- the segment's host state (last request time, robots.txt) is merged into the host DB;
- the segment's followed links are folded into the link DB (distinct linking hosts per URL,
  the host graph and its PageRank: cycles/update/linkgraph.py), which generate ranks by.

Update is idempotent: the manifest lists the segments already applied, and applying one
again changes nothing.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa

from cycles import clock, metrics
from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.config import Config
from cycles.tables.crawldb import (BucketFiles, bucket_executor, bucket_source_sql, connect, plain_connection,
                            current_buckets, holds_no_rows, install_version, new_url_rows_sql, pattern_hash_sql, write_bucket)
from cycles.executor import Executor
from cycles.errors import StageError
from cycles.storage.store import Store, StorePath, new_id
from cycles.update.dedup import (find_segment_duplicates, learn_variants, learned_params, read_state,
                                 variant_evidence, variant_rows, write_state)
from cycles.update.feed import feed_candidates, write_feed_batch
from cycles.update.probe import load_known_counts, load_probed_rows
from cycles.tables.keyindex import KeyIndex, read_key_index
from cycles.tables.hostdb import discard_hostdb, install_hostdb, merge_host_bucket, route_host_file, start_hostdb
from cycles.progress import StepProgress
from cycles.update.linkgraph import discard_linkdb, install_linkdb, merge_link_bucket, stash_pending_links, start_linkdb
from cycles.update.route import (ROUTED_FETCHED, ROUTED_LINKS, resolved_fetched_sql, route_segment, routed_files,
                                  routed_source)
from cycles.update.schedule import (SegmentBucketTask, plan_refresh, prepare_schedule, schedule_for, unchanged_after_sql,
                                   with_learned_cadence)
from cycles.update.sitemaps import hinted_sql, lastmod_due_count
from cycles.storage.sql import literal


@dataclass
class UpdateResult:
    segment: str
    applied: bool
    counters: Counter = field(default_factory=Counter)
    reason: str = ""


def read_segment_table(folder, table_schema: pa.Schema, columns: list[str] | None = None,
                       store: Store | None = None) -> pa.Table:
    """All ``part-*.parquet`` files of a segment folder (``store`` given: read through it)."""
    store = store or Store(folder.parent.parent.parent)
    return store.read_tables(store.list(folder, "part-*.parquet"), table_schema, columns)


SEEN_SQL = "f.outcome IN ('ok', 'not_modified')"
"""SQL condition on a fetch result ``f``: the page answered (2xx or 304)."""

CHANGED_SQL = "(f.outcome = 'ok' AND db.content_hash IS NOT NULL AND f.content_hash IS DISTINCT FROM db.content_hash)"
"""SQL condition on an old row ``db`` and its result ``f``: the content differs from the last fetch's."""


FAIL_SQL = "f.outcome IN ('server_error', 'network_error', 'parse_error', 'tls_failed')"
"""SQL condition on a fetch result ``f``: a failure that is retried (and counts towards dead)."""


FETCHED_JOIN = "db LEFT JOIN fetched f ON db.url = f.url"
"""The FROM of :func:`transition_sql` where the old rows are table ``db`` and the results ``fetched``."""

INTERVAL_COLUMN = "_interval"
"""The schedule's new interval, computed once per row below the transition (see transition_sql)."""


def transition_sql(config: Config, multiplier_s: float | None = None, source: str = FETCHED_JOIN,
                   more: str = "") -> str:
    """SELECT computing each row's new state from its old row (db) and result (f), read from
    ``source`` (a FROM naming them ``db`` and ``f``), with ``more`` columns after the row's.

    ``multiplier_s``: the optimal schedule's plan (schedule.plan_refresh), if any. The
    transitions (f.outcome → new status, next fetch) are :func:`status_sql` and
    :func:`next_fetch_sql`; no result → unchanged (it was due when generated, so it is due
    again); a result older than the row's last_fetched → unchanged (``update/stale_result``).

    The schedule's interval (12 k characters of SQL by default) is computed once, in a
    subquery that carries the result as a struct column ``f``: spelled out in both
    ``next_fetch`` and ``fetch_interval_s`` it made a 30 k-character statement that DuckDB
    took ~100 ms to plan, per bucket and update, whatever the bucket's size.
    """
    ok, seen_ok, changed = "f.outcome = 'ok'", SEEN_SQL, CHANGED_SQL
    interval_sql = schedule_for(config, multiplier_s).interval_sql(seen_ok, changed)
    interval = f"db.{INTERVAL_COLUMN}"
    retries = f"CASE WHEN {FAIL_SQL} THEN db.retries + 1 WHEN f.outcome IS NULL OR f.outcome = 'deferred' THEN db.retries ELSE 0 END"
    # A result older than what the row already holds (a segment updated late, after a newer
    # one) changes nothing: applying it would move last_fetched, the validators and the
    # schedule back in time.
    stale = "coalesce(f.fetched_at < db.last_fetched, false)"
    columns = [
        ("status", status_sql(config)),
        ("first_fetched", f"coalesce(db.first_fetched, CASE WHEN {seen_ok} THEN f.fetched_at END)"),
        ("last_fetched", "coalesce(f.fetched_at, db.last_fetched)"),
        ("next_fetch", next_fetch_sql(config, interval)),
        ("fetch_interval_s", f"({interval})::INTEGER"),
        ("retries", f"({retries})::SMALLINT"),
        ("fetch_count", f"(db.fetch_count + CASE WHEN {seen_ok} THEN 1 ELSE 0 END)::INTEGER"),
        ("change_count", f"(db.change_count + CASE WHEN {changed} THEN 1 ELSE 0 END)::INTEGER"),
        ("last_changed", f"CASE WHEN {changed} OR ({ok} AND db.content_hash IS NULL) THEN f.fetched_at ELSE db.last_changed END"),
        ("http_status", "coalesce(f.http_status, db.http_status)"),
        ("content_hash", f"CASE WHEN {ok} THEN f.content_hash ELSE db.content_hash END"),
        ("minhash", f"CASE WHEN {ok} THEN f.minhash ELSE db.minhash END"),
        ("etag", f"CASE WHEN {ok} THEN f.etag ELSE db.etag END"),
        ("last_modified", f"CASE WHEN {ok} THEN f.last_modified ELSE db.last_modified END"),
        ("redirect_to", "CASE WHEN f.outcome = 'redirect' THEN f.redirect_to ELSE db.redirect_to END"),
        ("error", "CASE WHEN f.outcome IS NULL OR f.outcome = 'deferred' THEN db.error ELSE f.error END"),
        ("unchanged_s", f"({unchanged_after_sql(seen_ok, changed)})::BIGINT"),
    ]
    replaced = ",\n            ".join(f"CASE WHEN {stale} THEN db.{name} ELSE {expr} END AS {name}"
                                    for name, expr in columns)
    return f"""SELECT
        db.* EXCLUDE (f, {INTERVAL_COLUMN}) REPLACE (
            {replaced}
        ){more}
        FROM (SELECT db.*, f AS f, ({interval_sql}) AS {INTERVAL_COLUMN} FROM {source}) db"""


def status_sql(config: Config) -> str:
    """A row's new status from its result ``f``:
      ok → fetched; not_modified → not_modified (a copy stays a copy); redirect → redirected;
      gone, client_error → gone; robots_denied → robots_denied; not_html, too_large → skipped;
      blocked → blocked (address not public: SSRF guard; not a failure, never dead);
      server_error, network_error, parse_error, tls_failed → error, after
      ``update.max_retries`` in a row → dead (dead letter); deferred or no result → kept."""
    S = schema.DbStatus
    return f"""CASE
                WHEN f.outcome IS NULL OR f.outcome = 'deferred' THEN db.status
                WHEN f.outcome = 'ok' THEN {literal(S.FETCHED)}
                WHEN f.outcome = 'not_modified' AND db.status IN ({literal(S.DUPLICATE)}, {literal(S.NEAR_DUPLICATE)}) THEN db.status
                WHEN f.outcome = 'not_modified' THEN {literal(S.NOT_MODIFIED)}
                WHEN f.outcome = 'redirect' THEN {literal(S.REDIRECTED)}
                WHEN f.outcome IN ('gone', 'client_error') THEN {literal(S.GONE)}
                WHEN f.outcome = 'robots_denied' THEN {literal(S.ROBOTS_DENIED)}
                WHEN f.outcome IN ('not_html', 'too_large') THEN {literal(S.SKIPPED)}
                WHEN f.outcome = 'blocked' THEN {literal(S.BLOCKED)}
                WHEN {FAIL_SQL} AND db.retries + 1 >= {config.update.max_retries} THEN {literal(S.DEAD)}
                ELSE {literal(S.ERROR)} END"""


def next_fetch_sql(config: Config, interval: str) -> str:
    """A row's next fetch from its result ``f``: a page that answered, after the schedule's
    ``interval`` (cycles/update/schedule.py; by default the page's change rate); a redirect
    or robots denial after the default interval; gone after ``update.gone_interval_s``;
    skipped after ``update.max_interval_s``; blocked after ``update.gone_interval_s``; a
    failure by exponential retry, dead after ``update.dead_retry_s``; deferred after
    ``update.deferred_retry_s``; no result: unchanged."""
    u = config.update

    def after(seconds) -> str:
        return f"to_seconds({seconds})"
    return f"""CASE
                WHEN f.outcome IS NULL THEN db.next_fetch
                WHEN f.outcome = 'deferred' THEN $now + {after(u.deferred_retry_s)}
                WHEN {SEEN_SQL} THEN f.fetched_at + to_seconds(({interval})::BIGINT)
                WHEN f.outcome = 'redirect' THEN f.fetched_at + {after(u.default_interval_s)}
                WHEN f.outcome IN ('gone', 'client_error') THEN f.fetched_at + {after(u.gone_interval_s)}
                WHEN f.outcome = 'robots_denied' THEN $now + {after(u.default_interval_s)}
                WHEN f.outcome IN ('not_html', 'too_large') THEN coalesce(f.fetched_at, $now) + {after(u.max_interval_s)}
                WHEN f.outcome = 'blocked' THEN $now + {after(u.gone_interval_s)}
                WHEN {FAIL_SQL} AND db.retries + 1 >= {u.max_retries} THEN coalesce(f.fetched_at, $now) + {after(u.dead_retry_s)}
                WHEN {FAIL_SQL} THEN coalesce(f.fetched_at, $now) + to_seconds(({u.retry_s} * (1 << least(db.retries, {u.max_retry_doublings})))::BIGINT)
                ELSE db.next_fetch END"""


def trap_limited_sql(new: str, old: str, counted: tuple[str, str] | None = None) -> str:
    """New URLs that fit under the per-host total cap and the per-pattern cap: the caps
    are its two ``?`` parameters, ``update.max_urls_per_pattern`` then
    ``update.max_urls_per_host_total`` (:func:`trap_caps`).

    Existing URLs of the host (and of the pattern) count first; among the new ones the
    shallowest are kept. ``counted``: tables (host, pattern, have) and (host, have) holding
    those counts already (probe.load_known_counts, from the base's key index), else they are
    counted over ``old``.
    """
    patterns = (f"SELECT * FROM {counted[0]}" if counted else
                f"SELECT o.host, o.pattern_hash AS pattern, count(*) AS have FROM {old} o SEMI JOIN n ON o.host = n.host GROUP BY ALL")
    hosts = f"SELECT * FROM {counted[1]}" if counted else "SELECT host, sum(have) AS have FROM patterns GROUP BY host"
    return f"""
        WITH n AS (SELECT *, {pattern_hash_sql('url')} AS pattern FROM {new}),
        patterns AS ({patterns}),
        hosts AS ({hosts}),
        ranked AS (
            SELECT n.*, coalesce(h.have, 0) + row_number() OVER (PARTITION BY n.host ORDER BY n.depth, n.url) AS host_rank,
                   coalesce(p.have, 0) + row_number() OVER (PARTITION BY n.host, n.pattern ORDER BY n.depth, n.url) AS pattern_rank
            FROM n LEFT JOIN hosts h ON n.host = h.host
                   LEFT JOIN patterns p ON n.host = p.host AND n.pattern = p.pattern)
        SELECT * EXCLUDE (pattern), pattern_rank > ? AS over_pattern, host_rank > ? AS over_host
        FROM ranked"""


def trap_caps(config: Config) -> list[int]:
    """The parameters of :func:`trap_limited_sql`."""
    return [int(config.update.max_urls_per_pattern), int(config.update.max_urls_per_host_total)]


def stored_pages(seg_dir, store: Store | None = None, con=None) -> pa.Table:
    """This segment's stored pages, for dedup: (url, host, content_hash, minhash, text_chars).

    DuckDB measures the text where it lies: the texts never become Python objects (reading
    them into Arrow first held a whole segment's text in memory, 21 GB at 100 M URLs).
    """
    store = store or Store(seg_dir.parent.parent.parent)
    files = seg.output_files(store, seg_dir, seg.FETCHED)
    if not files:
        return pa.table({"url": pa.array([], pa.string()), "host": pa.array([], pa.string()),
                         "content_hash": pa.array([], pa.string()), "minhash": pa.array([], pa.uint64()),
                         "text_chars": pa.array([], pa.int64())})
    con = con or plain_connection()
    # One row per URL, its newest result as the bucket merge applies it (a URL fetched twice
    # in one segment, listed and inline, would otherwise be a "copy" of itself).
    return con.sql(f"""
        SELECT url, host, content_hash, minhash, text_chars FROM (
            SELECT url, host, content_hash, minhash, coalesce(length(text), 0)::BIGINT AS text_chars, outcome
            FROM {store.duckdb_source(con, files)}
            QUALIFY row_number() OVER (PARTITION BY url ORDER BY fetched_at DESC NULLS LAST, outcome) = 1)
        WHERE outcome = 'ok'""").to_arrow_table()


@dataclass(frozen=True)
class UpdateBucketTask(SegmentBucketTask):
    """Everything one bucket's merge needs: locations, ids and the config."""

    new_folder: StorePath
    now: dt.datetime
    workers: int = 1
    """How many such tasks run at once on this machine (they share memory and threads)."""
    buckets: int = 1
    """The crawl DB's bucket count (every row written must be of ``bucket``)."""
    refresh_multiplier_s: float | None = None
    """The optimal schedule's μ for this update (schedule.plan_refresh); None: another schedule."""
    old_deltas: tuple = ()
    """The bucket's delta files, oldest first: ``old_file`` is its base (docs/incremental.md)."""
    delta: bool = False
    """Write only the rows this segment changes or adds (a delta), not the whole bucket."""


PRIOR_HOSTS = "(SELECT DISTINCT host FROM fetched_all)"
"""The hosts whose schedule prior (schedule.prepare_schedule's ``host_prior``) a bucket task
needs: a prior is read only for a page seen by this segment (``seen``: a fetch result) and
fetched for the first time, so only the hosts of the bucket's fetch results. Every host of
the rows a delta writes (new outlinks' hosts: most hosts of a bucket) made the medians
cost about as much as for the whole bucket; the whole rewrite computed every host's."""


def touched_rows_sql(con, old: str, hints: bool, variants: bool = False, recheck_before=None,
                     keys: str | None = None) -> str:
    """The old rows (``old``) an update may change, for a delta (:class:`UpdateBucketTask`
    ``delta``): those with a fetch result, a dedup mark or a sitemap hint (``hints``), the
    copies of a page marked a copy now (they are re-pointed to the page kept), the
    unfetched rows of a demoted host (their score changes), and the rows carrying a variant
    parameter learned on their host (``variants``: temp table ``variant_urls``) that
    :func:`with_variants_set_aside` changes: the unfetched ones (they become duplicates) and the
    copies due before ``recheck_before`` (now + half of ``update.variant_recheck_s``: their next
    fetch is pushed on again, so a delta rewrites each at most twice a recheck period). Every other row comes out of the update as it went in, so the delta
    leaves it to the base. The URLs are gathered into a temp table first, so the base is
    probed once against a small set. ``keys``: the old rows' lookup columns
    (:func:`load_old_keys`), searched instead of ``old`` for the touched URLs."""
    keys = keys or old
    hinted, params = ("UNION SELECT url FROM sitemap_hints" if hints else ""), []
    if variants:
        S = schema.DbStatus
        hinted += (f" UNION SELECT o.url FROM {keys} o SEMI JOIN variant_urls v ON o.url = v.url"
                   f" WHERE o.status = {literal(S.UNFETCHED)} OR (o.status IN ({literal(S.DUPLICATE)}, {literal(S.NEAR_DUPLICATE)})"
                   f" AND o.next_fetch < ?)")
        params.append(recheck_before)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE touched AS
        SELECT url FROM fetched_all UNION SELECT url FROM marks {hinted}
        UNION SELECT o.url FROM {keys} o SEMI JOIN marks m ON o.duplicate_of = m.url
        UNION SELECT o.url FROM {keys} o SEMI JOIN demoted_hosts h ON o.host = h.host
        WHERE o.status = {literal(schema.DbStatus.UNFETCHED)}""", params)
    return f"(SELECT o.* FROM {old} o SEMI JOIN touched t ON o.url = t.url)"


def update_bucket(task: UpdateBucketTask) -> dict:
    """Merge one bucket: its old rows, its fetch results and its new outlinks → its new file.

    Reads only this bucket's files (the old bucket; ``update/results|links|sitemaps/bucket-N/``,
    one file per group of chunks routed by cycles/update/route.py, merged here) and the
    segment's small marks tables; writes only ``new_folder/<delta|bucket>-N.<attempt>.parquet``.
    Returns counts (rows, new URLs, URLs over a trap cap …) and ``file``, the name written
    (None: a delta with nothing to write).
    """
    store = Store(task.store_uri)
    inputs = seg.segment_dir(store, task.segment) / seg.UPDATE_INPUTS
    if nothing_to_merge(store, inputs, task):
        return empty_bucket(store, task)
    return merge_bucket(store, task, inputs)


def nothing_to_merge(store: Store, inputs: StorePath, task: UpdateBucketTask) -> bool:
    """Whether the bucket has no old rows and no routed fetch results, links or sitemap hints
    (by the files' footers): then its new rows are none."""
    routed = [f for kind in ("results", "links", "sitemaps") for f in routed_files(store, inputs, kind, task.bucket)]
    return holds_no_rows(store, [task.old_file, *task.old_deltas, *routed])


def merge_bucket(store: Store, task: UpdateBucketTask, inputs: StorePath) -> dict:
    """:func:`update_bucket`'s merge in DuckDB."""
    config = task.config
    con = connect(store, config, task.workers)
    old = bucket_source_sql(store, con, BucketFiles(task.old_file, tuple(task.old_deltas)), task.schema_version)
    counts = load_bucket_inputs(con, store, inputs, task)
    index = read_key_index(store, task.old_file) if task.delta else None
    if index is not None:  # one scan of the rows it can need (cycles/update/probe.py)
        keys = load_probed_rows(con, store, old, index, list(task.old_deltas),
                                routed_files(store, inputs, "sitemaps", task.bucket), read_learned(store, inputs))
        counts |= new_url_candidates(con, keys, config, index)
        sql, more = bucket_rows_sql(con, store, inputs, task, keys, keys, priors=old)
    else:
        keys = load_old_keys(con, old)
        counts |= new_url_candidates(con, keys, config)
        sql, more = bucket_rows_sql(con, store, inputs, task, old, keys)
    counts |= more | {"update/key_index_buckets": int(index is not None)}
    # A name of this attempt's own: a task run twice (its worker lost, the task retried
    # elsewhere while the first still ran) never writes over the other attempt's file; the
    # coordinator's manifest names the one it committed (crawldb.install_version).
    name = attempt_delta_name(task.bucket) if task.delta else attempt_bucket_name(task.bucket)
    rows = write_bucket(store, con, sql, task.new_folder / name, task.now, bucket=task.bucket, buckets=task.buckets)
    con.close()
    if task.delta and rows == 0:  # nothing of the bucket changed: no delta file
        store.delete(task.new_folder / name)
        name = None
    return {**counts, "rows": rows, "file": name}


EMPTY_BUCKET_COUNTS = {"update/results": 0, "links": 0, "filter/max_depth": 0, "new": 0, "trap/pattern_cap": 0,
                       "trap/host_cap": 0, "update/stale_result": 0, "sitemap/lastmod_due": 0, "dedup/variant_skipped": 0,
                       "update/key_index_buckets": 0}
"""What :func:`merge_bucket` counts, for a bucket with nothing to merge (tests/update/test_update_steps.py
checks the two agree)."""


def empty_bucket(store: Store, task: UpdateBucketTask) -> dict:
    """:func:`update_bucket` of a bucket without old rows, fetch results, new links or sitemap
    hints: its new rows are none (every other input only changes rows), so it is written
    without DuckDB — an empty file, or no delta. Most buckets of a small crawl are so: with
    8 buckets and a few hosts, their merges were most of an update's CPU."""
    name = None
    if not task.delta:
        name = attempt_bucket_name(task.bucket)
        store.write_batches(task.new_folder / name, iter(()), schema.CRAWLDB)
    return {**EMPTY_BUCKET_COUNTS, "rows": 0, "file": name}


OLD_KEY_COLUMNS = ("url", "host", "pattern_hash", "status", "next_fetch", "last_fetched", "first_fetched",
                   "fetch_count", "change_count", "unchanged_s", "duplicate_of")
"""The old rows' columns every lookup of a bucket task reads (new URLs, trap caps, stale
results, touched rows, variants and the page their base is a copy of, sitemap hints, the
schedule's host priors)."""


def load_old_keys(con, old: str) -> str:
    """Temp table ``old_keys``: :data:`OLD_KEY_COLUMNS` of the bucket's old rows, read once.

    ``old`` merges a base with its deltas on read (crawldb.bucket_source_sql): each of the
    bucket task's ~nine lookups re-ran that merge over every row of the bucket. Now one
    narrow scan feeds them all, and the whole rows are read once more, only for the rows
    written (:func:`touched_rows_sql`). Returns the table's name."""
    con.execute(f"CREATE TEMP TABLE old_keys AS SELECT {', '.join(OLD_KEY_COLUMNS)} FROM {old}")
    return "old_keys"


def load_bucket_inputs(con, store: Store, inputs: StorePath, task: UpdateBucketTask) -> dict:
    """The bucket's inputs as temp tables: ``fetched_all`` (its results), ``links_all`` (its
    new links), ``marks`` (one per URL: an exact copy before a near one, then the first
    canonical) and ``demoted_hosts`` (a host both mirror and duplicate-heavy gets the smaller
    of its factors, once). Returns their counts."""
    results = load_bucket_results(con, store, inputs, task.bucket)
    links_rows, too_deep = load_bucket_links(con, store, inputs, task.bucket, task.config)
    con.execute(f"""CREATE TEMP TABLE marks AS SELECT * FROM {store.duckdb_source(con, [inputs / 'marks.parquet'])}
        QUALIFY row_number() OVER (PARTITION BY url ORDER BY kind = 'duplicate' DESC, canonical) = 1""")
    con.execute(f"""CREATE TEMP TABLE demoted_hosts AS SELECT host, min(factor) AS factor FROM
        {store.duckdb_source(con, [inputs / 'demoted_hosts.parquet'])} GROUP BY host""")
    return {"update/results": results, "links": links_rows, "filter/max_depth": too_deep}


def new_url_candidates(con, old: str, config: Config, index: KeyIndex | None = None) -> dict:
    """Temp tables ``fetched_new`` and ``candidates``: the URLs this segment adds to the bucket.

    Results for URLs the crawl DB does not hold (redirect targets and links discovered inside
    the fetch, cycles/fetch/discovery.py) become rows of their own, their score and depth from
    the link that led to them. Those rows count against the trap caps like the old ones (the
    fetch kept within the caps when it took them); the new outlinks fill the rest. Returns the
    counts: new URLs kept, URLs over a cap, stale results."""
    u = config.update
    con.execute(f"""CREATE TEMP TABLE fetched_new AS
        SELECT f.url, f.host, f.host_hash, coalesce(l.score, ?::FLOAT) AS score,
               coalesce(l.depth, ?::SMALLINT) AS depth
        FROM fetched_all f ANTI JOIN {old} o USING (url) LEFT JOIN links_all l USING (url)""",
                [float(u.redirect_target_score), int(u.max_depth)])
    known = (f"(SELECT host, pattern_hash FROM {old} UNION ALL "
             f"SELECT host, {pattern_hash_sql('url')} AS pattern_hash FROM fetched_new)")
    fresh = f"(SELECT l.* FROM links_all l ANTI JOIN {old} o USING (url) ANTI JOIN fetched_all f USING (url))"
    counted = load_known_counts(con, index, fresh) if index is not None else None
    con.execute(f"CREATE TEMP TABLE candidates AS {trap_limited_sql(fresh, known, counted)}", trap_caps(config))
    stale = con.execute(f"SELECT count(*) FROM fetched_all f JOIN {old} o USING (url) "
                        "WHERE f.fetched_at < o.last_fetched").fetchall()[0][0]
    over_pattern, over_host, kept = con.execute("""SELECT count(*) FILTER (WHERE over_pattern),
        count(*) FILTER (WHERE over_host AND NOT over_pattern), count(*) FILTER (WHERE NOT over_pattern AND NOT over_host)
        FROM candidates""").fetchall()[0]
    return {"new": kept, "trap/pattern_cap": over_pattern, "trap/host_cap": over_host, "update/stale_result": stale}


F_OUTCOME = ", CASE WHEN f.fetched_at < db.last_fetched THEN NULL ELSE f.outcome END AS f_outcome"
"""The result's outcome beside the new row (null for a stale result), for the dedup marks' join."""


def bucket_rows_sql(con, store: Store, inputs: StorePath, task: UpdateBucketTask, old: str,
                    keys: str, priors: str | None = None) -> tuple[str, dict]:
    """The SQL of the bucket's new rows (a delta: only the touched old rows, :func:`touched_rows_sql`)
    with the transitions, the dedup marks, the demoted hosts' scores, the learned variant
    parameters set aside and the sitemaps' hints; and its counts. ``keys``: the old rows'
    lookup columns (:func:`load_old_keys`), read instead of ``old`` wherever they suffice;
    ``priors``: the rows the host priors are computed over, if not ``keys``."""
    config = task.config
    hint_files = routed_files(store, inputs, "sitemaps", task.bucket)
    variants = load_variant_urls(con, store, inputs, keys)
    if hint_files:
        load_sitemap_hints(con, store, hint_files)
    changed = old
    if task.delta:
        recheck_before = task.now + dt.timedelta(seconds=config.update.variant_recheck_s / 2)
        changed = touched_rows_sql(con, old, bool(hint_files), variants, recheck_before, keys)
    prepare_schedule(con, config, priors or keys, PRIOR_HOSTS)
    source = (f"(SELECT * FROM {changed} UNION ALL BY NAME {new_url_rows_sql('fetched_new', config)}) db "
              "LEFT JOIN fetched_all f ON db.url = f.url")
    sql = f"""
        SELECT n.* REPLACE (
            coalesce(d.kind, n.status) AS status,
            CASE WHEN d.kind IS NOT NULL THEN d.canonical
                 WHEN n.f_outcome = 'ok' THEN NULL
                 -- a copy of a page marked a copy now names the page kept (docs/dedup.md)
                 WHEN r.canonical IS NOT NULL AND n.status IN ({literal(schema.DbStatus.DUPLICATE)}, {literal(schema.DbStatus.NEAR_DUPLICATE)})
                 THEN r.canonical ELSE n.duplicate_of END AS duplicate_of,
            CASE WHEN h.factor IS NOT NULL AND n.status = {literal(schema.DbStatus.UNFETCHED)} THEN n.score * h.factor ELSE n.score END AS score)
        FROM (
            {transition_sql(config, task.refresh_multiplier_s, source, F_OUTCOME)}
            UNION ALL BY NAME
            SELECT *, NULL::VARCHAR AS f_outcome FROM ({new_url_rows_sql('(SELECT * FROM candidates WHERE NOT over_pattern AND NOT over_host)', config)})
        ) n
        LEFT JOIN marks d ON n.url = d.url
        LEFT JOIN marks r ON n.duplicate_of = r.url AND r.canonical <> n.url
        LEFT JOIN demoted_hosts h ON n.host = h.host"""
    sql, variants_skipped = with_variants_set_aside(con, sql, keys, config) if variants else (sql, 0)
    lastmod_due = 0
    if hint_files:  # the segment's sitemaps gave hints (cycles/update/sitemaps.py)
        lastmod_due = lastmod_due_count(con, keys, "sitemap_hints", "fetched_all", task.now)
        sql = hinted_sql(sql, "sitemap_hints", config)
    return sql, {"sitemap/lastmod_due": lastmod_due, "dedup/variant_skipped": variants_skipped}


VARIANT_PARAMS = "variant_params.parquet"
"""In the segment's update inputs: (host, param) of the variant parameters learned so far
(cycles/update/dedup.py ``learn_variants``), written by the coordinator for the bucket tasks."""


def read_learned(store: Store, inputs: StorePath) -> pa.Table | None:
    """The variant parameters learned so far (:data:`VARIANT_PARAMS`), None if not written."""
    path = inputs / VARIANT_PARAMS
    return store.read_table(path) if store.exists(path) else None


def load_variant_urls(con, store: Store, inputs: StorePath, old: str) -> bool:
    """Temp table ``variant_urls`` (url, base): the bucket's URLs (old rows, this segment's
    new pages and outlinks) that carry a variant parameter learned on their host
    (cycles/update/dedup.py ``learn_variants``), with the URL without it. False when no
    parameter is learned (no table)."""
    learned = read_learned(store, inputs)
    if learned is None or learned.num_rows == 0:
        return False
    con.register("learned_params", learned)
    # Only the URLs of hosts with a learned parameter go through Python (to strip them).
    urls = con.sql(f"""SELECT url, host FROM (SELECT url, host FROM {old} UNION ALL SELECT url, host FROM fetched_new
                       UNION ALL SELECT url, host FROM candidates WHERE NOT over_pattern AND NOT over_host)
                   WHERE host IN (SELECT host FROM learned_params) AND url LIKE '%?%'""").to_arrow_table()
    con.unregister("learned_params")
    con.register("variant_rows", variant_rows(urls, learned))
    con.execute("CREATE TEMP TABLE variant_urls AS SELECT * FROM variant_rows")
    con.unregister("variant_rows")
    return True


def with_variants_set_aside(con, sql: str, old: str, config: Config) -> tuple[str, int]:
    """``sql`` (the bucket's new rows) with the URLs of ``variant_urls`` (:func:`load_variant_urls`)
    set aside: an unfetched one becomes ``duplicate`` of the URL without the parameter, and
    none of them is due before ``update.variant_recheck_s``, so generate does not list them
    and discovery, whose seen-set holds them, does not fetch them. Returns the SQL and how
    many unfetched URLs were set aside (``dedup/variant_skipped``)."""
    S = schema.DbStatus
    fresh = f"x.status = {literal(S.UNFETCHED)} AND v.url IS NOT NULL"
    wrapped = f"""
        SELECT x.* REPLACE (
            CASE WHEN {fresh} THEN {literal(S.DUPLICATE)} ELSE x.status END AS status,
            CASE WHEN {fresh} THEN v.kept ELSE x.duplicate_of END AS duplicate_of,
            CASE WHEN v.url IS NOT NULL AND x.status IN ({literal(S.UNFETCHED)}, {literal(S.DUPLICATE)}, {literal(S.NEAR_DUPLICATE)})
                 THEN greatest(x.next_fetch, $now + to_seconds({int(config.update.variant_recheck_s)}))
                 ELSE x.next_fetch END AS next_fetch)
        FROM ({sql}) x LEFT JOIN ({variant_kept_sql(old)}) v ON x.url = v.url"""
    skipped = con.execute(f"""SELECT count(*) FROM variant_urls v JOIN (SELECT url, status FROM {old}
        UNION ALL SELECT url, {literal(S.UNFETCHED)} FROM candidates WHERE NOT over_pattern AND NOT over_host) o USING (url)
        WHERE o.status = {literal(S.UNFETCHED)}""").fetchall()[0][0]
    return wrapped, skipped


def variant_kept_sql(keys: str) -> str:
    """``variant_urls`` with ``kept``: the page its base's content is kept under, which a
    variant's ``duplicate_of`` names (docs/dedup.md: every copy names the page kept, never a
    copy; a variant set aside earlier is re-pointed with every other copy, by
    :func:`bucket_rows_sql`). The base's mark of this segment if it has one; the base itself if fetched in this
    segment without a mark; else the page the base was a copy of before (``keys``, the old
    rows); else the base. Without this, a variant set aside after its article turned out a
    copy of a syndicated story named the article, itself a copy."""
    S = schema.DbStatus
    return f"""SELECT v.url, v.base, coalesce(m.canonical, CASE WHEN f.url IS NOT NULL THEN v.base END,
                   CASE WHEN k.status IN ({literal(S.DUPLICATE)}, {literal(S.NEAR_DUPLICATE)}) THEN k.duplicate_of END,
                   v.base) AS kept
               FROM variant_urls v LEFT JOIN marks m ON v.base = m.url
               LEFT JOIN fetched_all f ON v.base = f.url
               LEFT JOIN {keys} k ON v.base = k.url"""


def load_sitemap_hints(con, store: Store, hint_files: list) -> None:
    """The bucket's sitemap hints as temp table ``sitemap_hints``, one row per URL. A URL's
    hints from several groups of chunks: the newest lastmod, the shortest changefreq, the
    highest priority (as sitemap_hints merges two spellings)."""
    con.execute(f"""CREATE OR REPLACE TEMP TABLE sitemap_hints AS
        SELECT url, any_value(host) AS host, any_value(host_hash) AS host_hash, max(lastmod) AS lastmod,
               min(changefreq_s) AS changefreq_s, max(priority) AS priority
        FROM {store.duckdb_source(con, hint_files)} GROUP BY url""")


def attempt_delta_name(bucket: int) -> str:
    """``delta-NNNNN.<attempt id>.parquet``: one attempt of a bucket task writing a delta."""
    return f"delta-{bucket:05d}.{new_id()}.parquet"


def delta_version_files(manifest, written: list[str | None], version: str) -> tuple[list[str], list[tuple[str, ...]]]:
    """The new manifest's bases and deltas when the bucket tasks wrote deltas (``written``:
    each bucket's new delta, None if nothing changed): every base carried over, each
    bucket's deltas plus its new one, all named from the table's folder."""
    bases = [manifest.entry_in_table(manifest.bucket_file_name(b)) for b in range(manifest.buckets)]
    deltas = [tuple(manifest.entry_in_table(n) for n in manifest.delta_names(b))
              + ((f"{version}/{written[b]}",) if written[b] else ()) for b in range(manifest.buckets)]
    return bases, deltas


def attempt_bucket_name(bucket: int) -> str:
    """``bucket-NNNNN.<attempt id>.parquet``: the file name of one attempt of a bucket task."""
    return f"bucket-{bucket:05d}.{new_id()}.parquet"


def load_bucket_results(con, store: Store, inputs: StorePath, bucket: int) -> int:
    """The bucket's fetch results of every group of chunks as temp table ``fetched_all``,
    one per URL; returns the results update counts (``update/results``).

    Every table joined to the crawl DB rows holds one row per key: a key matched twice
    would write that URL's row twice (a host both mirror and duplicate-heavy once did).
    A URL fetched twice in one segment keeps its newest result (route.resolved_fetched_sql
    first drops inline results of a URL that has a listed one).
    """
    source = routed_source(con, store, routed_files(store, inputs, "results", bucket), ROUTED_FETCHED, "no_fetched")
    con.execute(f"CREATE TEMP TABLE fetched_routed AS SELECT * FROM {source}")
    con.execute(f"CREATE TEMP TABLE fetched_resolved AS SELECT * FROM {resolved_fetched_sql('fetched_routed')}")
    con.execute("DROP TABLE fetched_routed")
    results = con.execute("SELECT count(*) FROM fetched_resolved").fetchall()[0][0]
    con.execute("""CREATE TEMP TABLE fetched_all AS SELECT * FROM fetched_resolved
        QUALIFY row_number() OVER (PARTITION BY url ORDER BY fetched_at DESC NULLS LAST, outcome) = 1""")
    con.execute("DROP TABLE fetched_resolved")
    return results


def load_bucket_links(con, store: Store, inputs: StorePath, bucket: int, config: Config) -> tuple[int, int]:
    """The bucket's new links of every group of chunks as temp table ``links_all`` (url,
    host, host_hash, score, depth): one row per URL at its smallest depth, within
    ``update.max_depth``, score 1/(depth + 1) (outlinks.prepare_outlinks' rule). Returns
    (links kept, URLs too deep: ``filter/max_depth``)."""
    source = routed_source(con, store, routed_files(store, inputs, "links", bucket), ROUTED_LINKS, "no_links")
    max_depth = int(config.update.max_depth)
    con.execute(f"""CREATE TEMP TABLE links_merged AS
        SELECT url, any_value(host) AS host, any_value(host_hash) AS host_hash, min(depth) AS depth
        FROM {source} GROUP BY url""")
    too_deep = con.execute("SELECT count(*) FROM links_merged WHERE depth > ?", [max_depth]).fetchall()[0][0]
    con.execute("""CREATE TEMP TABLE links_all AS
        SELECT url, host, host_hash, (1.0::DOUBLE / (depth::DOUBLE + 1.0))::FLOAT AS score, depth::SMALLINT AS depth
        FROM links_merged WHERE depth <= ?""", [max_depth])
    con.execute("DROP TABLE links_merged")
    return con.execute("SELECT count(*) FROM links_all").fetchall()[0][0], too_deep


def writes_delta(config: Config, manifest) -> bool:
    """Whether this update writes deltas (``db.delta_updates``): not over a crawl DB of an
    older schema, which a whole rewrite upgrades first (deltas are in the current schema)."""
    return config.db.delta_updates and manifest.schema_version == schema.SCHEMA_VERSION


def fetched_segment(store: Store, segment: str | None) -> tuple[str, str]:
    """The segment to apply (the oldest fetched, not yet updated one if None) and its state;
    a clear error when it cannot be applied (not fetched, abandoned, out of order)."""
    if segment is None:
        segment = seg.oldest(store, seg.State.FETCHED)  # generation order (cycles/tables/segment.py)
        if segment is None:
            raise StageError(f"update: no fetched segment waiting in {store.uri_of(seg.segments_root(store))}; "
                             "run `crawl fetch` first")
    state = seg.state(store, segment)
    if state in (seg.State.GENERATED, seg.State.FETCHING, seg.State.INCOMPLETE):
        raise StageError(f"update: segment {segment} has not been fetched (state: {state}); run `crawl fetch {segment}` first")
    if state == seg.State.ABANDONED:
        marker = seg.read_marker(store, segment, seg.Abandoned)
        raise StageError(f"update: segment {segment} is abandoned ({marker.reason if marker else '?'}); "
                         "it is never applied")
    if state == seg.State.FETCHED:
        seg.check_apply_order(store, segment)
    return segment, state


@dataclass
class UpdateRun:
    """What the steps of one update share (:data:`UPDATE_STEPS`), filled in step by step."""

    store: Store
    config: Config
    segment: str
    now: dt.datetime
    manifest: object
    buckets: list
    """Each bucket's files (crawldb.BucketFiles: base and deltas) in the version update starts from."""
    executor: Executor
    con: object
    counters: Counter = field(default_factory=Counter)
    undo: list = field(default_factory=list)
    """What to discard if a step fails: pushed before a step writes, popped once it commits."""
    dedup_state: dict | None = None
    dedup: object = None
    learned: pa.Table | None = None
    feed_changed: object = None
    multiplier: float | None = None
    version: str = ""
    written: list = field(default_factory=list)
    added: Counter = field(default_factory=Counter)
    batch: object = None

    @property
    def inputs(self) -> StorePath:
        return seg.segment_dir(self.store, self.segment) / seg.UPDATE_INPUTS


def dedup_step(run: UpdateRun) -> None:
    """The segment's duplicates: each bucket scanned by a task (cycles/update/dedup.py), only
    the segment's pages and their matches joined here; the variant parameters learned; the
    pages feed's candidates; the marks and demoted hosts written for the routing tasks (they
    leave out the outlinks of exact copies) and the bucket tasks."""
    store, config, counters = run.store, run.config, run.counters
    pages = stored_pages(seg.segment_dir(store, run.segment), store, run.con)
    # Mirrors found by earlier updates (their pages are never canonical) and the variant
    # parameters learned so far, kept beside the crawl DB (dedup.STATE_FILE).
    state = run.dedup_state = read_state(store)
    dedup = run.dedup = find_segment_duplicates(store, config, run.con, run.executor, run.buckets,
                                                run.manifest.schema_version, run.inputs, pages, counters,
                                                state["mirrors"])
    if state["segment"] != run.segment:  # a retried update counts its evidence once
        learn_variants(state, variant_evidence(pages, dedup.marks), config.update, counters)
        state["mirrors"].update(dedup.mirrors)
        state["segment"] = run.segment
    run.learned = learned_params(state)
    store.write_table(run.inputs / VARIANT_PARAMS, run.learned, run.learned.schema)
    run.feed_changed = feed_changes(run.con, pages, dedup)
    store.write_table(run.inputs / "marks.parquet", dedup.marks, dedup.marks.schema)
    u = config.update
    demoted = pa.table({
        "host": pa.array(dedup.low_priority_hosts + list(dedup.mirrors), pa.string()),
        "factor": pa.array([u.dup_host_score_factor] * len(dedup.low_priority_hosts)
                           + [u.mirror_score_factor] * len(dedup.mirrors), pa.float32())})
    store.write_table(run.inputs / "demoted_hosts.parquet", demoted, demoted.schema)


def feed_changes(con, pages: pa.Table, dedup) -> pa.Table:
    """The pages feed's candidates (feed.feed_candidates) against the crawl DB's stored
    content hashes of the segment's pages, which the dedup scans gathered."""
    known = dedup.known_hashes if dedup.known_hashes is not None else pa.table(
        {"url": pa.array([], pa.string()), "content_hash": pa.array([], pa.string())})
    con.register("dedup_known", known)
    changed = feed_candidates(con, "dedup_known", pages, dedup)
    con.unregister("dedup_known")
    con.unregister("feed_pages")
    return changed


def route_step(run: UpdateRun) -> None:
    """Every input routed to its bucket, a task per group of chunks (cycles/update/route.py):
    each bucket task then reads only its files."""
    route_segment(run.store, run.config, run.segment, run.manifest.buckets, run.executor, run.counters)


def plan_step(run: UpdateRun) -> None:
    """The optimal schedule's plan: a rate histogram per bucket (tasks), μ solved on their
    sum, at the crawl's own cadence (cycles/update/schedule.py)."""
    if run.config.update.schedule == "optimal":
        run.config = with_learned_cadence(run.store, run.config)
        run.multiplier = plan_refresh(run.store, run.config, run.executor, run.buckets,
                                      run.manifest.schema_version, run.segment, SEEN_SQL, CHANGED_SQL)


def links_step(run: UpdateRun) -> None:
    """The link DB generate ranks by (cycles/update/linkgraph.py). On its own schedule
    (``update.link_rank_interval_s`` > 0, docs/incremental.md) the segment's links are kept as
    pending deltas, merged and ranked by ``crawl compact`` when due; at 0, merged here: a task
    per bucket, then PageRank by rounds of tasks. Then the connection's memory goes to the
    bucket tasks: only the feed's candidate list is kept."""
    store, config, u = run.store, run.config, run.config.update
    if u.link_graph and u.link_rank_interval_s > 0:
        run.counters["linkgraph/pending_files"] = stash_pending_links(store, run.inputs, run.segment,
                                                                      run.manifest.buckets)
    elif u.link_graph:
        links = start_linkdb(store, config, run.inputs, run.manifest.buckets, run.executor.workers, run.counters)
        run.undo.append(lambda: discard_linkdb(store, links))
        linked = run.executor.map(merge_link_bucket, links.tasks) if links else []
        run.undo.pop()  # install_linkdb commits or cleans up on its own
        install_linkdb(store, config, run.executor, links, linked, run.inputs, run.segment, run.counters)
    run.con.close()


def hostdb_step(run: UpdateRun) -> None:
    """The host DB's merge: a routing task per hosts file, then a task per bucket; the swap
    of its CURRENT here (cycles/tables/hostdb.py)."""
    hostdb = start_hostdb(run.store, run.config, run.segment, run.inputs / "hostdb", run.executor.workers)
    run.undo.append(lambda: discard_hostdb(run.store, hostdb))
    run.executor.map(route_host_file, hostdb.routes)
    run.executor.map(merge_host_bucket, hostdb.tasks)
    run.undo.pop()
    install_hostdb(run.store, run.config, hostdb)


def buckets_step(run: UpdateRun) -> None:
    """Each bucket's merge, an :func:`update_bucket` task: its delta (or whole new file) in a
    new version folder, which is discarded if this or a later step fails."""
    store, manifest = run.store, run.manifest
    run.version, folder = store.new_version_dir("crawldb")
    run.undo.append(lambda: store.discard_version("crawldb", run.version))
    delta = writes_delta(run.config, manifest)
    tasks = [UpdateBucketTask(store.uri, run.config, run.segment, bucket, run.buckets[bucket].base,
                              manifest.schema_version, folder, run.now, run.executor.workers, manifest.buckets,
                              refresh_multiplier_s=run.multiplier, old_deltas=run.buckets[bucket].deltas, delta=delta)
             for bucket in range(manifest.buckets)]
    with StepProgress(f"update {run.segment}", len(tasks), "buckets merged", run.config.log.redraw_s,
                      run.config.log.progress_interval_s) as merged:
        for done in run.executor.map(update_bucket, tasks):
            run.written.append(done.pop("file"))
            run.added.update(done)  # update(), not +: a cap that held nothing back still shows 0
            merged.advance()


def feed_step(run: UpdateRun) -> None:
    """The pages feed's batch, before the swap: once the segment counts as applied, what
    changed can no longer be told (a batch written twice is replaced whole)."""
    run.batch = write_feed_batch(run.store, run.segment, seg.segment_dir(run.store, run.segment),
                                 run.feed_changed, run.counters, connect(run.store, run.config))


def install_step(run: UpdateRun) -> None:
    """The dedup state, then the new crawl DB version swapped in (its manifest names each
    bucket's committed file: bases carried over and each bucket's new delta appended, in
    delta mode, docs/incremental.md); the update inputs go."""
    store, manifest = run.store, run.manifest
    run.undo.pop()  # the version is the install's from here: crawl recover handles a crash
    write_state(store, run.dedup_state)
    written, deltas = run.written, None
    if writes_delta(run.config, manifest):
        written, deltas = delta_version_files(manifest, written, run.version)
    install_version(store, run.config, manifest, run.version, manifest.buckets, who="update",
                    applied_segment=run.segment, bucket_files=written, bucket_deltas=deltas)
    store.delete_dir(run.inputs)


UPDATE_STEPS = (dedup_step, route_step, plan_step, links_step, hostdb_step, buckets_step, feed_step, install_step)
"""Update's steps, in order. The failure rule (:func:`run_steps`): a step that raises stops
the update; what earlier steps left uncommitted (``UpdateRun.undo``) is discarded, newest first."""


def run_steps(run: UpdateRun, steps=UPDATE_STEPS) -> None:
    """Run ``steps`` on ``run``; on any error (or interrupt) discard what is registered in
    ``run.undo``, newest first, close the connection and re-raise. What a step committed (the
    link DB's or host DB's install) stays: each is a version of its own, valid alone."""
    try:
        for step in steps:
            step(run)
    except BaseException:
        for undo in reversed(run.undo):
            undo()
        run.con.close()
        raise


def update_segment(store: Store, config: Config, segment: str | None = None,
                   now: dt.datetime | None = None, executor: Executor | None = None) -> UpdateResult:
    """Merge a fetched segment (the oldest fetched, not yet updated one if None) by the steps of
    :data:`UPDATE_STEPS`, under the crawl DB's lock. Every bucket-wide step runs as tasks on
    ``executor`` (cycles/executor.py; default: :func:`cycles.tables.crawldb.bucket_executor`):
    the dedup scans, routing, the schedule's histograms, the link and host DB merges and each
    bucket's merge."""
    segment, state = fetched_segment(store, segment)
    started, started_wall = time.monotonic(), time.time()
    now = now or clock.now()
    with store.lock("crawldb", db=config.db):
        # The footers only: the first round of bucket tasks (dedup.dedup_scan) verifies
        # each bucket's page checksums before anything reads its rows.
        manifest, buckets = current_buckets(store, verify=False)
        if manifest is None:
            raise StageError(f"update: there is no crawl DB in {store.uri}; run `crawl inject` first")
        if segment in manifest.applied_segments:
            if state != "updated":  # a crash between the swap and the marker: finish the job
                seg.write_marker(store, seg.Updated(segment, updated_at=now.isoformat()))
            return UpdateResult(segment, False, Counter(), reason="already applied; nothing changed")
        seg.verify_fetched(store, segment)  # before anything is written: a lost chunk fails here
        run = UpdateRun(store, config, segment, now, manifest, buckets,
                        bucket_executor(store, config, [b.base for b in buckets], executor), connect(store, config))
        run_steps(run)
    return finish_update(run, started, started_wall)


def finish_update(run: UpdateRun, started: float, started_wall: float) -> UpdateResult:
    """The counters and stats of an applied update, its marker and its metrics."""
    store, config, counters, added = run.store, run.config, run.counters, run.added
    links_rows = added.pop("links", 0)
    added.pop("rows", None)
    counters["outlinks/new"] += added.pop("new", 0)
    counters.update(added)
    counters["outlinks/known"] += links_rows - counters["outlinks/new"] - added["trap/pattern_cap"] - added["trap/host_cap"]
    # Duration and rate beside the counters (cycles/metrics.py); the result keeps the counters alone.
    stats = {**counters, **metrics.update_summary(counters, time.monotonic() - started)}
    # Where the copies are, for the operator (not counters: the metrics take numbers only):
    # this update's marks by host, the mirror hosts it found, the variant parameters learned.
    dedup, learned = run.dedup, run.learned
    stats |= {"dedup/per_host": dedup.per_host, "dedup/mirrors": dict(sorted(dedup.mirrors.items())),
              "dedup/variant_params": [[h, p] for h, p in zip(learned["host"].to_pylist(), learned["param"].to_pylist())]}
    if run.multiplier is not None:  # the optimal schedule's plan, for the operator (not a counter)
        stats |= {"update/plan_cycle_s": config.update.cycle_interval_s, "update/plan_multiplier_s": round(run.multiplier, 1)}
    seg_dir = seg.segment_dir(store, run.segment)
    store.write_json(seg.stats_file(seg_dir, "update"), dict(sorted(stats.items())))
    if dedup.mirrors:
        store.write_json(seg.stats_file(seg_dir, "mirrors"), dedup.mirrors)
    seg.write_marker(store, seg.Updated(run.segment, updated_at=run.now.isoformat(), new_urls=counters["outlinks/new"],
                                        results=counters["update/results"], feed_batch=run.batch))
    metrics.publish(store, config, "update", metrics.update_families(stats, run.segment, started_wall))
    metrics.publish_crawldb(store, config)
    return UpdateResult(run.segment, True, counters)
