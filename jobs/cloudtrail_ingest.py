"""Ingest new CloudTrail files into the event-date partitioned Parquet table, exactly once.

Run it with either of:

    spark-submit --py-files build/jobs.zip jobs/cloudtrail_ingest.py --landing DIR --lake DIR [options]
    python -m jobs.cloudtrail_ingest --landing DIR --lake DIR [options]

--landing/--lake default to $CLOUDTRAIL_LANDING/$CLOUDTRAIL_LAKE. The run lists every file
under <landing>/AWSLogs/ that the ledger has not taken (jobs/ledger.py), reads them
(Trigger.AvailableNow, in rate-limited batches, oldest first), writes <lake>/events/event_date=YYYY-MM-DD/,
<lake>/quarantine/reason=.../ and <lake>/reports/ingest/<run id>.json, and exits 0.
Exit codes: 1 the run failed, 2 bad arguments or an unusable checkpoint, 3 rows would have
been lost, 75 another run holds the lake.
With --gate-from/--gate-to the run also validates, in this application, those event dates and
the ones it wrote (when it wrote or quarantined anything), as jobs/validate_events.py would in
a second one: the verdict is in <lake>/reports/dq/<run id>.json, the exit code does not carry it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from jobs import gate, options, partitions, validate_events
from jobs.checkpoint import CheckpointSnapshot
from jobs.decode import decode_files
from jobs.lake import TABLES, Lake, LakeBusyError, LakeLock
from jobs.landing import place
from jobs.ledger import MANIFEST_DDL, plan_files, record_late_files, record_success
from jobs.quarantine import Replacement, Replay, replay_entries
from jobs.report import BatchStats, RunReport, apply_progress, log_batch, now_iso
from jobs.session import STREAM_CONF, JobSession, for_table_reads, spark_session
from jobs.sinks import ParquetSink
from jobs.spark_logs import CheckpointError, batch_time, last_commit, local_path
from jobs.sweep import sweep_lake
from jobs.transforms import (
    arrival_floor,
    deduplicate,
    implausible_event_time,
    mark_late,
    normalize_records,
    parse_containers,
    split_events,
    split_quarantine,
    stamp_ingest_time,
)

log = logging.getLogger("cloudtrail_ingest")


@dataclass(frozen=True)
class IngestConfig:
    landing: str
    lake: str
    trigger: str = "availableNow"
    max_files_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = options.size(options.MAX_BYTES_PER_TRIGGER)
    dedup_horizon: str = options.DEDUP_HORIZON
    state_partitions: int = options.STATE_PARTITIONS
    max_file_age: str = options.MAX_FILE_AGE
    table_log_retention: str = options.TABLE_LOG_RETENTION
    source_retention: str = options.SOURCE_RETENTION
    settle: str = options.SETTLE
    clock_skew: str = options.CLOCK_SKEW
    # Quarantined files and records to read again in this run (jobs/quarantine.py); None: none.
    replay: Replay | None = None
    run_id: str = ""
    # Event dates the quality gate checks in this application after the batches; None: no gate here.
    gate_dates: tuple[date, ...] | None = None
    quarantine_threshold: float = options.QUARANTINE_THRESHOLD

    @property
    def layout(self) -> Lake:
        return Lake.at(self.lake)


def _checked(parse: Callable[[str], Any]) -> Callable[[str], str]:
    """An argparse type that checks a value with `parse` and keeps its text."""

    def check(text: str) -> str:
        try:
            parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text.strip()

    return check


def _size(text: str) -> int:
    try:
        return options.size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


class _DeprecatedAlias(argparse.Action):
    """An old option name that still works, with a warning naming the new one."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None) -> None:
        log.warning("%s is deprecated: use --%s", option, self.dest.replace("_", "-"))
        setattr(namespace, self.dest, values)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and each option's default in its help."""


