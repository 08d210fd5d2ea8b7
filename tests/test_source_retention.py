"""The file source's log keeps recent delivery folders only, and files landing in retired folders are still read once."""

from __future__ import annotations

import fnmatch
import re
from datetime import date, timedelta
from pathlib import Path

import pytest

from jobs import source_retention
from jobs.checkpoint import STATE_FILE, CheckpointSnapshot
from jobs.lake import Lake
from jobs.landing import dates_from, delivery_date, delivery_path
from jobs.spark_logs import local_path, read_source_log
from tests.helpers import DAY, deliver, duckdb_rows, events_of, ingest
from tools.generate_landing import write_delivery

ONE_FILE_PER_BATCH = {"max_files_per_trigger": 1, "max_bytes_per_trigger": None, "source_retention": "2 days"}


def expand_braces(pattern: str) -> list[str]:
    """{a,b{c,d}} -> [a, bc, bd]: how Hadoop expands a glob's alternatives."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    before, after = pattern[: match.start()], pattern[match.end() :]
    return [expanded for option in match[1].split(",") for expanded in expand_braces(before + option + after)]


@pytest.mark.parametrize("first", [date(2026, 11, 14), date(2026, 12, 31), date(2026, 1, 1), date(2029, 9, 30), date(2099, 12, 1)])
def test_dates_from_matches_exactly_the_folders_on_or_after_the_first(first):
    alternatives = expand_braces(dates_from(first))
    for offset in range(-800, 800, 3):
        folder = first + timedelta(days=offset)
        matched = any(fnmatch.fnmatchcase(folder.strftime("%Y/%m/%d"), alternative) for alternative in alternatives)
        assert matched == (folder >= first), folder
    assert any(fnmatch.fnmatchcase("3100/01/01", alternative) for alternative in alternatives)


def test_delivery_date_of_files_folders_and_other_paths():
    assert delivery_date("/l/AWSLogs/1/CloudTrail/us-east-1/2024/03/01/1_CloudTrail_x.json.gz") == date(2024, 3, 1)
    assert delivery_date("/l/AWSLogs/o-1/1/CloudTrail/us-east-1/2024/03/01") == date(2024, 3, 1)
    assert delivery_date("/l/AWSLogs/1/CloudTrail-Digest/us-east-1/2024/03/01/x.json.gz") is None
    assert local_path("file:///tmp/a%20b/x.json") == "/tmp/a b/x.json"


def logged_dates(lake: Path) -> set[date]:
    """Delivery dates the newest compaction of the source log lists."""
    log = read_source_log(Lake(lake).checkpoint)
    assert log.compact is not None
    return {delivery_date(entry.path) for entry in log.compacted}


def deliver_days(landing: Path, days: range) -> None:
    for day in days:
        deliver(landing, events_of(3, DAY + timedelta(days=day), f"d{day}"), DAY + timedelta(days=day, minutes=10))


def expected_rows(days: list[int], prefix: str | None = None) -> list[tuple[str, str]]:
    """(eventID, event date) of the three events `events_of` made for each day, named d<day>-<i> or <prefix>-<i>."""
    return [(f"{prefix or f'd{day}'}-{i}", str((DAY + timedelta(days=day, minutes=i)).date())) for day in days for i in range(3)]


@pytest.fixture
def exact_clock(monkeypatch):
    # The slack guards coarse or skewed file-system clocks; the test's files are written well apart from its runs.
    monkeypatch.setattr(source_retention, "CLOCK_SLACK_NS", 0)


def test_retired_folders_leave_the_log_and_are_not_read_again(spark, landing, lake, exact_clock):
    deliver_days(landing, range(10))
    ingest(spark, landing, lake, **ONE_FILE_PER_BATCH)  # batches 0..9; the compaction at 9 lists all ten days
    assert logged_dates(lake) == {(DAY + timedelta(days=d)).date() for d in range(10)}

    deliver_days(landing, range(10, 20))
    report = ingest(spark, landing, lake, **ONE_FILE_PER_BATCH)  # newest read so far: day 9, so days 0..6 retire
    assert report.source_log == {"retired_before": str((DAY + timedelta(days=7)).date()), "stragglers": 0, "entries_dropped": 7}
    assert report.totals()["files_read"] == 10
    # the compaction at batch 19 was built from the trimmed one
    assert logged_dates(lake) == {(DAY + timedelta(days=d)).date() for d in range(7, 20)}

    again = ingest(spark, landing, lake, **ONE_FILE_PER_BATCH)
    assert again.totals()["files_read"] == 0
    assert again.source_log["retired_before"] == str((DAY + timedelta(days=17)).date())
    assert logged_dates(lake) == {(DAY + timedelta(days=d)).date() for d in range(17, 20)}
    assert duckdb_rows(lake) == sorted(expected_rows(list(range(20))))


def test_files_landing_in_retired_folders_are_read_once(spark, landing, lake, exact_clock):
    deliver_days(landing, range(12))
    ingest(spark, landing, lake, **ONE_FILE_PER_BATCH)
    ingest(spark, landing, lake, **ONE_FILE_PER_BATCH)  # retires days 0..8

    # A lagging sync adds a file to a retired folder, with its original (old) modification time,
    # and history is copied in: a whole folder of an account never seen before.
    deliver(landing, events_of(3, DAY + timedelta(days=2), "late"), DAY + timedelta(days=2, minutes=30))
    for part in "ab":
        history = events_of(3, DAY + timedelta(days=4), f"hist{part}")
        delivered = DAY + timedelta(days=4, hours=1)
        write_delivery(delivery_path(landing, "444455556666", "eu-west-1", delivered, part), history, delivered)
    deliver_days(landing, range(12, 18))  # enough batches that the compaction at batch 19 lists the late files
    state = Lake(lake).checkpoint / STATE_FILE
    before = state.read_text()
    report = ingest(spark, landing, lake, **ONE_FILE_PER_BATCH)
    assert report.source_log["stragglers"] == 3, "one file by name, a folder of two whole"
    assert report.totals()["files_read"] == 3 + 6

    # Twice, as if a run died after its batches committed, before it recorded its success: the
    # late files are found again but are still in the log (kept there until a run succeeds), so
    # they are not read twice.
    for _ in range(2):
        state.write_text(before)
        replay = ingest(spark, landing, lake, **ONE_FILE_PER_BATCH)
        assert replay.totals()["files_read"] == 0 and replay.source_log["stragglers"] == 0
    again = ingest(spark, landing, lake, **ONE_FILE_PER_BATCH)
    assert again.totals()["files_read"] == 0 and again.source_log["stragglers"] == 0
    late = expected_rows([2], "late") + expected_rows([4], "hista") + expected_rows([4], "histb")
    assert duckdb_rows(lake) == sorted(expected_rows(list(range(18))) + late)


def test_the_stream_lists_only_the_days_from_the_oldest_one_with_a_new_file(spark, landing, lake, exact_clock):
    deliver_days(landing, range(5))
    ingest(spark, landing, lake, source_retention="7 days")
    new_on_day_3 = deliver(landing, events_of(3, DAY + timedelta(days=3), "late3"), DAY + timedelta(days=3, hours=5))
    deliver_days(landing, range(5, 6))

    plan = source_retention.plan_sources(CheckpointSnapshot.read(Lake(lake).checkpoint), str(landing), timedelta(days=7))
    alternatives = expand_braces(plan.glob)
    listed = sorted(
        path.relative_to(landing).as_posix()
        for path in landing.rglob("*.json.gz")
        if any(fnmatch.fnmatchcase(path.relative_to(landing).as_posix(), alternative) for alternative in alternatives)
    )
    assert plan.new_files == 2 and plan.retired_before == (DAY - timedelta(days=3)).date()
    assert {delivery_date(path) for path in listed} == {(DAY + timedelta(days=d)).date() for d in (3, 4, 5)}
    assert new_on_day_3.relative_to(landing).as_posix() in listed

    report = ingest(spark, landing, lake, source_retention="7 days")
    assert report.totals()["files_read"] == 2
    assert duckdb_rows(lake) == sorted(expected_rows(list(range(6))) + expected_rows([3], "late3"))
