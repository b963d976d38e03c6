"""deploy/grafana/crawl.json (scripts/regenerate.py dashboard) against what a crawl writes.

Every metric a panel queries must be in the ``.prom`` files of the session's real two-cycle
crawl (tests/conftest.py ``two_cycles``), parsed by prometheus_client's own parser, and be
documented (``crawl schema`` or docs/operations-tools.md); the JSON must be what the script
writes, and the panels must not overlap.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cycles import metrics

REPO = Path(__file__).resolve().parent.parent
DASHBOARD = REPO / "deploy" / "grafana" / "crawl.json"
DOCS = REPO / "docs" / "operations-tools.md"
METRIC = re.compile(r"\bcrawl_[a-z0-9_]+")
WANTED = ("Fetch rate", "Politeness utilisation", "Errors by kind", "Crawl DB size by status",
          "Cycle duration by stage", "Lag")


def panels() -> list[dict]:
    return json.loads(DASHBOARD.read_text())["panels"]


def queried(panel: dict) -> set[str]:
    """The metric names a panel's PromQL names (label values and functions are not crawl_*)."""
    return {name for t in panel["targets"] for name in METRIC.findall(re.sub(r'"[^"]*"', "", t["expr"]))}


def written_samples(folder: Path) -> set[str]:
    """Metric names in the ``.prom`` files: every sample's (``crawl_fetch_pages_total``,
    ``crawl_crawldb_urls``), and those of families declared without a sample (a labelled
    counter nothing was counted in yet, e.g. failures by kind in a crawl without one: its
    ``# TYPE`` line is there, and a query of it is right)."""
    names = set()
    for path in sorted(folder.glob("*.prom")):
        for family in text_string_to_metric_families(path.read_text()):
            names |= {s.name for s in family.samples}
            if not family.samples:
                names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def missing(dashboard_panels: list[dict], samples: set[str]) -> dict[str, set[str]]:
    return {p["title"]: queried(p) - samples for p in dashboard_panels if queried(p) - samples}


def test_a_family_declared_without_samples_counts_as_written(tmp_path):
    (tmp_path / "crawl_x.prom").write_text(
        "# HELP crawl_x_failures_total Failures\n# TYPE crawl_x_failures_total counter\n"
        "# HELP crawl_x_up Up\n# TYPE crawl_x_up gauge\ncrawl_x_up 1.0\n")
    assert written_samples(tmp_path) == {"crawl_x_failures_total", "crawl_x_up"}


def test_the_json_is_what_the_script_writes():
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "regenerate.py"), "--check", "dashboard"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_panels_the_operators_asked_for_are_there_and_do_not_overlap():
    found = panels()
    assert set(WANTED) <= {p["title"] for p in found}
    cells = set()
    for panel in found:
        assert panel["targets"] and queried(panel), panel["title"]
        g = panel["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, panel["title"]
        assert g["x"] + g["w"] <= 24
        cells |= mine
    assert len({p["id"] for p in found}) == len(found)


@pytest.mark.web
def test_every_queried_metric_is_written_by_a_real_two_cycle_crawl(two_cycles):
    store, config = two_cycles["store"], two_cycles["config"]
    folder = metrics.textfile_path(store, config, "fetch").parent
    samples = written_samples(folder)
    assert {p.name for p in folder.glob("*.prom")} >= {"crawl_generate.prom", "crawl_fetch.prom",
                                                       "crawl_update.prom", "crawl_crawldb.prom"}
    assert missing(panels(), samples) == {}
    # Positive control: a panel querying a metric the crawl does not write (a misspelt one) is caught.
    other = {"title": "DNS failure", "targets": [{"expr": "sum by (kind) (rate(crawl_fetch_dns_failure_total[5m]))"}]}
    assert missing([other], samples) == {"DNS failure": {"crawl_fetch_dns_failure_total"}}


@pytest.mark.web
def test_the_crawldb_gauges_equal_the_crawl_db(two_cycles):
    """crawl_crawldb.prom, written by the last update, against DuckDB over the installed crawl DB."""
    import duckdb

    from cycles.tables import segment as seg
    from cycles.tables.crawldb import current_buckets, read_crawldb

    store, config = two_cycles["store"], two_cycles["config"]
    text = metrics.textfile_path(store, config, "crawldb").read_text()
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for family in text_string_to_metric_families(text) for s in family.samples}
    # Bases merged with their deltas (docs/incremental.md): one row per URL, its newest state.
    _, buckets = current_buckets(store)
    files = [f for b in buckets for f in (b.base, *b.deltas)]
    rows = read_crawldb(store, ["url", "status"])
    by_status = dict(duckdb.sql("SELECT status, count(*) FROM rows GROUP BY 1").fetchall())
    assert {labels[0][1]: v for (name, labels), v in values.items() if name == "crawl_crawldb_urls"} == by_status
    assert sum(by_status.values()) > 0
    assert values[("crawl_crawldb_bytes", ())] == sum(Path(f).stat().st_size for f in files)
    states = {labels[0][1]: v for (name, labels), v in values.items() if name == "crawl_crawldb_segments"}
    assert states["updated"] == 2 == len(seg.segment_ids(store))
    assert values[("crawl_crawldb_oldest_due_age_seconds", ())] >= 0


def documented() -> str:
    done = subprocess.run([sys.executable, "-m", "cycles", "schema"], capture_output=True, text=True, timeout=60,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done.stdout + DOCS.read_text()


def test_every_panels_metric_is_documented():
    text = documented()
    for panel in panels():
        for name in queried(panel):
            base = name.removesuffix("_total")
            assert f"`{base}" in text, f"{name} (panel {panel['title']!r}) is not documented in {DOCS.name}"


def test_inject_writes_the_crawldb_file_and_a_store_without_crawl_db_only_logs(tmp_path, caplog):
    from cycles.config import Config
    from cycles.commands.inject import inject
    from cycles.storage.store import Store
    from tests.conftest import write_seeds

    store, config = Store(tmp_path / "data"), Config()
    assert metrics.publish_crawldb(store, config) is None  # no crawl DB yet: a warning, not an error
    assert "could not read the crawl DB" in caplog.text
    inject(store, config, write_seeds(tmp_path / "seeds.txt", ["http://a.example/", "http://b.example/x"]))
    text = metrics.textfile_path(store, config, "crawldb").read_text()
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for family in text_string_to_metric_families(text) for s in family.samples}
    assert values[("crawl_crawldb_urls", (("status", "unfetched"),))] == 2
    assert values[("crawl_crawldb_urls_due", ())] == 2  # seeds are due at once
    assert values[("crawl_crawldb_segments", (("state", "generated"),))] == 0
    config.metrics.textfile = False
    (tmp_path / "data" / "metrics" / "crawl_crawldb.prom").unlink()
    inject(store, config, write_seeds(tmp_path / "more.txt", ["http://c.example/"]))
    assert not (tmp_path / "data" / "metrics" / "crawl_crawldb.prom").exists()
