"""``crawl generate``: choose the due URLs, lease them, write a partitioned fetch list.

A URL is due when its ``next_fetch`` has passed and no live lease holds it. Among due URLs
the highest priority comes first (importance raised by how overdue the URL is; importance
from links — its host's PageRank and the distinct hosts linking to it, the link DB update
builds — or, with ``generate.ranking = 'depth'``, 1/(depth+1)), at most
``generate.max_urls_per_pattern`` per URL pattern of a host (traps), at most a budget per
host (``generate.max_urls_per_host``, scaled by the host's importance) and
``generate.top_n`` in all. While a consumer
of the pages feed lags, the list shrinks or is held (cycles/pages.py). The chosen URLs are
written to ``segments/<id>/fetchlist/part-NNNNN.parquet``, every host in exactly one
partition — so it is fetched by exactly one process — the partitions balanced by expected
fetch time (URLs × host delay; cycles/generate/assign.py, which also writes each
partition's seen-set for discovery inside the fetch), ordered by host, then score. The fetch list is the
lease (cycles/leases.py): until the segment is updated or ``now + lease_s`` passes, its
URLs are not generated again. Generate only reads the crawl DB; it never rewrites it.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from cycles import clock, metrics, schema
from cycles import segment as seg
from cycles.config import Config
from cycles.crawldb import bucket_executor, connect, current_bucket_files, upgraded_sql
from cycles.errors import StageError
from cycles.executor import Executor
from cycles.fetch.newhosts import leave_out_claimed
from cycles.generate.assign import plan_partitions, write_seen_sets
from cycles.leases import in_flight_files, leased_hosts_sql, leased_urls_sql, live_lease_files
from cycles.pages import feed_lag
from cycles.store import Store, StorePath, new_id
from cycles.update.linkgraph import current_link_files


@dataclass
class GenerateResult:
    segment: str | None
    urls: int
    hosts: int
    partitions: int
    reason: str = ""
    """Why no segment was made, when none was."""


def priority_sql(config: Config) -> str:
    """Importance (score) raised by how overdue a URL is, in units of its own refetch interval
    (at most 1 + ``generate.overdue_max_boost`` times, 5× by default): a page twice past its
    due time outranks an equally scored page due now."""
    g = config.generate
    return (f"score * (1 + least({g.overdue_max_boost:g}, epoch($now - next_fetch) / "
            f"greatest(fetch_interval_s, {int(g.overdue_min_interval_s)})))")


def link_score_sql(config: Config) -> str:
    """A URL's importance by links (``generate.ranking = 'links'``), over the crawl DB row
    (db), its LINK_URLS row (u) and its host's LINK_HOSTS row (h), both possibly missing.

    ln(1 + host importance) and ln(1 + distinct linking hosts), so that a host a thousand
    times as linked as another does not bury every other host; 1/(depth + 1) orders the
    pages nobody else links to. The crawl DB's score is 1/(depth + 1) times what else set
    it (update's demotions of duplicate-heavy and mirror hosts, an operator's change), so
    it enters as the factor score × (depth + 1): 1 for a plain row."""
    g = config.generate
    unknown = 1.0 - config.update.link_damping  # a host nobody links to (yet)
    return (f"(({g.link_host_weight!r} * ln(1 + coalesce(h.importance, {unknown!r}))"
            f" + {g.link_inlink_weight!r} * ln(1 + coalesce(u.inlink_hosts, 0))"
            f" + {g.link_depth_weight!r} / (db.depth + 1))"
            f" * db.score * (db.depth + 1))::FLOAT")


def host_importance_sql(config: Config) -> str:
    """A host's importance (LINK_HOSTS h, possibly missing) for its fetch-list budget."""
    return f"coalesce(h.importance, {1.0 - config.update.link_damping!r})"


