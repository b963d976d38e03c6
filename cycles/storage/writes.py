"""The store's writes: whole files, Parquet tables and streamed Parquet, atomically, local or S3."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from cycles.storage import files
from cycles.storage.durable import fsync_file, make_dirs, rename_durably, write_atomically
from cycles.storage.faults import commit_point
from cycles.storage.files import StorePath, _observed

ROW_GROUP_ROWS = 1 << 20
"""Rows per Parquet row group in streamed writes (crawl DB buckets): large groups compress
better and cost less CPU; readers still skip by row-group statistics."""

ROW_GROUP_BYTES = 128 << 20
"""...or fewer, when their Arrow size reaches this (the pages feed, with page texts)."""


def _write_row_groups(sink, batches: Iterator[pa.RecordBatch], schema: pa.Schema, group_rows: int,
                      compression: str | dict = "zstd") -> int:
    """Write ``batches`` to ``sink`` as one Parquet file in row groups of ~``group_rows``."""
    rows = pending_rows = pending_bytes = 0
    pending: list[pa.RecordBatch] = []
    # Page checksums (CRC32 per page) let readers tell a flipped bit from data.
    with pq.ParquetWriter(sink, schema, compression=compression, write_page_checksum=True) as writer:
        def flush() -> None:
            writer.write_table(pa.Table.from_batches(pending).select(schema.names).cast(schema),
                               row_group_size=group_rows)
            pending.clear()
        # Gather batches into row groups of ~ROW_GROUP_ROWS rows: one row group per
        # 64 K-row batch cost a quarter more CPU and a tenth more bytes
        # (scripts/bench_scale_parts.py, 1.3 M-row bucket).
        # Tables with page texts reach the byte bound first: a million pages would
        # otherwise sit in memory at once.
        for batch in batches:
            if batch.num_rows:
                pending.append(batch)
                pending_rows += batch.num_rows
                pending_bytes += batch.nbytes
                rows += batch.num_rows
                if pending_rows >= group_rows or pending_bytes >= ROW_GROUP_BYTES:
                    flush()
                    pending_rows = pending_bytes = 0
        if pending:
            flush()
    return rows


class Writes:
    """Atomic writes into the store (a mixin of :class:`cycles.storage.store.Store`)."""

    def write_bytes(self, path: StorePath, data: bytes) -> None:
        """Write a whole file atomically (local: :func:`write_atomically`; S3: one PUT)."""
        _observed("PUT", path, len(data))
        if not self.local:
            commit_point(path)
            with self.fs.open_output_stream(str(path), compression=None) as out:
                out.write(data)
            return
        write_atomically(path, lambda tmp: tmp.write_bytes(data), commit_point)

    def write_json(self, path: StorePath, data: dict) -> None:
        self.write_bytes(path, (json.dumps(data, indent=1, default=str) + "\n").encode())

    def put_file(self, local_file: Path, path: StorePath) -> None:
        """Move a finished local file into the store (rename locally, upload to S3)."""
        _observed("PUT", path, Path(local_file).stat().st_size if files._io_observer is not None else 0)
        if self.local:
            make_dirs(path.parent)
            fsync_file(local_file)
            rename_durably(local_file, path, commit_point)
            return
        commit_point(path)
        with open(local_file, "rb") as src, self.fs.open_output_stream(str(path), compression=None) as out:
            shutil.copyfileobj(src, out, 8 * 1024 * 1024)
        Path(local_file).unlink(missing_ok=True)

    def write_table(self, path: StorePath, table: pa.Table, schema: pa.Schema, plain: tuple[str, ...] = ()) -> None:
        """Write one Parquet file atomically, cast to its documented schema. ``plain``: columns
        written without a dictionary (values that never repeat, such as page texts: Arrow
        would hash them into a dictionary until it passes 1 MiB, then fall back)."""
        table = table.select(schema.names).cast(schema)
        dictionary = [name for name in schema.names if name not in plain] if plain else True
        if not self.local:
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink, compression="zstd", write_page_checksum=True, use_dictionary=dictionary)
            self.write_bytes(path, sink.getvalue().to_pybytes())
            return
        write_atomically(path, lambda tmp: pq.write_table(table, tmp, compression="zstd", write_page_checksum=True,
                                                          use_dictionary=dictionary), commit_point)
        _observed("PUT", path)

    def write_batches(self, path: StorePath, batches: Iterator[pa.RecordBatch], schema: pa.Schema,
                      row_group_rows: int | None = None, compression: str | dict = "zstd") -> int:
        """Stream record batches into one Parquet file atomically; returns rows written.

        The file always exists afterwards, with no rows if no batch had any. On S3 it is a
        multipart upload that only becomes an object when complete; if the batches fail
        midway the object is deleted again. ``row_group_rows``: rows per row group, if not
        ROW_GROUP_ROWS (a reader streaming several files at once wants smaller groups).
        ``compression``: pyarrow's, one codec or one per column.
        """
        group_rows = row_group_rows or ROW_GROUP_ROWS
        if not self.local:
            commit_point(path)
            try:
                with self.fs.open_output_stream(str(path), compression=None) as out:
                    rows = _write_row_groups(out, batches, schema, group_rows, compression)
            except BaseException:
                # Closing the stream completed the upload: remove the partial file.
                with contextlib.suppress(OSError):
                    self.fs.delete_file(str(path))
                raise
        else:
            rows = write_atomically(
                path, lambda tmp: _write_row_groups(str(tmp), batches, schema, group_rows, compression), commit_point)
        _observed("PUT", path)
        return rows
