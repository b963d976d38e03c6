"""Every setting of the crawler, with its default, its unit and why it has that value.

This module is the single home of defaults: code reads ``config.fetch.delay_s`` and never
repeats a fallback. Names carry their unit (``_s`` seconds, ``_bytes``, ``_pct``).
The defaults are polite out of the box — the library is safe without a config file.

A config file is TOML with one table per section, for example::

    [fetch]
    user_agent = "examplebot/1.0 (+https://example.org/bot)"
    delay_s = 2.0

    [generate]
    top_n = 100000

Load it with :func:`load_config`; unknown keys are an error, not silently ignored.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cycles.errors import ConfigError


@dataclass
class DbConfig:
    """Layout of the crawl DB and the tables beside it."""

    buckets: int = 8
    """Number of host-hash buckets the crawl DB is split into (one Parquet file each).
    A host always lives in one bucket, so generate and update work bucket by bucket
    with bounded memory: choose about 1.6 M URLs per bucket per 4 GB of
    ``duckdb_memory_limit``, at least 8 (README, "Choosing the bucket count"). Used
    when the crawl DB is created; afterwards the count in ``crawldb/CURRENT`` rules, and
    ``crawl rebucket --buckets N`` changes it."""

    keep_versions: int = 2
    """How many crawl DB versions to keep on disk (the current one included)."""

    duckdb_memory_limit: str = "4GB"
    """DuckDB's memory limit for generate and update; past it DuckDB spills to disk."""

    duckdb_threads: int = 2
    """DuckDB worker threads."""

    processes: int = 0
    """Processes running generate's and update's bucket tasks at once (cycles/executor.py);
    0 means one per CPU core. They share ``duckdb_memory_limit`` and ``duckdb_threads``.
    A crawl DB under ``small_db_rows`` rows is done in-process: starting workers would
    cost more than it saves."""

    small_db_rows: int = 2_000_000
    """Below this many crawl DB rows, bucket tasks run in-process (see ``processes``)."""


@dataclass
class GenerateConfig:
    """Choosing the URLs of the next fetch list."""

    top_n: int = 50_000
    """At most this many URLs in one fetch list (one segment)."""

    max_urls_per_host: int = 100
    """At most this many URLs of one host in one fetch list. At the 1 request/s
    politeness floor a host cannot be fetched faster than 3,600 pages an hour."""

    partitions: int = 2
    """Number of fetch-list partitions; a host is in exactly one (hash of host).
    Each partition is fetched by one process."""

    max_urls_per_pattern: int = 20
    """At most this many URLs of one URL pattern (see ``update.max_urls_per_pattern``) in
    one fetch list, so a trap cannot fill a host's per-cycle budget."""

    feed_max_lag_cycles: int = 10
    """When a registered consumer of the pages feed is this many batches behind, generate
    holds the crawl (and from half of it, halves the fetch list) and says why: slow the
    crawl down, never drop pages. 0 disables the check."""

    lease_s: int = 6 * 3600
    """How long URLs handed to a segment stay leased. If the segment is never updated
    (a fetcher died), its URLs become due again after this."""


