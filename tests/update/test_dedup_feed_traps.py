"""update: duplicates, near-duplicates, the pages feed with its back-pressure, and trap caps.

Each test writes the files a fetch would have written (real Parquet in a real segment) and
runs the real generate and update on them.
"""

from __future__ import annotations

import pytest

from cycles.config import Config
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.tables.pages import read_feed
from cycles.storage.store import utcnow
from cycles.update.dedup import block_masks
from cycles.update.update import update_segment
from tests.support.transitions import due_now, fetch_result, rows

TEXT = "lorem ipsum dolor sit amet " * 80  # long enough for near-duplicate checks


@pytest.fixture
def config() -> Config:
    config = Config()
    config.db.buckets = 3
    return config


def crawl_once(store, config, results: dict[str, dict], links=()) -> str:
    """generate, then write the given results (url -> FETCHED values) and links, then update."""
    segment = generate(store, config).segment
    assert segment
    fetch_result(store, segment, [
        {"url": url, "host": url.split("/")[2], "fetched_at": utcnow(), "http_status": 200, "outcome": "ok",
         "text": TEXT, "title": "t", "warc_file": "warc/x.warc.gz", "warc_offset": 0, "warc_length": 1, **values}
        for url, values in results.items()], links)
    update_segment(store, config, segment)
    return segment


def seed(store, config, tmp_path, urls):
    path = tmp_path / "seeds.txt"
    path.write_text("\n".join(urls) + "\n")
    inject(store, config, path)


def test_block_masks_cover_every_pair_within_distance():
    masks = block_masks(6, 3)
    assert len(masks) == 20
    # A pair differing in 3 bits spread over 3 blocks still agrees under some mask.
    a, b = 0x0123456789ABCDEF, 0x0123456789ABCDEF ^ (1 << 1) ^ (1 << 20) ^ (1 << 40)
    assert any((a & m) == (b & m) for m in masks)


def test_exact_duplicates_point_at_the_canonical_url(store, config, tmp_path):
    urls = ["http://a.example/page", "http://a.example/page/index.html", "http://b.example/copy"]
    seed(store, config, tmp_path, urls)
    crawl_once(store, config, {u: {"content_hash": "1" * 32, "minhash": 77} for u in urls})
    db = rows(store)
    # Same score and first seen: the shortest URL is canonical.
    assert db["http://a.example/page"]["status"] == "fetched"
    for copy in urls[1:]:
        assert db[copy]["status"] == "duplicate"
        assert db[copy]["duplicate_of"] == "http://a.example/page"


def test_links_of_an_exact_copy_are_not_followed(store, config, tmp_path):
    urls = ["http://a.example/page", "http://a.example/copy-of-page"]
    seed(store, config, tmp_path, urls)
    links = [{"from_url": "http://a.example/copy-of-page", "url": "http://a.example/only-from-copy", "anchor": "",
              "nofollow": False, "depth": 1},
             {"from_url": "http://a.example/page", "url": "http://a.example/from-page", "anchor": "",
              "nofollow": False, "depth": 1}]
    crawl_once(store, config, {u: {"content_hash": "2" * 32, "minhash": 5} for u in urls}, links)
    db = rows(store)
    assert "http://a.example/from-page" in db and "http://a.example/only-from-copy" not in db


def test_near_duplicates_within_three_bits(store, config, tmp_path):
    base = 0xF0F0_1234_5678_9ABC
    urls = {"http://n.example/a": base, "http://n.example/b": base ^ 0b101,
            "http://n.example/c": base ^ 0xFFFF_0000_0000_0000}
    seed(store, config, tmp_path, list(urls))
    crawl_once(store, config, {u: {"content_hash": f"{i}" * 32, "minhash": s}
                               for i, (u, s) in enumerate(urls.items())})
    db = rows(store)
    assert db["http://n.example/a"]["status"] == "fetched"
    assert db["http://n.example/b"]["status"] == "near_duplicate"
    assert db["http://n.example/b"]["duplicate_of"] == "http://n.example/a"
    assert db["http://n.example/c"]["status"] == "fetched"


def test_short_pages_are_not_near_duplicates(store, config, tmp_path):
    urls = {"http://s.example/a": 1 << 40, "http://s.example/b": (1 << 40) | 1}
    seed(store, config, tmp_path, list(urls))
    crawl_once(store, config, {u: {"content_hash": f"{i}" * 32, "minhash": s, "text": "short"}
                               for i, (u, s) in enumerate(urls.items())})
    assert {r["status"] for r in rows(store).values()} == {"fetched"}


