"""Operators see progress: on a terminal, a line redrawn about once a second from the
counters the workers publish; nothing is drawn when stderr is not a terminal."""

from __future__ import annotations

import io
import json

import pytest

from cycles.fetch.fetch import Progress, fetch_segment, progress_line
from cycles.storage.store import Store
from testweb.harness import TestWeb
from tests.support.fetching import fast_config, make_segment

pytestmark = pytest.mark.web


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_sums_the_partitions(tmp_path):
    folder = tmp_path / "progress"
    folder.mkdir()
    for part, (ok, errors, active, waiting) in enumerate([(10, 1, 2, 3), (5, 0, 1, 0)]):
        (folder / f"part-{part:05d}.json").write_text(json.dumps({
            "partition": part, "hosts_active": active, "hosts_waiting": waiting,
            "counters": {"fetch/outcome/ok": ok, "fetch/outcome/network_error": errors,
                         "fetch/outcome/deferred": 4, "fetch/bytes": 2_000_000}}))
    (folder / "part-00002.json").write_text("{half a fi")  # being replaced: skipped
    line = progress_line(folder, "seg", 3, elapsed_s=2.0)
    assert line == ("fetch seg: 16 pages (8.0/s), 4.0 MB, 1 errors, 8 deferred, "
                    "hosts 3 active / 3 waiting, 2/3 partitions")


def test_no_progress_display_off_a_terminal(tmp_path):
    stream = io.StringIO()
    progress = Progress(tmp_path, "seg", 1, 0.1, stream=stream)
    assert not progress.enabled()
    progress.start()
    progress.stop()
    assert stream.getvalue() == ""


def test_a_fetch_on_a_terminal_shows_live_progress(tmp_path, monkeypatch):
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stderr", terminal)
    with TestWeb(hosts=3, pages=3, page_bytes=2000, special=False, max_seconds=60) as web:
        store = Store(tmp_path / "data")
        config = fast_config(web, processes=2, progress_s=0.3)
        segment = make_segment(store, [web.url(f"h{i}", f"/p/{k}.html") for i in range(3) for k in range(3)],
                               partitions=2)
        fetch_segment(store, config, segment)
    frames = [f for f in terminal.getvalue().split("\r\x1b[2K") if f]
    assert len(frames) >= 3, frames  # ~3 s of fetching, redrawn every 0.3 s
    assert frames[-1].startswith(f"fetch {segment}: 9 pages") and frames[-1].endswith("\n")
    assert any("active" in f for f in frames)
