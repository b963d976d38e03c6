"""One crawl as an Airflow DAG: generate -> fetch (a task per partition) -> mark fetched -> update.

Each task runs the ``crawl`` command in a subprocess and reads the one JSON line it prints
with ``--json`` (the scheduler contract, cycles/commands/cli.py), so the crawler's dependencies
stay out of Airflow's environment: this file imports only Airflow and the standard
library. Copy it into the ``dags/`` folder of your Airflow deployment (Airflow 3, tested
with 3.3; the 2.x imports below are untested) and set, on the workers' environment or per run (trigger with config):

=================  ===============================  ==================================================
env var            run param                        what
=================  ===============================  ==================================================
CRAWL_DATA         ``data``                         the store: a folder or s3://bucket/prefix (``--data``);
                                                    the asset's URI is made from the env var when the
                                                    file is parsed, so set it there, not only per run
CRAWL_CONFIG       ``config``                       the crawl's TOML config file (``--config``); "" none
CRAWL_COMMAND      ``crawl``                        how to run crawl: ``/opt/crawl/.venv/bin/crawl``
CRAWL_DAG_ID       --                               the DAG id; a second crawl: a copy of this file with
                                                    its own defaults below (env vars are deployment-wide)
CRAWL_SCHEDULE     --                               cron expression or preset; default ``@hourly``
=================  ===============================  ==================================================

Exit codes (cycles/errors.py) decide each task's end: 3 (nothing to do) skips the run
when generate finds no URL due, and counts as done for a stage already done (a retried
task); 4 (interrupted) fails the try, and the retry resumes where it stopped. The DAG runs
one cycle at a time (``max_active_runs=1``): two segments must not fetch at once. A run
first finishes any segment an earlier failed run left pending (oldest first, the command
``crawl status`` names), then generates. Each update publishes the pages feed, an asset
other DAGs can be scheduled on (``crawl pages --consumer NAME --out FILE`` reads it).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import signal
import subprocess
import threading

try:  # Airflow 3
    from airflow.sdk import Asset, Param, dag, get_current_context, task
    from airflow.sdk.exceptions import AirflowException, AirflowSkipException
except ImportError:  # Airflow 2.x: the same objects under their old names
    from airflow.datasets import Dataset as Asset
    from airflow.decorators import dag, task
    from airflow.exceptions import AirflowException, AirflowSkipException
    from airflow.models.param import Param
    from airflow.operators.python import get_current_context

DAG_ID = os.environ.get("CRAWL_DAG_ID", "crawl")
DATA = os.environ.get("CRAWL_DATA", "./data")
CONFIG = os.environ.get("CRAWL_CONFIG", "")
COMMAND = os.environ.get("CRAWL_COMMAND", "crawl")
SCHEDULE = os.environ.get("CRAWL_SCHEDULE", "@hourly")

EXIT_OK, EXIT_NOTHING_TO_DO, EXIT_INTERRUPTED = 0, 3, 4
"""cycles/errors.py: 0 done, 3 nothing to do, 4 interrupted (anything else failed)."""

STOP_GRACE_S = 60
"""After a timeout or a kill of the task, how long crawl may take to commit and exit on
SIGTERM (fetch commits what it fetched) before it is killed."""

MAX_PENDING_STEPS = 20
"""At most this many commands to finish segments an earlier run left pending (each moves
the oldest one on: fetch, then update), so a stuck store fails the task instead of looping."""


def pages_asset(data: str) -> Asset:
    """The pages feed of the store (``pages/``, docs/update.md: The pages feed) as an asset URI."""
    uri = data.rstrip("/") + "/pages" if "://" in data else "file://" + os.path.abspath(data) + "/pages"
    return Asset(uri)


PAGES = pages_asset(DATA)


def relay_lines(stream, kept: list[str]) -> None:
    """Print each line of ``stream`` into the task log as it comes, and keep it."""
    for line in stream:
        print(line, end="", flush=True)
        kept.append(line)


def crawl(*args: str) -> dict:
    """Run ``crawl --data D [--config C] ARGS --json`` with this run's params; returns its JSON
    line, with "status" "nothing_to_do" on exit code 3. Raises on anything else, so the
    task fails (and its retry resumes: every stage is safe to run again)."""
    params = get_current_context()["params"]
    command = shlex.split(params.get("crawl") or COMMAND) + ["--data", params.get("data") or DATA]
    if params.get("config"):
        command += ["--config", params["config"]]
    command += [*args, "--json"]
    # The command line says which store and config; the crawl CLI would also read them from
    # CRAWL_DATA / CRAWL_CONFIG, and a run's config "" (none) must not fall back to the worker's.
    env = {k: v for k, v in os.environ.items() if k not in ("CRAWL_DATA", "CRAWL_CONFIG")}
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    # crawl's stderr (its progress line every log.progress_interval_s, warnings, its one-line
    # error) goes into the task log as it comes: collected to the end, an hour's fetch showed
    # no progress until it was over.
    stderr_lines: list[str] = []
    relay = threading.Thread(target=relay_lines, args=(process.stderr, stderr_lines), daemon=True)
    relay.start()
    try:
        stdout = process.stdout.read()
        process.wait()
    except BaseException:
        # A timeout or a kill of the task: ask crawl to commit and stop (exit 4), so the
        # retry resumes instead of finding a partition locked by an orphan.
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
        raise
    relay.join()
    stderr = "".join(stderr_lines)
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {}
    print(f"{shlex.join(command)} -> exit {process.returncode}: {json.dumps(result)}")
    if process.returncode in (EXIT_OK, EXIT_NOTHING_TO_DO):
        return result
    if process.returncode == EXIT_INTERRUPTED:
        raise AirflowException(f"crawl was interrupted ({result.get('message', '')}); the retry resumes it")
    raise AirflowException(f"crawl failed with exit code {process.returncode}: "
                           f"{result.get('message') or stderr.strip()[-2000:]}")


@dag(
    dag_id=DAG_ID,
    schedule=SCHEDULE,
    start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,  # one segment in flight: two fetches could ask the same host at once
    default_args={"retries": 3, "retry_delay": dt.timedelta(minutes=2), "execution_timeout": dt.timedelta(hours=2)},
    params={"data": Param(DATA, type="string", description="The store: a folder or s3://bucket/prefix."),
            "config": Param(CONFIG, type="string", description="The crawl's TOML config file; empty: defaults."),
            "crawl": Param(COMMAND, type="string", description="The crawl command (split like a shell would)."),
            "top_n": Param(0, type="integer", minimum=0, description="URLs per cycle; 0: generate.top_n.")},
    tags=["crawl"],
    doc_md=__doc__,
)
def crawl_dag():
    @task(execution_timeout=dt.timedelta(hours=2))
    def generate() -> list[dict]:
        """Finish what an earlier run left pending, then generate; no URL due skips the run.
        Returns the fetch tasks' arguments: the segment and one of its partitions each."""
        for _ in range(MAX_PENDING_STEPS):
            pending = [s for s in crawl("status").get("segments", []) if s.get("next")]
            if not pending:
                break
            crawl(*pending[0]["next"].split()[1:])  # "crawl fetch SEGMENT": the command that moves it on
        top_n = get_current_context()["params"].get("top_n") or 0
        result = crawl("generate", *(["--top-n", str(top_n)] if top_n else []))
        if result.get("status") == "nothing_to_do":
            raise AirflowSkipException(result.get("message", "nothing to do"))
        return [{"segment": result["segment"], "partition": p} for p in result["partitions"]]

    @task(max_active_tis_per_dagrun=8, execution_timeout=dt.timedelta(hours=6))
    def fetch(segment: str, partition: int) -> dict:
        """One partition; run again, it resumes (a finished one returns its counters)."""
        return {**crawl("fetch", segment, "--partition", str(partition)), "segment": segment}

    @task
    def mark_fetched(fetched: list[dict]) -> dict:
        """Every partition is done: write the segment's fetched marker."""
        segments = {f["segment"] for f in fetched}
        if len(segments) != 1:
            raise AirflowException(f"the fetch tasks name {len(segments)} segments, not one: {sorted(segments)}")
        segment = segments.pop()
        return {**crawl("fetch", segment, "--finish"), "segment": segment}

    @task(outlets=[PAGES])
    def update(marked: dict) -> dict:
        """Merge the segment into the crawl DB and publish its pages (the asset)."""
        result = crawl("update", marked["segment"])
        if result.get("status") == "nothing_to_do":  # applied already (a retry): no new pages, no asset event
            raise AirflowSkipException(result.get("message", "nothing to do"))
        return result

    @task
    def compact(updated: dict) -> dict:
        """Merge the buckets' deltas into bases and the link DB's pending links, each when due
        (docs/incremental.md); a run with nothing due returns at once."""
        return crawl("compact")

    compact(update(mark_fetched(fetch.expand_kwargs(generate()))))


crawl_dag()
