"""scripts/: at most 8 entry points, each answering --help; the benchmark modules behind them are
reached by the dispatchers, never through sys.path from one script into another (issue 25);
the files generated from code are up to date."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
BENCH = SCRIPTS / "bench"

ENTRY_POINTS = ["scripts/setup.sh", "scripts/test.sh", "scripts/demo.sh", "scripts/regenerate.py",
                "scripts/bench/web.py", "scripts/bench/scale.py", "scripts/bench/cluster.py"]
MODULE_OF = {"scripts/demo.py": "scripts/demo.sh"}
"""A module one entry point runs as its body."""
HELPERS = {"benchlib.py": "shared by every benchmark", "bench_realweb.py": "--real-web of fetch and crawl",
           "scrapy_peer.py": "the peer crawler fetch and crawl start as a subprocess"}


def test_at_most_eight_entry_points_and_every_file_is_one_or_belongs_to_one():
    assert len(ENTRY_POINTS) <= 8
    top = {str(p.relative_to(ROOT)) for p in SCRIPTS.iterdir() if p.is_file()}
    assert top == {e for e in ENTRY_POINTS if e.count("/") == 1} | set(MODULE_OF)
    assert {p.name for p in SCRIPTS.iterdir() if p.is_dir() and p.name != "__pycache__"} == {"bench", "generated"}


def _dispatched() -> set[str]:
    """The modules the benchmark entry points' COMMANDS name."""
    names = set()
    for entry in ("web.py", "scale.py", "cluster.py"):
        tree = ast.parse((BENCH / entry).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COMMANDS":
                names |= {f"{v.elts[0].value}.py" for v in node.value.values}
    return names


def test_every_benchmark_module_is_a_subcommand_or_a_helper():
    modules = {p.name for p in BENCH.glob("*.py")} - {"web.py", "scale.py", "cluster.py"}
    dispatched = _dispatched()
    assert len(dispatched) >= 15  # positive control: the parse found the COMMANDS tables
    assert modules == dispatched | set(HELPERS), modules ^ (dispatched | set(HELPERS))


def test_no_script_reaches_into_another_through_sys_path():
    # sys.path may get the repository root (testweb/ and cycles/ beside the scripts), never scripts/.
    offenders = []
    for path in SCRIPTS.rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "sys.path.insert" in line or "sys.path.append" in line:
                if '"scripts"' in line or "resolve().parent)" in line:
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_answers_help(entry):
    command = (["bash", entry] if entry.endswith(".sh") else [sys.executable, entry]) + ["--help"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower(), done.stdout


def test_a_benchmark_subcommand_answers_its_own_help_and_a_wrong_one_is_refused():
    own = subprocess.run([sys.executable, "scripts/bench/scale.py", "plan", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert own.returncode == 0 and "--buckets" in own.stdout and "scale.py plan" in own.stdout
    wrong = subprocess.run([sys.executable, "scripts/bench/scale.py", "nosuch"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2 and "invalid choice" in wrong.stderr


def test_the_generated_files_are_what_the_code_writes():
    done = subprocess.run([sys.executable, "scripts/regenerate.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_generated_check_sees_a_stale_file(tmp_path, monkeypatch):
    # Positive control: --check fails, naming the file, when the text differs.
    sys.path.insert(0, str(SCRIPTS))
    try:
        import regenerate
        from generated import crawl_toml
    finally:
        sys.path.remove(str(SCRIPTS))
    stale = tmp_path / "crawl.toml"
    stale.write_text("# an old copy\n")
    monkeypatch.setattr(crawl_toml, "OUT", stale)
    monkeypatch.setattr(crawl_toml, "REPO", tmp_path)
    assert regenerate.main(["--check", "config"]) == 1
    assert regenerate.main(["config"]) == 0 and stale.read_text() == crawl_toml.text()
