"""Every shell, Python and TOML snippet of README.md and docs/ is run by a test, or says why not.

A snippet's key is its document and the start of its first line (tests/support/snippets.py).
This module runs them:

- TOML blocks load as a config file (fast);
- benchmark command lines: each entry point's subcommand exists and takes every option the
  line uses (``--help`` of the subcommand; fast);
- the crawl, query and export commands of the docs run unchanged, in order, in a folder
  beside a small test web on loopback (``web``): ``crawl`` is on PATH and ``.venv`` is the
  venv, ``CRAWL_CONFIG`` names a config that resolves the test web's names (the one thing an
  operator on the real internet does not need), ``seeds.txt`` holds its seeds; a segment id
  a doc spells out is replaced by the crawl's own (:data:`SHELL_RUNS`);
- the Python blocks run the same way (``web``);
- the README's real-web quickstart, the real-web test web's own lines and incremental.md's
  measurements need a web or a store of their own: tests/test_doc_snippets_alone.py runs them
  (a second module, so that ``--dist loadfile`` gives them the other worker);
- the snippets with placeholders, servers, browsers or a cluster run with the
  substitutions of :data:`FILLED` (values of the test's own run, loopback ports, tiny sizes):
  pywb and node_exporter on a free loopback port, asked and stopped; ``xdg-open`` with
  ``$BROWSER`` as headless chromium; the cluster's lines on a local Dask scheduler and worker
  with moto's S3. operations.md's console transcript is run command by command, and each line it
  shows is checked against what the command printed (fields and statuses, not ids or counts).

A snippet none of these runs carries a marker just above its fence (``<!-- snippet: not run:
REASON -->`` or ``<!-- snippet: run by FILE ... -->``), and the first test checks that every
snippet is either run by one of the two modules or marked, and that every key still names a snippet.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.doc_snippets import (BENCH, CLUSTER, CROP, EXTRACT, FILLED, NODE_EXPORTER, OPERATING,
                                        PIP_OFFLINE, PRELUDE, PYTHON_RUNS, REPLAY, REPORT_INSTALL, REPORT_OPEN,
                                        RUN_HERE, S3_RUN, SEGMENT_IDS, SHELL_RUNS, SNIPPETS, TOML, TRANSCRIPT,
                                        filled, folder_env, matches, one, run_script, script_lines, venv_bin)
from tests.support.snippets import ROOT, Snippet, snippets_of


def unaccounted(snippets: list[Snippet]) -> list[str]:
    """Snippets neither run by this module nor marked (with a reason, or the files that run them)."""
    problems = []
    for s in snippets:
        run_here = any(matches(s, key) for key in RUN_HERE)
        if run_here and s.marker:
            problems.append(f"{s.id}: run here and marked {s.marker!r}")
        elif not run_here and not s.marker:
            problems.append(f"{s.id}: not run by a test and not marked")
        elif s.marker and s.marker.startswith("not run:") and len(s.marker) < len("not run: ") + 10:
            problems.append(f"{s.id}: say why it is not run")
        elif s.marker and s.marker.startswith("run by "):
            problems += [f"{s.id}: {p}" for p in _run_by_problems(s)]
        elif s.marker and not s.marker.startswith("not run:"):
            problems.append(f"{s.id}: unknown marker {s.marker!r}")
    return problems


def _programs(snippet: Snippet) -> set[str]:
    """The scripts and test files a shell snippet runs (words with a slash, not the venv)."""
    return {w for words in snippet.commands() for w in words if "/" in w and not w.startswith(".venv/")}


def _run_by_problems(snippet: Snippet) -> list[str]:
    files = snippet.marker.removeprefix("run by ").split()
    missing = [f for f in files if not (ROOT / f).is_file()]
    if missing:
        return [f"names missing files {missing}"]
    text = "".join((ROOT / f).read_text() for f in files)
    return [f"{p} is run by none of {files}" for p in sorted(_programs(snippet)) if p not in text and p not in files]


# --- every snippet accounted for (fast) ------------------------------------------------------
def test_every_snippet_is_run_by_a_test_or_marked():
    assert unaccounted(SNIPPETS) == []
    stale = [key for key in RUN_HERE if not any(matches(s, key) for s in SNIPPETS)]
    assert stale == [], f"keys naming no snippet: {stale}"
    not_run = [s.id for s in SNIPPETS if s.marker and s.marker.startswith("not run:")]
    assert len(not_run) < len(SNIPPETS) / 2, not_run


def test_the_check_sees_an_unmarked_snippet_and_a_marker_without_reason(tmp_path):
    # Positive control: a new snippet nobody runs, and a marker that gives no reason, are reported.
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# x\n")
    (tmp_path / "docs" / "new.md").write_text(
        "```sh\ncrawl frobnicate\n```\n\n<!-- snippet: not run: -->\n```python\nprint(1)\n```\n"
        "<!-- snippet: run by tests/nowhere.py -->\n```sh\nbash scripts/x.sh\n```\n```sql\nSELECT 1\n```\n")
    found = snippets_of(tmp_path / "docs" / "new.md", tmp_path)
    assert [s.language for s in found] == ["sh", "python", "sh"]  # sql is not a language run here
    problems = unaccounted(found)
    assert problems == ["docs/new.md:1: not run by a test and not marked", "docs/new.md:6: say why it is not run",
                        "docs/new.md:10: names missing files ['tests/nowhere.py']"]


# --- TOML and benchmark lines (fast) ---------------------------------------------------------
@pytest.mark.parametrize("key", TOML, ids=lambda k: k[0])
def test_a_toml_snippet_is_a_config_the_crawler_loads(key, tmp_path):
    from cycles.config import Config, load_config

    path = tmp_path / "crawl.toml"
    path.write_text(one(key).text)
    config = load_config(path)
    assert config != Config()  # it changed something, and every key it names exists


def _bench_lines() -> list[tuple[str, list[str]]]:
    """(snippet id, the words from the entry point on) of every benchmark command line."""
    lines = []
    for s in SNIPPETS:
        if any(matches(s, key) for key in BENCH):
            for words in s.commands():
                entry = [i for i, w in enumerate(words) if w.startswith("scripts/bench/")]
                if entry:
                    lines.append((s.id, words[entry[0]:]))
    return lines


HELP_ALL = """
import contextlib, io, json, runpy, sys
out = {}
for entry, sub in json.loads(sys.argv[1]):
    sys.path.insert(0, str(__import__("pathlib").Path(entry).parent))
    sys.argv = [entry, sub, "--help"]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        try:
            runpy.run_path(entry, run_name="__main__")
        except SystemExit as stop:
            code = stop.code
    out[entry + " " + sub] = [code, buffer.getvalue()]
