"""Compaction of closed event dates: a date written by many runs becomes one file, readers see the old files or the new
(never a row twice or missing), and ingest and rebuild go on over it exactly."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import date, timedelta
from pathlib import Path

import pytest

from jobs.lake import Lake, partition
from jobs.tables.events import date_files
from jobs.upkeep import compact, rebuild
from tests.conftest import ROOT
from tests.helpers import COUNT_LOOP, DAY, counts_seen, deliver, duckdb_rows, events_of, ingest

RUNS = 8


def rows_of(prefixes: list[str], n: int = 5) -> list[tuple[str, str]]:
    return sorted((f"{prefix}-{i}", str(DAY.date())) for prefix in prefixes for i in range(n))


def hourly_runs(spark, landing: Path, lake: Path) -> list[str]:
    """RUNS runs, each delivering one file of the first day's events, an hour apart."""
    prefixes = [f"h{hour}" for hour in range(RUNS)]
    for hour, prefix in enumerate(prefixes):
        deliver(landing, events_of(5, DAY + timedelta(hours=hour), prefix), DAY + timedelta(hours=hour, minutes=5))
        ingest(spark, landing, lake)
    return prefixes


def test_a_date_written_by_many_runs_becomes_one_file_and_ingest_and_rebuild_go_on(spark, landing, lake, tmp_path):
    prefixes = hourly_runs(spark, landing, lake)
    layout = Lake(lake)
    before = date_files(layout, DAY.date())
    assert len(before) >= RUNS and duckdb_rows(lake) == rows_of(prefixes)

    dry = compact.parse_args(["--lake", str(lake), "--dry-run"])
    assert compact.run(dry) == 0 and date_files(layout, DAY.date()) == before, "a dry run changes nothing"

    seen_by_reader = tmp_path / "reader.txt"
    with seen_by_reader.open("w") as out:
        reader = subprocess.Popen([sys.executable, "-c", COUNT_LOOP, str(lake), str(DAY.date())], stdout=out, cwd=ROOT)
        assert compact.main(["--lake", str(lake), "--run-id", "compact-test"]) == 0
        time.sleep(1)
        reader.terminate()
        reader.wait()
    counts = counts_seen(seen_by_reader)
    assert counts == {RUNS * 5}, f"a reader in a loop saw {counts}: never a row twice or missing"
    assert len(date_files(layout, DAY.date())) == 1 and duckdb_rows(lake) == rows_of(prefixes)
    assert all(path.exists() for path in before), "the old files stay, for the snapshots that name them, until they expire"
    assert compact.main(["--lake", str(lake)]) == 0 and len(date_files(layout, DAY.date())) == 1, "a compact date is left alone"

    # A late file and a re-delivery for the compacted date: each event once.
    deliver(landing, events_of(5, DAY + timedelta(hours=20), "late"), DAY + timedelta(hours=RUNS + 1))
    deliver(landing, events_of(5, DAY, "h0"), DAY + timedelta(hours=RUNS + 2))
    report = ingest(spark, landing, lake)
    assert report.totals()["duplicates_dropped"] == 5
    assert duckdb_rows(lake) == rows_of([*prefixes, "late"])

    # A rebuild of the compacted date reads its landing files again: the same rows.
    config = rebuild.RebuildConfig(str(landing), str(lake), (DAY.date(),), "rebuild-after-compact")
    assert rebuild.run(config, lambda: spark).status == "succeeded"
    assert duckdb_rows(lake) == rows_of([*prefixes, "late"])


@pytest.mark.unit
def test_only_closed_dates_with_more_files_than_their_size_needs_or_not_laid_out_are_planned(tmp_path, monkeypatch):
    lake = Lake.at(tmp_path)
    held: dict[str, list[Path]] = {}
    for day, files in ((date(2024, 3, 1), 3), (date(2024, 3, 2), 1), (date(2024, 3, 9), 3)):
        folder = partition(lake.events, day)
        folder.mkdir(parents=True)
        for n in range(files):
            (folder / f"part-{n}.parquet").write_bytes(b"x" * 100)
            held.setdefault(str(day), []).append(folder / f"part-{n}.parquet")
    # One file the ingest wrote, in arrival order (named as jobs/java/cloudtrail/TableWriter.java names them).
    arrived = partition(lake.events, date(2024, 3, 3)) / "part-00003-0f8fad5b-d9cb-469f-a165-70867728950e-b7.c000.zstd.parquet"
    arrived.parent.mkdir(parents=True)
    arrived.write_bytes(b"x" * 100)
    held["2024-03-03"] = [arrived]
    monkeypatch.setattr(compact, "event_dates", lambda _: sorted(held))  # the table's dates and files, as its metadata lists them
    monkeypatch.setattr(compact, "date_files", lambda _, day: held.get(str(day), []))
    config = compact.CompactConfig(lake, "plan", target_bytes=150)
    planned = compact.plan_compaction(config, today=date(2024, 3, 10))
    assert [(p.event_date, len(p.files), p.needed) for p in planned] == [(date(2024, 3, 1), 3, 2), (date(2024, 3, 3), 1, 1)], (
        "9 March is within the horizon; 2 March is one file already laid out"
    )
    asked = compact.plan_compaction(compact.CompactConfig(lake, "plan", dates=(date(2024, 3, 9),)), today=date(2024, 3, 10))
    assert [(p.event_date, p.needed) for p in asked] == [(date(2024, 3, 9), 1)], "dates asked for are compacted, closed or not"
