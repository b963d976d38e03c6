"""Parsing a fetched HTML page: charset, title, visible text, links, robots meta, fingerprints.

The fetcher calls :func:`sniff_html` on the headers (and first bytes) of a response to abort
non-HTML transfers early, and :func:`parse_html` on every HTML body it stored.

``parse_html`` never raises on page content: any bytes decode (bad bytes become U+FFFD), any
markup parses (libxml2's HTML parser in recovery mode; the html5lib tree-construction inputs
are run through it in ``tests/fetch/test_parse.py``), and a body with no markup at all (empty,
whitespace, a lone comment) gives an empty :class:`ParsedPage`.

Speed is a requirement: the fetch stage has about 1.5 CPU-ms per page for fetch, parse and
WARC write. ``scripts/bench_parse.py`` times every step; on the 2-vCPU development VM a 30 KB
page with 133 links takes about 0.88 ms of CPU, of which lxml's parse is ~0.18 ms, the walks
over the tree ~0.14 ms, the links ~0.24 ms, the text ~0.1 ms and the fingerprints ~0.13 ms;
a page of the test web bench_fetch.py crawls (29 KB, 5,000 words, 7 links) ~0.57 ms,
of which ~0.23 ms are the fingerprints of its long text. The fingerprint of the main
content (:func:`_main_blocks`, GitHub issue #13 section 3, fetch's default) costs about 2.0
million instructions a page more than that of the whole text on those pages (7.5 against 5.5
million for all of parse_html, valgrind --tool=cachegrind; it was 10.0 when the boilerplate was
emptied and each paragraph marked in the tree, then a second normalize-space() taken): the
content's marked text comes from one XSLT transform (:func:`_marked_content`), its blocks from
one split, and the fingerprint leaves out the shingles that span two blocks.
So the tree is walked with lxml's C iterators filtered by tag (each element a walk yields
costs a Python proxy), the text is collected by one XPath ``normalize-space()`` call, links
are resolved by string concatenation (cycles.urls.link_resolver; ``urljoin`` is 5-10 times slower), and the fingerprints
are vectorised with numpy (:mod:`cycles.fingerprint`).

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

from lxml import etree

from cycles.fingerprint import collapse_other_whitespace, collapse_whitespace, fingerprints
from cycles.urls import link_resolver, split_url

SIMHASH_BLOCK_MIN_BYTES = 200
"""Default of ``fetch.minhash_block_min_bytes`` (cycles.config), for callers without a config."""

ANCHOR_MAX_CHARS = 200
"""Anchor texts are cut to this many characters (after collapsing whitespace)."""

META_PRESCAN_BYTES = 4096
"""How much of the body is searched for a ``<meta>`` charset. WHATWG's prescan reads 1024
bytes, but a browser also honours a meta it meets later while parsing (the "change the
encoding" step), so long heads with the meta past byte 1024 are common and still shown
right; 4 KiB catches nearly all of them without a second parse."""

NOFOLLOW_RELS = frozenset({"nofollow", "ugc", "sponsored"})
"""``rel`` values that make a link nofollow (Google: ugc and sponsored imply nofollow)."""

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

    minhash: int = 0
    """cycles.fingerprint.minhash64 (the near-duplicate fingerprint) of the page's main
    content (``_main_blocks``: the text less its boilerplate), unsigned 64-bit."""

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
        # Of a comma-joined list (repeated headers), the last type counts (WHATWG Fetch,
        # "extract a MIME type").
        essence = content_type.rsplit(",", 1)[-1].split(";", 1)[0].strip().lower()
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

# --- The parser ---------------------------------------------------------------------------

_local = threading.local()
"""One lxml parser and XPath per thread: a parser must not be shared between threads, and
an XPath object serialises its callers with a lock."""


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


def _text_of(element: etree._Element) -> str:
    """XPath normalize-space() of the element's string value (ASCII whitespace collapsed)."""
    xpath = getattr(_local, "text_of", None)
    if xpath is None:
        xpath = _local.text_of = etree.XPath("normalize-space(.)", smart_strings=False)
    return xpath(element)


def parse_html(body: bytes, url: str, content_type: str | None = None,
               agent: str = "crawlbot", block_min_bytes: int | None = None) -> ParsedPage:
    """Parse one HTML body fetched from ``url`` (an absolute http(s) URL).

    ``content_type`` is the response's Content-Type header (for its charset); ``agent`` is
    our robots.txt product token (``fetch.robots_agent``): ``<meta name=crawlbot>`` counts
    like ``<meta name=robots>``; ``block_min_bytes`` is ``fetch.minhash_block_min_bytes``
    (see :func:`_main_blocks`), or None for a SimHash of the whole text
    (``fetch.minhash_main_content = false``). Never raises on page content (see the module doc).
    """
    text, encoding = _decode(body, content_type)
    root = _tree(body, text, encoding)
    if root is None:  # nothing but whitespace, comments or a doctype
        return _empty_page(encoding)
    scan = _scan(root, agent)
    _clear(scan.hidden)
    links, canonical = _links(scan, url)
    _clear(scan.noscripts)
    text = _visible_text(root)
    blocks = _main_blocks(root, text, block_min_bytes) if block_min_bytes is not None else None
    content_hash, minhash = fingerprints(text, collapsed=True, blocks=blocks)
    return ParsedPage(title=scan.title, text=text, links=links, canonical=canonical,
                      noindex=scan.noindex, nofollow=scan.nofollow, content_hash=content_hash,
                      minhash=minhash, encoding=encoding)


# The steps of parse_html, separate so that scripts/bench_parse.py can time each.

def _empty_page(encoding: str) -> ParsedPage:
    content_hash, minhash = fingerprints("")
    return ParsedPage(title=None, text="", links=[], canonical=None, noindex=False,
                      nofollow=False, content_hash=content_hash, minhash=minhash,
                      encoding=encoding)


def _decode(body: bytes, content_type: str | None) -> tuple[str | None, str]:
    """decode_html's ``(text, encoding)``, except that the text of a pure-ASCII body in an
    ASCII-compatible encoding is None: lxml is handed the body as it is, and decoding it
    only to learn that it is valid was ~3 µs a page alone, ~15 µs within parse_html (the
    first pass over a new body)."""
    if body.isascii():
        declared = _header_charset(content_type) or _meta_charset(body[:META_PRESCAN_BYTES])
        if declared is None:
            return None, "utf-8"
        if declared in _ASCII_COMPATIBLE:
            return None, declared
    return decode_html(body, content_type)


_ASCII_COMPATIBLE = frozenset(
    name for name, codec in _CODECS.items()
    if name != "iso-2022-jp"  # 7-bit, but escape sequences switch to JIS X 0208
    and bytes(range(128)).decode(codec, "replace") == "".join(map(chr, range(128))))
"""Encodings in which ASCII bytes always mean those ASCII characters (not UTF-16, not
ISO-2022-JP)."""


def _tree(body: bytes, text: str | None, encoding: str) -> etree._Element | None:
    """The lxml tree of the decoded body (``text`` None: the body is ASCII, see _decode);
    None when there is no markup at all."""
    if text is None or (encoding == "utf-8" and "\ufffd" not in text
                        and not body.startswith(b"\xef\xbb\xbf")):
        data = body  # already valid UTF-8: no copy
    else:
        data = text.encode("utf-8", "replace")
    try:
        return etree.fromstring(data, _parser())
    except (etree.LxmlError, ValueError):
        return None


# What _scan does with each tag other than the block elements.
_ANCHOR, _AREA, _HIDDEN, _NOSCRIPT, _META, _LINK, _TITLE, _BASE = range(8)
_TAG_KINDS: dict[str, int] = {
    "a": _ANCHOR, "area": _AREA, "script": _HIDDEN, "style": _HIDDEN, "template": _HIDDEN,
    "noscript": _NOSCRIPT, "meta": _META, "link": _LINK, "title": _TITLE, "base": _BASE,
}
_SCANNED_TAGS = tuple(_TAG_KINDS)
_SPACE_CHARS = " \n\t\r\x0c"


@dataclass(slots=True)
class _Scan:
    """What the walk over the tree found, before links are resolved."""

    title: str | None = None
    base_href: str | None = None
    canonical_href: str | None = None
    noindex: bool = False
    nofollow: bool = False
    anchors: list[tuple[etree._Element, str, int]] = field(default_factory=list)
    """(a or area element, href, _ANCHOR or _AREA) in document order; the anchor text is
    read after the walk, once script and style are emptied."""
    hidden: list[etree._Element] = field(default_factory=list)
    """script, style and template elements: neither text nor links."""
    noscripts: list[etree._Element] = field(default_factory=list)
    """noscript elements: their links count (crawlers see what script-less browsers see)
    but their text is not visible text."""


def _scan(root: etree._Element, agent: str) -> _Scan:
    """Pad block elements; collect anchors and hidden elements; read the head.

    Two walks: lxml creates a Python proxy for every element a walk yields, which costs
    about as much as the work done with it, so each walk yields only the elements it needs,
    and the block walk, about half of all elements, needs no dispatch on the tag.
    """
    _pad_blocks(root)
    return _collect(root, agent)


def _pad_blocks(root: etree._Element) -> None:
    """The first walk: every block element's start and end padded with a space."""
    # Block elements separate words: pad their start and end with a space (unless there is
    # whitespace there already), so that minified "<li>Home</li><li>News</li>" gives
    # "Home News", not "HomeNews".
    for element in root.iter(*BLOCK_TAGS):
        inner = element.text
        tail = element.tail
        try:
            if not inner:
                element.text = " "
            elif inner[0] not in _SPACE_CHARS:
                # Padded only when the text just before the start tag does not end in
                # whitespace (indented markup, ``</p>\n<p>Text``, needs none): setting a
                # text costs ~0.75 µs, about twice this look back. Inlined: a call per
                # paragraph was a tenth of this loop.
                previous = element.getprevious()
                if previous is not None:
                    before = previous.tail
                else:
                    parent = element.getparent()
                    before = parent.text if parent is not None else None
                if not before or before[-1] not in _SPACE_CHARS:
                    element.text = " " + inner
            if not tail:
                element.tail = " "
            elif tail[0] not in _SPACE_CHARS:
                element.tail = " " + tail
        except ValueError:
            # libxml2 keeps control characters (U+000C, U+001F ...) in text, which lxml
            # refuses to set back (after removing the old text): set it with them as spaces.
            element.text = " " + _XML_INCOMPATIBLE.sub(" ", inner or "")
            element.tail = " " + _XML_INCOMPATIBLE.sub(" ", tail or "")



def _collect(root: etree._Element, agent: str) -> _Scan:
    """The second walk: anchors, hidden elements and what the head says."""
    scan = _Scan()
    agent = agent.lower()
    anchors = scan.anchors
    kinds = _TAG_KINDS
    for element in root.iter(*_SCANNED_TAGS):
        kind = kinds[element.tag]
        if kind == _ANCHOR or kind == _AREA:
            href = element.get("href")
            if href is not None:
                anchors.append((element, href, kind))
        elif kind == _HIDDEN:
            scan.hidden.append(element)
        elif kind == _NOSCRIPT:
            scan.noscripts.append(element)
        elif kind == _META:
            _read_robots_meta(scan, element, agent)
        elif kind == _LINK:
            if scan.canonical_href is None:
                rel = element.get("rel")
                if rel is not None and "canonical" in rel.lower().split():
                    scan.canonical_href = element.get("href")
        elif kind == _TITLE:
            if scan.title is None:
                scan.title = collapse_whitespace("".join(element.itertext())) or None
        elif scan.base_href is None:  # _BASE
            scan.base_href = element.get("href")
    return scan




def _read_robots_meta(scan: _Scan, element: etree._Element, agent: str) -> None:
    """A ``<meta name="robots|<agent>" content=...>``: its noindex/nofollow into ``scan``."""
    name = element.get("name")
    if name is not None and name.strip().lower() in ("robots", agent):
        # Values are comma-separated; "none" means noindex, nofollow.
        for value in (element.get("content") or "").lower().replace(",", " ").split():
            if value == "noindex":
                scan.noindex = True
            elif value == "nofollow":
                scan.nofollow = True
            elif value == "none":
                scan.noindex = scan.nofollow = True


_XML_INCOMPATIBLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]+")


