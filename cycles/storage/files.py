"""The file system layer: paths, listing, reading and deleting, on a local disk or on S3.

A store root is a local folder or ``s3://bucket/prefix``; pyarrow's ``FileSystem`` does the
work for both. Atomic writes are cycles/storage/writes.py's (durable.py locally); this layer
only reads, lists and deletes, and counts each request for the cost benchmark (:func:`observe_io`).
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path, PurePosixPath
from typing import Callable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cycles.errors import SegmentNotFound, StoreError

SEGMENTS = "segments"
"""The folder of the segments, one sub-folder per cycle (cycles/tables/segment.py)."""

StorePath = Path | PurePosixPath
"""A path inside a store: a ``Path`` on the local disk, ``PurePosixPath('bucket/key')`` on S3."""


def sidecar_path(path: StorePath, suffix: str) -> StorePath:
    """A file derived from the Parquet file at ``path``, beside it: its name with ``suffix``
    for ``.parquet`` (a crawl DB base's indexes, cycles/tables/seenindex.py and keyindex.py).
    Not a ``.parquet`` name, so nothing that lists a version's Parquet files takes it for one."""
    return path.parent / (path.name.removesuffix(".parquet") + suffix)


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


class Files:
    """A store's files: a local folder or ``s3://bucket/prefix``.

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
        selector = pafs.FileSelector(str(folder), allow_not_found=True)
        try:
            return self.fs.get_file_info(selector)
        except FileNotFoundError:
            # pyarrow lists, and on "no such directory" checks whether the folder exists: a
            # folder another writer made in between (fetch partition 1's first chunk while
            # partition 0 resumes) fails the listing although it is allowed not to exist.
            # Listed again, it exists; CI failed test_run_discovery on this once.
            return self.fs.get_file_info(selector)

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


    def read_range(self, path: StorePath, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (one ranged GET on S3): a WARC record, for example."""
        _observed("GET", path, length)
        with self.fs.open_input_file(str(path)) as fh:
            return fh.read_at(length, offset)

    def read_metadata(self, path: StorePath) -> pq.FileMetaData:
        _observed("GET", path, 0)  # the footer: small, left out of the bytes
        return pq.read_metadata(str(path), filesystem=self.fs)


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

    def s3_client(self):
        """A boto3 S3 client (same AWS settings as pyarrow's); for conditional writes."""
        if self._s3_client is None:
            import boto3

            self._s3_client = boto3.client("s3")
        return self._s3_client

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


