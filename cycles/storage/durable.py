"""Atomic writes: a reader sees a whole file or none, and a rename that happened survives a power cut.

The one local routine is :func:`write_atomically`: the data goes to a temporary name in the
target's folder, is fsynced, renamed into place, and the folder is fsynced. Every local file
that must never be seen half-written (the store's files, the pages feed, query results, the
report page, the test web's ready files) goes through it; on S3 the store writes under the
final name, a PUT (or the completion of a multipart upload) being atomic per object
(cycles/storage/writes.py). Imports nothing heavy: the test web's servers use it too.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")


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


def tmp_name(path: Path) -> Path:
    """A temporary name beside ``path`` (hidden, random: two writers never share one, and
    ``Store.remove_temporaries`` finds it after a crash)."""
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")


def make_dirs(folder: Path) -> None:
    """``mkdir -p``, fsyncing the parent of each folder created (its entry is then durable)."""
    missing = []
    folder = Path(folder)
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for new in reversed(missing):
        new.mkdir(exist_ok=True)
        fsync_dir(new.parent)


def rename_durably(tmp: Path, path: Path, before: Callable[[Path], None] | None = None) -> None:
    """Rename a fsynced file into place and fsync its folder: the rename itself is then on
    disk too, so ``CURRENT`` (written last) never survives a power loss that the files it
    names did not. ``before(path)`` runs just before the rename: the store's commit point,
    where the fault-injection tests kill the process (cycles/storage/faults.py)."""
    if before is not None:
        before(path)
    os.replace(tmp, path)
    fsync_dir(Path(path).parent)


def write_atomically(path: Path, write: Callable[[Path], T],
                     before: Callable[[Path], None] | None = None, durable: bool = True) -> T:
    """The one local atomic write: ``write(tmp)`` fills a temporary file beside ``path``,
    which is fsynced and renamed into place (:func:`rename_durably`); on any failure
    ``path`` is left as it was and the temporary file removed. Returns what ``write`` did.
    ``durable=False``: no fsync, for files a power cut may lose (progress counters
    rewritten every second): still whole or absent for a reader."""
    path = Path(path)
    (make_dirs if durable else _mkdir)(path.parent)
    tmp = tmp_name(path)
    try:
        result = write(tmp)
        if durable:
            fsync_file(tmp)
            rename_durably(tmp, path, before)
        else:
            if before is not None:
                before(path)
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return result


def _mkdir(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)


def write_file_atomically(path: Path, data: bytes | str, durable: bool = True) -> None:
    """A whole small file, atomically (:func:`write_atomically`), without a commit point."""
    raw = data.encode() if isinstance(data, str) else data
    write_atomically(Path(path), lambda tmp: tmp.write_bytes(raw), durable=durable)
