"""``crawl generate``: choose the due URLs, lease them, write a partitioned fetch list.

A URL is due when its ``next_fetch`` has passed and no live lease holds it. Among due URLs
the highest priority comes first (importance raised by how overdue the URL is; importance
from links — its host's PageRank and the distinct hosts linking to it, the link DB update
builds — or, with ``generate.ranking = 'depth'``, 1/(depth+1)), at most
``generate.max_urls_per_pattern`` per URL pattern of a host (traps), at most a budget per
host (``generate.max_urls_per_host``, scaled by the host's importance) and
``generate.top_n`` in all. While a consumer
of the pages feed lags, the list shrinks or is held (cycles/tables/pages.py). The chosen URLs are
written to ``segments/<id>/fetchlist/part-NNNNN.parquet``, every host in exactly one
partition — so it is fetched by exactly one process — the partitions balanced by expected
fetch time (URLs × host delay; cycles/tables/assign.py, which also writes each
partition's seen-set for discovery inside the fetch), ordered by host, then score. Hosts
sharing a politeness slot (``generate.partition_by``: domain or IP, cycles/slotkey.py) are
placed in one partition.

No process holds the segment's rows (issue #11). Tasks on the stage's executor, in rounds:

1. one :func:`select_bucket_due` per crawl DB bucket writes its best due URLs in ranking
   order (``candidates/bucket-N``): twice its even share of ``top_n`` and a slack
   (:func:`bucket_candidate_limit`), the caps ranked over its best rows by priority alone
   (:func:`prefilter_threshold`); returns their histogram by priority bin and the last
   one's key (and, for the known-hosts filter, writes the bucket's distinct hosts and their count);
2. the coordinator sums the histograms to find the bin the ``top_n``-th URL falls in, and
   a k-way merge of the buckets' keys, started at that bin, finds the exact cutoff key
   (:func:`top_n_cutoff`: one batch per bucket in memory); a bucket that may hold more
   URLs before the cutoff than it wrote is scanned again for its best ``top_n`` first
   (:func:`exact_cutoff`);
3. one :func:`count_chosen_hosts` per bucket counts its URLs at or before the cutoff by
   host, weighs its hosts by expected fetch time and reports the heaviest by name and the
   rest by hash group (cycles/tables/assign.py :func:`bucket_load`), writes its chosen
   hosts with their group (and its part of the known-hosts filter, from its hosts of round
   1, sized from every bucket's count); from the buckets' K + G items the coordinator plans the
   partitions (:func:`plan_assignment`: constant work whatever the segment's size);
4. one :func:`write_partition` per partition writes its fetch list — its hosts' candidates
   at or before the cutoff — and its seen-set; :func:`merge_known_hosts` tasks OR the
   known-hosts filter's parts.

The candidate files stay sorted by ranking key rather than by host: the cutoff then prunes
every row group past it (most of a bucket's ``top_n`` when there are many buckets), while a
host order would prune nothing, as the balanced assignment spreads every partition's hosts
over the whole host range. The fetch list is the
lease (cycles/tables/leases.py): until the segment is updated or ``now + lease_s`` passes, its
URLs are not generated again. Generate only reads the crawl DB; it never rewrites it.
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
import re
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cycles import clock, metrics
from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.config import Config
from cycles.tables.crawldb import (as_bucket_files, bucket_executor, bucket_of, bucket_source_sql, buckets_source_sql,
                                   connect, current_buckets, holds_no_rows, new_url_rows_sql, verify_due_pages)
from cycles.errors import StageError
from cycles.executor import Executor
from cycles.storage.bloom import BloomFilter
from cycles.tables.newhosts import KNOWN_HOSTS_FP, MIN_KNOWN_HOSTS_CAPACITY, claimed_elsewhere, pending_claims
from cycles.tables.assign import BucketLoad, bucket_load, chosen_hosts_table, partition_hosts_sql, \
    plan_assignment, write_seen_files, write_seen_set
from cycles.tables.hostdb import host_buckets, load_host_state, planned_urls
from cycles.tables.leases import (continuing_lease, fetched_files, in_flight_files, leased_hosts_sql, leased_urls_sql,
                           leftover_files, live_lease_files)
from cycles.tables.pages import feed_lag
from cycles.tables.seenindex import has_index, index_hosts, write_seen_set_indexed
from cycles.storage.store import Manifest, Store, StorePath, new_id
from cycles.generate.mode import RunMode
from cycles.tables.linkdb import current_link_files


@dataclass
class GenerateResult:
    segment: str | None
    urls: int
    hosts: int
    partitions: int
    reason: str = ""
    """Why no segment was made, when none was."""


NAMED_PARAMETER = re.compile(r"\$([A-Za-z_]\w*)")


def bound(sql: str, params: dict) -> dict:
    """The entries of ``params`` that ``sql`` names as ``$name``: the SQL of a bucket task is
    composed of parts (ranking, budgets, leftovers), each with its own values, and DuckDB
    refuses a named parameter that the query does not use."""
    names = set(NAMED_PARAMETER.findall(sql))
    return {name: value for name, value in params.items() if name in names}


def ranking_params(config: Config) -> dict:
    """The values :func:`priority_sql`, :func:`link_score_sql`, :func:`host_budget_sql` and
    :func:`due_sql` take as DuckDB parameters (pass them through :func:`bound`)."""
    g = config.generate
    return {"overdue_max_boost": float(g.overdue_max_boost), "overdue_min_interval_s": int(g.overdue_min_interval_s),
            "link_host_weight": float(g.link_host_weight), "link_inlink_weight": float(g.link_inlink_weight),
            "link_depth_weight": float(g.link_depth_weight),
            "unlinked_host_importance": 1.0 - float(config.update.link_damping),  # a host nobody links to (yet)
            "max_urls_per_host": int(g.max_urls_per_host), "host_budget_min_factor": float(g.host_budget_min_factor),
            "host_budget_max_factor": float(g.host_budget_max_factor),
            "max_urls_per_pattern": int(g.max_urls_per_pattern)}


def priority_sql() -> str:
    """Importance (score) raised by how overdue a URL is, in units of its own refetch interval
    (at most 1 + ``generate.overdue_max_boost`` times, 5× by default): a page twice past its
    due time outranks an equally scored page due now. Values: :func:`ranking_params`."""
    return ("score * (1 + least($overdue_max_boost, epoch($now - next_fetch) / "
            "greatest(fetch_interval_s, $overdue_min_interval_s)))")


def link_score_sql() -> str:
    """A URL's importance by links (``generate.ranking = 'links'``), over the crawl DB row
    (db), its LINK_URLS row (u) and its host's LINK_HOSTS row (h), both possibly missing.

    ln(1 + host importance) and ln(1 + distinct linking hosts), so that a host a thousand
    times as linked as another does not bury every other host; 1/(depth + 1) orders the
    pages nobody else links to. The crawl DB's score is 1/(depth + 1) times what else set
    it (update's demotions of duplicate-heavy and mirror hosts, an operator's change), so
    it enters as the factor score × (depth + 1): 1 for a plain row."""
    return ("(($link_host_weight * ln(1 + coalesce(h.importance, $unlinked_host_importance))"
            " + $link_inlink_weight * ln(1 + coalesce(u.inlink_hosts, 0))"
            " + $link_depth_weight / (db.depth + 1))"
            " * db.score * (db.depth + 1))::FLOAT")


def host_importance_sql() -> str:
    """A host's importance (LINK_HOSTS h, possibly missing) for its fetch-list budget."""
    return "coalesce(h.importance, $unlinked_host_importance)"


