"""Parquet page checksums checked on the stored bytes: nothing decompressed, nothing decoded.

Parquet's ``PageHeader`` (apache/parquet-format, src/main/thrift/parquet.thrift) carries an
optional ``crc`` (field 4): the standard CRC-32 (zlib's) of the page as stored after its
header — compressed; for v1 data pages the levels and values together, for v2 pages and
dictionary pages alike. pyarrow checks it only while decoding every value of every column
(0.5-1.0 CPU-s for one 150 MB base of a 10 M-URL crawl DB, docs/incremental.md); reading the
bytes and computing their CRCs costs ~0.13. So each column chunk is walked here page by page,
from the offsets of the footer: each header is parsed (Thrift compact protocol, a small
reader below), the page's stored bytes checked against its CRC.

A page header is not covered by its CRC, nor is the footer, so the walk holds them to each
other as a decoder would: the pages tile each chunk exactly, their uncompressed sizes and
value counts add up to the footer's, their encodings match its page-encoding stats, the
codec is the one the pages were compressed with, the row groups hold the file's rows. The
footer is parsed here too: pyarrow's metadata objects abort the process on some flipped
footers. What a decoder refuses and this does not: a string dictionary's entry count
(:data:`PLAIN_WIDTH`). tests/test_page_crc.py flips every bit of a small file to show it.

No library does this without decoding: pyarrow (Arrow C++) checks CRCs in its page reader,
which it does not expose without decompressing and decoding; DuckDB and Polars check none;
fastparquet parses page headers, but would be a second Parquet implementation to install for
a few hundred lines of header parsing.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

# Thrift compact protocol type ids (thrift/doc/specs/thrift-compact-protocol.md).
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
_UUID = 13

# PageType (parquet.thrift): the pages a column chunk may hold.
DATA_PAGE, INDEX_PAGE, DICTIONARY_PAGE, DATA_PAGE_V2 = 0, 1, 2, 3


class PageError(ValueError):
    """A page whose stored bytes do not match its header or its CRC (the reason, one line)."""


class NoChecksum(Exception):
    """A page written without a CRC: the caller checks the file another way (by decoding it)."""


class _Reader:
    """Thrift compact protocol (thrift/doc/specs/thrift-compact-protocol.md), read from ``buf``
    at ``pos``: a struct as {field id: (type, value)}, nested structs and lists alike."""

    def __init__(self, buf, pos: int = 0):
        self.buf, self.pos = buf, pos

    def byte(self) -> int:
        if self.pos >= len(self.buf):
            raise PageError("header cut short")
        self.pos += 1
        return self.buf[self.pos - 1]

    def varint(self) -> int:
        value = shift = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise PageError("header has an overlong integer")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, nbytes: int) -> None:
        self.pos += nbytes
        if nbytes < 0 or self.pos > len(self.buf):
            raise PageError("header cut short")

    def value(self, ftype: int, depth: int):
        """One value of type ``ftype``: an int, bytes, a list, a struct (dict); None for what
        this check never looks at (doubles, maps, booleans)."""
        if ftype in (_BYTE, _I16, _I32, _I64):
            return self.byte() if ftype == _BYTE else self.zigzag()
        if ftype in (_TRUE, _FALSE):
            return None
        if ftype == _STRUCT:
            return self.struct(depth + 1)
        if ftype in (_LIST, _SET):
            return self._list(depth)
        if ftype in (_DOUBLE, _UUID, _BINARY):
            size = 8 if ftype == _DOUBLE else 16 if ftype == _UUID else self.varint()
            start = self.pos
            self.take(size)
            return bytes(self.buf[start:self.pos]) if ftype == _BINARY else None
        if ftype == _MAP:
            size = self.varint()
            types = self.byte() if size else 0
            for _ in range(size):
                self.value(types >> 4, depth)
                self.value(types & 0x0F, depth)
            return None
        raise PageError(f"header has an unknown Thrift type {ftype}")

    def _list(self, depth: int) -> list:
        head = self.byte()
        size = head >> 4 if head >> 4 != 15 else self.varint()
        if size > len(self.buf) - self.pos:  # each element takes a byte at least
            raise PageError("header has an overlong list")
        if head & 0x0F in (_TRUE, _FALSE):
            self.take(size)  # booleans in a list: a byte each
            return []
        return [self.value(head & 0x0F, depth) for _ in range(size)]

    def struct(self, depth: int = 0) -> dict[int, tuple[int, object]]:
        if depth > 16:
            raise PageError("header nested too deep")
        found: dict[int, tuple[int, object]] = {}
        field = 0
        while True:
            head = self.byte()
            ftype = head & 0x0F
            if ftype == 0:
                return found
            field = field + (head >> 4) if head >> 4 else self.zigzag()
            found[field] = (ftype, self.value(ftype, depth))


def _field(fields: dict, field: int, ftype: int = _I32, default=None):
    """Field ``field`` of a parsed struct if it has the type ``ftype`` (else ``default``: a
    Thrift reader skips a field of another type, so it counts as missing)."""
    got = fields.get(field)
    return got[1] if got is not None and got[0] == ftype else default


@dataclass(frozen=True)
class Page:
    """One page header as read: where its stored bytes start, and what it says of them."""

    type: int
    header_bytes: int
    uncompressed: int
    compressed: int
    crc: int | None
    num_values: int
    encoding: int
    levels: tuple = ()
    """A v1 data page's encodings of its definition and repetition levels."""