def _clear(elements: list[etree._Element]) -> None:
    """Empty elements in place (content and attributes), keeping the text that follows."""
    for element in elements:
        element.clear(keep_tail=True)


def _links(scan: _Scan, url: str) -> tuple[list[Link], str | None]:
    """The page's links, resolved and deduplicated, and its canonical URL."""
    # Links resolve against the first <base href> (WHATWG: wherever it stands), if that
    # resolves to an http(s) URL itself; else against the page URL.
    resolve = link_resolver(url)
    if scan.base_href is not None:
        base = resolve(scan.base_href)
        if base is not None and split_url(base).netloc:  # WHATWG: an unparseable base href is ignored
            resolve = link_resolver(base)
    page_nofollow = scan.nofollow
    links: list[Link] = []
    append = links.append
    # Hrefs and URLs seen. One set serves both: a URL is only equal to an href that is the
    # same absolute URL, which resolves to itself.
    seen: set[str] = set()
    add = seen.add
    for element, href, kind in scan.anchors:
        if href in seen:  # the same href gives the same URL: done already
            continue
        add(href)
        target = resolve(href)
        if target is None:
            continue
        if target != href:
            if target in seen:
                continue
            add(target)
        if kind == _AREA:
            anchor = element.get("alt") or ""
        elif len(element):
            anchor = "".join(element.itertext())
        else:
            anchor = element.text or ""
        if anchor:
            anchor = " ".join(anchor.split())
            if len(anchor) > ANCHOR_MAX_CHARS:
                anchor = anchor[:ANCHOR_MAX_CHARS].rstrip(" ")
        nofollow = page_nofollow
        if not nofollow:
            rel = element.get("rel")
            if rel is not None:
                nofollow = not NOFOLLOW_RELS.isdisjoint(rel.lower().split())
        append(Link(target, anchor, nofollow))
    canonical = resolve(scan.canonical_href) if scan.canonical_href is not None else None
    return links, canonical


