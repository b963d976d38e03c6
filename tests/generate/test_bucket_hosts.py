"""The known-hosts filter's part of a bucket: the hosts of its base and deltas, read without
merging them (a delta row replaces the base row of its URL, which has the same host)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq

import cycles.generate.generate as gen
from cycles.commands.inject import inject
from cycles.generate.mode import RunMode
from cycles.storage.store import Store
from cycles.tables import schema
from cycles.tables.crawldb import connect, current_buckets, read_bucket_rows
from cycles.update.update import update_segment
from tests.support.incremental import NOW, SEEDS, config_of, fetch_output


def test_a_buckets_hosts_are_those_of_its_merged_rows(tmp_path):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\n".join(SEEDS) + "\n")
    store, config = Store(tmp_path / "store"), config_of(True)
    inject(store, config, seeds)
    for round_ in range(2):
        now = NOW + dt.timedelta(days=round_ * 30)
        segment = gen.generate(store, config, now=now, top_n=20).segment
        fetch_output(store, segment, now + dt.timedelta(minutes=1), round_)
        links = [{"from_url": SEEDS[0], "url": f"http://fresh{round_}-{i}.example/", "anchor": "", "nofollow": False,
                  "depth": 1} for i in range(12)]  # hosts no base holds: only their deltas do
        store.write_table(store.segment_dir(segment) / "outlinks" / "part-00000-c000002.parquet",
                          pa.Table.from_pylist(links, schema=schema.OUTLINKS), schema.OUTLINKS)
        update_segment(store, config, segment, now=now + dt.timedelta(minutes=2))
    manifest, buckets = current_buckets(store)
    new_in_deltas = 0
    for number, bucket in enumerate(buckets):
        task = gen.GenerateBucketTask(store.uri, config, number, bucket, manifest.schema_version,
                                      gen.segment_inputs(store, NOW, RunMode(), config), NOW, 10, tmp_path / "c.parquet",
                                      hosts_out=tmp_path / f"hosts-{number}.parquet")
        con = connect(store, config)
        count = gen.write_bucket_hosts(store, con, task)
        con.close()
        written = pq.read_table(task.hosts_out).column("host").to_pylist()
        merged = set(read_bucket_rows(store, bucket, manifest.schema_version, ["host"]).column("host").to_pylist())
        assert sorted(written) == sorted(merged) and count == len(written)
        base = set(pq.read_table(bucket.base, columns=["host"]).column("host").to_pylist())
        new_in_deltas += len(merged - base)
    # The positive control: the deltas brought hosts their bases did not hold.
    assert new_in_deltas > 0
