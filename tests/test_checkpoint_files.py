"""Each file of the checkpoint and of the tables' commit logs, damaged in each way a disk, a copy tool or a hand
does it: the ingest refuses with exit 2 and one line naming the file, or goes on with the table equal to the
oracle; never a traceback, never a silent loss (issue #57)."""

from __future__ import annotations

import logging
import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from jobs.iceberg.embedded import registered, static_table
from jobs.ingest.command import main
from jobs.lake import Lake
from jobs.spark.logs import batch_files, local_path
from jobs.tables.events import events_location
from jobs.tables.events_table import EventsTable
from jobs.upkeep import compact, rebuild, repair, rescale
from tests.helpers import DAY, command, deliver, duckdb_rows, events_of, ingest, refusal, succeeded

SHAPES = ("cut", "garbage", "version line only", "empty", "deleted", "deleted, its .crc kept")


def newest(folder: Path) -> Path:
    return batch_files(folder)[-1][1]


# Which file of a lake each case damages.
FILES = {
    "commit": lambda lake: newest(lake.checkpoint / "commits"),
    "offsets": lambda lake: newest(lake.checkpoint / "offsets"),
    "source log": lambda lake: newest(lake.checkpoint / "sources" / "0"),
    "stream metadata": lambda lake: lake.checkpoint / "metadata",
    "events metadata": lambda lake: Path(local_path(registered(lake, "events").mapped(registered(lake, "events").metadata_location, lake))),
}
# What the ingest does then: "goes on" (exactly), or refuses ("refused"), and for a commit the mend its line names.
GOES_ON = {("commit", "deleted"), ("commit", "deleted, its .crc kept"), ("source log", "version line only")}
GOES_ON |= {("stream metadata", shape) for shape in SHAPES}


