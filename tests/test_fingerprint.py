"""cycles.fingerprint: content hash, SimHash, 1-bit MinHash, Hamming distance, whitespace collapsing."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys

import pytest

from cycles import fingerprint
from cycles.fingerprint import (collapse_other_whitespace, collapse_whitespace, latin1_to_utf8, content_hash, fingerprints, hamming,
                                minhash64, minhash64_blocks, normalise, simhash64)

pytestmark = pytest.mark.web

_WORDS = ("the of and to a in is that for it as was with be by on not this are or from at "
          "which but have an they you were her she there been one all we crawler page index "
          "fetch segment host robots politeness delay queue frontier parser anchor canonical "
          "duplicate shingle fingerprint bucket update generate cycle archive record header "
          "status redirect timeout retry schedule interval score depth link text title").split()


def english(seed: int, words: int = 2000) -> str:
    """Pseudo-English: Zipf-weighted words from a small vocabulary, in sentences."""
    rng = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(len(_WORDS))]
    chosen = rng.choices(_WORDS, weights, k=words)
    sentences = [" ".join(chosen[i:i + 12]).capitalize() + "." for i in range(0, words, 12)]
    return " ".join(sentences)


def with_date(text: str, date: str) -> str:
    return f"Published on {date} by the crawler team. {text} Last updated {date}."


# --- content_hash ----------------------------------------------------------------------------

def test_content_hash_is_blake2b_16_of_the_normalised_text():
    assert content_hash("Hello   World\n") == hashlib.blake2b(b"hello world", digest_size=16).hexdigest()
    assert content_hash("Hello World") == "e9a804b2e527fd3601d2ffc0bb023cd6"  # pinned: stored in the crawl DB


def test_content_hash_ignores_case_and_whitespace_only():
    base = content_hash("The quick brown fox")
    assert content_hash("  the QUICK\tbrown\n\n fox \u00a0") == base
    assert content_hash("The quick brown fox.") != base
    assert content_hash("The quick brown fix") != base
    assert content_hash("ÉTÉ") == content_hash("été")  # full Unicode lower case, not only ASCII


def test_content_hash_keeps_numbers():
    assert content_hash("page 1 of 10") != content_hash("page 2 of 10")


# --- simhash64 -------------------------------------------------------------------------------

def test_simhash_is_an_unsigned_64_bit_int():
    for text in ("", "a", "hello world", english(1)):
        value = simhash64(text)
        assert isinstance(value, int) and 0 <= value < 1 << 64


def test_simhash_is_pinned():
    # Stored SimHashes are compared across cycles: a change of features or hashing must be
    # deliberate (and come with a migration), never a side effect.
    assert simhash64("The quick brown fox jumps over the lazy dog") == 0xEE09BBA8395BF7FF


def test_simhash_of_texts_without_tokens_is_zero():
    assert simhash64("") == 0
    assert simhash64("  ... --- !!! ") == 0


def test_simhash_is_stable_across_processes():
    text = english(3)
    code = ("import sys; from cycles.fingerprint import simhash64, content_hash; "
            "t = sys.stdin.read(); print(simhash64(t), content_hash(t))")
    outputs = set()
    for seed in ("0", "1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        result = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True,
                                text=True, env=env, check=True)
        outputs.add(result.stdout.strip())
    assert outputs == {f"{simhash64(text)} {content_hash(text)}"}


def test_simhash_ignores_case_whitespace_and_punctuation():
    text = "The Quick brown fox, jumps over the lazy dog."
    assert simhash64(text) == simhash64("the quick   BROWN fox jumps over the lazy dog")
    assert simhash64(text) == simhash64("— the quick «brown» fox; jumps over the lazy dog! —")


def test_simhash_ascii_and_unicode_paths_agree():
    # An ASCII text and the same text with non-ASCII separators take different code paths
    # (bytes vs UTF-32) but have the same tokens.
    text = english(11, words=300)
    assert simhash64(text) == simhash64(text.replace(". ", " \u2014 "))


def test_simhash_leaves_numbers_out():
    a = "Results for page 1 of 20, updated 12:30 on 2024-03-12: the crawler fetched pages"
    b = "Results for page 2 of 20, updated 18:05 on 2025-01-07: the crawler fetched pages"
    assert simhash64(a) == simhash64(b)
    assert content_hash(a) != content_hash(b)


def test_simhash_of_numbers_only_still_depends_on_them():
    assert simhash64("123 456 789") != 0
    assert simhash64("123 456 789") != simhash64("987 654 321")


def test_near_duplicates_are_within_3_bits():
    # Expected distance for d changed features of N distinct ones is about
    # 64/pi * sqrt(2d/N): ~1-1.5 bits here, so a few cases reach 4. Each case is one fixed
    # text, so the test is deterministic; it fails when more than 5 of the 30 miss. (With
    # each occurrence of a shingle counted, all 30 were within 3 bits, but different
    # Japanese and Thai pages were too: tests/test_fingerprint_scripts.py.)
    distances = []
    for seed in range(10):
        text = english(seed)
        distances.append(hamming(simhash64(with_date(text, "12 March 2024")),
                                 simhash64(with_date(text, "3 April 2025"))))
        words = text.split()
        words[len(words) // 2] = "changed"
        distances.append(hamming(simhash64(text), simhash64(" ".join(words))))
        distances.append(hamming(simhash64(text), simhash64(text + " One more sentence at the end.")))
    assert sum(1 for d in distances if d <= 3) >= 25, distances
    assert max(distances) <= 5, distances


def test_different_texts_are_far_apart():
    distances = [hamming(simhash64(english(seed)), simhash64(english(seed + 100))) for seed in range(10)]
    assert min(distances) >= 10
    assert sum(distances) / len(distances) >= 20


def test_shared_boilerplate_does_not_make_different_pages_duplicates():
    boilerplate = english(999, words=300)
    distances = [hamming(simhash64(boilerplate + english(seed, 600)),
                         simhash64(boilerplate + english(seed + 100, 600))) for seed in range(10)]
    assert min(distances) >= 10


def test_cjk_characters_are_tokens():
    rng = random.Random(5)
    han = [chr(cp) for cp in range(0x4E00, 0x4E00 + 800)]
    weights = [1 / (rank + 1) for rank in range(len(han))]

    def chinese(seed: int) -> str:
        rng = random.Random(seed)
        return "，".join("".join(rng.choices(han, weights, k=20)) for _ in range(100)) + "。"

    text = chinese(1)
    position = rng.randrange(len(text))
    edited = text[:position] + ("丁" if text[position] != "丁" else "七") + text[position + 1:]
    assert hamming(simhash64(text), simhash64(edited)) <= 3
    assert hamming(simhash64(text), simhash64(chinese(2))) >= 10


def test_very_long_text_is_capped_not_refused():
    text = english(1, words=200_000)
    assert len(normalise(text)) > fingerprint.SIMHASH_MAX_CHARS
    assert simhash64(text) == simhash64(text + " more words after the cap")
    assert content_hash(text) != content_hash(text + " more words after the cap")


def test_fingerprints_equals_the_two_functions():
    for text in ("", "Hello  World", english(2), "日本語の文章です。" * 30):
        assert fingerprints(text) == (content_hash(text), minhash64(text))
    collapsed = collapse_whitespace(english(4))
    assert fingerprints(collapsed, collapsed=True) == (content_hash(collapsed), minhash64(collapsed))
    blocks = [english(5, 80), english(6, 80), "ภาษาไทย" * 30]
    for flag in (False, True):
        assert fingerprints(" ".join(blocks), collapsed=flag, blocks=blocks) == (
            content_hash(" ".join(blocks)), minhash64_blocks(blocks))


def test_collapsed_blocks_take_the_latin1_path_with_the_same_value(monkeypatch):
    # fingerprints(collapsed=True, blocks=...) of Latin-1 blocks: one translate, the block
    # ends from their lengths (_minhash_blocks_collapsed). The same value as minhash64_blocks
    # for words with Latin-1 capitals, blocks shorter than a shingle, empty blocks and text
    # past SIMHASH_MAX_CHARS; numbers only, no token at all and a block outside Latin-1 take
    # the general path (_simhash_collapsed), and the positive control shows which did.
    cap = fingerprint.SIMHASH_MAX_CHARS
    cases = [([english(5, 80), "ÀÉÎ õüß µªº ÿ", english(6, 80)], False),
             (["a b", "c", "d e f g"], False), (["", english(7, 50), ""], False),
             ([english(8, 130_000)[:cap - 10], english(9, 40), english(10, 40)], False),
             (["12 34 56", "78 90"], True), (["... ---", "!! ??"], True),
             ([english(11, 300), "日本語の文章です。" * 30, "ภาษาไทย" * 30], True)]
    general = fingerprint._simhash_collapsed
    calls = []
    monkeypatch.setattr(fingerprint, "_simhash_collapsed", lambda *args, **kw: calls.append(1) or general(*args, **kw))
    for blocks, by_general_path in cases:
        calls.clear()
        assert fingerprints(" ".join(blocks), collapsed=True, blocks=blocks)[1] == minhash64_blocks(blocks)
        assert bool(calls) == by_general_path


def _random_blocks(rng: random.Random) -> list[str]:
    """Two to 60 collapsed blocks of words with Latin-1 capitals, numbers, punctuation;
    some empty, some shorter than a shingle, some one word."""
    vocabulary = _WORDS[:30] + ["Café", "NAÏVE", "straße", "ÿes", "µ", "12", "3x4", "x", "--", "é."]
    blocks = []
    for _ in range(rng.choice([2, 2, 3, 5, 20, 60])):
        words = rng.choice([0, 1, 2, 3, 4, 7, 40, 300])
        blocks.append(" ".join(rng.choice(vocabulary) + rng.choice(["", "", ",", ".", " -"]) for _ in range(words)).strip())
    return blocks


def test_the_compiled_minhash_equals_the_numpy_one_bit_for_bit():
    # cycles/fingerprint_jit.py computes the Latin-1 blocks' MinHash in one compiled pass; the
    # numpy version (_minhash_blocks_numpy) is the reference, pinned by the tests above. Random
    # block lists (short ones, where the densification fills empty bins; blocks shorter than a
    # shingle; no shingle within a block), the replay's test-web pages, and text past
    # SIMHASH_MAX_CHARS with a block starting after it.
    rng = random.Random(28)
    cases = [_random_blocks(rng) for _ in range(3000)]
    cases += [["a b", "c d"], ["a", "b"], ["ab", "", "cd e f"], ["x"] * 5, [english(12, 300), english(13, 300)],
              [english(14, 130_000)[:fingerprint.SIMHASH_MAX_CHARS - 5], english(15, 40), english(16, 40)]]
    from cycles.fetch.parse import SIMHASH_BLOCK_MIN_BYTES, _main_blocks, _tree, _visible_text
    from testweb.web import Web

    web = Web(hosts=2, pages=20, page_bytes=30_000, special=False)
    for profile in web.profiles.values():
        for k in range(20):
            body = profile.handle("GET", f"/p/{k}.html", {}).body
            root = _tree(body, body.decode("utf-8"), "utf-8")
            cases.append(_main_blocks(root, _visible_text(root), SIMHASH_BLOCK_MIN_BYTES))
    fingerprint._load_compiled()  # what the loading thread does (the next test shows when)
    assert fingerprint._compiled is not None
    compared = 0
    for blocks in cases:
        if len(blocks) < 2:
            continue
        assert fingerprint._minhash_blocks_collapsed(blocks) == fingerprint._minhash_blocks_numpy(blocks), blocks
        compared += 1
    assert compared > 2900


def test_a_process_loads_the_compiled_pass_only_after_its_first_pages():
    # numba's import and the kernels' cache load cost ~0.6 CPU-s a process: a test's or a
    # small segment's fetch worker fingerprints a few pages and never pays it. Past
    # COMPILED_AFTER_PAGES a thread loads it (the numpy version serves meanwhile), then the
    # compiled pass serves, with the same value.
    code = ("import sys; from cycles import fingerprint as f; blocks = ['one two three four', 'five six seven'];"
            "one = lambda: f.fingerprints(' '.join(blocks), collapsed=True, blocks=blocks)[1];"
            "v = [one() for _ in range(f.COMPILED_AFTER_PAGES)]; before = 'numba' in sys.modules;"
            "v.append(one()); f._loading.join(); v.append(one());"
            "print(before, 'numba' in sys.modules, f._compiled is not None, len(set(v)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True", "True", "1"]


# --- minhash64 ------------------------------------------------------------------------------

def jaccard(a: str, b: str) -> float:
    """Jaccard similarity of the two texts' word 3-shingles (what minhash64 estimates)."""
    def shingles(text):
        words = text.lower().replace(".", "").split()
        return {tuple(words[i:i + 3]) for i in range(len(words) - 2)}
    sa, sb = shingles(a), shingles(b)
    return len(sa & sb) / len(sa | sb)


