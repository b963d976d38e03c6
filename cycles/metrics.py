"""Stage metrics: rates in ``stats/<stage>.json`` and Prometheus text files for node-exporter.

Every stage (generate, fetch, update) ends by writing its segment's ``stats/<stage>.json``
with its duration and rates beside its counters (the summaries here), and by replacing its
own Prometheus text file, ``crawl_<stage>.prom``, in ``metrics.textfile_dir``
(:func:`textfile_path`). Fetch also rewrites its file every ``metrics.fetch_interval_s``
while it runs (:class:`FetchMetricsLoop`), from the counters its partitions publish under
``stats/progress/`` (cycles/fetch/worker.py ``publish_progress``).

The files follow node-exporter's textfile-collector convention: written with the official
client library (``prometheus_client.write_to_textfile``) under a temporary name in the same
folder, then renamed over the old file, so the collector (which reads only ``*.prom``) never
sees half a file. One file per stage, and stage-prefixed names (``crawl_fetch_*``), so that
no two files define the same metric. Counters (``_total``) count one segment's work: they
start again at the next segment, which Prometheus's ``rate()`` reads as a counter reset.

Politeness utilisation (issue 10, item 4) is requests made divided by the requests the
per-host delays allowed over the wall time: a host with delay ``d`` asked over ``T``
seconds allows ``1 + T / d`` requests (:func:`allowed_requests`); summed over a partition's
hosts and then over partitions. 1.0 means every host was asked as often as its delay
allows; a host with few URLs cannot use its budget, so the ratio is meaningful once the
frontier holds more URLs than the time allows.

Idle with work (issue 29) sits beside it: host-seconds in which a host had a fetchable URL,
its spacing allowed a request, and none was in flight (``fetch/idle_with_work_s``,
cycles/fetch/frontier.py), and as a share of the politeness budget the requests those
seconds would have allowed over the allowed requests (``fetch/idle_with_work_ratio``). A
stall — the loop too busy to start what is ready, ``fetch.max_in_flight`` full — shows at
once; both are written even when 0.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Iterable, Mapping

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

from cycles.config import Config
from cycles.tables.schema import DNS_FAILURE_KINDS, FetchOutcome
from cycles.storage.store import Store

log = logging.getLogger(__name__)

UNANSWERED_OUTCOMES = (FetchOutcome.DEFERRED, FetchOutcome.ROBOTS_DENIED, FetchOutcome.BLOCKED,
                       FetchOutcome.TLS_FAILED)
"""Outcomes of URLs never requested: not pages (robots.txt or the SSRF guard stopped them, or
they were left for the next cycle, or their host's TLS handshake failed: counted by reason in
``tls/failures/<reason>``). A *page* is a fetch attempt with any other outcome."""

ERROR_OUTCOMES = (FetchOutcome.SERVER_ERROR, FetchOutcome.NETWORK_ERROR, FetchOutcome.CLIENT_ERROR,
                  FetchOutcome.GONE, FetchOutcome.PARSE_ERROR)
"""Outcomes counted as errors ("what is failing"): 5xx/429, network and timeouts, other
4xx, 404/410, and pages the parser crashed on."""

STAGES = ("generate", "fetch", "update")


# --- summaries for stats/<stage>.json -------------------------------------------------------
def per_s(amount: float, seconds: float) -> float:
    return round(amount / seconds, 3) if seconds > 0 else 0.0


def fetch_pages(counters: Mapping[str, float]) -> int:
    """Fetch attempts that were requested (every outcome but the :data:`UNANSWERED_OUTCOMES`)."""
    unanswered = {f"fetch/outcome/{o}" for o in UNANSWERED_OUTCOMES}
    return int(sum(v for k, v in counters.items() if k.startswith("fetch/outcome/") and k not in unanswered))


def fetch_errors(counters: Mapping[str, float]) -> dict[str, int]:
    """Errors by kind: the error outcomes, and among network errors the timeouts."""
    kinds = {o: int(counters.get(f"fetch/outcome/{o}", 0)) for o in ERROR_OUTCOMES}
    kinds["timeout"] = int(counters.get("fetch/timeout", 0))
    return kinds


def dns_failures(counters: Mapping[str, float]) -> dict[str, int]:
    """Failed lookups by kind; every kind present (0 when none), so a dashboard's series exist."""
    return {kind: int(counters.get(f"dns/failures/{kind}", 0)) for kind in DNS_FAILURE_KINDS}


