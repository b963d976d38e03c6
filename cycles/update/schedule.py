"""When a page is fetched again: the refetch-interval rule, one swappable schedule.

Like Nutch's ``FetchSchedule``: update asks the configured schedule (``update.schedule``) for
the SQL of a row's new ``fetch_interval_s`` and uses it in :func:`cycles.update.update.transition_sql`;
the next fetch is then ``fetched_at`` + that interval. Only pages seen (a 2xx or 304 answer)
are scheduled here; the other outcomes (errors, gone, redirects...) have fixed rules in
transition_sql.

- ``optimal`` (:class:`OptimalSchedule`, the default): the page's learned change rate and the
  crawl's fetch budget give the interval of Cho & Garcia-Molina's optimal policy
  (:mod:`cycles.update.optimum`): before the merge, a :func:`bucket_rate_histogram` task per
  bucket counts the pages per learned rate (a row per grid rate), and :func:`plan_refresh`
  finds on their sum the marginal freshness per visit ``μ`` at which the intervals spend the
  budget per cycle at the crawl's own cadence (:func:`learned_cycle_interval_s`); a page
  never refetched yet starts from its host's median learned rate (:func:`prepare_schedule`);
- ``adaptive`` (:class:`AdaptiveSchedule`): the interval follows the page's observed change
  rate (Cho & Garcia-Molina), without a budget; a page never fetched starts from its host's
  median learned rate (:func:`prepare_schedule`);
- ``fixed`` (:class:`FixedSchedule`): every page after ``update.default_interval_s``
  (news-like pages after ``update.news_like_interval_s``).

The learned rate (:func:`learned_rate_sql`): from the Last-Modified dates when the page sends
usable ones (``unchanged_s``, :func:`unchanged_seen_sql`; (X − 1) / T, Cho & Garcia-Molina
2003 §5), else from the counts of changes and refetches.

A schedule's SQL reads the old row as ``db`` and the fetch result as ``f``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from cycles.tables import segment as seg
from cycles.config import Config, UpdateConfig
from cycles.tables.crawldb import as_bucket_files, bucket_source_sql, connect, holds_no_rows
from cycles.storage.store import Store, StorePath
from cycles.update import optimum
from cycles.update.route import ROUTED_FETCHED, resolved_fetched_sql, routed_files, routed_source
from cycles.storage.sql import literal


class Schedule(Protocol):
    def interval_sql(self, seen: str, changed: str) -> str:
        """SQL of the row's new ``fetch_interval_s`` (seconds, an integer expression).

        ``seen``: SQL condition, the page answered (2xx or 304); ``changed``: SQL condition,
        its content differs from the last fetch's. A row not seen keeps ``db.fetch_interval_s``."""
        ...


def news_like_sql(u: UpdateConfig) -> str:
    """SQL condition on ``db.host`` / ``db.url``: the page is declared news-like in the config."""
    terms = []
    for host in u.news_like_hosts:
        host = host.lower()
        if host.startswith("*."):
            terms.append(f"(db.host = {literal(host[2:])} OR db.host LIKE {literal('%.' + host[2:])})")
        else:
            terms.append(f"db.host = {literal(host)}")
    for pattern in u.news_like_patterns:
        terms.append(f"regexp_matches(db.url, {literal(pattern)})")
    return "(" + " OR ".join(terms) + ")" if terms else "false"


def first_interval_sql(u: UpdateConfig) -> str:
    """SQL of a page's interval after its first fetch: news-like or default."""
    return f"CASE WHEN {news_like_sql(u)} THEN {u.news_like_interval_s} ELSE {u.default_interval_s} END"


@dataclass(frozen=True)
class FixedSchedule:
    """Every page seen is fetched again after the same interval (its first interval)."""

    u: UpdateConfig

    def interval_sql(self, seen: str, changed: str) -> str:
        return f"""CASE
        WHEN {seen} THEN {first_interval_sql(self.u)}
        ELSE db.fetch_interval_s END"""


