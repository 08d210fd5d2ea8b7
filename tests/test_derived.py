"""The derived tables: windowed counts and rules on small static frames, then the job kept exact through
ingest -> late file -> re-delivery -> rebuild of a date, and guarded by their suites."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from datetime import date, datetime, timedelta
from pathlib import Path

import duckdb
import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from jobs.derived import activity
from jobs.derived.activity import findings, hourly_activity
from jobs.derived.derivation import DerivedConfig
from jobs.derived.rules import Rule, load_rules
from jobs.lake import ACTIVITY, Lake
from jobs.reporting.report import DerivedReport
from jobs.tables.events import date_files, events_source
from jobs.upkeep import rebuild
from tests.helpers import (
    DAY,
    command,
    deliver,
    derived_sql,
    duckdb_rows,
    event,
    events_of,
    iceberg_table,
    ingest,
    run_cleanly,
    split_events,
    succeeded,
)
from tests.test_transforms import normalized, record
from tools.generate_landing import add_samples
from tools.summary import summarize

RULES = load_rules()
ALICE = {"type": "IAMUser", "arn": "arn:aws:iam::111122223333:user/alice"}


def events(spark, *records):
    return split_events(normalized(spark, *records))


@pytest.mark.unit
def test_hourly_activity_counts_each_hour_and_key(spark):
    rows = events(
        spark,
        record("a", "2024-01-01T10:05:00Z", userIdentity=ALICE, sourceIPAddress="10.0.0.1"),
        record("b", "2024-01-01T10:59:59Z", userIdentity=ALICE, sourceIPAddress="10.0.0.2"),
        record("c", "2024-01-01T10:30:00Z", userIdentity=ALICE, sourceIPAddress="10.0.0.1", errorCode="AccessDenied"),
        record("d", "2024-01-01T11:00:00Z", userIdentity=ALICE, sourceIPAddress="10.0.0.1"),
        record("e", "2024-01-01T11:10:00Z", userIdentity={"type": "AWSService", "invokedBy": "s3.amazonaws.com"}),
    )
    got = hourly_activity(rows).select("window_start", "principal", "errorCode", "events", "errors", "distinct_source_ips",
                                       "first_seen", "last_seen", "event_date")  # fmt: skip

    def at(hour: int, minute: int = 0, second: int = 0) -> datetime:
        return datetime(2024, 1, 1, hour, minute, second)  # the session's time zone is UTC: naive values compare as UTC

    day = date(2024, 1, 1)
    assertDataFrameEqual(
        got,
        [
            Row(window_start=at(10), principal=ALICE["arn"], errorCode=None, events=2, errors=0, distinct_source_ips=2,
                first_seen=at(10, 5), last_seen=at(10, 59, 59), event_date=day),
            Row(window_start=at(10), principal=ALICE["arn"], errorCode="AccessDenied", events=1, errors=1, distinct_source_ips=1,
                first_seen=at(10, 30), last_seen=at(10, 30), event_date=day),
            Row(window_start=at(11), principal=ALICE["arn"], errorCode=None, events=1, errors=0, distinct_source_ips=1,
                first_seen=at(11), last_seen=at(11), event_date=day),
            Row(window_start=at(11), principal="s3.amazonaws.com", errorCode=None, events=1, errors=0, distinct_source_ips=0,
                first_seen=at(11, 10), last_seen=at(11, 10), event_date=day),
        ],
    )  # fmt: skip


@pytest.mark.parametrize("rule", RULES, ids=[rule.rule_id for rule in RULES])
@pytest.mark.unit
def test_each_rule_matches_its_positive_case_and_not_its_negative_one(spark, rule):
    rows = events(spark, record("match", **rule.match), record("no_match", **rule.no_match))
    assert rows.count() == 2, "both test records are events"
    assert [(row["rule_id"], row["eventID"]) for row in findings(rows, RULES).where(f"rule_id = '{rule.rule_id}'").collect()] == [
        (rule.rule_id, "match")
    ]


@pytest.mark.unit
def test_rules_are_fifteen_cis_monitoring_controls_with_unique_ids():
    assert [rule.rule_id for rule in RULES] == [f"cis-4.{n}" for n in range(1, 16)]


@pytest.mark.unit
def test_an_event_the_table_holds_twice_gives_one_finding_per_rule(spark):
    stop = record("dup", "2024-01-01T10:00:00Z", eventSource="cloudtrail.amazonaws.com", eventName="StopLogging", errorCode="AccessDenied")
    rows = events(spark, stop, stop)
    assert rows.count() == 2
    assert sorted((row["rule_id"], row["eventID"]) for row in findings(rows, RULES).collect()) == [("cis-4.1", "dup"), ("cis-4.5", "dup")]


def hourly_from_events(lake: Path) -> list[tuple]:
    return duckdb.sql(
        f"select date_trunc('hour', eventTime) as h, count(*) from {events_source(Lake.at(lake))} group by 1 order by 1"
    ).fetchall()


def hourly_from_activity(lake: Path) -> list[tuple]:
    return derived_sql(lake, "activity_hourly", "select window_start, sum(events)::bigint from rows group by 1 order by 1")


def findings_of(lake: Path) -> list[tuple]:
    return derived_sql(lake, "findings", "select rule_id, eventID from rows order by 1, 2")


def update(spark, lake: Path, run_id: str, dates: tuple[date, ...] | None = None) -> DerivedReport:
    return activity.run(DerivedConfig(lake=str(lake), dates=dates, run_id=run_id), lambda: spark)


def test_the_tables_stay_exact_through_a_late_file_a_redelivery_and_a_rebuild(spark, landing, lake):
    stop = dict(eventSource="cloudtrail.amazonaws.com", eventName="StopLogging")
    first = [*events_of(30, DAY + timedelta(hours=1), "a"), event("stop-1", DAY + timedelta(hours=2), **stop)]
    deliver(landing, first, DAY + timedelta(hours=3))
    deliver(landing, events_of(10, DAY + timedelta(days=1, hours=5), "b"), DAY + timedelta(days=1, hours=6))
    ingest(spark, landing, lake)
    report = update(spark, lake, "a1")
    assert report.dates == ["2024-03-01", "2024-03-02"]
    assert hourly_from_activity(lake) == hourly_from_events(lake) != []
    assert findings_of(lake) == [("cis-4.5", "stop-1")]

    # Nothing changed: no date is rebuilt and Spark is not started.
    assert update(spark, lake, "a2").dates == []
    assert activity.run(DerivedConfig(str(lake), None, "a2b"), lambda: pytest.fail("Spark started")).dates == []

    # A late file for the first day, and a re-delivery of its file: only that day is rebuilt; nothing doubles.
    deliver(landing, [event("late-1", DAY + timedelta(hours=4), **stop)], DAY + timedelta(days=2, hours=1))
    deliver(landing, first, DAY + timedelta(days=2, hours=2))
    ingest(spark, landing, lake)
    assert update(spark, lake, "a3").dates == ["2024-03-01"]
    assert hourly_from_activity(lake) == hourly_from_events(lake)
    assert findings_of(lake) == [("cis-4.5", "late-1"), ("cis-4.5", "stop-1")]

    # A rebuild of the first day swaps its events partition: the derived rows of that day follow.
    rebuild.run(rebuild.RebuildConfig(landing=str(landing), lake=str(lake), dates=(DAY.date(),), run_id="backfill__t"), lambda: spark)
    assert update(spark, lake, "a4").dates == ["2024-03-01"]
    assert hourly_from_activity(lake) == hourly_from_events(lake)
    assert findings_of(lake) == [("cis-4.5", "late-1"), ("cis-4.5", "stop-1")]
    assert not list((Lake.at(lake).root / "_staging").glob("*")), "nothing left staged"


def test_dates_built_with_an_older_definition_are_built_again_when_a_rule_is_added_then_edited(spark, landing, lake, monkeypatch):
    """A rule added to or edited in jobs/derived/rules/ changes the tables' definition: every date built with the old one is
    due again (they kept the old findings until someone rebuilt them by hand)."""
    deliver(landing, events_of(3, DAY + timedelta(hours=1), "a"), DAY + timedelta(hours=2))
    deliver(landing, events_of(3, DAY + timedelta(days=1, hours=1), "b"), DAY + timedelta(days=1, hours=2))
    ingest(spark, landing, lake)
    assert update(spark, lake, "d1").dates == ["2024-03-01", "2024-03-02"] and findings_of(lake) == []
    assert update(spark, lake, "d2").dates == []

    added = Rule("test-9.1", "AssumeRole by an a- event", "low", "test", "eventName = 'AssumeRole' AND eventID LIKE 'a-%'", {}, {})
    monkeypatch.setattr(activity, "load_rules", lambda: [*RULES, added])
    assert update(spark, lake, "d3").dates == ["2024-03-01", "2024-03-02"], "both dates were built without the rule"
    assert findings_of(lake) == [("test-9.1", f"a-{i}") for i in range(3)]
    assert update(spark, lake, "d4").dates == []

    edited = dataclasses.replace(added, condition="eventName = 'AssumeRole' AND eventID LIKE 'b-%'")
    monkeypatch.setattr(activity, "load_rules", lambda: [*RULES, edited])
    assert update(spark, lake, "d5").dates == ["2024-03-01", "2024-03-02"]
    assert findings_of(lake) == [("test-9.1", f"b-{i}") for i in range(3)]


def test_compaction_a_rebuild_and_the_derived_jobs_run_as_commands_on_a_copied_lake(spark, landing, lake, tmp_path, caplog):
    """As an operator runs them, on the lake copied to another disk: compact (`python -m jobs.compact` in its own
    process: the command's smoke), rebuild a date, then the activity and OCSF jobs (as their doors run them, in the
    tests' session; their own processes are the DAG tests'). The events table then holds the landing files' events,
    each once, and both derived tables agree with it row for row."""
    first, second = events_of(6, DAY, "a"), events_of(4, DAY + timedelta(days=1), "b")
    deliver(landing, first[:3], DAY + timedelta(hours=1))
    deliver(landing, first[3:], DAY + timedelta(hours=1, minutes=5))
    deliver(landing, second, DAY + timedelta(days=1, hours=1))
    deliver(landing, first[:2], DAY + timedelta(hours=2))  # a re-delivery
    ingest(spark, landing, lake, max_files_per_trigger=1)
    oracle = sorted({(e["eventID"], e["eventTime"][:10]) for e in first + second})
    copy = tmp_path / "restored" / "lake"
    shutil.copytree(lake, copy, symlinks=True)
    day = DAY.date().isoformat()
    succeeded(command("jobs.compact", "--lake", copy, "--closed-at", "2024-04-01"))
    assert len(date_files(Lake.at(copy), day)) == 1, "the date's files compacted into one"
    run_cleanly(spark, caplog, "rebuild", ["--landing", str(landing), "--lake", str(copy), "--from-date", day, "--to-date", day])
    run_cleanly(spark, caplog, "activity", ["--lake", str(copy)])
    run_cleanly(spark, caplog, "ocsf", ["--lake", str(copy)])
    assert duckdb_rows(copy) == oracle, "each event of the landing files once"
    assert hourly_from_activity(copy) == hourly_from_events(copy) and sum(n for _, n in hourly_from_activity(copy)) == len(oracle)
    rows = derived_sql(copy, "ocsf_api_activity", "select metadata.uid, cast(eventDay as varchar) from rows order by 1")
    assert rows == [(event_id, date.replace("-", "")) for event_id, date in oracle], "one OCSF row per event"


def test_the_real_samples_fire_their_rules(spark, samples, landing, lake):
    add_samples(landing, samples, DAY)
    ingest(spark, landing, lake)
    report = update(spark, lake, "samples")
    by_rule = report.counts["findings by rule"]
    fired = {rule_id for rule_id, count in by_rule.items() if count}
    # Stratus detonations of the controls' own cases: StopLogging, a console login without MFA,
    # LeaveOrganization (denied), a user given a policy, port 22 opened to the world.
    assert {"cis-4.1", "cis-4.2", "cis-4.4", "cis-4.5", "cis-4.10", "cis-4.15"} <= fired, by_rule
    assert sum(by_rule.values()) == len(findings_of(lake))
    printed = summarize(Lake.at(lake))
    assert "cis-4.5" in printed and "busiest principals" in printed, printed


def test_partitions_that_fail_their_suites_are_not_swapped_in(spark, landing, lake, monkeypatch):
    deliver(landing, events_of(10, DAY + timedelta(hours=1), "g"), DAY + timedelta(hours=2))
    ingest(spark, landing, lake)
    right = activity.DERIVATION

    def double_counted(events):
        tables = right.build(events)
        return {**tables, "activity_hourly": tables["activity_hourly"].withColumn("events", F.col("events") * 2)}

    monkeypatch.setattr(activity, "DERIVATION", dataclasses.replace(right, build=double_counted))
    report = update(spark, lake, "bad")
    assert (report.status, report.gate) == ("gate_failed", "failed")
    assert iceberg_table(lake, "activity_hourly").num_rows == iceberg_table(lake, "findings").num_rows == 0, "nothing published"
    verdict = json.loads(Lake.at(lake).derived_gate_report(ACTIVITY.job, "bad").read_text())
    assert {failure["suite"] for failure in verdict["failed_critical"]} == {"activity_reconciliation.critical"}
    monkeypatch.setattr(activity, "DERIVATION", right)
    assert update(spark, lake, "good").dates == ["2024-03-01"], "the date is still to build"
    assert hourly_from_activity(lake) == hourly_from_events(lake)


def test_with_a_glue_catalog_the_job_writes_its_tables_into_the_warehouse_in_s3(spark, aws, landing, lake, monkeypatch):
    """`python -m jobs.activity` in its own process, its catalog Glue (moto's Glue and S3, reached through
    AWS_ENDPOINT_URL alone): Spark commits the tables through the catalog into the S3 warehouse, nothing of them lands in
    the lake's folder, and pyiceberg reads them back through the same configuration."""
    import boto3

    from jobs.iceberg.catalog import open_catalog
    from tests.aws import glue_catalog

    bucket = f"warehouse-{lake.parent.name[-12:].lower().replace('_', '-')}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    for key, value in glue_catalog("athena", f"s3://{bucket}/iceberg").items():
        monkeypatch.setenv(key, value)
    stop = dict(eventSource="cloudtrail.amazonaws.com", eventName="StopLogging")
    deliver(
        landing, [*events_of(8, DAY + timedelta(hours=1), "a"), event("stop-1", DAY + timedelta(hours=2), **stop)], DAY + timedelta(hours=3)
    )
    ingest(spark, landing, lake)
    # A namespace of its own: moto's Glue serves the whole session, and a table belongs to one lake.
    succeeded(command("jobs.activity", "--lake", lake, "--catalog", "athena", "--namespace", "derived_glue", "--run-id", "glue-1"))

    glue = open_catalog(Lake.at(lake), "athena", "derived_glue")
    hourly, found = (glue.load_table(f"derived_glue.{name}") for name in ("activity_hourly", "findings"))
    assert hourly.location().startswith(f"s3://{bucket}/iceberg/")
    assert sum(hourly.scan(selected_fields=("events",)).to_arrow().column("events").to_pylist()) == 9
    assert found.scan(selected_fields=("rule_id", "eventID")).to_arrow().to_pylist() == [{"rule_id": "cis-4.5", "eventID": "stop-1"}]
    keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix="iceberg/")["Contents"]]
    assert any(key.endswith(".parquet") and "/activity_hourly/data/" in key for key in keys), keys
    warehouse = lake / "iceberg" / "warehouse"  # the lake's own catalog holds its tables of record only
    assert not list(lake.rglob("activity_hourly")), "nothing of them here"
    assert sorted(p.name for p in warehouse.glob("*/*")) == ["events", "quarantine"]