@dataclass
class FetchConfig:
    """Fetching: politeness, limits, identity."""

    user_agent: str = "crawlbot/0.1 (+https://example.invalid/crawlbot)"
    """User-Agent header sent with every request. Name the crawler and a contact URL."""

    robots_agent: str = "crawlbot"
    """Product token matched against robots.txt User-agent lines (RFC 9309 §2.2.1)."""

    delay_s: float = 1.0
    """Seconds between the end of one response and the start of the next request to the
    same host. Never below 1.0: values under it are raised to it."""

    max_crawl_delay_s: float = 30.0
    """A robots.txt Crawl-delay above this makes us skip the host for the cycle
    (counted as ``robots/crawl_delay_too_long``) rather than crawl it slower than useful."""

    connect_timeout_s: float = 10.0
    """TCP (and TLS) connect timeout."""

    timeout_s: float = 30.0
    """Total time allowed for one transfer, headers and body."""

    low_speed_bytes_per_s: int = 1000
    """A transfer slower than this for ``low_speed_time_s`` is aborted: a server that
    drips a byte a second must not hold a slot for the full timeout."""

    low_speed_time_s: int = 5
    """See ``low_speed_bytes_per_s``."""

    max_page_bytes: int = 2 * 1024 * 1024
    """Largest body we download; a larger transfer is aborted, not truncated after the fact."""

    max_robots_bytes: int = 500 * 1024
    """Only this much of a robots.txt is parsed (RFC 9309 §2.5 asks for at least 500 KiB)."""

    max_redirects: int = 5
    """Redirect hops followed: for robots.txt (RFC 9309 §2.3.1.2), and for pages inline
    when the target's host is in this worker's partition (cycles/fetch/worker.py). The hop
    past it is recorded with error 'too many redirects'; its target stays an outlink for a
    later cycle."""

    max_in_flight: int = 256
    """Transfers in flight in one fetch worker (each to a different host)."""

    processes: int = 0
    """Fetch worker processes; 0 means one per CPU core. 1 runs in-process."""

    html_only: bool = True
    """Download bodies of HTML (and XHTML) only; other types are recorded, body skipped."""

    resolve: dict[str, str] = field(default_factory=dict)
    """Host name -> IP address overrides (like curl's --resolve), for test webs and
    private deployments. Applies to every port."""

    flush_s: float = 30.0
    """Results are flushed to disk (Parquet + WARC, atomically) at least this often, so a
    killed fetch loses at most this much work."""

    flush_pages: int = 5000
    """... or after this many results, whichever comes first."""

    flush_bytes: int = 32 << 20
    """... or once the buffered page texts and outlinks reach about this many bytes: a chunk
    peaks at ~4× its text in memory (5,000 test-web pages peaked at 760 MB per worker,
    32 MiB chunks at ~380 MB; cycles/fetch/output.py)."""

    max_host_failures: int = 5
    """After this many consecutive network errors a host is set aside for the rest of the
    cycle; its remaining URLs go back unfetched, not failed."""

    warc_gzip_level: int = 1
    """Compression level of the WARC files' gzip members, ISA-L's scale (0 fastest .. 3
    smallest; cycles/fetch/output.py). On the 30 KB test-web pages: level 1 78 µs a page at
    40 % of the size, 2: 83 µs / 39 %; zlib's level 1 took 258 µs for 41 %, and warcio's
    own level 9 ~1.2 ms for 35 %."""

    outlink_bloom_fp: float = 0.001
    """False-positive rate of the per-partition Bloom filter that writes each outlink once
    per segment (cycles/bloom.py); a false positive loses that link for this segment only.
    0 turns the filter off (every outlink of every page is written)."""

    outlink_bloom_links_per_page: int = 40
    """Sizing of that filter: expected distinct outlinks per fetched page (14 bits each at 0.1 %)."""

    delay_factor: float = 2.0
    """A slow host gets a proportionally longer delay: at least this many times its last
    response time (capped at ``max_crawl_delay_s``). A server that takes 3 s to answer is
    telling us it is busy."""

    max_duration_s: float = 0.0
    """Stop fetching a segment after this many seconds (0: no limit); URLs not reached go
    back unfetched, so cron runs end on time."""

    robots_cache_s: int = 24 * 3600
    """A robots.txt is reused for this long (RFC 9309 §2.4 asks for no more than 24 h),
    measured on the crawl clock (cycles.clock). An older 2xx copy with an ETag or
    Last-Modified is then revalidated with a conditional GET."""

    robots_error_cache_s: int = 3600
    """An *unreachable* robots.txt (5xx, 429, network error, redirect loop) is asked again
    after this many seconds, not after ``robots_cache_s``: a host whose robots.txt failed
    once must not be kept out for a day. Matches ``update.deferred_retry_s``, after which
    the host's deferred URLs are due again."""

    robots_unreachable_fallback_s: int = 30 * 86400
    """When robots.txt has been unreachable for this long without a break, RFC 9309
    §2.3.1.4 lets a crawler stop assuming complete disallow: the last good copy (a 2xx or
    4xx answer, kept in the host DB) is obeyed, or, if there is none, everything is allowed."""

    progress_s: float = 1.0
    """How often (seconds) fetch workers publish their counters under
    ``segments/<id>/stats/progress/`` and, on a terminal, the one-line progress display
    is redrawn. 0 turns both off."""

    max_retry_after_s: float = 3600.0
    """Upper bound on a Retry-After we honour within a cycle; beyond it the host is set aside."""


