"""The URL index in Parquet with Common Crawl's cc-index columns (cycles/tables/schema.py ``CC_INDEX``).

One row per response or revisit record. Host parts come from the Public Suffix List as
tldextract bundles it (its snapshot, never downloaded: ``suffix_list_urls=()``, no cache
folder), URL keys from the ``surt`` library (as in the CDXJ index), languages from py3langid
(its model ships in the wheel) written as ISO 639-3 codes by langcodes, as Common Crawl does.
"""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
import uuid
from urllib.parse import urlsplit

import pyarrow as pa

from cycles.tables import schema
from cycles.archive.records import Record

LANGUAGE_CHARS = 4000
"""Characters of a page's text given to the language identifier: enough for a stable answer,
and a bounded cost on long pages."""


@functools.cache
def _extractors():
    import tldextract

    # suffix_list_urls=() and cache_dir=None: the snapshot inside the package, no network, no disk.
    icann = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None, include_psl_private_domains=False)
    private = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None, include_psl_private_domains=True)
    return icann, private


def host_columns(host: str) -> dict:
    """The url_host_* columns of a host name (IP addresses: the name only, as Common Crawl)."""
    parts = host.split(".")
    row = {"url_host_name": host}
    try:
        ipaddress.ip_address(host.strip("[]"))
        is_ip = True
    except ValueError:
        is_ip = False
    names = ("url_host_tld", "url_host_2nd_last_part", "url_host_3rd_last_part", "url_host_4th_last_part",
             "url_host_5th_last_part")
    for i, name in enumerate(names):
        row[name] = parts[-1 - i] if not is_ip and i < len(parts) else None
    row["url_host_name_reversed"] = None if is_ip else ".".join(reversed(parts))
    row.update(url_host_registry_suffix=None, url_host_registered_domain=None,
               url_host_private_suffix=None, url_host_private_domain=None)
    if not is_ip:
        icann, private = _extractors()
        for extract, suffix_col, domain_col in ((icann, "url_host_registry_suffix", "url_host_registered_domain"),
                                                (private, "url_host_private_suffix", "url_host_private_domain")):
            found = extract(host)
            if found.suffix:
                row[suffix_col] = found.suffix
                row[domain_col] = f"{found.domain}.{found.suffix}" if found.domain else None
    return row


def detect_language(text: str | None) -> str | None:
    """ISO 639-3 code of the text's language (``eng``), None for no text or no letters."""
    if not text or not any(c.isalpha() for c in text[:LANGUAGE_CHARS]):
        return None
    import langcodes
    import py3langid

    code, _ = py3langid.classify(text[:LANGUAGE_CHARS])
    return langcodes.Language.get(code).to_alpha3()


def _mime_and_charset(content_type: str | None) -> tuple[str | None, str | None]:
    if not content_type:
        return None, None
    mime, *params = [p.strip() for p in content_type.split(";")]
    charset = next((p.split("=", 1)[1].strip().strip('"') for p in params if p.lower().startswith("charset=")), None)
    return mime.lower() or None, charset


def _subset(record: Record, outcome: str | None) -> str:
    if outcome == "robots":
        return "robotstxt"
    return "warc" if record.status is not None and 200 <= record.status < 300 else "crawldiagnostics"


def index_rows(records: list[Record], warc_prefix: str, segment: str, crawl: str,
               pages: dict[tuple[str, int], dict]) -> list[dict]:
    """cc-index rows of the response and revisit records. ``pages`` gives the fetched row of
    a record by (WARC file name, offset) (outcome, and ``language`` from :func:`detect_language`);
    ``warc_prefix`` is the WARC folder relative to the store root."""
    import surt  # here: it loads tldextract's suffix list (0.22 s), wanted only when indexing

    metadata = {r.concurrent_to: r.fields for r in records if r.type == "metadata"}
    rows = []
    for record in records:
        fields = metadata.get(record.record_id, {})
        if record.status is None and fields.get("http-status", "").isdigit():
            record.status = int(fields["http-status"])  # a 304's revisit keeps its status there
        if record.type not in ("response", "revisit") or record.status is None or not record.url:
            continue
        parts = urlsplit(record.url)
        page = pages.get((record.file, record.offset)) or {}
        mime, charset = _mime_and_charset(record.content_type)
        outcome = fields.get("outcome")
        rows.append({
            "url_surtkey": surt.surt(record.url), "url": record.url, **host_columns(parts.hostname or ""),
            "url_protocol": parts.scheme, "url_port": parts.port, "url_path": parts.path or "/",
            "url_query": parts.query or None,
            "fetch_time": dt.datetime.fromisoformat(record.date.replace("Z", "+00:00")),
            "fetch_status": record.status,
            "fetch_redirect": _absolute(record.url, record.location),
            "content_digest": (record.payload_digest or "").removeprefix("sha1:") or None,
            "content_mime_type": mime,
            "content_mime_detected": "text/html" if page.get("outcome") in ("ok", "parse_error") else None,
            "content_charset": charset,
            "content_languages": page.get("language"),
            "content_truncated": record.truncated,
            "warc_record_id": uuid.UUID(record.record_id.strip("<>").removeprefix("urn:uuid:")).bytes,
            "warc_filename": f"{warc_prefix}/{record.file}", "warc_record_offset": record.offset,
            "warc_record_length": record.length, "warc_segment": segment, "crawl": crawl,
            "subset": _subset(record, outcome)})
    return rows


def _absolute(url: str, location: str | None) -> str | None:
    if not location:
        return None
    from cycles.urls import resolve_location

    return resolve_location(url, location)


def index_table(rows: list[dict]) -> pa.Table:
    rows.sort(key=lambda r: (r["url_surtkey"], r["fetch_time"]))
    return pa.Table.from_pylist(rows, schema=schema.CC_INDEX)
