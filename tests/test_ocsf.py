"""The OCSF view of the lake (jobs/ocsf.py, jobs/derived/ocsf_mapping.py): every event of the events table as one OCSF 1.1.0
API Activity row that validates against the class's JSON Schema, laid out as Security Lake lays out its sources, kept
up to date date by date, gated before it is swapped in."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections import Counter
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from jobs.derived import ocsf
from jobs.derived.derivation import DerivedConfig
from jobs.derived.ocsf_mapping import activity_id, api_activity, source
from jobs.iceberg.catalog import open_catalog
from jobs.lake import OCSF, Lake
from jobs.records.schema import EVENTS_SCHEMA
from jobs.status.lake_status import derived_rows
from jobs.tables.events import event_dates, events_of_dates
from jobs.tables.events_table import EventsTable
from tests.helpers import DAY, current_data_files, deliver, derived_sql, event, events_of, ingest, spark_table
from tests.test_samples import deliver_samples
from tools.summary import summarize

ISO = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?$")


@cache
def validator() -> jsonschema.Draft202012Validator:
    """OCSF 1.1.0's API Activity with the cloud and datetime profiles, as JSON Schema, from the schema's own export."""
    from ocsf_json_schema import OcsfJsonSchemaEmbedded, get_ocsf_schema

    schema = OcsfJsonSchemaEmbedded(get_ocsf_schema(version="1.1.0")).get_class_schema(
        class_name="api_activity", profiles=["cloud", "datetime"]
    )
    return jsonschema.Draft202012Validator(schema)


def build(spark, lake: Path, run_id: str, dates=None):
    return ocsf.run(DerivedConfig(lake=str(lake), dates=dates, run_id=run_id), lambda: spark)


def uids(lake: Path) -> list[tuple[str, str, str, str]]:
    return derived_sql(lake, "ocsf_api_activity", "select metadata.uid, region, accountId, eventDay from rows order by 1")


def leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """A JSON document's scalar values by path."""
    if isinstance(value, dict):
        return [leaf for key, inner in value.items() for leaf in leaves(inner, f"{path}.{key}" if path else key)]
    if isinstance(value, list):
        return [leaf for inner in value for leaf in leaves(inner, path)]
    return [(path, value)]


def normal(value: Any) -> str:
    """A value as text, times in one form: the mapping writes times as OCSF does."""
    if isinstance(value, bool):
        return str(value).lower()
    text = str(value)
    if ISO.match(text):
        return datetime.fromisoformat(text.replace("Z", "+00:00")).isoformat()
    return text


@pytest.mark.unit
def test_activity_id_follows_the_operations_verb(spark):
    names = ["CreateUser", "BatchGetSecretValue", "DescribeInstances", "PutBucketPolicy", "TerminateInstances",
             "ConsoleLogin", "Decrypt", None]  # fmt: skip
    frame = spark.createDataFrame([(name,) for name in names], "eventName string")
    expected = [("CreateUser", 1), ("BatchGetSecretValue", 2), ("DescribeInstances", 2), ("PutBucketPolicy", 3),
                ("TerminateInstances", 4), ("ConsoleLogin", 99), ("Decrypt", 99), (None, 0)]  # fmt: skip
    assertDataFrameEqual(
        frame.select("eventName", activity_id(F.col("eventName")).alias("activity_id")),
        spark.createDataFrame(expected, "eventName string, activity_id int"),
    )


