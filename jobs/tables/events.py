"""The events table as the lake's jobs read it: the event dates it holds, each date's data files and their
fingerprint, its rows by date (Spark) or as a DuckDB source, and the newest ingest batch it holds. Where the table lives
and how its files are found is this module's to know; the gate, the derived jobs, the publish, the lake page, a
rebuild's plan, the compaction, the retention and a repair ask here.

The table of record is the Iceberg table's branch `ingest` (jobs/tables/events_table.py), read from its metadata without
Spark; a lake an earlier release wrote is read from its partition folders until a command registers them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import date
from typing import TYPE_CHECKING, Any

from jobs import duck
from jobs.iceberg.catalog import NAMESPACE
from jobs.lake import EVENTS, Lake, partition, partition_folders, partition_value
from jobs.spark.logs import sink_batch, sink_log
from jobs.storage import LakePath
from jobs.tables.partitions import data_files
from jobs.tables.record_files import record_counts, record_files, record_location, table_batch, table_metadata

if TYPE_CHECKING:  # the lake page and `make status` ask here without Spark
    from pyspark.sql import DataFrame, SparkSession

# The branch every writer of the lake commits the events to; main is what the gates passed.
INGEST = "ingest"
# A rebuild's snapshot on `ingest` names its tag and the quarantine snapshot it staged, made current after it.
REBUILD, STAGED_QUARANTINE = "cloudtrail.rebuild", "cloudtrail.staged-quarantine"


def events_location(lake: Lake) -> str:
    """Where the events table lives in the lake."""
    return record_location(lake, EVENTS)


def _legacy(lake: Lake) -> bool:
    """An earlier release's folder not registered yet."""
    return sink_log(lake.events).is_dir() and INGEST not in _refs(lake)


def _metadata(lake: Lake) -> dict[str, Any]:
    return table_metadata(lake, EVENTS)


def _refs(lake: Lake) -> set[str]:
    return set(_metadata(lake).get("refs", {}))


def rebuild_tags(lake: Lake) -> set[str]:
    """The tags of the rebuilds whose snapshots the table keeps."""
    return {s["summary"][REBUILD] for s in _metadata(lake).get("snapshots", []) if REBUILD in s.get("summary", {})}


def unfinished_rebuild(lake: Lake) -> int | None:
    """The quarantine snapshot a rebuild staged and may not have made current: named by the snapshot at the head of
    `ingest` (every command that commits after a rebuild finishes it first)."""
    metadata = _metadata(lake)
    head = metadata.get("refs", {}).get(INGEST, {}).get("snapshot-id")
    found: dict[str, Any] = next((s for s in metadata.get("snapshots", []) if s["snapshot-id"] == head), {})
    staged = found.get("summary", {}).get(STAGED_QUARANTINE)
    return None if staged is None else int(staged)


def _files(lake: Lake) -> dict[str, list[LakePath]]:
    if _legacy(lake):
        return {partition_value(folder): data_files(folder) for folder in partition_folders(lake.events)}
    return record_files(lake, EVENTS, INGEST)


def event_dates(lake: Lake) -> list[str]:
    """The event dates the table holds rows of, ascending."""
    return [day for day, files in _files(lake).items() if files]


def date_files(lake: Lake, day: date | str) -> list[LakePath]:
    """A date's data files, as every reader reads them."""
    return _files(lake).get(str(day), [])


def date_fingerprint(lake: Lake, day: date | str) -> str:
    """What a date holds, by its data files' names and sizes: any commit changes it."""
    files = sorted((path.name, path.stat().st_size) for path in date_files(lake, day) if path.exists())
    return hashlib.sha256(json.dumps(files).encode()).hexdigest()


def date_rows(lake: Lake) -> dict[str, int]:
    """Per event date, the rows the table holds, as its manifests count them (an earlier release's folder has none)."""
    return {} if _legacy(lake) else record_counts(lake, EVENTS, INGEST)


def all_files(lake: Lake) -> set[LakePath]:
    """Every data file of the table."""
    return {path for files in _files(lake).values() for path in files}


def events_batch(lake: Lake) -> int | None:
    """The newest ingest batch the table holds (None: none)."""
    return sink_batch(lake.events) if _legacy(lake) else table_batch(lake, EVENTS)


def lost_files(lake: Lake, day: date | str) -> list[LakePath]:
    """A date's data files that the table names and the lake no longer holds (deleted from the bucket by hand, a
    lifecycle rule, a bug): no reader of the date can read it."""
    return [path for path in date_files(lake, day) if not path.exists()]


def events_of_dates(spark: SparkSession, lake: Lake, dates: Iterable[date | str], lost: Iterable[LakePath] = ()) -> DataFrame | None:
    """The rows of these event dates, through the session's Iceberg catalog; None when none of them holds a data file.
    The dates with `lost` files are read from their other files alone (as Parquet: Iceberg's scan would fail)."""
    from pyspark.sql import functions as F

    from jobs.iceberg.spark_tables import use_catalog
    from jobs.lake import EVENT_DATE
    from jobs.records.schema import EVENTS_SCHEMA

    days = sorted(str(day) for day in dates if date_files(lake, day))
    if not days:
        return None
    if _legacy(lake):
        folders = [str(partition(lake.events, day)) for day in days]
        return spark.read.schema(EVENTS_SCHEMA).option("basePath", str(lake.events)).parquet(*folders)
    table = f"{use_catalog(spark, lake, lake.catalog)}.{NAMESPACE}.{EVENTS}.branch_{INGEST}"
    gone = {str(path) for path in lost}
    damaged = {day for day in days if any(str(path) in gone for path in date_files(lake, day))}
    rows = spark.table(table).where(F.col(EVENT_DATE).isin(sorted(set(days) - damaged))).select(*EVENTS_SCHEMA.fieldNames())
    left = [str(path) for day in sorted(damaged) for path in date_files(lake, day) if str(path) not in gone]
    return rows.unionByName(spark.read.schema(EVENTS_SCHEMA).parquet(*left)) if left else rows


def events_source(lake: Lake, dates: Iterable[date | str] | None = None, newest: int | None = None) -> str | None:
    """A DuckDB table function over the rows of these dates (every date; with `newest`, the newest that many), the event
    date a column; None when they hold no data file."""
    days = event_dates(lake) if dates is None else sorted({str(day) for day in dates})
    return duck.files([path for day in (days[-newest:] if newest else days) for path in date_files(lake, day)])
