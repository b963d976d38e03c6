"""``crawl report``: one self-contained HTML page (and its PNG charts) about a crawl.

It answers, at a glance, "how fast is my crawl going, what is failing, and where": a summary
table on top (size of the crawl DB, pages and errors, fetch rate and politeness utilisation
of the last cycle and of all), then what fails (error kinds, worst hosts), then charts:

- pages fetched and new URLs per cycle; outcome and HTTP status mix per cycle;
- fetch rate over time; top hosts by pages and by errors;
- depth and score distributions; freshness (changes found per refetch);
- crawl DB size by bucket; politeness utilisation per cycle (cycles/metrics.py).

Data: DuckDB over the store's views (:func:`cycles.commands.status.open_views`: the current crawl DB,
every segment's fetch results, the pages feed) and each segment's ``stats/<stage>.json``.
Charts: matplotlib (the optional extra ``report``), drawn off-screen (Agg), embedded in the
page as base64 ``data:`` PNGs, so the page needs no network and no other file; the PNGs are
also written beside it. Nothing is read from or written to the store but reads.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import os
from dataclasses import dataclass, field
from pathlib import Path

from cycles.tables import segment as seg
from cycles.config import Config
from cycles.tables.crawldb import current_buckets
from cycles.errors import CrawlError
from cycles.metrics import ERROR_OUTCOMES, UNANSWERED_OUTCOMES
from cycles.tables.schema import DbStatus
from cycles.commands.status import open_views, require_crawldb
from cycles.storage.durable import write_file_atomically
from cycles.storage.sql import literal
from cycles.storage.store import Store
from cycles.update.dedup import dedup_summary

TOP_HOSTS = 15
"""Hosts shown in the top-hosts charts and tables."""

SCORE_BINS = 30
RATE_POINTS = 60
"""The fetch-rate chart has about this many time bins over the crawl's span (at least 1 s each)."""

FAILING_STATUSES = (DbStatus.ERROR, DbStatus.DEAD, DbStatus.GONE)
"""Crawl DB statuses counted as failing in the summary."""

_PAGES = "outcome NOT IN ({})".format(", ".join(literal(o) for o in UNANSWERED_OUTCOMES))
_ERRORS = "outcome IN ({})".format(", ".join(literal(o) for o in ERROR_OUTCOMES))


@dataclass
class ReportResult:
    html: Path
    images: list[Path] = field(default_factory=list)
    summary: dict[str, float | str | None] = field(default_factory=dict)


# --- data -----------------------------------------------------------------------------------
def _rows(con, sql: str, params: dict | None = None) -> list[tuple]:
    return con.execute(sql, params or {}).fetchall()


def _has_view(con, name: str) -> bool:
    return bool(_rows(con, "SELECT 1 FROM information_schema.tables WHERE table_name = $n", {"n": name}))


def segment_stats(store: Store) -> list[dict]:
    """Each segment's state and stats JSON (generate, fetch, update), oldest first."""
    out = []
    for segment, state in seg.states(store):
        folder = seg.segment_dir(store, segment)
        row = {"segment": segment, "state": state.value}
        for stage in ("generate", "fetch", "update"):
            path = seg.stats_file(folder, stage)
            row[stage] = store.read_json(path) if store.exists(path) else {}
        out.append(row)
    return out


def crawldb_numbers(con) -> dict:
    total, hosts, fetched, failing, changes, refetches = _rows(con, f"""
        SELECT count(*), count(DISTINCT host), count(*) FILTER (WHERE status = {literal(DbStatus.FETCHED)}),
               count(*) FILTER (WHERE status IN ({", ".join(literal(s) for s in FAILING_STATUSES)})),
               coalesce(sum(change_count), 0), coalesce(sum(greatest(fetch_count - 1, 0)), 0)
        FROM crawldb""")[0]
    by_status = dict(_rows(con, "SELECT status, count(*) FROM crawldb GROUP BY 1 ORDER BY 2 DESC, 1"))
    return {"urls": total, "hosts": hosts, "fetched": fetched, "failing": failing, "changes": int(changes),
            "refetches": int(refetches), "by_status": by_status}


