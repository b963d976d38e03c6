"""Tests of cycles/update/outlinks.py: the pooled outlink preparation gives what one plain
loop over the distinct URLs gives (table and counters), in-process and with two workers."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from cycles.tables import schema
from cycles.config import Config
from cycles.update.outlinks import prepare_outlinks
from cycles.urls import Normalizer, UrlFilter, host_hashes, rejection_reason, url_host

DATA = Path(__file__).parent.parent / "data" / "urlnorm"


def reference(links: pa.Table, config: Config, counters: Counter) -> pa.Table:
    """The straightforward version: one Python loop over the distinct raw URLs."""
    counters["outlinks/found"] += links.num_rows
    follow = links.filter(pc.invert(links["nofollow"]))
    counters["outlinks/nofollow"] += links.num_rows - follow.num_rows
    normalizer, url_filter = Normalizer(config.urls), UrlFilter(config.urls)
    best: dict[str, int] = {}
    for url, depth in zip(follow["url"].to_pylist(), follow["depth"].to_pylist()):
        best[url] = min(depth, best.get(url, depth))
    by_norm: dict[str, int] = {}
    for url, depth in best.items():
        norm = normalizer.normalize(url)
        reason = rejection_reason(url) if norm is None else url_filter.reason(norm)
        if reason:
            counters[f"filter/{reason}"] += 1
        else:
            by_norm[norm] = min(depth, by_norm.get(norm, depth))
    kept = {u: d for u, d in by_norm.items() if d <= config.update.max_depth}
    counters["filter/max_depth"] += len(by_norm) - len(kept)
    urls = sorted(kept)
    hosts = [url_host(u) for u in urls]
    return pa.table({"url": pa.array(urls, pa.string()), "host": pa.array(hosts, pa.string()),
                     "host_hash": host_hashes(hosts),
                     "score": pa.array([1.0 / (kept[u] + 1) for u in urls], pa.float32()),
                     "depth": pa.array([kept[u] for u in urls], pa.int16())})


def utf8(text) -> bool:
    try:
        return isinstance(text, str) and bool(text.encode("utf-8"))
    except UnicodeEncodeError:
        return False


def odd_urls() -> list[str]:
    """A few hundred odd URLs: the absolute inputs of the conformance suites, plus spellings
    of one URL, every filter reason and traps."""
    urls = []
    for name in ("whatwg_urltestdata.jsonl", "safebrowsing_go_client_canonicalURL.jsonl",
                 "w3lib_canonicalize_url.jsonl", "w3lib_safe_url_string.jsonl"):
        for line in (DATA / name).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if isinstance(row, dict) and utf8(row.get("input")) and not row.get("base"):
                urls.append(row["input"])
    urls += [
        "http://Example.COM:80/a/./b/../c?b=2&a=1#frag", "http://example.com/a/c?a=1&b=2",
        "HTTP://example.com/a/c?a=1&b=2&utm_source=x", "http://example.com/a/c?b=2&a=1&sid=9",
        "https://blocked.example/x", "https://blocked.example/private/y", "https://ok.example/private/z",
        "mailto:someone@example.com", "javascript:void(0)", "ftp://example.com/f", "http://", "//x", "",
        "http://example.com/photo.JPG", "http://example.com/a.zip;jsessionid=1", "http://example.com/dir.jpg/",
        "http://example.com/" + "/".join("abcdefghijklmnopqrstuvwxyz"),
        "http://example.com/a/b/a/b/a/b/a/b/a/b", "http://example.com/" + "x" * 3000,
        "http://[::1]:8080/v6", "http://0x7f.1/ipv4", "http://faß.de/idn", "http://xn--nxasmq6b.com/",
        "http://a..b/", "http://999.1.1.1/", "http://host:99999/", "http://user:pw@host.example/p",
    ]
    return urls


def links_table(urls: list[str], seed: int = 7) -> pa.Table:
    """Every URL a few times, with random depths and some nofollow rows."""
    rng = random.Random(seed)
    rows = [(u, rng.randint(0, 7), rng.random() < 0.1) for u in urls for _ in range(rng.randint(1, 3))]
    rng.shuffle(rows)
    return pa.table({"from_url": pa.array(["http://src.example/"] * len(rows), pa.string()),
                     "url": pa.array([r[0] for r in rows], pa.string()),
                     "anchor": pa.array([None] * len(rows), pa.string()),
                     "nofollow": pa.array([r[2] for r in rows], pa.bool_()),
                     "depth": pa.array([r[1] for r in rows], pa.int16())}).cast(schema.OUTLINKS)


def odd_config() -> Config:
    config = Config()
    config.update.max_depth = 5
    config.urls.max_path_depth = 20
    config.urls.exclude = {"blocked.example": ["/private/"]}
    return config


def canonical(table: pa.Table) -> pa.Table:
    return table.sort_by([("url", "ascending")])


@pytest.mark.parametrize("processes", [1, pytest.param(2, marks=pytest.mark.web)])  # 2 spawns a pool
def test_same_as_one_loop(processes):
    config = odd_config()
    links = links_table(odd_urls())
    assert links.num_rows > 300
    want_counters, got_counters = Counter(), Counter()
    want = reference(links, config, want_counters)
    got = prepare_outlinks(links, config, got_counters, processes=processes, chunk_rows=97)
    assert got.schema == want.schema
    assert canonical(got).equals(canonical(want))
    assert got_counters == want_counters
    # Every kind of drop happened, so the comparison covered them.
    for reason in ("scheme", "unparseable", "extension", "too_deep", "repeating_segments", "too_long",
                   "host_rule", "max_depth"):
        assert got_counters[f"filter/{reason}"] > 0, reason
    assert got_counters["outlinks/nofollow"] > 0


def test_spellings_merge_with_the_smallest_depth():
    links = pa.table({"from_url": ["http://s/"] * 3,
                      "url": ["http://EXAMPLE.com/a?b=1&a=2#x", "http://example.com:80/a?a=2&b=1", "http://example.com/a?a=2&b=1"],
                      "anchor": [None] * 3, "nofollow": [False, False, True], "depth": [3, 2, 1]}).cast(schema.OUTLINKS)
    counters = Counter()
    got = prepare_outlinks(links, Config(), counters)
    assert got.to_pylist() == [{"url": "http://example.com/a?a=2&b=1", "host": "example.com",
                                "host_hash": host_hashes(["example.com"])[0].as_py(),
                                "score": pytest.approx(1 / 3), "depth": 2}]
    assert counters == Counter({"outlinks/found": 3, "outlinks/nofollow": 1, "filter/max_depth": 0})


@pytest.mark.web  # spawns a pool of two processes
def test_empty_and_all_nofollow():
    config = Config()
    for nofollow in ([], [True, True]):
        links = pa.table({"from_url": ["http://s/"] * len(nofollow), "url": ["http://a.example/"] * len(nofollow),
                          "anchor": [None] * len(nofollow), "nofollow": nofollow,
                          "depth": [1] * len(nofollow)}).cast(schema.OUTLINKS)
        counters = Counter()
        got = prepare_outlinks(links, config, counters, processes=2)
        assert got.num_rows == 0 and got.schema == reference(links, config, Counter()).schema
        assert counters["outlinks/found"] == len(nofollow) and counters["outlinks/nofollow"] == len(nofollow)


def test_result_works_in_duckdb_like_the_old_one():
    """update registers the result on DuckDB and joins on url and host_hash."""
    got = prepare_outlinks(links_table(odd_urls()[:50]), Config(), Counter())
    con = duckdb.connect()
    con.register("links_all", got)
    assert con.execute("SELECT count(*) = count(DISTINCT url) FROM links_all").fetchall()[0][0]


def test_on_a_given_connection_twice():
    """update passes its own DuckDB connection: nothing is left behind on it."""
    con = duckdb.connect()
    config = odd_config()
    links = links_table(odd_urls())
    want = reference(links, config, Counter())
    for _ in range(2):
        counters = Counter()
        got = prepare_outlinks(links, config, counters, con=con)
        assert canonical(got).equals(canonical(want))
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE 'outlinks_%'").fetchall()[0][0] == 0
