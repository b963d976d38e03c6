"""A Bloom filter over strings, sized from the expected count and the false-positive rate.

Used where an approximate "seen before?" saves real work and a false positive costs little:
the fetch worker drops an outlink it has already written in this segment (the same
navigation links appear on every page of a site), so the outlinks files shrink to about
one row per distinct link before update has to read, normalise and deduplicate them. A
false positive drops a link that was not yet written — it is lost for this segment only
and is found again from another page or a later cycle; ``fetch.outlink_bloom_fp`` sets
how often that may happen.

Sizing (the standard formulas): m = -n ln p / (ln 2)^2 bits and k = (m / n) ln 2 hashes:
9.6 bits (1.2 bytes) per element at p = 1 %, 14.4 bits at 0.1 % — 10 billion
URLs at 1 % fit in about 12 GB. Positions come from one 128-bit hash per string (its two
64-bit halves) by double hashing (Kirsch & Mitzenmacher, 2006), set and tested with numpy.

**The hash (version 2): XXH3-128** of the string's UTF-8 bytes (the ``xxhash`` library; the
algorithm is specified and the same on every machine and process, unlike Python's
``hash()``). It replaced BLAKE2b (version 1), a cryptographic hash we did not need — a
collision or a crafted URL costs at most a missed discovery: XXH3 through ``map`` over an
Arrow array's values took 0.20 µs a URL against BLAKE2b's 0.55 µs with its generator, and
in the small path (one call a link) 0.17 µs against 0.76 µs (best of 3, CPU time, 1 M
URLs of 70 bytes, load 5). A numpy polynomial hash over the Arrow buffers (no call per
string) took 0.40 µs for one 32-bit half, and the fetch side would have had to compute it
in Python. A filter written with version 1 is still read and used with BLAKE2b
(:meth:`BloomFilter.from_bytes`): a segment generated before the upgrade keeps its
discovery, and generate keeps honouring the new-host claims its workers may make
(cycles/tables/newhosts.py) instead of treating the segment as one without a filter.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from typing import Sequence

import numpy as np
import pyarrow as pa
import xxhash

SMALL_BATCH = 64
"""Batches up to this many strings take the pure-Python path (:meth:`BloomFilter._small_add`,
:meth:`_small_contains`): the fetch worker asks about one page's links at a time (~7-40),
where numpy's per-call overhead dominated — ``add_new`` of 7 URLs took ~80 µs through numpy
(``np.bitwise_or.at`` alone is slow), ~46 µs in Python (best of 20, CPU time, on the loaded
2-core VM), with the same bits set and the same answers (tests/test_bloom.py compares the
two paths)."""

BULK_CHUNK = 256 * 1024
"""Strings hashed and set at a time by :meth:`BloomFilter.add_all`: their encoded copies
and positions (~100 bytes and 8 x hashes bytes each) stay at tens of MB whatever the batch."""

_MASK64 = (1 << 64) - 1
MAGICS = {1: b"CYCLESBLOOM1\n", 2: b"CYCLESBLOOM2\n"}
"""Each hash version's first line of a blob: 1 positions from BLAKE2b-128 (still read, the
module doc), 2 from XXH3-128 (written)."""
_ENCODE = functools.partial(str.encode, encoding="utf-8", errors="surrogatepass")
"""A str's bytes as hashed: UTF-8, a lone surrogate (a broken link's) passed through rather
than failing the batch. Arrow strings are valid UTF-8, so their bytes are the same."""


def _pair_v1(data: bytes) -> tuple[int, int]:
    digest = hashlib.blake2b(data, digest_size=16).digest()
    return int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")


def _pairs_v2(encoded: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Each item's XXH3-128 as (low, high) 64-bit halves, two uint64 arrays (the small
    path's ``value & 2**64-1`` and ``value >> 64``). ``map`` keeps the loop in C; the
    canonical digest is big-endian, high half first."""
    halves = np.frombuffer(b"".join(map(xxhash.xxh3_128_digest, encoded)), dtype=">u8").reshape(-1, 2)
    return halves[:, 1].astype(np.uint64), halves[:, 0].astype(np.uint64)


