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

Load it with :func:`load_config`; unknown keys are an error, not silently ignored, and so
is a value of the wrong type or out of range: every setting declares its rule
(``buckets: Annotated[int, Int(1, 100_000)] = 8``) and :func:`check_config` applies them,
with a one-line error naming ``section.key``, the value and what is allowed. A new setting
needs a rule (tests/test_config.py fails without one).
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import math
import os
import re
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from cycles.errors import ConfigError


# --- Constraints ----------------------------------------------------------------------
# Every setting is declared ``name: Annotated[type, Rule] = default``; check_config applies
# the rules, for TOML files and for config_from_dict (how fetch workers get their config)
# alike. A bad value once did damage far from where it was set: db.buckets = 0 made a crawl
# DB that even rebucket could not repair, fetch.max_in_flight = 0 hung fetch,
# fetch.max_page_bytes = -1 skipped every page for 90 days, drop_params = "sid" was read
# letter by letter. tests/test_config.py fails for a setting without a rule.

class Invalid(ValueError):
    """A value breaks its rule; the message says what is allowed."""


def _bounds(low: float | None, high: float | None, above: float | None = None,
            below: float | None = None) -> str:
    """ "from 1 to 10", "at least 0", "above 0 and below 1" ... ("" if unbounded)."""
    if low is not None and high is not None:
        return f"from {low:g} to {high:g}"
    parts = [f"{word} {bound:g}" for word, bound in
             (("at least", low), ("above", above), ("at most", high), ("below", below)) if bound is not None]
    return " and ".join(parts)


@dataclass(frozen=True)
class Int:
    """An integer (not a bool, not a float) within [min, max]."""

    min: int | None = None
    max: int | None = None

    def allowed(self) -> str:
        bounds = _bounds(self.min, self.max)
        return "an integer" + (" " + bounds if bounds else "")

    def check(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or \
                (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise Invalid(self.allowed())
        return value


@dataclass(frozen=True)
class Float:
    """A finite number within [min, max], and > above, < below when given."""

    min: float | None = None
    max: float | None = None
    above: float | None = None
    below: float | None = None

    def allowed(self) -> str:
        bounds = _bounds(self.min, self.max, self.above, self.below)
        return "a number" + (" " + bounds if bounds else "")

    def check(self, value: Any) -> float:
        # NaN compares false with every bound, so it would pass them all: refused first.
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise Invalid(self.allowed())
        value = float(value)
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max) or \
                (self.above is not None and value <= self.above) or (self.below is not None and value >= self.below):
            raise Invalid(self.allowed())
        return value


@dataclass(frozen=True)
class Flag:
    """true or false."""

    def allowed(self) -> str:
        return "true or false"

    def check(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise Invalid(self.allowed())
        return value


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Text:
    """A non-empty string without control characters (a CR or LF in a header value would
    split the request), matching ``pattern`` if given."""

    what: str = "a non-empty string without control characters"
    pattern: str | None = None

    def allowed(self) -> str:
        return self.what

    def check(self, value: Any) -> str:
        if not isinstance(value, str) or not value.strip() or _CONTROL.search(value) or \
                (self.pattern is not None and not re.fullmatch(self.pattern, value)):
            raise Invalid(self.allowed())
        return value


_MEMORY = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT])(i?B)?\s*", re.IGNORECASE)
_MEMORY_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class Memory:
    """A DuckDB memory limit such as "4GB" or "512MiB" (it is pasted into SQL, and
    executor.share_of_memory splits it between workers: only number + unit)."""

    min_bytes: int = 64 << 20

    def allowed(self) -> str:
        return f'a memory size such as "4GB" or "512MiB", at least {self.min_bytes >> 20}MB'

    def check(self, value: Any) -> str:
        m = _MEMORY.fullmatch(value) if isinstance(value, str) else None
        if m is None or float(m.group(1)) * _MEMORY_UNITS[m.group(2).upper()] < self.min_bytes:
            raise Invalid(self.allowed())
        return value


@dataclass(frozen=True)
class Strings:
    """A list of non-empty strings (a bare string is refused: it would be read letter by letter)."""

    def allowed(self) -> str:
        return "a list of non-empty strings"

    def check(self, value: Any) -> list[str]:
        if not isinstance(value, (list, tuple)) or \
                not all(isinstance(v, str) and v.strip() and not _CONTROL.search(v) for v in value):
            raise Invalid(self.allowed())
        return list(value)


PYTHON_RE, RE2 = "Python re", "RE2"


def _compile_error(pattern: str, engine: str) -> str | None:
    """Why ``pattern`` does not compile in ``engine``, or None."""
    if engine == RE2:  # DuckDB's regexp functions use RE2, as do pyarrow's
        import pyarrow as pa
        import pyarrow.compute as pc
        try:
            pc.match_substring_regex(pa.array([""], pa.string()), pattern)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            return str(exc).splitlines()[0]
        return None
    try:
        re.compile(pattern)
    except re.error as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class Regexes:
    """A list of regular expressions that compile (``engine``: Python re or RE2)."""

    engine: str = PYTHON_RE

    def allowed(self) -> str:
        return f"a list of regular expressions ({self.engine} syntax)"

    def check(self, value: Any) -> list[str]:
        patterns = Strings().check(value)
        for pattern in patterns:
            error = _compile_error(pattern, self.engine)
            if error is not None:
                raise Invalid(f"{self.allowed()}; {pattern!r} does not compile: {error}")
        return patterns


@dataclass(frozen=True)
class HostRegexes:
    """A table host -> list of regular expressions (Python re); ``*`` is every host."""

    def allowed(self) -> str:
        return "a table of host = [regular expressions]"

    def check(self, value: Any) -> dict[str, list[str]]:
        if not isinstance(value, dict) or not all(isinstance(k, str) and k.strip() for k in value):
            raise Invalid(self.allowed())
        try:
            return {host: Regexes().check(patterns) for host, patterns in value.items()}
        except Invalid as exc:
            raise Invalid(f"{self.allowed()}: {exc}") from None


@dataclass(frozen=True)
class HostAddresses:
    """A table host name -> IP address."""

    def allowed(self) -> str:
        return 'a table of host = "IP address"'

    def check(self, value: Any) -> dict[str, str]:
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and k.strip() and not _CONTROL.search(k) and isinstance(v, str) for k, v in value.items()):
            raise Invalid(self.allowed())
        for address in value.values():
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise Invalid(f"{self.allowed()}; {address!r} is not an IP address") from None
        return dict(value)


@dataclass(frozen=True)
class OptionalFile:
    """A path to an existing file, or "" for none."""

    what: str = "a file"

    def allowed(self) -> str:
        return f'the path of {self.what}, or "" for none'

    def check(self, value: Any) -> str:
        if not isinstance(value, str) or _CONTROL.search(value):
            raise Invalid(self.allowed())
        if value and not os.path.isfile(value):
            raise Invalid(f"{self.allowed()}; {value!r} is not a file")
        return value


@dataclass(frozen=True)
class Networks:
    """A list of IP networks in CIDR notation ("10.0.0.0/8", "fd00::/8"; a bare address is a /32 or /128)."""

    def allowed(self) -> str:
        return 'a list of IP networks such as "10.0.0.0/8"'

    def check(self, value: Any) -> list[str]:
        for network in Strings().check(value):
            try:
                # strict: "10.0.0.1/8" has host bits set; whether its writer meant the host or
                # the whole /8 cannot be told, and an allow-list must not guess wide.
                ipaddress.ip_network(network, strict=True)
            except ValueError as exc:
                raise Invalid(f"{self.allowed()}; {network!r} is not a network ({exc})") from None
        return list(value)


@dataclass(frozen=True)
class Choice:
    """One of the given values."""

    values: tuple = ()

    def allowed(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self.values)

    def check(self, value: Any) -> Any:
        if value not in self.values or isinstance(value, bool) != any(isinstance(v, bool) for v in self.values):
            raise Invalid(self.allowed())
        return value


Rule = (Int | Float | Flag | Text | Memory | Strings | Regexes | HostRegexes | HostAddresses | Networks | Choice
        | OptionalFile)

DAY_S = 86400
MEMORY = Memory()
# pycurl refuses a non-ASCII str (UnicodeEncodeError at the first request of every worker).
HEADER_VALUE = Text("printable ASCII (it is sent as a header)", r"[\x20-\x7e]+")
PRODUCT_TOKEN = Text("a product token: letters, digits, '-' and '_' (RFC 9309 §2.2.1)", r"[A-Za-z0-9_-]+")