def test_a_second_lake_is_refused_the_tables_another_lake_writes_in_a_shared_sql_catalog(
    spark, landing, lake, tmp_path, monkeypatch, caplog
):
    """A SQLite catalog of pyiceberg's settings serves the Spark jobs too (its JDBC twin): the first lake's activity
    job writes its tables there; a second lake pointed at the same catalog is refused in one line naming the owner,
    exit 2, and the first lake's rows stay."""

    from jobs.iceberg.catalog import open_catalog
    from tests.helpers import run_command

    (tmp_path / "warehouse").mkdir()
    shared = {"TYPE": "sql", "URI": f"sqlite:///{tmp_path}/shared.db", "WAREHOUSE": str(tmp_path / "warehouse")}
    for key, value in shared.items():
        monkeypatch.setenv(f"PYICEBERG_CATALOG__SHARED__{key}", value)
    deliver(landing, events_of(6, DAY + timedelta(hours=1), "a"), DAY + timedelta(hours=2))
    ingest(spark, landing, lake)
    run_cleanly(spark, caplog, "activity", ["--lake", str(lake), "--catalog", "shared", "--run-id", "first"])

    other_landing, other_lake = tmp_path / "other-landing", tmp_path / "other-lake"
    deliver(other_landing, events_of(7, DAY + timedelta(hours=5), "x"), DAY + timedelta(hours=6))
    ingest(spark, other_landing, other_lake)
    caplog.clear()
    assert run_command(spark, "activity", ["--lake", str(other_lake), "--catalog", "shared", "--run-id", "second"]) == 2
    errors = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert len(errors) == 1 and "belongs to the lake at" in errors[0] and Lake.at(lake).location in errors[0], errors
    hourly = open_catalog(Lake.at(lake), "shared").load_table("cloudtrail.activity_hourly").scan(selected_fields=("events",))
    assert sum(hourly.to_arrow().column("events").to_pylist()) == 6, "the first lake's rows"


