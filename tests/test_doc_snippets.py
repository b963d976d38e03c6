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
- the README's real-web quickstart runs unchanged inside the named-host HTTPS web's mount
  namespace, with its DNS server and CA (issue 28; ``web``, root).

A snippet none of these runs carries a marker just above its fence (``<!-- snippet: not run:
REASON -->`` or ``<!-- snippet: run by FILE ... -->``), and the first test checks that every
snippet is either run here or marked, and that every key here still names a snippet.
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

from tests.support.snippets import ROOT, Snippet, all_snippets, snippets_of

SNIPPETS = all_snippets()

README_REAL_WEB = ("README.md", ".venv/bin/crawl inject seeds.txt")
"""The README's "Crawling the real web": run by test_the_readme_quickstart_crawls_the_real_web_namespace."""

TOML = [("docs/crawling.md", "[fetch]"), ("docs/operations.md", "[metrics]")]

BENCH = [("docs/benchmarks.md", ""), ("docs/cluster.md", ".venv/bin/python scripts/bench/"),
         ("docs/real-web-testing.md", ".venv/bin/python scripts/bench/")]
"""Benchmark command lines (every snippet of docs/benchmarks.md)."""

SEGMENT_IDS = ("20261129T223500123456Z-a1b2c3", "SEGMENT")
"""Segment ids the docs spell out; the web tests put the crawl's newest segment in their place."""

SHELL_RUNS = [("docs/crawling.md", ".venv/bin/crawl inject seeds.txt"), ("docs/data.md", 'crawl sql "SELECT status'),
              ("docs/data.md", 'crawl sql "SELECT host, count(*) n'), ("docs/update.md", "crawl pages --consumer"),
              ("docs/operations-tools.md", "crawl export"), ("docs/archive.md", "crawl export 2026"),
              ("docs/crawling.md", "crawl run --seconds 3600"), ("docs/cluster.md", "crawl rebucket --buckets 64")]
"""Run in this order in one folder: the first crawls the test web, the others read what it wrote."""

S3_RUN = ("docs/data.md", "export AWS_ENDPOINT_URL=http://127.0.0.1:9000")
"""Run whole (its exports hold for the lines after them) against moto's S3 server on that address."""

PYTHON_RUNS = [("docs/data.md", "import cycles"), ("docs/tls.md", "from testweb.harness import TestWeb")]

PRELUDE = {("docs/data.md", "import cycles"): "def index(batch):  # the reader's own indexer\n    print(batch.num_rows)\n"}
"""Names a Python snippet leaves to its reader."""

RUN_HERE = [README_REAL_WEB, *TOML, *BENCH, *SHELL_RUNS, S3_RUN, *PYTHON_RUNS]


def matches(snippet: Snippet, key: tuple[str, str]) -> bool:
    return snippet.doc == key[0] and snippet.key[1].startswith(key[1])


def one(key: tuple[str, str]) -> Snippet:
    found = [s for s in SNIPPETS if matches(s, key)]
    assert len(found) == 1, f"{key} names {len(found)} snippets"
    return found[0]


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
def venv_bin() -> Path:
    return Path(sys.executable).parent