def ranked_by_links_sql(source: str, url_source: str, host_source: str) -> str:
    """``source`` (crawl DB rows) with ``score`` replaced by :func:`link_score_sql` and the
    host's importance added as ``host_importance``."""
    return f"""(SELECT db.* REPLACE ({link_score_sql()} AS score),
                       {host_importance_sql()} AS host_importance
                FROM {source} db LEFT JOIN {url_source} u ON u.url = db.url
                LEFT JOIN {host_source} h ON h.host = db.host)"""


def host_budget_sql(config: Config) -> str:
    """How many URLs of a host one fetch list may hold: ``max_urls_per_host``, or with
    ``ranking = 'links'`` that × the host's importance within [host_budget_min_factor,
    host_budget_max_factor] (at least 1). The source must then carry ``host_importance``."""
    if config.generate.ranking != "links":
        return "$max_urls_per_host"
    return ("greatest(1, round($max_urls_per_host * least($host_budget_max_factor, "
            "greatest($host_budget_min_factor, host_importance))))")


def due_sql(source: str, leased: str, config: Config, time_budget: bool = False) -> str:
    """SQL of the due URLs to fetch next, best first, capped per host (:func:`host_budget_sql`,
    and with ``time_budget`` the ``time_budget`` column :func:`with_time_budget_sql` adds)
    and pattern and in total (``$top_n``), with their priority and due time; ``$now`` and
    :func:`ranking_params` are left to bind. ``leased``: SQL source of the URLs leased to
    live segments (cycles/tables/leases.py). With ``generate.ranking = 'links'`` ``source``
    is :func:`ranked_by_links_sql`'s."""
    priority = priority_sql()
    importance = ", host_importance" if config.generate.ranking == "links" else ""
    budget = host_budget_sql(config)
    if time_budget:
        importance += ", time_budget"
        budget = f"least({budget}, time_budget)"
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
            WHERE pattern_rank <= $max_urls_per_pattern
        )
        WHERE host_rank <= {budget}
        ORDER BY priority DESC, next_fetch, url
        LIMIT $top_n"""


@dataclass(frozen=True)
class SegmentInputs:
    """What a segment's bucket tasks leave out or add, besides the crawl DB (picklable)."""

    lease_files: tuple = ()
    """Fetch lists of live segments: their URLs are leased (cycles/tables/leases.py)."""
    host_lease_files: tuple = ()
    """Fetch lists whose hosts are left out whole (``crawl run``: segments in flight)."""
    leftover_files: tuple = ()
    """Discovered URLs segments fetched but not updated did not reach (cycles/tables/leases.py
    ``leftover_files``): candidates beside the bucket's rows (:func:`with_leftovers_sql`)."""
    segment_s: float = 0.0
    """The segment's planned length (``generate.segment_s``, or ``crawl run``'s): each host
    gets no more URLs than its spacing fits into it (:func:`with_time_budget_sql`). 0: no time budget."""


def segment_inputs(store: Store, now: dt.datetime, mode: RunMode, config: Config) -> SegmentInputs:
    """The leases, hosts in flight and leftovers of ``mode`` as they stand at ``now``."""
    host_lease_files = tuple(in_flight_files(store, now)) if mode.exclude_hosts_in_flight else ()
    if mode.continuing is not None:
        host_lease_files = tuple(continuing_lease(store, mode.continuing, list(host_lease_files)))
    return SegmentInputs(tuple(live_lease_files(store, now)), host_lease_files,
                         tuple(leftover_files(store, now)) if mode.leftovers else (), mode.planned_s(config))


@dataclass(frozen=True)
class GenerateBucketTask:
    """One bucket's choice of due URLs: locations, ids and the config (picklable)."""

    store_uri: str
    config: Config
    bucket: int
    file: StorePath
    """The bucket's files: a crawldb.BucketFiles (its base and deltas)."""
    schema_version: int
    inputs: SegmentInputs
    now: dt.datetime
    top_n: int
    out: StorePath
    workers: int = 1
    link_urls: tuple = ()
    """The link DB's LINK_URLS files holding this bucket's URLs (cycles/update/linkgraph.py)."""
    link_hosts: tuple = ()
    """The link DB's LINK_HOSTS files; none: no link DB yet (every host ranks alike)."""
    buckets: int = 1
    """The crawl DB's bucket count (which leftover rows are this bucket's)."""
    hosts_out: StorePath | None = None
    """Where the bucket's distinct hosts go when the segment gets a known-hosts filter
    (schema.BUCKET_HOSTS; None: none wanted): the next round fills the bucket's part of the
    filter from them rather than scanning the bucket's hosts a second time."""
    limit: int = 0
    """How many candidates the bucket writes (0: ``top_n``): round 1 writes the bucket's share
    (:func:`bucket_candidate_limit`), and a bucket cut short is scanned again with ``top_n``
    (:func:`exact_cutoff`)."""

    @property
    def rows(self) -> int:
        return self.limit or self.top_n


@dataclass(frozen=True)
class BucketDue:
    """What a :func:`select_bucket_due` task reports."""

    histogram: dict[int, int]
    """The bucket's candidates by :func:`priority_bins` (bin → URLs), for the top-N cutoff."""
    hosts: int = 0
    """The bucket's distinct hosts, when the segment gets a known-hosts filter (``hosts_out``;
    else 0): the filter's size is the sum over the buckets."""
    counters: dict = field(default_factory=dict)
    """What the task read: ``generate/row_groups_read`` and ``generate/row_groups_skipped``
    (the base's row groups holding nothing due, :func:`cycles.tables.crawldb.verify_due_pages`)."""
    rows: int = 0
    """Candidates written."""
    last: tuple | None = None
    """The last one's ranking key, as :func:`ranked_keys` gives it (None: none written)."""


def select_bucket_due(task: GenerateBucketTask) -> BucketDue:
    """Write the bucket's best ``task.rows`` due URLs to ``task.out``, in ranking order;
    returns their histogram by :func:`priority_bins` (bin → URLs), for the top-N cutoff, and
    the last one's key; and with ``task.hosts_out``, the bucket's distinct hosts there and
    their count.

    A host lives in one bucket, so the per-host and per-pattern caps hold bucket by
    bucket, and the best ``top_n`` overall are among the buckets' best ``top_n``; of fewer,
    when :func:`cut_short` says so.
    """
    store = Store(task.store_uri)
    # Only the pages the due scan reads are checked (DuckDB checks no CRC): the base's row
    # groups that can hold a due row, and the deltas whole (docs/incremental.md).
    files = as_bucket_files(task.file)
    read = verify_due_pages(store, files, task.now)
    if not task.inputs.leftover_files and holds_no_rows(store, files.files):
        return empty_bucket_due(store, task, read)
    return scan_bucket_due(store, task, read)