def fetched_numbers(con) -> dict:
    """What the segments' fetch results say: per cycle, per host, over time, by error."""
    empty = {"per_segment": [], "outcomes": {}, "classes": {}, "hosts": [], "errors": [], "rate": [], "bin_s": 1,
             "refetches": {}, "pages": 0, "error_count": 0}
    if not _has_view(con, "fetched"):
        return empty
    per_segment = _rows(con, f"""
        SELECT segment, count(*) FILTER (WHERE {_PAGES}), count(*) FILTER (WHERE outcome = 'ok'),
               count(*) FILTER (WHERE {_ERRORS})
        FROM fetched GROUP BY 1 ORDER BY 1""")
    outcomes: dict[str, dict[str, int]] = {}
    for segment, outcome, n in _rows(con, "SELECT segment, outcome, count(*) FROM fetched GROUP BY 1, 2"):
        outcomes.setdefault(segment, {})[outcome] = n
    classes: dict[str, dict[str, int]] = {}
    for segment, klass, n in _rows(con, f"""
            SELECT segment, CASE WHEN http_status IS NULL THEN 'no answer'
                                 ELSE (http_status // 100)::VARCHAR || 'xx' END, count(*)
            FROM fetched WHERE {_PAGES} GROUP BY 1, 2"""):
        classes.setdefault(segment, {})[klass] = n
    hosts = _rows(con, f"""
        SELECT host, count(*) FILTER (WHERE {_PAGES}) AS pages, count(*) FILTER (WHERE {_ERRORS}) AS errors,
               mode(outcome) FILTER (WHERE {_ERRORS}) AS worst
        FROM fetched GROUP BY 1""")
    errors = _rows(con, f"""
        SELECT outcome, coalesce(error, 'HTTP ' || http_status::VARCHAR, '?') AS reason, count(*) AS n,
               count(DISTINCT host) AS hosts, min(host) AS example
        FROM fetched WHERE {_ERRORS} GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2 LIMIT 12""")
    first, last = _rows(con, f"SELECT epoch(min(fetched_at)), epoch(max(fetched_at)) FROM fetched WHERE {_PAGES}")[0]
    bin_s = max(1, int(((last or 0) - (first or 0)) / RATE_POINTS) + 1)
    rate = _rows(con, f"""
        SELECT floor(epoch(fetched_at) / $bin_s) * $bin_s AS t, count(*) FROM fetched
        WHERE {_PAGES} AND fetched_at IS NOT NULL GROUP BY 1 ORDER BY 1""", {"bin_s": bin_s})
    # A refetch: a successful fetch (2xx or 304) of a URL that an earlier segment fetched successfully.
    refetches = dict(_rows(con, """
        SELECT segment, count(*) FILTER (WHERE nth > 1) FROM (
            SELECT segment, row_number() OVER (PARTITION BY url ORDER BY segment) AS nth
            FROM fetched WHERE outcome IN ('ok', 'not_modified')) GROUP BY 1"""))
    return {"per_segment": per_segment, "outcomes": outcomes, "classes": classes, "hosts": hosts,
            "errors": errors, "rate": rate, "bin_s": bin_s, "refetches": refetches,
            "pages": sum(r[1] for r in per_segment), "error_count": sum(r[3] for r in per_segment)}


def feed_changes(con) -> dict[str, int]:
    """Pages the feed published as changed, per segment (freshness: changes found)."""
    if not _has_view(con, "pages"):
        return {}
    # The feed's own status ('new' or 'changed', schema.PAGES), not a crawl DB status.
    return dict(_rows(con, "SELECT segment, count(*) FILTER (WHERE status = $changed) FROM pages GROUP BY 1",
                      {"changed": "changed"}))


def distributions(con) -> dict:
    depth = _rows(con, "SELECT depth, count(*) FROM crawldb GROUP BY 1 ORDER BY 1")
    low, high = _rows(con, "SELECT min(score), max(score) FROM crawldb")[0]
    scores: list[tuple[float, int]] = []
    if low is not None:
        width = (high - low) / SCORE_BINS or 1.0
        scores = [(low + b * width, n) for b, n in _rows(con, """
            SELECT least(floor((score - $low) / $width), $top)::INT AS b, count(*)
            FROM crawldb GROUP BY 1 ORDER BY 1""", {"low": low, "width": width, "top": SCORE_BINS - 1})]
        scores = [(round(x, 6), n) for x, n in scores]
    return {"depth": depth, "scores": scores, "score_width": (high - low) / SCORE_BINS if low is not None else 0}


def bucket_sizes(store: Store) -> list[tuple[int, int, int]]:
    """(bucket, rows, bytes) of the current crawl DB's buckets: base and delta files together
    (Parquet footers and file sizes; a URL in a delta and its base counts twice until compaction).
    Counting the bases alone showed an incremental crawl DB as not growing at all."""
    _, buckets = current_buckets(store)  # open_views verified them
    return [(b, sum(store.read_metadata(f).num_rows for f in bucket.files),
             sum(store.fs.get_file_info(str(f)).size for f in bucket.files)) for b, bucket in enumerate(buckets)]


