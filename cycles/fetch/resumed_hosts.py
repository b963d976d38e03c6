"""What a resumed partition must keep of its killed run's host state (issue #10).

A partition writes its ``hosts/part-N.parquet`` (schema.HOSTS) at every flush, from the
slots it holds. A run killed after a flush and resumed used to rewrite that file from the
slots of the resumed run alone, so two things were lost for every later segment that
reads it (cycles/tables/hostdb.py ``load_host_state``, then the host DB):

- the rows the killed run had committed for hosts the resumed run sets no slot up for: a
  host whose fetch-list URLs were all committed, a redirect target or claimed new host
  outside the fetch list. Their last request, Retry-After (``not_before``) and robots.txt
  were gone, so a segment listing them next — ``crawl run`` generates it before this one is
  updated, and a redirect target is in no fetch list here — could ask at once;
- the requests made between the last flush and the kill, to any host the run could reach.

The resumed run therefore carries the killed run's rows over, and for every host the
killed run may have asked after its last flush adds a row "last asked now" (the kill came
before this run started, so a full delay from now is never short: the rule a resumed
partition already applies to its own queued hosts, cycles/fetch/politeness.py
``restore_spacing``). Those hosts are a superset read from what was committed: the
partition's fetch-list hosts, the hosts its committed rows fetched or redirected to, the
new hosts it claimed, and the hosts of its old ``hosts/`` rows. A Retry-After answered
after the last flush stays unknown, as for a queued host: only the delay is kept.

Both go into the file at once, before the resumed run sets up any slot, so its own slots
(the hosts it resumes, and a redirect target it meets again) start from them too.
Counter: ``fetch/resumed_hosts_carried`` (hosts given a "last asked now" row).
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.tables.newhosts import claimed_hosts, read_claim
from cycles.tables.hostdb import merge_host_rows, read_host_file
from cycles.storage.store import Store, StorePath
from cycles.urls import normalize_url, url_host


def committed_hosts(store: Store, seg_dir: StorePath, partition: int) -> set[str]:
    """Hosts of the partition's committed rows: each row's host and its redirect target's host."""
    hosts: set[str] = set()
    for path in store.list(seg_dir / seg.FETCHED, f"{seg.part_name(partition)}-c*.parquet"):
        table = store.read_table(path, columns=["host", "redirect_to"])
        hosts.update(table["host"].to_pylist())
        for target in table["redirect_to"].drop_null().to_pylist():
            # As the worker reads a Location before following it (InlineFetches.prepare):
            # one that names no fetchable http(s) host ("http://[a/", "") was never asked,
            # and a host row for it would only put junk in the host DB.
            url = normalize_url(target)
            if url is not None:
                hosts.add(url_host(url))
    return hosts


def own_claims(store: Store, seg_dir: StorePath, segment: str, partition: int) -> set[str]:
    """New hosts this partition claimed in the segment (cycles/tables/newhosts.py)."""
    return {host for host in claimed_hosts(store, segment)
            if read_claim(store, seg.newhost_claim_file(seg_dir, host)).get("partition") == partition}


def carried_host_rows(store: Store, seg_dir: StorePath, segment: str, partition: int,
                      fetchlist_hosts: set[str], now_wall: float) -> pa.Table:
    """The rows a resumed partition writes into its ``hosts/`` file besides its slots' (module
    doc): the killed run's rows, and "last asked at ``now_wall``" for every host it may have
    asked after its last flush; one row per host (merged by the host DB's rule)."""
    path = seg.hosts_file(seg_dir, partition)
    old = read_host_file(path, store) if store.exists(path) else schema.HOSTS.empty_table()
    reached = (set(fetchlist_hosts) | set(old["host"].to_pylist()) | committed_hosts(store, seg_dir, partition)
               | own_claims(store, seg_dir, segment, partition))
    now = dt.datetime.fromtimestamp(now_wall, dt.timezone.utc)
    asked_now = pa.Table.from_pylist([{"host": host, "last_request_end": now} for host in sorted(reached)],
                                     schema=schema.HOSTS)
    merged = merge_host_rows([old, asked_now])
    return pa.Table.from_pylist([merged[host] for host in sorted(merged)], schema=schema.HOSTS)
