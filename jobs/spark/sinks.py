"""A batch's files for both tables of record in one Spark job.

One query has two outputs (events and quarantine), so the query ends in foreachBatch. Both tables' files are written
in one Spark job (`write_tables`: cloudtrail.TableWriter, jobs/java/) into their Iceberg tables' data folders; they
become rows only when the batch's commits name them (jobs/tables/record_table.py), each recording the batch, so a
batch replayed after a crash is committed once (docs/design.md, "Exactly once, and what every reader sees").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from jobs.lake import EVENT_DATE, EVENTS, QUARANTINE, REASON


def classic_jvm(spark: SparkSession) -> Any:
    """The session's JVM: these sinks call Spark's own classes, which a Spark Connect session does not reach."""
    jvm = spark._jvm
    if jvm is None:
        raise RuntimeError("the tables' sinks need a classic (non-Connect) SparkSession")
    return jvm


@dataclass(frozen=True)
class Written:
    """What `write_tables` wrote, not committed yet: per table, its files; and the batch's figures per
    (reason, event date in days, source file): rows, late, implausible, future-dated, newest event time (µs)."""

    files: dict[str, list[str]]
    groups: list[list[Any]]


def write_tables(rows: DataFrame, events_folder: str, quarantine_folder: str, batch_id: int, events: bool, quarantine: bool) -> Written:
    """Write a batch's rows (jobs/rows.table_rows) into both tables' partition folders in one Spark job (`events_folder`
    and `quarantine_folder`, their Iceberg tables' data folders);
    `events`/`quarantine` False: that table has the batch already (its rows are counted, not written). The rows stay
    in arrival order: a run's files are small and the compaction sorts each closed date (jobs/records/layout.py)."""
    jvm = classic_jvm(rows.sparkSession)
    result = jvm.cloudtrail.TableWriter.write(rows._jdf, events_folder, EVENT_DATE, events, quarantine_folder, REASON, quarantine, batch_id)
    body = json.loads(result)
    tables = (EVENTS, QUARANTINE)
    files: dict[str, list[str]] = {name: [] for name in tables}
    for table, path in body["files"]:
        files[tables[table]].append(path)
    return Written(files, body["groups"])
