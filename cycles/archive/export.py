"""``crawl export [SEGMENT]``: the CDXJ index, the cc-index URL index and WET text of segments.

Reads the segment's WARC files (written by fetch, cycles/fetch/warc_records.py) and fetched rows
(the pages' text), and writes the export stage's own folder ``segments/<id>/archive/``::

    <prefix>-<segment>.cdxj                 CDXJ, SURT-sorted (cycles/archive/cdxj.py)
    <prefix>-<segment>.cc-index.parquet     URL index, cc-index columns (cycles/archive/ccindex.py)
    wet/<warc name>.wet.gz                  text with language (cycles/archive/wet.py)
    _EXPORTED                               the record of the export (:class:`Exported`), written last

Each file is written under a temporary name and put in place whole, so running it again
(after a crash, or to refresh) replaces them. WARC files are read from a local copy when the
store is S3.

What is exported: the *committed chunks* of the segment's fetch. A chunk is committed once its
``fetched/<chunk>.parquet`` exists (cycles/fetch/output.py writes it last, after the chunk's
WARC), so a fetch stopped by ``crawl run --seconds``, a signal or a crash leaves a segment in
state ``fetching`` whose committed chunks are complete archive material. They are exported as
they are and the export is marked **partial** (``_EXPORTED``: ``partial: true``, the chunks it
covered). The stop itself does not mark the segment: the next ``crawl run`` or ``crawl fetch``
resumes that fetch, and a segment marked finished would never be resumed. A WARC file whose
chunk has no fetched file (a commit cut by ``kill -9``; the resumed fetch deletes it) is left
out.

Without a segment (:func:`export_pending`), every segment not yet exported is exported, oldest
first: one with no ``_EXPORTED``, or whose committed chunks changed since (a partial export
whose fetch went on), or that lacks a part asked for. So it is idempotent (a second run does
nothing) and resumable (``_EXPORTED`` is written after the files: a run cut in the middle of a
segment does that segment again).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.archive.ccindex import detect_language, index_rows, index_table
from cycles.archive.cdxj import write_cdxj
from cycles.archive.records import read_records
from cycles.archive.wet import wet_name, write_wet
from cycles.config import Config
from cycles.tables.crawldb import connect
from cycles.errors import StageError
from cycles.tables.warcs import chunk_of_warc, crawler_version
from cycles.storage.store import Store, StorePath

PARTS = ("cdxj", "index", "wet")
"""What ``crawl export`` can write (``--only``)."""

EXPORTED = "_EXPORTED"
"""The export record in ``segments/<id>/archive/`` (:class:`Exported`)."""

COMPLETE_STATES = (seg.State.FETCHED, seg.State.UPDATED)
"""States whose fetch finished: an export of them is not partial."""

EXPORTABLE_STATES = (seg.State.FETCHING, *COMPLETE_STATES, seg.State.ABANDONED)
"""States that may hold committed chunks. An abandoned segment is never applied to the crawl
DB, but what its fetch committed was fetched as recorded: it is archived like the rest."""


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
    partial: bool = False
    """The segment's fetch had not finished (stopped, or abandoned): only its committed chunks."""
    chunks: int = 0
    """Committed chunks exported."""
    state: str = ""


@dataclass
class Exported:
    """``segments/<id>/archive/_EXPORTED``: what the last export of the segment covered."""

    segment: str
    exported_at: str
    state: str
    """The segment's state when it was exported."""
    partial: bool
    chunks: list[str]
    """The committed chunks (``part-NNNNN-cNNNNNN``) whose WARC files were exported."""
    parts: list[str]
    files: dict[str, list[str]]
    records: int = 0


@dataclass
class ExportAll:
    """What :func:`export_pending` did."""

    exported: list[ExportResult] = field(default_factory=list)
    current: list[str] = field(default_factory=list)
    """Segments whose export is up to date (nothing done)."""
    not_fetched: list[str] = field(default_factory=list)
    """Segments with no committed chunk yet (generated, or incomplete)."""


def committed_chunks(store: Store, seg_dir: StorePath) -> list[str]:
    """The chunks a fetch committed: those the fetched marker lists, or, before the fetch
    finished, every chunk whose ``fetched/<chunk>.parquet`` exists (its commit record)."""
    return sorted(p.name[: -len(".parquet")] for p in seg.output_files(store, seg_dir, seg.FETCHED))


