"""The ``crawl`` command. Each command is a thin call into one library function.

Every exception ends as one line on stderr and an exit code (cycles/errors.py):
0 done, 1 failed (an internal error: its traceback is saved to a file the line names,
or printed with ``--debug``; or the machine failed it: disk full), 2 a user error (bad
arguments, config or store state; the line says how to fix it), 3 nothing to do,
4 interrupted (run the same command again to resume). ``EXIT_CODES`` maps exception
classes to codes; :class:`CrawlGroup` applies it to every command.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import logging
import os
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperGroup

from cycles.tables.segment import segment_state
from cycles.config import Config
from cycles.commands.effective_config import Effective
from cycles.errors import (EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_NOTHING_TO_DO, EXIT_OK, EXIT_USER_ERROR, CrawlError,
                           Interrupted, NothingToDo, StageError, is_damaged_parquet)
from cycles.storage.store import Store

EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (Interrupted, EXIT_INTERRUPTED),
    (KeyboardInterrupt, EXIT_INTERRUPTED),
    (NothingToDo, EXIT_NOTHING_TO_DO),
    (CrawlError, EXIT_USER_ERROR),
    (PermissionError, EXIT_USER_ERROR),
)
"""Exception class -> exit code, first match wins; anything else exits 1 (EXIT_FAILURE)."""

MAX_MESSAGE_CHARS = 1000
"""A message is cut to this length: DuckDB quotes whole file lists in some errors."""

DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
DISK_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "File too large")
"""How a full disk shows in errors that carry no errno (pyarrow's and DuckDB's I/O errors)."""

FAILED_READ = re.compile(r'Failed to read file "([^"]+)": (.*)', re.S)
"""DuckDB's error for a Parquet file it cannot decode (a flipped bit, a truncated page)."""

CORRUPT_SCAN_S = 30.0
"""How long, at most, to look for the damaged file DuckDB did not name (:func:`find_undecodable_file`)."""


def exit_code_of(exc: BaseException) -> int:
    for cls, code in EXIT_CODES:
        if isinstance(exc, cls):
            return code
    return EXIT_FAILURE


def one_line(text: str) -> str:
    """The message on one line, at most MAX_MESSAGE_CHARS: a long one loses its middle, not its
    end, because messages end with the fix (a deep store path once pushed `crawl abandon
    SEGMENT` out of a corrupt fetch list's message)."""
    line = " ".join(str(text).split())
    if len(line) <= MAX_MESSAGE_CHARS:
        return line
    head = MAX_MESSAGE_CHARS * 3 // 5
    return line[:head] + "\u2026" + line[len(line) - (MAX_MESSAGE_CHARS - head - 1):]


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def disk_full(exc: BaseException) -> bool:
    return any((isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS)
               or any(text in str(e) for text in DISK_FULL_TEXTS) for e in _chain(exc))


def corrupt_file_message(exc: BaseException, store: Store | None) -> str | None:
    """A one-line repair message for DuckDB's errors decoding a Parquet file (a flipped bit,
    a truncated page); None for other errors."""
    if "duckdb" not in type(exc).__module__:
        return None
    text = str(exc)
    match = FAILED_READ.search(text)
    if match:
        path, reason = match.group(1), " ".join(match.group(2).split())
    elif is_damaged_parquet(text):
        reason = " ".join(text.split())
        path = find_undecodable_file(store) if store is not None else None
        if path is None:
            return (f"a Parquet file of the store cannot be decoded ({reason}); restore the store from backup, or "
                    "point crawldb/CURRENT at an older intact version")
    else:
        return None
    if "/crawldb/" in path or "/hostdb/" in path:
        fix = f"restore it from backup, or point {path.rsplit('/', 2)[0]}/CURRENT at an older intact version"
    else:
        fix = "restore it from backup, or remove its segment folder and run the stage that wrote it again"
    return f"{path} is corrupt ({reason}); {fix}"


