"""Near-duplicate precision and recall on the labelled set testweb.neardup_set.

The pairs are parsed as fetch parses them and compared as update compares them (SimHash
within ``update.simhash_max_distance``). scripts/bench_update.py prints the same figures
against the fingerprints before issue #13 section 3 (precision 1.00, recall 0.52 then).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from cycles.config import Config
from cycles.fetch.parse import parse_html
from cycles.fingerprint import hamming
from testweb.neardup_set import NEGATIVE_KINDS, POSITIVE_KINDS, labelled_pairs


@pytest.fixture(scope="module")
def found() -> dict[str, list[bool]]:
    k = Config().update.simhash_max_distance
    block = Config().fetch.simhash_block_min_bytes
    by_kind = defaultdict(list)
    for pair in labelled_pairs():
        a = parse_html(pair.a, pair.a_url, block_min_bytes=block)
        b = parse_html(pair.b, pair.b_url, block_min_bytes=block)
        by_kind[pair.kind].append(hamming(a.simhash, b.simhash) <= k)
    return by_kind


def test_the_set_is_several_hundred_pairs_of_every_kind(found):
    assert set(found) == set(POSITIVE_KINDS) | set(NEGATIVE_KINDS)
    assert sum(len(v) for v in found.values()) >= 500


def test_precision_and_recall(found):
    tp = sum(sum(found[kind]) for kind in POSITIVE_KINDS)
    fn = sum(len(found[kind]) - sum(found[kind]) for kind in POSITIVE_KINDS)
    fp = sum(sum(found[kind]) for kind in NEGATIVE_KINDS)
    assert tp / (tp + fp) >= 0.99
    # 0.90 measured: the misses are edits inside the article (a word, an added paragraph),
    # which move a 64-bit SimHash past 3 bits on short articles; see bench_update.py.
    assert tp / (tp + fn) >= 0.88


@pytest.mark.parametrize("kind", ["date", "counter", "ad", "session", "boilerplate", "reordered", "print", "comment"])
def test_changes_around_the_content_are_found(found, kind):
    assert sum(found[kind]) >= 0.95 * len(found[kind]), kind


@pytest.mark.parametrize("kind", NEGATIVE_KINDS)
def test_different_pages_are_never_taken_for_copies(found, kind):
    assert not any(found[kind])
