"""A folder lake moved to a lake in S3 (moto's) by `python -m jobs.migrate`: its tables of record, checkpoint,
de-duplication state, ledger and reports, exactly; the folder then refuses writers, naming where the lake went."""

from __future__ import annotations

import json
import tarfile
from datetime import UTC, datetime, timedelta

import pytest

from jobs import COMMANDS
from jobs.iceberg.catalog import open_catalog
from jobs.lake import Lake
from jobs.tables.record_files import INGEST_BATCH
from tests.helpers import (
    catalog_rows,
    command,
    deliver,
    duckdb_rows,
    events_of,
    quarantine_rows,
    refusal,
    run_command,
    succeeded,
)
from tests.test_previous_release import PREVIOUS, expected
from tests.test_s3_lake import keys

pytestmark = pytest.mark.integration

DAY = datetime(2024, 3, 1, tzinfo=UTC)


def rows(*groups: tuple[str, int, int]) -> list[tuple[str, str]]:
    return sorted((f"{prefix}-{i}", str((DAY + timedelta(days=day)).date())) for prefix, n, day in groups for i in range(n))


@pytest.mark.harness
def test_a_folder_lake_migrated_to_s3_goes_on_there_exactly_and_the_folder_refuses_writers(s3_lake, landing, tmp_path):
    folder = tmp_path / "lake"
    run = ("jobs.cloudtrail_ingest", "--landing", landing, "--settle", "0 seconds")
    deliver(landing, events_of(20, DAY, "a"), DAY + timedelta(hours=1))
    succeeded(command(*run, "--lake", folder, "--run-id", "first"))
    succeeded(command("jobs.validate_events", "--lake", folder, "--run-id", "first"))
    deliver(landing, events_of(5, DAY + timedelta(days=1), "b"), DAY + timedelta(hours=2))
    succeeded(command(*run, "--lake", folder, "--run-id", "second"))
    succeeded(command("jobs.validate_events", "--lake", folder, "--run-id", "second"))
    succeeded(command("jobs.publish", "--lake", folder, "--run-id", "second"))  # main: what the gate passed
    before = duckdb_rows(folder)
    assert before == rows(("a", 20, 0), ("b", 5, 1))

    moved = command("jobs.migrate", "--lake", folder, "--to", s3_lake, "--catalog", "records")
    succeeded(moved)
    summary = json.loads(moved.stdout)
    assert summary["moved_to"] == s3_lake and summary["files"] > 10 and summary["manifests_relocated"] == 2, summary
    held = set(keys(s3_lake))
    assert not {key for key in held if key.endswith((".crc", "catalog.db"))} and "_checkpoints/migration.json" not in held
    assert {key for key in held if key.startswith("_checkpoints/ingest/state/")}, "the de-duplication state moved"
    assert catalog_rows(s3_lake, "records") == before and catalog_rows(s3_lake, "records", "main") == before
    from pyiceberg.table import StaticTable

    from jobs.iceberg.embedded import registered

    table = open_catalog(Lake.at(s3_lake, "records"), "records").load_table("cloudtrail.events")
    batch = StaticTable.from_metadata(str(registered(Lake(folder), "events").metadata_location)).properties[INGEST_BATCH]
    assert table.properties[INGEST_BATCH] == batch and table.location().startswith(s3_lake), table.properties
    assert all(task.file.file_path.startswith(s3_lake) for task in table.scan().plan_files()), "every file the lake's copy"

    # The folder: kept as it was, no writer starts on it; a second migration does nothing.
    assert duckdb_rows(folder) == before
    deliver(landing, events_of(5, DAY + timedelta(days=1), "b") + events_of(3, DAY + timedelta(days=1), "c"), DAY + timedelta(hours=3))
    assert s3_lake in refusal(command(*run, "--lake", folder, "--run-id", "stale"))
    again = command("jobs.migrate", "--lake", folder, "--to", s3_lake, "--catalog", "records")
    assert "nothing to do" in succeeded(again)

    # On S3: the copies of events it took before are dropped (its state moved), no manifest is read again, the new
    # events come in once.
    third = command(*run, "--lake", s3_lake, "--catalog", "records", "--run-id", "third")
    succeeded(third)
    assert catalog_rows(s3_lake, "records") == rows(("a", 20, 0), ("b", 5, 1), ("c", 3, 1))
    report = json.loads(Lake.at(s3_lake, "records").ingest_report("third").read_text())
    assert (report["files_read"], report["duplicates_dropped"]) == (1, 5), report