@dataclass
class DbConfig:
    """Layout of the crawl DB and the tables beside it."""

    buckets: Annotated[int, Int(1, 100_000)] = 8  # 100_000: rebucket.MAX_BUCKETS
    """Number of host-hash buckets the crawl DB is split into (one Parquet file each).
    A host always lives in one bucket, so generate and update work bucket by bucket
    with bounded memory: choose about 1.6 M URLs per bucket per 4 GB of
    ``duckdb_memory_limit``, at least 8 (docs/cluster.md, "Choosing the bucket count"). Used
    when the crawl DB is created; afterwards the count in ``crawldb/CURRENT`` rules, and
    ``crawl rebucket --buckets N`` changes it."""

    keep_versions: Annotated[int, Int(1, 1000)] = 2
    """How many crawl DB versions to keep on disk (the current one included)."""

    delta_updates: Annotated[bool, Flag()] = True
    """Update writes per bucket only a delta file: the rows the segment changed or added,
    beside the untouched base, so its cost follows the segment, not the crawl DB (readers
    merge base and deltas, the newest row of a URL winning; docs/incremental.md). Off: every
    update rewrites every bucket whole (the Nutch 1.x way)."""

    compact_ratio: Annotated[float, Float(0.0, 100.0)] = 0.25
    """``crawl compact`` (and ``crawl run`` when due) merges a bucket's deltas into a new base
    once their bytes pass this share of the base's: readers then merge at most about this much
    more than the base, and the rewrite of a bucket is paid once per that much change."""

    compact_max_deltas: Annotated[int, Int(1, 10_000)] = 16
    """...or once a bucket has this many delta files (each is a file readers open)."""

    compact_buckets_per_version: Annotated[int, Int(1, 100_000)] = 8
    """``crawl compact`` installs a crawl DB version after this many buckets: a killed
    compaction loses at most that much work, and a resumed one goes on with the rest."""

    compact_row_group_rows: Annotated[int, Int(1024)] = 131_072
    """Rows per row group of a compacted base, which is sorted by ``next_fetch``: generate
    skips every row group whose smallest ``next_fetch`` is not due (Parquet statistics), so
    smaller groups skip more finely (and compress a little worse). ``crawl compact``'s memory
    is bounded whatever the crawl DB's size: one bucket at a time, sorted by DuckDB within
    ``duckdb_memory_limit`` (spilling to disk past it), plus about 0.5 GiB for the process, the
    Arrow batches and the row group being written: peak RSS ≤ the limit + 0.5 GiB (measured at
    10 M URLs: 0.72 GiB at "256MB", 1.31 at "1GB"; docs/incremental.md)."""

    duckdb_memory_limit: Annotated[str, MEMORY] = "4GB"
    """DuckDB's memory limit for generate, update and compact; past it DuckDB spills to disk."""

    duckdb_threads: Annotated[int, Int(0, 1024)] = 2
    """DuckDB worker threads."""

    processes: Annotated[int, Int(0, 1024)] = 0
    """Processes running generate's and update's bucket tasks at once (cycles/executor.py);
    0 means one per CPU core. They share ``duckdb_memory_limit`` and ``duckdb_threads``.
    A crawl DB under ``small_db_rows`` rows is done in-process: starting workers would
    cost more than it saves."""

    small_db_rows: Annotated[int, Int(0)] = 2_000_000
    """Below this many crawl DB rows, bucket tasks run in-process (see ``processes``)."""

    applied_segments_kept: Annotated[int, Int(1)] = 500
    """How many segment ids the crawl DB's manifest remembers as applied (the newest), so that
    updating one of them again changes nothing. Segments are applied in generation order, so
    only a segment older than all of these could be applied twice."""

    s3_lock_lease_s: Annotated[float, Float(5.0, 86_400.0)] = 120.0
    """On an S3 store, how long a stage's lock object stays valid without renewal (S3 has no
    file locks: cycles/storage/store.py S3Lock). A stage that died without releasing it blocks the
    others this long at most; a stage stalled longer than this (a paused VM, a long GC)
    loses its lock and refuses to swap ``CURRENT``. Longer is safer against stalls, shorter
    frees a crashed crawl sooner."""

    s3_lock_renew_s: Annotated[float, Float(1.0, 28_800.0)] = 30.0
    """How often the holder renews its S3 lock; at most a third of ``s3_lock_lease_s``, so
    that two renewals can fail (a transient S3 error) before the lease runs out."""

    executor: Annotated[str, Text("local, or a Dask scheduler address tcp://host:port (or tls://host:port)",
                                  r"local|(tcp|tls)://[^\s/]+:[0-9]{1,5}")] = "local"
    """Where generate's, update's and fetch's tasks run (cycles/cluster.py): ``local`` is this
    machine (``processes``, ``fetch.processes``); ``tcp://scheduler:8786`` a Dask cluster
    (``pip install 'crawl[cluster]'``; start it with ``dask scheduler`` and ``dask worker
    tcp://scheduler:8786 --nthreads 1`` on each machine). The store must then be ``s3://``:
    the workers share nothing else. Also ``crawl --executor``."""


