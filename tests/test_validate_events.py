"""The data-quality gate: a clean table passes, each critical violation fails it by name,
a warning-only violation passes with a warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date, datetime, timedelta
from pathlib import Path

import pytest

from jobs.lake import Lake, partition
from jobs.quality import validate_events
from jobs.records.schema import EVENTS_SCHEMA
from tests.conftest import ROOT
from tests.helpers import DAY, command, deliver, events_of, ingest, put_events

RUN_ID = "scheduled__2024-03-01"


def good_row(index: int, **changes):
    moment = datetime(2024, 3, 1, 10) + timedelta(minutes=index)
    row = {name: None for name in EVENTS_SCHEMA.fieldNames()}
    row.update(
        eventVersion="1.08", eventID=f"id-{index}", eventTime=moment, eventSource="s3.amazonaws.com", eventName="GetObject",
        awsRegion="us-east-1", recipientAccountId="111122223333", userIdentity={"type": "IAMUser"},
        tlsDetails={"tlsVersion": "TLSv1.3"}, resources=[{"ARN": "arn:aws:s3:::b", "type": "AWS::S3::Bucket"}],
        _ingest_run_id=RUN_ID, _ingest_time=moment + timedelta(minutes=20), event_date=moment.date(),
    )  # fmt: skip
    row.update(changes)
    return row


def write_table(spark, lake: Path, rows: list[dict], reported: int | None = None, quarantined: int = 0) -> None:
    frame = spark.createDataFrame([tuple(r[name] for name in EVENTS_SCHEMA.fieldNames()) for r in rows], EVENTS_SCHEMA)
    put_events(frame, lake)
    path = Lake(lake).ingest_report(RUN_ID)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = len(rows) if reported is None else reported
    path.write_text(json.dumps({"rows_written": written, "records_read": written + quarantined, "quarantined": quarantined,
                                "rows_written_per_event_date": {"2024-03-01": written}}))  # fmt: skip


def gate(lake: Path, *extra: str) -> tuple[int, dict]:
    code = validate_events.main(["--lake", str(lake), "--run-id", RUN_ID, "--from-date", "2024-03-01", "--to-date", "2024-03-01", *extra])
    results = json.loads(Lake(lake).gate_report(RUN_ID).read_text())
    return code, results


def failed(results: dict) -> set[tuple[str, str]]:
    return {(f["expectation"], f["kwargs"].get("column") or f["kwargs"].get("column_A")) for f in results["failed_critical"]}


def test_a_clean_ingested_table_passes_with_its_results_in_the_report_and_nothing_else(spark, landing, lake, monkeypatch):
    deliver(landing, events_of(40, DAY, "ok"), DAY + timedelta(minutes=30))
    report = ingest(spark, landing, lake)
    monkeypatch.setenv("GX_ANALYTICS_ENABLED", "true")
    code = validate_events.main(["--lake", str(lake), "--run-id", report.run_id, "--dates", "2024-03-01"])
    assert os.environ["GX_ANALYTICS_ENABLED"] == "False", "the gate turns Great Expectations' usage statistics off, whatever was set"
    results = json.loads(Lake(lake).gate_report(report.run_id).read_text())
    assert code == 0 and results["verdict"] == "passed" and results["rows_validated"] == 40
    reports = {path.relative_to(Lake(lake).reports).as_posix() for path in Lake(lake).reports.rglob("*") if path.is_file()}
    assert reports == {f"ingest/{report.run_id}.json", "tally.json", f"dq/{report.run_id}.json", "dq/_validated.json"}, (
        "no Data Docs (they load scripts from other hosts and show values as HTML), no GX project: the lake page renders the report"
    )
    checks = [check for suite in results["suites"].values() for check in suite["checks"]]
    assert checks and all(c["unexpected_percent"] is None for c in checks), "a passing suite computes verdicts only, no samples"
    # Running it again is idempotent: no "already exists" failures.
    assert validate_events.main(["--lake", str(lake), "--run-id", report.run_id, "--dates", "2024-03-01"]) == 0


CRITICAL_CASES = {
    "eventID null": ([good_row(0), good_row(1, eventID=None)], {}, ("expect_column_values_to_not_be_null", "eventID")),
    "eventID duplicated": ([good_row(0), good_row(1, eventID="id-0")], {}, ("expect_column_values_to_be_unique", "eventID")),
    "eventTime null": ([good_row(0), good_row(1, eventTime=None)], {}, ("expect_column_values_to_not_be_null", "eventTime")),
    "eventTime in another partition": (
        [good_row(0), good_row(1, eventTime=datetime(2024, 2, 28, 23, 59))],
        {},
        ("expect_column_pair_values_to_be_equal", "event_time_date"),
    ),
    "eventSource null": ([good_row(0), good_row(1, eventSource=None)], {}, ("expect_column_values_to_not_be_null", "eventSource")),
    "eventName null": ([good_row(0), good_row(1, eventName=None)], {}, ("expect_column_values_to_not_be_null", "eventName")),
    "report disagrees with table": (
        [good_row(0), good_row(1)],
        {"reported": 3},
        ("expect_column_pair_values_to_be_equal", "rows_in_table_for_run"),
    ),
    "too much quarantined": ([good_row(0), good_row(1)], {"quarantined": 1}, ("expect_column_max_to_be_between", "quarantine_share")),
}


@pytest.mark.parametrize("case", list(CRITICAL_CASES))
def test_each_critical_violation_fails_the_gate_naming_it(case, spark, lake, caplog):
    rows, report, expected = CRITICAL_CASES[case]
    write_table(spark, lake, rows, **report)
    code, results = gate(lake)
    assert code == 1 and results["verdict"] == "failed"
    assert expected in failed(results)
    assert any(expected[0] in message and "CRITICAL" in message for message in caplog.messages)


def test_a_warning_only_violation_passes_with_a_warning(spark, lake):
    write_table(spark, lake, [good_row(i, awsRegion="moon-base-1" if i % 2 else "us-east-1") for i in range(10)])
    code, results = gate(lake)
    assert code == 0 and results["verdict"] == "passed"
    assert [(w["expectation"], w["kwargs"]["column"]) for w in results["warnings"]] == [
        ("expect_column_values_to_match_regex", "awsRegion")
    ]
    assert "moon-base-1" in results["warnings"][0]["sample_unexpected"] and results["warnings"][0]["unexpected_count"] == 5


def test_event_times_cloudtrail_cannot_have_written_are_kept_and_reported(spark, lake):
    ingested = datetime(2024, 3, 1, 10)
    odd = [datetime(1969, 12, 31, 23), datetime(2031, 1, 1)]
    rows = [good_row(0)] + [good_row(i + 1, eventTime=t, event_date=t.date(), _ingest_time=ingested) for i, t in enumerate(odd)]
    write_table(spark, lake, rows)
    code, results = gate(lake, "--dates", "1969-12-31,2031-01-01")
    assert code == 0 and results["rows_validated"] == 3
    assert [w["kwargs"]["column"] for w in results["warnings"]] == ["event_time_plausible"]
    assert results["warnings"][0]["unexpected_percent"] == pytest.approx(200 / 3)


def test_nested_columns_are_checked(spark, lake):
    rows = [good_row(i, userIdentity={"type": "Alien"}, tlsDetails={"tlsVersion": "SSLv2"}, resources=[{"type": "x"}]) for i in range(3)]
    write_table(spark, lake, rows)
    _, results = gate(lake)
    assert {w["kwargs"]["column"] for w in results["warnings"]} == {"user_identity_type", "tls_version", "resources_without_arn"}


def test_dates_cover_the_interval_and_what_the_run_wrote(tmp_path):
    config = validate_events.parse_args(["--lake", str(tmp_path), "--from-date", "2024-03-01", "--to-date", "2024-03-02"])
    assert config.dates == (date(2024, 3, 1), date(2024, 3, 2))
    assert validate_events.responsible_dates(config, {"rows_written_per_event_date": {"2023-07-10": 5}}) == [
        "2023-07-10", "2024-03-01", "2024-03-02",
    ]  # fmt: skip


def test_a_gate_given_no_dates_and_no_run_refuses_in_one_line(tmp_path):
    """A gate of nothing would pass ("gate passed on event dates ;"): with no dates and no run it refuses."""
    result = command("jobs.validate_events", "--lake", tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "nothing to check: give the event dates" in result.stderr.splitlines()[-1], result.stderr


def test_a_table_with_nothing_committed_yet_passes_with_no_rows(lake):
    """A first run whose files were all still settling wrote nothing: the gate has nothing to fail."""
    report = Lake(lake).ingest_report(RUN_ID)
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps({"status": "succeeded", "rows_written": 0, "records_read": 0, "quarantined": 0}))
    code, results = gate(lake)
    assert code == 0 and results["verdict"] == "passed" and results["rows_validated"] == 0


def test_the_gate_is_skipped_only_while_the_partitions_it_passed_are_unchanged(spark, lake):
    from jobs.quality import gate as gates

    write_table(spark, lake, [good_row(i) for i in range(5)])
    assert gate(lake)[0] == 0
    quiet = "scheduled__2024-03-01T01"
    Lake(lake).ingest_report(quiet).write_text(json.dumps({"status": "succeeded", "rows_written": 0, "quarantined": 0}))
    reason = gates.skip_reason(Lake(lake), quiet, ["2024-03-01"])
    assert reason and RUN_ID in reason, "a run that wrote nothing, over a partition a gate passed"
    assert gates.skip_reason(Lake(lake), quiet, ["2024-03-01", "2024-03-02"]) is None, "a date no gate has passed"
    assert gates.skip_reason(Lake(lake), RUN_ID, ["2024-03-01"]) is None, "a run that wrote rows"

    planted = partition(Lake(lake).events, "2024-03-01")  # a file no commit names is no change of the table
    planted.mkdir(parents=True)
    (planted / "planted.parquet").write_bytes(b"PAR1")
    assert gates.skip_reason(Lake(lake), quiet, ["2024-03-01"]), "the table holds the files the gate passed"
    write_table(spark, lake, [good_row(i) for i in range(6)])
    assert gates.skip_reason(Lake(lake), quiet, ["2024-03-01"]) is None, "a date a commit changed is checked again"


def test_the_suites_are_found_when_the_gate_is_imported_from_jobs_zip(jobs_zip, tmp_path):
    """A rebuild submitted with --py-files imports the gate from the zip: the suites come from CLOUDTRAIL_HOME."""
    code = "from jobs.quality import validate_events as v; print(v.__file__); print(v.SUITES_DIR)"
    env = {"PATH": os.environ["PATH"], "CLOUDTRAIL_HOME": str(ROOT), "PYTHONPATH": str(jobs_zip)}
    printed = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    module, suites = printed.split()
    assert module.startswith(str(jobs_zip)) and Path(suites) == ROOT / "expectations"
    assert (Path(suites) / "cloudtrail_events.critical.json").is_file()