def test_minhash_is_an_unsigned_64_bit_int_stable_across_processes():
    text = english(1)
    value = minhash64(text)
    assert 0 <= value < 1 << 64 and value.bit_count() in range(16, 49)
    assert minhash64("") == minhash64("  ... --- !!! ") == 0
    assert minhash64("The quick brown fox jumps over the lazy dog") == 0x477AB8CCB493026D  # pinned: stored in the crawl DB
    assert minhash64("the quick   BROWN fox jumps over the lazy dog") == minhash64("The quick brown fox jumps over the lazy dog")


def test_minhash_of_a_long_text_from_the_least_candidates_is_the_full_sorts():
    # A long text's bins are read from the candidates for each bin's least only (a sort of
    # ~1,000 values, not all): the value is the full sort's, pinned from before that change.
    text = english(11, 8000)
    features = fingerprint._features(fingerprint._token_hashes(normalise(text)))
    assert fingerprint._least_candidates(features) is not None  # the candidates' path is taken
    assert minhash64(text) == 0xA5C9B7C10F878220


@pytest.mark.parametrize("seed", range(6))
def test_minhash_least_candidates_agree_with_every_feature(seed, monkeypatch):
    # Random features, distinct or repeated, some with bins left empty: the same bits whether
    # each bin's least comes from the candidates or from all features (the positive control:
    # the candidates' path is taken for some of them).
    import numpy as np

    rng = np.random.default_rng(seed)
    cases = []
    for size in (0, 100, 2047, 2048, 4096, 5000, 20000):
        features = rng.integers(0, 2**64, size=size, dtype=np.uint64)
        cases += [features, features[rng.integers(0, max(1, size // 3), size=size)],
                  features & np.uint64((1 << 63) - 1)]
    with_candidates = [fingerprint._minhash_of_features(f) for f in cases]
    assert sum(fingerprint._least_candidates(f) is not None for f in cases) >= 4
    monkeypatch.setattr(fingerprint, "_least_candidates", lambda features: None)
    assert with_candidates == [fingerprint._minhash_of_features(f) for f in cases]


def test_minhash_distance_estimates_one_minus_jaccard():
    # Each bit differs with probability (1 - J) / 2 (Li and König, b-bit minwise hashing,
    # b = 1): 32 (1 - J) bits on average. Over 40 pairs of each similarity the mean is
    # within a few standard errors of that.
    for keep in (0.98, 0.9, 0.6, 0.0):
        distances, expected = [], []
        for seed in range(40):
            text = english(seed, 1500)
            words = text.split()
            rng = random.Random(seed)
            for i in rng.sample(range(len(words)), int(len(words) * (1 - keep) / 3)):
                words[i] = f"w{seed}x{i}"
            other = " ".join(words) if keep else english(seed + 500, 1500)
            distances.append(hamming(minhash64(text), minhash64(other)))
            expected.append(32 * (1 - jaccard(text, other)))
        mean, want = sum(distances) / 40, sum(expected) / 40
        assert abs(mean - want) <= 1.0 + 0.1 * want, (keep, mean, want)


def test_minhash_finds_edits_the_simhash_misses():
    # One changed word and one sentence added, on short pages (80-300 words), where the
    # SimHash's sqrt law moves it past 3 bits.
    mine = simh = 0
    for seed in range(40):
        text = english(seed, 80 + 6 * seed)
        words = text.split()
        words[len(words) // 2] = "changed"
        for other in (" ".join(words), text + " One more sentence at the very end of it."):
            mine += hamming(minhash64(text), minhash64(other)) <= 3
            simh += hamming(simhash64(text), simhash64(other)) <= 3
    assert mine >= 70 and mine >= simh + 10, (mine, simh)


def test_minhash_keeps_different_texts_apart():
    distances = [hamming(minhash64(english(seed, 300)), minhash64(english(seed + 100, 300))) for seed in range(20)]
    assert min(distances) >= 12
    boilerplate = english(999, words=300)
    distances = [hamming(minhash64(boilerplate + english(seed, 600)),
                         minhash64(boilerplate + english(seed + 100, 600))) for seed in range(10)]
    assert min(distances) >= 10


def test_minhash_of_short_texts_fills_empty_bins_from_their_neighbours():
    # 20 words: most of the 64 bins are empty; the fingerprint is still a function of the
    # text's shingles, different for different texts and equal for the same shingles.
    short = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon"
    assert minhash64(short) != 0 and minhash64(short) == minhash64(short.upper() + " ")
    assert hamming(minhash64(short), minhash64(short.replace("sigma", "other"))) < hamming(minhash64(short), minhash64(english(3, 20)))


def test_minhash_blocks_ignore_block_order():
    blocks = [english(7, 60), english(8, 60), english(9, 60)]
    assert minhash64_blocks(blocks) == minhash64_blocks(blocks[::-1]) == minhash64_blocks(["", *blocks])
    assert minhash64_blocks(blocks[:1]) == minhash64(blocks[0])
    assert minhash64_blocks([]) == 0


# --- hamming ---------------------------------------------------------------------------------

def test_hamming():
    assert hamming(0, 0) == 0
    assert hamming(0, (1 << 64) - 1) == 64
    assert hamming(0b1011, 0b0010) == 2


# --- collapse_whitespace -----------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(20))
def test_collapse_whitespace_equals_split_join(seed):
    rng = random.Random(seed)
    pool = ["a", "b", "é", "中", " ", "  ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x85",
            "\xa0", "\u2003", "\u3000", "\u2028", "\u200b", "x y"]
    text = "".join(rng.choice(pool) for _ in range(rng.randrange(0, 200)))
    assert collapse_whitespace(text) == " ".join(text.split())


@pytest.mark.parametrize("seed", range(20))
def test_collapse_other_whitespace_equals_split_join_after_normalize_space(seed):
    rng = random.Random(seed)
    pool = ["a", "b", "é", "中", " ", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "\u2003", "\u3000",
            "\u2028", "\u200b", "x y"]
    if seed % 2:
        pool = [p for p in pool if p.isascii()]
    raw = "".join(rng.choice(pool) for _ in range(rng.randrange(0, 200)))
    text = " ".join(raw.split(" "))  # what XPath normalize-space() leaves: single spaces...
    text = " ".join(part for part in text.split(" ") if part)  # ... none at either end
    assert collapse_other_whitespace(text) == " ".join(text.split())


def test_thai_letters_are_tokens_and_marks_are_left_out():
    # "ภาษาไทย" with and without its vowel sign and tone marks: the same letters.
    with_marks = "ภาษาไทย " * 50 + "ข้อความ " * 50
    without = "".join(char for char in with_marks if char not in "\u0e49\u0e31\u0e34")
    assert simhash64(with_marks) == simhash64(without)
    assert simhash64(with_marks) != simhash64("ภาษาไทย " * 100)


def test_lower_equals_str_lower():
    samples = ("", "ABC", "Caf\u00c9 \u00bb \u00a9 \u00df \u00b5 \u00ff \u00de",
               "\u0130stanbul \u0391\u0392", "".join(map(chr, range(256))), "MIXED \u00c0 and \u4e2d")
    assert any(not text.isascii() for text in samples)
    for text in samples:
        assert fingerprint.lower(text) == text.lower()


@pytest.mark.parametrize("non_ascii", [0, 1, 5, 64, 65, 3000])
def test_latin1_to_utf8_equals_the_codecs(non_ascii):
    rng = random.Random(non_ascii)
    data = bytearray(rng.randrange(32, 128) for _ in range(5000))
    for position in rng.sample(range(len(data)), min(non_ascii, len(data))):
        data[position] = rng.randrange(128, 256)
    data = bytes(data)
    assert latin1_to_utf8(data) == data.decode("latin-1").encode("utf-8")
    assert latin1_to_utf8(b"") == b"" and latin1_to_utf8(b"\xff") == "\xff".encode()
