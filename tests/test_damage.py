"""What operators and copy tools do to a landing zone: the ingest never halts on it, never loses or
duplicates an event over it, and says what it passed over (issue #34's landing rows)."""

from __future__ import annotations

import dataclasses
import html
import json
import logging
import os
import re
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from starlette.requests import Request

from jobs.ingest.command import main
from jobs.lake import Lake
from jobs.landing import layout as landing_zone
from jobs.ledger import planner as ledger
from jobs.ledger import store as ledger_files
from jobs.reporting.summary import run_summary
from jobs.spark.logs import last_commit
from jobs.status import lake_status
from jobs.tables.events import date_files
from jobs.tables.events_table import EventsTable
from jobs.upkeep import compact, rebuild, repair
from tests.helpers import DAY, deliver, duckdb_rows, events_of, ingest, table_rows
from tools import status as status_tool


def rows_of(prefixes: dict[str, datetime], n: int = 3) -> list[tuple[str, str]]:
    """(eventID, event date) of the `n` events `events_of` made for each prefix, from its start."""
    return sorted((f"{prefix}-{i}", str((start + timedelta(minutes=i)).date())) for prefix, start in prefixes.items() for i in range(n))


def test_the_landing_walk_passes_over_what_it_cannot_read_and_says_so(spark, landing, lake):
    """A link loop (as a day folder and as a file), a folder named like a log file, a link to nothing and a
    stray file: every event beside them is ingested once, each of them is named with its reason in the run
    report and the run's summary, and the next run neither halts nor takes anything again."""
    first = deliver(landing, events_of(3, DAY, "a"), DAY)
    deliver(landing, events_of(3, DAY + timedelta(days=1), "b"), DAY + timedelta(days=1))
    day = first.parent
    looped_day = day.parent / "09"
    os.symlink(looped_day.name, looped_day)  # 09 -> 09: ELOOP when listed
    looped_file = day / "111122223333_CloudTrail_us-east-1_20240301T0000Z_loop.json.gz"
    os.symlink(looped_file.name, looped_file)
    nested = day / "111122223333_CloudTrail_us-east-1_20240301T0005Z_dir.json.gz"
    deliver(landing, events_of(2, DAY, "inner"), DAY).rename(nested.with_suffix(".tmp"))
    nested.mkdir()
    nested.with_suffix(".tmp").rename(nested / "inner.json.gz")
    dangling = day / "111122223333_CloudTrail_us-east-1_20240301T0010Z_gone.json.gz"
    os.symlink("nowhere.json.gz", dangling)
    stray = day / "notes.txt"
    stray.write_text("hand-made")

    report = ingest(spark, landing, lake)
    assert report.status == "succeeded" and duckdb_rows(lake) == rows_of({"a": DAY, "b": DAY + timedelta(days=1)})
    skipped = {entry["path"]: entry["reason"] for entry in report.ledger["skipped"]}  # type: ignore[index, union-attr]
    assert skipped == {
        str(looped_day): "cannot be read: Too many levels of symbolic links",
        str(looped_file): "cannot be read: Too many levels of symbolic links",
        str(nested): "a folder named like a log file: what it holds is not read",
        str(dangling): "a link to nothing",
        str(stray): "not a CloudTrail log file name",
    }
    assert report.ledger["skipped_entries"] == 5
    summary = "\n".join(run_summary(dataclasses.asdict(report), None))
    assert "landing skipped           5" in summary and f"{nested}: a folder named like a log file" in summary

    again = ingest(spark, landing, lake)
    assert again.totals()["files_read"] == 0 and again.ledger["skipped_entries"] == 5
    assert duckdb_rows(lake) == rows_of({"a": DAY, "b": DAY + timedelta(days=1)})


@pytest.mark.unit
def test_a_folder_that_cannot_be_listed_is_passed_over_and_noted(tmp_path, monkeypatch):
    """Root reads every folder whatever its mode, so the refusal a user without the permission gets is made here."""
    readable = deliver(tmp_path, events_of(1, DAY, "a"), DAY)
    refused = deliver(tmp_path, events_of(1, DAY, "b"), DAY + timedelta(days=1)).parent
    organization = landing_zone.aws_logs(tmp_path) / "o-refused"  # an account or organization level: listed once
    organization.mkdir()
    scandir = os.scandir

    def refusing(path):
        if Path(path) in (refused, organization):
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(landing_zone.os, "scandir", refusing)
    skipped: list[landing_zone.Skipped] = []
    folders = landing_zone.day_folders(tmp_path, skipped=skipped)
    listed = [file.path for _, folder in folders for file in landing_zone.log_files_in(folder, skipped)]
    assert listed == [str(readable)]
    assert skipped == [
        landing_zone.Skipped(str(organization), "cannot be listed: Permission denied"),
        landing_zone.Skipped(str(refused), "cannot be listed: Permission denied"),
    ]