def allowed_requests(delays_s: Iterable[float], elapsed_s: float) -> float:
    """Requests the per-host delays allowed over ``elapsed_s``: ``1 + elapsed / delay`` a host
    (the first request may start at once). A zero delay counts as one millisecond."""
    return sum(1.0 + max(0.0, elapsed_s) / max(d, 0.001) for d in delays_s)


def utilisation(requests: float, allowed: float) -> float | None:
    return round(requests / allowed, 4) if allowed > 0 else None


def fetch_summary(counters: Mapping[str, float], seconds: float) -> dict[str, float]:
    """The fetch stage's duration and rates, as ``fetch/*`` keys for ``stats/fetch.json``.

    ``fetch/allowed_requests`` comes from the partitions (each adds its hosts' budget over
    its own wall time); ``fetch/politeness_utilisation`` is requests / allowed."""
    pages = fetch_pages(counters)
    requests = counters.get("fetch/requests", 0)
    errors = fetch_errors(counters)
    summary = {
        "fetch/seconds": round(seconds, 3),
        "fetch/pages": pages,
        "fetch/pages_per_s": per_s(pages, seconds),
        "fetch/requests_per_s": per_s(requests, seconds),
        "fetch/bytes_per_s": per_s(counters.get("fetch/bytes", 0), seconds),
        "fetch/errors": sum(v for k, v in errors.items() if k != "timeout"),
        **{f"fetch/errors/{k}": v for k, v in errors.items()},
        "fetch/robots_denied": int(counters.get("robots/denied", 0)),
        # Host name lookups (cycles/fetch/dns.py): made, failed (by kind), time spent in them.
        "fetch/dns_lookups": int(counters.get("dns/lookups", 0)),
        "fetch/dns_failures": int(sum(v for k, v in counters.items() if k.startswith("dns/failures/"))),
        "fetch/dns_seconds": round(float(counters.get("dns/seconds", 0.0)), 3),
        **tls_summary(counters),
    }
    ratio = utilisation(requests, counters.get("fetch/allowed_requests", 0))
    if ratio is not None:
        summary["fetch/politeness_utilisation"] = ratio
    summary["fetch/idle_with_work_s"] = round(float(counters.get("fetch/idle_with_work_s", 0.0)), 3)
    summary["fetch/idle_with_work_ratio"] = idle_with_work_ratio(counters)
    return summary


def tls_failures(counters: Mapping[str, float]) -> dict[str, int]:
    """Failed TLS handshakes by reason (cycles/fetch/tls.py REASONS)."""
    return {k.removeprefix("tls/failures/"): int(v) for k, v in counters.items() if k.startswith("tls/failures/")}


def tls_summary(counters: Mapping[str, float]) -> dict[str, float]:
    """``fetch/tls_failures`` (and by reason), new TLS connections and their handshake time."""
    failures = tls_failures(counters)
    handshakes = int(counters.get("tls/handshakes", 0))
    seconds = float(counters.get("tls/seconds", 0.0))
    return {"fetch/tls_failures": sum(failures.values()),
            **{f"fetch/tls_failures/{k}": v for k, v in sorted(failures.items())},
            "fetch/tls_handshakes": handshakes, "fetch/tls_seconds": round(seconds, 3),
            "fetch/tls_ms_per_handshake": round(1000 * seconds / handshakes, 1) if handshakes else 0.0}


def idle_with_work_ratio(counters: Mapping[str, float]) -> float:
    """Requests the idle-with-work seconds would have allowed / requests the delays allowed
    (0 when nothing was allowed: the series is always written)."""
    allowed = counters.get("fetch/allowed_requests", 0)
    return round(counters.get("fetch/idle_with_work_requests", 0.0) / allowed, 4) if allowed else 0.0