_BOILERPLATE_TAGS = ("header", "nav", "footer", "aside")
"""HTML5 sectioning elements around a page's content. (Not form: ASP.NET pages wrap the
whole body in one.)"""
_MAIN_TAGS = ("main", "article")
_MARKS = ("\x81", "\x8d")
"""Marks of a paragraph's start and end in the content's text: two C1 control characters
that pages almost never hold (windows-1252 leaves the bytes 0x81 and 0x8D undefined). In
Latin-1, so that the content of a Latin-1 page stays one byte a character: private-use marks
made the whole text two bytes a character, which cost ~50 µs a 30 KB page in the scans that
follow."""
_RARE_MARKS = ("\ue000", "\ue001")
"""The marks of a page whose text holds one of _MARKS (private-use characters)."""
_BLOCKS = ("p", "pre", "blockquote", "dd")
"""Elements whose text is one block of prose (containers such as div, td and li are not:
their text is everything inside, boilerplate included)."""


_MAIN_MIN_BLOCKS = 5
"""This many paragraphs of at least ``block_min_bytes`` are a page's main content even when
they are under a third of its text (see _main_blocks)."""


def _marked_content_xslt(start: str, end: str) -> str:
    """The stylesheet of :func:`_marked_content`, built from the tag tuples above."""
    boilerplate = " or ".join(f"ancestor::{tag}" for tag in _BOILERPLATE_TAGS)
    mains = " | ".join(f"$body//{tag}" for tag in _MAIN_TAGS)
    return f"""<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
<xsl:template match="/">
  <xsl:variable name="body" select="/*/body[1]"/>
  <xsl:variable name="main" select="({mains})[not({boilerplate})][1]"/>
  <content>
    <xsl:choose>
      <xsl:when test="$main"><xsl:apply-templates select="$main"/></xsl:when>
      <xsl:otherwise><xsl:apply-templates select="$body"/></xsl:otherwise>
    </xsl:choose>
  </content>
</xsl:template>
<xsl:template match="{"|".join(_BOILERPLATE_TAGS)}"/>
<xsl:template match="{"|".join(_BLOCKS)}">{start}<xsl:apply-templates/>{end}</xsl:template>
</xsl:stylesheet>"""