@pytest.mark.unit
def test_the_source_is_an_ip_only_when_it_is_one(spark):
    given = [("81.2.69.142", None), ("2001:db8::1", None), ("AWS Internal", None), ("81.2.69.142, 192.168.10.10", None),
             ("253.252.51.07", None), (None, "vpce-1"), (None, None)]  # fmt: skip
    frame = spark.createDataFrame(given, "sourceIPAddress string, vpcEndpointId string")
    got = frame.select(source(F.struct("sourceIPAddress", "vpcEndpointId")).alias("s")).select("s.*")
    expected = [("81.2.69.142", None, None, None, None), ("2001:db8::1", None, None, None, None),
                (None, "AWS Internal", "AWS Internal", None, None),
                (None, "81.2.69.142, 192.168.10.10", "81.2.69.142, 192.168.10.10", None, None),
                (None, "253.252.51.07", "253.252.51.07", None, None), (None, None, None, "vpce-1", None),
                (None, None, None, None, "cloudtrail.amazonaws.com")]  # fmt: skip
    assertDataFrameEqual(got, spark.createDataFrame(expected, "ip string, domain string, name string, uid string, svc_name string"))


def events_frame(spark, *records: dict[str, Any]):
    """Rows of the events table: the record's fields, the rest null."""
    rows = [{field.name: record.get(field.name) for field in EVENTS_SCHEMA.fields} for record in records]
    return spark.createDataFrame(rows, EVENTS_SCHEMA)


@pytest.mark.unit
def test_a_failed_call_maps_with_its_caller_its_error_and_what_ocsf_has_no_place_for(spark):
    moment = datetime(2024, 3, 1, 12, 30)
    identity = {"type": "IAMUser", "arn": "", "principalId": "AIDA1", "accountId": "111122223333", "userName": "alice",
                "accessKeyId": "AKIA1",
                "sessionContext": {"attributes": {"mfaAuthenticated": "false", "creationDate": "yesterday"}}}  # fmt: skip
    record = {"eventVersion": "1.09", "eventID": "e-1", "eventTime": moment, "eventName": "DeleteTrail",
              "eventSource": "cloudtrail.amazonaws.com",
              "awsRegion": "eu-west-1", "recipientAccountId": "111122223333", "sourceIPAddress": "198.51.100.7", "requestID": "r-1",
              "requestParameters": '{"name":"t"}', "errorCode": "AccessDenied", "errorMessage": "no", "readOnly": False,
              "userIdentity": identity, "_rescued": '{"p_any":"x"}', "_source_file": "f.json", "event_date": moment.date()}  # fmt: skip
    row = api_activity(events_frame(spark, record)).collect()[0].asDict(recursive=True)
    assert (row["class_uid"], row["activity_id"], row["type_uid"], row["type_name"]) == (6003, 4, 600304, "API Activity: Delete")
    assert row["time"] == int(moment.timestamp() * 1000) and row["metadata"]["uid"] == "e-1"
    assert (row["status_id"], row["api"]["response"]["error"], row["api"]["response"]["message"]) == (2, "AccessDenied", "no")
    assert row["api"]["request"] == {"uid": "r-1", "data": '{"name":"t"}'}
    user = row["actor"]["user"]
    assert (user["uid"], user["name"], user["uid_alt"], user["credential_uid"]) == (None, "alice", "AIDA1", "AKIA1"), "an empty ARN is none"
    assert row["actor"]["session"] == {"created_time_dt": None, "is_mfa": False, "issuer": None}
    assert (row["region"], row["accountId"], row["eventDay"]) == ("eu-west-1", "111122223333", "20240301")
    kept = row["unmapped"]
    assert kept["readOnly"] == "false" and kept["p_any"] == "x" and kept["_source_file"] == "f.json"
    assert kept["userIdentity.sessionContext.attributes.creationDate"] == "yesterday", "a value OCSF cannot hold stays unmapped"


@pytest.mark.unit
def test_a_record_with_only_an_id_and_a_time_is_still_a_valid_row(spark):
    bare = {"eventID": "x", "eventTime": datetime(2024, 3, 1), "event_date": datetime(2024, 3, 1).date()}
    row = api_activity(events_frame(spark, bare)).drop("region", "accountId", "eventDay").select(F.to_json(F.struct("*"))).first()
    document = json.loads(row[0])
    assert not [error.message for error in validator().iter_errors(document)]
    assert (document["api"]["operation"], document["activity_id"], document["actor"]) == (
        "Unknown",
        0,
        {"invoked_by": "cloudtrail.amazonaws.com"},
    )


