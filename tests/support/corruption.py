"""Damage made on purpose: one flipped bit in a file, or in a Parquet data page."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def flip_a_bit(path: Path) -> None:
    """Flip one bit in the middle of the first column's compressed pages (the footer stays
    readable, so only reading the data finds it)."""
    column = pq.read_metadata(path).row_group(0).column(0)
    start = column.dictionary_page_offset or column.data_page_offset
    data = bytearray(path.read_bytes())
    data[start + column.total_compressed_size // 2] ^= 0x10
    path.write_bytes(bytes(data))


def flip_a_bit_in_a_data_page(path, column: str = "url", row_group: int = 0) -> int:
    """Flip one bit inside ``column``'s data page of ``row_group`` (located from the Parquet
    metadata) where a reader that does not check page checksums reads changed values without
    any error; return the offset."""
    original = path.read_bytes()
    metadata = pq.read_metadata(path)
    chunk = metadata.row_group(row_group).column(metadata.schema.names.index(column))
    start = chunk.data_page_offset
    end = (chunk.dictionary_page_offset or start) + chunk.total_compressed_size
    expected = pq.read_table(path)
    for offset in range(end - 1, start, -1):  # from the page's end: its values, not its header
        flipped = bytearray(original)
        flipped[offset] ^= 0x10
        path.write_bytes(bytes(flipped))
        try:
            silently_changed = not pq.read_table(path).equals(expected)
        except (pa.ArrowException, OSError):
            silently_changed = False
        if silently_changed:
            return offset
    path.write_bytes(original)
    raise AssertionError(f"no silent bit flip found in {column}'s data page of {path}")
