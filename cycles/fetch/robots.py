"""robots.txt decisions for one host (RFC 9309), on top of protego.

The fetcher downloads ``/robots.txt`` and hands the outcome (status, body) to
:meth:`RobotsRules.from_response`; it then asks :meth:`RobotsRules.allowed` for every
URL of the host. The module does no I/O.

Work is split between this module and protego:

* here: the status classes of RFC 9309 §2.3.1, redirects (§2.3.1.2), the size
  limit (§2.5), decoding (BOM, bad bytes), splitting the file into groups and
  choosing the groups of our product token (§2.2.1), Crawl-delay and Sitemap lines;
* protego: the rules of the chosen groups — percent-encoding (§2.2.2), ``*`` and
  ``$`` (§2.2.3), longest match with Allow winning ties (§2.2.2).

Protego 0.7.0 groups lines in ways that make us obey too little, so its grouping is
not used; we hand it the rules of our groups as a one-group robots.txt. What it gets
wrong, and why each fix is here, is listed in ``tests/data/robots/DIFFERENCES.md``:

* a leading UTF-8 byte order mark hides the first group;
* ``User-agent: FOO BAR`` is not read as the product token ``foo`` (§2.2.1);
* its agent matching is by substring, so ``User-agent: crawl`` would apply to us;
* an unknown line (``Invalid-Line: x``) or a ``Crawl-delay`` between two
  ``User-agent`` lines splits one group into two (§2.2.4: other records must not
  interfere with the parsing of the standard ones);
* rules written before any ``User-agent`` line are dropped (we obey them as ``*``).

A robots.txt we could not read never grants access. A 2xx body that is not text (a
control character other than whitespace: binary junk, or UTF-16 without a byte order
mark), that carries a UTF-16 byte order mark but does not read as UTF-16 robots.txt
lines (8-bit text behind the mark), that is still compressed (gzip magic: the fetcher
did not inflate it), or that the fetcher could not read at all (``body`` None: it did not
inflate) is *unreadable*: treated like an unreachable robots.txt, complete disallow for now
(kind ``disallow_all``, reason ``unreadable``), with RFC 9309 §2.3.1.4's long-outage
fallback applied by the fetcher as for any unreachable robots.txt. Bytes that are not
UTF-8 inside otherwise readable text (RFC 9309 §2.3 wants UTF-8; Latin-1 files exist) are
not a reason to stop reading: each is kept as its percent-escape (``/caf\xe9/`` ->
``/caf%E9/``), so the rule still matches the bytes of the URLs it was written for, as
Google's parser, which matches bytes, does. Replacing them with U+FFFD instead would turn
such a Disallow into a rule that matches nothing: broader access than the file asked.
A file over ``max_bytes`` is read up to its last complete line within the cap (§2.5).

The fetcher counts outcomes by ``RobotsRules.reason`` and denied URLs; this module
keeps no counters.
"""

from __future__ import annotations

import math
import re
from typing import Iterator
from urllib.parse import urlsplit

from protego import Protego

from cycles.config import FetchConfig

# Spellings of the lines we read, as protego 0.7.0 accepts them (the same misspellings
# Google's reference parser accepts). Request-rate, Visit-time, Host and every other
# record are "other records" (§2.2.4): they are skipped and do not end a group.
_USER_AGENT = frozenset({"user-agent", "useragent", "user agent"})
_ALLOW = frozenset({"allow"})
_DISALLOW = frozenset({"disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw"})
_SITEMAP = frozenset({"sitemap", "sitemaps", "site-map"})
_CRAWL_DELAY = frozenset({"crawl-delay", "crawl delay"})
_KNOWN = _USER_AGENT | _ALLOW | _DISALLOW | _SITEMAP | _CRAWL_DELAY
_MAX_FIELD_WORDS = 2  # "user agent", "crawl delay"

_UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_GZIP_MAGIC = b"\x1f\x8b"

# C0 control bytes no text file holds, in any 8-bit or multi-byte encoding: NUL and the
# rest except TAB, LF, VT, FF, CR and ESC (ISO-2022 escapes). Their presence means binary
# junk or UTF-16 without a byte order mark (every ASCII character then has a NUL beside it).
_BINARY = re.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f]")
# Bytes that are not UTF-8, as surrogateescape decodes them (U+DC80..U+DCFF).
_UNDECODED = re.compile("[\udc80-\udcff]")