def find_undecodable_file(store: Store) -> str | None:
    """The first file of the current crawl DB or host DB that pyarrow cannot read in full.

    DuckDB does not name the file when a page header is damaged ("TProtocolException:
    Invalid data"); these tables are what every stage reads. Gives up (None) after
    CORRUPT_SCAN_S seconds: the message is then less precise, not late.
    """
    import duckdb

    from cycles.tables.crawldb import plain_connection

    deadline = time.monotonic() + CORRUPT_SCAN_S
    con = plain_connection()
    for name in ("crawldb", "hostdb"):
        try:
            manifest = store.manifest(name)
            files = store.version_files(name, manifest) if manifest else []
        except (CrawlError, OSError):
            continue
        for path in files:
            if time.monotonic() > deadline:
                return None
            try:  # DuckDB's decoder and pyarrow's each miss damage the other finds
                for _ in con.sql(f"SELECT * FROM {store.duckdb_source(con, [path])}").to_arrow_reader():
                    pass
                store.read_table(path)
            except (CrawlError, duckdb.Error):
                return store.uri_of(path)
    return None


def save_traceback(exc: BaseException) -> str:
    """Write the traceback under the system temp folder; returns where (or why it could not)."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = Path(tempfile.gettempdir()) / f"crawl-error-{stamp}-{os.getpid()}.txt"
    try:
        path.write_text(" ".join(sys.argv) + "\n\n" + "".join(traceback.format_exception(exc)))
    except OSError as write_error:
        return f"traceback not saved ({write_error.strerror}); rerun with --debug to see it"
    return f"traceback in {path}"


def report(exc: BaseException, debug: bool = False) -> int:
    """Print one line on stderr for ``exc`` (and its traceback with ``debug``); returns the exit code."""
    code = exit_code_of(exc)
    corrupt = corrupt_file_message(exc, getattr(state, "store", None))
    if isinstance(exc, NothingToDo):
        line = f"crawl: {exc}"
    elif isinstance(exc, CrawlError):
        line = f"crawl: error: {exc}"
    elif isinstance(exc, KeyboardInterrupt):
        line = "crawl: interrupted; nothing half-written was installed, run the same command again to resume"
    elif corrupt:
        code, line = EXIT_USER_ERROR, f"crawl: error: {corrupt}"
    elif disk_full(exc):
        line = (f"crawl: error: disk full ({exc}); free space and run the command again: nothing half-written "
                f"was installed ({save_traceback(exc)})")
    elif isinstance(exc, PermissionError):
        line = f"crawl: error: {exc.strerror}: {exc.filename}; a read-only store can only be read (crawl status, crawl sql)"
    else:
        line = f"crawl: internal error: {type(exc).__name__}: {exc} ({save_traceback(exc)}; please report it)"
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    if state.as_json:
        emit_json(JSON_STATUS.get(code, "failed"), exit_code=code, message=one_line(line.removeprefix("crawl: ")))
    typer.secho(one_line(line), err=True, fg=typer.colors.RED if code in (EXIT_FAILURE, EXIT_USER_ERROR) else None)
    return code


class CrawlGroup(TyperGroup):
    """The command group; its ``invoke`` turns any exception of any command (or of the
    global options) into one line and an exit code, never a traceback."""

    def invoke(self, ctx: typer.Context):
        try:
            return super().invoke(ctx)
        except SystemExit:
            raise
        except BaseException as exc:  # KeyboardInterrupt too: exit 4, not click's "Aborted!" and 1
            if type(exc).__module__.split(".")[0] in ("click", "typer"):
                raise  # usage errors, --help and explicit exits: click (typer's own copy) reports them
            raise typer.Exit(report(exc, debug=bool(ctx.params.get("debug")))) from None


app = typer.Typer(add_completion=False, no_args_is_help=True, cls=CrawlGroup, pretty_exceptions_enable=False,
                  help=__doc__.split("\n")[0] + """

A cycle is generate -> fetch -> update over a Parquet crawl DB in --data (default ./data).

    crawl inject seeds.txt
    crawl cycle --cycles 3
    crawl status

Exit codes: 0 done, 1 failed, 2 user error, 3 nothing to do, 4 interrupted (run again to resume).

Environment: CRAWL_DATA and CRAWL_CONFIG stand for --data and --config.
""")


class State:
    store: Store
    config: Config
    effective: Effective
    """The config and where each of its values came from (``crawl config show``)."""
    data_source: str = "default"
    """Where --data came from: "--data", "CRAWL_DATA" or "default"."""
    as_json: bool = False
    """The command was given --json: it ends with one JSON line on stdout (:func:`emit_json`)."""
    stage: str = ""


state = State()

JSON_STATUS = {EXIT_OK: "done", EXIT_FAILURE: "failed", EXIT_USER_ERROR: "user_error",
               EXIT_NOTHING_TO_DO: "nothing_to_do", EXIT_INTERRUPTED: "interrupted"}
"""The "status" of a --json line, by exit code (cycles/errors.py)."""

JSON_OPTION = typer.Option(False, "--json", help="End with one JSON line on stdout for a scheduler: "
                           '{"status": "done"|"nothing_to_do"|..., "stage", "seconds", ...}; the exit code is unchanged.')


def start_command(stage: str, as_json: bool) -> float:
    """Remember the command's name and --json for :func:`report` and :func:`emit_json`; returns the start time."""
    state.stage, state.as_json = stage, as_json
    return time.monotonic()


