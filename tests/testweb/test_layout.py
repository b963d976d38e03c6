"""The test web is tooling beside the product: the product never imports it, and its own
modules import one another one way only, never another module's private names."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def runtime_imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) of every import outside an ``if TYPE_CHECKING:`` block."""
    tree = ast.parse(path.read_text())
    skipped = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
               and getattr(block.test, "id", "") == "TYPE_CHECKING" for node in ast.walk(block)}
    out = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
    return out


def test_no_product_module_imports_the_test_web():
    offenders = [f"{path.relative_to(ROOT)}: {module}"
                 for path in sorted((ROOT / "cycles").rglob("*.py"))
                 for module, _ in runtime_imports(path) if module.split(".")[0] == "testweb"]
    assert offenders == []
    assert not (ROOT / "cycles" / "testweb").exists()


def test_testweb_modules_import_no_private_names():
    offenders = [f"{path.name}: {module}.{name}"
                 for path in sorted((ROOT / "testweb").glob("*.py"))
                 for module, names in runtime_imports(path) if module.startswith("testweb")
                 for name in names if name.startswith("_")]
    assert offenders == []


def test_testweb_imports_have_no_circle():
    graph = {path.stem: {module.split(".")[1] for module, _ in runtime_imports(path)
                         if module.startswith("testweb.")}
             for path in (ROOT / "testweb").glob("*.py")}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, "import circle: " + " -> ".join(path + (module,))
        if module in done:
            return
        for nxt in graph.get(module, ()):
            visit(nxt, path + (module,))
        done.add(module)

    for module in graph:
        visit(module, ())
