"""Data-quality gate: Great Expectations suites on the partitions a run is responsible for.

Run it with either of:

    spark-submit --py-files build/jobs.zip jobs/validate_events.py --lake DIR [--run-id ID] \
        [--from-date YYYY-MM-DD --to-date YYYY-MM-DD] [--dates D1,D2] [--quarantine-threshold 0.01]
    python -m jobs.validate_events --lake DIR ...

It validates the event_date partitions in the date range, plus those the run wrote (from
its report), reading the table as Spark reads it. Suites are the JSON files in
expectations/: *.critical.json fail the gate (exit 1), *.warning.json are reported only.
Results: <lake>/reports/dq/<run id>.json (the Airflow UI's lake page shows them, /cloudtrail/gates/).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import cli, options
from jobs.lake import EVENT_DATE, Lake
from jobs.quality import gate
from jobs.records.rows import implausible_event_time
from jobs.records.schema import EVENTS_SCHEMA
from jobs.reporting.report import failure_line, gate_report, read_report, write_json
from jobs.spark.session import spark_session
from jobs.storage import LakePath
from jobs.tables.events import events_of_dates

log = logging.getLogger("validate_events")
# GX logs its configuration at INFO, hundreds of lines a gate: its warnings and errors are enough.
logging.getLogger("great_expectations").setLevel(logging.WARNING)


def suites_dir() -> Path:
    """$CLOUDTRAIL_EXPECTATIONS, else expectations/ of the checkout this module is in, or of
    $CLOUDTRAIL_HOME when it was imported from jobs.zip (a rebuild, submitted with --py-files)."""
    if "CLOUDTRAIL_EXPECTATIONS" in os.environ:
        return Path(os.environ["CLOUDTRAIL_EXPECTATIONS"])
    checkout = Path(__file__).resolve().parents[2]
    return (checkout if checkout.is_dir() else Path(os.environ.get("CLOUDTRAIL_HOME", "."))) / "expectations"


SUITES_DIR = suites_dir()


@dataclass(frozen=True)
class ValidateConfig:
    lake: Lake
    run_id: str | None
    dates: tuple[date, ...]
    quarantine_threshold: float
    results_path: LakePath


def parse_args(argv: list[str] | None = None) -> ValidateConfig:
    parser = cli.parser("validate_events", __doc__)
    cli.add_lake(parser)
    cli.add_catalog(parser, namespace=False)
    parser.add_argument("--run-id", help="check this run's report against the table")
    cli.add_dates(parser, "event date to validate (one alone: that date)")
    parser.add_argument("--dates", default="", help="comma-separated event dates")
    parser.add_argument("--quarantine-threshold", type=float, default=options.QUARANTINE_THRESHOLD)
    args = parser.parse_args(argv)
    try:
        dates = {cli.iso_date(day.strip()) for day in args.dates.split(",") if day.strip()}
    except argparse.ArgumentTypeError as exc:
        parser.error(f"--dates: {exc}")
    first, last = args.from_date or args.to_date, args.to_date or args.from_date
    dates.update(cli.date_range(parser, first, last, "--from-date and --to-date") or ())
    if not dates and not args.run_id:  # a gate of nothing would pass
        parser.error("nothing to check: give the event dates (--from-date/--to-date, --dates) or a run's --run-id")
    lake = cli.lake(parser, args, existing=True)
    results = lake.gate_report(args.run_id or cli.run_id(None, kind="adhoc"))
    return ValidateConfig(lake, args.run_id, tuple(sorted(dates)), args.quarantine_threshold, results)


def load_run_report(config: ValidateConfig) -> dict[str, Any] | None:
    if not config.run_id:
        return None
    path = config.lake.ingest_report(config.run_id)
    report = read_report(path)
    if report is None:
        raise FileNotFoundError(f"no ingest report for run {config.run_id} at {path}")
    return report


def responsible_dates(config: ValidateConfig, report: dict[str, Any] | None) -> list[str]:
    written = (report or {}).get("rows_written_per_event_date", {})
    return sorted({d.isoformat() for d in config.dates} | set(written))


# The events suites; what they check of a table's rows (with_check_columns).
EVENT_SUITES = ("cloudtrail_events.critical", "cloudtrail_events.warning")
# What the suites check that is no column of the table: flattened into plain columns (GX checks top-level columns).
CHECK_COLUMNS = {
    "event_time_date": lambda: F.to_date("eventTime"),
    "user_identity_type": lambda: F.col("userIdentity.type"),
    "tls_version": lambda: F.col("tlsDetails.tlsVersion"),
    "resources_without_arn": lambda: F.size(F.filter("resources", lambda r: r["ARN"].isNull())),
    "event_time_plausible": lambda: ~implausible_event_time(F.col("eventTime"), F.col("_ingest_time")),
}


def suite_columns(names: tuple[str, ...] = EVENT_SUITES) -> list[str]:
    """Every column the suites name, in the order they first name it."""
    found: dict[str, None] = {}
    for name in names:
        for expectation in load_suite(name)["expectations"]:
            for key in ("column", "column_A", "column_B"):
                if key in expectation["kwargs"]:
                    found[expectation["kwargs"][key]] = None
            found.update(dict.fromkeys(expectation["kwargs"].get("column_list", ())))
    return list(found)


def with_check_columns(events: DataFrame) -> DataFrame:
    """The columns the events suites check, from their own files: the table's columns they name as they are, the others
    computed (CHECK_COLUMNS); with the event date and the run id, which the gate counts by."""
    table = EVENTS_SCHEMA.fieldNames()
    named = suite_columns()
    unknown = [name for name in named if name not in table and name not in CHECK_COLUMNS]
    if unknown:
        raise ValueError(f"the events suites check {unknown}: no column of jobs/records/schema.py, nor one of CHECK_COLUMNS")
    plain = [name for name in dict.fromkeys([*named, EVENT_DATE, "_ingest_run_id"]) if name in table]
    return events.select(*plain, *(CHECK_COLUMNS[name]().alias(name) for name in named if name in CHECK_COLUMNS))


def table_counts(events: DataFrame, run_id: str | None) -> tuple[int, int]:
    """Rows validated, and those of them the run wrote: one Spark job."""
    row = events.agg(F.count(F.lit(1)), F.count_if(F.col("_ingest_run_id") == F.lit(str(run_id)))).first()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def run_figures(rows_in_table_for_run: int, report: dict[str, Any]) -> pd.DataFrame:
    """One row comparing the table with the run report, checked by GX's pandas engine: a one-row
    frame in Spark costs a Spark job per metric (9 for this suite), here none."""
    records_read = report.get("records_read", 0)
    share = report.get("quarantined", 0) / records_read if records_read else 0.0
    figures = {"rows_in_table_for_run": rows_in_table_for_run, "rows_reported": report.get("rows_written", 0), "quarantine_share": share}
    return pd.DataFrame([figures])


def read_events(spark: SparkSession, lake: Lake, dates: list[str]) -> DataFrame:
    rows = events_of_dates(spark, lake, dates)  # None: nothing committed yet (e.g. every file still settling)
    return spark.createDataFrame([], EVENTS_SCHEMA) if rows is None else rows


def load_suite(name: str) -> dict[str, Any]:
    suite: dict[str, Any] = json.loads((SUITES_DIR / f"{name}.json").read_text())
    return suite


def describe(check: Any) -> dict[str, Any]:
    """One expectation result as plain JSON, with a few offending values."""
    config = check.expectation_config
    if config is None:
        raise ValueError(f"an expectation result without its expectation: {check}")
    return {
        "expectation": config.type,
        "kwargs": {k: v for k, v in config.kwargs.items() if k != "batch_id"},
        "success": check.success,
        "unexpected_count": check.result.get("unexpected_count"),
        "unexpected_percent": check.result.get("unexpected_percent"),
        "sample_unexpected": check.result.get("partial_unexpected_list", [])[:5],
        "observed_value": check.result.get("observed_value"),
    }


def import_gx() -> Any:
    """Great Expectations, with its usage statistics off (read when it is first imported, so set here, before).

    Heavy (4-9 s): imported when a gate runs, never at DAG parse."""
    os.environ["GX_ANALYTICS_ENABLED"] = "False"
    import great_expectations as gx

    return gx


def validate(
    frames: dict[str, DataFrame | pd.DataFrame], config: ValidateConfig, parameters: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run each suite on its frame in an in-memory GX context; `parameters`: the suites' $PARAMETERs besides
    quarantine_threshold. The results are the report's: the lake page renders them (GX's Data Docs load
    scripts from other hosts and show the data's values as HTML, so they are not built)."""
    gx = import_gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)  # a bar per suite is noise in a task log
    spark_source = context.data_sources.add_or_update_spark(name="cloudtrail")
    pandas_source = context.data_sources.add_or_update_pandas(name="figures")
    outcome: dict[str, Any] = {"suites": {}, "failed_critical": [], "warnings": []}
    for suite_name, frame in frames.items():
        source = pandas_source if isinstance(frame, pd.DataFrame) else spark_source
        batch = source.add_dataframe_asset(name=suite_name).add_batch_definition_whole_dataframe("partitions")
        suite = context.suites.add_or_update(gx.ExpectationSuite(**load_suite(suite_name)))
        definition = context.validation_definitions.add_or_update(gx.ValidationDefinition(name=suite_name, data=batch, suite=suite))

        # Verdicts first: each sample of offending values costs a Spark job, and a passing suite has none.
        # A suite that fails runs again for the counts and samples of what failed (the report, the lake page).
        for result_format in ({"result_format": "BOOLEAN_ONLY"}, {"result_format": "SUMMARY", "partial_unexpected_count": 5}):
            checkpoint = context.checkpoints.add_or_update(
                gx.Checkpoint(name=suite_name, validation_definitions=[definition], actions=[], result_format=result_format)
            )
            result = checkpoint.run(
                batch_parameters={"dataframe": frame},
                expectation_parameters={"quarantine_threshold": config.quarantine_threshold, **(parameters or {})},
                run_id=gx.RunIdentifier(run_name=config.run_id or "adhoc"),
            )
            if result.success:
                break
        critical = suite_name.endswith(".critical")
        checks = [describe(check) for validation in result.run_results.values() for check in validation.results]
        failures = outcome["failed_critical"] if critical else outcome["warnings"]
        failures.extend({"suite": suite_name, **check} for check in checks if not check["success"])
        outcome["suites"][suite_name] = {"success": result.success, "critical": critical, "checks": checks}
    return outcome


