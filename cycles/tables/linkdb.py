"""The link DB (``linkdb/``): the table update writes (cycles/update/linkgraph.py, its host
ranks by cycles/update/hostrank.py) and generate reads (:func:`current_link_files`).

Its file names live here, in the tables layer, so that generate need not import the update stage.
"""

from __future__ import annotations

from cycles.storage.store import Store, StorePath
# A host's part of the host graph (hosts-NNNNN): update's routing writes by it, its ranking reads by it.
from cycles.tables.partitioning import host_key_sql, part_sql  # noqa: F401 (the one rule's home)

LINKDB = "linkdb"
"""The store table (``linkdb/CURRENT`` and its version folders)."""


OLD_HOSTS = "hosts.parquet"
"""A version's host ranks written by an older release, in one file (before host graph parts)."""



# Every file at the version's top level: the seal (_COMPLETE) and `crawl recover` see only those.
def inlinks_file(folder: StorePath, bucket: int, store: Store | None = None) -> StorePath:
    return folder / f"inlinks-{bucket:05d}.parquet"


def urls_file(folder: StorePath, bucket: int, store: Store | None = None) -> StorePath:
    return folder / f"urls-{bucket:05d}.parquet"


def hosts_file(folder: StorePath, part: int) -> StorePath:
    return folder / f"hosts-{part:05d}.parquet"


def current_hosts_files(store: Store, folder: StorePath, parts: int) -> tuple[StorePath, ...]:
    """An installed version's LINK_HOSTS files (generate joins them on host)."""
    if store.exists(folder / OLD_HOSTS):
        return (folder / OLD_HOSTS,)
    return tuple(hosts_file(folder, p) for p in range(parts))


def current_link_files(store: Store, bucket: int, buckets: int) -> tuple[tuple, tuple]:
    """For generate: the link DB's LINK_URLS files holding ``bucket``'s URLs (of a crawl DB
    with ``buckets`` buckets) and its LINK_HOSTS files (every part: a host's part is not its
    crawl DB bucket); ((), ()) when there is no link DB."""
    manifest = store.manifest(LINKDB)
    if manifest is None:
        return (), ()
    folder = store.path(LINKDB, manifest.version)
    if manifest.buckets == buckets:
        files = (urls_file(folder, bucket, store),)
    else:  # after `crawl rebucket`, until the next update: every file (the join keeps the bucket's URLs)
        files = tuple(urls_file(folder, b, store) for b in range(manifest.buckets))
    return files, current_hosts_files(store, folder, manifest.buckets)
