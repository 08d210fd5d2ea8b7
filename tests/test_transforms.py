"""The pure transforms on small static frames."""

import json
import re
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from jobs.ingest.batch_writer import batch_figures
from jobs.ledger.store import MANIFEST_DDL
from jobs.records.decode import decode_files
from jobs.records.dedup import Dedup, mark_dedup_key
from jobs.records.rows import WRITER_ROW, kept_rows, mark_late, split_quarantine, stamp_ingest_time, table_rows
from jobs.records.transforms import normalize_records, parse_containers, read_records
from jobs.spark.sinks import write_tables
from tests.helpers import split_events

pytestmark = pytest.mark.unit

ARRIVAL = datetime(2024, 1, 2, tzinfo=UTC)
FILES = tempfile.TemporaryDirectory(prefix="decoded-")  # removed when the tests end


def decoded(spark, files: dict[str, str]):
    """The files, written to a folder of their own and decoded in the JVM; source_file is the file's name."""
    folder = Path(tempfile.mkdtemp(dir=FILES.name))
    for name, content in files.items():
        (folder / name).write_text(content)
    arrival_ms = int(ARRIVAL.timestamp() * 1000)
    manifest = spark.createDataFrame([(str(folder / name), 0, 0, arrival_ms, None, False) for name in files], MANIFEST_DDL)
    return manifest.transform(decode_files).withColumn("source_file", F.regexp_extract("source_file", "[^/]+$", 0))


def record(event_id="e1", event_time="2024-01-01T10:00:00Z", **extra):
    body = {
        "eventVersion": "1.08",
        "eventID": event_id,
        "eventTime": event_time,
        "eventSource": "s3.amazonaws.com",
        "eventName": "GetObject",
    }
    body.update(extra)
    return {k: v for k, v in body.items() if v is not None}


def test_every_supported_shape_yields_its_records(spark):
    files = {
        "records.json": json.dumps({"Records": [record("r1"), record("r2")]}),
        "array.json": json.dumps([record("a1")]),
        "lines.json": json.dumps(record("l1")) + "\n\n" + json.dumps(record("l2")) + "\n",
        "single.json": json.dumps(record("s1"), indent=2),
    }
    rows = parse_containers(decoded(spark, files)).selectExpr(
        "source_file", "record_index", "get_json_object(record, '$.eventID') as id", "_reason"
    )
    assertDataFrameEqual(
        rows,
        [
            Row(source_file="records.json", record_index=0, id="r1", _reason=None),
            Row(source_file="records.json", record_index=1, id="r2", _reason=None),
            Row(source_file="array.json", record_index=0, id="a1", _reason=None),
            Row(source_file="lines.json", record_index=0, id="l1", _reason=None),
            Row(source_file="lines.json", record_index=1, id="l2", _reason=None),
            Row(source_file="single.json", record_index=0, id="s1", _reason=None),
        ],
    )


def test_a_container_with_two_records_keys_is_read_as_spark_reads_it(spark):
    """Spark's parser keeps the last of two equal keys: the records, their texts and their rescued fields are all
    the second array's, whatever the first held."""
    first, second = json.dumps([record("a1"), record("a2", odd=1)]), json.dumps([record("b1", extra="kept")])
    items = parse_containers(decoded(spark, {"twice.json": f'{{"Records":{first},"Records":{second}}}'}))
    assert [json.loads(row.record)["eventID"] for row in items.collect()] == ["b1"]
    rows = items.transform(normalize_records, "run").collect()
    assert [(row.eventID, row._rescued, row._reason) for row in rows] == [("b1", '{"extra":"kept"}', None)]


def test_files_that_are_not_one_supported_shape_are_file_level_problems(spark):
    files = {
        "concatenated.json": json.dumps({"Records": [record("c1")]}) + json.dumps({"Records": [record("c2")]}),
        "missing_comma.json": '{"Records":[{"eventID":"a"} {"eventID":"b"}]}',
        "digest_like.json": json.dumps({"awsAccountId": "1", "logFiles": []}),
        "numbers.json": "[1, 2, 3]",
        "csv.json": "eventID,eventTime",
    }
    rows = parse_containers(decoded(spark, files)).select("source_file", "record_index", "_reason")
    assertDataFrameEqual(
        rows,
        [
            Row(source_file="concatenated.json", record_index=None, _reason="not_json"),
            Row(source_file="missing_comma.json", record_index=None, _reason="not_json"),
            Row(source_file="digest_like.json", record_index=None, _reason="unsupported_shape"),
            Row(source_file="numbers.json", record_index=None, _reason="unsupported_shape"),
            Row(source_file="csv.json", record_index=None, _reason="not_json"),
        ],
    )


