"""Which partition fetches each host, and what each partition knows of its hosts.

**Balance by expected fetch time.** A partition lasts as long as its slowest host's queue:
a host's URLs are fetched one at a time, a delay apart, so a host with ``n`` URLs and delay
``d`` needs about ``n × d`` seconds whatever else its partition holds. ``host_hash %
partitions`` spread hosts evenly by count, so a big host shared its partition with a third
of the small ones and that partition ran long after the others. :func:`lpt` is
longest-processing-time-first (Graham, 1969): items by expected time, longest first, each
to the partition with the least expected time so far — an item bigger than a partition's
fair share ends up alone, and the makespan is within 4/3 of the best. With
``generate.partition_by`` = domain or ip, the hosts sharing a slot key (cycles/slotkey.py)
are one item, at the sum of their expected times: the item is the key.

**A plan of constant size (issue #11).** A segment of a large crawl holds millions of
hosts; LPT over each of them, and the host DB lookups of their delays, made the
coordinator's part grow with the segment. So each bucket task of generate weighs its own
hosts (:func:`bucket_load`, in ``count_chosen_hosts``, which counts the bucket's chosen
URLs by host anyway: URLs × delay from the host DB, summed by key) and reports only its
heaviest keys by name and the others summed into ``generate.assign_groups`` hash groups
(``host_hash(key) % G``). The coordinator (:func:`plan_assignment`) keeps the
``generate.assign_top_keys`` (K) heaviest named keys, puts the others back into their
groups, and runs LPT over those K + G items: its work depends on K, G and the number of
buckets, not on the segment. A key heavier than a group is placed by name, alone if it is
that big; the long tail is placed by groups, each about 1/G of it (the hash spreads it),
fine enough to keep the partitions within a few % of LPT over every host (tested).

**One answer per host.** The segment's assignment (``assignment.parquet``,
schema.ASSIGNMENT) is the K named keys' rows plus one row per group. :class:`Assignment`
answers "whose is this host" for every reader: the row of its slot key, else the row of its
key's group — one partition per host, the same for hosts sharing a key, whether the host
is in a fetch list or not (discovery inside the fetch asks for hosts in none,
cycles/fetch/inline.py). The partition writers ask the same in SQL
(:func:`partition_hosts_sql`), over the chosen hosts each bucket task wrote with their key
and group (schema.CHOSEN_HOSTS).

**The seen-set.** For discovery inside the fetch (cycles/fetch/discovery.py) each partition
gets the URLs the crawl DB holds for its hosts as a Bloom filter (``seen/part-N.bloom``,
``fetch.follow_seen_fp``: ~1.2 bytes a URL at 1 %), and their count per host and URL
pattern (``seen/part-N.parquet``, schema.SEEN_COUNTS) for the trap caps. Written only when
``fetch.follow_outlinks_depth`` is on, by the partition's own task: a scan of the url, host
and pattern_hash columns of the crawl DB buckets that hold its hosts. Beside them, with
``fetch.follow_new_hosts``, the segment's known-hosts filter (``seen/hosts.bloom``: the crawl
DB's hosts and those claimed by pending segments, written once by generate's coordinator),
by which a worker tells a host nobody knows (cycles/tables/newhosts.py).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Hashable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.storage.bloom import BloomFilter
from cycles.config import Config
from cycles.tables.crawldb import pattern_hash_sql
from cycles.tables.hostdb import load_host_state, planned_spacing_s
from cycles.tables.partitioning import bucket_of_hash, buckets_of
from cycles.slotkey import slot_key
from cycles.storage.store import Store, StorePath
from cycles.urls import host_hash, host_hashes

MIN_BLOOM_CAPACITY = 1000
"""A partition's seen-set holds at least this many URLs' worth of bits (a few KB)."""


def host_delays(store: Store, config: Config, hosts: list[str]) -> dict[str, float]:
    """Each host's spacing between requests as the host DB last saw it: the floor, its
    Crawl-delay, a slow host's or back-off's longer wait (cycles/tables/hostdb.py
    ``planned_spacing_s``, the spacing generate's per-host time budget uses too)."""
    floor = config.effective_delay_s()
    states = load_host_state(store, set(hosts)) if hosts else {}
    return {host: planned_spacing_s(states.get(host), floor, config.fetch.max_crawl_delay_s) for host in hosts}


def lpt(costs: dict[Hashable, float], partitions: int) -> dict[Hashable, int]:
    """Longest-processing-time-first: item → partition, balancing the items' costs. Ties are
    broken by item, then partition number, so the same input always gives the same
    assignment (a re-run generate, a test)."""
    loads = [(0.0, part) for part in range(max(1, partitions))]
    placed: dict[Hashable, int] = {}
    for item, cost in sorted(costs.items(), key=lambda kv: (-kv[1], kv[0])):
        load, part = heapq.heappop(loads)
        placed[item] = part
        heapq.heappush(loads, (load + cost, part))
    return placed


def expected_by_key(urls_per_host: dict[str, int], delays: dict[str, float],
                    keys: dict[str, str] | None = None) -> dict[str, float]:
    """Expected fetch seconds (URLs × delay) summed by slot key (``keys``: host → key;
    default each host its own)."""
    keys = keys or {}
    expected: dict[str, float] = {}
    for host, n in urls_per_host.items():
        key = keys.get(host, host)
        expected[key] = expected.get(key, 0.0) + n * delays.get(host, 1.0)
    return expected


def assign_hosts(urls_per_host: dict[str, int], delays: dict[str, float], partitions: int,
                 keys: dict[str, str] | None = None) -> dict[str, int]:
    """LPT over every host (every key): host → partition. What :func:`plan_assignment`
    approximates with K named keys and G groups; the reference its balance is tested against."""
    keys = keys or {}
    placed = lpt(expected_by_key(urls_per_host, delays, keys), partitions)
    return {host: placed[keys.get(host, host)] for host in urls_per_host}


def key_groups(keys: list[str] | pa.Array, groups: int) -> np.ndarray:
    """The hash group (``host_hash(key) % groups``) of each slot key, as int64."""
    return buckets_of(host_hashes(keys), groups)


@dataclass(frozen=True)
class BucketLoad:
    """One bucket's chosen hosts, weighed (:func:`bucket_load`): what the coordinator plans from."""

    urls: int
    hosts: int
    top: tuple
    """The bucket's heaviest slot keys as (key, expected seconds), heaviest first."""
    groups: np.ndarray
    """Expected seconds of the bucket's other keys, summed by hash group (float64, G long)."""


def named_per_bucket(config: Config, buckets: int) -> int:
    """How many heaviest keys one bucket reports by name: 2K / buckets (at least 1, at most
    K). A host lives in one bucket and the hash spreads the heaviest evenly, so a bucket
    holds about K / buckets of the K heaviest; twice that leaves the rare bucket with more
    only its lightest few to place by group, and the coordinator at most 2K names to merge."""
    k = config.generate.assign_top_keys
    return max(1, min(k, -(-2 * k // max(1, buckets))))


def chosen_hosts_table(hosts: list[str], config: Config) -> pa.Table:
    """A bucket's chosen hosts with their slot key and its group (schema.CHOSEN_HOSTS), for
    :func:`partition_hosts_sql` and :func:`bucket_load`."""
    hosts = sorted(hosts)
    keys = [slot_key(host, config) for host in hosts] if config.generate.partition_by != "host" else hosts
    return pa.table({"host": pa.array(hosts, pa.string()), "key": pa.array(keys, pa.string()),
                     "key_group": pa.array(key_groups(keys, config.generate.assign_groups), pa.int32())},
                    schema=schema.CHOSEN_HOSTS)


def bucket_load(store: Store, config: Config, chosen: pa.Table, urls_per_host: dict[str, int],
                buckets: int) -> BucketLoad:
    """Weigh one bucket's chosen hosts (``chosen``: :func:`chosen_hosts_table`'s, their URL
    counts in ``urls_per_host``): URLs × delay (the host DB's, looked up here in the bucket
    task, only when there is more than one partition to balance), summed by slot key; the
    heaviest :func:`named_per_bucket` keys by name, the others by hash group."""
    groups = np.zeros(config.generate.assign_groups)
    hosts = chosen["host"].to_pylist()
    delays = host_delays(store, config, hosts) if config.generate.partitions > 1 else {}
    expected: dict[str, float] = {}
    group_of: dict[str, int] = {}
    for host, key, group in zip(hosts, chosen["key"].to_pylist(), chosen["key_group"].to_pylist()):
        expected[key] = expected.get(key, 0.0) + urls_per_host[host] * delays.get(host, 1.0)
        group_of[key] = group
    top = heapq.nsmallest(named_per_bucket(config, buckets), expected.items(), key=lambda kv: (-kv[1], kv[0]))
    named = {key for key, _ in top}
    rest = [(group_of[key], s) for key, s in expected.items() if key not in named]
    if rest:
        np.add.at(groups, [group for group, _ in rest], [s for _, s in rest])
    return BucketLoad(sum(urls_per_host.values()), len(hosts), tuple(top), groups)


def plan_assignment(loads: list[BucketLoad], config: Config) -> pa.Table:
    """The segment's assignment (schema.ASSIGNMENT) from the buckets' loads: LPT over the K
    heaviest named keys and the G groups (the module doc). A group nobody's chosen host is
    in gets partition ``group % partitions``: the hosts found during the fetch spread evenly."""
    g = config.generate
    partitions, groups = max(1, g.partitions), np.zeros(g.assign_groups)
    named: dict[str, float] = {}
    for load in loads:
        groups += load.groups
        for key, expected_s in load.top:
            named[key] = named.get(key, 0.0) + expected_s
    kept = dict(heapq.nsmallest(g.assign_top_keys, named.items(), key=lambda kv: (-kv[1], kv[0])))
    # With partition_by = domain | ip a key's hosts may sit in several buckets; a bucket that
    # did not name the key left its part in the group's sum. That part is then weighed in
    # the wrong item (a balance error of its size), never placed twice: the key's named row
    # decides for every one of its hosts.
    back = [(key, s) for key, s in named.items() if key not in kept]
    if back:
        np.add.at(groups, key_groups([key for key, _ in back], len(groups)), [s for _, s in back])
    costs: dict[Hashable, float] = {(0, key): s for key, s in kept.items()}
    costs.update({(1, int(group)): float(groups[group]) for group in np.flatnonzero(groups > 0)})
    placed = lpt(costs, partitions)
    group_parts = np.arange(len(groups)) % partitions
    for (kind, item), part in placed.items():
        if kind == 1:
            group_parts[item] = part
    return assignment_table({key: placed[(0, key)] for key in kept}, group_parts.tolist())


def assignment_table(named: dict[str, int], group_parts: list[int]) -> pa.Table:
    """schema.ASSIGNMENT rows: the named keys' (key → partition), then one per group
    (``group_parts[g]``: group g's partition)."""
    keys = sorted(named)
    return pa.table({
        "key": pa.array(keys + [None] * len(group_parts), pa.string()),
        "key_group": pa.array(np.concatenate([key_groups(keys, len(group_parts)),
                                              np.arange(len(group_parts))]), pa.int32()),
        "partition": pa.array([named[key] for key in keys] + list(group_parts), pa.int32()),
    }, schema=schema.ASSIGNMENT)


def partition_hosts_sql(chosen: str, assignment: str, part: int) -> str:
    """SQL of the chosen hosts (``chosen``: schema.CHOSEN_HOSTS rows) that ``assignment``
    (schema.ASSIGNMENT) gives partition ``part``, as (host, partition): the key's named
    row, else its group's row — :meth:`Assignment.partition_of` in SQL."""
    return f"""SELECT c.host, {int(part)}::INTEGER AS partition FROM {chosen} c
        LEFT JOIN (SELECT key, partition FROM {assignment} WHERE key IS NOT NULL) n ON n.key = c.key
        JOIN (SELECT key_group, partition FROM {assignment} WHERE key IS NULL) g ON g.key_group = c.key_group
        WHERE coalesce(n.partition, g.partition) = {int(part)}"""


class Assignment:
    """Whose is this host, by a segment's assignment file (:meth:`read`)."""

    def __init__(self, config: Config, partitions: int, named: dict[str, int], group_parts: list[int] | None):
        self.config = config
        self.partitions = max(1, partitions)
        self.named = named
        """slot key → partition of the keys placed by name."""
        self.group_parts = group_parts
        """group → partition; None: no groups (no file, or one an older generate wrote)."""

    @classmethod
    def read(cls, store: Store, folder: StorePath, config: Config, partitions: int) -> "Assignment":
        path = seg.assignment_file(folder)
        if not store.exists(path):
            return cls(config, partitions, {}, None)
        table = store.read_table(path)
        if "host" in table.column_names:
            # Written by a generate before the groups (one row per host; a segment in flight
            # across an upgrade): the hosts' keys by name, any other host by its key's hash.
            return cls(config, partitions, {slot_key(host, config): part for host, part in
                                            zip(table["host"].to_pylist(), table["partition"].to_pylist())}, None)
        is_named = pc.is_valid(table["key"])
        named = table.filter(is_named)
        grouped = table.filter(pc.invert(is_named)).sort_by("key_group")
        return cls(config, partitions, dict(zip(named["key"].to_pylist(), named["partition"].to_pylist())),
                   grouped["partition"].to_pylist())

    def partition_of(self, host: str) -> int:
        """The one partition that fetches ``host`` (and every host sharing its slot key)."""
        key = slot_key(host, self.config)  # the host itself unless generate.partition_by groups hosts
        part = self.named.get(key)
        if part is not None:
            return part
        if self.group_parts:
            return self.group_parts[bucket_of_hash(host_hash(key), len(self.group_parts))]
        return bucket_of_hash(host_hash(key), self.partitions)


def write_seen_set(store: Store, config: Config, folder: StorePath, con, crawldb_sql: str,
                   part: int, pending_sql: str | None = None) -> dict[str, int]:
    """Partition ``part``'s seen-set and pattern counts, from the crawl DB rows of its hosts
    (one task per partition, cycles/generate/generate.py ``write_partition``).

    ``con`` has the partition's rows of the segment's assignment registered as
    ``assignment``; ``crawldb_sql`` is the SQL source of the crawl DB files (of the version
    generate read) that hold its hosts. ``pending_sql``: the fetched rows of segments not
    updated yet (cycles/tables/leases.py ``fetched_files``): a URL fetched there by
    discovery is in no crawl DB row until that update, and without it this segment fetched
    it again (bench_crawl, ``crawl run``: the next segment is generated before the last is
    updated). Returns counters."""
    # One scan of the crawl DB, held: the counts, the pending rows' check and the URLs read
    # it (each used to scan the buckets again: ~1.6 CPU-s a scan and partition at 10 M URLs,
    # docs/incremental.md). DuckDB spills it under db.duckdb_memory_limit.
    con.sql(f"""CREATE OR REPLACE TEMP TABLE seen_rows AS SELECT c.host, c.url, c.pattern_hash
        FROM {crawldb_sql} c JOIN assignment a USING (host) WHERE a.partition = {int(part)}""")
    source = "seen_rows"
    if pending_sql is not None:
        # Only those the crawl DB does not hold: the trap caps count each URL once.
        con.sql(f"""CREATE OR REPLACE TEMP TABLE pending_new AS
            WITH pending AS (SELECT DISTINCT p.host, p.url FROM {pending_sql} p JOIN assignment a USING (host)
                             WHERE a.partition = {int(part)})
            SELECT host, url, {pattern_hash_sql('url')} AS pattern_hash FROM pending
            WHERE url NOT IN (SELECT url FROM seen_rows WHERE host IN (SELECT host FROM pending))""")
        source = "(SELECT * FROM seen_rows UNION ALL SELECT * FROM pending_new)"
    rows = con.sql(f"""SELECT host, pattern_hash, count(*)::BIGINT AS urls FROM {source}
        GROUP BY ALL ORDER BY host, pattern_hash""").to_arrow_table()
    return write_seen_files(store, config, folder, part, rows.cast(schema.SEEN_COUNTS),
                            con.sql(f"SELECT url FROM {source}").to_arrow_reader(64 * 1024))


def write_seen_files(store: Store, config: Config, folder: StorePath, part: int, counts: pa.Table,
                     urls, add=None) -> dict[str, int]:
    """The seen-set's files of partition ``part``: its pattern ``counts`` (SEEN_COUNTS) and a
    Bloom filter of ``urls`` (batches with a ``url`` column; ``add(bloom)``: of URLs already
    hashed, cycles/tables/seenindex.py). Returns counters."""
    total = int(pc.sum(counts["urls"]).as_py() or 0)
    store.write_table(seg.seen_counts_file(folder, part), counts, schema.SEEN_COUNTS)
    bloom = BloomFilter(max(MIN_BLOOM_CAPACITY, total), config.fetch.follow_seen_fp)
    for batch in urls:
        bloom.add_all(batch.column("url"))  # hashed from the Arrow values: no Python string per URL
    if add is not None:
        add(bloom)
    store.write_bytes(seg.seen_bloom_file(folder, part), bloom.to_bytes())
    return {"generate/seen_urls": total, "generate/seen_bytes": len(bloom._array)}
