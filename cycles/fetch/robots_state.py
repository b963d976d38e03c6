"""A host's robots.txt state in the fetch worker: load, revalidate, read, fall back, apply.

Each :class:`~cycles.fetch.frontier.HostSlot` holds one :class:`RobotsState`. The rules of
RFC 9309 (what a status means, parsing) are in cycles/fetch/robots.py; this module keeps the
per-host bookkeeping around them, counted in ``robots/*`` stats:

- :meth:`RobotsSteps.load`: the host DB's copy, used while younger than
  ``fetch.robots_cache_s`` (an error answer only ``fetch.robots_error_cache_s``), else
  revalidated with a conditional GET when it is a 2xx with an ETag or Last-Modified;
- :meth:`RobotsSteps.read_response`: a robots.txt response (redirect hop, 304, answer);
- :meth:`RobotsSteps.settle`: the rules, with §2.3.1.4's fallback after
  ``fetch.robots_unreachable_fallback_s`` of errors (last good copy, else allow all), applied
  to the slot (Crawl-delay; disallow-all sets the host aside).

Robots times are on the crawl clock (cycles.clock); request spacing is not (cycles/fetch/politeness.py).
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

from cycles.config import FetchConfig
from cycles.fetch.robots import ALLOW_ALL, DISALLOW_ALL, UNREADABLE, RobotsRules, robots_redirect_ok
from cycles.fetch.transfer import ABORT_TRUNCATED, Transfer, robots_body, validator_headers
from cycles.urls import resolve_location



@dataclass
class RobotsState:
    """One host's robots.txt: the rules in force, the request pending, the copies kept."""

    rules: RobotsRules | None = None
    """The rules once known; None until robots.txt has been fetched or loaded."""
    url: str | None = None
    """The robots.txt URL to request next (None once rules are known)."""
    hops: int = 0
    """Redirects followed for this robots.txt so far."""
    status: int | None = None
    """Latest answer: HTTP status (None: network error), body, and when (crawl clock)."""
    body: bytes | None = None
    fetched_at: Any = None
    from_cache: bool = False
    etag: str | None = None
    """Validators of the 2xx robots.txt in ``body``, for a conditional GET once it expires."""
    last_modified: str | None = None
    revalidating: bool = False
    """status/body hold an expired 2xx copy that the pending robots.txt request asks the
    server about (If-None-Match / If-Modified-Since): a 304 keeps it."""
    good_status: int | None = None
    """Last robots.txt answer that was not an error (2xx or 4xx), kept for RFC 9309 §2.3.1.4's
    fallback when robots.txt stays unreachable; with its body and time."""
    good_body: bytes | None = None
    good_fetched_at: Any = None
    errors_since: Any = None
    """Start (UTC datetime) of the current unbroken run of robots.txt errors, or None."""

    def host_row(self) -> dict:
        """The robots columns of the host's HOSTS row (cycles/tables/schema.py)."""
        return {"robots_status": self.status, "robots_fetched_at": self.fetched_at, "robots_body": self.body,
                "robots_etag": self.etag, "robots_last_modified": self.last_modified,
                "robots_good_status": self.good_status, "robots_good_body": self.good_body,
                "robots_good_fetched_at": self.good_fetched_at, "robots_errors_since": self.errors_since}


def _wall(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc)


class SlotOfHost(Protocol):
    """What :meth:`RobotsSteps.settle` changes on a host's slot: cycles/fetch/frontier.py's
    ``HostSlot``, which imports this module (so this one cannot import it back)."""

    robots: RobotsState
    delay_s: float