@dataclass(frozen=True)
class AdaptiveSchedule:
    """The interval follows the page's change rate (see UpdateConfig.revisit_factor):
    first fetch: the interval its host's learned rate earns (``host_prior``, made by
    :func:`prepare_schedule`), else the first interval (news-like or default); no change seen yet: grows by
    ``interval_growth``; else ``revisit_factor`` / estimated rate, clamped to
    [min_interval_s, max_interval_s], and longer again for pages changing faster than
    min_interval_s lets us follow."""

    u: UpdateConfig

    def interval_sql(self, seen: str, changed: str) -> str:
        u = self.u
        # Change rate (Cho & Garcia-Molina): X changes over the time the page is known to
        # have stayed unchanged, else X changes in n refetches over `span` seconds.
        x = f"(db.change_count + CASE WHEN {changed} THEN 1 ELSE 0 END)"
        rate = learned_rate_sql("db.fetch_count", x, "epoch(f.fetched_at - db.first_fetched)",
                                unchanged_after_sql(seen, changed))
        return f"""CASE
        WHEN {seen} AND db.fetch_count = 0 AND NOT {news_like_sql(u)} AND {HOST_PRIOR_SQL} IS NOT NULL THEN
            {self.interval_for_rate_sql(HOST_PRIOR_SQL)}
        WHEN {seen} AND db.fetch_count = 0 THEN
            {first_interval_sql(u)}
        WHEN {seen} AND {x} = 0 THEN least({u.max_interval_s}, floor(db.fetch_interval_s * {float(u.interval_growth)})::BIGINT)
        WHEN {seen} THEN {self.interval_for_rate_sql(rate)}
        ELSE db.fetch_interval_s END"""

    def interval_for_rate_sql(self, rate: str) -> str:
        """SQL: the interval of a page changing at ``rate`` (1/s, > 0)."""
        u = self.u
        # A page that changes faster than min_interval_s lets us follow is stale whenever we
        # look; visits spent on it buy little freshness (Cho & Garcia-Molina, SIGMOD 2000:
        # under a fixed budget the optimal rate falls for the fastest pages), so the faster
        # it changes past that point, the longer we wait.
        return f"""CASE WHEN {u.revisit_factor} / {rate} < {u.min_interval_s} THEN
            least({u.max_interval_s}, {u.min_interval_s} * {u.min_interval_s} / ({u.revisit_factor} / {rate}))::BIGINT
        ELSE least({u.max_interval_s}, greatest({u.min_interval_s}, {u.revisit_factor} / {rate}))::BIGINT END"""


RATE_STEP = 2 ** (1 / 8)
"""The optimal schedule looks intervals up on a grid of change rates this far apart (9 %):
a rate is rounded to the nearest, at most 4.5 % off, which moves freshness by far less
(F is flat near the optimum)."""


def rate_grid(u: UpdateConfig) -> np.ndarray:
    """Change rates (1/s) of the lookup grid: from a hundredth of a change per
    ``max_interval_s`` to a hundred changes per ``min_interval_s``."""
    lo, hi = 0.01 / u.max_interval_s, 100 / u.min_interval_s
    return lo * RATE_STEP ** np.arange(int(math.ceil(math.log(hi / lo) / math.log(RATE_STEP))) + 1)


def grid_index_sql(u: UpdateConfig, rate: str) -> str:
    """SQL: 1-based index of the grid rate nearest to ``rate`` (clamped to the grid)."""
    lo, n = 0.01 / u.max_interval_s, len(rate_grid(u))
    hi = float(rate_grid(u)[-1])
    # A NaN or infinite rate (a corrupt row) would fail the cast to BIGINT and with it the
    # update: NaN (and null) is read as the slowest grid rate, +inf (and any rate past the
    # grid) as the fastest. ``rate`` is spelled twice, not four times: it is a long
    # expression, and the statement's size is what DuckDB's planner pays for.
    safe = f"(CASE WHEN isnan({rate}) IS NOT FALSE THEN {lo!r} ELSE least({rate}, {hi!r}) END)"
    return (f"least({n}, greatest(1, round(ln(greatest({safe}, {lo!r}) / {lo!r}) / "
            f"{math.log(RATE_STEP)!r})::BIGINT + 1))")


