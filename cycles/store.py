"""Where everything lives, and how it is written safely.

Layout of a store (a local folder, ``./data`` by default)::

    crawldb/CURRENT                    JSON manifest naming the current version (written last)
    crawldb/<version>/bucket-NNNNN.parquet   one file per host-hash bucket (schema.CRAWLDB)
    hostdb/CURRENT, hostdb/<version>/hosts.parquet   per-host state (schema.HOSTS)
    segments/<segment id>/             one folder per cycle, sortable id (UTC time first)
        fetchlist/part-NNNNN.parquet   written by generate (schema.FETCHLIST)
        fetched/part-NNNNN-cNNNNNN.parquet   written by fetch, chunk by chunk (schema.FETCHED)
        outlinks/part-NNNNN-cNNNNNN.parquet  written by fetch (schema.OUTLINKS)
        warc/part-NNNNN-cNNNNNN.warc.gz       raw responses, one WARC file per chunk
        hosts/part-NNNNN.parquet       host state after fetching the partition (schema.HOSTS)
        stats/<stage>-*.json           counters of each stage
        _GENERATED, _FETCHED, _UPDATED markers (JSON), written last by each stage

Rules that keep a crash harmless:

- Every file is written to a temporary name in the same folder and renamed into place,
  so a reader sees a whole file or none.
- The crawl DB is never edited: a stage writes a complete new version beside the current
  one and then replaces ``CURRENT`` (one atomic rename). A crash at any moment leaves the
  old or the new version, never a mix. Old versions are removed after the swap.
- Stages that replace the crawl DB hold ``crawldb/.lock`` (an advisory file lock) from
  reading ``CURRENT`` until the swap.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from cycles.errors import LockedError, SegmentNotFound, StoreError


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

    def to_json(self) -> str:
        data = self.__dict__.copy()
        data["applied_segments"] = list(self.applied_segments)
        return json.dumps(data, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        data = json.loads(text)
        data["applied_segments"] = tuple(data.get("applied_segments", ()))
        return cls(**data)


class Store:
    """A crawl store on the local file system."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).absolute()

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    # --- generic safe writes ---------------------------------------------------------
    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    @staticmethod
    def _tmp_name(path: Path) -> Path:
        return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")

    def write_bytes(self, path: Path, data: bytes) -> None:
        """Write a whole file atomically (temporary name, fsync, rename)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._tmp_name(path)
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def write_json(self, path: Path, data: dict) -> None:
        self.write_bytes(path, (json.dumps(data, indent=1, default=str) + "\n").encode())

    def read_json(self, path: Path) -> dict:
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            raise
        except (OSError, ValueError) as exc:
            raise StoreError(f"{path} is unreadable or not JSON ({exc}); restore it or remove it") from None

    def write_table(self, path: Path, table: pa.Table, schema: pa.Schema) -> None:
        """Write one Parquet file atomically, cast to its documented schema."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._tmp_name(path)
        pq.write_table(table.select(schema.names).cast(schema), tmp, compression="zstd")
        os.replace(tmp, path)

    def write_batches(self, path: Path, batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> int:
        """Stream record batches into one Parquet file atomically; returns rows written."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._tmp_name(path)
        rows = 0
        try:
            with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
                for batch in batches:
                    if batch.num_rows:
                        table = pa.Table.from_batches([batch]).select(schema.names).cast(schema)
                        writer.write_table(table)
                        rows += batch.num_rows
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return rows

    def remove_temporaries(self, folder: Path, prefix: str = "") -> int:
        """Delete leftovers of writes interrupted by a crash; returns how many.

        ``prefix`` limits it to files whose name starts with it: a folder shared by several
        writers (the fetch partitions) must only lose the caller's own leftovers.
        """
        removed = 0
        if folder.exists():
            for tmp in folder.glob(f".{prefix}*.tmp"):
                tmp.unlink(missing_ok=True)
                removed += 1
        return removed

    # --- crawl DB and host DB versions -------------------------------------------------
    @contextlib.contextmanager
    def lock(self, name: str = "crawldb", wait: bool = False) -> Iterator[None]:
        """Hold the advisory lock guarding the swap of a versioned table."""
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

    def manifest(self, name: str = "crawldb") -> Manifest | None:
        """The current version's manifest, or None if the table was never written."""
        current = self.path(name, "CURRENT")
        if not current.exists():
            return None
        try:
            manifest = Manifest.from_json(current.read_text())
        except (ValueError, TypeError, KeyError) as exc:
            raise StoreError(f"{current} is corrupt ({exc}); point it at an intact version folder "
                             f"under {self.path(name)} or restore it from backup") from None
        if not self.path(name, manifest.version).is_dir():
            raise StoreError(f"{current} names version {manifest.version}, which is missing; "
                             f"point CURRENT at an intact version folder under {self.path(name)}")
        return manifest

    def new_version_dir(self, name: str = "crawldb") -> tuple[str, Path]:
        version = "v" + new_id()
        folder = self.path(name, version)
        folder.mkdir(parents=True)
        return version, folder

    def install(self, name: str, manifest: Manifest, keep: int) -> None:
        """Make ``manifest.version`` current (atomic rename), then prune old versions."""
        self.write_bytes(self.path(name, "CURRENT"), manifest.to_json().encode())
        versions = sorted(p for p in self.path(name).iterdir() if p.is_dir() and p.name.startswith("v"))
        for old in versions[: max(0, len(versions) - keep)]:
            if old.name != manifest.version:
                shutil.rmtree(old, ignore_errors=True)

    def discard_version(self, name: str, version: str) -> None:
        shutil.rmtree(self.path(name, version), ignore_errors=True)

    def version_files(self, name: str, manifest: Manifest) -> list[Path]:
        return sorted(self.path(name, manifest.version).glob("*.parquet"))

    def bucket_file(self, folder: Path, bucket: int) -> Path:
        return folder / f"bucket-{bucket:05d}.parquet"

    # --- segments ----------------------------------------------------------------------
    def segments(self) -> list[str]:
        folder = self.path("segments")
        if not folder.exists():
            return []
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))

    def segment_dir(self, segment: str, must_exist: bool = True) -> Path:
        folder = self.path("segments", segment)
        if must_exist and not folder.is_dir():
            known = self.segments()
            hint = f"known segments: {', '.join(known[-5:])}" if known else "run `crawl generate` first"
            raise SegmentNotFound(f"segment {segment!r} does not exist in {self.path('segments')}; {hint}")
        return folder

    def marker(self, segment: str, stage: str) -> dict | None:
        path = self.segment_dir(segment) / f"_{stage.upper()}"
        if not path.exists():
            return None
        return self.read_json(path)

    def write_marker(self, segment: str, stage: str, data: dict) -> None:
        self.write_json(self.segment_dir(segment) / f"_{stage.upper()}", data)

    def segment_state(self, segment: str) -> str:
        """generated, fetched or updated — the last stage whose marker exists ("incomplete" if none)."""
        for stage in ("updated", "fetched", "generated"):
            if (self.segment_dir(segment) / f"_{stage.upper()}").exists():
                return stage
        return "incomplete"

    def latest_segment(self, state: str) -> str:
        """The newest segment in the given state, for commands run without a segment id."""
        for segment in reversed(self.segments()):
            if self.segment_state(segment) == state:
                return segment
        raise SegmentNotFound(f"no segment in state {state!r} in {self.path('segments')}")


def read_parquet_checked(path: Path, schema: pa.Schema | None = None) -> pa.Table:
    """Read a Parquet file, turning a corrupt or missing file into a StoreError that says what to do."""
    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise StoreError(f"{path} is missing") from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise StoreError(f"{path} is not a readable Parquet file ({exc}); restore it, or remove its "
                         "folder and rerun the stage that wrote it") from None
    if schema is not None:
        missing = [n for n in schema.names if n not in table.column_names]
        if missing:
            raise StoreError(f"{path} lacks columns {missing}; it was written by another program or version")
        table = table.select(schema.names).cast(schema)
    return table


def check_parquet_files(paths: list[Path]) -> None:
    """Open each file's footer: fails fast, naming the file, before a long query starts."""
    for path in paths:
        try:
            pq.read_metadata(path)
        except FileNotFoundError:
            raise StoreError(f"{path} is missing; restore it, or point CURRENT at an intact version") from None
        except (pa.ArrowInvalid, OSError) as exc:
            raise StoreError(f"{path} is corrupt ({exc}); restore it from backup, or point "
                             f"{path.parent.parent / 'CURRENT'} at an older intact version") from None
