"""Freshness against the optimum (GitHub issue #13 section 4), on the local test web.

The host whose pages change at known periods (testweb/changing.py: every hour, 4 hours,
day, week, never; 3 pages each) is recrawled over simulated days, a cycle (generate ->
fetch -> update) every ``--step-hours``. By default the cycles are simulated for many
seeds (the pages' phases): update's own transition SQL on the answers the test web gives
(:func:`simulate`); ``--real`` runs real crawls of one seed instead (the crawler's clock
and the web's virtual clock shifted in step); ``--poisson`` makes the pages change as
Poisson processes of the same mean periods. The first schedule of ``--schedules``
(``adaptive``) runs free; the others get its refetches per cycle as their budget. For each
run, on every URL it fetched and with its own number of refetches:

- **ours**: time-weighted share of pages whose stored version is the live one (exact);
- **uniform**: every page refetched at the same interval;
- **optimum**: Cho & Garcia-Molina's optimal frequencies for the *known* rates (1/period)
  and at least the same refetches (cycles/update/optimum.py), on the same pages; the
  analytical Poisson value of that policy is printed beside it.

Each figure over the whole window and in the steady state (from ``--steady-days`` on, when
the rates are learned; the optimum there gets the refetches ours made from that day), with
the freshness per change class. ``optimal-oracle`` (:data:`ORACLE`) is the optimal
schedule's own SQL on the TRUE rates: the ceiling of its rules (grid, whole cycles,
budget), so that ours − oracle is the learning and the estimator, oracle − optimum the
discrete cycles and the budget rules.

The simulated cycles plan with ``update.cycle_interval_s`` = ``--step-hours`` and
:func:`cycles.update.schedule.refresh_multiplier` on the one table of rows: what update
computes from its generate times (the learned cadence) and as a histogram per bucket
(the same μ, tests/update/test_schedule.py).

Learning speed: for each change class, the first cycle from which every page's interval
(in whole cycles, as generate applies it) stays within 2x of its true optimal interval
(the optimum for the known rates at the run's budget, clamped to [min_interval_s,
max_interval_s] as the schedule is).

    .venv/bin/python scripts/bench/web.py freshness                 # 20 seeds simulated, ~6 CPU-min
    .venv/bin/python scripts/bench/web.py freshness --seeds 6 --poisson
    .venv/bin/python scripts/bench/web.py freshness --seeds 6 --days 21 --steady-days 7   # ~3 CPU-min
    .venv/bin/python scripts/bench/web.py freshness --seeds 6 --schedules optimal --budget 4 \
        --set update.interval_growth=2                          # A/B of a version or a setting
    .venv/bin/python scripts/bench/web.py freshness --real          # two crawls, ~5 CPU-min (30 min wall loaded)
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
import datetime as dt
import tempfile
from collections import defaultdict
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from benchlib import REPO as ROOT  # noqa: E402,F401  (the repository on sys.path: testweb)

from bench_update import recrawl  # noqa: E402
from cycles.tables import schema  # noqa: E402
from cycles.config import Config  # noqa: E402
from cycles.tables.crawldb import new_url_rows_sql  # noqa: E402
from cycles.update import optimum  # noqa: E402
from cycles.update import schedule as schedule_module  # noqa: E402
from cycles.update import update as update_module  # noqa: E402
from cycles.update.schedule import OptimalSchedule, planned_cycles, prepare_schedule, refresh_budget_per_s, refresh_multiplier  # noqa: E402
from cycles.update.update import CHANGED_SQL, SEEN_SQL, transition_sql  # noqa: E402
from cycles.urls import host_hash, url_host  # noqa: E402
from testweb.respond import http_date  # noqa: E402
from testweb.web import Web  # noqa: E402
from testweb.harness import TestWeb  # noqa: E402
from testweb.model import CLOCK_START  # noqa: E402


SETTINGS: dict[str, str] = {}
"""``--set update.KEY=VALUE`` overrides, applied by :func:`configure` (A/B of a setting)."""


def configure(web, schedule: str, step_s: float, budget_per_cycle: int = 0):
    config = web.crawl_config() if web is not None else Config()
    u = config.update
    u.schedule = schedule
    u.default_interval_s = 86400
    u.min_interval_s = 2 * 3600
    u.max_interval_s = 14 * 86400
    u.deferred_retry_s = 3600
    u.cycle_interval_s = int(step_s)
    u.refresh_budget_per_cycle = budget_per_cycle
    for key, value in SETTINGS.items():
        section, name = key.split(".")
        old = getattr(getattr(config, section), name)
        setattr(getattr(config, section), name, type(old)(value))
    return config


ORACLE = "optimal-oracle"
"""The ceiling of the schedule's own rules: the optimal schedule's SQL (its grid, whole cycles,
half a cycle early) given every page's TRUE rate from its first fetch on (nothing to learn),
its μ solved on those rates for the same budget. What it misses of the optimum is the
discrete cycle and the budget rules; what ``optimal`` misses of it is the learning and the
estimator's error."""