def planned_cycles(u: UpdateConfig, rates, multiplier_s: float) -> np.ndarray:
    """Refetch intervals (s) the optimal policy at ``μ = multiplier_s`` gives pages of these
    rates, within [min_interval_s, max_interval_s], in whole cycles (``cycle_interval_s``):
    generate only runs once a cycle, so an interval is in effect rounded up to the next
    cycle, and the plan would spend less than its budget. A page not worth a visit (f = 0)
    gets max_interval_s, so that a change of its rate is still noticed."""
    freq = optimum.frequencies_at(rates, multiplier_s)
    with np.errstate(divide="ignore"):
        interval = np.where(freq > 0, 1 / np.maximum(freq, 1e-300), u.max_interval_s)
    interval = np.clip(interval, u.min_interval_s, u.max_interval_s)
    cycle = u.cycle_interval_s
    return np.maximum(1, np.round(interval / cycle)) * cycle


def planned_intervals(u: UpdateConfig, rates, multiplier_s: float) -> np.ndarray:
    """The intervals (s) to store for :func:`planned_cycles`: half a cycle short of the
    planned cycles, so that the page is due at that cycle's generate even when it was
    fetched up to half a cycle after its own generate (a fetch list takes a while)."""
    cycles = planned_cycles(u, rates, multiplier_s)
    return np.clip(np.round(cycles - u.cycle_interval_s / 2), u.min_interval_s, u.max_interval_s).astype(np.int64)


def counted_rate_sql(n: str, changes: str, span_s: str) -> str:
    """SQL: Cho & Garcia-Molina's estimate (1/s) from ``changes`` seen in ``n`` refetches over
    ``span_s`` seconds (see :func:`cycles.update.optimum.estimate_rate`)."""
    # More changes than refetches cannot be seen (the first fetch sees none), but a row can
    # say so — a crawl DB written by another tool or an older version, bench_scale's
    # synthetic one: ln of a negative number is NaN, and the NaN's cast to a grid index
    # failed the whole update. Clamped, such a page reads as changing at every refetch.
    return (f"(-ln(({n} - least({changes}, {n}) + 0.5) / ({n} + 0.5)) "
            f"/ (greatest(1, {span_s}) / greatest(1, {n})))")


def learned_rate_sql(n: str, changes: str, span_s: str, unchanged_s: str) -> str:
    """SQL: a page's change rate (1/s): from ``unchanged_s``, the seconds it is known to have
    stayed unchanged, when its Last-Modified dates gave them and it has changed at least
    :data:`MIN_LAST_MODIFIED_CHANGES` times ((X − 1) / T:
    :func:`cycles.update.optimum.estimate_rate_last_modified`); else from the counts
    (:func:`counted_rate_sql`)."""
    return (f"CASE WHEN {unchanged_s} > 0 AND {changes} >= {MIN_LAST_MODIFIED_CHANGES} THEN ({changes} - 1) / ({unchanged_s}) "
            f"ELSE {counted_rate_sql(n, changes, span_s)} END")


MIN_LAST_MODIFIED_CHANGES = 3
"""Changes seen before the rate comes from Last-Modified: (X − 1) / T has variance
λ² / (X − 2), infinite below 3 — with two changes, two short ages (a page seen just after
it changed, twice) made a 4-hourly page look ten times faster and left it for half a day
(tests/update/test_freshness_web.py)."""

LAST_MODIFIED_SQL = "epoch(try_strptime(f.last_modified, '%a, %d %b %Y %H:%M:%S GMT'))"
"""SQL: the fetch result's Last-Modified in epoch seconds (RFC 9110's IMF-fixdate, the
form senders must use; null for anything else)."""

MIN_LAST_MODIFIED_AGE_S = 60
"""A Last-Modified less than this before the fetch is not taken as the time of the change:
pages generated on request send the time of the request (the page would look as if it
changed at every instant)."""