@dataclass
class UrlConfig:
    """URL normalisation and filtering (cycles/urls.py), applied to seeds and outlinks."""

    drop_params: list[str] = field(default_factory=lambda: [
        "utm_*", "gclid", "fbclid", "msclkid", "dclid", "yclid", "mc_cid", "mc_eid",
        "_ga", "_hsenc", "_hsmi", "sessionid", "session_id", "sid", "phpsessid",
        "jsessionid", "aspsessionid*", "asp.net_sessionid", "oscsid", "zenid", "cfid", "cftoken",
    ])
    """Query parameters removed during normalisation (case-insensitive; ``*`` is a wildcard),
    also as ``;name=value`` path parameters (``;jsessionid=``). Tracking and session
    parameters make one page look like thousands. Classic ASP names its session parameter
    ``ASPSESSIONID`` plus 8 random letters (``ASPSESSIONIDQQGGQGRS``), hence the ``*``;
    ``osCsid`` (osCommerce) and ``zenid`` (Zen Cart) are shop session ids."""

    max_length: int = 2048
    """Longer URLs are dropped (``filter/too_long``)."""

    max_path_depth: int = 16
    """URLs with more path segments are dropped (``filter/too_deep``)."""

    max_segment_repeats: int = 2
    """A path in which one segment occurs more often than this is a likely trap
    (``/a/b/a/b/a/b``) and is dropped (``filter/repeating_segments``)."""

    blocked_extensions: list[str] = field(default_factory=lambda: [
        "jpg", "jpeg", "png", "gif", "webp", "svg", "ico", "bmp", "tif", "tiff",
        "mp3", "mp4", "m4a", "avi", "mov", "mkv", "webm", "wav", "ogg", "flac",
        "zip", "gz", "tgz", "bz2", "xz", "7z", "rar", "tar", "iso", "dmg", "exe", "msi",
        "bin", "apk", "deb", "rpm", "woff", "woff2", "ttf", "eot", "css", "js",
    ])
    """Path extensions we never fetch (``filter/extension``): not HTML, large, or both."""

    include: dict[str, list[str]] = field(default_factory=dict)
    """Per-host allow list: host -> regular expressions; when a host has one, only URLs
    matching one of them are kept (``filter/host_rule``)."""

    exclude: dict[str, list[str]] = field(default_factory=dict)
    """Per-host block list: host -> regular expressions (``filter/host_rule``). ``*`` as
    host applies to every host."""