def parse_args(argv: Sequence[str] | None = None) -> IngestConfig:
    parser = argparse.ArgumentParser(prog="cloudtrail_ingest", description=__doc__, formatter_class=_HelpFormatter)
    duration = _checked(options.duration)
    parser.add_argument("--landing", default=os.environ.get("CLOUDTRAIL_LANDING"), help="root holding AWSLogs/ [$CLOUDTRAIL_LANDING]")
    parser.add_argument("--lake", default=os.environ.get("CLOUDTRAIL_LAKE"), help="root for all outputs [$CLOUDTRAIL_LAKE]")
    parser.add_argument("--trigger", choices=["availableNow", "once"], default="availableNow")
    parser.add_argument("--max-files-per-trigger", type=_positive_int, help="files per batch (availableNow)")
    parser.add_argument("--max-bytes-per-trigger", type=_size, default=options.MAX_BYTES_PER_TRIGGER, help="compressed bytes per batch")
    parser.add_argument(
        "--dedup-horizon", type=duration, default=options.DEDUP_HORIZON, help="a copy arriving within this of the first is dropped"
    )
    parser.add_argument(
        "--watermark", dest="dedup_horizon", type=duration, action=_DeprecatedAlias, default=argparse.SUPPRESS,
        help="deprecated: --dedup-horizon",
    )  # fmt: skip
    parser.add_argument("--state-partitions", type=_positive_int, default=options.STATE_PARTITIONS, help="fixed by the first run")
    parser.add_argument("--max-file-age", default=options.MAX_FILE_AGE, help="files older than the newest by more than this are not read")
    parser.add_argument(
        "--table-log-retention", type=duration, default=options.TABLE_LOG_RETENTION, help="how long the tables' commit logs list a file"
    )
    parser.add_argument(
        "--source-retention", type=duration, default=options.SOURCE_RETENTION,
        help="delivery folders this long before the newest one read are no longer tracked file by file",
    )  # fmt: skip
    parser.add_argument("--settle", type=duration, default=options.SETTLE, help="files written to more recently are left for a later run")
    parser.add_argument(
        "--clock-skew", type=duration, default=options.CLOCK_SKEW,
        help="an event dated later than its batch by more than this is future-dated: counted, never taken for the newest event",
    )  # fmt: skip
    parser.add_argument("--replay-quarantine", action="store_true", help="also read again the quarantined files and records below")
    parser.add_argument("--replay-reason", action="append", default=[], help="only those quarantined for this reason (repeatable)")
    parser.add_argument("--replay-from", type=date.fromisoformat, help="only files delivered on or after this date")
    parser.add_argument("--replay-to", type=date.fromisoformat, help="only files delivered on or before this date")
    parser.add_argument("--run-id", help="id of this run in reports and rows; None: manual__<UTC time>")
    parser.add_argument("--gate-from", type=date.fromisoformat, help="first event date the quality gate checks in this application")
    parser.add_argument("--gate-to", type=date.fromisoformat, help="last event date the quality gate checks in this application")
    parser.add_argument("--quarantine-threshold", type=float, default=options.QUARANTINE_THRESHOLD, help="the gate's max quarantined share")
    args = parser.parse_args(argv)
    if not args.landing or not args.lake:
        parser.error("--landing and --lake (or CLOUDTRAIL_LANDING and CLOUDTRAIL_LAKE) are required")
    if args.replay_from and args.replay_to and args.replay_from > args.replay_to:
        parser.error(f"--replay-from {args.replay_from} is after --replay-to {args.replay_to}")
    if (args.gate_from is None) != (args.gate_to is None) or (args.gate_from and args.gate_from > args.gate_to):
        parser.error("--gate-from and --gate-to go together, the first not after the second")
    if args.max_files_per_trigger and args.max_bytes_per_trigger:
        # One limit per run, as Spark's file source takes: an explicit file limit wins.
        args.max_bytes_per_trigger = None
    return IngestConfig(
        landing=os.path.abspath(args.landing),
        lake=os.path.abspath(args.lake),
        trigger=args.trigger,
        max_files_per_trigger=args.max_files_per_trigger,
        max_bytes_per_trigger=args.max_bytes_per_trigger,
        dedup_horizon=args.dedup_horizon,
        state_partitions=args.state_partitions,
        max_file_age=args.max_file_age,
        table_log_retention=args.table_log_retention,
        source_retention=args.source_retention,
        settle=args.settle,
        clock_skew=args.clock_skew,
        replay=Replay(tuple(args.replay_reason), args.replay_from, args.replay_to) if args.replay_quarantine else None,
        run_id=args.run_id or f"manual__{now_iso()}",
        gate_dates=options.date_range(args.gate_from, args.gate_to) if args.gate_from else None,
        quarantine_threshold=args.quarantine_threshold,
    )


def build_session(config: IngestConfig) -> SparkSession:
    return spark_session("cloudtrail_ingest", {**STREAM_CONF, "spark.sql.shuffle.partitions": str(config.state_partitions)})


