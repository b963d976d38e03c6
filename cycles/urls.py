r"""URL normalisation, host hashing and URL filters.

Every URL the crawler stores is first put in one canonical form, so that one page is one
row of the crawl DB however a link spelled it. ``normalize_url`` (or, in hot loops, a
:class:`Normalizer` built once) resolves a link against its page and returns the
canonical form, or ``None`` when the link is not an http(s) URL we could fetch.

Parsing
-------
For ``http`` and ``https`` we parse like a browser (the WHATWG URL Standard), because
links come from HTML and a crawler should fetch what a click would fetch. For references
that are valid RFC 3986 this is RFC 3986 §5.2 resolution (the non-strict variant of
§5.2.2, where ``http:g`` against an ``http`` base is relative, as in every browser).
Beyond RFC 3986, as browsers do:

1. Leading and trailing C0 controls and spaces are stripped; tab, CR and LF are removed
   wherever they are (links wrapped over lines in HTML source).
2. ``\`` is ``/`` before the query (``http:\\host\a`` is ``http://host/a``).
3. After ``http:`` any number of slashes starts the authority (``http:/host``,
   ``http:///host``), unless the base has the same scheme and fewer than two slashes
   follow: then it is relative (``http:g``, ``http:/g``).
4. Schemes other than http and https (``mailto:``, ``javascript:``, ``ftp:``...) give
   ``None``; so does a relative link without a usable (http or https) base.
5. The base is parsed before a link is resolved against it (so ``g`` against
   ``http://a/b/c/..`` is ``http://a/b/g``), as browsers parse a page's URL.

The canonical form, rule by rule
--------------------------------
1. Scheme: lower case, ``http`` or ``https`` only.
2. Userinfo (``user:pass@``) is dropped: we never send credentials found in links, so
   with or without them we fetch the same thing, and the crawl DB must not hold
   passwords. (Links with userinfo are mostly obfuscation: ``http://bank.com@evil.com``.)
3. Host: percent-decoded, then IDNA to ASCII (UTS #46 mapping, non-transitional, then
   IDNA 2008 A-labels, with the ``idna`` package; ``xn--`` labels are checked to be
   valid Punycode), lower case. One trailing dot is removed (``example.com.`` is the
   same host). A host whose last label is a number is an IPv4 address, parsed as
   browsers do (``0x7f.1`` is ``127.0.0.1``, ``3279880203`` is ``195.127.0.11``) and
   written as a dotted quad. An IPv6 address is written per RFC 5952 (lower case,
   longest zero run as ``::``) inside brackets; zone ids are refused.
   A host name must then be labels of ``a-z 0-9 - _`` (1-63 chars each, 253 in all):
   anything else (spaces, ``<``, an empty label as in ``a..b``, an empty host) cannot be
   resolved and gives ``None``.
   ``idna`` rather than Python's built-in ``idna`` codec: the codec is IDNA 2003 with
   Unicode 3.2 (``faß.de`` becomes ``fass.de``, a different host from the one browsers
   connect to, and newer characters are refused). The package follows UTS #46 and IDNA
   2008 as browsers do, apart from IDNA 2008's stricter code points (emoji hosts).
4. Port: digits only, at most 65535 (else ``None``); leading zeros dropped; the default
   port (80 for http, 443 for https) and an empty port (``host:``) are removed.
5. Path: empty becomes ``/``; dot segments are resolved (RFC 3986 §5.2.4), also the
   ones spelled ``%2e``; ``;name=value`` path parameters whose name is a drop parameter
   (``;jsessionid=...``) are removed.
6. Percent-encoding (path and query): hex digits upper case; an encoded unreserved
   character (``A-Z a-z 0-9 - . _ ~``) is decoded; an encoded reserved character
   (``%2F``, ``%3F``, ``%26``...) stays encoded, as decoding it could change the
   meaning (RFC 3986 §6.2.2.2); a character that may not appear (space, ``"<>[]^`{|}``,
   ``\`` in the query, controls, non-ASCII) is encoded as UTF-8; a ``%`` not followed by
   two hex digits becomes ``%25``. Sub-delimiters (``!$&()*+,;=``), ``:`` and ``@`` stay
   literal, except ``'`` in the query: browsers send it as ``%27``, so we write that.
   Nothing is ever decoded and re-encoded, so an existing escape is never
   double-encoded, and non-UTF-8 escapes (``%E9``) are kept.
7. Query: split on ``&``; empty parameters are removed; parameters whose name matches
   a drop pattern (``UrlConfig.drop_params``: tracking and session ids; ``*`` is a
   wildcard, names compare case-insensitively) are removed; the rest are sorted by name
   (a stable sort, so equal names keep their order: ``a=2&a=1`` is not reordered). An
   empty query (``?`` alone, or nothing left) is removed. ``+`` and ``%20`` are kept
   apart (they mean the same only to form decoders) and ``a`` stays distinct from ``a=``.
8. Fragment: dropped; it is never sent to the server.

Deliberate differences from the public suites are listed, with reasons, in
``tests/data/urlnorm/DIFFERENCES.md``.

Host hashing: :func:`host_hash` is BLAKE2b with ``digest_size=8`` (a parameter of the
hash, not a truncated BLAKE2b-512) of the UTF-8 host name, read as a big-endian unsigned
integer. It must never change: crawl DB buckets are ``host_hash % n``, and so are a segment's
host groups (fetch partitions are balanced by expected fetch time over the heaviest hosts
and those groups, cycles/tables/assign.py).
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import operator
import re
from collections.abc import Sequence
from typing import Optional
from urllib.parse import unquote_to_bytes, urlsplit

import idna
import pyarrow as pa

from cycles.config import UrlConfig
from cycles.errors import ConfigError

__all__ = [
    "DEFAULT_DROP_PARAMS",
    "FilterReason",
    "Normalizer",
    "UrlFilter",
    "canonical_mask",
    "host_hash",
    "host_hashes",
    "link_resolver",
    "normalize_url",
    "rejection_reason",
    "remove_dot_segments",
    "resolve_location",
    "split_url",
    "url_authority",
    "url_host",
]

DEFAULT_DROP_PARAMS: tuple[str, ...] = tuple(UrlConfig().drop_params)
"""Query parameters dropped by :func:`normalize_url` unless told otherwise (from UrlConfig)."""

_DEFAULT_PORTS = {"http": "80", "https": "443"}

# --- Character classes --------------------------------------------------------------
# RFC 3986 §2.3 unreserved, §2.2 sub-delims; pchar adds ":" and "@" (§3.3).
_UNRESERVED = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
_PATH_CHARS = r"A-Za-z0-9\-._~!$&'()*+,;=:@/"
# The query allows "?" but not "'": browsers send "'" in an http(s) query as %27
# (WHATWG special-query set), so that is the form links and redirects mostly carry.
_QUERY_CHARS = _PATH_CHARS.replace("'", "") + "?"

# A path or query made only of these is already canonical as far as escapes go.
_PATH_CLEAN = re.compile(f"[{_PATH_CHARS}]*")
_QUERY_CLEAN = re.compile(f"[{_QUERY_CHARS}]*")
# What the escape normaliser rewrites: an escape, a lone "%", or a run of characters
# that may not appear literally.
_PATH_FIX = re.compile(f"%[0-9A-Fa-f]{{2}}|%|[^{_PATH_CHARS}%]+")
_QUERY_FIX = re.compile(f"%[0-9A-Fa-f]{{2}}|%|[^{_QUERY_CHARS}%]+")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _build_escape_table() -> dict[str, str]:
    """Every spelling of ``%XX`` -> its canonical form (decoded if unreserved)."""
    table = {}
    for byte in range(256):
        canonical = chr(byte) if chr(byte) in _UNRESERVED else f"%{byte:02X}"
        hi, lo = f"{byte:02X}"
        for h in {hi, hi.lower()}:
            for low in {lo, lo.lower()}:
                table[f"%{h}{low}"] = canonical
    return table


_ESCAPES = _build_escape_table()


def _escape_repl(match: re.Match[str]) -> str:
    text = match.group()
    canonical = _ESCAPES.get(text)
    if canonical is not None:
        return canonical
    if text == "%":
        return "%25"
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate cannot be UTF-8: write U+FFFD as browsers do.
        data = _SURROGATE.sub("\ufffd", text).encode("utf-8")
    return "%" + data.hex("%").upper()


def _canon_path_escapes(path: str) -> str:
    if "%" not in path and _PATH_CLEAN.fullmatch(path):
        return path
    return _PATH_FIX.sub(_escape_repl, path)


def _canon_query_escapes(query: str) -> str:
    if "%" not in query and _QUERY_CLEAN.fullmatch(query):
        return query
    return _QUERY_FIX.sub(_escape_repl, query)


# --- RFC 3986 §5.2 -------------------------------------------------------------------
def remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4: "/a/b/../c/./d" -> "/a/c/d".

    An absolute path (every link the parser resolves) by splitting on "/", 8 times faster;
    any other literally, scanning with an index (linear in the path length). The two agree
    on absolute paths (tests/test_urls_properties.py)."""
    if path.startswith("/"):
        return _remove_absolute_dot_segments(path)
    return _remove_dot_segments_literally(path)