def scan_bucket_due(store: Store, task: GenerateBucketTask, read) -> BucketDue:
    """:func:`select_bucket_due`'s scan in DuckDB: the due rows ranked once into a temp table,
    then capped and cut to the task's ``rows`` (:func:`write_candidates`) over the best of
    them only (:func:`prefilter_threshold`), or over all when those were too few."""
    con = connect(store, task.config, task.workers)
    params = {**ranking_params(task.config), "now": task.now, "top_n": int(task.rows), "bucket": task.bucket}
    hosts = write_bucket_hosts(store, con, task) if task.hosts_out is not None else 0
    source, timed = due_source_sql(store, con, task, params)
    leased = leased_urls_sql(store, con, list(task.inputs.lease_files))
    threshold = prefilter_threshold(con, source, task, params)
    params["threshold"] = threshold
    best = "(SELECT * FROM due_rows WHERE ranked >= $threshold)" if threshold is not None else "due_rows"
    if timed:
        best = with_time_budget_sql(store, con, best, task, params)
    histogram, rows, last = write_candidates(store, task, con, due_sql(best, leased, task.config, timed), params)
    if threshold is not None and rows < task.rows:
        # Caps, leases or ties left fewer than ``rows`` among the best: rank them all.
        every = with_time_budget_sql(store, con, "due_rows", task, params) if timed else "due_rows"
        histogram, rows, last = write_candidates(store, task, con, due_sql(every, leased, task.config, timed),
                                                 params)
    con.close()
    return BucketDue(histogram, hosts, {"generate/row_groups_read": read.read,
                                        "generate/row_groups_skipped": read.skipped}, rows, last)


PREFILTER_FACTOR = 8
"""The caps are ranked over the bucket's best ``rows`` × this many due rows by priority alone
(:func:`prefilter_threshold`): at 100 M URLs, 33 k of a bucket's 290 k, and the two windows
of due_sql cost 0.1 CPU-s instead of 0.7."""


def prefilter_threshold(con, source: str, task: GenerateBucketTask, params: dict) -> float | None:
    """Write the bucket's due rows, with the columns due_sql reads and their priority
    (``ranked``), to the temp table ``due_rows``; return the priority of its
    ``rows × PREFILTER_FACTOR``-th best row (None: it holds no more rows than that).

    Why due_sql over the rows ranked at or above it gives the same best ``rows`` as over all:
    every row below it ranks after every row at or above it (priority comes first in the
    order), so it moves no rank within a host or pattern of the rows above; the capped rows
    above are the capped ranking's first ones. When they number ``rows`` or more, they are its
    best ``rows``; else :func:`scan_bucket_due` ranks every row."""
    columns = "url, host, host_hash, score, depth, etag, last_modified, next_fetch, pattern_hash, fetch_interval_s"
    columns += ", host_importance" if task.config.generate.ranking == "links" else ""
    sql = (f"CREATE OR REPLACE TEMP TABLE due_rows AS SELECT {columns}, {priority_sql()} AS ranked "
           f"FROM {source} WHERE next_fetch <= $now")
    con.execute(sql, bound(sql, params))
    rows = con.sql("SELECT ranked FROM due_rows ORDER BY ranked DESC LIMIT 1 OFFSET ?",
                   params=[task.rows * PREFILTER_FACTOR - 1]).fetchall()
    return rows[0][0] if rows else None


def write_candidates(store: Store, task: GenerateBucketTask, con, sql: str,
                     params: dict) -> tuple[dict[int, int], int, tuple | None]:
    """Write ``sql``'s rows (due_sql's) to ``task.out``; returns their histogram by
    :func:`priority_bins`, their count and the last one's key (:func:`batch_keys`)."""
    reader = con.sql(sql, params=bound(sql, params)).to_arrow_reader(64 * 1024)
    histogram: Counter = Counter()
    last: list = [None]

    def counted(batches):
        for batch in batches:
            histogram.update(priority_bins(batch.column("priority")))
            if batch.num_rows:
                last[0] = batch.slice(batch.num_rows - 1)
            yield batch
    store.write_batches(task.out, counted(reader), reader.schema, CANDIDATE_ROW_GROUP_ROWS)
    return dict(histogram), sum(histogram.values()), batch_keys(last[0])[-1] if last[0] is not None else None


CANDIDATES = pa.schema([schema.CRAWLDB.field(name).remove_metadata().with_nullable(True) for name in
                        ("url", "host", "host_hash", "score", "depth", "etag", "last_modified")]
                       + [pa.field("priority", pa.float64()), pa.field("next_fetch", pa.timestamp("us", "Etc/UTC"))])
"""The columns of a bucket's candidates file, as DuckDB writes them for :func:`due_sql`
(tests/generate/test_generate.py checks the two agree)."""


def empty_bucket_due(store: Store, task: GenerateBucketTask, read) -> BucketDue:
    """:func:`select_bucket_due` of a bucket without rows (and no leftovers to add): its
    candidates and hosts are none, written without DuckDB. Most buckets of a small crawl are
    so, and the due scan's plan was most of their generate's CPU (~17 ms a bucket)."""
    if task.hosts_out is not None:
        store.write_table(task.hosts_out, schema.BUCKET_HOSTS.empty_table(), schema.BUCKET_HOSTS)
    store.write_batches(task.out, iter(()), CANDIDATES, CANDIDATE_ROW_GROUP_ROWS)
    return BucketDue({}, 0, {"generate/row_groups_read": read.read, "generate/row_groups_skipped": read.skipped})


def write_bucket_hosts(store: Store, con, task: GenerateBucketTask) -> int:
    """The bucket's distinct hosts, written to ``task.hosts_out`` (the known-hosts filter's
    part, :func:`write_known_hosts_part`); returns their count. Reads the host column of
    every row: a host with nothing due is known too.

    The base's and the deltas' hosts, not merged: a delta row replaces the base row of its
    URL, which has the URL's host too, so the merge changes no host. Merging read every
    URL of the base for its anti join (0.25 CPU-s a bucket at 100 M URLs, this 0.04). The
    base's hosts come from its seen index when it has one (cycles/tables/seenindex.py)."""
    files = as_bucket_files(task.file)
    sources = [store.duckdb_source(con, [path]) for path in files.deltas]
    indexed = index_hosts(store, files.base) if task.schema_version == schema.SCHEMA_VERSION else None
    if indexed is None:
        sources.insert(0, store.duckdb_source(con, [files.base]))
    else:  # the base's seen index: its distinct hosts without a scan of the base's host column
        con.register("base_hosts", pa.table({"host": indexed}))
        sources.insert(0, "base_hosts")
    hosts = " UNION ALL ".join(f"SELECT host FROM {source}" for source in sources)
    table = con.sql(f"SELECT DISTINCT host FROM ({hosts})").to_arrow_table()
    store.write_table(task.hosts_out, table, schema.BUCKET_HOSTS)
    return table.num_rows