def test_a_migration_is_refused_in_one_line_to_a_location_that_holds_files_or_from_a_lake_not_ready(s3_lake, landing, tmp_path):
    folder = tmp_path / "lake"
    deliver(landing, events_of(3, DAY, "a"), DAY + timedelta(hours=1))
    succeeded(command("jobs.cloudtrail_ingest", "--landing", landing, "--lake", folder, "--settle", "0 seconds"))
    taken = tmp_path / "taken"
    (taken / "x").mkdir(parents=True)
    assert "holds files already" in refusal(command("jobs.migrate", "--lake", folder, "--to", taken))
    (folder / "quarantine" / "reason=not_json").mkdir(parents=True)  # an earlier release's quarantine folder
    line = refusal(command("jobs.migrate", "--lake", folder, "--to", s3_lake, "--catalog", "records"))
    assert "not ready to migrate" in line and "the ingest moves it" in line, line
    assert keys(s3_lake) == [], "nothing written"


@pytest.mark.harness
def test_the_previous_release_lake_migrated_to_s3_runs_every_command_there_exactly(spark, s3_lake, tmp_path):
    """tests/fixtures' lake of the previous release: its folders converted by this release's commands (the migration
    refuses them before), moved to S3, then every other command on it there; each event once, its quarantine kept."""
    with tarfile.open(PREVIOUS) as tar:
        tar.extractall(tmp_path, filter="data")
    landing, folder = tmp_path / "landing", tmp_path / "lake"
    assert "not ready to migrate" in refusal(command("jobs.migrate", "--lake", folder, "--to", s3_lake, "--catalog", "records"))
    held = quarantine_rows(spark, folder)
    folder_args, landing_args = ("--lake", str(folder)), ("--landing", str(landing))
    for name, *argv in [("activity", *folder_args, "--run-id", "derived"), ("ocsf", *folder_args, "--run-id", "derived"),
                        ("cloudtrail_ingest", *landing_args, *folder_args, "--run-id", "upgrade", "--settle", "0 seconds")]:  # fmt: skip
        assert run_command(spark, name, argv) == 0, name
    succeeded(command("jobs.migrate", *folder_args, "--to", s3_lake, "--catalog", "records"))
    assert catalog_rows(s3_lake, "records") == expected(range(3))

    deliver(landing, events_of(5, DAY + timedelta(days=3), "d3"), DAY + timedelta(days=3, hours=1))
    deliver(landing, events_of(5, DAY + timedelta(days=2), "d2"), DAY + timedelta(days=2, hours=3), "again")  # copies
    lake_args = ("--lake", s3_lake, "--catalog", "records")
    # Each in a process of its own: the suite's JVM started before moto's keys were in the environment.
    steps = [
        ("cloudtrail_ingest", *landing_args, *lake_args, "--run-id", "next", "--settle", "0 seconds"),
        ("validate_events", *lake_args, "--run-id", "next", "--quarantine-threshold", "0.1"),
        ("activity", *lake_args, "--run-id", "derived"),
        ("ocsf", *lake_args, "--run-id", "derived"),
        ("compact", *lake_args, "--closed-at", "2024-04-01", "--run-id", "compact"),
        ("rebuild", *landing_args, *lake_args, "--from-date", "2024-03-02", "--to-date", "2024-03-02"),
        ("repair", *lake_args, *landing_args),
        ("rescale", *lake_args, "--state-partitions", "3"),
        ("replay_quarantine", *landing_args, *lake_args, "--settle", "0 seconds"),
        ("publish", *lake_args, "--run-id", "last"),
        ("investigate", "calls_by_region_api", "--from-date", "2024-03-01", "--to-date", "2024-03-04", *lake_args),
    ]  # fmt: skip
    assert {name for name, *_ in steps} | {"migrate"} == set(COMMANDS)
    for name, *argv in steps:
        succeeded(command(f"jobs.{name}", *argv))
    assert catalog_rows(s3_lake, "records") == expected(range(4)), "each event once: the copies within the horizon dropped"
    assert catalog_rows(s3_lake, "records", "main") == expected(range(4)), "every date gated and published"
    assert [reason for _, reason in held] == ["not_json"]
    table = open_catalog(Lake.at(s3_lake, "records"), "records").load_table("cloudtrail.quarantine")
    assert table.scan().to_arrow().num_rows == len(held), "its quarantine moved with it"
    activity = open_catalog(Lake.at(s3_lake, "records"), "records").load_table("cloudtrail.activity_hourly")
    assert sum(activity.scan().to_arrow().column("events").to_pylist()) == 20, "the derived tables built anew there"


def test_a_migration_that_died_as_it_ended_is_finished_by_running_it_again(tmp_path):
    """The folder's note written, the target's not yet removed: the target refused every writer until run again."""
    from jobs.lock import MIGRATION_FORMAT
    from jobs.storage import write_record
    from jobs.upkeep import migrate

    old, new = Lake(tmp_path / "old"), Lake(tmp_path / "new")
    note = {"from": old.location, "to": new.location}
    write_record(old.migration, MIGRATION_FORMAT, note | {"done": True})
    write_record(new.migration, MIGRATION_FORMAT, note | {"done": False})
    assert migrate.main(["--lake", str(old.root), "--to", str(new.root)]) == 0
    assert not new.migration.exists() and old.migration.exists()