def emit_json(status: str, started: float | None = None, **fields) -> None:
    """The scheduler contract of --json: one line, {"status", "stage", ...what the stage did,
    "seconds"}; "nothing_to_do" goes with exit code 3, and the next task reads the segment id here."""
    line = {"status": status, "stage": state.stage, **fields}
    if started is not None:
        line["seconds"] = round(time.monotonic() - started, 3)
    typer.echo(json.dumps(line, default=str))


def package_version() -> str:
    """The installed package's version (pyproject.toml's, once installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("crawl")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed; pip install -e .)"


def show_version(value: bool) -> None:
    if value:
        typer.echo(f"crawl {package_version()}")
        raise typer.Exit()


def option_source(ctx: typer.Context, name: str, option: str, envvar: str) -> str:
    """How a global option got its value: the option itself, its environment variable, or its default."""
    source = ctx.get_parameter_source(name)  # typer's own copy of click's ParameterSource: compared by name
    return {"COMMANDLINE": option, "ENVIRONMENT": envvar}.get(getattr(source, "name", ""), "default")


@app.callback()
def main(
    ctx: typer.Context,
    data: str = typer.Option("./data", "--data", envvar="CRAWL_DATA", help="Store: a folder, or s3://bucket/prefix "
                             "(endpoint and credentials from the AWS settings: AWS_ENDPOINT_URL, AWS_PROFILE, ...)."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", envvar="CRAWL_CONFIG",
                                          help="TOML config file (see crawl.toml, cycles/config.py)."),
    overrides: Optional[list[str]] = typer.Option(None, "--set", "-s", metavar="SECTION.KEY=VALUE",
                                                  help="Override one setting on top of the config file, checked "
                                                  "like the file (repeatable): -s fetch.delay_s=2 -s generate.top_n=1000."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also log debug lines on stderr."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Log only warnings and errors on stderr (no progress lines)."),
    debug: bool = typer.Option(False, "--debug", help="On a failure, also print the traceback."),
    executor: Optional[str] = typer.Option(None, "--executor", envvar="CRAWL_EXECUTOR", metavar="ADDRESS",
                                           help="Where the stages' tasks run: local, or a Dask scheduler "
                                           "tcp://host:8786 (sets db.executor; docs/cluster.md)."),
    version: bool = typer.Option(False, "--version", callback=show_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Global options: where the store is, which config to use, how much to log."""
    from cycles.logs import setup_logging
    from cycles.commands.effective_config import effective_config

    state.as_json, state.stage = False, ""
    if verbose and quiet:
        raise typer.BadParameter("give -v (more) or -q (less), not both", param_hint="-v/-q")
    setup_logging(1 if verbose else -1 if quiet else 0)
    config_source = option_source(ctx, "config", "--config", "CRAWL_CONFIG")
    label = f"CRAWL_CONFIG={config}" if config_source == "CRAWL_CONFIG" else None
    overrides = [*(overrides or []), *([f"db.executor={executor}"] if executor else [])]
    state.effective = effective_config(config, overrides, label)
    state.config = state.effective.config
    state.data_source = option_source(ctx, "data", "--data", "CRAWL_DATA")
    state.store = Store(data)
    logging.getLogger("cycles.commands.cli").debug(
        f"store {state.store.uri} ({state.data_source}); config {config or 'defaults'} ({config_source}); "
        f"{len(overrides or [])} settings from -s (crawl config show lists every value and its source)")


config_app = typer.Typer(no_args_is_help=True, help="The effective config: defaults, file, environment, -s.")
app.add_typer(config_app, name="config")


@config_app.command("show")
def config_show(as_json: bool = typer.Option(False, "--json", help="One JSON line: every setting's value "
                                             "and source.")) -> None:
    """Print the effective config, each value with where it came from.

    Sources: default, the config file (--config or CRAWL_CONFIG), -s; and the store's
    (--data, CRAWL_DATA or default). The text is a config file: pasted into one, it gives
    the same config.

    Example: crawl -c crawl.toml -s fetch.delay_s=2 config show
    """
    from cycles.commands.effective_config import show_json, show_text

    show = show_json if as_json else show_text
    typer.echo(show(state.effective, state.store.uri, state.data_source))