@dataclass
class GenerateConfig:
    """Choosing the URLs of the next fetch list."""

    top_n: Annotated[int, Int(1)] = 50_000
    """At most this many URLs in one fetch list (one segment)."""

    segment_s: Annotated[float, Float(above=0, max=DAY_S)] = 120.0
    """Target length of a segment's fetch, in seconds: the plan a fetch list is sized by
    (docs/segments.md). Each host gets no more URLs than its spacing fits into it — its delay,
    Crawl-delay, slow-host delay (``fetch.delay_factor``) and back-off, as the host DB last
    saw them, after any not-before wait (:func:`cycles.tables.hostdb.planned_urls`) — discovery inside
    the fetch queues no more than fit either, and the fetch ends at this length (or sooner,
    when it becomes a tail: cycles/fetch/tail.py), handing back what it did not reach without
    a result row. Two minutes: ``crawl cycle`` from cron every five minutes ends on time, and
    a slow host holds nothing past it. ``crawl run`` chooses its own, shorter length
    (cycles/commands/run.py ``run_segment_s``) and uses this as its ceiling. Raise it when generate
    and update take a large share of a cycle (a big crawl DB); ``fetch.max_duration_s``,
    when set, overrides the fetch's end."""

    run_segment_min_s: Annotated[float, Float(above=0, max=DAY_S)] = 15.0
    """The shortest segment ``crawl run`` plans (cycles/commands/run.py ``run_segment_s``:
    three times its last updates, at least this, at most ``segment_s``). Every boundary costs
    each busy host a new connection (a TCP and TLS handshake, a round trip or more) and the
    end of the fetch waits for its slowest transfer; shorter segments pay that more often,
    longer ones hold what a segment discovered on other hosts back longer. 15 s: bench_crawl's
    study of fixed lengths (5, 8, 15, 30, 60 s on its 322-host web, loaded machine) found 15 s
    and longer within the noise and shorter ones paying for generate and update too often."""

    max_urls_per_host: Annotated[int, Int(1)] = 100
    """At most this many URLs of one host in one fetch list (scaled by importance,
    ``host_budget_*``), besides what its spacing fits into ``segment_s``. At the 1 request/s
    politeness floor a host cannot be fetched faster than 3,600 pages an hour."""

    partitions: Annotated[int, Int(1, 4096)] = 2
    """Number of fetch-list partitions; a host is in exactly one (balanced by expected fetch
    time, cycles/tables/assign.py). Each partition is fetched by one process."""

    max_urls_per_pattern: Annotated[int, Int(1)] = 50
    """At most this many URLs of one URL pattern (see ``update.max_urls_per_pattern``) in
    one fetch list, so a trap cannot fill a host's per-cycle budget (``max_urls_per_host``:
    at most half of it). Not 20, as it was: a big host whose pages share one pattern
    (``/article/N``) got 20 URLs a segment where its spacing fitted 30 in ``crawl run``'s
    45 s segments, ran dry mid-segment and waited for the next (bench_crawl --real-web: h0,
    402 pages of ``/p/N.html``, 484 ms, idle 19-23 s a run). A trap stays bounded by this
    per segment and by ``update.max_urls_per_pattern`` in all."""

    feed_max_lag_cycles: Annotated[int, Int(0)] = 10
    """When a registered consumer of the pages feed is this many batches behind, generate
    holds the crawl (and from half of it, halves the fetch list) and says why: slow the
    crawl down, never drop pages. 0 disables the check."""

    lease_s: Annotated[int, Int(1)] = 6 * 3600
    """How long URLs handed to a segment stay leased. If the segment is never updated
    (a fetcher died), its URLs become due again after this."""

    overdue_max_boost: Annotated[float, Float(0, 1000)] = 4.0
    """A due URL's priority is its score × (1 + how overdue it is, in units of its refetch
    interval), the overdue part capped at this: with 4, at most 5 × the score. A page twice
    past its due time outranks an equally scored page due now; the cap keeps a long-forgotten
    page from outranking every important one."""

    overdue_min_interval_s: Annotated[int, Int(1)] = 3600
    """The unit "how overdue" is measured in is the URL's refetch interval, but at least this
    many seconds, so that a page refetched every few minutes does not reach the cap at once."""

    ranking: Annotated[str, Choice(("links", "depth"))] = "links"
    """What a URL's importance (the score the overdue boost multiplies) is. ``links``: from the
    link DB update builds (cycles/update/linkgraph.py): ``link_host_weight`` × ln(1 + its host's
    importance) + ``link_inlink_weight`` × ln(1 + distinct other hosts linking to it) +
    ``link_depth_weight`` / (depth + 1), times the crawl DB score's own factor, score × (depth + 1)
    (update's demotions of duplicate-heavy and mirror hosts); and each host's budget follows its importance (``host_budget_min_factor``).
    ``depth``: the crawl DB's score, 1 / (depth + 1) with those demotions, and the same budget
    ``max_urls_per_host`` for every host (the ranking before the link DB, kept for comparison)."""

    link_host_weight: Annotated[float, Float(0, 1000)] = 1.0
    """``ranking = 'links'``: weight of ln(1 + host importance); importance is the host's
    PageRank × the number of hosts (dimensionless, 1 for an average host, 1 - update.link_damping
    for a host nobody links to, and for hosts not in the link DB yet)."""

    link_inlink_weight: Annotated[float, Float(0, 1000)] = 1.0
    """``ranking = 'links'``: weight of ln(1 + distinct other hosts linking to the URL). With
    the defaults, 8 linking hosts add 2.2: more than the whole depth term (at most 0.5) and
    than being on a host three times as important as the average (ln 4 = 1.4 against ln 2)."""

    link_depth_weight: Annotated[float, Float(0, 1000)] = 0.5
    """``ranking = 'links'``: weight of 1 / (depth + 1); orders the pages of a host that no
    other host links to (most of them) as the depth ranking would."""

    host_budget_min_factor: Annotated[float, Float(0, 1000)] = 1.0
    """``ranking = 'links'``: a host's share of one fetch list is ``max_urls_per_host`` ×
    its importance, within [this, ``host_budget_max_factor``] × ``max_urls_per_host`` (and at
    least 1 URL). 1.0 keeps ``max_urls_per_host`` as every host's floor; below 1 lesser hosts
    get less."""

    host_budget_max_factor: Annotated[float, Float(0, 1000)] = 4.0
    """``ranking = 'links'``: the most important hosts get at most this many times
    ``max_urls_per_host`` URLs in one fetch list (politeness still spaces their requests, so a
    larger budget only helps while the cycle has time for it)."""

    partition_by: Annotated[str, Choice(("host", "domain", "ip"))] = "host"
    """Which hosts share one politeness slot (one request in flight, the delay between the end
    of one response and the next request, whichever of its names is asked) and so one
    fetch-list partition (cycles/slotkey.py). ``host``: every host name its own. ``domain``:
    the names of one registered domain (Public Suffix List, bundled snapshot). ``ip``: the
    names ``fetch.resolve`` pins to one address (others: each its own). Sharing is slower for
    sites with many sub-domains, which the server then sees at the one delay it asked for."""

    assign_top_keys: Annotated[int, Int(1)] = 10_000
    """How many of the segment's heaviest slot keys (hosts, or domains / addresses with
    ``partition_by``; by expected fetch time, URLs × delay) are placed in a partition one by
    one (cycles/tables/assign.py). The others are placed in ``assign_groups`` hash groups;
    the coordinator's planning is over these K + G items whatever the segment's size. Each
    bucket task reports its heaviest 2K / buckets keys (at least 1, at most K)."""

    assign_groups: Annotated[int, Int(1, 1 << 20)] = 4096
    """Hash groups (``host_hash(key) % assign_groups``) the keys not placed one by one are
    placed in, each at its keys' summed expected time. Many more groups than partitions keep
    the partitions even; every host, listed or not, has its group's partition."""


@dataclass
class FetchTransfers:
    """Fetching, its first part (:class:`FetchConfig` holds both): identity, politeness, TLS
    and the limits of one transfer. One section, ``[fetch]``, in the file."""

    user_agent: Annotated[str, HEADER_VALUE] = "crawlbot/0.1 (+https://example.invalid/crawlbot)"
    """User-Agent header sent with every request. Name the crawler and a contact URL."""

    robots_agent: Annotated[str, PRODUCT_TOKEN] = "crawlbot"
    """Product token matched against robots.txt User-agent lines (RFC 9309 §2.2.1)."""

    delay_s: Annotated[float, Float(0, DAY_S)] = 1.0
    """Seconds between the end of one response and the start of the next request to the
    same host. Never below 1.0: values under it are raised to it."""

    max_crawl_delay_s: Annotated[float, Float(0, DAY_S)] = 30.0
    """A robots.txt Crawl-delay above this makes us skip the host for the cycle
    (counted as ``robots/crawl_delay_too_long``) rather than crawl it slower than useful."""

    connect_timeout_s: Annotated[float, Float(above=0, max=3600)] = 10.0
    """TCP (and TLS) connect timeout. A TLS handshake still unanswered at this point is the
    TLS failure ``handshake_timeout`` (cycles/fetch/tls.py)."""

    ca_bundle: Annotated[str, OptionalFile("a PEM file of trusted CA certificates")] = ""
    """PEM file of the certificate authorities https servers are verified against (libcurl's
    CAINFO), instead of the system store. Empty (the default): the system store, the bundle
    libcurl was built with (``/etc/ssl/certs/ca-certificates.crt`` for the pycurl wheel on
    Debian; it ignores ``SSL_CERT_FILE`` and ``CURL_CA_BUNDLE``). For a private CA or a test
    web (docs/tls.md). Certificates are always verified (``tls_archive_anyway`` aside)."""

    min_tls_version: Annotated[str, Choice(("1.0", "1.1", "1.2", "1.3"))] = "1.2"
    """Oldest TLS version offered. 1.2: TLS 1.0 and 1.1 are deprecated (RFC 8996); a server
    that speaks nothing newer fails with ``protocol_too_old``. "1.0" or "1.1" also lowers
    OpenSSL's security level to 0 (``DEFAULT:@SECLEVEL=0``), without which OpenSSL 3 refuses
    them anyway; certificates are still verified."""

    tls_archive_anyway: Annotated[bool, Flag()] = False
    """Archive hosts whose certificate does not verify, as archival crawlers do (Heritrix,
    ``wget --no-check-certificate``): after a failure ``expired``, ``name_mismatch``,
    ``untrusted_issuer`` or ``protocol_too_old`` the host is fetched without verification
    (down to TLS 1.0 for the last), and every such exchange's WARC metadata record says
    ``tls-verify: failed``, the reason, and ``tls-verification: skipped``. Off (the default): a
    certificate we could not verify never gets a request; the host is backed off
    (``tls_failure_backoff_s``). Never a fallback to plain http either way (docs/tls.md)."""

    tls_failure_backoff_s: Annotated[float, Float(0, 365 * DAY_S)] = 86400.0
    """How long a host whose certificate or protocol failed (expired, name_mismatch,
    untrusted_issuer, protocol_too_old) is left alone (its ``not_before`` in the host DB),
    doubling with each consecutive TLS failure across cycles, up to ``max_not_before_s``. A
    day: certificates are renewed on a human time scale, and asking again every cycle would only
    repeat the handshake. A stalled handshake or an unclassified failure, which may pass, starts
    at 1/24 of it (cycles/fetch/tls.py)."""

    timeout_s: Annotated[float, Float(above=0, max=DAY_S)] = 30.0
    """Total time allowed for one transfer, headers and body."""

    low_speed_bytes_per_s: Annotated[int, Int(0)] = 1000
    """A transfer slower than this for ``low_speed_time_s`` is aborted: a server that
    drips a byte a second must not hold a slot for the full timeout."""

    low_speed_time_s: Annotated[int, Int(0, 3600)] = 5
    """See ``low_speed_bytes_per_s``."""

    max_page_bytes: Annotated[int, Int(1)] = 2 * 1024 * 1024
    """Largest body we download; a larger transfer is aborted, not truncated after the fact."""

    max_robots_bytes: Annotated[int, Int(1)] = 500 * 1024
    """Only this much of a robots.txt is parsed (RFC 9309 §2.5 asks for at least 500 KiB)."""

    max_redirects: Annotated[int, Int(0, 100)] = 5
    """Redirect hops followed: for robots.txt (RFC 9309 §2.3.1.2), and for pages inline
    when the target's host is in this worker's partition (cycles/fetch/worker.py). The hop
    past it is recorded with error 'too many redirects'; its target stays an outlink for a
    later cycle."""

    max_in_flight: Annotated[int, Int(1, 100_000)] = 256
    """Transfers in flight in one fetch worker (each to a different host). Sized for the
    real web: a page takes a round trip or two (100-300 ms; a TLS handshake two more on a
    new connection), and a host is asked once a second at most, so 1,000 pages/s need
    about 1,000 x 0.25 s = 250 transfers in flight over the workers (Little's law), from
    ~1,200 hosts with work. 256 a worker, one worker per core, leaves twice that. Slow
    handshakes and lookups do not hold the others up: a handshake is a transfer in flight
    like any (bounded by ``connect_timeout_s``), and a lookup waits off the loop
    (``dns_max_in_flight``). Not more: 1,024 a worker (with 512 resolver threads, before lookups
    left the threads) on the named-host HTTPS test web
    (scripts/bench_fetch.py --real-web, 2 cores shared at load 13-19) started more TLS
    handshakes than the machine could finish within ``connect_timeout_s``: 834 timed out and
    backed their hosts off, and fewer pages came than with 256 (4,369 against 6,835).
    There, with the crawler given 0.25-0.35 of a core by the other load, CPU and not this
    was the limit (docs/real-web-testing.md)."""

    processes: Annotated[int, Int(0, 1024)] = 0
    """Fetch worker processes; 0 means one per CPU core. 1 runs in-process."""

    html_only: Annotated[bool, Flag()] = True
    """Download bodies of HTML (and XHTML) only; other types are recorded, body skipped."""

    resolve: Annotated[dict[str, str], HostAddresses()] = field(default_factory=dict)
    """Host name -> IP address overrides (like curl's --resolve), for test webs and
    private deployments. Applies to every port."""

    allowed_networks: Annotated[list[str], Networks()] = field(default_factory=list)
    """Networks (CIDR, e.g. ``"10.0.0.0/8"``, ``"fd00::/8"``) the fetcher may connect to
    besides public addresses. Empty (the default): public addresses only, so a link or a
    redirect to loopback, a private (RFC 1918) or link-local address (169.254.169.254, the
    cloud metadata service), CGNAT space, multicast or a reserved range is refused
    (``fetch/blocked_address``, outcome ``blocked``). Checked on the address actually
    connected to, after DNS and ``resolve`` (cycles/fetch/addresses.py). A test web on
    loopback needs ``["127.0.0.0/8"]``; a bad entry is a ConfigError at load time."""



