"""A lake written by an older pyspark goes on under this one: its checkpoint, de-duplication state and table logs
(tests/fixtures/make_older_lake.py wrote the fixture; the landing zone and lake come back at another path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from datetime import UTC, timedelta
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq

from jobs.lake import Lake
from jobs.spark.logs import last_commit
from jobs.tables.events import all_files, event_dates, events_of_dates
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
    assert report.status == "succeeded"
    assert (totals["files_read"], totals["rows_written"], totals["duplicates_dropped"]) == (2, 5, 5), "the older state knew d2"
    assert duckdb_rows(lake) == rows(range(4))
    assert (last_commit(Lake(lake).checkpoint).batch_id or 0) > batch
    assert ingest(spark, landing, lake).totals()["files_read"] == 0
    assert_old_and_new_parquet_read_alike(spark, lake)


def assert_old_and_new_parquet_read_alike(spark, lake: Path) -> None:
    """The older files are INT96 and snappy, the new ones INT64 microseconds with eventTime statistics and zstd:
    Spark, pyarrow and DuckDB read every eventTime of both alike."""
    files = sorted(all_files(Lake(lake)))  # the earlier release's, registered in place, and the new ones
    kinds: dict[tuple[str, str, bool], set[str]] = {}
    for path in files:
        group = pq.ParquetFile(path).metadata.row_group(0)
        column = next(group.column(i) for i in range(group.num_columns) if group.column(i).path_in_schema == "eventTime")
        stored = (column.physical_type, column.compression, column.statistics is not None and column.statistics.has_min_max)
        kinds.setdefault(stored, set()).add(path.parent.name)
    assert kinds == {
        ("INT96", "SNAPPY", False): {"event_date=2024-03-01", "event_date=2024-03-02", "event_date=2024-03-03"},
        ("INT64", "ZSTD", True): {"event_date=2024-03-04"},
    }
    # As epoch seconds: PySpark hands naive local times, pyarrow UTC (naive for INT96), DuckDB a number.
    read = events_of_dates(spark, Lake(lake), event_dates(Lake(lake)))
    by_spark = sorted((r.eventID, int(r.eventTime.timestamp())) for r in read.select("eventID", "eventTime").collect())
    table = ds.dataset([str(path) for path in files], format="parquet").to_table(columns=["eventID", "eventTime"]).to_pylist()
    by_pyarrow = sorted((row["eventID"], int(row["eventTime"].replace(tzinfo=row["eventTime"].tzinfo or UTC).timestamp())) for row in table)
    # DuckDB unifies INT96 (no time zone) and INT64 (UTC) files through the process's local time zone: in UTC, as README says.
    query = f"select eventID, epoch(eventTime)::bigint from read_parquet({[str(path) for path in files]!r})"
    quiet = "db = duckdb.connect(); db.execute('SET enable_progress_bar = false')"  # its bar would go to stdout
    script = f"import duckdb, json; {quiet}; print(json.dumps(db.execute({query!r}).fetchall()))"
    answer = subprocess.run([sys.executable, "-c", script], env={**os.environ, "TZ": "UTC"}, capture_output=True, text=True, check=True)
    by_duckdb = sorted((i, t) for i, t in json.loads(answer.stdout))
    assert by_spark == by_pyarrow == by_duckdb and len(by_spark) == 20