def _remove_dot_segments_literally(path: str) -> str:
    """RFC 3986 §5.2.4 step by step, for any path."""
    out: list[str] = []
    i, n = 0, len(path)
    while i < n:
        if path.startswith("../", i):                        # A
            i += 3
        elif path.startswith("./", i):                       # A
            i += 2
        elif path.startswith("/./", i):                      # B
            i += 2
        elif path.startswith("/.", i) and i + 2 == n:        # B: "/." at the end -> "/"
            out.append("/")
            break
        elif path.startswith("/../", i):                     # C
            i += 3
            if out:
                out.pop()
        elif path.startswith("/..", i) and i + 3 == n:       # C: "/.." at the end -> "/"
            if out:
                out.pop()
            out.append("/")
            break
        elif (n - i == 1 and path[i] == ".") or (n - i == 2 and path.startswith("..", i)):  # D
            break
        else:                                                # E: move one segment
            end = path.find("/", i + 1 if path[i] == "/" else i)
            if end < 0:
                end = n
            out.append(path[i:end])
            i = end
    return "".join(out)


def _remove_absolute_dot_segments(path: str) -> str:
    """remove_dot_segments for a path starting with "/"."""
    segments = path.split("/")
    last = len(segments) - 1
    output: list[str] = []
    for i, segment in enumerate(segments):
        if segment == "." or segment == "..":
            if segment == ".." and len(output) > 1:
                output.pop()
            if i == last:
                output.append("")  # "/a/." and "/a/b/.." keep their trailing slash
            continue
        output.append(segment)
    return "/".join(output)


