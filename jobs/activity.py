"""Bring the downstream tables (activity_hourly, findings) up to date with the events table, partition by partition.

Run it with either of:

    spark-submit --py-files build/jobs.zip jobs/activity.py --lake DIR [--from-date YYYY-MM-DD --to-date YYYY-MM-DD]
    python -m jobs.activity --lake DIR [--from-date D --to-date D]

Without dates it rebuilds every event date whose events partition changed since it was last
built from (a new batch, a late file, a rebuild, a rollback: any change to the partition's data
files), and drops the dates whose events partition is gone; with dates, those dates. Each date's
rows of both tables are computed from that date's whole events partition and swapped in
atomically (jobs/partitions.py), so the tables are exact whatever order the events arrived in.
Runs under the lake lock, waiting for it (--lock-wait).
Writes <lake>/activity_hourly/event_date=.../, <lake>/findings/event_date=.../ and
<lake>/reports/activity/<run id>.json. The new partitions pass the downstream suites
(expectations/activity_*.json, findings.critical.json: each hour's counts against the events
table, rule ids, one finding per rule and event) before anything is swapped; their verdict is
in <lake>/reports/dq/activity/<run id>.json.
Exit codes: 0 done, 1 failed (a failed gate swaps nothing), 2 bad arguments, 75 the lake stayed busy.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import cli, options, partitions, validate_events
from jobs.downstream import findings, hourly_activity
from jobs.lake import (
    ACTIVITY_HOURLY,
    DOWNSTREAM_TABLES,
    EVENT_DATE,
    FINDINGS,
    Lake,
    LakeLock,
    partition,
    partition_folders,
    partition_value,
)
from jobs.partitions import fingerprint
from jobs.report import ActivityReport, now_iso
from jobs.rules import load_rules
from jobs.schema import EVENTS_SCHEMA
from jobs.session import JobSession, spark_session
from jobs.staging import Staging
from jobs.sweep import sweep_lake

log = logging.getLogger("activity")


@dataclass(frozen=True)
class ActivityConfig:
    lake: str
    # Event dates to rebuild; None: those whose events partition changed since they were last built.
    dates: tuple[date, ...] | None
    run_id: str
    lock_wait: float = options.LOCK_WAIT_SECONDS

    @property
    def layout(self) -> Lake:
        return Lake.at(self.lake)


def parse_args(argv: list[str] | None = None) -> ActivityConfig:
    parser = cli.parser("activity", __doc__)
    cli.add_lake(parser)
    cli.add_dates(parser, "event date to rebuild")
    cli.add_run_id(parser)
    cli.add_lock_wait(parser)
    args = parser.parse_args(argv)
    cli.required(parser, args, "lake")
    return ActivityConfig(
        lake=os.path.abspath(args.lake),
        dates=cli.date_range(parser, args.from_date, args.to_date, "--from-date and --to-date"),
        run_id=cli.run_id(args.run_id),
        lock_wait=args.lock_wait,
    )


def built_from(lake: Lake) -> dict[str, str]:
    """Per event date: the fingerprint of the events partition the downstream tables hold that date's rows of."""
    return json.loads(lake.downstream_state.read_text()) if lake.downstream_state.exists() else {}