def damage(path: Path, shape: str) -> None:
    crc = path.with_name(f".{path.name}.crc")
    text = path.read_text()
    if shape != "deleted, its .crc kept":
        crc.unlink(missing_ok=True)
    if shape == "cut":
        path.write_text(text[: len(text) * 2 // 3])
    elif shape == "garbage":
        path.write_bytes(os.urandom(64))
    elif shape == "version line only":
        path.write_text("v1\n")
    elif shape == "empty":
        path.write_text("")
    else:
        path.unlink()


@pytest.fixture(scope="module")
def built(spark, tmp_path_factory) -> tuple[Path, Path, list[tuple[str, str]]]:
    """A lake two batches in, a landing zone with one file more, and the table the next run must leave."""
    root = tmp_path_factory.mktemp("damaged-files")
    landing, lake = root / "landing", root / "lake"
    deliver(landing, events_of(5, DAY, "a"), DAY + timedelta(hours=1))
    deliver(landing, events_of(5, DAY + timedelta(hours=1), "b"), DAY + timedelta(hours=2))
    ingest(spark, landing, lake, max_files_per_trigger=1)
    deliver(landing, events_of(5, DAY + timedelta(hours=2), "a"), DAY + timedelta(hours=3))  # a copy
    deliver(landing, events_of(5, DAY + timedelta(hours=2), "c"), DAY + timedelta(hours=3))
    oracle = sorted((f"{p}-{i}", str(DAY.date())) for p in "abc" for i in range(5))
    return landing, lake, oracle


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", FILES)
def test_a_damaged_log_file_is_refused_in_one_line_or_the_run_goes_on_exactly(built, tmp_path, caplog, name, shape):
    landing, base, oracle = built
    lake = tmp_path / "lake"
    shutil.copytree(base, lake, symlinks=True)
    path = FILES[name](Lake(lake))
    damage(path, shape)
    argv = ["--landing", str(landing), "--lake", str(lake), "--settle", "0 seconds", "--run-id", "after-damage"]
    with caplog.at_level(logging.ERROR):
        code = main(argv)
    if (name, shape) in GOES_ON:
        assert code == 0 and duckdb_rows(lake) == oracle
        return
    errors = [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR and record.name == "cloudtrail"]
    assert code == 2 and len(errors) == 1 and "Refusing to start" in errors[0], errors
    named = path if name == "events metadata" else path.parent  # the file, or the log it is of
    assert str(named) in errors[0] and "\n" not in errors[0]
    if name == "events metadata":  # unreadable until restored: nothing committed over it
        assert registered(Lake(lake), "events").metadata_location == registered(Lake(base), "events").metadata_location
    else:
        assert duckdb_rows(lake) == duckdb_rows(base), "the table as it was"
    if name == "commit":  # the mend the line names: the batch runs again and writes nothing twice
        assert "delete it (and its .crc)" in errors[0]
        path.unlink()
        assert main(argv) == 0 and duckdb_rows(lake) == oracle


def older_table(spark, base: Path, lake: Path) -> str:
    """A copy of the lake with its events table put back as it stood after batch 0 (as a restore of its catalog from an
    older backup leaves it)."""
    shutil.copytree(base, lake, symlinks=True)
    entry = registered(Lake(lake), "events")
    old = static_table(Lake(lake), entry)
    first = next(s for s in old.snapshots() if s.summary.get("cloudtrail.batch") == "0")
    files = [entry.mapped(task.file.file_path, Lake(lake)) for task in old.scan(snapshot_id=first.snapshot_id).plan_files()]
    table = EventsTable(spark, Lake(lake))  # registered where the copy is
    held = [str(data_file.location()) for data_file in table.current(table.java())]
    table.commit(table.java(), files, held, {}, "0")
    return events_location(Lake(lake))


def test_a_table_older_than_the_checkpoint_is_refused_then_repaired(spark, built, tmp_path):
    """Its newest batches' rows are missing, and no run would read their files again (today's ingest said "nothing
    new" and jobs.repair "nothing to repair", exit 0). The repair puts the checkpoint back to the table's batch: the
    next ingest reads the later batches' files again, once, and the table equals the oracle."""
    landing, base, oracle = built
    lake = tmp_path / "lake"
    events = older_table(spark, base, lake)
    line = refusal(command("jobs.cloudtrail_ingest", "--landing", landing, "--lake", lake))
    assert f"the table {events} has committed batches up to 0" in line and "older than the checkpoint" in line
    assert repair.main(["--lake", str(lake), "--landing", str(landing), "--dry-run"]) == 0
    assert refusal(command("jobs.cloudtrail_ingest", "--landing", landing, "--lake", lake)), "a dry run changes nothing"
    succeeded(command("jobs.repair", "--lake", lake, "--landing", landing))
    assert main(["--landing", str(landing), "--lake", str(lake), "--settle", "0 seconds"]) == 0
    assert duckdb_rows(lake) == oracle, "b's events again, c's once, the copy of a's dropped"
    assert repair.main(["--lake", str(lake), "--landing", str(landing)]) == 0 and duckdb_rows(lake) == oracle


def test_a_table_older_than_the_state_the_checkpoint_keeps_is_refused_by_the_repair(spark, landing, lake, tmp_path):
    for n in range(5):  # five batches: the state keeps the last 3 versions
        deliver(landing, events_of(2, DAY + timedelta(hours=n), f"e{n}"), DAY + timedelta(hours=n + 1))
    ingest(spark, landing, lake, max_files_per_trigger=1)
    older_table(spark, lake, tmp_path / "restored")
    line = refusal(command("jobs.repair", "--lake", tmp_path / "restored", "--landing", landing))
    assert "no longer keeps what going back to it needs" in line and "Nothing was changed" in line


WRITERS = {
    "rebuild": lambda landing, lake: rebuild.main(
        ["--landing", landing, "--lake", lake, "--from-date", "2024-03-01", "--to-date", "2024-03-01"]
    ),
    "compact": lambda landing, lake: compact.main(["--lake", lake, "--closed-at", "2024-04-01"]),
    "rescale": lambda landing, lake: rescale.main(["--lake", lake, "--state-partitions", "3"]),
}


@pytest.mark.parametrize("writer", WRITERS)
def test_every_command_that_writes_checks_the_tables_against_the_checkpoint_first(spark, built, tmp_path, caplog, writer):
    landing, base, _ = built
    lake = tmp_path / "lake"
    older_table(spark, base, lake)

    def tables_and_checkpoint() -> list[str]:  # a report and the lock file may come
        return sorted(str(path.relative_to(lake)) for folder in ("iceberg", "_checkpoints/ingest") for path in (lake / folder).rglob("*"))

    before = tables_and_checkpoint()
    with caplog.at_level(logging.ERROR):
        assert WRITERS[writer](str(landing), str(lake)) == 2
    errors = [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1 and "older than the checkpoint" in errors[0], errors
    assert tables_and_checkpoint() == before, "nothing written, nothing moved"


def test_a_lake_that_is_a_file_is_refused_in_one_line(tmp_path, landing):
    (landing / "AWSLogs").mkdir(parents=True)
    lake = tmp_path / "not-a-folder"
    lake.write_text("")
    line = refusal(command("jobs.cloudtrail_ingest", "--landing", landing, "--lake", lake))
    assert f"the lake {lake} cannot be written (Not a directory" in line
