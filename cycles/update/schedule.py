"""When a page is fetched again: the refetch-interval rule, one swappable schedule.

Like Nutch's ``FetchSchedule``: update asks the configured schedule (``update.schedule``) for
the SQL of a row's new ``fetch_interval_s`` and uses it in :func:`cycles.update.update.transition_sql`;
the next fetch is then ``fetched_at`` + that interval. Only pages seen (a 2xx or 304 answer)
are scheduled here; the other outcomes (errors, gone, redirects...) have fixed rules in
transition_sql.

- ``adaptive`` (:class:`AdaptiveSchedule`, the default): the interval follows the page's
  observed change rate (Cho & Garcia-Molina);
- ``fixed`` (:class:`FixedSchedule`): every page after ``update.default_interval_s``
  (news-like pages after ``update.news_like_interval_s``).

A schedule's SQL reads the old row as ``db`` and the fetch result as ``f``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from cycles.config import Config, UpdateConfig


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
        host = host.lower().replace("'", "")
        if host.startswith("*."):
            terms.append(f"(db.host = '{host[2:]}' OR db.host LIKE '%.{host[2:]}')")
        else:
            terms.append(f"db.host = '{host}'")
    for pattern in u.news_like_patterns:
        terms.append("regexp_matches(db.url, '" + pattern.replace("'", "''") + "')")
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
    first fetch: the first interval (news-like or default); no change seen yet: grows by
    ``interval_growth``; else ``revisit_factor`` / estimated rate, clamped to
    [min_interval_s, max_interval_s], and longer again for pages changing faster than
    min_interval_s lets us follow."""

    u: UpdateConfig

    def interval_sql(self, seen: str, changed: str) -> str:
        u = self.u
        # Change rate (Cho & Garcia-Molina): X changes in n refetches over `span` seconds.
        n = "db.fetch_count"
        x = f"(db.change_count + CASE WHEN {changed} THEN 1 ELSE 0 END)"
        span = "greatest(1, epoch(f.fetched_at - db.first_fetched))"
        rate = f"(-ln(({n} - {x} + 0.5) / ({n} + 0.5)) / ({span} / {n}))"
        return f"""CASE
        WHEN {seen} AND db.fetch_count = 0 THEN
            {first_interval_sql(u)}
        WHEN {seen} AND {x} = 0 THEN least({u.max_interval_s}, floor(db.fetch_interval_s * {float(u.interval_growth)})::BIGINT)
        -- A page that changes faster than min_interval_s lets us follow is stale whenever we
        -- look; visits spent on it buy little freshness (Cho & Garcia-Molina, SIGMOD 2000:
        -- under a fixed budget the optimal rate falls for the fastest pages), so the faster
        -- it changes past that point, the longer we wait.
        WHEN {seen} AND {u.revisit_factor} / {rate} < {u.min_interval_s} THEN
            least({u.max_interval_s}, {u.min_interval_s} * {u.min_interval_s} / ({u.revisit_factor} / {rate}))::BIGINT
        WHEN {seen} THEN least({u.max_interval_s}, greatest({u.min_interval_s}, {u.revisit_factor} / {rate}))::BIGINT
        ELSE db.fetch_interval_s END"""


SCHEDULES = {"adaptive": AdaptiveSchedule, "fixed": FixedSchedule}
"""``update.schedule`` → its class (the config's Choice lists the same names)."""


def schedule_for(config: Config) -> Schedule:
    """The schedule ``update.schedule`` names."""
    return SCHEDULES[config.update.schedule](config.update)
