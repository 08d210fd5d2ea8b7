"""Rebuilds: damaged partitions repaired from the landing files, swapped in whole, and the stream goes on."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import date, timedelta
from pathlib import Path

import duckdb
import pytest

from jobs.lake import Lake
from jobs.landing.layout import delivery_path
from jobs.quality import validate_events
from jobs.storage import write_record
from jobs.tables import partitions
from jobs.tables.events import all_files, date_files, events_location
from jobs.tables.events_table import EventsTable
from jobs.upkeep import rebuild
from jobs.upkeep.rebuild import RebuildConfig
from tests.conftest import ROOT
from tests.helpers import (
    COUNT_LOOP,
    DAY,
    command,
    counts_seen,
    deliver,
    duckdb_rows,
    event,
    events_of,
    ingest,
    quarantine_rows,
    refusal,
    table_rows,
)
from tools.generate_landing import write_delivery

DATES = (date(2024, 3, 1), date(2024, 3, 2), date(2024, 3, 3))


# A directory reader counting one partition's rows in a loop. A query whose listing predates a
# swap can find a listed file gone when it opens it: it fails (and a reader retries), it never counts.
def spark_rows(spark, lake: Path) -> list[tuple[str, str]]:
    """The table as Spark reads it, through the lake's Iceberg catalog."""
    return table_rows(spark, lake)


def config(landing: Path, lake: Path, **options) -> RebuildConfig:
    return RebuildConfig(landing=str(landing), lake=str(lake), dates=DATES, run_id="backfill__test", **options)


def deliver_three_days(landing: Path) -> None:
    for offset in range(3):
        for hour in (2, 13):
            delivered = DAY + timedelta(days=offset, hours=hour)
            deliver(landing, events_of(20, delivered - timedelta(hours=1), f"d{offset}h{hour}"), delivered)
    # late on the next day: the 2nd's last events, delivered in the 3rd's folder
    deliver(landing, events_of(5, DAY + timedelta(days=1, hours=23, minutes=50), "edge"), DAY + timedelta(days=2, hours=0, minutes=5))
    # a copy of a file's events, re-delivered an hour later
    deliver(landing, events_of(20, DAY + timedelta(hours=1), "d0h2"), DAY + timedelta(hours=3))
    # late beyond the horizon: the 1st's events delivered 5 days later
    deliver(landing, events_of(4, DAY + timedelta(hours=6), "late"), DAY + timedelta(days=5))
    # a record the parser quarantines
    deliver(landing, [event("", DAY + timedelta(hours=8))], DAY + timedelta(hours=9))


def damage(spark, lake: Path) -> None:
    """Commits that damage the table as a bug would: one date's rows gone, one date's file gone, one file twice."""
    table, layout = EventsTable(spark, Lake(lake)), Lake(lake)
    table.replace_dates(["2024-03-01"], [], {})
    table.commit(table.java(), [], [str(min(date_files(layout, "2024-03-02")))], {}, None)
    third = min(date_files(layout, "2024-03-03"))
    copied = third.with_name(f"copy-{third.name}")
    shutil.copyfile(third, copied)
    table.commit(table.java(), [str(copied)], [], {}, None)


@pytest.fixture
def ingested(spark, landing, lake) -> list[tuple[str, str]]:
    deliver_three_days(landing)
    ingest(spark, landing, lake)
    oracle = duckdb_rows(lake)
    assert len(oracle) == 3 * 40 + 5 + 4 and len({r[0] for r in oracle}) == len(oracle)
    return oracle


def test_a_rebuild_reads_the_files_every_account_and_region_delivered(spark, landing, lake):
    delivered = DAY + timedelta(hours=2)
    for account, region in (("111122223333", "us-east-1"), ("444455556666", "eu-west-1")):
        write_delivery(delivery_path(landing, account, region, delivered, "x"), events_of(5, DAY + timedelta(hours=1), region), delivered)
    ingest(spark, landing, lake)
    written = duckdb_rows(lake)
    EventsTable(spark, Lake(lake)).replace_dates(["2024-03-01"], [], {})  # lost: no row names its files any more
    report = rebuild.run(RebuildConfig(str(landing), str(lake), (DAY.date(),), "two-places"), lambda: spark)
    assert report.status == "succeeded" and len(written) == 10 and duckdb_rows(lake) == written, "both places' events back"


