"""Which partition fetches each host, and what each partition knows of its hosts.

**Balance by expected fetch time.** A partition lasts as long as its slowest host's queue:
a host's URLs are fetched one at a time, a delay apart, so a host with ``n`` URLs and delay
``d`` needs about ``n × d`` seconds whatever else its partition holds. ``host_hash %
partitions`` spread hosts evenly by count, so a big host shared its partition with a third
of the small ones and that partition ran long after the others. :func:`assign_hosts` uses
longest-processing-time-first (Graham, 1969): hosts by expected time, longest first, each
to the partition with the least expected time so far — a host bigger than a partition's
fair share ends up alone, and the makespan is within 4/3 of the best. The result is the
segment's assignment (``assignment.parquet``, schema.ASSIGNMENT): every host in
exactly one partition. Everything that asks "whose is this host" reads it
(cycles/fetch/inline.py); a host in no fetch list falls back to ``host_hash % partitions``.

**The seen-set.** For discovery inside the fetch (cycles/fetch/discovery.py) each partition
gets the URLs the crawl DB holds for its hosts as a Bloom filter (``seen/part-N.bloom``,
``fetch.follow_seen_fp``: ~1.2 bytes a URL at 1 %), and their count per host and URL
pattern (``seen/part-N.parquet``, schema.SEEN_COUNTS) for the trap caps. Written only when
``fetch.follow_outlinks_depth`` is on; one scan of the crawl DB's url, host and
pattern_hash columns for the fetch list's hosts. Beside them, with ``fetch.follow_new_hosts``,
the segment's known-hosts filter (``seen/hosts.bloom``: the crawl DB's hosts and those
claimed by pending segments), by which a worker tells a host nobody knows
(cycles/fetch/newhosts.py).
"""

from __future__ import annotations

import heapq

import pyarrow as pa
import pyarrow.compute as pc

from cycles import schema
from cycles import segment as seg
from cycles.bloom import BloomFilter
from cycles.config import Config
from cycles.fetch.newhosts import write_known_hosts
from cycles.hostdb import load_host_state
from cycles.store import Store, StorePath

MIN_BLOOM_CAPACITY = 1000
"""A partition's seen-set holds at least this many URLs' worth of bits (a few KB)."""


def host_delays(store: Store, config: Config, hosts: list[str]) -> dict[str, float]:
    """Each host's delay between requests as the fetch worker will start it: the floor, or
    the host DB's Crawl-delay when longer (cycles/fetch/worker.py ``_init_slot``)."""
    floor = config.effective_delay_s()
    states = load_host_state(store, set(hosts)) if hosts else {}
    return {host: max(floor, float((states.get(host) or {}).get("crawl_delay_s") or 0.0)) for host in hosts}


def assign_hosts(urls_per_host: dict[str, int], delays: dict[str, float], partitions: int) -> dict[str, int]:
    """Longest-processing-time-first: host → partition, balancing ``urls × delay``.

    Ties are broken by host name, then partition number, so the same input always gives
    the same assignment (a re-run generate, a test)."""
    cost = sorted(((n * delays.get(host, 1.0), host) for host, n in urls_per_host.items()),
                  key=lambda item: (-item[0], item[1]))
    loads = [(0.0, part) for part in range(max(1, partitions))]
    assignment: dict[str, int] = {}
    for expected_s, host in cost:
        load, part = heapq.heappop(loads)
        assignment[host] = part
        heapq.heappush(loads, (load + expected_s, part))
    return assignment


def assignment_table(assignment: dict[str, int]) -> pa.Table:
    hosts = sorted(assignment)
    return pa.table({"host": pa.array(hosts, pa.string()),
                     "partition": pa.array([assignment[h] for h in hosts], pa.int32())}, schema=schema.ASSIGNMENT)


def plan_partitions(store: Store, config: Config, selected: pa.Table, partitions: int) -> pa.Table:
    """The segment's assignment table for the chosen URLs (schema.ASSIGNMENT)."""
    counts = pc.value_counts(selected["host"]).to_pylist()
    urls_per_host = {row["values"]: row["counts"] for row in counts}
    delays = host_delays(store, config, list(urls_per_host)) if partitions > 1 else {}
    return assignment_table(assign_hosts(urls_per_host, delays, partitions))


def write_seen_sets(store: Store, config: Config, folder: StorePath, con, crawldb_sql: str,
                    partitions: int) -> dict[str, int]:
    """Each partition's seen-set and pattern counts, from the crawl DB rows of its hosts.

    ``con`` has the segment's assignment registered as ``assignment``; ``crawldb_sql`` is
    the SQL source of the crawl DB version generate read. Returns counters."""
    counts = con.sql(f"""SELECT a.partition, c.host, c.pattern_hash, count(*)::BIGINT AS urls
        FROM {crawldb_sql} c JOIN assignment a USING (host) GROUP BY ALL
        ORDER BY a.partition, c.host, c.pattern_hash""").to_arrow_table()
    totals = {part: 0 for part in range(partitions)}
    for part in range(partitions):
        rows = counts.filter(pc.equal(counts["partition"], part)).drop_columns(["partition"])
        totals[part] = int(pc.sum(rows["urls"]).as_py() or 0)
        store.write_table(seg.seen_counts_file(folder, part), rows.cast(schema.SEEN_COUNTS), schema.SEEN_COUNTS)
    blooms = {part: BloomFilter(max(MIN_BLOOM_CAPACITY, totals[part]), config.fetch.follow_seen_fp)
              for part in range(partitions)}
    # Not sorted: each batch is split by partition (sorting every known URL cost more).
    reader = con.sql(f"""SELECT a.partition, c.url FROM {crawldb_sql} c JOIN assignment a USING (host)"""
                     ).to_arrow_reader(64 * 1024)
    for batch in reader:
        for part in pc.unique(batch.column("partition")).to_pylist():
            urls = batch.filter(pc.equal(batch.column("partition"), part)).column("url").to_pylist()
            blooms[part].add_new(urls)
    for part, bloom in blooms.items():
        store.write_bytes(seg.seen_bloom_file(folder, part), bloom.to_bytes())
    counters = {"generate/seen_urls": sum(totals.values()),
                "generate/seen_bytes": sum(len(b._array) for b in blooms.values())}
    if config.fetch.follow_new_hosts:
        counters.update(write_known_hosts(store, folder, con, crawldb_sql))
    return counters