def extract(spark: SparkSession, config: IngestConfig) -> DataFrame:
    """The landing files the ledger's manifests name, one manifest per batch, as (path, size, mtime_ms, arrival_ms) rows."""
    manifests = (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", 1)
        .option("maxFileAge", config.max_file_age)
        # A checkpoint written before the ledger names landing files in its log, and Spark plans the
        # last committed batch again at start: the base path must hold both folders (and Spark sets
        # it to the source's path itself unless that path is a glob).
        .option("basePath", os.path.commonpath([config.layout.manifests, config.landing]))
        .load(f"{config.layout.manifests}/[0-9]*.jsonl")
    )
    return manifests.select(F.from_json("value", MANIFEST_DDL).alias("file")).select("file.*")


def transform(files: DataFrame, config: IngestConfig, committed_watermark: datetime | None) -> DataFrame:
    """Files -> de-duplicated rows (events and quarantine together, split at the sink).

    `committed_watermark` is the checkpoint's de-duplication watermark (None before the first batch).
    """
    horizon = options.duration(config.dedup_horizon)
    rows = (
        files.transform(decode_files)
        .observe("files", F.count(F.lit(1)).alias("files"), F.sum("file_bytes").alias("bytes"))
        .transform(parse_containers)
        .transform(normalize_records, config.run_id)
        .observe("records", F.count(F.lit(1)).alias("records"))
    )
    return deduplicate(rows, horizon, committed_watermark).transform(mark_late, horizon)