_KIND = {DATA_PAGE: (5, 2), DICTIONARY_PAGE: (7, 2), DATA_PAGE_V2: (8, 4)}
"""PageHeader (parquet.thrift): per page type, the field of its own header and, in that, the
field of its encoding (num_values is field 1 in each)."""


def read_page_header(buf, pos: int) -> Page:
    """The page header at ``buf[pos:]`` (a PageError if it is not a data or dictionary page's)."""
    reader = _Reader(buf, pos)
    fields = reader.struct()
    kind, sizes = _field(fields, 1), (_field(fields, 2), _field(fields, 3))
    if kind not in _KIND or None in sizes or min(sizes) < 0:
        raise PageError(f"page header at {pos} is not a data or dictionary page header")
    own, encoding_field = _KIND[kind]
    body = _field(fields, own, _STRUCT, {})
    values, encoding = _field(body, 1), _field(body, encoding_field)
    if values is None or encoding is None or values < 0:
        raise PageError(f"page header at {pos} lacks its values' count or encoding")
    crc = _field(fields, 4)
    levels = (_field(body, 3), _field(body, 4)) if kind == DATA_PAGE else ()
    return Page(kind, reader.pos - pos, sizes[0], sizes[1], None if crc is None else crc & 0xFFFFFFFF,
                values, encoding, levels)


def _check_page(page: Page, number: int, chunk: "Chunk") -> None:
    """What a page header must agree with in its footer (the header has no CRC of its own)."""
    where = f"page {number} of column {chunk.name}"
    if (page.type == DICTIONARY_PAGE) != (number == 0 and chunk.dictionary_page_offset is not None):
        raise PageError(f"{where}: a dictionary page out of place")
    if any(e not in chunk.encodings for e in (page.encoding, *page.levels)):
        raise PageError(f"{where}: an encoding its footer does not list")
    if any(e not in LEVEL_ENCODINGS for e in page.levels):
        raise PageError(f"{where}: levels in an encoding levels never have")
    width = PLAIN_WIDTH.get(chunk.type)
    if page.type == DICTIONARY_PAGE and width and page.uncompressed != width * page.num_values:
        raise PageError(f"{where}: a dictionary whose size is not its entries'")
    if page.crc is None:
        raise NoChecksum(chunk.name)


PLAIN_WIDTH = {1: 4, 2: 8, 3: 12, 4: 4, 5: 8}
"""Bytes a value of these physical types (INT32, INT64, INT96, FLOAT, DOUBLE) takes PLAIN-encoded:
a dictionary page of them is exactly its entries (its count, in the header only, is
otherwise held to nothing). A dictionary of strings (BYTE_ARRAY) has its count checked by
nothing short of decompressing it: a flipped bit there is left to the reader, which then
finds indices past the dictionary's end (DuckDB refuses the file, tests/test_page_crc.py)."""

LEVEL_ENCODINGS = (3, 4)
"""RLE, BIT_PACKED: the encodings of a v1 data page's levels (parquet.thrift)."""


