"""What a finished transfer comes to: a pure function of what came back, tested without curl.

:func:`classify` takes a :class:`Response` — the HTTP status, libcurl's error, the abort our
callbacks made (cycles/fetch/transfer.py), the address the SSRF guard refused, the TLS
failure's reason (cycles/fetch/tls.py), the Location — and returns an :class:`Outcome`:

- ``outcome``: the fetched row's outcome (``schema.FetchOutcome``), or for a robots.txt or
  sitemap answer :data:`ROBOTS_ANSWER` / :data:`SITEMAP_ANSWER` (those have no row: their
  steps read them, cycles/fetch/robots_state.py and cycles/tables/sitemaps.py);
- ``error`` and ``redirect_to``: the row's columns;
- ``host``: what the host's politeness slot learns (cycles/fetch/politeness.py): the server
  answered (:data:`HOST_ANSWERED`), a network failure counts against the host
  (:data:`HOST_FAILURE`), or a 429/5xx backs it off (:data:`HOST_BACK_OFF`);
- ``follow``: a redirect whose target is written as an outlink and maybe fetched inline;
- ``counters``: the ``fetch/*`` stats the response adds one to.

The worker acts on it (cycles/fetch/results.py). A 2xx page is ``ok`` here; storing it may
still end ``too_large`` (its body does not inflate within the cap) or ``parse_error``.

Which wins, in order: a TLS failure (not a refused address: no handshake was tried), a
refused address, then the robots.txt and sitemap answers, then for a page our aborts (too
large, not HTML), a network error, and the status.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from cycles.fetch.tls import describe as describe_tls
from cycles.fetch.transfer import ABORT_NOT_HTML, ABORT_TOO_LARGE, ABORT_TRUNCATED
from cycles.tables.schema import FetchOutcome as O
from cycles.urls import resolve_location, url_authority

CURLE_OPERATION_TIMEDOUT = 28

ROBOTS_ANSWER = "robots_answer"
"""A robots.txt response to read (cycles/fetch/robots_state.py ``read_response``)."""
SITEMAP_ANSWER = "sitemap_answer"
"""A sitemap response to read (cycles/tables/sitemaps.py)."""

HOST_ANSWERED = "answered"
"""The server answered: its run of failures ends (politeness.answered)."""
HOST_FAILURE = "failure"
"""A network error: counts toward setting the host aside (politeness.count_failure)."""
HOST_BACK_OFF = "back_off"
"""A 429 or 5xx: the server answered and asks us to slow down (politeness.back_off)."""


@dataclass(slots=True, frozen=True)
class Response:
    """What a finished transfer came back with: all :func:`classify` reads."""

    kind: str
    """``page``, ``robots`` or ``sitemap`` (cycles/fetch/transfer.py ``Request.kind``)."""
    url: str
    status: int | None = None
    """The last response's HTTP status; None when none came."""
    error: tuple[int, str] | None = None
    """libcurl's (error number, message) when the transfer failed."""
    abort: str | None = None
    """Why our callbacks stopped the transfer (``transfer.ABORT_*``), if they did."""
    max_bytes: int = 0
    """The body cap the transfer ran under (for the ``too_large`` row's error)."""
    location: str | None = None
    """The Location header, as sent."""
    blocked_address: str | None = None
    """The address the SSRF guard refused to connect to (cycles/fetch/addresses.py)."""
    tls_reason: str | None = None
    """The TLS failure's reason (cycles/fetch/tls.py ``REASONS``), when the handshake failed."""


class Outcome(NamedTuple):
    """What the worker does with a finished transfer (module doc)."""

    outcome: str
    error: str | None = None
    redirect_to: str | None = None
    host: str | None = None
    follow: bool = False
    counters: tuple[str, ...] = ()


def blocked_reason(address: str) -> str:
    """The error of a row whose address the SSRF guard refused."""
    return f"address {address} is not public and not in fetch.allowed_networks (SSRF guard); not connected"