@dataclass
class UpdateConfig:
    """Merging a segment into the crawl DB."""

    max_retries: int = 3
    """After this many consecutive transient failures a URL becomes ``dead``
    and is retried only every ``dead_retry_s``."""

    dead_retry_s: int = 90 * 86400
    """How rarely a dead (dead-lettered) URL is tried again."""

    retry_s: int = 86400
    """Delay before a transient failure (5xx, timeout) is retried."""

    default_interval_s: int = 14 * 86400
    """Fetch interval of a newly fetched page (the design's `recrawl.default: 14d`)."""

    min_interval_s: int = 2 * 3600
    """Shortest refetch interval (the design's `recrawl.news_like: 2h`)."""

    max_interval_s: int = 90 * 86400
    """Longest refetch interval."""

    news_like_interval_s: int = 2 * 3600
    """First refetch interval of pages on news-like hosts or URL patterns (the design's
    ``recrawl.news_like: 2h``); later intervals follow the page's observed change rate."""

    news_like_hosts: list[str] = field(default_factory=list)
    """Hosts declared news-like (exact names, or ``*.example.com`` for a domain and its subdomains)."""

    news_like_patterns: list[str] = field(default_factory=list)
    """Regular expressions (DuckDB / RE2 syntax) on the URL that declare a page news-like."""

    revisit_factor: float = 0.5
    """Refetch interval = this / estimated change rate, within [min_interval_s, max_interval_s]:
    0.5 revisits a page about twice per expected change. The change rate is estimated from the
    page's history with Cho & Garcia-Molina's estimator, -ln((n - X + 0.5) / (n + 0.5)) / I,
    for X changes seen in n refetches at mean interval I (ACM TOIT 2003), which stays finite
    when every visit saw a change."""

    deferred_retry_s: int = 3600
    """A URL deferred by fetch (host's robots.txt unreachable, host set aside, out of
    time) is due again after this."""

    gone_interval_s: int = 90 * 86400
    """Refetch interval of a page that answered 404/410."""

    max_depth: int = 20
    """Links are not followed beyond this many hops from a seed."""

    simhash_max_distance: int = 3
    """Two pages whose 64-bit SimHashes differ in at most this many bits are near-duplicates
    (Manku et al., WWW 2007: k = 3 for 64-bit fingerprints at web scale)."""

    simhash_blocks: int = 5
    """The SimHash is cut into this many blocks; a near-duplicate pair agrees on at least
    ``blocks - max_distance`` of them, so candidates are found by joining on every such
    combination of blocks (10 joins on ~26-bit keys for 5 and 3; 20 on ~32-bit keys for
    6) instead of comparing all pairs. Every pair within the distance is found either way;
    more blocks: more joins, fewer false candidates per join. 5 measured 1.8x faster than
    6 with 7 M segment pages against 78 M stored fingerprints (a crawl DB of 100 M URLs)."""

    simhash_min_chars: int = 300
    """Pages with less text than this are never called near-duplicates: a SimHash of a few
    words matches too easily."""

    dup_host_ratio: float = 0.5
    """A host whose pages fetched in a segment are duplicates at least this often gets its
    unfetched URLs' scores multiplied by ``dup_host_score_factor``."""

    dup_host_score_factor: float = 0.5
    """See ``dup_host_ratio``."""

    mirror_min_pages: int = 5
    """A host is a mirror of another when at least this many of its pages, and at least
    ``mirror_ratio`` of the pages fetched from it, are exact copies of that host's pages."""

    mirror_ratio: float = 0.8
    """See ``mirror_min_pages``. A mirror host's unfetched URLs get score × 0.1."""

    max_urls_per_host: int = 100_000
    """Total cap of URLs kept for one host; new URLs beyond it are dropped
    (``trap/host_cap``). Stops a site that generates pages without end."""

    max_urls_per_pattern: int = 500
    """New URLs whose pattern (the URL with digits replaced and query values removed, e.g.
    ``http://h/cal/N/N?d=``) already has this many URLs on its host are dropped
    (``trap/pattern_cap``): an endless calendar or ID sequence is throttled by pattern,
    while the rest of the host keeps growing."""


@dataclass
class Config:
    """The whole configuration. ``Config()`` is the polite default."""

    db: DbConfig = field(default_factory=DbConfig)
    generate: GenerateConfig = field(default_factory=GenerateConfig)
    fetch: FetchConfig = field(default_factory=FetchConfig)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    urls: UrlConfig = field(default_factory=UrlConfig)

    def effective_delay_s(self) -> float:
        """The per-host delay floor actually used: never under one second."""
        return max(1.0, self.fetch.delay_s)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _apply(section: Any, values: dict[str, Any], where: str) -> None:
    known = {f.name: f for f in dataclasses.fields(section)}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"{where}: unknown setting {key!r}; known: {', '.join(sorted(known))}")
        current = getattr(section, key)
        if isinstance(current, bool) and not isinstance(value, bool):
            raise ConfigError(f"{where}.{key}: expected true or false, got {value!r}")
        if isinstance(current, (int, float)) and not isinstance(current, bool):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ConfigError(f"{where}.{key}: expected a number, got {value!r}")
            value = type(current)(value)
        setattr(section, key, value)


def config_from_dict(values: dict[str, Any]) -> Config:
    """Build a Config from nested dicts (the shape of the TOML file)."""
    config = Config()
    for name, section_values in values.items():
        if not hasattr(config, name) or not isinstance(section_values, dict):
            raise ConfigError(f"unknown config section [{name}]; known: db, generate, fetch, update, urls")
        _apply(getattr(config, name), section_values, name)
    return config


def load_config(path: str | Path | None) -> Config:
    """Read a TOML config file; ``None`` gives the defaults."""
    if path is None:
        return Config()
    path = Path(path)
    try:
        values = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    return config_from_dict(values)
