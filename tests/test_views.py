"""The analysts' views (cycles/commands/views.py): ``crawl sql``, ``crawl sql --views``, ``crawl schema``.

One small crawl of the test web (tests/conftest.py ``small_crawl``: two cycles, so the store
keeps two crawl DB versions) is shared with tests/test_api.py; the printed views are run in a
fresh DuckDB connection, as plain ``duckdb`` would run ``.read views.sql``. The S3 views
run against the moto server of tests/test_s3.py.
"""

from __future__ import annotations

import csv
import gzip
import json

import duckdb
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from cycles.tables import schema
from cycles.tables.crawldb import read_crawldb
from cycles.commands.cli import app
from cycles.config import Config
from cycles.commands.inject import inject
from cycles.storage.store import Store
from cycles.commands.views import output_format, schema_text, views_script
from tests.conftest import write_seeds

runner = CliRunner()

COUNT_BY_STATUS = "SELECT status, count(*)::BIGINT AS n, min(url) AS first_url FROM crawldb GROUP BY ALL ORDER BY status"


@pytest.fixture(scope="module")
def crawled(small_crawl):
    return small_crawl


def crawl(store: Store, *args: str):
    result = runner.invoke(app, ["--data", str(store.root), *args])
    return result


def fresh_duckdb(script: str) -> duckdb.DuckDBPyConnection:
    """A new connection that ran the printed views, as `.read views.sql` in the duckdb shell would."""
    con = duckdb.connect()
    con.execute(script)
    return con


@pytest.mark.web
def test_views_count_each_url_once_where_a_glob_over_versions_does_not(crawled):
    versions = crawled.version_dirs("crawldb")
    assert len(versions) >= 2  # what made the README's glob count each URL once per kept version
    con = fresh_duckdb(crawl(crawled, "sql", "--views").output)
    rows, urls = con.sql("SELECT count(*), count(DISTINCT url) FROM crawldb").fetchall()[0]
    globbed = con.sql(f"SELECT count(*) FROM '{crawled.root}/crawldb/v*/*.parquet'").fetchall()[0][0]
    current = read_crawldb(crawled).num_rows  # bases and deltas merged: one row per URL
    assert rows == urls == current > 0 and globbed > rows


