"""The ingest's streaming query: the ledger's manifests in, de-duplicated rows out to the batch writer.

extract    a text stream over <checkpoint>/manifests/, one manifest a batch: the files to read
transform  jobs/transforms.read_records, then de-duplication on arrival time and the late flag
load       foreachBatch (jobs/ingest/batch_writer.py), Trigger.AvailableNow or Once
follow     waits for the query, logging each batch as its progress arrives
"""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from jobs import storage
from jobs.ingest import deliveries
from jobs.ingest.batch_writer import BatchWriter
from jobs.ingest.config import IngestConfig
from jobs.ledger.store import MANIFEST_DDL, MANIFESTS
from jobs.records.dedup import deduplicate
from jobs.records.rows import mark_late
from jobs.records.transforms import read_records
from jobs.reporting.report import RunReport, apply_progress, log_batch
from jobs.spark.checkpoint import checkpoint_location, make_folder
from jobs.spark.session import STREAM_CONF, spark_session
from jobs.tables.tables_of_record import RecordTables

log = logging.getLogger("cloudtrail_ingest")


def build_session(config: IngestConfig, conf: dict[str, str] | None = None, dumping_classes: bool = False) -> SparkSession:
    """The ingest's session; `conf` on top (tools/class_archive.py starts its JVM with options of its own)."""
    conf = {**STREAM_CONF, "spark.sql.shuffle.partitions": str(config.state_partitions), **(conf or {})}
    return spark_session("cloudtrail_ingest", conf, dumping_classes=dumping_classes)


def extract(spark: SparkSession, config: IngestConfig) -> DataFrame:
    """The landing files the ledger's manifests name, one manifest per batch, as (path, size, mtime_ms, arrival_ms) rows."""
    manifests = config.lake.manifests
    if not storage.is_folder(manifests):  # a first run with nothing to take: the stream's base path must be a folder
        make_folder(spark, manifests)
    stream = (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", 1)
        .option("maxFileAge", config.max_file_age)
        # A checkpoint written before the ledger names landing files in its log, and Spark plans the
        # last committed batch again at start: the base path must hold both folders (and Spark sets
        # it to the source's path itself unless that path is a glob).
        .option("basePath", os.path.commonpath([manifests, config.landing]) if storage.is_folder(manifests) else str(manifests))
        .load(f"{manifests}/{MANIFESTS}")
    )
    files = stream.select(F.from_json("value", MANIFEST_DDL).alias("file")).select("file.*")
    return files if config.bucket is None else deliveries.where_read(files, config.bucket, config.bucket.from_store(spark))


def transform(files: DataFrame, config: IngestConfig, committed_watermark: datetime | None) -> DataFrame:
    """Files -> de-duplicated rows (events and quarantine together, split at the sink).

    `committed_watermark` is the checkpoint's de-duplication watermark (None before the first batch).
    """
    counted = files.observe("files", F.count(F.lit(1)).alias("files"), F.sum("size").alias("bytes"))
    rows = read_records(counted, config.run_id).observe("records", F.count(F.lit(1)).alias("records"))
    return deduplicate(rows, config.dedup, committed_watermark).transform(mark_late, config.dedup.horizon)


def load(rows: DataFrame, config: IngestConfig, writer: BatchWriter) -> StreamingQuery:
    trigger = {"availableNow": True} if config.trigger == "availableNow" else {"once": True}
    return (
        rows.writeStream.queryName("cloudtrail_ingest")
        .foreachBatch(writer)
        .option("checkpointLocation", checkpoint_location(rows.sparkSession, config.lake.checkpoint))
        .trigger(**trigger)
        .start()
    )


def follow(query: StreamingQuery, report: RunReport) -> None:
    """Wait for the query, logging each batch as its progress arrives."""
    seen: set[int] = set()

    def drain() -> None:
        for progress in query.recentProgress:
            body = json.loads(progress.json)
            if body["batchId"] in seen:
                continue
            batch = apply_progress(report, body)
            if batch is not None:
                seen.add(batch.batch_id)
                log_batch(batch)

    while query.isActive:
        query.awaitTermination(2)
        drain()
    drain()
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"streaming query failed: {error}")


def stream(
    spark: SparkSession, config: IngestConfig, committed_watermark: datetime | None, report: RunReport, tables: RecordTables
) -> None:
    """Read every manifest not read yet, batch by batch, into the tables; each batch's figures into `report`."""
    rows = transform(extract(spark, config), config, committed_watermark)
    follow(load(rows, config, BatchWriter(spark, config, report, tables)), report)