def run(fn, *args, **kwargs):
    """Call the library function of a command. Its errors are reported by :class:`CrawlGroup`."""
    return fn(*args, **kwargs)


def waiting_segment(wanted: str, stage: str, previous: str, also: tuple[str, ...] = ()) -> None:
    """Raise NothingToDo when no segment waits in state ``wanted`` (or one of ``also``) for
    ``stage`` (exit 3, not an error: cron runs stages on a timer and must tell idle from failed)."""
    store = state.store
    if any(segment_state(store, s) in (wanted, *also) for s in store.segments()):
        return
    if store.manifest("crawldb") is None:
        raise StageError(f"{stage}: there is no crawl DB in {store.uri}; start with `crawl inject seeds.txt`")
    raise NothingToDo(f"{stage}: no {wanted} segment waiting in {store.uri_of(store.path('segments'))}; "
                      f"run `crawl {previous}` first")


@app.command()
def inject(seeds: Path = typer.Argument(..., help="Text file, one URL a line; # starts a comment."),
           as_json: bool = JSON_OPTION) -> None:
    """Add seed URLs to the crawl DB (creating it if needed).

    Example: crawl inject seeds.txt
    """
    from cycles.commands.inject import inject as do_inject

    started = start_command("inject", as_json)
    result = run(do_inject, state.store, state.config, seeds)
    for number, line, reason in result.rejected_lines[:20]:
        typer.echo(f"  skipped line {number} ({reason}): {line}", err=True)
    rejected = sum(result.rejected.values())
    if as_json:
        return emit_json("done", started, added=result.added, already_known=result.already_known,
                         rejected=rejected, rejected_by_reason=dict(sorted(result.rejected.items())))
    typer.echo(f"injected: {result.added} new, {result.already_known} already known, {rejected} rejected"
               + (f" ({', '.join(f'{k}: {v}' for k, v in sorted(result.rejected.items()))})" if rejected else ""))


@app.command()
def generate(top_n: Optional[int] = typer.Option(None, "--top-n", help="At most this many URLs (default: generate.top_n)."),
             as_json: bool = JSON_OPTION) -> None:
    """Choose due URLs, lease them and write a fetch list as a new segment.

    With --json the line names the segment and its partitions, for `crawl fetch SEGMENT --partition N`.

    Example: crawl generate --top-n 10000
    """
    from cycles.generate.generate import generate as do_generate
    from cycles.tables.segment import partitions_of

    started = start_command("generate", as_json)
    result = run(do_generate, state.store, state.config, top_n=top_n)
    if result.segment is None:
        raise NothingToDo(f"generate: no segment made: {result.reason}")
    if as_json:
        return emit_json("done", started, segment=result.segment, urls=result.urls, hosts=result.hosts,
                         partitions=partitions_of(state.store, result.segment))
    typer.echo(f"generated segment {result.segment}: {result.urls} URLs on {result.hosts} hosts, "
               f"{result.partitions} partitions")


