"""Tests of cycles/commands/report.py (``crawl report``), built once on the session's 2-cycle crawl of a tiny
test web (tests/conftest.py ``two_cycles``, shared with tests/test_metrics.py).

The page must parse strictly as HTML5 (html5lib raises on any parse error), embed every
image as a ``data:`` PNG and reference nothing outside itself, and its summary numbers
must equal what DuckDB reads from the crawl DB and fetch results directly.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from cycles.tables import segment as seg
from cycles.commands.cli import app
from cycles.tables.crawldb import current_buckets, read_crawldb
from cycles.commands.inject import inject
from cycles.storage.store import Store
from tests.conftest import write_seeds

pytest.importorskip("matplotlib", reason="the report extra is not installed (pip install -e '.[report]')")
html5lib = pytest.importorskip("html5lib")

REPO = Path(__file__).resolve().parent.parent
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHARTS = {"cycles", "mix", "rate", "hosts", "politeness", "distributions", "freshness", "buckets"}


@pytest.fixture(scope="module")
def report(two_cycles):
    """The report of the session's small crawl (tests/conftest.py ``two_cycles``), by the real command."""
    store = two_cycles["store"]
    out = two_cycles["tmp"] / "report"
    done = subprocess.run([sys.executable, "-m", "cycles", "--data", str(store.root), "report", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    text = (out / "index.html").read_text(encoding="utf-8") if done.returncode == 0 else ""
    return {"store": store, "log": two_cycles["log"], "done": done, "out": out, "text": text}


def parsed(report):
    """The page as parsed by html5lib in strict mode: any parse error raises."""
    return html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(report["text"])


def summary_values(report) -> dict[str, str]:
    return {td.get("id").removeprefix("sum-"): td.get("data-value")
            for td in parsed(report).iter("td") if (td.get("id") or "").startswith("sum-")}


@pytest.mark.web
def test_the_command_writes_the_page_and_its_charts(report):
    done = report["done"]
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("report: ") and "8 charts" in done.stdout
    assert {p.stem for p in report["out"].glob("*.png")} == CHARTS
    assert not list(report["out"].glob(".*.tmp"))


@pytest.mark.web
def test_the_page_is_strict_html5(report):
    assert report["text"].startswith("<!DOCTYPE html>")
    root = parsed(report)  # raises html5lib.html5parser.ParseError on any error
    assert root.find("head/title").text.startswith("Crawl report")
    assert root.find("head/meta").get("charset") == "utf-8"


@pytest.mark.web
def test_every_image_is_an_embedded_png_and_nothing_is_fetched_from_elsewhere(report):
    root = parsed(report)
    images = list(root.iter("img"))
    assert {img.get("id").removeprefix("chart-") for img in images} == CHARTS
    for img in images:
        src = img.get("src")
        assert src.startswith("data:image/png;base64,"), src[:40]
        png = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert png.startswith(PNG_MAGIC)
        assert png == (report["out"] / f"{img.get('id').removeprefix('chart-')}.png").read_bytes()
        assert img.get("alt")
    for element in root.iter():
        for attribute in ("href", "src", "srcset", "action", "poster", "data", "background"):
            value = element.get(attribute)
            assert value is None or value.startswith("data:"), (element.tag, attribute, value)
        assert element.tag not in ("script", "link", "iframe", "object", "embed", "base")
    assert "url(" not in "".join(style.text or "" for style in root.iter("style"))


@pytest.mark.web
def test_the_summary_comes_first(report):
    root = parsed(report)
    first_table = next(root.iter("table"))
    assert first_table.get("id") == "summary"
    assert [h.text for h in root.iter("h2")][:2] == ["Summary", "What is failing"]


@pytest.mark.web
def test_summary_numbers_equal_duckdb_over_the_store(report):
    store = report["store"]
    values = summary_values(report)
    con = duckdb.connect()
    con.register("merged", read_crawldb(store))  # bases and deltas merged: one row per URL
    urls, hosts, fetched, failing = con.execute("""
        SELECT count(*), count(DISTINCT host), count(*) FILTER (WHERE status = 'fetched'),
               count(*) FILTER (WHERE status IN ('error', 'dead', 'gone'))
        FROM merged""").fetchall()[0]
    assert urls > 0 and fetched > 0
    assert (int(values["urls"]), int(values["hosts"]), int(values["fetched"]), int(values["failing"])) == \
        (urls, hosts, fetched, failing)
    segments = store.segments()
    parts = [str(p) for s in segments for p in seg.files(store, s, seg.FETCHED)]
    pages, errors = con.execute(f"""
        SELECT count(*) FILTER (WHERE outcome NOT IN ('deferred', 'robots_denied', 'blocked')),
               count(*) FILTER (WHERE outcome IN ('server_error', 'network_error', 'client_error', 'gone',
                                                  'parse_error'))
        FROM read_parquet({parts})""").fetchall()[0]
    assert (int(values["pages"]), int(values["errors"])) == (pages, errors)
    assert int(values["cycles"]) == len(segments) == 2
    _, buckets = current_buckets(store)  # what the report sizes: every base and delta file
    assert int(values["db_bytes"]) == sum(Path(f).stat().st_size for b in buckets for f in b.files)
    last = store.read_json(seg.stats_file(seg.segment_dir(store, segments[-1]), "fetch"))
    assert float(values["rate_last"]) == last["fetch/pages_per_s"]
    assert float(values["politeness_last"]) == last["fetch/politeness_utilisation"]
    everything = [store.read_json(seg.stats_file(seg.segment_dir(store, s), "fetch")) for s in segments]
    assert float(values["politeness_all"]) == pytest.approx(
        sum(s["fetch/requests"] for s in everything) / sum(s["fetch/allowed_requests"] for s in everything), abs=1e-4)


@pytest.mark.web
def test_the_cycles_table_lists_each_cycle_with_its_new_urls(report):
    store = report["store"]
    rows = [[td.text for td in tr.iter("td")] for tr in parsed(report).find(".//table[@id='cycles']").iter("tr")]
    rows = [r for r in rows if r]
    assert [r[1] for r in rows] == store.segments()
    for row, segment in zip(rows, store.segments()):
        new = store.read_json(seg.stats_file(seg.segment_dir(store, segment), "update"))["outlinks/new"]
        assert row[6] == f"{new:,}"


def test_a_store_without_a_crawl_db_is_a_user_error(tmp_path):
    result = CliRunner().invoke(app, ["--data", str(tmp_path / "nothing"), "report", "--out", str(tmp_path / "r")])
    assert result.exit_code == 2, result.output
    assert "crawl inject" in result.stderr
    assert not (tmp_path / "r").exists()


def test_a_crawl_db_with_nothing_fetched_yet_still_reports(tmp_path):
    from cycles.config import Config
    from cycles.commands.report import build_report

    store, config = Store(tmp_path / "data"), Config()
    inject(store, config, write_seeds(tmp_path / "seeds.txt", ["http://a.example/", "http://b.example/x"]))
    result = build_report(store, config, tmp_path / "out")
    root = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(result.html.read_text())
    values = {td.get("id"): td.get("data-value") for td in root.iter("td") if td.get("id")}
    assert values["sum-urls"] == "2" and values["sum-hosts"] == "2" and values["sum-cycles"] == "0"
    assert values["sum-rate_last"] == "" and values["sum-politeness_all"] == ""  # unknown, shown as a dash
    assert len(list(root.iter("img"))) == 8
