"""The lake's Parquet tables read in place with DuckDB, no Spark: the lake page and `make status` ask through here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobs.storage import LakePath


def files(paths: Sequence[LakePath]) -> str | None:
    """A DuckDB table function over these Parquet files, a partition column in the path (`reason=R/`) or in the file; None
    when there are none."""
    listed = [str(path) for path in paths]
    return f"read_parquet({listed!r}, hive_partitioning = true, union_by_name = true)" if listed else None


def connect() -> Any:
    import duckdb  # imported on first use: the plugin module loads in every Airflow process

    db = duckdb.connect()
    db.execute("SET enable_progress_bar = false")  # a slow query's bar would go into the server's log
    return db