def test_a_warehouse_bucket_that_does_not_exist_fails_the_run_in_one_line_naming_the_table_and_the_cause(
    aws, spark, landing, lake, monkeypatch
):
    """The Glue catalog answers but its warehouse bucket does not exist: `python -m jobs.activity` fails (exit 1) in
    one line naming the table, the call and S3's cause, no Python traceback (Spark logs its failed task as it does);
    the report says the same."""

    from tests.aws import glue_catalog

    for key, value in glue_catalog("nobucket", "s3://no-such-warehouse-bucket/iceberg").items():
        monkeypatch.setenv(key, value)
    deliver(landing, events_of(3, DAY + timedelta(hours=1), "a"), DAY + timedelta(hours=2))
    ingest(spark, landing, lake)
    result = command("jobs.activity", "--lake", lake, "--catalog", "nobucket", "--namespace", "derived_nobucket", "--run-id", "nb")
    # The product's own lines (Python's log format); Spark's executors log the failed task in theirs.
    errors = [line for line in result.stderr.splitlines() if re.match(r"\d{4}-\d\d-\d\d .* ERROR ", line)]
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.rstrip().splitlines()[-1] == errors[-1], "the run ends in its one line"
    assert len(errors) == 1 and "nobucket.derived_nobucket.activity_hourly: creating the table failed" in errors[0], errors
    assert "NoSuchBucket" in errors[0] or "does not exist" in errors[0], errors
    report = json.loads(Lake.at(lake).derived_report(ACTIVITY.job, "nb").read_text())
    assert report["status"] == "failed" and report["error"] in errors[0]
