"""Which WARC records each exchange of the fetch worker gets (``warc.archive``).

With ``warc.archive = "all"`` (the default) every request that got an answer is archived,
so the WARC files can replay and audit the crawl (ISO 28500:2017, WARC/1.1):

============================  ==================================================================
exchange                      records (each followed by its ``request`` and a ``metadata``)
============================  ==================================================================
2xx page, robots.txt          ``response``, the body as received (content-coded)
2xx identical to an earlier   ``revisit``, profile identical-payload-digest, ``WARC-Refers-To``
  one of this worker          the original's record (``warc.dedup_revisits``)
304                           ``revisit``, profile server-not-modified, an empty HTTP block;
                              the 304's status and headers are in the metadata record
3xx, 4xx, 5xx                 ``response``, body cut at ``warc.max_error_body_bytes``
not HTML, too large           ``response`` with what was read (often headers only) and
                              ``WARC-Truncated`` (``length``; ``unspecified`` for not-HTML)
cut by a network error        ``response`` with ``WARC-Truncated: time`` / ``disconnect``
no answer (network error)     ``metadata`` only
failed TLS handshake          ``metadata`` only, with ``tls-verify: failed``, ``tls-failure``
                              (the reason) and ``tls-error`` (libcurl's): cycles/fetch/tls.py
fetched unverified            as above, and the metadata record (written even with
  (fetch.tls_archive_anyway)  ``warc.archive = "html"``) says ``tls-verify: failed``, the
                              reason and ``tls-verification: skipped``
============================  ==================================================================

The ``metadata`` record (``application/warc-fields``, ``warc.metadata_records``) names the
fetch outcome, the error and the transfer time; it is ``WARC-Concurrent-To`` the response.
A fetched row's ``warc_offset`` points at its response or revisit record (its metadata
record when there was no answer). ``warc.archive = "html"`` keeps only 2xx HTML pages.

Why a 304's revisit has no HTTP headers (WARC 1.1 §6.7.2 makes them optional): pywb replays a
revisit with the revisit's own status and headers over the original's payload, so a 304 status
line replayed as an empty 304 (and any 3xx is not even looked up). With an empty block pywb
takes the earlier capture's headers and body (found by ``WARC-Refers-To-Target-URI`` and the
date), which is what the server said: not modified. No ``WARC-Payload-Digest`` either: the
digest of nothing tells pywb the payload is empty.

Cost on the fetch hot path: the payload's SHA-1 is computed once (it is the dedup key too),
and the metadata record is formatted as bytes, without warcio's header machinery.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from cycles.config import Config, WarcConfig
from cycles.fetch.output import (PartitionOutput, _http_record, _make_warc_id, payload_label, request_head,
                                 response_head, sha1_label)
from cycles.fetch.tls import metadata_fields
from cycles.tables.warcs import crawler_version
from cycles.fetch.transfer import ABORT_NOT_HTML, ABORT_TOO_LARGE, ABORT_TRUNCATED, Transfer

PROFILE_IDENTICAL = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
PROFILE_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
CURLE_OPERATION_TIMEDOUT = 28


def config_digest(config: Config) -> str:
    """SHA-1 of the config as canonical JSON: two files with the same digest were written
    under the same settings."""
    text = json.dumps(config.to_dict(), sort_keys=True, default=str, separators=(",", ":"))
    return sha1_label(hashlib.sha1(text.encode()).digest())


def warcinfo_fields(config: Config) -> dict:
    """What each WARC file's warcinfo record says of the crawl that wrote it."""
    fc = config.fetch
    return {"software": f"crawl/{crawler_version()} (cycles)",
            "robots": f"obey (RFC 9309, product token {fc.robots_agent}; unreachable robots.txt: "
                      "disallow all for now)",
            "crawl-config-digest": config_digest(config), "warc-archive": config.warc.archive}


@dataclass(frozen=True)
class Original:
    """An archived 2xx payload that a later identical one refers to."""

    record_id: str
    url: str
    date: str