@dataclass(frozen=True)
class OracleSchedule(OptimalSchedule):
    """:class:`OptimalSchedule` on the known rates (table ``true_rate``: url, rate; 0 = never
    changes, which the grid clamps to its slowest rate: the longest interval)."""

    def interval_sql(self, seen: str, changed: str) -> str:
        u = self.u
        table = "[" + ", ".join(str(int(i)) for i in schedule_module.planned_intervals(
            u, schedule_module.rate_grid(u), self.multiplier_s)) + "]"
        rate = "(SELECT r.rate FROM true_rate r WHERE r.url = db.url)"
        return f"""CASE WHEN {seen} THEN list_extract({table}, {schedule_module.grid_index_sql(u, rate)})
        ELSE db.fetch_interval_s END"""


def oracle_multiplier(config: Config, rates) -> float:
    """μ at which the oracle's planned intervals (whole cycles) spend the budget."""
    u = config.update
    grid = schedule_module.rate_grid(u)
    index = np.clip(np.round(np.log(np.maximum(rates, grid[0]) / grid[0]) / np.log(schedule_module.RATE_STEP)),
                    0, len(grid) - 1).astype(int)
    snapped = grid[index]
    return optimum.solve_multiplier(lambda m: float(np.sum(1 / planned_cycles(u, snapped, m))),
                                    refresh_budget_per_s(config))


FETCH_DELAY_S = 20.0
"""Simulated crawls: how long after its cycle starts a page is fetched (a real cycle's
generate and fetch take some seconds)."""


