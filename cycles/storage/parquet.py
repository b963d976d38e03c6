"""Parquet integrity: every file is written with page checksums and read back checked.

A missing or corrupt file is a StoreError naming it and the repair. DuckDB checks no page
checksums, so the crawl DB's buckets are verified here page by page before it reads them.
"""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cycles.errors import StoreError
from cycles.storage.files import StorePath, _observed


class ParquetReads:
    """Checked Parquet reads (a mixin of :class:`cycles.storage.store.Store`)."""

    def read_table(self, path: StorePath, schema: pa.Schema | None = None,
                   columns: list[str] | None = None) -> pa.Table:
        """One Parquet file; a missing or corrupt file is a StoreError that says what to do."""
        _observed("GET", path)
        return read_parquet_checked(path, schema, filesystem=self.fs, columns=columns)

    def read_tables(self, paths: Iterable[StorePath], schema: pa.Schema,
                    columns: list[str] | None = None) -> pa.Table:
        """Several Parquet files of one schema as one table (the selected ``columns``)."""
        wanted = pa.schema([schema.field(c) for c in (columns or schema.names)])
        tables = [self.read_table(p, columns=columns).cast(wanted) for p in paths]
        return pa.concat_tables(tables) if tables else wanted.empty_table()

    def read_metadata_checked(self, path: StorePath) -> pq.FileMetaData:
        """The file's footer; a missing or unreadable one is a StoreError naming the file."""
        return parquet_footer(path, filesystem=self.fs)

    def verify_parquet(self, paths: list[StorePath], threads: int = 1) -> None:
        """Read every page of each file, checking its CRC (:func:`verify_parquet_file`).

        DuckDB does not check Parquet page checksums, so a stage that reads crawl DB buckets
        with DuckDB has them verified here first: one flipped bit in a data page was once
        read without an error and carried into every later version.
        """
        for path in paths:
            _observed("GET", path)
        if threads <= 1 or len(paths) <= 1:
            for path in paths:
                verify_parquet_file(path, filesystem=self.fs)
            return
        from concurrent.futures import ThreadPoolExecutor

        # pyarrow decodes without the GIL: threads verify buckets side by side.
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda p: verify_parquet_file(p, filesystem=self.fs), paths))

    def check_parquet(self, paths: list[StorePath]) -> None:
        """Open each file's footer: fails fast, naming the file, before a long query starts."""
        for path in paths:
            _observed("GET", path, 0)
        check_parquet_files(paths, filesystem=self.fs)


def _name(path, filesystem) -> str:
    if filesystem is not None and filesystem.type_name == "s3":
        return "s3://" + str(path)
    return str(path)


def read_parquet_checked(path: StorePath, schema: pa.Schema | None = None, *,
                         filesystem: pafs.FileSystem | None = None, columns: list[str] | None = None) -> pa.Table:
    """Read a Parquet file, turning a corrupt or missing file into a StoreError that says what to do."""
    try:
        table = pq.read_table(str(path), filesystem=filesystem, columns=columns, page_checksum_verification=True)
    except FileNotFoundError:
        raise StoreError(f"{_name(path, filesystem)} is missing") from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise StoreError(f"{_name(path, filesystem)} is not a readable Parquet file ({exc}); restore it, or "
                         "remove its folder and rerun the stage that wrote it") from None
    if schema is not None:
        missing = [n for n in schema.names if n not in table.column_names]
        if missing:
            raise StoreError(f"{_name(path, filesystem)} lacks columns {missing}; it was written by another "
                             "program or version")
        table = table.select(schema.names).cast(schema)
    return table


def check_parquet_files(paths: list[StorePath], *, filesystem: pafs.FileSystem | None = None) -> None:
    """Open each file's footer: fails fast, naming the file, before a long query starts."""
    for path in paths:
        parquet_footer(path, filesystem=filesystem)


def _repair_hint(path: StorePath, filesystem) -> str:
    return (f"restore it from backup, or make the version before it current with `crawl recover --previous` "
            f"(table {_name(path.parent.parent, filesystem)})")


def parquet_footer(path: StorePath, *, filesystem: pafs.FileSystem | None = None) -> pq.FileMetaData:
    """A Parquet file's footer; a missing or unreadable file is a StoreError naming it."""
    try:
        return pq.read_metadata(str(path), filesystem=filesystem)
    except FileNotFoundError:
        raise StoreError(f"{_name(path, filesystem)} is missing; {_repair_hint(path, filesystem)}") from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise StoreError(f"{_name(path, filesystem)} is corrupt ({exc}); {_repair_hint(path, filesystem)}") from None


VERIFY_BATCH_ROWS = 64 * 1024


def verify_parquet_file(path: StorePath, *, filesystem: pafs.FileSystem | None = None) -> int:
    """Read every page of a Parquet file (streaming, a batch at a time), checking the page
    CRCs written with it; returns its rows. A mismatch or undecodable page is a StoreError
    naming the file. (Files written without checksums are only decoded.)"""
    rows = 0
    try:
        with pq.ParquetFile(str(path), filesystem=filesystem, page_checksum_verification=True) as reader:
            for batch in reader.iter_batches(batch_size=VERIFY_BATCH_ROWS, use_threads=False):
                rows += batch.num_rows
    except FileNotFoundError:
        raise StoreError(f"{_name(path, filesystem)} is missing; {_repair_hint(path, filesystem)}") from None
    except (pa.ArrowException, OSError) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise StoreError(f"{_name(path, filesystem)} is corrupt ({reason}); {_repair_hint(path, filesystem)}") from None
    return rows
