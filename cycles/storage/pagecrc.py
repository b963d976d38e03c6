"""Parquet page checksums checked on the stored bytes: nothing decompressed, nothing decoded.

Parquet's ``PageHeader`` (apache/parquet-format, src/main/thrift/parquet.thrift) carries an
optional ``crc`` (field 4): the standard CRC-32 (zlib's) of the page as stored after its
header — compressed, for v1 data pages the levels and values together, for v2 pages and
dictionary pages alike. pyarrow checks it only while decoding every value of every column
(0.76-0.96 CPU-s for one 149 MB base of a 10 M-URL crawl DB, docs/incremental.md); reading the
bytes and computing their CRC costs ~0.13. So each column chunk is walked here page by page,
from the chunk offsets of the footer: each header is parsed (Thrift compact protocol, only the
fields below; the others skipped), the page's bytes checked against its CRC.

A page header is not covered by its CRC, so the walk also checks what the footer says about
the chunk: the pages tile it exactly (compressed sizes), their uncompressed sizes add up to
the footer's, their values to its ``num_values``, and each page's encoding is one the footer
lists. A flipped bit in a header that changes a size, a count or an encoding is refused, as
a decoder would have refused it.

No library does this without decoding: pyarrow (Arrow C++) checks CRCs in its page reader,
which it does not expose without decompressing and decoding; DuckDB and Polars check none;
fastparquet parses page headers, but would be a second Parquet implementation to install for
~100 lines of header parsing.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import pyarrow.parquet as pq

# Thrift compact protocol type ids (thrift/doc/specs/thrift-compact-protocol.md).
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
_UUID = 13

# PageType (parquet.thrift): the pages a column chunk may hold.
DATA_PAGE, INDEX_PAGE, DICTIONARY_PAGE, DATA_PAGE_V2 = 0, 1, 2, 3

ENCODINGS = {0: "PLAIN", 2: "PLAIN_DICTIONARY", 3: "RLE", 4: "BIT_PACKED", 5: "DELTA_BINARY_PACKED",
             6: "DELTA_LENGTH_BYTE_ARRAY", 7: "DELTA_BYTE_ARRAY", 8: "RLE_DICTIONARY", 9: "BYTE_STREAM_SPLIT"}
"""Parquet's Encoding enum, by the names pyarrow gives a column chunk's ``encodings``."""


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
        """One value of type ``ftype``: an int, a list, a struct (dict); None for what this
        check never looks at (strings, doubles, maps, booleans)."""
        if ftype in (_BYTE, _I16, _I32, _I64):
            return self.byte() if ftype == _BYTE else self.zigzag()
        if ftype in (_TRUE, _FALSE):
            return None
        if ftype == _STRUCT:
            return self.struct(depth + 1)
        if ftype in (_LIST, _SET):
            return self._list(depth)
        if ftype in (_DOUBLE, _UUID, _BINARY):
            self.take(8 if ftype == _DOUBLE else 16 if ftype == _UUID else self.varint())
            return None
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


def _check_page(page: Page, number: int, column: pq.ColumnChunkMetaData, allowed: set) -> None:
    """What a page header must agree with in its footer (the header has no CRC of its own)."""
    where = f"page {number} of column {column.path_in_schema}"
    if (page.type == DICTIONARY_PAGE) != (number == 0 and column.has_dictionary_page):
        raise PageError(f"{where}: a dictionary page out of place")
    if any(ENCODINGS.get(e) not in allowed for e in (page.encoding, *page.levels)):
        raise PageError(f"{where}: an encoding its footer does not list")
    if any(e not in LEVEL_ENCODINGS for e in page.levels):
        raise PageError(f"{where}: levels in an encoding levels never have")
    width = PLAIN_WIDTH.get(column.physical_type)
    if page.type == DICTIONARY_PAGE and width and page.uncompressed != width * page.num_values:
        raise PageError(f"{where}: a dictionary whose size is not its entries'")
    if page.crc is None:
        raise NoChecksum(column.path_in_schema)


PLAIN_WIDTH = {"INT32": 4, "INT64": 8, "FLOAT": 4, "DOUBLE": 8, "INT96": 12}
"""Bytes a value of these types takes PLAIN-encoded: a dictionary page of them is exactly its
entries (its count, in the header only, is otherwise held to nothing). A dictionary of
strings (BYTE_ARRAY) has its count checked by nothing short of decompressing it: a flipped
bit there is left to the reader, which then finds indices past the dictionary's end."""


