"""The file ledger: new, changed and settling files, retention by delivery folder, stragglers, and names that are data."""

from __future__ import annotations

import gzip
import json
import os
import time
from datetime import date, timedelta
from pathlib import Path

import duckdb
import pytest

from jobs.iceberg.catalog import NAMESPACE, open_catalog
from jobs.lake import Lake
from jobs.landing.layout import Older, aws_logs, day_folders, delivery_date, delivery_path
from jobs.ledger import planner as ledger
from jobs.ledger import store as ledger_files
from jobs.ledger.planner import LedgerOptions, plan_files
from jobs.ledger.store import read_manifests
from jobs.records.dedup import Dedup
from jobs.spark.checkpoint import CheckpointSnapshot
from jobs.spark.logs import CheckpointError, local_path, read_source_log
from jobs.tables.events import events_source
from jobs.tables.quarantine_files import quarantine_source
from tests.helpers import DAY, deliver, duckdb_rows, events_of, ingest
from tools.generate_landing import write_delivery

# The ledger as the tests' runs use it: files taken as soon as they are written.
UNSETTLED = LedgerOptions(settle=timedelta(0))

ONE_FILE_PER_BATCH = {"max_files_per_trigger": 1, "max_bytes_per_trigger": None, "source_retention": "2 days"}
# Runs that list every folder, as the daily one does: a file added to an existing retired folder is found by those.
FULL_LISTINGS = {**ONE_FILE_PER_BATCH, "full_listing_interval": "0 seconds"}


def ledger_dates(lake: Path) -> set[date | None]:
    """Delivery dates of the files the ledger's manifests name."""
    return {delivery_date(entry.path) for manifest in read_manifests(Lake(lake).manifests) for entry in manifest.entries}


def logged_manifests(lake: Path) -> set[str]:
    """The manifests Spark's log of read files still lists."""
    return {entry.path for entry in read_source_log(Lake(lake).checkpoint).entries}


def deliver_days(landing: Path, days: range) -> None:
    for day in days:
        deliver(landing, events_of(3, DAY + timedelta(days=day), f"d{day}"), DAY + timedelta(days=day, minutes=10))


def expected_rows(days: list[int], prefix: str | None = None) -> list[tuple[str, str]]:
    """(eventID, event date) of the three events `events_of` made for each day, named d<day>-<i> or <prefix>-<i>."""
    return [(f"{prefix or f'd{day}'}-{i}", str((DAY + timedelta(days=day, minutes=i)).date())) for day in days for i in range(3)]


@pytest.fixture
def exact_clock(monkeypatch):
    # The slack guards coarse or skewed file-system clocks; the test's files are written well apart from its runs.
    monkeypatch.setattr(ledger, "CLOCK_SLACK_NS", 0)


def dates_of(numbers: range) -> set[date | None]:
    return {(DAY + timedelta(days=d)).date() for d in numbers}


def test_retired_folders_leave_the_ledger_and_are_not_read_again(spark, landing, lake, exact_clock):
    deliver_days(landing, range(10))
    first = ingest(spark, landing, lake, **ONE_FILE_PER_BATCH)  # a manifest, and a batch, per file
    assert first.ledger["new_files"] == first.ledger["manifests_written"] == 10
    assert ledger_dates(lake) == dates_of(range(10)) and len(logged_manifests(lake)) == 10

    deliver_days(landing, range(10, 20))
    report = ingest(spark, landing, lake, **ONE_FILE_PER_BATCH)  # newest taken so far: day 9, so days 0..6 retire
    assert report.ledger["retired_before"] == str((DAY + timedelta(days=7)).date()) and report.ledger["manifests_dropped"] == 7
    assert report.totals()["files_read"] == 10
    assert ledger_dates(lake) == dates_of(range(7, 20))
    # Spark's log forgets the dropped manifests (from its compaction at batch 9; the later ones are still batch files).
    assert len(logged_manifests(lake)) == 20 - 7

    again = ingest(spark, landing, lake, **ONE_FILE_PER_BATCH)
    assert again.totals()["files_read"] == 0
    assert again.ledger["retired_before"] == str((DAY + timedelta(days=17)).date())
    assert ledger_dates(lake) == dates_of(range(17, 20))
    assert duckdb_rows(lake) == sorted(expected_rows(list(range(20))))