@dataclass
class FetchConfig(FetchTransfers):
    """Fetching: identity, politeness, TLS and transfer limits (the first part, FetchTransfers);
    then the segment's course: flushing, when to stop, discovery, robots.txt, sitemaps, DNS,
    fingerprints."""

    flush_s: Annotated[float, Float(above=0)] = 30.0
    """Results are flushed to disk (Parquet + WARC, atomically) at least this often, so a
    killed fetch loses at most this much work."""

    flush_pages: Annotated[int, Int(1)] = 5000
    """... or after this many results, whichever comes first."""

    flush_bytes: Annotated[int, Int(1)] = 32 << 20
    """... or once the buffered page texts and outlinks reach about this many bytes: a chunk
    peaks at ~4× its text in memory (5,000 test-web pages peaked at 760 MB per worker,
    32 MiB chunks at ~380 MB; cycles/fetch/output.py)."""

    max_host_failures: Annotated[int, Int(1)] = 5
    """After this many consecutive network errors a host is set aside for the rest of the
    cycle; its remaining URLs go back unfetched, not failed."""

    warc_gzip_level: Annotated[int, Int(0, 3)] = 1
    """Compression level of the WARC files' gzip members, ISA-L's scale (0 fastest .. 3
    smallest; cycles/fetch/output.py). On the 30 KB test-web pages: level 1 78 µs a page at
    40 % of the size, 2: 83 µs / 39 %; zlib's level 1 took 258 µs for 41 %, and warcio's
    own level 9 ~1.2 ms for 35 %."""

    outlink_bloom_fp: Annotated[float, Float(0, below=1)] = 0.001
    """False-positive rate of the per-partition Bloom filter that writes each outlink once
    per segment and linking host (cycles/storage/bloom.py); a false positive loses that link for this
    segment only.
    0 turns the filter off (every outlink of every page is written)."""

    outlink_bloom_links_per_page: Annotated[int, Int(1)] = 40
    """Sizing of that filter: expected distinct outlinks per fetched page (14 bits each at 0.1 %)."""

    delay_factor: Annotated[float, Float(0, 1000)] = 2.0
    """A slow host gets a proportionally longer delay: at least this many times its last
    response time (capped at ``max_crawl_delay_s``). A server that takes 3 s to answer is
    telling us it is busy."""

    max_duration_s: Annotated[float, Float(0)] = 0.0
    """Stop fetching a segment after this many seconds. 0 (the default): at the length its
    fetch list was planned for (``generate.segment_s``, or what ``crawl run`` chose; written
    in the segment's generated marker), or without a limit for a segment generated before
    plans were written. URLs not reached go back unfetched and un-leased (no result row:
    due again at the next generate, counted as ``fetch/handed_back``), so cron runs end on
    time (Nutch ``fetcher.timelimit.mins``). Set it only to cut every segment shorter than planned."""

    throughput_min_pages_s: Annotated[float, Float(0)] = 0.0
    """Throughput floor (Nutch ``fetcher.throughput.threshold.pages``): once a partition has
    run ``throughput_after_s``, it stops when fewer than this many requests a second ended
    over the last ``throughput_window_s`` — its remaining work is a few slow hosts — and
    hands the URLs not reached back like ``max_duration_s`` (``fetch/throughput_stop``).
    0 (the default) is off, as in Nutch: the rate a partition can reach is its host count
    over the host delay, so a floor that fits a 1,000-host crawl would cut a one-host one.
    The scale-free tail rule (``tail_share``) is what ends a segment early by default."""

    throughput_window_s: Annotated[float, Float(above=0)] = 30.0
    """Seconds over which ``throughput_min_pages_s`` is measured."""

    throughput_after_s: Annotated[float, Float(0)] = 60.0
    """Seconds a partition runs before the throughput floor applies (robots.txt first, and
    hosts waiting out the spacing of the previous cycle, make the first seconds slow)."""

    tail_share: Annotated[float, Float(0, below=1)] = 0.25
    """A segment's fetch ends early, handing back what it has not reached, when it has become
    a tail (cycles/fetch/tail.py; ``fetch/tail_stop``): the requests per second its hosts
    with work left could still make (each one over its spacing, or over the wait to its
    not-before time) have fallen under this share of the most they could make earlier in
    the segment, and at least ``tail_after_share`` of the planned length has passed. A
    ratio of the segment to itself, so it holds for 3 hosts as for 30,000: a fixed pages/s
    floor (``throughput_min_pages_s``) cannot. 0 turns it off."""

    tail_after_share: Annotated[float, Float(0, 1)] = 0.5
    """The tail rule applies from this share of the segment's planned length on: a segment
    whose many small hosts finish in its first seconds keeps its big hosts busy for at least
    that long, rather than paying a boundary (update, generate) every few seconds."""

    follow_outlinks_depth: Annotated[int, Int(0, 100)] = 4
    """Discovery inside the fetch (Nutch ``fetcher.follow.outlinks.depth``): a link parsed
    from a page, to a URL the crawl DB does not hold, on a host of this partition, is
    fetched in the same cycle when it is at most this many links from where the segment
    entered: a fetch-list URL, or the first URL of a new host it claimed, which starts the
    count again (cycles/fetch/discovery.py). 0 turns it off. 4, not Nutch's off: a link-following crawl
    otherwise fetches only the seeds in cycle 1 and one link level per cycle, and a host
    waits idle for the next cycle while its delay would allow more. How far new hosts chain
    is ``follow_new_hosts_chain``; the per-host budget and the trap caps bound how much one
    deep site can take. Measured with scripts/bench_crawl.py
    (120 s, 322 hosts, quiet 2-core machine, when the count ran from the fetch-list URL
    across claimed hosts): 4,536 good pages with 2, 4,635 with 4.
    Normalisation, URL filters, nofollow, ``update.max_depth``, robots.txt and the trap caps (``update.max_urls_per_host_total``, ``update.max_urls_per_pattern``)
    apply as in update; a URL is fetched at most once a segment."""

    follow_outlinks_per_host: Annotated[int, Int(0)] = 100
    """At most this many URLs discovered inside the fetch per host and segment (the rest are
    outlinks for update, as before). Besides it, a discovered URL is queued only while the
    host's queue still fits the segment's planned length at the host's spacing
    (``discover/host_time_budget``: cycles/fetch/discovery.py), so a short segment's
    time budget binds first. At a 1 s delay, 100 pages take a host 100 s."""

    follow_new_hosts: Annotated[bool, Flag()] = True
    """With discovery on: a link to a host the crawl DB does not know at all (and no segment
    in flight claimed) is fetched in the same segment by the worker that found it, which
    claims the host for the segment (cycles/tables/newhosts.py) — robots.txt first, its own
    delay, the budget and trap caps above. Off: such a host waits for the segment's update
    and a later generate (a whole segment of its delay budget lost)."""

    follow_new_hosts_chain: Annotated[int, Int(0, 100)] = 4
    """With ``follow_new_hosts``: at most this many new-host claims in a row inside a segment
    (a fetch-list host links to new host 1, whose page links to new host 2, ...), so hosts
    do not chain without end; each claimed host gets ``follow_outlinks_depth`` levels of its
    own. 0: no new host is claimed by discovery. 4: the bound the shared hop count gave
    before (when a host entered at hop 2 had only 2 levels left)."""

    follow_seen_fp: Annotated[float, Float(above=0, below=1)] = 0.01
    """False-positive rate of the seen-set generate writes beside each partition's fetch
    list (the URLs the crawl DB holds for the partition's hosts; cycles/storage/bloom.py, 1.2 bytes
    a URL at 1 %). A false positive only leaves a new URL to the next cycle."""

    robots_cache_s: Annotated[int, Int(0)] = 24 * 3600
    """A robots.txt is reused for this long (RFC 9309 §2.4 asks for no more than 24 h),
    measured on the crawl clock (cycles.clock). An older 2xx copy with an ETag or
    Last-Modified is then revalidated with a conditional GET."""

    robots_error_cache_s: Annotated[int, Int(0)] = 3600
    """An *unreachable* robots.txt (5xx, 429, network error, redirect loop) is asked again
    after this many seconds, not after ``robots_cache_s``: a host whose robots.txt failed
    once must not be kept out for a day. Matches ``update.deferred_retry_s``, after which
    the host's deferred URLs are due again."""

    robots_unreachable_fallback_s: Annotated[int, Int(0)] = 30 * 86400
    """When robots.txt has been unreachable for this long without a break, RFC 9309
    §2.3.1.4 lets a crawler stop assuming complete disallow: the last good copy (a 2xx or
    4xx answer, kept in the host DB) is obeyed, or, if there is none, everything is allowed."""

    sitemaps: Annotated[bool, Flag()] = True
    """Read the sitemaps a host's robots.txt names (``Sitemap:`` lines), as requests on the
    host's slot before its pages, whenever its robots.txt is downloaded or revalidated (so
    at most once per ``robots_cache_s``: that is how often a host's sitemaps are re-read).
    Their URLs become new URLs and their ``lastmod`` makes known ones due
    (cycles/tables/sitemaps.py, cycles/update/sitemaps.py)."""

    sitemap_max_bytes: Annotated[int, Int(1024, 1 << 30)] = 50 * 1024 * 1024
    """Bytes of one sitemap file read, downloaded and after decompression each (the protocol's
    50 MB): a longer file is read up to here, a gzip bomb stops here (``sitemap/bytes_cap``)."""

    sitemap_max_urls_per_host: Annotated[int, Int(0)] = 50_000
    """URLs taken from one host's sitemaps per cycle (the budget that keeps one site from
    flooding the crawl DB; ``sitemap/budget_cap``). One file gives at most 50,000 (the
    protocol's limit; ``sitemap/file_cap``). ``update.max_urls_per_host_total`` still caps the
    host in the crawl DB."""

    sitemap_max_files_per_host: Annotated[int, Int(0, 50_000)] = 10
    """Sitemap files requested from one host per cycle, index children included
    (``sitemap/files_cap``): each is a request at the host's delay before its pages."""

    sitemap_max_depth: Annotated[int, Int(0, 8)] = 2
    """How deep sitemap indexes are followed: the robots.txt-listed files are depth 0, the
    files an index there lists depth 1, ... (``sitemap/too_deep``). A file already read this
    cycle is not read again, so an index listing itself ends at once (``sitemap/repeated``)."""

    progress_s: Annotated[float, Float(0)] = 1.0
    """How often (seconds) fetch workers publish their counters under
    ``segments/<id>/stats/progress/`` and, on a terminal, the one-line progress display
    is redrawn. 0 turns both off."""

    max_retry_after_s: Annotated[float, Float(0)] = 3600.0
    """Upper bound on a Retry-After we honour within a cycle; beyond it the host is set aside.
    A later cycle that finds the host's ``not_before`` (host DB) further away than this sets it
    aside at once, without asking it."""

    max_not_before_s: Annotated[float, Float(above=0)] = 7 * 86400.0
    """Longest a host's Retry-After or back-off keeps it out, across cycles (the host DB's
    ``not_before``). A longer ask (``Retry-After: 99999999999``, an HTTP-date years ahead) is
    cut to this, so that a host is not lost for good and the time stays a valid timestamp."""

    dns_cache_s: Annotated[int, Int(0, DAY_S)] = 3600
    """Longest (seconds) a host name's looked-up addresses are used, whatever their TTL says
    (cycles/fetch/dns.py): the answer is kept in the host DB (``dns_expires_at``), so every
    partition, segment and ``crawl run`` process reuses it. 0 looks a name up before every request. The SSRF guard checks the address actually connected to, so a stale answer
    cannot reach a blocked network."""

    dns_min_ttl_s: Annotated[int, Int(0, DAY_S)] = 60
    """Shortest (seconds) an answer is used, for names with a TTL of a few seconds (load
    balancers): a host asked every second would otherwise be looked up nearly as often."""

    dns_threads: Annotated[int, Int(2, 1024)] = 128
    """Threads of one fetch worker for the rare lookup whose answer does not fit UDP (the TC
    bit) and is asked again over TCP, which blocks (cycles/fetch/dns.py). Every other query is
    sent and read without a thread (``dns_max_in_flight``). Idle threads cost nothing but
    their stacks' address space, and none is started until one is needed."""

    dns_max_in_flight: Annotated[int, Int(1, 65_536)] = 1024
    """Lookups (each its A and AAAA query, over UDP, read by the fetch loop without blocking)
    in flight at once in one fetch worker; more wait their turn (``dns/wait_seconds``). At the
    real web's 10-200 ms a query, 1,024 resolve the 3,000 new names of a fetch list within
    about a second of its start, where 128 resolver threads took 10-15 s on a loaded 2-core
    machine (0.3-0.5 s a lookup, threads and the fetch loop fighting for the GIL; 3-5 s waiting
    for a thread: scripts/bench_fetch.py --real-web). A bound all the same: a name server sees
    at most twice this many of our queries at once."""

    dns_timeout_s: Annotated[float, Float(above=0, max=600)] = 5.0
    """Time allowed for one lookup (its A and AAAA queries, with the resolver's own retries
    inside it: ``options timeout:`` of /etc/resolv.conf). A name with no answer by then fails
    with kind ``timeout``."""

    dns_retry_s: Annotated[float, Float(0, DAY_S)] = 600.0
    """After a failed lookup (NXDOMAIN, SERVFAIL, timeout, no address) the name is not looked
    up again for this long, doubled with each failure in a row up to ``dns_retry_max_s``:
    a failing name costs one lookup per back-off period, not one per URL or retry. The
    host's URLs are deferred meanwhile (error ``dns <kind>: ...``), and the back-off is kept
    in the host DB across segments (``dns_expires_at``, ``dns_failures``)."""

    dns_retry_max_s: Annotated[float, Float(0, 30 * DAY_S)] = 86400.0
    """Longest back-off between lookups of a failing name (see ``dns_retry_s``)."""

    minhash_main_content: Annotated[bool, Flag()] = True
    """Take a page's near-duplicate fingerprint (cycles.fingerprint.minhash64, the crawl DB's
    ``minhash`` column) of its main content in paragraphs (cycles.fetch.parse._main_blocks:
    header, nav, footer, aside and short paragraphs left out) instead of its whole text. On
    testweb.neardup_set it finds 98 % of the near-duplicate pairs instead of 78 %, at
    precision 1.00 either way (``scripts/bench_update.py --only neardup-set``): copies that
    differ in boilerplate, advertisements, session lines or block order, and print views.
    On by default since GitHub issue #13 section 3 (it was opt-in at 90 % against 52 % with
    the SimHash): it costs the fetch path ~0.2 CPU-ms a page on the 30 KB pages of
    scripts/bench_fetch.py (parse_html 598 against 404 µs, scripts/bench_parse.py).
    Switching it changes every fingerprint (pages fingerprinted one way do not match pages
    fingerprinted the other until they are fetched again)."""

    minhash_block_min_bytes: Annotated[int, Int(0, 1 << 20)] = 200
    """A paragraph of a page's main content counts in its fingerprint only when its text is at
    least this many UTF-8 bytes (cycles.fetch.parse._main_blocks): shorter ones are menus,
    taglines, advertisements, footers, date and session lines. 200 bytes: about 30 English
    words or 70 CJK characters. Measured on testweb.neardup_set (scripts/bench_update.py):
    100 bytes found 53 % of print views and 30 % of syndicated copies, 200 all of them,
    250 lost some short paragraphs. 0 keeps every paragraph."""


