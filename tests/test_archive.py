"""Archive-grade output (issue #12), on one crawl of the test web shared by the module.

Two fetches into one store: the first asks the odd host for a page, a redirect, a 404, a
503, a PDF and a 410, and dup-news for an article and its byte-identical print copy; the
second asks for the page again with its ETag (a 304). Then ``crawl export`` of both
segments. Checked: ``warcio check`` on every file; every fetched row's record, read by its
offset, is of its URL and outcome; robots.txt is archived; the CDXJ is sorted and points at
its records; the Parquet index has Common Crawl's column names and types; WET text has its
language; and pywb, run on loopback over a collection of the WARCs and CDXJ, replays the
redirect and the 304-revisited page.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from warcio.archiveiterator import ArchiveIterator

from cycles.archive.export import export_segment
from cycles.storage.store import Store
from testweb.harness import TestWeb
from tests.support.archive import capture_time, record_at, replay, wayback
from tests.support.fetching import fast_config, fetch, results

pytestmark = pytest.mark.web

ODD = ("/p/0.html", "/redirect", "/missing", "/status/503", "/file.pdf", "/gone")
ARTICLE = "/article/0.html"

# Common Crawl's cc-index columns we fill, with their types in cc-index-schema-flat.json of
# commoncrawl/cc-index-table (Spark types); the Arrow type each maps to is the test's.
CC_INDEX_COLUMNS = {
    "url_surtkey": "string", "url": "string", "url_host_name": "string", "url_host_tld": "string",
    "url_host_2nd_last_part": "string", "url_host_3rd_last_part": "string", "url_host_4th_last_part": "string",
    "url_host_5th_last_part": "string", "url_host_registry_suffix": "string",
    "url_host_registered_domain": "string", "url_host_private_suffix": "string",
    "url_host_private_domain": "string", "url_host_name_reversed": "string", "url_protocol": "string",
    "url_port": "integer", "url_path": "string", "url_query": "string", "fetch_time": "timestamp",
    "fetch_status": "short", "fetch_redirect": "string", "content_digest": "string",
    "content_mime_type": "string", "content_mime_detected": "string", "content_charset": "string",
    "content_languages": "string", "content_truncated": "string", "warc_record_id": "binary",
    "warc_filename": "string", "warc_record_offset": "integer", "warc_record_length": "integer",
    "warc_segment": "string", "crawl": "string", "subset": "string"}
SPARK_TO_ARROW = {"string": "string", "integer": "int32", "short": "int16", "timestamp": "timestamp[us, tz=UTC]",
                  "binary": "binary"}


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("archive")
    with TestWeb(hosts=0, pages=2, page_bytes=2000, special=True, neardups=True, max_seconds=120) as web:
        store = Store(tmp / "data")
        config = fast_config(web)
        page = web.url("odd", "/p/0.html")
        urls = [web.url("odd", p) for p in ODD] + [web.url("dup-news", ARTICLE),
                                                    web.url("dup-news", ARTICLE + "?print=1")]
        first, _ = fetch(store, config, urls)
        etag = results(store, first)[page]["etag"]
        assert etag
        second, _ = fetch(store, config, [page], etags={page: etag})
        exports = {s: export_segment(store, s, config) for s in (first, second)}
        yield {"web": web, "store": store, "config": config, "first": first, "second": second,
               "rows": {s: results(store, s) for s in (first, second)}, "exports": exports, "tmp": tmp}


def warc_files(crawl) -> list[Path]:
    return sorted(p for s in (crawl["first"], crawl["second"])
                  for p in (crawl["store"].segment_dir(s) / "warc").glob("*.warc.gz"))


def all_records(path: Path) -> list:
    out = []
    with open(path, "rb") as fh:
        for record in ArchiveIterator(fh):
            record.body = record.content_stream().read()
            out.append(record)
    return out


def test_every_warc_file_passes_warcio_check(crawl):
    files = warc_files(crawl) + sorted((crawl["store"].root / "segments").glob("*/archive/wet/*.wet.gz"))
    assert len(files) >= 3
    done = subprocess.run([sys.executable, "-c", "import sys; from warcio.cli import main; main(sys.argv[1:])",
                           "check", "-v", *map(str, files)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_file_names_are_unique_sortable_and_named_inside(crawl):
    for path in warc_files(crawl):
        segment = path.parent.parent.name
        assert path.name.startswith(f"CRAWL-{segment}-part-00000-c0000")
        info = all_records(path)[0]
        assert info.rec_type == "warcinfo" and info.rec_headers.get_header("WARC-Filename") == path.name
        fields = info.body.decode()
        for name in ("software: crawl/", "http-header-user-agent: " + crawl["config"].fetch.user_agent,
                     "robots: obey", "crawl-config-digest: sha1:"):
            assert name in fields, fields


def test_every_fetched_row_points_at_its_own_record(crawl):
    outcomes = {}
    for segment, rows in crawl["rows"].items():
        folder = crawl["store"].segment_dir(segment)
        for row in rows.values():
            assert row["warc_file"], row
            record = record_at(folder / row["warc_file"], row["warc_offset"], row["warc_length"])
            assert record.rec_headers.get_header("WARC-Target-URI") == row["url"]
            expected = {"not_modified": "revisit"}.get(row["outcome"], "response")
            if row["url"].endswith("?print=1"):
                expected = "revisit"  # the byte-identical copy of the article fetched before it
            assert record.rec_type == expected, (row["url"], row["outcome"], record.rec_type)
            outcomes[(segment, row["url"])] = row["outcome"]
            # The metadata record written with it names the outcome and the status.
            (meta,) = [r for r in all_records(folder / row["warc_file"]) if r.rec_type == "metadata"
                       and r.rec_headers.get_header("WARC-Concurrent-To") == record.rec_headers.get_header("WARC-Record-ID")]
            assert f"outcome: {row['outcome']}\r\n" in meta.body.decode()
            assert f"http-status: {row['http_status']}\r\n" in meta.body.decode()
            if row["outcome"] != "not_modified":  # a 304's revisit has no HTTP block (cycles/fetch/warc_records.py)
                assert record.http_headers.get_statuscode() == str(row["http_status"])
    web = crawl["web"]
    first = crawl["first"]
    assert outcomes[(first, web.url("odd", "/redirect"))] == "redirect"
    assert outcomes[(first, web.url("odd", "/missing"))] == "gone"
    assert outcomes[(first, web.url("odd", "/status/503"))] == "server_error"
    assert outcomes[(first, web.url("odd", "/file.pdf"))] == "not_html"
    assert outcomes[(crawl["second"], web.url("odd", "/p/0.html"))] == "not_modified"


def test_records_keep_what_each_exchange_said(crawl):
    web, rows = crawl["web"], crawl["rows"][crawl["first"]]
    folder = crawl["store"].segment_dir(crawl["first"])

    def record(path, host="odd"):
        row = rows[web.url(host, path)]
        return record_at(folder / row["warc_file"], row["warc_offset"])

    redirect = record("/redirect")
    assert redirect.http_headers.get_header("Location") == web.url("odd", "/p/0.html")
    assert record("/missing").body and record("/status/503").http_headers.get_statuscode() == "503"
    pdf = record("/file.pdf")
    assert pdf.rec_headers.get_header("WARC-Truncated") == "unspecified" and pdf.body == b""
    copy, original = record(ARTICLE + "?print=1", "dup-news"), record(ARTICLE, "dup-news")
    assert copy.rec_headers.get_header("WARC-Profile").endswith("/revisit/identical-payload-digest")
    assert copy.rec_headers.get_header("WARC-Refers-To") == original.rec_headers.get_header("WARC-Record-ID")
    assert copy.rec_headers.get_header("WARC-Payload-Digest") == original.rec_headers.get_header("WARC-Payload-Digest")
    second = crawl["store"].segment_dir(crawl["second"])
    row = crawl["rows"][crawl["second"]][web.url("odd", "/p/0.html")]
    revisit = record_at(second / row["warc_file"], row["warc_offset"])
    assert revisit.rec_headers.get_header("WARC-Profile").endswith("/revisit/server-not-modified")
    assert revisit.rec_headers.get_header("WARC-Refers-To-Target-URI") == row["url"]
    assert not revisit.http_headers and revisit.body == b""
    (meta,) = [r for r in all_records(second / row["warc_file"]) if r.rec_type == "metadata"
               and r.rec_headers.get_header("WARC-Concurrent-To") == revisit.rec_headers.get_header("WARC-Record-ID")]
    assert "http-status: 304" in meta.body.decode() and f"http-response-header: ETag: {row['etag']}" in meta.body.decode()


def test_robots_txt_fetches_are_archived_with_their_status(crawl):
    folder = crawl["store"].segment_dir(crawl["first"])
    robots = {}
    for path in (folder / "warc").glob("*.warc.gz"):
        for r in all_records(path):
            if r.rec_type == "response" and r.rec_headers.get_header("WARC-Target-URI").endswith("/robots.txt"):
                robots[r.rec_headers.get_header("WARC-Target-URI")] = r.http_headers.get_statuscode()
    web = crawl["web"]
    assert robots == {web.url("odd", "/robots.txt"): "200", web.url("dup-news", "/robots.txt"): "200"}


def test_cdxj_is_sorted_and_points_at_the_right_records(crawl):
    for segment, result in crawl["exports"].items():
        (path,) = (crawl["store"].segment_dir(segment) / "archive").glob("*.cdxj")
        lines = path.read_text().splitlines()
        assert lines == sorted(lines) and len(lines) == result.cdxj_lines > 0
        for line in lines:
            key, timestamp, data = line.split(" ", 2)
            entry = json.loads(data)
            record = record_at(crawl["store"].segment_dir(segment) / "warc" / entry["filename"],
                               int(entry["offset"]), int(entry["length"]))
            assert record.rec_headers.get_header("WARC-Target-URI") == entry["url"]
            assert record.rec_type in ("response", "revisit")
            assert record.rec_headers.get_header("WARC-Date").replace("-", "").replace(":", "").replace(
                "T", "").startswith(timestamp)


def test_url_index_has_common_crawls_columns_and_types(crawl):
    segment = crawl["first"]
    (path,) = (crawl["store"].segment_dir(segment) / "archive").glob("*.cc-index.parquet")
    table = pq.read_table(path)
    assert {f.name: str(f.type) for f in table.schema} == {
        name: SPARK_TO_ARROW[spark] for name, spark in CC_INDEX_COLUMNS.items()}
    import duckdb

    # A Common Crawl-style query, as the README shows it.
    by_subset = dict(duckdb.connect().execute(
        f"SELECT subset, count(*) FROM read_parquet('{path}') GROUP BY subset").fetchall())
    assert by_subset["robotstxt"] == 2 and by_subset["crawldiagnostics"] >= 4 and by_subset["warc"] >= 3
    web = crawl["web"]
    rows = {r["url"]: r for r in table.to_pylist()}
    redirect = rows[web.url("odd", "/redirect")]
    assert redirect["fetch_status"] == 301 and redirect["fetch_redirect"] == web.url("odd", "/p/0.html")
    article = rows[web.url("dup-news", ARTICLE)]
    assert article["content_languages"] == "eng" and article["content_mime_detected"] == "text/html"
    assert article["url_host_name"] == "dup-news.web.test" and article["url_surtkey"].startswith("test,web,dup-news:")
    record = record_at(crawl["store"].root / article["warc_filename"], article["warc_record_offset"],
                       article["warc_record_length"])
    assert record.rec_headers.get_header("WARC-Target-URI") == article["url"]


def test_wet_records_carry_the_text_and_its_language(crawl):
    folder = crawl["store"].segment_dir(crawl["first"])
    conversions = [r for wet in (folder / "archive" / "wet").glob("*.wet.gz") for r in all_records(wet)
                   if r.rec_type == "conversion"]
    row = crawl["rows"][crawl["first"]][crawl["web"].url("dup-news", ARTICLE)]
    (article,) = [r for r in conversions if r.rec_headers.get_header("WARC-Target-URI") == row["url"]]
    assert article.rec_headers.get_header("WARC-Identified-Content-Language") == "eng"
    assert row["text"] in article.body.decode()


# --- pywb ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pywb(crawl):
    """pywb over both segments of the module's crawl."""
    pytest.importorskip("pywb", reason="pywb is the archive extra: pip install -e '.[archive]'")
    with wayback(crawl["tmp"] / "pywb", [crawl["store"].segment_dir(s) for s in (crawl["first"], crawl["second"])]) as url:
        yield url