def due_source_sql(store: Store, con, task: GenerateBucketTask, params: dict) -> tuple[str, bool]:
    """SQL of the bucket's due rows as generate ranks them: with the leftovers, without the
    hosts in flight and ranked by links, as the task's inputs and config say; and whether
    the segment has a time budget (:func:`with_time_budget_sql`, added to the rows that are
    ranked). Values go into ``params``."""
    # Only what is due (docs/incremental.md): the base's row groups with nothing due are skipped.
    source = bucket_source_sql(store, con, task.file, task.schema_version, due=True)
    inputs = task.inputs
    if inputs.leftover_files:
        source = with_leftovers_sql(store, con, source, task,
                                    known=bucket_source_sql(store, con, task.file, task.schema_version))
    if inputs.host_lease_files:
        # A host being fetched by an earlier segment must not be in this one too: two
        # fetches of it at once would break its spacing (cycles/commands/run.py).
        source = (f"(SELECT * FROM {source} WHERE host NOT IN "
                  f"(SELECT host FROM {leased_hosts_sql(store, con, list(inputs.host_lease_files))}))")
    if task.config.generate.ranking == "links":
        source = ranked_by_links_sql(source, link_source(store, con, task.link_urls, schema.LINK_URLS),
                                     link_source(store, con, task.link_hosts, schema.LINK_HOSTS))
    return source, inputs.segment_s > 0


def with_leftovers_sql(store: Store, con, source: str, task: GenerateBucketTask, known: str | None = None) -> str:
    """The bucket's rows and, as new unfetched rows, the leftover URLs of its hosts that it
    does not hold (one row per URL: the best score, the least depth). What a fetch queued
    and did not reach waits otherwise for that segment's update; at the start of a crawl
    nothing else is due then, and every host of the first segment stood idle through it
    (bench_crawl: ~3 s each)."""
    left = store.duckdb_source(con, list(task.inputs.leftover_files))
    mine = (f"(SELECT url, any_value(host) AS host, any_value(host_hash) AS host_hash, max(score) AS score, "
            f"min(depth) AS depth FROM {left} WHERE {bucket_of('host_hash', task.buckets)} = $bucket "
            f"GROUP BY url)")
    con.execute(f"CREATE OR REPLACE TEMP TABLE leftover AS {new_url_rows_sql(mine, task.config)}",
                {"now": task.now, "bucket": task.bucket})
    # ``known``: every row of the bucket, when ``source`` holds only the due ones.
    return (f"(SELECT * FROM {source} UNION ALL BY NAME SELECT * FROM leftover WHERE url NOT IN "
            f"(SELECT url FROM {known or source} WHERE host IN (SELECT host FROM leftover)))")


def with_time_budget_sql(store: Store, con, source: str, task: GenerateBucketTask, params: dict) -> str:
    """``source`` with a ``time_budget`` column: how many URLs of the row's host fit the
    segment's planned length (cycles/tables/hostdb.py :func:`~cycles.tables.hostdb.planned_urls`: spacing
    and not-before from the host DB and the segments not updated yet). ``$always_fit`` goes
    into ``params``.

    Only hosts with more due URLs than fit at the longest spacing a host may have
    (``fetch.max_crawl_delay_s``) are looked up: any other host fits whatever its spacing
    (a not-before wait aside, which the fetch's set-aside rule handles), so the host DB is
    read for the few big hosts, not for the long tail. A host counts its due rows in
    ``due_rows`` (:func:`prefilter_threshold`), and only the hosts of ``source`` (some of
    them) are looked up."""
    fc, segment_s = task.config.fetch, task.inputs.segment_s
    floor = task.config.effective_delay_s()
    params["always_fit"] = max(1, int(segment_s / max(floor, fc.max_crawl_delay_s)))
    mine = "" if source == "due_rows" else f"WHERE host IN (SELECT host FROM {source}) "
    sql = f"SELECT host FROM due_rows {mine}GROUP BY host HAVING count(*) > $always_fit"
    big = [host for (host,) in con.sql(sql, params=bound(sql, params)).fetchall()]
    states = load_host_state(store, set(big)) if big else {}
    # The host DB's not_before is real wall time (politeness never runs on the crawl's clock,
    # cycles/clock.py): on a shifted clock, task.now put it years away and no URL fit.
    now_wall = time.time()
    budgets = pa.table({"host": pa.array(big, pa.string()),
                        "time_budget": pa.array([planned_urls(states.get(h), segment_s, floor,
                                                              fc.max_crawl_delay_s, now_wall) for h in big],
                                                pa.int64())})
    con.register("host_time_budget", budgets)
    return (f"(SELECT s.*, coalesce(b.time_budget, $always_fit) AS time_budget FROM {source} s "
            f"LEFT JOIN host_time_budget b ON b.host = s.host)")


def known_hosts_wanted(config: Config) -> bool:
    """Whether a segment gets a known-hosts filter: when its fetch may claim new hosts
    (cycles/tables/newhosts.py)."""
    return config.fetch.follow_outlinks_depth > 0 and config.fetch.follow_new_hosts


CANDIDATE_ROW_GROUP_ROWS = 64 * 1024
"""Rows per row group of a bucket's candidates: the top-N merge decodes a whole row group of
each bucket at once (1 M-row groups held 0.6 GB for 8 buckets of 1 M candidates), and the
cutoff prunes by row group."""


PRIORITY_BIN_SHIFT = 44
"""A priority's bin is its float64 bit pattern shifted right this much: sign, exponent and 8
mantissa bits, so bins are 1/256 of an octave (0.4 %) wide."""


def priority_bins(priority: pa.Array) -> dict[int, int]:
    """URLs per priority bin. For priorities >= 0 the IEEE bit pattern orders as the value
    does, so the bins are in priority order exactly (no rounding of a logarithm can put a
    row in a bin out of its file order); zero, -0.0 and below share bin -1."""
    values = priority.cast(pa.float64())
    bits = pc.shift_right(values.view(pa.int64()), PRIORITY_BIN_SHIFT)
    bins = pc.if_else(pc.less_equal(values, 0.0), pa.scalar(-1, pa.int64()), bits)
    return {row["values"]: row["counts"] for row in pc.value_counts(bins).to_pylist()}


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


MERGE_BATCH_ROWS = 16 * 1024
"""Rows a bucket's stream of ranking keys holds at once in the top-N merge."""

KEY_COLUMNS = ["priority", "next_fetch", "url"]


@dataclass(frozen=True)
class Cutoff:
    """The ranking key of the last URL of the fetch list: every URL ranked at or before it
    (priority DESC, then next_fetch, then url — due_sql's order) is in, none after it."""

    priority: float
    next_fetch_us: int
    """next_fetch in microseconds since the epoch."""
    url: str


