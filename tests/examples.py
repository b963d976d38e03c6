"""How many random examples a property test draws: its full count in the full suite, a
quarter of it in the fast tier (``pytest -m "not web"``, for everyday work), so that the
fast tier stays under a minute. CI runs the full suite, so every property is held to its
full count before a merge. tests/conftest.py sets CRAWL_TEST_FAST in the fast tier."""

from __future__ import annotations

import os

FAST_SHARE = 0.25
MIN_EXAMPLES = 5


def examples(full: int) -> int:
    """``full`` in the full suite; a quarter of it (at least MIN_EXAMPLES) in the fast tier."""
    if os.environ.get("CRAWL_TEST_FAST") != "1":
        return full
    return max(MIN_EXAMPLES, min(full, int(full * FAST_SHARE)))


def corpus_sample(rows: list) -> list:
    """All of a conformance corpus in the full suite; every fourth row in the fast tier
    (a different quarter would not be more thorough: the rows are fixed)."""
    if os.environ.get("CRAWL_TEST_FAST") != "1":
        return rows
    return rows[::round(1 / FAST_SHARE)]
