"""Compact closed event dates of the events table: each date's files rewritten into files near a target size.

    python -m jobs.compact --lake DIR|s3://BUCKET/PREFIX [--catalog NAME]
        [--from-date 2024-01-01 --to-date 2024-01-31 | --closed-at 2024-02-01]
        [--target-size 128m] [--dedup-horizon '2 days'] [--retain '400 days'] [--dry-run]
    spark-submit --py-files build/jobs.zip jobs/compact.py --lake DIR ...

Every run adds a file to each event date it writes, so after a day of hourly runs a date holds dozens of
small files, and every reader opens each. A date is closed once it is older than the de-duplication
horizon: a later run adds rows to it only for a late event. Without dates, every date closed at
`--closed-at` (default today; the DAG passes its data interval's end) is looked at: those before it less
`--dedup-horizon`. A date is compacted when it holds more files than its size needs at `--target-size`, or a
file the ingest wrote (in arrival order): its committed files (the lake is swept first) are read, sorted as the
events' layout orders them (jobs/records/layout.py: each file's statistics then cover a narrow range of principals),
written as ceil(size / target) files under <lake>/_staging/<run>/, checked to hold the same rows (count and distinct
eventIDs), and swapped in atomically (jobs/tables/partitions.py): a reader sees the old files or the new, never both
and never neither.
The old files go to <lake>/_replaced/events/<run>/; the new ones are in today's Parquet format. Later
runs add files to a compacted date as to any other; a rebuild reads it as any other.
With `--retain` (or $CLOUDTRAIL_RETAIN), event dates older than that at --closed-at are first dropped from every
table that holds rows by date (jobs/upkeep/retention.py) and named in the summary; it must be longer than the
de-duplication horizon. Exit codes (jobs/cli.py): 0 compacted (or nothing to do), 1 a check failed (nothing
swapped), 2 bad arguments, 75 another writer held the lake.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import cli, options, storage
from jobs.iceberg.catalog import open_catalog
from jobs.lake import Lake
from jobs.ledger.store import verified_checkpoint
from jobs.lock import LakeLock
from jobs.quality import gate
from jobs.records import layout
from jobs.records.schema import EVENTS_DATA_SCHEMA
from jobs.spark.session import JobSession, spark_session
from jobs.storage import LakePath
from jobs.tables import partitions
from jobs.tables.events import date_files, event_dates
from jobs.tables.events_table import EventsTable
from jobs.tables.tables_of_record import held_batches
from jobs.upkeep import retention

log = logging.getLogger("cloudtrail_compact")

# A compaction's snapshot names its run.
COMPACTION = "cloudtrail.compaction"
TARGET_SIZE = "128m"


@dataclass(frozen=True)
class CompactConfig:
    lake: Lake
    run_id: str
    dates: tuple[date, ...] | None = None  # None: every date closed at `closed_at`
    closed_at: date | None = None  # None: today
    target_bytes: int = options.size(TARGET_SIZE)
    horizon: timedelta = options.duration(options.DEDUP_HORIZON)
    dry_run: bool = False
    lock_wait: float = options.LOCK_WAIT_SECONDS
    retain: timedelta | None = None  # None: every date is kept
    catalog: str | None = None  # the derived tables' (retention): None, the embedded one inside the lake
    namespace: str = options.NAMESPACE


def parse_args(argv: list[str] | None = None) -> CompactConfig:
    parser = cli.parser("compact", __doc__)
    cli.add_lake(parser)
    cli.add_dates(parser, "event date to compact")
    cli.add_run_id(parser)
    cli.add_lock_wait(parser)
    cli.add_catalog(parser)
    parser.add_argument("--target-size", type=cli.size, default=TARGET_SIZE, help="size of the files to write")
    parser.add_argument("--dedup-horizon", type=cli.duration, default=options.DEDUP_HORIZON, help="dates older than this are closed")
    parser.add_argument("--closed-at", type=cli.iso_date, help="without dates: compact the dates closed on this day [today]")
    parser.add_argument("--dry-run", action="store_true", help="print the dates that would be compacted, change nothing")
    parser.add_argument("--retain", type=cli.duration, default=os.environ.get("CLOUDTRAIL_RETAIN") or None,
                        help="drop event dates older than this at --closed-at [$CLOUDTRAIL_RETAIN; none: keep all]")  # fmt: skip
    args = parser.parse_args(argv)
    lake = cli.lake(parser, args, existing=True)
    if args.retain is not None and args.retain <= args.dedup_horizon:
        parser.error(f"--retain {args.retain} would drop dates still open (within --dedup-horizon {args.dedup_horizon})")
    return CompactConfig(
        lake=lake,
        run_id=cli.run_id(args.run_id, "compact"),
        dates=cli.date_range(parser, args.from_date, args.to_date, "--from-date and --to-date"),
        closed_at=args.closed_at,
        target_bytes=args.target_size,
        horizon=args.dedup_horizon,
        dry_run=args.dry_run,
        lock_wait=args.lock_wait,
        retain=args.retain,
        catalog=args.catalog,
        namespace=args.namespace,
    )


@dataclass(frozen=True)
class DateCompaction:
    """One event date's partition: its data files now, and how many it needs."""

    event_date: date
    files: tuple[LakePath, ...]
    bytes: int
    needed: int

    def summary(self) -> dict[str, int]:
        return {"files": len(self.files), "bytes": self.bytes, "files_after": self.needed}