def _marked_content(root: etree._Element, marks: tuple[str, str]) -> str | None:
    """normalize-space() of the page's content (steps 1 and 2 of :func:`_main_blocks`) with
    each paragraph between the ``marks`` (start, end), or None if libxslt gives up.

    One XSLT transform, all in C, and the tree is left as it is: emptying the boilerplate,
    setting two marks a paragraph into the tree (two lxml setters, ~1.5 µs, each re-encoding
    the paragraph) and a second normalize-space() of the content had cost ~300 µs of CPU on
    the 95-paragraph pages of scripts/bench_fetch.py, this ~125 µs (load ~10 on 2 cores; the
    same text, tests/fetch/test_main_blocks.py compares it with the marking).

    The transform writes the content into an element of its result tree, whose text one
    XPath normalize-space() reads: inside the stylesheet, normalize-space() of the content
    held in a variable (a result tree fragment) and the text output's serialisation had cost
    ~50 µs of a 29 KB page's ~85, this way ~25 (the same string).
    """
    transforms = getattr(_local, "marked_content", None)
    if transforms is None:
        transforms = _local.marked_content = {}
    transform = transforms.get(marks)
    if transform is None:
        transform = transforms[marks] = etree.XSLT(
            etree.XML(_marked_content_xslt(*marks)), access_control=etree.XSLTAccessControl.DENY_ALL)
    try:
        content = transform(root).getroot()
    except etree.XSLTApplyError:  # e.g. libxslt's template depth limit (3,000 levels)
        return None
    return _text_of(content) if content is not None else None


