"""``crawl export`` reads a segment's pages one WARC file at a time (cycles/archive/export.py).

Holding every page's text at once cost tens of gigabytes on a segment of the target's
size; these tests pin the grouping the streaming relies on, on hand-made fetched chunks
(no web, no WARC reading).
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.archive.export import _pages_by_file
from cycles.config import Config
from cycles.storage.store import Store


def fetched_chunk(rows: list[tuple[str | None, int, str]]) -> pa.Table:
    """FETCHED rows (warc file, offset, outcome), every other column empty or a constant."""
    n = len(rows)
    columns = {f.name: pa.nulls(n, f.type) for f in schema.FETCHED}
    columns.update(url=pa.array([f"http://h/{i}" for i in range(n)]),
                   host=pa.array(["h"] * n),
                   outcome=pa.array([o for _, _, o in rows]),
                   fetched_at=pa.array([dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)] * n),
                   text=pa.array([f"0000 {i}" for i in range(n)]),  # no letters: no language model to load
                   warc_file=pa.array([w for w, _, _ in rows]),
                   warc_offset=pa.array([o for _, o, _ in rows], pa.int64()))
    return pa.table(columns).cast(schema.FETCHED)


def test_pages_come_grouped_by_warc_file_in_name_order_with_empty_groups_for_files_without_rows(tmp_path):
    store = Store(tmp_path / "data")
    seg_dir = seg.segments_root(store) / "20260101000000-aaaa"
    # Two chunks, each with rows of several files, out of order; a row without a record.
    store.write_table(seg_dir / seg.FETCHED / "part-00000-c000000.parquet", fetched_chunk(
        [("warc/b.warc.gz", 900, "ok"), ("warc/a.warc.gz", 10, "ok"), (None, 0, "network_error")]),
        schema.FETCHED)
    store.write_table(seg_dir / seg.FETCHED / "part-00001-c000000.parquet", fetched_chunk(
        [("warc/a.warc.gz", 500, "not_modified"), ("warc/b.warc.gz", 20, "ok"), ("warc/gone.warc.gz", 1, "ok")]),
        schema.FETCHED)
    names = ["a.warc.gz", "b.warc.gz", "c-robots-only.warc.gz"]
    groups = list(_pages_by_file(store, Config(), seg_dir, names))
    assert [name for name, _ in groups] == names
    pages = dict(groups)
    assert sorted(pages["a.warc.gz"]) == [("a.warc.gz", 10), ("a.warc.gz", 500)]
    assert sorted(pages["b.warc.gz"]) == [("b.warc.gz", 20), ("b.warc.gz", 900)]
    assert pages["c-robots-only.warc.gz"] == {}
    # Language is detected for pages with an ok outcome only; the text travels with the page.
    assert "language" in pages["a.warc.gz"][("a.warc.gz", 10)]
    assert "language" not in pages["a.warc.gz"][("a.warc.gz", 500)]
    assert pages["b.warc.gz"][("b.warc.gz", 900)]["text"].startswith("0000")


def test_pages_are_read_lazily_one_file_at_a_time(tmp_path):
    store = Store(tmp_path / "data")
    seg_dir = seg.segments_root(store) / "20260101000000-bbbb"
    store.write_table(seg_dir / seg.FETCHED / "part-00000-c000000.parquet", fetched_chunk(
        [(f"warc/f{i:03d}.warc.gz", j, "ok") for i in range(50) for j in range(3)]), schema.FETCHED)
    names = [f"f{i:03d}.warc.gz" for i in range(50)]
    stream = _pages_by_file(store, Config(), seg_dir, names)
    first = next(stream)
    assert first[0] == "f000.warc.gz" and len(first[1]) == 3  # one file's pages, not the segment's
    assert sum(len(pages) for _, pages in stream) == 49 * 3
