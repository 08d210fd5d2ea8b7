"""Ingest new CloudTrail files into the event-date partitioned Parquet table, exactly once.

Run it with either of:

    spark-submit --py-files build/jobs.zip jobs/cloudtrail_ingest.py --landing DIR --lake DIR [options]
    python -m jobs.cloudtrail_ingest --landing DIR --lake DIR [options]

--landing/--lake default to $CLOUDTRAIL_LANDING/$CLOUDTRAIL_LAKE. The run reads every file
under <landing>/AWSLogs/ that the checkpoint has not seen (Trigger.AvailableNow, in
rate-limited batches, oldest first), writes <lake>/events/event_date=YYYY-MM-DD/,
<lake>/quarantine/reason=.../ and <lake>/reports/ingest/<run id>.json, and exits 0.
Exit codes: 1 the run failed, 2 bad arguments or an unusable checkpoint, 3 rows would have
been lost, 75 another run holds the lake.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from jobs.checkpoint import (
    CheckpointError,
    LakeBusyError,
    LakeLock,
    check_checkpoint_matches_table,
    committed_batch_id,
    committed_watermark,
    planned_batch_id,
)
from jobs.decode import DECODED_DDL, decode_batches
from jobs.report import BatchStats, RunReport, apply_progress, log_batch, now_iso
from jobs.sinks import IGNORE_SINK_LOG, ParquetSink
from jobs.source_retention import SourcePlan, plan_sources, read_last_success, record_success
from jobs.sweep import sweep_lake
from jobs.transforms import (
    mark_dedup_key,
    mark_late,
    normalize_records,
    parse_containers,
    raise_arrival_floor,
    split_events,
    split_quarantine,
)

log = logging.getLogger("cloudtrail_ingest")

BINARY_FILE_SCHEMA = "path string, modificationTime timestamp, length long, content binary"

SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    # RocksDB keeps de-duplication state off the JVM heap, so it is bounded by disk, not memory.
    "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    # Files per Arrow batch in the decode step: a few decompressed files at a time per task.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "16",
    "spark.sql.streaming.numRecentProgressUpdates": "100000",
    # The landing glob expands to files, and past 32 paths Spark lists them with a distributed
    # job of one task per file, three times per batch: 5.8 s of a 30 s batch at 400 files
    # (bench, event log). Listing in the driver takes milliseconds.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000000",
    # Bounded metadata: the checkpoint keeps 3 batches (not 100: a replay needs only the last,
    # and a run is 1-2 batches plus a no-data batch, so 100 kept weeks of state versions), old
    # log files go as soon as a compaction replaces them (only this job reads these logs, under
    # the lake lock), and state maintenance (which deletes old versions) runs every second: at
    # the default 60 s a run of a few seconds never ran it, and daily runs' state grew unbounded.
    "spark.sql.streaming.minBatchesToRetain": "3",
    "spark.sql.streaming.fileSink.log.cleanupDelay": "0",
    "spark.sql.streaming.fileSource.log.cleanupDelay": "0",
    "spark.sql.streaming.stateStore.maintenanceInterval": "1s",
    # Readers in this session (and the tests) read the table as a directory (jobs/sinks.py).
    IGNORE_SINK_LOG: "true",
}


@dataclass(frozen=True)
class IngestConfig:
    landing: str
    lake: str
    trigger: str = "availableNow"
    max_files_per_trigger: int | None = None
    # CloudTrail compresses about 10:1: 32 MB of .json.gz is ~300 MB of JSON text per batch,
    # which a 2 GB driver holds comfortably (128 MB ran out of memory at 1M records).
    max_bytes_per_trigger: int | None = 32 * 1024**2
    watermark: str = "2 days"
    state_partitions: int = 4
    max_file_age: str = "3650d"
    table_log_retention: str = "2 days"
    source_retention: str = "7 days"
    run_id: str = ""

    @property
    def events_path(self) -> str:
        return f"{self.lake}/events"

    @property
    def quarantine_path(self) -> str:
        return f"{self.lake}/quarantine"

    @property
    def checkpoint_path(self) -> Path:
        return Path(self.lake) / "_checkpoints" / "ingest"

    @property
    def lock_path(self) -> Path:
        return Path(self.lake) / "_checkpoints" / "ingest.lock"


DURATION = re.compile(r"(\d+)\s+(second|minute|hour|day|week)s?")


def duration(text: str) -> timedelta:
    """'2 days' -> timedelta(days=2): the forms Spark's withWatermark takes that this job accepts."""
    match = DURATION.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a duration like '2 days' or '6 hours'")
    return timedelta(**{f"{match[2]}s": int(match[1])})


def watermark_delay(horizon: str) -> timedelta:
    """The withWatermark delay for a de-duplication horizon: half of it.

    Spark keeps an eventID until the watermark (newest arrival minus the delay) reaches the
    key's arrival plus the delay, so copies are collapsed when they arrive less than twice the
    delay apart. Half the horizon collapses copies within the horizon and holds one horizon of
    eventIDs in state, not two.
    """
    return duration(horizon) / 2


def _duration(text: str) -> str:
    try:
        duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip()


