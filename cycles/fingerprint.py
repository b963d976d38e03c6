"""Page fingerprints shared by fetch and update: an exact content hash and 64-bit near-duplicate fingerprints.

- :func:`content_hash` finds pages whose text is the same once case and whitespace are ignored
  (exact duplicates, unchanged pages).
- :func:`minhash64` finds near-duplicates, and is what fetch stores (:func:`fingerprints`; the
  crawl DB's ``minhash`` column): two pages whose fingerprints differ in at most 3 of 64 bits
  are taken to be the same page, as with a SimHash (Manku, Jain, Das Sarma, "Detecting
  Near-Duplicates for Web Crawling", WWW 2007: f = 64, k = 3 for 8 billion pages;
  ChatNoir-CopyCat-21 uses the same threshold: Fröbe et al., SIGIR 2021,
  doi:10.1145/3404835.3463246), so that update's block-mask search is the same.
- :func:`simhash64`, the SimHash of the same features, which fetch stored before GitHub issue
  #13 section 3, is kept for comparison (scripts/bench_update.py, scripts/bench_parse.py).

The 1-bit MinHash (what fetch stores)
-------------------------------------
64 one-bit MinHashes of the distinct shingles below: b-bit minwise hashing with b = 1 (Li and
König, "b-Bit Minwise Hashing", WWW 2010) over one permutation hashing (Li, Owen, Zhang, NIPS
2012): the shingle hashes, already random 64-bit values, fall in 64 bins by their top 6 bits,
and bit i is the lowest bit of the least hash in bin i. Two texts agree on a bin's least hash
with probability J, their shingle sets' Jaccard similarity, and on its bit otherwise half the
time, so they differ in about 32 (1 - J) bits. A SimHash differs in 64 theta / pi bits, theta
the angle between the shingle vectors, which grows with the square root of the changed share:
a tenth of the shingles changed is ~3 bits of the MinHash against ~7 of the SimHash, while
unrelated texts are ~32 bits apart under both. On testweb.neardup_set (720 labelled pairs,
main content) at k = 3: recall 0.98 against 0.92, precision 1.00 both, the closest different
pages 20 bits apart (scripts/bench_update.py). A bin no shingle falls in (texts of fewer than
~300 shingles have some) takes the next filled bin's least hash, mixed with its own number
(rotation densification, Shrivastava and Li, ICML 2014). It costs less than the SimHash: the
sort that makes the features distinct also finds each bin's least, where the SimHash adds up
64 bit columns; of a long text only the ~1,000 candidates for the bins' least are sorted
(:func:`_least_candidates`). In scripts without spaces its shingles are 4 characters, not 3
(MINHASH_UNSPACED_SHINGLE_TOKENS): it estimates the shared share of shingles more closely, and
different Thai texts of a narrow vocabulary share half their character trigrams.

Both are pure functions of the text, stable across processes and machines: nothing here uses
Python's ``hash()`` (salted per process) or platform byte order. (Across Python versions, only
characters new in a later Unicode version could be tokenised differently.)

Features (of both)
------------------
The text is normalised (:func:`normalise`: lower case, whitespace collapsed) and cut into
tokens: runs of letters and combining marks (Unicode categories L and M). Characters of
scripts written without spaces (Han, Hiragana, Katakana incl. halfwidth, Thai, Lao, Khmer, Myanmar) are a
token each (their combining marks are left out), so that a Chinese paragraph is not one
giant token. Numbers (category N), punctuation, symbols and emoji separate tokens and are not
features themselves, except in a text that has no other token (then numbers count, so that
number-only pages still differ).

The features are **overlapping 3-token shingles** (Broder's w-shingling, w = 3: word
trigrams; character trigrams in CJK and Thai), **each distinct shingle counted once**; a
text of fewer than 3 tokens uses its tokens.

Why distinct (GitHub issue #13, section 3): counted per occurrence, the frequent shingles of
a language decide the bits. A word trigram is rarely frequent, but a character trigram in a
script without spaces is part of one word (ている, ました, การ...), so every page in that
language shares the frequent ones: different Japanese pages of 300 sentences were 1-4 bits
apart, Thai ones 3-7, and were marked near-duplicates of each other (182 of 374 marks wrong
in one crawl). Counted once, the shared part is the share of distinct shingles, as for
Jaccard similarity: the same pages are 15-30 bits apart (tests/test_fingerprint_scripts.py
checks Japanese, Chinese, Thai, Korean and Arabic). The price is some recall on pages that
repeat themselves: the changed shingles are a larger share of fewer distinct ones (a date
changed in 2,000 words of an 80-word vocabulary: 0.9 instead of 1.0 within k = 3). SimHashes
of the earlier features are not comparable with these; a page's fingerprint is renewed when
it is fetched again, and until then a near match between old and new ones is only missed.

The table below was measured (before that change) with ``scripts/bench_parse.py``
(generated 30 KB pages: Zipf-distributed words, seven site templates; and the 16 real pages
of a Common Crawl WARC sample given to ``scripts/bench_parse.py --warc``). Share of pairs within k = 3,
i.e. taken for near-duplicates (100 pairs a row; real pages: 75 and 120):

==========================================  =========  =========  ==========  ======  ========
pair                                         3-shingl.  2-shingl.  3-sh.+num.  tokens  distinct
==========================================  =========  =========  ==========  ======  ========
same page, date changed                         0.99       1.00        0.92     1.00     0.95
4-paragraph page, date changed                  0.85       0.92        0.54     1.00     0.82
same page, one sentence added                   0.93       0.96        0.86     1.00     0.92
other article, same template                    0.00       0.00        0.00     0.32     0.00
other text, 80-word vocabulary                  0.00       0.06        0.00     0.26     1.00
real page, one word changed                     0.91       0.91        0.87     1.00     0.88
real pages, different pages                     0.00       0.00        0.00     0.00     0.00
==========================================  =========  =========  ==========  ======  ========

(3-shingl. is the one used; 3-sh.+num. keeps numbers as tokens; tokens counts each token,
distinct counts each distinct token once.)

- Single tokens, counted, are a bag of words. Any two pages in one language share their
  frequent words (the, of, and ...), which dominate the bag: different articles on one
  template were a median 4 bits apart and a third were taken for duplicates. Manku et al.
  avoid that with stop-word removal and IDF-like weights, which need corpus statistics the
  fetcher does not have. Counting each distinct token once fails on narrow vocabularies.
- Shingles are rarely shared by unrelated text, so the shared part of two pages is their
  real common text (boilerplate included): different articles on one template were 24-41
  bits apart. 2-token shingles are more tolerant of edits but still shared by texts drawn
  from a small vocabulary (listings, tables, forum pages of one topic: 6 % false
  near-duplicates above); a false near-duplicate loses a page, a missed one only stores a
  copy, so w = 3.
- The cost of shingles is sensitivity: one changed word changes 3 features. The expected
  distance for d changed features of N is about 64/pi * sqrt(2d/N): ~1 bit for a date on a
  2,000-word page, more on short pages (85 % of 4-paragraph pages stay within k = 3).
- Numbers are left out because the commonest trivial changes are numbers (dates, times,
  counters, view counts): with them a changed date changes
  5 shingles instead of 3 (0.54 against 0.85 on short pages). The price: pages that differ
  only in numbers (two scores of one fixture) are near-duplicates. ``content_hash`` keeps
  numbers.

A text without tokens (empty, or only punctuation and symbols) has SimHash 0, and a very
short text has few features: update should not take pages for near-duplicates on a SimHash
match alone when their texts are that short.

Speed: the tokens are found and hashed with numpy over the whole text at once (a polynomial
hash of the code points, taken as differences of a prefix sum), shingles are combined and
mixed with the MurmurHash3 64-bit finaliser, made distinct by a sort, and the 64 bit counts are summed by adding the
unpacked bit rows pairwise in uint8. About 0.1 ms for a 15,000-character text, against
several ms for a per-token Python loop. The MinHash of a page's Latin-1 main content, what
fetch computes for most pages, is one compiled pass in a long-running process
(cycles/fingerprint_jit.py, numba; :data:`COMPILED_AFTER_PAGES`), with the same values.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import unicodedata

import numpy as np

SIMHASH_BITS = 64

SIMHASH_MAX_CHARS = 1 << 19
"""Only the first 512 Ki characters of the normalised text (about 80,000 words) feed the
SimHash. It bounds the power tables below (16 bytes a character); a page is not a
near-duplicate of another by what follows its first 80,000 words. ``content_hash`` covers
the whole text."""

# Every character str.split() treats as whitespace, except the space itself. A literal list:
# computing it at import (scanning all of Unicode) costs ~100 ms per process.
_OTHER_WHITESPACE = (
    "\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\xa0",
    "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004", "\u2005", "\u2006", "\u2007",
    "\u2008", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
)


def collapse_whitespace(text: str) -> str:
    """``" ".join(text.split())``, without building a list of every word.

    Equal to the split/join for every input (tests check it), and 5-10 times faster on
    page-sized text: each step is a C-level scan, and a text with only single spaces is
    checked, not copied.
    """
    for char in _OTHER_WHITESPACE:
        if char in text:
            text = text.replace(char, " ")
    while "  " in text:
        text = text.replace("  ", " ")
    return text.strip(" ")


def collapse_other_whitespace(text: str) -> str:
    """:func:`collapse_whitespace` of a text in which space, tab, CR and LF are collapsed
    already, as XPath ``normalize-space()`` returns it.

    Only the rarer whitespace (form feed, NBSP, Unicode spaces ...) can be left to collapse,
    and most pages have none: each is looked for with one C scan (characters wider than the
    text's own are not even scanned), and the text is returned as it is. That saves the
    search for a double space, ~45 µs of the ~50 µs collapse_whitespace took on a 28 KB text.
    """
    for char in _OTHER_WHITESPACE:
        if char in text:
            return collapse_whitespace(text)
    return text


# str.lower() of each Latin-1 character (all stay in Latin-1), as a bytes.translate table.
_LATIN1_LOWER = bytes(ord(chr(code).lower()) for code in range(256))


def lower(text: str) -> str:
    """``text.lower()``, 3-4 times faster for Latin-1 text.

    str.lower() takes a slow path for any non-ASCII text (a page with one "©"), while most
    such pages are Latin-1, which a byte table lowers at C speed; the result is the same.
    """
    if text.isascii():
        return text.lower()
    try:
        latin1 = text.encode("latin-1")
    except UnicodeEncodeError:
        return text.lower()
    return latin1.translate(_LATIN1_LOWER).decode("latin-1")


def normalise(text: str) -> str:
    """The text both fingerprints are taken of: lower case, whitespace collapsed."""
    return collapse_whitespace(lower(text))


def content_hash(text: str) -> str:
    """Hex digest (BLAKE2b, 16 bytes) of :func:`normalise` (text): equal for texts that
    differ only in case and whitespace."""
    return _content_hash_normalised(normalise(text))


def simhash64(text: str) -> int:
    """64-bit SimHash (Charikar) of the text's 3-token shingles, as an unsigned int.

    Near-duplicates are within :func:`hamming` distance 3 (see the module doc); an empty text
    (no tokens) gives 0.
    """
    return _simhash_normalised(normalise(text))


def minhash64(text: str) -> int:
    """The near-duplicate fingerprint: 64 one-bit MinHashes of the text's distinct 3-token
    shingles (the features of :func:`simhash64`), as an unsigned int.

    Two texts whose shingle sets have Jaccard similarity J differ in about 32 (1 - J) bits
    (see the module doc); near-duplicates are within :func:`hamming` distance 3. An empty
    text (no tokens) gives 0.
    """
    return _simhash_normalised(normalise(text), combine=_minhash_of_features)


def minhash64_blocks(blocks: list[str]) -> int:
    """:func:`minhash64` of the blocks (paragraphs), no shingle spanning two of them, as
    :func:`simhash64_blocks` does: the same blocks in another order give the same value."""
    if len(blocks) < 2:
        return minhash64(blocks[0] if blocks else "")
    return _simhash_normalised(normalise(BLOCK_SEPARATOR.join(blocks)), blocks=True, combine=_minhash_of_features)


def _content_hash_collapsed(text: str) -> str:
    """content_hash of a text whose whitespace is collapsed (see fingerprints)."""
    try:
        lowered = text.encode("latin-1").translate(_LATIN1_LOWER)
    except UnicodeEncodeError:
        return _content_hash_normalised(lower(text))
    return hashlib.blake2b(lowered if lowered.isascii() else latin1_to_utf8(lowered), digest_size=16).hexdigest()


def _simhash_collapsed(text: str, blocks: bool = False, combine=None) -> int:
    """simhash64 (minhash64 with ``combine=_minhash_of_features``) of a text whose whitespace
    is collapsed (see fingerprints)."""
    try:
        lowered = text.encode("latin-1").translate(_LATIN1_LOWER)
    except UnicodeEncodeError:
        return _simhash_normalised(lower(text), blocks=blocks, combine=combine)
    lowered = lowered[:SIMHASH_MAX_CHARS]
    bounds = np.flatnonzero(np.frombuffer(lowered, dtype=np.uint8) == 0) if blocks else None
    return _simhash_latin1(lowered, bounds=bounds, combine=combine)


COMPILED_AFTER_PAGES = 1000
"""A process's first pages take the numpy MinHash, the later ones the compiled pass: loading
it (numba's import and the kernels from their disk cache) costs ~0.6 CPU-s a process, which
~100 µs saved a page repays after ~6,000 pages. A fetch worker of a benchmark or a real crawl
fingerprints tens of thousands; a test's or a small segment's few hundred never pay it."""
_pages_seen = 0
_compiled = None
"""cycles.fingerprint_jit.minhash_latin1_blocks, once loaded."""
_loading: threading.Thread | None = None
"""The thread loading it: numba's import and cache load took 1-3 s of wall time in a busy
fetch worker, which its fetch loop (waiting in libcurl, the GIL released) need not wait for."""


def _compiled_minhash():
    """The compiled pass when it is loaded; its loading started once COMPILED_AFTER_PAGES
    pages were seen; None until then (the numpy version serves meanwhile)."""
    global _pages_seen, _loading
    if _compiled is not None:
        return _compiled
    _pages_seen += 1
    if _pages_seen > COMPILED_AFTER_PAGES and _loading is None:
        # Not a daemon: a process ending meanwhile waits for the import rather than killing
        # the thread inside it.
        _loading = threading.Thread(target=_load_compiled, name="minhash-compiled")
        _loading.start()
    return None


def _load_compiled() -> None:
    """Load the compiled pass; if it cannot be (numba missing or broken), say so in one line
    and let the numpy version, which gives the same values, go on serving."""
    global _compiled
    try:
        from cycles.fingerprint_jit import minhash_latin1_blocks

        latin1 = b"load the kernels\0now"
        minhash_latin1_blocks(latin1, _LATIN1_WORD_CODES_ARRAY, *_powers(len(latin1)))
    except Exception as exc:  # noqa: BLE001  (any failure leaves the numpy version, same values)
        logging.getLogger(__name__).warning("compiled MinHash unavailable, numpy serves: %s: %s",
                                            type(exc).__name__, exc)
        return
    _compiled = minhash_latin1_blocks


def _minhash_blocks_collapsed(blocks: list[str]) -> int:
    """minhash64_blocks of two or more blocks whose whitespace is collapsed (see fingerprints).

    For Latin-1 text, the path fetch takes for most pages, the blocks joined by NUL go to
    one compiled pass (cycles/fingerprint_jit.py: ~95 against ~200 µs a 29 KB page for
    :func:`_minhash_blocks_numpy`, which gives the same value: tests/test_fingerprint.py),
    once loaded (:func:`_compiled_minhash`). Other text, and text without letters (numbers
    then count), take the general path."""
    compiled = _compiled_minhash()
    if compiled is None:
        return _minhash_blocks_numpy(blocks)
    joined = BLOCK_SEPARATOR.join(blocks)
    try:
        latin1 = joined.encode("latin-1")[:SIMHASH_MAX_CHARS]
    except UnicodeEncodeError:
        latin1 = b""
    value = compiled(latin1, _LATIN1_WORD_CODES_ARRAY, *_powers(len(latin1))) if latin1 else None
    if value is None:
        return _simhash_collapsed(joined, blocks=True, combine=_minhash_of_features)
    return value


def _minhash_blocks_numpy(blocks: list[str]) -> int:
    """_minhash_blocks_collapsed in numpy: one ``bytes.translate`` gives both the lowered
    code points and where the tokens are (:data:`_LATIN1_WORD_CODES`), and the blocks' ends
    come from their lengths (no block holds BLOCK_SEPARATOR: see fingerprints). The
    reference the compiled pass is checked against (tests/test_fingerprint.py)."""
    joined = BLOCK_SEPARATOR.join(blocks)
    try:
        latin1 = joined.encode("latin-1")[:SIMHASH_MAX_CHARS]
    except UnicodeEncodeError:
        latin1 = b""
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps mod 2**64, on purpose
        tokens, starts = _latin1_token_hashes(latin1)
    if len(tokens) == 0:  # no letters (or not Latin-1): numbers count (_simhash_latin1)
        return _simhash_collapsed(joined, blocks=True, combine=_minhash_of_features)
    # Block k ends at the separator after the first k + 1 blocks and k separators.
    bounds = np.cumsum(np.fromiter(map(len, blocks), dtype=np.int64, count=len(blocks))[:-1] + 1) - 1
    bounds = bounds[bounds < len(latin1)]
    with np.errstate(over="ignore"):
        return _minhash_of_features(_features(tokens, SIMHASH_SHINGLE_TOKENS, _block_breaks(starts, bounds)))


def simhash64_blocks(blocks: list[str]) -> int:
    """:func:`simhash64` of the blocks (paragraphs) joined by spaces, except that no shingle
    spans two blocks: the same blocks in another order have the same SimHash (a page whose
    paragraphs or boxes were reordered is the same page). ``simhash64_blocks([t]) ==
    simhash64(t)``. A block shorter than a shingle adds nothing, unless all are."""
    if len(blocks) < 2:
        return simhash64(blocks[0] if blocks else "")
    # One normalisation of the blocks joined by NUL (no page text holds one: XML cannot),
    # which separates tokens like a space and marks where each block ends.
    return _simhash_normalised(normalise(BLOCK_SEPARATOR.join(blocks)), blocks=True)


BLOCK_SEPARATOR = "\0"
"""What :func:`simhash64_blocks` joins blocks with; a text holding it is cut there."""


def fingerprints(text: str, *, collapsed: bool = False, blocks: list[str] | None = None) -> tuple[str, int]:
    """``(content_hash(text), minhash64(text))``, normalising the text once; with ``blocks``,
    ``(content_hash(text), minhash64_blocks(blocks))``. What fetch stores of every page
    (the crawl DB's ``minhash`` column holds the second: see the module doc).

    ``collapsed=True`` promises that the text's (and the blocks') whitespace is already
    collapsed (as the text of cycles.fetch.parse is), which saves checking it, and that no
    block holds BLOCK_SEPARATOR (NUL: text out of libxml2, a C string, cannot).
    """
    near = _minhash_of_features
    if blocks is not None:
        if not collapsed or len(blocks) < 2:
            return content_hash(text), minhash64_blocks(blocks)
        return _content_hash_collapsed(text), _minhash_blocks_collapsed(blocks)
    if collapsed:
        try:
            # Most texts are Latin-1: lowered as bytes, and those bytes feed the fingerprint
            # directly (one encoding, not one per fingerprint).
            lowered = text.encode("latin-1").translate(_LATIN1_LOWER)
        except UnicodeEncodeError:
            pass
        else:
            utf8 = lowered if lowered.isascii() else latin1_to_utf8(lowered)
            return (hashlib.blake2b(utf8, digest_size=16).hexdigest(),
                    _simhash_latin1(lowered[:SIMHASH_MAX_CHARS], combine=near))
    norm = lower(text) if collapsed else normalise(text)
    return _content_hash_normalised(norm), _simhash_normalised(norm, combine=near)


_FEW_NON_ASCII = 64


def latin1_to_utf8(data: bytes) -> bytes:
    """``data.decode("latin-1").encode("utf-8")``, faster when few bytes are not ASCII.

    CPython encodes a one-byte-per-character str to UTF-8 character by character (~18 µs
    for a 29 KB text); a text with a handful of non-ASCII characters (a "©", a "·") is
    copied in ASCII runs with numpy finding the rest instead (~9 µs).
    """
    positions = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) >= 0x80)
    if len(positions) > _FEW_NON_ASCII:
        return data.decode("latin-1").encode("utf-8")
    parts = []
    start = 0
    for position in positions.tolist():
        byte = data[position]
        parts.append(data[start:position])
        parts.append(bytes((0xC0 | byte >> 6, 0x80 | byte & 0x3F)))
        start = position + 1
    parts.append(data[start:])
    return b"".join(parts)


def hamming(a: int, b: int) -> int:
    """Number of bits in which two fingerprints differ."""
    return (a ^ b).bit_count()


def _content_hash_normalised(norm: str) -> str:
    return hashlib.blake2b(norm.encode("utf-8"), digest_size=16).hexdigest()


# --- SimHash internals -------------------------------------------------------------------

SIMHASH_SHINGLE_TOKENS = 3
"""Tokens per shingle (w of w-shingling); see the module doc for why 3."""

_SEP, _WORD, _SINGLE = 0, 1, 2  # character classes: separator, part of a word, a token alone

# Scripts written without spaces between words: each character is a token of its own, so
# shingles over them are character n-grams (the usual unit for CJK and Thai).
_SINGLE_RANGES = (
    (0x0E00, 0x0EFF),    # Thai, Lao
    (0x1000, 0x109F),    # Myanmar
    (0x1780, 0x17FF),    # Khmer
    (0x2E80, 0x2FDF),    # CJK radicals, Kangxi radicals
    (0x3040, 0x30FF),    # Hiragana, Katakana
    (0x31F0, 0x31FF),    # Katakana phonetic extensions
    (0x3400, 0x4DBF),    # CJK extension A
    (0x4E00, 0x9FFF),    # CJK unified ideographs
    (0xF900, 0xFAFF),    # CJK compatibility ideographs
    (0xFF66, 0xFF9F),    # halfwidth Katakana
    (0x20000, 0x323AF),  # CJK extensions B-H
)


def _build_classes() -> tuple[np.ndarray, np.ndarray]:
    """Class of every code point, without and with numbers as word characters
    (2 x 1.1 MB, built once per process in ~20 ms)."""
    letters = np.zeros(0x110000, dtype=np.uint8)
    category = unicodedata.category
    # Letters and marks (L*, M*) in the BMP; outside it only the CJK extensions count.
    kinds = [category(chr(cp))[0] for cp in range(0x10000)]
    letters[np.array([cp for cp, kind in enumerate(kinds) if kind in "LM"], dtype=np.int64)] = _WORD
    for low, high in _SINGLE_RANGES:
        if high < 0x10000:
            # The letters of those blocks stand alone; their combining marks (Thai vowel
            # signs and tone marks) are left out rather than made tokens of their own.
            for cp in range(low, high + 1):
                if kinds[cp] == "L":
                    letters[cp] = _SINGLE
                elif kinds[cp] == "M":
                    letters[cp] = _SEP
        else:
            letters[low:high + 1] = _SINGLE
    with_numbers = letters.copy()
    with_numbers[np.array([cp for cp, kind in enumerate(kinds) if kind == "N"], dtype=np.int64)] = _WORD
    return letters, with_numbers


_CLASSES, _CLASSES_WITH_NUMBERS = _build_classes()

# Polynomial hash mod 2**64 of a token's code points c_0..c_{n-1}: sum(c_i * P**i). With S the
# prefix sums of c_j * P**j over the whole text, a token [s, e) hashes to (S[e] - S[s]) * P**-s,
# independent of where it stands. P is odd, so it has an inverse mod 2**64.
_P = 0x100000001B3  # the 64-bit FNV prime
_P_INV = pow(_P, -1, 1 << 64)
_POW = np.ones(1, dtype=np.uint64)
_INV = np.ones(1, dtype=np.uint64)

# MurmurHash3 fmix64 constants; shingle mixing constants (odd, from xxHash64 / the golden ratio).
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_K1 = np.uint64(0x9E3779B97F4A7C15)
_K2 = np.uint64(0xC2B2AE3D27D4EB4F)


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """P**i and P**-i mod 2**64 for i < n (grown in powers of two, kept per process)."""
    global _POW, _INV
    if len(_POW) < n:
        size = 1 << (n - 1).bit_length()
        pow_, inv = np.empty(size, dtype=np.uint64), np.empty(size, dtype=np.uint64)
        pow_[0], pow_[1:] = 1, _P
        inv[0], inv[1:] = 1, _P_INV
        _POW = np.cumprod(pow_, dtype=np.uint64)
        _INV = np.cumprod(inv, dtype=np.uint64)
    return _POW, _INV


def _fmix64(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> _S33)
    x = x * _M1
    x = x ^ (x >> _S33)
    x = x * _M2
    return x ^ (x >> _S33)


def _token_hashes(norm: str, classes: np.ndarray = _CLASSES) -> np.ndarray:
    """The polynomial hash (unmixed) of every token of the normalised text, in text order."""
    text = norm[:SIMHASH_MAX_CHARS]
    try:  # most pages are Latin-1: one byte a character, and the byte is the code point
        return _latin1_token_hashes(text.encode("latin-1"), classes)[0]
    except UnicodeEncodeError:
        cps = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
        return _code_point_token_hashes(cps, classes.take(cps))[0]


if _CLASSES_WITH_NUMBERS[:256].max() >= _SINGLE:  # _latin1_token_hashes relies on it
    raise RuntimeError("a Latin-1 character stands alone in cycles.fingerprint's classes")


def _latin1_word_codes(classes: np.ndarray) -> bytes:
    """A bytes.translate table: a Latin-1 byte to its lower case if that is a word character
    in ``classes`` (no Latin-1 character stands alone), else to 0."""
    return bytes(low if classes[low] == _WORD else 0 for low in _LATIN1_LOWER)


_LATIN1_WORD_CODES = _latin1_word_codes(_CLASSES)
"""The code points a token's hash is taken of, and 0 wherever no token is: one translate of a
Latin-1 text (lowered or not) gives both (~16 µs a 28 KB text, where numpy widening every
byte to an index into the class table took ~23)."""
_LATIN1_WORD_CODES_ARRAY = np.frombuffer(_LATIN1_WORD_CODES, dtype=np.uint8)
_LATIN1_CODES = {id(_CLASSES): _LATIN1_WORD_CODES, id(_CLASSES_WITH_NUMBERS): _latin1_word_codes(_CLASSES_WITH_NUMBERS)}


def _latin1_token_hashes(latin1: bytes, classes: np.ndarray = _CLASSES) -> tuple[np.ndarray, np.ndarray]:
    """_token_hashes of a text given as its Latin-1 bytes, and where each token starts. The
    bytes need not be lowered: the table lowers them (the hashes are those of the lowered text).

    No Latin-1 character stands alone (_SINGLE_RANGES are all above U+00FF), so tokens are
    the runs of non-zero codes; with a 0 on either side the run edges are one comparison.
    """
    if not latin1:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    codes = np.frombuffer(latin1.translate(_LATIN1_CODES[id(classes)]), dtype=np.uint8)
    words = np.zeros(len(codes) + 2, dtype=bool)
    np.not_equal(codes, 0, out=words[1:-1])
    edges = np.flatnonzero(words[1:] != words[:-1])
    starts = edges[0::2]
    return _run_hashes(codes, starts, edges[1::2]), starts


def _code_point_token_hashes(cps: np.ndarray, cls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """_token_hashes of the code points ``cps`` of a text and their classes ``cls``, and
    where each token starts."""
    n = len(cps)
    if n == 0:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    if cls.max() < _SINGLE:
        # No character stands alone: tokens are the runs of word characters, and the
        # edges of the runs alternate start, end, start, end ...
        padded = np.zeros(n + 2, dtype=np.uint8)
        padded[1:-1] = cls
        edges = np.flatnonzero(padded[1:] != padded[:-1])
        starts, ends = edges[0::2], edges[1::2]
    else:
        word = cls == _WORD
        single = cls == _SINGLE
        # A token starts at a single, or at a word character not preceded by one; it
        # ends after a single, or after a word character not followed by one.
        starts_mask = single.copy()
        starts_mask[0] |= word[0]
        starts_mask[1:] |= word[1:] & ~word[:-1]
        ends_mask = single
        ends_mask[-1] |= word[-1]
        ends_mask[:-1] |= word[:-1] & ~word[1:]
        starts = np.flatnonzero(starts_mask)
        ends = np.flatnonzero(ends_mask) + 1
    return _run_hashes(cps, starts, ends), starts


def _run_hashes(cps: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The polynomial hash of each token [start, end) of the code points ``cps``."""
    if len(starts) == 0:
        return np.empty(0, dtype=np.uint64)
    n = len(cps)
    pow_, inv = _powers(n)
    prefix = np.empty(n + 1, dtype=np.uint64)
    prefix[0] = 0
    np.cumsum(cps * pow_[:n], out=prefix[1:])  # uint8/uint32 times uint64 is uint64
    return (prefix[ends] - prefix[starts]) * inv[starts]


_SHINGLE_MULTIPLIERS = (_K1, _K2)  # for the first tokens of a shingle; the last gets 1


def _features(tokens: np.ndarray, width: int = SIMHASH_SHINGLE_TOKENS,
              breaks: np.ndarray | None = None) -> np.ndarray:
    """Shingles of ``width`` tokens (see the module doc); the tokens themselves when there
    are fewer. One finaliser over the combination spreads every bit of every token hash
    over the whole feature. ``breaks``: the tokens that begin a new block (sorted, repeats
    allowed); a shingle spanning one is left out."""
    count = len(tokens) - width + 1
    if width == 1 or count < 1:
        return _fmix64(tokens)
    combined = tokens[width - 1:].copy()
    for offset, multiplier in zip(range(width - 1), _SHINGLE_MULTIPLIERS):
        combined += tokens[offset:offset + count] * multiplier
    if breaks is not None:
        # Shingle i spans tokens i .. i + width - 1: a block beginning at token t cuts
        # the shingles t - width + 1 .. t - 1. (Per break, not per token: a block number
        # per token by searchsorted and comparing them cost ~50 µs on a 5,000-word page.)
        within = np.ones(count, dtype=bool)
        for offset in range(1, width):
            cut = breaks - offset
            within[cut[(cut >= 0) & (cut < count)]] = False
        if within.any():  # else (blocks all shorter than a shingle) keep them all
            combined = combined[within]
    return _fmix64(combined)


def _bit_counts(features: np.ndarray) -> np.ndarray:
    """How many features have each of the 64 bits set (bit i of the int is column i)."""
    rows = np.unpackbits(features.astype("<u8", copy=False).view(np.uint8), bitorder="little")
    rows = rows.reshape(len(features), SIMHASH_BITS)
    total = np.zeros(SIMHASH_BITS, dtype=np.int64)
    # Add the rows pairwise in uint8 (vectorised, no widening): after 7 halvings a cell
    # holds at most 128, so it cannot overflow; the remaining rows are summed in int64.
    for _ in range(7):
        count = rows.shape[0]
        if count < 2:
            break
        if count & 1:
            total += rows[-1]
        half = count // 2
        rows = rows[:half] + rows[half:2 * half]
    total += rows.sum(axis=0, dtype=np.int64)
    return total


def _simhash_normalised(norm: str, width: int = SIMHASH_SHINGLE_TOKENS, blocks: bool = False,
                        combine=None) -> int:
    """``blocks``: NUL characters end blocks (see simhash64_blocks); ``combine``: see _simhash_latin1."""
    text = norm[:SIMHASH_MAX_CHARS]
    try:  # most pages are Latin-1: one byte a character, and the byte is the code point
        latin1 = text.encode("latin-1")
    except UnicodeEncodeError:
        cps = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
        return _simhash_code_points(cps, width, np.flatnonzero(cps == 0) if blocks else None, combine)
    bounds = np.flatnonzero(np.frombuffer(latin1, dtype=np.uint8) == 0) if blocks else None
    return _simhash_latin1(latin1, width, bounds, combine)


def _simhash_latin1(latin1: bytes, width: int = SIMHASH_SHINGLE_TOKENS, bounds: np.ndarray | None = None,
                   combine=None) -> int:
    """_simhash_normalised of a normalised text given as its (first SIMHASH_MAX_CHARS) Latin-1
    bytes; ``combine`` (default :func:`_simhash_of_features`) makes the features one int."""
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps mod 2**64, on purpose
        tokens, starts = _latin1_token_hashes(latin1)
        if len(tokens) == 0:  # no letters: let numbers count rather than give every such text 0
            tokens, starts = _latin1_token_hashes(latin1, _CLASSES_WITH_NUMBERS)
            if len(tokens) == 0:
                return 0
        return (combine or _simhash_of_features)(_features(tokens, width, _block_breaks(starts, bounds)))


def _simhash_code_points(cps: np.ndarray, width: int = SIMHASH_SHINGLE_TOKENS, bounds: np.ndarray | None = None,
                         combine=None) -> int:
    """_simhash_normalised of a normalised text given as its code points."""
    with np.errstate(over="ignore"):
        classes = _CLASSES.take(cps)
        if combine is _minhash_of_features and width == SIMHASH_SHINGLE_TOKENS and classes.max() == _SINGLE:
            width = MINHASH_UNSPACED_SHINGLE_TOKENS
        tokens, starts = _code_point_token_hashes(cps, classes)
        if len(tokens) == 0:
            tokens, starts = _code_point_token_hashes(cps, _CLASSES_WITH_NUMBERS.take(cps))
            if len(tokens) == 0:
                return 0
        return (combine or _simhash_of_features)(_features(tokens, width, _block_breaks(starts, bounds)))


def _block_breaks(starts: np.ndarray, bounds: np.ndarray | None) -> np.ndarray | None:
    """The tokens (starting at ``starts``) that begin a block, ``bounds`` being where blocks
    end: for each bound, the first token after it (the number of tokens before it)."""
    if bounds is None or len(bounds) == 0:
        return None
    return np.searchsorted(starts, bounds)


def _distinct(features: np.ndarray) -> np.ndarray:
    """Each value once. A sort and a comparison with the neighbour: np.unique took ~7 times
    as long on page-sized arrays (numpy 2.4)."""
    if len(features) < 2:
        return features
    ordered = np.sort(features)
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def _simhash_of_features(features: np.ndarray) -> int:
    """Unweighted Charikar over the distinct features: bit i is 1 when more than half of
    them have it. Each shingle counts once (see the module doc: counted per occurrence,
    the frequent short shingles of a language decided the bits)."""
    features = _distinct(features)
    counts = _bit_counts(features)
    bits = (2 * counts > len(features)).astype(np.uint8)
    return int.from_bytes(np.packbits(bits, bitorder="little").tobytes(), "little")


# --- the 1-bit MinHash (the near-duplicate fingerprint fetch stores) ---------------------

MINHASH_UNSPACED_SHINGLE_TOKENS = 4
"""Tokens per shingle of minhash64 for a text with characters of a script written without
spaces (each such character is a token): 4-character shingles there, 3-token ones elsewhere.
Different texts of testweb.languages' narrow Thai vocabulary share about half of their
character trigrams, and the MinHash, which estimates that share more closely than the
SimHash, put them only 8 bits apart (min of 16 pairs; mean 14); with 4-grams 13 (mean 15),
and Japanese and Chinese pages 19-20 bits (15-18 with trigrams). A changed character or
sentence stayed within 2 bits either way (tests/test_fingerprint_scripts.py)."""

_BIN_SHIFT = np.uint64(58)
"""A feature's bin is its top 6 bits (one bin a bit of the fingerprint): shift right by 58."""
_BIN_NUMBERS = np.arange(SIMHASH_BITS, dtype=np.uint64)


_LEAST_CANDIDATES_PER_BIN = 16
"""How many features a bin keeps on average when only each bin's least is looked for
(:func:`_least_candidates`)."""
_LOW_BITS = np.uint64(64 - 58)
"""A feature shifted left by this many bits is its 58 bits below the bin number."""


def _least_candidates(features: np.ndarray) -> np.ndarray | None:
    """The features below a bound on their low 58 bits, chosen so that each bin keeps about
    _LEAST_CANDIDATES_PER_BIN; None for fewer than twice that many features (a short text).

    A bin with a feature kept has its least feature kept too, so the kept ones give each
    bin's least exactly when every bin keeps one (:func:`_least_of_bins`; a bin loses all
    with probability about e**-16 when the features are distinct), and sorting ~1,000
    values instead of a page's ~5,000 was ~100 of the ~300 µs that minhash64 of a 30 KB
    text took (np.sort, loaded 2-core machine). From twice that many features:
    _minhash_of_features of 2,500 random ones 61 -> 51 µs, of 3,500 88 -> 54 µs; of fewer,
    the bound keeps most of them and saves nothing."""
    count = len(features)
    if count < 2 * SIMHASH_BITS * _LEAST_CANDIDATES_PER_BIN:
        return None
    # A feature's low 58 bits are uniform: keep those under count_kept / count of their range.
    bound = np.uint64((SIMHASH_BITS * _LEAST_CANDIDATES_PER_BIN << 64) // count)
    return features[(features << _LOW_BITS) < bound]


_BIN_STARTS = _BIN_NUMBERS << _BIN_SHIFT
"""The least value of each bin."""


def _least_of_bins(ordered: np.ndarray) -> np.ndarray | None:
    """Each bin's least value of the sorted features ``ordered`` (repeats do not matter: the
    least is the least), or None when a bin has none."""
    firsts = np.searchsorted(ordered, _BIN_STARTS)
    if firsts[-1] >= len(ordered):  # the last bin is empty
        return None
    least = ordered[firsts]  # an empty bin's first index is the next filled bin's
    return least if ((least >> _BIN_SHIFT) == _BIN_NUMBERS).all() else None


def _minhash_of_features(features: np.ndarray) -> int:
    """64 one-bit MinHashes of the distinct features, as a 64-bit int: bit i is the lowest
    bit of the least feature whose top 6 bits are i (one permutation hashing: the features
    are already random 64-bit values, and sorting them, which making them distinct does,
    puts each bin's least first). A bin no feature falls in takes, mixed with its number,
    the value of the next bin that has one (rotation densification), so that two similar
    short texts, empty in the same bins, still agree there. See :func:`minhash64`.

    A long text's features are first cut to the candidates for each bin's least
    (:func:`_least_candidates`): the same value, from a sort of a fifth as many, and with
    every bin filled no repeats to remove and no bin to fill (~20 µs of numpy calls a page)."""
    candidates = _least_candidates(features)
    if candidates is not None:
        least = _least_of_bins(np.sort(candidates))
        if least is not None:
            return _bits_of(least)
    ordered = _distinct(features)
    count = len(ordered)
    if count == 0:
        return 0
    firsts = np.searchsorted(ordered, _BIN_STARTS)  # each bin's least, if any
    present = np.zeros(SIMHASH_BITS, dtype=bool)
    inside = firsts < count
    present[inside] = (ordered[firsts[inside]] >> _BIN_SHIFT) == _BIN_NUMBERS[inside]
    least = ordered[np.minimum(firsts, count - 1)]
    if not present.all():
        filled = np.flatnonzero(present)
        donor = filled[np.searchsorted(filled, np.arange(SIMHASH_BITS)) % len(filled)]
        least = np.where(present, least, _fmix64(ordered[firsts[donor]] ^ _BIN_NUMBERS))
    return _bits_of(least)


def _bits_of(least: np.ndarray) -> int:
    """The fingerprint of the bins' least values: bit i is the lowest bit of bin i's."""
    bits = (least & np.uint64(1)).astype(np.uint8)
    return int.from_bytes(np.packbits(bits, bitorder="little").tobytes(), "little")
