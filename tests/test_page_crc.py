"""The page check on stored bytes (cycles/storage/pagecrc.py): every page's CRC checked without
decompressing it, and the files it refuses are the ones the decoding check (pyarrow reading
every value, :func:`decode_parquet_file`, the check before it) refuses.
"""

from __future__ import annotations

import datetime as dt
import zlib

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cycles.errors import StoreError
from cycles.storage import pagecrc
from cycles.storage.parquet import decode_parquet_file, verify_parquet_file
from cycles.storage.sql import literal
from cycles.storage.store import Store
from tests.support.corruption import flip_a_bit_in_a_data_page

ROWS = 400


def crawl_like_table(rows: int = ROWS) -> pa.Table:
    """Strings with a dictionary, nullable integers, small integers, times, doubles."""
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    return pa.table({
        "url": [f"http://h{i % 7}.example/page/{i}" for i in range(rows)],
        "host": [f"h{i % 7}.example" for i in range(rows)],
        "links": pa.array([i * 7919 if i % 5 else None for i in range(rows)], pa.int64()),
        "status": pa.array([i % 3 for i in range(rows)], pa.int16()),
        "next_fetch": pa.array([start + dt.timedelta(hours=i) for i in range(rows)], pa.timestamp("us", tz="UTC")),
        "score": pa.array([i / 3 for i in range(rows)], pa.float64()),
    })


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path / "store")