@dataclass
class UrlConfig:
    """URL normalisation and filtering (cycles/urls.py), applied to seeds and outlinks."""

    drop_params: Annotated[list[str], Strings()] = field(default_factory=lambda: [
        "utm_*", "gclid", "fbclid", "msclkid", "dclid", "yclid", "mc_cid", "mc_eid",
        "_ga", "_hsenc", "_hsmi", "sessionid", "session_id", "sid", "phpsessid",
        "jsessionid", "aspsessionid*", "asp.net_sessionid", "oscsid", "zenid", "cfid", "cftoken",
    ])
    """Query parameters removed during normalisation (case-insensitive; ``*`` is a wildcard),
    also as ``;name=value`` path parameters (``;jsessionid=``). Tracking and session
    parameters make one page look like thousands. Classic ASP names its session parameter
    ``ASPSESSIONID`` plus 8 random letters (``ASPSESSIONIDQQGGQGRS``), hence the ``*``;
    ``osCsid`` (osCommerce) and ``zenid`` (Zen Cart) are shop session ids."""

    max_length: Annotated[int, Int(16, 1_000_000)] = 2048
    """Longer URLs are dropped (``filter/too_long``)."""

    max_path_depth: Annotated[int, Int(1, 10_000)] = 16
    """URLs with more path segments are dropped (``filter/too_deep``)."""

    max_segment_repeats: Annotated[int, Int(1)] = 2
    """A path in which one segment occurs more often than this is a likely trap
    (``/a/b/a/b/a/b``) and is dropped (``filter/repeating_segments``)."""

    blocked_extensions: Annotated[list[str], Strings()] = field(default_factory=lambda: [
        "jpg", "jpeg", "png", "gif", "webp", "svg", "ico", "bmp", "tif", "tiff",
        "mp3", "mp4", "m4a", "avi", "mov", "mkv", "webm", "wav", "ogg", "flac",
        "zip", "gz", "tgz", "bz2", "xz", "7z", "rar", "tar", "iso", "dmg", "exe", "msi",
        "bin", "apk", "deb", "rpm", "woff", "woff2", "ttf", "eot", "css", "js",
    ])
    """Path extensions we never fetch (``filter/extension``): not HTML, large, or both."""

    include: Annotated[dict[str, list[str]], HostRegexes()] = field(default_factory=dict)
    """Per-host allow list: host -> regular expressions; when a host has one, only URLs
    matching one of them are kept (``filter/host_rule``)."""

    exclude: Annotated[dict[str, list[str]], HostRegexes()] = field(default_factory=dict)
    """Per-host block list: host -> regular expressions (``filter/host_rule``). ``*`` as
    host applies to every host."""