def days_before(today: date, age: timedelta) -> date:
    """The first date not older than `age` at `today` (an age in part of a day counts as the whole day)."""
    return today - timedelta(days=math.ceil(age / timedelta(days=1)))


def plan_compaction(config: CompactConfig, today: date) -> list[DateCompaction]:
    """The dates to compact: those asked for (or every date closed at `today`) holding more files than they need, or
    rows not laid out yet (a file the ingest wrote)."""
    closed_before = days_before(today, config.horizon)
    found = []
    for found_day in event_dates(config.lake):
        day = date.fromisoformat(found_day)
        if (config.dates is not None and day not in config.dates) or (config.dates is None and day >= closed_before):
            continue
        files = tuple(date_files(config.lake, day))
        size = sum(path.stat().st_size for path in files)
        needed = max(1, math.ceil(size / config.target_bytes))
        if len(files) > needed or any(partitions.ingest_written(path) for path in files):
            found.append(DateCompaction(day, files, size, needed))
    return found


def rows_of(spark: SparkSession, files: list[LakePath]) -> DataFrame:
    """The rows of a partition's data files, without the date its folder holds (older files have INT96 times: read alike)."""
    return spark.read.schema(EVENTS_DATA_SCHEMA).parquet(*(str(path) for path in files))


def compacted(rows: DataFrame, files: int) -> DataFrame:
    """Rows in `files` parts, in the events' layout (jobs/records/layout.py) across the parts and within each: a part's,
    and each row group's, statistics then cover a narrow range of principals."""
    order = [*layout.SORT_COLUMNS, "eventID"]
    return rows.repartitionByRange(files, *order).sortWithinPartitions(*order)


def same_rows(spark: SparkSession, old: list[LakePath], new: list[LakePath]) -> bool:
    """The compacted date holds what the old files held: as many rows, and as many distinct eventIDs."""
    counts = [rows.agg(F.count(F.lit(1)), F.count_distinct("eventID")).first() for rows in (rows_of(spark, old), rows_of(spark, new))]
    return counts[0] == counts[1]


def compact(config: CompactConfig, session: JobSession, today: date) -> dict[str, object]:
    """Under the lake lock: the checkpoint checked, plan, write each date's new files, check them, commit them."""
    verified_checkpoint(config.lake, held_batches(config.lake))  # tables and a checkpoint that disagree: refused
    spark = session()
    events = EventsTable(spark, config.lake)
    summary: dict[str, object] = {"dry_run": config.dry_run}
    if config.retain is not None:  # before planning: a date dropped is not compacted
        before = days_before(today, config.retain)
        # A lake with no catalog yet has no derived table to drop dates from.
        catalog = (
            open_catalog(config.lake, config.catalog, config.namespace) if config.catalog or config.lake.iceberg_catalog.exists() else None
        )
        tables = retention.derived_tables(catalog, config.namespace)
        expired = retention.expired_dates(config.lake, tables, before)
        summary["retired"] = {"before": str(before), "dates": [str(day) for day in expired]}
        if expired and not config.dry_run:
            retention.retire(events, tables, config.run_id, expired)
    dates = plan_compaction(config, today)
    summary["dates"] = {str(p.event_date): p.summary() for p in dates}
    if config.dry_run or not dates:
        return summary
    tag, checked, staged = f"compact-{config.run_id}", True, []
    for day in dates:
        files = events.stage_date(compacted(rows_of(spark, list(day.files)), day.needed), tag, day.event_date)
        checked = checked and same_rows(spark, list(day.files), [storage.at(file) for file in files])
        staged += files
    days = [str(p.event_date) for p in dates]
    index = gate.validated(config.lake)
    passed = [day for day, value in gate.fingerprints(config.lake, days).items() if index.get(day, {}).get("fingerprint") == value]
    if checked:
        events.replace_dates(days, staged, {COMPACTION: config.run_id})
    else:
        events.discard(tag)
    summary["swapped"] = checked
    if summary["swapped"] and passed:  # the same rows as the files a gate passed: still passed (a publish takes them)
        gate.record_validated(config.lake, gate.fingerprints(config.lake, passed), f"{config.run_id}.compact")
    return summary


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return cli.run(lambda: run(config))


def run(config: CompactConfig) -> int:
    with LakeLock(config.lake, f"a compaction ({config.run_id})", wait_seconds=config.lock_wait):
        with JobSession(lambda: spark_session("cloudtrail_compact")) as session:
            summary = compact(config, session, config.closed_at or datetime.now(tz=UTC).date())
    print(json.dumps(summary, indent=2))
    if summary.get("swapped") is False:
        log.error("a compacted date did not hold the same rows as before: nothing swapped, %s is as it was", config.lake.events)
        return cli.FAILED
    return cli.OK
