"""The crawl for analysts: views over the current version, their docs, query output, a Python API.

One home for the view definitions. ``crawl status``, ``crawl sql``, ``crawl sql --views``,
``crawl schema`` and ``cycles.open()`` all get their views from :func:`view_statements`:

- ``crawldb``    the *current* crawl DB version (not every kept version: a glob over
                 ``crawldb/v*/`` counts each URL once per kept version)
- ``hosts``      the current host DB
- ``fetchlist``  what generate chose, every segment, with a ``segment`` column
- ``fetched``    fetch results, every segment, with a ``segment`` column; ``warc_file``
                 relative to the store root, as in ``pages``
- ``outlinks``   outlinks, every segment, with a ``segment`` column
- ``pages``      the indexer feed, every batch
- ``segments``   every segment and its state (when the views were made)

Columns and views carry their docs from ``cycles/tables/schema.py`` (``schema.VIEWS``) as
``COMMENT ON``, so ``duckdb_columns()`` and ``duckdb_views()`` show them. Every view exists,
empty with its columns when the crawl has no such files yet.

Where the files are named: in a local store by absolute path; on S3, in the printed
script (:func:`views_script`) by ``s3://`` URL for DuckDB's httpfs extension, and in this
process through pyarrow datasets registered on the connection (no extension download).
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from urllib.parse import urlparse

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.config import Config, load_config
from cycles.tables.crawldb import connect, current_buckets, merged_sql, plain_connection, upgraded_sql
from cycles.errors import CrawlError, StageError, StoreError, is_damaged_parquet
from cycles.tables.hostdb import hostdb_files
from cycles.storage.durable import write_atomically
from cycles.storage.sources import parquet_sql
from cycles.storage.sql import ident, literal
from cycles.storage.store import Store, StorePath, utcnow

SEGMENT_VIEWS = ("fetchlist", "fetched", "outlinks")
"""Views over every segment's files of that folder, with a ``segment`` column."""

FORMATS = ("table", "csv", "json", "jsonl", "parquet")
"""``crawl sql --format``: a box for people; csv, a JSON array, JSON lines, Parquet for programs."""

SUFFIX_FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet",
                  ".txt": "table"}
"""``--out FILE`` without ``--format``: the format its suffix names."""

COPY_OPTIONS = {"csv": "FORMAT csv, HEADER true", "json": "FORMAT json, ARRAY true", "jsonl": "FORMAT json",
                "parquet": "FORMAT parquet, COMPRESSION zstd"}

ALL_ROWS = 2**31 - 1
"""The box's row and width limits when every row is wanted."""


def require_crawldb(store: Store) -> None:
    """A store without a crawl DB is an error, not an empty result: most likely ``--data``
    points at the wrong folder."""
    if store.manifest("crawldb") is None:
        raise StageError(f"no crawl DB in {store.uri}; check --data, or start with `crawl inject seeds.txt`")


# --- which files make up the current crawl ---------------------------------------------------
@dataclass
class CrawlFiles:
    """The files each view reads: the current crawl DB and host DB versions, every segment's
    committed output, every feed batch."""

    crawldb_version: str | None
    schema_version: int
    tables: dict[str, list[StorePath]] = field(default_factory=dict)
    segments: list[tuple[str, str]] = field(default_factory=list)
    """(segment id, state) of every segment, oldest first."""
    crawldb_buckets: list = field(default_factory=list)
    """The crawl DB's buckets (crawldb.BucketFiles: base and deltas), merged by the view."""


