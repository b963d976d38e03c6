"""Operating the crawler from cron, Airflow or a terminal (issue 14, items 2 and 3): logs
without terminal debris (no DuckDB progress bar off a terminal, progress as plain log
lines with a total and an ETA), -v/-q, --version, CRAWL_DATA / CRAWL_CONFIG, -s overrides
checked like the file, ``crawl config show``, the placeholder User-Agent warning, the
example crawl.toml, and one JSON line on stdout for every stage given --json."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
import threading
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cycles.tables.segment import segment_state
from cycles.tables import crawldb
from cycles.commands.cli import app
from cycles.config import Config, config_from_dict, load_config
from cycles.fetch import identity
from cycles.fetch.fetch import progress_line
from cycles.logs import setup_logging
from cycles.progress import LiveProgress, StepProgress, duration
from cycles.storage.store import Store
from testweb.harness import TestWeb
from tests.conftest import write_seeds
from tests.support.cli import json_line, write_web_config

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
BAR_SIGNS = ("\r", "\u2595", "\u2588", "\u258f", "elapsed)")
"""What DuckDB's progress bar leaves in output: carriage returns, ▕ █ ▏, '(00:00:00.02 elapsed)'."""


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def crawl(*args, env=None):
    return runner.invoke(app, [*map(str, args)], env=env)


# --- DuckDB's progress bar -------------------------------------------------------------------
@pytest.mark.parametrize("terminal", [False, True])
def test_duckdb_progress_bar_only_on_a_terminal(monkeypatch, terminal):
    monkeypatch.setattr(sys, "stdout", FakeTerminal() if terminal else io.StringIO())
    for con in (crawldb.connect(None, Config()), crawldb.plain_connection(threads=1)):
        assert con.sql("SELECT current_setting('enable_progress_bar')").fetchall() == [(terminal,)]
        con.close()


def test_every_duckdb_connection_goes_through_the_helpers():
    """A bare duckdb.connect() draws DuckDB's progress bar into logs (its default is on)."""
    bare = [f"{path.relative_to(REPO)}:{number}" for path in sorted((REPO / "cycles").rglob("*.py"))
            if path.name != "crawldb.py"
            for number, line in enumerate(path.read_text().splitlines(), 1) if "duckdb.connect(" in line]
    assert bare == [], "use cycles.tables.crawldb.connect or plain_connection: " + ", ".join(bare)


# --- --version, environment, -s, config show -------------------------------------------------
def test_version_from_package_metadata():
    result = crawl("--version")
    assert result.exit_code == 0 and result.stdout == f"crawl {version('crawl')}\n"


def test_environment_variables_choose_store_and_config(tmp_path):
    config = tmp_path / "env.toml"
    config.write_text("[db]\nbuckets = 3\n")
    env = {"CRAWL_DATA": str(tmp_path / "envdata"), "CRAWL_CONFIG": str(config)}
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://a.example/", "http://b.example/"])
    assert crawl("inject", seeds, env=env).exit_code == 0
    assert Store(tmp_path / "envdata").manifest("crawldb").buckets == 3  # the env's store, with the env's config
    shown = json.loads(crawl("config", "show", "--json", env=env).stdout)
    assert shown["data"] == {"value": str(tmp_path / "envdata"), "source": "CRAWL_DATA"}
    assert shown["config"]["db"]["buckets"] == {"value": 3, "source": f"CRAWL_CONFIG={config}"}
    # The options win over the environment.
    shown = json.loads(crawl("--data", tmp_path / "other", "--config", config, "config", "show", "--json", env=env).stdout)
    assert shown["data"]["source"] == "--data" and shown["config"]["db"]["buckets"]["source"] == str(config)


def test_overrides_apply_on_top_of_the_file_and_reach_the_stage(tmp_path):
    config = tmp_path / "crawl.toml"
    config.write_text('[db]\nbuckets = 3\n[fetch]\ndelay_s = 3.0\n')
    args = ["--data", tmp_path / "data", "--config", config, "-s", "db.buckets=5", "-s", "fetch.user_agent=mybot/2.0 (+https://example.org/bot)",
            "-s", 'urls.drop_params=["x", "y"]', "-s", "fetch.html_only=false"]
    shown = json.loads(crawl(*args, "config", "show", "--json").stdout)["config"]
    assert shown["db"]["buckets"] == {"value": 5, "source": "-s"}
    assert shown["fetch"]["delay_s"] == {"value": 3.0, "source": str(config)}
    assert shown["fetch"]["user_agent"]["value"] == "mybot/2.0 (+https://example.org/bot)"
    assert shown["urls"]["drop_params"]["value"] == ["x", "y"] and shown["fetch"]["html_only"]["value"] is False
    assert shown["generate"]["top_n"] == {"value": 50_000, "source": "default"}
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://a.example/"])
    assert crawl(*args, "inject", seeds).exit_code == 0
    assert Store(tmp_path / "data").manifest("crawldb").buckets == 5


