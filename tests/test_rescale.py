"""Rescaling the de-duplication state (python -m jobs.rescale): the state moves to another number of partitions with
every key it holds, so a copy of an event seen before the rescale is still dropped; a rescale that died part way
stops the ingest until it is finished."""

from __future__ import annotations

import shutil
from datetime import timedelta

import pytest

from jobs.lake import Lake
from jobs.spark.logs import CheckpointError, state_folder
from jobs.spark.state import state_partitions
from jobs.tables.events import date_files
from jobs.upkeep import compact, rescale
from tests.helpers import DAY, command, deliver, duckdb_rows, events_of, ingest, run_cleanly, succeeded


def partition_folders(lake) -> list[str]:
    return sorted(p.name for p in (state_folder(Lake(lake).checkpoint) / "0").iterdir() if p.name.isdigit())


def rows(*prefixes: str) -> list[tuple[str, str]]:
    return sorted((f"{prefix}-{i}", str(DAY.date())) for prefix in prefixes for i in range(4))


def test_a_rescaled_state_still_drops_copies_of_events_seen_before_it(spark, landing, lake):
    before = [events_of(4, DAY + timedelta(minutes=10 * n), f"b{n}") for n in range(3)]
    for n, events in enumerate(before):
        deliver(landing, events, DAY + timedelta(hours=1, minutes=n))
    ingest(spark, landing, lake)
    assert state_partitions(Lake(lake).checkpoint) == 2 and partition_folders(lake) == ["0", "1"]

    assert rescale.main(["--lake", str(lake), "--state-partitions", "5", "--run-id", "grow"]) == 0
    assert state_partitions(Lake(lake).checkpoint) == 5 and partition_folders(lake) == ["0", "1", "2", "3", "4"]
    assert (Lake(lake).replaced_state("grow") / "0" / "1").is_dir(), "the old state is kept"
    assert rescale.main(["--lake", str(lake), "--state-partitions", "5"]) == 0, "already that size: nothing to do"

    # Every event seen before the rescale comes again, within the horizon, beside a new file.
    for n, events in enumerate(before):
        deliver(landing, events, DAY + timedelta(hours=2, minutes=n))
    deliver(landing, events_of(4, DAY + timedelta(hours=1), "new"), DAY + timedelta(hours=2, minutes=5))
    report = ingest(spark, landing, lake)
    assert report.totals()["duplicates_dropped"] == 12 and report.totals()["rows_written"] == 4
    assert duckdb_rows(lake) == rows("b0", "b1", "b2", "new")
    assert partition_folders(lake) == ["0", "1", "2", "3", "4"], "the next batches ran on the new partitions"

    # Back down, then copies once more: still each event once.
    assert rescale.main(["--lake", str(lake), "--state-partitions", "3", "--run-id", "shrink"]) == 0
    deliver(landing, before[0] + events_of(4, DAY + timedelta(hours=1), "new"), DAY + timedelta(hours=3))
    assert ingest(spark, landing, lake).totals()["duplicates_dropped"] == 8
    assert duckdb_rows(lake) == rows("b0", "b1", "b2", "new") and state_partitions(Lake(lake).checkpoint) == 3


def test_a_rescale_that_died_part_way_stops_the_ingest_until_it_is_run_again(spark, landing, lake, monkeypatch):
    events = events_of(4, DAY, "a")
    deliver(landing, events, DAY + timedelta(hours=1))
    ingest(spark, landing, lake)

    def dies_after_the_old_state_moved(noted: rescale.Rescale) -> None:
        noted.old.parent.mkdir(parents=True)
        noted.state.rename(noted.old)
        raise KeyboardInterrupt  # the process is stopped between the two renames

    with monkeypatch.context() as patched:
        patched.setattr(rescale, "swap", dies_after_the_old_state_moved)
        with pytest.raises(KeyboardInterrupt):
            rescale.main(["--lake", str(lake), "--state-partitions", "4", "--run-id", "cut"])
    deliver(landing, events, DAY + timedelta(hours=2))
    with pytest.raises(CheckpointError, match="a rescale of the de-duplication state did not finish"):
        ingest(spark, landing, lake)

    assert rescale.main(["--lake", str(lake), "--state-partitions", "4"]) == 0, "run again: finished"
    assert state_partitions(Lake(lake).checkpoint) == 4 and not Lake(lake).rescaling.exists()
    assert ingest(spark, landing, lake).totals()["duplicates_dropped"] == 4
    assert duckdb_rows(lake) == rows("a")


def test_rescale_in_its_own_process_on_a_just_ingested_lake_twice_and_on_a_copy(spark, landing, lake, tmp_path, caplog):
    """As README documents it: `python -m jobs.rescale` right after an ingest and a compaction (a process that has run
    no stream: it exited 1 on StateStoreCoordinator), at once again (the first one's placeholder key was taken for a
    lost key), and on the lake copied to another disk (those two as its door runs it, in the tests' session); no stack
    trace on the way, and the ingest goes on with every key."""
    before = events_of(4, DAY, "a")
    deliver(landing, before[:2], DAY + timedelta(hours=1))
    deliver(landing, before[2:], DAY + timedelta(hours=1, minutes=5))
    ingest(spark, landing, lake, max_files_per_trigger=1)
    assert compact.main(["--lake", str(lake), "--closed-at", "2024-04-01"]) == 0
    assert len(date_files(Lake(lake), DAY.date())) == 1, "compacted"

    succeeded(command("jobs.rescale", "--lake", lake, "--state-partitions", 5))
    run_cleanly(spark, caplog, "rescale", ["--lake", str(lake), "--state-partitions", "3"])
    assert state_partitions(Lake(lake).checkpoint) == 3 and not Lake(lake).rescaling.exists()
    copy = tmp_path / "restored" / "lake"
    shutil.copytree(lake, copy, symlinks=True)
    run_cleanly(spark, caplog, "rescale", ["--lake", str(copy), "--state-partitions", "4"])

    deliver(landing, before, DAY + timedelta(hours=2))
    deliver(landing, events_of(4, DAY + timedelta(hours=1), "new"), DAY + timedelta(hours=2, minutes=1))
    for rescaled, partitions in ((lake, 3), (copy, 4)):
        assert ingest(spark, landing, rescaled).totals()["duplicates_dropped"] == 4
        assert duckdb_rows(rescaled) == rows("a", "new") and partition_folders(rescaled) == [str(n) for n in range(partitions)]


def test_a_rescale_that_fails_while_building_leaves_the_lake_able_to_ingest(spark, landing, lake, monkeypatch):
    events = events_of(4, DAY, "a")
    deliver(landing, events, DAY + timedelta(hours=1))
    ingest(spark, landing, lake)

    def fails(*_: object) -> None:
        raise RuntimeError("the new state could not be written")

    with monkeypatch.context() as patched:
        patched.setattr(rescale, "seed", fails)
        with pytest.raises(RuntimeError):
            rescale.main(["--lake", str(lake), "--state-partitions", "4"])
    assert not Lake(lake).rescaling.exists() and state_partitions(Lake(lake).checkpoint) == 2
    deliver(landing, events, DAY + timedelta(hours=2))
    assert ingest(spark, landing, lake).totals()["duplicates_dropped"] == 4, "the old state, intact, drops the copies"
    assert rescale.main(["--lake", str(lake), "--state-partitions", "4"]) == 0
