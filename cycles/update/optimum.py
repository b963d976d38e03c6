"""Optimal revisit frequencies under a fetch budget (Cho & Garcia-Molina, ACM TOIT 2003).

A page whose content changes as a Poisson process of rate ``λ`` (changes per second) and is
revisited at a fixed frequency ``f`` (visits per second) is fresh — our copy equal to the
live page — a share of the time

    F(λ, f) = f/λ · (1 − e^{−λ/f})          (F = 0 at f = 0; F = 1 for λ = 0)

The crawl's budget is a total frequency ``B = Σ f_i``. Maximising ``Σ F(λ_i, f_i)`` under it
(F is concave in f, so the Lagrange condition is sufficient): every page revisited has the
same marginal freshness per visit ``∂F/∂f = μ``, with

    ∂F/∂f = g(λ/f) / λ,   g(x) = 1 − (1 + x)·e^{−x}   (0 → 1 as x = λ/f goes 0 → ∞)

so a page of rate λ gets ``f = λ / g⁻¹(μλ)`` when ``μλ < 1`` and ``f = 0`` otherwise: a page
that changes faster than ``1/μ`` is never worth a visit (each visit buys too little). The
multiplier ``μ`` (seconds) is the one whose frequencies add up to the budget.

Pure functions over numpy arrays; :mod:`cycles.update.schedule` uses them to turn learned
rates and the fetch budget into refetch intervals, ``scripts/bench_update.py`` to compute
the optimum for the test web's known rates.
"""

from __future__ import annotations

import math

import numpy as np

MAX_X = 60.0
"""g(x) = 1 − 1e-24 at 60: beyond it a double cannot tell g from 1."""


def freshness(rate, freq):
    """F(λ, f): time-average share of a page's time that our copy is fresh (arrays broadcast)."""
    rate, freq = np.broadcast_arrays(np.asarray(rate, float), np.asarray(freq, float))
    out = np.ones(rate.shape)
    changing = rate > 0
    visited = changing & (freq > 0)
    out[changing] = 0.0
    x = rate[visited] / freq[visited]
    out[visited] = -np.expm1(-x) / x
    return out if out.ndim else float(out)


def marginal(rate, freq):
    """∂F/∂f in seconds: the freshness one more visit per second buys (rate > 0, freq > 0)."""
    x = np.asarray(rate, float) / np.asarray(freq, float)
    return g(x) / np.asarray(rate, float)


def g(x):
    """1 − (1 + x)·e^{−x}, rising from 0 (x = 0) to 1 (x → ∞); x²/2 near 0."""
    x = np.asarray(x, float)
    return -np.expm1(-x) - x * np.exp(-x)


def g_inverse(y):
    """The x with g(x) = y, for 0 <= y < 1 (bisection on [0, MAX_X]: g is increasing)."""
    y = np.asarray(y, float)
    lo, hi = np.zeros(y.shape), np.full(y.shape, MAX_X)
    for _ in range(80):  # halves a 60-wide bracket to ~5e-23
        mid = (lo + hi) / 2
        below = g(mid) < y
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2


def frequencies_at(rates, multiplier_s: float):
    """Each page's optimal frequency (1/s) at the Lagrange multiplier μ (seconds)."""
    rates = np.asarray(rates, float)
    freq = np.zeros(rates.shape)
    revisit = (rates > 0) & (rates * multiplier_s < 1)
    if revisit.any():
        freq[revisit] = rates[revisit] / g_inverse(rates[revisit] * multiplier_s)
    return freq


def solve_multiplier(spend, budget: float, lo: float = 1e-12, hi: float = 1e15) -> float:
    """The μ at which ``spend(μ)`` (total frequency, falling as μ grows) equals ``budget``.

    Bisection on log μ; ``hi`` when even the largest μ spends more (nothing to cut), ``lo``
    when even the smallest spends less (budget to spare).
    """
    if spend(hi) >= budget:
        return hi
    if spend(lo) <= budget:
        return lo
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if spend(mid) > budget:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-12:
            break
    return math.sqrt(lo * hi)


def optimal_frequencies(rates, budget: float, weights=None):
    """Revisit frequencies (1/s) maximising Σ w_i F(λ_i, f_i) subject to Σ w_i f_i = budget.

    ``rates``: change rates λ_i (1/s; 0 = never changes, never revisited); ``budget``: total
    visits per second; ``weights``: pages sharing each rate (default 1 each). Returns the
    frequency of each entry of ``rates`` (a page of weight w spends w × its frequency).
    """
    rates = np.asarray(rates, float)
    weights = np.ones(rates.shape) if weights is None else np.asarray(weights, float)
    if budget <= 0 or not (rates > 0).any():
        return np.zeros(rates.shape)
    mu = solve_multiplier(lambda m: float(np.sum(weights * frequencies_at(rates, m))), budget)
    return frequencies_at(rates, mu)


def optimal_freshness(rates, budget: float) -> float:
    """Mean freshness of the pages under the optimal frequencies for ``budget``."""
    rates = np.asarray(rates, float)
    return float(np.mean(freshness(rates, optimal_frequencies(rates, budget))))


def estimate_rate(visits, unchanged, interval_s):
    """Cho & Garcia-Molina's change-rate estimator for an incomplete history (1/s).

    ``visits``: n refetches, each ``interval_s`` apart on average; ``unchanged``: X̄ of them
    found the page as before. λ̂ = −ln((X̄ + 0.5) / (n + 0.5)) / I: unlike X/T it stays finite
    when every visit saw a change (several changes between two visits look like one), and it
    is 0 when none did.
    """
    visits, unchanged = np.asarray(visits, float), np.asarray(unchanged, float)
    return -np.log((unchanged + 0.5) / (visits + 0.5)) / np.asarray(interval_s, float)


def estimate_rate_last_modified(changes, unchanged_s):
    """Change rate (1/s) from Last-Modified dates (Cho & Garcia-Molina 2003, §5), for X >= 2
    (its variance λ² / (X − 2) is finite from X = 3).

    ``changes``: X refetches that found a change; ``unchanged_s``: T, the seconds the page is
    known to have stayed unchanged, summed over the refetches — the whole interval for one
    that found no change, the age of the Last-Modified for one that found a change. Each
    interval contributes ``e^{−λ·I}`` (no change) or ``λ·e^{−λ·age}`` (a change that long
    ago, none since) to the likelihood ``λ^X·e^{−λ·T}``, whose maximum is X / T. That
    estimate is biased up for few changes: when every interval saw a change, T is a sum of
    X exponential ages (Gamma(X, λ)) and E[X / T] = λ·X / (X − 1) — infinite for X = 1. So
    (X − 1) / T, unbiased there (E[1 / T] = λ / (X − 1)). Unlike the estimate from counts it
    tells a page changing every hour from one changing every four when every visit, four
    hours apart, sees a change of both.
    """
    changes, unchanged_s = np.asarray(changes, float), np.asarray(unchanged_s, float)
    return (changes - 1) / unchanged_s
