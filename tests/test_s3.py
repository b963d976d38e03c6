"""The store on S3: the stages against ``s3://bucket/prefix`` on a local S3-compatible server.

The server is moto's standalone server, started by this module on its own loopback
address and a free port, bounded in time and stopped when the module ends; the AWS
settings (AWS_ENDPOINT_URL, keys, region) point at it only for these tests. Nothing
reaches the internet. Each test uses its own prefix in one bucket.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from cycles.tables.segment import segment_state
from cycles.tables import schema
from cycles.commands.cli import app
from cycles.config import Config
from cycles.tables.crawldb import current_bucket_files, read_crawldb
from cycles.errors import LockedError, StoreError
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.tables.leases import live_lease_files
from cycles.tables.pages import read_feed
from cycles.commands.status import crawl_status, run_sql
from cycles.storage.store import Store, utcnow
from cycles.update.update import update_segment
from tests.conftest import kill_when
from tests.support.s3 import BUCKET
from tests.support.segments import URLS, seed, write_fetched

pytestmark = pytest.mark.web

@pytest.fixture
def s3_store(s3_env) -> Store:
    return Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/data")


@pytest.fixture
def config() -> Config:
    config = Config()
    config.db.buckets = 3
    return config


def crawldb_rows(store: Store) -> dict[str, dict]:
    return {r["url"]: r for r in read_crawldb(store).to_pylist()}  # bases and deltas merged


def test_store_paths_and_files_on_s3(s3_store):
    assert s3_store.uri.startswith(f"s3://{BUCKET}/") and not s3_store.local
    path = s3_store.path("x", "a.json")
    assert not s3_store.exists(path)
    with pytest.raises(FileNotFoundError):
        s3_store.read_json(path)
    s3_store.write_json(path, {"n": 1})
    assert s3_store.read_json(path) == {"n": 1} and s3_store.is_dir(s3_store.path("x"))
    s3_store.write_bytes(s3_store.path("x", "b.bin"), b"raw")
    assert [p.name for p in s3_store.list(s3_store.path("x"))] == ["a.json", "b.bin"]
    assert [p.name for p in s3_store.list(s3_store.path("x"), "*.json")] == ["a.json"]
    assert s3_store.list_dirs(s3_store.path()) == ["x"]
    # stored as given: a .gz name must not make pyarrow gzip it again (WARC offsets would break)
    gz = s3_store.path("x", "c.warc.gz")
    s3_store.write_bytes(gz, b"raw bytes")
    bucket, _, key = str(gz).partition("/")
    assert s3_store.s3_client().get_object(Bucket=bucket, Key=key)["Body"].read() == b"raw bytes"
    assert s3_store.read_bytes(gz) == b"raw bytes" and s3_store.read_range(gz, 4, 5) == b"bytes"
    s3_store.delete_dir(s3_store.path("x"))
    assert not s3_store.exists(path) and s3_store.list(s3_store.path("x")) == []


def test_inject_generate_update_status_pages_on_s3(s3_store, config, tmp_path):
    injected = seed(s3_store, config, tmp_path)
    assert injected.added == 4
    manifest = s3_store.manifest()
    assert manifest.buckets == 3 and len(s3_store.version_files("crawldb", manifest)) == 3

    generated = generate(s3_store, config)
    assert generated.urls == 4 and segment_state(s3_store, generated.segment) == "generated"
    fetchlist = s3_store.read_tables(s3_store.list(s3_store.segment_dir(generated.segment) / "fetchlist",
                                                   "part-*.parquet"), schema.FETCHLIST)
    assert sorted(fetchlist["url"].to_pylist()) == sorted(URLS)
    assert len(live_lease_files(s3_store, utcnow())) == config.generate.partitions  # the fetch lists lease

    links = [{"from_url": "http://a.example/", "url": "http://a.example/new", "anchor": "n", "nofollow": False,
              "depth": 1},
             {"from_url": "http://a.example/", "url": "http://a.example/f.jpg", "anchor": "", "nofollow": False,
              "depth": 1}]
    write_fetched(s3_store, generated.segment, URLS[:3], links)
    result = update_segment(s3_store, config, generated.segment)
    assert result.applied and result.counters["outlinks/new"] == 1 and result.counters["filter/extension"] == 1
    rows = crawldb_rows(s3_store)
    assert rows["http://a.example/new"]["status"] == "unfetched"
    assert {rows[u]["status"] for u in URLS[:3]} == {"fetched"} and rows[URLS[3]]["status"] == "unfetched"
    assert any(s3_store.manifest().bucket_deltas)  # the rows above were merged from deltas on S3
    assert live_lease_files(s3_store, utcnow()) == []
    assert segment_state(s3_store, generated.segment) == "updated"
    assert update_segment(s3_store, config, generated.segment).applied is False  # idempotent
    assert s3_store.manifest("hostdb") is not None
    # no lock object outlives its stage
    assert not s3_store.exists(s3_store.path("crawldb", ".lock"))

    report = crawl_status(s3_store, config)
    assert report["store"] == s3_store.uri and report["urls"] == 5 and report["by_status"]["fetched"] == 3
    assert run_sql(s3_store, config, "SELECT count(*) FROM fetched WHERE segment = "
                   f"'{generated.segment}'").fetchall() == [(3,)]
    assert run_sql(s3_store, config, "SELECT count(*) FROM pages").fetchall() == [(3,)]

    feed = read_feed(s3_store, "indexer")
    assert feed.pages == 3 and feed.batches == [f"{generated.segment}.parquet"]
    assert feed.table["warc_file"][0].as_py().startswith(f"segments/{generated.segment}/warc/")
    assert read_feed(s3_store, "indexer").pages == 0  # the cursor moved


def test_old_versions_are_pruned_on_s3(s3_store, config, tmp_path):
    config.db.keep_versions = 2
    for i in range(4):
        seed(s3_store, config, tmp_path, [f"http://h{i}.example/"])
    versions = [v for v in s3_store.list_dirs(s3_store.path("crawldb")) if v.startswith("v")]
    assert len(versions) == 2 and s3_store.manifest().version == versions[-1]
    assert len(crawldb_rows(s3_store)) == 4


def test_cli_on_s3(s3_store, tmp_path):
    runner = CliRunner()
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://a.example/\nnot a url\nhttp://b.example/\n")
    result = runner.invoke(app, ["--data", s3_store.uri, "inject", str(seeds)])
    assert result.exit_code == 0 and "injected: 2 new" in result.output, result.output
    result = runner.invoke(app, ["--data", s3_store.uri, "generate"])
    assert result.exit_code == 0 and "2 URLs" in result.output, result.output
    result = runner.invoke(app, ["--data", s3_store.uri, "status", "--json"])
    assert result.exit_code == 0 and '"urls": 2' in result.output and s3_store.uri in result.output
    result = runner.invoke(app, ["--data", s3_store.uri, "sql", "SELECT count(*) AS n FROM crawldb"])
    assert result.exit_code == 0 and "2" in result.output
    result = runner.invoke(app, ["--data", s3_store.uri, "update"])
    assert result.exit_code == 3 and "run `crawl fetch` first" in result.output


def test_corrupt_crawldb_file_on_s3_is_named(s3_store, config, tmp_path):
    seed(s3_store, config, tmp_path)
    manifest, files = current_bucket_files(s3_store)
    s3_store.write_bytes(files[1], b"PAR1 not really")
    with pytest.raises(StoreError, match=r"s3://.*bucket-00001\.parquet is corrupt"):
        generate(s3_store, config)
    assert s3_store.manifest() == manifest


def test_s3_lock_excludes_and_is_taken_over_from_dead_or_expired_holders(s3_store):
    with s3_store.lock("crawldb"):
        with pytest.raises(LockedError, match=r"s3://.*crawldb/\.lock is held by process"):
            with Store(s3_store.uri).lock("crawldb"):
                pass
    # released: free again
    with Store(s3_store.uri).lock("crawldb"):
        pass
    client = s3_store.s3_client()
    bucket, _, key = str(s3_store.path("crawldb", ".lock")).partition("/")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    later = (utcnow() + dt.timedelta(hours=1)).isoformat()
    client.put_object(Bucket=bucket, Key=key, Body=(
        f'{{"host": "{socket.gethostname()}", "pid": {int(dead.stdout)}, "token": "x", "expires_at": "{later}"}}'))
    with s3_store.lock("crawldb"):  # holder's process is gone
        pass
    earlier = (utcnow() - dt.timedelta(seconds=1)).isoformat()
    client.put_object(Bucket=bucket, Key=key, Body=(
        f'{{"host": "elsewhere", "pid": 1, "token": "x", "expires_at": "{earlier}"}}'))
    with s3_store.lock("crawldb"):  # lease expired
        pass
    client.put_object(Bucket=bucket, Key=key, Body=(
        f'{{"host": "elsewhere", "pid": 1, "token": "x", "expires_at": "{later}"}}'))
    with pytest.raises(LockedError):  # alive elsewhere: respected
        with s3_store.lock("crawldb"):
            pass


def test_lost_s3_lock_refuses_the_swap(s3_store, config, tmp_path, monkeypatch):
    seed(s3_store, config, tmp_path)
    before = s3_store.manifest()
    config.db.s3_lock_lease_s, config.db.s3_lock_renew_s = 5.0, 0.2  # renewed within the test
    client = s3_store.s3_client()
    bucket, _, key = str(s3_store.path("crawldb", ".lock")).partition("/")
    with pytest.raises(LockedError, match="lost lock"):
        with s3_store.lock("crawldb", db=config.db):
            client.put_object(Bucket=bucket, Key=key, Body=b'{"host": "other"}')  # taken over meanwhile
            time.sleep(1.0)
            from cycles.tables.crawldb import replace_crawldb

            replace_crawldb(s3_store, config, lambda con, old, b: f"SELECT * FROM {old}", who="test")
    assert s3_store.manifest() == before


KILL_AFTER_FIRST_BUCKET = textwrap.dedent("""
    import os, signal, sys
    from cycles.storage.store import Store

    write_batches = Store.write_batches

    def write_then_die(self, path, batches, schema):
        rows = write_batches(self, path, batches, schema)
        if "crawldb" in str(path) and path.name.startswith(("bucket-", "delta-")):  # a bucket task's first file
            os.kill(os.getpid(), signal.SIGKILL)  # kill -9 between two bucket writes
        return rows

    Store.write_batches = write_then_die
    from cycles.commands.cli import app
    app(["--data", sys.argv[1], "update"], prog_name="crawl")