def crawl_files(store: Store, verify: bool) -> CrawlFiles:
    """The current crawl's files. ``verify``: check every crawl DB page's checksum first
    (DuckDB checks none), as the stages do, before this process reads them."""
    manifest, buckets = current_buckets(store, verify=verify)
    crawldb = [path for bucket in buckets for path in bucket.files]
    host_manifest = store.manifest("hostdb")
    tables = {"crawldb": crawldb, "hosts": hostdb_files(store, host_manifest) if host_manifest else []}
    states = seg.states(store)
    segments = [s for s, _ in states]
    tables["fetchlist"] = [p for s in segments for p in seg.files(store, s, seg.FETCHLIST)]
    for name in (seg.FETCHED, seg.OUTLINKS):
        # The chunks the fetched marker commits (what update reads), not an interrupted chunk's files.
        tables[name] = [p for s in segments for p in seg.output_files(store, seg.segment_dir(store, s), name)]
    tables["pages"] = store.list(store.path("pages"), "*.parquet")
    return CrawlFiles(manifest.version if manifest else None,
                      manifest.schema_version if manifest else schema.SCHEMA_VERSION, tables,
                      [(s, str(state)) for s, state in states], buckets)


# --- the view definitions -----------------------------------------------------------------------
def location(store: Store, path: StorePath) -> str:
    """How DuckDB names a store file in SQL: an absolute path, or an ``s3://`` URL."""
    return str(path) if store.local else "s3://" + str(path)


@functools.cache
def duckdb_types(name: str) -> tuple[str, ...]:
    """DuckDB's type of each column of the view ``name`` (as DuckDB reads the Parquet files)."""
    return tuple(str(t) for t in plain_connection().from_arrow(schema.VIEWS[name].empty_table()).types)


def empty_sql(name: str) -> str:
    """A table expression with the view's columns and no rows (plain SQL: usable in any DuckDB)."""
    columns = ", ".join(f'NULL::{t} AS {ident(f.name)}' for f, t in zip(schema.VIEWS[name], duckdb_types(name)))
    return f"(SELECT {columns} WHERE false)"


def source_sql(store: Store, name: str, files: list[StorePath], con: duckdb.DuckDBPyConnection | None) -> str:
    """A table expression over ``files``, with a ``segment`` column for the segment views.

    With ``con`` and a store on S3, the files are a pyarrow dataset registered on ``con``;
    else they are named in the SQL (``union_by_name``: a file written before a column was
    added reads it as null).
    """
    segment_column = name in SEGMENT_VIEWS
    if con is not None and not store.local:
        return store.duckdb_source(con, files, segment_column=segment_column)
    listed = [location(store, p) for p in files]
    if segment_column:
        # .../segments/<id>/<folder>/part-*.parquet: the id is the third name from the end.
        return (f"(SELECT * EXCLUDE (filename), split_part(filename, '/', -3) AS segment "
                f"FROM {parquet_sql(listed, ', filename = true, union_by_name = true')})")
    return parquet_sql(listed, ", union_by_name = true")


def column_sql(name: str, column: str) -> str:
    if name == "fetched" and column == "warc_file":
        # The segment's files hold it relative to the segment; the pages feed from the store
        # root. The view gives it from the root in both, so a join or a ranged read needs no fix-up.
        return "'segments/' || segment || '/' || warc_file AS warc_file"
    return ident(column)


def view_select(store: Store, name: str, files: CrawlFiles, con: duckdb.DuckDBPyConnection | None = None) -> str:
    """The SELECT defining view ``name``: its columns in schema order over its files."""
    if name == "segments":
        return segments_select(files.segments)
    paths = files.tables[name]
    if not paths:
        return f"SELECT * FROM {empty_sql(name)}"
    source = source_sql(store, name, paths, con)
    if name == "crawldb" and any(b.deltas for b in files.crawldb_buckets):
        source = crawldb_merged_sql(store, files.crawldb_buckets, con)  # one row per URL: deltas merged
    if name == "crawldb":
        source = upgraded_sql(source, files.schema_version)  # an older crawl DB, read in the current schema
    columns = ", ".join(column_sql(name, f.name) for f in schema.VIEWS[name])
    # By name after the typed empty table: a column no file has yet (files written before it
    # was added to schema.py) reads as null instead of failing the view.
    return f"SELECT {columns} FROM ({empty_sql(name)} UNION ALL BY NAME SELECT * FROM {source})"


