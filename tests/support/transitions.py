"""Update as a transition: write a fetch result by hand, run generate and update on one URL."""

from __future__ import annotations

import pyarrow as pa

from cycles.tables.segment import write_stage_marker
from cycles.tables import schema
from cycles.config import Config
from cycles.tables.crawldb import read_crawldb
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.storage.store import Store, utcnow
from cycles.update.update import update_segment

URL = "http://h.example/page"


def rows(store: Store) -> dict[str, dict]:
    table = read_crawldb(store)  # base and deltas merged, one row per URL
    return {r["url"]: r for r in table.to_pylist()}


def fetch_result(store: Store, segment: str, outcomes: list[dict], links: list[dict] = ()) -> None:
    folder = store.segment_dir(segment)
    full = []
    for values in outcomes:
        row = {name: None for name in schema.FETCHED.names}
        row.update({"host": "h.example", **values})
        full.append(row)
    store.write_table(folder / "fetched" / "part-00000-c000001.parquet",
                      pa.Table.from_pylist(full, schema=schema.FETCHED), schema.FETCHED)
    store.write_table(folder / "outlinks" / "part-00000-c000001.parquet",
                      pa.Table.from_pylist(list(links), schema=schema.OUTLINKS), schema.OUTLINKS)
    write_stage_marker(store, segment, "fetched", {"segment": segment})


def cycle_once(store, config, tmp_path, result: dict, links=(), before=None) -> dict:
    """Run generate → (written result) → update for URL; return its new row."""
    seeds = tmp_path / "seeds.txt"
    seeds.write_text(URL + "\n")
    if not (store.manifest("crawldb")):
        inject(store, config, seeds)
    if before:
        before(store)
    generated = generate(store, config)
    assert generated.segment
    fetched_at = utcnow()
    fetch_result(store, generated.segment, [{"url": URL, "fetched_at": fetched_at, **result}], links)
    update_segment(store, config, generated.segment)
    row = rows(store)[URL]
    row["_fetched_at"] = fetched_at
    row["_segment"] = generated.segment
    return row


def due_now(store):
    """Make every URL due (as if time had passed), by rewriting the crawl DB."""
    from cycles.tables.crawldb import replace_crawldb

    with store.lock():
        replace_crawldb(store, Config(), lambda con, old, b: f"SELECT * REPLACE (now() - INTERVAL 1 SECOND AS next_fetch) FROM {old}", who="test")
