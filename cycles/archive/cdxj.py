"""The segment's CDXJ index: one line per response and revisit record, SURT-sorted.

Written by cdxj-indexer (webrecorder's indexer, the one pywb's ``wb-manager`` runs), so pywb
and cdxj-indexer users read it as their own: ``<surt> <timestamp> {"url", "mime", "status",
"digest", "length", "offset", "filename"}``, ``filename`` being the WARC file's name (a pywb
collection's ``archive_paths`` points at the segment's ``warc/``). Metadata records
(application/warc-fields) and requests are not lines, as with cdxj-indexer's defaults.
"""

from __future__ import annotations

from pathlib import Path


def write_cdxj(warc_files: list[Path], out: Path) -> int:
    """Index the WARC files into ``out`` (sorted); returns the number of lines."""
    # Imported here: cdxj-indexer pulls in pyamf and pkg_resources (0.32 s), paid by every
    # process importing the export stage (each test worker collecting the archive tests),
    # where only an export with CDXJ on needs it.
    from cdxj_indexer.main import CDXJIndexer

    CDXJIndexer(output=str(out), inputs=[str(p) for p in warc_files], sort=True).process_all()
    with open(out, "rb") as fh:
        return sum(1 for _ in fh)