print(json.dumps(out))
"""
"""Each subcommand's ``--help``, all in one process: importing the benchmarks once is most of the cost."""


@pytest.fixture(scope="module")
def bench_helps() -> dict[str, tuple[int, str]]:
    import json

    pairs = sorted({(str(ROOT / words[0]), words[1]) for _, words in _bench_lines()} | {(str(ROOT / "scripts/bench/scale.py"), "plan")})
    done = subprocess.run([sys.executable, "-c", HELP_ALL, json.dumps(pairs)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return {key.replace(str(ROOT) + "/", ""): value for key, value in json.loads(done.stdout.splitlines()[-1]).items()}


@pytest.mark.parametrize("where,words", _bench_lines(), ids=lambda v: v if isinstance(v, str) else " ".join(v[:2]))
def test_a_benchmark_line_names_a_subcommand_and_options_it_takes(where, words, bench_helps):
    code, text = bench_helps[f"{words[0]} {words[1]}"]
    assert code in (0, None), f"{where}: {words[0]} {words[1]} --help exited {code}"
    unknown = [o for o in (w.split("=")[0] for w in words[2:] if w.startswith("--")) if o not in text]
    assert not unknown, f"{where}: {' '.join(words[:2])} has no {unknown}"


def test_the_benchmark_check_sees_an_unknown_option(bench_helps):
    # Positive control: the help text the check reads lists options, and not every word.
    code, text = bench_helps["scripts/bench/scale.py plan"]
    assert code in (0, None) and "--rows" in text and "--no-such-option" not in text


# --- the docs' commands against a test web (web) ---------------------------------------------


def newest_segment(folder: Path) -> str:
    return sorted(p.name for p in (folder / "data" / "segments").iterdir())[-1]


def run_line(line: str, folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """One line in bash. A ``crawl run`` of an hour (crawling.md) gets SIGTERM after 60 s, as an
    operator stops it (exit 4); on a crawl with nothing due it ends at once (exit 3)."""
    with open(folder / "line.out", "w") as out, open(folder / "line.err", "w") as err:
        proc = subprocess.Popen(["bash", "-c", f"exec {line}" if " run --seconds " in line else line], cwd=folder,
                                env=env, stdout=out, stderr=err)
        try:
            proc.wait(timeout=60 if " run --seconds " in line else 600)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=300)
        finally:
            proc.kill()
    return subprocess.CompletedProcess(line, proc.returncode,
                                       (folder / "line.out").read_text(), (folder / "line.err").read_text())


def run_shell(snippet: Snippet, folder: Path, env: dict[str, str]) -> list[subprocess.CompletedProcess]:
    """Each line of the snippet in bash, in ``folder``; a line may end with 3, "nothing to do", or 4,
    stopped by SIGTERM (:func:`run_line`)."""
    done = []
    for line in snippet.text.replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        for literal in (s for s in SEGMENT_IDS if s in line):
            line = line.replace(literal, newest_segment(folder))
        result = run_line(line, folder, env)
        assert result.returncode in (0, 3, 4) and "Traceback" not in result.stderr, (line, result.stderr[-3000:])
        done.append(result)
    return done


@pytest.fixture(scope="module")
def doc_web(tmp_path_factory):
    """A small test web and a folder as the docs assume one: ``.venv``, ``seeds.txt``, and
    crawl.toml (its names resolved to loopback, given as CRAWL_CONFIG)."""
    from testweb.harness import TestWeb
    from tests.support.cli import write_web_config

    folder = tmp_path_factory.mktemp("docs")
    with TestWeb(hosts=4, pages=5, page_bytes=3000, special=False, max_seconds=600) as web:
        (folder / ".venv").symlink_to(venv_bin().parent)
        config = write_web_config(folder / "web.toml", web)
        (folder / "seeds.txt").write_text("\n".join(web.seeds()) + "\n")
        env = folder_env(folder, config)
        yield {"web": web, "folder": folder, "env": env,
               "crawled": run_shell(one(SHELL_RUNS[0]), folder, env), "requests": web.requests()}


@pytest.mark.web
def test_the_crawling_guide_crawls_the_test_web(doc_web):
    import cycles

    inject, cycle, status = doc_web["crawled"]
    assert "injected: 4 new" in inject.stdout
    assert {r["path"] for r in doc_web["requests"]} >= {"/robots.txt", "/"}
    counts = dict(cycles.open(str(doc_web["folder"] / "data")).sql(
        "SELECT status, count(*) FROM crawldb GROUP BY ALL").fetchall())
    assert counts.get("fetched", 0) >= 4, counts
    assert "fetched" in status.stdout


@pytest.mark.web
@pytest.mark.parametrize("key", SHELL_RUNS[1:], ids=lambda k: f"{k[0]}:{k[1][:24]}")
def test_a_docs_command_runs_on_the_crawl(doc_web, key):
    folder = doc_web["folder"]
    results = run_shell(one(key), folder, doc_web["env"])
    if key[1].startswith('crawl sql "SELECT status'):
        assert "fetched" in results[0].stdout
    elif key[1].startswith('crawl sql "SELECT host'):
        assert (folder / "errors.csv").exists() and (folder / "batch.parquet").exists()
        assert int(results[2].stdout.split()[0]) > 4  # header + every URL of the crawl DB
        assert "url" in results[3].stdout  # crawl schema fetched
    elif key[1].startswith("crawl pages"):
        import pyarrow.parquet as pq

        assert pq.read_table(folder / "batch.parquet").num_rows >= 4
    elif key[1].startswith("crawl export"):
        assert list((folder / "data" / "segments").glob("*/archive/*.cdxj"))
    elif key[1].startswith("crawl run"):
        assert results[0].returncode in (3, 4), results[0]  # nothing due yet, or stopped by SIGTERM
    elif key[1].startswith("crawl rebucket"):
        assert "64" in results[0].stdout + results[0].stderr


@pytest.mark.web
def test_the_s3_commands_crawl_into_a_local_s3_server(doc_web):
    """data.md's S3 block, whole and unchanged, against moto on the address it names (127.0.0.1:9000;
    skipped when something else holds that port); its "..." keys are what moto accepts."""
    import socket

    from testweb.moto import STRAY_AWS_SETTINGS, moto_server_path, stop_moto

    if not moto_server_path().exists():
        pytest.skip("moto_server is not installed (pip install 'moto[server]')")
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 9000)) == 0:
            pytest.skip("127.0.0.1:9000 is taken")
    server = subprocess.Popen([str(moto_server_path()), "-H", "127.0.0.1", "-p", "9000"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        import boto3

        deadline = time.monotonic() + 30
        while socket.socket().connect_ex(("127.0.0.1", 9000)) != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        s3 = boto3.client("s3", endpoint_url="http://127.0.0.1:9000", region_name="us-east-1",
                          aws_access_key_id="...", aws_secret_access_key="...")
        s3.create_bucket(Bucket="my-bucket")
        env = {k: v for k, v in doc_web["env"].items() if k not in STRAY_AWS_SETTINGS and not k.startswith("AWS_")}
        before = len(doc_web["web"].requests())
        done = subprocess.run(["bash", "-e", "-c", one(S3_RUN).text], cwd=doc_web["folder"], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="my-bucket", Prefix="crawl/crawldb/").get("Contents", [])]
        assert any(k.endswith(".parquet") for k in keys), keys
        assert len(doc_web["web"].requests()) > before  # the S3 store's crawl asked the web again
    finally:
        stop_moto(server)


@pytest.mark.web
@pytest.mark.parametrize("key", PYTHON_RUNS, ids=lambda k: k[0])
def test_a_python_snippet_runs(doc_web, key):
    code = PRELUDE.get(key, "") + one(key).text
    done = subprocess.run([sys.executable, "-c", code], cwd=doc_web["folder"], env=doc_web["env"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


# --- the README's real-web quickstart, in the namespace (issue 28; web, root) ----------------


# --- snippets with placeholders, servers and browsers, filled from a real run (web) ----------


def pip_offline_check(results: list[tuple[str, int, str]]) -> None:
    """The offline ``pip install`` found the extra's every requirement installed (it fails on one
    it cannot find: test_the_report_extra_and_crawl_report's positive control)."""
    for line, code, out in results:
        if line.startswith(PIP_OFFLINE):
            assert code == 0 and "Would install" not in out and "already satisfied: crawl[" in out, (line, out[-2000:])


@pytest.fixture
def fresh_crawl(doc_web, tmp_path):
    """A folder like doc_web's with the seeds injected and nothing fetched yet."""
    (tmp_path / ".venv").symlink_to(venv_bin().parent)
    (tmp_path / "seeds.txt").write_text((doc_web["folder"] / "seeds.txt").read_text())
    env = folder_env(tmp_path, Path(doc_web["env"]["CRAWL_CONFIG"]))
    inject = run_line("crawl inject seeds.txt", tmp_path, env)
    assert inject.returncode == 0, inject.stderr
    return tmp_path, env


def transcript(text: str) -> list[tuple[str, list[str]]]:
    """A console block as (command, the lines it printed)."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.strip():
            steps[-1][1].append(line)
    return steps


def same_fields(documented: str, printed: str) -> None:
    """A printed line matches the doc's: the same JSON keys with values of the same type, the
    same status, stage and exit code, the message with ``...`` for any text (ids and counts differ)."""
    import json
    import re

    if not documented.startswith("{"):
        assert printed.strip() == documented.strip()
        return
    doc, got = json.loads(documented.replace("{...}", "{}")), json.loads(printed)
    assert set(doc) <= set(got), (documented, printed)
    for key, value in doc.items():
        if key in ("status", "stage", "exit_code"):
            assert got[key] == value, (key, documented, printed)
        elif key == "message":
            assert re.fullmatch(".*".join(map(re.escape, value.split("..."))), got[key]), (documented, printed)
        elif value != "...":
            assert isinstance(got[key], type(value)) or isinstance(value, float) and isinstance(got[key], int), key


def test_the_transcript_check_sees_a_changed_field_and_the_fill_a_lost_placeholder(monkeypatch):
    # Positive controls: a line whose status, key set or message differs from the doc's fails the
    # transcript check, ids and counts do not; a placeholder gone from its snippet fails the fill.
    doc = '{"status": "nothing_to_do", "stage": "update", "exit_code": 3, "message": "update: none in ...; run it"}'
    same_fields(doc, '{"status": "nothing_to_do", "stage": "update", "exit_code": 3, '
                     '"message": "update: none in /x/data; run it", "extra": 1}')
    for printed in ('{"status": "done", "stage": "update", "exit_code": 3, "message": "update: none in d; run it"}',
                    '{"status": "nothing_to_do", "stage": "update", "exit_code": 3}',
                    '{"status": "nothing_to_do", "stage": "update", "exit_code": 3, "message": "other"}'):
        with pytest.raises(AssertionError):
            same_fields(doc, printed)
    same_fields('{"segment": "2026-a", "urls": 4, "seconds": 1.2}', '{"segment": "2027-b", "urls": 9, "seconds": 2}')
    with pytest.raises(AssertionError):
        same_fields('{"urls": 4}', '{"urls": "4"}')
    values = {"segment": "s", "warc_stem": "f", "offset": "0", "warc_filename": "w", "length": "1"}
    assert "<" not in filled(EXTRACT, **values) and "$((0 + 1))" in filled(EXTRACT, **values)
    monkeypatch.setitem(FILLED, EXTRACT, {**FILLED[EXTRACT], "<no such placeholder>": "x"})
    with pytest.raises(AssertionError, match="no such placeholder"):
        filled(EXTRACT, **values)


@pytest.mark.web
def test_the_scheduler_transcript_is_what_the_commands_print(fresh_crawl):
    """operations.md's transcript, each command run on a fresh crawl of the test web; the doc's
    segment id is generate's, and the partition 0 line runs for each partition generate made
    (as its comment says). Each printed line has the fields the doc shows."""
    import json

    folder, env = fresh_crawl
    text = one(TRANSCRIPT).text
    documented_segment = "20261201T213547135278Z-e7985a"
    segment, partitions = documented_segment, [0]
    for command, expected in transcript(text):
        command = command.replace(documented_segment, segment)
        lines = [command.replace("--partition 0", f"--partition {p}") for p in partitions] \
            if "--partition 0" in command else [command]
        for line in lines:
            result = run_line(line, folder, env)
            printed = result.stdout.splitlines()
            assert "Traceback" not in result.stderr and printed, (line, result.stderr[-2000:])
            if not expected:  # the doc shows no output: the stage's JSON line says done
                assert json.loads(printed[-1])["status"] == "done", (line, printed)
            assert len(printed) == len(expected) or not expected, (line, printed, expected)
            for documented, got in zip(expected, printed):
                same_fields(documented, got)
        if command.startswith("crawl generate"):
            segment, partitions = json.loads(printed[-1])["segment"], json.loads(printed[-1])["partitions"]
    assert segment != documented_segment


@pytest.mark.web
def test_the_operating_commands_run_with_srv_as_the_tests_folder(fresh_crawl):
    import cycles

    folder, env = fresh_crawl
    results = run_script(filled(OPERATING, folder=str(folder), config=env["CRAWL_CONFIG"]), folder,
                         {k: v for k, v in env.items() if k != "CRAWL_CONFIG"})
    (_, export, _), (_, cycle, _), (_, show, shown), (_, fetch, _), (_, version, printed) = results
    assert (export, cycle, show, fetch, version) == (0, 0, 0, 3, 0), results
    assert "top_n = 20000" in shown and "-s" in shown, shown  # the setting, and where it came from
    assert printed.strip()
    fetched = cycles.open(str(folder / "data")).sql("SELECT count(*) FROM crawldb WHERE status = 'fetched'").fetchall()
    assert fetched[0][0] >= 4


@pytest.fixture(scope="module")
def exported(doc_web):
    """The newest segment of doc_web's crawl exported (archive.md's own export line) and one
    fetched page's row of its URL index: (url, warc_filename, offset, length)."""
    import duckdb

    folder = doc_web["folder"]
    run_shell(one(("docs/archive.md", "crawl export 2026")), folder, doc_web["env"])
    rows = duckdb.sql(f"SELECT url, warc_filename, warc_record_offset, warc_record_length FROM "
                      f"'{folder}/data/segments/*/archive/*.cc-index.parquet' WHERE fetch_status = 200 "
                      f"AND url NOT LIKE '%robots.txt' ORDER BY url LIMIT 1").fetchall()
    assert rows, "no fetched page in the URL index"
    return rows[0]


@pytest.mark.web
def test_a_record_is_extracted_by_its_offset(doc_web, exported):
    url, warc_filename, offset, length = exported
    parts = Path(warc_filename).parts
    segment, stem = parts[parts.index("segments") + 1], Path(warc_filename).name.removesuffix(".warc.gz")
    text = filled(EXTRACT, segment=segment, warc_stem=stem, offset=str(offset), warc_filename=warc_filename,
                  length=str(length))
    (_, payload_code, payload), (_, record_code, record) = run_script(text, doc_web["folder"], doc_web["env"])
    assert payload_code == record_code == 0
    assert "<html" in payload.lower() and "WARC-Target-URI: " + url in record
    assert payload.strip()[:200] in record  # the same record: its payload, and it whole


@pytest.mark.web
def test_pywb_replays_the_export_on_loopback(doc_web, exported):
    """archive.md's replay lines; pywb on a free loopback port, asked for the captures of a page
    the crawl fetched (the doc's example URL), then stopped."""
    import re
    import socket
    import urllib.request

    pytest.importorskip("pywb", reason="pywb is the archive extra: pip install -e '.[archive]'")
    from testweb.moto import free_port

    port = free_port("127.0.0.1")
    text = filled(REPLAY, port=str(port), url=exported[0])
    folder = doc_web["folder"]
    shutil.rmtree(folder / "replay", ignore_errors=True)
    log = folder / "replay.log"
    proc = subprocess.Popen(["bash", "-c", text], cwd=folder, env=doc_web["env"], stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        asked = re.search(r"http://127\.0\.0\.1:\d+/crawl/\*/\S+", text).group()
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(asked, timeout=30) as response:
            listing = response.read().decode()
        assert response.status == 200 and exported[0] in listing, listing[:2000]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    collection = folder / "replay" / "collections" / "crawl"
    linked = [p.name for sub in ("archive", "indexes") for p in (collection / sub).iterdir()]
    assert any(n.endswith(".warc.gz") for n in linked) and any(n.endswith(".cdxj") for n in linked), linked


def node_exporter() -> str | None:
    """node_exporter, or Debian's name for it (prometheus-node-exporter, as .ci/run installs it)."""
    return shutil.which("node_exporter") or shutil.which("prometheus-node-exporter")


@pytest.mark.web
def test_node_exporter_serves_the_crawls_metric_files(doc_web):
    import urllib.request

    from testweb.moto import free_port

    if node_exporter() is None:
        pytest.skip("node_exporter is not installed (.ci/run: apt-get install prometheus-node-exporter)")
    folder, port = doc_web["folder"], free_port("127.0.0.1")
    assert list((folder / "data" / "metrics").glob("crawl_fetch.prom"))
    text = filled(NODE_EXPORTER, node_exporter=node_exporter(), port=str(port), folder=str(folder))
    log = folder / "node_exporter.log"
    proc = subprocess.Popen(["bash", "-c", "exec " + text.strip()], cwd=folder, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT)
    try:
        opener, deadline, body = urllib.request.build_opener(urllib.request.ProxyHandler({})), time.monotonic() + 30, ""
        while "crawl_fetch_pages_total" not in body:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
            try:
                body = opener.open(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                continue
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "crawl_generate_" in body and "crawl_update_" in body


@pytest.mark.web
def test_the_report_extra_and_crawl_report(doc_web):
    pytest.importorskip("matplotlib", reason="crawl report needs the report extra (.ci/run installs it)")
    pip, report = script_lines(filled(REPORT_INSTALL, pip_offline=PIP_OFFLINE))
    pip_offline_check(run_script(pip, ROOT, doc_web["env"]))
    (_, missing, _), = run_script(f"{PIP_OFFLINE} no-such-package-of-crawl", ROOT, doc_web["env"])
    assert missing != 0  # positive control: offline, pip fails on a requirement not installed
    (_, code, _), = run_script(report, doc_web["folder"], doc_web["env"])
    assert code == 0 and "<table" in (doc_web["folder"] / "report" / "index.html").read_text()


BROWSER = """#!/bin/sh
# xdg-open's $BROWSER: headless chromium with tests/test_report_browser.py's flags (a proxy on a closed
# loopback port, no name resolves): the page's DOM, and a 1280 x 900 picture where the crop reads it.
open() {
    chromium --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \\
        --disable-sync --no-first-run --user-data-dir="$PWD/chromium-profile" --proxy-server=http://127.0.0.1:{port} \\
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1" "$@" 2>>chromium.log
}
mkdir -p test-artefacts/report-browser
open --dump-dom "$1" > opened.html &&
    open --window-size=1280,900 --screenshot=test-artefacts/report-browser/report-desktop.png "$1"
"""


@pytest.mark.web
def test_the_report_opens_in_a_browser_and_its_picture_crops(doc_web):
    """operations-tools.md: ``xdg-open`` with $BROWSER set to headless chromium (no display), and
    the crop of the picture it took, written to the folder's docs/img/."""
    pytest.importorskip("matplotlib", reason="crawl report needs the report extra (.ci/run installs it)")
    pytest.importorskip("PIL", reason="Pillow comes with matplotlib (the report extra)")
    if not (shutil.which("xdg-open") and shutil.which("chromium")):
        if os.environ.get("CRAWL_REQUIRE_BROWSER"):
            pytest.fail("xdg-open or chromium is missing (.ci/run installs them)")
        pytest.skip("xdg-open or chromium is missing (.ci/run installs them)")
    from PIL import Image

    folder = doc_web["folder"]
    browser = folder / "browser.sh"
    from testweb.moto import free_port

    browser.write_text(BROWSER.replace("{port}", str(free_port("127.0.0.1"))))  # a port nobody listens on
    browser.chmod(0o755)
    env = {k: v for k, v in doc_web["env"].items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "XDG_CURRENT_DESKTOP")}
    env["BROWSER"] = str(browser)
    (folder / "opened.html").unlink(missing_ok=True)
    (_, report, _), (_, opened, _) = run_script(one(REPORT_OPEN).text, folder, env)
    assert report == opened == 0
    dom = (folder / "opened.html").read_text()
    assert "<table" in dom and "data:image/png" in dom  # the report's page, as chromium built it
    (folder / "docs" / "img").mkdir(parents=True, exist_ok=True)
    (_, cropped, _), = run_script(one(CROP).text, folder, env)
    assert cropped == 0
    with Image.open(folder / "docs" / "img" / "report-desktop.png") as picture:
        assert picture.size == (1280, 600) and picture.mode == "P" and len(picture.getcolors()) <= 32


@pytest.mark.web
def test_the_cluster_commands_crawl_on_a_local_dask_cluster_and_s3(doc_web, s3_env, tmp_path):
    """cluster.md's lines: the extra found installed; a scheduler and a worker on loopback (each
    with the AWS settings of moto's S3 in its environment), stopped at the end; inject and one
    cycle into ``s3://my-bucket/crawl`` through them."""
    import boto3

    pytest.importorskip("distributed", reason="the cluster extra: pip install -e '.[cluster]'")
    from distributed import Client

    from testweb.moto import STRAY_AWS_SETTINGS, free_port
    from tests.support.processes import start_watched, stop_all

    boto3.client("s3").create_bucket(Bucket="my-bucket")
    port = free_port("127.0.0.1")
    pip, scheduler, worker, *crawl_lines = script_lines(filled(CLUSTER, pip_offline=PIP_OFFLINE, port=str(port)))
    env = {k: v for k, v in doc_web["env"].items() if k not in STRAY_AWS_SETTINGS and not k.startswith("AWS_")}
    env.update(s3_env)
    pip_offline_check(run_script(pip, ROOT, env))
    (tmp_path / "seeds.txt").write_text((doc_web["folder"] / "seeds.txt").read_text())
    procs = []
    for name, line in (("scheduler", scheduler), ("worker", worker)):
        (tmp_path / name).mkdir()
        procs.append(start_watched(["bash", "-c", "exec " + line], tmp_path / name, env, tmp_path / f"{name}.log", 300))
    before = len(doc_web["web"].requests())
    try:
        with Client(f"tcp://127.0.0.1:{port}", timeout=60) as client:
            client.wait_for_workers(1, timeout=60)
            results = run_script("\n".join(crawl_lines), tmp_path, env)
            tasks = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    finally:
        stop_all(procs)
    assert [code for _, code, _ in results] == [0, 0], results
    assert tasks, "no task ran on the cluster"
    keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket="my-bucket", Prefix="crawl/crawldb/")
            .get("Contents", [])]
    assert any(k.endswith(".parquet") for k in keys), keys
    assert len(doc_web["web"].requests()) > before  # the cluster's cycle asked the web


# --- the real-web test web's own snippets, in its namespace (web, root) ----------------------


