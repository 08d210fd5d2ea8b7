"""The ingest's rows as the tables take them (pure DataFrame -> DataFrame steps): the late flag, the ingest time,
the quarantine's columns, and the one positional row both tables are written from (WRITER_ROW).

deduplicated rows --mark_late----------> flags events delivered long after they happened
                  --table_rows---------> WRITER_ROW, stamped with the batch's ingest time, for the one write of both
                                         tables (jobs/sinks.write_tables); a rebuild takes split_quarantine, and
                                         writes its events as event_rows.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.lake import EVENT_DATE, REASON
from jobs.records.schema import EVENTS_SCHEMA, QUARANTINE_SCHEMA


def stamp_ingest_time(rows: DataFrame, at: datetime | None = None) -> DataFrame:
    """_ingest_time: `at`, or the time the query runs.

    The stream stamps its batch's time after the batch is computed, not in normalize_records: Spark
    writes a timestamp literal into the generated code, and a new one each batch in the parse's
    stage made Spark compile that whole stage, and the JIT warm it, anew (BENCHMARKS.md)."""
    return rows.withColumn("_ingest_time", F.lit(at) if at else F.current_timestamp())


def mark_late(rows: DataFrame, lateness: timedelta) -> DataFrame:
    """Flag events delivered more than `lateness` after they happened (an event-time
    watermark of that delay would have dropped them; this job keeps them)."""
    late = F.col("eventTime") < F.col("_arrival_time") - F.lit(lateness)
    return rows.withColumn("_late", F.coalesce(late & F.col("_reason").isNull(), F.lit(False)))


# CloudTrail began on 13 November 2013; no event it delivers happened before.
FIRST_EVENT_TIME = datetime(2013, 11, 13, tzinfo=UTC)


def implausible_event_time(event_time: Column, seen: Column) -> Column:
    """An event time CloudTrail cannot have written: before it existed, or more than a day after the
    record was seen (`seen`: its arrival, or its ingest). Such events are kept, as evidence, and counted."""
    return (event_time < F.lit(FIRST_EVENT_TIME)) | (event_time > seen + F.lit(timedelta(days=1)))


def _quarantine_columns() -> dict[str, Column]:
    """The quarantine table's columns, from a batch's rows, in table column order."""
    return {
        "source_file": F.col("_source_file"),
        "record_index": F.col("_record_index").cast("int"),
        "record": F.col("_record_text"),
        "detail": F.col("_detail"),
        "_ingest_run_id": F.col("_ingest_run_id"),
        "_ingest_time": F.col("_ingest_time"),
        REASON: F.col("_reason"),
    }


def split_quarantine(rows: DataFrame) -> DataFrame:
    """The rows that go to quarantine, with their reason."""
    return rows.where(F.col("_reason").isNotNull()).select(*(column.alias(name) for name, column in _quarantine_columns().items()))


# A table's columns in its files: all of them, its partition column too (the event date, the reason), so a reader of
# the files alone, or one that takes a column's values from the file only (pyiceberg 0.12 with a filter on a column it
# does not select), reads them as the table holds them.
EVENTS_DATA = EVENTS_SCHEMA.fieldNames()
QUARANTINE_DATA = QUARANTINE_SCHEMA.fieldNames()


# A row as jobs/java/cloudtrail/TableWriter.java takes it, by position (its ROW_* ordinals: a test holds them to this):
# the events row (a struct of the table's data columns) or null, the quarantine's likewise, the partition values,
# then what the batch's figures count.
WRITER_ROW = ("events", "quarantine", EVENT_DATE, REASON, "_source_file", "eventTime", "_late", "implausible", "future_dated", "counted")


def _writer_row(columns: dict[str, Column]) -> list[Column]:
    return [columns[name].alias(name) for name in WRITER_ROW]


def table_rows(rows: DataFrame, ingested_at: datetime, clock_skew: timedelta) -> DataFrame:
    """A batch's rows as both tables take them in one write (jobs/sinks.write_tables, as WRITER_ROW): the events
    table's row or the quarantine's, the partition values, and what the batch's figures count: the source file,
    the event time, and whether the event is late, implausible, or dated after the batch by more than `clock_skew`
    (future-dated: counted, never a place's newest event)."""
    event = F.col("_reason").isNull()
    quarantine = _quarantine_columns()
    stamped = rows.transform(stamp_ingest_time, ingested_at)
    return stamped.select(
        *_writer_row(
            {
                "events": F.when(event, F.struct(*EVENTS_DATA)),
                "quarantine": F.when(~event, F.struct(*(quarantine[name].alias(name) for name in QUARANTINE_DATA))),
                EVENT_DATE: F.col(EVENT_DATE),
                REASON: F.col("_reason"),
                "_source_file": F.col("_source_file"),
                "eventTime": F.col("eventTime"),
                "_late": F.col("_late"),
                "implausible": implausible_event_time(F.col("eventTime"), F.col("_arrival_time")),
                "future_dated": F.col("eventTime") > F.lit(ingested_at + clock_skew),
                "counted": F.lit(True),
            }
        )
    )


def event_rows(events: DataFrame) -> DataFrame:
    """Events of whole dates (a rebuild's, in the events table's columns) as WRITER_ROW: written as the ingest writes its
    batches, not counted in any batch's figures."""
    return events.select(
        *_writer_row(
            {
                "events": F.struct(*EVENTS_DATA),
                "quarantine": F.lit(None).cast(QUARANTINE_SCHEMA),
                EVENT_DATE: F.col(EVENT_DATE),
                REASON: F.lit(None).cast("string"),
                "_source_file": F.col("_source_file"),
                "eventTime": F.col("eventTime"),
                **{flag: F.lit(False) for flag in ("_late", "implausible", "future_dated", "counted")},
            }
        )
    )


def kept_rows(kept: DataFrame) -> DataFrame:
    """Quarantine rows a batch keeps from the files its reads replace (jobs/tables/quarantine.py), as WRITER_ROW: written
    with the batch, not counted in its figures."""
    return kept.select(
        *_writer_row(
            {
                "events": F.lit(None).cast(EVENTS_SCHEMA),
                "quarantine": F.struct(*QUARANTINE_DATA),
                EVENT_DATE: F.lit(None).cast("date"),
                REASON: F.col(REASON),
                "_source_file": F.col("source_file"),
                "eventTime": F.lit(None).cast("timestamp"),
                **{flag: F.lit(False) for flag in ("_late", "implausible", "future_dated", "counted")},
            }
        )
    )
