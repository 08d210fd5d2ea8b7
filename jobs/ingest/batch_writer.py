"""The streaming query's foreachBatch body: one batch's statistics, then its two outputs, each written
exactly once per batch id by Spark's file sink (jobs/sinks.py): the quarantine (with the rows it keeps
from the quarantine files its reads replace, jobs/quarantine.py), then the events."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.ingest.config import IngestConfig
from jobs.lake import EVENT_DATE, REASON
from jobs.landing import place
from jobs.ledger import record_late_files
from jobs.quarantine import Replacement
from jobs.report import BatchStats, RunReport
from jobs.sinks import ParquetSink
from jobs.spark_logs import batch_time, local_path
from jobs.transforms import implausible_event_time, split_events, split_quarantine, stamp_ingest_time


@dataclass
class BatchFigures:
    """What one batch holds, counted in one aggregation over it."""

    written: Counter[str] = field(default_factory=Counter)  # rows per event date
    quarantined: Counter[str] = field(default_factory=Counter)  # rows per reason
    late: int = 0
    implausible: int = 0
    late_per_date: Counter[str] = field(default_factory=Counter)
    late_files: dict[str, set[str]] = field(default_factory=dict)  # per event date, the files that held its late events
    newest: dict[str, str] = field(default_factory=dict)  # per "account/region", the newest plausible eventTime written
    future: Counter[str] = field(default_factory=Counter)  # per "account/region", events dated after the batch (+ skew)

    def stats(self, batch_id: int, already_committed: bool) -> BatchStats:
        return BatchStats(
            batch_id, dict(self.written), dict(self.quarantined), already_committed, late_events=self.late,
            implausible_event_times=self.implausible, late_per_event_date=dict(self.late_per_date),
            newest_event_times=self.newest, future_dated_events=dict(self.future),
        )  # fmt: skip


def batch_figures(rows: DataFrame, ingested_at: datetime, clock_skew: timedelta) -> BatchFigures:
    """Per event date, reason and file: rows, late events, implausible and future-dated event times, the newest plausible one.

    An event dated after the batch (plus the clock skew allowance) is forged or from a wrong clock: it is counted,
    and never taken for a place's newest event, which the lake page's freshness alarm rests on. The batch's time
    is a literal here: this small stage over the cached batch is compiled again each batch (the parse's is not)."""
    plausible = F.col("eventTime") <= F.lit(ingested_at + clock_skew)
    counts = rows.groupBy("_reason", EVENT_DATE, "_source_file").agg(
        F.count(F.lit(1)).alias("rows"),
        F.count_if("_late").alias("late"),
        F.count_if(implausible_event_time(F.col("eventTime"), F.col("_arrival_time"))).alias("implausible"),
        F.date_format(F.max(F.when(plausible, F.col("eventTime"))), "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("newest"),  # UTC
        F.count_if(~plausible).alias("future_dated"),
    )
    figures = BatchFigures()
    for row in counts.collect():
        day = str(row[EVENT_DATE])
        figures.late += row["late"]
        figures.implausible += row["implausible"]
        if row["late"]:
            figures.late_files.setdefault(day, set()).add(row["_source_file"])
            figures.late_per_date[day] += row["late"]
        if row["_reason"] is not None:
            figures.quarantined[row["_reason"]] += row["rows"]
            continue
        figures.written[day] += row["rows"]
        where = place(local_path(row["_source_file"]))
        if where is None:
            continue
        key = "/".join(where)
        if row["newest"] is not None:
            figures.newest[key] = max(row["newest"], figures.newest.get(key, row["newest"]))
        figures.future[key] += row["future_dated"]
    figures.future = +figures.future  # places with none are left out
    return figures


class BatchWriter:
    """foreachBatch body: count the batch, then write quarantine, then events, each exactly once per batch id."""

    def __init__(self, spark: SparkSession, config: IngestConfig, report: RunReport) -> None:
        self.spark, self.lake, self.report = spark, config.lake, report
        retention_ms = int(config.table_log_retention.total_seconds() * 1000)
        self.events = ParquetSink(spark, str(config.lake.events), [EVENT_DATE], retention_ms)
        self.quarantine = ParquetSink(spark, str(config.lake.quarantine), [REASON], retention_ms)
        self.clock_skew = config.clock_skew

    def __call__(self, rows: DataFrame, batch_id: int) -> None:
        already_committed = self.events.is_committed(batch_id) and self.quarantine.is_committed(batch_id)
        replacement = Replacement(self.spark, self.lake, batch_id, self.quarantine.is_committed(batch_id))
        ingested_at = batch_time(self.lake.checkpoint, batch_id)
        # The batch is computed once (parse, de-duplication) and read three times: counted, then each
        # output written. In memory: on local disk (DISK_ONLY) the runs were no faster and the
        # driver's heap after GC no smaller (BENCHMARKS.md, "Throughput against plain Spark").
        rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            figures = batch_figures(rows, ingested_at, self.clock_skew)
            stamped = rows.transform(stamp_ingest_time, ingested_at)
            self.quarantine.add_batch(batch_id, replacement.add_kept(split_quarantine(stamped)))
            replacement.finish()
            record_late_files(self.lake.late_files, batch_id, {day: sorted(files) for day, files in figures.late_files.items()})
            self.events.add_batch(batch_id, split_events(stamped))
        finally:
            rows.unpersist(blocking=True)  # gone before the next batch is cached
        self.report.batches.append(figures.stats(batch_id, already_committed))