""")


@pytest.mark.parametrize("where", ["local", "s3"])
def test_killed_update_leaves_the_old_crawldb_intact(where, request, config, tmp_path):
    store = Store(tmp_path / "data") if where == "local" else request.getfixturevalue("s3_store")
    seed(store, config, tmp_path)
    segment = generate(store, config).segment
    write_fetched(store, segment, URLS[:2])
    before = store.manifest()
    before_rows = crawldb_rows(store)

    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_FIRST_BUCKET, store.uri],
                            capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent.parent)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # The new version was begun (its first bucket is there) but never installed.
    versions = [v for v in store.list_dirs(store.path("crawldb")) if v.startswith("v")]
    partial = [v for v in versions if v > before.version]
    assert len(partial) == 1
    written = [p.name for p in store.list(store.path("crawldb", partial[0]), "*.parquet")]
    assert len(written) == 1 and written[0].startswith(("bucket-", "delta-"))  # an attempt's own name
    assert store.manifest() == before
    assert crawldb_rows(store) == before_rows
    assert segment_state(store, segment) == "fetched"

    # Still usable: the update runs again (taking over the dead process's lock on S3) ...
    result = update_segment(store, config, segment)
    assert result.applied
    rows = crawldb_rows(store)
    assert {rows[u]["status"] for u in URLS[:2]} == {"fetched"}
    assert live_lease_files(store, utcnow()) == []
    # ... and so does the next cycle's generate.
    assert generate(store, config).reason in ("", "no URL is due")


# --- fetch and the whole cycle on S3 -------------------------------------------------------

def read_warc_record(store: Store, segment: str, row: dict):
    """The response record a fetched row points at, read by one ranged GET through the store."""
    import io

    from warcio.archiveiterator import ArchiveIterator

    raw = store.read_range(store.segment_dir(segment) / row["warc_file"], row["warc_offset"], row["warc_length"])
    return next(iter(ArchiveIterator(io.BytesIO(raw))))


@pytest.fixture(scope="module")
def crawled_s3(s3_env, tmp_path_factory):
    from cycles.commands.cycle import run_cycles
    from testweb.harness import TestWeb
    from tests.conftest import config_for, write_seeds

    tmp = tmp_path_factory.mktemp("e2e-s3")
    with TestWeb(hosts=4, pages=5, page_bytes=3000, special=False, max_seconds=180) as web:
        store = Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/crawl")
        config = config_for(web)
        config.db.buckets = 3
        seeds = web.seeds()
        inject(store, config, write_seeds(tmp / "seeds.txt", seeds))
        log = list(run_cycles(store, config, cycles=8))
        yield {"web": web, "store": store, "config": config, "log": log, "seeds": seeds,
               "requests": web.requests()}


def test_s3_crawl_ran_cycles_until_nothing_was_due(crawled_s3):
    assert len([line for line in crawled_s3["log"] if "generated" in line]) >= 3, crawled_s3["log"]
    assert "stopping" in crawled_s3["log"][-1], crawled_s3["log"]


def test_s3_crawl_fetched_every_reachable_page_once(crawled_s3):
    web = crawled_s3["web"]
    requested = [(r["host_header"].split(":")[0], r["path"]) for r in crawled_s3["requests"]]
    assert len(requested) == len(set(requested)), "a page was fetched twice"
    from tests.support.webclient import key

    expected = {key(u) for u in web.expected_reachable(crawled_s3["seeds"])}
    assert expected - set(requested) == set()
    report = crawl_status(crawled_s3["store"], crawled_s3["config"])
    assert report["by_status"].get("fetched", 0) >= len(expected) - len(crawled_s3["seeds"])


def test_s3_crawl_db_holds_one_row_per_url(crawled_s3):
    rows = read_crawldb(crawled_s3["store"])  # bases and deltas merged, through the S3 store
    assert rows.num_rows == len(set(rows["url"].to_pylist())) > 20


def test_s3_crawl_warc_records_are_at_the_recorded_offsets(crawled_s3):
    store = crawled_s3["store"]
    checked = 0
    for segment in store.segments():
        fetched = store.read_tables(store.list(store.segment_dir(segment) / "fetched", "part-*.parquet"), schema.FETCHED)
        for row in [r for r in fetched.to_pylist() if r["outcome"] == "ok"][:5]:
            record = read_warc_record(store, segment, row)
            assert record.rec_type == "response"
            assert record.rec_headers.get_header("WARC-Target-URI") == row["url"]
            assert b"<html" in record.content_stream().read().lower()
            checked += 1
    assert checked >= 5
    # nothing was left in the local staging area
    assert not list(store.local_dir(store.path("segments")).rglob("*.tmp"))


def test_s3_crawl_published_the_pages_feed(crawled_s3):
    feed = read_feed(crawled_s3["store"], "indexer")
    assert feed.pages > 10 and len(feed.table["url"].unique()) == feed.pages


def test_crawl_export_of_every_segment_on_s3(crawled_s3):
    """crawl export without a segment on S3: WARC files copied down, the indexes and _EXPORTED
    written back as objects; a second run finds every segment current."""
    from cycles.archive.export import EXPORTED, export_pending

    store, config = crawled_s3["store"], crawled_s3["config"]
    done = export_pending(store, config)
    assert [r.segment for r in done.exported] == [s for s in store.segments() if s not in done.not_fetched]
    assert done.exported and not any(r.partial for r in done.exported)
    for result in done.exported:
        folder = store.segment_dir(result.segment) / "archive"
        assert store.exists(folder / EXPORTED)
        assert store.list(folder, "*.cdxj") and store.list(folder, "*.cc-index.parquet")
        assert len(store.list(folder / "wet", "*.wet.gz")) == len(result.files["wet"]) > 0
    again = export_pending(store, config)
    assert again.exported == [] and again.current == [r.segment for r in done.exported]


def test_killed_fetch_resumes_on_s3(s3_env, tmp_path):
    """kill -9 of `crawl fetch --data s3://…` after a few chunks; run again: the segment completes,
    no result is committed twice, every chunk is whole and points at a readable WARC record."""
    from testweb.harness import TestWeb
    from tests.support.processes import toml_config
    from tests.support.fetching import make_segment

    hosts, pages = 10, 8
    with TestWeb(hosts=hosts, pages=pages, page_bytes=2000, special=False, max_seconds=120) as web:
        store = Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/crawl")
        config = tmp_path / "crawl.toml"
        toml_config(web, config)
        urls = [web.url(f"h{i}", f"/p/{k}.html") for i in range(hosts) for k in range(pages)]
        segment = make_segment(store, urls, partitions=2)
        fetched_dir = store.segment_dir(segment) / "fetched"
        cmd = [sys.executable, "-m", "cycles", "--data", store.uri, "--config", str(config), "fetch", segment]
        first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        kill_when(first, lambda: len(store.list(fetched_dir, "part-*.parquet")) >= 3, within_s=40, poll_s=0.1)
        time.sleep(0.5)
        before = len(store.list(fetched_dir, "part-*.parquet"))
        assert segment_state(store, segment) == "fetching"  # started, not finished (cycles/tables/segment.py)
        second = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert second.returncode == 0, second.stderr
        assert segment_state(store, segment) == "fetched"
        chunks = store.list(fetched_dir, "part-*.parquet")
        assert len(chunks) > before
        rows = store.read_tables(chunks, schema.FETCHED).to_pylist()
        assert sorted(r["url"] for r in rows) == sorted(urls)  # each committed exactly once
        names = {p.name[: -len(".parquet")] for p in chunks}
        from cycles.fetch.output import chunk_of_warc  # WARC names carry prefix, segment and host

        for folder, chunk_of in (("warc", chunk_of_warc), ("outlinks", lambda name: name[: -len(".parquet")])):
            orphans = [p for p in store.list(store.segment_dir(segment) / folder) if chunk_of(p.name) not in names]
            assert orphans == []
        for row in [r for r in rows if r["outcome"] == "ok"][::7]:
            assert read_warc_record(store, segment, row).rec_headers.get_header("WARC-Target-URI") == row["url"]


def test_the_s3_lock_object_carries_the_configured_lease(s3_store, config):
    """db.s3_lock_lease_s is how long the lock object says it is valid (expires_at), so a
    crashed holder blocks others that long at most."""
    config.db.s3_lock_lease_s = 600.0
    client = s3_store.s3_client()
    bucket, _, key = str(s3_store.path("crawldb", ".lock")).partition("/")
    with s3_store.lock("crawldb", db=config.db):
        holder = json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    lease = dt.datetime.fromisoformat(holder["expires_at"]) - dt.datetime.fromisoformat(holder["acquired_at"])
    assert lease.total_seconds() == pytest.approx(600.0, abs=1.0)


def test_a_new_host_claim_is_created_once_on_s3(s3_store):
    """cycles/tables/newhosts.py: the claim is a conditional PUT (If-None-Match: *); the
    second writer learns it lost, and the claims list back by host name."""
    from cycles.tables import segment as seg
    from cycles.tables.newhosts import claim_body, claimed_hosts, create_if_absent, read_claim

    folder = s3_store.segment_dir("s1", must_exist=False)
    path = seg.newhost_claim_file(folder, "new.example")
    assert create_if_absent(s3_store, path, claim_body("s1", 0, "new.example"))
    assert not create_if_absent(s3_store, path, claim_body("s1", 1, "new.example"))
    assert read_claim(s3_store, path)["partition"] == 0
    assert create_if_absent(s3_store, seg.newhost_claim_file(folder, "[::1]"), claim_body("s1", 1, "[::1]"))
    assert claimed_hosts(s3_store, "s1") == {"new.example", "[::1]"}


def test_a_hosts_file_replaced_while_it_is_read_is_read_whole_on_s3(s3_store):
    """A segment's hosts/part-N is rewritten at every flush while other partitions read it
    (a redirect target's state). Read in ranged GETs, a PUT between the footer's GET and the
    pages' gave a torn file ("not a readable Parquet file"; a resumed fetch failed in CI).
    Read whole (one GET: one version on S3), and again when moto — not atomic for a reader
    during a PUT — served a part of the new object: 3 s of reads against a writer replacing
    the file with versions of other sizes, never an error."""
    from cycles.tables.hostdb import read_replaced_host_rows

    path = s3_store.path("segments", "s", "hosts", "part-00001.parquet")

    def version(k: int) -> pa.Table:
        rows = 50 + 40 * (k % 5)
        return pa.table({"host": [f"h{i:04d}.test" for i in range(rows)],
                         "robots_body": [("x" * (100 + k % 7 * 300)).encode()] * rows}).cast(
            pa.schema([schema.HOSTS.field("host"), schema.HOSTS.field("robots_body")]))

    def write(k: int) -> None:
        table = version(k)
        full = pa.table({name: table[name] if name in table.column_names else pa.nulls(table.num_rows, schema.HOSTS.field(name).type)
                         for name in schema.HOSTS.names}, schema=schema.HOSTS)
        s3_store.write_table(path, full, schema.HOSTS)

    write(0)
    stop = threading.Event()

    def keep_writing() -> None:
        k = 1
        while not stop.is_set():  # a flush every 50 ms (fetch.flush_s is 30 s by default)
            write(k)
            k += 1
            stop.wait(0.05)

    writer = threading.Thread(target=keep_writing, daemon=True)
    writer.start()
    reads = 0
    try:
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            rows = read_replaced_host_rows(s3_store, path, ["h0000.test", "h0049.test"])
            assert rows.num_rows == 2
            reads += 1
    finally:
        stop.set()
        writer.join(timeout=30)
    assert reads > 10


def test_key_index_written_by_compact_and_read_by_update_on_s3(s3_store, config, tmp_path):
    """The bases' key indexes (cycles/tables/keyindex.py) on S3: `crawl compact --all` writes one
    beside each base, and the next update's bucket tasks read them (positive control: the
    counter of bucket tasks that did), merging as without them."""
    from cycles.commands.compact import compact
    from cycles.tables.crawldb import current_buckets
    from cycles.tables.keyindex import has_key_index, read_key_index

    seed(s3_store, config, tmp_path)
    _, buckets = current_buckets(s3_store)
    assert not any(has_key_index(s3_store, b.base) for b in buckets)  # inject's bases: none yet
    compact(s3_store, config, everything=True)
    _, buckets = current_buckets(s3_store)
    assert all(read_key_index(s3_store, b.base) is not None for b in buckets)
    generated = generate(s3_store, config)
    links = [{"from_url": "http://a.example/", "url": "http://a.example/new", "anchor": "n", "nofollow": False,
              "depth": 1},
             {"from_url": "http://a.example/", "url": URLS[3], "anchor": "", "nofollow": False, "depth": 1}]
    write_fetched(s3_store, generated.segment, URLS[:3], links)
    stats = update_segment(s3_store, config, generated.segment)
    updated = json.loads(s3_store.read_bytes(s3_store.segment_dir(generated.segment) / "stats" / "update.json"))
    assert updated["update/key_index_buckets"] > 0
    assert stats.counters["outlinks/new"] == 1  # the known URL found through the index's fingerprint
    rows = crawldb_rows(s3_store)
    assert rows["http://a.example/new"]["status"] == "unfetched" and len(rows) == 5