def test_a_file_modified_in_the_future_does_not_move_the_watermark(spark, landing, lake):
    """One file touched to 2036 arrives when it is listed: the next run's on-time events are neither late nor dropped."""
    now = datetime.now(tz=UTC).replace(second=0, microsecond=0)
    deliver(landing, events_of(3, now - timedelta(minutes=30), "a"), now - timedelta(minutes=20))
    touched = deliver(landing, events_of(3, now - timedelta(minutes=25), "b"), now - timedelta(minutes=15))
    future = datetime(2036, 1, 1, tzinfo=UTC).timestamp()
    os.utime(touched, (future, future))

    first = ingest(spark, landing, lake)
    assert first.ledger["future_mtimes"] == 1
    watermark = last_commit(Lake(lake).checkpoint).watermark
    assert watermark is not None and watermark <= datetime.now(tz=UTC)

    deliver(landing, events_of(3, now - timedelta(minutes=10), "c"), now - timedelta(minutes=5))
    second = ingest(spark, landing, lake)
    totals = second.totals()
    assert totals["rows_written"] == 3 and totals["rows_dropped_by_watermark"] == 0
    assert totals["late_events"]["count"] == 0
    starts = {"a": now - timedelta(minutes=30), "b": now - timedelta(minutes=25), "c": now - timedelta(minutes=10)}
    assert duckdb_rows(lake) == rows_of(starts)


@pytest.mark.unit
@pytest.mark.parametrize("made", [False, True])
def test_a_landing_zone_without_aws_logs_is_refused_with_usage(tmp_path, capsys, made):
    landing = tmp_path / "landing"
    if made:
        landing.mkdir()  # there, but not the landing zone's root
    with pytest.raises(SystemExit) as exit_info:
        main(["--landing", str(landing), "--lake", str(tmp_path / "lake")])
    assert exit_info.value.code == 2
    assert f"--landing {landing} holds no AWSLogs/ folder" in capsys.readouterr().err
    assert not (tmp_path / "lake").exists()


def two_runs(spark, landing: Path, lake: Path, between=None) -> None:
    """Day 0 ingested, `between(lake)` (a backup, say), day 1 ingested."""
    deliver(landing, events_of(3, DAY, "a"), DAY)
    ingest(spark, landing, lake)
    if between:
        between(lake)
    deliver(landing, events_of(3, DAY + timedelta(days=1), "b"), DAY + timedelta(days=1))
    ingest(spark, landing, lake)


def refused(landing: Path, lake: Path) -> str:
    """The ingest's exit code 2 and its one line, and the same line under the lake page's and `make status`'s Problems."""
    messages: list[str] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("cloudtrail").addHandler(handler)  # Airflow's logging set-up, once imported, hides it from caplog
    try:
        assert main(["--landing", str(landing), "--lake", str(lake), "--settle", "0 seconds"]) == 2
    finally:
        logging.getLogger("cloudtrail").removeHandler(handler)
    assert len(messages) == 1
    assert status_problems(landing, lake) == messages
    return messages[0]


def status_problems(landing: Path, lake: Path) -> list[str]:
    page = lake_page_text(landing, lake)
    found = lake_status.problems(Lake.at(lake))
    assert all(html.escape(problem) in page for problem in found)
    now = datetime.now(tz=UTC)
    shown = "\n".join(status_tool.overview(Lake.at(lake), str(landing), None, timedelta(hours=2), timedelta(minutes=15), now))
    assert all(problem in shown for problem in found) and ("PROBLEMS" in shown) == bool(found)
    return found


def lake_page_text(landing: Path, lake: Path) -> str:
    from cloudtrail_airflow import lake_view  # the API server's plugin, as it renders the page

    shown = {"CLOUDTRAIL_LAKE": str(lake), "CLOUDTRAIL_LANDING": str(landing)}
    before = {name: os.environ.get(name) for name in shown}
    os.environ.update(shown)
    try:
        page = lake_view.lake_page(Request({"type": "http", "root_path": ""}), "")
        assert lake_view.status_json()["problems"] == lake_status.problems(Lake.at(lake))
    finally:
        for name, value in before.items():  # the session's own roots, which the DAG tests use
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    assert page.status_code == 200
    return bytes(page.body).decode()


