"""The quarantine table as it stands, read without Spark (the lake page, `make status`, a replay's plan, a repair's
ledger): its current data files and the newest ingest batch it holds (jobs/tables/record_files.py), and an earlier
release's quarantine folder until a command moves it in (jobs/tables/quarantine_table.py).
"""

from __future__ import annotations

from jobs import duck
from jobs.lake import QUARANTINE, REASON, Lake
from jobs.spark.logs import sink_batch
from jobs.storage import LakePath
from jobs.tables.record_files import record_files, record_location, table_batch


def quarantine_location(lake: Lake) -> str:
    """Where the quarantine table lives in the lake."""
    return record_location(lake, QUARANTINE)


def quarantine_data_files(lake: Lake) -> list[LakePath]:
    """The local data files holding the quarantine's rows now: the table's current ones, and the files of an earlier
    release's quarantine folder until a command moves it in."""
    files = [path for paths in record_files(lake, QUARANTINE).values() for path in paths]
    if lake.quarantine.is_dir():
        files += sorted(p for p in lake.quarantine.glob(f"{REASON}=*/*.parquet") if not p.name.startswith(("_", ".")))
    return files


def quarantine_source(lake: Lake) -> str | None:
    """The quarantine's rows as a DuckDB table function (jobs/duck.py), None when it holds none."""
    return duck.files(quarantine_data_files(lake))


def quarantine_batch(lake: Lake) -> int | None:
    """The newest ingest batch the quarantine holds (None: none): the table's, or its folder's while an earlier release's
    is there to move in."""
    held = table_batch(lake, QUARANTINE)
    return sink_batch(lake.quarantine) if held is None and lake.quarantine.is_dir() else held
