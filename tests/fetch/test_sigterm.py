"""SIGTERM (what Airflow, systemd and Kubernetes send) to a running ``crawl fetch``: the
pages fetched so far are committed (with a long ``flush_s`` they sat in memory and were
lost), the stage exits 4 saying how to resume, and the resumed fetch does not ask for
them again."""

from __future__ import annotations

import signal
import time

import pytest

from cycles.tables import segment as seg
from cycles.storage.store import Store
from testweb.harness import TestWeb
from tests.support.processes import committed, crawl
from tests.support.fetching import make_segment

HOSTS, PAGES = 20, 8


@pytest.mark.web
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_commits_the_fetched_pages_and_the_fetch_resumes(tmp_path, signum):
    with TestWeb(hosts=HOSTS, pages=PAGES, page_bytes=3000, special=False, max_seconds=120) as web:
        store = Store(tmp_path / "data")
        config = tmp_path / "crawl.toml"
        resolve = ", ".join(f'"{name}" = "{ip}"' for name, ip in web.resolve_map().items())
        # A chunk would be committed only after a minute: without the stop handling
        # everything fetched before the signal is lost.
        config.write_text(f"[fetch]\nprocesses = 2\nflush_s = 60.0\ntimeout_s = 5.0\nconnect_timeout_s = 2.0\n"
                          f"progress_s = 0\nallowed_networks = [\"127.0.0.0/8\"]\nresolve = {{ {resolve} }}\n")
        urls = [web.url(f"h{i}", f"/p/{k}.html") for i in range(HOSTS) for k in range(PAGES)]
        segment = make_segment(store, urls, partitions=2)
        first = crawl(store.root, config, "fetch", segment)
        try:
            deadline = time.monotonic() + 30
            while sum(r["path"].startswith("/p/") for r in web.requests()) < 40:
                assert first.poll() is None and time.monotonic() < deadline, first.communicate()
                time.sleep(0.05)
            first.send_signal(signum)
            signalled_at = time.time()
            out, err = first.communicate(timeout=30)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
        assert first.returncode == 4, err
        err = err.decode()
        assert "Traceback" not in err and f"crawl fetch {segment}" in err and len(err.strip().splitlines()) == 1, err
        before = web.requests()
        answered = {web.url(r["host"].split(".")[0], r["path"]) for r in before
                    if r["path"].startswith("/p/") and r["t_end"] < signalled_at}
        kept = {r["url"] for r in committed(store, segment)}
        assert len(answered) >= 40 and answered <= kept
        assert seg.state(store, segment) == seg.State.FETCHING
        second = crawl(store.root, config, "fetch", segment)
        out, err = second.communicate(timeout=60)
        assert second.returncode == 0, err
        again = {web.url(r["host"].split(".")[0], r["path"]) for r in web.requests()[len(before):]}
        assert not again & kept  # nothing committed is asked for again
        assert sorted(r["url"] for r in committed(store, segment)) == sorted(urls)
        assert seg.state(store, segment) == seg.State.FETCHED
