"""Where everything lives, and how it is written safely — on a local disk or on S3.

A store is a local folder (``./data`` by default, the embedded store) or an
``s3://bucket/prefix`` URI. Both go through one :class:`Store`, which holds a pyarrow
``FileSystem`` and a root; every stage reads and writes through it. For S3 the endpoint
and credentials come from the standard AWS settings (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, ``AWS_DEFAULT_REGION`` …),
so the same command works against AWS, MinIO or any S3-compatible server.

Layout (the same on both)::

    crawldb/CURRENT                    JSON manifest naming the current version (written last)
    crawldb/HISTORY                    JSON: the versions once current that are kept (written before CURRENT)
    crawldb/<version>/bucket-NNNNN.parquet   one file per host-hash bucket (schema.CRAWLDB)
    crawldb/<version>/_COMPLETE        the version's seal: its manifest and each file's rows (before CURRENT)
    hostdb/CURRENT, hostdb/<version>/bucket-NNNNN.parquet   per-host state (schema.HOSTS), bucketed as the crawl DB
    segments/<segment id>/             one folder per cycle, sortable id (UTC time first)
        fetchlist/part-NNNNN.parquet   written by generate (schema.FETCHLIST)
        fetched/part-NNNNN-cNNNNNN.parquet   written by fetch, chunk by chunk (schema.FETCHED)
        outlinks/part-NNNNN-cNNNNNN.parquet  written by fetch (schema.OUTLINKS)
        warc/<prefix>-<id>-part-NNNNN-cNNNNNN-<host>.warc.gz   every exchange, one WARC file per chunk
        archive/                       `crawl export`: CDXJ, URL index (schema.CC_INDEX), WET
        hosts/part-NNNNN.parquet       host state after fetching the partition (schema.HOSTS)
        stats/<stage>-*.json           counters of each stage
        _GENERATED, _FETCHING, _FETCHED, _UPDATED, _ABANDONED markers (JSON), written last
                                       by each stage: the lifecycle, see cycles/tables/segment.py

Rules that keep a crash harmless:

- A reader sees a whole file or none. Locally every file is written to a temporary name
  in the same folder, fsynced, renamed into place, and the folder fsynced (so the rename
  is durable before ``CURRENT``, written last, can be). S3 has no rename, but a PUT (or
  the completion of a multipart upload) is atomic per object, so files are written under
  their final name; a file interrupted mid-upload never appears.
- A reader only trusts what a file written *last* names: ``CURRENT`` names the crawl DB
  version, a segment's markers and the fetch chunks' ``fetched/`` file commit what was
  written before them. So a version folder or chunk cut short by a crash is ignored.
- The crawl DB is never edited: a stage writes a complete new version beside the current
  one and then replaces ``CURRENT`` (one atomic rename, or one PUT on S3). A crash at any
  moment leaves the old or the new version, never a mix. Old versions are removed after
  the swap: only versions once current (``HISTORY``) beyond ``db.keep_versions``, and
  never-installed folders older than the new version; ``CURRENT`` lost while version
  folders exist stops every stage until ``crawl recover`` reinstates a sealed version.
- Every Parquet file is written with page checksums; reads through the store check them,
  and the crawl DB's buckets are verified page by page before DuckDB (which checks none)
  reads them. A corrupt file stops the stage with its name.
- Stages that replace the crawl DB hold the ``crawldb`` lock from reading ``CURRENT``
  until the swap: locally an advisory ``fcntl`` lock on ``crawldb/.lock`` (released by
  the kernel when the process dies); on S3 a lock object ``crawldb/.lock`` created with
  a conditional PUT (``If-None-Match: *``), renewed while held, and taken over when its
  holder is a dead process on this machine or its lease expired (:class:`S3Lock`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import fnmatch
import hashlib
import itertools
import json
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cycles.config import DbConfig
from cycles.errors import LockedError, SegmentNotFound, StoreError
from cycles.storage.faults import commit_point

SEGMENTS = "segments"
"""The folder of the segments, one sub-folder per cycle (cycles/tables/segment.py)."""

StorePath = Path | PurePosixPath
"""A path inside a store: a ``Path`` on the local disk, ``PurePosixPath('bucket/key')`` on S3."""


ROW_GROUP_ROWS = 1 << 20
"""Rows per Parquet row group in streamed writes (crawl DB buckets): large groups compress
better and cost less CPU; readers still skip by row-group statistics."""

ROW_GROUP_BYTES = 128 << 20
"""...or fewer, when their Arrow size reaches this (the pages feed, with page texts)."""

IoObserver = Callable[[str, StorePath, "int | None"], None]
"""Called after each store operation with its kind (``GET``, ``PUT``, ``LIST``, ``HEAD``,
``DELETE``), the path and the bytes moved (None: the whole file, for the observer to size)."""

_io_observer: IoObserver | None = None
"""Off (None) unless a benchmark counts the store's requests (scripts/bench_cost.py); a
store operation then costs one test of this global more."""


def observe_io(observer: IoObserver | None) -> IoObserver | None:
    """Count every store operation of this process with ``observer`` (None: stop); returns
    the one before. One request per call, as the store asks for it: on S3 pyarrow may
    split it (a multipart upload, ranged GETs per column chunk), which moto's log shows."""
    global _io_observer
    previous, _io_observer = _io_observer, observer
    return previous