def check_chunk(buf, chunk: "Chunk") -> int:
    """Check every page of one column chunk (``buf``: its stored bytes, as the footer places
    them): each page's CRC, and that the pages add up to what the footer says of the chunk.
    Returns the pages checked; NoChecksum for a page written without a CRC."""
    if len(buf) != chunk.compressed:
        raise PageError(f"column {chunk.name} is cut short")
    seen, first_data = {}, chunk.data_page_offset - chunk.span[0]
    pos = pages = values = uncompressed = 0
    while pos < len(buf):
        page = read_page_header(buf, pos)
        if page.type != DICTIONARY_PAGE and first_data is not None:
            if pos != first_data:
                raise PageError(f"column {chunk.name}'s first data page is not where its footer says")
            first_data = None
        start, pos = pos + page.header_bytes, pos + page.header_bytes + page.compressed
        if pos > len(buf):
            raise PageError(f"a page of column {chunk.name} runs past its column chunk")
        _check_page(page, pages, chunk)
        _check_codec(buf[start:pos], page, chunk.codec, f"page {pages} of column {chunk.name}")
        if zlib.crc32(buf[start:pos]) != page.crc:
            raise PageError(f"page {pages} of column {chunk.name} fails its CRC")
        pages += 1
        uncompressed += page.header_bytes + page.uncompressed
        values += 0 if page.type == DICTIONARY_PAGE else page.num_values
        key = (_stats_type(page.type), page.encoding)
        seen[key] = seen.get(key, 0) + 1
    if values != chunk.num_values or uncompressed != chunk.uncompressed or (chunk.stats and seen != chunk.stats):
        raise PageError(f"column {chunk.name}'s pages do not add up to what its footer says")
    return pages


def _stats_type(page_type: int) -> int:
    # Writers record a v2 data page as DATA_PAGE in the stats (Arrow does), or as itself.
    return DATA_PAGE if page_type == DATA_PAGE_V2 else page_type


UNCOMPRESSED, ZSTD, CODECS = 0, 6, range(8)
"""CompressionCodec (parquet.thrift): none, zstd, and the values that name a codec."""

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
"""The first bytes of a zstd frame (RFC 8878, 3.1.1): every zstd-compressed v1 page's."""


def _check_codec(body, page: Page, codec: int, where: str) -> None:
    """A page compressed as the footer says: a flipped codec in the footer is otherwise read
    as another codec (v2 pages keep their levels uncompressed first: not checked)."""
    if codec == UNCOMPRESSED or page.type == DATA_PAGE_V2 or not page.compressed:
        return
    if (bytes(body[:4]) == ZSTD_MAGIC) != (codec == ZSTD):
        raise PageError(f"{where}: not compressed with the codec its footer says")


# --- the footer, read here: pyarrow's metadata objects abort the process on some flipped
# footers (an unknown codec's name, a size statistic's length), where a reader refuses them.

@dataclass(frozen=True)
class Chunk:
    """A column chunk as the footer describes it (ColumnMetaData, parquet.thrift)."""

    name: str
    type: int
    encodings: frozenset
    codec: int
    num_values: int
    uncompressed: int
    compressed: int
    data_page_offset: int
    dictionary_page_offset: int | None
    stats: dict | None
    """Its page encoding stats, {(page type, encoding): pages}; None if the writer wrote none."""

    @property
    def span(self) -> tuple[int, int]:
        """Where its stored bytes lie in the file: (start, end)."""
        start = self.data_page_offset if self.dictionary_page_offset is None else self.dictionary_page_offset
        return start, start + self.compressed


@dataclass(frozen=True)
class Footer:
    """What the check needs of a file's footer (FileMetaData)."""

    start: int
    """Where the footer starts: no page lies at or past it."""
    num_rows: int
    flat: bool
    """No repeated field: every column holds one value (or null) a row."""
    row_groups: list  # [(rows, [Chunk])]


def read_footer(source: "Source") -> Footer:
    """The file's footer, parsed (a PageError if it is not a Parquet footer)."""
    if source.size < 12:
        raise PageError("too short for a Parquet file")
    tail = source.read(source.size - 8, 8)
    length = int.from_bytes(tail[:4], "little")
    if tail[4:] != b"PAR1" or bytes(source.read(0, 4)) != b"PAR1" or length > source.size - 12:
        raise PageError("no Parquet footer")
    start = source.size - 8 - length
    meta = _Reader(memoryview(source.read(start, length))).struct()
    schema, rows = _field(meta, 2, _LIST), _field(meta, 3, _I64)
    if schema is None or rows is None or rows < 0:
        raise PageError("a footer without its schema or rows")
    levels = leaf_levels(schema)
    flat = all(rep == 0 for _, rep in levels)
    groups = [_row_group(g, levels) for g in _field(meta, 4, _LIST, [])]
    if sum(r for r, _ in groups) != rows:
        raise PageError("the footer's row groups do not add up to its rows")
    return Footer(start, rows, flat, groups)