LEVEL_ENCODINGS = (3, 4)
"""RLE, BIT_PACKED: the encodings of a v1 data page's levels (parquet.thrift)."""


def check_chunk(buf, column: pq.ColumnChunkMetaData, footer: FooterChunk | None = None) -> int:
    """Check every page of one column chunk (``buf``: its stored bytes, as the footer places
    them): each page's CRC, and that the pages add up to what the footer says of the chunk
    (``footer``: what pyarrow does not say). Returns the pages checked; NoChecksum for a
    page written without a CRC."""
    name = column.path_in_schema
    if len(buf) != column.total_compressed_size:
        raise PageError(f"column {name} is cut short")
    footer = footer or FooterChunk(None, None)
    allowed, seen, first_data = set(column.encodings), {}, column.data_page_offset - chunk_span(column)[0]
    pos = pages = values = uncompressed = 0
    while pos < len(buf):
        page = read_page_header(buf, pos)
        if page.type != DICTIONARY_PAGE and first_data is not None:
            if pos != first_data:
                raise PageError(f"column {name}'s first data page is not where its footer says")
            first_data = None
        start, pos = pos + page.header_bytes, pos + page.header_bytes + page.compressed
        if pos > len(buf):
            raise PageError(f"a page of column {name} runs past its column chunk")
        _check_page(page, pages, column, allowed)
        _check_codec(buf[start:pos], page, footer.codec, f"page {pages} of column {name}")
        if zlib.crc32(buf[start:pos]) != page.crc:
            raise PageError(f"page {pages} of column {name} fails its CRC")
        pages += 1
        uncompressed += page.header_bytes + page.uncompressed
        values += 0 if page.type == DICTIONARY_PAGE else page.num_values
        key = (_stats_type(page.type), page.encoding)
        seen[key] = seen.get(key, 0) + 1
    if (values != column.num_values or uncompressed != column.total_uncompressed_size
            or (footer.stats and seen != footer.stats)):
        raise PageError(f"column {name}'s pages do not add up to what its footer says")
    return pages


def _stats_type(page_type: int) -> int:
    # Writers record a v2 data page as DATA_PAGE in the stats (Arrow does), or as itself.
    return DATA_PAGE if page_type == DATA_PAGE_V2 else page_type


@dataclass(frozen=True)
class FooterChunk:
    """What the footer says of a column chunk that pyarrow does not expose, or aborts the
    process on when it is not a known value (the codec)."""

    stats: dict | None
    """Its page encoding stats, {(page type, encoding): pages}; None if the writer wrote none."""
    codec: int | None


def footer_chunks(source: "Source", metadata: pq.FileMetaData) -> list[list[FooterChunk]]:
    """Per row group, per column chunk, :class:`FooterChunk` (the footer read again here, as
    Thrift: FileMetaData.row_groups[].columns[].meta_data)."""
    size = metadata.serialized_size
    reader = _Reader(memoryview(source.read(source.size - 8 - size, size)))
    groups = _field(reader.struct(), 4, _LIST, [])
    return [[_footer_chunk(chunk) for chunk in _field(group, 1, _LIST, [])] for group in groups]


