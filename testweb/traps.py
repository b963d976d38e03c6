"""Crawler traps: hosts with a handful of good pages and an endless space of URLs behind them.

Each trap host has eleven good pages (``/`` and ``/p/0.html`` .. ``/p/9.html``, full-size
articles, :meth:`TrapHost.good_pages`); every one of them links into the trap, so a crawler
cannot avoid discovering it. A polite crawler must keep harvesting the good pages while the
number of trap URLs it requests stays within its per-host budget. Trap pages are small and
carry the same filler text on every page of a host (an empty calendar day, a missing item),
so they are near-duplicates of one another, as on the real web.

- ``trap-calendar``: ``/cal/{year}/{mm}`` links the previous and the next month and every
  day ``/cal/{year}/{mm}/{dd}``; a day links its month and the days either side. Any year
  from 1 on answers, so the calendar has no end.
- ``trap-session``: ``/`` and the good pages link each other cleanly, plus a few links that
  carry a session id. A page requested with a session id (any query, or a ``;jsessionid=``
  path parameter) serves the same article, but every link on it carries a new id derived
  from the URL: ``?sid=`` and ``;jsessionid=`` (a normaliser drops them, turning them back
  into good URLs), ``?session=`` and ``?s=<n>`` (not dropped by the default normaliser:
  the real trap).
- ``trap-repeat``: ``/`` links ``a/`` and ``x/`` (a classic broken relative link). A page at
  a path of alternating ``a`` and ``b`` segments links ``b/`` or ``a/`` relative to itself
  (``/a/`` -> ``/a/b/`` -> ``/a/b/a/`` ...); a page at ``/x/``, ``/x/x/`` ... links ``x/``.
  Every such path answers 200, as a misconfigured server does.
- ``trap-numbers``: ``/item?id=N`` links ``id=N+1`` and its list page; ``/list/page/N``
  links pages ``N-1`` and ``N+1`` and items ``10N`` .. ``10N+9``. Any N answers.
"""

from __future__ import annotations

from testweb.host import HostProfile
from testweb.model import DOMAIN, Link, Page, Robots, digest, mix, str_key

GOOD_PAGES = 10
"""Articles per trap host besides ``/``."""

TRAP_TEXT_BYTES = 1200
"""Filler text of a trap page (the good pages get ``page_bytes``)."""

TRAP_HOSTS = ("trap-calendar", "trap-session", "trap-repeat", "trap-numbers")
"""Short names of the trap hosts, in address order."""


def trap_hosts(web, prefix: str) -> list[HostProfile]:
    classes = (CalendarTrap, SessionTrap, RepeatTrap, NumbersTrap)
    return [cls(web, f"{short}.{DOMAIN}", f"{prefix}{1 + j}")
            for j, (short, cls) in enumerate(zip(TRAP_HOSTS, classes))]


