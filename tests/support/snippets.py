"""The fenced snippets of README.md and docs/*.md: found, keyed, and their markers read.

A snippet is a fenced block in one of :data:`LANGUAGES`. Its key is its document and its
first line, so a test that runs it fails when the doc's snippet changes under it. A snippet
no test runs carries a marker on the line just before its fence, which the tests check:

    <!-- snippet: not run: the reason (a cluster, the real internet, an hour) -->
    <!-- snippet: run by tests/test_demo.py .ci/run -->

(``run by`` names the files that run its commands: each of them must contain every command.)
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LANGUAGES = ("sh", "bash", "console", "python", "toml")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
MARKER = re.compile(r"^<!-- snippet: (.+?) -->$")


@dataclass(frozen=True)
class Snippet:
    doc: str
    line: int
    language: str
    text: str
    marker: str | None

    @property
    def key(self) -> tuple[str, str]:
        return self.doc, self.text.splitlines()[0].strip()

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    def commands(self) -> list[list[str]]:
        """The shell lines as words, comments dropped (a ``\\`` continuation joins lines); of a
        ``console`` transcript, only its ``$ `` lines (the rest is their output)."""
        joined = self.text.replace("\\\n", " ")
        if self.language == "console":
            joined = "\n".join(line[2:] for line in joined.splitlines() if line.startswith("$ "))
        return [words for words in (shlex.split(line, comments=True) for line in joined.splitlines()) if words]


def documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def snippets_of(path: Path, root: Path = ROOT) -> list[Snippet]:
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        if match.group(1) not in LANGUAGES:
            continue
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.match(before.strip())
        found.append(Snippet(str(path.relative_to(root)), text.count("\n", 0, match.start()) + 1, match.group(1),
                             match.group(2), marker.group(1) if marker else None))
    return found


def all_snippets(root: Path = ROOT) -> list[Snippet]:
    return [s for path in documents(root) for s in snippets_of(path, root)]
