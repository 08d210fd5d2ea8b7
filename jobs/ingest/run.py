"""One ingest run, as named steps:

open_checkpoint   finish a rebuild's swap a dead run left; mend, read and check the checkpoint (jobs/spark/checkpoint.py), and
                  the ledger's manifests against it; refuse what cannot be mended
deliveries        an S3 landing: fetch what the queue's notifications (or a listing) name into the landing cache
plan              list the landing zone (or the notified files) against the ledger: this run's manifests
deliveries.done   delete the notifications: their files are in the ledger
stream            open the quarantine's Iceberg table, sweep the events', read every manifest not read yet into the
                  tables, sweep again (no Spark when nothing is new)
record_success    the plan's check times and the last clean batch, for the next run
deliveries.prune  an S3 landing on a queue: the cache's retired delivery folders deleted
report            <lake>/reports/ingest/<run id>.json, whatever happened
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from pyspark.sql import SparkSession

from jobs import cli, duck, options
from jobs.ingest import deliveries, stream
from jobs.ingest.config import IngestConfig
from jobs.lake import REASON
from jobs.ledger.planner import Plan, plan_files
from jobs.ledger.store import Entry, check_manifests
from jobs.reporting import tally
from jobs.reporting.report import RunReport, now_iso
from jobs.spark.checkpoint import CheckpointSnapshot, open_for_ingest, record_success
from jobs.spark.logs import last_commit, local_path
from jobs.tables.quarantine import entries_to_replay
from jobs.tables.quarantine_files import quarantine_source
from jobs.tables.tables_of_record import RecordTables, finish_rebuild, held_batches, tables_moved

log = logging.getLogger("cloudtrail_ingest")
SKIPPED_LOGGED = 10


def run(config: IngestConfig, session: Callable[[], SparkSession]) -> RunReport:
    """One ingest run; `session` is called for the SparkSession only if there is work to do."""
    checkpoint = open_checkpoint(config)
    with reported(config, checkpoint) as report:
        with deliveries.taken(config, checkpoint) as fetched:
            files = plan_run(config, checkpoint, fetched.notified if fetched else None)
            if fetched is not None:
                report.deliveries = fetched.summary  # a run that dies deleting its messages still reports what it fetched
                fetched.done(config)
        report.ledger = files.summary()
        explain(files)
        if files.pending == 0 and checkpoint.settled and not tables_moved(config.lake):  # no manifest to read, no table to register
            # A streaming query would find nothing: skip Spark altogether.
            log.info("nothing new in %s since the last successful run; Spark not started", config.landing)
        else:  # a crashed attempt's files are no rows of the tables of record: nothing to sweep
            if fetched is not None:
                report.deliveries["fetched_again"] = deliveries.refetch_uncommitted(config, files)
            spark = session()
            stream.stream(spark, config, checkpoint.watermark, report, RecordTables.opened(spark, config.lake))
        report.watermark_after = _iso(record_success(config.lake, files.check_times).watermark)
        if fetched is not None:
            finished = datetime.now(tz=UTC)
            report.deliveries["delivery_lag"] = deliveries.delivery_lags(files, finished)
            report.deliveries["newest_per_place"] = deliveries.newest_file_per_place(files, finished + config.clock_skew)
            report.deliveries["cache_pruned"] = deliveries.prune(config, files, finished)
    return report


def open_checkpoint(config: IngestConfig) -> CheckpointSnapshot:
    finish_rebuild(config.lake)  # before anything reads the tables
    checkpoint = open_for_ingest(config.lake, held_batches(config.lake))
    check_manifests(checkpoint, config.lake.manifests)
    return checkpoint


def plan_run(config: IngestConfig, checkpoint: CheckpointSnapshot, notified: list[str] | None) -> Plan:
    replay = replay_entries(config) if config.replay else []
    return plan_files(checkpoint, config.lake.manifests, config.landing, config.ledger, config.dedup, replay, notified)


def replay_entries(config: IngestConfig) -> list[Entry]:
    """The landing files (or records of them) the quarantine holds for the run's replay."""
    source = quarantine_source(config.lake)
    if source is None or config.replay is None:
        return []
    rows = duck.connect(config.lake.root).execute(f"select source_file, {REASON}, record_index from {source}").fetchall()
    return entries_to_replay(((local_path(path), reason, index) for path, reason, index in rows), config.replay)


def explain(files: Plan) -> None:
    """What the landing walk passed over, and files left to settle when nothing else is new: an operator's first questions."""
    for skipped in files.skipped[:SKIPPED_LOGGED]:
        log.warning("landing walk passed over %s: %s", skipped.path, skipped.reason)
    if len(files.skipped) > SKIPPED_LOGGED:
        log.warning("landing walk passed over %d more entries (the run report lists them)", len(files.skipped) - SKIPPED_LOGGED)
    if files.settling_files:
        log.info(
            "%d files changed less than the settle time ago: left for a later run, the first due at %s",
            files.settling_files, files.settling_due,
        )  # fmt: skip


@contextmanager
def reported(config: IngestConfig, checkpoint: CheckpointSnapshot) -> Iterator[RunReport]:
    """The run's report, written when the run ends, succeeded or failed."""
    report = RunReport(
        run_id=config.run_id,
        landing=config.bucket.url if config.bucket else str(config.landing),
        lake=str(config.lake.root),
        trigger=config.trigger,
        started_at=now_iso(),
        watermark_before=_iso(checkpoint.watermark),
        dedup_horizon=options.duration_text(config.dedup.horizon),
    )
    try:
        yield report
        report.status = "succeeded"
    except Exception as exc:
        report.status, report.error = "failed", cli.first_line(exc)[:2000]
        raise
    finally:
        if report.status != "succeeded":  # else the run's record_success read the commit log
            report.watermark_after = _iso(last_commit(config.lake.checkpoint).watermark)
        report.finished_at = now_iso()
        path, totals = report.write()
        tally.record(config.lake, totals)
        log.info(
            "run %s %s: %d files, %d records, %d rows written, %d duplicates dropped, %d quarantined; report %s",
            config.run_id, report.status, totals["files_read"], totals["records_read"], totals["rows_written"],
            totals["duplicates_dropped"], totals["quarantined"], path,
        )  # fmt: skip


def _iso(watermark: datetime | None) -> str | None:
    return watermark.isoformat() if watermark else None
