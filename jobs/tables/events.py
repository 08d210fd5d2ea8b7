"""The events table as the lake's jobs read it: the event dates it holds, each date's data files and their
fingerprint, its rows by date (Spark) or as a DuckDB source. Where the table lives and how its files are found is this
module's to know; the gate, the derived jobs, the publish, the lake page, a rebuild's plan, the compaction, the
retention and a repair ask here."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from jobs import duck
from jobs.lake import Lake, partition, partition_folders, partition_value
from jobs.tables.partitions import data_files, fingerprint

if TYPE_CHECKING:  # the lake page and `make status` ask here without Spark
    from pyspark.sql import DataFrame, SparkSession


def event_dates(lake: Lake) -> list[str]:
    """The event dates the table has a partition for, ascending."""
    return [partition_value(folder) for folder in partition_folders(lake.events)]


def date_files(lake: Lake, day: date | str) -> list[Path]:
    """A date's data files, as every reader reads them."""
    return data_files(partition(lake.events, day))


def date_fingerprint(lake: Lake, day: date | str) -> str:
    """What a date holds, by its data files: any write, swap or hand edit changes it."""
    return fingerprint(partition(lake.events, day))


def all_files(lake: Lake) -> set[Path]:
    """Every data file of the table."""
    from jobs.tables.sweep import table_files

    return table_files(lake.events)


def events_of_dates(spark: SparkSession, lake: Lake, dates: Iterable[date | str]) -> DataFrame | None:
    """The rows of these event dates, their partitions read whole; None when none of them holds a data file."""
    from jobs.records.schema import EVENTS_SCHEMA

    folders = [str(folder) for folder in (partition(lake.events, day) for day in dates) if data_files(folder)]
    if not folders:
        return None
    return spark.read.schema(EVENTS_SCHEMA).option("basePath", str(lake.events)).parquet(*folders)


def events_source(lake: Lake, dates: Iterable[date | str] | None = None, newest: int | None = None) -> str | None:
    """A DuckDB table function over the rows of these dates (every date; with `newest`, the newest that many), the event
    date a column; None when they hold no data file."""
    days = event_dates(lake) if dates is None else sorted({str(day) for day in dates})
    return duck.files([path for day in (days[-newest:] if newest else days) for path in date_files(lake, day)])
