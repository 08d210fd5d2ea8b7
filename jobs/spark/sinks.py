"""Exactly-once Parquet output for foreachBatch: both tables' files in one Spark job, the events' committed through
Spark's own file sink log.

One query has two outputs (events and quarantine), so the query ends in foreachBatch. Both tables' files are written
in one Spark job (`write_tables`: cloudtrail.TableWriter, jobs/java/); the quarantine's are committed to its Iceberg
table (jobs/tables/quarantine_table.py), the events' listed in `events/_spark_metadata/<batchId>` by the log of Spark's
FileStreamSink, the class `writeStream.format("parquet")` uses, with its rule: a batch id already in the log is not
written again, so a batch replayed after a crash is never written twice.

The log keeps entries for `retention` only (the sink's own option, SPARK-27188): without
it every compaction rewrites every file ever written (SPARK-24295). So the log is the
writer's commit record, not the reader's index: readers read the directory, which the
sweep keeps equal to the committed table (docs/design.md, "Exactly once, and what every reader sees").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame, SparkSession

from jobs.lake import EVENT_DATE, EVENTS, QUARANTINE, REASON, Lake

# Set to "true" in every session that reads these tables: read the folders, not the retention-bounded log.
IGNORE_SINK_LOG = "spark.sql.streaming.fileStreamSink.ignoreMetadata"


def classic_jvm(spark: SparkSession) -> Any:
    """The session's JVM: these sinks call Spark's own classes, which a Spark Connect session does not reach."""
    jvm = spark._jvm
    if jvm is None:
        raise RuntimeError("the tables' sinks need a classic (non-Connect) SparkSession")
    return jvm


class ParquetSink:
    """Spark's FileStreamSink for one output path (driver side, classic Spark only)."""

    def __init__(self, spark: SparkSession, path: str, partition_by: list[str], retention_ms: int | None = None) -> None:
        jvm = classic_jvm(spark)
        self.path, self._spark = path, spark
        options = {"retention": str(retention_ms)} if retention_ms is not None else {}
        self._sink = jvm.org.apache.spark.sql.execution.streaming.sinks.FileStreamSink(
            spark._jsparkSession,
            path,
            jvm.org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat(),
            jvm.org.apache.spark.api.python.PythonUtils.toSeq(partition_by),
            jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(options),
        )
        self._log = self._sink.fileLog()

    def is_committed(self, batch_id: int) -> bool:
        latest = self._log.getLatestBatchId()
        return bool(latest.isDefined() and latest.get() >= batch_id)

    def commit(self, batch_id: int, files: list[str]) -> None:
        """List `files` (written by `write_tables`) in the table's log under `batch_id`: from then on they are the table's."""
        jvm = classic_jvm(self._spark)
        paths = self._spark.sparkContext._gateway.new_array(jvm.java.lang.String, len(files))  # type: ignore[union-attr]
        for index, path in enumerate(files):
            paths[index] = path
        if not jvm.cloudtrail.TableWriter.commit(self._log, batch_id, paths, self._spark._jsc.hadoopConfiguration()):
            raise RuntimeError(f"batch {batch_id} of {self.path} was committed meanwhile by another writer")

    def logged_files(self) -> dict[Path, int]:
        """Data files the log lists (those within retention), with the modification time (ms) it recorded."""
        return {Path(unquote(urlparse(entry.path()).path)): entry.modificationTime() for entry in self._log.allFiles()}


@dataclass(frozen=True)
class Written:
    """What `write_tables` wrote, not committed yet: per table, its files; and the batch's figures per
    (reason, event date in days, source file): rows, late, implausible, future-dated, newest event time (µs)."""

    files: dict[str, list[str]]
    groups: list[list[Any]]


def write_tables(rows: DataFrame, lake: Lake, quarantine_folder: str, batch_id: int, events: bool, quarantine: bool) -> Written:
    """Write a batch's rows (jobs/rows.table_rows) into both tables' partition folders in one Spark job (the events' in
    the lake, the quarantine's in `quarantine_folder`, its Iceberg table's data folder);
    `events`/`quarantine` False: that table has the batch already (its rows are counted, not written). The rows stay
    in arrival order: a run's files are small and the compaction sorts each closed date (jobs/records/layout.py)."""
    jvm = classic_jvm(rows.sparkSession)
    result = jvm.cloudtrail.TableWriter.write(
        rows._jdf, str(lake.events), EVENT_DATE, events, quarantine_folder, REASON, quarantine, batch_id
    )
    body = json.loads(result)
    tables = (EVENTS, QUARANTINE)
    files: dict[str, list[str]] = {name: [] for name in tables}
    for table, path in body["files"]:
        files[tables[table]].append(path)
    return Written(files, body["groups"])
