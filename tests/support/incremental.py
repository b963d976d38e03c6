"""A small crawl DB crawled cycle by cycle without a web: generate, a made-up fetch output
(a mix of outcomes and links), update. The incremental crawl DB's and compaction's tests."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq

from cycles.config import Config
from cycles.generate.generate import generate
from cycles.storage.store import Store, utcnow
from cycles.tables import schema
from cycles.tables.crawldb import read_crawldb
from cycles.tables.segment import write_stage_marker
from cycles.update.update import update_segment

NOW = utcnow() + dt.timedelta(hours=1)  # after the seeds' first_seen (inject uses the clock)
HOSTS = [f"h{i}.example" for i in range(8)]
SEEDS = [f"http://{h}/p{j}" for h in HOSTS for j in range(4)]


def config_of(delta: bool) -> Config:
    config = Config()
    config.db.buckets = 3
    config.db.delta_updates = delta
    config.db.compact_row_group_rows = 1024
    config.generate.partitions = 1
    config.update.link_rank_interval_s = 0  # the link DB as before: this file is about the crawl DB
    return config


def result(url: str, outcome: str, at: dt.datetime, **more) -> dict:
    row = {name: None for name in schema.FETCHED.names}
    row.update(url=url, host=url.split("/")[2], outcome=outcome, fetched_at=at, **more)
    return row


def fetch_output(store: Store, segment: str, at: dt.datetime, round_: int) -> None:
    """What a fetch of ``segment`` would leave: a result for every listed URL (a mix of
    outcomes, changed content in the second round) and links to new and known URLs."""
    folder = store.segment_dir(segment)
    listed = pq.read_table(folder / "fetchlist").column("url").to_pylist()
    outcomes = ["ok", "ok", "not_modified", "server_error", "gone", "redirect", "ok"]
    rows, links = [], []
    for i, url in enumerate(sorted(listed)):
        outcome = outcomes[(i + round_) % len(outcomes)]
        more = {"http_status": 200, "content_hash": f"{round_}{i:031d}"} if outcome == "ok" else {}
        if outcome == "redirect":
            more = {"http_status": 301, "redirect_to": url + "/moved"}
        rows.append(result(url, outcome, at - dt.timedelta(seconds=i), **more))
        links.append({"from_url": url, "url": f"http://{HOSTS[(i + 1) % len(HOSTS)]}/new{round_}-{i}",
                      "anchor": "", "nofollow": False, "depth": 1})
        links.append({"from_url": url, "url": SEEDS[(i * 7) % len(SEEDS)], "anchor": "", "nofollow": False,
                      "depth": 1})
    store.write_table(folder / "fetched" / "part-00000-c000001.parquet",
                      pa.Table.from_pylist(rows, schema=schema.FETCHED), schema.FETCHED)
    store.write_table(folder / "outlinks" / "part-00000-c000001.parquet",
                      pa.Table.from_pylist(links, schema=schema.OUTLINKS), schema.OUTLINKS)
    write_stage_marker(store, segment, "fetched", {"segment": segment})


def one_cycle(store: Store, config: Config, now: dt.datetime, round_: int, top_n: int = 20) -> str:
    segment = generate(store, config, now=now, top_n=top_n).segment
    assert segment
    fetch_output(store, segment, now + dt.timedelta(minutes=1), round_)
    update_segment(store, config, segment, now=now + dt.timedelta(minutes=2))
    return segment


def rows(store: Store) -> list[dict]:
    return read_crawldb(store).sort_by([("url", "ascending")]).to_pylist()
