"""Versions of a table and the manifest naming the current one (``<table>/CURRENT``).

A versioned table (the crawl DB, the host DB) is a folder of version folders; ``CURRENT``,
written last, names the one readers trust, ``HISTORY`` the ones once current, and each
version's ``_COMPLETE`` seal lists its files and rows so ``crawl recover`` can tell a whole
version from a crashed writer's leftovers (the rules: cycles/storage/store.py).
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from dataclasses import dataclass

from cycles.errors import StoreError
from cycles.storage.durable import make_dirs
from cycles.storage.files import StorePath

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



COMPLETE = "_COMPLETE"
"""Marker of a fully written version (``<table>/<version>/_COMPLETE``), see :meth:`Store.seal_version`."""

HISTORY = "HISTORY"
"""``<table>/HISTORY``: the versions that were once current, oldest first (:meth:`Store.install`)."""

class Versions:
    """The versions of a store's tables (a mixin of :class:`cycles.storage.store.Store`)."""

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
            make_dirs(folder)
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
        self.check_locks()  # never swap after losing the lock (S3 lease expired and taken over)
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
        self.check_locks()
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