def judge(
    frames: dict[str, DataFrame | pd.DataFrame],
    config: ValidateConfig,
    dates: list[str],
    parameters: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Validate `frames` (suite name -> frame), write the gate's report (with `extra`) to config.results_path,
    and log each failure; the report. Every gate of the lake (the events', a rebuild's, the derived tables') ends here."""
    body = gate_report(config.run_id, dates, validate(frames, config, parameters), **extra)
    write_json(config.results_path, body)
    for failure in body["failed_critical"]:
        log.error("CRITICAL %s", failure_line(failure))
    for warning in body["warnings"]:
        log.warning("warning %s", failure_line(warning))
    log.info("gate %s on event dates %s; results %s", body["verdict"], ", ".join(dates), config.results_path)
    return body


def check(spark: SparkSession, config: ValidateConfig) -> dict[str, Any]:
    """Validate the partitions the run is responsible for; write, log and return the report."""
    report = load_run_report(config)
    dates = responsible_dates(config, report)
    prints = gate.fingerprints(config.lake, dates)  # before reading: a change while we read shows next time
    # Every suite reads the same few columns many times (a Spark job per metric): computed once, kept in memory.
    events = read_events(spark, config.lake, dates).transform(with_check_columns).cache()
    rows, rows_for_run = table_counts(events, config.run_id)
    frames: dict[str, DataFrame | pd.DataFrame] = dict.fromkeys(EVENT_SUITES, events)
    if report is not None:
        frames["cloudtrail_run.critical"] = run_figures(rows_for_run, report)
    body = judge(frames, config, dates, rows_validated=rows)
    if body["verdict"] == "passed":
        gate.record_validated(config.lake, prints, config.run_id)
    return body


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return cli.run(lambda: cli.FAILED if check(spark_session("cloudtrail_validate_events"), config)["verdict"] == "failed" else cli.OK)