@dataclass
class UpdateConfig:
    """Merging a segment into the crawl DB."""

    max_retries: Annotated[int, Int(0, 1000)] = 3
    """After this many consecutive transient failures a URL becomes ``dead``
    and is retried only every ``dead_retry_s``."""

    dead_retry_s: Annotated[int, Int(1)] = 90 * 86400
    """How rarely a dead (dead-lettered) URL is tried again."""

    retry_s: Annotated[int, Int(1)] = 86400
    """Delay before a transient failure (5xx, timeout) is retried; it doubles with each
    failure in a row (``retry_s`` × 2^retries, see ``max_retry_doublings``)."""

    max_retry_doublings: Annotated[int, Int(0, 30)] = 10
    """The retry delay doubles at most this many times (``retry_s`` × 2^10 at most), so the
    delay stays a valid interval whatever ``max_retries`` is."""

    schedule: Annotated[str, Choice(("adaptive", "fixed", "optimal"))] = "optimal"
    """How the refetch interval of a page seen (2xx or 304) is chosen (cycles/update/schedule.py):
    ``optimal`` gives each page the interval of Cho & Garcia-Molina's optimal policy for its
    learned change rate under the fetch budget (``refresh_budget_per_cycle`` per cycle, at the
    crawl's own cadence: see ``cycle_interval_s``), a new page its host's median learned
    rate; ``adaptive`` follows the page's observed change rate without a budget (see
    ``revisit_factor``); ``fixed`` refetches every page after ``default_interval_s``
    (news-like pages: ``news_like_interval_s``). ``optimal`` is the default since it came
    within 95 % of the optimum's freshness on the test web (docs/update.md)."""

    refresh_budget_per_cycle: Annotated[int, Int(0)] = 0
    """Optimal schedule: fetches per cycle its refetch intervals are planned to spend on the
    pages already fetched (0: ``generate.top_n``, what generate may select a cycle). Pages
    changing too fast for the budget to keep up with are then left at ``max_interval_s``."""

    cycle_interval_s: Annotated[int, Int(1)] = 86400
    """Optimal schedule: how often a cycle runs (seconds) until the crawl has shown its own
    cadence, and the longest cadence it plans for: from the second generate on, the median
    gap between its last segments' generate times (``cadence_segments``), if shorter (a
    cycle with nothing due makes no segment, so gaps can be several cycles). The budget per
    cycle over the cadence is the refetch rate (fetches per second) the intervals are
    planned for, and intervals are whole cycles."""

    cadence_segments: Annotated[int, Int(0, 1000)] = 8
    """Optimal schedule: the cadence is the median gap between the generate times of the
    last this-many + 1 segments (at least two of them; at most ``cycle_interval_s``; 0:
    always ``cycle_interval_s``)."""

    interval_growth: Annotated[float, Float(1, 100)] = 1.5
    """Adaptive and optimal schedules: while no change has been seen on a page, its interval
    grows by this factor at each refetch (up to ``max_interval_s``)."""

    default_interval_s: Annotated[int, Int(1)] = 14 * 86400
    """Fetch interval of a newly fetched page (14 days), and of a redirect or a URL robots.txt denies."""

    min_interval_s: Annotated[int, Int(1)] = 2 * 3600
    """Shortest refetch interval the adaptive and optimal schedules give (2 hours, as
    ``news_like_interval_s``), however short the crawl's cadence."""

    max_interval_s: Annotated[int, Int(1)] = 90 * 86400
    """Longest refetch interval."""

    news_like_interval_s: Annotated[int, Int(1)] = 2 * 3600
    """First refetch interval of pages on news-like hosts or URL patterns (2 hours); later
    intervals follow ``schedule`` (by default the page's learned change rate and the budget)."""

    news_like_hosts: Annotated[list[str], Strings()] = field(default_factory=list)
    """Hosts declared news-like (exact names, or ``*.example.com`` for a domain and its subdomains)."""

    news_like_patterns: Annotated[list[str], Regexes(RE2)] = field(default_factory=list)
    """Regular expressions (DuckDB / RE2 syntax) on the URL that declare a page news-like."""

    revisit_factor: Annotated[float, Float(above=0, max=1000)] = 0.5
    """Refetch interval = this / estimated change rate, within [min_interval_s, max_interval_s]:
    0.5 revisits a page about twice per expected change. The change rate is estimated from the
    page's history with Cho & Garcia-Molina's estimator, -ln((n - X + 0.5) / (n + 0.5)) / I,
    for X changes seen in n refetches at mean interval I (ACM TOIT 2003), which stays finite
    when every visit saw a change."""

    deferred_retry_s: Annotated[int, Int(1)] = 3600
    """A URL deferred by fetch (host's robots.txt unreachable, host set aside, out of
    time) is due again after this."""

    gone_interval_s: Annotated[int, Int(1)] = 90 * 86400
    """Refetch interval of a page that answered 404/410."""

    max_depth: Annotated[int, Int(0, 10_000)] = 20
    """Links are not followed beyond this many hops from a seed."""

    minhash_max_distance: Annotated[int, Int(0, 16)] = 3
    """Two pages whose 64-bit near-duplicate fingerprints (the ``minhash`` column: a 1-bit
    MinHash, cycles.fingerprint.minhash64) differ in at most this many bits are
    near-duplicates (Manku et al., WWW 2007: k = 3 for 64-bit fingerprints at web scale).
    For the MinHash, 3 bits is a Jaccard similarity of about 0.9 of the shingles or more;
    on testweb.neardup_set 3 finds 98 % of the copies, 4 finds 99 %, and different pages
    are at least 20 bits apart (scripts/bench_update.py --only neardup-set)."""

    minhash_blocks: Annotated[int, Int(1, 16)] = 5
    """The fingerprint is cut into this many blocks; a near-duplicate pair agrees on at least
    ``blocks - max_distance`` of them, so candidates are found by joining on every such
    combination of blocks (10 joins on ~26-bit keys for 5 and 3; 20 on ~32-bit keys for
    6) instead of comparing all pairs. Every pair within the distance is found either way;
    more blocks: more joins, fewer false candidates per join. 5 measured 1.8x faster than
    6 with 7 M segment pages against 78 M stored fingerprints (a crawl DB of 100 M URLs)."""

    minhash_min_chars: Annotated[int, Int(0)] = 300
    """Pages with less text than this are never called near-duplicates: a fingerprint of a few
    words matches too easily."""

    dup_host_ratio: Annotated[float, Float(0, 1)] = 0.5
    """A host whose pages fetched in a segment are duplicates at least this often gets its
    unfetched URLs' scores multiplied by ``dup_host_score_factor``."""

    dup_host_score_factor: Annotated[float, Float(0, 1)] = 0.5
    """See ``dup_host_ratio``."""

    mirror_min_pages: Annotated[int, Int(1)] = 5
    """A host is a mirror of another when at least this many of its pages, and at least
    ``mirror_ratio`` of the pages fetched from it, are exact copies of that host's pages."""

    mirror_ratio: Annotated[float, Float(0, 1)] = 0.8
    """See ``mirror_min_pages``. A mirror host's unfetched URLs get score × ``mirror_score_factor``."""

    mirror_score_factor: Annotated[float, Float(0, 1)] = 0.1
    """A mirror host's unfetched URLs get their score multiplied by this (see
    ``mirror_min_pages``): its pages are copies of another host's, fetched already."""

    variant_min_pages: Annotated[int, Int(1)] = 3
    """A query parameter (``?print=1``, ``?view=N``, ``?ref=``, ``?lang=``) is learned to
    carry no content on a host once at least this many of its variants there proved copies
    of the URL without it (docs/dedup.md); the host's URLs with it are then set aside as
    duplicates of that URL and not fetched (counter ``dedup/variant_skipped``)."""

    variant_ratio: Annotated[float, Float(0, 1)] = 0.9
    """See ``variant_min_pages``: and at least this share of the variants judged were
    copies (a host whose ``?print=1`` pages differ from the page without it never learns it)."""

    variant_recheck_s: Annotated[int, Int(1)] = 180 * 86400
    """A URL set aside for a learned variant parameter is due again only after this: a
    parameter that starts to carry content is noticed eventually, at one fetch per URL."""

    redirect_target_score: Annotated[float, Float(0)] = 0.1
    """Score of a URL first met as a redirect target followed inline, when no outlink in the
    segment gives it one."""

    max_urls_per_host_total: Annotated[int, Int(1)] = 100_000
    """Total cap of URLs the crawl DB keeps for one host, across all cycles; new URLs beyond
    it are dropped (``trap/host_cap``). Stops a site that generates pages without end. Not
    ``generate.max_urls_per_host``, which caps one host's URLs in one fetch list."""

    max_urls_per_pattern: Annotated[int, Int(1)] = 500
    """New URLs whose pattern (the URL with digits replaced and query values removed, e.g.
    ``http://h/cal/N/N?d=``) already has this many URLs on its host are dropped
    (``trap/pattern_cap``): an endless calendar or ID sequence is throttled by pattern,
    while the rest of the host keeps growing."""

    link_graph: Annotated[bool, Flag()] = True
    """Build the link DB (cycles/update/linkgraph.py) from each segment's followed outlinks:
    distinct linking hosts per URL and the host graph's PageRank, which ``generate.ranking =
    'links'`` ranks by. Off: the link DB stays as it is (generate then ranks every host alike)."""

    link_damping: Annotated[float, Float(0, below=1)] = 0.85
    """PageRank damping of the host graph: the chance of following a link rather than jumping
    to a random host (0.85 as Brin & Page, and networkx's default)."""

    link_iterations: Annotated[int, Int(1, 1000)] = 50
    """At most this many PageRank iterations (each one pass over the host edges); the error
    shrinks by ``link_damping`` per iteration, so 50 leave at most 0.85^50 ≈ 3e-4 of it."""

    link_rank_interval_s: Annotated[float, Float(0, 365 * DAY_S)] = 21_600.0
    """How often the link DB is merged and the host graph's PageRank run (``crawl compact``,
    or ``crawl run`` when due). Between two, each update only adds its segment's links as
    pending deltas (``linkdb/pending/``): generate ranks by the last merged link DB, so inlink
    counts and host ranks lag by up to this long (docs/incremental.md). Six hours: with a
    cycle an hour, the merge (which costs the whole link DB) is paid once per six cycles.
    0: in every update, as before."""

    link_tolerance: Annotated[float, Float(0, 1)] = 1e-6
    """PageRank stops early once the ranks (which sum to 1) moved by less than this in all,
    summed over the hosts, in one iteration. Each cycle starts from the last one's ranks, so a
    graph that changed little costs few iterations."""


