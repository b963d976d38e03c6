"""``crawl pages``: the pages are delivered before the cursor moves, so no failure loses any.

The feed batches are written with the library (the feed reader only sees ``pages/*.parquet``).
The failures run the command as a subprocess, as a consumer's script would run it (the
rest in-process: a subprocess costs seconds on a busy machine).
"""

from __future__ import annotations

import datetime as dt
import io
import os
import resource
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from cycles.tables import schema
from cycles.commands.cli import app
from cycles.config import Config
from cycles.commands.inject import inject
from cycles.errors import CrawlError
from cycles.storage.store import Store, new_id

ROOT = Path(__file__).resolve().parent.parent


def read_cursor(store: Store, consumer: str) -> tuple[str | None, bool]:
    """(last batch committed, registered), read from the cursor file itself."""
    path = store.path("pages", "_consumers", f"{consumer}.json")
    return (store.read_json(path).get("last"), True) if path.exists() else (None, False)


def publish(store: Store, pages: int, text_bytes: int = 200) -> str:
    """Write one feed batch of ``pages`` pages (random, incompressible texts); returns its name."""
    segment = new_id()
    rows = [{"url": f"http://127.0.0.1/{segment}/{i}", "host": "127.0.0.1",
             "fetched_at": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), "status": "new", "http_status": 200,
             "content_hash": f"{i:032x}", "minhash": i, "title": f"page {i}",
             "text": os.urandom(text_bytes).hex(), "warc_file": f"segments/{segment}/warc/part-00000.warc.gz",
             "warc_offset": 0, "warc_length": 1, "segment": segment} for i in range(pages)]
    store.write_table(store.path("pages", f"{segment}.parquet"), pa.Table.from_pylist(rows, schema=schema.PAGES),
                      schema.PAGES)
    return f"{segment}.parquet"


@pytest.fixture
def feed(tmp_path):
    store = Store(tmp_path / "data")
    (tmp_path / "seeds.txt").write_text("http://127.0.0.1/\n")
    inject(store, Config(), tmp_path / "seeds.txt")  # a crawl DB: crawl pages checks --data holds a crawl
    names = [publish(store, 3), publish(store, 4)]
    return store, names


def crawl_pages(store: Store, *args: str, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "cycles", "--data", store.uri, "pages", *args],
                          capture_output=True, cwd=cwd, env=env, timeout=60, **kwargs)


def invoke_pages(store: Store, *args: str):
    """The same command in-process (exit_code, stdout, stderr)."""
    return CliRunner().invoke(app, ["--data", store.uri, "pages", *args])


def one_error_line(result) -> str:
    stderr = result.stderr if isinstance(result.stderr, str) else result.stderr.decode()
    assert "Traceback" not in stderr and len(stderr.splitlines()) == 1, stderr
    return stderr


@pytest.mark.web
def test_a_missing_out_folder_loses_no_pages(feed, tmp_path):
    store, names = feed
    failed = crawl_pages(store, "--consumer", "idx", "--out", str(tmp_path / "nope" / "b.parquet"), cwd=tmp_path)
    assert failed.returncode == 2 and "does not exist" in one_error_line(failed)
    assert read_cursor(store, "idx") == (None, False)  # not moved (not even registered)

    out = tmp_path / "b.parquet"
    done = crawl_pages(store, "--consumer", "idx", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert pq.read_table(out).num_rows == 7  # every page of both batches
    assert read_cursor(store, "idx") == (names[-1], True)

    again = invoke_pages(store, "--consumer", "idx", "--out", str(out))
    assert again.exit_code == 3 and "no new pages" in again.stderr
    assert pq.read_table(out).num_rows == 0  # the file holds exactly this read


def test_without_out_the_cursor_does_not_move(feed, tmp_path):
    store, _ = feed
    refused = invoke_pages(store, "--consumer", "idx")
    assert refused.exit_code == 2 and "needs --out" in one_error_line(refused)
    peek = invoke_pages(store, "--consumer", "idx", "--peek")
    assert peek.exit_code == 0 and "7 pages in 2 batches" in peek.stdout
    assert read_cursor(store, "idx") == (None, False)


@pytest.mark.web
def test_a_full_disk_keeps_the_cursor_and_the_old_file(feed, tmp_path):
    store, names = feed
    publish(store, 10, text_bytes=20_000)  # ~400 KB of text: over the limit below
    out = tmp_path / "b.parquet"
    out.write_bytes(b"the previous delivery")
    limit = 64 * 1024  # RLIMIT_FSIZE: a write past it fails with EFBIG, as a full disk fails with ENOSPC

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    failed = crawl_pages(store, "--consumer", "idx", "--out", str(out), cwd=tmp_path, preexec_fn=small_files)
    assert failed.returncode == 2 and "File too large" in one_error_line(failed)
    assert out.read_bytes() == b"the previous delivery"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []
    assert read_cursor(store, "idx") == (None, False)
    done = invoke_pages(store, "--consumer", "idx", "--out", str(out))
    assert done.exit_code == 0 and pq.read_table(out).num_rows == 17


@pytest.mark.web
def test_out_dash_streams_parquet_to_stdout(feed, tmp_path):
    store, names = feed
    done = crawl_pages(store, "--consumer", "idx", "--out", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    table = pq.read_table(io.BytesIO(done.stdout))
    assert table.num_rows == 7 and table.schema.names == schema.PAGES.names
    assert "7 pages in 2 batches" in done.stderr.decode()
    assert read_cursor(store, "idx") == (names[-1], True)


@pytest.mark.web
def test_a_second_reader_of_one_consumer_is_refused(feed, tmp_path):
    from cycles.tables.pages import consumer_lock

    store, _ = feed
    out = tmp_path / "b.parquet"
    with consumer_lock(store, "idx"):  # as a first reader still writing its file holds it
        second = crawl_pages(store, "--consumer", "idx", "--out", str(out), cwd=tmp_path)
        other = invoke_pages(store, "--consumer", "other", "--out", str(out))
    assert second.returncode == 2 and "being read by another process" in one_error_line(second)
    assert other.exit_code == 0, other.stderr  # another consumer is not held up
    assert read_cursor(store, "idx") == (None, False)


def test_a_cursor_moved_meanwhile_is_not_overwritten(feed, tmp_path, monkeypatch):
    """Compare-and-swap: a reader that skipped the lock moved the cursor while we wrote."""
    store, names = feed
    import cycles.tables.pages as pages

    write = pages.write_pages_file

    def racing_write(store_, paths, out):
        store_.write_json(store_.path("pages", "_consumers", "idx.json"), {"last": names[0]})
        return write(store_, paths, out)

    monkeypatch.setattr(pages, "write_pages_file", racing_write)
    with pytest.raises(CrawlError, match="moved from start to"):
        pages.deliver_feed(store, "idx", str(tmp_path / "b.parquet"))
    assert read_cursor(store, "idx") == (names[0], True)


def test_a_folder_without_a_crawl_db_is_an_error(tmp_path):
    result = invoke_pages(Store(tmp_path / "elsewhere"), "--consumer", "idx", "--out", str(tmp_path / "b.parquet"))
    assert result.exit_code == 2 and "no crawl DB" in one_error_line(result)
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "b.parquet").exists()
