"""Tests of cycles/metrics.py: the stages' stats JSON and Prometheus text files.

The web tests share one crawl of a tiny test web (2 cycles, module-scoped) and check the
``.prom`` files, parsed with the client library's own parser, against the segments'
``stats/<stage>.json``, and those against what the server saw and what DuckDB reads
from the fetched files. The fast tests check the arithmetic and that a file is always
replaced whole.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import duckdb
import pytest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from cycles import metrics
from cycles.tables import segment as seg
from cycles.config import Config
from cycles.storage.store import Store


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value, parsed by prometheus_client's own parser."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


# --- fast: arithmetic, paths, atomic replacement ---------------------------------------------
def test_allowed_requests_is_one_plus_elapsed_over_delay_per_host():
    assert metrics.allowed_requests([1.0, 2.0], 10.0) == pytest.approx((1 + 10) + (1 + 5))
    assert metrics.allowed_requests([], 10.0) == 0
    assert metrics.allowed_requests([1.0], 0.0) == 1.0  # the first request may start at once


def test_fetch_summary_rates_errors_and_utilisation():
    counters = {"fetch/requests": 30, "fetch/bytes": 6000, "fetch/allowed_requests": 60.0,
                "fetch/outcome/ok": 20, "fetch/outcome/server_error": 3, "fetch/outcome/network_error": 2,
                "fetch/outcome/deferred": 7, "fetch/outcome/robots_denied": 4, "fetch/timeout": 1,
                "robots/denied": 4}
    s = metrics.fetch_summary(counters, 10.0)
    assert s["fetch/pages"] == 25  # deferred and robots-denied URLs were never requested
    assert s["fetch/pages_per_s"] == 2.5 and s["fetch/requests_per_s"] == 3.0 and s["fetch/bytes_per_s"] == 600
    assert s["fetch/errors"] == 5 and s["fetch/errors/server_error"] == 3 and s["fetch/errors/timeout"] == 1
    assert s["fetch/politeness_utilisation"] == 0.5
    assert s["fetch/robots_denied"] == 4
    assert "fetch/politeness_utilisation" not in metrics.fetch_summary({"fetch/requests": 1}, 1.0)


def test_idle_with_work_is_summed_and_always_written():
    """fetch/idle_with_work_s and its share of the politeness budget (requests the idle
    host-seconds would have allowed / requests allowed): written even when 0."""
    s = metrics.fetch_summary({"fetch/allowed_requests": 200.0, "fetch/idle_with_work_s": 12.5,
                               "fetch/idle_with_work_requests": 10.0}, 10.0)
    assert s["fetch/idle_with_work_s"] == 12.5 and s["fetch/idle_with_work_ratio"] == 0.05
    empty = metrics.fetch_summary({}, 0.0)
    assert empty["fetch/idle_with_work_s"] == 0 and empty["fetch/idle_with_work_ratio"] == 0
    names = {f.name for f in metrics.fetch_families({}, 0.0, None, running=True, started_wall=0.0)}
    assert {"crawl_fetch_idle_with_work_seconds", "crawl_fetch_idle_with_work_ratio"} <= names


def test_textfile_dir_relative_to_the_store_absolute_as_is_or_off(tmp_path):
    store, config = Store(tmp_path / "data"), Config()
    assert metrics.textfile_path(store, config, "fetch") == tmp_path / "data" / "metrics" / "crawl_fetch.prom"
    config.metrics.textfile_dir = str(tmp_path / "node-exporter")
    assert metrics.textfile_path(store, config, "update") == tmp_path / "node-exporter" / "crawl_update.prom"
    config.metrics.textfile = False
    assert metrics.textfile_path(store, config, "update") is None


def _families(n: int) -> list:
    return [GaugeMetricFamily(f"crawl_test_g{i}", "filler", value=i) for i in range(n)] + \
        [GaugeMetricFamily("crawl_test_last", "written last", value=n)]


def test_textfile_is_written_beside_and_renamed_into_place(tmp_path, monkeypatch):
    import prometheus_client.exposition as exposition

    renames = []
    real_rename = exposition.os.rename
    monkeypatch.setattr(exposition.os, "rename", lambda src, dst: (renames.append((src, dst)), real_rename(src, dst)))
    path = tmp_path / "m" / "crawl_fetch.prom"
    metrics.write_textfile(path, _families(3))
    [(src, dst)] = renames
    assert Path(dst) == path and Path(src).parent == path.parent  # same folder: rename(2) is atomic
    assert not src.endswith(".prom")  # node-exporter reads only *.prom: never the half-written file
    assert samples(path.read_text())[("crawl_test_last", ())] == 3
    assert [p.name for p in path.parent.iterdir()] == ["crawl_fetch.prom"]


def test_a_reader_never_sees_a_partial_file(tmp_path):
    """A reader polling the file while it is rewritten, large and small in turn, always
    parses a whole file: the last metric is there and agrees with the file's size."""
    path = tmp_path / "crawl_fetch.prom"
    metrics.write_textfile(path, _families(1))
    done = threading.Event()
    seen, bad = [], []

    def read() -> None:
        while not done.is_set():
            text = path.read_text()
            values = samples(text)
            last = values.get(("crawl_test_last", ()))
            if last is None or len(values) != last + 1:
                bad.append(text[-200:])
            seen.append(last)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(60):
            metrics.write_textfile(path, _families(200 if i % 2 else 1))
    finally:
        done.set()
        reader.join()
    assert seen and not bad, bad[:1]
    assert {200.0, 1.0} & set(seen)