def test_a_bad_line_in_json_lines_is_quarantined_alone(spark):
    files = {"lines.json": json.dumps(record("l1")) + "\n{broken\n" + json.dumps(record("l3")) + "\n" + json.dumps(record("l4")) + " {}"}
    rows = parse_containers(decoded(spark, files)).select("record_index", "record", "_reason")
    assertDataFrameEqual(
        rows,
        [
            Row(record_index=0, record=json.dumps(record("l1")), _reason=None),
            Row(record_index=1, record="{broken", _reason="malformed_record"),
            Row(record_index=2, record=json.dumps(record("l3")), _reason=None),
            Row(record_index=3, record=json.dumps(record("l4")) + " {}", _reason="malformed_record"),
        ],
    )


def test_records_that_are_not_json_objects_are_quarantined_with_their_text(spark):
    files = {"f.json": json.dumps({"Records": [record("r1"), 5, None, [1], record("r5")]})}
    rows = parse_containers(decoded(spark, files)).select("record_index", "record", "_reason")
    assertDataFrameEqual(
        rows,
        [
            Row(record_index=0, record=json.dumps(record("r1"), separators=(",", ":")), _reason=None),
            Row(record_index=1, record="5", _reason="malformed_record"),
            Row(record_index=2, record=None, _reason="malformed_record"),
            Row(record_index=3, record="[1]", _reason="malformed_record"),
            Row(record_index=4, record=json.dumps(record("r5"), separators=(",", ":")), _reason=None),
        ],
    )


def normalized(spark, *records):
    files = decoded(spark, {"f.json": json.dumps({"Records": list(records)})})
    return normalize_records(parse_containers(files), "run-1").transform(stamp_ingest_time)


def test_payloads_stay_raw_json_and_types_are_parsed(spark):
    row = normalized(
        spark,
        record(
            event_time="2024-01-01T23:30:00-02:00",
            requestParameters={"tags": [{"key": "a", "value": 1}], "maxResults": "1"},
            responseElements=None,
            readOnly="True",
            userIdentity={"type": "AssumedRole", "sessionContext": {"sessionIssuer": {"userName": "Admin"}}},
            resources=[{"ARN": "arn:aws:s3:::b", "type": "AWS::S3::Bucket"}],
            recipientAccountId="017622104382",
        ),
    ).first()
    assert json.loads(row.requestParameters) == {"tags": [{"key": "a", "value": 1}], "maxResults": "1"}
    assert row.responseElements is None
    assert row.readOnly is True
    assert row.eventTime == datetime(2024, 1, 2, 1, 30)  # UTC, from a -02:00 offset
    assert str(row.event_date) == "2024-01-02"
    assert row.userIdentity.sessionContext.sessionIssuer.userName == "Admin"
    assert row.resources[0].ARN == "arn:aws:s3:::b"
    assert row.recipientAccountId == "017622104382"
    assert row._rescued is None and row._reason is None


def test_a_delivered_container_keeps_its_nested_values_as_written(spark):
    """A nested value the table keeps as text is the file's text: from_json wrote it anew, 1e400 as the string
    "Infinity" and 35 digits as 0.1. A container the scan took is parsed over its bytes, which keeps it; a file of
    the slow path (here JSON lines) is still parsed from text, so its values are written anew."""
    nested = '{"x":1e400,"y":0.1000000000000000055511151231257827,"z":1.50,"w":"\\u00e9"}'
    line = json.dumps(record("e1"))[:-1] + f',"requestParameters":{nested}}}'
    files = decoded(spark, {"container.json": f'{{"Records":[{line}]}}', "lines.json": line + "\n" + json.dumps(record("e2"))})
    rows = normalize_records(parse_containers(files), "run").where(F.col("eventID") == "e1").collect()
    found = {row._source_file: row.requestParameters for row in rows}
    assert found == {"container.json": nested, "lines.json": '{"x":"Infinity","y":0.1,"z":1.5,"w":"é"}'}


def test_unknown_fields_and_mistyped_known_fields_are_rescued_not_dropped(spark):
    row = normalized(spark, record(aws={"forwarder": "x"}, resources=["arn:aws:s3:::b"], readOnly="maybe")).first()
    assert json.loads(row._rescued) == {"aws": '{"forwarder":"x"}', "resources": '["arn:aws:s3:::b"]', "readOnly": "maybe"}
    assert row.resources is None and row.readOnly is None and row._reason is None


def test_a_mistyped_flag_alone_is_rescued(spark):
    # The one record of these with nothing else to rescue: its flag's text alone shows the misfit.
    maybe, as_text = normalized(spark, record("m", readOnly="maybe"), record("t", managementEvent="true", readOnly=False)).collect()
    assert json.loads(maybe._rescued) == {"readOnly": "maybe"} and maybe.readOnly is None
    assert as_text._rescued is None and (as_text.managementEvent, as_text.readOnly) == (True, False)


