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

import sys
from collections.abc import Callable

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import cli, downstream
from jobs.derived import Derivation, DerivedConfig, build, gate, per_date, recipe_of, refresh
from jobs.downstream import findings, hourly_activity
from jobs.lake import ACTIVITY, ACTIVITY_HOURLY, EVENT_DATE, FINDINGS, Lake
from jobs.report import DerivedReport
from jobs.rules import load_rules
from jobs.session import spark_session


def parse_args(argv: list[str] | None = None) -> DerivedConfig:
    return DerivedConfig.parse(ACTIVITY.job, __doc__, argv)


def transform(events: DataFrame) -> dict[str, DataFrame]:
    return {ACTIVITY_HOURLY: hourly_activity(events), FINDINGS: findings(events, load_rules())}


def check(lake: Lake, run_id: str, dates: list[str], events: DataFrame, staged: dict[str, DataFrame], _: dict[str, dict[str, int]]) -> str:
    """The downstream suites (expectations/activity_*.json, findings.*.json) on the staged partitions; the report's verdict."""
    in_table = {str(row[EVENT_DATE]): row["count"] for row in events.groupBy(EVENT_DATE).count().collect()}
    activity = staged[ACTIVITY_HOURLY]
    in_activity = {str(row[0]): row[1] for row in activity.groupBy(EVENT_DATE).agg(F.sum("events")).collect()}
    figures = per_date(dates, events_in_table=in_table, events_in_activity=in_activity)
    frames: dict[str, DataFrame | pd.DataFrame] = {
        "activity_hourly.critical": activity.withColumn("window_date", F.to_date("window_start")),
        "findings.critical": staged[FINDINGS],
        "activity_reconciliation.critical": figures,
    }
    return gate(ACTIVITY.job, lake, run_id, dates, frames, figures, {"rule_ids": [rule.rule_id for rule in load_rules()]})


def summarize(staged: dict[str, DataFrame], report: DerivedReport) -> None:
    report.counts["findings by rule"] = {row["rule_id"]: row["count"] for row in staged[FINDINGS].groupBy("rule_id").count().collect()}


def recipe() -> str:
    """This module, the downstream transforms and every rule: adding or editing a rule rebuilds every date."""
    return recipe_of([sys.modules[__name__], downstream], [repr(rule) for rule in load_rules()])


DERIVATION = Derivation(ACTIVITY, transform, check, summarize, recipe=recipe)


def run(config: DerivedConfig, session: Callable[[], SparkSession]) -> DerivedReport:
    return refresh(DERIVATION, config, session)


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return cli.run(lambda: build(DERIVATION, config, spark_session))


if __name__ == "__main__":
    sys.exit(main())