def _merge(base_authority: Optional[str], base_path: str, ref_path: str) -> str:
    """RFC 3986 §5.2.3."""
    if base_authority is not None and base_path == "":
        return "/" + ref_path
    return base_path[: base_path.rfind("/") + 1] + ref_path


# The one resolver of references in fetched content: page links (the parser calls it for
# every <a href>), <base href> and a redirect's Location. http(s) only, RFC 3986 §5.2 and
# WHATWG where the two differ. (Normalizer.normalize(url, base) resolves too, for callers
# that want the canonical form at once; tests check both against RFC 3986's examples.)
def split_url(url: str):
    """urlsplit, or the parts of "" for a URL it refuses: an unclosed IPv6 bracket
    ("http://[a/") or a netloc that NFKC changes raise ValueError, and a <base href> like
    that once crashed the fetch worker on its page."""
    try:
        return urlsplit(url)
    except ValueError:
        return urlsplit("")


def link_resolver(base: str):
    """A function href -> absolute http(s) URL without fragment (or None), for one base.

    String concatenation for the forms real pages use (absolute, ``//host/p``, ``/p``, ``p``,
    ``../p``, ``?q``), 5-10 times faster than ``urljoin``; RFC 3986 §5.2 results, and WHATWG's
    where the two differ (a backslash is a slash, tab and newline inside are dropped,
    ``http:p`` is relative). If ``base`` is not an absolute http(s) URL, only absolute
    http(s) links resolve.
    """
    parts = split_url(base)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.netloc:
        return _absolute_links_only()
    origin = f"{scheme}://{parts.netloc}"
    origin_length = len(origin)
    netloc_start = origin_length - len(parts.netloc)
    path = parts.path or "/"
    directory = origin + path[:path.rfind("/") + 1]
    # directory, its parent, ... up to the root: "../../p" is ancestors[2] + "p".
    ancestors = [directory]
    while len(ancestors[-1]) > origin_length + 1:
        ancestors.append(ancestors[-1][:ancestors[-1].rfind("/", 0, -1) + 1])
    no_query = origin + path

    def resolve(href: str) -> str | None:
        href = href.strip(_C0_AND_SPACE)
        if not href or href[0] == "#":
            return None  # empty, or a same-document reference
        if "\n" in href or "\t" in href or "\r" in href or "#" in href or "\\" in href:
            href = _cleaned(href)
        first = href[0]
        if first == "/":
            if href[1:2] == "/":  # "//host/path"
                return _with_host(scheme + ":" + href, len(scheme) + 3)
            url = origin + href
        elif first == "?":
            url = no_query + href
        elif first == "h" and (href.startswith("https://") or href.startswith("http://")):
            return _with_host(href, 8 if href[4] == "s" else 7)
        elif ":" not in href or _SCHEME.match(href) is None:  # a relative path
            url = _relative_path(href, directory, ancestors) if first == "." else directory + href
        else:
            return _with_scheme(href, scheme, directory, origin, netloc_start)
        # Relative to the base: the host is the base's.
        return _without_dot_segments(url, origin_length) if "/." in url else url

    return resolve


def _absolute_links_only():
    """The resolver for a base that is not an absolute http(s) URL: absolute http(s) links only."""
    relative_resolve = link_resolver("http://invalid.invalid/")

    def absolute_only(href: str) -> str | None:
        url = relative_resolve(href)
        if url is None or url.startswith("http://invalid.invalid/"):
            return None
        return url if href.lstrip(_C0_AND_SPACE)[:2] != "//" else None
    return absolute_only


def _cleaned(href: str) -> str:
    """WHATWG's fix-ups of a link: tab and newline inside dropped, the fragment cut, a
    backslash before the query read as a slash (in http(s) URLs)."""
    if "\n" in href or "\t" in href or "\r" in href:
        href = href.replace("\n", "").replace("\t", "").replace("\r", "")
    if "#" in href:
        href = href[:href.index("#")]
    if "\\" in href:
        before, mark, query = href.partition("?")
        href = before.replace("\\", "/") + mark + query
    return href


def _with_host(url: str, host_start: int) -> str | None:
    """An absolute URL whose host starts at ``host_start``: None without a host, else with
    its path's dot segments removed."""
    if len(url) == host_start or url[host_start] in "/?":
        return None  # no host
    return _without_dot_segments(url, host_start) if "/." in url else url


def _relative_path(href: str, directory: str, ancestors: list[str]) -> str:
    """A relative path starting with a dot: "../../p" is the base's second ancestor + "p"
    (most relative links with dots look like that); anything else with dots is left to
    the general case (:func:`_without_dot_segments`)."""
    rest = href.lstrip("./")
    prefix = len(href) - len(rest)
    up = href.count("../", 0, prefix)
    if up * 3 == prefix:
        return ancestors[min(up, len(ancestors) - 1)] + rest
    if prefix == 2 and href[1] == "/":  # "./p"
        return directory + rest
    return directory + href


def _with_scheme(href: str, scheme: str, directory: str, origin: str, netloc_start: int) -> str | None:
    """A link with a scheme name: http(s) only (javascript:, mailto:, tel:, data:, ftp: are
    None); ``https:host/p`` has its authority after the colon, ``http:p`` is relative when
    the scheme is the base's (WHATWG)."""
    name = href[:href.index(":")].lower()
    if name != "http" and name != "https":
        return None
    rest = href[len(name) + 1:]
    host_start = len(name) + 3
    if rest[:2] == "//":  # "HTTP://host/p"
        url = name + ":" + rest
    elif name != scheme:  # "https:host/p"
        url = name + "://" + rest.lstrip("/")
    else:  # "http:p"
        url = directory + rest if rest[:1] != "/" else origin + rest
        host_start = netloc_start
    return _with_host(url, host_start)


