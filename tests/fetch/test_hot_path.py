"""The fetch worker's per-page shortcuts give what the slower general code gave: the HTTP
header blocks of WARC records (warcio's StatusAndHeaders), the WARC-Date of a request
(strftime)."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from warcio.statusandheaders import StatusAndHeaders

from cycles.fetch.output import http_head, request_head, response_head
from cycles.fetch.transfer import Request, Transfer
from cycles.config import FetchConfig
from cycles.fetch.exchange import started_iso

HEADERS = [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", "3"), ("ETag", '"abc"'),
           ("X-Empty", "")]


def _warcio(statusline, headers, **kw) -> bytes:
    warcio_headers = StatusAndHeaders(statusline, headers, **kw)
    warcio_headers.compute_headers_buffer()
    return warcio_headers.headers_buff


@pytest.mark.parametrize("status_line", ["HTTP/1.1 200 OK", "HTTP/1.1 404", "HTTP/1.0 301 Moved Permanently",
                                         "HTTP/1.1", ""])
@pytest.mark.parametrize("headers", [HEADERS, [], [("Content-Disposition", "attachment; filename=\"résumé.pdf\"")],
                                     [("X-Name", "Grüße")]])
def test_response_head_is_warcios(status_line, headers):
    protocol, _, reason = status_line.partition(" ")
    assert response_head(status_line, headers) == _warcio(reason or protocol, list(headers), protocol=protocol)


@pytest.mark.parametrize("headers", [HEADERS, [("Host", "h1.test"), ("If-None-Match", '"é"')]])
def test_request_head_is_warcios(headers):
    line = "GET /p/3.html?a=1 HTTP/1.1"
    assert request_head(line, headers) == _warcio(line, list(headers), is_http_request=True)
    assert http_head("", "", []) == _warcio("", [])


def test_started_iso_is_the_strftime_format():
    rng = random.Random(7)
    transfer = Transfer(Request("http://h1.test/", "h1.test", "page", {}), FetchConfig(), 100)
    for i in range(2000):
        ts = rng.uniform(0, 4e9) if i % 2 else float(rng.randrange(0, 4 * 10**9))
        transfer.started_wall = ts
        expected = dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert started_iso(transfer) == expected


def test_a_robots_answer_is_parsed_once_and_the_rules_are_the_same(monkeypatch):
    """is_error and then rules read the same answer (robots_state): one parse serves both;
    another answer, or another body object, is parsed anew."""
    from collections import Counter

    from cycles.fetch import robots_state
    from cycles.fetch.robots import RobotsRules
    from cycles.fetch.robots_state import RobotsState, RobotsSteps

    calls = []
    original = RobotsRules.from_response.__func__

    def counting(cls, *args, **kwargs):
        calls.append(args[:2])
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(robots_state.RobotsRules, "from_response", classmethod(counting))
    steps = RobotsSteps(FetchConfig(), Counter(), 0.0, 1.0)
    body = b"User-agent: *\nDisallow: /private\nCrawl-delay: 3\n"
    robots = RobotsState(status=200, body=body)
    assert not steps.is_error(200, body)
    rules = steps.rules(robots, 0.0)
    assert len(calls) == 1
    assert not rules.allowed("http://h1.test/private/x") and rules.allowed("http://h1.test/p")
    assert rules.crawl_delay() == 3
    assert steps.is_error(503, None) and len(calls) == 2
    assert steps.rules(RobotsState(status=200, body=bytes(body)), 0.0).crawl_delay() == 3  # an equal copy
    assert len(calls) == 3


def test_a_pool_worker_keeps_its_memory_mapped():
    """keep_memory_mapped turns transparent huge pages off for the calling process only (a
    child process here: the test's own process keeps them)."""
    import subprocess
    import sys
    from pathlib import Path

    status = Path("/proc/self/status")
    if not status.exists() or "THP_enabled" not in status.read_text():
        pytest.skip("no THP_enabled line in /proc/self/status (not Linux >= 5.0)")
    code = ("from pathlib import Path; from cycles.fetch.worker import keep_memory_mapped; "
            "keep_memory_mapped(); "
            "print([l for l in Path('/proc/self/status').read_text().splitlines() if l.startswith('THP_enabled')][0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2], check=True).stdout
    assert out.split() == ["THP_enabled:", "0"]
    assert "THP_enabled:\t1" in status.read_text()


def test_a_pool_worker_freezes_what_it_loaded():
    """freeze_loaded_objects leaves the objects alive at that point out of full collections
    (gc.freeze) in the calling process only (a child here: the test's own process has none frozen)."""
    import gc
    import subprocess
    import sys
    from pathlib import Path

    code = ("import gc; from cycles.fetch.worker import freeze_loaded_objects; "
            "before = gc.get_freeze_count(); freeze_loaded_objects(); print(before, gc.get_freeze_count())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2], check=True).stdout
    before, after = map(int, out.split())
    assert before == 0 and after > 10_000  # the imported libraries and the loaded objects
    assert gc.get_freeze_count() == 0


def test_pool_workers_start_with_arrows_allocator_keeping_freed_memory(monkeypatch):
    """worker_allocator_env: a process started inside it (as run_pool's workers are) has
    Arrow's mimalloc with purge_delay -1, one started after it the default; a value the user
    set is left alone, and the environment is as before afterwards."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from cycles.fetch.memory import worker_allocator_env

    def child_purge_delay() -> str:
        env = dict(os.environ, MIMALLOC_VERBOSE="1")
        err = subprocess.run([sys.executable, "-c", "import pyarrow as pa; pa.allocate_buffer(1 << 20)"],
                             capture_output=True, text=True, timeout=60, env=env,
                             cwd=Path(__file__).resolve().parents[2], check=True).stderr
        lines = [line for line in err.splitlines() if "option 'purge_delay'" in line]
        if not lines:
            pytest.skip("pyarrow's allocator is not mimalloc, or prints no options")
        return lines[0].split(":")[-1].strip()

    monkeypatch.delenv("MIMALLOC_PURGE_DELAY", raising=False)
    with worker_allocator_env():
        assert child_purge_delay() == "-1"
    assert "MIMALLOC_PURGE_DELAY" not in os.environ
    assert child_purge_delay() != "-1"  # positive control: without it, mimalloc's default
    monkeypatch.setenv("MIMALLOC_PURGE_DELAY", "50")
    with worker_allocator_env():
        assert child_purge_delay() == "50"
    assert os.environ["MIMALLOC_PURGE_DELAY"] == "50"