@app.command()
def fetch(segment: Optional[str] = typer.Argument(None, help="Segment id (default: the oldest generated or interrupted one)."),
          processes: Optional[int] = typer.Option(None, "--processes", "-p", help="Worker processes."),
          partition: Optional[int] = typer.Option(None, "--partition", help="Fetch only this partition (a scheduler's "
                                                  "task per partition); then `--finish` marks the segment fetched."),
          finish: bool = typer.Option(False, "--finish", help="Mark a segment fetched whose partitions were all "
                                      "fetched with --partition (fetches nothing; refused while one is unfinished)."),
          as_json: bool = JSON_OPTION) -> None:
    """Fetch a generated segment; run it again after a crash to resume.

    A scheduler can run a task per partition (crawl fetch SEGMENT --partition N), then
    mark the segment fetched (crawl fetch SEGMENT --finish).

    Example: crawl fetch 20261129T223500123456Z-a1b2c3
    """
    from cycles.fetch.fetch import fetch_one_partition, fetch_segment, finish_fetch

    started = start_command("fetch", as_json)
    if (partition is not None or finish) and segment is None:
        raise CrawlError("fetch: --partition and --finish need a segment id: crawl fetch SEGMENT --partition N")
    if partition is not None and finish:
        raise CrawlError("fetch: give --partition N or --finish, not both")
    if segment is None:
        waiting_segment("generated", "fetch", "generate", also=("fetching",))  # "fetching": a fetch to resume
    elif (done := segment_state(state.store, segment)) in ("fetched", "updated"):
        raise NothingToDo(f"fetch: segment {segment} is already {done}; nothing to do")
    if partition is not None:
        result = run(fetch_one_partition, state.store, state.config, segment, partition)
    elif finish:
        result = run(finish_fetch, state.store, state.config, segment)
    else:
        result = run(fetch_segment, state.store, state.config, segment, processes)
    c = result.counters
    if as_json:
        return emit_json("done", started, segment=result.segment, partition=partition,
                         fetched=partition is None, requests=c.get("fetch/requests", 0),
                         pages=c.get("fetch/outcome/ok", 0), robots_denied=c.get("robots/denied", 0),
                         deferred=c.get("fetch/outcome/deferred", 0), counters=dict(sorted(c.items())))
    what = f"partition {partition} of segment" if partition is not None else "segment"
    typer.echo(f"fetched {what} {result.segment}: {c.get('fetch/requests', 0)} requests, "
               f"{c.get('fetch/outcome/ok', 0)} pages stored, {c.get('robots/denied', 0)} denied by robots.txt, "
               f"{c.get('fetch/outcome/deferred', 0)} deferred in {result.seconds:.1f}s")


@app.command()
def update(segment: Optional[str] = typer.Argument(None, help="Segment id (default: oldest fetched)."),
           as_json: bool = JSON_OPTION) -> None:
    """Merge a fetched segment into the crawl DB (idempotent).

    Example: crawl update
    """
    from cycles.update.update import update_segment

    started = start_command("update", as_json)
    if segment is None:
        waiting_segment("fetched", "update", "fetch")
    result = run(update_segment, state.store, state.config, segment)
    if not result.applied:
        raise NothingToDo(f"update: segment {result.segment}: {result.reason}")
    c = result.counters
    if as_json:
        return emit_json("done", started, segment=result.segment, results=c.get("update/results", 0),
                         new_urls=c.get("outlinks/new", 0), counters=dict(sorted(c.items())))
    dropped = {k: v for k, v in sorted(c.items()) if k.startswith("filter/")}
    typer.echo(f"updated from segment {result.segment}: {c.get('update/results', 0)} results, "
               f"{c.get('outlinks/new', 0)} new URLs" + (f"; dropped {dropped}" if dropped else ""))


@app.command()
def cycle(cycles: int = typer.Option(1, "--cycles", "-n", help="How many cycles to run."),
          top_n: Optional[int] = typer.Option(None, "--top-n", help="URLs per cycle."),
          as_json: bool = JSON_OPTION) -> None:
    """Run generate, fetch and update in a row, N times (stops early when nothing is due).

    With --json the progress lines go to stderr and stdout ends with one JSON line.

    Example: crawl cycle --cycles 3
    """
    from cycles.commands.cycle import run_cycles

    started = start_command("cycle", as_json)
    updated_before = {s for s in state.store.segments() if segment_state(state.store, s) == "updated"}
    for number, line in enumerate(run(run_cycles, state.store, state.config, cycles, top_n=top_n)):
        if number == 0 and line.endswith("; stopping"):
            raise NothingToDo(line)  # the first generate made no segment: not one cycle ran
        typer.echo(line, err=as_json)  # with --json, stdout holds only the JSON line
    if as_json:
        updated = [s for s in state.store.segments()
                   if s not in updated_before and segment_state(state.store, s) == "updated"]
        emit_json("done", started, segments=updated)


@app.command()
def abandon(segment: str = typer.Argument(..., help="Segment id."),
            reason: str = typer.Option("abandoned by hand (`crawl abandon`)", "--reason",
                                       help="Why; kept in the segment's abandoned marker."),
            as_json: bool = JSON_OPTION) -> None:
    """Give up a segment: it is never fetched or applied, and its URLs are leased no more.

    Example: crawl abandon 20261129T223500123456Z-a1b2c3
    """
    from cycles.tables.segment import abandon as do_abandon

    started = start_command("abandon", as_json)
    run(do_abandon, state.store, segment, reason)
    if as_json:
        return emit_json("done", started, segment=segment, reason=reason)
    typer.echo(f"abandoned segment {segment}; its URLs come back when due")


