"""Tests of cycles/update/schedule.py: the refetch-interval rule as one swappable schedule.

Each schedule's SQL is evaluated in DuckDB over an old row ``db`` and a fetch result ``f``,
as transition_sql uses it; the transition matrix (test_transitions.py) covers the adaptive
schedule end to end."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from cycles.config import Config, config_from_dict
from cycles.errors import ConfigError
from cycles.update import optimum
from cycles.update.schedule import (DEFAULT_MULTIPLIER_S, AdaptiveSchedule, FixedSchedule, OptimalSchedule,
                                    planned_cycles, planned_intervals, prepare_schedule, rate_grid, refresh_budget_per_s, refresh_multiplier,
                                    schedule_for)
from cycles.update.update import transition_sql

DAY = 86400
SEEN = "f.outcome IN ('ok', 'not_modified')"
CHANGED = "(f.outcome = 'ok' AND db.content_hash IS NOT NULL AND f.content_hash IS DISTINCT FROM db.content_hash)"


def interval(schedule, *, fetch_count: int, change_count: int, interval_s: int, outcome: str = "ok",
             changed: bool = False, host: str = "h.example") -> int:
    """The schedule's new interval for one row."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE host_prior (host VARCHAR, rate DOUBLE)")
    con.execute(f"""CREATE TABLE db AS SELECT '{host}' AS host, 'http://{host}/' AS url,
        {fetch_count} AS fetch_count, {change_count} AS change_count, {interval_s}::INTEGER AS fetch_interval_s,
        'a' AS content_hash, TIMESTAMPTZ '2024-01-01 00:00:00+00' AS first_fetched,
        TIMESTAMPTZ '2024-02-20 00:00:00+00' AS last_fetched, NULL::BIGINT AS unchanged_s""")
    con.execute(f"""CREATE TABLE f AS SELECT '{outcome}' AS outcome, '{'b' if changed else 'a'}' AS content_hash,
        TIMESTAMPTZ '2024-03-01 00:00:00+00' AS fetched_at, NULL::VARCHAR AS last_modified""")
    return con.execute(f"SELECT ({schedule.interval_sql(SEEN, CHANGED)})::BIGINT FROM db, f").fetchone()[0]


