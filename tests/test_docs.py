"""The README and docs/: short enough to read, every link and every command real.

The README was a 1,281-line lab notebook that pointed readers at a command the repository did
not have; these checks keep it a front page: at most 200 lines, links that resolve, and a
command table whose every entry is a command of `crawl` that answers `--help`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cycles.commands.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
TABLE_COMMAND = re.compile(r"^\| `crawl ([a-z]+)(?: ([a-z]+))?")


def _links(path: Path) -> list[str]:
    return [target for target in LINK.findall(path.read_text()) if "://" not in target]


def test_readme_is_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move the detail into docs/"
    # The two commands come first: a fresh machine runs them as written.
    head = "\n".join(lines[:8])
    assert "bash scripts/demo.sh" in head and "bash scripts/test.sh" in head


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_every_relative_link_resolves(path):
    missing = [t for t in _links(path) if not (path.parent / t).exists()]
    assert not missing, f"{path.name} links to files that do not exist: {missing}"


def test_the_link_check_sees_a_broken_link(tmp_path):
    # Positive control: the pattern finds a relative link, and its target's absence shows.
    page = tmp_path / "page.md"
    page.write_text("see [the docs](docs/nowhere.md) and [web](https://example.org/)\n")
    assert _links(page) == ["docs/nowhere.md"]
    assert not (tmp_path / "docs/nowhere.md").exists()


def _table_commands() -> list[tuple[str, ...]]:
    found = []
    for line in README.read_text().splitlines():
        match = TABLE_COMMAND.match(line)
        if match:
            found.append(tuple(word for word in match.groups() if word))
    return found


def test_readme_lists_every_command():
    group = typer.main.get_command(app)
    listed = {words[0] for words in _table_commands()}
    assert listed == set(group.commands), "README's command table and `crawl --help` differ"


@pytest.mark.parametrize("words", _table_commands(), ids=" ".join)
def test_every_listed_command_answers_help(words):
    result = CliRunner().invoke(app, [*words, "--help"])
    assert result.exit_code == 0, result.output
