"""De-duplication: its parts on small static frames, and `deduplicate` on its own as a stream."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from jobs.records.dedup import Dedup, deduplicate, raise_arrival_floor
from jobs.records.rows import mark_late
from jobs.spark.logs import last_commit

T = datetime(2024, 3, 1, tzinfo=UTC)
HORIZON = timedelta(hours=10)
DEDUP = Dedup(HORIZON)
ROWS = (
    "eventID string, eventTime timestamp, _reason string, _source_file string, _record_index long, _arrival_time timestamp, "
    "_ingest_run_id string"
)


def rows(spark, *values: tuple):
    return spark.createDataFrame([(*value, "run") for value in values], ROWS)


@pytest.mark.unit
def test_the_delay_is_half_the_horizon_and_the_floor_is_the_newest_committed_arrival():
    assert Dedup(timedelta(days=2)).delay == timedelta(days=1)
    assert DEDUP.arrival_floor(None) is None
    assert DEDUP.arrival_floor(T) == T + timedelta(hours=5)


@pytest.mark.unit
def test_arrivals_below_the_floor_are_raised_to_it_and_later_ones_kept(spark):
    frame = rows(spark, ("a", T, None, "f", 0, T), ("b", T, None, "f", 1, T + timedelta(hours=3)))
    raised = raise_arrival_floor(frame, T + timedelta(hours=2))
    arrivals = raised.select("eventID", F.date_format("_arrival_time", "HH:mm").alias("arrival"))
    assertDataFrameEqual(arrivals, [Row(eventID="a", arrival="02:00"), Row(eventID="b", arrival="03:00")])
    assert raise_arrival_floor(frame, None) is frame


@pytest.mark.unit
def test_events_delivered_longer_than_the_lateness_after_they_happened_are_late(spark):
    frame = rows(
        spark,
        ("on_time", T, None, "f", 0, T + timedelta(hours=1)),
        ("late", T, None, "f", 1, T + timedelta(hours=11)),
        ("quarantined", T, "missing_event_id", "f", 2, T + timedelta(hours=11)),
        ("no_time", None, "missing_event_time", "f", 3, T + timedelta(hours=11)),
    )
    flagged = mark_late(frame, HORIZON).select("eventID", "_late")
    assertDataFrameEqual(
        flagged,
        [
            Row(eventID="on_time", _late=False),
            Row(eventID="late", _late=True),
            Row(eventID="quarantined", _late=False),
            Row(eventID="no_time", _late=False),
        ],
    )


def test_deduplicate_as_a_stream_across_runs(spark, tmp_path: Path):
    """Three runs of one stream, each from its checkpoint's committed watermark, as the job runs it."""
    source, checkpoint = tmp_path / "rows", tmp_path / "checkpoint"
    out: list[list[tuple[str | None, int | None]]] = []

    def run(*values: tuple) -> None:
        rows(spark, *values).coalesce(1).write.mode("append").parquet(str(source))
        stream = spark.readStream.schema(ROWS).parquet(str(source))
        batches: list[tuple[str | None, int | None]] = []
        query = (
            deduplicate(stream, DEDUP, last_commit(checkpoint).watermark)
            .writeStream.foreachBatch(lambda batch, _: batches.extend((r.eventID, r._record_index) for r in batch.collect()))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        dropped = sum(op.numRowsDroppedByWatermark for p in query.recentProgress for op in p.stateOperators)
        assert dropped == 0, "no row is ever behind the watermark"
        out.append(sorted(batches, key=str))

    # Copies in one batch collapse; quarantined rows have keys of their own (file + position), so both stay.
    run(
        ("a", T, None, "f1", 0, T),
        ("a", T, None, "f2", 0, T + timedelta(hours=1)),
        ("b", T, None, "f1", 1, T),
        (None, None, "missing_event_id", "f1", 2, T),
        (None, None, "missing_event_id", "f1", 3, T),
    )
    # A copy 9 hours after the first, within the 10-hour horizon, is dropped; c moves arrivals on to T+20h.
    run(("a", T, None, "f3", 0, T + timedelta(hours=9)), ("c", T, None, "f3", 1, T + timedelta(hours=20)))
    # b's copy landed with an old arrival (T+14h) behind the committed watermark (T+15h): raised to the floor,
    # not dropped; 14 hours after the first copy, beyond the horizon, it is kept as the documented limit says.
    run(("b", T, None, "f4", 0, T + timedelta(hours=14)))
    assert out == [[("a", 0), ("b", 1), (None, 2), (None, 3)], [("c", 1)], [("b", 0)]]
