"""The one partitioning rule: which bucket a host's rows live in, and which part of the host graph.

Every table keyed by host is split the same way, so that one task reads one bucket of each
table and finds all of a host's rows there: the crawl DB and the host DB in ``db.buckets``
buckets, generate's hash groups, update's per-bucket link files. The rule is
``host_hash % n`` (``host_hash``: cycles/urls.py :func:`host_hash`, a stable 64-bit hash of
the host name), spelled here once in SQL and once for numpy arrays: the two must agree,
or a row lands in a bucket whose readers never look for it.

The host graph (the link DB's ``hosts-NNNNN`` parts) is split by a second key, the low half
of the host's MD5, computed in SQL by every task alike (a DuckDB ``hash()`` may change
between versions; MD5 never does).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from cycles.config import Config


def bucket_sql(host_hash_sql: str, buckets: int) -> str:
    """SQL for the bucket of a host hash column (``host_hash % buckets``)."""
    return f"({host_hash_sql} % {int(buckets)})"


def in_bucket_sql(host_hash_sql: str, bucket: int, buckets: int) -> str:
    """SQL: is the row of ``bucket`` out of ``buckets``?"""
    return f"{bucket_sql(host_hash_sql, buckets)} = {int(bucket)}"


def buckets_of(host_hashes: pa.Array | pa.ChunkedArray | np.ndarray, buckets: int) -> np.ndarray:
    """The bucket of each host hash (uint64), as an int64 array: :func:`bucket_sql` for numpy."""
    if not isinstance(host_hashes, np.ndarray):
        host_hashes = host_hashes.to_numpy(zero_copy_only=False)
    return (host_hashes.astype(np.uint64, copy=False) % np.uint64(buckets)).astype(np.int64)


def bucket_of_hash(host_hash: int, buckets: int) -> int:
    """The bucket of one host hash: :func:`bucket_sql` for a Python int."""
    return host_hash % buckets


def host_key_sql(column: str) -> str:
    """A host's 64-bit key for the host graph: the low half of its MD5 (stable across DuckDB versions)."""
    return f"md5_number_lower({column})"


def part_sql(column: str, parts: int) -> str:
    """SQL for the host graph part (``hosts-NNNNN``) of the host named in ``column``."""
    return part_of_key_sql(host_key_sql(column), parts)


def part_of_key_sql(key_sql: str, parts: int) -> str:
    """SQL for the host graph part of a host key already computed (:func:`host_key_sql`)."""
    return f"({key_sql} % {int(parts)})"


@dataclass(frozen=True)
class BucketTask:
    """One bucket's task of a table merge, as the executor ships it to a worker (picklable:
    the store's location and the config, then the task's own ids and folders in the
    subclass: the host DB's :class:`cycles.tables.hostdb.HostBucketTask`, the link DB's
    ``LinkBucketTask`` in cycles/update/linkgraph.py)."""

    store_uri: str
    config: Config
