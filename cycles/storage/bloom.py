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
URLs at 1 % fit in about 12 GB. Positions come from one 128-bit BLAKE2b digest per string
by double hashing (Kirsch & Mitzenmacher, 2006), computed for a whole batch with numpy.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Sequence

import numpy as np

SMALL_BATCH = 64
"""Batches up to this many strings take the pure-Python path (:meth:`BloomFilter._small_add`,
:meth:`_small_contains`): the fetch worker asks about one page's links at a time (~7-40),
where numpy's per-call overhead dominated — ``add_new`` of 7 URLs took ~80 µs through numpy
(``np.bitwise_or.at`` alone is slow), ~46 µs in Python (best of 20, CPU time, on the loaded
2-core VM), with the same bits set and the same answers (tests/test_bloom.py compares the
two paths)."""

_MASK64 = (1 << 64) - 1


class BloomFilter:
    """A Bloom filter; :meth:`to_bytes` and :meth:`from_bytes` carry it between processes
    (generate writes a partition's seen-set, the fetch worker reads it)."""

    MAGIC = b"CYCLESBLOOM1\n"

    def __init__(self, capacity: int, fp_rate: float = 0.01):
        if capacity < 1 or not 0 < fp_rate < 1:
            raise ValueError("capacity must be >= 1 and fp_rate in (0, 1)")
        self.capacity = capacity
        self.fp_rate = fp_rate
        self.bits = max(64, int(math.ceil(-capacity * math.log(fp_rate) / (math.log(2) ** 2))))
        self.hashes = max(1, round(self.bits / capacity * math.log(2)))
        self._array = np.zeros((self.bits + 7) // 8, dtype=np.uint8)
        self.count = 0

    def _small_add(self, items: Sequence[str]) -> np.ndarray:
        """:meth:`add_new` for a small batch: the same answers and bits, without numpy's
        per-call overhead. As there, every item is judged before any of the batch is added.
        Positions as :meth:`_positions` computes them: h1 + i * h2 modulo 2**64, one
        addition at a time, then modulo the size."""
        array = memoryview(self._array)  # its items are Python ints: no numpy scalar per bit
        bits, hashes, blake2b = self.bits, self.hashes, hashlib.blake2b
        first: dict[str, int] = {}
        for i, item in enumerate(items):
            if item not in first:
                first[item] = i
        fresh = []
        for item in first:
            digest = blake2b(item.encode("utf-8", "surrogatepass"), digest_size=16).digest()
            h = int.from_bytes(digest[:8], "little")
            step = int.from_bytes(digest[8:], "little") | 1
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
        bits, hashes, blake2b = self.bits, self.hashes, hashlib.blake2b
        answers = []
        for item in items:
            digest = blake2b(item.encode("utf-8", "surrogatepass"), digest_size=16).digest()
            h = int.from_bytes(digest[:8], "little")
            step = int.from_bytes(digest[8:], "little") | 1
            found = True
            for _ in range(hashes):
                p = h % bits
                if not array[p >> 3] >> (p & 7) & 1:
                    found = False
                    break
                h = (h + step) & _MASK64
            answers.append(found)
        return np.array(answers, dtype=bool)

    def _positions(self, items: Sequence[str]) -> np.ndarray:
        digests = b"".join(hashlib.blake2b(s.encode("utf-8", "surrogatepass"), digest_size=16).digest() for s in items)
        pairs = np.frombuffer(digests, dtype="<u8").reshape(-1, 2)
        h1, h2 = pairs[:, 0:1], pairs[:, 1:2] | np.uint64(1)
        steps = np.arange(self.hashes, dtype=np.uint64)[None, :]
        with np.errstate(over="ignore"):  # wrap-around is part of the hash
            return (h1 + steps * h2) % np.uint64(self.bits)

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
        byte, bit = positions >> np.uint64(3), (positions & np.uint64(7)).astype(np.uint8)
        fresh = ~((self._array[byte] >> bit) & 1).all(axis=1)
        if fresh.any():
            np.bitwise_or.at(self._array, byte[fresh].ravel(), (np.uint8(1) << bit[fresh]).ravel())
        new = np.zeros(len(items), dtype=bool)
        new[[first[u] for u, f in zip(unique, fresh) if f]] = True
        self.count += int(fresh.sum())
        return new

    def __contains__(self, item: str) -> bool:
        row = self._positions([item])[0]
        byte, bit = row >> np.uint64(3), (row & np.uint64(7)).astype(np.uint8)
        return bool(((self._array[byte] >> bit) & 1).all())

    def contains_many(self, items: Sequence[str]) -> np.ndarray:
        if not items:
            return np.zeros(0, dtype=bool)
        if len(items) <= SMALL_BATCH:
            return self._small_contains(items)
        positions = self._positions(items)
        byte, bit = positions >> np.uint64(3), (positions & np.uint64(7)).astype(np.uint8)
        return ((self._array[byte] >> bit) & 1).all(axis=1)

    def union_update(self, other: "BloomFilter") -> None:
        """Add every item ``other`` holds: its bits ORed into these. Both must have the same
        size and hashes (made with the same capacity and rate); then the result is bit for
        bit the filter of both sets (generate merges the buckets' known-hosts parts so).
        ``count`` becomes the sum: items in both count twice."""
        if (self.bits, self.hashes) != (other.bits, other.hashes):
            raise ValueError(f"cannot merge Bloom filters of {other.bits} bits x {other.hashes} hashes "
                             f"into {self.bits} x {self.hashes}: make both with the same capacity and rate")
        np.bitwise_or(self._array, other._array, out=self._array)
        self.count += other.count

    def to_bytes(self) -> bytes:
        """The filter as one blob: a magic line, a JSON line of its sizing, then the bits."""
        header = json.dumps({"capacity": self.capacity, "fp_rate": self.fp_rate, "bits": self.bits,
                             "hashes": self.hashes, "count": self.count})
        return self.MAGIC + header.encode() + b"\n" + self._array.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> "BloomFilter":
        """The filter :meth:`to_bytes` wrote; ValueError for anything else (a cut file too)."""
        if not data.startswith(cls.MAGIC):
            raise ValueError("not a Bloom filter written by BloomFilter.to_bytes")
        end = data.index(b"\n", len(cls.MAGIC))
        header = json.loads(data[len(cls.MAGIC):end])
        bloom = cls(header["capacity"], header["fp_rate"])
        array = np.frombuffer(data, dtype=np.uint8, offset=end + 1).copy()
        if (bloom.bits, bloom.hashes) != (header["bits"], header["hashes"]) or len(array) != len(bloom._array):
            raise ValueError("Bloom filter blob does not match its header (cut or written by another version)")
        bloom._array = array
        bloom.count = header["count"]
        return bloom
