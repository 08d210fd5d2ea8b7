"""Bring the OCSF view of the lake (the Iceberg table ocsf_api_activity: the events as OCSF 1.1.0 API Activity) up to
date with the events table, event date by event date.

Run it with either of:

    python -m jobs.ocsf --lake DIR|s3://BUCKET/PREFIX [--catalog NAME] [--namespace NS] [--from-date YYYY-MM-DD --to-date YYYY-MM-DD]
    spark-submit --py-files build/jobs.zip jobs/ocsf.py --lake DIR [--from-date D --to-date D]

Without dates it rebuilds every event date whose events partition changed since it was last built from,
and drops the dates whose events partition is gone; with dates, those dates. The table is partitioned as
Amazon Security Lake lays out its sources, region=<awsRegion>/accountId=<recipientAccountId>/eventDay=YYYYMMDD/,
one row per event (eventID) of the events table, mapped by jobs/derived/ocsf_mapping.py. A date's rows are computed
from that date's whole events partition and published in one snapshot (jobs/derived/derivation.py) after they pass
expectations/ocsf_*.critical.json (class_uid, time and metadata.uid set, metadata.uid unique, one row per event). The
table's properties state the OCSF version, class and profiles (`ocsf.*`).
Runs under the lake lock, waiting for it (--lock-wait). Reports: <lake>/reports/ocsf/<run id>.json, the
gate's <lake>/reports/dq/ocsf/<run id>.json.
Exit codes: 0 done, 1 failed (a failed gate publishes nothing), 2 bad arguments, 75 the lake stayed busy.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import cli
from jobs.derived import ocsf_mapping
from jobs.derived.derivation import Derivation, DerivedConfig, build, gate, per_date, recipe_of, refresh
from jobs.derived.ocsf_mapping import CLASS_NAME, CLASS_UID, OCSF_VERSION, PROFILES, api_activity
from jobs.lake import EVENT_DATE, EVENT_DAY, OCSF, OCSF_API_ACTIVITY, Lake, event_day
from jobs.records import schema
from jobs.records.dedup import Dedup, first_in_table
from jobs.reporting.report import DerivedReport
from jobs.spark.session import spark_session


def parse_args(argv: list[str] | None = None) -> DerivedConfig:
    return DerivedConfig.parse(OCSF.job, __doc__, argv)


def transform(events: DataFrame) -> dict[str, DataFrame]:
    return {OCSF_API_ACTIVITY: events.transform(first_in_table, Dedup()).transform(api_activity)}


def check(
    lake: Lake, run_id: str, dates: list[str], events: DataFrame, staged: dict[str, DataFrame], counted: dict[str, dict[str, int]]
) -> str:
    """The OCSF suites on the staged partitions: the rows themselves, and one row per event of each date (`counted`: the
    staged rows per date, as the run counted them for its report)."""
    rows, in_ocsf = staged[OCSF_API_ACTIVITY], counted[OCSF_API_ACTIVITY]
    in_table = {str(r[0]): r[1] for r in events.groupBy(EVENT_DATE).agg(F.count_distinct("eventID")).collect()}
    figures = per_date(dates, events_in_table=in_table, rows_in_ocsf=in_ocsf)
    checked = rows.select(
        "class_uid",
        "time",
        F.col("metadata.uid").alias("metadata_uid"),
        "type_uid",
        (F.col("class_uid") * 100 + F.col("activity_id")).cast("long").alias("expected_type_uid"),
        F.date_format(F.timestamp_millis("time"), "yyyyMMdd").alias("time_day"),
        EVENT_DAY,
    )
    frames: dict[str, DataFrame | pd.DataFrame] = {"ocsf_api_activity.critical": checked, "ocsf_reconciliation.critical": figures}
    return gate(OCSF.job, lake, run_id, dates, frames, figures)


def of_dates(dates: list[str]) -> Column:
    """The rows of these event dates (YYYY-MM-DD), on the partition column eventDay (YYYYMMDD)."""
    return F.col(EVENT_DAY).isin([event_day(day) for day in dates])


def event_date() -> Column:
    """A row's event date as YYYY-MM-DD text, from its eventDay."""
    return F.date_format(F.to_date(EVENT_DAY, "yyyyMMdd"), "yyyy-MM-dd")


# What the table says of itself, as table properties every reader of the catalog sees.
DESCRIPTION = {
    "ocsf.version": OCSF_VERSION, "ocsf.class_uid": str(CLASS_UID), "ocsf.class_name": CLASS_NAME,
    "ocsf.profiles": ",".join(PROFILES), "ocsf.source": "AWS CloudTrail, the events table of this lake",
}  # fmt: skip


def recipe() -> str:
    """This module, the mapping and the events' schema (what lands in `unmapped`): a change to any rebuilds every date."""
    return recipe_of([sys.modules[__name__], ocsf_mapping, schema])


DERIVATION = Derivation(OCSF, transform, check, event_date=event_date, of_dates=of_dates, properties={OCSF_API_ACTIVITY: DESCRIPTION},
                        recipe=recipe)  # fmt: skip


def run(config: DerivedConfig, session: Callable[[], SparkSession]) -> DerivedReport:
    return refresh(DERIVATION, config, session)


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return cli.run(lambda: build(DERIVATION, config, spark_session))
