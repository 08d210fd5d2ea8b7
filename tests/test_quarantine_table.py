"""The quarantine, an Iceberg table of record: each batch one snapshot naming it, a rebuild's change staged until its
events are swapped, a rollback in one snapshot, a moved lake's table registered where it is (issue #78)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest

from jobs.iceberg.catalog import NAMESPACE, open_catalog
from jobs.iceberg.embedded import registered
from jobs.iceberg.spark_tables import staged_by
from jobs.lake import QUARANTINE, Lake
from jobs.spark.logs import last_commit, sink_batch
from jobs.tables.events import unfinished_rebuild
from jobs.upkeep import rebuild
from jobs.upkeep.rebuild import RebuildConfig
from tests.helpers import DAY, command, deliver, duckdb_rows, event, events_of, ingest, quarantine_rows, succeeded


def table(lake: Path):
    return open_catalog(Lake.at(lake), None).load_table(f"{NAMESPACE}.quarantine")


def two_quarantined(landing: Path) -> None:
    deliver(landing, events_of(3, DAY, "a"), DAY + timedelta(hours=1))
    deliver(landing, [event("", DAY + timedelta(hours=2)), *events_of(1, DAY, "b")], DAY + timedelta(hours=3))
    bad = landing / "AWSLogs/111122223333/CloudTrail/us-east-1/2024/03/01/111122223333_CloudTrail_us-east-1_20240301T0400Z_bad.json.gz"
    bad.write_bytes(b"\x1f\x8b not gzip at all")


def test_each_batch_is_one_snapshot_naming_the_stream_and_the_batch_and_files_are_the_tables_own(spark, landing, lake):
    two_quarantined(landing)
    ingest(spark, landing, lake)
    assert sorted(reason for _, reason in quarantine_rows(spark, lake)) == ["corrupt_gzip", "missing_event_id"]
    quarantine = table(lake)
    snapshot = quarantine.current_snapshot()
    assert snapshot.summary["cloudtrail.batch"] == "0" and snapshot.summary["cloudtrail.query"], snapshot.summary
    assert quarantine.properties["cloudtrail.ingest-batch"] == "1", "the batch without data is recorded too"
    assert quarantine.location() == str(Lake(lake).iceberg_warehouse / NAMESPACE / "quarantine")
    assert not Lake(lake).quarantine.exists(), "no quarantine folder beside the events"
    # pyiceberg reads it as Spark's catalog does, the reason in every file and in the partition.
    assert sorted(quarantine.scan().to_arrow().column("reason").to_pylist()) == ["corrupt_gzip", "missing_event_id"]
    # A run with nothing new reads the batch the table holds without pyiceberg, and so without pyarrow.
    probe = ("import sys; from jobs.lake import Lake; from jobs.tables.quarantine_files import quarantine_batch; "
             f"print(quarantine_batch(Lake.at({str(lake)!r})), sorted({{'pyiceberg', 'pyarrow'}} & set(sys.modules)))")  # fmt: skip
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split() == ["1", "[]"]


def test_a_rebuild_stages_its_quarantine_until_its_events_are_swapped_and_a_rollback_undoes_it(spark, landing, lake, monkeypatch):
    two_quarantined(landing)
    ingest(spark, landing, lake)
    before, events = quarantine_rows(spark, lake), duckdb_rows(lake)
    # The quarantined record's file is read again: its row goes and comes back, staged as one overwrite of its reason.
    config = RebuildConfig(landing=str(landing), lake=str(lake), dates=(date(2024, 3, 1),), run_id="rb")

    def dies(*_):  # the rebuild dies once its events are committed, before its quarantine is made current
        raise SystemExit("killed")

    monkeypatch.setattr(rebuild, "publish_staged", dies)
    with pytest.raises(SystemExit):
        rebuild.run(config, lambda: spark)
    monkeypatch.undo()
    assert unfinished_rebuild(Lake(lake)) is not None, "the events' commit names what is left to do"
    assert table(lake).current_snapshot().summary.get("wap.id") is None, "readers do not see the staged snapshot yet"

    ingest(spark, landing, lake)  # the next run finishes it before it reads anything
    assert staged_by(table(lake).current_snapshot().summary) == "rb", "the rebuild's staged snapshot, now current"
    assert quarantine_rows(spark, lake) == before and duckdb_rows(lake) == events

    assert rebuild.main(["--lake", str(lake), "--rollback", "rb"]) == 0
    assert table(lake).current_snapshot().summary.get("cloudtrail.rollback") == "rb"
    assert quarantine_rows(spark, lake) == before, "the reasons as they stood before the rebuild, the later rows kept"


def test_a_moved_lake_registers_its_quarantine_where_it_is_and_goes_on(spark, landing, lake, tmp_path):
    two_quarantined(landing)
    ingest(spark, landing, lake)
    before = quarantine_rows(spark, lake)
    moved = tmp_path / "elsewhere" / "lake"
    moved.parent.mkdir()
    shutil.move(lake, moved)
    entry = registered(Lake.at(moved), QUARANTINE)
    assert entry is not None and entry.moved_from is not None, "its metadata names the old path"
    assert quarantine_rows(spark, moved) == before, "read where it is, before any command registers it"

    deliver(landing, [event("", DAY + timedelta(days=1))], DAY + timedelta(days=1, hours=1))
    ingest(spark, landing, moved)
    assert registered(Lake.at(moved), QUARANTINE).moved_from is None
    committed = last_commit(Lake(moved).checkpoint).batch_id
    assert table(moved).location().startswith(str(moved)) and table(moved).properties["cloudtrail.ingest-batch"] == str(committed)
    assert sorted(r for _, r in quarantine_rows(spark, moved)) == ["corrupt_gzip", "missing_event_id", "missing_event_id"]


@pytest.mark.harness  # a kill and every command in its own process (about a minute): `make test-harness`
def test_a_batch_killed_after_its_quarantine_commit_commits_nothing_twice_and_every_command_goes_on_in_a_copy(
    spark, landing, lake, tmp_path
):
    """Each command in its own process, as an operator runs it: the ingest killed between the quarantine's commit and
    the events', the lake then copied to another path, where the ingest, a rebuild and its rollback run; the tables
    equal the landing files' records throughout."""
    two_quarantined(landing)
    job = ["--landing", str(landing), "--lake", str(lake), "--settle", "0 seconds"]
    fault = [sys.executable, "-m", "tests.fault_runner", "between_outputs", "0", "--", *job]
    killed = subprocess.run(fault, start_new_session=True, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert table(lake).properties["cloudtrail.ingest-batch"] == "0" and sink_batch(Lake(lake).events) is None

    copy = tmp_path / "copy" / "lake"
    shutil.copytree(lake, copy, symlinks=True)
    events = sorted([*((f"a-{i}", "2024-03-01") for i in range(3)), ("b-0", "2024-03-01")])
    reasons = ["corrupt_gzip", "missing_event_id"]

    def exact() -> None:
        assert duckdb_rows(copy) == events
        assert sorted(reason for _, reason in quarantine_rows(spark, copy)) == reasons, "each quarantined record once"

    succeeded(command("jobs.cloudtrail_ingest", "--landing", landing, "--lake", copy, "--settle", "0 seconds"))
    exact()
    assert registered(Lake.at(copy), QUARANTINE).moved_from is None, "registered where the copy is"
    succeeded(command("jobs.rebuild", "--landing", landing, "--lake", copy, "--from-date", "2024-03-01", "--to-date", "2024-03-01",
                      "--run-id", "rb"))  # fmt: skip
    exact()
    succeeded(command("jobs.rebuild", "--lake", copy, "--rollback", "rb"))
    exact()
    assert table(copy).current_snapshot().summary.get("cloudtrail.rollback") == "rb"
