"""Which records cycles.fetch.warc_records writes for each kind of exchange, without a web: a
Transfer filled as libcurl would leave it, the records read back with warcio."""

from __future__ import annotations

import io

from warcio.archiveiterator import ArchiveIterator

from cycles.config import Config
from cycles.fetch.warc_records import Archive
from cycles.fetch.output import PartitionOutput
from cycles.fetch.transfer import ABORT_NOT_HTML, Request, Transfer
from cycles.storage.store import Store

URL = "http://h1.web.test/p/1.html"
DATE = "2026-12-01T12:00:00.000000Z"
REQUEST = [("Host", "h1.web.test"), ("User-Agent", "crawlbot/1.0")]


def transfer(status: int | None, body: bytes = b"", headers: tuple[bytes, ...] = (), url: str = URL,
             kind: str = "page", abort: str | None = None, error: int | None = None) -> Transfer:
    t = Transfer(Request(url, "h1.web.test", kind, {"url": url}), Config().fetch, 1 << 20)
    if status is not None:
        t.status_line = f"HTTP/1.1 {status} X".encode()
    t.header_lines = list(headers)
    t.chunks = [body] if body else []
    t.abort, t.error, t.duration_s = abort, error, 0.012
    return t


def archive(tmp_path, **warc) -> Archive:
    config = Config()
    for key, value in warc.items():
        setattr(config.warc, key, value)
    store = Store(tmp_path / "data")
    output = PartitionOutput(store, "seg", store.path("segments") / "seg", 0, 1, "crawlbot/1.0")
    return Archive(output, config.warc)


def records(arch: Archive) -> list:
    arch.output._warc_fh.flush()
    with open(arch.output._warc_tmp, "rb") as fh:
        out = []
        for r in ArchiveIterator(io.BytesIO(fh.read())):
            r.body = r.content_stream().read()
            out.append(r)
    return [r for r in out if r.rec_type != "warcinfo"]


def page(arch: Archive, t: Transfer, outcome: str, error: str | None = None) -> dict:
    return arch.page(t, "10.0.0.1", "GET /p/1.html HTTP/1.1", REQUEST, DATE, outcome, error)


def test_an_error_body_is_cut_at_the_cap_and_marked_truncated(tmp_path):
    arch = archive(tmp_path, max_error_body_bytes=100)
    location = page(arch, transfer(404, b"x" * 1000), "gone")
    response, request, meta = records(arch)
    assert (response.rec_type, request.rec_type, meta.rec_type) == ("response", "request", "metadata")
    assert response.body == b"x" * 100 and response.rec_headers.get_header("WARC-Truncated") == "length"
    assert location["warc_offset"] > 0 and location["warc_file"].startswith("warc/CRAWL-seg-part-00000-c000001-")
    assert meta.rec_headers.get_header("WARC-Concurrent-To") == response.rec_headers.get_header("WARC-Record-ID")
    assert meta.body.decode() == "outcome: gone\r\nfetchTimeMs: 12\r\nhttp-status: 404\r\n"


def test_a_second_identical_page_is_a_revisit_of_the_first(tmp_path):
    arch = archive(tmp_path)
    page(arch, transfer(200, b"<html>same</html>"), "ok")
    page(arch, transfer(200, b"<html>same</html>", url=URL + "?copy"), "ok")
    original, copy = [r for r in records(arch) if r.rec_type in ("response", "revisit")]
    assert copy.rec_type == "revisit" and copy.body == b""
    assert copy.rec_headers.get_header("WARC-Refers-To") == original.rec_headers.get_header("WARC-Record-ID")
    assert copy.rec_headers.get_header("WARC-Refers-To-Target-URI") == URL


def test_identical_robots_txt_files_stay_whole(tmp_path):
    arch = archive(tmp_path)
    for host in ("h1", "h2"):
        arch.robots(transfer(200, b"User-agent: *\nDisallow:\n", url=f"http://{host}.web.test/robots.txt",
                             kind="robots"), None, "GET /robots.txt HTTP/1.1", REQUEST, DATE, None)
    assert [r.rec_type for r in records(arch) if r.rec_type != "request"] == ["response", "metadata"] * 2


def test_no_answer_is_a_metadata_record_only(tmp_path):
    arch = archive(tmp_path)
    location = page(arch, transfer(None, error=7), "network_error", "curl 7: refused")
    (meta,) = records(arch)
    assert meta.rec_type == "metadata" and location["warc_offset"] > 0
    assert "outcome: network_error\r\n" in meta.body.decode() and "error: curl 7: refused" in meta.body.decode()


def test_a_not_html_answer_keeps_its_headers(tmp_path):
    arch = archive(tmp_path)
    page(arch, transfer(200, headers=(b"Content-Type: application/pdf",), abort=ABORT_NOT_HTML), "not_html")
    response = records(arch)[0]
    assert response.rec_headers.get_header("WARC-Truncated") == "unspecified"
    assert response.http_headers.get_header("Content-Type") == "application/pdf" and response.body == b""


def test_archive_html_keeps_only_html_pages(tmp_path):
    arch = archive(tmp_path, archive="html")
    assert page(arch, transfer(404, b"not found"), "gone") == {}
    assert page(arch, transfer(200, headers=(b"Content-Type: application/pdf",), abort=ABORT_NOT_HTML),
                "not_html") == {}
    arch.robots(transfer(200, b"User-agent: *\n", kind="robots"), None, "GET /robots.txt HTTP/1.1", REQUEST, DATE, None)
    assert page(arch, transfer(200, b"<html>a</html>"), "ok")
    assert [r.rec_type for r in records(arch)] == ["response", "request"]
