"""The Bloom filter: no false negatives, false positives near the configured rate."""

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


def test_small_batches_take_the_python_path_with_the_same_bits_and_answers(monkeypatch):
    """add_new and contains_many answer a small batch in Python (cycles.storage.bloom.SMALL_BATCH):
    the bits set, the count and every answer are those of the numpy path."""
    import numpy as np

    import cycles.storage.bloom as bloom_module

    items = [f"http://h{i % 13}.example/p/{i % 50}?é" for i in range(400)]
    batches = [items[k:k + 9] for k in range(0, len(items), 9)] + [[items[0], items[0], "x"]]
    filters = []
    for small in (bloom_module.SMALL_BATCH, 0):
        monkeypatch.setattr(bloom_module, "SMALL_BATCH", small)
        bloom = BloomFilter(300, 0.05)  # small: false positives happen, within batches too
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