def _without_dot_segments(url: str, host_start: int) -> str:
    """The URL with the dot segments of its path removed (RFC 3986 §5.2.4)."""
    path_start = len(url)
    for mark in "/?":
        found = url.find(mark, host_start)
        if 0 <= found < path_start:
            path_start = found
    query_start = url.find("?", path_start)
    if query_start < 0:
        query_start = len(url)
    return url[:path_start] + remove_dot_segments(url[path_start:query_start]) + url[query_start:]


def resolve_location(base: str, location: str) -> str:
    """A redirect's ``Location`` resolved against the URL that sent it, as a link is
    (:func:`link_resolver`: the WHATWG rules browsers apply to Location too, fragment
    dropped). A target that is no http(s) URL (``ftp:``, ``javascript:``, ``//`` without a
    host) is returned as sent: the worker records it and the normaliser drops it, counted;
    a same-document one (``#s``, blank) is the base itself, which the worker records as a
    loop. Total: a hostile server's Location (``http://[a/``) once crashed the worker on
    every retry."""
    resolved = link_resolver(base)(location)
    if resolved is not None:
        return resolved
    stripped = location.strip(_C0_AND_SPACE)
    return base.split("#", 1)[0] if not stripped or stripped[0] == "#" else location


# Appendix B of RFC 3986: splits any string into its five parts, never raises.
_RFC3986_SPLIT = re.compile(r"(?:([^:/?#]+):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#(.*))?", re.S)


def url_authority(url: str) -> str:
    """The authority (``host:port``, with any userinfo) of ``url``, lower case, by RFC 3986
    appendix B; "" if it has none. Never raises (``urlsplit`` does on ``http://[a/``)."""
    return (_RFC3986_SPLIT.fullmatch(url).group(2) or "").lower()


# --- Hosts ----------------------------------------------------------------------------
_HOST_NAME = re.compile(r"[a-z0-9_-]{1,63}(?:\.[a-z0-9_-]{1,63})*")
_MAX_HOST = 253


def _ipv4_number(part: str) -> Optional[int]:
    """WHATWG IPv4 number parser: decimal, 0x-hex or 0-octal; None if not a number."""
    if not part.isascii() or not part.isalnum():
        return None  # also keeps int() from reading "_", signs and spaces
    radix = 10
    if part[:2] in ("0x", "0X"):
        part, radix = part[2:], 16
    elif len(part) > 1 and part[0] == "0":
        part, radix = part[1:], 8
    if part == "":
        return 0  # "0x" alone is zero
    try:
        return int(part, radix)
    except ValueError:
        return None


def _ends_in_number(host: str) -> bool:
    """WHATWG "ends in a number": then the host must be an IPv4 address."""
    parts = host.split(".")
    if parts[-1] == "":
        if len(parts) == 1:
            return False
        parts.pop()
    last = parts[-1]
    if not last or last[0] not in "0123456789":
        return False  # every IPv4 number (decimal, 0x-hex, 0-octal) starts with an ASCII digit
    if last.isascii() and last.isdigit():
        return True  # even if not a valid number ("09"): then the host is invalid
    return _ipv4_number(last) is not None


def _ipv4(host: str) -> Optional[str]:
    """WHATWG IPv4 parser -> dotted quad, or None."""
    parts = host.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    if len(parts) > 4:
        return None
    numbers = []
    for part in parts:
        number = _ipv4_number(part)
        if number is None:
            return None
        numbers.append(number)
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        return None
    value = numbers[-1]
    for i, n in enumerate(numbers[:-1]):
        value += n * 256 ** (3 - i)
    return ".".join(str(b) for b in value.to_bytes(4, "big"))


def _ipv6(inner: str) -> Optional[str]:
    """Validate an IPv6 literal; write it per RFC 5952 ourselves.

    Not ``str(IPv6Address)``: Python 3.13 changed how it writes IPv4-mapped addresses,
    and a canonical form must not depend on the Python version.
    """
    if "%" in inner or not inner.isascii():
        return None  # zone ids (fe80::1%eth0) mean nothing off the sending machine
    try:
        packed = ipaddress.IPv6Address(inner).packed
    except ValueError:
        return None
    groups = [int.from_bytes(packed[i:i + 2], "big") for i in range(0, 16, 2)]
    best_start, best_len, start = -1, 0, -1
    for i, g in enumerate(groups + [1]):
        if g == 0 and start < 0:
            start = i
        elif g != 0 and start >= 0:
            if i - start > best_len:
                best_start, best_len = start, i - start
            start = -1
    if best_len < 2:  # RFC 5952 §4.2.2: "::" never stands for a single 0 group
        return "[" + ":".join(f"{g:x}" for g in groups) + "]"
    head = ":".join(f"{g:x}" for g in groups[:best_start])
    tail = ":".join(f"{g:x}" for g in groups[best_start + best_len:])
    return f"[{head}::{tail}]"


def _idna_host(host: str) -> Optional[str]:
    """UTS #46 map then IDNA 2008 per label; plain ASCII labels are left alone."""
    try:
        mapped = idna.uts46_remap(host, std3_rules=False)
        labels = mapped.split(".")
        for i, label in enumerate(labels):
            if label and (not label.isascii() or label.startswith("xn--")):
                labels[i] = idna.alabel(label).decode("ascii")
    except (idna.IDNAError, UnicodeError, ValueError):
        return None
    return ".".join(labels)


