"""Rebuild event dates from the landing files, and commit them to the events table in one snapshot.

Run it with either of:

    spark-submit --py-files build/jobs.zip jobs/rebuild.py --landing DIR --lake DIR --from-date YYYY-MM-DD --to-date YYYY-MM-DD
    python -m jobs.rebuild --landing DIR --lake DIR|s3://BUCKET/PREFIX [--catalog NAME]
        --from-date YYYY-MM-DD --to-date YYYY-MM-DD [--dry-run]
    python -m jobs.rebuild --lake DIR|s3://BUCKET/PREFIX [--catalog NAME] --rollback TAG

For each date, the files that may hold its events are those its rows name in _source_file, those delivered in that
day's folder and the de-duplication horizon's folders after it, and those the ingest job found late events of that
date in. Of these, the files the stream has read (jobs/ledger/planner.py) are read again with the ingest transforms;
files it has not read yet are left to it, and rows of files that cannot be read again (deleted from the landing
zone, or changed and waiting for the stream) are kept from the old rows. Each eventID is kept once. The quarantine
rows of the files read are rebuilt with them.

The new files are written under the table's data folder by the run's tag and pass the critical quality suite; then
one snapshot of the branch `ingest` replaces the dates' files (jobs/tables/events_table.py); the quarantine's reasons
that change are one Iceberg snapshot, staged before it and made current after (jobs/tables/quarantine_table.py). The
tag is the run id (with a suffix when the same run rebuilds again); --rollback TAG undoes both, while the snapshots
they replaced are kept (the publish's --expire-after). Runs under the lake lock, waiting for it (--lock-wait).
--dry-run lists per date the files and bytes it would read and an estimate of the time, and writes nothing.
A date that held rows and would be rebuilt with none is refused, nothing committed, unless --allow-empty: its
landing files were not found. With an s3:// --landing the files are read from the lake's landing cache, and those
whose local copies are gone are fetched from the bucket again first (a dry run lists them as missing).
Report: <lake>/reports/rebuild/<tag>.json. Exit codes (jobs/cli.py): 0 done, 1 the gate failed (nothing
committed) or the run failed, 2 bad arguments, an unsettled checkpoint, dates it would empty or a rollback of
nothing, 75 the lake stayed busy.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict
from datetime import date, timedelta
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import cli, options, storage
from jobs.ingest.deliveries import where_read
from jobs.lake import EVENT_DATE, EVENTS, QUARANTINE, REASON, Lake
from jobs.landing.bucket import BucketLanding, is_bucket
from jobs.ledger.store import MANIFEST_DDL, Entry
from jobs.lock import LakeLock
from jobs.quality.gate import fingerprints, record_validated
from jobs.records import layout
from jobs.records.dedup import Dedup, keep_first_copy
from jobs.records.rows import split_quarantine, stamp_ingest_time
from jobs.records.schema import EVENTS_SCHEMA, QUARANTINE_SCHEMA
from jobs.records.transforms import read_records
from jobs.reporting.report import PartitionStats, RebuildReport, now_iso, read_report
from jobs.spark.logs import local_path
from jobs.spark.session import spark_session
from jobs.tables.events import REBUILD, STAGED_QUARANTINE, events_of_dates, rebuild_tags
from jobs.tables.events_table import EventsTable
from jobs.tables.quarantine_repair import publish_staged
from jobs.tables.quarantine_table import STAGED, QuarantineTable
from jobs.tables.record_table import RollbackRefused
from jobs.tables.staging import Staging
from jobs.tables.tables_of_record import RecordTables, finish_rebuild
from jobs.upkeep.rebuild_plan import (
    DateRebuild,
    EmptiedDates,
    RebuildConfig,
    dry_run_summary,
    emptied_dates,
    plan_rebuild,
    unreadable_sources,
)

log = logging.getLogger("rebuild")


def parse_args(argv: list[str] | None = None) -> RebuildConfig:
    parser = cli.parser("rebuild", __doc__)
    cli.add_landing(parser)
    cli.add_lake(parser)
    cli.add_catalog(parser, namespace=False)
    cli.add_dates(parser, "event date to rebuild")
    parser.add_argument(
        "--dedup-horizon", type=cli.duration, default=options.DEDUP_HORIZON, help="the ingest job's: how long after a date its files arrive"
    )
    parser.add_argument(
        "--source-retention", type=cli.duration, default=options.SOURCE_RETENTION, help="the ingest job's --source-retention"
    )
    parser.add_argument(
        "--keep-replaced", type=cli.duration, default=options.KEEP_REPLACED,
        help="how long a rescale's old state and an earlier release's folders set aside are kept",
    )  # fmt: skip
    cli.add_lock_wait(parser)
    parser.add_argument("--dry-run", action="store_true", help="list what would be read, write nothing")
    parser.add_argument("--allow-empty", action="store_true", help="let a date that held rows be rebuilt with none (else refused)")
    parser.add_argument("--rollback", metavar="TAG", help="undo what the rebuild TAG changed, in one snapshot")
    cli.add_run_id(parser)
    args = parser.parse_args(argv)
    # A rebuild from the landing makes a lake as the ingest does; a rollback needs one.
    lake = cli.lake(parser, args, existing=bool(args.rollback))
    if args.rollback:
        return RebuildConfig(landing="", lake=str(lake.root), dates=(), run_id=args.rollback, rollback=args.rollback, catalog=lake.catalog)
    cli.required(parser, args, "landing", "from_date", "to_date")
    cache = lake.landing_cache
    bucket = BucketLanding.at(args.landing, cache) if is_bucket(args.landing) else None
    return RebuildConfig(
        landing=str(cache) if bucket else os.path.abspath(args.landing),
        bucket=bucket,
        lake=str(lake.root),
        catalog=lake.catalog,
        dates=cli.date_range(parser, args.from_date, args.to_date, "--from-date and --to-date") or (),
        run_id=cli.run_id(args.run_id),
        dedup=Dedup(args.dedup_horizon),
        source_retention=args.source_retention,
        keep_replaced=args.keep_replaced,
        lock_wait=args.lock_wait,
        dry_run=args.dry_run,
        allow_empty=args.allow_empty,
    )


def records_of(spark: SparkSession, files: list[Entry], run_id: str, bucket: BucketLanding | None) -> DataFrame:
    """The files' records, through the ingest job's own chain (jobs/transforms.read_records); an S3 landing's read
    where the ingest reads them (jobs/ingest/deliveries.where_read)."""
    rows = [{**asdict(e), "arrival_ms": e.arrival_ms or e.mtime_ms, "only_records": None, "supersedes": False} for e in files]
    manifest = spark.createDataFrame(rows, MANIFEST_DDL).repartition(max(1, min(len(rows) // 8, 64)))
    if bucket is not None:
        manifest = where_read(manifest, bucket, bucket.from_store(spark))
    return read_records(manifest, run_id).transform(stamp_ingest_time)


def rebuilt_events(records: DataFrame, old: DataFrame | None, plans: list[DateRebuild], dedup: Dedup) -> tuple[DataFrame, DataFrame]:
    """(candidates, events): rows of the dates from the files read plus the rows kept from unreadable
    files, before and after de-duplication on eventID."""
    dates = [p.event_date for p in plans]
    fresh = records.where(F.col("_reason").isNull() & F.col(EVENT_DATE).isin(dates))
    candidates = fresh.select(*EVENTS_SCHEMA.fieldNames(), "_arrival_time", "_record_index")
    unreadable = unreadable_sources(plans)
    if old is not None and unreadable:
        kept = old.where(F.col("_source_file").isin(unreadable))
        candidates = candidates.unionByName(
            kept.withColumn("_arrival_time", F.lit(None).cast("timestamp")).withColumn("_record_index", F.lit(None).cast("long"))
        )
    return candidates, candidates.transform(keep_first_copy, dedup).select(*EVENTS_SCHEMA.fieldNames())


def rebuilt_quarantine(table: QuarantineTable, records: DataFrame, dates: list[date]) -> tuple[DataFrame | None, set[str]]:
    """The quarantine partitions that change, rebuilt; and the reasons they are.

    An old quarantine row of a file read goes when the new read accounts for its record: in
    quarantine again, or an event of a rebuilt date (a whole-file row: when every record of
    the file is accounted for). A new quarantine row comes in unless its record is dated
    outside the rebuilt dates, whose partitions still hold what they held."""
    in_dates = F.col(EVENT_DATE).isNull() | F.col(EVENT_DATE).isin(dates)
    new = split_quarantine(records.where(F.col("_reason").isNotNull() & in_dates))
    accounted = records.select(
        F.col("_source_file").alias("source_file"),
        F.col("_record_index").cast("int").alias("record_index"),
        (F.col("_reason").isNotNull() & in_dates | F.col("_reason").isNull() & F.col(EVENT_DATE).isin(dates)).alias("accounted"),
    )
    new_reasons = {row[REASON] for row in new.select(REASON).distinct().collect()}
    old = table.rows()
    if old.isEmpty():
        return (new if new_reasons else None), new_reasons
    positions = accounted.where("accounted").select("source_file", "record_index").distinct().withColumn("_position", F.lit(True))
    whole = accounted.groupBy("source_file").agg(F.bool_and("accounted").alias("_whole"))
    marked = old.join(positions, ["source_file", "record_index"], "left").join(whole, ["source_file"], "left")
    goes = F.coalesce(F.when(F.col("record_index").isNull(), F.col("_whole")).otherwise(F.col("_position")), F.lit(False))
    marked = marked.withColumn("_goes", goes)
    gone_reasons = {row[REASON] for row in marked.where("_goes").select(REASON).distinct().collect()}
    reasons = new_reasons | gone_reasons
    if not reasons:
        return None, set()
    kept = marked.where(~F.col("_goes") & F.col(REASON).isin(sorted(reasons))).select(*QUARANTINE_SCHEMA.fieldNames())
    return kept.unionByName(new), reasons


def purge_replaced(lake: Lake, keep: timedelta) -> None:
    """Delete what <lake>/_replaced/ holds older than `keep` (a rescale's old state, an earlier release's folders)."""
    cutoff = time.time() - keep.total_seconds()
    for folder in lake.replaced_root.glob("*/*"):
        if folder.is_dir() and folder.stat().st_mtime < cutoff:
            storage.remove_tree(folder)
            log.info("deleted %s (older than --keep-replaced)", folder)


def free_tag(lake: Lake, run_id: str) -> str:
    """The run id, or the run id with a suffix when that run has rebuilt before (an Airflow retry)."""
    tags = (run_id, *(f"{run_id}.{n}" for n in range(1, 1000)))
    taken = rebuild_tags(lake)
    return next(t for t in tags if t not in taken)


def partition_stats(
    plan: DateRebuild, figures: dict[str, dict[str, int]], per_file: dict[str, int], kept: dict[str, int]
) -> PartitionStats:
    """A rebuilt date's figures: rows before and after, files read, duplicates dropped, rows quarantined and kept."""
    day = plan.event_date.isoformat()
    return PartitionStats(
        rows_before=figures["rows_before"].get(day, 0),
        rows_after=figures["rows_after"].get(day, 0),
        files_read=len(plan.files),
        duplicates_dropped=figures["candidates"].get(day, 0) - figures["rows_after"].get(day, 0),
        quarantined=sum(per_file.get(entry.path, 0) for entry in plan.files),
        rows_kept_from_unreadable_files=kept.get(day, 0),
        data_files_lost=len(plan.lost),
    )