@dataclass
class LogConfig:
    """What a run tells its operator while it works (cycles/progress.py, cycles/logs.py)."""

    progress_interval_s: Annotated[float, Float(0, DAY_S)] = 60.0
    """When stderr is not a terminal (cron, Airflow, a log file), fetch and update log one
    progress line (done/total, rate, ETA) this often; 0 turns it off. On a terminal the line
    is redrawn in place instead (see ``redraw_s``)."""

    redraw_s: Annotated[float, Float(0, 3600)] = 1.0
    """How often the live progress line of update is redrawn on a terminal (fetch redraws at
    ``fetch.progress_s``, when its workers publish their counters); 0 turns it off."""


@dataclass
class MetricsConfig:
    """Prometheus text files for node-exporter's textfile collector (cycles/metrics.py).

    Each stage replaces its own file, ``crawl_<stage>.prom`` (generate, fetch, update), at its
    end, and fetch also every ``fetch_interval_s`` while it runs: written under a temporary
    name in the same folder, then renamed, so the collector never reads half a file. The
    same numbers go into the segment's ``stats/<stage>.json``."""

    textfile: Annotated[bool, Flag()] = True
    """Write the ``.prom`` files (false: only the stats JSON). On by default: a few KB a
    stage, in the store's local folder, where a node-exporter can be pointed at them."""

    textfile_dir: Annotated[str, Text("a folder path without control characters")] = "metrics"
    """Folder of the ``.prom`` files. A relative path is inside the store's local folder
    (``<data>/metrics`` by default; for an S3 store, this machine's local mirror of it);
    an absolute path is used as is (e.g. node-exporter's ``--collector.textfile.directory``).
    Two crawls on one machine need two folders, or their files replace each other."""

    fetch_interval_s: Annotated[float, Float(0, DAY_S)] = 15.0
    """How often (seconds) fetch rewrites ``crawl_fetch.prom`` from the counters its
    partitions publish (needs ``fetch.progress_s`` > 0); 0: only at the end. Prometheus
    scrapes every 15-60 s, so more often is wasted."""


