"""The ``crawl`` command. Each command is a thin call into one library function.

Library errors (:class:`cycles.errors.CrawlError`) become a one-line message on stderr
and exit code 2; anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from cycles.config import Config, load_config
from cycles.errors import CrawlError
from cycles.store import Store

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.split("\n")[0] + """

A cycle is generate -> fetch -> update over a Parquet crawl DB in --data (default ./data).

    crawl inject seeds.txt
    crawl cycle --cycles 3
    crawl status
""")


class State:
    store: Store
    config: Config


state = State()


@app.callback()
def main(
    data: str = typer.Option("./data", "--data", help="Store: a folder, or s3://bucket/prefix (endpoint and "
                             "credentials from the AWS settings: AWS_ENDPOINT_URL, AWS_PROFILE, ...)."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="TOML config file (see cycles/config.py)."),
) -> None:
    """Global options: where the store is, which config to use."""
    try:
        state.config = load_config(config)
    except CrawlError as exc:
        fail(exc)
    try:
        state.store = Store(data)
    except CrawlError as exc:
        fail(exc)


def fail(exc: Exception) -> None:
    typer.secho(f"crawl: error: {exc}", err=True, fg=typer.colors.RED)
    raise typer.Exit(2)


def run(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except CrawlError as exc:
        fail(exc)


@app.command()
def inject(seeds: Path = typer.Argument(..., help="Text file, one URL a line; # starts a comment.")) -> None:
    """Add seed URLs to the crawl DB (creating it if needed).

    Example: crawl inject seeds.txt
    """
    from cycles.inject import inject as do_inject

    result = run(do_inject, state.store, state.config, seeds)
    for number, line, reason in result.rejected_lines[:20]:
        typer.echo(f"  skipped line {number} ({reason}): {line}", err=True)
    rejected = sum(result.rejected.values())
    typer.echo(f"injected: {result.added} new, {result.already_known} already known, {rejected} rejected"
               + (f" ({', '.join(f'{k}: {v}' for k, v in sorted(result.rejected.items()))})" if rejected else ""))


@app.command()
def generate(top_n: Optional[int] = typer.Option(None, "--top-n", help="At most this many URLs (default: generate.top_n).")) -> None:
    """Choose due URLs, lease them and write a fetch list as a new segment.

    Example: crawl generate --top-n 10000
    """
    from cycles.generate.generate import generate as do_generate

    result = run(do_generate, state.store, state.config, top_n=top_n)
    if result.segment is None:
        typer.echo(f"generate: no segment made: {result.reason}")
    else:
        typer.echo(f"generated segment {result.segment}: {result.urls} URLs on {result.hosts} hosts, "
                   f"{result.partitions} partitions")


@app.command()
def fetch(segment: Optional[str] = typer.Argument(None, help="Segment id (default: newest generated)."),
          processes: Optional[int] = typer.Option(None, "--processes", "-p", help="Worker processes.")) -> None:
    """Fetch a generated segment; run it again after a crash to resume.

    Example: crawl fetch 20261129T223500123456Z-a1b2c3
    """
    from cycles.fetch.fetch import fetch_segment

    result = run(fetch_segment, state.store, state.config, segment, processes)
    c = result.counters
    typer.echo(f"fetched segment {result.segment}: {c.get('fetch/requests', 0)} requests, "
               f"{c.get('fetch/outcome/ok', 0)} pages stored, {c.get('robots/denied', 0)} denied by robots.txt, "
               f"{c.get('fetch/outcome/deferred', 0)} deferred in {result.seconds:.1f}s")


@app.command()
def update(segment: Optional[str] = typer.Argument(None, help="Segment id (default: oldest fetched).")) -> None:
    """Merge a fetched segment into the crawl DB (idempotent).

    Example: crawl update
    """
    from cycles.update.update import update_segment

    result = run(update_segment, state.store, state.config, segment)
    if not result.applied:
        typer.echo(f"update: segment {result.segment}: {result.reason}")
        return
    c = result.counters
    dropped = {k: v for k, v in sorted(c.items()) if k.startswith("filter/")}
    typer.echo(f"updated from segment {result.segment}: {c.get('update/results', 0)} results, "
               f"{c.get('outlinks/new', 0)} new URLs" + (f"; dropped {dropped}" if dropped else ""))


@app.command()
def cycle(cycles: int = typer.Option(1, "--cycles", "-n", help="How many cycles to run."),
          top_n: Optional[int] = typer.Option(None, "--top-n", help="URLs per cycle.")) -> None:
    """Run generate, fetch and update in a row, N times (stops early when nothing is due).

    Example: crawl cycle --cycles 3
    """
    from cycles.cycle import run_cycles

    for line in run(run_cycles, state.store, state.config, cycles, top_n=top_n):
        typer.echo(line)


@app.command()
def rebucket(buckets: int = typer.Option(..., "--buckets", "-b", help="New number of host-hash buckets "
                                         "(see README: Choosing the bucket count).")) -> None:
    """Rewrite the crawl DB split into a new number of host-hash buckets (atomic swap).

    Example: crawl rebucket --buckets 64
    """
    from cycles.rebucket import rebucket as do_rebucket

    result = run(do_rebucket, state.store, state.config, buckets)
    if not result.changed:
        typer.echo(f"rebucket: {result.reason}")
        return
    typer.echo(f"rebucketed crawl DB: {result.rows} URLs from {result.old_buckets} to {result.buckets} buckets "
               f"(version {result.old_version} -> {result.version})")


@app.command()
def status(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """URL counts by status, hosts and segments, read with DuckDB.

    Example: crawl status --json
    """
    from cycles.status import crawl_status, format_status

    report = run(crawl_status, state.store, state.config)
    typer.echo(json.dumps(report, indent=1, default=str) if as_json else format_status(report))


@app.command()
def pages(consumer: str = typer.Option(..., "--consumer", help="Consumer name; its cursor is kept in the store."),
          out: Optional[Path] = typer.Option(None, "--out", help="Write the pages read to this Parquet file."),
          peek: bool = typer.Option(False, "--peek", help="Read without moving the cursor."),
          limit: Optional[int] = typer.Option(None, "--limit", help="At most this many batches.")) -> None:
    """Read the new or changed pages published since this consumer's last read, then commit.

    Example: crawl pages --consumer indexer --out batch.parquet
    """
    from cycles.pages import read_feed

    result = run(read_feed, state.store, consumer, not peek, limit)
    if out is not None:
        import pyarrow.parquet as pq

        pq.write_table(result.table, out, compression="zstd")
    typer.echo(f"consumer {consumer}: {result.pages} pages in {len(result.batches)} batches"
               + (f" -> {out}" if out else "") + ("" if result.committed else " (peek: cursor not moved)"))


@app.command()
def sql(query: str = typer.Argument(..., help="SQL over the views crawldb, hosts, fetched, outlinks.")) -> None:
    """Run a DuckDB query over the crawl DB and segments.

    Example: crawl sql "SELECT status, count(*) FROM crawldb GROUP BY ALL"
    """
    from cycles.status import run_sql

    table = run(run_sql, state.store, state.config, query)
    typer.echo(table)


@app.command()
def recover(previous: bool = typer.Option(False, "--previous", help="Roll back: make the newest complete "
                                          "version older than the current one current (after a corrupt bucket)."),
            table: Optional[str] = typer.Option(None, "--table", help="Only this table: crawldb or hostdb."),
            dedupe: bool = typer.Option(False, "--dedupe", help="Instead: rewrite the crawl DB with one row per "
                                        "URL (one written before buckets were checked may hold a URL twice).")) -> None:
    """Reinstate the newest complete crawl DB and host DB version when CURRENT is lost.

    Complete: sealed by its writer (_COMPLETE), every file present, every page checksum
    intact. Nothing is deleted.

    Example: crawl recover            (or: crawl recover --previous --table crawldb)
    """
    from cycles.recover import TABLES, dedupe_crawldb, recover as do_recover

    if dedupe:
        dropped = run(dedupe_crawldb, state.store, state.config)
        typer.echo(f"crawldb: {dropped} duplicate rows dropped")
        return
    for result in run(do_recover, state.store, previous, (table,) if table else TABLES):
        for version, why in result.skipped:
            typer.echo(f"  {result.table}: passed over {version}: {why}", err=True)
        typer.echo(f"{result.table}: {result.action}" + (f" {result.version}" if result.version else ""))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