def simulate(web: Web, pages: list[str], config: Config, steps: int, step_s: float, oracle: bool = False):
    """The cycles :func:`bench_update.recrawl` runs, without servers or files: every cycle the
    URLs whose ``next_fetch`` has passed get the answer the test web gives a conditional GET
    (304 while the version is unchanged, else 200 with the version's content hash and
    Last-Modified) ``FETCH_DELAY_S`` after the cycle starts, and update's own transition SQL
    (:func:`cycles.update.update.transition_sql`, with the schedule's prepare and plan
    steps) makes the new rows. Same return values as recrawl. Milliseconds a cycle, so that
    many seeds can be compared; the real crawl (``--real``) checks it. ``oracle``: the
    schedule is :class:`OracleSchedule` (the true rates, see :data:`ORACLE`)."""
    con = duckdb.connect()
    con.execute("SET threads = 1")  # 16 rows: more threads only wait for each other
    start = float(CLOCK_START)
    when = lambda t: dt.datetime.fromtimestamp(t, dt.timezone.utc)  # noqa: E731
    con.register("seeds", pa.table({"url": pages, "host": [url_host(u) for u in pages],
                                    "host_hash": pa.array([host_hash(url_host(u)) for u in pages], pa.uint64()),
                                    "score": [1.0] * len(pages), "depth": [0] * len(pages)}))
    con.execute(f"CREATE TABLE db AS {new_url_rows_sql('seeds', config)}", {"now": when(start)})
    oracle_mu = None
    if oracle:
        rates = np.array([1 / p if (p := web.change_period(u)) else 0.0 for u in pages])
        con.register("true_rate", pa.table({"url": pages, "rate": rates}))
        oracle_mu = oracle_multiplier(config, rates)
    fetches: dict[str, list[float]] = defaultdict(list)
    intervals: list[dict[str, int]] = []
    t = start
    for _ in range(steps + 1):
        due = con.execute("SELECT url, content_hash FROM db WHERE next_fetch <= $now", {"now": when(t)}).fetchall()
        at = t + FETCH_DELAY_S
        rows = []
        for url, stored in due:
            version = web.version_at(url, at)
            profile, target = web.split(url)
            content = f"{url}#{version}"
            rows.append({"url": url, "host": url_host(url),
                         "outcome": "not_modified" if content == stored else "ok",
                         "fetched_at": when(at), "http_status": 304 if content == stored else 200,
                         "etag": content, "last_modified": http_date(profile.last_modified(target, version)),
                         "redirect_to": None, "error": None,
                         "content_hash": None if content == stored else content, "minhash": None})
            fetches[url].append(at)
        con.register("fetched", pa.Table.from_pylist(rows, schema=schema.FETCHED).select(
            ["url", "host", "outcome", "fetched_at", "http_status", "etag", "last_modified",
             "redirect_to", "error", "content_hash", "minhash"]))
        prepare_schedule(con, config, "db")
        if oracle:
            sql = oracle_transition_sql(config, oracle_mu)
        else:
            multiplier = (refresh_multiplier(con, "db", config, "fetched", SEEN_SQL, CHANGED_SQL)
                          if config.update.schedule == "optimal" else None)
            sql = transition_sql(config, multiplier)
        con.execute(f"CREATE OR REPLACE TABLE db AS {sql}", {"now": when(at)})
        con.unregister("fetched")
        intervals.append(dict(con.execute("SELECT url, fetch_interval_s FROM db WHERE fetch_count > 0").fetchall()))
        t += step_s
    new_page = (None if oracle else
                first_interval_of_a_new_page(con, config, pages[0].rsplit("/", 1)[0] + "/new.html", when(t)))
    con.close()
    return fetches, intervals, t, new_page


def oracle_transition_sql(config: Config, multiplier_s: float) -> str:
    """update's transition SQL with :class:`OracleSchedule` as its schedule."""
    original = update_module.schedule_for
    update_module.schedule_for = lambda c, m=None: OracleSchedule(c.update, multiplier_s)
    try:
        return transition_sql(config, multiplier_s)
    finally:
        update_module.schedule_for = original


def first_interval_of_a_new_page(con, config: Config, url: str, now) -> int:
    """The host prior at work: the interval a page of the host gets at its first fetch,
    ``now``, with the host's other pages as the run left them in ``db``."""
    con.register("new", pa.table({"url": [url], "host": [url_host(url)],
                                  "host_hash": pa.array([host_hash(url_host(url))], pa.uint64()),
                                  "score": [1.0], "depth": [1]}))
    con.execute(f"INSERT INTO db BY NAME {new_url_rows_sql('new', config)}", {"now": now})
    con.register("fetched", pa.Table.from_pylist([{"url": url, "host": url_host(url), "outcome": "ok",
                                                  "fetched_at": now, "content_hash": "new"}], schema=schema.FETCHED))
    prepare_schedule(con, config, "db")
    multiplier = (refresh_multiplier(con, "db", config, "fetched", SEEN_SQL, CHANGED_SQL)
                  if config.update.schedule == "optimal" else None)
    return con.execute(f"""SELECT fetch_interval_s FROM ({transition_sql(config, multiplier)})
        WHERE url = $url""", {"now": now, "url": url}).fetchone()[0]