@dataclass
class WarcConfig:
    """What the fetch stage archives in its WARC files (cycles/fetch/warc_records.py) and how the
    files are named. ``crawl export`` builds the indexes and text from them (cycles/archive/)."""

    archive: Annotated[str, Choice(("all", "html"))] = "all"
    """``all``: every exchange — robots.txt fetches, 3xx with their Location, 4xx/5xx (body
    capped at ``max_error_body_bytes``), not-HTML and too-large answers as truncated records
    (``WARC-Truncated``), ``revisit`` records for 304s and exact duplicates, a ``metadata``
    record (outcome, timings) per request. ``html``: only 2xx HTML responses and their
    requests (the archive of versions before 0.2)."""

    max_error_body_bytes: Annotated[int, Int(0)] = 64 * 1024
    """Bytes of a 3xx/4xx/5xx body (and of a robots.txt error body) kept in its response
    record; a longer one is cut there and marked ``WARC-Truncated: length``. Error pages are
    evidence, not content: 64 KiB shows what the server said."""

    dedup_revisits: Annotated[bool, Flag()] = True
    """A 2xx page (not robots.txt) whose payload is byte-identical to one archived earlier by
    the same fetch worker is written as a ``revisit`` record (profile identical-payload-digest, pointing
    at the original's record) instead of a second copy of the body."""

    metadata_records: Annotated[bool, Flag()] = True
    """Write a ``metadata`` record after each exchange with the fetch outcome, the error and
    the transfer time (``application/warc-fields``); rows without an HTTP response (network
    errors) point at theirs."""

    file_prefix: Annotated[str, Text("letters, digits, '.' and '_' (it starts every WARC file name)",
                                      r"[A-Za-z0-9._]+")] = "CRAWL"
    """First part of WARC file names: ``<prefix>-<segment>-part-NNNNN-cNNNNNN-<host>.warc.gz``
    (segment, partition, chunk, then the writing machine: unique across segments and sortable,
    the convention of Common Crawl's and Heritrix's files)."""


@dataclass
class Config:
    """The whole configuration. ``Config()`` is the polite default."""

    db: DbConfig = field(default_factory=DbConfig)
    generate: GenerateConfig = field(default_factory=GenerateConfig)
    fetch: FetchConfig = field(default_factory=FetchConfig)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    urls: UrlConfig = field(default_factory=UrlConfig)
    log: LogConfig = field(default_factory=LogConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    warc: WarcConfig = field(default_factory=WarcConfig)

    def effective_delay_s(self) -> float:
        """The per-host delay floor actually used: never under one second."""
        return max(1.0, self.fetch.delay_s)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_SECTIONS = tuple(f.name for f in dataclasses.fields(Config))


def rules_of(section_type: type) -> dict[str, Rule | None]:
    """The declared rule of each setting of a config section class, by name (None if it
    has none: tests/test_config.py fails then)."""
    return _rules_of(section_type)


@functools.cache
def _rules_of(section_type: type) -> dict[str, Rule | None]:
    hints = typing.get_type_hints(section_type, include_extras=True)
    rules = {}
    for f in dataclasses.fields(section_type):
        found = [m for m in getattr(hints[f.name], "__metadata__", ()) if hasattr(m, "check")]
        rules[f.name] = found[0] if found else None
    return rules


@dataclass(frozen=True)
class Typed:
    """Of the default's type, nothing more: only for a setting merged without a rule, so
    that it still loads (and the test says to declare one)."""

    type: type

    def allowed(self) -> str:
        return f"a {self.type.__name__}"

    def check(self, value: Any) -> Any:
        if not isinstance(value, self.type):
            raise Invalid(self.allowed())
        return value


def _rule_or_type_check(section_type: type, key: str) -> Rule | Typed:
    rule = rules_of(section_type)[key]
    if rule is not None:
        return rule
    default = getattr(section_type(), key)
    if isinstance(default, bool):
        return Flag()
    if isinstance(default, int):
        return Int()
    if isinstance(default, float):
        return Float()
    return Typed(type(default))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_setting(section: str, key: str, rule: Rule | Typed, value: Any) -> Any:
    """``value`` for ``section.key`` as the config holds it (a float for an integer given to
    a float setting); ConfigError, one line naming the setting, the value and what is allowed."""
    try:
        return rule.check(value)
    except Invalid as exc:
        raise ConfigError(f"{section}.{key} = {_shown(value)} is not allowed: expected {exc}") from None


# Settings that must agree with each other: each gives the problem, or None.
_RELATIONS = [
    lambda c: None if c.update.min_interval_s <= c.update.max_interval_s else
    f"update.min_interval_s = {c.update.min_interval_s} must not exceed update.max_interval_s = {c.update.max_interval_s}",
    lambda c: None if c.update.minhash_max_distance < c.update.minhash_blocks else
    f"update.minhash_max_distance = {c.update.minhash_max_distance} must be below update.minhash_blocks = "
    f"{c.update.minhash_blocks} (a near-duplicate pair must agree on a block to be found)",
    lambda c: None if c.db.s3_lock_renew_s * 3 <= c.db.s3_lock_lease_s else
    f"db.s3_lock_renew_s = {c.db.s3_lock_renew_s} must be at most a third of db.s3_lock_lease_s = "
    f"{c.db.s3_lock_lease_s} (two renewals may fail before the lease runs out)",
]


def check_config(config: Config) -> Config:
    """Check every setting of ``config`` against its rule, and the relations between
    settings; ConfigError for the first bad one. Returns ``config`` (values normalised:
    lists copied, integers in float settings made floats)."""
    for section_field in dataclasses.fields(config):
        section = getattr(config, section_field.name)
        for key in rules_of(type(section)):
            rule = _rule_or_type_check(type(section), key)
            setattr(section, key, check_setting(section_field.name, key, rule, getattr(section, key)))
    for relation in _RELATIONS:
        problem = relation(config)
        if problem is not None:
            raise ConfigError(problem)
    return config


# Settings renamed: old name (section, key) -> new key. A config with the old name is refused
# with a message naming the new one, rather than silently ignored or silently reinterpreted.
RENAMED = {
    # Two settings named max_urls_per_host meant different things (per fetch list in
    # generate, in total in update).
    ("update", "max_urls_per_host"): "max_urls_per_host_total",
    # The near-duplicate fingerprint is a 1-bit MinHash, not a SimHash (issue 25: honest names).
    **{(section, "simhash_" + rest): "minhash_" + rest for section, rest in (
        ("fetch", "main_content"), ("fetch", "block_min_bytes"),
        ("update", "max_distance"), ("update", "blocks"), ("update", "min_chars"))},
}


def _apply(section: Any, values: dict[str, Any], where: str) -> None:
    known = {f.name: f for f in dataclasses.fields(section)}
    for key, value in values.items():
        if (where, key) in RENAMED:
            new = RENAMED[(where, key)]
            raise ConfigError(f"{where}.{key} was renamed to {where}.{new} (same meaning, same unit); "
                              f"write `{new} = {_shown(value)}` in [{where}]")
        if key not in known:
            raise ConfigError(f"{where}: unknown setting {key!r}; known: {', '.join(sorted(known))}")
        setattr(section, key, check_setting(where, key, _rule_or_type_check(type(section), key), value))


def apply_setting(config: Config, section: str, key: str, value: Any) -> None:
    """Set ``section.key`` of ``config`` to ``value``, checked by the setting's rule as a
    file's value is (``crawl -s section.key=value``); ConfigError naming it otherwise. The
    relations between settings are left to :func:`check_config`."""
    if section not in _SECTIONS:
        raise ConfigError(f"unknown config section [{section}]; known: {', '.join(_SECTIONS)}")
    _apply(getattr(config, section), {key: value}, section)


def config_from_dict(values: dict[str, Any]) -> Config:
    """Build a Config from nested dicts (the shape of the TOML file), every setting checked
    (:func:`check_config`)."""
    if not isinstance(values, dict):
        raise ConfigError(f"a config is a table of sections, got {_shown(values)}")
    config = Config()
    for name, section_values in values.items():
        if name not in _SECTIONS or not isinstance(section_values, dict):
            raise ConfigError(f"unknown config section [{name}]; known: {', '.join(_SECTIONS)}")
        _apply(getattr(config, name), section_values, name)
    return check_config(config)


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
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    try:
        return config_from_dict(values)
    except ConfigError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
