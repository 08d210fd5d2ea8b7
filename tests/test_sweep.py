"""The sweep and the commit log's retention: the directory is the committed table, the log stays small."""

from __future__ import annotations

import shutil
import time
from datetime import timedelta
from pathlib import Path

from jobs.lake import Lake
from jobs.spark.sinks import ParquetSink
from jobs.tables.sweep import sweep_lake, table_files
from tests.helpers import DAY, deliver, duckdb_rows, events_of, ingest

ONE_FILE_PER_BATCH = {"max_files_per_trigger": 1, "max_bytes_per_trigger": None}


def deliver_hours(landing: Path, hours: range) -> None:
    for hour in hours:
        deliver(landing, events_of(5, DAY + timedelta(hours=hour), f"h{hour}"), DAY + timedelta(hours=hour, minutes=10))


def logged(spark, lake: Path) -> set[Path]:
    return set(ParquetSink(spark, str(lake / "events"), []).logged_files())


def plant_debris(lake: Path, like: Path, name: str) -> Path:
    """A data file as a crashed batch leaves it: in a partition folder, written now, in no log entry."""
    debris = like.with_name(name)
    shutil.copyfile(like, debris)
    return debris


def test_files_that_aged_out_of_the_log_stay_and_debris_is_moved(spark, landing, lake):
    deliver_hours(landing, range(5))
    ingest(spark, landing, lake, **ONE_FILE_PER_BATCH, table_log_retention="1 second")
    time.sleep(1.5)
    deliver_hours(landing, range(5, 11))
    # batches 5..10: the compaction at batch 9 drops the entries older than the retention
    report = ingest(spark, landing, lake, **ONE_FILE_PER_BATCH, table_log_retention="1 second")

    files = table_files(lake / "events")
    assert logged(spark, lake) < files, "the compaction should have aged the first run's files out of the log"
    assert report.swept_files == {"events": 0}
    expected = sorted((f"h{h}-{i}", str((DAY + timedelta(hours=h, minutes=i)).date())) for h in range(11) for i in range(5))
    assert duckdb_rows(lake) == expected
    assert sorted((r.eventID, str(r.event_date)) for r in spark.read.parquet(str(lake / "events")).collect()) == expected

    debris = plant_debris(lake, min(logged(spark, lake)), "part-99999-debris.c000.snappy.parquet")
    assert sweep_lake(spark, Lake(lake)) == {"events": 1}
    assert not debris.exists() and list((lake / "_swept" / "events").rglob(debris.name))
    assert table_files(lake / "events") == files
    assert duckdb_rows(lake) == expected


def test_a_run_sweeps_debris_before_its_batches_move_the_horizon(spark, landing, lake):
    deliver_hours(landing, range(3))
    ingest(spark, landing, lake, **ONE_FILE_PER_BATCH, table_log_retention="1 second")
    debris = plant_debris(lake, min(table_files(lake / "events")), "part-99999-crashed.c000.snappy.parquet")
    time.sleep(1.5)
    deliver_hours(landing, range(3, 12))
    report = ingest(spark, landing, lake, **ONE_FILE_PER_BATCH, table_log_retention="1 second")
    assert report.swept_files["events"] == 1 and not debris.exists()
    assert len(duckdb_rows(lake)) == 12 * 5


def test_the_sweep_never_moves_a_committed_file(spark, landing, lake):
    deliver_hours(landing, range(4))
    ingest(spark, landing, lake, **ONE_FILE_PER_BATCH)
    files = table_files(lake / "events")
    assert files == logged(spark, lake)
    assert sweep_lake(spark, Lake(lake)) == {"events": 0}
    assert table_files(lake / "events") == files
