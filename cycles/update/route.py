"""Update's routing by chunk: each group of fetch chunks prepared and cut by crawl DB bucket.

A segment's fetch output comes in chunks (cycles/tables/segment.py: ``fetched/``, ``outlinks/``
and ``sitemaps/`` ``part-NNNNN-cNNNNNN.parquet``). Update used to load all of them into
the coordinating process; now one :func:`route_chunks` task per group of chunks of one
partition (at most :data:`ROUTE_TASK_ROWS` rows) runs on the stage's executor — the same
as the bucket tasks, so on a cluster no process reads the whole segment — and writes, for
each bucket its rows fall in (``update/`` is ``seg.UPDATE_INPUTS``)::

    update/results/bucket-NNNNN/<group>.parquet   fetch results, redirect targets normalised (ROUTED_FETCHED)
    update/links/bucket-NNNNN/<group>.parquet     followed links, normalised and filtered (ROUTED_LINKS)
    update/sitemaps/bucket-NNNNN/<group>.parquet  the sitemaps' hints (cycles/update/sitemaps.py HINTS)
    update/inlinks/bucket-NNNNN/<group>.parquet   link graph: links from other hosts (ROUTED_INLINKS)
    update/host_links/bucket-NNNNN/<group>.parquet  link graph: (host, from_host) pairs with either
                                                  host in host graph part N (cycles/update/hostrank.py)

It returns only counters. What needs the whole segment is resolved where a URL's rows
meet, in its bucket's task (cycles/update/update.py ``update_bucket``): a URL's links
from several chunks keep the smallest depth (then ``update.max_depth`` and the score
1/(depth+1), as outlinks.prepare_outlinks does), and a URL fetched in several chunks
keeps a listed result over an inline one and the newest (:func:`resolved_fetched_sql`).

Whether a result is *listed* (its URL is in the fetch list, else it is a redirect target
or a link fetched inline and is normalised like a link) is checked against the group's
own partition's fetch list: a partition fetches inline only URLs of its own hosts
(cycles/fetch/inline.py), whose listed URLs are all in that list.

A retried task (a Dask worker lost, the task run again elsewhere) is harmless: a group's
files are named by the group and hold the same rows, sorted by every column, for the same
inputs, so the second attempt writes the same files over the first (each write atomic).

The counters are summed over the groups: ``filter/<reason>``, ``sitemap/listed``,
``update/followed_target_rejected`` and ``linkgraph/links`` count distinct URLs (pairs) per
group, so a URL dropped in two groups counts twice.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.config import Config
from cycles.tables.crawldb import bucket_of, connect
from cycles.storage.store import Store, StorePath
from cycles.tables.linkdb import part_sql
from cycles.update.outlinks import normalised_links
from cycles.update.sitemaps import SITEMAP_DEPTH, HINTS, hints_of_files, sitemap_files
from cycles.urls import Normalizer, UrlFilter, host_hashes, url_host
from cycles.storage.sql import literal

ROUTE_TASK_ROWS = 250_000
"""Fetched plus outlink rows per routing task (a group of chunks of one partition): ~1 s
of normalising, and a few tens of MB of memory; small enough that a segment makes several
tasks for the executor's workers, large enough that a task's start (a DuckDB connection,
the partition's fetch list read) does not count."""

FETCHED_COLUMNS = ["url", "host", "outcome", "fetched_at", "http_status", "etag", "last_modified",
                   "redirect_to", "error", "content_hash", "minhash"]

ROUTED_FETCHED = pa.schema([schema.FETCHED.field(name) for name in FETCHED_COLUMNS]
                           + [pa.field("listed", pa.bool_()), pa.field("host_hash", pa.uint64())])
"""A fetch result routed to its bucket: its columns update reads, ``listed`` (the URL is in
the fetch list) and its host's hash. A result that was not listed has its URL normalised."""

ROUTED_LINKS = pa.schema([("url", pa.string()), ("host", pa.string()), ("host_hash", pa.uint64()),
                          ("depth", pa.int16())])
"""A followed link, normalised and filtered, with the smallest depth it had in its group
(before ``update.max_depth``: the bucket task applies it to the smallest over all groups)."""

ROUTED_INLINKS = pa.schema([("url", pa.string()), ("host_hash", pa.uint64()), ("from_host", pa.string())])
"""A followed link from another host, for the link DB (cycles/update/linkgraph.py)."""

HOST_LINKS = pa.schema([("host", pa.string()), ("from_host", pa.string())])
"""A (target host, linking host) pair of followed links, for the host graph."""

KINDS = {"results": ROUTED_FETCHED, "links": ROUTED_LINKS, "sitemaps": HINTS, "inlinks": ROUTED_INLINKS,
         "host_links": HOST_LINKS}
"""The routed inputs' folders under ``update/`` and their rows (``results``, not ``fetched``:
a path with ``/fetched/`` is a fetch chunk's, which the fault tests match on, cycles/storage/faults.py)."""

# A canonical URL has no userinfo: its host runs from "://" to ":", "/" (or "]" for IPv6).
HOST_OF_URL = r"^[a-z]+://(\[[^\]]*\]|[^:/?#]*)"


@dataclass(frozen=True)
class RouteTask:
    """One group of chunks to route: locations, ids and the config (picklable)."""

    store_uri: str
    config: Config
    segment: str
    name: str
    """The group's name (its first chunk): the name of every file it writes."""
    fetched: tuple[StorePath, ...]
    outlinks: tuple[StorePath, ...]
    sitemaps: tuple[StorePath, ...]
    fetchlist: tuple[StorePath, ...]
    """The fetch list of the group's partition (every fetch list if the names do not tell)."""
    buckets: int
    workers: int = 1
    """How many such tasks run at once on this machine (they share memory and threads)."""


def routed_folder(inputs: StorePath, kind: str, bucket: int) -> StorePath:
    return inputs / kind / f"bucket-{bucket:05d}"


def routed_files(store: Store, inputs: StorePath, kind: str, bucket: int) -> list[StorePath]:
    """One bucket's routed files of ``kind`` (one per group that had rows for it)."""
    return store.list(routed_folder(inputs, kind, bucket), "*.parquet")


def routed_source(con, store: Store, files: list[StorePath], empty: pa.Schema, name: str) -> str:
    """SQL source over ``files``, or over an empty table of ``empty`` (registered as ``name``)."""
    if files:
        return store.duckdb_source(con, files)
    con.register(name, empty.empty_table())
    return name


def resolved_fetched_sql(source: str) -> str:
    """The routed fetch results of ``source`` as update applies them: every listed result,
    and of a URL reached only outside the fetch list (two spellings of a redirect target,
    or in two chunks) its newest result. A listed result wins over an inline one."""
    return f"""(SELECT * EXCLUDE (listed) FROM {source} WHERE listed
        UNION ALL BY NAME
        (SELECT * EXCLUDE (listed) FROM {source}
         WHERE NOT listed AND url NOT IN (SELECT url FROM {source} WHERE listed)
         QUALIFY row_number() OVER (PARTITION BY url ORDER BY fetched_at DESC NULLS LAST, outcome) = 1))"""


# --- the coordinator's side: the groups ---------------------------------------------------
_PARTITION = re.compile(r"^part-(\d+)")


def chunk_rows(store: Store, seg_dir: StorePath, names: list[str], fetched: dict, outlinks: dict) -> dict[str, int]:
    """Rows (fetched + outlinks) of each chunk: from the fetched marker, else the footers."""
    marker = seg.read_marker(store, seg_dir.name, seg.Fetched) if store.exists(seg_dir / seg.Fetched.FILE) else None
    if marker is not None and marker.chunks is not None:
        listed = {entry["chunk"] + ".parquet": entry["fetched_rows"] + entry["outlinks_rows"] for entry in marker.chunks}
        if all(name in listed for name in names):
            return listed
    return {name: sum(store.read_metadata(files[name]).num_rows for files in (fetched, outlinks) if name in files)
            for name in names}


def route_tasks(store: Store, config: Config, segment: str, buckets: int, workers: int,
                max_rows: int | None = None) -> list[RouteTask]:
    """The segment's chunks in groups: consecutive chunks of one partition, at most
    ``max_rows`` (default :data:`ROUTE_TASK_ROWS`) rows a group (a larger chunk alone)."""
    max_rows = ROUTE_TASK_ROWS if max_rows is None else max_rows
    seg_dir = seg.segment_dir(store, segment)
    fetched = {p.name: p for p in seg.output_files(store, seg_dir, seg.FETCHED)}
    outlinks = {p.name: p for p in seg.output_files(store, seg_dir, seg.OUTLINKS)}
    sitemaps = {p.name: p for p in sitemap_files(store, seg_dir)}
    names = sorted(set(fetched) | set(outlinks))
    rows = chunk_rows(store, seg_dir, names, fetched, outlinks)
    fetchlists = {p.name: p for p in store.list(seg_dir / seg.FETCHLIST, seg.PART_GLOB)}

    def partition(name: str) -> str:
        match = _PARTITION.match(name)
        return match.group(0) if match else ""

    groups: list[list[str]] = []
    total = 0
    for name in names:
        if groups and partition(groups[-1][0]) == partition(name) and total + rows[name] <= max_rows:
            groups[-1].append(name)
            total += rows[name]
        else:
            groups.append([name])
            total = rows[name]
    tasks = []
    for group in groups:
        own = fetchlists.get(partition(group[0]) + ".parquet")
        tasks.append(RouteTask(
            store.uri, config, segment, group[0].removesuffix(".parquet"),
            tuple(fetched[n] for n in group if n in fetched), tuple(outlinks[n] for n in group if n in outlinks),
            tuple(sitemaps[n] for n in group if n in sitemaps),
            (own,) if own is not None else tuple(fetchlists.values()), buckets, workers))
    return tasks


# --- the task -----------------------------------------------------------------------------
def route_chunks(task: RouteTask) -> dict[str, int]:
    """Route one group of chunks to per-bucket files (module doc); returns its counters.

    Reads only the group's chunk files, its partition's fetch list and the segment's marks
    (``update/marks.parquet``, written by the coordinator before these tasks run).
    """
    store, config = Store(task.store_uri), task.config
    con = connect(store, config, task.workers)
    inputs = seg.segment_dir(store, task.segment) / seg.UPDATE_INPUTS
    counters: Counter = Counter()
    try:
        route_fetched(con, store, task, inputs, counters)
        route_links(con, store, task, inputs, counters)
        if task.sitemaps:
            hints = hints_of_files(con, store, list(task.sitemaps), config)
            con.register("hints_routed", hints)
            write_by_bucket(store, con, "hints_routed", inputs, "sitemaps", task.name, task.buckets)
            con.unregister("hints_routed")
    finally:
        con.close()
    return dict(counters)


def route_fetched(con, store: Store, task: RouteTask, inputs: StorePath, counters: Counter) -> None:
    """The group's fetch results with their host hash and ``listed``; a result for a URL not
    in the fetch list (a redirect target followed inline) gets its URL normalised like an
    outlink, and is dropped when the URL filters reject it."""
    if not task.fetched:
        return
    source = store.duckdb_source(con, list(task.fetched))
    fetchlist = (store.duckdb_source(con, list(task.fetchlist)) if task.fetchlist
                 else "(SELECT NULL::VARCHAR AS url WHERE false)")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE fetched_raw AS
        SELECT {", ".join(FETCHED_COLUMNS)}, url IN (SELECT url FROM {fetchlist}) AS listed FROM {source}""")
    extra = [u for (u,) in con.execute("SELECT DISTINCT url FROM fetched_raw WHERE NOT listed").fetchall()]
    normalizer, url_filter = Normalizer(task.config.urls), UrlFilter(task.config.urls)
    renamed = []
    for url in extra:
        norm = normalizer.normalize(url)
        if norm is None or url_filter.reason(norm):
            counters["update/followed_target_rejected"] += 1
            continue
        renamed.append((url, norm))
    con.register("renamed", pa.table({"raw": pa.array([r for r, _ in renamed], pa.string()),
                                      "url": pa.array([n for _, n in renamed], pa.string()),
                                      "host": pa.array([url_host(n) for _, n in renamed], pa.string())}))
    hosts = [h for (h,) in con.execute("SELECT DISTINCT host FROM fetched_raw WHERE listed").fetchall()]
    hosts = sorted(set(hosts) | {url_host(n) for _, n in renamed})
    con.register("host_hashes", pa.table({"host": pa.array(hosts, pa.string()), "host_hash": host_hashes(hosts)}))
    con.execute("""CREATE OR REPLACE TEMP TABLE fetched_routed AS
        SELECT f.*, h.host_hash
        FROM (SELECT * FROM fetched_raw WHERE listed
              UNION ALL BY NAME
              SELECT f.* REPLACE (r.url AS url, r.host AS host)
              FROM fetched_raw f JOIN renamed r ON f.url = r.raw WHERE NOT f.listed) f
        JOIN host_hashes h USING (host)""")
    for name in ("renamed", "host_hashes"):
        con.unregister(name)
    write_by_bucket(store, con, "fetched_routed", inputs, "results", task.name, task.buckets)
    con.execute("DROP TABLE fetched_raw")
    con.execute("DROP TABLE fetched_routed")


def route_links(con, store: Store, task: RouteTask, inputs: StorePath, counters: Counter) -> None:
    """The group's followed links (minus those found on exact copies, plus its sitemaps'
    URLs at depth SITEMAP_DEPTH), normalised and filtered; and for the link graph its
    (target, linking host) pairs."""
    parts = []
    if task.outlinks:
        # An exact copy's outlinks were already followed from its canonical page.
        con.execute(f"""CREATE OR REPLACE TEMP TABLE copies AS SELECT DISTINCT url FROM
            {store.duckdb_source(con, [inputs / 'marks.parquet'])} WHERE kind = 'duplicate'""")
        source = store.duckdb_source(con, list(task.outlinks))
        counters["outlinks/from_duplicates"] += con.execute(
            f"SELECT count(*) FROM {source} WHERE from_url IN (SELECT url FROM copies)").fetchall()[0][0]
        parts.append(f"""SELECT url, nofollow, depth, from_url FROM {source}
                         WHERE from_url NOT IN (SELECT url FROM copies)""")
    if task.sitemaps:
        listed = con.execute(f"""SELECT count(*) FROM (SELECT DISTINCT url FROM
            {store.duckdb_source(con, list(task.sitemaps))})""").fetchall()[0][0]
        counters["sitemap/listed"] += listed
        parts.append(f"""SELECT DISTINCT url, false AS nofollow, {SITEMAP_DEPTH}::SMALLINT AS depth,
                         NULL::VARCHAR AS from_url FROM {store.duckdb_source(con, list(task.sitemaps))}""")
    if not parts:
        return
    con.execute("CREATE OR REPLACE TEMP TABLE chunk_links AS " + " UNION ALL ".join(parts))
    kept = normalised_links(con, "chunk_links", task.config, counters)
    con.register("links_kept", kept)
    con.execute("""CREATE OR REPLACE TEMP TABLE links_routed AS
        SELECT url, any_value(host) AS host, any_value(host_hash) AS host_hash, min(depth)::SMALLINT AS depth
        FROM links_kept GROUP BY url""")
    write_by_bucket(store, con, "links_routed", inputs, "links", task.name, task.buckets)
    con.execute("DROP TABLE links_routed")
    if task.config.update.link_graph:
        route_link_graph(con, store, task, inputs, counters)
    con.unregister("links_kept")
    con.execute("DROP TABLE chunk_links")


def route_link_graph(con, store: Store, task: RouteTask, inputs: StorePath, counters: Counter) -> None:
    """The group's followed links as distinct (target, linking host) pairs, targets
    normalised (by the raw spelling each kept link came from): the other-host ones routed to
    the target's bucket (inlinks), and the distinct host pairs (the host graph). Sitemap
    URLs have no linking page and are no links here."""
    con.execute(f"""CREATE OR REPLACE TEMP TABLE seg_links AS
        SELECT DISTINCT m.url, m.host, m.host_hash, regexp_extract(o.from_url, {literal(HOST_OF_URL)}, 1) AS from_host
        FROM chunk_links o JOIN links_kept m ON o.url = m.raw
        WHERE NOT o.nofollow AND o.from_url IS NOT NULL""")
    con.execute("DELETE FROM seg_links WHERE from_host = '' OR host IS NULL OR host = ''")
    links = con.execute("SELECT count(*) FROM seg_links").fetchall()[0][0]
    counters["linkgraph/links"] += links
    if links:
        con.execute("""CREATE OR REPLACE TEMP TABLE seg_inlinks AS
            SELECT url, host_hash, from_host FROM seg_links WHERE from_host <> host""")
        write_by_bucket(store, con, "seg_inlinks", inputs, "inlinks", task.name, task.buckets)
        con.execute("DROP TABLE seg_inlinks")
        # Each host graph part's build task reads only its own pairs: a pair goes to the part
        # of its linking host (the edge's) and to its target's (a node), not the whole
        # segment's pairs to every part (issue #11: no process reads a whole segment).
        con.execute(f"""CREATE OR REPLACE TEMP TABLE seg_host_links AS
            SELECT DISTINCT part AS host_hash, host, from_host FROM (
                SELECT {part_sql('host', task.buckets)} AS part, host, from_host FROM seg_links
                UNION ALL SELECT {part_sql('from_host', task.buckets)}, host, from_host FROM seg_links)""")
        write_by_bucket(store, con, "seg_host_links", inputs, "host_links", task.name, task.buckets)
        con.execute("DROP TABLE seg_host_links")
    con.execute("DROP TABLE seg_links")


def write_by_bucket(store: Store, con, table: str, inputs: StorePath, kind: str, name: str, buckets: int) -> int:
    """``table``'s rows cut by the bucket of their ``host_hash`` into
    ``inputs/kind/bucket-N/name.parquet`` (only buckets with rows get a file); returns the
    buckets written. Sorted by every column: the same rows give the same file."""
    reader = con.sql(f"SELECT {bucket_of('host_hash', buckets)} AS _bucket, * FROM {table} ORDER BY ALL"
                     ).to_arrow_reader(64 * 1024)
    out_schema = KINDS[kind]
    written = 0
    for bucket, pieces in itertools.groupby(bucket_runs(reader), key=lambda piece: piece[0]):
        store.write_batches(routed_folder(inputs, kind, bucket) / f"{name}.parquet",
                            (batch for _, batch in pieces), out_schema)
        written += 1
    return written


def bucket_runs(batches) -> Iterator[tuple[int, pa.RecordBatch]]:
    """(bucket, rows) for each run of one bucket in batches sorted by ``_bucket``."""
    for batch in batches:
        column = batch.column("_bucket").to_numpy()
        rows = batch.drop_columns(["_bucket"])
        edges = [0, *(np.flatnonzero(column[1:] != column[:-1]) + 1).tolist(), len(column)]
        for start, end in zip(edges, edges[1:]):
            if end > start:
                yield int(column[start]), rows.slice(start, end - start)


def route_segment(store: Store, config: Config, segment: str, buckets: int, executor, counters: Counter) -> int:
    """Run the segment's routing tasks on ``executor``; adds their counters, returns how many ran."""
    tasks = route_tasks(store, config, segment, buckets, executor.workers)
    for done in executor.map(route_chunks, tasks):
        counters.update(done)
    return len(tasks)