def crawldb_merged_sql(store: Store, buckets: list, con: duckdb.DuckDBPyConnection | None) -> str:
    """The crawl DB's rows, each bucket's base merged with its deltas (crawldb.merged_sql),
    in plain SQL naming the files (or, on S3 with ``con``, datasets registered on it)."""
    def one(path: StorePath) -> str:
        return source_sql(store, "crawldb", [path], con)
    parts = [merged_sql(one(b.base), [one(d) for d in b.deltas]) for b in buckets]
    return "(" + " UNION ALL BY NAME ".join(f"SELECT * FROM {p}" for p in parts) + ")"


def segments_select(segments: list[tuple[str, str]]) -> str:
    """The ``segments`` view: the states as values (they live in marker files, not Parquet)."""
    if not segments:
        return f"SELECT * FROM {empty_sql('segments')}"
    rows = ", ".join(f"({literal(s)}, {literal(state)})" for s, state in segments)
    return f"SELECT * FROM (VALUES {rows}) AS segments(segment, state)"


def comment_statements(name: str) -> list[str]:
    """``COMMENT ON VIEW`` and ``COMMENT ON COLUMN`` for view ``name``, from cycles/tables/schema.py."""
    view = schema.VIEWS[name]
    doc = view.metadata[b"crawl.view"].decode()
    return ([f"COMMENT ON VIEW {name} IS {literal(doc)};"]
            + [f'COMMENT ON COLUMN {name}.{ident(f.name)} IS {literal(schema.doc_of(f))};' for f in view])


def view_statements(store: Store, files: CrawlFiles, con: duckdb.DuckDBPyConnection | None = None) -> list[str]:
    """Every view's CREATE and its comments: the one definition of the analysts' views."""
    statements = []
    for name in schema.VIEWS:
        statements.append(f"CREATE OR REPLACE VIEW {name} AS {view_select(store, name, files, con)};")
        statements += comment_statements(name)
    return statements


def open_views(store: Store, config: Config, verify: bool = True) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the views over the current crawl. ``verify``: check every
    page of the crawl DB first (:func:`crawl_files`)."""
    # store=None: spills under the system temp folder, so that a read-only store works and
    # stays byte-identical. A database of its own: the views must not outlive this
    # connection in the process's shared one, nor meet another store's views there.
    con = connect(None, config, own_database=True)
    files = crawl_files(store, verify=verify)
    for statement in view_statements(store, files, con):
        con.execute(statement)
    return con


# --- the views as a script for plain DuckDB ------------------------------------------------------
def s3_setup_statements(store: Store) -> list[str]:
    """DuckDB's S3 support for the printed views: the httpfs extension and a secret that takes
    the credentials from the AWS settings (never written into the script)."""
    options = ["TYPE s3", "PROVIDER credential_chain", "CHAIN 'env;config'"]
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        url = urlparse(endpoint)
        options += [f"ENDPOINT {literal(url.netloc or url.path)}", "URL_STYLE 'path'",
                    f"USE_SSL {'false' if url.scheme == 'http' else 'true'}"]
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        options.append(f"REGION {literal(region)}")
    bucket = str(store.root).split("/")[0]
    options.append(f"SCOPE {literal('s3://' + bucket)}")
    return ["INSTALL httpfs;", "LOAD httpfs;", "INSTALL aws;", "LOAD aws;",
            f"CREATE OR REPLACE SECRET crawl_store ({', '.join(options)});"]


def views_script(store: Store) -> str:
    """``crawl sql --views``: the views as SQL for plain DuckDB (``.read views.sql``).

    A snapshot: it names the files of the current crawl DB version and of the segments
    there are now; run it again after each update.
    """
    require_crawldb(store)
    files = crawl_files(store, verify=False)  # names files only; DuckDB reads them later
    header = [f"-- Views over the crawl in {store.uri}: crawl DB version {files.crawldb_version}, "
              f"{len(files.segments)} segments, {len(files.tables['pages'])} feed batches.",
              f"-- Written by `crawl sql --views` at {utcnow().isoformat(timespec='seconds')}: a snapshot of the "
              "files there were; run it again after each update.",
              "-- Column docs: SELECT table_name, column_name, comment FROM duckdb_columns() WHERE comment IS NOT NULL;"]
    setup = [] if store.local else (
        ["-- S3: credentials from the AWS settings (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE)."]
        + s3_setup_statements(store))
    return "\n".join(header + setup + view_statements(store, files)) + "\n"


# --- query results in a format ------------------------------------------------------------------
def output_format(requested: str | None, out: str | None, tty: bool) -> str:
    """The format of ``crawl sql``: as asked; else by ``--out``'s suffix; else a table on a
    terminal and CSV in a pipe or file (every row, machine-readable)."""
    if requested is not None:
        if requested not in FORMATS:
            raise CrawlError(f"unknown --format {requested!r}; choose one of {', '.join(FORMATS)}")
        return requested
    if out is not None and out != "-":
        suffix = Path(out).suffix.lower()
        if suffix not in SUFFIX_FORMATS:
            raise CrawlError(f"cannot tell the format of --out {out} from its suffix; add --format "
                             f"({', '.join(FORMATS)})")
        return SUFFIX_FORMATS[suffix]
    return "table" if tty else "csv"


def run_query(con: duckdb.DuckDBPyConnection, query: str) -> duckdb.DuckDBPyRelation | None:
    """The query's relation (None for a statement without a result), errors as CrawlError."""
    try:
        return con.sql(query)
    except duckdb.Error as exc:
        raise query_error(exc) from None