def test_a_rebuild_repairs_three_damaged_partitions_and_the_stream_goes_on(spark, landing, lake, ingested):
    damage(spark, lake)
    damaged = duckdb_rows(lake)
    assert damaged != ingested
    seen_by_reader = lake.parent / "reader.txt"
    with seen_by_reader.open("w") as out:
        reader = subprocess.Popen([sys.executable, "-c", COUNT_LOOP, str(lake), "2024-03-02"], stdout=out, cwd=ROOT)

    report = rebuild.run(config(landing, lake), lambda: spark)
    time.sleep(1)
    reader.terminate()
    reader.wait()

    assert report.status == "succeeded" and report.gate == "passed"
    assert duckdb_rows(lake) == ingested, "the three partitions equal the oracle again (DuckDB)"
    old, new = (sum(1 for _, d in rows if d == "2024-03-02") for rows in (damaged, ingested))
    seen = counts_seen(seen_by_reader)
    assert seen == {old, new}, f"a reader in a loop saw {seen}, only ever the old ({old}) or the new ({new}) count"
    assert spark_rows(spark, lake) == ingested, "and as Spark reads them"
    first = report.partitions["2024-03-01"]
    assert first["rows_before"] == 0 and first["rows_after"] == 44 and first["duplicates_dropped"] == 20
    for day in ("2024-03-02", "2024-03-03"):
        figures = report.partitions[day]
        assert figures["rows_before"] == sum(1 for _, d in damaged if d == day)
        assert figures["rows_after"] == sum(1 for _, d in ingested if d == day)
    assert json.loads(Lake(lake).rebuild_report("backfill__test").read_text())["partitions"] == report.partitions

    # the stream afterwards: new files once, nothing read twice, the sweep keeps the rebuilt files
    # (after the newest arrival so far, the late file's: the de-duplication horizon runs on arrival time)
    deliver(landing, events_of(6, DAY + timedelta(days=2, hours=20), "new"), DAY + timedelta(days=5, hours=1))
    deliver(landing, events_of(4, DAY + timedelta(hours=6), "late"), DAY + timedelta(days=5, hours=2))  # a copy
    after = ingest(spark, landing, lake)
    assert after.totals()["files_read"] == 2
    expected = sorted(ingested + [(f"new-{i}", "2024-03-03") for i in range(6)])
    assert duckdb_rows(lake) == expected
    assert spark_rows(spark, lake) == expected


def test_a_rebuild_repairs_dates_whose_data_files_are_gone_from_the_lake(spark, landing, lake, ingested):
    """A data file deleted from the lake behind the table's back (a hand, a lifecycle rule): the date cannot be read,
    and its rebuild read the table's files to plan, so it failed with a traceback. It is rebuilt from the landing
    without them, and says so."""
    for day in ("2024-03-02", "2024-03-03"):
        min(date_files(Lake(lake), day)).unlink()
    with pytest.raises(duckdb.IOException, match="No files found"):
        duckdb_rows(lake)

    report = rebuild.run(config(landing, lake), lambda: spark)

    assert report.status == "succeeded" and report.gate == "passed"
    assert duckdb_rows(lake) == ingested, "every event of the three dates once again"
    assert [report.partitions[day]["data_files_lost"] for day in ("2024-03-01", "2024-03-02", "2024-03-03")] == [0, 1, 1]


def test_a_rebuild_keeps_the_quarantine_of_the_files_it_reads_once(spark, landing, lake, ingested, monkeypatch):
    before = quarantine_rows(spark, lake)
    assert [reason for _, reason in before] == ["missing_event_id"]
    rebuild.run(config(landing, lake), lambda: spark)
    assert quarantine_rows(spark, lake) == before, "the quarantined record once, not twice"

    # The lake page, its gate page and status.json read the reports a rebuild leaves (its gate's among them).
    from starlette.requests import Request

    from cloudtrail_airflow import gate_view, lake_view

    monkeypatch.setenv("CLOUDTRAIL_LAKE", str(lake))
    monkeypatch.setenv("CLOUDTRAIL_LANDING", str(landing))
    page = lake_view.lake_page(Request({"type": "http", "method": "GET", "path": "/", "root_path": "/cloudtrail", "headers": []}))
    assert page.status_code == 200 and "/cloudtrail/gates/events/backfill__test" in page.body.decode()
    verdicts = {v["event_date"]: (v["run_id"], v["verdict"]) for v in lake_view.status_json()["gate_verdicts"]}
    assert verdicts == {str(day): ("backfill__test", "passed") for day in DATES}
    gate = gate_view.gate_page("events", "backfill__test")
    assert gate.status_code == 200 and "cloudtrail_events.critical: passed" in gate.body.decode()