def test_only_what_does_not_fit_is_rescued(spark):
    unknown_only, null_payload = normalized(
        spark,
        record("u", aws={"forwarder": "x"}, resources=[{"ARN": "arn:aws:s3:::b"}], readOnly=True),
        {**record("n"), "resources": None, "userIdentity": None, "readOnly": None},  # JSON nulls: nothing to rescue
    ).collect()
    assert json.loads(unknown_only._rescued) == {"aws": '{"forwarder":"x"}'}
    assert unknown_only.resources[0].ARN == "arn:aws:s3:::b" and unknown_only.readOnly is True
    assert null_payload._rescued is None and null_payload.resources is None


def test_records_without_id_or_usable_time_get_a_reason(spark):
    rows = normalized(
        spark,
        record("ok"),
        record(None),
        record("no-time", event_time=None),
        record("bad-time", event_time="2023-01-10 09:04:02 PM"),
        record("blank", event_time="..."),
    ).select("eventID", "_reason", "_detail")
    assertDataFrameEqual(
        rows,
        [
            Row(eventID="ok", _reason=None, _detail=None),
            Row(eventID=None, _reason="missing_event_id", _detail=None),
            Row(eventID="no-time", _reason="missing_event_time", _detail=None),
            Row(eventID="bad-time", _reason="unparseable_event_time", _detail="eventTime not ISO-8601: 2023-01-10 09:04:02 PM"),
            Row(eventID="blank", _reason="unparseable_event_time", _detail="eventTime not ISO-8601: ..."),
        ],
    )


def test_dedup_key_is_event_id_for_good_rows_and_unique_for_quarantined_ones(spark):
    rows = mark_dedup_key(normalized(spark, record("a"), record(None), record(None)), Dedup()).select("_dedup_key")
    assertDataFrameEqual(rows, [Row(_dedup_key="a"), Row(_dedup_key="!f.json#1@run-1"), Row(_dedup_key="!f.json#2@run-1")])


def test_split_sends_each_row_to_exactly_one_output(spark):
    rows = normalized(spark, record("a"), record(None), record("b", event_time="x"))
    events, quarantine = split_events(rows), split_quarantine(rows)
    assertDataFrameEqual(events.select("eventID"), [Row(eventID="a")])
    assertDataFrameEqual(
        quarantine.select("record_index", "reason"),
        [Row(record_index=1, reason="missing_event_id"), Row(record_index=2, reason="unparseable_event_time")],
    )
    assert json.loads(quarantine.where("record_index = 1").first().record)["eventSource"] == "s3.amazonaws.com"


def test_one_write_puts_each_row_in_one_table_and_counts_the_batch(spark, tmp_path):
    rows = normalized(
        spark, record("a"), record(None), record("b", event_time="2024-01-01T23:30:00Z"), record("f", event_time="2030-01-01T00:00:00Z")
    ).transform(mark_late, timedelta(hours=1))
    folder = str(tmp_path / "quarantine-data")
    events_folder = str(tmp_path / "events-data")
    written = write_tables(table_rows(rows, ARRIVAL, timedelta(minutes=15)), events_folder, folder, 0, events=True, quarantine=True)
    events = spark.read.parquet(events_folder).select("eventID", F.col("event_date").cast("string"), "_ingest_time")
    assertDataFrameEqual(
        events,
        [
            Row(eventID=i, event_date=d, _ingest_time=ARRIVAL.replace(tzinfo=None))
            for i, d in [("a", "2024-01-01"), ("b", "2024-01-01"), ("f", "2030-01-01")]
        ],
    )
    quarantine = spark.read.parquet(*written.files["quarantine"]).select("record_index", "reason")  # the reason in the file
    assertDataFrameEqual(quarantine, [Row(record_index=1, reason="missing_event_id")])
    assert sorted(Path(f).parent.name for f in written.files["events"]) == ["event_date=2024-01-01", "event_date=2030-01-01"]
    figures = batch_figures(written.groups)
    assert figures.written == {"2024-01-01": 2, "2030-01-01": 1} and figures.quarantined == {"missing_event_id": 1}
    assert (figures.late, figures.late_per_date, figures.implausible) == (1, {"2024-01-01": 1}, 1)  # a: 14 h after; f: years ahead
    # A table that has the batch already gets no files; the batch is still counted.
    again = write_tables(table_rows(rows, ARRIVAL, timedelta(minutes=15)), events_folder, folder, 0, events=False, quarantine=True)
    assert again.files["events"] == [] and len(again.files["quarantine"]) == 1
    assert batch_figures(again.groups).written == figures.written


