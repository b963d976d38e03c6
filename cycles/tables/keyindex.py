"""A compacted base's key index: the sidecar update's bucket tasks read instead of every row.

Each bucket task of an update asks the old rows of its bucket three questions about all of
them: which of the segment's URLs are known (the new-URL test), and how many rows each
host and each URL pattern already has (the trap caps, ``update.max_urls_per_host_total`` and
``update.max_urls_per_pattern``). Answered from the rows, they read the URL strings of every
row (docs/update.md, "Update's indexes (session 15)"). The key index answers them from three
sorted arrays of 64-bit numbers, one lookup per segment URL.

**The file.** ``crawl compact`` writes it beside each base it writes, in the same version
folder, named from the base (``base-NNNNN.<id>.parquet`` → ``base-NNNNN.<id>.keys``: not
``*.parquet``, so the version's seal and its attempt clean-up never take it for a bucket
file). A compaction killed before its install discards it with the version folder; a base
kept by later versions keeps it as long as its folder stays. A Parquet file, page checksums,
zstd, schema :data:`KEY_INDEX`: three columns of the base's row count, **each sorted on its
own** (row i of one column has nothing to do with row i of another):

- ``url_fp``: :func:`url_fingerprints` of every URL of the base;
- ``host_pattern``: :func:`host_pattern_keys` of each row's ``host_hash`` and ``pattern_hash``
  (a pattern masks the digits of the host name too: ``h1.example`` and ``h2.example`` share
  their patterns, and the trap caps count per host and pattern);
- ``host_hash``: the base's ``host_hash`` column.

Its footer metadata names the base file and its row count; an index whose base name or row
count differs from the base it is read for is not used.

**Exactness.** A fingerprint hit is never trusted alone: the URLs whose fingerprint the base
holds are looked up by their strings in the bucket task's one scan of the base (they join its
probe set), so a collision (two URLs of one bucket with the same 64-bit XXH3: with n URLs in a
bucket, each new URL collides with probability n / 2^64, 8.7e-14 at 1.6 M rows) costs one
more row read, not a lost URL. The counts by pattern and by host are exact but for a
collision of 64-bit (host, pattern) keys or host hashes inside one bucket, which would add the other's rows
to the count (the crawl DB's own ``pattern_hash`` is already 64 bits of MD5).

Bases without an index (written by inject, rebucket, a whole update, or by code before it,
or whose index is missing or damaged) are read the old way; ``crawl compact --all`` writes a
new base and its index for every bucket whose base has none.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from cycles.errors import StoreError
from cycles.storage.bloom import encoded
from cycles.storage.files import StorePath, sidecar_path
from cycles.storage.store import Store

SUFFIX = ".keys"
"""The index's name: its base's name with ``.parquet`` replaced by this."""

KEY_INDEX = pa.schema([
    pa.field("url_fp", pa.uint64(), nullable=False, metadata={"doc": "url_fingerprints(url), sorted"}),
    pa.field("host_pattern", pa.uint64(), nullable=False, metadata={"doc": "host_pattern_keys(host_hash, pattern_hash), sorted"}),
    pa.field("host_hash", pa.uint64(), nullable=False, metadata={"doc": "the rows' host_hash, sorted"}),
], metadata={"crawl.schema": "key-index", "crawl.key_index_version": "1"})
"""The key index's columns, each sorted on its own (module docstring)."""

BASE_KEY, ROWS_KEY, VERSION_KEY = b"crawl.base", b"crawl.base_rows", b"crawl.key_index_version"
"""Footer metadata: the base's file name and row count the index was made of."""


def index_path(base: StorePath) -> StorePath:
    """Where ``base``'s key index lives: beside it, named from it."""
    return sidecar_path(base, SUFFIX)


def url_fingerprints(urls: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Each URL's XXH3-64 of its UTF-8 bytes, as uint64 (stable across versions and
    machines: a specified hash, as the Bloom filter's, cycles/storage/bloom.py)."""
    if len(urls) == 0:
        return np.zeros(0, np.uint64)
    digests = b"".join(map(xxhash.xxh3_64_digest, encoded(urls)))
    return np.frombuffer(digests, dtype=">u8").astype(np.uint64)


def host_pattern_keys(host_hash: np.ndarray, pattern_hash: np.ndarray) -> np.ndarray:
    """One 64-bit key per (host, pattern): the pattern hash XOR the host hash times the
    golden-ratio constant (wrapping), so that one host's patterns and another's differ."""
    return np.bitwise_xor(pattern_hash.astype(np.uint64), host_hash.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))