def test_a_checkpoint_older_than_the_table_or_a_cut_manifest_is_refused_and_a_moved_lake_goes_on(spark, landing, lake):
    """Each damage on a copy of one lake: the run exits 2 with one line naming it, the lake page and `make status`
    show that line, and the table keeps every event once."""
    backup = lake.parent / "backup"
    two_runs(spark, landing, lake, lambda lake: shutil.copytree(Lake(lake).checkpoints, backup))
    expected = rows_of({"a": DAY, "b": DAY + timedelta(days=1)})

    def damaged(damage, repaired: bool = False, reads_again: int | None = None, then=None) -> str:
        """The refusal's line; with `repaired`, then (after the operator's step `then`) `jobs.repair` and a run that
        reads the rest again (`reads_again` files), exactly."""
        copy = lake.parent / f"damaged-{damage.__name__}"
        shutil.copytree(lake, copy)
        damage(Lake(copy))
        message = refused(landing, copy)
        assert duckdb_rows(copy) == expected, "nothing lost, nothing written twice"
        if repaired:
            if then is not None:
                then(Lake(copy))
            assert repair.main(["--lake", str(copy), "--landing", str(landing)]) == 0
            assert set(duckdb_rows(copy)) <= set(expected), "the tables went back to the checkpoint"
            first = ingest(spark, landing, copy)
            assert reads_again is None or first.totals()["files_read"] == reads_again
            assert duckdb_rows(copy) == expected and status_problems(landing, copy) == []
            assert ingest(spark, landing, copy).totals()["files_read"] == 0
        return message

    def restored_from_backup(copy: Lake) -> None:  # README's advice before: restore _checkpoints/ alone
        shutil.rmtree(copy.checkpoints)
        shutil.copytree(backup, copy.checkpoints)

    def newest_batch_rolled_back(copy: Lake) -> None:
        newest = max(int(p.name) for p in (copy.checkpoint / "commits").glob("[0-9]*"))
        for log in ("offsets", "commits"):
            (copy.checkpoint / log / str(newest)).unlink()

    def manifest_cut_short(copy: Lake) -> None:
        manifest = max(copy.manifests.glob("[0-9]*.jsonl"))
        manifest.write_text(manifest.read_text()[:-20])

    def newest_manifest_deleted(copy: Lake) -> None:
        max(copy.manifests.glob("[0-9]*.jsonl")).unlink()

    def all_manifests_deleted(copy: Lake) -> None:
        shutil.rmtree(copy.manifests)

    # The lost manifests' files are found again from the tables: nothing is read twice.
    assert re.match(r"1 manifests of the ledger that batches read are gone", damaged(newest_manifest_deleted, True, 0))
    assert re.match(r"2 manifests of the ledger that batches read are gone", damaged(all_manifests_deleted, True, 0))
    older = r"committed batches up to (\d+) but the checkpoint \S+ goes up to batch (\d+): it is older than the table"
    for damage in (restored_from_backup, newest_batch_rolled_back):
        found = re.search(older, damaged(damage, repaired=True))
        assert found and int(found[1]) > int(found[2]), damage.__name__
    cut = damaged(manifest_cut_short, True, 0, then=newest_manifest_deleted)  # the message's advice: delete it, repair
    assert re.match(r"the ledger's manifest \S+/damaged-manifest_cut_short/\S+\.jsonl is damaged at line 1", cut)
    assert status_problems(landing, lake) == [], "the undamaged lake shows no problem"

    # The undamaged lake moved to another path goes on exactly.
    moved = lake.parent / "elsewhere" / "lake"
    moved.parent.mkdir()
    shutil.move(lake, moved)
    deliver(landing, events_of(3, DAY + timedelta(days=2), "c"), DAY + timedelta(days=2))
    report = ingest(spark, landing, moved)
    assert report.totals()["files_read"] == 1, "the manifests read before the move are not read again"
    assert duckdb_rows(moved) == sorted([*expected, *rows_of({"c": DAY + timedelta(days=2)})])
    assert ingest(spark, landing, moved).totals()["files_read"] == 0