def test_a_dry_run_lists_files_and_bytes_per_date_and_writes_nothing(spark, landing, lake, ingested):
    listing = sorted(str(p) for p in lake.rglob("*"))
    report = rebuild.run(config(landing, lake, dry_run=True), lambda: pytest.fail("a dry run starts no Spark"))
    assert report.status == "dry_run"
    assert sorted(str(p) for p in lake.rglob("*")) == listing, "nothing written"
    first = report.partitions["2024-03-01"]
    # the 1st: its two files, the copy, the quarantined record's file, the late file; the 2nd's files (folders within the horizon)
    assert first["files"] == 2 + 1 + 1 + 1 + 2 + 2 + 1 and first["bytes"] > 0 and first["estimated_seconds"] >= 0


def test_a_failing_gate_leaves_the_old_partitions(spark, landing, lake, ingested, tmp_path, monkeypatch):
    suites = tmp_path / "suites"
    suites.mkdir()
    for name in ("cloudtrail_events.critical", "cloudtrail_events.warning"):
        failing = {"name": name, "expectations": [{"type": "expect_table_row_count_to_equal", "kwargs": {"value": 0}}]}
        (suites / f"{name}.json").write_text(json.dumps(failing))
    monkeypatch.setattr(validate_events, "SUITES_DIR", suites)
    damage(spark, lake)
    damaged = sorted(all_files(Lake(lake)))

    report = rebuild.run(config(landing, lake), lambda: spark)

    assert report.status == "gate_failed"
    assert sorted(all_files(Lake(lake))) == damaged, "nothing committed"
    staged = Path(events_location(Lake(lake))) / "data" / report.tag
    assert not staged.exists() and not (lake / "_staging").exists(), "the staged files are gone"
    usage = subprocess.run([sys.executable, "-m", "jobs.rebuild", "--lake", str(lake), "--landing", "x"], capture_output=True, text=True)
    assert usage.returncode == 2 and "--from-date" in usage.stderr


def test_a_rollback_puts_the_old_partitions_back(spark, landing, lake, ingested):
    damage(spark, lake)
    damaged = duckdb_rows(lake)
    rebuild.run(config(landing, lake), lambda: spark)
    assert duckdb_rows(lake) == ingested
    assert rebuild.main(["--lake", str(lake), "--rollback", "backfill__test"]) == 0
    assert duckdb_rows(lake) == damaged, "the table as it stood before the rebuild, the lost date lost again"
    assert rebuild.main(["--lake", str(lake), "--rollback", "backfill__test"]) == 0 and duckdb_rows(lake) == damaged, "once"
    assert rebuild.main(["--lake", str(lake), "--rollback", "no-such-rebuild"]) == 2, "a tag no table holds: refused, not 'done'"


def crash_after(step, calls: dict[str, int]):
    """`step`, dying like a SIGKILL (no clean-up runs) once calls["limit"] file-system steps have run."""

    def wrapped(*args):
        if calls["n"] == calls["limit"]:
            raise KeyboardInterrupt("killed")
        calls["n"] += 1
        return step(*args)

    return wrapped