def _size(text: str) -> int:
    """'128m' -> bytes (Spark's file source takes a plain byte count)."""
    match = re.fullmatch(r"(\d+)\s*([kmg]?)b?", text.strip().lower())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like '128m' or '1g'")
    return int(match[1]) * 1024 ** " kmg".index(match[2] or " ")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parse_args(argv: list[str] | None = None) -> IngestConfig:
    parser = argparse.ArgumentParser(prog="cloudtrail_ingest", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--landing", default=os.environ.get("CLOUDTRAIL_LANDING"), help="root holding AWSLogs/ [$CLOUDTRAIL_LANDING]")
    parser.add_argument("--lake", default=os.environ.get("CLOUDTRAIL_LAKE"), help="root for all outputs [$CLOUDTRAIL_LAKE]")
    parser.add_argument("--trigger", choices=["availableNow", "once"], default="availableNow")
    parser.add_argument("--max-files-per-trigger", type=_positive_int, help="files per batch (availableNow)")
    parser.add_argument("--max-bytes-per-trigger", type=_size, default=32 * 1024**2, help="compressed bytes per batch (availableNow) [32m]")
    parser.add_argument("--watermark", type=_duration, default="2 days", help="de-duplication horizon, on arrival time ['2 days']")
    parser.add_argument("--state-partitions", type=_positive_int, default=4, help="state partitions; fixed by the first run [4]")
    parser.add_argument("--max-file-age", default="3650d", help="files older than the newest by more than this are not read [3650d]")
    parser.add_argument(
        "--table-log-retention", type=_duration, default="2 days", help="how long the tables' commit logs list a file ['2 days']"
    )
    parser.add_argument(
        "--source-retention", type=_duration, default="7 days",
        help="delivery folders this long before the newest one read are no longer tracked file by file ['7 days']",
    )  # fmt: skip
    parser.add_argument("--run-id", default=None, help="id of this run in reports and rows [manual__<UTC time>]")
    args = parser.parse_args(argv)
    if not args.landing or not args.lake:
        parser.error("--landing and --lake (or CLOUDTRAIL_LANDING and CLOUDTRAIL_LAKE) are required")
    if args.max_files_per_trigger and args.max_bytes_per_trigger:
        # Spark's file source accepts only one of the two limits; an explicit file limit wins.
        args.max_bytes_per_trigger = None
    return IngestConfig(
        landing=os.path.abspath(args.landing) if "://" not in args.landing else args.landing,
        lake=os.path.abspath(args.lake),
        trigger=args.trigger,
        max_files_per_trigger=args.max_files_per_trigger,
        max_bytes_per_trigger=args.max_bytes_per_trigger,
        watermark=args.watermark,
        state_partitions=args.state_partitions,
        max_file_age=args.max_file_age,
        table_log_retention=args.table_log_retention,
        source_retention=args.source_retention,
        run_id=args.run_id or f"manual__{now_iso()}",
    )


def build_session(config: IngestConfig) -> SparkSession:
    # Python workers run the decode step and need this interpreter's packages (pyarrow);
    # PySpark takes the worker interpreter from this variable only.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("cloudtrail_ingest")
    # spark-submit hands Python a running JVM (and the master) through this variable;
    # without it we were started by `python -m` and run Spark embedded.
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master(os.environ.get("CLOUDTRAIL_SPARK_MASTER", "local[*]"))
        builder = builder.config("spark.driver.memory", os.environ.get("CLOUDTRAIL_DRIVER_MEMORY", "2g"))
    for key, value in {**SESSION_CONF, "spark.sql.shuffle.partitions": str(config.state_partitions)}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def extract(spark: SparkSession, config: IngestConfig, sources: SourcePlan) -> DataFrame:
    """New landing files as (path, modificationTime, length, content) rows, from the folders `sources` lists."""
    reader = spark.readStream.format("binaryFile").schema(BINARY_FILE_SCHEMA).option("maxFileAge", config.max_file_age)
    if config.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", config.max_files_per_trigger)
    if config.max_bytes_per_trigger:
        reader = reader.option("maxBytesPerTrigger", config.max_bytes_per_trigger)
    return reader.load(f"{config.landing}/{sources.glob}")


def transform(files: DataFrame, config: IngestConfig, watermark: datetime | None) -> DataFrame:
    """Files -> de-duplicated rows (events and quarantine together, split at the sink).

    `watermark` is the committed de-duplication watermark (None before the first batch).
    """
    decoded = files.mapInArrow(decode_batches, DECODED_DDL)
    below = F.col("arrival_time") <= F.lit(watermark) if watermark else F.lit(False)
    decoded = decoded.observe(
        "files", F.count(F.lit(1)).alias("files"), F.sum("file_bytes").alias("bytes"), F.count_if(below).alias("below_watermark")
    )
    delay = watermark_delay(config.watermark)
    floor = watermark + delay if watermark else None
    rows = normalize_records(parse_containers(raise_arrival_floor(decoded, floor)), config.run_id)
    rows = mark_late(rows, config.watermark)
    rows = rows.observe("records", F.count(F.lit(1)).alias("records"), F.count_if("_late").alias("late"))
    rows = mark_dedup_key(rows).withWatermark("_arrival_time", f"{int(delay.total_seconds() * 1000)} milliseconds")
    return rows.dropDuplicatesWithinWatermark(["_dedup_key"])


class BatchWriter:
    """foreachBatch body: write quarantine then events, each exactly once per batch id."""

    def __init__(self, spark: SparkSession, config: IngestConfig, report: RunReport) -> None:
        retention_ms = int(duration(config.table_log_retention).total_seconds() * 1000)
        self.events = ParquetSink(spark, config.events_path, ["event_date"], retention_ms)
        self.quarantine = ParquetSink(spark, config.quarantine_path, ["reason"], retention_ms)
        self.report = report

    def __call__(self, rows: DataFrame, batch_id: int) -> None:
        already_committed = self.events.is_committed(batch_id) and self.quarantine.is_committed(batch_id)
        rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            written: dict[str, int] = {}
            quarantined: dict[str, int] = {}
            for row in rows.groupBy("_reason", "event_date").count().collect():
                if row["_reason"] is None:
                    written[str(row["event_date"])] = row["count"]
                else:
                    quarantined[row["_reason"]] = quarantined.get(row["_reason"], 0) + row["count"]
            self.quarantine.add_batch(batch_id, split_quarantine(rows))
            self.events.add_batch(batch_id, split_events(rows))
        finally:
            rows.unpersist()
        self.report.batches.append(BatchStats(batch_id, written, quarantined, already_committed))


def load(rows: DataFrame, config: IngestConfig, writer: BatchWriter) -> StreamingQuery:
    trigger = {"availableNow": True} if config.trigger == "availableNow" else {"once": True}
    return (
        rows.writeStream.queryName("cloudtrail_ingest")
        .foreachBatch(writer)
        .option("checkpointLocation", str(config.checkpoint_path))
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


def nothing_to_do(config: IngestConfig, sources: SourcePlan) -> bool:
    """No landing file is new, no batch is half done, and no batch ran since a successful run
    swept the lake: a streaming query would find nothing, so the run can skip Spark altogether."""
    committed = committed_batch_id(config.checkpoint_path)
    return (
        sources.new_files == 0
        and committed is not None
        and planned_batch_id(config.checkpoint_path) == committed
        and read_last_success(config.checkpoint_path).batch_id == committed
    )


def run(config: IngestConfig, session: Callable[[], SparkSession]) -> RunReport:
    """One ingest run; `session` is called for the SparkSession only if there is work to do."""
    check_checkpoint_matches_table(config.checkpoint_path, Path(config.events_path) / "_spark_metadata")
    watermark = committed_watermark(config.checkpoint_path)
    report = RunReport(
        run_id=config.run_id,
        landing=config.landing,
        lake=config.lake,
        trigger=config.trigger,
        started_at=now_iso(),
        watermark_before=watermark.isoformat() if watermark else None,
        dedup_horizon=config.watermark,
    )
    try:
        sources = plan_sources(config.checkpoint_path, config.landing, duration(config.source_retention))
        report.source_log = sources.summary()
        if nothing_to_do(config, sources):
            log.info("nothing new in %s since the last successful run; Spark not started", config.landing)
            report.swept_files = {"events": 0, "quarantine": 0}
        else:
            spark = session()
            # Debris of a crashed attempt is swept before a compaction can age its neighbours out of the log.
            swept_before = sweep_lake(spark, config.lake)
            query = load(transform(extract(spark, config, sources), config, watermark), config, BatchWriter(spark, config, report))
            follow(query, report)
            # A successful run always leaves a clean table, whatever earlier crashed attempts left.
            swept_after = sweep_lake(spark, config.lake)
            report.swept_files = {table: swept_before[table] + swept_after[table] for table in swept_before}
        record_success(config.checkpoint_path, sources, committed_batch_id(config.checkpoint_path))
        report.status = "succeeded"
    except Exception as exc:
        report.status, report.error = "failed", str(exc).splitlines()[0][:2000]
        raise
    finally:
        after = committed_watermark(config.checkpoint_path)
        report.watermark_after = after.isoformat() if after else None
        report.finished_at = now_iso()
        path = report.write()
        totals = report.totals()
        log.info(
            "run %s %s: %d files, %d records, %d rows written, %d duplicates dropped, %d quarantined; report %s",
            config.run_id, report.status, totals["files_read"], totals["records_read"], totals["rows_written"],
            totals["duplicates_dropped"], totals["quarantined"], path,
        )  # fmt: skip
    return report


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    config = parse_args(argv)
    started = time.monotonic()
    try:
        with LakeLock(config.lock_path):
            report = run(config, lambda: build_session(config))
    except LakeBusyError as exc:
        log.error("%s", exc)
        return 75
    except CheckpointError as exc:
        log.error("%s", exc)
        return 2
    dropped = report.totals()["rows_dropped_by_watermark"]
    if dropped:
        log.error("%d rows were dropped by the de-duplication watermark: see docs/design.md, 'Recovering dropped rows'", dropped)
        return 3
    log.info("done in %.1f s", time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
