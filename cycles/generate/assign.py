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
With ``generate.partition_by`` = domain or ip, the hosts sharing a slot key
(cycles/slotkey.py) are placed as one item, at the sum of their expected times.

**The seen-set.** For discovery inside the fetch (cycles/fetch/discovery.py) each partition
gets the URLs the crawl DB holds for its hosts as a Bloom filter (``seen/part-N.bloom``,
``fetch.follow_seen_fp``: ~1.2 bytes a URL at 1 %), and their count per host and URL
pattern (``seen/part-N.parquet``, schema.SEEN_COUNTS) for the trap caps. Written only when
``fetch.follow_outlinks_depth`` is on, by the partition's own task: a scan of the url, host
and pattern_hash columns of the crawl DB buckets that hold its hosts. Beside them, with
``fetch.follow_new_hosts``, the segment's known-hosts filter (``seen/hosts.bloom``: the crawl
DB's hosts and those claimed by pending segments, written once by generate's coordinator),
by which a worker tells a host nobody knows (cycles/fetch/newhosts.py).
"""

from __future__ import annotations

import heapq

import pyarrow as pa
import pyarrow.compute as pc

from cycles import schema
from cycles import segment as seg
from cycles.bloom import BloomFilter
from cycles.config import Config
from cycles.hostdb import load_host_state
from cycles.slotkey import slot_keys
from cycles.store import Store, StorePath

MIN_BLOOM_CAPACITY = 1000
"""A partition's seen-set holds at least this many URLs' worth of bits (a few KB)."""


def host_delays(store: Store, config: Config, hosts: list[str]) -> dict[str, float]:
    """Each host's delay between requests as the fetch worker will start it: the floor, or
    the host DB's Crawl-delay when longer (cycles/fetch/worker.py ``_init_slot``)."""
    floor = config.effective_delay_s()
    states = load_host_state(store, set(hosts)) if hosts else {}
    return {host: max(floor, float((states.get(host) or {}).get("crawl_delay_s") or 0.0)) for host in hosts}


def assign_hosts(urls_per_host: dict[str, int], delays: dict[str, float], partitions: int,
                 keys: dict[str, str] | None = None) -> dict[str, int]:
    """Longest-processing-time-first: host → partition, balancing ``urls × delay``.

    ``keys`` (host → slot key, cycles/slotkey.py; default: each host its own): hosts
    sharing a key share one politeness slot, so they are placed together, at the sum of
    their expected times. Ties are broken by key, then partition number, so the same input
    always gives the same assignment (a re-run generate, a test)."""
    keys = keys or {}
    expected: dict[str, float] = {}
    for host, n in urls_per_host.items():
        key = keys.get(host, host)
        expected[key] = expected.get(key, 0.0) + n * delays.get(host, 1.0)
    cost = sorted(((s, key) for key, s in expected.items()), key=lambda item: (-item[0], item[1]))
    loads = [(0.0, part) for part in range(max(1, partitions))]
    assignment: dict[str, int] = {}
    for expected_s, key in cost:
        load, part = heapq.heappop(loads)
        assignment[key] = part
        heapq.heappush(loads, (load + expected_s, part))
    return {host: assignment[keys.get(host, host)] for host in urls_per_host}


def assignment_table(assignment: dict[str, int]) -> pa.Table:
    hosts = sorted(assignment)
    return pa.table({"host": pa.array(hosts, pa.string()),
                     "partition": pa.array([assignment[h] for h in hosts], pa.int32())}, schema=schema.ASSIGNMENT)


def plan_partitions(store: Store, config: Config, selected: pa.Table | dict[str, int], partitions: int) -> pa.Table:
    """The segment's assignment table (schema.ASSIGNMENT) for the chosen URLs, or for their
    count per host (what generate's merge of the buckets' tops gives)."""
    if isinstance(selected, dict):
        urls_per_host = selected
    else:
        counts = pc.value_counts(selected["host"]).to_pylist()
        urls_per_host = {row["values"]: row["counts"] for row in counts}
    delays = host_delays(store, config, list(urls_per_host)) if partitions > 1 else {}
    keys = slot_keys(urls_per_host, config) if config.generate.partition_by != "host" else None
    return assignment_table(assign_hosts(urls_per_host, delays, partitions, keys))


def write_seen_set(store: Store, config: Config, folder: StorePath, con, crawldb_sql: str,
                   part: int) -> dict[str, int]:
    """Partition ``part``'s seen-set and pattern counts, from the crawl DB rows of its hosts
    (one task per partition, cycles/generate/generate.py ``write_partition``).

    ``con`` has the partition's rows of the segment's assignment registered as
    ``assignment``; ``crawldb_sql`` is the SQL source of the crawl DB files (of the version
    generate read) that hold its hosts. Returns counters."""
    rows = con.sql(f"""SELECT c.host, c.pattern_hash, count(*)::BIGINT AS urls
        FROM {crawldb_sql} c JOIN assignment a USING (host) WHERE a.partition = {int(part)}
        GROUP BY ALL ORDER BY c.host, c.pattern_hash""").to_arrow_table()
    total = int(pc.sum(rows["urls"]).as_py() or 0)
    store.write_table(seg.seen_counts_file(folder, part), rows.cast(schema.SEEN_COUNTS), schema.SEEN_COUNTS)
    bloom = BloomFilter(max(MIN_BLOOM_CAPACITY, total), config.fetch.follow_seen_fp)
    reader = con.sql(f"""SELECT c.url FROM {crawldb_sql} c JOIN assignment a USING (host)
        WHERE a.partition = {int(part)}""").to_arrow_reader(64 * 1024)
    for batch in reader:
        bloom.add_new(batch.column("url").to_pylist())
    store.write_bytes(seg.seen_bloom_file(folder, part), bloom.to_bytes())
    return {"generate/seen_urls": total, "generate/seen_bytes": len(bloom._array)}
