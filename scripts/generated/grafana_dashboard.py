"""deploy/grafana/crawl.json: the Grafana dashboard of the crawl's Prometheus metrics.

The metrics are the text files cycles/metrics.py writes for node-exporter's textfile
collector (crawl_fetch.prom, crawl_generate.prom, crawl_update.prom, crawl_crawldb.prom);
docs/operations-tools.md says what each one means. A panel is one line of :data:`PANELS`:
a title, a unit, a description, and its queries (PromQL, with an optional ``|`` and legend).
tests/test_grafana_dashboard.py checks that the JSON is what this script writes and that
every metric a panel queries is in the files a real two-cycle crawl writes. After changing
:data:`PANELS`:

    python scripts/regenerate.py dashboard           # rewrite the JSON
    python scripts/regenerate.py --check dashboard   # exit 1 if the JSON is out of date

Import the JSON in Grafana (Dashboards > New > Import) and choose the Prometheus data source
that scrapes node-exporter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "deploy" / "grafana" / "crawl.json"


class Panel(NamedTuple):
    title: str
    unit: str
    """Grafana's unit id: reqps, percentunit, short, s, bytes, ..."""
    description: str
    queries: tuple[str, ...]
    """PromQL, each optionally followed by `` | legend``."""
    stack: bool = False


PANELS = [
    Panel("Fetch rate", "short", "Pages fetched per second (every outcome but deferred, robots_denied, blocked): the 5-minute rate of crawl_fetch_pages_total, and the running fetch's pages over its wall time.", ("rate(crawl_fetch_pages_total[5m]) | pages/s (5 min rate)", "crawl_fetch_pages_per_second | pages/s (this segment so far)", "rate(crawl_fetch_requests_total[5m]) | requests/s (with robots.txt)")),
    Panel("Politeness utilisation", "percentunit", "Requests made / requests the per-host delays allowed over the fetch's wall time (1 = every host asked as often as its delay allows); hosts in flight and hosts whose next request waits for its delay.", ("crawl_fetch_politeness_utilisation_ratio | utilisation", "crawl_fetch_hosts_active | hosts in flight (right axis)", "crawl_fetch_hosts_waiting | hosts waiting for their delay (right axis)")),
    Panel("Errors by kind", "short", "Failed fetches per second by kind: server_error (5xx, 429), network_error, client_error (other 4xx), gone (404, 410), parse_error; timeout counts the network errors that were timeouts.", ("sum by (kind) (rate(crawl_fetch_errors_total[5m])) | {{kind}}",)),
    Panel("Crawl DB size by status", "short", "URLs in the crawl DB by status after each update (schema.DbStatus), stacked: unfetched, fetched, not_modified, redirected, error, dead, gone, duplicate, ...", ("sum by (status) (crawl_crawldb_urls) | {{status}}",), stack=True),
    Panel("Cycle duration by stage", "s", "Wall time of the last generate, fetch and update (fetch: so far, while it runs).", ("crawl_generate_duration_seconds | generate", "crawl_fetch_duration_seconds | fetch", "crawl_update_duration_seconds | update")),
    Panel("Lag", "s", "Seconds since the crawl DB last changed (the last update's end), and how long the most overdue URL has been due: the crawl's lag behind its own schedule.", ("time() - crawl_update_last_success_timestamp_seconds | since the last update", "crawl_crawldb_oldest_due_age_seconds | most overdue URL")),
    Panel("Backlog", "short", "URLs due now, and segments by state: fetched ones wait for their update, generated and fetching ones for their fetch.", ("crawl_crawldb_urls_due | URLs due", "sum by (state) (crawl_crawldb_segments{state=~\"generated|fetching|fetched\"}) | segments {{state}}")),
    Panel("Idle with work", "percentunit", "Idle with work: host-seconds in which a host had a fetchable URL, its spacing allowed a request and none was in flight (docs/segments.md), as a share of the politeness budget, and the host-seconds themselves. Above a few percent the crawler, not politeness, is the limit.", ("crawl_fetch_idle_with_work_ratio | idle with work (share of the politeness budget)", "crawl_fetch_idle_with_work_seconds | host-seconds idle with work (right axis)")),
    Panel("DNS failures by kind", "short", "Failed host name lookups per second by kind (nxdomain, servfail, timeout, ...), and the seconds spent resolving per second (cycles/fetch/dns.py: one lookup per name per TTL, failures cached with back-off).", ("sum by (kind) (rate(crawl_fetch_dns_failures_total[5m])) | {{kind}}", "rate(crawl_fetch_dns_seconds_total[5m]) | seconds resolving per second (right axis)")),
    Panel("TLS failures by reason", "short", "Failed TLS handshakes per second by reason (expired, name_mismatch, untrusted_issuer, protocol_too_old, handshake_timeout, other: cycles/fetch/tls.py), and the seconds spent in handshakes per second.", ("sum by (reason) (rate(crawl_fetch_tls_failures_total[5m])) | {{reason}}", "rate(crawl_fetch_tls_seconds_total[5m]) | seconds in handshakes per second (right axis)")),
    Panel("Outcomes", "short", "Fetch attempts per second by outcome (schema.FetchOutcome).", ("sum by (outcome) (rate(crawl_fetch_outcomes_total[5m])) | {{outcome}}",), stack=True),
]
"""The dashboard, two panels a row, in this order."""

WIDTH, HEIGHT = 12, 8
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def target(query: str, ref: int) -> dict:
    expr, _, legend = (part.strip() for part in query.partition("|"))
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend or "__auto", "refId": chr(ord("A") + ref)}


def panel(spec: Panel, number: int) -> dict:
    overrides = [{"matcher": {"id": "byRegexp", "options": ".*right axis.*"},
                  "properties": [{"id": "custom.axisPlacement", "value": "right"}, {"id": "unit", "value": "short"}]}]
    return {
        "id": number + 1, "type": "timeseries", "title": spec.title, "description": spec.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": HEIGHT, "w": WIDTH, "x": (number % 2) * WIDTH, "y": (number // 2) * HEIGHT},
        "fieldConfig": {"defaults": {"unit": spec.unit, "min": 0, "custom": {
            "drawStyle": "line", "lineWidth": 1, "fillOpacity": 20 if spec.stack else 0, "showPoints": "never",
            "stacking": {"mode": "normal" if spec.stack else "none", "group": "A"}}},
            "overrides": overrides if any("right axis" in q for q in spec.queries) else []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "none"}},
        "targets": [target(q, i) for i, q in enumerate(spec.queries)],
    }


def dashboard() -> dict:
    return {
        "title": "crawl", "uid": "crawl-cycles", "tags": ["crawl"], "timezone": "utc", "editable": True,
        "schemaVersion": 39, "version": 1, "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
        "description": "The crawl's stages (generate, fetch, update) and its crawl DB, from the Prometheus text "
                       "files of cycles/metrics.py. Written by scripts/regenerate.py.",
        # Chosen on import and at the top of the dashboard: the Prometheus that scrapes
        # node-exporter's textfile collector over metrics.textfile_dir.
        "templating": {"list": [{"name": "datasource", "label": "Prometheus", "type": "datasource",
                                 "query": "prometheus", "current": {}, "hide": 0}]},
        "panels": [panel(spec, n) for n, spec in enumerate(PANELS)],
    }


def text() -> str:
    return json.dumps(dashboard(), indent=1) + "\n"