@pytest.fixture
def written(store):
    """A file as the store writes every crawl DB file (zstd, page checksums), two row groups."""
    table = crawl_like_table()
    path = store.path("t", "bucket.parquet")
    store.write_batches(path, iter(table.to_batches(max_chunksize=100)), table.schema, row_group_rows=ROWS // 2)
    return path


def refused(check, path) -> bool:
    try:
        check(path)
    except StoreError as exc:
        assert "\n" not in str(exc) and "corrupt" in str(exc) and str(path) in str(exc)
        return True
    return False


def page_headers(path, group: int, column: str):
    """(offset in the file, header) of each page of one column chunk."""
    start, end = footer_chunk(path, group, column).span
    data, pos, pages = path.read_bytes(), start, []
    while pos < end:
        page = pagecrc.read_page_header(data, pos)
        pages.append((pos, page))
        pos += page.header_bytes + page.compressed
    return pages


def footer_chunk(path, group: int, column: str) -> pagecrc.Chunk:
    with pa.OSFile(str(path)) as handle:
        footer = pagecrc.read_footer(pagecrc.Source(handle))
    names = pq.read_metadata(path).schema.names
    return footer.row_groups[group][1][names.index(column)]


def check_pages(path) -> int:
    with pa.OSFile(str(path)) as handle:
        return pagecrc.check_file_pages(pagecrc.Source(handle))[0]


def flip(path, offset: int, bit: int = 0x10) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= bit
    path.write_bytes(bytes(data))


def test_every_page_of_a_written_file_is_checked_against_its_crc(written):
    """Positive control that the check reads real pages: each page's header CRC is zlib's
    CRC-32 of its stored (compressed) bytes, and the walk reaches every page of every chunk."""
    metadata = pq.read_metadata(written)
    data = written.read_bytes()
    pages = 0
    for group in range(metadata.num_row_groups):
        for column in metadata.schema.names:
            for offset, page in page_headers(written, group, column):
                body = data[offset + page.header_bytes:offset + page.header_bytes + page.compressed]
                assert page.crc == zlib.crc32(body)
                pages += 1
    assert check_pages(written) == pages
    assert pages >= 2 * len(metadata.schema.names)  # a dictionary page and a data page at least
    assert verify_parquet_file(written) == decode_parquet_file(written) == ROWS


def test_a_page_whose_crc_is_wrong_is_refused(written):
    """The header's CRC itself changed (the page's bytes intact): refused by both checks, so
    the new one compares the CRC pyarrow compares; set back, both accept the file."""
    offset, page = page_headers(written, 0, "links")[-1]  # a data page
    data = written.read_bytes()
    # PageHeader fields 1-3 (type, sizes), then field 4: the CRC, a zigzag varint.
    reader = pagecrc._Reader(data, offset)
    for _ in range(3):
        reader.byte()
        reader.varint()
    assert reader.byte() == 0x15  # field 4 (delta 1), i32
    flip(written, reader.pos, 0x02)  # a bit of the CRC's value, not of its varint's length
    assert pagecrc.read_page_header(written.read_bytes(), offset).crc != page.crc
    assert refused(decode_parquet_file, written) and refused(verify_parquet_file, written)
    flip(written, reader.pos, 0x02)
    assert not refused(decode_parquet_file, written) and not refused(verify_parquet_file, written)


def _dictionary_page_byte(path) -> int:
    offset, page = page_headers(path, 0, "host")[0]
    assert page.type == pagecrc.DICTIONARY_PAGE
    return offset + page.header_bytes + page.compressed // 2


def _footer_chunk_offset_byte(path) -> int:
    """The first byte of where the footer says a column chunk starts (its dictionary page's
    offset, ColumnMetaData field 11, an i64 zigzag varint): the footer says it wrongly."""
    metadata = pq.read_metadata(path)
    offset = footer_chunk(path, 1, "links").span[0]
    data = path.read_bytes()
    footer = len(data) - 8 - metadata.serialized_size
    value, encoded = offset << 1, bytearray()
    while True:
        encoded.append((value & 0x7F) | (0x80 if value >> 7 else 0))
        value >>= 7
        if not value:
            break
    at = data.index(bytes(encoded), footer)
    assert data[at - 1] & 0x0F == 6  # an i64 field
    return at


DAMAGE = {
    "a data page's values": lambda p: flip_a_bit_in_a_data_page(p, column="links", row_group=1),
    "a dictionary page": lambda p: flip(p, _dictionary_page_byte(p)),
    "the footer's chunk offset": lambda p: flip(p, _footer_chunk_offset_byte(p), 0x02),
    "the footer's length": lambda p: flip(p, p.stat().st_size - 6, 0x40),
    "a truncated file": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "a file cut by its last byte": lambda p: p.write_bytes(p.read_bytes()[:-1]),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damage_the_decoding_check_refused_is_refused(written, damage):
    assert not refused(verify_parquet_file, written)  # positive control: intact, accepted
    DAMAGE[damage](written)
    assert refused(decode_parquet_file, written)
    assert refused(verify_parquet_file, written)


def test_every_flipped_bit_in_the_pages_the_decoding_check_refuses_is_refused(tmp_path):
    """Each byte of the pages of a small file (headers included: they have no CRC of their
    own, so the check holds them to the footer), one bit flipped at a time."""
    path = tmp_path / "small.parquet"
    pq.write_table(crawl_like_table(60).select(["url", "links", "status"]), path, compression="zstd",
                   write_page_checksum=True)
    original = path.read_bytes()
    pages_end = len(original) - 8 - pq.read_metadata(path).serialized_size
    missed, decoder_refused = [], 0
    for offset in range(4, pages_end):
        damaged = bytearray(original)
        damaged[offset] ^= 0x10
        path.write_bytes(bytes(damaged))
        if refused(decode_parquet_file, path):
            decoder_refused += 1
            if not refused(verify_parquet_file, path):
                missed.append(offset)
    assert decoder_refused > (pages_end - 4) // 2  # the flips were damage the decoder sees
    # The one gap: the entry count of a dictionary of strings, held to nothing but the
    # decompressed page (pagecrc.PLAIN_WIDTH). DuckDB then refuses the file itself.
    offset, page = page_headers(path, 0, "url")[0]
    assert page.type == pagecrc.DICTIONARY_PAGE
    count_bytes = range(offset, offset + page.header_bytes)
    assert all(o in count_bytes for o in missed), missed
    for o in missed:
        damaged = bytearray(original)
        damaged[o] ^= 0x10
        path.write_bytes(bytes(damaged))
        with pytest.raises(duckdb.Error):
            duckdb.sql(f"SELECT * FROM read_parquet({literal(str(path))})").fetchall()


def test_a_file_written_without_checksums_is_decoded_instead(tmp_path):
    """Older files, or another writer's: no CRC to compare, so the whole file is decoded (the
    check every file had before); the stored-bytes check says so rather than passing it."""
    path = tmp_path / "no-crc.parquet"
    pq.write_table(crawl_like_table(), path, compression="zstd", write_page_checksum=False)
    with pytest.raises(pagecrc.NoChecksum):
        check_pages(path)
    assert verify_parquet_file(path) == ROWS
    path.write_bytes(path.read_bytes()[:-100])
    assert refused(verify_parquet_file, path)


def test_only_the_row_groups_asked_for_are_checked(written, store):
    """Generate checks the row groups its due scan reads: damage in another one is not read
    (and is refused once that row group is asked for: the positive control)."""
    flip_a_bit_in_a_data_page(written, column="links", row_group=1)
    assert verify_parquet_file(written, row_groups=[0]) == ROWS // 2
    store.verify_row_groups(written, [0])
    with pytest.raises(StoreError, match="corrupt"):
        store.verify_row_groups(written, [1])
    assert refused(verify_parquet_file, written)


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_data_pages_of_both_versions_and_many_pages_a_chunk(tmp_path, version):
    path = tmp_path / "pages.parquet"
    pq.write_table(crawl_like_table(5000), path, compression="zstd", write_page_checksum=True,
                   data_page_size=2048, data_page_version=version, row_group_size=2000)
    pages = check_pages(path)
    assert pages > 3 * 6 * 2  # several pages a chunk
    flip_a_bit_in_a_data_page(path, column="links", row_group=2)
    assert refused(verify_parquet_file, path)


def test_a_flipped_bit_anywhere_in_the_footer_is_accepted_or_refused_in_one_line(written):
    """The footer is parsed here, not by pyarrow's metadata objects: some flipped footers
    abort the process in them (an unknown codec's name, a size statistic's length), which
    the decoding check's reader refuses in one line. Each bit of each footer byte flipped:
    accepted (a statistic, the Arrow schema copy: nothing the check relies on) or the one-line
    StoreError; never another exception. One bit a byte, its place turning with the offset
    (every bit place is flipped in every field longer than a byte: three bits a byte took
    5.4 s of the fast tier for no field the one bit misses)."""
    original = written.read_bytes()
    footer = len(original) - 8 - pq.read_metadata(written).serialized_size
    outcomes = {True: 0, False: 0}
    for offset in range(footer, len(original)):
        damaged = bytearray(original)
        damaged[offset] ^= 1 << (offset % 8)
        written.write_bytes(bytes(damaged))
        outcomes[refused(verify_parquet_file, written)] += 1
    assert outcomes[True] > 0 and outcomes[False] > 0  # (the Arrow schema a footer holds: most bytes)
