"""Tests of cycles/update/optimum.py: Cho & Garcia-Molina's optimal revisit frequencies under
a budget, checked against closed forms, the Lagrange conditions and a brute-force search;
and the change-rate estimator, checked on simulated Poisson histories."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from cycles.update import optimum

HOUR, DAY = 3600.0, 86400.0


def test_freshness_known_values():
    assert optimum.freshness(0.0, 0.0) == 1.0  # never changes: always fresh
    assert optimum.freshness(1 / DAY, 0.0) == 0.0  # changes, never revisited: stale
    # Visited as often as it changes: (1 - e^-1).
    assert optimum.freshness(1 / DAY, 1 / DAY) == pytest.approx(1 - math.exp(-1), rel=1e-12)
    # Visited very often: nearly always fresh, 1 - x/2 for small x = rate / freq.
    assert optimum.freshness(1 / DAY, 1000 / DAY) == pytest.approx(1 - 0.0005, rel=1e-6)


def test_g_inverse_inverts_g():
    x = np.array([1e-4, 0.01, 0.5, 1, 3, 10])  # beyond ~25, 1 - g(x) is below a double's resolution
    assert optimum.g_inverse(optimum.g(x)) == pytest.approx(x, rel=1e-9)


def test_marginal_is_the_derivative():
    rate, freq, h = 1 / DAY, 2 / DAY, 1e-3 / DAY
    numeric = (optimum.freshness(rate, freq + h) - optimum.freshness(rate, freq - h)) / (2 * h)
    assert optimum.marginal(rate, freq) == pytest.approx(numeric, rel=1e-6)


def test_equal_rates_share_the_budget_equally():
    freq = optimum.optimal_frequencies([1 / DAY] * 4, 8 / DAY)
    assert freq == pytest.approx([2 / DAY] * 4, rel=1e-9)


def test_lagrange_conditions_hold():
    """Revisited pages have one marginal freshness μ; pages left alone would gain less than μ
    from a first visit (∂F/∂f at f = 0 is 1/λ); the frequencies spend the budget."""
    rates = np.array([1 / HOUR, 1 / (4 * HOUR), 1 / DAY, 1 / (7 * DAY), 0.0])
    budget = 6 / DAY
    freq = optimum.optimal_frequencies(rates, budget)
    assert freq.sum() == pytest.approx(budget, rel=1e-9)
    visited = freq > 0
    margins = optimum.marginal(rates[visited], freq[visited])
    assert margins == pytest.approx(np.full(visited.sum(), margins[0]), rel=1e-6)
    left = (~visited) & (rates > 0)
    assert left.any()  # the hourly page is not worth a visit at this budget
    assert np.all(1 / rates[left] <= margins[0] * (1 + 1e-9))
    assert freq[-1] == 0  # a page that never changes is never revisited


def test_fastest_page_is_dropped_when_the_budget_is_short_and_kept_when_ample():
    rates = np.array([1 / HOUR, 1 / DAY])
    short = optimum.optimal_frequencies(rates, 1 / DAY)
    assert short[0] == 0 and short[1] == pytest.approx(1 / DAY)
    ample = optimum.optimal_frequencies(rates, 200 / DAY)
    assert ample[0] > ample[1] > 0  # with enough budget, the faster page gets more visits


def test_matches_brute_force_search():
    """Three pages: the solver's total freshness is the best any split of the budget on a
    fine grid reaches (and the grid's best is within its resolution of the solver's)."""
    rates = np.array([1 / (3 * HOUR), 1 / DAY, 1 / (5 * DAY)])
    budget = 3 / DAY
    steps = 300
    splits = np.array([(i, j, steps - i - j) for i, j in itertools.product(range(steps + 1), repeat=2)
                       if i + j <= steps]) * budget / steps
    best_grid = float(optimum.freshness(rates[None, :], splits).sum(axis=1).max())
    solved = float(optimum.freshness(rates, optimum.optimal_frequencies(rates, budget)).sum())
    assert solved >= best_grid - 1e-9
    assert solved - best_grid < 1e-3


def test_optimal_beats_uniform():
    rates = np.array([1 / HOUR, 1 / (4 * HOUR), 1 / DAY, 1 / (7 * DAY), 0.0] * 3)
    budget = 20 / DAY
    uniform = float(np.mean(optimum.freshness(rates, np.full(len(rates), budget / len(rates)))))
    assert optimum.optimal_freshness(rates, budget) > uniform


def simulated_history(rate: float, interval: float, visits: int, seed: int) -> int:
    """Visits (of ``visits``, ``interval`` apart) that found no change, for Poisson changes."""
    changes = np.random.default_rng(seed).poisson(rate * interval, size=visits)
    return int((changes == 0).sum())


def test_estimator_is_zero_without_changes_and_finite_when_all_changed():
    assert optimum.estimate_rate(10, 10, DAY) == 0
    assert optimum.estimate_rate(10, 0, DAY) == pytest.approx(math.log(21) / DAY)


@pytest.mark.parametrize("rate_times_interval", [0.2, 1.0, 2.0])
def test_estimator_recovers_the_rate(rate_times_interval):
    """On 2,000 simulated visits the estimate is within 10 % of the true rate, even where
    the naive changes / time (X / T) is far off because of changes not seen."""
    rate, interval, n = rate_times_interval / DAY, DAY, 2000
    unchanged = simulated_history(rate, interval, n, seed=13)
    estimate = optimum.estimate_rate(n, unchanged, interval)
    assert estimate == pytest.approx(rate, rel=0.1)
    if rate_times_interval >= 1:
        naive = (n - unchanged) / (n * interval)
        assert abs(naive - rate) > 2 * abs(estimate - rate)


def test_last_modified_estimate_maximises_the_likelihood_then_removes_its_bias():
    """X / T maximises λ^X·e^{−λT}; the estimate is (X − 1) / T, its unbiased form."""
    changes, unchanged = 5, 3 * DAY
    mle = changes / unchanged
    log_likelihood = lambda rate: changes * math.log(rate) - rate * unchanged  # noqa: E731
    assert all(log_likelihood(mle) > log_likelihood(mle * k) for k in (0.9, 0.99, 1.01, 1.1))
    assert optimum.estimate_rate_last_modified(changes, unchanged) == pytest.approx((changes - 1) / unchanged)


@pytest.mark.parametrize("changes", [2, 3, 8])
def test_last_modified_estimate_is_unbiased_where_the_likelihood_one_is_not(changes):
    """Every visit saw a change: T is the sum of X exponential ages, Gamma(X, λ); over
    200,000 histories the mean of (X − 1) / T is λ, that of X / T is λ·X / (X − 1)."""
    rate = 1 / (4 * 3600)
    unchanged = np.random.default_rng(changes).gamma(changes, 1 / rate, size=200_000)
    estimates = optimum.estimate_rate_last_modified(changes, unchanged)
    assert estimates.mean() == pytest.approx(rate, rel=0.02)
    assert (changes / unchanged).mean() == pytest.approx(rate * changes / (changes - 1), rel=0.02)


def test_last_modified_estimate_recovers_the_rate_with_unchanged_intervals():
    """Visits every day to a page changing every 2 days on average (Poisson): the summed
    unchanged time (whole intervals without a change, the Last-Modified age of those with
    one) gives the rate within 5 % over 4,000 visits."""
    rate, interval, n = 1 / (2 * DAY), DAY, 4000
    rng = np.random.default_rng(7)
    changes = rng.poisson(rate * interval, size=n)
    # The age of the last of k > 0 changes in an interval: exponential, cut at the interval.
    ages = np.minimum(rng.exponential(1 / rate, size=n), interval)
    age_given_change = np.where(changes > 0, ages, interval)
    while np.any((changes > 0) & (age_given_change >= interval)):  # redraw: a change means age < interval
        redo = (changes > 0) & (age_given_change >= interval)
        age_given_change[redo] = rng.exponential(1 / rate, size=redo.sum())
    unchanged = np.where(changes > 0, age_given_change, interval).sum()
    x = int((changes > 0).sum())
    assert optimum.estimate_rate_last_modified(x, unchanged) == pytest.approx(rate, rel=0.05)


def poisson_history(rate: float, interval: float, visits: int, rng) -> tuple[int, float]:
    """(X, T) of ``visits`` refetches ``interval`` apart to a page changing at the instants
    of a Poisson process: X refetches found a change; T sums the whole interval of the
    others and the Last-Modified age (time since the last change) of those."""
    changes = np.cumsum(rng.exponential(1 / rate, size=int(3 * rate * visits * interval) + 50))
    assert changes[-1] > visits * interval
    visit = np.arange(visits + 1) * interval
    last = np.searchsorted(changes, visit[1:], side="right") - 1  # the last change before each visit
    changed = (last >= 0) & (changes[np.maximum(last, 0)] > visit[:-1])
    ages = visit[1:] - changes[np.maximum(last, 0)]
    return int(changed.sum()), float(np.where(changed, ages, interval).sum())


@pytest.mark.parametrize("rate_times_interval", [0.3, 1.0, 4.0])
def test_last_modified_estimate_converges_on_a_simulated_timeline(rate_times_interval):
    """Changes drawn as a Poisson process on a timeline, visits at fixed intervals: (X − 1) / T
    is within 5 % of the rate after 3,000 visits — also at 4 changes per interval, where every
    visit sees a change and the counts can only say "fast"."""
    rate, interval = rate_times_interval / DAY, DAY
    x, t = poisson_history(rate, interval, 3000, np.random.default_rng(int(10 * rate_times_interval)))
    assert optimum.estimate_rate_last_modified(x, t) == pytest.approx(rate, rel=0.05)
    if rate_times_interval >= 4:
        assert x >= 2900  # the counts estimator is near its cap, ln(n + 0.5) / I
