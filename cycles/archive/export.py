"""``crawl export SEGMENT``: the CDXJ index, the cc-index URL index and WET text of a segment.

Reads the segment's WARC files (written by fetch, cycles/fetch/archive.py) and fetched rows
(the pages' text), and writes the export stage's own folder ``segments/<id>/archive/``::

    <prefix>-<segment>.cdxj                 CDXJ, SURT-sorted (cycles/archive/cdxj.py)
    <prefix>-<segment>.cc-index.parquet     URL index, cc-index columns (cycles/archive/ccindex.py)
    wet/<warc name>.wet.gz                  text with language (cycles/archive/wet.py)

Each file is written under a temporary name and put in place whole, so running it again
(after a crash, or to refresh) replaces them. WARC files are read from a local copy when the
store is S3.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from cycles import schema
from cycles import segment as seg
from cycles.archive.ccindex import detect_language, index_rows, index_table
from cycles.archive.cdxj import write_cdxj
from cycles.archive.records import read_records
from cycles.archive.wet import wet_name, write_wet
from cycles.config import Config
from cycles.crawldb import connect
from cycles.errors import StageError
from cycles.fetch.archive import crawler_version
from cycles.store import Store

PARTS = ("cdxj", "index", "wet")
"""What ``crawl export`` can write (``--only``)."""


@dataclass
class ExportResult:
    segment: str
    files: dict[str, list[str]] = field(default_factory=dict)
    """Part -> files written (their URIs)."""
    records: int = 0
    """WARC records read."""
    index_rows: int = 0
    cdxj_lines: int = 0
    wet_records: int = 0


def export_segment(store: Store, segment: str, config: Config, parts: tuple[str, ...] = PARTS,
                   crawl: str | None = None) -> ExportResult:
    """Write the archive files of a fetched segment (see the module doc)."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise StageError(f"export: unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    seg_dir = store.segment_dir(segment)
    if store.segment_state(segment) not in (seg.State.FETCHED.value, seg.State.UPDATED.value):
        raise StageError(f"export: segment {segment} is {store.segment_state(segment)}, not fetched; "
                         f"run `crawl fetch {segment}` first")
    warc_paths = store.list(seg_dir / seg.WARC, "*.warc.gz")
    if not warc_paths:
        raise StageError(f"export: segment {segment} has no WARC file in {store.uri_of(seg_dir / seg.WARC)}; "
                         "nothing to index")
    prefix = config.warc.file_prefix
    out_dir = seg_dir / seg.ARCHIVE
    result = ExportResult(segment)
    with _local_copies(store, warc_paths) as local:
        if "cdxj" in parts:  # cdxj-indexer sorts out of core (32 MB runs merged from temp files)
            target = out_dir / f"{prefix}-{segment}.cdxj"
            staged = store.staging_file(target)
            result.cdxj_lines = write_cdxj([local[name] for name in sorted(local)], staged)
            store.put_file(staged, target)
            result.files["cdxj"] = [store.uri_of(target)]
        if "wet" in parts:
            result.files["wet"] = []
        batches = _index_and_wet(store, config, segment, local, parts, crawl or prefix, result)
        if "index" in parts:
            target = out_dir / f"{prefix}-{segment}.cc-index.parquet"
            store.write_batches(target, batches, schema.CC_INDEX)
            result.files["index"] = [store.uri_of(target)]
        else:
            for _ in batches:
                pass
    return result


def _index_and_wet(store: Store, config: Config, segment: str, local: dict[str, Path],
                   parts: tuple[str, ...], crawl: str, result: ExportResult) -> Iterator[pa.RecordBatch]:
    """One WARC file at a time: read its records and its pages' text, write its WET file,
    yield its cc-index rows. Only one file's pages are in memory at once (the whole
    segment's text held tens of gigabytes at the target's segment sizes)."""
    seg_dir = store.segment_dir(segment)
    out_dir = seg_dir / seg.ARCHIVE
    for name, pages in _pages_by_file(store, config, seg_dir, sorted(local)):
        records = read_records(local[name], name)
        result.records += len(records)
        if "wet" in parts:
            target = out_dir / "wet" / wet_name(name)
            staged = store.staging_file(target)
            result.wet_records += write_wet(records, pages, staged, f"crawl/{crawler_version()} (cycles)")
            store.put_file(staged, target)
            result.files["wet"].append(store.uri_of(target))
        if "index" in parts:
            rows = index_rows(records, f"{seg.SEGMENTS}/{segment}/{seg.WARC}", segment, crawl, pages)
            result.index_rows += len(rows)
            if rows:
                yield from index_table(rows).cast(schema.CC_INDEX).to_batches()


PAGE_COLUMNS = ["url", "outcome", "title", "text", "warc_file", "warc_offset"]
"""The fetched columns the exports read (the text for WET, the outcome for both)."""


def _pages_by_file(store: Store, config: Config, seg_dir, names: list[str]
                   ) -> Iterator[tuple[str, dict[tuple[str, int], dict]]]:
    """(WARC file name, its fetched rows by (name, offset)) for each of ``names`` (sorted),
    each page with its detected language; a file with no fetched row (robots.txt only)
    gets none.

    DuckDB sorts the fetched rows by WARC file name (spilling to disk past its memory limit;
    byte order, which is Python's order of the names) and hands them over in batches, so
    memory holds one file's pages and one batch.
    """
    groups = _fetched_groups(store, config, seg_dir)
    group = next(groups, None)
    for name in names:
        while group is not None and group[0] < name:  # rows naming a WARC file not there
            group = next(groups, None)
        if group is not None and group[0] == name:
            yield group
            group = next(groups, None)
        else:
            yield name, {}


def _fetched_groups(store: Store, config: Config, seg_dir) -> Iterator[tuple[str, dict[tuple[str, int], dict]]]:
    """The segment's fetched rows with a WARC record, grouped by WARC file name, in name order."""
    files = seg.output_files(store, seg_dir, seg.FETCHED)
    if not files:
        return
    con = connect(store, config)
    reader = con.sql(f"""SELECT {", ".join(PAGE_COLUMNS)}, regexp_extract(warc_file, '[^/]*$') AS warc_name
        FROM {store.duckdb_source(con, files)} WHERE warc_file IS NOT NULL
        ORDER BY warc_name, warc_offset""").to_arrow_reader(4096)
    current, pages = None, {}
    for row in (row for batch in reader for row in batch.to_pylist()):
        name = row.pop("warc_name")
        if name != current:
            if current is not None:
                yield current, pages
            current, pages = name, {}
        if row["outcome"] == "ok":
            row["language"] = detect_language(row["text"])
        pages[(name, row["warc_offset"])] = row
    if current is not None:
        yield current, pages
    con.close()


@contextlib.contextmanager
def _local_copies(store: Store, paths: list) -> Iterator[dict[str, Path]]:
    """Local paths of the WARC files: the files themselves, or copies of S3 objects."""
    if store.local:
        yield {p.name: Path(p) for p in paths}
        return
    folder = Path(tempfile.mkdtemp(prefix="crawl-export-", dir=store.scratch_dir()))
    try:
        copies = {}
        for path in paths:
            copies[path.name] = folder / path.name
            copies[path.name].write_bytes(store.read_bytes(path))
        yield copies
    finally:
        shutil.rmtree(folder, ignore_errors=True)