def leaf_levels(schema: list) -> list[tuple[int, int]]:
    """Each leaf column's (max definition level, max repetition level), in the footer's
    depth-first schema (SchemaElement: 3 repetition_type, 5 num_children)."""
    levels: list[tuple[int, int]] = []
    pending = [(1, 0, 0)]  # (elements still to read at this depth, def level, rep level)
    pos = 0
    while pending:
        count, define, repeat = pending.pop()
        if count == 0:
            continue
        pending.append((count - 1, define, repeat))
        if pos >= len(schema) or not isinstance(schema[pos], dict):
            raise PageError("a footer schema shorter than it says")
        element, pos = schema[pos], pos + 1
        kind, children = _field(element, 3), _field(element, 5) or 0
        if pos > 1:  # the root's repetition says nothing of its columns
            define, repeat = define + (kind in (1, 2)), repeat + (kind == 2)
        if children < 0 or len(pending) > len(schema):
            raise PageError("a footer schema out of shape")
        if children:
            pending.append((children, define, repeat))
        elif pos > 1:
            levels.append((define, repeat))
    return levels


def _row_group(group, levels: list[tuple[int, int]]) -> tuple[int, list[Chunk]]:
    rows = _field(group, 3, _I64) if isinstance(group, dict) else None
    chunks = _field(group, 1, _LIST) if isinstance(group, dict) else None
    if rows is None or rows < 0 or chunks is None or len(chunks) != len(levels):
        raise PageError("a row group without its rows or columns")
    return rows, [_chunk(c, lv) for c, lv in zip(chunks, levels)]


def _chunk(chunk, levels: tuple[int, int]) -> Chunk:
    meta = _field(chunk, 3, _STRUCT) if isinstance(chunk, dict) else None
    if meta is None:
        raise PageError("a column chunk without its metadata")
    # Its level histograms (SizeStatistics, field 16) have a bin per level the schema allows:
    # a flipped repetition in the schema changes what its pages' levels mean.
    sizes = _field(meta, 16, _STRUCT, {})
    for histogram, level in ((_field(sizes, 3, _LIST), levels[0]), (_field(sizes, 2, _LIST), levels[1])):
        if histogram and len(histogram) != level + 1:  # (empty: left out, as a level of 0 may be)
            raise PageError("a column chunk's level histogram does not match its schema")
    ints = [_field(meta, f, t) for f, t in ((1, _I32), (4, _I32), (5, _I64), (6, _I64), (7, _I64), (9, _I64))]
    encodings, path = _field(meta, 2, _LIST), _field(meta, 3, _LIST)
    if None in ints or encodings is None or path is None or min(ints[2:]) < 0 or ints[1] not in CODECS:
        raise PageError("a column chunk's metadata is incomplete or out of range")
    dictionary = _field(meta, 11, _I64)
    name = ".".join(p.decode("utf-8", "replace") if isinstance(p, bytes) else "?" for p in path)
    return Chunk(name, ints[0], frozenset(encodings), ints[1], *ints[2:], dictionary if dictionary else None,
                 _stats(_field(meta, 13, _LIST)))


def _stats(entries) -> dict | None:
    if entries is None:
        return None
    stats: dict = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise PageError("a page encoding stat that is not one")
        key = (_stats_type(_field(entry, 1)), _field(entry, 2))
        stats[key] = stats.get(key, 0) + (_field(entry, 3) or 0)
    return stats


class Source:
    """The file being checked: its size, and reads of byte ranges (a pyarrow random-access file:
    local or S3, a ranged GET each)."""

    def __init__(self, handle):
        self.handle, self.size = handle, handle.size()

    def read(self, offset: int, nbytes: int) -> bytes:
        return self.handle.read_at(nbytes, offset)


def check_row_group(source: Source, footer: Footer, group: int) -> int:
    """Check every page of row group ``group`` of ``source`` (one read for the row group's
    chunks, which lie side by side). Returns the pages checked."""
    if not 0 <= group < len(footer.row_groups):
        raise PageError(f"no row group {group}")
    rows, chunks = footer.row_groups[group]
    if footer.flat and any(c.num_values != rows for c in chunks):
        raise PageError(f"row group {group}'s columns do not hold its rows")
    if not chunks:
        return 0
    spans = [c.span for c in chunks]
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    if first < 4 or last > footer.start:
        raise PageError(f"row group {group}'s column chunks lie outside the file's pages")
    data = memoryview(source.read(first, last - first))
    if len(data) != last - first:
        raise PageError(f"row group {group} is cut short")
    return sum(check_chunk(data[s - first:e - first], c) for (s, e), c in zip(spans, chunks))


def check_file_pages(source: Source, row_groups: list[int] | None = None) -> tuple[int, int]:
    """Check the pages of ``row_groups`` (None: all) of a file: (pages checked, rows in them).
    PageError names what is wrong; NoChecksum: a page without a CRC (check by decoding)."""
    footer = read_footer(source)
    groups = range(len(footer.row_groups)) if row_groups is None else row_groups
    pages = sum(check_row_group(source, footer, g) for g in groups)
    return pages, sum(footer.row_groups[g][0] for g in groups)