@pytest.mark.parametrize("override, says", [
    ("generate.top_n=abc", "-s generate.top_n=abc: generate.top_n = 'abc' is not allowed: expected an integer"),
    ("generate.top_n=0", "generate.top_n = 0 is not allowed"),
    ("fetch.delay=2", "fetch: unknown setting 'delay'"),
    ("fetcher.delay_s=2", "unknown config section [fetcher]"),
    ("fetch.delay_s", "expected section.key=value"),
    ("update.max_urls_per_host=5", "renamed to update.max_urls_per_host_total"),
    ("update.min_interval_s=999999999", "must not exceed update.max_interval_s"),
])
def test_a_bad_override_is_one_line_and_exit_2(tmp_path, override, says):
    result = crawl("--data", tmp_path / "data", "-s", override, "status")
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    assert says in result.stderr and result.stderr.startswith("crawl: error: ")
    assert not (tmp_path / "data").exists()


def test_config_show_is_a_config_file_of_the_effective_values(tmp_path):
    config = tmp_path / "crawl.toml"
    config.write_text('[fetch]\ndelay_s = 3.0\nresolve = { "a.test" = "127.0.0.2" }\n')
    result = crawl("--data", tmp_path / "d", "--config", config, "-s", "generate.top_n=7", "config", "show")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"# store: {tmp_path / 'd'}  (--data)"
    assert f'delay_s = 3.0  # {config}' in lines and "top_n = 7  # -s" in lines and "buckets = 8  # default" in lines
    assert all(line.endswith(("# default", f"# {config}", "# -s")) for line in lines if " = " in line)
    # Pasted into a file, the output is the same config.
    reloaded = config_from_dict(tomllib.loads(result.stdout))
    expected = load_config(config)
    expected.generate.top_n = 7
    assert reloaded == expected


# --- logging and progress --------------------------------------------------------------------
def test_verbosity_sets_what_reaches_stderr(capsys):
    log = logging.getLogger("cycles.test")
    try:
        for verbosity, shown in ((-1, ["warn"]), (0, ["info", "warn"]), (1, ["debug", "info", "warn"])):
            setup_logging(verbosity)
            log.debug("debug"), log.info("info"), log.warning("warn")
            err = capsys.readouterr().err
            assert [line.rsplit(" ", 1)[-1] for line in err.splitlines()] == shown
        assert err.splitlines() == ["crawl: debug: cycles.test: debug", "crawl: info", "crawl: warning: warn"]
    finally:
        setup_logging(0)


def test_v_and_q_together_are_a_usage_error(tmp_path):
    result = crawl("--data", tmp_path, "-v", "-q", "status")
    assert result.exit_code == 2 and "not both" in result.output


def test_duration_and_step_progress_line():
    assert [duration(s) for s in (0, 42, 185, 7620, 273600)] == ["0s", "42s", "3m05s", "2h07m", "3d04h"]
    progress = StepProgress("update seg", 8, "buckets merged", 1.0, 60.0, stream=io.StringIO())
    assert progress.line(1.0) == "update seg: 0/8 buckets merged (0%), ETA ?"
    progress.advance(2)
    assert progress.line(2.0) == "update seg: 2/8 buckets merged (25%), ETA 6s"


def test_fetch_progress_line_has_total_and_eta(tmp_path):
    (tmp_path / "part-00000.json").write_text(json.dumps({
        "partition": 0, "hosts_active": 1, "hosts_waiting": 2,
        "counters": {"fetch/outcome/ok": 15, "fetch/outcome/deferred": 5, "fetch/bytes": 1_000_000}}))
    line = progress_line(tmp_path, "seg", 2, elapsed_s=10.0, total=100)
    assert line.startswith("fetch seg: 15 pages (1.5/s), 20/100 URLs (20%), ETA 40s, 1.0 MB, ")


