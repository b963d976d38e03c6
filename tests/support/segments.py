"""What a fetch would have written into a segment, and seeds for it, without the network."""

from __future__ import annotations

import uuid

import pyarrow as pa

from cycles.tables.segment import write_stage_marker
from cycles.tables import schema
from cycles.commands.inject import inject
from cycles.storage.store import Store, utcnow

URLS = ["http://a.example/", "http://a.example/x", "http://b.example/", "http://c.example/p"]


def seed(store, config, tmp_path, urls=URLS):
    path = tmp_path / "seeds.txt"
    path.write_text("\n".join(urls) + "\n")
    return inject(store, config, path)


def write_fetched(store: Store, segment: str, urls: list[str], links=()) -> None:
    """What fetch would have written: one chunk of ok pages, its outlinks, the marker."""
    rows = []
    for url in urls:
        row = {name: None for name in schema.FETCHED.names}
        row.update(url=url, host=url.split("/")[2], fetched_at=utcnow(), http_status=200, outcome="ok",
                   text="text of " + url, title="t", content_hash=uuid.uuid4().hex, minhash=7,
                   warc_file="warc/part-00000-c000001.warc.gz", warc_offset=0, warc_length=1)
        rows.append(row)
    folder = store.segment_dir(segment)
    store.write_table(folder / "outlinks" / "part-00000-c000001.parquet",
                      pa.Table.from_pylist(list(links), schema=schema.OUTLINKS), schema.OUTLINKS)
    store.write_table(folder / "fetched" / "part-00000-c000001.parquet",
                      pa.Table.from_pylist(rows, schema=schema.FETCHED), schema.FETCHED)
    write_stage_marker(store, segment, "fetched", {"segment": segment})