def generate_summary(urls: int, hosts: int, partitions: int, seconds: float) -> dict[str, float]:
    return {"generate/seconds": round(seconds, 3), "generate/urls": urls, "generate/hosts": hosts,
            "generate/partitions": partitions, "generate/urls_per_s": per_s(urls, seconds)}


def update_summary(counters: Mapping[str, float], seconds: float) -> dict[str, float]:
    return {"update/seconds": round(seconds, 3),
            "update/results_per_s": per_s(counters.get("update/results", 0), seconds)}


# --- Prometheus text files ----------------------------------------------------------------
def textfile_path(store: Store, config: Config, stage: str) -> Path | None:
    """``<metrics.textfile_dir>/crawl_<stage>.prom``; a relative folder is inside the store's
    local folder. None when ``metrics.textfile`` is off."""
    if not config.metrics.textfile:
        return None
    folder = Path(config.metrics.textfile_dir)
    if not folder.is_absolute():
        folder = store.local_dir(store.path(*folder.parts))
    return folder / f"crawl_{stage}.prom"


class _Families:
    """A collector holding ready-made metric families (one registry per written file)."""

    def __init__(self, families: list):
        self.families = families

    def collect(self):
        return self.families


def write_textfile(path: Path, families: list) -> None:
    """Replace ``path`` with ``families`` in the text format: the client library writes a
    temporary file beside it (its name does not end in ``.prom``) and renames it into place."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), registry)


def publish(store: Store, config: Config, stage: str, families: list) -> Path | None:
    """Write a stage's file; a failure (a full disk, a read-only folder) is logged, not raised:
    the stage's work is done and committed, and its stats JSON holds the same numbers."""
    path = textfile_path(store, config, stage)
    if path is None:
        return None
    try:
        write_textfile(path, families)
    except OSError as exc:
        log.warning("metrics: could not write %s (%s); set metrics.textfile_dir to a writable folder, "
                    "or metrics.textfile = false", path, exc)
        return None
    return path


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _labelled(family, label: str, values: Mapping[str, float]):
    for key, value in sorted(values.items()):
        family.add_metric([str(key)], value)
    return family


def _stage_common(stage: str, segment: str | None, seconds: float, running: bool, started_wall: float,
                  succeeded: bool = True) -> list:
    families = [
        _gauge(f"crawl_{stage}_running", f"1 while {stage} runs, 0 once it ended", 1 if running else 0),
        _gauge(f"crawl_{stage}_duration_seconds", f"Wall time of the {stage} stage so far (or in all)", seconds),
        _gauge(f"crawl_{stage}_started_timestamp_seconds", f"Unix time the {stage} stage started", started_wall),
    ]
    if not running and succeeded:
        families.append(_gauge(f"crawl_{stage}_last_success_timestamp_seconds",
                               f"Unix time the last {stage} stage ended", started_wall + seconds))
    if segment:
        info = InfoMetricFamily(f"crawl_{stage}_segment", f"The segment of the last {stage}", labels=["segment"])
        info.add_metric([segment], {})
        families.append(info)
    return families


