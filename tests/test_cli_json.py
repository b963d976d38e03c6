"""The scheduler contract: with --json each stage ends with one JSON line on stdout saying
what it did, and the exit code still tells done (0) from nothing to do (3); fetch runs one
partition at a time (--partition N) and then marks the segment fetched (--finish)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cycles.tables.segment import segment_state
from cycles.commands.cli import app
from cycles.storage.store import Store
from testweb.harness import TestWeb
from tests.conftest import write_seeds
from tests.support.cli import json_line, write_web_config

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]


def crawl_json(data, *args):
    result = runner.invoke(app, ["--data", str(data), *args, "--json"])
    return result.exit_code, json_line(result.stdout)


# --- without a network ---------------------------------------------------------------------
def test_inject_reports_counts(tmp_path):
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://a.example/", "http://b.example/x", "not a url"])
    code, line = crawl_json(tmp_path / "data", "inject", seeds)
    assert code == 0
    assert line["status"] == "done" and line["stage"] == "inject"
    assert (line["added"], line["already_known"], line["rejected"]) == (2, 0, 1)
    assert isinstance(line["seconds"], float)
    code, again = crawl_json(tmp_path / "data", "inject", seeds)
    assert code == 0 and (again["added"], again["already_known"]) == (0, 2)


def test_nothing_to_do_exits_3_with_a_json_line(tmp_path):
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://a.example/"])
    crawl_json(tmp_path / "data", "inject", seeds)
    for stage in ("fetch", "update"):  # nothing generated, nothing fetched
        code, line = crawl_json(tmp_path / "data", stage)
        assert code == 3, line
        assert line["status"] == "nothing_to_do" and line["stage"] == stage and line["exit_code"] == 3
        assert "first" in line["message"]


def test_errors_keep_their_exit_code_and_say_so_in_json(tmp_path):
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://a.example/"])
    crawl_json(tmp_path / "data", "inject", seeds)
    code, line = crawl_json(tmp_path / "data", "fetch", "20990101T000000000000Z-nope00")
    assert code == 2 and line["status"] == "user_error" and "does not exist" in line["message"]
    code, line = crawl_json(tmp_path / "data", "fetch", "--partition", "0")
    assert code == 2 and "need a segment id" in line["message"]
    code, line = crawl_json(tmp_path / "empty", "generate")
    assert code == 2 and line["status"] == "user_error"


def test_without_json_output_is_unchanged(tmp_path):
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://a.example/"])
    result = runner.invoke(app, ["--data", str(tmp_path / "data"), "inject", seeds])
    assert result.exit_code == 0 and result.stdout.startswith("injected: 1 new")
    result = runner.invoke(app, ["--data", str(tmp_path / "data"), "update"])
    assert result.exit_code == 3 and "{" not in result.output


def test_generate_names_segment_and_partitions(tmp_path):
    seeds = write_seeds(tmp_path / "seeds.txt", [f"http://h{i}.example/" for i in range(6)])
    config = tmp_path / "crawl.toml"
    config.write_text("[db]\nbuckets = 4\n")
    runner.invoke(app, ["--data", str(tmp_path / "data"), "inject", seeds])
    result = runner.invoke(app, ["--config", str(config), "--data", str(tmp_path / "data"), "generate", "--json"])
    code, line = result.exit_code, json_line(result.stdout)
    assert code == 0, result.output
    store = Store(tmp_path / "data")
    assert line["segment"] == store.segments()[0] and segment_state(store, line["segment"]) == "generated"
    assert (line["urls"], line["hosts"]) == (6, 6)
    assert line["partitions"] and line["partitions"] == sorted(set(line["partitions"]))
    listed = sorted(int(p.name[5:10]) for p in (tmp_path / "data/segments" / line["segment"] / "fetchlist").iterdir())
    assert line["partitions"] == listed
    code, line = crawl_json(tmp_path / "data", "generate")  # every URL leased: none due
    assert code == 3 and line["status"] == "nothing_to_do"


# --- against the test web, as a scheduler runs it: subprocesses, one task per partition ----
def run_crawl(data, config, *args) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "cycles", "--data", str(data), "--config", str(config), *args,
                           "--json"], cwd=REPO, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json_line(done.stdout)


@pytest.mark.web
def test_a_cycle_task_by_task_through_json(tmp_path):
    with TestWeb(hosts=4, pages=3, page_bytes=2000, special=False, max_seconds=150) as web:
        data, config = tmp_path / "data", write_web_config(tmp_path / "crawl.toml", web)
        seeds = write_seeds(tmp_path / "seeds.txt", web.seeds())
        assert run_crawl(data, config, "inject", seeds)[0] == 0
        code, generated = run_crawl(data, config, "generate")
        assert code == 0 and generated["urls"] == 4 and len(generated["partitions"]) >= 2
        segment = generated["segment"]
        first, *rest = generated["partitions"]
        code, part = run_crawl(data, config, "fetch", segment, "--partition", str(first))
        assert code == 0 and part["segment"] == segment and part["partition"] == first and not part["fetched"]
        code, early = run_crawl(data, config, "fetch", segment, "--finish")
        assert code == 2 and early["status"] == "user_error" and "not finished" in early["message"]
        pages = part["pages"]
        for partition in rest:
            code, part = run_crawl(data, config, "fetch", segment, "--partition", str(partition))
            assert code == 0, part
            pages += part["pages"]
        requests_before = len(web.requests())
        code, again = run_crawl(data, config, "fetch", segment, "--partition", str(first))  # a retried task
        assert code == 0 and again["requests"] > 0  # the finished partition's counters, not a new fetch
        code, finished = run_crawl(data, config, "fetch", segment, "--finish")
        assert code == 0 and finished["fetched"] and finished["pages"] == pages == 4
        assert len(web.requests()) == requests_before  # finishing fetches nothing
        assert segment_state(Store(data), segment) == "fetched"
        code, updated = run_crawl(data, config, "update", segment)
        assert code == 0 and updated["segment"] == segment and updated["results"] == 4 and updated["new_urls"] > 0
        code, cycled = run_crawl(data, config, "cycle", "--cycles", "1")
        assert code == 0 and len(cycled["segments"]) == 1 and cycled["segments"][0] > segment
        code, status = run_crawl(data, config, "status")
        assert code == 0 and status["by_status"]["fetched"] > 4
    assert set(web.seeds()) <= web.requested_urls()
