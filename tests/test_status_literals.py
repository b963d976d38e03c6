"""Every crawl DB status the SQL writes or compares with is one of schema.DbStatus.ALL.

The stages write statuses from SQL text (update's transition_sql, dedup's marks, new rows of
inject and update), where a misspelt status would be stored silently and then match no rule.
The SQL is scanned as produced (transition_sql, new_url_rows_sql) and as written in the
modules (comparisons, ``'x' AS status`` / ``AS kind``), with ``{DbStatus.X}`` resolved.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cycles.config import Config
from cycles.tables.crawldb import new_url_rows_sql
from cycles.tables.schema import DbStatus
from cycles.update.dedup import STORED_STATUSES
from cycles.update.update import transition_sql

CYCLES = Path(__file__).resolve().parent.parent / "cycles"


def status_expression(sql: str) -> str:
    """The expression of transition_sql's ``... AS status`` item."""
    end = sql.index(" AS status,")
    start = sql.rindex(" AS ", 0, end) if " AS " in sql[:end] else 0
    return sql[start:end]


def written_literals(expression: str) -> set[str]:
    """Quoted words a CASE expression can produce (after THEN or ELSE)."""
    return set(re.findall(r"\b(?:THEN|ELSE)\s+'([^']*)'", expression))


@pytest.mark.parametrize("schedule", ["adaptive", "fixed", "optimal"])
def test_transition_sql_writes_only_known_statuses(schedule):
    config = Config()
    config.update.schedule = schedule
    config.update.news_like_hosts = ["news.example"]
    written = written_literals(status_expression(transition_sql(config)))
    # Found at all: the scan must see the statuses, or the test proves nothing.
    assert {"fetched", "not_modified", "redirected", "gone", "dead", "error", "blocked"} <= written
    assert written <= set(DbStatus.ALL), written - set(DbStatus.ALL)


def test_new_rows_are_unfetched():
    assert re.findall(r"'([^']*)' AS status\b", new_url_rows_sql("src", Config())) == [DbStatus.UNFETCHED]


def resolved(text: str) -> str:
    """Module source with ``{literal(DbStatus.X)}`` (cycles/storage/sql.py) and ``{DbStatus.X}`` /
    ``{S.X}`` / ``{schema.DbStatus.X}`` replaced by their value (quoted, and as is)."""
    text = re.sub(r"\{literal\((?:schema\.DbStatus|DbStatus|S)\.([A-Z_]+)\)\}",
                  lambda m: "'" + getattr(DbStatus, m.group(1)) + "'", text)
    return re.sub(r"\{(?:schema\.DbStatus|DbStatus|S)\.([A-Z_]+)\}", lambda m: getattr(DbStatus, m.group(1)), text)


def status_literals_in(text: str) -> set[str]:
    """Statuses named in SQL text: assigned (``'x' AS status``, dedup's ``'x' AS kind``, which
    update stores as the status) or compared (``status = 'x'``, ``status IN ('x', ...)``)."""
    found = set(re.findall(r"'(\w+)' AS (?:status|kind)\b", text))
    found |= set(re.findall(r"\bstatus\s*(?:=|<>|!=)\s*'(\w+)'", text))
    for listed in re.findall(r"\bstatus\s+(?:NOT\s+)?IN\s*\(([^)]*)\)", text):
        found |= set(re.findall(r"'(\w+)'", listed))
    return found


def test_status_literals_in_the_modules_are_known():
    seen: dict[str, set[str]] = {}
    for path in sorted(CYCLES.rglob("*.py")):
        if "testweb" in path.parts:
            continue
        text = resolved(path.read_text())
        text = text.replace("{STORED_STATUSES}", STORED_STATUSES)
        literals = status_literals_in(text)
        if literals:
            seen[str(path.relative_to(CYCLES))] = literals
    unknown = {path: sorted(lits - set(DbStatus.ALL)) for path, lits in seen.items() if lits - set(DbStatus.ALL)}
    assert not unknown
    # The scan sees the places that write statuses (or it proves nothing).
    assert {"duplicate", "near_duplicate"} <= seen["update/dedup.py"]
    assert "dead" in seen["commands/status.py"]


def test_the_scan_catches_a_misspelt_status():
    assert status_literals_in("SELECT 'fetchd' AS status") == {"fetchd"}
    assert status_literals_in("WHERE db.status IN ('fetched', 'gonne')") == {"fetched", "gonne"}
    assert written_literals("CASE WHEN x THEN 'fetched' ELSE 'eror' END") == {"fetched", "eror"}