def ranked_keys(store: Store, path: StorePath, skip: int = 0) -> Iterator[tuple[float, int, str]]:
    """A bucket's candidates from row ``skip`` on as (-priority, next_fetch µs, url), in
    ranking order (the order select_bucket_due wrote them in), one batch of MERGE_BATCH_ROWS
    turned into Python objects at a time; the row groups before ``skip`` are not read."""
    with store.fs.open_input_file(str(path)) as fh:
        parquet = pq.ParquetFile(fh, buffer_size=1 << 20, pre_buffer=False)
        first, start = 0, 0
        while first < parquet.num_row_groups and start + parquet.metadata.row_group(first).num_rows <= skip:
            start += parquet.metadata.row_group(first).num_rows
            first += 1
        groups = list(range(first, parquet.num_row_groups))
        if not groups:
            return
        for batch in parquet.iter_batches(batch_size=MERGE_BATCH_ROWS, row_groups=groups, columns=KEY_COLUMNS,
                                          use_threads=False):
            if start + batch.num_rows <= skip:
                start += batch.num_rows
                continue
            batch, start = batch.slice(max(0, skip - start)), max(start, skip)
            yield from batch_keys(batch)


def batch_keys(batch) -> list[tuple[float, int, str]]:
    """A batch of candidates' ranking keys (-priority, next_fetch µs, url): tuples that sort
    in due_sql's order."""
    next_fetch = batch.column("next_fetch").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    return list(zip(pc.negate(batch.column("priority")).to_pylist(), next_fetch.to_pylist(),
                    batch.column("url").to_pylist()))


def top_n_cutoff(store: Store, candidates: list[StorePath], histograms: list[dict[int, int]],
                 top_n: int) -> Cutoff | None:
    """The key of the ``top_n``-th best candidate over every bucket (None: no candidate).

    The buckets' histograms (:func:`priority_bins`) give the bin the cutoff falls in and how
    many URLs rank above it; a k-way merge of the buckets' sorted keys, each started at its
    first row of that bin, finds the key inside it. Memory: one batch of keys per bucket; the
    Python work is the URLs of one bin, not of the fetch list (all of them when every
    priority ties, as with ``ranking = 'depth'`` and no overdue boost). The tuple order is
    due_sql's ORDER BY (priority DESC, next_fetch, url: url is unique, so no two keys tie),
    and the candidates are each bucket's best, so the set is the one the single ``ORDER BY
    ... LIMIT top_n`` over all candidates chose."""
    total: Counter = Counter()
    for histogram in histograms:
        total.update(histogram)
    wanted = min(top_n, sum(total.values()))
    if wanted == 0:
        return None
    above = 0
    for cut in sorted(total, reverse=True):  # best bin first
        if above + total[cut] >= wanted:
            break
        above += total[cut]
    # A bucket file is in ranking order, so its rows of better bins come first.
    starts = [sum(n for b, n in histogram.items() if b > cut) for histogram in histograms]
    keys = heapq.merge(*(ranked_keys(store, path, skip) for path, skip in zip(candidates, starts)))
    last = next(itertools.islice(keys, wanted - above - 1, None))
    return Cutoff(-last[0], last[1], last[2])


AT_OR_BEFORE_CUTOFF_SQL = """priority >= $priority AND (priority > $priority OR epoch_us(next_fetch) < $next_fetch_us
    OR (epoch_us(next_fetch) = $next_fetch_us AND url <= $url))"""
"""Rows ranked at or before the cutoff. The first term alone prunes the row groups past the
cutoff by their statistics (a bucket file is in ranking order)."""


@dataclass(frozen=True)
class KnownHostsPart:
    """One bucket's share of the segment's known-hosts filter (cycles/tables/newhosts.py)."""

    hosts_file: StorePath
    """The bucket's distinct hosts (select_bucket_due's ``hosts_out``)."""
    capacity: int
    """The whole filter's: every bucket's part has the same size and hashes, so the parts
    merge by OR into the filter of all the crawl DB's hosts (:func:`write_known_hosts`)."""
    out: StorePath


@dataclass(frozen=True)
class ChosenHostsTask:
    """Count and weigh one bucket's chosen URLs by host (picklable)."""

    store_uri: str
    config: Config
    candidates: StorePath
    cutoff: Cutoff
    chosen_hosts: StorePath
    """Where the bucket's chosen hosts go, with their slot key and group (schema.CHOSEN_HOSTS)."""
    buckets: int
    """The crawl DB's bucket count (how many heaviest keys a bucket names, cycles/tables/assign.py)."""
    workers: int = 1
    known_hosts: KnownHostsPart | None = None
    """Also write the bucket's part of the known-hosts filter (None: none wanted)."""
    leave_out_claimed_for: str | None = None
    """This segment's id when the hosts a fetch in flight claimed as new are left out
    (``crawl run`` with ``fetch.follow_new_hosts``: they are its own, cycles/tables/newhosts.py)."""


def count_chosen_hosts(task: ChosenHostsTask) -> BucketLoad:
    """The bucket's candidates ranked at or before the cutoff, counted by host and weighed
    by expected fetch time (cycles/tables/assign.py :func:`bucket_load`: what the
    assignment is planned from, of constant size); its chosen hosts, written with their
    key and group for the partition writers. With ``known_hosts``, the bucket's hosts go
    into its part of the known-hosts filter."""
    store, config = Store(task.store_uri), task.config
    urls_per_host = chosen_urls_per_host(store, task)
    if task.known_hosts is not None:
        write_known_hosts_part(store, task.known_hosts)
    if task.leave_out_claimed_for is not None:
        for host in claimed_elsewhere(store, task.leave_out_claimed_for, sorted(urls_per_host)):
            del urls_per_host[host]
    chosen = chosen_hosts_table(list(urls_per_host), config)
    store.write_table(task.chosen_hosts, chosen, schema.CHOSEN_HOSTS)
    return bucket_load(store, config, chosen, urls_per_host, task.buckets)


def chosen_urls_per_host(store: Store, task: ChosenHostsTask) -> dict[str, int]:
    """The bucket's candidates at or before the cutoff, counted by host (none, without
    DuckDB, from a candidates file without rows)."""
    if holds_no_rows(store, [task.candidates]):
        return {}
    con = connect(store, task.config, task.workers)
    counts = dict(con.sql(f"""SELECT host, count(*) FROM {store.duckdb_source(con, [task.candidates])}
        WHERE {AT_OR_BEFORE_CUTOFF_SQL} GROUP BY host""", params=cutoff_params(task.cutoff)).fetchall())
    con.close()
    return counts


def write_known_hosts_part(store: Store, part: KnownHostsPart) -> None:
    """A Bloom filter of the bucket's hosts, sized for the whole crawl DB's (a host lives in
    one bucket). Written whole under its bucket's name: a retried task writes the same bytes."""
    hosts = store.read_table(part.hosts_file, schema.BUCKET_HOSTS)["host"]
    bloom = BloomFilter(part.capacity, KNOWN_HOSTS_FP)
    bloom.add_all(hosts)  # distinct already (SELECT DISTINCT); hashed from the Arrow values
    store.write_bytes(part.out, bloom.to_bytes())