# §2.2.1: product-token = identifier / "*", identifier = 1*(ALPHA / "-" / "_").
# A User-agent value is read up to its first other character ("Foo Bar", "foo/1.2"
# and "foo*" are all "foo"), as Google's reference parser does. Unlike the RFC's
# grammar we keep digits (and non-ASCII letters) in a token: real tokens have them
# (MJ12bot, 360Spider), and cutting "crawler1" and "crawler2" to "crawler" would
# merge unrelated groups. Our agent is read the same way, so both sides agree.
_PRODUCT_TOKEN = re.compile(r"[\w-]+")

# A robots.txt served inside an HTML page ends its lines with <br>.
_HTML_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)

_ROBOTS_PATH = "/robots.txt"
_DEFAULT_PORTS = {"http": 80, "https": 443}

RULES = "rules"
ALLOW_ALL = "allow_all"
DISALLOW_ALL = "disallow_all"

UNREADABLE = "unreadable"
"""Reason of the ``disallow_all`` given for a 2xx robots.txt we could not read (module doc)."""


class RobotsRules:
    """What one robots.txt outcome lets our agent fetch on its host.

    ``kind`` is ``"rules"`` (a 2xx robots.txt, obeyed), ``"allow_all"`` (robots.txt
    unavailable) or ``"disallow_all"`` (unreachable: fetch nothing for now);
    ``reason`` says why in a few words (``"2xx"``, ``"4xx"``, ``"5xx"``, ``"429"``,
    ``"network_error"``, ``"too_many_redirects"``, ``"unexpected_status"``,
    ``"unreadable"``: a 2xx body we could not read, which never grants access).

    Build one per host and robots.txt download with :meth:`from_response`; it parses
    once and :meth:`allowed` is cheap afterwards.
    """

    __slots__ = ("kind", "reason", "_parser", "_crawl_delay", "_sitemaps")

    def __init__(
        self,
        kind: str,
        reason: str,
        parser: Protego | None = None,
        crawl_delay: float | None = None,
        sitemaps: list[str] | None = None,
    ) -> None:
        self.kind = kind
        self.reason = reason
        # The rules of our groups only, as a one-group protego parser; None when
        # there are none (everything allowed).
        self._parser = parser
        self._crawl_delay = crawl_delay
        self._sitemaps = sitemaps or []

    def __repr__(self) -> str:
        return f"RobotsRules(kind={self.kind!r}, reason={self.reason!r})"

    @classmethod
    def from_response(
        cls,
        status: int | None,
        body: bytes | None,
        agent: str,
        max_bytes: int = FetchConfig.max_robots_bytes,
    ) -> RobotsRules:
        """Decide from the final response to ``/robots.txt`` (after redirects).

        ``status`` is the HTTP status, or None when no response came (DNS, connect,
        TLS, timeout). ``agent`` is our product token (``FetchConfig.robots_agent``);
        a full User-Agent string such as ``crawlbot/0.1 (+https://...)`` is read up to
        its first character that is not a letter, digit, ``-`` or ``_``. Only the first
        ``max_bytes`` of the body are parsed. A garbage body never raises; a 2xx body we
        cannot read (module doc), or None (the fetcher could not read it), is
        ``disallow_all`` for reason ``unreadable``.

        Raises ValueError if ``agent`` has no product token (a configuration error).
        """
        token = product_token(agent)
        if not token:
            raise ValueError(
                f"robots agent {agent!r} has no product token (letters, digits, '-', '_'); "
                "set fetch.robots_agent to e.g. 'crawlbot'"
            )
        # RFC 9309 §2.3.1.4: a network error makes robots.txt unreachable: assume
        # complete disallow.
        if status is None:
            return cls(DISALLOW_ALL, "network_error")
        if 200 <= status < 300:
            text = _decode(body, max_bytes) if body is not None else None
            if text is None:
                # A robots.txt we could not read never grants access: unreachable, for now.
                return cls(DISALLOW_ALL, UNREADABLE)
            return cls._parse(text, token)
        # §2.3.1.2: the fetcher follows up to five redirects itself; a 3xx here means
        # it stopped following. The RFC lets us treat that as unavailable (allow all);
        # we disallow for now instead, since a redirect loop on robots.txt is more
        # often a bot wall or a broken server than a missing file. Retried next cycle.
        if 300 <= status < 400:
            return cls(DISALLOW_ALL, "too_many_redirects")
        # 429 is a 4xx but means "slow down", not "no robots.txt". RFC 9309 does not
        # single it out; like Google we treat it as a server error (unreachable).
        if status == 429:
            return cls(DISALLOW_ALL, "429")
        # §2.3.1.3: 4xx means the robots.txt is unavailable: crawl without rules.
        if 400 <= status < 500:
            return cls(ALLOW_ALL, "4xx")
        # §2.3.1.4: 5xx means unreachable: assume complete disallow for now.
        if 500 <= status < 600:
            return cls(DISALLOW_ALL, "5xx")
        # 1xx or a status outside HTTP's range: a broken server; do not fail open.
        return cls(DISALLOW_ALL, "unexpected_status")

    @classmethod
    def _parse(cls, text: str, token: str) -> RobotsRules:
        groups, sitemaps = _split_groups(text)
        # §2.2.1: obey every group naming our token, merged; else the "*" groups, merged.
        key = token
        chosen = [group for group in groups if token in group.agents]
        if not chosen:
            key = "*"
            chosen = [group for group in groups if "*" in group.agents]
        lines = [f"{field}: {value}" for group in chosen for field, value in group.rules]
        parser = Protego.parse("user-agent: *\n" + "\n".join(lines)) if lines else None
        # Several Crawl-delay values for us (merged groups, repeated lines): the
        # slowest is the polite reading.
        delays = [delay for group in chosen for delay in group.delays.get(key, ())]
        crawl_delay = max(delays) if delays else None
        return cls(RULES, "2xx", parser, crawl_delay, sitemaps)

    def allowed(self, url: str) -> bool:
        """May our agent fetch ``url`` (an absolute URL of this host, or a path)?

        The host of ``url`` is not checked: the caller keys rules by host. Give URLs
        percent-encoded as the fetcher will request them; protego normalises both
        sides (§2.2.2) but cannot know how a raw non-ASCII URL will be sent.
        """
        # §2.2.2: "The /robots.txt URI is implicitly allowed" -- also when it was
        # unreachable, so that it can be fetched again.
        if _ROBOTS_PATH in url and _path(url) == _ROBOTS_PATH:
            return True
        if self.kind == RULES:
            parser = self._parser
            if parser is None:
                return True
            try:
                return parser.can_fetch(url, "*")
            except ValueError:
                return False  # a URL urllib cannot split (bad IPv6 literal): not fetchable
        return self.kind == ALLOW_ALL

    def crawl_delay(self) -> float | None:
        """Crawl-delay in seconds of our group (non-standard, widely used); None if
        absent or not a non-negative number."""
        return self._crawl_delay

    def sitemaps(self) -> list[str]:
        """Sitemap URLs, as written, once each, in file order (they apply to every agent)."""
        return list(self._sitemaps)


