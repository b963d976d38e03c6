"""The test web's vocabulary: names and addresses, deterministic hashes and filler text,
and the records every host answers with (:class:`Link`, :class:`Page`, :class:`Stream`,
:class:`Robots`).

Everything here is a pure function of its arguments; it imports nothing else of the test
web, so every other module (hosts, kinds, the server glue, :mod:`testweb.web`) builds on it.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterator
from urllib.parse import quote, unquote

DOMAIN = "web.test"
"""Every host name ends in this (RFC 6761 reserves ``.test``; it never resolves for real)."""

ROBOTS_AGENT = "crawlbot"
"""Default product token the oracle evaluates robots.txt for (``config.fetch.robots_agent``)."""

SPECIAL_IP_PREFIX = "127.0.100."
"""Special hosts live on ``127.0.100.1``, ``127.0.100.2``, ... apart from the regular ones."""

LAST_MODIFIED_BASE = 1_704_067_200
"""2024-01-01T00:00:00Z. Each page's Last-Modified is a fixed, seed-chosen day before it, so
validators are the same in every run (a recrawl test can replay them)."""

KIND_IP_PREFIX = {"traps": "127.0.101.", "neardups": "127.0.102.", "changing": "127.0.103.",
                  "hostile": "127.0.60.", "sitemaps": "127.0.61.", "tls": "127.0.62."}
"""Address block of each optional kind of host; host ``j`` of a kind is ``{prefix}{1 + j}``.
Separate blocks keep a host's address the same whichever other kinds are switched on."""

KINDS = tuple(KIND_IP_PREFIX)
"""The optional kinds of hosts, in the order their hosts are added."""

CONTROL_IP = "127.0.0.2"
"""The server's control address (same port as the hosts): ``/__clock`` (module doc)."""

CLOCK_START = LAST_MODIFIED_BASE
"""Where the virtual clock starts: 2024-01-01T00:00:00Z."""

SPECIAL_HOSTS = (
    "robots-disallow", "robots-delay", "robots-404", "robots-503", "robots-bom",
    "robots-redirect", "robots-agent", "odd",
)
"""Names (without ``.web.test``) of the special hosts, in address order."""


# --- small deterministic helpers ---------------------------------------------------------

_MASK = (1 << 64) - 1


def mix(*parts: int) -> int:
    """SplitMix64 over the parts: a fast, process-independent hash of small integers.
    (Python's ``hash`` of strings is salted per process and must not be used here.)"""
    x = 0x9E3779B97F4A7C15
    for p in parts:
        x = (x ^ (p & _MASK)) * 0xBF58476D1CE4E5B9 & _MASK
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
        x ^= x >> 31
    return x


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def regular_ip(i: int) -> str:
    """Loopback address of regular host ``i``: ``127.{1 + i // 65024}.{(i // 254) % 256}.{1 + i % 254}``.
    The last octet skips 0 and 255 so no address looks like a network or broadcast one;
    this gives room for 16 million hosts. All of 127.0.0.0/8 routes to ``lo`` on Linux."""
    return f"127.{1 + i // (254 * 256)}.{(i // 254) % 256}.{1 + i % 254}"


def special_ip(j: int) -> str:
    """Loopback address of the ``j``-th special host (``127.0.100.{1 + j}``)."""
    return f"{SPECIAL_IP_PREFIX}{1 + j}"


def regular_name(i: int) -> str:
    return f"h{i}.{DOMAIN}"


def special_name(short: str) -> str:
    return f"{short}.{DOMAIN}"


def canonical_target(target: str) -> str:
    """The request target as the model keys it: path percent-encoded the way a browser does
    (UTF-8, upper-case hex), query kept as sent. ``/caf%c3%a9.html`` and ``/café.html`` both
    become ``/caf%C3%A9.html``."""
    path, sep, query = target.partition("?")
    if "%" in path or not path.isascii():
        path = quote(unquote(path, errors="surrogateescape"), safe="/:@!$&'()*+,;=-._~",
                     errors="surrogateescape")
    return path + sep + query