# Cache sizes: ~250 bytes an entry, so 8 MB each; outlinks come grouped by page and
# host, so even a small cache hits almost always.
@functools.lru_cache(maxsize=1 << 15)
def _canon_host(raw: str) -> Optional[str]:
    """Canonical host (see rule 3), or None if it cannot be a host. Cached: links of a
    page mostly share a few hosts."""
    if not raw:
        return None
    if raw[0] == "[":
        return _ipv6(raw[1:-1]) if raw[-1] == "]" else None
    if "%" in raw:
        try:
            raw = unquote_to_bytes(raw).decode("utf-8")
        except (UnicodeDecodeError, ValueError):
            return None
    host = raw.lower() if raw.isascii() else None
    if host is None or "xn--" in host:
        host = _idna_host(raw)
        if host is None:
            return None
    if host.endswith("."):
        host = host[:-1]
    if host and _ends_in_number(host):
        return _ipv4(host)
    if len(host) > _MAX_HOST or not _HOST_NAME.fullmatch(host):
        return None
    return host


@functools.lru_cache(maxsize=1 << 15)
def _canon_authority(scheme: str, authority: str) -> Optional[str]:
    """``host[:port]`` in canonical form (rules 2-4), or None."""
    at = authority.rfind("@")
    if at >= 0:
        authority = authority[at + 1:]  # rule 2: userinfo dropped
    port = ""
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            return None
        host, rest = authority[:close + 1], authority[close + 1:]
        if rest:
            if rest[0] != ":":
                return None
            port = rest[1:]
    else:
        host, colon, port = authority.partition(":")
        if not colon:
            port = ""
    if port:
        if not (port.isascii() and port.isdigit()):
            return None
        port = port.lstrip("0") or "0"
        if len(port) > 5:
            # Too big for a port; and int() itself raises ValueError past 4,300 digits,
            # which once made one poison <a href> crash every retry of update.
            return None
        number = int(port)
        if number > 65535:
            return None
        port = str(number)
        if port == _DEFAULT_PORTS[scheme]:
            port = ""
    host = _canon_host(host)
    if host is None:
        return None
    return host + ":" + port if port else host


# --- Splitting ------------------------------------------------------------------------
# The common case: an absolute http(s) URL, lower-case scheme, plain ASCII host. Path and
# query may hold anything the escape normaliser deals with, but no C0 control or space:
# those may need stripping (at the ends) or removing (tab, CR, LF) first. No backslash in
# the path (it is a slash). The fragment is dropped, so it may hold anything.
_FAST = re.compile(
    r"(https?)://([A-Za-z0-9_.-]+(?::[0-9]*)?)"
    r"(/[^\x00-\x20\\?#]*)?"
    r"(?:\?([^\x00-\x20#]*))?"
    r"(?:#.*)?",
    re.S,
)
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
# After the authority starts: authority, path (up to ? or #), query (up to #).
_AFTER_SLASHES = re.compile(r"([^/\\?#]*)([^?#]*)(?:\?([^#]*))?", re.S)
_PATH_QUERY = re.compile(r"([^?#]*)(?:\?([^#]*))?", re.S)
# A canonical URL (output of normalize): scheme, authority, path, query.
_CANON_SPLIT = re.compile(r"(https?)://([^/?#]*)([^?#]*)(?:\?([^#]*))?")
_C0_AND_SPACE = "".join(chr(c) for c in range(0x21))
_TAB_NEWLINE = str.maketrans("", "", "\t\n\r")


def rejection_reason(url: Optional[str]) -> str:
    """Why :func:`normalize_url` returned None for ``url``: ``"scheme"`` when it names a
    scheme other than http or https (``mailto:``, ``javascript:``), else ``"unparseable"``."""
    if url:
        m = _SCHEME.match(url.strip(_C0_AND_SPACE))
        if m and m.group(1).lower() not in _DEFAULT_PORTS:
            return FilterReason.SCHEME
    return FilterReason.UNPARSEABLE


# --- The normaliser ---------------------------------------------------------------------
def _drop_matcher(patterns: Sequence[str]):
    """One case-insensitive regex for all drop patterns; ``*`` is the only wildcard."""
    if not patterns:
        return None
    alternatives = "|".join(re.escape(p).replace(r"\*", ".*") for p in patterns)
    return re.compile(f"(?:{alternatives})", re.IGNORECASE | re.S).fullmatch


def _param_name(param: str) -> str:
    return param.partition("=")[0]


_first = operator.itemgetter(0)
_MAX_REMEMBERED_NAMES = 1 << 16