def unchanged_seen_sql(changed: str) -> str:
    """SQL (seconds): how long this refetch shows the page stayed unchanged: the whole
    interval since the last fetch when it found no change; the age of its Last-Modified when
    it found a change (CGM 2003 §5: the change is known to lie that far back, and none since).
    Null when that Last-Modified cannot be the change we saw: missing, not after the last
    fetch, or too recent (:data:`MIN_LAST_MODIFIED_AGE_S`)."""
    return f"""(CASE WHEN NOT {changed} THEN epoch(f.fetched_at - db.last_fetched)
        WHEN {LAST_MODIFIED_SQL} > epoch(db.last_fetched)
             AND {LAST_MODIFIED_SQL} <= epoch(f.fetched_at) - {MIN_LAST_MODIFIED_AGE_S}
        THEN epoch(f.fetched_at) - {LAST_MODIFIED_SQL} END)"""


def unchanged_after_sql(seen: str, changed: str) -> str:
    """SQL: the row's ``unchanged_s`` after this fetch result (a refetch seen adds
    :func:`unchanged_seen_sql`; null stays null: that page's rate comes from the counts)."""
    return f"(CASE WHEN {seen} AND db.fetch_count > 0 THEN db.unchanged_s + {unchanged_seen_sql(changed)} ELSE db.unchanged_s END)"


def seconds_between_sql(end: str, start: str) -> str:
    """SQL (DOUBLE): the seconds from ``start`` to ``end`` (timestamps with time zone), the
    same double as ``epoch(end - start)`` gives in a UTC connection (the interval's days
    times 86,400, plus its microseconds over 10⁶; checked bit for bit on every row of a
    10 M-URL crawl DB bucket, docs/incremental.md "Update's scans at 100 M"), without the
    interval: the time zone extension's subtraction of two such timestamps cost ~0.4 CPU-s
    a bucket of 1.24 M rows, three quarters of the rate histogram's arithmetic. Null when
    either is null."""
    us = f"(epoch_us({end}) - epoch_us({start}))"
    return f"((({us} // 86400000000) * 86400)::DOUBLE + ({us} % 86400000000)::DOUBLE / 1e6)"


STORED_RATE_SQL = learned_rate_sql("(db.fetch_count - 1)", "db.change_count",
                                   seconds_between_sql("db.last_fetched", "db.first_fetched"), "db.unchanged_s")
"""A crawl DB row's learned rate, for rows refetched at least once (``db.fetch_count >= 2``)."""

HOST_PRIOR_SQL = "(SELECT p.rate FROM host_prior p WHERE p.host = db.host)"
"""SQL: the learned rate of the row's host (:func:`prepare_schedule`), null if none."""

DEFAULT_MULTIPLIER_S = 86400.0
"""μ of an optimal schedule built without a plan (SQL inspected, not run by update): pages
changing more than once a day are left alone."""


@dataclass(frozen=True)
class OptimalSchedule:
    """Cho & Garcia-Molina's optimal policy on learned rates (see the module doc).

    First fetch: the interval the host's median learned rate earns (``host_prior``, made by
    :func:`prepare_schedule`), else the first interval (news-like or default); no change
    seen yet: grows by ``interval_growth`` like the adaptive schedule (the estimate is 0,
    which would mean "never again"); else the interval planned for the page's learned
    rate at the multiplier ``multiplier_s``."""

    u: UpdateConfig
    multiplier_s: float = DEFAULT_MULTIPLIER_S

    def interval_sql(self, seen: str, changed: str) -> str:
        u = self.u
        table = "[" + ", ".join(str(int(i)) for i in planned_intervals(u, rate_grid(u), self.multiplier_s)) + "]"
        x = f"(db.change_count + CASE WHEN {changed} THEN 1 ELSE 0 END)"
        rate = learned_rate_sql("db.fetch_count", x, "epoch(f.fetched_at - db.first_fetched)",
                                unchanged_after_sql(seen, changed))
        prior = HOST_PRIOR_SQL
        # One lookup in the table for both the first fetch (the host's rate) and a refetch
        # (the page's): the table and the grid index are spelled once (see grid_index_sql).
        return f"""CASE
        WHEN {seen} AND db.fetch_count = 0 AND ({news_like_sql(u)} IS NOT FALSE OR {prior} IS NULL) THEN
            {first_interval_sql(u)}
        WHEN {seen} AND db.fetch_count IS DISTINCT FROM 0 AND {x} = 0 THEN
            least({u.max_interval_s}, floor(db.fetch_interval_s * {float(u.interval_growth)})::BIGINT)
        WHEN {seen} THEN
            list_extract({table}, {grid_index_sql(u, f"(CASE WHEN db.fetch_count = 0 THEN {prior} ELSE {rate} END)")})
        ELSE db.fetch_interval_s END"""