def write_key_index(store: Store, base: StorePath) -> int:
    """Write ``base``'s key index beside it (atomically, as every store file); returns its
    rows. Reads the base's three key columns a row group at a time."""
    source = pq.ParquetFile(base if store.local else store.fs.open_input_file(str(base)))
    parts: dict[str, list[np.ndarray]] = {"url_fp": [], "host_pattern": [], "host_hash": []}
    for group in range(source.metadata.num_row_groups):
        rows = source.read_row_group(group, columns=["url", "pattern_hash", "host_hash"])
        hosts = rows.column("host_hash").to_numpy().astype(np.uint64)
        parts["url_fp"].append(url_fingerprints(rows.column("url")))
        parts["host_pattern"].append(host_pattern_keys(hosts, rows.column("pattern_hash").to_numpy()))
        parts["host_hash"].append(hosts)
    columns = {n: np.sort(np.concatenate(p)) if p else np.zeros(0, np.uint64) for n, p in parts.items()}
    rows = len(columns["url_fp"])
    schema = KEY_INDEX.with_metadata({**KEY_INDEX.metadata, BASE_KEY: base.name.encode(), ROWS_KEY: str(rows).encode()})
    store.write_table(index_path(base), pa.table(columns, schema=schema), schema)
    return rows


def has_key_index(store: Store, base: StorePath) -> bool:
    """Whether ``base`` has a key index of this version (by its footer; :func:`read_key_index`
    checks the rest): ``crawl compact --all`` gives the others a new one."""
    path = index_path(base)
    if not store.exists(path):
        return False
    try:
        meta = store.read_metadata_checked(path).metadata or {}
    except StoreError:
        return False
    return meta.get(VERSION_KEY) == KEY_INDEX.metadata[VERSION_KEY]


class KeyIndex:
    """A base's key index in memory: three sorted uint64 arrays."""

    def __init__(self, url_fp: np.ndarray, host_pattern: np.ndarray, host_hash: np.ndarray):
        self.url_fp, self.host_pattern, self.host_hash = url_fp, host_pattern, host_hash

    def holds_urls(self, fingerprints: np.ndarray) -> np.ndarray:
        """Whether each fingerprint is one of the base's URLs' (a hit may be a collision)."""
        return sorted_member(self.url_fp, fingerprints)

    def pattern_counts(self, host_hash: np.ndarray, pattern_hash: np.ndarray) -> np.ndarray:
        """The base's rows of each (host, pattern)."""
        return sorted_count(self.host_pattern, host_pattern_keys(host_hash, pattern_hash))

    def host_counts(self, hosts: np.ndarray) -> np.ndarray:
        """The base's rows of each host hash."""
        return sorted_count(self.host_hash, hosts)


def read_key_index(store: Store, base: StorePath) -> KeyIndex | None:
    """``base``'s key index, or None when it has none that fits it (missing, damaged, made of
    another base or another row count): the caller then reads the rows."""
    path = index_path(base)
    if not store.exists(path):
        return None
    try:
        table = store.read_table(path)
        rows = store.read_metadata_checked(base).num_rows
    except StoreError:
        return None
    meta = table.schema.metadata or {}
    if (meta.get(VERSION_KEY) != KEY_INDEX.metadata[VERSION_KEY] or meta.get(BASE_KEY) != base.name.encode() or meta.get(ROWS_KEY) != str(rows).encode()
            or table.num_rows != rows or table.schema.names != KEY_INDEX.names):
        return None
    return KeyIndex(*(table.column(n).to_numpy().astype(np.uint64) for n in KEY_INDEX.names))


def sorted_member(sorted_values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Whether each of ``keys`` is in ``sorted_values`` (ascending)."""
    if len(sorted_values) == 0:
        return np.zeros(len(keys), bool)
    at = np.minimum(np.searchsorted(sorted_values, keys), len(sorted_values) - 1)
    return sorted_values[at] == keys


def sorted_count(sorted_values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """How often each of ``keys`` occurs in ``sorted_values`` (ascending)."""
    return (np.searchsorted(sorted_values, keys, side="right")
            - np.searchsorted(sorted_values, keys, side="left")).astype(np.int64)
