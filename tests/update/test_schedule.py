"""Tests of cycles/update/schedule.py: the refetch-interval rule as one swappable schedule.

Each schedule's SQL is evaluated in DuckDB over an old row ``db`` and a fetch result ``f``,
as transition_sql uses it; the transition matrix (test_transitions.py) covers the adaptive
schedule end to end."""

from __future__ import annotations

import duckdb
import pytest

from cycles.config import Config, config_from_dict
from cycles.errors import ConfigError
from cycles.update.schedule import AdaptiveSchedule, FixedSchedule, schedule_for
from cycles.update.update import transition_sql

DAY = 86400
SEEN = "f.outcome IN ('ok', 'not_modified')"
CHANGED = "(f.outcome = 'ok' AND db.content_hash IS NOT NULL AND f.content_hash IS DISTINCT FROM db.content_hash)"


def interval(schedule, *, fetch_count: int, change_count: int, interval_s: int, outcome: str = "ok",
             changed: bool = False, host: str = "h.example") -> int:
    """The schedule's new interval for one row."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"""CREATE TABLE db AS SELECT '{host}' AS host, 'http://{host}/' AS url,
        {fetch_count} AS fetch_count, {change_count} AS change_count, {interval_s}::INTEGER AS fetch_interval_s,
        'a' AS content_hash, TIMESTAMPTZ '2024-01-01 00:00:00+00' AS first_fetched""")
    con.execute(f"""CREATE TABLE f AS SELECT '{outcome}' AS outcome, '{'b' if changed else 'a'}' AS content_hash,
        TIMESTAMPTZ '2024-03-01 00:00:00+00' AS fetched_at""")
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
    assert AdaptiveSchedule(Config().update).interval_sql(SEEN, CHANGED) in transition_sql(Config())


def test_an_unknown_schedule_is_refused():
    with pytest.raises(ConfigError, match="update.schedule"):
        config_from_dict({"update": {"schedule": "weekly"}})
