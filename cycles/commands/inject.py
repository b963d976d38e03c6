"""``crawl inject``: add seed URLs to the crawl DB.

Each line of the seeds file is one URL; blank lines and lines starting with ``#`` are
ignored. A line that is not a usable http(s) URL is reported with its line number and
skipped — one bad line never stops the others. URLs the crawl DB already holds are left
as they are (a seed does not reset a page's schedule).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from cycles import metrics
from cycles.config import Config
from cycles.tables.crawldb import bucket_of, new_url_rows_sql, replace_crawldb
from cycles.tables.partitioning import buckets_of
from cycles.errors import CrawlError
from cycles.storage.store import Store
from cycles.urls import Normalizer, UrlFilter, host_hashes, rejection_reason, url_host

SEED_SCORE = 1.0


@dataclass
class InjectResult:
    seeds_read: int = 0
    added: int = 0
    already_known: int = 0
    rejected: Counter = field(default_factory=Counter)
    rejected_lines: list[tuple[int, str, str]] = field(default_factory=list)
    """(line number, line, reason) of each rejected line (the first 1,000)."""


def read_seeds(path: Path, config: Config, result: InjectResult) -> list[str]:
    normalizer = Normalizer(config.urls)
    url_filter = UrlFilter(config.urls)
    urls: dict[str, None] = {}
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise CrawlError(f"cannot read seeds file {path}: {exc.strerror}") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.decode("utf-8", errors="replace").strip()
            if not line or line.startswith("#"):
                continue
            result.seeds_read += 1
            url = normalizer.normalize(line)
            reason = rejection_reason(line) if url is None else url_filter.reason(url)
            if reason:
                result.rejected[reason] += 1
                if len(result.rejected_lines) < 1000:
                    result.rejected_lines.append((number, line[:200], reason))
                continue
            urls[url] = None
    return list(urls)


def inject(store: Store, config: Config, seeds_path: str | Path) -> InjectResult:
    """Add the seeds in ``seeds_path`` to the crawl DB (creating it if needed)."""
    result = InjectResult()
    urls = read_seeds(Path(seeds_path), config, result)
    hosts = [url_host(u) for u in urls]
    seeds = pa.table({
        "url": pa.array(urls, pa.string()),
        "host": pa.array(hosts, pa.string()),
        "host_hash": host_hashes(hosts),
        "score": pa.array([SEED_SCORE] * len(urls), pa.float32()),
        "depth": pa.array([0] * len(urls), pa.int16()),
    })

    def build_bucket(con, old: str, bucket: int) -> str:
        con.register("seeds", seeds)
        return f"""
            SELECT * FROM {old}
            UNION ALL BY NAME
            {new_url_rows_sql(f'''(SELECT s.* FROM seeds s ANTI JOIN {old} o USING (url)
                                   WHERE {bucket_of('s.host_hash', buckets)} = {bucket})''', config)}"""

    with store.lock("crawldb", db=config.db):
        manifest = store.manifest("crawldb")
        buckets = manifest.buckets if manifest else config.db.buckets
        before = _count(store, manifest)
        replaced = replace_crawldb(store, config, build_bucket, who="inject",
                                   adds_to=set(buckets_of(seeds["host_hash"], buckets).tolist()))
    result.added = replaced.rows - before
    result.already_known = len(urls) - result.added
    metrics.publish_crawldb(store, config)  # the dashboard shows the crawl DB from its first version
    return result


def _count(store: Store, manifest) -> int:
    if manifest is None:
        return 0
    return sum(store.read_metadata(f).num_rows for f in store.version_files("crawldb", manifest))