def test_lost_check_times_new_ctimes_and_a_moved_landing_zone_take_nothing_again(spark, landing, lake, monkeypatch):
    """Without last_success.json's check time, or with every ctime moved (a chmod, a copy to another disk), every
    retired landing file would look new again (400 to 1,200 duplicates in the issue)."""
    monkeypatch.setattr(ledger, "CLOCK_SLACK_NS", 0)  # the files are written well before each run's check
    expected = retired_history(spark, landing, lake)
    state = Lake(lake).last_success

    def run() -> None:
        report = ingest(spark, landing, lake, max_files_per_trigger=1, source_retention="2 days")
        assert (report.ledger["new_files"], report.ledger["stragglers"], report.totals()["files_read"]) == (0, 0, 0)
        assert duckdb_rows(lake) == expected

    for damage in (lambda: state.write_text(state.read_text()[:10]), state.unlink):
        recorded = json.loads(state.read_text())["checked_at_ns"]
        damage()
        assert status_problems(landing, lake) != []
        run()
        assert json.loads(state.read_text())["checked_at_ns"] >= recorded, "written again from the newest run's report"
        assert status_problems(landing, lake) == []
    chmod_all(landing)
    run()
    landing = copied_elsewhere(landing)
    run()
    deliver(landing, events_of(3, DAY + timedelta(days=7), "d7"), DAY + timedelta(days=7))
    assert ingest(spark, landing, lake, max_files_per_trigger=1, source_retention="2 days").totals()["files_read"] == 1
    assert duckdb_rows(lake) == sorted([*expected, *rows_of({"d7": DAY + timedelta(days=7)})])


def retired_history(spark, landing: Path, lake: Path) -> list[tuple[str, str]]:
    """Seven delivery days ingested with two days' retention: the manifests of the oldest days are let go."""
    for day in range(6):
        deliver(landing, events_of(3, DAY + timedelta(days=day), f"d{day}"), DAY + timedelta(days=day))
    ingest(spark, landing, lake, max_files_per_trigger=1, source_retention="2 days")
    deliver(landing, events_of(3, DAY + timedelta(days=6), "d6"), DAY + timedelta(days=6))
    assert ingest(spark, landing, lake, max_files_per_trigger=1, source_retention="2 days").ledger["manifests_dropped"] > 0
    return rows_of({f"d{day}": DAY + timedelta(days=day) for day in range(7)})


def chmod_all(landing: Path) -> Path:
    for folder, _, names in os.walk(landing):
        for path in [folder, *(os.path.join(folder, name) for name in names)]:
            os.chmod(path, os.stat(path).st_mode | 0o040)  # g+r: every ctime moves
    return landing


def copied_elsewhere(landing: Path, keep_times: bool = True) -> Path:
    """The zone copied to another disk, modification times kept (cp -a) or not (cp -r), the old copy gone: every ctime
    and path is new."""
    moved = landing.parent / "mounted-elsewhere" / "landing"
    shutil.copytree(landing, moved, symlinks=True, copy_function=shutil.copy2 if keep_times else shutil.copyfile)
    shutil.rmtree(landing)
    return moved


def test_a_copy_that_resets_times_reads_nothing_again_and_a_rebuild_reads_the_files_where_they_are_now(spark, landing, lake):
    """A copy tool that does not keep modification times makes every taken file look changed: the content's SHA-256
    says it is not, and it is not read again (events older than the de-duplication horizon would come back twice)."""
    starts = {f"d{day}": DAY + timedelta(days=day) for day in range(3)}
    for prefix, start in starts.items():
        deliver(landing, events_of(3, start, prefix), start)
    ingest(spark, landing, lake)
    landing = copied_elsewhere(landing, keep_times=False)

    copied = ingest(spark, landing, lake)
    assert (copied.ledger["restamped_files"], copied.ledger["changed_files"], copied.totals()["files_read"]) == (3, 0, 0)
    again = ingest(spark, landing, lake)
    assert (again.ledger["restamped_files"], again.totals()["files_read"]) == (0, 0), "the new times are in the ledger"
    assert duckdb_rows(lake) == rows_of(starts)

    EventsTable(spark, Lake(lake)).replace_dates(["2024-03-02"], [], {})  # lost
    config = rebuild.RebuildConfig(str(landing), str(lake), (DAY.date() + timedelta(days=1),), "rebuild-after-copy")
    assert rebuild.run(config, lambda: spark).status == "succeeded"
    assert duckdb_rows(lake) == rows_of(starts), "the rebuild found the day's file in the copied zone"


