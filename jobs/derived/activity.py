"""Bring the activity tables (activity_hourly, findings) up to date with the events table, partition by partition.

Run it with either of:

    spark-submit --py-files build/jobs.zip jobs/activity.py --lake DIR [--from-date YYYY-MM-DD --to-date YYYY-MM-DD]
    python -m jobs.activity --lake DIR|s3://BUCKET/PREFIX [--catalog NAME] [--from-date D --to-date D]

Without dates it rebuilds every event date whose events partition changed since it was last
built from (a new batch, a late file, a rebuild, a rollback: any change to the partition's data
files), and drops the dates whose events partition is gone; with dates, those dates. Each date's
rows of both tables are computed from that date's whole events partition and swapped in
atomically (jobs/tables/partitions.py), so the tables are exact whatever order the events arrived in.
Runs under the lake lock, waiting for it (--lock-wait).
Writes <lake>/activity_hourly/event_date=.../, <lake>/findings/event_date=.../ and
<lake>/reports/activity/<run id>.json. The new partitions pass the activity suites
(expectations/activity_*.json, findings.critical.json: each hour's counts against the events
table, rule ids, one finding per rule and event) before anything is swapped; their verdict is
in <lake>/reports/dq/activity/<run id>.json.
Exit codes: 0 done, 1 failed (a failed gate swaps nothing), 2 bad arguments, 75 the lake stayed busy.

The tables' rows are pure DataFrame -> DataFrame steps over rows of the events table:

    events --hourly_activity--> one row per hour x account x region x call x principal x error, with counts
    events --findings---------> one row per (rule, event) a rule of jobs/derived/rules/ matches
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from jobs import cli
from jobs.derived.derivation import Derivation, DerivedConfig, build, gate, per_date, recipe_of, refresh
from jobs.derived.rules import Rule, load_rules
from jobs.lake import ACTIVITY, ACTIVITY_HOURLY, EVENT_DATE, FINDINGS, Lake
from jobs.reporting.report import DerivedReport
from jobs.spark.session import spark_session


def principal(identity: Column) -> Column:
    """Who made the call: the identity's ARN, else the AWS service that invoked it on the caller's behalf."""
    return F.coalesce(F.nullif(identity.getField("arn"), F.lit("")), identity.getField("invokedBy"))


def hour_window(event_time: Column) -> Column:
    """The start of the event-time hour the event falls in (UTC): the seeds' `window(eventTime, "1 hour")`."""
    return F.window(event_time, "1 hour").getField("start")


ACTIVITY_KEYS = ["recipientAccountId", "awsRegion", "eventSource", "eventName", "identity_type", "principal", "errorCode"]


def hourly_activity(events: DataFrame) -> DataFrame:
    """Events -> counts per hour window and ACTIVITY_KEYS (errorCode null: the calls that succeeded).

    A whole event date's rows in, that date's windows out: an hour never spans two dates, so a
    date's partition is computed from that date's events alone, and is exact whenever they are.
    """
    return (
        events.select(
            hour_window(F.col("eventTime")).alias("window_start"),
            "recipientAccountId",
            "awsRegion",
            "eventSource",
            "eventName",
            F.col("userIdentity.type").alias("identity_type"),
            principal(F.col("userIdentity")).alias("principal"),
            "errorCode",
            "sourceIPAddress",
            "eventTime",
            EVENT_DATE,
        )
        .groupBy("window_start", *ACTIVITY_KEYS, EVENT_DATE)
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.count("errorCode").alias("errors"),
            F.count_distinct("sourceIPAddress").alias("distinct_source_ips"),
            F.min("eventTime").alias("first_seen"),
            F.max("eventTime").alias("last_seen"),
        )
        .select("window_start", *ACTIVITY_KEYS, "events", "errors", "distinct_source_ips", "first_seen", "last_seen", EVENT_DATE)
    )


FINDING_COLUMNS = [
    "rule_id", "rule_title", "severity", "eventID", "eventTime", "principal", "identity_type", "sourceIPAddress",
    "recipientAccountId", "awsRegion", "eventSource", "eventName", "errorCode", "errorMessage", "userAgent",
    "requestParameters", "_source_file", EVENT_DATE,
]  # fmt: skip


def findings(events: DataFrame, rules: Sequence[Rule]) -> DataFrame:
    """Events -> one row per (rule, eventID) the rule's filter matches, with what an analyst needs to triage it.

    Every rule is one condition in one pass over the events (an array of the rules that matched,
    exploded), not one scan per rule. An eventID the table holds twice (a re-delivery beyond the
    de-duplication horizon) still gives one finding per rule: the copy from the first file by name.
    """
    first = Window.partitionBy("rule_id", "eventID").orderBy("_source_file")
    matched = F.array(
        *(
            F.when(F.expr(rule.condition), F.struct(F.lit(rule.rule_id).alias("rule_id"), F.lit(rule.title).alias("rule_title"),
                                                   F.lit(rule.severity).alias("severity")))
            for rule in rules
        )
    )  # fmt: skip
    return (
        events.withColumn("rule", F.explode(F.filter(matched, lambda rule: rule.isNotNull())))
        .select(
            "rule.*",
            "eventID",
            "eventTime",
            principal(F.col("userIdentity")).alias("principal"),
            F.col("userIdentity.type").alias("identity_type"),
            *FINDING_COLUMNS[7:],
        )
        .withColumn("_copy", F.row_number().over(first))
        .where(F.col("_copy") == 1)
        .drop("_copy")
    )


def parse_args(argv: list[str] | None = None) -> DerivedConfig:
    return DerivedConfig.parse(ACTIVITY.job, __doc__, argv)


def transform(events: DataFrame) -> dict[str, DataFrame]:
    return {ACTIVITY_HOURLY: hourly_activity(events), FINDINGS: findings(events, load_rules())}


def check(lake: Lake, run_id: str, dates: list[str], events: DataFrame, staged: dict[str, DataFrame], _: dict[str, dict[str, int]]) -> str:
    """The activity suites (expectations/activity_*.json, findings.*.json) on the staged partitions; the report's verdict."""
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
    """This module (its transforms) and every rule: adding or editing a rule rebuilds every date."""
    return recipe_of([sys.modules[__name__]], [repr(rule) for rule in load_rules()])


DERIVATION = Derivation(ACTIVITY, transform, check, summarize, recipe=recipe)


def run(config: DerivedConfig, session: Callable[[], SparkSession]) -> DerivedReport:
    return refresh(DERIVATION, config, session)


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return cli.run(lambda: build(DERIVATION, config, spark_session))
