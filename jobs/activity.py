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

import argparse
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import options, partitions, validate_events
from jobs.downstream import findings, hourly_activity
from jobs.lake import DOWNSTREAM_TABLES, Lake, LakeBusyError, LakeLock, partition
from jobs.partitions import Swap, fingerprint
from jobs.report import gate_report, now_iso, write_json
from jobs.rules import load_rules
from jobs.schema import EVENTS_SCHEMA
from jobs.session import JobSession, spark_session
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


@dataclass
class ActivityReport:
    run_id: str
    started_at: str
    dates: list[str] = field(default_factory=list)
    status: str = "running"
    # Per table, per event date: the rows the new partition holds (0: the partition was removed).
    rows: dict[str, dict[str, int]] = field(default_factory=dict)
    findings_by_rule: dict[str, int] = field(default_factory=dict)
    # The downstream suites' verdict on the staged partitions (reports/dq/activity/<run id>.json); failed: nothing swapped.
    gate: str | None = None
    seconds: float | None = None
    error: str | None = None

    def write(self, lake: Lake) -> Path:
        return write_json(lake.activity_report(self.run_id), asdict(self))


def parse_args(argv: list[str] | None = None) -> ActivityConfig:
    parser = argparse.ArgumentParser(prog="activity", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lake", default=os.environ.get("CLOUDTRAIL_LAKE"), help="the lake [$CLOUDTRAIL_LAKE]")
    parser.add_argument("--from-date", type=date.fromisoformat, help="first event date to rebuild")
    parser.add_argument("--to-date", type=date.fromisoformat, help="last event date to rebuild")
    parser.add_argument("--run-id", help="id of this run in its report; None: manual__<UTC time>")
    parser.add_argument("--lock-wait", type=float, default=options.LOCK_WAIT_SECONDS, help="seconds to wait for another writer")
    args = parser.parse_args(argv)
    if not args.lake:
        parser.error("--lake (or CLOUDTRAIL_LAKE) is required")
    if (args.from_date is None) != (args.to_date is None) or (args.from_date and args.from_date > args.to_date):
        parser.error("--from-date and --to-date go together, the first not after the second")
    return ActivityConfig(
        lake=os.path.abspath(args.lake),
        dates=options.date_range(args.from_date, args.to_date) if args.from_date else None,
        run_id=args.run_id or f"manual__{now_iso()}",
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


def event_dates(lake: Lake) -> set[str]:
    return {folder.name.split("=", 1)[1] for folder in lake.events.glob("event_date=*") if folder.is_dir()}


def changed_dates(lake: Lake) -> list[str]:
    """The event dates whose events partition is not the one their downstream rows were built from."""
    built = built_from(lake)
    return sorted(day for day in event_dates(lake) | set(built) if fingerprint(partition(lake.events, "event_date", day)) != built.get(day))


def extract(spark: SparkSession, lake: Lake, dates: list[str]) -> DataFrame:
    """The events table's rows of these event dates."""
    folders = [str(partition(lake.events, "event_date", day)) for day in dates if partition(lake.events, "event_date", day).is_dir()]
    if not folders:
        return spark.createDataFrame([], EVENTS_SCHEMA)
    return spark.read.schema(EVENTS_SCHEMA).option("basePath", str(lake.events)).parquet(*folders)


def transform(events: DataFrame) -> dict[str, DataFrame]:
    return {"activity_hourly": hourly_activity(events), "findings": findings(events, load_rules())}


def stage(lake: Lake, run_id: str, dates: list[str], tables: dict[str, DataFrame]) -> dict[str, DataFrame]:
    """Write each table's partitions of `dates` under the run's staging folder, where no reader looks; return them as written."""
    staged = {}
    for name, rows in tables.items():
        folder = str(lake.staging(run_id) / name)
        # One file per date: these tables are small, and a reader opens one file per partition.
        rows.repartition(max(1, len(dates)), "event_date").write.mode("overwrite").partitionBy("event_date").parquet(folder)
        staged[name] = rows.sparkSession.read.schema(rows.schema).parquet(folder)
    return staged


def check(lake: Lake, run_id: str, dates: list[str], events: DataFrame, staged: dict[str, DataFrame]) -> dict[str, Any]:
    """The downstream suites (expectations/activity_*.json, findings.*.json) on the staged partitions; the verdict is the report's."""
    in_table = {str(row["event_date"]): row["count"] for row in events.groupBy("event_date").count().collect()}
    activity = staged["activity_hourly"]
    in_activity = {str(row[0]): row[1] for row in activity.groupBy("event_date").agg(F.sum("events")).collect()}
    figures = pd.DataFrame(
        [{"event_date": day, "events_in_table": in_table.get(day, 0), "events_in_activity": in_activity.get(day, 0)} for day in dates]
    )
    frames: dict[str, DataFrame | pd.DataFrame] = {
        "activity_hourly.critical": activity.withColumn("window_date", F.to_date("window_start")),
        "findings.critical": staged["findings"],
        "activity_reconciliation.critical": figures,
    }
    results = lake.activity_gate_report(run_id)
    days = tuple(date.fromisoformat(day) for day in dates)
    config = validate_events.ValidateConfig(lake, run_id, days, options.QUARANTINE_THRESHOLD, results)
    outcome = validate_events.validate(frames, config, {"rule_ids": [rule.rule_id for rule in load_rules()]})
    body = gate_report(run_id, dates, outcome, figures=figures.to_dict("records"))
    write_json(results, body)
    for failure in body["failed_critical"]:
        log.error("CRITICAL %s %s failed; sample: %s", failure["expectation"], failure["kwargs"],
                  failure["sample_unexpected"] or failure["observed_value"])  # fmt: skip
    return body


def swap(lake: Lake, run_id: str, dates: list[str]) -> None:
    """Every staged partition in, each atomically (a date with no rows loses its partition)."""
    swaps = []
    for name in DOWNSTREAM_TABLES:
        table = lake.table(name)
        for day in dates:
            staged = partition(lake.staging(run_id) / name, "event_date", day)
            if staged.is_dir():
                partitions.write_marker(staged, run_id)
            aside = partition(lake.replaced_by_run(table, run_id), "event_date", day)
            swaps.append(Swap(str(partition(table, "event_date", day)), str(staged) if staged.is_dir() else None, str(aside)))
    partitions.replace(lake, run_id, swaps)


def count_rows(staged: dict[str, DataFrame], dates: list[str], report: ActivityReport) -> None:
    for name, rows in staged.items():
        counts = {str(row["event_date"]): row["count"] for row in rows.groupBy("event_date").count().collect()}
        report.rows[name] = {day: counts.get(day, 0) for day in dates}
    report.findings_by_rule = {row["rule_id"]: row["count"] for row in staged["findings"].groupBy("rule_id").count().collect()}


def run(config: ActivityConfig, session: Callable[[], SparkSession]) -> ActivityReport:
    lake = config.layout
    started = time.monotonic()
    report = ActivityReport(run_id=config.run_id, started_at=now_iso())
    try:
        partitions.recover(lake)
        for name in DOWNSTREAM_TABLES:  # old versions of derived partitions: a run later, no reader still reads them
            shutil.rmtree(lake.root / "_replaced" / name, ignore_errors=True)
        if config.dates is not None or changed_dates(lake):  # else Spark is not started
            spark = session()
            sweep_lake(spark, lake)  # a crashed ingest's files are not part of the events table
            dates = [str(day) for day in config.dates] if config.dates is not None else changed_dates(lake)
            report.dates = dates
            prints = {day: fingerprint(partition(lake.events, "event_date", day)) for day in dates}  # before reading
            events = extract(spark, lake, dates)
            staged = stage(lake, config.run_id, dates, transform(events))
            count_rows(staged, dates, report)
            report.gate = check(lake, config.run_id, dates, events, staged)["verdict"]
            if report.gate == "failed":
                partitions.discard(lake, config.run_id)
                report.status = "gate_failed"
                return report
            swap(lake, config.run_id, dates)
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    config = parse_args(argv)
    try:
        with LakeLock(config.layout, wait_seconds=config.lock_wait), JobSession(lambda: spark_session("cloudtrail_activity")) as session:
            report = run(config, session)
    except LakeBusyError as exc:
        log.error("%s", exc)
        return 75
    if report.status == "gate_failed":
        log.error("the downstream partitions failed their suites: nothing swapped; %s", config.layout.activity_gate_report(config.run_id))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