class BatchWriter:
    """foreachBatch body: write quarantine (with the rows it keeps from the quarantine files its
    reads replace, jobs/quarantine.py) then events, each exactly once per batch id."""

    def __init__(self, spark: SparkSession, config: IngestConfig, report: RunReport) -> None:
        self.spark, self.lake = spark, config.layout
        retention_ms = int(options.duration(config.table_log_retention).total_seconds() * 1000)
        self.events = ParquetSink(spark, str(config.layout.events), ["event_date"], retention_ms)
        self.quarantine = ParquetSink(spark, str(config.layout.quarantine), ["reason"], retention_ms)
        self.report = report
        self.clock_skew = options.duration(config.clock_skew)

    def __call__(self, rows: DataFrame, batch_id: int) -> None:
        already_committed = self.events.is_committed(batch_id) and self.quarantine.is_committed(batch_id)
        replacement = Replacement(self.spark, self.lake, batch_id, self.quarantine.is_committed(batch_id))
        ingested_at = batch_time(self.lake.checkpoint, batch_id)
        # The batch is computed once (parse, de-duplication) and read three times: counted, then each
        # output written. In memory: on local disk (DISK_ONLY) the runs were no faster and the
        # driver's heap after GC no smaller (BENCHMARKS.md, "Throughput against plain Spark").
        rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            written: dict[str, int] = {}
            quarantined: dict[str, int] = {}
            late = implausible = 0
            late_files: dict[str, set[str]] = {}
            late_per_date: Counter[str] = Counter()
            newest: dict[str, str] = {}
            future: Counter[str] = Counter()
            # An event dated after the batch (plus the clock skew allowance) is forged or from a wrong clock: it is
            # counted, and never taken for a place's newest event, which the lake page's freshness alarm rests on.
            plausible = F.col("eventTime") <= F.lit(ingested_at + self.clock_skew)
            # Per file too: which files held late events, and per delivery place the newest plausible eventTime written.
            counts = rows.groupBy("_reason", "event_date", "_source_file").agg(
                F.count(F.lit(1)).alias("rows"),
                F.count_if("_late").alias("late"),
                F.count_if(implausible_event_time(F.col("eventTime"), F.col("_arrival_time"))).alias("implausible"),
                F.date_format(F.max(F.when(plausible, F.col("eventTime"))), "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("newest"),  # UTC
                F.count_if(~plausible).alias("future_dated"),
            )
            for row in counts.collect():
                day = str(row["event_date"])
                late += row["late"]
                implausible += row["implausible"]
                if row["late"]:
                    late_files.setdefault(day, set()).add(row["_source_file"])
                    late_per_date[day] += row["late"]
                if row["_reason"] is None:
                    written[day] = written.get(day, 0) + row["rows"]
                    where = place(local_path(row["_source_file"]))
                    if where is not None:
                        key = "/".join(where)
                        if row["newest"] is not None:
                            newest[key] = max(row["newest"], newest.get(key, row["newest"]))
                        if row["future_dated"]:
                            future[key] += row["future_dated"]
                else:
                    quarantined[row["_reason"]] = quarantined.get(row["_reason"], 0) + row["rows"]
            stamped = rows.transform(stamp_ingest_time, ingested_at)
            self.quarantine.add_batch(batch_id, replacement.add_kept(split_quarantine(stamped)))
            replacement.finish()
            record_late_files(self.lake.late_files, batch_id, {day: sorted(files) for day, files in late_files.items()})
            self.events.add_batch(batch_id, split_events(stamped))
        finally:
            rows.unpersist(blocking=True)  # gone before the next batch is cached
        self.report.batches.append(
            BatchStats(
                batch_id,
                written,
                quarantined,
                already_committed,
                late_events=late,
                implausible_event_times=implausible,
                late_per_event_date=dict(late_per_date),
                newest_event_times=newest,
                future_dated_events=dict(future),
            )  # fmt: skip
        )


def load(rows: DataFrame, config: IngestConfig, writer: BatchWriter) -> StreamingQuery:
    trigger = {"availableNow": True} if config.trigger == "availableNow" else {"once": True}
    return (
        rows.writeStream.queryName("cloudtrail_ingest")
        .foreachBatch(writer)
        .option("checkpointLocation", str(config.layout.checkpoint))
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


def run(config: IngestConfig, session: Callable[[], SparkSession]) -> RunReport:
    """One ingest run; `session` is called for the SparkSession only if there is work to do."""
    lake = config.layout
    partitions.recover(lake)  # a rebuild that died mid-swap is finished before anything reads the table
    checkpoint = CheckpointSnapshot.read(lake.checkpoint)
    checkpoint.check_matches(lake.events)
    report = RunReport(
        run_id=config.run_id,
        landing=config.landing,
        lake=config.lake,
        trigger=config.trigger,
        started_at=now_iso(),
        watermark_before=checkpoint.watermark.isoformat() if checkpoint.watermark else None,
        dedup_horizon=config.dedup_horizon,
    )
    try:
        replay = replay_entries(lake, config.replay) if config.replay else []
        files = plan_files(
            checkpoint, lake.manifests, config.landing, options.duration(config.source_retention), options.duration(config.settle),
            arrival_floor(options.duration(config.dedup_horizon), checkpoint.watermark),
            config.max_files_per_trigger, config.max_bytes_per_trigger, replay,
        )  # fmt: skip
        report.ledger = files.summary()
        if files.taken == 0 and files.pending == 0 and checkpoint.settled:
            # A streaming query would find nothing: skip Spark altogether.
            log.info("nothing new in %s since the last successful run; Spark not started", config.landing)
            report.swept_files = dict.fromkeys(TABLES, 0)
        else:
            spark = session()
            # Debris of a crashed attempt is swept before a compaction can age its neighbours out of the log.
            swept_before = sweep_lake(spark, lake)
            rows = transform(extract(spark, config), config, checkpoint.watermark)
            follow(load(rows, config, BatchWriter(spark, config, report)), report)
            # A successful run always leaves a clean table, whatever earlier crashed attempts left.
            swept_after = sweep_lake(spark, lake)
            report.swept_files = {table: swept_before[table] + swept_after[table] for table in swept_before}
        record_success(lake.checkpoint, files, last_commit(lake.checkpoint).batch_id)
        report.status = "succeeded"
    except Exception as exc:
        report.status, report.error = "failed", str(exc).splitlines()[0][:2000]
        raise
    finally:
        after = last_commit(lake.checkpoint).watermark
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

    def build() -> SparkSession:
        if config.gate_dates is not None:  # GX takes seconds to import: meanwhile the JVM starts and the batches run
            threading.Thread(target=validate_events.import_gx, daemon=True).start()
        return build_session(config)

    try:
        with LakeLock(config.layout), JobSession(build) as session:
            config.layout.gate_report(config.run_id).unlink(missing_ok=True)  # this attempt's verdict, or none
            report = run(config, session)
            if config.gate_dates is not None and gate.wrote_anything(report.totals()):
                lake = config.layout
                checked = validate_events.ValidateConfig(
                    lake, config.run_id, config.gate_dates, config.quarantine_threshold, lake.gate_report(config.run_id)
                )
                validate_events.check(for_table_reads(session()), checked)
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