def known_hosts_capacity(hosts: int, claimed: int) -> int:
    return max(MIN_KNOWN_HOSTS_CAPACITY, hosts + claimed)


KNOWN_HOSTS_FAN_IN = 8
"""Parts one :func:`merge_known_hosts` task ORs. Every part is as large as the whole filter
(~1.8 bytes per host of the crawl DB: 18 MB at 10 M hosts), so one process merging all of
a 64-bucket crawl DB's would read 1.15 GB; merged in a tree, no task reads more than this
many filters (the last one ceil(buckets / 8) beyond 64 buckets)."""


@dataclass(frozen=True)
class KnownHostsMergeTask:
    """OR some known-hosts filters into one (picklable)."""

    store_uri: str
    parts: tuple
    out: StorePath
    claims: bool = False
    """The last merge: ``out`` is the segment's filter, and the hosts claimed by pending
    segments go in too."""


def merge_known_hosts(task: KnownHostsMergeTask) -> dict[str, int]:
    """Write the OR of ``task.parts`` (filters of one size, :meth:`BloomFilter.union_update`)
    to ``task.out``; with ``claims``, plus the hosts pending segments claimed, read now (the
    parts were sized from an earlier read: a claim made since raises the false-positive rate
    a little, it is not lost). Returns ``claimed``: how many were added. A retried task
    writes the same bytes (for the same claims)."""
    store = Store(task.store_uri)
    merged = BloomFilter.from_bytes(store.read_bytes(task.parts[0]))
    for path in task.parts[1:]:
        merged.union_update(BloomFilter.from_bytes(store.read_bytes(path)))
    claimed = pending_claims(store) if task.claims else set()
    if claimed:
        merged.add_new(sorted(claimed))
    store.write_bytes(task.out, merged.to_bytes())
    return {"claimed": len(claimed)}


def write_known_hosts(store: Store, executor: Executor, folder: StorePath, parts: list[StorePath],
                      hosts: int) -> dict[str, int]:
    """The segment's known-hosts filter (``seen/hosts.bloom``, cycles/tables/newhosts.py):
    the buckets' parts (:func:`write_known_hosts_part`, ``hosts`` hosts in all) merged by
    OR — the bits of one filter holding every host — in a tree of :func:`merge_known_hosts`
    tasks on ``executor``, the last adding the hosts pending segments claimed. The
    coordinator reads none of it (issue #11: it ran a DISTINCT over every host of the
    crawl DB). Intermediate filters go beside the parts (the candidates folder)."""
    level, depth = list(parts), 0
    while len(level) > KNOWN_HOSTS_FAN_IN:
        groups = [tuple(level[i:i + KNOWN_HOSTS_FAN_IN]) for i in range(0, len(level), KNOWN_HOSTS_FAN_IN)]
        level = [parts[0].parent / f"known-hosts-merged-{depth}-{i:05d}.bloom" for i in range(len(groups))]
        executor.map(merge_known_hosts, [KnownHostsMergeTask(store.uri, group, out)
                                         for group, out in zip(groups, level)])
        depth += 1
    last = KnownHostsMergeTask(store.uri, tuple(level), seg.known_hosts_file(folder), claims=True)
    claimed = executor.map(merge_known_hosts, [last])[0]["claimed"]
    return {"generate/known_hosts": hosts + claimed}


def cutoff_params(cutoff: Cutoff) -> dict:
    return {"priority": cutoff.priority, "next_fetch_us": cutoff.next_fetch_us, "url": cutoff.url}


@dataclass(frozen=True)
class PartitionTask:
    """One partition's fetch list and seen-set: locations, ids and the config (picklable)."""

    store_uri: str
    config: Config
    partition: int
    folder: StorePath
    """The segment's folder."""
    candidates: tuple
    """Every bucket's candidate file (select_bucket_due)."""
    chosen_hosts: tuple
    """Every bucket's chosen hosts (count_chosen_hosts)."""
    cutoff: Cutoff
    crawldb_files: tuple
    """The crawl DB version's bucket files, file i holding bucket i (for the seen-set)."""
    schema_version: int
    workers: int = 1
    pending_fetched: tuple = ()
    """Fetched rows of the segments not updated yet (cycles/tables/leases.py ``fetched_files``):
    their URLs join the seen-set."""


def write_partition(task: PartitionTask) -> dict[str, int]:
    """Write ``fetchlist/part-P`` — the candidates of the partition's hosts ranked at or
    before the cutoff, ordered by host, then score — and, with discovery on, its seen-set
    (cycles/tables/assign.py). Reads the segment's assignment, the chosen hosts, the
    candidate files and the crawl DB buckets of its hosts; returns counters."""
    store, config = Store(task.store_uri), task.config
    con = connect(store, config, task.workers)
    con.register("assignment_rows", store.read_table(seg.assignment_file(task.folder)))
    mine = con.sql(partition_hosts_sql(store.duckdb_source(con, list(task.chosen_hosts)), "assignment_rows",
                                       task.partition)).to_arrow_table()
    if mine.num_rows == 0:
        return empty_partition(store, config, task, con, mine)
    return fill_partition(store, config, task, con, mine)


def empty_partition(store: Store, config: Config, task: PartitionTask, con, mine: pa.Table) -> dict[str, int]:
    """:func:`write_partition` of a partition without hosts (a segment of fewer hosts than
    partitions): an empty fetch list and seen-set, written without DuckDB's joins (~10 CPU-ms);
    tests/generate/test_generate.py checks they are :func:`fill_partition`'s."""
    con.close()
    store.write_table(seg.fetchlist_file(task.folder, task.partition), schema.FETCHLIST.empty_table(), schema.FETCHLIST)
    counters = {"generate/urls": 0}
    if config.fetch.follow_outlinks_depth > 0:
        counters.update(write_seen_files(store, config, task.folder, task.partition,
                                         schema.SEEN_COUNTS.empty_table(), ()))
    return counters


def fill_partition(store: Store, config: Config, task: PartitionTask, con, mine: pa.Table) -> dict[str, int]:
    """:func:`write_partition`'s fetch list and seen-set of the partition's hosts ``mine``."""
    con.register("assignment", mine)
    table = con.sql(f"""
        SELECT {", ".join(schema.FETCHLIST.names)} FROM {store.duckdb_source(con, list(task.candidates))}
        WHERE {AT_OR_BEFORE_CUTOFF_SQL} AND host IN (SELECT host FROM assignment)
        ORDER BY host, score DESC, url""", params=cutoff_params(task.cutoff)).to_arrow_table()
    store.write_table(seg.fetchlist_file(task.folder, task.partition), table, schema.FETCHLIST)
    counters = {"generate/urls": table.num_rows}
    if config.fetch.follow_outlinks_depth > 0:
        # Only the buckets that hold the partition's hosts (a host lives in one bucket).
        buckets = np.unique(host_buckets(mine["host"], len(task.crawldb_files))).tolist()
        counters.update(write_partition_seen_set(store, config, task, con, buckets))
    con.close()
    return counters


