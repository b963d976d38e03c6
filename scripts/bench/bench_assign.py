"""generate's host → partition plan (cycles/tables/assign.py): the coordinator's CPU for
``plan_assignment`` as the bucket count grows, and the balance of K named keys + G groups
against LPT over every host on a long-tailed segment. No store, no network.

    .venv/bin/python scripts/bench/scale.py assign
    .venv/bin/python scripts/bench/scale.py assign --buckets 8,64,640 --hosts 20000 --partitions 4,16,64 --few-keys 100
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import benchlib  # noqa: E402,F401  (the repository on sys.path)

from cycles.config import Config  # noqa: E402
from cycles.tables.assign import (Assignment, BucketLoad, assign_hosts, bucket_load,  # noqa: E402
                                    chosen_hosts_table, named_per_bucket, plan_assignment)
from cycles.tables.hostdb import host_buckets  # noqa: E402
from cycles.storage.store import Store  # noqa: E402
from cycles.urls import host_hash  # noqa: E402


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def plan_cpu(config: Config, buckets: int, rng) -> tuple[float, int]:
    """CPU seconds of plan_assignment over ``buckets`` loads of long-tailed named keys and
    random group sums (what count_chosen_hosts tasks return), and the assignment's rows."""
    n = named_per_bucket(config, buckets)
    loads = []
    for b in range(buckets):
        weights = np.sort(rng.pareto(1.1, n) * 100 + 1)[::-1]
        loads.append(BucketLoad(0, 0, tuple((f"h{b}-{i}.test", float(w)) for i, w in enumerate(weights)),
                                rng.random(config.generate.assign_groups)))
    started = time.process_time()
    table = plan_assignment(loads, config)
    return time.process_time() - started, table.num_rows


def long_tail(hosts: int, rng) -> dict[str, int]:
    sizes = (800 / np.arange(1, hosts + 1) ** 1.1).astype(int) + rng.integers(1, 3, hosts)
    rng.shuffle(sizes)
    return {f"h{i}.tail.test": int(n) for i, n in enumerate(sizes)}


def makespan(owner, urls: dict[str, int], partitions: int) -> int:
    loads = [0] * partitions
    for host, n in urls.items():
        loads[owner(host)] += n
    return max(loads)


def balance(config: Config, urls: dict[str, int], buckets: int) -> tuple[int, int, int]:
    """Makespans (URLs at one delay) of the plan, of LPT over every host, of host_hash % P."""
    store = Store(tempfile.mkdtemp(prefix="bench-assign-"))  # empty: every host at the delay floor
    by_bucket: list[dict[str, int]] = [{} for _ in range(buckets)]
    for host, bucket in zip(urls, host_buckets(list(urls), buckets).tolist()):
        by_bucket[bucket][host] = urls[host]
    table = plan_assignment([bucket_load(store, config, chosen_hosts_table(list(hosts), config), hosts, buckets)
                             for hosts in by_bucket], config)
    named = table.filter(table["key"].is_valid())
    groups = table.filter(table["key"].is_null()).sort_by("key_group")
    plan = Assignment(config, config.generate.partitions, dict(zip(named["key"].to_pylist(),
                      named["partition"].to_pylist())), groups["partition"].to_pylist())
    partitions = config.generate.partitions
    best = assign_hosts(urls, {}, partitions)
    return (makespan(plan.partition_of, urls, partitions), makespan(best.__getitem__, urls, partitions),
            makespan(lambda h: host_hash(h) % partitions, urls, partitions))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--buckets", default="8,64,640", help="crawl DB bucket counts")
    p.add_argument("--partitions", default="4,16,64")
    p.add_argument("--hosts", type=int, default=20_000, help="hosts of the long-tailed segment (balance)")
    p.add_argument("--few-keys", type=int, default=100,
                   help="a second, small generate.assign_top_keys for the balance: most hosts placed by group")
    args = p.parse_args()
    rng = np.random.default_rng(1)
    config = Config()
    print(f"plan_assignment, K = {config.generate.assign_top_keys}, G = {config.generate.assign_groups}, "
          f"64 partitions ({load()})")
    config.generate.partitions = 64
    for buckets in map(int, args.buckets.split(",")):
        cpu, rows = plan_cpu(config, buckets, rng)
        print(f"  {buckets:5d} buckets x {named_per_bucket(config, buckets):5d} named: {cpu:.3f} CPU-s, "
              f"{rows:,} assignment rows")
    urls = long_tail(args.hosts, rng)
    print(f"balance on {args.hosts:,} hosts, {sum(urls.values()):,} URLs, 8 buckets: makespan in URLs ({load()})")
    for top_keys in (config.generate.assign_top_keys, args.few_keys):
        config.generate.assign_top_keys = top_keys
        for partitions in map(int, args.partitions.split(",")):
            config.generate.partitions = partitions
            ours, best, hashed = balance(config, urls, 8)
            print(f"  K = {top_keys:6d}, {partitions:3d} partitions: plan {ours:,} = {ours / best:.4f} x LPT over "
                  f"every host ({best:,}); host_hash % P {hashed:,} = {hashed / best:.3f} x")


if __name__ == "__main__":
    main()