def curl_error(error: tuple[int, str]) -> str:
    """``curl 7: Failed to connect ...``: a libcurl error as rows, logs and WARC records give it."""
    return f"curl {error[0]}: {error[1]}"


def classify(response: Response) -> Outcome:
    """The outcome of a finished transfer (module doc)."""
    if response.tls_reason is not None and response.blocked_address is None:
        message = curl_error(response.error) if response.error is not None else ""
        return Outcome(O.TLS_FAILED, "TLS " + describe_tls(response.tls_reason, message))
    if response.error is not None and response.blocked_address is not None:
        # The SSRF guard refused the address (no packet sent): not a host failure.
        return Outcome(O.BLOCKED, blocked_reason(response.blocked_address), counters=("fetch/blocked_address",))
    if response.kind == "robots":
        return Outcome(ROBOTS_ANSWER)
    if response.kind == "sitemap":
        return Outcome(SITEMAP_ANSWER, host=_sitemap_host(response))
    return _page(response)


def _sitemap_host(response: Response) -> str | None:
    """A sitemap's failures count against the host as a page's do; a body we cut at the
    cap ourselves (``truncated``) is an answer, its start read."""
    if response.error is not None and response.abort != ABORT_TRUNCATED:
        return HOST_FAILURE
    if response.status is None:
        return None
    return HOST_BACK_OFF if _slow_down(response.status) else HOST_ANSWERED


def _slow_down(status: int) -> bool:
    """429 Too Many Requests or a 5xx: the server asks us to slow down (RFC 6585 §4, RFC 9110 §15.6)."""
    return status == 429 or status >= 500


def _page(response: Response) -> Outcome:
    status = response.status
    seen = (f"fetch/status/{status}",) if status is not None else ()
    if response.abort == ABORT_TOO_LARGE:
        return Outcome(O.TOO_LARGE, f"body over {response.max_bytes} bytes; aborted", counters=seen)
    if response.abort == ABORT_NOT_HTML:
        return Outcome(O.NOT_HTML, "not HTML; body not downloaded", counters=seen)
    if response.error is not None:
        timeout = response.error[0] == CURLE_OPERATION_TIMEDOUT
        return Outcome(O.NETWORK_ERROR, curl_error(response.error), host=HOST_FAILURE,
                       counters=(*seen, "fetch/timeout" if timeout else "fetch/network_error"))
    if 200 <= status < 300:
        return Outcome(O.OK, host=HOST_ANSWERED, counters=seen)
    if status == 304:
        return Outcome(O.NOT_MODIFIED, host=HOST_ANSWERED, counters=seen)
    if 300 <= status < 400 and response.location:
        return _redirect(response, seen)
    if status in (404, 410):
        return Outcome(O.GONE, host=HOST_ANSWERED, counters=seen)
    if _slow_down(status):
        return Outcome(O.SERVER_ERROR, f"HTTP {status}", host=HOST_BACK_OFF, counters=seen)
    # Other 4xx, and a 3xx without a Location (nothing to follow).
    return Outcome(O.CLIENT_ERROR, f"HTTP {status}", host=HOST_ANSWERED, counters=seen)


def _redirect(response: Response, seen: tuple[str, ...]) -> Outcome:
    """A 3xx with a Location: the target resolved against the URL; a redirect to the URL
    itself can only loop, so it is recorded and nothing is followed."""
    target = resolve_location(response.url, response.location)
    if target.split("#", 1)[0] == response.url:
        return Outcome(O.REDIRECT, "redirect to itself", target, HOST_ANSWERED,
                       counters=(*seen, "fetch/redirect", "fetch/redirect_loop"))
    cross = ("fetch/redirect_cross_host",) if url_authority(target) != url_authority(response.url) else ()
    return Outcome(O.REDIRECT, None, target, HOST_ANSWERED, follow=True, counters=(*seen, "fetch/redirect", *cross))
