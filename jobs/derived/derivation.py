"""Tables derived from the events table event date by event date (jobs/derived/activity.py, jobs/derived/ocsf.py): which dates
changed since they were last built, and the one way they are rebuilt: write, audit, publish.

The derived tables are Apache Iceberg tables of record, written by Spark through the lake's catalog: a date's rows are
computed from that date's whole events partition and replace the date's rows in one staged snapshot, which the job's
gate reads and which readers see only once it passed (jobs/iceberg/spark_tables.py), so the table is exact whatever
order the events arrived in. What each date
was built from is the events partition's fingerprint (its data files' names and sizes) and the table's recipe
(a hash of the code and data that compute it: the job's modules, its rules), kept per job in <lake>/_checkpoints/
with the rows and folders each table's date holds (the lake page's figures): any change to the partition (a new
batch, a late file, a rebuild, a rollback, a compaction) or to the recipe (a rule added or edited, the mapping
changed) makes the date due again. Which jobs there are, their tables and their state files: jobs/lake.py's DERIVED.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date
from types import ModuleType
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import cli, options, storage
from jobs.derived.state import built_dates, record_built
from jobs.iceberg.catalog import TABLE_NAMES, existing_table, open_catalog
from jobs.iceberg.spark_tables import Staged, spark_name, staged_overwrite, use_catalog, writable
from jobs.lake import EVENT_DATE, PARTITION_COLUMNS, Derived, Lake
from jobs.lock import LakeLock
from jobs.quality import validate_events
from jobs.records.schema import EVENTS_SCHEMA
from jobs.reporting.report import DerivedReport, now_iso
from jobs.spark.session import JobSession
from jobs.storage import LakePath
from jobs.tables import partitions
from jobs.tables.events import date_fingerprint, event_dates, events_of_dates

log = logging.getLogger("derived")


@dataclass(frozen=True)
class DerivedConfig:
    """A run of a job that derives tables from the events table."""

    lake: str
    # Event dates to rebuild; None: those whose events partition changed since they were last built.
    dates: tuple[date, ...] | None
    run_id: str
    lock_wait: float = options.LOCK_WAIT_SECONDS
    catalog: str | None = None  # None: the embedded SQLite catalog inside the lake
    namespace: str = options.NAMESPACE

    @property
    def layout(self) -> Lake:
        """The lake; one in S3 keeps its tables of record in the catalog the job names."""
        return Lake.at(self.lake, self.catalog)

    @classmethod
    def parse(cls, prog: str, doc: str | None, argv: list[str] | None) -> DerivedConfig:
        """The job's command line as its config."""
        parser = cli.parser(prog, doc)
        cli.add_lake(parser)
        cli.add_dates(parser, "event date to rebuild")
        cli.add_run_id(parser)
        cli.add_lock_wait(parser)
        cli.add_catalog(parser)
        args = parser.parse_args(argv)
        return cls(
            lake=str(cli.lake(parser, args, existing=True).root),
            dates=cli.date_range(parser, args.from_date, args.to_date, "--from-date and --to-date"),
            run_id=cli.run_id(args.run_id),
            lock_wait=args.lock_wait,
            catalog=args.catalog,
            namespace=args.namespace,
        )


@dataclass(frozen=True)
class Derivation:
    """How one derived job (jobs/lake.py's `Derived`: its tables, reports and state) computes and checks its tables."""

    derived: Derived
    # A date's events -> each table's rows (pure).
    build: Callable[[DataFrame], dict[str, DataFrame]]
    # The suites on the staged rows: (lake, run id, dates, events, staged, staged rows per table and date) -> the verdict.
    check: Callable[[Lake, str, list[str], DataFrame, dict[str, DataFrame], dict[str, dict[str, int]]], str]
    # Anything the job's report says besides the rows per table and date.
    summarize: Callable[[dict[str, DataFrame], DerivedReport], None] = lambda staged, report: None
    # A row's event date as YYYY-MM-DD text, in the tables' own columns.
    event_date: Callable[[], Column] = lambda: F.col(EVENT_DATE).cast("string")
    # The rows of these event dates (YYYY-MM-DD), on the tables' partition columns: what a run replaces.
    of_dates: Callable[[list[str]], Column] = lambda dates: F.col(EVENT_DATE).isin([date.fromisoformat(day) for day in dates])
    # Per table, the properties it states about itself (the OCSF table's version and class).
    properties: dict[str, dict[str, str]] = field(default_factory=dict)
    # What computes the tables (recipe_of): a date built with another recipe is due again.
    recipe: Callable[[], str] = lambda: ""

    @property
    def job(self) -> str:
        return self.derived.job


