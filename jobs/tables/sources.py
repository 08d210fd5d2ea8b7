"""Which landing files a table's rows came from, read from its data files' source column (pyarrow, no Spark): a
rebuild's plan and a repair ask here."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from jobs import storage
from jobs.lake import QUARANTINE
from jobs.spark.logs import local_path
from jobs.storage import LakePath

# The column that names a row's landing file, per table.
SOURCE_COLUMN = {QUARANTINE: "source_file"}


DEFAULT_SOURCE_COLUMN = "_source_file"


# The column that names the run that wrote a row, in both tables.
RUN_COLUMN = "_ingest_run_id"


def landing_files(table: str, files: Iterable[LakePath], runs: frozenset[str] | None = None) -> set[str]:
    """The landing files (local paths) that the rows of a table's data `files` came from (with `runs`: their rows
    those runs wrote)."""
    column = SOURCE_COLUMN.get(table, DEFAULT_SOURCE_COLUMN)
    found: set[str] = set()
    for path in files:
        rows = storage.read_parquet(path, [column] if runs is None else [column, RUN_COLUMN])
        if runs is not None:
            rows = rows.filter(pc.is_in(rows[RUN_COLUMN], value_set=pa.array(sorted(runs), pa.string())))
        found.update(local_path(v) for v in rows.column(column).unique().to_pylist() if v)
    return found