def _observed(kind: str, path: StorePath, nbytes: int | None = None) -> None:
    if _io_observer is not None:
        _io_observer(kind, path, nbytes)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def new_id(now: dt.datetime | None = None) -> str:
    """A sortable, unique id: UTC time to the microsecond, then random hex.

    Sorting ids sorts by creation time; the random part makes two ids made in the same
    microsecond (or on two machines) differ without sleeping.
    """
    now = now or utcnow()
    return now.strftime("%Y%m%dT%H%M%S%fZ") + "-" + secrets.token_hex(3)


@dataclass(frozen=True)
class Manifest:
    """What ``crawldb/CURRENT`` says: the current version and how it was made."""

    version: str
    buckets: int
    schema_version: int
    written_at: str
    written_by: str
    applied_segments: tuple[str, ...] = ()
    """Segments already merged into this version (the newest few hundred); update uses it
    to stay idempotent even if it crashed between the swap and its marker."""
    bucket_files: tuple[str, ...] = ()
    """Each bucket's file in the version folder, in bucket order, when its writer named them
    (update's bucket tasks write ``bucket-NNNNN.<attempt>.parquet``: a retried task's two
    attempts never share a file, and this names the committed one); empty: the plain
    ``bucket-NNNNN.parquet`` (other writers, and manifests written before). A name with a
    ``/`` is relative to the table's folder (``<older version>/<file>``): a base carried over
    unchanged from the version that wrote it (docs/incremental.md)."""
    bucket_deltas: tuple[tuple[str, ...], ...] = ()
    """Each bucket's delta files, oldest first, named like ``bucket_files`` (update writes
    only the rows a segment changed or added; readers merge them over the base, the newest
    row of a URL winning: cycles/tables/crawldb.py :func:`bucket_source_sql`); empty: no deltas."""

    def to_json(self) -> str:
        data = self.__dict__.copy()
        data["applied_segments"] = list(self.applied_segments)
        data["bucket_files"] = list(self.bucket_files)
        if not self.bucket_files:  # manifests without names read as before (and by older versions)
            del data["bucket_files"]
        data["bucket_deltas"] = [list(d) for d in self.bucket_deltas]
        if not any(self.bucket_deltas):
            del data["bucket_deltas"]
        return json.dumps(data, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        data = json.loads(text)
        data["applied_segments"] = tuple(data.get("applied_segments", ()))
        data["bucket_files"] = tuple(data.get("bucket_files", ()))
        data["bucket_deltas"] = tuple(tuple(d) for d in data.get("bucket_deltas", ()))
        return cls(**data)

    def bucket_file_name(self, bucket: int) -> str:
        """The name of ``bucket``'s file in this version's folder."""
        return self.bucket_files[bucket] if self.bucket_files else f"bucket-{bucket:05d}.parquet"

    def delta_names(self, bucket: int) -> tuple[str, ...]:
        """``bucket``'s delta files, oldest first (names as :meth:`bucket_file_name`'s)."""
        return self.bucket_deltas[bucket] if self.bucket_deltas else ()

    def entry_in_table(self, entry: str) -> str:
        """A file name of this version as seen from the table's folder: ``<version>/<name>``."""
        return entry if "/" in entry else f"{self.version}/{entry}"

    def entries(self) -> list[str]:
        """Every Parquet file this version is made of (bases, then deltas), table-relative."""
        names = list(self.bucket_files) + [n for deltas in self.bucket_deltas for n in deltas]
        return [self.entry_in_table(n) for n in names]

    def folders(self) -> set[str]:
        """The version folders holding this version's files: its own and those it names."""
        return {self.version} | {entry.split("/", 1)[0] for entry in self.entries()}


_source_names = itertools.count()

COMPLETE = "_COMPLETE"
"""Marker of a fully written version (``<table>/<version>/_COMPLETE``), see :meth:`Store.seal_version`."""

HISTORY = "HISTORY"
"""``<table>/HISTORY``: the versions that were once current, oldest first (:meth:`Store.install`)."""


class Store:
    """A crawl store: a local folder or ``s3://bucket/prefix``.

    Paths handed out (``path``, ``segment_dir``, ``list`` …) are ``Path`` objects for a
    local store and ``PurePosixPath('bucket/prefix/…')`` for S3; read and write them
    through the store's methods, which work on both.
    """

    def __init__(self, root: str | os.PathLike):
        text = os.fspath(root)
        if isinstance(text, str) and text.startswith("s3://"):
            try:
                self.fs, key = pafs.FileSystem.from_uri(text.rstrip("/"))
            except (pa.ArrowInvalid, OSError) as exc:
                raise StoreError(f"cannot open store {text}: {exc}; check AWS_ENDPOINT_URL, the "
                                 "credentials (AWS_ACCESS_KEY_ID / AWS_PROFILE) and the bucket name") from None
            self.local = False
            self.root: StorePath = PurePosixPath(key)
            self.uri = "s3://" + key
        else:
            self.fs = pafs.LocalFileSystem()
            self.local = True
            self.root = Path(text).absolute()
            self.uri = str(self.root)
        self._s3_client = None
        self._held: dict[str, S3Lock] = {}

    def __repr__(self) -> str:
        return f"Store({self.uri!r})"

    # --- paths and listing -----------------------------------------------------------
    def path(self, *parts: str) -> StorePath:
        return self.root.joinpath(*parts)

    def uri_of(self, path: StorePath) -> str:
        """How to name a path in messages: the local path, or ``s3://bucket/key``."""
        return str(path) if self.local else "s3://" + str(path)

    def _info(self, path: StorePath) -> pafs.FileInfo:
        _observed("HEAD", path, 0)
        return self.fs.get_file_info(str(path))

    def exists(self, path: StorePath) -> bool:
        return self._info(path).type != pafs.FileType.NotFound

    def is_dir(self, path: StorePath) -> bool:
        """A folder locally; on S3, a prefix under which some object exists."""
        return self._info(path).type == pafs.FileType.Directory

    def _entries(self, folder: StorePath) -> list[pafs.FileInfo]:
        _observed("LIST", folder, 0)
        return self.fs.get_file_info(pafs.FileSelector(str(folder), allow_not_found=True))

    def names(self, folder: StorePath) -> set[str]:
        """Names of everything directly inside ``folder`` (empty if it does not exist)."""
        return {info.base_name for info in self._entries(folder)}

    def list(self, folder: StorePath, pattern: str = "*") -> list[StorePath]:
        """Files directly inside ``folder`` whose name matches ``pattern`` (fnmatch), sorted.

        As with ``Path.glob``, names starting with a dot (temporaries, locks) only match a
        pattern that starts with a dot.
        """
        hidden = pattern.startswith(".")
        return sorted(folder / info.base_name for info in self._entries(folder)
                      if info.type == pafs.FileType.File and info.base_name.startswith(".") == hidden
                      and fnmatch.fnmatchcase(info.base_name, pattern))

    def list_dirs(self, folder: StorePath) -> list[str]:
        """Names of the sub-folders of ``folder`` (not starting with a dot), sorted."""
        return sorted(info.base_name for info in self._entries(folder)
                      if info.type == pafs.FileType.Directory and not info.base_name.startswith("."))

    # --- reading ---------------------------------------------------------------------
    def read_bytes(self, path: StorePath) -> bytes:
        """The whole file; ``FileNotFoundError`` if it does not exist."""
        _observed("GET", path)
        if self.local:
            return Path(path).read_bytes()
        try:
            with self.fs.open_input_stream(str(path), compression=None) as fh:
                return fh.read()
        except FileNotFoundError:
            raise
        except OSError as exc:
            if not self.exists(path):
                raise FileNotFoundError(self.uri_of(path)) from None
            raise StoreError(f"cannot read {self.uri_of(path)}: {exc}") from None

    def read_json(self, path: StorePath) -> dict:
        text = self.read_bytes(path)
        try:
            return json.loads(text)
        except ValueError as exc:
            raise StoreError(f"{self.uri_of(path)} is unreadable or not JSON ({exc}); "
                             "restore it or remove it") from None

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

    def read_range(self, path: StorePath, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (one ranged GET on S3): a WARC record, for example."""
        _observed("GET", path, length)
        with self.fs.open_input_file(str(path)) as fh:
            return fh.read_at(length, offset)

    def read_metadata(self, path: StorePath) -> pq.FileMetaData:
        _observed("GET", path, 0)  # the footer: small, left out of the bytes
        return pq.read_metadata(str(path), filesystem=self.fs)

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

    def dataset(self, paths: list[StorePath], segment_column: bool = False) -> ds.Dataset:
        """A pyarrow dataset over Parquet files (for pyarrow, Polars, or DuckDB on S3).

        With ``segment_column`` the files must lie under ``segments/<id>/``, and the
        dataset gets a ``segment`` column from that folder name.
        """
        for path in paths:
            _observed("GET", path)  # at most the whole file: a query reads only its columns
        extra = {}
        if segment_column:
            extra = dict(partitioning=ds.DirectoryPartitioning(pa.schema([("segment", pa.string())])),
                         partition_base_dir=str(self.path(SEGMENTS)))
        return ds.dataset([str(p) for p in paths], filesystem=self.fs, format="parquet", **extra)

    def duckdb_source(self, con, paths: list[StorePath], segment_column: bool = False) -> str:
        """SQL table expression reading these Parquet files in DuckDB.

        Locally DuckDB reads the files itself; on S3 they are read through a pyarrow dataset
        registered on ``con`` (DuckDB's own S3 support would need an extension download).
        """
        if not paths:
            raise ValueError("duckdb_source needs at least one file")
        if self.local:
            for path in paths:
                _observed("GET", path)  # at most the whole file: a query reads only its columns
            quoted = ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths)
            if segment_column:
                return (f"(SELECT * EXCLUDE (filename), split_part(filename, '/', -3) AS segment "
                        f"FROM read_parquet([{quoted}], filename = true))")
            return f"read_parquet([{quoted}])"
        name = f"store_source_{next(_source_names)}"
        con.register(name, self.dataset(paths, segment_column))
        return name

    def scratch_dir(self) -> Path:
        """A local folder for spill files (DuckDB's temp directory); inside a local store."""
        if self.local:
            folder = self.path(".duckdb-tmp")
        else:
            folder = self._machine_dir() / "duckdb-tmp"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _machine_dir(self) -> Path:
        digest = hashlib.sha1(self.uri.encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"crawl-store-{digest}"

    def local_dir(self, folder: StorePath) -> Path:
        """A local folder standing for ``folder``, for what only this machine needs (lock files,
        progress counters, files being written): the folder itself in a local store, a mirror
        of it under the system's temp directory for S3. Not created."""
        if self.local:
            return Path(folder)
        return self._machine_dir().joinpath(PurePosixPath(folder).relative_to(self.root))

    def staging_file(self, path: StorePath) -> Path:
        """A local temporary file to build ``path`` in, then :meth:`put_file` it into place.

        Locally it sits beside ``path`` (renamed into place; :meth:`remove_temporaries`
        finds it after a crash); for S3 it sits in :meth:`local_dir` of its folder.
        """
        folder = self.local_dir(path.parent)
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f".{path.name}.{secrets.token_hex(4)}.tmp"

    # --- writing ---------------------------------------------------------------------
    @staticmethod
    def _tmp_name(path: Path) -> Path:
        return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")

    def write_bytes(self, path: StorePath, data: bytes) -> None:
        """Write a whole file atomically (local: temporary name, fsync, rename; S3: one PUT)."""
        _observed("PUT", path, len(data))
        if not self.local:
            commit_point(path)
            with self.fs.open_output_stream(str(path), compression=None) as out:
                out.write(data)
            return
        self._make_dirs(path.parent)
        tmp = self._tmp_name(path)
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        self._rename_durably(tmp, path)

    def write_json(self, path: StorePath, data: dict) -> None:
        self.write_bytes(path, (json.dumps(data, indent=1, default=str) + "\n").encode())

    def put_file(self, local_file: Path, path: StorePath) -> None:
        """Move a finished local file into the store (rename locally, upload to S3)."""
        _observed("PUT", path, Path(local_file).stat().st_size if _io_observer is not None else 0)
        if self.local:
            self._make_dirs(path.parent)
            fsync_file(local_file)
            self._rename_durably(local_file, path)
            return
        commit_point(path)
        with open(local_file, "rb") as src, self.fs.open_output_stream(str(path), compression=None) as out:
            shutil.copyfileobj(src, out, 8 * 1024 * 1024)
        Path(local_file).unlink(missing_ok=True)

    def write_table(self, path: StorePath, table: pa.Table, schema: pa.Schema) -> None:
        """Write one Parquet file atomically, cast to its documented schema."""
        table = table.select(schema.names).cast(schema)
        if not self.local:
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink, compression="zstd", write_page_checksum=True)
            self.write_bytes(path, sink.getvalue().to_pybytes())
            return
        self._make_dirs(path.parent)
        tmp = self._tmp_name(path)
        try:
            pq.write_table(table, tmp, compression="zstd", write_page_checksum=True)
            fsync_file(tmp)
            self._rename_durably(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        _observed("PUT", path)

    def write_batches(self, path: StorePath, batches: Iterator[pa.RecordBatch], schema: pa.Schema,
                      row_group_rows: int | None = None) -> int:
        """Stream record batches into one Parquet file atomically; returns rows written.

        The file always exists afterwards, with no rows if no batch had any. On S3 it is a
        multipart upload that only becomes an object when complete; if the batches fail
        midway the object is deleted again. ``row_group_rows``: rows per row group, if not
        ROW_GROUP_ROWS (a reader streaming several files at once wants smaller groups).
        """
        group_rows = row_group_rows or ROW_GROUP_ROWS

        def write(sink) -> int:
            rows = 0
            pending: list[pa.RecordBatch] = []
            pending_rows = pending_bytes = 0
            # Page checksums (CRC32 per page) let readers tell a flipped bit from data.
            with pq.ParquetWriter(sink, schema, compression="zstd", write_page_checksum=True) as writer:
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

        if not self.local:
            commit_point(path)
            try:
                with self.fs.open_output_stream(str(path), compression=None) as out:
                    rows = write(out)
                _observed("PUT", path)
                return rows
            except BaseException:
                # Closing the stream completed the upload: remove the partial file.
                with contextlib.suppress(OSError):
                    self.fs.delete_file(str(path))
                raise
        self._make_dirs(path.parent)
        tmp = self._tmp_name(path)
        try:
            rows = write(str(tmp))
            fsync_file(tmp)
            self._rename_durably(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        _observed("PUT", path)
        return rows

    @staticmethod
    def _rename_durably(tmp: Path, path: Path) -> None:
        """Rename a fsynced file into place and fsync its folder: the rename itself is then
        on disk too, so ``CURRENT`` (written last) never survives a power loss that the
        files it names did not. Every local file that matters becomes visible here: the
        fault-injection tests kill the process at this point (cycles/storage/faults.py)."""
        commit_point(path)
        os.replace(tmp, path)
        fsync_dir(path.parent)

    @staticmethod
    def _make_dirs(folder: Path) -> None:
        """``mkdir -p``, fsyncing the parent of each folder created (its entry is then durable)."""
        missing = []
        folder = Path(folder)
        while not folder.exists():
            missing.append(folder)
            folder = folder.parent
        for new in reversed(missing):
            new.mkdir(exist_ok=True)
            fsync_dir(new.parent)

    def delete(self, path: StorePath) -> None:
        """Delete one file; a missing file is fine."""
        _observed("DELETE", path, 0)
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(str(path))

    def delete_dir(self, folder: StorePath) -> None:
        """Delete a folder and everything in it; a missing folder is fine."""
        _observed("DELETE", folder, 0)
        if self.local:
            shutil.rmtree(folder, ignore_errors=True)
            return
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_dir(str(folder))

    def remove_temporaries(self, folder: StorePath, prefix: str = "") -> int:
        """Delete leftovers of writes interrupted by a crash; returns how many.

        ``prefix`` limits it to files whose name starts with it: a folder shared by several
        writers (the fetch partitions) must only lose the caller's own leftovers. On S3
        nothing is written under a temporary name; the local staging files of
        :meth:`staging_file` are removed instead.
        """
        removed = 0
        local = self.local_dir(folder)
        if local.exists():
            for tmp in local.glob(f".{prefix}*.tmp"):
                tmp.unlink(missing_ok=True)
                removed += 1
        return removed

    # --- locks -----------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, name: str = "crawldb", wait: bool = False, db: DbConfig | None = None) -> Iterator[None]:
        """Hold the lock guarding the swap of a versioned table (or a store-wide stage).
        ``db``: the config's lock times (``db.s3_lock_lease_s``, ``db.s3_lock_renew_s``; the
        defaults without it), used on S3 stores."""
        if not self.local:
            db = db if db is not None else DbConfig()
            lock = S3Lock(self, name, db.s3_lock_lease_s, db.s3_lock_renew_s)
            lock.acquire(wait)
            self._held[name] = lock
            try:
                yield
            finally:
                self._held.pop(name, None)
                lock.release()
            return
        folder = self.path(name)
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / ".lock", "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                raise LockedError(
                    f"{folder / '.lock'} is held by another crawl process; wait for it to finish "
                    "(two stages must not replace the crawl DB at once)") from None
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def s3_client(self):
        """A boto3 S3 client (same AWS settings as pyarrow's); for conditional writes."""
        if self._s3_client is None:
            import boto3

            self._s3_client = boto3.client("s3")
        return self._s3_client

    # --- crawl DB and host DB versions -------------------------------------------------
    def manifest(self, name: str = "crawldb") -> Manifest | None:
        """The current version's manifest, or None if the table was never written.

        ``CURRENT`` missing while version folders exist is an error, not an empty table:
        a stage that went on would write a fresh table and prune the real one.
        """
        current = self.path(name, "CURRENT")
        try:
            text = self.read_bytes(current)
        except FileNotFoundError:
            folders = self.version_dirs(name)
            if folders and self.creating(name):
                return None  # the table's first version was never installed: leftovers only
            if folders:
                raise StoreError(f"{self.uri_of(current)} is missing but {len(folders)} version folders exist "
                                 f"under {self.uri_of(self.path(name))}; if no crawl process is running, "
                                 f"run `crawl recover` to reinstate the newest complete version") from None
            return None
        try:
            manifest = Manifest.from_json(text)
        except (ValueError, TypeError, KeyError) as exc:
            raise StoreError(f"{self.uri_of(current)} is corrupt ({exc}); run `crawl recover` to point it at "
                             f"the newest complete version under {self.uri_of(self.path(name))}") from None
        if not self.is_dir(self.path(name, manifest.version)):
            raise StoreError(f"{self.uri_of(current)} names version {manifest.version}, which is missing; "
                             f"run `crawl recover` to point CURRENT at the newest complete version")
        return manifest

    def version_dirs(self, name: str = "crawldb") -> list[str]:
        """The version folders of a versioned table, oldest first (ids sort by creation time)."""
        return [v for v in self.list_dirs(self.path(name)) if v.startswith("v")]

    def new_version_dir(self, name: str = "crawldb") -> tuple[str, StorePath]:
        """A new, empty version folder. For a table that has no version yet, an empty
        ``HISTORY`` is written first: it says "being created, nothing installed", so version
        folders left by a first write killed before ``CURRENT`` are leftovers (the next write
        prunes them), not a crawl DB that lost its ``CURRENT`` (:meth:`manifest` refuses those)."""
        if not self.exists(self.path(name, HISTORY)) and not self.exists(self.path(name, "CURRENT")) \
                and not self.version_dirs(name):
            self.write_json(self.path(name, HISTORY), {"installed": []})
        version = "v" + new_id()
        folder = self.path(name, version)
        if self.local:
            self._make_dirs(folder)
        return version, folder

    def creating(self, name: str = "crawldb") -> bool:
        """Was the table's first version started but never installed (``HISTORY`` empty)?"""
        try:
            return self.read_json(self.path(name, HISTORY)).get("installed") == []
        except FileNotFoundError:
            return False

    def history(self, name: str = "crawldb") -> list[str]:
        """Versions that were once current (``<name>/HISTORY``), oldest first; [] if none recorded."""
        try:
            data = self.read_json(self.path(name, HISTORY))
        except FileNotFoundError:
            return []
        return [str(v) for v in data.get("installed", [])]

    def seal_version(self, name: str, manifest: Manifest) -> dict:
        """Write ``<version>/_COMPLETE``: the manifest to install and each Parquet file's row
        count, read back from its footer (so each file is known readable). Written after the
        last file and before ``CURRENT``: ``crawl recover`` reinstates only sealed versions."""
        folder = self.path(name, manifest.version)
        files = {p.name: self.read_metadata_checked(p).num_rows for p in self.list(folder, "*.parquet")}
        # Files of older versions it names (carried-over bases and deltas) are checked too.
        for entry in manifest.entries():
            if not entry.startswith(manifest.version + "/"):
                files[entry] = self.read_metadata_checked(self.path(name, *entry.split("/"))).num_rows
        seal = {"manifest": json.loads(manifest.to_json()), "files": files, "rows": sum(files.values())}
        self.write_json(folder / COMPLETE, seal)
        return seal

    def sealed_manifest(self, name: str, version: str) -> tuple[Manifest | None, str]:
        """(manifest, "") if ``version`` is complete — sealed, every file of its seal present
        with a readable footer and the row count sealed — else (None, why not)."""
        folder = self.path(name, version)
        try:
            seal = self.read_json(folder / COMPLETE)
            manifest = Manifest.from_json(json.dumps(seal["manifest"]))
            files = dict(seal["files"])
        except FileNotFoundError:
            return None, f"no {COMPLETE} marker (never finished)"
        except (StoreError, ValueError, TypeError, KeyError) as exc:
            return None, f"unreadable {COMPLETE} marker ({exc})"
        if manifest.version != version:
            return None, f"its {COMPLETE} marker names version {manifest.version}"
        for file, rows in files.items():
            try:
                found = self.read_metadata_checked(self.sealed_file(name, version, file)).num_rows
            except StoreError as exc:
                return None, str(exc).split(";")[0]
            if found != rows:
                return None, f"{file} holds {found} rows, {rows} were written"
        return manifest, ""

    def sealed_file(self, name: str, version: str, file: str) -> StorePath:
        """A file a version's seal lists: in its folder, or (``<version>/<name>``) an older one's."""
        return self.path(name, *file.split("/")) if "/" in file else self.path(name, version, file)

    def sealed_files(self, name: str, version: str) -> list[StorePath]:
        """Every file a sealed version's seal lists (its own and the older ones it names)."""
        try:
            files = self.read_json(self.path(name, version, COMPLETE)).get("files", {})
        except (FileNotFoundError, StoreError, AttributeError):
            return []
        return [self.sealed_file(name, version, f) for f in files]

    def _referenced_folders(self, name: str, versions: list[str]) -> set[str]:
        """The folders the seals of ``versions`` name files in (their own included)."""
        folders = set(versions)
        for version in versions:
            try:
                seal = self.read_json(self.path(name, version, COMPLETE))
                folders |= Manifest.from_json(json.dumps(seal["manifest"])).folders()
            except (FileNotFoundError, StoreError, ValueError, TypeError, KeyError):
                continue
        return folders

    def install(self, name: str, manifest: Manifest, keep: int) -> None:
        """Make ``manifest.version`` current (atomic rename or PUT), then prune old versions.

        In order: the version is sealed (``_COMPLETE``), recorded in ``HISTORY``, made
        current, and only then are old versions deleted. Pruned are the installed versions
        beyond ``keep`` (at least the current one and the one before it stay), oldest first,
        and folders older than the new version that were never installed (a crashed writer's
        leftovers). A folder newer than the new version is never touched: its writer may be
        running. (Pruning by sorted folder names once kept a crashed writer's half-written
        version and deleted the last good one.)
        """
        for lock in self._held.values():
            lock.check()  # never swap after losing the lock (S3 lease expired and taken over)
        previous = self._current_version(name)
        self.seal_version(name, manifest)
        existing = set(self.version_dirs(name))
        installed = [v for v in self.history(name) if v in existing and v not in (previous, manifest.version)]
        installed += [v for v in (previous,) if v in existing and v != manifest.version] + [manifest.version]
        kept = installed[-max(2, keep):]
        self.write_json(self.path(name, HISTORY), {"installed": kept})
        self.write_bytes(self.path(name, "CURRENT"), manifest.to_json().encode())
        # A folder whose files a kept version still names (a base carried over, deltas) stays.
        referenced = self._referenced_folders(name, kept) | manifest.folders()
        for old in sorted(existing - set(kept) - referenced):
            if old < manifest.version:
                self.delete_dir(self.path(name, old))

    def reinstate(self, name: str, manifest: Manifest) -> None:
        """Make a sealed version current again (``crawl recover``); deletes nothing."""
        for lock in self._held.values():
            lock.check()
        installed = [v for v in self.history(name) if v != manifest.version] + [manifest.version]
        self.write_json(self.path(name, HISTORY), {"installed": installed})
        self.write_bytes(self.path(name, "CURRENT"), manifest.to_json().encode())

    def _current_version(self, name: str) -> str | None:
        """The version ``CURRENT`` names, or None if it is missing or unreadable (no checks)."""
        try:
            return Manifest.from_json(self.read_bytes(self.path(name, "CURRENT"))).version
        except (FileNotFoundError, ValueError, TypeError, KeyError, StoreError):
            return None

    def discard_version(self, name: str, version: str) -> None:
        self.delete_dir(self.path(name, version))

    def version_files(self, name: str, manifest: Manifest) -> list[StorePath]:
        """The version's Parquet files: those the manifest names, else every one in its folder."""
        if manifest.bucket_files:
            return [self.path(name, *entry.split("/")) for entry in manifest.entries()]
        return self.list(self.path(name, manifest.version), "*.parquet")

    def version_bucket_file(self, name: str, manifest: Manifest, bucket: int) -> StorePath:
        """``bucket``'s base file of the version ``manifest`` names (:meth:`Manifest.bucket_file_name`)."""
        return self.path(name, *manifest.entry_in_table(manifest.bucket_file_name(bucket)).split("/"))

    def version_delta_files(self, name: str, manifest: Manifest, bucket: int) -> tuple[StorePath, ...]:
        """``bucket``'s delta files, oldest first (:meth:`Manifest.delta_names`)."""
        return tuple(self.path(name, *manifest.entry_in_table(n).split("/")) for n in manifest.delta_names(bucket))

    def bucket_file(self, folder: StorePath, bucket: int) -> StorePath:
        return folder / f"bucket-{bucket:05d}.parquet"

    # --- segments' folders: ``segments/<id>/`` (what lies inside one is cycles/tables/segment.py's;
    # markers and states are read there, so that storage imports nothing of the tables) ------
    def segments(self) -> list[str]:
        """Every segment id, oldest first."""
        return self.list_dirs(self.path(SEGMENTS))

    def segment_dir(self, segment: str, must_exist: bool = True) -> StorePath:
        folder = self.path(SEGMENTS, segment)
        if must_exist and not self.is_dir(folder):
            known = self.segments()
            hint = f"known segments: {', '.join(known[-5:])}" if known else "run `crawl generate` first"
            raise SegmentNotFound(f"segment {segment!r} does not exist in {self.uri_of(self.path(SEGMENTS))}; {hint}")
        return folder


class S3Lock:
    """A lock object on S3, for stores that have no file locks.

    Taken by creating ``<name>/.lock`` with a conditional PUT (``If-None-Match: *``): S3
    lets exactly one of several concurrent creators succeed. The object says who holds it
    (host, pid, a random token) and until when (``expires_at``); a thread renews it every
    ``renew_s`` seconds with a PUT conditional on its ETag, so a lease (``lease_s``, both
    from the config's ``db`` section) only expires when its holder stopped. A lock is taken over (deleted, conditional on the ETag seen, then
    created again) when it expired or when its holder is a process of this machine that no
    longer exists (``kill -9`` of a stage). A holder that loses its lock — its lease ran out
    while it was stalled and another process took over — refuses to swap ``CURRENT``.
    """

    WAIT_S = 1.0
    """How long a waiting stage sleeps between two attempts to take a held lock."""

    def __init__(self, store: Store, name: str, lease_s: float, renew_s: float):
        self.store = store
        self.lease_s = lease_s
        self.renew_s = renew_s
        self.client = store.s3_client()
        self.bucket, _, prefix = str(store.path(name, ".lock")).partition("/")
        self.key = prefix
        self.uri = store.uri_of(store.path(name, ".lock"))
        self.token = secrets.token_hex(8)
        self.etag: str | None = None
        self.lost = False
        self.took_over = False
        """Set when the lock was taken over from a holder that died or stalled (a fetch
        partition's lease: that holder may have asked hosts just before, cycles/fetch/lease.py)."""
        self.renewed_mono = 0.0
        """When this holder last wrote its lock object (monotonic clock): the lease runs from there."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> bytes:
        now = utcnow()
        return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "token": self.token,
                           "acquired_at": now.isoformat(),
                           "expires_at": (now + dt.timedelta(seconds=self.lease_s)).isoformat()}).encode()

    @staticmethod
    def _code(exc) -> str:
        return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))

    def _stale(self, holder: dict) -> bool:
        try:
            if dt.datetime.fromisoformat(holder["expires_at"]) < utcnow():
                return True
            if holder["host"] == socket.gethostname() and holder["pid"] != os.getpid():
                try:
                    os.kill(int(holder["pid"]), 0)
                except ProcessLookupError:
                    return True  # its holder died on this machine (kill -9, crash)
                except PermissionError:
                    return False
        except (KeyError, ValueError, TypeError):
            return True  # not a lock object we understand: written by a crashed writer
        return False

    def acquire(self, wait: bool) -> None:
        from botocore.exceptions import ClientError

        while True:
            try:
                written = time.monotonic()
                self.etag = self.client.put_object(Bucket=self.bucket, Key=self.key, Body=self._body(),
                                                   IfNoneMatch="*")["ETag"]
                self.renewed_mono = written
                break
            except ClientError as exc:
                if self._code(exc) not in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409"):
                    raise StoreError(f"cannot take lock {self.uri}: {exc}") from None
            try:
                held = self.client.get_object(Bucket=self.bucket, Key=self.key)
                holder_etag, raw = held["ETag"], held["Body"].read()
            except ClientError as exc:
                if self._code(exc) in ("NoSuchKey", "404"):
                    continue  # released meanwhile: try again
                raise StoreError(f"cannot read lock {self.uri}: {exc}") from None
            try:
                holder = json.loads(raw)
            except ValueError:
                holder = {}
            if self._stale(holder):
                self.took_over = True
                with contextlib.suppress(ClientError):  # someone else may take it over first
                    self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=holder_etag)
                continue
            if not wait:
                raise LockedError(
                    f"{self.uri} is held by process {holder.get('pid')} on {holder.get('host')} until "
                    f"{holder.get('expires_at')} (renewed while it runs); wait for it to finish (two stages "
                    "must not replace the crawl DB at once)")
            self._stop.wait(self.WAIT_S)
        self._thread = threading.Thread(target=self._renew, name=f"s3-lock-{self.key}", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        from botocore.exceptions import ClientError

        while not self._stop.wait(self.renew_s):
            try:
                written = time.monotonic()
                self.etag = self.client.put_object(Bucket=self.bucket, Key=self.key, Body=self._body(),
                                                   IfMatch=self.etag)["ETag"]
                self.renewed_mono = written
            except ClientError as exc:
                if self._code(exc) in ("PreconditionFailed", "412", "NoSuchKey", "404"):
                    self.lost = True
                    return
                # a transient error: try again at the next renewal, the lease still runs

    def check(self) -> None:
        if self.lost:
            raise LockedError(f"lost lock {self.uri}: its lease ran out while this process was stalled and "
                              "another process took it over; nothing was swapped, run the stage again")

    def abandon(self) -> None:
        """Stop renewing but leave the lock object to expire (or to be taken over as its dead
        holder's): the next holder then knows an earlier one stopped midway."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def release(self) -> None:
        from botocore.exceptions import ClientError

        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if not self.lost and self.etag:
            with contextlib.suppress(ClientError):
                self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=self.etag)


def fsync_file(path: str | os.PathLike) -> None:
    """Flush a file's data to disk (before it is renamed into place)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: str | os.PathLike) -> None:
    """Flush a folder's entries to disk (after a rename or mkdir in it)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