def ranked_by_links_sql(source: str, url_source: str, host_source: str, config: Config) -> str:
    """``source`` (crawl DB rows) with ``score`` replaced by :func:`link_score_sql` and the
    host's importance added as ``host_importance``."""
    return f"""(SELECT db.* REPLACE ({link_score_sql(config)} AS score),
                       {host_importance_sql(config)} AS host_importance
                FROM {source} db LEFT JOIN {url_source} u ON u.url = db.url
                LEFT JOIN {host_source} h ON h.host = db.host)"""


def host_budget_sql(config: Config) -> str:
    """How many URLs of a host one fetch list may hold: ``max_urls_per_host``, or with
    ``ranking = 'links'`` that × the host's importance within [host_budget_min_factor,
    host_budget_max_factor] (at least 1). The source must then carry ``host_importance``."""
    g = config.generate
    if g.ranking != "links":
        return str(int(g.max_urls_per_host))
    return (f"greatest(1, round({int(g.max_urls_per_host)} * least({g.host_budget_max_factor!r}, "
            f"greatest({g.host_budget_min_factor!r}, host_importance))))")


def due_sql(source: str, leased: str, config: Config, top_n: int) -> str:
    """SQL of the due URLs to fetch next, best first, capped per host (:func:`host_budget_sql`)
    and pattern and in total, with their priority and due time; ``$now`` is left to bind.
    ``leased``: SQL source of the URLs leased to live segments (cycles/leases.py). With
    ``generate.ranking = 'links'`` ``source`` is :func:`ranked_by_links_sql`'s."""
    priority = priority_sql(config)
    importance = ", host_importance" if config.generate.ranking == "links" else ""
    return f"""
        SELECT url, host, host_hash, score, depth, etag, last_modified, priority, next_fetch
        FROM (
            SELECT *, row_number() OVER (PARTITION BY host ORDER BY priority DESC, next_fetch, url) AS host_rank
            FROM (
                -- Only the columns needed: the windows would otherwise carry whole rows.
                SELECT url, host, host_hash, score, depth, etag, last_modified, next_fetch{importance},
                       {priority} AS priority,
                       row_number() OVER (PARTITION BY host, pattern_hash
                                          ORDER BY {priority} DESC, next_fetch, url) AS pattern_rank
                FROM {source}
                WHERE next_fetch <= $now AND url NOT IN (SELECT url FROM {leased})
            )
            WHERE pattern_rank <= {int(config.generate.max_urls_per_pattern)}
        )
        WHERE host_rank <= {host_budget_sql(config)}
        ORDER BY priority DESC, next_fetch, url
        LIMIT {int(top_n)}"""


@dataclass(frozen=True)
class GenerateBucketTask:
    """One bucket's choice of due URLs: locations, ids and the config (picklable)."""

    store_uri: str
    config: Config
    bucket: int
    file: StorePath
    schema_version: int
    lease_files: tuple
    now: dt.datetime
    top_n: int
    out: StorePath
    workers: int = 1
    link_urls: tuple = ()
    """The link DB's LINK_URLS files holding this bucket's URLs (cycles/update/linkgraph.py)."""
    link_hosts: StorePath | None = None
    """The link DB's LINK_HOSTS file; None: no link DB yet (every host ranks alike)."""
    host_lease_files: tuple = ()
    """Fetch lists whose hosts are left out whole (``crawl run``: segments in flight)."""


def select_bucket_due(task: GenerateBucketTask) -> int:
    """Write the bucket's best ``top_n`` due URLs to ``task.out``; returns how many.

    A host lives in one bucket, so the per-host and per-pattern caps hold bucket by
    bucket, and the best ``top_n`` overall are among the buckets' best ``top_n``.
    """
    store = Store(task.store_uri)
    con = connect(store, task.config, task.workers)
    source = upgraded_sql(store.duckdb_source(con, [task.file]), task.schema_version)
    if task.host_lease_files:
        # A host being fetched by an earlier segment must not be in this one too: two
        # fetches of it at once would break its spacing (cycles/run.py).
        source = (f"(SELECT * FROM {source} WHERE host NOT IN "
                  f"(SELECT host FROM {leased_hosts_sql(store, con, list(task.host_lease_files))}))")
    if task.config.generate.ranking == "links":
        source = ranked_by_links_sql(source, link_source(store, con, task.link_urls, schema.LINK_URLS),
                                     link_source(store, con, (task.link_hosts,) if task.link_hosts else (),
                                                 schema.LINK_HOSTS), task.config)
    leased = leased_urls_sql(store, con, list(task.lease_files))
    reader = con.sql(due_sql(source, leased, task.config, task.top_n),
                     params={"now": task.now}).to_arrow_reader(64 * 1024)
    rows = store.write_batches(task.out, reader, reader.schema)
    con.close()
    return rows