def product_token(agent: str) -> str:
    """The lowercased product token at the start of ``agent`` ('' if none).

    ``"CrawlBot/0.1 (+https://example.org/bot)"`` -> ``"crawlbot"``.
    """
    match = _PRODUCT_TOKEN.match(agent.strip())
    return match.group().lower() if match else ""


def robots_url(url: str) -> str:
    """The robots.txt URL that governs ``url`` (§2.3: at the top of the same scheme,
    host and port). User info, path, query and fragment are dropped, and so is a
    default port. Raises ValueError for a URL that is not http(s) with a host.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.hostname  # lowercased, without user info or brackets
    if scheme not in ("http", "https") or not host:
        raise ValueError(f"no robots.txt for {url!r}: not an http(s) URL with a host")
    if ":" in host:
        host = f"[{host}]"  # IPv6 literal
    port = parts.port  # raises ValueError for a port that is not a number
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        host = f"{host}:{port}"
    return f"{scheme}://{host}{_ROBOTS_PATH}"


def robots_redirect_ok(from_url: str, to_url: str, hops: int, max_hops: int = FetchConfig.max_redirects) -> bool:
    """May the fetcher follow this redirect of a robots.txt request?

    ``hops`` is how many redirects this robots.txt fetch has followed already, not
    counting this one. RFC 9309 §2.3.1.2: follow at least five consecutive
    redirects; past ``max_hops`` the fetcher stops and hands the 3xx to
    :meth:`RobotsRules.from_response` (``too_many_redirects``). The target must be an
    http(s) URL with a host; a redirect to itself is a loop.

    Cross-host redirects are followed (the RFC does not restrict them; ``example.com``
    to ``www.example.com`` is common). The rules found at the target govern the
    *original* host for this fetch. The fetcher must not also cache them for the
    target host unless the target path is ``/robots.txt`` — a redirect to a login or
    home page says nothing about that host's own robots.txt.
    """
    if hops >= max_hops:
        return False
    try:
        target = urlsplit(to_url)
        target.port  # ValueError for a port out of range: the fetcher's resolve_entries would raise it
    except ValueError:
        return False
    if target.scheme.lower() not in ("http", "https") or not target.hostname:
        return False
    return to_url != from_url


def _path(url: str) -> str:
    try:
        return urlsplit(url).path
    except ValueError:
        return ""


def _decode(body: bytes, max_bytes: int) -> str | None:
    """The first ``max_bytes`` of ``body`` as text, or None when it cannot be read as
    text (module doc: unreadable). Never raises."""
    if len(body) > max_bytes:
        body = body[:max_bytes]
        # §2.5: parse only the first max_bytes. Drop the cut-off last line: a truncated
        # "Allow: /private/public" would allow all of /private/.
        body = body[: max(body.rfind(b"\n"), body.rfind(b"\r")) + 1]
    if body.startswith(_GZIP_MAGIC):
        return None  # still compressed (no Content-Encoding said so, or it was not removed)
    # RFC 9309 wants UTF-8, but a UTF-16 file with a BOM is unambiguous; reading it
    # obeys rules we would otherwise miss.
    if body.startswith(_UTF16_BOMS):
        return _decode_utf16(body)
    # A UTF-8 BOM (or the start of one) glued to "User-agent" would hide the first
    # group: protego 0.7.0 misses it. Skipped as Google's reference parser does.
    for size in (3, 2, 1):
        if body[:size] == _UTF8_BOM[:size]:
            body = body[size:]
            break
    if _BINARY.search(body):
        return None
    text = body.decode("utf-8", errors="surrogateescape")
    # A byte that is not UTF-8 stays as its percent-escape: a Disallow written in Latin-1
    # then still matches the URLs it was written for (module doc).
    return _UNDECODED.sub(lambda m: f"%{ord(m.group()) - 0xDC00:02X}", text)


def _decode_utf16(body: bytes) -> str | None:
    """A body behind a UTF-16 byte order mark, or None if it is not UTF-16 robots.txt.

    8-bit text behind the mark decodes "successfully" into CJK characters when its length
    is even, and reading that as a file without rules would allow everything. So the text
    must decode strictly and hold at least one line we know (or nothing but blank and
    comment lines)."""
    try:
        text = body.decode("utf-16")
    except UnicodeDecodeError:
        return None
    lines = [raw.split("#", 1)[0].strip() for raw in text.splitlines()]
    lines = [line for line in lines if line]
    if lines and not any(_split_line(line) for line in lines):
        return None
    return text


def _split_line(line: str) -> tuple[str, str] | None:
    """``(field, value)`` of a known directive line, or None for any other line.

    Follows protego 0.7.0's reading: ``field: value``, else ``field value`` (some
    files forget the colon, or put one in the value as in ``Sitemap http://...``).
    """
    field, colon, value = line.partition(":")
    if colon:
        field = field.strip().lower()
        if field in _KNOWN:
            return field, value.strip()
        if not value or value[0].isspace():
            return None  # "Unknown-Field: value"
    words = line.split()
    for count in range(1, _MAX_FIELD_WORDS + 1):
        field = " ".join(words[:count]).lower()
        if field in _KNOWN:
            return field, " ".join(words[count:])
    return None


class _Group:
    """One group of a robots.txt: its product tokens, rules and crawl delays."""

    __slots__ = ("agents", "rules", "delays")

    def __init__(self) -> None:
        self.agents: set[str] = set()
        self.rules: list[tuple[str, str]] = []  # ("allow" | "disallow", pattern), in file order
        self.delays: dict[str, list[float]] = {}  # product token -> its Crawl-delay values


def _split_groups(text: str) -> tuple[list[_Group], list[str]]:
    """The groups of a robots.txt and its Sitemap URLs (once each, in file order).

    §2.2: a group is one or more User-agent lines followed by rules; a User-agent
    line after a rule starts a new group. Only Allow and Disallow are rules here.
    Other records are skipped and do not end a group (§2.2.4), so in

        User-agent: a
        Crawl-delay: 5
        User-agent: b
        Disallow: /private/

    a and b share the Disallow. A Crawl-delay is nevertheless meant for the agents
    named just above it, so it goes to the tokens named since the previous
    Crawl-delay line: a gets 5, b none (as crawler-commons reads it).

    Rules (and Crawl-delay) before the first User-agent line belong to no group
    under the RFC; they are kept as a "*" group, because a site that writes only
    ``Disallow: /private/`` wants every crawler to keep out (10 of the 4,231
    real-world files start this way).
    """
    reader = _GroupReader()
    for field, value in _records(text):
        if field in _SITEMAP:
            if value:
                reader.sitemaps[value] = None
        elif field in _USER_AGENT:
            reader.user_agent(value)
        elif field in _CRAWL_DELAY:
            reader.crawl_delay(value)
        else:
            reader.rule(field, value)
    return reader.groups, list(reader.sitemaps)


def _records(text: str) -> Iterator[tuple[str, str]]:
    """The (field, value) of each record line of a robots.txt, comments and blank lines out."""
    # str.splitlines, as protego uses: besides CR, LF and CR LF (§2.1) it splits on
    # form feeds, NEL and the Unicode line separators. Splitting the same way keeps a
    # value we hand to protego from being split again there.
    for raw in text.splitlines():
        line = raw.split("#", 1)[0]
        if "<" in line:
            # A robots.txt pasted into HTML: "Disallow: /<br>" means "Disallow: /".
            line = _HTML_BREAK.sub("", line)
        line = line.strip()
        if not line:
            continue
        parsed = _split_line(line)
        if parsed is not None:
            yield parsed


class _GroupReader:
    """:func:`_split_groups`'s state along the file: the groups so far, the one being read."""

    def __init__(self) -> None:
        self.groups: list[_Group] = []
        self.sitemaps: dict[str, None] = {}
        self.group: _Group | None = None
        self.in_rules = False
        """The current group has had an Allow or Disallow line."""
        self.delay_agents: list[str] = []
        """Who the next Crawl-delay line is for."""
        self.delay_seen = False
        """A Crawl-delay came after the last User-agent line."""

    def user_agent(self, value: str) -> None:
        if self.group is None or self.in_rules:
            self.group, self.in_rules = _Group(), False
            self.groups.append(self.group)
            self.delay_agents, self.delay_seen = [], False
        if self.delay_seen:
            self.delay_agents, self.delay_seen = [], False
        # Google's reading: "*" followed by a space and more text is still "*".
        if value[:1] == "*" and value[1:2] in ("", " ", "\t"):
            token = "*"
        else:
            token = product_token(value)
        if token:
            self.group.agents.add(token)
            self.delay_agents.append(token)

    def _rule_group(self) -> _Group:
        if self.group is None:
            # A rule before any User-agent line: an implicit "*" group, which the
            # next User-agent line ends (in_rules) rather than joins.
            self.group, self.in_rules = _Group(), True
            self.group.agents.add("*")
            self.groups.append(self.group)
            self.delay_agents = ["*"]
        return self.group

    def crawl_delay(self, value: str) -> None:
        group = self._rule_group()
        delay = _parse_delay(value)
        if delay is not None:
            for token in self.delay_agents:
                group.delays.setdefault(token, []).append(delay)
        self.delay_seen = True

    def rule(self, field: str, value: str) -> None:
        """An Allow or Disallow line (any other record was skipped by :func:`_split_line`'s caller)."""
        group = self._rule_group()
        self.in_rules = True
        # "Disallow:" with no path allows everything: it ends the User-agent run
        # but adds no rule.
        if value:
            group.rules.append(("allow" if field in _ALLOW else "disallow", value))


def _parse_delay(value: str) -> float | None:
    try:
        delay = float(value)
    except ValueError:
        return None
    return delay if math.isfinite(delay) and delay >= 0 else None
