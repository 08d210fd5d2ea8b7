"""The lake's Parquet tables read in place with DuckDB, no Spark: the lake page and `make status` ask through here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobs import storage
from jobs.storage import LakePath


def files(paths: Sequence[LakePath]) -> str | None:
    """A DuckDB table function over these Parquet files, a partition column in the path (`reason=R/`) or in the file; None
    when there are none."""
    listed = [str(path) for path in paths]
    return f"read_parquet({listed!r}, hive_partitioning = true, union_by_name = true)" if listed else None


def connect(lake_root: LakePath | None = None) -> Any:
    """A connection whose queries may read the files of the lake at `lake_root` (`reading`)."""
    import duckdb  # imported on first use: the plugin module loads in every Airflow process

    db = duckdb.connect()
    db.execute("SET enable_progress_bar = false")  # a slow query's bar would go into the server's log
    return db if lake_root is None else reading(db, lake_root)


def reading(db: Any, location: LakePath | str) -> Any:
    """`db`, its queries able to read the files at `location`: in object storage through the lake's own file system
    (s3fs, the AWS conventions' endpoint and region), since DuckDB's S3 reader is an extension it would download at the
    first s3:// path (and this machine may reach no such host)."""
    place = storage.at(location)
    if not storage.is_folder(place) and "s3" not in db.list_filesystems():
        db.register_filesystem(place.fs)
    return db
