"""One way to build SQL (issue 25): values go to DuckDB as ``?`` parameters, file lists, view
bodies and identifiers through cycles/storage/sql.py (literal, literals, ident). Nothing else
in cycles/ puts quotes around a value by hand: a quote inside a path, a host or a URL pattern
would end the string early (a syntax error at best, a changed query at worst).

The check reads the source: it flags ``.replace("'", "''")``, a value interpolated between
single quotes (``'{...}'``) and a quote glued on with ``+``. The positive control runs the
same check on lines that do quote by hand.
"""

from __future__ import annotations

import re
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent
CYCLES = REPO / "cycles"

HAND_QUOTING = re.compile(r"""replace\(\s*"'",\s*"''"\s*\)"""  # doubling quotes by hand
                          r"""|(?<![fr])'\{[^{}]+\}'"""            # '{value}' in an f-string (not f'{x}' itself)
                          r"""|"'"\s*\+|\+\s*"'\"""")            # "'" + value + "'"

CONVERTED = ["storage", "tables", "commands", "archive", "metrics.py", "urls.py", "config.py"]
"""The parts of cycles/ converted so far; the stages generate, fetch and update by their own
changes (issue 25), after which the whole tree is checked (test_no_hand_quoting_anywhere)."""


def hand_quoting(paths: list[Path]) -> list[str]:
    """``name:line: text`` of each line of ``paths`` that quotes a SQL value by hand."""
    found = []
    for path in paths:
        if path.name == "sql.py" and path.parent.name == "storage":
            continue  # the one home of quoting
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if HAND_QUOTING.search(line):
                found.append(f"{path.name}:{number}: {line.strip()}")
    return found


def sources(*parts: str) -> list[Path]:
    paths = []
    for part in parts:
        target = CYCLES / part
        paths += sorted(target.rglob("*.py")) if target.is_dir() else [target]
    return paths


def test_check_finds_hand_quoting(tmp_path):
    """Positive control: each form of hand quoting is found, the helpers' forms are not."""
    sample = tmp_path / "sample.py"
    sample.write_text("\n".join([
        """con.sql("SELECT * FROM t WHERE url = '" + url.replace("'", "''") + "'")""",
        """con.sql(f"SET temp_directory = '{spill}'")""",
        """con.sql(f"SET temp_directory = {literal(spill)}")""",
        """con.execute("SELECT * FROM t WHERE url = ?", [url])""",
        """print(f"utilisation {'?' if ratio is None else f'{ratio:.0%}'}")""",
    ]))
    assert [line.split(":")[1] for line in hand_quoting([sample])] == ["1", "2"]


def test_no_hand_quoting_in_converted_layers():
    assert hand_quoting(sources(*CONVERTED)) == []


def test_no_hand_quoting_anywhere():
    assert hand_quoting(sorted(CYCLES.rglob("*.py"))) == []
