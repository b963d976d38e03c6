"""Variant-parameter learning (GitHub issue #26, cycles/update/dedup.py): the evidence, the
rule, the stripped URL, and discovery inside the fetch leaving a learned variant alone.
The crawl of it (a host's ?print=1 not asked again, another host's still asked) is
tests/update/test_dedup_run.py."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from cycles.config import Config
from cycles.fetch.records import FetchItem
from cycles.urls import host_hash
from cycles.update.dedup import (learn_variants, learned_by_host, read_state, strip_params, variant_evidence,
                                 variant_rows, write_state)
from tests.support.discovery import link, offer_setup


def pages(*urls):
    return pa.table({"url": list(urls), "host": [u.split("/")[2] for u in urls]})


def marks(*pairs):
    return pa.table({"url": [a for a, _ in pairs], "canonical": [b for _, b in pairs]})


def test_strip_keeps_the_other_parameters():
    assert strip_params("http://a.test/x?print=1", {"print"}) == "http://a.test/x"
    assert strip_params("http://a.test/x?id=3&print=1&view=2", {"print", "view"}) == "http://a.test/x?id=3"
    assert strip_params("http://a.test/x?printer=1", {"print"}) == "http://a.test/x?printer=1"


def test_evidence_same_and_different_and_none():
    seg = pages("http://a.test/1", "http://a.test/1?print=1", "http://a.test/2", "http://a.test/2?print=1",
                "http://a.test/3?print=1",  # its page without print not fetched: no evidence
                "http://b.test/1", "http://b.test/1?print=1")
    found = marks(("http://a.test/1?print=1", "http://a.test/1"), ("http://a.test/2", "http://a.test/2?print=1"))
    evidence = variant_evidence(seg, found)
    assert evidence == Counter({("a.test", "print", "same"): 2, ("b.test", "print", "differs"): 1})


def test_a_parameter_is_learned_on_its_host_only_with_enough_agreeing_copies():
    u = Config().update
    state = {"segment": None, "mirrors": {}, "params": []}
    counters = Counter()
    learn_variants(state, Counter({("a.test", "print", "same"): u.variant_min_pages - 1}), u, counters)
    assert not any(p[4] for p in state["params"])
    learn_variants(state, Counter({("a.test", "print", "same"): 1, ("b.test", "print", "same"): 5,
                                   ("b.test", "print", "differs"): 5}), u, counters)
    assert {(h, p) for h, p, _, _, on in state["params"] if on} == {("a.test", "print")}
    assert counters["dedup/variant_params_learned"] == 1


def test_rows_set_aside_name_the_page_without_the_parameter():
    learned = pa.table({"host": ["a.test"], "param": ["print"]})
    rows = variant_rows(pages("http://a.test/1?print=1", "http://a.test/1", "http://b.test/1?print=1"), learned)
    assert rows.to_pylist() == [{"url": "http://a.test/1?print=1", "base": "http://a.test/1"}]


def test_discovery_leaves_a_learned_variant_and_takes_the_others(store):
    state = read_state(store)
    state["params"] = [["a.test", "print", 5, 0, True], ["a.test", "view", 1, 3, False]]
    write_state(store, state)
    assert learned_by_host(store) == {"a.test": frozenset({"print"})}
    discovery, slot, stats = offer_setup(store, follow_outlinks_depth=2, follow_outlinks_per_host=10)
    item = FetchItem("http://a.test/", "a.test", host_hash("a.test"), 1.0, 0)
    links = [link("http://a.test/new?print=1"), link("http://a.test/new?view=2"), link("http://a.test/other")]
    discovery.offer(item, links, {"a.test": slot}.get)
    # The positive control: the same page offers two URLs discovery takes.
    assert [q.url for q in slot.queue] == ["http://a.test/new?view=2", "http://a.test/other"]
    assert stats["discover/variant_param"] == 1
