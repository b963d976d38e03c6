"""Every command in a bad state ends with one line on stderr and the documented exit code.

Exit codes (cycles/errors.py): 0 done, 1 failed, 2 user error, 3 nothing to do,
4 interrupted. No state may end in a traceback. Commands run in-process (CliRunner, which
keeps stderr apart) except where the real entry point itself is under test.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cycles.tables.segment import write_stage_marker
from cycles.commands.cli import app
from cycles.tables.crawldb import current_bucket_files
from cycles.storage.store import Store
from tests.support.corruption import flip_a_bit

ROOT = Path(__file__).resolve().parent.parent
UNKNOWN_SEGMENT = "20990101T000000000000Z-abcdef"


def crawl(data, *args, config=None):
    return CliRunner().invoke(app, [*(["--config", str(config)] if config else []), "--data", str(data), *args])


def one_line(result, code: int) -> str:
    """The result's only stderr line, after checking the exit code and that no traceback shows."""
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """A store with a crawl DB of 60 loopback URLs (port 9: nothing listens) and one generated
    segment. Tests copy it before breaking it."""
    tmp = tmp_path_factory.mktemp("generated")
    seeds = tmp / "seeds.txt"
    seeds.write_text("".join(f"http://127.0.0.{10 + i % 20}:9/page/{i}\n" for i in range(60)))
    assert crawl(tmp / "data", "inject", str(seeds)).exit_code == 0
    assert crawl(tmp / "data", "generate", "--top-n", "20").exit_code == 0
    return tmp / "data"


@pytest.fixture
def store(generated, tmp_path) -> Store:
    shutil.copytree(generated, tmp_path / "data")
    return Store(tmp_path / "data")


ALL_COMMANDS = [["inject", "{tmp}/seeds.txt"], ["generate"], ["fetch"], ["update"], ["cycle"], ["status"],
                ["sql", "SELECT 1"], ["pages", "--consumer", "c", "--out", "{tmp}/b.parquet"],
                ["rebucket", "--buckets", "2"]]


def args(command: list[str], tmp_path: Path) -> list[str]:
    return [arg.format(tmp=tmp_path) for arg in command]


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=lambda c: c[0])
def test_bad_config(command, tmp_path):
    config = tmp_path / "crawl.toml"
    config.write_text("[fetch]\ndelay = 3\n")
    line = one_line(crawl(tmp_path / "data", *args(command, tmp_path), config=config), 2)
    assert "unknown setting 'delay'" in line
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("command", ALL_COMMANDS[1:], ids=lambda c: c[0])
def test_no_crawl_db(command, tmp_path):
    line = one_line(crawl(tmp_path / "data", *args(command, tmp_path)), 2)
    assert "no crawl DB" in line and "crawl inject" in line
    assert not (tmp_path / "b.parquet").exists()


def test_missing_seeds_file(tmp_path):
    assert "cannot read seeds file" in one_line(crawl(tmp_path / "data", "inject", str(tmp_path / "nope.txt")), 2)


@pytest.mark.parametrize("stage", ["fetch", "update"])
def test_missing_segment(stage, store):
    line = one_line(crawl(store.root, stage, UNKNOWN_SEGMENT), 2)
    assert "does not exist" in line and store.segments()[0] in line  # names the segments there are


@pytest.mark.parametrize("command", [["generate"], ["cycle"], ["sql", "SELECT max(url) FROM crawldb"]],
                         ids=lambda c: c[0])
def test_a_flipped_bit_in_a_bucket_file(command, store):
    manifest, files = current_bucket_files(store)
    flip_a_bit(files[0])
    line = one_line(crawl(store.root, *command), 2)
    assert f"{files[0]} is corrupt" in line and "restore it" in line
    assert store.manifest() == manifest


def test_a_corrupt_fetch_list(store):
    segment = store.segments()[0]
    victim = store.segment_dir(segment) / "fetchlist" / "part-00000.parquet"
    victim.write_bytes(b"PAR1 not really a fetch list")
    line = one_line(crawl(store.root, "fetch", segment), 2)
    assert str(victim) in line and "restore it" in line