class TrapHost(HostProfile):
    """Good pages on ``/`` and ``/p/{k}.html``; subclasses add :meth:`entries` (links into the
    trap from every good page), :meth:`trap_page` and :meth:`is_trap`."""

    kind = "trap"
    has_traps = True

    def __init__(self, web, name: str, ip: str):
        super().__init__(web, name, ip)
        self.robots = Robots(groups={"*": []})  # nothing disallowed: the crawler must cope
        self._host_key = str_key(name)

    def good_pages(self) -> list[str]:
        return ["/"] + [f"/p/{k}.html" for k in range(GOOD_PAGES)]

    def entries(self, k: int) -> list[Link]:
        """Links into the trap on good page ``k`` (-1 for ``/``)."""
        return []

    def trap_page(self, target: str) -> Page | None:
        return None

    def page(self, target: str) -> Page | None:
        good = self._good(target)
        if good is not None:
            return good
        return self.trap_page(target)

    def _good(self, target: str) -> Page | None:
        if target == "/":
            links = [self.link(f"/p/{k}.html", text=f"Article {k}") for k in range(GOOD_PAGES)]
            return Page(title=f"{self.name}: home", links=links + self.entries(-1),
                        text_bytes=self.web.page_bytes // 2, key=mix(self._host_key, 1 << 40))
        k = _good_number(target)
        if k is None:
            return None
        return self.good_article(k)

    def good_article(self, k: int) -> Page:
        links = [self.link("/", text="Home"),
                 self.link(f"/p/{(k + 1) % GOOD_PAGES}.html", text="Next article")]
        links += self.entries(k)
        return Page(title=f"{self.name}: article {k}", links=links,
                    text_bytes=self.web.page_bytes, key=mix(self._host_key, k))

    def small(self, title: str, links: list[Link]) -> Page:
        """A trap page: short, and the same text as every other trap page of the host."""
        return Page(title=f"{self.name}: {title}", links=links, text_bytes=TRAP_TEXT_BYTES,
                    key=self._host_key)


def _good_number(target: str) -> int | None:
    if target.startswith("/p/") and target.endswith(".html"):
        num = target[3:-5]
        if num.isdigit() and (num == "0" or num[0] != "0") and int(num) < GOOD_PAGES:
            return int(num)
    return None


def _number(text: str, minimum: int = 0) -> int | None:
    """A decimal written without leading zeros, at least ``minimum``; else None."""
    if not text.isdigit() or (len(text) > 1 and text[0] == "0") or len(text) > 30:
        return None
    n = int(text)
    return n if n >= minimum else None


# --- trap-calendar --------------------------------------------------------------------------

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


class CalendarTrap(TrapHost):
    """``/cal/{year}/{mm}`` and ``/cal/{year}/{mm}/{dd}``: every month and day, for ever."""

    START = (2024, 1)

    def entries(self, k: int) -> list[Link]:
        y, m = self.START
        return [self.link(f"/cal/{y}/{m:02d}", text="Events calendar")]

    def is_trap(self, target: str) -> bool:
        return target.startswith("/cal/")

    def trap_page(self, target: str) -> Page | None:
        if not target.startswith("/cal/"):
            return None
        parts = target[5:].split("/")
        if len(parts) not in (2, 3):
            return None
        year = _number(parts[0], 1)
        if year is None or len(parts[1]) != 2 or not parts[1].isdigit():
            return None
        month = int(parts[1])
        if not 1 <= month <= 12:
            return None
        if len(parts) == 2:
            return self._month(year, month)
        if len(parts[2]) != 2 or not parts[2].isdigit():
            return None
        day = int(parts[2])
        if not 1 <= day <= _days_in_month(year, month):
            return None
        return self._day(year, month, day)

    def _month_link(self, year: int, month: int, text: str) -> Link:
        return self.link(f"/cal/{year}/{month:02d}", text=text)

    def _month(self, year: int, month: int) -> Page:
        links = [self.link("/", text="Home")]
        if (year, month) > (1, 1):
            py, pm = (year, month - 1) if month > 1 else (year - 1, 12)
            links.append(self._month_link(py, pm, "Previous month"))
        ny, nm = (year, month + 1) if month < 12 else (year + 1, 1)
        links.append(self._month_link(ny, nm, "Next month"))
        for d in range(1, _days_in_month(year, month) + 1):
            # Path-relative from /cal/2024/01 (no trailing slash): "01/05" is /cal/2024/01/05.
            links.append(self.link(f"/cal/{year}/{month:02d}/{d:02d}", f"{month:02d}/{d:02d}",
                                   text=str(d)))
        return self.small(f"events in {MONTHS[month - 1]} {year}", links)

    def _day(self, year: int, month: int, day: int) -> Page:
        links = [self.link("/", text="Home"), self._month_link(year, month, f"{MONTHS[month - 1]} {year}")]
        if day > 1:
            links.append(self.link(f"/cal/{year}/{month:02d}/{day - 1:02d}", text="Previous day"))
        if day < _days_in_month(year, month):
            links.append(self.link(f"/cal/{year}/{month:02d}/{day + 1:02d}", text="Next day"))
        return self.small(f"events on {day} {MONTHS[month - 1]} {year}", links)


# --- trap-session ---------------------------------------------------------------------------

SESSION_STYLES = ("sid", "jsessionid", "session", "s")
"""How a session id is written, by link: ``?sid=``, ``;jsessionid=``, ``?session=``, ``?s=``."""


class SessionTrap(TrapHost):
    """Good pages are clean; a page requested with a session id links only with new ones."""

    def _session_link(self, target: str, on: str, j: int, text: str) -> Link:
        """A link to ``target`` with a session id derived from the page ``on`` and ``j``."""
        style = SESSION_STYLES[(j + mix(self._host_key, str_key(on))) % len(SESSION_STYLES)]
        seed = self.web.seed
        if style == "sid":
            written = f"{target}?sid={digest(f'{seed}|{on}|{j}')}"
        elif style == "jsessionid":
            token = (digest(f"{seed}|{on}|{j}|a") + digest(f"{seed}|{on}|{j}|b")).upper()
            written = f"{target};jsessionid={token}"
        elif style == "session":
            written = f"{target}?session={digest(f'{seed}|{on}|{j}|s')}"
        else:
            written = f"{target}?s={mix(seed, str_key(on), j) % 1_000_000}"
        return self.link(written, text=text)

    def entries(self, k: int) -> list[Link]:
        on = "/" if k < 0 else f"/p/{k}.html"
        count = len(SESSION_STYLES) if k < 0 else 2
        return [self._session_link(f"/p/{(k + 1 + j) % GOOD_PAGES}.html", on, j, "Continue")
                for j in range(count)]

    def is_trap(self, target: str) -> bool:
        return "?" in target or ";" in target

    def page(self, target: str) -> Page | None:
        if not self.is_trap(target):
            return self._good(target)
        path = target.partition("?")[0]
        path, semi, param = path.partition(";")
        if semi and not param.lower().startswith("jsessionid="):
            return None
        if path != "/" and _good_number(path) is None:
            return None
        # The same page as without the id, but every link carries a new id.
        goods = self.good_pages()
        links = [self._session_link(t, target, j, "Home" if t == "/" else f"Article {t[3:-5]}")
                 for j, t in enumerate(goods)]
        page = self._good(path)
        page.links = links
        return page


# --- trap-repeat ----------------------------------------------------------------------------

class RepeatTrap(TrapHost):
    """Relative links that build ``/a/b/a/b/...`` and ``/x/x/x/...`` for ever."""

    def entries(self, k: int) -> list[Link]:
        if k < 0:
            # Written relative to "/": they resolve to /a/ and /x/.
            return [self.link("/a/", "a/", text="Archive"), self.link("/x/", "x/", text="Extras")]
        # From /p/k.html, a root-relative link (a relative one would land in /p/).
        return [self.link("/a/", text="Archive")]

    @staticmethod
    def _segments(target: str) -> list[str] | None:
        if not target.endswith("/") or "?" in target or len(target) < 3:
            return None
        return target[1:-1].split("/")

    def is_trap(self, target: str) -> bool:
        return target.startswith("/a/") or target.startswith("/x/")

    def trap_page(self, target: str) -> Page | None:
        segs = self._segments(target)
        if segs is None:
            return None
        if segs[0] == "a" and all(s == "ab"[i % 2] for i, s in enumerate(segs)):
            nxt = "b" if segs[-1] == "a" else "a"
        elif all(s == "x" for s in segs):
            nxt = "x"
        else:
            return None
        links = [self.link(target + nxt + "/", nxt + "/", text="More"),
                 self.link("/", text="Home"), self.link("/p/0.html", text="First article")]
        return self.small(f"section {'/'.join(segs)}", links)


# --- trap-numbers ---------------------------------------------------------------------------

class NumbersTrap(TrapHost):
    """``/item?id=N`` and ``/list/page/N``: URLs that differ only in a number, without end."""

    def entries(self, k: int) -> list[Link]:
        return [self.link("/list/page/1", text="All items"),
                self.link(f"/item?id={max(k, 0) * 100}", text="Featured item")]

    def is_trap(self, target: str) -> bool:
        return target.startswith("/item") or target.startswith("/list/")

    def trap_page(self, target: str) -> Page | None:
        path, _, query = target.partition("?")
        if path == "/item" and query.startswith("id="):
            n = _number(query[3:])
            if n is None:
                return None
            links = [self.link(f"/item?id={n + 1}", text="Next item"),
                     self.link(f"/list/page/{n // 10 or 1}", text="Back to the list"),
                     self.link("/", text="Home")]
            return self.small(f"item {n}", links)
        if path.startswith("/list/page/") and not query:
            n = _number(path[11:], 1)
            if n is None:
                return None
            links = [self.link("/", text="Home")]
            if n > 1:
                links.append(self.link(f"/list/page/{n - 1}", text="Previous page"))
            links.append(self.link(f"/list/page/{n + 1}", text="Next page"))
            links += [self.link(f"/item?id={10 * n + j}", text=f"Item {10 * n + j}") for j in range(10)]
            return self.small(f"items, page {n}", links)
        return None
