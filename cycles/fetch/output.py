"""Crash-safe output of one fetch partition: WARC, fetched rows and outlinks, chunk by chunk.

Results are buffered and committed as a *chunk* every ``fetch.flush_s`` seconds,
``fetch.flush_pages`` results or :data:`FLUSH_BYTES` of buffered text and links. A chunk is three files sharing a name,
``part-NNNNN-cNNNNNN``, committed in this order, each atomically (a rename locally, one
object on S3 — see cycles/storage/store.py):

1. ``warc/<prefix>-<segment>-<chunk>-<host>.warc.gz``   every exchange (gzip per record,
   cycles/fetch/warc_records.py says which records), written to a local temporary file while the
   chunk fills and put into the store at commit; the name (:func:`warc_file_name`) is unique
   across segments and writers, so files from many segments can share one collection;
2. ``outlinks/<chunk>.parquet``;
3. ``fetched/<chunk>.parquet`` — the commit record: a result exists iff its row is here.

After ``kill -9``, :func:`resume_state` deletes temporary files and any WARC or outlinks
chunk without its fetched file (a chunk cut in the middle of committing), and returns the
URLs already committed so the worker does not fetch them again. Every file left behind is
complete. The same holds on S3.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
from isal import isal_zlib
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.storage.bloom import BloomFilter
from cycles.storage.store import Store, StorePath
from cycles.tables.warcs import chunk_of_warc


FLUSH_BYTES = 32 << 20
"""A chunk is committed once its buffered page texts and links reach about this many bytes.
Memory, not the page count, is what a chunk must bound: committing copies the rows into
Arrow and Parquet buffers, so a chunk peaks at ~4 times its text. With 5,000 pages of the
test web's 29 KB texts a process peaked at 760 MB and spent 0.8 s of system time on fresh
pages per 6,000 pages; with 32 MiB chunks (~1,100 of those pages) 340 MB and 0.1 s."""

WARC_BUFFER_BYTES = 1 << 20
"""Write buffer of the WARC file being filled."""

SMALL_RECORD_BYTES = 4096
"""A record up to this size is gzipped in one call (request and metadata records: two of a
page's three members), a larger one through a compressor object, part by part."""

SMALL_RECORD_LEVEL = 0
"""ISA-L level of those small records, whatever ``fetch.warc_gzip_level``: on a 390-byte
metadata record level 0 took ~1/3.5 of level 1's time for 440 bytes instead of 300 — about
280 bytes a page (~3 % of its WARC bytes) for most of the CPU the metadata record costs."""

PLAIN_COLUMNS = ("text",)
"""Columns of the fetched rows written without a Parquet dictionary: a page's text is
(nearly) never another's, so Arrow's dictionary attempt hashed ~1 MiB of texts a chunk and
then fell back to plain. A 1,500-page replay chunk (43 MB of text): 104 against 107 µs a row
at best, 106 against 115 median (alternating, 10 each, load 6), the same size (15.59 MB)."""

ROW_BYTES = 300
"""What a result row costs besides its text (URL, title, hashes, the dict), for FLUSH_BYTES."""

LINK_BYTES = 400
"""What an outlink row costs (two URLs, anchor, the dict), for FLUSH_BYTES: a rough size
rather than the exact sum, which would be a Python loop over every link."""


def chunk_name(partition: int, chunk: int) -> str:
    return f"part-{partition:05d}-c{chunk:06d}"


_HOST_UNSAFE = re.compile(r"[^A-Za-z0-9.]+")


def writer_host() -> str:
    """This machine's name as it goes into WARC file names: '-' and anything unusual become
    '_', so the name's parts stay separable."""
    return _HOST_UNSAFE.sub("_", socket.gethostname()) or "localhost"


def warc_file_name(prefix: str, segment: str, chunk: str, host: str) -> str:
    """``<prefix>-<segment>-part-NNNNN-cNNNNNN-<host>.warc.gz``: prefix, segment id (sorts by
    time), partition, chunk, writer — the order of Common Crawl's and Heritrix's names, so a
    sorted listing is in crawl order, and two segments' (or two machines') files never collide."""
    return f"{prefix}-{segment}-{chunk}-{host}.warc.gz"


def chunk_warc(store: Store, segment_dir: StorePath, name: str) -> StorePath | None:
    """The WARC file of a committed chunk, whatever its prefix and writer, if any."""
    found = store.list(segment_dir / seg.WARC, f"*{name}*.warc.gz")
    return found[0] if found else None


def chunk_entry(store: Store, segment_dir: StorePath, partition: int, name: str) -> dict:
    """What the fetch manifest (cycles/tables/segment.py ``Fetched.chunks``) says of a committed chunk
    of an earlier run of the partition: its files' row counts, read from their footers."""
    rows = {}
    for folder in (seg.FETCHED, seg.OUTLINKS):
        rows[folder] = store.read_metadata(segment_dir / folder / f"{name}.parquet").num_rows
    path = chunk_warc(store, segment_dir, name)
    warc = store.fs.get_file_info(str(path)) if path is not None else None
    found = warc is not None and warc.type == pafs.FileType.File
    return {"partition": partition, "chunk": name, "fetched_rows": rows[seg.FETCHED],
            "outlinks_rows": rows[seg.OUTLINKS], "warc_bytes": warc.size if found else None,
            "warc_file": path.name if found else None}


def resume_state(store: Store, segment_dir: StorePath, partition: int) -> tuple[set[str], int]:
    """Clean up after an interrupted run; return (URLs already committed, next chunk number)."""
    prefix = f"part-{partition:05d}-c"
    fetched_dir, outlinks_dir, warc_dir = (segment_dir / d for d in (seg.FETCHED, seg.OUTLINKS, seg.WARC))
    for folder in (fetched_dir, outlinks_dir, warc_dir, segment_dir / seg.HOSTS):
        store.remove_temporaries(folder, prefix=f"part-{partition:05d}")
    # WARC names start with a prefix and the segment (warc_file_name); a glob pattern as prefix.
    store.remove_temporaries(warc_dir, prefix=f"*-part-{partition:05d}-c")
    committed = {p.name[: -len(".parquet")] for p in store.list(fetched_dir, prefix + "*.parquet")}
    for path in store.list(outlinks_dir, prefix + "*.parquet"):
        if path.name[: -len(".parquet")] not in committed:
            store.delete(path)  # half-committed chunk: its results will be fetched again
    for path in store.list(warc_dir, f"*{prefix}*.warc.gz"):
        if chunk_of_warc(path.name) not in committed:
            store.delete(path)
    done: set[str] = set()
    for name in committed:
        done.update(store.read_table(fetched_dir / f"{name}.parquet", columns=["url"])["url"].to_pylist())
    next_chunk = 1 + max((int(n.rsplit("-c", 1)[1]) for n in committed), default=0)
    return done, next_chunk


def columns_to_table(rows: list[dict], table_schema: pa.Schema, encoded: tuple[str, ...] = (),
                     texts: TextBuffer | None = None) -> pa.Table:
    """Row dicts to an Arrow table, column by column: ``Table.from_pylist`` took ~95 µs a
    fetched row (more than parsing the page's links), this ~7 µs. The ``encoded`` string
    columns hold UTF-8 bytes (or None): they become the column as they are, without a check
    (:func:`encoded_column`), in ``texts``' memory if given."""
    data = {name: [row[name] for row in rows] for name in table_schema.names}
    for name in encoded:
        data[name] = encoded_column(data[name], table_schema.field(name).type, texts)
    return pa.Table.from_pydict(data, schema=table_schema)


_MAX_STRING_COLUMN_BYTES = (1 << 31) - 1
"""A ``string`` array's offsets are 32-bit."""


class TextBuffer:
    """Memory for a chunk's texts kept from commit to commit, refilled only while nothing
    else refers to it.

    A chunk's texts (~30 MB) joined into fresh memory each commit were more than glibc's
    heap serves (``memory.HEAP_MMAP_THRESHOLD_BYTES``), so each join was a new mmap(2) and
    ~7,500 page faults: ~18 µs a row of the replay's 1,500-row chunk, ~5 in memory already
    mapped. Session 14 kept such memory without a guard and was reverted: a table still held
    when the next chunk came would have had its texts overwritten. Here the Arrow buffer
    made from the array holds a reference to it (``pa.py_buffer``), so while any table of
    an earlier chunk lives the array's reference count says so, and a fresh one is taken."""

    def __init__(self):
        self._array: np.ndarray | None = None

    def take(self, size: int) -> np.ndarray:
        """An array of at least ``size`` bytes that no Arrow buffer refers to."""
        # getrefcount: the attribute and its own argument; any more is a live Arrow buffer.
        if self._array is None or len(self._array) < size or sys.getrefcount(self._array) > 2:
            self._array = np.empty(size + (size >> 3), dtype=np.uint8)  # room for the next chunk's to vary
        return self._array


def encoded_column(values: list[bytes | None], type_: pa.DataType, texts: TextBuffer | None = None) -> pa.Array:
    """A string array of UTF-8 bytes (or None), made from its buffers: the values joined
    (one allocation of the known size, one copy; into ``texts``' memory if given) and their
    offsets.

    ``pa.array(values, pa.binary())`` appended them to a builder that grew by reallocation,
    in fresh memory at each doubling: in the commit of scripts/bench/bench_fetch.py
    ``--replay``, :func:`columns_to_table` took ~45 µs a row of a 29 KB page text, this ~25
    (all columns). The same array (tests/fetch/test_output.py compares the Parquet bytes)."""
    count = len(values)
    nulls = values.count(None)
    filled = values if not nulls else [b"" if value is None else value for value in values]
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, filled), dtype=np.int64, count=count), out=offsets[1:])
    if offsets[-1] > _MAX_STRING_COLUMN_BYTES:  # too long for one array: Arrow's own way (chunks)
        return pa.array(values, pa.binary()).view(type_)
    data = b"".join(filled) if texts is None else _filled(texts.take(int(offsets[-1])), filled, offsets)
    validity = None
    if nulls:
        present = np.fromiter((value is not None for value in values), dtype=bool, count=count)
        validity = pa.py_buffer(np.packbits(present, bitorder="little"))
    return pa.Array.from_buffers(type_, count, [validity, pa.py_buffer(offsets.astype(np.int32)),
                                                pa.py_buffer(data)], null_count=nulls)