def run_until_shown(progress: LiveProgress, shown: threading.Event) -> None:
    with progress:
        assert shown.wait(30), "no progress shown"


def test_off_a_terminal_progress_is_logged_as_plain_lines(capsys):
    calls, shown = [], threading.Event()

    def describe(elapsed_s: float) -> str:
        calls.append(elapsed_s)
        if len(calls) >= 2:
            shown.set()
        return f"stage: {len(calls)}/9 steps"

    setup_logging(0)
    run_until_shown(LiveProgress(describe, redraw_s=5.0, log_interval_s=0.01, stream=io.StringIO()), shown)
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err
    assert err.splitlines()[:2] == ["crawl: stage: 1/9 steps", "crawl: stage: 2/9 steps"]
    setup_logging(-1)  # -q: no progress thread at all
    try:
        assert not LiveProgress(describe, redraw_s=5.0, log_interval_s=0.01, stream=io.StringIO()).enabled()
    finally:
        setup_logging(0)


def test_on_a_terminal_progress_is_redrawn_in_place():
    terminal, shown = FakeTerminal(), threading.Event()
    progress = StepProgress("update seg", 4, "buckets merged", 0.01, 60.0, stream=terminal)
    progress.describe = lambda elapsed_s: (shown.set(), progress.line(elapsed_s))[1]
    with progress:
        progress.advance(4)
        assert shown.wait(30)
    frames = terminal.getvalue().split("\r\x1b[2K")
    assert frames[0] == "" and frames[-1] == "update seg: 4/4 buckets merged (100%), ETA 0s\n"


# --- the placeholder User-Agent --------------------------------------------------------------
def test_loopback_hosts_are_told_by_name_and_config_alone():
    resolve = {"h0.web.test": "127.0.0.5", "lan.test": "10.0.0.7"}
    for host in ("localhost", "a.localhost", "LOCALHOST.", "127.0.0.1", "127.9.9.9", "[::1]", "h0.web.test"):
        assert identity.is_loopback_host(host, resolve), host
    for host in ("example.com", "lan.test", "10.0.0.1", "[2001:db8::1]", "localhost.example.com"):
        assert not identity.is_loopback_host(host, resolve), host


def test_placeholder_agent_warning_decision():
    config = Config()
    config.fetch.resolve = {"h0.web.test": "127.0.0.5"}
    assert identity.placeholder_agent_warning(config, ["h0.web.test", "localhost"]) is None
    message = identity.placeholder_agent_warning(config, ["h0.web.test", "example.com", "example.org"])
    assert "example.com, example.org" in message and "fetch.user_agent" in message and "\n" not in message
    config.fetch.user_agent = "mybot/1.0 (+https://example.org/bot)"
    assert identity.placeholder_agent_warning(config, ["example.com"]) is None


def test_placeholder_agent_warning_is_logged_once_a_run(tmp_path, monkeypatch, caplog):
    from tests.support.fetching import make_segment

    monkeypatch.setattr(identity, "_warned", False)
    store = Store(tmp_path / "data")
    segments = [make_segment(store, ["http://example.com/", "http://h0.web.test/"]) for _ in range(2)]
    with caplog.at_level(logging.WARNING, logger="cycles"):
        for segment in segments:  # crawl cycle fetches one segment after another
            identity.warn_if_placeholder_agent(store, Config(), segment)
    assert [r.getMessage().count("placeholder") for r in caplog.records] == [1]


# --- the example config -----------------------------------------------------------------------
def test_example_crawl_toml_lists_every_setting_at_its_default():
    example = REPO / "crawl.toml"
    values = tomllib.loads(example.read_text())
    defaults = Config().to_dict()
    missing = [f"{section}.{key}" for section, keys in defaults.items() for key in keys
               if key not in values.get(section, {})]
    assert missing == [], f"crawl.toml lacks {missing}; run python scripts/regenerate.py config"
    assert load_config(example) == Config(), "crawl.toml is not the defaults; run python scripts/regenerate.py config"


