"""The one way SQL text is built: DuckDB parameters for values, these helpers for the rest.

Values go to DuckDB as ``?`` parameters wherever it takes them (``con.execute(sql, [value])``).
Some places cannot take a parameter: a file list inside ``read_parquet([...])``, a ``CREATE VIEW``
body, a column or table name. Those, and only those, are spelled with the helpers below, so a
quote in a path or a name never ends a string early (the failure: a store under ``/data/o'brien``
made every query a syntax error; a URL pattern with ``'`` could change the query).
"""
from __future__ import annotations

from collections.abc import Iterable
from os import PathLike


def literal(text: str | PathLike) -> str:
    """A SQL string literal: ``'...'`` with every ``'`` doubled (SQL-92 §5.3)."""
    return "'" + str(text).replace("'", "''") + "'"


def literals(texts: Iterable[str | PathLike]) -> str:
    """A SQL list of string literals, ``['a', 'b']``: the form ``read_parquet`` takes for files."""
    return "[" + ", ".join(literal(t) for t in texts) + "]"


def ident(name: str) -> str:
    """A quoted SQL identifier: ``"..."`` with every ``"`` doubled, for column and table names."""
    return '"' + str(name).replace('"', '""') + '"'