def _filled(array: np.ndarray, values: list[bytes], offsets: np.ndarray) -> np.ndarray:
    """``array`` holding the values one after another (its first ``offsets[-1]`` bytes)."""
    view = memoryview(array)
    for value, start, end in zip(values, offsets.tolist(), offsets[1:].tolist()):
        view[start:end] = value
    return array[: offsets[-1]]


_BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_BASE32_PAIRS = [a + b for a in _BASE32 for b in _BASE32]  # 10 bits -> 2 characters


def sha1_label(digest: bytes, p: list[str] = _BASE32_PAIRS) -> str:
    """``sha1:`` and the base32 of a 20-byte SHA-1 digest, as WARC digests are written:
    ``"sha1:" + base64.b32encode(digest)``, which is pure Python in 3.11 and took ~10 µs a
    digest (four digests a page); 160 bits are 16 table lookups of 10 bits, no padding,
    written out in one f-string: 1.4 µs, where a list comprehension over the shifts and a
    join took 2.9 (the loop's frame and the list; ``p`` is bound at definition, a local)."""
    b = int.from_bytes(digest, "big")
    return (f"sha1:{p[b >> 150]}{p[b >> 140 & 1023]}{p[b >> 130 & 1023]}{p[b >> 120 & 1023]}"
            f"{p[b >> 110 & 1023]}{p[b >> 100 & 1023]}{p[b >> 90 & 1023]}{p[b >> 80 & 1023]}"
            f"{p[b >> 70 & 1023]}{p[b >> 60 & 1023]}{p[b >> 50 & 1023]}{p[b >> 40 & 1023]}"
            f"{p[b >> 30 & 1023]}{p[b >> 20 & 1023]}{p[b >> 10 & 1023]}{p[b & 1023]}")