def test_feed_publishes_new_and_changed_pages_once(store, config, tmp_path):
    urls = ["http://f.example/1", "http://f.example/2", "http://f.example/noindex"]
    seed(store, config, tmp_path, urls)
    crawl_once(store, config, {urls[0]: {"content_hash": "a" * 32}, urls[1]: {"content_hash": "b" * 32},
                               urls[2]: {"content_hash": "c" * 32, "noindex": True}})
    first = read_feed(store, "indexer")
    assert sorted(first.table["url"].to_pylist()) == urls[:2]
    assert set(first.table["status"].to_pylist()) == {"new"}
    assert first.table["warc_file"][0].as_py().startswith("segments/")
    due_now(store)
    crawl_once(store, config, {urls[0]: {"content_hash": "a" * 32}, urls[1]: {"content_hash": "B" * 32},
                               urls[2]: {"content_hash": "c" * 32, "noindex": True}})
    second = read_feed(store, "indexer")
    assert second.table.to_pylist()[0]["url"] == urls[1] and second.pages == 1
    assert second.table["status"].to_pylist() == ["changed"]
    assert read_feed(store, "indexer").pages == 0  # the cursor moved


def test_generate_holds_while_a_consumer_lags(store, config, tmp_path):
    config.generate.feed_max_lag_cycles = 2
    seed(store, config, tmp_path, [f"http://l.example/{i}" for i in range(4)])
    read_feed(store, "slow")  # registers the consumer
    config.generate.top_n = 1
    for i in range(2):
        crawl_once(store, config, {f"http://l.example/{i}": {"content_hash": f"{i}" * 32}})
    held = generate(store, config)
    assert held.segment is None and "'slow' is 2 batches behind" in held.reason
    assert read_feed(store, "slow").pages == 2
    assert generate(store, config).segment is not None


def test_url_pattern_explosion_is_capped_by_pattern_not_host(store, config, tmp_path):
    config.update.max_urls_per_pattern = 10
    seed(store, config, tmp_path, ["http://t.example/"])
    links = [{"from_url": "http://t.example/", "url": f"http://t.example/item?id={n}", "anchor": "",
              "nofollow": False, "depth": 1} for n in range(200)]
    links += [{"from_url": "http://t.example/", "url": f"http://t.example/article/{name}", "anchor": "",
               "nofollow": False, "depth": 1} for name in ("alpha", "beta", "gamma", "delta")]
    crawl_once(store, config, {"http://t.example/": {"content_hash": "9" * 32}}, links)
    db = rows(store)
    items = [u for u in db if "/item?id=" in u]
    assert len(items) == 10
    assert {u for u in db if "/article/" in u} == {f"http://t.example/article/{n}" for n in ("alpha", "beta", "gamma", "delta")}
    stats = store.read_json(store.segment_dir(store.segments()[-1]) / "stats" / "update.json")
    assert stats["trap/pattern_cap"] == 190


def test_host_total_cap(store, config, tmp_path):
    config.update.max_urls_per_host_total = 5
    seed(store, config, tmp_path, ["http://c.example/"])
    links = [{"from_url": "http://c.example/", "url": f"http://c.example/{w}", "anchor": "", "nofollow": False,
              "depth": 1} for w in ("a", "b", "c", "d", "e", "f", "g")]
    crawl_once(store, config, {"http://c.example/": {"content_hash": "8" * 32}}, links)
    assert len(rows(store)) == 5


def test_copies_of_a_page_that_becomes_a_copy_name_the_page_kept(store, config, tmp_path):
    """docs/dedup.md: every copy names the page kept. X is a copy of A; A, fetched again, turns
    out a copy of C: X now names C, not A (a copy). The positive control: after the first
    cycle X does name A, and a copy whose page stays kept keeps naming it."""
    from tests.support.transitions import due_now

    c, a, x = "http://c.example/p", "http://a.example/page", "http://x.example/copy-of-page"
    y, b = "http://y.example/copy-of-other", "http://b.example/other"
    seed(store, config, tmp_path, [c, a, x, b, y])
    crawl_once(store, config, {c: {"content_hash": "2" * 32, "minhash": 0x2222222222222222}, a: {"content_hash": "1" * 32, "minhash": 0x1111111111111111},
                               x: {"content_hash": "1" * 32, "minhash": 0x1111111111111111}, b: {"content_hash": "3" * 32, "minhash": 0x4444444444444444},
                               y: {"content_hash": "3" * 32, "minhash": 0x4444444444444444}})
    db = rows(store)
    assert (db[x]["status"], db[x]["duplicate_of"]) == ("duplicate", a)  # the control: X named A
    assert (db[y]["status"], db[y]["duplicate_of"]) == ("duplicate", b)
    due_now(store)
    crawl_once(store, config, {a: {"content_hash": "2" * 32, "minhash": 0x2222222222222222}, b: {"content_hash": "3" * 32, "minhash": 0x4444444444444444}})
    db = rows(store)
    assert (db[a]["status"], db[a]["duplicate_of"]) == ("duplicate", c)
    assert (db[x]["status"], db[x]["duplicate_of"]) == ("duplicate", c)
    assert (db[y]["status"], db[y]["duplicate_of"]) == ("duplicate", b)  # B is still kept
