"""Size, speed and type limits, judged by what the server sent: a slow server is let go
after the low-speed window, a huge body and a non-HTML body are cut off early; pages in a
legacy charset or with broken markup are stored and parsed."""

from __future__ import annotations

import pytest

from testweb.harness import TestWeb
from tests.support.fetching import assert_polite, fast_config, fetch, host_requests, results

pytestmark = pytest.mark.web


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """One fetch of the odd host's difficult paths with tight limits."""
    from cycles.storage.store import Store

    with TestWeb(hosts=0, pages=2, page_bytes=2000, special=True, max_seconds=120) as web:
        store = Store(tmp_path_factory.mktemp("limits") / "data")
        config = fast_config(web, low_speed_bytes_per_s=100, low_speed_time_s=2, timeout_s=20.0,
                             max_page_bytes=200_000)
        urls = [web.url("odd", t) for t in ("/drip", "/big", "/file.pdf", "/latin1", "/broken")]
        segment, result = fetch(store, config, urls)
        requests = web.requests()
        yield {"web": web, "config": config, "rows": results(store, segment), "requests": requests,
               "counters": result.counters, "url": lambda t: web.url("odd", t), "store": store,
               "segment": segment}


def warc_record(limited, row):
    from warcio.archiveiterator import ArchiveIterator

    with open(limited["store"].segment_dir(limited["segment"]) / row["warc_file"], "rb") as fh:
        fh.seek(row["warc_offset"])
        record = next(iter(ArchiveIterator(fh)))
        record.content_stream().read()  # before the file closes
    assert record.rec_headers.get_header("WARC-Target-URI") == row["url"]
    return record


def request(limited, path):
    (r,) = [r for r in host_requests(limited["requests"], "odd") if r["path"] == path]
    return r


def test_a_drip_is_aborted_after_the_low_speed_window_not_the_total_timeout(limited):
    r = request(limited, "/drip")
    held = r["t_end"] - r["t_start"]
    # low_speed_time_s = 2 with a byte a second; the total timeout is 20 s.
    assert 1.5 <= held < 5.0, held
    assert r["client_closed"] and r["bytes_sent"] < 10
    row = limited["rows"][limited["url"]("/drip")]
    assert row["outcome"] == "network_error" and "curl 28" in row["error"]
    assert limited["counters"]["fetch/timeout"] == 1


def test_an_oversize_body_is_aborted_at_the_headers(limited):
    r = request(limited, "/big")
    # 20 MB announced; Content-Length over max_page_bytes aborts before the body is read.
    assert r["client_closed"] and r["bytes_sent"] <= 3 * limited["config"].fetch.max_page_bytes, r["bytes_sent"]
    row = limited["rows"][limited["url"]("/big")]
    assert row["outcome"] == "too_large" and row["body_bytes"] == 0
    # Archived all the same (warc.archive = "all"): its headers, marked as truncated.
    record = warc_record(limited, row)
    assert record.rec_headers.get_header("WARC-Truncated") == "length"
    assert record.http_headers.get_statuscode() == "200" and record.content_stream().read() == b""


def test_a_non_html_body_is_not_downloaded(limited):
    r = request(limited, "/file.pdf")
    assert r["client_closed"] and r["bytes_sent"] < 300_000, r["bytes_sent"]  # of 2 MB
    row = limited["rows"][limited["url"]("/file.pdf")]
    assert row["outcome"] == "not_html" and row["content_type"] == "application/pdf" and row["body_bytes"] == 0
    record = warc_record(limited, row)
    assert record.rec_type == "response" and record.rec_headers.get_header("WARC-Truncated") == "unspecified"


def test_a_latin1_page_is_stored_and_decoded(limited):
    row = limited["rows"][limited["url"]("/latin1")]
    assert row["outcome"] == "ok" and row["warc_file"]
    assert row["title"] == "Latin-1 \u00e9t\u00e9"
    assert "Caf\u00e9 cr\u00e8me" in row["text"] and "\ufffd" not in row["text"]


def test_broken_markup_is_parsed(limited):
    row = limited["rows"][limited["url"]("/broken")]
    assert row["outcome"] == "ok" and row["title"] == "Broken page"
    assert "Unclosed paragraph" in row["text"]


def test_the_difficult_paths_kept_the_host_spacing(limited):
    assert assert_polite(limited["requests"]) >= 5