def cycle_rows(stats: list[dict], fetched: dict, changes: dict[str, int]) -> list[dict]:
    """One row per segment that was fetched: what the stats JSON and the fetch results say."""
    by_segment = {r[0]: r for r in fetched["per_segment"]}
    rows = []
    for number, s in enumerate([s for s in stats if s["fetch"] or s["segment"] in by_segment], start=1):
        f = s["fetch"]
        _, pages, ok, errors = by_segment.get(s["segment"], (s["segment"], 0, 0, 0))
        rows.append({"cycle": number, "segment": s["segment"], "state": s["state"], "pages": pages, "ok": ok,
                     "errors": errors, "new_urls": s["update"].get("outlinks/new"),
                     "seconds": f.get("fetch/seconds"), "pages_per_s": f.get("fetch/pages_per_s"),
                     "requests": f.get("fetch/requests"), "allowed": f.get("fetch/allowed_requests"),
                     "utilisation": f.get("fetch/politeness_utilisation"),
                     "dns_lookups": f.get("dns/lookups", 0), "dns_seconds": f.get("dns/seconds", 0),
                     "dns_failures": sum(v for k, v in f.items() if k.startswith("dns/failures/")),
                     "idle_with_work_s": f.get("fetch/idle_with_work_s", 0.0) if f else None,
                     "idle_with_work_ratio": f.get("fetch/idle_with_work_ratio", 0.0) if f else None,
                     "refetches": fetched["refetches"].get(s["segment"], 0),
                     "tls_failures": f.get("fetch/tls_failures", 0), "tls_seconds": f.get("fetch/tls_seconds", 0.0),
                     "tls_handshakes": f.get("fetch/tls_handshakes", 0),
                     "changes": changes.get(s["segment"], 0)})
    return rows


def summarize(db: dict, fetched: dict, cycles: list[dict], buckets: list[tuple[int, int, int]]) -> dict:
    """The numbers of the summary table, by id (the page shows them in this order)."""
    timed = [c for c in cycles if c["seconds"]]
    seconds = sum(c["seconds"] for c in timed)
    measured = [c for c in cycles if c["allowed"]]
    allowed = sum(c["allowed"] for c in measured)
    last = timed[-1] if timed else {}
    worst = max((h for h in fetched["hosts"] if h[2]), key=lambda h: (h[2], h[0]), default=None)
    return {
        "urls": db["urls"], "hosts": db["hosts"], "fetched": db["fetched"], "failing": db["failing"],
        "cycles": len(cycles), "pages": fetched["pages"], "errors": fetched["error_count"],
        "error_share": round(fetched["error_count"] / fetched["pages"], 4) if fetched["pages"] else None,
        "rate_last": last.get("pages_per_s"),
        "rate_all": round(sum(c["pages"] for c in timed) / seconds, 3) if seconds else None,
        "politeness_last": last.get("utilisation"),
        "politeness_all": round(sum(c["requests"] for c in measured) / allowed, 4) if allowed else None,
        "idle_with_work_last": last.get("idle_with_work_ratio"),
        "top_error_host": worst[0] if worst else None,
        "tls_failures": sum(c["tls_failures"] for c in cycles),
        "tls_ms_per_handshake": _per_handshake_ms(cycles),
        "db_bytes": sum(b[2] for b in buckets),
        "dns_lookups": sum(c.get("dns_lookups", 0) for c in cycles),
        "dns_failures": sum(c.get("dns_failures", 0) for c in cycles),
        "dns_seconds": round(sum(c.get("dns_seconds", 0) for c in cycles), 3),
    }


def _per_handshake_ms(cycles: list[dict]) -> float | None:
    handshakes = sum(c["tls_handshakes"] for c in cycles)
    return round(1000 * sum(c["tls_seconds"] for c in cycles) / handshakes, 1) if handshakes else None