def committed_warcs(store: Store, seg_dir: StorePath, chunks: list[str]) -> list[StorePath]:
    """The WARC files of ``chunks``: a WARC whose chunk was not committed is left out."""
    wanted = set(chunks)
    return [p for p in store.list(seg_dir / seg.WARC, "*.warc.gz") if chunk_of_warc(p.name) in wanted]


def read_exported(store: Store, segment: str) -> Exported | None:
    path = store.segment_dir(segment) / seg.ARCHIVE / EXPORTED
    if not store.exists(path):
        return None
    try:
        data = store.read_json(path)
        return Exported(**{k: data[k] for k in Exported.__dataclass_fields__ if k in data})
    except (ValueError, TypeError):
        return None  # a damaged record: exporting again replaces it


def export_segment(store: Store, segment: str, config: Config, parts: tuple[str, ...] = PARTS,
                   crawl: str | None = None) -> ExportResult:
    """Write the archive files of a segment's committed chunks (see the module doc)."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise StageError(f"export: unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    seg_dir = store.segment_dir(segment)
    current = seg.state(store, segment)
    if current not in EXPORTABLE_STATES:
        raise StageError(f"export: segment {segment} is {current}, nothing of it is fetched yet; "
                         f"run `crawl fetch {segment}` first")
    chunks = committed_chunks(store, seg_dir)
    warc_paths = committed_warcs(store, seg_dir, chunks)
    if not warc_paths:
        raise StageError(f"export: segment {segment} ({current}) has no committed WARC file in "
                         f"{store.uri_of(seg_dir / seg.WARC)}; nothing to index")
    prefix = config.warc.file_prefix
    out_dir = seg_dir / seg.ARCHIVE
    # Partial: the fetch never finished (no fetched marker; an abandoned segment may have one).
    finished = current in COMPLETE_STATES or store.exists(seg_dir / seg.Fetched.FILE)
    result = ExportResult(segment, partial=not finished, chunks=len(chunks), state=current.value)
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
    # Last: the record that the files are there (a crash before it: the next run does it again).
    # Parts exported earlier from the same chunks stay current (--only cdxj, then --only wet).
    before = read_exported(store, segment)
    kept = before.files if before is not None and before.chunks == chunks else {}
    store.write_json(out_dir / EXPORTED, asdict(Exported(
        segment, dt.datetime.now(dt.timezone.utc).isoformat(), current.value, result.partial, chunks,
        sorted(set(parts) | set(kept)), {**kept, **result.files}, result.records)))
    return result


def needs_export(store: Store, segment: str, parts: tuple[str, ...]) -> bool | None:
    """True when the segment's export is missing or out of date, False when it is current,
    None when the segment has nothing committed to export."""
    if seg.state(store, segment) not in EXPORTABLE_STATES:
        return None
    done = read_exported(store, segment)
    if done is not None and not done.partial and set(parts) <= set(done.parts):
        # A finished fetch's chunks are final (its fetched marker lists them): no listing of
        # its folders, which on S3 is a few requests a segment, every run, for every segment.
        return False
    seg_dir = store.segment_dir(segment)
    chunks = committed_chunks(store, seg_dir)
    if not committed_warcs(store, seg_dir, chunks):
        return None
    return done is None or done.chunks != chunks or not set(parts) <= set(done.parts)


def export_pending(store: Store, config: Config, parts: tuple[str, ...] = PARTS, crawl: str | None = None,
                   on_segment=None) -> ExportAll:
    """Export every segment not yet exported (or whose committed chunks changed since), oldest
    first; ``on_segment(result)`` is called after each one (the CLI prints it)."""
    done = ExportAll()
    for segment in seg.segment_ids(store):
        wanted = needs_export(store, segment, parts)
        if wanted is None:
            done.not_fetched.append(segment)
        elif not wanted:
            done.current.append(segment)
        else:
            result = export_segment(store, segment, config, parts, crawl)
            done.exported.append(result)
            if on_segment is not None:
                on_segment(result)
    return done


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