def write_partition_seen_set(store: Store, config: Config, task: PartitionTask, con, buckets: list) -> dict[str, int]:
    """The partition's seen-set from the seen indexes compaction keeps beside the bases of
    its ``buckets`` (cycles/tables/seenindex.py; a bucket without one from its rows), or
    from the rows alone when no bucket has one or the crawl DB is of an older schema."""
    pending = store.duckdb_source(con, list(task.pending_fetched)) if task.pending_fetched else None
    if not buckets:  # A partition without hosts joins nothing, but still gets its (empty) seen-set files.
        crawldb_sql = buckets_source_sql(store, con, list(task.crawldb_files[:1]), task.schema_version)
        return write_seen_set(store, config, task.folder, con, crawldb_sql, task.partition, pending)
    files = [as_bucket_files(task.crawldb_files[b]) for b in buckets]
    if task.schema_version == schema.SCHEMA_VERSION and any(has_index(store, f.base) for f in files):
        return write_seen_set_indexed(store, config, task.folder, con, files, task.partition, pending)
    crawldb_sql = buckets_source_sql(store, con, files, task.schema_version)
    counters = write_seen_set(store, config, task.folder, con, crawldb_sql, task.partition, pending)
    counters["generate/seen_index_fallback"] = len(files)  # buckets read from their rows
    return counters


def write_fetchlists(store: Store, executor: Executor, segment: str, candidates: list[StorePath],
                     chosen_hosts: list[StorePath], cutoff: Cutoff, loads: list[BucketLoad], partitions: int,
                     config: Config, crawldb_files: list[StorePath], schema_version: int,
                     known_hosts: tuple[list[StorePath], int] | None = None,
                     pending_fetched: tuple = ()) -> dict[str, int]:
    """The segment's assignment (cycles/tables/assign.py, from the buckets' loads: K named
    keys and G groups), then one :func:`write_partition` task per partition on ``executor``:
    the coordinator never holds the chosen rows, nor a row per host; and the known-hosts
    filter from its parts (``known_hosts``: their files and the hosts they hold,
    :func:`write_known_hosts`). Returns the tasks' counters, summed."""
    folder = seg.segment_dir(store, segment, must_exist=False)
    store.write_table(seg.assignment_file(folder), plan_assignment(loads, config), schema.ASSIGNMENT)
    tasks = [PartitionTask(store.uri, config, part, folder, tuple(candidates), tuple(chosen_hosts), cutoff,
                           tuple(crawldb_files), schema_version, executor.workers, pending_fetched)
             for part in range(partitions)]
    counters: Counter = Counter()
    for result in executor.map(write_partition, tasks):
        counters.update(result)
    if known_hosts is not None:
        counters.update(write_known_hosts(store, executor, folder, *known_hosts))
    return dict(counters)


def generate(store: Store, config: Config, *, now: dt.datetime | None = None, top_n: int | None = None,
             executor: Executor | None = None, mode: RunMode = RunMode(),
             cycle_locked: bool = False) -> GenerateResult:
    """Make the next segment; returns its id (None when nothing is due).

    Each bucket's best due URLs are chosen by a :func:`select_bucket_due` task run by
    ``executor`` (cycles/executor.py; default :func:`cycles.tables.crawldb.bucket_executor`);
    the best ``top_n`` of their union make the fetch list, written by one task per
    partition on the same executor (the rounds in the module doc). Runs under the store's cycle
    lock (:func:`cycles.tables.segment.cycle_lock`; ``cycle_locked``: the caller holds it), so a
    second generate or cycle fails before leasing anything.

    ``mode`` (cycles/generate/mode.py): ``crawl run``'s overlapped segments — hosts in flight
    left out, leftovers as candidates, its own planned length; the default is ``crawl
    generate``'s and ``crawl cycle``'s (``generate.segment_s``, nothing left out but leases).
    """
    if not cycle_locked:
        with seg.cycle_lock(store, "generate", config.db):
            return generate(store, config, now=now, top_n=top_n, executor=executor, mode=mode, cycle_locked=True)
    started, started_wall = time.monotonic(), time.time()
    now = now or clock.now()
    partitions = max(1, config.generate.partitions)
    top_n, held = apply_feed_backpressure(store, config, config.generate.top_n if top_n is None else top_n)
    if held:
        return GenerateResult(None, 0, 0, partitions, reason=held)
    with store.lock("crawldb", db=config.db):
        result, counters = generate_segment(store, config, now, top_n, executor, mode)
    if result.segment is not None:
        write_generate_stats(store, config, result, time.monotonic() - started, started_wall, counters)
    return result


@dataclass
class SegmentRun:
    """One generate under the crawl DB lock: what its rounds share."""

    store: Store
    config: Config
    manifest: Manifest
    files: list
    """Each bucket's crawldb.BucketFiles."""
    segment: str
    now: dt.datetime
    top_n: int
    executor: Executor
    inputs: SegmentInputs
    mode: RunMode

    @property
    def candidates(self) -> StorePath:
        """The segment's scratch folder of candidates (deleted when generate ends)."""
        return seg.segment_dir(self.store, self.segment, must_exist=False) / seg.CANDIDATES

    def scratch(self, name: str, bucket: int, ext: str = "parquet") -> StorePath:
        """A bucket's file of one round in the candidates folder."""
        return self.candidates / f"{name}-{bucket:05d}.{ext}"


def generate_segment(store: Store, config: Config, now: dt.datetime, top_n: int, executor: Executor | None,
                     mode: RunMode) -> tuple[GenerateResult, dict]:
    """The rounds of the module doc, under the crawl DB lock; the marker written last makes
    the fetch list a lease. Returns the result and the tasks' counters."""
    manifest, files = current_buckets(store, verify=False)  # each bucket task verifies what it reads
    if manifest is None:
        raise StageError(f"generate: there is no crawl DB in {store.uri}; add seeds first "
                         "with `crawl inject seeds.txt`")
    # Segments whose lease ran out are given up before their URLs are leased again:
    # applied later, they would put older results over newer rows.
    seg.abandon_expired(store, now)
    run = SegmentRun(store, config, manifest, files, new_id(now), now, top_n,
                     bucket_executor(store, config, [b.base for b in files], executor),
                     segment_inputs(store, now, mode, config), mode)
    try:
        loads, counters = choose_and_write(run)
    finally:
        store.delete_dir(run.candidates)
    urls, hosts = sum(load.urls for load in loads), sum(load.hosts for load in loads)
    partitions = max(1, config.generate.partitions)
    if urls == 0:
        store.delete_dir(seg.segment_dir(store, run.segment, must_exist=False))
        return GenerateResult(None, 0, 0, partitions, reason="no URL is due"), counters
    lease_until = now + dt.timedelta(seconds=config.generate.lease_s)
    # The marker makes the fetch list a lease: written last, under the lock, so a
    # generate running next sees either no segment or a complete, leased one.
    seg.write_marker(store, seg.Generated(
        run.segment, generated_at=now.isoformat(), urls=urls, hosts=hosts, partitions=partitions,
        lease_until=lease_until.isoformat(), crawldb_version=manifest.version, continues=mode.continuing,
        planned_s=run.inputs.segment_s))
    return GenerateResult(run.segment, urls, hosts, partitions), counters