@pytest.mark.web
def test_printed_views_equal_the_views_of_crawl_sql(crawled):
    con = fresh_duckdb(crawl(crawled, "sql", "--views").output)
    for name in schema.VIEWS:
        printed = con.sql(f"SELECT count(*) FROM {name}").fetchall()[0][0]
        result = crawl(crawled, "sql", f"SELECT count(*) AS n FROM {name}", "--format", "json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.output) == [{"n": printed}], name
    assert con.sql("SELECT count(*) FROM fetched").fetchall()[0][0] > 0
    assert con.sql("SELECT count(*) FROM pages").fetchall()[0][0] > 0


@pytest.mark.web
def test_printed_views_use_absolute_paths_and_work_from_another_folder(crawled, tmp_path, monkeypatch):
    script = crawl(crawled, "sql", "--views").output
    monkeypatch.chdir(tmp_path)
    assert f"'{crawled.root}/crawldb/" in script
    assert fresh_duckdb(script).sql("SELECT count(*) FROM crawldb").fetchall()[0][0] > 0


@pytest.mark.web
def test_column_and_view_docs_come_from_schema_py(crawled):
    con = fresh_duckdb(crawl(crawled, "sql", "--views").output)
    for name, view in schema.VIEWS.items():
        columns = con.sql("SELECT column_name, comment, data_type FROM duckdb_columns() WHERE table_name = $t",
                          params={"t": name}).fetchall()
        assert [c[0] for c in columns] == view.names
        assert {c[0]: c[1] for c in columns} == {f.name: schema.doc_of(f) for f in view}
        assert all(c[1] for c in columns)  # every column documented
        comment = con.sql("SELECT comment FROM duckdb_views() WHERE view_name = $t", params={"t": name}).fetchall()
        assert comment == [(view.metadata[b"crawl.view"].decode(),)]


@pytest.mark.web
def test_segment_column_and_warc_file_from_the_store_root(crawled):
    con = fresh_duckdb(crawl(crawled, "sql", "--views").output)
    segments = set(crawled.segments())
    assert con.sql("SELECT segment, state FROM segments").fetchall() == [(s, "updated") for s in sorted(segments)]
    for name in ("fetchlist", "fetched", "outlinks", "pages"):
        found = {s for (s,) in con.sql(f"SELECT DISTINCT segment FROM {name}").fetchall()}
        assert found and found <= segments, name
    # Every table's warc_file is relative to the store root: a file that exists there, and the
    # record at its offset is the row's URL.
    for name in ("fetched", "pages"):
        rows = con.sql(f"SELECT url, warc_file, warc_offset, warc_length FROM {name} "
                       "WHERE warc_file IS NOT NULL").fetchall()
        assert rows, name
        for url, warc_file, offset, length in rows:
            assert warc_file.startswith("segments/")
            with open(crawled.root / warc_file, "rb") as fh:
                fh.seek(offset)
                record = fh.read(length)
            assert url.encode() in gzip.decompress(record)
    # The same page in both tables names the same WARC record.
    assert con.sql("SELECT count(*) FROM pages p JOIN fetched f USING (url, warc_file, warc_offset)").fetchall()[0][0] \
        == con.sql("SELECT count(*) FROM pages").fetchall()[0][0]


@pytest.mark.web
@pytest.mark.parametrize("fmt", ["csv", "json", "jsonl", "parquet"])
def test_formats_round_trip(crawled, tmp_path, fmt):
    expected = duckdb.connect().execute(crawl(crawled, "sql", "--views").output).sql(COUNT_BY_STATUS).fetchall()
    out = tmp_path / f"result.{fmt}"
    result = crawl(crawled, "sql", COUNT_BY_STATUS, "--out", str(out))  # the format from the suffix
    assert result.exit_code == 0 and result.output == "", result.output
    readers = {"csv": lambda p: [(r["status"], int(r["n"]), r["first_url"]) for r in csv.DictReader(open(p))],
               "json": lambda p: [(r["status"], r["n"], r["first_url"]) for r in json.load(open(p))],
               "jsonl": lambda p: [(r["status"], r["n"], r["first_url"])
                                   for r in map(json.loads, open(p).read().splitlines())],
               "parquet": lambda p: [tuple(r.values()) for r in pq.read_table(p).to_pylist()]}
    assert readers[fmt](out) == expected
    assert list(tmp_path.iterdir()) == [out]  # no temporary file left
    # The same bytes on stdout with --format.
    stdout = crawl(crawled, "sql", COUNT_BY_STATUS, "--format", fmt)
    assert stdout.exit_code == 0 and stdout.stdout_bytes == out.read_bytes()


@pytest.mark.web
def test_no_row_cut_when_piped(crawled):
    urls = crawl(crawled, "sql", "SELECT count(*) FROM crawldb", "--format", "csv").output.splitlines()[1]
    assert int(urls) > 25  # more than DuckDB's box shows
    piped = crawl(crawled, "sql", "SELECT url FROM crawldb ORDER BY url")  # not a terminal: csv, every row
    assert piped.output.splitlines()[0] == "url" and len(piped.output.splitlines()) == int(urls) + 1
    table = crawl(crawled, "sql", "SELECT url FROM crawldb ORDER BY url", "--format", "table")
    assert sum(1 for line in table.output.splitlines() if "http://" in line) == int(urls)


@pytest.mark.web
def test_a_bad_query_is_one_line_exit_2_and_writes_nothing(crawled, tmp_path):
    out = tmp_path / "x.csv"
    result = crawl(crawled, "sql", "SELECT nope FROM crawldb", "--out", str(out))
    assert result.exit_code == 2 and "query failed" in result.output and not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_no_crawl_db_is_exit_2_not_an_empty_result(tmp_path):
    for args in (["sql", "SELECT 1"], ["sql", "--views"], ["sql", "SELECT 1", "--format", "csv"]):
        result = runner.invoke(app, ["--data", str(tmp_path / "empty"), *args])
        assert result.exit_code == 2, (args, result.output)
        assert "no crawl DB" in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "empty").exists()


def test_views_of_a_crawl_without_segments_exist_and_are_empty(tmp_path):
    store = Store(tmp_path / "data")
    inject(store, Config(), write_seeds(tmp_path / "seeds.txt", ["http://a.example/", "http://b.example/x"]))
    con = fresh_duckdb(views_script(store))
    assert con.sql("SELECT count(*) FROM crawldb").fetchall() == [(2,)]
    for name in ("hosts", "fetchlist", "fetched", "outlinks", "pages", "segments"):
        assert con.sql(f"SELECT count(*) FROM {name}").fetchall() == [(0,)]
        assert [c[0] for c in con.sql(f"DESCRIBE {name}").fetchall()] == schema.VIEWS[name].names