def test_every_real_sample_event_is_one_valid_api_activity_row_and_nothing_is_dropped(spark, samples, landing, lake):
    deliver_samples(landing, samples)
    ingest(spark, landing, lake)
    report = build(spark, lake, "samples")
    assert report.status == "succeeded" and report.gate == "passed", report

    events = events_of_dates(spark, Lake.at(lake), event_dates(Lake.at(lake)))
    rows = spark_table(spark, lake, "ocsf_api_activity")
    ids = sorted(r.eventID for r in events.select("eventID").distinct().collect())
    assert len(ids) > 3000 and sum(sum(days.values()) for days in report.rows.values()) == len(ids)
    assert sorted(uid for uid, *_ in uids(lake)) == ids, "one row per event, read by pyiceberg and DuckDB"

    # The partition columns are the folders' (as in Security Lake), not attributes of the OCSF event.
    events_as_ocsf = rows.drop("region", "accountId", "eventDay").select(F.to_json(F.struct("*")))
    documents = {d["metadata"]["uid"]: d for d in (json.loads(r[0]) for r in events_as_ocsf.collect())}
    invalid = {uid: [e.message[:120] for e in validator().iter_errors(doc)] for uid, doc in documents.items()}
    assert not {uid: errors for uid, errors in invalid.items() if errors}, "every row validates against OCSF 1.1.0 class 6003"

    # Every value of every event is in its row: at its OCSF place, or in unmapped.
    for record in (json.loads(r[0]) for r in events.drop("event_date").select(F.to_json(F.struct("*"))).collect()):
        doc = documents[record["eventID"]]
        placed = {normal(value) for path, value in leaves(doc) if not path.startswith("unmapped")}
        kept = doc.get("unmapped", {})
        for path, value in leaves({k: v for k, v in record.items() if k != "_rescued"}):
            found = normal(value) in placed or any(str(value) in text or normal(value) == normal(text) for text in kept.values())
            assert found, f"{record['eventID']}: {path} = {value!r} is in neither its OCSF place nor unmapped"
        for key, value in json.loads(record.get("_rescued") or "{}").items():
            assert kept[key] == value, f"{record['eventID']}: rescued field {key} is in unmapped"

    files = current_data_files(lake, "ocsf_api_activity")
    folders = {(p["region"], p["accountId"], p["eventDay"]) for p in files.values()}
    assert folders and all(re.fullmatch(r"\d{8}", day) for _, _, day in folders), folders
    properties = open_catalog(Lake.at(lake), None).load_table("cloudtrail.ocsf_api_activity").properties
    assert (properties["ocsf.version"], properties["ocsf.class_uid"], properties["ocsf.profiles"]) == ("1.1.0", "6003", "cloud,datetime")
    assert not (lake / "ocsf").exists(), "nothing of the table in the lake's folder"
    shown = derived_rows(Lake.at(lake), OCSF, days=1000)
    assert sum(day.rows["ocsf/api_activity"] for day in shown) == len(ids), "the lake page's rows per event date"
    on_disk = Counter(day for _, _, day in folders)
    folders_shown = {day.event_date.replace("-", ""): day.folders["ocsf/api_activity"] for day in shown}
    assert folders_shown == on_disk, "and its partitions per date, from the job's state"
    assert len(files) == len(folders), "one file per partition"