def bucket_tasks(run: SegmentRun) -> list[GenerateBucketTask]:
    """Round 1's tasks: one :func:`select_bucket_due` per bucket."""
    buckets = len(run.files)
    return [GenerateBucketTask(run.store.uri, run.config, bucket, file, run.manifest.schema_version, run.inputs,
                               run.now, run.top_n, run.scratch("bucket", bucket), run.executor.workers,
                               *current_link_files(run.store, bucket, buckets), buckets,
                               run.scratch("hosts", bucket) if known_hosts_wanted(run.config) else None,
                               bucket_candidate_limit(run.top_n, buckets))
            for bucket, file in enumerate(run.files)]


CANDIDATE_SHARE_FACTOR = 2
CANDIDATE_SLACK = 1024
"""Round 1's candidates a bucket: twice its even share of ``top_n`` and this many more. Hosts
hash uniformly over the buckets, so a bucket's part of the best ``top_n`` is ~top_n/buckets
(at 64 buckets and 100 k: 1,563, a standard deviation of ~40 URLs, or a few hosts' caps):
6.4 M candidates written for a 100 k list became 0.27 M. A bucket that holds more of the best
is scanned again (:func:`exact_cutoff`), so the bound changes the cost, never the list."""


def bucket_candidate_limit(top_n: int, buckets: int) -> int:
    """How many candidates a bucket writes in round 1 (see CANDIDATE_SLACK)."""
    share = -(-top_n // max(1, buckets))
    return min(top_n, CANDIDATE_SHARE_FACTOR * share + CANDIDATE_SLACK)


def cut_short(task: GenerateBucketTask, due: BucketDue, cutoff: Cutoff | None, total: int) -> bool:
    """Whether the bucket may hold a URL ranked at or before ``cutoff`` that it did not write.

    Its file holds its best ``rows`` in ranking order. Unless it wrote fewer than its limit,
    or its limit was ``top_n`` (the best ``top_n`` overall are among each bucket's best
    ``top_n``), the rows it left out rank after its last written key: the list loses none
    of them when that key ranks at or after the cutoff and the union held ``top_n`` rows (the
    cutoff is then the ``top_n``-th key of every bucket's whole ranking too: no left-out row
    ranks before it)."""
    if task.rows >= task.top_n or due.rows < task.rows:
        return False
    if cutoff is None or total < task.top_n:
        return True
    return due.last < (-cutoff.priority, cutoff.next_fetch_us, cutoff.url)


def exact_cutoff(run: SegmentRun, tasks: list[GenerateBucketTask],
                 due: list[BucketDue]) -> tuple[Cutoff | None, list[BucketDue]]:
    """Round 2's cutoff over round 1's candidates, the buckets :func:`cut_short` names scanned
    again for their best ``top_n`` first (a task each; their hosts are kept from round 1).
    Rescanning only adds rows, so the cutoff can only move earlier and a bucket found whole
    stays whole: one pass of rescans suffices, the loop only says so."""
    due, tasks = list(due), list(tasks)
    while True:
        total = sum(d.rows for d in due)
        cutoff = top_n_cutoff(run.store, [t.out for t in tasks], [d.histogram for d in due], run.top_n)
        short = [i for i, (t, d) in enumerate(zip(tasks, due)) if cut_short(t, d, cutoff, total)]
        if not short:
            return cutoff, due
        again = [replace(tasks[i], hosts_out=None, limit=0) for i in short]
        for i, task, result in zip(short, again, run.executor.map(select_bucket_due, again)):
            counters = Counter(due[i].counters)
            counters.update({**result.counters, "generate/buckets_rescanned": 1})
            due[i], tasks[i] = replace(result, hosts=due[i].hosts, counters=dict(counters)), task


def choose_and_write(run: SegmentRun) -> tuple[list[BucketLoad], dict]:
    """Rounds 1-4 (module doc): each bucket's best due URLs, the top-N cutoff, the chosen
    hosts and their loads, the fetch lists. Returns the buckets' loads (none: nothing due)
    and the tasks' counters."""
    tasks = bucket_tasks(run)
    cutoff, due = exact_cutoff(run, tasks, run.executor.map(select_bucket_due, tasks))
    counters: Counter = Counter()
    for bucket_due in due:
        counters.update(bucket_due.counters)
    outs = [task.out for task in tasks]
    if cutoff is None:
        return [], dict(counters)
    # The known-hosts filter: each bucket task writes its hosts' part, sized from every
    # bucket's host count; merged by OR by tasks (write_known_hosts).
    known_hosts, parts = None, [None] * len(outs)
    if known_hosts_wanted(run.config):
        hosts = sum(d.hosts for d in due)
        capacity = known_hosts_capacity(hosts, len(pending_claims(run.store)))
        parts = [KnownHostsPart(task.hosts_out, capacity, run.scratch("known-hosts", task.bucket, "bloom")) for task in tasks]
        known_hosts = ([part.out for part in parts], hosts)
    chosen = [run.scratch("chosen-hosts", task.bucket) for task in tasks]
    # hosts a fetch in flight claimed as new are its own (cycles/tables/newhosts.py)
    leave_out = run.segment if run.mode.exclude_hosts_in_flight and run.config.fetch.follow_new_hosts else None
    loads = run.executor.map(count_chosen_hosts, [
        ChosenHostsTask(run.store.uri, run.config, out, cutoff, chosen_file, len(outs), run.executor.workers,
                        part, leave_out)
        for out, chosen_file, part in zip(outs, chosen, parts)])
    counters.update(write_fetchlists(run.store, run.executor, run.segment, outs, chosen, cutoff, loads,
                                     max(1, run.config.generate.partitions), run.config, run.files,
                                     run.manifest.schema_version, known_hosts,
                                     tuple(fetched_files(list(run.inputs.lease_files)))))
    return loads, dict(counters)


def write_generate_stats(store: Store, config: Config, result: GenerateResult, seconds: float,
                         started_wall: float, counters: dict | None = None) -> None:
    """The segment's ``stats/generate.json`` (duration, URLs/s, and the tasks' counters: what
    they read, the seen-sets) and ``crawl_generate.prom`` (cycles/metrics.py)."""
    stats = {**(counters or {}),
             **metrics.generate_summary(result.urls, result.hosts, result.partitions, seconds)}
    store.write_json(seg.stats_file(seg.segment_dir(store, result.segment), "generate"), stats)
    metrics.publish(store, config, "generate", metrics.generate_families(stats, result.segment, started_wall))