def refresh_budget_per_s(config: Config) -> float:
    """Fetches per second the optimal schedule plans for: the budget of a cycle
    (``update.refresh_budget_per_cycle``, 0: ``generate.top_n``) over ``update.cycle_interval_s``
    (in update, the learned cadence: :func:`with_learned_cadence`). Not what generate
    selected last: the plan spends about its budget, so a budget taken from the last
    selections would shrink cycle after cycle (each plan a little short of the last)."""
    u = config.update
    return (u.refresh_budget_per_cycle or config.generate.top_n) / u.cycle_interval_s


@dataclass
class RateHistogram:
    """What the optimal schedule's plan needs of a set of crawl DB rows, bounded whatever
    their number: the pages with a learned rate counted per grid rate, and the visits per
    second the other pages take (never refetched, or no change seen: their intervals follow
    their own rules, so that share comes off the budget first). A bucket's histograms add
    up to the crawl DB's (issue #11: the coordinator sums a row per grid rate and bucket,
    it reads no crawl DB row)."""

    counts: dict[int, int] = field(default_factory=dict)
    """1-based index in :func:`rate_grid` → pages whose learned rate rounds to it."""
    fixed_per_s: float = 0.0
    """Fetches per second the pages without a learned rate take (1 / their interval)."""

    def __add__(self, other: RateHistogram) -> RateHistogram:
        counts = dict(self.counts)
        for i, c in other.counts.items():
            counts[i] = counts.get(i, 0) + c
        return RateHistogram(counts, self.fixed_per_s + other.fixed_per_s)


def rate_histogram(con, db_source: str, u: UpdateConfig, fetched: str, seen: str, changed: str) -> RateHistogram:
    """The :class:`RateHistogram` of the rows of ``db_source`` (crawl DB rows) as they will be
    after the segment's results ``fetched`` (conditions ``seen`` and ``changed`` as update's
    transition uses them: without this segment, the first cycle that learns anything would
    be planned as if nothing were known). ``fetched`` may hold several results of a URL:
    its newest counts, as in update. One pass over the rows (the join with the results and
    the rows after them into a temp table), then two aggregates over that table, linear: the
    two aggregates ran the scan and the join once each (1.0-1.2 CPU-s a bucket of the 10 M
    store against 0.85-0.95, docs/incremental.md "Update's scans at 100 M"); one aggregate
    over both ran the rate's arithmetic on every row ("Update, third pass")."""
    after = f"""SELECT db.fetch_count - 1 + CASE WHEN {seen} THEN 1 ELSE 0 END AS n,
               db.change_count + CASE WHEN {changed} THEN 1 ELSE 0 END AS x,
               {seconds_between_sql(f"(CASE WHEN {seen} THEN f.fetched_at ELSE db.last_fetched END)",
                                    "coalesce(db.first_fetched, f.fetched_at)")} AS span_s,
               db.fetch_interval_s, {unchanged_after_sql(seen, changed)} AS unchanged_s
        FROM {db_source} db LEFT JOIN (SELECT * FROM {fetched}
            QUALIFY row_number() OVER (PARTITION BY url ORDER BY fetched_at DESC NULLS LAST, outcome) = 1) f
        ON db.url = f.url"""
    rate = learned_rate_sql("n", "x", "span_s", "unchanged_s")
    # Both aggregates below read only rows with n >= 0 (a page fetched at least once).
    con.execute(f"CREATE OR REPLACE TEMP TABLE rate_after AS SELECT * FROM ({after}) WHERE n >= 0")
    try:
        bins = con.execute(f"""SELECT {grid_index_sql(u, rate)} AS i, count(*) FROM rate_after
            WHERE n >= 1 AND x > 0 GROUP BY i""").fetchall()
        fixed = con.execute("""SELECT coalesce(sum(1.0 / greatest(1, fetch_interval_s)), 0) FROM rate_after
            WHERE NOT (n >= 1 AND x > 0)""").fetchall()[0][0]
    finally:
        con.execute("DROP TABLE IF EXISTS rate_after")
    return RateHistogram({int(i): int(c) for i, c in bins}, float(fixed))