SUMMARY_LABELS = {
    "urls": "URLs in the crawl DB", "hosts": "Hosts in the crawl DB", "fetched": "URLs fetched (status fetched)",
    "failing": "URLs failing (status error, dead or gone)", "cycles": "Cycles fetched",
    "pages": "Pages fetched, all cycles", "errors": "Failed fetches, all cycles",
    "error_share": "Failed share of fetches", "rate_last": "Fetch rate, last cycle (pages/s)",
    "rate_all": "Fetch rate, all cycles (pages/s)", "politeness_last": "Politeness utilisation, last cycle",
    "politeness_all": "Politeness utilisation, all cycles",
    "idle_with_work_last": "Idle with work, last cycle (share of the politeness budget)", "top_error_host": "Host with the most failures",
    "tls_failures": "Failed TLS handshakes, all cycles (stats/fetch.json tls/failures/<reason>)",
    "tls_ms_per_handshake": "TLS handshake time, all cycles (ms per new connection)",
    "db_bytes": "Crawl DB size (bytes)",
    "dns_lookups": "Host name lookups, all cycles", "dns_failures": "Failed host name lookups, all cycles",
    "dns_seconds": "Time in host name lookups, all cycles (s)",
}


# --- charts -----------------------------------------------------------------------------------
def _figure(rows: int = 1, cols: int = 1, width: float = 8.0, height: float = 3.2, left: float = 0.08):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise CrawlError("crawl report needs matplotlib: install the report extra, "
                         "pip install -e '.[report]'") from None
    # Fixed margins, no layout engine: constrained layout drew every figure twice (half the
    # report's time).
    fig = Figure(figsize=(width, height * rows), dpi=90)
    fig.subplots_adjust(left=left, right=0.98, top=1 - 0.35 / (height * rows), bottom=0.5 / (height * rows),
                        hspace=0.55, wspace=0.25)
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def _stacked(ax, labels: list[str], mix: dict[str, dict[str, int]], segments: list[str], title: str) -> None:
    kinds = sorted({k for m in mix.values() for k in m})
    bottom = [0] * len(segments)
    for kind in kinds:
        values = [mix.get(s, {}).get(kind, 0) for s in segments]
        ax.bar(labels, values, bottom=bottom, label=kind)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_title(title)
    ax.set_xlabel("cycle")
    if kinds:
        ax.legend(fontsize="small", ncols=min(4, len(kinds)))


def _no_data(ax, text: str = "no data yet") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def chart_cycles(cycles: list[dict]):
    fig, (ax,) = _figure()
    labels = [str(c["cycle"]) for c in cycles]
    x = range(len(cycles))
    ax.bar([i - 0.2 for i in x], [c["pages"] for c in cycles], width=0.4, label="pages fetched")
    ax.bar([i + 0.2 for i in x], [c["new_urls"] or 0 for c in cycles], width=0.4, label="new URLs")
    ax.set_xticks(list(x), labels)
    ax.set_xlabel("cycle")
    ax.set_title("Pages fetched and new URLs found, per cycle")
    ax.legend()
    return fig


def chart_mix(cycles: list[dict], fetched: dict):
    fig, (ax1, ax2) = _figure(2)
    segments = [c["segment"] for c in cycles]
    labels = [str(c["cycle"]) for c in cycles]
    _stacked(ax1, labels, fetched["outcomes"], segments, "Outcome mix per cycle (every URL of the fetch list)")
    _stacked(ax2, labels, fetched["classes"], segments, "HTTP status mix per cycle (pages requested)")
    return fig


def chart_rate(fetched: dict, cycles: list[dict]):
    fig, (ax1, ax2) = _figure(2)
    if fetched["rate"]:
        t0 = fetched["rate"][0][0]
        ax1.bar([(t - t0) / 60 for t, _ in fetched["rate"]], [n / fetched["bin_s"] for _, n in fetched["rate"]],
                width=fetched["bin_s"] / 60, align="edge")
        ax1.set_xlabel("minutes since the first fetch")
        ax1.set_ylabel("pages/s")
        ax1.set_title(f"Fetch rate over time ({fetched['bin_s']} s bins; gaps: generate and update)")
    else:
        _no_data(ax1)
    timed = [c for c in cycles if c["pages_per_s"] is not None]
    ax2.plot([str(c["cycle"]) for c in timed], [c["pages_per_s"] for c in timed], marker="o")  # one tick a cycle
    ax2.set_ylim(bottom=0)
    ax2.set_xlabel("cycle")
    ax2.set_ylabel("pages/s")
    ax2.set_title("Fetch rate per cycle (pages / fetch stage wall time)")
    return fig


