"""The Bloom filter: no false negatives, false positives near the configured rate."""

import pyarrow as pa
import pytest

from cycles.storage.bloom import BloomFilter


def test_sizing_follows_the_standard_formulas():
    bloom = BloomFilter(1_000_000, 0.01)
    assert 9.5 < bloom.bits / 1_000_000 < 9.7 and bloom.hashes == 7


def test_no_false_negatives_and_repeats_are_caught():
    bloom = BloomFilter(10_000, 0.01)
    items = [f"http://h{i % 97}.example/p/{i}" for i in range(5_000)]
    assert bloom.add_new(items).all()
    assert not bloom.add_new(items).any()
    assert bloom.contains_many(items).all() and items[0] in bloom
    mask = bloom.add_new(["http://new.example/", "http://new.example/", items[3]])
    assert mask.tolist() == [True, False, False]


def test_false_positive_rate_is_near_the_target():
    bloom = BloomFilter(20_000, 0.01)
    bloom.add_new([f"http://in.example/{i}" for i in range(20_000)])
    probes = [f"http://out.example/{i}" for i in range(50_000)]
    rate = bloom.contains_many(probes).mean()
    assert 0.003 < rate < 0.02, rate


@pytest.mark.parametrize("version", [1, 2])
def test_small_batches_take_the_python_path_with_the_same_bits_and_answers(version, monkeypatch):
    """add_new and contains_many answer a small batch in Python (cycles.storage.bloom.SMALL_BATCH):
    the bits set, the count and every answer are those of the numpy path."""
    import numpy as np

    import cycles.storage.bloom as bloom_module

    items = [f"http://h{i % 13}.example/p/{i % 50}?é" for i in range(400)]
    batches = [items[k:k + 9] for k in range(0, len(items), 9)] + [[items[0], items[0], "x"]]
    filters = []
    for small in (bloom_module.SMALL_BATCH, 0):
        monkeypatch.setattr(bloom_module, "SMALL_BATCH", small)
        bloom = BloomFilter(300, 0.05, version)  # small: false positives happen, within batches too
        answers = [bloom.add_new(batch).tolist() for batch in batches]
        answers += [bloom.contains_many(batch).tolist() for batch in batches]
        answers.append(bloom.contains_many([f"other{i}" for i in range(60)]).tolist())
        filters.append((answers, bloom.count, bloom._array.copy()))
    (small_answers, small_count, small_bits), (numpy_answers, numpy_count, numpy_bits) = filters
    assert small_answers == numpy_answers and small_count == numpy_count
    assert np.array_equal(small_bits, numpy_bits)
    assert any(small_answers[-1])  # some false positives: the comparison covered them


def test_union_update_is_the_filter_of_both_sets_and_refuses_another_size():
    a, b, both = BloomFilter(5000, 0.01), BloomFilter(5000, 0.01), BloomFilter(5000, 0.01)
    first, second = [f"h{i}.example" for i in range(0, 3000)], [f"h{i}.example" for i in range(3000, 5000)]
    a.add_new(first)
    b.add_new(second)
    both.add_new(first + second)
    a.union_update(b)
    assert a._array.tobytes() == both._array.tobytes()  # the same bits
    with pytest.raises(ValueError, match="same capacity"):
        a.union_update(BloomFilter(6000, 0.01))


V1_BLOB = bytes.fromhex(
    "4359434c4553424c4f4f4d310a7b226361706163697479223a2036342c202266705f72617465223a20302e30312c2022"
    "62697473223a203631342c2022686173686573223a20372c2022636f756e74223a20327d0a0000000000000004000000"
    "000000000000010000000000001000002000002000080000000008100000000000200008000100000010010000000000"
    "000000000000000000000000000008000000")
"""BloomFilter(64, 0.01) after add_new(["http://a.test/", "http://b.test/é"]), written by the
version-1 code (BLAKE2b positions, commit 208e504)."""

V2_BITS = bytes.fromhex(
    "004000008000000002100000000001000000100000000000000000000000000000000000000200000000000800000400"
    "0008000108000000000010000008000000000000000000000000000000")
"""The same filter's bits with version 2's XXH3-128 positions: pinned, so a filter written on
one machine (generate) answers the same on another (the fetch worker) and across releases."""


def test_positions_are_pinned_and_stable_across_processes():
    bloom = BloomFilter(64, 0.01)
    bloom.add_new(["http://a.test/", "http://b.test/é"])
    blob = bloom.to_bytes()
    assert blob.startswith(BloomFilter.MAGIC) and blob.endswith(V2_BITS)
    small = BloomFilter(64, 0.01)
    small.add_all(pa.array(["http://b.test/é", "http://a.test/"]))  # the bulk path, from Arrow
    assert small.to_bytes() == blob