def _main_blocks(root: etree._Element, text: str, block_min_bytes: int) -> list[str]:
    """The text the SimHash is taken of, in blocks: the page's content without what
    surrounds it. (Blocks, because shingles do not cross from one to the next:
    :func:`cycles.fingerprint.simhash64_blocks`.)

    Near-duplicates differ mostly around the content: another site's header and footer
    (syndication), another advertisement, a session line, a print view without any of it
    (GitHub issue #13, section 3; measured on testweb.neardup_set by
    scripts/bench_update.py). So, on the already-parsed tree (the full text is taken):

    1. the text of header, nav, footer and aside elements is left out;
    2. the first ``<main>`` or ``<article>`` outside them is the content, if there is one;
    3. of its paragraphs (p, pre, blockquote, dd), those of fewer than ``block_min_bytes``
       UTF-8 bytes (menus, taglines, advertisements, footers, date and session lines of
       unmarked pages, short comments) are left out.

    Each step that would leave too little falls back to the text before it: fewer than
    _MAIN_MIN_BLOCKS blocks making under a third of the content's text, or a content under
    ``block_min_bytes``, is a page this reading does not fit (a list of links, a page of
    short lines), and the whole text fingerprints it better than a fragment. The exact-duplicate content hash is always
    taken of the whole text. The tree is not changed.

    Measured, not kept: emptying elements whose id or class names boilerplate (``ad-box``,
    ``sidebar``, ``footer``) and ARIA roles (navigation, banner ...) found no more pairs of
    the set than the paragraph length rule alone, and finding them (an XPath over every
    element with an id or class) cost ~0.25 ms on bench_parse.py's 30 KB pages, as much as
    the rest of this function did then.
    """
    if not text or root.find("body") is None:
        return [text]
    # The content is part of the text: marks the text does not hold mark only paragraphs.
    start, end = _MARKS if _MARKS[0] not in text and _MARKS[1] not in text else _RARE_MARKS
    marked = _marked_content(root, (start, end))
    if marked is None:
        return [text]
    marked = collapse_other_whitespace(marked)
    pieces = marked.split(end)
    pieces.pop()  # after the last paragraph
    # The content's characters less the marks (a start mark for every end mark).
    content = len(marked) - 2 * len(pieces)
    if content < block_min_bytes:
        return [text]
    # A piece is the loose text since the last paragraph (headings, a div's own text, link
    # lists), then the paragraph: only what follows the last start mark is the paragraph.
    # UTF-8 bytes measure a paragraph's information across scripts better than characters:
    # a CJK character (3 bytes) says about as much as a few Latin letters. A block has at
    # least as many bytes as characters, and as many when it is ASCII: most need no encoding.
    blocks = [block for block in (piece.rpartition(start)[2] for piece in pieces)
              if len(block) >= block_min_bytes
              or (not block.isascii() and len(block.encode()) >= block_min_bytes)]
    kept = sum(map(len, blocks))
    # Enough long paragraphs are the content whatever else the page holds: by the share
    # alone, a Japanese article whose paragraphs were half under the length fell back to
    # its whole text when a reader's comment was added, and its copy looked new.
    enough = len(blocks) >= _MAIN_MIN_BLOCKS
    return blocks if enough or 3 * kept >= content else [marked.replace(end, "").replace(start, "")]


def _visible_text(root: etree._Element) -> str:
    """The body's text, whitespace collapsed (hidden elements already emptied)."""
    body = root.find("body")
    if body is None:  # a frameset, or only head content
        return ""
    # normalize-space() collapses space, tab, CR and LF in C; the rest (NBSP ...) is rare.
    return collapse_other_whitespace(_text_of(body))