def test_files_landing_in_retired_folders_are_read_once(spark, landing, lake, exact_clock):
    deliver_days(landing, range(12))
    ingest(spark, landing, lake, **FULL_LISTINGS)
    ingest(spark, landing, lake, **FULL_LISTINGS)  # retires days 0..8

    # A lagging sync adds a file to a retired folder, with its original (old) modification time,
    # and history is copied in: a whole folder of an account never seen before.
    deliver(landing, events_of(3, DAY + timedelta(days=2), "late"), DAY + timedelta(days=2, minutes=30))
    for part in "ab":
        history = events_of(3, DAY + timedelta(days=4), f"hist{part}")
        delivered = DAY + timedelta(days=4, hours=1)
        write_delivery(delivery_path(landing, "444455556666", "eu-west-1", delivered, part), history, delivered)
    deliver_days(landing, range(12, 18))  # enough batches that the compaction at batch 19 lists the late files
    state = Lake(lake).last_success
    before = state.read_text()
    report = ingest(spark, landing, lake, **FULL_LISTINGS)
    assert report.ledger["stragglers"] == 3, "one file in a retired folder, a folder of two copied in"
    assert report.totals()["files_read"] == 3 + 6

    # Twice, as if a run died after its batches committed, before it recorded its success: the
    # stragglers are found again but are still in the ledger (kept there until a run succeeds), so
    # they are not read twice.
    for _ in range(2):
        state.write_text(before)
        replay = ingest(spark, landing, lake, **FULL_LISTINGS)
        assert replay.totals()["files_read"] == 0 and replay.ledger["stragglers"] == 0
    again = ingest(spark, landing, lake, **FULL_LISTINGS)
    assert again.totals()["files_read"] == 0 and again.ledger["stragglers"] == 0
    late = expected_rows([2], "late") + expected_rows([4], "hista") + expected_rows([4], "histb")
    assert duckdb_rows(lake) == sorted(expected_rows(list(range(18))) + late)


def test_runs_between_full_listings_find_new_folders_and_a_full_listing_finds_a_file_added_to_an_old_one(spark, landing, lake, exact_clock):
    deliver_days(landing, range(-40, -37))  # January, an old month by the time March's folders are retained
    deliver_days(landing, range(3))
    assert ingest(spark, landing, lake, source_retention="2 days").ledger["full_listing"], "a new ledger lists everything"
    quiet = ingest(spark, landing, lake, source_retention="2 days")
    assert not quiet.ledger["full_listing"] and quiet.totals()["files_read"] == 0

    # A file added to an existing January folder changes only that folder; February's new folder changes its parents.
    deliver(landing, events_of(3, DAY - timedelta(days=39), "added"), DAY - timedelta(days=39, minutes=-30))
    deliver(landing, events_of(3, DAY - timedelta(days=20), "d-20"), DAY - timedelta(days=20, minutes=-10))
    between = ingest(spark, landing, lake, source_retention="2 days")
    assert not between.ledger["full_listing"] and between.ledger["stragglers"] == 1 and between.totals()["files_read"] == 1
    assert ingest(spark, landing, lake, source_retention="2 days").totals()["files_read"] == 0, "the added file waits"

    full = ingest(spark, landing, lake, source_retention="2 days", full_listing_interval="0 seconds")
    assert full.ledger["full_listing"] and full.ledger["stragglers"] == 1 and full.totals()["files_read"] == 1
    after = ingest(spark, landing, lake, source_retention="2 days", full_listing_interval="0 seconds")
    assert after.ledger["full_listing"] and after.totals()["files_read"] == 0, "taken once"
    assert duckdb_rows(lake) == sorted(expected_rows([-40, -39, -38, -20, 0, 1, 2]) + expected_rows([-39], "added"))


@pytest.mark.unit
def test_a_walk_between_full_listings_tests_year_and_month_folders_not_each_old_day(tmp_path):
    region = aws_logs(tmp_path) / "111122223333" / "CloudTrail" / "us-east-1"
    for folder in ("2023/06/01", "2024/01/10", "2024/01/11", "2024/03/01", "2024/03/02"):
        (region / folder).mkdir(parents=True)
    time.sleep(0.05)  # inode times tick in milliseconds
    checked_ns = time.time_ns()
    time.sleep(0.05)
    for folder in ("2024/01/10", "2024/03/01"):  # a new file in a day folder: only that folder's ctime moves
        (region / folder / "added.json").touch()
    (region / "2023/12/31").mkdir(parents=True)  # a new day folder in a new month of an old year: its parents' move too

    def walk(older: Older | None) -> list[str]:
        return [str(day) for day, _ in day_folders(tmp_path, date(2024, 3, 2), older=older)]

    assert walk(None) == ["2024-03-02"], "nothing before `since`"
    assert walk(Older(checked_ns, every_day=False)) == ["2023-12-31", "2024-03-02"], "new folders, found through their parents"
    tested = Older(checked_ns, every_day=False, tested_from=date(2024, 3, 1))
    assert walk(tested) == ["2023-12-31", "2024-03-01", "2024-03-02"], "and the changed ones of the days tested one by one"
    assert walk(Older(checked_ns)) == ["2023-12-31", "2024-01-10", "2024-03-01", "2024-03-02"], "every day tested: each changed one"