def chart_hosts(fetched: dict):
    fig, (ax1, ax2) = _figure(2, height=4.0, left=0.3)  # room for host names
    by_pages = sorted(fetched["hosts"], key=lambda h: (-h[1], h[0]))[:TOP_HOSTS]
    by_errors = sorted([h for h in fetched["hosts"] if h[2]], key=lambda h: (-h[2], h[0]))[:TOP_HOSTS]
    for ax, rows, col, title in ((ax1, by_pages, 1, "Top hosts by pages fetched"),
                                 (ax2, by_errors, 2, "Top hosts by failed fetches")):
        if rows:
            ax.barh([h[0] for h in reversed(rows)], [h[col] for h in reversed(rows)],
                    color="tab:blue" if col == 1 else "tab:red")
            ax.set_title(title)
        else:
            _no_data(ax, "no failed fetch" if col == 2 else "no data yet")
            ax.set_title(title)
    return fig


def chart_distributions(dist: dict):
    fig, (ax1, ax2) = _figure(1, 2)
    ax1.bar([d for d, _ in dist["depth"]], [n for _, n in dist["depth"]])
    ax1.set_xlabel("depth (link hops from a seed)")
    ax1.set_ylabel("URLs")
    ax1.set_title("Depth distribution (crawl DB)")
    if dist["scores"]:
        ax2.bar([x for x, _ in dist["scores"]], [n for _, n in dist["scores"]],
                width=dist["score_width"] or 0.01, align="edge")
    ax2.set_xlabel("score")
    ax2.set_title("Score distribution (crawl DB)")
    return fig


def chart_freshness(cycles: list[dict]):
    fig, (ax,) = _figure()
    labels = [str(c["cycle"]) for c in cycles]
    x = range(len(cycles))
    ax.bar([i - 0.2 for i in x], [c["refetches"] for c in cycles], width=0.4, label="refetches (2xx or 304)")
    ax.bar([i + 0.2 for i in x], [c["changes"] for c in cycles], width=0.4, label="changes found (feed: changed)")
    ax.set_xticks(list(x), labels)
    ax.set_xlabel("cycle")
    ax.set_title("Freshness: changes found per refetch")
    ax.legend()
    return fig


def chart_buckets(buckets: list[tuple[int, int, int]]):
    fig, (ax1, ax2) = _figure(1, 2)
    ax1.bar([b for b, _, _ in buckets], [r for _, r, _ in buckets])
    ax1.set_title("Crawl DB rows by bucket")
    ax1.set_xlabel("bucket")
    ax2.bar([b for b, _, _ in buckets], [s / 1e6 for _, _, s in buckets], color="tab:green")
    ax2.set_title("Crawl DB size by bucket (MB)")
    ax2.set_xlabel("bucket")
    return fig


def chart_politeness(cycles: list[dict]):
    fig, (ax,) = _figure()
    measured = [c for c in cycles if c["utilisation"] is not None]
    if measured:
        ax.bar([str(c["cycle"]) for c in measured], [c["utilisation"] for c in measured])
        ax.axhline(1.0, color="grey", linestyle="--")
        ax.set_ylim(0, max(1.05, max(c["utilisation"] for c in measured) * 1.05))
    else:
        _no_data(ax, "no fetch stats with politeness utilisation yet")
    ax.set_xlabel("cycle")
    ax.set_title("Politeness utilisation per cycle (requests made / allowed by the per-host delays)")
    return fig