def optimum_schedule(web, pages, budget_per_s: float, start: float, end: float):
    """Fetch times of the optimal policy for the known rates: each page at the start, then
    every 1/f (f = 0: never again)."""
    rates = np.array([1 / p if (p := web.change_period(u)) else 0.0 for u in pages])
    freq = optimum.optimal_frequencies(rates, budget_per_s)
    times = {}
    for url, f in zip(pages, freq):
        times[url] = list(np.arange(start, end, 1 / f)) if f > 0 else [start]
    return times, float(np.mean(optimum.freshness(rates, freq))), freq


def optimum_with_refetches(web, pages, refetches: int, start: float, end: float, since: float | None = None):
    """:func:`optimum_schedule` making at least ``refetches`` refetches in the window: its
    visits every 1/f from the start lose up to one a page to the window's end, so the budget
    is raised until the count is met (else the optimum would get ~4 % fewer visits).
    ``since``: count only the visits from then on (the steady state; the optimum, a
    stationary policy, still starts at ``start``)."""
    budget = refetches / (end - (start if since is None else since))
    for _ in range(50):
        times, analytic, _ = optimum_schedule(web, pages, budget, start, end)
        made = (sum(len(v) - 1 for v in times.values()) if since is None
                else sum(1 for v in times.values() for t in v if t >= since))
        if made >= refetches:
            break
        budget *= 1 + max(0.002, (refetches - made) / max(1, made))
    return times, analytic, made


