"""scripts/demo.py explains each cycle from its segment's stats: a cycle that generated URLs
and made no request says why (the demo's last cycle: every URL refused by cached robots.txt
rules). No web: the segments are made by hand. And ``scripts/demo.sh --real-web`` crawls the
named-host HTTPS web (``web``)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from cycles.tables import segment as seg
from cycles.storage.store import Store
from tests.support.fetching import make_segment

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("script_demo", ROOT / "scripts" / "demo.py")
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


# --- the README's first command, on a smaller demo web (web) ---------------------------------
@pytest.mark.web
def test_the_demo_crawls_the_local_web_and_explains_each_cycle(tmp_path):
    """``bash scripts/demo.sh`` (the README's first line) with a smaller web and data folder."""
    data = tmp_path / "data"
    done = subprocess.run(["bash", str(ROOT / "scripts/demo.sh"), "--hosts", "4", "--pages", "4", "--cycles", "2",
                           "--data", str(data)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    answered = re.search(r"the demo web answered (\d+) requests", done.stdout)
    assert answered and int(answered.group(1)) > 0, done.stdout
    assert "what each cycle asked the web for" in done.stdout and "  cycle 1 (" in done.stdout
    import cycles

    fetched = cycles.open(str(data)).sql("SELECT count(*) FROM crawldb WHERE status = 'fetched'").fetchall()[0][0]
    assert fetched >= 4


# --- the demo on the named-host HTTPS web (issue 28; web, root) -----------------------------
@pytest.mark.web
def test_the_real_web_demo_crawls_the_named_host_https_web(tmp_path):
    """``bash scripts/demo.sh --real-web``, small: the crawler finds the web through the
    namespace's resolver and CA bundle only (its config names no host), fetches over HTTPS,
    never completes a request to a bad-certificate host, and the crawl DB holds the pages."""
    from testweb.namespace import namespace_available

    if namespace_available() is not None:
        pytest.skip(namespace_available())
    data = tmp_path / "data"
    done = subprocess.run(["bash", str(ROOT / "scripts/demo.sh"), "--real-web", "--hosts", "6", "--pages", "4",
                           "--cycles", "1", "--data", str(data)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    config = (data / "demo-real.toml").read_text()
    assert "resolve" not in config and "ca_bundle" not in config  # found the way the real web is
    seen = re.search(r"answered (\d+) requests \((\d+) over HTTPS, (\d+) to bad-certificate hosts\); "
                     r"its DNS server answered (\d+) queries", done.stdout)
    assert seen, done.stdout
    requests, https, bad, queries = map(int, seen.groups())
    assert requests > 0 and https > 0 and queries > 0
    assert bad == 0
    import cycles

    fetched = cycles.open(str(data)).sql(
        "SELECT count(*) FROM crawldb WHERE status = 'fetched' AND url LIKE 'https://%.web.test%'").fetchall()[0][0]
    assert fetched >= 1
    assert "fetched" in done.stdout  # crawl status at the end