def test_the_table_follows_the_events_table_date_by_date(spark, landing, lake):
    deliver(landing, events_of(5, DAY + timedelta(hours=1), "a"), DAY + timedelta(hours=2))
    deliver(landing, events_of(3, DAY + timedelta(days=1, hours=1), "b"), DAY + timedelta(days=1, hours=2))
    ingest(spark, landing, lake)
    assert build(spark, lake, "o1").dates == ["2024-03-01", "2024-03-02"]
    second_day = {path for path, values in current_data_files(lake, "ocsf_api_activity").items() if values["eventDay"] == "20240302"}
    assert build(spark, lake, "o2", None).dates == []
    assert ocsf.run(DerivedConfig(str(lake), None, "o2b"), lambda: pytest.fail("Spark started")).dates == []

    # A late file for the first day, from another account: only that day is rebuilt, the new account gets its folder.
    deliver(landing, [event("late-1", DAY + timedelta(hours=3), recipientAccountId="444455556666")], DAY + timedelta(days=2))
    ingest(spark, landing, lake)
    assert build(spark, lake, "o3").dates == ["2024-03-01"]
    assert second_day and second_day <= set(current_data_files(lake, "ocsf_api_activity")), "the other day's files are untouched"
    late = [row for row in uids(lake) if row[0] == "late-1"]
    assert late == [("late-1", "us-east-1", "444455556666", "20240301")]
    assert len(uids(lake)) == 9

    # A date leaves the events table (retention): its partitions leave the OCSF table.
    EventsTable(spark, Lake.at(lake)).drop_dates(["2024-03-02"], {})
    assert build(spark, lake, "o4").dates == ["2024-03-02"]
    days = {values["eventDay"] for values in current_data_files(lake, "ocsf_api_activity").values()}
    assert days == {"20240301"} and len(uids(lake)) == 6
    assert not list((lake / "_staging").glob("*")), "nothing left staged"
    assert "OCSF API Activity, ocsf/api_activity: 6 rows in 1 event dates" in summarize(Lake.at(lake)), "make demo's summary"


def test_rows_that_fail_the_ocsf_suites_are_not_swapped_in(spark, landing, lake, monkeypatch):
    deliver(landing, events_of(4, DAY + timedelta(hours=1), "g"), DAY + timedelta(hours=2))
    ingest(spark, landing, lake)
    right = ocsf.DERIVATION

    def twice(events):
        rows = right.build(events)[ocsf.OCSF_API_ACTIVITY]
        return {ocsf.OCSF_API_ACTIVITY: rows.unionByName(rows)}

    monkeypatch.setattr(ocsf, "DERIVATION", dataclasses.replace(right, build=twice))
    assert ocsf.main(["--lake", str(lake), "--run-id", "bad"]) == 1, "a failed gate fails the job"
    assert uids(lake) == [], "nothing published"
    verdict = json.loads(Lake.at(lake).derived_gate_report(OCSF.job, "bad").read_text())
    assert {f["suite"] for f in verdict["failed_critical"]} == {"ocsf_api_activity.critical", "ocsf_reconciliation.critical"}
    monkeypatch.setattr(ocsf, "DERIVATION", right)
    assert ocsf.main(["--lake", str(lake), "--run-id", "good", "--from-date", "2024-03-01", "--to-date", "2024-03-01"]) == 0
    assert len(uids(lake)) == 4


@pytest.mark.unit
def test_the_date_range_goes_together_in_every_commands_spelling(tmp_path, caplog):
    for bad in (["--from-date", "2024-03-02"], ["--from-date", "2024-03-02", "--to-date", "2024-03-01"], ["--to-date", "x"]):
        with pytest.raises(SystemExit) as exit_:
            ocsf.parse_args(["--lake", str(tmp_path), *bad])
        assert exit_.value.code == 2
    given = ocsf.parse_args(["--lake", str(tmp_path), "--from-date", "2024-03-01", "--to-date", "2024-03-02"]).dates
    with caplog.at_level(logging.WARNING):
        old = ocsf.parse_args(["--lake", str(tmp_path), "--from", "2024-03-01", "--to", "2024-03-02"]).dates
    assert given == old is not None and "--from is deprecated: use --from-date" in caplog.text, "the old spelling still works"