@app.command()
def compact(all_buckets: bool = typer.Option(False, "--all", help="Every bucket with deltas or a base not yet "
                                             "sorted by due time, and the link DB's pending links, due or not."),
            as_json: bool = JSON_OPTION) -> None:
    """Merge each bucket's deltas into a new base when due (db.compact_ratio), and the link
    DB with its PageRank when due (update.link_rank_interval_s). Resumable: run it again
    after a kill. `crawl run` runs it when due (docs/incremental.md).

    Example: crawl compact
    """
    from cycles.commands.compact import compact as do_compact, compact_summary

    started = start_command("compact", as_json)
    result = run(do_compact, state.store, state.config, everything=all_buckets)
    counters = compact_summary(result)
    if as_json:
        return emit_json("done", started, **{k.replace("/", "_"): v for k, v in counters.items()})
    typer.echo(f"compacted {result.buckets} buckets ({result.rows} rows, {result.versions} versions) in "
               f"{result.seconds:.1f} s" + ("; link DB merged and ranked" if result.links else ""))


@app.command()
def rebucket(buckets: int = typer.Option(..., "--buckets", "-b", help="New number of host-hash buckets "
                                         "(see docs/cluster.md: Choosing the bucket count)."),
             as_json: bool = JSON_OPTION) -> None:
    """Rewrite the crawl DB split into a new number of host-hash buckets (atomic swap).

    Example: crawl rebucket --buckets 64
    """
    from cycles.commands.rebucket import rebucket as do_rebucket

    started = start_command("rebucket", as_json)
    result = run(do_rebucket, state.store, state.config, buckets)
    if as_json:  # the same count is not an error, nor a failure: "done", changed false (exit 0 as before)
        return emit_json("done", started, changed=result.changed, buckets=result.buckets, reason=result.reason,
                         rows=result.rows if result.changed else None,
                         version=result.version if result.changed else None)
    if not result.changed:
        typer.echo(f"rebucket: {result.reason}")
        return
    typer.echo(f"rebucketed crawl DB: {result.rows} URLs from {result.old_buckets} to {result.buckets} buckets "
               f"(version {result.old_version} -> {result.version})")


@app.command()
def status(as_json: bool = typer.Option(False, "--json", help="Machine-readable output: one JSON line.")) -> None:
    """URL counts by status, hosts and segments, read with DuckDB.

    Example: crawl status --json
    """
    from cycles.commands.status import crawl_status, format_status

    start_command("status", as_json)
    report = run(crawl_status, state.store, state.config)
    typer.echo(json.dumps(report, default=str) if as_json else format_status(report))


@app.command()
def pages(consumer: str = typer.Option(..., "--consumer", help="Consumer name; its cursor is kept in the store."),
          out: Optional[str] = typer.Option(None, "--out", help="Write the pages to this Parquet file (atomically; "
                                            "'-': to stdout); the cursor moves only once it is written."),
          peek: bool = typer.Option(False, "--peek", help="Do not move the cursor (without --out: only count)."),
          limit: Optional[int] = typer.Option(None, "--limit", help="At most this many batches."),
          as_json: bool = JSON_OPTION) -> None:
    """Write the new or changed pages published since this consumer's last read, then move its cursor.

    The cursor moves only after --out is completely written, so a failed write loses
    nothing: the next read gets the same pages. Exit code 3: no new pages (--out then
    holds none). One reader per consumer name at a time.

    Example: crawl pages --consumer indexer --out batch.parquet
    """
    from cycles.tables.pages import STDOUT, deliver_feed, read_feed
    from cycles.commands.status import require_crawldb

    started = start_command("pages", as_json)
    if as_json and out == STDOUT:
        raise CrawlError("pages: --json prints its line on stdout, where --out - writes the Parquet file; "
                         "give --out FILE")
    require_crawldb(state.store)  # a wrong --data would register the consumer in a folder nobody crawls
    if out is None and not peek:
        raise CrawlError("crawl pages needs --out FILE (or --out - for Parquet on stdout): the cursor moves only "
                         "once the pages are written there; --peek only counts them")
    if out is None:
        result = run(read_feed, state.store, consumer, False, limit)
    else:
        result = run(deliver_feed, state.store, consumer, out, not peek, limit)
    summary = (f"consumer {consumer}: {result.pages} pages in {len(result.batches)} batches"
               + (f" -> {out}" if out else "") + ("" if result.committed else " (peek: cursor not moved)"))
    if not result.batches:
        raise NothingToDo(summary + "; no new pages")
    if as_json:
        return emit_json("done", started, consumer=consumer, pages=result.pages, batches=len(result.batches),
                         out=out, committed=result.committed)
    typer.echo(summary, err=out == STDOUT)  # stdout then carries the Parquet file


