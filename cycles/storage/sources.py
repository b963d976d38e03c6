"""DuckDB and pyarrow sources over a store's Parquet files (local paths or an S3 dataset)."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pyarrow.dataset as ds

from cycles.storage.files import SEGMENTS, StorePath, _observed
from cycles.storage.parquet import RENAMED_COLUMNS, file_renames
from cycles.storage.sql import ident, literals

_source_names = itertools.count()


class Sources:
    """Query sources (a mixin of :class:`cycles.storage.store.Store`)."""

    def dataset(self, paths: list[StorePath], segment_column: bool = False) -> ds.Dataset:
        """A pyarrow dataset over Parquet files (for pyarrow, Polars, or DuckDB on S3).

        With ``segment_column`` the files must lie under ``segments/<id>/``, and the
        dataset gets a ``segment`` column from that folder name. Its schema is the first file's.
        """
        for path in paths:
            _observed("GET", path)  # at most the whole file: a query reads only its columns
        extra = {}
        if segment_column:
            extra = dict(partitioning=ds.DirectoryPartitioning(pa.schema([("segment", pa.string())])),
                         partition_base_dir=str(self.path(SEGMENTS)))
        return ds.dataset([str(p) for p in paths], filesystem=self.fs, format="parquet", **extra)

    def duckdb_source(self, con, paths: list[StorePath], segment_column: bool = False) -> str:
        """SQL table expression reading these Parquet files in DuckDB.

        Locally DuckDB reads the files itself; on S3 they are read through a pyarrow dataset
        registered on ``con`` (DuckDB's own S3 support would need an extension download).
        """
        if not paths:
            raise ValueError("duckdb_source needs at least one file")
        if self.local:
            for path in paths:
                _observed("GET", path)  # at most the whole file: a query reads only its columns
            if segment_column:
                return (f"(SELECT * EXCLUDE (filename), split_part(filename, '/', -3) AS segment "
                        f"FROM {parquet_sql(paths, ', filename = true')})")
            return parquet_sql(paths)
        name = f"store_source_{next(_source_names)}"
        dataset = self.dataset(paths, segment_column)
        schema, pairs = schema_with_both_names(dataset.schema)
        if not pairs:
            con.register(name, dataset)
            return name
        # The dataset takes its first file's schema: a file with a renamed column's other name
        # would read nulls there. With both names, each file fills its own; they are merged.
        con.register(name, dataset.replace_schema(schema))
        merged = ", ".join(f"coalesce({ident(new)}, {ident(old)}) AS {ident(new)}" for old, new in pairs)
        return f"(SELECT * EXCLUDE ({', '.join(ident(old) for old, _ in pairs)}) REPLACE ({merged}) FROM {name})"


def schema_with_both_names(schema: pa.Schema) -> tuple[pa.Schema, list[tuple[str, str]]]:
    """``schema`` with each renamed column (cycles/storage/parquet.py ``RENAMED_COLUMNS``) under
    both its old and new name, and the (old, new) pairs added (none: ``schema`` as it was)."""
    pairs = [(old, new) for old, new in RENAMED_COLUMNS.items() if (old in schema.names) != (new in schema.names)]
    for old, new in pairs:
        present = schema.field(old if old in schema.names else new)
        schema = schema.append(present.with_name(new if old in schema.names else old))
    return schema, pairs



def parquet_sql(files: list, options: str = "") -> str:
    """``read_parquet([files]{options})``, with columns renamed since a file was written under
    their new names (cycles/storage/parquet.py ``RENAMED_COLUMNS``): the files are grouped by
    the renames they need, each group renamed, the groups unioned by name. Without old files
    (the usual case) it is the plain ``read_parquet``."""
    groups: dict[tuple[tuple[str, str], ...], list] = {}
    for file in files:
        groups.setdefault(file_renames(str(file)), []).append(file)
    parts = []
    for renames, group in groups.items():
        part = f"read_parquet({literals(group)}{options})"
        if renames:
            renamed = ", ".join(f"{ident(old)} AS {ident(new)}" for old, new in renames)
            part = f"(SELECT * RENAME ({renamed}) FROM {part})"
        parts.append(part)
    if len(parts) == 1:
        return parts[0]
    return "(" + " UNION ALL BY NAME ".join(f"SELECT * FROM {p}" for p in parts) + ")"
