"""The shipped investigations (jobs/investigations/): each answers over the published Iceberg tables exactly what the
same question asks of the delivered JSON through an independent reader (tools/raw_cloudtrail.py), on generated
deliveries (re-deliveries and late files among them) and real ones; the bloom filters on the lookup columns are in
the files the ingest writes, the compaction sorts each closed date as the layout orders it, and the publish's copies
keep both; the command prints what it answers, escaped, and refuses a wrong call in one line."""

from __future__ import annotations

import csv
import io
import os
import shutil
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from jobs import duck
from jobs.derived import ocsf
from jobs.derived.derivation import DerivedConfig
from jobs.iceberg.catalog import open_catalog
from jobs.investigations import catalogue, command
from jobs.lake import Lake
from jobs.landing.layout import delivery_path
from jobs.publishing import command as publish
from jobs.quality import validate_events
from jobs.records import layout
from jobs.tables.events import date_files
from jobs.upkeep.compact import CompactConfig
from jobs.upkeep.compact import run as compact_run
from tests.conftest import SAMPLES
from tests.helpers import ingest
from tools.generate_landing import generate
from tools.investigated import maker
from tools.raw_cloudtrail import log_files, with_raw_events

FIRST, LAST = date(2023, 7, 10), date(2024, 1, 4)
# The OCSF question asked of the raw records in CloudTrail's own names (OCSF's mapping: jobs/derived/ocsf_mapping.py).
RAW_TWINS = {
    "ocsf_unauthorized_attempts": """
        SELECT awsRegion AS region, eventSource AS service, eventName AS operation, errorCode AS error, count(*) AS attempts
        FROM cloudtrail.events
        WHERE event_date BETWEEN CAST($from_date AS DATE) AND CAST($to_date AS DATE)
          AND errorCode IN ('Client.UnauthorizedOperation', 'Client.InvalidPermission.NotFound',
                            'Client.OperationNotPermitted', 'AccessDenied')
        GROUP BY ALL ORDER BY attempts DESC, region, service, operation, error""",
}


def _real_deliveries(landing: Path) -> None:
    """The real samples delivered as CloudTrail delivers them ({"Records": [...]} files)."""
    delivered = datetime(2023, 7, 10, 13, tzinfo=UTC)
    for source in sorted((SAMPLES / "invictus-ir_aws_dataset" / "CloudTrail").glob("*.json")):
        target = delivery_path(landing, "218007301253", "us-east-1", delivered, source.stem[-16:])
        target = target.with_name(target.name.removesuffix(".gz"))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        os.utime(target, (delivered.timestamp(), delivered.timestamp()))


@pytest.fixture(scope="module")
def investigated(spark, tmp_path_factory) -> tuple[Path, Path]:
    """A landing of generated deliveries (3% re-delivered, two late files) and real ones, ingested, gated, derived and
    published: (landing, lake)."""
    root = tmp_path_factory.mktemp("investigated")
    landing, lake = root / "landing", root / "lake"
    generate(landing, records=6_000, days=3, seed=11, records_per_file=500, duplicate_rate=0.03, late_event_files=2,
             start=date(2024, 1, 1), make=maker(11))  # fmt: skip
    _real_deliveries(landing)
    report = ingest(spark, landing, lake)
    config = validate_events.ValidateConfig(Lake.at(lake), report.run_id, (), 0.05, Lake.at(lake).gate_report("g"))
    assert validate_events.check(spark, config)["verdict"] == "passed"
    assert ocsf.run(DerivedConfig(str(lake), None, "o1"), lambda: spark).status == "succeeded"
    assert publish.publish_tables(publish.parse_args(["--lake", str(lake), "--run-id", "p1"])).status == "succeeded"
    return landing, lake


def _raw(landing: Path) -> duckdb.DuckDBPyConnection:
    return with_raw_events(catalogue.prepared(duckdb.connect()), log_files(landing))


