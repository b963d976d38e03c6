"""Freshness against the optimum (GitHub issue #13 section 4), on the local test web.

The host whose pages change at known periods (testweb/changing.py: every hour, 4 hours,
day, week, never; 3 pages each) is recrawled over simulated days, the crawler's clock and
the web's virtual clock shifted in step (generate -> fetch -> update every ``--step-hours``).
Two real crawls: the ``adaptive`` schedule (the default before this work) and the
``optimal`` one (cycles/update/schedule.py), the latter given the adaptive run's refetches
per cycle as its budget. For each run, with the run's own number of fetches:

- **ours**: time-weighted share of pages whose stored version is the live one;
- **uniform**: every page refetched at the same interval;
- **optimum**: Cho & Garcia-Molina's optimal frequencies for the *known* rates (1/period)
  and the same budget (cycles/update/optimum.py), simulated on the same pages; the
  analytical Poisson value of that policy is printed beside it.

Learning speed: for each change class, the first cycle from which every page's stored
interval stays within 2x of its true optimal interval (the optimum for the known rates at
the run's budget, clamped to [min_interval_s, max_interval_s] as the schedule is).

    .venv/bin/python scripts/bench_freshness.py                 # 7 days in 4 h steps: two crawls, ~5 CPU-min
                                                                # (30 min wall on a loaded 2-core machine)
    .venv/bin/python scripts/bench_freshness.py --days 14
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_update import freshness, recrawl, uniform_freshness  # noqa: E402
from cycles.update import optimum  # noqa: E402
from testweb.harness import TestWeb  # noqa: E402
from testweb.model import CLOCK_START  # noqa: E402


def configure(web, schedule: str, step_s: float, budget_per_cycle: int = 0):
    config = web.crawl_config()
    u = config.update
    u.schedule = schedule
    u.default_interval_s = 86400
    u.min_interval_s = 2 * 3600
    u.max_interval_s = 14 * 86400
    u.deferred_retry_s = 3600
    u.cycle_interval_s = int(step_s)
    u.refresh_budget_per_cycle = budget_per_cycle
    return config


def optimum_schedule(web, pages, budget_per_s: float, start: float, end: float):
    """Fetch times of the optimal policy for the known rates: each page at the start, then
    every 1/f (f = 0: never again)."""
    rates = np.array([1 / p if (p := web.change_period(u)) else 0.0 for u in pages])
    freq = optimum.optimal_frequencies(rates, budget_per_s)
    times = {}
    for url, f in zip(pages, freq):
        times[url] = list(np.arange(start, end, 1 / f)) if f > 0 else [start]
    return times, float(np.mean(optimum.freshness(rates, freq))), freq


def learning_speed(web, pages, intervals: list[dict[str, int]], budget_per_s: float, u) -> dict:
    """Per change period: the first cycle from which all its pages stay within 2x of their
    optimal interval (None: never settled)."""
    rates = np.array([1 / p if (p := web.change_period(url)) else 0.0 for url in pages])
    freq = optimum.optimal_frequencies(rates, budget_per_s)
    target = {url: min(u.max_interval_s, max(u.min_interval_s, 1 / f if f > 0 else u.max_interval_s))
              for url, f in zip(pages, freq)}
    within = [[c for c in range(len(intervals))
               if url in intervals[c] and target[url] / 2 <= intervals[c][url] <= 2 * target[url]] for url in pages]
    by_period = defaultdict(list)
    for url, ok in zip(pages, within):
        cycles = len(intervals)
        settled = next((c for c in range(cycles) if all(k in ok for k in range(c, cycles))), None)
        by_period[web.change_period(url)].append((settled, target[url]))
    return by_period


def report(name, web, pages, fetches, intervals, start, end, step_s, config) -> int:
    total = sum(len(v) for v in fetches.values())
    refetches = total - len([u for u in pages if fetches[u]])
    budget_per_s = refetches / (end - start)
    ours = freshness(web, fetches, start, end)
    uniform = uniform_freshness(web, pages, total, start, end)
    times, analytic, _ = optimum_schedule(web, pages, budget_per_s, start, end)
    best = freshness(web, times, start, end)
    print(f"  {name:<9} {total} fetches ({refetches / ((end - start) / step_s):.2f} refetches/cycle): "
          f"ours {ours:.3f}  uniform {uniform:.3f}  optimum {best:.3f} (Poisson model {analytic:.3f})  "
          f"ours/optimum {100 * ours / best:.1f}%")
    counts = defaultdict(list)
    for url in pages:
        counts[web.change_period(url)].append(len(fetches[url]))
    speed = learning_speed(web, pages, intervals, budget_per_s, config.update)
    for period in sorted(counts, key=lambda p: (p is None, p or 0)):
        label = "never" if period is None else f"{period / 3600:g} h"
        settled = [s for s, _ in speed[period]]
        target = speed[period][0][1]
        when = "never" if None in settled else f"cycle {max(settled)}"
        print(f"    every {label:<6}: fetched {np.mean(counts[period]):5.1f} times each; optimal interval "
              f"{target / 3600:6.1f} h, within 2x from {when}")
    return refetches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=float, default=7)
    parser.add_argument("--step-hours", type=float, default=4)
    args = parser.parse_args()
    step_s = args.step_hours * 3600
    steps = int(args.days * 86400 // step_s)
    print(f"== freshness: {args.days:g} simulated days in {args.step_hours:g} h steps ==")
    with TestWeb(hosts=0, pages=1, special=False, changing=True, max_seconds=3600) as web:
        pages = [u for u in web.expected_reachable(web.seeds()) if "/c/" in u]
        with tempfile.TemporaryDirectory() as tmp:
            config = configure(web, "adaptive", step_s)
            fetches, intervals, end = recrawl(web, pages, config, steps, step_s, Path(tmp))
            refetches = report("adaptive", web, pages, fetches, intervals, CLOCK_START, end, step_s, config)
        budget = max(1, round(refetches / (steps + 1)))
        with tempfile.TemporaryDirectory() as tmp:
            config = configure(web, "optimal", step_s, budget)
            fetches, intervals, end = recrawl(web, pages, config, steps, step_s, Path(tmp))
            report("optimal", web, pages, fetches, intervals, CLOCK_START, end, step_s, config)


if __name__ == "__main__":
    main()