def recipe_of(modules: Iterable[ModuleType], data: Iterable[str] = ()) -> str:
    """A derived table's recipe, as a short hash of its modules' code and the data they read (rules)."""
    digest = hashlib.sha256()
    for text in [*(inspect.getsource(module) for module in modules), *data]:
        digest.update(hashlib.sha256(text.encode()).digest())
    return digest.hexdigest()[:16]


def built_stamp(lake: Lake, day: str, recipe: str) -> str:
    """What a date's derived rows are built from: its events partition's fingerprint and the recipe."""
    return f"{date_fingerprint(lake, day)} {recipe}"


def changed_dates(lake: Lake, derived: Derived, recipe: str, anew: bool = False) -> list[str]:
    """The event dates whose events partition or recipe is not the one their derived rows were built from; `anew`: every
    date of the events table."""
    built = {} if anew else built_dates(lake, derived)
    dates = set(event_dates(lake)) | set(built)
    return sorted(day for day in dates if day not in built or built_stamp(lake, day, recipe) != built[day].stamp)


def folder_tables(lake: Lake, derived: Derived) -> list[LakePath]:
    """The partition folders an earlier release kept the job's tables in, inside the lake (it published copies of
    them): the Iceberg tables are built anew from the events, then these go."""
    return [folder for name in derived.tables for folder in storage.listed(lake.table(name), f"{PARTITION_COLUMNS[name][0]}=*")]


def extract(spark: SparkSession, lake: Lake, dates: list[str]) -> DataFrame:
    """The events table's rows of these event dates."""
    rows = events_of_dates(spark, lake, dates)
    return spark.createDataFrame([], EVENTS_SCHEMA) if rows is None else rows


def count_rows(staged: dict[str, DataFrame], event_date: Column, dates: list[str], report: DerivedReport) -> None:
    """Per table and date, the staged rows and the partition folders they fill: the lake page reads these from the
    job's state rather than every folder's Parquet footers (at 1,000 accounts in 17 regions, 17,000 folders a day)."""
    for name, rows in staged.items():
        folder = F.struct(*PARTITION_COLUMNS[name])
        counted = rows.groupBy(event_date.alias("day")).agg(F.count(F.lit(1)), F.count_distinct(folder)).collect()
        report.rows[name] = {day: 0 for day in dates} | {row[0]: row[1] for row in counted}
        report.folders[name] = {day: 0 for day in dates} | {row[0]: row[2] for row in counted}


def per_date(dates: list[str], **figures: dict[str, int]) -> pd.DataFrame:
    """Per event date, each named figure (0 where a date has none): a reconciliation suite's frame."""
    return pd.DataFrame([{EVENT_DATE: day} | {name: counts.get(day, 0) for name, counts in figures.items()} for day in dates])


def gate(
    job: str,
    lake: Lake,
    run_id: str,
    dates: list[str],
    frames: dict[str, DataFrame | pd.DataFrame],
    figures: pd.DataFrame,
    parameters: dict[str, Any] | None = None,
) -> str:
    """A derived job's suites on `frames` (suite name -> frame; `figures`, per date, the staged rows against the events
    table, also written into the gate's report): its verdict, the report in reports/dq/<job>/."""
    days = tuple(date.fromisoformat(day) for day in dates)
    config = validate_events.ValidateConfig(lake, run_id, days, options.QUARANTINE_THRESHOLD, lake.derived_gate_report(job, run_id))
    verdict: str = validate_events.judge(frames, config, dates, parameters, figures=figures.to_dict("records"))["verdict"]
    return verdict


def built_anew(lake: Lake, derived: Derived, tables: dict[str, Any]) -> bool:
    """Whether every date is to be built, whatever the job's state says: a table is missing from the catalog (`tables`:
    None; dropped when the lake moved: jobs/iceberg/catalog.py), or an earlier release's folder of one is in the lake."""
    return None in tables.values() or bool(folder_tables(lake, derived))


