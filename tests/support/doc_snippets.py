"""The registry of README.md's and docs/' snippets the doc tests run, and how they run them.

tests/test_doc_snippets.py (the snippets run on a crawl of a small test web, and the check
that every snippet is run or marked) and tests/test_doc_snippets_alone.py (the snippets that
need a web or a store of their own: the README's real-web quickstart, the real-web test web's
own lines, the incremental figures) share these keys and helpers. They are two modules so
that the two halves run on two pytest workers (``--dist loadfile`` keeps a module on one).

A snippet's key is its document and the start of its first line (tests/support/snippets.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.snippets import ROOT, Snippet, all_snippets

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

REALWEB_PY = ("docs/real-web-testing.md", "import subprocess, sys")
REALWEB_SH = ("docs/real-web-testing.md", "sudo .venv/bin/python -m testweb realweb")
GENERATE_FIGURES = ("docs/incremental.md", ".venv/bin/python scripts/bench/scale.py scale --src /tmp/gen24/")
INCREMENTAL_FIGURES = ("docs/incremental.md", "# once: the code before and after")
SAME_SEGMENT = ("docs/incremental.md",
                ".venv/bin/python scripts/bench/scale.py scale --sizes 10M --top-n-pct 1 --links-per-page")
PAGE_CHECK_FIGURES = ("docs/incremental.md", "# /tmp/idx24/seg/10M: the compacted 10 M store")
PAGE_CHECK_AB = ("docs/incremental.md", "mkdir -p /tmp/crc24/ab-after")
GENERATE_PROFILE = ("docs/incremental.md", "mkdir -p /tmp/crc24/prof")
GENERATE_PROFILE_NOW = ("docs/incremental.md", "mkdir -p /tmp/seen24/prof")
CLUSTER = ("docs/cluster.md", "pip install -e '.[cluster]'")
REPORT_OPEN = ("docs/operations-tools.md", "crawl report --out report/")
CROP = ("docs/operations-tools.md", '.venv/bin/python -c "from PIL import Image')
TRANSCRIPT = ("docs/operations.md", "$ crawl generate --json")
OPERATING = ("docs/operations.md", "export CRAWL_DATA=/srv/crawl/data")
REPORT_INSTALL = ("docs/operations.md", "pip install -e '.[report]'")
NODE_EXPORTER = ("docs/operations.md", "node_exporter --collector.textfile.directory")
REPLAY = ("docs/archive.md", "mkdir -p replay/collections/crawl/archive")
EXTRACT = ("docs/archive.md", ".venv/bin/warcio extract")

FILLED = {
    EXTRACT: {"<id>": "{segment}", "<file>": "{warc_stem}", "<offset>": "{offset}",
              "$((offset + 1))": "$(({offset} + 1))", "<warc_filename>": "{warc_filename}", "<length>": "{length}"},
    REPLAY: {"--port 8080": "--port {port}", "http://127.0.0.1:8080/crawl/*/http://h1.web.test:PORT/p/0.html":
             "http://127.0.0.1:{port}/crawl/*/{url}"},
    OPERATING: {"/srv/crawl/data": "{folder}/data", "/srv/crawl/crawl.toml": "{config}"},
    NODE_EXPORTER: {"node_exporter": "{node_exporter} --web.listen-address=127.0.0.1:{port}",
                    "/srv/crawl/data": "{folder}/data"},
    REPORT_INSTALL: {"pip install -e '.[report]'": "{pip_offline} 'crawl[report]'"},
    CLUSTER: {"pip install -e '.[cluster]'": "{pip_offline} 'crawl[cluster]'",
              "--port 8786": "--host 127.0.0.1 --port {port} --no-dashboard",
              "tcp://scheduler:8786": "tcp://127.0.0.1:{port}",
              "--nthreads 1": "--nthreads 1 --host 127.0.0.1 --no-dashboard", "cycle --cycles 10": "cycle --cycles 1"},
    GENERATE_FIGURES: {"/tmp/gen24/c10M": "{built}", "/tmp/gen24": "{tmp}", "<before|after>": "after",
                       "<100000|1000000>": "1000"},
    INCREMENTAL_FIGURES: {"/tmp/incr24": "{tmp}", "27deee5": "HEAD", "<before|after>": "after",
                          "--sizes 1M": "--sizes 2K", "--sizes 10M": "--sizes 2K"},
    SAME_SEGMENT: {"--sizes 10M": "--sizes 2K", "--sizes 100M": "--sizes 2K",
                   "--built DIR": "--built {tmp}/built --root {tmp}/run"},
    PAGE_CHECK_FIGURES: {"/tmp/idx24/seg/10M": "{store}"},
    PAGE_CHECK_AB: {"/tmp/idx24/seg/10M": "{store}", "/tmp/crc24": "{tmp}", "/10M": "/2K", "--top-n 100000": "--top-n 200"},
    GENERATE_PROFILE: {"/tmp/idx24/seg/10M": "{store}", "/tmp/crc24": "{tmp}", "/10M": "/2K",
                       "--top-n 100000": "--top-n 200"},
    GENERATE_PROFILE_NOW: {"/tmp/idx24/seg/10M": "{store}", "/tmp/seen24": "{tmp}", "/10M": "/2K",
                           "--top-n 100000": "--top-n 200", "2026-12-07T17:00:00": "2100-01-01T00:00:00"},
    REALWEB_PY: {"hosts=300": "hosts=8", '"60"': '"15"'},
    REALWEB_SH: {"sudo ": "", "--hosts 300": "--hosts 8 --pages 5", "--seconds 60": "--seconds 15"},
}
"""The snippets run with placeholders filled: each ``{name}`` is a value of the test's own run
(a record's file and offset, a free loopback port, the test's folder for ``/srv/crawl``), a big
size is a tiny one, and a server binds loopback. ``pip install -e '.[extra]'`` runs offline on
the installed checkout (``{pip_offline} 'crawl[extra]'``: no packet leaves, and pip must find
every requirement of the extra installed); ``sudo`` is dropped (the test runs as root); the
commit of "before" (27deee5, 95fdec0) is this checkout: the figures' code is history, the
commands are not. Every placeholder must still be in its snippet."""

RUN_FILLED = list(FILLED) + [REPORT_OPEN, CROP, TRANSCRIPT]

RUN_HERE = [README_REAL_WEB, *TOML, *BENCH, *SHELL_RUNS, S3_RUN, *PYTHON_RUNS, *RUN_FILLED]




def matches(snippet: Snippet, key: tuple[str, str]) -> bool:
    return snippet.doc == key[0] and snippet.key[1].startswith(key[1])


def one(key: tuple[str, str]) -> Snippet:
    found = [s for s in SNIPPETS if matches(s, key)]
    assert len(found) == 1, f"{key} names {len(found)} snippets"
    return found[0]


def venv_bin() -> Path:
    return Path(sys.executable).parent


def folder_env(folder: Path, config: Path | None) -> dict[str, str]:
    env = {**os.environ, "PATH": f"{venv_bin()}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(ROOT)}  # testweb, beside the product (tls.md's snippet)
    env.pop("CRAWL_DATA", None)
    if config is not None:
        env["CRAWL_CONFIG"] = str(config)
    return env


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


def filled(key: tuple[str, str], **values: str) -> str:
    """The snippet with each placeholder of :data:`FILLED` replaced by its value in this run."""
    text = one(key).text
    for old, new in FILLED[key].items():
        assert old in text, f"{key[0]}: the snippet no longer holds {old!r}"
        text = text.replace(old, new.format(**values))
    return text


PIP_OFFLINE = "pip install --no-index --dry-run"
"""``pip install`` with no index: it must find every requirement installed (no packet leaves)."""


def script_lines(text: str) -> list[str]:
    """The commands of a shell snippet: a ``\\`` continuation or an open quote goes on to the next line."""
    import shlex

    commands, pending = [], ""
    for line in text.replace("\\\n", " ").splitlines():
        pending = f"{pending}\n{line}" if pending else line
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # a quote still open
            continue
        if pending.strip() and not pending.lstrip().startswith("#"):
            commands.append(pending)
        pending = ""
    return commands


def run_script(text: str, cwd: Path, env: dict[str, str]) -> list[tuple[str, int, str]]:
    """The lines of ``text`` in one bash (an ``export`` holds for the lines after it); each line's
    (line, exit code, stdout). Stderr must hold no traceback."""
    lines = script_lines(text)
    body = "".join(f"{line}\nprintf '\\n@@ %s\\n' $?\n" for line in lines)
    done = subprocess.run(["bash", "-c", body], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    outs, codes, rest = [], [], done.stdout
    for line in lines:
        out, _, rest = rest.partition("\n@@ ")
        code, _, rest = rest.partition("\n")
        assert code.isdigit(), (line, done.stdout[-2000:], done.stderr[-2000:])  # bash stopped before it
        outs.append(out)
        codes.append(int(code))
    assert len(codes) == len(lines), (done.stdout[-2000:], done.stderr[-2000:])
    return list(zip(lines, codes, outs))


def require_namespace() -> None:
    from testweb.namespace import namespace_available

    if namespace_available() is not None:
        pytest.skip(namespace_available())


def fetched_https(folder: Path) -> int:
    """Pages the crawl fetched over HTTPS (200), from its segments' committed fetch chunks: a
    15 s run may stop its first fetch before the slow hosts are done, so no update may have run."""
    import duckdb

    chunks = str(folder / "data" / "segments" / "*" / "fetched" / "*.parquet")
    return duckdb.sql("SELECT count(*) FROM read_parquet(?, union_by_name = true) WHERE url LIKE 'https://%' "
                      "AND http_status = 200", params=[chunks]).fetchall()[0][0]