# --- the page ---------------------------------------------------------------------------------
def _fmt(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if value % 1 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _table(headers: list[str], rows: list[list], table_id: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>" for row in rows)
    # In a box that scrolls sideways on its own: a table wider than a phone (the cycles table has
    # 12 columns) otherwise widens the whole page, which a phone then shows zoomed out.
    return (f'<div class="wide"><table id="{table_id}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{body}</tbody></table></div>')


def summary_table(summary: dict) -> str:
    rows = []
    for key, label in SUMMARY_LABELS.items():
        value = summary[key]
        raw = "" if value is None else str(value)
        rows.append(f'<tr><th scope="row">{html.escape(label)}</th>'
                    f'<td id="sum-{key}" data-value="{html.escape(raw, quote=True)}">{html.escape(_fmt(value))}</td></tr>')
    return f'<table id="summary"><tbody>{"".join(rows)}</tbody></table>'


STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left}
td{text-align:right}#summary th{background:#f4f4f4}img{max-width:100%;display:block;margin:.5em 0 1.5em}
h2{margin-top:1.5em;border-bottom:1px solid #ddd}.wide{overflow-x:auto}"""


def render_html(store: Store, summary: dict, cycles: list[dict], fetched: dict, db: dict,
                charts: list[tuple[str, str, bytes]]) -> str:
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    parts = [
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        # A phone lays the page out at its own width instead of a zoomed-out 980 px desktop.
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Crawl report: {html.escape(store.uri)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
        f"<h1>Crawl report</h1><p>Store <code>{html.escape(store.uri)}</code>, written {generated}.</p>",
        "<h2>Summary</h2>", summary_table(summary),
        "<h2>What is failing</h2>",
        _table(["outcome", "reason", "fetches", "hosts", "for example"], [list(r) for r in fetched["errors"]],
               "errors") if fetched["errors"] else "<p>No failed fetch.</p>",
        "<h3>Hosts with the most failures</h3>",
        _table(["host", "failed", "pages", "most frequent failure"],
               [[h[0], h[2], h[1], h[3]] for h in sorted([h for h in fetched["hosts"] if h[2]],
                                                         key=lambda h: (-h[2], h[0]))[:TOP_HOSTS]], "error-hosts")
        if fetched["error_count"] else "<p>No host had a failed fetch.</p>",
        "<h2>Cycles</h2>",
        _table(["cycle", "segment", "state", "pages", "ok", "failed", "new URLs", "fetch s", "pages/s",
                "politeness utilisation", "idle with work (host-s)", "refetches", "changes"],
               [[c["cycle"], c["segment"], c["state"], c["pages"], c["ok"], c["errors"], c["new_urls"], c["seconds"],
                 c["pages_per_s"], c["utilisation"], c["idle_with_work_s"], c["refetches"], c["changes"]]
                for c in cycles], "cycles"),
        "<h2>Crawl DB by status</h2>",
        _table(["status", "URLs"], [[k, v] for k, v in db["by_status"].items()], "by-status"),
        f"<p>Freshness over the whole crawl DB: {db['changes']:,} changes found in {db['refetches']:,} refetches.</p>",
    ]
    if db.get("dedup"):  # cycles/update/dedup.py dedup_summary
        d = db["dedup"]
        parts += ["<h2>Copies</h2>", f"<p>{d['duplicates']:,} duplicates, {d['near_duplicates']:,} near-duplicates; "
                  f"mirror hosts: {html.escape(', '.join(f'{m} of {o}' for m, o in d['mirrors'].items()) or 'none')}; "
                  f"variant parameters not fetched: {html.escape(', '.join(f'?{p}= on {h}' for h, p in d['variant_params']) or 'none')}.</p>",
                  _table(["host", "duplicates", "near-duplicates"], d["hosts"], "copies-by-host") if d["hosts"] else ""]
    for name, title, png in charts:
        encoded = base64.b64encode(png).decode("ascii")
        parts += [f"<h2>{html.escape(title)}</h2>",
                  f'<img id="chart-{name}" alt="{html.escape(title, quote=True)}" src="data:image/png;base64,{encoded}">']
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"


def build_report(store: Store, config: Config, out: str | os.PathLike) -> ReportResult:
    """Write ``out/index.html`` (self-contained) and ``out/<chart>.png``; reads the store only."""
    require_crawldb(store)
    con = open_views(store, config)
    db = crawldb_numbers(con)
    fetched = fetched_numbers(con)
    cycles = cycle_rows(segment_stats(store), fetched, feed_changes(con))
    dist = distributions(con)
    db["dedup"] = dedup_summary(store, con)
    con.close()
    buckets = bucket_sizes(store)
    summary = summarize(db, fetched, cycles, buckets)
    charts = [("cycles", "Pages and new URLs per cycle", chart_cycles(cycles)),
              ("mix", "Outcome and status mix over time", chart_mix(cycles, fetched)),
              ("rate", "Fetch rate over time", chart_rate(fetched, cycles)),
              ("hosts", "Top hosts by pages and by errors", chart_hosts(fetched)),
              ("politeness", "Politeness utilisation", chart_politeness(cycles)),
              ("distributions", "Depth and score distributions", chart_distributions(dist)),
              ("freshness", "Freshness: changes found per refetch", chart_freshness(cycles)),
              ("buckets", "Crawl DB size by bucket", chart_buckets(buckets))]
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    rendered, images = [], []
    for name, title, fig in charts:
        png = _png(fig)
        path = folder / f"{name}.png"
        write_file_atomically(path, png)
        images.append(path)
        rendered.append((name, title, png))
    page = folder / "index.html"
    write_file_atomically(page, render_html(store, summary, cycles, fetched, db, rendered).encode("utf-8"))
    return ReportResult(page, images, summary)