def stage(derivation: Derivation, config: DerivedConfig, tables: dict[str, Any], events: DataFrame, dates: list[str]) -> dict[str, Staged]:
    """Each table's rows of `dates`, built from their `events`, written as a snapshot staged by the run (`tables`: each
    table as the catalog holds it, None before its first write)."""
    spark, lake = events.sparkSession, config.layout
    spark_catalog = use_catalog(spark, lake, config.catalog)
    staged = {}
    for name, rows in derivation.build(events).items():
        properties, found = derivation.properties.get(name, {}), tables[name]
        if found is not None:
            writable(found, lake, properties)
        # One file per partition: a reader opens each partition's files, and these are a date's rows at most.
        rows = rows.repartition(max(1, len(dates)), *PARTITION_COLUMNS[name])
        table = spark_name(spark_catalog, TABLE_NAMES[name], config.namespace)
        # A lake in S3 keeps its tables beside its tables of record, whatever warehouse its catalog names.
        location = None if lake.catalog is None else str(lake.iceberg_warehouse / config.namespace / TABLE_NAMES[name])
        staged[name] = staged_overwrite(
            table, rows, derivation.of_dates(dates), PARTITION_COLUMNS[name], config.run_id, lake, properties, found is None, location
        )
    return staged


def refresh(derivation: Derivation, config: DerivedConfig, session: Callable[[], SparkSession]) -> DerivedReport:
    """Rebuild the dates given (None: those whose events changed): each table's dates staged, gated, published."""
    lake, run_id, given = config.layout, config.run_id, config.dates
    started = time.monotonic()
    report = DerivedReport(run_id=run_id, started_at=now_iso(), job=derivation.job)
    try:
        partitions.recover(lake)
        recipe = derivation.recipe()
        catalog = open_catalog(lake, config.catalog, config.namespace)
        tables = {name: existing_table(catalog, f"{config.namespace}.{TABLE_NAMES[name]}") for name in derivation.derived.tables}
        anew = built_anew(lake, derivation.derived, tables)
        if given is not None or changed_dates(lake, derivation.derived, recipe, anew):  # else Spark is not started
            spark = session()
            dates = [str(day) for day in given] if given is not None else changed_dates(lake, derivation.derived, recipe, anew)
            report.dates = dates
            stamps = {day: built_stamp(lake, day, recipe) for day in dates}  # before reading
            events = extract(spark, lake, dates)
            staged = stage(derivation, config, tables, events, dates)
            rows = {name: snapshot.rows(spark).where(derivation.of_dates(dates)) for name, snapshot in staged.items()}
            count_rows(rows, derivation.event_date(), dates, report)
            derivation.summarize(rows, report)
            report.gate = derivation.check(lake, run_id, dates, events, rows, report.rows)
            if report.gate != "passed":
                report.status = "gate_failed"
                return report
            for snapshot in staged.values():
                snapshot.publish(spark)
            record_built(lake, derivation.derived, stamps, report.rows, report.folders)
            if given is None:  # every date was built: an earlier release's folders are in the Iceberg tables now
                for folder in folder_tables(lake, derivation.derived):
                    storage.remove_tree(folder)
                for name in derivation.derived.tables:  # and the versions its swaps replaced
                    storage.remove_tree(lake.replaced_tables(name))
        report.status = "succeeded"
    except Exception as exc:
        report.status, report.error = "failed", cli.first_line(exc)[:2000]
        raise
    finally:
        report.seconds = round(time.monotonic() - started, 1)
        path = report.write(lake)
        log.info("%s run %s %s: dates %s, rows %s; report %s", derivation.job, run_id, report.status, report.dates,
                 {name: sum(days.values()) for name, days in report.rows.items()}, path)  # fmt: skip
    return report


def build(derivation: Derivation, config: DerivedConfig, spark: Callable[[str], SparkSession]) -> int:
    """A run under the lake lock, Spark started only when a date is due (`spark`: builds a session by app name); its
    exit code."""
    lock = LakeLock(config.layout, f"{derivation.job} run {config.run_id}", wait_seconds=config.lock_wait)
    with lock, JobSession(lambda: spark(f"cloudtrail_{derivation.job}")) as session:
        report = refresh(derivation, config, session)
    if report.status == "gate_failed":
        failed = config.layout.derived_gate_report(derivation.job, config.run_id)
        log.error("the %s partitions failed their suites: nothing swapped; %s", derivation.job, failed)
        return cli.FAILED
    return cli.OK
