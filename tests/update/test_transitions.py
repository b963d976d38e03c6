"""Update as a transition matrix: old row × fetch outcome → new status and next fetch.

Each case injects a URL, generates a segment (its fetch list leases it), writes the fetch result a
fetcher would have written into the segment's ``fetched/`` folder, and runs update.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math

import duckdb
import pyarrow.parquet as pq
import pytest

from cycles.tables import schema
from cycles.config import Config
from cycles.tables.crawldb import current_bucket_files, pattern_hash_sql
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.storage.store import Store, utcnow
from cycles.update.update import update_segment
from tests.support.transitions import URL, cycle_once, due_now, fetch_result, rows

DAY = 86400


@pytest.fixture
def config() -> Config:
    config = Config()
    config.db.buckets = 2
    return config


def seconds_until(row) -> float:
    return (row["next_fetch"] - row["_fetched_at"]).total_seconds()


OUTCOMES = [
    ("ok", {"http_status": 200, "content_hash": "a" * 32, "minhash": 5}, "fetched", 14 * DAY),
    ("not_modified", {"http_status": 304}, "not_modified", 14 * DAY),
    ("redirect", {"http_status": 301, "redirect_to": "http://h.example/new"}, "redirected", 14 * DAY),
    ("gone", {"http_status": 404}, "gone", 90 * DAY),
    ("client_error", {"http_status": 403}, "gone", 90 * DAY),
    ("not_html", {"http_status": 200}, "skipped", 90 * DAY),
    ("too_large", {"http_status": 200}, "skipped", 90 * DAY),
    ("server_error", {"http_status": 503}, "error", 1 * DAY),
    ("network_error", {}, "error", 1 * DAY),
    ("parse_error", {"http_status": 200}, "error", 1 * DAY),
]


@pytest.fixture(scope="module")
def every_outcome_once(tmp_path_factory) -> dict[str, dict]:
    """One segment holding a URL per outcome, fetched and updated once: each outcome's row
    is computed from its own old row and result, so one generate → update serves every case
    (a cycle each took ~1 s)."""
    tmp = tmp_path_factory.mktemp("outcomes")
    store, config = Store(tmp / "data"), Config()
    config.db.buckets = 2
    urls = {outcome: f"http://h.example/{outcome}" for outcome, *_ in OUTCOMES}
    (tmp / "seeds.txt").write_text("\n".join(urls.values()) + "\n")
    inject(store, config, tmp / "seeds.txt")
    generated = generate(store, config)
    assert generated.urls == len(urls)
    fetched_at = utcnow()
    fetch_result(store, generated.segment, [{"url": urls[outcome], "fetched_at": fetched_at, "outcome": outcome,
                                              **extra} for outcome, extra, *_ in OUTCOMES])
    update_segment(store, config, generated.segment)
    table = rows(store)
    return {outcome: {**table[url], "_fetched_at": fetched_at} for outcome, url in urls.items()}


@pytest.mark.parametrize("outcome, extra, status, next_in_s", OUTCOMES, ids=[case[0] for case in OUTCOMES])
def test_outcome_sets_status_and_next_fetch(every_outcome_once, outcome, extra, status, next_in_s):
    row = every_outcome_once[outcome]
    assert row["status"] == status
    assert seconds_until(row) == pytest.approx(next_in_s, abs=5)


def test_ok_records_validators_hashes_and_counts(store, config, tmp_path):
    row = cycle_once(store, config, tmp_path, {"outcome": "ok", "http_status": 200, "etag": '"e1"',
                                                "last_modified": "Mon, 01 Jan 2024 00:00:00 GMT",
                                                "content_hash": "b" * 32, "minhash": 2**63 + 7})
    assert (row["etag"], row["content_hash"], row["minhash"]) == ('"e1"', "b" * 32, 2**63 + 7)
    assert row["fetch_count"] == 1 and row["change_count"] == 0 and row["retries"] == 0
    assert row["last_fetched"] == row["_fetched_at"]


def test_interval_follows_the_estimated_change_rate(store, config, tmp_path):
    """Cho & Garcia-Molina: rate = -ln((n - X + 0.5) / (n + 0.5)) / I; interval = 0.5 / rate
    (the adaptive schedule's rule; the default, optimal, is tested in test_schedule.py)."""
    config.update.schedule = "adaptive"
    import math

    t0 = utcnow() - dt.timedelta(days=60)
    ok = {"outcome": "ok", "http_status": 200, "minhash": 1}
    visits = [("1", 0), ("2", 10), ("2", 20)]  # (content, day): one change, then none
    intervals = []
    for i, (content, day) in enumerate(visits):
        row = cycle_once(store, config, tmp_path, {**ok, "content_hash": content * 32,
                                                    "fetched_at": t0 + dt.timedelta(days=day)},
                         before=due_now if i else None)
        intervals.append(row["fetch_interval_s"])
    assert row["fetch_count"] == 3 and row["change_count"] == 1
    expected = [14 * DAY] + [round(0.5 / (-math.log((n - 1 + 0.5) / (n + 0.5)) / (10 * DAY))) for n in (1, 2)]
    assert intervals == pytest.approx(expected, abs=2)
    assert intervals[1] < intervals[2]  # fewer changes per visit: visit less often


def test_a_page_that_never_changes_is_visited_less_and_less(store, config, tmp_path):
    ok = {"outcome": "ok", "http_status": 200, "content_hash": "7" * 32}
    intervals = [cycle_once(store, config, tmp_path, ok, before=due_now if i else None)["fetch_interval_s"]
                 for i in range(3)]
    assert intervals == [14 * DAY, 21 * DAY, 31.5 * DAY]


def test_a_page_changing_at_every_visit_is_visited_often(store, config, tmp_path):
    config.update.schedule = "adaptive"  # its rule for pages faster than min_interval_s
    t0 = utcnow() - dt.timedelta(days=10)
    for i in range(3):
        row = cycle_once(store, config, tmp_path, {"outcome": "ok", "http_status": 200, "content_hash": str(i) * 32,
                                                    "fetched_at": t0 + dt.timedelta(hours=6 * i)},
                         before=due_now if i else None)
    assert row["change_count"] == 2
    # It changes faster than min_interval_s lets us follow (ideal 0.5 / rate = 1.86 h): it is
    # visited near the minimum, a little less the faster it changes (2 h * 2 h / 1.86 h).
    assert row["fetch_interval_s"] == pytest.approx(2 * 3600 * 2 * 3600 / (0.5 * 6 * 3600 / math.log(2.5 / 0.5)), abs=2)
    assert config.update.min_interval_s <= row["fetch_interval_s"] <= 2 * config.update.min_interval_s


def test_news_like_hosts_start_short(store, config, tmp_path):
    config.update.news_like_hosts = ["*.example"]
    row = cycle_once(store, config, tmp_path, {"outcome": "ok", "http_status": 200, "content_hash": "n" * 32})
    assert row["fetch_interval_s"] == config.update.news_like_interval_s


def test_not_modified_keeps_validators_and_hash(store, config, tmp_path):
    first = cycle_once(store, config, tmp_path, {"outcome": "ok", "http_status": 200, "etag": '"v"',
                                                  "content_hash": "c" * 32, "minhash": 9})
    again = cycle_once(store, config, tmp_path, {"outcome": "not_modified", "http_status": 304}, before=due_now)
    assert (again["etag"], again["content_hash"], again["minhash"]) == ('"v"', "c" * 32, 9)
    assert again["fetch_count"] == 2 and first["fetch_count"] == 1


def test_repeated_failures_become_dead_letter(store, config, tmp_path):
    config.update.max_retries = 2
    statuses = []
    for _ in range(2):
        row = cycle_once(store, config, tmp_path, {"outcome": "server_error", "http_status": 500,
                                                    "error": "HTTP 500"}, before=due_now if statuses else None)
        statuses.append((row["status"], row["retries"]))
    assert statuses == [("error", 1), ("dead", 2)]
    assert seconds_until(row) == pytest.approx(config.update.dead_retry_s, abs=5)
    assert row["error"] == "HTTP 500"


def test_error_backoff_doubles(store, config, tmp_path):
    first = cycle_once(store, config, tmp_path, {"outcome": "network_error", "error": "curl 7"})
    second = cycle_once(store, config, tmp_path, {"outcome": "network_error", "error": "curl 7"}, before=due_now)
    assert seconds_until(first) == pytest.approx(DAY, abs=5)
    assert seconds_until(second) == pytest.approx(2 * DAY, abs=5)


def test_success_after_errors_resets_retries(store, config, tmp_path):
    cycle_once(store, config, tmp_path, {"outcome": "server_error", "http_status": 502})
    row = cycle_once(store, config, tmp_path, {"outcome": "ok", "http_status": 200, "content_hash": "d" * 32},
                     before=due_now)
    assert row["retries"] == 0 and row["status"] == "fetched"


def test_deferred_keeps_status_and_comes_back_soon(store, config, tmp_path):
    row = cycle_once(store, config, tmp_path, {"outcome": "deferred", "error": "robots.txt unreachable"})
    assert row["status"] == "unfetched" and row["fetch_count"] == 0
    assert (row["next_fetch"] - utcnow()).total_seconds() == pytest.approx(config.update.deferred_retry_s, abs=10)


def test_robots_denied(store, config, tmp_path):
    row = cycle_once(store, config, tmp_path, {"outcome": "robots_denied", "fetched_at": None})
    assert row["status"] == "robots_denied" and row["last_fetched"] is None


def test_url_without_result_is_released_and_due(store, config, tmp_path):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text(URL + "\nhttp://h.example/other\n")
    inject(store, config, seeds)
    segment = generate(store, config).segment
    fetch_result(store, segment, [{"url": URL, "outcome": "gone", "http_status": 404, "fetched_at": utcnow()}])
    update_segment(store, config, segment)
    other = rows(store)["http://h.example/other"]
    assert other["status"] == "unfetched"
    assert other["next_fetch"] <= utcnow()


def test_outlinks_added_once_normalised_nofollow_dropped(store, config, tmp_path):
    links = [
        {"from_url": URL, "url": "HTTP://H.example:80/a?utm_source=x#frag", "anchor": "a", "nofollow": False, "depth": 1},
        {"from_url": URL, "url": "http://h.example/a", "anchor": "a again", "nofollow": False, "depth": 1},
        {"from_url": URL, "url": URL, "anchor": "self", "nofollow": False, "depth": 1},
        {"from_url": URL, "url": "http://other.example/b", "anchor": "b", "nofollow": False, "depth": 1},
        {"from_url": URL, "url": "http://other.example/nf", "anchor": "nf", "nofollow": True, "depth": 1},
        {"from_url": URL, "url": "http://h.example/pic.jpg", "anchor": "pic", "nofollow": False, "depth": 1},
    ]
    cycle_once(store, config, tmp_path, {"outcome": "ok", "http_status": 200, "content_hash": "e" * 32}, links)
    db = rows(store)
    assert set(db) == {URL, "http://h.example/a", "http://other.example/b"}
    assert db["http://h.example/a"]["status"] == "unfetched" and db["http://h.example/a"]["depth"] == 1
    assert db[URL]["fetch_count"] == 1  # the self-link did not add a second row or reset the page


def test_update_is_idempotent(store, config, tmp_path):
    row = cycle_once(store, config, tmp_path, {"outcome": "ok", "http_status": 200, "content_hash": "f" * 32})
    manifest = store.manifest()
    again = update_segment(store, config, row["_segment"])
    assert not again.applied and store.manifest() == manifest


def test_result_for_a_url_not_in_the_crawl_db_adds_it_normalised(store, config, tmp_path):
    """A redirect target the fetcher followed inline has a result but no row yet."""
    seeds = tmp_path / "seeds.txt"
    seeds.write_text(URL + "\n")
    inject(store, config, seeds)
    segment = generate(store, config).segment
    now = utcnow()
    fetch_result(store, segment, [
        {"url": URL, "outcome": "redirect", "http_status": 301, "fetched_at": now,
         "redirect_to": "HTTP://H.EXAMPLE:80/target#top"},
        {"url": "HTTP://H.EXAMPLE:80/target#top", "outcome": "ok", "http_status": 200, "fetched_at": now,
         "content_hash": "b" * 32, "minhash": 7},
        {"url": "http://h.example/picture.jpg", "outcome": "not_html", "http_status": 200, "fetched_at": now},
    ], links=[{"from_url": URL, "url": "HTTP://H.EXAMPLE:80/target#top", "anchor": "", "nofollow": False,
               "depth": 1}])
    result = update_segment(store, config, segment)
    table = rows(store)
    assert set(table) == {URL, "http://h.example/target"}  # one row, normalised; the .jpg filtered
    target = table["http://h.example/target"]
    assert target["status"] == "fetched" and target["fetch_count"] == 1 and target["depth"] == 1
    assert target["content_hash"] == "b" * 32 and target["pattern_hash"] is not None
    assert table[URL]["status"] == "redirected"
    assert result.counters["update/followed_target_rejected"] == 1
    assert result.counters["outlinks/new"] == 0  # the link's URL came in as a fetched row


def test_a_crawl_db_of_schema_1_is_read_and_upgraded(store, config, tmp_path):
    """Crawl DBs written before leases moved to the fetch lists (schema 1) keep working."""
    seeds = tmp_path / "seeds.txt"
    seeds.write_text(URL + "\nhttp://h.example/2024/05/01\n")
    inject(store, config, seeds)
    manifest, files = current_bucket_files(store)
    con = duckdb.connect()
    for f in files:  # rewrite every bucket as schema 1 would have it
        old = con.sql(f"""SELECT * EXCLUDE (pattern_hash), NULL::TIMESTAMPTZ AS lease_until,
                                 NULL::VARCHAR AS lease_segment FROM read_parquet('{f}')""").to_arrow_table()
        pq.write_table(old, f)
    store.install("crawldb", schema_1(manifest), keep=config.db.keep_versions)
    segment = generate(store, config).segment
    fetch_result(store, segment, [{"url": URL, "outcome": "gone", "http_status": 404, "fetched_at": utcnow()}])
    update_segment(store, config, segment)
    assert store.manifest().schema_version == schema.SCHEMA_VERSION
    table = rows(store)
    assert table[URL]["status"] == "gone" and "lease_until" not in table[URL]
    expected = duckdb.sql(f"SELECT {pattern_hash_sql('$u')}", params={"u": "http://h.example/2024/05/01"}).fetchall()
    assert table["http://h.example/2024/05/01"]["pattern_hash"] == expected[0][0]


def schema_1(manifest):
    return dataclasses.replace(manifest, schema_version=1)
