"""Near-duplicate precision and recall on the labelled set testweb.neardup_set.

The pairs are parsed as fetch parses them with the default config (main content,
cycles.fingerprint.minhash64) and compared as update compares them (fingerprints within
 ``update.minhash_max_distance`` bits). scripts/bench/web.py update prints the same figures
against the fingerprints before issue #13 section 3 (precision 1.00, recall 0.52 then on
the first 10 kinds; the SimHash of the main content: 0.90).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from cycles.config import Config
from cycles.fetch.parse import parse_html
from cycles.fingerprint import hamming
from testweb.neardup_set import NEGATIVE_KINDS, POSITIVE_KINDS, Pair, labelled_pairs, update_search


@pytest.fixture(scope="module")
def pairs() -> list[Pair]:
    return labelled_pairs()


@pytest.fixture(scope="module")
def fingerprinted(pairs) -> tuple[dict[str, int], dict[str, str]]:
    """Every page's fingerprint and text, parsed as fetch parses them with the default config."""
    config = Config()
    block = config.fetch.minhash_block_min_bytes if config.fetch.minhash_main_content else None
    prints, texts = {}, {}
    for pair in pairs:
        for body, url in ((pair.a, pair.a_url), (pair.b, pair.b_url)):
            if url not in prints:  # a page of many pairs (an article's first version) is parsed once
                page = parse_html(body, url, block_min_bytes=block)
                prints[url], texts[url] = page.minhash, page.text
    return prints, texts


@pytest.fixture(scope="module")
def found(pairs, fingerprinted) -> dict[str, list[bool]]:
    prints, _ = fingerprinted
    k = Config().update.minhash_max_distance
    by_kind = defaultdict(list)
    for pair in pairs:
        by_kind[pair.kind].append(hamming(prints[pair.a_url], prints[pair.b_url]) <= k)
    return by_kind


def test_the_set_is_several_hundred_pairs_of_every_kind(found):
    assert set(found) == set(POSITIVE_KINDS) | set(NEGATIVE_KINDS)
    assert sum(len(v) for v in found.values()) >= 700


def test_precision_and_recall(found):
    tp = sum(sum(found[kind]) for kind in POSITIVE_KINDS)
    fn = sum(len(found[kind]) - sum(found[kind]) for kind in POSITIVE_KINDS)
    fp = sum(sum(found[kind]) for kind in NEGATIVE_KINDS)
    assert tp / (tp + fp) >= 0.99
    # 0.98 measured: the misses are mostly a paragraph appended to a short article (an
    # "Update:"), a tenth of its shingles, about 3 bits; see bench_update.py.
    assert tp / (tp + fn) >= 0.95


@pytest.mark.parametrize("kind", ["date", "counter", "ad", "session", "boilerplate", "reordered", "print", "comment",
                                  "edit", "related", "mobile"])
def test_changes_around_the_content_are_found(found, kind):
    assert sum(found[kind]) >= 0.95 * len(found[kind]), kind


@pytest.mark.parametrize("kind", NEGATIVE_KINDS)
def test_different_pages_are_never_taken_for_copies(found, kind):
    assert not any(found[kind])


def test_an_appended_paragraph_is_found_mostly(found):
    assert sum(found["update"]) >= 0.75 * len(found["update"])


def test_update_marks_them_after_the_canonical_choice(pairs, fingerprinted):
    """update's own search (find_duplicates' block-mask joins, the canonical order) on the
    set, the first page of each pair stored, the second fetched now, among 20,000 random
    stored fingerprints: the figures hold in the crawl DB, not only pairwise."""
    run = update_search(pairs, *fingerprinted, Config(), stored=20_000)
    tp = sum(1 for p in pairs if p.label and run.found[id(p)])
    fp = sum(1 for p in pairs if not p.label and run.found[id(p)])
    fn = sum(1 for p in pairs if p.label and not run.found[id(p)])
    assert tp / (tp + fp) >= 0.99
    assert tp / (tp + fn) >= 0.95


@pytest.mark.parametrize("part", ["tuning", "held-back"])
def test_issue_26_sets_after_the_canonical_choice(part):
    """The kinds of issue #26 (mirrors fetched in one segment, print and view variants in
    other boilerplate, other titles, a date or a counter alone, real pages of the Common
    Crawl sample and word-list pages in six scripts with one word edited) with the set
    above: the held-back part is measured only, never tuned on."""
    from testweb.neardup_set import held_back_pairs, tuning_pairs

    pairs = tuning_pairs() if part == "tuning" else held_back_pairs()
    config = Config()
    block = config.fetch.minhash_block_min_bytes if config.fetch.minhash_main_content else None
    prints, texts = {}, {}
    for pair in pairs:
        for body, url in ((pair.a, pair.a_url), (pair.b, pair.b_url)):
            if url not in prints:
                page = parse_html(body, url, block_min_bytes=block)
                prints[url], texts[url] = page.minhash, page.text
    assert {"ja", "zh", "th", "ar", "ru", "hi"} <= {u.split("/")[3] for u in prints if u.count("/") >= 4}
    run = update_search(pairs, prints, texts, config, stored=5_000)
    tp = sum(1 for p in pairs if p.label and run.found[id(p)])
    fp = sum(1 for p in pairs if not p.label and run.found[id(p)])
    fn = sum(1 for p in pairs if p.label and not run.found[id(p)])
    assert tp / (tp + fp) >= 0.99
    assert tp / (tp + fn) >= 0.95
    # Exact copies are never missed: mirrors (both pages fetched in one segment), pages that
    # differ only in a title, a date or a counter outside the main content.
    for kind in ("mirror", "title"):
        assert all(run.found[id(p)] for p in pairs if p.kind == kind), kind
