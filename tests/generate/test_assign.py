"""cycles/tables/assign.py: the coordinator plans over K named keys and G hash groups, and
keeps the balance of LPT over every host; every host has one partition."""

from __future__ import annotations

import numpy as np
import pytest

from cycles.config import Config
from cycles.tables.assign import Assignment, assign_hosts, assignment_table, bucket_load, chosen_hosts_table, \
    plan_assignment
from cycles.tables.hostdb import host_buckets


def long_tail(hosts: int, seed: int = 5) -> dict[str, int]:
    """URLs per host of a skewed segment: a few hosts with hundreds of URLs (Zipf-like,
    shuffled across the names), a long tail with one or two."""
    rng = np.random.default_rng(seed)
    sizes = (800 / np.arange(1, hosts + 1) ** 1.1).astype(int) + rng.integers(1, 3, hosts)
    rng.shuffle(sizes)
    return {f"h{i}.tail.test": int(n) for i, n in enumerate(sizes)}


def planned(store, config: Config, urls_per_host: dict[str, int], buckets: int) -> Assignment:
    """What generate does: each bucket weighs its hosts, the coordinator plans from the loads."""
    by_bucket: list[dict[str, int]] = [{} for _ in range(buckets)]
    for host, bucket in zip(urls_per_host, host_buckets(list(urls_per_host), buckets).tolist()):
        by_bucket[bucket][host] = urls_per_host[host]
    loads = [bucket_load(store, config, chosen_hosts_table(list(hosts), config), hosts, buckets) for hosts in by_bucket]
    table = plan_assignment(loads, config)
    assert table.num_rows <= config.generate.assign_top_keys + config.generate.assign_groups
    named = table.filter(table["key"].is_valid())
    groups = table.filter(table["key"].is_null()).sort_by("key_group")
    assert groups["key_group"].to_pylist() == list(range(config.generate.assign_groups))
    return Assignment(config, config.generate.partitions, dict(zip(named["key"].to_pylist(),
                                                                   named["partition"].to_pylist())),
                      groups["partition"].to_pylist())


def makespan(placement: dict[str, int], urls_per_host: dict[str, int], partitions: int) -> float:
    loads = [0.0] * partitions
    for host, part in placement.items():
        loads[part] += urls_per_host[host]
    return max(loads)


@pytest.mark.parametrize("partitions,top_keys,groups",
                         [(4, 100, 256), (16, 200, 1024), (7, 20, 64), (3, 10_000, 4096), (64, 100, 4096)])
def test_named_keys_and_groups_balance_within_a_few_percent_of_lpt_over_every_host(store, partitions, top_keys, groups):
    urls = long_tail(20_000)
    config = Config()
    config.generate.partitions, config.generate.assign_top_keys, config.generate.assign_groups = \
        partitions, top_keys, groups
    assignment = planned(store, config, urls, buckets=8)
    ours = makespan({h: assignment.partition_of(h) for h in urls}, urls, partitions)
    best = makespan(assign_hosts(urls, {}, partitions), urls, partitions)
    assert sum(urls.values()) / partitions <= best <= ours <= 1.03 * best


def test_a_host_bigger_than_a_partitions_share_is_alone(store):
    urls = {**{f"s{i}.test": 1 for i in range(3000)}, "big.test": 5000}
    config = Config()
    config.generate.partitions, config.generate.assign_top_keys, config.generate.assign_groups = 3, 10, 128
    assignment = planned(store, config, urls, buckets=4)
    big = assignment.partition_of("big.test")
    assert all(assignment.partition_of(h) != big for h in urls if h != "big.test")


def test_the_plan_is_the_same_for_the_same_loads(store):
    urls = long_tail(3000)
    config = Config()
    config.generate.partitions, config.generate.assign_top_keys, config.generate.assign_groups = 5, 50, 128
    first, again = planned(store, config, urls, 4), planned(store, config, urls, 4)
    assert first.named == again.named and first.group_parts == again.group_parts


def test_each_bucket_names_only_its_share_of_the_heaviest(store):
    config = Config()
    config.generate.partitions, config.generate.assign_top_keys, config.generate.assign_groups = 2, 100, 16
    urls = long_tail(5000)
    load = bucket_load(store, config, chosen_hosts_table(list(urls), config), urls, buckets=8)
    assert len(load.top) == 25  # 2K / buckets
    assert [s for _, s in load.top] == sorted((s for _, s in load.top), reverse=True)
    # Every URL is counted once: by name or in its group.
    floor = config.effective_delay_s()
    assert sum(s for _, s in load.top) + load.groups.sum() == pytest.approx(sum(urls.values()) * floor)


def test_every_host_has_one_partition_and_a_slot_key_one_for_all_its_hosts():
    config = Config()
    config.generate.partition_by = "domain"
    assignment = Assignment(config, 4, {"site.com": 2}, [0, 1, 3, 2, 1, 0, 3, 2])
    assert {assignment.partition_of(h) for h in ("site.com", "www.site.com", "a.b.site.com")} == {2}
    others = {assignment.partition_of(f"{sub}.other.org") for sub in ("www", "blog", "x.y")}
    assert len(others) == 1 and others <= set(range(4))
    table = assignment_table({"site.com": 2}, [0, 1, 3, 2, 1, 0, 3, 2])
    assert table.num_rows == 9 and table["key"].null_count == 8
