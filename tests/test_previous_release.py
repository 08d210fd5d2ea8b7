"""A lake the previous release wrote, opened by every command of this one (issue #68, versioned state).

tests/fixtures/make_previous_lake.py made the fixture with that release's commands (ingest, gate, activity, OCSF,
publish): its records name no format version, the activity job's state is downstream.json, its manifests keep each
file's SHA-256 under `fingerprint`. Every command of jobs.COMMANDS then runs on it, where it was copied to, and the lake
stays exact: each event once, the derived state under its job's name in the current format, the tables published.
"""

from __future__ import annotations

import dataclasses
import json
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobs.derived.state import STATE_FORMAT, built_dates
from jobs.lake import ACTIVITY, ACTIVITY_HOURLY, EVENT_DATE, OCSF_API_ACTIVITY, Lake
from jobs.publishing import command as publish
from jobs.quality import gate
from jobs.reporting.report import read_report
from jobs.storage import FORMAT
from jobs.tables.events import all_files
from tests.helpers import DAY, deliver, duckdb_rows, events_of, quarantine_rows, run_every_command, spark_table

PREVIOUS = Path(__file__).parent / "fixtures" / "lake-93b517d.tar.gz"


def expected(days: range) -> list[tuple[str, str]]:
    return sorted((f"d{day}-{i}", str((DAY + timedelta(days=day)).date())) for day in days for i in range(5))


@pytest.mark.harness  # every command in its own process (about a minute): `make test-harness`, beside test_migrate's
def test_every_command_of_this_release_runs_on_a_lake_the_previous_one_wrote(spark, tmp_path):
    with tarfile.open(PREVIOUS) as tar:
        tar.extractall(tmp_path, filter="data")
    landing, lake = tmp_path / "landing", tmp_path / "lake"
    layout = Lake(lake)
    assert duckdb_rows(lake) == expected(range(3))
    held = quarantine_rows(spark, lake)
    assert [reason for _, reason in held] == ["not_json"] and layout.quarantine.is_dir(), "its quarantine, a folder"
    assert (layout.checkpoints / "downstream.json").exists() and FORMAT not in json.loads(layout.validated.read_text())

    deliver(landing, events_of(5, DAY + timedelta(days=3), "d3"), DAY + timedelta(days=3, hours=1))
    deliver(landing, events_of(5, DAY + timedelta(days=2), "d2"), DAY + timedelta(days=2, hours=3), "again")  # copies
    lake_args, landing_args = ("--lake", str(lake)), ("--landing", str(landing))
    # Every command of jobs.COMMANDS; those that read a record of the previous release's first, before another rewrites it.
    run_every_command(
        spark,
        [
            ("activity", *lake_args, "--run-id", "derived"),
            ("publish", *lake_args),
            ("cloudtrail_ingest", *landing_args, *lake_args, "--run-id", "next", "--settle", "0 seconds"),
            ("validate_events", *lake_args, "--run-id", "next", "--quarantine-threshold", "0.1"),
            ("ocsf", *lake_args, "--run-id", "derived"),
            ("compact", *lake_args, "--closed-at", "2024-04-01", "--run-id", "compact"),
            ("rebuild", *landing_args, *lake_args, "--from-date", "2024-03-02", "--to-date", "2024-03-02"),
            ("repair", *lake_args, *landing_args),
            ("rescale", *lake_args, "--state-partitions", "3"),
            ("replay_quarantine", *landing_args, *lake_args, "--settle", "0 seconds"),
            ("activity", *lake_args, "--run-id", "derived-again"),
            ("publish", *lake_args, "--run-id", "last"),
            ("investigate", "calls_by_region_api", "--from-date", "2024-03-01", "--to-date", "2024-03-04", *lake_args),
        ],
        but=("migrate",),
    )  # fmt: skip; tests/test_migrate.py migrates this fixture to S3

    assert duckdb_rows(lake) == expected(range(4)), "each event once: the copies within the horizon dropped"
    assert quarantine_rows(spark, lake) == held and not layout.quarantine.exists(), "its quarantine, moved into the Iceberg table"
    assert (layout.replaced_tables("quarantine") / "folder" / "_spark_metadata").is_dir(), "the old folder kept aside"
    state = layout.derived_state(ACTIVITY)
    assert not (layout.checkpoints / "downstream.json").exists() and json.loads(state.read_text())[FORMAT] == STATE_FORMAT
    assert sorted(built_dates(layout, ACTIVITY)) == ["2024-03-01", "2024-03-02", "2024-03-03", "2024-03-04"]
    hourly = spark_table(spark, lake, "activity_hourly").groupBy(EVENT_DATE).sum("events").collect()
    assert sum(row[1] for row in hourly) == 20, "the activity table, now an Iceberg table, counts every event once"
    left = [*layout.table(ACTIVITY_HOURLY).glob("event_date=*"), *layout.table(OCSF_API_ACTIVITY).glob("region=*")]
    assert left == [] and not layout.replaced_tables(ACTIVITY_HOURLY).exists(), "the previous release's folders are gone"
    assert set(gate.validated(layout)) >= {"2024-03-01", "2024-03-02", "2024-03-03", "2024-03-04"}
    published = read_report(layout.publish_report("last"))
    assert published is not None and published["status"] == "succeeded", published

    # The folder's files the compaction and the rebuild took out of the table go with the publish's orphans once their
    # snapshots expired; the files the table still names stay, and nothing else of the folder (its old logs) is touched.
    folder_files = {path for path in layout.events.rglob("*.parquet") if not path.name.startswith(".")}
    named = all_files(layout)
    assert folder_files - named, "the compaction left folder files no snapshot of the branch ingest names"
    later = datetime.now(tz=UTC) + timedelta(days=30)
    config = dataclasses.replace(publish.parse_args(["--lake", str(lake), "--run-id", "orphans"]), expire_after=timedelta(0))
    assert publish.publish_tables(config, later).status == "succeeded"
    left = {path for path in layout.events.rglob("*.parquet") if not path.name.startswith(".")}
    assert left == folder_files & named and (layout.events / "_spark_metadata").is_dir()
    assert duckdb_rows(lake) == expected(range(4))