class Normalizer:
    """Canonicalises URLs (see the module docstring) with its patterns compiled once.

    Build one per process and call :meth:`normalize` in the hot loop; it remembers the
    last base URL, since the links of one page come together.
    """

    def __init__(self, config: Optional[UrlConfig] = None):
        config = config if config is not None else UrlConfig()
        self._drop = _drop_matcher(config.drop_params)
        self._dropped: dict[str, bool] = {}
        # (base as given, its canonical parts or None): one attribute, so that threads
        # sharing a Normalizer never pair one base with another's parts.
        self._last_base: tuple[Optional[str], Optional[tuple]] = (None, None)

    # -- components --
    def _canon_path(self, path: str) -> str:
        if not path:
            return "/"
        path = _canon_path_escapes(path)
        if "/." in path:
            path = remove_dot_segments(path)
        if ";" in path and self._drop is not None:
            path = self._drop_path_params(path)
        return path

    def _drop_path_params(self, path: str) -> str:
        segments = path.split("/")
        changed = False
        for i, segment in enumerate(segments):
            if ";" in segment:
                head, *params = segment.split(";")
                kept = [p for p in params if not self._drop(_param_name(p))]
                if len(kept) != len(params):
                    segments[i] = ";".join([head, *kept])
                    changed = True
        return "/".join(segments) if changed else path

    def _canon_query(self, query: str) -> str:
        query = _canon_query_escapes(query)
        drop, dropped = self._drop, self._dropped
        kept = []
        for param in query.split("&"):
            if not param:
                continue
            name = param.partition("=")[0]
            if drop is not None:
                # Names repeat endlessly (id, page, utm_source): remember each verdict
                # rather than run the pattern again (bounded: cleared when full).
                verdict = dropped.get(name)
                if verdict is None:
                    if len(dropped) >= _MAX_REMEMBERED_NAMES:
                        dropped.clear()
                    verdict = dropped[name] = drop(name) is not None
                if verdict:
                    continue
            kept.append((name, param))
        if len(kept) > 1:
            kept.sort(key=_first)  # list.sort is stable: equal names keep their order
        return "&".join([param for _, param in kept])

    def _build(self, scheme: str, authority: str, path: str, query: Optional[str]) -> Optional[str]:
        authority = _canon_authority(scheme, authority)
        if authority is None:
            return None
        path = self._canon_path(path)
        if query:
            query = self._canon_query(query)
            if query:
                return f"{scheme}://{authority}{path}?{query}"
        return f"{scheme}://{authority}{path}"

    # -- entry point --
    def normalize(self, url: str, base: Optional[str] = None) -> Optional[str]:
        """The canonical form of ``url`` resolved against ``base``; None if it is not a
        fetchable http(s) URL (other scheme, bad host or port, relative without base)."""
        m = _FAST.fullmatch(url)
        if m is not None:
            scheme, authority, path, query = m.groups()
            return self._build(scheme, authority, path, query)
        return self._normalize_slow(url, base)

    def _base(self, base: str) -> Optional[tuple[str, str, str, Optional[str]]]:
        """(scheme, authority, path, query) of the canonical base, or None if unusable.
        Browsers too resolve against the parsed base (dot segments already removed:
        ``g`` against ``/b/c/..`` is ``/b/g``); it is parsed once per page."""
        last_key, parts = self._last_base
        if base != last_key:
            canonical = self.normalize(base)
            parts = _CANON_SPLIT.fullmatch(canonical).groups() if canonical is not None else None
            self._last_base = (base, parts)
        return parts

    def _normalize_slow(self, url: str, base: Optional[str]) -> Optional[str]:
        url = url.strip(_C0_AND_SPACE)
        if "\t" in url or "\n" in url or "\r" in url:
            url = url.translate(_TAB_NEWLINE)
        m = _SCHEME.match(url)
        scheme = None
        rest = url
        if m is not None:
            scheme = m.group(1).lower()
            if scheme not in _DEFAULT_PORTS:
                return None
            rest = url[m.end():]
        base_parts = self._base(base) if base is not None else None
        if scheme is not None and (base_parts is None or base_parts[0] != scheme):
            # Absolute: any number of slashes (or backslashes) then the authority.
            authority, path, query = _AFTER_SLASHES.match(rest.lstrip("/\\")).groups()
            return self._build(scheme, authority, _slashes(path), query)
        # Relative (or same scheme as the base: RFC 3986 §5.2.2 non-strict).
        if base_parts is None:
            return None
        b_scheme, b_authority, b_path, b_query = base_parts
        if len(rest) >= 2 and rest[0] in "/\\" and rest[1] in "/\\":
            authority, path, query = _AFTER_SLASHES.match(rest.lstrip("/\\")).groups()
            return self._build(b_scheme, authority, _slashes(path), query)
        path, query = _PATH_QUERY.match(rest).groups()
        path = _slashes(path)
        if path == "":
            path = b_path
            if query is None:
                query = b_query
        elif path[0] == "/":
            path = remove_dot_segments(path)
        else:
            path = remove_dot_segments(_merge(b_authority, b_path, path))
        return self._build(b_scheme, b_authority, path, query)


def _slashes(path: str) -> str:
    """Backslash is slash in http(s) paths (WHATWG)."""
    return path.replace("\\", "/") if "\\" in path else path


@functools.lru_cache(maxsize=16)
def _normalizer_for(drop_params: tuple[str, ...]) -> Normalizer:
    return Normalizer(UrlConfig(drop_params=list(drop_params)))


def normalize_url(url: str, base: Optional[str] = None,
                  drop_params: Sequence[str] = DEFAULT_DROP_PARAMS) -> Optional[str]:
    """Resolve ``url`` against ``base`` (RFC 3986 §5) and return its canonical form
    (module docstring); None if unparseable or not http/https. In loops, use a
    :class:`Normalizer`."""
    return _normalizer_for(tuple(drop_params)).normalize(url, base)


