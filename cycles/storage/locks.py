"""The locks guarding the swap of a versioned table: a ``fcntl`` lock locally, a lock object on S3."""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import secrets
import socket
import threading
import time
from typing import Iterator

from cycles.config import DbConfig
from cycles.errors import LockedError, StoreError
from cycles.storage.files import Files
from cycles.storage.versions import utcnow


class Locks:
    """Store-wide locks (a mixin of :class:`cycles.storage.store.Store`)."""

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


    def check_locks(self) -> None:
        """Never swap after losing a lock (an S3 lease expired and was taken over)."""
        for lock in self._held.values():
            lock.check()


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

    def __init__(self, store: Files, name: str, lease_s: float, renew_s: float):
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
        partition's lease: that holder may have asked hosts just before, cycles/fetch/partition_lease.py)."""
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

