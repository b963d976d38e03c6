"""One pass over a segment's WARC files: every record's type, place and the headers the
indexes need (cycles/archive/ccindex.py, cycles/archive/wet.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator


@dataclass
class Record:
    """One WARC record of a file, as the indexes need it."""

    file: str
    """Name of the WARC file (in the segment's ``warc/``)."""
    offset: int
    length: int
    type: str
    record_id: str
    url: str | None
    date: str | None
    status: int | None = None
    location: str | None = None
    content_type: str | None = None
    payload_digest: str | None = None
    truncated: str | None = None
    concurrent_to: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    """A metadata record's warc-fields (outcome, fetchTimeMs, http-status, error)."""


def read_records(path: Path, name: str) -> list[Record]:
    """Every record of one WARC file, in file order, with its gzip member's offset and length."""
    out = []
    with open(path, "rb") as fh:
        it = ArchiveIterator(fh)
        for rec in it:
            h = rec.rec_headers
            record = Record(name, 0, 0, rec.rec_type, h.get_header("WARC-Record-ID"), h.get_header("WARC-Target-URI"),
                            h.get_header("WARC-Date"), payload_digest=h.get_header("WARC-Payload-Digest"),
                            truncated=h.get_header("WARC-Truncated"),
                            concurrent_to=h.get_header("WARC-Concurrent-To"))
            if rec.http_headers is not None and rec.rec_type in ("response", "revisit"):
                code = rec.http_headers.get_statuscode()
                record.status = int(code) if code and code.isdigit() else None
                record.location = rec.http_headers.get_header("Location")
                record.content_type = rec.http_headers.get_header("Content-Type")
            if rec.rec_type == "metadata":
                text = rec.content_stream().read().decode("utf-8", "replace")
                record.fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
            it.read_to_end(rec)
            record.offset, record.length = it.get_record_offset(), it.get_record_length()
            out.append(record)
    return out
