"""The quarantine table as it stands, read without Spark (the lake page, `make status`, a replay's plan, a repair's
ledger): its current data files and the newest ingest batch it holds, from the table's own metadata in the lake, where
the embedded catalog says it is (jobs/iceberg/embedded.py; a moved lake's metadata read with its old root mapped).
jobs/tables/quarantine_table.py registers a moved lake's table anew, in place.
"""

from __future__ import annotations

import json
from pathlib import Path

from jobs import duck
from jobs.iceberg.catalog import NAMESPACE
from jobs.iceberg.embedded import registered, static_table
from jobs.lake import QUARANTINE, REASON, Lake
from jobs.spark.logs import local_path, sink_batch

# The table property holding the newest ingest batch the table holds (written with each batch's commit).
INGEST_BATCH = "cloudtrail.ingest-batch"


def quarantine_location(lake: Lake) -> str:
    """Where the quarantine table lives in the lake."""
    return str(lake.iceberg_warehouse / NAMESPACE / QUARANTINE)


def quarantine_data_files(lake: Lake) -> list[Path]:
    """The local data files holding the quarantine's rows now: the table's current ones, and the files of an earlier
    release's quarantine folder until a command moves it in."""
    entry = registered(lake, QUARANTINE)
    files = []
    if entry is not None:
        table = static_table(lake, entry)
        if table.current_snapshot() is not None:
            files = [Path(local_path(entry.mapped(task.file.file_path, lake))) for task in table.scan().plan_files()]
    if lake.quarantine.is_dir():
        files += sorted(p for p in lake.quarantine.glob(f"{REASON}=*/*.parquet") if not p.name.startswith(("_", ".")))
    return files


def quarantine_source(lake: Lake) -> str | None:
    """The quarantine's rows as a DuckDB table function (jobs/duck.py), None when it holds none."""
    return duck.files(quarantine_data_files(lake))


def quarantine_batch(lake: Lake) -> int | None:
    """The newest ingest batch the quarantine holds (None: none): the table's, or its folder's while an earlier release's
    is there to move in."""
    entry = registered(lake, QUARANTINE)
    # The table's metadata file (JSON, Iceberg's spec) holds its properties: read as it is, a run with nothing new
    # imports no pyiceberg (and, through it, no pyarrow).
    metadata = json.loads(Path(local_path(entry.mapped(entry.metadata_location, lake))).read_text()) if entry else {}
    value = metadata.get("properties", {}).get(INGEST_BATCH)
    if value is None and lake.quarantine.is_dir():
        return sink_batch(lake.quarantine)
    return None if value is None else int(value)