class RobotsSteps:
    """The robots.txt steps of one partition's fetch, counting into ``stats``."""

    def __init__(self, fc: FetchConfig, stats: Counter, clock_offset_s: float, floor_s: float):
        self.fc = fc
        self.stats = stats
        self.clock_offset_s = clock_offset_s
        """Crawl clock minus real time (cycles.clock): robots.txt ages are measured on it."""
        self.floor_s = floor_s
        self._last_parse: tuple[int | None, bytes | None, RobotsRules] | None = None
        """(status, body, rules) of the last :meth:`_parsed` call (see there)."""

    # --- loading the host DB's copy ---------------------------------------------------------
    def load(self, robots: RobotsState, state: dict, now_wall: float) -> bool:
        """Take the host DB's robots columns; True when the copy is young enough to obey now
        (then call :meth:`settle`)."""
        robots.good_status = state["robots_good_status"]
        robots.good_body = state["robots_good_body"]
        robots.good_fetched_at = state["robots_good_fetched_at"]
        robots.errors_since = state["robots_errors_since"]
        fetched_at = state["robots_fetched_at"]
        if fetched_at is None:
            return False
        # RFC 9309 §2.4: reuse for at most 24 h; an error result only briefly, so that a
        # host whose robots.txt failed once is not kept out for a day.
        error = self.is_error(state["robots_status"], state["robots_body"])
        max_age = self.fc.robots_error_cache_s if error else self.fc.robots_cache_s
        if now_wall + self.clock_offset_s - fetched_at.timestamp() < max_age:
            _load_copy(robots, state)
            robots.from_cache = True
            self.stats["robots/cached_error" if error else "robots/cached"] += 1
            return True
        if _revalidatable(state):
            # Expired, but the server can tell us it is unchanged (a 304 costs no body).
            _load_copy(robots, state)
            robots.revalidating = True
            self.stats["robots/revalidate"] += 1
        return False

    # --- the request -----------------------------------------------------------------------
    @staticmethod
    def validators(robots: RobotsState) -> list[str]:
        """Conditional headers for a robots.txt request revalidating the expired copy.

        Sent on every redirect hop too: the validators belong to the final URL, and a hop
        that redirects answers 3xx whatever it is sent."""
        if not robots.revalidating:
            return []
        return validator_headers(robots.etag, robots.last_modified)

    # --- the response ----------------------------------------------------------------------
    def read_response(self, robots: RobotsState, transfer: Transfer, error: tuple[int, str] | None) -> bool:
        """Record a robots.txt response; False when it redirected to a hop we follow
        (``robots.url`` is the next request), True when the answer is in (call :meth:`settle`).
        A request the SSRF guard refused is not a robots.txt answer: the caller handles it."""
        status = transfer.status_code()
        self.stats["robots/requests"] += 1
        # ABORT_TRUNCATED: we stopped a robots.txt over the cap ourselves, keeping its start.
        if error is not None and transfer.abort != ABORT_TRUNCATED:
            self.stats["robots/network_error"] += 1
            status = None
        if status == 304 and robots.revalidating:
            self._not_modified(robots, transfer)
            return True
        if status is not None and 300 <= status < 400 and transfer.header("location"):
            target = resolve_location(transfer.request.url, transfer.header("location"))
            robots.hops += 1
            if robots_redirect_ok(transfer.request.url, target, robots.hops, self.fc.max_redirects):
                robots.url = target
                self.stats["robots/redirect"] += 1
                return False
            # RFC 9309 §2.3.1.2 lets a crawler take robots.txt as unavailable (allow all)
            # past five redirects; we fail closed instead (RobotsRules: disallow all for now).
            self.stats["robots/too_many_redirects"] += 1
            body = b""
        elif status is not None and 200 <= status < 300:
            if transfer.abort == ABORT_TRUNCATED:
                self.stats["robots/truncated"] += 1
            # None when it cannot be read (does not inflate): kept as None, which
            # RobotsRules reads as unreadable, so the host DB copy decides the same way.
            body = robots_body(transfer)
        else:
            body = transfer.body()
        self._answer(robots, transfer, status, body)
        return True

    def _answer(self, robots: RobotsState, transfer: Transfer, status: int | None, body: bytes | None) -> None:
        ok = status is not None and 200 <= status < 300
        robots.status = status
        robots.body = body if ok else None
        robots.etag = transfer.header("etag") if ok else None
        robots.last_modified = transfer.header("last-modified") if ok else None
        robots.revalidating = False
        robots.fetched_at = _wall(transfer.started_wall + self.clock_offset_s)
        robots.from_cache = False
        self.stats[f"robots/status/{status if status is not None else 'none'}"] += 1
        if self.is_error(status, robots.body):
            if ok:
                self.stats["robots/unreadable"] += 1
                # No validators: a 304 to them would make the unreadable copy "good" again.
                robots.etag = robots.last_modified = None
            if robots.errors_since is None:
                robots.errors_since = robots.fetched_at
        else:
            robots.errors_since = None
            _keep_as_good(robots)

    def _not_modified(self, robots: RobotsState, transfer: Transfer) -> None:
        """A 304 to the conditional robots.txt GET: the expired copy is current again.

        Its body, status and rules stay; it is as fresh as if just downloaded (a good
        answer, so any run of errors ends). A 304 may carry updated validators (RFC 9110
        §15.4.5); they replace ours."""
        self.stats["robots/not_modified"] += 1
        self.stats["robots/status/304"] += 1
        robots.revalidating = False
        robots.fetched_at = _wall(transfer.started_wall + self.clock_offset_s)
        robots.etag = transfer.header("etag") or robots.etag
        robots.last_modified = transfer.header("last-modified") or robots.last_modified
        robots.from_cache = False
        robots.errors_since = None
        _keep_as_good(robots)

    # --- the rules -------------------------------------------------------------------------
    def is_error(self, status: int | None, body: bytes | None = b"") -> bool:
        """Is this robots.txt answer an error (unreachable: 5xx, 429, network, redirects, or
        a 2xx body we could not read)?"""
        return self._parsed(status, body).kind == DISALLOW_ALL

    def _parsed(self, status: int | None, body: bytes | None) -> RobotsRules:
        """``RobotsRules.from_response`` of an answer, the last one's parse reused: each answer
        was parsed twice, by :meth:`is_error` and then by :meth:`rules` when the host's slot is
        settled (the same status and the very same body object). The rules are a function of
        the answer and the config alone, so the reuse changes nothing but the CPU."""
        last = self._last_parse
        if last is not None and last[0] == status and last[1] is body:
            return last[2]
        rules = RobotsRules.from_response(status, body, self.fc.robots_agent, self.fc.max_robots_bytes)
        self._last_parse = (status, body, rules)
        return rules

    def rules(self, robots: RobotsState, now_crawl: float) -> RobotsRules:
        """Rules from the latest answer, with RFC 9309 §2.3.1.4's way out of a long outage:
        unreachable for fetch.robots_unreachable_fallback_s → the last good copy, else allow all."""
        rules = self._parsed(robots.status, robots.body)
        since = robots.errors_since
        if rules.kind != DISALLOW_ALL or since is None:
            return rules
        if now_crawl - since.timestamp() < self.fc.robots_unreachable_fallback_s:
            return rules
        if robots.good_fetched_at is not None:
            self.stats["robots/fallback_last_good"] += 1
            return RobotsRules.from_response(robots.good_status, robots.good_body,
                                             self.fc.robots_agent, self.fc.max_robots_bytes)
        self.stats["robots/fallback_allow"] += 1
        return RobotsRules(ALLOW_ALL, "unreachable_too_long")

    def settle(self, slot: SlotOfHost, now_wall: float | None = None) -> str | None:
        """Put the rules in force on the slot (a Crawl-delay raises its delay).

        Returns why the host must be set aside (robots.txt unreachable or unreadable, or a
        Crawl-delay over fetch.max_crawl_delay_s), else None."""
        now_wall = time.time() if now_wall is None else now_wall
        rules = self.rules(slot.robots, now_wall + self.clock_offset_s)
        slot.robots.rules = rules
        slot.robots.url = None
        self.stats[f"robots/{rules.kind}"] += 1
        if rules.kind == DISALLOW_ALL:
            if rules.reason == UNREADABLE:
                return ("robots.txt unreadable (not text, or does not inflate): a robots.txt we "
                        "could not read never grants access; disallow all for now")
            return f"robots.txt unreachable ({rules.reason}); RFC 9309 §2.3.1.4: disallow all for now"
        delay = rules.crawl_delay() if rules.kind == "rules" else None
        if delay is not None:
            if delay > self.fc.max_crawl_delay_s:
                self.stats["robots/crawl_delay_too_long"] += 1
                return f"robots.txt Crawl-delay {delay:g}s exceeds fetch.max_crawl_delay_s"
            slot.delay_s = max(slot.delay_s, self.floor_s, delay)
        return None


def _load_copy(robots: RobotsState, state: dict) -> None:
    """The host DB's latest robots.txt answer into the state (rules not applied yet)."""
    robots.status = state["robots_status"]
    robots.body = state["robots_body"]
    robots.fetched_at = state["robots_fetched_at"]
    robots.etag = state["robots_etag"]
    robots.last_modified = state["robots_last_modified"]


def _revalidatable(state: dict) -> bool:
    """Can this stored robots.txt be revalidated: a 2xx body with a validator?"""
    status = state["robots_status"]
    return (status is not None and 200 <= status < 300 and state["robots_body"] is not None
            and bool(state["robots_etag"] or state["robots_last_modified"]))


def _keep_as_good(robots: RobotsState) -> None:
    """The latest answer is good: keep it for the §2.3.1.4 fallback."""
    robots.good_status = robots.status
    robots.good_body = robots.body
    robots.good_fetched_at = robots.fetched_at