def query_error(exc: duckdb.Error) -> Exception:
    if is_damaged_parquet(str(exc)):
        return exc  # a damaged store file, not a bad query: the CLI names the file and the repair
    return CrawlError(f"query failed: {exc}")


def box(relation: duckdb.DuckDBPyRelation, every_row: bool) -> str:
    """DuckDB's table box: cut to fit a terminal, or ``every_row`` at full width."""
    if not every_row:
        return str(relation)
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        relation.show(max_rows=ALL_ROWS, max_width=ALL_ROWS)
    return text.getvalue()


def write_result(con: duckdb.DuckDBPyConnection, relation: duckdb.DuckDBPyRelation | None, fmt: str,
                 target: Path, every_row: bool = True) -> None:
    """Write the result to ``target`` in ``fmt`` (DuckDB's COPY for all but the table)."""
    try:
        if relation is None:
            target.write_text("")
        elif fmt == "table":
            target.write_text(box(relation, every_row))
        else:
            con.register("crawl_result", relation)
            con.execute(f"COPY crawl_result TO {literal(str(target))} ({COPY_OPTIONS[fmt]})")
    except duckdb.Error as exc:
        raise query_error(exc) from None


def deliver_result(con: duckdb.DuckDBPyConnection, relation: duckdb.DuckDBPyRelation | None, fmt: str,
                   out: str | None, tty: bool) -> None:
    """Write the result to ``out`` (atomically: a temporary file beside it, renamed over it)
    or to stdout. Run completely before anything is shown, so that an error mid-query
    leaves neither half a file nor half a table."""
    if out is not None and out != "-":
        target = Path(out)
        if not target.parent.is_dir():
            raise CrawlError(f"cannot write {out}: folder {target.parent} does not exist")
        write_atomically(target, lambda tmp: write_result(con, relation, fmt, tmp))
        return
    if fmt == "table" and tty and relation is not None:
        try:
            sys.stdout.write(box(relation, every_row=False) + "\n")  # a person reads it: cut to fit
        except duckdb.Error as exc:
            raise query_error(exc) from None
        return
    with tempfile.TemporaryDirectory(prefix="crawl-sql-") as folder:
        tmp = Path(folder) / f"result.{fmt}"
        write_result(con, relation, fmt, tmp)
        sys.stdout.flush()
        with open(tmp, "rb") as fh:
            while chunk := fh.read(1 << 20):
                sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()