def str_key(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


# --- filler text ----------------------------------------------------------------------------

WORDS = """
the of and to in is that for it as was with be by on not he this are or his from at which
but have an they you were her she there been one all we their has would when if can who will
more no out so said what up its about into than them only other new some time could these two
may first then do any like my now over such our man me even most made after also did many
before must through back years where much your way well down should because each just those
people how too little state good very make world still own see men work long get here between
both life being under never day same another know while last might us great old year off come
since against go came right used take three states himself few house use during without again
place around however home small found thought went say part once general high upon school
every does got united left number course war until always away something fact though water
less public put think almost hand enough far took head yet government system better set told
nothing night end why called didnt eyes find going look asked later knew point next program
city business give group toward young days let room president side social given present
several order national second possible rather per face among form important often things
looked early white case john become large big need four within felt along children saw best
church ever least power development light thing seemed family interest want members others
mind country area done open god service certain kind problem began different door thus help
means sense whole matter perhaps itself york times law human line above name example action
company hands local show whether five history gave today either act feet across taken past
quite anything seen having death experience body word half really field car words already
themselves information tell together college shall money period held keep sure real probably
free seems political cannot behind miss question air office making brought whose special
major heard federal became study ago moment available known result street economic boy
""".split()

PARAGRAPH_POOL = 8192
"""Paragraphs of filler text shared by all pages. A page draws ~3 per KB along an arithmetic
progression of the pool, so two pages share about one paragraph: pages are distinct enough
that no near-duplicate detector mistakes one for another."""


@lru_cache(maxsize=4)
def paragraphs(seed: int) -> tuple[bytes, ...]:
    rng = random.Random(seed)
    words = rng.choices(WORDS, k=PARAGRAPH_POOL * 4 * 13)
    lengths = [rng.randint(7, 19) for _ in range(PARAGRAPH_POOL * 4)]
    out = []
    pos = 0
    for p in range(PARAGRAPH_POOL):
        sentences = []
        for s in range(4):
            n = lengths[p * 4 + s]
            chunk = words[pos:pos + n]
            pos = (pos + n) % (len(words) - 20)
            sentences.append(chunk[0].capitalize() + " " + " ".join(chunk[1:]) + ".")
        out.append(("<p>" + " ".join(sentences) + "</p>\n").encode())
    return tuple(out)


def filler(seed: int, key: int, nbytes: int) -> bytes:
    """About ``nbytes`` of ``<p>`` paragraphs, a deterministic function of ``(seed, key)``."""
    if nbytes <= 0:
        return b""
    pool = paragraphs(seed)
    h = mix(seed, key)
    start = h % PARAGRAPH_POOL
    step = (h >> 20) % PARAGRAPH_POOL | 1  # odd, hence coprime to the power-of-two pool size
    parts = []
    size = 0
    j = start
    while size < nbytes:
        para = pool[j]
        parts.append(para)
        size += len(para)
        j = (j + step) % PARAGRAPH_POOL
    return b"".join(parts)



# --- the model's records ------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """One ``<a href>`` of a page: how it is written and what it must resolve to."""

    href: str
    """The attribute value as written in the HTML (relative, absolute, with a fragment...)."""

    url: str
    """The absolute URL a correct parser resolves it to (base honoured, fragment dropped,
    host lower-cased, default port dropped). This is the oracle's truth."""

    nofollow: bool = False
    """The link carries ``rel=nofollow`` (possibly among other rel values)."""

    rel: str = ""
    """The ``rel`` attribute as written (``""`` for none)."""

    text: str = ""
    """Anchor text."""


@dataclass
class Stream:
    """A body sent piece by piece, respecting flow control, for slow or huge responses."""

    length: int | None
    """Content-Length announced in the headers; None for none (the chunks then frame
    themselves, e.g. with ``Transfer-Encoding: chunked``, as the hostile host's endless body)."""

    chunks: Callable[[], Iterator[bytes]]
    """Makes the pieces; their lengths add up to ``length``."""

    interval_s: float = 0.0
    """Pause before each piece (1.0 for the drip)."""


@dataclass
class Page:
    """What one request target answers. The server renders it; the oracle reads ``links``."""

    status: int = 200
    title: str = ""
    links: list[Link] = field(default_factory=list)
    """Every ``<a href>`` in the body, in order (nofollow ones included)."""

    base_href: str | None = None
    """Value of ``<base href>``, if the page has one."""

    meta_nofollow: bool = False
    """``<meta name="robots" content="nofollow">``: none of the links may be followed."""

    location: str | None = None
    """Absolute target of a 3xx (sent as ``Location``: ``location_header`` if set, else this)."""

    location_header: str | None = None
    """``Location`` exactly as sent, when it differs from ``location`` (a relative one)."""

    headers: list[tuple[str, str]] = field(default_factory=list)
    """Extra response headers (``Retry-After``...)."""

    content_type: str = "text/html; charset=utf-8"

    body: bytes | None = None
    """A ready body; ``None`` means render the standard HTML page from title and links."""

    stream: Stream | None = None
    """A body sent in pieces (drip, big files); wins over ``body``."""

    text_bytes: int = 0
    """Filler text to add when rendering the standard page."""

    key: int = 0
    """Chooses the filler text (distinct pages, distinct keys)."""

    validators: bool = True
    """Send ``ETag``/``Last-Modified`` and answer conditional requests with 304."""

    version: int = 0
    """Content version; part of the ETag and Last-Modified (and of the render cache key).
    Static pages stay at 0; the changing host's pages follow the virtual clock."""

    def followable(self) -> list[str]:
        """Absolute URLs a polite crawler follows from this page (redirect target included)."""
        if self.location is not None:
            return [self.location]
        if self.meta_nofollow:
            return []
        return [link.url for link in self.links if not link.nofollow]


@dataclass
class Robots:
    """A host's robots.txt, structured (what the oracle evaluates) and rendered (what is served)."""

    status: int = 200
    """HTTP status of ``/robots.txt``. 4xx means no rules (fetch everything, RFC 9309
    §2.3.1.3); 5xx means fetch nothing (§2.3.1.4)."""

    groups: dict[str, list[str]] = field(default_factory=dict)
    """Product token (lower case, ``*`` for the default group) -> disallowed path prefixes.
    A token with an empty list has a group that allows everything."""

    crawl_delay_s: float | None = None
    """``Crawl-delay`` of the ``*`` group, if any."""

    text: bytes | None = None
    """Bytes served, when they are not the plain rendering of ``groups`` (a BOM...)."""

    redirect_to: str | None = None
    """``/robots.txt`` answers 301 to this same-host path, which serves the rules."""

    def render(self) -> bytes:
        if self.text is not None:
            return self.text
        lines = []
        for agent, prefixes in self.groups.items():
            lines.append(f"User-agent: {agent}")
            if agent == "*" and self.crawl_delay_s is not None:
                lines.append(f"Crawl-delay: {self.crawl_delay_s:g}")
            lines.extend(f"Disallow: {p}" for p in prefixes)
            if not prefixes:
                lines.append("Disallow:")
            lines.append("")
        return "\n".join(lines).encode()

    def allows(self, target: str, agent: str = ROBOTS_AGENT) -> bool:
        """Whether ``agent`` may fetch ``target`` (path and query), by prefix match (RFC 9309
        §2.2.2; the test web uses no wildcards). The most specific matching group wins."""
        if self.status >= 500:
            return False
        if self.status >= 400:
            return True
        agent = agent.lower()
        if agent in self.groups:
            prefixes = self.groups[agent]
        else:
            prefixes = self.groups.get("*", [])
        return not any(target.startswith(p) for p in prefixes if p)