def test_an_earlier_release_s_swap_stopped_at_any_step_is_finished_by_the_next_run(tmp_path, monkeypatch):
    """An earlier release's rebuild journal (its partitions staged, the swap begun): kill the recovery after each of its
    file-system steps, in turn; every partition is old or new, whole, and the next recover() finishes."""
    steps = 0
    while True:
        lake = Lake.at(tmp_path / f"lake{steps}")
        swaps = []
        for day, (old, new) in {"a": (2, 3), "b": (1, 0), "c": (0, 2)}.items():
            live, staged = lake.events / f"event_date={day}", lake.staging("r") / "events" / f"event_date={day}"
            for folder, count in ((live, old), (staged, new)):
                if count:
                    folder.mkdir(parents=True)
                    for n in range(count):
                        (folder / f"{folder.parent.parent.name}-{n}.parquet").write_text(str(count))
            if new:
                files = [p.name for p in partitions.data_files(staged)]
                write_record(staged / partitions.MARKER, partitions.MARKER_FORMAT, {"run_id": "r", "files": files})
            aside = lake.replaced_by_run(lake.events, "r") / live.name
            swaps.append({"live": str(live), "staged": str(staged) if new else None, "aside": str(aside)})
        write_record(lake.rebuild_journal("r"), partitions.JOURNAL_FORMAT, {"run_id": "r", "swaps": swaps})
        calls = {"n": 0, "limit": steps}
        monkeypatch.setattr(partitions.os, "rename", crash_after(os.rename, calls))
        monkeypatch.setattr(partitions, "exchange", crash_after(partitions.exchange, calls))
        try:
            partitions.recover(lake)
            finished = True
        except KeyboardInterrupt:
            finished = False
        monkeypatch.undo()
        for day, versions in (("a", (2, 3)), ("c", (0, 2))):
            assert len(partitions.data_files(lake.events / f"event_date={day}")) in versions, f"step {steps}: {day} is half swapped"
        partitions.recover(lake)
        assert [len(partitions.data_files(lake.events / f"event_date={d}")) for d in "abc"] == [3, 0, 2]
        assert not (lake.root / "_staging").exists() and not lake.rebuild_journal("r").exists()
        assert sorted(p.name for p in lake.replaced_by_run(lake.events, "r").iterdir()) == ["event_date=a", "event_date=b"]
        if finished:
            break
        steps += 1
    assert steps == 4, "three partitions: exchange and aside, aside, rename"


def test_a_rebuild_killed_while_writing_leaves_the_old_partitions_and_the_next_run_cleans_up(spark, landing, lake, ingested):
    damage(spark, lake)
    damaged = duckdb_rows(lake)
    command = [sys.executable, "-m", "jobs.rebuild", "--landing", str(landing), "--lake", str(lake), "--from-date", "2024-03-01"]
    job = subprocess.Popen([*command, "--to-date", "2024-03-03"], start_new_session=True, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    data = Path(events_location(Lake(lake))) / "data"
    while not any(data.glob("*/_temporary")) and not any(data.glob("*/event_date=*")):
        assert job.poll() is None and time.monotonic() < deadline, "the rebuild ended before it wrote"
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    assert duckdb_rows(lake) == damaged, "the old dates, whole: the killed rebuild's files are no rows"
    ingest(spark, landing, lake)
    assert rebuild.run(config(landing, lake), lambda: spark).status == "succeeded"
    assert duckdb_rows(lake) == ingested


def test_a_rebuild_on_a_lake_restored_to_another_path_reads_its_landing_files(spark, landing, lake, ingested, tmp_path):
    """The ledger's record of read manifests names them where the lake was: a rebuild of the copy found none of the
    dates' files, rebuilt a lost partition with 0 rows and kept a present one as if its files could not be read."""
    restored = tmp_path / "new-disk" / "lake"
    shutil.copytree(lake, restored, symlinks=True)
    EventsTable(spark, Lake(restored)).replace_dates(["2024-03-01"], [], {})
    report = rebuild.run(RebuildConfig(str(landing), str(restored), DATES, "restored"), lambda: spark)
    assert report.status == "succeeded" and duckdb_rows(restored) == ingested
    assert report.partitions["2024-03-01"]["rows_after"] == 44 and report.partitions["2024-03-01"]["files_read"] > 0
    assert all(figures["rows_kept_from_unreadable_files"] == 0 for figures in report.partitions.values()), "every file read again"


def test_a_rebuild_that_would_empty_a_date_that_held_rows_is_refused(spark, landing, lake, ingested, tmp_path):
    elsewhere = tmp_path / "another-zone"
    (elsewhere / "AWSLogs").mkdir(parents=True)
    EventsTable(spark, Lake(lake)).replace_dates(["2024-03-01"], [], {})  # lost, and its files are not under --landing
    present = duckdb_rows(lake)
    args = ["--landing", str(elsewhere), "--lake", str(lake), "--from-date", "2024-03-01", "--to-date", "2024-03-02"]
    line = refusal(command("jobs.rebuild", *args))
    assert "2024-03-01" in line and "--allow-empty" in line and "2024-03-02" not in line.split("under")[0], line
    assert duckdb_rows(lake) == present and not any((lake / "_staging").glob("*/*/event_date=*")), "nothing swapped"
    assert rebuild.main([*args, "--allow-empty", "--run-id", "emptied"]) == 0, "said so: rebuilt empty"
    assert not any(day == "2024-03-01" for _, day in duckdb_rows(lake))
