"""Pure DataFrame -> DataFrame steps of the downstream tables (jobs/activity.py), over rows of the events table.

events --hourly_activity--> one row per hour x account x region x call x principal x error, with counts
events --findings---------> one row per (rule, event) a rule of jobs/rules/ matches
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.lake import EVENT_DATE
from jobs.rules import Rule


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