@pytest.mark.unit
def test_a_walk_looks_at_days_before_the_tested_ones_in_their_month_only_when_a_day_folder_was_added(tmp_path):
    region = aws_logs(tmp_path) / "111122223333" / "CloudTrail" / "us-east-1"
    for folder in ("2024/01/10", "2024/01/11", "2024/01/20"):
        (region / folder).mkdir(parents=True)
    time.sleep(0.05)  # inode times tick in milliseconds
    checked_ns = time.time_ns()
    time.sleep(0.05)
    (region / "2024/01/10" / "added.json").touch()  # before the tested days, in their month: only its folder moves

    def walk() -> list[str]:
        older = Older(checked_ns, every_day=False, tested_from=date(2024, 1, 11))
        return [str(day) for day, _ in day_folders(tmp_path, date(2024, 1, 20), older=older)]

    assert walk() == ["2024-01-20"], "a file added before the tested days waits for the full listing"
    (region / "2024/01/05").mkdir()  # a day folder added to the month: its days are looked at, one by one
    assert walk() == ["2024-01-05", "2024-01-10", "2024-01-20"]


@pytest.mark.unit
def test_a_backlog_is_cut_by_bytes_and_a_small_tail_joins_the_batch_before():
    def cut(sizes: list[int], max_bytes: int = 100) -> list[list[int]]:
        files = [ledger_files.Entry(f"f{n}", size, 0) for n, size in enumerate(sizes)]
        return [[entry.size or 0 for entry in batch] for batch in ledger._batches(files, None, max_bytes)]

    assert cut([40, 40, 40, 40, 10]) == [[40, 40], [40, 40, 10]], "a tail under a quarter of the cut joins the batch before"
    assert cut([40, 40, 40, 40, 30]) == [[40, 40], [40, 40], [30]], "a tail of a quarter or more is a batch"
    assert cut([250, 30]) == [[250], [30]] and cut([10]) == [[10]], "a file larger than the cut is a batch of its own"
    by_files = [ledger_files.Entry(f"f{n}", 1, 0) for n in range(5)]
    assert [len(batch) for batch in ledger._batches(by_files, 2, None)] == [2, 2, 1], "a file limit is kept exactly"
    both = [ledger_files.Entry(f"f{n}", size, 0) for n, size in enumerate([40, 40, 40, 40, 10])]
    assert [len(batch) for batch in ledger._batches(both, 2, 100)] == [2, 2, 1], "a small tail never breaks the file limit"


def test_a_run_takes_exactly_the_files_no_manifest_names(spark, landing, lake, exact_clock):
    deliver_days(landing, range(5))
    ingest(spark, landing, lake, source_retention="7 days")
    new_on_day_3 = deliver(landing, events_of(3, DAY + timedelta(days=3), "late3"), DAY + timedelta(days=3, hours=5))
    new_on_day_5 = deliver(landing, events_of(3, DAY + timedelta(days=5), "d5"), DAY + timedelta(days=5, minutes=1))

    plan = plan_files(CheckpointSnapshot.read(Lake(lake).checkpoint), Lake(lake).manifests, str(landing), UNSETTLED, Dedup())
    assert (plan.new_files, plan.pending) == (2, 1)
    # in arrival order, in one manifest (the default byte limit holds both)
    assert [entry.path for entry in plan.written[0].entries] == [str(new_on_day_3), str(new_on_day_5)]
    report = ingest(spark, landing, lake, source_retention="7 days")  # the pending manifest is read, nothing taken twice
    assert report.ledger["new_files"] == 0 and report.totals()["files_read"] == 2
    assert duckdb_rows(lake) == sorted(expected_rows(list(range(5))) + expected_rows([3], "late3") + expected_rows([5], "d5"))


# Every character a POSIX file name may hold that Hadoop paths or globs read as syntax, and then some.
ODD_NAMES = ["a:b", "sp ace", "per%25cent%", "hash#", "what?", "[br]", "{cu,rly}", "st*r", "back\\slash", "comma,", "é日本-🦆"]
ODD_NAMES.append("x" * 180)  # a 240-byte name in all: ext4 takes 255