def folder_env(folder: Path, config: Path | None) -> dict[str, str]:
    env = {**os.environ, "PATH": f"{venv_bin()}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(ROOT)}  # testweb, beside the product (tls.md's snippet)
    env.pop("CRAWL_DATA", None)
    if config is not None:
        env["CRAWL_CONFIG"] = str(config)
    return env


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
def quickstart_config(folder: Path) -> Path:
    """crawl.toml as the README says: the repository's copy, with fetch.user_agent and
    fetch.robots_agent set to a crawler's name and contact; and, as the test web lives on
    loopback, loopback allowed (the SSRF guard refuses it by default). Nothing names a host,
    a resolver or a CA."""
    text = (ROOT / "crawl.toml").read_text()
    edits = {'user_agent = "crawlbot/0.1 (+https://example.invalid/crawlbot)"':
             'user_agent = "quickstartbot/1.0 (+https://example.invalid/quickstartbot)"',
             'robots_agent = "crawlbot"': 'robots_agent = "quickstartbot"',
             "allowed_networks = []": 'allowed_networks = ["127.0.0.0/8"]'}
    for old, new in edits.items():
        assert text.count(old) == 1, f"crawl.toml has no single {old!r}"
        text = text.replace(old, new)
    path = folder / "crawl.toml"
    path.write_text(text)
    return path


def wait_until(proc: subprocess.Popen, done, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None and not done():
        time.sleep(1.0)


def updated_segments(folder: Path) -> int:
    return len(list((folder / "data" / "segments").glob("*/_UPDATED*")))


@pytest.mark.web
def test_the_readme_quickstart_crawls_the_real_web_namespace(tmp_path):
    from testweb.namespace import namespace_available
    from testweb.realweb import RealWeb

    if namespace_available() is not None:
        pytest.skip(namespace_available())
    pytest.importorskip("matplotlib", reason="crawl report needs the report extra (.ci/run installs it)")
    if not (venv_bin() / "crawl").exists():
        pytest.skip(f"no crawl command in {venv_bin()}: pip install -e .")
    lines = one(README_REAL_WEB).commands()
    assert [words[:2] for words in lines] == [[".venv/bin/crawl", "inject"], [".venv/bin/crawl", "--config"],
                                              [".venv/bin/crawl", "status"], [".venv/bin/crawl", "report"]]
    (tmp_path / ".venv").symlink_to(venv_bin().parent)
    quickstart_config(tmp_path)
    env = folder_env(tmp_path, None)
    with RealWeb(hosts=12, pages=6, page_bytes=3000, special=False, max_seconds=600) as real:
        bad = real.bad_tls_hosts()
        seeds = real.web.seeds()
        seeds += [real.web.url(name) for name in bad if all(f"//{name}" not in s for s in seeds)]
        seeds += real.failing_urls(1)
        (tmp_path / "seeds.txt").write_text("\n".join(seeds) + "\n")
        results = []
        for number, words in enumerate(lines):
            # Output to files, not pipes: the run's worker processes hold what they inherit.
            out_path, err_path = tmp_path / f"{number}.out", tmp_path / f"{number}.err"
            with open(out_path, "w") as out, open(err_path, "w") as err:
                proc = subprocess.Popen(real.prefix + words, cwd=tmp_path, env=env, stdout=out, stderr=err)
                try:
                    if "run" in words:
                        # An hour as written: stopped by SIGTERM, as an operator stops it, once a cycle is applied.
                        wait_until(proc, lambda: updated_segments(tmp_path) >= 1, 420)
                        proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=300)
                finally:
                    proc.kill()
            results.append((words, proc.returncode, out_path.read_text(), err_path.read_text()))
        requests, queries, handshakes = real.web.requests(), real.dns.queries(), real.web.handshakes()
        names = set(real.web.resolve_map())
        completed_bad = real.completed_to_bad_tls(requests)
    for words, code, out, err in results:
        assert code in ((0, 4) if "run" in words else (0,)) and "Traceback" not in err, (words, err[-3000:])
    assert updated_segments(tmp_path) >= 1
    # What the web saw: its names looked up through its DNS server, robots.txt first, pages over HTTPS.
    asked = {q["name"].rstrip(".").lower() for q in queries}
    assert {url.split("/")[2].split(":")[0] for url in real.web.seeds()} <= asked
    https = [r for r in requests if r.get("scheme") == "https" and r["host"] in names]
    assert any(r["path"] == "/robots.txt" for r in https) and any(r["path"] != "/robots.txt" for r in https)
    # Bad certificates: handshakes were attempted (they could have been accepted), no request completed.
    assert bad and {h.get("sni") for h in handshakes} & set(bad)
    assert completed_bad == 0
    # What was written: the crawl DB knows the pages it fetched, and the report was made.
    import cycles

    crawl = cycles.open(str(tmp_path / "data"))
    fetched = crawl.sql("SELECT count(*) FROM crawldb WHERE status = 'fetched' AND url LIKE 'https://%'").fetchall()
    assert fetched[0][0] >= 1
    assert "fetched" in results[2][2]
    assert (tmp_path / "report" / "index.html").exists()
    shutil.rmtree(tmp_path / "data", ignore_errors=True)