def sql_to_output(store: Store, config: Config, query: str, fmt: str | None, out: str | None) -> None:
    """``crawl sql``: run ``query`` over the views, write its result (see :func:`output_format`)."""
    require_crawldb(store)
    tty = sys.stdout.isatty()
    fmt = output_format(fmt, out, tty)
    con = open_views(store, config)
    deliver_result(con, run_query(con, query), fmt, out, tty)


# --- crawl schema -----------------------------------------------------------------------------
def schema_text(table: str | None = None) -> str:
    """``crawl schema [TABLE]``: each view's doc, then its columns with DuckDB type and doc."""
    if table is not None and table not in schema.VIEWS:
        raise CrawlError(f"no table {table!r}; the tables are {', '.join(schema.VIEWS)}")
    lines = []
    for name in [table] if table else schema.VIEWS:
        view = schema.VIEWS[name]
        lines.append(f"{name}: {view.metadata[b'crawl.view'].decode()}")
        width = max(len(f.name) for f in view)
        type_width = max(len(t) for t in duckdb_types(name))
        lines += [f"  {f.name:<{width}}  {t:<{type_width}}  {schema.doc_of(f)}"
                  for f, t in zip(view, duckdb_types(name))]
        lines.append("")
    return "\n".join(lines).rstrip("\n")


# --- the Python API ----------------------------------------------------------------------------
class Crawl:
    """An open crawl: each view as a DuckDB relation, and the pages feed as record batches.

    >>> import cycles
    >>> crawl = cycles.open("data")                    # or "s3://bucket/prefix"
    >>> crawl.crawldb.aggregate("status, count(*)", "status").fetchall()
    >>> crawl.to_polars("SELECT host, count(*) n FROM fetched GROUP BY host")
    >>> for batch in crawl.page_batches():               # pyarrow.RecordBatch, every batch
    ...     ...

    The relations are lazy: DuckDB reads the files when a result is asked for. The views are
    those of ``crawl sql`` (the current crawl DB version, every segment), fixed when opened.
    """

    def __init__(self, store: Store, config: Config, verify: bool = True):
        require_crawldb(store)
        self.store = store
        self.config = config
        self.con = open_views(store, config, verify)

    def __repr__(self) -> str:
        return f"cycles.Crawl({self.store.uri!r})"

    def __enter__(self) -> Crawl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()

    def table(self, name: str) -> duckdb.DuckDBPyRelation:
        """The view ``name`` (see ``crawl schema``) as a relation."""
        if name not in schema.VIEWS:
            raise CrawlError(f"no table {name!r}; the tables are {', '.join(schema.VIEWS)}")
        return self.con.table(name)

    crawldb = property(lambda self: self.table("crawldb"), doc="The current crawl DB: one row per known URL.")
    hosts = property(lambda self: self.table("hosts"), doc="The current host DB: one row per host.")
    fetchlist = property(lambda self: self.table("fetchlist"), doc="What generate chose, with a segment column.")
    fetched = property(lambda self: self.table("fetched"), doc="Fetch attempts, with a segment column.")
    outlinks = property(lambda self: self.table("outlinks"), doc="Links found, with a segment column.")
    pages = property(lambda self: self.table("pages"), doc="The pages feed, every batch.")
    segments = property(lambda self: self.table("segments"), doc="Every segment and its state.")

    def sql(self, query: str) -> duckdb.DuckDBPyRelation:
        """A query over the views, as a relation."""
        relation = run_query(self.con, query)
        if relation is None:
            raise CrawlError("the statement gives no result; query with SELECT")
        return relation

    def _relation(self, table_or_query: str) -> duckdb.DuckDBPyRelation:
        return self.table(table_or_query) if table_or_query in schema.VIEWS else self.sql(table_or_query)

    def arrow(self, table_or_query: str) -> pa.Table:
        """A view (by name) or a query's result as a pyarrow Table."""
        return self._relation(table_or_query).to_arrow_table()

    def to_polars(self, table_or_query: str):
        """A view (by name) or a query's result as a polars DataFrame (needs ``polars``:
        ``pip install 'crawl[analysis]'``)."""
        try:
            import polars
        except ImportError:
            raise CrawlError("to_polars needs polars: pip install polars (or the crawl[analysis] extra)") from None
        return polars.from_arrow(self.arrow(table_or_query))

    def df(self, table_or_query: str):
        """A view (by name) or a query's result as a pandas DataFrame (needs ``pandas``)."""
        try:
            import pandas  # noqa: F401  (DuckDB's conversion imports it too; this names what is missing)
        except ImportError:
            raise CrawlError("df needs pandas: pip install pandas (or use to_polars / arrow)") from None
        return self._relation(table_or_query).df()

    def page_batches(self, consumer: str | None = None, *, commit: bool = False,
                     limit: int | None = None) -> Iterator[pa.RecordBatch]:
        """The pages feed as pyarrow RecordBatches (schema.PAGES), oldest batch first.

        Without ``consumer``: every batch. With one: the batches after its cursor, and the
        cursor stays where it is unless ``commit`` — then it moves past them only once the
        iteration has run to its end (stop early, or fail, and the next read gets the same
        pages), holding the consumer's lock meanwhile, like ``crawl pages``.
        """
        return iter_feed(self.store, consumer, commit, limit)


