"""Properties of update over random segments (hypothesis): whatever a segment holds —
random outcomes, groups of exact copies, mirrored hosts, redirect targets new and known,
a URL fetched twice, results older than the stored rows — update keeps one row per URL,
loses none, and never moves a URL's ``last_fetched`` backwards.

Each example builds a small crawl DB and one segment folder directly (the schema module's
tables), then runs ``update_segment`` in-process.
"""

from __future__ import annotations

import datetime as dt
import tempfile

import duckdb
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cycles.tables.segment import write_stage_marker
from cycles.tables import schema
from cycles.config import Config
from cycles.tables.crawldb import current_bucket_files, pattern_hash_sql, replace_crawldb
from cycles.storage.store import Store, new_id
from cycles.update.update import update_segment
from cycles.urls import host_hash
from tests.examples import examples

BASE = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
HOSTS = ["a.example", "b.example", "c.example"]
OUTCOMES = list(schema.FetchOutcome.ALL)


def config() -> Config:
    config = Config()
    config.db.buckets = 2
    config.db.processes = 1
    config.db.duckdb_memory_limit = "512MB"
    config.update.mirror_min_pages = 2  # small examples still make mirrors
    return config


def url_of(host: int, page: int) -> str:
    return f"http://{HOSTS[host]}/p{page}"


def make_crawldb(store: Store, cfg: Config, rows: list[dict]) -> None:
    full = []
    for r in rows:
        host = r["url"].split("/")[2]
        fetched = r["last_fetched"] is not None
        full.append({**{n: None for n in schema.CRAWLDB.names}, "url": r["url"], "host": host,
                     "host_hash": host_hash(host), "status": "fetched" if fetched else "unfetched",
                     "first_seen": BASE, "first_fetched": r["last_fetched"], "last_fetched": r["last_fetched"],
                     "next_fetch": BASE, "fetch_interval_s": 86400, "retries": 0, "fetch_count": int(fetched),
                     "change_count": 0, "content_hash": r["content"] if fetched else None,
                     "minhash": 1000 + len(r["content"] or "") if fetched else None, "score": 1.0, "depth": 0})
    table = pa.Table.from_pylist(full, schema=schema.CRAWLDB)

    def bucket_sql(con, old, bucket):
        con.register("initial", table)
        return (f"SELECT * REPLACE ({pattern_hash_sql('url')} AS pattern_hash) FROM initial "
                f"WHERE host_hash % {cfg.db.buckets} = {bucket}")

    with store.lock("crawldb"):
        replace_crawldb(store, cfg, bucket_sql, who="test", now=BASE)


def write_segment(store: Store, listed: list[str], results: list[dict], links: list[dict]) -> str:
    segment = new_id(BASE)
    folder = store.segment_dir(segment, must_exist=False)
    fetchlist = [{"url": u, "host": u.split("/")[2], "host_hash": host_hash(u.split("/")[2]), "score": 1.0,
                  "depth": 0} for u in listed]
    store.write_table(folder / "fetchlist" / "part-00000.parquet",
                      pa.Table.from_pylist([{**{n: None for n in schema.FETCHLIST.names}, **r} for r in fetchlist],
                                           schema=schema.FETCHLIST), schema.FETCHLIST)
    store.write_table(folder / "fetched" / "part-00000-c000001.parquet",
                      pa.Table.from_pylist([{**{n: None for n in schema.FETCHED.names}, **r} for r in results],
                                           schema=schema.FETCHED), schema.FETCHED)
    store.write_table(folder / "outlinks" / "part-00000-c000001.parquet",
                      pa.Table.from_pylist([{**{n: None for n in schema.OUTLINKS.names}, **r} for r in links],
                                           schema=schema.OUTLINKS), schema.OUTLINKS)
    write_stage_marker(store, segment, "generated", {"segment": segment})
    write_stage_marker(store, segment, "fetched", {"segment": segment})
    return segment


def crawldb(store: Store) -> list[dict]:
    _, files = current_bucket_files(store)
    quoted = ", ".join(repr(str(f)) for f in files)
    return duckdb.sql(f"SELECT * FROM read_parquet([{quoted}])").to_arrow_table().to_pylist()


hours = st.integers(min_value=-200, max_value=200)
contents = st.sampled_from(["a" * 32, "b" * 32, "c" * 32])
page = st.tuples(st.integers(0, len(HOSTS) - 1), st.integers(0, 5))


@st.composite
def scenarios(draw):
    known = draw(st.lists(page, min_size=1, max_size=12, unique=True))
    stored = {url_of(*p): {"url": url_of(*p), "last_fetched": draw(st.one_of(st.none(), hours.map(
        lambda h: BASE + dt.timedelta(hours=h)))), "content": draw(contents)} for p in known}
    results = []
    for _ in range(draw(st.integers(0, 14))):
        # a known URL, or one the crawl DB does not hold yet (a redirect target followed inline)
        url = url_of(*draw(st.sampled_from(known) if draw(st.booleans()) else page))
        outcome = draw(st.sampled_from(OUTCOMES))
        results.append({"url": url, "host": url.split("/")[2], "outcome": outcome,
                        "fetched_at": BASE + dt.timedelta(hours=draw(hours)),
                        "http_status": 200 if outcome == "ok" else 500,
                        "content_hash": draw(contents) if outcome == "ok" else None,
                        "minhash": 7 if outcome == "ok" else None,
                        "redirect_to": url_of(*draw(page)) if outcome == "redirect" else None})
    links = [{"from_url": url_of(*draw(page)), "url": url_of(*draw(page)), "nofollow": False, "depth": 1}
             for _ in range(draw(st.integers(0, 8)))]
    listed = sorted({r["url"] for r in results if r["url"] in stored and draw(st.booleans())} | set(stored))
    return list(stored.values()), listed, results, links


# 10 examples a run (each is a whole update, ~1 s): the fast tier stays fast, and every run
# draws new ones, so the search goes on across runs.
@settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_update_keeps_one_row_per_url_and_never_goes_back_in_time(scenario):
    stored, listed, results, links = scenario
    cfg = config()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(tmp)
        make_crawldb(store, cfg, stored)
        segment = write_segment(store, listed, results, links)
        update_segment(store, cfg, segment, now=BASE + dt.timedelta(days=30))
        rows = crawldb(store)
    urls = [r["url"] for r in rows]
    assert len(urls) == len(set(urls)), "a URL has two rows"
    by_url = {r["url"]: r for r in rows}
    for old in stored:
        new = by_url[old["url"]]  # no URL lost
        if old["last_fetched"] is not None:
            assert new["last_fetched"] >= old["last_fetched"], (old, new)


def test_an_older_result_changes_nothing(tmp_path):
    cfg = config()
    store = Store(tmp_path / "data")
    url = url_of(0, 1)
    fetched_at = BASE + dt.timedelta(hours=10)
    make_crawldb(store, cfg, [{"url": url, "last_fetched": fetched_at, "content": "a" * 32}])
    before = crawldb(store)
    late = {"url": url, "host": HOSTS[0], "outcome": "ok", "fetched_at": fetched_at - dt.timedelta(hours=1),
            "http_status": 200, "content_hash": "b" * 32, "minhash": 9}
    result = update_segment(store, cfg, write_segment(store, [url], [late], []), now=BASE + dt.timedelta(days=1))
    assert crawldb(store) == before
    assert result.counters["update/stale_result"] == 1