def multiplier_for(config: Config, histogram: RateHistogram) -> float:
    """μ (seconds) at which the optimal schedule's intervals for ``histogram``'s pages spend
    the fetch budget (:func:`refresh_budget_per_s`) left after its fixed visits."""
    u = config.update
    if not histogram.counts:
        return DEFAULT_MULTIPLIER_S
    grid = rate_grid(u)
    indexes = sorted(histogram.counts)
    rates = np.array([grid[i - 1] for i in indexes], float)
    counts = np.array([histogram.counts[i] for i in indexes], float)
    return optimum.solve_multiplier(lambda m: float(np.sum(counts / planned_cycles(u, rates, m))),
                                    refresh_budget_per_s(config) - histogram.fixed_per_s)


def refresh_multiplier(con, db_source: str, config: Config, fetched: str, seen: str, changed: str) -> float:
    """μ (seconds) at which the optimal schedule's intervals spend the fetch budget, from
    every row of ``db_source`` in this connection (:func:`rate_histogram`, then
    :func:`multiplier_for`). Update itself sums a histogram per bucket (:func:`plan_refresh`);
    this one-table form serves scripts/bench_freshness.py and the tests."""
    return multiplier_for(config, rate_histogram(con, db_source, config.update, fetched, seen, changed))


@dataclass(frozen=True)
class SegmentBucketTask:
    """A task on one crawl DB bucket for a segment's update (picklable: locations, ids, the config)."""

    store_uri: str
    config: Config
    segment: str
    bucket: int
    old_file: StorePath
    """The bucket's base (or its base and deltas: crawldb.BucketFiles)."""
    schema_version: int


@dataclass(frozen=True)
class RateHistogramTask(SegmentBucketTask):
    """One crawl DB bucket's share of the plan."""

    seen_sql: str
    """SQL condition on a result ``f``: the page answered (update.SEEN_SQL)."""
    changed_sql: str
    """SQL condition on ``db`` and ``f``: the content changed (update.CHANGED_SQL)."""
    workers: int = 1


def bucket_rate_histogram(task: RateHistogramTask) -> RateHistogram:
    """A task on update's executor: the :class:`RateHistogram` of one bucket — its old rows
    joined to the segment's results routed to it (``update/results/bucket-N/``, resolved as
    update_bucket resolves them). Reads only those files; writes nothing. A bucket without
    rows has no page to plan (the results only join its rows): its histogram is empty,
    without DuckDB."""
    store = Store(task.store_uri)
    if holds_no_rows(store, as_bucket_files(task.old_file).files):
        return RateHistogram()
    return scan_rate_histogram(store, task)


def scan_rate_histogram(store: Store, task: RateHistogramTask) -> RateHistogram:
    """:func:`bucket_rate_histogram` in DuckDB."""
    con = connect(store, task.config, task.workers)
    try:
        inputs = seg.segment_dir(store, task.segment) / seg.UPDATE_INPUTS
        old = bucket_source_sql(store, con, task.old_file, task.schema_version)  # base and deltas
        routed = routed_source(con, store, routed_files(store, inputs, "results", task.bucket), ROUTED_FETCHED,
                               "no_fetched")
        return rate_histogram(con, old, task.config.update, resolved_fetched_sql(routed), task.seen_sql,
                              task.changed_sql)
    finally:
        con.close()


def plan_refresh(store: Store, config: Config, executor, files: list, schema_version: int, segment: str,
                 seen: str, changed: str) -> float:
    """The optimal schedule's μ for this update: a :func:`bucket_rate_histogram` task per
    crawl DB bucket (``files``: each bucket's current file) on ``executor``, their
    histograms summed here (a row per grid rate: ~200 numbers, whatever the crawl's size)
    and μ solved on the sum."""
    tasks = [RateHistogramTask(store.uri, config, segment, bucket, file, schema_version, seen, changed,
                               executor.workers) for bucket, file in enumerate(files)]
    return multiplier_for(config, sum(executor.map(bucket_rate_histogram, tasks), RateHistogram()))