def _record(headers: list[tuple[str, str]], block: bytes) -> tuple[bytes, ...]:
    """A WARC/1.1 record of a small block, formatted directly (no warcio header machinery):
    the headers given, then the block digest and length."""
    head = "".join(f"{name}: {value}\r\n" for name, value in headers)
    head = (f"WARC/1.1\r\n{head}WARC-Block-Digest: {sha1_label(hashlib.sha1(block).digest())}\r\n"
            f"Content-Length: {len(block)}\r\n\r\n")
    return head.encode("utf-8"), block, b"\r\n\r\n"


class Archive:
    """Writes the records of one partition's exchanges into its :class:`PartitionOutput`."""

    def __init__(self, output: PartitionOutput, wc: WarcConfig):
        self.output = output
        self.wc = wc
        self.all = wc.archive == "all"
        self.originals: dict[str, Original] = {}
        """Payload digest -> the first record of this worker with that payload (dedup)."""
        self.record_bytes: dict[str, int] = {}
        """Compressed bytes written per record type, for stats (``warc/bytes/<type>``)."""

    # --- entry points -------------------------------------------------------------------
    def page(self, transfer: Transfer, ip: str | None, request_line: str, request_headers: list[tuple[str, str]],
             date: str, outcome: str, error: str | None) -> dict:
        """Archive a page's exchange; returns the row's WARC location (empty if none)."""
        status = transfer.status_code()
        if not self.all:
            # The archive of old: a 2xx HTML page (parsed or not), nothing else.
            if status is None or not 200 <= status < 300 or transfer.abort is not None \
                    or outcome not in ("ok", "parse_error"):
                return {}
        return self._exchange(transfer, ip, request_line, request_headers, date, outcome, error, status)

    def robots(self, transfer: Transfer, ip: str | None, request_line: str,
               request_headers: list[tuple[str, str]], date: str, error: str | None) -> None:
        """Archive a robots.txt exchange (``warc.archive = "all"`` only)."""
        if self.all:
            self._exchange(transfer, ip, request_line, request_headers, date, "robots", error,
                           transfer.status_code())

    def sitemap(self, transfer: Transfer, ip: str | None, request_line: str,
                request_headers: list[tuple[str, str]], date: str, error: str | None) -> None:
        """Archive a sitemap exchange: a 2xx always (it is content, as a page is), anything
        else with ``warc.archive = "all"``."""
        status = transfer.status_code()
        if self.all or (status is not None and 200 <= status < 300):
            self._exchange(transfer, ip, request_line, request_headers, date, "sitemap", error, status)

    # --- records ----------------------------------------------------------------------
    def _exchange(self, transfer: Transfer, ip: str | None, request_line: str,
                  request_headers: list[tuple[str, str]], date: str, outcome: str, error: str | None,
                  status: int | None) -> dict:
        url = transfer.request.url
        common = [("WARC-Date", date)]
        if ip:
            common.append(("WARC-IP-Address", ip))
        if status is None:  # no HTTP answer at all: only the metadata record says what happened
            if not self.wc.metadata_records:
                return {}
            ((offset, length),) = self._write(("metadata", self._metadata(url, date, None, outcome, error,
                                                                           status, transfer)))
            return self._location(offset, length)
        record_type, record_id, record = self._answer_record(transfer, url, common, status, date)
        request = _http_record("request", _make_warc_id(), url, common + [("WARC-Concurrent-To", record_id)],
                               request_head(request_line, request_headers), b"")
        records = [(record_type, record), ("request", request)]
        if self.wc.metadata_records and (self.all or transfer.tls_unverified is not None):
            records.append(("metadata", self._metadata(url, date, record_id, outcome, error, status, transfer)))
        (offset, length), *_ = self._write(*records)
        return self._location(offset, length)

    def _answer_record(self, transfer: Transfer, url: str, common: list[tuple[str, str]], status: int,
                       date: str) -> tuple[str, str, tuple[bytes, ...]]:
        """The response or revisit record of an answer: (type, record id, parts)."""
        record_id = _make_warc_id()
        if status == 304:
            return "revisit", record_id, _record([
                ("WARC-Type", "revisit"), ("WARC-Record-ID", record_id), ("WARC-Target-URI", url), *common,
                ("WARC-Profile", PROFILE_NOT_MODIFIED), ("WARC-Refers-To-Target-URI", url),
                ("Content-Type", "application/http; msgtype=response")], b"\r\n")
        headers = response_head(transfer.status_line.decode("latin-1"), transfer.headers_list())
        payload, truncated = self._payload(transfer, status)
        digest = payload_label(payload)
        extra = [("WARC-Truncated", truncated)] if truncated else []
        # Pages only: robots.txt files are small, and each host's stays whole for audits.
        if 200 <= status < 300 and not truncated and payload and self.all and self.wc.dedup_revisits \
                and transfer.request.kind == "page":
            original = self.originals.get(digest)
            if original is not None:
                extra = [("WARC-Profile", PROFILE_IDENTICAL), ("WARC-Refers-To", original.record_id),
                         ("WARC-Refers-To-Target-URI", original.url), ("WARC-Refers-To-Date", original.date)]
                return "revisit", record_id, _http_record("revisit", record_id, url, common + extra, headers,
                                                          b"", payload_digest=digest)
            self.originals[digest] = Original(record_id, url, date)
        return "response", record_id, _http_record("response", record_id, url, common + extra, headers, payload,
                                                   payload_digest=digest)

    def _payload(self, transfer: Transfer, status: int) -> tuple[bytes, str | None]:
        """The payload to store and the WARC-Truncated reason, if it is not the whole body."""
        body = transfer.body()
        if transfer.abort == ABORT_NOT_HTML:
            return body, "unspecified"  # we chose not to read it: not HTML
        if transfer.abort in (ABORT_TOO_LARGE, ABORT_TRUNCATED):
            return body, "length"
        if transfer.error is not None:
            return body, "time" if transfer.error == CURLE_OPERATION_TIMEDOUT else "disconnect"
        if not 200 <= status < 300 and len(body) > self.wc.max_error_body_bytes:
            return body[: self.wc.max_error_body_bytes], "length"
        return body, None

    def _metadata(self, url: str, date: str, concurrent_to: str | None, outcome: str, error: str | None,
                  status: int | None, transfer: Transfer) -> tuple[bytes, ...]:
        """A metadata record (application/warc-fields) of the fetch's outcome and timing,
        formatted in one go: it is written for every request (~2 µs of Python, not ~10)."""
        fields = f"outcome: {outcome}\r\nfetchTimeMs: {int(transfer.duration_s * 1000)}\r\n"
        if status is not None:
            fields += f"http-status: {status}\r\n"
            if status == 304:  # the revisit record has no HTTP block (module doc): its headers go here
                fields += "".join(f"http-response-header: {name}: {value}\r\n"
                                  for name, value in transfer.headers_list())
        if error:
            fields += "error: " + error.replace("\r", " ").replace("\n", " ") + "\r\n"
        if transfer.tls_failure is not None:
            fields += metadata_fields("failed", *transfer.tls_failure, skipped=False)
        elif transfer.tls_unverified is not None:
            fields += metadata_fields("failed", *transfer.tls_unverified, skipped=True)
        block = fields.encode("utf-8")
        concurrent = f"WARC-Concurrent-To: {concurrent_to}\r\n" if concurrent_to else ""
        head = (f"WARC/1.1\r\nWARC-Type: metadata\r\nWARC-Record-ID: {_make_warc_id()}\r\n"
                f"WARC-Target-URI: {url}\r\nWARC-Date: {date}\r\n{concurrent}"
                f"Content-Type: application/warc-fields\r\n"
                f"WARC-Block-Digest: {sha1_label(hashlib.sha1(block).digest())}\r\n"
                f"Content-Length: {len(block)}\r\n\r\n")
        return head.encode("utf-8"), block, b"\r\n\r\n"

    def _write(self, *records: tuple[str, tuple[bytes, ...]]) -> list[tuple[int, int]]:
        written = self.output.write_records(*(parts for _, parts in records))
        for (record_type, _), (_, length) in zip(records, written):
            self.record_bytes[record_type] = self.record_bytes.get(record_type, 0) + length
        return written

    def _location(self, offset: int, length: int) -> dict:
        return dict(warc_file=self.output.warc_path(), warc_offset=offset, warc_length=length)
