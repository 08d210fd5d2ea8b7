"""Exactly-once Parquet output for foreachBatch, through Spark's own file sink.

One query has two outputs (events and quarantine), so the query ends in foreachBatch;
each output is written by Spark's FileStreamSink, the same class `writeStream.format
("parquet")` uses: data files are listed in `<path>/_spark_metadata/<batchId>` only
after they are all written, and a batch id already in that log is skipped, so a batch
replayed after a crash is never written twice.

The log keeps entries for `retention` only (the sink's own option, SPARK-27188): without
it every compaction rewrites every file ever written (SPARK-24295). So the log is the
writer's commit record, not the reader's index: readers read the directory, which the
sweep keeps equal to the committed table (docs/design.md, "Reading the table").
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame, SparkSession

# Set to "true" in every session that reads these tables: read the folders, not the retention-bounded log.
IGNORE_SINK_LOG = "spark.sql.streaming.fileStreamSink.ignoreMetadata"


class ParquetSink:
    """Spark's FileStreamSink for one output path (driver side, classic Spark only)."""

    def __init__(self, spark: SparkSession, path: str, partition_by: list[str], retention_ms: int | None = None) -> None:
        jvm = spark._jvm
        assert jvm is not None, "ParquetSink needs a classic (non-Connect) SparkSession"
        self.path = path
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

    def add_batch(self, batch_id: int, rows: DataFrame) -> None:
        self._sink.addBatch(batch_id, rows._jdf)

    def logged_files(self) -> dict[Path, int]:
        """Data files the log lists (those within retention), with the modification time (ms) it recorded."""
        return {Path(unquote(urlparse(entry.path()).path)): entry.modificationTime() for entry in self._log.allFiles()}