def test_a_corrupt_consumer_cursor(store, tmp_path):
    cursor = store.path("pages", "_consumers", "c.json")
    cursor.parent.mkdir(parents=True)
    cursor.write_text("{ not json")
    line = one_line(crawl(store.root, "pages", "--consumer", "c", "--out", str(tmp_path / "b.parquet")), 2)
    assert "c.json is unreadable" in line


@pytest.mark.parametrize("command", [["status"], ["sql", "SELECT 1"], ["generate"]], ids=lambda c: c[0])
def test_a_corrupt_current(command, store):
    (store.root / "crawldb" / "CURRENT").write_text("{ not json")
    assert "CURRENT is corrupt" in one_line(crawl(store.root, *command), 2)


def test_nothing_to_do_is_exit_3(store):
    # The one segment is generated, not fetched: update has nothing to merge.
    assert "no fetched segment waiting" in one_line(crawl(store.root, "update"), 3)
    # Every URL is due now; after two more generates of 20 each, all 60 are leased.
    for _ in range(2):
        assert crawl(store.root, "generate", "--top-n", "20").exit_code == 0
    assert "no URL is due" in one_line(crawl(store.root, "generate"), 3)
    for segment in store.segments():  # as if fetched (nothing came back)
        write_stage_marker(store, segment, "fetched", {"segment": segment})
    assert "no generated segment waiting" in one_line(crawl(store.root, "fetch"), 3)
    first = store.segments()[0]
    assert crawl(store.root, "update", first).exit_code == 0
    assert "already applied" in one_line(crawl(store.root, "update", first), 3)
    assert "already updated" in one_line(crawl(store.root, "fetch", first), 3)


def test_a_cycle_with_nothing_pending_and_nothing_due_is_exit_3(tmp_path, monkeypatch):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://127.0.0.10:9/page/0\n")
    assert crawl(tmp_path / "data", "inject", str(seeds)).exit_code == 0
    monkeypatch.setenv("CRAWL_CLOCK_OFFSET_S", "-86400")  # the crawl clock a day back: not due yet
    assert "no URL is due" in one_line(crawl(tmp_path / "data", "cycle"), 3)


def test_a_full_disk_is_named(store, monkeypatch, tmp_path):
    def full(self, path, batches, table_schema):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(Store, "write_batches", full)
    manifest = store.manifest()
    seeds = tmp_path / "more.txt"
    seeds.write_text("http://127.0.0.99:9/\n")
    line = one_line(crawl(store.root, "inject", str(seeds)), 1)
    assert "disk full" in line and "No space left on device" in line
    Path(re.search(r"traceback in (\S+)\)", line).group(1)).unlink()
    assert store.manifest() == manifest


def test_an_internal_error_saves_its_traceback(store, monkeypatch):
    import cycles.commands.status

    def broken(store, config):
        raise ValueError("boom")

    monkeypatch.setattr(cycles.commands.status, "crawl_status", broken)
    line = one_line(crawl(store.root, "status"), 1)
    assert "internal error: ValueError: boom" in line
    saved = Path(re.search(r"traceback in (\S+);", line).group(1))
    try:
        assert "Traceback" in saved.read_text() and "boom" in saved.read_text()
    finally:
        saved.unlink()
    debug = CliRunner().invoke(app, ["--debug", "--data", str(store.root), "status"])
    assert debug.exit_code == 1 and "Traceback" in debug.stderr and "in broken" in debug.stderr
    Path(re.search(r"traceback in (\S+);", debug.stderr).group(1)).unlink()


@pytest.mark.parametrize("kind", ["Interrupted", "KeyboardInterrupt"])
def test_interrupted_is_exit_4(kind, store, monkeypatch):
    import cycles.errors
    import cycles.generate.generate

    def stopped(*args, **kwargs):
        if kind == "KeyboardInterrupt":
            raise KeyboardInterrupt
        raise cycles.errors.Interrupted("fetch: stopped by SIGTERM; run `crawl fetch` again to resume")

    monkeypatch.setattr(cycles.generate.generate, "generate", stopped)
    assert "again" in one_line(crawl(store.root, "generate"), 4)