def fetch_families(counters: Mapping[str, float], seconds: float, segment: str | None, *, running: bool,
                   started_wall: float, hosts_active: int = 0, hosts_waiting: int = 0,
                   partitions: int = 0, partitions_reporting: int = 0, succeeded: bool = True) -> list:
    """The fetch stage's metrics (``crawl_fetch_*``) from its summed counters (``succeeded``
    false: it stopped without finishing, so no ``crawl_fetch_last_success_timestamp_seconds``)."""
    summary = fetch_summary(counters, seconds)
    outcomes = {k.removeprefix("fetch/outcome/"): v for k, v in counters.items() if k.startswith("fetch/outcome/")}
    codes = {k.removeprefix("fetch/status/"): v for k, v in counters.items() if k.startswith("fetch/status/")}
    families = _stage_common("fetch", segment, seconds, running, started_wall, succeeded) + [
        _counter("crawl_fetch_requests", "HTTP requests made (pages and robots.txt)", counters.get("fetch/requests", 0)),
        _counter("crawl_fetch_pages", "Fetch attempts that were requested (every outcome but deferred, "
                 "robots_denied, blocked)", summary["fetch/pages"]),
        _counter("crawl_fetch_bytes", "Body bytes downloaded", counters.get("fetch/bytes", 0)),
        _counter("crawl_fetch_robots_denied", "URLs not requested: robots.txt disallows them",
                 summary["fetch/robots_denied"]),
        _labelled(CounterMetricFamily("crawl_fetch_outcomes", "Fetch attempts by outcome (schema.FetchOutcome)",
                                      labels=["outcome"]), "outcome", outcomes),
        _labelled(CounterMetricFamily("crawl_fetch_responses", "Page responses by HTTP status code",
                                      labels=["code"]), "code", codes),
        _labelled(CounterMetricFamily("crawl_fetch_errors", "Failed fetches by kind (timeout: network errors "
                                      "that were timeouts)", labels=["kind"]), "kind", fetch_errors(counters)),
        _counter("crawl_fetch_dns_lookups", "Host name lookups made (cycles/fetch/dns.py: one per name per TTL "
                 "or back-off)", summary["fetch/dns_lookups"]),
        _labelled(CounterMetricFamily("crawl_fetch_dns_failures", "Host name lookups that failed, by kind "
                                      "(nxdomain, servfail, timeout, no_address)", labels=["kind"]), "kind",
                  dns_failures(counters)),
        _counter("crawl_fetch_dns_seconds", "Seconds spent in host name lookups (summed over the resolver threads)",
                 summary["fetch/dns_seconds"]),
        _labelled(CounterMetricFamily("crawl_fetch_tls_failures", "Failed TLS handshakes by reason "
                                      "(cycles/fetch/tls.py: expired, name_mismatch, untrusted_issuer, "
                                      "protocol_too_old, handshake_timeout, other)", labels=["reason"]),
                  "reason", tls_failures(counters)),
        _counter("crawl_fetch_tls_seconds", "Seconds spent in TLS handshakes (APPCONNECT - CONNECT of each "
                 "new connection)", float(counters.get("tls/seconds", 0.0))),
        _counter("crawl_fetch_tls_handshakes", "New TLS connections (handshakes made)",
                 counters.get("tls/handshakes", 0)),
        _gauge("crawl_fetch_pages_per_second", "Pages over the stage's wall time", summary["fetch/pages_per_s"]),
        _gauge("crawl_fetch_bytes_per_second", "Body bytes over the stage's wall time", summary["fetch/bytes_per_s"]),
        _gauge("crawl_fetch_allowed_requests", "Requests the per-host delays allowed over the wall time",
               counters.get("fetch/allowed_requests", 0)),
        _gauge("crawl_fetch_idle_with_work_seconds", "Host-seconds in which a host had a fetchable URL, its "
               "spacing allowed a request and none was in flight", summary["fetch/idle_with_work_s"]),
        _gauge("crawl_fetch_idle_with_work_ratio", "Requests those idle host-seconds would have allowed / "
               "requests the per-host delays allowed (share of the politeness budget)",
               summary["fetch/idle_with_work_ratio"]),
        _gauge("crawl_fetch_hosts_active", "Hosts with a request in flight", hosts_active),
        _gauge("crawl_fetch_hosts_waiting", "Hosts with work waiting for their delay", hosts_waiting),
    ]
    if "fetch/politeness_utilisation" in summary:
        families.append(_gauge("crawl_fetch_politeness_utilisation_ratio", "Requests made / requests the "
                               "per-host delays allowed", summary["fetch/politeness_utilisation"]))
    if partitions:
        families += [_gauge("crawl_fetch_partitions", "Partitions of the segment", partitions),
                     _gauge("crawl_fetch_partitions_reporting", "Partitions that published counters",
                            partitions_reporting)]
    return families