def record_built(lake: Lake, prints: dict[str, str]) -> None:
    """Written whole (rename) after the swaps: a run that dies before it leaves its dates to the next run."""
    state = built_from(lake) | prints
    partial = lake.downstream_state.with_name(f".{lake.downstream_state.name}.partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_text(json.dumps(dict(sorted(state.items())), indent=1) + "\n")
    partial.replace(lake.downstream_state)


def changed_dates(lake: Lake) -> list[str]:
    """The event dates whose events partition is not the one their downstream rows were built from."""
    built = built_from(lake)
    dates = {partition_value(folder) for folder in partition_folders(lake.events)} | set(built)
    return sorted(day for day in dates if fingerprint(partition(lake.events, day)) != built.get(day))


def extract(spark: SparkSession, lake: Lake, dates: list[str]) -> DataFrame:
    """The events table's rows of these event dates."""
    folders = [str(partition(lake.events, day)) for day in dates if partition(lake.events, day).is_dir()]
    if not folders:
        return spark.createDataFrame([], EVENTS_SCHEMA)
    return spark.read.schema(EVENTS_SCHEMA).option("basePath", str(lake.events)).parquet(*folders)


def transform(events: DataFrame) -> dict[str, DataFrame]:
    return {ACTIVITY_HOURLY: hourly_activity(events), FINDINGS: findings(events, load_rules())}


def check(lake: Lake, run_id: str, dates: list[str], events: DataFrame, staged: dict[str, DataFrame]) -> dict[str, Any]:
    """The downstream suites (expectations/activity_*.json, findings.*.json) on the staged partitions; the verdict is the report's."""
    in_table = {str(row[EVENT_DATE]): row["count"] for row in events.groupBy(EVENT_DATE).count().collect()}
    activity = staged[ACTIVITY_HOURLY]
    in_activity = {str(row[0]): row[1] for row in activity.groupBy(EVENT_DATE).agg(F.sum("events")).collect()}
    figures = pd.DataFrame(
        [{EVENT_DATE: day, "events_in_table": in_table.get(day, 0), "events_in_activity": in_activity.get(day, 0)} for day in dates]
    )
    frames: dict[str, DataFrame | pd.DataFrame] = {
        "activity_hourly.critical": activity.withColumn("window_date", F.to_date("window_start")),
        "findings.critical": staged[FINDINGS],
        "activity_reconciliation.critical": figures,
    }
    days = tuple(date.fromisoformat(day) for day in dates)
    config = validate_events.ValidateConfig(lake, run_id, days, options.QUARANTINE_THRESHOLD, lake.activity_gate_report(run_id))
    rules = {"rule_ids": [rule.rule_id for rule in load_rules()]}
    return validate_events.judge(frames, config, dates, rules, figures=figures.to_dict("records"))


def count_rows(staged: dict[str, DataFrame], dates: list[str], report: ActivityReport) -> None:
    for name, rows in staged.items():
        counts = {str(row[EVENT_DATE]): row["count"] for row in rows.groupBy(EVENT_DATE).count().collect()}
        report.rows[name] = {day: counts.get(day, 0) for day in dates}
    report.findings_by_rule = {row["rule_id"]: row["count"] for row in staged[FINDINGS].groupBy("rule_id").count().collect()}


def run(config: ActivityConfig, session: Callable[[], SparkSession]) -> ActivityReport:
    lake = config.layout
    started = time.monotonic()
    report = ActivityReport(run_id=config.run_id, started_at=now_iso())
    try:
        partitions.recover(lake)
        for name in DOWNSTREAM_TABLES:  # old versions of derived partitions: a run later, no reader still reads them
            shutil.rmtree(lake.replaced_tables(name), ignore_errors=True)
        if config.dates is not None or changed_dates(lake):  # else Spark is not started
            spark = session()
            sweep_lake(spark, lake)  # a crashed ingest's files are not part of the events table
            dates = [str(day) for day in config.dates] if config.dates is not None else changed_dates(lake)
            report.dates = dates
            prints = {day: fingerprint(partition(lake.events, day)) for day in dates}  # before reading
            events = extract(spark, lake, dates)
            staging = Staging(lake, config.run_id)
            # One file per date: these tables are small, and a reader opens one file per partition.
            staged = {name: staging.write(name, rows, one_file_each=len(dates)) for name, rows in transform(events).items()}
            count_rows(staged, dates, report)
            report.gate = check(lake, config.run_id, dates, events, staged)["verdict"]
            if not staging.publish(report.gate == "passed", dict.fromkeys(DOWNSTREAM_TABLES, dates)):
                report.status = "gate_failed"
                return report
            record_built(lake, prints)
        report.status = "succeeded"
    except Exception as exc:
        report.status, report.error = "failed", str(exc).splitlines()[0][:2000]
        raise
    finally:
        report.seconds = round(time.monotonic() - started, 1)
        path = report.write(lake)
        log.info("activity run %s %s: dates %s, findings %s; report %s", config.run_id, report.status, report.dates,
                 report.findings_by_rule, path)  # fmt: skip
    return report


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return cli.run(lambda: build(config))


def build(config: ActivityConfig) -> int:
    """The run under the lake lock; its exit code."""
    lock = LakeLock(config.layout, f"downstream run {config.run_id}", wait_seconds=config.lock_wait)
    with lock, JobSession(lambda: spark_session("cloudtrail_activity")) as session:
        report = run(config, session)
    if report.status == "gate_failed":
        log.error("the downstream partitions failed their suites: nothing swapped; %s", config.layout.activity_gate_report(config.run_id))
        return cli.FAILED
    return cli.OK


if __name__ == "__main__":
    sys.exit(main())