def _pairs_v1(encoded: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    digests = b"".join(hashlib.blake2b(data, digest_size=16).digest() for data in encoded)
    halves = np.frombuffer(digests, dtype="<u8").reshape(-1, 2)
    return halves[:, 0], halves[:, 1]


HASHES = {1: _pairs_v1, 2: _pairs_v2}
"""Hash version → a batch's (h1, h2) as arrays."""


def hash_pairs(items: Sequence[str] | pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Each item's (h1, h2) as the filters written today hash it (version 2), for
    :meth:`BloomFilter.add_hashes`: kept beside the crawl DB, they stand for the strings."""
    return _pairs_v2(encoded(items))


_SAME_LAYOUT_BINARY = {pa.large_string(): pa.large_binary(), pa.string_view(): pa.binary_view()}
"""The binary type of each string type's layout: the cast only relabels the buffers."""


def encoded(items: Sequence[str] | pa.Array | pa.ChunkedArray) -> list[bytes]:
    """The items' UTF-8 bytes: an Arrow string array's values taken as binary (no decoding
    and encoding again), a Python sequence's encoded (:data:`_ENCODE`)."""
    if isinstance(items, (pa.Array, pa.ChunkedArray)):
        if items.null_count:
            raise ValueError("a Bloom filter holds strings, not nulls")
        return items.cast(_SAME_LAYOUT_BINARY.get(items.type, pa.binary())).to_pylist()
    return list(map(_ENCODE, items))


class BloomFilter:
    """A Bloom filter; :meth:`to_bytes` and :meth:`from_bytes` carry it between processes
    (generate writes a partition's seen-set, the fetch worker reads it)."""

    MAGIC = MAGICS[2]

    def __init__(self, capacity: int, fp_rate: float = 0.01, version: int = 2):
        if capacity < 1 or not 0 < fp_rate < 1:
            raise ValueError("capacity must be >= 1 and fp_rate in (0, 1)")
        self.capacity = capacity
        self.fp_rate = fp_rate
        self.bits = max(64, int(math.ceil(-capacity * math.log(fp_rate) / (math.log(2) ** 2))))
        self.hashes = max(1, round(self.bits / capacity * math.log(2)))
        self._array = np.zeros((self.bits + 7) // 8, dtype=np.uint8)
        self.count = 0
        self.version = version
        self._pairs = HASHES[version]

    def _start(self, item: str) -> tuple[int, int]:
        """An item's first position's hash and its step (odd: it cycles through every
        residue), as :meth:`_positions` uses them."""
        if self.version == 2:  # inline: this runs once per link of every fetched page
            value = xxhash.xxh3_128_intdigest(item.encode("utf-8", "surrogatepass"))
            return value & _MASK64, (value >> 64) | 1
        h, step = _pair_v1(_ENCODE(item))
        return h, step | 1

    def _small_add(self, items: Sequence[str]) -> np.ndarray:
        """:meth:`add_new` for a small batch: the same answers and bits, without numpy's
        per-call overhead. As there, every item is judged before any of the batch is added.
        Positions as :meth:`_positions` computes them: h1 + i * h2 modulo 2**64, one
        addition at a time, then modulo the size."""
        array = memoryview(self._array)  # its items are Python ints: no numpy scalar per bit
        bits, hashes, start = self.bits, self.hashes, self._start
        first: dict[str, int] = {}
        for i, item in enumerate(items):
            if item not in first:
                first[item] = i
        fresh = []
        for item in first:
            h, step = start(item)
            positions = []
            known = True
            for _ in range(hashes):
                p = h % bits
                positions.append(p)
                if known and not array[p >> 3] >> (p & 7) & 1:
                    known = False
                h = (h + step) & _MASK64
            if not known:
                fresh.append((item, positions))
        new = np.zeros(len(items), dtype=bool)
        for item, positions in fresh:
            for p in positions:
                array[p >> 3] |= 1 << (p & 7)
            new[first[item]] = True
        self.count += len(fresh)
        return new

    def _small_contains(self, items: Sequence[str]) -> np.ndarray:
        """:meth:`contains_many` for a small batch (see :meth:`_small_add`)."""
        array = memoryview(self._array)
        bits, hashes, start = self.bits, self.hashes, self._start
        answers = []
        for item in items:
            h, step = start(item)
            found = True
            for _ in range(hashes):
                p = h % bits
                if not array[p >> 3] >> (p & 7) & 1:
                    found = False
                    break
                h = (h + step) & _MASK64
            answers.append(found)
        return np.array(answers, dtype=bool)

    def _positions(self, items) -> np.ndarray:
        """Each item's positions, one row of ``hashes`` per item (uint64)."""
        return self._positions_of(*self._pairs(encoded(items)))

    def _positions_of(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        """The positions of items hashed to (``h1``, ``h2``), as :meth:`_positions`."""
        steps = np.arange(self.hashes, dtype=np.uint64)[None, :]
        with np.errstate(over="ignore"):  # wrap-around is part of the hash
            return (h1[:, None] + steps * (h2[:, None] | np.uint64(1))) % np.uint64(self.bits)

    def _set(self, positions: np.ndarray) -> None:
        byte, bit = positions >> np.uint64(3), (positions & np.uint64(7)).astype(np.uint8)
        np.bitwise_or.at(self._array, byte.ravel(), (np.uint8(1) << bit).ravel())

    def _held(self, positions: np.ndarray) -> np.ndarray:
        byte, bit = positions >> np.uint64(3), (positions & np.uint64(7)).astype(np.uint8)
        return ((self._array[byte] >> bit) & 1).all(axis=1)

    def add_all(self, items: Sequence[str] | pa.Array | pa.ChunkedArray) -> None:
        """Add every item, answering nothing: the bulk build (a partition's seen-set, a
        bucket's known hosts), without :meth:`add_new`'s repeat detection. ``items`` may be
        an Arrow string array, hashed from its buffers' values. ``count`` grows by every
        item: callers pass distinct ones (one crawl DB row per URL, distinct hosts)."""
        for start in range(0, len(items), BULK_CHUNK):
            chunk = items[start:start + BULK_CHUNK]
            self._set(self._positions(chunk))
            self.count += len(chunk)

    def add_hashes(self, pairs) -> None:
        """:meth:`add_all` of items already hashed: ``pairs`` of (h1, h2) uint64 arrays
        (:func:`hash_pairs`' halves), the same bits without the strings (a crawl DB base's
        seen index, cycles/tables/seenindex.py). Only for version 2, the hash they are of.

        The positions are marked in a bool array of one byte a bit, then packed and ORed in:
        a plain scatter, where ``np.bitwise_or.at`` read-modify-writes each byte (0.16
        against 0.41 CPU-s a million items into a 16 M-item filter). The array is 8 x the
        filter while it is built (160 MB for a filter of 16.5 M URLs)."""
        if self.version != 2:
            raise ValueError("add_hashes takes version 2 (XXH3-128) halves")
        marked = np.zeros(len(self._array) * 8, dtype=bool)
        for h1, h2 in pairs:
            for start in range(0, len(h1), BULK_CHUNK):
                positions = self._positions_of(h1[start:start + BULK_CHUNK], h2[start:start + BULK_CHUNK])
                marked[positions.ravel()] = True
            self.count += len(h1)
        np.bitwise_or(self._array, np.packbits(marked, bitorder="little"), out=self._array)

    def add_new(self, items: Sequence[str]) -> np.ndarray:
        """Add a batch; returns a boolean mask of the items that were (probably) not in it yet.

        A repeat inside the batch counts as seen after its first occurrence.
        """
        if not items:
            return np.zeros(0, dtype=bool)
        if len(items) <= SMALL_BATCH:
            return self._small_add(items)
        first = {}
        for i, item in enumerate(items):
            first.setdefault(item, i)
        unique = list(first)
        positions = self._positions(unique)
        fresh = ~self._held(positions)
        if fresh.any():
            self._set(positions[fresh])
        new = np.zeros(len(items), dtype=bool)
        new[[first[u] for u, f in zip(unique, fresh) if f]] = True
        self.count += int(fresh.sum())
        return new

    def __contains__(self, item: str) -> bool:
        return bool(self._small_contains([item])[0])

    def contains_many(self, items: Sequence[str] | pa.Array | pa.ChunkedArray) -> np.ndarray:
        if not len(items):
            return np.zeros(0, dtype=bool)
        if len(items) <= SMALL_BATCH and not isinstance(items, (pa.Array, pa.ChunkedArray)):
            return self._small_contains(items)
        return self._held(self._positions(items))

    def union_update(self, other: "BloomFilter") -> None:
        """Add every item ``other`` holds: its bits ORed into these. Both must have the same
        size, hashes and hash version (made with the same capacity and rate by the same
        code); then the result is bit for bit the filter of both sets (generate merges the
        buckets' known-hosts parts so). ``count`` becomes the sum: items in both count twice."""
        if (self.bits, self.hashes, self.version) != (other.bits, other.hashes, other.version):
            raise ValueError(f"cannot merge Bloom filters of {other.bits} bits x {other.hashes} hashes "
                             f"(version {other.version}) into {self.bits} x {self.hashes} (version "
                             f"{self.version}): make both with the same capacity and rate")
        np.bitwise_or(self._array, other._array, out=self._array)
        self.count += other.count

    def to_bytes(self) -> bytes:
        """The filter as one blob: a magic line (its hash version), a JSON line of its
        sizing, then the bits."""
        header = json.dumps({"capacity": self.capacity, "fp_rate": self.fp_rate, "bits": self.bits,
                             "hashes": self.hashes, "count": self.count})
        return MAGICS[self.version] + header.encode() + b"\n" + self._array.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> "BloomFilter":
        """The filter :meth:`to_bytes` wrote, of either hash version (the module doc);
        ValueError for anything else (a cut file too)."""
        version = next((v for v, m in MAGICS.items() if data.startswith(m)), None)
        if version is None:
            raise ValueError("not a Bloom filter written by BloomFilter.to_bytes")
        start = len(MAGICS[version])
        end = data.index(b"\n", start)
        try:  # a damaged header (a flipped bit, a cut line) is a refused blob, not a traceback
            header = json.loads(data[start:end])
            bloom = cls(header["capacity"], header["fp_rate"], version)
            expected = (header["bits"], header["hashes"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"Bloom filter blob has a damaged header ({exc!r})") from None
        array = np.frombuffer(data, dtype=np.uint8, offset=end + 1).copy()
        if (bloom.bits, bloom.hashes) != expected or len(array) != len(bloom._array):
            raise ValueError("Bloom filter blob does not match its header (cut or written by another version)")
        bloom._array = array
        bloom.count = header["count"]
        return bloom
