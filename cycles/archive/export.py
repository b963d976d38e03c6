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

from cycles import schema
from cycles import segment as seg
from cycles.archive.ccindex import detect_language, index_rows, index_table
from cycles.archive.cdxj import write_cdxj
from cycles.archive.records import read_records
from cycles.archive.wet import wet_name, write_wet
from cycles.config import Config
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
        records = {path.name: read_records(local[path.name], path.name) for path in warc_paths}
        result.records = sum(len(r) for r in records.values())
        pages = _pages(store, seg_dir)
        if "cdxj" in parts:
            target = out_dir / f"{prefix}-{segment}.cdxj"
            staged = store.staging_file(target)
            result.cdxj_lines = write_cdxj([local[name] for name in sorted(local)], staged)
            store.put_file(staged, target)
            result.files["cdxj"] = [store.uri_of(target)]
        if "index" in parts:
            target = out_dir / f"{prefix}-{segment}.cc-index.parquet"
            rows = [row for name in sorted(records) for row in index_rows(
                records[name], f"{seg.SEGMENTS}/{segment}/{seg.WARC}", segment, crawl or prefix, pages)]
            store.write_table(target, index_table(rows), schema.CC_INDEX)
            result.index_rows = len(rows)
            result.files["index"] = [store.uri_of(target)]
        if "wet" in parts:
            result.files["wet"] = []
            for name in sorted(records):
                target = out_dir / "wet" / wet_name(name)
                staged = store.staging_file(target)
                result.wet_records += write_wet(records[name], pages, staged, f"crawl/{crawler_version()} (cycles)")
                store.put_file(staged, target)
                result.files["wet"].append(store.uri_of(target))
    return result


def _pages(store: Store, seg_dir) -> dict[tuple[str, int], dict]:
    """Fetched rows with a WARC record, by (WARC file name, offset), with the detected
    language of each page with text."""
    files = seg.output_files(store, seg_dir, seg.FETCHED)
    if not files:
        return {}
    table = store.read_tables(files, schema.FETCHED,
                              columns=["url", "outcome", "title", "text", "warc_file", "warc_offset"])
    pages = {}
    for row in table.to_pylist():
        if row["warc_file"] is None:
            continue
        if row["outcome"] == "ok":
            row["language"] = detect_language(row["text"])
        pages[(row["warc_file"].rsplit("/", 1)[-1], row["warc_offset"])] = row
    return pages


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
