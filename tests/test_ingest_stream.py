"""The ingest job run as a stream: temp landing, temp checkpoint, run, assert."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import duckdb
import pytest
from pyspark.errors.utils import is_debugging_enabled

from jobs.ingest.command import main, parse_args
from jobs.ingest.run import run
from jobs.lake import Lake
from jobs.lock import LakeBusyError, LakeLock
from jobs.spark import session
from jobs.spark.logs import CheckpointError, batch_time
from jobs.spark.session import JobSession, class_archive
from jobs.tables.events import events_source
from jobs.tables.quarantine_files import quarantine_source
from tests.helpers import (
    DAY,
    committed_batches,
    deliver,
    duckdb_rows,
    event,
    events_of,
    ingest,
    put_raw,
    quarantine_rows,
    table_rows,
    written_batches,
)
from tools.generate_landing import generate


def test_each_event_once_then_a_second_run_writes_nothing(spark, landing, lake):
    manifest = generate(landing, records=900, days=2, records_per_file=100, duplicate_rate=0.05, seed=3)
    assert manifest.duplicates > 0
    first = ingest(spark, landing, lake)
    expected = sorted(manifest.events.items())
    assert table_rows(spark, lake) == expected
    totals = first.totals()
    assert totals["duplicates_dropped"] == manifest.duplicates
    assert totals["rows_written"] == len(expected) and totals["files_read"] == len(manifest.files)
    batches_before = committed_batches(lake)

    second = ingest(spark, landing, lake)
    assert second.totals()["files_read"] == 0 and second.totals()["rows_written"] == 0
    assert committed_batches(lake) == batches_before
    assert table_rows(spark, lake) == expected


def no_spark():
    raise AssertionError("Spark was started")


def test_a_run_with_nothing_to_do_does_not_start_spark(spark, landing, lake):
    deliver(landing, events_of(5, DAY, "first"), DAY + timedelta(minutes=20))
    ingest(spark, landing, lake)
    config = parse_args(["--landing", str(landing), "--lake", str(lake), "--run-id", "idle", "--settle", "0 seconds"])
    idle = run(config, no_spark)
    assert idle.status == "succeeded" and idle.batches == []

    deliver(landing, events_of(5, DAY + timedelta(hours=1), "second"), DAY + timedelta(hours=1, minutes=20))
    with pytest.raises(AssertionError, match="Spark was started"):
        run(config, no_spark)
    ingest(spark, landing, lake)
    # As if the last run committed its batches and died before its final sweep: that sweep is still owed.
    state = Lake(lake).last_success
    state.write_text(json.dumps({**json.loads(state.read_text()), "batch_id": 0}))
    with pytest.raises(AssertionError, match="Spark was started"):
        run(config, no_spark)
    assert ingest(spark, landing, lake).batches == []
    assert run(config, no_spark).status == "succeeded"
    assert sorted(row[0] for row in duckdb_rows(lake)) == sorted([f"first-{i}" for i in range(5)] + [f"second-{i}" for i in range(5)])


def test_copies_within_the_horizon_are_collapsed_and_copies_further_apart_kept(spark, landing, lake):
    def arrive(event_id: str, hours: int) -> None:
        deliver(landing, [event(event_id, DAY)], DAY + timedelta(hours=hours))
        ingest(spark, landing, lake, dedup_horizon="10 hours")

    arrive("a", 0)
    arrive("b", 0)
    arrive("a", 9)  # 9 hours after the first copy: within the horizon
    arrive("filler", 13)  # arrivals move on, the watermark with them
    arrive("b", 14)  # 14 hours after the first copy: past the horizon, so kept (the gate's uniqueness check reports it)
    assert sorted(row[0] for row in duckdb_rows(lake)) == ["a", "b", "b", "filler"]


def test_only_new_files_are_read(spark, landing, lake):
    deliver(landing, events_of(30, DAY, "old"), DAY + timedelta(minutes=20))
    ingest(spark, landing, lake)
    new_files = [deliver(landing, events_of(10, DAY + timedelta(hours=h), f"new{h}"), DAY + timedelta(hours=h, minutes=20)) for h in (1, 2)]
    report = ingest(spark, landing, lake)
    assert report.totals()["files_read"] == len(new_files)
    assert report.totals()["records_read"] == 20
    assert len(table_rows(spark, lake)) == 50


def test_redelivery_in_the_same_and_in_a_later_run_appears_once(spark, landing, lake):
    original = events_of(20, DAY, "e")
    deliver(landing, original, DAY + timedelta(minutes=15))
    deliver(landing, original[:5] + events_of(5, DAY + timedelta(hours=1), "f"), DAY + timedelta(minutes=30))
    first = ingest(spark, landing, lake)
    assert first.totals()["duplicates_dropped"] == 5

    deliver(landing, original[5:12], DAY + timedelta(hours=5))  # re-delivered hours later, next run
    second = ingest(spark, landing, lake)
    assert second.totals()["duplicates_dropped"] == 7 and second.totals()["rows_written"] == 0
    ids = [event_id for event_id, _ in table_rows(spark, lake)]
    assert len(ids) == len(set(ids)) == 25


def test_event_times_cloudtrail_cannot_have_written_are_kept_and_counted(spark, landing, lake):
    odd = [event("before-cloudtrail", datetime(1969, 7, 20, tzinfo=UTC)), event("years-ahead", DAY + timedelta(days=3 * 365))]
    deliver(landing, odd + [event("fine", DAY)], DAY + timedelta(minutes=10))
    report = ingest(spark, landing, lake)
    assert report.totals()["implausible_event_times"]["count"] == 2
    assert [event_id for event_id, _ in duckdb_rows(lake)] == ["before-cloudtrail", "fine", "years-ahead"]


def test_late_events_and_old_files_are_kept_once(spark, landing, lake):
    deliver(landing, events_of(10, DAY, "now"), DAY + timedelta(minutes=10))
    deliver(landing, events_of(10, DAY + timedelta(days=3), "later"), DAY + timedelta(days=3, minutes=10))
    ingest(spark, landing, lake, dedup_horizon="6 hours")  # watermark now ~3 days past the first events

    # Events 10 days old, delivered now (a late delivery) ...
    late = events_of(8, DAY - timedelta(days=10), "late")
    deliver(landing, late, DAY + timedelta(days=3, hours=2))
    # ... and a historical file copied with its old modification time (onboarding).
    historical = events_of(6, DAY - timedelta(days=30), "hist")
    deliver(landing, historical, DAY - timedelta(days=30, minutes=-10))
    report = ingest(spark, landing, lake, dedup_horizon="6 hours")
    totals = report.totals()
    assert totals["rows_written"] == 14
    assert totals["late_events"]["count"] == 14  # both would have fallen behind an event-time watermark
    assert report.ledger["raised_arrivals"] == 1  # the copied file arrives at the newest arrival taken, not at its old mtime
    assert totals["rows_dropped_by_watermark"] == 0
    dates = dict(table_rows(spark, lake))
    assert dates["late-0"] == "2024-02-20" and dates["hist-0"] == "2024-01-31"

    deliver(landing, late[:3] + historical[:2], DAY + timedelta(days=3, hours=3))  # and their re-delivery, within the horizon
    again = ingest(spark, landing, lake, dedup_horizon="6 hours")
    assert again.totals()["rows_written"] == 0 and again.totals()["duplicates_dropped"] == 5
    assert len(table_rows(spark, lake)) == 34


def test_digest_insights_and_files_outside_the_layout_are_never_read(spark, landing, lake):
    manifest = generate(landing, records=200, days=1, records_per_file=100, duplicate_rate=0, digests=True)
    insight = (
        landing
        / "AWSLogs/111122223333/CloudTrail-Insight/us-east-1/2024/01/01/111122223333_CloudTrail-Insight_us-east-1_20240101T0100Z_x.json.gz"
    )
    insight.parent.mkdir(parents=True)
    insight.write_bytes(gzip.compress(json.dumps({"Records": [event("insight-1", DAY)]}).encode()))
    stray = landing / "AWSLogs/111122223333/CloudTrail/us-east-1/2024/01/01/notes.json"
    stray.write_text(json.dumps({"Records": [event("stray-1", DAY)]}))
    report = ingest(spark, landing, lake)
    assert report.totals()["files_read"] == len(manifest.files)
    ids = {event_id for event_id, _ in table_rows(spark, lake)}
    assert ids == set(manifest.events) and manifest.digest_files


def test_each_malformed_kind_is_quarantined_with_its_reason(spark, landing, lake):
    manifest = generate(landing, records=100, days=1, records_per_file=100, duplicate_rate=0, malformed_files=4)
    mixed = deliver(
        landing,
        [
            event("good-1", DAY),
            {"eventTime": "2024-03-01T00:00:00Z"},
            event("no-time", DAY, eventTime=None),
            event("bad", DAY, eventTime="2024-03-01 1:00 PM"),
        ],
        DAY + timedelta(hours=1),
    )
    lines = put_raw(landing, (json.dumps(event("line-1", DAY)) + "\nnot json\n").encode(), DAY + timedelta(hours=2))
    report = ingest(spark, landing, lake)
    expected = sorted(
        [(p.split("/")[-1], reason) for p, reason in manifest.malformed_files.items()]
        + [(mixed.name, "missing_event_id"), (mixed.name, "missing_event_time"), (mixed.name, "unparseable_event_time")]
        + [(lines.name, "malformed_record")]
    )
    assert quarantine_rows(spark, lake) == expected
    assert report.totals()["quarantined_by_reason"] == {
        "binary": 1, "malformed_record": 1, "missing_event_id": 1, "missing_event_time": 1,
        "not_json": 1, "truncated_gzip": 1, "unparseable_event_time": 1, "unsupported_shape": 1,
    }  # fmt: skip
    ids = {event_id for event_id, _ in table_rows(spark, lake)}
    assert {"good-1", "line-1"} <= ids and len(ids) == 102


def test_available_now_with_a_file_limit_runs_a_backlog_in_several_batches(spark, landing, lake):
    for hour in range(7):
        deliver(landing, events_of(5, DAY + timedelta(hours=hour), f"h{hour}"), DAY + timedelta(hours=hour, minutes=10))
    report = ingest(spark, landing, lake, max_files_per_trigger=2, max_bytes_per_trigger=None)
    assert len(written_batches(report)) == 4
    assert report.totals()["rows_written"] == 35 and len(table_rows(spark, lake)) == 35


def test_trigger_once_reads_everything_in_one_batch(spark, landing, lake):
    for hour in range(3):
        deliver(landing, events_of(5, DAY + timedelta(hours=hour), f"h{hour}"), DAY + timedelta(hours=hour, minutes=10))
    report = ingest(spark, landing, lake, trigger="once", max_files_per_trigger=1, max_bytes_per_trigger=None)
    assert len(written_batches(report)) == 1 and len(table_rows(spark, lake)) == 15


def test_rows_carry_the_time_the_offset_log_fixed_for_their_batch(spark, landing, lake):
    deliver(landing, events_of(3, DAY, "a"), DAY + timedelta(minutes=10))
    put_raw(landing, b"not json", DAY + timedelta(minutes=20))
    [batch] = written_batches(ingest(spark, landing, lake))
    expected = int(batch_time(Lake(lake).checkpoint, batch).timestamp() * 1000)
    stamps = duckdb.connect().execute(f"select distinct epoch_ms(_ingest_time) from {events_source(Lake(lake))}").fetchall()
    assert stamps == [(expected,)]
    held = duckdb.connect().execute(f"select distinct epoch_ms(_ingest_time) from {quarantine_source(Lake(lake))}").fetchall()
    assert held == [(expected,)], "the quarantine's rows too"


def test_spark_and_a_directory_reader_see_the_same_rows(spark, landing, lake):
    generate(landing, records=500, days=2, records_per_file=100, malformed_files=2)
    ingest(spark, landing, lake)
    ingest(spark, landing, lake)
    assert table_rows(spark, lake) == duckdb_rows(lake) != []


def test_a_second_writer_is_refused_and_the_checkpoint_is_untouched(landing, lake, caplog):
    deliver(landing, events_of(3, DAY, "x"), DAY)
    with LakeLock(Lake(lake), "a rebuild"):
        assert main(["--landing", str(landing), "--lake", str(lake), "--lock-wait", "0"]) == 75
    assert not (lake / "_checkpoints" / "ingest").exists()
    assert "a rebuild (pid" in caplog.text and "holds this lake; ingest run" in caplog.text


def test_a_lost_or_corrupted_checkpoint_stops_the_run_instead_of_reingesting(spark, landing, lake):
    deliver(landing, events_of(3, DAY, "x"), DAY)
    ingest(spark, landing, lake)
    commits = lake / "_checkpoints" / "ingest" / "commits"
    latest = max(commits.glob("[0-9]*"), key=lambda p: int(p.name))
    latest.write_text("garbage")
    with pytest.raises(CheckpointError, match="commits/1 is damaged"):
        ingest(spark, landing, lake)
    shutil.rmtree(lake / "_checkpoints" / "ingest")
    with pytest.raises(CheckpointError, match="missing or was reset"):
        ingest(spark, landing, lake)
    assert len(table_rows(spark, lake)) == 3


class _Session:
    stopped = False
    sparkContext = SimpleNamespace(_jvm=None)  # no JVM: no state stores to stop

    def stop(self):
        self.stopped = True


def test_a_job_stops_the_session_it_built_and_only_that_one(spark, monkeypatch):
    with JobSession(lambda: spark) as session:
        assert session() is session() is spark
    assert spark.range(1).count() == 1, "the caller's session stays up"

    monkeypatch.setattr(type(spark), "getActiveSession", classmethod(lambda cls: None))
    built = _Session()
    with JobSession(lambda: built) as session:
        session()
    assert built.stopped
    with JobSession(pytest.fail):  # never called: nothing to stop
        pass


def test_a_session_built_here_runs_the_parallel_collector(spark):
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    assert {bean.getName() for bean in beans} == {"PS Scavenge", "PS MarkSweep"}


def test_a_session_built_here_keeps_no_python_call_sites(spark):
    """PySpark's record of each call site costs calls into the JVM for every DataFrame and Column function (a conf
    it renamed would bring them back in silence)."""
    assert not is_debugging_enabled()


def test_a_batch_manifest_is_read_in_one_split_per_core_whatever_its_files_sizes(spark, tmp_path):
    """A task's fixed work, not its files' bytes, was what small splits cost (BENCHMARKS.md): a manifest naming 800
    landing files is cut into as many tasks as there are cores, where splits of 4 KB made 62 of them."""
    spark.conf.set("spark.sql.files.openCostInBytes", session.STREAM_CONF["spark.sql.files.openCostInBytes"])  # as the ingest sets it
    entry = {"path": f"/landing/AWSLogs/{'1' * 12}/CloudTrail/us-east-1/2024/01/01/{'x' * 200}.json.gz", "size": 40_000}
    (tmp_path / "0.jsonl").write_text("".join(json.dumps({**entry, "mtime_ms": n}) + "\n" for n in range(800)))
    assert spark.read.text(str(tmp_path / "0.jsonl")).rdd.getNumPartitions() == spark.sparkContext.defaultParallelism == 2


def test_a_session_built_here_maps_the_class_archive_make_setup_wrote(spark):
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    info = subprocess.run(["jcmd", str(pid), "VM.info"], capture_output=True, text=True, check=True).stdout
    mapped = re.search(r"CDS archive\(s\) mapped at: .*, size (\d+)", info)
    assert mapped and int(mapped[1]) > class_archive().stat().st_size, "the JDK's own classes, and Spark's on top"


@pytest.mark.unit
def test_a_class_archive_is_used_only_at_the_size_its_writer_recorded(tmp_path, monkeypatch):
    archive = tmp_path / "spark-classes.jsa"
    monkeypatch.setattr(session, "class_archive", lambda: archive)
    assert session.driver_java_options() == session.options.JVM_OPTIONS, "none"
    archive.write_bytes(b"x" * 100)
    assert "SharedArchiveFile" not in session.driver_java_options(), "no size recorded: its writer did not finish"
    session.class_archive_size(archive).write_text("100")
    assert f"-XX:SharedArchiveFile={archive}" in session.driver_java_options()
    archive.write_bytes(b"x" * 50)
    assert "SharedArchiveFile" not in session.driver_java_options(), "cut short: the JVM would crash mapping it"


def test_the_lock_can_wait_for_its_holder(lake):
    holder = LakeLock(Lake(lake), "an ingest run").__enter__()
    started = time.monotonic()
    with pytest.raises(LakeBusyError, match="an ingest run .* holds this lake; a rebuild waited 2 s"):
        LakeLock(Lake(lake), "a rebuild", wait_seconds=1.5).__enter__()
    assert time.monotonic() - started >= 1.5
    holder.__exit__()
    with LakeLock(Lake(lake), "a rebuild", wait_seconds=5):
        pass


@pytest.mark.parametrize(
    "argv", [["--trigger", "sometimes"], ["--dedup-horizon", "soon"], ["--watermark", "soon"], ["--max-files-per-trigger", "0"]]
)
def test_bad_arguments_are_refused_with_usage(argv, landing, lake, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--landing", str(landing), "--lake", str(lake), *argv])
    assert exit_info.value.code == 2
    assert "error" in capsys.readouterr().err
