"""The 1-bit MinHash of Latin-1 blocks in one compiled pass (numba), for cycles.fingerprint.

:func:`minhash_latin1_blocks` computes what ``cycles.fingerprint._minhash_blocks_numpy``
computes, bit for bit (tests/test_fingerprint.py compares them): the tokens' polynomial
hashes, the 3-token shingles that do not span two blocks, the MurmurHash3 finaliser, each
bin's least and the rotation densification (the module doc of cycles.fingerprint). The numpy
version makes ~15 passes over the page's 29 KB and its ~5,000 tokens (~200 µs a page on the
test web); this one makes two loops, one over the characters and one over the tokens
(~90 µs), and needs neither the distinct sort nor the candidates (a bin's least does not
depend on repeats).

Why compiled, and why numba: the arithmetic is a few µs; the rest was numpy's temporaries and
calls. numba is a maintained library (the NumPy/Anaconda project's JIT) installed as a wheel;
the kernels are compiled on the first call in a process and cached on disk (``cache=True``:
``__pycache__`` beside this file), so a fetch worker pays the import (~0.25 CPU-s) and a
cache load, once. This module is imported only when a page is fingerprinted
(cycles.fingerprint imports it lazily), so commands that never fingerprint do not pay.

Branch-free by design: a token's end and a block's end are counted with comparisons, not
``if``: on text the branch at every word end was mispredicted often enough to cost more
than the hashing (~120 against ~60 µs for the character loop).
"""

from __future__ import annotations

import numba
import numpy as np

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_K1 = np.uint64(0x9E3779B97F4A7C15)
_K2 = np.uint64(0xC2B2AE3D27D4EB4F)
_NONE = np.uint64(0xFFFFFFFFFFFFFFFF)
_BITS = 64


@numba.njit(cache=True, nogil=True)
def _fmix64(x):
    """MurmurHash3's 64-bit finaliser (cycles.fingerprint._fmix64)."""
    x ^= x >> np.uint64(33)
    x *= _M1
    x ^= x >> np.uint64(33)
    x *= _M2
    return x ^ (x >> np.uint64(33))


@numba.njit(cache=True, nogil=True)
def _tokens(latin1, table, pow_, inv, hashes, blocks):
    """Each token's hash sum(c_i * P**i) and its block number (NULs before it); the count.

    ``table`` maps a byte to the code point its token hashes (0: not a word character);
    ``pow_``/``inv``: P**i and P**-i (cycles.fingerprint._powers). As the numpy version, a
    token [s, e) is (S[e] - S[s]) * P**-s of the prefix sums S; each step writes the hash
    of a token ending here to the next free slot, which counts only when one did end."""
    s = np.uint64(0)
    s_start = np.uint64(0)
    start = 0
    count = 0
    block = 0
    before = False
    for i in range(latin1.shape[0]):
        byte = latin1[i]
        code = table[byte]
        word = code != 0
        hashes[count] = (s - s_start) * inv[start]
        blocks[count] = block
        count += before and not word
        begins = word and not before
        s_start = s if begins else s_start
        start = i if begins else start
        block += byte == 0
        s += np.uint64(code) * pow_[i]
        before = word
    hashes[count] = (s - s_start) * inv[start]
    blocks[count] = block
    return count + before


@numba.njit(cache=True, nogil=True)
def _least_of_bins(hashes, blocks, count, least, present):
    """Each bin's least feature: the tokens' (fewer than 3 of them), else the shingles that
    stay within a block, or all shingles when none does (cycles.fingerprint._features)."""
    if count < 3:
        for t in range(count):
            f = _fmix64(hashes[t])
            b = f >> np.uint64(58)
            least[b] = min(least[b], f)
            present[b] = True
        return
    least_all = np.full(_BITS, _NONE, dtype=np.uint64)
    present_all = np.zeros(_BITS, dtype=np.bool_)
    within_any = False
    for t in range(count - 2):
        f = _fmix64(hashes[t] * _K1 + hashes[t + 1] * _K2 + hashes[t + 2])
        b = f >> np.uint64(58)
        within = blocks[t] == blocks[t + 2]  # token t + 1 or t + 2 would begin a block
        least_all[b] = min(least_all[b], f)
        present_all[b] = True
        least[b] = min(least[b], f if within else _NONE)
        present[b] |= within
        within_any |= within
    if not within_any:
        least[:] = least_all
        present[:] = present_all


@numba.njit(cache=True, nogil=True)
def _bits(least, present):
    """Bit i is the lowest bit of bin i's least; an empty bin takes the next filled bin's
    least (cyclically) mixed with its own number (cycles.fingerprint._minhash_of_features)."""
    out = np.uint64(0)
    for b in range(_BITS):
        value = least[b]
        if not present[b]:
            donor = (b + 1) % _BITS
            while not present[donor]:
                donor = (donor + 1) % _BITS
            value = _fmix64(least[donor] ^ np.uint64(b))
        out |= (value & np.uint64(1)) << np.uint64(b)
    return out


@numba.njit(cache=True, nogil=True)
def _minhash(latin1, table, pow_, inv):
    size = latin1.shape[0] // 2 + 2  # at most one token per two characters, plus a slot
    hashes = np.empty(size, dtype=np.uint64)
    blocks = np.empty(size, dtype=np.int64)
    count = _tokens(latin1, table, pow_, inv, hashes, blocks)
    if count == 0:
        return np.uint64(0), False
    least = np.full(_BITS, _NONE, dtype=np.uint64)
    present = np.zeros(_BITS, dtype=np.bool_)
    _least_of_bins(hashes, blocks, count, least, present)
    return _bits(least, present), True


def minhash_latin1_blocks(latin1: bytes, table: np.ndarray, pow_: np.ndarray, inv: np.ndarray) -> int | None:
    """The MinHash of blocks joined by NUL, given as Latin-1 bytes (``table``: byte -> the
    lowered code point of a word character, else 0); None when no token is found (the caller
    then lets numbers count, as the numpy version does)."""
    value, found = _minhash(np.frombuffer(latin1, dtype=np.uint8), table, pow_, inv)
    return int(value) if found else None