CADENCE_MIN_GAPS = 1
"""Gaps between generates needed before the cadence is learned (else ``update.cycle_interval_s``)."""


def learned_cycle_interval_s(store: Store, config: Config) -> int:
    """How often this crawl's cycles run (seconds): the median gap between the generate times
    of its last ``update.cadence_segments`` + 1 segments (their generated markers), at most
    ``update.cycle_interval_s`` — which it is until there are two. The plan needs the real
    cadence: the budget per second is the budget per cycle over it, and intervals are whole
    cycles — a configured day would plan ``crawl run``'s back-to-back cycles, minutes apart,
    as if each page could be visited once a day at most. At most the configured value: a
    cycle with nothing due makes no segment, so a gap can be several cycles, and how many
    depends on the plan itself — a real crawl of the test web (4 h cycles) took its first
    gap, the day until its first pages were due, as the cycle and planned whole days: 0.65
    refetches a cycle of its budget of 3 (``bench_freshness.py --real``), fewer due pages,
    longer gaps. The median, so that one long pause or one cycle re-generated at once does
    not set it; abandoned segments count (generate ran)."""
    u = config.update
    if u.cadence_segments <= 0:
        return u.cycle_interval_s
    times = []
    for segment in seg.segment_ids(store)[-(u.cadence_segments + 1):]:
        marker = seg.read_marker(store, segment, seg.Generated)
        if marker is not None and marker.generated_at:
            times.append(dt.datetime.fromisoformat(marker.generated_at).timestamp())
    gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
    if len(gaps) < CADENCE_MIN_GAPS:
        return u.cycle_interval_s
    return max(1, min(u.cycle_interval_s, int(round(float(np.median(gaps))))))


def with_learned_cadence(store: Store, config: Config) -> Config:
    """``config`` with ``update.cycle_interval_s`` set to :func:`learned_cycle_interval_s`
    (a copy: the caller's config is not changed)."""
    learned = learned_cycle_interval_s(store, config)
    return dataclasses.replace(config, update=dataclasses.replace(config.update, cycle_interval_s=learned))


def prepare_schedule(con, config: Config, old: str, hosts: str | None = None) -> None:
    """Tables the configured schedule's SQL reads, made from ``old`` (a crawl DB bucket):
    for ``adaptive`` and ``optimal``, ``host_prior`` (host, rate): the median learned rate of
    the host's pages refetched at least once, the prior of its pages not fetched yet (a host
    where no change was seen on most pages gives no prior: its new pages start at the
    default interval). The median, not the mean: the mean follows the host's fastest pages,
    which for the optimal schedule may be too fast to be worth a visit at all. A host's
    pages share a bucket, so the bucket holds all it needs; one aggregate, linear. ``hosts``
    (SQL source of a ``host`` column): only these hosts' priors, those of the rows a delta
    writes (the medians of every host of the bucket were most of the aggregate's cost)."""
    if config.update.schedule == "fixed":
        return
    only = f"AND db.host IN (SELECT host FROM {hosts})" if hosts else ""
    con.execute(f"""CREATE OR REPLACE TEMP TABLE host_prior AS
        SELECT db.host, median({STORED_RATE_SQL}) AS rate FROM {old} db WHERE db.fetch_count >= 2 {only}
        GROUP BY db.host HAVING median({STORED_RATE_SQL}) > 0""")


SCHEDULES = {"adaptive": AdaptiveSchedule, "fixed": FixedSchedule, "optimal": OptimalSchedule}
"""``update.schedule`` → its class (the config's Choice lists the same names)."""


def schedule_for(config: Config, multiplier_s: float | None = None) -> Schedule:
    """The schedule ``update.schedule`` names; ``multiplier_s``: the optimal schedule's μ
    (:func:`refresh_multiplier`), ignored by the others."""
    if config.update.schedule == "optimal" and multiplier_s is not None:
        return OptimalSchedule(config.update, multiplier_s)
    return SCHEDULES[config.update.schedule](config.update)
