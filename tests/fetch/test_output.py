"""The WARC records of cycles.fetch.output: what warcio's own writer would write (digests
included), one gzip member per record at the recorded offset, accepted by ``warcio check``."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import os
import subprocess
import sys

import pytest
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from cycles.fetch.output import PLAIN_COLUMNS, PartitionOutput, sha1_label
from cycles.storage.store import Store

pytestmark = pytest.mark.web

URL = "http://h1.web.test/p/3.html?a=1"
BODY = b"<html><head><title>T</title></head><body>" + b"<p>words and more words</p>\n" * 900 + b"</body></html>"
RESPONSE_HEADERS = [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(BODY))),
                    ("ETag", '"abc"')]
REQUEST_HEADERS = [("Host", "h1.web.test"), ("User-Agent", "crawlbot/1.0"), ("Accept-Encoding", "gzip, deflate")]
REQUEST_LINE = "GET /p/3.html?a=1 HTTP/1.1"
DATE = "2024-03-01T12:00:00.123456Z"


@pytest.fixture
def written(tmp_path):
    store = Store(tmp_path / "data")
    output = PartitionOutput(store, "seg", store.path("segments") / "seg", 0, 1, "crawlbot/1.0", gzip_level=1)
    places = [output.write_response(URL, "10.0.0.1", REQUEST_HEADERS, REQUEST_LINE, "HTTP/1.1 200 OK",
                                    RESPONSE_HEADERS, body, DATE) for body in (BODY, b"")]
    output._warc_fh.close()
    return output._warc_tmp, places


def _reference_records() -> list:
    """The same pair as warcio's own writer makes it (it computes the digests itself)."""
    buffer = io.BytesIO()
    writer = WARCWriter(buffer, gzip=False, warc_version="1.1")
    common = {"WARC-Date": DATE, "WARC-IP-Address": "10.0.0.1"}
    response = writer.create_warc_record(
        URL, "response", payload=io.BytesIO(BODY), warc_headers_dict=dict(common),
        http_headers=StatusAndHeaders("200 OK", RESPONSE_HEADERS, protocol="HTTP/1.1"))
    request = writer.create_warc_record(
        URL, "request", payload=io.BytesIO(b""), warc_headers_dict=dict(common),
        http_headers=StatusAndHeaders(REQUEST_LINE, REQUEST_HEADERS, is_http_request=True))
    writer.write_record(response)
    writer.write_record(request)
    buffer.seek(0)
    return [(r.rec_headers.headers, r.content_stream().read()) for r in ArchiveIterator(buffer)]


def test_sha1_label_is_base32_of_the_digest():
    for size in range(200):
        digest = hashlib.sha1(os.urandom(size)).digest()
        assert sha1_label(digest) == "sha1:" + base64.b32encode(digest).decode()


def test_records_carry_what_warcio_would_write(written):
    path, _ = written
    with open(path, "rb") as fh:
        records = [(r.rec_type, r.rec_headers.headers, r.content_stream().read()) for r in ArchiveIterator(fh)]
    assert [kind for kind, _, _ in records] == ["warcinfo", "response", "request", "response", "request"]
    ignored = {"WARC-Record-ID", "WARC-Concurrent-To"}
    for (_, headers, content), (ref_headers, ref_content) in zip(records[1:3], _reference_records()):
        assert content == ref_content
        assert sorted(h for h in headers if h[0] not in ignored) == sorted(h for h in ref_headers if h[0] not in ignored)
    response, request = dict(records[1][1]), dict(records[2][1])
    assert request["WARC-Concurrent-To"] == response["WARC-Record-ID"]


def test_each_record_is_one_gzip_member_at_its_offset(written):
    path, places = written
    data = path.read_bytes()
    for (_, offset, length), body in zip(places, (BODY, b"")):
        member = gzip.decompress(data[offset:offset + length])
        assert member.startswith(b"WARC/1.1\r\n") and member.endswith(body + b"\r\n\r\n")
        record = next(iter(ArchiveIterator(io.BytesIO(data[offset:offset + length]))))
        assert record.rec_type == "response" and record.content_stream().read() == body


