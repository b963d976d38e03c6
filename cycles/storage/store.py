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

import os

from cycles.storage.durable import fsync_dir, fsync_file, write_atomically
from cycles.storage.files import SEGMENTS, Files, IoObserver, StorePath, observe_io
from cycles.storage.locks import Locks, S3Lock
from cycles.storage.parquet import (ParquetReads, check_parquet_files, parquet_footer,
                                    read_parquet_checked, verify_parquet_file)
from cycles.storage.sources import Sources
from cycles.storage.versions import COMPLETE, HISTORY, Manifest, Versions, new_id, utcnow
from cycles.storage.writes import ROW_GROUP_BYTES, ROW_GROUP_ROWS, Writes


__all__ = ["COMPLETE", "HISTORY", "ROW_GROUP_BYTES", "ROW_GROUP_ROWS", "SEGMENTS", "IoObserver", "Manifest",
           "S3Lock", "Store", "StorePath", "check_parquet_files", "fsync_dir", "fsync_file", "new_id",
           "observe_io", "parquet_footer", "read_parquet_checked", "utcnow", "verify_parquet_file",
           "write_atomically"]
"""What callers import from here: the façade and the names of its parts they use."""


class Store(Locks, Versions, Sources, ParquetReads, Writes, Files):
    """A crawl store: a local folder or ``s3://bucket/prefix``, one object every stage reads
    and writes through. Each concept is its own part: the files (cycles/storage/files.py),
    atomic writes (durable.py, writes.py), checked Parquet reads (parquet.py), DuckDB sources
    (sources.py), versions and the manifest (versions.py), locks (locks.py).
    """

    def __init__(self, root: str | os.PathLike):
        super().__init__(root)
        self._held: dict[str, S3Lock] = {}
