"""WET files: each fetched page's text as a ``conversion`` record, Common Crawl's WET format.

One WET file per WARC file (``<warc name>.wet.gz`` with ``.warc.gz`` kept in front, as
``CC-MAIN-...warc.wet.gz``): a warcinfo record, then per page with text (outcome ``ok``) a
``conversion`` record of ``text/plain`` — the title, a blank line, the visible text — that
``WARC-Refers-To`` the response record it was made from and carries
``WARC-Identified-Content-Language`` (ISO 639-3, ``detect_language`` in cycles/archive/ccindex.py).
"""

from __future__ import annotations

import io
from pathlib import Path

from warcio.warcwriter import WARCWriter

from cycles.archive.records import Record


def wet_name(warc_name: str) -> str:
    return warc_name[: -len(".gz")] + ".wet.gz" if warc_name.endswith(".warc.gz") else warc_name + ".wet.gz"


def write_wet(records: list[Record], pages: dict[tuple[str, int], dict], out: Path, software: str) -> int:
    """Write the WET file of one WARC file's records; returns the number of conversion records."""
    written = 0
    with open(out, "wb") as fh:
        writer = WARCWriter(fh, gzip=True, warc_version="1.1")
        writer.write_record(writer.create_warcinfo_record(out.name, {
            "software": software, "description": "Text of the pages of " + (records[0].file if records else "")}))
        for record in records:
            page = pages.get((record.file, record.offset))
            if record.type != "response" or not page or page.get("outcome") != "ok" or not page.get("text"):
                continue
            text = ((page.get("title") or "") + "\n\n" + page["text"]).encode("utf-8")
            headers = {"WARC-Refers-To": record.record_id, "WARC-Date": record.date,
                       "Content-Type": "text/plain"}
            language = page.get("language")
            if language:
                headers["WARC-Identified-Content-Language"] = language
            writer.write_record(writer.create_warc_record(record.url, "conversion", payload=io.BytesIO(text),
                                                          length=len(text), warc_headers_dict=headers))
            written += 1
    return written