def test_warcio_check_accepts_the_file(written):
    path, _ = written
    warcio = os.path.join(os.path.dirname(sys.executable), "warcio")
    named = path.with_name("out.warc.gz")
    path.rename(named)
    done = subprocess.run([warcio, "check", "-v", str(named)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "digest pass" in done.stdout, done.stdout


def test_a_chunk_is_due_by_buffered_bytes(tmp_path):
    store = Store(tmp_path / "data")
    output = PartitionOutput(store, "seg", store.path("segments") / "seg", 0, 1, "crawlbot/1.0",
                             flush_bytes=100_000)
    link = {"from_url": URL, "url": URL + "#x", "anchor": "a", "nofollow": False, "depth": 1}
    for _ in range(3):
        output.add({"url": URL, "text": "w" * 30_000}, [link])
        assert not output.due(flush_s=1e9, flush_pages=1_000)
    output.add({"url": URL, "text": "w" * 30_000}, [link])
    assert output.due(flush_s=1e9, flush_pages=1_000)
    output.rows, output.links, output.buffered_bytes = [], [], 0  # as a flush leaves them
    output.add({"url": URL, "text": None}, [])
    assert not output.due(flush_s=1e9, flush_pages=1_000) and output.due(flush_s=1e9, flush_pages=1)


def test_committed_texts_are_the_rows_texts(tmp_path):
    """Texts are encoded when a row is added (PartitionOutput.add): the fetched file holds
    the same strings, and the same Parquet bytes, as the rows' own str would give."""
    import pyarrow.parquet as pq

    from cycles.tables import schema
    from cycles.fetch.output import columns_to_table

    store = Store(tmp_path / "data")
    output = PartitionOutput(store, "seg", store.path("segments") / "seg", 0, 1, "crawlbot/1.0")
    texts = ["plain words " * 2_000, "café · naïve ©", "日本語のテキスト 🙂 and ASCII", "", None]
    rows = [dict.fromkeys(schema.FETCHED.names) | {"url": f"{URL}&k={k}", "host": "h1.web.test",
                                                   "outcome": "ok", "text": text}
            for k, text in enumerate(texts)]
    expected = columns_to_table([dict(row) for row in rows], schema.FETCHED)
    for row in rows:
        output.add(row, [])
    assert output.flush() == len(texts)
    path = store.path("segments") / "seg" / "fetched" / "part-00000-c000001.parquet"
    table = pq.read_table(str(path))
    assert table.column("text").to_pylist() == texts
    assert table.equals(expected.select(table.schema.names).cast(table.schema))
    store.write_table(store.path("plain.parquet"), expected, schema.FETCHED, plain=PLAIN_COLUMNS)
    assert store.path("plain.parquet").read_bytes() == path.read_bytes()


def test_the_text_column_is_written_without_a_dictionary(tmp_path):
    """The fetched rows' texts go plain (output.PLAIN_COLUMNS), the other columns keep
    their dictionary; the file passes the page-CRC check and reads back the same."""
    import pyarrow.parquet as pq

    from cycles.storage.parquet import verify_parquet_file
    from cycles.tables import schema

    store = Store(tmp_path / "data")
    output = PartitionOutput(store, "seg", store.path("segments") / "seg", 0, 1, "crawlbot/1.0")
    texts = [f"page {k} " * 500 for k in range(40)] + ["same text"] * 20
    for k, text in enumerate(texts):
        output.add(dict.fromkeys(schema.FETCHED.names) | {"url": f"{URL}&k={k}", "host": "h1.web.test",
                                                           "outcome": "ok", "text": text}, [])
    output.flush()
    path = store.path("segments") / "seg" / "fetched" / "part-00000-c000001.parquet"
    meta = pq.ParquetFile(str(path)).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert not any("DICTIONARY" in e for e in encodings["text"])
    assert any("DICTIONARY" in e for e in encodings["host"])  # the others as before: a dictionary
    assert verify_parquet_file(path) == len(texts)
    assert pq.read_table(str(path)).column("text").to_pylist() == texts
    # Positive control: written as every other table is, the same texts get a dictionary.
    store.write_table(store.path("dict.parquet"), pq.read_table(str(path)), schema.FETCHED)
    meta = pq.ParquetFile(str(store.path("dict.parquet"))).metadata.row_group(0)
    assert any("DICTIONARY" in e for e in meta.column(schema.FETCHED.names.index("text")).encodings)


def test_committed_texts_reuse_memory_only_when_no_table_holds_it():
    """output.TextBuffer: the texts of a commit are written into memory kept from the last
    one only when no table of that commit is alive (session 14's reuse overwrote them)."""
    import pyarrow as pa

    from cycles.fetch.output import TextBuffer, columns_to_table
    from cycles.tables import schema

    def rows(word: str) -> list[dict]:
        texts = [f"{word} {k} ".encode() * 300 for k in range(30)] + [None, b""]
        return [dict.fromkeys(schema.FETCHED.names) | {"url": f"{URL}&k={k}", "host": "h1.web.test",
                                                         "outcome": "ok", "text": text}
                for k, text in enumerate(texts)]

    def data_address(table: pa.Table) -> int:
        return table.column("text").chunk(0).buffers()[2].address

    texts = TextBuffer()
    first = columns_to_table(rows("first"), schema.FETCHED, ("text",), texts)
    second = columns_to_table(rows("second"), schema.FETCHED, ("text",), texts)
    assert first.column("text").to_pylist() == [None if r["text"] is None else r["text"].decode() for r in rows("first")]
    assert data_address(second) != data_address(first)  # the first table lives: fresh memory
    kept = data_address(second)
    expected = second.column("text").to_pylist()
    del first, second
    third = columns_to_table(rows("third"), schema.FETCHED, ("text",), texts)
    assert data_address(third) == kept  # positive control: nothing held it, so it was refilled
    assert third.column("text").to_pylist() == [None if r["text"] is None else r["text"].decode() for r in rows("third")]
    assert expected != third.column("text").to_pylist()
    # The same bytes as without the kept memory (and as the rows' own str: the test above).
    plain = columns_to_table(rows("third"), schema.FETCHED, ("text",))
    assert third.equals(plain)