def tree(folder: Path) -> dict[str, str]:
    """Every file and folder under ``folder``, with its content hash and mtime."""
    return {str(p.relative_to(folder)): (hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            + f" {p.stat().st_mtime_ns}" for p in sorted(folder.rglob("*"))}


READERS = [["status"], ["status", "--json"], ["sql", "SELECT count(*), max(url) FROM crawldb"],
           ["pages", "--consumer", "c", "--peek"]]


@pytest.fixture
def backup(store) -> Store:
    """The store as a backup or snapshot holds it: without the stages' DuckDB spill folder."""
    shutil.rmtree(store.root / ".duckdb-tmp")
    return store


def test_status_and_sql_leave_the_store_byte_identical(backup):
    store = backup
    before = tree(store.root)
    for command in READERS:
        result = crawl(store.root, *command)
        assert result.exit_code in (0, 3), (command, result.stderr)
    assert tree(store.root) == before  # no lock, no spill folder, no cursor


def test_status_and_sql_on_a_read_only_mount(backup, tmp_path):
    store = backup
    mount = tmp_path / "ro"
    mount.mkdir()
    try:
        subprocess.run(["mount", "--bind", str(store.root), str(mount)], check=True, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("a read-only bind mount needs root with CAP_SYS_ADMIN")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(mount)], check=True, capture_output=True, timeout=10)
        with pytest.raises(OSError):
            (mount / "probe").write_text("x")
        for command in READERS:
            result = crawl(mount, *command)
            assert result.exit_code in (0, 3), (command, result.stderr)
        assert '"urls": 60' in crawl(mount, "status", "--json").stdout
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True, timeout=10)


@pytest.mark.web
def test_the_real_entry_point_prints_one_line(store, tmp_path):
    """``python -m cycles``, not CliRunner: what a shell sees."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "cycles", *args], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=60)

    empty = run("--data", str(tmp_path / "empty"), "cycle")
    assert empty.returncode == 2 and "Traceback" not in empty.stderr and len(empty.stderr.splitlines()) == 1
    assert "no crawl DB" in empty.stderr
    flip_a_bit(current_bucket_files(store)[1][0])
    corrupt = run("--data", str(store.root), "sql", "SELECT max(url) FROM crawldb")
    assert corrupt.returncode == 2 and "Traceback" not in corrupt.stderr and len(corrupt.stderr.splitlines()) == 1
    assert "is corrupt" in corrupt.stderr


@pytest.mark.web
def test_a_full_disk_in_a_real_process(tmp_path):
    """RLIMIT_FSIZE makes a write past 32 KB fail with EFBIG, as a full disk fails with ENOSPC."""
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(f"http://127.0.0.{1 + i % 50}:9/{os.urandom(100).hex()}\n" for i in range(3000)))
    limit = 32 * 1024

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run([sys.executable, "-m", "cycles", "--data", str(tmp_path / "data"), "inject", str(seeds)],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120, preexec_fn=small_files)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1 and "disk full" in result.stderr and "File too large" in result.stderr
    Path(re.search(r"traceback in (\S+)\)", result.stderr).group(1)).unlink()
    assert Store(tmp_path / "data").manifest() is None  # nothing installed
    assert not [p for p in (tmp_path / "data" / "crawldb").rglob("*") if p.suffix in (".parquet", ".tmp")]


def test_a_long_message_keeps_its_start_and_its_fix():
    """Messages end with the fix: shortening one to MAX_MESSAGE_CHARS drops its middle."""
    from cycles.commands.cli import MAX_MESSAGE_CHARS, one_line

    text = "fetch: /very/deep/store/path " + "detail\n" * 500 + "; give it up with `crawl abandon SEG`"
    line = one_line(text)
    assert len(line) == MAX_MESSAGE_CHARS and "\n" not in line
    assert line.startswith("fetch: /very/deep/store/path") and line.endswith("`crawl abandon SEG`")