# --- --json on every stage, without a network ----------------------------------------------
def test_json_lines_of_abandon_rebucket_recover_pages(tmp_path):
    data = tmp_path / "data"
    seeds = write_seeds(tmp_path / "seeds.txt", [f"http://h{i}.example/" for i in range(4)])
    assert crawl("--data", data, "inject", seeds).exit_code == 0

    def json_of(*args, code=0):
        result = crawl("--data", data, *args, "--json")
        assert result.exit_code == code, result.output
        return json_line(result.stdout)

    segment = json_of("generate")["segment"]
    line = json_of("abandon", segment)
    assert (line["status"], line["stage"], line["segment"]) == ("done", "abandon", segment)
    assert segment_state(Store(data), segment) == "abandoned"
    line = json_of("rebucket", "--buckets", "3")
    assert (line["stage"], line["changed"], line["buckets"], line["rows"]) == ("rebucket", True, 3, 4)
    line = json_of("rebucket", "--buckets", "3")  # the same count: not a failure
    assert line["status"] == "done" and line["changed"] is False and "nothing changed" in line["reason"]
    line = json_of("recover")
    assert line["stage"] == "recover" and line["tables"]["crawldb"]["action"] == "kept"
    line = json_of("recover", "--dedupe")
    assert line["dropped"] == 0
    line = json_of("pages", "--consumer", "c", "--out", tmp_path / "p.parquet", code=3)
    assert line["status"] == "nothing_to_do" and line["stage"] == "pages" and line["exit_code"] == 3
    line = json_of("pages", "--consumer", "c", "--out", "-", code=2)
    assert line["status"] == "user_error" and "--out FILE" in line["message"]
    line = json_of("abandon", "20990101T000000000000Z-nope00", code=2)
    assert line["status"] == "user_error" and line["stage"] == "abandon"


def test_cycle_with_nothing_due_is_one_nothing_to_do_line(tmp_path, monkeypatch):
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://127.0.0.10:9/page/0"])
    assert crawl("--data", tmp_path / "data", "inject", seeds).exit_code == 0
    monkeypatch.setenv("CRAWL_CLOCK_OFFSET_S", "-86400")  # the crawl clock a day back: nothing due yet
    result = crawl("--data", tmp_path / "data", "cycle", "--json")
    line = json_line(result.stdout)
    assert result.exit_code == 3 and (line["status"], line["stage"], line["exit_code"]) == ("nothing_to_do", "cycle", 3)
    result = crawl("--data", tmp_path / "data", "status", "--json")
    assert result.exit_code == 0 and json_line(result.stdout)["by_status"]


# --- a crawl as cron runs it: subprocesses, stdout piped -------------------------------------
LONG_QUERIES = '''
"""Test shim (tests/test_cli_ops.py): every DuckDB query counts as long for the progress
bar (progress_bar_time = 0) on a connection whose code did not first set
enable_progress_bar, so a bar left on shows at once instead of after 2 s."""
import duckdb

_connect = duckdb.connect


class _Connection:
    def __init__(self, con):
        self._con, self._armed = con, False

    def _arm(self, query):
        if not self._armed:
            self._armed = True
            if "enable_progress_bar" not in str(query):
                self._con.execute("SET progress_bar_time = 0")

    def execute(self, query, *args, **kwargs):
        self._arm(query)
        return self._con.execute(query, *args, **kwargs)

    def sql(self, query, *args, **kwargs):
        self._arm(query)
        return self._con.sql(query, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._con, name)


duckdb.connect = lambda *args, **kwargs: _Connection(_connect(*args, **kwargs))
'''


@pytest.fixture(scope="module")
def cron_crawl(tmp_path_factory):
    """One small crawl, stage by stage as cron or Airflow runs it: `crawl STAGE --json`
    subprocesses with stdout and stderr piped, every DuckDB query long enough for a progress
    bar, progress lines every 0.05 s; the first partition is fetched as a task of its own,
    then `crawl fetch SEGMENT` fetches the rest. Returns {name: (exit code, stdout, stderr)}."""
    tmp = tmp_path_factory.mktemp("cron")
    (tmp / "shim").mkdir()
    (tmp / "shim" / "sitecustomize.py").write_text(LONG_QUERIES)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp / "shim"), str(REPO)]),
           "CRAWL_DATA": str(tmp / "data")}
    runs = {}

    def run(name: str, *args: str) -> dict:
        # Bytes, not text=True: universal newlines would turn the bar's carriage returns into newlines.
        done = subprocess.run([sys.executable, "-m", "cycles", *args, "--json"], cwd=tmp, env=env,
                              capture_output=True, timeout=180)
        runs[name] = (done.returncode, done.stdout.decode(), done.stderr.decode())
        return json_line(runs[name][1])

    with TestWeb(hosts=4, pages=3, page_bytes=2000, special=False, max_seconds=150) as web:
        env["CRAWL_CONFIG"] = str(write_web_config(tmp / "crawl.toml", web))
        progress = ["-s", "fetch.progress_s=0.05", "-s", "log.progress_interval_s=0.05"]
        run("inject", "inject", write_seeds(tmp / "seeds.txt", web.seeds()))
        generated = run("generate", "generate")
        assert len(generated["partitions"]) >= 2, generated  # 4 hosts: both partitions have some
        run("fetch partition", *progress, "fetch", generated["segment"], "--partition", str(generated["partitions"][0]))
        run("fetch", *progress, "fetch", generated["segment"])
        run("quiet update", "-q", *progress, "update")
        run("pages", "pages", "--consumer", "ops", "--out", str(tmp / "pages.parquet"))
    return runs


