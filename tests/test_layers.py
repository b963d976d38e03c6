"""The layers of cycles/ (docs/architecture.md): the import-linter contracts in pyproject.toml
hold, and no module of cycles/ imports itself back through others (no import circle).

commands > stages (generate, fetch, update, archive; none imports another) > metrics > tables
> storage, and the shared utilities at the top of cycles/ import none of them. Imports inside
functions and under TYPE_CHECKING count (import-linter's and grimp's default).

Both checks run in a child Python on a source tree given by path: the repository's, and a
copy with deliberately wrong imports (the positive control: the same check does fail). The
child drops the editable install's finder, so that ``cycles`` is the tree given, not the checkout.
"""

from __future__ import annotations

import re
import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHECK = r"""
import contextlib, importlib.util, io, json, sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
root, config = sys.argv[1], sys.argv[2]
sys.path.insert(0, root)
import grimp
from importlinter.cli import lint_imports

out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = lint_imports(config_filename=config, no_cache=True, no_logo=True)

graph = grimp.build_graph("cycles")
edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
index, low, stack, on_stack, circles = {}, {}, [], set(), []
sys.setrecursionlimit(10_000)
def visit(v):  # Tarjan's strongly connected components: a component of two or more is a circle
    index[v] = low[v] = len(index); stack.append(v); on_stack.add(v)
    for w in edges[v]:
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on_stack:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        part = []
        while True:
            w = stack.pop(); on_stack.discard(w); part.append(w)
            if w == v:
                break
        if len(part) > 1:
            circles.append(sorted(part))
for m in sorted(edges):
    if m not in index:
        visit(m)
print(json.dumps({"code": code, "report": out.getvalue(), "circles": circles,
                  "cycles_file": importlib.util.find_spec("cycles").origin}))
"""


def check(root: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", CHECK, str(root), str(root / "pyproject.toml")],
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(result["cycles_file"]).resolve() == (root / "cycles" / "__init__.py").resolve()  # the tree given
    return result


def test_layer_contracts_hold_and_no_import_circle():
    result = check(REPO)
    assert result["code"] == 0, result["report"]
    assert "4 kept, 0 broken" in result["report"], result["report"]
    assert result["circles"] == []


def test_a_wrong_import_breaks_the_contracts(tmp_path):
    """Positive control: a copy of cycles/ with three wrong imports, each inside a function."""
    shutil.copytree(REPO / "cycles", tmp_path / "cycles", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    wrong = {
        "cycles/storage/store.py": "from cycles.tables import segment  # storage importing a table (and a circle)",
        "cycles/fetch/discovery.py": "from cycles.update import dedup  # one stage importing another",
        "cycles/config.py": "from cycles.storage import store  # a shared utility importing a layer",
    }
    for path, line in wrong.items():
        with open(tmp_path / path, "a") as f:
            f.write(f"\n\ndef _deliberately_wrong():\n    {line}\n")

    result = check(tmp_path)
    report = result["report"]
    assert result["code"] == 1, report
    assert "0 kept, 4 broken" in report, report
    assert "cycles.storage.store -> cycles.tables.segment" in report
    assert "cycles.fetch.discovery -> cycles.update.dedup" in report
    assert "cycles.config -> cycles.storage.store" in report
    assert any({"cycles.storage.store", "cycles.tables.segment"} <= set(circle) for circle in result["circles"])


TESTS = Path(__file__).resolve().parent


def test_no_test_module_imports_another():
    """Shared fixtures live in conftest.py and helpers in tests/support/, never in a test
    module another one imports (issue 25: a module's fixtures then ran in the importer too)."""
    pattern = re.compile(r"^\s*(?:from|import)\s+tests\.(?:[\w.]*\.)?test_\w+", re.M)
    offenders = [str(p.relative_to(TESTS)) for p in sorted(TESTS.rglob("test_*.py")) if pattern.search(p.read_text())]
    assert offenders == []
    assert pattern.search("from tests.update.test_dedup import x")  # the pattern catches one (positive control)
