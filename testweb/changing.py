"""A host whose pages change at known rates of virtual time, for freshness measurements.

``changing.web.test`` has ``/`` (which never changes) linking ``/c/{k}.html`` for
``k < PAGES``. Page ``k`` changes every ``PERIODS_S[k % 5]`` seconds of virtual time (an
hour, four hours, a day, a week, never); its content version at virtual time ``t`` is
``floor((t + phase_k) / period_k)``, with a seed-chosen ``0 <= phase_k < period_k`` so pages
of one period do not all change at once. Version ``v`` began at ``v * period_k - phase_k``:
that is its Last-Modified, and the ETag is a digest of the version, so a conditional request
gets 304 exactly while the version is unchanged.

How a page changes (:meth:`ChangingHost.change_kind`): pages ``0 <= k < 10`` get a whole new
text with each version (``"content"``); pages ``k >= 10`` keep their text and only their
"Updated" line moves on (``"timestamp"``: the new version is a near-duplicate of the old);
pages with no period are ``"never"``.

The time is the web's :class:`~testweb.web.VirtualClock` (see the :mod:`testweb.web` doc
for how a test moves it); this host's ``Date`` header shows it too.
"""

from __future__ import annotations

import math

from testweb.host import HostProfile
from testweb.model import DOMAIN, Page, Robots, mix
from testweb.respond import http_date, render

PAGES = 15
"""Pages ``/c/0.html`` .. ``/c/14.html``."""

PERIODS_S = (3600, 4 * 3600, 86400, 7 * 86400, None)
"""Change period of page ``k`` is ``PERIODS_S[k % 5]`` (None: never changes)."""

TIMESTAMP_FROM = 10
"""Pages from this number on change only their "Updated" line."""

TEXT_BYTES = 4000
"""Size of a changing page."""


def changing_hosts(web, prefix: str) -> list[HostProfile]:
    return [ChangingHost(web, f"changing.{DOMAIN}", f"{prefix}1")]


class ChangingHost(HostProfile):
    kind = "changing"

    def __init__(self, web, name: str, ip: str):
        super().__init__(web, name, ip)
        self.robots = Robots(groups={"*": []})

    def targets(self) -> list[str]:
        return ["/"] + [f"/c/{k}.html" for k in range(PAGES)]

    @staticmethod
    def _number(target: str) -> int | None:
        if target.startswith("/c/") and target.endswith(".html"):
            num = target[3:-5]
            if num.isdigit() and (num == "0" or num[0] != "0") and int(num) < PAGES:
                return int(num)
        return None

    def _schedule(self, target: str) -> tuple[int, int] | None:
        """(period, phase) of a changing page; None for pages that never change."""
        k = self._number(target)
        if k is None or PERIODS_S[k % len(PERIODS_S)] is None:
            return None
        period = PERIODS_S[k % len(PERIODS_S)]
        return period, mix(self.web.seed, k, 5) % period

    # The oracle -------------------------------------------------------------------------
    def change_period(self, target: str) -> float | None:
        schedule = self._schedule(target)
        return schedule[0] if schedule else None

    def version_at(self, target: str, t: float) -> int:
        schedule = self._schedule(target)
        if schedule is None:
            return 0
        period, phase = schedule
        return math.floor((t + phase) / period)

    def version_start(self, target: str, version: int) -> float | None:
        """Virtual time at which ``version`` of ``target`` began (None: never changes)."""
        schedule = self._schedule(target)
        if schedule is None:
            return None
        period, phase = schedule
        return version * period - phase

    def change_kind(self, target: str) -> str:
        k = self._number(target)
        if k is None or self._schedule(target) is None:
            return "never"
        return "timestamp" if k >= TIMESTAMP_FROM else "content"

    # Answers ------------------------------------------------------------------------------
    def page(self, target: str) -> Page | None:
        if target == "/":
            return Page(title=f"{self.name}: home",
                        links=[self.link(t, text=f"Page {t[3:-5]}") for t in self.targets()[1:]],
                        text_bytes=1500, key=mix(self.web.seed, 1 << 41))
        k = self._number(target)
        if k is None:
            return None
        version = self.version_at(target, self.web.clock.now())
        kind = self.change_kind(target)
        links = [self.link("/", text="Home"), self.link(f"/c/{(k + 1) % PAGES}.html", text="Next")]
        period = self.change_period(target)
        every = f"every {period // 3600} h" if period else "never"
        page = Page(title=f"{self.name}: page {k} (changes {every})", links=links,
                    text_bytes=TEXT_BYTES, version=version,
                    key=mix(k, version, 6) if kind == "content" else mix(k, 6))
        if kind != "never":
            updated = http_date(self.version_start(target, version))
            body = render(self, page)
            # The "Updated" line goes right under the heading.
            page.body = body.replace(b"</h1>\n", f'</h1>\n<p class="updated">Updated {updated}'
                                     "</p>\n".encode(), 1)
        return page

    def last_modified(self, target: str, version: int) -> int:
        start = self.version_start(target, version)
        return super().last_modified(target, version) if start is None else int(start)

    def respond(self, page, target, headers):
        response = super().respond(page, target, headers)
        response.date = http_date(self.web.clock.now())
        return response
