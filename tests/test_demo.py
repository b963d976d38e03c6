"""scripts/demo.py explains each cycle from its segment's stats: a cycle that generated URLs
and made no request says why (the demo's last cycle: every URL refused by cached robots.txt
rules). No web: the segments are made by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from cycles.tables import segment as seg
from cycles.storage.store import Store
from tests.support.fetching import make_segment

_spec = importlib.util.spec_from_file_location("script_demo", Path(__file__).resolve().parent.parent / "scripts" / "demo.py")
demo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo)  # a script beside the package, as tests/test_bench_cost.py loads its own


def segment_with(store: Store, urls: int, counters: dict) -> str:
    segment = make_segment(store, [f"http://h{i}.test/cgi-bin/search" for i in range(urls)])
    store.write_json(seg.stats_file(store.segment_dir(segment), "fetch"), counters)
    return segment


def test_a_cycle_without_requests_says_each_url_was_answered_from_cached_robots_rules(store):
    segment = segment_with(store, 5, {"fetch/outcome/robots_denied": 5, "robots/cached": 5})
    line = demo.cycle_line(store, 3, segment)
    assert line.startswith(f"  cycle 3 ({segment}): 5 URLs generated, 0 requests; rows: 5 robots_denied")
    assert "no request needed" in line and "robots.txt rules held from an earlier cycle" in line


def test_a_cycle_with_requests_lists_its_outcomes_only(store, capsys):
    before = set(seg.segment_ids(store))
    segment = segment_with(store, 2, {"fetch/requests": 3, "fetch/outcome/ok": 2, "fetch/outcome/gone": 0})
    demo.explain_cycles(store.root, before)
    out = capsys.readouterr().out
    assert f"cycle 1 ({segment}): 2 URLs generated, 3 requests; rows: 2 ok\n" in out
    assert "no request needed" not in out