# --- Already canonical, by the column ------------------------------------------------
# Most links are written in canonical form already (89 % of the distinct ones in
# scripts/bench_outlinks.py). This recognises the plainest of them with RE2 over an Arrow
# column, so the Python normaliser can skip them: http(s), a lower-case ASCII host name of
# valid labels whose last label cannot be an IPv4 number, no port, no userinfo, a path of
# characters that are literal in canonical form, and nothing else. No "%" (escapes), no
# ";" (path parameters may be dropped), no "/." (dot segments), no "xn--" (IDNA checks),
# no query (sorted and filtered), no fragment, no path-less URL (it gains a "/").
_CANONICAL_PLAIN = (r"^https?://(?:[a-z0-9_-]{1,63}\.)*[a-z_-][a-z0-9_-]{0,62}"
                    r"/[A-Za-z0-9\-._~!$&'()*+,=:@/]*$")
_CANONICAL_HOST_LENGTH = r"^https?://[^/]{1,%d}/" % _MAX_HOST
# UrlFilter.reasons: the path of a canonical URL, and the extension of its last segment.
_CANON_PARTS = r"^https?://[^/?#]+(?P<path>(?:/[^/?#]*)*)(?:\?[^#]*)?$"
_LAST_EXTENSION = r"\.(?P<ext>[^./;]*)[^./]*$"


def canonical_mask(urls: pa.Array | pa.ChunkedArray) -> pa.BooleanArray:
    """True where ``url`` is certainly its own canonical form (``normalize(url) == url``);
    False means "not known": normalise it. Vectorised (pyarrow RE2), for hot paths that
    can leave the plain, already-canonical majority of links alone. Nulls give False."""
    import pyarrow.compute as pc

    plain = pc.and_(pc.match_substring_regex(urls, _CANONICAL_PLAIN),
                    pc.match_substring_regex(urls, _CANONICAL_HOST_LENGTH))
    special = pc.or_(pc.match_substring(urls, "/."), pc.match_substring(urls, "xn--"))
    mask = pc.fill_null(pc.and_(plain, pc.invert(special)), False)
    return mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask


# --- Hosts and hashes ------------------------------------------------------------------------
_HOST_OF = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://(?:[^/?#@]*@)?(\[[^\]/?#]*\]|[^:/?#]*)")


def url_host(url: str) -> str:
    """Lower-case host of a normalised URL, without port (IPv6 keeps its brackets)."""
    m = _HOST_OF.match(url)
    if m is None:
        raise ValueError(f"not an absolute URL with a host: {url!r}")
    return m.group(1).lower()


def host_hash(host: str) -> int:
    """Stable unsigned 64-bit hash of a host name: BLAKE2b (``digest_size=8``) of its UTF-8
    bytes, read big-endian. The host is hashed as given (pass :func:`url_host` output).
    Never change it: buckets and partitions depend on it."""
    return int.from_bytes(hashlib.blake2b(host.encode("utf-8"), digest_size=8).digest(), "big")


def host_hashes(hosts: pa.Array | pa.ChunkedArray | Sequence[str]) -> pa.UInt64Array:
    """:func:`host_hash` of every element, hashing each distinct host once. Nulls stay null."""
    if isinstance(hosts, pa.ChunkedArray):
        hosts = hosts.combine_chunks()
    if not isinstance(hosts, pa.Array):
        hosts = pa.array(hosts, type=pa.string())
    if len(hosts) == 0:
        return pa.array([], type=pa.uint64())
    encoded = hosts if pa.types.is_dictionary(hosts.type) else hosts.dictionary_encode()
    hashes = pa.array([None if h is None else host_hash(h) for h in encoded.dictionary.to_pylist()],
                      type=pa.uint64())
    return hashes.take(encoded.indices)


# --- Filters ------------------------------------------------------------------------
class FilterReason:
    """Why a URL is dropped; counted as ``filter/<reason>``."""

    UNPARSEABLE = "unparseable"        # normalize() gave None and it is not another scheme
    SCHEME = "scheme"                  # not http or https (mailto:, javascript:, ftp:...)
    TOO_LONG = "too_long"              # longer than urls.max_length
    EXTENSION = "extension"            # path ends in a blocked extension (.jpg, .zip...)
    TOO_DEEP = "too_deep"              # more than urls.max_path_depth path segments
    REPEATING_SEGMENTS = "repeating_segments"  # a segment more than urls.max_segment_repeats times
    HOST_RULE = "host_rule"            # refused by the host's include/exclude rules

    ALL = (UNPARSEABLE, SCHEME, TOO_LONG, EXTENSION, TOO_DEEP, REPEATING_SEGMENTS, HOST_RULE)


def _compile_rules(rules: dict[str, list[str]], what: str) -> dict[str, list[re.Pattern[str]]]:
    compiled: dict[str, list[re.Pattern[str]]] = {}
    for host, patterns in rules.items():
        key = host if host == "*" else _canon_host(host.strip().lower())
        if key is None:
            raise ConfigError(f"urls.{what}: {host!r} is not a valid host name; use a host "
                              f"such as 'example.com' or '*' for every host")
        try:
            compiled.setdefault(key, []).extend(re.compile(p) for p in patterns)
        except re.error as exc:
            raise ConfigError(f"urls.{what}[{host!r}]: bad regular expression: {exc}") from None
    return compiled


