"""generate reads what can be due (issue 24): on a compacted base (sorted by ``next_fetch``)
it skips the row groups holding nothing due, checks the page checksums of what it reads, and
refuses a damaged page there with one line naming the file."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow.parquet as pq
import pytest

from cycles.commands.compact import compact
from cycles.commands.inject import inject
from cycles.config import Config
from cycles.errors import StoreError
from cycles.generate.generate import generate
from cycles.storage.store import utcnow
from cycles.tables import segment as seg
from cycles.tables.crawldb import current_buckets, due_row_groups, replace_crawldb
from tests.conftest import write_seeds
from tests.support.corruption import flip_a_bit_in_a_data_page

HOSTS, PER_HOST = 100, 40


@pytest.fixture
def config() -> Config:
    config = Config()
    config.db.buckets = 1
    config.db.compact_row_group_rows = 1024  # the smallest: 4 row groups of 4,000 rows
    config.generate.max_urls_per_host = PER_HOST
    config.generate.max_urls_per_pattern = PER_HOST
    config.generate.ranking = "depth"
    config.fetch.follow_outlinks_depth = 0
    return config


def compacted(store, config, tmp_path) -> tuple[set[str], object]:
    """A crawl DB of 4,000 URLs, the odd ones due in 30 days, compacted: the due half in the
    first row groups. Returns the due URLs and the base."""
    urls = [f"http://h{h}.example/p{p}" for h in range(HOSTS) for p in range(PER_HOST)]
    inject(store, config, write_seeds(tmp_path / "seeds.txt", urls))
    with store.lock():
        replace_crawldb(store, config, lambda con, old, b: f"""SELECT * REPLACE (CASE
            WHEN regexp_extract(url, '[0-9]+$')::INTEGER % 2 = 1 THEN next_fetch + INTERVAL 30 DAY
            ELSE next_fetch END AS next_fetch) FROM {old}""", who="test")
    compact(store, config, everything=True, links=False)
    _, buckets = current_buckets(store)
    return {u for u in urls if int(u.rsplit("p", 1)[1]) % 2 == 0}, buckets[0].base


def listed(store, segment) -> set[str]:
    return {r["url"] for r in pq.read_table(store.segment_dir(segment) / "fetchlist").to_pylist()}


def generate_stats(store, segment) -> dict:
    return json.loads(seg.stats_file(store.segment_dir(segment), "generate").read_text())


def test_row_groups_with_nothing_due_are_skipped(store, config, tmp_path):
    due, base = compacted(store, config, tmp_path)
    now = utcnow() + dt.timedelta(seconds=1)
    groups, total = due_row_groups(store, base, now)
    assert total == 4 and groups == [0, 1]  # sorted by next_fetch: the due half first
    result = generate(store, config, now=now, top_n=10_000)
    assert listed(store, result.segment) == due
    stats = generate_stats(store, result.segment)
    assert stats["generate/row_groups_read"] == 2 and stats["generate/row_groups_skipped"] == 2
    # Positive control: once everything is due, every row group is read.
    later = generate(store, config, now=now + dt.timedelta(days=31), top_n=10_000)
    assert generate_stats(store, later.segment)["generate/row_groups_skipped"] == 0


def test_a_damaged_page_generate_reads_is_refused_in_one_line(store, config, tmp_path):
    _, base = compacted(store, config, tmp_path)
    flip_a_bit_in_a_data_page(base, row_group=0)
    with pytest.raises(StoreError) as failure:
        generate(store, config, now=utcnow() + dt.timedelta(seconds=1), top_n=10_000)
    message = str(failure.value)
    assert str(base) in message and "corrupt" in message and "crawl recover --previous" in message
    assert "\n" not in message


def test_a_damaged_page_of_a_row_group_not_due_is_not_read(store, config, tmp_path):
    """What generate skips it does not check: the stages that read the base whole (update's
    dedup scan, compact, recover) do, as the positive control shows."""
    due, base = compacted(store, config, tmp_path)
    flip_a_bit_in_a_data_page(base, row_group=3)
    result = generate(store, config, now=utcnow() + dt.timedelta(seconds=1), top_n=10_000)
    assert listed(store, result.segment) == due
    with pytest.raises(StoreError, match="corrupt"):
        store.verify_parquet([base])