def learning_speed(web, pages, intervals: list[dict[str, int]], budget_per_s: float, u) -> dict:
    """Per change period: the first cycle from which all its pages stay within 2x of their
    optimal interval (None: never settled). A page's interval is the one it gets: generate
    runs once a cycle, so a stored interval takes effect at the first cycle start at or after
    it (fetched ``FETCH_DELAY_S`` into a cycle) — a page planned every cycle stores half a
    cycle (:func:`cycles.update.schedule.planned_intervals`) and is refetched a cycle later."""
    rates = np.array([1 / p if (p := web.change_period(url)) else 0.0 for url in pages])
    freq = optimum.optimal_frequencies(rates, budget_per_s)
    target = {url: min(u.max_interval_s, max(u.min_interval_s, 1 / f if f > 0 else u.max_interval_s))
              for url, f in zip(pages, freq)}
    cycle = u.cycle_interval_s
    effective = [{url: cycle * -(-(stored + FETCH_DELAY_S) // cycle) for url, stored in c.items()} for c in intervals]
    within = [[c for c in range(len(effective))
               if url in effective[c] and target[url] / 2 <= effective[c][url] <= 2 * target[url]] for url in pages]
    by_period = defaultdict(list)
    for url, ok in zip(pages, within):
        cycles = len(effective)
        settled = next((c for c in range(cycles) if all(k in ok for k in range(c, cycles))), None)
        by_period[web.change_period(url)].append((settled, target[url]))
    return by_period


def exact_freshness(web, fetches: dict[str, list[float]], start: float, end: float) -> float:
    """Share of the time from each URL's first fetch (or ``start``, if later) to ``end``
    that its stored version was the live one, exactly (the test web's pages change at known
    instants; bench_update's ``freshness`` samples every 5 minutes, 100 times slower)."""
    model = getattr(web, "web", web)  # the harness's TestWeb holds the model
    fresh = total = 0.0
    for url, times in fetches.items():
        times = sorted(times)
        profile, target = model.split(url)
        for t, following in zip(times, times[1:] + [end]):
            following = min(following, end)
            if following <= max(t, start):
                continue
            changes = profile.version_start(target, profile.version_at(target, t) + 1) if profile else None
            stale_from = following if changes is None else min(changes, following)
            fresh += max(0.0, stale_from - max(t, start))
            total += following - max(t, start)
    return fresh / max(total, 1e-9)


def uniform_schedule(pages: list[str], fetches: int, start: float, end: float) -> dict[str, list[float]]:
    """The same number of fetches spread evenly: every page at the same interval."""
    per_page = max(1, fetches // len(pages))
    interval = (end - start) / per_page
    return {url: [start + k * interval for k in range(per_page)] for url in pages}


def measure(web, pages, fetches, intervals, start, end, config, steady_s: float = 0.0) -> dict:
    """One run's figures, on every URL it fetched (the pages and the host's never-changing
    ``/``, which the crawl finds through their links): the optimum gets the same URLs and
    the same refetches (``budget``: fetches after each URL's first). ``*_steady``: the same
    from ``start + steady_s`` on (once rates are learned), the optimum with the refetches
    ours made in that part of the window."""
    urls = sorted(set(pages) | {u for u, times in fetches.items() if times})
    fetches = {u: fetches.get(u, []) for u in urls}
    total = sum(len(v) for v in fetches.values())
    refetches = total - len([u for u in urls if fetches[u]])
    budget_per_s = refetches / (end - start)
    times, analytic, optimum_refetches = optimum_with_refetches(web, urls, refetches, start, end)
    counts, by_class, optimum_by_class = defaultdict(list), defaultdict(list), defaultdict(list)
    since = start + steady_s
    for url in urls:
        counts[web.change_period(url)].append(len(fetches[url]))
        by_class[web.change_period(url)].append(exact_freshness(web, {url: fetches[url]}, since, end))
    speed = learning_speed(web, urls, intervals, budget_per_s, config.update)
    steady_refetches = sum(1 for v in fetches.values() for t in v if t >= since)
    steady_times, _, steady_optimum_refetches = optimum_with_refetches(web, urls, steady_refetches, start, end, since)
    for url in urls:
        optimum_by_class[web.change_period(url)].append(exact_freshness(web, {url: steady_times[url]}, since, end))
    steady = {"ours_steady": exact_freshness(web, fetches, since, end),
              "class_steady": {p: float(np.mean(v)) for p, v in by_class.items()},
              "optimum_class_steady": {p: float(np.mean(v)) for p, v in optimum_by_class.items()},
              "optimum_steady": exact_freshness(web, steady_times, since, end),
              "refetches_steady": steady_refetches, "optimum_refetches_steady": steady_optimum_refetches}
    return steady | {"fetches": total, "refetches": refetches, "optimum_refetches": optimum_refetches, "ours": exact_freshness(web, fetches, start, end),
            "uniform": exact_freshness(web, uniform_schedule(urls, total, start, end), start, end),
            "optimum": exact_freshness(web, times, start, end), "poisson": analytic,
            "counts": {p: float(np.mean(c)) for p, c in counts.items()},
            "settled": {p: (None if None in [s for s, _ in v] else max(s for s, _ in v)) for p, v in speed.items()},
            "target_s": {p: v[0][1] for p, v in speed.items()}, "default_interval_s": config.update.default_interval_s}


def period_label(period) -> str:
    return "never" if period is None else f"{period / 3600:g} h"


def periods(run: dict) -> list:
    return sorted(run["counts"], key=lambda p: (p is None, p or 0))


def report(name: str, run: dict, cycles: int) -> None:
    print(f"  {name:<9} {run['fetches']} fetches ({run['refetches'] / cycles:.2f} refetches/cycle): "
          f"ours {run['ours']:.3f}  uniform {run['uniform']:.3f}  optimum {run['optimum']:.3f} "
          f"(Poisson model {run['poisson']:.3f})  ours/optimum {100 * run['ours'] / run['optimum']:.1f}%")
    for period in periods(run):
        settled = run["settled"][period]
        print(f"    every {period_label(period):<6}: fetched {run['counts'][period]:5.1f} times each; optimal interval "
              f"{run['target_s'][period] / 3600:6.1f} h, within 2x from "
              f"{'never' if settled is None else f'cycle {settled}'}")


def report_seeds(name: str, runs: list[dict], steady_days: float) -> None:
    """Mean and worst of ours/optimum over the seeds, over the whole window and in the steady
    state; learning speed per change class as the median cycle and how many seeds never
    settled."""
    for part, key, refetches in (("window", "", "refetches"), (f"from day {steady_days:g}", "_steady", "refetches_steady")):
        ratio = np.array([r["ours" + key] / r["optimum" + key] for r in runs])
        print(f"  {name:<14} {part:<10} ours/optimum mean {100 * ratio.mean():5.1f}%  min {100 * ratio.min():5.1f}%  "
              f"max {100 * ratio.max():5.1f}%   (ours {np.mean([r['ours' + key] for r in runs]):.3f}, optimum "
              f"{np.mean([r['optimum' + key] for r in runs]):.3f}, "
              f"{np.mean([r[refetches] for r in runs]):.1f} refetches, the optimum "
              f"{np.mean([r['optimum_' + refetches] for r in runs]):.1f})")
    print(f"    uniform (window) {np.mean([r['uniform'] for r in runs]):.3f}; Poisson model of the optimum "
          f"{np.mean([r['poisson'] for r in runs]):.3f}")
    new_pages = [r["new_page_interval_s"] for r in runs if r.get("new_page_interval_s") is not None]
    if new_pages:
        print(f"    a new page of the host: first interval {np.median(new_pages) / 3600:.1f} h "
              f"(median; the default is {runs[0]['default_interval_s'] / 3600:g} h)")
    for period in periods(runs[0]):
        settled = [r["settled"][period] for r in runs]
        known = [s for s in settled if s is not None]
        print(f"    every {period_label(period):<6}: fetched {np.mean([r['counts'][period] for r in runs]):5.1f} "
              f"times each; fresh {np.mean([r['class_steady'][period] for r in runs]):.2f} from day {steady_days:g} "
              f"(optimum {np.mean([r['optimum_class_steady'][period] for r in runs]):.2f}); within 2x of the optimal interval ({runs[0]['target_s'][period] / 3600:.1f} h) from cycle "
              f"{'-' if not known else f'{np.median(known):g} (median)'}, never settled in "
              f"{len(settled) - len(known)} of {len(runs)}")


def simulated_web(seed: int) -> tuple[Web, list[str]]:
    """The changing host's oracle without a server: its pages and its ``/``."""
    web = Web(hosts=0, pages=1, special=False, changing=True, seed=seed)
    return web, [u for u in web.expected_reachable(web.seeds()) if "/c/" in u] + web.seeds()


class PoissonWeb:
    """The changing host's pages with the same mean periods, changing at the instants of a
    Poisson process instead of every period exactly: the model Cho & Garcia-Molina's optimum
    and the rate estimators assume. On the test web a page of period P changes once each P,
    so its Last-Modified age at a visit is uniform over [0, P) — half what a Poisson page's
    is — and a 1 h or 4 h page fetched every 4 h is seen at the same phase every time."""

    def __init__(self, web: Web, pages: list[str], seed: int, end: float):
        self.periodic, self.changes = web, {}
        rng = np.random.default_rng(seed)
        for url in pages:
            period = web.change_period(url)
            times = []
            if period:
                t = float(CLOCK_START) - rng.exponential(period)  # a version already live at the start
                while t < end:
                    times.append(t)
                    t += rng.exponential(period)
            self.changes[url] = np.array(times)

    def change_period(self, url: str):
        return self.periodic.change_period(url)

    def split(self, url: str):
        return self, url

    def version_at(self, url: str, t: float) -> int:
        return int(np.searchsorted(self.changes.get(url, []), t, side="right"))

    def version_start(self, url: str, version: int):
        times = self.changes.get(url, [])
        if not len(times):
            return None
        return float(times[version - 1]) if 1 <= version <= len(times) else (float("inf") if version > 0 else None)

    def last_modified(self, url: str, version: int) -> int:
        start = self.version_start(url, version)
        return int(start) if start is not None and start != float("inf") else int(CLOCK_START) - 86400


def run_simulated(args, schedules: list[str]) -> None:
    step_s = args.step_hours * 3600
    steps = int(args.days * 86400 // step_s)
    print(f"== freshness, simulated (update's SQL, {'Poisson pages' if args.poisson else 'the test web'}'s answers): {args.days:g} days in "
          f"{args.step_hours:g} h steps, seeds {args.seed}..{args.seed + args.seeds - 1} ==")
    results = defaultdict(list)
    for seed in range(args.seed, args.seed + args.seeds):
        web, pages = simulated_web(seed)
        if args.poisson:
            web = PoissonWeb(web, pages, seed, CLOCK_START + (steps + 2) * step_s)
        budget = args.budget
        for name in schedules:
            config = configure(None, "optimal" if name == ORACLE else name, step_s, budget or 0)
            fetches, intervals, end, new_page = simulate(web, pages, config, steps, step_s, oracle=name == ORACLE)
            run = measure(web, pages, fetches, intervals, CLOCK_START, end, config, args.steady_days * 86400)
            run["new_page_interval_s"] = new_page
            results[name].append(run)
            if budget is None:  # the first schedule's refetches per cycle are the others' budget
                budget = max(1, round(run["refetches"] / (steps + 1)))
    for name in schedules:
        report_seeds(name, results[name], args.steady_days)


def run_real(args, schedules: list[str]) -> None:
    step_s = args.step_hours * 3600
    steps = int(args.days * 86400 // step_s)
    print(f"== freshness, real crawls: {args.days:g} simulated days in {args.step_hours:g} h steps, seed {args.seed} ==")
    schedules = [name for name in schedules if name != ORACLE]  # the oracle is a simulation only
    with TestWeb(hosts=0, pages=1, special=False, changing=True, max_seconds=3600, seed=args.seed) as web:
        pages = [u for u in web.expected_reachable(web.seeds()) if "/c/" in u]
        budget = None
        for name in schedules:
            with tempfile.TemporaryDirectory() as tmp:
                config = configure(web, name, step_s, budget or 0)
                fetches, intervals, end = recrawl(web, pages, config, steps, step_s, Path(tmp))
                run = measure(web, pages, fetches, intervals, CLOCK_START, end, config)
                report(name, run, steps + 1)
            if budget is None:
                budget = max(1, round(run["refetches"] / (steps + 1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=float, default=7)
    parser.add_argument("--step-hours", type=float, default=4)
    parser.add_argument("--seed", type=int, default=0, help="first test-web seed (page phases)")
    parser.add_argument("--seeds", type=int, default=20, help="simulated runs: how many seeds")
    parser.add_argument("--schedules", default=f"adaptive,optimal,{ORACLE}",
                        help=f"comma-separated; the first one's refetches are the others' budget; "
                             f"{ORACLE}: the optimal schedule's SQL on the true rates (the ceiling of its rules)")
    parser.add_argument("--steady-days", type=float, default=2,
                        help="the steady state is measured from this day on (rates learned)")
    parser.add_argument("--real", action="store_true", help="real crawls of the test web (one seed) instead")
    parser.add_argument("--poisson", action="store_true",
                        help="simulated: pages changing as Poisson processes of the same mean periods")
    parser.add_argument("--budget", type=int, default=None,
                        help="refetches per cycle of every schedule but adaptive (default: the first schedule's); "
                             "fix it to compare versions of optimal on one budget")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="a config setting (a number or a word) for every run, e.g. update.interval_growth=2")
    args = parser.parse_args()
    SETTINGS.update(item.split("=", 1) for item in args.set)
    if not 0 <= args.steady_days < args.days - 1:
        parser.error(f"--steady-days {args.steady_days:g} must leave at least a day of the {args.days:g} days "
                     "to measure the steady state on (e.g. --days 21 --steady-days 7)")
    schedules = args.schedules.split(",")
    (run_real if args.real else run_simulated)(args, schedules)


if __name__ == "__main__":
    main()