def rebuild(config: RebuildConfig, spark: SparkSession, plans: list[DateRebuild], report: RebuildReport) -> bool:
    """Build, check and commit the dates of `plans`; False when the gate failed (nothing committed)."""
    from jobs.quality import validate_events  # imports GX only when a rebuild gets this far

    lake, tag = config.layout, report.tag
    staging, events_table = Staging(lake, tag), EventsTable(spark, lake)
    files = sorted({entry.path: entry for p in plans for entry in p.files}.values(), key=lambda e: e.path)
    dates = [p.event_date for p in plans]
    # Rows say the rebuild wrote them: the gate's run check compares the ingest run's rows with its report.
    records = records_of(spark, files, f"rebuild:{tag}", config.bucket).persist()
    old = events_of_dates(spark, lake, config.dates, [storage.at(path) for p in plans for path in p.lost])
    candidates, events = rebuilt_events(records, old, plans, config.dedup)
    staged_events, staged_files = events_table.stage(layout.ordered(events, EVENT_DATE), tag)
    quarantine_table = QuarantineTable(spark, lake)
    quarantine, reasons = rebuilt_quarantine(quarantine_table, records, dates)
    staged_quarantine = staging.write(QUARANTINE, quarantine) if quarantine is not None else None  # before records go

    counts = {
        "rows_before": old.groupBy(EVENT_DATE).count() if old is not None else None,
        "candidates": candidates.groupBy(EVENT_DATE).count(),
        "rows_after": staged_events.groupBy(EVENT_DATE).count(),
    }
    figures = {name: {str(r[0]): r[1] for r in frame.collect()} if frame is not None else {} for name, frame in counts.items()}
    quarantined = records.where(F.col("_reason").isNotNull()).groupBy("_source_file").count().collect()
    per_file = {local_path(r[0]): r[1] for r in quarantined}
    kept_unreadable = old.where(F.col("_source_file").isin(unreadable_sources(plans))) if old is not None else None
    kept = {str(r[0]): r[1] for r in kept_unreadable.groupBy(EVENT_DATE).count().collect()} if kept_unreadable is not None else {}
    report.partitions.update({p.event_date.isoformat(): asdict(partition_stats(p, figures, per_file, kept)) for p in plans})
    records.unpersist()

    passed = True
    if any(figures["rows_after"].values()):
        gate = validate_events.ValidateConfig(lake, tag, config.dates, options.QUARANTINE_THRESHOLD, lake.gate_report(f"{tag}.rebuild"))
        checks = validate_events.with_check_columns(staged_events)
        frames: dict[str, Any] = dict.fromkeys(validate_events.EVENT_SUITES, checks)
        report.gate = validate_events.judge(frames, gate, [str(day) for day in dates])["verdict"]
        passed = report.gate == "passed"
    report.quarantine_partitions_replaced = sorted(reasons)
    emptied = [] if config.allow_empty else emptied_dates(lake, figures["rows_before"], figures["rows_after"], [str(d) for d in dates])
    if emptied or not passed:
        staging.discard()
        events_table.discard(tag)
    if emptied:
        raise EmptiedDates(
            f"event dates {', '.join(emptied)} held rows and would be rebuilt with none: none of their landing files was found "
            f"under {config.landing} (is it the landing zone these rows came from?). Nothing was committed; "
            "--allow-empty rebuilds them empty"
        )
    if passed:
        committed(RecordTables(events_table, quarantine_table), tag, dates, staged_files, staged_quarantine, reasons)
    staging.discard()  # the quarantine's staged copy goes
    return passed