def test_the_writer_row_is_spelled_once_and_the_jvm_writer_reads_it_by_the_same_positions(spark):
    java = (Path(__file__).parents[1] / "jobs" / "java" / "cloudtrail" / "TableWriter.java").read_text()
    ordinals = dict(re.findall(r"static final int ROW_(\w+) = (\d+);", java))
    in_java = [name for name, _ in sorted(ordinals.items(), key=lambda item: int(item[1]))]
    assert [int(n) for n in sorted(ordinals.values(), key=int)] == list(range(len(WRITER_ROW))), "no gap, no repeat"
    assert [name.replace("_", "").lower() for name in in_java] == [name.replace("_", "").lower() for name in WRITER_ROW]
    rows = normalized(spark, record("a"), record(None)).transform(mark_late, timedelta(hours=1))
    kept = split_quarantine(rows.transform(stamp_ingest_time, ARRIVAL))
    assert tuple(table_rows(rows, ARRIVAL, timedelta(minutes=15)).columns) == WRITER_ROW
    assert tuple(kept_rows(kept).columns) == WRITER_ROW, "the rows a batch keeps from replaced files: the same layout"


def test_a_record_the_parser_cannot_take_costs_that_record_alone(spark):
    bad = {
        "deep": '{"eventID":"deep","eventTime":"2024-01-01T10:00:00Z","requestParameters":' + '{"a":' * 1500 + "1" + "}" * 1501,
        "large": json.dumps(record("large", requestParameters={"blob": "y" * 20_000_001})),
        "nan": '{"eventID":"nan","eventTime":"2024-01-01T10:00:00Z","requestParameters":{"x":NaN}}',
        "control": '{"eventID":"control","eventTime":"2024-01-01T10:00:00Z","userAgent":"a\x01b"}',
    }
    files = {
        f"{name}.json": json.dumps({"Records": [record(f"{name}-1")]})[:-2] + f",{text},{json.dumps(record(f'{name}-2'))}]}}"
        for name, text in bad.items()
    }
    files["cut.json"] = json.dumps({"Records": [record("cut-1")]})[:-2] + ',{"eventID":"cut-2","eventTime":'  # still being written
    # One small collect: the 20 MB record's text stays in the JVM (the tests' driver has 1 GB).
    rows = normalize_records(parse_containers(decoded(spark, files)), "run").select("_source_file", "eventID", "_reason", "_detail")
    found = rows.collect()
    expected = {
        "deep.json": "record_too_deep",
        "large.json": "record_too_large",
        "nan.json": "invalid_json",
        "control.json": "invalid_json",
        "cut.json": "invalid_json",
    }
    kept = [(name, f"{name[:-5]}-{i}") for name in files for i in (1, 2) if name != "cut.json" or i == 1]
    assert sorted((r._source_file, r.eventID or "", r._reason or "") for r in found) == sorted(
        [(name, event_id, "") for name, event_id in kept] + [(name, "", reason) for name, reason in expected.items()]
    )
    details = {r._source_file: r._detail for r in found if r._reason}
    assert details["deep.json"] == "nested 1501 levels; a record may nest 998"
    assert details["large.json"] == "holds a string of 20000001 characters; a record's strings may hold 20000000"
    assert details["nan.json"] == "NaN is not a JSON value" and details["control.json"].startswith("Invalid control character")


def test_the_parse_runs_in_the_jvm_alone(spark):
    """No Python step in the read chain: Spark evaluates a Python UDF for every row of its input whatever
    when() guards it, which cost each batch its files' texts queued for Python workers (BENCHMARKS.md)."""
    manifest = spark.createDataFrame([("/nonexistent.json", 0, 0, 0, None, False)], MANIFEST_DDL)
    plan = read_records(manifest, "run")._jdf.queryExecution().executedPlan().toString()
    assert "Project" in plan and "EvalPython" not in plan  # BatchEvalPython, ArrowEvalPython


def test_the_fast_path_is_compiled_and_only_a_file_it_did_not_take_carries_its_text(spark):
    """A projection Spark cannot compile (a lambda, from_json) runs outside the generated code and copies every column
    it passes on: the fast path's records come typed from one compiled call (Records.java), after one read of the
    file, and a file's text reaches the slow path's projections only when the fast path left the file to them
    (BENCHMARKS.md, "Projections outside generated code")."""
    manifest = spark.createDataFrame([("/nonexistent.json", 0, 0, 0, None, False)], MANIFEST_DDL)
    plan = read_records(manifest, "run")._jdf.queryExecution().executedPlan().toString()
    typed = [line for line in plan.splitlines() if "static_invoke(cloudtrail.Records.items(" in line]
    assert len(typed) == 1 and re.match(r"[\s:+-]*\*\(\d+\) Project ", typed[0])
    assert plan.count("cloudtrail_landing_file(") == 1
    guarded = re.findall(r"CASE WHEN isnull\(items#\d+\) THEN cast\(\S*content#\d+ as string\) END AS text#", plan)
    assert guarded and len(guarded) == plan.count(" AS text#")
