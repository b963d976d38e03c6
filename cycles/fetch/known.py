"""Which URLs of a host the crawl DB holds as fetched and not yet due, or as due: a
redirect to one of them is recorded but its target is not fetched inline
(cycles/fetch/redirects.py).

Without this, a host that redirects (``/redirect`` → ``/p/0.html``) had its static pages,
fetched in an earlier cycle, fetched again minutes later as redirect targets. A due URL is
generate's to list: ``crawl run`` generates the next segment before this one is updated,
so a due target fetched inline here was listed and fetched again there
(tests/test_run_redirect.py).

Looked up in the worker, not handed over by generate: only hosts that redirect pay (one
filtered read of their crawl DB bucket, once per partition run), while generate would have
to write the known URLs of every host of the fetch list, most of which never redirect.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cycles.tables import schema
from cycles.errors import StoreError
from cycles.tables.hostdb import SCAN_BATCH_ROWS, row_groups_holding
from cycles.storage.store import Manifest, Store
from cycles.urls import host_hash

COLUMNS = ["host", "url", "last_fetched", "next_fetch"]


def known_urls(store: Store, manifest: Manifest, host: str, now: dt.datetime) -> tuple[set[str], set[str]]:
    """URLs of ``host`` in the crawl DB version of ``manifest``: (fetched and not due before
    ``now``, due at ``now``: ``next_fetch <= now``, what generate lists), crawl clock.

    Reads only the host's bucket file, only the row groups whose host range holds it (bucket
    files are sorted by host, url), only four columns, batch by batch. The bucket's deltas
    are read after its base, the newest row of a URL winning (docs/incremental.md)."""
    bucket = host_hash(host) % manifest.buckets
    kinds: dict[str, str] = {}
    deltas = store.version_delta_files("crawldb", manifest, bucket)
    for path in (store.version_bucket_file("crawldb", manifest, bucket), *deltas):
        not_due, due = file_known_urls(store, path, host, now)
        if path in deltas:
            kinds.update({url: "" for url in _urls_of_host(store, path, host)})
        kinds.update({url: "not_due" for url in not_due})
        kinds.update({url: "due" for url in due})
    return ({u for u, k in kinds.items() if k == "not_due"}, {u for u, k in kinds.items() if k == "due"})


def _urls_of_host(store: Store, path, host: str) -> list[str]:
    """Every URL of ``host`` in one crawl DB file (a delta's row may make a URL neither
    fetched-not-due nor due)."""
    table = pq.read_table(str(path), filesystem=store.fs, columns=["host", "url"], filters=[("host", "=", host)])
    return table.column("url").to_pylist()


def file_known_urls(store: Store, path, host: str, now: dt.datetime) -> tuple[set[str], set[str]]:
    """:func:`known_urls` of one crawl DB file."""
    now_scalar = pa.scalar(now, type=schema.TS)
    not_due: set[str] = set()
    due: set[str] = set()
    try:
        with store.fs.open_input_file(str(path)) as fh:
            parquet = pq.ParquetFile(fh, buffer_size=1 << 20, pre_buffer=False)
            groups = row_groups_holding(parquet.metadata, [host])
            if not groups:
                return not_due, due
            for batch in parquet.iter_batches(batch_size=SCAN_BATCH_ROWS, row_groups=groups, columns=COLUMNS,
                                              use_threads=False):
                batch = batch.filter(pc.equal(batch.column("host"), host))
                later = pc.greater(batch.column("next_fetch"), now_scalar)
                keep = pc.and_(pc.is_valid(batch.column("last_fetched")), later)
                not_due.update(batch.filter(pc.fill_null(keep, False)).column("url").to_pylist())
                due.update(batch.filter(pc.fill_null(pc.invert(later), False)).column("url").to_pylist())
    except FileNotFoundError:
        raise StoreError(f"fetch: crawl DB file {store.uri_of(path)} is missing; point "
                         f"{store.uri_of(store.path('crawldb', 'CURRENT'))} at an intact version") from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise StoreError(f"fetch: crawl DB file {store.uri_of(path)} is not readable Parquet ({exc}); restore it "
                         "or point crawldb/CURRENT at an intact version") from None
    return not_due, due
