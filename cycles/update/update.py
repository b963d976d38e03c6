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
                            current_buckets, install_version, new_url_rows_sql, pattern_hash_sql, write_bucket)
from cycles.executor import Executor
from cycles.errors import StageError
from cycles.storage.store import Store, StorePath, new_id
from cycles.update.dedup import (find_segment_duplicates, learn_variants, learned_params, read_state,
                                 variant_evidence, variant_rows, write_state)
from cycles.update.feed import feed_candidates, write_feed_batch
from cycles.tables.hostdb import discard_hostdb, install_hostdb, merge_host_bucket, route_host_file, start_hostdb
from cycles.progress import StepProgress
from cycles.update.linkgraph import discard_linkdb, install_linkdb, merge_link_bucket, stash_pending_links, start_linkdb
from cycles.update.route import (ROUTED_FETCHED, ROUTED_LINKS, resolved_fetched_sql, route_segment, routed_files,
                                  routed_source)
from cycles.update.schedule import plan_refresh, prepare_schedule, schedule_for, unchanged_after_sql, with_learned_cadence
from cycles.update.sitemaps import hinted_sql, lastmod_due_count


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


def transition_sql(config: Config, multiplier_s: float | None = None) -> str:
    """SELECT list computing each row's new state from its old row (db) and result (f).

    ``multiplier_s``: the optimal schedule's plan (schedule.plan_refresh), if any.

    The transitions (f.outcome → new status, next fetch):
      ok            → fetched; interval from the configured schedule (cycles/update/schedule.py;
                      by default the page's change rate, see UpdateConfig.revisit_factor)
      not_modified  → not_modified, counted as an unchanged visit
      redirect      → redirected, redirect_to set, refetched after the default interval
      gone, client_error → gone, refetched after update.gone_interval_s
      robots_denied → robots_denied, looked at again after the default interval
      not_html, too_large → skipped, refetched after update.max_interval_s
      server_error, network_error, parse_error, tls_failed → error with retries + 1, exponential
                      retry; after update.max_retries in a row → dead (dead letter)
      blocked       → blocked (address not public: SSRF guard), looked at again after
                      update.gone_interval_s; not a failure (no retries, never dead)
      deferred              → status kept, due again after update.deferred_retry_s
      no result             → unchanged (it was due when generated, so it is due again)
      a result older than the row's last_fetched → unchanged (counted as update/stale_result)
    """
    u, S = config.update, schema.DbStatus
    fail = "f.outcome IN ('server_error', 'network_error', 'parse_error', 'tls_failed')"
    ok = "f.outcome = 'ok'"
    seen_ok, changed = SEEN_SQL, CHANGED_SQL
    interval = schedule_for(config, multiplier_s).interval_sql(seen_ok, changed)
    retries = f"CASE WHEN {fail} THEN db.retries + 1 WHEN f.outcome IS NULL OR f.outcome = 'deferred' THEN db.retries ELSE 0 END"
    # A result older than what the row already holds (a segment updated late, after a newer
    # one) changes nothing: applying it would move last_fetched, the validators and the
    # schedule back in time.
    stale = "coalesce(f.fetched_at < db.last_fetched, false)"
    columns = [
        ("status", f"""CASE
                WHEN f.outcome IS NULL OR f.outcome = 'deferred' THEN db.status
                WHEN {ok} THEN '{S.FETCHED}'
                WHEN f.outcome = 'not_modified' AND db.status IN ('{S.DUPLICATE}', '{S.NEAR_DUPLICATE}') THEN db.status
                WHEN f.outcome = 'not_modified' THEN '{S.NOT_MODIFIED}'
                WHEN f.outcome = 'redirect' THEN '{S.REDIRECTED}'
                WHEN f.outcome IN ('gone', 'client_error') THEN '{S.GONE}'
                WHEN f.outcome = 'robots_denied' THEN '{S.ROBOTS_DENIED}'
                WHEN f.outcome IN ('not_html', 'too_large') THEN '{S.SKIPPED}'
                WHEN f.outcome = 'blocked' THEN '{S.BLOCKED}'
                WHEN {fail} AND db.retries + 1 >= {u.max_retries} THEN '{S.DEAD}'
                ELSE '{S.ERROR}' END"""),
        ("first_fetched", f"coalesce(db.first_fetched, CASE WHEN {seen_ok} THEN f.fetched_at END)"),
        ("last_fetched", "coalesce(f.fetched_at, db.last_fetched)"),
        ("next_fetch", f"""CASE
                WHEN f.outcome IS NULL THEN db.next_fetch
                WHEN f.outcome = 'deferred' THEN $now + to_seconds({u.deferred_retry_s})
                WHEN {seen_ok} THEN f.fetched_at + to_seconds(({interval})::BIGINT)
                WHEN f.outcome = 'redirect' THEN f.fetched_at + to_seconds({u.default_interval_s})
                WHEN f.outcome IN ('gone', 'client_error') THEN f.fetched_at + to_seconds({u.gone_interval_s})
                WHEN f.outcome = 'robots_denied' THEN $now + to_seconds({u.default_interval_s})
                WHEN f.outcome IN ('not_html', 'too_large') THEN coalesce(f.fetched_at, $now) + to_seconds({u.max_interval_s})
                WHEN f.outcome = 'blocked' THEN $now + to_seconds({u.gone_interval_s})
                WHEN {fail} AND db.retries + 1 >= {u.max_retries} THEN coalesce(f.fetched_at, $now) + to_seconds({u.dead_retry_s})
                WHEN {fail} THEN coalesce(f.fetched_at, $now) + to_seconds(({u.retry_s} * (1 << least(db.retries, {u.max_retry_doublings})))::BIGINT)
                ELSE db.next_fetch END"""),
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
    return f"""
        db.* REPLACE (
            {replaced}
        )"""


def trap_limited_sql(new: str, old: str, config: Config) -> str:
    """New URLs that fit under the per-host total cap and the per-pattern cap.

    Existing URLs of the host (and of the pattern) count first; among the new ones the
    shallowest are kept.
    """
    u = config.update
    return f"""
        WITH n AS (SELECT *, {pattern_hash_sql('url')} AS pattern FROM {new}),
        patterns AS (SELECT o.host, o.pattern_hash AS pattern, count(*) AS have
                     FROM {old} o SEMI JOIN n ON o.host = n.host GROUP BY ALL),
        hosts AS (SELECT host, sum(have) AS have FROM patterns GROUP BY host),
        ranked AS (
            SELECT n.*, coalesce(h.have, 0) + row_number() OVER (PARTITION BY n.host ORDER BY n.depth, n.url) AS host_rank,
                   coalesce(p.have, 0) + row_number() OVER (PARTITION BY n.host, n.pattern ORDER BY n.depth, n.url) AS pattern_rank
            FROM n LEFT JOIN hosts h ON n.host = h.host
                   LEFT JOIN patterns p ON n.host = p.host AND n.pattern = p.pattern)
        SELECT * EXCLUDE (pattern), pattern_rank > {int(u.max_urls_per_pattern)} AS over_pattern,
               host_rank > {int(u.max_urls_per_host_total)} AS over_host
        FROM ranked"""


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
class UpdateBucketTask:
    """Everything one bucket's merge needs: locations, ids and the config (picklable)."""

    store_uri: str
    config: Config
    segment: str
    bucket: int
    old_file: StorePath
    schema_version: int
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


def touched_rows_sql(con, old: str, hints: bool, variants: bool = False, recheck_before=None) -> str:
    """The old rows (``old``) an update may change, for a delta (:class:`UpdateBucketTask`
    ``delta``): those with a fetch result, a dedup mark or a sitemap hint (``hints``), the
    unfetched rows of a demoted host (their score changes), and the rows carrying a variant
    parameter learned on their host (``variants``: temp table ``variant_urls``) that
    :func:`with_variants_set_aside` changes: the unfetched ones (they become duplicates) and the
    copies due before ``recheck_before`` (now + half of ``update.variant_recheck_s``: their next
    fetch is pushed on again, so a delta rewrites each at most twice a recheck period). Every other row comes out of the update as it went in, so the delta
    leaves it to the base. The URLs are gathered into a temp table first, so the base is
    probed once against a small set."""
    hinted = "UNION SELECT url FROM sitemap_hints" if hints else ""
    if variants:
        S = schema.DbStatus
        hinted += (f" UNION SELECT o.url FROM {old} o SEMI JOIN variant_urls v ON o.url = v.url"
                   f" WHERE o.status = '{S.UNFETCHED}' OR (o.status IN ('{S.DUPLICATE}', '{S.NEAR_DUPLICATE}')"
                   f" AND o.next_fetch < TIMESTAMPTZ '{recheck_before.isoformat()}')")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE touched AS
        SELECT url FROM fetched_all UNION SELECT url FROM marks {hinted}
        UNION SELECT o.url FROM {old} o SEMI JOIN demoted_hosts h ON o.host = h.host
        WHERE o.status = '{schema.DbStatus.UNFETCHED}'""")
    return f"(SELECT o.* FROM {old} o SEMI JOIN touched t ON o.url = t.url)"


def update_bucket(task: UpdateBucketTask) -> dict:
    """Merge one bucket: its old rows, its fetch results and its new outlinks → its new file.

    Reads only this bucket's files (the old bucket; ``update/results|links|sitemaps/bucket-N/``,
    one file per group of chunks routed by cycles/update/route.py, merged here) and the
    segment's small marks tables; writes only ``new_folder/bucket-N.<attempt>.parquet``.
    Returns counts (rows, new URLs, URLs over a trap cap …) and ``file``, the name written.
    """
    store, config = Store(task.store_uri), task.config
    con = connect(store, config, task.workers)
    inputs = seg.segment_dir(store, task.segment) / seg.UPDATE_INPUTS
    old = bucket_source_sql(store, con, BucketFiles(task.old_file, tuple(task.old_deltas)), task.schema_version)
    results = load_bucket_results(con, store, inputs, task.bucket)
    links_rows, too_deep = load_bucket_links(con, store, inputs, task.bucket, config)
    # A URL marked twice keeps one mark: an exact copy before a near one, then the first canonical.
    con.execute(f"""CREATE TEMP TABLE marks AS SELECT * FROM {store.duckdb_source(con, [inputs / 'marks.parquet'])}
        QUALIFY row_number() OVER (PARTITION BY url ORDER BY kind = 'duplicate' DESC, canonical) = 1""")
    # A host both mirror and duplicate-heavy gets the smaller of its factors, once.
    con.execute(f"""CREATE TEMP TABLE demoted_hosts AS SELECT host, min(factor) AS factor FROM
        {store.duckdb_source(con, [inputs / 'demoted_hosts.parquet'])} GROUP BY host""")
    prepare_schedule(con, config, old)
    # Results for URLs the crawl DB does not hold (redirect targets and links discovered
    # inside the fetch, cycles/fetch/discovery.py) become rows of their own; their score and
    # depth come from the link that led to them.
    con.execute(f"""CREATE TEMP TABLE fetched_new AS
        SELECT f.url, f.host, f.host_hash, coalesce(l.score, {float(config.update.redirect_target_score)}) AS score,
               coalesce(l.depth, {int(config.update.max_depth)}) AS depth
        FROM fetched_all f ANTI JOIN {old} o USING (url) LEFT JOIN links_all l USING (url)""")
    # Those rows count against the trap caps like the old ones: the fetch kept within the
    # caps when it took them (cycles/fetch/discovery.py), and the new outlinks fill the rest.
    known = (f"(SELECT host, pattern_hash FROM {old} UNION ALL "
             f"SELECT host, {pattern_hash_sql('url')} AS pattern_hash FROM fetched_new)")
    con.execute(f"""CREATE TEMP TABLE candidates AS
        {trap_limited_sql(f"(SELECT l.* FROM links_all l ANTI JOIN {old} o USING (url) ANTI JOIN fetched_all f USING (url))", known, config)}""")
    stale = con.execute(f"SELECT count(*) FROM fetched_all f JOIN {old} o USING (url) "
                        "WHERE f.fetched_at < o.last_fetched").fetchall()[0][0]
    over_pattern, over_host, kept = con.execute("""SELECT count(*) FILTER (WHERE over_pattern),
        count(*) FILTER (WHERE over_host AND NOT over_pattern), count(*) FILTER (WHERE NOT over_pattern AND NOT over_host)
        FROM candidates""").fetchall()[0]
    hint_files = routed_files(store, inputs, "sitemaps", task.bucket)
    variants = load_variant_urls(con, store, inputs, old)
    changed = old
    if task.delta:
        if hint_files:
            load_sitemap_hints(con, store, hint_files)
        recheck_before = task.now + dt.timedelta(seconds=config.update.variant_recheck_s / 2)
        changed = touched_rows_sql(con, old, bool(hint_files), variants, recheck_before)
    sql = f"""
        SELECT n.* REPLACE (
            coalesce(d.kind, n.status) AS status,
            CASE WHEN d.kind IS NOT NULL THEN d.canonical
                 WHEN n.f_outcome = 'ok' THEN NULL ELSE n.duplicate_of END AS duplicate_of,
            CASE WHEN h.factor IS NOT NULL AND n.status = '{schema.DbStatus.UNFETCHED}' THEN n.score * h.factor ELSE n.score END AS score)
        FROM (
            SELECT {transition_sql(config, task.refresh_multiplier_s)},
                   CASE WHEN f.fetched_at < db.last_fetched THEN NULL ELSE f.outcome END AS f_outcome
            FROM (SELECT * FROM {changed} UNION ALL BY NAME {new_url_rows_sql('fetched_new', config)}) db
            LEFT JOIN fetched_all f ON db.url = f.url
            UNION ALL BY NAME
            SELECT *, NULL::VARCHAR AS f_outcome FROM ({new_url_rows_sql('(SELECT * FROM candidates WHERE NOT over_pattern AND NOT over_host)', config)})
        ) n
        LEFT JOIN marks d ON n.url = d.url
        LEFT JOIN demoted_hosts h ON n.host = h.host"""
    sql, variants_skipped = with_variants_set_aside(con, sql, old, config) if variants else (sql, 0)
    lastmod_due = 0
    if hint_files:  # the segment's sitemaps gave hints (cycles/update/sitemaps.py)
        load_sitemap_hints(con, store, hint_files)
        lastmod_due = lastmod_due_count(con, old, "sitemap_hints", "fetched_all", task.now)
        sql = hinted_sql(sql, "sitemap_hints", config)
    # A name of this attempt's own: a task run twice (its worker lost, the task retried
    # elsewhere while the first still ran) never writes over the other attempt's file; the
    # coordinator's manifest names the one it committed (crawldb.install_version).
    name = attempt_delta_name(task.bucket) if task.delta else attempt_bucket_name(task.bucket)
    rows = write_bucket(store, con, sql, task.new_folder / name, task.now, bucket=task.bucket, buckets=task.buckets)
    con.close()
    if task.delta and rows == 0:  # nothing of the bucket changed: no delta file
        store.delete(task.new_folder / name)
        name = None
    return {"rows": rows, "new": kept, "trap/pattern_cap": over_pattern, "trap/host_cap": over_host,
            "update/stale_result": stale, "sitemap/lastmod_due": lastmod_due, "update/results": results,
            "links": links_rows, "filter/max_depth": too_deep, "dedup/variant_skipped": variants_skipped,
            "file": name}


VARIANT_PARAMS = "variant_params.parquet"
"""In the segment's update inputs: (host, param) of the variant parameters learned so far
(cycles/update/dedup.py ``learn_variants``), written by the coordinator for the bucket tasks."""


def load_variant_urls(con, store: Store, inputs: StorePath, old: str) -> bool:
    """Temp table ``variant_urls`` (url, base): the bucket's URLs (old rows, this segment's
    new pages and outlinks) that carry a variant parameter learned on their host
    (cycles/update/dedup.py ``learn_variants``), with the URL without it. False when no
    parameter is learned (no table)."""
    path = inputs / VARIANT_PARAMS
    if not store.exists(path):
        return False
    learned = store.read_table(path)
    if learned.num_rows == 0:
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
    fresh = f"x.status = '{S.UNFETCHED}' AND v.url IS NOT NULL"
    wrapped = f"""
        SELECT x.* REPLACE (
            CASE WHEN {fresh} THEN '{S.DUPLICATE}' ELSE x.status END AS status,
            CASE WHEN {fresh} THEN v.base ELSE x.duplicate_of END AS duplicate_of,
            CASE WHEN v.url IS NOT NULL AND x.status IN ('{S.UNFETCHED}', '{S.DUPLICATE}', '{S.NEAR_DUPLICATE}')
                 THEN greatest(x.next_fetch, $now + to_seconds({int(config.update.variant_recheck_s)}))
                 ELSE x.next_fetch END AS next_fetch)
        FROM ({sql}) x LEFT JOIN variant_urls v ON x.url = v.url"""
    skipped = con.execute(f"""SELECT count(*) FROM variant_urls v JOIN (SELECT url, status FROM {old}
        UNION ALL SELECT url, '{S.UNFETCHED}' FROM candidates WHERE NOT over_pattern AND NOT over_host) o USING (url)
        WHERE o.status = '{S.UNFETCHED}'""").fetchall()[0][0]
    return wrapped, skipped


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
    too_deep = con.execute(f"SELECT count(*) FROM links_merged WHERE depth > {max_depth}").fetchall()[0][0]
    con.execute(f"""CREATE TEMP TABLE links_all AS
        SELECT url, host, host_hash, (1.0::DOUBLE / (depth::DOUBLE + 1.0))::FLOAT AS score, depth::SMALLINT AS depth
        FROM links_merged WHERE depth <= {max_depth}""")
    con.execute("DROP TABLE links_merged")
    return con.execute("SELECT count(*) FROM links_all").fetchall()[0][0], too_deep


def writes_delta(config: Config, manifest) -> bool:
    """Whether this update writes deltas (``db.delta_updates``): not over a crawl DB of an
    older schema, which a whole rewrite upgrades first (deltas are in the current schema)."""
    return config.db.delta_updates and manifest.schema_version == schema.SCHEMA_VERSION


def update_segment(store: Store, config: Config, segment: str | None = None,
                   now: dt.datetime | None = None, executor: Executor | None = None) -> UpdateResult:
    """Merge a fetched segment (the oldest fetched, not yet updated one if None).

    Dedup scans the buckets in
    :func:`cycles.update.dedup.dedup_scan` tasks, each over a group of buckets (the first
    round: they verify the bucket files), and joins only the segment's matches here;
    outlink preparation and routing inputs to
    buckets are :func:`cycles.update.route.route_chunks` tasks, one per group of fetch
    chunks, each bucket's merge is an :func:`update_bucket` task and each bucket's link DB
    merge a :func:`cycles.update.linkgraph.merge_link_bucket` task, all run by
    ``executor`` (cycles/executor.py; default: :func:`cycles.tables.crawldb.bucket_executor`).
    The manifest installed names each bucket's committed file.
    """
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
    counters: Counter = Counter()
    started, started_wall = time.monotonic(), time.time()
    now = now or clock.now()
    seg_dir = seg.segment_dir(store, segment)
    with store.lock("crawldb", db=config.db):
        # The footers only: the first round of bucket tasks (dedup.dedup_scan) verifies
        # each bucket's page checksums before anything reads its rows.
        manifest, buckets = current_buckets(store, verify=False)
        files = [b.base for b in buckets]
        if manifest is None:
            raise StageError(f"update: there is no crawl DB in {store.uri}; run `crawl inject` first")
        if segment in manifest.applied_segments:
            if state != "updated":  # a crash between the swap and the marker: finish the job
                seg.write_marker(store, seg.Updated(segment, updated_at=now.isoformat()))
            return UpdateResult(segment, False, counters, reason="already applied; nothing changed")
        seg.verify_fetched(store, segment)  # before anything is written: a lost chunk fails here
        con = connect(store, config)
        inputs = seg_dir / seg.UPDATE_INPUTS
        executor = bucket_executor(store, config, files, executor)
        pages = stored_pages(seg_dir, store, con)
        # Each bucket scanned for the segment's pages by a task (cycles/update/dedup.py);
        # here only the segment's pages and their matches are joined.
        # Mirrors found by earlier updates (their pages are never canonical) and the variant
        # parameters learned so far, kept beside the crawl DB (dedup.STATE_FILE).
        state = read_state(store)
        dedup = find_segment_duplicates(store, config, con, executor, buckets, manifest.schema_version,
                                        inputs, pages, counters, state["mirrors"])
        if state["segment"] != segment:  # a retried update counts its evidence once
            learn_variants(state, variant_evidence(pages, dedup.marks), config.update, counters)
            state["mirrors"].update(dedup.mirrors)
            state["segment"] = segment
        learned = learned_params(state)
        store.write_table(inputs / VARIANT_PARAMS, learned, learned.schema)
        known = dedup.known_hashes if dedup.known_hashes is not None else pa.table(
            {"url": pa.array([], pa.string()), "content_hash": pa.array([], pa.string())})
        con.register("dedup_known", known)
        changed = feed_candidates(con, "dedup_known", pages, dedup)
        con.unregister("dedup_known")
        con.unregister("feed_pages")
        del pages
        # The marks before the routing tasks: they leave out the outlinks of exact copies.
        store.write_table(inputs / "marks.parquet", dedup.marks, dedup.marks.schema)
        demoted = pa.table({
            "host": pa.array(dedup.low_priority_hosts + list(dedup.mirrors), pa.string()),
            "factor": pa.array([config.update.dup_host_score_factor] * len(dedup.low_priority_hosts)
                               + [config.update.mirror_score_factor] * len(dedup.mirrors), pa.float32())})
        store.write_table(inputs / "demoted_hosts.parquet", demoted, demoted.schema)
        # Route every input to its bucket, a task per group of chunks on the bucket tasks'
        # executor (cycles/update/route.py): each bucket is then a task reading only its files.
        route_segment(store, config, segment, manifest.buckets, executor, counters)
        # The optimal schedule's plan: a rate histogram per bucket (tasks on the same
        # executor), μ solved here on their sum, at the crawl's own cadence (schedule.py).
        multiplier = None
        if config.update.schedule == "optimal":
            config = with_learned_cadence(store, config)
            multiplier = plan_refresh(store, config, executor, buckets, manifest.schema_version, segment,
                                      SEEN_SQL, CHANGED_SQL)
        if config.update.link_graph and config.update.link_rank_interval_s > 0:
            # The link DB on its own schedule (docs/incremental.md): the segment's links kept
            # as pending deltas, merged and ranked by `crawl compact` when due.
            counters["linkgraph/pending_files"] = stash_pending_links(store, inputs, segment, manifest.buckets)
        elif config.update.link_graph:  # the link DB generate ranks by (cycles/update/linkgraph.py)
            # Each bucket's in-links merged by a task on the bucket tasks' executor, then
            # the host graph and its PageRank by rounds of tasks on it; only the install here.
            links = start_linkdb(store, config, inputs, manifest.buckets, executor.workers, counters)
            try:
                linked = executor.map(merge_link_bucket, links.tasks) if links else []
            except BaseException:
                discard_linkdb(store, links)
                raise
            install_linkdb(store, config, executor, links, linked, inputs, segment, counters)
        # The bucket tasks get the memory now: nothing of the segment-wide steps but the
        # feed's candidate list is kept while they run.
        con.close()
        # The host DB's merge: a routing task per hosts file, then a task per bucket, on the
        # same executor; the swap of its CURRENT here (cycles/tables/hostdb.py).
        hostdb = start_hostdb(store, config, segment, inputs / "hostdb", executor.workers)
        try:
            executor.map(route_host_file, hostdb.routes)
            executor.map(merge_host_bucket, hostdb.tasks)
        except BaseException:
            discard_hostdb(store, hostdb)
            raise
        install_hostdb(store, config, hostdb)
        version, folder = store.new_version_dir("crawldb")
        delta = writes_delta(config, manifest)
        tasks = [UpdateBucketTask(store.uri, config, segment, bucket, files[bucket], manifest.schema_version,
                                  folder, now, executor.workers, manifest.buckets,
                                  refresh_multiplier_s=multiplier, old_deltas=buckets[bucket].deltas, delta=delta)
                 for bucket in range(manifest.buckets)]
        try:
            added = Counter()
            written: list[str] = []
            with StepProgress(f"update {segment}", len(tasks), "buckets merged", config.log.redraw_s,
                              config.log.progress_interval_s) as merged:
                for done in executor.map(update_bucket, tasks):
                    written.append(done.pop("file"))
                    added.update(done)  # update(), not +: a cap that held nothing back still shows 0
                    merged.advance()
            # The feed batch before the swap: once the segment counts as applied, what
            # changed can no longer be told (a batch written twice is replaced whole).
            batch = write_feed_batch(store, segment, seg_dir, changed, counters, connect(store, config))
        except BaseException:
            store.discard_version("crawldb", version)
            raise
        write_state(store, state)
        deltas = None
        if delta:  # bases carried over, each bucket's new delta appended (docs/incremental.md)
            written, deltas = delta_version_files(manifest, written, version)
        install_version(store, config, manifest, version, manifest.buckets, who="update", applied_segment=segment,
                        bucket_files=written, bucket_deltas=deltas)
        store.delete_dir(inputs)
    links_rows = added.pop("links", 0)
    added.pop("rows", None)
    counters["outlinks/new"] += added.pop("new", 0)
    counters.update(added)
    counters["outlinks/known"] += links_rows - counters["outlinks/new"] - added["trap/pattern_cap"] - added["trap/host_cap"]
    # Duration and rate beside the counters (cycles/metrics.py); the result keeps the counters alone.
    stats = {**counters, **metrics.update_summary(counters, time.monotonic() - started)}
    # Where the copies are, for the operator (not counters: the metrics take numbers only):
    # this update's marks by host, the mirror hosts it found, the variant parameters learned.
    stats |= {"dedup/per_host": dedup.per_host, "dedup/mirrors": dict(sorted(dedup.mirrors.items())),
              "dedup/variant_params": [[h, p] for h, p in zip(learned["host"].to_pylist(), learned["param"].to_pylist())]}
    if multiplier is not None:  # the optimal schedule's plan, for the operator (not a counter)
        stats |= {"update/plan_cycle_s": config.update.cycle_interval_s, "update/plan_multiplier_s": round(multiplier, 1)}
    store.write_json(seg.stats_file(seg_dir, "update"), dict(sorted(stats.items())))
    if dedup.mirrors:
        store.write_json(seg.stats_file(seg_dir, "mirrors"), dedup.mirrors)
    seg.write_marker(store, seg.Updated(segment, updated_at=now.isoformat(), new_urls=counters["outlinks/new"],
                                        results=counters["update/results"], feed_batch=batch))
    metrics.publish(store, config, "update", metrics.update_families(stats, segment, started_wall))
    metrics.publish_crawldb(store, config)
    return UpdateResult(segment, True, counters)