class UrlFilter:
    """Decides which normalised URLs are worth keeping (``UrlConfig`` limits and rules).

    Use it on the output of :class:`Normalizer`::

        norm = normalizer.normalize(href, base)
        why = url_filter.reason(norm) if norm is not None else rejection_reason(href)

    Host rules are regular expressions searched (``re.search``) in the whole URL; a host
    key matches that exact host (after IDNA), ``*`` every host. A host with include rules
    keeps only URLs matching one of them; ``*`` include rules apply to every host. Exclude
    rules of the host and of ``*`` drop what they match.
    """

    def __init__(self, config: Optional[UrlConfig] = None):
        config = config if config is not None else UrlConfig()
        self.max_length = config.max_length
        self.max_depth = config.max_path_depth
        self.max_repeats = config.max_segment_repeats
        self.extensions = frozenset(e.lower().lstrip(".") for e in config.blocked_extensions)
        self.include = _compile_rules(config.include, "include")
        self.exclude = _compile_rules(config.exclude, "exclude")
        self._any_exclude = self.exclude.get("*", [])
        self._any_include = self.include.get("*")

    def reason(self, url: Optional[str]) -> Optional[str]:
        """None to keep ``url``; else the first failing check, in the order of
        :attr:`FilterReason.ALL`. ``None`` as url (rejected by the normaliser) is
        ``unparseable``."""
        if url is None:
            return FilterReason.UNPARSEABLE
        m = _CANON_SPLIT.match(url)
        if m is None:
            return rejection_reason(url)
        scheme, authority, path, _ = m.groups()
        if not authority:
            return FilterReason.UNPARSEABLE
        if len(url) > self.max_length:
            return FilterReason.TOO_LONG
        # The path is "" or starts with "/": its segments are what follows each "/"
        # (counted and sliced rather than split: this runs once per outlink).
        last = path[path.rfind("/") + 1:]  # "" for "/dir/": a page, not a file
        dot = last.rfind(".")
        if dot >= 0 and last[dot + 1:].partition(";")[0].lower() in self.extensions:
            return FilterReason.EXTENSION
        depth = path.count("/") - (1 if path and not last else 0)  # "/a/b/" has two segments, not three
        if depth > self.max_depth:
            return FilterReason.TOO_DEEP
        if depth > self.max_repeats:
            segments = path.split("/")[1:depth + 1]
            counts: dict[str, int] = {}
            for segment in segments:
                counts[segment] = counts.get(segment, 0) + 1
                if counts[segment] > self.max_repeats:
                    return FilterReason.REPEATING_SEGMENTS
        if self.include or self._any_exclude or self.exclude:
            host = url_host(url)
            include = self.include.get(host, self._any_include)
            if include is not None and not any(p.search(url) for p in include):
                return FilterReason.HOST_RULE
            for pattern in (*self.exclude.get(host, ()), *self._any_exclude):
                if pattern.search(url):
                    return FilterReason.HOST_RULE
        return None

    def reasons(self, urls: pa.Array | pa.ChunkedArray) -> pa.StringArray:
        """:meth:`reason` of every URL of a column of *normalised* URLs (null: keep).

        Length, extension and depth are checked by Arrow kernels; only the URLs deep
        enough to repeat a segment, and every URL when host rules are configured, go
        through :meth:`reason` one by one. Nulls give ``unparseable``, as in :meth:`reason`.
        """
        import pyarrow.compute as pc

        if isinstance(urls, pa.ChunkedArray):
            urls = urls.combine_chunks()
        if self.include or self.exclude or len(urls) == 0:
            return pa.array([self.reason(u) for u in urls.to_pylist()], pa.string())
        path = pc.struct_field(pc.extract_regex(urls, _CANON_PARTS), "path")
        last_ext = pc.struct_field(pc.extract_regex(path, _LAST_EXTENSION), "ext")
        # Segments: one per "/" of the path, less a trailing empty one ("/a/b/" has two).
        depth = pc.subtract(pc.count_substring(path, "/"),
                            pc.cast(pc.ends_with(path, "/"), pa.int32()))
        too_long = pc.greater(pc.utf8_length(urls), self.max_length)
        extension = pc.fill_null(pc.is_in(pc.utf8_lower(last_ext),
                                          value_set=pa.array(sorted(self.extensions), pa.string())), False)
        too_deep = pc.greater(depth, self.max_depth)
        reasons = pc.case_when(
            pc.make_struct(too_long, extension, too_deep, field_names=["a", "b", "c"]),
            FilterReason.TOO_LONG, FilterReason.EXTENSION, FilterReason.TOO_DEEP, pa.scalar(None, pa.string()))
        # Deep enough to repeat a segment: count the segments of those paths in Python.
        deep = pc.fill_null(pc.and_(pc.is_null(reasons), pc.greater(depth, self.max_repeats)), False)
        if pc.any(deep).as_py():
            repeating = [self._repeats(p) for p in path.filter(deep).to_pylist()]
            reasons = pc.replace_with_mask(reasons, deep, pa.array(repeating, pa.string()))
        # Not of the canonical shape (the normaliser did not write it): reason() itself.
        odd = pc.is_null(depth)
        if pc.any(odd).as_py():
            exact = [self.reason(u) for u in urls.filter(odd, null_selection_behavior="emit_null").to_pylist()]
            reasons = pc.replace_with_mask(reasons, odd, pa.array(exact, pa.string()))
        return reasons

    def _repeats(self, path: str) -> Optional[str]:
        """``repeating_segments`` if a segment of ``path`` occurs more than max_segment_repeats times."""
        segments = path.split("/")[1:]
        if segments and segments[-1] == "":
            segments.pop()
        if self.max_repeats >= 1 and len(set(segments)) == len(segments):
            return None  # the common case: no segment twice
        counts: dict[str, int] = {}
        for segment in segments:
            counts[segment] = counts.get(segment, 0) + 1
            if counts[segment] > self.max_repeats:
                return FilterReason.REPEATING_SEGMENTS
        return None