def iter_feed(store: Store, consumer: str | None, commit: bool, limit: int | None) -> Iterator[pa.RecordBatch]:
    from cycles.tables.pages import batches, commit_cursor, consumer_lock, pending_batches, read_cursor

    if consumer is None:
        if commit:
            raise CrawlError("commit needs a consumer name: the cursor is the consumer's")
        yield from batches_of(store, [store.path("pages", b) for b in batches(store)[:limit]])
        return
    with consumer_lock(store, consumer) if commit else contextlib.nullcontext():
        last, registered = read_cursor(store, consumer)
        pending = pending_batches(store, last, limit)
        yield from batches_of(store, [store.path("pages", b) for b in pending])
        if commit and (pending or not registered):
            commit_cursor(store, consumer, last, pending[-1] if pending else last)


def batches_of(store: Store, paths: list[StorePath]) -> Iterator[pa.RecordBatch]:
    """The record batches of these feed files, one row group at a time, page checksums checked."""
    for path in paths:
        try:
            with store.fs.open_input_file(str(path)) as fh:
                for batch in pq.ParquetFile(fh, page_checksum_verification=True).iter_batches():
                    yield batch
        except (pa.ArrowInvalid, OSError) as exc:
            raise StoreError(f"{store.uri_of(path)} is not a readable Parquet file ({exc}); restore it from "
                             "backup, or remove it (its pages are lost to the feed)") from None


def open_crawl(data: str | os.PathLike | Store, config: Config | str | os.PathLike | None = None, *,
               verify: bool = True) -> Crawl:
    """``cycles.open``: open the crawl in ``data`` (a folder or ``s3://bucket/prefix``) for reading.

    ``config``: a Config, a TOML file, or None for the defaults (only DuckDB's memory limit
    and threads matter here). ``verify``: read every page of the current crawl DB first and
    check its checksum, as ``crawl sql`` does (DuckDB checks none); ``False`` opens a large
    crawl at once, and a damaged page may then be read without an error. A store without a
    crawl DB is an error.
    """
    store = data if isinstance(data, Store) else Store(data)
    if not isinstance(config, Config):
        config = load_config(config)
    return Crawl(store, config, verify)
