"""DuckDB and pyarrow sources over a store's Parquet files (local paths or an S3 dataset)."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pyarrow.dataset as ds

from cycles.storage.files import SEGMENTS, StorePath, _observed
from cycles.storage.sql import literals

_source_names = itertools.count()


class Sources:
    """Query sources (a mixin of :class:`cycles.storage.store.Store`)."""

    def dataset(self, paths: list[StorePath], segment_column: bool = False) -> ds.Dataset:
        """A pyarrow dataset over Parquet files (for pyarrow, Polars, or DuckDB on S3).

        With ``segment_column`` the files must lie under ``segments/<id>/``, and the
        dataset gets a ``segment`` column from that folder name.
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
            quoted = literals(paths)
            if segment_column:
                return (f"(SELECT * EXCLUDE (filename), split_part(filename, '/', -3) AS segment "
                        f"FROM read_parquet({quoted}, filename = true))")
            return f"read_parquet({quoted})"
        name = f"store_source_{next(_source_names)}"
        con.register(name, self.dataset(paths, segment_column))
        return name

