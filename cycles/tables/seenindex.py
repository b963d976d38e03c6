"""A crawl DB base's known URLs by host, pre-hashed: generate's seen-sets without the URLs.

Each partition of a segment gets a seen-set (cycles/tables/assign.py ``write_seen_set``):
a Bloom filter of every URL the crawl DB holds for its hosts, and their counts per (host,
URL pattern). Built from the rows, it read ``host``, ``url`` and ``pattern_hash`` of every
row of every bucket holding one of its hosts, joined them to its hosts by name and hashed
every URL (XXH3-128, cycles/storage/bloom.py): at 100 M URLs, 33 M URLs for a 100 k-URL
segment, 48 s of generate's 88 (docs/incremental.md). The URLs' strings were only read to
be hashed and counted.

**The seen index** is written by ``crawl compact`` beside each base it writes
(:func:`write_seen_index`): one row per row of the base, sorted by host, then pattern,

========== ======= ====================================================================
column     type    what
========== ======= ====================================================================
host       string  the URL's host (dictionary-encoded: a bucket's ~16 k hosts, in runs)
pattern    uint64  the row's ``pattern_hash`` (the trap caps' URL pattern)
url_h1     uint64  XXH3-128 of the URL, low half: the Bloom filter's first position
url_h2     uint64  the high half: its step (:func:`cycles.storage.bloom.hash_pairs`)
========== ======= ====================================================================

and in the file's key-value metadata (``cycles.seen_index``) its format and the base's row
count. 16 bytes of hashes a URL instead of a ~70-byte string, no hashing at read time, and
the host matched once per dictionary entry instead of once per row. A partition
(:func:`write_seen_set_indexed`) selects its hosts' rows of each bucket's index with numpy,
counts the (host, pattern) runs, and sets the Bloom filter's bits from the stored halves:
the same filter bit for bit (same capacity, same hashes) and the same counts, in the same
order, as the scan of the rows (tests/generate/test_seen_index.py).

**Why per row and not per host blocks or per-bucket filters.** A Bloom filter per host (or
per bucket) assembled by copying blocks would cost less again, but its bits would differ
from today's seen-set, whose format the fetch worker reads (cycles/fetch/discovery.py): the
worker would need a per-host lookup, and the counts per pattern need the rows' patterns
anyway. Per-row halves keep the seen-set's format and the fetch side unchanged.

**The deltas, and segments fetched but not updated.** The index describes the base only.
A partition reads its hosts' rows of the bucket's deltas (newest per URL) and of the pending
fetched rows, as small tables, hashes their URLs, and counts a URL only if the base (by its
two halves) and the newer layers do not hold it: a delta row replacing a base row is one
URL, as in the merged rows. Two URLs with equal 128-bit hashes would count once (at 10^8
URLs a bucket the chance is ~10^-23).

**When it is used.** A sidecar's name is its base's with ``.seen-index`` for ``.parquet``
(:func:`index_path`): in the base's own version folder, so a compaction killed before its
install discards it with the version, and pruning keeps it as long as its base. It is not a
``.parquet`` name: the seal (``_COMPLETE``) and the removal of uncommitted attempts list
only those, and the index is not part of the version, only derived from it. A partition
reads a bucket from its base's index when the base has a readable one made for it (the
format, the base's row count, Parquet page checksums), else from its merged rows
(:func:`add_bucket`: bases written by inject, rebucket or recover; ``crawl compact --all``
gives every base its index); a crawl DB of an older schema is read from its rows whole.
Counters, in buckets: ``generate/seen_index_buckets``, ``generate/seen_index_fallback``.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cycles.config import Config
from cycles.storage.bloom import BloomFilter, hash_pairs
from cycles.storage.files import sidecar_path
from cycles.storage.store import Store, StorePath
from cycles.tables import schema
from cycles.tables.assign import write_seen_files
from cycles.tables.crawldb import bucket_source_sql, pattern_hash_sql

SUFFIX = ".seen-index"
"""A seen index's name: its base's with this for ``.parquet``."""

FORMAT = 1
META_KEY = b"cycles.seen_index"

SEEN_INDEX_FIELDS = [pa.field("host", pa.string(), False), pa.field("pattern", pa.uint64(), False),
                     pa.field("url_h1", pa.uint64(), False), pa.field("url_h2", pa.uint64(), False)]

COMPRESSION = {"host": "zstd", "pattern": "none", "url_h1": "none", "url_h2": "none"}
"""Hashes do not compress: zstd left them 3 % smaller and made them 60 % dearer to read
(0.11 against 0.07 CPU-s for a 10 M store's bucket of 1.25 M rows)."""

ROW_GROUP_ROWS = 1 << 20
"""Rows per row group of an index (~24 MB of hashes and patterns)."""


def index_schema(base_rows: int) -> pa.Schema:
    """The index's schema, its metadata naming the base's row count."""
    return pa.schema(SEEN_INDEX_FIELDS, metadata={META_KEY: json.dumps({"format": FORMAT, "base_rows": base_rows})})


def index_path(base: StorePath) -> StorePath:
    """The seen index of the base at ``base`` (beside it, named from it)."""
    return sidecar_path(base, SUFFIX)


def hashed_batches(reader):
    """(host, pattern_hash, url) batches as index rows: the URL replaced by its two halves."""
    for batch in reader:
        h1, h2 = hash_pairs(batch.column("url"))
        yield pa.record_batch([batch.column("host"), batch.column("pattern_hash"), pa.array(h1), pa.array(h2)],
                              schema=pa.schema(SEEN_INDEX_FIELDS))


def write_seen_index(store: Store, con, base: StorePath) -> int:
    """Write ``base``'s seen index (the module doc) from the base as written: ``crawl
    compact``, after each base. ``con``: a DuckDB connection (its memory limit bounds the
    sort). Returns the rows written."""
    rows = store.read_metadata(base).num_rows
    reader = con.sql(f"SELECT host, pattern_hash, url FROM {store.duckdb_source(con, [base])} "
                     "ORDER BY host, pattern_hash").to_arrow_reader(64 * 1024)
    return store.write_batches(index_path(base), hashed_batches(reader), index_schema(rows), ROW_GROUP_ROWS,
                               compression=COMPRESSION)


class IndexUnreadable(Exception):
    """A seen index that cannot stand for its base: the partition scans the rows instead."""


def has_index(store: Store, base: StorePath) -> bool:
    """Whether ``base`` has a seen index made for it, by its footer: this format, and the
    base's row count (a page damaged later is :func:`read_index`'s to find)."""
    path = index_path(base)
    try:
        if not store.exists(path):
            return False
        footer = store.read_metadata(path)
        meta = json.loads((footer.schema.to_arrow_schema().metadata or {}).get(META_KEY, b"{}"))
        rows = store.read_metadata(base).num_rows
    except (OSError, ValueError, pa.ArrowException):
        return False
    return meta.get("format") == FORMAT and meta.get("base_rows") == rows == footer.num_rows


def read_index(store: Store, base: StorePath) -> pa.Table:
    """``base``'s seen index, its hosts dictionary-encoded, every page's checksum checked;
    IndexUnreadable if a page is damaged or the file unreadable."""
    try:
        with store.fs.open_input_file(str(index_path(base))) as fh:
            return pq.ParquetFile(fh, read_dictionary=["host"], page_checksum_verification=True).read()
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise IndexUnreadable(f"{store.uri_of(index_path(base))}: {exc}") from None


class SeenParts:
    """A partition's seen-set as it is gathered bucket by bucket: the (host, pattern) runs
    with their URL counts — the host as its place among the partition's sorted hosts, no
    string a run until the counts are written — and the URLs' hash halves."""

    def __init__(self, hosts: pa.Array):
        self.hosts = hosts.take(pc.sort_indices(hosts))
        """The partition's hosts, sorted: a run's host is its place (rank) here."""
        self.runs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        """(rank, pattern, urls) arrays, one triple per batch of runs."""
        self.h1: list[np.ndarray] = []
        self.h2: list[np.ndarray] = []
        self.layered = False
        """Whether runs of deltas or pending rows were added (then a bucket's runs are not in order)."""

    def ranks(self, hosts: pa.Array) -> np.ndarray:
        """Each of ``hosts``' place among the partition's hosts (-1: not one of them)."""
        return pc.fill_null(pc.index_in(hosts, value_set=self.hosts), -1).to_numpy(zero_copy_only=False)

    def add_index(self, index: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """The partition's hosts' rows in one bucket's index (matched once per dictionary
        entry, not per row); returns their halves (for the newer layers)."""
        h1s, h2s = [], []
        for batch in index.to_batches():
            column = batch.column("host")
            rank = self.ranks(column.dictionary)[column.indices.to_numpy(zero_copy_only=False)]
            rows = np.flatnonzero(rank >= 0)
            if len(rows):
                self.runs.append(runs_of(rank[rows], batch.column("pattern").to_numpy()[rows]))
                h1s.append(batch.column("url_h1").to_numpy()[rows])
                h2s.append(batch.column("url_h2").to_numpy()[rows])
        h1 = np.concatenate(h1s) if h1s else np.zeros(0, np.uint64)
        h2 = np.concatenate(h2s) if h2s else np.zeros(0, np.uint64)
        self.h1.append(h1)
        self.h2.append(h2)
        return h1, h2

    def add_rows(self, rows: pa.Table, h1: np.ndarray, h2: np.ndarray) -> None:
        """URLs no earlier layer holds (host, url, pattern_hash sorted by host, pattern_hash), hashed."""
        if rows.num_rows:
            self.layered = True
            self.runs.append(runs_of(self.ranks(rows.column("host").combine_chunks()),
                                     rows.column("pattern_hash").to_numpy()))
            self.h1.append(h1)
            self.h2.append(h2)

    def counts(self) -> pa.Table:
        """The seen counts (host, pattern_hash, urls), one row per pair, sorted by both (as
        the row scan's ORDER BY host, pattern_hash). A bucket's index runs are in that order
        and hosts live in one bucket, so without other layers a stable sort by host suffices;
        a run cut by a batch boundary, or a pair the newer layers add to, is merged here."""
        rank, patterns, urls = (np.concatenate([run[i] for run in self.runs]) if self.runs
                                else np.zeros(0, dtype) for i, dtype in enumerate((np.int64, np.uint64, np.int64)))
        order = np.lexsort((patterns, rank)) if self.layered else np.argsort(rank, kind="stable")
        rank, patterns, urls = rank[order], patterns[order], urls[order]
        starts = run_starts(rank, patterns)
        urls = np.add.reduceat(urls, starts) if len(urls) else urls
        return pa.table({"host": self.hosts.take(pa.array(rank[starts])).cast(pa.string()),
                         "pattern_hash": pa.array(patterns[starts], pa.uint64()), "urls": pa.array(urls, pa.int64())})

    def add_to(self, bloom: BloomFilter) -> None:
        """Set the bits of every URL gathered in ``bloom``."""
        bloom.add_hashes(zip(self.h1, self.h2))


def run_starts(rank: np.ndarray, patterns: np.ndarray) -> np.ndarray:
    """Where each run of equal (rank, pattern) begins in rows sorted by both."""
    return np.flatnonzero(np.concatenate(([True], (rank[1:] != rank[:-1]) | (patterns[1:] != patterns[:-1]))))


def runs_of(rank: np.ndarray, patterns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, pattern, urls) of rows sorted by host, then pattern: one entry a run."""
    if not len(rank):
        return rank.astype(np.int64), patterns.astype(np.uint64), np.zeros(0, np.int64)
    starts = run_starts(rank, patterns)
    lengths = np.diff(np.append(starts, len(rank))).astype(np.int64)
    return rank[starts].astype(np.int64), patterns[starts].astype(np.uint64), lengths


def held(h1: np.ndarray, h2: np.ndarray, by_h1: np.ndarray, by_h2: np.ndarray) -> np.ndarray:
    """Which of the URLs hashed to (``h1``, ``h2``) are among those hashed to (``by_h1``,
    ``by_h2``): both halves equal. Sorts ``h1`` (the small side: a delta's or a pending
    segment's URLs) and looks each of ``by`` up in it, so the large side is not sorted."""
    found = np.zeros(len(h1), dtype=bool)
    if not len(h1) or not len(by_h1):
        return found
    order = np.argsort(h1, kind="stable")
    sorted_h1 = h1[order]
    pos = np.searchsorted(sorted_h1, by_h1)
    pos_ok = pos < len(sorted_h1)
    hit = np.flatnonzero(pos_ok)
    hit = hit[sorted_h1[pos[hit]] == by_h1[hit]]
    if len(np.unique(sorted_h1)) == len(sorted_h1):  # distinct low halves: one candidate each
        rows = order[pos[hit]]
        found[rows[h2[rows] == by_h2[hit]]] = True
        return found
    for i in hit:  # equal low halves (never seen in practice): each of those rows compared
        same = order[pos[i]:np.searchsorted(sorted_h1, by_h1[i], side="right")]
        found[same[h2[same] == by_h2[i]]] = True
    return found


def newer_rows_sql(store: Store, con, deltas: tuple) -> str:
    """SQL of the partition's hosts' rows in a bucket's deltas (newest per URL; ``assignment``
    names the hosts), as (host, url, pattern_hash) sorted by host, then pattern."""
    numbered = " UNION ALL ".join(f"SELECT host, url, pattern_hash, {i}::INTEGER AS layer "
                                  f"FROM {store.duckdb_source(con, [d])}" for i, d in enumerate(deltas))
    return f"""SELECT host, url, pattern_hash FROM ({numbered}) WHERE host IN (SELECT host FROM assignment)
        QUALIFY row_number() OVER (PARTITION BY url ORDER BY layer DESC) = 1 ORDER BY host, pattern_hash"""


def pending_rows_sql(pending_sql: str) -> str:
    """SQL of the partition's hosts' URLs fetched by segments not updated yet, distinct, with
    their pattern (as cycles/tables/assign.py ``write_seen_set`` reads them)."""
    return f"""WITH pending AS (SELECT DISTINCT p.host, p.url FROM {pending_sql} p
                                WHERE p.host IN (SELECT host FROM assignment))
        SELECT host, url, {pattern_hash_sql('url')} AS pattern_hash FROM pending ORDER BY host, pattern_hash"""


def add_unheld(parts: SeenParts, rows: pa.Table, by_h1: np.ndarray, by_h2: np.ndarray) -> None:
    """Add the URLs of ``rows`` that the URLs hashed to (``by_h1``, ``by_h2``) do not hold."""
    h1, h2 = hash_pairs(rows.column("url"))
    new = ~held(h1, h2, by_h1, by_h2)
    parts.add_rows(rows.filter(pa.array(new)), h1[new], h2[new])


def index_hosts(store: Store, base: StorePath) -> pa.Array | None:
    """The distinct hosts of ``base`` from its seen index's host column (dictionary runs,
    no URL read), or None when it has no usable index: generate's known-hosts part."""
    if not has_index(store, base):
        return None
    try:
        with store.fs.open_input_file(str(index_path(base))) as fh:
            column = pq.ParquetFile(fh, read_dictionary=["host"], page_checksum_verification=True).read(["host"])
    except (OSError, ValueError, pa.ArrowException):
        return None
    chunks = [chunk.dictionary.take(pc.unique(chunk.indices)) for chunk in column.column("host").chunks]
    return pc.unique(pa.chunked_array(chunks, pa.string())) if chunks else pa.array([], pa.string())


def from_index(store: Store, bucket) -> pa.Table | None:
    """The bucket's base's seen index, or None when it has none it can use (has_index,
    read_index: a damaged one is passed over)."""
    if not has_index(store, bucket.base):
        return None
    try:
        return read_index(store, bucket.base)
    except IndexUnreadable:
        return None


def add_bucket(store: Store, con, parts: SeenParts, bucket) -> bool:
    """Add the partition's hosts' URLs of one bucket (crawldb.BucketFiles): from its base's
    index and its deltas, or, without a usable index, from its merged rows as the row scan
    reads them. Returns whether the index was used."""
    index = from_index(store, bucket)
    if index is None:
        rows = con.sql(f"""SELECT host, url, pattern_hash FROM {bucket_source_sql(store, con, bucket)}
            WHERE host IN (SELECT host FROM assignment) ORDER BY host, pattern_hash""").to_arrow_table()
        parts.add_rows(rows, *hash_pairs(rows.column("url")))  # merged: one row a URL
        return False
    h1, h2 = parts.add_index(index)
    if bucket.deltas:
        add_unheld(parts, con.sql(newer_rows_sql(store, con, bucket.deltas)).to_arrow_table(), h1, h2)
    return True


def gather_seen(store: Store, con, buckets: list, hosts: pa.Array, pending_sql: str | None) -> tuple[SeenParts, int]:
    """The partition's seen-set from each bucket (``buckets``: crawldb.BucketFiles) and the
    pending fetched rows (the module doc); and how many buckets were read from their index."""
    parts = SeenParts(hosts)
    indexed = sum(add_bucket(store, con, parts, bucket) for bucket in buckets)
    if pending_sql is not None:
        rows = con.sql(pending_rows_sql(pending_sql)).to_arrow_table()
        if rows.num_rows:
            add_unheld(parts, rows, np.concatenate(parts.h1 or [np.zeros(0, np.uint64)]),
                       np.concatenate(parts.h2 or [np.zeros(0, np.uint64)]))
    return parts, indexed


def write_seen_set_indexed(store: Store, config: Config, folder: StorePath, con, buckets: list,
                           part: int, pending_sql: str | None = None) -> dict[str, int]:
    """:func:`cycles.tables.assign.write_seen_set` from the buckets' seen indexes (a bucket
    without a usable one from its rows): the same files. ``con`` has the partition's hosts
    registered as ``assignment``; the crawl DB has the current schema."""
    hosts = con.sql("SELECT host FROM assignment").to_arrow_table().column("host").combine_chunks()
    parts, indexed = gather_seen(store, con, buckets, hosts, pending_sql)
    counters = write_seen_files(store, config, folder, part, parts.counts().cast(schema.SEEN_COUNTS), (),
                                add=parts.add_to)
    counters["generate/seen_index_buckets"] = indexed
    if indexed < len(buckets):
        counters["generate/seen_index_fallback"] = len(buckets) - indexed
    return counters
