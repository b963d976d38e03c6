"""A host's "not before" survives the end of a fetch: a Retry-After (or back-off) learnt as
one run ended is kept by the next run, whether it reads the host from a segment not yet
updated or from the host DB update wrote (HOSTS.not_before). Judged by the server's clock.

The odd host's ``/status/429`` says Retry-After: 5, its ``/status/503`` Retry-After: 3.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest

from cycles.config import FetchConfig
from cycles.fetch import politeness
from cycles.fetch.fetch import fetch_segment
from cycles.fetch.frontier import SPACING_MARGIN_S, HostSlot
from cycles.tables.hostdb import load_host_state
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.storage.store import Store
from testweb.harness import TestWeb
from cycles.update.update import update_segment
from tests.conftest import write_seeds
from tests.support.fetching import CLOCK_SLACK_S, assert_polite, fast_config, fetch, host_requests, results

ODD = "odd.web.test"


@pytest.fixture(scope="module")
def web():
    with TestWeb(hosts=0, pages=3, page_bytes=2000, special=True, max_seconds=120) as web:
        yield web


def first_after(requests: list[dict], path: str) -> tuple[dict, dict]:
    """The request for ``path`` on the odd host and the odd host's next request."""
    odd = host_requests(requests, "odd")
    at = next(i for i, r in enumerate(odd) if r["path"] == path)
    assert at + 1 < len(odd), [r["path"] for r in odd]
    return odd[at], odd[at + 1]


@pytest.mark.web
def test_a_retry_after_learnt_as_a_fetch_ends_holds_the_next_fetch(web, tmp_path):
    """Two segments back to back, no update between: the second reads the first's hosts/."""
    store = Store(tmp_path / "data")
    config = fast_config(web)
    before = len(web.requests())
    fetch(store, config, [web.url("odd", "/status/429")])
    segment, _ = fetch(store, config, [web.url("odd", "/p/0.html")])
    requests = web.requests()[before:]
    told, next_one = first_after(requests, "/status/429")
    assert next_one["path"] == "/p/0.html"
    assert next_one["t_start"] - told["t_end"] >= 5.0 - CLOCK_SLACK_S
    assert results(store, segment)[web.url("odd", "/p/0.html")]["outcome"] == "ok"
    assert_polite(requests)


@pytest.mark.web
def test_a_retry_after_survives_update_into_the_host_db(web, tmp_path):
    """inject → generate → fetch → update → generate → fetch: the second fetch reads the host
    only from the host DB update merged (HOSTS.not_before, merged as max)."""
    store = Store(tmp_path / "data")
    config = fast_config(web)
    config.urls.include = {ODD: [r"/(status/503|p/1\.html)$"]}
    inject(store, config, write_seeds(tmp_path / "seeds.txt", [web.url("odd", "/status/503")]))
    before = len(web.requests())
    first = generate(store, config).segment
    fetch_segment(store, config, first)
    update_segment(store, config, first)
    state = load_host_state(store, {ODD})[ODD]
    assert state["not_before"] is not None and state["not_before"] >= state["last_request_end"] + dt.timedelta(seconds=3)
    inject(store, config, write_seeds(tmp_path / "more.txt", [web.url("odd", "/p/1.html")]))
    second = generate(store, config).segment
    fetch_segment(store, config, second)
    requests = web.requests()[before:]
    told, next_one = first_after(requests, "/status/503")
    assert next_one["path"] == "/p/1.html"
    assert next_one["t_start"] - told["t_end"] >= 3.0 - CLOCK_SLACK_S
    assert_polite(requests)


@pytest.mark.web
def test_a_host_set_aside_for_a_long_retry_after_stays_aside_in_the_next_fetch(web, tmp_path):
    """Retry-After 5 s over fetch.max_retry_after_s (4 s): set aside, and the next fetch, whose
    URL of the host is due, defers it without asking rather than ask inside the window."""
    store = Store(tmp_path / "data")
    config = fast_config(web, max_retry_after_s=4.0)
    before = len(web.requests())
    first, _ = fetch(store, config, [web.url("odd", "/status/429"), web.url("odd", "/p/2.html")])
    assert results(store, first)[web.url("odd", "/p/2.html")]["outcome"] == "deferred"
    second, result = fetch(store, config, [web.url("odd", "/p/2.html")])
    requests = web.requests()[before:]
    told = host_requests(requests, "odd")[-1]
    assert told["path"] == "/status/429"  # nothing asked after it
    row = results(store, second)[web.url("odd", "/p/2.html")]
    assert row["outcome"] == "deferred" and "not_before" in row["error"]
    assert result.counters["fetch/not_before_set_aside"] == 1


class _Transfer:
    """What politeness.back_off reads of a finished transfer."""

    def __init__(self, retry_after: str | None, ended: float):
        self.ended = ended
        self._headers = {"retry-after": retry_after}

    def header(self, name: str) -> str | None:
        return self._headers.get(name)


def test_a_set_aside_host_keeps_its_window_and_a_huge_retry_after_is_cut():
    """The decision alone: a Retry-After over fetch.max_retry_after_s sets the host aside AND
    sets its next-allowed time (written as not_before); one of 10^15 s is cut to
    fetch.max_not_before_s and still makes a valid timestamp."""
    fc, stats = FetchConfig(max_retry_after_s=60.0, max_not_before_s=86400.0), Counter()
    wall = 1_700_000_000.0
    slot = HostSlot("h.test")
    assert politeness.back_off(slot, _Transfer("120", ended=1000.0), 429, wall, fc, stats)
    assert slot.next_allowed == pytest.approx(1000.0 + 120.0 + SPACING_MARGIN_S)
    huge = HostSlot("huge.test")
    assert politeness.back_off(huge, _Transfer("1" + "0" * 15, ended=1000.0), 503, wall, fc, stats)
    assert huge.next_allowed == pytest.approx(1000.0 + 86400.0 + SPACING_MARGIN_S)
    assert stats["fetch/backoff"] == 2
    assert politeness.not_before_wall(huge, 1000.0, wall, fc) == dt.datetime.fromtimestamp(wall + 86400.0, dt.timezone.utc)
    assert politeness.not_before_wall(HostSlot("never.test"), 1000.0, wall, fc) is None


def test_restored_spacing_honours_not_before_within_the_cap():
    """A stored not_before holds the slot (past last_request_end's spacing); one absurdly far
    (a corrupt row, year 9000) holds it at most fetch.max_not_before_s."""
    from cycles.tables import schema

    fc = FetchConfig(max_not_before_s=86400.0)
    wall = 1_700_000_000.0
    state = {name: None for name in schema.HOSTS.names}
    state.update(last_request_end=dt.datetime.fromtimestamp(wall - 10, dt.timezone.utc),
                 not_before=dt.datetime.fromtimestamp(wall + 30, dt.timezone.utc))
    slot = HostSlot("h.test", delay_s=1.0)
    politeness.restore_spacing(slot, state, 500.0, wall, False, fc)
    assert slot.next_allowed == pytest.approx(530.0)
    state["not_before"] = dt.datetime(9000, 1, 1, tzinfo=dt.timezone.utc)
    far = HostSlot("far.test", delay_s=1.0)
    politeness.restore_spacing(far, state, 500.0, wall, False, fc)
    assert far.next_allowed == pytest.approx(500.0 + 86400.0)