def committed(tables: RecordTables, tag: str, dates: list[date], files: list[str], quarantine: DataFrame | None, reasons: set[str]) -> None:
    """The rebuild's dates replaced in one snapshot of the events; the quarantine's change staged first and made current
    once the events' commit names it (the next command finishes a rebuild that dies between:
    jobs/tables/tables_of_record.py). The files committed are those its gate passed: what a publish may take."""
    lake, summary = tables.events.lake, {REBUILD: tag}
    if quarantine is not None:
        summary[STAGED_QUARANTINE] = str(tables.quarantine.stage(quarantine, sorted(reasons), tag))
    tables.events.replace_dates(dates, files, summary)
    if STAGED_QUARANTINE in summary:
        publish_staged(lake, {STAGED: summary[STAGED_QUARANTINE]})
    record_validated(lake, fingerprints(lake, [str(day) for day in dates]), f"{tag}.rebuild")


def run(config: RebuildConfig, session: Any) -> RebuildReport:
    lake = config.layout
    started = time.monotonic()
    dates = [d.isoformat() for d in config.dates]
    report = RebuildReport(config.run_id, free_tag(lake, config.run_id), now_iso(), dates, dry_run=config.dry_run)
    try:
        finish_rebuild(lake)
        plans = plan_rebuild(config)
        summary = dry_run_summary(plans)
        if config.dry_run:
            report.partitions = summary["dates"]
            report.status = "dry_run"
            return report
        log.info(
            "rebuilding %d dates from %d files (%d bytes), about %d s",
            len(plans), summary["files"], summary["bytes"], summary["estimated_seconds"],
        )  # fmt: skip
        report.status = "succeeded" if rebuild(config, session(), plans, report) else "gate_failed"
        purge_replaced(lake, config.keep_replaced)
    except EmptiedDates as exc:
        report.status, report.error = "refused", str(exc)
    except Exception as exc:
        report.status, report.error = "failed", str(exc).splitlines()[0][:2000]
        raise
    finally:
        report.seconds = round(time.monotonic() - started, 1)
        if not config.dry_run:
            report.write(lake)
    return report


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return cli.run(lambda: rollback(config) if config.rollback else rebuild_dates(config))