def test_file_names_are_data(spark, landing, lake):
    """Odd names are read, reported and queryable, in the table and in quarantine, and retire like any other."""
    expected = []
    for index, odd in enumerate(ODD_NAMES):
        path = delivery_path(landing, "111122223333", "us-east-1", DAY + timedelta(minutes=index), f"{index}_{odd}")
        write_delivery(path, events_of(2, DAY, f"odd{index}"), DAY + timedelta(minutes=index))
        expected += [(f"odd{index}-{i}", str(DAY.date())) for i in range(2)]
    broken = delivery_path(landing, "111122223333", "us-east-1", DAY + timedelta(hours=1), "b:roken [1]", ".json")
    broken.write_text('{"Records": [')
    report = ingest(spark, landing, lake)
    assert report.status == "succeeded" and report.totals()["files_read"] == len(ODD_NAMES) + 1
    assert duckdb_rows(lake) == sorted(expected)
    sources = duckdb.connect().execute(f"select distinct _source_file from {events_source(Lake(lake))}").fetchall()
    assert {source for (source,) in sources} == {f"file:{path}" for path in landing.rglob("*.json.gz")}
    quarantined = duckdb.connect().execute(f"select source_file, reason from {quarantine_source(Lake(lake))}").fetchall()
    assert quarantined == [(f"file:{broken}", "not_json")]
    assert ingest(spark, landing, lake).totals()["files_read"] == 0


def test_a_changed_file_is_read_again_once(spark, landing, lake):
    """A file quarantined while it was being written is read again once it is complete."""
    records = events_of(4, DAY, "slow")
    path = delivery_path(landing, "111122223333", "us-east-1", DAY, "slow")
    path.parent.mkdir(parents=True, exist_ok=True)
    whole = gzip.compress(json.dumps({"Records": records}).encode())
    path.write_bytes(whole[: len(whole) // 2])  # a copy tool has written half of it
    first = ingest(spark, landing, lake)
    assert first.totals()["quarantined_by_reason"] == {"truncated_gzip": 1} and duckdb_rows(lake) == []

    path.write_bytes(whole)
    again = ingest(spark, landing, lake)
    assert again.ledger["changed_files"] == 1 and again.totals()["rows_written"] == 4
    assert again.ledger["changed_shown"] == [str(path)], "named, not only counted"
    assert ingest(spark, landing, lake).totals()["files_read"] == 0
    assert duckdb_rows(lake) == sorted((f"slow-{i}", str(DAY.date())) for i in range(4))
    # its truncated_gzip row has left the quarantine, and stays in the table's history
    assert quarantine_source(Lake(lake)) is None
    table = open_catalog(Lake.at(lake), None).load_table(f"{NAMESPACE}.quarantine")
    history = table.scan(snapshot_id=table.current_snapshot().parent_snapshot_id).to_arrow()
    assert history.column("reason").to_pylist() == ["truncated_gzip"]


def test_a_file_written_to_within_the_settle_time_waits_for_a_later_run(spark, landing, lake):
    path = deliver(landing, events_of(2, DAY, "fresh"), DAY)  # its ctime is now
    waiting = ingest(spark, landing, lake, settle="1 hour")
    assert waiting.ledger["settling_files"] == 1 and waiting.totals()["files_read"] == 0
    taken = ingest(spark, landing, lake, settle="0 seconds")
    assert taken.ledger["new_files"] == 1 and len(duckdb_rows(lake)) == 2
    assert path.exists()


def test_a_checkpoint_from_before_the_ledger_keeps_its_files_taken(landing, lake):
    """Spark's log of a checkpoint written by the binaryFile source lists landing files: those are taken."""
    old = deliver(landing, events_of(1, DAY, "old"), DAY)
    new = deliver(landing, events_of(1, DAY, "new"), DAY + timedelta(minutes=5))
    source_log = Lake(lake).checkpoint / "sources" / "0"
    source_log.mkdir(parents=True)
    (source_log / "0").write_text("v1\n" + json.dumps({"path": old.as_uri(), "timestamp": 0, "batchId": 0}))
    plan = plan_files(CheckpointSnapshot.read(Lake(lake).checkpoint), Lake(lake).manifests, str(landing), UNSETTLED, Dedup())
    assert [entry.path for manifest in plan.written for entry in manifest.entries] == [str(new)]
    assert local_path(old.as_uri()) == str(old) and os.path.exists(old)


def test_a_batch_the_previous_version_left_half_done_stops_the_run_with_what_to_do(landing, lake):
    old = deliver(landing, events_of(1, DAY, "old"), DAY)
    checkpoint = Lake(lake).checkpoint
    (checkpoint / "sources" / "0").mkdir(parents=True)
    (checkpoint / "sources" / "0" / "0").write_text("v1\n" + json.dumps({"path": old.as_uri(), "timestamp": 0, "batchId": 0}))
    (checkpoint / "offsets").mkdir()
    (checkpoint / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n{"logOffset":0}')
    with pytest.raises(CheckpointError, match="Run the previous version once to finish it"):
        plan_files(CheckpointSnapshot.read(checkpoint), Lake(lake).manifests, str(landing), UNSETTLED, Dedup())
