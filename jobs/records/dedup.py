"""De-duplication: what makes two rows one event, for how long a copy is recognised, and the DataFrame steps that
apply it (the ledger, which plans the files, and the stream, which drops the copies, both ask here).

The stream's watermark runs on arrival time, not event time, so a late event is kept: `deduplicate` on the stream,
`keep_first_copy` on a rebuild's static frame, `first_in_table` over the events table's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from jobs import options


@dataclass(frozen=True)
class Dedup:
    """Rows sharing `key` are one event; a copy arriving within `horizon` of the first is dropped."""

    horizon: timedelta = options.duration(options.DEDUP_HORIZON)
    key: str = "eventID"

    @property
    def delay(self) -> timedelta:
        """The withWatermark delay: half the horizon.

        Spark keeps a key until the watermark (newest arrival minus the delay) reaches the key's
        arrival plus the delay, so copies are collapsed when they arrive less than twice the delay
        apart. Half the horizon collapses copies within the horizon and holds one horizon of keys
        in state, not two."""
        return self.horizon / 2

    def arrival_floor(self, committed_watermark: datetime | None) -> datetime | None:
        """The newest arrival the checkpoint has committed (watermark + delay); None before the first batch.

        No file taken later arrives before it (jobs/ledger/planner.py), so none is dropped by the watermark."""
        return committed_watermark + self.delay if committed_watermark else None


def raise_arrival_floor(rows: DataFrame, floor: datetime | None) -> DataFrame:
    """Lift arrival times below `floor` up to it. A file that landed with an old modification
    time (a copy that preserved mtimes, clock skew) is then neither dropped by the watermark
    nor given a shorter de-duplication horizon than any other file. See docs/design.md."""
    if floor is None:
        return rows
    return rows.withColumn("_arrival_time", F.greatest(F.col("_arrival_time"), F.lit(floor).cast("timestamp")))


def mark_dedup_key(rows: DataFrame, dedup: Dedup) -> DataFrame:
    """Good rows are de-duplicated on the event's key; quarantined rows get a key of their own (file,
    position and run), so they are never collapsed into each other, nor into an earlier read of
    their file (a replay), which they replace."""
    position = F.coalesce(F.col("_record_index").cast("string"), F.lit("file"))
    own_key = F.concat(F.lit("!"), F.col("_source_file"), F.lit("#"), position, F.lit("@"), F.col("_ingest_run_id"))
    return rows.withColumn("_dedup_key", F.when(F.col("_reason").isNull(), F.col(dedup.key)).otherwise(own_key))


def deduplicate(rows: DataFrame, dedup: Dedup, committed_watermark: datetime | None) -> DataFrame:
    """Each event once: a copy arriving within the horizon of the first is dropped.

    The watermark runs on arrival time (`_arrival_time`), not event time, so late events are
    kept; `committed_watermark` is the one the checkpoint holds (None before the first batch).
    Works on a stream; on a static frame it drops every copy.
    """
    return (
        rows.transform(raise_arrival_floor, dedup.arrival_floor(committed_watermark))
        .transform(mark_dedup_key, dedup)
        .transform(drop_copies, dedup)
    )


def drop_copies(rows: DataFrame, dedup: Dedup) -> DataFrame:
    """The stateful step: a row whose `_dedup_key` arrived less than the delay before is dropped. The state keeps
    each key until its arrival plus the delay (jobs/upkeep/rescale.py writes it anew from those expiries)."""
    delay_ms = int(dedup.delay.total_seconds() * 1000)
    return rows.withWatermark("_arrival_time", f"{delay_ms} milliseconds").dropDuplicatesWithinWatermark(["_dedup_key"])


def keep_first_copy(events: DataFrame, dedup: Dedup) -> DataFrame:
    """Each event once, on a static frame (a rebuild): of the rows sharing a key, the
    first to arrive, then by file and position. Copies share their eventTime, hence their
    event date, so a rebuild of whole dates sees every copy."""
    first = Window.partitionBy(dedup.key).orderBy(
        F.col("_arrival_time").asc_nulls_last(), F.col("_source_file"), F.col("_record_index").asc_nulls_last()
    )
    return events.withColumn("_copy", F.row_number().over(first)).where(F.col("_copy") == 1).drop("_copy")


def first_in_table(events: DataFrame, dedup: Dedup) -> DataFrame:
    """Each event once, over rows of the events table: of the rows sharing a key (a copy re-delivered after the
    horizon), the first ingested, then by file."""
    first = Window.partitionBy(dedup.key).orderBy(F.col("_ingest_time").asc_nulls_last(), F.col("_source_file"))
    return events.withColumn("_copy", F.row_number().over(first)).where(F.col("_copy") == 1).drop("_copy")
