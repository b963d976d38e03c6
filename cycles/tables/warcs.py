"""A segment's WARC files (``segments/<id>/warc/``): which chunk a file belongs to and the
software that wrote them. Fetch writes the files (cycles/fetch/output.py, archive.py), export
reads them (cycles/archive/export.py): shared by two stages, so here in the tables layer.
"""

from __future__ import annotations

import re
from importlib import metadata as _metadata

_CHUNK_IN_NAME = re.compile(r"(part-\d{5}-c\d{6})")


def crawler_version() -> str:
    try:
        return _metadata.version("crawl")
    except _metadata.PackageNotFoundError:  # a source checkout that was never installed
        return "0.1.0"


def chunk_of_warc(name: str) -> str | None:
    """The chunk (``part-NNNNN-cNNNNNN``) a WARC file belongs to (old names are the chunk itself)."""
    found = _CHUNK_IN_NAME.search(name)
    return found.group(1) if found else None