def test_a_version_1_filter_is_still_read_and_answers_with_its_own_hash():
    """A seen-set or known-hosts filter written before XXH3 (a segment generated before the
    upgrade) keeps working: read, asked, added to and written back as version 1."""
    old = BloomFilter.from_bytes(V1_BLOB)
    assert old.version == 1 and old.count == 2
    assert old.contains_many(["http://a.test/", "http://b.test/é"]).all() and "http://a.test/" in old
    assert BloomFilter.from_bytes(BloomFilter(64, 0.01).to_bytes()).contains_many(["http://a.test/"]).tolist() == [False]
    assert old.add_new(["http://a.test/", "http://c.test/"]).tolist() == [False, True]
    again = BloomFilter.from_bytes(old.to_bytes())
    assert again.version == 1 and "http://c.test/" in again
    with pytest.raises(ValueError, match="version"):
        BloomFilter(64, 0.01).union_update(old)  # the bits of two hashes do not merge


def test_cut_or_foreign_blobs_are_refused():
    blob = BloomFilter(1000, 0.01).to_bytes()
    with pytest.raises(ValueError):
        BloomFilter.from_bytes(blob[:-3])
    with pytest.raises(ValueError, match="not a Bloom filter"):
        BloomFilter.from_bytes(b"CYCLESBLOOM3\n" + blob[len(BloomFilter.MAGIC):])


@pytest.mark.parametrize("header", [b'{"fp_rate": 0.01, "bits": 9586, "hashes": 7, "count": 0}',
                                    b'{"capacity": "1000", "fp_rate": 0.01, "bits": 9586, "hashes": 7, "count": 0}',
                                    b'[1000, 0.01]'])
def test_a_blob_with_a_damaged_header_is_refused_with_a_value_error(header):
    # The fetch worker counts a ValueError as an unreadable seen-set (discover/seen_set_unreadable)
    # and generate's new-host claims read it as no filter; a KeyError or TypeError was a traceback.
    blob = BloomFilter(1000, 0.01).to_bytes()
    magic_end = len(BloomFilter.MAGIC)
    line_end = blob.index(b"\n", magic_end)
    assert BloomFilter.from_bytes(blob).capacity == 1000  # the positive control: the intact header reads
    with pytest.raises(ValueError, match="damaged header"):
        BloomFilter.from_bytes(blob[:magic_end] + header + blob[line_end:])


@pytest.mark.parametrize("version", [1, 2])
def test_the_bulk_add_from_arrow_sets_the_bits_of_add_new(version, monkeypatch):
    """add_all (generate's seen-sets and known hosts, from Arrow arrays in chunks) sets the
    bits add_new sets, for plain, large and chunked string arrays; contains_many answers the
    same for an Arrow array as for a list."""
    import cycles.storage.bloom as bloom_module

    monkeypatch.setattr(bloom_module, "BULK_CHUNK", 1000)  # several chunks
    items = [f"http://h{i % 31}.example/p/{i}?q=ü" for i in range(3_500)]
    reference = BloomFilter(4000, 0.01, version)
    reference.add_new(items)
    for array in (pa.array(items), pa.array(items, pa.large_string()), pa.array(items, pa.string_view()),
                  pa.chunked_array([items[:1200], items[1200:]])):
        bloom = BloomFilter(4000, 0.01, version)
        bloom.add_all(array)
        assert bloom._array.tobytes() == reference._array.tobytes() and bloom.count == len(items)
        probes = items[::7] + [f"http://out.example/{i}" for i in range(500)]
        assert bloom.contains_many(pa.array(probes)).tolist() == reference.contains_many(probes).tolist()
    with pytest.raises(ValueError, match="nulls"):
        BloomFilter(10, 0.01).add_all(pa.array(["a", None]))


def test_add_hashes_sets_the_bits_add_all_sets():
    """The seen index's halves (cycles/tables/seenindex.py) stand for the strings: the same
    filter, byte for byte, from the halves in several arrays as from the strings."""
    from cycles.storage.bloom import hash_pairs

    urls = [f"http://h{i % 97}.example/p{i}" for i in range(20_000)]
    strings, halves = BloomFilter(len(urls), 0.01), BloomFilter(len(urls), 0.01)
    strings.add_all(urls)
    h1, h2 = hash_pairs(urls)
    halves.add_hashes([(h1[:7_000], h2[:7_000]), (h1[7_000:], h2[7_000:])])
    assert halves.to_bytes() == strings.to_bytes()
    assert halves.count == len(urls) and halves._array.any()
    with pytest.raises(ValueError):
        BloomFilter(10, 0.01, version=1).add_hashes([(h1, h2)])