def _footer_chunk(chunk: dict) -> FooterChunk:
    meta = _field(chunk, 3, _STRUCT, {})
    entries = _field(meta, 13, _LIST)
    if entries is None:
        return FooterChunk(None, _field(meta, 4))
    stats: dict = {}
    for entry in entries:
        key = (_stats_type(_field(entry, 1)), _field(entry, 2))
        stats[key] = stats.get(key, 0) + (_field(entry, 3) or 0)
    return FooterChunk(stats, _field(meta, 4))


UNCOMPRESSED, ZSTD, CODECS = 0, 6, range(8)
"""CompressionCodec (parquet.thrift): none, zstd, and the values that name a codec."""

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
"""The first bytes of a zstd frame (RFC 8878, 3.1.1): every zstd-compressed v1 page's."""


def _check_codec(body, page: Page, codec: int | None, where: str) -> None:
    """A page compressed as the footer says: a flipped codec in the footer is otherwise read
    as another codec (v2 pages keep their levels uncompressed first: not checked)."""
    if codec is not None and codec not in CODECS:
        raise PageError(f"{where}: an unknown compression codec {codec}")
    if codec is None or codec == UNCOMPRESSED or page.type == DATA_PAGE_V2 or not page.compressed:
        return
    if (bytes(body[:4]) == ZSTD_MAGIC) != (codec == ZSTD):
        raise PageError(f"{where}: not compressed with the codec its footer says")


def chunk_span(column: pq.ColumnChunkMetaData) -> tuple[int, int]:
    """Where a column chunk's stored bytes lie in the file: (start, end)."""
    start = column.data_page_offset
    if column.has_dictionary_page and column.dictionary_page_offset:
        start = column.dictionary_page_offset
    return start, start + column.total_compressed_size


class Source:
    """The file being checked: its size, and reads of byte ranges (a pyarrow random-access file:
    local or S3, a ranged GET each)."""

    def __init__(self, handle):
        self.handle, self.size = handle, handle.size()

    def read(self, offset: int, nbytes: int) -> bytes:
        return self.handle.read_at(nbytes, offset)


def check_row_group(source: Source, metadata: pq.FileMetaData, group: int,
                    footer: list[FooterChunk] | None = None) -> int:
    """Check every page of row group ``group`` of ``source`` (one read for the row group's
    chunks, which lie side by side; ``footer``: :func:`footer_chunks` of it). Returns the
    pages checked."""
    row_group = metadata.row_group(group)
    columns = [row_group.column(i) for i in range(row_group.num_columns)]
    flat = [metadata.schema.column(i).max_repetition_level == 0 for i in range(row_group.num_columns)]
    if any(f and c.num_values != row_group.num_rows for f, c in zip(flat, columns)):
        raise PageError(f"row group {group}'s columns do not hold its rows")
    spans = [chunk_span(c) for c in columns]
    if not spans:
        return 0
    footer = footer if footer is not None and len(footer) == len(columns) else [None] * len(columns)
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    end = source.size - 8 - metadata.serialized_size  # no page lies in or past the footer
    if first < 4 or last > end:
        raise PageError(f"row group {group}'s column chunks lie outside the file's pages")
    data = memoryview(source.read(first, last - first))
    if len(data) != last - first:
        raise PageError(f"row group {group} is cut short")
    return sum(check_chunk(data[s - first:e - first], c, f) for (s, e), c, f in zip(spans, columns, footer))


def check_file_pages(source: Source, metadata: pq.FileMetaData, row_groups: list[int] | None = None) -> int:
    """Check the pages of ``row_groups`` (None: all) of a file; returns the pages checked.
    PageError names what is wrong; NoChecksum: a page without a CRC (check by decoding)."""
    groups = range(metadata.num_row_groups) if row_groups is None else row_groups
    footer = footer_chunks(source, metadata)
    rows = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
    if len(footer) != metadata.num_row_groups or sum(rows) != metadata.num_rows or min(rows, default=0) < 0:
        raise PageError("the footer's row groups do not add up to its rows")
    return sum(check_row_group(source, metadata, g, footer[g]) for g in groups)