@pytest.mark.web
def test_cron_output_has_no_progress_bar_and_one_json_line(cron_crawl):
    for name, (code, out, err) in cron_crawl.items():
        assert "Traceback" not in err, (name, err)
        assert not [sign for sign in BAR_SIGNS if sign in out + err], (name, out, err)
        assert (code, json_line(out)["status"]) == (0, "done"), (name, code, out, err)
    assert json_line(cron_crawl["pages"][1])["pages"] == 4


@pytest.mark.web
def test_cron_logs_progress_lines_with_total_and_eta(cron_crawl):
    segment = json_line(cron_crawl["fetch"][1])["segment"]
    partition = json_line(cron_crawl["fetch partition"][1])["partition"]
    for name, label, total in (("fetch", segment, 4), ("fetch partition", f"{segment} partition {partition}", None)):
        lines = [line for line in cron_crawl[name][2].splitlines() if line.startswith(f"crawl: fetch {label}: ")]
        assert lines, cron_crawl[name][2]
        urls = rf"\d+/{total}" if total else r"\d+/\d+"
        assert all(re.search(rf" pages \([0-9.]+/s\), {urls} URLs \(\d+%\), ETA ", line) for line in lines), lines
    # The task's line counts its own partition only: its URLs, not the segment's.
    assert "/4 URLs" not in cron_crawl["fetch partition"][2]
    assert cron_crawl["quiet update"][2] == ""  # -q: warnings only
    # The placeholder User-Agent is no warning against a test web on loopback.
    assert all("placeholder" not in err for _, _, err in cron_crawl.values())


def test_fetch_progress_of_one_partition_counts_only_its_file(tmp_path):
    for part, ok in ((0, 5), (1, 7)):
        (tmp_path / f"part-{part:05d}.json").write_text(json.dumps({
            "partition": part, "hosts_active": 1, "hosts_waiting": 0, "counters": {"fetch/outcome/ok": ok}}))
    line = progress_line(tmp_path, "seg partition 1", 1, 1.0, total=10, files="part-00001.json")
    assert line.startswith("fetch seg partition 1: 7 pages (7.0/s), 7/10 URLs (70%), ETA 0s, ")
    assert line.endswith(", 1/1 partitions")


def test_a_shared_database_takes_each_callers_limits_and_a_reopened_one_gets_them_again(tmp_path):
    """connect() sets a shared database's memory limit and threads only when they change
    (crawldb.SHARED_LIMITS): a changed limit is set, and a database opened again under the
    same key after its eviction is set too, not taken for the one that was evicted."""
    def limits(con):
        return con.sql("SELECT current_setting('memory_limit'), current_setting('threads')").fetchall()[0]

    first, second = Config(), Config()
    first.db.duckdb_memory_limit, first.db.duckdb_threads = "300MB", 1
    second.db.duckdb_memory_limit, second.db.duckdb_threads = "200MB", 2
    store = Store(tmp_path / "data")
    a = limits(crawldb.connect(store, first))
    b = limits(crawldb.connect(store, second))
    assert a != b and b[1] == 2  # a change is set (the positive control for the skip below)
    assert limits(crawldb.connect(store, second)) == b  # unchanged: kept, not set again
    for k in range(crawldb.SHARED_DATABASES_KEPT):  # evict this store's database
        crawldb.connect(Store(tmp_path / f"other{k}"), Config())
    assert limits(crawldb.connect(store, second)) == b  # reopened: set again, not DuckDB's defaults