def test_a_failed_write_is_logged_not_raised(tmp_path, caplog):
    store, config = Store(tmp_path / "data"), Config()
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    config.metrics.textfile_dir = str(blocker)
    with caplog.at_level(logging.WARNING, logger="cycles.metrics"):
        assert metrics.publish(store, config, "fetch", _families(1)) is None
    assert "metrics.textfile_dir" in caplog.text


def test_fetch_loop_sums_the_partitions_and_says_when_it_stopped(tmp_path):
    import json
    import time

    store, config = Store(tmp_path / "data"), Config()
    config.metrics.fetch_interval_s = 0.05
    progress = tmp_path / "progress"
    progress.mkdir()
    for part, (requests, waiting) in enumerate([(5, 2), (7, 3)]):
        (progress / f"part-{part:05d}.json").write_text(json.dumps(
            {"partition": part, "hosts_active": 1, "hosts_waiting": waiting,
             "counters": {"fetch/requests": requests, "fetch/outcome/ok": requests, "fetch/allowed_requests": 24.0}}))
    (progress / ".part-00002.json.tmp").write_text("{half")  # being written: not a part file
    loop = metrics.FetchMetricsLoop(store, config, "seg-1", 3, progress)
    path = metrics.textfile_path(store, config, "fetch")
    loop.start()
    try:
        live = samples(path.read_text())  # written at once, before the first interval
        time.sleep(0.15)
    finally:
        loop.stop()
    assert live[("crawl_fetch_running", ())] == 1
    assert live[("crawl_fetch_requests_total", ())] == 12 and live[("crawl_fetch_hosts_waiting", ())] == 5
    assert live[("crawl_fetch_partitions_reporting", ())] == 2 and live[("crawl_fetch_partitions", ())] == 3
    assert live[("crawl_fetch_politeness_utilisation_ratio", ())] == 0.25
    assert live[("crawl_fetch_idle_with_work_seconds", ())] == 0  # no stall published: still a series
    stopped = samples(path.read_text())
    assert stopped[("crawl_fetch_running", ())] == 0 and stopped[("crawl_fetch_hosts_waiting", ())] == 0
    assert ("crawl_fetch_last_success_timestamp_seconds", ()) not in stopped  # stopped is not finished


# --- one crawl of a tiny test web (shared with tests/test_report.py) --------------------------------------------------------------
@pytest.fixture(scope="module")
def crawled(two_cycles):
    """The session's small crawl (tests/conftest.py ``two_cycles``)."""
    return two_cycles


def stats(store: Store, segment: str, stage: str) -> dict:
    return store.read_json(seg.stats_file(seg.segment_dir(store, segment), stage))


def prom(crawled, stage: str) -> dict:
    return samples((crawled["store"].root / "metrics" / f"crawl_{stage}.prom").read_text())


@pytest.mark.web
def test_fetch_stats_count_what_the_server_saw(crawled):
    store, segments = crawled["store"], crawled["segments"]
    assert len(segments) == 2, crawled["log"]
    requests = sum(stats(store, s, "fetch")["fetch/requests"] for s in segments)
    assert requests == len(crawled["requests"]) > 0


@pytest.mark.web
def test_fetch_stats_pages_match_the_fetched_files(crawled):
    store = crawled["store"]
    for segment in crawled["segments"]:
        s = stats(store, segment, "fetch")
        files = [str(p) for p in seg.files(store, segment, seg.FETCHED)]
        pages, ok = duckdb.connect().execute(f"""SELECT count(*) FILTER (WHERE outcome NOT IN ('deferred', 'robots_denied', 'blocked')),
                                          count(*) FILTER (WHERE outcome = 'ok')
                                   FROM read_parquet({files})""").fetchall()[0]
        assert s["fetch/pages"] == pages and s["fetch/outcome/ok"] == ok > 0
        assert s["fetch/seconds"] > 0
        assert s["fetch/pages_per_s"] == pytest.approx(pages / s["fetch/seconds"], rel=1e-2)
        # Every host waits 1 s between requests and most have few URLs: well under the budget, never over it.
        assert 0 < s["fetch/politeness_utilisation"] <= 1
        assert s["fetch/politeness_utilisation"] == pytest.approx(s["fetch/requests"] / s["fetch/allowed_requests"],
                                                                  abs=1e-3)