def test_pywb_replays_a_redirect(crawl, pywb):
    url = crawl["web"].url("odd", "/redirect")
    row = crawl["rows"][crawl["first"]][url]
    status, headers, _ = replay(f"{pywb}/{capture_time(row)}id_/{url}")
    assert status == 301 and headers["Location"].endswith(crawl["web"].url("odd", "/p/0.html"))


def test_pywb_replays_the_304_revisited_page_with_the_earlier_body(crawl, pywb):
    url = crawl["web"].url("odd", "/p/0.html")
    revisit = crawl["rows"][crawl["second"]][url]
    original = crawl["rows"][crawl["first"]][url]
    status, _, body = replay(f"{pywb}/{capture_time(revisit)}id_/{url}")
    first = record_at(crawl["store"].segment_dir(crawl["first"]) / original["warc_file"], original["warc_offset"])
    assert status == 200 and body == first.body and body


def test_export_prints_one_json_line_for_a_scheduler(crawl):
    """`crawl export --json`: the scheduler contract of every stage (one JSON line on stdout)."""
    import json

    from typer.testing import CliRunner

    from cycles.commands.cli import app

    done = CliRunner().invoke(app, ["--data", str(crawl["store"].root), "export", crawl["second"], "--only", "cdxj",
                                    "--json"])
    assert done.exit_code == 0, done.output
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert line["status"] == "done" and line["stage"] == "export" and line["segment"] == crawl["second"]
    assert line["cdxj_lines"] == crawl["exports"][crawl["second"]].cdxj_lines > 0
    assert list(line["files"]) == ["cdxj"]
