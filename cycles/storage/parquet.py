"""Parquet integrity: every file is written with page checksums and read back checked.

A missing or corrupt file is a StoreError naming it and the repair. DuckDB checks no page
checksums, so the crawl DB's buckets are verified here page by page before it reads them.
"""

from __future__ import annotations

import functools
import os
from typing import Iterable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cycles.errors import StoreError
from cycles.storage.files import StorePath, _observed
from cycles.storage.pagecrc import NoChecksum, PageError, Source, check_file_pages


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

    def verify_row_groups(self, path: StorePath, row_groups: list[int]) -> None:
        """Check the page CRCs of ``row_groups`` of one file (:func:`verify_parquet_file`):
        what a scan pruned by row-group statistics reads (generate's due scan)."""
        _observed("GET", path)
        verify_parquet_file(path, filesystem=self.fs, row_groups=row_groups)

    def verify_parquet(self, paths: list[StorePath], threads: int = 1) -> None:
        """Check every page of each file against its CRC (:func:`verify_parquet_file`).

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

        # Reads and zlib's CRC run without the GIL: threads verify buckets side by side.
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


# --- columns renamed since files were written: read under their new names ---------------------
RENAMED_COLUMNS: dict[str, str] = {}
"""Old column name -> new name, registered by the tables' schema (cycles/tables/schema.py) with
:func:`rename_columns`. A file written with the old name reads as if written with the new
one, through :func:`read_parquet_checked` and the DuckDB sources (cycles/storage/sources.py):
stored files need no rewrite, and the first stage that rewrites them writes the new name."""


def rename_columns(renamed: dict[str, str]) -> None:
    RENAMED_COLUMNS.update(renamed)


def renames_for(names: Iterable[str]) -> dict[str, str]:
    """The renames a file with these column names needs (an old name there, the new one not)."""
    names = set(names)
    return {old: new for old, new in RENAMED_COLUMNS.items() if old in names and new not in names}


def renamed_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` (a file's) with its renamed columns under their new names."""
    renamed = renames_for(schema.names)
    return pa.schema([f.with_name(renamed.get(f.name, f.name)) for f in schema]) if renamed else schema


def file_renames(path: str) -> tuple[tuple[str, str], ...]:
    """The (old, new) renames a local Parquet file needs; () for one that is not local or
    not readable here (the query that reads it names the problem)."""
    if not RENAMED_COLUMNS:
        return ()
    try:
        stat = os.stat(path)
    except (OSError, ValueError):
        return ()
    return _footer_renames(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4096)
def _footer_renames(path: str, mtime_ns: int, size: int) -> tuple[tuple[str, str], ...]:
    # Keyed by modification time and size too: a file replaced under its name is read again.
    try:
        names = pq.read_schema(path).names
    except (OSError, pa.ArrowInvalid):
        return ()
    return tuple(sorted(renames_for(names).items()))


def _read_renamed(path: StorePath, filesystem: pafs.FileSystem | None, columns: list[str] | None) -> pa.Table:
    """The file (``columns`` of it), renamed columns under their new names; page CRCs checked."""
    with pq.ParquetFile(str(path), filesystem=filesystem, pre_buffer=True, page_checksum_verification=True) as reader:
        renamed = renames_for(reader.schema_arrow.names)
        old = {new: old for old, new in renamed.items()}
        table = reader.read(columns=None if columns is None else [old.get(c, c) for c in columns])
    return table.rename_columns([renamed.get(n, n) for n in table.column_names]) if renamed else table


def read_parquet_checked(path: StorePath, schema: pa.Schema | None = None, *,
                         filesystem: pafs.FileSystem | None = None, columns: list[str] | None = None) -> pa.Table:
    """Read a Parquet file, turning a corrupt or missing file into a StoreError that says what to do."""
    try:
        table = _read_renamed(path, filesystem, columns)
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


def _open_input(path: StorePath, filesystem: pafs.FileSystem | None) -> pa.NativeFile:
    return pa.OSFile(str(path)) if filesystem is None else filesystem.open_input_file(str(path))


def verify_parquet_file(path: StorePath, *, filesystem: pafs.FileSystem | None = None,
                        row_groups: list[int] | None = None) -> int:
    """Check every page of a Parquet file (of ``row_groups`` of it; None: all) against the
    CRC written with it; returns the rows checked. A mismatch, or a page that does not match
    its footer, is a StoreError naming the file.

    The CRCs are checked on the pages' stored bytes (cycles/storage/pagecrc.py: nothing
    decompressed, ~7 x cheaper than decoding). A file with a page written without a CRC is
    read and decoded instead (:func:`decode_parquet_file`), as every file once was."""
    try:
        with _open_input(path, filesystem) as handle:
            # The footer as a reader takes it (Thrift's required fields, the schema made
            # Arrow's): what DuckDB would refuse is refused; the pages are checked below.
            pq.ParquetFile(handle).schema_arrow
            try:
                return check_file_pages(Source(handle), row_groups)[1]
            except NoChecksum:
                pass
        return decode_parquet_file(path, filesystem=filesystem, row_groups=row_groups)
    except FileNotFoundError:
        raise StoreError(f"{_name(path, filesystem)} is missing; {_repair_hint(path, filesystem)}") from None
    except (PageError, pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # a flipped name
        reason = " ".join(str(exc).split())[:200]
        raise StoreError(f"{_name(path, filesystem)} is corrupt ({reason}); {_repair_hint(path, filesystem)}") from None


def decode_parquet_file(path: StorePath, *, filesystem: pafs.FileSystem | None = None,
                        row_groups: list[int] | None = None) -> int:
    """Read every page of a Parquet file (of ``row_groups``), streaming, a batch at a time,
    decoding every value; pyarrow checks the page CRCs written with it on the way. Returns
    its rows. Files written without checksums are only decoded. The way every file was
    checked before :func:`verify_parquet_file` checked the stored bytes; its fallback."""
    rows = 0
    try:
        with pq.ParquetFile(str(path), filesystem=filesystem, page_checksum_verification=True) as reader:
            for batch in reader.iter_batches(batch_size=VERIFY_BATCH_ROWS, row_groups=row_groups,
                                             use_threads=False):
                rows += batch.num_rows
    except FileNotFoundError:
        raise StoreError(f"{_name(path, filesystem)} is missing; {_repair_hint(path, filesystem)}") from None
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # a flipped name
        reason = " ".join(str(exc).split())[:200]
        raise StoreError(f"{_name(path, filesystem)} is corrupt ({reason}); {_repair_hint(path, filesystem)}") from None
    return rows
