"""The crawl command: help with examples, clear errors for bad input, nothing lost."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from cycles.commands.cli import app
from cycles.tables.crawldb import current_bucket_files
from cycles.storage.store import Store

pytestmark = pytest.mark.web

runner = CliRunner()


def crawl(data, *args):
    return runner.invoke(app, ["--data", str(data), *args])


COMMANDS = ["inject", "generate", "fetch", "update", "cycle", "status", "sql", "pages", "rebucket"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(command):
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert "Example: crawl " + command in result.output


def test_console_script_runs():
    result = subprocess.run([sys.executable, "-m", "cycles", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "generate" in result.stdout


def test_junk_seed_lines_are_reported_and_skipped(tmp_path):
    seeds = tmp_path / "seeds.txt"
    seeds.write_bytes(b"# comment\nhttp://good.example/\nnot a url\nftp://files.example/\n"
                      b"http://bad host.example/\n\xff\xfe\x00junk\nhttps://good.example/two\n"
                      b"http://good.example/\n")
    result = crawl(tmp_path / "data", "inject", str(seeds))
    assert result.exit_code == 0, result.output
    assert "injected: 2 new" in result.output
    assert "skipped line 3" in result.output and "skipped line 4 (scheme)" in result.output
    status = crawl(tmp_path / "data", "status", "--json")
    assert '"urls": 2' in status.output


def test_poison_seed_lines_are_counted_skips(tmp_path):
    """Lines that once crashed inject (a port of 5,000 digits: int() raised ValueError) or
    could (NUL bytes, lone brackets, huge hosts, invalid UTF-8) are skipped and counted."""
    seeds = tmp_path / "seeds.txt"
    seeds.write_bytes(b"http://good.example/\n"
                      b"http://a.example:" + b"9" * 5000 + b"/\n"
                      b"http://a.example:" + b"0" * 5000 + b"80/\n"
                      b"http://\x00nul.example/\n"
                      b"\x00\x00\x00\n"
                      b"http://[::1/\n"
                      b"http://" + b"9" * 5000 + b"/\n"
                      b"http://\xed\xa0\x80.example/\n"
                      b"https://good.example/two\x00\n")
    result = crawl(tmp_path / "data", "inject", str(seeds))
    assert result.exit_code == 0, result.output
    assert "injected: 3 new" in result.output
    assert "6 rejected (unparseable: 6)" in result.output
    assert "skipped line 2 (unparseable)" in result.output and "skipped line 8 (unparseable)" in result.output
    status = crawl(tmp_path / "data", "status", "--json")
    assert '"urls": 3' in status.output


def test_missing_seeds_file_is_a_clear_error(tmp_path):
    result = crawl(tmp_path / "data", "inject", str(tmp_path / "nope.txt"))
    assert result.exit_code == 2 and "cannot read seeds file" in result.output


def test_fetch_of_unknown_segment(tmp_path):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://a.example/\n")
    crawl(tmp_path / "data", "inject", str(seeds))
    result = crawl(tmp_path / "data", "fetch", "20990101T000000000000Z-abcdef")
    assert result.exit_code == 2
    assert "does not exist" in result.output and "run `crawl generate` first" in result.output


def test_corrupt_crawl_db_file_is_named_and_nothing_is_lost(tmp_path):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://a.example/\nhttp://b.example/\nhttp://c.example/\n")
    crawl(tmp_path / "data", "inject", str(seeds))
    store = Store(tmp_path / "data")
    manifest, files = current_bucket_files(store)
    victim = next(f for f in files if f.stat().st_size > 0)
    original = victim.read_bytes()
    victim.write_bytes(original[: len(original) // 2])
    result = crawl(tmp_path / "data", "generate")
    assert result.exit_code == 2
    assert victim.name in result.output and "restore" in result.output
    assert store.manifest() == manifest  # nothing was replaced
    victim.write_bytes(original)
    assert crawl(tmp_path / "data", "generate").exit_code == 0


def test_corrupt_current_manifest(tmp_path):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://a.example/\n")
    crawl(tmp_path / "data", "inject", str(seeds))
    (tmp_path / "data" / "crawldb" / "CURRENT").write_text("{ not json")
    result = crawl(tmp_path / "data", "status")
    assert result.exit_code == 2 and "CURRENT is corrupt" in result.output


def test_bad_config_file(tmp_path):
    config = tmp_path / "crawl.toml"
    config.write_text("[fetch]\ndelay = 3\n")
    result = runner.invoke(app, ["--config", str(config), "--data", str(tmp_path), "status"])
    assert result.exit_code == 2 and "unknown setting 'delay'" in result.output


def test_update_before_fetch_is_refused(tmp_path):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://a.example/\n")
    crawl(tmp_path / "data", "inject", str(seeds))
    crawl(tmp_path / "data", "generate")
    result = crawl(tmp_path / "data", "update")
    assert result.exit_code == 3 and "run `crawl fetch` first" in result.output  # nothing fetched: nothing to do
    segment = Store(tmp_path / "data").segments()[0]
    result = crawl(tmp_path / "data", "update", segment)
    assert result.exit_code == 2 and f"run `crawl fetch {segment}` first" in result.output  # named: an error