def test_a_file_that_cannot_be_read_is_passed_over_and_taken_once_it_can(spark, landing, lake, monkeypatch):
    """Root reads every file whatever its mode, so the refusal a user without the permission gets is made here.
    The refused file is in a folder older than the de-duplication horizon, which a run between full listings
    lists only when it changed: a permission put right changes the file, not its folder. The runs' clock is ten
    minutes ahead, as for runs that come well after the delivery: the folder's own time says nothing changed."""
    later = SimpleNamespace(time_ns=lambda: time.time_ns() + 600 * 10**9)
    newest = DAY + timedelta(days=5)
    deliver(landing, events_of(3, newest, "a"), newest)
    refused = deliver(landing, events_of(3, DAY, "b"), DAY + timedelta(minutes=5))

    def refusing(path: str, *args, **kwargs):
        if path == str(refused):
            raise PermissionError(13, "Permission denied", path)
        return open(path, *args, **kwargs)

    monkeypatch.setattr(ledger_files, "open", refusing, raising=False)
    monkeypatch.setattr(ledger, "time", later)
    first = ingest(spark, landing, lake)
    assert [(s["path"], s["reason"]) for s in first.ledger["skipped"]] == [  # type: ignore[union-attr]
        (str(refused), "cannot be read: Permission denied; tried again next run")
    ]
    assert duckdb_rows(lake) == rows_of({"a": newest})
    monkeypatch.undo()
    monkeypatch.setattr(ledger, "time", later)
    second = ingest(spark, landing, lake)
    assert not second.ledger["full_listing"] and (second.totals()["files_read"], second.ledger["skipped_entries"]) == (1, 0)
    assert duckdb_rows(lake) == rows_of({"a": newest, "b": DAY})


def test_a_repair_rolls_the_tables_back_across_many_batches(spark, landing, lake):
    """A checkpoint put back from a backup eight batches older than the tables: the repair takes the later batches'
    files out of the tables (TableWriter's file names carry their batch), and the next ingest writes them once."""
    for n in range(4):
        deliver(landing, events_of(3, DAY + timedelta(hours=n), f"a{n}"), DAY + timedelta(hours=n))
    ingest(spark, landing, lake, max_files_per_trigger=1)
    backup = lake.parent / "backup"
    shutil.copytree(Lake(lake).checkpoints, backup)
    for n in range(8):
        deliver(landing, events_of(3, DAY + timedelta(days=1, hours=n), f"b{n}"), DAY + timedelta(days=1, hours=n))
    ingest(spark, landing, lake, max_files_per_trigger=1)
    expected = duckdb_rows(lake)
    assert len(expected) == 36

    shutil.rmtree(Lake(lake).checkpoints)
    shutil.copytree(backup, Lake(lake).checkpoints)
    assert repair.main(["--lake", str(lake), "--landing", str(landing), "--dry-run"]) == 0
    assert duckdb_rows(lake) == expected, "a dry run changes nothing"
    assert repair.main(["--lake", str(lake), "--landing", str(landing)]) == 0
    assert {event_id[0] for event_id, _ in duckdb_rows(lake)} == {"a"}
    report = ingest(spark, landing, lake, max_files_per_trigger=1)
    assert report.totals()["files_read"] == 8 and duckdb_rows(lake) == expected
    assert ingest(spark, landing, lake).totals()["files_read"] == 0


def test_a_repair_takes_the_later_batches_rows_out_of_a_compacted_date(spark, landing, lake):
    """A checkpoint older than tables compacted since: the compacted file holds rows of batches before the checkpoint's
    and after it, and names no batch. The repair moved 0 files and the next ingest wrote the later batches' events a
    second time; it now takes their rows (known by the run that wrote them) out of the compacted file, and the next
    ingest writes them once."""
    for n in range(2):
        deliver(landing, events_of(3, DAY + timedelta(hours=n), f"a{n}"), DAY + timedelta(hours=n))
    ingest(spark, landing, lake, max_files_per_trigger=1)
    backup = lake.parent / "backup"
    shutil.copytree(Lake(lake).checkpoints, backup)
    for n in range(2):
        deliver(landing, events_of(3, DAY + timedelta(hours=5 + n), f"b{n}"), DAY + timedelta(hours=5 + n))
    ingest(spark, landing, lake, max_files_per_trigger=1)
    expected = duckdb_rows(lake)
    assert compact.main(["--lake", str(lake), "--closed-at", "2024-04-01"]) == 0
    assert len(date_files(Lake(lake), DAY.date())) == 1 and duckdb_rows(lake) == expected, "one compacted file holds both runs' rows"

    shutil.rmtree(Lake(lake).checkpoints)
    shutil.copytree(backup, Lake(lake).checkpoints)
    assert repair.main(["--lake", str(lake), "--landing", str(landing)]) == 0
    assert {event_id[:2] for event_id, _ in duckdb_rows(lake)} == {"a0", "a1"}, "the later batches' rows are out"
    assert ingest(spark, landing, lake).totals()["files_read"] == 2 and duckdb_rows(lake) == expected, "each event once"
    assert table_rows(spark, lake) == expected, "and as Spark reads the rewritten file"
