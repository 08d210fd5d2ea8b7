"""A lake written by an older pyspark goes on under this one: its checkpoint, de-duplication state and table logs
(tests/fixtures/make_older_lake.py wrote the fixture; the landing zone and lake come back at another path)."""

from __future__ import annotations

import tarfile
from datetime import timedelta
from pathlib import Path

from jobs.lake import Lake
from jobs.spark_logs import last_commit
from tests.helpers import DAY, deliver, duckdb_rows, events_of, ingest

OLDER_LAKE = Path(__file__).parent / "fixtures" / "lake-spark-4.2.0.tar.gz"


def rows(days: range) -> list[tuple[str, str]]:
    return sorted((f"d{day}-{i}", str((DAY + timedelta(days=day)).date())) for day in days for i in range(5))


def test_a_lake_written_by_pyspark_4_2_goes_on_exactly(spark, tmp_path):
    with tarfile.open(OLDER_LAKE) as tar:
        tar.extractall(tmp_path, filter="data")
    landing, lake = tmp_path / "landing", tmp_path / "lake"
    assert duckdb_rows(lake) == rows(range(3))
    batch = last_commit(Lake(lake).checkpoint).batch_id
    assert batch is not None

    deliver(landing, events_of(5, DAY + timedelta(days=2), "d2"), DAY + timedelta(days=2, hours=2))  # a re-delivery
    deliver(landing, events_of(5, DAY + timedelta(days=3), "d3"), DAY + timedelta(days=3, hours=1))
    report = ingest(spark, landing, lake)

    totals = report.totals()
    assert report.status == "succeeded" and report.swept_files == {"events": 0, "quarantine": 0}
    assert (totals["files_read"], totals["rows_written"], totals["duplicates_dropped"]) == (2, 5, 5), "the older state knew d2"
    assert duckdb_rows(lake) == rows(range(4))
    assert (last_commit(Lake(lake).checkpoint).batch_id or 0) > batch
    assert ingest(spark, landing, lake).totals()["files_read"] == 0