@app.command()
def sql(query: Optional[str] = typer.Argument(None, help="SQL over the views crawldb, hosts, fetchlist, fetched, "
                                             "outlinks, pages, segments (`crawl schema` lists their columns)."),
        fmt: Optional[str] = typer.Option(None, "--format", "-f", help="table, csv, json (an array), jsonl or "
                                          "parquet. Default: by --out's suffix; else a table on a terminal, csv "
                                          "in a pipe (every row)."),
        out: Optional[str] = typer.Option(None, "--out", "-o", help="Write the result to this file (atomically) "
                                          "instead of stdout."),
        views: bool = typer.Option(False, "--views", help="Print the views as SQL for plain DuckDB instead "
                                   "(crawl sql --views > views.sql; then in duckdb: .read views.sql).")) -> None:
    """Run a DuckDB query over the current crawl DB, the segments and the pages feed.

    Example: crawl sql "SELECT status, count(*) FROM crawldb GROUP BY ALL"
             crawl sql "SELECT * FROM fetched" --out fetched.parquet
    """
    from cycles.commands.views import sql_to_output, views_script

    if views:
        if query is not None:
            raise CrawlError("sql: give a QUERY or --views, not both")
        typer.echo(run(views_script, state.store), nl=False)
        return
    if query is None:
        raise CrawlError('sql: give a QUERY (crawl sql "SELECT count(*) FROM crawldb") or --views')
    run(sql_to_output, state.store, state.config, query, fmt, out)


@app.command()
def recover(previous: bool = typer.Option(False, "--previous", help="Roll back: make the newest complete "
                                          "version older than the current one current (after a corrupt bucket)."),
            table: Optional[str] = typer.Option(None, "--table", help="Only this table: crawldb or hostdb."),
            dedupe: bool = typer.Option(False, "--dedupe", help="Instead: rewrite the crawl DB with one row per "
                                        "URL (one written before buckets were checked may hold a URL twice)."),
            as_json: bool = JSON_OPTION) -> None:
    """Reinstate the newest complete crawl DB and host DB version when CURRENT is lost.

    Complete: sealed by its writer (_COMPLETE), every file present, every page checksum
    intact. Nothing is deleted.

    Example: crawl recover            (or: crawl recover --previous --table crawldb)
    """
    from cycles.commands.recover import TABLES, dedupe_crawldb, recover as do_recover

    started = start_command("recover", as_json)
    if dedupe:
        dropped = run(dedupe_crawldb, state.store, state.config)
        if as_json:
            return emit_json("done", started, dropped=dropped)
        typer.echo(f"crawldb: {dropped} duplicate rows dropped")
        return
    results = run(do_recover, state.store, previous, (table,) if table else TABLES, state.config.db)
    if as_json:
        return emit_json("done", started, tables={r.table: {"action": r.action, "version": r.version,
                                                             "passed_over": [v for v, _ in r.skipped]} for r in results})
    for result in results:
        for version, why in result.skipped:
            typer.echo(f"  {result.table}: passed over {version}: {why}", err=True)
        typer.echo(f"{result.table}: {result.action}" + (f" {result.version}" if result.version else ""))


@app.command("schema")
def schema_(table: Optional[str] = typer.Argument(None, help="One view: crawldb, hosts, fetchlist, fetched, "
                                                "outlinks, pages or segments (default: all).")) -> None:
    """Print the views crawl sql, crawl sql --views and cycles.open() give: columns, DuckDB types, docs.

    Example: crawl schema fetched
    """
    from cycles.commands.views import schema_text

    typer.echo(run(schema_text, table))


@app.command("report")  # not `def report`: that name is the error reporter above
def report_command(out: Path = typer.Option(Path("crawl-report"), "--out", help="Folder for index.html and the PNG charts.")) -> None:
    """Write an HTML crawl report (self-contained: charts embedded) and its PNG charts.

    How fast the crawl goes, what fails and where: a summary table, then per-cycle,
    per-host and crawl DB charts (needs the report extra: pip install -e '.[report]').

    Example: crawl report --out report/
    """
    from cycles.commands.report import build_report

    result = run(build_report, state.store, state.config, out)
    typer.echo(f"report: {result.html} ({len(result.images)} charts)")