def generate_families(stats: Mapping[str, float], segment: str | None, started_wall: float) -> list:
    return _stage_common("generate", segment, stats["generate/seconds"], False, started_wall) + [
        _counter("crawl_generate_urls", "URLs in the fetch list", stats["generate/urls"]),
        _gauge("crawl_generate_hosts", "Hosts in the fetch list", stats["generate/hosts"]),
        _gauge("crawl_generate_partitions", "Partitions of the fetch list", stats["generate/partitions"]),
        _gauge("crawl_generate_urls_per_second", "URLs chosen over the stage's wall time", stats["generate/urls_per_s"]),
    ]


def update_families(stats: Mapping[str, float], segment: str | None, started_wall: float) -> list:
    events = {k: v for k, v in stats.items() if isinstance(v, (int, float)) and not k.startswith("update/")}
    return _stage_common("update", segment, stats["update/seconds"], False, started_wall) + [
        _counter("crawl_update_results", "Fetch results merged into the crawl DB", stats.get("update/results", 0)),
        _counter("crawl_update_new_urls", "New URLs added from outlinks", stats.get("outlinks/new", 0)),
        _gauge("crawl_update_results_per_second", "Results over the stage's wall time", stats["update/results_per_s"]),
        _labelled(CounterMetricFamily("crawl_update_events", "The update's counters by name (stats/update.json: "
                                      "filter/*, trap/*, dedup, outlinks)", labels=["counter"]), "counter", events),
    ]


# --- the crawl DB, after each update ---------------------------------------------------------
CRAWLDB_FILE = "crawldb"
"""``crawl_crawldb.prom``: the crawl DB's size by status, its backlog and lag, and the segments
by state, written by update and inject once they installed a new crawl DB version (:func:`publish_crawldb`)."""


def crawldb_numbers(store: Store, config: Config, now_s: float) -> dict:
    """One DuckDB scan of the current crawl DB's ``status`` and ``next_fetch`` columns, its
    bucket files' sizes, and one listing of the segments' markers."""
    from cycles.tables import segment as seg
    from cycles.tables.crawldb import current_buckets, holds_no_rows
    from cycles.errors import StoreError

    manifest, buckets = current_buckets(store, verify=False)  # the calling stage (update, inject) just wrote them
    if manifest is None:
        raise StoreError(f"no crawl DB in {store.uri}: nothing to count")
    files = [f for b in buckets for f in (b.base, *b.deltas)]
    # Buckets without rows count nothing: left out of the scan (a small crawl's are mostly empty).
    holding = [b for b in buckets if not holds_no_rows(store, b.files)]
    rows = crawldb_counts(store, config, holding, manifest.schema_version, now_s) if holding else []
    oldest = min((r[3] for r in rows if r[3] is not None), default=None)
    segments = Counter(state.value for _, state in seg.states(store))
    return {"by_status": {r[0]: r[1] for r in rows}, "due": sum(r[2] for r in rows),
            "oldest_due_age_s": max(0.0, now_s - oldest) if oldest is not None else 0.0,
            "bytes": sum(store.fs.get_file_info(str(f)).size for f in files), "buckets": len(buckets),
            "segments": {state.value: segments.get(state.value, 0) for state in seg.State}}


def crawldb_counts(store: Store, config: Config, buckets: list, schema_version: int, now_s: float) -> list:
    """Per status: URLs, URLs due at ``now_s``, the oldest due time (epoch s), in ``buckets``."""
    from cycles.tables.crawldb import buckets_source_sql, connect

    con = connect(store, config)
    try:
        # Bases merged with their deltas (docs/incremental.md): one row per URL, its newest state.
        source = buckets_source_sql(store, con, buckets, schema_version)
        return con.execute(f"""
            SELECT status, count(*), count(*) FILTER (WHERE epoch(next_fetch) <= $now),
                   min(epoch(next_fetch)) FILTER (WHERE epoch(next_fetch) <= $now)
            FROM {source} GROUP BY status""", {"now": now_s}).fetchall()
    finally:
        con.close()