def rollback(config: RebuildConfig) -> int:
    lake, tag = config.layout, str(config.rollback)
    with LakeLock(lake, "a rollback", wait_seconds=config.lock_wait):
        finish_rebuild(lake)
        spark = spark_session("cloudtrail_rebuild")
        restored = [name for name, table in ((EVENTS, EventsTable), (QUARANTINE, QuarantineTable)) if table(spark, lake).roll_back(tag)]
    if not restored:
        report = read_report(lake.rebuild_report(tag))
        why = (
            f"its snapshots expired (--expire-after of the publish) or it changed nothing (status {report.get('status')})"
            if report
            else "no rebuild ran with that tag"
        )
        raise RollbackRefused(f"no table holds a change of rebuild {tag}: {why}; nothing rolled back")
    log.info("rolled back what %s changed in %s", tag, restored)
    return cli.OK


def rebuild_dates(config: RebuildConfig) -> int:
    if config.dry_run:
        report = run(config, None)
    else:
        with LakeLock(config.layout, "a rebuild", wait_seconds=config.lock_wait):
            report = run(config, lambda: spark_session("cloudtrail_rebuild"))
    print(json.dumps(asdict(report), indent=2))
    if report.status == "refused":
        log.error("%s", report.error)
        return cli.USAGE
    if report.status == "gate_failed":
        log.error("the rebuilt dates failed the critical suite: nothing was committed; the old rows stay")
        return cli.FAILED
    log.info("rebuild %s %s in %.1f s: %s", report.tag, report.status, report.seconds, report.partitions)
    return cli.OK