def link_source(store: Store, con, files: tuple, table_schema) -> str:
    """SQL source over link DB files, or an empty table of their schema when there are none."""
    if files:
        return store.duckdb_source(con, list(files))
    name = f"no_{table_schema.metadata[b'crawl.schema'].decode().replace('-', '_')}"
    con.register(name, table_schema.empty_table())
    return name


def apply_feed_backpressure(store: Store, config: Config, top_n: int) -> tuple[int, str]:
    """Shrink or hold the next fetch list while an indexer is behind on the pages feed."""
    limit = config.generate.feed_max_lag_cycles
    if limit <= 0:
        return top_n, ""
    consumer, lag = feed_lag(store)
    if lag >= limit:
        return 0, (f"held: pages-feed consumer {consumer!r} is {lag} batches behind "
                   f"(generate.feed_max_lag_cycles = {limit}); run `crawl pages --consumer {consumer}`")
    if lag >= (limit + 1) // 2:
        return max(1, top_n // 2), ""
    return top_n, ""


def write_fetchlists(store: Store, segment: str, selected: pa.Table, partitions: int, con,
                     config: Config | None = None, crawldb_sql: str | None = None) -> dict[str, int]:
    """The partitions' fetch lists and the segment's host assignment (cycles/generate/assign.py);
    with ``crawldb_sql`` (the crawl DB read) and discovery on, each partition's seen-set too.
    Returns counters."""
    folder = seg.segment_dir(store, segment, must_exist=False)
    config = config or Config()
    assignment = plan_partitions(store, config, selected, partitions)
    store.write_table(seg.assignment_file(folder), assignment, schema.ASSIGNMENT)
    con.register("selected", selected)
    con.register("assignment", assignment)
    for part in range(partitions):
        table = con.sql(f"""
            SELECT s.* FROM selected s JOIN assignment a USING (host) WHERE a.partition = {part}
            ORDER BY host, score DESC, url""").to_arrow_table().select(schema.FETCHLIST.names)
        store.write_table(seg.fetchlist_file(folder, part), table, schema.FETCHLIST)
    counters = {}
    if crawldb_sql is not None and config.fetch.follow_outlinks_depth > 0:
        counters = write_seen_sets(store, config, folder, con, crawldb_sql, partitions)
    con.unregister("assignment")
    return counters


def generate(store: Store, config: Config, *, now: dt.datetime | None = None,
             top_n: int | None = None, executor: Executor | None = None,
             cycle_locked: bool = False, exclude_hosts_in_flight: bool = False) -> GenerateResult:
    """Make the next segment; returns its id (None when nothing is due).

    Each bucket's best due URLs are chosen by a :func:`select_bucket_due` task run by
    ``executor`` (cycles/executor.py; default :func:`cycles.crawldb.bucket_executor`);
    the best ``top_n`` of their union make the fetch list. Runs under the store's cycle
    lock (:func:`cycles.segment.cycle_lock`; ``cycle_locked``: the caller holds it), so a
    second generate or cycle fails before leasing anything.

    ``exclude_hosts_in_flight`` (``crawl run``, cycles/run.py): leave out every host of a
    segment generated or being fetched, not only its URLs, so this segment can be fetched
    while (or right after) those are without a host in two fetch lists at once.
    """
    if not cycle_locked:
        with seg.cycle_lock(store, "generate", config.db):
            return generate(store, config, now=now, top_n=top_n, executor=executor, cycle_locked=True,
                            exclude_hosts_in_flight=exclude_hosts_in_flight)
    started, started_wall = time.monotonic(), time.time()
    now = now or clock.now()
    top_n = config.generate.top_n if top_n is None else top_n
    top_n, held = apply_feed_backpressure(store, config, top_n)
    if held:
        return GenerateResult(None, 0, 0, max(1, config.generate.partitions), reason=held)
    partitions = max(1, config.generate.partitions)
    with store.lock("crawldb", db=config.db):
        manifest, files = current_bucket_files(store)
        if manifest is None:
            raise StageError(f"generate: there is no crawl DB in {store.uri}; add seeds first "
                             "with `crawl inject seeds.txt`")
        # Segments whose lease ran out are given up before their URLs are leased again:
        # applied later, they would put older results over newer rows.
        seg.abandon_expired(store, now)
        segment = new_id(now)
        candidates = seg.segment_dir(store, segment, must_exist=False) / seg.CANDIDATES
        executor = bucket_executor(store, config, files, executor)
        lease_files = tuple(live_lease_files(store, now))
        host_lease_files = tuple(in_flight_files(store, now)) if exclude_hosts_in_flight else ()
        tasks = [GenerateBucketTask(store.uri, config, bucket, file, manifest.schema_version, lease_files, now,
                                    top_n, store.bucket_file(candidates, bucket), executor.workers,
                                    *current_link_files(store, bucket, len(files)), host_lease_files)
                 for bucket, file in enumerate(files)]
        try:
            executor.map(select_bucket_due, tasks)
            con = connect(store, config)
            selected = con.sql(f"""SELECT {", ".join(schema.FETCHLIST.names)}
                FROM {store.duckdb_source(con, [t.out for t in tasks])}
                ORDER BY priority DESC, next_fetch, url LIMIT {int(top_n)}""").to_arrow_table()
            if exclude_hosts_in_flight and config.fetch.follow_new_hosts:
                # hosts a fetch in flight claimed as new are its own (cycles/fetch/newhosts.py)
                selected = leave_out_claimed(store, segment, selected)
            if selected.num_rows:
                crawldb_sql = upgraded_sql(store.duckdb_source(con, files), manifest.schema_version)
                write_fetchlists(store, segment, selected, partitions, con, config, crawldb_sql)
        finally:
            store.delete_dir(candidates)
        if selected.num_rows == 0:
            store.delete_dir(seg.segment_dir(store, segment, must_exist=False))
            return GenerateResult(None, 0, 0, partitions, reason="no URL is due")
        lease_until = now + dt.timedelta(seconds=config.generate.lease_s)
        # The marker makes the fetch list a lease: written last, under the lock, so a
        # generate running next sees either no segment or a complete, leased one.
        hosts = pc.count_distinct(selected["host"]).as_py()
        seg.write_marker(store, seg.Generated(
            segment, generated_at=now.isoformat(), urls=selected.num_rows, hosts=hosts, partitions=partitions,
            lease_until=lease_until.isoformat(), crawldb_version=manifest.version))
    write_generate_stats(store, config, segment, selected.num_rows, hosts, partitions,
                         time.monotonic() - started, started_wall)
    return GenerateResult(segment, selected.num_rows, hosts, partitions)


def write_generate_stats(store: Store, config: Config, segment: str, urls: int, hosts: int, partitions: int,
                         seconds: float, started_wall: float) -> None:
    """The segment's ``stats/generate.json`` (duration, URLs/s) and ``crawl_generate.prom`` (cycles/metrics.py)."""
    stats = metrics.generate_summary(urls, hosts, partitions, seconds)
    store.write_json(seg.stats_file(seg.segment_dir(store, segment), "generate"), stats)
    metrics.publish(store, config, "generate", metrics.generate_families(stats, segment, started_wall))
