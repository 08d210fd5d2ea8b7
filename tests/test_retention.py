"""Retention (`jobs.compact --retain`, jobs/upkeep/retention.py): event dates older than the lake keeps go from every
table that holds rows by date (the events' files deleted, the derived Iceberg tables' partitions deleted), named in
the summary; the next publish takes them out of the events' Iceberg table; a dry run changes nothing; a retention
within the de-duplication horizon is refused."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest

from jobs.derived import activity, ocsf
from jobs.derived.derivation import DerivedConfig
from jobs.lake import Lake
from jobs.spark.session import JobSession
from jobs.tables.events import event_dates
from jobs.upkeep.compact import compact, parse_args
from tests.helpers import DAY, current_data_files, deliver, events_of, ingest
from tests.test_publish import gated, iceberg_rows, published

DATES = [str((DAY + timedelta(days=n)).date()) for n in range(3)]


def _leaves(lake: Path) -> dict[str, list[str]]:
    """The events' partition folders, and the derived Iceberg tables' partitions, each as `column=value`."""

    def partitions(name: str, column: str) -> list[str]:
        return sorted({f"{column}={values[column]}" for values in current_data_files(lake, name).values()})

    return {
        "events": [f"event_date={day}" for day in event_dates(Lake(lake))],
        "activity_hourly": partitions("activity_hourly", "event_date"),
        "findings": partitions("findings", "event_date"),
        "ocsf": partitions("ocsf_api_activity", "eventDay"),
    }


def test_dates_older_than_the_lake_keeps_go_from_every_dated_table_and_from_the_iceberg_tables(spark, landing, lake):
    for n in range(3):
        deliver(landing, events_of(20, DAY + timedelta(days=n, hours=1), f"d{n}"), DAY + timedelta(days=n, hours=2))
    assert gated(spark, lake, ingest(spark, landing, lake).run_id) == "passed"
    activity.run(DerivedConfig(str(lake), None, "a1"), lambda: spark)
    ocsf.run(DerivedConfig(str(lake), None, "o1"), lambda: spark)
    published(lake, "p1")
    before = _leaves(lake)
    assert before["events"] == [f"event_date={d}" for d in DATES] and len(before["ocsf"]) == 3

    argv = ["--lake", str(lake), "--closed-at", str((DAY + timedelta(days=10)).date()), "--retain", "8 days", "--run-id", "r1"]
    dry = compact(dataclasses.replace(parse_args(argv), dry_run=True), JobSession(lambda: spark), parse_args(argv).closed_at)
    assert dry["retired"] == {"before": DATES[2], "dates": DATES[:2]} and _leaves(lake) == before

    summary = compact(parse_args(argv), JobSession(lambda: spark), parse_args(argv).closed_at)
    assert summary["retired"]["dates"] == DATES[:2]
    assert _leaves(lake) == {
        "events": [f"event_date={DATES[2]}"], "activity_hourly": [f"event_date={DATES[2]}"],
        "findings": [f"event_date={DATES[2]}"] if before["findings"] else [], "ocsf": [f"eventDay={DATES[2].replace('-', '')}"],
    }  # fmt: skip
    after = _leaves(lake)
    activity.run(DerivedConfig(str(lake), None, "a2"), lambda: spark)
    ocsf.run(DerivedConfig(str(lake), None, "o2"), lambda: spark)
    assert _leaves(lake) == after, "the derived jobs build nothing back"

    assert {day for _, day in iceberg_rows(lake)} == {DATES[2]}, "the catalog's readers lose them at once"
    published(lake, "p2")
    assert {day for _, day in iceberg_rows(lake)} == {DATES[2]}
    assert {day for _, day in iceberg_rows(lake, "ocsf_api_activity", columns=("metadata", "eventDay"))} == {DATES[2].replace("-", "")}


@pytest.mark.unit
def test_a_retention_within_the_de_duplication_horizon_is_refused(lake, capsys):
    lake.mkdir()
    with pytest.raises(SystemExit) as refused:
        parse_args(["--lake", str(lake), "--retain", "1 day", "--dedup-horizon", "2 days"])
    assert refused.value.code == 2 and "would drop dates still open" in capsys.readouterr().err