def _values(found: catalogue.Query, raw: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """The query's parameters: the access key, principal and address seen most often."""
    most = {
        "access_key": "userIdentity.accessKeyId FROM cloudtrail.events WHERE userIdentity.accessKeyId <> ''",
        "arn": "userIdentity.arn FROM cloudtrail.events WHERE userIdentity.arn <> ''",
        "ip": "sourceIPAddress FROM cloudtrail.events WHERE regexp_like(sourceIPAddress, '^[0-9]')",
    }
    given = {name: raw.execute(f"SELECT {most[name]} GROUP BY 1 ORDER BY count(*) DESC, 1").fetchone()[0] for name in found.parameters}
    return found.values(FIRST, LAST, given)


def _over_tables(lake: Path, found: catalogue.Query, values: dict[str, str]) -> tuple[list[str], list[tuple]]:
    """The query's answer over the lake's published tables, as the command reads them."""
    config = command.InvestigateConfig(found, values, Lake.at(lake), None, "cloudtrail", "csv", False)
    return catalogue.answer(command.with_tables(catalogue.prepared(duck.connect()), config), found, values)


def _text(rows: list[tuple]) -> list[tuple[str, ...]]:
    return [tuple(str(v) for v in row) for row in rows]


@pytest.mark.parametrize("name", [found.name for found in catalogue.queries()])
def test_each_investigation_answers_over_the_tables_what_the_delivered_json_answers(investigated, name):
    landing, lake = investigated
    found, raw = catalogue.query(name), _raw(landing)
    values = _values(found, raw)
    columns, rows = _over_tables(lake, found, values)
    if name in RAW_TWINS:
        expected = raw.execute(RAW_TWINS[name], {"from_date": values["from_date"], "to_date": values["to_date"]}).fetchall()
    else:
        expected = catalogue.answer(raw, found, values)[1]
    assert rows, f"{name} finds nothing in the landing: the comparison would prove nothing"
    assert _text(rows) == _text(expected)
    assert columns and found.source.startswith("https://")


def test_a_real_principal_s_activity_is_the_same_from_the_tables_and_the_json(investigated):
    """The principal seen most often in the real deliveries (not the generated ones), over the date they cover."""
    landing, lake = investigated
    raw, found = _raw(landing), catalogue.query("principal_activity")
    arn = raw.execute(
        "SELECT userIdentity.arn FROM cloudtrail.events WHERE event_date = DATE '2023-07-10' GROUP BY 1 ORDER BY count(*) DESC, 1"
    ).fetchone()[0]
    values = found.values(date(2023, 7, 10), date(2023, 7, 10), {"arn": arn})
    rows = _over_tables(lake, found, values)[1]
    assert len(rows) > 100 and _text(rows) == _text(catalogue.answer(raw, found, values)[1])


def _sorted_within(path: Path) -> bool:
    """The file's rows, in file order, are in the layout's order (nulls first, as Spark sorts)."""
    columns = ", ".join(layout.SORT_COLUMNS)
    rows = duckdb.sql(f"SELECT {columns} FROM read_parquet('{path}')").fetchall()
    keys = [tuple((value is not None, value) for value in row) for row in rows]
    return keys == sorted(keys)


def _blooms(path: Path) -> set[str]:
    query = f"SELECT DISTINCT replace(path_in_schema, ', ', '.') FROM parquet_metadata('{path}') WHERE bloom_filter_offset IS NOT NULL"
    return {row[0] for row in duckdb.sql(query).fetchall()}


def test_the_ingest_writes_the_bloom_filters_and_the_compaction_and_publish_lay_out_and_keep_them(spark, investigated, tmp_path):
    landing, lake = investigated
    written = date_files(Lake.at(lake), "2024-01-02")
    assert len(written) > 1 and all(_blooms(p) == set(layout.BLOOM_COLUMNS) for p in written)
    table = open_catalog(Lake.at(lake), None).load_table("cloudtrail.events")
    assert [table.schema().find_column_name(f.source_id) for f in table.sort_order().fields] == list(layout.SORT_COLUMNS)

    compacted = tmp_path / "lake"
    shutil.copytree(lake, compacted)
    assert compact_run(_compaction(compacted)) == 0
    after = date_files(Lake.at(compacted), "2024-01-02")
    assert len(after) == 1 and _sorted_within(after[0]) and _blooms(after[0]) == set(layout.BLOOM_COLUMNS)
    assert publish.publish_tables(publish.parse_args(["--lake", str(compacted), "--run-id", "p2"])).status == "succeeded"
    table = open_catalog(Lake.at(compacted), None).load_table("cloudtrail.events")
    copies = [Path(t.file.file_path.removeprefix("file://")) for t in table.scan(row_filter="event_date = '2024-01-02'").plan_files()]
    assert len(copies) == 1 and _sorted_within(copies[0]) and _blooms(copies[0]) == set(layout.BLOOM_COLUMNS)


def _compaction(lake: Path) -> CompactConfig:
    from jobs.upkeep.compact import parse_args

    return parse_args(["--lake", str(lake), "--from-date", "2024-01-02", "--to-date", "2024-01-02", "--run-id", "c1"])


def test_the_command_prints_an_answer_and_the_sql_and_refuses_in_one_line(investigated, tmp_path):
    from tests.helpers import command as run_module
    from tests.helpers import succeeded

    landing, lake = investigated
    day = ["--from-date", "2024-01-01", "--to-date", "2024-01-04", "--lake", str(lake)]
    result = run_module("jobs.investigate", "calls_by_region_api", *day, "--format", "csv")
    succeeded(result)
    printed = list(csv.reader(io.StringIO(result.stdout)))
    raw = catalogue.answer(_raw(landing), catalogue.query("calls_by_region_api"), catalogue.query("calls_by_region_api").values(
        date(2024, 1, 1), date(2024, 1, 4), {}))[1]  # fmt: skip
    assert printed[0] == ["awsRegion", "eventSource", "eventName", "calls"] and printed[1:] == [list(row) for row in _text(raw)]

    sql = run_module("jobs.investigate", "ip_activity", *day, "--param", "ip=1.2.3.4' OR '1'='1", "--sql")
    assert "sourceIPAddress = '1.2.3.4'' OR ''1''=''1'" in succeeded(sql) + sql.stdout
    for argv, says in (
        (["no_such_question", *day], "no investigation named 'no_such_question'"),
        (["ip_activity", *day], "ip_activity takes --param ip=... (missing: ip; unknown: none)"),
        (["iam_changes", *day, "--param", "ip=1"], "unknown: ip"),
        (["iam_changes", "--lake", str(lake)], "--from-date and --to-date are required"),
    ):
        result = run_module("jobs.investigate", *argv)
        assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr, result.stderr
    (tmp_path / "unpublished").mkdir()
    result = run_module("jobs.investigate", "iam_changes", *day[:4], "--lake", tmp_path / "unpublished")
    assert result.returncode == 1 and "iam_changes: not published yet" in result.stderr and "Traceback" not in result.stderr


def test_values_are_shown_escaped():
    hostile = ["\x1b[31mred\x1b[0m", '=HYPERLINK("http://x")', "-2+3", "plain, with a comma"]
    shown = list(csv.reader(io.StringIO(command.as_csv(["value"], [(value,) for value in hostile]))))
    assert [row[0] for row in shown[1:]] == ["\\x1b[31mred\\x1b[0m", '\'=HYPERLINK("http://x")', "'-2+3", "plain, with a comma"]
    assert "\x1b" not in command.as_table(["value"], [(hostile[0],)])
    assert command.shown(None) == "" and command.shown(timedelta(0)) == "0:00:00"
