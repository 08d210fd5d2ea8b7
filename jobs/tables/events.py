"""The events table's rows as the jobs that read them ask for them: by event date (the gate, the derived jobs, a
rebuild). Where the table lives is this module's to know."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date

from pyspark.sql import DataFrame, SparkSession

from jobs.lake import Lake, partition
from jobs.records.schema import EVENTS_SCHEMA
from jobs.tables.partitions import data_files


def events_of_dates(spark: SparkSession, lake: Lake, dates: Iterable[date | str]) -> DataFrame | None:
    """The rows of these event dates, their partitions read whole; None when none of them holds a data file."""
    folders = [str(folder) for folder in (partition(lake.events, day) for day in dates) if data_files(folder)]
    if not folders:
        return None
    return spark.read.schema(EVENTS_SCHEMA).option("basePath", str(lake.events)).parquet(*folders)
