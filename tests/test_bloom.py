"""The Bloom filter: no false negatives, false positives near the configured rate."""

from cycles.bloom import BloomFilter


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
