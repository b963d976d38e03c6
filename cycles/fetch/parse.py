"""Parsing a fetched HTML page: charset, title, visible text, links, robots meta, fingerprints.

The fetcher calls :func:`sniff_html` on the headers (and first bytes) of a response to abort
non-HTML transfers early, and :func:`parse_html` on every HTML body it stored.

``parse_html`` never raises on page content: any bytes decode (bad bytes become U+FFFD), any
markup parses (libxml2's HTML parser in recovery mode; the html5lib tree-construction inputs
are run through it in ``tests/fetch/test_parse.py``), and a body with no markup at all (empty,
whitespace, a lone comment) gives an empty :class:`ParsedPage`.

Speed is a requirement: the fetch stage has about 1.5 CPU-ms per page for fetch, parse and
WARC write, and parsing a 30 KB page takes ~0.5 ms here (``scripts/bench_parse.py``). So
the tree is walked with lxml's C iterators filtered by tag, the text is collected by one XPath
``normalize-space()`` call, relative links are resolved by string concatenation (not
``urljoin``, ~10 times slower), and the fingerprints are vectorised (:mod:`cycles.fingerprint`).

Charset precedence (WHATWG HTML "determining the character encoding", with one exception)
-----------------------------------------------------------------------------------------
1. A byte order mark (UTF-8, UTF-16LE, UTF-16BE) decides; it is removed.
2. Else the ``charset`` of the Content-Type header, if it is a known encoding label.
3. Else a ``<meta charset>`` or ``<meta http-equiv=content-type content="...charset=">`` in
   the first :data:`META_PRESCAN_BYTES` bytes (comments skipped). As in WHATWG, a meta saying
   UTF-16 means UTF-8 (a document that could be read to find the meta is not UTF-16).
4. Else UTF-8 if the body is valid UTF-8, else windows-1252.

The exception (not WHATWG, where a wrong label makes the page unreadable): a body that is
valid UTF-8 and not pure ASCII is decoded as UTF-8 whatever a header or meta label says. A
UTF-8 page behind a server default of ``charset=ISO-8859-1`` is the most common charset error
on the web, while text really written in a legacy encoding is almost never valid multi-byte
UTF-8 by accident. Labels still decide for pure-ASCII bodies (ISO-2022-JP is 7-bit) and for
bodies that are not valid UTF-8.

Labels are mapped as in the WHATWG Encoding Standard: ``iso-8859-1``, ``latin1`` and
``ascii`` mean windows-1252, ``gb2312`` means GBK (decoded as gb18030), ``shift_jis`` means
windows-31j, ``euc-kr`` means windows-949 and so on; an unknown label is ignored.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

from lxml import etree

from cycles.fingerprint import collapse_whitespace, fingerprints

ANCHOR_MAX_CHARS = 200
"""Anchor texts are cut to this many characters (after collapsing whitespace)."""

META_PRESCAN_BYTES = 4096
"""How much of the body is searched for a ``<meta>`` charset. WHATWG's prescan reads 1024
bytes, but a browser also honours a meta it meets later while parsing (the "change the
encoding" step), so long heads with the meta past byte 1024 are common and still shown
right; 4 KiB catches nearly all of them without a second parse."""

NOFOLLOW_RELS = frozenset({"nofollow", "ugc", "sponsored"})
"""``rel`` values that make a link nofollow (Google: ugc and sponsored imply nofollow)."""

TEXT_EXCLUDED_TAGS = ("script", "style", "noscript", "template")
"""Elements whose content is not visible text."""

BLOCK_TAGS = (
    "address", "article", "aside", "blockquote", "br", "caption", "center", "dd", "details",
    "dialog", "dir", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form",
    "h1", "h2", "h3", "h4", "h5", "h6", "header", "hgroup", "hr", "legend", "li", "main",
    "menu", "nav", "ol", "optgroup", "option", "p", "pre", "section", "summary", "table",
    "tbody", "td", "tfoot", "th", "thead", "tr", "ul",
)
"""Elements that break a line when rendered: their start and end separate words, so that
minified markup like ``<li>Home</li><li>News</li>`` gives "Home News", not "HomeNews".
Inline elements (a, b, span ...) do not separate: ``<b>W</b>ord`` stays "Word"."""


@dataclass(slots=True)
class Link:
    """A link found on a page (a row of the OUTLINKS table, before update normalises it)."""

    url: str
    """Absolute http(s) URL, resolved against ``<base href>`` if present, else the page URL;
    fragment removed; otherwise as written (update normalises)."""

    anchor: str
    """Anchor text (``alt`` for ``<area>``), whitespace collapsed, cut to ANCHOR_MAX_CHARS."""

    nofollow: bool
    """``rel`` has nofollow, ugc or sponsored, or the page's meta robots says nofollow."""


@dataclass(slots=True)
class ParsedPage:
    """What the fetcher keeps of an HTML page (FETCHED and OUTLINKS columns)."""

    title: str | None
    """Text of the first ``<title>``, whitespace collapsed; None if missing or empty."""

    text: str
    """Visible text of the body: no script, style, noscript or template content;
    block elements separate words; whitespace collapsed."""

    links: list[Link] = field(default_factory=list)
    """``<a href>`` and ``<area href>`` targets in document order, first occurrence of each
    URL kept. Skipped: empty hrefs, non-http(s) schemes (javascript:, mailto:, tel:, data:
    ...), same-document references (``#top``), URLs without a host."""

    canonical: str | None = None
    """Absolute URL of the first ``<link rel=canonical href>``; None if none or not http(s)."""

    noindex: bool = False
    """A ``<meta name=robots>`` (or ``name=<our robots agent>``) says noindex or none."""

    nofollow: bool = False
    """A robots meta says nofollow or none; every link is then nofollow too."""

    content_hash: str = ""
    """cycles.fingerprint.content_hash(text)."""

    simhash: int = 0
    """cycles.fingerprint.simhash64(text), unsigned 64-bit."""

    encoding: str = "utf-8"
    """WHATWG name (lower case) of the encoding the body was decoded with."""


# --- Is it HTML? ---------------------------------------------------------------------------

HTML_MIME_TYPES = frozenset({"text/html", "application/xhtml+xml"})
"""Content-Types taken as HTML without looking at the body."""

SNIFF_MIME_TYPES = frozenset({"", "unknown/unknown", "application/unknown", "*/*"})
"""Content-Types that say nothing: the body is sniffed (WHATWG MIME Sniffing §7.1)."""

# WHATWG MIME Sniffing §7.1, "identifying a resource with an unknown MIME type": after
# leading whitespace, one of these (case-insensitive) followed by a space or ">".
_HTML_SIGNATURE = re.compile(
    rb"[\t\n\x0c\r ]*<(?:!doctype html|html|head|script|iframe|h1|div|font|table|a|style"
    rb"|title|b|body|br|p|!--)[ >]",
    re.IGNORECASE,
)


def sniff_html(body_prefix: bytes, content_type: str | None) -> bool:
    """Whether a response is HTML, from its Content-Type, else from its first bytes.

    A Content-Type with a type decides alone (``text/html`` and ``application/xhtml+xml``
    are HTML; ``text/plain``, images and the rest are not: WHATWG never sniffs HTML out of a
    declared type). A missing or empty one, or ``unknown/unknown``, ``application/unknown``,
    ``*/*``, means the body is sniffed for WHATWG's HTML signatures (``<!DOCTYPE HTML``,
    ``<html``, ``<p`` ..., after leading whitespace). One deviation: a UTF-8 byte order mark
    before the signature is skipped (WHATWG would call the body text/plain, yet BOM-prefixed
    HTML is common). With an empty prefix the body cannot be sniffed yet, and the answer is
    True (keep downloading); call again with the first bytes.
    """
    if content_type is not None:
        essence = content_type.split(";", 1)[0].strip().lower()
        if essence in HTML_MIME_TYPES:
            return True
        if essence not in SNIFF_MIME_TYPES:
            return False
    if not body_prefix:
        return True
    if body_prefix.startswith(b"\xef\xbb\xbf"):
        body_prefix = body_prefix[3:]
    return _HTML_SIGNATURE.match(body_prefix) is not None


# --- Charset ------------------------------------------------------------------------------

# WHATWG Encoding Standard: encoding name -> (labels, Python codec). The "replacement" and
# "x-user-defined" encodings are left out: their labels are ignored (see _label_encoding).
_ENCODINGS: dict[str, tuple[str, str]] = {
    "utf-8": ("unicode-1-1-utf-8 unicode11utf8 unicode20utf8 utf-8 utf8 x-unicode20utf8", "utf-8"),
    "ibm866": ("866 cp866 csibm866 ibm866", "cp866"),
    "iso-8859-2": ("csisolatin2 iso-8859-2 iso-ir-101 iso8859-2 iso88592 iso_8859-2 "
                   "iso_8859-2:1987 l2 latin2", "iso8859-2"),
    "iso-8859-3": ("csisolatin3 iso-8859-3 iso-ir-109 iso8859-3 iso88593 iso_8859-3 "
                   "iso_8859-3:1988 l3 latin3", "iso8859-3"),
    "iso-8859-4": ("csisolatin4 iso-8859-4 iso-ir-110 iso8859-4 iso88594 iso_8859-4 "
                   "iso_8859-4:1988 l4 latin4", "iso8859-4"),
    "iso-8859-5": ("csisolatincyrillic cyrillic iso-8859-5 iso-ir-144 iso8859-5 iso88595 "
                   "iso_8859-5 iso_8859-5:1988", "iso8859-5"),
    "iso-8859-6": ("arabic asmo-708 csiso88596e csiso88596i csisolatinarabic ecma-114 "
                   "iso-8859-6 iso-8859-6-e iso-8859-6-i iso-ir-127 iso8859-6 iso88596 "
                   "iso_8859-6 iso_8859-6:1987", "iso8859-6"),
    "iso-8859-7": ("csisolatingreek ecma-118 elot_928 greek greek8 iso-8859-7 iso-ir-126 "
                   "iso8859-7 iso88597 iso_8859-7 iso_8859-7:1987 sun_eu_greek", "iso8859-7"),
    "iso-8859-8": ("csiso88598e csisolatinhebrew hebrew iso-8859-8 iso-8859-8-e iso-ir-138 "
                   "iso8859-8 iso88598 iso_8859-8 iso_8859-8:1988 visual", "iso8859-8"),
    "iso-8859-8-i": ("csiso88598i iso-8859-8-i logical", "iso8859-8"),
    "iso-8859-10": ("csisolatin6 iso-8859-10 iso-ir-157 iso8859-10 iso885910 l6 latin6",
                    "iso8859-10"),
    "iso-8859-13": ("iso-8859-13 iso8859-13 iso885913", "iso8859-13"),
    "iso-8859-14": ("iso-8859-14 iso8859-14 iso885914", "iso8859-14"),
    "iso-8859-15": ("csisolatin9 iso-8859-15 iso8859-15 iso885915 iso_8859-15 l9", "iso8859-15"),
    "iso-8859-16": ("iso-8859-16", "iso8859-16"),
    "koi8-r": ("cskoi8r koi koi8 koi8-r koi8_r", "koi8-r"),
    "koi8-u": ("koi8-ru koi8-u", "koi8-u"),
    "macintosh": ("csmacintosh mac macintosh x-mac-roman", "mac-roman"),
    "windows-874": ("dos-874 iso-8859-11 iso8859-11 iso885911 tis-620 windows-874", "cp874"),
    "windows-1250": ("cp1250 windows-1250 x-cp1250", "cp1250"),
    "windows-1251": ("cp1251 windows-1251 x-cp1251", "cp1251"),
    "windows-1252": ("ansi_x3.4-1968 ascii cp1252 cp819 csisolatin1 ibm819 iso-8859-1 "
                     "iso-ir-100 iso8859-1 iso88591 iso_8859-1 iso_8859-1:1987 l1 latin1 "
                     "us-ascii windows-1252 x-cp1252", "cp1252"),
    "windows-1253": ("cp1253 windows-1253 x-cp1253", "cp1253"),
    "windows-1254": ("cp1254 csisolatin5 iso-8859-9 iso-ir-148 iso8859-9 iso88599 iso_8859-9 "
                     "iso_8859-9:1989 l5 latin5 windows-1254 x-cp1254", "cp1254"),
    "windows-1255": ("cp1255 windows-1255 x-cp1255", "cp1255"),
    "windows-1256": ("cp1256 windows-1256 x-cp1256", "cp1256"),
    "windows-1257": ("cp1257 windows-1257 x-cp1257", "cp1257"),
    "windows-1258": ("cp1258 windows-1258 x-cp1258", "cp1258"),
    "x-mac-cyrillic": ("x-mac-cyrillic x-mac-ukrainian", "mac-cyrillic"),
    "gbk": ("chinese csgb2312 csiso58gb231280 gb2312 gb_2312 gb_2312-80 gbk iso-ir-58 x-gbk",
            "gb18030"),
    "gb18030": ("gb18030", "gb18030"),
    "big5": ("big5 big5-hkscs cn-big5 csbig5 x-x-big5", "big5hkscs"),
    "euc-jp": ("cseucpkdfmtjapanese euc-jp x-euc-jp", "euc-jp"),
    "iso-2022-jp": ("csiso2022jp iso-2022-jp", "iso2022-jp"),
    "shift_jis": ("csshiftjis ms932 ms_kanji shift-jis shift_jis sjis windows-31j x-sjis", "cp932"),
    "euc-kr": ("cseuckr csksc56011987 euc-kr iso-ir-149 korean ks_c_5601-1987 ks_c_5601-1989 "
               "ksc5601 ksc_5601 windows-949", "cp949"),
    "utf-16be": ("unicodefffe utf-16be", "utf-16-be"),
    "utf-16le": ("csunicode iso-10646-ucs-2 ucs-2 unicode unicodefeff utf-16 utf-16le",
                 "utf-16-le"),
}
_LABELS: dict[str, str] = {label: name for name, (labels, _) in _ENCODINGS.items()
                           for label in labels.split()}
_CODECS: dict[str, str] = {name: codec for name, (_, codec) in _ENCODINGS.items()}

_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xfe\xff", "utf-16be"), (b"\xff\xfe", "utf-16le"))

_CHARSET_PARAM = re.compile(rb"""charset\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s;"']+))""", re.I)
_META_TAG = re.compile(rb"<meta[\s/]([^>]*)", re.I)
_META_ATTR = re.compile(rb"""([^\s=/>]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]*)))?""")
_COMMENT = re.compile(rb"<!--.*?(?:-->|$)", re.S)


def _label_encoding(label: str | bytes | None) -> str | None:
    """WHATWG encoding name of a charset label; None if unknown."""
    if not label:
        return None
    if isinstance(label, bytes):
        label = label.decode("ascii", "replace")
    return _LABELS.get(label.strip("\t\n\x0c\r ").lower())


def _header_charset(content_type: str | None) -> str | None:
    if not content_type or "charset" not in content_type.lower():
        return None
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            return _label_encoding(value.strip().strip("\"'"))
    return None


def _meta_charset(prefix: bytes) -> str | None:
    """The WHATWG prescan's answer for the first bytes of a body, simplified to regular
    expressions: comments are skipped, the first meta with a usable charset wins."""
    if b"<!--" in prefix:
        prefix = _COMMENT.sub(b"", prefix)
    for tag in _META_TAG.finditer(prefix):
        attrs: dict[bytes, bytes] = {}
        for match in _META_ATTR.finditer(tag.group(1)):
            name = match.group(1).lower()
            if name not in attrs:  # the first of duplicate attributes counts
                attrs[name] = match.group(2) or match.group(3) or match.group(4) or b""
        encoding = None
        if b"charset" in attrs:
            encoding = _label_encoding(attrs[b"charset"])
        elif attrs.get(b"http-equiv", b"").strip().lower() == b"content-type" and b"content" in attrs:
            param = _CHARSET_PARAM.search(attrs[b"content"])
            if param:
                encoding = _label_encoding(param.group(1) or param.group(2) or param.group(3))
        if encoding is not None:
            # WHATWG: a meta can't truly declare UTF-16 (it was read as ASCII bytes).
            return "utf-8" if encoding in ("utf-16be", "utf-16le") else encoding
    return None


def decode_html(body: bytes, content_type: str | None = None) -> tuple[str, str]:
    """``(text, encoding)`` of an HTML body, by the precedence in the module doc.

    Never raises: undecodable bytes become U+FFFD. ``encoding`` is the WHATWG name.
    """
    for bom, encoding in _BOMS:
        if body.startswith(bom):
            return body[len(bom):].decode(_CODECS[encoding], "replace"), encoding
    header = _header_charset(content_type)
    try:
        text: str | None = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    # Valid UTF-8 that is not ASCII is UTF-8, whatever the label says (module doc). UTF-16
    # labels are kept out: UTF-16 text can happen to be valid UTF-8 (all of it, if ASCII).
    if text is not None and not text.isascii() and header not in ("utf-16le", "utf-16be"):
        return text, "utf-8"
    declared = header or _meta_charset(body[:META_PRESCAN_BYTES])
    if declared is None:
        if text is not None:
            return text, "utf-8"
        return body.decode("cp1252", "replace"), "windows-1252"
    if declared == "utf-8" and text is not None:
        return text, "utf-8"
    return body.decode(_CODECS[declared], "replace"), declared


# --- Links --------------------------------------------------------------------------------

_C0_AND_SPACE = "".join(map(chr, range(0x21)))  # WHATWG URL parser strips these at both ends
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4 for an absolute path: "/a/b/../c/./d" -> "/a/c/d"."""
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


def _make_resolver(base: str):
    """A function href -> absolute http(s) URL without fragment (or None), for one base.

    String concatenation for the forms real pages use (absolute, ``//host/p``, ``/p``, ``p``,
    ``../p``, ``?q``), which is ~10 times faster than ``urljoin`` and follows WHATWG where
    the two differ (backslash is a slash; tab and newline inside are dropped). Only the rare
    ``http:p`` form goes to ``urljoin``. ``base`` must be an absolute http(s) URL.
    """
    parts = urlsplit(base)
    scheme = parts.scheme.lower()
    origin = f"{scheme}://{parts.netloc}"
    path = parts.path or "/"
    directory = origin + path[:path.rfind("/") + 1]
    no_query = origin + path
    base_no_fragment = base.split("#", 1)[0]

    def resolve(href: str) -> str | None:
        href = href.strip(_C0_AND_SPACE)
        if not href or href[0] == "#":
            return None  # empty, or a same-document reference
        if "\n" in href or "\t" in href or "\r" in href:
            href = href.replace("\n", "").replace("\t", "").replace("\r", "")
        if "\\" in href:  # WHATWG: in http(s) URLs a backslash before the query is a slash
            before, mark, query = href.partition("?")
            href = before.replace("\\", "/") + mark + query
        first = href[0]
        if first == "/":
            if href.startswith("//"):
                url = scheme + ":" + href
            else:
                url = origin + href
        elif first == "?":
            url = no_query + href
        elif href.startswith(("http://", "https://")):
            url = href
        else:
            match = _SCHEME.match(href)
            if match is None:
                url = directory + href
            else:
                name = match.group(1).lower()
                if name != "http" and name != "https":
                    return None  # javascript:, mailto:, tel:, data:, ftp: ...
                rest = href[match.end():]
                if rest.startswith("//"):
                    url = name + ":" + rest
                else:  # "http:page": relative when the scheme is the base's (WHATWG)
                    url = urljoin(base_no_fragment, href)
        cut = url.find("#")
        if cut >= 0:
            url = url[:cut]
        if url.startswith("https://"):
            host_start = 8
        elif url.startswith("http://"):
            host_start = 7
        else:
            return None
        path_start = len(url)
        for mark in "/?":
            found = url.find(mark, host_start)
            if 0 <= found < path_start:
                path_start = found
        if path_start == host_start:
            return None  # no host: "http:///x", "//" alone
        if "/." in url:
            query_start = url.find("?", path_start)
            if query_start < 0:
                query_start = len(url)
            url = url[:path_start] + _remove_dot_segments(url[path_start:query_start]) + url[query_start:]
        return url

    return resolve


def _collapse_short(text: str) -> str:
    return " ".join(text.split())


# --- The parser ---------------------------------------------------------------------------

_local = threading.local()  # lxml parsers are not thread-safe: one per thread


def _parser() -> etree.HTMLParser:
    parser = getattr(_local, "parser", None)
    if parser is None:
        # Bodies are handed over as UTF-8 bytes: forcing the encoding makes libxml2 ignore
        # any meta charset (decode_html has settled it). IDs are not collected (faster;
        # duplicate ids are no error), comments and PIs are dropped, nothing is fetched.
        parser = etree.HTMLParser(encoding="utf-8", remove_comments=True, remove_pis=True,
                                  no_network=True, collect_ids=False, compact=True,
                                  default_doctype=False)
        _local.parser = parser
    return parser


_TEXT_OF = etree.XPath("normalize-space(.)", smart_strings=False)


def _empty_page(encoding: str) -> ParsedPage:
    content_hash, simhash = fingerprints("")
    return ParsedPage(title=None, text="", links=[], canonical=None, noindex=False,
                      nofollow=False, content_hash=content_hash, simhash=simhash,
                      encoding=encoding)


def parse_html(body: bytes, url: str, content_type: str | None = None,
               agent: str = "crawlbot") -> ParsedPage:
    """Parse one HTML body fetched from ``url`` (an absolute http(s) URL).

    ``content_type`` is the response's Content-Type header (for its charset); ``agent`` is
    our robots.txt product token (``fetch.robots_agent``): ``<meta name=crawlbot>`` counts
    like ``<meta name=robots>``. Never raises on page content (see the module doc).
    """
    text, encoding = decode_html(body, content_type)
    if encoding == "utf-8" and "\ufffd" not in text and not body.startswith(b"\xef\xbb\xbf"):
        data = body  # already valid UTF-8: no copy
    else:
        data = text.encode("utf-8", "replace")
    try:
        root = etree.fromstring(data, _parser())
    except (etree.LxmlError, ValueError):
        root = None
    if root is None:  # nothing but whitespace, comments or a doctype
        return _empty_page(encoding)

    # Script, style and template content is never text nor links (a script may hold
    # "<a href>" strings, but libxml2 keeps script content as text anyway).
    etree.strip_elements(root, "script", "style", "template", with_tail=False)

    # Block elements separate words: pad their start and end with a space. Done before the
    # links so that anchor texts get the same separation.
    for element in root.iter(*BLOCK_TAGS):
        inner = element.text
        element.text = " " + inner if inner else " "
        tail = element.tail
        element.tail = " " + tail if tail else " "

    title = None
    base_href = None
    canonical_href = None
    noindex = nofollow = False
    agent = agent.lower()
    raw_links: list[tuple[str, str | None, str]] = []
    for element in root.iter("a", "area", "title", "base", "meta", "link"):
        tag = element.tag
        if tag == "a":
            href = element.get("href")
            if href is not None:
                if len(element):
                    anchor = "".join(element.itertext())
                else:
                    anchor = element.text or ""
                raw_links.append((href, element.get("rel"), anchor))
        elif tag == "area":
            href = element.get("href")
            if href is not None:
                raw_links.append((href, element.get("rel"), element.get("alt") or ""))
        elif tag == "meta":
            name = element.get("name")
            if name is not None and name.strip().lower() in ("robots", agent):
                # Values are comma-separated; "none" means noindex, nofollow.
                for value in (element.get("content") or "").lower().replace(",", " ").split():
                    if value == "noindex":
                        noindex = True
                    elif value == "nofollow":
                        nofollow = True
                    elif value == "none":
                        noindex = nofollow = True
        elif tag == "link":
            if canonical_href is None:
                rel = element.get("rel")
                if rel is not None and "canonical" in rel.lower().split():
                    canonical_href = element.get("href")
        elif tag == "title":
            if title is None:
                title = collapse_whitespace("".join(element.itertext())) or None
        elif tag == "base":
            if base_href is None:
                base_href = element.get("href")

    # Links resolve against the first <base href> (WHATWG: wherever it stands), if it
    # resolves to an http(s) URL itself; else against the page URL.
    resolve = _make_resolver(url)
    if base_href is not None:
        base = resolve(base_href)
        if base is not None:
            resolve = _make_resolver(base)
    links: list[Link] = []
    seen: set[str] = set()
    for href, rel, anchor in raw_links:
        target = resolve(href)
        if target is None or target in seen:
            continue
        seen.add(target)
        if anchor:
            anchor = _collapse_short(anchor)
            if len(anchor) > ANCHOR_MAX_CHARS:
                anchor = anchor[:ANCHOR_MAX_CHARS].rstrip(" ")
        follow_off = nofollow
        if rel is not None and not follow_off:
            follow_off = not NOFOLLOW_RELS.isdisjoint(rel.lower().split())
        links.append(Link(target, anchor, follow_off))
    canonical = resolve(canonical_href) if canonical_href is not None else None

    # noscript content is links (kept above: crawlers see what script-less browsers see)
    # but not text.
    etree.strip_elements(root, "noscript", with_tail=False)
    body_element = root.find("body")
    text = "" if body_element is None else collapse_whitespace(_TEXT_OF(body_element))
    content_hash, simhash = fingerprints(text)
    return ParsedPage(title=title, text=text, links=links, canonical=canonical,
                      noindex=noindex, nofollow=nofollow, content_hash=content_hash,
                      simhash=simhash, encoding=encoding)