def crawldb_families(numbers: Mapping) -> list:
    """The crawl DB's gauges (``crawl_crawldb_*``), from :func:`crawldb_numbers`."""
    return [
        _labelled(GaugeMetricFamily("crawl_crawldb_urls", "URLs in the crawl DB by status (schema.DbStatus)",
                                    labels=["status"]), "status", numbers["by_status"]),
        _gauge("crawl_crawldb_urls_due", "URLs whose next fetch time has come (leased ones included)",
               numbers["due"]),
        _gauge("crawl_crawldb_oldest_due_age_seconds", "How long the most overdue URL has been due (0: none "
               "due): the crawl's lag behind its schedule", numbers["oldest_due_age_s"]),
        _gauge("crawl_crawldb_bytes", "Bytes of the crawl DB's bucket files", numbers["bytes"]),
        _gauge("crawl_crawldb_buckets", "Bucket files of the crawl DB", numbers["buckets"]),
        _labelled(GaugeMetricFamily("crawl_crawldb_segments", "Segments by state (cycles/tables/segment.py); fetched: "
                                    "waiting for their update", labels=["state"]), "state", numbers["segments"]),
    ]


def publish_crawldb(store: Store, config: Config) -> Path | None:
    """Write ``crawl_crawldb.prom`` (see :data:`CRAWLDB_FILE`); a failure is logged, never
    raised: the update that calls it is installed already."""
    if textfile_path(store, config, CRAWLDB_FILE) is None:
        return None
    try:
        numbers = crawldb_numbers(store, config, time.time())
    except Exception as exc:  # noqa: BLE001 - metrics must not fail an installed update
        log.warning("metrics: could not read the crawl DB for crawl_crawldb.prom (%s: %s)", type(exc).__name__, exc)
        return None
    return publish(store, config, CRAWLDB_FILE, crawldb_families(numbers))


# --- fetch, while it runs -------------------------------------------------------------------
def read_progress(folder: Path) -> dict:
    """Sum the counters the partitions publish (cycles/fetch/worker.py ``publish_progress``)."""
    totals: Counter = Counter()
    active = waiting = reporting = 0
    for path in sorted(folder.glob("part-*.json")) if folder.exists() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being replaced right now: the next round reads it
        reporting += 1
        totals.update(data["counters"])
        active += data.get("hosts_active", 0)
        waiting += data.get("hosts_waiting", 0)
    return {"counters": totals, "hosts_active": active, "hosts_waiting": waiting, "reporting": reporting}


class FetchMetricsLoop:
    """Rewrites ``crawl_fetch.prom`` every ``metrics.fetch_interval_s`` while a segment is
    fetched, from the partitions' published counters (a thread of the coordinator)."""

    def __init__(self, store: Store, config: Config, segment: str, partitions: int, progress_dir: Path):
        self.store, self.config, self.segment = store, config, segment
        self.partitions, self.dir = partitions, progress_dir
        self.interval_s = config.metrics.fetch_interval_s
        self.started = time.monotonic()
        self.started_wall = time.time()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def enabled(self) -> bool:
        # Partitions publish nothing with fetch.progress_s = 0: there would be nothing to add.
        return (self.config.metrics.textfile and self.interval_s > 0 and self.config.fetch.progress_s > 0)

    def start(self) -> None:
        if self.enabled():
            self.write_now()  # "running" at once, before the first interval
            self._thread = threading.Thread(target=self._loop, name="fetch-metrics", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.write_now()

    def write_now(self, running: bool = True) -> None:
        sample = read_progress(self.dir)
        families = fetch_families(sample["counters"], time.monotonic() - self.started, self.segment, running=running,
                                  started_wall=self.started_wall, hosts_active=sample["hosts_active"] if running else 0,
                                  hosts_waiting=sample["hosts_waiting"] if running else 0, partitions=self.partitions,
                                  partitions_reporting=sample["reporting"], succeeded=False)
        publish(self.store, self.config, "fetch", families)

    def stop(self) -> None:
        """Stop the thread and write ``crawl_fetch_running 0``: a fetch stopped by a signal or
        an error must not look busy for ever. A fetch that finished replaces the file just
        after, with its final counters (cycles/fetch/fetch.py ``write_fetched``)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.write_now(running=False)