def test_crawl_schema_lists_columns_types_and_docs():
    result = runner.invoke(app, ["schema", "fetched"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].startswith("fetched: ")
    assert any(line.split()[:2] == ["segment", "VARCHAR"] and schema.SEGMENT_DOC in line for line in lines)
    assert any(line.split()[:2] == ["warc_file", "VARCHAR"] and "store root" in line for line in lines)
    everything = schema_text()
    assert all(f"{name}: " in everything for name in schema.VIEWS)
    bad = runner.invoke(app, ["schema", "nope"])
    assert bad.exit_code == 2 and "crawldb" in bad.output


def test_output_format_rules():
    assert output_format(None, None, tty=True) == "table"
    assert output_format(None, None, tty=False) == "csv"
    assert output_format(None, "x.parquet", tty=True) == "parquet"
    assert output_format(None, "x.jsonl", tty=True) == "jsonl"
    assert output_format("json", "x.parquet", tty=True) == "json"
    with pytest.raises(Exception, match="--format"):
        output_format(None, "x.bin", tty=False)
    with pytest.raises(Exception, match="unknown --format"):
        output_format("xml", None, tty=False)


# --- S3: the printed views name s3:// URLs -------------------------------------------------------
from tests.support.s3 import BUCKET  # noqa: E402
from tests.support.segments import seed, write_fetched  # noqa: E402


def s3_filesystem_for_duckdb(store: Store):
    """The store's S3 server (moto, on loopback) as DuckDB's s3:// file system, through fsspec
    over the store's own pyarrow S3 client (so its endpoint, never AWS's).

    DuckDB's own S3 support (the httpfs extension) is downloaded on first use and cannot be
    here (no internet); this reads the same s3:// URLs of the printed views in DuckDB."""
    fsspec_arrow = pytest.importorskip("fsspec.implementations.arrow")
    class S3(fsspec_arrow.ArrowFSWrapper):
        protocol = "s3"

        def _strip_protocol(self, path):  # noqa: D401  (s3://bucket/key -> bucket/key)
            return str(path).removeprefix("s3://")

    return S3(store.fs)


@pytest.mark.web
def test_printed_views_of_an_s3_store_read_it_from_duckdb(s3_env, tmp_path):
    from cycles.generate.generate import generate
    from cycles.update.update import update_segment

    store = Store(f"s3://{BUCKET}/views/data")
    config = Config()
    config.db.buckets = 2
    seed(store, config, tmp_path)
    generated = generate(store, config)
    write_fetched(store, generated.segment, ["http://a.example/", "http://b.example/"],
                  [{"from_url": "http://a.example/", "url": "http://a.example/n", "anchor": "n", "nofollow": False,
                    "depth": 1}])
    assert update_segment(store, config, generated.segment).applied
    script = views_script(store)
    assert "LOAD httpfs;" in script and "CREATE OR REPLACE SECRET crawl_store" in script
    assert f"ENDPOINT '{s3_env['AWS_ENDPOINT_URL'].removeprefix('http://')}'" in script and "USE_SSL false" in script
    assert "testing" not in script  # credentials come from the AWS settings, never the file
    assert f"'s3://{BUCKET}/views/data/crawldb/" in script
    con = duckdb.connect()
    con.register_filesystem(s3_filesystem_for_duckdb(store))
    views = script[script.index("CREATE OR REPLACE VIEW"):]  # the httpfs set-up needs the extension
    con.execute(views)
    assert con.sql("SELECT count(*), count(DISTINCT url) FROM crawldb").fetchall() == [(5, 5)]
    assert con.sql("SELECT DISTINCT segment FROM fetched").fetchall() == [(generated.segment,)]
    assert con.sql("SELECT count(*) FROM pages").fetchall() == [(2,)]
    assert con.sql("SELECT count(*) FROM outlinks").fetchall() == [(1,)]
    # With httpfs loadable (a machine with internet, or the extension installed), the whole script.
    try:
        duckdb.connect().execute("LOAD httpfs")
    except duckdb.Error:
        return
    assert fresh_duckdb(script).sql("SELECT count(*) FROM crawldb").fetchall() == [(5,)]
