"""A bucket task's old rows through its base's key index (cycles/tables/keyindex.py).

Without an index, a bucket task reads ten columns of every old row into ``old_keys`` and
then every row again for the touched ones (update.py ``load_old_keys``,
``touched_rows_sql``). With one, it scans the bucket once, for the rows it can need:

- the rows of the URLs it looks up: the segment's results, its dedup marks, its sitemap
  hints, and the new links whose fingerprint the base's index (or a delta) holds — a link
  the index does not hold is new, and a hit is checked on the URL itself by this scan;
- the copies of a page marked now (``duplicate_of``), the rows of the demoted hosts and of
  the hosts with a learned variant parameter (the conditions of ``touched_rows_sql``).

That scan is ``old_keys``: every lookup of the task by URL finds there what it found in the
whole bucket, and the touched rows are taken from it. The trap caps' counts of the rows per
host and per pattern come from the index's sorted arrays, corrected by the deltas' rows
that the base does not hold. docs/update.md, "Update's indexes (session 15)".
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cycles.storage.store import Store, StorePath
from cycles.tables.crawldb import pattern_hash_sql
from cycles.tables.keyindex import KeyIndex, url_fingerprints

PROBED = "old_keys"
"""The temp table of the probed old rows (whole rows), named as update.py's ``old_keys``."""


def load_probed_rows(con, store: Store, old: str, index: KeyIndex, deltas: list[StorePath],
                     hint_files: list[StorePath], learned: pa.Table | None) -> str:
    """Temp table :data:`PROBED`: the old rows (``old``, base and deltas merged) the bucket
    task can need (module docstring). Needs the task's input tables (``fetched_all``,
    ``links_all``, ``marks``, ``demoted_hosts``); registers ``delta_new`` (the deltas'
    rows the base does not hold) for :func:`load_known_counts`. Returns the table's name."""
    delta_fps = load_delta_new(con, store, index, deltas)
    links = con.sql("SELECT url FROM links_all").to_arrow_table().column("url")
    fps = url_fingerprints(links)
    hit = index.holds_urls(fps) | np.isin(fps, delta_fps)
    con.register("probe_links", pa.table({"url": links.filter(pa.array(hit))}))
    hints = f" UNION SELECT url FROM {store.duckdb_source(con, hint_files)}" if hint_files else ""
    con.execute(f"""CREATE OR REPLACE TEMP TABLE probe_urls AS SELECT url FROM probe_links
        UNION SELECT url FROM fetched_all UNION SELECT url FROM marks{hints}""")
    con.unregister("probe_links")
    hosts = "SELECT host FROM demoted_hosts"
    if learned is not None and learned.num_rows:
        con.register("probe_learned", learned.select(["host"]))
        hosts += " UNION SELECT host FROM probe_learned"
    con.execute(f"""CREATE TEMP TABLE {PROBED} AS SELECT o.* FROM {old} o
        WHERE o.url IN (SELECT url FROM probe_urls) OR o.duplicate_of IN (SELECT url FROM marks)
           OR o.host IN ({hosts})""")
    return PROBED


def load_delta_new(con, store: Store, index: KeyIndex, deltas: list[StorePath]) -> np.ndarray:
    """Temp table ``delta_new`` (host, host_hash, pattern): the deltas' URLs whose
    fingerprint the base's index does not hold (rows the base lacks: they add to the
    counts). Returns the fingerprints of all the deltas' URLs."""
    parts = [f"SELECT url, host, host_hash, pattern_hash FROM {store.duckdb_source(con, [d])}" for d in deltas]
    if not parts:
        con.execute("CREATE OR REPLACE TEMP TABLE delta_new (host VARCHAR, host_hash UBIGINT, pattern UBIGINT)")
        return np.zeros(0, np.uint64)
    rows = con.sql(f"SELECT url, any_value(host) AS host, any_value(host_hash) AS host_hash, "
                   f"any_value(pattern_hash) AS pattern FROM ({' UNION ALL '.join(parts)}) GROUP BY url").to_arrow_table()
    fps = url_fingerprints(rows.column("url"))
    con.register("delta_rows", rows.filter(pa.array(~index.holds_urls(fps))).drop(["url"]))
    con.execute("CREATE OR REPLACE TEMP TABLE delta_new AS SELECT * FROM delta_rows")
    con.unregister("delta_rows")
    return fps


def load_known_counts(con, index: KeyIndex, fresh: str) -> tuple[str, str]:
    """The old rows per (host, pattern) and per host of the new URLs' hosts and patterns
    (``fresh``: SQL of the candidate links), from the index plus ``delta_new`` and
    ``fetched_new``: the two tables ``update.trap_limited_sql`` would have counted over
    every old row. Returns the SQL of (patterns, hosts)."""
    wanted = con.sql(f"SELECT DISTINCT host, host_hash, {pattern_hash_sql('url')} AS pattern FROM {fresh}").to_arrow_table()
    have = index.pattern_counts(wanted.column("host_hash").to_numpy(), wanted.column("pattern").to_numpy())
    con.register("index_patterns", pa.table({"host": wanted.column("host"), "pattern": wanted.column("pattern"),
                                             "have": have}))
    hosts = wanted.group_by(["host", "host_hash"]).aggregate([])
    con.register("index_hosts", pa.table({"host": hosts.column("host"),
                                          "have": index.host_counts(hosts.column("host_hash").to_numpy().astype(np.uint64))}))
    extra = (f"SELECT host, pattern FROM delta_new UNION ALL "
             f"SELECT host, {pattern_hash_sql('url')} AS pattern FROM fetched_new")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE known_patterns AS SELECT host, pattern, sum(have) AS have FROM (
        SELECT host, pattern, have FROM index_patterns UNION ALL SELECT host, pattern, 1 FROM ({extra})) GROUP BY ALL""")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE known_hosts AS SELECT host, sum(have) AS have FROM (
        SELECT host, have FROM index_hosts UNION ALL SELECT host, 1 FROM ({extra})) GROUP BY ALL""")
    con.unregister("index_patterns")
    con.unregister("index_hosts")
    return "known_patterns", "known_hosts"