def _make_warc_id() -> str:
    """A WARC-Record-ID, ``<urn:uuid:...>`` of a random (version 4) UUID, as warcio's
    ``make_warc_id`` writes it; formatted here from 16 random bytes: ``uuid.uuid4()``'s
    object took ~3 µs, three times a page."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"<urn:uuid:{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}>"

_EMPTY_SHA1 = sha1_label(hashlib.sha1(b"").digest())  # the payload digest of every request record

WARC_CONTENT_TYPES = {"response": "application/http; msgtype=response",
                      "revisit": "application/http; msgtype=response",
                      "request": "application/http; msgtype=request"}


def payload_label(payload: bytes) -> str:
    """The WARC-Payload-Digest of a payload (``sha1:`` base32)."""
    return sha1_label(hashlib.sha1(payload).digest()) if payload else _EMPTY_SHA1


def http_head(protocol: str, statusline: str, headers: list[tuple[str, str]]) -> bytes:
    """An HTTP message's header block, byte for byte as warcio's
    ``StatusAndHeaders(statusline, headers, protocol=protocol).compute_headers_buffer()`` makes
    it, formatted directly: warcio's object copied the header list, joined the block by
    repeated string concatenation and cost ~15 µs of a page's two records. Non-ASCII values
    (rare: servers should send ASCII) still go through warcio, which %-encodes them (RFC 8187)."""
    start = f"{protocol} {statusline}" if protocol and statusline else protocol or statusline
    text = (start + "\r\n" if start else "") + "".join([f"{name}: {value}\r\n" for name, value in headers])
    try:
        return text.encode("ascii") + b"\r\n"
    except UnicodeEncodeError:
        warcio_headers = StatusAndHeaders(statusline, headers, protocol=protocol)
        warcio_headers.compute_headers_buffer()
        return warcio_headers.headers_buff


def request_head(request_line: str, headers: list[tuple[str, str]]) -> bytes:
    """An HTTP request's header block (warcio: ``StatusAndHeaders(request_line, headers,
    is_http_request=True)``, which splits the method off the line and joins it back)."""
    method, _, rest = request_line.partition(" ")
    return http_head(method, rest, headers)


def response_head(status_line: str, headers: list[tuple[str, str]]) -> bytes:
    """An HTTP response's header block (warcio: ``StatusAndHeaders(reason or protocol,
    headers, protocol=protocol)`` from ``HTTP/1.1 200 OK``)."""
    protocol, _, reason = status_line.partition(" ")
    return http_head(protocol, reason or protocol, headers)


def _http_record(record_type: str, record_id: str, url: str, extra: list[tuple[str, str]],
                 head: bytes, payload: bytes,
                 payload_digest: str | None = None) -> tuple[bytes, bytes, bytes, bytes]:
    """A WARC/1.1 record of an HTTP message as its parts: WARC header block, HTTP header
    block (``head``: :func:`request_head`, :func:`response_head`), payload, end of record
    (ISO 28500 §4-5).

    The same record as warcio's WARCWriter writes (tests/fetch/test_output.py compares them,
    and ``warcio check`` validates the files), without its per-record overhead: it scans
    its header list for every header it sets (~130 str.lower() calls a page), reads the
    payload through a Python loop for each digest, spools the request's empty payload to a
    temporary file and base32-encodes in Python. A page's pair cost ~80 µs besides the gzip
    through warcio's record builder, ~63 µs so, of which ~35 µs are the two SHA-1 of the body. The digests (§5.8, §5.9) are SHA-1: the block is the HTTP header block and
    the payload; the payload is the entity body as received (content-coded), as warcio has it.
    The WARC header block is formatted directly too (as ``StatusAndHeaders("", headers,
    protocol="WARC/1.1").to_bytes()``: our field values are str, UTF-8 encoded).
    """
    block = hashlib.sha1(head)
    block.update(payload)
    fields = "".join([f"{name}: {value}\r\n" for name, value in extra])
    warc_head = (f"WARC/1.1\r\nWARC-Type: {record_type}\r\nWARC-Record-ID: {record_id}\r\n"
                 f"WARC-Target-URI: {url}\r\n{fields}"
                 f"WARC-Payload-Digest: {payload_digest or payload_label(payload)}\r\n"
                 f"WARC-Block-Digest: {sha1_label(block.digest())}\r\n"
                 f"Content-Type: {WARC_CONTENT_TYPES[record_type]}\r\n"
                 f"Content-Length: {len(head) + len(payload)}\r\n\r\n")
    return warc_head.encode("utf-8"), head, payload, b"\r\n\r\n"


def link_source_host(from_url: str) -> str:
    """The authority of an absolute http(s) URL, cheaply (``scheme://authority/...``)."""
    return from_url.split("/", 3)[2] if from_url.count("/") >= 2 else from_url


class PartitionOutput:
    """Buffers results of one partition and commits them chunk by chunk."""

    def __init__(self, store: Store, segment: str, segment_dir: StorePath, partition: int,
                 first_chunk: int, user_agent: str, gzip_level: int = 1,
                 bloom: BloomFilter | None = None, flush_bytes: int = FLUSH_BYTES,
                 warc_prefix: str = "CRAWL", warcinfo: dict | None = None):
        self.store = store
        self.gzip_level = min(isal_zlib.ISAL_BEST_COMPRESSION, max(0, gzip_level))  # ISA-L has levels 0..3
        self.bloom = bloom
        self.bloom_dropped = 0
        self.segment = segment
        self.dir = segment_dir
        self.partition = partition
        self.chunk = first_chunk
        self.first_chunk = first_chunk
        self.chunks: list[dict] = []
        """The manifest entries of the chunks this run committed (see :meth:`manifest`)."""
        self.user_agent = user_agent
        self.rows: list[dict] = []
        self.texts = TextBuffer()
        """Memory of the committed texts, reused while no earlier chunk's table holds it."""
        self.links: list[dict] = []
        self.sitemap_rows: list[dict] = []
        """URLs the hosts' sitemaps listed (schema.SITEMAP_URLS), committed with the chunk."""
        self.flush_bytes = flush_bytes
        self.buffered_bytes = 0
        """Approximate size of rows and links (see FLUSH_BYTES)."""
        self.warc_prefix = warc_prefix
        self.warcinfo = warcinfo or {}
        """Fields of each file's warcinfo record besides the standard ones (cycles/fetch/warc_records.py)."""
        self.host = writer_host()
        self._warc_tmp: Path | None = None
        self._warc_fh = None
        self._warc_end = 0
        """Bytes written to the current WARC file: the next record's offset. (The file's
        tell() is an lseek(2) each time, three a page.)"""
        self._warc_path: tuple[int, str] = (-1, "")
        """(chunk, :meth:`warc_path` of that chunk)."""
        self.last_flush = time.monotonic()
        if store.local:
            for sub in (seg.FETCHED, seg.OUTLINKS, seg.WARC):
                (self.dir / sub).mkdir(parents=True, exist_ok=True)

    # --- WARC -------------------------------------------------------------------------
    # Records are gzipped here, one member per record (ISO 28500 annex D.2), with ISA-L's
    # deflate at fetch.warc_gzip_level: warcio's own gzip (zlib, level 9) cost more CPU than
    # parsing the page, and zlib at level 1 still 3.3x ISA-L's level 1 for the same size
    # (measured by scripts/bench_fetch.py). The warcinfo record is made and
    # written by warcio's WARCWriter; the request and response records are framed here from
    # warcio's header blocks (StatusAndHeaders) and record ids, see _http_record.

    def warc_name(self) -> str:
        """The name of the current chunk's WARC file (:func:`warc_file_name`)."""
        return warc_file_name(self.warc_prefix, self.segment, chunk_name(self.partition, self.chunk), self.host)

    def warc_path(self) -> str:
        """The current WARC file relative to the segment, as fetched rows record it (asked
        for every archived exchange: made once a chunk, not formatted anew each time)."""
        if self._warc_path[0] != self.chunk:
            self._warc_path = (self.chunk, f"{seg.WARC}/{self.warc_name()}")
        return self._warc_path[1]

    def _open_warc(self) -> None:
        if self._warc_fh is None:
            name = self.warc_name()
            self._warc_tmp = self.store.staging_file(self.dir / seg.WARC / name)
            # A 1 MiB buffer: one write(2) per ~80 pages rather than one or two per page.
            self._warc_fh = open(self._warc_tmp, "wb", buffering=WARC_BUFFER_BYTES)
            self._warc_end = 0
            buffer = io.BytesIO()
            writer = WARCWriter(buffer, gzip=False, warc_version="1.1")
            # The record's WARC-Filename is the file's own name (warcio sets it from `name`).
            writer.write_record(writer.create_warcinfo_record(name, {
                "software": "crawl/0.1 (cycles)", "format": "WARC File Format 1.1",
                "conformsTo": "https://iso.org/standard/68004", "isPartOf": self.segment,
                "hostname": socket.gethostname(), "http-header-user-agent": self.user_agent,
                **self.warcinfo}))
            self._append(buffer.getvalue())

    def write_records(self, *records: tuple[bytes, ...]) -> list[tuple[int, int]]:
        """Append records (each given as its parts), each its own gzip member; returns the
        (offset, length) of each. Opens the chunk's file (with its warcinfo) if needed."""
        self._open_warc()
        return [self._append(*record) for record in records]

    def _append(self, *parts: bytes) -> tuple[int, int]:
        """Write one record, given as consecutive parts, as its own gzip member; returns
        (offset, length) in the file."""
        if sum(map(len, parts)) <= SMALL_RECORD_BYTES:
            # A request or metadata record: one call, at ISA-L's level 0 (module constant).
            member = isal_zlib.compress(b"".join(parts), SMALL_RECORD_LEVEL, 31)  # 31: gzip container
        else:
            packer = isal_zlib.compressobj(self.gzip_level, isal_zlib.DEFLATED, 31)
            member = b"".join([packer.compress(part) for part in parts] + [packer.flush()])
        offset = self._warc_end
        self._warc_fh.write(member)
        self._warc_end += len(member)
        return offset, len(member)

    def write_response(self, url: str, ip: str | None, request_headers: list[tuple[str, str]],
                       request_line: str, status_line: str, response_headers: list[tuple[str, str]],
                       raw_body: bytes, fetched_at: str) -> tuple[str, int, int]:
        """Append a request/response pair; return (file, offset, length) of the response record."""
        self._open_warc()
        common = [("WARC-Date", fetched_at)]
        if ip:
            common.append(("WARC-IP-Address", ip))
        response_id = _make_warc_id()
        response = _http_record("response", response_id, url, common, response_head(status_line, response_headers),
                                raw_body)
        request = _http_record("request", _make_warc_id(), url, common + [("WARC-Concurrent-To", response_id)],
                               request_head(request_line, request_headers), b"")
        offset, length = self._append(*response)
        self._append(*request)
        return self.warc_path(), offset, length

    # --- rows -------------------------------------------------------------------------
    def add(self, row: dict, links: list[dict]) -> None:
        text = row.get("text")
        if text is not None:
            # UTF-8 now, while the page's text is still in the CPU's caches: converted at the
            # commit, a chunk's texts (read back from memory, each encoded and cached inside
            # its str, then copied) cost ~20 µs a row more (scripts/bench_fetch.py --replay).
            row["text"] = text.encode("utf-8")
        self.rows.append(row)
        self.links.extend(links)
        self.buffered_bytes += ROW_BYTES + len(row.get("text") or "") + LINK_BYTES * len(links)

    def add_sitemap_urls(self, rows: list[dict]) -> None:
        """URLs a sitemap listed: written with the next chunk (``sitemaps/<chunk>.parquet``)."""
        self.sitemap_rows.extend(rows)
        self.buffered_bytes += LINK_BYTES * len(rows)

    def due(self, flush_s: float, flush_pages: int) -> bool:
        return bool(self.rows) and (len(self.rows) >= flush_pages or self.buffered_bytes >= self.flush_bytes
                                    or time.monotonic() - self.last_flush >= flush_s)

    def flush(self) -> int:
        """Commit the buffered results as one chunk; returns rows committed."""
        self.last_flush = time.monotonic()
        if not self.rows:
            return 0
        name = chunk_name(self.partition, self.chunk)
        warc_bytes = warc_file = None
        if self._warc_fh is not None:
            self._warc_fh.flush()
            os.fsync(self._warc_fh.fileno())
            warc_bytes = self._warc_fh.tell()
            self._warc_fh.close()
            warc_file = self.warc_name()
            self.store.put_file(self._warc_tmp, self.dir / seg.WARC / warc_file)
            self._warc_fh = self._warc_tmp = None
        links = self.links
        if self.bloom is not None and links:
            # Navigation links repeat on every page of a site: write each link once per
            # partition and linking host (probably — see cycles/storage/bloom.py for what a false
            # positive costs). Per linking host, not once in all: the link DB counts the
            # distinct hosts linking to a URL (cycles/update/linkgraph.py), and update drops
            # the links of a page it finds to be a copy — a link kept only from a mirror's
            # page was lost with it although another host linked to it too.
            keep = self.bloom.add_new([f"{link_source_host(link['from_url'])} {link['url']}" for link in links])
            self.bloom_dropped += len(links) - int(keep.sum())
            # A link fetched inline (cycles/fetch/discovery.py) is always written: update
            # takes the new row's depth and score from it.
            links = [link for link, new in zip(links, keep) if new or link.get("inline")]
        self.store.write_table(self.dir / seg.OUTLINKS / f"{name}.parquet",
                               columns_to_table(links, schema.OUTLINKS), schema.OUTLINKS)
        if self.sitemap_rows:  # before the fetched rows: a chunk's fetched file is its commit
            self.store.write_table(self.dir / seg.SITEMAPS / f"{name}.parquet",
                                   columns_to_table(self.sitemap_rows, schema.SITEMAP_URLS), schema.SITEMAP_URLS)
            self.sitemap_rows = []
        self.store.write_table(self.dir / seg.FETCHED / f"{name}.parquet",
                               columns_to_table(self.rows, schema.FETCHED, encoded=("text",), texts=self.texts),
                               schema.FETCHED,
                               plain=PLAIN_COLUMNS)
        committed = len(self.rows)
        self.chunks.append({"partition": self.partition, "chunk": name, "fetched_rows": committed,
                            "outlinks_rows": len(links), "warc_bytes": warc_bytes, "warc_file": warc_file})
        self.rows, self.links = [], []
        self.buffered_bytes = 0
        self.chunk += 1
        return committed

    def manifest(self) -> list[dict]:
        """Every chunk of the partition: those earlier runs committed (read back from their
        footers) and this run's, as committed. Update checks the segment against it."""
        earlier = sorted(p.name[: -len(".parquet")] for p in self.store.list(
            self.dir / seg.FETCHED, f"{seg.part_name(self.partition)}-c*.parquet"))
        earlier = [n for n in earlier if int(n.rsplit("-c", 1)[1]) < self.first_chunk]
        return [chunk_entry(self.store, self.dir, self.partition, n) for n in earlier] + self.chunks

    def close(self) -> int:
        committed = self.flush()
        if self._warc_fh is not None:  # a WARC opened but no row to commit: discard it
            self._warc_fh.close()
            self._warc_tmp.unlink(missing_ok=True)
        return committed