@pytest.mark.web
def test_fetch_prom_file_agrees_with_the_stats_json(crawled):
    last = crawled["segments"][-1]
    s, p = stats(crawled["store"], last, "fetch"), prom(crawled, "fetch")
    assert p[("crawl_fetch_running", ())] == 0
    assert p[("crawl_fetch_segment_info", (("segment", last),))] == 1
    assert p[("crawl_fetch_requests_total", ())] == s["fetch/requests"]
    assert p[("crawl_fetch_pages_total", ())] == s["fetch/pages"]
    assert p[("crawl_fetch_bytes_total", ())] == s["fetch/bytes"]
    assert p[("crawl_fetch_robots_denied_total", ())] == s["fetch/robots_denied"]
    assert p[("crawl_fetch_duration_seconds", ())] == s["fetch/seconds"]
    assert p[("crawl_fetch_pages_per_second", ())] == s["fetch/pages_per_s"]
    assert p[("crawl_fetch_politeness_utilisation_ratio", ())] == s["fetch/politeness_utilisation"]
    # issue 29's names (a Grafana dashboard reads them), present whatever their value
    assert p[("crawl_fetch_idle_with_work_seconds", ())] == s["fetch/idle_with_work_s"] >= 0
    assert p[("crawl_fetch_idle_with_work_ratio", ())] == s["fetch/idle_with_work_ratio"] >= 0
    outcomes = {k.removeprefix("fetch/outcome/"): v for k, v in s.items() if k.startswith("fetch/outcome/")}
    assert {dict(labels)["outcome"]: v for (name, labels), v in p.items()
            if name == "crawl_fetch_outcomes_total"} == outcomes
    assert {dict(labels)["kind"]: v for (name, labels), v in p.items() if name == "crawl_fetch_errors_total"} == \
        {k.removeprefix("fetch/errors/"): v for k, v in s.items() if k.startswith("fetch/errors/")}


@pytest.mark.web
def test_fetch_prom_file_is_rewritten_while_fetching(crawled):
    live = [samples(text) for text in crawled["writes"] if samples(text)[("crawl_fetch_running", ())] == 1]
    assert len(live) >= 2, len(crawled["writes"])
    counts = [w[("crawl_fetch_requests_total", ())] for w in live]
    assert max(counts) > 0  # the partitions' published counters reached the file mid-fetch
    assert all(w[("crawl_fetch_partitions", ())] == crawled["config"].generate.partitions for w in live)
    assert any(("crawl_fetch_hosts_waiting", ()) in w for w in live)


@pytest.mark.web
def test_generate_and_update_stats_and_prom_files(crawled):
    store, last = crawled["store"], crawled["segments"][-1]
    g, u = stats(store, last, "generate"), stats(store, last, "update")
    marker = seg.read_marker(store, last, seg.Generated)
    assert g["generate/urls"] == marker.urls and g["generate/hosts"] == marker.hosts and g["generate/seconds"] > 0
    pg = prom(crawled, "generate")
    assert pg[("crawl_generate_urls_total", ())] == g["generate/urls"]
    assert pg[("crawl_generate_duration_seconds", ())] == g["generate/seconds"]
    assert pg[("crawl_generate_segment_info", (("segment", last),))] == 1
    pu = prom(crawled, "update")
    assert u["update/seconds"] > 0 and u["update/results"] > 0
    assert pu[("crawl_update_results_total", ())] == u["update/results"]
    assert pu[("crawl_update_new_urls_total", ())] == u["outlinks/new"]
    assert pu[("crawl_update_duration_seconds", ())] == u["update/seconds"]
    assert pu[("crawl_update_events_total", (("counter", "outlinks/known"),))] == u["outlinks/known"]


@pytest.mark.web
def test_crawl_status_shows_the_last_fetch_rate_and_politeness_utilisation(crawled):
    from cycles.commands.status import crawl_status, format_status

    store, last = crawled["store"], crawled["segments"][-1]
    s = stats(store, last, "fetch")
    report = crawl_status(store, crawled["config"])
    assert report["last_fetch"] == {"segment": last, "seconds": s["fetch/seconds"],
                                    "pages_per_s": s["fetch/pages_per_s"],
                                    "politeness_utilisation": s["fetch/politeness_utilisation"],
                                    "idle_with_work_s": s["fetch/idle_with_work_s"],
                                    "idle_with_work_ratio": s["fetch/idle_with_work_ratio"]}
    assert f"politeness utilisation {s['fetch/politeness_utilisation']:.0%}" in format_status(report)
    assert f"idle with work {s['fetch/idle_with_work_s']:g} host-s" in format_status(report)
