"""cycles/fetch/robots_state.py on its own: which host DB copy is obeyed, revalidated or
asked again, what a 304 or an error does to the kept copies, and the §2.3.1.4 fallback —
judged by the state, the rules put on the slot and the counters (no server)."""

from __future__ import annotations

import datetime as dt
from collections import Counter

from cycles.tables import schema
from cycles.config import FetchConfig
from cycles.fetch.frontier import HostSlot
from cycles.fetch.robots_state import RobotsState, RobotsSteps

WALL = 1_700_000_000.0
BODY = b"User-agent: *\nDisallow: /private/\nCrawl-delay: 3\n"


def _at(seconds_ago: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(WALL - seconds_ago, dt.timezone.utc)


def _state(**values) -> dict:
    state = {name: None for name in schema.HOSTS.names}
    state.update(values)
    return state


def _steps(**fetch) -> RobotsSteps:
    return RobotsSteps(FetchConfig(**fetch), Counter(), clock_offset_s=0.0, floor_s=1.0)


class _Transfer:
    """What read_response reads of a finished robots.txt transfer."""

    def __init__(self, status: int | None, headers: dict | None = None, body: bytes = b""):
        self._status, self._headers, self._body = status, headers or {}, body
        self.abort = None
        self.started_wall = WALL
        self.request = type("R", (), {"url": "http://h.test/robots.txt"})()

    def status_code(self):
        return self._status

    def header(self, name):
        return self._headers.get(name)

    def body(self):
        return self._body


def test_a_young_copy_is_obeyed_and_its_crawl_delay_applied():
    steps, slot = _steps(robots_cache_s=86400), HostSlot("h.test", delay_s=1.0)
    assert steps.load(slot.robots, _state(robots_status=200, robots_body=BODY, robots_fetched_at=_at(60)), WALL)
    assert steps.settle(slot, WALL) is None
    assert slot.robots.rules.kind == "rules" and not slot.robots.rules.allowed("http://h.test/private/x")
    assert slot.delay_s == 3.0 and slot.robots.from_cache and steps.stats["robots/cached"] == 1


def test_an_expired_copy_with_a_validator_is_revalidated_and_a_304_keeps_it():
    steps, slot = _steps(robots_cache_s=3600), HostSlot("h.test")
    state = _state(robots_status=200, robots_body=BODY, robots_fetched_at=_at(7200), robots_etag='"v1"')
    assert not steps.load(slot.robots, state, WALL)
    assert slot.robots.revalidating and steps.validators(slot.robots) == ['If-None-Match: "v1"']
    assert steps.read_response(slot.robots, _Transfer(304, {"etag": '"v2"'}), None)
    assert slot.robots.body == BODY and slot.robots.etag == '"v2"' and not slot.robots.revalidating
    assert slot.robots.fetched_at == _at(0) and slot.robots.good_fetched_at == _at(0)
    assert steps.stats["robots/revalidate"] == 1 and steps.stats["robots/not_modified"] == 1


def test_an_expired_copy_without_a_validator_is_asked_again_unconditionally():
    steps, slot = _steps(robots_cache_s=3600), HostSlot("h.test")
    assert not steps.load(slot.robots, _state(robots_status=200, robots_body=BODY, robots_fetched_at=_at(7200)), WALL)
    assert not slot.robots.revalidating and slot.robots.body is None and steps.validators(slot.robots) == []


def test_a_5xx_disallows_for_now_keeps_the_good_copy_and_starts_the_error_run():
    steps, slot = _steps(), HostSlot("h.test")
    slot.robots.good_status, slot.robots.good_body, slot.robots.good_fetched_at = 200, BODY, _at(100)
    assert steps.read_response(slot.robots, _Transfer(503), None)
    assert slot.robots.errors_since == _at(0) and slot.robots.good_body == BODY
    assert "unreachable" in steps.settle(slot, WALL)
    assert slot.robots.rules.kind == "disallow_all" and slot.robots.url is None


def test_after_the_fallback_time_the_last_good_copy_is_obeyed_else_all_allowed():
    steps = _steps(robots_unreachable_fallback_s=86400)
    robots = RobotsState(status=503, errors_since=_at(2 * 86400), good_status=200, good_body=BODY,
                         good_fetched_at=_at(3 * 86400))
    assert steps.rules(robots, WALL).kind == "rules" and steps.stats["robots/fallback_last_good"] == 1
    robots.good_fetched_at = None
    assert steps.rules(robots, WALL).kind == "allow_all" and steps.stats["robots/fallback_allow"] == 1
    robots.errors_since = _at(3600)  # not long enough yet
    assert steps.rules(robots, WALL).kind == "disallow_all"


def test_a_followed_redirect_is_the_next_request_not_an_answer():
    steps, robots = _steps(), RobotsState(url="http://h.test/robots.txt")
    assert not steps.read_response(robots, _Transfer(301, {"location": "/r/robots.txt"}), None)
    assert robots.url == "http://h.test/r/robots.txt" and robots.status is None and steps.stats["robots/redirect"] == 1