@pytest.mark.parametrize("old", [1, 7, 3601, 86401, 40 * DAY, 89 * DAY])
def test_adaptive_grows_an_unchanged_page_by_half_as_before(old):
    """Default growth 1.5 gives what the rule gave before it was a setting: (i * 3) // 2, capped."""
    u = Config().update
    got = interval(AdaptiveSchedule(u), fetch_count=3, change_count=0, interval_s=old)
    assert got == min(u.max_interval_s, (old * 3) // 2)


def test_adaptive_growth_is_configurable():
    config = config_from_dict({"update": {"interval_growth": 2.0}})
    assert interval(schedule_for(config), fetch_count=3, change_count=0, interval_s=DAY) == 2 * DAY


def test_adaptive_follows_the_change_rate():
    """A page that changed at every visit is refetched sooner than one unchanged."""
    s = AdaptiveSchedule(Config().update)
    often = interval(s, fetch_count=5, change_count=4, interval_s=10 * DAY, changed=True)
    assert Config().update.min_interval_s <= often < 10 * DAY


def test_fixed_schedule_ignores_changes():
    config = config_from_dict({"update": {"schedule": "fixed", "news_like_hosts": ["news.example"]}})
    s = schedule_for(config)
    assert isinstance(s, FixedSchedule)
    u = config.update
    for fetch_count, change_count, changed in [(0, 0, False), (3, 0, False), (5, 4, True)]:
        assert interval(s, fetch_count=fetch_count, change_count=change_count, interval_s=DAY,
                        changed=changed) == u.default_interval_s
    assert interval(s, fetch_count=3, change_count=3, interval_s=DAY, host="news.example") == u.news_like_interval_s
    # Not seen (an error): the interval is kept.
    assert interval(s, fetch_count=3, change_count=0, interval_s=DAY, outcome="server_error") == DAY


def test_transition_sql_uses_the_configured_schedule():
    fixed = config_from_dict({"update": {"schedule": "fixed"}})
    assert FixedSchedule(fixed.update).interval_sql(SEEN, CHANGED) in transition_sql(fixed)
    adaptive = config_from_dict({"update": {"schedule": "adaptive"}})
    assert AdaptiveSchedule(adaptive.update).interval_sql(SEEN, CHANGED) in transition_sql(adaptive)
    # The default: the optimal schedule (its plan's μ, or a default one without a plan).
    assert OptimalSchedule(Config().update).interval_sql(SEEN, CHANGED) in transition_sql(Config())
    assert OptimalSchedule(Config().update, 1234.0).interval_sql(SEEN, CHANGED) in transition_sql(Config(), 1234.0)


def test_an_unknown_schedule_is_refused():
    with pytest.raises(ConfigError, match="update.schedule"):
        config_from_dict({"update": {"schedule": "weekly"}})


# --- the optimal schedule (Cho & Garcia-Molina on learned rates, under the fetch budget) ---

def optimal_config(**update) -> Config:
    config = config_from_dict({"update": {"schedule": "optimal", "cycle_interval_s": 3600, **update}})
    return config


def optimal_interval(schedule, con=None, *, fetch_count: int, changes: int, host: str = "h.example") -> int:
    """The optimal schedule's new interval for a page refetched ``fetch_count`` times over 60
    days, ``changes`` of them (this fetch included) changes; ``con`` may hold a host_prior."""
    con = con or duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE IF NOT EXISTS host_prior (host VARCHAR, rate DOUBLE)")
    changed = changes > 0
    con.execute(f"""CREATE OR REPLACE TABLE db AS SELECT '{host}' AS host, 'http://{host}/' AS url,
        {fetch_count} AS fetch_count, {max(0, changes - 1)} AS change_count, {DAY}::INTEGER AS fetch_interval_s,
        'a' AS content_hash, TIMESTAMPTZ '2024-01-01 00:00:00+00' AS first_fetched,
        TIMESTAMPTZ '2024-02-25 00:00:00+00' AS last_fetched, NULL::BIGINT AS unchanged_s""")
    con.execute(f"""CREATE OR REPLACE TABLE f AS SELECT 'ok' AS outcome, '{'b' if changed else 'a'}' AS content_hash,
        TIMESTAMPTZ '2024-03-01 00:00:00+00' AS fetched_at, NULL::VARCHAR AS last_modified""")
    return con.execute(f"SELECT ({schedule.interval_sql(SEEN, CHANGED)})::BIGINT FROM db, f").fetchone()[0]


def test_optimal_schedule_is_selectable_and_uses_its_plan():
    config = optimal_config()
    assert isinstance(schedule_for(config), OptimalSchedule)
    assert schedule_for(config, 1234.0) == OptimalSchedule(config.update, 1234.0)
    assert OptimalSchedule(config.update, 1234.0).interval_sql(SEEN, CHANGED) in transition_sql(config, 1234.0)


def test_optimal_gives_faster_pages_shorter_intervals_until_the_optimum_says_stop():
    """Ten refetches over 60 days with 1..10 changes: the learned rate rises; the interval
    falls with it while a visit is worth its cost, then jumps to the longest (f = 0) once
    the rate passes 1/μ — and each interval is the optimum's 1/f for the learned rate."""
    config = optimal_config()
    u, mu = config.update, 20 * DAY
    s = OptimalSchedule(u, mu)
    got = [optimal_interval(s, fetch_count=10, changes=x) for x in range(1, 11)]
    rates = optimum.estimate_rate(10, 10 - np.arange(1, 11), 6 * DAY)
    freq = optimum.frequencies_at(rates, mu)
    visited = freq > 0
    assert visited[0] and not visited[-1]
    kept = [g for g, v in zip(got, visited) if v]
    assert kept == sorted(kept, reverse=True) and kept[0] > kept[-1]
    # Within the grid's rounding (4.5 % in rate) and the cycle's (an hour) of 1/f.
    for g, f in zip(kept, freq[visited]):
        assert abs(g - 1 / f) <= 0.05 / f + u.cycle_interval_s
    assert all(g >= u.max_interval_s - u.cycle_interval_s for g, v in zip(got, visited) if not v)


def test_optimal_grows_an_unchanged_page_and_starts_new_ones_at_the_first_interval():
    config = optimal_config()
    s = OptimalSchedule(config.update, DAY)
    assert optimal_interval(s, fetch_count=3, changes=0) == int(1.5 * DAY)
    assert optimal_interval(s, fetch_count=0, changes=0) == config.update.default_interval_s


def test_host_prior_applies_to_new_urls():
    """A URL fetched for the first time starts at the interval its host's mean learned rate
    earns; on a host with nothing learned (or no change seen) it starts at the default."""
    config = optimal_config()
    u = config.update
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("""CREATE TABLE old AS SELECT * FROM (VALUES
        ('h.example', 5, 4), ('h.example', 5, 2), ('h.example', 1, 0), ('calm.example', 5, 0))
        v(host, fetch_count, change_count)""")
    con.execute("""CREATE OR REPLACE TABLE old AS SELECT *, TIMESTAMPTZ '2024-01-01 00:00:00+00' AS first_fetched,
        TIMESTAMPTZ '2024-01-09 00:00:00+00' AS last_fetched, NULL::BIGINT AS unchanged_s FROM old""")
    prepare_schedule(con, config, "old")
    prior = con.execute("SELECT host, rate FROM host_prior").fetchall()
    learned = optimum.estimate_rate(np.array([4, 4]), np.array([0, 2]), 2 * DAY).mean()
    assert prior == [("h.example", pytest.approx(learned))]
    mu = DAY  # μλ ≈ 0.7: the host's pages are worth visits
    s = OptimalSchedule(u, mu)
    new_on_h = optimal_interval(s, con, fetch_count=0, changes=0, host="h.example")
    expected = 1 / optimum.frequencies_at([learned], mu)[0]
    assert new_on_h < u.default_interval_s
    assert abs(new_on_h - expected) <= 0.05 * expected + u.cycle_interval_s
    assert optimal_interval(s, con, fetch_count=0, changes=0, host="calm.example") == u.default_interval_s
    assert optimal_interval(s, con, fetch_count=0, changes=0, host="new.example") == u.default_interval_s
    # A declared news-like host keeps its short first interval.
    news = optimal_config(news_like_hosts=["h.example"])
    assert optimal_interval(OptimalSchedule(news.update, mu), con, fetch_count=0, changes=0,
                            host="h.example") == news.update.news_like_interval_s


def test_refresh_multiplier_spends_the_budget():
    """μ is chosen so that the planned visits of the pages with a learned rate, plus those
    the other pages take, add up to the budget per second."""
    config = optimal_config(refresh_budget_per_cycle=2)  # 2 fetches an hour
    u = config.update
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    # 40 pages refetched 8 times over 8 days with 1..8 changes; 10 never refetched (1 day).
    con.execute("""CREATE TABLE db AS
        SELECT 'http://h/' || i AS url, 9 AS fetch_count, 1 + i % 8 AS change_count,
               TIMESTAMPTZ '2024-01-01 00:00:00+00' AS first_fetched,
               TIMESTAMPTZ '2024-01-09 00:00:00+00' AS last_fetched, 86400 AS fetch_interval_s, 'a' AS content_hash,
               NULL::BIGINT AS unchanged_s
        FROM range(40) t(i)
        UNION ALL SELECT 'http://h/new' || i, 1, 0, TIMESTAMPTZ '2024-01-09 00:00:00+00',
               TIMESTAMPTZ '2024-01-09 00:00:00+00', 86400, 'a', NULL FROM range(10) t(i)""")
    con.execute("""CREATE TABLE fetched AS SELECT 'x' AS url, 'ok' AS outcome, 'a' AS content_hash,
        TIMESTAMPTZ '2024-01-10 00:00:00+00' AS fetched_at, NULL::VARCHAR AS last_modified WHERE false""")
    mu = refresh_multiplier(con, "db", config, "fetched", SEEN, CHANGED)
    rates = optimum.estimate_rate(8, 8 - (1 + np.arange(40) % 8), DAY)
    grid = rate_grid(u)
    nearest = grid[np.abs(np.log(grid[None, :] / rates[:, None])).argmin(axis=1)]
    spent = np.sum(1 / planned_cycles(u, nearest, mu)) + 10 / DAY
    assert spent == pytest.approx(refresh_budget_per_s(config), rel=0.1)
    # Half the budget: a larger μ (each visit must buy more), fewer visits planned.
    config.update.refresh_budget_per_cycle = 1
    assert refresh_multiplier(con, "db", config, "fetched", SEEN, CHANGED) > mu


def test_update_plans_with_the_optimal_schedule(store, tmp_path):
    """Through update_segment (the plan over the whole crawl DB, the host prior in each
    bucket): a page that changed at its refetch six hours later is the only page with a
    learned rate; a budget of a fetch an hour is more than it can take, so it is
    planned at the shortest interval (not grown as an unchanged page would be)."""
    import datetime as dt

    from cycles.storage.store import utcnow
    from tests.support.transitions import cycle_once, due_now

    config = optimal_config(refresh_budget_per_cycle=1)
    config.db.buckets = 2
    t0 = utcnow() - dt.timedelta(days=10)
    intervals = []
    for i in range(2):
        row = cycle_once(store, config, tmp_path, {"outcome": "ok", "http_status": 200, "content_hash": str(i) * 32,
                                                    "fetched_at": t0 + dt.timedelta(hours=6 * i)},
                         before=due_now if i else None)
        intervals.append(row["fetch_interval_s"])
    assert (row["fetch_count"], row["change_count"]) == (2, 1)
    assert intervals == [config.update.default_interval_s, config.update.min_interval_s]


def unchanged_seen(*, changed: bool, last_modified: str | None, fetch_count: int = 2,
                   unchanged_s: int | None = 1000) -> int | None:
    """The row's unchanged_s after a refetch at 2024-03-01 12:00 of a page last fetched at 08:00."""
    from cycles.update.schedule import unchanged_after_sql
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    lm = "NULL" if last_modified is None else f"'{last_modified}'"
    con.execute(f"""CREATE TABLE db AS SELECT 'a' AS content_hash, {fetch_count} AS fetch_count,
        TIMESTAMPTZ '2024-03-01 08:00:00+00' AS last_fetched, {'NULL' if unchanged_s is None else unchanged_s}::BIGINT AS unchanged_s""")
    con.execute(f"""CREATE TABLE f AS SELECT 'ok' AS outcome, '{'b' if changed else 'a'}' AS content_hash,
        TIMESTAMPTZ '2024-03-01 12:00:00+00' AS fetched_at, {lm}::VARCHAR AS last_modified""")
    return con.execute(f"SELECT {unchanged_after_sql(SEEN, CHANGED)} FROM db, f").fetchone()[0]


def test_unchanged_time_adds_the_interval_or_the_last_modified_age():
    """No change: the 4 h since the last fetch; a change: the age of its Last-Modified (1 h)."""
    assert unchanged_seen(changed=False, last_modified=None) == 1000 + 4 * 3600
    assert unchanged_seen(changed=True, last_modified="Fri, 01 Mar 2024 11:00:00 GMT") == 1000 + 3600
    # The first fetch adds nothing (no interval yet); it starts the sum at 0.
    assert unchanged_seen(changed=True, last_modified="Fri, 01 Mar 2024 11:00:00 GMT", fetch_count=0,
                          unchanged_s=0) == 0


@pytest.mark.parametrize("last_modified", [
    None,                                # no header
    "yesterday",                         # not an HTTP date
    "Fri, 01 Mar 2024 07:00:00 GMT",     # before the last fetch, yet the content changed
    "Fri, 01 Mar 2024 11:59:30 GMT",     # 30 s old: a page that stamps the time of the request
])
def test_a_change_without_a_usable_last_modified_leaves_the_rate_to_the_counts(last_modified):
    assert unchanged_seen(changed=True, last_modified=last_modified) is None
    assert unchanged_seen(changed=False, last_modified=last_modified, unchanged_s=None) is None


def test_learned_rate_sql_is_the_estimators():
    """From Last-Modified with three changes or more; from the counts otherwise."""
    from cycles.update.schedule import learned_rate_sql
    sql = lambda n, x, span, t: duckdb.connect().execute(f"SELECT {learned_rate_sql(str(n), str(x), str(span), t)}").fetchone()[0]  # noqa: E731
    assert sql(6, 3, 6 * DAY, str(2 * DAY)) == pytest.approx(optimum.estimate_rate_last_modified(3, 2 * DAY))
    assert sql(6, 2, 6 * DAY, str(2 * DAY)) == pytest.approx(optimum.estimate_rate(6, 4, DAY))
    assert sql(6, 3, 6 * DAY, "NULL") == pytest.approx(optimum.estimate_rate(6, 3, DAY))


def test_last_modified_tells_an_hourly_page_from_a_four_hourly_one():
    """Fetched every 4 h, both change at every visit: the counts give them the same interval,
    their Last-Modified ages (30 min, 2 h) give the hourly one the longer (it changes faster
    than min_interval_s lets us follow)."""
    s = AdaptiveSchedule(Config().update)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE host_prior (host VARCHAR, rate DOUBLE)")

    def adaptive(age_h, unchanged_s):
        con.execute(f"""CREATE OR REPLACE TABLE db AS SELECT 'h' AS host, 'http://h/' AS url, 5 AS fetch_count,
            4 AS change_count, 14400::INTEGER AS fetch_interval_s, 'a' AS content_hash,
            TIMESTAMPTZ '2024-03-01 00:00:00+00' AS first_fetched, TIMESTAMPTZ '2024-03-01 16:00:00+00' AS last_fetched,
            {unchanged_s}::BIGINT AS unchanged_s""")
        lm = f"strftime(TIMESTAMPTZ '2024-03-01 20:00:00+00' - INTERVAL {int(age_h * 60)} MINUTE, '%a, %d %b %Y %H:%M:%S GMT')"
        con.execute(f"""CREATE OR REPLACE TABLE f AS SELECT 'ok' AS outcome, 'b' AS content_hash,
            TIMESTAMPTZ '2024-03-01 20:00:00+00' AS fetched_at, {lm} AS last_modified""")
        return con.execute(f"SELECT ({s.interval_sql(SEEN, CHANGED)})::BIGINT FROM db, f").fetchone()[0]

    assert adaptive(0.5, "NULL") == adaptive(2, "NULL")
    hourly, four_hourly = adaptive(0.5, 4 * 1800), adaptive(2, 4 * 7200)
    assert hourly > four_hourly


def test_a_schema_2_crawl_db_gets_unchanged_s():
    """Rows written before unchanged_s: a page refetched already has a history without it
    (null: its rate stays estimated from the counts); the others start at 0."""
    from cycles.tables.crawldb import upgraded_sql
    con = duckdb.connect()
    con.execute("CREATE TABLE v2 AS SELECT 'http://h/' || i AS url, i AS fetch_count FROM range(4) t(i)")
    got = con.execute(f"SELECT fetch_count, unchanged_s FROM {upgraded_sql('v2', 2)} ORDER BY 1").fetchall()
    assert got == [(0, 0), (1, 0), (2, None), (3, None)]
    assert upgraded_sql("v3", 3) == "v3"


def test_adaptive_starts_a_new_page_of_a_fast_changing_host_at_a_short_interval():
    """The host prior (median learned rate of its pages) sets a new page's first interval:
    on a host whose pages change about every 8 hours, revisit_factor × 8 h; on a host with
    nothing learned, the default."""
    config = Config()
    u = config.update
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    # Three pages refetched 6 times in 2 days, each change seen with a Last-Modified 4 h old:
    # T = 4 h × 6, X = 6 -> (X - 1) / T = 1 / 4.8 h; a calm host never changed.
    con.execute("""CREATE TABLE old AS SELECT * FROM (VALUES ('fast.example', 7, 6, 6 * 14400),
        ('fast.example', 7, 6, 6 * 14400), ('fast.example', 7, 6, 6 * 14400), ('calm.example', 7, 0, 2 * 86400))
        v(host, fetch_count, change_count, unchanged_s)""")
    con.execute("""CREATE OR REPLACE TABLE old AS SELECT *, TIMESTAMPTZ '2024-01-01 00:00:00+00' AS first_fetched,
        TIMESTAMPTZ '2024-01-03 00:00:00+00' AS last_fetched FROM old""")
    prepare_schedule(con, config, "old")
    assert con.execute("SELECT host, rate FROM host_prior").fetchall() == [("fast.example", pytest.approx(5 / (6 * 14400)))]
    s = AdaptiveSchedule(u)

    def first(host):
        con.execute(f"""CREATE OR REPLACE TABLE db AS SELECT '{host}' AS host, 'http://{host}/new' AS url, 0 AS fetch_count,
            0 AS change_count, {u.default_interval_s}::INTEGER AS fetch_interval_s, NULL::VARCHAR AS content_hash,
            NULL::TIMESTAMPTZ AS first_fetched, NULL::TIMESTAMPTZ AS last_fetched, 0::BIGINT AS unchanged_s""")
        con.execute("""CREATE OR REPLACE TABLE f AS SELECT 'ok' AS outcome, 'b' AS content_hash,
            TIMESTAMPTZ '2024-01-03 01:00:00+00' AS fetched_at, NULL::VARCHAR AS last_modified""")
        return con.execute(f"SELECT ({s.interval_sql(SEEN, CHANGED)})::BIGINT FROM db, f").fetchone()[0]

    assert first("fast.example") == pytest.approx(u.revisit_factor * 6 * 14400 / 5, abs=1)
    assert first("calm.example") == first("new.example") == u.default_interval_s


def test_the_plan_in_whole_cycles_is_near_the_best_whole_cycle_plan():
    """Four pages (rates 1/6 h .. 1/week), 2 h cycles, a budget of 1.5 fetches per 2 h: the
    planned cycles at the solved μ spend at most the budget and reach within 2 % of the best
    freshness any choice of whole cycles (1..24 each) within the budget reaches (brute force).
    Measured: the plan (2, 3, 4, 7 cycles) spends 82 % of the budget for 3.495 pages fresh,
    the best whole cycles (2, 2, 3, 6) 3.556, the continuous optimum 3.582: one μ for all
    pages cannot reach (2, 2, 3, 6) — at μ ≈ 1740 s the fastest page steps from 1 to 2 cycles
    and the spend from 117 % to 82 % of the budget (the relaxation's gap on so few pages)."""
    import itertools

    config = optimal_config(cycle_interval_s=7200, refresh_budget_per_cycle=3, min_interval_s=3600,
                            max_interval_s=48 * 3600)
    u = config.update
    rates = np.array([1 / (6 * 3600), 1 / DAY, 1 / (2 * DAY), 1 / (7 * DAY)])
    budget = 1.5 / u.cycle_interval_s
    mu = optimum.solve_multiplier(lambda m: float(np.sum(1 / planned_cycles(u, rates, m))), budget)
    plan = planned_cycles(u, rates, mu)
    assert np.sum(1 / plan) <= budget * (1 + 1e-9)
    planned = float(optimum.freshness(rates, 1 / plan).sum())
    intervals = np.array(list(itertools.product(range(1, 25), repeat=len(rates)))) * float(u.cycle_interval_s)
    within = np.sum(1 / intervals, axis=1) <= budget * (1 + 1e-9)
    best = float(optimum.freshness(rates[None, :], 1 / intervals[within]).sum(axis=1).max())
    assert planned >= 0.98 * best


# --- the plan as per-bucket work, at the crawl's own cadence (issue #13 §4, issue #11) ---

def test_bucket_histograms_add_up_to_the_whole_crawl_db():
    """Each bucket's rate histogram (a row per grid rate, and the fixed visits) summed is the
    whole crawl DB's, and μ solved on the sum is μ solved on the whole."""
    from cycles.update.schedule import RateHistogram, multiplier_for, rate_histogram

    config = optimal_config(refresh_budget_per_cycle=2)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    # 60 pages with 1..8 changes in 8 refetches, 10 with none, 10 never refetched; 3 buckets.
    con.execute("""CREATE TABLE db AS
        SELECT 'http://h' || (i % 3) || '/' || i AS url, i % 3 AS bucket, 9 AS fetch_count,
               CASE WHEN i < 60 THEN 1 + i % 8 ELSE 0 END AS change_count,
               TIMESTAMPTZ '2024-01-01 00:00:00+00' AS first_fetched,
               TIMESTAMPTZ '2024-01-09 00:00:00+00' AS last_fetched, 86400 + 600 * i AS fetch_interval_s,
               'a' AS content_hash, CASE WHEN i % 4 = 0 THEN 3600 * i END::BIGINT AS unchanged_s
        FROM range(70) t(i)
        UNION ALL SELECT 'http://h' || (i % 3) || '/new' || i, i % 3, 1, 0, TIMESTAMPTZ '2024-01-09 00:00:00+00',
               TIMESTAMPTZ '2024-01-09 00:00:00+00', 86400, 'a', NULL FROM range(10) t(i)""")
    # This segment's results: a change on some, none on others, an error (not seen).
    con.execute("""CREATE TABLE fetched AS SELECT url, CASE WHEN i % 5 = 4 THEN 'server_error' ELSE 'ok' END AS outcome,
        CASE WHEN i % 2 = 0 THEN 'b' ELSE 'a' END AS content_hash,
        TIMESTAMPTZ '2024-01-10 00:00:00+00' AS fetched_at, NULL::VARCHAR AS last_modified
        FROM (SELECT url, row_number() OVER (ORDER BY url) AS i FROM db) WHERE i % 3 = 0""")
    whole = rate_histogram(con, "db", config.update, "fetched", SEEN, CHANGED)
    parts = [rate_histogram(con, f"(SELECT * FROM db WHERE bucket = {b})", config.update, "fetched", SEEN, CHANGED)
             for b in range(3)]
    summed = sum(parts, RateHistogram())
    assert len(whole.counts) > 5 and all(p.counts for p in parts)
    assert summed.counts == whole.counts
    assert summed.fixed_per_s == pytest.approx(whole.fixed_per_s, rel=1e-12)
    assert multiplier_for(config, summed) == pytest.approx(
        refresh_multiplier(con, "db", config, "fetched", SEEN, CHANGED), rel=1e-9)


def test_update_plans_on_the_buckets_histograms_the_whole_crawl_db_s_mu(store, tmp_path, monkeypatch):
    """Through update_segment (3 buckets, pages of several hosts, changes seen on some): μ from
    the bucket tasks' histograms equals μ of the one aggregate over the whole crawl DB joined
    to every routed result (the coordinator's step before), computed on the same inputs."""
    import datetime as dt

    from cycles.tables import segment as seg
    from cycles.tables.crawldb import connect, crawldb_source_sql
    from cycles.generate.generate import generate
    from cycles.commands.inject import inject
    from cycles.storage.store import utcnow
    from cycles.update import schedule as schedule_module
    from cycles.update import update as update_module
    from cycles.update.route import ROUTED_FETCHED, resolved_fetched_sql, routed_files, routed_source
    from tests.support.transitions import due_now, fetch_result
    update_segment = update_module.update_segment

    config = optimal_config(refresh_budget_per_cycle=3)
    config.db.buckets = 3
    urls = [f"http://h{h}.example/p{i}" for h in range(6) for i in range(4)]
    (tmp_path / "seeds.txt").write_text("\n".join(urls) + "\n")
    inject(store, config, tmp_path / "seeds.txt")
    planned = []

    def checked(store, config, executor, files, schema_version, segment, seen, changed):
        mu = schedule_module.plan_refresh(store, config, executor, files, schema_version, segment, seen, changed)
        con = connect(store, config)
        inputs = seg.segment_dir(store, segment) / seg.UPDATE_INPUTS
        routed = [p for b in range(len(files)) for p in routed_files(store, inputs, "results", b)]
        whole = schedule_module.refresh_multiplier(
            con, crawldb_source_sql(files, con, store, schema_version), config,
            resolved_fetched_sql(routed_source(con, store, routed, ROUTED_FETCHED, "all_routed")), seen, changed)
        con.close()
        planned.append((mu, whole))
        return mu

    monkeypatch.setattr(update_module, "plan_refresh", checked)
    t0 = utcnow() - dt.timedelta(days=10)
    for visit in range(3):
        if visit:
            due_now(store)
        segment = generate(store, config).segment
        fetch_result(store, segment, [
            {"url": url, "host": url.split("/")[2], "outcome": "ok", "http_status": 200,
             "fetched_at": t0 + dt.timedelta(hours=6 * visit + k),
             # page k changes at every visit when k % 3 == 0, at the second when k % 3 == 1, never else
             "content_hash": (str(visit) if k % 3 == 0 else str(min(visit, 1)) if k % 3 == 1 else "0") * 32}
            for k, url in enumerate(urls)])
        update_segment(store, config, segment)
    assert len(planned) == 3
    assert planned[-1][0] != schedule_module.DEFAULT_MULTIPLIER_S  # rates were learned: a real plan
    for mu, whole in planned:
        assert mu == pytest.approx(whole, rel=1e-9)


def generated_at(store, times_s: list[float]) -> None:
    """Segments whose generate ran at these times (seconds after 2024-01-01), oldest first."""
    import datetime as dt

    from cycles.tables import segment as seg

    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    for i, t in enumerate(times_s):
        segment = f"2024010{i}-seg"
        store.write_bytes(store.path(seg.SEGMENTS, segment, "stats", "x.json"), b"{}")
        seg.write_marker(store, seg.Generated(segment, generated_at=(t0 + dt.timedelta(seconds=t)).isoformat()))


def test_the_cadence_is_the_median_gap_between_generates(store):
    """``crawl run``'s cycles minutes apart are planned as such, not as the configured day;
    one long pause does not set the cadence; until two generates, the configured value."""
    from cycles.update.schedule import learned_cycle_interval_s, with_learned_cadence

    config = optimal_config(cycle_interval_s=DAY)
    assert learned_cycle_interval_s(store, config) == DAY  # no segment yet
    generated_at(store, [0])
    assert learned_cycle_interval_s(store, config) == DAY  # one generate: no gap yet
    generated_at(store, [0, 300, 610, 900 + 8 * 3600, 8 * 3600 + 1200, 8 * 3600 + 1500])
    assert learned_cycle_interval_s(store, config) == 300  # gaps 300 310 8h+290 300 300 (one night's pause)
    assert with_learned_cadence(store, config).update.cycle_interval_s == 300
    assert config.update.cycle_interval_s == DAY  # the caller's config is left as it was
    config.update.cadence_segments = 2  # only the last three generates
    assert learned_cycle_interval_s(store, config) == 300
    config.update.cadence_segments = 0  # off: always the configured value
    assert learned_cycle_interval_s(store, config) == DAY


def test_gaps_longer_than_the_configured_cycle_do_not_lengthen_it(store):
    """A small crawl, 4 h cycles: the second segment comes when the first pages are due a day
    later, then when something is due — gaps of several cycles, set by the plan itself. The
    cadence stays at most the configured cycle (a learned day starved a real crawl's plan)."""
    from cycles.update.schedule import learned_cycle_interval_s

    config = optimal_config(cycle_interval_s=4 * 3600)
    generated_at(store, [0, DAY, DAY + 4 * 3600, DAY + 12 * 3600])
    assert learned_cycle_interval_s(store, config) == 4 * 3600


def test_a_short_cadence_plans_within_the_interval_bounds():
    """Cycles five minutes apart: the budget per second is large, and a fast page gets
    min_interval_s (never sooner), a page not worth a visit max_interval_s (never later)."""
    config = optimal_config(cycle_interval_s=300, refresh_budget_per_cycle=100)
    u = config.update
    rates = np.array([1 / 3600, 1 / DAY, 1 / (30 * DAY)])
    intervals = planned_intervals(u, rates, DEFAULT_MULTIPLIER_S)
    assert all(u.min_interval_s <= i <= u.max_interval_s for i in intervals)
    assert planned_intervals(u, rates, 1.0)[0] == u.min_interval_s


@pytest.mark.parametrize("schedule", ["optimal", "adaptive"])
def test_a_row_with_more_changes_than_refetches_is_planned_not_a_crash(schedule):
    """change_count = fetch_count (a crawl DB from another tool, bench_scale's synthetic one):
    ln of a negative number made the rate NaN and its cast to a grid index failed the whole
    update at 100 M URLs. Clamped, the page reads as changing at every refetch."""
    from cycles.update.schedule import rate_histogram

    config = optimal_config(refresh_budget_per_cycle=2)
    config.update.schedule = schedule
    fast = interval(schedule_for(config, 3600.0), fetch_count=4, change_count=4, interval_s=DAY, changed=True)
    every = interval(schedule_for(config, 3600.0), fetch_count=4, change_count=3, interval_s=DAY, changed=True)
    assert fast == every  # as fast as the page that changed at each of its refetches
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("""CREATE TABLE db AS SELECT 'http://h/' || i AS url, 3 AS fetch_count, 3 AS change_count,
        TIMESTAMPTZ '2024-01-01 00:00:00+00' AS first_fetched, TIMESTAMPTZ '2024-01-09 00:00:00+00' AS last_fetched,
        86400 AS fetch_interval_s, 'a' AS content_hash, NULL::BIGINT AS unchanged_s FROM range(5) t(i)""")
    con.execute("""CREATE TABLE fetched AS SELECT 'http://h/none' AS url, 'ok' AS outcome, 'a' AS content_hash,
        TIMESTAMPTZ '2024-01-10 00:00:00+00' AS fetched_at, NULL::VARCHAR AS last_modified""")
    assert sum(rate_histogram(con, "db", config.update, "fetched", SEEN, CHANGED).counts.values()) == 5


@pytest.mark.parametrize("rate, index", [("'nan'::DOUBLE", "first"), ("'inf'::DOUBLE", "last"),
                                         ("'-inf'::DOUBLE", "first"), ("NULL::DOUBLE", "first")])
def test_a_rate_that_is_not_a_number_gets_an_end_of_the_grid(rate, index):
    from cycles.update.schedule import grid_index_sql

    u = Config().update
    got = duckdb.connect().execute(f"SELECT {grid_index_sql(u, rate)}").fetchone()[0]
    assert got == (1 if index == "first" else len(rate_grid(u)))


def test_seconds_between_is_epoch_of_the_difference_bit_for_bit():
    """seconds_between_sql replaces epoch(end - start) in the rate histogram and the host
    priors (docs/incremental.md, "Update's scans at 100 M"): the same double in a stage's
    connection (UTC), for spans of microseconds to decades, negative ones, across leap days
    and DST dates of other zones, and null when either side is."""
    from cycles.tables.crawldb import connect
    from cycles.update.schedule import seconds_between_sql

    con = connect(None, Config())
    try:
        con.execute("""CREATE TEMP TABLE t AS SELECT a, b FROM (
            SELECT TIMESTAMPTZ '2000-01-01 00:00:00+00' + to_microseconds(i * 7919 * 1000003 + i * i) AS a,
                   TIMESTAMPTZ '2024-02-29 23:59:59.999999+00' - to_microseconds(i * 104729 * 999983) AS b
            FROM range(20000) r(i))
            UNION ALL VALUES (TIMESTAMPTZ '2026-03-29 01:00:00.5+00', TIMESTAMPTZ '2026-03-28 01:00:00.25+00'),
                             (TIMESTAMPTZ '2026-10-25 03:00:00+00', TIMESTAMPTZ '2026-10-25 00:59:59.999999+00'),
                             (NULL, TIMESTAMPTZ '2026-10-25 00:00:00+00'), (TIMESTAMPTZ '2026-10-25 00:00:00+00', NULL)""")
        rows = con.execute(f"""SELECT count(*), count(*) FILTER (WHERE epoch(a - b) IS DISTINCT FROM {seconds_between_sql('a', 'b')}),
            count(*) FILTER (WHERE {seconds_between_sql('a', 'b')} IS NULL), count(*) FILTER (WHERE a < b),
            count(*) FILTER (WHERE epoch(a - b) IS DISTINCT FROM (epoch_us(a) - epoch_us(b)) / 1e6)
            FROM t""").fetchone()
    finally:
        con.close()
    assert rows[0] == 20004 and rows[1] == 0
    assert rows[2] == 2  # the two pairs with a null side
    assert 0 < rows[3] < 20004  # negative spans are among those compared
    # The positive control: the plain microseconds over 10⁶ (one rounding, not two) is not
    # the same double on some of these rows, so a wrong formula would be seen.
    assert rows[4] > 0