@app.command()
def export(segment: Optional[str] = typer.Argument(None, help="Segment id (default: every segment not yet "
                                                   "exported, oldest first)."),
           only: Optional[list[str]] = typer.Option(None, "--only", help="Write only this part: cdxj, index or "
                                                    "wet (repeatable; default all three)."),
           crawl: Optional[str] = typer.Option(None, "--crawl", help="The URL index's `crawl` column "
                                               "(default: warc.file_prefix)."),
           as_json: bool = JSON_OPTION) -> None:
    """Write segments' CDXJ index (pywb), cc-index URL index (Parquet) and WET text into
    segments/<id>/archive/ (cycles/archive/export.py).

    Without a segment: every segment not yet exported, oldest first (exit 3 when none is).
    A stopped fetch (crawl run --seconds) is exported from its committed chunks, marked partial.

    Example: crawl export --json       (or: crawl export SEGMENT --only cdxj)
    """
    from cycles.archive.export import PARTS, export_pending, export_segment

    started = start_command("export", as_json)
    parts = tuple(only or PARTS)
    if segment is not None:
        result = run(export_segment, state.store, segment, state.config, parts, crawl)
        if as_json:
            return emit_json("done", started, **export_fields(result))
        echo_export(result)
        return
    done = run(export_pending, state.store, state.config, parts, crawl, None if as_json else echo_export)
    summary = (f"export: {len(done.exported)} segment(s) exported, {len(done.current)} already exported, "
               f"{len(done.not_fetched)} with nothing fetched yet")
    if not done.exported:
        raise NothingToDo(summary + "; nothing to do")
    if as_json:
        return emit_json("done", started, exported=[export_fields(r) for r in done.exported],
                         already_exported=done.current, not_fetched=done.not_fetched)
    typer.echo(summary)


def export_fields(result) -> dict:
    return {"segment": result.segment, "state": result.state, "partial": result.partial, "chunks": result.chunks,
            "records": result.records, "cdxj_lines": result.cdxj_lines, "index_rows": result.index_rows,
            "wet_records": result.wet_records, "files": result.files}


def echo_export(result) -> None:
    partial = (f" (partial: the segment is {result.state}, {result.chunks} committed chunks)"
               if result.partial else "")
    typer.echo(f"export {result.segment}: {result.records} WARC records; {result.cdxj_lines} CDXJ lines, "
               f"{result.index_rows} index rows, {result.wet_records} WET records{partial}")
    for part, files in result.files.items():
        if len(files) > 3:  # a WET file per WARC file: dozens a segment
            typer.echo(f"  {part}: {len(files)} files in {files[0].rsplit('/', 1)[0]}/")
            continue
        for name in files:
            typer.echo(f"  {part}: {name}")


@app.command("run")
def run_command(seconds: Optional[float] = typer.Option(None, "--seconds", help="Stop after this many seconds "
                                                        "of wall time (the running fetch commits and stops)."),
                top_n: Optional[int] = typer.Option(None, "--top-n", help="URLs per segment."),
                generate_ahead: bool = typer.Option(True, "--generate-ahead/--no-generate-ahead",
                                                    help="Generate the next segment while one is fetched "
                                                    "(default), so the fetch pool never waits for generate."),
                as_json: bool = JSON_OPTION) -> None:
    """Crawl in overlapping cycles: fetch a segment while the previous one is updated,
    until --seconds pass, SIGTERM, or nothing is due (cycles/commands/run.py).

    Example: crawl run --seconds 3600
    """
    from cycles.commands.run import RunState, run_crawl

    started = start_command("run", as_json)
    done = RunState()
    for line in run(run_crawl, state.store, state.config, seconds, top_n=top_n, state=done,
                    generate_ahead=generate_ahead):
        typer.echo(line, err=as_json)  # with --json, stdout holds only the JSON line
    if done.stopped_by == "nothing due" and not done.fetched and not done.updated:
        raise NothingToDo("run: no URL is due and no segment is pending; nothing was done")
    if as_json:
        emit_json("done", started, stopped_by=done.stopped_by, fetched=done.fetched, updated=done.updated,
                  generated=done.generated, requests=done.counters.get("fetch/requests", 0),
                  pages=done.counters.get("fetch/outcome/ok", 0))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
