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


def test_a_variant_names_the_page_its_base_is_kept_under():
    """docs/dedup.md: every copy names the page kept, never a copy. A variant's base may be a
    copy itself (an article that is a syndicated story's copy): marked in this segment, or in
    an earlier one (the old rows). The positive controls: a base fetched without a mark, and
    a base unknown, are named themselves."""
    import datetime

    import duckdb

    from cycles.update.update import OLD_KEY_COLUMNS, with_variants_set_aside

    con = duckdb.connect()
    a = "http://a.test/"
    con.execute("CREATE TABLE variant_urls AS SELECT * FROM (VALUES "
                f"('{a}1?print=1', '{a}1'), ('{a}2?print=1', '{a}2'), ('{a}3?print=1', '{a}3'), "
                f"('{a}4?print=1', '{a}4'), ('{a}5?print=1', '{a}5')) t(url, base)")
    con.execute(f"CREATE TABLE marks AS SELECT * FROM (VALUES ('{a}1', 'duplicate', 'http://wire.test/1')) t(url, kind, canonical)")
    con.execute(f"CREATE TABLE fetched_all AS SELECT * FROM (VALUES ('{a}1'), ('{a}2')) t(url)")
    cols = ", ".join(f"NULL AS {c}" for c in OLD_KEY_COLUMNS if c not in ("url", "status", "duplicate_of"))
    con.execute(f"""CREATE TABLE old_keys AS SELECT url, status, duplicate_of, {cols} FROM (VALUES
                    ('{a}3', 'near_duplicate', 'http://wire.test/3'), ('{a}4', 'fetched', NULL)) t(url, status, duplicate_of)""")
    # the new rows: four unfetched variants, and one set aside earlier naming its base (5, re-pointed only if 5 is a copy)
    new_rows = f"""SELECT * FROM (VALUES ('{a}1?print=1', 'unfetched', NULL), ('{a}2?print=1', 'unfetched', NULL),
                   ('{a}3?print=1', 'unfetched', NULL), ('{a}4?print=1', 'unfetched', NULL),
                   ('{a}5?print=1', 'duplicate', '{a}5')) t(url, status, duplicate_of)"""
    con.execute("CREATE TABLE candidates AS SELECT NULL AS url, false AS over_pattern, false AS over_host LIMIT 0")
    con.execute("CREATE TABLE r AS SELECT *, now()::TIMESTAMP AS next_fetch FROM (" + new_rows + ")")
    sql, skipped = with_variants_set_aside(con, "SELECT * FROM r", "old_keys", Config())
    got = dict(con.execute(f"SELECT url, duplicate_of FROM ({sql}) ORDER BY url", {"now": datetime.datetime(2026, 1, 1)}).fetchall())
    assert got == {f"{a}1?print=1": "http://wire.test/1",  # its base marked a copy in this segment
                   f"{a}2?print=1": f"{a}2",  # base fetched, kept: the control
                   f"{a}3?print=1": "http://wire.test/3",  # its base a copy before this segment
                   f"{a}4?print=1": f"{a}4",  # base fetched before and kept: the control
                   f"{a}5?print=1": f"{a}5"}
